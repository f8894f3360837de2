//! The crash-safe spool's replay, in process (issue 22): a spool whose
//! writer died (its lock free) is replayed once at setup through the
//! configured exporter, with its span ids, parents and start times, open
//! spans ended when the process was last known alive and marked truncated; its progress
//! record reaches `replayed_progress`; a live writer's spool, a damaged
//! file and another format version are left alone.
//!
//! The setup test owns the process's telemetry lifetime, so this binary
//! holds the tests that set up a pipeline in one function.

#[path = "support/dead_spool.rs"]
mod dead_spool;

use std::path::{Path, PathBuf};
use std::time::Duration;

use dead_spool::{RANK_0, at, dead_spool, identity, span, spooling_config, temp_dir};
use lens_core::config::LensConfig;
use lens_otel_runtime::closer::{SPAN_TRUNCATED, SPAN_TRUNCATED_REASON, SPAN_TRUNCATED_REASON_PROCESS_DIED};
use lens_otel_runtime::pipeline::{PipelineOptions, setup};
use lens_otel_runtime::spool::replay::{Claim, ReplayOptions};
use lens_otel_runtime::spool::{SpoolTable, replay_dir, replayed_progress};
use opentelemetry::KeyValue;
use opentelemetry::Value;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};

fn id(span: &SpanData) -> u64 {
    u64::from_be_bytes(span.span_context.span_id().to_bytes())
}

fn truncation_reason(span: &SpanData) -> Option<String> {
    let event = span.events.events.iter().find(|e| e.name == SPAN_TRUNCATED)?;
    event.attributes.iter().find(|kv| kv.key.as_str() == SPAN_TRUNCATED_REASON).map(|kv| kv.value.to_string())
}

