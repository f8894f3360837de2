//! Span helpers: the one-line ways instrumented code opens a span, defined
//! once for both builds.
//!
//! Every type and function here exists with and without the `otel` feature,
//! with the same signature. With `otel` the guard holds the OpenTelemetry
//! span and context; without it [`SpanGuard`] and [`SpanLink`] are
//! zero-sized, every body is an inline no-op (the closure forms run their
//! body), and [`is_span_group_enabled`] is the constant `false`, so a call
//! compiles to the evaluation of its arguments.
//!
//! The everyday forms are [`managed_span`] (and the facade's
//! `managed_span!`, which builds its attributes only past the gate), the
//! closure forms [`in_managed_span`] and [`try_in_managed_span`], and the
//! future forms [`instrument_future`] and [`try_instrument_future`]. The
//! rare options (an explicit parent, links, a kind, a start time, a
//! sampling key, a chosen trace id; a span that is not current, one that is
//! detached, one that already happened) go through one builder, [`span`]
//! returning a [`SpanBuilder`].
//!
//! Every helper but [`enter_span`] and [`ungated_span`] is gated by a span group: when the group is
//! disabled the helper costs the gate (one relaxed load and a mask test) and
//! returns an inert [`SpanGuard`]; it allocates nothing, takes no lock and
//! does not even read the active tracer. When the group is enabled the helper
//! reads the active tracer ([`crate::otel::active`], one load: under setup,
//! the facade's tracer on the span recorder), starts the span with its
//! attributes (so the sampler sees them), and, for the managed forms, makes
//! it the current span until the guard is dropped.
//!
//! # Attributes
//!
//! Attributes are lens's own [`KeyValue`]s, so the compiled-out facade has the
//! same signatures without any OpenTelemetry type. Every helper takes
//! `impl IntoIterator<Item = KeyValue>`: an array such as
//! `[KeyValue::new("megatron.iteration", 7)]`, a `Vec`, or `[]`. A disabled
//! helper never iterates it, and an array of keys that are `&'static str`
//! with numeric, boolean or `&'static str` values is built on the stack, so it
//! costs a few moves and no allocation. A value that is costly to compute (a
//! `format!`, a lookup) goes inside [`lazy_attributes`], which the helper
//! calls only when the span is recorded.
//!
//! # Errors and panics
//!
//! A guard's `Drop` ends the span on every path, `?` and panics included;
//! during a panic it first marks the span `ERROR` with an `exception` event.
//! The closure forms [`try_in_managed_span`] and [`try_instrument_future`] also
//! see an `Err` result and mark the span the same way.
//!
//! ```
//! use lens_fallbacks::attr::KeyValue;
//! use lens_fallbacks::groups::SpanGroup;
//! use lens_fallbacks::span::{in_managed_span, managed_span};
//!
//! // Before setup every group is disabled: the body runs, nothing is recorded.
//! let span = managed_span(SpanGroup::STEP, "megatron.train_step", [KeyValue::new("megatron.iteration", 7)]);
//! assert!(!span.is_recording());
//! span.set_attribute("megatron.loss", 2.5); // does nothing on an inert guard
//! drop(span);
//!
//! let sum = in_managed_span(SpanGroup::STEP, "megatron.sum", [], |_span| 2 + 2);
//! assert_eq!(sum, 4);
//! ```

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
#[cfg(feature = "otel")]
use std::mem::ManuallyDrop;
#[cfg(feature = "otel")]
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::SystemTime;

#[cfg(feature = "otel")]
use opentelemetry::context::FutureExt as _;
#[cfg(feature = "otel")]
use opentelemetry::trace::{
    Link, Span as _, SpanBuilder as OtelSpanBuilder, SpanContext, SpanRef, Status, TraceContextExt as _, Tracer as _,
};
#[cfg(feature = "otel")]
use opentelemetry::{Context, ContextGuard};
#[cfg(feature = "otel")]
use opentelemetry_semantic_conventions::attribute::{EXCEPTION_MESSAGE, EXCEPTION_TYPE};

use crate::attr::{AttrValue, KeyValue};
// The pure pieces (redaction, lazy attributes) are defined in `crate::attr`
// and re-exported here where the span helpers' callers look for them.
pub use crate::attr::{DEFAULT_REDACT_KEYS, LazyAttributes, REDACTED, lazy_attributes, redact_value};
use crate::groups::SpanGroup;
#[cfg(feature = "otel")]
use crate::otel::active::{ActiveTracer, active_tracer};
#[cfg(feature = "otel")]
use crate::otel::current_span::{self, FrameId};
#[cfg(feature = "otel")]
use crate::otel::lens_tracer::LensSpan;
use crate::propagation::RemoteContext;

