//! The simulator's only door to telemetry. Every call into lens and
//! megatron-telemetry goes through this module, so that moving to
//! megatron-telemetry's lifecycle module later changes this file alone.
//!
//! For now it does, in this order:
//!
//! - [`load_config`]: the configuration as Megatron reads it (prefix
//!   `MEGATRON_OTEL`, fallback `NEMO_LENS`, the Megatron span-group catalog,
//!   default service name `megatron-lm`), with the `--otel-*` flags applied,
//!   validated before anything starts;
//! - [`Telemetry::setup`]: `lens_fallbacks::setup_telemetry` with the
//!   training arguments as resource attributes
//!   (`megatron_telemetry::resource::training_resource_attributes`) and the
//!   training metrics (`megatron_telemetry::metrics::TrainingMetrics`) on
//!   the exporting rank;
//! - spans: [`Telemetry::span`] opens any span of the taxonomy
//!   (`megatron_telemetry::taxonomy`), gated by its group and marked
//!   `is_goodput_span` where the taxonomy says so; the structural ones have
//!   their own methods (startup, the `megatron.train` intervals); the
//!   pipeline's linked receive spans are made from the context bytes that
//!   travel in each point-to-point message ([`Telemetry::outgoing_context`],
//!   [`Telemetry::linked_receive`]);
//! - [`Telemetry::record`]: the eight training metrics at a log interval;
//! - [`TelemetryShutdown::shutdown`]: ends open spans, flushes, reports.
//!
//! The simulator defines no span or metric name of its own: names, groups
//! and attribute keys all come from megatron-telemetry.

use std::sync::Arc;
use std::time::Duration;

use lens_core::config::{CliOverrides, ConfigError, ConfigLoader, LensConfig};
use lens_core::env::EnvSource;
use lens_core::identity::RankContext;
use lens_fallbacks::{
    KeyValue, RemoteContext, SetupError, SetupOptions, ShutdownReport, SpanGuard, SpanLink, create_linked_span,
    decode_context, encode_context, is_span_group_enabled, managed_span, new_trace_linked,
};
use megatron_telemetry::groups::{MEGATRON_CATALOG, MegatronSpanGroup};
use megatron_telemetry::metrics::{TrainingMetrics, TrainingValues};
use megatron_telemetry::resource::{TrainingArgs, training_resource_attributes};
use megatron_telemetry::taxonomy::{self, SpanDef, attr};

/// An open span; it ends when dropped.
pub(crate) type Span = SpanGuard;

/// The variables any of which means "the user chose where telemetry goes".
pub(crate) const EXPORTER_VARIABLES: [&str; 7] = [
    "MEGATRON_OTEL_EXPORTER",
    "NEMO_LENS_EXPORTER",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
];

/// The variable the simulator sets (to `file`) when none of
/// [`EXPORTER_VARIABLES`] is set.
pub(crate) const DEFAULT_EXPORTER_VARIABLE: &str = "MEGATRON_OTEL_EXPORTER";

/// The run-id variables that, when set, the launcher leaves alone.
pub(crate) const RUN_ID_VARIABLES: [&str; 4] =
    ["MEGATRON_OTEL_RUN_ID", "NEMO_LENS_RUN_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"];

/// The variable the launcher sets to hand its ranks one run id.
pub(crate) const RUN_ID_VARIABLE: &str = "MEGATRON_OTEL_RUN_ID";

/// Whether no exporter or collector is configured in `env`.
pub(crate) fn exporter_unconfigured(env: &(impl EnvSource + ?Sized)) -> bool {
    EXPORTER_VARIABLES.iter().all(|variable| env.non_empty(variable).is_none())
}

/// A fresh run id (12 hex characters), for the launcher.
pub(crate) fn random_run_id() -> String {
    lens_core::identity::random_run_id()
}

/// The run id the configuration resolves to in `env` (SPEC A13).
pub(crate) fn resolve_run_id(config: &LensConfig, env: &(impl EnvSource + ?Sized)) -> String {
    lens_core::identity::resolve_run_id(&config.run_id, env).value
}

/// Megatron's configuration from `env`, with the command-line overrides,
/// validated (every problem at once, each naming its variable or flag).
pub(crate) fn load_config(env: &(impl EnvSource + ?Sized), cli: &CliOverrides) -> Result<LensConfig, ConfigError> {
    let mut config = ConfigLoader::new("MEGATRON_OTEL")
        .fallback_prefix("NEMO_LENS")
        .catalog(&MEGATRON_CATALOG)
        .default_service_name("megatron-lm")
        .load(env)?;
    config.apply_cli(cli);
    config.validate()?;
    Ok(config)
}

/// Whether `config` turns telemetry on.
pub(crate) fn enabled(config: &LensConfig) -> bool {
    config.telemetry_enabled()
}

/// Where the `file` exporter writes for `run_id`.
pub(crate) fn file_dir(config: &LensConfig, run_id: &str) -> std::path::PathBuf {
    config.file_dir_for(run_id)
}

/// The training arguments the resource reports (SPEC B 7.3).
pub(crate) type ResourceArgs = TrainingArgs;

