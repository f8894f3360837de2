//! Spans of worker threads: work a rank hands to another thread (Megatron's
//! asynchronous checkpoint save, through NVRx's async calls) is traced
//! inside the span that dispatched it, not as a stray root.
//!
//! The dispatching thread takes its current context as bytes
//! ([`worker_context`]) and moves them into the worker; the worker runs its
//! body with that context current, inside the taxonomy span it is given
//! ([`in_worker_span`]), which carries `nvrx.call_idx` (the async call's
//! index) and `is_goodput_span` when the taxonomy says so. The span is gated
//! by its group like any other; the context is attached whatever the groups,
//! so that spans the body opens still find their parent.
//!
//! Built on the `lens-fallbacks` facade: without the `otel` feature the
//! bytes are empty and the body simply runs.
//!
//! ```
//! use megatron_telemetry::taxonomy;
//! use megatron_telemetry::workers::{in_worker_span, worker_context};
//!
//! // On the training thread, inside `megatron.checkpoint.save`:
//! let context = worker_context();
//! let worker = std::thread::spawn(move || {
//!     in_worker_span(&context, &taxonomy::CHECKPOINT_SAVE_IO_WRITE, 7, || "written")
//! });
//! assert_eq!(worker.join().unwrap(), "written");
//! ```

use lens_fallbacks::{
    KeyValue, RemoteContext, SpanGuard, decode_context, encode_context, is_span_group_enabled, managed_span,
};

use crate::taxonomy::{SpanDef, attr};

/// The current context as bytes, to hand to a worker thread (then to
/// [`in_worker_span`]); empty without `otel`.
///
/// ```
/// use megatron_telemetry::workers::worker_context;
///
/// let bytes: Vec<u8> = worker_context(); // `Send`: move it into the worker
/// # let _ = bytes;
/// ```
pub fn worker_context() -> Vec<u8> {
    encode_context()
}

/// Runs `body` with `context` (from [`worker_context`]) current, inside the
/// span `def` with `nvrx.call_idx` = `call_index` (and `is_goodput_span` when
/// `def` is a goodput span); the span ends when `body` returns. Bytes that
/// are not a context run `body` under no parent; with `def`'s group off
/// there is no span, the context is still attached. Returns what `body`
/// returns.
///
/// ```
/// use megatron_telemetry::taxonomy;
/// use megatron_telemetry::workers::in_worker_span;
///
/// let sum = in_worker_span(b"", &taxonomy::CHECKPOINT_SAVE_IO_WRITE, 0, || 1 + 2);
/// assert_eq!(sum, 3);
/// ```
pub fn in_worker_span<R>(context: &[u8], def: &'static SpanDef, call_index: u64, body: impl FnOnce() -> R) -> R {
    let remote = decode_context(context).unwrap_or_else(RemoteContext::none);
    let _context = remote.attach();
    let _span = if is_span_group_enabled(def.group) {
        managed_span(
            def.group,
            def.name,
            [KeyValue::new(attr::NVRX_CALL_IDX, crate::attributes::clamped(call_index))]
                .into_iter()
                .chain(def.goodput.then(|| KeyValue::new(attr::IS_GOODPUT_SPAN, true))),
        )
    } else {
        SpanGuard::noop()
    };
    body()
}
