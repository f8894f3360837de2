//! The lifecycle of Megatron's telemetry: one module, not helpers scattered
//! through the training loop.
//!
//! [`MegatronTelemetry`] is one telemetry lifetime. It owns the facade's
//! [`Telemetry`] handle and everything the training loop needs around it:
//!
//! - **setup** as Megatron does it: configuration from
//!   `MEGATRON_OTEL_*`, falling back to `NEMO_LENS_*`, resolved against
//!   [`MEGATRON_CATALOG`](crate::groups::MEGATRON_CATALOG), service name `megatron-lm` unless
//!   `OTEL_SERVICE_NAME` says otherwise, then the command-line flags;
//!   resource attributes are computed only when telemetry is enabled, and
//!   the GPU identity (NVML) only on an exporting rank;
//! - **the startup trace**: `pre_startup` when the SLURM job start
//!   and the launch-script start are both known and ordered, then
//!   `megatron.startup`, open until the training loop starts, with backdated
//!   children for the phases whose [`StartupTimestamps`] are known. Its trace
//!   id is derived ([`derived_trace_id`]), or, when the job was launched with
//!   a `TRACEPARENT`, it is a child of that context in the launcher's
//!   trace;
//! - **interval re-rooting**: a `megatron.train` span per checkpoint
//!   interval, each the root of a fresh trace whose id every rank derives
//!   alike, linked to the previous interval, the first to startup; one
//!   interval for the whole loop without a save interval;
//! - **the per-iteration spans** with their iteration's sampling key, the
//!   first-iteration wrapper, checkpoint and evaluation spans;
//! - **training metrics**, recorded only on the exporting rank;
//! - **SIGTERM and SIGINT** ([`crate::signals`]), only on exporting ranks;
//! - **shutdown**, explicit or on drop, idempotent; all state is per
//!   lifetime, so a second setup in one process works and exports;
//! - the **async-checkpoint worker bootstrap**, which carries the whole
//!   configuration to the worker.
//!
//! Sampling follows the taxonomy's [`Sampling`] column, so no call site needs
//! to know about it: structural spans (startup and its children,
//! the intervals, checkpoint save and load, evaluation, the warm-up and
//! closing spans) carry `lens.sampling.structural = true`, so a ratio sampler
//! never drops them; every span emitted every iteration or every log
//! interval outside the iteration span (the iteration and its first-iteration
//! wrapper, `ft_heartbeat`, `save_finalize`, the report, log, params-norm,
//! sniff-test and GC spans) carries the sampling key of the loop pass's
//! iteration, so every rank keeps or drops the same iterations, whole; the
//! spans inside follow their parent. Every span name, group and attribute key
//! comes from [`crate::taxonomy`]. `docs/integrating.md` walks through a training loop.
//!
//! The handle holds span guards, which are tied to the thread that opened
//! them: keep it on the training loop's thread.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//!
//! use lens_fallbacks::config::CliOverrides;
//! use lens_fallbacks::identity::RankContext;
//! use megatron_telemetry::lifecycle::{LifecycleOptions, MegatronTelemetry, StartupTimestamps};
//! use megatron_telemetry::metrics::TrainingValues;
//! use megatron_telemetry::taxonomy;
//!
//! // Captured as early as possible in `main`.
//! let stamps = StartupTimestamps { program_start: Some(SystemTime::now()), ..StartupTimestamps::default() };
//!
//! // The environment would be `lens_fallbacks::env::ProcessEnv`; a map keeps the
//! // example self-contained (and telemetry off, so nothing is exported).
//! let env = std::collections::HashMap::<String, String>::new();
//! let options = LifecycleOptions::new().with_startup(stamps).with_model_type("GPT");
//! let mut telemetry = MegatronTelemetry::setup(&CliOverrides::default(), &RankContext::SINGLE, env, options)?;
//!
//! {
//!     let _model = telemetry.span(&taxonomy::STARTUP_MODEL_INIT, []);
//!     // build the model and optimizer
//! }
//! telemetry.begin_training_loop(Some(2)); // --save-interval 2; ends startup
//! for iteration in 0..4_u64 {
//!     telemetry.loop_pass(iteration); // opens a new interval every 2 passes
//!     drop(telemetry.ft_heartbeat(iteration));
//!     let step = telemetry.iteration(iteration);
//!     // forward, backward, optimizer
//!     step.set_skipped(false);
//!     drop(step);
//!     telemetry.record_training(&TrainingValues { loss: Some(2.5), ..TrainingValues::default() });
//!     if (iteration + 1) % 2 == 0 {
//!         let _save = telemetry.exposed_save(iteration + 1);
//!         let _inner = telemetry.checkpoint_save(iteration + 1);
//!     }
//! }
//! telemetry.end_training_loop();
//! let report = telemetry.shutdown(Duration::from_secs(5));
//! assert!(!report.performed); // telemetry was off
//! # Ok::<(), lens_fallbacks::SetupError>(())
//! ```