/// One rank's telemetry: the lens handle, the training metrics and the
/// state of the structural spans.
pub(crate) struct Telemetry {
    handle: Arc<lens_fallbacks::Telemetry>,
    metrics: TrainingMetrics,
    startup: Option<Span>,
    startup_context: RemoteContext,
    interval: Option<Span>,
    interval_context: RemoteContext,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("handle", &self.handle).finish_non_exhaustive()
    }
}

/// What another thread (the signal handler) needs to end telemetry.
#[derive(Clone, Debug)]
pub(crate) struct TelemetryShutdown(Arc<lens_fallbacks::Telemetry>);

impl TelemetryShutdown {
    /// Ends open spans (marked truncated), flushes and shuts down, within
    /// the handle's bound. Idempotent.
    pub(crate) fn shutdown(&self) -> ShutdownReport {
        self.0.shutdown(Duration::from_secs(5))
    }
}

impl Telemetry {
    /// Sets telemetry up for this rank. `env` is what the configuration was
    /// read from (the process environment, plus the simulator's default
    /// exporter when none is configured).
    pub(crate) fn setup(
        config: &LensConfig,
        rank: &RankContext,
        args: &ResourceArgs,
        env: impl EnvSource + Send + Sync + 'static,
    ) -> Result<Telemetry, SetupError> {
        let resource = training_resource_attributes(args, &env);
        let handle = lens_fallbacks::setup_telemetry(config, rank, resource, SetupOptions::new().with_env(env))?;
        let metrics =
            if handle.is_exporting() { TrainingMetrics::new(handle.meter()) } else { TrainingMetrics::noop() };
        Ok(Telemetry {
            handle: Arc::new(handle),
            metrics,
            startup: None,
            startup_context: RemoteContext::none(),
            interval: None,
            interval_context: RemoteContext::none(),
        })
    }

    /// The handle for the signal thread.
    pub(crate) fn shutdown_handle(&self) -> TelemetryShutdown {
        TelemetryShutdown(Arc::clone(&self.handle))
    }

    /// Whether telemetry is on in this process.
    pub(crate) fn is_enabled(&self) -> bool {
        self.handle.is_enabled()
    }

    /// Whether this rank exports.
    pub(crate) fn is_exporting(&self) -> bool {
        self.handle.is_exporting()
    }

    /// Where this rank's telemetry goes (empty when it exports nothing).
    pub(crate) fn destinations(&self) -> Vec<String> {
        self.handle.destinations().to_vec()
    }

    /// Opens the span `def` of the taxonomy with `attributes` (plus
    /// `is_goodput_span` where the taxonomy says so), as a child of the
    /// current span. Costs a load and a test when its group is off.
    pub(crate) fn span<const N: usize>(&self, def: &'static SpanDef, attributes: [KeyValue; N]) -> Span {
        managed_span(
            def.group,
            def.name,
            attributes.into_iter().chain(def.goodput.then(|| KeyValue::new(attr::IS_GOODPUT_SPAN, true))),
        )
    }

    /// [`Telemetry::span`] with the `megatron.iteration` attribute.
    pub(crate) fn iteration_span(&self, def: &'static SpanDef, iteration: u64) -> Span {
        self.span(def, [KeyValue::new(attr::ITERATION, iteration)])
    }

    /// `megatron.layer.forward` for layer `number` (1-based).
    pub(crate) fn layer_span(&self, number: u32) -> Span {
        self.span(&taxonomy::LAYER_FORWARD, [KeyValue::new(attr::LAYER_NUMBER, number)])
    }

    /// Sets `megatron.skipped` on an iteration span.
    pub(crate) fn mark_skipped(&self, span: &Span, skipped: bool) {
        span.set_attribute(attr::SKIPPED, skipped);
    }

    /// Sets `megatron.update_successful` on an optimizer span.
    pub(crate) fn mark_update(&self, span: &Span, successful: bool) {
        span.set_attribute(attr::UPDATE_SUCCESSFUL, successful);
    }

    /// Sets `num_microbatches` on a forward-backward span.
    pub(crate) fn mark_microbatches(&self, span: &Span, microbatches: u64) {
        span.set_attribute(attr::NUM_MICROBATCHES, microbatches);
    }

    /// Sets `megatron.eval_iteration` on an evaluation step span.
    pub(crate) fn mark_eval_iteration(&self, span: &Span, step: u64) {
        span.set_attribute(attr::EVAL_ITERATION, step);
    }

    /// Sets `megatron.eval_iters` on an evaluation span.
    pub(crate) fn mark_eval_iters(&self, span: &Span, steps: u64) {
        span.set_attribute(attr::EVAL_ITERS, steps);
    }

    /// Sets `megatron.sniff_test.tag`: `before training`, or `iteration`
    /// and the number right-aligned in seven columns.
    pub(crate) fn mark_sniff_tag(&self, span: &Span, iteration: Option<u64>) {
        let tag = match iteration {
            None => "before training".to_string(),
            Some(n) => format!("iteration {n:7}"),
        };
        span.set_attribute(attr::SNIFF_TEST_TAG, tag);
    }

