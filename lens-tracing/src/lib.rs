//! The `tracing` bridge: a [`tracing_subscriber::Layer`] that records
//! `tracing` spans as lens spans, in lens's traces, decided by span groups.
//!
//! [`TelemetryExt::tracing_layer`] hands out the bridge from the handle
//! telemetry setup returned, with the rules of the configuration setup read
//! (the program's own prefix): one call, no second read of the
//! configuration. [`layer`] builds it from rules of one's own. Both return
//! the bridge already wrapped in its per-layer filter ([`GroupFilter`]): add
//! it to a `tracing_subscriber::Registry` beside any other layer (a `fmt`
//! layer keeps printing every callsite the bridge turns off).
//!
//! ```
//! use lens_fallbacks::Telemetry;
//! use lens_tracing::TelemetryExt as _;
//! use tracing_subscriber::layer::SubscriberExt as _;
//!
//! let telemetry = Telemetry::builder("MYJOB_OTEL")
//!     .env([("MYJOB_OTEL_TRACING_GROUPS", "candle_transformers=forward_backward:per_entry")])
//!     .setup()?;
//! let subscriber = tracing_subscriber::registry().with(telemetry.tracing_layer());
//! tracing::subscriber::with_default(subscriber, || {
//!     let _span = tracing::info_span!(target: "candle_transformers::models::with_tracing", "linear").entered();
//! });
//! # Ok::<(), lens_fallbacks::SetupError>(())
//! ```
//!
//! A rule whose prefix matched no callsite by shutdown is one warning then,
//! naming the nearest targets the bridge saw (`rule candle=step matched
//! nothing; seen: candle_transformers::models::with_tracing`).
//!
//! A span's group comes from the `<PREFIX>_TRACING_GROUPS` rules
//! ([`lens_fallbacks::tracing_rules`]), else from a `lens::<group>` target, else
//! from the `*` rule (off without one); a [`GROUP_FIELD`] field names the group
//! per span. A callsite whose group is disabled, or every callsite on a rank
//! that records no spans, gets [`Interest::never`] from this filter only, so it
//! costs what any filtered-out `tracing` callsite costs; when lens's enabled
//! groups change, `tracing`'s interest cache is rebuilt.
//!
//! A recorded span is a lens span: a child of the lens (or bridged `tracing`)
//! span current where it was created, current itself (OpenTelemetry's context
//! is attached) while it is entered, with its fields as attributes and the
//! events inside it as span events. An event that no recorded span takes
//! becomes a log record when the log pipeline is on
//! (`<PREFIX>_LOGS_ENABLED`, at `INFO` and above), correlated with the
//! OpenTelemetry span current where it was written. [`set_parent`] gives it
//! a remote parent.
//! [`PER_ENTRY_FIELD`] or the `:per_entry` rule option records one span per
//! entry. Spans and events on lens's own export path are never recorded,
//! whatever the rules say: lens marks the threads that run its exporters
//! while they run them ([`lens_fallbacks::export_path`]), and the bridge reads
//! that mark where it decides.
//!
//! lens-tracing has no `otel` feature of its own: the bridge records exactly
//! when the application's facade does (lens-fallbacks' `otel`, which its
//! build script reads). Without it the layer is a no-op whose filter answers
//! `never` for every callsite, and no OpenTelemetry crate is built.
//!
//! See `docs/tracing.md` ("Using lens with tracing") for the rules, the
//! groups, per-entry spans and the cost.

use std::marker::PhantomData;
use std::sync::Arc;

use lens_fallbacks::config::LensConfig;
use lens_fallbacks::groups::is_span_group_enabled;
use lens_fallbacks::tracing_rules::{TracingDecision, TracingRules, TracingRulesError};
use lens_fallbacks::{RemoteContext, Telemetry};
use tracing_core::subscriber::Interest;
use tracing_core::{Metadata, Subscriber};
use tracing_subscriber::filter::{Filtered, LevelFilter};
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

#[cfg(lens_otel)]
mod bridge;
mod names;

use names::decided_per_span;
pub use names::{
    GROUP_FIELD, KIND_FIELD, NAME_FIELD, PER_ENTRY_FIELD, STATUS_CODE_FIELD, STATUS_DESCRIPTION_FIELD,
    STATUS_MESSAGE_FIELD,
};

