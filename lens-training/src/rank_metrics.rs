//! The per-rank metrics: every rank's cumulative phase time
//! ([`PHASE_TIME`], `dl.training.phase_time`, seconds) and completed
//! iterations ([`ITERATIONS`], `dl.training.iterations`), recorded on every
//! rank when `<PREFIX>_RANK_METRICS=1`, whatever the rank strategy.
//!
//! Both are counters, so no export interval loses a log interval: a
//! backend takes `rate()` of each, and a rank's mean time per iteration in
//! a phase over any window is the ratio of the two rates
//! (`docs/ranks.md` has the PromQL). Each series carries `dl.rank`,
//! `dl.local_rank` and the rank's coordinates (`dl.pipeline_parallel.rank`,
//! `dl.tensor_parallel.rank`, `dl.data_parallel.rank`): constant per rank,
//! so they add no cardinality, but a query can group peers by them. Phase
//! time also carries `dl.phase`. Cardinality: world size × 9 series of
//! phase time, plus world size series of iterations.
//!
//! No value crosses between ranks: the comparison happens in the backend or
//! in `lens analyze` (`crate::stragglers`).
//!
//! ```
//! use lens_training::phases::Phases;
//! use lens_training::rank_metrics::{RankCoordinates, RankMetrics};
//!
//! let metrics = RankMetrics::noop(); // rank metrics off
//! let phases = Phases::new(true);
//! metrics.record(&phases.totals());
//! assert!(metrics.is_noop());
//! # let _ = RankCoordinates { rank: 3, local_rank: 1, pipeline: 1, tensor: 0, data: 1 };
//! ```

use std::sync::{Mutex, PoisonError};

use lens_fallbacks::{Counter, KeyValue};

pub use crate::names::{HANG_SUSPECTED, ITERATIONS, PHASE_ATTRIBUTE, PHASE_TIME, RANK_METRICS};
use crate::phases::{EXPORTED_PHASES, Phase, PhaseTotals};

/// The attributes of a rank's series: `dl.rank`, `dl.local_rank` and its
/// coordinates.
pub fn rank_attributes(c: RankCoordinates) -> Vec<KeyValue> {
    use lens_fallbacks::semconv;
    vec![
        KeyValue::new(semconv::DL_RANK, i64::from(c.rank)),
        KeyValue::new(semconv::DL_LOCAL_RANK, i64::from(c.local_rank)),
        KeyValue::new(semconv::DL_PIPELINE_PARALLEL_RANK, i64::from(c.pipeline)),
        KeyValue::new(semconv::DL_TENSOR_PARALLEL_RANK, i64::from(c.tensor)),
        KeyValue::new(semconv::DL_DATA_PARALLEL_RANK, i64::from(c.data)),
    ]
}

/// Where a rank sits in the job: the attributes of its series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankCoordinates {
    /// `dl.rank`.
    pub rank: u32,
    /// `dl.local_rank`.
    pub local_rank: u32,
    /// `dl.pipeline_parallel.rank`.
    pub pipeline: u32,
    /// `dl.tensor_parallel.rank`.
    pub tensor: u32,
    /// `dl.data_parallel.rank`.
    pub data: u32,
}

impl RankCoordinates {
    /// A single-process job: every coordinate 0.
    pub const SINGLE: RankCoordinates = RankCoordinates { rank: 0, local_rank: 0, pipeline: 0, tensor: 0, data: 0 };

    /// The coordinates of the process `rank` (the facade's rank context:
    /// `Telemetry::rank`), every parallel coordinate 0 (a job without model
    /// parallelism; set `pipeline`, `tensor` and `data` otherwise).
    pub fn of(rank: lens_fallbacks::RankContext) -> RankCoordinates {
        RankCoordinates { rank: rank.rank, local_rank: rank.local_rank, pipeline: 0, tensor: 0, data: rank.rank }
    }
}

