//! The cost of one metric record through lens's handles against the same
//! record on a raw SDK instrument, one pair per instrument kind, measured
//! side by side in one run so that `cargo xtask bench` can pair them by id:
//!
//! - gauge: `GymMetrics::record` with only `verify_success_rate` set
//!   (`metric_records/lens_gauge`) vs `Gauge<f64>::record`
//!   (`metric_records/raw_gauge`);
//! - histogram: `GymMetrics::record` with only `verify_duration_ms` set
//!   (`metric_records/lens_histogram`) vs `Histogram<f64>::record`
//!   (`metric_records/raw_histogram`);
//! - counter: `TrainingMetrics::record` with only `skipped_iters` set
//!   (`metric_records/lens_counter`) vs `Counter<u64>::add`
//!   (`metric_records/raw_counter`).
//!
//! Lens has no wrapper over a single instrument; these handles are what a
//! user records through, so the pairs measure what a handle adds (the
//! `Option` checks over the absent fields). Both sides record on ONE meter,
//! and the raw instruments have the same names, kinds, units, descriptions
//! and boundaries as the handles' (so they are the same streams), from a
//! meter provider with a periodic reader (1 s interval) around an exporter
//! that discards every batch.
//!
//! Run: `cargo bench -p megatron-telemetry --bench metric_records`.

#![expect(missing_docs, reason = "criterion_group! and criterion_main! generate undocumented items")]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use lens_instruments::gym::{GymMetrics, GymValues, VERIFY_DURATION, VERIFY_SUCCESS_RATE};
use megatron_telemetry::metrics::{SKIPPED_ITERS, TrainingMetrics, TrainingValues};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};

/// Drops every batch: the bench measures the recording thread, not an export.
#[derive(Debug)]
struct DiscardingExporter;

impl PushMetricExporter for DiscardingExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        black_box(metrics);
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

fn metric_records(c: &mut Criterion) {
    let reader = PeriodicReader::builder(DiscardingExporter).with_interval(Duration::from_secs(1)).build();
    let provider = SdkMeterProvider::builder().with_reader(reader).build();
    let meter = provider.meter("megatron-bench");

    let gym = GymMetrics::new(&meter);
    let training = TrainingMetrics::new(&meter);
    let raw_gauge = meter.f64_gauge(VERIFY_SUCCESS_RATE.name).with_description(VERIFY_SUCCESS_RATE.description).build();
    let raw_histogram = meter
        .f64_histogram(VERIFY_DURATION.name)
        .with_description(VERIFY_DURATION.description)
        .with_unit(VERIFY_DURATION.unit)
        .with_boundaries(VERIFY_DURATION.boundaries.to_vec())
        .build();
    let raw_counter = meter.u64_counter(SKIPPED_ITERS.name).with_description(SKIPPED_ITERS.description).build();

    // The values struct is written at the call site, as instrumented code
    // writes it: which fields are present is known there, the values are not.
    let mut group = c.benchmark_group("metric_records");
    group.bench_function("lens_gauge", |b| {
        b.iter(|| gym.record(&GymValues { verify_success_rate: Some(black_box(0.87)), ..GymValues::default() }))
    });
    group.bench_function("raw_gauge", |b| b.iter(|| raw_gauge.record(black_box(0.87), &[])));
    group.bench_function("lens_histogram", |b| {
        b.iter(|| gym.record(&GymValues { verify_duration_ms: Some(black_box(120.0)), ..GymValues::default() }))
    });
    group.bench_function("raw_histogram", |b| b.iter(|| raw_histogram.record(black_box(120.0), &[])));
    group.bench_function("lens_counter", |b| {
        b.iter(|| training.record(&TrainingValues { skipped_iters: Some(black_box(1)), ..TrainingValues::default() }))
    });
    group.bench_function("raw_counter", |b| b.iter(|| raw_counter.add(black_box(1), &[])));
    group.finish();

    provider.shutdown().expect("the meter provider shuts down");
}

criterion_group!(benches, metric_records);
criterion_main!(benches);