mod builder;
pub use builder::{SpanBuilder, span, ungated_span};

/// Whether spans of `group` are recorded in this process: the gate
/// ([`crate::groups::is_span_group_enabled`], one relaxed load and a mask
/// test) with `otel`; the constant `false` without it, where no span is ever
/// recorded, so that a guarded block folds away.
#[inline(always)]
pub fn is_span_group_enabled(group: SpanGroup) -> bool {
    #[cfg(feature = "otel")]
    return crate::groups::is_span_group_enabled(group);
    #[cfg(not(feature = "otel"))]
    {
        let _ = group;
        false
    }
}

pub use lens_core::sampling::{SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, sampling_key};

/// Adds an event with attributes, timestamped now, to the span current on
/// this thread (nothing when no recorded span is current; nothing without
/// `otel`). For a library that announces something on its caller's span
/// without holding its guard: lens-training's control-file change marks
/// the training interval this way.
pub fn add_event_to_current(name: impl Into<Cow<'static, str>>, attributes: impl IntoIterator<Item = KeyValue>) {
    #[cfg(feature = "otel")]
    {
        let name = name.into();
        let attributes = to_otel(attributes);
        // lens's own current span when it is the innermost, else the
        // OpenTelemetry context's.
        let mut pending = Some((name, attributes));
        let _ = current_span::with_current(|span| {
            if let Some((name, attributes)) = pending.take() {
                span.add_event(name, attributes);
            }
        });
        if let Some((name, attributes)) = pending {
            let cx = Context::current();
            let span = cx.span();
            if span.is_recording() {
                span.add_event(name, attributes);
            }
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = (name, attributes);
}

/// The name of the event that records an error or a panic on a span.
pub const EXCEPTION_EVENT: &str = "exception";

/// The `exception.type` recorded when a span ends during a panic.
pub const PANIC_EXCEPTION_TYPE: &str = "panic";

/// A link from a span to another span, usually one in another trace or
/// another process.
///
/// Built from a [`RemoteContext`]; a link to an invalid context ("no
/// context") is skipped when the span starts. Zero-sized without `otel`.
#[derive(Clone, Debug)]
pub struct SpanLink {
    #[cfg(feature = "otel")]
    link: Option<Link>,
}

impl SpanLink {
    /// A link to the span of `remote` (skipped if `remote` is not valid).
    #[inline]
    pub fn new(remote: &RemoteContext) -> SpanLink {
        #[cfg(feature = "otel")]
        {
            let span_context = remote.otel_context().span().span_context().clone();
            let link = span_context.is_valid().then(|| Link::with_context(span_context));
            SpanLink { link }
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = remote;
            SpanLink {}
        }
    }

    /// The same link with attributes describing it.
    #[must_use]
    #[inline]
    pub fn with_attributes(self, attributes: impl IntoIterator<Item = KeyValue>) -> SpanLink {
        #[cfg(feature = "otel")]
        {
            let mut this = self;
            if let Some(link) = &mut this.link {
                link.attributes.extend(attributes.into_iter().map(lens_otel_runtime::convert::ToOtel::to_otel));
            }
            this
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = attributes;
            self
        }
    }

    /// Whether the link points at a valid span (and will be recorded).
    #[inline]
    pub fn is_valid(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.link.is_some();
        #[cfg(not(feature = "otel"))]
        return false;
    }

    #[cfg(feature = "otel")]
    pub(crate) fn into_link(self) -> Option<Link> {
        self.link
    }
}

/// An open span, with no tie to the thread that opened it (so it is `Send`).
/// Dropping it ends the span, after marking it `ERROR` when the thread is
/// panicking.
#[cfg(feature = "otel")]
struct OpenSpan {
    cx: Context,
    end_time: Option<SystemTime>,
}

#[cfg(feature = "otel")]
impl OpenSpan {
    fn span(&self) -> SpanRef<'_> {
        self.cx.span()
    }
}

#[cfg(feature = "otel")]
impl Drop for OpenSpan {
    fn drop(&mut self) {
        let span = self.cx.span();
        if std::thread::panicking() {
            record_exception(
                &mut Access::Otel(self.cx.span()),
                PANIC_EXCEPTION_TYPE,
                "the thread panicked while the span was open".into(),
            );
        }
        match self.end_time {
            Some(end_time) => span.end_with_timestamp(end_time),
            None => span.end(),
        }
    }
}

/// A span to edit: one in an OpenTelemetry context, or a frame of lens's
/// own current-span stack.
#[cfg(feature = "otel")]
enum Access<'a> {
    Otel(SpanRef<'a>),
    Lens(&'a mut LensSpan),
}

#[cfg(feature = "otel")]
impl Access<'_> {
    fn is_recording(&self) -> bool {
        match self {
            Access::Otel(span) => span.is_recording(),
            Access::Lens(span) => span.is_recording(),
        }
    }

    fn span_context(&self) -> &SpanContext {
        match self {
            Access::Otel(span) => span.span_context(),
            Access::Lens(span) => span.span_context(),
        }
    }

    fn set_attributes(&mut self, attributes: impl IntoIterator<Item = opentelemetry::KeyValue>) {
        match self {
            Access::Otel(span) => span.set_attributes(attributes),
            Access::Lens(span) => span.set_attributes(attributes),
        }
    }

    fn add_event(&mut self, name: Cow<'static, str>, attributes: Vec<opentelemetry::KeyValue>) {
        match self {
            Access::Otel(span) => span.add_event(name, attributes),
            Access::Lens(span) => span.add_event(name, attributes),
        }
    }

    fn set_status(&mut self, status: Status) {
        match self {
            Access::Otel(span) => span.set_status(status),
            Access::Lens(span) => span.set_status(status),
        }
    }
}

#[cfg(feature = "otel")]
fn record_exception(span: &mut Access<'_>, exception_type: &str, message: String) {
    if !span.is_recording() {
        return;
    }
    span.add_event(
        EXCEPTION_EVENT.into(),
        vec![
            opentelemetry::KeyValue::new(EXCEPTION_TYPE, exception_type.to_owned()),
            opentelemetry::KeyValue::new(EXCEPTION_MESSAGE, message.clone()),
        ],
    );
    span.set_status(Status::error(message));
}

/// A span that stays open while the guard lives: the RAII form of every
/// span helper.
///
/// Dropping the guard ends the span (also on `?` and on panic, which marks it
/// `ERROR` with an `exception` event first) and, for the managed forms, makes
/// the previous span current again. A guard for a disabled group, or made
/// before setup, is inert: every method does nothing and
/// [`is_recording`](SpanGuard::is_recording) is false.
///
/// The guard is neither `Send` nor `Sync`, in both facade modes: the current
/// span is thread-local, so the guard must be dropped on the thread that made
/// it. To keep a span across `.await` points use [`instrument_future`].
///
/// Without `otel` the guard is zero-sized and has no `Drop`.
#[must_use = "the span ends when the guard is dropped: bind it with `let _span = ...`"]
pub struct SpanGuard {
    // Dropped before `open` (see `Drop`), so the previous context is current
    // again before the span ends. Both are `ManuallyDrop` so that the guard
    // has no drop glue of its own: `Drop` takes them (out of line) when
    // either is set, and an inert guard's drop is a test and nothing else
    // (`cargo xtask bench` counts its instructions).
    #[cfg(feature = "otel")]
    attached: ManuallyDrop<Option<ContextGuard>>,
    #[cfg(feature = "otel")]
    open: ManuallyDrop<Option<OpenSpan>>,
    // Or: the span is a frame of lens's own current-span stack.
    #[cfg(feature = "otel")]
    frame: Option<FrameId>,
    _not_send: PhantomData<*const ()>,
}

impl SpanGuard {
    /// An inert guard: what a disabled group gets.
    #[inline]
    pub const fn noop() -> SpanGuard {
        SpanGuard {
            #[cfg(feature = "otel")]
            attached: ManuallyDrop::new(None),
            #[cfg(feature = "otel")]
            open: ManuallyDrop::new(None),
            #[cfg(feature = "otel")]
            frame: None,
            _not_send: PhantomData,
        }
    }

    /// The guard of a span in frame `frame` of lens's stack (inert when
    /// `None`).
    #[cfg(feature = "otel")]
    #[inline]
    fn on_stack(frame: Option<FrameId>) -> SpanGuard {
        SpanGuard { attached: ManuallyDrop::new(None), open: ManuallyDrop::new(None), frame, _not_send: PhantomData }
    }

    /// Runs `edit` on the span (`None` for an inert guard).
    #[cfg(feature = "otel")]
    fn with_span<R>(&self, edit: impl FnOnce(&mut Access<'_>) -> R) -> Option<R> {
        if let Some(id) = self.frame {
            return current_span::with_frame(id, |span| edit(&mut Access::Lens(span)));
        }
        self.open.as_ref().map(|open| edit(&mut Access::Otel(open.span())))
    }

    /// Whether the guard holds no span.
    #[cfg(feature = "otel")]
    fn is_inert(&self) -> bool {
        self.frame.is_none() && self.open.is_none()
    }

    /// Whether the span is recorded (false for an inert guard and for a span
    /// the sampler dropped; always false without `otel`).
    #[inline]
    pub fn is_recording(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.with_span(|span| span.is_recording()).unwrap_or(false);
        #[cfg(not(feature = "otel"))]
        return false;
    }

    /// Sets one attribute. Values have lens's types ([`AttrValue`]); use
    /// [`set_attributes_redacted`](SpanGuard::set_attributes_redacted) for
    /// values that may need redaction.
    #[inline]
    pub fn set_attribute(&self, key: impl Into<Cow<'static, str>>, value: impl Into<AttrValue>) {
        #[cfg(feature = "otel")]
        self.with_span(|span| {
            span.set_attributes([lens_otel_runtime::convert::ToOtel::to_otel(KeyValue::new(key, value))])
        });
        #[cfg(not(feature = "otel"))]
        let _ = (key, value);
    }

    /// Sets several attributes.
    #[inline]
    pub fn set_attributes(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        #[cfg(feature = "otel")]
        self.with_span(|span| {
            span.set_attributes(attributes.into_iter().map(lens_otel_runtime::convert::ToOtel::to_otel));
        });
        #[cfg(not(feature = "otel"))]
        let _ = attributes;
    }

    /// Sets attributes with the original's rules for values that may carry
    /// user text: `None` entries are skipped, string values whose key is in
    /// `redact_keys` become [`REDACTED`], lists are set as they are (never
    /// redacted). Does nothing on a span that is not recording.
    ///
    /// ```
    /// use lens_fallbacks::attr::KeyValue;
    /// use lens_fallbacks::span::{DEFAULT_REDACT_KEYS, SpanGuard};
    ///
    /// let span = SpanGuard::noop();
    /// let maybe_model: Option<KeyValue> = None;
    /// span.set_attributes_redacted([Some(KeyValue::new("prompt", "secret text")), maybe_model], DEFAULT_REDACT_KEYS);
    /// ```
    #[doc(alias = "safe_set_span_attributes")]
    #[inline]
    pub fn set_attributes_redacted(
        &self,
        attributes: impl IntoIterator<Item = impl Into<Option<KeyValue>>>,
        redact_keys: &[&str],
    ) {
        #[cfg(feature = "otel")]
        if self.is_recording() {
            self.set_attributes(redacted(attributes, redact_keys));
        }
        #[cfg(not(feature = "otel"))]
        let _ = (attributes, redact_keys);
    }

    /// Adds an event with attributes, timestamped now.
    #[inline]
    pub fn add_event(&self, name: impl Into<Cow<'static, str>>, attributes: impl IntoIterator<Item = KeyValue>) {
        #[cfg(feature = "otel")]
        self.with_span(|span| span.add_event(name.into(), to_otel(attributes)));
        #[cfg(not(feature = "otel"))]
        let _ = (name, attributes);
    }

    /// Records `error` as an `exception` event (`exception.type` is `error`,
    /// since a `dyn Error` has no type name; `exception.message` is its
    /// `Display`) and marks the span `ERROR` with the message.
    #[inline]
    pub fn record_error(&self, error: &dyn Error) {
        #[cfg(feature = "otel")]
        self.with_span(|span| record_exception(span, "error", error.to_string()));
        #[cfg(not(feature = "otel"))]
        let _ = error;
    }

    /// Marks the span `ERROR` with `description`, without an event.
    #[inline]
    pub fn set_status_error(&self, description: impl Into<Cow<'static, str>>) {
        #[cfg(feature = "otel")]
        self.with_span(|span| span.set_status(Status::error(description)));
        #[cfg(not(feature = "otel"))]
        let _ = description;
    }

    /// The span's context, to link to it or to propagate it to another thread,
    /// process or rank; "no context" for an inert guard.
    #[inline]
    pub fn remote_context(&self) -> RemoteContext {
        #[cfg(feature = "otel")]
        if let Some(span_context) = self.with_span(|span| span.span_context().clone())
            && span_context.is_valid()
        {
            return RemoteContext::from_otel(Context::new().with_remote_span_context(span_context));
        }
        RemoteContext::none()
    }

    /// Ends the span now (the same as dropping the guard).
    #[inline]
    pub fn end(self) {}

    /// Ends the span with an explicit end time (for spans measured after the
    /// fact; see also [`SpanBuilder::end_at`]).
    #[inline]
    pub fn end_at(self, end_time: SystemTime) {
        #[cfg(feature = "otel")]
        {
            let mut this = self;
            drop(this.attached.take());
            if let Some(open) = &mut *this.open {
                open.end_time = Some(end_time);
            }
            if let Some(frame) = this.frame.take() {
                current_span::end(frame, Some(end_time));
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = end_time;
    }
}

#[cfg(feature = "otel")]
impl Drop for SpanGuard {
    // Inline and trivially empty for an inert guard, so that a disabled
    // group's guard costs nothing to drop; the real work is out of line.
    #[inline]
    fn drop(&mut self) {
        if self.attached.is_some() || self.open.is_some() || self.frame.is_some() {
            self.finish();
        }
    }
}

#[cfg(feature = "otel")]
impl SpanGuard {
    /// Detaches the context, then ends the span (the previous context is
    /// current again before the span ends).
    #[cold]
    #[inline(never)]
    fn finish(&mut self) {
        // A guard holds a frame of lens's stack or an OpenTelemetry
        // context, never both (`on_stack`): the frame, the usual case, is
        // tested first, so that its end moves nothing else.
        if let Some(frame) = self.frame.take() {
            debug_assert!(self.attached.is_none() && self.open.is_none());
            if std::thread::panicking() {
                current_span::with_frame(frame, |span| {
                    let message = "the thread panicked while the span was open".into();
                    record_exception(&mut Access::Lens(span), PANIC_EXCEPTION_TYPE, message);
                });
            }
            current_span::end(frame, None);
            return;
        }
        drop(self.attached.take());
        drop(self.open.take());
    }
}

impl fmt::Debug for SpanGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[cfg(not(feature = "otel"))]
        return f.write_str("SpanGuard(inert)");
        #[cfg(feature = "otel")]
        match self.with_span(|span| (span.span_context().clone(), span.is_recording())) {
            None => f.write_str("SpanGuard(inert)"),
            Some((span_context, recording)) => f
                .debug_struct("SpanGuard")
                .field("trace_id", &span_context.trace_id())
                .field("span_id", &span_context.span_id())
                .field("recording", &recording)
                .field("current", &(self.attached.is_some() || self.frame.is_some()))
                .finish(),
        }
    }
}

/// Where a new span takes its parent from.
#[cfg(feature = "otel")]
pub(crate) enum Parent {
    /// The current context (the usual case).
    Current,
    /// No parent: the span starts a new trace (the current context's other
    /// entries, such as baggage, are kept when it is made current).
    NewTrace,
    /// An explicit context (an empty one starts a new trace).
    Context(Context),
}

/// How to start a span: what [`SpanBuilder`] collected, or a helper's
/// defaults.
#[cfg(feature = "otel")]
pub(crate) struct StartOptions {
    pub(crate) parent: Parent,
    pub(crate) kind: Option<SpanKind>,
    pub(crate) start_time: Option<SystemTime>,
    pub(crate) links: Vec<Link>,
    pub(crate) make_current: bool,
}

#[cfg(feature = "otel")]
impl StartOptions {
    pub(crate) fn current() -> StartOptions {
        StartOptions { parent: Parent::Current, kind: None, start_time: None, links: Vec::new(), make_current: true }
    }
}

#[cfg(feature = "otel")]
fn to_otel(attributes: impl IntoIterator<Item = KeyValue>) -> Vec<opentelemetry::KeyValue> {
    attributes.into_iter().map(lens_otel_runtime::convert::ToOtel::to_otel).collect()
}

/// Starts a span on `tracer` (the enabled path of every helper).
#[cfg(feature = "otel")]
pub(crate) fn start_span(
    tracer: ActiveTracer,
    name: Cow<'static, str>,
    attributes: Vec<opentelemetry::KeyValue>,
    options: StartOptions,
) -> SpanGuard {
    let cx = match tracer {
        ActiveTracer::Recorder(tracer) => {
            let with = lens_otel_runtime::lens_tracer::StartWith {
                kind: options.kind.map(lens_otel_runtime::convert::ToOtel::to_otel),
                links: options.links,
                start_unix_nano: options.start_time.map(lens_otel_runtime::span_record::unix_nanos),
            };
            // A current span goes on lens's own stack unless every span is
            // to be current in the OpenTelemetry context too.
            let on_stack = options.make_current && !tracer.context_per_span();
            match options.parent {
                Parent::Current | Parent::NewTrace if on_stack => {
                    let new_trace = matches!(options.parent, Parent::NewTrace);
                    return SpanGuard::on_stack(current_span::start(tracer, name, attributes, with, new_trace));
                }
                Parent::Current if tracer.context_per_span() => {
                    Context::map_current(|current| tracer.start(name, current, attributes, with).into_context(current))
                }
                Parent::Current => {
                    let current = current_span::current_context();
                    tracer.start(name, &current, attributes, with).into_context(&current)
                }
                Parent::NewTrace => {
                    let started = tracer.start(name, &Context::new(), attributes, with);
                    Context::map_current(|current| started.into_context(current))
                }
                Parent::Context(parent) => tracer.start(name, &parent, attributes, with).into_context(&parent),
            }
        }
        ActiveTracer::Sdk(tracer) => {
            let mut builder = OtelSpanBuilder::from_name(name);
            builder.start_time = options.start_time;
            builder.span_kind = options.kind.map(lens_otel_runtime::convert::ToOtel::to_otel);
            if !attributes.is_empty() {
                builder.attributes = Some(attributes);
            }
            if !options.links.is_empty() {
                builder.links = Some(options.links);
            }
            match options.parent {
                Parent::Current => Context::map_current(|current| {
                    let span = tracer.build_with_context(builder, current);
                    current.with_span(span)
                }),
                Parent::NewTrace => {
                    let span = tracer.build_with_context(builder, &Context::new());
                    Context::current_with_span(span)
                }
                Parent::Context(parent) => {
                    let span = tracer.build_with_context(builder, &parent);
                    parent.with_span(span)
                }
            }
        }
    };
    let attached = options.make_current.then(|| cx.clone().attach());
    SpanGuard {
        attached: ManuallyDrop::new(attached),
        open: ManuallyDrop::new(Some(OpenSpan { cx, end_time: None })),
        frame: None,
        _not_send: PhantomData,
    }
}

#[cfg(feature = "otel")]
fn start_current(name: Cow<'static, str>, attributes: Vec<opentelemetry::KeyValue>) -> SpanGuard {
    match active_tracer() {
        // The usual case, straight onto lens's stack: what `start_span`
        // does for a current span with the defaults.
        Some(ActiveTracer::Recorder(tracer)) if !tracer.context_per_span() => {
            let with = lens_otel_runtime::lens_tracer::StartWith::default();
            SpanGuard::on_stack(current_span::start(tracer, name, attributes, with, false))
        }
        Some(tracer) => start_span(tracer, name, attributes, StartOptions::current()),
        None => SpanGuard::noop(),
    }
}

/// Opens a span that is recorded whenever telemetry is set up, whatever the
/// span groups (no gate), current until the guard drops: for cold paths,
/// such as a one-off setup step.
///
/// Before setup, and after shutdown, the guard is inert.
#[doc(alias = "span_cm")]
#[inline]
pub fn enter_span(name: impl Into<Cow<'static, str>>, attributes: impl IntoIterator<Item = KeyValue>) -> SpanGuard {
    #[cfg(feature = "otel")]
    return start_current(name.into(), to_otel(attributes));
    #[cfg(not(feature = "otel"))]
    {
        let _ = (name, attributes);
        SpanGuard::noop()
    }
}

/// Opens a span of `group`, current until the guard drops.
///
/// A disabled group costs one relaxed load and a test and yields an inert
/// guard; `attributes` is then dropped without being iterated.
#[inline]
pub fn managed_span(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    if !is_span_group_enabled(group) {
        return SpanGuard::noop();
    }
    #[cfg(feature = "otel")]
    return start_current(name.into(), to_otel(attributes));
    #[cfg(not(feature = "otel"))]
    {
        let _ = (name, attributes);
        SpanGuard::noop()
    }
}

#[cfg(feature = "otel")]
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "the thread panicked while the span was open".to_owned()
    }
}

