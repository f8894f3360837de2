//! A tiny program for counting instructions under callgrind: it records `N`
//! spans of one enabled-span scenario of `benches/span.rs` in a loop, so that
//! `cargo xtask bench` can count the calling thread's instructions for `N`
//! and `2N` and take the difference, which leaves exactly what one more span
//! costs the thread that records it. The export worker runs on its own
//! thread and is not counted (callgrind `--separate-threads=yes`, the main
//! thread's file); both sides share it, so it cancels anyway.
//!
//! ```text
//! span-calls <managed_span_enabled|raw_sdk_span|managed_span_enabled_5_attrs|raw_sdk_span_5_attrs> <N>
//! ```
//!
//! The setup is the bench's: one provider with `LensBatchSpanProcessor`
//! around an exporter that discards batches, the `SeedIndependentIdGenerator`,
//! the tracer installed in the active slot, the `STEP` group on and a queue
//! large enough that no span is dropped (the program fails if one is). The
//! raw side is what a user of the SDK writes for a span that is current until
//! it ends. Wall time decides these scenarios when it is steady; this program
//! decides them when the wall-time band is wider than the budget.

use lens_fallbacks::otel::exporters::testing::DiscardingSpanExporter;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::groups::{GroupSet, SpanGroup};
use lens_fallbacks::otel::active;
use lens_fallbacks::otel::batch::{BatchConfig, LensBatchSpanProcessor};
use lens_fallbacks::otel::ids::SeedIndependentIdGenerator;
use lens_fallbacks::span::managed_span;
use lens_fallbacks::testing::set_enabled_span_groups;
use opentelemetry::Context;
use opentelemetry::trace::{TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

fn lens_attributes() -> [KeyValue; 5] {
    [
        KeyValue::new("bench.iteration", black_box(7_i64)),
        KeyValue::new("bench.loss", black_box(2.5_f64)),
        KeyValue::new("bench.phase", black_box("train")),
        KeyValue::new("bench.checkpoint", black_box(false)),
        KeyValue::new("bench.rank", black_box(3_i64)),
    ]
}

fn sdk_attributes() -> [opentelemetry::KeyValue; 5] {
    [
        opentelemetry::KeyValue::new("bench.iteration", black_box(7_i64)),
        opentelemetry::KeyValue::new("bench.loss", black_box(2.5_f64)),
        opentelemetry::KeyValue::new("bench.phase", black_box("train")),
        opentelemetry::KeyValue::new("bench.checkpoint", black_box(false)),
        opentelemetry::KeyValue::new("bench.rank", black_box(3_i64)),
    ]
}

#[inline(never)]
fn lens_spans(n: u64) {
    for _ in 0..n {
        drop(managed_span(SpanGroup::STEP, "bench.span", []));
    }
}

#[inline(never)]
fn raw_spans(tracer: &SdkTracer, n: u64) {
    for _ in 0..n {
        let _guard = Context::current_with_span(tracer.start("bench.span")).attach();
    }
}

#[inline(never)]
fn lens_spans_5_attrs(n: u64) {
    for _ in 0..n {
        drop(managed_span(SpanGroup::STEP, "bench.span", lens_attributes()));
    }
}

#[inline(never)]
fn raw_spans_5_attrs(tracer: &SdkTracer, n: u64) {
    for _ in 0..n {
        let span = tracer.span_builder("bench.span").with_attributes(sdk_attributes()).start(tracer);
        let _guard = Context::current_with_span(span).attach();
    }
}

#[expect(clippy::print_stderr, reason = "the errors of a command-line tool")]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.get(1).and_then(|n| n.parse::<u64>().ok());
    let (Some(mode), Some(n)) = (args.first().map(String::as_str), n) else {
        eprintln!(
            "usage: span-calls <managed_span_enabled|raw_sdk_span|managed_span_enabled_5_attrs|raw_sdk_span_5_attrs> <N>"
        );
        return ExitCode::from(2);
    };

    let config =
        BatchConfig { max_queue_size: 1 << 20, scheduled_delay: Duration::from_millis(10), ..BatchConfig::default() };
    let batch = LensBatchSpanProcessor::new(DiscardingSpanExporter, config);
    let provider = SdkTracerProvider::builder()
        .with_id_generator(SeedIndependentIdGenerator::new())
        .with_span_processor(batch.clone())
        .build();
    let tracer = provider.tracer("lens-bench");
    if active::install(tracer.clone()).is_err() {
        eprintln!("span-calls: the active-tracer slot is taken");
        return ExitCode::FAILURE;
    }
    set_enabled_span_groups(GroupSet::of(&[SpanGroup::STEP]));

    match mode {
        "managed_span_enabled" => lens_spans(n),
        "raw_sdk_span" => raw_spans(&tracer, n),
        "managed_span_enabled_5_attrs" => lens_spans_5_attrs(n),
        "raw_sdk_span_5_attrs" => raw_spans_5_attrs(&tracer, n),
        other => {
            eprintln!("span-calls: unknown scenario `{other}`");
            return ExitCode::from(2);
        }
    }

    set_enabled_span_groups(GroupSet::EMPTY);
    active::uninstall();
    if let Err(err) = batch.force_flush_with_timeout(Duration::from_secs(60)) {
        eprintln!("span-calls: flush failed: {err}");
        return ExitCode::FAILURE;
    }
    let dropped = batch.counters().snapshot().dropped_queue_full;
    if dropped > 0 {
        eprintln!("span-calls: {dropped} spans dropped; the count measured a full queue");
        return ExitCode::FAILURE;
    }
    if let Err(err) = provider.shutdown() {
        eprintln!("span-calls: shutdown failed: {err}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
