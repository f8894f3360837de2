//! The facade's span path on the span recorder (SPEC A25, issue 24): the
//! sampling decision at start, on the calling thread, then plain data
//! recorded into the recorder's per-thread buffer, with the open span in the
//! rank's spool (the open-span registry of the closer, the flight recorder
//! and the next attempt's replay).
//!
//! What the SDK's tracer does per span and this one does not: build the SDK
//! span object, copy its data for the closer at start, copy the scope into
//! it at end, and hand it to a processor under a lock on the calling thread.
//! What it keeps: the same sampler (parent-based, ratio, sampling keys; its
//! attributes and trace state), the same ids (the per-thread generator,
//! [`with_next_trace_id`](crate::ids::with_next_trace_id) for derived trace
//! ids), the SDK's span limits (128 attributes, events and links, the rest
//! dropped), and OpenTelemetry interop: a recording span is a
//! [`LensSpan`], an [`opentelemetry::trace::Span`]. A current span starts
//! in a frame of lens's own stack ([`crate::current_span::start`]), whose parent is the innermost of that stack and
//! the OpenTelemetry context (so a lens span inside an OpenTelemetry span is
//! that span's child); with `<PREFIX>_CONTEXT_PER_SPAN`, and for spans that
//! are never current, [`LensTracer::start`] gives a span the caller puts in
//! the OpenTelemetry [`Context`], where a span started through the
//! OpenTelemetry API inside it finds it as its parent.

use std::borrow::Cow;
use std::fmt;
use std::time::SystemTime;

use opentelemetry::trace::{
    Event, Link, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator as _, SamplingDecision};

use crate::closer::OpenSpanCloser;
use crate::ids::SeedIndependentIdGenerator;
use crate::recorder::Recorder;
use crate::sampler::LensSampler;
use crate::span_record::{SpanRecord, now_unix_nano, unix_nanos};
use crate::spool::SpanView;

/// The SDK's default span limits, kept on the recorder's spans.
const MAX_ATTRIBUTES: usize = 128;
const MAX_EVENTS: usize = 128;
/// The events of an open span written to its spool slot as they are added
/// (each write encodes the slot again, about 640 instructions for a span
/// with one event): a span's first few, which a long-lived span's rare
/// events (control changes) stay within; later ones reach the slot at the
/// span's end only.
const EVENTS_KEPT_OPEN: usize = 8;
const MAX_LINKS: usize = 128;

/// Starts spans on the recorder: what setup installs for the facade
/// ([`crate::active::lens_tracer`]).
pub struct LensTracer {
    recorder: Recorder,
    sampler: LensSampler,
    closer: OpenSpanCloser,
    scope: InstrumentationScope,
    /// `scope` as a spool slot holds it, copied into each slot.
    scope_encoded: Box<[u8]>,
    context_per_span: bool,
}

impl fmt::Debug for LensTracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensTracer").field("scope", &self.scope.name()).finish_non_exhaustive()
    }
}

/// What starting a span gave.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "moved once, straight into the context's box: boxing it here would allocate twice per span"
)]
pub enum Started {
    /// A recorded span: put it in the context.
    Recording(LensSpan),
    /// A span the sampler dropped, or one started with telemetry off or
    /// suppressed: put its context in the context (it carries the
    /// unsampled flag to children and `traceparent`; empty when off).
    NotRecording(SpanContext),
}

impl Started {
    /// `parent` with this span as its span.
    pub fn into_context(self, parent: &Context) -> Context {
        match self {
            Started::Recording(span) => parent.with_span(span),
            Started::NotRecording(span_context) => parent.with_remote_span_context(span_context),
        }
    }
}

/// How a span starts, besides its name and attributes.
#[derive(Debug, Default)]
pub struct StartWith {
    /// Its kind (internal when `None`).
    pub kind: Option<SpanKind>,
    /// Its links.
    pub links: Vec<Link>,
    /// Its start time in nanoseconds since the Unix epoch (now when
    /// `None`): the unit the record keeps, so that a caller that reads the
    /// clock itself ([`now_unix_nano`]) converts nothing.
    pub start_unix_nano: Option<u64>,
}

impl LensTracer {
    /// A tracer recording into `recorder`, sampling with `sampler`, keeping
    /// open spans in `closer`'s registry, every span in `scope` (the spool
    /// keeps the scope; the exporter is given it too).
    pub fn new(
        recorder: Recorder,
        sampler: LensSampler,
        closer: OpenSpanCloser,
        scope: InstrumentationScope,
    ) -> LensTracer {
        let scope_encoded = crate::spool::format::encode_scope(&scope);
        LensTracer { recorder, sampler, closer, scope, scope_encoded, context_per_span: false }
    }

