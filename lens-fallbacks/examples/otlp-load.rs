//! The sending side of `cargo xtask bench`'s export-throughput scenario, in
//! two pipelines measured against each other:
//!
//! - `lens`: telemetry set up exactly as a job does (`setup_telemetry`, the
//!   OTLP exporter, lens's batch processor at the project's default queue,
//!   batch and concurrency settings), spans ended with `managed_span`;
//! - `raw`: the raw SDK's `BatchSpanProcessor` (one export at a time, its own
//!   design) at the same queue, batch size and delay, around the same OTLP
//!   exporter built the same way (`build_otlp_span_exporter` from the same
//!   configuration), spans ended with the SDK tracer.
//!
//! - `lens-batch`: lens's batch processor alone, built as `setup_telemetry`
//!   builds it (the record processor a job's SDK spans go to: each ended
//!   span becomes a `SpanRecord` in the queue, and a batch is encoded
//!   straight into the OTLP request), in the raw pipeline's place, spans
//!   ended with the same SDK tracer call as `raw`: the two differ only in
//!   the processor, so this is the comparison of export pipelines. `lens` adds what a job's calling
//!   thread also pays per span (the open-span closer's snapshot, the
//!   sampler wrapper, the facade), which `managed_span_enabled` budgets.
//!
//! Either ends spans from one thread at a paced rate for a few seconds (or,
//! with `count N`, N spans as fast as it can, for callgrind), shuts down, and
//! prints one JSON line with what happened.
//!
//! ```text
//! otlp-load <lens|lens-batch|raw> <endpoint> <grpc|http/protobuf> <attributes: 0|5> <spans per second> <seconds>
//! otlp-load <lens|lens-batch|raw> <endpoint> <grpc|http/protobuf> <attributes: 0|5> count <spans>
//! ```
//!
//! The JSON line: `offered` (spans ended), `produce_s` (seconds spent
//! ending them), `total_s` (until shutdown returned: everything exported),
//! `exported`, `dropped` (queue full, failed exports and left at shutdown),
//! `export_errors`, `peak_rss_kib` (the process's high-water mark),
//! `span_data_bytes` (the size of one span in lens's queue, without its
//! heap parts), `cpu_s` and `main_cpu_s` (CPU seconds of the whole process
//! and of the producing thread, until shutdown returned), `threads` (the
//! process's threads just before shutdown) and `voluntary_switches` (context
//! switches of all its threads, summed). The configuration comes from a map, never from the process
//! environment; the receiver is `examples/otlp-sink.rs` in another process.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::config::{LensConfig, Signal};
use lens_fallbacks::groups::{LENS_CATALOG, SpanGroup};
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::batch::{BatchConfig, LensBatchRecordProcessor};
use lens_fallbacks::otel::exporters::{LensSpanExporter, build_otlp_span_exporter};
use lens_fallbacks::otel::recorder::record_exporter;
use lens_fallbacks::otel::span_record::SpanRecord;
use lens_fallbacks::setup::{SetupOptions, setup_telemetry};
use lens_fallbacks::span::managed_span;
use opentelemetry::trace::{Tracer as _, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};

fn attributes(count: usize, index: u64) -> Vec<KeyValue> {
    if count == 0 {
        return Vec::new();
    }
    vec![
        KeyValue::new("bench.iteration", index as i64),
        KeyValue::new("bench.loss", 2.5_f64),
        KeyValue::new("bench.phase", "train"),
        KeyValue::new("bench.checkpoint", false),
        KeyValue::new("bench.rank", 3_i64),
    ]
}

/// The same five attributes as SDK key-values, for the raw pipeline.
fn sdk_attributes(count: usize, index: u64) -> Vec<opentelemetry::KeyValue> {
    if count == 0 {
        return Vec::new();
    }
    vec![
        opentelemetry::KeyValue::new("bench.iteration", index as i64),
        opentelemetry::KeyValue::new("bench.loss", 2.5_f64),
        opentelemetry::KeyValue::new("bench.phase", "train"),
        opentelemetry::KeyValue::new("bench.checkpoint", false),
        opentelemetry::KeyValue::new("bench.rank", 3_i64),
    ]
}

/// Counts what the raw SDK's processor hands the exporter and what came
/// back acknowledged (the SDK keeps no such counters).
#[derive(Debug)]
struct Counting<E> {
    inner: E,
    exported: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
}

