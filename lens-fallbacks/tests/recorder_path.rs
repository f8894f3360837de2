//! The facade's spans on the span recorder, as setup wires them (issue 24):
//! lens's own current-span stack (the default) and its meeting points with
//! the OpenTelemetry context, OpenTelemetry interop both ways with
//! `CONTEXT_PER_SPAN`, spans of a thread that exits, spans still open at
//! shutdown, a sampler that drops, and spans started where telemetry is
//! suppressed.
//!
//! Setup owns process-global state, so this file is its own test binary and
//! every test takes [`serial`] first.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::config::{LensConfig, TracesSampler};
use lens_fallbacks::groups::SpanGroup;
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::propagation::{current_context, extract_context};
use lens_fallbacks::setup::{SetupOptions, Telemetry, setup_telemetry};
use lens_fallbacks::span::{add_event_to_current, managed_span};
use opentelemetry::trace::{SpanId, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::SpanData;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn setup(spans: &KeepingSpanExporter, sampler: TracesSampler) -> Telemetry {
    setup_with(spans, sampler, false)
}

fn setup_with(spans: &KeepingSpanExporter, sampler: TracesSampler, context_per_span: bool) -> Telemetry {
    let mut config = LensConfig {
        enabled: true,
        span_groups: "all".into(),
        rank_strategy: "all_ranks".into(),
        metrics_enabled: false,
        context_per_span,
        ..LensConfig::default()
    };
    config.otel.traces_sampler = sampler;
    let vars: HashMap<String, String> = HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "run-r".to_string())]);
    let options = SetupOptions::new().with_span_exporter(spans.clone()).with_env(vars);
    setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup")
}

fn by_name<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
}

