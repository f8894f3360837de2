//! The control file applied at `Training::iteration`, against the SDK's
//! in-memory exporters: a window that narrows the span groups and pauses
//! the per-rank counters holds for exactly its iterations, the generation
//! gauge follows, and the interval's span gets the change events. (The
//! multi-rank behaviour is the simulator's `tests/e2e_control.rs`.)
//!
//! Its own test binary: the gate is process-wide.

#![cfg(feature = "testing")]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::time::Duration;

use lens_fallbacks::config::LensConfig;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::{RankContext, SetupOptions, SpanGroup, managed_span, setup_telemetry};
use lens_training::names::{CONTROL_CHANGE_EVENT, CONTROL_GENERATION, ITERATIONS, spans};
use lens_training::{RankCoordinates, Training, TrainingOptions};
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};

/// The latest value of the u64 counter or gauge `name`.
fn last_u64(metrics: &InMemoryMetricExporter, name: &str) -> Option<u64> {
    let mut value = None;
    for rm in metrics.get_finished_metrics().unwrap() {
        for sm in rm.scope_metrics() {
            for metric in sm.metrics().filter(|m| m.name() == name) {
                match metric.data() {
                    AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                        value = sum.data_points().map(|p| p.value()).last().or(value);
                    }
                    AggregatedMetrics::U64(MetricData::Gauge(gauge)) => {
                        value = gauge.data_points().map(|p| p.value()).last().or(value);
                    }
                    _ => {}
                }
            }
        }
    }
    value
}

#[test]
fn a_window_narrows_the_groups_and_pauses_the_counters_for_exactly_its_iterations() {
    let dir = std::env::temp_dir().join(format!("lens-training-control-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = dir.join("control.json");
    std::fs::write(
        &file,
        r#"{"generation": 4, "span_groups": "default", "rank_metrics": false, "hang_timeout_s": 0,
            "from_iteration": 3, "until_iteration": 5}"#,
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let span_exporter = KeepingSpanExporter::default();
    let metrics = InMemoryMetricExporter::default();
    let config = LensConfig {
        enabled: true,
        rank_metrics: true,
        span_groups: "all".to_string(),
        run_id: "control-test".to_string(),
        control_file: Some(file.clone()),
        control_poll: Duration::from_millis(20),
        ..LensConfig::default()
    };
    let options = SetupOptions::new()
        .with_env(BTreeMap::<String, String>::new())
        .with_span_exporter(span_exporter.clone())
        .with_metric_exporter(metrics.clone());
    let telemetry = Arc::new(setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup"));
    let coordinates = RankCoordinates { rank: 0, local_rank: 0, pipeline: 0, tensor: 0, data: 0 };
    let training = Training::new(&telemetry, TrainingOptions::new(coordinates));
    {
        let _interval = managed_span(SpanGroup::JOB, "interval", []);
        for counter in 0..8 {
            drop(training.iteration(counter));
            training.log_interval();
        }
    }
    training.finish();
    drop(training);
    let telemetry = Arc::try_unwrap(telemetry).expect("the only handle");
    assert!(telemetry.shutdown(Duration::from_secs(5)).completed());

    let finished = span_exporter.get_finished_spans().unwrap();
    let iterations: Vec<i64> = finished
        .iter()
        .filter(|s| s.name == spans::ITERATION)
        .filter_map(|s| s.attributes.iter().find(|kv| kv.key.as_str() == "dl.training.iteration"))
        .map(|kv| kv.value.to_string().parse().unwrap())
        .collect();
    let mut sorted = iterations.clone();
    sorted.sort_unstable();
    // The file counts as the loop does (the counter `Training::iteration`
    // gets); the generic span's `dl.training.iteration` is one more.
    assert_eq!(sorted, [1, 2, 3, 7, 8], "`default` holds no step group: counters 3 to 5 are not recorded");
    let interval = finished.iter().find(|s| s.name == "interval").expect("the interval");
    let events: Vec<&str> = interval.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(events, [CONTROL_CHANGE_EVENT, CONTROL_CHANGE_EVENT], "the window's start and end");
    // Paused during 3..=5: 5 of 8 iterations counted.
    assert_eq!(last_u64(&metrics, ITERATIONS.name), Some(5));
    assert_eq!(last_u64(&metrics, CONTROL_GENERATION.name), Some(4));
    let _ = std::fs::remove_dir_all(&dir);
}
