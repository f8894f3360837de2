//! `lens recover DIR`: replays the crash-safe spools of a run that is never
//! restarted (see docs/crashes.md).
//!
//! Every rank of a job keeps a spool file while telemetry is enabled; when a
//! process is killed, the next attempt replays its spool at setup. A run
//! that is not restarted has no next attempt: `lens recover DIR` does the
//! same replay, for every rank's spool in `DIR` whose writer is dead,
//! through the exporter the program's variables configure (`--prefix`,
//! default `NEMO_LENS`: `<PREFIX>_EXPORTER`, `OTEL_EXPORTER_OTLP_*`...) or,
//! with `--to-files OUT`, into `OUT/traces-rank0.jsonl`. Each replayed span
//! keeps its ids, start time and its dead process's resource; spans open at
//! the kill end at the last-alive stamp, marked `nemo.span.truncated`.
//! A spool is removed once its spans were exported, so a second recover
//! replays nothing.
//!
//! Exit codes: 0 when every dead spool was replayed (or there was none), 1
//! when a spool could not be opened, read or exported, or belongs to
//! another user (each named in a warning with the reason), 2 for bad input
//! (no such directory, a bad configuration).

use std::fmt;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use lens_fallbacks::setup::{SetupError, Telemetry};

/// `recover`: replay the spools in a directory.
#[derive(Clone, Debug, clap::Args)]
pub struct RecoverArgs {
    /// The spool directory: `<PREFIX>_SPOOL_DIR`, or `<checkpoint dir>/lens-spool`,
    /// or `<file-export dir>/lens-spool` (by default `telemetry/lens-spool`).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Write the replayed spans to `OUT/traces-rank0.jsonl` (the `file`
    /// exporter's format) instead of the configured exporter.
    #[arg(long, value_name = "OUT")]
    pub to_files: Option<PathBuf>,
    /// The program's variable prefix: the exporter is configured from
    /// `<PREFIX>_*`, then `NEMO_LENS_*`, then the `OTEL_*` variables.
    #[arg(long, value_name = "PREFIX", default_value = "NEMO_LENS", value_parser = parse_prefix)]
    pub prefix: String,
}

/// `--prefix`'s value parser: a variable prefix such as `MEGATRON_OTEL`
/// (letters, digits and `_`, starting with a letter). Anything else would
/// read variables no program sets, silently.
fn parse_prefix(value: &str) -> Result<String, String> {
    let well_formed = value.starts_with(|c: char| c.is_ascii_alphabetic())
        && !value.ends_with('_')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if well_formed {
        Ok(value.to_string())
    } else {
        Err(format!(
            "expected a variable prefix such as NEMO_LENS or MEGATRON_OTEL (letters, digits and '_', starting with a \
             letter, without the trailing '_'), got {value:?}"
        ))
    }
}

/// Why `recover` could not run.
#[derive(Debug)]
pub enum RecoverError {
    /// `DIR` is not a directory that can be read.
    Input {
        /// The path given.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `--to-files OUT` is not a directory that can be made or written.
    Output {
        /// The path given.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The exporter's configuration is bad.
    Setup(SetupError),
    /// This `lens` was built without the runtime (`otel`).
    CompiledOut,
}

impl RecoverError {
    /// 2: bad input or configuration.
    pub fn exit_code(&self) -> u8 {
        2
    }
}

impl fmt::Display for RecoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoverError::Input { path, reason } => write!(
                f,
                "recover: cannot read {}: {reason} (expected the spool directory: <PREFIX>_SPOOL_DIR, \
                 <checkpoint dir>/lens-spool, or telemetry/lens-spool)",
                path.display()
            ),
            RecoverError::Output { path, reason } => write!(
                f,
                "recover: --to-files {}: {reason} (expected a directory to write traces-rank0.jsonl in)",
                path.display()
            ),
            RecoverError::Setup(error) => write!(f, "recover: the exporter's configuration: {error}"),
            RecoverError::CompiledOut => write!(
                f,
                "recover: this `lens` was built without its `otel` feature, so it cannot export; rebuild it with \
                 default features"
            ),
        }
    }
}

impl std::error::Error for RecoverError {}

/// The subcommand: replay, print what was recovered, exit 0, 1 or 2.
pub fn run(args: &RecoverArgs) -> ExitCode {
    match recover(args) {
        Ok(report) => {
            let mut stdout = std::io::stdout().lock();
            if report.spans > 0 {
                let _ = writeln!(
                    stdout,
                    "recovered {} span(s) of {} ({} open when their process died, ended truncated) from {} \
                     spool file(s) in {}",
                    report.spans,
                    report.runs_named(),
                    report.truncated,
                    // Files set aside as damaged were read too.
                    report.consumed.len() + report.set_aside.len(),
                    args.dir.display()
                );
                if let Some(out) = &args.to_files {
                    let _ = writeln!(stdout, "spans written to {}", out.join("traces-rank0.jsonl").display());
                }
            } else if report.failed == 0 {
                // Spools of processes that ended cleanly hold no span: they
                // were consumed all the same.
                let _ = write!(stdout, "nothing to replay in {}", args.dir.display());
                // A checkpoint directory given for the spool beside it.
                let beside = lens_fallbacks::spool::dir_beside_checkpoints(&args.dir);
                let spools = std::fs::read_dir(&beside).map_or(0, |entries| {
                    entries.filter_map(Result::ok).filter(|e| lens_fallbacks::spool::is_spool_file(&e.path())).count()
                });
                if spools > 0 {
                    let _ = write!(stdout, "; did you mean {}? (it holds {spools} spool file(s))", beside.display());
                }
                let _ = writeln!(stdout);
            }
            if report.failed > 0 {
                let _ = writeln!(
                    stdout,
                    "{} spool file(s) in {} could not be replayed whole (the warnings above say why, and where \
                     each is kept); run `lens recover` again once that is fixed",
                    report.failed,
                    args.dir.display()
                );
            }
            if !report.set_aside.is_empty() {
                let _ = writeln!(
                    stdout,
                    "{} damaged spool file(s) set aside (the spans that decoded were replayed; the warnings above \
                     name each): {}",
                    report.set_aside.len(),
                    report.set_aside.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                );
            }
            if report.alive > 0 {
                let _ = writeln!(
                    stdout,
                    "{} spool file(s) left alone: their process is still running (or another replay holds them)",
                    report.alive
                );
            }
            if report.failed > 0 || !report.set_aside.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS }
        }
        Err(error) => {
            crate::error(&error);
            ExitCode::from(error.exit_code())
        }
    }
}