    /// The tracer with every current span made current in the OpenTelemetry
    /// context too (`<PREFIX>_CONTEXT_PER_SPAN`); off, current spans go on
    /// lens's own stack ([`crate::current_span`]).
    #[must_use]
    pub fn with_context_per_span(mut self, on: bool) -> LensTracer {
        self.context_per_span = on;
        self
    }

    /// Whether current spans are made current in the OpenTelemetry context.
    #[inline]
    pub fn context_per_span(&self) -> bool {
        self.context_per_span
    }

    /// Whether the closer has closed (shutdown began): new spans record
    /// nothing.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closer.is_closed()
    }

    /// Starts a span named `name` under the span of `parent_cx` (a new
    /// trace when it has none): samples it, and records it when sampled.
    pub fn start(
        &'static self,
        name: Cow<'static, str>,
        parent_cx: &Context,
        attributes: Vec<KeyValue>,
        with: StartWith,
    ) -> Started {
        if parent_cx.is_telemetry_suppressed() || self.closer.is_closed() {
            return Started::NotRecording(SpanContext::empty_context());
        }
        let parent = parent_cx.span();
        let parent = parent.span_context();
        let span = self.begin(name, parent.is_valid().then_some(parent), Some(parent_cx), attributes, with);
        if span.record.is_some() { Started::Recording(span) } else { Started::NotRecording(span.span_context.clone()) }
    }

    /// A span of this tracer that records nothing (an empty context), for
    /// [`start_kept`](Self::start_kept) to start in place.
    pub fn idle_span(&'static self) -> LensSpan {
        LensSpan::not_recording(SpanContext::empty_context(), self)
    }

    /// Starts a span named `name` into `span` ([`idle_span`](Self::idle_span),
    /// or one that ended), under `parent` (a valid span context, or `None`
    /// for a new trace), read from `parent_cx` when it came from an
    /// OpenTelemetry context, for a caller that keeps the span itself (the
    /// `tracing` bridge keeps its spans in `tracing`'s registry): samples
    /// it, and records it when sampled. A suppressed `parent_cx`, or a
    /// closed tracer (shutdown began), leaves a span that records nothing,
    /// with an empty context. Started in place: a span is a few hundred
    /// bytes, and each move is a copy.
    pub fn start_kept(
        &'static self,
        span: &mut LensSpan,
        name: Cow<'static, str>,
        parent: Option<&SpanContext>,
        parent_cx: Option<&Context>,
        attributes: Vec<KeyValue>,
        with: StartWith,
    ) {
        span.rebind(self);
        if parent_cx.is_some_and(Context::is_telemetry_suppressed) || self.closer.is_closed() {
            span.carry_context(SpanContext::empty_context());
            return;
        }
        self.begin_in(span, name, parent.filter(|parent| parent.is_valid()), parent_cx, attributes, with);
    }

    /// Starts a span under `parent` (valid, or `None` for a new trace), from
    /// `parent_cx` when it came from an OpenTelemetry context: samples it,
    /// and records it when sampled (else the span is not recording).
    pub(crate) fn begin(
        &'static self,
        name: Cow<'static, str>,
        parent: Option<&SpanContext>,
        parent_cx: Option<&Context>,
        attributes: Vec<KeyValue>,
        with: StartWith,
    ) -> LensSpan {
        let mut span = LensSpan::not_recording(SpanContext::empty_context(), self);
        self.begin_in(&mut span, name, parent, parent_cx, attributes, with);
        span
    }

    /// [`begin`](Self::begin) into `span`, a span that records nothing (a
    /// frame of the current-span stack): a span is a few hundred bytes, and
    /// each move is a copy. Sets the span's context whatever the decision
    /// (a reused span's is stale: [`LensSpan::rebind`]).
    pub(crate) fn begin_in(
        &'static self,
        span: &mut LensSpan,
        name: Cow<'static, str>,
        parent: Option<&SpanContext>,
        parent_cx: Option<&Context>,
        mut attributes: Vec<KeyValue>,
        with: StartWith,
    ) {
        let ids = SeedIndependentIdGenerator::default();
        let span_id = ids.new_span_id();
        let trace_id = parent.map_or_else(|| ids.new_trace_id(), SpanContext::trace_id);
        let kind = with.kind.unwrap_or(SpanKind::Internal);
        let result = match self.sampler.follow_in_place(parent, parent_cx, &attributes) {
            Some(result) => result,
            None => self.sampler.decide(parent, parent_cx, trace_id, &name, &kind, &attributes, &with.links),
        };
        let flags = parent.map_or(TraceFlags::default(), SpanContext::trace_flags);
        if result.decision != SamplingDecision::RecordAndSample {
            // Record-only is not a decision lens's sampler makes: an
            // unsampled span is never exported, so it is not recorded.
            span.span_context =
                SpanContext::new(trace_id, span_id, flags.with_sampled(false), false, result.trace_state);
            return;
        }
        if !result.attributes.is_empty() {
            attributes.extend(result.attributes);
        } else if result.attributes.capacity() == 0 {
            // Nothing to free (the usual case): skips the call to `Vec`'s
            // drop, about 20 instructions a span.
            std::mem::forget(result.attributes);
        }
        let dropped = attributes.len().saturating_sub(MAX_ATTRIBUTES);
        attributes.truncate(MAX_ATTRIBUTES);
        let mut links = with.links;
        links.truncate(MAX_LINKS);
        let start_time = with.start_unix_nano.unwrap_or_else(now_unix_nano);
        let span_context = SpanContext::new(trace_id, span_id, flags.with_sampled(true), false, result.trace_state);
        span.span_context = span_context.clone();
        // `span` records nothing (a fresh span, a reused one): the old
        // value is `None`, and forgetting it skips the call to the record's
        // drop glue that `Option::insert` makes (about 30 instructions a
        // span).
        let old = span.record.replace(SpanRecord {
            name,
            span_context,
            parent_span_id: parent.map_or(SpanId::INVALID, SpanContext::span_id),
            parent_span_is_remote: parent.is_some_and(SpanContext::is_remote),
            span_kind: kind,
            start_time_unix_nano: start_time,
            end_time_unix_nano: start_time,
            attributes,
            dropped_attributes_count: u32::try_from(dropped).unwrap_or(u32::MAX),
            events: Vec::new(),
            links,
            status: Status::Unset,
            spool_slot: None,
        });
        debug_assert!(old.is_none(), "a span is started only into a span that records nothing");
        std::mem::forget(old);
        if let Some(record) = &mut span.record {
            record.spool_slot = self.closer.record_started(&self.spool_view(record));
        }
    }
}

