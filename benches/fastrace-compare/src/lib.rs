//! A lens span against fastrace's `LocalSpan`, in one process, so that
//! `cargo xtask bench --only fastrace` can compare them side by side
//! (criterion, `benches/compare.rs`) and by the calling thread's instructions
//! under callgrind (`examples/fastrace-calls.rs`).
//!
//! Bench-only (`publish = false`, not a default member of the workspace).
//! Everything here needs the feature `testing` (the facade's runtime and
//! its discarding exporter); without it the crate is empty.
//!
//! - lens: telemetry set up as a job sets it up (`setup_telemetry`, every
//!   group on, lens's defaults: the span recorder, the open-span closer with
//!   its table, the sampler wrapper, the batch processor), with an exporter
//!   that discards batches, and `managed_span(SpanGroup::STEP, ..)`, which
//!   is current until it ends, under a current lens span made every
//!   [`ROOT_EVERY`] spans (as a job's spans run under its step), its start
//!   and end counted, amortised over those spans;
//! - fastrace: a reporter that discards, and `LocalSpan::enter_with_local_parent`
//!   under a root span made the local parent. fastrace records at most
//!   10,240 local spans under one root (the rest are silently no-ops), so a
//!   new root is made every [`ROOT_EVERY`] spans; the root's start and its
//!   submission to fastrace's collector are counted, amortised over those
//!   spans. With five properties, the values are what fastrace takes
//!   (strings): the numbers are formatted, as a user of fastrace writes it;
//! - the span recorder alone (`lens_fallbacks::otel::recorder`, issue 24):
//!   a root span started and ended on its per-thread buffer, exported
//!   through a discarding exporter; the floor under the facade's path (no
//!   gate, no sampler, no OpenTelemetry context, no open-span table);
//! - the floor ([`floor`]): a recorder that does exactly the work a lens
//!   span must do with lens's defaults on and nothing else, in the same
//!   loop as lens's spans: what a rewrite of lens's span path could reach.

#![cfg(feature = "testing")]

pub mod floor;

use std::collections::HashMap;
use std::hint::black_box;

use fastrace::collector::{Config, Reporter, SpanContext};
use fastrace::prelude::{LocalSpan, Span, SpanRecord};
use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::config::{ExporterKind, LensConfig};
use lens_fallbacks::groups::SpanGroup;
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::batch::BatchConfig;
use lens_fallbacks::otel::exporters::testing::DiscardingSpanExporter;
use lens_fallbacks::otel::recorder::{Recorder, RecordsAsSpanData};
use lens_fallbacks::setup::{SetupOptions, Telemetry, setup_telemetry};
use lens_fallbacks::span::managed_span;

/// Local spans recorded under one fastrace root (below fastrace's 10,240).
pub const ROOT_EVERY: u64 = 1_000;

/// The span name both sides record.
pub const SPAN_NAME: &str = "bench.span";

/// Sets telemetry up as a job does, every group on, exporting to an
/// exporter that discards batches.
///
/// # Panics
/// When setup fails (a bench that measured nothing must not pass).
pub fn setup_lens() -> Telemetry {
    setup_lens_with(false)
}

/// [`setup_lens`], with `<PREFIX>_CONTEXT_PER_SPAN` as `context_per_span`
/// (every current span in the OpenTelemetry context too).
///
/// # Panics
/// When setup fails.
pub fn setup_lens_with(context_per_span: bool) -> Telemetry {
    // Spans only (no metric reader), to the exporter given below (it wins
    // over `console`, which only satisfies this build without OTLP).
    let mut config = LensConfig {
        enabled: true,
        span_groups: "all".into(),
        rank_strategy: "all_ranks".into(),
        exporter: Some(ExporterKind::Console),
        metrics_enabled: false,
        context_per_span,
        ..LensConfig::default()
    };
    // A queue that holds every span of the longest count (2N = 100,000):
    // under callgrind the export thread runs far slower and would fall
    // behind and drop, and a dropped span costs less than a kept one.
    config.otel.batch.max_queue_size = 1 << 20;
    let env: HashMap<String, String> = HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "bench".to_string())]);
    let options = SetupOptions::new().with_span_exporter(DiscardingSpanExporter).with_env(env);
    setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("lens telemetry sets up")
}

/// Shuts lens down and returns the spans it dropped (queue full, failed
/// exports, left at shutdown): a run that dropped spans measured a full queue.
pub fn finish_lens(telemetry: &Telemetry) -> u64 {
    let report = telemetry.shutdown(std::time::Duration::from_secs(60));
    report.spans.dropped_queue_full + report.spans.dropped_export_failed + report.spans.dropped_at_shutdown
}

/// A span recorder exporting to an exporter that discards, with a queue
/// large enough that nothing is dropped.
pub fn setup_recorder() -> Recorder {
    let scope = opentelemetry::InstrumentationScope::builder("fastrace-compare").build();
    let config = BatchConfig { max_queue_size: 1 << 20, ..BatchConfig::default() };
    Recorder::new(RecordsAsSpanData::new(DiscardingSpanExporter, scope), config)
}

