//! Signals and crashes against a live OTLP receiver (`e2e/otlp_sink.py`):
//! what a user sees at the collector when a job is stopped or a rank dies.
//! The file-exporter versions in `telemetry.rs` cover SIGTERM without the
//! handler (truncation), the graceful drain and a killed rank's survivor;
//! here the spans go over the network while the process is being stopped,
//! SIGINT is covered, and the receiver's count is checked against each
//! rank's report.
//!
//! - SIGINT (gRPC) and SIGTERM (HTTP) without `--exit-signal-handler`: the
//!   launcher passes on 130 / 143, and every rank's open interval reaches
//!   the receiver marked `nemo.span.truncated`.
//! - With `--exit-signal-handler`, SIGTERM to the launcher and SIGINT to one
//!   rank: the job drains and exits 0, nothing is truncated or dropped, and
//!   the receiver holds exactly what each rank reports as exported.
//! - SIGKILL of one rank: the others exit with a clear error, and every
//!   interval the survivor completed before the kill is at the receiver.
//! - SIGTERM without the handler while a hung collector holds the
//!   shutdown up: the training stops at once (no iteration starts after
//!   the signal that the shutdown would miss).
#![cfg(feature = "otel")]

mod e2e_faults_support;
mod e2e_support;

use std::path::Path;
use std::time::Duration;

use e2e_faults_support::{Hanging, Summary, rank_reports, unique_spans_of};
use e2e_support::{Ctx, Proc, Protocol, Records, SMALL, Sink, wait_until};
use serde_json::Value;

const TRAIN: &str = "megatron.train";
const ITERATION: &str = "megatron.train.iteration";
/// How long a signalled job may take to exit.
const EXIT_LIMIT: Duration = Duration::from_secs(60);
/// How long to wait for the first spans at the receiver.
const FIRST_SPANS: Duration = Duration::from_secs(45);

/// Starts a two-rank job exporting from every rank over `protocol` to
/// `sink`, running until stopped, writing its rank pids to `pids`.
fn endless_job(ctx: &Ctx, label: &str, sink: &Sink, protocol: Protocol, extra: &[&str]) -> Proc {
    let pids = ctx.path(&format!("{label}.pids"));
    let pids = pids.to_str().unwrap().to_string();
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend([
        "--otel-enabled",
        "--nproc-per-node",
        "2",
        "--train-iters",
        "1000000",
        "--step-sleep-ms",
        "5",
        "--rank-pids-file",
        &pids,
        "--summary-json",
        "summary.json",
    ]);
    args.extend(extra);
    ctx.sim(&args).label(label).otlp(protocol, &sink.endpoint(protocol)).spawn()
}

/// The pids of the two ranks (at most 30 s).
fn rank_pids(ctx: &Ctx, label: &str) -> Vec<i32> {
    let path = ctx.path(&format!("{label}.pids"));
    wait_until("the rank pids", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&path).ok()?;
        let pids: Vec<i32> = text.lines().filter_map(|l| l.split_whitespace().nth(1)?.parse().ok()).collect();
        (pids.len() == 2).then_some(pids)
    })
}

/// Waits until the receiver has iteration spans from both ranks.
fn wait_for_both_ranks(sink: &Sink) {
    sink.wait_for("iteration spans from both ranks", FIRST_SPANS, |r| {
        [0, 1].iter().all(|rank| r.spans_named(ITERATION).any(|s| s.rank() == Some(*rank)))
    });
}

fn truncated(attributes: &std::collections::BTreeMap<String, Value>) -> bool {
    attributes.get("nemo.span.truncated") == Some(&Value::Bool(true))
}

/// Sends `signal` to `pid`.
fn kill(pid: i32, signal: i32) {
    // SAFETY: `kill` has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill({pid}, {signal})");
}

