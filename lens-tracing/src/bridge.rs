//! The recording side of the bridge (with `otel`): `tracing` spans become
//! spans of lens's active tracer.
//!
//! A recorded span keeps a [`SpanData`] in its registry extensions: the span
//! builder (name, start time, fields as attributes), the parent context
//! captured when the span was created, and, once started, the OpenTelemetry
//! context holding the span. A span starts lazily (first entry, first child,
//! first event, [`context_of`], or close), so that [`set_parent`] can still
//! give it a remote parent; its start time is its creation time.
//!
//! Entering a span attaches its context (so lens spans and `tracing` spans
//! opened inside are its children); the attach guards live in a per-thread
//! stack, popped on exit. A per-entry span starts a fresh span, child of the
//! context current at entry, on every entry and ends it on exit.

use std::borrow::Cow;
use std::cell::RefCell;
use std::time::SystemTime;

use lens_fallbacks::RemoteContext;
use lens_fallbacks::export_path::on_export_path;
use lens_fallbacks::otel::opentelemetry::logs::Severity;
use lens_fallbacks::otel::opentelemetry::trace::{SpanBuilder, SpanKind, Status, TraceContextExt as _};
use lens_fallbacks::otel::opentelemetry::{Context as OtelContext, ContextGuard, KeyValue};
use lens_fallbacks::otel::{active, current_span, logs};
use lens_fallbacks::tracing_rules::TracingRules;
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Dispatch, Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::names::{
    GROUP_FIELD, KIND_FIELD, NAME_FIELD, PER_ENTRY_FIELD, STATUS_CODE_FIELD, STATUS_DESCRIPTION_FIELD, decided_per_span,
};

/// The field `tracing`'s macros give an event's message.
const MESSAGE_FIELD: &str = "message";

/// The attribute an event gets with its level (`INFO`, `WARN`, ...).
pub(crate) const LEVEL_ATTRIBUTE: &str = "level";

/// What the bridge keeps in a recorded span's extensions.
pub(crate) struct SpanData {
    /// The span to start (for a per-entry span: the template of every entry).
    builder: SpanBuilder,
    /// The parent captured at creation (or set by [`set_parent`]).
    parent: OtelContext,
    /// The started span, in its context (never set for a per-entry span).
    started: Option<OtelContext>,
    /// A status recorded before the span started.
    status: Option<Status>,
    per_entry: bool,
}

impl SpanData {
    /// The started span's context, starting it now if needed; `None` for a
    /// per-entry span and when no tracer is installed.
    fn start(&mut self) -> Option<&OtelContext> {
        if self.per_entry {
            return None;
        }
        if self.started.is_none() {
            let tracer = active::active_tracer()?;
            let builder = std::mem::take(&mut self.builder);
            let cx = tracer.build_with_context(builder, &std::mem::take(&mut self.parent));
            if let Some(status) = self.status.take() {
                cx.span().set_status(status);
            }
            self.started = Some(cx);
        }
        self.started.as_ref()
    }
}

/// A span entered on this thread: the attach guard, and for a per-entry span
/// the entry's own span.
struct Entered {
    id: u64,
    guard: ContextGuard,
    entry: Option<OtelContext>,
}

thread_local! {
    static ENTERED: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
}

