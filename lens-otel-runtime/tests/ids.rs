//! Span and trace IDs differ across processes and across a real `fork`
//! (a seeded RNG would repeat them across identically seeded ranks). Own
//! test binary: it forks and re-executes itself.

use std::collections::HashSet;
use std::process::Command;

use lens_otel_runtime::ids::SeedIndependentIdGenerator;
use opentelemetry_sdk::trace::IdGenerator;

/// Set in the environment of the copies of this binary that
/// `two_processes_draw_different_ids` starts.
const CHILD_VARIABLE: &str = "LENS_TEST_IDS_CHILD";

fn draw(ids: &SeedIndependentIdGenerator) -> Vec<String> {
    let mut drawn: Vec<String> = (0..32).map(|_| ids.new_span_id().to_string()).collect();
    drawn.extend((0..8).map(|_| ids.new_trace_id().to_string()));
    drawn
}

#[test]
fn two_processes_draw_different_ids() {
    let ids = SeedIndependentIdGenerator::new();
    if std::env::var_os(CHILD_VARIABLE).is_some() {
        #[expect(clippy::print_stdout, reason = "the child process reports its IDs to the parent test")]
        {
            println!("lens-ids: {}", draw(&ids).join(" "));
        }
        return;
    }
    let Ok(exe) = std::env::current_exe() else { panic!("no path to this test binary") };
    let child_ids = || -> Vec<String> {
        let output = Command::new(&exe)
            .args(["--exact", "two_processes_draw_different_ids", "--nocapture", "--test-threads=1"])
            .env(CHILD_VARIABLE, "1")
            .output();
        let Ok(output) = output else { panic!("could not run a copy of this test binary") };
        assert!(output.status.success(), "{output:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().find_map(|line| line.split_once("lens-ids: ").map(|(_, ids)| ids));
        line.unwrap_or_default().split(' ').map(str::to_owned).collect()
    };
    let first = child_ids();
    let second = child_ids();
    let mine = draw(&ids);
    assert_eq!((first.len(), second.len()), (40, 40), "{first:?} {second:?}");
    let all: HashSet<&String> = first.iter().chain(&second).chain(&mine).collect();
    assert_eq!(all.len(), 120, "processes drew common IDs");
    assert!(all.iter().all(|id| id.chars().any(|c| c != '0')), "an all-zero ID");
}

#[cfg(target_os = "linux")]
mod fork {
    use std::io::{Read as _, Write as _};

    use super::*;

    unsafe extern "C" {
        fn fork() -> i32;
        fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
        fn _exit(code: i32) -> !;
    }

    #[test]
    fn a_forked_child_draws_ids_different_from_its_parent() {
        let ids = SeedIndependentIdGenerator::new();
        // Seed this thread's generator before the fork: the child inherits it.
        let before = draw(&ids);
        let Ok((mut reader, mut writer)) = std::io::pipe() else { panic!("no pipe") };
        // SAFETY: the child only draws IDs, writes to a pipe and `_exit`s,
        // without returning into the test harness.
        let pid = unsafe { fork() };
        if pid == 0 {
            let written = writer.write_all(draw(&ids).join(" ").as_bytes()).is_ok();
            drop(writer);
            // SAFETY: ends the child at once, as a forked child should.
            unsafe { _exit(if written { 0 } else { 1 }) }
        }
        assert!(pid > 0, "fork failed");
        drop(writer);
        let parent = draw(&ids);
        let mut text = String::new();
        let read = reader.read_to_string(&mut text);
        let mut status = -1;
        // SAFETY: waits for the child forked above; `status` outlives the call.
        let waited = unsafe { waitpid(pid, &mut status, 0) };
        assert!(read.is_ok() && waited == pid && status == 0, "child failed: {read:?} {waited} {status}");
        let child: Vec<&str> = text.split(' ').collect();
        assert_eq!(child.len(), 40, "{text}");
        let all: HashSet<&str> = child
            .iter()
            .copied()
            .chain(parent.iter().map(String::as_str))
            .chain(before.iter().map(String::as_str))
            .collect();
        assert_eq!(all.len(), 120, "the forked child repeated its parent's IDs");
    }

    #[test]
    fn a_forked_child_does_not_export_its_parents_open_spans() {
        use lens_otel_runtime::closer::OpenSpanCloser;
        use opentelemetry::trace::{Tracer as _, TracerProvider as _};

        let closer = OpenSpanCloser::new();
        let provider =
            opentelemetry_sdk::trace::SdkTracerProvider::builder().with_span_processor(closer.clone()).build();
        let _open = provider.tracer("fork").start("parent-work");
        assert_eq!(closer.open_count(), 1);
        let Ok((mut reader, mut writer)) = std::io::pipe() else { panic!("no pipe") };
        // SAFETY: the child only asks the closer what it holds, writes to a
        // pipe and `_exit`s, without returning into the test harness.
        let pid = unsafe { fork() };
        if pid == 0 {
            let report = format!("{} {}", closer.open_count(), closer.drain_truncated().len());
            let written = writer.write_all(report.as_bytes()).is_ok();
            drop(writer);
            // SAFETY: ends the child at once, as a forked child should.
            unsafe { _exit(if written { 0 } else { 1 }) }
        }
        assert!(pid > 0, "fork failed");
        drop(writer);
        let mut text = String::new();
        let read = reader.read_to_string(&mut text);
        let mut status = -1;
        // SAFETY: waits for the child forked above; `status` outlives the call.
        let waited = unsafe { waitpid(pid, &mut status, 0) };
        assert!(read.is_ok() && waited == pid && status == 0, "child failed: {read:?} {waited} {status}");
        assert_eq!(text, "0 0", "the child saw its parent's open spans");
        assert_eq!(closer.drain_truncated().len(), 1, "the parent lost its open span");
    }
}