/// Runs `body` in a span of `group` (the closure form of [`managed_span`]).
///
/// The body always runs, with the guard (inert when the group is disabled).
/// A panic in the body marks the span `ERROR` with an `exception` event
/// holding the panic message, ends it, and goes on unwinding.
#[inline]
pub fn in_managed_span<R>(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
    body: impl FnOnce(&SpanGuard) -> R,
) -> R {
    if !is_span_group_enabled(group) {
        return body(&SpanGuard::noop());
    }
    #[cfg(feature = "otel")]
    return run_in_span(start_current(name.into(), to_otel(attributes)), body);
    #[cfg(not(feature = "otel"))]
    {
        let _ = (name, attributes);
        body(&SpanGuard::noop())
    }
}

#[cfg(feature = "otel")]
fn run_in_span<R>(guard: SpanGuard, body: impl FnOnce(&SpanGuard) -> R) -> R {
    if guard.is_inert() {
        return body(&guard);
    }
    match catch_unwind(AssertUnwindSafe(|| body(&guard))) {
        Ok(result) => result,
        Err(payload) => {
            guard.with_span(|span| record_exception(span, PANIC_EXCEPTION_TYPE, panic_message(payload.as_ref())));
            // End the span while not panicking, so it is not marked twice.
            drop(guard);
            resume_unwind(payload)
        }
    }
}

