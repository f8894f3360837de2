//! The simulator's goodput accounting (issue #13): a thin driver of
//! megatron-telemetry's [`Accountant`] at the loop's lifecycle points, the
//! progress record beside the checkpoints, and the goodput and MFU gauges.
//! Like [`crate::telemetry`] it defines no metric name of its own.
//!
//! - Times are seconds since the attempt's launch stamp (the launch-script
//!   start when the launch phases fold into the startup trace, else the
//!   program start: where `megatron.startup` starts), read from one
//!   monotonic clock: one clock read per event.
//! - A save keeps what was pending when it began only once its checkpoint
//!   is durable ([`Goodput::checkpoint_durable`]): a synchronous save that
//!   returned well, an asynchronous one at its finalize (the tracker
//!   written). A save that fails keeps nothing.
//! - Global rank 0 (every layout has one) writes the progress record
//!   `goodput.json` in `--save`, atomically, at every log interval, when a
//!   checkpoint becomes durable and at the normal end. On `--load`, every rank reads the
//!   record from the load directory and continues the run's totals from it,
//!   the dead attempt's pending time charged as lost (the directory, not the
//!   run id, identifies the run: a resumed job may get a new id); a record
//!   that cannot be read or is not one is a warning, and the totals start
//!   fresh: telemetry never stops a job.
//! - The export rank records the gauges at every log interval and at the
//!   normal end.
//!
//! On whenever telemetry is on; with telemetry off nothing is counted,
//! written or reported.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

pub(crate) use megatron_telemetry::goodput::Phase;
use megatron_telemetry::goodput::{Accountant, Coverage, GoodputMetrics, GoodputTotals, ProgressRecord};
use megatron_telemetry::lifecycle::StartupTimestamps;
use megatron_telemetry::mfu;

use crate::output;

/// One attempt's goodput state on one rank.
pub(crate) struct Goodput {
    state: Option<State>,
}

struct State {
    accountant: Accountant,
    origin: Instant,
    /// Seconds from the launch stamp to `origin`.
    offset: f64,
    run_id: String,
    /// Where this rank writes the progress record (global rank 0 with `--save`).
    record_dir: Option<PathBuf>,
    metrics: GoodputMetrics,
    peak_tflops: Option<f64>,
    iteration: u64,
    checkpoint_iteration: Option<u64>,
    /// Saves begun and not yet durable: their iteration and what they cover
    /// (a failed one until a later checkpoint is durable).
    in_flight: Vec<(u64, Coverage)>,
    last_mfu: Option<f64>,
    write_warned: std::sync::atomic::AtomicBool,
}

/// What [`Goodput::new`] needs to know.
pub(crate) struct GoodputSetup<'a> {
    /// Whether telemetry is on (goodput is on exactly then).
    pub(crate) enabled: bool,
    /// The run id (written into the record, for people).
    pub(crate) run_id: String,
    /// The startup stamps (the launch stamp).
    pub(crate) stamps: &'a StartupTimestamps,
    /// This rank's global rank.
    pub(crate) rank: u32,
    /// `--save`.
    pub(crate) save: Option<&'a Path>,
    /// The gauges (a no-op handle except on the export rank).
    pub(crate) metrics: GoodputMetrics,
    /// The peak MFU divides by (`crate::telemetry::MfuPeak`); `None`: no MFU.
    pub(crate) peak_tflops: Option<f64>,
}

impl Goodput {
    /// Nothing counted (telemetry off).
    pub(crate) const fn off() -> Goodput {
        Goodput { state: None }
    }

