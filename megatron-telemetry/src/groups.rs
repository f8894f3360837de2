//! Megatron's span groups and presets.
//!
//! Lens knows eight base groups (bits 0 to 7, [`LENS_GROUPS`]); Megatron adds
//! nine of its own (bits 8 to 16) and replaces the base presets with its own
//! four: `default`, `per_step`, `profiling` and `all`. There is no `full`
//! preset (the original's command-line help advertised one that never
//! existed).
//!
//! [`MEGATRON_CATALOG`] is the catalog that setup resolves the span-group spec
//! against (`--otel-span-groups`, `MEGATRON_OTEL_SPAN_GROUPS`), and
//! [`MegatronSpanGroup`] names all seventeen groups for the call sites that gate
//! a span on one. The catalog is pure data: it resolves specs in every build,
//! with or without the `otel` feature, so that every rank can validate the
//! configuration before anything is installed.
//!
//! Which spans each group controls is in [`crate::taxonomy`];
//! `docs/span-groups.md` lists them per group, generated from that table.
//!
//! ```
//! use megatron_telemetry::groups::{MEGATRON_CATALOG, MegatronSpanGroup};
//!
//! let groups = MEGATRON_CATALOG.resolve("default, microbatch").unwrap();
//! assert!(groups.contains(MegatronSpanGroup::FIRST_ITERATION));
//! assert!(groups.contains(MegatronSpanGroup::MICROBATCH));
//! assert!(!groups.contains(MegatronSpanGroup::STEP));
//! assert!(MEGATRON_CATALOG.resolve("full").is_err());
//! ```

use lens_fallbacks::groups::{GroupSet, LENS_GROUPS, Preset, SpanGroup, SpanGroupCatalog, UnknownSpanGroup};

/// The seventeen span groups Megatron gates its spans on, as associated
/// constants (the base eight of Lens re-exposed, then Megatron's own nine).
///
/// A unit struct, so that call sites read like the original
/// (`MegatronSpanGroup::MICROBATCH`).
///
/// ```
/// use megatron_telemetry::groups::MegatronSpanGroup;
/// use lens_fallbacks::groups::SpanGroup;
///
/// assert_eq!(MegatronSpanGroup::JOB, SpanGroup::JOB);
/// assert_eq!(MegatronSpanGroup::MICROBATCH.name(), "microbatch");
/// assert_eq!(MegatronSpanGroup::INFERENCE.bit(), 15);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct MegatronSpanGroup;

impl MegatronSpanGroup {
    /// `job` (bit 0): the structural spans: the startup trace and its
    /// backdated phases, the `megatron.train` interval spans, sniff tests and
    /// CUDA-graph capture. A handful per run plus one per checkpoint interval.
    pub const JOB: SpanGroup = SpanGroup::JOB;
    /// `checkpoint` (bit 1): checkpoint saving and finalisation. Note that
    /// `megatron.checkpoint.ft_heartbeat` and `megatron.checkpoint.save.finalize`
    /// fire every iteration, so `default` is not free of per-iteration spans.
    pub const CHECKPOINT: SpanGroup = SpanGroup::CHECKPOINT;
    /// `evaluate` (bit 2): evaluation runs and their steps.
    pub const EVALUATE: SpanGroup = SpanGroup::EVALUATE;
    /// `model_init` (bit 3): model and optimizer construction during startup.
    pub const MODEL_INIT: SpanGroup = SpanGroup::MODEL_INIT;
    /// `load_checkpoint` (bit 4): checkpoint loading during startup.
    pub const LOAD_CHECKPOINT: SpanGroup = SpanGroup::LOAD_CHECKPOINT;
    /// `step` (bit 5): one span per training iteration, plus the reporting
    /// spans around it (`megatron.train.iteration_report`, `.log`,
    /// `.params_norm`, `.gc_collect`) and `megatron.checkpoint.timers_log`.
    pub const STEP: SpanGroup = SpanGroup::STEP;
    /// `forward_backward` (bit 6): the forward and backward passes of an
    /// iteration, one span per iteration.
    pub const FORWARD_BACKWARD: SpanGroup = SpanGroup::FORWARD_BACKWARD;
    /// `optimizer` (bit 7): the optimizer step of an iteration.
    pub const OPTIMIZER: SpanGroup = SpanGroup::OPTIMIZER;

