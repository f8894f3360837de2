//! Every name lens-training records, in one place: metric names, kinds and
//! units, attribute keys and values, span names of the generic defaults,
//! and the environment variables' suffixes (the program's prefix goes in
//! front: `<PREFIX>_RANK_METRICS`).
//!
//! The names live in the shared `dl.*` namespace that the seed metrics page
//! reserves for cross-consumer names (SPEC A21): a candle program, a loop of
//! one's own and Megatron emit the same series, so the same PromQL recipes,
//! dashboard and `lens analyze` read them all. The `megatron.*` names these
//! replaced are listed under [`legacy`], for reading old exports only.

/// The kind of an instrument (lens-core's, the same type as
/// lens-instruments' descriptors use).
pub use lens_fallbacks::instrument_values::InstrumentKind;

/// One metric: its OpenTelemetry name, kind, units and Prometheus name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricDef {
    /// The instrument name.
    pub name: &'static str,
    /// The instrument kind.
    pub kind: InstrumentKind,
    /// The unit declared on the instrument (UCUM); it becomes a Prometheus
    /// name suffix.
    pub unit: Option<&'static str>,
    /// The unit the values are in, as the docs and description state it.
    pub value_unit: Option<&'static str>,
    /// The instrument description.
    pub description: &'static str,
    /// The name the metric has in Prometheus (through the pull exporter or a
    /// collector's Prometheus exporter), exactly as dashboards query it.
    pub prometheus_name: &'static str,
}

/// `dl.training.phase_time`: counter, unit `s`, cumulative per rank and
/// phase (attribute [`PHASE_ATTRIBUTE`] and the rank's coordinates).
pub const PHASE_TIME: MetricDef = MetricDef {
    name: "dl.training.phase_time",
    kind: InstrumentKind::Counter,
    unit: Some("s"),
    value_unit: Some("s"),
    description: "Time this rank spent in one training phase, cumulative (attributes dl.phase, dl.rank, dl.local_rank and the rank's parallel coordinates); a window's mean per iteration is rate(phase_time) / rate(iterations).",
    prometheus_name: "dl_training_phase_time_seconds_total",
};

/// `dl.training.iterations`: counter, the iterations this rank completed.
pub const ITERATIONS: MetricDef = MetricDef {
    name: "dl.training.iterations",
    kind: InstrumentKind::Counter,
    unit: None,
    value_unit: None,
    description: "Iterations this rank completed, cumulative (the rank's attributes).",
    prometheus_name: "dl_training_iterations_total",
};

/// `dl.training.hang_suspected`: gauge, 1 while this rank's hang watchdog
/// suspects a hang, 0 otherwise; also the name of the watchdog's span event.
pub const HANG_SUSPECTED: MetricDef = MetricDef {
    name: "dl.training.hang_suspected",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: None,
    description: "1 while this rank's hang watchdog sees no completed iteration for longer than its timeout, 0 otherwise (rank attributes only; recorded where the rank exports metrics).",
    prometheus_name: "dl_training_hang_suspected",
};

/// `dl.training.mfu`: gauge, model FLOPs utilisation.
pub const MFU: MetricDef = MetricDef {
    name: "dl.training.mfu",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: Some("ratio 0..1"),
    description: "Model FLOPs utilisation: the program's model FLOP/s per GPU over the GPU's peak (absent when the peak or the FLOP count is unknown)",
    prometheus_name: "dl_training_mfu",
};

/// `dl.goodput.time`: gauge, unit `s`, per bucket ([`BUCKET_ATTRIBUTE`]).
pub const GOODPUT_TIME: MetricDef = MetricDef {
    name: "dl.goodput.time",
    kind: InstrumentKind::Gauge,
    unit: Some("s"),
    value_unit: Some("s"),
    description: "Wall-clock time of the run's attempts so far in one goodput bucket (attribute dl.goodput.bucket)",
    prometheus_name: "dl_goodput_time_seconds",
};

/// `dl.goodput.ratio`: gauge, productive time over all time, all attempts.
pub const GOODPUT_RATIO: MetricDef = MetricDef {
    name: "dl.goodput.ratio",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: Some("ratio 0..1"),
    description: "Goodput: productive time over the total wall-clock time of the run's attempts so far",
    prometheus_name: "dl_goodput_ratio",
};

