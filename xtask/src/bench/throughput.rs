//! Export throughput from one process to a loopback OTLP receiver in another
//! process, at the project's default batch settings: lens's pipeline against
//! the raw SDK's, as a ratio that holds on any machine.
//!
//! The receiver is `lens-otel-runtime/examples/otlp-sink.rs` (it decodes every
//! request and counts the spans); the sender is `lens-fallbacks/examples/otlp-load.rs`
//! in one of two pipelines with the same OTLP exporter built the same way and
//! the same SDK tracer call ending the spans: `lens-batch` (lens's batch
//! processor as `setup_telemetry` builds it: the record processor that a
//! job's SDK spans go to, each ended span turned into a `SpanRecord` on the
//! calling thread) or `raw` (the SDK's `BatchSpanProcessor` at the same
//! queue, batch size and delay), so that the two differ only in the
//! processor. (A job's facade spans are recorded on the recorder instead;
//! `otlp_cpu_per_span` prices that path, and `managed_span_enabled` the
//! facade on an SDK tracer.) (Lens's processor encodes a batch once,
//! straight from the records into the OTLP request, and a retry resends the
//! bytes; the SDK's processor calls the SDK's exporter.)
//! Both are built with the bench profile. For each scenario one receiver serves
//! both pipelines, alternating in rounds (lens then raw, then raw then lens).
//! Each measurement climbs a ladder of offered rates, a few seconds each,
//! stops at the first rate that is not held and bisects twice between the
//! two; a rate is held when the sender kept pace, nothing was dropped or
//! failed, and the receiver counted every span. The raw SDK's processor drops
//! spans when its queue is full, so the figure compared is each pipeline's
//! highest drop-free rate, not a saturated rate with drops: the ratio is the
//! median over rounds of lens's held rate over raw's held rate. The absolute
//! rates, the drops at the next step, the queue's bound in memory and the
//! sender's peak resident memory are reported beside it with the CPU named.
//! Later rounds start their ladder at half the previous round's held rate
//! (the rungs below are held anyway), to keep the run short.
//!
//! When the band of the rounds straddles the budget (some rounds above it,
//! some below: noise from the rest of the machine), the
//! instructions per span under callgrind decide instead: lens must cost no
//! more than `1 / min_ratio` times raw's, both on the calling thread and in
//! the whole sending process (its export threads included), since on a
//! saturated machine those are what the drop-free rate is made of. A band
//! wholly below the budget fails.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context, Result, bail};

use super::budgets::Budgets;
use super::callgrind;
use super::report::{Machine, Row, Verdict, band, median, wider_than};
use crate::{cargo, run_cmd, say, workspace_root};

/// Offered rates, spans per second.
const LADDER: &[u64] =
    &[25_000, 50_000, 100_000, 200_000, 400_000, 700_000, 1_000_000, 1_400_000, 2_000_000, 2_800_000];
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

/// The two sides of each ratio: the `otlp-load` pipeline names.
const PIPELINES: [&str; 2] = ["lens-batch", "raw"];

/// Spans per callgrind run (and twice as many in the second run); below the
/// queue's bound, so nothing is dropped.
const CALLGRIND_SPANS: u64 = 10_000;

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

/// The receiver: the runtime's example, with tonic's server.
pub(crate) const SINK_BUILD: &[&str] =
    &["build", "-p", "lens-otel-runtime", "--features", "otlp-sink", "--profile", "bench", "--example", "otlp-sink"];
/// The sender: the facade's example (setup, spans, both OTLP transports).
pub(crate) const LOAD_BUILD: &[&str] = &[
    "build",
    "-p",
    "lens-fallbacks",
    "--features",
    "otlp-grpc,otlp-http",
    "--profile",
    "bench",
    "--example",
    "otlp-load",
];

fn build() -> Result<(PathBuf, PathBuf)> {
    run_cmd(cargo(SINK_BUILD))?;
    run_cmd(cargo(LOAD_BUILD))?;
    let dir = workspace_root().join("target/release/examples");
    Ok((dir.join("otlp-sink"), dir.join("otlp-load")))
}

