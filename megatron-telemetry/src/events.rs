//! Megatron's span taxonomy for lens-training's event API: the
//! [`EventSpans`] that opens Megatron's spans for the training events, so
//! that a Megatron loop announces each event once
//! ([`lens_training::Training`]) and its span tree stays the taxonomy's:
//!
//! - an iteration: `megatron.train.iteration` (group `step`) with
//!   `megatron.iteration` and the iteration's sampling key, inside
//!   `megatron.train.first_iteration` the first time this lifetime runs one;
//! - a checkpoint save: `megatron.checkpoint.exposed_save` (the save as the
//!   loop sees it; the loop opens `megatron.checkpoint.save` and the rest of
//!   the save's subtree inside it);
//! - a checkpoint load: `megatron.checkpoint.load`; an evaluation:
//!   `megatron.evaluate`;
//! - an asynchronous save's finalize, startup and shutdown: no span here
//!   (the lifecycle opens `megatron.checkpoint.save.finalize` every
//!   iteration, the startup trace and `megatron.checkpoint.exit_finalize`).
//!
//! Each span also carries lens-training's `dl.training.event` stamp, so
//! that `lens analyze` reads it as any program's. Build it with
//! [`crate::lifecycle::MegatronTelemetry::training`].

use std::sync::atomic::{AtomicBool, Ordering};

use lens_fallbacks::{KeyValue, SAMPLING_KEY_ATTRIBUTE, SpanGuard, lazy_attributes, managed_span, sampling_key};
use lens_training::events::{Event, EventSpan, EventSpans};

use crate::lifecycle::spans::{iteration_value, marks, span};
use crate::taxonomy::{self, SpanDef, attr};

/// Megatron's spans for the training events (see the module docs).
#[derive(Debug)]
pub struct MegatronEventSpans {
    run_id: String,
    restart_attempt: u32,
    first_iteration_done: AtomicBool,
}

impl MegatronEventSpans {
    /// The spans of the run `run_id` in restart attempt `restart_attempt`
    /// (the iteration spans' sampling keys, SPEC A4).
    pub fn new(run_id: impl Into<String>, restart_attempt: u32) -> MegatronEventSpans {
        MegatronEventSpans { run_id: run_id.into(), restart_attempt, first_iteration_done: AtomicBool::new(false) }
    }

    /// An iteration span of `def` with the iteration's sampling key, its
    /// `megatron.iteration` and the taxonomy's marks.
    fn keyed(&self, def: &'static SpanDef, iteration: u64, stamp: Option<KeyValue>) -> SpanGuard {
        let attributes = lazy_attributes(move || {
            let key = sampling_key(&self.run_id, self.restart_attempt, iteration);
            [
                Some(KeyValue::new(SAMPLING_KEY_ATTRIBUTE, key)),
                Some(KeyValue::new(attr::ITERATION, iteration_value(iteration))),
                marks(def)[0].clone(),
                stamp,
            ]
            .into_iter()
            .flatten()
        });
        managed_span(def.group, def.name, attributes)
    }
}

impl EventSpans for MegatronEventSpans {
    fn open(&self, event: Event, iteration: u64, stamp: KeyValue) -> EventSpan {
        match event {
            Event::Iteration => {
                let first = !self.first_iteration_done.swap(true, Ordering::Relaxed);
                let outer = if first {
                    self.keyed(&taxonomy::TRAIN_FIRST_ITERATION, iteration, None)
                } else {
                    SpanGuard::noop()
                };
                let inner = self.keyed(&taxonomy::TRAIN_ITERATION, iteration, Some(stamp));
                EventSpan::nested(outer, inner)
            }
            Event::CheckpointSave => EventSpan::new(span(
                &taxonomy::CHECKPOINT_EXPOSED_SAVE,
                [KeyValue::new(attr::ITERATION, iteration_value(iteration)), stamp],
            )),
            Event::CheckpointLoad => EventSpan::new(span(&taxonomy::CHECKPOINT_LOAD, [stamp])),
            Event::Evaluation => EventSpan::new(span(&taxonomy::EVALUATE, [stamp])),
            Event::CheckpointFinalize | Event::Startup | Event::Shutdown => EventSpan::noop(),
        }
    }
}