mod configuration;
mod options;
pub(crate) mod spans;
mod startup;
mod trace_ids;

use std::sync::Arc;
use std::time::Duration;

use lens_fallbacks::config::CliOverrides;
use lens_fallbacks::env::EnvSource;
use lens_fallbacks::identity::{RankContext, resolve_launch_id};
use lens_fallbacks::{
    AttachedContext, KeyValue, RemoteContext, SAMPLING_KEY_ATTRIBUTE, SetupError, ShutdownReport, SpanGuard, SpanLink,
    Telemetry, WorkerBootstrap, is_span_group_enabled, lazy_attributes, managed_span, sampling_key, setup_telemetry,
};

use crate::metrics::{TrainingMetrics, TrainingValues};
use crate::signals::{self, ExitMode, SignalGuard};
use crate::taxonomy::{self, Sampling, SpanDef, attr};

pub use configuration::{DEFAULT_SERVICE_NAME, ENV_PREFIX, FALLBACK_ENV_PREFIX, load_config};
pub use options::LifecycleOptions;
pub use spans::{IterationSpans, span};
pub use startup::{LAUNCH_SCRIPT_PRESRUN_ENV, LAUNCH_SCRIPT_START_ENV, SLURM_JOB_START_ENV, StartupTimestamps};
pub use trace_ids::{STARTUP_TRACE, derived_trace_id, should_reroot};

use configuration::resolved_spec;
use spans::{iteration_value, marks};
use startup::merge;
use trace_ids::{run_and_launch, trace_id_of, warn_no_launch_id};

/// One telemetry lifetime of a Megatron training process; see the module
/// documentation.
#[must_use = "dropping the lifetime shuts telemetry down: keep it alive for the whole run"]
pub struct MegatronTelemetry {
    // Field order matters for `Drop`'s fallbacks: spans before the handle.
    interval: Option<SpanGuard>,
    startup: Option<SpanGuard>,
    incoming: Option<AttachedContext>,
    signals: Option<SignalGuard>,
    telemetry: Arc<Telemetry>,
    metrics: TrainingMetrics,
    startup_context: RemoteContext,
    previous_interval: RemoteContext,
    launch_id: Option<String>,
    pass_key: Option<i64>,
    stamps: StartupTimestamps,
    recorded_phases: u16,
    loop_counter: u64,
    save_interval: Option<u64>,
    first_iteration_done: bool,
    shutdown_timeout: Duration,
    enabled: bool,
    service_name: String,
    span_groups: String,
    hang_timeout: lens_fallbacks::config::HangTimeout,
}

impl std::fmt::Debug for MegatronTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MegatronTelemetry")
            .field("telemetry", &self.telemetry)
            .field("startup_open", &self.startup.is_some())
            .field("interval_open", &self.interval.is_some())
            .field("signal_handlers", &self.signals.is_some())
            .field("loop_counter", &self.loop_counter)
            .finish_non_exhaustive()
    }
}

