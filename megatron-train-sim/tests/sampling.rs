//! Sampling and trace ids as a user of the simulator sees them in the `file`
//! exporter's output:
//!
//! - with the "per-step granularity with trace sampling" configuration, every
//!   span emitted every iteration or every log interval is kept for about
//!   the configured share of iterations, always together with its
//!   iteration, while the structural spans are all there;
//! - two launches of one pinned run id, the second resuming where the first
//!   opened an interval, never share a trace id, while the ranks of one
//!   launch share theirs;
//! - a pinned run id with no launch id is warned about once;
//! - so is `OTEL_SDK_DISABLED=true` beside `--otel-enabled` or
//!   `MEGATRON_OTEL_ENABLED=1`, and the run records nothing.
//! - a bad telemetry flag in a run that does not enable telemetry is one
//!   warning, and the run trains, as a bad variable is, and so is a bad
//!   `OTEL_SDK_DISABLED`.
#![cfg(feature = "otel")]

mod support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::time::Duration;

use megatron_telemetry::taxonomy::{self, Sampling, attr};
use serde_json::Value;
use support::{SMALL, Span, command, read_traces, run_command, run_dir, temp_dir, with};

const LIMIT: Duration = Duration::from_secs(120);
const KEY: &str = "lens.sampling.key";

fn spans_of(dir: &Path) -> Vec<Span> {
    read_traces(&run_dir(dir)).into_iter().flat_map(|rank| rank.spans).collect()
}

fn names<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[test]
fn a_ratio_sampler_cuts_every_per_iteration_span_with_its_iteration_and_keeps_the_structure() {
    const ITERATIONS: u64 = 200;
    const RATIO: f64 = 0.3;
    let dir = temp_dir("sampling");
    let args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--num-layers",
            "1",
            "--train-iters",
            "200",
            "--log-interval",
            "1",
            "--log-params-norm",
            "--manual-gc",
            "--manual-gc-interval",
            "1",
            "--gpu-sniff-test-interval",
            "1",
            "--save",
            "ckpt",
            "--save-interval",
            "50",
            "--eval-interval",
            "50",
            "--eval-iters",
            "1",
        ],
    );
    let mut command = command(&dir, &args);
    command
        .env("MEGATRON_OTEL_SPAN_GROUPS", "per_step")
        .env("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
        .env("OTEL_TRACES_SAMPLER_ARG", RATIO.to_string());
    let (status, stderr) = run_command(command, LIMIT);
    assert!(status.success(), "{stderr}");
    let spans = spans_of(&dir);

    // The kept iterations, and their keys.
    let iterations = names(&spans, taxonomy::TRAIN_ITERATION.name);
    let kept: BTreeMap<i64, u64> = iterations
        .iter()
        .map(|s| {
            let key = s.attributes[KEY].as_i64().expect("the iteration span carries its key");
            (key, s.attributes[attr::ITERATION].as_u64().unwrap())
        })
        .collect();
    assert_eq!(kept.len(), iterations.len(), "one key per iteration");
    let n = ITERATIONS as f64;
    let sigma = (n * RATIO * (1.0 - RATIO)).sqrt();
    let share = kept.len() as f64;
    assert!(
        (share - n * RATIO).abs() <= 5.0 * sigma,
        "{} of {ITERATIONS} iterations kept at ratio {RATIO} (expected {} ± {:.0})",
        kept.len(),
        n * RATIO,
        5.0 * sigma
    );

    // Every span emitted every iteration or log interval is kept exactly for
    // the kept iterations: keyed by one of them, or below a span that is.
    let by_id: BTreeMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let iteration_of = |span: &Span| -> Option<u64> {
        let mut current = span;
        for _ in 0..16 {
            if let Some(key) = current.attributes.get(KEY).and_then(Value::as_i64) {
                return Some(*kept.get(&key).unwrap_or_else(|| panic!("{} keyed by a dropped iteration", span.name)));
            }
            current = by_id.get(current.parent.as_deref()?)?;
        }
        None
    };
    let per_iteration = [
        &taxonomy::TRAIN_ITERATION,
        &taxonomy::CHECKPOINT_FT_HEARTBEAT,
        &taxonomy::CHECKPOINT_SAVE_FINALIZE,
        &taxonomy::TRAIN_ITERATION_REPORT,
        &taxonomy::TRAIN_PARAMS_NORM,
        &taxonomy::TRAIN_LOG,
        &taxonomy::TRAIN_GC_COLLECT,
        &taxonomy::TRAIN_SNIFF_TEST,
        &taxonomy::TRAIN_ITERATION_FORWARD_BACKWARD,
        &taxonomy::TRAIN_ITERATION_OPTIMIZER,
    ];
    for def in per_iteration {
        assert_ne!(def.sampling, Sampling::Structural, "{}", def.name);
        let found = names(&spans, def.name);
        let belongs: BTreeSet<u64> = found
            .iter()
            .map(|s| iteration_of(s).unwrap_or_else(|| panic!("{} kept outside any kept iteration", def.name)))
            .collect();
        assert_eq!(found.len(), kept.len(), "{}: one per kept iteration", def.name);
        assert_eq!(belongs, kept.values().copied().collect(), "{}: exactly the kept iterations", def.name);
    }
    for name in [taxonomy::TRAIN_FIRST_ITERATION.name, taxonomy::TRAIN_FORWARD_PRE_HOOK.name] {
        for span in names(&spans, name) {
            assert!(iteration_of(span).is_some(), "{name} kept although its iteration was dropped");
        }
    }

    // Structure is never sampled away.
    let count = |def: &taxonomy::SpanDef| names(&spans, def.name).len();
    assert_eq!(count(&taxonomy::STARTUP), 1);
    assert_eq!(count(&taxonomy::STARTUP_MODEL_INIT), 1);
    assert_eq!(count(&taxonomy::STARTUP_DATALOADER), 1);
    assert_eq!(count(&taxonomy::STARTUP_SNIFF_TEST), 1);
    assert_eq!(count(&taxonomy::TRAIN), 4, "one interval per 50 iterations");
    for def in [
        &taxonomy::CHECKPOINT_EXPOSED_SAVE,
        &taxonomy::CHECKPOINT_SAVE,
        &taxonomy::CHECKPOINT_SAVE_STATE_DICT,
        &taxonomy::CHECKPOINT_SAVE_IO_WRITE,
        &taxonomy::EVALUATE,
        &taxonomy::EVALUATE_STEP,
    ] {
        assert_eq!(count(def), 4, "{}: every save and evaluation", def.name);
    }
    assert_eq!(count(&taxonomy::CHECKPOINT_EXIT_FINALIZE), 1);
}

