//! The span helpers of the lifecycle: [`span`] for one taxonomy span with
//! the marks its table row implies, and [`IterationSpans`], the guard of one
//! iteration.

use lens_fallbacks::{KeyValue, STRUCTURAL_ATTRIBUTE, SpanGuard, is_span_group_enabled, managed_span};

use crate::taxonomy::{Sampling, SpanDef, attr};

/// The spans of one iteration: `megatron.train.iteration` and, around the
/// first iteration this process executes, `megatron.train.first_iteration`.
/// Dropping it ends both, the iteration first.
#[must_use = "the iteration span ends when this is dropped: bind it with `let _step = ...`"]
#[derive(Debug)]
pub struct IterationSpans {
    // Declaration order is drop order: the iteration before its wrapper.
    pub(super) span: SpanGuard,
    pub(super) first: Option<SpanGuard>,
}

impl IterationSpans {
    /// The iteration span, for attributes of the caller's own.
    pub fn span(&self) -> &SpanGuard {
        &self.span
    }

    /// Whether this is the first iteration executed by this lifetime (it has
    /// the `megatron.train.first_iteration` wrapper).
    pub fn is_first(&self) -> bool {
        self.first.is_some()
    }

    /// Sets `megatron.skipped` after the step: the optimizer skipped its
    /// update (NaN or inf in the gradients).
    pub fn set_skipped(&self, skipped: bool) {
        self.span.set_attribute(attr::SKIPPED, skipped);
    }
}

/// One span of the taxonomy, gated by its group, current until the guard
/// drops, with `is_goodput_span = true` when the table says so, and the
/// structural marker for [`Sampling::Structural`] spans. For the spans that
/// need nothing more: live startup phases, `megatron.checkpoint.save.state_dict`,
/// the spans inside the iteration, ...
///
/// This function knows no iteration, so it gives no sampling key: open the
/// per-iteration spans outside the iteration span ([`Sampling::Iteration`],
/// such as `megatron.train.log`) with [`MegatronTelemetry::span`](super::MegatronTelemetry::span), which keys
/// them by the loop pass's iteration.
///
/// ```
/// use megatron_telemetry::{lifecycle, taxonomy};
///
/// let _write = lifecycle::span(&taxonomy::CHECKPOINT_SAVE_IO_WRITE, []);
/// ```
#[inline]
pub fn span(def: &'static SpanDef, attributes: impl IntoIterator<Item = KeyValue>) -> SpanGuard {
    if !is_span_group_enabled(def.group) {
        return SpanGuard::noop();
    }
    managed_span(def.group, def.name, marks(def).into_iter().flatten().chain(attributes))
}

/// The attributes that the table implies for `def`: the goodput flag, and
/// the structural marker for [`Sampling::Structural`] spans.
pub(crate) fn marks(def: &SpanDef) -> [Option<KeyValue>; 2] {
    [
        def.goodput.then(|| KeyValue::new(attr::IS_GOODPUT_SPAN, true)),
        (def.sampling == Sampling::Structural).then(|| KeyValue::new(STRUCTURAL_ATTRIBUTE, true)),
    ]
}

/// `megatron.iteration` is an `i64` attribute; an iteration beyond it is
/// clamped (never reached in practice).
pub(crate) fn iteration_value(iteration: u64) -> i64 {
    i64::try_from(iteration).unwrap_or(i64::MAX)
}