impl MegatronTelemetry {
    /// Sets telemetry up for this rank and opens the startup trace.
    ///
    /// Reads the configuration from `env` (`MEGATRON_OTEL_*`, then
    /// `NEMO_LENS_*`, then the defaults; service name `megatron-lm`), applies
    /// `cli` (which wins), validates everything on every rank before anything is installed, and
    /// only then builds anything. `env` also feeds the run id, the restart
    /// attempt, the incoming `TRACEPARENT` and the launcher's startup stamps;
    /// pass `lens_fallbacks::env::ProcessEnv` in a real job.
    ///
    /// On an exporting rank it creates the training metrics, installs the
    /// SIGTERM/SIGINT handlers (unless turned off) and opens
    /// `pre_startup`/`megatron.startup` with the backdated phases known so
    /// far. Errors are the facade's: bad configuration, an exporter that
    /// cannot be built, a lifetime already active.
    pub fn setup(
        cli: &CliOverrides,
        rank: &RankContext,
        env: impl EnvSource + Clone + Send + Sync + 'static,
        options: LifecycleOptions,
    ) -> Result<MegatronTelemetry, SetupError> {
        let config = load_config(cli, &env)?;
        let enabled = config.telemetry_enabled();
        let LifecycleOptions {
            resource,
            gpu_identity,
            startup,
            model_type,
            exit_signal_handler,
            signal_handlers,
            setup,
        } = options;
        let resource = match resource {
            Some(compute) if enabled => compute(),
            _ => Vec::new(),
        };
        let mut setup = setup.with_env(env.clone());
        if let Some(probe) = gpu_identity {
            setup = setup.with_lazy_resource(probe);
        }
        let telemetry = Arc::new(setup_telemetry(&config, rank, resource, setup)?);
        let exporting = telemetry.is_exporting();
        let launch_id = resolve_launch_id(&config.launch_id, &env);
        if launch_id.is_none() && telemetry.records_spans() && !config.run_id.trim().is_empty() {
            warn_no_launch_id(config.variable_for("run_id").unwrap_or("MEGATRON_OTEL_RUN_ID"));
        }
        let metrics = if exporting { TrainingMetrics::new(telemetry.meter()) } else { TrainingMetrics::noop() };
        let signals = (exporting && signal_handlers)
            .then(|| {
                let mode = if exit_signal_handler { ExitMode::Graceful } else { ExitMode::Terminate };
                signals::install(Arc::downgrade(&telemetry), mode, config.shutdown_timeout)
            })
            .flatten();
        let mut lifetime = MegatronTelemetry {
            interval: None,
            startup: None,
            incoming: None,
            signals,
            telemetry,
            metrics,
            startup_context: RemoteContext::none(),
            previous_interval: RemoteContext::none(),
            launch_id: launch_id.map(|id| id.value),
            pass_key: None,
            stamps: startup.with_env(&env),
            recorded_phases: 0,
            loop_counter: 0,
            save_interval: None,
            first_iteration_done: false,
            shutdown_timeout: config.shutdown_timeout,
            enabled,
            service_name: config.service_name.clone(),
            span_groups: resolved_spec(&config),
            hang_timeout: config.hang_timeout,
        };
        lifetime.open_startup(model_type);
        Ok(lifetime)
    }

    /// The facade handle (tracer, meter, rank, run id, export counters).
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Whether this rank exports.
    pub fn is_exporting(&self) -> bool {
        self.telemetry.is_exporting()
    }

    /// The configured bound on shutdown (`MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS`,
    /// default 5 s), which dropping the handle also uses.
    pub fn shutdown_timeout(&self) -> Duration {
        self.shutdown_timeout
    }

    /// This rank's training diagnosis (lens-training's event API) with
    /// Megatron's span taxonomy ([`crate::events::MegatronEventSpans`]),
    /// the configured hang timeout (`<PREFIX>_HANG_TIMEOUT_S`; no watchdog
    /// when telemetry is off or the timeout is `0`) and flush bound, and the
    /// attempt's launch stamp (the launch-script start when the launch
    /// phases fold into the startup trace, else the program start).
    /// `options` brings the rest: the rank's coordinates, the FLOP count and
    /// peak, the world size, the checkpoint directory.
    pub fn training(&self, options: lens_training::TrainingOptions) -> lens_training::Training {
        let spans = crate::events::MegatronEventSpans::new(self.telemetry.run_id(), self.telemetry.restart_attempt());
        let launch =
            if self.stamps.launch_folds() { self.stamps.launch_script_start } else { self.stamps.program_start };
        let mut options =
            options.with_spans(spans).with_hang_timeout(self.hang_timeout).with_flush_timeout(self.shutdown_timeout);
        if let Some(launch) = launch {
            options = options.with_launch_stamp(launch);
        }
        lens_training::Training::new(&self.telemetry, options)
    }

    /// The training metrics (a no-op handle on other ranks), for
    /// [`TrainingMetrics::loss_from`].
    pub fn metrics(&self) -> &TrainingMetrics {
        &self.metrics
    }

