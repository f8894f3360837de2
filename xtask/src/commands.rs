//! The commands that both `ci` runs and `tidy` checks the README for, and
//! the crates both name (a leaf module, so that neither task imports the
//! other).

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

/// The candle example (examples/candle-train): a real framework trained and
/// instrumented end to end. A workspace member outside the default members
/// and outside `ci`'s otel-off loop: with `otel` it is linted and tested by
/// the workspace's `--all-features` steps (its test runs the program twice,
/// a stop and a resume, and checks the export with the viewer command), and
/// it is built once more, without `otel`, by its own step of `ci`; `tidy`
/// checks it as an application.
pub(crate) const CANDLE_EXAMPLE: &str = "lens-example-candle";
