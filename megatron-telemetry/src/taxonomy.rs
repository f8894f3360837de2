//! The span taxonomy as data: every span Megatron emits, with its group,
//! goodput flag, usual parent, frequency and attribute keys (the
//! original's, and the pipeline-parallel linked spans it documented but never emitted).
//!
//! The original's docs drifted from its code: they described
//! span names that were renamed long before. Here the names are `pub const`
//! items collected in one table, [`SPANS`]; the lifecycle and the call sites
//! use these constants, `docs/span-taxonomy.md` is generated from the table
//! (`cargo xtask codegen`, checked in CI with `--check`), and tests check that
//! the names form a tree: every name but the literal `pre_startup` starts with
//! `megatron.`, names are unique, and every parent named is in the table, so
//! that a name prefix selects a subtree in a trace viewer.
//!
//! The structure of a run, in brief: `pre_startup` (optional, backdated) and
//! `megatron.startup` each root a trace of their own; every checkpoint
//! interval roots a fresh `megatron.train` trace, linked to the one before;
//! the per-iteration spans are children of the current `megatron.train`.
//! The inference server (`megatron-train-sim serve`) roots one trace per
//! request (its HTTP server span, or the caller's trace through
//! `traceparent`) and one per decode step (`megatron.inference.step`).
//!
//! ```
//! use megatron_telemetry::taxonomy::{self, SPANS};
//! use megatron_telemetry::groups::MegatronSpanGroup;
//!
//! let iteration = taxonomy::find("megatron.train.iteration").unwrap();
//! assert_eq!(iteration.group, MegatronSpanGroup::STEP);
//! assert_eq!(iteration.parent, Some(taxonomy::TRAIN.name));
//! assert!(iteration.attributes.contains(&taxonomy::attr::ITERATION));
//! // Besides `pre_startup`, only the inference server's HTTP and GenAI spans
//! // are not `megatron.` paths: their names are the semantic conventions'
//! // templates (`{http.request.method} {http.route}`), filled in per request.
//! assert!(SPANS.iter().all(|s| s.name == "pre_startup" || s.name.starts_with("megatron.") || s.name.starts_with('{')));
//! ```

use lens_fallbacks::groups::SpanGroup;

use crate::groups::MegatronSpanGroup as G;
use Frequency::*;
use attr::*;

/// Span attribute keys that Megatron's spans carry.
///
/// Iteration numbers and tags are span attributes, never metric attributes
/// (a metric attribute per iteration is an unbounded number of series).
pub mod attr {
    /// `megatron.iteration` (int): the training iteration a span belongs to.
    pub const ITERATION: &str = "megatron.iteration";
    /// `megatron.skipped` (bool): the iteration's optimizer step was skipped
    /// (NaN or inf in the gradients). Set after the step.
    pub const SKIPPED: &str = "megatron.skipped";
    /// `num_microbatches` (int): the microbatches in one forward-backward
    /// schedule. A bare key, without a `megatron.` prefix, as the original
    /// emits it (its docs said `megatron.num_microbatches`).
    pub const NUM_MICROBATCHES: &str = "num_microbatches";
    /// `megatron.update_successful` (bool): the optimizer applied its update.
    pub const UPDATE_SUCCESSFUL: &str = "megatron.update_successful";
    /// `megatron.layer_number` (int): the layer's number in the model.
    pub const LAYER_NUMBER: &str = "megatron.layer_number";
    /// `megatron.eval_iteration` (int): the step within an evaluation run.
    pub const EVAL_ITERATION: &str = "megatron.eval_iteration";
    /// `megatron.eval_iters` (int): the steps an evaluation run took.
    pub const EVAL_ITERS: &str = "megatron.eval_iters";
    /// `megatron.sniff_test.tag` (string): `before training`, or
    /// `iteration` and the iteration number right-aligned in seven columns.
    pub const SNIFF_TEST_TAG: &str = "megatron.sniff_test.tag";
    /// `megatron.model_type` (string): the model type, on the startup span.
    pub const MODEL_TYPE: &str = "megatron.model_type";
    /// `nvrx.call_idx` (int, or a list of ints at finalisation): the async
    /// checkpoint call(s), matching the NVRx worker's `nvrx.checkpoint.*` spans.
    pub const NVRX_CALL_IDX: &str = "nvrx.call_idx";
    /// `is_goodput_span` (bool, always `true` when present): the span is a
    /// goodput span (see [`super::SpanDef::goodput`]); collectors route on it.
    pub const IS_GOODPUT_SPAN: &str = "is_goodput_span";
    /// `dl.pipeline_parallel.rank` (int): the pipeline stage of the rank that
    /// sent the message a linked receive span stands for.
    pub const PIPELINE_PARALLEL_RANK: &str = "dl.pipeline_parallel.rank";
    /// `dl.microbatch_id` (int): the microbatch a linked receive span carries.
    pub const MICROBATCH_ID: &str = "dl.microbatch_id";
    /// `megatron.inference.batch_size` (int): the requests in one decode
    /// step of the inference server.
    pub const INFERENCE_BATCH_SIZE: &str = "megatron.inference.batch_size";