    /// The startup span's context ("no context" when it was not recorded).
    pub fn startup_context(&self) -> RemoteContext {
        self.startup_context.clone()
    }

    /// The context of the latest `megatron.train` interval ("no context"
    /// before the first, or when it was not recorded).
    pub fn interval_context(&self) -> RemoteContext {
        self.previous_interval.clone()
    }

    /// Whether the startup span is still open.
    pub fn startup_open(&self) -> bool {
        self.startup.is_some()
    }

    fn open_startup(&mut self, model_type: Option<String>) {
        if !is_span_group_enabled(taxonomy::STARTUP.group) {
            return;
        }
        let telemetry = Arc::clone(&self.telemetry);
        let (run_id, restart, lifetime) = (telemetry.run_id(), telemetry.restart_attempt(), telemetry.lifetime_index());
        let launch_id = self.launch_id.as_deref();
        let stamps = self.stamps;

        // Trace A: the wait for the allocation, its own trace.
        if let (Some(job_start), Some(launch)) = (stamps.slurm_job_start, stamps.launch_script_start)
            && job_start < launch
        {
            let run = run_and_launch(run_id, launch_id);
            let id = trace_id_of(&format!("{}/{run}/{restart}/{lifetime}", taxonomy::PRE_STARTUP.name));
            let def = &taxonomy::PRE_STARTUP;
            let span = lens_fallbacks::span(def.group, def.name)
                .trace_id(id)
                .start_time(job_start)
                .attributes(marks(def).into_iter().flatten())
                .start();
            span.end_at(launch);
        }

        // Trace B: startup, open until the loop starts.
        let def = &taxonomy::STARTUP;
        let start = if stamps.launch_folds() { stamps.launch_script_start } else { stamps.program_start };
        let model = model_type.map(|m| KeyValue::new(attr::MODEL_TYPE, m));
        let attributes: Vec<KeyValue> = marks(def).into_iter().flatten().chain(model).collect();
        let span = match telemetry.incoming_context() {
            Some(incoming) => {
                self.incoming = Some(incoming.attach());
                match start {
                    Some(start) => {
                        lens_fallbacks::span(def.group, def.name).start_time(start).attributes(attributes).start()
                    }
                    None => managed_span(def.group, def.name, attributes),
                }
            }
            None => {
                let id = derived_trace_id(run_id, launch_id, restart, lifetime, STARTUP_TRACE);
                let builder = lens_fallbacks::span(def.group, def.name).trace_id(id).attributes(attributes);
                match start {
                    Some(start) => builder.start_time(start).start(),
                    None => builder.start(),
                }
            }
        };
        self.startup_context = span.remote_context();
        self.startup = Some(span);
        self.record_startup_phases(&stamps);
    }

    /// Records the backdated startup phases whose two stamps are now known
    /// and that were not recorded yet, as children of the open startup span
    /// (for stamps taken after setup, such as the JIT fusion options). Does
    /// nothing once startup has ended.
    pub fn record_startup_phases(&mut self, stamps: &StartupTimestamps) {
        if self.startup.is_none() {
            return;
        }
        let merged = merge(self.stamps, stamps);
        self.stamps = merged;
        let folds = merged.launch_folds();
        for (index, (def, start, end, needs_fold)) in merged.phases().into_iter().enumerate() {
            let bit = 1_u16 << index;
            if self.recorded_phases & bit != 0 || (needs_fold && !folds) {
                continue;
            }
            if let (Some(start), Some(end)) = (start, end) {
                self.recorded_phases |= bit;
                let _ = lens_fallbacks::span(def.group, def.name)
                    .start_time(start)
                    .attributes(marks(def).into_iter().flatten())
                    .end_at(end);
            }
        }
    }

    /// Ends the startup span (idempotent). [`begin_training_loop`](Self::begin_training_loop)
    /// (MegatronTelemetry::begin_training_loop) calls it.
    pub fn end_startup(&mut self) {
        self.startup = None;
        self.incoming = None;
    }

    /// The training loop starts (once per `train()` call): ends startup,
    /// resets the loop-pass counter and remembers the save interval (`None`
    /// or 0: one interval for the whole loop).
    pub fn begin_training_loop(&mut self, save_interval: Option<u64>) {
        self.end_startup();
        self.loop_counter = 0;
        self.save_interval = save_interval;
    }

