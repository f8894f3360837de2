//! The `tracing` bridge against `tracing-opentelemetry`, each with a
//! discarding exporter (`cargo xtask bench`, part `tracing`):
//!
//! - `bridge_span`: a recorded span (created, entered, exited, closed)
//!   through lens-tracing, lens set up as a job sets it up (the span
//!   recorder, the open-span closer);
//! - `tracing_opentelemetry_lean` / `tracing_opentelemetry_default`: the same
//!   span through `tracing-opentelemetry` 0.34 (the line for
//!   opentelemetry 0.33) with location, thread ids, target and inactivity
//!   tracking off, and with its defaults;
//! - `registry_noop_layer`: `tracing`'s registry with a layer that does
//!   nothing, for scale;
//! - `registry_filtered_noop_layer`: the same behind the bridge's per-layer
//!   filter, and `sdk_span`: the same span with the SDK alone (together, the
//!   floor any bridge pays before its own code);
//! - `bridge_disabled_callsite` / `no_subscriber_callsite`: a callsite whose
//!   group is off under the bridge, and the same callsite with no subscriber.
//!
//! The setups are `support/setups.rs`, which `examples/tracing-calls.rs`
//! counts the instructions of.
//!
//! Run briefly with `cargo bench -p lens-tracing --features testing --bench bridge -- --quick`.

#![expect(missing_docs, reason = "criterion's macros generate undocumented items")]

#[path = "support/setups.rs"]
mod setups;

use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let installed = setups::install(false);
    let provider = &installed.provider;
    let mut group = c.benchmark_group("tracing");
    let bridge = setups::bridge();
    // The disabled pair first, while the bridge is the only subscriber: a
    // callsite's interest is the union over every live subscriber, as in a
    // job with one.
    tracing::dispatcher::with_default(&bridge, || {
        group.bench_function("bridge_disabled_callsite", |b| b.iter(setups::disabled_callsite));
    });
    let none = tracing::Dispatch::none();
    tracing::dispatcher::with_default(&none, || {
        group.bench_function("no_subscriber_callsite", |b| b.iter(setups::disabled_callsite));
    });
    for (id, dispatch) in [
        ("bridge_span", &bridge),
        ("tracing_opentelemetry_lean", &setups::lean(provider)),
        ("tracing_opentelemetry_default", &setups::defaults(provider)),
        ("registry_noop_layer", &setups::noop()),
        ("registry_filtered_noop_layer", &setups::filtered_noop()),
    ] {
        tracing::dispatcher::with_default(dispatch, || group.bench_function(id, |b| b.iter(setups::one_span)));
    }
    let tracer = setups::sdk_tracer(provider);
    group.bench_function("sdk_span", |b| b.iter(|| setups::sdk_span(&tracer)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
