//! The command line: Megatron's flag names for what the simulator supports,
//! the local launcher's flags, and the checks that turn inconsistent
//! arguments into one clear error before any process or socket exists.
//!
//! Flags keep Megatron's spelling and meaning (`--train-iters`,
//! `--micro-batch-size`, `--tensor-model-parallel-size`, ...), so a command
//! line moves between the two. The telemetry flags are lens-core's
//! [`CliOverrides`], flattened in, so that `--otel-enabled`,
//! `--otel-service-name` and `--otel-span-groups` mean exactly what they mean
//! to every lens program.

use std::fmt;
use std::path::PathBuf;

use clap::Parser;
use lens_fallbacks::config::CliOverrides;

use crate::config::{DecayStyle, DeviceChoice, Layout, OptimizerKind};

/// A reference Megatron-style training loop: real ranks (one process each),
/// real communication over TCP, a small MLP trained on synthetic data, real
/// checkpoints, and Megatron's telemetry.
#[derive(Clone, Debug, Parser)]
#[command(name = "megatron-train-sim", version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Args {
    /// Iterations to train (absolute: a resumed run continues up to this number).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub(crate) train_iters: u64,
    /// Print progress and record the training metrics every N iterations.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub(crate) log_interval: u64,
    /// Save a checkpoint every N iterations (needs --save); each interval is one `megatron.train` trace.
    #[arg(long, value_name = "N")]
    pub(crate) save_interval: Option<u64>,
    /// Directory to save checkpoints to (`DIR/iter_XXXXXXX/rank_XXXXX.ckpt`).
    #[arg(long, value_name = "DIR")]
    pub(crate) save: Option<PathBuf>,
    /// Directory to resume from (reads `DIR/latest_checkpointed_iteration.txt`).
    #[arg(long, value_name = "DIR")]
    pub(crate) load: Option<PathBuf>,
    /// Evaluate every N iterations.
    #[arg(long, value_name = "N")]
    pub(crate) eval_interval: Option<u64>,
    /// Forward-only steps per evaluation.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub(crate) eval_iters: u64,
    /// Samples per microbatch on one data-parallel rank.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub(crate) micro_batch_size: u64,
    /// Samples per iteration over all data-parallel ranks.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub(crate) global_batch_size: u64,
    /// Tokens per sample.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub(crate) seq_length: u64,
    /// Layers of the model (token mixer + MLP each), split evenly over the pipeline stages.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub(crate) num_layers: u32,
    /// Width of every layer; each layer's columns are split over the tensor-parallel ranks.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub(crate) hidden_size: u64,
    /// Recorded and checked as Megatron checks it (the self-attention-like mixer has no heads).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub(crate) num_attention_heads: u32,
    /// Tensor-parallel size (TP).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) tensor_model_parallel_size: u32,
    /// Pipeline-parallel size (PP).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) pipeline_model_parallel_size: u32,
    /// Checkpoint format name, recorded as `megatron.ckpt_format` (the files are the simulator's own).
    #[arg(long, default_value = "torch_dist", value_parser = ["torch_dist", "torch", "fsdp_dtensor"])]
    pub(crate) ckpt_format: String,
    /// Train "in bf16" (recorded as the precision; compute stays f32).
    #[arg(long)]
    pub(crate) bf16: bool,
    /// Train "in fp16" (recorded as the precision; compute stays f32).
    #[arg(long)]
    pub(crate) fp16: bool,
    /// Peak learning rate.
    #[arg(long, default_value_t = 0.01, value_name = "LR")]
    pub(crate) lr: f64,
    /// Learning rate at the end of the decay.
    #[arg(long, default_value_t = 0.0, value_name = "LR")]
    pub(crate) min_lr: f64,
    /// Iterations of linear warm-up from 0 to --lr.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(crate) lr_warmup_iters: u64,
    /// Decay after the warm-up.
    #[arg(long, value_enum, default_value_t = DecayStyle::Cosine)]
    pub(crate) lr_decay_style: DecayStyle,
    /// Iterations over which the learning rate decays (default: --train-iters).
    #[arg(long, value_name = "N")]
    pub(crate) lr_decay_iters: Option<u64>,
    /// Optimizer.
    #[arg(long, value_enum, default_value_t = OptimizerKind::Adam)]
    pub(crate) optimizer: OptimizerKind,
    /// Clip the global gradient norm to this value (0 turns clipping off).
    #[arg(long, default_value_t = 1.0, value_name = "NORM")]
    pub(crate) clip_grad: f64,
    /// Seed of the synthetic data and of the initial parameters.
    #[arg(long, default_value_t = 1234)]
    pub(crate) seed: u64,
    /// Layer kinds, one character per layer: `*` transformer (self-attention-like mixer + MLP), `M` Mamba mixer.
    #[arg(long, value_name = "PATTERN")]
    pub(crate) hybrid_override_pattern: Option<String>,
    /// Copy each microbatch's saved activations to a side buffer after its forward pass and back before its backward pass.
    #[arg(long)]
    pub(crate) fine_grained_activation_offloading: bool,
    /// Capture the training step once at the end of the warm-up (a no-op phase on the CPU).
    #[arg(long)]
    pub(crate) enable_cuda_graph: bool,
    /// Iterations before the step is captured (with --enable-cuda-graph).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub(crate) cuda_graph_warmup_steps: u64,
    /// Check that the data-parallel replicas hold identical weights at startup and every N iterations.
    #[arg(long, value_name = "N")]
    pub(crate) check_weight_hash_across_dp_replicas_interval: Option<u64>,
    /// Train "in fp8" with this format (recorded; compute stays f32); adds the post-save heap trim.
    #[arg(long, value_name = "FORMAT", value_parser = ["e4m3", "hybrid"])]
    pub(crate) fp8_format: Option<String>,
    /// Compute the parameter norm at every log interval.
    #[arg(long)]
    pub(crate) log_params_norm: bool,
    /// Run the "gc" phase by hand every --manual-gc-interval iterations.
    #[arg(long)]
    pub(crate) manual_gc: bool,
    /// Iterations between manual gc phases (0: only the automatic ones, which the simulator has none of).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) manual_gc_interval: u64,
    /// Run a small device self-check before training and every N iterations.
    #[arg(long, value_name = "N")]
    pub(crate) gpu_sniff_test_interval: Option<u64>,
    /// On SIGTERM/SIGINT, finish the iteration, save (with --save) and exit 0.
    #[arg(long)]
    pub(crate) exit_signal_handler: bool,
    /// Write checkpoints on a worker thread; finalize them at a later iteration.
    #[arg(long)]
    pub(crate) async_save: bool,
    /// Where the matrix products run. `auto` picks a GPU when GPU support is compiled in and a GPU is present.
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub(crate) device: DeviceChoice,
    /// Launch N local ranks (one process each), like `torchrun --standalone --nproc-per-node N`.
    #[arg(long, value_name = "N")]
    pub(crate) nproc_per_node: Option<u32>,
    /// Make the loss NaN at this iteration (test aid: the iteration is skipped).
    #[arg(long, value_name = "ITER")]
    pub(crate) inject_nan_at: Option<u64>,
    /// Make rank RANK slower by MS milliseconds in PHASE (data, forward, backward or optimizer) in every
    /// iteration: a straggler for docs/ranks.md's tools. Repeatable.
    #[arg(long, value_name = "RANK:PHASE:MS", value_parser = crate::faults::parse_straggler)]
    pub(crate) inject_straggler: Vec<crate::faults::Straggler>,
    /// Make rank RANK stop inside PHASE (data, forward, backward or optimizer) at ITERATION until it is
    /// killed: a hang for the watchdog (docs/ranks.md). Repeatable.
    #[arg(long, value_name = "RANK:PHASE:ITERATION", value_parser = crate::faults::parse_hang)]
    pub(crate) inject_hang: Vec<crate::faults::Hang>,
    /// Make rank RANK send itself SIGKILL inside PHASE (data, forward, backward or optimizer) at
    /// ITERATION: nothing is flushed, as when the OOM killer strikes (docs/crashes.md). Repeatable:
    /// one value per rank kills every rank.
    #[arg(long, value_name = "RANK:PHASE:ITERATION", value_parser = crate::faults::parse_kill)]
    pub(crate) inject_kill: Vec<crate::faults::Kill>,
    /// Kill every rank (SIGKILL) while the asynchronous save of ITERATION is in flight: dispatched,
    /// never finalized (needs --async-save and a save at ITERATION).
    #[arg(long, value_name = "ITERATION", value_parser = crate::faults::parse_save_iteration)]
    pub(crate) inject_crash_during_save: Option<u64>,
    /// Sleep this long in every step, on every rank (to simulate a slower step in benchmarks).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub(crate) step_sleep_ms: u64,
    /// Write a machine-readable summary (JSON) to this file at the end (written by the last rank).
    #[arg(long, value_name = "PATH")]
    pub(crate) summary_json: Option<PathBuf>,
    /// Crash right after this iteration (test aid, like a failure the program sees): every rank
    /// stops there, ends its spans, flushes its telemetry and exits 1 without saving (for a kill,
    /// which leaves its open spans to the crash spool, see --inject-kill).
    #[arg(long, value_name = "ITERATION")]
    pub(crate) inject_crash_at: Option<u64>,
    /// Seconds a rank waits for a message from another rank before it gives up (above the hang
    /// watchdog's 60 s floor, so that the watchdog speaks first).
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    pub(crate) comm_timeout: u64,
    /// Rank RANK takes what its telemetry control thread read (`MEGATRON_OTEL_CONTROL_FILE`) only from
    /// iteration ITERATION on, as a rank whose poll came late (test aid). Repeatable.
    #[arg(long, hide = true, value_name = "RANK:ITERATION", value_parser = parse_control_delay)]
    pub(crate) inject_control_delay: Vec<(u32, u64)>,
    /// Launcher: write "RANK PID" lines to this file once the ranks are started (test aid).
    #[arg(long, hide = true, value_name = "PATH")]
    pub(crate) rank_pids_file: Option<PathBuf>,
    /// Telemetry overrides (they win over every environment variable).
    #[command(flatten)]
    pub(crate) otel: CliOverrides,
    /// A tool instead of a training run (without one, the binary trains).
    #[command(subcommand)]
    pub(crate) tool: Option<Tool>,
}

