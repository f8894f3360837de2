//! The five `gym.*` instruments.

use lens_instruments::gym::{self, GymMetrics, GymValues, record_gym_metrics};
use lens_instruments::{InstrumentKind, buckets, semconv};

use crate::common::{Harness, Number, bucket_of, names};

/// The original's `record_gym_metrics` instruments, written out: name,
/// kind, unit, number type.
const EXPECTED: [(&str, InstrumentKind, &str, Number); 5] = [
    ("gym.rollout.duration_ms", InstrumentKind::Histogram, "ms", Number::F64),
    ("gym.server.request_duration_ms", InstrumentKind::Histogram, "ms", Number::F64),
    ("gym.servers.active", InstrumentKind::Gauge, "", Number::U64),
    ("gym.verify.duration_ms", InstrumentKind::Histogram, "ms", Number::F64),
    ("gym.verify.success_rate", InstrumentKind::Gauge, "", Number::F64),
];

fn all_values() -> GymValues {
    GymValues {
        server_request_duration_ms: Some(42.0),
        rollout_duration_ms: Some(5_000.0),
        verify_duration_ms: Some(120.0),
        verify_success_rate: Some(0.87),
        active_servers: Some(4),
    }
}

fn each_field_alone() -> Vec<(GymValues, &'static str, f64)> {
    let none = GymValues::default;
    vec![
        (GymValues { server_request_duration_ms: Some(42.0), ..none() }, "gym.server.request_duration_ms", 42.0),
        (GymValues { rollout_duration_ms: Some(5_000.0), ..none() }, "gym.rollout.duration_ms", 5_000.0),
        (GymValues { verify_duration_ms: Some(120.0), ..none() }, "gym.verify.duration_ms", 120.0),
        (GymValues { verify_success_rate: Some(0.87), ..none() }, "gym.verify.success_rate", 0.87),
        (GymValues { active_servers: Some(4), ..none() }, "gym.servers.active", 4.0),
    ]
}

#[test]
fn all_five_instruments_have_the_spec_names_kinds_units_and_descriptions() {
    let harness = Harness::new();
    record_gym_metrics(&GymMetrics::new(&harness.meter()), &all_values());

    let exported = harness.collect();
    let got: Vec<_> = exported
        .iter()
        .map(|metric| (metric.name.as_str(), metric.kind, metric.unit.as_str(), metric.number))
        .collect();
    assert_eq!(got, EXPECTED);
    for metric in &exported {
        let descriptor = gym::INSTRUMENTS.iter().find(|descriptor| descriptor.name == metric.name).unwrap();
        assert_eq!(metric.description, descriptor.description);
        assert!(metric.point().attributes.is_empty(), "{} carries attributes", metric.name);
    }
    assert_eq!(gym::VERIFY_SUCCESS_RATE.name, semconv::GYM_VERIFY_SUCCESS_RATE);
}

#[test]
fn recorded_values_equal_the_arguments() {
    let harness = Harness::new();
    GymMetrics::new(&harness.meter()).record(&all_values());
    for (_, name, value) in each_field_alone() {
        let metric = harness.metric(name);
        let point = metric.point();
        match metric.kind {
            InstrumentKind::Gauge => assert_eq!(point.value, value, "{name}"),
            _ => assert_eq!((point.count, point.sum), (1, value), "{name}"),
        }
    }
}

#[test]
fn all_none_records_nothing() {
    let harness = Harness::new();
    GymMetrics::new(&harness.meter()).record(&GymValues::default());
    assert_eq!(harness.collect(), []);
}

#[test]
fn each_field_alone_records_only_its_instrument() {
    for (values, name, value) in each_field_alone() {
        let harness = Harness::new();
        GymMetrics::new(&harness.meter()).record(&values);
        let exported = harness.collect();
        assert_eq!(names(&exported), [name]);
        let point = exported[0].point();
        assert_eq!(if exported[0].kind == InstrumentKind::Gauge { point.value } else { point.sum }, value, "{name}");
    }
}

#[test]
fn zero_active_servers_is_recorded() {
    let harness = Harness::new();
    let metrics = GymMetrics::new(&harness.meter());
    metrics.record(&GymValues { active_servers: Some(4), ..Default::default() });
    metrics.record(&GymValues { active_servers: Some(0), verify_success_rate: Some(0.0), ..Default::default() });
    assert_eq!(harness.metric("gym.servers.active").point().value, 0.0);
    assert_eq!(harness.metric("gym.verify.success_rate").point().value, 0.0);
}

#[test]
fn duration_histograms_use_millisecond_boundaries() {
    let harness = Harness::new();
    GymMetrics::new(&harness.meter()).record(&all_values());
    for (name, bounds, value) in [
        ("gym.server.request_duration_ms", buckets::REQUEST_DURATION_MS, 42.0),
        ("gym.verify.duration_ms", buckets::REQUEST_DURATION_MS, 120.0),
        ("gym.rollout.duration_ms", buckets::ROLLOUT_DURATION_MS, 5_000.0),
    ] {
        let metric = harness.metric(name);
        let point = metric.point();
        assert_eq!(point.bounds, bounds, "{name}");
        // Millisecond values spread over several buckets, not all into one.
        assert!(point.bounds.len() >= 15 && point.bounds.last() >= Some(&300_000.0), "{name}");
        assert_eq!(point.bucket_counts[bucket_of(&point.bounds, value)], 1, "{name}");
    }
}
