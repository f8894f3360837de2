//! Lens's own bounded batch processors of spans and log records, with
//! counters: nothing that cannot be exported goes uncounted.
//!
//! The SDK's `BatchSpanProcessor` does not say how many spans it queued,
//! exported, dropped or failed, and it does not retry a failed export. Lens
//! needs both: the shutdown report, the rate-limited warning and the exact
//! accounting of the end-to-end tests read the counters, and an
//! export that fails (collector down, slow, refusing) must be retried with backoff
//! for a bounded window while new spans keep queuing up to the bound.
//!
//! How it works:
//! - [`SpanProcessor::on_end`] takes a short lock, pushes the span onto a
//!   bounded queue (or counts it as dropped when the queue is full) and
//!   returns. It never waits for the worker, the network or the exporter, and
//!   prints nothing.
//! - A worker thread named `lens-span-export` takes everything queued when a
//!   batch is full, when the schedule delay has passed, on a flush or at
//!   shutdown, cuts it into batches and hands each to an export thread, with
//!   at most [`BatchConfig::max_concurrent_exports`] in flight.
//! - An export thread runs the exporter's future (on the caller-supplied
//!   tokio runtime when there is one, which gRPC needs, else on its own
//!   thread), retrying failures with exponential backoff (100 ms doubling up
//!   to 5 s, with jitter) until [`BatchConfig::retry_window`] has passed; a
//!   batch that still fails is counted as dropped.
//! - The worker prints a warning about drops and failed exports at most once
//!   every 30 seconds ([`crate::diag`]).
//! - [`LensBatchSpanProcessor::shutdown_with_timeout`] drains, stops the
//!   worker and returns by its deadline even when the exporter hangs; threads
//!   stuck in an exporter are left behind, not joined, and the counters say
//!   how many spans did not finish.
//!
//! [`LensBatchLogProcessor`] is the same machinery for log records (one
//! generic queue, worker, retry loop and set of counters; only the exporter
//! adapter differs): its threads are `lens-log-export` and `lens-log-send-N`,
//! and it is configured from the validated configuration only, never from
//! `OTEL_BLRP_*` as the SDK's batch log processor would be (no variable is
//! read twice with two meanings).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter, LogProcessor, SdkLogRecord};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

use super::executor::block_on_until;
use super::exporters::LensSpanExporter;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use super::exporters::OtlpSpanExporter;
use crate::diag::{RateLimit, warn};
pub use crate::export_result::{ExportError, ExportResult, Retry};
use crate::ledger::{Admission, Change, Counter, ExportEvent, Outcome, admit, retries_over};
use crate::replaying::ReplayScope;
pub use crate::report::SpanExportSnapshot;
use crate::span_record::SpanRecord;
use crate::spool::SpoolKey;

/// The first wait before retrying a failed export.
pub const RETRY_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts of one export.
pub const RETRY_MAX_BACKOFF: Duration = Duration::from_secs(5);
/// At most one warning about dropped spans or failed exports per this period.
pub const WARNING_PERIOD: Duration = Duration::from_secs(30);
/// The name of the worker thread that batches spans.
pub const WORKER_THREAD_NAME: &str = "lens-span-export";
/// The name of the worker thread that batches log records.
pub const LOG_WORKER_THREAD_NAME: &str = "lens-log-export";

/// What differs between the span and the log pipeline: names in threads and
/// messages.
#[derive(Debug)]
struct Pipeline {
    worker_thread: &'static str,
    send_thread: &'static str,
    /// The plural noun of warnings: "spans", "log records".
    items: &'static str,
    /// The subject of warnings: "span export", "log export".
    what: &'static str,
}

const SPANS: Pipeline =
    Pipeline { worker_thread: WORKER_THREAD_NAME, send_thread: "lens-span-send", items: "spans", what: "span export" };
const LOGS: Pipeline = Pipeline {
    worker_thread: LOG_WORKER_THREAD_NAME,
    send_thread: "lens-log-send",
    items: "log records",
    what: "log export",
};

/// A queued log record with the scope it was emitted in.
type LogItem = (SdkLogRecord, InstrumentationScope);

/// What a batch processor queues: a span or a log record.
trait Item: Clone + Send + Sync + 'static {
    /// The key of the item in the rank's spool ([`crate::spool`]): spans
    /// have one, log records none.
    fn spool_key(&self) -> Option<SpoolKey> {
        None
    }
}
impl Item for SpanData {
    fn spool_key(&self) -> Option<SpoolKey> {
        Some(SpoolKey::Span(crate::spool::span_key(self)))
    }
}
impl Item for LogItem {}
impl Item for SpanRecord {
    fn spool_key(&self) -> Option<SpoolKey> {
        Some(match self.spool_slot {
            Some(slot) => SpoolKey::Slot(slot),
            None => SpoolKey::Span(u64::from_be_bytes(self.span_context.span_id().to_bytes())),
        })
    }
}

/// How the batch span processor queues, batches, exports and retries.
///
/// # Throughput against memory
///
/// The queue is the only buffer between the training threads and the
/// network: spans that arrive while it is full are dropped (and counted).
/// A span costs a few hundred bytes in the queue, so the default
/// 65,536-span queue holds at most about 65,536 × ~400 bytes ≈ 26 MB, and
/// only while the exporter falls behind; an idle queue holds nothing. The
/// SDK's defaults (a 2,048-span queue, 512-span batches, one export at a
/// time) drop spans above roughly 300,000 spans per second, which a busy
/// rank with fine-grained span groups can reach; the larger batches and two
/// concurrent exports here keep up with several times that, and the queue
/// rides out a collector that is down for the retry window at moderate
/// rates. Lower `max_queue_size` to bound memory more tightly. Beyond the
/// queue, each export in flight holds its batch for retries (at most
/// `max_concurrent_exports × max_export_batch_size` spans; with lens's OTLP
/// exporter, the batch's encoded request instead), plus the copy an
/// exporter that consumes its batch gets for the attempt under way.
///
/// Values of zero are raised to one, and the batch size is capped at the
/// queue size.
///
/// ```
/// use std::time::Duration;
/// use lens_otel_runtime::batch::BatchConfig;
///
/// let config = BatchConfig { retry_window: Duration::from_secs(5), ..BatchConfig::default() };
/// assert_eq!(config.max_queue_size, 65_536);
/// ```
#[derive(Clone)]
pub struct BatchConfig {
    /// Spans that can wait for export; more are dropped and counted.
    pub max_queue_size: usize,
    /// The most spans in one export request.
    pub max_export_batch_size: usize,
    /// How long a partial batch waits for more spans before it is exported.
    pub scheduled_delay: Duration,
    /// Export requests that can be in flight at once.
    pub max_concurrent_exports: usize,
    /// How long one export attempt may take before it counts as failed (a
    /// cooperative future is cancelled; an exporter that blocks inside its
    /// future cannot be, and keeps its export slot until it returns).
    pub export_timeout: Duration,
    /// How long a failing batch is retried, from its first attempt, before
    /// it is counted as dropped.
    pub retry_window: Duration,
    /// The tokio runtime on which exports run. Exporters built on tonic
    /// (OTLP/gRPC) need one; without it each export runs on its export
    /// thread with a minimal executor.
    pub runtime: Option<tokio::runtime::Handle>,
    /// Strings to remove from exporter error messages before they are
    /// printed in a warning: the header values of
    /// `OTEL_EXPORTER_OTLP_HEADERS`. Never shown by `Debug`.
    pub redact: Vec<String>,
}

impl Default for BatchConfig {
    fn default() -> BatchConfig {
        BatchConfig {
            max_queue_size: 65_536,
            max_export_batch_size: 4_096,
            scheduled_delay: Duration::from_millis(200),
            max_concurrent_exports: 2,
            export_timeout: Duration::from_secs(10),
            retry_window: Duration::from_secs(30),
            runtime: None,
            redact: Vec::new(),
        }
    }
}

impl fmt::Debug for BatchConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchConfig")
            .field("max_queue_size", &self.max_queue_size)
            .field("max_export_batch_size", &self.max_export_batch_size)
            .field("scheduled_delay", &self.scheduled_delay)
            .field("max_concurrent_exports", &self.max_concurrent_exports)
            .field("export_timeout", &self.export_timeout)
            .field("retry_window", &self.retry_window)
            .field("runtime", &self.runtime.is_some())
            .field("redact", &format_args!("[{} redacted]", self.redact.len()))
            .finish()
    }
}

impl BatchConfig {
    fn normalized(mut self) -> BatchConfig {
        self.max_queue_size = self.max_queue_size.max(1);
        self.max_export_batch_size = self.max_export_batch_size.clamp(1, self.max_queue_size);
        self.max_concurrent_exports = self.max_concurrent_exports.max(1);
        self.redact.retain(|secret| !secret.is_empty());
        self
    }
}