    /// Every key above.
    pub const ALL: &[&str] = &[
        ITERATION,
        SKIPPED,
        NUM_MICROBATCHES,
        UPDATE_SUCCESSFUL,
        LAYER_NUMBER,
        EVAL_ITERATION,
        EVAL_ITERS,
        SNIFF_TEST_TAG,
        MODEL_TYPE,
        NVRX_CALL_IDX,
        IS_GOODPUT_SPAN,
        PIPELINE_PARALLEL_RANK,
        MICROBATCH_ID,
        INFERENCE_BATCH_SIZE,
    ];
}

/// How often a span typically occurs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frequency {
    /// Once per process lifetime (startup).
    OncePerRun,
    /// Once per checkpoint interval (`megatron.train`).
    OncePerInterval,
    /// Once per training loop (warm-up, first iteration, loop exit).
    OncePerLoop,
    /// Every training iteration.
    EveryIteration,
    /// Once or a few times per microbatch.
    PerMicrobatch,
    /// Once per layer per microbatch.
    PerLayer,
    /// Once per checkpoint save.
    PerCheckpoint,
    /// Once per evaluation run (every evaluation interval).
    PerEvaluation,
    /// Once per evaluation step.
    PerEvalStep,
    /// At an interval set by a command-line flag (sniff tests, manual GC).
    Periodic,
    /// Once per inference-server request.
    PerRequest,
    /// Once per decode step of the inference server's running batch.
    PerDecodeStep,
}

impl Frequency {
    /// The frequency in words, as the docs print it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Frequency::OncePerRun => "once per run",
            Frequency::OncePerInterval => "once per checkpoint interval",
            Frequency::OncePerLoop => "once per training loop",
            Frequency::EveryIteration => "every iteration",
            Frequency::PerMicrobatch => "per microbatch",
            Frequency::PerLayer => "per layer per microbatch",
            Frequency::PerCheckpoint => "per checkpoint save",
            Frequency::PerEvaluation => "per evaluation",
            Frequency::PerEvalStep => "per evaluation step",
            Frequency::Periodic => "periodic (flag interval)",
            Frequency::PerRequest => "per request",
            Frequency::PerDecodeStep => "per decode step",
        }
    }
}

/// How a ratio sampler treats a span: the lifecycle reads it from
/// the table and gives the span the matching marker, so no call site needs
/// to know about sampling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sampling {
    /// Never sampled away on a rank that records spans
    /// (`lens.sampling.structural = true`): startup and its children, the
    /// intervals, checkpoint save and load with their children, evaluation,
    /// the once-per-loop warm-up and closing spans. Goodput accounting and
    /// dashboards depend on them.
    Structural,
    /// Emitted every iteration or every log interval, outside the iteration
    /// span: carries the sampling key of its iteration (`lens.sampling.key`),
    /// so it is kept exactly when that iteration is, on every rank.
    Iteration,
    /// Inside a keyed span (the iteration's subtree): follows its parent's
    /// decision. When the parent's group is off, so that the span would hang
    /// directly below the interval, it carries its iteration's key itself.
    Parent,
    /// A server's root (a request, an engine step): the configured sampler
    /// decides it by its trace id, or by an incoming `traceparent`'s flag,
    /// as any trace. Only training is structural.
    Sampler,
}

impl Sampling {
    /// The sampling in words, as the docs print it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Sampling::Structural => "always kept",
            Sampling::Iteration => "its iteration's key",
            Sampling::Parent => "follows its parent",
            Sampling::Sampler => "the sampler's",
        }
    }

    /// The default for a span of `frequency` whose usual parent is `parent`:
    /// roots and everything once per run, interval, checkpoint, evaluation or
    /// loop are structural; spans of every iteration or of a flag's interval
    /// are keyed by their iteration when they hang directly below
    /// `megatron.train`, and follow their parent below it; per-microbatch and
    /// per-layer spans follow their parent.
    const fn default_for(frequency: Frequency, parent: Option<&SpanDef>) -> Sampling {
        let below_interval = match (parent, frequency) {
            (None, Frequency::PerRequest | Frequency::PerDecodeStep) => return Sampling::Sampler,
            (None, _) => return Sampling::Structural,
            (Some(p), _) => p.parent.is_none(),
        };
        match frequency {
            Frequency::EveryIteration | Frequency::Periodic if below_interval => Sampling::Iteration,
            Frequency::EveryIteration
            | Frequency::Periodic
            | Frequency::PerMicrobatch
            | Frequency::PerLayer
            | Frequency::PerRequest
            | Frequency::PerDecodeStep => Sampling::Parent,
            Frequency::OncePerRun
            | Frequency::OncePerInterval
            | Frequency::OncePerLoop
            | Frequency::PerCheckpoint
            | Frequency::PerEvaluation
            | Frequency::PerEvalStep => Sampling::Structural,
        }
    }
}

