//! The per-rank metrics (`megatron.rank.*`): every rank's phase
//! durations, step time and progress, recorded on every rank when
//! `<PREFIX>_RANK_METRICS=1`, whatever the rank strategy.
//!
//! Each series carries `dl.rank` and the rank's coordinates
//! (`dl.pipeline_parallel.rank`, `dl.tensor_parallel.rank`,
//! `dl.data_parallel.rank`): constant per rank, so they add no cardinality,
//! but a query can group peers by them. Phase durations also carry
//! `megatron.phase`. Cardinality: world size × 9 series of
//! [`PHASE_DURATION_MS`], plus world size series each of the other two.
//!
//! No value crosses between ranks: the comparison happens in the backend
//! (PromQL in `docs/ranks.md`) or in the file viewer (`crate::stragglers`).
//!
//! ```
//! use megatron_telemetry::phases::Phases;
//! use megatron_telemetry::rank_metrics::{RankCoordinates, RankMetrics};
//!
//! let metrics = RankMetrics::noop(); // rank metrics off
//! let phases = Phases::new(true);
//! metrics.record(&phases.take_interval());
//! assert!(metrics.is_noop());
//! # let _ = RankCoordinates { rank: 3, pipeline: 1, tensor: 0, data: 1 };
//! ```

use crate::metrics::{InstrumentKind, MetricDef};
use lens_fallbacks::{Gauge, KeyValue};

use crate::phases::{EXPORTED_PHASES, IntervalPhases, Phase};

/// The attribute naming the phase of a [`PHASE_DURATION_MS`] point.
pub const PHASE_ATTRIBUTE: &str = "megatron.phase";

/// `megatron.rank.phase_duration_ms`: gauge, unit `ms`.
pub const PHASE_DURATION_MS: MetricDef = MetricDef {
    name: "megatron.rank.phase_duration_ms",
    kind: InstrumentKind::Gauge,
    unit: Some("ms"),
    value_unit: Some("ms"),
    description: "Mean time per iteration this rank spent in one phase over the last log interval (attributes dl.rank, megatron.phase and the rank's parallel coordinates).",
    prometheus_name: "megatron_rank_phase_duration_ms_milliseconds",
};

/// `megatron.rank.step_duration_ms`: gauge, unit `ms`.
pub const STEP_DURATION_MS: MetricDef = MetricDef {
    name: "megatron.rank.step_duration_ms",
    kind: InstrumentKind::Gauge,
    unit: Some("ms"),
    value_unit: Some("ms"),
    description: "Mean step time of this rank over the last log interval.",
    prometheus_name: "megatron_rank_step_duration_ms_milliseconds",
};

/// `megatron.rank.iteration`: gauge, the last completed iteration.
pub const ITERATION: MetricDef = MetricDef {
    name: "megatron.rank.iteration",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: None,
    description: "The last iteration this rank completed.",
    prometheus_name: "megatron_rank_iteration",
};

/// `megatron.rank.hang_suspected`: gauge, 1 while this rank's hang watchdog
/// suspects a hang, 0 otherwise (recorded by `crate::watchdog`, on every
/// rank that exports metrics, rank metrics on or off).
pub const HANG_SUSPECTED: MetricDef = MetricDef {
    name: "megatron.rank.hang_suspected",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: None,
    description: "1 while this rank's hang watchdog sees no completed iteration for longer than its timeout, 0 otherwise (rank attributes only; recorded where the rank exports metrics).",
    prometheus_name: "megatron_rank_hang_suspected",
};

/// The per-rank metrics, in docs order.
pub const RANK_METRICS: &[MetricDef] = &[PHASE_DURATION_MS, STEP_DURATION_MS, ITERATION, HANG_SUSPECTED];

/// The attributes of a rank's series: `dl.rank` and its coordinates.
pub(crate) fn rank_attributes(c: RankCoordinates) -> Vec<KeyValue> {
    use lens_fallbacks::semconv;
    vec![
        KeyValue::new(semconv::DL_RANK, i64::from(c.rank)),
        KeyValue::new(semconv::DL_PIPELINE_PARALLEL_RANK, i64::from(c.pipeline)),
        KeyValue::new(semconv::DL_TENSOR_PARALLEL_RANK, i64::from(c.tensor)),
        KeyValue::new(semconv::DL_DATA_PARALLEL_RANK, i64::from(c.data)),
    ]
}

/// Where a rank sits in the job: the attributes of its series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankCoordinates {
    /// `dl.rank`.
    pub rank: u32,
    /// `dl.pipeline_parallel.rank`.
    pub pipeline: u32,
    /// `dl.tensor_parallel.rank`.
    pub tensor: u32,
    /// `dl.data_parallel.rank`.
    pub data: u32,
}

#[derive(Debug)]
struct Instruments {
    phase_duration: Gauge<f64>,
    step_duration: Gauge<f64>,
    iteration: Gauge<u64>,
    /// The rank attributes.
    rank: Vec<KeyValue>,
    /// The rank attributes plus `megatron.phase`, per exported phase.
    per_phase: Vec<(Phase, Vec<KeyValue>)>,
}

/// The per-rank instruments, created once at setup (see the module docs),
/// on lens's metric handles: one definition for both builds (without the
/// `otel` feature the meter is a no-op and so is every handle).
#[derive(Debug)]
pub struct RankMetrics {
    instruments: Option<Box<Instruments>>,
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
        let gauge = |def: &MetricDef| {
            let builder = meter.f64_gauge(def.name).with_description(def.description);
            match def.unit {
                Some(unit) => builder.with_unit(unit).build(),
                None => builder.build(),
            }
        };
        let instruments = Instruments {
            phase_duration: gauge(&PHASE_DURATION_MS),
            step_duration: gauge(&STEP_DURATION_MS),
            iteration: meter.u64_gauge(ITERATION.name).with_description(ITERATION.description).build(),
            rank,
            per_phase,
        };
        RankMetrics { instruments: Some(Box::new(instruments)) }
    }

    /// A handle that records nothing.
    pub const fn noop() -> RankMetrics {
        RankMetrics { instruments: None }
    }

    /// Whether this handle records nothing.
    pub fn is_noop(&self) -> bool {
        self.instruments.is_none()
    }

    /// Records one log interval: the mean per iteration of each exported
    /// phase, the mean step time and the last completed iteration. An
    /// interval without iterations records nothing.
    #[inline]
    pub fn record(&self, interval: &IntervalPhases) {
        if let Some(i) = &self.instruments
            && interval.iterations > 0
        {
            for (phase, attributes) in &i.per_phase {
                i.phase_duration.record(interval.mean_ms(*phase), attributes);
            }
            i.step_duration.record(interval.mean_step_ms(), &i.rank);
            i.iteration.record(interval.last_iteration, &i.rank);
        }
    }
}
