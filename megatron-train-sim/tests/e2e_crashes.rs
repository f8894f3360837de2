//! The launcher and every rank killed with `SIGKILL` at once mid-iteration,
//! then a resume, against a live OTLP receiver (`e2e/otlp_sink.py`): what
//! the spool (docs/crashes.md) gives back, as a user sees it at the
//! collector (issue 22).
//!
//! One run of two ranks under the `per_step` span groups, every rank
//! exporting (`all_ranks`), saving every 5 iterations; both ranks stop
//! inside the forward phase of iteration 8 (`--inject-hang`), and once both
//! have said so and their last batches have arrived (a kill during an
//! export in flight is lens's at-least-once window, docs/crashes.md), the
//! test sends `SIGKILL` to the launcher's process group:
//! the launcher and both ranks die at once, nothing runs a handler or
//! flushes, and no launcher is left to clean up. The resumed attempt
//! replays the dead attempt's spools; then:
//!
//! - each rank's open `megatron.train` (the interval of iterations 6 to
//!   10), its open `megatron.train.iteration` (8) and the iteration's open
//!   child (`megatron.train.iteration.forward_backward`; `per_step` has no
//!   microbatch spans) arrive once, marked `nemo.span.truncated`, with
//!   their original ids (the spans that ended under them before the kill
//!   name them as parents), their original start times and the dead
//!   process's resource, in their interval's trace, ending between their
//!   start and the resume;
//! - every span that had ended before the kill arrives exactly once
//!   (whether its batch was exported before the kill or waited in the
//!   spool), and none is missing from the tree;
//! - the resumed attempt's goodput (its last rank's summary) charges the
//!   iterations after the checkpoint exactly;
//! - a further resume replays nothing.
//!
//! One run is shared by every assertion (CI has 2 cores).
#![cfg(feature = "otel")]

mod e2e_support;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e_support::{Ctx, Protocol, Records, SMALL, Sink, SinkSpan};
use lens_fallbacks::otel::spool::format::{HEADER_SIZE, SLOT_SIZE, read_header};
use lens_fallbacks::spool::SPOOL_SUBDIRECTORY;
use serde_json::Value;

const TRAIN: &str = "megatron.train";
const ITERATION: &str = "megatron.train.iteration";
const FORWARD_BACKWARD: &str = "megatron.train.iteration.forward_backward";
/// The iteration both ranks die in (1-based), and its `megatron.iteration`
/// attribute (the counter at its start).
const KILLED_IN: u64 = 8;
/// The skew between two ranks' clocks of one iteration boundary (they leave
/// it through the same all-reduce; more on a loaded machine).
const RANK_SKEW_S: f64 = 0.2;
/// The most one attempt may take.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(120);
/// The state word (the first 4 bytes, little-endian) of a spool slot being
/// written, and of one that keeps an ended span until its export is
/// answered (`STATE_WRITING` and `STATE_ENDED` of lens's spool format,
/// `lens_fallbacks::otel::spool::format`).
const SLOT_WRITING: u32 = 1;
const SLOT_ENDED: u32 = 3;

fn truncated(span: &SinkSpan) -> bool {
    span.attributes.get("nemo.span.truncated") == Some(&Value::Bool(true))
}

fn run_id(span: &SinkSpan) -> Option<&str> {
    span.resource.get("nemo.run.id").and_then(Value::as_str)
}

/// The ended spans that attempt `run`'s spools in `dir` still keep, by
/// rank: those whose export has not been answered yet (a slot is released
/// when the export's reply comes back, docs/crashes.md), counting a slot
/// being written as one.
fn unanswered_by_rank(dir: &Path, run: &str) -> BTreeMap<u32, usize> {
    let mut by_rank = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        // The writer's mapping is shared: a read sees its stores.
        let Ok(file) = std::fs::read(entry.path()) else { continue };
        let Ok(header) = read_header(&file) else { continue };
        if header.run_id != run {
            continue;
        }
        let kept = (0..header.slot_count as usize)
            .filter_map(|slot| file.get(HEADER_SIZE + slot * SLOT_SIZE..)?.first_chunk::<4>().copied())
            .filter(|state| matches!(u32::from_le_bytes(*state), SLOT_WRITING | SLOT_ENDED))
            .count();
        *by_rank.entry(header.rank).or_default() += kept;
    }
    by_rank
}

