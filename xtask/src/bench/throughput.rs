//! Export throughput from one process to a loopback OTLP receiver in another
//! process, at the project's default batch settings, with no drops.
//!
//! The receiver is `lens-core/examples/otlp-sink.rs` (it decodes every
//! request and counts the spans); the sender is `lens-core/examples/otlp-load.rs`
//! (`setup_telemetry` with the OTLP exporter, spans ended from one thread at a
//! paced rate). Both are built with the bench profile. Each scenario climbs a
//! ladder of offered rates, a few seconds each, stops at the first rate that
//! is not held and bisects twice between the two; a rate is held when the
//! sender kept pace, nothing was dropped or failed, and the receiver counted
//! every span. The figure is the
//! highest rate held, beside the drop count at the next step, the queue's
//! bound in memory and the sender's peak resident memory. Floors are checked
//! only on the CI machine kind; elsewhere the figures are reported.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context, Result, bail};

use super::{Budgets, Machine, Row, Verdict};
use crate::{cargo, run_cmd, say, workspace_root};

/// Offered rates, spans per second.
const LADDER: &[u64] = &[100_000, 200_000, 400_000, 700_000, 1_000_000, 1_400_000, 2_000_000, 2_800_000];
/// Seconds per step.
const SECONDS: u64 = 2;
/// Bisection steps after the ladder.
const BISECTIONS: usize = 2;
/// The default queue size (`OTEL_BSP_MAX_QUEUE_SIZE`).
const QUEUE: u64 = 65_536;

const SCENARIOS: &[(&str, &str, usize)] = &[
    ("export_http_protobuf", "http/protobuf", 0),
    ("export_http_protobuf_5_attrs", "http/protobuf", 5),
    ("export_grpc", "grpc", 0),
];

struct Sink {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

impl Sink {
    fn start(program: &Path, kind: &str) -> Result<Sink> {
        let mut child = Command::new(program)
            .arg(kind)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start {}", program.display()))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let port = line.trim().strip_prefix("port ").and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            bail!("the OTLP sink did not say its port (said `{}`)", line.trim());
        };
        Ok(Sink { child, stdin, stdout, port })
    }

    /// Spans received so far.
    fn received(&mut self) -> Result<u64> {
        writeln!(self.stdin)?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        line.trim().parse().with_context(|| format!("the sink answered `{}`", line.trim()))
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Step {
    rate: u64,
    achieved: f64,
    offered: u64,
    dropped: u64,
    lost: u64,
    errors: u64,
    peak_rss_kib: u64,
    span_data_bytes: u64,
}

impl Step {
    fn held(&self) -> bool {
        self.dropped == 0 && self.lost == 0 && self.errors == 0 && self.achieved >= 0.95 * self.rate as f64
    }
}

fn build() -> Result<(PathBuf, PathBuf)> {
    run_cmd(cargo(&[
        "build",
        "-p",
        "lens-core",
        "--features",
        "otlp-sink",
        "--profile",
        "bench",
        "--example",
        "otlp-sink",
        "--example",
        "otlp-load",
    ]))?;
    let dir = workspace_root().join("target/release/examples");
    Ok((dir.join("otlp-sink"), dir.join("otlp-load")))
}

fn step(load: &Path, sink: &mut Sink, protocol: &str, attrs: usize, rate: u64) -> Result<Step> {
    let before = sink.received()?;
    let out = Command::new(load)
        .args([
            format!("http://127.0.0.1:{}", sink.port),
            protocol.to_string(),
            attrs.to_string(),
            rate.to_string(),
            SECONDS.to_string(),
        ])
        .env_remove("OTEL_EXPORTER_OTLP_HEADERS")
        .output()
        .context("could not run otlp-load")?;
    if !out.status.success() {
        bail!("otlp-load failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).context("otlp-load printed no JSON line")?;
    let field = |name: &str| json[name].as_u64().with_context(|| format!("no `{name}` from otlp-load"));
    let offered = field("offered")?;
    let produce_s = json["produce_s"].as_f64().context("no `produce_s` from otlp-load")?;
    let received = sink.received()? - before;
    Ok(Step {
        rate,
        achieved: offered as f64 / produce_s,
        offered,
        dropped: field("dropped")?,
        lost: offered.saturating_sub(received),
        errors: field("export_errors")?,
        peak_rss_kib: field("peak_rss_kib")?,
        span_data_bytes: field("span_data_bytes")?,
    })
}

fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (index, c) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn rows(budgets: &Budgets, machine: &Machine) -> Result<Vec<Row>> {
    let (sink_program, load) = build()?;
    let checked = machine.is_ci_kind();
    let mut rows = Vec::new();
    for (scenario, protocol, attrs) in SCENARIOS {
        let floor = budgets.get(scenario, "min_spans_per_sec")?;
        let mut sink = Sink::start(&sink_program, if *protocol == "grpc" { "grpc" } else { "http" })?;
        let mut best: Option<Step> = None;
        let mut failed: Option<Step> = None;
        for rate in LADDER {
            let result = step(&load, &mut sink, protocol, *attrs, *rate)?;
            say(&format!(
                "xtask bench: {scenario} at {rate}/s: offered {} ({:.0}/s), dropped {}, not received {}, errors {}",
                result.offered, result.achieved, result.dropped, result.lost, result.errors
            ));
            if result.held() {
                best = Some(result);
            } else {
                failed = Some(result);
                break;
            }
        }
        // Two bisection steps between the last rate held and the first not held.
        for _ in 0..BISECTIONS {
            let (Some(low), Some(high)) = (&best, &failed) else { break };
            let rate = (low.rate + high.rate) / 2;
            let result = step(&load, &mut sink, protocol, *attrs, rate)?;
            say(&format!(
                "xtask bench: {scenario} at {rate}/s: offered {} ({:.0}/s), dropped {}, not received {}, errors {}",
                result.offered, result.achieved, result.dropped, result.lost, result.errors
            ));
            if result.held() {
                best = Some(result);
            } else {
                failed = Some(result);
            }
        }
        let held = best.as_ref().map_or(0.0, |s| s.achieved);
        let mut measured = format!("{} spans/s with 0 dropped", thousands(held as u64));
        match &failed {
            Some(next) => {
                measured.push_str(&format!(
                    " (at {}/s offered: {}/s reached, {} dropped, {} not received)",
                    thousands(next.rate),
                    thousands(next.achieved as u64),
                    thousands(next.dropped),
                    thousands(next.lost)
                ));
            }
            None => measured.push_str(" (the top of the ladder)"),
        }
        if let Some(sample) = best.as_ref().or(failed.as_ref()) {
            measured.push_str(&format!(
                "; queue bound {} × {} B = {:.1} MiB plus attributes; sender peak RSS {:.0} MiB",
                thousands(QUEUE),
                sample.span_data_bytes,
                (QUEUE * sample.span_data_bytes) as f64 / (1024.0 * 1024.0),
                sample.peak_rss_kib as f64 / 1024.0
            ));
        }
        let verdict = if !checked {
            Verdict::Reported
        } else if held >= floor {
            Verdict::Pass
        } else {
            Verdict::Fail
        };
        let budget = if checked {
            format!("≥ {} spans/s", thousands(floor as u64))
        } else {
            format!("≥ {} spans/s on the CI kind only", thousands(floor as u64))
        };
        rows.push(Row {
            scenario: (*scenario).to_string(),
            measured,
            budget,
            verdict,
            python: if *attrs == 0 && *protocol != "grpc" { "≈ 70,000 spans/s" } else { "" },
        });
    }
    Ok(rows)
}
