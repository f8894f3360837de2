//! A lens span against fastrace's `LocalSpan` under a root, side by side in
//! one run (criterion group `fastrace`), with no attributes and with five
//! attributes against five properties; see the crate's docs for the setup.
//!
//! Run: `cargo bench -p fastrace-compare --features testing --bench compare`.

#![expect(missing_docs, reason = "criterion_group! and criterion_main! generate undocumented items")]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use fastrace_compare::{
    fastrace_spans, fastrace_spans_5_props, finish_fastrace, finish_lens, lens_spans, lens_spans_5_attrs,
    setup_fastrace, setup_lens,
};

/// Times `iters` spans of `spans` (each side's loop runs whole chunks, so
/// fastrace's root per chunk is counted).
fn timed(spans: fn(u64), iters: u64) -> Duration {
    let start = Instant::now();
    spans(iters);
    start.elapsed()
}

fn compare(c: &mut Criterion) {
    let telemetry = setup_lens();
    setup_fastrace();
    let mut group = c.benchmark_group("fastrace");
    group.bench_function("lens_span", |b| b.iter_custom(|iters| timed(lens_spans, iters)));
    group.bench_function("fastrace_local_span", |b| b.iter_custom(|iters| timed(fastrace_spans, iters)));
    group.bench_function("lens_span_5_attrs", |b| b.iter_custom(|iters| timed(lens_spans_5_attrs, iters)));
    group.bench_function("fastrace_local_span_5_props", |b| {
        b.iter_custom(|iters| timed(fastrace_spans_5_props, iters));
    });
    group.finish();
    finish_fastrace();
    assert_eq!(finish_lens(&telemetry), 0, "lens dropped spans: the bench measured a full queue");
}

criterion_group!(benches, compare);
criterion_main!(benches);
