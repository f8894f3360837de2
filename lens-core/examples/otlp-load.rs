//! The sending side of `cargo xtask bench`'s export-throughput scenario:
//! sets telemetry up exactly as a job does (`setup_telemetry`, the OTLP
//! exporter, lens's batch processor at the project's default queue, batch
//! and concurrency settings), ends spans from one thread at a paced rate for
//! a few seconds, shuts down, and prints one JSON line with what happened.
//!
//! ```text
//! otlp-load <endpoint> <grpc|http/protobuf> <attributes: 0|5> <spans per second> <seconds>
//! ```
//!
//! The JSON line: `offered` (spans ended), `produce_s` (seconds spent
//! ending them), `total_s` (until shutdown returned: everything exported),
//! `exported`, `dropped` (queue full, failed exports and left at shutdown),
//! `export_errors`, `peak_rss_kib` (the process's high-water mark) and
//! `span_data_bytes` (the size of one queued span's record, without its
//! heap parts). The configuration comes from a map, never from the process
//! environment; the receiver is `examples/otlp-sink.rs` in another process.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use lens_core::attr::KeyValue;
use lens_core::config::LensConfig;
use lens_core::groups::{LENS_CATALOG, SpanGroup};
use lens_core::identity::RankContext;
use lens_core::otel::setup::{SetupOptions, setup_telemetry};
use lens_core::otel::span::managed_span;

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

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn run(endpoint: &str, protocol: &str, attrs: usize, rate: u64, seconds: u64) -> Result<String, String> {
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
    let telemetry = setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), SetupOptions::new().with_env(env))
        .map_err(|e| e.to_string())?;

    // Paced in 1 ms ticks: each tick ends its share of spans, then waits for
    // the next tick (a producer that cannot keep up simply offers less).
    let per_tick = (rate / 1000).max(1);
    let ticks = seconds * 1000;
    let start = Instant::now();
    let mut offered = 0_u64;
    for tick in 0..ticks {
        for _ in 0..per_tick {
            drop(managed_span(SpanGroup::STEP, "bench.span", attributes(attrs, offered)));
            offered += 1;
        }
        let next = start + Duration::from_millis(tick + 1);
        while Instant::now() < next {
            std::thread::yield_now();
        }
    }
    let produce_s = start.elapsed().as_secs_f64();
    let report = telemetry.shutdown(Duration::from_secs(60));
    let total_s = start.elapsed().as_secs_f64();
    let s = &report.spans;
    Ok(format!(
        "{{\"offered\":{offered},\"produce_s\":{produce_s},\"total_s\":{total_s},\"exported\":{},\"dropped\":{},\
         \"export_errors\":{},\"peak_rss_kib\":{},\"span_data_bytes\":{}}}",
        s.exported,
        s.dropped_queue_full + s.dropped_export_failed + s.dropped_at_shutdown,
        s.export_errors,
        peak_rss_kib(),
        std::mem::size_of::<opentelemetry_sdk::trace::SpanData>(),
    ))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args.as_slice() {
        [endpoint, protocol, attrs, rate, seconds] => {
            match (attrs.parse::<usize>(), rate.parse::<u64>(), seconds.parse::<u64>()) {
                (Ok(attrs), Ok(rate), Ok(seconds)) => Some((endpoint, protocol, attrs, rate, seconds)),
                _ => None,
            }
        }
        _ => None,
    };
    let Some((endpoint, protocol, attrs, rate, seconds)) = parsed else {
        #[expect(clippy::print_stderr, reason = "a usage error of a command-line tool")]
        {
            eprintln!("usage: otlp-load <endpoint> <grpc|http/protobuf> <0|5> <spans per second> <seconds>");
        }
        return ExitCode::from(2);
    };
    match run(endpoint, protocol, attrs, rate, seconds) {
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