/// One span of the taxonomy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanDef {
    /// The span name, a tree path (`megatron.train.iteration.optimizer`).
    pub name: &'static str,
    /// The span group that gates it.
    pub group: SpanGroup,
    /// Whether the span carries `is_goodput_span = true`: spans that count
    /// in a goodput report (startup, training, checkpointing). Evaluation,
    /// the per-microbatch, per-layer and communication spans and the two
    /// step sub-spans do not.
    pub goodput: bool,
    /// The name of its usual parent span, or `None` for a trace root.
    pub parent: Option<&'static str>,
    /// How often it typically occurs.
    pub frequency: Frequency,
    /// How and when it is emitted ("backdated", "only with ...", what it wraps).
    pub kind_note: &'static str,
    /// The attribute keys it carries (besides `is_goodput_span`).
    pub attributes: &'static [&'static str],
    /// How a ratio sampler treats it (see [`Sampling`]).
    pub sampling: Sampling,
    /// The group of its usual parent (`None` for a root), so that a
    /// [`Sampling::Parent`] span knows with one load whether its parent is
    /// recorded.
    pub parent_group: Option<SpanGroup>,
}

const fn span(
    name: &'static str,
    group: SpanGroup,
    goodput: bool,
    parent: Option<&'static SpanDef>,
    frequency: Frequency,
    kind_note: &'static str,
    attributes: &'static [&'static str],
) -> SpanDef {
    let sampling = Sampling::default_for(frequency, parent);
    let (parent, parent_group) = match parent {
        Some(p) => (Some(p.name), Some(p.group)),
        None => (None, None),
    };
    SpanDef { name, group, goodput, parent, frequency, kind_note, attributes, sampling, parent_group }
}

impl SpanDef {
    /// This span with `sampling` instead of the default for its frequency.
    const fn sampled(mut self, sampling: Sampling) -> SpanDef {
        self.sampling = sampling;
        self
    }
}

// ---- Trace A and B: startup -------------------------------------------------

/// `pre_startup`: the wait between the SLURM job start and the launch script.
pub const PRE_STARTUP: SpanDef = span(
    "pre_startup",
    G::JOB,
    true,
    None,
    OncePerRun,
    "backdated, own root trace: [SLURM job start, launch-script start]; only when both stamps exist and are ordered (first cycle, not under NVRx)",
    &[],
);
/// `megatron.startup`: the root of the startup trace.
pub const STARTUP: SpanDef = span(
    "megatron.startup",
    G::JOB,
    true,
    None,
    OncePerRun,
    "root of the startup trace (a child of the incoming TRACEPARENT context when there is one); starts at launch-script start when the launch phases fold, else at program start; ends just before the training loop (a server's ends when it is ready for requests, without children)",
    &[MODEL_TYPE],
);
/// `megatron.startup.launch_script`.
pub const STARTUP_LAUNCH_SCRIPT: SpanDef = span(
    "megatron.startup.launch_script",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "backdated: [launch-script start, pre-srun]; only when the launch phases fold",
    &[],
);
/// `megatron.startup.container_load`.
pub const STARTUP_CONTAINER_LOAD: SpanDef = span(
    "megatron.startup.container_load",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "backdated: [pre-srun, program start]; only when the launch phases fold",
    &[],
);
/// `megatron.startup.imports`.
pub const STARTUP_IMPORTS: SpanDef = span(
    "megatron.startup.imports",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "backdated: [program start, main entry]",
    &[],
);
/// `megatron.startup.arg_parse`.
pub const STARTUP_ARG_PARSE: SpanDef = span(
    "megatron.startup.arg_parse",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "backdated: [main entry, pretrain entry]",
    &[],
);
/// `megatron.startup.inprocess_setup`.
pub const STARTUP_INPROCESS_SETUP: SpanDef = span(
    "megatron.startup.inprocess_setup",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "backdated: [pretrain entry, in-process restart setup done]",
    &[],
);
/// `megatron.startup.in_job_setup`.
pub const STARTUP_IN_JOB_SETUP: SpanDef = span(
    "megatron.startup.in_job_setup",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "backdated: [in-process setup done, fault-tolerance setup done]",
    &[],
);
/// `megatron.startup.initialize_megatron`.
pub const STARTUP_INITIALIZE_MEGATRON: SpanDef = span(
    "megatron.startup.initialize_megatron",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "backdated: [fault-tolerance setup done, distributed initialisation done]",
    &[],
);
/// `megatron.startup.jit_fusion_options`.
pub const STARTUP_JIT_FUSION_OPTIONS: SpanDef = span(
    "megatron.startup.jit_fusion_options",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "backdated: [distributed initialisation done, JIT fusion options set]",
    &[],
);
/// `megatron.startup.model_init`.
pub const STARTUP_MODEL_INIT: SpanDef = span(
    "megatron.startup.model_init",
    G::MODEL_INIT,
    true,
    Some(&STARTUP),
    OncePerRun,
    "live: wraps model and optimizer construction",
    &[],
);
/// `megatron.checkpoint.load`.
pub const CHECKPOINT_LOAD: SpanDef = span(
    "megatron.checkpoint.load",
    G::LOAD_CHECKPOINT,
    true,
    Some(&STARTUP_MODEL_INIT),
    OncePerRun,
    "live: loading a checkpoint inside model and optimizer construction (resume or pretrained weights)",
    &[],
);
/// `megatron.checkpoint.load.io_read`.
pub const CHECKPOINT_LOAD_IO_READ: SpanDef = span(
    "megatron.checkpoint.load.io_read",
    G::LOAD_CHECKPOINT,
    true,
    Some(&CHECKPOINT_LOAD),
    OncePerRun,
    "live: the storage read of the base checkpoint",
    &[],
);
/// `megatron.startup.dataloader`.
pub const STARTUP_DATALOADER: SpanDef = span(
    "megatron.startup.dataloader",
    G::DATA_LOADING,
    true,
    Some(&STARTUP),
    OncePerRun,
    "live: builds the train, validation and test data iterators",
    &[],
);
/// `megatron.startup.sniff_test`.
pub const STARTUP_SNIFF_TEST: SpanDef = span(
    "megatron.startup.sniff_test",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "live: GPU sniff test before training; only with a sniff-test interval (tag `before training`)",
    &[SNIFF_TEST_TAG],
);
/// `megatron.startup.weight_hash_check`.
pub const STARTUP_WEIGHT_HASH_CHECK: SpanDef = span(
    "megatron.startup.weight_hash_check",
    G::JOB,
    true,
    Some(&STARTUP),
    OncePerRun,
    "live: cross-replica weight-hash check; only with its interval flag",
    &[],
);