/// The context of the innermost entry of span `id` on this thread.
fn current_entry(id: u64) -> Option<OtelContext> {
    ENTERED.with_borrow(|entered| entered.iter().rev().find(|e| e.id == id).and_then(|e| e.entry.clone()))
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

    /// The status the fields state, if any.
    fn status(&mut self) -> Option<Status> {
        Some(match self.status_code? {
            StatusCode::Unset => Status::Unset,
            StatusCode::Ok => Status::Ok,
            StatusCode::Error => Status::error(self.status_description.take().unwrap_or_default()),
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
            STATUS_DESCRIPTION_FIELD => self.status_description = Some(value.into_owned()),
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
        let group = fields.group.as_deref().and_then(|name| rules.catalog().group(&name.trim().to_lowercase()));
        if !group.is_some_and(lens_fallbacks::groups::is_span_group_enabled) {
            return;
        }
    }
    let Some(span) = ctx.span(id) else { return };
    let parent = match attrs.parent() {
        Some(parent) => ctx
            .span(parent)
            .and_then(|span| span.extensions_mut().get_mut::<SpanData>().and_then(|d| d.start().cloned()))
            .unwrap_or_else(current_span::current_context),
        None if attrs.is_root() => OtelContext::new(),
        // The facade's current span, on lens's stack or in the context.
        None => current_span::current_context(),
    };
    let name = fields.name.take().map_or(Cow::Borrowed(metadata.name()), Cow::Owned);
    let status = fields.status();
    let builder = SpanBuilder {
        name,
        span_kind: fields.kind,
        start_time: Some(SystemTime::now()),
        attributes: (!fields.attributes.is_empty()).then_some(fields.attributes),
        events: None,
        links: None,
    };
    let per_entry = fields.per_entry.unwrap_or_else(|| per_entry_rules && rules.decide(metadata.target()).per_entry);
    span.extensions_mut().insert(SpanData { builder, parent, started: None, status, per_entry });
}

pub(crate) fn on_record<S>(id: &Id, values: &Record<'_>, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(span) = ctx.span(id) else { return };
    let mut extensions = span.extensions_mut();
    let Some(data) = extensions.get_mut::<SpanData>() else { return };
    let mut fields = Fields::default();
    values.record(&mut fields);
    let status = fields.status();
    if data.per_entry {
        // The current entry gets the values, and so do later entries.
        if let Some(cx) = current_entry(id.into_u64()) {
            update(&cx, &fields, status);
        }
        update_builder(&mut data.builder, fields);
    } else if let Some(cx) = &data.started {
        update(cx, &fields, status);
    } else {
        if status.is_some() {
            data.status = status;
        }
        update_builder(&mut data.builder, fields);
    }
}

/// Recorded values on a started span.
fn update(cx: &OtelContext, fields: &Fields, status: Option<Status>) {
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

/// Recorded values on a span not started yet (or the template of a
/// per-entry span).
fn update_builder(builder: &mut SpanBuilder, fields: Fields) {
    if let Some(name) = fields.name {
        builder.name = Cow::Owned(name);
    }
    if fields.kind.is_some() {
        builder.span_kind = fields.kind;
    }
    if !fields.attributes.is_empty() {
        builder.attributes.get_or_insert_with(Vec::new).extend(fields.attributes);
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
    let mut extensions = span.extensions_mut();
    let Some(data) = extensions.get_mut::<SpanData>() else {
        drop(extensions);
        return log_event(event);
    };
    let target = if data.per_entry { current_entry(span.id().into_u64()) } else { data.start().cloned() };
    drop(extensions);
    let Some(cx) = target else { return log_event(event) };
    let mut fields = Fields::default();
    event.record(&mut fields);
    let metadata = event.metadata();
    fields.attributes.push(KeyValue::new(LEVEL_ATTRIBUTE, metadata.level().as_str()));
    let name = fields.message.take().map_or(std::borrow::Cow::Borrowed(metadata.name()), std::borrow::Cow::Owned);
    cx.span().add_event(name, fields.attributes);
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

pub(crate) fn on_enter<S>(id: &Id, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(span) = ctx.span(id) else { return };
    let mut extensions = span.extensions_mut();
    let Some(data) = extensions.get_mut::<SpanData>() else { return };
    let (cx, entry) = if data.per_entry {
        let Some(tracer) = active::active_tracer() else { return };
        let builder = data.builder.clone().with_start_time(SystemTime::now());
        let cx = tracer.build_with_context(builder, &current_span::current_context());
        (cx.clone(), Some(cx))
    } else {
        let Some(cx) = data.start() else { return };
        (cx.clone(), None)
    };
    drop(extensions);
    let guard = cx.attach();
    ENTERED.with_borrow_mut(|entered| entered.push(Entered { id: id.into_u64(), guard, entry }));
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
    // Dropped outside the borrow: detach first, then end the entry's span.
    if let Some(Entered { guard, entry, .. }) = popped {
        drop(guard);
        if let Some(entry) = entry {
            entry.span().end();
        }
    }
}

pub(crate) fn on_close<S>(id: &Id, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(span) = ctx.span(id) else { return };
    // Taken out in place: the rest of the data (a few hundred bytes) is not
    // moved out of its box, and goes when the registry clears the span.
    let started = {
        let mut extensions = span.extensions_mut();
        let Some(data) = extensions.get_mut::<SpanData>() else { return };
        data.start();
        data.started.take()
    };
    if let Some(cx) = started {
        cx.span().end();
    }
}

/// The hook [`set_parent`] and [`context_of`] reach the span's data through:
/// found by `Dispatch::downcast_ref`, as the layer hands it out from
/// `downcast_raw`.
pub(crate) struct WithData(WithDataFn);

/// Runs a closure on the data of span `id` of the dispatch's subscriber.
type WithDataFn = fn(&Dispatch, &Id, &mut dyn FnMut(&mut SpanData));

impl WithData {
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
            data.parent = parent.otel_context().clone();
        }
    });
}

pub(crate) fn context_of(span: &tracing::Span) -> RemoteContext {
    let mut found = None;
    let entry = span.id().and_then(|id| current_entry(id.into_u64()));
    on_data(span, &mut |data| {
        found = if data.per_entry { entry.clone() } else { data.start().cloned() };
    });
    match found {
        Some(cx) if cx.span().span_context().is_valid() => {
            RemoteContext::from_otel(OtelContext::new().with_remote_span_context(cx.span().span_context().clone()))
        }
        _ => RemoteContext::none(),
    }
}