/// Runs `otlp-load <pipeline> <sink> <protocol> <attrs> <load...>` and
/// returns its JSON line.
fn run_load(
    load: &Path,
    sink: &Sink,
    pipeline: &str,
    protocol: &str,
    attrs: usize,
    tail: [String; 2],
) -> Result<serde_json::Value> {
    let [first, second] = tail;
    let out = Command::new(load)
        .args([
            pipeline.to_string(),
            format!("http://127.0.0.1:{}", sink.port),
            protocol.to_string(),
            attrs.to_string(),
            first,
            second,
        ])
        .env_remove("OTEL_EXPORTER_OTLP_HEADERS")
        .output()
        .context("could not run otlp-load")?;
    if !out.status.success() {
        bail!("otlp-load failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).context("otlp-load printed no JSON line")
}

fn step(load: &Path, sink: &mut Sink, pipeline: &str, protocol: &str, attrs: usize, rate: u64) -> Result<Step> {
    let before = sink.received()?;
    let json = run_load(load, sink, pipeline, protocol, attrs, [rate.to_string(), SECONDS.to_string()])?;
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

/// One pipeline's climb: the last rate held and the first not held.
struct Climb {
    best: Option<Step>,
    failed: Option<Step>,
}

impl Climb {
    /// The highest rate held with nothing dropped (spans/s reached).
    fn held(&self) -> f64 {
        self.best.as_ref().map_or(0.0, |s| s.achieved)
    }
}

/// Climbs the ladder from the highest rung at or below `from` (the first
/// rung when none is), then bisects.
fn climb(load: &Path, sink: &mut Sink, scenario: &str, pipeline: &str, attrs: usize, from: f64) -> Result<Climb> {
    let protocol = scenario_protocol(scenario);
    let first = LADDER.iter().rposition(|rate| *rate as f64 <= from).unwrap_or(0);
    let mut climb = Climb { best: None, failed: None };
    let mut run = |rate: u64, climb: &mut Climb| -> Result<bool> {
        let result = step(load, sink, pipeline, protocol, attrs, rate)?;
        say(&format!(
            "xtask bench: {scenario} {pipeline} at {rate}/s: offered {} ({:.0}/s), dropped {}, not received {}, errors {}",
            result.offered, result.achieved, result.dropped, result.lost, result.errors
        ));
        let held = result.held();
        if held {
            climb.best = Some(result)
        } else {
            climb.failed = Some(result)
        }
        Ok(held)
    };
    for rate in &LADDER[first..] {
        if !run(*rate, &mut climb)? {
            break;
        }
    }
    for _ in 0..BISECTIONS {
        let (Some(low), Some(high)) = (&climb.best, &climb.failed) else { break };
        let rate = (low.rate + high.rate) / 2;
        run(rate, &mut climb)?;
    }
    Ok(climb)
}

fn scenario_protocol(scenario: &str) -> &'static str {
    SCENARIOS.iter().find(|(name, _, _)| *name == scenario).map_or("http/protobuf", |(_, protocol, _)| protocol)
}

/// `lens X vs raw Y spans/s`, with what happened at the next rate of each.
fn describe(climbs: &[&Climb; 2], machine: &Machine) -> String {
    let mut text = format!(
        "lens {} vs raw {} spans/s held with 0 dropped (medians) on {}",
        thousands(climbs[0].held() as u64),
        thousands(climbs[1].held() as u64),
        machine.model
    );
    for (pipeline, climb) in PIPELINES.iter().zip(climbs) {
        match &climb.failed {
            Some(next) => text.push_str(&format!(
                "; {pipeline} at {}/s offered: {}/s reached, {} dropped, {} not received",
                thousands(next.rate),
                thousands(next.achieved as u64),
                thousands(next.dropped),
                thousands(next.lost)
            )),
            None => text.push_str(&format!("; {pipeline} held the top of the ladder")),
        }
    }
    if let Some(sample) = climbs[0].best.as_ref().or(climbs[0].failed.as_ref()) {
        text.push_str(&format!(
            "; queue bound {} × {} B = {:.1} MiB plus attributes; lens sender peak RSS {:.0} MiB",
            thousands(QUEUE),
            sample.span_data_bytes,
            (QUEUE * sample.span_data_bytes) as f64 / (1024.0 * 1024.0),
            sample.peak_rss_kib as f64 / 1024.0
        ));
    }
    text
}

/// Instructions per span of `pipeline` under callgrind: (calling thread,
/// whole process), from runs of N and 2N spans ended unpaced.
fn instructions(load: &Path, sink: &Sink, pipeline: &str, protocol: &str, attrs: usize) -> Result<(f64, f64)> {
    let scratch = workspace_root().join("target/xtask-bench/otlp-load-callgrind");
    let endpoint = format!("http://127.0.0.1:{}", sink.port);
    let run = |spans: u64| -> Result<(u64, u64)> {
        let count = spans.to_string();
        let args = [pipeline, endpoint.as_str(), protocol, &attrs.to_string(), "count", count.as_str()];
        let main = callgrind::main_thread_total(load, &args, &scratch)?;
        Ok((main, callgrind::all_threads_total(&scratch)?))
    };
    let (main_once, all_once) = run(CALLGRIND_SPANS)?;
    let (main_twice, all_twice) = run(2 * CALLGRIND_SPANS)?;
    let per_span = |once: u64, twice: u64| (twice as f64 - once as f64) / CALLGRIND_SPANS as f64;
    Ok((per_span(main_once, main_twice), per_span(all_once, all_twice)))
}

/// Lens's instructions per span over raw's, (calling thread, whole process).
type CountRatios = (f64, f64);

/// The verdict of a throughput scenario. Lens must hold some rate at all
/// (held means no span dropped). Then every round at or above `min_ratio`
/// (the band's low end) passes; every round below it fails; a band that
/// straddles it is noise, and `counted` (the instruction ratios, lens over
/// raw, computed only then) decides: each at most `1 / min_ratio`.
fn verdict(
    (lo, hi): (f64, f64),
    lens_held: f64,
    min_ratio: f64,
    counted: impl FnOnce() -> Option<CountRatios>,
) -> Verdict {
    if lens_held <= 0.0 || hi < min_ratio {
        return Verdict::Fail;
    }
    if lo >= min_ratio {
        return Verdict::Pass;
    }
    match counted() {
        Some((main, all)) => Verdict::by_instructions(main * min_ratio <= 1.0 && all * min_ratio <= 1.0),
        None => Verdict::Fail,
    }
}

pub(crate) fn rows(budgets: &Budgets, machine: &Machine, rounds: usize) -> Result<Vec<Row>> {
    let (sink_program, load) = build()?;
    let mut rows = Vec::new();
    for (scenario, protocol, attrs) in SCENARIOS {
        let min_ratio = budgets.get(scenario, "min_ratio")?;
        let mut sink = Sink::start(&sink_program, if *protocol == "grpc" { "grpc" } else { "http" })?;
        let mut climbs: [Vec<Climb>; 2] = [Vec::new(), Vec::new()];
        let mut ratios = Vec::new();
        for round in 0..rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                let from = climbs[side].last().map_or(0.0, |c| c.held() / 2.0);
                let result = climb(&load, &mut sink, scenario, PIPELINES[side], *attrs, from)?;
                climbs[side].push(result);
            }
            let (lens, raw) = (climbs[0][round].held(), climbs[1][round].held());
            let ratio = if raw > 0.0 {
                lens / raw
            } else if lens > 0.0 {
                f64::INFINITY
            } else {
                0.0
            };
            say(&format!("xtask bench: {scenario} round {}: lens/raw = {ratio:.3}", round + 1));
            ratios.push(ratio);
        }
        let ratio = median(&ratios);
        let (lo, hi) = band(&ratios);
        // The round whose lens rate is the median stands for the absolute figures.
        let typical = |side: usize| -> &Climb {
            let mut sorted: Vec<&Climb> = climbs[side].iter().collect();
            sorted.sort_by(|a, b| a.held().total_cmp(&b.held()));
            sorted[sorted.len() / 2]
        };
        let (lens, raw) = (typical(0), typical(1));
        let mut measured = format!(
            "{ratio:.3}× the raw SDK ({} rounds, band {lo:.3}–{hi:.3}): {}",
            ratios.len(),
            describe(&[lens, raw], machine)
        );
        let mut count_error = None;
        let verdict = verdict((lo, hi), lens.held(), min_ratio, || {
            if !callgrind::available() {
                measured.push_str("; band straddles the budget and valgrind was not found");
                return None;
            }
            let counts = instructions(&load, &sink, PIPELINES[0], protocol, *attrs)
                .and_then(|l| Ok((l, instructions(&load, &sink, PIPELINES[1], protocol, *attrs)?)));
            match counts {
                Ok(((lens_main, lens_all), (raw_main, raw_all))) => {
                    let ratios = (lens_main / raw_main, lens_all / raw_all);
                    measured.push_str(&format!(
                        "; band straddles the budget: instructions per span lens/raw {:.3}× on the calling thread \
                         ({lens_main:.0} vs {raw_main:.0}), {:.3}× in the whole sender ({lens_all:.0} vs {raw_all:.0})",
                        ratios.0, ratios.1
                    ));
                    Some(ratios)
                }
                Err(error) => {
                    count_error = Some(error);
                    None
                }
            }
        });
        if let Some(error) = count_error {
            return Err(error.context(format!("counting the instructions of {scenario}")));
        }
        rows.push(Row {
            scenario: (*scenario).to_string(),
            measured,
            budget: format!("≥ {min_ratio}× the raw SDK's drop-free rate, 0 dropped"),
            verdict,
            python: if *attrs == 0 && *protocol != "grpc" { "≈ 70,000 spans/s" } else { "" },
        });
    }
    Ok(rows)
}