/// The binary's subcommands (tools that work on a finished run); with
/// none, the binary trains.
#[derive(Clone, Debug, clap::Subcommand)]
pub(crate) enum Tool {
    /// Turn a `file` export into a Chrome/Perfetto trace (one process per
    /// rank, spans as slices, links as flows) and print a per-span table:
    /// an alias of `lens trace-view` (docs/trace-view.md).
    TraceView(lens_command::trace_view::TraceViewArgs),
    /// Cross-rank analyses of a `file` export (stragglers, goodput, hangs):
    /// an alias of `lens analyze` (docs/ranks.md).
    Analyze(lens_command::analyze::AnalyzeArgs),
    /// Change a running job's telemetry through its control file
    /// (`MEGATRON_OTEL_CONTROL_FILE`): an alias of `lens control` (docs/control.md).
    Control(lens_command::control::ControlArgs),
    /// Serve a checkpoint over an OpenAI-compatible HTTP API (docs/serving.md).
    Serve(crate::serve::ServeArgs),
}

/// The most memory the model and batch flags may ask of one rank (64 GiB):
/// far above any run the simulator is for, far below what overflows a size.
pub(crate) const MAX_RANK_MEMORY_BYTES: u128 = 64 << 30;

/// The longest `--comm-timeout`, in seconds (a year).
pub(crate) const MAX_COMM_TIMEOUT_S: u64 = 365 * 24 * 3600;

