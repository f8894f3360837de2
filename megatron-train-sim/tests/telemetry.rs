//! What the simulator's telemetry looks like to someone reading the `file`
//! exporter's output: every span of the taxonomy with its parent or link,
//! the span groups, the rank strategies, one run id and one trace per
//! interval across ranks, pipeline links to the sender's span, the training
//! metrics, resumed runs, signals. Each test runs the binary (ranks are
//! processes) with every wait bounded, and reads the OTLP/JSON lines back.
#![cfg(feature = "otel")]

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use megatron_telemetry::groups::MegatronSpanGroup;
use megatron_telemetry::metrics::{self, InstrumentKind};
use megatron_telemetry::taxonomy;
use serde_json::Value;
use support::{RankTraces, SMALL, Span, command, read_metrics, read_traces, run_command, run_dir, temp_dir, with};

const LIMIT: Duration = Duration::from_secs(120);

/// The flags that turn every optional phase on (docs/simulator.md lists
/// them in its span table), for four ranks: two pipeline stages times two
/// data-parallel replicas.
const ALL_PHASES: &[&str] = &[
    "--nproc-per-node",
    "4",
    "--pipeline-model-parallel-size",
    "2",
    "--otel-enabled",
    "--otel-span-groups",
    "all",
    "--train-iters",
    "6",
    "--log-interval",
    "2",
    "--save",
    "ckpt2",
    "--save-interval",
    "2",
    "--async-save",
    "--eval-interval",
    "3",
    "--eval-iters",
    "1",
    "--log-params-norm",
    "--manual-gc",
    "--manual-gc-interval",
    "2",
    "--gpu-sniff-test-interval",
    "3",
    "--check-weight-hash-across-dp-replicas-interval",
    "3",
    "--enable-cuda-graph",
    "--cuda-graph-warmup-steps",
    "1",
    "--hybrid-override-pattern",
    "M**M",
    "--fine-grained-activation-offloading",
    "--fp8-format",
    "hybrid",
];

/// Saves a 2-iteration checkpoint of the 4-rank layout and the layer
/// pattern of [`ALL_PHASES`] under `dir/ckpt1` (telemetry off), to resume
/// from.
fn first_checkpoint(dir: &Path) {
    let args = with(
        SMALL,
        &[
            "--nproc-per-node",
            "4",
            "--pipeline-model-parallel-size",
            "2",
            "--train-iters",
            "2",
            "--save",
            "ckpt1",
            "--hybrid-override-pattern",
            "M**M",
        ],
    );
    let (status, stderr) = run_command(command(dir, &args), LIMIT);
    assert!(status.success(), "{stderr}");
}

/// Runs every optional phase under `all`, resumed from a checkpoint, every
/// rank exporting, with a SLURM job start a minute ago; the run's traces,
/// its directory and its stderr.
fn all_phases_run() -> (Vec<RankTraces>, support::TempDir, String) {
    let dir = temp_dir("all");
    first_checkpoint(&dir);
    let job_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .saturating_sub(60)
        .to_string();
    let mut command = command(&dir, &with(&with(SMALL, ALL_PHASES), &["--load", "ckpt1"]));
    command.env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks").env("SLURM_JOB_START_TIME", job_start);
    let (status, stderr) = run_command(command, LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    let traces = read_traces(&run_dir(&dir));
    (traces, dir, stderr)
}

/// The names of the ancestors of `span` (nearest first), within its rank.
fn ancestors<'a>(span: &Span, by_id: &HashMap<(u32, &str), &'a Span>) -> Vec<&'a str> {
    let mut names = Vec::new();
    let mut parent = span.parent.clone();
    while let Some(id) = parent {
        let Some(p) = by_id.get(&(span.rank, id.as_str())) else { break };
        names.push(p.name.as_str());
        parent = p.parent.clone();
    }
    names
}

