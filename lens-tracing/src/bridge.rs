//! The recording side of the bridge (with `otel`): `tracing` spans become
//! spans of lens's active tracer.
//!
//! A recorded span keeps a [`SpanData`] in its registry extensions: what it
//! starts with (name, kind, fields as attributes), its creation time, the
//! parent captured when the span was created, and, once started, the span. A span starts
//! lazily (first entry, first child, first event, [`context_of`], or
//! close), so that [`set_parent`] can still give it a remote parent; its
//! start time is its creation time.
//!
//! On lens's span recorder (what setup installs) the started span is a
//! [`LensSpan`] kept in the extensions, and entering it pushes a frame for
//! it on lens's current-span stack ([`current_span::enter_kept`]), as the
//! facade's current spans are: lens spans and `tracing` spans opened inside
//! are its children, with no OpenTelemetry context built or attached. With
//! `<PREFIX>_CONTEXT_PER_SPAN` on, or on an SDK tracer installed alone, the
//! started span is an OpenTelemetry context, attached on entry. The frames
//! and attach guards of this thread's entries live in a per-thread stack,
//! popped on exit. A per-entry span starts a fresh span, child of the span
//! current at entry, on every entry and ends it on exit.

use std::borrow::Cow;
use std::cell::RefCell;
use std::time::SystemTime;

use lens_fallbacks::RemoteContext;
use lens_fallbacks::export_path::on_export_path;
use lens_fallbacks::otel::current_span::{CurrentParent, FrameId};
use lens_fallbacks::otel::lens_tracer::{LensSpan, LensTracer, StartWith};
use lens_fallbacks::otel::opentelemetry::logs::Severity;
use lens_fallbacks::otel::opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanKind, Status, TraceContextExt as _,
};
use lens_fallbacks::otel::opentelemetry::{Context as OtelContext, ContextGuard, KeyValue};
use lens_fallbacks::otel::span_record::{now_unix_nano, time_of};
use lens_fallbacks::otel::{active, current_span, logs};
use lens_fallbacks::tracing_rules::TracingRules;
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Dispatch, Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::names::{
    GROUP_FIELD, KIND_FIELD, NAME_FIELD, PER_ENTRY_FIELD, STATUS_CODE_FIELD, STATUS_DESCRIPTION_FIELD,
    STATUS_MESSAGE_FIELD, decided_per_span,
};

/// The field `tracing`'s macros give an event's message.
const MESSAGE_FIELD: &str = "message";

/// The attribute an event gets with its level (`INFO`, `WARN`, ...).
pub(crate) const LEVEL_ATTRIBUTE: &str = "level";

/// What the bridge keeps in a recorded span's extensions.
pub(crate) struct SpanData {
    /// What the span starts with (for a per-entry span: every entry).
    template: Template,
    /// When it was created, in nanoseconds since the Unix epoch (its start).
    created_unix_nano: u64,
    /// The parent captured at creation (or set by [`set_parent`]).
    parent: Parent,
    /// The started span (never set for a per-entry span).
    started: Option<Recorded>,
    /// A status recorded before the span started.
    status: Option<Status>,
    per_entry: bool,
}

/// What a span starts with, besides its start time and parent: the
/// OpenTelemetry `SpanBuilder`'s fields the bridge sets (that builder is
/// several times larger, and is built only for a tracer that takes one).
#[derive(Clone, Default)]
struct Template {
    name: Cow<'static, str>,
    kind: Option<SpanKind>,
    attributes: Vec<KeyValue>,
}

impl Template {
    /// How the span starts on lens's tracer, at `start_unix_nano` (now when
    /// `None`).
    fn start_with(&self, start_unix_nano: Option<u64>) -> StartWith {
        StartWith { kind: self.kind.clone(), links: Vec::new(), start_unix_nano }
    }

    /// The OpenTelemetry builder of the span, started at `start_time`.
    fn into_builder(self, start_time: SystemTime) -> SpanBuilder {
        let Template { name, kind, attributes } = self;
        SpanBuilder {
            name,
            span_kind: kind,
            start_time: Some(start_time),
            attributes: (!attributes.is_empty()).then_some(attributes),
            ..SpanBuilder::default()
        }
    }
}

/// A recorded span's parent.
enum Parent {
    /// None: the span starts a trace.
    Root,
    /// A span current on lens's stack, or a recorded `tracing` span.
    Span(SpanContext),
    /// The OpenTelemetry context's span (none: a new trace), or a remote
    /// parent.
    Context(OtelContext),
}

