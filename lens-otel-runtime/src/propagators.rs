//! Which W3C propagators `OTEL_PROPAGATORS` selected: one process-wide
//! slot, written by setup and shutdown, read by the facade's propagation.

use std::sync::atomic::{AtomicU8, Ordering};

/// Bit of W3C Trace Context in the slot.
const TRACE_CONTEXT_BIT: u8 = 1;
/// Bit of W3C Baggage in the slot.
const BAGGAGE_BIT: u8 = 2;
/// The propagators `OTEL_PROPAGATORS` selected (both until setup says
/// otherwise, and again after shutdown).
static PROPAGATORS: AtomicU8 = AtomicU8::new(TRACE_CONTEXT_BIT | BAGGAGE_BIT);

/// Selects the propagators (`OTEL_PROPAGATORS`): setup calls this with the
/// configured list; `none` selects neither.
pub fn set_propagators(trace_context: bool, baggage: bool) {
    let bits = if trace_context { TRACE_CONTEXT_BIT } else { 0 } | if baggage { BAGGAGE_BIT } else { 0 };
    PROPAGATORS.store(bits, Ordering::Relaxed);
}

/// Whether W3C Trace Context and W3C Baggage are selected, in that order.
pub fn selected() -> (bool, bool) {
    let bits = PROPAGATORS.load(Ordering::Relaxed);
    (bits & TRACE_CONTEXT_BIT != 0, bits & BAGGAGE_BIT != 0)
}
