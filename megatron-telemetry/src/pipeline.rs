//! Pipeline-parallel point-to-point tracing, which Megatron documents but
//! never implemented: the context a send
//! puts inside its message, and the linked receive span made from it.
//!
//! A stage's `megatron.p2p.send_forward` (or `send_backward`) span cannot be
//! the parent of the receiving stage's spans: the two ranks are different
//! processes, often in different traces (each rank roots its own
//! `megatron.train` intervals). So the sender carries its span's context as
//! bytes inside the point-to-point message ([`outgoing_context`]) and the
//! receiver opens `megatron.pp.recv_forward.linked` (or
//! `megatron.pp.recv_backward.linked`) as a child of its own receive span,
//! *linked* to the sender's span ([`linked_receive`]). The context only
//! arrives with the message, so the linked span is started afterwards and
//! backdated to the moment the blocking receive began: its duration is the
//! wait.
//!
//! Both ends are gated by the `communication` span group: with it off the
//! message carries no context (zero bytes) and no linked span is made, at the
//! cost of a relaxed load and a mask test. Bytes that are not a context (a
//! sender with the group off, a foreign sender, damage) give a linked span
//! without a link; nothing here panics or fails the receive.
//!
//! Built on the `lens-fallbacks` facade: without the `otel` feature the
//! context is empty and the span an inert guard, with the same signatures.
//!
//! ```
//! use std::time::SystemTime;
//! use megatron_telemetry::pipeline::{Direction, linked_receive, outgoing_context};
//!
//! // The sending stage, inside its `megatron.p2p.send_forward` span:
//! let context = outgoing_context();
//! let message = [&(context.len() as u32).to_le_bytes()[..], &context, b"activations"].concat();
//!
//! // The receiving stage, inside its `megatron.p2p.recv_forward` span:
//! let waiting = SystemTime::now();
//! // ... block until `message` arrives ...
//! let len = u32::from_le_bytes(message[..4].try_into().unwrap()) as usize;
//! let _linked = linked_receive(Direction::Forward, &message[4..4 + len], waiting, 0, 3);
//! // Telemetry is not set up here: no group is on, the message carried no context.
//! assert!(context.is_empty());
//! ```

use std::time::SystemTime;

use lens_fallbacks::{
    KeyValue, RemoteContext, SpanGuard, SpanLink, decode_context, encode_context, is_span_group_enabled,
};

use crate::groups::MegatronSpanGroup;
use crate::taxonomy::{self, SpanDef, attr};

/// Which way a pipeline message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Activations, from a stage to the next (`recv_forward`).
    Forward,
    /// Gradients, from a stage to the previous (`recv_backward`).
    Backward,
}

impl Direction {
    /// The linked receive span of this direction:
    /// [`taxonomy::PP_RECV_FORWARD_LINKED`] or
    /// [`taxonomy::PP_RECV_BACKWARD_LINKED`].
    ///
    /// ```
    /// use megatron_telemetry::pipeline::Direction;
    ///
    /// assert_eq!(Direction::Backward.linked_span().name, "megatron.pp.recv_backward.linked");
    /// ```
    pub fn linked_span(self) -> &'static SpanDef {
        match self {
            Direction::Forward => &taxonomy::PP_RECV_FORWARD_LINKED,
            Direction::Backward => &taxonomy::PP_RECV_BACKWARD_LINKED,
        }
    }
}

/// The current span's context as bytes, to travel inside a pipeline
/// message; empty when the `communication` group is off (or without
/// `otel`). Call it inside the send span, so that the receiver links to it.
///
/// ```
/// use megatron_telemetry::pipeline::outgoing_context;
///
/// // Without telemetry set up (or with `communication` off) nothing travels.
/// assert!(outgoing_context().is_empty());
/// ```
pub fn outgoing_context() -> Vec<u8> {
    if is_span_group_enabled(MegatronSpanGroup::COMMUNICATION) { encode_context() } else { Vec::new() }
}

/// The linked receive span for a message travelling `direction` from
/// pipeline stage `sender_stage` about `microbatch`, carrying `context` (the
/// bytes of [`outgoing_context`] on the sender). A child of the current
/// span (the receive span), linked to the sender's span, started at
/// `waiting` (when the blocking receive began), with
/// `dl.pipeline_parallel.rank` = `sender_stage` and `dl.microbatch_id` =
/// `microbatch`. It ends when the guard is dropped.
///
/// Bytes that are not a context give the span without a link; with the
/// `communication` group off it is an inert guard.
///
/// ```
/// use std::time::SystemTime;
/// use megatron_telemetry::pipeline::{Direction, linked_receive};
///
/// let span = linked_receive(Direction::Backward, b"not a context", SystemTime::now(), 1, 0);
/// assert!(!span.is_recording()); // telemetry is not set up in this example
/// ```
pub fn linked_receive(
    direction: Direction,
    context: &[u8],
    waiting: SystemTime,
    sender_stage: u32,
    microbatch: u64,
) -> SpanGuard {
    let def = direction.linked_span();
    if !is_span_group_enabled(def.group) {
        return SpanGuard::noop();
    }
    let remote = decode_context(context).unwrap_or_else(RemoteContext::none);
    lens_fallbacks::span(def.group, def.name)
        .links([SpanLink::new(&remote)])
        .start_time(waiting)
        .attributes([
            KeyValue::new(attr::PIPELINE_PARALLEL_RANK, i64::from(sender_stage)),
            KeyValue::new(attr::MICROBATCH_ID, crate::attributes::clamped(microbatch)),
        ])
        .start_unattached()
}