impl Parent {
    /// The span current here, as lens sees it.
    fn current() -> Parent {
        match current_span::current_parent() {
            CurrentParent::Frame(span_context) => Parent::Span(span_context),
            CurrentParent::Context(cx) => Parent::Context(cx),
        }
    }

    /// As an OpenTelemetry context, for a tracer that takes one.
    fn to_context(&self) -> OtelContext {
        match self {
            Parent::Root => OtelContext::new(),
            Parent::Span(span_context) => OtelContext::current().with_remote_span_context(span_context.clone()),
            Parent::Context(cx) => cx.clone(),
        }
    }
}

/// A started span.
#[expect(
    clippy::large_enum_variant,
    reason = "kept in the span's extensions, already boxed there: boxing the span again would allocate twice per span"
)]
enum Recorded {
    /// On lens's span recorder, made current on lens's stack.
    Lens(LensSpan),
    /// In an OpenTelemetry context, made current by attaching it.
    Context(OtelContext),
}

impl Recorded {
    fn span_context(&self) -> SpanContext {
        match self {
            Recorded::Lens(span) => span.span_context().clone(),
            Recorded::Context(cx) => cx.span().span_context().clone(),
        }
    }

    fn as_parent(&self) -> Parent {
        match self {
            Recorded::Lens(span) => Parent::Span(span.span_context().clone()),
            Recorded::Context(cx) => Parent::Context(cx.clone()),
        }
    }

    fn set_status(&mut self, status: Status) {
        match self {
            Recorded::Lens(span) => span.set_status(status),
            Recorded::Context(cx) => cx.span().set_status(status),
        }
    }

    fn end(&mut self) {
        match self {
            Recorded::Lens(span) => span.end(),
            Recorded::Context(cx) => cx.span().end(),
        }
    }
}

/// The recorder's tracer, when spans go on lens's stack rather than in an
/// OpenTelemetry context.
fn stack_tracer(tracer: active::ActiveTracer) -> Option<&'static LensTracer> {
    match tracer {
        active::ActiveTracer::Recorder(tracer) if !tracer.context_per_span() => Some(tracer),
        _ => None,
    }
}

impl SpanData {
    /// The started span, starting it now if needed; `None` for a per-entry
    /// span and when no tracer is installed.
    fn start(&mut self) -> Option<&mut Recorded> {
        if self.per_entry {
            return None;
        }
        if self.started.is_none() {
            let tracer = active::active_tracer()?;
            let started = match stack_tracer(tracer) {
                Some(tracer) => {
                    // Started where it is kept (a span is a few hundred
                    // bytes, and each move is a copy). `started` is `None`:
                    // forgetting it skips the call to the span's drop glue
                    // that `Option::insert` makes.
                    std::mem::forget(self.started.replace(Recorded::Lens(tracer.idle_span())));
                    let Some(started) = &mut self.started else { unreachable!("just set") };
                    let Recorded::Lens(span) = started else { unreachable!("just set") };
                    let with = self.template.start_with(Some(self.created_unix_nano));
                    let Template { name, attributes, .. } = std::mem::take(&mut self.template);
                    match &self.parent {
                        Parent::Root => tracer.start_kept(span, name, None, None, attributes, with),
                        Parent::Span(parent) => tracer.start_kept(span, name, Some(parent), None, attributes, with),
                        Parent::Context(cx) => {
                            let parent = cx.span();
                            tracer.start_kept(span, name, Some(parent.span_context()), Some(cx), attributes, with);
                        }
                    }
                    started
                }
                None => {
                    let builder = std::mem::take(&mut self.template).into_builder(time_of(self.created_unix_nano));
                    self.started
                        .insert(Recorded::Context(tracer.build_with_context(builder, &self.parent.to_context())))
                }
            };
            if let Some(status) = self.status.take() {
                started.set_status(status);
            }
            self.parent = Parent::Root;
        }
        self.started.as_mut()
    }
}

/// How a span was entered on this thread.
enum How {
    /// A frame on lens's stack: for a span kept in the registry, a frame
    /// standing for it; for a per-entry span, the entry's own span.
    Frame(FrameId),
    /// An attached OpenTelemetry context, and for a per-entry span the
    /// entry's own span.
    Context(ContextGuard, Option<OtelContext>),
}

/// A span entered on this thread.
struct Entered {
    id: u64,
    how: How,
    per_entry: bool,
}

thread_local! {
    static ENTERED: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
}