#[test]
fn under_all_every_taxonomy_span_is_emitted_with_its_parent_and_links_join_the_ranks() {
    let (ranks, dir, stderr) = all_phases_run();
    assert_eq!(ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), vec![0, 1, 2, 3], "every rank exports");
    let spans: Vec<&Span> = ranks.iter().flat_map(|r| &r.spans).collect();
    let by_id: HashMap<(u32, &str), &Span> = spans.iter().map(|s| ((s.rank, s.span_id.as_str()), *s)).collect();

    // Every span of the taxonomy, and every occurrence outside evaluation
    // (whose forward steps reuse the training spans) under its parent.
    // The inference spans come from `serve`, not from training
    // (tests/e2e_serve.rs checks them).
    let training = |def: &&taxonomy::SpanDef| {
        !matches!(def.frequency, taxonomy::Frequency::PerRequest | taxonomy::Frequency::PerDecodeStep)
    };
    for def in taxonomy::SPANS.iter().filter(training) {
        let occurrences: Vec<&&Span> = spans.iter().filter(|s| s.name == def.name).collect();
        assert!(!occurrences.is_empty(), "{} was never emitted", def.name);
        for span in occurrences {
            let chain = ancestors(span, &by_id);
            if chain.contains(&taxonomy::EVALUATE_STEP.name) && def.name != taxonomy::EVALUATE_STEP.name {
                continue;
            }
            let parent = chain.first().copied();
            let allowed = match def.name {
                // The first iteration is wrapped in `first_iteration`.
                n if n == taxonomy::TRAIN_ITERATION.name => {
                    parent == def.parent || parent == Some(taxonomy::TRAIN_FIRST_ITERATION.name)
                }
                _ => parent == def.parent,
            };
            assert!(allowed, "{} on rank {} has parent {parent:?}, expected {:?}", def.name, span.rank, def.parent);
            if def.parent.is_none() {
                assert!(span.parent.is_none(), "{} must be a trace root", def.name);
            }
        }
    }
    // Taxonomy attributes on a few spans.
    for span in spans.iter().filter(|s| s.name == taxonomy::LAYER_FORWARD.name) {
        assert!(span.attributes.contains_key(taxonomy::attr::LAYER_NUMBER));
    }
    for span in spans.iter().filter(|s| s.name == taxonomy::TRAIN_ITERATION.name) {
        assert!(
            span.attributes.contains_key(taxonomy::attr::ITERATION) && span.attributes.contains_key("megatron.skipped")
        );
    }
    let resumed: Vec<_> = spans.iter().filter(|s| s.name == taxonomy::CHECKPOINT_LOAD_IO_READ.name).collect();
    assert_eq!(resumed.len(), 4, "every rank reads its checkpoint");

    // Identity: one run id, one service.instance.id per rank, distinct span ids.
    let run_ids: BTreeSet<String> = ranks.iter().map(|r| r.resource["nemo.run.id"].to_string()).collect();
    assert_eq!(run_ids.len(), 1, "{run_ids:?}");
    let instances: BTreeSet<String> = ranks.iter().map(|r| r.resource["service.instance.id"].to_string()).collect();
    assert_eq!(instances.len(), 4, "{instances:?}");
    for rank in &ranks {
        assert_eq!(rank.resource["service.version"], env!("CARGO_PKG_VERSION"), "rank {}", rank.rank);
        for key in ["dl.pipeline_parallel.size", "dl.data_parallel.size", "megatron.num_layers", "megatron.precision"] {
            assert!(rank.resource.contains_key(key), "rank {} has no resource attribute {key}", rank.rank);
        }
    }
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids repeat across ranks");

    // Every rank's interval spans start at the same iterations and
    // share one trace per interval; each is a root linked to the previous
    // interval, the first to startup.
    let intervals = |rank: &RankTraces| -> Vec<(String, Vec<(String, String)>)> {
        let mut list: Vec<&Span> = rank.spans.iter().filter(|s| s.name == taxonomy::TRAIN.name).collect();
        list.sort_by_key(|s| s.start);
        list.iter().map(|s| (s.trace_id.clone(), s.links.clone())).collect()
    };
    let reference: Vec<String> = intervals(&ranks[0]).into_iter().map(|(t, _)| t).collect();
    assert_eq!(reference.len(), 2, "iterations 2..6 with --save-interval 2: two intervals");
    for rank in &ranks {
        let mine = intervals(rank);
        assert_eq!(mine.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(), reference, "rank {}", rank.rank);
        let startup = rank.spans.iter().find(|s| s.name == taxonomy::STARTUP.name).unwrap();
        assert_eq!(mine[0].1, vec![(startup.trace_id.clone(), startup.span_id.clone())]);
        let first = rank.spans.iter().find(|s| s.name == taxonomy::TRAIN.name && s.trace_id == reference[0]).unwrap();
        assert_eq!(mine[1].1, vec![(first.trace_id.clone(), first.span_id.clone())]);
        // Everything emitted under an interval is in its trace.
        for span in rank.spans.iter().filter(|s| s.name == taxonomy::TRAIN_ITERATION.name) {
            assert!(reference.contains(&span.trace_id), "an iteration outside the interval traces");
        }
    }

    // Each linked receive points at the other stage's send span.
    let sends: HashMap<&str, &Span> = spans
        .iter()
        .filter(|s| s.name == taxonomy::P2P_SEND_FORWARD.name || s.name == taxonomy::P2P_SEND_BACKWARD.name)
        .map(|s| (s.span_id.as_str(), *s))
        .collect();
    for (linked, send_name) in [
        (taxonomy::PP_RECV_FORWARD_LINKED.name, taxonomy::P2P_SEND_FORWARD.name),
        (taxonomy::PP_RECV_BACKWARD_LINKED.name, taxonomy::P2P_SEND_BACKWARD.name),
    ] {
        let receives: Vec<&&Span> = spans.iter().filter(|s| s.name == linked).collect();
        assert!(!receives.is_empty());
        for receive in receives {
            assert_eq!(receive.links.len(), 1, "{linked}");
            let (trace, id) = &receive.links[0];
            let send = sends.get(id.as_str()).unwrap_or_else(|| panic!("{linked} links to no send span"));
            assert_eq!(send.name, send_name);
            assert_eq!(&send.trace_id, trace);
            assert_ne!(send.rank, receive.rank, "the link must cross ranks");
            assert!(receive.attributes.contains_key(taxonomy::attr::MICROBATCH_ID));
            assert!(receive.attributes.contains_key(taxonomy::attr::PIPELINE_PARALLEL_RANK));
        }
    }
    // The linked receive spans start with the blocking wait, inside their
    // receive span, so their durations are the receives' waits (they used
    // to start after the message had arrived and last microseconds).
    let (mut linked_ns, mut receive_ns) = (0_u64, 0_u64);
    for linked in spans.iter().filter(|s| s.name.starts_with("megatron.pp.recv_")) {
        let receive = by_id[&(linked.rank, linked.parent.as_deref().unwrap())];
        assert!(receive.name.starts_with("megatron.p2p.recv_"), "{} under {}", linked.name, receive.name);
        assert!(receive.start <= linked.start && linked.end <= receive.end, "{} outside its receive", linked.name);
        linked_ns += linked.end - linked.start;
        receive_ns += receive.end - receive.start;
    }
    assert!(linked_ns * 10 >= receive_ns * 9, "the linked spans cover {linked_ns} ns of {receive_ns} ns of receives");

    // The fault-tolerance heartbeat: one record per rank beside the
    // checkpoints, rewritten every loop pass (resumed at 2: passes 2..5).
    for rank in 0..4 {
        let path = dir.join(format!("ckpt2/ft_heartbeat/rank_{rank:05}.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let record: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!((record["rank"].as_u64(), record["iteration"].as_u64()), (Some(rank), Some(5)), "{text}");
        assert_eq!(record["beats"].as_u64(), Some(4), "{text}");
        assert!(record["unix_time_ms"].as_u64().unwrap() > 1_600_000_000_000, "{text}");
    }
    let heartbeats = spans.iter().filter(|s| s.name == taxonomy::CHECKPOINT_FT_HEARTBEAT.name).count();
    assert_eq!(heartbeats, 4 * 4, "one heartbeat span per rank and loop pass");

    // The timers' report of each (asynchronous) save, as Megatron's timers_log prints it.
    for iteration in [4, 6] {
        let line = format!("(min, max) time across ranks (ms): save-checkpoint of iteration {iteration}: (");
        assert_eq!(stderr.matches(&line).count(), 1, "{line:?} once in {stderr}");
    }
    // `megatron.checkpoint.report_memory` holds every rank's memory report
    // (issue 20): each rank reads its own, the first data-parallel replica
    // of each stage (ranks 0 and 2 of PP2 x DP2) prints it, as Megatron's
    // report_memory does.
    for iteration in [4, 6] {
        for rank in 0..4 {
            let line = format!("[Rank {rank}] after saving iteration {iteration}: peak memory ");
            let expected = usize::from(rank % 2 == 0);
            assert_eq!(stderr.matches(&line).count(), expected, "{line:?} {expected} time(s) in {stderr}");
        }
    }

    // The launcher's stamps and SLURM's fold the whole launch into startup.
    for rank in &ranks {
        let pre = rank.spans.iter().find(|s| s.name == taxonomy::PRE_STARTUP.name).unwrap();
        let launch = rank.spans.iter().find(|s| s.name == taxonomy::STARTUP_LAUNCH_SCRIPT.name).unwrap();
        assert!(pre.end <= launch.start + 1_000, "pre_startup ends where the launch script starts");
        assert!(pre.end - pre.start >= 50_000_000_000, "a minute in the queue");
    }
}

#[test]
fn the_default_preset_emits_only_its_groups_and_startup_joins_an_incoming_traceparent() {
    let dir = temp_dir("default");
    let args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--nproc-per-node",
            "2",
            "--pipeline-model-parallel-size",
            "2",
            "--train-iters",
            "4",
            "--save",
            "ckpt",
            "--save-interval",
            "2",
            "--eval-interval",
            "2",
            "--eval-iters",
            "1",
        ],
    );
    // The job was launched inside a CI trace: startup joins it.
    let (incoming_trace, incoming_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let mut command = command(&dir, &args);
    command
        .env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks")
        .env("TRACEPARENT", format!("00-{incoming_trace}-{incoming_span}-01"));
    let (status, stderr) = run_command(command, LIMIT);
    assert!(status.success(), "{stderr}");
    let ranks = read_traces(&run_dir(&dir));
    for rank in &ranks {
        let startup = rank.spans.iter().find(|s| s.name == taxonomy::STARTUP.name).unwrap();
        assert_eq!((startup.trace_id.as_str(), startup.parent.as_deref()), (incoming_trace, Some(incoming_span)));
        for interval in rank.spans.iter().filter(|s| s.name == taxonomy::TRAIN.name) {
            assert_ne!(interval.trace_id, incoming_trace, "intervals keep their derived trace ids");
            assert!(interval.parent.is_none());
        }
    }
    let default = MegatronSpanGroup::resolve("default").unwrap();
    let names: BTreeSet<&str> = ranks.iter().flat_map(|r| &r.spans).map(|s| s.name.as_str()).collect();
    for name in &names {
        let def = taxonomy::find(name).unwrap_or_else(|| panic!("{name} is not in the taxonomy"));
        assert!(default.contains(def.group), "{name} (group {}) is not in `default`", def.group.name());
    }
    for expected in [
        taxonomy::STARTUP.name,
        taxonomy::TRAIN.name,
        taxonomy::CHECKPOINT_SAVE.name,
        taxonomy::EVALUATE.name,
        taxonomy::TRAIN_FIRST_ITERATION.name,
    ] {
        assert!(names.contains(expected), "{expected} missing under `default`: {names:?}");
    }
    assert!(!names.contains(taxonomy::TRAIN_ITERATION.name));
}

