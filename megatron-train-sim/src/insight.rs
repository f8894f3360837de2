//! Per-rank insight (docs/ranks.md): this rank's phase clock, its
//! `megatron.rank.*` metrics and the injected straggler delays, in one place
//! for the training loop. The marker API and the metrics belong to
//! megatron-telemetry (`phases`, `rank_metrics`); this module only wires
//! them to the simulator's rank.

use megatron_telemetry::phases::{Phase, Phases};
use megatron_telemetry::rank_metrics::{RankCoordinates, RankMetrics};

use crate::cli::Coords;
use crate::faults::{Delays, Straggler};
use crate::telemetry::Telemetry;

/// One rank's phase clock, rank metrics and injected delays.
#[derive(Debug)]
pub(crate) struct RankInsight {
    phases: Phases,
    metrics: RankMetrics,
    delays: Delays,
}

impl RankInsight {
    /// The insight of rank `rank` at `coords`: phases marked while telemetry
    /// is enabled, rank metrics where they are exported.
    pub(crate) fn new(telemetry: &Telemetry, stragglers: &[Straggler], rank: u32, coords: Coords) -> RankInsight {
        let coordinates = RankCoordinates { rank, pipeline: coords.pp, tensor: coords.tp, data: coords.dp };
        RankInsight {
            phases: Phases::new(telemetry.is_enabled()),
            metrics: RankMetrics::new(telemetry.lens(), coordinates),
            delays: Delays::for_rank(stragglers, rank),
        }
    }

    /// The phase clock (a cheap clone shares it).
    pub(crate) fn phases(&self) -> &Phases {
        &self.phases
    }

    /// Marks `phase`; on a training step also sleeps the injected delay.
    pub(crate) fn enter_compute(&self, phase: Phase, inject: bool) {
        self.phases.mark(phase);
        if inject {
            self.delays.apply(phase);
        }
    }

    /// A log interval ended: records the rank metrics of the interval.
    pub(crate) fn record_interval(&self) {
        self.metrics.record(&self.phases.take_interval());
    }
}
