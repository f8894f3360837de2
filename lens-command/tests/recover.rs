//! `lens recover` after a SIGKILL (issue 22): a child process sets
//! telemetry up with the `file` exporter, opens spans, ends some, and kills
//! itself with SIGKILL (nothing flushed, no handler run). `lens recover`
//! then delivers every span exactly once (counting what the child had
//! exported itself), the open ones truncated with their original ids and
//! start times and the child's resource; a second recover replays nothing.
//! A damaged spool gives the spans that decode, is set aside and counted
//! among the files read, with exit code 1. Bad input gets exit code 2 and a
//! message naming the path.
//!
//! The child is this test binary itself, re-run with `LENS_SPOOL_VICTIM`
//! set (its `victim` test does the work then, and nothing otherwise).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lens_fallbacks::{KeyValue, SpanGroup, managed_span};
use serde_json::Value;

const VICTIM: &str = "LENS_SPOOL_VICTIM";

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

unsafe extern "C" {
    fn kill(pid: i32, signal: i32) -> i32;
}

/// The child: spans open and ended, then SIGKILL. Prints one line per span:
/// `SPAN <name> <span id> <not before> <not after>` (the start time's
/// bracket, in Unix nanoseconds).
#[test]
fn victim() {
    if std::env::var_os(VICTIM).is_none() {
        return;
    }
    let telemetry = lens_fallbacks::Telemetry::from_env("NEMO_LENS").expect("setup");
    assert!(lens_fallbacks::spool::is_active(), "the spool is on by default");
    lens_fallbacks::spool::record_progress(17, Some(16), Some(10));
    let bracket = |name: &str, span: &lens_fallbacks::SpanGuard, before: SystemTime| {
        let id = span.remote_context().span_id_hex().expect("recording");
        let line = format!("SPAN {name} {id} {} {}\n", nanos(before), nanos(SystemTime::now()));
        let _ = std::io::stdout().lock().write_all(line.as_bytes());
    };
    let before = SystemTime::now();
    let train = managed_span(SpanGroup::JOB, "victim.train", [KeyValue::new("victim.kind", "root")]);
    bracket("victim.train", &train, before);
    let before = SystemTime::now();
    let iteration = managed_span(SpanGroup::STEP, "victim.iteration", [KeyValue::new("dl.iteration", 17_i64)]);
    bracket("victim.iteration", &iteration, before);
    for name in ["victim.data", "victim.forward"] {
        let before = SystemTime::now();
        let ended = managed_span(SpanGroup::STEP, name, []);
        bracket(name, &ended, before);
        drop(ended);
    }
    let before = SystemTime::now();
    let open_child = managed_span(SpanGroup::STEP, "victim.backward", []);
    bracket("victim.backward", &open_child, before);
    // Let the last-alive stamp (written every second) move past the spans'
    // starts: two and a half periods, for a stamp thread a loaded machine
    // wakes late.
    std::thread::sleep(Duration::from_millis(2500));
    let _ = std::io::stdout().lock().write_all(format!("KILL {}\n", nanos(SystemTime::now())).as_bytes());
    let _ = std::io::stdout().flush();
    // SAFETY: sends SIGKILL to this process; nothing runs after it.
    unsafe { kill(std::process::id() as i32, 9) };
    drop((telemetry, train, iteration, open_child));
    unreachable!("SIGKILL");
}