/// An entry of a per-entry span: its own span.
#[derive(Clone)]
enum Entry {
    Frame(FrameId),
    Context(OtelContext),
}

/// The innermost entry of per-entry span `id` on this thread.
fn current_entry(id: u64) -> Option<Entry> {
    ENTERED.with_borrow(|entered| {
        entered.iter().rev().find(|e| e.id == id && e.per_entry).and_then(|e| match &e.how {
            How::Frame(frame) => Some(Entry::Frame(*frame)),
            How::Context(_, entry) => entry.clone().map(Entry::Context),
        })
    })
}

/// Fields as attributes, plus the bridge's own fields.
#[derive(Default)]
struct Fields {
    attributes: Vec<KeyValue>,
    group: Option<String>,
    per_entry: Option<bool>,
    message: Option<String>,
    name: Option<String>,
    kind: Option<SpanKind>,
    status_code: Option<StatusCode>,
    status_description: Option<String>,
}

/// An `otel.status_code` value.
#[derive(Clone, Copy)]
enum StatusCode {
    Unset,
    Ok,
    Error,
}

/// `otel.kind`'s values, as `tracing-opentelemetry` reads them
/// (case-insensitive).
fn span_kind(value: &str) -> Option<SpanKind> {
    const KINDS: [(&str, SpanKind); 5] = [
        ("server", SpanKind::Server),
        ("client", SpanKind::Client),
        ("producer", SpanKind::Producer),
        ("consumer", SpanKind::Consumer),
        ("internal", SpanKind::Internal),
    ];
    KINDS.into_iter().find(|(name, _)| value.eq_ignore_ascii_case(name)).map(|(_, kind)| kind)
}

/// `otel.status_code`'s values (case-insensitive).
fn status_code(value: &str) -> Option<StatusCode> {
    const CODES: [(&str, StatusCode); 3] =
        [("error", StatusCode::Error), ("ok", StatusCode::Ok), ("unset", StatusCode::Unset)];
    CODES.into_iter().find(|(name, _)| value.eq_ignore_ascii_case(name)).map(|(_, code)| code)
}

impl Fields {
    /// Room for every field of `metadata`, so that the attributes take one
    /// allocation.
    fn for_fields(count: usize) -> Fields {
        Fields { attributes: Vec::with_capacity(count), ..Fields::default() }
    }

    /// The status the fields state, if any: a description alone is an
    /// `error` status with it (as `tracing-opentelemetry` reads it), so that
    /// a description recorded in a call of its own is kept.
    fn status(&mut self) -> Option<Status> {
        let description = self.status_description.take();
        Some(match (self.status_code, description) {
            (Some(StatusCode::Unset), _) => Status::Unset,
            (Some(StatusCode::Ok), _) => Status::Ok,
            (Some(StatusCode::Error), description) => Status::error(description.unwrap_or_default()),
            (None, Some(description)) => Status::error(description),
            (None, None) => return None,
        })
    }

