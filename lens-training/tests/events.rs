//! The event API as a program sees it, against the SDK's in-memory
//! exporters: one call per event opens its span (stamped with
//! `dl.training.event`), marks its phase and informs goodput together; the
//! per-rank counters are cumulative and move with the iterations; an
//! asynchronous save is kept only at its finalize; a resume reads a
//! progress record written under the schema before the rename; and the
//! export the run leaves is read back by the goodput view.
//!
//! Telemetry setup is process-global: the tests take turns.

#![cfg(feature = "testing")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lens_fallbacks::config::LensConfig;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::otlp_file::{AttributeValue, SpanRecord};
use lens_fallbacks::{RankContext, SetupOptions, Telemetry, setup_telemetry};
use lens_training::events::{Event, SpanName, SpanNames};
use lens_training::goodput::{Bucket, ProgressRecord};
use lens_training::goodput_view::{Attempt, breakdown};
use lens_training::names::{EVENT_ATTRIBUTE, ITERATIONS, PHASE_ATTRIBUTE, PHASE_TIME};
use lens_training::phases::{Phase, PhaseTotals};
use lens_training::rank_metrics::RankMetrics;
use lens_training::{RankCoordinates, Training, TrainingOptions};
use opentelemetry::Value;
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::trace::SpanData;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Run {
    telemetry: Arc<Telemetry>,
    spans: KeepingSpanExporter,
    metrics: InMemoryMetricExporter,
}

fn setup(rank_metrics: bool) -> Run {
    setup_as(rank_metrics, &RankContext::SINGLE)
}

/// [`setup`] as the rank `rank` of a job, every rank exporting.
fn setup_as(rank_metrics: bool, rank: &RankContext) -> Run {
    let spans = KeepingSpanExporter::default();
    let metrics = InMemoryMetricExporter::default();
    let config = LensConfig {
        enabled: true,
        rank_metrics,
        span_groups: "all".to_string(),
        run_id: "events-test".to_string(),
        rank_strategy: "all_ranks".to_string(),
        ..LensConfig::default()
    };
    let options = SetupOptions::new()
        .with_env(BTreeMap::<String, String>::new())
        .with_span_exporter(spans.clone())
        .with_metric_exporter(metrics.clone());
    let telemetry = setup_telemetry(&config, rank, Vec::new(), options).expect("setup");
    Run { telemetry: Arc::new(telemetry), spans, metrics }
}

impl Run {
    fn finish(self) -> (Vec<SpanData>, InMemoryMetricExporter) {
        let telemetry = Arc::try_unwrap(self.telemetry).expect("the only handle");
        let report = telemetry.shutdown(Duration::from_secs(5));
        assert!(report.completed(), "{report:?}");
        (self.spans.get_finished_spans().unwrap_or_default(), self.metrics)
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lens-training-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
}

fn event_of(span: &SpanData) -> Option<String> {
    attribute(span, EVENT_ATTRIBUTE).map(Value::to_string)
}

/// The latest cumulative value of a counter, per value of `phase` (empty
/// key for a counter without it).
fn counter_values(metrics: &InMemoryMetricExporter, name: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for rm in metrics.get_finished_metrics().unwrap() {
        for sm in rm.scope_metrics() {
            for metric in sm.metrics().filter(|m| m.name() == name) {
                fn phase<'a>(mut attributes: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> String {
                    attributes
                        .find(|kv| kv.key.as_str() == PHASE_ATTRIBUTE)
                        .map_or_else(String::new, |kv| kv.value.to_string())
                }
                match metric.data() {
                    AggregatedMetrics::F64(MetricData::Sum(sum)) => {
                        for point in sum.data_points() {
                            out.insert(phase(point.attributes()), point.value());
                        }
                    }
                    AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                        for point in sum.data_points() {
                            out.insert(phase(point.attributes()), point.value() as f64);
                        }
                    }
                    _ => panic!("{name} is not a counter"),
                }
            }
        }
    }
    out
}