/// The whole-process CPU scenarios: (budget section, attributes per span).
const CPU_SCENARIOS: &[(&str, usize)] = &[("otlp_cpu_per_span", 0), ("otlp_cpu_per_span_5_attrs", 5)];
/// The protocol of the CPU scenarios (encoded, sent and decoded by the sink).
const CPU_PROTOCOL: &str = "http/protobuf";
/// Spans per native CPU run (the second run ends twice as many); below the
/// queue's bound, so that neither pipeline drops. The process's CPU comes
/// from `/proc` in clock ticks (10 ms), so a round's figure is coarse: a
/// band wider than the margin is usual, and the instructions decide.
const CPU_SPANS: u64 = 30_000;
/// The CPU sides: lens as a job records (`setup_telemetry`, `managed_span`)
/// and the raw SDK (its tracer and `BatchSpanProcessor`).
const CPU_PIPELINES: [&str; 2] = ["lens", "raw"];

/// The whole process's CPU seconds of `otlp-load <pipeline> ... count <spans>`
/// (every thread, until shutdown returned: everything encoded and sent);
/// fails when a span was dropped or an export failed.
fn count_cpu(load: &Path, sink: &mut Sink, pipeline: &str, attrs: usize, spans: u64) -> Result<f64> {
    let before = sink.received()?;
    let json = run_load(load, sink, pipeline, CPU_PROTOCOL, attrs, ["count".to_string(), spans.to_string()])?;
    let (dropped, errors) = (json["dropped"].as_u64(), json["export_errors"].as_u64());
    let received = sink.received()? - before;
    if dropped != Some(0) || errors != Some(0) || received != spans {
        bail!(
            "otlp-load {pipeline} ({attrs} attributes, {spans} spans): dropped {dropped:?}, export errors {errors:?}, \
             received {received}: a CPU figure with losses measures something else"
        );
    }
    json["cpu_s"].as_f64().context("no `cpu_s` from otlp-load")
}

