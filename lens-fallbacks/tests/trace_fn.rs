//! `#[trace_fn]` through the facade against a real SDK tracer: the group is
//! checked at each call, the span carries the name, nests under the current
//! span, and an `Err` marks it `ERROR`.
//!
//! The active tracer and the gate are process-global, so this file is its own
//! test binary and its tests take a lock. Run with
//! `cargo test -p lens-fallbacks --features testing --test trace_fn`.
#![cfg(feature = "testing")]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use lens_fallbacks::testing::{Capture, capture};
use lens_fallbacks::{SpanGroup, managed_span, trace_fn};
use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;

fn spans(exporter: &Capture) -> Vec<SpanData> {
    exporter.finished_spans()
}

fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..100 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("the future did not complete in 100 polls");
}

#[trace_fn(group = SpanGroup::STEP, name = "test.train_step")]
fn train_step(x: u32) -> u32 {
    x + 1
}

#[trace_fn(group = SpanGroup::CHECKPOINT, name = "test.save")]
fn save(fail: bool) -> std::io::Result<()> {
    if fail { Err(std::io::Error::other("disk full")) } else { Ok(()) }
}

#[trace_fn(group = SpanGroup::EVALUATE, name = "test.serve")]
async fn serve(x: u32) -> u32 {
    drop(managed_span(SpanGroup::EVALUATE, "test.inner", []));
    x * 3
}

#[test]
fn the_group_is_checked_at_call_time() {
    let exporter = capture(&[]);
    assert_eq!(train_step(1), 2);
    assert!(spans(&exporter).is_empty());

    exporter.enable(&[SpanGroup::STEP]);
    assert_eq!(train_step(2), 3);
    let spans = spans(&exporter);
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].name, "test.train_step");
}

#[test]
fn a_traced_function_nests_under_the_current_span() {
    let exporter = capture(&[SpanGroup::JOB, SpanGroup::STEP]);
    {
        let _job = managed_span(SpanGroup::JOB, "test.job", []);
        train_step(0);
    }
    let spans = spans(&exporter);
    let job = spans.iter().find(|s| s.name == "test.job").expect("job span");
    let step = spans.iter().find(|s| s.name == "test.train_step").expect("step span");
    assert_eq!(step.parent_span_id, job.span_context.span_id());
}

#[test]
fn an_err_result_marks_the_span_error() {
    let exporter = capture(&[SpanGroup::CHECKPOINT]);
    assert!(save(true).is_err());
    assert!(save(false).is_ok());
    let spans = spans(&exporter);
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[0].status, Status::error("disk full"));
    assert_eq!(spans[1].status, Status::Unset);
}

#[test]
fn an_async_traced_function_keeps_its_span_current() {
    let exporter = capture(&[SpanGroup::EVALUATE]);
    assert_eq!(block_on(serve(2)), 6);
    let spans = spans(&exporter);
    let serve = spans.iter().find(|s| s.name == "test.serve").expect("serve span");
    let inner = spans.iter().find(|s| s.name == "test.inner").expect("inner span");
    assert_eq!(inner.parent_span_id, serve.span_context.span_id());
}
