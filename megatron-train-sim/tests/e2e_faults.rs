//! A collector that is absent, hangs, answers errors or restarts must cost
//! the training run nothing: the run completes, no step waits on
//! export, the process exits within the shutdown timeout plus a small
//! margin, what is lost is counted and reported, memory stays bounded when
//! the collector never comes, and a collector that comes back within the
//! retry window receives every span (exported equals emitted, counted at the
//! receiver).
//!
//! The misbehaving collectors that need no protocol knowledge are Rust
//! threads (`e2e_faults_support`); gRPC UNAVAILABLE and the restart use the
//! real OTLP receiver (`e2e/otlp_sink.py`, official protobufs).
#![cfg(feature = "otel")]

mod e2e_faults_support;
mod e2e_support;

use std::time::Duration;

use e2e_faults_support::{
    ErrorResponder, Hanging, Summary, TimedRun, rank_reports, refused_port, run_timed, unique_spans,
};
use e2e_support::{Ctx, Protocol, SMALL, Sink, SinkOptions};

/// The shutdown timeout every fault run sets (`MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS`).
const SHUTDOWN_MS: u64 = 1000;
/// What the process may take beyond the shutdown timeout to exit after its
/// last step (tearing down threads and the runtime, writing the summary,
/// the launcher's reaping; a debug build on a loaded machine).
const EXIT_MARGIN: Duration = Duration::from_millis(1500);
/// No step may take this long. A normal step of these runs takes a few
/// milliseconds; a step that waited on an export would take the export
/// timeout (3 s here) or a retry backoff (up to 5 s).
const STEP_BOUND_MS: f64 = 1000.0;
/// The export timeout of one attempt (`OTEL_EXPORTER_OTLP_TIMEOUT`), above
/// the step bound so that a step blocked on an export would show.
const EXPORT_TIMEOUT_MS: &str = "3000";
/// The most a fault run may take.
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// Runs a single-rank simulation of `iters` iterations (`per_step` spans)
/// exporting over `protocol` to `endpoint` with `env` on top of the fault
/// settings; its timing and summary.
fn fault_run(
    ctx: &Ctx,
    label: &str,
    protocol: Protocol,
    endpoint: &str,
    iters: u32,
    env: &[(&str, &str)],
) -> (TimedRun, Summary) {
    let iters_arg = iters.to_string();
    let summary = format!("{label}-summary.json");
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend([
        "--otel-enabled",
        "--otel-span-groups",
        "per_step",
        "--train-iters",
        &iters_arg,
        "--log-interval",
        &iters_arg,
        "--summary-json",
        &summary,
    ]);
    let shutdown = SHUTDOWN_MS.to_string();
    let proc = ctx
        .sim(&args)
        .label(label)
        .otlp(protocol, endpoint)
        .envs(&[("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", &shutdown), ("OTEL_EXPORTER_OTLP_TIMEOUT", EXPORT_TIMEOUT_MS)])
        .envs(env)
        .spawn();
    let run = run_timed(proc, iters, RUN_LIMIT);
    run.finished.assert_success(label);
    let summary = Summary::read(&ctx.path(&summary));
    (run, summary)
}

/// The checks every fault shares: no step waited, the exit was bounded by
/// the shutdown timeout, and every span emitted was either exported or
/// counted as dropped, and the report says so (summary and stderr agree).
fn assert_harmless(run: &TimedRun, summary: &Summary, what: &str) {
    summary.assert_no_step_waited(STEP_BOUND_MS, what);
    let bound = Duration::from_millis(SHUTDOWN_MS) + EXIT_MARGIN;
    assert!(
        run.after_last_step < bound,
        "{what}: exited {:?} after its last step (shutdown timeout {SHUTDOWN_MS} ms + margin {EXIT_MARGIN:?})\n{}",
        run.after_last_step,
        run.finished.stderr
    );
    let reports = rank_reports(&run.finished.stderr);
    let report =
        reports.get(&0).unwrap_or_else(|| panic!("{what}: no report line on stderr:\n{}", run.finished.stderr));
    assert_eq!(report.exported, summary.telemetry_u64("spans_exported"), "{what}: stderr and summary disagree");
    assert_eq!(report.dropped, summary.telemetry_u64("spans_dropped"), "{what}: stderr and summary disagree");
    assert_eq!(report.dropped, report.queue_full + report.export_failed + report.at_shutdown, "{what}");
}