    /// `microbatch` (bit 8): the forward and backward step of every
    /// microbatch. Many spans per iteration; profiling only.
    pub const MICROBATCH: SpanGroup = SpanGroup::new("microbatch", 8);
    /// `layer` (bit 9): every transformer or Mamba layer's forward pass and
    /// its attention, MLP or mixer, per microbatch. The most voluminous group.
    pub const LAYER: SpanGroup = SpanGroup::new("layer", 9);
    /// `communication` (bit 10): pipeline-parallel point-to-point sends and
    /// receives, the linked receive spans, and gradient synchronisation.
    pub const COMMUNICATION: SpanGroup = SpanGroup::new("communication", 10);
    /// `activation_offload` (bit 11): fine-grained activation offload to the
    /// host and reload.
    pub const ACTIVATION_OFFLOAD: SpanGroup = SpanGroup::new("activation_offload", 11);
    /// `data_loading` (bit 12): building the data loaders during startup
    /// (`megatron.startup.dataloader`; the original's docs called it reserved).
    pub const DATA_LOADING: SpanGroup = SpanGroup::new("data_loading", 12);
    /// `first_iteration` (bit 13): the first iteration actually executed by
    /// this process (after a resume or skip), which captures warm-up costs,
    /// and the one-time re-enabling of the parameter-gather pre-hook.
    pub const FIRST_ITERATION: SpanGroup = SpanGroup::new("first_iteration", 13);
    /// `trace_region` (bit 14): reserved for spans that shadow the profiler's
    /// `trace_region(...)` markers (checkpoint, dataset and load sub-phases).
    /// Nothing emits it yet; typical use is `per_step,trace_region`.
    pub const TRACE_REGION: SpanGroup = SpanGroup::new("trace_region", 14);
    /// `inference` (bit 15): inference-server request spans, one trace per
    /// request (`megatron-train-sim serve`: the HTTP server span, the GenAI
    /// span and its queue, prefill and decode children).
    pub const INFERENCE: SpanGroup = SpanGroup::new("inference", 15);
    /// `inference_step` (bit 16): one root span per decode step of the
    /// inference server's running batch, linked to every request it serves.
    /// Many spans per request; in `profiling` and `all` only.
    pub const INFERENCE_STEP: SpanGroup = SpanGroup::new("inference_step", 16);

    /// All seventeen groups, bits 0 to 16.
    pub const ALL_GROUPS: GroupSet = GroupSet::of(&MEGATRON_GROUPS);

    /// Resolves a span-group spec against [`MEGATRON_CATALOG`]; the grammar is
    /// that of [`SpanGroupCatalog::resolve`].
    ///
    /// ```
    /// use megatron_telemetry::groups::MegatronSpanGroup;
    ///
    /// assert_eq!(MegatronSpanGroup::resolve("all").unwrap(), MegatronSpanGroup::ALL_GROUPS);
    /// let err = MegatronSpanGroup::resolve("per-step").unwrap_err();
    /// assert_eq!(err.suggestion, Some("per_step"));
    /// ```
    pub fn resolve(spec: &str) -> Result<GroupSet, UnknownSpanGroup> {
        MEGATRON_CATALOG.resolve(spec)
    }
}

/// Megatron's own nine groups, bits 8 to 16, in bit order.
pub const MEGATRON_ONLY_GROUPS: [SpanGroup; 9] = [
    MegatronSpanGroup::MICROBATCH,
    MegatronSpanGroup::LAYER,
    MegatronSpanGroup::COMMUNICATION,
    MegatronSpanGroup::ACTIVATION_OFFLOAD,
    MegatronSpanGroup::DATA_LOADING,
    MegatronSpanGroup::FIRST_ITERATION,
    MegatronSpanGroup::TRACE_REGION,
    MegatronSpanGroup::INFERENCE,
    MegatronSpanGroup::INFERENCE_STEP,
];

/// All seventeen groups in bit order: [`LENS_GROUPS`], then
/// [`MEGATRON_ONLY_GROUPS`].
pub const MEGATRON_GROUPS: [SpanGroup; 17] = [
    LENS_GROUPS[0],
    LENS_GROUPS[1],
    LENS_GROUPS[2],
    LENS_GROUPS[3],
    LENS_GROUPS[4],
    LENS_GROUPS[5],
    LENS_GROUPS[6],
    LENS_GROUPS[7],
    MEGATRON_ONLY_GROUPS[0],
    MEGATRON_ONLY_GROUPS[1],
    MEGATRON_ONLY_GROUPS[2],
    MEGATRON_ONLY_GROUPS[3],
    MEGATRON_ONLY_GROUPS[4],
    MEGATRON_ONLY_GROUPS[5],
    MEGATRON_ONLY_GROUPS[6],
    MEGATRON_ONLY_GROUPS[7],
    MEGATRON_ONLY_GROUPS[8],
];