/// The bridge wrapped in its per-layer filter: what [`layer`] returns.
pub type LensTracingLayer<S> = Filtered<LensLayer<S>, GroupFilter, S>;

/// The bridge with `rules` (see [`lens_fallbacks::tracing_rules`]).
///
/// ```
/// use lens_fallbacks::groups::LENS_CATALOG;
/// use lens_fallbacks::tracing_rules::TracingRules;
/// use tracing_subscriber::layer::SubscriberExt as _;
///
/// let rules = TracingRules::parse("tower_http=job, candle_transformers=forward_backward:per_entry", &LENS_CATALOG).unwrap();
/// let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules));
/// tracing::subscriber::with_default(subscriber, || {
///     let _span = tracing::info_span!(target: "tower_http::trace", "request").entered();
/// });
/// ```
pub fn layer<S>(rules: TracingRules) -> LensTracingLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let filter = GroupFilter::new(rules);
    LensLayer::new(Arc::clone(&filter.rules)).with_filter(filter)
}

/// The bridge from a telemetry handle: the one call a program makes.
pub trait TelemetryExt {
    /// The bridge with the `tracing` rules of the configuration setup read
    /// (`<PREFIX>_TRACING_GROUPS`, with the program's own prefix and
    /// catalog), wrapped in its filter: add it to the process's subscriber.
    /// At shutdown the handle warns once about each rule that matched no
    /// callsite this bridge saw.
    fn tracing_layer<S>(&self) -> LensTracingLayer<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>;
}

impl TelemetryExt for Telemetry {
    fn tracing_layer<S>(&self) -> LensTracingLayer<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        layer(self.tracing_rules())
    }
}

/// The bridge with the rules of `config.tracing_groups`
/// (`<PREFIX>_TRACING_GROUPS`), checked against `config.catalog`, for a
/// framework that reads its configuration itself; a program that sets up
/// with `Telemetry::from_env` uses [`TelemetryExt::tracing_layer`].
pub fn layer_from_config<S>(config: &LensConfig) -> Result<LensTracingLayer<S>, TracingRulesError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    Ok(layer(config.tracing_rules()?))
}

/// Gives `span` a remote parent (an incoming `traceparent`, see
/// `lens_fallbacks::extract_context`), as `tracing-opentelemetry`'s
/// `set_parent` does, so that a server's span joins its client's trace.
///
/// Call it before the span is first entered: a recorded span starts when it
/// is first entered (or gets a child, an event or closes), and its parent is
/// fixed from then on. Does nothing for a span the bridge does not record, for
/// a "no context" `parent`, and without `otel`.
pub fn set_parent(span: &tracing::Span, parent: &RemoteContext) {
    #[cfg(lens_otel)]
    bridge::set_parent(span, parent);
    #[cfg(not(lens_otel))]
    let _ = (span, parent);
}

/// The context of `span` as the bridge records it, to propagate it (inject it
/// into an outgoing request); "no context" for a span the bridge does not
/// record, and without `otel`.
pub fn context_of(span: &tracing::Span) -> RemoteContext {
    #[cfg(lens_otel)]
    return bridge::context_of(span);
    #[cfg(not(lens_otel))]
    {
        let _ = span;
        RemoteContext::none()
    }
}

/// The per-layer filter of the bridge: decides each callsite from the rules
/// and lens's enabled groups, for the bridge only.
#[derive(Debug)]
pub struct GroupFilter {
    rules: Arc<TracingRules>,
}

impl GroupFilter {
    /// A filter deciding with `rules`. With `otel`, registers the rebuild of
    /// `tracing`'s interest cache for every change of lens's enabled groups.
    pub fn new(rules: TracingRules) -> GroupFilter {
        #[cfg(lens_otel)]
        lens_fallbacks::groups::watch_enabled_span_groups(tracing_core::callsite::rebuild_interest_cache);
        GroupFilter { rules: Arc::new(rules) }
    }

    /// What the rules decide for `metadata`'s target.
    pub fn decide(&self, metadata: &Metadata<'_>) -> TracingDecision {
        self.rules.decide(metadata.target())
    }

    /// The rules.
    pub fn rules(&self) -> &TracingRules {
        &self.rules
    }
}

