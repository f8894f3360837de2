//! Typed setters for the attributes of the span taxonomy
//! ([`crate::taxonomy::attr`]) that are only known once the span is open:
//! whether the optimizer step updated the weights, how many microbatches a
//! forward-backward pass ran, the sniff-test tag, the async-save call
//! indices. Each takes the span's guard and a Rust value and writes the key
//! with the type and format Megatron's exporters write, so that a port does
//! not pick the key or the type by hand.
//!
//! Counts are `u64` in Rust and `i64` in OpenTelemetry: beyond `i64::MAX`
//! they are clamped (never reached in practice). On an inert guard (group
//! off, sampled out, no `otel` feature) every setter does nothing.
//!
//! ```
//! use lens_fallbacks::SpanGuard;
//! use megatron_telemetry::attributes;
//!
//! let span = SpanGuard::noop(); // a real run sets them on the lifecycle's spans
//! attributes::set_update_successful(&span, true);
//! attributes::set_num_microbatches(&span, 4);
//! attributes::set_sniff_test_tag(&span, Some(20)); // "iteration      20"
//! ```

use lens_fallbacks::SpanGuard;

use crate::taxonomy::attr;

/// A count as an attribute integer (`i64`), clamped.
pub(crate) fn clamped(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The `megatron.sniff_test.tag` value: `before training`, or `iteration`
/// and the number right-aligned in seven columns (Megatron's format).
///
/// ```
/// use megatron_telemetry::attributes::sniff_test_tag;
///
/// assert_eq!(sniff_test_tag(None), "before training");
/// assert_eq!(sniff_test_tag(Some(20)), "iteration      20");
/// ```
pub fn sniff_test_tag(iteration: Option<u64>) -> String {
    match iteration {
        None => "before training".to_string(),
        Some(n) => format!("iteration {n:7}"),
    }
}

/// Sets `megatron.update_successful` (a bool) on an optimizer span.
///
/// ```
/// # let span = lens_fallbacks::SpanGuard::noop();
/// megatron_telemetry::attributes::set_update_successful(&span, false); // a skipped step
/// ```
pub fn set_update_successful(span: &SpanGuard, successful: bool) {
    span.set_attribute(attr::UPDATE_SUCCESSFUL, successful);
}

/// Sets `num_microbatches` (an int) on a forward-backward span.
///
/// ```
/// # let span = lens_fallbacks::SpanGuard::noop();
/// megatron_telemetry::attributes::set_num_microbatches(&span, 8);
/// ```
pub fn set_num_microbatches(span: &SpanGuard, microbatches: u64) {
    span.set_attribute(attr::NUM_MICROBATCHES, clamped(microbatches));
}

/// Sets `megatron.eval_iters` (an int) on an evaluation span.
///
/// ```
/// # let span = lens_fallbacks::SpanGuard::noop();
/// megatron_telemetry::attributes::set_eval_iters(&span, 10);
/// ```
pub fn set_eval_iters(span: &SpanGuard, steps: u64) {
    span.set_attribute(attr::EVAL_ITERS, clamped(steps));
}

/// Sets `megatron.sniff_test.tag` ([`sniff_test_tag`]) on a sniff-test span:
/// `None` for the check before training, `Some(iteration)` for a later one.
///
/// ```
/// # let span = lens_fallbacks::SpanGuard::noop();
/// megatron_telemetry::attributes::set_sniff_test_tag(&span, None);
/// ```
pub fn set_sniff_test_tag(span: &SpanGuard, iteration: Option<u64>) {
    span.set_attribute(attr::SNIFF_TEST_TAG, sniff_test_tag(iteration));
}

/// Sets `nvrx.call_idx` (an int) on the span that dispatched an async save.
///
/// ```
/// # let span = lens_fallbacks::SpanGuard::noop();
/// megatron_telemetry::attributes::set_call_index(&span, 3);
/// ```
pub fn set_call_index(span: &SpanGuard, call_index: u64) {
    span.set_attribute(attr::NVRX_CALL_IDX, clamped(call_index));
}

/// Sets `nvrx.call_idx` (a list of ints) on a finalize span, when something
/// was finalized (an empty list sets nothing).
///
/// ```
/// # let span = lens_fallbacks::SpanGuard::noop();
/// megatron_telemetry::attributes::set_call_indices(&span, &[3, 4]);
/// megatron_telemetry::attributes::set_call_indices(&span, &[]); // nothing finalized: no attribute
/// ```
pub fn set_call_indices(span: &SpanGuard, call_indices: &[u64]) {
    if !call_indices.is_empty() {
        let list: Vec<i64> = call_indices.iter().map(|&i| clamped(i)).collect();
        span.set_attribute(attr::NVRX_CALL_IDX, list);
    }
}
