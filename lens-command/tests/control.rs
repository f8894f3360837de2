//! `lens control` as a user runs it: a bad group gets launch's "did you
//! mean" error with exit 2 and the file left as it was; without
//! `--from-iteration` the start comes from the job's status file (refused
//! when it has no last iteration, or when the job stopped updating it),
//! for `--reset` too; a window already past is refused, and so is one that
//! would end past the last iteration there is; each write has the
//! generation after the highest the file or the job has seen, also when two
//! calls race (the lock), and none after `u64::MAX`; `--show` gives the
//! job's verdict; a file the job would refuse (in a directory other users
//! can write) is not written.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lens_fallbacks::control::{CatalogData, ControlStatus};
use lens_fallbacks::groups::LENS_CATALOG;

#[expect(dead_code, reason = "this test uses only the support module's temporary directories")]
mod support;
use support::temp_dir;

const LENS: &str = env!("CARGO_BIN_EXE_lens");

fn control(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(LENS).current_dir(dir).arg("control").args(args).stdin(Stdio::null()).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn private_dir(name: &str) -> support::TempDir {
    let dir = temp_dir(name);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// A status as the job writes it: polls of 2 s, 0.5 s per iteration,
/// updated every 5 s, launched without per-rank metrics.
fn status(last_iteration: Option<u64>) -> ControlStatus {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    ControlStatus {
        catalog: CatalogData::of(&LENS_CATALOG),
        launch_groups: vec!["job".into(), "checkpoint".into(), "evaluate".into()],
        prefix: "MYJOB_OTEL".into(),
        poll_s: 2.0,
        last_iteration,
        iteration_time_s: Some(0.5),
        generation: 0,
        highest_generation: 0,
        launch_rank_metrics: Some(false),
        update_period_s: Some(5.0),
        written_unix_s: now,
        accepted: None,
        ended: false,
    }
}

fn put_status(dir: &Path, status: &ControlStatus) {
    std::fs::write(dir.join("control.json.status"), status.to_json()).unwrap();
}

fn write_status(dir: &Path, last_iteration: Option<u64>) {
    put_status(dir, &status(last_iteration));
}

fn read(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("control.json")).unwrap()
}

fn generation(dir: &Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("control.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["generation"].as_u64().unwrap()
}

#[test]
fn a_bad_group_is_exit_2_with_did_you_mean_and_the_file_is_left_as_it_was() {
    let dir = private_dir("control-bad");
    let (code, _, _) = control(&dir, &["control.json", "--span-groups", "per_step", "--from-iteration", "10"]);
    assert_eq!(code, 0);
    let before = std::fs::read_to_string(dir.join("control.json")).unwrap();
    // Against the default catalog (`lens`): Megatron's groups are unknown there.
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "per_stpe", "--from-iteration", "10"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("Unknown span group or preset: 'per_stpe'") && stderr.contains("did you mean 'per_step'"));
    assert!(stderr.contains("left as it was"), "{stderr}");
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "microbatch", "--from-iteration", "1"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = control(
        &dir,
        &["control.json", "--span-groups", "microbatch", "--from-iteration", "1", "--catalog", "megatron"],
    );
    assert_eq!(code, 0, "Megatron's catalog knows microbatch: {stderr}");
    // Without the job's status the launch groups are unknown: leaving out
    // `job` is written with a warning that the job may refuse it; keeping
    // it is written without one.
    assert!(
        stderr.contains("leaves out the 'job' group") && stderr.contains("the job will refuse this version"),
        "{stderr}"
    );
    let (code, _, stderr) = control(
        &dir,
        &["control.json", "--span-groups", "job,microbatch", "--from-iteration", "1", "--catalog", "megatron"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("'job' group"), "{stderr}");
    let after_megatron = std::fs::read_to_string(dir.join("control.json")).unwrap();
    assert_ne!(after_megatron, before);
    for bad in [
        &["control.json", "--sampling-ratio", "1.5", "--from-iteration", "1"][..],
        &["control.json", "--hang-timeout", "soon", "--from-iteration", "1"],
        // Reads as 0.0 but is no written zero: once written as off.
        &["control.json", "--hang-timeout", "1e-400", "--from-iteration", "10"],
        &["control.json", "--span-groups", "per_step", "--from-iteration", "9", "--until-iteration", "3"],
        &["control.json", "--from-iteration", "9"],
    ] {
        let (code, _, stderr) = control(&dir, bad);
        assert_eq!(code, 2, "{bad:?}: {stderr}");
        assert_eq!(std::fs::read_to_string(dir.join("control.json")).unwrap(), after_megatron, "{bad:?}");
    }
}

#[test]
fn the_start_comes_from_the_status_file_and_is_refused_without_a_last_iteration() {
    let dir = private_dir("control-status");
    // No status file at all, then one without a last iteration: refused.
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "per_step", "--iterations", "5"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot read the job's last iteration") && stderr.contains("--from-iteration"), "{stderr}");
    write_status(&dir, None);
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "per_step", "--iterations", "5"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("it has no last iteration yet") && stderr.contains("give --from-iteration"), "{stderr}");
    assert!(!dir.join("control.json").exists(), "nothing written");
    // A last iteration without an iteration time (the job has logged once):
    // where it is now is unknown, so no start is picked.
    put_status(&dir, &ControlStatus { iteration_time_s: None, ..status(Some(49)) });
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "per_step", "--iterations", "5"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("it has no iteration time yet (the job writes one from its second log interval on)")
            && stderr.contains("give --from-iteration"),
        "{stderr}"
    );
    assert!(!dir.join("control.json").exists(), "nothing written");
    // Last iteration 100 at 0.5 s per iteration, polls of 2 s: 8 iterations
    // ahead, plus one for each half second between the status and the call
    // (bounded by the time measured around both).
    let written = Instant::now();
    write_status(&dir, Some(100));
    let (code, stdout, stderr) = control(&dir, &["control.json", "--span-groups", "per_step", "--iterations", "5"]);
    let elapsed_iterations = (written.elapsed().as_secs_f64() / 0.5).ceil() as u64;
    assert_eq!(code, 0, "{stderr}");
    let start: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("from iteration ")?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!((108..=108 + elapsed_iterations).contains(&start), "{stdout} ({elapsed_iterations} iterations elapsed)");
    let text = std::fs::read_to_string(dir.join("control.json")).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["from_iteration"].as_u64(), Some(start));
    assert_eq!(value["until_iteration"].as_u64(), Some(start + 4));
    assert_eq!(value["span_groups"].as_str(), Some("per_step"));
    // The job's `job` group cannot change in flight.
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "step", "--from-iteration", "200"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("'job' group"), "{stderr}");
}