#[test]
fn with_context_per_span_opentelemetry_api_spans_and_lens_spans_are_each_others_children() {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup_with(&exporter, TracesSampler::ParentBasedAlwaysOn, true);
    assert!(lens_fallbacks::otel::active::lens_tracer().is_some(), "setup puts the facade's spans on the recorder");
    {
        let outer = managed_span(SpanGroup::STEP, "lens.outer", [KeyValue::new("k", 1_i64)]);
        assert!(outer.is_recording());
        // An OpenTelemetry API span under the current lens span ...
        telemetry.tracer().in_span("otel.middle", |_cx| {
            // ... and a lens span under the current OpenTelemetry span.
            let inner = managed_span(SpanGroup::STEP, "lens.inner", []);
            inner.set_attribute("late", true);
            inner.set_status_error("it failed");
        });
    }
    let report = telemetry.shutdown(Duration::from_secs(10));
    assert_eq!(report.spans.exported, 3, "{report:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let outer = by_name(&spans, "lens.outer");
    let middle = by_name(&spans, "otel.middle");
    let inner = by_name(&spans, "lens.inner");
    assert_eq!(outer.parent_span_id, SpanId::INVALID);
    assert_eq!(middle.parent_span_id, outer.span_context.span_id());
    assert_eq!(inner.parent_span_id, middle.span_context.span_id());
    let trace = outer.span_context.trace_id();
    assert!(spans.iter().all(|s| s.span_context.trace_id() == trace), "{spans:?}");
    // What the lens span recorded after it started is exported with it, in
    // the pipeline's scope.
    assert!(inner.attributes.iter().any(|kv| kv.key.as_str() == "late" && kv.value == Value::Bool(true)));
    assert_eq!(inner.status, Status::error("it failed"));
    assert_eq!(outer.attributes.iter().find(|kv| kv.key.as_str() == "k").map(|kv| &kv.value), Some(&Value::I64(1)));
    assert_eq!(inner.instrumentation_scope.name(), middle.instrumentation_scope.name());
}

/// The default: current lens spans live on lens's own stack. Lens spans,
/// `traceparent`, `add_event_to_current` and lens spans under an attached
/// OpenTelemetry context all see the innermost current span; a span started
/// through the OpenTelemetry API does not see a lens span.
#[test]
fn by_default_the_current_lens_span_is_on_lens_stack_and_meets_the_opentelemetry_context() {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, TracesSampler::ParentBasedAlwaysOn);
    let remote_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let remote_span = "00f067aa0ba902b7";
    let outer_traceparent;
    {
        let outer = managed_span(SpanGroup::STEP, "lens.outer", []);
        assert!(outer.is_recording());
        // Nothing went into the OpenTelemetry context ...
        assert!(!Context::current().span().span_context().is_valid());
        // ... but `traceparent` names the lens span.
        outer_traceparent = current_context().to_carrier().remove("traceparent").expect("a traceparent");
        add_event_to_current("lens.marked", [KeyValue::new("why", "test")]);
        drop(managed_span(SpanGroup::STEP, "lens.child", []));
        telemetry.tracer().in_span("otel.beside", |_cx| {
            // A lens span under an attached OpenTelemetry span is its child.
            drop(managed_span(SpanGroup::STEP, "lens.under_otel", []));
        });
        {
            let carrier = HashMap::from([("traceparent".to_string(), format!("00-{remote_trace}-{remote_span}-01"))]);
            let remote = extract_context(&carrier);
            let _attached = remote.attach();
            drop(managed_span(SpanGroup::STEP, "lens.under_remote", []));
        }
        // Guards dropped out of order end their own spans; the one still
        // open stays current.
        let a = managed_span(SpanGroup::STEP, "lens.a", []);
        let b = managed_span(SpanGroup::STEP, "lens.b", []);
        drop(a);
        drop(managed_span(SpanGroup::STEP, "lens.c", []));
        drop(b);
        drop(managed_span(SpanGroup::STEP, "lens.after", []));
    }
    // Nothing is current any more.
    assert!(!current_context().is_valid());
    let report = telemetry.shutdown(Duration::from_secs(10));
    assert_eq!(report.spans.exported, 9, "{report:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let span_id = |name: &str| by_name(&spans, name).span_context.span_id();
    let parent = |name: &str| by_name(&spans, name).parent_span_id;
    let outer = by_name(&spans, "lens.outer");
    assert_eq!(outer_traceparent, format!("00-{}-{}-01", outer.span_context.trace_id(), outer.span_context.span_id()));
    assert_eq!(outer.events.len(), 1, "{outer:?}");
    assert_eq!(outer.events[0].name, "lens.marked");
    assert_eq!(parent("lens.outer"), SpanId::INVALID);
    assert_eq!(parent("lens.child"), span_id("lens.outer"));
    assert_eq!(parent("otel.beside"), SpanId::INVALID, "the OpenTelemetry API does not see lens's stack");
    assert_ne!(by_name(&spans, "otel.beside").span_context.trace_id(), outer.span_context.trace_id());
    assert_eq!(parent("lens.under_otel"), span_id("otel.beside"));
    let under_remote = by_name(&spans, "lens.under_remote");
    assert_eq!(under_remote.span_context.trace_id().to_string(), remote_trace);
    assert_eq!(under_remote.parent_span_id.to_string(), remote_span);
    assert!(under_remote.parent_span_is_remote);
    assert_eq!(parent("lens.a"), span_id("lens.outer"));
    assert_eq!(parent("lens.b"), span_id("lens.a"));
    assert_eq!(parent("lens.c"), span_id("lens.b"), "b stayed current after a ended");
    assert_eq!(parent("lens.after"), span_id("lens.outer"));
}

#[test]
fn a_span_started_where_telemetry_is_suppressed_records_nothing_and_names_no_parent_in_a_reused_frame() {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, TracesSampler::ParentBasedAlwaysOn);
    {
        let _outer = managed_span(SpanGroup::STEP, "lens.outer", []);
        // A recorded span ends: its frame stays on the stack, and the next
        // push reuses it.
        drop(managed_span(SpanGroup::STEP, "lens.recorded", []));
        let suppressed = Context::enter_telemetry_suppressed_scope();
        let quiet = managed_span(SpanGroup::STEP, "lens.suppressed", []);
        assert!(!quiet.is_recording());
        // The reused frame carries no span: not the one that ended in it.
        assert!(!current_context().is_valid(), "{:?}", current_context().to_carrier());
        drop(managed_span(SpanGroup::STEP, "lens.suppressed_child", []));
        drop(quiet);
        drop(suppressed);
        drop(managed_span(SpanGroup::STEP, "lens.after", []));
    }
    let report = telemetry.shutdown(Duration::from_secs(10));
    assert_eq!(report.spans.exported, 3, "{report:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let outer = by_name(&spans, "lens.outer").span_context.span_id();
    assert_eq!(by_name(&spans, "lens.recorded").parent_span_id, outer);
    assert_eq!(by_name(&spans, "lens.after").parent_span_id, outer);
    assert!(spans.iter().all(|s| !s.name.starts_with("lens.suppressed")), "{spans:?}");
}

#[test]
fn spans_of_a_thread_that_exited_and_spans_still_open_are_exported_at_shutdown() {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, TracesSampler::ParentBasedAlwaysOn);
    std::thread::spawn(|| {
        for i in 0..3_i64 {
            let _span = managed_span(SpanGroup::STEP, "lens.worker", [KeyValue::new("i", i)]);
        }
    })
    .join()
    .unwrap();
    let open = managed_span(SpanGroup::STEP, "lens.open", []);
    let report = telemetry.shutdown(Duration::from_secs(10));
    // Ended after shutdown: exported once, as the truncated copy.
    drop(open);
    assert_eq!(report.spans.exported, 4, "{report:?}");
    assert_eq!(report.spans.dropped_queue_full + report.spans.dropped_at_shutdown, 0, "{report:?}");
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.iter().filter(|s| s.name == "lens.worker").count(), 3);
    let open = by_name(&spans, "lens.open");
    assert!(open.attributes.iter().any(|kv| kv.key.as_str() == "nemo.span.truncated"), "{open:?}");
    assert_eq!(spans.len(), 4);
}

