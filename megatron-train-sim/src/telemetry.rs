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

use lens_fallbacks::config::{CliOverrides, LensConfig};
use lens_fallbacks::env::{EnvSource, ProcessEnv};
use lens_fallbacks::identity::RankContext;
use lens_fallbacks::{KeyValue, SetupError, ShutdownReport, SpanGuard};
use lens_training::mfu::{self, NoPeak, Peak};
use megatron_telemetry::lifecycle::{self, LifecycleOptions, MegatronTelemetry};
use megatron_telemetry::nvml;
use megatron_telemetry::resource::{Precision, TrainingArgs, training_resource_attributes};
use megatron_telemetry::taxonomy::{self, SpanDef, attr};

pub(crate) use megatron_telemetry::lifecycle::StartupTimestamps;
pub(crate) use megatron_telemetry::metrics::TrainingValues as MetricValues;

/// An open span; it ends when dropped.
pub(crate) type Span = SpanGuard;

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
/// `lens_fallbacks::config::default_destination`, the same for every program)
/// sends telemetry to files: nothing in `env` selects an exporter or an OTLP
/// endpoint, and no collector answers at `localhost:4317`. The
/// configuration is read with the command line's overrides (`cli`), as
/// setup reads it: a configuration with problems selects nothing here, so
/// that setup reports them (a bad `MEGATRON_OTEL_EXPORTER` must never be
/// replaced by `file`), and with telemetry off nothing is probed.
pub(crate) fn exporter_unconfigured(env: &(impl EnvSource + ?Sized), cli: &CliOverrides) -> bool {
    use lens_fallbacks::config::{COLLECTOR_PROBE_TIMEOUT, DEFAULT_COLLECTOR, DefaultDestination};
    let Ok(config) = lifecycle::load_config(cli, env) else { return false };
    config.enabled
        && lens_fallbacks::config::default_destination(&config, || {
            lens_fallbacks::config::collector_answers(DEFAULT_COLLECTOR, COLLECTOR_PROBE_TIMEOUT)
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
    lens_fallbacks::identity::random_run_id()
}

/// The run id the configuration resolves to in `env` (`<PREFIX>_RUN_ID`,
/// `NEMO_LENS_RUN_ID`, `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, else random).
pub(crate) fn resolve_run_id(config: &LensConfig, env: &(impl EnvSource + ?Sized)) -> String {
    lens_fallbacks::identity::resolve_run_id(&config.run_id, env).value
}

/// Megatron's configuration from `env`, with the command-line overrides,
/// validated (the lifecycle's loader: the launcher checks it before any
/// rank starts; each rank's setup loads it again).
pub(crate) fn load_config(env: &(impl EnvSource + ?Sized), cli: &CliOverrides) -> Result<LensConfig, SetupError> {
    lifecycle::load_config(cli, env)
}

/// The precision the simulator's kernels compute in, whatever `--bf16` and
/// `--fp16` say (they name the training precision in the resource, but the
/// products are `f32`): MFU divides by this figure of the GPU's row.
pub(crate) const KERNEL_PRECISION: Precision = Precision::Fp32;

/// The peak MFU divides by on a rank's device, or why there is none, and
/// what the startup output names (the GPU, the variable that sets a peak).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MfuPeak {
    /// The peak, or why there is none.
    pub(crate) peak: Result<Peak, NoPeak>,
    /// The driver's name of the GPU the rank opened (`None`: the CPU).
    pub(crate) gpu_name: Option<String>,
    /// The variable that sets a peak (`<PREFIX>_PEAK_TFLOPS`).
    pub(crate) variable: String,
}

impl MfuPeak {
    /// The startup line (`output::mfu_peak` prints it): the peak in
    /// TFLOP/s and where it comes from (the variable, or the row of known
    /// GPUs with its precision and source), or why there is none and which
    /// variable gives one.
    pub(crate) fn startup_line(&self) -> String {
        use lens_training::mfu::{Peak, PeakSource};
        match &self.peak {
            Ok(Peak { tflops, source: PeakSource::Configured, .. }) => {
                format!("MFU peak: {tflops} TFLOP/s, from {}", self.variable)
            }
            Ok(Peak { tflops, precision, source: PeakSource::Known(row) }) => {
                let precision = precision.as_str().to_uppercase();
                format!(
                    "MFU peak: {tflops} TFLOP/s, the {precision} figure of the row {:?} of the known GPUs for GPU {:?} \
                     (source: {}); {precision} because the simulator's kernels compute in f32, whatever --bf16/--fp16 say",
                    row.name,
                    self.gpu_name.as_deref().unwrap_or_default(),
                    row.source
                )
            }
            Err(why) => format!("MFU: none: {why}; set {} to report MFU", self.variable),
        }
    }

    /// The peak for the device a rank opened: `<PREFIX>_PEAK_TFLOPS` from
    /// `config` when set; else the [`KERNEL_PRECISION`] figure of the row of
    /// known GPUs that `gpu_name` (the driver's name, `None` for the CPU)
    /// matches by whole tokens; none for a MIG instance (by its name, or
    /// when `CUDA_VISIBLE_DEVICES` in `env` gives CUDA device `ordinal` as
    /// `MIG-…`).
    pub(crate) fn resolve(
        config: Option<&LensConfig>,
        gpu_name: Option<String>,
        ordinal: u32,
        env: &(impl EnvSource + ?Sized),
    ) -> MfuPeak {
        let configured = config.and_then(|config| config.peak_tflops);
        let variable = config.map_or_else(
            || "MEGATRON_OTEL_PEAK_TFLOPS".to_string(),
            |config| config.variable_to_set("peak_tflops", "PEAK_TFLOPS"),
        );
        let mig = gpu_name.is_some() && nvml::visible_device_is_mig(ordinal, env);
        let peak = mfu::resolve_peak(configured, gpu_name.as_deref(), mig, KERNEL_PRECISION);
        MfuPeak { peak, gpu_name, variable }
    }

    /// The peak in TFLOP/s, when there is one.
    pub(crate) fn tflops(&self) -> Option<f64> {
        self.peak.as_ref().ok().map(|peak| peak.tflops)
    }
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
    /// `--save`: the checkpoint directory, where the crash-safe spool lives
    /// by default (`DIR/lens-spool/`, docs/crashes.md).
    pub(crate) checkpoint_dir: Option<std::path::PathBuf>,
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
        let RankSetup { rank, args, env, stamps, graceful_signals, checkpoint_dir } = setup;
        let local_rank = rank.local_rank;
        let (resource_env, gpu_env) = (env.clone(), env.clone());
        let options = LifecycleOptions::new()
            .with_resource(move || training_resource_attributes(&args, &resource_env))
            .with_gpu_identity(move || megatron_telemetry::nvml::gpu_identity(local_rank, &gpu_env))
            .with_startup(stamps)
            .with_model_type("GPT")
            .with_exit_signal_handler(graceful_signals);
        // `service.version` is the application's (SPEC B §7.1 gives the
        // Python helper's own version; lens's is the instrumentation
        // scope's): the simulator's.
        let mut setup_options = lens_fallbacks::SetupOptions::new().with_service_version(env!("CARGO_PKG_VERSION"));
        if let Some(dir) = checkpoint_dir {
            setup_options = setup_options.with_checkpoint_dir(dir);
        }
        let options = options.with_setup_options(setup_options);
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

    /// This rank's training diagnosis (lens-training's event API with
    /// Megatron's span taxonomy; records nothing with telemetry off).
    pub(crate) fn training(&self, options: lens_training::TrainingOptions) -> lens_training::Training {
        self.lifecycle.training(options)
    }

    /// This rank's local rank (`dl.local_rank`).
    pub(crate) fn local_rank(&self) -> u32 {
        self.lifecycle.telemetry().rank().local_rank
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
        self.lifecycle.telemetry().destinations()
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

    /// `megatron.checkpoint.ft_heartbeat` of `iteration`.
    pub(crate) fn ft_heartbeat(&self, iteration: u64) -> Span {
        self.lifecycle.ft_heartbeat(iteration)
    }

    /// `megatron.checkpoint.save.finalize` of `iteration`.
    pub(crate) fn save_finalize(&self, iteration: u64) -> Span {
        self.lifecycle.save_finalize(iteration)
    }

    /// `megatron.checkpoint.save` of `iteration`.
    pub(crate) fn checkpoint_save(&self, iteration: u64) -> Span {
        self.lifecycle.checkpoint_save(iteration)
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
    use lens_training::mfu::PeakSource;

    use super::*;
    use lens_fallbacks::config::{COLLECTOR_PROBE_TIMEOUT, DEFAULT_COLLECTOR, collector_answers};

    fn config(env: &[(&str, &str)]) -> LensConfig {
        load_config(env, &CliOverrides { otel_enabled: true, ..CliOverrides::default() }).unwrap()
    }

    #[test]
    fn the_mfu_peak_is_the_fp32_row_of_the_gpu_the_rank_opened() {
        // The driver's name of an H200 (not `cuda:0`): its FP32 row, 67 TFLOP/s,
        // whatever --bf16 says (the resource's precision is not an input).
        let h200 = MfuPeak::resolve(Some(&config(&[])), Some("NVIDIA H200".to_string()), 0, &[]);
        assert_eq!(h200.tflops(), Some(67.0));
        let Ok(Peak { precision: Precision::Fp32, source: PeakSource::Known(row), .. }) = h200.peak else {
            panic!("{h200:?}")
        };
        assert_eq!(row.name, "H200");
        assert_eq!(h200.variable, "MEGATRON_OTEL_PEAK_TFLOPS");
        // The startup line names the peak, the row, its precision and its source.
        let line = h200.startup_line();
        assert!(line.starts_with("MFU peak: 67 TFLOP/s, the FP32 figure of the row \"H200\""), "{line}");
        assert!(
            line.contains("for GPU \"NVIDIA H200\"") && line.contains("H200 Tensor Core GPU\" datasheet"),
            "{line}"
        );
        // The device's label is not a model name.
        let label = MfuPeak::resolve(None, Some("cuda:0".to_string()), 0, &[]);
        assert_eq!(label.peak, Err(NoPeak::UnknownGpu("cuda:0".to_string())));
        assert_eq!(MfuPeak::resolve(None, None, 0, &[]).peak, Err(NoPeak::NotAGpu));
        // A MIG instance: by its name, or by CUDA_VISIBLE_DEVICES.
        let mig = MfuPeak::resolve(None, Some("NVIDIA H200 MIG 1g.18gb".to_string()), 0, &[]);
        assert!(matches!(mig.peak, Err(NoPeak::MigInstance(_))), "{mig:?}");
        let visible = [("CUDA_VISIBLE_DEVICES", "MIG-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901")];
        let mig = MfuPeak::resolve(None, Some("NVIDIA H200".to_string()), 0, &visible);
        assert!(matches!(mig.peak, Err(NoPeak::MigInstance(_))), "{mig:?}");
        // The configured peak answers for every device, and names its variable.
        let env = [("NEMO_LENS_PEAK_TFLOPS", "12.5"), ("CUDA_VISIBLE_DEVICES", visible[0].1)];
        let configured = MfuPeak::resolve(Some(&config(&env)), Some("NVIDIA H200".to_string()), 0, &env);
        assert_eq!(configured.tflops(), Some(12.5));
        assert_eq!(configured.variable, "NEMO_LENS_PEAK_TFLOPS");
    }

    #[test]
    fn the_simulator_follows_lens_s_default_destination_rule() {
        let no_flags = CliOverrides::default();
        // Any variable that selects a destination, including those the
        // simulator's own list once missed, leaves the choice to it.
        for selecting in [
            ("OTEL_LOGS_EXPORTER", "console"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://c:4317"),
            ("NEMO_LENS_EXPORTER", "console"),
        ] {
            assert!(!exporter_unconfigured(&[("MEGATRON_OTEL_ENABLED", "1"), selecting], &no_flags), "{selecting:?}");
        }
        // Nothing selected: files exactly when no collector answers.
        let files = exporter_unconfigured(&[("MEGATRON_OTEL_ENABLED", "1")], &no_flags);
        assert_eq!(files, !collector_answers(DEFAULT_COLLECTOR, COLLECTOR_PROBE_TIMEOUT));
    }

    #[test]
    fn a_bad_exporter_is_left_for_setup_to_refuse_even_when_the_flag_enables_telemetry() {
        // `--otel-enabled` with `MEGATRON_OTEL_EXPORTER=consol`: the rule
        // must not read the environment as if telemetry were off (the bad
        // value ignored) and then put `file` in its place.
        let flag = CliOverrides { otel_enabled: true, ..CliOverrides::default() };
        let env = [("MEGATRON_OTEL_EXPORTER", "consol")];
        assert!(!exporter_unconfigured(&env, &flag));
        // Telemetry off: nothing to decide, nothing probed.
        assert!(!exporter_unconfigured(&[], &CliOverrides::default()));
    }
}
