//! The span helpers against a real SDK tracer with an in-memory exporter:
//! spans appear when their group is enabled and are absent when it is not,
//! with the right names, attributes, parents, links, status and times.
//!
//! The active tracer and the group gate are process-global, so this file is
//! its own test binary and its tests take a lock. Run with
//! `cargo test -p lens-core --features testing --test otel_span`.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, SystemTime};

use lens_core::attr::{AttrValue, KeyValue};
use lens_core::groups::{GroupSet, SpanGroup, set_enabled_span_groups};
use lens_core::otel::active;
use lens_core::otel::propagation::RemoteContext;
use lens_core::otel::span::{
    DEFAULT_REDACT_KEYS, SpanGuard, SpanLink, backdated_span, in_managed_span, instrument_future, lazy_attributes,
    managed_span, managed_span_since, new_trace_linked, safe_set_span_attributes, span_cm, try_in_managed_span,
    try_instrument_future,
};
use opentelemetry::trace::{SpanId, Status, TracerProvider as _};
use opentelemetry::{Array, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

static LOCK: Mutex<()> = Mutex::new(());
static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();

/// Installs a tracer exporting to `exporter`.
fn install_tracer(exporter: &InMemorySpanExporter) {
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    active::install(provider.tracer("lens-test")).expect("no tracer is installed yet");
}

/// Takes the lock, makes sure the test tracer is installed, clears the
/// exported spans and enables exactly `groups`.
fn setup(groups: &[SpanGroup]) -> (MutexGuard<'static, ()>, InMemorySpanExporter) {
    let lock = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let exporter = EXPORTER
        .get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            install_tracer(&exporter);
            exporter
        })
        .clone();
    exporter.reset();
    set_enabled_span_groups(GroupSet::of(groups));
    (lock, exporter)
}

fn spans(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    exporter.get_finished_spans().expect("the in-memory exporter is readable")
}

fn only_span(exporter: &InMemorySpanExporter) -> SpanData {
    let mut spans = spans(exporter);
    assert_eq!(spans.len(), 1, "expected one span, got {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    spans.remove(0)
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span named {name}"))
}

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.clone())
}

fn event_attribute(span: &SpanData, event: &str, key: &str) -> Option<Value> {
    let event = span.events.events.iter().find(|e| e.name == event)?;
    event.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.clone())
}

fn is_error(span: &SpanData) -> bool {
    matches!(span.status, Status::Error { .. })
}

/// Polls `future` to completion on this thread (it must wake itself), at
/// most 100 times.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = TaskContext::from_waker(Waker::noop());
    for _ in 0..100 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("the future did not complete in 100 polls");
}

/// A future that is pending once, then ready.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[test]
fn disabled_group_records_nothing_and_never_computes_lazy_attributes() {
    let (_lock, exporter) = setup(&[SpanGroup::JOB]);
    let computed = AtomicUsize::new(0);
    let span = managed_span(
        SpanGroup::STEP,
        "test.step",
        lazy_attributes(|| {
            computed.fetch_add(1, Ordering::Relaxed);
            [KeyValue::new("test.costly", "value")]
        }),
    );
    assert!(!span.is_recording());
    span.set_attribute("test.ignored", 1);
    span.add_event("ignored", []);
    assert!(!span.remote_context().is_valid());
    drop(span);
    let ran = in_managed_span(SpanGroup::STEP, "test.closure", [], |span| {
        assert!(!span.is_recording());
        "body ran"
    });
    assert_eq!(ran, "body ran");
    assert_eq!(computed.load(Ordering::Relaxed), 0);
    assert!(spans(&exporter).is_empty());
}

#[test]
fn enabled_group_records_the_span_with_its_name_and_attributes() {
    let (_lock, exporter) = setup(&[SpanGroup::STEP]);
    {
        let span = managed_span(
            SpanGroup::STEP,
            "test.step",
            [KeyValue::new("megatron.iteration", 7), KeyValue::new("test.kind", "unit")],
        );
        assert!(span.is_recording());
        span.set_attribute("megatron.loss", 2.5);
        span.set_attributes([KeyValue::new("test.flag", true)]);
        span.add_event("checkpoint", [KeyValue::new("test.n", 1)]);
    }
    let span = only_span(&exporter);
    assert_eq!(span.name, "test.step");
    assert_eq!(attribute(&span, "megatron.iteration"), Some(Value::I64(7)));
    assert_eq!(attribute(&span, "test.kind"), Some(Value::from("unit")));
    assert_eq!(attribute(&span, "megatron.loss"), Some(Value::F64(2.5)));
    assert_eq!(attribute(&span, "test.flag"), Some(Value::Bool(true)));
    assert_eq!(event_attribute(&span, "checkpoint", "test.n"), Some(Value::I64(1)));
    assert_eq!(span.status, Status::Unset);
}