/// Shuts the recorder down and returns the spans it dropped.
pub fn finish_recorder(recorder: &Recorder) -> u64 {
    let _ = recorder.shutdown(std::time::Duration::from_secs(60));
    let counters = recorder.counters().snapshot();
    counters.dropped_queue_full + counters.dropped_export_failed + counters.dropped_at_shutdown
}

/// `n` root spans through the recorder, no attributes.
#[inline(never)]
pub fn recorder_spans(recorder: &Recorder, n: u64) {
    let root = opentelemetry::trace::SpanContext::empty_context();
    for _ in 0..n {
        recorder.start(SPAN_NAME, &root, Vec::new()).end();
    }
}

/// `n` root spans through the recorder with five attributes.
#[inline(never)]
pub fn recorder_spans_5_attrs(recorder: &Recorder, n: u64) {
    let root = opentelemetry::trace::SpanContext::empty_context();
    for _ in 0..n {
        let attributes = vec![
            opentelemetry::KeyValue::new("bench.iteration", black_box(7_i64)),
            opentelemetry::KeyValue::new("bench.loss", black_box(2.5_f64)),
            opentelemetry::KeyValue::new("bench.phase", black_box("train")),
            opentelemetry::KeyValue::new("bench.checkpoint", black_box(false)),
            opentelemetry::KeyValue::new("bench.rank", black_box(3_i64)),
        ];
        recorder.start(SPAN_NAME, &root, attributes).end();
    }
}

/// `n` spans of the floor's recorder ([`floor`]), under a root every
/// [`ROOT_EVERY`], as [`lens_spans`] runs.
#[inline(never)]
pub fn floor_spans(floor: &floor::Floor, n: u64) {
    let mut left = n;
    while left > 0 {
        let chunk = left.min(ROOT_EVERY);
        let root = floor.span("bench.root");
        for _ in 0..chunk {
            drop(floor.span(SPAN_NAME));
        }
        drop(root);
        left -= chunk;
    }
}

/// fastrace's reporter that discards every batch.
struct Discarding;

impl Reporter for Discarding {
    fn report(&mut self, spans: Vec<SpanRecord>) {
        drop(black_box(spans));
    }
}

/// Starts fastrace's collector with a reporter that discards.
pub fn setup_fastrace() {
    fastrace::set_reporter(Discarding, Config::default());
}

/// Flushes fastrace's collector.
pub fn finish_fastrace() {
    fastrace::flush();
}

fn lens_attributes() -> [KeyValue; 5] {
    [
        KeyValue::new("bench.iteration", black_box(7_i64)),
        KeyValue::new("bench.loss", black_box(2.5_f64)),
        KeyValue::new("bench.phase", black_box("train")),
        KeyValue::new("bench.checkpoint", black_box(false)),
        KeyValue::new("bench.rank", black_box(3_i64)),
    ]
}

/// `n` lens spans, no attributes, under a lens root every [`ROOT_EVERY`].
#[inline(never)]
pub fn lens_spans(n: u64) {
    under_lens_roots(n, || drop(managed_span(SpanGroup::STEP, SPAN_NAME, [])));
}

/// `n` lens spans with five attributes (int, float, string, bool, int).
#[inline(never)]
pub fn lens_spans_5_attrs(n: u64) {
    under_lens_roots(n, || drop(managed_span(SpanGroup::STEP, SPAN_NAME, lens_attributes())));
}

/// `one()` `n` times, as fastrace's spans run ([`under_roots`]): under a
/// current lens span (the job's step, say), a new one every [`ROOT_EVERY`],
/// its start and end counted, amortised over those spans.
fn under_lens_roots(n: u64, mut one: impl FnMut()) {
    let mut left = n;
    while left > 0 {
        let chunk = left.min(ROOT_EVERY);
        let root = managed_span(SpanGroup::STEP, "bench.root", []);
        for _ in 0..chunk {
            one();
        }
        drop(root);
        left -= chunk;
    }
}

/// `n` fastrace local spans, no properties, a new root every [`ROOT_EVERY`].
#[inline(never)]
pub fn fastrace_spans(n: u64) {
    under_roots(n, || drop(LocalSpan::enter_with_local_parent(SPAN_NAME)));
}

/// `n` fastrace local spans with five properties (the same values, as
/// fastrace's string properties).
#[inline(never)]
pub fn fastrace_spans_5_props(n: u64) {
    under_roots(n, || {
        let (iteration, loss, phase, checkpoint, rank) =
            (black_box(7_i64), black_box(2.5_f64), black_box("train"), black_box(false), black_box(3_i64));
        let span = LocalSpan::enter_with_local_parent(SPAN_NAME).with_properties(|| {
            [
                ("bench.iteration", iteration.to_string()),
                ("bench.loss", loss.to_string()),
                ("bench.phase", phase.to_string()),
                ("bench.checkpoint", checkpoint.to_string()),
                ("bench.rank", rank.to_string()),
            ]
        });
        drop(span);
    });
}

fn under_roots(n: u64, mut one: impl FnMut()) {
    let mut left = n;
    while left > 0 {
        let chunk = left.min(ROOT_EVERY);
        let root = Span::root("bench.root", SpanContext::random());
        {
            let _parent = root.set_local_parent();
            for _ in 0..chunk {
                one();
            }
        }
        drop(root);
        left -= chunk;
    }
}