// ---- Trace C_n: one per checkpoint interval ---------------------------------

/// `megatron.train`: the root of one checkpoint interval's trace.
pub const TRAIN: SpanDef = span(
    "megatron.train",
    G::JOB,
    true,
    None,
    OncePerInterval,
    "root of a fresh trace per checkpoint interval (one for the whole loop without a save interval), linked to the previous interval, the first to startup",
    &[],
);
/// `megatron.checkpoint.ft_heartbeat`.
pub const CHECKPOINT_FT_HEARTBEAT: SpanDef = span(
    "megatron.checkpoint.ft_heartbeat",
    G::CHECKPOINT,
    true,
    Some(&TRAIN),
    EveryIteration,
    "wraps the fault-tolerance checkpointing-start hook",
    &[],
);
/// `megatron.checkpoint.save.finalize`.
pub const CHECKPOINT_SAVE_FINALIZE: SpanDef = span(
    "megatron.checkpoint.save.finalize",
    G::CHECKPOINT,
    true,
    Some(&TRAIN),
    EveryIteration,
    "non-blocking finalisation of async saves; `nvrx.call_idx` (a list: the call indices finalised) when something was finalised",
    &[NVRX_CALL_IDX],
);
/// `megatron.train.cuda_graph_capture`.
pub const TRAIN_CUDA_GRAPH_CAPTURE: SpanDef = span(
    "megatron.train.cuda_graph_capture",
    G::JOB,
    true,
    Some(&TRAIN),
    OncePerLoop,
    "CUDA-graph capture at the warm-up boundary",
    &[ITERATION],
);
/// `megatron.train.first_iteration`.
pub const TRAIN_FIRST_ITERATION: SpanDef = span(
    "megatron.train.first_iteration",
    G::FIRST_ITERATION,
    true,
    Some(&TRAIN),
    OncePerLoop,
    "wraps the first iteration this process executes (after a resume or skip)",
    &[ITERATION],
)
.sampled(Sampling::Iteration);
/// `megatron.train.iteration`.
pub const TRAIN_ITERATION: SpanDef = span(
    "megatron.train.iteration",
    G::STEP,
    true,
    Some(&TRAIN),
    EveryIteration,
    "one training step (a child of `megatron.train.first_iteration` the first time); `megatron.skipped` set after the step; a step that failed (a peer died) ends it with `error.type` `abandoned` and an error status, and its iteration is not counted",
    &[ITERATION, SKIPPED],
);
/// `megatron.train.iteration.forward_backward`.
pub const TRAIN_ITERATION_FORWARD_BACKWARD: SpanDef = span(
    "megatron.train.iteration.forward_backward",
    G::FORWARD_BACKWARD,
    false,
    Some(&TRAIN_ITERATION),
    EveryIteration,
    "the forward-backward schedule over all microbatches",
    &[NUM_MICROBATCHES],
);
/// `megatron.microbatch.forward`.
pub const MICROBATCH_FORWARD: SpanDef = span(
    "megatron.microbatch.forward",
    G::MICROBATCH,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    PerMicrobatch,
    "forward step of one microbatch (in evaluation, under `megatron.evaluate.step`)",
    &[],
);
/// `megatron.microbatch.backward`.
pub const MICROBATCH_BACKWARD: SpanDef = span(
    "megatron.microbatch.backward",
    G::MICROBATCH,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    PerMicrobatch,
    "backward step of one microbatch",
    &[],
);
/// `megatron.layer.forward`.
pub const LAYER_FORWARD: SpanDef = span(
    "megatron.layer.forward",
    G::LAYER,
    false,
    Some(&MICROBATCH_FORWARD),
    PerLayer,
    "forward pass of one transformer or Mamba layer",
    &[LAYER_NUMBER],
);
/// `megatron.layer.self_attention`.
pub const LAYER_SELF_ATTENTION: SpanDef = span(
    "megatron.layer.self_attention",
    G::LAYER,
    false,
    Some(&LAYER_FORWARD),
    PerLayer,
    "self-attention of a transformer layer",
    &[],
);
/// `megatron.layer.mlp`.
pub const LAYER_MLP: SpanDef =
    span("megatron.layer.mlp", G::LAYER, false, Some(&LAYER_FORWARD), PerLayer, "MLP of a transformer layer", &[]);