/// `dl.control.generation`: gauge, the control file's generation in force
/// on this rank (0: the launch configuration), recorded wherever the rank
/// has a metrics pipeline, so that
/// `count_values("generation", dl_control_generation)` shows which ranks
/// applied a change.
pub const CONTROL_GENERATION: MetricDef = MetricDef {
    name: "dl.control.generation",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: None,
    description: "The control file's generation in force on this rank (0: the launch configuration); count_values(\"generation\", dl_control_generation) shows which ranks applied a change (rank attributes)",
    prometheus_name: "dl_control_generation",
};

/// The event a control change adds to the current span (the training
/// interval) at the iteration it applies at.
pub const CONTROL_CHANGE_EVENT: &str = "lens.control.change";
/// The change's generation (on [`CONTROL_CHANGE_EVENT`]).
pub const CONTROL_GENERATION_ATTRIBUTE: &str = "lens.control.generation";
/// What changed, `key=value` words (on [`CONTROL_CHANGE_EVENT`]).
pub const CONTROL_CHANGED_ATTRIBUTE: &str = "lens.control.changed";
/// The iteration the change applies at (on [`CONTROL_CHANGE_EVENT`]).
pub const CONTROL_ITERATION_ATTRIBUTE: &str = "lens.control.iteration";
/// How many iterations after the window's start this rank applied it (0:
/// on time; on [`CONTROL_CHANGE_EVENT`]).
pub const CONTROL_LATE_ATTRIBUTE: &str = "lens.control.late_iterations";

/// The per-rank metrics (`<PREFIX>_RANK_METRICS=1`), in docs order; the
/// hang gauge is recorded wherever the rank exports metrics.
pub const RANK_METRICS: &[MetricDef] = &[PHASE_TIME, ITERATIONS, HANG_SUSPECTED];

/// The goodput and MFU metrics (export rank), in docs order.
pub const GOODPUT_METRICS: &[MetricDef] = &[GOODPUT_TIME, GOODPUT_RATIO, MFU];

/// The attribute naming the phase of a [`PHASE_TIME`] point (and of the
/// hang event).
pub const PHASE_ATTRIBUTE: &str = "dl.phase";
/// The attribute of [`GOODPUT_TIME`] naming the bucket.
pub const BUCKET_ATTRIBUTE: &str = "dl.goodput.bucket";
/// The attribute lens-training stamps on every span it opens for an event,
/// valued by [`crate::events::Event::as_str`] (`iteration`,
/// `checkpoint_save`, ...), so that `lens analyze` recognizes the span
/// whatever its name.
pub const EVENT_ATTRIBUTE: &str = "dl.training.event";
/// The iteration of an event span (absolute, 1-based as logged).
pub const ITERATION_ATTRIBUTE: &str = "dl.training.iteration";
/// The `error.type` of an iteration span that did not complete (its step
/// failed, or panicked): `lens analyze` does not count its iteration.
pub const ABANDONED: &str = "abandoned";
/// Set (true) on a save or finalize span whose checkpoint became durable.
pub const DURABLE_ATTRIBUTE: &str = "dl.training.checkpoint.durable";
/// Set (true) on the save span of an asynchronous save (durable at a later
/// finalize).
pub const ASYNC_ATTRIBUTE: &str = "dl.training.checkpoint.async";
/// The hang event's attribute: seconds without a completed iteration.
pub const HANG_STALLED_ATTRIBUTE: &str = "dl.training.hang.stalled_s";

/// The variable suffixes read with the program's prefix (lens-core reads
/// them into `LensConfig`): `<PREFIX>_RANK_METRICS`.
pub const RANK_METRICS_VARIABLE: &str = "RANK_METRICS";
/// `<PREFIX>_HANG_TIMEOUT_S`.
pub const HANG_TIMEOUT_VARIABLE: &str = "HANG_TIMEOUT_S";
/// `<PREFIX>_PEAK_TFLOPS`.
pub const PEAK_TFLOPS_VARIABLE: &str = "PEAK_TFLOPS";