/// Live counters of a [`LensBatchSpanProcessor`], readable at any time from
/// any thread through [`LensBatchSpanProcessor::counters`].
#[derive(Debug, Default)]
pub struct SpanExportCounters {
    accepted: AtomicU64,
    exported: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_export_failed: AtomicU64,
    dropped_at_shutdown: AtomicU64,
    export_errors: AtomicU64,
    retries: AtomicU64,
    in_flight_spans: AtomicU64,
    in_flight_exports: AtomicU64,
    rejected_after_shutdown: AtomicU64,
    /// The export attempts under way, and whether the error count is
    /// closed: taken once per attempt (per batch, never per item).
    attempts: Mutex<Attempts>,
}

/// The export attempts under way (see [`SpanExportCounters::close`]).
#[derive(Debug, Default)]
struct Attempts {
    running: u64,
    closed: bool,
}

impl SpanExportCounters {
    /// Applies `event`'s changes ([`ExportEvent::changes`], the pure
    /// ledger's definition) to the shared counters. Inlined, so that a
    /// constant event (a span accepted, on the calling thread) folds to its
    /// one atomic add.
    #[inline]
    fn record(&self, event: ExportEvent) {
        for change in event.changes() {
            match change {
                Change::Add(counter, amount) => self.counter(counter).fetch_add(amount, Ordering::AcqRel),
                Change::Sub(counter, amount) => self.counter(counter).fetch_sub(amount, Ordering::AcqRel),
            };
        }
    }

    #[inline]
    fn counter(&self, counter: Counter) -> &AtomicU64 {
        match counter {
            Counter::Accepted => &self.accepted,
            Counter::Exported => &self.exported,
            Counter::DroppedQueueFull => &self.dropped_queue_full,
            Counter::DroppedExportFailed => &self.dropped_export_failed,
            Counter::DroppedAtShutdown => &self.dropped_at_shutdown,
            Counter::ExportErrors => &self.export_errors,
            Counter::Retries => &self.retries,
            Counter::InFlightSpans => &self.in_flight_spans,
            Counter::InFlightExports => &self.in_flight_exports,
            Counter::RejectedAfterShutdown => &self.rejected_after_shutdown,
        }
    }

    /// An export attempt begins; [`attempt_ended`](Self::attempt_ended)
    /// follows.
    fn attempt_started(&self) {
        let mut attempts = lock(&self.attempts);
        if !attempts.closed {
            attempts.running += 1;
        }
    }

    /// An export attempt ended, `failed` or not; a failure counts as an
    /// export error unless [`close`](Self::close) has counted it already.
    fn attempt_ended(&self, failed: bool) {
        let mut attempts = lock(&self.attempts);
        if attempts.closed {
            return;
        }
        attempts.running = attempts.running.saturating_sub(1);
        if failed {
            self.record(ExportEvent::AttemptFailed);
        }
    }

    /// A failure outside an attempt (a batch that cannot be encoded): an
    /// export error unless the count is closed.
    fn failed_outside_an_attempt(&self) {
        if !lock(&self.attempts).closed {
            self.record(ExportEvent::AttemptFailed);
        }
    }

    /// Closes the error count once shutdown is over: every attempt still
    /// under way (its deadline was shutdown's, so it fails as it ends)
    /// counts as an export error now, and nothing counts as one after. The
    /// report read after this counts every failed attempt that a warning
    /// may name (the first failure's, said as the attempt ends, or the
    /// worker's last summary), however the threads interleave. Idempotent.
    pub fn close(&self) {
        let mut attempts = lock(&self.attempts);
        if attempts.closed {
            return;
        }
        attempts.closed = true;
        for _ in 0..std::mem::take(&mut attempts.running) {
            self.record(ExportEvent::AttemptFailed);
        }
    }

    /// The counters now. Each value is read atomically; the set is not one
    /// atomic snapshot while spans are moving.
    pub fn snapshot(&self) -> SpanExportSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Acquire);
        SpanExportSnapshot {
            accepted: load(&self.accepted),
            exported: load(&self.exported),
            dropped_queue_full: load(&self.dropped_queue_full),
            dropped_export_failed: load(&self.dropped_export_failed),
            dropped_at_shutdown: load(&self.dropped_at_shutdown),
            export_errors: load(&self.export_errors),
            retries: load(&self.retries),
            in_flight_spans: load(&self.in_flight_spans),
            in_flight_exports: load(&self.in_flight_exports),
            rejected_after_shutdown: load(&self.rejected_after_shutdown),
        }
    }
}

/// Locks a mutex, recovering it if a thread panicked while holding it: the
/// data behind every lock here stays consistent at each unlock point.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn wait_timeout<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T> {
    match cv.wait_timeout(guard, timeout) {
        Ok((guard, _)) => guard,
        Err(poisoned) => poisoned.into_inner().0,
    }
}

/// One export attempt, owning what it needs so that it can run on another
/// thread or runtime.
pub type ExportFuture = Pin<Box<dyn Future<Output = ExportResult> + Send + 'static>>;

/// A batch readied for its export attempts, kept until the last one.
#[derive(Debug)]
pub enum Payload<T> {
    /// The items; an exporter that consumes its batch gets a copy per
    /// attempt, one that borrows it (logs) reads them in place.
    Items(Arc<Vec<T>>),
    /// The request, encoded once (lens's OTLP span exporter): every attempt
    /// sends the same bytes, and no copy of the spans is made.
    Encoded(bytes::Bytes),
}

/// How the batch processor knows its exporter: an exporter of items `T`
/// (the SDK's `SpanData`, log records, or lens's own span records)
/// behind a trait object, with an export future that owns its
/// exporter so that it can run on another thread or runtime. An exporter
/// that can encode a batch once (lens's OTLP exporter) says so in
/// [`BatchExporter::prepare`]; the processor never asks which exporter it
/// holds.
pub trait BatchExporter<T>: Send + Sync {
    /// Readies `batch` for [`BatchExporter::export_payload`], once per batch
    /// (default: keep the items, copied per attempt by exporters that
    /// consume them).
    fn prepare(&self, batch: Vec<T>) -> Result<Payload<T>, OTelSdkError> {
        Ok(Payload::Items(Arc::new(batch)))
    }
    /// One attempt at exporting `payload`.
    fn export_payload(self: Arc<Self>, payload: &Payload<T>) -> ExportFuture;
    /// Shuts the exporter down within `timeout`.
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult;
    /// The resource of everything it exports.
    fn set_resource(&mut self, resource: &Resource);
}

/// What an exporter that never encodes answers to an encoded payload.
fn not_encoded() -> ExportFuture {
    Box::pin(std::future::ready(Err(OTelSdkError::InternalFailure(
        "an encoded batch reached an exporter of items".into(),
    )
    .into())))
}

/// A [`SpanExporter`] as an [`BatchExporter`]: it consumes its batch, so
/// each attempt gets a copy of the spans.
struct Spans<E>(E);

impl<E: SpanExporter + 'static> BatchExporter<SpanData> for Spans<E> {
    fn export_payload(self: Arc<Self>, payload: &Payload<SpanData>) -> ExportFuture {
        let Payload::Items(batch) = payload else { return not_encoded() };
        let batch = Vec::clone(batch);
        Box::pin(async move { Ok(self.0.export(batch).await?) })
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        SpanExporter::shutdown_with_timeout(&self.0, timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        SpanExporter::set_resource(&mut self.0, resource);
    }
}

/// Lens's OTLP span exporter as a [`BatchExporter`]: the batch is encoded
/// once and every attempt sends the encoded request, so the success path
/// costs what the SDK's processor costs (no copy of the spans) and a retry
/// loses nothing.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
struct EncodedSpans(OtlpSpanExporter);

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
impl BatchExporter<SpanData> for EncodedSpans {
    fn prepare(&self, batch: Vec<SpanData>) -> Result<Payload<SpanData>, OTelSdkError> {
        self.0.encode(batch).map(Payload::Encoded)
    }