/// `megatron.layer.mamba`.
pub const LAYER_MAMBA: SpanDef =
    span("megatron.layer.mamba", G::LAYER, false, Some(&LAYER_FORWARD), PerLayer, "mixer of a Mamba layer", &[]);
/// `megatron.p2p.recv_forward`.
pub const P2P_RECV_FORWARD: SpanDef = span(
    "megatron.p2p.recv_forward",
    G::COMMUNICATION,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    PerMicrobatch,
    "pipeline-parallel receive of activations from the previous stage (in evaluation, under `megatron.evaluate.step`)",
    &[],
);
/// `megatron.p2p.recv_backward`.
pub const P2P_RECV_BACKWARD: SpanDef = span(
    "megatron.p2p.recv_backward",
    G::COMMUNICATION,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    PerMicrobatch,
    "pipeline-parallel receive of gradients from the next stage",
    &[],
);
/// `megatron.p2p.send_forward`.
pub const P2P_SEND_FORWARD: SpanDef = span(
    "megatron.p2p.send_forward",
    G::COMMUNICATION,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    PerMicrobatch,
    "pipeline-parallel send of activations to the next stage; its context travels with the message (in evaluation, under `megatron.evaluate.step`)",
    &[],
);
/// `megatron.p2p.send_backward`.
pub const P2P_SEND_BACKWARD: SpanDef = span(
    "megatron.p2p.send_backward",
    G::COMMUNICATION,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    PerMicrobatch,
    "pipeline-parallel send of gradients to the previous stage; its context travels with the message",
    &[],
);
/// `megatron.pp.recv_forward.linked` (documented by the original but never
/// implemented).
pub const PP_RECV_FORWARD_LINKED: SpanDef = span(
    "megatron.pp.recv_forward.linked",
    G::COMMUNICATION,
    false,
    Some(&P2P_RECV_FORWARD),
    PerMicrobatch,
    "linked to the sending rank's `megatron.p2p.send_forward` span, whose context travels inside the point-to-point message; `dl.pipeline_parallel.rank` is the sending stage's, not this rank's",
    &[PIPELINE_PARALLEL_RANK, MICROBATCH_ID],
);
/// `megatron.pp.recv_backward.linked` (documented by the original but never emitted).
pub const PP_RECV_BACKWARD_LINKED: SpanDef = span(
    "megatron.pp.recv_backward.linked",
    G::COMMUNICATION,
    false,
    Some(&P2P_RECV_BACKWARD),
    PerMicrobatch,
    "linked to the sending rank's `megatron.p2p.send_backward` span, whose context travels inside the point-to-point message; `dl.pipeline_parallel.rank` is the sending stage's, not this rank's",
    &[PIPELINE_PARALLEL_RANK, MICROBATCH_ID],
);
/// `megatron.grad_sync.start`.
pub const GRAD_SYNC_START: SpanDef = span(
    "megatron.grad_sync.start",
    G::COMMUNICATION,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    EveryIteration,
    "starts the data-parallel gradient reduction",
    &[],
);
/// `megatron.grad_sync.finish`.
pub const GRAD_SYNC_FINISH: SpanDef = span(
    "megatron.grad_sync.finish",
    G::COMMUNICATION,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    EveryIteration,
    "waits for the data-parallel gradient reduction",
    &[],
);
/// `megatron.activation.offload`.
pub const ACTIVATION_OFFLOAD: SpanDef = span(
    "megatron.activation.offload",
    G::ACTIVATION_OFFLOAD,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    PerMicrobatch,
    "fine-grained activation offload to host memory",
    &[],
);
/// `megatron.activation.reload`.
pub const ACTIVATION_RELOAD: SpanDef = span(
    "megatron.activation.reload",
    G::ACTIVATION_OFFLOAD,
    false,
    Some(&TRAIN_ITERATION_FORWARD_BACKWARD),
    PerMicrobatch,
    "reload of offloaded activations",
    &[],
);
/// `megatron.train.iteration.optimizer`.
pub const TRAIN_ITERATION_OPTIMIZER: SpanDef = span(
    "megatron.train.iteration.optimizer",
    G::OPTIMIZER,
    false,
    Some(&TRAIN_ITERATION),
    EveryIteration,
    "the optimizer step",
    &[UPDATE_SUCCESSFUL],
);
/// `megatron.train.forward_pre_hook`.
pub const TRAIN_FORWARD_PRE_HOOK: SpanDef = span(
    "megatron.train.forward_pre_hook",
    G::FIRST_ITERATION,
    true,
    Some(&TRAIN),
    OncePerLoop,
    "re-enables the parameter-gather pre-hook after the first step",
    &[],
)
.sampled(Sampling::Iteration);
/// `megatron.train.iteration_report`.
pub const TRAIN_ITERATION_REPORT: SpanDef = span(
    "megatron.train.iteration_report",
    G::STEP,
    true,
    Some(&TRAIN),
    EveryIteration,
    "super-span over the per-iteration reporting",
    &[],
);
/// `megatron.train.params_norm`.
pub const TRAIN_PARAMS_NORM: SpanDef = span(
    "megatron.train.params_norm",
    G::STEP,
    true,
    Some(&TRAIN_ITERATION_REPORT),
    EveryIteration,
    "parameter-norm computation; only with `--log-params-norm`",
    &[],
);
/// `megatron.train.log`.
pub const TRAIN_LOG: SpanDef = span(
    "megatron.train.log",
    G::STEP,
    true,
    Some(&TRAIN_ITERATION_REPORT),
    EveryIteration,
    "wraps the training log, where the `megatron.training.*` metrics are recorded",
    &[],
);
/// `megatron.evaluate`.
pub const EVALUATE: SpanDef = span(
    "megatron.evaluate",
    G::EVALUATE,
    false,
    Some(&TRAIN),
    PerEvaluation,
    "one evaluation run; post-loop validation and test runs root their own traces",
    &[EVAL_ITERS],
);
/// `megatron.evaluate.step`.
pub const EVALUATE_STEP: SpanDef = span(
    "megatron.evaluate.step",
    G::EVALUATE,
    false,
    Some(&EVALUATE),
    PerEvalStep,
    "one evaluation step",
    &[EVAL_ITERATION],
);
/// `megatron.train.sniff_test`.
pub const TRAIN_SNIFF_TEST: SpanDef = span(
    "megatron.train.sniff_test",
    G::JOB,
    true,
    Some(&TRAIN),
    Periodic,
    "GPU sniff test at its interval (tag `iteration` and the number right-aligned in 8 characters, as Megatron writes it: `iteration       6`)",
    &[SNIFF_TEST_TAG],
);
/// `megatron.train.gc_collect`.
pub const TRAIN_GC_COLLECT: SpanDef = span(
    "megatron.train.gc_collect",
    G::STEP,
    true,
    Some(&TRAIN),
    Periodic,
    "manual garbage collection at the `--manual-gc` interval",
    &[],
);
/// `megatron.checkpoint.exposed_save`.
pub const CHECKPOINT_EXPOSED_SAVE: SpanDef = span(
    "megatron.checkpoint.exposed_save",
    G::CHECKPOINT,
    true,
    Some(&TRAIN),
    PerCheckpoint,
    "the save as the training loop sees it; parents the save spans",
    &[ITERATION],
);
/// `megatron.checkpoint.reclaim_memory`.
pub const CHECKPOINT_RECLAIM_MEMORY: SpanDef = span(
    "megatron.checkpoint.reclaim_memory",
    G::CHECKPOINT,
    true,
    Some(&CHECKPOINT_EXPOSED_SAVE),
    PerCheckpoint,
    "frees overlap buffers before saving",
    &[],
);
/// `megatron.checkpoint.save`.
pub const CHECKPOINT_SAVE: SpanDef = span(
    "megatron.checkpoint.save",
    G::CHECKPOINT,
    true,
    Some(&CHECKPOINT_EXPOSED_SAVE),
    PerCheckpoint,
    "the checkpoint save; `nvrx.call_idx` (an integer: its call index) when an async save was scheduled",
    &[ITERATION, NVRX_CALL_IDX],
);
/// `megatron.checkpoint.save.state_dict`.
pub const CHECKPOINT_SAVE_STATE_DICT: SpanDef = span(
    "megatron.checkpoint.save.state_dict",
    G::CHECKPOINT,
    true,
    Some(&CHECKPOINT_SAVE),
    PerCheckpoint,
    "builds the state dict",
    &[],
);
/// `megatron.checkpoint.save.io_write`.
pub const CHECKPOINT_SAVE_IO_WRITE: SpanDef = span(
    "megatron.checkpoint.save.io_write",
    G::CHECKPOINT,
    true,
    Some(&CHECKPOINT_SAVE),
    PerCheckpoint,
    "the distributed-checkpoint write (or its scheduling, for async saves, with their `nvrx.call_idx`)",
    &[NVRX_CALL_IDX],
);
/// `megatron.checkpoint.report_memory`.
pub const CHECKPOINT_REPORT_MEMORY: SpanDef = span(
    "megatron.checkpoint.report_memory",
    G::CHECKPOINT,
    true,
    Some(&CHECKPOINT_EXPOSED_SAVE),
    PerCheckpoint,
    "memory report; first few checkpoints only",
    &[],
);
/// `megatron.checkpoint.gc_collect`.
pub const CHECKPOINT_GC_COLLECT: SpanDef = span(
    "megatron.checkpoint.gc_collect",
    G::CHECKPOINT,
    true,
    Some(&CHECKPOINT_EXPOSED_SAVE),
    PerCheckpoint,
    "garbage collection after saving; fp8 only",
    &[],
);
/// `megatron.checkpoint.timers_log` (group `step` despite its name, as in
/// the original).
pub const CHECKPOINT_TIMERS_LOG: SpanDef = span(
    "megatron.checkpoint.timers_log",
    G::STEP,
    true,
    Some(&CHECKPOINT_EXPOSED_SAVE),
    PerCheckpoint,
    "waits for cross-rank timer skew; group `step` despite its name",
    &[],
);
/// `megatron.checkpoint.exit_finalize`.
pub const CHECKPOINT_EXIT_FINALIZE: SpanDef = span(
    "megatron.checkpoint.exit_finalize",
    G::CHECKPOINT,
    true,
    Some(&TRAIN),
    OncePerLoop,
    "blocking finalisation of async saves and worker shutdown at loop exit; `nvrx.call_idx` (a list) when something was finalised",
    &[NVRX_CALL_IDX],
);

