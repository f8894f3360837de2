//! Goodput accounting as a job owner reads it: the buckets always sum to the
//! wall time and only durable checkpoints keep iterations (properties over
//! arbitrary event sequences), a crash's pending time becomes lost progress
//! in the next attempt, a failed save keeps nothing, an asynchronous save
//! keeps its iterations only at its finalize, a clean run loses nothing,
//! and the progress record survives a round trip while bad content is a
//! clear error, never a panic. With the dead attempt's spool (issue 22),
//! lost progress is exact at any log interval: a crash after iteration 17
//! with saves every 10 at the default log interval loses 7, a crash during
//! an asynchronous save loses everything since the previous durable
//! checkpoint; without it, the charge is known only to a log interval and
//! says so.

use std::time::{Duration, SystemTime};

use lens_training::goodput::{
    Accountant, Bucket, Coverage, DeadProgress, GoodputTotals, LostPrecision, PROGRESS_RECORD_FILE, ProgressRecord,
    SPOOL_STALENESS,
};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Event {
    Begin(Bucket),
    End(Bucket),
    Started,
    Iteration,
    Finish,
    /// A save begins: its coverage is taken.
    SaveBegins,
    /// The latest save's checkpoint is durable.
    Durable,
}

fn event() -> impl Strategy<Value = Event> {
    let phase = prop_oneof![Just(Bucket::CheckpointSave), Just(Bucket::CheckpointLoad), Just(Bucket::Evaluation)];
    prop_oneof![
        phase.clone().prop_map(Event::Begin),
        phase.prop_map(Event::End),
        Just(Event::Started),
        Just(Event::Iteration),
        Just(Event::Finish),
        Just(Event::SaveBegins),
        Just(Event::Durable),
    ]
}

fn apply(acc: &mut Accountant, event: Event, now: f64, latest_save: &mut Option<Coverage>) {
    match event {
        Event::SaveBegins => *latest_save = Some(acc.coverage(now)),
        // Before any save: a checkpoint that covers nothing.
        Event::Durable => acc.checkpoint_durable(latest_save.unwrap_or_default(), now),
        Event::Begin(phase) => acc.begin(phase, now),
        Event::End(phase) => acc.end(phase, now),
        Event::Started => acc.training_started(now),
        Event::Iteration => acc.iteration_completed(now),
        Event::Finish => acc.finish(now),
    }
}

proptest! {
    /// Whatever the events and their order, and even with times that go
    /// backwards, every bucket is non-negative and they sum to the earlier
    /// attempts' time plus the latest time seen.
    #[test]
    fn buckets_always_sum_to_wall_time(
        prior_seconds in prop::collection::vec(0.0..1000.0_f64, 8),
        events in prop::collection::vec((event(), -1.0..10.0_f64), 0..60),
        tail in 0.0..5.0_f64,
    ) {
        let mut prior = GoodputTotals::default();
        for (bucket, s) in Bucket::ALL.into_iter().zip(&prior_seconds) {
            prior.set_seconds(bucket, *s);
        }
        let prior = prior.resume();
        let mut acc = Accountant::new(prior);
        let (mut now, mut latest) = (0.0_f64, 0.0_f64);
        let mut latest_save: Option<Coverage> = None;
        // Iterations completed, and the most any durable checkpoint covers.
        let (mut completed, mut coverable, mut finished) = (0_u64, 0_u64, false);
        let mut latest_save_iterations = 0_u64;
        for (event, step) in events {
            now += step;
            latest = latest.max(now);
            match event {
                Event::Iteration => completed += 1,
                Event::SaveBegins => latest_save_iterations = completed,
                Event::Durable => coverable = coverable.max(latest_save_iterations),
                Event::Finish => finished = true,
                _ => {}
            }
            apply(&mut acc, event, now, &mut latest_save);
            let snap = acc.snapshot(now);
            prop_assert!(snap.buckets().all(|(_, s)| s >= 0.0));
            // Only a durable checkpoint (or the normal end) keeps iterations.
            prop_assert_eq!(snap.productive_iterations + snap.pending_iterations, completed);
            if !finished {
                prop_assert_eq!(snap.productive_iterations, coverable);
            }
            let expected = prior.total_seconds() + latest;
            prop_assert!((snap.total_seconds() - expected).abs() <= 1e-6 * expected.max(1.0),
                "{} vs {expected}", snap.total_seconds());
        }
        let end = latest + tail;
        let snap = acc.snapshot(end);
        let expected = prior.total_seconds() + end;
        prop_assert!((snap.total_seconds() - expected).abs() <= 1e-6 * expected.max(1.0));
        if let Some(ratio) = snap.ratio() {
            prop_assert!((0.0..=1.0).contains(&ratio));
        }
    }
}

