//! The eleven `rl.*` instruments.

use lens_instruments::rl::{self, RlMetrics, RlValues, record_rl_metrics};
use lens_instruments::{InstrumentKind, semconv};

use crate::common::{Harness, Number, bucket_of, names};

/// The original's `record_rl_metrics` instruments, written out: name, kind,
/// unit.
const EXPECTED: [(&str, InstrumentKind, &str); 11] = [
    ("rl.entropy", InstrumentKind::Gauge, ""),
    ("rl.generation.duration_ms", InstrumentKind::Histogram, "ms"),
    ("rl.grad_norm", InstrumentKind::Gauge, ""),
    ("rl.kl_divergence", InstrumentKind::Gauge, ""),
    ("rl.learning_rate", InstrumentKind::Gauge, ""),
    ("rl.policy_loss", InstrumentKind::Gauge, ""),
    ("rl.response_length.mean", InstrumentKind::Gauge, ""),
    ("rl.reward.mean", InstrumentKind::Gauge, ""),
    ("rl.rollout.duration_ms", InstrumentKind::Histogram, "ms"),
    ("rl.throughput.tokens_per_sec", InstrumentKind::Gauge, "{token}/s"),
    ("rl.value_loss", InstrumentKind::Gauge, ""),
];

fn all_values() -> RlValues {
    RlValues {
        reward_mean: Some(0.75),
        kl_divergence: Some(0.01),
        policy_loss: Some(0.3),
        value_loss: Some(0.5),
        entropy: Some(2.1),
        response_length_mean: Some(128.0),
        grad_norm: Some(1.5),
        learning_rate: Some(3e-4),
        throughput_tokens_per_sec: Some(12_000.0),
        generation_duration_ms: Some(450.0),
        rollout_duration_ms: Some(2300.0),
    }
}

/// Each field alone, with the metric it must land in and its value.
fn each_field_alone() -> Vec<(RlValues, &'static str, f64)> {
    let none = RlValues::default;
    vec![
        (RlValues { reward_mean: Some(0.75), ..none() }, "rl.reward.mean", 0.75),
        (RlValues { kl_divergence: Some(0.01), ..none() }, "rl.kl_divergence", 0.01),
        (RlValues { policy_loss: Some(0.3), ..none() }, "rl.policy_loss", 0.3),
        (RlValues { value_loss: Some(0.5), ..none() }, "rl.value_loss", 0.5),
        (RlValues { entropy: Some(2.1), ..none() }, "rl.entropy", 2.1),
        (RlValues { response_length_mean: Some(128.0), ..none() }, "rl.response_length.mean", 128.0),
        (RlValues { grad_norm: Some(1.5), ..none() }, "rl.grad_norm", 1.5),
        (RlValues { learning_rate: Some(3e-4), ..none() }, "rl.learning_rate", 3e-4),
        (RlValues { throughput_tokens_per_sec: Some(12_000.0), ..none() }, "rl.throughput.tokens_per_sec", 12_000.0),
        (RlValues { generation_duration_ms: Some(450.0), ..none() }, "rl.generation.duration_ms", 450.0),
        (RlValues { rollout_duration_ms: Some(2300.0), ..none() }, "rl.rollout.duration_ms", 2300.0),
    ]
}

#[test]
fn all_eleven_instruments_have_the_spec_names_kinds_units_and_descriptions() {
    let harness = Harness::new();
    record_rl_metrics(&RlMetrics::new(&harness.meter()), &all_values());

    let exported = harness.collect();
    let got: Vec<_> = exported.iter().map(|metric| (metric.name.as_str(), metric.kind, metric.unit.as_str())).collect();
    assert_eq!(got, EXPECTED);
    for metric in &exported {
        let descriptor = rl::INSTRUMENTS.iter().find(|descriptor| descriptor.name == metric.name).unwrap();
        assert_eq!(metric.description, descriptor.description);
        assert!(!metric.description.is_empty(), "{} has no description", metric.name);
        assert_eq!(metric.number, Number::F64, "{}", metric.name);
        assert!(metric.point().attributes.is_empty(), "{} carries attributes", metric.name);
    }
}

#[test]
fn gauge_names_are_the_semconv_keys() {
    let pairs = [
        (rl::REWARD_MEAN.name, semconv::RL_REWARD_MEAN),
        (rl::KL_DIVERGENCE.name, semconv::RL_KL_DIVERGENCE),
        (rl::POLICY_LOSS.name, semconv::RL_POLICY_LOSS),
        (rl::VALUE_LOSS.name, semconv::RL_VALUE_LOSS),
        (rl::ENTROPY.name, semconv::RL_ENTROPY),
        (rl::RESPONSE_LENGTH_MEAN.name, semconv::RL_RESPONSE_LENGTH_MEAN),
        (rl::GRAD_NORM.name, semconv::RL_GRAD_NORM),
        (rl::LEARNING_RATE.name, semconv::RL_LEARNING_RATE),
        (rl::THROUGHPUT_TOKENS_PER_SEC.name, semconv::RL_THROUGHPUT_TOKENS_PER_SEC),
    ];
    for (name, key) in pairs {
        assert_eq!(name, key);
    }
}

#[test]
fn recorded_values_equal_the_arguments() {
    let harness = Harness::new();
    RlMetrics::new(&harness.meter()).record(&all_values());
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
    RlMetrics::new(&harness.meter()).record(&RlValues::default());
    assert_eq!(harness.collect(), []);
}

#[test]
fn each_field_alone_records_only_its_instrument() {
    for (values, name, value) in each_field_alone() {
        let harness = Harness::new();
        RlMetrics::new(&harness.meter()).record(&values);
        let exported = harness.collect();
        assert_eq!(names(&exported), [name]);
        let point = exported[0].point();
        assert_eq!(if exported[0].kind == InstrumentKind::Gauge { point.value } else { point.sum }, value, "{name}");
    }
}

#[test]
fn zero_is_a_value_and_a_gauge_keeps_the_latest() {
    let harness = Harness::new();
    let metrics = RlMetrics::new(&harness.meter());
    metrics.record(&RlValues { policy_loss: Some(0.9), ..Default::default() });
    metrics.record(&RlValues { policy_loss: Some(0.0), grad_norm: Some(0.0), ..Default::default() });
    assert_eq!(harness.metric("rl.policy_loss").point().value, 0.0);
    assert_eq!(harness.metric("rl.grad_norm").point().value, 0.0);
}

#[test]
fn duration_histograms_use_millisecond_boundaries_from_10_ms_to_10_min() {
    let harness = Harness::new();
    RlMetrics::new(&harness.meter()).record(&all_values());
    for (name, value) in [("rl.generation.duration_ms", 450.0), ("rl.rollout.duration_ms", 2300.0)] {
        let metric = harness.metric(name);
        let point = metric.point();
        assert_eq!(point.bounds, lens_instruments::buckets::ROLLOUT_DURATION_MS, "{name}");
        assert_eq!((point.bounds.first(), point.bounds.last()), (Some(&10.0), Some(&600_000.0)));
        assert_eq!(point.bucket_counts[bucket_of(&point.bounds, value)], 1, "{name}");
    }
}
