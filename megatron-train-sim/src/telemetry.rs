//! The simulator's door to the telemetry lifecycle: a thin adapter over
//! megatron-telemetry's lifecycle ([`MegatronTelemetry`]), so that the
//! training loop reads like Megatron's and every structural decision
//! (the startup trace and its backdated phases, the `megatron.train`
//! intervals with their derived trace ids and links, the per-iteration
//! sampling keys, the first-iteration wrapper, metrics on the exporting rank
//! only, SIGTERM/SIGINT on exporting ranks, shutdown) is the lifecycle's.
//!
//! What stays here is what only a multi-process simulator needs: the
//! launcher's side, [`exporter_unconfigured`] (lens's default-destination
//! rule, decided once by the launcher for its ranks) and the environment
//! with that decision ([`SimEnv`]), one run id
//! for every rank ([`RUN_ID_VARIABLE`]), the launcher's startup stamps for
//! its ranks ([`launcher_stamps`]), and the configuration check before any
//! rank starts ([`load_config`], the lifecycle's own loader).
//!
//! What a Megatron port needs as well is megatron-telemetry's, and the loop
//! calls it directly: the pipeline context and linked receive spans
//! (`megatron_telemetry::pipeline`), the async-save worker's span
//! (`megatron_telemetry::workers`) and the typed attribute setters
//! (`megatron_telemetry::attributes`).
//!
//! The simulator defines no span, metric or attribute name of its own:
//! they all come from `megatron_telemetry::taxonomy` and `::metrics`.

use std::time::{SystemTime, UNIX_EPOCH};

use lens_core::config::{CliOverrides, LensConfig};
use lens_core::env::{EnvSource, ProcessEnv};
use lens_core::identity::RankContext;
use lens_fallbacks::{KeyValue, SetupError, ShutdownReport, SpanGuard};
use megatron_telemetry::lifecycle::{self, IterationSpans, LifecycleOptions, MegatronTelemetry};
use megatron_telemetry::resource::{TrainingArgs, training_resource_attributes};
use megatron_telemetry::taxonomy::{self, SpanDef, attr};

pub(crate) use megatron_telemetry::lifecycle::StartupTimestamps;
pub(crate) use megatron_telemetry::metrics::TrainingValues as MetricValues;

/// An open span; it ends when dropped.
pub(crate) type Span = SpanGuard;

/// The spans of one iteration (the iteration, and the first-iteration
/// wrapper the first time).
pub(crate) type Iteration = IterationSpans;

/// The training arguments the resource reports (`dl.*` and `megatron.*`
/// keys, as Megatron's `build_telemetry_resource_attrs`).
pub(crate) type ResourceArgs = TrainingArgs;

/// The variable the launcher sets (to `file`) for its ranks when lens's
/// default-destination rule chooses files, so that every rank follows the
/// launcher's one decision.
pub(crate) const DEFAULT_EXPORTER_VARIABLE: &str = "MEGATRON_OTEL_EXPORTER";

/// The run-id variables that, when set, the launcher leaves alone.
pub(crate) const RUN_ID_VARIABLES: [&str; 4] =
    ["MEGATRON_OTEL_RUN_ID", "NEMO_LENS_RUN_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"];

/// The variable the launcher sets to hand its ranks one run id.
pub(crate) const RUN_ID_VARIABLE: &str = "MEGATRON_OTEL_RUN_ID";

/// Whether lens's default-destination rule (SPEC A22,
/// `lens_core::config::default_destination`, the same for every program)
/// sends telemetry to files: nothing in `env` selects an exporter or an OTLP
/// endpoint, and no collector answers at `localhost:4317`. A configuration
/// with problems selects nothing here (setup reports them).
pub(crate) fn exporter_unconfigured(env: &(impl EnvSource + ?Sized)) -> bool {
    use lens_core::config::{COLLECTOR_PROBE_TIMEOUT, DEFAULT_COLLECTOR, DefaultDestination};
    let Ok(config) = lifecycle::load_config(&CliOverrides::default(), env) else { return false };
    lens_core::config::default_destination(&config, || {
        lens_core::config::collector_answers(DEFAULT_COLLECTOR, COLLECTOR_PROBE_TIMEOUT)
    }) == DefaultDestination::Files
}