impl<E: SpanExporter> SpanExporter for Counting<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let spans = batch.len() as u64;
        let export = self.inner.export(batch);
        let (exported, errors) = (Arc::clone(&self.exported), Arc::clone(&self.errors));
        async move {
            let result = export.await;
            match &result {
                Ok(()) => exported.fetch_add(spans, Ordering::Relaxed),
                Err(_) => errors.fetch_add(1, Ordering::Relaxed),
            };
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// How many spans to end, and how fast.
#[derive(Clone, Copy, Debug)]
enum Load {
    /// `rate` per second for `seconds`.
    Paced { rate: u64, seconds: u64 },
    /// This many, unpaced.
    Count(u64),
}

/// Ends spans with `end_one(index)` at `rate` per second for `seconds`,
/// paced in 1 ms ticks: each tick ends its share, then waits for the next
/// (a producer that cannot keep up simply offers less). Returns the spans
/// offered and the seconds spent.
fn produce(load: Load, mut end_one: impl FnMut(u64)) -> (u64, f64) {
    let (rate, seconds) = match load {
        Load::Paced { rate, seconds } => (rate, seconds),
        Load::Count(count) => {
            let start = Instant::now();
            for index in 0..count {
                end_one(index);
            }
            return (count, start.elapsed().as_secs_f64());
        }
    };
    let per_tick = (rate / 1000).max(1);
    let ticks = seconds * 1000;
    let start = Instant::now();
    let mut offered = 0_u64;
    for tick in 0..ticks {
        for _ in 0..per_tick {
            end_one(offered);
            offered += 1;
        }
        let next = start + Duration::from_millis(tick + 1);
        while Instant::now() < next {
            std::thread::yield_now();
        }
    }
    (offered, start.elapsed().as_secs_f64())
}

/// What a run did, for the JSON result line.
struct Outcome {
    offered: u64,
    produce_s: f64,
    total_s: f64,
    exported: u64,
    dropped: u64,
    errors: u64,
    /// Threads of the process just before shutdown.
    threads: usize,
}

impl Outcome {
    fn line(&self) -> String {
        let Outcome { offered, produce_s, total_s, exported, dropped, errors, threads } = self;
        let (cpu_s, switches) = process_cpu_and_switches();
        format!(
            "{{\"offered\":{offered},\"produce_s\":{produce_s},\"total_s\":{total_s},\"exported\":{exported},\
             \"dropped\":{dropped},\"export_errors\":{errors},\"peak_rss_kib\":{},\"span_data_bytes\":{},\
             \"cpu_s\":{cpu_s},\"main_cpu_s\":{},\"threads\":{threads},\"voluntary_switches\":{switches}}}",
            peak_rss_kib(),
            std::mem::size_of::<SpanRecord>(),
            thread_cpu_s("/proc/thread-self/stat"),
        )
    }
}

/// The threads of this process now.
fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |dir| dir.count())
}