impl LensTracer {
    /// What the spool keeps of `record`.
    #[inline]
    fn spool_view<'a>(&'a self, record: &'a SpanRecord) -> SpanView<'a> {
        SpanView::of_record_encoded(record, &self.scope, &self.scope_encoded)
    }

    /// Starts a span from an OpenTelemetry [`SpanBuilder`] (the `tracing`
    /// bridge's) under the span of `parent_cx`, and returns `parent_cx` with
    /// it: the SDK tracer's `build_with_context` followed by `with_span`.
    /// The builder's name, kind, attributes, links and start time are used;
    /// its ids, events, status and sampling result are not (the bridge sets
    /// none of them).
    pub fn build_with_context(&'static self, builder: SpanBuilder, parent_cx: &Context) -> Context {
        let SpanBuilder { name, span_kind, attributes, start_time, links, .. } = builder;
        let with = StartWith {
            kind: span_kind,
            links: links.unwrap_or_default(),
            start_unix_nano: start_time.map(unix_nanos),
        };
        self.start(name, parent_cx, attributes.unwrap_or_default(), with).into_context(parent_cx)
    }
}

/// A recorded span: plain data until it ends, then appended to the ending
/// thread's buffer of the recorder. Dropping it ends it.
pub struct LensSpan {
    span_context: SpanContext,
    record: Option<SpanRecord>,
    tracer: &'static LensTracer,
}

impl LensSpan {
    /// A span that records nothing: its context (unsampled, or empty) is
    /// what its children and `traceparent` see.
    pub(crate) fn not_recording(span_context: SpanContext, tracer: &'static LensTracer) -> LensSpan {
        LensSpan { span_context, record: None, tracer }
    }
}

impl LensSpan {
    /// Makes this span, which records nothing, carry `span_context` (a
    /// frame standing for a span kept elsewhere).
    pub(crate) fn carry_context(&mut self, span_context: SpanContext) {
        debug_assert!(self.record.is_none(), "a recording span keeps its own context");
        self.span_context = span_context;
    }

