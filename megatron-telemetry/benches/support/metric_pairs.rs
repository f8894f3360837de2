//! The pairs of `metric_records` (one metric record through a lens handle,
//! and the same record on the raw SDK instrument of the same stream), shared
//! by the criterion bench (`benches/metric_records.rs`) and the instruction
//! counter (`examples/metric-calls.rs`), so both measure the same calls.
//!
//! The values struct is written at the call site, as instrumented code
//! writes it: which fields are present is known there, the values are not.
//! Each side reaches its handle or instrument through `black_box`, as a call
//! site reaches it in memory once per log interval: otherwise the compiler
//! hoists the raw instrument's vtable loads out of a benchmark loop on one
//! side only, and the pair measures that instead of the handle.

use lens_fallbacks::otel::exporters::testing::DiscardingMetricExporter;
use std::hint::black_box;
use std::time::Duration;

use lens_instruments::gym::{GymMetrics, GymValues, VERIFY_DURATION, VERIFY_SUCCESS_RATE};
use megatron_telemetry::metrics::{SKIPPED_ITERS, TrainingMetrics, TrainingValues};
use opentelemetry::metrics::{Counter, Gauge, Histogram, MeterProvider as _};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

/// Both sides of every pair, on ONE meter of a provider with a periodic
/// reader (1 s interval) around an exporter that discards every batch; the
/// raw instruments have the handles' names, kinds, units, descriptions and
/// boundaries, so they are the same streams.
pub(crate) struct Pairs {
    provider: SdkMeterProvider,
    gym: GymMetrics,
    training: TrainingMetrics,
    raw_gauge: Gauge<f64>,
    raw_histogram: Histogram<f64>,
    raw_counter: Counter<u64>,
}

impl Pairs {
    pub(crate) fn new() -> Pairs {
        let reader = PeriodicReader::builder(DiscardingMetricExporter).with_interval(Duration::from_secs(1)).build();
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        let meter = provider.meter("megatron-bench");
        Pairs {
            gym: GymMetrics::new(&meter),
            training: TrainingMetrics::new(&meter),
            raw_gauge: meter
                .f64_gauge(VERIFY_SUCCESS_RATE.name)
                .with_description(VERIFY_SUCCESS_RATE.description)
                .build(),
            raw_histogram: meter
                .f64_histogram(VERIFY_DURATION.name)
                .with_description(VERIFY_DURATION.description)
                .with_unit(VERIFY_DURATION.unit)
                .with_boundaries(VERIFY_DURATION.boundaries.to_vec())
                .build(),
            raw_counter: meter.u64_counter(SKIPPED_ITERS.name).with_description(SKIPPED_ITERS.description).build(),
            provider,
        }
    }

    /// `GymMetrics::record` with only `verify_success_rate` set.
    #[inline]
    pub(crate) fn lens_gauge(&self) {
        black_box(&self.gym).record(&GymValues { verify_success_rate: Some(black_box(0.87)), ..GymValues::default() });
    }

    #[inline]
    pub(crate) fn raw_gauge(&self) {
        black_box(&self.raw_gauge).record(black_box(0.87), &[]);
    }

    /// `GymMetrics::record` with only `verify_duration_ms` set.
    #[inline]
    pub(crate) fn lens_histogram(&self) {
        black_box(&self.gym).record(&GymValues { verify_duration_ms: Some(black_box(120.0)), ..GymValues::default() });
    }

    #[inline]
    pub(crate) fn raw_histogram(&self) {
        black_box(&self.raw_histogram).record(black_box(120.0), &[]);
    }

    /// `TrainingMetrics::record` with only `skipped_iters` set.
    #[inline]
    pub(crate) fn lens_counter(&self) {
        black_box(&self.training)
            .record(&TrainingValues { skipped_iters: Some(black_box(1)), ..TrainingValues::default() });
    }

    #[inline]
    pub(crate) fn raw_counter(&self) {
        black_box(&self.raw_counter).add(black_box(1), &[]);
    }

    pub(crate) fn shutdown(self) {
        self.provider.shutdown().expect("the meter provider shuts down");
    }
}