/// The startup and interval trace ids of each rank of the run in `dir`:
/// (rank, startup trace, {first iteration of the interval's first pass:
/// trace}). The interval's first iteration is that of the first iteration
/// span under it.
fn trace_ids(dir: &Path) -> Vec<(u32, String, BTreeMap<u64, String>)> {
    read_traces(dir)
        .into_iter()
        .map(|rank| {
            let startup = names(&rank.spans, taxonomy::STARTUP.name)[0].trace_id.clone();
            let mut intervals = BTreeMap::new();
            for interval in names(&rank.spans, taxonomy::TRAIN.name) {
                let first = rank
                    .spans
                    .iter()
                    .filter(|s| s.trace_id == interval.trace_id && s.name == taxonomy::TRAIN_ITERATION.name)
                    .filter_map(|s| s.attributes[attr::ITERATION].as_u64())
                    .min()
                    .expect("an iteration in the interval");
                intervals.insert(first, interval.trace_id.clone());
            }
            (rank.rank, startup, intervals)
        })
        .collect()
}

#[test]
fn a_resubmission_of_a_pinned_run_id_gets_fresh_trace_ids_and_its_ranks_share_them() {
    let dir = temp_dir("resubmit");
    let base = with(
        SMALL,
        &["--otel-enabled", "--otel-span-groups", "per_step", "--nproc-per-node", "2", "--save-interval", "2"],
    );
    let launch = |extra: &[&'static str], telemetry: &str| {
        let mut command = command(&dir, &with(&base, extra));
        command
            .env("MEGATRON_OTEL_RUN_ID", "pinned-run")
            .env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks")
            .env("MEGATRON_OTEL_FILE_DIR", telemetry);
        let (status, stderr) = run_command(command, LIMIT);
        assert!(status.success(), "{stderr}");
        assert!(!stderr.contains("no launch id"), "the launcher hands out a launch id: {stderr}");
        trace_ids(&dir.join(telemetry))
    };
    // A checkpoint at iteration 2 (telemetry off); then two launches that
    // both resume from it, as a hand resubmission after a crash does: both
    // open intervals at iterations 2 and 4.
    let (status, stderr) = run_command(
        command(&dir, &with(SMALL, &["--nproc-per-node", "2", "--train-iters", "2", "--save", "ckpt"])),
        LIMIT,
    );
    assert!(status.success(), "{stderr}");
    let first = launch(&["--train-iters", "6", "--load", "ckpt", "--save", "ckpt-first"], "first");
    let second = launch(&["--train-iters", "6", "--load", "ckpt", "--save", "ckpt-second"], "second");
    let starts = |attempt: &[(u32, String, BTreeMap<u64, String>)]| attempt[0].2.keys().copied().collect::<Vec<_>>();
    assert_eq!(starts(&first), [2, 4], "{first:?}");
    assert_eq!(starts(&second), [2, 4], "{second:?}");
    for attempt in [&first, &second] {
        assert_eq!(attempt.len(), 2, "both ranks export");
        assert_eq!(attempt[0].1, attempt[1].1, "the ranks of one launch share the startup trace");
        assert_eq!(attempt[0].2, attempt[1].2, "the ranks of one launch share the interval traces");
    }
    assert_ne!(first[0].1, second[0].1, "two launches never share a startup trace");
    let first_ids: HashSet<&String> = first[0].2.values().collect();
    let second_ids: HashSet<&String> = second[0].2.values().collect();
    assert!(first_ids.is_disjoint(&second_ids), "two launches never share an interval trace: {first:?} {second:?}");
}