/// Preset `default`: job, checkpoint, evaluate, first_iteration, inference.
/// The production setting: structure, checkpoints and evaluation, with few
/// spans per iteration.
pub const PRESET_DEFAULT: Preset = Preset::new(
    "default",
    &[
        MegatronSpanGroup::JOB,
        MegatronSpanGroup::CHECKPOINT,
        MegatronSpanGroup::EVALUATE,
        MegatronSpanGroup::FIRST_ITERATION,
        MegatronSpanGroup::INFERENCE,
    ],
);

/// Preset `per_step`: `default` plus model_init, load_checkpoint, step,
/// forward_backward, optimizer, communication and data_loading. A handful of
/// spans per iteration (communication adds some per microbatch under
/// pipeline parallelism).
pub const PRESET_PER_STEP: Preset = Preset::new(
    "per_step",
    &[
        MegatronSpanGroup::JOB,
        MegatronSpanGroup::CHECKPOINT,
        MegatronSpanGroup::EVALUATE,
        MegatronSpanGroup::MODEL_INIT,
        MegatronSpanGroup::LOAD_CHECKPOINT,
        MegatronSpanGroup::STEP,
        MegatronSpanGroup::FORWARD_BACKWARD,
        MegatronSpanGroup::OPTIMIZER,
        MegatronSpanGroup::COMMUNICATION,
        MegatronSpanGroup::DATA_LOADING,
        MegatronSpanGroup::FIRST_ITERATION,
        MegatronSpanGroup::INFERENCE,
    ],
);

/// Preset `profiling`: every group, including the per-microbatch and
/// per-layer ones. For short profiling runs only.
pub const PRESET_PROFILING: Preset = Preset::new("profiling", &MEGATRON_GROUPS);

/// Preset `all`: every group (the same set as `profiling`).
pub const PRESET_ALL: Preset = Preset::new("all", &MEGATRON_GROUPS);

/// Megatron's presets, exactly these four.
pub const MEGATRON_PRESETS: [Preset; 4] = [PRESET_DEFAULT, PRESET_PER_STEP, PRESET_PROFILING, PRESET_ALL];

/// The Megatron catalog: seventeen groups and four presets. Setup resolves the
/// span-group spec against it.
pub const MEGATRON_CATALOG: SpanGroupCatalog = SpanGroupCatalog::new("megatron", &MEGATRON_GROUPS, &MEGATRON_PRESETS);

/// One line on what a group covers, for docs and help texts; `None` for a
/// group outside [`MEGATRON_CATALOG`].
///
/// ```
/// use megatron_telemetry::groups::{MegatronSpanGroup, summary};
///
/// assert!(summary(MegatronSpanGroup::LAYER).unwrap().contains("layer"));
/// ```
pub fn summary(group: SpanGroup) -> Option<&'static str> {
    let text = match group.bit() {
        0 => "Structural spans: the startup trace and its phases, the `megatron.train` interval spans, sniff tests.",
        1 => "Checkpoint saving and finalisation (two spans fire every iteration).",
        2 => "Evaluation runs and their steps.",
        3 => "Model and optimizer construction during startup.",
        4 => "Checkpoint loading during startup.",
        5 => "One span per training iteration, and the reporting spans around it.",
        6 => "The forward and backward passes of an iteration.",
        7 => "The optimizer step of an iteration.",
        8 => "The forward and backward step of every microbatch.",
        9 => "Every layer's forward pass and its attention, MLP or mixer, per microbatch.",
        10 => "Pipeline-parallel sends and receives, linked receive spans, gradient synchronisation.",
        11 => "Fine-grained activation offload and reload.",
        12 => "Building the data loaders during startup.",
        13 => "The first iteration this process executes (warm-up), and one-time hooks after it.",
        14 => "Reserved: spans shadowing the profiler's `trace_region` markers (no emitter yet).",
        15 => "Inference-server requests: the HTTP server span, the GenAI span, its queue, prefill and decode.",
        16 => "One span per decode step of the inference server's batch, linked to the requests it serves.",
        _ => return None,
    };
    Some(text)
}

/// The presets that contain `group`, in declaration order.
pub fn presets_containing(group: SpanGroup) -> Vec<&'static str> {
    MEGATRON_CATALOG.presets().iter().filter(|p| p.groups.contains(group)).map(|p| p.name).collect()
}