#[test]
fn nested_managed_spans_are_parent_and_child_and_the_parent_is_restored() {
    let (_lock, exporter) = setup(&[SpanGroup::STEP, SpanGroup::OPTIMIZER]);
    {
        let _step = managed_span(SpanGroup::STEP, "test.step", []);
        in_managed_span(SpanGroup::OPTIMIZER, "test.optimizer", [], |_| {
            // A disabled group in between does not break the chain.
            let _skipped = managed_span(SpanGroup::FORWARD_BACKWARD, "test.skipped", []);
            let _grandchild = managed_span(SpanGroup::STEP, "test.inner", []);
        });
        let _sibling = managed_span(SpanGroup::STEP, "test.sibling", []);
    }
    let _after = managed_span(SpanGroup::STEP, "test.after", []);
    drop(_after);
    let spans = spans(&exporter);
    assert_eq!(spans.len(), 5);
    let step = named(&spans, "test.step");
    let optimizer = named(&spans, "test.optimizer");
    assert_eq!(step.parent_span_id, SpanId::INVALID);
    assert_eq!(optimizer.parent_span_id, step.span_context.span_id());
    assert_eq!(optimizer.span_context.trace_id(), step.span_context.trace_id());
    assert_eq!(named(&spans, "test.inner").parent_span_id, optimizer.span_context.span_id());
    assert_eq!(named(&spans, "test.sibling").parent_span_id, step.span_context.span_id());
    assert_eq!(named(&spans, "test.after").parent_span_id, SpanId::INVALID);
    assert!(spans.iter().all(|s| s.name != "test.skipped"));
}

#[test]
fn span_cm_records_without_any_group_and_is_inert_without_a_tracer() {
    let (_lock, exporter) = setup(&[]);
    {
        let span = span_cm("test.cold", [KeyValue::new("test.param_count", 1e9)]);
        assert!(span.is_recording());
    }
    let span = only_span(&exporter);
    assert_eq!(span.name, "test.cold");
    assert_eq!(attribute(&span, "test.param_count"), Some(Value::F64(1e9)));

    exporter.reset();
    assert!(active::uninstall());
    let cold = span_cm("test.cold", []);
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::STEP]));
    let managed = managed_span(SpanGroup::STEP, "test.step", []);
    let recording = (cold.is_recording(), managed.is_recording());
    drop((cold, managed));
    // Put a tracer back for the other tests before asserting.
    install_tracer(&exporter);
    assert_eq!(recording, (false, false));
    assert!(spans(&exporter).is_empty());
}

#[test]
fn a_second_install_is_refused() {
    let (_lock, _exporter) = setup(&[]);
    let provider = SdkTracerProvider::builder().build();
    assert!(active::install(provider.tracer("second")).is_err());
}

#[test]
fn err_marks_the_span_error_with_an_exception_event_and_still_ends_it() {
    let (_lock, exporter) = setup(&[SpanGroup::CHECKPOINT]);
    let result: Result<u32, std::io::Error> =
        try_in_managed_span(SpanGroup::CHECKPOINT, "test.save", [], |_| Err(std::io::Error::other("disk full")));
    assert_eq!(result.unwrap_err().to_string(), "disk full");
    let span = only_span(&exporter);
    assert_eq!(span.status, Status::error("disk full"));
    assert_eq!(event_attribute(&span, "exception", "exception.message"), Some(Value::from("disk full")));
    let exception_type = event_attribute(&span, "exception", "exception.type").expect("exception.type is set");
    assert!(exception_type.as_str().contains("io::error::Error"), "{exception_type:?}");

    exporter.reset();
    let ok: Result<u32, String> = try_in_managed_span(SpanGroup::CHECKPOINT, "test.save", [], |_| Ok(3));
    assert_eq!(ok, Ok(3));
    assert_eq!(only_span(&exporter).status, Status::Unset);
}

#[test]
fn question_mark_through_a_guard_still_ends_the_span() {
    let (_lock, exporter) = setup(&[SpanGroup::STEP]);
    fn step() -> Result<(), std::num::ParseIntError> {
        let _span = managed_span(SpanGroup::STEP, "test.parse", []);
        let _n: i32 = "not a number".parse()?;
        Ok(())
    }
    assert!(step().is_err());
    assert_eq!(only_span(&exporter).name, "test.parse");
}

#[test]
fn panic_in_the_closure_form_marks_error_with_the_message_and_ends_the_span() {
    let (_lock, exporter) = setup(&[SpanGroup::STEP]);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        in_managed_span(SpanGroup::STEP, "test.boom", [], |_| -> u32 { panic!("exploded at step 3") })
    }));
    assert!(outcome.is_err(), "the panic goes on unwinding");
    let span = only_span(&exporter);
    assert!(is_error(&span));
    assert_eq!(event_attribute(&span, "exception", "exception.message"), Some(Value::from("exploded at step 3")));
    assert_eq!(event_attribute(&span, "exception", "exception.type"), Some(Value::from("panic")));
    assert_eq!(span.events.events.iter().filter(|e| e.name == "exception").count(), 1);
}