#[test]
fn without_the_handler_sigint_and_sigterm_end_the_job_and_each_rank_s_open_interval_reaches_the_receiver_truncated() {
    let ctx = Ctx::new("signals-abrupt");
    for (signal, protocol, status) in
        [(libc::SIGINT, Protocol::Grpc, 130), (libc::SIGTERM, Protocol::HttpProtobuf, 143)]
    {
        let sink = Sink::start(&ctx);
        let label = format!("abrupt-{signal}");
        let job = endless_job(&ctx, &label, &sink, protocol, &["--otel-span-groups", "per_step"]);
        rank_pids(&ctx, &label);
        wait_for_both_ranks(&sink);
        job.signal(signal);
        let finished = job.wait(EXIT_LIMIT);
        assert_eq!(finished.status.code(), Some(status), "signal {signal}: {}", finished.stderr);
        let records = sink.stop();
        for rank in [0, 1] {
            let intervals: Vec<_> = records.spans_named(TRAIN).filter(|s| s.rank() == Some(rank)).collect();
            assert_eq!(intervals.len(), 1, "signal {signal}, rank {rank}: one interval for the whole loop");
            assert!(truncated(&intervals[0].attributes), "signal {signal}, rank {rank}: {:?}", intervals[0].attributes);
            // Its iterations are children in its trace.
            let iterations: Vec<_> = records.spans_named(ITERATION).filter(|s| s.rank() == Some(rank)).collect();
            assert!(
                !iterations.is_empty() && iterations.iter().all(|s| s.trace_id == intervals[0].trace_id),
                "signal {signal}, rank {rank}"
            );
        }
    }
    ctx.finish();
}

/// Every rank's report against the receiver: nothing dropped, exactly the
/// exported spans received.
fn assert_each_rank_delivered_everything(stderr: &str, records: &Records, what: &str) {
    let reports = rank_reports(stderr);
    assert_eq!(reports.keys().copied().collect::<Vec<_>>(), vec![0, 1], "{what}: report lines\n{stderr}");
    for (rank, report) in reports {
        assert_eq!(report.dropped, 0, "{what}, rank {rank}: {report:?}");
        let received = unique_spans_of(records, i64::from(rank)).len() as u64;
        assert_eq!(received, report.exported, "{what}, rank {rank}: received {received}, reported {report:?}");
    }
}

#[test]
fn with_the_handler_sigterm_to_the_launcher_or_sigint_to_one_rank_drains_and_the_receiver_gets_everything() {
    let ctx = Ctx::new("signals-drain");
    for (signal, to_launcher) in [(libc::SIGTERM, true), (libc::SIGINT, false)] {
        let sink = Sink::start(&ctx);
        let label = format!("drain-{signal}");
        let extra = ["--exit-signal-handler", "--save", "ckpt", "--otel-span-groups", "per_step"];
        let job = endless_job(&ctx, &label, &sink, Protocol::Grpc, &extra);
        let pids = rank_pids(&ctx, &label);
        wait_for_both_ranks(&sink);
        if to_launcher {
            job.signal(signal);
        } else {
            // One rank is enough: the stop flag travels in the all-reduce.
            kill(pids[0], signal);
        }
        let finished = job.wait(EXIT_LIMIT);
        finished.assert_success(&label);
        let records = sink.stop();
        let summary = Summary::read(&ctx.path("summary.json"));
        assert_eq!(summary.json["exit_reason"], "signal", "{label}");
        for rank in [0, 1] {
            let spans: Vec<_> = records.spans.iter().filter(|s| s.rank() == Some(rank)).collect();
            assert!(spans.iter().any(|s| s.name == "megatron.checkpoint.exit_finalize"), "{label}, rank {rank}");
            assert!(spans.iter().any(|s| s.name == "megatron.checkpoint.save"), "{label}, rank {rank}");
            assert!(spans.iter().all(|s| !truncated(&s.attributes)), "{label}, rank {rank}: a drain truncates nothing");
            let iterations = spans.iter().filter(|s| s.name == ITERATION).count() as u64;
            assert_eq!(iterations, summary.iterations_run(), "{label}, rank {rank}: iteration spans");
        }
        assert_each_rank_delivered_everything(&finished.stderr, &records, &label);
    }
    ctx.finish();
}

/// Iterations of the checkpoints that rank 0 completed under `dir`: its
/// file written, and the tracker moved to it or past it. Rank 0 writes its
/// file before the save's gather with the other ranks and the tracker after
/// it; a rank killed in between leaves a file whose save (and interval)
/// never completed.
fn saved_iterations(dir: &Path) -> Vec<u64> {
    let tracker = std::fs::read_to_string(dir.join("latest_checkpointed_iteration.txt"))
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    let Some(tracker) = tracker else { return Vec::new() };
    let mut saved: Vec<u64> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.path().join("rank_00000.ckpt").exists())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("iter_")?.parse().ok())
        .filter(|iteration| *iteration <= tracker)
        .collect();
    saved.sort_unstable();
    saved
}

