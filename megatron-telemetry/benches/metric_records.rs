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
//! `Option` checks over the absent fields). The pairs themselves (one meter,
//! the same streams, a discarding exporter) are in `support/metric_pairs.rs`,
//! which `examples/metric-calls.rs` counts the instructions of.
//!
//! Run: `cargo bench -p megatron-telemetry --bench metric_records`.

#![expect(missing_docs, reason = "criterion_group! and criterion_main! generate undocumented items")]

#[path = "support/metric_pairs.rs"]
mod metric_pairs;

use criterion::{Criterion, criterion_group, criterion_main};
use metric_pairs::Pairs;

fn metric_records(c: &mut Criterion) {
    let pairs = Pairs::new();
    let mut group = c.benchmark_group("metric_records");
    group.bench_function("lens_gauge", |b| b.iter(|| pairs.lens_gauge()));
    group.bench_function("raw_gauge", |b| b.iter(|| pairs.raw_gauge()));
    group.bench_function("lens_histogram", |b| b.iter(|| pairs.lens_histogram()));
    group.bench_function("raw_histogram", |b| b.iter(|| pairs.raw_histogram()));
    group.bench_function("lens_counter", |b| b.iter(|| pairs.lens_counter()));
    group.bench_function("raw_counter", |b| b.iter(|| pairs.raw_counter()));
    group.finish();
    pairs.shutdown();
}

criterion_group!(benches, metric_records);
criterion_main!(benches);
