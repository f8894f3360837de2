//! The span recorder (SPEC A25): spans recorded as plain data into bounded
//! per-thread buffers reach a `SpanData` exporter with their ids, parents,
//! attributes, events, links and status; spans ended on another thread,
//! threads that exit with spans buffered, a thread that records and sleeps,
//! a full queue (dropped and counted, its spool slots given back), the
//! derived trace ids of SPEC A15 and
//! a forked child; and the direct OTLP encoder builds the same request as
//! the SDK's `SpanData` path. Run with `--features testing`.

use std::time::{Duration, Instant, SystemTime};

use lens_otel_runtime::batch::BatchConfig;
use lens_otel_runtime::exporters::testing::{InMemorySpanExporter, KeepingSpanExporter};
use lens_otel_runtime::ids::with_next_trace_id;
use lens_otel_runtime::recorder::{Recorder, RecordsAsSpanData, SpanRecord, THREAD_BUFFER, encode_request};
use lens_otel_runtime::span_record::unix_nanos;
use opentelemetry::trace::{Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;

#[path = "support/gated_exporter.rs"]
mod gated_exporter;

const FLUSH: Duration = Duration::from_secs(10);

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("lens-test").with_version("1.2.3").build()
}

fn recorder(config: BatchConfig) -> (Recorder, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    (Recorder::new(RecordsAsSpanData::new(exporter.clone(), scope()), config), exporter)
}

fn finished(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    exporter.get_finished_spans().expect("the in-memory exporter answers")
}

fn by_name<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
}

#[test]
fn recorded_spans_reach_a_span_data_exporter_with_parents_attributes_events_links_and_status() {
    let (recorder, exporter) = recorder(BatchConfig::default());
    let before = SystemTime::now();
    let root = recorder.start("megatron.train", &SpanContext::empty_context(), vec![KeyValue::new("dl.rank", 3_i64)]);
    let mut step = recorder.start("megatron.step", &root.span_context(), vec![KeyValue::new("dl.iteration", 7_i64)]);
    step.add_event("checkpoint.saved", vec![KeyValue::new("bytes", 1024_i64)]);
    step.add_link(root.span_context(), vec![KeyValue::new("why", "test")]);
    step.set_status(Status::error("loss was nan"));
    step.set_attribute(KeyValue::new("dl.loss", 2.5_f64));
    step.end();
    root.end();
    recorder.force_flush(FLUSH).expect("flush");

    let spans = finished(&exporter);
    assert_eq!(spans.len(), 2);
    let (root, step) = (by_name(&spans, "megatron.train"), by_name(&spans, "megatron.step"));
    assert_eq!(root.parent_span_id, SpanId::INVALID);
    assert_eq!(step.parent_span_id, root.span_context.span_id());
    assert_eq!(step.span_context.trace_id(), root.span_context.trace_id());
    assert!(root.span_context.is_sampled() && step.span_context.is_sampled());
    assert_ne!(step.span_context.span_id(), root.span_context.span_id());
    assert_eq!(root.attributes, vec![KeyValue::new("dl.rank", 3_i64)]);
    assert_eq!(step.attributes, vec![KeyValue::new("dl.iteration", 7_i64), KeyValue::new("dl.loss", 2.5_f64)]);
    assert_eq!(step.events.events.len(), 1);
    assert_eq!(step.events.events[0].name, "checkpoint.saved");
    assert_eq!(step.links.links[0].span_context, root.span_context);
    assert_eq!(step.status, Status::error("loss was nan"));
    assert_eq!(step.instrumentation_scope, scope());
    assert!(before <= root.start_time && root.start_time <= step.start_time);
    assert!(step.start_time <= step.end_time && step.end_time <= root.end_time);
    let counters = recorder.counters().snapshot();
    assert_eq!((counters.accepted, counters.exported, counters.dropped_queue_full), (2, 2, 0));
}

