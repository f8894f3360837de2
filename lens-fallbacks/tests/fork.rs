//! A process forked after telemetry was set up (a data loader's worker):
//! the parent's lifetime exports from the parent only. In the child its
//! spans are dropped, instruments made from its meter record nothing
//! (making one from the SDK's meter could wait forever on a lock a
//! collection held at the fork), its flush and shutdown return at once and
//! say why, the parent's spool stays locked, and a setup of the child's
//! own exports the child's spans.
//!
//! The test forks: a binary of its own, one test.

#![cfg(all(unix, feature = "otel"))]

use std::collections::HashMap;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lens_fallbacks::config::LensConfig;
use lens_fallbacks::groups::SpanGroup;
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::setup::{SetupOptions, Telemetry, setup_telemetry};
use lens_fallbacks::span::managed_span;

fn setup(spans: &KeepingSpanExporter, spool_dir: &Path, run_id: &str) -> Telemetry {
    let config = LensConfig {
        enabled: true,
        span_groups: "all".into(),
        rank_strategy: "all_ranks".into(),
        spool_dir: Some(spool_dir.to_path_buf()),
        ..LensConfig::default()
    };
    let vars = HashMap::from([("NEMO_LENS_RUN_ID".to_string(), run_id.to_string())]);
    let options = SetupOptions::new().with_span_exporter(spans.clone()).with_env(vars);
    setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup")
}

/// The spool files in `dir`.
fn spools(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|entries| entries.flatten().map(|entry| entry.path()).collect()).unwrap_or_default();
    files.sort();
    files
}

/// Whether another open file description can lock `path` (its writer's
/// lock is free).
fn lock_is_free(path: &Path) -> bool {
    let file = std::fs::File::open(path).expect("the spool");
    // SAFETY: a valid descriptor, for the call's duration (a lock taken is
    // released when `file` closes).
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// What the child checks, as its exit status: 0 when all held, else the
/// number of the first check that failed.
fn child(parent: &Telemetry, spool: &Path, own_spool_dir: &Path) -> i32 {
    // The parent's spans and instruments record nothing here.
    drop(managed_span(SpanGroup::STEP, "lens.in_child_of_parent", []));
    let counter = parent.meter().u64_counter("lens.child.counter").build();
    if !counter.is_noop() {
        return 1;
    }
    // Flush and shutdown of the parent's lifetime: at once, saying why.
    let started = Instant::now();
    let flushed = parent.force_flush(Duration::from_secs(5));
    let report = parent.shutdown(Duration::from_secs(5));
    if started.elapsed() > Duration::from_secs(2) {
        return 2;
    }
    let said = "was forked from the process that set this telemetry up: what it recorded was not exported";
    if !flushed.errors.iter().chain(&report.errors).all(|error| error.contains(said)) || report.errors.is_empty() {
        return 3;
    }
    if report.spans.exported != 0 {
        return 4;
    }
    // The parent still holds its spool.
    if lock_is_free(spool) {
        return 5;
    }
    // A setup of the child's own exports the child's spans.
    let own = KeepingSpanExporter::default();
    let telemetry = setup(&own, own_spool_dir, "child-run");
    drop(managed_span(SpanGroup::STEP, "lens.in_child", []));
    let report = telemetry.shutdown(Duration::from_secs(5));
    let names: Vec<String> =
        own.get_finished_spans().unwrap_or_default().iter().map(|span| span.name.to_string()).collect();
    if names != ["lens.in_child"] || report.spans.exported != 1 {
        return 6;
    }
    0
}

#[test]
fn a_forked_child_leaves_its_parents_telemetry_alone_and_may_set_up_its_own() {
    let dir = std::env::temp_dir().join(format!("lens-fork-{}", std::process::id()));
    let (parent_dir, child_dir) = (dir.join("parent"), dir.join("child"));
    let exporter = KeepingSpanExporter::default();
    let telemetry = setup(&exporter, &parent_dir, "parent-run");
    drop(managed_span(SpanGroup::STEP, "lens.before_fork", []));
    let spool = spools(&parent_dir).pop().expect("the parent's spool");
    assert!(!lock_is_free(&spool), "the parent holds its spool");

    // SAFETY: the child runs only the checks above and leaves with `_exit`
    // (no destructor or atexit handler of the parent's runs in it).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let status = child(&telemetry, &spool, &child_dir);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(status) };
    }
    // Waits at most 30 s for the child.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut status = 0;
    loop {
        // SAFETY: a child of this process, polled.
        let done = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
        if done == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: the child this test made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the child hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(libc::WIFEXITED(status), "the child did not exit: {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child's check that failed");

    // The parent's lifetime goes on as if no child had been: its spool still
    // locked, its spans (none of the child's) exported at its shutdown.
    assert!(!lock_is_free(&spool), "the child released the parent's spool lock");
    drop(managed_span(SpanGroup::STEP, "lens.after_fork", []));
    let report = telemetry.shutdown(Duration::from_secs(10));
    let mut names: Vec<String> =
        exporter.get_finished_spans().unwrap_or_default().iter().map(|span| span.name.to_string()).collect();
    names.sort();
    assert_eq!(names, ["lens.after_fork", "lens.before_fork"], "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