/// The checks of a collector that never accepted anything: every span is
/// counted as dropped, and (`warned`, for a collector that answers or
/// refuses rather than hangs past the run) the failures were reported while
/// the run went on.
fn assert_all_dropped(run: &TimedRun, summary: &Summary, iters: u32, warned: bool, what: &str) {
    assert_harmless(run, summary, what);
    assert_eq!(summary.telemetry_u64("spans_exported"), 0, "{what}: {}", summary.report());
    let dropped = summary.telemetry_u64("spans_dropped");
    // per_step: at least the iteration span and its report span per iteration.
    assert!(dropped >= 2 * u64::from(iters), "{what}: only {dropped} spans counted as dropped: {}", summary.report());
    assert!(
        !warned || run.finished.stderr.contains("lens: warning:"),
        "{what}: the failures were not reported while the run went on:\n{}",
        run.finished.stderr
    );
}

#[test]
fn with_the_collector_absent_the_run_completes_promptly_and_counts_every_span_dropped() {
    let ctx = Ctx::new("fault-absent");
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let endpoint = format!("http://127.0.0.1:{}", refused_port());
        let label = format!("absent-{}", protocol.as_str().replace('/', "-"));
        let (run, summary) = fault_run(&ctx, &label, protocol, &endpoint, 30, &[]);
        assert_all_dropped(&run, &summary, 30, true, &label);
        assert!(
            summary.report().contains("export failed") && summary.telemetry_u64("spans_dropped") > 0,
            "{label}: {}",
            summary.report()
        );
    }
    ctx.finish();
}

#[test]
fn with_a_hanging_collector_no_step_waits_and_the_process_exits_within_the_shutdown_timeout() {
    let ctx = Ctx::new("fault-hang");
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let collector = Hanging::start();
        let label = format!("hang-{}", protocol.as_str().replace('/', "-"));
        let (run, summary) = fault_run(&ctx, &label, protocol, &collector.endpoint(), 30, &[]);
        assert!(
            collector.connections() > 0 && collector.bytes() > 0,
            "{label}: the exporter never reached the collector"
        );
        // The export timeout (3 s) outlasts the run: the loss shows in the
        // report, as spans unsent at shutdown.
        assert_all_dropped(&run, &summary, 30, false, &label);
        assert!(rank_reports(&run.finished.stderr)[&0].at_shutdown > 0, "{label}: {}", summary.report());
    }
    ctx.finish();
}

#[test]
fn a_collector_answering_http_503_costs_nothing_and_the_failed_batches_are_counted() {
    let ctx = Ctx::new("fault-503");
    for protocol in [Protocol::HttpProtobuf, Protocol::HttpJson] {
        let collector = ErrorResponder::start("503 Service Unavailable");
        let label = format!("503-{}", protocol.as_str().replace('/', "-"));
        // A short retry window, so that batches fail for good during the run.
        let (run, summary) = fault_run(
            &ctx,
            &label,
            protocol,
            &collector.endpoint(),
            30,
            &[("MEGATRON_OTEL_EXPORT_RETRY_WINDOW_MS", "300")],
        );
        assert_all_dropped(&run, &summary, 30, true, &label);
        let report = rank_reports(&run.finished.stderr)[&0];
        assert!(report.export_failed > 0, "{label}: {}", summary.report());
        // Every failed attempt was an answered request, retries included.
        assert!(report.export_errors >= 2, "{label}: {}", summary.report());
        assert!(collector.requests() >= report.export_errors, "{label}: {} requests", collector.requests());
    }
    ctx.finish();
}