#[test]
fn a_pinned_run_id_without_a_launch_id_is_warned_about_once() {
    let dir = temp_dir("no-launch-id");
    let args = with(SMALL, &["--otel-enabled", "--train-iters", "2"]);
    let mut pinned = command(&dir, &args);
    pinned.env("MEGATRON_OTEL_RUN_ID", "pinned-run");
    let (status, stderr) = run_command(pinned, LIMIT);
    assert!(status.success(), "{stderr}");
    assert_eq!(stderr.matches("no launch id is set").count(), 1, "{stderr}");
    assert!(stderr.contains("MEGATRON_OTEL_RUN_ID") && stderr.contains("MEGATRON_OTEL_LAUNCH_ID"), "{stderr}");

    let mut launched = command(&dir, &args);
    launched.env("MEGATRON_OTEL_RUN_ID", "pinned-run").env("MEGATRON_OTEL_LAUNCH_ID", "launch-2");
    let (status, stderr) = run_command(launched, LIMIT);
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("no launch id"), "{stderr}");
}

/// `OTEL_TRACES_SAMPLER_ARG` without a ratio sampler is ignored, as the
/// SDKs ignore it, with one warning naming the sampler in force (a job
/// that sets only the argument likely meant a ratio): every iteration is
/// still recorded.
#[test]
fn a_sampler_argument_without_a_ratio_sampler_is_ignored_with_a_warning() {
    let dir = temp_dir("sampler-arg-alone");
    let args = with(SMALL, &["--otel-enabled", "--otel-span-groups", "per_step", "--train-iters", "4"]);
    let mut run = command(&dir, &args);
    run.env("OTEL_TRACES_SAMPLER_ARG", "0.1");
    let (status, stderr) = run_command(run, LIMIT);
    assert!(status.success(), "{stderr}");
    let warning = "OTEL_TRACES_SAMPLER_ARG=0.1 is ignored: the trace sampler parentbased_always_on takes no argument";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    let spans = spans_of(&dir);
    assert_eq!(names(&spans, "megatron.train.iteration").len(), 4, "every iteration is kept");
}

#[test]
fn otel_sdk_disabled_beside_an_enabling_setting_is_warned_about_once_and_records_nothing() {
    for (enable, named) in [(None, "--otel-enabled"), (Some("MEGATRON_OTEL_ENABLED"), "MEGATRON_OTEL_ENABLED")] {
        let dir = temp_dir("sdk-disabled");
        let args = match enable {
            None => with(SMALL, &["--otel-enabled", "--train-iters", "2"]),
            Some(_) => with(SMALL, &["--train-iters", "2"]),
        };
        let mut run = command(&dir, &args);
        run.env("OTEL_SDK_DISABLED", "true");
        if let Some(variable) = enable {
            run.env(variable, "1");
        }
        let (status, stderr) = run_command(run, LIMIT);
        assert!(status.success(), "{stderr}");
        let warned = stderr.matches("OTEL_SDK_DISABLED=true turns telemetry off although").count();
        assert_eq!(warned, 1, "{named}: one warning: {stderr}");
        assert!(stderr.contains(named), "{stderr}");
        assert!(!dir.join("telemetry").exists(), "{named}: telemetry is off, nothing is written");
        // The closing line says what keeps it off, not to enable it.
        assert_eq!(stderr.lines().last(), Some("telemetry: off (OTEL_SDK_DISABLED=true)"), "{named}: {stderr}");
    }
}

#[test]
fn a_bad_telemetry_flag_without_telemetry_is_one_warning_and_the_run_trains() {
    let dir = temp_dir("bad-flag-off");
    let args = with(SMALL, &["--otel-span-groups", "per_stpe", "--train-iters", "2"]);
    let (status, stderr) = run_command(command(&dir, &args), LIMIT);
    assert!(status.success(), "{stderr}");
    assert_eq!(stderr.matches("so this problem in its configuration is ignored").count(), 1, "{stderr}");
    assert!(stderr.contains("--otel-span-groups") && stderr.contains("per_stpe"), "{stderr}");
    assert!(!dir.join("telemetry").exists(), "telemetry is off, nothing is written");
    // A bad OTEL_SDK_DISABLED cannot turn telemetry on: one warning too.
    let mut run = command(&dir, &with(SMALL, &["--train-iters", "2"]));
    run.env("OTEL_SDK_DISABLED", "maybe");
    let (status, stderr) = run_command(run, LIMIT);
    assert!(status.success(), "{stderr}");
    assert_eq!(stderr.matches("so this problem in its configuration is ignored").count(), 1, "{stderr}");
    assert!(stderr.contains("OTEL_SDK_DISABLED") && stderr.contains("'maybe'"), "{stderr}");
    // The same flag with telemetry on stops the run before it starts.
    let args = with(SMALL, &["--otel-enabled", "--otel-span-groups", "per_stpe", "--train-iters", "2"]);
    let (status, stderr) = run_command(command(&dir, &args), LIMIT);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--otel-span-groups"), "{stderr}");
}