#[cfg(feature = "otel")]
fn record_err<E: fmt::Display>(span: &mut Access<'_>, error: &E) {
    record_exception(span, std::any::type_name::<E>(), error.to_string());
}

/// Runs `body` in a span of `group`; an `Err` result marks the span `ERROR`
/// with an `exception` event (`exception.type` is the error's type name,
/// `exception.message` its `Display`) and is returned unchanged.
#[inline]
pub fn try_in_managed_span<T, E: fmt::Display>(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
    body: impl FnOnce(&SpanGuard) -> Result<T, E>,
) -> Result<T, E> {
    if !is_span_group_enabled(group) {
        return body(&SpanGuard::noop());
    }
    #[cfg(feature = "otel")]
    return run_in_span(start_current(name.into(), to_otel(attributes)), |guard| {
        let result = body(guard);
        if let Err(error) = &result {
            guard.with_span(|span| record_err(span, error));
        }
        result
    });
    #[cfg(not(feature = "otel"))]
    {
        let _ = (name, attributes);
        body(&SpanGuard::noop())
    }
}

/// Starts a span for a future: a child of the current span, not made current
/// here but attached on each poll of `future`.
#[cfg(feature = "otel")]
fn start_for_future(name: Cow<'static, str>, attributes: Vec<opentelemetry::KeyValue>) -> Option<OpenSpan> {
    let mut guard =
        start_span(active_tracer()?, name, attributes, StartOptions { make_current: false, ..StartOptions::current() });
    guard.open.take()
}