    fn export_payload(self: Arc<Self>, payload: &Payload<SpanData>) -> ExportFuture {
        match payload {
            Payload::Encoded(body) => Box::pin(self.0.send_encoded(body.clone())),
            Payload::Items(batch) => {
                let batch = Vec::clone(batch);
                Box::pin(async move { Ok(self.0.export(batch).await?) })
            }
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        SpanExporter::shutdown_with_timeout(&self.0, timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        SpanExporter::set_resource(&mut self.0, resource);
    }
}

/// The batch exporter of a configured span exporter: lens's OTLP exporter
/// gets the encode-once path, any other the copy per attempt. A match on
/// lens's own enum, no downcast.
fn lens_span_exporter(exporter: LensSpanExporter) -> Arc<dyn BatchExporter<SpanData>> {
    match exporter {
        #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
        LensSpanExporter::Otlp(otlp) => Arc::new(EncodedSpans(*otlp)),
        other => Arc::new(Spans(other)),
    }
}

/// A [`LogExporter`] as an [`BatchExporter`]: it borrows its batch, so
/// every attempt reads the same records (no copy).
struct Logs<E>(E);

impl<E: LogExporter + 'static> BatchExporter<LogItem> for Logs<E> {
    fn export_payload(self: Arc<Self>, payload: &Payload<LogItem>) -> ExportFuture {
        let Payload::Items(batch) = payload else { return not_encoded() };
        let batch = Arc::clone(batch);
        Box::pin(async move {
            let records: Vec<(&SdkLogRecord, &InstrumentationScope)> =
                batch.iter().map(|(record, scope)| (record, scope)).collect();
            Ok(self.0.export(LogBatch::new(&records)).await?)
        })
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        LogExporter::shutdown_with_timeout(&self.0, timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        LogExporter::set_resource(&mut self.0, resource);
    }
}

/// Which spans have been resolved (exported or dropped), as a watermark over
/// the order in which they were accepted.
#[derive(Debug, Default)]
struct Progress {
    /// Every span with a sequence number below this is resolved.
    watermark: u64,
    /// Resolved batches above the watermark: start → end.
    ahead: BTreeMap<u64, u64>,
}

impl Progress {
    fn resolve(&mut self, start: u64, end: u64) {
        if start != self.watermark {
            self.ahead.insert(start, end);
            return;
        }
        self.watermark = end;
        while let Some(next) = self.ahead.remove(&self.watermark) {
            self.watermark = next;
        }
    }
}

#[derive(Debug, Default)]
struct Control {
    /// The batches handed to an export and not yet resolved: first
    /// sequence number → length; one per export slot in use. An export
    /// resolves its batch only if it is still here; at the shutdown deadline
    /// the worker resolves the rest as unsent at shutdown, so each batch is
    /// counted exactly once.
    unresolved: BTreeMap<u64, usize>,
    shutdown_deadline: Option<Instant>,
    progress: Progress,
    worker_done: bool,
    /// Set with `worker_done`: every export returned before the deadline.
    finished_cleanly: bool,
}

/// State shared by the processor handles, the worker and the export threads.
struct Inner<T> {
    pipeline: &'static Pipeline,
    config: BatchConfig,
    exporter: Mutex<Arc<dyn BatchExporter<T>>>,
    queue: Mutex<Chunks<T>>,
    /// The worker waits here for spans, a flush or shutdown.
    queue_changed: Condvar,
    closed: AtomicBool,
    flush_requested: AtomicBool,
    control: Mutex<Control>,
    /// Export slots, progress, shutdown and the worker's end.
    control_changed: Condvar,
    counters: Arc<SpanExportCounters>,
    /// Spans the worker took from the queue and has not yet handed to an
    /// export; they count against the queue's bound.
    held_by_worker: AtomicUsize,
    last_error: Mutex<Option<String>>,
    warnings: RateLimit,
    /// Whether an attempt cut short by the export timeout was said: the
    /// exporter never sees it (its future is dropped), and the worker's
    /// warnings wait while every export slot is held by a hung export.
    warned_no_answer: AtomicBool,
    export_threads: AtomicU64,
    /// Called by the worker at a scheduled wake, a flush and shutdown,
    /// before it takes the queue: the span recorder's collection of its
    /// threads' buffers (none otherwise).
    collector: Mutex<Option<Collector>>,
    /// The rank's spool: told which spans have left (exported, or dropped
    /// for good), so that it stops keeping them.
    spool: std::sync::OnceLock<Arc<crate::spool::SpoolTable>>,
}

/// What the worker calls at each wake ([`Inner::collector`]).
type Collector = Arc<dyn Fn() + Send + Sync>;

impl<T: Item> Inner<T> {
    fn exporter(&self) -> Arc<dyn BatchExporter<T>> {
        Arc::clone(&lock(&self.exporter))
    }

    fn shutdown_deadline(&self) -> Option<Instant> {
        lock(&self.control).shutdown_deadline
    }

    /// Wakes the worker after a flag changed (taking the lock first, so that
    /// the worker is either waiting or will see the flag).
    fn wake_worker(&self) {
        drop(lock(&self.queue));
        self.queue_changed.notify_all();
    }

    fn push(&self, span: T) -> bool {
        let mut queue = lock(&self.queue);
        let queued = queue.len() + self.held_by_worker.load(Ordering::Acquire);
        let admission = admit(self.closed.load(Ordering::Acquire), queued, self.config.max_queue_size);
        if admission != Admission::Accepted {
            drop(queue);
            self.counters.record(ExportEvent::Offered(admission));
            if let Some(spool) = self.spool.get()
                && let Some(key) = span.spool_key()
            {
                // Dropped for good while the process lives (a closed
                // processor's spans stay for the next attempt).
                if admission != Admission::AfterShutdown {
                    spool.released([key]);
                }
            }
            return false;
        }
        queue.push(span);
        // Counted under the lock: the count is also the span's sequence number.
        self.counters.record(ExportEvent::Offered(Admission::Accepted));
        let full_batch = queue.len() == self.config.max_export_batch_size;
        drop(queue);
        if full_batch {
            self.queue_changed.notify_one();
        }
        true
    }

    /// Offers every item of `items` under one lock (each admitted or
    /// dropped and counted as [`Inner::push`] does); takes `items` (what
    /// is admitted goes into the queue with its allocation).
    fn push_all(&self, items: &mut Vec<T>) -> usize {
        let mut queue = lock(&self.queue);
        let closed = self.closed.load(Ordering::Acquire);
        let held = self.held_by_worker.load(Ordering::Acquire);
        // The first `accepted` are admitted, as one by one: counted under
        // the lock in one add (the count is also the spans' sequence
        // numbers), and moved in one go.
        let room = if closed { 0 } else { self.config.max_queue_size.saturating_sub(queue.len() + held) };
        let accepted = room.min(items.len());
        let len = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        if accepted > 0 {
            self.counters.record(ExportEvent::OfferedAll { admission: Admission::Accepted, len: len(accepted) });
        }
        // The refused tail is split off (all of it, allocation and all, when
        // nothing is admitted); the admitted items move into the queue as
        // one chunk, with their allocation (no item is copied).
        let refused_items = if accepted == 0 { std::mem::take(items) } else { items.split_off(accepted) };
        queue.push_chunk(std::mem::take(items));
        let refused = admit(closed, queue.len() + held, self.config.max_queue_size);
        if !refused_items.is_empty() {
            self.counters.record(ExportEvent::OfferedAll { admission: refused, len: len(refused_items.len()) });
        }
        let full_batch = queue.len() >= self.config.max_export_batch_size;
        drop(queue);
        // Dropped for good while the process lives, as in `push` (their
        // slots released, and the records dropped, without the queue's lock).
        if refused != Admission::AfterShutdown
            && !refused_items.is_empty()
            && let Some(spool) = self.spool.get()
        {
            spool.released(refused_items.iter().filter_map(Item::spool_key));
        }
        if full_batch {
            self.queue_changed.notify_one();
        }
        accepted
    }

    fn resolve(&self, start: u64, len: usize, outcome: Outcome) {
        let mut control = lock(&self.control);
        self.resolve_locked(&mut control, start, len, outcome);
        drop(control);
        self.control_changed.notify_all();
    }

    /// Counts `len` items from `start` as `outcome` and advances the
    /// progress, with the control lock held (so that a flush or shutdown
    /// never sees the progress ahead of the counters).
    fn resolve_locked(&self, control: &mut Control, start: u64, len: usize, outcome: Outcome) {
        self.counters.record(ExportEvent::Resolved { len: len as u64, outcome });
        control.progress.resolve(start, start + len as u64);
    }

    /// Keeps `error`'s message (secrets removed) for the next warning.
    fn keep_error(&self, error: &OTelSdkError) {
        let message = crate::diag::redact(&error.to_string(), &self.config.redact);
        *lock(&self.last_error) = Some(message);
    }
}

/// Owns the worker; when the last handle goes, shutdown starts in the
/// background.
struct Owner<T: Item> {
    inner: Arc<Inner<T>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl<T: Item> Drop for Owner<T> {
    fn drop(&mut self) {
        // Dropped without shutdown: give queued spans one export timeout to
        // leave, without waiting here.
        let _started = begin_shutdown(&self.inner, self.inner.config.export_timeout);
    }
}

/// A bounded, counting, retrying batch span processor. Clones are handles to
/// the same processor (one worker, one queue, one set of counters).
///
/// ```
/// # #[cfg(feature = "testing")] { // the in-memory exporter comes with `testing`
/// use lens_otel_runtime::batch::{BatchConfig, LensBatchSpanProcessor};
/// use opentelemetry::trace::{Tracer, TracerProvider};
/// use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
///
/// let exporter = InMemorySpanExporter::default();
/// let batch = LensBatchSpanProcessor::new(exporter.clone(), BatchConfig::default());
/// let counters = batch.counters();
/// let provider = SdkTracerProvider::builder().with_span_processor(batch.clone()).build();
/// provider.tracer("doc").in_span("step", |_| {});
/// batch.force_flush_with_timeout(std::time::Duration::from_secs(5)).unwrap();
/// assert_eq!(exporter.get_finished_spans().unwrap().len(), 1);
/// assert_eq!(counters.snapshot().exported, 1);
/// # }
/// ```
#[derive(Clone)]
pub struct LensBatchSpanProcessor {
    owner: Arc<Owner<SpanData>>,
}

impl fmt::Debug for LensBatchSpanProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensBatchSpanProcessor")
            .field("config", &self.owner.inner.config)
            .field("counters", &self.owner.inner.counters.snapshot())
            .field("closed", &self.owner.inner.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl LensBatchSpanProcessor {
    /// A processor exporting through `exporter`, with its worker thread
    /// started. If the thread cannot be started, the processor is inert: a
    /// warning is printed and every span is rejected.
    pub fn new<E: SpanExporter + 'static>(exporter: E, config: BatchConfig) -> LensBatchSpanProcessor {
        LensBatchSpanProcessor::with_batch_exporter(Arc::new(Spans(exporter)), config)
    }

    /// A processor exporting through `exporter` as configured: lens's OTLP
    /// exporter encodes each batch once, any other gets a copy per attempt.
    pub fn for_configured(exporter: LensSpanExporter, config: BatchConfig) -> LensBatchSpanProcessor {
        LensBatchSpanProcessor::with_batch_exporter(lens_span_exporter(exporter), config)
    }

    /// A processor exporting through any [`BatchExporter`] of spans.
    pub fn with_batch_exporter(
        exporter: Arc<dyn BatchExporter<SpanData>>,
        config: BatchConfig,
    ) -> LensBatchSpanProcessor {
        LensBatchSpanProcessor { owner: Owner::start(exporter, config, &SPANS) }
    }

    /// The live counters, to read at any time (also after shutdown).
    pub fn counters(&self) -> Arc<SpanExportCounters> {
        Arc::clone(&self.owner.inner.counters)
    }

    /// Tells `spool` which spans have left (exported, or dropped for good),
    /// so that it keeps ended spans only until then. Once per processor.
    pub fn set_spool(&self, spool: Arc<crate::spool::SpoolTable>) {
        let _ = self.owner.inner.spool.set(spool);
    }

    /// Exports `spans` now, on the calling thread, with `resource` instead
    /// of the processor's own (a replay of a dead process's spool), then
    /// gives the exporter `own` back; waits at most `timeout`. Not counted
    /// in this processor's counters. Call it before any span of this
    /// lifetime is exported (setup does): the exporter must be idle.
    ///
    /// # Errors
    ///
    /// [`OTelSdkError::InternalFailure`] with the exporter's error, a
    /// timeout, or a busy exporter, its message redacted of the configured
    /// header values (as the batch path's warnings are).
    pub fn export_with_resource(
        &self,
        spans: Vec<SpanData>,
        resource: &Resource,
        own: &Resource,
        timeout: Duration,
    ) -> OTelSdkResult {
        self.owner.export_with_resource(spans, resource, own, timeout)
    }

    /// Queues an already-ended span, as [`SpanProcessor::on_end`] does: the
    /// open-span closer hands its truncated copies over through here.
    /// Returns whether the span was queued (unsampled spans are ignored and
    /// return `false`, as do spans after shutdown and spans that found the
    /// queue full, which are counted).
    pub fn enqueue_data(&self, span: SpanData) -> bool {
        if !span.span_context.is_sampled() {
            return false;
        }
        self.owner.inner.push(span)
    }

    /// Exports every span queued before this call, waiting up to `timeout`.
    ///
    /// # Errors
    ///
    /// [`OTelSdkError::Timeout`] when spans are still pending at the deadline
    /// (they stay queued or in flight), [`OTelSdkError::AlreadyShutdown`]
    /// after shutdown. Spans dropped after failed retries count as done.
    pub fn force_flush_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.owner.force_flush(timeout)
    }

    /// Stops accepting spans, exports what is queued, stops the worker and
    /// shuts the exporter down, returning within `timeout` even if the
    /// exporter hangs.
    ///
    /// # Errors
    ///
    /// [`OTelSdkError::AlreadyShutdown`] on a second call;
    /// [`OTelSdkError::Timeout`] when the deadline passed first. Spans still
    /// queued then, in an export that has not returned, or in a batch whose
    /// retries the deadline cut short are counted in `dropped_at_shutdown`
    /// by the worker as it stops, just after the deadline; an export thread
    /// that has not returned is left to finish on its own (not joined, still
    /// shown in `in_flight_spans`) and counts nothing when it does.
    pub fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.owner.shutdown(timeout)
    }
}

/// The batch processor of the span recorder's records
/// ([`crate::recorder`]): the same queue bound, batching, concurrent
/// exports, retries and counters as [`LensBatchSpanProcessor`], fed a
/// thread's buffer at a time. Clones are handles to the same processor.
#[derive(Clone)]
pub struct LensBatchRecordProcessor {
    owner: Arc<Owner<SpanRecord>>,
}

impl fmt::Debug for LensBatchRecordProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensBatchRecordProcessor")
            .field("config", &self.owner.inner.config)
            .field("counters", &self.owner.inner.counters.snapshot())
            .finish_non_exhaustive()
    }
}

