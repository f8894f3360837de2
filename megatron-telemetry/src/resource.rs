//! The resource attributes Megatron adds to lens's resource: the training
//! configuration (seed page "Configuration", table "Resource attributes"),
//! the precision, the SLURM and NVIDIA Resiliency Extension (NVRx) variables
//! and the deterministic job and run UUIDs (the original's uuid5 recipes).
//!
//! They describe the whole run, not one span, so they go on the resource:
//! every span and data point of the run carries them (Jaeger shows them as
//! "Process" tags). The caller passes the result of
//! [`training_resource_attributes`] as its resource attributes to lens's
//! setup; lens's identity keys (`service.name`, `nemo.run.id`, `dl.rank`,
//! ...) still win over them, and they win over what lens detects (see
//! `lens_fallbacks::identity::build_resource`).
//!
//! This module is pure: it reads a [`TrainingArgs`] and an
//! [`EnvSource`], never NVML. The GPU identity (`dl.gpu.*`) costs a load of
//! the NVIDIA library, so it lives in [`crate::nvml`] and is added lazily,
//! only on exporting ranks (`SetupOptions::with_lazy_resource` with
//! [`crate::nvml::gpu_identity`]).
//!
//! The same function serves the trainer and the asynchronous checkpoint
//! worker, so both report one resource (the original's
//! `build_telemetry_resource_attrs`).
//!
//! ```
//! use lens_fallbacks::attr::AttrValue;
//! use megatron_telemetry::resource::{TrainingArgs, training_resource_attributes};
//!
//! let args = TrainingArgs { tensor_model_parallel_size: Some(8), bf16: true, ..TrainingArgs::default() };
//! let env = [("SLURM_JOB_ID", "4242"), ("NVRX_CYCLE", "1")];
//! let attrs = training_resource_attributes(&args, &env);
//! let get = |key: &str| attrs.iter().find(|kv| kv.key == key).map(|kv| kv.value.clone());
//! assert_eq!(get("dl.tensor_parallel.size"), Some(AttrValue::I64(8)));
//! assert_eq!(get("megatron.precision"), Some(AttrValue::from("bf16")));
//! assert_eq!(get("megatron.num_layers"), None); // not given, not emitted
//! assert_eq!(get("slurm.job.id"), Some(AttrValue::from("4242")));
//! assert_eq!(get("nvrx.cycle"), Some(AttrValue::from("1")));
//! assert!(get("nemo.lens.run_uuid").is_some());
//! ```

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::env::EnvSource;
use lens_fallbacks::identity::{ResourceAttributes, lens_uuid_attributes};
use lens_fallbacks::semconv;

/// `megatron.num_layers` ← `args.num_layers`.
pub const MEGATRON_NUM_LAYERS: &str = "megatron.num_layers";
/// `megatron.hidden_size` ← `args.hidden_size`.
pub const MEGATRON_HIDDEN_SIZE: &str = "megatron.hidden_size";
/// `megatron.num_attention_heads` ← `args.num_attention_heads`.
pub const MEGATRON_NUM_ATTENTION_HEADS: &str = "megatron.num_attention_heads";
/// `megatron.train_iters` ← `args.train_iters`.
pub const MEGATRON_TRAIN_ITERS: &str = "megatron.train_iters";
/// `megatron.micro_batch_size` ← `args.micro_batch_size`.
pub const MEGATRON_MICRO_BATCH_SIZE: &str = "megatron.micro_batch_size";
/// `megatron.ckpt_format` ← `args.ckpt_format`.
pub const MEGATRON_CKPT_FORMAT: &str = "megatron.ckpt_format";
/// `megatron.precision`: `fp16`, `bf16` or `fp32` (see [`Precision`]).
pub const MEGATRON_PRECISION: &str = "megatron.precision";

/// One row of the seed's table: an attribute key and where its value comes
/// from (a Megatron argument, or a rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttributeSource {
    /// The attribute key, such as `dl.batch_size`.
    pub key: &'static str,
    /// Where the value comes from, as the docs print it, such as
    /// `args.global_batch_size`.
    pub source: &'static str,
}

