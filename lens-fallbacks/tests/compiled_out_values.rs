//! With the `otel` feature off (`cargo test -p lens-fallbacks
//! --no-default-features`), no telemetry value stops the program (SPEC A22):
//! with telemetry enabled, a bad value is a warning naming the variable and
//! the value, and the handle says telemetry is off. Its own test binary, so
//! that the once-per-process compiled-out warning of `compiled_out.rs` is
//! given there.

#![cfg(not(feature = "otel"))]

use lens_fallbacks::Telemetry;

/// A bad exporter, a bad span-group spec, bad `tracing` rules and a bad rank
/// variable, with telemetry enabled: each a warning, never an error.
#[test]
fn no_telemetry_value_stops_a_program_built_without_otel() {
    for (key, value) in [
        ("MYJOB_OTEL_EXPORTER", "otlpp"),
        ("MYJOB_OTEL_SPAN_GROUPS", "per_stpe"),
        ("MYJOB_OTEL_TRACING_GROUPS", "candle=stpe"),
        ("MYJOB_OTEL_ENABLED", "maybe"),
        ("RANK", "two"),
    ] {
        let enabled = if key == "MYJOB_OTEL_ENABLED" { value } else { "1" };
        let telemetry = Telemetry::builder("MYJOB_OTEL")
            .env([("MYJOB_OTEL_ENABLED", enabled), (key, value)])
            .setup()
            .unwrap_or_else(|error| panic!("{key}={value} stopped the program: {error}"));
        assert!(!telemetry.is_enabled());
        assert!(
            telemetry.warnings().iter().any(|w| w.contains(key) && w.contains(value)),
            "{key}={value}: {:?}",
            telemetry.warnings()
        );
    }
}