/// One second of startup (with a half-second load inside it), then
/// `iterations` iterations of one second each, a save (0.5 s) every
/// `save_every`; the clock at the end.
fn train(acc: &mut Accountant, iterations: u64, save_every: u64) -> f64 {
    acc.begin(Bucket::CheckpointLoad, 0.25);
    acc.end(Bucket::CheckpointLoad, 0.75);
    acc.training_started(1.0);
    let mut now = 1.0;
    for i in 1..=iterations {
        now += 1.0;
        acc.iteration_completed(now);
        if i % save_every == 0 {
            acc.begin(Bucket::CheckpointSave, now);
            let covers = acc.coverage(now);
            now += 0.5;
            acc.end(Bucket::CheckpointSave, now);
            acc.checkpoint_durable(covers, now); // a synchronous save that succeeded
        }
    }
    now
}

#[test]
fn a_crash_after_the_checkpoint_loses_its_pending_iterations_in_the_next_attempt() {
    // Attempt 1: saves at 10, crashes after 17; its last record was at 17.
    let mut first = Accountant::new(GoodputTotals::default());
    let crashed_at = train(&mut first, 17, 10);
    let record = first.snapshot(crashed_at);
    assert_eq!((record.productive_iterations, record.pending_iterations), (10, 7));
    assert_eq!(record.seconds(Bucket::Pending), 7.0);
    assert_eq!(record.seconds(Bucket::LostProgress), 0.0);

    // Attempt 2 resumes from the checkpoint of iteration 10 and runs 30 more.
    let mut second = Accountant::new(record.resume());
    let mut now = train(&mut second, 30, 10);
    second.finish(now);
    now += 0.25;
    let totals = second.snapshot(now);
    assert_eq!(totals.seconds(Bucket::LostProgress), 7.0);
    assert_eq!(totals.lost_iterations, 7);
    assert_eq!(totals.productive_iterations, 40);
    assert_eq!(totals.seconds(Bucket::Productive), 40.0);
    assert_eq!(totals.seconds(Bucket::Pending), 0.0);
    assert_eq!(totals.seconds(Bucket::CheckpointSave), 0.5 * 4.0);
    assert_eq!(totals.seconds(Bucket::CheckpointLoad), 1.0);
    assert_eq!(totals.seconds(Bucket::Startup), 1.0);
    assert_eq!(totals.seconds(Bucket::Other), 0.25);
    assert_eq!(totals.attempts, 2);
    assert_eq!(totals.total_seconds(), crashed_at + now);
    let ratio = totals.ratio().unwrap();
    assert!(ratio > 0.0 && ratio < 1.0, "{ratio}");
}

#[test]
fn a_failed_save_keeps_nothing_and_a_crash_after_it_loses_its_iterations() {
    // Iterations of one second; the save after iteration 10 fails (0.5 s),
    // the attempt dies after it, its last record at 10.5.
    let mut first = Accountant::new(GoodputTotals::default());
    first.training_started(0.0);
    for i in 1..=10 {
        first.iteration_completed(f64::from(i));
    }
    first.begin(Bucket::CheckpointSave, 10.0);
    let _never_durable = first.coverage(10.0);
    first.end(Bucket::CheckpointSave, 10.5);
    let record = first.snapshot(10.5);
    assert_eq!((record.productive_iterations, record.pending_iterations), (0, 10));
    assert_eq!((record.seconds(Bucket::Productive), record.seconds(Bucket::Pending)), (0.0, 10.0));
    assert_eq!(record.seconds(Bucket::CheckpointSave), 0.5, "the attempt still spent the time");
    let resumed = Accountant::new(record.resume()).snapshot(0.0);
    assert_eq!((resumed.lost_iterations, resumed.seconds(Bucket::LostProgress)), (10, 10.0));
}