    /// Call at the top of every loop pass, before the pass's spans, with the
    /// iteration the pass runs (absolute, so a resumed run starts at its
    /// checkpoint's iteration). Opens a new `megatron.train` interval when
    /// [`should_reroot`] says so, ending the previous one; returns whether
    /// it did. The pass's iteration keys the per-iteration spans that
    /// [`span`](MegatronTelemetry::span) opens until the next pass.
    pub fn loop_pass(&mut self, iteration: u64) -> bool {
        let reroot = should_reroot(self.loop_counter, self.save_interval);
        self.loop_counter = self.loop_counter.saturating_add(1);
        self.pass_key = self.telemetry.records_spans().then(|| self.key_of(iteration));
        if reroot {
            self.open_interval(iteration);
        }
        reroot
    }

    fn open_interval(&mut self, first_iteration: u64) {
        self.interval = None;
        let def = &taxonomy::TRAIN;
        if !is_span_group_enabled(def.group) {
            return;
        }
        let previous = if self.previous_interval.is_valid() { &self.previous_interval } else { &self.startup_context };
        let link = SpanLink::new(previous);
        let telemetry = &self.telemetry;
        let id = derived_trace_id(
            telemetry.run_id(),
            self.launch_id.as_deref(),
            telemetry.restart_attempt(),
            telemetry.lifetime_index(),
            first_iteration,
        );
        let span = lens_fallbacks::span(def.group, def.name)
            .trace_id(id)
            .links([link])
            .attributes(marks(def).into_iter().flatten())
            .start();
        self.previous_interval = span.remote_context();
        self.interval = Some(span);
    }

    /// The training loop exited: ends the current interval (idempotent).
    /// Spans opened after it carry no iteration's key.
    pub fn end_training_loop(&mut self) {
        self.interval = None;
        self.pass_key = None;
    }

    /// Whether a `megatron.train` interval is open.
    pub fn interval_open(&self) -> bool {
        self.interval.is_some()
    }

    /// The sampling key of `iteration` in this run and restart attempt.
    fn key_of(&self, iteration: u64) -> i64 {
        sampling_key(self.telemetry.run_id(), self.telemetry.restart_attempt(), iteration)
    }

