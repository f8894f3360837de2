//! [`SpanBuilder`]: the span with the rare options (an explicit parent,
//! links, a kind, a start time, a sampling key, a chosen trace id), beside
//! the everyday helpers of [`crate::span`].
//!
//! [`span`] reads the gate first (one relaxed load and a mask test): for a
//! disabled group the builder is empty, every option drops its argument
//! without looking at it (a links iterator is never iterated, attributes are
//! never built) and the terminal method returns an inert guard, so a disabled
//! builder costs the gate and nothing else. Without `otel` the builder is
//! zero-sized and every method is an inline no-op.
//!
//! ```
//! use std::time::SystemTime;
//! use lens_fallbacks::attr::KeyValue;
//! use lens_fallbacks::groups::SpanGroup;
//! use lens_fallbacks::propagation::RemoteContext;
//! use lens_fallbacks::span::{SpanKind, SpanLink, span};
//!
//! let previous = RemoteContext::none();
//! // Before setup every group is disabled: the guard is inert.
//! let interval = span(SpanGroup::JOB, "megatron.train")
//!     .links([SpanLink::new(&previous)])
//!     .start_time(SystemTime::now())
//!     .attributes([KeyValue::new("megatron.iteration", 0)])
//!     .start();
//! assert!(!interval.is_recording());
//!
//! let request = span(SpanGroup::JOB, "POST /v1/completions")
//!     .kind(SpanKind::Server)
//!     .parent(&RemoteContext::none())
//!     .start_detached();
//! assert!(!request.is_recording());
//! ```

use std::borrow::Cow;
use std::time::SystemTime;

#[cfg(feature = "otel")]
use opentelemetry::Context;

use super::{DetachedSpan, SpanGuard, SpanKind, SpanLink, is_span_group_enabled};
#[cfg(feature = "otel")]
use super::{Parent, SAMPLING_KEY_ATTRIBUTE, StartOptions, redacted, start_span};
use crate::attr::KeyValue;
use crate::groups::SpanGroup;
#[cfg(feature = "otel")]
use crate::otel::active::active_tracer;
use crate::propagation::RemoteContext;

/// A span of `group` named `name`, to configure and then start with
/// [`start`](SpanBuilder::start) (current until the guard drops),
/// [`start_unattached`](SpanBuilder::start_unattached),
/// [`start_detached`](SpanBuilder::start_detached) or
/// [`end_at`](SpanBuilder::end_at) (a span that already happened).
///
/// The gate is read here, before anything is built: a disabled group gives
/// an empty builder, and `name` is dropped unconverted.
#[inline]
pub fn span(group: SpanGroup, name: impl Into<Cow<'static, str>>) -> SpanBuilder {
    if !is_span_group_enabled(group) {
        return SpanBuilder::disabled();
    }
    #[cfg(feature = "otel")]
    return SpanBuilder::enabled(name.into());
    #[cfg(not(feature = "otel"))]
    {
        let _ = name;
        SpanBuilder::disabled()
    }
}

/// A span recorded whenever telemetry is set up, whatever the span groups
/// (no gate): the builder form of [`enter_span`](super::enter_span), for
/// cold paths such as the original's ungated linked span.
#[inline]
pub fn ungated_span(name: impl Into<Cow<'static, str>>) -> SpanBuilder {
    #[cfg(feature = "otel")]
    return SpanBuilder::enabled(name.into());
    #[cfg(not(feature = "otel"))]
    {
        let _ = name;
        SpanBuilder::disabled()
    }
}

/// What an enabled builder has collected.
#[cfg(feature = "otel")]
struct Pending {
    name: Cow<'static, str>,
    options: StartOptions,
    attributes: Vec<opentelemetry::KeyValue>,
    trace_id: Option<u128>,
}

/// A span being configured: see [`span`]. Each option replaces the one set
/// before, except [`links`](SpanBuilder::links) and
/// [`attributes`](SpanBuilder::attributes), which add.
///
/// Without `otel`, and for a disabled group, it holds nothing and every
/// method does nothing.
#[must_use = "a span builder records nothing until it is started"]
pub struct SpanBuilder {
    #[cfg(feature = "otel")]
    pending: Option<Pending>,
    _private: (),
}

