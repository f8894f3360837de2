//! What people and programs read: the progress line (the last rank only,
//! to stderr, at most ten lines a second), the summary at the end, and the
//! machine-readable summary of `--summary-json`.
//!
//! The last rank prints: it holds the loss (the last pipeline stage), and it
//! is the rank that exports under the default rank strategy (`single_rank`,
//! export rank -1), so its summary can say where telemetry went. Other
//! exporting ranks add one line each about their own telemetry.
//! All printing of the simulator is in this module.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::outcome::{ExitReason, Outcome};

/// Writes one line on standard error in a single `write` call, so that the
/// lines of several rank processes sharing one stderr never interleave
/// mid-line (`eprintln!` may write a line in several pieces).
macro_rules! stderr_line {
    ($($arg:tt)*) => {
        $crate::output::write_line(&format!($($arg)*))
    };
}

/// The function behind `stderr_line!`.
pub(crate) fn write_line(text: &str) {
    use std::io::Write as _;
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// One log interval, as printed.
#[derive(Debug)]
pub(crate) struct LogLine {
    /// The iteration just completed (1-based).
    pub(crate) iteration: u64,
    /// Mean loss over the interval's non-skipped iterations.
    pub(crate) loss: Option<f64>,
    /// Mean step time over the interval.
    pub(crate) step_ms: f64,
    /// Tokens per second at that step time.
    pub(crate) tokens_per_sec: f64,
    /// The learning rate of the last iteration.
    pub(crate) learning_rate: f64,
    /// The gradient norm of the last iteration.
    pub(crate) grad_norm: f64,
    /// Skipped iterations in the interval.
    pub(crate) skipped: u64,
    /// The parameter norm, with `--log-params-norm`.
    pub(crate) params_norm: Option<f64>,
}

/// The progress printer; silent except on rank 0.
#[derive(Debug)]
pub(crate) struct Progress {
    enabled: bool,
    total: u64,
    last: Option<Instant>,
}

impl Progress {
    /// A printer for a run of `total` iterations.
    pub(crate) fn new(enabled: bool, total: u64) -> Progress {
        Progress { enabled, total, last: None }
    }

    /// Prints `line` unless a line went out less than 100 ms ago (the last
    /// iteration and lines with skipped iterations always print).
    pub(crate) fn log(&mut self, line: &LogLine) {
        if !self.enabled {
            return;
        }
        let recent = self.last.is_some_and(|t| t.elapsed() < Duration::from_millis(100));
        if recent && line.iteration != self.total && line.skipped == 0 {
            return;
        }
        self.last = Some(Instant::now());
        let loss = line.loss.map_or_else(|| "n/a".to_string(), |l| format!("{l:.4}"));
        let mut text = format!(
            "iter {}/{} | lm loss {loss} | step {:.1} ms | {} tok/s | lr {:.3e} | grad norm {:.3}",
            line.iteration,
            self.total,
            line.step_ms,
            human(line.tokens_per_sec),
            line.learning_rate,
            line.grad_norm
        );
        if let Some(norm) = line.params_norm {
            text.push_str(&format!(" | params norm {norm:.3}"));
        }
        if line.skipped > 0 {
            text.push_str(&format!(" | skipped {}", line.skipped));
        }
        stderr_line!("{text}");
    }

    /// Prints an evaluation result.
    pub(crate) fn eval(&mut self, iteration: u64, loss: f64) {
        if self.enabled {
            stderr_line!("validation at iter {iteration} | lm loss {loss:.4}");
        }
    }
}

fn human(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.1}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// Prints an error of this process (prefixed with the rank when known).
pub(crate) fn error(rank: Option<u32>, message: &dyn std::fmt::Display) {
    match rank {
        Some(rank) => stderr_line!("megatron-train-sim: rank {rank}: error: {message}"),
        None => stderr_line!("megatron-train-sim: error: {message}"),
    }
}

/// Prints an informational line of the launcher or of rank 0.
pub(crate) fn note(message: &dyn std::fmt::Display) {
    stderr_line!("megatron-train-sim: {message}");
}

/// Says, at start-up, which peak MFU divides by, or why there is none (the
/// last rank, with telemetry on).
pub(crate) fn mfu_peak(peak: &crate::telemetry::MfuPeak) {
    note(&peak.startup_line());
}

/// What the summary says about telemetry.
#[derive(Debug)]
pub(crate) struct TelemetrySummary {
    /// Whether telemetry was on.
    pub(crate) enabled: bool,
    /// Whether this rank exported.
    pub(crate) exporting: bool,
    /// The destinations (`file:telemetry/<run id>/`, an endpoint, ...).
    pub(crate) destinations: Vec<String>,
    /// The shutdown report.
    pub(crate) report: lens_fallbacks::ShutdownReport,
    /// The run's goodput totals at the end (`None` with telemetry off) and the latest MFU.
    pub(crate) goodput: (Option<lens_training::goodput::GoodputTotals>, Option<f64>),
}

impl TelemetrySummary {
    /// Shuts `telemetry` down and says what it did, for a run with no
    /// goodput (a server, a rank that failed before training).
    pub(crate) fn at_shutdown(telemetry: &mut crate::telemetry::Telemetry) -> TelemetrySummary {
        TelemetrySummary {
            enabled: telemetry.is_enabled(),
            exporting: telemetry.is_exporting(),
            destinations: telemetry.destinations(),
            report: telemetry.shutdown(),
            goodput: (None, None),
        }
    }
}

/// The `goodput` object of the summary JSON (`null` with telemetry off).
fn goodput_json(telemetry: &TelemetrySummary) -> Value {
    let (Some(totals), mfu) = telemetry.goodput else { return Value::Null };
    let seconds: serde_json::Map<String, Value> =
        totals.buckets().map(|(bucket, s)| (bucket.as_str().to_string(), json!(s))).collect();
    json!({
        "seconds": seconds,
        "total_seconds": totals.total_seconds(),
        "ratio": totals.ratio(),
        "productive_iterations": totals.productive_iterations,
        "pending_iterations": totals.pending_iterations,
        "lost_iterations": totals.lost_iterations,
        "attempts": totals.attempts,
        "lost_precision": totals.lost_precision.as_str(),
        "mfu": mfu,
    })
}

/// The goodput line of the end-of-run summary.
fn print_goodput(telemetry: &TelemetrySummary) {
    let (Some(totals), mfu) = telemetry.goodput else { return };
    let parts: Vec<String> =
        totals.buckets().filter(|(_, s)| *s > 0.0).map(|(b, s)| format!("{} {s:.2} s", b.as_str())).collect();
    // Said only when lost progress is not exact (the spool off, or a resume
    // that charged a dead attempt from its progress record alone).
    let precision = match totals.lost_precision {
        lens_training::goodput::LostPrecision::Iteration => String::new(),
        rough => format!(" | {}", rough.describe()),
    };
    stderr_line!(
        "goodput: {} over {} attempt(s), {:.2} s in all: {} | {} iterations kept, {} lost{precision} | MFU {}",
        totals.ratio().map_or_else(|| "n/a".to_string(), |r| format!("{:.1}%", r * 100.0)),
        totals.attempts,
        totals.total_seconds(),
        parts.join(", "),
        totals.productive_iterations,
        totals.lost_iterations,
        mfu.map_or_else(|| "n/a (peak unknown)".to_string(), |m| format!("{:.2}%", m * 100.0)),
    );
}

/// The machine-readable summary (schema in docs/simulator.md).
pub(crate) fn summary_json(
    outcome: &Outcome,
    layout: crate::config::Layout,
    run_id: &str,
    precision: &str,
    telemetry: &TelemetrySummary,
) -> Value {
    let step_times: Vec<f64> = outcome.iterations.iter().map(|(_, ms, _)| *ms).collect();
    let mean_ms = mean(&step_times);
    let tokens_per_sec = mean_ms.map(|ms| outcome.tokens_per_iteration as f64 / (ms / 1e3));
    let tflops = mean_ms.map(|ms| outcome.flops_per_iteration / (ms / 1e3) / 1e12 / f64::from(layout.world()));
    let report = &telemetry.report;
    let mean_iteration_ms = mean(&outcome.iteration_times_ms);
    // Read now, after telemetry's shutdown: its final flush counts.
    let cpu_ms = outcome
        .loop_started_cpu
        .zip(crate::cpu::process_cpu())
        .map(|(started, now)| now.saturating_sub(started).as_secs_f64() * 1e3);
    let cpu_ms_per_iteration =
        cpu_ms.filter(|_| !outcome.iterations.is_empty()).map(|ms| ms / outcome.iterations.len() as f64);
    json!({
        "schema": "megatron-train-sim.summary/1",
        "run_id": run_id,
        "world_size": layout.world(),
        "layout": {"tensor_model_parallel_size": layout.tp, "pipeline_model_parallel_size": layout.pp, "data_parallel_size": layout.dp},
        "device": outcome.device,
        "precision": precision,
        "exit_reason": outcome.exit_reason.as_str(),
        "start_iteration": outcome.start_iteration,
        "final_iteration": outcome.final_iteration,
        "iterations_run": outcome.iterations.len(),
        "skipped_iterations": outcome.skipped_iterations,
        "iteration_losses": outcome.iterations.iter().map(|(i, _, loss)| json!({"iteration": i, "loss": loss})).collect::<Vec<_>>(),
        "losses": outcome.log_losses.iter().map(|(i, loss)| json!({"iteration": i, "loss": loss})).collect::<Vec<_>>(),
        "eval_losses": outcome.eval_losses.iter().map(|(i, loss)| json!({"iteration": i, "loss": loss})).collect::<Vec<_>>(),
        "step_times_ms": step_times,
        "mean_step_time_ms": mean_ms,
        "iteration_times_ms": outcome.iteration_times_ms,
        "mean_iteration_time_ms": mean_iteration_ms,
        "process_cpu_ms": cpu_ms,
        "process_cpu_ms_per_iteration": cpu_ms_per_iteration,
        "tokens_per_iteration": outcome.tokens_per_iteration,
        "corpus_unigram_entropy_nats": outcome.corpus_entropy_nats,
        "tokens_per_sec": tokens_per_sec,
        "flops_per_iteration": outcome.flops_per_iteration,
        "throughput_tflops_per_rank": tflops,
        "peak_memory_bytes": outcome.peak_memory_bytes,
        "messages_sent": outcome.messages_sent,
        "checkpoints": outcome.checkpoints.iter().map(|(i, path)| json!({"iteration": i, "path": path.display().to_string()})).collect::<Vec<_>>(),
        "telemetry": {
            "enabled": telemetry.enabled,
            "exporting": telemetry.exporting,
            "destinations": telemetry.destinations,
            "spans_exported": report.spans.exported,
            "spans_dropped": report.spans.dropped(),
            "metric_points_exported": report.metrics.points_exported,
            "truncated_spans": report.truncated_spans,
            "report": report.to_string(),
        },
        "goodput": goodput_json(telemetry),
    })
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Prints the end-of-run summary (the last rank).
pub(crate) fn print_summary(outcome: &Outcome, layout: crate::config::Layout, telemetry: &TelemetrySummary) {
    let step_times: Vec<f64> = outcome.iterations.iter().map(|(_, ms, _)| *ms).collect();
    let mean_ms = mean(&step_times).unwrap_or(0.0);
    let tokens_per_sec = if mean_ms > 0.0 { outcome.tokens_per_iteration as f64 / (mean_ms / 1e3) } else { 0.0 };
    let last_loss = outcome.iterations.iter().rev().find_map(|(_, _, loss)| *loss);
    stderr_line!(
        "done: {} ({}) | iterations {} -> {} ({} run, {} skipped) | mean step {mean_ms:.1} ms | {} tok/s | \
         final lm loss {} | {} rank(s): TP {} × PP {} × DP {} on {}",
        outcome.exit_reason.as_str(),
        if outcome.exit_reason == ExitReason::Signal { "drained after a signal" } else { "all iterations" },
        outcome.start_iteration,
        outcome.final_iteration,
        outcome.iterations.len(),
        outcome.skipped_iterations,
        human(tokens_per_sec),
        last_loss.map_or_else(|| "n/a".to_string(), |l| format!("{l:.4}")),
        layout.world(),
        layout.tp,
        layout.pp,
        layout.dp,
        outcome.device,
    );
    if let Some((iteration, path)) = outcome.checkpoints.last() {
        stderr_line!("checkpoint: iteration {iteration} in {}", path.parent().unwrap_or(path).display());
    }
    print_goodput(telemetry);
    print_telemetry(layout.world() - 1, telemetry, true);
}

/// Prints where a rank's telemetry went (the last rank in its summary,
/// `summarising`; other exporting ranks on their own line).
pub(crate) fn print_telemetry(rank: u32, telemetry: &TelemetrySummary, summarising: bool) {
    if !telemetry.enabled {
        let sdk_disabled = || {
            std::env::var("OTEL_SDK_DISABLED").ok().and_then(|value| lens_fallbacks::config::parse_bool(&value))
                == Some(true)
        };
        if summarising && lens_fallbacks::setup::COMPILED_IN && sdk_disabled() {
            // Not "enable it with ...": the job may have, and this wins.
            stderr_line!("telemetry: off (OTEL_SDK_DISABLED=true)");
        } else if summarising && lens_fallbacks::setup::COMPILED_IN {
            stderr_line!("telemetry: off (enable it with --otel-enabled or MEGATRON_OTEL_ENABLED=1)");
        } else if summarising {
            stderr_line!("telemetry: off (this build has no `otel` feature: build with it to record telemetry)");
        }
        return;
    }
    if !telemetry.exporting {
        return;
    }
    let to = if telemetry.destinations.is_empty() { "nowhere".to_string() } else { telemetry.destinations.join(", ") };
    // The destinations lead the line; the report's own "sent to" would say
    // them twice.
    let report = lens_fallbacks::ShutdownReport { destinations: Vec::new(), ..telemetry.report.clone() };
    stderr_line!("telemetry (rank {rank}) -> {to}: {report}");
}

/// Writes the summary JSON to `path` (the last rank).
pub(crate) fn write_json(path: &Path, value: &Value) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}