/// Waits (at most [`ATTEMPT_LIMIT`], polling every 50 ms) until both ranks
/// of attempt `run`, stopped, have had every ended span's export answered:
/// their spools under `dir` keep no ended span.
fn wait_until_every_export_is_answered(dir: &Path, run: &str) {
    let started = Instant::now();
    loop {
        let kept = unanswered_by_rank(dir, run);
        if kept.len() == 2 && kept.values().all(|&n| n == 0) {
            return;
        }
        assert!(
            started.elapsed() < ATTEMPT_LIMIT,
            "attempt {run}'s ended spans were still unanswered after {ATTEMPT_LIMIT:?} (by rank: {kept:?}, in {})",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn iteration_attribute(span: &SinkSpan) -> Option<u64> {
    span.attributes.get("megatron.iteration").and_then(Value::as_u64)
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// The spans of attempt `run` (by the resource's run id, which replayed
/// spans keep), of rank `rank`.
fn of<'a>(records: &'a Records, run: &'a str, rank: i64) -> impl Iterator<Item = &'a SinkSpan> + 'a {
    records.spans.iter().filter(move |s| run_id(s) == Some(run) && s.rank() == Some(rank))
}

#[test]
fn after_the_launcher_and_every_rank_are_killed_at_once_the_resume_replays_each_open_and_unexported_span_once() {
    let ctx = Ctx::new("crash-replay");
    let sink = Sink::start(&ctx);
    let endpoint = sink.endpoint(Protocol::Grpc);
    let base: Vec<&str> = SMALL
        .iter()
        .copied()
        .chain([
            "--otel-enabled",
            "--otel-span-groups",
            "per_step",
            "--nproc-per-node",
            "2",
            "--train-iters",
            "12",
            "--save",
            "D",
            "--save-interval",
            "5",
        ])
        .collect();
    let attempt = |run: &str, extra: &[&str]| {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        ctx.sim(&args).label(run).otlp(Protocol::Grpc, &endpoint).env("MEGATRON_OTEL_RUN_ID", run).run(ATTEMPT_LIMIT)
    };

    // Both ranks stop inside the forward phase of iteration 8; once both say
    // so, the launcher and the ranks get SIGKILL at once (its process group).
    let stops: Vec<String> = (0..2).map(|rank| format!("{rank}:forward:{KILLED_IN}")).collect();
    let args: Vec<&str> =
        base.iter().copied().chain(stops.iter().flat_map(|s| ["--inject-hang", s.as_str()])).collect();
    let mut killed =
        ctx.sim(&args).label("killed").otlp(Protocol::Grpc, &endpoint).env("MEGATRON_OTEL_RUN_ID", "killed").spawn();
    let stopped: Vec<String> = (0..2)
        .map(|rank| format!("rank {rank}: --inject-hang {rank}:forward:{KILLED_IN}: stopped until killed"))
        .collect();
    killed.wait_for_stderr_lines(&stopped, ATTEMPT_LIMIT);
    // A batch whose export is in flight when the kill lands is at the
    // collector while its spool slots still keep it (they are released on
    // the export's reply), so the replay sends it again: the one window in
    // which lens delivers at least once (docs/crashes.md). The stopped ranks
    // end no span, so the kill waits until that window is closed on both:
    // their spools keep no ended span, every export answered (the sink
    // writes its records before it replies, so they are all at the sink).
    wait_until_every_export_is_answered(&ctx.path(&format!("D/{SPOOL_SUBDIRECTORY}")), "killed");
    let sent_by_the_dead = sink.records().spans.iter().filter(|s| run_id(s) == Some("killed")).count();
    // Some batches went out before the kill (exports every 200 ms), so that
    // "every span once" below also says their slots were released, not
    // replayed.
    assert!(sent_by_the_dead > 0, "the attempt to be killed exported nothing before the kill");
    killed.kill_group();
    let killed = killed.wait(Duration::from_secs(10));
    assert_eq!(killed.status.signal(), Some(libc::SIGKILL), "the launcher died of the SIGKILL: {}", killed.stderr);
    let tracker = std::fs::read_to_string(ctx.path("D/latest_checkpointed_iteration.txt")).unwrap();
    assert_eq!(tracker.trim(), "5");
    let resumed_at = now_ns();
    attempt("resumed", &["--load", "D", "--summary-json", "summary.json"]).assert_success("the resumed attempt");
    // Goodput, from the last rank's summary: every iteration completed after
    // the checkpoint of 5 is lost (6 and 7; 8 was under way), exactly, on
    // every rank (each rank replayed its own predecessor's progress).
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(ctx.path("summary.json")).unwrap()).unwrap();
    let goodput = &summary["goodput"];
    assert_eq!(goodput["lost_iterations"], KILLED_IN - 1 - 5, "{goodput}");
    assert_eq!(goodput["lost_precision"], "iteration", "{goodput}");
    assert_eq!(goodput["productive_iterations"], 12, "{goodput}");
    let lost_s = goodput["seconds"]["lost_progress"].as_f64().unwrap();
    let after_resume = sink.records();

    // Every span arrives once: no span id twice, whichever attempt sent it.
    let mut seen: HashMap<&str, u32> = HashMap::new();
    for span in &after_resume.spans {
        *seen.entry(span.span_id.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| {
            let copies: Vec<_> = after_resume
                .spans
                .iter()
                .filter(|s| s.span_id == *id)
                .map(|s| (run_id(s).unwrap_or("?"), s.name.as_str(), truncated(s)))
                .collect();
            (*id, copies)
        })
        .collect();
    assert!(twice.is_empty(), "spans that arrived more than once (attempt, name, truncated): {twice:?}");

    let by_id = after_resume.by_id();
    for rank in [0_i64, 1] {
        let dead: Vec<&SinkSpan> = of(&after_resume, "killed", rank).collect();
        // Nothing of the dead attempt lost from the tree: every parent arrived.
        for span in &dead {
            assert!(
                span.parent_span_id.is_empty() || by_id.contains_key(span.parent_span_id.as_str()),
                "rank {rank}: the parent of {} ({}) never arrived",
                span.name,
                span.span_id
            );
        }
        // Iterations 1 to 7 ended before the kill: each arrived once, whole;
        // iteration 8 arrived once, truncated.
        let iterations: BTreeMap<u64, Vec<&SinkSpan>> =
            dead.iter().filter(|s| s.name == ITERATION).fold(BTreeMap::new(), |mut by, s| {
                by.entry(iteration_attribute(s).expect("megatron.iteration")).or_insert_with(Vec::new).push(*s);
                by
            });
        assert_eq!(iterations.keys().copied().collect::<Vec<_>>(), (0..KILLED_IN).collect::<Vec<_>>(), "rank {rank}");
        assert!(iterations.values().all(|v| v.len() == 1), "rank {rank}: {iterations:?}");
        for (counter, spans) in &iterations {
            assert_eq!(truncated(spans[0]), *counter == KILLED_IN - 1, "rank {rank}, iteration {}", counter + 1);
        }
        let open_iteration = iterations[&(KILLED_IN - 1)][0];
        let before = iterations[&(KILLED_IN - 2)][0];
        if rank == 1 {
            // The summary's rank: its lost time holds the lost iterations'
            // (6 and 7: counters 5 and 6), from the moment it was last known
            // alive (its progress write as iteration 8 began); the record it
            // is counted from is rank 0's (a little skew either way).
            let steps_s: f64 =
                [5, 6].iter().map(|c| iterations[c][0]).map(|s| (s.end_ns - s.start_ns) as f64 / 1e9).sum();
            assert!(lost_s >= steps_s - RANK_SKEW_S, "lost {lost_s} s, iterations 6 and 7 took {steps_s} s");
        }

        // The open interval: once, truncated, the parent of iterations 6, 7
        // and 8 (its original id), in their trace, started before them.
        let intervals: Vec<&SinkSpan> = dead.iter().copied().filter(|s| s.name == TRAIN).collect();
        let open: Vec<&SinkSpan> = intervals.iter().copied().filter(|s| truncated(s)).collect();
        assert_eq!(open.len(), 1, "rank {rank}: one open interval: {intervals:?}");
        let interval = open[0];
        assert!(intervals.iter().filter(|s| !truncated(s)).all(|s| s.trace_id != interval.trace_id));
        for child in [before, open_iteration] {
            assert_eq!(child.parent_span_id, interval.span_id, "rank {rank}: iteration under its interval");
            assert_eq!(child.trace_id, interval.trace_id, "rank {rank}: in its interval's trace");
            assert!(interval.start_ns <= child.start_ns, "rank {rank}: the interval's start time is its own");
        }

        // The iteration's open children: once each, truncated, under it.
        let forward_backward: Vec<&SinkSpan> = dead
            .iter()
            .copied()
            .filter(|s| s.name == FORWARD_BACKWARD && s.parent_span_id == open_iteration.span_id)
            .collect();
        assert_eq!(forward_backward.len(), 1, "rank {rank}: the forward-backward the rank died in");

        // Every truncated span is one of these three, with its original start
        // (after the previous iteration ended, where it is the iteration's
        // or inside it) and an end between its start and the resume.
        let replayed_open: Vec<&SinkSpan> = dead.iter().copied().filter(|s| truncated(s)).collect();
        let mut names: Vec<&str> = replayed_open.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, [TRAIN, ITERATION, FORWARD_BACKWARD], "rank {rank}");
        for span in &replayed_open {
            assert_eq!(span.trace_id, interval.trace_id, "rank {rank}: {}", span.name);
            let reasons: Vec<_> = span
                .events
                .iter()
                .filter(|(name, _)| name == "nemo.span.truncated")
                .map(|(_, attributes)| attributes.get("nemo.span.truncated.reason"))
                .collect();
            assert_eq!(
                reasons,
                [Some(&Value::from("the process died; replayed by the next attempt"))],
                "rank {rank}: {}",
                span.name
            );
            assert!(span.start_ns <= span.end_ns && span.end_ns <= resumed_at, "rank {rank}: {span:?}");
            if span.name != TRAIN {
                assert!(span.start_ns >= before.end_ns, "rank {rank}: {} starts in iteration 8", span.name);
            }
        }
        // The dead process's resource, not the resuming one's, marked
        // replayed (its own export is not).
        let mut replayed = before.resource.clone();
        assert_eq!(replayed.insert("lens.spool.replayed".into(), Value::Bool(true)), None, "rank {rank}");
        assert_eq!(open_iteration.resource, replayed, "rank {rank}");
        assert_eq!(interval.resource.get("dl.rank"), Some(&Value::from(rank)));
    }

    // A further resume (nothing left to train) replays nothing: no span of
    // either earlier attempt arrives again, nothing is truncated.
    attempt("again", &["--load", "D"]).assert_success("the further resume");
    let records = sink.stop();
    let again: Vec<&SinkSpan> = records.spans.iter().skip(after_resume.spans.len()).collect();
    assert!(again.iter().all(|s| run_id(s) == Some("again")), "a further resume sent an earlier attempt's spans again");
    assert!(again.iter().all(|s| !truncated(s)), "{:?}", again.iter().filter(|s| truncated(s)).collect::<Vec<_>>());
    ctx.finish();
}