impl LensBatchRecordProcessor {
    /// A processor exporting through `exporter`, with `config`.
    pub fn new(exporter: Arc<dyn BatchExporter<SpanRecord>>, config: BatchConfig) -> LensBatchRecordProcessor {
        LensBatchRecordProcessor { owner: Owner::start(exporter, config, &SPANS) }
    }

    /// The export counters (shared, live).
    pub fn counters(&self) -> Arc<SpanExportCounters> {
        Arc::clone(&self.owner.inner.counters)
    }

    /// Queues every record of `records` under one lock: those the queue
    /// cannot take are dropped and counted (`dropped_queue_full`), and after
    /// shutdown refused and counted. Leaves `records` empty; returns how
    /// many were queued.
    pub fn push_all(&self, records: &mut Vec<SpanRecord>) -> usize {
        self.owner.inner.push_all(records)
    }

    /// Queues one ended record (a span the SDK ended, or a closer's
    /// truncated copy); as [`push_all`](Self::push_all), dropped and counted
    /// when the queue is full. Unsampled records are ignored (`false`).
    pub fn enqueue(&self, record: SpanRecord) -> bool {
        if !record.span_context.is_sampled() {
            return false;
        }
        self.owner.inner.push(record)
    }

    /// Tells `spool` which spans have left (exported, or dropped for good),
    /// as [`LensBatchSpanProcessor::set_spool`] does. Once per processor.
    pub fn set_spool(&self, spool: Arc<crate::spool::SpoolTable>) {
        let _ = self.owner.inner.spool.set(spool);
    }

    /// Exports `records` now with `resource` instead of the processor's own,
    /// as [`LensBatchSpanProcessor::export_with_resource`] does (a replay of
    /// a dead process's spool, before any span of this lifetime).
    ///
    /// # Errors
    ///
    /// As [`LensBatchSpanProcessor::export_with_resource`].
    pub fn export_with_resource(
        &self,
        records: Vec<SpanRecord>,
        resource: &Resource,
        own: &Resource,
        timeout: Duration,
    ) -> OTelSdkResult {
        self.owner.export_with_resource(records, resource, own, timeout)
    }

    /// What the worker calls at a scheduled wake, a flush and shutdown,
    /// before it takes the queue (the recorder's collection of its threads'
    /// buffers).
    pub fn set_collector(&self, collect: Box<dyn Fn() + Send + Sync>) {
        *lock(&self.owner.inner.collector) = Some(Arc::from(collect));
    }