#[test]
fn under_single_rank_only_one_rank_exports_in_a_tensor_parallel_run() {
    let dir = temp_dir("single");
    let args = with(
        SMALL,
        &["--otel-enabled", "--nproc-per-node", "2", "--tensor-model-parallel-size", "2", "--train-iters", "3"],
    );
    let (status, stderr) = run_command(command(&dir, &args), LIMIT);
    assert!(status.success(), "{stderr}");
    // The last rank says once, at start-up, why there is no MFU on the CPU.
    let why = "MFU: none: the device is not a GPU, and the table of known GPUs has no peak for it; \
               set MEGATRON_OTEL_PEAK_TFLOPS to report MFU";
    assert_eq!(stderr.matches(why).count(), 1, "{stderr}");
    let run = run_dir(&dir);
    let ranks = support::trace_ranks(&run);
    assert_eq!(ranks.len(), 1, "exactly one rank exports under single_rank: {ranks:?}");
    let files: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(files.iter().all(|f| f.ends_with(&format!("rank{}.jsonl", ranks[0]))), "{files:?}");
}

#[test]
fn the_eight_training_metrics_have_their_kinds_and_units_and_the_loss_falls() {
    let dir = temp_dir("metrics");
    let args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--train-iters",
            "40",
            "--log-interval",
            "10",
            // The first iteration: it is in the first-iteration snapshot and
            // in its interval, and counted once.
            "--inject-nan-at",
            "1",
            "--step-sleep-ms",
            "25",
        ],
    );
    // Frequent exports, so that the loss gauge is seen at several log intervals.
    let mut command = command(&dir, &args);
    command.env("OTEL_METRIC_EXPORT_INTERVAL", "100");
    let (status, stderr) = run_command(command, LIMIT);
    assert!(status.success(), "{stderr}");
    let points = read_metrics(&run_dir(&dir));
    for def in metrics::METRICS {
        let mine: Vec<_> = points.iter().filter(|p| p.name == def.name).collect();
        assert!(!mine.is_empty(), "{} was not exported", def.name);
        let expected_kind = match def.kind {
            InstrumentKind::Histogram => "histogram",
            InstrumentKind::Gauge => "gauge",
            InstrumentKind::Counter => "sum",
        };
        for point in &mine {
            assert_eq!(point.kind, expected_kind, "{}", def.name);
            assert_eq!(point.unit, def.unit.unwrap_or(""), "{}", def.name);
            if def.kind == InstrumentKind::Counter {
                assert!(point.monotonic, "{}", def.name);
            }
        }
    }
    let skipped = points.iter().filter(|p| p.name == metrics::SKIPPED_ITERS.name).map(|p| p.value).fold(0.0, f64::max);
    assert_eq!(skipped, 1.0, "one skipped iteration counted");
    let steps = points.iter().filter(|p| p.name == metrics::STEP_DURATION_MS.name).map(|p| p.count).max().unwrap();
    assert_eq!(steps, 5, "one step-duration sample per log interval, and one at the first iteration (Megatron's)");
    // The loss gauge at each export, in time order: it falls.
    let mut losses: BTreeMap<u64, f64> = BTreeMap::new();
    for point in points.iter().filter(|p| p.name == metrics::LOSS.name) {
        losses.insert(point.time, point.value);
    }
    let mut values: Vec<f64> = losses.values().copied().collect();
    values.dedup();
    assert!(values.len() >= 2, "the loss was exported at one log interval only: {values:?}");
    assert!(values.iter().all(|v| v.is_finite()), "{values:?}");
    assert!(values.last().unwrap() < values.first().unwrap(), "the loss did not fall: {values:?}");
}

