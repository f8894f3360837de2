//! The control file (`MEGATRON_OTEL_CONTROL_FILE`, docs/control.md) as a
//! user of the simulator sees it in the `file` export:
//!
//! - a window of `per_step` groups on 4 ranks exports exactly its
//!   iterations' `megatron.train.iteration` spans with their children, on
//!   every rank, a rank that takes the file late (the test hook
//!   `--inject-control-delay`) included: it says how late and ends with the
//!   others; `dl.control.generation` reaches every rank;
//! - `lens control` (the simulator's alias) against a live run picks a start
//!   from the job's status file; a damaged file, an unknown key, a
//!   world-writable file, a lower generation, a generation reused with a
//!   different content and a version without `from_iteration` change
//!   nothing and warn; a window that ended before it was read warns and
//!   moves only the generation;
//! - a sampling-ratio window moves the kept fraction of iterations, and a
//!   resumed attempt re-applies a window still ahead of it.
//!
//! Each run is small (one layer, tiny sizes) and the job never stops.
#![cfg(feature = "otel")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lens_fallbacks::control::ControlStatus;
use megatron_telemetry::taxonomy::{self, attr};
use support::{
    BIN, ChildGuard, SMALL, Span, command, read_metrics, read_traces, run_command, temp_dir, wait_bounded, with,
};

const LIMIT: Duration = Duration::from_secs(180);

/// A directory only this user can write (the control file's must be).
fn private_dir(name: &str) -> support::TempDir {
    let dir = temp_dir(name);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// Writes the control file with `mode`, replacing it (a rename, as an editor
/// or `lens control` does, so that a poll sees one version or the other).
fn write_control(path: &Path, text: &str, mode: u32) {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

fn spans_by_rank(dir: &Path) -> BTreeMap<u32, Vec<Span>> {
    read_traces(dir).into_iter().map(|rank| (rank.rank, rank.spans)).collect()
}

/// The iterations whose `megatron.train.iteration` span `spans` hold.
fn iterations(spans: &[Span]) -> BTreeSet<u64> {
    spans
        .iter()
        .filter(|s| s.name == taxonomy::TRAIN_ITERATION.name)
        .map(|s| s.attributes[attr::ITERATION].as_u64().unwrap())
        .collect()
}

fn file_dir_env(command: &mut Command, dir: &Path, control: &Path, poll: &str) {
    command
        .env("MEGATRON_OTEL_EXPORTER", "file")
        .env("MEGATRON_OTEL_FILE_DIR", dir.join("out"))
        .env("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks")
        .env("MEGATRON_OTEL_CONTROL_FILE", control)
        .env("MEGATRON_OTEL_CONTROL_POLL_S", poll);
}

#[test]
fn a_window_changes_every_rank_at_the_same_iteration_and_a_late_rank_ends_with_the_others() {
    // K = 6, 10 iterations: 6..=15. Rank 2 takes the file only at iteration 9.
    const K: u64 = 6;
    let dir = private_dir("control-window");
    let control = dir.join("control.json");
    write_control(
        &control,
        &format!(r#"{{"generation": 5, "span_groups": "per_step", "from_iteration": {K}, "iterations": 10}}"#),
        0o600,
    );
    let args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--num-layers",
            "1",
            "--train-iters",
            "24",
            "--nproc-per-node",
            "4",
            "--log-interval",
            "4",
            "--inject-control-delay",
            "2:9",
        ],
    );
    let mut command = command(&dir, &args);
    file_dir_env(&mut command, &dir, &control, "0.05");
    let (status, stderr) = run_command(command, LIMIT);
    assert!(status.success(), "the job never stops: {stderr}");

    let by_rank = spans_by_rank(&dir.join("out"));
    assert_eq!(by_rank.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3], "all_ranks: every rank exports");
    for (rank, spans) in &by_rank {
        let first = if *rank == 2 { 9 } else { K };
        assert_eq!(iterations(spans), (first..=K + 9).collect(), "rank {rank}: exactly the window's iterations");
        // Their children, under them, and nothing of the step groups outside.
        let ids: BTreeSet<&str> =
            spans.iter().filter(|s| s.name == taxonomy::TRAIN_ITERATION.name).map(|s| s.span_id.as_str()).collect();
        for child in [&taxonomy::TRAIN_ITERATION_FORWARD_BACKWARD, &taxonomy::TRAIN_ITERATION_OPTIMIZER] {
            let children: Vec<&Span> = spans.iter().filter(|s| s.name == child.name).collect();
            assert_eq!(children.len(), ids.len(), "rank {rank}: one {} per iteration", child.name);
            assert!(
                children.iter().all(|s| s.parent.as_deref().is_some_and(|p| ids.contains(p))),
                "rank {rank}: {} under the window's iteration spans",
                child.name
            );
        }
        // The interval's span carries the change events.
        assert_eq!(spans.iter().filter(|s| s.name == taxonomy::TRAIN.name).count(), 1, "rank {rank}: one interval");
    }
    let rank2 = std::fs::read_to_string(dir.join("out/traces-rank2.jsonl")).unwrap();
    assert!(rank2.contains("lens.control.change") && rank2.contains("lens.control.late_iterations"), "the event");
    assert!(
        stderr.contains("rank 2 applies generation 5 at iteration 9, 3 iteration(s) late"),
        "the late rank says how late: {stderr}"
    );
    for rank in 0..4 {
        assert!(stderr.contains(&format!("rank {rank} ends the window of generation 5 at iteration 16")), "{stderr}");
    }
    // The generation gauge reaches every rank.
    let generation: BTreeMap<u32, f64> = read_metrics(&dir.join("out"))
        .into_iter()
        .filter(|p| p.name == "dl.control.generation")
        .map(|p| (p.rank, p.value))
        .collect();
    assert_eq!(generation, (0..4).map(|rank| (rank, 5.0)).collect(), "dl.control.generation on every rank");
    // The job wrote its catalog and last iteration beside the file.
    let status = std::fs::read_to_string(dir.join("control.json.status")).unwrap();
    assert!(status.contains("\"name\":\"megatron\"") && status.contains("\"last_iteration\":23"), "{status}");
    assert!(status.contains("\"ended\":true"), "its last status says that it ended: {status}");
}

