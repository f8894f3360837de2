//! What a rank's training run produced: the data the loop ([`crate::train`])
//! returns and [`crate::output`] prints and writes as `--summary-json`.
//! Data only, so that the output depends on no part of the loop.

use std::path::PathBuf;

/// How the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExitReason {
    /// All `--train-iters` iterations ran.
    Completed,
    /// A signal with `--exit-signal-handler`: the loop drained.
    Signal,
}

impl ExitReason {
    /// The name the summary uses.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ExitReason::Completed => "completed",
            ExitReason::Signal => "signal",
        }
    }
}

/// What a rank's run produced (the last rank's is the summary).
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The iteration the run started from (0, or the loaded checkpoint's).
    pub(crate) start_iteration: u64,
    /// The iterations completed at the end.
    pub(crate) final_iteration: u64,
    /// Each executed iteration: its number (1-based), step time in ms and loss (`None` when skipped).
    pub(crate) iterations: Vec<(u64, f64, Option<f64>)>,
    /// Each executed iteration's whole time in ms, from its boundary on the
    /// training loop to the next (the step and everything around it:
    /// heartbeat, report, log, metric records, goodput, evaluations, saves).
    pub(crate) iteration_times_ms: Vec<f64>,
    /// The process's CPU time (every thread) when the training loop started.
    pub(crate) loop_started_cpu: Option<std::time::Duration>,
    /// The mean loss of each log interval (`None` when every iteration of it was skipped).
    pub(crate) log_losses: Vec<(u64, Option<f64>)>,
    /// Evaluation losses.
    pub(crate) eval_losses: Vec<(u64, f64)>,
    /// Skipped iterations in total (including before a resume).
    pub(crate) skipped_iterations: u64,
    /// Checkpoints written: iteration and this rank's file.
    pub(crate) checkpoints: Vec<(u64, PathBuf)>,
    /// How the loop ended.
    pub(crate) exit_reason: ExitReason,
    /// Model FLOPs per iteration (`6 × parameters × tokens`, see [`crate::model`]).
    pub(crate) flops_per_iteration: f64,
    /// Tokens per iteration (global batch × sequence length: bytes predicted).
    pub(crate) tokens_per_iteration: u64,
    /// The training corpus's single-byte entropy, nats.
    pub(crate) corpus_entropy_nats: f64,
    /// Peak memory of this rank, bytes.
    pub(crate) peak_memory_bytes: Option<u64>,
    /// The device's name.
    pub(crate) device: String,
    /// Frames this rank sent to other ranks (a count: rank metrics add none).
    pub(crate) messages_sent: u64,
}
