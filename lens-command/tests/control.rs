//! `lens control` as a user runs it: a bad group gets launch's "did you
//! mean" error with exit 2 and the file left as it was; without
//! `--from-iteration` the start comes from the job's status file (refused
//! when it has no last iteration); each write has the next generation,
//! also when two calls race (the lock); `--reset` and `--show`; a file the
//! job would refuse (in a directory other users can write) is not written.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
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

fn private_dir(name: &str) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn write_status(dir: &Path, last_iteration: Option<u64>) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let status = ControlStatus {
        catalog: CatalogData::of(&LENS_CATALOG),
        launch_groups: vec!["job".into(), "checkpoint".into(), "evaluate".into()],
        prefix: "MYJOB_OTEL".into(),
        poll_s: 2.0,
        last_iteration,
        iteration_time_s: Some(0.5),
        generation: 0,
        written_unix_s: now,
    };
    std::fs::write(dir.join("control.json.status"), status.to_json()).unwrap();
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
    let after_megatron = std::fs::read_to_string(dir.join("control.json")).unwrap();
    assert_ne!(after_megatron, before);
    for bad in [
        &["control.json", "--sampling-ratio", "1.5", "--from-iteration", "1"][..],
        &["control.json", "--hang-timeout", "soon", "--from-iteration", "1"],
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
    let (code, _, _) = control(&dir, &["control.json", "--span-groups", "per_step", "--iterations", "5"]);
    assert_eq!(code, 2);
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
    let (code, stdout, _) = control(&dir, &["control.json", "--reset"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("wrote generation 7") && stdout.contains("launch configuration"), "{stdout}");
    let text = std::fs::read_to_string(dir.join("control.json")).unwrap();
    assert_eq!(text.trim(), r#"{"generation":7}"#);
    let (code, stdout, _) = control(&dir, &["control.json", "--show"]);
    assert_eq!(code, 0);
    assert!(stdout.contains(r#"{"generation":7}"#) && stdout.contains("no status from the job"), "{stdout}");
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
        stdout.contains("the job refuses this file (other users can write its directory")
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