#[test]
fn panic_through_a_guard_marks_error_and_ends_the_span() {
    let (_lock, exporter) = setup(&[SpanGroup::STEP]);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let _span = managed_span(SpanGroup::STEP, "test.guarded", []);
        panic!("guarded panic");
    }));
    assert!(outcome.is_err());
    let span = only_span(&exporter);
    assert!(is_error(&span));
    assert_eq!(event_attribute(&span, "exception", "exception.type"), Some(Value::from("panic")));
}

#[test]
fn record_error_and_set_status_error_mark_the_span() {
    let (_lock, exporter) = setup(&[SpanGroup::STEP]);
    {
        let span = managed_span(SpanGroup::STEP, "test.recorded", []);
        span.record_error(&std::io::Error::other("bad batch"));
    }
    let span = only_span(&exporter);
    assert_eq!(span.status, Status::error("bad batch"));
    assert_eq!(event_attribute(&span, "exception", "exception.message"), Some(Value::from("bad batch")));

    exporter.reset();
    managed_span(SpanGroup::STEP, "test.status", []).set_status_error("nan loss");
    assert_eq!(only_span(&exporter).status, Status::error("nan loss"));
}

#[test]
fn safe_set_redacts_sensitive_strings_skips_none_and_keeps_lists() {
    let (_lock, exporter) = setup(&[SpanGroup::STEP]);
    {
        let span = managed_span(SpanGroup::STEP, "test.safe", []);
        let missing: Option<KeyValue> = None;
        safe_set_span_attributes(
            &span,
            [
                Some(KeyValue::new("password", "hunter2")),
                Some(KeyValue::new("Password", "case matters")),
                Some(KeyValue::new("token", 12345)),
                Some(KeyValue::new("text", vec!["a", "b"])),
                Some(KeyValue::new("model", "llama")),
                missing,
            ],
            DEFAULT_REDACT_KEYS,
        );
        safe_set_span_attributes(&span, [KeyValue::new("model_path", "/secret/path")], &["model_path"]);
    }
    let span = only_span(&exporter);
    assert_eq!(attribute(&span, "password"), Some(Value::from("[REDACTED]")));
    assert_eq!(attribute(&span, "Password"), Some(Value::from("case matters")));
    assert_eq!(attribute(&span, "token"), Some(Value::I64(12345)), "only strings are redacted");
    assert_eq!(
        attribute(&span, "text"),
        Some(Value::Array(Array::String(vec!["a".into(), "b".into()]))),
        "lists are never redacted"
    );
    assert_eq!(attribute(&span, "model"), Some(Value::from("llama")));
    assert_eq!(attribute(&span, "model_path"), Some(Value::from("[REDACTED]")));
    assert_eq!(span.attributes.len(), 6);
}

#[test]
fn backdated_spans_carry_the_given_times_and_parent() {
    let (_lock, exporter) = setup(&[SpanGroup::JOB]);
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let end = start + Duration::from_millis(1500);
    let context = {
        let _parent = managed_span(SpanGroup::JOB, "test.startup", []);
        backdated_span(SpanGroup::JOB, "test.startup.init", start, end, [KeyValue::new("test.phase", "init")])
    };
    assert!(context.is_valid());
    let spans = spans(&exporter);
    let init = named(&spans, "test.startup.init");
    assert_eq!((init.start_time, init.end_time), (start, end));
    assert_eq!(init.parent_span_id, named(&spans, "test.startup").span_context.span_id());
    assert_eq!(context.span_id_hex(), Some(init.span_context.span_id().to_string()));
    assert_eq!(attribute(init, "test.phase"), Some(Value::from("init")));
    assert!(!backdated_span(SpanGroup::STEP, "test.off", start, end, []).is_valid());

    exporter.reset();
    let since = managed_span_since(SpanGroup::JOB, "test.since", start, []);
    since.end_at(end);
    let span = only_span(&exporter);
    assert_eq!((span.start_time, span.end_time), (start, end));
}