#[test]
fn sigkill_of_one_rank_fails_the_other_clearly_and_the_intervals_completed_before_it_are_at_the_receiver() {
    let ctx = Ctx::new("signals-kill");
    let sink = Sink::start(&ctx);
    // An interval every 4 iterations (each ends with a checkpoint).
    let extra = ["--save", "ckpt", "--save-interval", "4"];
    let job = endless_job(&ctx, "kill", &sink, Protocol::Grpc, &extra);
    let pids = rank_pids(&ctx, "kill");
    sink.wait_for("two completed intervals from rank 1", FIRST_SPANS, |r| {
        r.spans_named(TRAIN).filter(|s| s.rank() == Some(1)).count() >= 2
    });
    let seen_before = sink.records();
    let killed_at = std::time::Instant::now();
    kill(pids[1], libc::SIGKILL);
    let finished = job.wait(EXIT_LIMIT);
    let took = killed_at.elapsed();
    assert!(!finished.status.success(), "{}", finished.stderr);
    assert!(took < Duration::from_secs(20), "the job took {took:?} to end after the kill");
    assert!(finished.stderr.contains("lost the connection to rank 1"), "no clear error:\n{}", finished.stderr);
    let records = sink.stop();
    // Rank 1's intervals seen before the kill are still there (nothing
    // retracted), and every interval the survivor completed (each ended
    // with a checkpoint) reached the receiver, plus the one it was in.
    for span in seen_before.spans_named(TRAIN) {
        assert!(records.spans.iter().any(|s| s.span_id == span.span_id), "an interval vanished");
    }
    let saved = saved_iterations(&ctx.path("ckpt"));
    assert!(!saved.is_empty(), "rank 0 saved nothing");
    let survivor: Vec<_> = records.spans_named(TRAIN).filter(|s| s.rank() == Some(0)).collect();
    let completed = survivor.iter().filter(|s| !truncated(&s.attributes)).count();
    assert!(
        completed >= saved.len(),
        "rank 0 completed {} intervals (checkpoints at {saved:?}) but {completed} reached the receiver",
        saved.len()
    );
    assert!(survivor.len() > completed || completed > saved.len(), "the survivor's last interval is missing");
    ctx.finish();
}

#[test]
fn without_the_handler_sigterm_stops_the_training_at_once_while_a_hung_collector_holds_the_shutdown_up() {
    let ctx = Ctx::new("signals-hung-collector");
    let collector = Hanging::start();
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend(["--otel-enabled", "--train-iters", "1000000", "--log-interval", "1", "--step-sleep-ms", "20"]);
    let job = ctx.sim(&args).label("hung").otlp(Protocol::HttpProtobuf, &collector.endpoint()).spawn();
    let progress = |stderr: &str| stderr.lines().filter(|line| line.starts_with("iter ")).count();
    let before = wait_until("three iterations", FIRST_SPANS, || {
        let done = progress(&job.stderr_text());
        (done >= 3).then_some(done)
    });
    job.signal(libc::SIGTERM);
    let finished = job.wait(EXIT_LIMIT);
    // The rank ends with the signal itself (the launcher would pass on 143).
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&finished.status),
        Some(libc::SIGTERM),
        "{}",
        finished.stderr
    );
    // The shutdown waits for the collector up to its timeout (5 s): the
    // job trains no further than the iteration in flight. Progress lines
    // are printed at most every 100 ms, so they undercount iterations, and
    // the signal follows the read by a moment: a margin of two lines (the
    // job that trained on through the shutdown printed about 30 more).
    let after = progress(&finished.stderr);
    assert!(after <= before + 2, "{} progress lines after the signal: {}", after - before, finished.stderr);
    assert!(finished.stderr.contains("lens: SIGTERM: telemetry (rank 0) shut down"), "{}", finished.stderr);
    drop(collector);
    ctx.finish();
}