/// The process environment, plus `MEGATRON_OTEL_EXPORTER=file` when no
/// exporter is configured (the zero-setup default of the simulator).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SimEnv {
    /// Whether to add [`DEFAULT_EXPORTER_VARIABLE`]`=file` (from
    /// [`exporter_unconfigured`]).
    pub(crate) default_file_exporter: bool,
}

impl EnvSource for SimEnv {
    fn var(&self, key: &str) -> Option<String> {
        if self.default_file_exporter && key == DEFAULT_EXPORTER_VARIABLE {
            return Some("file".to_string());
        }
        ProcessEnv.var(key)
    }
}

/// A fresh run id (12 hex characters), for the launcher.
pub(crate) fn random_run_id() -> String {
    lens_core::identity::random_run_id()
}

/// The run id the configuration resolves to in `env` (`<PREFIX>_RUN_ID`,
/// `NEMO_LENS_RUN_ID`, `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, else random).
pub(crate) fn resolve_run_id(config: &LensConfig, env: &(impl EnvSource + ?Sized)) -> String {
    lens_core::identity::resolve_run_id(&config.run_id, env).value
}

/// Megatron's configuration from `env`, with the command-line overrides,
/// validated (the lifecycle's loader: the launcher checks it before any
/// rank starts; each rank's setup loads it again).
pub(crate) fn load_config(env: &(impl EnvSource + ?Sized), cli: &CliOverrides) -> Result<LensConfig, SetupError> {
    lifecycle::load_config(cli, env)
}

/// Whether `config` turns telemetry on.
pub(crate) fn enabled(config: &LensConfig) -> bool {
    config.telemetry_enabled()
}

/// Where the `file` exporter writes for `run_id`.
pub(crate) fn file_dir(config: &LensConfig, run_id: &str) -> std::path::PathBuf {
    config.file_dir_for(run_id)
}

/// The launcher's startup stamps for its ranks' environment, as a launch
/// script exports them (seconds since the epoch): the launch start
/// (`LENS_LAUNCH_SCRIPT_START_TIME`) and the moment just before the ranks
/// are started (`LENS_LAUNCH_SCRIPT_PRESRUN_TIME`). A stamp already in `env`
/// (an outer launch script's) is kept and not repeated.
pub(crate) fn launcher_stamps(
    env: &(impl EnvSource + ?Sized),
    launch_start: SystemTime,
    presrun: SystemTime,
) -> Vec<(String, String)> {
    [(lifecycle::LAUNCH_SCRIPT_START_ENV, launch_start), (lifecycle::LAUNCH_SCRIPT_PRESRUN_ENV, presrun)]
        .into_iter()
        .filter(|(variable, _)| env.non_empty(variable).is_none())
        .map(|(variable, time)| {
            let seconds = time.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
            (variable.to_string(), format!("{seconds:.6}"))
        })
        .collect()
}

/// What a rank's telemetry is set up with, besides the command line.
pub(crate) struct RankSetup<'a, E> {
    /// The rank.
    pub(crate) rank: &'a RankContext,
    /// The training arguments for the resource.
    pub(crate) args: ResourceArgs,
    /// The environment (the process's, plus the simulator's default
    /// exporter when none is configured).
    pub(crate) env: E,
    /// The startup stamps captured so far.
    pub(crate) stamps: StartupTimestamps,
    /// `--exit-signal-handler`: the lifecycle's handlers only flush and pass
    /// the signal on to the simulator's drain flag.
    pub(crate) graceful_signals: bool,
}

/// One rank's telemetry: the lifecycle.
pub(crate) struct Telemetry {
    lifecycle: MegatronTelemetry,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("lifecycle", &self.lifecycle).finish()
    }
}

