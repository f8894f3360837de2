//! The span helpers against a real SDK tracer with an in-memory exporter:
//! spans appear when their group is enabled and are absent when it is not,
//! with the right names, attributes, parents, links, status and times.
//!
//! The active tracer and the group gate are process-global, so this file is
//! its own test binary and its tests take a lock. Run with
//! `cargo test -p lens-fallbacks --features testing --test otel_span`.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, SystemTime};

use lens_fallbacks::attr::{AttrValue, KeyValue};
use lens_fallbacks::groups::SpanGroup;
use lens_fallbacks::otel::active;
use lens_fallbacks::propagation::RemoteContext;
use lens_fallbacks::span::{
    DEFAULT_REDACT_KEYS, SAMPLING_KEY_ATTRIBUTE, SpanGuard, SpanKind, SpanLink, enter_span, in_managed_span,
    instrument_future, lazy_attributes, managed_span, span, try_in_managed_span, try_instrument_future, ungated_span,
};
use lens_fallbacks::testing::{Capture, capture};
use opentelemetry::trace::{SpanId, Status, TracerProvider as _};
use opentelemetry::{Array, Value};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};

fn spans(exporter: &Capture) -> Vec<SpanData> {
    exporter.finished_spans()
}

fn only_span(exporter: &Capture) -> SpanData {
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
    let exporter = capture(&[SpanGroup::JOB]);
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
    let exporter = capture(&[SpanGroup::STEP]);
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
    let exporter = capture(&[SpanGroup::STEP, SpanGroup::OPTIMIZER]);
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
fn enter_span_records_without_any_group_and_is_inert_without_a_tracer() {
    let exporter = capture(&[]);
    {
        let span = enter_span("test.cold", [KeyValue::new("test.param_count", 1e9)]);
        assert!(span.is_recording());
    }
    let span = only_span(&exporter);
    assert_eq!(span.name, "test.cold");
    assert_eq!(attribute(&span, "test.param_count"), Some(Value::F64(1e9)));

    exporter.reset();
    assert!(active::uninstall());
    let cold = enter_span("test.cold", []);
    exporter.enable(&[SpanGroup::STEP]);
    let managed = managed_span(SpanGroup::STEP, "test.step", []);
    let recording = (cold.is_recording(), managed.is_recording());
    drop((cold, managed));
    assert_eq!(recording, (false, false));
    assert!(spans(&exporter).is_empty());
}

#[test]
fn a_second_install_is_refused() {
    let _exporter = capture(&[]);
    let provider = SdkTracerProvider::builder().build();
    assert!(active::install(provider.tracer("second")).is_err());
}

#[test]
fn err_marks_the_span_error_with_an_exception_event_and_still_ends_it() {
    let exporter = capture(&[SpanGroup::CHECKPOINT]);
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
    let exporter = capture(&[SpanGroup::STEP]);
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
    let exporter = capture(&[SpanGroup::STEP]);
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
    let exporter = capture(&[SpanGroup::STEP]);
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
    let exporter = capture(&[SpanGroup::STEP]);
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
fn set_attributes_redacted_redacts_sensitive_strings_skips_none_and_keeps_lists() {
    let exporter = capture(&[SpanGroup::STEP]);
    {
        let span = managed_span(SpanGroup::STEP, "test.safe", []);
        let missing: Option<KeyValue> = None;
        span.set_attributes_redacted(
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
        span.set_attributes_redacted([KeyValue::new("model_path", "/secret/path")], &["model_path"]);
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
    let exporter = capture(&[SpanGroup::JOB]);
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let end = start + Duration::from_millis(1500);
    let context = {
        let _parent = managed_span(SpanGroup::JOB, "test.startup", []);
        span(SpanGroup::JOB, "test.startup.init")
            .start_time(start)
            .attributes([KeyValue::new("test.phase", "init")])
            .end_at(end)
    };
    assert!(context.is_valid());
    let spans = spans(&exporter);
    let init = named(&spans, "test.startup.init");
    assert_eq!((init.start_time, init.end_time), (start, end));
    assert_eq!(init.parent_span_id, named(&spans, "test.startup").span_context.span_id());
    assert_eq!(context.span_id_hex(), Some(init.span_context.span_id().to_string()));
    assert_eq!(attribute(init, "test.phase"), Some(Value::from("init")));
    assert!(!span(SpanGroup::STEP, "test.off").start_time(start).end_at(end).is_valid());

    exporter.reset();
    let since = span(SpanGroup::JOB, "test.since").start_time(start).start();
    since.end_at(end);
    let span = only_span(&exporter);
    assert_eq!((span.start_time, span.end_time), (start, end));
}

#[test]
fn a_new_trace_builder_starts_a_fresh_trace_that_links_to_the_previous_one() {
    let exporter = capture(&[SpanGroup::JOB, SpanGroup::STEP]);
    let startup = managed_span(SpanGroup::JOB, "test.startup", []);
    let previous = startup.remote_context();
    {
        let interval = span(SpanGroup::JOB, "test.train")
            .new_trace()
            .links([SpanLink::new(&previous).with_attributes([KeyValue::new("test.link", "previous")])])
            .start();
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
    exporter.reset();
    drop(span(SpanGroup::JOB, "test.unlinked").new_trace().links([SpanLink::new(&RemoteContext::none())]).start());
    assert!(only_span(&exporter).links.links.is_empty());
}

#[test]
fn instrument_future_keeps_the_span_current_across_await_points() {
    let exporter = capture(&[SpanGroup::EVALUATE, SpanGroup::STEP]);
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
    let exporter = capture(&[SpanGroup::EVALUATE]);
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
    let exporter = capture(&[SpanGroup::EVALUATE]);
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
    let exporter = capture(&[SpanGroup::STEP]);
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
    let exporter = capture(&[]);
    let guard = SpanGuard::noop();
    guard.set_status_error("ignored");
    guard.record_error(&std::io::Error::other("ignored"));
    assert!(format!("{guard:?}").contains("inert"));
    guard.end();
    assert!(spans(&exporter).is_empty());
}

// The span builder: each option shows in the exported span.

#[test]
fn builder_parent_puts_the_span_under_that_context_not_the_current_span() {
    let exporter = capture(&[SpanGroup::STEP]);
    let remote = lens_fallbacks::propagation::extract_context(&[(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )]);
    {
        let _current = managed_span(SpanGroup::STEP, "test.current", []);
        let child = span(SpanGroup::STEP, "test.child").parent(&remote).start();
        let _grandchild = managed_span(SpanGroup::STEP, "test.grandchild", []);
        drop(_grandchild);
        drop(child);
    }
    let spans = spans(&exporter);
    let child = named(&spans, "test.child");
    assert_eq!(child.span_context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(child.parent_span_id.to_string(), "00f067aa0ba902b7");
    assert_eq!(
        named(&spans, "test.grandchild").parent_span_id,
        child.span_context.span_id(),
        "start() makes it current"
    );

    exporter.reset();
    drop(span(SpanGroup::STEP, "test.root").parent(&RemoteContext::none()).start());
    assert_eq!(only_span(&exporter).parent_span_id, SpanId::INVALID, "no context: a new trace");
}

#[test]
fn builder_links_point_at_each_valid_context() {
    let exporter = capture(&[SpanGroup::STEP]);
    let (first, second) = {
        let a = managed_span(SpanGroup::STEP, "test.a", []);
        let b = managed_span(SpanGroup::STEP, "test.b", []);
        (a.remote_context(), b.remote_context())
    };
    drop(
        span(SpanGroup::STEP, "test.linked")
            .links([SpanLink::new(&first), SpanLink::new(&RemoteContext::none())])
            .links([SpanLink::new(&second)])
            .start(),
    );
    let spans = spans(&exporter);
    let linked = named(&spans, "test.linked");
    let targets: Vec<SpanId> = linked.links.links.iter().map(|l| l.span_context.span_id()).collect();
    assert_eq!(
        targets,
        [named(&spans, "test.a").span_context.span_id(), named(&spans, "test.b").span_context.span_id()]
    );
}

#[test]
fn builder_kind_is_exported() {
    let exporter = capture(&[SpanGroup::STEP]);
    drop(span(SpanGroup::STEP, "test.server").kind(SpanKind::Server).start());
    drop(span(SpanGroup::STEP, "test.default").start());
    let spans = spans(&exporter);
    assert_eq!(named(&spans, "test.server").span_kind, opentelemetry::trace::SpanKind::Server);
    assert_eq!(named(&spans, "test.default").span_kind, opentelemetry::trace::SpanKind::Internal);
}

#[test]
fn builder_start_time_backdates_the_start() {
    let exporter = capture(&[SpanGroup::STEP]);
    let began = SystemTime::now() - Duration::from_secs(30);
    drop(span(SpanGroup::STEP, "test.late").start_time(began).start());
    let span = only_span(&exporter);
    assert_eq!(span.start_time, began);
    assert!(span.end_time.duration_since(began).unwrap() >= Duration::from_secs(30));
}

#[test]
fn builder_sampling_key_is_a_start_attribute() {
    let exporter = capture(&[SpanGroup::STEP]);
    let key = lens_fallbacks::span::sampling_key("run", 0, 7);
    drop(span(SpanGroup::STEP, "test.keyed").sampling_key(key).attributes([KeyValue::new("test.i", 7)]).start());
    let span = only_span(&exporter);
    assert_eq!(attribute(&span, SAMPLING_KEY_ATTRIBUTE), Some(Value::I64(key)));
    assert_eq!(attribute(&span, "test.i"), Some(Value::I64(7)));
}

#[test]
fn builder_trace_id_starts_a_trace_with_that_id() {
    let exporter = capture(&[SpanGroup::JOB]);
    let id = [0x11_u8; 16];
    {
        let _outer = managed_span(SpanGroup::JOB, "test.outer", []);
        drop(span(SpanGroup::JOB, "test.interval").trace_id(id).start());
    }
    let spans = spans(&exporter);
    let interval = named(&spans, "test.interval");
    assert_eq!(interval.span_context.trace_id().to_bytes(), id);
    assert_eq!(interval.parent_span_id, SpanId::INVALID, "a chosen trace id makes a root");
    assert_ne!(named(&spans, "test.outer").span_context.trace_id().to_bytes(), id);
}

#[test]
fn builder_start_unattached_is_a_child_but_not_current_and_start_detached_is_send() {
    let exporter = capture(&[SpanGroup::STEP]);
    {
        let _step = managed_span(SpanGroup::STEP, "test.step", []);
        let beside = span(SpanGroup::STEP, "test.beside")
            .attributes_redacted([KeyValue::new("prompt", "do not export")], DEFAULT_REDACT_KEYS)
            .start_unattached();
        assert!(beside.is_recording());
        drop(managed_span(SpanGroup::STEP, "test.next", []));
        let detached = span(SpanGroup::STEP, "test.detached").start_detached();
        std::thread::spawn(move || drop(detached)).join().unwrap();
    }
    let spans = spans(&exporter);
    let step = named(&spans, "test.step").span_context.span_id();
    assert_eq!(named(&spans, "test.beside").parent_span_id, step);
    assert_eq!(named(&spans, "test.next").parent_span_id, step, "the unattached span is not current");
    assert_eq!(named(&spans, "test.detached").parent_span_id, step);
    assert_eq!(attribute(named(&spans, "test.beside"), "prompt"), Some(Value::from("[REDACTED]")));
}

#[test]
fn a_disabled_builder_records_nothing_and_never_iterates_its_arguments() {
    let exporter = capture(&[SpanGroup::JOB]);
    let iterated = AtomicUsize::new(0);
    let builder = span(SpanGroup::STEP, "test.off")
        .links((0..3).map(|_| {
            iterated.fetch_add(1, Ordering::Relaxed);
            SpanLink::new(&RemoteContext::none())
        }))
        .attributes((0..3).map(|i| {
            iterated.fetch_add(1, Ordering::Relaxed);
            KeyValue::new("test.i", i)
        }))
        .kind(SpanKind::Server)
        .start_time(SystemTime::now())
        .sampling_key(1)
        .trace_id([1; 16]);
    assert!(!builder.is_enabled());
    let guard = builder.start();
    assert!(!guard.is_recording());
    drop(guard);
    assert!(!span(SpanGroup::STEP, "test.off").start_detached().is_recording());
    assert!(!span(SpanGroup::STEP, "test.off").end_at(SystemTime::now()).is_valid());
    assert_eq!(iterated.load(Ordering::Relaxed), 0);
    assert!(spans(&exporter).is_empty());

    // The ungated builder records whatever the groups.
    drop(ungated_span("test.ungated").start());
    assert_eq!(only_span(&exporter).name, "test.ungated");
}