/// Runs `future` in a span of `group` that stays current across `.await`
/// points: the span starts now (a child of the current span), its context is
/// made current on every poll of `future`, and it ends when the future
/// completes, or when it is dropped unfinished (cancelled).
///
/// The returned future is `Send` when `future` is. A disabled group returns a
/// future that only polls `future`.
#[inline]
pub fn instrument_future<F: Future>(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
    future: F,
) -> impl Future<Output = F::Output> {
    #[cfg(not(feature = "otel"))]
    {
        let _ = (group, name, attributes);
        future
    }
    #[cfg(feature = "otel")]
    let open = if is_span_group_enabled(group) { start_for_future(name.into(), to_otel(attributes)) } else { None };
    #[cfg(feature = "otel")]
    async move {
        match open {
            None => future.await,
            Some(open) => {
                let output = future.with_context(open.cx.clone()).await;
                drop(open);
                output
            }
        }
    }
}

/// Like [`instrument_future`], for a future that returns a `Result`: an
/// `Err` marks the span `ERROR` with an `exception` event.
pub fn try_instrument_future<T, E: fmt::Display, F: Future<Output = Result<T, E>>>(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
    future: F,
) -> impl Future<Output = Result<T, E>> {
    #[cfg(not(feature = "otel"))]
    {
        let _ = (group, name, attributes);
        future
    }
    #[cfg(feature = "otel")]
    let open = if is_span_group_enabled(group) { start_for_future(name.into(), to_otel(attributes)) } else { None };
    #[cfg(feature = "otel")]
    async move {
        match open {
            None => future.await,
            Some(open) => {
                let output = future.with_context(open.cx.clone()).await;
                if let Err(error) = &output {
                    record_err(&mut Access::Otel(open.span()), error);
                }
                drop(open);
                output
            }
        }
    }
}