impl SpanBuilder {
    /// An empty builder: what a disabled group gets.
    #[inline]
    const fn disabled() -> SpanBuilder {
        SpanBuilder {
            #[cfg(feature = "otel")]
            pending: None,
            _private: (),
        }
    }

    #[cfg(feature = "otel")]
    fn enabled(name: Cow<'static, str>) -> SpanBuilder {
        SpanBuilder {
            pending: Some(Pending { name, options: StartOptions::current(), attributes: Vec::new(), trace_id: None }),
            _private: (),
        }
    }

    /// Whether the builder will record anything if started (false for a
    /// disabled group, and always without `otel`). The active tracer is read
    /// only when it starts.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.pending.is_some();
        #[cfg(not(feature = "otel"))]
        false
    }

    /// Applies `change` to the pending span, if there is one.
    #[inline(always)]
    #[cfg(feature = "otel")]
    fn with(mut self, change: impl FnOnce(&mut Pending)) -> SpanBuilder {
        if let Some(pending) = &mut self.pending {
            change(pending);
        }
        self
    }

    /// The span's parent: `parent` instead of the current span. "No context"
    /// starts a new trace, with none of the current context's entries.
    #[doc(alias = "detached_span")]
    #[inline]
    pub fn parent(self, parent: &RemoteContext) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| {
            let cx = if parent.is_valid() { parent.otel_context().clone() } else { Context::new() };
            pending.options.parent = Parent::Context(cx);
        });
        #[cfg(not(feature = "otel"))]
        {
            let _ = parent;
            self
        }
    }

    /// No parent: the span starts a new trace (the current context's other
    /// entries, such as baggage, stay current with it).
    #[doc(alias = "new_trace_linked")]
    #[inline]
    pub fn new_trace(self) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| pending.options.parent = Parent::NewTrace);
        #[cfg(not(feature = "otel"))]
        self
    }

    /// Adds links to other spans (a link to "no context" is skipped). For a
    /// disabled group `links` is not iterated.
    #[doc(alias = "create_linked_span")]
    #[inline]
    pub fn links(self, links: impl IntoIterator<Item = SpanLink>) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| pending.options.links.extend(links.into_iter().filter_map(SpanLink::into_link)));
        #[cfg(not(feature = "otel"))]
        {
            let _ = links;
            self
        }
    }

    /// The span's kind (`Internal` unless set).
    #[inline]
    pub fn kind(self, kind: SpanKind) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| pending.options.kind = Some(kind));
        #[cfg(not(feature = "otel"))]
        {
            let _ = kind;
            self
        }
    }

    /// The span's start time, for a span that began before the code could
    /// open it (the default is now).
    #[doc(alias = "managed_span_since", alias = "create_linked_span_since")]
    #[inline]
    pub fn start_time(self, start_time: SystemTime) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| pending.options.start_time = Some(start_time));
        #[cfg(not(feature = "otel"))]
        {
            let _ = start_time;
            self
        }
    }

    /// The sampling key the span and its subtree follow (one ratio decision per
    /// key, the same on every rank): usually
    /// [`sampling_key`](super::sampling_key) of an iteration. It is set as
    /// the start attribute [`SAMPLING_KEY_ATTRIBUTE`](super::SAMPLING_KEY_ATTRIBUTE),
    /// which lens's sampler reads.
    #[inline]
    pub fn sampling_key(self, key: i64) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| {
            pending.attributes.push(opentelemetry::KeyValue::new(SAMPLING_KEY_ATTRIBUTE, key));
        });
        #[cfg(not(feature = "otel"))]
        {
            let _ = key;
            self
        }
    }

    /// Starts a new trace whose trace id is `trace_id` rather than a random
    /// one (span ids stay random): for the structural traces (startup and the
    /// training intervals), where every rank derives the same id for the same interval. An
    /// all-zero id is invalid and gets a random one instead. Implies
    /// [`new_trace`](SpanBuilder::new_trace) unless a parent is set after it.
    #[doc(alias = "root_span_with_trace_id")]
    #[inline]
    pub fn trace_id(self, trace_id: [u8; 16]) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| {
            pending.trace_id = Some(u128::from_be_bytes(trace_id));
            pending.options.parent = Parent::NewTrace;
        });
        #[cfg(not(feature = "otel"))]
        {
            let _ = trace_id;
            self
        }
    }

    /// Adds start attributes (samplers see them). For a disabled group
    /// `attributes` is not iterated.
    #[inline]
    pub fn attributes(self, attributes: impl IntoIterator<Item = KeyValue>) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| {
            pending.attributes.extend(attributes.into_iter().map(lens_otel_runtime::convert::ToOtel::to_otel));
        });
        #[cfg(not(feature = "otel"))]
        {
            let _ = attributes;
            self
        }
    }

    /// Adds start attributes with the rules of
    /// [`SpanGuard::set_attributes_redacted`]: `None` entries skipped, string
    /// values under `redact_keys` replaced by
    /// [`REDACTED`](crate::attr::REDACTED).
    #[inline]
    pub fn attributes_redacted(
        self,
        attributes: impl IntoIterator<Item = impl Into<Option<KeyValue>>>,
        redact_keys: &[&str],
    ) -> SpanBuilder {
        #[cfg(feature = "otel")]
        return self.with(|pending| {
            pending
                .attributes
                .extend(redacted(attributes, redact_keys).map(lens_otel_runtime::convert::ToOtel::to_otel));
        });
        #[cfg(not(feature = "otel"))]
        {
            let _ = (attributes, redact_keys);
            self
        }
    }

    /// Starts the span, with `make_current` as given; inert when disabled
    /// or before setup.
    #[cfg(feature = "otel")]
    #[inline]
    fn start_with(self, make_current: bool) -> SpanGuard {
        match self.pending {
            None => SpanGuard::noop(),
            Some(pending) => pending.start(make_current),
        }
    }

    /// Starts the span and makes it current until the guard drops.
    #[inline]
    pub fn start(self) -> SpanGuard {
        #[cfg(feature = "otel")]
        return self.start_with(true);
        #[cfg(not(feature = "otel"))]
        SpanGuard::noop()
    }

    /// Starts the span without making it current: spans opened while the
    /// guard lives are not its children (the original's linked span, which
    /// sits beside the work rather than above it).
    #[doc(alias = "create_linked_span")]
    #[inline]
    pub fn start_unattached(self) -> SpanGuard {
        #[cfg(feature = "otel")]
        return self.start_with(false);
        #[cfg(not(feature = "otel"))]
        SpanGuard::noop()
    }

    /// Starts the span as a [`DetachedSpan`]: never current, `Send`, ended
    /// where it is dropped (for work that crosses threads and `.await`s).
    #[doc(alias = "detached_span")]
    #[inline]
    pub fn start_detached(self) -> DetachedSpan {
        #[cfg(feature = "otel")]
        {
            let mut guard = self.start_with(false);
            DetachedSpan { open: guard.open.take() }
        }
        #[cfg(not(feature = "otel"))]
        DetachedSpan::noop()
    }

    /// Records a span that already happened, from its
    /// [`start_time`](SpanBuilder::start_time) (now if unset) to `end_time`,
    /// and returns its context (to link to it), or "no context" when
    /// disabled.
    #[doc(alias = "backdated_span")]
    #[inline]
    pub fn end_at(self, end_time: SystemTime) -> RemoteContext {
        #[cfg(feature = "otel")]
        {
            let guard = self.start_with(false);
            let context = guard.remote_context();
            guard.end_at(end_time);
            context
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = end_time;
            RemoteContext::none()
        }
    }
}

#[cfg(feature = "otel")]
impl Pending {
    #[inline(never)]
    fn start(self, make_current: bool) -> SpanGuard {
        let Some(tracer) = active_tracer() else {
            return SpanGuard::noop();
        };
        let Pending { name, mut options, attributes, trace_id } = self;
        options.make_current = make_current;
        match trace_id {
            None => start_span(tracer, name, attributes, options),
            Some(trace_id) => {
                crate::otel::ids::with_next_trace_id(trace_id, || start_span(tracer, name, attributes, options))
            }
        }
    }
}

impl std::fmt::Debug for SpanBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        #[cfg(feature = "otel")]
        if let Some(pending) = &self.pending {
            return f.debug_struct("SpanBuilder").field("name", &pending.name).finish_non_exhaustive();
        }
        f.write_str("SpanBuilder(disabled)")
    }
}
