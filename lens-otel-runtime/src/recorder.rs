//! Recording spans off the job's thread (SPEC A25, issue 24).
//!
//! The SDK builds its span object on the thread that starts the span and
//! hands it to the processor there. The recorder keeps the calling thread's
//! part to plain data: the caller makes the sampling decision at span start
//! (on its own thread, so the `traceparent` flag is known and a dropped span
//! costs nothing more), then an enabled span is a [`RecordingSpan`] holding
//! a [`SpanRecord`]: its name, ids drawn from the per-thread generator of
//! [`ids`](crate::ids) (independent of the program's seed, re-seeded in a
//! forked child, honouring [`with_next_trace_id`](crate::ids::with_next_trace_id)
//! for the derived interval trace ids of SPEC A15), a clock read at start and
//! end, its attributes, events and links by value, and its parent. Ending
//! it appends the record to a bounded buffer of the ending thread (which
//! need not be the starting one).
//!
//! - **Bounded.** A thread's buffer holds at most [`THREAD_BUFFER`] records;
//!   when it is full, the whole buffer is handed to the batch processor's
//!   queue under one lock ([`LensBatchRecordProcessor`]), whose bound and
//!   counting are the span pipeline's: records the queue cannot take are
//!   dropped and counted as `dropped_queue_full`. There is no overflow queue.
//! - **Collected.** Every buffer is registered with its recorder: a flush,
//!   shutdown and the export worker's scheduled wake collect what the
//!   threads hold, so a thread that records a few spans and then sleeps, or
//!   exits, still has them exported (an exiting thread also hands its buffer
//!   over from its thread-local destructor).
//! - **Fork.** Buffers remember the fork generation they were made in; in a
//!   forked child the parent's records are discarded (they are the parent's
//!   to export) and the child's threads get fresh buffers.
//! - **Export.** On the export thread, records become the OTLP request
//!   directly ([`encode_request`]: the prost types of `opentelemetry-proto`,
//!   no SDK span object), through the processor's exporter seam
//!   ([`BatchExporter`]); an exporter that consumes the SDK's `SpanData`
//!   (file, console, a program's own, the in-memory test exporter) gets
//!   [`SpanRecord::to_span_data`] copies instead ([`RecordsAsSpanData`]).
//!   The two produce the same request (the differential test in
//!   `tests/recorder.rs`).
//!
//! ```
//! # #[cfg(feature = "testing")] {
//! use std::time::Duration;
//! use lens_otel_runtime::batch::BatchConfig;
//! use lens_otel_runtime::exporters::testing::InMemorySpanExporter;
//! use lens_otel_runtime::recorder::{RecordsAsSpanData, Recorder};
//! use opentelemetry::InstrumentationScope;
//! use opentelemetry::trace::SpanContext;
//!
//! let exporter = InMemorySpanExporter::default();
//! let scope = InstrumentationScope::builder("doc").build();
//! let recorder = Recorder::new(RecordsAsSpanData::new(exporter.clone(), scope), BatchConfig::default());
//! let parent = recorder.start("megatron.train", &SpanContext::empty_context(), Vec::new());
//! recorder.start("megatron.step", &parent.span_context(), Vec::new()).end();
//! parent.end();
//! recorder.force_flush(Duration::from_secs(5)).unwrap();
//! let spans = exporter.get_finished_spans().unwrap();
//! assert_eq!(spans.len(), 2);
//! assert_eq!(spans[0].parent_span_id, spans[1].span_context.span_id());
//! # }
//! ```

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{IdGenerator as _, SpanData, SpanExporter};

use crate::batch::{BatchConfig, BatchExporter, ExportFuture, LensBatchRecordProcessor, Payload, SpanExportCounters};
use crate::ids::{SeedIndependentIdGenerator, fork_generation};
use crate::span_record::now_unix_nano;
pub use crate::span_record::{SpanRecord, encode_request};

