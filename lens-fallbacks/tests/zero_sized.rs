//! With the `otel` feature off (`cargo test -p lens-fallbacks
//! --no-default-features`), what instrumented code holds on its hot path is
//! zero-sized, as the crate documentation says: the span guards, the span
//! builder, the meter and every metric handle (lens-instruments' recording
//! structs built from them: `lens-instruments/tests/zero_sized.rs`). A field that leaked into the off build
//! (an `Option`, a name, an `Arc`) would cost every caller memory and moves
//! even with telemetry compiled out.

#![cfg(not(feature = "otel"))]

use std::mem::{size_of, size_of_val};

use lens_fallbacks::{
    Counter, DetachedSpan, Gauge, Histogram, KeyValue, Meter, SpanBuilder, SpanGroup, SpanGuard, UpDownCounter,
    managed_span, span,
};

#[test]
fn span_guards_builders_and_metric_handles_are_zero_sized() {
    let sizes = [
        ("SpanGuard", size_of::<SpanGuard>()),
        ("DetachedSpan", size_of::<DetachedSpan>()),
        ("SpanBuilder", size_of::<SpanBuilder>()),
        ("Meter", size_of::<Meter>()),
        ("Counter<u64>", size_of::<Counter<u64>>()),
        ("Counter<f64>", size_of::<Counter<f64>>()),
        ("UpDownCounter<i64>", size_of::<UpDownCounter<i64>>()),
        ("UpDownCounter<f64>", size_of::<UpDownCounter<f64>>()),
        ("Histogram<u64>", size_of::<Histogram<u64>>()),
        ("Histogram<f64>", size_of::<Histogram<f64>>()),
        ("Gauge<u64>", size_of::<Gauge<u64>>()),
        ("Gauge<i64>", size_of::<Gauge<i64>>()),
        ("Gauge<f64>", size_of::<Gauge<f64>>()),
    ];
    let sized: Vec<_> = sizes.iter().filter(|(_, size)| *size != 0).collect();
    assert!(sized.is_empty(), "not zero-sized with `otel` off (name, bytes): {sized:?}");
}

#[test]
fn what_the_calls_return_is_zero_sized_too() {
    // The values a caller actually holds, through the facade's functions and
    // macro (the types above, but from the calls, so a wrapper cannot hide).
    let guard = managed_span!(SpanGroup::STEP, "example.step", "example.iteration" => 3_u64);
    let builder = span(SpanGroup::STEP, "example.step").attributes([KeyValue::new("example.iteration", 3_u64)]);
    let meter = Meter::noop();
    let counter = meter.u64_counter("example.count").build();
    let histogram = meter.f64_histogram("example.seconds").with_unit("s").build();
    assert_eq!(
        [size_of_val(&guard), size_of_val(&builder), size_of_val(&counter), size_of_val(&histogram)],
        [0, 0, 0, 0]
    );
}
