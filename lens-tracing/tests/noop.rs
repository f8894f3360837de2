//! The bridge with nothing to record: without `otel`, or before setup, the
//! bridge's filter turns every callsite off for the bridge alone, so a span
//! with no other layer is disabled (it costs what a filtered-out callsite
//! costs) and the application's own calls behave as without the bridge.
//! Compiled in both feature modes (`cargo test -p lens-tracing --test noop`,
//! with and without `--no-default-features`).

use lens_fallbacks::groups::LENS_CATALOG;
use lens_fallbacks::tracing_rules::TracingRules;
use tracing_subscriber::layer::SubscriberExt as _;

#[test]
fn with_nothing_to_record_every_callsite_is_off_for_the_bridge() {
    let rules = TracingRules::parse("*=job, tower_http=job", &LENS_CATALOG).unwrap();
    let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules));
    let answer = tracing::subscriber::with_default(subscriber, || {
        // The bridge alone wants no level: `tracing`'s global check stops
        // every callsite, as with no subscriber.
        assert_eq!(tracing::level_filters::LevelFilter::current(), tracing::level_filters::LevelFilter::OFF);
        let span = tracing::info_span!(target: "tower_http::trace", "request", method = "GET");
        assert!(span.is_disabled());
        lens_tracing::set_parent(&span, &lens_fallbacks::RemoteContext::none());
        assert!(!lens_tracing::context_of(&span).is_valid());
        let _entered = span.enter();
        40 + 2
    });
    assert_eq!(answer, 42);
}

/// The one-call form in both builds: without `otel` the handle says
/// telemetry is off, its bridge records nothing, and a bad telemetry value
/// is a warning; with `otel` the same configuration is an error.
#[test]
fn the_one_call_bridge_follows_the_facade() {
    use lens_tracing::TelemetryExt as _;

    let bad = [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_EXPORTER", "otlpp")];
    let loaded = lens_fallbacks::Telemetry::builder("MYJOB_OTEL").env(bad).setup();
    if lens_fallbacks::setup::COMPILED_IN {
        let error = loaded.unwrap_err().to_string();
        assert!(error.contains("MYJOB_OTEL_EXPORTER") && error.contains("otlpp"), "{error}");
        return;
    }
    let telemetry = loaded.unwrap();
    assert!(!telemetry.is_enabled());
    assert!(telemetry.warnings().iter().any(|w| w.contains("MYJOB_OTEL_EXPORTER")), "{:?}", telemetry.warnings());

    let env = [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_TRACING_GROUPS", "candle_transformers=forward_backward")];
    let telemetry = lens_fallbacks::Telemetry::builder("MYJOB_OTEL").env(env).setup().unwrap();
    assert!(!telemetry.is_enabled());
    let subscriber = tracing_subscriber::registry().with(telemetry.tracing_layer());
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!(target: "candle_transformers::models::with_tracing", "linear");
        assert!(span.is_disabled());
    });
    assert!(telemetry.tracing_rules().unmatched().is_empty(), "nothing is reported where nothing records");
}