#[test]
fn a_dead_writers_spool_is_replayed_once_at_setup() {
    let dir = temp_dir("setup");
    let dead = dead_spool(&dir, 0);
    let exporter = InMemorySpanExporter::default();
    let config = spooling_config(&dir);
    let env = std::collections::HashMap::from([("NEMO_LENS_RUN_ID".to_string(), "new-run".to_string())]);
    let rank0 = RANK_0;
    let options = PipelineOptions::default().with_span_exporter(exporter.clone());
    let telemetry = setup(&config, &rank0, Vec::new(), options, &env).expect("setup");

    // Read at setup (the progress record), sent by the `lens-replay` thread
    // (within 10 s): each span once, with its ids and start time; the open
    // ones ended at the last-alive stamp, marked.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while dead.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut spans = exporter.get_finished_spans().expect("spans");
    spans.sort_by_key(id);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(names, ["megatron.train", "megatron.train.iteration", "megatron.train.iteration.forward_backward"]);
    assert_eq!(
        spans.iter().map(|s| s.parent_span_id).collect::<Vec<_>>(),
        [SpanId::INVALID, SpanId::from(1), SpanId::from(2)]
    );
    assert_eq!(spans.iter().map(|s| s.start_time).collect::<Vec<_>>(), [at(0), at(10), at(11)]);
    assert_eq!(spans.iter().map(|s| s.end_time).collect::<Vec<_>>(), [at(13), at(13), at(12)]);
    for open in &spans[..2] {
        assert!(open.attributes.contains(&KeyValue::new(SPAN_TRUNCATED, true)), "{open:?}");
        assert_eq!(truncation_reason(open).as_deref(), Some(SPAN_TRUNCATED_REASON_PROCESS_DIED));
        assert_eq!(open.span_context.trace_id(), TraceId::from(0x5eed_u128));
    }
    assert!(!spans[2].attributes.iter().any(|kv| kv.key.as_str() == SPAN_TRUNCATED), "ended normally");
    assert_eq!(spans[2].attributes[0], KeyValue::new("dl.iteration", Value::I64(17)));

    let progress = replayed_progress().expect("rank 0's progress");
    assert_eq!((progress.reached, progress.completed, progress.durable), (17, Some(16), Some(10)));
    assert_eq!((progress.last_alive, progress.recorded_at), (at(13), at(12)));
    assert_eq!(progress.run_id, "dead-run");
    assert!(!dead.exists(), "consumed");
    let own = telemetry.spool_path().expect("this lifetime's spool").to_path_buf();
    assert!(own.starts_with(&dir));
    telemetry.shutdown(Duration::from_secs(5));
    exporter.reset();

    // A further attempt replays nothing (this lifetime closed cleanly: no
    // spans, and no progress record).
    let options = PipelineOptions::default().with_span_exporter(exporter.clone());
    let telemetry = setup(&config, &rank0, Vec::new(), options, &env).expect("setup again");
    assert_eq!(exporter.get_finished_spans().expect("spans").len(), 0);
    assert_eq!(replayed_progress(), None);
    assert!(!own.exists(), "the clean spool was consumed");
    assert!(lens_otel_runtime::spool::is_active());
    telemetry.shutdown(Duration::from_secs(5));
    assert!(!lens_otel_runtime::spool::is_active(), "shutdown empties the slot");

    // A spool directory that cannot be made (here a plain file): no spool,
    // a warning, and telemetry goes on (spans still recorded and closed).
    let not_a_dir = dir.join("a-file");
    std::fs::write(&not_a_dir, b"x").expect("write");
    let config = LensConfig { spool_dir: Some(not_a_dir), ..config };
    let options = PipelineOptions::default().with_span_exporter(exporter.clone());
    let telemetry = setup(&config, &rank0, Vec::new(), options, &env).expect("setup without a spool");
    assert_eq!(telemetry.spool_path(), None);
    assert!(!lens_otel_runtime::spool::is_active());
    telemetry.shutdown(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}

fn collect(dir: &Path, claim: Claim) -> (lens_otel_runtime::spool::ReplayReport, Vec<(SpanData, Resource)>) {
    let mut got = Vec::new();
    let summary = replay_dir(dir, claim, None, &ReplayOptions::default(), &mut |spans, resource| {
        got.extend(spans.into_iter().map(|s| (s, resource.clone())));
        Ok(())
    });
    (summary, got)
}

#[test]
fn a_live_writers_spool_is_not_replayed() {
    let dir = temp_dir("alive");
    let table = SpoolTable::create(&dir, 128 * 1024, &identity(0, 1)).expect("spool");
    table.span_started(&span("megatron.train", 1, 0, at(0)));
    let (summary, got) = collect(&dir, Claim::All);
    assert_eq!((summary.alive, got.len(), summary.consumed.len()), (1, 0, 0));
    assert!(table.path().expect("file").exists());
    drop(table);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_dead_processs_resource_goes_with_its_spans_and_a_failed_export_keeps_the_file() {
    let dir = temp_dir("resource");
    let path = dead_spool(&dir, 0);
    let summary =
        replay_dir(&dir, Claim::All, None, &ReplayOptions::default(), &mut |_, _| Err("collector down".into()));
    assert_eq!(summary.consumed.len(), 0);
    assert!(summary.warnings[0].contains("collector down") && summary.warnings[0].contains(&*path.to_string_lossy()));
    assert!(path.exists(), "kept for the next attempt");
    let (summary, got) = collect(&dir, Claim::All);
    assert_eq!((summary.spans, summary.truncated, got.len()), (3, 2, 3));
    let service = got[0].1.get(&opentelemetry::Key::from_static_str("service.name"));
    assert_eq!(service, Some(Value::from("dead-service")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rank_zero_takes_the_spools_of_ranks_beyond_the_world_size() {
    let dir = temp_dir("claim");
    dead_spool(&dir, 1);
    dead_spool(&dir, 3);
    // Rank 1 of a world of 2 takes rank 1's only; rank 0 takes rank 3's.
    let (summary, _) = collect(&dir, Claim::Rank { rank: 1, world_size: 2 });
    assert_eq!(summary.consumed.len(), 1);
    assert!(summary.consumed[0].file_name().unwrap().to_string_lossy().starts_with("spool-rank1-"));
    // Each rank charges goodput from its own predecessor's progress.
    let progress = summary.progress.expect("rank 1's own predecessor's progress");
    assert_eq!((progress.reached, progress.completed, progress.durable), (17, Some(16), Some(10)));
    let (summary, _) = collect(&dir, Claim::Rank { rank: 0, world_size: 2 });
    assert_eq!(summary.consumed.len(), 1);
    assert!(summary.consumed[0].file_name().unwrap().to_string_lossy().starts_with("spool-rank3-"));
    assert_eq!(summary.progress, None, "the progress is of the replaying rank's own number: rank 3 is not rank 0");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_spool_or_another_version_is_one_warning_naming_the_file() {
    let dir = temp_dir("damaged");
    let damaged = dir.join("spool-rank0-host-1-0000.lens");
    std::fs::write(&damaged, b"not a spool").expect("write");
    let other = dead_spool(&dir, 0);
    let mut bytes = std::fs::read(&other).expect("read");
    bytes[8..12].copy_from_slice(&7_u32.to_le_bytes());
    std::fs::write(&other, bytes).expect("write");
    let (summary, got) = collect(&dir, Claim::All);
    assert_eq!((got.len(), summary.consumed.len()), (0, 0));
    assert_eq!(summary.warnings.len(), 2, "{:?}", summary.warnings);
    assert!(summary.warnings.iter().any(|w| w.contains(&*damaged.to_string_lossy()) && w.contains("not a lens spool")));
    assert!(summary.warnings.iter().any(|w| w.contains(&*other.to_string_lossy()) && w.contains("version 7")));
    assert!(damaged.exists() && other.exists(), "left alone");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ranks replay at the same moment: a rank never opens (nor locks) another
/// rank's spool, so that its own rank never mistakes that lock for a live
/// writer's; and a damaged spool is one warning, by its own rank's replay.
#[test]
fn a_rank_leaves_the_other_ranks_spools_unopened() {
    let dir = temp_dir("other-ranks");
    std::fs::write(dir.join("spool-rank0-host-1-0000.lens"), b"not a spool").expect("write");
    let (summary, got) = collect(&dir, Claim::Rank { rank: 1, world_size: 2 });
    assert_eq!((got.len(), summary.consumed.len(), summary.alive), (0, 0, 0));
    assert!(summary.warnings.is_empty(), "rank 1 looked at rank 0's file: {:?}", summary.warnings);
    let (summary, _) = collect(&dir, Claim::Rank { rank: 0, world_size: 2 });
    assert_eq!(summary.warnings.len(), 1, "{:?}", summary.warnings);
    assert!(summary.warnings[0].contains("spool-rank0-host-1-0000.lens"), "{:?}", summary.warnings);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every block of a new spool file is allocated before it is mapped (not a
/// sparse file): a store into the mapping of a sparse file on a full file
/// system raises SIGBUS in the training job.
#[test]
fn a_new_spool_file_has_every_block_allocated() {
    use std::os::unix::fs::MetadataExt;
    let dir = temp_dir("allocated");
    let table = SpoolTable::create(&dir, 1024 * 1024, &identity(0, 1)).expect("spool");
    let metadata = std::fs::metadata(table.path().expect("a file")).expect("metadata");
    // 16 KiB of header and 1008 slots of 1 KiB.
    assert_eq!(metadata.len(), 1024 * 1024);
    assert!(
        metadata.blocks() * 512 >= metadata.len(),
        "{} bytes allocated of {}",
        metadata.blocks() * 512,
        metadata.len()
    );
    drop(table);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spool directory that is a file is named as the directory, and said to
/// be a file (not a bare "File exists" about a "spool file").
#[test]
fn a_spool_directory_that_is_a_file_is_named_as_such() {
    let dir = std::env::temp_dir().join(format!("lens-spool-a-file-{}", std::process::id()));
    std::fs::write(&dir, b"not a directory").unwrap();
    let error = SpoolTable::create(&dir, 64 * 1024, &identity(0, 1)).expect_err("a file is in the way");
    assert_eq!(
        error.to_string(),
        format!("cannot create the spool directory {}: a file, not a directory, is there", dir.display())
    );
    std::fs::remove_file(&dir).unwrap();
}

const FILE_SIZE_LIMITED: &str = "LENS_SPOOL_FILE_SIZE_LIMITED";

/// The child of [`a_spool_that_cannot_be_allocated_is_removed_and_setup_goes_on_without_one`]:
/// under a file-size limit of 64 KiB (what a full file system looks like to
/// `posix_fallocate`: no blocks for the file), a spool cannot be made; the
/// error names the file, no file is left, and setup goes on without a spool.
#[test]
fn file_size_limited_child() {
    let Some(dir) = std::env::var_os(FILE_SIZE_LIMITED) else { return };
    let dir = PathBuf::from(dir);
    let limit = libc::rlimit { rlim_cur: 64 * 1024, rlim_max: 64 * 1024 };
    // SAFETY: plain system calls on this child process alone: a file-size
    // limit, and SIGXFSZ ignored so that going past it is an error (EFBIG)
    // rather than the signal's default, which ends the process.
    unsafe {
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let error = SpoolTable::create(&dir, 1024 * 1024, &identity(0, 1)).expect_err("no room for the spool");
    let message = error.to_string();
    assert!(message.contains("cannot create the spool file") && message.contains(&*dir.to_string_lossy()), "{message}");
    assert_eq!(std::fs::read_dir(&dir).expect("the directory").count(), 0, "the file is removed: {message}");
    let config = spooling_config(&dir);
    let exporter = InMemorySpanExporter::default();
    let options = PipelineOptions::default().with_span_exporter(exporter);
    let env = std::collections::HashMap::<String, String>::new();
    let telemetry = setup(&config, &RANK_0, Vec::new(), options, &env).expect("setup goes on");
    assert_eq!(telemetry.spool_path(), None);
    assert_eq!(std::fs::read_dir(&dir).expect("the directory").count(), 0, "no spool file is left");
    telemetry.shutdown(Duration::from_secs(5));
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), b"CHILD DONE\n");
}

#[test]
fn a_spool_that_cannot_be_allocated_is_removed_and_setup_goes_on_without_one() {
    if std::env::var_os(FILE_SIZE_LIMITED).is_some() {
        return;
    }
    let dir = temp_dir("no-room");
    let child = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "file_size_limited_child", "--nocapture", "--test-threads", "1"])
        .env(FILE_SIZE_LIMITED, &dir)
        .output()
        .expect("run the child");
    let (stdout, stderr) = (String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    assert!(child.status.success() && stdout.contains("CHILD DONE"), "{stdout}\n{stderr}");
    assert!(stderr.contains("no crash-safe spool for this run"), "setup warns: {stderr}");
    // The directory was given (here in code, `LensConfig.spool_dir`): the
    // warning does not tell the user to set what they set.
    assert!(stderr.contains("LensConfig.spool_dir names a directory it cannot use"), "{stderr}");
    assert!(!stderr.contains("(set "), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A setup's replay whose export fails still hands the dead attempt's
/// progress record to the goodput accounting, and keeps the spool; when the
/// spool is replayed again later, its spans are sent but its record is not
/// charged a second time.
#[test]
fn a_failed_export_still_gives_the_progress_record_once() {
    let dir = temp_dir("progress-once");
    let path = dead_spool(&dir, 1);
    let claim = Claim::Rank { rank: 1, world_size: 2 };
    let summary = replay_dir(&dir, claim, None, &ReplayOptions::default(), &mut |_, _| Err("collector down".into()));
    assert_eq!((summary.failed, summary.consumed.len()), (1, 0));
    assert!(path.exists(), "kept for the next attempt");
    let progress = summary.progress.expect("the progress record, whatever the export's outcome");
    assert_eq!((progress.reached, progress.completed, progress.durable), (17, Some(16), Some(10)));
    assert_eq!((progress.last_alive, progress.recorded_at, progress.file), (at(13), at(12), path.clone()));

    let (summary, got) = collect(&dir, claim);
    assert_eq!((summary.spans, got.len(), summary.consumed.len()), (3, 3, 1));
    assert_eq!(summary.progress, None, "the record was charged by the first replay");
    assert!(!path.exists(), "consumed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spool the replay cannot open for reading and writing (here a symbolic
/// link, which `O_NOFOLLOW` refuses) is one warning naming it and why, and
/// counts as failed (`lens recover` exits 1); the spool it points to is
/// replayed under its own name only.
#[test]
fn a_spool_that_cannot_be_opened_is_named_and_counted_as_failed() {
    let dir = temp_dir("unopenable");
    let real = dead_spool(&dir, 0);
    let link = dir.join("spool-rank0-elsewhere-1-00000000.lens");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let (summary, got) = collect(&dir, Claim::All);
    assert_eq!((summary.failed, summary.consumed.len(), got.len()), (1, 1, 3));
    assert_eq!(summary.warnings.len(), 1, "{:?}", summary.warnings);
    let warning = &summary.warnings[0];
    assert!(warning.contains(&*link.to_string_lossy()), "{warning}");
    assert!(warning.contains("cannot open it for reading and writing (it is a symbolic link"), "{warning}");
    assert!(std::fs::symlink_metadata(&link).is_ok(), "left alone");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spool of `slots` slots in `dir`, after `steps` spans `step` (ids and
/// start seconds 1, 2, ...) each ended a second after its start and none
/// exported; still its writer's.
fn spool_of_ended_steps(dir: &Path, slots: usize, steps: u64) -> std::sync::Arc<SpoolTable> {
    let table = SpoolTable::create(dir, 16 * 1024 + slots * 1024, &identity(0, 1)).expect("spool");
    for id in 1..=steps {
        let mut step = span("step", id, 0, at(id));
        table.span_started(&step);
        step.end_time = at(id + 1);
        table.span_ended(&step);
    }
    table
}

/// [`spool_of_ended_steps`], its writer dead.
fn dead_spool_of_ended_steps(dir: &Path, slots: usize, steps: u64) {
    let table = spool_of_ended_steps(dir, slots, steps);
    table.stop();
    table.close_file();
}

/// The warning about a spool that was full names the replaying program's
/// own variable (`MYJOB_OTEL_SPOOL_SIZE_KIB`), never a placeholder.
#[test]
fn a_full_spools_warning_names_the_programs_size_variable() {
    let dir = temp_dir("overflow");
    // Two slots: the third span takes an ended span's slot, counted.
    dead_spool_of_ended_steps(&dir, 2, 3);
    let options = ReplayOptions { size_variable: "MYJOB_OTEL_SPOOL_SIZE_KIB".to_string(), ..ReplayOptions::default() };
    let summary = replay_dir(&dir, Claim::All, None, &options, &mut |_, _| Ok(()));
    assert_eq!((summary.overflow, summary.spans), (1, 2));
    assert_eq!(summary.warnings.len(), 1, "{:?}", summary.warnings);
    assert!(
        summary.warnings[0].contains(
            "1 ended span(s) gave their slot up to new spans while the dead process's spool was full; those it \
             had not exported before it died are not in this replay (raise MYJOB_OTEL_SPOOL_SIZE_KIB to keep more)"
        ),
        "{:?}",
        summary.warnings
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spool whose writer shut down cleanly says nothing of the slots its
/// ended spans gave up during the run: every span was exported or counted
/// (before, the next attempt and `lens recover` warned of a dead process's
/// possible loss after every busy clean run).
#[test]
fn a_cleanly_closed_spools_overflow_is_not_warned_about() {
    let dir = temp_dir("clean-overflow");
    let table = spool_of_ended_steps(&dir, 2, 3);
    assert_eq!(table.overflow(), 1);
    table.close_cleanly();
    let options = ReplayOptions { size_variable: "MYJOB_OTEL_SPOOL_SIZE_KIB".to_string(), ..ReplayOptions::default() };
    let summary = replay_dir(&dir, Claim::All, None, &options, &mut |_, _| Ok(()));
    assert_eq!((summary.spans, summary.overflow), (0, 0));
    assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Spans that got no slot because every slot held an open span are lost
/// with their process: the replay counts them apart from the ended spans
/// that gave their slots up, and says so.
#[test]
fn a_replay_counts_the_open_spans_a_full_spool_could_not_keep() {
    let dir = temp_dir("open-unkept");
    let table = SpoolTable::create(&dir, 16 * 1024 + 2 * 1024, &identity(0, 1)).expect("spool");
    // Two slots, three spans open: the third has none, and is counted.
    for id in 1..=3 {
        table.span_started(&span("step", id, 0, at(id)));
    }
    assert_eq!((table.open_unkept(), table.overflow()), (1, 0));
    table.stop();
    table.close_file();
    let options = ReplayOptions { size_variable: "MYJOB_OTEL_SPOOL_SIZE_KIB".to_string(), ..ReplayOptions::default() };
    let summary = replay_dir(&dir, Claim::All, None, &options, &mut |_, _| Ok(()));
    assert_eq!((summary.spans, summary.truncated, summary.overflow), (2, 2, 0));
    assert_eq!(
        summary.warnings,
        [format!(
            "spool {}: 1 span(s) open when the dead process last wrote had no slot (every slot held an open span) \
             and are lost (raise MYJOB_OTEL_SPOOL_SIZE_KIB to keep more)",
            summary.consumed[0].display()
        )]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spool's spans go out in requests of at most the batch size
/// (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512 by default), parents first, never
/// as one request a collector's size limit refuses.
#[test]
fn a_large_spool_is_sent_in_requests_of_the_batch_size() {
    let dir = temp_dir("batches");
    dead_spool_of_ended_steps(&dir, 1300, 1300);
    // The second request fails: the spool is kept, the warning says how
    // many spans were not sent.
    let mut tries = 0;
    let failed = replay_dir(&dir, Claim::All, None, &ReplayOptions::default(), &mut |_, _| {
        tries += 1;
        if tries == 2 { Err("request too large".into()) } else { Ok(()) }
    });
    assert_eq!((tries, failed.failed, failed.consumed.len()), (2, 1, 0));
    assert!(
        failed.warnings[0].contains("788 of its 1300 span(s) could not be exported (request too large)"),
        "{:?}",
        failed.warnings
    );
    let mut requests = Vec::new();
    let summary = replay_dir(&dir, Claim::All, None, &ReplayOptions::default(), &mut |spans, _| {
        requests.push(spans.iter().map(|s| s.start_time).collect::<Vec<_>>());
        Ok(())
    });
    assert_eq!((summary.spans, summary.consumed.len(), summary.overflow), (1300, 1, 0));
    assert_eq!(requests.iter().map(Vec::len).collect::<Vec<_>>(), [512, 512, 276]);
    let starts: Vec<_> = requests.concat();
    assert_eq!(starts, (1..=1300).map(at).collect::<Vec<_>>(), "in start order, each once");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The spans open at a death end when the process was last known alive:
/// the latest of its last-alive stamp, its progress record's write, and its
/// spans' own times. A child that ended after the last stamp (the stamp is
/// refreshed every second) keeps its parents ending after it; a progress
/// record written after the stamp moves their end too.
#[test]
fn open_spans_end_no_earlier_than_anything_the_dead_process_recorded() {
    use lens_otel_runtime::spool::replay::read_spool;
    for (child_end, progress_at, expected) in
        [(at(15), at(12), at(15)), (at(12), at(14), at(14)), (at(12), at(12), at(13))]
    {
        let dir = temp_dir("late-child");
        let table = SpoolTable::create(&dir, 256 * 1024, &identity(0, 1)).expect("spool");
        table.span_started(&span("megatron.train", 1, 0, at(0)));
        table.span_started(&span("megatron.train.iteration", 2, 1, at(10)));
        let mut child = span("megatron.train.iteration.forward_backward", 3, 2, at(11));
        table.span_started(&child);
        child.end_time = child_end;
        table.span_ended(&child);
        table.write_progress(17, Some(16), Some(10), progress_at);
        table.touch(at(13));
        let path = table.path().expect("a file").to_path_buf();
        table.stop();
        table.close_file();
        let dead = read_spool(&std::fs::read(&path).expect("read")).expect("a spool");
        let mut spans = dead.spans;
        spans.sort_by_key(id);
        let ends: Vec<_> = spans.iter().map(|s| s.end_time).collect();
        assert_eq!(ends, [expected, expected, child_end], "child ended {child_end:?}, progress {progress_at:?}");
        assert_eq!(dead.truncated, 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_damaged_spool_replays_what_decodes_and_is_kept_aside_not_removed() {
    use lens_otel_runtime::spool::format::HEADER_SIZE;
    let dir = temp_dir("damaged");
    let path = dead_spool(&dir, 0);
    // The first slot's state word overwritten with a state no writer sets.
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[HEADER_SIZE..HEADER_SIZE + 4].copy_from_slice(&0xDEAD_BEEF_u32.to_le_bytes());
    std::fs::write(&path, &bytes).expect("write");
    let (summary, got) = collect(&dir, Claim::All);
    let damaged = dir.join(format!("{}.damaged", path.file_name().unwrap().to_string_lossy()));
    assert_eq!((got.len(), summary.failed, summary.consumed.len()), (2, 0, 0), "{summary:?}");
    assert_eq!(summary.set_aside, std::slice::from_ref(&damaged));
    assert!(
        summary.warnings.iter().any(|w| w.contains("1 span record(s) did not decode")
            && w.contains("the 2 that did were replayed")
            && w.contains(&*damaged.to_string_lossy())),
        "{summary:?}"
    );
    assert!(!path.exists() && damaged.exists(), "set aside, not removed");
    // It is out of every later replay's way: nothing is sent twice.
    let (summary, got) = collect(&dir, Claim::All);
    assert_eq!((got.len(), summary.failed, summary.set_aside.len()), (0, 0, 0), "{summary:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