    /// Collects the recorder's thread buffers, then waits until everything
    /// queued before the call (what the threads had recorded included) is
    /// exported or dropped, at most `timeout`.
    pub fn force_flush_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.collect_now();
        self.owner.force_flush(timeout)
    }

    /// Collects the recorder's thread buffers (before the queue closes, so
    /// that they are exported, not refused), exports what it can within
    /// `timeout` and stops.
    pub fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.collect_now();
        self.owner.shutdown(timeout)
    }

    /// Runs the collector on the calling thread: a flush's target and a
    /// shutdown's drain then include what the threads' buffers held (once
    /// closed, what they hold is refused and counted).
    fn collect_now(&self) {
        let collector = lock(&self.owner.inner.collector).clone();
        if let Some(collector) = collector {
            collector();
        }
    }

    /// Sets the resource of everything it exports.
    pub fn set_resource(&self, resource: &Resource) {
        self.owner.set_resource(resource);
    }
}

/// What [`LensBatchSpanProcessor::export_with_resource`] fails with while
/// the processor's own export holds the exporter: a replay tries again.
pub(crate) const EXPORTER_BUSY: &str = "the span exporter is busy";

impl<T: Item> Owner<T> {
    /// See [`LensBatchSpanProcessor::export_with_resource`].
    fn export_with_resource(
        &self,
        spans: Vec<T>,
        resource: &Resource,
        own: &Resource,
        timeout: Duration,
    ) -> OTelSdkResult {
        let inner = &self.inner;
        let mut slot = lock(&inner.exporter);
        let Some(exporter) = Arc::get_mut(&mut slot) else {
            return Err(OTelSdkError::InternalFailure(EXPORTER_BUSY.into()));
        };
        exporter.set_resource(resource);
        let result = {
            let exporter = Arc::clone(&slot);
            match exporter.prepare(spans) {
                Ok(payload) => {
                    let future = {
                        let _replay = ReplayScope::enter();
                        exporter.export_payload(&payload)
                    };
                    block_on_until(future, Instant::now() + timeout)
                        .unwrap_or(Err(OTelSdkError::Timeout(timeout).into()))
                        .map_err(|failure| failure.error)
                }
                Err(error) => Err(error),
            }
        };
        match Arc::get_mut(&mut slot) {
            Some(exporter) => exporter.set_resource(own),
            None => warn(format_args!("the span exporter is busy; replayed spans' resource may stay on it")),
        }
        // The error may quote a collector's answer that echoes the request's
        // headers: its message goes into warnings, so it is redacted as the
        // batch path's are. Its reason only: the error's own "Operation
        // failed: " stays said once.
        result.map_err(|error| match error {
            OTelSdkError::InternalFailure(reason) => {
                OTelSdkError::InternalFailure(crate::diag::redact(&reason, &inner.config.redact))
            }
            other => other,
        })
    }

    /// Starts the worker. If its thread cannot be started, the processor is
    /// inert: a warning is printed and every item is rejected.
    fn start(exporter: Arc<dyn BatchExporter<T>>, config: BatchConfig, pipeline: &'static Pipeline) -> Arc<Owner<T>> {
        let config = config.normalized();
        let inner = Arc::new(Inner {
            pipeline,
            queue: Mutex::new(Chunks::default()),
            config,
            exporter: Mutex::new(exporter),
            queue_changed: Condvar::new(),
            closed: AtomicBool::new(false),
            flush_requested: AtomicBool::new(false),
            control: Mutex::new(Control::default()),
            control_changed: Condvar::new(),
            counters: Arc::new(SpanExportCounters::default()),
            held_by_worker: AtomicUsize::new(0),
            last_error: Mutex::new(None),
            warnings: RateLimit::new(WARNING_PERIOD),
            warned_no_answer: AtomicBool::new(false),
            export_threads: AtomicU64::new(0),
            collector: Mutex::new(None),
            spool: std::sync::OnceLock::new(),
        });
        let for_worker = Arc::clone(&inner);
        let worker = thread::Builder::new().name(pipeline.worker_thread.to_owned()).spawn(move || {
            crate::export_path::mark_thread();
            run_worker(&for_worker);
        });
        let worker = match worker {
            Ok(handle) => Some(handle),
            Err(error) => {
                warn(format_args!(
                    "could not start the {} thread ({error}); {} will not be exported",
                    pipeline.what, pipeline.items
                ));
                inner.closed.store(true, Ordering::Release);
                let mut control = lock(&inner.control);
                control.worker_done = true;
                control.finished_cleanly = true;
                None
            }
        };
        Arc::new(Owner { inner, worker: Mutex::new(worker) })
    }

    /// Exports every item queued before this call, waiting up to `timeout`.
    fn force_flush(&self, timeout: Duration) -> OTelSdkResult {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let deadline = Instant::now() + timeout;
        let target = {
            let _queue = lock(&inner.queue);
            inner.counters.accepted.load(Ordering::Acquire)
        };
        inner.flush_requested.store(true, Ordering::Release);
        inner.wake_worker();
        let mut control = lock(&inner.control);
        loop {
            if control.progress.watermark >= target {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline || control.worker_done {
                return Err(OTelSdkError::Timeout(timeout));
            }
            control = wait_timeout(&inner.control_changed, control, deadline - now);
        }
    }

    fn shutdown(&self, timeout: Duration) -> OTelSdkResult {
        let inner = &self.inner;
        let Some(deadline) = begin_shutdown(inner, timeout) else {
            return Err(OTelSdkError::AlreadyShutdown);
        };
        let mut control = lock(&inner.control);
        loop {
            if control.worker_done {
                if !control.finished_cleanly {
                    return Err(OTelSdkError::Timeout(timeout));
                }
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(OTelSdkError::Timeout(timeout));
            }
            control = wait_timeout(&inner.control_changed, control, deadline - now);
        }
        drop(control);
        // The worker has finished its loop, so this join returns at once.
        if let Some(worker) = lock(&self.worker).take() {
            let _joined = worker.join();
        }
        Ok(())
    }

    /// Passes the provider's resource to the exporter (before any export).
    fn set_resource(&self, resource: &Resource) {
        let mut exporter = lock(&self.inner.exporter);
        match Arc::get_mut(&mut exporter) {
            Some(exporter) => exporter.set_resource(resource),
            None => {
                warn(format_args!("the {} exporter is busy; it keeps its previous resource", self.inner.pipeline.what))
            }
        }
    }
}

/// The log-record counterpart of [`LensBatchSpanProcessor`]: the same
/// bounded queue, batching, retry window, counters and bounded shutdown,
/// for records of a logger provider. Built from a [`BatchConfig`]
/// only: the SDK's batch log processor reads `OTEL_BLRP_*` itself, this one
/// reads no environment. Clones are handles to the same processor.
///
/// ```
/// # #[cfg(feature = "testing")] { // the in-memory exporter comes with `testing`
/// use lens_otel_runtime::batch::{BatchConfig, LensBatchLogProcessor};
/// use opentelemetry::logs::{LogRecord as _, Logger as _, LoggerProvider as _};
/// use opentelemetry_sdk::logs::{InMemoryLogExporter, SdkLoggerProvider};
///
/// let exporter = InMemoryLogExporter::default();
/// let batch = LensBatchLogProcessor::new(exporter.clone(), BatchConfig::default());
/// let counters = batch.counters();
/// let provider = SdkLoggerProvider::builder().with_log_processor(batch.clone()).build();
/// let logger = provider.logger("doc");
/// let mut record = logger.create_log_record();
/// record.set_body("step done".into());
/// logger.emit(record);
/// batch.force_flush_with_timeout(std::time::Duration::from_secs(5)).unwrap();
/// assert_eq!(exporter.get_emitted_logs().unwrap().len(), 1);
/// assert_eq!(counters.snapshot().exported, 1);
/// # }
/// ```
#[derive(Clone)]
pub struct LensBatchLogProcessor {
    owner: Arc<Owner<LogItem>>,
}

impl fmt::Debug for LensBatchLogProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensBatchLogProcessor")
            .field("config", &self.owner.inner.config)
            .field("counters", &self.owner.inner.counters.snapshot())
            .field("closed", &self.owner.inner.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl LensBatchLogProcessor {
    /// A processor exporting through `exporter`, with its worker thread
    /// (`lens-log-export`) started. If the thread cannot be started, the
    /// processor is inert: a warning is printed and every record is rejected.
    pub fn new<E: LogExporter + 'static>(exporter: E, config: BatchConfig) -> LensBatchLogProcessor {
        LensBatchLogProcessor { owner: Owner::start(Arc::new(Logs(exporter)), config, &LOGS) }
    }

    /// The live counters (the span counters' type, counting log records).
    pub fn counters(&self) -> Arc<SpanExportCounters> {
        Arc::clone(&self.owner.inner.counters)
    }

    /// Exports every record queued before this call, waiting up to `timeout`.
    ///
    /// # Errors
    ///
    /// As [`LensBatchSpanProcessor::force_flush_with_timeout`].
    pub fn force_flush_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.owner.force_flush(timeout)
    }

