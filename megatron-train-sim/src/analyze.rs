//! `megatron-train-sim analyze DIR`: the cross-rank analyses of a `file`
//! export, with no server (docs/ranks.md, docs/goodput.md). Two sections:
//!
//! - "stragglers" (when DIR holds metrics files): per window of log
//!   intervals, the rank that makes its data-parallel peers wait, its phase,
//!   its lateness and the peers' wait (megatron-telemetry's `stragglers`
//!   rule), from the `megatron.rank.*` metrics that every rank writes with
//!   `MEGATRON_OTEL_RANK_METRICS=1`;
//! - "goodput" (when DIR, or its run directories, hold traces files): the
//!   goodput breakdown from the spans (megatron-telemetry's `goodput_view`),
//!   one attempt per run directory in time order (DIR may be the
//!   `telemetry/` parent of a crashed and a resumed attempt).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lens_fallbacks::otlp_file;
use megatron_telemetry::{goodput_view, stragglers};

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
    /// Ranks with rank metrics (`None`: no metrics files).
    pub(crate) ranks: Option<usize>,
    /// The named stragglers.
    pub(crate) stragglers: Vec<stragglers::Straggler>,
    /// The goodput breakdown from the spans (`None`: no traces files).
    pub(crate) goodput: Option<Result<goodput_view::SpanBreakdown, Vec<goodput_view::Missing>>>,
    /// Lines, points or spans that could not be read.
    pub(crate) skipped: u64,
}

/// Reads `dir` and runs the analyses.
pub(crate) fn analyze(dir: &Path) -> Result<Analysis, String> {
    let files = otlp_file::metrics_files(dir).map_err(|e| format!("analyze {}: {e}", dir.display()))?;
    let attempts = attempt_dirs(dir).map_err(|e| format!("analyze {}: {e}", dir.display()))?;
    if files.is_empty() && attempts.is_empty() {
        return Err(format!(
            "analyze {}: no metrics-rank<N>.jsonl or traces-rank<N>.jsonl file there or in its subdirectories \
             (is it a `file` export directory, telemetry/<run id>/?)",
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
    let goodput = if attempts.is_empty() {
        None
    } else {
        let mut read = Vec::new();
        for (name, rank, path) in attempts {
            let file =
                otlp_file::read_span_file(&path, rank).map_err(|e| format!("analyze {}: {e}", path.display()))?;
            skipped += file.skipped;
            read.push(goodput_view::Attempt { name, rank, spans: file.spans });
        }
        // Attempts in time order: by their first span.
        read.sort_by_key(|a| a.spans.iter().map(|s| s.start_unix_nano).min().unwrap_or(u64::MAX));
        Some(goodput_view::breakdown(&read))
    };
    Ok(Analysis {
        ranks: (!files.is_empty()).then_some(ranks),
        stragglers: stragglers::analyze(&intervals),
        goodput,
        skipped,
    })
}

/// The attempts below `dir`: `dir` itself when it holds traces files, else
/// each subdirectory that does; per attempt its name, and the traces file
/// of its highest rank (the export rank under the default rank strategy;
/// every rank's time splits alike).
fn attempt_dirs(dir: &Path) -> std::io::Result<Vec<(String, u32, PathBuf)>> {
    let last = |dir: &Path| -> std::io::Result<Option<(u32, PathBuf)>> { Ok(otlp_file::traces_files(dir)?.pop()) };
    let name =
        |dir: &Path| dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
    if let Some((rank, path)) = last(dir)? {
        return Ok(vec![(name(dir), rank, path)]);
    }
    let mut attempts = Vec::new();
    for entry in std::fs::read_dir(dir)?.filter_map(Result::ok) {
        let sub = entry.path();
        if sub.is_dir()
            && let Ok(Some((rank, path))) = last(&sub)
        {
            attempts.push((name(&sub), rank, path));
        }
    }
    attempts.sort();
    Ok(attempts)
}

/// Runs `analyze` for the command line: the sections on standard output.
pub(crate) fn run(args: &AnalyzeArgs) -> ExitCode {
    match analyze(&args.dir) {
        Ok(analysis) => {
            let mut out = std::io::stdout().lock();
            let written = analysis
                .ranks
                .map_or(Ok(()), |ranks| stragglers::write_section(&mut out, &analysis.stragglers, ranks))
                .and_then(|()| analysis.goodput.as_ref().map_or(Ok(()), |g| goodput_view::write_section(&mut out, g)))
                .and_then(|()| {
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
