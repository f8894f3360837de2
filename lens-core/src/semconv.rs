//! Attribute keys shared by every consumer of lens: the resource, spans and
//! metrics all name their attributes through these constants, never through
//! string literals.
//!
//! They are lens's own `pub const` items rather than re-exports of
//! `opentelemetry-semantic-conventions`, for two reasons: the pure part of
//! lens-core depends on no OpenTelemetry crate, and several keys we need are
//! experimental or deprecated there (`deployment.environment`, the
//! `gen_ai.*` keys, `host.name`, `process.pid`), so that crate would gate
//! them behind a feature or warn on use. A test of the runtime crate
//! (`lens-otel-runtime/tests/semconv.rs`) compares every key that crate also
//! defines with ours, so the two cannot drift.
//!
//! Each key carries its [`Stability`], and [`ALL`] lists every key once
//! (for docs tables and drift tests):
//!
//! - **stable** OpenTelemetry conventions: `service.*`, `k8s.*`;
//! - **experimental** or **deprecated** OpenTelemetry conventions:
//!   `host.name`, `process.pid`, `gen_ai.*` (experimental),
//!   `deployment.environment` (deprecated in favour of
//!   `deployment.environment.name`; kept because the original emits it);
//! - **custom** NeMo keys: `dl.*`, `rl.*`, `gym.*`, `slurm.*`, `nvrx.*`,
//!   `nemo.*`, `lens.*`, `wandb.*`, `host.gpu.count`, `is_goodput_span`.
//!
//! `megatron.*` keys are deliberately not here: they belong to the Megatron
//! layer.
//!
//! ```
//! use lens_core::semconv::{self, Stability};
//!
//! assert_eq!(semconv::DL_RANK, "dl.rank");
//! let rank = semconv::ALL.iter().find(|key| key.key == semconv::DL_RANK).unwrap();
//! assert_eq!(rank.stability, Stability::Custom);
//! ```

/// The version of the OpenTelemetry semantic conventions these keys follow
/// (the original's).
pub const SEMCONV_VERSION: &str = "1.29.0";

/// How settled a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stability {
    /// A stable OpenTelemetry convention.
    Stable,
    /// An experimental OpenTelemetry convention: it may still be renamed.
    Experimental,
    /// An OpenTelemetry convention that has since been deprecated; emitted
    /// for compatibility with the original.
    Deprecated,
    /// A NeMo key, outside the OpenTelemetry conventions.
    Custom,
}

/// One entry of [`ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// The constant's name, such as `"DL_RANK"`.
    pub name: &'static str,
    /// The attribute key, such as `"dl.rank"`.
    pub key: &'static str,
    /// How settled the key is.
    pub stability: Stability,
}

