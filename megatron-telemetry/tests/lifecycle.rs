//! The lifecycle in one process, read back through the SDK's in-memory span
//! exporter: the startup trace and its backdated phases, derived interval
//! traces and their links, the per-iteration spans and their sampling keys,
//! a second lifetime, a restart attempt, an incoming `TRACEPARENT`, a rank
//! that does not export, metrics and the worker bootstrap.
//!
//! Every test sets telemetry up (one process-global lifetime at a time), so
//! they take a lock and run one after another. The environment is a map,
//! never the process environment.

#![cfg(feature = "testing")]

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lens_fallbacks::config::CliOverrides;
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::{SetupOptions, sampling_key};
use megatron_telemetry::lifecycle::{
    LifecycleOptions, MegatronTelemetry, STARTUP_TRACE, StartupTimestamps, derived_trace_id,
};
use megatron_telemetry::metrics::TrainingValues;
use megatron_telemetry::signals;
use megatron_telemetry::taxonomy::{self, attr};
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry::{Key, Value};
use opentelemetry_sdk::trace::SpanData;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

const RUN: &str = "run-lifecycle";

fn env(extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = [
        ("MEGATRON_OTEL_ENABLED", "1"),
        ("MEGATRON_OTEL_RUN_ID", RUN),
        ("MEGATRON_OTEL_SPAN_GROUPS", "all"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

fn setup(
    env: HashMap<String, String>,
    rank: RankContext,
    options: LifecycleOptions,
) -> (MegatronTelemetry, KeepingSpanExporter) {
    let exporter = KeepingSpanExporter::default();
    let options = options.with_setup_options(SetupOptions::new().with_span_exporter(exporter.clone()));
    let telemetry = MegatronTelemetry::setup(&CliOverrides::default(), &rank, env, options).expect("setup");
    (telemetry, exporter)
}

fn finish(mut telemetry: MegatronTelemetry, exporter: &KeepingSpanExporter) -> Vec<SpanData> {
    let report = telemetry.shutdown(Duration::from_secs(5));
    assert!(report.performed);
    exporter.get_finished_spans().expect("spans")
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found = named(spans, name);
    let all: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(found.len(), 1, "expected one {name}, got {}: {all:?}", found.len());
    found[0]
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes.iter().find(|kv| kv.key == Key::from(key.to_string())).map(|kv| &kv.value)
}

fn trace_id(bytes: [u8; 16]) -> TraceId {
    TraceId::from_bytes(bytes)
}

/// A resumed run (iterations 10 to 14) with save interval 2 and some
/// startup stamps: the whole span structure Megatron emits, as exported.
#[test]
fn startup_intervals_and_iterations_have_the_documented_structure() {
    let _serial = serial();
    let stamps = StartupTimestamps {
        program_start: Some(at(1000)),
        main_entry: Some(at(1002)),
        pretrain_entry: Some(at(1005)),
        ..StartupTimestamps::default()
    };
    let options = LifecycleOptions::new().with_startup(stamps).with_model_type("GPT");
    let (mut telemetry, exporter) = setup(env(&[]), RankContext::SINGLE, options);
    let lifetime = telemetry.telemetry().lifetime_index();
    assert!(telemetry.is_exporting());
    assert!(signals::is_installed(), "an exporting rank handles SIGTERM and SIGINT");
    telemetry.record_startup_phases(&StartupTimestamps { after_inprocess: Some(at(1007)), ..stamps });

    telemetry.begin_training_loop(Some(2));
    assert!(!telemetry.startup_open());
    for iteration in 10..15_u64 {
        telemetry.loop_pass(iteration);
        drop(telemetry.ft_heartbeat(iteration));
        let step = telemetry.iteration(iteration);
        assert_eq!(step.is_first(), iteration == 10);
        step.set_skipped(iteration == 11);
        drop(step);
    }
    telemetry.end_training_loop();
    let spans = finish(telemetry, &exporter);
    assert!(!signals::is_installed(), "shutdown removes the handlers");

    // Startup: a root with the derived id, structural, backdated start.
    let startup = one(&spans, taxonomy::STARTUP.name);
    assert_eq!(startup.parent_span_id, SpanId::INVALID);
    assert_eq!(startup.span_context.trace_id(), trace_id(derived_trace_id(RUN, None, 0, lifetime, STARTUP_TRACE)));
    assert_eq!(startup.start_time, at(1000));
    assert_eq!(attribute(startup, lens_fallbacks::STRUCTURAL_ATTRIBUTE), Some(&Value::Bool(true)));
    assert_eq!(attribute(startup, attr::MODEL_TYPE), Some(&Value::from("GPT")));
    assert_eq!(attribute(startup, attr::IS_GOODPUT_SPAN), Some(&Value::Bool(true)));

    // Backdated phases: the given times, children of startup; phases with a
    // missing stamp are skipped; one recorded after setup is there too.
    for (name, start, end) in [
        (taxonomy::STARTUP_IMPORTS.name, 1000, 1002),
        (taxonomy::STARTUP_ARG_PARSE.name, 1002, 1005),
        (taxonomy::STARTUP_INPROCESS_SETUP.name, 1005, 1007),
    ] {
        let phase = one(&spans, name);
        assert_eq!((phase.start_time, phase.end_time), (at(start), at(end)), "{name}");
        assert_eq!(phase.parent_span_id, startup.span_context.span_id(), "{name}");
        assert_eq!(attribute(phase, lens_fallbacks::STRUCTURAL_ATTRIBUTE), Some(&Value::Bool(true)));
    }
    for missing in
        [taxonomy::STARTUP_IN_JOB_SETUP.name, taxonomy::STARTUP_LAUNCH_SCRIPT.name, taxonomy::PRE_STARTUP.name]
    {
        assert!(named(&spans, missing).is_empty(), "{missing} has no stamps");
    }

    // Intervals: roots at passes 0, 2, 4, i.e. iterations 10, 12, 14, with
    // derived ids, linked in a chain that starts at startup.
    let mut intervals = named(&spans, taxonomy::TRAIN.name);
    intervals.sort_by_key(|s| s.start_time);
    assert_eq!(intervals.len(), 3);
    let mut previous = startup.span_context.clone();
    for (interval, first) in intervals.iter().zip([10_u64, 12, 14]) {
        assert_eq!(interval.parent_span_id, SpanId::INVALID);
        assert_eq!(interval.span_context.trace_id(), trace_id(derived_trace_id(RUN, None, 0, lifetime, first)));
        assert_eq!(attribute(interval, lens_fallbacks::STRUCTURAL_ATTRIBUTE), Some(&Value::Bool(true)));
        assert_eq!(interval.links.len(), 1);
        assert_eq!(interval.links[0].span_context.span_id(), previous.span_id());
        assert_eq!(interval.links[0].span_context.trace_id(), previous.trace_id());
        previous = interval.span_context.clone();
    }
    assert!(
        spans.iter().all(|s| attribute(s, "nemo.span.truncated").is_none()),
        "everything was ended before shutdown"
    );

    // Iterations: children of their interval, keyed, first one wrapped.
    let iterations = named(&spans, taxonomy::TRAIN_ITERATION.name);
    assert_eq!(iterations.len(), 5);
    let first = one(&spans, taxonomy::TRAIN_FIRST_ITERATION.name);
    assert_eq!(attribute(first, attr::ITERATION), Some(&Value::I64(10)));
    for span in &iterations {
        let Some(Value::I64(iteration)) = attribute(span, attr::ITERATION).cloned() else {
            panic!("no iteration attribute");
        };
        let iteration = iteration as u64;
        let key = sampling_key(RUN, 0, iteration);
        assert_eq!(attribute(span, lens_fallbacks::SAMPLING_KEY_ATTRIBUTE), Some(&Value::I64(key)));
        assert_eq!(attribute(span, attr::SKIPPED), Some(&Value::Bool(iteration == 11)));
        let interval_first = if iteration < 12 {
            10
        } else if iteration < 14 {
            12
        } else {
            14
        };
        assert_eq!(span.span_context.trace_id(), trace_id(derived_trace_id(RUN, None, 0, lifetime, interval_first)));
        if iteration == 10 {
            assert_eq!(span.parent_span_id, first.span_context.span_id());
        } else {
            let interval = intervals.iter().find(|i| i.span_context.trace_id() == span.span_context.trace_id());
            assert_eq!(Some(span.parent_span_id), interval.map(|i| i.span_context.span_id()));
        }
    }
    let heartbeats = named(&spans, taxonomy::CHECKPOINT_FT_HEARTBEAT.name);
    assert_eq!(heartbeats.len(), 5);
    assert!(heartbeats.iter().all(|s| attribute(s, lens_fallbacks::SAMPLING_KEY_ATTRIBUTE).is_some()));
}

#[test]
fn without_a_save_interval_the_loop_is_one_interval() {
    let _serial = serial();
    for save_interval in [None, Some(0)] {
        let (mut telemetry, exporter) = setup(env(&[]), RankContext::SINGLE, LifecycleOptions::new());
        telemetry.begin_training_loop(save_interval);
        let opened: Vec<bool> = (0..5).map(|i| telemetry.loop_pass(i)).collect();
        assert_eq!(opened, [true, false, false, false, false]);
        assert!(telemetry.interval_open());
        let spans = finish(telemetry, &exporter);
        assert_eq!(named(&spans, taxonomy::TRAIN.name).len(), 1, "{save_interval:?}");
    }
}

fn interval_trace(env: HashMap<String, String>) -> (TraceId, u32, u32) {
    let (mut telemetry, exporter) = setup(env, RankContext::SINGLE, LifecycleOptions::new());
    let lifetime = telemetry.telemetry().lifetime_index();
    let restart = telemetry.telemetry().restart_attempt();
    telemetry.begin_training_loop(Some(10));
    telemetry.loop_pass(50);
    let spans = finish(telemetry, &exporter);
    (one(&spans, taxonomy::TRAIN.name).span_context.trace_id(), lifetime, restart)
}

#[test]
fn a_second_lifetime_exports_into_new_traces() {
    let _serial = serial();
    let (first, first_lifetime, _) = interval_trace(env(&[]));
    let (second, second_lifetime, _) = interval_trace(env(&[]));
    assert_eq!(second_lifetime, first_lifetime + 1);
    assert_eq!(first, trace_id(derived_trace_id(RUN, None, 0, first_lifetime, 50)));
    assert_eq!(second, trace_id(derived_trace_id(RUN, None, 0, second_lifetime, 50)));
    assert_ne!(first, second);
}

#[test]
fn a_restart_attempt_gets_new_traces() {
    let _serial = serial();
    let (restarted, lifetime, restart) = interval_trace(env(&[("SLURM_RESTART_COUNT", "1")]));
    assert_ne!(restart, 0);
    assert_eq!(restarted, trace_id(derived_trace_id(RUN, None, restart, lifetime, 50)));
    assert_ne!(restarted, trace_id(derived_trace_id(RUN, None, 0, lifetime, 50)));
}

fn startup_and_interval_traces(env: HashMap<String, String>) -> (TraceId, TraceId, u32) {
    let (mut telemetry, exporter) = setup(env, RankContext::SINGLE, LifecycleOptions::new());
    let lifetime = telemetry.telemetry().lifetime_index();
    telemetry.begin_training_loop(Some(10));
    telemetry.loop_pass(50);
    let spans = finish(telemetry, &exporter);
    let trace = |name: &str| one(&spans, name).span_context.trace_id();
    (trace(taxonomy::STARTUP.name), trace(taxonomy::TRAIN.name), lifetime)
}

/// Two launches never share a trace id: a hand resubmission of a pinned run id (no restart
/// count) that resumes at the iteration where the crashed launch opened an
/// interval gets fresh startup and interval traces, because each launch has
/// its own launch id; the lifetime index is the same in both processes.
#[test]
fn two_launches_of_one_pinned_run_id_never_share_a_trace() {
    let _serial = serial();
    for launch_variable in ["MEGATRON_OTEL_LAUNCH_ID", "NEMO_LENS_LAUNCH_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"] {
        let (startup_a, interval_a, lifetime_a) = startup_and_interval_traces(env(&[(launch_variable, "launch-a")]));
        let (startup_b, interval_b, lifetime_b) = startup_and_interval_traces(env(&[(launch_variable, "launch-b")]));
        assert_ne!(startup_a, startup_b, "{launch_variable}");
        assert_ne!(interval_a, interval_b, "{launch_variable}");
        // Each is the documented derivation, with no rank in it: every rank
        // of one launch computes the same ids.
        for (startup, interval, lifetime, launch) in
            [(startup_a, interval_a, lifetime_a, "launch-a"), (startup_b, interval_b, lifetime_b, "launch-b")]
        {
            assert_eq!(startup, trace_id(derived_trace_id(RUN, Some(launch), 0, lifetime, STARTUP_TRACE)));
            assert_eq!(interval, trace_id(derived_trace_id(RUN, Some(launch), 0, lifetime, 50)));
        }
    }
    // The configured launch id wins over SLURM's and torchrun's; torchrun's
    // default `none` is no id.
    let (_, configured, lifetime) = startup_and_interval_traces(env(&[
        ("MEGATRON_OTEL_LAUNCH_ID", "mine"),
        ("SLURM_JOB_ID", "4242"),
        ("TORCHELASTIC_RUN_ID", "elastic"),
    ]));
    assert_eq!(configured, trace_id(derived_trace_id(RUN, Some("mine"), 0, lifetime, 50)));
    let (_, none, lifetime) = startup_and_interval_traces(env(&[("TORCHELASTIC_RUN_ID", "none")]));
    assert_eq!(none, trace_id(derived_trace_id(RUN, None, 0, lifetime, 50)));
}

/// Structure is never sampled away, under `traceidratio` (which ignores the
/// parent): the spans of one loop pass follow their iteration's key, the spans inside the
/// iteration follow it, and checkpoint, evaluation and closing spans are kept
/// whatever the ratio.
#[test]
fn under_a_ratio_every_per_iteration_span_follows_its_iteration_and_structure_stays() {
    let _serial = serial();
    let env = env(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "0.5")]);
    let (mut telemetry, exporter) = setup(env, RankContext::SINGLE, LifecycleOptions::new());
    let restart = telemetry.telemetry().restart_attempt();
    telemetry.begin_training_loop(Some(10));
    for iteration in 0..40_u64 {
        telemetry.loop_pass(iteration);
        drop(telemetry.ft_heartbeat(iteration));
        {
            let _step = telemetry.iteration(iteration);
            let _fb = telemetry.span(&taxonomy::TRAIN_ITERATION_FORWARD_BACKWARD, []);
        }
        {
            let _report = telemetry.span(&taxonomy::TRAIN_ITERATION_REPORT, []);
            let _log = telemetry.span(&taxonomy::TRAIN_LOG, []);
        }
        drop(telemetry.span(&taxonomy::TRAIN_GC_COLLECT, []));
        drop(telemetry.span(&taxonomy::TRAIN_SNIFF_TEST, []));
        if (iteration + 1) % 10 == 0 {
            let _save = telemetry.exposed_save(iteration + 1);
            let _inner = telemetry.checkpoint_save(iteration + 1);
            let _write = telemetry.span(&taxonomy::CHECKPOINT_SAVE_IO_WRITE, []);
            drop(_write);
            let _eval = telemetry.evaluate();
            drop(telemetry.evaluate_step(0));
        }
    }
    drop(telemetry.span(&taxonomy::CHECKPOINT_EXIT_FINALIZE, []));
    telemetry.end_training_loop();
    let spans = finish(telemetry, &exporter);

    let kept: Vec<u64> = (0..40)
        .filter(|i| lens_fallbacks::otel::sampler::ratio_keeps_key(0.5, sampling_key(RUN, restart, *i)))
        .collect();
    assert!(!kept.is_empty() && kept.len() < 40, "{kept:?}");
    let keys: Vec<i64> = kept.iter().map(|i| sampling_key(RUN, restart, *i)).collect();
    for def in [
        &taxonomy::TRAIN_ITERATION,
        &taxonomy::CHECKPOINT_FT_HEARTBEAT,
        &taxonomy::TRAIN_ITERATION_REPORT,
        &taxonomy::TRAIN_GC_COLLECT,
        &taxonomy::TRAIN_SNIFF_TEST,
    ] {
        let found: Vec<i64> = named(&spans, def.name)
            .iter()
            .map(|s| match attribute(s, lens_fallbacks::SAMPLING_KEY_ATTRIBUTE) {
                Some(Value::I64(key)) => *key,
                other => panic!("{}: key {other:?}", def.name),
            })
            .collect();
        assert_eq!(found, keys, "{}: exactly the kept iterations", def.name);
    }
    // Inside a keyed span: follows it (one per kept iteration, below it).
    let parents: Vec<SpanId> =
        named(&spans, taxonomy::TRAIN_ITERATION.name).iter().map(|s| s.span_context.span_id()).collect();
    let fb: Vec<SpanId> =
        named(&spans, taxonomy::TRAIN_ITERATION_FORWARD_BACKWARD.name).iter().map(|s| s.parent_span_id).collect();
    assert_eq!(fb, parents);
    assert_eq!(named(&spans, taxonomy::TRAIN_LOG.name).len(), kept.len());
    // Structure, whatever the ratio.
    for def in [
        &taxonomy::CHECKPOINT_EXPOSED_SAVE,
        &taxonomy::CHECKPOINT_SAVE,
        &taxonomy::CHECKPOINT_SAVE_IO_WRITE,
        &taxonomy::EVALUATE,
        &taxonomy::EVALUATE_STEP,
    ] {
        assert_eq!(named(&spans, def.name).len(), 4, "{}", def.name);
    }
    assert_eq!(named(&spans, taxonomy::TRAIN.name).len(), 4);
    assert_eq!(named(&spans, taxonomy::CHECKPOINT_EXIT_FINALIZE.name).len(), 1);
}

#[test]
fn startup_joins_an_incoming_traceparent() {
    let _serial = serial();
    let parent_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{parent_trace}-{parent_span}-01");
    let (mut telemetry, exporter) =
        setup(env(&[("TRACEPARENT", &traceparent)]), RankContext::SINGLE, LifecycleOptions::new());
    let lifetime = telemetry.telemetry().lifetime_index();
    telemetry.begin_training_loop(None);
    telemetry.loop_pass(0);
    let spans = finish(telemetry, &exporter);

    let startup = one(&spans, taxonomy::STARTUP.name);
    assert_eq!(startup.span_context.trace_id(), TraceId::from_hex(parent_trace).unwrap());
    assert_eq!(startup.parent_span_id, SpanId::from_hex(parent_span).unwrap());
    let interval = one(&spans, taxonomy::TRAIN.name);
    assert_eq!(interval.span_context.trace_id(), trace_id(derived_trace_id(RUN, None, 0, lifetime, 0)));
    assert_eq!(interval.links[0].span_context.span_id(), startup.span_context.span_id());
}

#[test]
fn pre_startup_and_the_folded_launch_phases() {
    let _serial = serial();
    let env = env(&[
        ("SLURM_JOB_START_TIME", "900"),
        ("LENS_LAUNCH_SCRIPT_START_TIME", "950.5"),
        ("LENS_LAUNCH_SCRIPT_PRESRUN_TIME", "970"),
    ]);
    let stamps = StartupTimestamps { program_start: Some(at(990)), ..StartupTimestamps::default() };
    let (telemetry, exporter) = setup(env, RankContext::SINGLE, LifecycleOptions::new().with_startup(stamps));
    let spans = finish(telemetry, &exporter);

    let pre = one(&spans, taxonomy::PRE_STARTUP.name);
    assert_eq!((pre.start_time, pre.end_time), (at(900), at(950) + Duration::from_millis(500)));
    assert_eq!(pre.parent_span_id, SpanId::INVALID);
    let startup = one(&spans, taxonomy::STARTUP.name);
    assert_ne!(pre.span_context.trace_id(), startup.span_context.trace_id());
    assert_eq!(startup.start_time, at(950) + Duration::from_millis(500), "folded: starts at the launch script");
    let container = one(&spans, taxonomy::STARTUP_CONTAINER_LOAD.name);
    assert_eq!((container.start_time, container.end_time), (at(970), at(990)));
    assert_eq!(one(&spans, taxonomy::STARTUP_LAUNCH_SCRIPT.name).parent_span_id, startup.span_context.span_id());
    // Shut down while startup was still open: it was ended, not truncated.
    assert!(attribute(startup, "nemo.span.truncated").is_none());
}

#[test]
fn a_rank_that_does_not_export_records_nothing_and_handles_no_signal() {
    let _serial = serial();
    let rank = RankContext { rank: 0, world_size: 2, local_rank: 0, node_rank: None };
    let (mut telemetry, exporter) = setup(env(&[]), rank, LifecycleOptions::new());
    assert!(!telemetry.is_exporting());
    assert!(!signals::is_installed());
    assert!(telemetry.metrics().is_noop());
    telemetry.begin_training_loop(Some(1));
    for iteration in 0..3 {
        telemetry.loop_pass(iteration);
        drop(telemetry.iteration(iteration));
        telemetry.record_training(&TrainingValues { loss: Some(1.0), ..TrainingValues::default() });
    }
    assert!(!telemetry.interval_open());
    telemetry.shutdown(Duration::from_secs(1));
    assert!(exporter.get_finished_spans().unwrap().is_empty());
}

#[test]
fn the_worker_bootstrap_follows_an_environment_enabled_run() {
    let _serial = serial();
    let env = env(&[("MEGATRON_OTEL_SPAN_GROUPS", "default"), ("OTEL_SERVICE_NAME", "my-job")]);
    let (telemetry, exporter) = setup(env, RankContext::SINGLE, LifecycleOptions::new().with_signal_handlers(false));
    assert!(!signals::is_installed());
    let bootstrap = telemetry.worker_bootstrap();
    assert!(bootstrap.enabled, "enabled by MEGATRON_OTEL_ENABLED, without --otel-enabled");
    assert_eq!(bootstrap.service_name.as_deref(), Some("my-job"));
    assert_eq!(bootstrap.span_groups.as_deref(), Some("job,checkpoint,evaluate,first_iteration,inference"));
    assert!(bootstrap.traceparent.is_some(), "the open startup span is the worker's parent");
    drop(finish(telemetry, &exporter));

    let (off, _) = setup(HashMap::new(), RankContext::SINGLE, LifecycleOptions::new());
    let bootstrap = off.worker_bootstrap();
    assert!(!bootstrap.enabled);
    assert_eq!(bootstrap.to_env_vars("MEGATRON_OTEL"), [("MEGATRON_OTEL_ENABLED".to_string(), "0".to_string())]);
}

#[test]
fn training_metrics_are_recorded_on_the_exporting_rank() {
    use opentelemetry_sdk::metrics::InMemoryMetricExporter;
    let _serial = serial();
    let metrics = InMemoryMetricExporter::default();
    let spans = KeepingSpanExporter::default();
    let setup_options = SetupOptions::new().with_span_exporter(spans.clone()).with_metric_exporter(metrics.clone());
    let options = LifecycleOptions::new().with_setup_options(setup_options);
    let mut telemetry =
        MegatronTelemetry::setup(&CliOverrides::default(), &RankContext::SINGLE, env(&[]), options).unwrap();
    telemetry.record_training(&TrainingValues { loss: Some(2.5), ..TrainingValues::default() });
    telemetry.shutdown(Duration::from_secs(5));
    let names: Vec<String> = metrics
        .get_finished_metrics()
        .unwrap()
        .iter()
        .flat_map(|rm| rm.scope_metrics().flat_map(|sm| sm.metrics().map(|m| m.name().to_string())))
        .collect();
    assert!(names.contains(&"megatron.training.loss".to_string()), "{names:?}");
    assert!(!names.contains(&"megatron.training.grad_norm".to_string()), "only present values: {names:?}");
}