#[test]
fn a_span_ended_on_another_thread_is_exported_with_its_parent() {
    let (recorder, exporter) = recorder(BatchConfig::default());
    let root = recorder.start("serve.request", &SpanContext::empty_context(), Vec::new());
    let child = recorder.start("serve.token", &root.span_context(), Vec::new());
    let ended_elsewhere = std::thread::spawn(move || child.end());
    ended_elsewhere.join().expect("the thread ends the span");
    root.end();
    recorder.force_flush(FLUSH).expect("flush");
    let spans = finished(&exporter);
    let (root, child) = (by_name(&spans, "serve.request"), by_name(&spans, "serve.token"));
    assert_eq!(child.parent_span_id, root.span_context.span_id());
    assert_eq!(child.span_context.trace_id(), root.span_context.trace_id());
}

#[test]
fn spans_buffered_by_a_thread_that_exits_are_exported() {
    let (recorder, exporter) = recorder(BatchConfig::default());
    let worker = recorder.clone();
    std::thread::spawn(move || {
        for _ in 0..5 {
            worker.start("dataloader.batch", &SpanContext::empty_context(), Vec::new()).end();
        }
    })
    .join()
    .expect("the thread records and exits");
    recorder.force_flush(FLUSH).expect("flush");
    assert_eq!(finished(&exporter).len(), 5);
    assert_eq!(recorder.counters().snapshot().exported, 5);
}

