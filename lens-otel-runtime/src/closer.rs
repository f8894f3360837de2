//! The open-span closer: spans still open at telemetry shutdown are exported,
//! innermost first, marked `nemo.span.truncated`, so that a job that stops
//! with spans open still shows them.
//!
//! A job that stops while spans are open (an exception unwinding past a
//! step, a signal handler calling shutdown, a span leaked by mistake) would
//! otherwise lose them, and with them the parents of every span already
//! exported. In Python the closer holds the live spans and ends them. An
//! OpenTelemetry Rust span processor only *borrows* a span in `on_start`, so
//! [`OpenSpanCloser`] keeps a record of each open span instead, written when
//! it starts into a slot of the rank's spool ([`crate::spool`], the one
//! open-span registry: a memory-mapped file that a killed process leaves for
//! the next attempt, or the same table in anonymous memory when the spool is
//! off), and marked ended when it ends (the batch processor frees the slot
//! once the span is exported); at shutdown it turns the records of the spans
//! still open into ended, marked copies and hands them to the batch span
//! processor before that one drains.
//!
//! What such a copy lacks, compared with the span its owner would have
//! ended: what the span gained after its slot was last written (at its
//! start; a lens span's also at each of its first eight events, a control
//! change say, which write it whole as it is then): attributes, events, a
//! new name; its links; attributes and events beyond what a 1 KiB slot
//! holds (attributes counted as dropped); and its status (left unset, as in
//! the original, which did not set ERROR either). Its end time is the
//! shutdown time.
//!
//! Wiring: register the closer *before* the batch processor, so that the
//! provider's shutdown (which shuts processors down in order) closes spans
//! first:
//!
//! ```
//! # #[cfg(feature = "testing")] { // the in-memory exporter comes with `testing`
//! use lens_otel_runtime::batch::{BatchConfig, LensBatchSpanProcessor};
//! use lens_otel_runtime::closer::OpenSpanCloser;
//! use opentelemetry::trace::{Tracer, TracerProvider};
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//!
//! let exporter = InMemorySpanExporter::default();
//! let batch = LensBatchSpanProcessor::new(exporter.clone(), BatchConfig::default());
//! let provider = SdkTracerProvider::builder()
//!     .with_span_processor(OpenSpanCloser::with_target(batch.clone()))
//!     .with_span_processor(batch.clone())
//!     .build();
//! let _open = provider.tracer("doc").start("train");
//! let counters = batch.counters();
//! provider.shutdown().unwrap();
//! // The open span was exported, truncated, before the exporter shut down.
//! assert_eq!(counters.snapshot().exported, 1);
//! # }
//! ```
//!
//! After shutdown the SDK provider no longer passes ended spans to its
//! processors, and the batch processor rejects any that still arrive, so a
//! span whose owner ends it after shutdown is not exported a second time.
//!
//! In a forked child the closer forgets the parent's open spans (the child
//! must not export them again): it keeps its own in a table of its own in
//! anonymous memory, never in the parent's spool file, and never waits on a
//! lock that a thread of the parent held at the fork.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{Event, Link, SpanContext, SpanId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

use super::batch::{LensBatchRecordProcessor, LensBatchSpanProcessor};
use super::ids::fork_generation;
use super::span_record::SpanRecord;
use super::spool::{SpanView, SpoolSlot, SpoolTable};

/// The attribute (`true`) and the event name on a span that was still open at
/// shutdown.
pub const SPAN_TRUNCATED: &str = lens_core::semconv::NEMO_SPAN_TRUNCATED;
/// The attribute of the [`SPAN_TRUNCATED`] event that says why.
pub const SPAN_TRUNCATED_REASON: &str = "nemo.span.truncated.reason";
/// The value of [`SPAN_TRUNCATED_REASON`].
pub const SPAN_TRUNCATED_REASON_AT_SHUTDOWN: &str = "still open at telemetry shutdown";
/// The value of [`SPAN_TRUNCATED_REASON`] on a span that was open when its
/// process died, replayed from the spool ([`crate::spool`]).
pub const SPAN_TRUNCATED_REASON_PROCESS_DIED: &str = "the process died; replayed by the next attempt";

/// The value of [`SPAN_TRUNCATED_REASON`] on a current span that its
/// thread's exit ended: its guard was forgotten (or kept past the thread's
/// current-span stack), so nothing else would have ended it.
pub const SPAN_TRUNCATED_REASON_THREAD_EXITED: &str = "its thread exited with the span still current";