// ---- Inference server (`megatron-train-sim serve`) ---------------------------

/// The HTTP server span of one request, named after the HTTP semantic
/// conventions (`POST /v1/completions`): a trace root, or the child of the
/// request's W3C `traceparent`. Its name is a template, as the conventions
/// define it.
pub const INFERENCE_HTTP_SERVER: SpanDef = span(
    "{http.request.method} {http.route}",
    G::INFERENCE,
    false,
    None,
    PerRequest,
    "kind SERVER; the child of the request's `traceparent` when present; every request that reaches the router, errors included (those answered before it have none: a header hyper cannot parse, a connection past `--max-connections`, a header-read timeout); a path that matches no route gives a span named `{http.request.method}` alone, without `http.route`; a request whose client left before its response has no status code and `error.type` `client_disconnected`",
    &[
        lens_fallbacks::semconv::HTTP_REQUEST_METHOD,
        lens_fallbacks::semconv::HTTP_ROUTE,
        lens_fallbacks::semconv::URL_PATH,
        lens_fallbacks::semconv::URL_SCHEME,
        lens_fallbacks::semconv::SERVER_ADDRESS,
        lens_fallbacks::semconv::SERVER_PORT,
        lens_fallbacks::semconv::HTTP_RESPONSE_STATUS_CODE,
        lens_fallbacks::semconv::ERROR_TYPE,
    ],
);
/// The GenAI span of one request's model run (`text_completion megatron-sim`,
/// `chat megatron-sim`), under the HTTP server span.
pub const INFERENCE_GENERATE: SpanDef = span(
    "{gen_ai.operation.name} {gen_ai.request.model}",
    G::INFERENCE,
    false,
    Some(&INFERENCE_HTTP_SERVER),
    PerRequest,
    "kind INTERNAL; the GenAI semantic conventions for a model run in-process; per accepted request (one refused before it runs, a 404 or a 400, has the server span alone), `error.type` when it ends early (`shutting_down`, `client_disconnected`)",
    &[
        lens_fallbacks::semconv::GENAI_OPERATION_NAME,
        lens_fallbacks::semconv::GENAI_PROVIDER_NAME,
        lens_fallbacks::semconv::GENAI_REQUEST_MODEL,
        lens_fallbacks::semconv::GENAI_REQUEST_MAX_TOKENS,
        lens_fallbacks::semconv::GENAI_REQUEST_TEMPERATURE,
        lens_fallbacks::semconv::GENAI_REQUEST_TOP_P,
        lens_fallbacks::semconv::GENAI_REQUEST_SEED,
        lens_fallbacks::semconv::GENAI_RESPONSE_ID,
        lens_fallbacks::semconv::GENAI_RESPONSE_MODEL,
        lens_fallbacks::semconv::GENAI_RESPONSE_FINISH_REASONS,
        lens_fallbacks::semconv::GENAI_USAGE_INPUT_TOKENS,
        lens_fallbacks::semconv::GENAI_USAGE_OUTPUT_TOKENS,
        lens_fallbacks::semconv::ERROR_TYPE,
    ],
);
/// `megatron.inference.queue`: the wait in the server's queue.
pub const INFERENCE_QUEUE: SpanDef = span(
    "megatron.inference.queue",
    G::INFERENCE,
    false,
    Some(&INFERENCE_GENERATE),
    PerRequest,
    "from acceptance to admission into the running batch; one per choice (a list of prompts gives several under one request; `n` above 1 is refused)",
    &[],
);
/// `megatron.inference.prefill`: the prompt's forward pass.
pub const INFERENCE_PREFILL: SpanDef = span(
    "megatron.inference.prefill",
    G::INFERENCE,
    false,
    Some(&INFERENCE_GENERATE),
    PerRequest,
    "the prompt's forward pass, up to the first output token; one per choice",
    &[lens_fallbacks::semconv::GENAI_USAGE_INPUT_TOKENS],
);
/// `megatron.inference.decode`: the output tokens after the first.
pub const INFERENCE_DECODE: SpanDef = span(
    "megatron.inference.decode",
    G::INFERENCE,
    false,
    Some(&INFERENCE_GENERATE),
    PerRequest,
    "from the first output token to the last; one per choice",
    &[lens_fallbacks::semconv::GENAI_USAGE_OUTPUT_TOKENS],
);
/// `megatron.inference.step`: one step of the running batch, which serves
/// many requests, so a root linked to each request's GenAI span.
pub const INFERENCE_STEP: SpanDef = span(
    "megatron.inference.step",
    G::INFERENCE_STEP,
    false,
    None,
    PerDecodeStep,
    "a trace root linked to the GenAI span of every request in the batch",
    &[attr::INFERENCE_BATCH_SIZE],
);

