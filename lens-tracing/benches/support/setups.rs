//! The subscribers and spans that `benches/bridge.rs` (criterion, wall time)
//! and `examples/tracing-calls.rs` (instruction counts) both measure, so the
//! two measure the same thing: lens set up as a job sets it up (its spans on
//! the span recorder, the open-span closer and its table on, a discarding
//! exporter, the `job` group on), and beside it one SDK provider with a
//! discarding exporter for the comparisons; the same `tracing` span through
//! the bridge, through `tracing-opentelemetry` lean and with its defaults,
//! through the registry with a no-op layer (alone and behind the bridge's
//! per-layer filter), and the same span built with the SDK alone.

use std::collections::HashMap;
use std::hint::black_box;

use lens_fallbacks::config::{ExporterKind, LensConfig};
use lens_fallbacks::groups::{GroupSet, LENS_CATALOG, SpanGroup};
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::exporters::testing::DiscardingSpanExporter;
use lens_fallbacks::setup::{SetupOptions, Telemetry, setup_telemetry};
use lens_fallbacks::testing::set_enabled_span_groups;
use lens_fallbacks::tracing_rules::TracingRules;
use opentelemetry::trace::{Span as _, SpanBuilder, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Dispatch;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// What [`install`] set up: lens's telemetry (the bridge records through
/// it) and the comparisons' SDK provider.
pub(crate) struct Installed {
    /// The SDK provider of `tracing-opentelemetry` and of the SDK alone.
    pub(crate) provider: SdkTracerProvider,
    _telemetry: Telemetry,
}

/// Sets lens up with a discarding exporter (and `<PREFIX>_CONTEXT_PER_SPAN`
/// as given), and builds the comparisons' provider beside it.
pub(crate) fn install(context_per_span: bool) -> Installed {
    let mut config = LensConfig {
        enabled: true,
        span_groups: "job".into(),
        rank_strategy: "all_ranks".into(),
        exporter: Some(ExporterKind::Console),
        metrics_enabled: false,
        context_per_span,
        ..LensConfig::default()
    };
    // A queue that holds every span of the longest count: under callgrind
    // the export thread falls behind, and a dropped span costs less than a
    // kept one.
    config.otel.batch.max_queue_size = 1 << 20;
    let env = HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "bench".to_string())]);
    let options = SetupOptions::new().with_span_exporter(DiscardingSpanExporter).with_env(env);
    let telemetry = setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("lens sets up");
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::JOB]));
    let provider = SdkTracerProvider::builder().with_simple_exporter(DiscardingSpanExporter).build();
    Installed { provider, _telemetry: telemetry }
}

/// The SDK alone's tracer.
pub(crate) fn sdk_tracer(provider: &SdkTracerProvider) -> SdkTracer {
    provider.tracer("bench-sdk")
}

/// `bench::server` records (group `job`), `bench::off` is off.
fn rules() -> TracingRules {
    TracingRules::parse("bench::server=job, bench::off=off", &LENS_CATALOG).expect("valid rules")
}

/// The registry with the bridge.
pub(crate) fn bridge() -> Dispatch {
    Dispatch::new(tracing_subscriber::registry().with(lens_tracing::layer(rules())))
}

/// The registry with `tracing-opentelemetry` lean: location, thread ids,
/// target and inactivity tracking off.
pub(crate) fn lean(provider: &SdkTracerProvider) -> Dispatch {
    Dispatch::new(
        tracing_subscriber::registry().with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("bench-lean"))
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false),
        ),
    )
}

/// The registry with `tracing-opentelemetry` and its defaults.
pub(crate) fn defaults(provider: &SdkTracerProvider) -> Dispatch {
    Dispatch::new(
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"))),
    )
}

struct NoopLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

/// The registry with a layer that does nothing.
pub(crate) fn noop() -> Dispatch {
    Dispatch::new(tracing_subscriber::registry().with(NoopLayer))
}

/// The same behind the bridge's per-layer filter: what the filter costs a
/// recorded span.
pub(crate) fn filtered_noop() -> Dispatch {
    Dispatch::new(tracing_subscriber::registry().with(NoopLayer.with_filter(lens_tracing::GroupFilter::new(rules()))))
}

/// The recorded span: created, entered, exited, closed.
pub(crate) fn one_span() {
    let span = tracing::info_span!(target: "bench::server", "request", method = "GET");
    let _entered = span.enter();
}

/// A callsite whose group is off.
pub(crate) fn disabled_callsite() {
    let span = tracing::info_span!(target: "bench::off", "request", method = "GET");
    black_box(&span);
}

/// The span of [`one_span`] (name, one attribute) started and ended with the
/// SDK's tracer alone, no `tracing`: what every bridge pays the SDK.
pub(crate) fn sdk_span(tracer: &SdkTracer) {
    let builder = SpanBuilder::from_name("request").with_attributes([KeyValue::new("method", String::from("GET"))]);
    let mut span = tracer.build_with_context(builder, &Context::current());
    black_box(&mut span).end();
}