/// The attribute (`true`) on a copy of a span that was still open when a
/// hang was suspected ([`OpenSpanCloser::export_open_copies`], called by the
/// hang watchdog).
pub const SPAN_OPEN: &str = lens_core::semconv::NEMO_SPAN_OPEN;

/// Where the truncated copies go at shutdown.
enum Target {
    None,
    Batch(LensBatchSpanProcessor),
    Records(LensBatchRecordProcessor),
    Sink(Box<dyn Fn(SpanData) + Send + Sync>),
}

/// A span processor that remembers open spans and, at shutdown, exports
/// ended copies of the ones still open, innermost first, marked
/// [`SPAN_TRUNCATED`].
///
/// It tracks sampled spans only (unsampled ones are never exported), costs a
/// copy of the span's data at start and a map update at start and end, and
/// does nothing on `force_flush`: flushing never ends a live span. Clones are
/// handles to the same closer, so the runtime can keep one while the provider
/// owns another.
#[derive(Clone)]
pub struct OpenSpanCloser {
    inner: Arc<CloserInner>,
}

struct CloserInner {
    /// The open-span registry: the spool's slots (a file, or anonymous
    /// memory when the spool is off).
    table: Arc<SpoolTable>,
    /// A forked child's own table (it never writes into its parent's).
    child_table: OnceLock<Arc<SpoolTable>>,
    closed: AtomicBool,
    /// How many open spans the drain at shutdown ended.
    truncated: AtomicUsize,
    /// The fork generation that owns `table`.
    generation: u64,
    target: Target,
}

impl fmt::Debug for OpenSpanCloser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match self.inner.target {
            Target::None => "none",
            Target::Batch(_) => "batch processor",
            Target::Records(_) => "record processor",
            Target::Sink(_) => "sink",
        };
        f.debug_struct("OpenSpanCloser")
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .field("target", &target)
            .finish_non_exhaustive()
    }
}

impl Default for OpenSpanCloser {
    fn default() -> OpenSpanCloser {
        OpenSpanCloser::new()
    }
}

impl OpenSpanCloser {
    /// A closer without a target: at shutdown, collect the truncated copies
    /// yourself with [`drain_truncated`](Self::drain_truncated) first (a
    /// shutdown through the provider would discard them).
    pub fn new() -> OpenSpanCloser {
        OpenSpanCloser::with(Target::None, None)
    }

    /// A closer that queues its truncated copies on `batch` at shutdown
    /// (through [`LensBatchSpanProcessor::enqueue_data`]). Register it before
    /// `batch` on the provider.
    pub fn with_target(batch: LensBatchSpanProcessor) -> OpenSpanCloser {
        OpenSpanCloser::with(Target::Batch(batch), None)
    }

    /// [`with_target`](Self::with_target), keeping the open spans in
    /// `table` (the rank's spool), which `batch` also releases exported
    /// spans from.
    pub fn with_spool(batch: LensBatchSpanProcessor, table: Arc<SpoolTable>) -> OpenSpanCloser {
        if table.is_file() {
            batch.set_spool(Arc::clone(&table));
        }
        OpenSpanCloser::with(Target::Batch(batch), Some(table))
    }

    /// [`with_spool`](Self::with_spool) for the span recorder's processor
    /// (setup's wiring): the truncated copies are queued on `processor`,
    /// which also releases exported spans from `table`.
    pub fn with_records(processor: LensBatchRecordProcessor, table: Arc<SpoolTable>) -> OpenSpanCloser {
        if table.is_file() {
            processor.set_spool(Arc::clone(&table));
        }
        OpenSpanCloser::with(Target::Records(processor), Some(table))
    }

    /// A closer that passes each truncated copy to `sink` at shutdown,
    /// innermost first.
    pub fn with_sink(sink: impl Fn(SpanData) + Send + Sync + 'static) -> OpenSpanCloser {
        OpenSpanCloser::with(Target::Sink(Box::new(sink)), None)
    }

    fn with(target: Target, table: Option<Arc<SpoolTable>>) -> OpenSpanCloser {
        OpenSpanCloser {
            inner: Arc::new(CloserInner {
                table: table.unwrap_or_else(|| SpoolTable::anonymous(crate::spool::ANONYMOUS_SLOTS)),
                child_table: OnceLock::new(),
                closed: AtomicBool::new(false),
                truncated: AtomicUsize::new(0),
                generation: fork_generation(),
                target,
            }),
        }
    }

    /// The open-span table: the spool's, or in a forked child a table of its
    /// own (it forgets the parent's spans).
    fn table(&self) -> &SpoolTable {
        let inner = &*self.inner;
        if inner.generation == fork_generation() {
            return &inner.table;
        }
        inner.child_table.get_or_init(|| SpoolTable::anonymous(crate::spool::ANONYMOUS_SLOTS))
    }

