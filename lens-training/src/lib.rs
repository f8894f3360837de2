//! Training diagnosis for any training loop, on the `lens-fallbacks`
//! facade: where each rank spends its iterations, which rank is the
//! straggler, which rank hangs and where, how much of the wall clock was
//! productive across restarts, and the model FLOPs utilisation.
//!
//! A program uses it through a few calls, one per training event
//! ([`events::Training`]: an iteration, a checkpoint save that becomes
//! durable, a load, an evaluation, startup and the normal end); each call
//! opens the event's span, marks the phase and informs the goodput
//! accountant together. The parts, each usable alone:
//!
//! - [`phases`]: the phase clock (one model of the phases of an iteration);
//! - [`rank_metrics`]: the per-rank counters `dl.training.phase_time` and
//!   `dl.training.iterations` (`<PREFIX>_RANK_METRICS=1`);
//! - [`stragglers`]: the straggler rule, on a file export's metric points;
//! - [`watchdog`]: the hang watchdog and its flight recorder (the stuck
//!   thread's own open spans, `dl.training.hang_suspected`);
//! - [`goodput`]: the accountant, its progress record and gauges
//!   (`dl.goodput.time`, `dl.goodput.ratio`);
//! - [`goodput_view`]: goodput rebuilt from a file export's spans;
//! - [`mfu`]: the table of peaks and MFU from the program's FLOP count
//!   (`dl.training.mfu`);
//! - [`names`]: every name above, as data.
//!
//! lens-training has no `otel` feature: it records exactly when the
//! application's facade does (its build script reads the facade's), and
//! with the facade's `otel` off every call is a no-op.

mod control;
pub mod events;
pub mod goodput;
pub mod goodput_view;
pub mod mfu;
pub mod names;
pub mod phases;
pub mod rank_metrics;
mod record_writer;
pub mod stragglers;
pub mod watchdog;

pub use events::{Event, EventSpans, IterationGuard, PendingCheckpoint, SpanNames, Training, TrainingOptions};
pub use mfu::FlopCount;
pub use phases::Phase;
pub use rank_metrics::RankCoordinates;

/// The Rust examples of `docs/goodput.md`, compiled and run as doc tests
/// (in both modes: with the facade's `otel` off the event API is a no-op).
#[cfg(doctest)]
#[doc = include_str!("../../docs/goodput.md")]
pub struct GoodputDocExamples;
