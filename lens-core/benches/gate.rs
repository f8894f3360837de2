//! The cost of the span-group gate, disabled and enabled, against an empty
//! baseline. Budgets are checked by `cargo xtask bench`.

#![expect(missing_docs, reason = "criterion_group! and criterion_main! generate undocumented items")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use lens_core::groups::set_enabled_span_groups;
use lens_core::groups::{GroupSet, SpanGroup, is_span_group_enabled};

fn gate(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate");
    group.bench_function("baseline_empty", |b| b.iter(|| black_box(black_box(SpanGroup::STEP).bit() == 255)));
    set_enabled_span_groups(GroupSet::EMPTY);
    group.bench_function("disabled", |b| b.iter(|| is_span_group_enabled(black_box(SpanGroup::STEP))));
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::STEP]));
    group.bench_function("enabled", |b| b.iter(|| is_span_group_enabled(black_box(SpanGroup::STEP))));
    set_enabled_span_groups(GroupSet::EMPTY);
    group.finish();
}

criterion_group!(benches, gate);
criterion_main!(benches);