impl Telemetry {
    /// Sets telemetry up for this rank (configuration, resource with the
    /// training arguments and, on an exporting rank, the GPU identity;
    /// signal handlers on an exporting rank) and opens the startup trace
    /// with the phases known so far.
    pub(crate) fn setup<E>(cli: &CliOverrides, setup: RankSetup<'_, E>) -> Result<Telemetry, SetupError>
    where
        E: EnvSource + Clone + Send + Sync + 'static,
    {
        let RankSetup { rank, args, env, stamps, graceful_signals } = setup;
        let local_rank = rank.local_rank;
        let (resource_env, gpu_env) = (env.clone(), env.clone());
        let options = LifecycleOptions::new()
            .with_resource(move || training_resource_attributes(&args, &resource_env))
            .with_gpu_identity(move || megatron_telemetry::nvml::gpu_identity(local_rank, &gpu_env))
            .with_startup(stamps)
            .with_model_type("GPT")
            .with_exit_signal_handler(graceful_signals);
        let lifecycle = MegatronTelemetry::setup(cli, rank, env, options)?;
        Ok(Telemetry { lifecycle })
    }

    /// Records the backdated startup phases that `stamps` completes.
    pub(crate) fn record_startup_phases(&mut self, stamps: &StartupTimestamps) {
        self.lifecycle.record_startup_phases(stamps);
    }

    /// Whether telemetry is on in this process.
    pub(crate) fn is_enabled(&self) -> bool {
        self.lifecycle.telemetry().is_enabled()
    }

    /// The facade handle (meter, rank metrics on or off).
    pub(crate) fn lens(&self) -> &lens_fallbacks::Telemetry {
        self.lifecycle.telemetry()
    }

    /// This rank's hang watchdog on `phases` (inert with telemetry off).
    pub(crate) fn hang_watchdog(
        &self,
        phases: &megatron_telemetry::phases::Phases,
        coordinates: megatron_telemetry::rank_metrics::RankCoordinates,
    ) -> megatron_telemetry::watchdog::HangWatchdog {
        self.lifecycle.hang_watchdog(phases, coordinates)
    }

    /// Whether this rank exports.
    pub(crate) fn is_exporting(&self) -> bool {
        self.lifecycle.is_exporting()
    }

    /// This rank's run id.
    pub(crate) fn run_id(&self) -> String {
        self.lifecycle.telemetry().run_id().to_string()
    }

    /// Where this rank's telemetry goes (empty when it exports nothing).
    pub(crate) fn destinations(&self) -> Vec<String> {
        self.lifecycle.telemetry().destinations().to_vec()
    }

    /// Opens the span `def` of the taxonomy with `attributes` (plus the
    /// flags the taxonomy implies), as a child of the current span. Costs a
    /// load and a test when its group is off.
    pub(crate) fn span<const N: usize>(&self, def: &'static SpanDef, attributes: [KeyValue; N]) -> Span {
        self.lifecycle.span(def, attributes)
    }

    /// `megatron.layer.forward` for layer `number` (1-based).
    pub(crate) fn layer_span(&self, number: u32) -> Span {
        self.span(&taxonomy::LAYER_FORWARD, [KeyValue::new(attr::LAYER_NUMBER, i64::from(number))])
    }

    /// `megatron.train.cuda_graph_capture` at `iteration`.
    pub(crate) fn cuda_graph_capture(&self, iteration: u64) -> Span {
        self.span(&taxonomy::TRAIN_CUDA_GRAPH_CAPTURE, [KeyValue::new(attr::ITERATION, as_i64(iteration))])
    }

    /// The training loop starts: startup ends; `save_interval` decides the
    /// intervals.
    pub(crate) fn begin_training_loop(&mut self, save_interval: Option<u64>) {
        self.lifecycle.begin_training_loop(save_interval);
    }

    /// The top of a loop pass that runs `iteration` (absolute): opens a new
    /// interval when one is due.
    pub(crate) fn loop_pass(&mut self, iteration: u64) {
        self.lifecycle.loop_pass(iteration);
    }

    /// The spans of training iteration `iteration`.
    pub(crate) fn iteration(&mut self, iteration: u64) -> Iteration {
        self.lifecycle.iteration(iteration)
    }

    /// `megatron.checkpoint.ft_heartbeat` of `iteration`.
    pub(crate) fn ft_heartbeat(&self, iteration: u64) -> Span {
        self.lifecycle.ft_heartbeat(iteration)
    }

    /// `megatron.checkpoint.save.finalize` of `iteration`.
    pub(crate) fn save_finalize(&self, iteration: u64) -> Span {
        self.lifecycle.save_finalize(iteration)
    }

    /// `megatron.checkpoint.exposed_save` of `iteration`.
    pub(crate) fn exposed_save(&self, iteration: u64) -> Span {
        self.lifecycle.exposed_save(iteration)
    }

    /// `megatron.checkpoint.save` of `iteration`.
    pub(crate) fn checkpoint_save(&self, iteration: u64) -> Span {
        self.lifecycle.checkpoint_save(iteration)
    }

    /// `megatron.evaluate`.
    pub(crate) fn evaluate(&self) -> Span {
        self.lifecycle.evaluate()
    }

    /// `megatron.evaluate.step` of evaluation step `step`.
    pub(crate) fn evaluate_step(&self, step: u64) -> Span {
        self.lifecycle.evaluate_step(step)
    }

    /// The loop exited: the interval ends.
    pub(crate) fn end_training_loop(&mut self) {
        self.lifecycle.end_training_loop();
    }

    /// Records the training metrics of one log interval (the exporting rank
    /// only; elsewhere nothing happens).
    pub(crate) fn record(&self, values: &MetricValues) {
        self.lifecycle.record_training(values);
    }

    /// The goodput and MFU gauges: real on the exporting rank, a no-op elsewhere.
    pub(crate) fn goodput_metrics(&self) -> megatron_telemetry::goodput::GoodputMetrics {
        if self.is_exporting() {
            megatron_telemetry::goodput::GoodputMetrics::new(self.lifecycle.telemetry().meter())
        } else {
            megatron_telemetry::goodput::GoodputMetrics::noop()
        }
    }

    /// For `serve`: ends the startup trace (the server is ready) and gives
    /// the inference server's metrics (no-op handles when not exporting).
    pub(crate) fn serve_ready(&mut self) -> megatron_telemetry::inference::ServerMetrics {
        self.lifecycle.end_startup();
        if self.lifecycle.is_exporting() {
            megatron_telemetry::inference::ServerMetrics::new(self.lifecycle.telemetry().meter())
        } else {
            megatron_telemetry::inference::ServerMetrics::noop()
        }
    }

    /// Ends the structural spans, removes the signal handlers, then shuts
    /// telemetry down (flush, bounded by `MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS`).
    /// Idempotent.
    pub(crate) fn shutdown(&mut self) -> ShutdownReport {
        let timeout = self.lifecycle.shutdown_timeout();
        self.lifecycle.shutdown(timeout)
    }
}

/// Attribute integers are `i64`; counts beyond it are clamped (never reached).
fn as_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lens_core::config::{COLLECTOR_PROBE_TIMEOUT, DEFAULT_COLLECTOR, collector_answers};

    #[test]
    fn the_simulator_follows_lens_s_default_destination_rule() {
        // Any variable that selects a destination, including those the
        // simulator's own list once missed, leaves the choice to it.
        for selecting in [
            ("OTEL_LOGS_EXPORTER", "console"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://c:4317"),
            ("NEMO_LENS_EXPORTER", "console"),
        ] {
            assert!(!exporter_unconfigured(&[("MEGATRON_OTEL_ENABLED", "1"), selecting]), "{selecting:?}");
        }
        // Nothing selected: files exactly when no collector answers.
        let files = exporter_unconfigured(&[("MEGATRON_OTEL_ENABLED", "1")]);
        assert_eq!(files, !collector_answers(DEFAULT_COLLECTOR, COLLECTOR_PROBE_TIMEOUT));
    }
}