/// The most records a thread's buffer holds before it is handed to the
/// export queue (one lock per this many spans).
pub const THREAD_BUFFER: usize = 128;

/// Says once, in a process forked from the one that set telemetry up, that
/// its spans are not exported (the recorder's export thread is the
/// parent's).
#[cold]
fn forked_child_records_nothing() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::diag::warn(format_args!(
            "process {} was forked after telemetry was set up: the spans it records are not exported (telemetry \
             exports from the process that set it up); set telemetry up again in this process to export its own",
            std::process::id()
        ));
    }
}

/// An open span being recorded: plain data until [`RecordingSpan::end`].
/// It may be moved to another thread and ended there. Dropping it ends it.
pub struct RecordingSpan {
    record: Option<SpanRecord>,
    recorder: Recorder,
}

impl fmt::Debug for RecordingSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingSpan").field("record", &self.record).finish_non_exhaustive()
    }
}

impl RecordingSpan {
    /// The span's context (for children, `traceparent` and links).
    pub fn span_context(&self) -> SpanContext {
        self.record.as_ref().map_or_else(SpanContext::empty_context, |r| r.span_context.clone())
    }

    /// Adds or replaces nothing: appends `attribute` (as the SDK does).
    pub fn set_attribute(&mut self, attribute: KeyValue) {
        if let Some(record) = &mut self.record {
            record.attributes.push(attribute);
        }
    }

    /// Adds an event at the current time.
    pub fn add_event(&mut self, name: impl Into<Cow<'static, str>>, attributes: Vec<KeyValue>) {
        if let Some(record) = &mut self.record {
            record.events.push(Event::new(name, SystemTime::now(), attributes, 0));
        }
    }

    /// Adds a link.
    pub fn add_link(&mut self, context: SpanContext, attributes: Vec<KeyValue>) {
        if let Some(record) = &mut self.record {
            record.links.push(Link::new(context, attributes, 0));
        }
    }

    /// Sets the status.
    pub fn set_status(&mut self, status: Status) {
        if let Some(record) = &mut self.record {
            record.status = status;
        }
    }

    /// Ends the span now, on this thread: one clock read and an append to
    /// this thread's buffer.
    pub fn end(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(mut record) = self.record.take() {
            record.end_time_unix_nano = now_unix_nano();
            self.recorder.record(record);
        }
    }
}

impl Drop for RecordingSpan {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A thread's buffer of ended spans, registered with its recorder.
#[derive(Debug)]
struct ThreadBuffer {
    records: Mutex<Vec<SpanRecord>>,
    /// The fork generation it was made in.
    generation: u64,
}

/// What the recorders share with the threads' buffers.
struct Shared {
    processor: LensBatchRecordProcessor,
    buffers: Mutex<Vec<Arc<ThreadBuffer>>>,
    /// The fork generation of the process that made the recorder: its
    /// export thread lives there only.
    generation: u64,
}

impl Shared {
    /// Hands `records` to the export queue (it drops and counts what does
    /// not fit), taking its records (and their allocation) out of it.
    fn hand_over(&self, records: &mut Vec<SpanRecord>) {
        if !records.is_empty() {
            self.processor.push_all(records);
        }
    }

    /// Hands what `records` (a thread's buffer, locked) holds to the export
    /// queue: taken out under the buffer's lock, which is not held while
    /// the queue takes them (holding it there made a span's wall time 28%
    /// longer in the bridge's bench); the thread gets a fresh buffer of
    /// full size.
    fn hand_over_buffer(&self, mut records: MutexGuard<'_, Vec<SpanRecord>>) {
        if records.is_empty() {
            return;
        }
        let mut taken = std::mem::replace(&mut *records, Vec::with_capacity(THREAD_BUFFER));
        drop(records);
        self.hand_over(&mut taken);
    }