#[test]
fn sigterm_mid_run_exports_the_open_spans_as_truncated_and_exits_143() {
    let dir = temp_dir("term");
    let pids = dir.join("pids");
    let pids_arg = pids.to_str().unwrap().to_string();
    let mut args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--otel-span-groups",
            "per_step",
            "--train-iters",
            "1000000",
            "--step-sleep-ms",
            "5",
            "--nproc-per-node",
            "2",
        ],
    );
    args.extend(["--rank-pids-file", pids_arg.as_str()]);
    let mut command = command(&dir, &args);
    command.env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks");
    let mut child = support::ChildGuard::spawn(&mut command);
    let stderr = support::drain_stderr(&mut child);
    support::read_pids(&pids, 2);
    wait_for_iterations(&dir);
    support::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM);
    let status = support::wait_bounded(&mut child, Duration::from_secs(60));
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(143), "{stderr}");
    let ranks = read_traces(&run_dir(&dir));
    assert_eq!(ranks.len(), 2, "{stderr}");
    for rank in &ranks {
        let interval = rank.spans.iter().find(|s| s.name == taxonomy::TRAIN.name).expect("the interval span");
        assert_eq!(interval.attributes.get("nemo.span.truncated"), Some(&Value::Bool(true)), "rank {}", rank.rank);
        assert!(rank.spans.iter().any(|s| s.name == taxonomy::TRAIN_ITERATION.name));
    }
}