/// Replays the spools of `args.dir`.
pub fn recover(args: &RecoverArgs) -> Result<lens_fallbacks::spool::ReplayReport, RecoverError> {
    let input = |reason: String| RecoverError::Input { path: args.dir.clone(), reason };
    match std::fs::metadata(&args.dir) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(_) => return Err(input("not a directory".into())),
        Err(error) => return Err(input(error.to_string())),
    }
    if !lens_fallbacks::setup::COMPILED_IN {
        return Err(RecoverError::CompiledOut);
    }
    if let Some(out) = &args.to_files {
        // Checked here, so that the error names the flag rather than the
        // file exporter's variable that carries it.
        std::fs::create_dir_all(out).map_err(|error| RecoverError::Output {
            path: out.clone(),
            reason: if out.exists() && !out.is_dir() { "not a directory".into() } else { error.to_string() },
        })?;
    }
    let prefix = args.prefix.clone();
    let mut overrides: Vec<(String, String)> = vec![
        (format!("{prefix}_ENABLED"), "1".into()),
        (format!("{prefix}_RANK_STRATEGY"), "all_ranks".into()),
        (format!("{prefix}_TRACES_ENABLED"), "1".into()),
        (format!("{prefix}_METRICS_ENABLED"), "0".into()),
        (format!("{prefix}_LOGS_ENABLED"), "0".into()),
        (format!("{prefix}_SAMPLING_STRATEGY"), String::new()),
        // This process keeps no spool of its own.
        (format!("{prefix}_SPOOL"), "0".into()),
        ("OTEL_SDK_DISABLED".into(), "false".into()),
    ];
    if let Some(out) = &args.to_files {
        overrides.push((format!("{prefix}_EXPORTER"), "file".into()));
        overrides.push((format!("{prefix}_FILE_DIR"), out.display().to_string()));
        overrides.push(("OTEL_TRACES_EXPORTER".into(), String::new()));
        // Its startup line names this run id; the spans keep their own
        // run's resource (a random id there read as another run). Without
        // --to-files the id names the default file directory: a fresh one.
        overrides.push((format!("{prefix}_RUN_ID"), "lens-recover".into()));
    }
    let env = lens_fallbacks::FnEnv(move |key: &str| match overrides.iter().find(|(k, _)| k == key) {
        Some((_, value)) if value.is_empty() => None,
        Some((_, value)) => Some(value.clone()),
        None => std::env::var(key).ok(),
    });
    let file_dir = format!("{prefix}_FILE_DIR");
    let telemetry =
        Telemetry::builder(&args.prefix).env(env).rank(lens_fallbacks::RankContext::SINGLE).setup().map_err(
            |error| {
                // The file directory is `--to-files`: named as the flag, not as
                // the variable that carries it.
                let said = error.to_string();
                match &args.to_files {
                    Some(out) if said.contains(&file_dir) => RecoverError::Output {
                        path: out.clone(),
                        reason: said
                            .replace(&format!("; choose a writable directory with {file_dir}"), "")
                            .replace(&format!("{file_dir}: "), ""),
                    },
                    _ => RecoverError::Setup(error),
                }
            },
        )?;
    let report = lens_fallbacks::spool::recover(&telemetry, &args.dir);
    // A collector's rejection of recovered spans (a partial success) is
    // said by the exporter.
    telemetry.shutdown(Duration::from_secs(10));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    /// `lens recover`'s flags alone (the crate's `Cli` is the crate root's,
    /// which dispatches to this module).
    #[derive(Debug, clap::Parser)]
    struct Recover {
        #[command(flatten)]
        args: super::RecoverArgs,
    }

    #[test]
    fn a_prefix_that_is_no_variable_prefix_is_refused_with_what_is_accepted() {
        let parse = |prefix: &str| Recover::try_parse_from(["recover", "DIR", "--prefix", prefix]);
        for bad in ["", "bad prefix", "MEGATRON_OTEL_", "1LENS"] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(
                error.contains(&format!(
                    "invalid value '{bad}' for '--prefix <PREFIX>': expected a variable prefix such as NEMO_LENS or \
                     MEGATRON_OTEL (letters, digits and '_', starting with a letter, without the trailing '_'), got \
                     {bad:?}"
                )),
                "{error}"
            );
        }
        assert!(parse("MEGATRON_OTEL").is_ok());
    }
}
