//! Per-rank insight (docs/ranks.md): this rank's phase clock, its
//! `megatron.rank.*` metrics, its hang watchdog and the injected straggler
//! delays and hangs, in one place for the training loop. The marker API and the metrics belong to
//! megatron-telemetry (`phases`, `rank_metrics`); this module only wires
//! them to the simulator's rank.

use megatron_telemetry::phases::{Phase, Phases};
use megatron_telemetry::rank_metrics::{RankCoordinates, RankMetrics};
use megatron_telemetry::watchdog::HangWatchdog;

use crate::config::Coords;
use crate::faults::{Delays, Hang, Straggler};
use crate::telemetry::Telemetry;

/// One rank's phase clock, rank metrics and injected delays.
#[derive(Debug)]
pub(crate) struct RankInsight {
    phases: Phases,
    metrics: RankMetrics,
    delays: Delays,
    hangs: Vec<Hang>,
    /// The iteration running (1-based).
    iteration: u64,
    watchdog: HangWatchdog,
}

impl RankInsight {
    /// The insight of rank `rank` at `coords`: phases marked while telemetry
    /// is enabled, rank metrics where they are exported.
    pub(crate) fn new(
        telemetry: &Telemetry,
        stragglers: &[Straggler],
        hangs: &[Hang],
        rank: u32,
        coords: Coords,
    ) -> RankInsight {
        let coordinates = RankCoordinates { rank, pipeline: coords.pp, tensor: coords.tp, data: coords.dp };
        let phases = Phases::new(telemetry.is_enabled());
        let watchdog = telemetry.hang_watchdog(&phases, coordinates);
        RankInsight {
            phases,
            metrics: RankMetrics::new(telemetry.lens(), coordinates),
            delays: Delays::for_rank(stragglers, rank),
            hangs: hangs.iter().filter(|h| h.rank == rank).copied().collect(),
            iteration: 0,
            watchdog,
        }
    }

    /// Iteration `iteration` (0-based, as the loop counts) starts.
    pub(crate) fn begin_iteration(&mut self, iteration: u64) {
        self.phases.begin_iteration(iteration);
        self.iteration = iteration + 1;
    }

    /// The training loop ended: the watchdog stops watching.
    pub(crate) fn stop_watchdog(&mut self) {
        self.watchdog.stop();
    }

    /// Replaces the phase clock (unit tests: a recording clock while
    /// telemetry stays off).
    #[cfg(all(test, feature = "otel"))]
    pub(crate) fn set_phases(&mut self, phases: Phases) {
        self.phases = phases;
    }

    /// The phase clock (a cheap clone shares it).
    pub(crate) fn phases(&self) -> &Phases {
        &self.phases
    }

    /// Marks `phase`; on a training step also sleeps the injected delay,
    /// or stops for good at an injected hang.
    pub(crate) fn enter_compute(&self, phase: Phase, inject: bool) {
        self.phases.mark(phase);
        if inject {
            self.delays.apply(phase);
            crate::faults::hang_if_injected(&self.hangs, phase, self.iteration);
        }
    }

    /// A log interval ended: records the rank metrics of the interval.
    pub(crate) fn record_interval(&self) {
        self.metrics.record(&self.phases.take_interval());
    }
}