#[test]
fn an_event_added_to_a_span_still_open_at_shutdown_is_in_its_truncated_copy() {
    // The job's `megatron.train` span gets a `lens.control.change` event at
    // each control change; a job stopped by a signal ends it truncated.
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, TracesSampler::ParentBasedAlwaysOn);
    let open = managed_span(SpanGroup::JOB, "lens.train", []);
    for generation in 1..=2_i64 {
        add_event_to_current("lens.control.change", [KeyValue::new("lens.control.generation", generation)]);
    }
    let report = telemetry.shutdown(Duration::from_secs(10));
    drop(open);
    assert_eq!(report.spans.exported, 1, "{report:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let train = by_name(&spans, "lens.train");
    let events: Vec<(&str, Option<&Value>)> = train
        .events
        .iter()
        .map(|e| {
            (
                e.name.as_ref(),
                e.attributes.iter().find(|kv| kv.key.as_str() == "lens.control.generation").map(|kv| &kv.value),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("lens.control.change", Some(&Value::I64(1))),
            ("lens.control.change", Some(&Value::I64(2))),
            ("nemo.span.truncated", None),
        ],
        "{train:?}"
    );
}

/// A current span lives in a frame of its thread's stack: a guard that is
/// forgotten leaves its span current there (as a forgotten OpenTelemetry
/// context guard leaves its context attached), and the thread's exit ends
/// it and exports it, marked truncated with the thread's exit as the
/// reason (its end is not one the program chose).
#[test]
fn a_current_span_whose_guard_is_forgotten_ends_when_its_thread_exits() {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, TracesSampler::ParentBasedAlwaysOn);
    std::thread::spawn(|| {
        std::mem::forget(managed_span(SpanGroup::STEP, "lens.forgotten", []));
        drop(managed_span(SpanGroup::STEP, "lens.inside", []));
    })
    .join()
    .unwrap();
    let report = telemetry.shutdown(Duration::from_secs(10));
    assert_eq!(report.spans.exported, 2, "{report:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let forgotten = by_name(&spans, "lens.forgotten");
    let truncated = opentelemetry::KeyValue::new("nemo.span.truncated", true);
    assert!(forgotten.attributes.contains(&truncated), "{forgotten:?}");
    let reasons: Vec<_> = forgotten.events.iter().flat_map(|event| event.attributes.iter()).collect();
    assert_eq!(
        reasons,
        [&opentelemetry::KeyValue::new("nemo.span.truncated.reason", "its thread exited with the span still current")],
        "ended by its thread's exit, not truncated at shutdown: {forgotten:?}"
    );
    let inside = by_name(&spans, "lens.inside");
    assert_eq!(inside.parent_span_id, forgotten.span_context.span_id());
    assert!(inside.attributes.is_empty() && inside.events.is_empty(), "ended by its guard: {inside:?}");
}

/// A span kept current across a shutdown was exported truncated with its
/// lifetime: the next lifetime's spans start traces of their own instead
/// of joining it (before, they became its children, in a trace that had
/// already ended).
#[test]
fn a_span_kept_current_across_a_shutdown_is_no_parent_in_the_next_lifetime() {
    let _serial = serial();
    let first = KeepingSpanExporter::default();
    let telemetry = setup(&first, TracesSampler::ParentBasedAlwaysOn);
    let kept = managed_span(SpanGroup::STEP, "lens.kept", []);
    telemetry.shutdown(Duration::from_secs(10));
    let second = KeepingSpanExporter::default();
    let telemetry = setup(&second, TracesSampler::ParentBasedAlwaysOn);
    drop(managed_span(SpanGroup::STEP, "lens.next", []));
    assert!(!current_context().otel_context().span().span_context().is_valid(), "no current span of the old lifetime");
    drop(kept);
    telemetry.shutdown(Duration::from_secs(10));
    let kept = by_name(&first.get_finished_spans().unwrap(), "lens.kept").clone();
    let next = by_name(&second.get_finished_spans().unwrap(), "lens.next").clone();
    assert_eq!(next.parent_span_id, SpanId::INVALID, "{next:?}");
    assert_ne!(next.span_context.trace_id(), kept.span_context.trace_id());
}

/// Makes [`dropping_child`] act.
const DROPPING_CHILD: &str = "LENS_TEST_RECORDER_PATH_DROPPING_CHILD";

/// The child of [`a_dropped_handle_that_lost_spans_says_so`]: a queue of
/// one, a thousand spans, the handle dropped.
#[test]
fn dropping_child() {
    if std::env::var_os(DROPPING_CHILD).is_none() {
        return;
    }
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let mut config = LensConfig {
        enabled: true,
        span_groups: "all".into(),
        rank_strategy: "all_ranks".into(),
        metrics_enabled: false,
        ..LensConfig::default()
    };
    (config.otel.batch.max_queue_size, config.otel.batch.max_export_batch_size) = (1, 1);
    let vars: HashMap<String, String> = HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "run-r".to_string())]);
    let options = SetupOptions::new().with_span_exporter(exporter).with_env(vars);
    let telemetry = setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup");
    for _ in 0..1000 {
        drop(managed_span(SpanGroup::STEP, "lens.many", []));
    }
    drop(telemetry);
}