/// The attributes derived from the training arguments, in the seed's
/// order: each is emitted only when its argument is present, except
/// `megatron.precision`, which is always emitted.
pub const TRAINING_ATTRIBUTES: [AttributeSource; 13] = [
    AttributeSource { key: semconv::DL_LOCAL_RANK, source: "args.local_rank" },
    AttributeSource { key: semconv::DL_TENSOR_PARALLEL_SIZE, source: "args.tensor_model_parallel_size" },
    AttributeSource { key: semconv::DL_PIPELINE_PARALLEL_SIZE, source: "args.pipeline_model_parallel_size" },
    AttributeSource { key: semconv::DL_DATA_PARALLEL_SIZE, source: "args.data_parallel_size" },
    AttributeSource { key: semconv::DL_BATCH_SIZE, source: "args.global_batch_size" },
    AttributeSource { key: semconv::DL_SEQUENCE_LENGTH, source: "args.seq_length" },
    AttributeSource { key: MEGATRON_NUM_LAYERS, source: "args.num_layers" },
    AttributeSource { key: MEGATRON_HIDDEN_SIZE, source: "args.hidden_size" },
    AttributeSource { key: MEGATRON_NUM_ATTENTION_HEADS, source: "args.num_attention_heads" },
    AttributeSource { key: MEGATRON_TRAIN_ITERS, source: "args.train_iters" },
    AttributeSource { key: MEGATRON_MICRO_BATCH_SIZE, source: "args.micro_batch_size" },
    AttributeSource { key: MEGATRON_CKPT_FORMAT, source: "args.ckpt_format" },
    AttributeSource { key: MEGATRON_PRECISION, source: "`fp16` / `bf16` / `fp32`" },
];

/// The SLURM and NVRx attributes: each key and the variable it is read
/// from, emitted only when the variable is non-empty (after trimming).
///
/// `slurm.cluster` is Megatron's key for `SLURM_CLUSTER_NAME`; lens's own
/// SLURM detector reports the same variable as `slurm.cluster.name`, so a
/// run under SLURM carries both.
pub const ENVIRONMENT_ATTRIBUTES: [AttributeSource; 10] = [
    AttributeSource { key: semconv::SLURM_JOB_ID, source: "SLURM_JOB_ID" },
    AttributeSource { key: semconv::SLURM_SLUID, source: "LENS_SLURM_SLUID" },
    AttributeSource { key: semconv::SLURM_CLUSTER, source: "SLURM_CLUSTER_NAME" },
    AttributeSource { key: semconv::SLURM_ARRAY_JOB_ID, source: "SLURM_ARRAY_JOB_ID" },
    AttributeSource { key: semconv::SLURM_ARRAY_TASK_ID, source: "SLURM_ARRAY_TASK_ID" },
    AttributeSource { key: semconv::SLURM_ARRAY_SLUID, source: "LENS_SLURM_ARRAY_SLUID" },
    AttributeSource { key: semconv::SLURM_RESTART_COUNT, source: "SLURM_RESTART_COUNT" },
    AttributeSource { key: semconv::NVRX_CYCLE, source: "NVRX_CYCLE" },
    AttributeSource { key: semconv::NVRX_INFRA_RANK, source: "NVRX_INFRA_RANK" },
    AttributeSource { key: semconv::NVRX_MEMBERSHIP, source: "NVRX_MEMBERSHIP" },
];

/// The numeric precision of training, as `megatron.precision` reports it
/// (lens-training's, which MFU's table of peaks is indexed by).
pub use lens_training::mfu::Precision;

