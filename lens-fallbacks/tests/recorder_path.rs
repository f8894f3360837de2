//! The facade's spans on the span recorder, as setup wires them (issue 24):
//! OpenTelemetry interop both ways, spans of a thread that exits, spans
//! still open at shutdown, and a sampler that drops.
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
use lens_fallbacks::setup::{SetupOptions, Telemetry, setup_telemetry};
use lens_fallbacks::span::managed_span;
use opentelemetry::trace::{SpanId, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::SpanData;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn setup(spans: &KeepingSpanExporter, sampler: TracesSampler) -> Telemetry {
    let mut config = LensConfig {
        enabled: true,
        span_groups: "all".into(),
        rank_strategy: "all_ranks".into(),
        metrics_enabled: false,
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
fn spans_started_through_the_opentelemetry_api_and_lens_spans_are_each_others_children() {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, TracesSampler::ParentBasedAlwaysOn);
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
fn a_span_the_sampler_drops_is_not_recorded_and_hands_its_unsampled_flag_to_children() {
    let _serial = serial();
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, TracesSampler::ParentBasedTraceIdRatio(0.0));
    {
        let dropped = managed_span(SpanGroup::STEP, "lens.dropped", []);
        assert!(!dropped.is_recording());
        let cx = Context::current();
        let span = cx.span();
        assert!(span.span_context().is_valid());
        assert!(!span.span_context().is_sampled());
        let child = managed_span(SpanGroup::STEP, "lens.child", []);
        assert!(!child.is_recording());
    }
    let report = telemetry.shutdown(Duration::from_secs(10));
    assert_eq!(report.spans.exported, 0, "{report:?}");
    assert!(exporter.names().is_empty());
}