#[test]
fn new_trace_linked_starts_a_fresh_trace_that_links_to_the_previous_one() {
    let (_lock, exporter) = setup(&[SpanGroup::JOB, SpanGroup::STEP]);
    let startup = managed_span(SpanGroup::JOB, "test.startup", []);
    let previous = startup.remote_context();
    {
        let interval = new_trace_linked(
            SpanGroup::JOB,
            "test.train",
            [SpanLink::new(&previous).with_attributes([KeyValue::new("test.link", "previous")])],
            [],
        );
        let _iteration = managed_span(SpanGroup::STEP, "test.iteration", []);
        assert!(interval.is_recording());
    }
    drop(startup);
    let spans = spans(&exporter);
    let startup = named(&spans, "test.startup");
    let train = named(&spans, "test.train");
    assert_eq!(train.parent_span_id, SpanId::INVALID);
    assert_ne!(train.span_context.trace_id(), startup.span_context.trace_id());
    assert_eq!(train.links.links.len(), 1);
    assert_eq!(train.links.links[0].span_context.span_id(), startup.span_context.span_id());
    assert_eq!(train.links.links[0].attributes[0].value, Value::from("previous"));
    let iteration = named(&spans, "test.iteration");
    assert_eq!(iteration.parent_span_id, train.span_context.span_id());
    assert_eq!(iteration.span_context.trace_id(), train.span_context.trace_id());

    // A link to "no context" is skipped.
    let exporter2 = exporter.clone();
    exporter2.reset();
    drop(new_trace_linked(SpanGroup::JOB, "test.unlinked", [SpanLink::new(&RemoteContext::none())], []));
    assert!(only_span(&exporter2).links.links.is_empty());
}

#[test]
fn instrument_future_keeps_the_span_current_across_await_points() {
    let (_lock, exporter) = setup(&[SpanGroup::EVALUATE, SpanGroup::STEP]);
    let future = instrument_future(SpanGroup::EVALUATE, "test.request", [KeyValue::new("test.id", 1)], async {
        YieldOnce(false).await;
        drop(managed_span(SpanGroup::STEP, "test.after_await", []));
        YieldOnce(false).await;
        42
    });
    fn assert_send<T: Send>(_: &T) {}
    assert_send(&future);
    // Nothing is current between polls on this thread.
    let outside = managed_span(SpanGroup::STEP, "test.outside", []);
    drop(outside);
    assert_eq!(block_on(future), 42);
    let spans = spans(&exporter);
    let request = named(&spans, "test.request");
    assert_eq!(attribute(request, "test.id"), Some(Value::I64(1)));
    assert_eq!(named(&spans, "test.after_await").parent_span_id, request.span_context.span_id());
    assert_eq!(named(&spans, "test.outside").parent_span_id, SpanId::INVALID);
}

#[test]
fn try_instrument_future_marks_err_and_a_disabled_group_only_polls() {
    let (_lock, exporter) = setup(&[SpanGroup::EVALUATE]);
    let failed: Result<(), String> =
        block_on(try_instrument_future(SpanGroup::EVALUATE, "test.request", [], async { Err("timeout".to_string()) }));
    assert!(failed.is_err());
    let span = only_span(&exporter);
    assert_eq!(span.status, Status::error("timeout"));

    exporter.reset();
    assert_eq!(block_on(instrument_future(SpanGroup::STEP, "test.off", [], async { 5 })), 5);
    assert!(spans(&exporter).is_empty());
}

#[test]
fn a_cancelled_future_still_ends_its_span() {
    let (_lock, exporter) = setup(&[SpanGroup::EVALUATE]);
    let mut future = Box::pin(instrument_future(SpanGroup::EVALUATE, "test.cancelled", [], async {
        YieldOnce(false).await;
    }));
    let mut cx = TaskContext::from_waker(Waker::noop());
    assert!(future.as_mut().poll(&mut cx).is_pending());
    drop(future);
    assert_eq!(only_span(&exporter).name, "test.cancelled");
}

#[test]
fn attributes_are_visible_at_creation_and_values_keep_their_types() {
    let (_lock, exporter) = setup(&[SpanGroup::STEP]);
    drop(managed_span(
        SpanGroup::STEP,
        "test.types",
        [
            KeyValue::new("test.u64", u64::MAX),
            KeyValue::new("test.f32", 0.5_f32),
            KeyValue::new("test.list", vec![1_i64, 2]),
            KeyValue { key: "test.raw".into(), value: AttrValue::Bool(false) },
        ],
    ));
    let span = only_span(&exporter);
    assert_eq!(attribute(&span, "test.u64"), Some(Value::I64(i64::MAX)));
    assert_eq!(attribute(&span, "test.f32"), Some(Value::F64(0.5)));
    assert_eq!(attribute(&span, "test.list"), Some(Value::Array(Array::I64(vec![1, 2]))));
    assert_eq!(attribute(&span, "test.raw"), Some(Value::Bool(false)));
}

#[test]
fn an_inert_guard_is_small_and_does_nothing() {
    let (_lock, exporter) = setup(&[]);
    let guard = SpanGuard::noop();
    guard.set_status_error("ignored");
    guard.record_error(&std::io::Error::other("ignored"));
    assert!(format!("{guard:?}").contains("inert"));
    guard.end();
    assert!(spans(&exporter).is_empty());
}
