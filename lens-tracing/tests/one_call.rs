//! The bridge in one call: the handle telemetry setup returns hands out the
//! bridge with the rules of the configuration setup read (the program's own
//! prefix, no second read), and a rule whose prefix matched no callsite is
//! reported with the nearest targets the bridge saw.
//!
//! Setup is process-global, so this file is its own test binary with a
//! single test. Run with `cargo test -p lens-tracing --features testing
//! --test one_call`.

use std::time::Duration;

use lens_fallbacks::{SetupOptions, Telemetry};
use lens_tracing::TelemetryExt as _;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use tracing_subscriber::layer::SubscriberExt as _;

/// The target of candle's layer spans (`candle_transformers::models::with_tracing`).
const CANDLE_TARGET: &str = "candle_transformers::models::with_tracing";

#[test]
fn the_handle_hands_out_the_bridge_with_the_programs_own_rules_and_names_a_rule_that_matched_nothing() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::builder("MYJOB_OTEL")
        .env([
            ("MYJOB_OTEL_ENABLED", "1"),
            ("MYJOB_OTEL_SPAN_GROUPS", "forward_backward"),
            ("MYJOB_OTEL_METRICS_ENABLED", "0"),
            // The rule the guide gives, and the one it used to give.
            ("MYJOB_OTEL_TRACING_GROUPS", "candle_transformers=forward_backward:per_entry, candle=forward_backward"),
        ])
        .options(SetupOptions::new().with_span_exporter(exporter.clone()))
        .setup()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(telemetry.tracing_layer());
    tracing::subscriber::with_default(subscriber, || {
        // Made once with the model, entered on every forward pass.
        let linear = tracing::span!(target: CANDLE_TARGET, tracing::Level::TRACE, "linear");
        for _ in 0..3 {
            let _forward = linear.enter();
        }
        let _not_recorded = tracing::info_span!(target: "my_app", "handle").entered();
    });

    let unmatched: Vec<String> = telemetry.tracing_rules().unmatched().iter().map(ToString::to_string).collect();
    assert_eq!(unmatched, [format!("rule candle=forward_backward matched nothing; seen: {CANDLE_TARGET}")]);

    // Read before shutdown, which empties the in-memory exporter.
    telemetry.force_flush(Duration::from_secs(5));
    let names: Vec<String> = exporter.get_finished_spans().unwrap().iter().map(|s| s.name.to_string()).collect();
    assert_eq!(names, ["linear", "linear", "linear"], "one span per entry, and nothing of `my_app`");
    assert!(telemetry.shutdown(Duration::from_secs(5)).performed);
}