/// The longest `--step-sleep-ms` (an hour).
pub(crate) const MAX_STEP_SLEEP_MS: u64 = 3_600_000;

/// Arguments that cannot work together. Its `Display` names the flags and
/// their values; the binary prints it and exits with status 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UsageError(pub(crate) Vec<String>);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} problems with the arguments:", many.len())?;
                for problem in many {
                    write!(f, "\n  - {problem}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for UsageError {}

impl Args {
    /// Checks the arguments against each other and a world size (from
    /// `--nproc-per-node` or the launcher's `WORLD_SIZE`), and derives the
    /// layout. Every problem is reported at once.
    pub(crate) fn validate(&self, world_size: u32, world_source: &str) -> Result<Layout, UsageError> {
        let mut problems = Vec::new();
        let tp = self.tensor_model_parallel_size;
        let pp = self.pipeline_model_parallel_size;
        let positive: [(&str, u64); 8] = [
            ("--train-iters", self.train_iters),
            ("--log-interval", self.log_interval),
            ("--micro-batch-size", self.micro_batch_size),
            ("--global-batch-size", self.global_batch_size),
            ("--seq-length", self.seq_length),
            ("--num-layers", u64::from(self.num_layers)),
            ("--hidden-size", self.hidden_size),
            ("--num-attention-heads", u64::from(self.num_attention_heads)),
        ];
        for (flag, value) in positive {
            if value == 0 {
                problems.push(format!("{flag} must be at least 1, got 0"));
            }
        }
        if self.seq_length > crate::checkpoint::MAX_SEQ_LENGTH {
            problems.push(format!(
                "--seq-length must be at most {} (2^20 tokens), got {}",
                crate::checkpoint::MAX_SEQ_LENGTH,
                self.seq_length
            ));
        }
        for (flag, value) in [
            ("--tensor-model-parallel-size", tp),
            ("--pipeline-model-parallel-size", pp),
            ("--nproc-per-node", self.nproc_per_node.unwrap_or(1)),
        ] {
            if value == 0 {
                problems.push(format!("{flag} must be at least 1, got 0"));
            }
        }
        for (flag, value) in [
            ("--save-interval", self.save_interval),
            ("--eval-interval", self.eval_interval),
            ("--gpu-sniff-test-interval", self.gpu_sniff_test_interval),
            ("--check-weight-hash-across-dp-replicas-interval", self.check_weight_hash_across_dp_replicas_interval),
        ] {
            if value == Some(0) {
                problems.push(format!("{flag} must be at least 1, got 0"));
            }
        }
        if !problems.is_empty() {
            return Err(UsageError(problems));
        }
        if let Some(problem) = self.memory_problem() {
            return Err(UsageError(vec![problem]));
        }

        problems.extend(crate::faults::check_ranks(&self.inject_straggler, world_size));
        problems.extend(crate::faults::check_phase_faults(
            crate::faults::HANG_FLAG,
            &self.inject_hang,
            world_size,
            self.train_iters,
        ));
        problems.extend(crate::faults::check_phase_faults(
            crate::faults::KILL_FLAG,
            &self.inject_kill,
            world_size,
            self.train_iters,
        ));
        if let Some(iteration) = self.inject_crash_during_save {
            problems.extend(crate::faults::check_crash_during_save(
                iteration,
                self.async_save,
                self.save.is_some(),
                self.save_interval,
                self.train_iters,
            ));
        }
        let model_parallel = tp * pp;
        let dp = if !world_size.is_multiple_of(model_parallel) {
            problems.push(format!(
                "the world size ({world_size}, from {world_source}) is not divisible by \
                 --tensor-model-parallel-size ({tp}) × --pipeline-model-parallel-size ({pp}) = {model_parallel}"
            ));
            1
        } else {
            world_size / model_parallel
        };
        if !self.num_layers.is_multiple_of(pp) {
            problems.push(format!(
                "--num-layers ({}) is not divisible by --pipeline-model-parallel-size ({pp})",
                self.num_layers
            ));
        }
        if !self.hidden_size.is_multiple_of(u64::from(tp)) {
            problems.push(format!(
                "--hidden-size ({}) is not divisible by --tensor-model-parallel-size ({tp})",
                self.hidden_size
            ));
        }
        if !(crate::model::VOCAB as u32).is_multiple_of(tp) {
            problems.push(format!(
                "the vocabulary (256 bytes) is not divisible by --tensor-model-parallel-size ({tp}): use a power of two"
            ));
        }
        if !self.hidden_size.is_multiple_of(u64::from(self.num_attention_heads)) {
            problems.push(format!(
                "--hidden-size ({}) is not divisible by --num-attention-heads ({})",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !self.num_attention_heads.is_multiple_of(tp) {
            problems.push(format!(
                "--num-attention-heads ({}) is not divisible by --tensor-model-parallel-size ({tp})",
                self.num_attention_heads
            ));
        }
        let per_step = self.micro_batch_size * u64::from(dp);
        if !self.global_batch_size.is_multiple_of(per_step) {
            problems.push(format!(
                "--global-batch-size ({}) is not divisible by --micro-batch-size ({}) × data-parallel size ({dp} = \
                 world size {world_size} / (TP {tp} × PP {pp})) = {per_step}",
                self.global_batch_size, self.micro_batch_size
            ));
        }
        if let Some(pattern) = &self.hybrid_override_pattern {
            if let Some(bad) = pattern.chars().find(|c| !matches!(c, 'M' | '*')) {
                problems.push(format!(
                    "--hybrid-override-pattern ({pattern:?}) has {bad:?}; accepted: `M` (Mamba) and `*` (transformer)"
                ));
            } else if pattern.chars().count() != self.num_layers as usize {
                problems.push(format!(
                    "--hybrid-override-pattern ({pattern:?}) has {} layers, --num-layers is {}",
                    pattern.chars().count(),
                    self.num_layers
                ));
            }
        }
        if self.enable_cuda_graph && self.cuda_graph_warmup_steps == 0 {
            problems.push("--cuda-graph-warmup-steps must be at least 1 with --enable-cuda-graph, got 0".to_string());
        }
        if self.bf16 && self.fp16 {
            problems.push("--bf16 and --fp16 cannot both be given".to_string());
        }
        if self.save_interval.is_some() && self.save.is_none() {
            problems.push(format!("--save-interval ({}) needs --save DIR", self.save_interval.unwrap_or_default()));
        }
        if self.manual_gc_interval > 0 && !self.manual_gc {
            problems.push(format!("--manual-gc-interval ({}) needs --manual-gc", self.manual_gc_interval));
        }
        if self.async_save && self.save.is_none() {
            problems.push("--async-save needs --save DIR".to_string());
        }
        if !(self.lr.is_finite() && self.lr >= 0.0) {
            problems.push(format!("--lr must be a non-negative number, got {}", self.lr));
        }
        if !(self.min_lr.is_finite() && self.min_lr >= 0.0 && self.min_lr <= self.lr) {
            problems.push(format!("--min-lr ({}) must be between 0 and --lr ({})", self.min_lr, self.lr));
        }
        if !(self.clip_grad.is_finite() && self.clip_grad >= 0.0) {
            problems.push(format!("--clip-grad must be a non-negative number, got {}", self.clip_grad));
        }
        if self.comm_timeout == 0 {
            problems.push("--comm-timeout must be at least 1 second, got 0".to_string());
        } else if self.comm_timeout > MAX_COMM_TIMEOUT_S {
            // A deadline this far ahead overflows the clock (a panic in every rank).
            problems.push(format!(
                "--comm-timeout must be at most {MAX_COMM_TIMEOUT_S} seconds (a year), got {}",
                self.comm_timeout
            ));
        }
        for (flag, iteration) in [("--inject-nan-at", self.inject_nan_at), ("--inject-crash-at", self.inject_crash_at)]
        {
            if let Some(iteration) = iteration.filter(|i| *i == 0 || *i > self.train_iters) {
                // It would never fire: a test that relies on it would pass for the wrong reason.
                problems.push(format!(
                    "{flag} {iteration}: the run has no iteration {iteration} (iterations are 1 to --train-iters, {})",
                    self.train_iters
                ));
            }
        }
        if self.step_sleep_ms > MAX_STEP_SLEEP_MS {
            // Longer would stall every rank past any communication timeout.
            problems.push(format!(
                "--step-sleep-ms must be at most {MAX_STEP_SLEEP_MS} (an hour), got {}",
                self.step_sleep_ms
            ));
        }
        if self.eval_interval.is_some() && self.eval_iters == 0 {
            // Nothing to average: the validation loss would print as 0.
            problems.push("--eval-iters must be at least 1 with --eval-interval, got 0".to_string());
        }
        if problems.is_empty() { Ok(Layout { tp, pp, dp }) } else { Err(UsageError(problems)) }
    }

    /// The memory a rank would need for the model and the batch, when it
    /// passes [`MAX_RANK_MEMORY_BYTES`]: such a run would abort in an
    /// allocation (or overflow a size) after telemetry started, so it is
    /// refused with the flags that size it. Computed in `u128`, so that no
    /// flag value overflows it. The estimate is an upper bound of the
    /// simulator's own buffers for one rank holding the whole model: the
    /// parameters with their gradients and two Adam moments (16 bytes each),
    /// a microbatch's activations (eight `f32` copies per layer and
    /// position, plus the logits) and an iteration's samples.
    fn memory_problem(&self) -> Option<String> {
        let (h, layers) = (u128::from(self.hidden_size), u128::from(self.num_layers));
        let (micro, global, seq) =
            (u128::from(self.micro_batch_size), u128::from(self.global_batch_size), u128::from(self.seq_length));
        let vocab = crate::model::VOCAB as u128;
        let parameters = 2 * vocab * h + layers * (h * h + h) + vocab;
        let activations = micro * seq * (8 * h * (layers + 2) + 2 * vocab);
        let bytes = 16 * parameters + 4 * activations + 16 * global * (seq + 1);
        (bytes > MAX_RANK_MEMORY_BYTES).then(|| {
            format!(
                "--num-layers ({layers}), --hidden-size ({h}), --micro-batch-size ({micro}), --global-batch-size \
                 ({global}) and --seq-length ({seq}) need about {} GiB per rank ({parameters} parameters with their \
                 gradients and Adam state, a microbatch's activations, an iteration's samples); the simulator \
                 accepts at most {} GiB: use smaller values",
                bytes.div_ceil(1 << 30),
                MAX_RANK_MEMORY_BYTES >> 30
            )
        })
    }

    /// Checks the paths the run writes at its end, before it starts, so that
    /// a run is not spent to fail on them: `--save` is created (or must
    /// already be a directory), and `--summary-json` must not be a directory
    /// and must sit in an existing directory.
    pub(crate) fn check_output_paths(&self) -> Result<(), UsageError> {
        let mut problems = Vec::new();
        if let Some(save) = &self.save
            && let Err(error) = std::fs::create_dir_all(save)
        {
            problems.push(format!(
                "--save {}: cannot create the directory ({error}); expected a writable directory for the checkpoints",
                save.display()
            ));
        }
        if let Some(summary) = &self.summary_json {
            let parent = summary.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            let problem = if summary.is_dir() {
                Some("it is a directory")
            } else if !parent.is_dir() {
                Some("its directory does not exist or is not a directory")
            } else {
                None
            };
            if let Some(problem) = problem {
                problems.push(format!(
                    "--summary-json {}: {problem}; expected the path of a file in an existing directory",
                    summary.display()
                ));
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(UsageError(problems)) }
    }

    /// Microbatches per iteration on one data-parallel rank.
    pub(crate) fn num_microbatches(&self, layout: Layout) -> u64 {
        self.global_batch_size / (self.micro_batch_size * u64::from(layout.dp))
    }
}

/// Parses `RANK:ITERATION` (clap's value parser of `--inject-control-delay`).
fn parse_control_delay(value: &str) -> Result<(u32, u64), String> {
    let parsed = value
        .split_once(':')
        .and_then(|(rank, iteration)| Some((rank.trim().parse::<u32>().ok()?, iteration.trim().parse::<u64>().ok()?)));
    parsed.ok_or_else(|| format!("expected RANK:ITERATION, two whole numbers such as 1:12, got {value:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Args {
        let mut argv = vec!["megatron-train-sim"];
        argv.extend_from_slice(extra);
        Args::parse_from(argv)
    }

    #[test]
    fn defaults_are_consistent_on_one_and_four_ranks() {
        let args = parse(&[]);
        assert_eq!(args.validate(1, "test").unwrap(), Layout { tp: 1, pp: 1, dp: 1 });
        let args = parse(&["--pipeline-model-parallel-size", "2"]);
        assert_eq!(args.validate(4, "test").unwrap(), Layout { tp: 1, pp: 2, dp: 2 });
        assert_eq!(args.num_microbatches(Layout { tp: 1, pp: 2, dp: 2 }), 2);
    }

    #[test]
    fn every_inconsistency_is_named_with_its_flags_and_values() {
        let args = parse(&["--global-batch-size", "6", "--num-layers", "3", "--pipeline-model-parallel-size", "2"]);
        let message = args.validate(4, "--nproc-per-node").unwrap_err().to_string();
        assert!(message.contains("--global-batch-size (6)"), "{message}");
        assert!(message.contains("--num-layers (3)"), "{message}");
        let message = parse(&["--tensor-model-parallel-size", "3"]).validate(4, "--nproc-per-node").unwrap_err();
        assert!(message.to_string().contains("world size (4, from --nproc-per-node)"), "{message}");
        let message = parse(&["--bf16", "--fp16"]).validate(1, "x").unwrap_err().to_string();
        assert!(message.contains("--bf16 and --fp16"), "{message}");
        let message = parse(&["--hybrid-override-pattern", "M*-*"]).validate(1, "x").unwrap_err().to_string();
        assert!(message.contains("--hybrid-override-pattern (\"M*-*\") has '-'"), "{message}");
        let message = parse(&["--hybrid-override-pattern", "M*"]).validate(1, "x").unwrap_err().to_string();
        assert!(message.contains("has 2 layers, --num-layers is 4"), "{message}");
        assert!(parse(&["--hybrid-override-pattern", "M*M*"]).validate(1, "x").is_ok());
        // Beyond what a checkpoint may carry (it could not be resumed or served).
        let message = parse(&["--seq-length", "1048577"]).validate(1, "x").unwrap_err().to_string();
        assert!(message.contains("--seq-length must be at most 1048576 (2^20 tokens), got 1048577"), "{message}");
        assert!(parse(&["--seq-length", "1048576"]).validate(1, "x").is_ok());
    }

    #[test]
    fn a_model_or_batch_too_large_for_memory_is_refused_with_its_flags_before_anything_starts() {
        let message = parse(&["--hidden-size", "1000000"]).validate(1, "x").unwrap_err().to_string();
        assert_eq!(
            message,
            "--num-layers (4), --hidden-size (1000000), --micro-batch-size (2), --global-batch-size (8) and \
             --seq-length (32) need about 59624 GiB per rank (4000516000256 parameters with their gradients and Adam \
             state, a microbatch's activations, an iteration's samples); the simulator accepts at most 64 GiB: use \
             smaller values"
        );
        // Values whose products overflow a u64 (they panicked or aborted in an allocation).
        for extra in [
            &["--hidden-size", "4294967296"][..],
            &["--num-layers", "4000000000"],
            &["--micro-batch-size", "4000000000", "--global-batch-size", "4000000000"],
            &["--global-batch-size", "4000000000", "--micro-batch-size", "1"],
        ] {
            let message = parse(extra).validate(1, "x").unwrap_err().to_string();
            assert!(message.contains("the simulator accepts at most 64 GiB"), "{extra:?}: {message}");
        }
        // The largest documented sequence length with a small batch still runs.
        let long = parse(&["--seq-length", "1048576", "--global-batch-size", "2", "--micro-batch-size", "1"]);
        assert!(long.validate(1, "x").is_ok());
    }

    #[test]
    fn a_comm_timeout_past_a_year_evaluations_of_no_step_and_faults_that_never_fire_are_refused() {
        let message = parse(&["--comm-timeout", "18446744073709551615"]).validate(2, "x").unwrap_err().to_string();
        assert_eq!(message, "--comm-timeout must be at most 31536000 seconds (a year), got 18446744073709551615");
        assert!(parse(&["--comm-timeout", "31536000"]).validate(2, "x").is_ok());
        let message = parse(&["--eval-interval", "1", "--eval-iters", "0"]).validate(1, "x").unwrap_err().to_string();
        assert_eq!(message, "--eval-iters must be at least 1 with --eval-interval, got 0");
        assert!(parse(&["--eval-iters", "0"]).validate(1, "x").is_ok(), "no evaluation: the count is unused");
        let message = parse(&["--inject-crash-at", "0"]).validate(1, "x").unwrap_err().to_string();
        assert_eq!(message, "--inject-crash-at 0: the run has no iteration 0 (iterations are 1 to --train-iters, 50)");
        let message = parse(&["--train-iters", "2", "--inject-nan-at", "99"]).validate(1, "x").unwrap_err().to_string();
        assert_eq!(message, "--inject-nan-at 99: the run has no iteration 99 (iterations are 1 to --train-iters, 2)");
        assert!(parse(&["--train-iters", "2", "--inject-nan-at", "2"]).validate(1, "x").is_ok());
        let message = parse(&["--step-sleep-ms", "3600001"]).validate(1, "x").unwrap_err().to_string();
        assert_eq!(message, "--step-sleep-ms must be at most 3600000 (an hour), got 3600001");
    }

    #[test]
    fn an_output_path_that_cannot_be_written_is_refused_before_the_run() {
        let dir = std::env::temp_dir().join(format!("megatron-train-sim-paths-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a-file");
        std::fs::write(&file, "x").unwrap();
        let (file_arg, dir_arg) = (file.display().to_string(), dir.display().to_string());
        let error = parse(&["--save", &format!("{file_arg}/sub")]).check_output_paths().unwrap_err().to_string();
        assert!(error.starts_with(&format!("--save {file_arg}/sub: cannot create the directory (")), "{error}");
        assert!(error.ends_with("); expected a writable directory for the checkpoints"), "{error}");
        let error = parse(&["--summary-json", &dir_arg]).check_output_paths().unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "--summary-json {dir_arg}: it is a directory; expected the path of a file in an existing directory"
            )
        );
        let missing = format!("{dir_arg}/missing/summary.json");
        let error = parse(&["--summary-json", &missing]).check_output_paths().unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "--summary-json {missing}: its directory does not exist or is not a directory; expected the path \
                 of a file in an existing directory"
            )
        );
        let save = dir.join("ckpt");
        let good = parse(&["--save", &save.display().to_string(), "--summary-json", "summary.json"]);
        assert!(good.check_output_paths().is_ok());
        assert!(save.is_dir(), "--save is created before the run");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kill_and_crash_during_save_flags_are_checked_against_the_run() {
        let args = parse(&["--inject-kill", "0:forward:18", "--inject-kill", "1:forward:18", "--train-iters", "40"]);
        assert_eq!(args.inject_kill.len(), 2);
        assert!(args.validate(2, "x").is_ok());
        let message = args.validate(1, "--nproc-per-node").unwrap_err().to_string();
        assert_eq!(message, "--inject-kill 1:forward:18: rank 1 does not exist (the world has 1 ranks: 0 to 0)");
        let twice = parse(&["--inject-kill", "0:forward:3", "--inject-kill", "0:data:4", "--train-iters", "40"]);
        assert_eq!(
            twice.validate(1, "x").unwrap_err().to_string(),
            "--inject-kill 0:forward:3 and --inject-kill 0:data:4: rank 0 is given twice; give one value per rank"
        );
        let error = Args::try_parse_from(["megatron-train-sim", "--inject-kill", "0:comm:3"]).unwrap_err().to_string();
        assert!(error.contains("--inject-kill") && error.contains("PHASE must be one of"), "{error}");

        let save = ["--save", "D", "--save-interval", "10", "--train-iters", "40"];
        let with_save = |extra: &[&str]| parse(&[&save[..], extra].concat());
        assert!(with_save(&["--async-save", "--inject-crash-during-save", "20"]).validate(1, "x").is_ok());
        let message = with_save(&["--inject-crash-during-save", "20"]).validate(1, "x").unwrap_err().to_string();
        assert!(message.starts_with("--inject-crash-during-save 20 needs --async-save"), "{message}");
        let message =
            with_save(&["--async-save", "--inject-crash-during-save", "25"]).validate(1, "x").unwrap_err().to_string();
        assert!(message.contains("there is no save at iteration 25"), "{message}");
        let message =
            parse(&["--async-save", "--inject-crash-during-save", "5"]).validate(1, "x").unwrap_err().to_string();
        assert!(message.contains("--async-save needs --save DIR"), "{message}");
        assert!(message.contains("--inject-crash-during-save 5 needs --save DIR"), "{message}");
        let error = Args::try_parse_from(["megatron-train-sim", "--inject-crash-during-save", "0"]).unwrap_err();
        assert!(error.to_string().contains("ITERATION must be a whole number, 1 or more"), "{error}");
    }
}
