//! The cost of the facade's span helpers for a disabled group, against an
//! empty-closure baseline, in whichever mode the crate is built.
//!
//! The benchmark ids are the same in both modes (`facade/baseline_empty_closure`,
//! `facade/managed_span_disabled`, `facade/in_managed_span_disabled`,
//! `facade/managed_span_disabled_5_attrs`: the `managed_span!` macro with five
//! attributes whose values are runtime variables); the
//! mode is told apart by the output directory. With `otel` on, nothing is set
//! up, so every group is disabled and the helpers take lens-core's gated path;
//! with `otel` off they are the inline no-ops, which should cost nothing over
//! the baseline. Run both from the workspace root (cargo runs a bench in its
//! package's directory, so `CRITERION_HOME` must be absolute):
//!
//! ```text
//! CRITERION_HOME="$PWD/target/criterion/facade-otel" cargo bench -p lens-fallbacks --bench facade
//! CRITERION_HOME="$PWD/target/criterion/facade-noop" cargo bench -p lens-fallbacks --no-default-features --bench facade
//! ```

#![expect(missing_docs, reason = "criterion_group! and criterion_main! generate undocumented items")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use lens_fallbacks::{SpanGroup, in_managed_span, managed_span};

/// Five attribute values that are runtime variables, as at a real call site
/// (an iteration number, a loss, a name, a flag, a count): `black_box` keeps
/// the optimiser from treating them as constants.
fn runtime_values() -> (u64, f64, &'static str, bool, i64) {
    black_box((7, 2.5, "gpt", true, 4096))
}

fn facade(c: &mut Criterion) {
    let mut group = c.benchmark_group("facade");
    let empty = || {};
    group.bench_function("baseline_empty_closure", |b| b.iter(|| black_box(empty)()));
    group.bench_function("managed_span_disabled", |b| {
        b.iter(|| drop(managed_span(SpanGroup::STEP, "bench.span", [])));
    });
    group.bench_function("in_managed_span_disabled", |b| {
        b.iter(|| in_managed_span(SpanGroup::STEP, "bench.span", [], |_span| black_box(42_u64)));
    });
    let (iteration, loss, model, ok, tokens) = runtime_values();
    group.bench_function("managed_span_disabled_5_attrs", |b| {
        b.iter(|| {
            drop(managed_span!(
                SpanGroup::STEP,
                "bench.span",
                "bench.iteration" => iteration,
                "bench.loss" => loss,
                "bench.model" => model,
                "bench.ok" => ok,
                "bench.tokens" => tokens,
            ))
        });
    });
    group.finish();
}

criterion_group!(benches, facade);
criterion_main!(benches);
