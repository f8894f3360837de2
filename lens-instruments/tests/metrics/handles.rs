//! Instruments are created once per handle; handles on different meters are
//! independent; no-op handles record nothing.

use lens_instruments::gym::{GymMetrics, GymValues};
use lens_instruments::rl::{RlMetrics, RlValues};
use lens_instruments::{InferenceMetrics, InferenceValues};

use crate::common::{Harness, names};

#[test]
fn repeated_records_on_one_handle_accumulate_in_one_stream_per_instrument() {
    let harness = Harness::new();
    let metrics = RlMetrics::new(&harness.meter());
    for duration in [100.0, 200.0, 300.0] {
        metrics.record(&RlValues { rollout_duration_ms: Some(duration), ..Default::default() });
    }
    let exported = harness.collect();
    assert_eq!(names(&exported), ["rl.rollout.duration_ms"]);
    let point = exported[0].point();
    assert_eq!((point.count, point.sum), (3, 600.0));
}

#[test]
fn two_handles_on_two_meters_are_independent() {
    let (first, second) = (Harness::new(), Harness::new());
    let first_metrics = InferenceMetrics::new(&first.meter());
    let _second_metrics = InferenceMetrics::new(&second.meter());

    first_metrics.record(&InferenceValues { request_duration_s: Some(0.2), ..Default::default() });

    assert_eq!(names(&first.collect()), ["gen_ai.server.request.duration"]);
    assert_eq!(second.collect(), [], "a handle on another meter records nothing of the first's");
}

#[test]
fn two_handles_and_a_clone_on_one_meter_feed_one_stream() {
    let harness = Harness::new();
    let meter = harness.meter();
    let (first, second) = (GymMetrics::new(&meter), GymMetrics::new(&meter));
    let clone = first.clone();
    for metrics in [&first, &second, &clone] {
        metrics.record(&GymValues { verify_duration_ms: Some(10.0), ..Default::default() });
    }
    let exported = harness.collect();
    assert_eq!(names(&exported), ["gym.verify.duration_ms"], "no duplicate instrument");
    assert_eq!(exported[0].point().count, 3);
}

#[test]
fn noop_handles_record_nothing_and_do_not_panic() {
    let harness = Harness::new();
    InferenceMetrics::noop().record(&InferenceValues {
        request_duration_s: Some(1.0),
        input_tokens: Some(1),
        output_tokens: Some(1),
        model: Some("m"),
        ..Default::default()
    });
    RlMetrics::noop().record(&RlValues {
        reward_mean: Some(1.0),
        rollout_duration_ms: Some(1.0),
        ..Default::default()
    });
    GymMetrics::noop().record(&GymValues { active_servers: Some(1), ..Default::default() });
    // The harness's own provider saw nothing either: no global state is involved.
    assert_eq!(harness.collect(), []);
}

#[test]
fn recording_after_the_provider_shut_down_does_not_panic() {
    let harness = Harness::new();
    let metrics = RlMetrics::new(&harness.meter());
    drop(harness);
    metrics.record(&RlValues { reward_mean: Some(0.5), generation_duration_ms: Some(5.0), ..Default::default() });
}