/// The attributes of the last point of the u64 counter `name`, by key.
fn last_point_attributes(metrics: &InMemoryMetricExporter, name: &str) -> BTreeMap<String, Value> {
    let mut attributes = BTreeMap::new();
    for rm in metrics.get_finished_metrics().unwrap() {
        for sm in rm.scope_metrics() {
            for metric in sm.metrics().filter(|m| m.name() == name) {
                if let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() {
                    for point in sum.data_points() {
                        attributes =
                            point.attributes().map(|kv| (kv.key.as_str().to_string(), kv.value.clone())).collect();
                    }
                }
            }
        }
    }
    attributes
}

/// The rank attributes of the points of `name`.
fn rank_keys(metrics: &InMemoryMetricExporter, name: &str) -> Vec<String> {
    last_point_attributes(metrics, name).into_keys().collect()
}

#[test]
fn each_call_opens_the_span_marks_the_phase_and_informs_goodput_together() {
    let _serial = serial();
    let run = setup(true);
    let dir = temp_dir("one-call");
    let training = Training::new(
        &run.telemetry,
        TrainingOptions::new(RankCoordinates { rank: 0, local_rank: 0, pipeline: 0, tensor: 0, data: 0 })
            .with_checkpoint_dir(&dir),
    );
    training.loop_started();
    for counter in 0..4_u64 {
        let step = training.iteration(counter);
        training.mark(Phase::Data);
        {
            let _forward = training.phase(Phase::Forward);
            assert_eq!(training.phases().snapshot().unwrap().phase, Phase::Forward);
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(step);
        if counter == 1 {
            let save = training.checkpoint_save(2);
            assert_eq!(training.phases().snapshot().unwrap().phase, Phase::Checkpoint, "the save marks the phase");
            std::thread::sleep(Duration::from_millis(20));
            save.durable();
        }
        if counter == 2 {
            let _eval = training.evaluation(3);
            assert_eq!(training.phases().snapshot().unwrap().phase, Phase::Eval);
            std::thread::sleep(Duration::from_millis(10));
        }
        if counter == 1 || counter == 3 {
            training.log_interval();
        }
    }
    let before_finish = training.totals().unwrap();
    assert_eq!((before_finish.productive_iterations, before_finish.pending_iterations), (2, 2), "{before_finish:?}");
    assert!(before_finish.seconds(Bucket::CheckpointSave) >= 0.02, "{before_finish:?}");
    assert!(before_finish.seconds(Bucket::Evaluation) >= 0.01, "{before_finish:?}");
    training.finish();
    let totals = training.totals().unwrap();
    assert_eq!((totals.productive_iterations, totals.pending_iterations), (4, 0), "a normal end keeps all");
    drop(training);
    let (spans, metrics) = run.finish();

    // The spans: generic names, each stamped with its event.
    let stamped: Vec<(String, Option<String>)> = spans.iter().map(|s| (s.name.to_string(), event_of(s))).collect();
    let count =
        |name: &str, event: &str| stamped.iter().filter(|(n, e)| n == name && e.as_deref() == Some(event)).count();
    assert_eq!(count("dl.training.iteration", "iteration"), 4, "{stamped:?}");
    assert_eq!(count("dl.training.checkpoint.save", "checkpoint_save"), 1, "{stamped:?}");
    assert_eq!(count("dl.training.evaluate", "evaluation"), 1, "{stamped:?}");
    assert_eq!(count("dl.training.startup", "startup"), 1, "{stamped:?}");
    assert_eq!(count("dl.training.shutdown", "shutdown"), 1, "{stamped:?}");
    assert_eq!(stamped.iter().filter(|(n, _)| n == "dl.training.forward").count(), 4, "a span per forward phase");
    let save = spans.iter().find(|s| s.name == "dl.training.checkpoint.save").unwrap();
    assert_eq!(attribute(save, "dl.training.checkpoint.durable"), Some(&Value::Bool(true)));
    assert_eq!(attribute(save, "dl.training.iteration"), Some(&Value::I64(2)));
    let iterations: Vec<i64> = spans
        .iter()
        .filter(|s| s.name == "dl.training.iteration")
        .filter_map(|s| match attribute(s, "dl.training.iteration") {
            Some(Value::I64(i)) => Some(*i),
            _ => None,
        })
        .collect();
    assert_eq!(iterations, [1, 2, 3, 4], "the iteration each span completes");

    // The counters: cumulative, four iterations, the forward time of all four.
    assert_eq!(counter_values(&metrics, ITERATIONS.name)[""], 4.0);
    let phase_time = counter_values(&metrics, PHASE_TIME.name);
    assert!(phase_time["forward"] >= 0.02, "4 x 5 ms of forward: {phase_time:?}");
    assert!(phase_time["checkpoint"] >= 0.02, "{phase_time:?}");
    assert!(phase_time["eval"] >= 0.01, "{phase_time:?}");
    assert!(!phase_time.contains_key("other"), "`other` is not exported: {phase_time:?}");
    assert_eq!(
        rank_keys(&metrics, ITERATIONS.name),
        ["dl.data_parallel.rank", "dl.local_rank", "dl.pipeline_parallel.rank", "dl.rank", "dl.tensor_parallel.rank"]
    );
    // The progress record beside the checkpoints, under the new schema.
    let record = std::fs::read_to_string(dir.join("goodput.json")).unwrap();
    assert!(
        record.contains("\"schema\": \"dl.goodput.progress/1\"")
            && record.contains("\"productive_iterations\": 4")
            && record.contains("\"normal_end\": true")
            && record.contains("\"attempts\": 1"),
        "finish waits for the final record: {record}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Totals read on two threads (the training thread at a log interval, the
/// hang watchdog before its flush) may reach the counters in either order:
/// totals older than those recorded add nothing, and the next ones add only
/// what is new, so nothing is counted twice (before the fix, the older
/// totals became the recorded ones and the next record counted again).
#[test]
fn per_rank_counters_given_older_totals_count_nothing_twice() {
    let _serial = serial();
    let run = setup(true);
    let metrics =
        RankMetrics::new(&run.telemetry, RankCoordinates { rank: 0, local_rank: 0, pipeline: 0, tensor: 0, data: 0 });
    let totals = |iterations: u64, forward_s: u64| {
        let mut totals = PhaseTotals { iterations, step_ns: forward_s * 1_000_000_000, ..PhaseTotals::default() };
        totals.phase_ns[Phase::Forward.index()] = forward_s * 1_000_000_000;
        totals
    };
    metrics.record(&totals(5, 2));
    // Read before the record above, recorded after it.
    metrics.record(&totals(3, 1));
    metrics.record(&totals(6, 3));
    drop(metrics);
    let (_, exported) = run.finish();
    assert_eq!(counter_values(&exported, ITERATIONS.name)[""], 6.0, "the latest totals' 6 iterations");
    assert_eq!(counter_values(&exported, PHASE_TIME.name)["forward"], 3.0, "the latest totals' 3 s of forward");
}

/// A rank of a multi-rank job that builds its options from telemetry's
/// rank (`for_rank`) has its counters under its own rank, not rank 0's.
#[test]
fn options_for_telemetry_s_rank_put_the_counters_under_that_rank() {
    let _serial = serial();
    let rank = RankContext { rank: 2, world_size: 4, local_rank: 2, node_rank: None };
    let run = setup_as(true, &rank);
    let training = Training::new(&run.telemetry, TrainingOptions::for_rank(run.telemetry.rank()));
    for counter in 0..3 {
        drop(training.iteration(counter));
    }
    training.finish();
    drop(training);
    let (_, exported) = run.finish();
    let attributes = last_point_attributes(&exported, ITERATIONS.name);
    assert_eq!((&attributes["dl.rank"], &attributes["dl.local_rank"]), (&Value::I64(2), &Value::I64(2)));
    assert_eq!(counter_values(&exported, ITERATIONS.name)[""], 3.0);
}

#[test]
fn an_async_save_is_kept_at_its_finalize_and_a_resume_reads_the_old_schema() {
    let _serial = serial();
    let run = setup(false);
    let dir = temp_dir("async-resume");
    // A record written by a version before the rename: 3 iterations
    // pending beyond the checkpoint of iteration 2, dead after 10 s.
    std::fs::write(
        dir.join("goodput.json"),
        r#"{
  "schema": "megatron.goodput.progress/1",
  "run_id": "old-run",
  "iteration": 5,
  "checkpoint_iteration": 2,
  "attempts": 1,
  "productive_iterations": 2,
  "pending_iterations": 3,
  "lost_iterations": 0,
  "seconds": {"productive": 4.0, "pending": 3.0, "startup": 2.0, "checkpoint_save": 1.0, "checkpoint_load": 0.0, "evaluation": 0.0, "lost_progress": 0.0, "other": 0.0}
}
"#,
    )
    .unwrap();
    let training = Training::new(&run.telemetry, TrainingOptions::new(RankCoordinates::SINGLE));
    {
        let load = training.checkpoint_load();
        load.resumed(&dir, 2);
    }
    let resumed = training.totals().unwrap();
    assert_eq!(resumed.attempts, 2, "{resumed:?}");
    assert_eq!((resumed.lost_iterations, resumed.productive_iterations), (3, 2), "{resumed:?}");
    assert_eq!(resumed.seconds(Bucket::LostProgress), 3.0, "the dead attempt's pending time: {resumed:?}");
    assert_eq!(resumed.seconds(Bucket::Productive), 4.0);

    training.loop_started();
    drop(training.iteration(2));
    let pending = training.checkpoint_save(3).in_flight();
    drop(training.iteration(3));
    let mid = training.totals().unwrap();
    assert_eq!(mid.productive_iterations, 2, "an async save keeps nothing before its finalize: {mid:?}");
    training.checkpoint_finalize(pending).durable();
    let after = training.totals().unwrap();
    assert_eq!(after.productive_iterations, 3, "its iteration is kept at the finalize: {after:?}");
    assert_eq!(after.pending_iterations, 1, "the iteration after the save began stays pending: {after:?}");
    // A failed save keeps nothing.
    training.checkpoint_save(4).failed();
    assert_eq!(training.totals().unwrap().productive_iterations, 3);
    drop(training);
    let (spans, _) = run.finish();
    let load = spans.iter().find(|s| s.name == "dl.training.checkpoint.load").unwrap();
    assert_eq!(attribute(load, "dl.training.iteration"), Some(&Value::I64(2)));
    let save = spans.iter().find(|s| s.name == "dl.training.checkpoint.save").unwrap();
    assert_eq!(attribute(save, "dl.training.checkpoint.async"), Some(&Value::Bool(true)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The spans of a run, as a file export gives them back.
fn records(spans: &[SpanData]) -> Vec<SpanRecord> {
    let ns =
        |t: std::time::SystemTime| u64::try_from(t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()).unwrap();
    spans
        .iter()
        .map(|s| SpanRecord {
            file_rank: 0,
            name: s.name.to_string(),
            start_unix_nano: ns(s.start_time),
            end_unix_nano: ns(s.end_time),
            attributes: s
                .attributes
                .iter()
                .map(|kv| {
                    let value = match &kv.value {
                        Value::I64(i) => AttributeValue::Int(*i),
                        Value::Bool(b) => AttributeValue::Bool(*b),
                        Value::String(v) => AttributeValue::String(v.to_string()),
                        _ => AttributeValue::Other,
                    };
                    (kv.key.as_str().to_string(), value)
                })
                .collect(),
        })
        .collect()
}

#[test]
fn renamed_spans_are_recognized_by_their_stamp() {
    let _serial = serial();
    let run = setup(false);
    // A program of its own names: the view reads the stamp, not the name.
    let names = SpanNames::generic()
        .with_event(Event::Iteration, Some(SpanName::new(lens_fallbacks::SpanGroup::STEP, "myjob.step")))
        .with_event(Event::CheckpointSave, Some(SpanName::new(lens_fallbacks::SpanGroup::CHECKPOINT, "myjob.save")));
    let training = Training::new(&run.telemetry, TrainingOptions::new(RankCoordinates::SINGLE).with_spans(names));
    training.loop_started();
    for counter in 0..3 {
        let step = training.iteration(counter);
        std::thread::sleep(Duration::from_millis(5));
        drop(step);
        if counter == 1 {
            training.checkpoint_save(2).durable();
        }
    }
    // A crash: no finish.
    drop(training);
    let (spans, _) = run.finish();
    assert!(spans.iter().any(|s| s.name == "myjob.step"));
    let view = breakdown(&[Attempt { name: "a".into(), rank: 0, spans: records(&spans) }]).unwrap();
    let t = &view.totals;
    assert_eq!((t.productive_iterations, t.pending_iterations), (2, 1), "{t:?}");
    assert_eq!(view.attempts[0].iterations, Some((1, 3)));
    assert_eq!(view.attempts[0].last_checkpoint, Some(2));
    assert!(!view.attempts[0].ended_normally);
}

#[test]
fn with_telemetry_off_nothing_is_recorded_and_nothing_fails() {
    let training = Training::disabled();
    training.loop_started();
    drop(training.iteration(0));
    training.checkpoint_save(1).durable();
    training.finish();
    assert!(!training.is_enabled());
    assert_eq!(training.totals(), None);
    assert_eq!(training.mfu(), None);
    let _ = Path::new("unused");
}

/// Generic iteration spans carry their iteration's sampling key, so that a
/// ratio sampler decides per iteration (the same on every rank) even where
/// the iterations sit inside one long-lived span of the program's (an
/// interval trace, always kept): without the key, `parentbased_traceidratio`
/// would follow that parent and keep every iteration.
#[test]
fn under_a_ratio_sampler_each_generic_iteration_follows_its_own_key_inside_an_interval_trace() {
    use lens_fallbacks::config::{OtelSettings, TracesSampler};
    use lens_fallbacks::otel::sampler::ratio_keeps_key;
    use lens_fallbacks::{
        KeyValue, SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, SpanGroup, managed_span, sampling_key,
    };

    let _serial = serial();
    let spans = KeepingSpanExporter::default();
    let config = LensConfig {
        enabled: true,
        span_groups: "all".to_string(),
        run_id: "keyed-test".to_string(),
        otel: OtelSettings { traces_sampler: TracesSampler::ParentBasedTraceIdRatio(0.5), ..OtelSettings::default() },
        ..LensConfig::default()
    };
    let options = SetupOptions::new()
        .with_env(BTreeMap::<String, String>::new())
        .with_span_exporter(spans.clone())
        .with_metric_exporter(InMemoryMetricExporter::default());
    let telemetry = Arc::new(setup_telemetry(&config, &RankContext::SINGLE, Vec::new(), options).expect("setup"));
    let restart = telemetry.restart_attempt();
    let training = Training::new(&telemetry, TrainingOptions::new(RankCoordinates::SINGLE));
    training.loop_started();
    {
        let _interval = managed_span(SpanGroup::JOB, "myjob.train", [KeyValue::new(STRUCTURAL_ATTRIBUTE, true)]);
        for counter in 0..40_u64 {
            let step = training.iteration(counter);
            drop(training.phase(Phase::Forward));
            drop(step);
        }
    }
    training.finish();
    drop(training);
    let telemetry = Arc::try_unwrap(telemetry).expect("the only handle");
    assert!(telemetry.shutdown(Duration::from_secs(5)).completed());
    let spans = spans.get_finished_spans().unwrap_or_default();

    let kept: Vec<u64> = (0..40).filter(|c| ratio_keeps_key(0.5, sampling_key("keyed-test", restart, *c))).collect();
    assert!(!kept.is_empty() && kept.len() < 40, "{kept:?}");
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    assert_eq!(named("myjob.train").len(), 1, "the interval is structure");
    let iterations = named("dl.training.iteration");
    let keys: Vec<Option<&Value>> = iterations.iter().map(|s| attribute(s, SAMPLING_KEY_ATTRIBUTE)).collect();
    let expected: Vec<Value> = kept.iter().map(|c| Value::I64(sampling_key("keyed-test", restart, *c))).collect();
    assert_eq!(keys, expected.iter().map(Some).collect::<Vec<_>>(), "exactly the kept iterations, each keyed");
    let numbers: Vec<Option<&Value>> = iterations.iter().map(|s| attribute(s, "dl.training.iteration")).collect();
    let completed: Vec<Value> = kept.iter().map(|c| Value::I64(i64::try_from(c + 1).unwrap())).collect();
    assert_eq!(numbers, completed.iter().map(Some).collect::<Vec<_>>());
    // The phase spans inside follow their iteration.
    let parents: Vec<_> = iterations.iter().map(|s| s.span_context.span_id()).collect();
    let forward: Vec<_> = named("dl.training.forward").iter().map(|s| s.parent_span_id).collect();
    assert_eq!(forward, parents);
}

/// The progress record is written off the training thread: a checkpoint
/// file system that does not answer (a FIFO at the record's temporary path,
/// whose open waits for a reader as a stalled NFS mount would) holds up no
/// iteration, log interval or durable checkpoint, and the normal end waits
/// for the final record only the flush timeout. Once the file system
/// answers, the final record is written.
#[test]
fn a_stalled_checkpoint_file_system_holds_up_neither_the_steps_nor_the_end() {
    use std::time::Instant;

    let _serial = serial();
    let run = setup(false);
    let dir = temp_dir("stalled-record");
    let temp = dir.join(format!(".goodput.json.tmp{}", std::process::id()));
    let made = std::process::Command::new("mkfifo").arg(&temp).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", temp.display());

    let telemetry = Arc::clone(&run.telemetry);
    let checkpoints = dir.clone();
    let (sent, received) = std::sync::mpsc::channel();
    let job = std::thread::spawn(move || {
        let training = Training::new(
            &telemetry,
            TrainingOptions::new(RankCoordinates::SINGLE)
                .with_checkpoint_dir(&checkpoints)
                .with_flush_timeout(Duration::from_millis(200)),
        );
        training.loop_started();
        let started = Instant::now();
        for counter in 0..6_u64 {
            drop(training.iteration(counter));
            if counter == 1 {
                training.log_interval(); // the first record: its write blocks
            }
            if counter == 3 {
                training.checkpoint_save(4).durable();
                training.log_interval();
            }
        }
        let steps = started.elapsed();
        let ending = Instant::now();
        training.finish();
        let totals = training.totals().unwrap();
        drop(training);
        let _ = sent.send((steps, ending.elapsed(), totals));
    });
    let (steps, end, totals) =
        received.recv_timeout(Duration::from_secs(10)).expect("the training thread waited on the stalled file system");
    job.join().unwrap();
    assert!(steps < Duration::from_secs(5), "the steps and log intervals: {steps:?}");
    assert!(end >= Duration::from_millis(200), "the end waits for the final record, {end:?}");
    assert!(end < Duration::from_secs(5), "but the flush timeout only: {end:?}");
    assert_eq!((totals.productive_iterations, totals.pending_iterations, totals.attempts), (6, 0, 1));

    // The file system answers: the blocked write goes through, and the final
    // record is the last one written (through the FIFO, when it was the one
    // taken first, or into the file after it).
    let (sent, received) = std::sync::mpsc::channel();
    let fifo = temp.clone();
    std::thread::spawn(move || {
        let _ = sent.send(std::fs::read_to_string(fifo).unwrap_or_default());
    });
    let through_fifo = received.recv_timeout(Duration::from_secs(10)).expect("the blocked write went on");
    assert!(through_fifo.contains("\"schema\": \"dl.goodput.progress/1\""), "{through_fifo}");
    let final_record =
        |text: &str| text.contains("\"normal_end\": true") && text.contains("\"productive_iterations\": 6");
    let path = dir.join("goodput.json");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kind = std::fs::symlink_metadata(&path).map(|m| m.file_type());
        if kind.as_ref().is_ok_and(std::fs::FileType::is_file)
            && final_record(&std::fs::read_to_string(&path).unwrap_or_default())
        {
            break;
        }
        if kind.is_ok_and(|kind| !kind.is_file()) && final_record(&through_fifo) {
            break;
        }
        assert!(Instant::now() < deadline, "the final record was never written; the FIFO got {through_fifo}");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(run.finish());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program that goes back to an older checkpoint inside its own process
/// (a loss spike: the checkpoint of 4 is loaded after the checkpoints of 6
/// and 8): the attempt is counted once, its time once (the buckets sum to
/// the wall time since it started, before and after), and iterations 5 to
/// 8 are lost progress (computed again), though the newer checkpoints had
/// kept them. Recomputed, the run keeps 8.
#[test]
fn a_rollback_inside_the_process_counts_the_attempt_and_its_time_once_and_loses_what_follows_the_checkpoint() {
    use std::time::Instant;

    let _serial = serial();
    let run = setup(false);
    let dir = temp_dir("rollback");
    let launched = Instant::now();
    let training =
        Training::new(&run.telemetry, TrainingOptions::new(RankCoordinates::SINGLE).with_checkpoint_dir(&dir));
    let created = Instant::now();
    let step = |counter: u64| {
        let step = training.iteration(counter);
        std::thread::sleep(Duration::from_millis(5));
        drop(step);
        if counter % 2 == 1 {
            training.checkpoint_save(counter + 1).durable();
            training.log_interval();
        }
    };
    training.loop_started();
    for counter in 0..8 {
        step(counter);
    }
    let before = training.totals().unwrap();
    assert_eq!((before.productive_iterations, before.attempts), (8, 1), "{before:?}");
    {
        let load = training.checkpoint_load();
        load.resumed(&dir, 4);
    }
    let seen = created.elapsed().as_secs_f64();
    let after = training.totals().unwrap();
    let bound = launched.elapsed().as_secs_f64();
    assert_eq!(after.attempts, 1, "one attempt: {after:?}");
    assert!(
        (seen..=bound).contains(&after.total_seconds()),
        "the attempt's time, once: {} not in {seen}..={bound}",
        after.total_seconds()
    );
    assert!(after.total_seconds() >= before.total_seconds(), "nothing dropped: {after:?} after {before:?}");
    assert_eq!(
        (after.productive_iterations, after.pending_iterations, after.lost_iterations),
        (4, 0, 4),
        "iterations 5 to 8 are computed again: {after:?}"
    );
    assert!(after.seconds(Bucket::LostProgress) >= 0.02, "their loop time, 4 x 5 ms at least: {after:?}");
    let moved = before.seconds(Bucket::Productive) - after.seconds(Bucket::Productive);
    assert!(moved > 0.0, "what the checkpoints of 6 and 8 had kept is lost now: {after:?}");
    // The record says so at once, for a crash before the next log interval.
    let record_path = dir.join("goodput.json");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&record_path).unwrap_or_default().contains("\"lost_iterations\": 4") {
        assert!(Instant::now() < deadline, "the rollback's record was never written");
        std::thread::sleep(Duration::from_millis(10));
    }

    for counter in 4..8 {
        step(counter);
    }
    training.finish();
    let end = training.totals().unwrap();
    let bound = launched.elapsed().as_secs_f64();
    assert_eq!(
        (end.productive_iterations, end.pending_iterations, end.lost_iterations, end.attempts),
        (8, 0, 4, 1),
        "{end:?}"
    );
    assert!(end.total_seconds() <= bound, "{} > {bound}", end.total_seconds());
    drop(training);
    let record = ProgressRecord::read(&dir).unwrap().expect("the final record");
    let t = &record.totals;
    assert_eq!((t.attempts, t.productive_iterations, t.lost_iterations, record.normal_end), (1, 8, 4, true));
    drop(run.finish());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_abandoned_iteration_is_marked_in_the_export_and_not_counted() {
    let _serial = serial();
    let run = setup(false);
    let training = Training::new(
        &run.telemetry,
        TrainingOptions::new(RankCoordinates { rank: 0, local_rank: 0, pipeline: 0, tensor: 0, data: 0 }),
    );
    training.loop_started();
    drop(training.iteration(0));
    // The second step fails (a peer died): the span ends, the iteration
    // is not completed.
    training.iteration(1).abandon();
    // The next try panics: unwinding through the guard marks it too.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _iteration = training.iteration(1);
        panic!("the step panicked (this test's panic)");
    }));
    assert!(panicked.is_err());
    assert_eq!(training.totals().unwrap().pending_iterations, 1, "only the first is completed");
    drop(training);
    let (spans, _) = run.finish();
    let iterations: Vec<&SpanData> = spans.iter().filter(|s| s.name == "dl.training.iteration").collect();
    assert_eq!(iterations.len(), 3, "{spans:?}");
    assert_eq!(attribute(iterations[0], "error.type"), None);
    for iteration in &iterations[1..] {
        assert_eq!(attribute(iteration, "error.type"), Some(&Value::from(lens_training::events::ABANDONED)));
    }
    assert_eq!(
        iterations[1].status,
        opentelemetry::trace::Status::error("the iteration did not complete: its step failed")
    );
    // The facade's own panic path marks the span too, with the panic's event.
    assert!(matches!(iterations[2].status, opentelemetry::trace::Status::Error { .. }), "{:?}", iterations[2].status);
}
