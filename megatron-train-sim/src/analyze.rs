//! `megatron-train-sim analyze DIR`: the cross-rank analyses of a `file`
//! export, with no server (docs/ranks.md). Today one section,
//! "stragglers": per window of log intervals, the rank that makes its
//! data-parallel peers wait, its phase, its lateness and the peers' wait
//! (megatron-telemetry's `stragglers` rule), from the `megatron.rank.*`
//! metrics that every rank writes with `MEGATRON_OTEL_RANK_METRICS=1`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lens_core::otlp_file;
use megatron_telemetry::stragglers;

/// `analyze`: cross-rank analyses of a `file` export.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct AnalyzeArgs {
    /// The `file` exporter's directory (holding `metrics-rank<N>.jsonl`).
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,
}

/// What the directory held.
#[derive(Debug)]
pub(crate) struct Analysis {
    /// Ranks with rank metrics.
    pub(crate) ranks: usize,
    /// The named stragglers.
    pub(crate) stragglers: Vec<stragglers::Straggler>,
    /// Lines or points that could not be read.
    pub(crate) skipped: u64,
}

/// Reads `dir` and runs the analyses.
pub(crate) fn analyze(dir: &Path) -> Result<Analysis, String> {
    let files = otlp_file::metrics_files(dir).map_err(|e| format!("analyze {}: {e}", dir.display()))?;
    if files.is_empty() {
        return Err(format!(
            "analyze {}: no metrics-rank<N>.jsonl file there (is it a `file` export directory, telemetry/<run id>/?)",
            dir.display()
        ));
    }
    let mut points = Vec::new();
    let mut skipped = 0;
    for (rank, path) in &files {
        let file = otlp_file::read_metric_file(path, *rank).map_err(|e| format!("analyze {}: {e}", path.display()))?;
        skipped += file.skipped;
        points.extend(file.points);
    }
    let intervals = stragglers::rank_intervals(&points);
    let ranks = intervals.iter().map(|r| r.rank).collect::<std::collections::BTreeSet<_>>().len();
    Ok(Analysis { ranks, stragglers: stragglers::analyze(&intervals), skipped })
}

/// Runs `analyze` for the command line: the sections on standard output.
pub(crate) fn run(args: &AnalyzeArgs) -> ExitCode {
    match analyze(&args.dir) {
        Ok(analysis) => {
            let mut out = std::io::stdout().lock();
            let written = stragglers::write_section(&mut out, &analysis.stragglers, analysis.ranks).and_then(|()| {
                if analysis.skipped > 0 {
                    writeln!(out, "({} unreadable lines or points skipped)", analysis.skipped)?;
                }
                Ok(())
            });
            if written.is_err() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        Err(message) => {
            crate::output::error(None, &message);
            ExitCode::from(2)
        }
    }
}