#[test]
fn a_collector_answering_grpc_unavailable_costs_nothing_and_the_failed_batches_are_counted() {
    let ctx = Ctx::new("fault-unavailable");
    let sink = Sink::start_with(&ctx, SinkOptions { fail_mode: Some("grpc-unavailable"), ..SinkOptions::default() });
    let (run, summary) = fault_run(
        &ctx,
        "unavailable",
        Protocol::Grpc,
        &sink.endpoint(Protocol::Grpc),
        30,
        &[("MEGATRON_OTEL_EXPORT_RETRY_WINDOW_MS", "300")],
    );
    assert_all_dropped(&run, &summary, 30, true, "grpc UNAVAILABLE");
    let records = sink.stop();
    let trace_requests: Vec<_> = records.requests.iter().filter(|r| r.signal == "traces").collect();
    assert!(trace_requests.len() >= 2, "the sink saw {} trace exports", trace_requests.len());
    assert!(trace_requests.iter().all(|r| r.outcome == "grpc-unavailable"), "{trace_requests:?}");
    assert!(records.spans.is_empty(), "an UNAVAILABLE answer accepted spans");
    ctx.finish();
}

/// Runs `iters` iterations of 20 ms over gRPC to `endpoint` with a long
/// retry window and shutdown timeout, spawned.
fn recovering_run(ctx: &Ctx, label: &str, endpoint: &str, iters: u32) -> e2e_support::Proc {
    let iters_arg = iters.to_string();
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend([
        "--otel-enabled",
        "--otel-span-groups",
        "per_step",
        "--train-iters",
        &iters_arg,
        "--step-sleep-ms",
        "20",
        "--summary-json",
        "summary.json",
    ]);
    ctx.sim(&args)
        .label(label)
        .otlp(Protocol::Grpc, endpoint)
        .envs(&[("MEGATRON_OTEL_EXPORT_RETRY_WINDOW_MS", "30000"), ("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", "15000")])
        .spawn()
}

/// Exported equals emitted, counted at the receiver: nothing dropped, the
/// receiver holds exactly the spans the report says were exported, and one
/// iteration span per iteration.
fn assert_nothing_lost(summary: &Summary, records: &e2e_support::Records, iters: u32, what: &str) {
    assert_eq!(summary.telemetry_u64("spans_dropped"), 0, "{what}: {}", summary.report());
    let exported = summary.telemetry_u64("spans_exported");
    let received = unique_spans(records).len() as u64;
    assert_eq!(received, exported, "{what}: the sink received {received} spans, the report says {exported} exported");
    let iterations = records.spans_named("megatron.train.iteration").count();
    assert_eq!(iterations, iters as usize, "{what}: iteration spans at the sink");
    assert!(summary.telemetry_u64("spans_exported") > 0, "{what}");
}

#[test]
fn a_collector_that_fails_then_recovers_within_the_retry_window_receives_every_span() {
    let ctx = Ctx::new("fault-recover");
    let sink = Sink::start_with(
        &ctx,
        SinkOptions { fail_mode: Some("grpc-unavailable"), fail_count: Some(4), ..SinkOptions::default() },
    );
    let finished = recovering_run(&ctx, "recover", &sink.endpoint(Protocol::Grpc), 40).wait(RUN_LIMIT);
    finished.assert_success("recover");
    let records = sink.stop();
    let summary = Summary::read(&ctx.path("summary.json"));
    assert!(records.requests.iter().any(|r| r.outcome == "grpc-unavailable"), "the sink never failed an export");
    let report = rank_reports(&finished.stderr)[&0];
    assert!(report.export_errors >= 1, "no failed attempt was counted: {}", summary.report());
    assert_nothing_lost(&summary, &records, 40, "fail then recover");
    summary.assert_no_step_waited(STEP_BOUND_MS, "fail then recover");
    ctx.finish();
}