impl<S> Filter<S> for GroupFilter {
    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if !cfg!(lens_otel) {
            return Interest::never();
        }
        // Once per callsite (and per rebuild of the interest cache), never
        // per span: which rules matched, for the report at shutdown.
        self.rules.note_callsite(metadata.target());
        if lens_fallbacks::groups::enabled_span_groups().is_empty() {
            return Interest::never();
        }
        if decided_per_span(metadata) {
            return Interest::sometimes();
        }
        match self.decide(metadata).group {
            Some(group) if is_span_group_enabled(group) => Interest::always(),
            _ => Interest::never(),
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // With nothing to record, the bridge wants no level at all: alone in
        // a subscriber, every callsite then stops at `tracing`'s global
        // level check, as with no subscriber (another layer's hint still
        // counts; the cache rebuild on a change of the groups recomputes it).
        if !cfg!(lens_otel) || lens_fallbacks::groups::enabled_span_groups().is_empty() {
            Some(LevelFilter::OFF)
        } else {
            None
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        // Reached for `sometimes` callsites (and when another layer's filter
        // makes the whole callsite `sometimes`): the decision again, and the
        // export-path check, which `always` callsites get in the layer.
        if !cfg!(lens_otel) || lens_fallbacks::export_path::on_export_path() {
            return false;
        }
        if decided_per_span(metadata) {
            return !lens_fallbacks::groups::enabled_span_groups().is_empty();
        }
        self.decide(metadata).group.is_some_and(is_span_group_enabled)
    }
}

/// The bridge layer; use it through [`layer`], which adds its filter.
pub struct LensLayer<S> {
    #[cfg_attr(not(lens_otel), expect(dead_code, reason = "the no-op layer reads no rules"))]
    rules: Arc<TracingRules>,
    /// Whether any rule asks for per-entry spans (read once, not per span).
    #[cfg_attr(not(lens_otel), expect(dead_code, reason = "the no-op layer reads no rules"))]
    per_entry_rules: bool,
    #[cfg(lens_otel)]
    with_data: bridge::WithData,
    _subscriber: PhantomData<fn(S)>,
}

impl<S> std::fmt::Debug for LensLayer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LensLayer").finish_non_exhaustive()
    }
}

impl<S> LensLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// The bridge layer, unfiltered, reading per-entry options from
    /// `rules`: wrap it in a [`GroupFilter`] with the same rules ([`layer`]
    /// does both).
    pub fn new(rules: Arc<TracingRules>) -> LensLayer<S> {
        LensLayer {
            per_entry_rules: rules.has_per_entry(),
            rules,
            #[cfg(lens_otel)]
            with_data: bridge::WithData::new::<S>(),
            _subscriber: PhantomData,
        }
    }
}

#[cfg(lens_otel)]
impl<S> Layer<S> for LensLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing_core::span::Attributes<'_>,
        id: &tracing_core::span::Id,
        ctx: Context<'_, S>,
    ) {
        bridge::on_new_span(&self.rules, self.per_entry_rules, attrs, id, &ctx);
    }

    fn on_record(&self, id: &tracing_core::span::Id, values: &tracing_core::span::Record<'_>, ctx: Context<'_, S>) {
        bridge::on_record(id, values, &ctx);
    }

    fn on_event(&self, event: &tracing_core::Event<'_>, ctx: Context<'_, S>) {
        bridge::on_event(event, &ctx);
    }

    fn on_enter(&self, id: &tracing_core::span::Id, ctx: Context<'_, S>) {
        bridge::on_enter(id, self.with_data.address(), &ctx);
    }

    fn on_exit(&self, id: &tracing_core::span::Id, ctx: Context<'_, S>) {
        bridge::on_exit(id, &ctx);
    }

    fn on_close(&self, id: tracing_core::span::Id, ctx: Context<'_, S>) {
        bridge::on_close(&id, &ctx);
    }

    unsafe fn downcast_raw(&self, id: std::any::TypeId) -> Option<*const ()> {
        if id == std::any::TypeId::of::<Self>() {
            Some(self as *const Self as *const ())
        } else if id == std::any::TypeId::of::<bridge::WithData>() {
            Some(&self.with_data as *const bridge::WithData as *const ())
        } else {
            None
        }
    }
}

#[cfg(not(lens_otel))]
impl<S> Layer<S> for LensLayer<S> where S: Subscriber + for<'a> LookupSpan<'a> {}

/// The page "Using lens with tracing" (`docs/tracing.md`), whose examples run
/// as doc tests (with `testing`: the server example needs axum and tower-http).
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../../docs/tracing.md")]
pub struct TracingDocExamples;
