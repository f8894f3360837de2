//! The `otel` side of the seam: lens-core's runtime, re-exported.

pub use lens_core::groups::is_span_group_enabled;
pub use lens_core::otel::propagation::{
    AttachedContext, InvalidBootstrap, RemoteContext, WorkerBootstrap, context_from_env, create_linked_span,
    create_linked_span_since, current_context, decode_context, encode_context, extract_context, inject_context,
};
pub use lens_core::otel::span::{
    DEFAULT_REDACT_KEYS, DetachedSpan, LazyAttributes, REDACTED, SpanGuard, SpanKind, SpanLink, backdated_span,
    detached_span, in_managed_span, instrument_future, lazy_attributes, managed_span, managed_span_since,
    new_trace_linked, redact_value, root_span_with_trace_id, safe_set_span_attributes, span_cm, try_in_managed_span,
    try_instrument_future,
};

pub use lens_core::otel::opentelemetry::metrics::Meter;
pub use lens_core::otel::sampler::{SAMPLING_KEY_ATTRIBUTE, STRUCTURAL_ATTRIBUTE, sampling_key};
pub use lens_core::otel::setup::{SetupError, SetupOptions, Telemetry, setup_telemetry};

/// The metric recording of `lens-instruments`: handles created once from a
/// [`Meter`], values structs of `Option` fields, and the original's
/// `record_*_metrics` functions.
///
/// As the seed page says, inference recording is also re-exported here at
/// the root; RL and Gym recording only from their modules. The values structs
/// are lens-core's pure ones (`lens_core::instrument_values`), the same types
/// in both modes.
pub mod instruments {
    pub use lens_instruments::{InferenceMetrics, InferenceValues, record_inference_metrics};

    /// GenAI inference metrics (`gen_ai.*`).
    pub mod inference {
        pub use lens_instruments::inference::{InferenceMetrics, InferenceValues, record_inference_metrics};
    }

    /// NeMo RL metrics (`rl.*`).
    pub mod rl {
        pub use lens_instruments::rl::{RlMetrics, RlValues, record_rl_metrics};
    }

    /// NeMo Gym server metrics (`gym.*`).
    pub mod gym {
        pub use lens_instruments::gym::{GymMetrics, GymValues, record_gym_metrics};
    }
}