#[test]
fn a_collector_restarted_mid_run_within_the_retry_window_receives_every_span() {
    let ctx = Ctx::new("fault-restart");
    let sink = Sink::start(&ctx);
    let (grpc_port, http_port, out) = (sink.grpc_port, sink.http_port, sink.out.clone());
    // 400 iterations of at least 20 ms: the run outlasts the first export,
    // the sink's stop and the two seconds down by several seconds even on a
    // fast machine (150 left a fraction of a second).
    let iters = 400;
    let mut sim = recovering_run(&ctx, "restart", &sink.endpoint(Protocol::Grpc), iters);
    sink.wait_for("the first spans", Duration::from_secs(30), |r| !r.spans.is_empty());
    let before = sink.stop();
    // Down for two seconds while the run goes on, then back on the same ports.
    std::thread::sleep(Duration::from_secs(2));
    assert!(sim.try_wait().is_none(), "the run ended while the collector was down; make it longer");
    let sink = Sink::start_with(&ctx, SinkOptions { grpc_port, http_port, out: Some(out), ..SinkOptions::default() });
    let finished = sim.wait(RUN_LIMIT);
    finished.assert_success("restart");
    let records = sink.stop();
    let summary = Summary::read(&ctx.path("summary.json"));
    assert!(records.spans.len() > before.spans.len(), "nothing arrived after the restart");
    let report = rank_reports(&finished.stderr)[&0];
    assert!(report.export_errors >= 1, "no export failed while the collector was down: {}", summary.report());
    assert_nothing_lost(&summary, &records, iters, "restart");
    summary.assert_no_step_waited(STEP_BOUND_MS, "restart");
    ctx.finish();
}

/// Peak resident memory of a run of `iters` tiny iterations under `all`
/// with the collector absent and a small queue; the summary.
fn absent_collector_memory(ctx: &Ctx, iters: u32) -> (TimedRun, Summary) {
    let endpoint = format!("http://127.0.0.1:{}", refused_port());
    let iters_arg = iters.to_string();
    let summary = format!("memory-{iters}.json");
    let args = [
        "--otel-enabled",
        "--otel-span-groups",
        "all",
        "--train-iters",
        &iters_arg,
        "--log-interval",
        &iters_arg,
        "--step-sleep-ms",
        "0",
        "--hidden-size",
        "8",
        "--seq-length",
        "4",
        "--num-layers",
        "2",
        "--num-attention-heads",
        "1",
        "--global-batch-size",
        "2",
        "--micro-batch-size",
        "1",
        "--summary-json",
        &summary,
    ];
    let shutdown = SHUTDOWN_MS.to_string();
    let proc = ctx
        .sim(&args)
        .label(&format!("memory-{iters}"))
        .otlp(Protocol::Grpc, &endpoint)
        .envs(&[
            ("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", &shutdown),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
        ])
        .spawn();
    let run = run_timed(proc, iters, RUN_LIMIT);
    run.finished.assert_success("memory run");
    let summary = Summary::read(&ctx.path(&summary));
    (run, summary)
}

#[test]
fn with_the_collector_absent_memory_stays_bounded_however_long_the_run() {
    let ctx = Ctx::new("fault-memory");
    let (short_run, short) = absent_collector_memory(&ctx, 1000);
    let (long_run, long) = absent_collector_memory(&ctx, 8000);
    assert_harmless(&short_run, &short, "1000 iterations");
    assert_harmless(&long_run, &long, "8000 iterations");
    // Eight times the spans (about 25 an iteration: 200 000 against 25 000),
    // all dropped once the queue of 2048 is full.
    let (short_dropped, long_dropped) = (short.telemetry_u64("spans_dropped"), long.telemetry_u64("spans_dropped"));
    assert!(long_dropped > 7 * short_dropped, "{short_dropped} vs {long_dropped}");
    assert!(rank_reports(&long_run.finished.stderr)[&0].queue_full > 0, "{}", long.report());
    // Kept, 175 000 more spans would take tens of MiB; bounded, the peak does
    // not depend on the length of the run.
    let (short_peak, long_peak) = (short.peak_memory_bytes(), long.peak_memory_bytes());
    assert!(
        long_peak < short_peak + 8 * 1024 * 1024,
        "peak RSS grew with the run: {} MiB after 1000 iterations, {} MiB after 8000",
        short_peak >> 20,
        long_peak >> 20
    );
    ctx.finish();
}