    /// The attributes of a per-iteration span: the iteration, the sampling
    /// key (computed only when the span is recorded) and the goodput flag.
    fn keyed(
        &self,
        def: &'static SpanDef,
        iteration: u64,
        with_iteration: bool,
    ) -> impl IntoIterator<Item = KeyValue> + use<'_> {
        lazy_attributes(move || {
            let key = self.key_of(iteration);
            let iteration = with_iteration.then(|| KeyValue::new(attr::ITERATION, iteration_value(iteration)));
            [Some(KeyValue::new(SAMPLING_KEY_ATTRIBUTE, key)), iteration, marks(def)[0].clone()].into_iter().flatten()
        })
    }

    /// The spans of one training iteration: `megatron.train.iteration`
    /// (group `step`) with `megatron.iteration` and the iteration's sampling
    /// key, wrapped, for the first iteration this lifetime executes, in
    /// `megatron.train.first_iteration` (group `first_iteration`, same key).
    /// Set `megatron.skipped` after the step with
    /// [`IterationSpans::set_skipped`].
    pub fn iteration(&mut self, iteration: u64) -> IterationSpans {
        let first = !std::mem::replace(&mut self.first_iteration_done, true);
        let first = first.then(|| {
            let def = &taxonomy::TRAIN_FIRST_ITERATION;
            managed_span(def.group, def.name, self.keyed(def, iteration, true))
        });
        let def = &taxonomy::TRAIN_ITERATION;
        let span = managed_span(def.group, def.name, self.keyed(def, iteration, true));
        IterationSpans { span, first }
    }

    /// `megatron.checkpoint.ft_heartbeat` (every iteration, outside the
    /// iteration span), with the iteration's sampling key.
    pub fn ft_heartbeat(&self, iteration: u64) -> SpanGuard {
        let def = &taxonomy::CHECKPOINT_FT_HEARTBEAT;
        managed_span(def.group, def.name, self.keyed(def, iteration, false))
    }

    /// `megatron.checkpoint.save.finalize` (every iteration, outside the
    /// iteration span), with the iteration's sampling key. Set
    /// `nvrx.call_idx` on it when something was finalised.
    pub fn save_finalize(&self, iteration: u64) -> SpanGuard {
        let def = &taxonomy::CHECKPOINT_SAVE_FINALIZE;
        managed_span(def.group, def.name, self.keyed(def, iteration, false))
    }

    /// `megatron.checkpoint.exposed_save`: the save as the loop sees it; the
    /// other save spans ([`checkpoint_save`](MegatronTelemetry::checkpoint_save),
    /// and through [`span`] `megatron.checkpoint.reclaim_memory`,
    /// `.report_memory`, `.gc_collect`, `.timers_log`) go inside it.
    pub fn exposed_save(&self, iteration: u64) -> SpanGuard {
        span(&taxonomy::CHECKPOINT_EXPOSED_SAVE, [KeyValue::new(attr::ITERATION, iteration_value(iteration))])
    }

    /// `megatron.checkpoint.save`; `megatron.checkpoint.save.state_dict` and
    /// `.io_write` go inside it (through [`span`]).
    pub fn checkpoint_save(&self, iteration: u64) -> SpanGuard {
        span(&taxonomy::CHECKPOINT_SAVE, [KeyValue::new(attr::ITERATION, iteration_value(iteration))])
    }

    /// `megatron.evaluate`; set `megatron.eval_iters` on it at the end.
    pub fn evaluate(&self) -> SpanGuard {
        span(&taxonomy::EVALUATE, [])
    }

    /// `megatron.evaluate.step`, with `megatron.eval_iteration`.
    pub fn evaluate_step(&self, eval_iteration: u64) -> SpanGuard {
        span(&taxonomy::EVALUATE_STEP, [KeyValue::new(attr::EVAL_ITERATION, iteration_value(eval_iteration))])
    }

    /// A span of the taxonomy, as the free function [`span`] opens it, with
    /// the sampling key of the current loop pass's iteration where the
    /// taxonomy says so: always for a [`Sampling::Iteration`] span, and for a
    /// [`Sampling::Parent`] span whose parent's group is off (so that it
    /// would hang directly below the interval). Outside a loop pass, or on a
    /// rank that records no spans, there is no key.
    pub fn span(&self, def: &'static SpanDef, attributes: impl IntoIterator<Item = KeyValue>) -> SpanGuard {
        if !is_span_group_enabled(def.group) {
            return SpanGuard::noop();
        }
        let keyed = match def.sampling {
            Sampling::Structural | Sampling::Sampler => false,
            Sampling::Iteration => true,
            Sampling::Parent => def.parent_group.is_some_and(|group| !is_span_group_enabled(group)),
        };
        let key = self.pass_key.filter(|_| keyed).map(|key| KeyValue::new(SAMPLING_KEY_ATTRIBUTE, key));
        managed_span(def.group, def.name, marks(def).into_iter().flatten().chain(key).chain(attributes))
    }

    /// Records one log interval's training metrics, only on the exporting
    /// rank (other ranks do nothing at all).
    pub fn record_training(&self, values: &TrainingValues) {
        if self.telemetry.is_exporting() {
            self.metrics.record(values);
        }
    }

    /// The bootstrap for the async-checkpoint worker process:
    /// enabled exactly when this process's telemetry is (environment or
    /// command line; the original forwarded only the flag),
    /// with the service name and the resolved span groups as a
    /// comma-separated list, and the current context. Inert when telemetry
    /// is off (and always without the `otel` feature). Pass
    /// [`WorkerBootstrap::to_env_vars`] with [`ENV_PREFIX`] to the worker.
    pub fn worker_bootstrap(&self) -> WorkerBootstrap {
        WorkerBootstrap::capture(self.enabled, Some(self.service_name.clone()), Some(self.span_groups.clone()))
    }

    /// Ends the interval and the startup span, removes the signal handlers,
    /// then shuts the handle down (flush, bounded by `timeout`; spans still
    /// open are ended and marked truncated). Idempotent: later calls report
    /// `performed: false`.
    pub fn shutdown(&mut self, timeout: Duration) -> ShutdownReport {
        if let Some(guard) = self.signals.take() {
            guard.uninstall();
        }
        self.end_training_loop();
        self.end_startup();
        self.telemetry.shutdown(timeout)
    }
}

impl Drop for MegatronTelemetry {
    fn drop(&mut self) {
        self.shutdown(self.shutdown_timeout);
    }
}