#[test]
fn a_thread_that_records_a_few_spans_and_sleeps_has_them_exported_without_a_flush() {
    let config = BatchConfig { scheduled_delay: Duration::from_millis(20), ..BatchConfig::default() };
    let (recorder, exporter) = recorder(config);
    // Fewer than a thread's buffer: nothing is handed over by the recording thread.
    for _ in 0..3 {
        recorder.start("megatron.step", &SpanContext::empty_context(), Vec::new()).end();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while finished(&exporter).len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(finished(&exporter).len(), 3, "the export worker collects the thread's buffer at its wake");
}

#[test]
fn a_full_queue_drops_and_counts_instead_of_growing() {
    // No scheduled wake during the test: the worker collects nothing before
    // the thread's buffer is full, and the full buffer arrives in one piece.
    let config = BatchConfig {
        max_queue_size: 16,
        max_export_batch_size: 16,
        scheduled_delay: Duration::from_secs(60),
        ..BatchConfig::default()
    };
    let (recorder, exporter) = recorder(config);
    for _ in 0..THREAD_BUFFER {
        recorder.start("megatron.layer", &SpanContext::empty_context(), Vec::new()).end();
    }
    // The queue took 16; the rest was dropped and counted, not kept.
    let counters = recorder.counters().snapshot();
    assert_eq!(counters.accepted, 16);
    assert_eq!(counters.dropped_queue_full, THREAD_BUFFER as u64 - 16);
    recorder.force_flush(FLUSH).expect("flush");
    assert_eq!(finished(&exporter).len(), 16);
    assert_eq!(recorder.counters().snapshot().exported, 16);
}

#[test]
fn records_a_full_queue_drops_give_their_spool_slots_back_at_once() {
    use std::sync::Arc;

    use gated_exporter::{Gated, GatedHandle};
    use lens_otel_runtime::batch::LensBatchRecordProcessor;
    use lens_otel_runtime::spool::{SpanView, SpoolTable};

    // A queue of one and one export at a time. A first record is exported
    // and held at the gate; the worker then holds the next record while it
    // waits for the export slot (an export in flight does not count against
    // the queue's bound, a record the worker holds does), so from then on
    // the queue stays full until the gate opens.
    let gate = Arc::new(Gated::default());
    let config = BatchConfig {
        max_queue_size: 1,
        max_concurrent_exports: 1,
        scheduled_delay: Duration::from_secs(60),
        ..BatchConfig::default()
    };
    let exporter = RecordsAsSpanData::new(GatedHandle(Arc::clone(&gate)), scope());
    let processor = LensBatchRecordProcessor::new(Arc::new(exporter), config);
    let mut first = vec![sample_records().remove(0)];
    assert_eq!(processor.push_all(&mut first), 1);
    assert_eq!(gate.wait_entered(Duration::from_secs(10)), 1, "the first record's export is in flight");
    let table = SpoolTable::anonymous(8);
    processor.set_spool(Arc::clone(&table));
    let scope = scope();
    let mut records = sample_records();
    for record in &records {
        assert!(table.span_started(SpanView::of_record(record, &scope)));
    }
    assert_eq!(table.open_count(), 2);
    // The queue holds one: the first is queued, the second dropped.
    assert_eq!(processor.push_all(&mut records), 1);
    assert_eq!(processor.counters().snapshot().dropped_queue_full, 1);
    let held: Vec<SpanId> = table.open_spans().into_iter().map(|(_, span)| span.span_context.span_id()).collect();
    assert!(!held.contains(&SpanId::from(0x22_u64)), "the dropped record's slot is free at once: {held:?}");
    // With the queue full, a whole buffer is refused: every slot given back.
    let mut refused = sample_records();
    for (record, id) in refused.iter_mut().zip([0x33_u64, 0x44]) {
        let sc = &record.span_context;
        record.span_context =
            SpanContext::new(sc.trace_id(), SpanId::from(id), sc.trace_flags(), false, sc.trace_state().clone());
        assert!(table.span_started(SpanView::of_record(record, &scope)));
    }
    assert_eq!(table.open_count(), 3);
    assert_eq!(processor.push_all(&mut refused), 0);
    assert_eq!(processor.counters().snapshot().dropped_queue_full, 3);
    assert_eq!(table.open_count(), 1, "only the queued record keeps its slot");
    gate.open();
    let _ = processor.shutdown_with_timeout(FLUSH);
}

#[test]
fn after_shutdown_spans_are_refused_and_counted() {
    // Lens's keeping exporter: the SDK's in-memory one forgets at shutdown.
    let exporter = KeepingSpanExporter::new();
    let recorder = Recorder::new(RecordsAsSpanData::new(exporter.clone(), scope()), BatchConfig::default());
    recorder.start("before", &SpanContext::empty_context(), Vec::new()).end();
    recorder.shutdown(FLUSH).expect("shutdown");
    assert_eq!(exporter.names(), vec!["before".to_string()], "shutdown drains the thread's buffer");
    recorder.start("after", &SpanContext::empty_context(), Vec::new()).end();
    recorder.shutdown(Duration::from_millis(100)).expect_err("a second shutdown");
    assert_eq!(exporter.names(), vec!["before".to_string()]);
    assert_eq!(recorder.counters().snapshot().rejected_after_shutdown, 1);
}

#[test]
fn a_root_started_under_a_derived_trace_id_gets_it_and_its_children_share_it() {
    let (recorder, exporter) = recorder(BatchConfig::default());
    let derived: u128 = 0x0123_4567_89ab_cdef_0011_2233_4455_6677;
    let root =
        with_next_trace_id(derived, || recorder.start("megatron.interval", &SpanContext::empty_context(), Vec::new()));
    let child = recorder.start("megatron.step", &root.span_context(), Vec::new());
    // The override was used once: the next root draws its own id.
    let other = recorder.start("megatron.other", &SpanContext::empty_context(), Vec::new());
    child.end();
    root.end();
    other.end();
    recorder.force_flush(FLUSH).expect("flush");
    let spans = finished(&exporter);
    assert_eq!(by_name(&spans, "megatron.interval").span_context.trace_id(), TraceId::from(derived));
    assert_eq!(by_name(&spans, "megatron.step").span_context.trace_id(), TraceId::from(derived));
    assert_ne!(by_name(&spans, "megatron.other").span_context.trace_id(), TraceId::from(derived));
}

#[test]
fn a_remote_parent_keeps_its_trace_and_state_and_is_marked_remote() {
    let (recorder, exporter) = recorder(BatchConfig::default());
    let state = TraceState::from_key_value([("vendor", "x")]).expect("a valid trace state");
    let remote = SpanContext::new(TraceId::from(7_u128), SpanId::from(9_u64), TraceFlags::SAMPLED, true, state.clone());
    recorder.start("serve.request", &remote, Vec::new()).end();
    recorder.force_flush(FLUSH).expect("flush");
    let spans = finished(&exporter);
    assert_eq!(spans[0].span_context.trace_id(), TraceId::from(7_u128));
    assert_eq!(spans[0].parent_span_id, SpanId::from(9_u64));
    assert!(spans[0].parent_span_is_remote);
    assert_eq!(spans[0].span_context.trace_state(), &state);
}

fn sample_records() -> Vec<SpanRecord> {
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let root = SpanContext::new(
        TraceId::from(0xabc_u128),
        SpanId::from(0x11_u64),
        TraceFlags::SAMPLED,
        false,
        TraceState::from_key_value([("lens", "1")]).unwrap(),
    );
    let child = SpanContext::new(
        TraceId::from(0xabc_u128),
        SpanId::from(0x22_u64),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    vec![
        SpanRecord {
            name: "megatron.train".into(),
            span_context: root.clone(),
            parent_span_id: SpanId::from(0x99_u64),
            parent_span_is_remote: true,
            span_kind: SpanKind::Server,
            start_time_unix_nano: unix_nanos(start),
            end_time_unix_nano: unix_nanos(start + Duration::from_millis(5)),
            attributes: vec![
                KeyValue::new("dl.iteration", 7_i64),
                KeyValue::new("dl.loss", 2.5_f64),
                KeyValue::new("dl.phase", "train"),
                KeyValue::new("dl.checkpoint", false),
                KeyValue::new("dl.rank", 3_i64),
            ],
            dropped_attributes_count: 0,
            events: vec![Event::new("nan", start + Duration::from_millis(1), vec![KeyValue::new("x", 1_i64)], 0)],
            links: vec![Link::new(child.clone(), vec![KeyValue::new("link", "yes")], 0)],
            status: Status::error("boom"),
            spool_slot: None,
        },
        SpanRecord {
            name: "megatron.step".into(),
            span_context: child,
            parent_span_id: SpanId::from(0x11_u64),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            start_time_unix_nano: unix_nanos(start + Duration::from_millis(1)),
            end_time_unix_nano: unix_nanos(start + Duration::from_millis(2)),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Vec::new(),
            links: Vec::new(),
            status: Status::Ok,
            spool_slot: None,
        },
    ]
}

/// The resource of the encoder tests.
fn resource() -> ResourceAttributesWithSchema {
    let resource = Resource::builder_empty()
        .with_attributes([KeyValue::new("service.name", "lens-test"), KeyValue::new("dl.world_size", 8_i64)])
        .build();
    ResourceAttributesWithSchema::from(&resource)
}

#[test]
fn the_direct_encoder_and_the_span_data_path_build_the_same_otlp_request() {
    let resource = resource();
    let scope = scope();
    let direct = encode_request(sample_records(), &resource, &scope);
    let through_span_data = ExportTraceServiceRequest {
        resource_spans: group_spans_by_resource_and_scope(
            sample_records().into_iter().map(|r| r.to_span_data(&scope)).collect(),
            &resource,
        ),
    };
    assert_eq!(direct, through_span_data);
    assert_eq!(direct.resource_spans[0].scope_spans[0].spans.len(), 2);
    // And an empty batch the same way.
    let empty = ExportTraceServiceRequest { resource_spans: group_spans_by_resource_and_scope(Vec::new(), &resource) };
    assert_eq!(encode_request(Vec::new(), &resource, &scope), empty);
}

/// The sample records and one with what they lack: array, empty-string,
/// zero and `false` values, an empty name, no parent, an unset status.
#[cfg(feature = "otlp")]
fn varied_records() -> Vec<SpanRecord> {
    let mut records = sample_records();
    let mut odd = records[1].clone();
    odd.name = "".into();
    odd.span_context = SpanContext::new(
        TraceId::from(0xdef_u128),
        SpanId::from(0x33_u64),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    odd.parent_span_id = SpanId::INVALID;
    odd.span_kind = SpanKind::Consumer;
    odd.status = Status::Unset;
    odd.attributes = vec![
        KeyValue::new("dl.ranks", opentelemetry::Value::Array(vec![0_i64, 1, 2].into())),
        KeyValue::new(
            "dl.names",
            opentelemetry::Value::Array(vec!["a".into(), opentelemetry::StringValue::from("")].into()),
        ),
        KeyValue::new("", ""),
        KeyValue::new("dl.zero", 0_i64),
        KeyValue::new("dl.negative", -7_i64),
        KeyValue::new("dl.off", false),
        KeyValue::new("dl.nothing", 0.0_f64),
    ];
    odd.dropped_attributes_count = 3;
    odd.events = vec![Event::new("", SystemTime::UNIX_EPOCH, Vec::new(), 2)];
    records.push(odd);
    records
}

#[cfg(feature = "otlp")]
#[test]
fn the_protobuf_written_from_records_decodes_to_the_request_of_their_messages() {
    use lens_otel_runtime::otlp_wire::encode_request_bytes;
    use prost::Message as _;

    let resource = resource();
    let scope = InstrumentationScope::builder("lens-test")
        .with_version("1.2.3")
        .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
        .with_attributes([KeyValue::new("scope.kind", "test")])
        .build();
    for records in [varied_records(), Vec::new()] {
        let bytes = encode_request_bytes(&records, &resource, &scope);
        let decoded = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("the bytes decode");
        let messages = encode_request(records.clone(), &resource, &scope);
        assert_eq!(decoded, messages);
        // And byte for byte what prost writes for those messages.
        assert_eq!(bytes, messages.encode_to_vec());
    }
}

#[cfg(unix)]
mod fork {
    use std::io::{Read as _, Write as _};

    use super::*;

    unsafe extern "C" {
        fn fork() -> i32;
        fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
        fn _exit(code: i32) -> !;
    }

    /// A forked child's spans on its parent's recorder are dropped: the
    /// recorder's export thread is the parent's, so nothing would export
    /// them, and its locks may have been held at the fork. The child never
    /// sees the parent's buffered spans either, and the parent exports them.
    #[test]
    fn a_forked_child_records_nothing_through_its_parents_recorder() {
        let (recorder, exporter) = recorder(BatchConfig::default());
        for _ in 0..3 {
            recorder.start("parent.span", &SpanContext::empty_context(), Vec::new()).end();
        }
        let Ok((mut reader, mut writer)) = std::io::pipe() else { panic!("no pipe") };
        // SAFETY: the child records one span, reads the buffers back, writes
        // the names to a pipe and `_exit`s.
        let pid = unsafe { fork() };
        if pid == 0 {
            recorder.start("child.span", &SpanContext::empty_context(), Vec::new()).end();
            let names: Vec<String> = recorder.take_buffered().into_iter().map(|r| r.name.into_owned()).collect();
            let written = writer.write_all(names.join(",").as_bytes()).is_ok();
            drop(writer);
            // SAFETY: ends the child at once, as a forked child should.
            unsafe { _exit(if written { 0 } else { 1 }) }
        }
        assert!(pid > 0, "fork failed");
        drop(writer);
        let mut text = String::new();
        let read = reader.read_to_string(&mut text);
        let mut status = 0;
        // SAFETY: waits for the child forked above; `status` outlives the call.
        let waited = unsafe { waitpid(pid, &mut status, 0) };
        assert!(read.is_ok() && waited == pid && status == 0, "child failed: {read:?} {waited} {status}");
        assert_eq!(text, "", "the child's buffers hold neither its span nor the parent's");
        // The parent still exports its own three.
        recorder.force_flush(FLUSH).expect("flush");
        let spans = finished(&exporter);
        assert_eq!(spans.len(), 3);
        assert!(spans.iter().all(|s| s.name == "parent.span"));
    }
}
