//! The commands that both `ci` runs and `tidy` checks the README for (a
//! leaf module, so that neither task imports the other).

/// The README's main command (after `cargo`); `tidy` checks that the README
/// states exactly this.
pub(crate) const MAIN_COMMAND: &[&str] = &[
    "run",
    "-p",
    "megatron-train-sim",
    "--",
    "--otel-enabled",
    "--nproc-per-node",
    "2",
    "--pipeline-model-parallel-size",
    "2",
];
