//! The bridge under a job's setup (`setup_telemetry`: lens's span recorder,
//! the open-span closer), with lens's own current-span stack (the default)
//! and with `CONTEXT_PER_SPAN`: how `tracing` spans meet lens spans,
//! `traceparent` and spans started through the OpenTelemetry API.
//!
//! Setup owns process-global state, so this file is its own test binary and
//! every test takes [`serial`] first (the warning test runs its spans in a
//! child process of this binary, whose standard error it reads).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lens_fallbacks::config::LensConfig;
use lens_fallbacks::groups::SpanGroup;
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::propagation::current_context;
use lens_fallbacks::setup::{SetupOptions, Telemetry, setup_telemetry};
use lens_fallbacks::span::managed_span;
use lens_tracing::TelemetryExt as _;
use opentelemetry::trace::{SpanId, Tracer as _};
use opentelemetry_sdk::trace::SpanData;
use tracing_subscriber::layer::SubscriberExt as _;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn setup(spans: &KeepingSpanExporter, context_per_span: bool) -> Telemetry {
    let config = LensConfig {
        enabled: true,
        span_groups: "all".into(),
        rank_strategy: "all_ranks".into(),
        metrics_enabled: false,
        context_per_span,
        tracing_groups: "my_app=job".into(),
        ..LensConfig::default()
    };
    let vars: HashMap<String, String> = HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "run-t".to_string())]);
    let options = SetupOptions::new().with_span_exporter(spans.clone()).with_env(vars);
    setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup")
}

fn by_name<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
}

/// A `tracing` span entered with a lens span, an OpenTelemetry API span and
/// a `traceparent` inside; what the `traceparent` named.
fn nest(telemetry: &Telemetry) -> String {
    let subscriber = tracing_subscriber::registry().with(telemetry.tracing_layer());
    tracing::subscriber::with_default(subscriber, || {
        let request = tracing::info_span!(target: "my_app", "request");
        let _entered = request.enter();
        drop(managed_span(SpanGroup::STEP, "lens.inside", []));
        telemetry.tracer().in_span("otel.inside", |_cx| {
            drop(managed_span(SpanGroup::STEP, "lens.under_otel", []));
        });
        current_context().to_carrier().remove("traceparent").expect("a traceparent")
    })
}

/// The spans [`nest`] exported under a job's setup, and its `traceparent`.
fn run(context_per_span: bool) -> (Vec<SpanData>, String) {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, context_per_span);
    let traceparent = nest(&telemetry);
    let report = telemetry.shutdown(Duration::from_secs(10));
    assert_eq!(report.spans.exported, 4, "{report:?}");
    (exporter.get_finished_spans().unwrap(), traceparent)
}

#[test]
fn by_default_a_tracing_span_is_current_on_lens_stack() {
    let (spans, traceparent) = run(false);
    let request = by_name(&spans, "request");
    let (inside, otel, under_otel) =
        (by_name(&spans, "lens.inside"), by_name(&spans, "otel.inside"), by_name(&spans, "lens.under_otel"));
    assert_eq!(inside.parent_span_id, request.span_context.span_id(), "a lens span is the tracing span's child");
    assert_eq!(
        traceparent,
        format!("00-{}-{}-01", request.span_context.trace_id(), request.span_context.span_id()),
        "traceparent names the tracing span"
    );
    // The OpenTelemetry API reads only its own context: a new trace, and
    // the lens span inside it is its child.
    assert_eq!(otel.parent_span_id, SpanId::INVALID);
    assert_ne!(otel.span_context.trace_id(), request.span_context.trace_id());
    assert_eq!(under_otel.parent_span_id, otel.span_context.span_id());
}

#[test]
fn with_context_per_span_opentelemetry_api_spans_inside_a_tracing_span_are_its_children() {
    let (spans, traceparent) = run(true);
    let request = by_name(&spans, "request");
    let (otel, under_otel) = (by_name(&spans, "otel.inside"), by_name(&spans, "lens.under_otel"));
    assert_eq!(by_name(&spans, "lens.inside").parent_span_id, request.span_context.span_id());
    assert_eq!(otel.parent_span_id, request.span_context.span_id(), "the OpenTelemetry API span is a child");
    assert_eq!(under_otel.parent_span_id, otel.span_context.span_id());
    assert!(spans.iter().all(|s| s.span_context.trace_id() == request.span_context.trace_id()), "{spans:?}");
    assert_eq!(traceparent, format!("00-{}-{}-01", request.span_context.trace_id(), request.span_context.span_id()));
}

/// Set in the child process of
/// [`a_lens_target_naming_no_group_is_warned_about_once_where_the_bridge_first_sees_it`].
const CHILD: &str = "LENS_TRACING_TEST_CHILD";

/// The child: spans of a `lens::<word>` target whose word is no group of
/// lens's catalog, from two callsites, each entered twice, and one of a
/// group it has; `tracing`'s own output is off, so its standard error is
/// lens's.
#[test]
fn unknown_lens_target_child() {
    // Run by its parent test, in a process of its own; in the test run
    // itself it returns at once (as recover.rs's victim does).
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let exporter = KeepingSpanExporter::default();
    let config = LensConfig {
        enabled: true,
        span_groups: "all".into(),
        rank_strategy: "all_ranks".into(),
        metrics_enabled: false,
        ..LensConfig::default()
    };
    let vars: HashMap<String, String> = HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "run-t".to_string())]);
    let options = SetupOptions::new().with_span_exporter(exporter.clone()).with_env(vars);
    let telemetry = setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup");
    let subscriber = tracing_subscriber::registry().with(telemetry.tracing_layer());
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..2 {
            drop(tracing::info_span!(target: "lens::chekpoint", "save").entered());
            drop(tracing::info_span!(target: "lens::chekpoint", "load").entered());
            drop(tracing::info_span!(target: "lens::checkpoint", "kept").entered());
        }
    });
    let report = telemetry.shutdown(Duration::from_secs(10));
    let names: Vec<String> = exporter.get_finished_spans().unwrap().iter().map(|s| s.name.to_string()).collect();
    assert_eq!(names, ["kept", "kept"], "{report:?}");
}

#[test]
fn a_lens_target_naming_no_group_is_warned_about_once_where_the_bridge_first_sees_it() {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(exe)
        .args(["--exact", "unknown_lens_target_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("TRACEPARENT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the child failed: {stderr}");
    let warning = "`tracing` target lens::chekpoint names span group 'chekpoint', which the lens catalog does not \
                   have: its spans are not recorded (did you mean 'checkpoint'?);";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    assert!(!stderr.contains("lens::checkpoint names"), "{stderr}");
}
