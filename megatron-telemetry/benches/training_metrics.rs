//! The cost of recording the eight training metrics through
//! `TrainingMetrics::record` against the same eight calls made directly on
//! SDK instruments, measured side by side in one run so that
//! `cargo xtask bench` can pair them by id:
//! `training_metrics/record_all_eight` vs `training_metrics/raw_sdk_eight`.
//!
//! Both sides record on ONE meter, from a meter provider with a periodic
//! reader (1 s interval, so collections run during the measurement as they do
//! in a job) around an exporter that discards every batch. The raw
//! instruments are created with the same names, kinds, units, descriptions
//! and histogram boundaries as `TrainingMetrics::new` uses, so they resolve
//! to the same streams and the ratio measures what the handle adds (the
//! `Option` checks and the skipped-iterations test). Every value is present
//! and the skipped-iterations count is above zero, so all eight instruments
//! record on both sides.
//!
//! Run: `cargo bench -p megatron-telemetry --bench training_metrics`.

#![expect(missing_docs, reason = "criterion_group! and criterion_main! generate undocumented items")]

use lens_fallbacks::otel::exporters::testing::DiscardingMetricExporter;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use megatron_telemetry::metrics::{
    GRAD_NORM, LEARNING_RATE, LOSS, MEMORY_ALLOCATED_GB, MetricDef, SKIPPED_ITERS, STEP_DURATION_BOUNDARIES_MS,
    STEP_DURATION_MS, THROUGHPUT_TFLOPS, TOKENS_PER_SEC, TrainingMetrics, TrainingValues,
};
use opentelemetry::metrics::{Gauge, Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

const VALUES: TrainingValues = TrainingValues {
    step_duration_ms: Some(812.0),
    loss: Some(2.5),
    throughput_tflops: Some(410.0),
    grad_norm: Some(1.25),
    skipped_iters: Some(1),
    learning_rate: Some(3e-4),
    tokens_per_sec: Some(250_000.0),
    memory_allocated_gb: Some(61.5),
};

fn gauge(meter: &Meter, def: &MetricDef) -> Gauge<f64> {
    meter.f64_gauge(def.name).with_description(def.description).build()
}

fn training_metrics(c: &mut Criterion) {
    let reader = PeriodicReader::builder(DiscardingMetricExporter).with_interval(Duration::from_secs(1)).build();
    let provider = SdkMeterProvider::builder().with_reader(reader).build();
    let meter = provider.meter("megatron-bench");

    let metrics = TrainingMetrics::new(&meter);
    let mut step_duration = meter
        .f64_histogram(STEP_DURATION_MS.name)
        .with_description(STEP_DURATION_MS.description)
        .with_boundaries(STEP_DURATION_BOUNDARIES_MS.to_vec());
    if let Some(unit) = STEP_DURATION_MS.unit {
        step_duration = step_duration.with_unit(unit);
    }
    let step_duration = step_duration.build();
    let loss = gauge(&meter, &LOSS);
    let throughput = gauge(&meter, &THROUGHPUT_TFLOPS);
    let tokens_per_sec = gauge(&meter, &TOKENS_PER_SEC);
    let grad_norm = gauge(&meter, &GRAD_NORM);
    let skipped_iters = meter.u64_counter(SKIPPED_ITERS.name).with_description(SKIPPED_ITERS.description).build();
    let learning_rate = gauge(&meter, &LEARNING_RATE);
    let memory = gauge(&meter, &MEMORY_ALLOCATED_GB);
    let raw_values = (812.0, 2.5, 410.0, 250_000.0, 1.25, 1_u64, 3e-4, 61.5);

    let mut group = c.benchmark_group("training_metrics");
    group.bench_function("record_all_eight", |b| b.iter(|| metrics.record(black_box(&VALUES))));
    group.bench_function("raw_sdk_eight", |b| {
        b.iter(|| {
            let (step, l, tflops, tokens, norm, skipped, lr, gib) = black_box(raw_values);
            step_duration.record(step, &[]);
            loss.record(l, &[]);
            throughput.record(tflops, &[]);
            tokens_per_sec.record(tokens, &[]);
            grad_norm.record(norm, &[]);
            skipped_iters.add(skipped, &[]);
            learning_rate.record(lr, &[]);
            memory.record(gib, &[]);
        });
    });
    group.finish();

    provider.shutdown().expect("the meter provider shuts down");
}

criterion_group!(benches, training_metrics);
criterion_main!(benches);
