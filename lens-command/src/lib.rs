//! The `lens` command: offline tools for any lens `file` export
//! (`traces-rank<N>.jsonl`, `metrics-rank<N>.jsonl` under
//! `telemetry/<run_id>/`, or a parent holding several run directories),
//! Megatron's or any program's, with no server.
//!
//! - [`trace_view`]: `lens trace-view DIR` converts the spans into a
//!   Chrome/Perfetto trace and prints a per-span-name table;
//! - [`analyze`]: `lens analyze DIR` prints the stragglers, the goodput and
//!   the hangs, reading its input as a stream (memory grows with ranks and
//!   phases, not with the files' size);
//! - [`recover`]: `lens recover DIR` replays the crash-safe spools of a
//!   run that is never restarted;
//! - [`control`]: `lens control FILE ...` writes a running job's control
//!   file (span groups for an iteration window, sampling ratio, per-rank
//!   metrics, hang timeout), `--show`s it, `--reset`s it;
//! - [`advice`]: what the tools tell a user to set names the program's own
//!   variables and span groups, read from the export's resource
//!   (`lens.config.prefix`, `lens.span_groups`).
//!
//! The binary `lens` (`cargo install --path lens-command`) parses [`Cli`];
//! the simulator's `analyze` and `trace-view` subcommands call the same
//! [`trace_view::run`] and [`analyze::run`].

pub mod advice;
pub mod analyze;
pub mod control;
pub mod hangs;
pub mod recover;
pub mod trace_view;

mod output;
pub(crate) use output::{error, warn};

/// The command line of `lens`.
#[derive(Debug, clap::Parser)]
#[command(name = "lens", version, about = "View and analyze a lens `file` export (telemetry/<run id>/).")]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `lens`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Convert a `file` export into a Chrome/Perfetto trace and print a
    /// per-span-name table.
    TraceView(trace_view::TraceViewArgs),
    /// Stragglers, goodput and hangs from a `file` export.
    Analyze(analyze::AnalyzeArgs),
    /// Replay the crash-safe spools of a run that is never restarted.
    Recover(recover::RecoverArgs),
    /// Change a running job's telemetry through its control file (`<PREFIX>_CONTROL_FILE`).
    Control(control::ControlArgs),
}

/// Runs one parsed command line.
pub fn run(cli: &Cli) -> std::process::ExitCode {
    match &cli.command {
        Command::TraceView(args) => trace_view::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Recover(args) => recover::run(args),
        Command::Control(args) => control::run(args),
    }
}