    /// A string field: the bridge's own, or an attribute.
    fn string(&mut self, field: &Field, value: Cow<'_, str>) {
        match field.name() {
            GROUP_FIELD => self.group = Some(value.into_owned()),
            MESSAGE_FIELD => self.message = Some(value.into_owned()),
            NAME_FIELD => self.name = Some(value.into_owned()),
            KIND_FIELD => self.kind = span_kind(&value),
            STATUS_CODE_FIELD => self.status_code = status_code(&value),
            STATUS_DESCRIPTION_FIELD | STATUS_MESSAGE_FIELD => self.status_description = Some(value.into_owned()),
            name => self.attributes.push(KeyValue::new(name, value.into_owned())),
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.string(field, Cow::Borrowed(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        match field.name() {
            PER_ENTRY_FIELD => self.per_entry = Some(value),
            name => self.attributes.push(KeyValue::new(name, value)),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.attributes.push(KeyValue::new(field.name(), value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(value) => self.attributes.push(KeyValue::new(field.name(), value)),
            Err(_) => self.attributes.push(KeyValue::new(field.name(), value.to_string())),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.attributes.push(KeyValue::new(field.name(), value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.string(field, Cow::Owned(format!("{value:?}")));
    }
}

/// Records span `id`. `per_entry_rules`: whether any rule asks for
/// per-entry spans (without one, the target is not looked up again).
pub(crate) fn on_new_span<S>(
    rules: &TracingRules,
    per_entry_rules: bool,
    attrs: &Attributes<'_>,
    id: &Id,
    ctx: &Context<'_, S>,
) where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if on_export_path() {
        return;
    }
    let metadata = attrs.metadata();
    let mut fields = Fields::for_fields(metadata.fields().len());
    attrs.record(&mut fields);
    if decided_per_span(metadata) {
        let word = fields.group.as_deref().map(|name| name.trim().to_lowercase());
        let group = word.as_deref().and_then(|word| rules.catalog().group(word));
        if group.is_none()
            && let Some(warning) = word.as_deref().and_then(|word| rules.unknown_group_field(word, metadata.target()))
        {
            lens_fallbacks::diag::warn(warning);
        }
        if !group.is_some_and(lens_fallbacks::groups::is_span_group_enabled) {
            return;
        }
    }
    let Some(span) = ctx.span(id) else { return };
    let parent = match attrs.parent() {
        Some(parent) => ctx
            .span(parent)
            .and_then(|span| span.extensions_mut().get_mut::<SpanData>().and_then(|d| d.start().map(|s| s.as_parent())))
            .unwrap_or_else(Parent::current),
        None if attrs.is_root() => Parent::Root,
        // The facade's current span, on lens's stack or in the context.
        None => Parent::current(),
    };
    let name = fields.name.take().map_or(Cow::Borrowed(metadata.name()), Cow::Owned);
    let status = fields.status();
    let template = Template { name, kind: fields.kind, attributes: fields.attributes };
    let created_unix_nano = now_unix_nano();
    let per_entry = fields.per_entry.unwrap_or_else(|| per_entry_rules && rules.decide(metadata.target()).per_entry);
    span.extensions_mut().insert(SpanData { template, created_unix_nano, parent, started: None, status, per_entry });
}

pub(crate) fn on_record<S>(id: &Id, values: &Record<'_>, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(span) = ctx.span(id) else { return };
    let mut fields = Fields::default();
    values.record(&mut fields);
    let status = fields.status();
    let mut extensions = span.extensions_mut();
    let Some(data) = extensions.get_mut::<SpanData>() else { return };
    if data.per_entry {
        // The current entry gets the values, and so do later entries.
        if let Some(entry) = current_entry(id.into_u64()) {
            with_entry(&entry, |mut span| span.update(&fields, status.clone()));
        }
        data.template.update(fields);
    } else if let Some(started) = &mut data.started {
        SpanMut::of(started).update(&fields, status);
    } else {
        // The span's own order of statuses (`Ok` over `Error` over unset;
        // an `Error` with a description over one without), as once started.
        if let Some(status) = status
            && data.status.as_ref().is_none_or(|old| status > *old)
        {
            data.status = Some(status);
        }
        data.template.update(fields);
    }
}

/// A started span to edit: lens's, or an OpenTelemetry context's.
enum SpanMut<'a> {
    Lens(&'a mut LensSpan),
    Context(&'a OtelContext),
}

impl SpanMut<'_> {
    fn of(recorded: &mut Recorded) -> SpanMut<'_> {
        match recorded {
            Recorded::Lens(span) => SpanMut::Lens(span),
            Recorded::Context(cx) => SpanMut::Context(cx),
        }
    }

    /// Recorded values on the started span.
    fn update(&mut self, fields: &Fields, status: Option<Status>) {
        match self {
            SpanMut::Lens(span) => {
                if let Some(name) = &fields.name {
                    span.update_name(name.clone());
                }
                if let Some(status) = status {
                    span.set_status(status);
                }
                for attribute in &fields.attributes {
                    span.set_attribute(attribute.clone());
                }
            }
            SpanMut::Context(cx) => {
                let span = cx.span();
                if let Some(name) = &fields.name {
                    span.update_name(name.clone());
                }
                if let Some(status) = status {
                    span.set_status(status);
                }
                if !fields.attributes.is_empty() {
                    span.set_attributes(fields.attributes.iter().cloned());
                }
            }
        }
    }

    fn add_event(&mut self, name: Cow<'static, str>, attributes: Vec<KeyValue>) {
        match self {
            SpanMut::Lens(span) => span.add_event(name, attributes),
            SpanMut::Context(cx) => cx.span().add_event(name, attributes),
        }
    }

    fn span_context(&self) -> SpanContext {
        match self {
            SpanMut::Lens(span) => span.span_context().clone(),
            SpanMut::Context(cx) => cx.span().span_context().clone(),
        }
    }
}

/// Runs `f` on the span of a per-entry span's entry on this thread.
fn with_entry<R>(entry: &Entry, f: impl FnOnce(SpanMut<'_>) -> R) -> Option<R> {
    match entry {
        Entry::Frame(frame) => current_span::with_frame(*frame, |span| f(SpanMut::Lens(span))),
        Entry::Context(cx) => Some(f(SpanMut::Context(cx))),
    }
}

impl Template {
    /// Recorded values on a span not started yet (or on every later entry
    /// of a per-entry span).
    fn update(&mut self, fields: Fields) {
        if let Some(name) = fields.name {
            self.name = Cow::Owned(name);
        }
        if fields.kind.is_some() {
            self.kind = fields.kind;
        }
        self.attributes.extend(fields.attributes);
    }
}

pub(crate) fn on_event<S>(event: &Event<'_>, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if on_export_path() {
        return;
    }
    let Some(span) = ctx.event_span(event) else { return log_event(event) };
    // Whether a recorded span takes the event (starting it if needed),
    // decided before the fields are read: reading them runs the program's
    // `Debug` impls, which must not find the span's extensions locked.
    let entry = {
        let mut extensions = span.extensions_mut();
        let Some(data) = extensions.get_mut::<SpanData>() else {
            drop(extensions);
            return log_event(event);
        };
        if data.per_entry {
            match current_entry(span.id().into_u64()) {
                Some(entry) => Some(entry),
                None => {
                    drop(extensions);
                    return log_event(event);
                }
            }
        } else {
            if data.start().is_none() {
                drop(extensions);
                return log_event(event);
            }
            None
        }
    };
    let mut fields = Fields::default();
    event.record(&mut fields);
    let metadata = event.metadata();
    fields.attributes.push(KeyValue::new(LEVEL_ATTRIBUTE, metadata.level().as_str()));
    let name = fields.message.take().map_or(Cow::Borrowed(metadata.name()), Cow::Owned);
    match entry {
        Some(entry) => {
            with_entry(&entry, |mut span| span.add_event(name, fields.attributes));
        }
        None => {
            let mut extensions = span.extensions_mut();
            if let Some(started) = extensions.get_mut::<SpanData>().and_then(|data| data.started.as_mut()) {
                SpanMut::of(started).add_event(name, fields.attributes);
            }
        }
    }
}

/// An event that no recorded span takes (outside every span, or in spans
/// the bridge does not record) as a log record, when a log pipeline is set
/// up (`<PREFIX>_LOGS_ENABLED`) and its level lets it through; correlated
/// with the OpenTelemetry span current here, if any.
fn log_event(event: &Event<'_>) {
    let metadata = event.metadata();
    logs::emit_event(severity(*metadata.level()), metadata.target(), || {
        let mut fields = Fields::for_fields(metadata.fields().len());
        event.record(&mut fields);
        logs::EventRecord { name: metadata.name(), body: fields.message.take(), attributes: fields.attributes }
    });
}

/// A `tracing` level as a log severity.
fn severity(level: tracing_core::Level) -> Severity {
    match level {
        tracing_core::Level::ERROR => Severity::Error,
        tracing_core::Level::WARN => Severity::Warn,
        tracing_core::Level::INFO => Severity::Info,
        tracing_core::Level::DEBUG => Severity::Debug,
        _ => Severity::Trace,
    }
}

/// Enters span `id`; `keeper` identifies the layer (its [`WithData`]'s
/// address), so that lens's stack edits the span in this registry only.
pub(crate) fn on_enter<S>(id: &Id, keeper: usize, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(span) = ctx.span(id) else { return };
    let mut extensions = span.extensions_mut();
    let Some(data) = extensions.get_mut::<SpanData>() else { return };
    let key = id.into_u64();
    let per_entry = data.per_entry;
    let how = if per_entry {
        let Some(tracer) = active::active_tracer() else { return };
        match stack_tracer(tracer) {
            Some(tracer) => {
                let template = &data.template;
                let with = template.start_with(None);
                let Some(frame) =
                    current_span::start(tracer, template.name.clone(), template.attributes.clone(), with, false)
                else {
                    return;
                };
                How::Frame(frame)
            }
            None => {
                let builder = data.template.clone().into_builder(SystemTime::now());
                let cx = tracer.build_with_context(builder, &current_span::current_context());
                drop(extensions);
                How::Context(cx.clone().attach(), Some(cx))
            }
        }
    } else {
        match data.start() {
            Some(Recorded::Lens(span)) => match current_span::enter_kept(span, keeper, key, edit_kept) {
                Some(frame) => How::Frame(frame),
                None => return,
            },
            Some(Recorded::Context(cx)) => {
                let cx = cx.clone();
                drop(extensions);
                How::Context(cx.attach(), None)
            }
            None => return,
        }
    };
    ENTERED.with_borrow_mut(|entered| entered.push(Entered { id: key, how, per_entry }));
}

/// Edits the span `key` names (a `tracing` span id), kept in the registry
/// of this thread's default subscriber when that is the subscriber of the
/// layer `keeper` identifies: how lens's stack reaches the span of a frame
/// [`on_enter`] pushed ([`current_span::with_current`]). Under another
/// default subscriber (one made the default inside the span) the id may
/// name another span, and nothing is edited.
fn edit_kept(keeper: usize, key: u64, edit: &mut dyn FnMut(&mut LensSpan)) {
    let Some(id) = std::num::NonZeroU64::new(key).map(Id::from_non_zero_u64) else { return };
    tracing_core::dispatcher::get_default(|dispatch| {
        if let Some(with) = dispatch.downcast_ref::<WithData>()
            && with.address() == keeper
        {
            (with.0)(dispatch, &id, &mut |data| {
                if let Some(Recorded::Lens(span)) = &mut data.started {
                    edit(span);
                }
            });
        }
    });
}

pub(crate) fn on_exit<S>(id: &Id, _ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let id = id.into_u64();
    let popped = ENTERED.with_borrow_mut(|entered| {
        let position = entered.iter().rposition(|e| e.id == id)?;
        Some(entered.remove(position))
    });
    // Outside the borrow: a frame ends (a per-entry span's entry) or just
    // goes (a kept span's); a context is detached first, then the entry's
    // span ends.
    match popped.map(|entered| entered.how) {
        Some(How::Frame(frame)) => current_span::end(frame, None),
        Some(How::Context(guard, entry)) => {
            drop(guard);
            if let Some(entry) = entry {
                entry.span().end();
            }
        }
        None => {}
    }
}

pub(crate) fn on_close<S>(id: &Id, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(span) = ctx.span(id) else { return };
    // Ended in place: the span (a few hundred bytes) is not moved out of its
    // box, and the rest goes when the registry clears the span.
    let mut extensions = span.extensions_mut();
    let Some(data) = extensions.get_mut::<SpanData>() else { return };
    if let Some(started) = data.start() {
        started.end();
    }
}

/// The hook [`set_parent`] and [`context_of`] reach the span's data through:
/// found by `Dispatch::downcast_ref`, as the layer hands it out from
/// `downcast_raw`.
pub(crate) struct WithData(WithDataFn);

/// Runs a closure on the data of span `id` of the dispatch's subscriber.
type WithDataFn = fn(&Dispatch, &Id, &mut dyn FnMut(&mut SpanData));

impl WithData {
    /// Its address: which layer it belongs to.
    pub(crate) fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    pub(crate) fn new<S>() -> WithData
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        WithData(with_data::<S>)
    }
}

fn with_data<S>(dispatch: &Dispatch, id: &Id, f: &mut dyn FnMut(&mut SpanData))
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(subscriber) = dispatch.downcast_ref::<S>() else { return };
    let Some(span) = subscriber.span(id) else { return };
    let mut extensions = span.extensions_mut();
    if let Some(data) = extensions.get_mut::<SpanData>() {
        f(data);
    }
}

fn on_data(span: &tracing::Span, f: &mut dyn FnMut(&mut SpanData)) {
    span.with_subscriber(|(id, dispatch)| {
        if let Some(with) = dispatch.downcast_ref::<WithData>() {
            (with.0)(dispatch, id, f);
        }
    });
}

pub(crate) fn set_parent(span: &tracing::Span, parent: &RemoteContext) {
    if !parent.is_valid() {
        return;
    }
    on_data(span, &mut |data| {
        if data.started.is_none() {
            data.parent = Parent::Context(parent.otel_context().clone());
        }
    });
}

pub(crate) fn context_of(span: &tracing::Span) -> RemoteContext {
    let mut found = None;
    let entry = span.id().and_then(|id| current_entry(id.into_u64()));
    on_data(span, &mut |data| {
        found = if data.per_entry {
            entry.as_ref().and_then(|entry| with_entry(entry, |span| span.span_context()))
        } else {
            data.start().map(|started| started.span_context())
        };
    });
    match found {
        Some(span_context) if span_context.is_valid() => {
            RemoteContext::from_otel(OtelContext::new().with_remote_span_context(span_context))
        }
        _ => RemoteContext::none(),
    }
}