    /// Whether the closer has closed (telemetry shut down): spans started
    /// now are not recorded.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// How many spans are open now (tracked and not yet ended).
    pub fn open_count(&self) -> usize {
        self.table().open_count()
    }

    /// How many spans are open now that are not tracked: they started while
    /// every slot of the table held an open span, so shutdown cannot end
    /// them and a crash's replay does not have them.
    pub fn open_unkept(&self) -> u64 {
        self.table().open_unkept()
    }

    /// How many open spans [`drain_truncated`](Self::drain_truncated) ended
    /// (0 before it ran).
    pub fn truncated_count(&self) -> usize {
        self.inner.truncated.load(Ordering::Acquire)
    }

    /// Stops tracking and returns ended, marked copies of the spans still
    /// open, innermost (latest started) first, all ending now. Later calls,
    /// and [`SpanProcessor::shutdown`] after this one, return nothing more.
    pub fn drain_truncated(&self) -> Vec<SpanData> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Vec::new();
        }
        // The slots stay until the batch processor has exported the
        // truncated copies (same span ids) and released them.
        let mut open = self.table().take_open_spans();
        self.inner.truncated.store(open.len(), Ordering::Release);
        open.sort_unstable_by_key(|&(order, _)| std::cmp::Reverse(order));
        let now = opentelemetry::time::now();
        open.into_iter().map(|(_, span)| truncated(span, now)).collect()
    }

    /// Copies of the spans open now, outermost (earliest started) first,
    /// each with a fresh span id, its parent the copy of its open parent (or
    /// the original's parent when that one is not open), marked
    /// [`SPAN_OPEN`], linked to its original and ended now; the innermost
    /// also gets the event `event` with `attributes`. The originals stay
    /// open and end as usual (or truncated at shutdown). Nothing once
    /// closed.
    ///
    /// Takes the closer's lock for the time of a copy of each open span's
    /// data: a handful of spans, once per suspected hang.
    pub fn open_copies(&self, event: &'static str, attributes: Vec<KeyValue>) -> Vec<SpanData> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut open = self.table().open_spans();
        open.sort_unstable_by_key(|&(order, _)| order);
        let fresh: HashMap<SpanId, SpanId> = open
            .iter()
            .map(|(_, span)| (span.span_context.span_id(), SpanId::from(super::ids::random_u64().max(1))))
            .collect();
        let now = opentelemetry::time::now();
        let mut copies: Vec<SpanData> = open
            .into_iter()
            .map(|(_, mut span)| {
                let original = span.span_context.clone();
                span.span_context = SpanContext::new(
                    original.trace_id(),
                    fresh[&original.span_id()],
                    original.trace_flags(),
                    false,
                    original.trace_state().clone(),
                );
                if let Some(parent) = fresh.get(&span.parent_span_id) {
                    span.parent_span_id = *parent;
                    span.parent_span_is_remote = false;
                }
                span.end_time = now.max(span.start_time);
                span.attributes.push(KeyValue::new(SPAN_OPEN, true));
                span.links.links.push(Link::with_context(original));
                span
            })
            .collect();
        if let Some(innermost) = copies.last_mut() {
            let at = innermost.end_time;
            innermost.events.events.push(Event::new(event, at, attributes, 0));
        }
        copies
    }

    /// [`open_copies`](Self::open_copies), handed to the target (queued on
    /// the batch processor, or passed to the sink), outermost first; the
    /// names of the copies, outermost first. Flush afterwards to export them.
    pub fn export_open_copies(&self, event: &'static str, attributes: Vec<KeyValue>) -> Vec<String> {
        let copies = self.open_copies(event, attributes);
        let names = copies.iter().map(|span| span.name.to_string()).collect();
        self.hand_over(copies);
        names
    }

    fn hand_over(&self, spans: Vec<SpanData>) {
        match &self.inner.target {
            Target::None => {}
            Target::Batch(batch) => {
                for span in spans {
                    let _queued = batch.enqueue_data(span);
                }
            }
            Target::Records(processor) => {
                for span in spans {
                    let _queued = processor.enqueue(SpanRecord::from_span_data(span));
                }
            }
            Target::Sink(sink) => {
                for span in spans {
                    let _ignored = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink(span)));
                }
            }
        }
    }
}