#[test]
fn with_exit_signal_handler_an_exporting_rank_drains_and_still_exports_everything() {
    // The lifecycle's graceful handler sits in front of the drain flag:
    // the signal must reach the flag through it.
    let dir = temp_dir("drain");
    let pids = dir.join("pids");
    let pids_arg = pids.to_str().unwrap().to_string();
    let mut args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--exit-signal-handler",
            "--save",
            "ckpt",
            "--summary-json",
            "summary.json",
            "--train-iters",
            "1000000",
            "--step-sleep-ms",
            "5",
            "--nproc-per-node",
            "2",
        ],
    );
    args.extend(["--rank-pids-file", pids_arg.as_str()]);
    let mut command = command(&dir, &args);
    command.env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks");
    let mut child = support::ChildGuard::spawn(&mut command);
    let stderr = support::drain_stderr(&mut child);
    let rank_pids = support::read_pids(&pids, 2);
    wait_for_iterations(&dir);
    // Only to the exporting ranks themselves, one of them: the all-reduce
    // of the stop flag carries it to the other.
    support::kill(rank_pids[0], libc::SIGTERM);
    let status = support::wait_bounded(&mut child, Duration::from_secs(60));
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["exit_reason"], "signal");
    let ranks = read_traces(&run_dir(&dir));
    assert_eq!(ranks.len(), 2);
    for rank in &ranks {
        let names: BTreeSet<&str> = rank.spans.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(taxonomy::CHECKPOINT_EXIT_FINALIZE.name), "rank {}: {names:?}", rank.rank);
        assert!(names.contains(taxonomy::CHECKPOINT_SAVE.name), "rank {}", rank.rank);
        assert!(
            rank.spans.iter().all(|s| !s.attributes.contains_key("nemo.span.truncated")),
            "a graceful drain truncates nothing"
        );
    }
}

