//! What a Megatron port sees from `pipeline`, `workers` and `attributes`,
//! read back through the SDK's in-memory span exporter: a pipeline receive
//! linked to the sender's span and backdated to the wait, a worker thread's
//! span inside the span that dispatched it, the typed attributes, and
//! nothing at all with the `communication` group off.
//!
//! Every test sets telemetry up (one process-global lifetime at a time), so
//! they take a lock and run one after another.

#![cfg(feature = "testing")]

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use lens_fallbacks::config::CliOverrides;
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::otel::exporters::testing::KeepingSpanExporter;
use lens_fallbacks::{SetupOptions, managed_span};
use megatron_telemetry::attributes;
use megatron_telemetry::groups::MegatronSpanGroup;
use megatron_telemetry::lifecycle::{LifecycleOptions, MegatronTelemetry};
use megatron_telemetry::pipeline::{Direction, linked_receive, outgoing_context};
use megatron_telemetry::taxonomy::{self, attr};
use megatron_telemetry::workers::{in_worker_span, worker_context};
use opentelemetry::trace::SpanId;
use opentelemetry::{Array, Key, Value};
use opentelemetry_sdk::trace::SpanData;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn setup(groups: &str) -> (MegatronTelemetry, KeepingSpanExporter) {
    let env: HashMap<String, String> = [
        ("MEGATRON_OTEL_ENABLED", "1"),
        ("MEGATRON_OTEL_RUN_ID", "run-pipeline"),
        ("MEGATRON_OTEL_SPAN_GROUPS", groups),
        ("OTEL_METRICS_EXPORTER", "none"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let exporter = KeepingSpanExporter::default();
    let options = LifecycleOptions::new().with_setup_options(SetupOptions::new().with_span_exporter(exporter.clone()));
    let telemetry =
        MegatronTelemetry::setup(&CliOverrides::default(), &RankContext::SINGLE, env, options).expect("setup");
    (telemetry, exporter)
}

fn finish(mut telemetry: MegatronTelemetry, exporter: &KeepingSpanExporter) -> Vec<SpanData> {
    assert!(telemetry.shutdown(Duration::from_secs(5)).performed);
    exporter.get_finished_spans().expect("spans")
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
    let all: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(found.len(), 1, "expected one {name}, got {}: {all:?}", found.len());
    found[0]
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes.iter().find(|kv| kv.key == Key::from(key.to_string())).map(|kv| &kv.value)
}

#[test]
fn a_pipeline_receive_is_linked_to_the_senders_span_and_starts_with_the_wait() {
    let _serial = serial();
    let (telemetry, exporter) = setup("all");
    let group = MegatronSpanGroup::COMMUNICATION;
    let context = {
        let _send = managed_span(group, taxonomy::P2P_SEND_FORWARD.name, []);
        outgoing_context()
    };
    assert!(!context.is_empty(), "the send's context travels with the message");
    let waiting = SystemTime::now() - Duration::from_millis(250);
    {
        let _receive = managed_span(group, taxonomy::P2P_RECV_FORWARD.name, []);
        let linked = linked_receive(Direction::Forward, &context, waiting, 2, 5);
        assert!(linked.is_recording());
    }
    {
        // A damaged context still gives the receive span, without a link.
        let _receive = managed_span(group, taxonomy::P2P_RECV_BACKWARD.name, []);
        let _linked = linked_receive(Direction::Backward, b"\x00garbage", SystemTime::now(), 1, 0);
    }
    let spans = finish(telemetry, &exporter);

    let send = one(&spans, "megatron.p2p.send_forward");
    let receive = one(&spans, "megatron.p2p.recv_forward");
    let linked = one(&spans, "megatron.pp.recv_forward.linked");
    assert_eq!(linked.parent_span_id, receive.span_context.span_id(), "a child of the receive span");
    assert_eq!(linked.links.len(), 1);
    assert_eq!(linked.links[0].span_context.span_id(), send.span_context.span_id());
    assert_eq!(linked.links[0].span_context.trace_id(), send.span_context.trace_id());
    assert_eq!(linked.start_time, waiting, "backdated to the start of the wait");
    assert_eq!(attribute(linked, attr::PIPELINE_PARALLEL_RANK), Some(&Value::I64(2)));
    assert_eq!(attribute(linked, attr::MICROBATCH_ID), Some(&Value::I64(5)));

    let damaged = one(&spans, "megatron.pp.recv_backward.linked");
    assert!(damaged.links.is_empty());
    assert_eq!(damaged.parent_span_id, one(&spans, "megatron.p2p.recv_backward").span_context.span_id());
}

#[test]
fn a_worker_threads_span_sits_inside_the_span_that_dispatched_it() {
    let _serial = serial();
    let (telemetry, exporter) = setup("all");
    {
        let save = managed_span(MegatronSpanGroup::CHECKPOINT, taxonomy::CHECKPOINT_SAVE.name, []);
        attributes::set_call_index(&save, 7);
        let context = worker_context();
        let worker =
            std::thread::spawn(move || in_worker_span(&context, &taxonomy::CHECKPOINT_SAVE_IO_WRITE, 7, || "written"));
        assert_eq!(worker.join().unwrap(), "written");
    }
    {
        let finalize = managed_span(MegatronSpanGroup::CHECKPOINT, taxonomy::CHECKPOINT_SAVE_FINALIZE.name, []);
        attributes::set_call_indices(&finalize, &[3, 4]);
        attributes::set_sniff_test_tag(&finalize, Some(20));
        let empty = managed_span(MegatronSpanGroup::CHECKPOINT, taxonomy::CHECKPOINT_EXPOSED_SAVE.name, []);
        attributes::set_call_indices(&empty, &[]);
        attributes::set_update_successful(&empty, false);
        attributes::set_num_microbatches(&empty, 4);
        attributes::set_eval_iters(&empty, u64::MAX);
    }
    let spans = finish(telemetry, &exporter);

    let save = one(&spans, taxonomy::CHECKPOINT_SAVE.name);
    let write = one(&spans, taxonomy::CHECKPOINT_SAVE_IO_WRITE.name);
    assert_eq!(write.parent_span_id, save.span_context.span_id(), "not a stray root");
    assert_ne!(write.parent_span_id, SpanId::INVALID);
    assert_eq!(attribute(write, attr::NVRX_CALL_IDX), Some(&Value::I64(7)));
    assert_eq!(attribute(write, attr::IS_GOODPUT_SPAN), Some(&Value::Bool(true)));
    assert_eq!(attribute(save, attr::NVRX_CALL_IDX), Some(&Value::I64(7)));

    let finalize = one(&spans, taxonomy::CHECKPOINT_SAVE_FINALIZE.name);
    assert_eq!(attribute(finalize, attr::NVRX_CALL_IDX), Some(&Value::Array(Array::I64(vec![3, 4]))));
    assert_eq!(attribute(finalize, attr::SNIFF_TEST_TAG), Some(&Value::from("iteration      20")));
    let empty = one(&spans, taxonomy::CHECKPOINT_EXPOSED_SAVE.name);
    assert_eq!(attribute(empty, attr::NVRX_CALL_IDX), None, "nothing finalized: no attribute");
    assert_eq!(attribute(empty, attr::UPDATE_SUCCESSFUL), Some(&Value::Bool(false)));
    assert_eq!(attribute(empty, attr::NUM_MICROBATCHES), Some(&Value::I64(4)));
    assert_eq!(attribute(empty, attr::EVAL_ITERS), Some(&Value::I64(i64::MAX)), "clamped");
}

#[test]
fn with_communication_off_no_context_travels_and_no_linked_span_is_made() {
    let _serial = serial();
    let (telemetry, exporter) = setup("checkpoint");
    assert!(outgoing_context().is_empty());
    let linked = linked_receive(Direction::Forward, b"", SystemTime::now(), 0, 0);
    assert!(!linked.is_recording());
    drop(linked);
    let spans = finish(telemetry, &exporter);
    assert!(spans.iter().all(|s| !s.name.starts_with("megatron.pp.")), "{spans:?}");
}