#[test]
fn every_write_has_the_next_generation_even_when_calls_race_and_reset_and_show_work() {
    let dir = private_dir("control-race");
    let children: Vec<_> = (0..6)
        .map(|i| {
            Command::new(LENS)
                .current_dir(&dir)
                .args(["control", "control.json", "--sampling-ratio", "0.5", "--from-iteration"])
                .arg(format!("{}", 10 + i))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(generation(&dir), 6, "six writes, six generations");
    let mode = std::fs::metadata(dir.join("control.json")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "only its owner may write it");
    let (code, stdout, _) = control(&dir, &["control.json", "--reset", "--from-iteration", "40"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("wrote generation 7") && stdout.contains("launch configuration from iteration 40"),
        "{stdout}"
    );
    assert_eq!(read(&dir).trim(), r#"{"from_iteration":40,"generation":7}"#);
    let (code, stdout, _) = control(&dir, &["control.json", "--show"]);
    assert_eq!(code, 0);
    assert!(stdout.contains(r#"{"from_iteration":40,"generation":7}"#) && stdout.contains("no status from the job"));
    assert!(
        stdout.contains(
            "the job accepts it: generation 7 applies from iteration 40 until the next change: the launch configuration"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("refuses"), "a file the job reads: {stdout}");
}

#[test]
fn a_directory_other_users_can_write_is_refused_as_the_job_refuses_it() {
    // Like /tmp (mode 1777): the job would refuse any control file there.
    let dir = temp_dir("control-shared");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let file = dir.join("control.json");
    let file_arg = file.to_str().unwrap();
    let (code, stdout, stderr) = control(&dir, &[file_arg, "--sampling-ratio", "0.5", "--from-iteration", "10"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(!stdout.contains("wrote generation"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "control file {}: refused, other users can write its directory {} (mode 1777)",
            file.display(),
            dir.display()
        )) && stderr.contains("left as it was"),
        "the job's reason: {stderr}"
    );
    let (code, _, stderr) = control(&dir, &[file_arg, "--reset"]);
    assert_eq!(code, 2, "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing written, no lock or probe left behind: {left:?}");
    // A file put there by other means: --show says the job refuses it.
    std::fs::write(&file, r#"{"generation": 3}"#).unwrap();
    let (code, stdout, _) = control(&dir, &[file_arg, "--show"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("the job refuses this file: other users can write its directory")
            && stdout.contains("nothing in it applies"),
        "{stdout}"
    );
    std::fs::remove_file(&file).unwrap();

    // In a private directory an old file that others could write is simply
    // replaced: the job reads the new one, written for its owner only.
    let private = private_dir("control-replace");
    let old = private.join("control.json");
    std::fs::write(&old, r#"{"generation": 7}"#).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, stdout, stderr) =
        control(&private, &["control.json", "--sampling-ratio", "0.5", "--from-iteration", "1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("wrote generation 8"), "{stdout}");
    assert_eq!(std::fs::metadata(&old).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(lens_fallbacks::control::check_file(&old, lens_fallbacks::control::job_uid()).is_ok_and(|m| m.is_some()));
}

#[test]
fn a_reset_starts_where_other_changes_do_and_is_refused_without_a_known_start() {
    let dir = private_dir("control-reset");
    let (code, stdout, stderr) = control(&dir, &["control.json", "--reset"]);
    assert_eq!(code, 2, "{stdout}");
    assert!(stderr.contains("cannot read the job's last iteration") && stderr.contains("--from-iteration"), "{stderr}");
    assert!(!dir.join("control.json").exists(), "nothing written");
    // Last iteration 100, two polls of 2 s at 0.5 s per iteration ahead.
    let written = Instant::now();
    write_status(&dir, Some(100));
    let (code, stdout, stderr) = control(&dir, &["control.json", "--reset"]);
    let elapsed_iterations = (written.elapsed().as_secs_f64() / 0.5).ceil() as u64;
    assert_eq!(code, 0, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&read(&dir)).unwrap();
    let from = value["from_iteration"].as_u64().unwrap();
    assert!((108..=108 + elapsed_iterations).contains(&from), "{value}");
    assert_eq!(value.as_object().unwrap().len(), 2, "a generation and a start only: {value}");
    assert!(stdout.contains(&format!("back to the launch configuration from iteration {from}")), "{stdout}");
}

#[test]
fn a_status_the_job_stopped_updating_is_not_extrapolated() {
    let dir = private_dir("control-stale");
    // Limit: 5 polls of 2 s plus twice the 5 s update period: 20 s.
    let mut old = status(Some(100));
    old.written_unix_s -= 600.0;
    put_status(&dir, &old);
    let (code, _, stderr) = control(&dir, &["control.json", "--sampling-ratio", "0.5", "--iterations", "5"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("cannot pick the start from the job's status")
            && stderr.contains("it is 600 s old (last iteration 100), older than the 20 s")
            && stderr.contains("give --from-iteration")
            && stderr.contains("left as it was"),
        "{stderr}"
    );
    assert!(!dir.join("control.json").exists(), "nothing written");
    let (code, _, stderr) = control(&dir, &["control.json", "--reset"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = control(&dir, &["control.json", "--sampling-ratio", "0.5", "--from-iteration", "500"]);
    assert_eq!(code, 0, "with --from-iteration: {stderr}");
}

#[test]
fn a_window_that_ended_before_the_job_s_last_iteration_is_refused() {
    let dir = private_dir("control-past");
    write_status(&dir, Some(100));
    let (code, _, _) = control(&dir, &["control.json", "--sampling-ratio", "0.5", "--from-iteration", "200"]);
    assert_eq!(code, 0);
    let before = read(&dir);
    for (args, flag) in [
        (&["--from-iteration", "50", "--until-iteration", "99"][..], "--until-iteration 99"),
        (&["--from-iteration", "50", "--until-iteration", "100"], "--until-iteration 100"),
        (&["--from-iteration", "90", "--iterations", "5"], "--iterations 5 from iteration 90"),
    ] {
        let (code, _, stderr) = control(&dir, &[&["control.json", "--sampling-ratio", "0.25"][..], args].concat());
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag)
                && stderr.contains("at or before the job's last iteration 100")
                && stderr.contains("no rank would apply any of it")
                && stderr.contains("left as it was"),
            "{stderr}"
        );
        assert_eq!(read(&dir), before, "{args:?}");
    }
    // Started in the past but still running: applied late, accepted.
    let (code, _, stderr) = control(
        &dir,
        &["control.json", "--sampling-ratio", "0.25", "--from-iteration", "90", "--until-iteration", "101"],
    );
    assert_eq!(code, 0, "{stderr}");
}

/// `--iterations` from a start so late that the window would end past the
/// last iteration there is (`u64::MAX`): exit 2 naming the flag, the file
/// left as it was (it used to end the window at `u64::MAX` silently).
#[test]
fn a_window_ending_past_the_last_iteration_there_is_is_refused_naming_the_flag() {
    let dir = private_dir("control-past-max");
    let (code, _, stderr) = control(&dir, &["control.json", "--sampling-ratio", "0.5", "--from-iteration", "200"]);
    assert_eq!(code, 0, "{stderr}");
    let before = read(&dir);
    let last = u64::MAX.to_string();
    let late = (u64::MAX - 1).to_string();
    for (from, iterations) in [(&last, "2"), (&late, "3")] {
        let (code, stdout, stderr) = control(
            &dir,
            &["control.json", "--sampling-ratio", "0.25", "--from-iteration", from, "--iterations", iterations],
        );
        assert_eq!(code, 2, "from {from}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!(
                "--iterations {iterations}: the window would end past the last iteration there is ({})",
                u64::MAX
            )) && stderr.contains("left as it was"),
            "from {from}: {stderr}"
        );
        assert_eq!(read(&dir), before, "from {from}");
    }
    // Ending at the last iteration there is: written.
    let (code, _, stderr) =
        control(&dir, &["control.json", "--sampling-ratio", "0.25", "--from-iteration", &late, "--iterations", "2"]);
    assert_eq!(code, 0, "{stderr}");
    let written: serde_json::Value = serde_json::from_str(&read(&dir)).unwrap();
    assert_eq!(written["until_iteration"].as_u64(), Some(u64::MAX), "{written}");
}

#[test]
fn the_next_generation_follows_the_highest_seen_and_never_wraps() {
    let dir = private_dir("control-generation");
    // The job accepted generation 9 (its window not started yet: 8 in
    // force), and the file now holds an older version: the next is 10.
    std::fs::write(dir.join("control.json"), r#"{"generation": 3, "from_iteration": 1}"#).unwrap();
    std::fs::set_permissions(dir.join("control.json"), std::fs::Permissions::from_mode(0o600)).unwrap();
    put_status(&dir, &ControlStatus { generation: 8, highest_generation: 9, ..status(Some(100)) });
    let (code, stdout, stderr) = control(&dir, &["control.json", "--sampling-ratio", "0.5", "--from-iteration", "200"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("wrote generation 10"), "{stdout}");
    // The highest generation there is (the most an OTLP integer holds):
    // refused, the file left as it was.
    let max = format!(r#"{{"generation": {}, "from_iteration": 1}}"#, i64::MAX);
    std::fs::write(dir.join("control.json"), &max).unwrap();
    for args in [&["--sampling-ratio", "0.5", "--from-iteration", "200"][..], &["--reset", "--from-iteration", "200"]] {
        let (code, stdout, stderr) = control(&dir, &[&["control.json"][..], args].concat());
        assert_eq!(code, 2, "{stdout}{stderr}");
        assert!(
            stderr.contains(&format!("generation {} (the file holds) is the highest there is", i64::MAX))
                && stderr.contains("left as it was"),
            "{stderr}"
        );
        assert_eq!(read(&dir), max);
    }
}

#[test]
fn what_the_job_refuses_is_refused_before_it_is_written() {
    let dir = private_dir("control-job-parser");
    // The job was launched without per-rank metrics: they cannot be turned on.
    write_status(&dir, Some(100));
    let (code, _, stderr) = control(&dir, &["control.json", "--rank-metrics", "on", "--from-iteration", "200"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the job would refuse it: key 'rank_metrics' = true")
            && stderr.contains("needs a launch with MYJOB_OTEL_RANK_METRICS=1"),
        "{stderr}"
    );
    assert!(!dir.join("control.json").exists(), "nothing written");
    // Refused with the start picked from the status: no start is said.
    let (code, stdout, stderr) = control(&dir, &["control.json", "--rank-metrics", "on", "--iterations", "10"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stdout, "", "a refused version says no start");
    // A negative number reaches lens's own check, not the argument parser's.
    for (flag, expected) in [("--hang-timeout", "expected auto, 0 (off)"), ("--sampling-ratio", "[0.0, 1.0]")] {
        let (code, _, stderr) = control(&dir, &["control.json", flag, "-3", "--from-iteration", "200"]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(&format!("{flag} ")) && stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn replacing_a_version_the_job_has_not_started_warns_that_it_will_never_apply() {
    let dir = private_dir("control-replace");
    write_status(&dir, Some(100));
    let (code, stdout, stderr) = control(
        &dir,
        &["control.json", "--sampling-ratio", "0.1", "--from-iteration", "179", "--until-iteration", "238"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("wrote generation 1"), "{stdout}");
    assert_eq!(stderr, "", "nothing was pending");
    let (code, stdout, stderr) = control(&dir, &["control.json", "--hang-timeout", "900", "--from-iteration", "2500"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("wrote generation 2"), "{stdout}");
    assert!(
        stderr.contains(
            "warning: this replaces generation 1 (sampling_ratio=0.1 from iteration 179), which the job has not \
             started (its last iteration 100, "
        ) && stderr.contains("it will never apply"),
        "{stderr}"
    );
    // A version whose start the job has reached by now (its status lags
    // it: 0.5 s per iteration, written 10 s ago, within the 20 s a running
    // job updates it, so about iteration 120) may have applied: replacing
    // it warns of nothing.
    put_status(&dir, &ControlStatus { written_unix_s: status(None).written_unix_s - 10.0, ..status(Some(100)) });
    std::fs::write(dir.join("control.json"), r#"{"generation": 3, "sampling_ratio": 0.1, "from_iteration": 110}"#)
        .unwrap();
    let (code, _, stderr) = control(&dir, &["control.json", "--hang-timeout", "900", "--from-iteration", "2500"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("never apply"), "{stderr}");
    // Once the job has it in force, the next version replaces nothing pending.
    put_status(&dir, &ControlStatus { generation: 2, highest_generation: 2, ..status(Some(2600)) });
    let (code, _, stderr) = control(&dir, &["control.json", "--reset"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "", "generation 2 is in force");
}

#[test]
fn show_gives_the_job_s_verdict_on_what_the_file_holds() {
    let dir = private_dir("control-show");
    let file = dir.join("control.json");
    let put = |text: &str| {
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    let show = |extra: &[&str]| {
        let (code, stdout, stderr) = control(&dir, &[&["control.json", "--show"][..], extra].concat());
        assert_eq!(code, 0, "{stderr}");
        stdout
    };
    // Without a status: against --catalog.
    put(r#"{"generation": 2, "span_groups": "microbatch", "from_iteration": 10, "iterations": 5}"#);
    let stdout = show(&[]);
    assert!(
        stdout.contains("the job refuses this version (key 'span_groups' = \"microbatch\": Unknown span group"),
        "{stdout}"
    );
    assert!(stdout.contains("checked against the lens catalog"), "{stdout}");
    let stdout = show(&["--catalog", "megatron"]);
    assert!(
        stdout.contains("the job accepts it: generation 2 applies from iteration 10 to 14: span_groups=microbatch"),
        "{stdout}"
    );
    // No from_iteration: each rank would apply it whenever it read it.
    put(r#"{"generation": 2, "sampling_ratio": 0.5}"#);
    assert!(show(&[]).contains("the job refuses this version (key 'from_iteration' = (missing)"));
    // Against the job's status: its highest generation, its last iteration.
    put_status(&dir, &ControlStatus { generation: 4, highest_generation: 4, ..status(Some(100)) });
    put(r#"{"generation": 3, "sampling_ratio": 0.5, "from_iteration": 200}"#);
    let stdout = show(&[]);
    assert!(stdout.contains("lower than generation 4, the highest this job accepted"), "{stdout}");
    assert!(
        stdout.contains("job (rank 0): last iteration 100, generation 4 in force (highest accepted 4)"),
        "{stdout}"
    );
    put(r#"{"generation": 5, "sampling_ratio": 0.5, "from_iteration": 20, "until_iteration": 60}"#);
    assert!(show(&[]).contains(
        "its window (from iteration 20 to 60) ended at or before the job's last iteration 100, before the job read \
         it: none of its settings apply"
    ));
    // The same window, read and applied by the job: over, not "never applied".
    put_status(&dir, &ControlStatus { generation: 5, highest_generation: 5, ..status(Some(100)) });
    let stdout = show(&[]);
    assert!(
        stdout.contains(
            "generation 5's window (from iteration 20 to 60) is over at the job's last iteration 100: the job is back \
             on the launch configuration"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("stale"), "{stdout}");
    // A job that stopped updating its status is said to have.
    put_status(&dir, &ControlStatus { written_unix_s: status(None).written_unix_s - 600.0, ..status(Some(100)) });
    let stdout = show(&[]);
    assert!(
        stdout.contains("  the job's status is stale: it is 600 s old (last iteration 100)")
            && stdout.contains("the job may have stopped or hung"),
        "{stdout}"
    );
    put_status(&dir, &ControlStatus { generation: 4, highest_generation: 4, ..status(Some(100)) });
    put(r#"{"generation": 5, "rank_metrics": true, "from_iteration": 200}"#);
    assert!(show(&[]).contains("needs a launch with MYJOB_OTEL_RANK_METRICS=1"));
    put(r#"{"generation": 5, "sampling_ratio": 0.5, "from_iteration": 200}"#);
    // A symbolic link is refused as the job refuses it, for being a link.
    let target = dir.join("real.json");
    std::fs::rename(&file, &target).unwrap();
    std::os::unix::fs::symlink(&target, &file).unwrap();
    let stdout = show(&[]);
    assert!(
        stdout.contains(
            "the job refuses this file: it is a symbolic link; give the file itself, not a symbolic link to it; \
             nothing in it applies"
        ),
        "{stdout}"
    );
    std::fs::remove_file(&file).unwrap();
    std::fs::rename(&target, &file).unwrap();
    assert!(show(&[]).contains(
        "the job accepts it: generation 5 applies from iteration 200 until the next change: sampling_ratio=0.5"
    ));
    // Too long: what was found and what is accepted.
    let long = format!("{{\"generation\": 5, \"from_iteration\": 200, \"pad\": \"{}\"}}", "x".repeat(70_000));
    put(&long);
    let stdout = show(&[]);
    assert!(
        stdout.contains(&format!(
            "the job refuses this file: it is {} bytes long, more than the 65536 bytes (64 KiB) read; a control file \
             is one JSON object of at most 64 KiB (65536 bytes); nothing in it applies",
            long.len()
        )),
        "{stdout}"
    );
}

#[test]
fn show_never_waits_on_a_fifo() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = private_dir("control-fifo");
    let fifo = dir.join("control.json");
    let name = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let mut child = Command::new(LENS)
        .current_dir(&dir)
        .args(["control", "control.json", "--show"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("lens control --show waited on a FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "the job refuses this file: it is a FIFO (named pipe), not a regular file; a control file is a regular \
         file holding one JSON object; nothing in it applies"
        ),
        "{stdout}"
    );
}

#[test]
fn a_job_that_ended_reads_no_change_and_the_command_says_so() {
    let dir = private_dir("control-ended");
    put_status(&dir, &ControlStatus { ended: true, ..status(Some(1499)) });
    // No start to pick: the job is not running.
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "job,step", "--iterations", "10"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the job that wrote ")
            && stderr.contains("control.json.status ended (at iteration 1499): no running job reads this file")
            && stderr.contains("give --from-iteration for the next job started with it"),
        "{stderr}"
    );
    assert!(!dir.join("control.json").exists(), "nothing written");
    // With a start: written for the next job, with a warning.
    let (code, stdout, stderr) =
        control(&dir, &["control.json", "--span-groups", "job,step", "--from-iteration", "20"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("wrote generation 1"), "{stdout}");
    assert!(stderr.contains("this version applies to the next job started with this control file"), "{stderr}");
    let (_, stdout, _) = control(&dir, &["control.json", "--show"]);
    assert!(
        stdout.contains(
            "the job ended (at iteration 1499): nothing in it applies unless a job starts with this control file"
        ) && stdout.contains("job (rank 0): ended, at iteration 1499,"),
        "{stdout}"
    );
    assert!(!stdout.contains("stale"), "{stdout}");
}

/// `--show` once printed a refused file as written, and the refusal with
/// it: the headers' token on the screen of whoever ran it.
#[test]
fn show_never_prints_a_credential_of_the_file() {
    let dir = private_dir("control-show-secret");
    let file = dir.join("control.json");
    for (text, shown, refusal) in [
        (
            r#"{"generation":9,"from_iteration":1000,"headers":"authorization=Bearer SECRET123"}"#,
            r#"{"from_iteration": 1000, "generation": 9, "headers": "authorization=[REDACTED]"}"#,
            r#"key 'headers' = "authorization=[REDACTED]": can never be changed while the job runs"#,
        ),
        (
            r#"{"generation":9,"endpoint":"http://u:SECRET123@h:1"}"#,
            r#"{"endpoint": "http://[REDACTED]@h:1", "generation": 9}"#,
            r#"key 'endpoint' = "http://[REDACTED]@h:1": can never be changed while the job runs"#,
        ),
        (
            "authorization=Bearer SECRET123",
            "(30 bytes, not JSON, not shown)",
            "key '(file)' = (30 bytes, not shown): not JSON: expected value at line 1 column 1",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (code, stdout, stderr) = control(&dir, &["control.json", "--show"]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains(&format!("control.json:\n  {shown}\n")), "{stdout}");
        assert!(stdout.contains(&format!("the job refuses this version ({refusal}")), "{stdout}");
        assert!(!stdout.contains("SECRET123") && !stderr.contains("SECRET123"), "{stdout}{stderr}");
    }
}

#[test]
fn show_refuses_a_version_that_reuses_the_accepted_generation_with_another_content() {
    let dir = private_dir("control-accepted");
    let file = dir.join("control.json");
    let accepted = r#"{"generation":8,"span_groups":"job,step","from_iteration":120}"#;
    put_status(
        &dir,
        &ControlStatus {
            generation: 8,
            highest_generation: 8,
            accepted: Some(accepted.to_string()),
            ..status(Some(100))
        },
    );
    std::fs::write(&file, r#"{"generation": 8, "span_groups": "per_step", "from_iteration": 99999}"#).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (_, stdout, _) = control(&dir, &["control.json", "--show"]);
    assert!(
        stdout.contains(
            "the job refuses this version (key 'generation' = 8: the generation this job already accepted, with a \
             different content"
        ),
        "{stdout}"
    );
    // The accepted version itself, as written by hand: the job has it.
    std::fs::write(&file, r#"{"generation": 8, "from_iteration": 120, "span_groups": "job,step"}"#).unwrap();
    let (_, stdout, _) = control(&dir, &["control.json", "--show"]);
    assert!(stdout.contains("the job accepts it: generation 8 applies from iteration 120"), "{stdout}");
}

#[test]
fn a_path_no_job_reads_is_named() {
    let dir = private_dir("control-path");
    // A directory that does not exist: bad input, the directory named.
    let (code, _, stderr) =
        control(&dir, &["nope/control.json", "--span-groups", "job,step", "--from-iteration", "100"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "control file nope/control.json: its directory nope does not exist; give the path the job's \
             <PREFIX>_CONTROL_FILE names; nope/control.json left as it was"
        ),
        "{stderr}"
    );
    // A directory with no job's status beside the file: written, with a
    // warning that no job reads it yet.
    let (code, _, stderr) = control(&dir, &["contrl.json", "--span-groups", "job,step", "--from-iteration", "100"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("no status from a job at contrl.json.status: no job that reads this control file has started"),
        "{stderr}"
    );
    // A start behind where the job is now: written, with a warning.
    write_status(&dir, Some(100));
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "job,step", "--from-iteration", "101"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("--from-iteration 101: the job is at about iteration 10")
            && stderr.contains("applies it late")
            && stderr.contains("without --from-iteration lens control picks 10"),
        "{stderr}"
    );
    std::fs::remove_file(dir.join("control.json")).unwrap();
    let (code, _, stderr) = control(&dir, &["control.json", "--span-groups", "job,step", "--from-iteration", "300"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "", "a start ahead of the job");
}