    /// The attempt's accounting, starting at its launch stamp.
    pub(crate) fn new(setup: GoodputSetup<'_>) -> Goodput {
        if !setup.enabled {
            return Goodput::off();
        }
        let stamps = setup.stamps;
        let launch = if stamps.launch_folds() { stamps.launch_script_start } else { stamps.program_start };
        let offset = launch
            .and_then(|launch| SystemTime::now().duration_since(launch).ok())
            .map_or(0.0, |elapsed| elapsed.as_secs_f64());
        Goodput {
            state: Some(State {
                accountant: Accountant::new(GoodputTotals::default()),
                origin: Instant::now(),
                offset,
                run_id: setup.run_id,
                record_dir: setup.save.filter(|_| setup.rank == 0).map(Path::to_path_buf),
                metrics: setup.metrics,
                peak_tflops: setup.peak_tflops,
                iteration: 0,
                checkpoint_iteration: None,
                in_flight: Vec::new(),
                last_mfu: None,
                write_warned: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    fn with(&mut self, body: impl FnOnce(&mut State, f64)) {
        if let Some(state) = &mut self.state {
            let now = state.offset + state.origin.elapsed().as_secs_f64();
            body(state, now);
        }
    }

    /// `phase` begins.
    pub(crate) fn begin(&mut self, phase: Phase) {
        self.with(|s, now| s.accountant.begin(phase, now));
    }

    /// `phase` ends.
    pub(crate) fn end(&mut self, phase: Phase) {
        self.with(|s, now| s.accountant.end(phase, now));
    }

    /// The run resumes from the checkpoint of `iteration` in `load`: the
    /// totals continue from the progress record there, if any.
    pub(crate) fn resume(&mut self, load: &Path, iteration: u64) {
        self.with(|s, _| {
            s.iteration = iteration;
            s.checkpoint_iteration = Some(iteration);
            match ProgressRecord::read(load) {
                Ok(None) => {}
                Ok(Some(record)) => {
                    if record.checkpoint_iteration != Some(iteration) {
                        warn(&format!(
                            "goodput: the progress record in {} knows the checkpoint of iteration {}, the run \
                             resumes from iteration {iteration}; lost progress is counted from the record's",
                            load.display(),
                            record.checkpoint_iteration.map_or_else(|| "none".to_string(), |i| i.to_string())
                        ));
                    }
                    s.accountant.continue_from(record.totals.resume());
                }
                Err(error) => warn(&format!("goodput: {error}; the goodput totals start fresh")),
            }
        });
    }

    /// The training loop starts (startup ends).
    pub(crate) fn training_started(&mut self) {
        self.with(|s, now| s.accountant.training_started(now));
    }

    /// Iteration `iteration` (absolute, 1-based) completed.
    #[inline]
    pub(crate) fn iteration_completed(&mut self, iteration: u64) {
        self.with(|s, now| {
            s.accountant.iteration_completed(now);
            s.iteration = iteration;
        });
    }

    /// A log interval: the gauges on the export rank (with the MFU from the
    /// interval's model TFLOP/s per GPU) and the progress record.
    pub(crate) fn log_interval(&mut self, model_tflops_per_gpu: f64) {
        self.with(|s, now| {
            s.last_mfu = mfu::mfu(Some(model_tflops_per_gpu), s.peak_tflops);
            s.publish(now);
        });
    }

    /// The save of `iteration` begins (its blocking part): it covers what
    /// is pending now, once durable.
    pub(crate) fn save_begins(&mut self, iteration: u64) {
        self.with(|s, now| {
            s.accountant.begin(Phase::CheckpointSave, now);
            let coverage = s.accountant.coverage(now);
            s.in_flight.retain(|(i, _)| *i != iteration);
            s.in_flight.push((iteration, coverage));
        });
    }

    /// The checkpoint of `iteration` is durable (its save succeeded; for an
    /// asynchronous save, its finalize wrote the tracker): what its save
    /// covered is kept, and the record says so.
    pub(crate) fn checkpoint_durable(&mut self, iteration: u64) {
        self.with(|s, now| {
            let Some(at) = s.in_flight.iter().position(|(i, _)| *i == iteration) else { return };
            let (_, coverage) = s.in_flight.remove(at);
            // Older saves that never became durable (they failed) are
            // superseded: what they covered, this one covers too.
            s.in_flight.retain(|(i, _)| *i > iteration);
            s.accountant.checkpoint_durable(coverage, now);
            s.checkpoint_iteration = Some(iteration);
            s.write_record(now);
        });
    }

    /// The attempt ended normally: what is pending is kept.
    pub(crate) fn finish(&mut self) {
        self.with(|s, now| {
            s.accountant.finish(now);
            s.publish(now);
        });
    }

    /// The run's totals now (`None` with telemetry off).
    pub(crate) fn totals(&self) -> Option<GoodputTotals> {
        let s = self.state.as_ref()?;
        Some(s.accountant.snapshot(s.offset + s.origin.elapsed().as_secs_f64()))
    }

    /// The latest MFU (`None` when the peak is unknown or before the first log interval).
    pub(crate) fn mfu(&self) -> Option<f64> {
        self.state.as_ref()?.last_mfu
    }
}

impl State {
    fn publish(&mut self, now: f64) {
        let totals = self.accountant.snapshot(now);
        self.metrics.record(&totals, self.last_mfu);
        self.write_record(now);
    }

    fn write_record(&self, now: f64) {
        let Some(dir) = &self.record_dir else { return };
        let record = ProgressRecord {
            run_id: self.run_id.clone(),
            iteration: self.iteration,
            checkpoint_iteration: self.checkpoint_iteration,
            totals: self.accountant.snapshot(now),
        };
        if let Err(error) = std::fs::create_dir_all(dir)
            .map_err(|e| e.to_string())
            .and_then(|()| record.write_atomic(dir).map_err(|e| e.to_string()))
            && !self.write_warned.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            warn(&format!("goodput: could not write the progress record (warned once): {error}"));
        }
    }
}

fn warn(message: &str) {
    output::note(&format_args!("warning: {message}"));
}
