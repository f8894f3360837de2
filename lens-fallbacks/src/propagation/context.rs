//! [`RemoteContext`]: a trace context received from elsewhere or captured
//! here to send, and [`AttachedContext`], the guard that keeps one current.
//! The codecs that read and write it are in [`super::w3c`].

use std::fmt;
use std::marker::PhantomData;

#[cfg(feature = "otel")]
use opentelemetry::Context;
#[cfg(feature = "otel")]
use opentelemetry::trace::TraceContextExt as _;

/// A trace context received from elsewhere (or captured here to send), or
/// "no context".
///
/// It holds the remote span's context and any baggage; it is `Send`, `Sync`
/// and cheap to clone. Without `otel` it is zero-sized and always "no
/// context".
///
/// `otel_context` and `from_otel` name OpenTelemetry types, so they exist
/// only with `otel` (for lens-core's own code; they are not part of the
/// facade's API).
#[derive(Clone, Default)]
pub struct RemoteContext {
    #[cfg(feature = "otel")]
    cx: Context,
}

impl RemoteContext {
    /// "No context": invalid, links and parents nothing.
    #[inline]
    pub fn none() -> RemoteContext {
        RemoteContext {
            #[cfg(feature = "otel")]
            cx: Context::new(),
        }
    }

    /// The OpenTelemetry context (`otel` only; not part of the facade API).
    #[cfg(feature = "otel")]
    pub fn otel_context(&self) -> &Context {
        &self.cx
    }

    /// Wraps an OpenTelemetry context (`otel` only; not part of the facade API).
    #[cfg(feature = "otel")]
    pub fn from_otel(cx: Context) -> RemoteContext {
        RemoteContext { cx }
    }

    /// Whether it carries a valid span context (never without `otel`).
    #[inline]
    pub fn is_valid(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.cx.span().span_context().is_valid();
        #[cfg(not(feature = "otel"))]
        return false;
    }

    /// The trace id as 32 lower-case hex digits, when valid.
    #[inline]
    pub fn trace_id_hex(&self) -> Option<String> {
        #[cfg(feature = "otel")]
        {
            let span_context = self.cx.span().span_context().clone();
            span_context.is_valid().then(|| span_context.trace_id().to_string())
        }
        #[cfg(not(feature = "otel"))]
        None
    }

    /// The span id as 16 lower-case hex digits, when valid.
    #[inline]
    pub fn span_id_hex(&self) -> Option<String> {
        #[cfg(feature = "otel")]
        {
            let span_context = self.cx.span().span_context().clone();
            span_context.is_valid().then(|| span_context.span_id().to_string())
        }
        #[cfg(not(feature = "otel"))]
        None
    }

    /// Makes this context current on this thread until the guard drops, so
    /// that spans opened meanwhile join the remote trace as children of the
    /// remote span (an inference server handling a request that carries a
    /// `traceparent`, a worker continuing its launcher's trace). "No
    /// context" attaches nothing. Dropping the guard restores the previous
    /// context on every path, so the remote context never leaks into the
    /// next request on the same thread.
    #[inline]
    pub fn attach(&self) -> AttachedContext {
        AttachedContext {
            #[cfg(feature = "otel")]
            guard: self.is_valid().then(|| self.cx.clone().attach()),
            _not_send: PhantomData,
        }
    }
}

/// Keeps a [`RemoteContext`] current until dropped (see
/// [`RemoteContext::attach`]). Neither `Send` nor `Sync`: drop it on the
/// thread that made it.
#[must_use = "the context is current only while the guard lives: bind it with `let _context = ...`"]
pub struct AttachedContext {
    #[cfg(feature = "otel")]
    guard: Option<opentelemetry::ContextGuard>,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for AttachedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[cfg(feature = "otel")]
        let attached = self.guard.is_some();
        #[cfg(not(feature = "otel"))]
        let attached = false;
        f.debug_struct("AttachedContext").field("attached", &attached).finish()
    }
}

impl fmt::Debug for RemoteContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[cfg(not(feature = "otel"))]
        return f.write_str("RemoteContext(none)");
        #[cfg(feature = "otel")]
        let span_context = self.cx.span().span_context().clone();
        #[cfg(feature = "otel")]
        if span_context.is_valid() {
            f.debug_struct("RemoteContext")
                .field("trace_id", &span_context.trace_id())
                .field("span_id", &span_context.span_id())
                .field("sampled", &span_context.is_sampled())
                .finish()
        } else {
            f.write_str("RemoteContext(none)")
        }
    }
}

/// The current context (the current span and baggage), to send elsewhere or
/// to link to later. The current span is the facade's innermost one, on
/// lens's own stack or in the OpenTelemetry context.
#[inline]
pub fn current_context() -> RemoteContext {
    RemoteContext {
        #[cfg(feature = "otel")]
        cx: crate::otel::current_span::current_context(),
    }
}
