//! The reference cost of one metric record on the raw OpenTelemetry SDK:
//! `metrics/raw_gauge`, `metrics/raw_histogram` and `metrics/raw_counter`.
//!
//! Lens has no wrapper over a single instrument (instruments are created once
//! at setup and recorded on directly), so these are the reference figures;
//! the pair that checks lens's own recording code, `TrainingMetrics::record`
//! against the same eight calls on the SDK, is in
//! `megatron-telemetry/benches/training_metrics.rs`.
//!
//! The meter provider is the one setup builds, minus the exporter: a periodic
//! reader (1 s interval, so collections run during the measurement as they
//! do in a job) around an exporter that discards every batch. Records carry
//! no attributes, like the training metrics.
//!
//! Run: `cargo bench -p lens-otel-runtime --features testing --bench metrics`.

#![expect(missing_docs, reason = "criterion_group! and criterion_main! generate undocumented items")]

use lens_otel_runtime::exporters::testing::DiscardingMetricExporter;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

fn metrics(c: &mut Criterion) {
    let reader = PeriodicReader::builder(DiscardingMetricExporter).with_interval(Duration::from_secs(1)).build();
    let provider = SdkMeterProvider::builder().with_reader(reader).build();
    let meter = provider.meter("lens-bench");
    let gauge = meter.f64_gauge("bench.gauge").build();
    let histogram = meter.f64_histogram("bench.histogram").with_unit("ms").build();
    let counter = meter.u64_counter("bench.counter").build();

    let mut group = c.benchmark_group("metrics");
    group.bench_function("raw_gauge", |b| b.iter(|| gauge.record(black_box(2.5), &[])));
    group.bench_function("raw_histogram", |b| b.iter(|| histogram.record(black_box(812.0), &[])));
    group.bench_function("raw_counter", |b| b.iter(|| counter.add(black_box(1), &[])));
    group.finish();

    provider.shutdown().expect("the meter provider shuts down");
}

criterion_group!(benches, metrics);
criterion_main!(benches);