macro_rules! keys {
    ($($(#[$doc:meta])* $name:ident = $key:literal, $stability:ident;)*) => {
        $(
            $(#[$doc])*
            pub const $name: &str = $key;
        )*

        /// Every key of this module, in declaration order.
        pub const ALL: &[Key] = &[$(Key { name: stringify!($name), key: $key, stability: Stability::$stability }),*];
    };
}

keys! {
    // Service and host (resource).
    /// The logical service name (`OTEL_SERVICE_NAME`; `megatron-lm` for Megatron).
    SERVICE_NAME = "service.name", Stable;
    /// The version of the emitting library.
    SERVICE_VERSION = "service.version", Stable;
    /// One rank of one run: `{run_id}-rank{rank}`.
    SERVICE_INSTANCE_ID = "service.instance.id", Stable;
    /// The host name.
    HOST_NAME = "host.name", Experimental;
    /// The process id.
    PROCESS_PID = "process.pid", Experimental;
    /// The number of GPUs visible to the process.
    HOST_GPU_COUNT = "host.gpu.count", Custom;
    /// `DEPLOYMENT_ENV`, else `ENVIRONMENT`.
    DEPLOYMENT_ENVIRONMENT = "deployment.environment", Deprecated;

    // Deep learning.
    /// Global rank.
    DL_RANK = "dl.rank", Custom;
    /// Number of ranks.
    DL_WORLD_SIZE = "dl.world_size", Custom;
    /// Rank within the node.
    DL_LOCAL_RANK = "dl.local_rank", Custom;
    /// Data-parallel rank.
    DL_DATA_PARALLEL_RANK = "dl.data_parallel.rank", Custom;
    /// Data-parallel size.
    DL_DATA_PARALLEL_SIZE = "dl.data_parallel.size", Custom;
    /// Tensor-parallel rank.
    DL_TENSOR_PARALLEL_RANK = "dl.tensor_parallel.rank", Custom;
    /// Tensor-parallel size.
    DL_TENSOR_PARALLEL_SIZE = "dl.tensor_parallel.size", Custom;
    /// Pipeline-parallel rank.
    DL_PIPELINE_PARALLEL_RANK = "dl.pipeline_parallel.rank", Custom;
    /// Pipeline-parallel size.
    DL_PIPELINE_PARALLEL_SIZE = "dl.pipeline_parallel.size", Custom;
    /// Training iteration.
    DL_ITERATION = "dl.iteration", Custom;
    /// Training loss.
    DL_LOSS = "dl.loss", Custom;
    /// Gradient norm.
    DL_GRAD_NORM = "dl.grad_norm", Custom;
    /// Learning rate.
    DL_LEARNING_RATE = "dl.learning_rate", Custom;
    /// Model throughput in TFLOP/s.
    DL_THROUGHPUT_TFLOPS = "dl.throughput_tflops", Custom;
    /// Tokens per second.
    DL_THROUGHPUT_TOKENS_PER_SEC = "dl.throughput_tokens_per_sec", Custom;
    /// Global batch size.
    DL_BATCH_SIZE = "dl.batch_size", Custom;
    /// Sequence length.
    DL_SEQUENCE_LENGTH = "dl.sequence_length", Custom;
    /// Microbatch index within an iteration.
    DL_MICROBATCH_ID = "dl.microbatch_id", Custom;
    /// Physical GPU index (NVML).
    DL_GPU_INDEX = "dl.gpu.index", Custom;
    /// GPU product name (NVML).
    DL_GPU_NAME = "dl.gpu.name", Custom;
    /// GPU UUID (NVML).
    DL_GPU_UUID = "dl.gpu.uuid", Custom;
    /// GPU serial number (NVML).
    DL_GPU_SERIAL = "dl.gpu.serial", Custom;
    /// GPU PCI bus id (NVML).
    DL_GPU_PCI_BUS_ID = "dl.gpu.pci_bus_id", Custom;

    // Generative AI.
    /// The operation, such as `chat`.
    GENAI_OPERATION_NAME = "gen_ai.operation.name", Experimental;
    /// The model provider.
    GENAI_PROVIDER_NAME = "gen_ai.provider.name", Experimental;
    /// The requested model.
    GENAI_REQUEST_MODEL = "gen_ai.request.model", Experimental;
    /// `input` or `output` tokens.
    GENAI_TOKEN_TYPE = "gen_ai.token.type", Experimental;
    /// The maximum number of tokens the request asked for.
    GENAI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens", Experimental;
    /// The sampling temperature of the request.
    GENAI_REQUEST_TEMPERATURE = "gen_ai.request.temperature", Experimental;
    /// The nucleus-sampling `top_p` of the request.
    GENAI_REQUEST_TOP_P = "gen_ai.request.top_p", Experimental;
    /// The sampling seed of the request.
    GENAI_REQUEST_SEED = "gen_ai.request.seed", Experimental;
    /// The id of the completion the server returned.
    GENAI_RESPONSE_ID = "gen_ai.response.id", Experimental;
    /// The model that generated the response.
    GENAI_RESPONSE_MODEL = "gen_ai.response.model", Experimental;
    /// Why generation stopped, one entry per choice (`stop`, `length`).
    GENAI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons", Experimental;
    /// Tokens in the prompt.
    GENAI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens", Experimental;
    /// Tokens generated.
    GENAI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens", Experimental;

    // HTTP servers.
    /// The request method, such as `POST`.
    HTTP_REQUEST_METHOD = "http.request.method", Stable;
    /// The status code of the response.
    HTTP_RESPONSE_STATUS_CODE = "http.response.status_code", Stable;
    /// The matched route, such as `/v1/completions`.
    HTTP_ROUTE = "http.route", Stable;
    /// The path of the request URL.
    URL_PATH = "url.path", Stable;
    /// The scheme of the request URL (`http`).
    URL_SCHEME = "url.scheme", Stable;
    /// The server's name as the request addressed it (its `Host` header).
    SERVER_ADDRESS = "server.address", Stable;
    /// The server's port as the request addressed it (its `Host` header).
    SERVER_PORT = "server.port", Stable;
    /// The class of error an operation ended with.
    ERROR_TYPE = "error.type", Stable;

    // Reinforcement learning.
    /// The algorithm, such as `grpo`.
    RL_ALGORITHM = "rl.algorithm", Custom;
    /// A reward.
    RL_REWARD = "rl.reward", Custom;
    /// Mean reward.
    RL_REWARD_MEAN = "rl.reward.mean", Custom;
    /// KL divergence.
    RL_KL_DIVERGENCE = "rl.kl_divergence", Custom;
    /// Policy loss.
    RL_POLICY_LOSS = "rl.policy_loss", Custom;
    /// Value loss.
    RL_VALUE_LOSS = "rl.value_loss", Custom;
    /// Entropy.
    RL_ENTROPY = "rl.entropy", Custom;
    /// The generation backend, such as `vllm`.
    RL_GENERATION_BACKEND = "rl.generation.backend", Custom;
    /// Number of rollouts.
    RL_NUM_ROLLOUTS = "rl.num_rollouts", Custom;
    /// Mean response length.
    RL_RESPONSE_LENGTH_MEAN = "rl.response_length.mean", Custom;
    /// Gradient norm.
    RL_GRAD_NORM = "rl.grad_norm", Custom;
    /// Learning rate.
    RL_LEARNING_RATE = "rl.learning_rate", Custom;
    /// Tokens per second.
    RL_THROUGHPUT_TOKENS_PER_SEC = "rl.throughput.tokens_per_sec", Custom;

    // NeMo Gym.
    /// The environment server's name.
    GYM_SERVER_NAME = "gym.server.name", Custom;
    /// The environment server's type.
    GYM_SERVER_TYPE = "gym.server.type", Custom;
    /// Number of environment servers.
    GYM_NUM_SERVERS = "gym.num_servers", Custom;
    /// Rollout batch size.
    GYM_ROLLOUT_BATCH_SIZE = "gym.rollout.batch_size", Custom;
    /// Share of rollouts that verified.
    GYM_VERIFY_SUCCESS_RATE = "gym.verify.success_rate", Custom;

    // SLURM (detected by lens).
    /// `SLURM_JOB_ID`.
    SLURM_JOB_ID = "slurm.job.id", Custom;
    /// `SLURM_JOB_NAME`.
    SLURM_JOB_NAME = "slurm.job.name", Custom;
    /// `SLURM_NODELIST`.
    SLURM_NODELIST = "slurm.nodelist", Custom;
    /// `SLURM_NNODES`.
    SLURM_NNODES = "slurm.nnodes", Custom;
    /// `SLURM_NTASKS`.
    SLURM_NTASKS = "slurm.ntasks", Custom;
    /// `SLURM_PARTITION`.
    SLURM_PARTITION = "slurm.partition", Custom;
    /// `SLURM_CLUSTER_NAME`.
    SLURM_CLUSTER_NAME = "slurm.cluster.name", Custom;
    // SLURM (set by the Megatron layer).
    /// `SLURM_CLUSTER_NAME`, under the key Megatron uses.
    SLURM_CLUSTER = "slurm.cluster", Custom;
    /// The SLURM job's SLUID (`LENS_SLURM_SLUID`, fetched from `sacct` by the launch script).
    SLURM_SLUID = "slurm.sluid", Custom;
    /// `SLURM_ARRAY_JOB_ID`.
    SLURM_ARRAY_JOB_ID = "slurm.array.job_id", Custom;
    /// `SLURM_ARRAY_TASK_ID`.
    SLURM_ARRAY_TASK_ID = "slurm.array.task_id", Custom;
    /// The array job's SLUID (`LENS_SLURM_ARRAY_SLUID`).
    SLURM_ARRAY_SLUID = "slurm.array.sluid", Custom;
    /// `SLURM_RESTART_COUNT`.
    SLURM_RESTART_COUNT = "slurm.restart_count", Custom;
    /// `TORCHELASTIC_RESTART_COUNT`, set with `nemo.lens.run_uuid`.
    SLURM_TORCHELASTIC_RESTART_COUNT = "slurm.torchelastic.restart_count", Custom;

    // NVIDIA Resiliency Extension.
    /// `NVRX_CYCLE`: the restart cycle.
    NVRX_CYCLE = "nvrx.cycle", Custom;
    /// `NVRX_INFRA_RANK`.
    NVRX_INFRA_RANK = "nvrx.infra_rank", Custom;
    /// `NVRX_MEMBERSHIP`.
    NVRX_MEMBERSHIP = "nvrx.membership", Custom;

    // NeMo.
    /// The run id shared by every rank.
    NEMO_RUN_ID = "nemo.run.id", Custom;
    /// The user id (`<PREFIX>_USER_ID`).
    NEMO_USER_ID = "nemo.user.id", Custom;
    /// Set on a span that was still open at shutdown and ended by lens.
    NEMO_SPAN_TRUNCATED = "nemo.span.truncated", Custom;
    /// Set on the hang watchdog's copy of a span that was open when it fired.
    NEMO_SPAN_OPEN = "nemo.span.open", Custom;
    /// Deterministic id of the SLURM job, stable across requeues and restarts.
    NEMO_LENS_JOB_UUID = "nemo.lens.job_uuid", Custom;
    /// Deterministic id of one incarnation of the job.
    NEMO_LENS_RUN_UUID = "nemo.lens.run_uuid", Custom;
    /// Marks a span whose time counts as goodput (opt-in, the only goodput classifier).
    IS_GOODPUT_SPAN = "is_goodput_span", Custom;

    // Lens's own configuration, on the resource, so that offline tools
    // (`lens analyze`, `lens trace-view`) name the program's own variables.
    /// The prefix the program's configuration was read with (`MYJOB_OTEL`).
    LENS_CONFIG_PREFIX = "lens.config.prefix", Custom;
    /// The resolved span groups, comma-separated, in catalog order.
    LENS_SPAN_GROUPS = "lens.span_groups", Custom;
    /// `true` on the resource of spans that a later process replayed from
    /// a dead process's crash spool (the rest of the resource is the dead
    /// process's): `lens analyze` tells them from that process's own export.
    LENS_SPOOL_REPLAYED = "lens.spool.replayed", Custom;

    // Weights & Biases.
    /// `WANDB_ENTITY`.
    WANDB_ENTITY = "wandb.entity", Custom;
    /// `WANDB_PROJECT`.
    WANDB_PROJECT = "wandb.project", Custom;

    // Kubernetes.
    /// `K8S_NAMESPACE`.
    K8S_NAMESPACE_NAME = "k8s.namespace.name", Stable;
    /// `K8S_POD_NAME`, else `HOSTNAME`.
    K8S_POD_NAME = "k8s.pod.name", Stable;
    /// `K8S_POD_UID`.
    K8S_POD_UID = "k8s.pod.uid", Stable;
    /// `K8S_NODE_NAME`.
    K8S_NODE_NAME = "k8s.node.name", Stable;
    /// `K8S_CONTAINER_NAME`.
    K8S_CONTAINER_NAME = "k8s.container.name", Stable;
    /// `K8S_JOB_NAME`.
    K8S_JOB_NAME = "k8s.job.name", Stable;
}

#[cfg(test)]
mod tests {
    use super::ALL;
    use std::collections::HashSet;

    #[test]
    fn every_key_is_declared_once_in_dotted_lower_case() {
        let keys: HashSet<_> = ALL.iter().map(|k| k.key).collect();
        assert_eq!(keys.len(), ALL.len(), "a key is declared twice");
        for key in ALL {
            assert!(
                key.key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_'),
                "{} = {:?} is not dotted lower case",
                key.name,
                key.key
            );
        }
    }
}