/// Every span, in tree order (a parent before its children).
pub const SPANS: &[SpanDef] = &[
    PRE_STARTUP,
    STARTUP,
    STARTUP_LAUNCH_SCRIPT,
    STARTUP_CONTAINER_LOAD,
    STARTUP_IMPORTS,
    STARTUP_ARG_PARSE,
    STARTUP_INPROCESS_SETUP,
    STARTUP_IN_JOB_SETUP,
    STARTUP_INITIALIZE_MEGATRON,
    STARTUP_JIT_FUSION_OPTIONS,
    STARTUP_MODEL_INIT,
    CHECKPOINT_LOAD,
    CHECKPOINT_LOAD_IO_READ,
    STARTUP_DATALOADER,
    STARTUP_SNIFF_TEST,
    STARTUP_WEIGHT_HASH_CHECK,
    TRAIN,
    CHECKPOINT_FT_HEARTBEAT,
    CHECKPOINT_SAVE_FINALIZE,
    TRAIN_CUDA_GRAPH_CAPTURE,
    TRAIN_FIRST_ITERATION,
    TRAIN_ITERATION,
    TRAIN_ITERATION_FORWARD_BACKWARD,
    MICROBATCH_FORWARD,
    LAYER_FORWARD,
    LAYER_SELF_ATTENTION,
    LAYER_MLP,
    LAYER_MAMBA,
    MICROBATCH_BACKWARD,
    P2P_RECV_FORWARD,
    PP_RECV_FORWARD_LINKED,
    P2P_RECV_BACKWARD,
    PP_RECV_BACKWARD_LINKED,
    P2P_SEND_FORWARD,
    P2P_SEND_BACKWARD,
    GRAD_SYNC_START,
    GRAD_SYNC_FINISH,
    ACTIVATION_OFFLOAD,
    ACTIVATION_RELOAD,
    TRAIN_ITERATION_OPTIMIZER,
    TRAIN_FORWARD_PRE_HOOK,
    TRAIN_ITERATION_REPORT,
    TRAIN_PARAMS_NORM,
    TRAIN_LOG,
    EVALUATE,
    EVALUATE_STEP,
    TRAIN_SNIFF_TEST,
    TRAIN_GC_COLLECT,
    CHECKPOINT_EXPOSED_SAVE,
    CHECKPOINT_RECLAIM_MEMORY,
    CHECKPOINT_SAVE,
    CHECKPOINT_SAVE_STATE_DICT,
    CHECKPOINT_SAVE_IO_WRITE,
    CHECKPOINT_REPORT_MEMORY,
    CHECKPOINT_GC_COLLECT,
    CHECKPOINT_TIMERS_LOG,
    CHECKPOINT_EXIT_FINALIZE,
    INFERENCE_HTTP_SERVER,
    INFERENCE_GENERATE,
    INFERENCE_QUEUE,
    INFERENCE_PREFILL,
    INFERENCE_DECODE,
    INFERENCE_STEP,
];

/// The span named `name`, if the taxonomy has it.
pub fn find(name: &str) -> Option<&'static SpanDef> {
    SPANS.iter().find(|s| s.name == name)
}

/// The spans that `group` gates, in table order.
pub fn spans_in(group: SpanGroup) -> impl Iterator<Item = &'static SpanDef> {
    SPANS.iter().filter(move |s| s.group == group)
}

/// The spans whose usual parent is `name`, in table order.
pub fn children_of(name: &str) -> impl Iterator<Item = &'static SpanDef> + '_ {
    SPANS.iter().filter(move |s| s.parent == Some(name))
}