fn temp_dir(tag: &str) -> PathBuf {
    let nanos = nanos(SystemTime::now());
    let dir = std::env::temp_dir().join(format!("lens-recover-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[derive(Debug)]
struct Exported {
    name: String,
    span_id: String,
    parent: String,
    start: u64,
    end: u64,
    truncated: bool,
    reason: Option<String>,
    service: Option<String>,
    /// `lens.spool.replayed` on its resource.
    replayed: bool,
}

fn text(value: &Value) -> Option<String> {
    value.get("stringValue").and_then(Value::as_str).map(str::to_string)
}

fn number(value: &Value) -> u64 {
    value.as_str().and_then(|s| s.parse().ok()).or_else(|| value.as_u64()).unwrap_or(0)
}

/// Every span of an OTLP/JSON-lines traces file.
fn read_spans(path: &Path) -> Vec<Exported> {
    let Ok(content) = std::fs::read_to_string(path) else { return Vec::new() };
    let mut out = Vec::new();
    for line in content.lines().filter(|l| !l.trim().is_empty()) {
        let json: Value = serde_json::from_str(line).expect("a JSON line");
        for resource_spans in json["resourceSpans"].as_array().into_iter().flatten() {
            let resource: BTreeMap<String, Value> = resource_spans["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|kv| (kv["key"].as_str().unwrap_or("").to_string(), kv["value"].clone()))
                .collect();
            for scope in resource_spans["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let attributes = span["attributes"].as_array().cloned().unwrap_or_default();
                    let truncated = attributes.iter().any(|kv| {
                        kv["key"] == "nemo.span.truncated" && kv["value"].get("boolValue") == Some(&Value::Bool(true))
                    });
                    let reason = span["events"].as_array().into_iter().flatten().find_map(|event| {
                        (event["name"] == "nemo.span.truncated").then(|| {
                            event["attributes"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .find(|kv| kv["key"] == "nemo.span.truncated.reason")
                                .and_then(|kv| text(&kv["value"]))
                        })?
                    });
                    out.push(Exported {
                        name: span["name"].as_str().unwrap_or("").to_string(),
                        span_id: span["spanId"].as_str().unwrap_or("").to_lowercase(),
                        parent: span["parentSpanId"].as_str().unwrap_or("").to_lowercase(),
                        start: number(&span["startTimeUnixNano"]),
                        end: number(&span["endTimeUnixNano"]),
                        truncated,
                        reason,
                        service: resource.get("service.name").and_then(text),
                        replayed: resource.get("lens.spool.replayed").and_then(|v| v.get("boolValue"))
                            == Some(&Value::Bool(true)),
                    });
                }
            }
        }
    }
    out
}

fn lens(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lens")).args(args).env_remove("NEMO_LENS_ENABLED").output().expect("run lens")
}

/// `lens recover DIR --to-files DIR/out`: its exit code, standard output
/// and standard error.
fn recover_to_files(dir: &Path) -> (Option<i32>, String, String) {
    let out = dir.join("out");
    let output = lens(&["recover", dir.to_str().unwrap(), "--to-files", out.to_str().unwrap()]);
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// Runs the victim (spans open and ended, then SIGKILL) with the `file`
/// exporter into `export` and its spool in `spool`; returns what it printed.
fn killed_victim(export: &Path, spool: &Path) -> String {
    let child = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "victim", "--nocapture", "--test-threads", "1"])
        .env(VICTIM, "1")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "file")
        .env("NEMO_LENS_FILE_DIR", export)
        .env("NEMO_LENS_SPOOL_DIR", spool)
        .env("NEMO_LENS_SPAN_GROUPS", "all")
        .env("NEMO_LENS_RANK_STRATEGY", "all_ranks")
        .env("NEMO_LENS_RUN_ID", "victim-run")
        .env("OTEL_SERVICE_NAME", "victim-service")
        // Ended spans wait in the export queue: only the spool has them.
        .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
        .env_remove("OTEL_TRACES_EXPORTER")
        .output()
        .expect("run the victim");
    let stdout = String::from_utf8_lossy(&child.stdout).into_owned();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(
        child.status.signal(),
        Some(9),
        "killed by SIGKILL: {stdout}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    stdout
}

#[test]
fn recover_after_sigkill_delivers_every_span_once() {
    if std::env::var_os(VICTIM).is_some() {
        return;
    }
    let root = temp_dir("kill");
    let (export, spool, out) = (root.join("export"), root.join("spool"), root.join("recovered"));
    let stdout = killed_victim(&export, &spool);
    let killed_at: u64 =
        stdout.lines().find_map(|l| l.strip_prefix("KILL ")).and_then(|n| n.parse().ok()).expect("KILL");
    let started: Vec<(String, String, u64, u64)> = stdout
        .lines()
        .filter_map(|l| l.find("SPAN ").map(|at| &l[at + 5..]))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_string(), f[1].to_string(), f[2].parse().unwrap(), f[3].parse().unwrap())
        })
        .collect();
    assert_eq!(started.len(), 5, "{stdout}");
    let spool_files: Vec<_> = std::fs::read_dir(&spool).expect("spool dir").collect();
    assert_eq!(spool_files.len(), 1, "one spool file for the one rank");

    let recovered = lens(&["recover", spool.to_str().unwrap(), "--to-files", out.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&recovered.stdout);
    assert_eq!(recovered.status.code(), Some(0), "{said}\n{}", String::from_utf8_lossy(&recovered.stderr));
    // The ended spans waited in the export queue: all five come from the
    // spool, under the dead run's id (not this process's new one).
    assert!(
        said.contains(&format!(
            "recovered 5 span(s) of run victim-run (3 open when their process died, ended truncated) from 1 spool \
             file(s) in {}\n",
            spool.display()
        )),
        "{said}"
    );
    assert!(said.contains(&format!("spans written to {}", out.join("traces-rank0.jsonl").display())), "{said}");
    // The recovering process names itself, not a run of its own.
    let stderr = String::from_utf8_lossy(&recovered.stderr);
    assert!(stderr.contains(" (run lens-recover) exports traces: file "), "{stderr}");

    let mut all = read_spans(&export.join("traces-rank0.jsonl"));
    assert!(all.iter().all(|s| !s.replayed), "the victim's own export is not marked replayed");
    let recovered = read_spans(&out.join("traces-rank0.jsonl"));
    assert!(!recovered.is_empty() && recovered.iter().all(|s| s.replayed), "recovered spans are marked replayed");
    all.extend(recovered);
    for (name, id, not_before, not_after) in &started {
        let copies: Vec<&Exported> = all.iter().filter(|s| &s.span_id == id).collect();
        assert_eq!(copies.len(), 1, "{name} arrives exactly once: {all:?}");
        let span = copies[0];
        assert_eq!(&span.name, name);
        assert!((*not_before..=*not_after).contains(&span.start), "{name}: original start time");
        assert_eq!(span.service.as_deref(), Some("victim-service"), "{name}: the dead process's resource");
        let open = ["victim.train", "victim.iteration", "victim.backward"].contains(&name.as_str());
        assert_eq!(span.truncated, open, "{name}");
        if open {
            assert_eq!(span.reason.as_deref(), Some("the process died; replayed by the next attempt"));
            // Ended at the last-alive stamp: after the start, no later than the kill.
            assert!(span.end >= span.start && span.end <= killed_at, "{name}: {span:?}");
            assert!(span.end > *not_after, "{name}: the last-alive stamp moved past the start");
        }
    }
    let id_of = |name: &str| started.iter().find(|s| s.0 == name).map(|s| s.1.clone()).unwrap();
    let parent_of = |name: &str| all.iter().find(|s| s.name == name).map(|s| s.parent.clone()).unwrap();
    assert_eq!(parent_of("victim.iteration"), id_of("victim.train"));
    assert_eq!(parent_of("victim.backward"), id_of("victim.iteration"));
    assert_eq!(parent_of("victim.forward"), id_of("victim.iteration"));
    assert_eq!(std::fs::read_dir(&spool).expect("spool dir").count(), 0, "consumed");

    // A second recover replays nothing.
    let again = lens(&["recover", spool.to_str().unwrap(), "--to-files", out.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(0));
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("nothing to replay") && !said.contains("recovered"), "{said}");
    assert!(!said.contains("spans written to"), "nothing was written: {said}");
    assert_eq!(
        read_spans(&out.join("traces-rank0.jsonl")).len(),
        all.len() - read_spans(&export.join("traces-rank0.jsonl")).len()
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn recover_names_a_missing_directory_and_exits_2() {
    if std::env::var_os(VICTIM).is_some() {
        return;
    }
    let parent = temp_dir("missing");
    let missing = parent.join("nope");
    let output = lens(&["recover", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("recover: cannot read") && stderr.contains(missing.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("SPOOL_DIR"), "{stderr}");
    // `--to-files` that is a file: named as the flag, not as the file
    // exporter's variable that carries it.
    let file = parent.join("out.txt");
    std::fs::write(&file, b"x").expect("write");
    let output = lens(&["recover", parent.to_str().unwrap(), "--to-files", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("recover: --to-files {}: not a directory", file.display())), "{stderr}");
    assert!(!stderr.contains("FILE_DIR"), "{stderr}");
    // A directory whose traces file is a named pipe: the same.
    let piped = parent.join("piped");
    std::fs::create_dir_all(&piped).expect("mkdir");
    let fifo = piped.join("traces-rank0.jsonl");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
    let output = lens(&["recover", parent.to_str().unwrap(), "--to-files", piped.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("recover: --to-files {}: cannot open", piped.display())), "{stderr}");
    assert!(stderr.contains("it is a FIFO (named pipe), not a regular file"), "{stderr}");
    assert!(!stderr.contains("FILE_DIR"), "{stderr}");
    let _ = std::fs::remove_dir_all(&parent);
}

/// A damaged spool and one that cannot be opened for reading and writing
/// (a symbolic link, which `O_NOFOLLOW` refuses): one warning each, naming
/// the file and why, both left in place, and exit code 1.
#[test]
fn recover_says_which_spool_is_damaged_or_cannot_be_opened_and_exits_1() {
    if std::env::var_os(VICTIM).is_some() {
        return;
    }
    let dir = temp_dir("damaged");
    let damaged = dir.join("spool-rank0-host-1-00000000.lens");
    std::fs::write(&damaged, b"garbage").expect("write");
    let link = dir.join("spool-rank1-host-2-00000000.lens");
    std::os::unix::fs::symlink(dir.join("elsewhere"), &link).expect("symlink");
    let (code, stdout, stderr) = recover_to_files(&dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stdout.contains(&format!("2 spool file(s) in {} could not be replayed whole", dir.display()))
            && !stdout.contains("recovered"),
        "{stdout}"
    );
    assert!(stderr.contains(damaged.to_str().unwrap()) && stderr.contains("not a lens spool"), "{stderr}");
    assert_eq!(stderr.matches("not a lens spool").count(), 1, "one warning: {stderr}");
    let unopenable = format!("{}: cannot open it for reading and writing (it is a symbolic link", link.display());
    assert_eq!(stderr.matches(&unopenable).count(), 1, "one warning: {stderr}");
    assert!(damaged.exists() && std::fs::symlink_metadata(&link).is_ok(), "both left in place");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A damaged spool that still holds spans (one slot overwritten with a
/// state no writer sets): the spans that decode are recovered, the file is
/// set aside, and the summary counts it among the spool files read (it said
/// "from 0 spool file(s)" before); exit code 1.
#[test]
fn recover_counts_a_damaged_spool_it_replayed_from_among_the_files_it_read() {
    use lens_fallbacks::otel::spool::format::HEADER_SIZE;
    if std::env::var_os(VICTIM).is_some() {
        return;
    }
    let root = temp_dir("damaged-replayed");
    let (export, spool) = (root.join("export"), root.join("spool"));
    killed_victim(&export, &spool);
    let files: Vec<PathBuf> = std::fs::read_dir(&spool).expect("spool dir").map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "one spool file for the one rank: {files:?}");
    // The first slot (the first span started, `victim.train`): its state
    // word overwritten.
    let mut bytes = std::fs::read(&files[0]).expect("read");
    bytes[HEADER_SIZE..HEADER_SIZE + 4].copy_from_slice(&0xDEAD_BEEF_u32.to_le_bytes());
    std::fs::write(&files[0], &bytes).expect("write");

    let (code, stdout, stderr) = recover_to_files(&spool);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "recovered 4 span(s) of run victim-run (2 open when their process died, ended truncated) from 1 spool \
             file(s) in {}\n",
            spool.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("1 damaged spool file(s) set aside"), "{stdout}");
    let recovered = read_spans(&spool.join("out").join("traces-rank0.jsonl"));
    let mut names: Vec<&str> = recovered.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["victim.backward", "victim.data", "victim.forward", "victim.iteration"], "{recovered:?}");
    let _ = std::fs::remove_dir_all(&root);
}

/// Spans the `file` exporter drops at its cap (`NEMO_LENS_FILE_MAX_BYTES`)
/// were not recovered: the spool is kept, the warning says how many spans
/// were not written and why, and `lens recover` exits 1; a recover with room
/// then writes them and consumes the spool.
#[test]
fn recover_keeps_the_spool_when_the_file_cap_drops_its_spans() {
    if std::env::var_os(VICTIM).is_some() {
        return;
    }
    let root = temp_dir("cap");
    let (export, spool, out) = (root.join("export"), root.join("spool"), root.join("recovered"));
    killed_victim(&export, &spool);
    let capped = Command::new(env!("CARGO_BIN_EXE_lens"))
        .args(["recover", spool.to_str().unwrap(), "--to-files", out.to_str().unwrap()])
        .env_remove("NEMO_LENS_ENABLED")
        .env("NEMO_LENS_FILE_MAX_BYTES", "100")
        .output()
        .expect("run lens");
    let stderr = String::from_utf8_lossy(&capped.stderr);
    assert_eq!(capped.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("5 of 5 span(s) were not written"), "{stderr}");
    assert!(stderr.contains("cap of 100 bytes") && stderr.contains("raise NEMO_LENS_FILE_MAX_BYTES"), "{stderr}");
    assert!(stderr.contains("kept for the next attempt or `lens recover`"), "{stderr}");
    assert_eq!(read_spans(&out.join("traces-rank0.jsonl")).len(), 0);
    assert_eq!(std::fs::read_dir(&spool).expect("spool dir").count(), 1, "the spool is kept");

    let (code, said, stderr) = recover_to_files(&spool);
    assert_eq!(code, Some(0), "{said}\n{stderr}");
    assert_eq!(read_spans(&spool.join("out").join("traces-rank0.jsonl")).len(), 5);
    let left: Vec<_> = std::fs::read_dir(&spool).expect("spool dir").filter_map(Result::ok).collect();
    assert_eq!(left.len(), 1, "only `out` is left: the spool was consumed: {left:?}");
    let _ = std::fs::remove_dir_all(&root);
}

/// The checkpoint directory given for the spool directory beside it: nothing
/// to replay there, and the spool directory named.
#[test]
fn recover_given_the_checkpoint_directory_names_the_spool_directory_beside_it() {
    if std::env::var_os(VICTIM).is_some() {
        return;
    }
    let checkpoints = temp_dir("beside");
    let spool = checkpoints.join("lens-spool");
    std::fs::create_dir_all(&spool).expect("mkdir");
    std::fs::write(spool.join("spool-rank0-host-1-00000000.lens"), b"not read").expect("write");
    let (code, stdout, stderr) = recover_to_files(&checkpoints);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "nothing to replay in {}; did you mean {}? (it holds 1 spool file(s))\n",
            checkpoints.display(),
            spool.display()
        )
    );
    let _ = std::fs::remove_dir_all(&checkpoints);
}