/// Marks `span` as truncated and ends it at `now` (or at its start, if it
/// was backdated to start later than now).
fn truncated(span: SpanData, now: std::time::SystemTime) -> SpanData {
    mark_truncated(span, now, SPAN_TRUNCATED_REASON_AT_SHUTDOWN)
}

/// Ends `span` at `end` (or at its start, if that is later), marked
/// [`SPAN_TRUNCATED`] with an event saying `reason`: the closer's marks,
/// shared with the spool's replay.
pub fn mark_truncated(mut span: SpanData, end: std::time::SystemTime, reason: &'static str) -> SpanData {
    span.end_time = end.max(span.start_time);
    span.attributes.push(KeyValue::new(SPAN_TRUNCATED, true));
    span.events.events.push(Event::new(
        SPAN_TRUNCATED,
        span.end_time,
        vec![KeyValue::new(SPAN_TRUNCATED_REASON, reason)],
        0,
    ));
    span
}

impl OpenSpanCloser {
    /// Registers a started span as open (sampled spans only; nothing once
    /// closed): the SDK's spans through [`SpanProcessor::on_start`], the
    /// recorder's spans directly.
    pub fn span_started(&self, span: SpanView<'_>) {
        if self.inner.closed.load(Ordering::Acquire) || !span.span_context.is_sampled() {
            return;
        }
        self.table().span_started(span);
    }

    /// Registers a span as ended. `false` once the closer is closed: the
    /// span was exported truncated at shutdown and must not be exported
    /// again.
    pub fn span_ended(&self, span: SpanView<'_>) -> bool {
        if self.inner.closed.load(Ordering::Acquire) {
            return false;
        }
        let table = self.table();
        match &self.inner.target {
            // The processor releases the slot once the span's batch is
            // exported: until then the spool file keeps the ended span.
            Target::Batch(_) | Target::Records(_) if table.is_file() && span.span_context.is_sampled() => {
                table.span_ended(span);
            }
            _ => table.forget(span.key()),
        }
        true
    }

    /// [`span_started`](Self::span_started) for a span of lens's tracer:
    /// the slot that keeps it, `None` when it is not kept (unsampled,
    /// closed, or a full table).
    #[inline]
    pub(crate) fn record_started(&self, span: &SpanView<'_>) -> Option<SpoolSlot> {
        if self.inner.closed.load(Ordering::Acquire) || !span.span_context.is_sampled() {
            return None;
        }
        self.table().record_started(span)
    }

    /// A span of lens's tracer kept in `slot`, still open, changed (it
    /// gained an event): its slot is written again as `span` shows it.
    /// Nothing once the closer is closed.
    pub(crate) fn record_changed(&self, slot: &mut SpoolSlot, span: &SpanView<'_>) {
        if !self.inner.closed.load(Ordering::Acquire) {
            self.table().record_changed(slot, span);
        }
    }

    /// [`span_ended`](Self::span_ended) for a span of lens's tracer kept
    /// in `slot`, `sampled` or not, ended as `span` shows it: `None` once the
    /// closer is closed (the span was exported truncated at shutdown and
    /// must not be exported again), else the slot the processor releases
    /// once the span is exported, if it keeps one. `span` is called only
    /// when the slot keeps the ended span (a spool in a file); in memory
    /// the slot is freed.
    #[inline]
    pub(crate) fn record_ended<'v>(
        &self,
        slot: Option<SpoolSlot>,
        sampled: bool,
        span: impl FnOnce() -> SpanView<'v>,
    ) -> Option<Option<SpoolSlot>> {
        if self.inner.closed.load(Ordering::Acquire) {
            return None;
        }
        let Some(slot) = slot else { return Some(None) };
        let table = self.table();
        let keep = matches!(self.inner.target, Target::Batch(_) | Target::Records(_)) && table.is_file() && sampled;
        if !keep {
            table.release_ended(slot);
            return Some(None);
        }
        Some(table.record_ended(slot, &span()))
    }
}

impl SpanProcessor for OpenSpanCloser {
    fn on_start(&self, span: &mut Span, _cx: &Context) {
        if self.inner.closed.load(Ordering::Acquire) || !opentelemetry::trace::Span::span_context(span).is_sampled() {
            return;
        }
        let Some(data) = span.exported_data() else {
            return;
        };
        self.span_started(SpanView::from(&data));
    }

    fn on_end(&self, span: SpanData) {
        let _open = self.span_ended(SpanView::from(&span));
    }

    /// Does nothing: a flush must not end live spans.
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    /// Hands truncated copies of the open spans to the target, innermost
    /// first. A second call does nothing.
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.hand_over(self.drain_truncated());
        Ok(())
    }
}