#[derive(Debug)]
struct Instruments {
    phase_time: Counter<f64>,
    iterations: Counter<u64>,
    /// The rank attributes.
    rank: Vec<KeyValue>,
    /// The rank attributes plus `dl.phase`, per exported phase.
    per_phase: Vec<(Phase, Vec<KeyValue>)>,
    /// The totals recorded so far (the counters add the difference).
    recorded: Mutex<PhaseTotals>,
}

/// The per-rank instruments, created once at setup (see the module docs),
/// on lens's metric handles: one definition for both builds (without the
/// facade's `otel` the meter is a no-op and so is every handle).
#[derive(Debug)]
pub struct RankMetrics {
    instruments: Option<Box<Instruments>>,
    /// Paused by the control file: the counters stop following.
    paused: std::sync::atomic::AtomicBool,
}

impl RankMetrics {
    /// The instruments on `telemetry`'s meter when it exports rank metrics
    /// ([`lens_fallbacks::Telemetry::exports_rank_metrics`]), a no-op handle
    /// otherwise.
    pub fn new(telemetry: &lens_fallbacks::Telemetry, coordinates: RankCoordinates) -> RankMetrics {
        if !telemetry.exports_rank_metrics() {
            return RankMetrics::noop();
        }
        let meter = telemetry.meter();
        let rank = rank_attributes(coordinates);
        let per_phase = EXPORTED_PHASES
            .iter()
            .map(|&phase| {
                let mut attributes = rank.clone();
                attributes.push(KeyValue::new(PHASE_ATTRIBUTE, phase.as_str()));
                (phase, attributes)
            })
            .collect();
        let mut phase_time = meter.f64_counter(PHASE_TIME.name).with_description(PHASE_TIME.description);
        if let Some(unit) = PHASE_TIME.unit {
            phase_time = phase_time.with_unit(unit);
        }
        let instruments = Instruments {
            phase_time: phase_time.build(),
            iterations: meter.u64_counter(ITERATIONS.name).with_description(ITERATIONS.description).build(),
            rank,
            per_phase,
            recorded: Mutex::new(PhaseTotals::default()),
        };
        RankMetrics { instruments: Some(Box::new(instruments)), paused: std::sync::atomic::AtomicBool::new(false) }
    }

    /// A handle that records nothing.
    pub const fn noop() -> RankMetrics {
        RankMetrics { instruments: None, paused: std::sync::atomic::AtomicBool::new(false) }
    }

    /// Pauses (`true`) or resumes (`false`) the counters (the control
    /// file's `rank_metrics`): while paused they stay where they are, and a
    /// resume counts from the resume on (the paused time is not counted).
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this handle records nothing.
    pub fn is_noop(&self) -> bool {
        self.instruments.is_none()
    }

    /// Brings the counters up to `totals` (a clock's cumulative totals,
    /// [`crate::phases::Phases::totals`]): adds what was spent in each
    /// exported phase and the iterations completed since the last call.
    /// Both counters move together, so their rates stay comparable.
    ///
    /// Safe from several threads (the training thread, the hang watchdog):
    /// totals read earlier than the last recorded add nothing, and the
    /// recorded totals never go back, so nothing is counted twice.
    pub fn record(&self, totals: &PhaseTotals) {
        let Some(i) = &self.instruments else { return };
        let mut recorded = i.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        let delta = totals.since(&recorded);
        *recorded = recorded.max_each(totals);
        // Read under the lock, so that a pause or a resume falls between
        // two records, never inside one.
        let paused = self.paused.load(std::sync::atomic::Ordering::Relaxed);
        drop(recorded);
        if paused {
            return;
        }
        // Every phase's series, zero or not, so that all of a rank's series
        // start together and the ratio of their rates covers one window.
        for (phase, attributes) in &i.per_phase {
            i.phase_time.add(delta.seconds(*phase), attributes);
        }
        i.iterations.add(delta.iterations, &i.rank);
    }
}
