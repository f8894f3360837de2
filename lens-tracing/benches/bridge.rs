//! The `tracing` bridge against `tracing-opentelemetry` on the same SDK
//! provider with a discarding exporter (`cargo xtask bench`, part `tracing`):
//!
//! - `bridge_span`: a recorded span (created, entered, exited, closed)
//!   through lens-tracing;
//! - `tracing_opentelemetry_lean` / `tracing_opentelemetry_default`: the same
//!   span through `tracing-opentelemetry` 0.34 (the line for
//!   opentelemetry 0.33) with location, thread ids, target and inactivity
//!   tracking off, and with its defaults;
//! - `registry_noop_layer`: `tracing`'s registry with a layer that does
//!   nothing, for scale;
//! - `bridge_disabled_callsite` / `no_subscriber_callsite`: a callsite whose
//!   group is off under the bridge, and the same callsite with no subscriber.
//!
//! Run briefly with `cargo bench -p lens-tracing --features testing --bench bridge -- --quick`.

#![expect(missing_docs, reason = "criterion's macros generate undocumented items")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use lens_core::groups::{GroupSet, LENS_CATALOG, SpanGroup};
use lens_core::otel::active;
use lens_core::testing::set_enabled_span_groups;
use lens_core::tracing_rules::TracingRules;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::layer::SubscriberExt as _;

/// Drops every span.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(black_box(batch));
        Ok(())
    }
}

fn one_span() {
    let span = tracing::info_span!(target: "bench::server", "request", method = "GET");
    let _entered = span.enter();
}

fn disabled_callsite() {
    let span = tracing::info_span!(target: "bench::off", "request", method = "GET");
    black_box(&span);
}

fn bench(c: &mut Criterion) {
    let provider = SdkTracerProvider::builder().with_simple_exporter(Discard).build();
    active::install(provider.tracer("lens-tracing-bench")).expect("no tracer installed yet");
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::JOB]));
    let rules = || TracingRules::parse("bench::server=job, bench::off=off", &LENS_CATALOG).unwrap();

    let mut group = c.benchmark_group("tracing");
    let bridge = tracing::Dispatch::new(tracing_subscriber::registry().with(lens_tracing::layer(rules())));
    // The disabled pair first, while the bridge is the only subscriber: a
    // callsite's interest is the union over every live subscriber, as in a
    // job with one.
    tracing::dispatcher::with_default(&bridge, || {
        group.bench_function("bridge_disabled_callsite", |b| b.iter(disabled_callsite));
    });
    let none = tracing::Dispatch::none();
    tracing::dispatcher::with_default(&none, || {
        group.bench_function("no_subscriber_callsite", |b| b.iter(disabled_callsite));
    });
    let lean = tracing::Dispatch::new(
        tracing_subscriber::registry().with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("bench-lean"))
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false),
        ),
    );
    let defaults = tracing::Dispatch::new(
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"))),
    );
    let noop = tracing::Dispatch::new(tracing_subscriber::registry().with(NoopLayer));
    for (id, dispatch) in [
        ("bridge_span", &bridge),
        ("tracing_opentelemetry_lean", &lean),
        ("tracing_opentelemetry_default", &defaults),
        ("registry_noop_layer", &noop),
    ] {
        tracing::dispatcher::with_default(dispatch, || group.bench_function(id, |b| b.iter(one_span)));
    }
    group.finish();
}

struct NoopLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

criterion_group!(benches, bench);
criterion_main!(benches);