/// The subset of Megatron's training arguments that the resource reports.
///
/// A field is `None` where Megatron's argument can be `None` (not given, or
/// not yet derived); such a field adds no attribute.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrainingArgs {
    /// `args.local_rank` → `dl.local_rank`.
    pub local_rank: Option<u32>,
    /// `args.tensor_model_parallel_size` → `dl.tensor_parallel.size`.
    pub tensor_model_parallel_size: Option<u32>,
    /// `args.pipeline_model_parallel_size` → `dl.pipeline_parallel.size`.
    pub pipeline_model_parallel_size: Option<u32>,
    /// `args.data_parallel_size` → `dl.data_parallel.size`.
    pub data_parallel_size: Option<u32>,
    /// `args.global_batch_size` → `dl.batch_size`.
    pub global_batch_size: Option<u64>,
    /// `args.seq_length` → `dl.sequence_length`.
    pub seq_length: Option<u64>,
    /// `args.num_layers` → `megatron.num_layers`.
    pub num_layers: Option<u32>,
    /// `args.hidden_size` → `megatron.hidden_size`.
    pub hidden_size: Option<u64>,
    /// `args.num_attention_heads` → `megatron.num_attention_heads`.
    pub num_attention_heads: Option<u32>,
    /// `args.train_iters` → `megatron.train_iters`.
    pub train_iters: Option<u64>,
    /// `args.micro_batch_size` → `megatron.micro_batch_size`.
    pub micro_batch_size: Option<u64>,
    /// `args.ckpt_format` → `megatron.ckpt_format` (an empty string is
    /// treated as absent).
    pub ckpt_format: Option<String>,
    /// `args.fp16`.
    pub fp16: bool,
    /// `args.bf16`.
    pub bf16: bool,
}

impl TrainingArgs {
    /// The precision the flags select (see [`Precision::from_flags`]).
    pub const fn precision(&self) -> Precision {
        Precision::from_flags(self.fp16, self.bf16)
    }
}

/// Every resource attribute Megatron adds, in this order:
///
/// 1. the seed's table ([`TRAINING_ATTRIBUTES`]), each only when its
///    argument is present, integers as integers, then `megatron.precision`;
/// 2. the SLURM and NVRx variables ([`ENVIRONMENT_ATTRIBUTES`]), as strings,
///    each only when non-empty;
/// 3. `nemo.lens.job_uuid`, `nemo.lens.run_uuid` and (when
///    `TORCHELASTIC_RESTART_COUNT` is set) `slurm.torchelastic.restart_count`,
///    from lens-core's recipe (`lens_fallbacks::identity::lens_uuid_attributes`):
///    identical on every rank and in the checkpoint worker, with no
///    communication.
///
/// Each key appears once. No NVML, no I/O beyond `env`; never fails.
pub fn training_resource_attributes(args: &TrainingArgs, env: &(impl EnvSource + ?Sized)) -> Vec<KeyValue> {
    let mut attrs = ResourceAttributes::new();
    let integers = [
        (semconv::DL_LOCAL_RANK, args.local_rank.map(u64::from)),
        (semconv::DL_TENSOR_PARALLEL_SIZE, args.tensor_model_parallel_size.map(u64::from)),
        (semconv::DL_PIPELINE_PARALLEL_SIZE, args.pipeline_model_parallel_size.map(u64::from)),
        (semconv::DL_DATA_PARALLEL_SIZE, args.data_parallel_size.map(u64::from)),
        (semconv::DL_BATCH_SIZE, args.global_batch_size),
        (semconv::DL_SEQUENCE_LENGTH, args.seq_length),
        (MEGATRON_NUM_LAYERS, args.num_layers.map(u64::from)),
        (MEGATRON_HIDDEN_SIZE, args.hidden_size),
        (MEGATRON_NUM_ATTENTION_HEADS, args.num_attention_heads.map(u64::from)),
        (MEGATRON_TRAIN_ITERS, args.train_iters),
        (MEGATRON_MICRO_BATCH_SIZE, args.micro_batch_size),
    ];
    for (key, value) in integers {
        if let Some(value) = value {
            attrs.insert(key, value);
        }
    }
    if let Some(format) = args.ckpt_format.as_ref().filter(|f| !f.is_empty()) {
        attrs.insert(MEGATRON_CKPT_FORMAT, format.clone());
    }
    attrs.insert(MEGATRON_PRECISION, args.precision().as_str());

    for AttributeSource { key, source } in ENVIRONMENT_ATTRIBUTES {
        if let Some(value) = env.non_empty(source) {
            attrs.insert(key, value);
        }
    }
    attrs.extend(lens_uuid_attributes(env));
    attrs.into_vec()
}
