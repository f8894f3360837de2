//! Goodput accounting as a job owner reads it: the buckets always sum to the
//! wall time and only durable checkpoints keep iterations (properties over
//! arbitrary event sequences), a crash's pending time becomes lost progress
//! in the next attempt, a failed save keeps nothing, an asynchronous save
//! keeps its iterations only at its finalize, a clean run loses nothing,
//! and the progress record survives a round trip while bad content is a
//! clear error, never a panic.

use lens_training::goodput::{Accountant, Bucket, Coverage, GoodputTotals, PROGRESS_RECORD_FILE, ProgressRecord};
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
    };
    record.write_atomic(&dir).unwrap();
    assert_eq!(ProgressRecord::read(&dir).unwrap(), Some(record));
    // Nothing but the record is left behind.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, [PROGRESS_RECORD_FILE]);

    for (content, says) in [
        ("not json", "is not a goodput progress record"),
        ("{\"schema\": \"something/9\"}", "schema \"something/9\""),
        (
            "{\"schema\": \"megatron.goodput.progress/1\", \"iteration\": 3, \"attempts\": 1, \
             \"productive_iterations\": 0, \"pending_iterations\": 0, \"lost_iterations\": 0, \
             \"seconds\": {\"productive\": -1}}",
            "seconds.productive is not a non-negative number",
        ),
    ] {
        std::fs::write(dir.join(PROGRESS_RECORD_FILE), content).unwrap();
        let error = ProgressRecord::read(&dir).unwrap_err().to_string();
        assert!(error.contains(says), "{error}");
        assert!(error.contains(PROGRESS_RECORD_FILE), "{error}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