/// Waits until the status file reports a last iteration, bounded.
fn wait_for_status(control: &Path) {
    let status = PathBuf::from(format!("{}.status", control.display()));
    let started = Instant::now();
    loop {
        // A last iteration and an iteration time: `lens control` picks no
        // start from a status that has only the first.
        if std::fs::read_to_string(&status).is_ok_and(|s| {
            s.contains("\"last_iteration\":")
                && !s.contains("\"last_iteration\":null")
                && s.contains("\"iteration_time_s\":")
                && !s.contains("\"iteration_time_s\":null")
        }) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no status file with a last iteration");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Standard error of a running child, line by line, readable while it runs.
fn shared_stderr(child: &mut std::process::Child) -> (Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    use std::io::BufRead as _;
    let text = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&text);
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let mut text = sink.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
    (text, reader)
}

/// Waits (bounded) until `count` lines of `text` contain `needle`.
fn wait_for_lines(text: &Mutex<String>, needle: &str, count: usize) {
    let started = Instant::now();
    while text.lock().unwrap().lines().filter(|l| l.contains(needle)).count() < count {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no {count} lines with {needle:?}: {}",
            text.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn control_command(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(BIN).current_dir(dir).arg("control").args(args).stdin(Stdio::null()).output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn lens_control_changes_a_live_run_and_bad_files_leave_it_as_it_was() {
    let dir = private_dir("control-live");
    let control = dir.join("control.json");
    let args = with(
        SMALL,
        &[
            "--otel-enabled",
            "--num-layers",
            "1",
            "--train-iters",
            "150",
            "--nproc-per-node",
            "2",
            "--log-interval",
            "2",
            "--step-sleep-ms",
            "40",
        ],
    );
    let mut command = command(&dir, &args);
    file_dir_env(&mut command, &dir, &control, "0.1");
    let mut child = ChildGuard::spawn(&mut command);
    let (live, reader) = shared_stderr(&mut child);

    // Bad versions: each warns on both ranks, none changes the run.
    write_control(&control, r#"{"generation": 1, "span_groups": "#, 0o600);
    wait_for_lines(&live, "not JSON", 2);
    write_control(&control, r#"{"generation": 2, "span_groups": "per_step", "from_iteration": 0, "spam": 1}"#, 0o600);
    wait_for_lines(&live, "key 'spam'", 2);
    write_control(&control, r#"{"generation": 7, "span_groups": "per_step", "from_iteration": 0}"#, 0o666);
    wait_for_lines(&live, "other users can write it", 2);

    // `lens control` against the live run's status file.
    wait_for_status(&control);
    let (ok, _, stderr) = control_command(&dir, &["control.json", "--span-groups", "per_stp", "--iterations", "5"]);
    assert!(!ok && stderr.contains("did you mean 'per_step'"), "a bad group: {stderr}");
    let before = std::fs::read_to_string(&control).unwrap();
    assert!(before.contains("\"generation\": 7"), "the file is left as it was: {before}");
    let (ok, stdout_ok, stderr_ok) =
        control_command(&dir, &["control.json", "--span-groups", "per_step", "--iterations", "5"]);
    assert!(ok, "{stdout_ok}{stderr_ok}");
    let start: u64 = stdout_ok
        .lines()
        .find_map(|l| l.strip_prefix("from iteration ")?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("the start is printed: {stdout_ok}"));
    assert!(stdout_ok.contains("wrote generation 8"), "{stdout_ok}");
    assert_eq!(std::fs::metadata(&control).unwrap().permissions().mode() & 0o777, 0o600, "written for its owner only");
    // Once every rank applies it, a lower generation changes nothing.
    wait_for_lines(&live, "applies generation 8", 2);
    write_control(&control, r#"{"generation": 3, "span_groups": "per_step", "from_iteration": 0}"#, 0o600);
    wait_for_lines(&live, "lower than generation 8", 2);
    // The same generation with a different content, and a version without
    // `from_iteration`: each warns, nothing changes.
    write_control(&control, r#"{"generation": 8, "sampling_ratio": 0.5, "from_iteration": 0}"#, 0o600);
    wait_for_lines(&live, "already accepted, with a different content", 2);
    write_control(&control, r#"{"generation": 9, "sampling_ratio": 0.5}"#, 0o600);
    wait_for_lines(&live, "key 'from_iteration' = (missing)", 2);
    // A window that ended before the ranks read it: warned, only the
    // generation moves (after generation 8's window, so that it stays whole).
    wait_for_lines(&live, "ends the window of generation 8", 2);
    write_control(
        &control,
        r#"{"generation": 9, "sampling_ratio": 0.5, "from_iteration": 0, "until_iteration": 1}"#,
        0o600,
    );
    wait_for_lines(&live, "ended before this rank read it", 2);
    wait_for_lines(&live, "applies generation 9", 2);

    let status = wait_bounded(&mut child, LIMIT);
    reader.join().unwrap();
    let stderr = live.lock().unwrap().clone();
    assert!(status.success(), "the job never stops: {stderr}");
    // Its last status: it ended, with the version it accepted last; no
    // start is picked for a job that is not running.
    let last = std::fs::read_to_string(dir.join("control.json.status")).unwrap();
    let last = ControlStatus::from_json(&last).unwrap_or_else(|| panic!("a status: {last}"));
    assert!(last.ended, "{last:?}");
    assert_eq!(
        last.accepted.as_deref().map(str::trim),
        Some(r#"{"from_iteration":0,"generation":9,"sampling_ratio":0.5,"until_iteration":1}"#)
    );
    let (ok, _, ended) = control_command(&dir, &["control.json", "--sampling-ratio", "0.5", "--iterations", "5"]);
    assert!(!ok && ended.contains("ended (at iteration") && ended.contains("give --from-iteration"), "{ended}");
    for rank in 0..2 {
        let warned = |needle: &str| {
            stderr.lines().filter(|l| l.contains(&format!("rank {rank}:")) && l.contains(needle)).count()
        };
        assert_eq!(warned("not JSON"), 1, "rank {rank}: the damaged file, once: {stderr}");
        assert_eq!(warned("key 'spam'"), 1, "rank {rank}: the unknown key, once: {stderr}");
        assert_eq!(warned("other users can write it"), 1, "rank {rank}: the world-writable file, once: {stderr}");
        assert_eq!(warned("key 'generation' = 3: lower than generation 8"), 1, "rank {rank}: {stderr}");
        assert_eq!(warned("key 'generation' = 8: the generation this job already accepted"), 1, "rank {rank}");
        assert_eq!(warned("key 'from_iteration' = (missing)"), 1, "rank {rank}: {stderr}");
        assert_eq!(
            warned("generation 9's window (iterations 0 to 1) ended before this rank read it"),
            1,
            "rank {rank}"
        );
    }
    // Only the window `lens control` asked for: each rank from `start` (or
    // its next iteration when it read the file late, which it says) to
    // start + 4, the same end on every rank.
    for (rank, spans) in spans_by_rank(&dir.join("out")) {
        let seen = iterations(&spans);
        let first = *seen.first().unwrap_or_else(|| panic!("rank {rank}: the window is exported: {stderr}"));
        assert_eq!(seen, (first..=start + 4).collect(), "rank {rank}: one window ending at {}", start + 4);
        if first > start {
            assert!(stderr.contains(&format!("rank {rank} applies generation 8 at iteration {first}, ")), "{stderr}");
        } else {
            assert_eq!(first, start);
        }
    }
}

#[test]
fn a_sampling_ratio_window_moves_the_kept_fraction_and_a_resume_reapplies_it() {
    // Attempt 1 trains iterations 0..60 and saves; the window (ratio 0.3,
    // iterations 70..=129) is ahead of it. Attempt 2 resumes at 60.
    const RATIO: f64 = 0.3;
    let dir = private_dir("control-ratio");
    let control = dir.join("control.json");
    write_control(
        &control,
        &format!(r#"{{"generation": 1, "sampling_ratio": {RATIO}, "from_iteration": 70, "until_iteration": 129}}"#),
        0o600,
    );
    let attempt = |out: &str, iters: &'static str, load: bool| {
        let mut args = with(
            SMALL,
            &[
                "--otel-enabled",
                "--num-layers",
                "1",
                "--train-iters",
                iters,
                "--log-interval",
                "10",
                "--save",
                "ckpt",
                "--save-interval",
                "60",
            ],
        );
        if load {
            args.extend(["--load", "ckpt"]);
        }
        let mut command = command(&dir, &args);
        file_dir_env(&mut command, &dir, &control, "0.05");
        command
            .env("MEGATRON_OTEL_FILE_DIR", dir.join(out))
            .env("MEGATRON_OTEL_SPAN_GROUPS", "per_step")
            .env("MEGATRON_OTEL_RUN_ID", "control-ratio")
            .env("OTEL_TRACES_SAMPLER", "always_on");
        let (status, stderr) = run_command(command, LIMIT);
        assert!(status.success(), "the job never stops: {stderr}");
        (iterations(&spans_by_rank(&dir.join(out))[&0]), stderr)
    };
    let (first, _) = attempt("out1", "60", false);
    assert_eq!(first, (0..60).collect(), "always_on: every iteration before the window");
    let (second, stderr) = attempt("out2", "130", true);
    assert!(stderr.contains("rank 0 applies generation 1 at iteration 70: sampling_ratio=0.3"), "{stderr}");
    assert!((60..70).all(|i| second.contains(&i)), "before the window every iteration is kept: {second:?}");
    let n = 60.0;
    let kept = second.range(70..130).count() as f64;
    let sigma = (n * RATIO * (1.0 - RATIO)).sqrt();
    assert!(
        (kept - n * RATIO).abs() <= 5.0 * sigma,
        "{kept} of 60 iterations kept at ratio {RATIO} (expected {} ± {:.0})",
        n * RATIO,
        5.0 * sigma
    );
}

#[test]
fn the_simulator_s_control_checks_a_spec_against_megatron_s_catalog_without_a_status() {
    let dir = private_dir("control-alias");
    let (ok, stdout, stderr) =
        control_command(&dir, &["control.json", "--span-groups", "job,layer", "--from-iteration", "10"]);
    assert!(ok && stdout.contains("wrote generation 1"), "{stdout}{stderr}");
    let (ok, _, stderr) = control_command(
        &dir,
        &["other.json", "--span-groups", "job,layer", "--from-iteration", "10", "--catalog", "lens"],
    );
    assert!(!ok && stderr.contains("Unknown span group or preset: 'layer'"), "{stderr}");
}

#[test]
fn a_control_file_in_a_directory_others_can_write_gets_no_status_and_says_so_at_launch() {
    // A sticky shared directory, as /tmp is: another user could plant a
    // link where the status goes, or replace the control file.
    let dir = temp_dir("control-shared");
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let control = shared.join("control.json");
    let mut command = command(&dir, &with(SMALL, &["--otel-enabled", "--num-layers", "1", "--train-iters", "3"]));
    file_dir_env(&mut command, &dir, &control, "0.05");
    let (status, stderr) = run_command(command, LIMIT);
    assert!(status.success(), "telemetry's control never stops a job: {stderr}");
    let warned: Vec<&str> = stderr.lines().filter(|l| l.contains("control: the status file")).collect();
    assert_eq!(warned.len(), 1, "said once: {stderr}");
    assert!(
        warned[0].contains(&format!(
            "{} is not written, and a control file beside it is refused: other users can write its directory {} \
             (mode 1777)",
            shared.join("control.json.status").display(),
            shared.display()
        )),
        "{stderr}"
    );
    assert!(warned[0].contains("chmod 700"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&shared).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing written there: {left:?}");
}
