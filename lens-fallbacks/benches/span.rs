//! The cost of lens's span helpers against baselines, measured side by side
//! in one run so that `cargo xtask bench` can pair them by id:
//!
//! - disabled paths against an empty closure: `span/baseline_empty_closure`,
//!   `span/gate_disabled`, `span/managed_span_disabled`;
//! - enabled paths against the raw OpenTelemetry SDK on the same tracer:
//!   `span/managed_span_enabled` vs `span/raw_sdk_span`, and the same pair
//!   with five attributes (`..._5_attrs`).
//!
//! Both enabled sides run on ONE provider (lens's `LensBatchSpanProcessor`
//! around an exporter that discards batches, and the `SeedIndependentIdGenerator`),
//! so they share the processing path and the ratio measures what
//! `managed_span` adds: the gate, the active-tracer load, the attribute
//! conversion, the context clone and the panic check on drop. The raw side
//! is what a user of the SDK writes for the same effect (a span that is
//! current until it ends): `let _guard = Context::current_with_span(tracer.start(..)).attach();`.
//! The queue is large and the scheduled delay short, so no span is dropped;
//! the bench asserts that at the end, since a run that drops spans measures
//! something else.
//!
//! Run: `cargo bench -p lens-fallbacks --features testing --bench span`.

#![expect(missing_docs, reason = "criterion_group! and criterion_main! generate undocumented items")]

use lens_fallbacks::otel::exporters::testing::DiscardingSpanExporter;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::groups::{GroupSet, SpanGroup, is_span_group_enabled};
use lens_fallbacks::otel::active;
use lens_fallbacks::otel::batch::{BatchConfig, LensBatchSpanProcessor};
use lens_fallbacks::otel::ids::SeedIndependentIdGenerator;
use lens_fallbacks::span::managed_span;
use lens_fallbacks::testing::set_enabled_span_groups;
use opentelemetry::Context;
use opentelemetry::trace::{TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

fn provider() -> (SdkTracerProvider, LensBatchSpanProcessor) {
    let config =
        BatchConfig { max_queue_size: 1 << 20, scheduled_delay: Duration::from_millis(10), ..BatchConfig::default() };
    let batch = LensBatchSpanProcessor::new(DiscardingSpanExporter, config);
    let provider = SdkTracerProvider::builder()
        .with_id_generator(SeedIndependentIdGenerator::new())
        .with_span_processor(batch.clone())
        .build();
    (provider, batch)
}

fn lens_attributes() -> [KeyValue; 5] {
    [
        KeyValue::new("bench.iteration", black_box(7_i64)),
        KeyValue::new("bench.loss", black_box(2.5_f64)),
        KeyValue::new("bench.phase", black_box("train")),
        KeyValue::new("bench.checkpoint", black_box(false)),
        KeyValue::new("bench.rank", black_box(3_i64)),
    ]
}

fn sdk_attributes() -> [opentelemetry::KeyValue; 5] {
    [
        opentelemetry::KeyValue::new("bench.iteration", black_box(7_i64)),
        opentelemetry::KeyValue::new("bench.loss", black_box(2.5_f64)),
        opentelemetry::KeyValue::new("bench.phase", black_box("train")),
        opentelemetry::KeyValue::new("bench.checkpoint", black_box(false)),
        opentelemetry::KeyValue::new("bench.rank", black_box(3_i64)),
    ]
}

/// A span on the raw SDK, current until it ends, as a user of the SDK writes it.
fn raw_span(tracer: &SdkTracer) {
    let _guard = Context::current_with_span(tracer.start("bench.span")).attach();
}

fn raw_span_5_attrs(tracer: &SdkTracer) {
    let span = tracer.span_builder("bench.span").with_attributes(sdk_attributes()).start(tracer);
    let _guard = Context::current_with_span(span).attach();
}

fn span(c: &mut Criterion) {
    let (provider, batch) = provider();
    let tracer = provider.tracer("lens-bench");
    active::install(tracer.clone()).expect("the bench is the only user of the active-tracer slot");

    let mut group = c.benchmark_group("span");
    let empty = || {};
    group.bench_function("baseline_empty_closure", |b| b.iter(|| black_box(empty)()));

    set_enabled_span_groups(GroupSet::EMPTY);
    group.bench_function("gate_disabled", |b| b.iter(|| is_span_group_enabled(black_box(SpanGroup::STEP))));
    group.bench_function("managed_span_disabled", |b| {
        b.iter(|| drop(managed_span(SpanGroup::STEP, "bench.span", [])));
    });

    set_enabled_span_groups(GroupSet::of(&[SpanGroup::STEP]));
    group.bench_function("managed_span_enabled", |b| {
        b.iter(|| drop(managed_span(SpanGroup::STEP, "bench.span", [])));
    });
    group.bench_function("raw_sdk_span", |b| b.iter(|| raw_span(&tracer)));
    group.bench_function("managed_span_enabled_5_attrs", |b| {
        b.iter(|| drop(managed_span(SpanGroup::STEP, "bench.span", lens_attributes())));
    });
    group.bench_function("raw_sdk_span_5_attrs", |b| b.iter(|| raw_span_5_attrs(&tracer)));
    set_enabled_span_groups(GroupSet::EMPTY);
    group.finish();

    active::uninstall();
    batch.force_flush_with_timeout(Duration::from_secs(30)).expect("the discarding exporter flushes");
    let counters = batch.counters().snapshot();
    assert_eq!(counters.dropped_queue_full, 0, "spans were dropped: the bench measured a full queue");
    provider.shutdown().expect("the provider shuts down");
}

criterion_group!(benches, span);
criterion_main!(benches);