    /// Stops accepting records, exports what is queued and shuts the
    /// exporter down within `timeout`.
    ///
    /// # Errors
    ///
    /// As [`LensBatchSpanProcessor::shutdown_with_timeout`].
    pub fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.owner.shutdown(timeout)
    }
}

impl LogProcessor for LensBatchLogProcessor {
    fn emit(&self, record: &mut SdkLogRecord, scope: &InstrumentationScope) {
        let _queued = self.owner.inner.push((record.clone(), scope.clone()));
    }

    /// Exports what is queued, waiting up to the export timeout.
    fn force_flush(&self) -> OTelSdkResult {
        self.force_flush_with_timeout(self.owner.inner.config.export_timeout)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        LensBatchLogProcessor::shutdown_with_timeout(self, timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.owner.set_resource(resource);
    }
}

/// Test hook (feature `testing`): how long shutdown pauses between closing
/// the queue and setting its deadline, in milliseconds (0: no pause). The
/// window a worker could once wake in; a test widens it to show that the
/// worker still waits for the exports in flight.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub static SHUTDOWN_PAUSE_MS: AtomicU64 = AtomicU64::new(0);

#[cfg(feature = "testing")]
fn testing_pause() {
    let pause = SHUTDOWN_PAUSE_MS.load(Ordering::Relaxed);
    if pause > 0 {
        thread::sleep(Duration::from_millis(pause));
    }
}

/// Marks the processor closed and sets the shutdown deadline; `None` when it
/// was already closed.
fn begin_shutdown<T: Item>(inner: &Inner<T>, timeout: Duration) -> Option<Instant> {
    let deadline = Instant::now() + timeout;
    // Closed and given its deadline under the control lock: the worker,
    // once it sees the queue closed, reads the deadline under that lock
    // (`finish`). Set one after the other, a worker that woke in between
    // found the queue closed with no deadline, and counted the exports in
    // flight as unsent at shutdown at once, while they went on to arrive.
    let mut control = lock(&inner.control);
    if inner.closed.swap(true, Ordering::AcqRel) {
        return None;
    }
    #[cfg(feature = "testing")]
    testing_pause();
    control.shutdown_deadline = Some(deadline);
    drop(control);
    inner.control_changed.notify_all();
    inner.wake_worker();
    Some(deadline)
}

impl SpanProcessor for LensBatchSpanProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let _queued = self.owner.inner.push(span);
    }

    /// Exports what is queued, waiting up to the export timeout.
    fn force_flush(&self) -> OTelSdkResult {
        self.force_flush_with_timeout(self.owner.inner.config.export_timeout)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        LensBatchSpanProcessor::shutdown_with_timeout(self, timeout)
    }

    /// Passes the provider's resource to the exporter (before any export).
    fn set_resource(&mut self, resource: &Resource) {
        self.owner.set_resource(resource);
    }
}

/// The SDK's spans (those started through the OpenTelemetry API, and the
/// `tracing` bridge's) join the recorder's records in the one queue.
impl SpanProcessor for LensBatchRecordProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let _queued = self.owner.inner.push(SpanRecord::from_span_data(span));
    }

    /// Exports what is queued (the recorder's thread buffers included),
    /// waiting up to the export timeout.
    fn force_flush(&self) -> OTelSdkResult {
        self.force_flush_with_timeout(self.owner.inner.config.export_timeout)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        LensBatchRecordProcessor::shutdown_with_timeout(self, timeout)
    }

    /// Passes the provider's resource to the exporter (before any export).
    fn set_resource(&mut self, resource: &Resource) {
        self.owner.set_resource(resource);
    }
}

/// The room of a chunk that [`Chunks::push`] starts (items pushed one at a
/// time fill it; it never grows, so no pushed item is copied twice).
const CHUNK_ITEMS: usize = 256;

/// The export queue: items in arrival order, kept in the vectors they
/// came in. A thread buffer handed over by the span recorder (128 records
/// of a few hundred bytes each) becomes one chunk as it is, so the job's
/// thread copies no record into the queue; the worker copies them into
/// batches on its own thread.
struct Chunks<T> {
    chunks: VecDeque<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunks<T> {
    fn default() -> Self {
        Chunks { chunks: VecDeque::new(), len: 0 }
    }
}

impl<T> Chunks<T> {
    /// How many items are queued.
    fn len(&self) -> usize {
        self.len
    }