/// Issue 20's run: 20 iterations of one second, an asynchronous save every
/// 5 (a 0.25 s dispatch, and a 0.25 s finalize at the top of the next pass
/// once the write is done: after the next iteration), a crash after
/// iteration 16, before the save of 15 was finalized; the next attempt
/// resumes from the checkpoint of 10 (the tracker's) and runs 11 to 20.
#[test]
fn an_async_save_keeps_its_iterations_only_at_its_finalize_so_a_crash_loses_six() {
    fn attempt(acc: &mut Accountant, iterations: std::ops::RangeInclusive<u64>, crash_after: Option<u64>) -> f64 {
        let mut now = 1.0;
        acc.training_started(now);
        let mut in_flight: Option<Coverage> = None;
        let mut finalize_due = false;
        for i in iterations {
            if finalize_due && let Some(covers) = in_flight.take() {
                acc.begin(Bucket::CheckpointSave, now);
                now += 0.25;
                acc.end(Bucket::CheckpointSave, now);
                acc.checkpoint_durable(covers, now);
            }
            finalize_due = in_flight.is_some();
            now += 1.0;
            acc.iteration_completed(now);
            if crash_after == Some(i) {
                return now;
            }
            if i % 5 == 0 {
                acc.begin(Bucket::CheckpointSave, now);
                in_flight = Some(acc.coverage(now));
                now += 0.25;
                acc.end(Bucket::CheckpointSave, now);
                finalize_due = false;
            }
        }
        // The normal end: the exit finalize, then the end.
        if let Some(covers) = in_flight.take() {
            acc.begin(Bucket::CheckpointSave, now);
            now += 0.25;
            acc.end(Bucket::CheckpointSave, now);
            acc.checkpoint_durable(covers, now);
        }
        acc.finish(now);
        now
    }
    let mut first = Accountant::new(GoodputTotals::default());
    let crashed_at = attempt(&mut first, 1..=20, Some(16));
    let record = first.snapshot(crashed_at);
    assert_eq!((record.productive_iterations, record.pending_iterations), (10, 6), "{record:?}");
    // Kept: the loop time before the save of 10 began (10 iterations and
    // the finalize of 5 is save time); pending: iterations 11 to 16.
    assert_eq!(record.seconds(Bucket::Productive), 10.0);
    assert_eq!(record.seconds(Bucket::Pending), 6.0);

    let mut second = Accountant::new(record.resume());
    let end = attempt(&mut second, 11..=20, None);
    let totals = second.snapshot(end);
    assert_eq!((totals.productive_iterations, totals.lost_iterations, totals.pending_iterations), (20, 6, 0));
    assert_eq!(totals.seconds(Bucket::LostProgress), 6.0);
    assert_eq!(totals.seconds(Bucket::Productive), 20.0);
    assert_eq!(totals.total_seconds(), crashed_at + end);
}

/// Activities that end out of order each end their own: an evaluation
/// ended while a save inside it is open leaves the save open, and once the
/// save ends, loop time is productive again (it stayed evaluation time for
/// the rest of the run).
#[test]
fn activities_that_end_out_of_order_each_end_their_own() {
    let mut acc = Accountant::new(GoodputTotals::default());
    acc.training_started(0.0);
    acc.begin(Bucket::Evaluation, 0.0);
    acc.begin(Bucket::CheckpointSave, 1.0);
    let covers = acc.coverage(1.0);
    acc.end(Bucket::Evaluation, 2.0);
    acc.end(Bucket::CheckpointSave, 3.0);
    acc.checkpoint_durable(covers, 3.0);
    let mut now = 3.0;
    for _ in 0..10 {
        now += 1.0;
        acc.iteration_completed(now);
    }
    acc.begin(Bucket::CheckpointSave, now);
    let covers = acc.coverage(now);
    acc.end(Bucket::CheckpointSave, now);
    acc.checkpoint_durable(covers, now);
    let totals = acc.snapshot(now);
    assert_eq!(totals.seconds(Bucket::Evaluation), 1.0, "evaluation from 0 to 1, until the save began");
    assert_eq!(totals.seconds(Bucket::CheckpointSave), 2.0, "the save from 1 to 3");
    assert_eq!(totals.seconds(Bucket::Productive), 10.0, "the ten iterations after");
    assert_eq!(totals.productive_iterations, 10);
}

#[test]
fn a_clean_run_has_no_lost_progress_and_keeps_every_iteration() {
    let mut acc = Accountant::new(GoodputTotals::default());
    let now = train(&mut acc, 25, 10);
    acc.finish(now);
    let totals = acc.snapshot(now);
    assert_eq!(totals.seconds(Bucket::LostProgress), 0.0);
    assert_eq!(totals.seconds(Bucket::Pending), 0.0);
    assert_eq!((totals.productive_iterations, totals.pending_iterations), (25, 0));
    // A resume after a normal end loses nothing either.
    let resumed = totals.resume();
    assert_eq!(resumed.seconds(Bucket::LostProgress), 0.0);
}