    /// The tracer the span was started on.
    pub(crate) fn tracer(&self) -> &'static LensTracer {
        self.tracer
    }

    /// Makes this span (ended, or one that records nothing) a span of
    /// `tracer` that records nothing, for reuse in place (a stack frame, a
    /// kept span started again), ending it first if it records. Its context
    /// is left as it was, for the caller to set next ([`LensTracer::begin_in`]
    /// always does, as does [`carry_context`](Self::carry_context)): a span
    /// started in place writes its context once.
    #[inline]
    pub(crate) fn rebind(&mut self, tracer: &'static LensTracer) {
        if self.record.is_some() {
            opentelemetry::trace::Span::end(self);
        }
        self.tracer = tracer;
    }
}

impl fmt::Debug for LensSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensSpan")
            .field("trace_id", &self.span_context.trace_id())
            .field("span_id", &self.span_context.span_id())
            .field("recording", &self.record.is_some())
            .finish()
    }
}

impl opentelemetry::trace::Span for LensSpan {
    fn add_event_with_timestamp<T>(&mut self, name: T, timestamp: SystemTime, attributes: Vec<KeyValue>)
    where
        T: Into<Cow<'static, str>>,
    {
        if let Some(record) = &mut self.record
            && record.events.len() < MAX_EVENTS
        {
            record.events.push(Event::new(name, timestamp, attributes, 0));
            // An open span's slot gets the event too: a span still open when
            // the job is stopped or killed keeps it (events are rare; an
            // attribute, often set per step, is not written ahead).
            if let Some(mut slot) = record.spool_slot
                && record.events.len() <= EVENTS_KEPT_OPEN
            {
                self.tracer.closer.record_changed(&mut slot, &self.tracer.spool_view(record));
                record.spool_slot = Some(slot);
            }
        }
    }

    fn span_context(&self) -> &SpanContext {
        &self.span_context
    }

    fn is_recording(&self) -> bool {
        self.record.is_some()
    }

    fn set_attribute(&mut self, attribute: KeyValue) {
        if let Some(record) = &mut self.record {
            if record.attributes.len() < MAX_ATTRIBUTES {
                record.attributes.push(attribute);
            } else {
                record.dropped_attributes_count = record.dropped_attributes_count.saturating_add(1);
            }
        }
    }

    /// As the SDK: `Ok` over `Error` over unset.
    fn set_status(&mut self, status: Status) {
        if let Some(record) = &mut self.record
            && status > record.status
        {
            record.status = status;
        }
    }

    fn update_name<T>(&mut self, new_name: T)
    where
        T: Into<Cow<'static, str>>,
    {
        if let Some(record) = &mut self.record {
            record.name = new_name.into();
        }
    }

    fn add_link(&mut self, span_context: SpanContext, attributes: Vec<KeyValue>) {
        if let Some(record) = &mut self.record
            && record.links.len() < MAX_LINKS
            && span_context.is_valid()
        {
            record.links.push(Link::new(span_context, attributes, 0));
        }
    }

    /// Ends the span now: one read of the clock, in the unit the record
    /// keeps (no conversion); none for a span that records nothing or has
    /// ended (dropping an ended span, as the `tracing` bridge does).
    #[inline]
    fn end(&mut self) {
        if self.record.is_some() {
            self.end_at(now_unix_nano());
        }
    }

    fn end_with_timestamp(&mut self, timestamp: SystemTime) {
        self.end_at(unix_nanos(timestamp));
    }
}

impl LensSpan {
    /// Ends the span at `end_time_unix_nano`.
    fn end_at(&mut self, end_time_unix_nano: u64) {
        let Some(record) = &mut self.record else { return };
        record.end_time_unix_nano = end_time_unix_nano;
        // Once the closer has closed, the span was exported truncated at
        // shutdown: it is not exported again.
        let slot = record.spool_slot.take();
        let tracer = self.tracer;
        let sampled = record.span_context.is_sampled();
        if let Some(kept) = tracer.closer.record_ended(slot, sampled, || tracer.spool_view(record)) {
            record.spool_slot = kept;
            tracer.recorder.record_from(&mut self.record);
        }
        // What the recorder did not take (the closer had closed) is dropped;
        // tested first, as the recorder usually took it.
        if self.record.is_some() {
            self.record = None;
        }
    }
}

impl Drop for LensSpan {
    fn drop(&mut self) {
        opentelemetry::trace::Span::end(self);
    }
}