/// The whole sending process's CPU per span through OTLP encoding and
/// sending to a discarding receiver (the sink decodes and counts), lens
/// against the raw SDK: per round, each side's CPU for `2N` spans minus `N`
/// spans over `N` (start-up and shutdown cancel), alternating sides. The
/// verdict is the median of the per-round ratios against `max_ratio`; when
/// the rounds spread wider than the margin, the instructions of every thread
/// under callgrind decide (lens's over raw's, same budget).
pub(crate) fn cpu_rows(budgets: &Budgets, rounds: usize) -> Result<Vec<Row>> {
    let (sink_program, load) = build()?;
    let mut rows = Vec::new();
    let mut sink = Sink::start(&sink_program, "http")?;
    for (scenario, attrs) in CPU_SCENARIOS {
        let max = budgets.get(scenario, "max_ratio")?;
        let mut per_span: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                let once = count_cpu(&load, &mut sink, CPU_PIPELINES[side], *attrs, CPU_SPANS)?;
                let twice = count_cpu(&load, &mut sink, CPU_PIPELINES[side], *attrs, 2 * CPU_SPANS)?;
                per_span[side].push((twice - once) / CPU_SPANS as f64 * 1e9);
            }
            say(&format!(
                "xtask bench: {scenario} round {}: lens {:.0} ns vs raw {:.0} ns of process CPU per span",
                round + 1,
                per_span[0][round],
                per_span[1][round]
            ));
        }
        let ratios: Vec<f64> = per_span[0].iter().zip(&per_span[1]).map(|(lens, raw)| lens / raw).collect();
        let ratio = median(&ratios);
        let (lo, hi) = band(&ratios);
        let mut measured = format!(
            "{ratio:.3}× the raw SDK's process CPU per span ({:.0} vs {:.0} ns, {CPU_PROTOCOL}, {attrs} attributes; \
             band {lo:.3}–{hi:.3})",
            median(&per_span[0]),
            median(&per_span[1])
        );
        let verdict = if !wider_than(lo, hi, (max - 1.0).abs()) {
            if ratio <= max { Verdict::Pass } else { Verdict::Fail }
        } else if callgrind::available() {
            let (lens_main, lens_all) = instructions(&load, &sink, CPU_PIPELINES[0], CPU_PROTOCOL, *attrs)?;
            let (raw_main, raw_all) = instructions(&load, &sink, CPU_PIPELINES[1], CPU_PROTOCOL, *attrs)?;
            measured.push_str(&format!(
                "; band wider than the budget: {:.3}× instructions of the whole process per span ({lens_all:.0} vs \
                 {raw_all:.0}; calling thread {lens_main:.0} vs {raw_main:.0})",
                lens_all / raw_all
            ));
            Verdict::by_instructions(lens_all / raw_all <= max)
        } else {
            measured.push_str("; band wider than the budget (valgrind not found: decided by process CPU)");
            if ratio <= max { Verdict::Pass } else { Verdict::Fail }
        };
        rows.push(Row {
            scenario: (*scenario).to_string(),
            measured,
            budget: format!("≤ {max}× the raw SDK's"),
            verdict,
            python: "",
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::{Verdict, verdict};

    #[test]
    fn lens_must_hold_at_least_the_raw_rate_with_no_drops() {
        let uncounted = || -> Option<(f64, f64)> { panic!("no count needed when wall time decides") };
        assert!(verdict((1.0, 1.1), 900_000.0, 1.0, uncounted) == Verdict::Pass);
        assert!(verdict((1.1, 1.3), 900_000.0, 1.0, uncounted) == Verdict::Pass);
        // Every round below the budget: a failure, counts or not.
        assert!(verdict((0.95, 0.98), 900_000.0, 1.0, uncounted) == Verdict::Fail);
        // No drop-free rate at all for lens: a failure whatever the ratio.
        assert!(verdict((0.0, 2.0), 0.0, 1.0, uncounted) == Verdict::Fail);
    }

    #[test]
    fn rounds_that_straddle_the_budget_are_decided_by_instructions() {
        let cheaper = || Some((0.9, 0.98));
        let dearer_export = || Some((0.9, 1.05));
        assert!(verdict((0.9, 1.05), 900_000.0, 1.0, cheaper) == Verdict::PassByInstructions);
        assert!(verdict((0.9, 1.05), 900_000.0, 1.0, dearer_export) == Verdict::FailByInstructions);
        // A median above the budget with one round below: still noise.
        assert!(verdict((0.9, 1.1), 900_000.0, 1.0, cheaper) == Verdict::PassByInstructions);
        // Valgrind missing: the straddling band cannot pass.
        assert!(verdict((0.9, 1.05), 900_000.0, 1.0, || None) == Verdict::Fail);
    }
}