#[test]
fn evaluation_inside_the_loop_is_not_counted_twice() {
    let mut acc = Accountant::new(GoodputTotals::default());
    acc.training_started(0.0);
    acc.iteration_completed(1.0);
    acc.begin(Bucket::Evaluation, 1.0);
    acc.end(Bucket::Evaluation, 3.0);
    acc.iteration_completed(4.0);
    let totals = acc.snapshot(4.0);
    assert_eq!(totals.seconds(Bucket::Evaluation), 2.0);
    assert_eq!(totals.seconds(Bucket::Pending), 2.0);
    assert_eq!(totals.total_seconds(), 4.0);
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("goodput-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_progress_record_round_trips_and_bad_content_is_a_clear_error() {
    let dir = temp_dir("record");
    assert!(ProgressRecord::read(&dir).unwrap().is_none(), "no record: fresh totals");

    let mut acc = Accountant::new(GoodputTotals::default());
    let now = train(&mut acc, 13, 10);
    let record = ProgressRecord {
        run_id: "run-1".into(),
        iteration: 13,
        checkpoint_iteration: Some(10),
        totals: acc.snapshot(now),
        // Whole milliseconds: the JSON number round-trips exactly.
        written_at: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_650_000_250)),
        normal_end: false,
    };
    record.write_atomic(&dir).unwrap();
    assert_eq!(ProgressRecord::read(&dir).unwrap(), Some(record));
    // Nothing but the record is left behind.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, [PROGRESS_RECORD_FILE]);

    for (content, says) in [
        ("not json", "is not a goodput progress record"),
        (
            "{\"schema\": \"dl.goodput.progress/1\", \"iteration\": 3, \"attempts\": 1, \
             \"productive_iterations\": 0, \"pending_iterations\": 0, \"lost_iterations\": -3}",
            "lost_iterations is -3; expected a count, 0 or more",
        ),
        ("{\"schema\": \"something/9\"}", "schema \"something/9\""),
        (
            "{\"schema\": \"megatron.goodput.progress/1\", \"iteration\": 3, \"attempts\": 1, \
             \"productive_iterations\": 0, \"pending_iterations\": 0, \"lost_iterations\": 0, \
             \"seconds\": {\"productive\": -1}}",
            "seconds.productive is not a non-negative number",
        ),
        (
            "{\"schema\": \"dl.goodput.progress/1\", \"iteration\": 3, \"attempts\": 1, \
             \"productive_iterations\": 0, \"pending_iterations\": 0, \"lost_iterations\": 0, \
             \"lost_precision\": \"roughly\", \"seconds\": {\"productive\": 0, \"pending\": 0, \"startup\": 0, \
             \"checkpoint_save\": 0, \"checkpoint_load\": 0, \"evaluation\": 0, \"lost_progress\": 0, \"other\": 0}}",
            "lost_precision is \"roughly\"; expected \"iteration\" or \"log_interval\"",
        ),
        (
            // A damaged count: charging from it would overflow.
            "{\"schema\": \"dl.goodput.progress/1\", \"iteration\": 3, \"attempts\": 1, \
             \"productive_iterations\": 18446744073709551615, \"pending_iterations\": 1, \"lost_iterations\": 0, \
             \"seconds\": {\"productive\": 0, \"pending\": 0, \"startup\": 0, \"checkpoint_save\": 0, \
             \"checkpoint_load\": 0, \"evaluation\": 0, \"lost_progress\": 0, \"other\": 0}}",
            "productive_iterations is 18446744073709551615; expected a count of at most 9007199254740992",
        ),
    ] {
        std::fs::write(dir.join(PROGRESS_RECORD_FILE), content).unwrap();
        let error = ProgressRecord::read(&dir).unwrap_err().to_string();
        assert!(error.contains(says), "{error}");
        assert!(error.contains(PROGRESS_RECORD_FILE), "{error}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Counts at the end of their range saturate when an attempt is charged,
/// instead of overflowing (a panic in a debug build, wrapped totals in a
/// release one).
#[test]
fn charging_counts_at_the_end_of_their_range_saturates() {
    let mut totals = GoodputTotals::default();
    totals.productive_iterations = u64::MAX;
    totals.pending_iterations = u64::MAX;
    totals.lost_iterations = u64::MAX - 1;
    assert_eq!(totals.resume().lost_iterations, u64::MAX);
    let dead = DeadProgress { completed: Some(u64::MAX), unseen_seconds: 1.0 };
    let charged = totals.resume_exactly(0, 0, dead);
    assert_eq!((charged.productive_iterations, charged.lost_iterations), (u64::MAX, u64::MAX));
    assert_eq!(charged.pending_iterations, 0);
}

/// A resume reads a progress record written under the schema before the
/// rename (SPEC A21), literally as an older version wrote it, and charges
/// its pending time as lost; a record written now has the new schema.
#[test]
fn a_record_of_the_old_schema_is_resumed() {
    let dir = std::env::temp_dir().join(format!("lens-training-old-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(PROGRESS_RECORD_FILE),
        "{\n  \"schema\": \"megatron.goodput.progress/1\",\n  \"run_id\": \"4f2a9c1e7b3d\",\n  \"iteration\": 17,\n  \
         \"checkpoint_iteration\": 10,\n  \"attempts\": 1,\n  \"productive_iterations\": 10,\n  \
         \"pending_iterations\": 7,\n  \"lost_iterations\": 0,\n  \"seconds\": {\"productive\": 5.5, \"pending\": 1.25, \
         \"startup\": 0.5, \"checkpoint_save\": 0.75, \"checkpoint_load\": 0, \"evaluation\": 0, \"lost_progress\": 0, \
         \"other\": 0}\n}\n",
    )
    .unwrap();
    let record = ProgressRecord::read(&dir).unwrap().expect("the old record");
    assert_eq!((record.iteration, record.checkpoint_iteration), (17, Some(10)));
    // Older versions wrote neither the time nor the precision; nothing was
    // lost before this record, so nothing is imprecise yet.
    assert_eq!((record.written_at, record.normal_end), (None, false));
    assert_eq!(record.totals.lost_precision, LostPrecision::Iteration);
    assert_eq!(record.resume_totals(10, None).lost_precision, LostPrecision::LogInterval);
    let resumed = record.totals.resume();
    assert_eq!((resumed.lost_iterations, resumed.pending_iterations, resumed.productive_iterations), (7, 0, 10));
    assert_eq!(resumed.seconds(Bucket::LostProgress), 1.25);
    assert_eq!(resumed.total_seconds(), 8.0);
    record.write_atomic(&dir).unwrap();
    let rewritten = std::fs::read_to_string(dir.join(PROGRESS_RECORD_FILE)).unwrap();
    assert!(rewritten.contains("\"schema\": \"dl.goodput.progress/1\""), "{rewritten}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Attempt 1 of the issue's run: saves every 10 (synchronous), the default
/// log interval of 10, a crash after iteration 17. Its last progress record
/// is the one written when the checkpoint of 10 became durable; the spool
/// had every iteration. Returns the accountant, the record and the time of
/// the record and of the death (the spool's last-alive stamp).
fn crash_after_17() -> (ProgressRecord, f64, f64) {
    let mut first = Accountant::new(GoodputTotals::default());
    let record_at = train(&mut first, 10, 10);
    let record = ProgressRecord {
        run_id: "attempt-1".into(),
        iteration: 10,
        checkpoint_iteration: Some(10),
        totals: first.snapshot(record_at),
        written_at: None,
        normal_end: false,
    };
    assert_eq!((record.totals.productive_iterations, record.totals.pending_iterations), (10, 0));
    // Iterations 11 to 17: no log interval, no save, no record.
    let mut now = record_at;
    for _ in 11..=17 {
        now += 1.0;
        first.iteration_completed(now);
    }
    (record, record_at, now)
}

#[test]
fn with_the_spool_a_crash_after_17_at_the_default_log_interval_loses_exactly_7() {
    let (record, record_at, died_at) = crash_after_17();
    let dead = DeadProgress { completed: Some(17), unseen_seconds: died_at - record_at };
    let mut second = Accountant::new(record.resume_totals(10, Some(dead)));
    let mut now = train(&mut second, 30, 10);
    second.finish(now);
    now += 0.25;
    let totals = second.snapshot(now);
    assert_eq!((totals.productive_iterations, totals.lost_iterations, totals.pending_iterations), (40, 7, 0));
    assert_eq!(totals.seconds(Bucket::LostProgress), 7.0, "the seven steps 11 to 17");
    assert_eq!(totals.seconds(Bucket::Productive), 40.0);
    assert_eq!(totals.lost_precision, LostPrecision::Iteration);
    // Nothing of the dead attempt is unseen any more: the buckets sum to
    // both attempts' time.
    assert_eq!(totals.total_seconds(), died_at + now);
    assert_eq!(totals.attempts, 2);

    // Without the spool, the record alone: the 7 iterations after it are
    // seen by no one, and the totals say the charge is known only to a log
    // interval.
    let rough = Accountant::new(record.resume_totals(10, None)).snapshot(0.0);
    assert_eq!((rough.lost_iterations, rough.seconds(Bucket::LostProgress)), (0, 0.0));
    assert_eq!(rough.lost_precision, LostPrecision::LogInterval);
    assert_eq!(rough.lost_precision.describe(), "lost progress known only to a log interval (no spool)");
}

/// An asynchronous save every 10 at the default log interval: the save of
/// 10 is finalized at the top of iteration 12 (its record written then),
/// the save of 20 is dispatched after iteration 20 and the attempt dies
/// while it is in flight. Everything since the checkpoint of 10 is lost:
/// the 10 iterations 11 to 20, and their time.
#[test]
fn with_the_spool_a_crash_during_an_async_save_loses_everything_since_the_previous_durable_checkpoint() {
    let mut first = Accountant::new(GoodputTotals::default());
    first.training_started(0.0);
    let mut now = 0.0;
    let mut in_flight = None;
    let mut record = None;
    for i in 1..=20_u64 {
        if i == 12 {
            first.begin(Bucket::CheckpointSave, now);
            now += 0.25;
            first.end(Bucket::CheckpointSave, now);
            first.checkpoint_durable(in_flight.take().unwrap(), now);
            record = Some((first.snapshot(now), now));
        }
        now += 1.0;
        first.iteration_completed(now);
        if i % 10 == 0 {
            first.begin(Bucket::CheckpointSave, now);
            in_flight = Some(first.coverage(now));
            now += 0.25;
            first.end(Bucket::CheckpointSave, now);
        }
    }
    assert!(in_flight.is_some(), "the save of 20 is in flight");
    let died_at = now + 0.5; // killed while the write runs
    let (totals, record_at) = record.unwrap();
    assert_eq!((totals.productive_iterations, totals.pending_iterations), (10, 1), "the record of the finalize of 10");
    let record = ProgressRecord {
        run_id: "r".into(),
        iteration: 11,
        checkpoint_iteration: Some(10),
        totals,
        written_at: None,
        normal_end: false,
    };
    let dead = DeadProgress { completed: Some(20), unseen_seconds: died_at - record_at };
    let resumed = Accountant::new(record.resume_totals(10, Some(dead))).snapshot(0.0);
    assert_eq!((resumed.lost_iterations, resumed.productive_iterations, resumed.pending_iterations), (10, 10, 0));
    // The loop time of 11 to 20, the dispatch of 20 and the half second
    // after it: everything of the attempt after the finalize of 10 but the
    // finalize itself (save time) and iteration 11's second before it.
    let lost = resumed.seconds(Bucket::LostProgress);
    assert!((lost - (1.0 + (died_at - record_at))).abs() < 1e-9, "{lost}");
    assert!((resumed.total_seconds() - died_at).abs() < 1e-9, "{resumed:?}");
    // The record alone knew of iteration 11 only.
    assert_eq!(record.resume_totals(10, None).lost_iterations, 1);
}

/// The record lags a checkpoint that became durable just before the crash
/// (the spool says 22 completed; the run resumes from 20): what the
/// checkpoint covers is kept, only 21 and 22 are lost, and the pending time
/// is shared in proportion.
#[test]
fn iterations_a_newer_checkpoint_covers_are_kept_and_only_the_rest_is_lost() {
    let mut totals = GoodputTotals::default();
    (totals.productive_iterations, totals.pending_iterations) = (10, 5);
    totals.set_seconds(Bucket::Productive, 10.0);
    totals.set_seconds(Bucket::Pending, 5.0);
    let resumed = totals.resume_exactly(15, 20, DeadProgress { completed: Some(22), unseen_seconds: 7.0 });
    assert_eq!((resumed.productive_iterations, resumed.lost_iterations, resumed.pending_iterations), (20, 2, 0));
    assert_eq!(resumed.seconds(Bucket::Productive), 20.0);
    assert_eq!(resumed.seconds(Bucket::LostProgress), 2.0);
    assert_eq!(resumed.total_seconds(), 22.0);
    // After a normal end nothing is pending: the tail is `other`, nothing lost.
    let mut clean = GoodputTotals::default();
    clean.productive_iterations = 40;
    let resumed = clean.resume_exactly(40, 40, DeadProgress { completed: Some(40), unseen_seconds: 0.5 });
    assert_eq!((resumed.lost_iterations, resumed.seconds(Bucket::LostProgress)), (0, 0.0));
    assert_eq!(resumed.seconds(Bucket::Other), 0.5);
}

#[test]
fn a_spool_older_than_the_record_is_not_its_writers() {
    let written = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_650_000);
    let later = DeadProgress::from_spool(Some(17), written + Duration::from_millis(6500), Some(written));
    assert_eq!(later, Some(DeadProgress { completed: Some(17), unseen_seconds: 6.5 }));
    // The stamp is refreshed every second: a little older is the same writer.
    let just_before = DeadProgress::from_spool(Some(17), written - Duration::from_millis(800), Some(written));
    assert_eq!(just_before, Some(DeadProgress { completed: Some(17), unseen_seconds: 0.0 }));
    let stale = written - SPOOL_STALENESS - Duration::from_secs(1);
    assert_eq!(DeadProgress::from_spool(Some(9), stale, Some(written)), None);
    // A record of an older version has no time: the spool is taken, the
    // unseen time is not known.
    assert_eq!(
        DeadProgress::from_spool(Some(9), stale, None),
        Some(DeadProgress { completed: Some(9), unseen_seconds: 0.0 })
    );
}

/// Where a rollback inside an attempt goes back to.
#[derive(Clone, Copy, Debug)]
enum RollBack {
    /// The checkpoint the attempt started from.
    Start,
    /// The checkpoint of the latest save (its coverage, as taken).
    LatestSave,
    /// A checkpoint whose save the attempt did not see, after that many of
    /// its iterations.
    Unseen(u64),
    /// A checkpoint that many iterations older than the attempt's start.
    Earlier(u64),
}

fn roll_back(acc: &mut Accountant, target: RollBack, now: f64, latest_save: Option<Coverage>) {
    match target {
        RollBack::Start => acc.roll_back(Coverage::default(), now),
        RollBack::LatestSave => acc.roll_back(latest_save.unwrap_or_default(), now),
        RollBack::Unseen(iterations) => acc.roll_back(acc.coverage_of(iterations), now),
        RollBack::Earlier(iterations) => {
            acc.forfeit_earlier(iterations);
            acc.roll_back(Coverage::default(), now);
        }
    }
}

proptest! {
    /// Rollbacks inside an attempt, anywhere among its events: time and
    /// iterations only move (every iteration ever completed, and every one
    /// the earlier attempts kept, is still kept, pending or lost; the
    /// buckets still sum to the earlier attempts' time plus the latest time
    /// seen), nothing is pending right after one, and the attempt is
    /// counted once.
    #[test]
    fn a_rollback_moves_time_and_iterations_and_never_adds_or_drops_any(
        prior_productive in 0_u64..20,
        prior_seconds in 0.0..100.0_f64,
        events in prop::collection::vec((
            prop_oneof![
                3 => event().prop_map(Ok),
                1 => prop_oneof![
                    Just(RollBack::Start),
                    Just(RollBack::LatestSave),
                    (0_u64..30).prop_map(RollBack::Unseen),
                    (0_u64..30).prop_map(RollBack::Earlier),
                ].prop_map(Err),
            ],
            -1.0..10.0_f64,
        ), 0..60),
    ) {
        let mut prior = GoodputTotals::default();
        prior.productive_iterations = prior_productive;
        prior.set_seconds(Bucket::Productive, prior_seconds);
        prior.attempts = 1;
        let mut acc = Accountant::new(prior);
        let (mut now, mut latest) = (0.0_f64, 0.0_f64);
        let mut latest_save: Option<Coverage> = None;
        let mut completed = 0_u64;
        for (step, dt) in events {
            now += dt;
            latest = latest.max(now);
            match step {
                Ok(event) => {
                    if matches!(event, Event::Iteration) {
                        completed += 1;
                    }
                    apply(&mut acc, event, now, &mut latest_save);
                }
                Err(target) => {
                    roll_back(&mut acc, target, now, latest_save);
                    let snap = acc.snapshot(now);
                    prop_assert_eq!(snap.pending_iterations, 0, "{:?}", snap);
                }
            }
            let snap = acc.snapshot(now);
            prop_assert!(snap.buckets().all(|(_, s)| s >= 0.0), "{:?}", snap);
            prop_assert_eq!(
                snap.productive_iterations + snap.pending_iterations + snap.lost_iterations,
                prior_productive + completed
            );
            prop_assert_eq!(snap.attempts, 2);
            let expected = prior.total_seconds() + latest;
            prop_assert!((snap.total_seconds() - expected).abs() <= 1e-6 * expected.max(1.0),
                "{} vs {expected}", snap.total_seconds());
        }
    }
}

/// An attempt that resumed from the checkpoint of 10 (the earlier one kept
/// 10 iterations in 10 s), completes 11 to 15, saves 14 and goes back to
/// it, then to the checkpoint of 8, older than its start: each rollback
/// charges exactly what follows its checkpoint.
#[test]
fn a_rollback_loses_exactly_what_follows_its_checkpoint_even_before_the_attempts_start() {
    let mut prior = GoodputTotals::default();
    prior.productive_iterations = 10;
    prior.set_seconds(Bucket::Productive, 10.0);
    prior.attempts = 1;
    let mut acc = Accountant::new(prior);
    acc.training_started(1.0);
    let mut now = 1.0;
    let mut fourteen = None;
    for i in 11..=15 {
        now += 1.0;
        acc.iteration_completed(now);
        if i == 14 {
            fourteen = Some(acc.coverage(now));
            acc.checkpoint_durable(fourteen.unwrap(), now);
        }
    }
    acc.roll_back(fourteen.unwrap(), now);
    let back = acc.snapshot(now);
    assert_eq!((back.productive_iterations, back.lost_iterations, back.pending_iterations), (14, 1, 0));
    assert_eq!((back.seconds(Bucket::Productive), back.seconds(Bucket::LostProgress)), (14.0, 1.0));
    assert_eq!((back.total_seconds(), back.attempts), (10.0 + now, 2));

    // Back to the checkpoint of 8: 9 and 10 (the earlier attempt's) and 11
    // to 14 (this one's) are computed again.
    acc.forfeit_earlier(10 - 8);
    acc.roll_back(Coverage::default(), now);
    let older = acc.snapshot(now);
    assert_eq!((older.productive_iterations, older.lost_iterations, older.pending_iterations), (8, 7, 0));
    assert_eq!((older.seconds(Bucket::Productive), older.seconds(Bucket::LostProgress)), (8.0, 7.0));
    assert_eq!((older.total_seconds(), older.attempts), (10.0 + now, 2));

    // A checkpoint whose save the attempt did not see: its share of the
    // loop time, in proportion.
    for _ in 9..=12 {
        now += 2.0;
        acc.iteration_completed(now);
    }
    acc.roll_back(acc.coverage_of(11 - 8), now);
    let unseen = acc.snapshot(now);
    assert_eq!((unseen.productive_iterations, unseen.lost_iterations), (11, 8));
    assert_eq!(unseen.seconds(Bucket::LostProgress), 7.0 + 2.0, "one iteration of 2 s");
    assert_eq!(unseen.total_seconds(), 10.0 + now);
}

/// A FIFO where the progress record goes once blocked the resume forever
/// (reading waits for a writer), and a huge file was read whole: each is
/// refused at once, naming the file and what is there (bounded here, so
/// that a hang fails the test).
#[test]
fn a_progress_record_that_is_not_a_small_regular_file_is_refused_at_once() {
    let read = |dir: std::path::PathBuf| {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || sender.send(ProgressRecord::read(&dir).err().map(|e| e.to_string())));
        receiver.recv_timeout(Duration::from_secs(10)).expect("read returned")
    };
    let fifo_dir = temp_dir("record-fifo");
    let fifo = fifo_dir.join(PROGRESS_RECORD_FILE);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());
    assert_eq!(
        read(fifo_dir.clone()),
        Some(format!("{}: it is a FIFO (named pipe), not a regular file", fifo.display()))
    );
    let huge_dir = temp_dir("record-huge");
    let huge = huge_dir.join(PROGRESS_RECORD_FILE);
    std::fs::File::create(&huge).unwrap().set_len(2 << 20).unwrap();
    assert_eq!(
        read(huge_dir.clone()),
        Some(format!(
            "{}: it is 2097152 bytes long, more than the 1048576 bytes (1 MiB) a progress record may hold",
            huge.display()
        ))
    );
    let _ = std::fs::remove_dir_all(&fifo_dir);
    let _ = std::fs::remove_dir_all(&huge_dir);
}