/// A handle dropped without a shutdown of the program's own (the end of
/// `main`) writes its report when it lost something: nobody else sees it,
/// and the export worker's last warning may come after the process exits.
#[test]
fn a_dropped_handle_that_lost_spans_says_so() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "dropping_child", "--nocapture", "--test-threads=1"])
        .env(DROPPING_CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = stderr
        .lines()
        .find_map(|line| line.strip_prefix("lens: warning: telemetry shut down as its handle was dropped: spans: "))
        .unwrap_or_else(|| panic!("no report: {stderr}"));
    let exported: u64 = report.split(' ').next().and_then(|n| n.parse().ok()).expect("the exported count");
    assert!(report.contains(&format!(" exported, {} dropped", 1000 - exported)), "{report}");
}

#[test]
fn a_span_the_sampler_drops_is_not_recorded_and_hands_its_unsampled_flag_to_children() {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, TracesSampler::ParentBasedTraceIdRatio(0.0));
    {
        let dropped = managed_span(SpanGroup::STEP, "lens.dropped", []);
        assert!(!dropped.is_recording());
        let current = current_context();
        let span = current.otel_context().span();
        assert!(span.span_context().is_valid());
        assert!(!span.span_context().is_sampled());
        assert!(current.to_carrier()["traceparent"].ends_with("-00"), "an unsampled traceparent");
        let child = managed_span(SpanGroup::STEP, "lens.child", []);
        assert!(!child.is_recording());
    }
    let report = telemetry.shutdown(Duration::from_secs(10));
    assert_eq!(report.spans.exported, 0, "{report:?}");
    assert!(exporter.names().is_empty());
}
