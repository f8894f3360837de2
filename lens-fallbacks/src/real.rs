//! The `otel` side of the seam: lens-core's runtime, re-exported.

pub use lens_core::groups::is_span_group_enabled;
pub use lens_core::otel::propagation::{
    AttachedContext, InvalidBootstrap, RemoteContext, WorkerBootstrap, context_from_env, create_linked_span,
    create_linked_span_since, current_context, decode_context, encode_context, extract_context, inject_context,
};
pub use lens_core::otel::span::{
    DEFAULT_REDACT_KEYS, LazyAttributes, REDACTED, SpanGuard, SpanLink, backdated_span, in_managed_span,
    instrument_future, lazy_attributes, managed_span, managed_span_since, new_trace_linked, redact_value,
    root_span_with_trace_id, safe_set_span_attributes, span_cm, try_in_managed_span, try_instrument_future,
};

pub use lens_core::metrics::Meter;
pub use lens_core::otel::sampler::{SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, sampling_key};
pub use lens_core::otel::setup::{SetupError, SetupOptions, Telemetry, setup_telemetry};
