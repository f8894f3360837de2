//! End-to-end tests of the `megatron-train-sim` binary: each test runs the
//! built binary as a user would (one rank, or the launcher with several),
//! in a temporary directory, with every wait bounded.

use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::{ChildGuard, SMALL, command, kill, read_pids, run_command, temp_dir, wait_bounded, with};

fn stderr_of(child: &mut Child) -> String {
    use std::io::Read as _;
    let mut text = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text
}

/// Runs to completion; status, stderr.
fn run(dir: &Path, args: &[&str]) -> (ExitStatus, String) {
    run_command(command(dir, args), Duration::from_secs(120))
}

fn summary(dir: &Path, args: &[&str]) -> Value {
    let path = dir.join("summary.json");
    let mut all: Vec<&str> = args.to_vec();
    let path_str = path.to_str().unwrap().to_string();
    all.extend(["--summary-json", &path_str]);
    let (status, stderr) = run(dir, &all);
    assert!(status.success(), "{status}: {stderr}");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn losses(summary: &Value) -> Vec<Option<f64>> {
    summary["iteration_losses"].as_array().unwrap().iter().map(|e| e["loss"].as_f64()).collect()
}

fn floats(value: &Value) -> Vec<f64> {
    value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
}

/// The summary's whole-iteration times (boundary to boundary on the training
/// loop) of a run of `iterations` steps that each sleep 2 ms: one per
/// iteration, each at least its own step time (which holds the sleep), their
/// sum within the process's lifetime as the test measured it; the process's
/// CPU since the loop started, per iteration, no more than every core busy
/// for that whole lifetime.
fn whole_iterations_hold_their_steps_within_the_process(s: &Value, iterations: usize, process_ms: f64) {
    let steps = floats(&s["step_times_ms"]);
    let whole = floats(&s["iteration_times_ms"]);
    assert_eq!(whole.len(), iterations);
    for (index, (whole, step)) in whole.iter().zip(&steps).enumerate() {
        assert!(*step >= 2.0, "iteration {}: a step of {step} ms holds a 2 ms sleep", index + 1);
        assert!(whole >= step, "iteration {}: whole {whole} ms < step {step} ms", index + 1);
    }
    let sum: f64 = whole.iter().sum();
    assert!(sum < process_ms, "the iterations took {sum} ms of a process that lived {process_ms} ms");
    let mean = s["mean_iteration_time_ms"].as_f64().unwrap();
    assert!((mean - sum / iterations as f64).abs() < 1e-9, "mean {mean} of {whole:?}");
    assert!(mean >= s["mean_step_time_ms"].as_f64().unwrap());
    let cpu = s["process_cpu_ms"].as_f64().unwrap();
    let per_iteration = s["process_cpu_ms_per_iteration"].as_f64().unwrap();
    assert!((per_iteration * iterations as f64 - cpu).abs() < 1e-6, "{per_iteration} × {iterations} vs {cpu}");
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    assert!(cpu > 0.0 && cpu <= process_ms * cores, "{cpu} ms of CPU in a {process_ms} ms process on {cores} cores");
}

#[test]
fn one_rank_trains_fifty_iterations_and_the_loss_falls() {
    let dir = temp_dir("single");
    let started = Instant::now();
    let s = summary(&dir, &with(SMALL, &["--train-iters", "50", "--log-interval", "10", "--step-sleep-ms", "2"]));
    let process_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(s["exit_reason"], "completed");
    assert_eq!(s["final_iteration"], 50);
    let logged: Vec<f64> = s["losses"].as_array().unwrap().iter().map(|e| e["loss"].as_f64().unwrap()).collect();
    assert_eq!(logged.len(), 5);
    assert!(logged[4] < logged[0] * 0.5, "the loss did not fall: {logged:?}");
    assert!(s["tokens_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(s["step_times_ms"].as_array().unwrap().len(), 50);
    whole_iterations_hold_their_steps_within_the_process(&s, 50, process_ms);
    assert_eq!(s["telemetry"]["enabled"], false);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("megatron-train-sim-heartbeat"))
        .collect();
    assert!(left.is_empty(), "a run without --save that ended well leaves its heartbeat behind: {left:?}");
}

/// The default model is a byte-level language model: it starts near the
/// loss of a uniform guess over 256 bytes, prints its corpus's single-byte
/// entropy, and its evaluation loss ends below it (it learns which byte
/// follows which). Throughput counts the bytes predicted.
#[test]
fn the_default_language_model_ends_below_the_corpus_single_byte_entropy() {
    let dir = temp_dir("lm");
    let path = dir.join("summary.json");
    let (status, stderr) = run(&dir, &["--eval-interval", "50", "--summary-json", path.to_str().unwrap()]);
    assert!(status.success(), "{status}: {stderr}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let entropy = s["corpus_unigram_entropy_nats"].as_f64().unwrap();
    assert!(stderr.contains(&format!("single-byte entropy {entropy:.4} nats")), "{stderr}");
    assert!((2.0..4.0).contains(&entropy), "{entropy}");
    let first = losses(&s)[0].unwrap();
    assert!((first - 256_f64.ln()).abs() < 0.5, "the untrained model is not near a uniform guess: {first}");
    let eval = s["eval_losses"].as_array().unwrap();
    assert_eq!(eval.len(), 1);
    let eval = eval[0]["loss"].as_f64().unwrap();
    assert!(eval < entropy, "the evaluation loss {eval} did not end below the single-byte entropy {entropy}");
    assert!(stderr.contains(&format!("validation at iter 50 | lm loss {eval:.4}")), "{stderr}");
    // 8 samples of 32 bytes; 4 layers of width 32, the embedding and the output projection.
    assert_eq!(s["tokens_per_iteration"], 256);
    let parameters = 256 * 32 + 4 * (32 * 32 + 32) + (32 * 256 + 256);
    let per_token = 6 * parameters - 2 * 256 * 32;
    assert_eq!(s["flops_per_iteration"].as_f64().unwrap(), f64::from(per_token * 256));
}

#[test]
fn pipeline_data_and_tensor_parallel_runs_compute_what_one_rank_computes() {
    let base = with(SMALL, &["--train-iters", "8", "--log-interval", "4", "--seed", "7"]);
    let reference = losses(&summary(&temp_dir("ref"), &base));
    let pp_dp = losses(&summary(
        &temp_dir("ppdp"),
        &with(&base, &["--nproc-per-node", "4", "--pipeline-model-parallel-size", "2"]),
    ));
    let tp = losses(&summary(
        &temp_dir("tp"),
        &with(&base, &["--nproc-per-node", "2", "--tensor-model-parallel-size", "2"]),
    ));
    assert_eq!(reference.len(), 8);
    for (name, run) in [("PP=2 × DP=2", &pp_dp), ("TP=2", &tp)] {
        for (i, (a, b)) in reference.iter().zip(run.iter()).enumerate() {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!((a - b).abs() <= 1e-4 * a.abs().max(1e-3), "{name}, iteration {}: {a} vs {b}", i + 1);
        }
    }
}

#[test]
fn a_saved_run_resumes_at_its_iteration_and_continues_as_if_never_stopped() {
    let dir = temp_dir("ckpt");
    let base = with(SMALL, &["--log-interval", "2", "--nproc-per-node", "2", "--pipeline-model-parallel-size", "2"]);
    let full = losses(&summary(&temp_dir("ckpt-full"), &with(&base, &["--train-iters", "8"])));
    let first = summary(&dir, &with(&base, &["--train-iters", "4", "--save", "ckpt", "--save-interval", "2"]));
    assert_eq!(first["checkpoints"].as_array().unwrap().len(), 2);
    assert_eq!(std::fs::read_to_string(dir.join("ckpt/latest_checkpointed_iteration.txt")).unwrap().trim(), "4");
    assert!(dir.join("ckpt/iter_0000004/rank_00001.ckpt").is_file());
    let resumed = summary(&dir, &with(&base, &["--train-iters", "8", "--load", "ckpt"]));
    assert_eq!(resumed["start_iteration"], 4);
    assert_eq!(resumed["final_iteration"], 8);
    let tail = losses(&resumed);
    assert_eq!(tail.len(), 4);
    for (a, b) in full[4..].iter().zip(&tail) {
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!((a - b).abs() <= 1e-5 * a.abs().max(1e-3), "{a} vs {b}");
    }
}

#[test]
fn a_damaged_truncated_or_foreign_checkpoint_exits_2_naming_the_file_and_what_is_wrong() {
    let dir = temp_dir("corrupt");
    let base = with(SMALL, &["--log-interval", "1"]);
    let (status, stderr) = run(&dir, &with(&base, &["--train-iters", "2", "--save", "ckpt"]));
    assert!(status.success(), "{status}: {stderr}");
    let file = dir.join("ckpt/iter_0000002/rank_00000.ckpt");
    let good = std::fs::read(&file).unwrap();
    let text = String::from_utf8_lossy(&good).into_owned();
    let count_at = text.find("\"params\":").unwrap() + "\"params\":".len();
    let count_end = count_at + text[count_at..].find(|c: char| !c.is_ascii_digit()).unwrap();
    // A header whose parameter count overflows any offset (it panicked).
    let overflowing = [&good[..count_at], b"18446744073709551615", &good[count_end..]].concat();
    let old_format = [b"MTSIM-CKPT 1".as_slice(), &good["MTSIM-CKPT 2".len()..]].concat();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("damaged", overflowing, "truncated: the header announces 18446744073709551615 parameter values"),
        ("old format", old_format, "a megatron-train-sim checkpoint of another format"),
        ("truncated", good[..good.len() / 2].to_vec(), "truncated"),
        ("foreign", b"\x89PNG\r\n\x1a\n not a checkpoint".to_vec(), "not a megatron-train-sim checkpoint"),
    ];
    for (name, bytes, problem) in cases {
        std::fs::write(&file, bytes).unwrap();
        let (status, stderr) = run(&dir, &with(&base, &["--train-iters", "4", "--load", "ckpt"]));
        assert_eq!(status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains("iter_0000002/rank_00000.ckpt"), "{name}: the path is not named: {stderr}");
        assert!(stderr.contains(problem), "{name}: expected {problem:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
    // A sequence length of 0 or beyond the bound (2^20) would become the
    // decode window of `serve`: refused by resume and by serve alike.
    let seq_at = text.find("\"seq_length\":").unwrap() + "\"seq_length\":".len();
    let seq_end = seq_at + text[seq_at..].find(|c: char| !c.is_ascii_digit()).unwrap();
    for seq in ["0", "1048577", "18446744073709551615"] {
        std::fs::write(&file, [&good[..seq_at], seq.as_bytes(), &good[seq_end..]].concat()).unwrap();
        let problem = format!("\"seq_length\" is {seq}; a sequence length is 1 to 1048576 tokens");
        for args in
            [with(&base, &["--train-iters", "4", "--load", "ckpt"]), vec!["serve", "--load", "ckpt", "--port", "0"]]
        {
            let (status, stderr) = run(&dir, &args);
            assert_eq!(status.code(), Some(2), "{args:?}, seq_length {seq}: {stderr}");
            assert!(stderr.contains("iter_0000002/rank_00000.ckpt"), "{args:?}: the path is not named: {stderr}");
            assert!(stderr.contains(&problem), "{args:?}: expected {problem:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        }
    }
    // Layers of other kinds (the mixers have no parameters, so the weights
    // would load): another model, refused; another sequence length is not.
    std::fs::write(&file, &good).unwrap();
    let (status, stderr) =
        run(&dir, &with(&base, &["--train-iters", "4", "--load", "ckpt", "--hybrid-override-pattern", "M*M*"]));
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "saved with --hybrid-override-pattern none (every layer a transformer), this run has \"M*M*\" (the \
             layers' kinds must match)"
        ),
        "{stderr}"
    );
    let (status, stderr) =
        run(&dir, &["--hidden-size", "32", "--seq-length", "8", "--train-iters", "3", "--load", "ckpt"]);
    assert!(status.success(), "another --seq-length resumes: {stderr}");
    // The same layers spelled out: the same model.
    let (status, stderr) =
        run(&dir, &with(&base, &["--train-iters", "4", "--load", "ckpt", "--hybrid-override-pattern", "****"]));
    assert!(status.success(), "every layer a transformer, as saved: {stderr}");
}

#[test]
fn async_saves_finalize_and_point_the_tracker_at_the_last_one() {
    let dir = temp_dir("async");
    let s = summary(
        &dir,
        &with(
            SMALL,
            &["--train-iters", "6", "--nproc-per-node", "2", "--save", "ckpt", "--save-interval", "2", "--async-save"],
        ),
    );
    let saved: Vec<u64> =
        s["checkpoints"].as_array().unwrap().iter().map(|c| c["iteration"].as_u64().unwrap()).collect();
    assert_eq!(saved, vec![2, 4, 6]);
    assert_eq!(std::fs::read_to_string(dir.join("ckpt/latest_checkpointed_iteration.txt")).unwrap().trim(), "6");
}

#[test]
fn inconsistent_arguments_exit_2_naming_the_flags_before_anything_starts() {
    let dir = temp_dir("usage");
    let (status, stderr) = run(
        &dir,
        &[
            "--nproc-per-node",
            "4",
            "--pipeline-model-parallel-size",
            "2",
            "--global-batch-size",
            "6",
            "--num-layers",
            "3",
        ],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--global-batch-size (6)"), "{stderr}");
    assert!(stderr.contains("--num-layers (3) is not divisible by --pipeline-model-parallel-size (2)"), "{stderr}");
    assert!(!stderr.contains("launching"), "ranks were started: {stderr}");
    let (status, stderr) = run(&dir, &["--device", "cuda"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--device cuda"), "{stderr}");
}

/// With `otel`, bad telemetry input with telemetry enabled stops the run
/// before it starts (exit 2); built without it, nothing is recorded, so the
/// same input is a warning and the run goes on (SPEC A22).
#[test]
fn bad_telemetry_configuration_exits_2_naming_the_variable_or_warns_when_compiled_out() {
    let dir = temp_dir("badenv");
    let mut child = ChildGuard::spawn(
        command(&dir, &["--otel-enabled", "--train-iters", "2"])
            .env("MEGATRON_OTEL_SPAN_GROUPS", "stepz")
            .env("MEGATRON_OTEL_EXPORTER", "otlpp"),
    );
    let status = wait_bounded(&mut child, Duration::from_secs(60));
    let stderr = stderr_of(&mut child);
    assert!(stderr.contains("MEGATRON_OTEL_SPAN_GROUPS"), "{stderr}");
    assert!(stderr.contains("MEGATRON_OTEL_EXPORTER"), "{stderr}");
    if cfg!(feature = "otel") {
        assert_eq!(status.code(), Some(2), "{stderr}");
    } else {
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("warning") && stderr.contains("built without the `otel` feature"), "{stderr}");
    }
}

#[test]
fn a_bad_telemetry_value_with_telemetry_off_is_a_warning_and_training_runs() {
    let dir = temp_dir("badenv-off");
    let mut child = ChildGuard::spawn(command(&dir, &["--train-iters", "2"]).env("MEGATRON_OTEL_SPAN_GROUPS", "stepz"));
    let status = wait_bounded(&mut child, Duration::from_secs(60));
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("warning") && stderr.contains("MEGATRON_OTEL_SPAN_GROUPS"), "{stderr}");
    // Read twice by the rank (its own check, then setup), printed once.
    assert_eq!(stderr.matches("telemetry is not enabled").count(), 1, "{stderr}");
}

#[test]
fn a_nan_loss_skips_its_iteration_and_training_goes_on() {
    let s = summary(
        &temp_dir("nan"),
        &with(SMALL, &["--train-iters", "10", "--log-interval", "5", "--inject-nan-at", "3"]),
    );
    assert_eq!(s["skipped_iterations"], 1);
    let all = losses(&s);
    assert_eq!(all[2], None);
    assert!(all.iter().enumerate().all(|(i, l)| i == 2 || l.is_some_and(f64::is_finite)), "{all:?}");
}

/// A skipped iteration does not advance the learning-rate schedule:
/// Megatron steps its scheduler only on a successful update. The warm-up
/// adds 2e-3 an iteration, so the fifth iteration's rate is 1e-2, or 8e-3
/// when an earlier one was skipped. (The same runs check the closing line
/// of a run without telemetry, in both builds.)
#[test]
fn a_skipped_iteration_does_not_advance_the_learning_rate() {
    let last_rate = |name: &str, extra: &[&'static str]| {
        let mut args = with(SMALL, &["--train-iters", "5", "--log-interval", "1"]);
        args.extend(extra);
        let (status, stderr) = run(&temp_dir(name), &args);
        assert!(status.success(), "{status}: {stderr}");
        // Telemetry is off, and the closing line says why, in either build.
        let off = if cfg!(feature = "otel") {
            "telemetry: off (enable it with --otel-enabled or MEGATRON_OTEL_ENABLED=1)"
        } else {
            "telemetry: off (this build has no `otel` feature: build with it to record telemetry)"
        };
        assert_eq!(stderr.lines().last(), Some(off), "{stderr}");
        let line = stderr.lines().find(|l| l.starts_with("iter 5/5 ")).unwrap_or_else(|| panic!("{stderr}"));
        line.split(" | ").find_map(|part| part.strip_prefix("lr ")).unwrap_or_else(|| panic!("{line}")).to_string()
    };
    assert_eq!(last_rate("lr-all", &[]), "1.000e-2");
    assert_eq!(last_rate("lr-skip", &["--inject-nan-at", "3"]), "8.000e-3");
}

/// A long run of `ranks` ranks (until a signal or a failure ends it).
fn long_run(dir: &Path, ranks: &'static str, extra: &[&'static str]) -> (ChildGuard, Vec<i32>) {
    let pids = dir.join("pids");
    let mut args = with(SMALL, &["--train-iters", "1000000", "--step-sleep-ms", "5", "--nproc-per-node", ranks]);
    args.extend(extra);
    let pids_str = pids.to_str().unwrap().to_string();
    let mut all: Vec<&str> = args.clone();
    all.extend(["--rank-pids-file", &pids_str]);
    let child = ChildGuard::spawn(&mut command(dir, &all));
    let ranks: usize = ranks.parse().unwrap();
    let pids = read_pids(&pids, ranks);
    wait_in_loop(dir, ranks);
    (child, pids)
}

/// Waits (at most 60 s) until each of `ranks` ranks of the run in `dir` has
/// completed two iterations, as their fault-tolerance heartbeats say (in
/// `TMPDIR`, which is `dir`, or in `ft_heartbeat` beside the checkpoints of
/// a `--save` under `dir`): the ranks are past rendezvous and in the loop,
/// however loaded the machine.
fn wait_in_loop(dir: &Path, ranks: usize) {
    let iterations = || -> Vec<u64> {
        let dirs = std::fs::read_dir(dir).into_iter().flatten().filter_map(Result::ok).map(|e| {
            let temporary = e.file_name().to_string_lossy().starts_with("megatron-train-sim-heartbeat-");
            if temporary { e.path() } else { e.path().join("ft_heartbeat") }
        });
        dirs.flat_map(|d| std::fs::read_dir(d).into_iter().flatten().filter_map(Result::ok))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter_map(|text| serde_json::from_str::<Value>(text.trim()).ok()?["iteration"].as_u64())
            .collect()
    };
    let started = Instant::now();
    loop {
        let done = iterations();
        if done.len() == ranks && done.iter().all(|i| *i >= 2) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the ranks are not in the loop after 60 s: {done:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn killing_one_rank_makes_the_others_fail_promptly_with_a_clear_error() {
    let dir = temp_dir("kill");
    let (mut child, pids) = long_run(&dir, "4", &["--pipeline-model-parallel-size", "2"]);
    let killed_at = Instant::now();
    kill(pids[1], libc::SIGKILL);
    let status = wait_bounded(&mut child, Duration::from_secs(30));
    let elapsed = killed_at.elapsed();
    let stderr = stderr_of(&mut child);
    assert!(!status.success(), "{stderr}");
    assert!(matches!(status.code(), Some(1 | 137)), "{status}: {stderr}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}: {stderr}");
    assert!(stderr.contains("lost the connection to rank 1"), "{stderr}");
}

#[test]
fn sigterm_ends_the_run_with_143_and_with_exit_signal_handler_drains_to_0() {
    let dir = temp_dir("term");
    let (mut child, _) = long_run(&dir, "2", &[]);
    kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM);
    let status = wait_bounded(&mut child, Duration::from_secs(30));
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(143), "{stderr}");

    let dir = temp_dir("drain");
    let summary_path = dir.join("summary.json");
    let (mut child, _) =
        long_run(&dir, "2", &["--exit-signal-handler", "--save", "ckpt", "--summary-json", "summary.json"]);
    kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM);
    let status = wait_bounded(&mut child, Duration::from_secs(30));
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(summary_path).unwrap()).unwrap();
    assert_eq!(s["exit_reason"], "signal");
    let last = s["final_iteration"].as_u64().unwrap();
    assert!(last > 0);
    assert_eq!(
        std::fs::read_to_string(dir.join("ckpt/latest_checkpointed_iteration.txt")).unwrap().trim(),
        last.to_string()
    );
}

#[cfg(feature = "otel")]
#[test]
fn without_an_exporter_the_ranks_write_files_under_one_run_id_with_linked_pipeline_spans() {
    let dir = temp_dir("files");
    let mut child = ChildGuard::spawn(
        command(
            &dir,
            &with(
                SMALL,
                &[
                    "--otel-enabled",
                    "--otel-span-groups",
                    "all",
                    "--train-iters",
                    "3",
                    "--nproc-per-node",
                    "2",
                    "--pipeline-model-parallel-size",
                    "2",
                    "--summary-json",
                    "summary.json",
                ],
            ),
        )
        .env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks"),
    );
    let status = wait_bounded(&mut child, Duration::from_secs(60));
    let stderr = stderr_of(&mut child);
    assert!(status.success(), "{stderr}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let run_id = s["run_id"].as_str().unwrap();
    assert!(stderr.contains(&format!("telemetry/{run_id}")), "{stderr}");
    let files = dir.join("telemetry").join(run_id);
    let rank0 = std::fs::read_to_string(files.join("traces-rank0.jsonl")).unwrap();
    let rank1 = std::fs::read_to_string(files.join("traces-rank1.jsonl")).unwrap();
    assert!(rank0.contains("megatron.p2p.send_forward") && rank0.contains("megatron.pp.recv_backward.linked"));
    assert!(rank1.contains("megatron.pp.recv_forward.linked") && rank1.contains("megatron.train.iteration"));
    assert!(files.join("metrics-rank1.jsonl").is_file());
    assert!(s["telemetry"]["spans_exported"].as_u64().unwrap() > 0);
}