    /// Takes what every thread's buffer holds, into the export queue;
    /// forgets buffers of exited threads and, in a forked child, the
    /// parent's buffers and their records.
    fn collect(&self) {
        let generation = fork_generation();
        let buffers: Vec<Arc<ThreadBuffer>> = {
            let mut buffers = lock(&self.buffers);
            buffers
                .retain(|b| b.generation == generation && (Arc::strong_count(b) > 1 || !lock(&b.records).is_empty()));
            buffers.clone()
        };
        for buffer in buffers {
            self.hand_over_buffer(lock(&buffer.records));
        }
    }
}

/// A thread's handle on one recorder's buffer; dropped when the thread
/// exits, handing what it holds to the export queue.
struct Local {
    shared: Weak<Shared>,
    /// `shared`'s address, compared per span (the `Weak` keeps the
    /// allocation, so no other recorder can have it while this lives).
    key: *const Shared,
    buffer: Arc<ThreadBuffer>,
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut records = std::mem::take(&mut *lock(&self.buffer.records));
            shared.hand_over(&mut records);
        }
    }
}

thread_local! {
    /// This thread's buffers, one per live recorder (one in a job).
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

/// Records spans into per-thread buffers and exports them through a
/// [`LensBatchRecordProcessor`]. Clones are handles to the same recorder.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder").field("threads", &lock(&self.shared.buffers).len()).finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder exporting through `exporter` with the batch settings of
    /// `config` (queue bound, batch size, delay, retries).
    pub fn new(exporter: impl BatchExporter<SpanRecord> + 'static, config: BatchConfig) -> Recorder {
        Recorder::with_processor(LensBatchRecordProcessor::new(Arc::new(exporter), config))
    }

    /// A recorder exporting through `processor`; the processor's worker
    /// collects the threads' buffers at each scheduled wake.
    pub fn with_processor(processor: LensBatchRecordProcessor) -> Recorder {
        let shared = Arc::new(Shared { processor, buffers: Mutex::new(Vec::new()), generation: fork_generation() });
        let weak = Arc::downgrade(&shared);
        shared.processor.set_collector(Box::new(move || {
            if let Some(shared) = weak.upgrade() {
                shared.collect();
            }
        }));
        Recorder { shared }
    }

    /// The export counters (the span pipeline's: accepted, exported,
    /// dropped with the queue full, ...).
    pub fn counters(&self) -> Arc<SpanExportCounters> {
        self.shared.processor.counters()
    }

    /// Starts a sampled span named `name` under `parent` (a root when
    /// `parent` is invalid: its trace id comes from the per-thread
    /// generator, or from [`with_next_trace_id`](crate::ids::with_next_trace_id)).
    /// The caller has already decided that the span is recorded.
    pub fn start(
        &self,
        name: impl Into<Cow<'static, str>>,
        parent: &SpanContext,
        attributes: Vec<KeyValue>,
    ) -> RecordingSpan {
        let ids = SeedIndependentIdGenerator::new();
        let (trace_id, trace_state, parent_span_id, remote) = if parent.is_valid() {
            (parent.trace_id(), parent.trace_state().clone(), parent.span_id(), parent.is_remote())
        } else {
            (ids.new_trace_id(), TraceState::default(), SpanId::INVALID, false)
        };
        let span_context = SpanContext::new(trace_id, ids.new_span_id(), TraceFlags::SAMPLED, false, trace_state);
        let now = now_unix_nano();
        RecordingSpan {
            record: Some(SpanRecord {
                name: name.into(),
                span_context,
                parent_span_id,
                parent_span_is_remote: remote,
                span_kind: SpanKind::Internal,
                start_time_unix_nano: now,
                end_time_unix_nano: now,
                attributes,
                dropped_attributes_count: 0,
                events: Vec::new(),
                links: Vec::new(),
                status: Status::Unset,
                spool_slot: None,
            }),
            recorder: self.clone(),
        }
    }

    /// Appends an ended span to this thread's buffer; a full buffer goes to
    /// the export queue. A span whose trace id is the invalid one is ignored.
    pub fn record(&self, record: SpanRecord) {
        self.record_from(&mut Some(record));
    }

    /// [`record`](Self::record) for a span held in `slot`, taken from it
    /// where it goes (a record is a few hundred bytes: each move is a copy).
    pub fn record_from(&self, record: &mut Option<SpanRecord>) {
        if record.as_ref().is_none_or(|record| record.span_context.trace_id() == TraceId::INVALID) {
            return;
        }
        let _ = LOCAL.try_with(|locals| {
            let Ok(mut locals) = locals.try_borrow_mut() else { return };
            let Some(buffer) = self.buffer(&mut locals) else {
                forked_child_records_nothing();
                *record = None;
                return;
            };
            let mut records = lock(&buffer.records);
            push_taken(&mut records, record);
            if records.len() >= THREAD_BUFFER {
                self.shared.hand_over_buffer(records);
            }
        });
        // This thread's buffers are gone (it is exiting): straight to the
        // queue. (Tested first: `take` copies the whole record, even a `None`.)
        if record.is_some() {
            if fork_generation() != self.shared.generation {
                *record = None;
                return;
            }
            let mut last = Vec::with_capacity(1);
            push_taken(&mut last, record);
            self.shared.hand_over(&mut last);
        }
    }

    /// This thread's buffer for this recorder, made and registered on first
    /// use. Borrowed from the thread's list: no reference count moves per
    /// span. `None` in a process forked from the recorder's: the export
    /// thread is the parent's, so nothing would ever export the child's
    /// records, and the recorder's locks may have been held at the fork.
    fn buffer<'a>(&self, locals: &'a mut Vec<Local>) -> Option<&'a ThreadBuffer> {
        let generation = fork_generation();
        let key = Arc::as_ptr(&self.shared);
        if let Some(index) = locals.iter().position(|l| l.key == key && l.buffer.generation == generation) {
            return Some(&locals[index].buffer);
        }
        if generation != self.shared.generation {
            return None;
        }
        // A forked child: the parent's records are the parent's to export.
        // Buffers of recorders that are gone are forgotten too.
        locals.retain(|local| {
            if local.buffer.generation != generation {
                lock(&local.buffer.records).clear();
                return false;
            }
            local.shared.strong_count() > 0
        });
        let buffer = Arc::new(ThreadBuffer { records: Mutex::new(Vec::with_capacity(THREAD_BUFFER)), generation });
        lock(&self.shared.buffers).push(Arc::clone(&buffer));
        let index = locals.len();
        locals.push(Local { shared: Arc::downgrade(&self.shared), key, buffer });
        Some(&locals[index].buffer)
    }

    /// What the threads' buffers hold now, taken out of them (not
    /// exported); in a forked child, the child's records only.
    pub fn take_buffered(&self) -> Vec<SpanRecord> {
        let generation = fork_generation();
        let buffers = lock(&self.shared.buffers).clone();
        buffers
            .iter()
            .filter(|b| b.generation == generation)
            .flat_map(|b| std::mem::take(&mut *lock(&b.records)))
            .collect()
    }

    /// Collects every thread's buffer and waits until everything recorded
    /// before this call is exported or dropped, at most `timeout`.
    pub fn force_flush(&self, timeout: Duration) -> OTelSdkResult {
        // The processor runs this recorder's collection first.
        self.shared.processor.force_flush_with_timeout(timeout)
    }

    /// Collects every thread's buffer, exports what it can within `timeout`
    /// and stops; spans ended later are refused and counted.
    pub fn shutdown(&self, timeout: Duration) -> OTelSdkResult {
        // The processor runs this recorder's collection first.
        self.shared.processor.shutdown_with_timeout(timeout)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A [`SpanExporter`] of the SDK's `SpanData` (file, console, a program's
/// own, the in-memory test exporter) as the records' exporter: each attempt
/// gets `SpanData` copies in `scope`.
#[derive(Debug)]
pub struct RecordsAsSpanData<E> {
    exporter: E,
    scope: InstrumentationScope,
}

impl<E: SpanExporter> RecordsAsSpanData<E> {
    /// `exporter`, its spans in `scope`.
    pub fn new(exporter: E, scope: InstrumentationScope) -> RecordsAsSpanData<E> {
        RecordsAsSpanData { exporter, scope }
    }
}

impl<E: SpanExporter + 'static> BatchExporter<SpanRecord> for RecordsAsSpanData<E> {
    fn export_payload(self: Arc<Self>, payload: &Payload<SpanRecord>) -> ExportFuture {
        let Payload::Items(batch) = payload else {
            return Box::pin(std::future::ready(Err(OTelSdkError::InternalFailure(
                "an encoded batch reached an exporter of span records".into(),
            )
            .into())));
        };
        let spans: Vec<SpanData> = batch.iter().cloned().map(|r| r.to_span_data(&self.scope)).collect();
        Box::pin(async move { Ok(self.exporter.export(spans).await?) })
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

/// The records' exporter of a configured span exporter, its spans in
/// `scope`: lens's OTLP exporter encodes the records straight into the
/// request ([`DirectOtlp`]), any other gets `SpanData` copies
/// ([`RecordsAsSpanData`]). A match on lens's own enum, no downcast.
pub fn record_exporter(
    exporter: crate::exporters::LensSpanExporter,
    scope: InstrumentationScope,
) -> Arc<dyn BatchExporter<SpanRecord>> {
    match exporter {
        #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
        crate::exporters::LensSpanExporter::Otlp(otlp) => Arc::new(DirectOtlp::new(*otlp, scope)),
        other => Arc::new(RecordsAsSpanData::new(other, scope)),
    }
}

/// Lens's OTLP span exporter as the records' exporter: a batch becomes the
/// OTLP request directly ([`encode_request`]) and is encoded once; every
/// attempt sends the same bytes.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
#[derive(Debug)]
pub struct DirectOtlp {
    exporter: crate::exporters::otlp::OtlpSpanExporter,
    scope: InstrumentationScope,
}

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
impl DirectOtlp {
    /// `exporter`, its spans in `scope`.
    pub fn new(exporter: crate::exporters::otlp::OtlpSpanExporter, scope: InstrumentationScope) -> DirectOtlp {
        DirectOtlp { exporter, scope }
    }
}

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
impl BatchExporter<SpanRecord> for DirectOtlp {
    fn prepare(&self, batch: Vec<SpanRecord>) -> Result<Payload<SpanRecord>, OTelSdkError> {
        self.exporter.encode_records(batch, &self.scope).map(Payload::Encoded)
    }

    fn export_payload(self: Arc<Self>, payload: &Payload<SpanRecord>) -> ExportFuture {
        match payload {
            Payload::Encoded(body) => Box::pin(self.exporter.send_encoded(body.clone())),
            Payload::Items(_) => Box::pin(std::future::ready(Err(OTelSdkError::InternalFailure(
                "span records reached the OTLP exporter unencoded".into(),
            )
            .into()))),
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        SpanExporter::shutdown_with_timeout(&self.exporter, timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        SpanExporter::set_resource(&mut self.exporter, resource);
    }
}

/// Moves the value of `from` to the end of `to` with one copy, leaving
/// `None` (`to.push(from.take())` copies it twice, through a temporary: a
/// record is a few hundred bytes). Nothing when `from` is `None`.
fn push_taken<T>(to: &mut Vec<T>, from: &mut Option<T>) {
    let Some(value) = from.as_mut() else { return };
    let value: *const T = value;
    to.reserve(1);
    let len = to.len();
    // SAFETY: `reserve` made room for an element at `len`. The value is
    // copied bitwise out of `from`, which is then overwritten with `None`
    // without dropping it: it is owned once, by `to`.
    unsafe {
        std::ptr::copy_nonoverlapping(value, to.as_mut_ptr().add(len), 1);
        std::ptr::write(from, None);
        to.set_len(len + 1);
    }
}
