//! One `tracing` span, `N` times, through the bridge or a comparison
//! subscriber, for instruction counts under callgrind (`cargo xtask bench
//! --only tracing` runs it when the wall-time band is too wide to decide):
//! `tracing-calls <mode> <N>` with mode
//!
//! - `bridge`: the span through lens-tracing;
//! - `lean`: through `tracing-opentelemetry`, configured lean;
//! - `noop`: `tracing`'s registry with a layer that does nothing;
//! - `filtered_noop`: the same layer behind the bridge's per-layer filter
//!   (what the filter costs a recorded span);
//! - `sdk`: the same span (name, one attribute) started and ended with the
//!   SDK's tracer alone, no `tracing` (what every bridge pays the SDK);
//! - `none`: the loop alone.

use std::hint::black_box;

use lens_core::groups::{GroupSet, LENS_CATALOG, SpanGroup};
use lens_core::otel::active;
use lens_core::testing::set_enabled_span_groups;
use lens_core::tracing_rules::TracingRules;
use opentelemetry::trace::{Span as _, SpanBuilder, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::Layer as _;
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

struct NoopLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

fn one_span() {
    let span = tracing::info_span!(target: "bench::server", "request", method = "GET");
    let _entered = span.enter();
}

fn sdk_span(tracer: &opentelemetry_sdk::trace::SdkTracer) {
    let builder = SpanBuilder::from_name("request").with_attributes([KeyValue::new("method", String::from("GET"))]);
    let mut span = tracer.build_with_context(builder, &Context::current());
    black_box(&mut span).end();
}

#[expect(clippy::print_stderr, reason = "the errors of a command-line tool")]
fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("usage: tracing-calls <bridge|lean|noop|filtered_noop|sdk|none> <N>");
        std::process::exit(2);
    };
    let provider = SdkTracerProvider::builder().with_simple_exporter(Discard).build();
    active::install(provider.tracer("lens-tracing-bench")).expect("no tracer installed yet");
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::JOB]));
    let dispatch = match mode.as_str() {
        "bridge" => {
            tracing::Dispatch::new(tracing_subscriber::registry().with(lens_tracing::layer(
                TracingRules::parse("bench::server=job", &LENS_CATALOG).expect("valid rules"),
            )))
        }
        "lean" => tracing::Dispatch::new(
            tracing_subscriber::registry().with(
                tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("bench-lean"))
                    .with_location(false)
                    .with_threads(false)
                    .with_target(false)
                    .with_tracked_inactivity(false),
            ),
        ),
        "noop" => tracing::Dispatch::new(tracing_subscriber::registry().with(NoopLayer)),
        "filtered_noop" => tracing::Dispatch::new(tracing_subscriber::registry().with(NoopLayer.with_filter(
            lens_tracing::GroupFilter::new(
                TracingRules::parse("bench::server=job", &LENS_CATALOG).expect("valid rules"),
            ),
        ))),
        "sdk" => {
            let tracer = active::tracer().expect("installed above");
            for _ in 0..n {
                sdk_span(tracer);
            }
            return;
        }
        "none" => tracing::Dispatch::none(),
        other => {
            eprintln!("tracing-calls: unknown mode {other:?}: accepted: bridge, lean, noop, filtered_noop, sdk, none");
            std::process::exit(2);
        }
    };
    tracing::dispatcher::with_default(&dispatch, || {
        for _ in 0..n {
            one_span();
        }
    });
}