    /// Sets `nvrx.call_idx` (an int) on the span that dispatched an async save.
    pub(crate) fn mark_call_index(&self, span: &Span, call_index: u64) {
        span.set_attribute(attr::NVRX_CALL_IDX, call_index);
    }

    /// Sets `nvrx.call_idx` (a list) on a finalize span, when something was finalized.
    pub(crate) fn mark_call_indices(&self, span: &Span, call_indices: &[u64]) {
        if !call_indices.is_empty() {
            let list: Vec<i64> = call_indices.iter().map(|&i| i64::try_from(i).unwrap_or(i64::MAX)).collect();
            span.set_attribute(attr::NVRX_CALL_IDX, list);
        }
    }

    /// Opens `megatron.startup` (a child of an incoming `TRACEPARENT`
    /// context, else a new trace).
    pub(crate) fn start_startup(&mut self) {
        let attributes =
            [KeyValue::new(attr::MODEL_TYPE, "encoder_or_decoder"), KeyValue::new(attr::IS_GOODPUT_SPAN, true)];
        let span = match self.handle.incoming_context() {
            Some(incoming) => {
                let _context = incoming.attach();
                managed_span(taxonomy::STARTUP.group, taxonomy::STARTUP.name, attributes)
            }
            None => new_trace_linked(taxonomy::STARTUP.group, taxonomy::STARTUP.name, [], attributes),
        };
        self.startup_context = span.remote_context();
        self.startup = Some(span);
    }

    /// Ends `megatron.startup` (idempotent).
    pub(crate) fn end_startup(&mut self) {
        self.startup = None;
    }

    /// Ends the current `megatron.train` interval (if any) and opens the
    /// next one as the root of a new trace, linked to the previous interval
    /// (or to startup for the first).
    pub(crate) fn open_interval(&mut self, first_iteration: u64) {
        self.interval = None;
        let previous = if self.interval_context.is_valid() { &self.interval_context } else { &self.startup_context };
        let span = new_trace_linked(
            taxonomy::TRAIN.group,
            taxonomy::TRAIN.name,
            [SpanLink::new(previous)],
            [KeyValue::new(attr::ITERATION, first_iteration), KeyValue::new(attr::IS_GOODPUT_SPAN, true)],
        );
        self.interval_context = span.remote_context();
        self.interval = Some(span);
    }

    /// Ends the current interval (idempotent).
    pub(crate) fn close_interval(&mut self) {
        self.interval = None;
    }

    /// The current span's context as bytes, to travel inside a pipeline
    /// message (empty when the communication group is off).
    pub(crate) fn outgoing_context(&self) -> Vec<u8> {
        if is_span_group_enabled(MegatronSpanGroup::COMMUNICATION) { encode_context() } else { Vec::new() }
    }

    /// The linked receive span (`megatron.pp.recv_forward.linked` or
    /// `megatron.pp.recv_backward.linked`, SPEC A9) for a message from
    /// pipeline stage `sender_stage` carrying `context` (the sender's send
    /// span) about `microbatch`. A child of the current (receive) span,
    /// linked to the sender's span.
    pub(crate) fn linked_receive(
        &self,
        def: &'static SpanDef,
        context: &[u8],
        sender_stage: u32,
        microbatch: u64,
    ) -> Span {
        if !is_span_group_enabled(def.group) {
            return SpanGuard::noop();
        }
        let remote = decode_context(context).unwrap_or_else(RemoteContext::none);
        create_linked_span(
            Some(def.group),
            def.name,
            &remote,
            [KeyValue::new(attr::PIPELINE_PARALLEL_RANK, sender_stage), KeyValue::new(attr::MICROBATCH_ID, microbatch)],
        )
    }

    /// The current context as bytes, for a worker thread (async save).
    pub(crate) fn current_context_bytes(&self) -> Vec<u8> {
        encode_context()
    }

    /// Runs `body` on a worker thread with `context` (from
    /// [`Telemetry::current_context_bytes`]) current, inside the span `def`.
    pub(crate) fn in_worker_context<R>(
        context: &[u8],
        def: &'static SpanDef,
        call_index: u64,
        body: impl FnOnce() -> R,
    ) -> R {
        let remote = decode_context(context).unwrap_or_else(RemoteContext::none);
        let _context = remote.attach();
        let _span = managed_span(
            def.group,
            def.name,
            [KeyValue::new(attr::NVRX_CALL_IDX, call_index)]
                .into_iter()
                .chain(def.goodput.then(|| KeyValue::new(attr::IS_GOODPUT_SPAN, true))),
        );
        body()
    }

    /// Records the training metrics of one log interval (exporting rank only).
    pub(crate) fn record(&self, values: &TrainingValues) {
        self.metrics.record(values);
    }

    /// Ends the structural spans, then shuts telemetry down.
    pub(crate) fn shutdown(&mut self) -> ShutdownReport {
        self.interval = None;
        self.startup = None;
        self.handle.shutdown(Duration::from_secs(5))
    }
}

/// The metric values of one log interval.
pub(crate) type MetricValues = TrainingValues;
