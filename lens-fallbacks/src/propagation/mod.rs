//! Context propagation: carrying a trace across threads, processes and ranks,
//! defined once for both builds.
//!
//! Without the `otel` feature every item exists with the same signature and
//! there is never a context to carry: [`RemoteContext`] is zero-sized and
//! always "no context", injection writes nothing, extraction and decoding
//! give "no context" (`None`), and a [`WorkerBootstrap`] is always disabled,
//! so a worker of a build without telemetry stays off.
//!
//! - String carriers (W3C `traceparent` / `tracestate` and `baggage`):
//!   [`inject_context`] writes the current context into any map of strings,
//!   [`extract_context`] reads one back as a [`RemoteContext`] (an empty or
//!   invalid carrier gives "no context").
//! - Bytes for a cross-rank broadcast or a point-to-point message:
//!   [`encode_context`] / [`decode_context`]. The encoding is the JSON object
//!   of the string carrier, the format of the original's NCCL transport, so a
//!   Python rank can read it; bad bytes decode to `None`, never a panic.
//! - The environment carrier `TRACEPARENT` / `TRACESTATE` / `BAGGAGE` that CI
//!   systems and launchers set: [`context_from_env`].
//! - A span that links to a remote span (the original's `create_linked_span`)
//!   is a [`crate::span::span`] builder with
//!   [`links`](crate::span::SpanBuilder::links); this module knows nothing of
//!   spans.
//! - [`WorkerBootstrap`]: plain strings that carry the telemetry settings and
//!   the current context into a spawned thread or process.
//!
//! The propagators are W3C Trace Context and W3C Baggage. `OTEL_PROPAGATORS`
//! is parsed by the configuration; honouring a different selection here is
//! left to the setup code (see `propagators`).
//!
//! ```
//! use std::collections::HashMap;
//! use lens_fallbacks::propagation::{decode_context, extract_context};
//!
//! # if cfg!(feature = "otel") {
//! let carrier = HashMap::from([(
//!     "traceparent".to_string(),
//!     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
//! )]);
//! let remote = extract_context(&carrier);
//! assert!(remote.is_valid());
//! assert_eq!(remote.trace_id_hex().as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
//! assert!(!extract_context(&HashMap::<String, String>::new()).is_valid());
//! assert!(decode_context(b"\xff not json").is_none());
//! # }
//! ```

//!
//! One concept per module: [`context`] is the context type, [`w3c`] the W3C
//! codecs (string carrier, bytes, environment), [`worker`] the worker
//! bootstrap. Everything is re-exported here.

pub mod context;
pub mod w3c;
pub mod worker;

pub use context::{AttachedContext, RemoteContext, current_context};
pub use w3c::{
    BAGGAGE, BAGGAGE_ENV, MAX_ENCODED_CONTEXT_BYTES, TRACEPARENT, TRACEPARENT_ENV, TRACESTATE, TRACESTATE_ENV,
    context_from_env, decode_context, encode_context, extract_context, inject_context,
};
pub use worker::{InvalidBootstrap, WorkerBootstrap};