/// The present entries of `attributes`, each redacted under `redact_keys`.
#[cfg(feature = "otel")]
fn redacted(
    attributes: impl IntoIterator<Item = impl Into<Option<KeyValue>>>,
    redact_keys: &[&str],
) -> impl Iterator<Item = KeyValue> {
    attributes.into_iter().filter_map(Into::into).map(move |kv| redact(kv, redact_keys))
}

/// Redacts a string value under a redacted key (lists are left alone).
#[cfg(feature = "otel")]
fn redact(kv: KeyValue, redact_keys: &[&str]) -> KeyValue {
    match kv.value {
        AttrValue::Str(_) => KeyValue { value: redact_value(&kv.key, kv.value, redact_keys), key: kv.key },
        _ => kv,
    }
}

pub use crate::attr::SpanKind;

/// A span that is never current, so that it can be opened on one thread and
/// ended on another (it is `Send`): for work that crosses `.await` points and
/// threads, such as a request that an HTTP task receives and an engine thread
/// runs. Children name it as their parent explicitly, through
/// [`remote_context`](DetachedSpan::remote_context). Dropping it ends the
/// span; an inert one (disabled group, before setup) does nothing.
#[must_use = "the span ends when it is dropped"]
pub struct DetachedSpan {
    #[cfg(feature = "otel")]
    open: Option<OpenSpan>,
}