/// The generic span names of the event API's defaults
/// ([`crate::events::SpanNames::generic`]).
pub mod spans {
    /// One training iteration (group `step`).
    pub const ITERATION: &str = "dl.training.iteration";
    /// A checkpoint save's blocking part (group `checkpoint`).
    pub const CHECKPOINT_SAVE: &str = "dl.training.checkpoint.save";
    /// An asynchronous save's finalize (group `checkpoint`).
    pub const CHECKPOINT_FINALIZE: &str = "dl.training.checkpoint.finalize";
    /// A checkpoint load (group `load_checkpoint`).
    pub const CHECKPOINT_LOAD: &str = "dl.training.checkpoint.load";
    /// An evaluation (group `evaluate`).
    pub const EVALUATION: &str = "dl.training.evaluate";
    /// Startup, backdated from the launch stamp (group `job`).
    pub const STARTUP: &str = "dl.training.startup";
    /// The normal end (group `job`).
    pub const SHUTDOWN: &str = "dl.training.shutdown";
    /// The forward phase (group `forward_backward`).
    pub const FORWARD: &str = "dl.training.forward";
    /// The backward phase (group `forward_backward`).
    pub const BACKWARD: &str = "dl.training.backward";
    /// The optimizer step (group `optimizer`).
    pub const OPTIMIZER: &str = "dl.training.optimizer";
}

/// The names these replaced (SPEC A16 to A18), for reading exports written
/// before the rename; nothing records them any more.
pub mod legacy {
    /// `megatron.rank.phase_duration_ms`: gauge, mean ms per iteration in
    /// one phase over the last log interval.
    pub const PHASE_DURATION_MS: &str = "megatron.rank.phase_duration_ms";
    /// `megatron.rank.step_duration_ms`: gauge, mean step time over the
    /// last log interval.
    pub const STEP_DURATION_MS: &str = "megatron.rank.step_duration_ms";
    /// `megatron.rank.iteration`: gauge, the last completed iteration.
    pub const ITERATION: &str = "megatron.rank.iteration";
    /// `megatron.rank.hang_suspected`: gauge and span event.
    pub const HANG_SUSPECTED: &str = "megatron.rank.hang_suspected";
    /// `megatron.phase`: the phase attribute.
    pub const PHASE_ATTRIBUTE: &str = "megatron.phase";
    /// `megatron.goodput.time`, `megatron.goodput.ratio`, `megatron.training.mfu`.
    pub const GOODPUT_TIME: &str = "megatron.goodput.time";
    /// `megatron.goodput.ratio`.
    pub const GOODPUT_RATIO: &str = "megatron.goodput.ratio";
    /// `megatron.training.mfu`.
    pub const MFU: &str = "megatron.training.mfu";
    /// `megatron.goodput.bucket`: the bucket attribute.
    pub const BUCKET_ATTRIBUTE: &str = "megatron.goodput.bucket";
    /// The Megatron span names the goodput view recognizes in exports whose
    /// spans carry no `dl.training.event` stamp.
    pub mod spans {
        /// The startup root.
        pub const STARTUP: &str = "megatron.startup";
        /// The pre-startup launch phases.
        pub const PRE_STARTUP: &str = "pre_startup";
        /// One training iteration.
        pub const ITERATION: &str = "megatron.train.iteration";
        /// The training-loop interval.
        pub const TRAIN: &str = "megatron.train";
        /// The save itself (inside the exposed save).
        pub const SAVE: &str = "megatron.checkpoint.save";
        /// The save as the loop sees it.
        pub const EXPOSED_SAVE: &str = "megatron.checkpoint.exposed_save";
        /// An asynchronous save's finalize.
        pub const SAVE_FINALIZE: &str = "megatron.checkpoint.save.finalize";
        /// The finalize at the loop's exit.
        pub const EXIT_FINALIZE: &str = "megatron.checkpoint.exit_finalize";
        /// A checkpoint load.
        pub const LOAD: &str = "megatron.checkpoint.load";
        /// An evaluation.
        pub const EVALUATE: &str = "megatron.evaluate";
        /// The iteration attribute.
        pub const ITERATION_ATTRIBUTE: &str = "megatron.iteration";
        /// The finalized call index attribute.
        pub const CALL_INDEX_ATTRIBUTE: &str = "nvrx.call_idx";
    }
}