/// Waits (at most 30 s) until the ranks have written their first spans.
fn wait_for_iterations(dir: &Path) {
    let started = std::time::Instant::now();
    loop {
        let written = support::run_dirs(dir).first().is_some_and(|run| {
            support::trace_ranks(run).len() == 2
                && std::fs::read_to_string(run.join("traces-rank1.jsonl"))
                    .is_ok_and(|t| t.contains(taxonomy::CHECKPOINT_FT_HEARTBEAT.name))
        });
        if written {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no iteration exported within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_simulator_reference_lists_every_span_with_the_configuration_that_emits_it() {
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/simulator.md")).unwrap();
    let section = page
        .split("## Span → configuration")
        .nth(1)
        .expect("docs/simulator.md has a `## Span → configuration` section")
        .split("\n## ")
        .next()
        .unwrap();
    let listed: Vec<&str> = section.lines().filter_map(|line| line.strip_prefix("| `")?.split('`').next()).collect();
    let expected: Vec<&str> = taxonomy::SPANS.iter().map(|s| s.name).collect();
    assert_eq!(listed, expected, "the table must list taxonomy::SPANS in order");
    for flag in ALL_PHASES.iter().filter(|a| a.starts_with("--")) {
        assert!(page.contains(flag), "docs/simulator.md does not mention {flag}");
    }
}

#[test]
fn a_killed_rank_makes_the_exporting_others_fail_promptly_and_still_export() {
    let dir = temp_dir("killed");
    let pids = dir.join("pids");
    let pids_arg = pids.to_str().unwrap().to_string();
    let mut args =
        with(SMALL, &["--otel-enabled", "--train-iters", "1000000", "--step-sleep-ms", "5", "--nproc-per-node", "2"]);
    args.extend(["--rank-pids-file", pids_arg.as_str()]);
    let mut command = command(&dir, &args);
    command.env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks");
    let mut child = support::ChildGuard::spawn(&mut command);
    let stderr = support::drain_stderr(&mut child);
    let rank_pids = support::read_pids(&pids, 2);
    wait_for_iterations(&dir);
    let killed_at = std::time::Instant::now();
    support::kill(rank_pids[1], libc::SIGKILL);
    let status = support::wait_bounded(&mut child, Duration::from_secs(30));
    let elapsed = killed_at.elapsed();
    let stderr = stderr.join().unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}: {stderr}");
    assert!(stderr.contains("lost the connection to rank 1"), "{stderr}");
    // The survivor shut telemetry down on its way out: its interval is exported.
    let ranks = read_traces(&run_dir(&dir));
    let survivor = ranks.iter().find(|r| r.rank == 0).expect("rank 0's traces");
    assert!(survivor.spans.iter().any(|s| s.name == taxonomy::TRAIN.name), "{stderr}");
}
