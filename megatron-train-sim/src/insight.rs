//! Per-rank insight (docs/ranks.md): this rank's training diagnosis
//! (lens-training's event API, with Megatron's span taxonomy: phases, the
//! `dl.training.*` per-rank counters, the hang watchdog, goodput and MFU)
//! and the injected straggler delays, hangs and kills, in one place for the
//! training loop. The diagnosis belongs to lens-training; this module only
//! wires it to the simulator's rank.

use std::sync::Arc;

use lens_training::phases::{Phase, Phases};
use lens_training::{RankCoordinates, Training, TrainingOptions};

use crate::config::Coords;
use crate::faults::{Delays, Hang, Kill, Straggler};
use crate::telemetry::Telemetry;

/// One rank's training diagnosis and injected delays.
#[derive(Debug)]
pub(crate) struct RankInsight {
    training: Arc<Training>,
    phases: Phases,
    delays: Delays,
    hangs: Vec<Hang>,
    kills: Vec<Kill>,
    rank: u32,
    /// The iteration running (1-based).
    iteration: u64,
}

/// What the diagnosis needs to know about the rank's job.
pub(crate) struct InsightSetup<'a> {
    /// The injected stragglers (`--inject-straggler`).
    pub(crate) stragglers: &'a [Straggler],
    /// The injected hangs (`--inject-hang`).
    pub(crate) hangs: &'a [Hang],
    /// The injected kills (`--inject-kill`).
    pub(crate) kills: &'a [Kill],
    /// The global rank, its local rank and its coordinates.
    pub(crate) rank: u32,
    pub(crate) local_rank: u32,
    pub(crate) coords: Coords,
    /// The world size (MFU's FLOP count is the job's).
    pub(crate) world: u32,
    /// The model FLOPs of one iteration, the whole job's (the simulator's
    /// FLOP count: `model::training_flops_per_token` times the tokens).
    pub(crate) flops_per_iteration: f64,
    /// `--save`: rank 0 writes the progress record there.
    pub(crate) save: Option<&'a std::path::Path>,
    /// The peak MFU divides by (`crate::telemetry::MfuPeak`); `None`: no MFU.
    pub(crate) peak_tflops: Option<f64>,
    /// `--inject-control-delay`: the iteration from which this rank takes
    /// what its control thread read.
    pub(crate) control_delay: Option<u64>,
}

impl RankInsight {
    /// The insight of one rank: the diagnosis records while telemetry is
    /// enabled, rank metrics where they are exported.
    pub(crate) fn new(telemetry: &Telemetry, setup: InsightSetup<'_>) -> RankInsight {
        let InsightSetup {
            stragglers,
            hangs,
            kills,
            rank,
            local_rank,
            coords,
            world,
            flops_per_iteration,
            save,
            peak_tflops,
            control_delay,
        } = setup;
        let coordinates = RankCoordinates { rank, local_rank, pipeline: coords.pp, tensor: coords.tp, data: coords.dp };
        let mut options = TrainingOptions::new(coordinates)
            .with_world_size(world)
            .with_peak_tflops(peak_tflops)
            .with_flop_count(move |_iteration: u64| flops_per_iteration);
        if let Some(save) = save {
            options = options.with_checkpoint_dir(save);
        }
        if let Some(iteration) = control_delay {
            options = options.with_control_hold(iteration);
        }
        let training = Arc::new(telemetry.training(options));
        RankInsight {
            phases: training.phases().clone(),
            training,
            delays: Delays::for_rank(stragglers, rank),
            hangs: hangs.iter().filter(|h| h.rank == rank).copied().collect(),
            kills: kills.iter().filter(|k| k.rank == rank).copied().collect(),
            rank,
            iteration: 0,
        }
    }

    /// The training diagnosis (a cheap clone shares it: guards borrow the clone).
    pub(crate) fn training(&self) -> Arc<Training> {
        Arc::clone(&self.training)
    }

    /// Iteration `iteration` (0-based, as the loop counts) starts: where an
    /// injected hang looks.
    pub(crate) fn begin_iteration(&mut self, iteration: u64) {
        self.iteration = iteration + 1;
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
    /// stops for good at an injected hang, or dies at an injected kill.
    pub(crate) fn enter_compute(&self, phase: Phase, inject: bool) {
        self.phases.mark(phase);
        if inject {
            self.delays.apply(phase);
            crate::faults::kill_if_injected(&self.kills, self.rank, phase, self.iteration);
            crate::faults::hang_if_injected(&self.hangs, self.rank, phase, self.iteration);
        }
    }
}