    /// Appends one item: into the last chunk while it has room (never
    /// growing it: a grown chunk would copy what it holds on the pushing
    /// thread), else into a new chunk of [`CHUNK_ITEMS`].
    fn push(&mut self, item: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < last.capacity() => last.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK_ITEMS);
                chunk.push(item);
                self.chunks.push_back(chunk);
            }
        }
        self.len += 1;
    }

    /// Appends the items of `chunk`, in order, without copying them.
    fn push_chunk(&mut self, chunk: Vec<T>) {
        if !chunk.is_empty() {
            self.len += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    /// The next at most `max` items (`max` at least 1), in order: a chunk
    /// that fits is handed out as it is; `None` when nothing is left.
    fn next_batch(&mut self, max: usize) -> Option<Vec<T>> {
        let max = max.max(1);
        let mut batch: Vec<T> = Vec::new();
        while batch.len() < max {
            let Some(mut chunk) = self.chunks.pop_front() else { break };
            if batch.is_empty() && chunk.len() <= max {
                batch = chunk;
                continue;
            }
            if batch.capacity() == 0 {
                batch.reserve_exact(max.min(self.len));
            }
            let take = (max - batch.len()).min(chunk.len());
            batch.extend(chunk.drain(..take));
            if !chunk.is_empty() {
                self.chunks.push_front(chunk);
            }
        }
        self.len -= batch.len();
        (!batch.is_empty()).then_some(batch)
    }
}

/// The worker: waits for a reason to export, takes everything queued, hands
/// it out in batches, and at shutdown drains and shuts the exporter down.
fn run_worker<T: Item>(inner: &Arc<Inner<T>>) {
    let mut next_sequence: u64 = 0;
    let mut taken: Chunks<T> = Chunks::default();
    let mut warned = Warned::default();
    loop {
        let closing = {
            let mut queue = lock(&inner.queue);
            let wake_at = Instant::now() + inner.config.scheduled_delay;
            // Whether to collect the recorder's thread buffers first: at a
            // scheduled wake, a flush and shutdown (not for a full batch).
            let collect = loop {
                if inner.closed.load(Ordering::Acquire) || inner.flush_requested.load(Ordering::Acquire) {
                    break true;
                }
                if queue.len() >= inner.config.max_export_batch_size {
                    break false;
                }
                let now = Instant::now();
                if now >= wake_at {
                    break true;
                }
                queue = wait_timeout(&inner.queue_changed, queue, wake_at - now);
            };
            // The collector queues what it collects: it takes the queue's lock.
            let collector = if collect { lock(&inner.collector).clone() } else { None };
            if let Some(collector) = collector {
                drop(queue);
                collector();
                queue = lock(&inner.queue);
            }
            inner.flush_requested.store(false, Ordering::Release);
            // Swapping keeps the lock short and leaves capacity behind.
            std::mem::swap(&mut *queue, &mut taken);
            inner.held_by_worker.store(taken.len(), Ordering::Release);
            inner.closed.load(Ordering::Acquire)
        };
        while let Some(batch) = taken.next_batch(inner.config.max_export_batch_size) {
            let len = batch.len();
            dispatch(inner, batch, next_sequence);
            inner.held_by_worker.fetch_sub(len, Ordering::AcqRel);
            next_sequence += len as u64;
            warned.maybe_warn(inner);
        }
        warned.maybe_warn(inner);
        if closing {
            finish(inner);
            // The last word, whatever the rate limit held back: a job that
            // drops spans throughout would otherwise end on a warning that
            // counted only the first of them.
            warned.warn_final(inner);
            return;
        }
    }
}

/// Waits for the in-flight exports to end (until the shutdown deadline),
/// shuts the exporter down, and tells shutdown that the worker is done.
/// Batches whose export has not returned by the deadline are counted as
/// unsent at shutdown here (their threads are left to finish on their own,
/// and count nothing when they do), so that once the worker is done every
/// accepted item is counted.
fn finish<T: Item>(inner: &Inner<T>) {
    let mut control = lock(&inner.control);
    let deadline = control.shutdown_deadline.unwrap_or_else(Instant::now);
    while !control.unresolved.is_empty() {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        control = wait_timeout(&inner.control_changed, control, deadline - now);
    }
    let all_returned = control.unresolved.is_empty();
    for (start, len) in std::mem::take(&mut control.unresolved) {
        inner.resolve_locked(&mut control, start, len, Outcome::Abandoned);
    }
    drop(control);
    if all_returned {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let exporter = inner.exporter();
        let _shutdown = catch_unwind(AssertUnwindSafe(|| exporter.shutdown_with_timeout(remaining)));
    }
    let mut control = lock(&inner.control);
    control.worker_done = true;
    control.finished_cleanly = all_returned;
    drop(control);
    inner.control_changed.notify_all();
}

/// Waits for a free export slot and starts an export of `batch` on its own
/// thread; past the shutdown deadline the batch is abandoned instead.
fn dispatch<T: Item>(inner: &Arc<Inner<T>>, batch: Vec<T>, start: u64) {
    let len = batch.len();
    let mut control = lock(&inner.control);
    while control.unresolved.len() >= inner.config.max_concurrent_exports {
        let now = Instant::now();
        let wait = match control.shutdown_deadline {
            Some(deadline) if now >= deadline => {
                drop(control);
                inner.resolve(start, len, Outcome::Abandoned);
                return;
            }
            Some(deadline) => (deadline - now).min(Duration::from_millis(100)),
            None => Duration::from_millis(100),
        };
        control = wait_timeout(&inner.control_changed, control, wait);
    }
    if control.shutdown_deadline.is_some_and(|deadline| Instant::now() >= deadline) {
        drop(control);
        inner.resolve(start, len, Outcome::Abandoned);
        return;
    }
    control.unresolved.insert(start, len);
    drop(control);
    inner.counters.record(ExportEvent::Started { len: len as u64 });

    let number = inner.export_threads.fetch_add(1, Ordering::Relaxed);
    let batch = Arc::new(Mutex::new(Some(batch)));
    let for_thread = (Arc::clone(inner), Arc::clone(&batch));
    let spawned = thread::Builder::new().name(format!("{}-{number}", inner.pipeline.send_thread)).spawn(move || {
        crate::export_path::mark_thread();
        let (inner, batch) = for_thread;
        let batch = lock(&batch).take().unwrap_or_default();
        export_and_resolve(&inner, batch, start);
    });
    if spawned.is_err() {
        // No thread to be had: export here, on the worker.
        let batch = lock(&batch).take().unwrap_or_default();
        export_and_resolve(inner, batch, start);
    }
}

/// Exports `batch` and counts its outcome, unless the worker has already
/// counted it as unsent at shutdown (the export outlived the deadline).
fn export_and_resolve<T: Item>(inner: &Inner<T>, batch: Vec<T>, start: u64) {
    let len = batch.len();
    let spooled: Option<Vec<SpoolKey>> = inner.spool.get().map(|_| batch.iter().filter_map(Item::spool_key).collect());
    let outcome = export_with_retry(inner, batch);
    // Exported, or dropped for good after the retry window: the spool stops
    // keeping them. Abandoned at shutdown: kept, for the next attempt.
    if let (Some(spool), Some(keys)) = (inner.spool.get(), spooled)
        && outcome != Outcome::Abandoned
    {
        spool.released(keys);
    }
    inner.counters.record(ExportEvent::Finished { len: len as u64 });
    let mut control = lock(&inner.control);
    if control.unresolved.remove(&start).is_some() {
        inner.resolve_locked(&mut control, start, len, outcome);
    }
    drop(control);
    inner.control_changed.notify_all();
}

/// Exports `batch`, retrying failures with backoff until the retry window
/// (or the shutdown deadline) ends: a batch whose retries the window ended
/// failed; one whose retries the shutdown deadline cut short is unsent at
/// shutdown. A failure the destination says is final ([`Retry::Never`])
/// fails the batch at once; one that names its wait ([`Retry::After`]) is
/// retried after that wait, or the backoff when that is longer (a wait of
/// 0 does not make a busy loop). The batch is readied once (encoded, for
/// lens's OTLP exporter) and kept for the retries; a batch that cannot be
/// readied (it cannot be encoded) fails at once, since a retry would fail
/// the same way.
fn export_with_retry<T: Item>(inner: &Inner<T>, batch: Vec<T>) -> Outcome {
    let window_end = later(inner.config.retry_window);
    let mut backoff = RETRY_INITIAL_BACKOFF;
    let exporter = inner.exporter();
    let prepared = catch_unwind(AssertUnwindSafe(|| exporter.prepare(batch))).unwrap_or_else(|_| {
        Err(OTelSdkError::InternalFailure(format!("the {} exporter panicked", inner.pipeline.what)))
    });
    let payload = match prepared {
        Ok(payload) => payload,
        Err(error) => {
            inner.keep_error(&error);
            inner.counters.failed_outside_an_attempt();
            return Outcome::Failed;
        }
    };
    let mut first = true;
    loop {
        if !first {
            inner.counters.record(ExportEvent::Retried);
        }
        first = false;
        let shutdown_deadline = inner.shutdown_deadline();
        let mut attempt_deadline = Instant::now() + inner.config.export_timeout;
        if let Some(deadline) = shutdown_deadline {
            attempt_deadline = attempt_deadline.min(deadline);
        }
        inner.counters.attempt_started();
        let result = attempt(inner, &payload, attempt_deadline);
        if let Err(error) = &result {
            inner.keep_error(&error.error);
            if let OTelSdkError::Timeout(bound) = error.error
                && shutdown_deadline.is_none()
                && !inner.warned_no_answer.swap(true, Ordering::Relaxed)
            {
                warn(format_args!(
                    "{}: an export got no answer within {bound:?} (the export timeout; for OTLP, \
                     OTEL_EXPORTER_OTLP_TIMEOUT): the destination may hang; lens retries within its retry window \
                     and counts what is lost in the shutdown report",
                    inner.pipeline.what,
                ));
            }
        }
        inner.counters.attempt_ended(result.is_err());
        let retry = match result {
            Ok(()) => return Outcome::Exported,
            Err(error) => error.retry,
        };
        // A wait the destination asked for is kept when shutdown begins if
        // it ends before the deadline (a retry sooner would be refused
        // again); if it does not, the batch is unsent at shutdown then.
        let (wait, asked) = match retry {
            Retry::Never => return Outcome::Failed,
            Retry::Backoff => (jittered(backoff), false),
            Retry::After(wait) => (wait.max(jittered(backoff)), true),
        };
        // A destination's wait is any number it sends: never added past
        // what an instant can hold.
        let wake_at = later(wait);
        backoff = (backoff * 2).min(RETRY_MAX_BACKOFF);
        if let Some(outcome) = retries_over(window_end, inner.shutdown_deadline(), wake_at) {
            return outcome;
        }
        sleep_until(inner, wake_at, shutdown_deadline.is_some(), asked);
        if asked && inner.shutdown_deadline().is_some_and(|deadline| deadline <= wake_at) {
            // Shutdown began during a wait the destination asked for, whose
            // end its deadline does not reach: unsent at shutdown now.
            return Outcome::Abandoned;
        }
        if let Some(outcome) = retries_over(window_end, inner.shutdown_deadline(), Instant::now()) {
            return outcome;
        }
    }
}

/// Sleeps until `wake_at`, or until shutdown begins if it had not yet (the
/// last retry then happens at once, within shutdown's deadline); a wait the
/// destination `asked` for ends at shutdown only when the deadline comes
/// before it.
fn sleep_until<T: Item>(inner: &Inner<T>, wake_at: Instant, shutdown_seen: bool, asked: bool) {
    let mut control = lock(&inner.control);
    loop {
        if let Some(deadline) = control.shutdown_deadline {
            // A backoff ends when shutdown begins (the last retry happens at
            // once); a wait the destination asked for is kept if it ends
            // before the deadline, and ends now if it does not.
            let ends = if asked { deadline <= wake_at } else { !shutdown_seen };
            if ends {
                return;
            }
        }
        let now = Instant::now();
        if now >= wake_at {
            return;
        }
        control = wait_timeout(&inner.control_changed, control, wake_at - now);
    }
}

/// The instant `by` from now, or a century from now when `by` is longer than
/// an instant can hold (a configured window, a destination's wait).
fn later(by: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(by).unwrap_or(now + CENTURY)
}

/// Between half and all of `backoff`, at random ("equal jitter"), so that
/// ranks that failed together do not retry together.
fn jittered(backoff: Duration) -> Duration {
    let fraction = (super::ids::random_u64() >> 11) as f64 / (1_u64 << 53) as f64;
    backoff.mul_f64(0.5 + 0.5 * fraction)
}

/// One export attempt, bounded by `deadline`; a panicking exporter counts
/// as a failed attempt.
fn attempt<T: Item>(inner: &Inner<T>, payload: &Payload<T>, deadline: Instant) -> ExportResult {
    // The bound this attempt really has, which a timeout states: the export
    // timeout, or less when shutdown's deadline comes first (rounded up to
    // the millisecond: 100 ms, not 99.99 ms).
    let bound = deadline.saturating_duration_since(Instant::now());
    let bound = Duration::from_millis(u64::try_from(bound.as_micros().div_ceil(1000)).unwrap_or(u64::MAX));
    let future = match catch_unwind(AssertUnwindSafe(|| inner.exporter().export_payload(payload))) {
        Ok(future) => future,
        Err(_) => {
            return Err(OTelSdkError::InternalFailure(format!("the {} exporter panicked", inner.pipeline.what)).into());
        }
    };
    // Whichever thread polls it (a worker of the caller's runtime) is on
    // the export path meanwhile.
    let future = crate::export_path::marked(future);
    let timeout = || ExportError::from(OTelSdkError::Timeout(bound));
    let outcome = catch_unwind(AssertUnwindSafe(|| match &inner.config.runtime {
        None => block_on_until(future, deadline).unwrap_or_else(|| Err(timeout())),
        Some(runtime) => {
            let mut task = runtime.spawn(future);
            match block_on_until(&mut task, deadline) {
                Some(Ok(result)) => result,
                Some(Err(join_error)) => {
                    Err(OTelSdkError::InternalFailure(format!("the export task failed: {join_error}")).into())
                }
                None => {
                    task.abort();
                    Err(timeout())
                }
            }
        }
    }));
    outcome.unwrap_or_else(|_| {
        Err(OTelSdkError::InternalFailure(format!("the {} exporter panicked", inner.pipeline.what)).into())
    })
}

/// What the last warning reported, so that the next one reports what is new.
#[derive(Debug, Default)]
struct Warned {
    dropped_queue_full: u64,
    dropped_export_failed: u64,
    dropped_at_shutdown: u64,
    export_errors: u64,
}

impl Warned {
    /// Warns of what was lost since the last warning, unless one was given
    /// within the rate limit's period.
    fn maybe_warn<T: Item>(&mut self, inner: &Inner<T>) {
        self.warn_since(inner, false);
    }

    /// Warns of what was lost since the last warning, rate limit or not,
    /// with the whole lifetime's count: the worker's last word.
    fn warn_final<T: Item>(&mut self, inner: &Inner<T>) {
        self.warn_since(inner, true);
    }

    fn warn_since<T: Item>(&mut self, inner: &Inner<T>, last: bool) {
        let now = inner.counters.snapshot();
        let queue_full = now.dropped_queue_full - self.dropped_queue_full;
        let failed = now.dropped_export_failed - self.dropped_export_failed;
        let at_shutdown = now.dropped_at_shutdown - self.dropped_at_shutdown;
        let errors = now.export_errors - self.export_errors;
        if queue_full + failed + at_shutdown + errors == 0 || (!last && inner.warnings.check().is_none()) {
            return;
        }
        let earlier = self.dropped_queue_full + self.dropped_export_failed + self.dropped_at_shutdown;
        *self = Warned {
            dropped_queue_full: now.dropped_queue_full,
            dropped_export_failed: now.dropped_export_failed,
            dropped_at_shutdown: now.dropped_at_shutdown,
            export_errors: now.export_errors,
        };
        let last_error = lock(&inner.last_error).clone();
        let cause = last_error.map(|error| format!("; last error: {error}")).unwrap_or_default();
        // What a shutdown leaves unsent stays in a spool file (its slots are
        // never released) for the next attempt or `lens recover`.
        let kept = if at_shutdown > 0 && inner.spool.get().is_some_and(|spool| spool.is_file()) {
            ", kept in the crash spool"
        } else {
            ""
        };
        let dropped = queue_full + failed + at_shutdown;
        // The last word adds the whole count when earlier warnings said part
        // of it.
        let in_all = if last && earlier > 0 {
            format!(" ({} {} dropped in all)", earlier + dropped, inner.pipeline.items)
        } else {
            String::new()
        };
        warn(format_args!(
            "{}: {dropped} {} dropped (queue full: {queue_full}, export failed: {failed}, \
             unsent at shutdown: {at_shutdown}{kept}) and {errors} export attempts failed since the last \
             report{in_all}{cause}",
            inner.pipeline.what, inner.pipeline.items,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_watermark_waits_for_the_earliest_batch() {
        let mut progress = Progress::default();
        progress.resolve(10, 20);
        assert_eq!(progress.watermark, 0);
        progress.resolve(0, 10);
        assert_eq!(progress.watermark, 20);
        progress.resolve(20, 25);
        assert_eq!(progress.watermark, 25);
    }

    #[test]
    fn config_normalizes_zeroes_and_caps_the_batch() {
        let config = BatchConfig {
            max_queue_size: 0,
            max_export_batch_size: 50,
            max_concurrent_exports: 0,
            ..BatchConfig::default()
        }
        .normalized();
        assert_eq!((config.max_queue_size, config.max_export_batch_size, config.max_concurrent_exports), (1, 1, 1));
    }

    #[test]
    fn debug_hides_redacted_values() {
        let config = BatchConfig { redact: vec!["s3cr3t-token".to_owned()], ..BatchConfig::default() };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("1 redacted"), "{shown}");
    }

    #[test]
    fn chunks_hand_out_batches_in_order_without_losing_an_item() {
        let mut queue = Chunks::default();
        queue.push_chunk((0..128).collect::<Vec<u32>>());
        queue.push_chunk(Vec::new());
        queue.push(128);
        queue.push(129);
        queue.push_chunk((130..300).collect());
        queue.push_chunk((300..310).collect());
        assert_eq!(queue.len(), 310);
        let mut sizes = Vec::new();
        let mut items = Vec::new();
        while let Some(batch) = queue.next_batch(100) {
            sizes.push(batch.len());
            items.extend(batch);
        }
        assert_eq!(sizes, [100, 100, 100, 10]);
        assert_eq!(items, (0..310).collect::<Vec<_>>());
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn a_chunk_that_fits_is_the_batch_itself() {
        let mut queue = Chunks::default();
        let chunk: Vec<u32> = (0..128).collect();
        let at = chunk.as_ptr();
        queue.push_chunk(chunk);
        let batch = queue.next_batch(512).unwrap();
        assert_eq!((batch.as_ptr(), batch.len()), (at, 128));
        assert!(queue.next_batch(512).is_none());
    }

    #[test]
    fn pushed_items_share_chunks_that_never_grow() {
        let mut queue = Chunks::default();
        for item in 0..(CHUNK_ITEMS * 2 + 1) {
            queue.push(item);
        }
        assert_eq!((queue.len(), queue.chunks.len()), (CHUNK_ITEMS * 2 + 1, 3));
        assert!(queue.chunks.iter().all(|chunk| chunk.capacity() == CHUNK_ITEMS));
        // A full chunk handed over (a thread buffer) is not grown by a push.
        queue.push_chunk(vec![0, 1, 2, 3]);
        queue.push(9);
        assert_eq!(queue.chunks.iter().map(Vec::len).collect::<Vec<_>>(), [CHUNK_ITEMS, CHUNK_ITEMS, 1, 4, 1]);
        assert_eq!(queue.next_batch(usize::MAX).map(|batch| batch.len()), Some(CHUNK_ITEMS * 2 + 6));
    }

    /// A batch exporter whose exports never answer.
    struct Silent;

    impl BatchExporter<SpanData> for Silent {
        fn export_payload(self: Arc<Self>, _payload: &Payload<SpanData>) -> ExportFuture {
            Box::pin(std::future::pending())
        }

        fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
            Ok(())
        }

        fn set_resource(&mut self, _resource: &Resource) {}
    }

    #[test]
    fn an_attempt_cut_short_by_shutdown_states_its_real_bound() {
        let config = BatchConfig { export_timeout: Duration::from_secs(10), ..BatchConfig::default() };
        let owner = Owner::<SpanData>::start(Arc::new(Silent), config, &SPANS);
        let payload = Payload::Items(Arc::new(Vec::new()));
        // Shutdown's deadline, 150 ms away, bounds this attempt, not the
        // 10 s export timeout.
        let started = Instant::now();
        let error = attempt(&owner.inner, &payload, started + Duration::from_millis(150)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let said = error.to_string();
        assert!(
            ["Operation timed out after 150ms", "Operation timed out after 149ms"].contains(&said.as_str()),
            "{said}"
        );
    }

    #[test]
    fn jitter_stays_between_half_and_all() {
        for _ in 0..100 {
            let wait = jittered(Duration::from_millis(1000));
            assert!(wait >= Duration::from_millis(500) && wait <= Duration::from_millis(1000), "{wait:?}");
        }
    }
}