/// User plus system CPU seconds from a `/proc/.../stat` file (fields 14 and
/// 15 after the command name, in clock ticks of 1/100 s).
fn thread_cpu_s(path: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(path) else { return 0.0 };
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The process's CPU seconds (its threads, live and ended) and the
/// voluntary context switches of its live threads.
fn process_cpu_and_switches() -> (f64, u64) {
    let cpu = thread_cpu_s("/proc/self/stat");
    let switches = std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
                .filter_map(|status| {
                    status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")?.trim().parse::<u64>().ok())
                })
                .sum()
        })
        .unwrap_or(0);
    (cpu, switches)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The configuration both pipelines are built from, from a map (never from
/// the process environment).
fn config(endpoint: &str, protocol: &str) -> Result<(LensConfig, BTreeMap<String, String>), String> {
    let env: BTreeMap<String, String> = [
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_SPAN_GROUPS", "all"),
        ("NEMO_LENS_RUN_ID", "xtask-bench"),
        ("NEMO_LENS_SHUTDOWN_TIMEOUT_MS", "60000"),
        ("OTEL_METRICS_EXPORTER", "none"),
        ("OTEL_LOGS_EXPORTER", "none"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = LensConfig::from_env(&env, "NEMO_LENS", None, &LENS_CATALOG).map_err(|e| e.to_string())?;
    Ok((config, env))
}

fn run_lens(endpoint: &str, protocol: &str, attrs: usize, load: Load) -> Result<String, String> {
    let (config, env) = config(endpoint, protocol)?;
    let telemetry = setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), SetupOptions::new().with_env(env))
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let (offered, produce_s) =
        produce(load, |index| drop(managed_span(SpanGroup::STEP, "bench.span", attributes(attrs, index))));
    let threads = thread_count();
    let report = telemetry.shutdown(Duration::from_secs(60));
    let s = &report.spans;
    let total_s = start.elapsed().as_secs_f64();
    let (exported, dropped, errors) = (s.exported, s.dropped(), s.export_errors);
    Ok(Outcome { offered, produce_s, total_s, exported, dropped, errors, threads }.line())
}

/// Ends spans with the SDK tracer of `provider` (the `raw` and
/// `lens-batch` pipelines), shuts down and reports.
fn run_sdk(
    provider: &SdkTracerProvider,
    attrs: usize,
    load: Load,
    counts: impl FnOnce(u64) -> (u64, u64, u64),
) -> String {
    let tracer = provider.tracer("xtask-bench");
    let start = Instant::now();
    let (offered, produce_s) = produce(load, |index| {
        drop(tracer.span_builder("bench.span").with_attributes(sdk_attributes(attrs, index)).start(&tracer));
    });
    let threads = thread_count();
    let _ = provider.shutdown_with_timeout(Duration::from_secs(60));
    let total_s = start.elapsed().as_secs_f64();
    let (exported, dropped, errors) = counts(offered);
    Outcome { offered, produce_s, total_s, exported, dropped, errors, threads }.line()
}

fn run_lens_batch(endpoint: &str, protocol: &str, attrs: usize, load: Load) -> Result<String, String> {
    let (config, _) = config(endpoint, protocol)?;
    let exporter = build_otlp_span_exporter(config.otel.otlp(Signal::Traces)).map_err(|e| e.to_string())?;
    let b = &config.otel.batch;
    // As `setup_telemetry` builds it: its `batch_config`, and the configured
    // OTLP exporter as the records' exporter (each batch encoded once,
    // straight from the records).
    let scope = opentelemetry::InstrumentationScope::builder("otlp-load").build();
    let batch = LensBatchRecordProcessor::new(
        record_exporter(LensSpanExporter::Otlp(Box::new(exporter)), scope),
        BatchConfig {
            max_queue_size: b.max_queue_size,
            max_export_batch_size: b.max_export_batch_size,
            scheduled_delay: b.schedule_delay,
            max_concurrent_exports: b.max_concurrent_exports,
            export_timeout: config.otel.otlp(Signal::Traces).timeout,
            retry_window: config.export_retry_window,
            ..BatchConfig::default()
        },
    );
    let counters = batch.counters();
    let provider = SdkTracerProvider::builder().with_span_processor(batch).build();
    Ok(run_sdk(&provider, attrs, load, |_| {
        let s = counters.snapshot();
        (s.exported, s.dropped(), s.export_errors)
    }))
}

fn run_raw(endpoint: &str, protocol: &str, attrs: usize, load: Load) -> Result<String, String> {
    let (config, _) = config(endpoint, protocol)?;
    let exporter = build_otlp_span_exporter(config.otel.otlp(Signal::Traces)).map_err(|e| e.to_string())?;
    let (exported, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let counting = Counting { inner: exporter, exported: Arc::clone(&exported), errors: Arc::clone(&errors) };
    let b = &config.otel.batch;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(b.max_queue_size)
        .with_max_export_batch_size(b.max_export_batch_size)
        .with_scheduled_delay(b.schedule_delay)
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(counting).with_batch_config(batch).build())
        .build();
    // The SDK's processor counts nothing: what it did not hand on
    // acknowledged was dropped (queue full, failed, or left at shutdown).
    Ok(run_sdk(&provider, attrs, load, |offered| {
        let exported = exported.load(Ordering::Relaxed);
        (exported, offered.saturating_sub(exported), errors.load(Ordering::Relaxed))
    }))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    type Run = fn(&str, &str, usize, Load) -> Result<String, String>;
    let parsed = match args.as_slice() {
        [pipeline, endpoint, protocol, attrs, rate, seconds] => {
            let run: Option<Run> = match pipeline.as_str() {
                "lens" => Some(run_lens),
                "lens-batch" => Some(run_lens_batch),
                "raw" => Some(run_raw),
                _ => None,
            };
            let load = match (rate.as_str(), seconds.parse::<u64>()) {
                ("count", Ok(count)) => Some(Load::Count(count)),
                (rate, Ok(seconds)) => rate.parse().ok().map(|rate| Load::Paced { rate, seconds }),
                _ => None,
            };
            match (run, attrs.parse::<usize>(), load) {
                (Some(run), Ok(attrs), Some(load)) => Some((run, endpoint, protocol, attrs, load)),
                _ => None,
            }
        }
        _ => None,
    };
    let Some((run, endpoint, protocol, attrs, load)) = parsed else {
        #[expect(clippy::print_stderr, reason = "a usage error of a command-line tool")]
        {
            eprintln!(
                "usage: otlp-load <lens|lens-batch|raw> <endpoint> <grpc|http/protobuf> <0|5> \
                 <spans per second> <seconds> | count <spans>"
            );
        }
        return ExitCode::from(2);
    };
    match run(endpoint, protocol, attrs, load) {
        Ok(line) => {
            #[expect(clippy::print_stdout, reason = "the result line the xtask reads")]
            {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            #[expect(clippy::print_stderr, reason = "why the run failed")]
            {
                eprintln!("otlp-load: {err}");
            }
            ExitCode::FAILURE
        }
    }
}