impl DetachedSpan {
    /// An inert span.
    #[inline]
    pub const fn noop() -> DetachedSpan {
        DetachedSpan {
            #[cfg(feature = "otel")]
            open: None,
        }
    }

    #[cfg(feature = "otel")]
    fn span(&self) -> Option<SpanRef<'_>> {
        self.open.as_ref().map(OpenSpan::span)
    }

    /// Whether the span is recorded.
    #[inline]
    pub fn is_recording(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.span().is_some_and(|span| span.is_recording());
        #[cfg(not(feature = "otel"))]
        false
    }

    /// Sets one attribute.
    pub fn set_attribute(&self, key: impl Into<Cow<'static, str>>, value: impl Into<AttrValue>) {
        #[cfg(feature = "otel")]
        if let Some(span) = self.span() {
            span.set_attribute(lens_otel_runtime::convert::ToOtel::to_otel(KeyValue::new(key, value)));
        }
        #[cfg(not(feature = "otel"))]
        let _ = (key, value);
    }

    /// Sets several attributes.
    pub fn set_attributes(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        #[cfg(feature = "otel")]
        if let Some(span) = self.span() {
            span.set_attributes(attributes.into_iter().map(lens_otel_runtime::convert::ToOtel::to_otel));
        }
        #[cfg(not(feature = "otel"))]
        let _ = attributes;
    }

    /// Marks the span `ERROR` with `description`.
    pub fn set_status_error(&self, description: impl Into<Cow<'static, str>>) {
        #[cfg(feature = "otel")]
        if let Some(span) = self.span() {
            span.set_status(Status::error(description));
        }
        #[cfg(not(feature = "otel"))]
        let _ = description;
    }

    /// The span's context: the parent of its children, or a link target
    /// ("no context" when inert).
    pub fn remote_context(&self) -> RemoteContext {
        #[cfg(feature = "otel")]
        return match &self.open {
            Some(open) => RemoteContext::from_otel(open.cx.clone()),
            None => RemoteContext::none(),
        };
        #[cfg(not(feature = "otel"))]
        RemoteContext::none()
    }

    /// Ends the span at `end_time`.
    pub fn end_at(mut self, end_time: SystemTime) {
        #[cfg(feature = "otel")]
        if let Some(open) = &mut self.open {
            open.end_time = Some(end_time);
        }
        #[cfg(not(feature = "otel"))]
        let _ = (&mut self, end_time);
    }
}

impl fmt::Debug for DetachedSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[cfg(not(feature = "otel"))]
        return f.write_str("DetachedSpan(inert)");
        #[cfg(feature = "otel")]
        match self.span() {
            None => f.write_str("DetachedSpan(inert)"),
            Some(span) => f
                .debug_struct("DetachedSpan")
                .field("trace_id", &span.span_context().trace_id())
                .field("span_id", &span.span_context().span_id())
                .finish(),
        }
    }
}
