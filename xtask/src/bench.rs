//! `cargo xtask bench`: runs the benches, checks the overhead budgets of
//! `xtask/budgets.toml` and prints a markdown table (scenario, measured,
//! budget, verdict, and the Python original's figure where there is one).
//!
//! How each kind of scenario is measured (docs/performance.md says more):
//!
//! - wall-time ratios: the criterion suites run several rounds, alternating
//!   suites within a round, so both sides of a pair are measured in every
//!   round (A B A B ...); the verdict takes the median of the per-round
//!   ratios, and the band is their spread;
//! - the disabled paths (gate, `managed_span`, the `otel`-off facade): also
//!   instruction counts under callgrind (`lens-fallbacks/examples/disabled-calls.rs`),
//!   which decide when the wall-time band is wider than the budget;
//! - the enabled spans: when the wall-time band is wider than the budget's
//!   margin, the ratio of the calling thread's instructions under callgrind
//!   (`lens-fallbacks/examples/span-calls.rs`, lens against the raw SDK) decides
//!   against the same budget;
//! - the single metric records: the same, with
//!   `megatron-telemetry/examples/metric-calls.rs`;
//! - the `tracing` bridge: the same, with `lens-tracing/examples/tracing-calls.rs`
//!   (the bridge against lean `tracing-opentelemetry`), and the row also
//!   states the floor every bridge pays before its own code (the SDK span
//!   plus the registry behind the per-layer filter);
//! - the simulator: alternating runs at each preset and with telemetry off,
//!   comparing the whole-iteration time; when its band is wider than the
//!   budget's margin, the whole process's CPU per iteration decides
//!   ([`sim`], [`report::CpuCost`]);
//! - the inference server: alternating runs off and at `default`; when the
//!   throughput's band is wider than the budget's margin, the server's CPU
//!   per generated token decides, and when that spreads wider too, the
//!   whole server's instructions per token under callgrind ([`serve`]);
//! - export throughput to a receiver in another process: lens's pipeline
//!   against the raw SDK's batch processor with the same exporter,
//!   alternating in rounds, as a ratio of drop-free rates ([`throughput`]);
//! - fastrace side by side (the bench-only crate `benches/fastrace-compare`):
//!   a lens span against fastrace's `LocalSpan` under a root, in one
//!   criterion run and by the calling thread's instructions
//!   (`examples/fastrace-calls.rs`), which decide when wall time is noisy;
//! - the whole sending process's CPU per span through OTLP encoding to a
//!   discarding receiver, lens (`setup_telemetry`, `managed_span`) against
//!   the raw SDK, alternating runs; instructions of every thread under
//!   callgrind decide when the rounds spread wider than the margin
//!   ([`throughput::cpu_rows`]).
//!
//! The table goes to standard output and `target/bench-report.md`, and with
//! `--update-docs` between the markers of `docs/performance.md`. The task
//! fails when a budget is broken.

mod budgets;
mod callgrind;
mod criterion;
mod report;
mod serve;
mod sim;
mod telemetry_env;
mod throughput;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use self::budgets::Budgets;
use self::criterion::{Medians, SUITES};
use self::report::{CpuCost, Row, Verdict, band, machine, median, ns, render, wider_than};
use crate::{cargo, run_cmd, say, workspace_root};

const USAGE: &str = "\
usage: cargo xtask bench [--rounds N] [--only PART,...] [--telemetry-env KEY=VALUE]... [--update-docs]

parts: disabled (gate, disabled managed_span with 0 and 5 attributes, otel-off facade), spans
(enabled managed_span), metrics, tracing (the lens-tracing bridge against tracing-opentelemetry), sim, serve, export,
fastrace (a lens span against fastrace's LocalSpan), otlp-cpu (the sending process's CPU per span, lens against the
raw SDK, through OTLP to a discarding receiver). Default: all, 3 rounds.

--telemetry-env KEY=VALUE sets a `MEGATRON_OTEL_*` or `OTEL_*` variable for the simulator's and the
server's telemetry-on runs (sim, serve), which otherwise start from a clean environment: for example
`MEGATRON_OTEL_SPOOL=0` to price the spool, or `MEGATRON_OTEL_CONTROL_FILE=PATH` to run with a control
file set. The report names what was set.";

/// Where the report goes (besides standard output).
const REPORT: &str = "target/bench-report.md";
/// The docs page and the markers the table goes between.
const DOCS_PAGE: &str = "docs/performance.md";
const START_MARKER: &str = "<!-- bench:start -->";
const END_MARKER: &str = "<!-- bench:end -->";

/// Iterations of the callgrind runs (`N`; the program also runs `2N`).
const CALLGRIND_ITERATIONS: u64 = 1_000_000;
/// Spans per callgrind run of the enabled-span scenarios (`N`; also `2N`):
/// about 3,000 instructions each, a second or two under callgrind.
const SPAN_CALLGRIND_ITERATIONS: u64 = 50_000;

struct Options {
    rounds: usize,
    parts: Vec<String>,
    telemetry_env: Vec<(String, String)>,
    update_docs: bool,
}

/// Parses one `--telemetry-env` value.
fn telemetry_env(value: &str) -> Result<(String, String)> {
    let Some((key, setting)) = value.split_once('=') else {
        bail!("--telemetry-env: `{value}` is not KEY=VALUE\n\n{USAGE}");
    };
    if !(key.starts_with("MEGATRON_OTEL_") || key.starts_with("OTEL_")) {
        bail!("--telemetry-env: `{key}` is not a MEGATRON_OTEL_* or OTEL_* variable\n\n{USAGE}");
    }
    Ok((key.to_owned(), setting.to_owned()))
}

const PARTS: &[&str] = &["disabled", "spans", "metrics", "tracing", "sim", "serve", "export", "fastrace", "otlp-cpu"];

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        rounds: 3,
        parts: PARTS.iter().map(ToString::to_string).collect(),
        telemetry_env: Vec::new(),
        update_docs: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--update-docs" => options.update_docs = true,
            "--rounds" => {
                let value = args.next().context("--rounds needs a number")?;
                options.rounds = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--rounds: `{value}` is not a positive number\n\n{USAGE}"))?;
            }
            "--only" => {
                let value = args.next().context("--only needs a list of parts")?;
                options.parts = value.split(',').map(str::to_string).collect();
                if let Some(bad) = options.parts.iter().find(|p| !PARTS.contains(&p.as_str())) {
                    bail!("--only: unknown part `{bad}` (parts: {})\n\n{USAGE}", PARTS.join(", "));
                }
            }
            "--telemetry-env" => {
                let value = args.next().context("--telemetry-env needs KEY=VALUE")?;
                options.telemetry_env.push(telemetry_env(value)?);
            }
            "-h" | "--help" => {
                say(USAGE);
                return Ok(Options { rounds: 0, parts: Vec::new(), telemetry_env: Vec::new(), update_docs: false });
            }
            other => bail!("unknown option `{other}` for bench\n\n{USAGE}"),
        }
    }
    if options.update_docs && !options.telemetry_env.is_empty() {
        bail!("--update-docs: the docs table measures the defaults; drop --telemetry-env to update it");
    }
    Ok(options)
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    if options.parts.is_empty() {
        return Ok(());
    }
    let wants = |part: &str| options.parts.iter().any(|p| p == part);
    telemetry_env::set(options.telemetry_env.clone());
    let root = workspace_root();
    let budgets = Budgets::load(&root.join("xtask/budgets.toml"))?;
    let machine = machine();
    say(&format!("xtask bench: {}", machine.describe()));

    let mut rows = Vec::new();
    let suites: Vec<&criterion::Suite> = SUITES
        .iter()
        .filter(|s| match s.name {
            "span" => wants("disabled") || wants("spans"),
            "facade-noop" | "facade-otel" => wants("disabled"),
            "tracing" => wants("tracing"),
            "fastrace" => wants("fastrace"),
            _ => wants("metrics"),
        })
        .collect();
    if !suites.is_empty() {
        criterion::build(&suites)?;
        let medians = criterion::run(&suites, options.rounds)?;
        if wants("disabled") {
            rows.extend(disabled_rows(&budgets, &medians)?);
        }
        let mut counter = Counter::default();
        if wants("spans") {
            for (scenario, lens, raw, python) in [
                ("managed_span_enabled", "managed_span_enabled", "raw_sdk_span", "14.5 µs"),
                ("managed_span_enabled_5_attrs", "managed_span_enabled_5_attrs", "raw_sdk_span_5_attrs", ""),
            ] {
                let pair = Pair { a: ("span", lens), b: ("span", raw), counted: Some((&SPAN_CALLS, lens, raw)) };
                rows.push(ratio_row(&budgets, &medians, scenario, &pair, &mut counter, python)?);
            }
        }
        if wants("metrics") {
            for (scenario, suite, lens, raw, python) in [
                ("metric_gauge", "metric_records", "lens_gauge", "raw_gauge", ""),
                ("metric_histogram", "metric_records", "lens_histogram", "raw_histogram", ""),
                ("metric_counter", "metric_records", "lens_counter", "raw_counter", ""),
                ("record_training_metrics", "training_metrics", "record_all_eight", "raw_sdk_eight", "25 µs"),
            ] {
                // `metric-calls` counts the single-record pairs.
                let counted = (suite == "metric_records").then_some((&METRIC_CALLS, lens, raw));
                let pair = Pair { a: (suite, lens), b: (suite, raw), counted };
                rows.push(ratio_row(&budgets, &medians, scenario, &pair, &mut counter, python)?);
            }
        }
        if wants("tracing") {
            let pair = Pair {
                a: ("tracing", "bridge_span"),
                b: ("tracing", "tracing_opentelemetry_lean"),
                counted: Some((&TRACING_CALLS, "bridge", "lean")),
            };
            let mut row = ratio_row(&budgets, &medians, "tracing_bridge_span", &pair, &mut counter, "")?;
            if callgrind::available() {
                row.measured.push_str(&tracing_floor(&mut counter)?);
            }
            rows.push(row);
            rows.push(tracing_disabled_row(&budgets, &medians)?);
        }
        if wants("fastrace") {
            for (scenario, lens, fastrace, lens_mode, fastrace_mode) in [
                ("lens_span_vs_fastrace", "lens_span", "fastrace_local_span", "lens", "fastrace"),
                (
                    "lens_span_vs_fastrace_5_attrs",
                    "lens_span_5_attrs",
                    "fastrace_local_span_5_props",
                    "lens_5_attrs",
                    "fastrace_5_props",
                ),
            ] {
                let pair = Pair {
                    a: ("fastrace", lens),
                    b: ("fastrace", fastrace),
                    counted: Some((&FASTRACE_CALLS, lens_mode, fastrace_mode)),
                };
                let mut row = ratio_row(&budgets, &medians, scenario, &pair, &mut counter, "")?;
                // The instruction ratio is always stated: it is the repeatable one.
                if callgrind::available() && !row.measured.contains("instructions on the calling thread") {
                    let (a, b) = (
                        counter.per_call(&FASTRACE_CALLS, lens_mode)?,
                        counter.per_call(&FASTRACE_CALLS, fastrace_mode)?,
                    );
                    let _ =
                        write!(row.measured, "; {:.3}× instructions on the calling thread ({a:.0} vs {b:.0})", a / b);
                }
                if callgrind::available() && lens_mode == "lens" {
                    row.measured.push_str(&fastrace_floor(&mut counter)?);
                }
                rows.push(row);
            }
        }
    }
    if wants("sim") {
        rows.extend(sim_rows(&budgets, options.rounds.max(3) + 2)?);
    }
    if wants("serve") {
        rows.extend(serve_rows(&budgets, options.rounds.max(3))?);
    }
    if wants("export") {
        rows.extend(throughput::rows(&budgets, &machine, options.rounds)?);
    }
    if wants("otlp-cpu") {
        rows.extend(throughput::cpu_rows(&budgets, options.rounds.max(3))?);
    }

    let mut table = render(&rows, &machine);
    if !options.telemetry_env.is_empty() {
        let set: Vec<String> = options.telemetry_env.iter().map(|(k, v)| format!("`{k}={v}`")).collect();
        let _ = write!(table, "\nThe simulator's and the server's telemetry-on runs also had {}.\n", set.join(", "));
    }
    #[expect(clippy::print_stdout, reason = "the report is this task's output")]
    {
        println!("{table}");
    }
    let report = root.join(REPORT);
    std::fs::write(&report, &table).with_context(|| format!("could not write {}", report.display()))?;
    say(&format!("xtask bench: report written to {REPORT}"));
    if options.update_docs {
        update_docs(&root.join(DOCS_PAGE), &table)?;
        say(&format!("xtask bench: table copied into {DOCS_PAGE}"));
    }
    let broken: Vec<&str> = rows.iter().filter(|r| r.verdict.is_fail()).map(|r| r.scenario.as_str()).collect();
    if !broken.is_empty() {
        bail!("budget broken: {}", broken.join(", "));
    }
    say("xtask bench: every budget holds");
    Ok(())
}

// -------------------------------------------------------------- scenarios

/// The two sides of a wall-time ratio (suite and criterion id each) and,
/// where a [`Counted`] program has them, the modes that count their
/// instructions (the program, then the mode of `a` and of `b`).
struct Pair {
    a: (&'static str, &'static str),
    b: (&'static str, &'static str),
    counted: Option<(&'static Counted, &'static str, &'static str)>,
}

/// An example that runs one call `N` times (`<program> <mode> <N>`), for
/// instruction counts under callgrind.
struct Counted {
    package: &'static str,
    example: &'static str,
    /// The functions whose instructions are counted (their whole run when
    /// empty): the program's loops, by exact name.
    loops: &'static [&'static str],
}

impl Counted {
    /// The `cargo` arguments that build it.
    fn build_args(&self) -> [&'static str; 9] {
        ["build", "-p", self.package, "--features", "testing", "--profile", "bench", "--example", self.example]
    }
}

/// `lens-fallbacks/examples/span-calls.rs`: the enabled-span scenarios.
const SPAN_CALLS: Counted = Counted { package: "lens-fallbacks", example: "span-calls", loops: &[] };

/// `megatron-telemetry/examples/metric-calls.rs`: the single-record metric
/// pairs of `benches/metric_records.rs` (the same calls, from one module).
const METRIC_CALLS: Counted = Counted { package: "megatron-telemetry", example: "metric-calls", loops: &[] };

/// `lens-tracing/examples/tracing-calls.rs`: one `tracing` span through the
/// bridge, `tracing-opentelemetry`, the registry alone, and the SDK alone.
const TRACING_CALLS: Counted = Counted { package: "lens-tracing", example: "tracing-calls", loops: &[] };

/// `benches/fastrace-compare/examples/fastrace-calls.rs`: a lens span (set up
/// as a job sets it up) and fastrace's `LocalSpan` under a root.
/// Only its span loops are counted: fastant (fastrace's clock) calibrates
/// its clock before `main` by spinning for a stretch of wall time, which
/// under callgrind moved a whole run's count by up to 5 million
/// instructions (about 100 a span).
const FASTRACE_CALLS: Counted = Counted {
    package: "fastrace-compare",
    example: "fastrace-calls",
    loops: &[
        "fastrace_compare::lens_spans",
        "fastrace_compare::lens_spans_5_attrs",
        "fastrace_compare::fastrace_spans",
        "fastrace_compare::fastrace_spans_5_props",
        "fastrace_compare::recorder_spans",
        "fastrace_compare::recorder_spans_5_attrs",
        "fastrace_compare::floor_spans",
    ],
};

/// The calling thread's instructions per call of the counted programs'
/// modes, each program built and each mode counted on first need.
#[derive(Default)]
struct Counter {
    programs: BTreeMap<&'static str, PathBuf>,
    counts: BTreeMap<(&'static str, &'static str), f64>,
}

impl Counter {
    fn per_call(&mut self, counted: &'static Counted, mode: &'static str) -> Result<f64> {
        if let Some(count) = self.counts.get(&(counted.example, mode)) {
            return Ok(*count);
        }
        let dir = workspace_root().join("target/xtask-bench");
        let program = match self.programs.get(counted.example) {
            Some(program) => program.clone(),
            None => {
                run_cmd(cargo(&counted.build_args()))?;
                std::fs::create_dir_all(&dir)?;
                let built = workspace_root().join("target/release/examples").join(counted.example);
                let program = dir.join(counted.example);
                std::fs::copy(&built, &program).with_context(|| format!("could not copy {}", built.display()))?;
                self.programs.entry(counted.example).or_insert(program).clone()
            }
        };
        let count = callgrind::per_iteration_main_thread(
            &program,
            mode,
            SPAN_CALLGRIND_ITERATIONS,
            &dir.join(format!("{}-callgrind", counted.example)),
            counted.loops,
        )?;
        say(&format!(
            "xtask bench: {} {mode}: {count:.0} instructions per call on the calling thread",
            counted.example
        ));
        Ok(*self.counts.entry((counted.example, mode)).or_insert(count))
    }
}

/// Wall-time ratio `a / b` per round; passes when the median is within
/// budget. When the band is wider than the budget's margin and the pair has
/// an instruction count, the ratio of the calling thread's instructions
/// decides against the same budget instead.
fn ratio_row(
    budgets: &Budgets,
    medians: &Medians,
    scenario: &str,
    pair: &Pair,
    counter: &mut Counter,
    python: &'static str,
) -> Result<Row> {
    let max = budgets.get(scenario, "max_ratio")?;
    let a = medians.rounds(pair.a.0, pair.a.1);
    let b = medians.rounds(pair.b.0, pair.b.1);
    let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
    let ratio = median(&ratios);
    let (lo, hi) = band(&ratios);
    let mut measured = format!("{ratio:.3}× ({} vs {}; band {lo:.3}–{hi:.3})", ns(median(a)), ns(median(b)));
    let verdict = if !wider_than(lo, hi, (max - 1.0).abs()) {
        if ratio <= max { Verdict::Pass } else { Verdict::Fail }
    } else if let Some((program, lens, raw)) = pair.counted
        && callgrind::available()
    {
        let (lens_count, raw_count) = (counter.per_call(program, lens)?, counter.per_call(program, raw)?);
        let by_count = lens_count / raw_count;
        let _ = write!(
            measured,
            "; band wider than the budget: {by_count:.3}× instructions on the calling thread \
             ({lens_count:.0} vs {raw_count:.0} per call)"
        );
        Verdict::by_instructions(by_count <= max)
    } else {
        let why = if pair.counted.is_some() { "valgrind not found" } else { "no instruction count for this pair" };
        let _ = write!(measured, "; band wider than the budget ({why}: decided by wall time)");
        if ratio <= max { Verdict::Pass } else { Verdict::Fail }
    };
    Ok(Row { scenario: scenario.to_string(), measured, budget: format!("≤ {max}×"), verdict, python })
}

/// The per-iteration instructions of the disabled-calls program, by build and mode.
struct Instructions {
    otel: [f64; 4],
    noop: [f64; 4],
}

const MODES: [&str; 4] = ["baseline", "gate", "managed_span", "managed_span_5_attrs"];

/// The two builds of `lens-fallbacks/examples/disabled-calls.rs` (with
/// `otel`, and compiled out) and their `cargo` arguments.
const DISABLED_CALLS: [(&str, &[&str]); 2] = [
    ("otel", &["build", "-p", "lens-fallbacks", "--profile", "bench", "--example", "disabled-calls"]),
    (
        "noop",
        &[
            "build",
            "-p",
            "lens-fallbacks",
            "--profile",
            "bench",
            "--example",
            "disabled-calls",
            "--no-default-features",
        ],
    ),
];

/// The `cargo` arguments of every bench and example build `cargo xtask
/// bench` makes (tidy checks that each names the features its target
/// requires, so that no part of the bench breaks unseen: the bench itself
/// does not run in CI).
pub(crate) fn target_builds() -> Vec<Vec<&'static str>> {
    let suites = criterion::SUITES.iter().map(|suite| suite.cargo_args.to_vec());
    let counted = [&SPAN_CALLS, &METRIC_CALLS, &TRACING_CALLS, &FASTRACE_CALLS]
        .into_iter()
        .map(|counted| counted.build_args().to_vec());
    let disabled = DISABLED_CALLS.iter().map(|(_, args)| args.to_vec());
    let throughput = [throughput::SINK_BUILD.to_vec(), throughput::LOAD_BUILD.to_vec()];
    suites.chain(counted).chain(disabled).chain(throughput).collect()
}

fn count_instructions() -> Result<Option<Instructions>> {
    if !callgrind::available() {
        say("xtask bench: valgrind not found; the disabled paths are decided by wall time alone");
        return Ok(None);
    }
    let dir = workspace_root().join("target/xtask-bench");
    std::fs::create_dir_all(&dir)?;
    let mut counts = Vec::new();
    for (label, args) in DISABLED_CALLS {
        run_cmd(cargo(args))?;
        let built = workspace_root().join("target/release/examples/disabled-calls");
        let program = dir.join(format!("disabled-calls-{label}"));
        std::fs::copy(&built, &program).with_context(|| format!("could not copy {}", built.display()))?;
        let mut per_mode = [0.0; 4];
        for (slot, mode) in per_mode.iter_mut().zip(MODES) {
            *slot = callgrind::per_iteration(&program, mode, CALLGRIND_ITERATIONS)?;
        }
        say(&format!("xtask bench: instructions per iteration ({label}): {per_mode:?} for {MODES:?}"));
        counts.push(per_mode);
    }
    Ok(Some(Instructions { otel: counts[0], noop: counts[1] }))
}

/// What any bridge pays before its own code, in instructions per span on
/// the calling thread: the SDK span it exports (started and ended on the
/// same provider) plus `tracing`'s registry with a no-op layer behind the
/// bridge's per-layer filter, said against lean `tracing-opentelemetry`;
/// then what each side adds on top (the bridge over that floor, lean
/// `tracing-opentelemetry` over the SDK span and the unfiltered registry).
fn tracing_floor(counter: &mut Counter) -> Result<String> {
    let sdk = counter.per_call(&TRACING_CALLS, "sdk")?;
    let filtered = counter.per_call(&TRACING_CALLS, "filtered_noop")?;
    let registry = counter.per_call(&TRACING_CALLS, "noop")?;
    let bridge = counter.per_call(&TRACING_CALLS, "bridge")?;
    let lean = counter.per_call(&TRACING_CALLS, "lean")?;
    let floor = sdk + filtered;
    let (own, theirs) = (bridge - floor, lean - sdk - registry);
    Ok(format!(
        "; instructions per span: bridge {bridge:.0}, lean {lean:.0}; the floor before any bridge code (SDK span \
         {sdk:.0} + registry behind the per-layer filter {filtered:.0}) is {floor:.0} = {:.3}× lean; the bridge's \
         own code {own:.0} against `tracing-opentelemetry`'s {theirs:.0} ({:.2}×)",
        floor / lean,
        own / theirs
    ))
}

/// What the floor's recorder (`benches/fastrace-compare/src/floor.rs`:
/// exactly the work a lens span must do with lens's defaults on, and
/// nothing else) costs the calling thread, against fastrace's `LocalSpan`
/// and lens's span: what a rewrite of lens's span path could reach.
fn fastrace_floor(counter: &mut Counter) -> Result<String> {
    let floor = counter.per_call(&FASTRACE_CALLS, "floor")?;
    let fastrace = counter.per_call(&FASTRACE_CALLS, "fastrace")?;
    let lens = counter.per_call(&FASTRACE_CALLS, "lens")?;
    Ok(format!(
        "; the floor (the work a lens span must do with the closer on, and nothing else) is {floor:.0} instructions \
         = {:.3}× fastrace; lens's span is {:.2}× the floor",
        floor / fastrace,
        lens / floor
    ))
}

/// A callsite whose group is off under the bridge against the same callsite
/// with no subscriber (wall time only: nanoseconds added).
fn tracing_disabled_row(budgets: &Budgets, medians: &Medians) -> Result<Row> {
    let scenario = "tracing_bridge_disabled_callsite";
    let max_ns = budgets.get(scenario, "max_ns_added")?;
    let measured_ns = medians.rounds("tracing", "bridge_disabled_callsite");
    let baseline = medians.rounds("tracing", "no_subscriber_callsite");
    let added: Vec<f64> = measured_ns.iter().zip(baseline).map(|(m, b)| m - b).collect();
    let (lo, hi) = band(&added);
    let added_ns = median(&added);
    Ok(Row {
        scenario: scenario.to_string(),
        measured: format!("{} per call ({added_ns:+.2} ns; band {lo:+.2}…{hi:+.2} ns)", ns(median(measured_ns))),
        budget: format!("≤ {max_ns} ns added"),
        verdict: if added_ns <= max_ns { Verdict::Pass } else { Verdict::Fail },
        python: "",
    })
}

fn disabled_rows(budgets: &Budgets, medians: &Medians) -> Result<Vec<Row>> {
    let instructions = count_instructions()?;
    let mut rows = Vec::new();
    // Each scenario against the empty-closure baseline of its own suite (the
    // 5-attribute macro form is measured through the facade with `otel`).
    for (scenario, suite, id, mode, python) in [
        ("gate_disabled", "span", "gate_disabled", 1, "19 ns"),
        ("managed_span_disabled", "span", "managed_span_disabled", 2, "1.1 µs"),
        ("managed_span_disabled_5_attrs", "facade-otel", "managed_span_disabled_5_attrs", 3, ""),
    ] {
        let baseline = medians.rounds(suite, "baseline_empty_closure");
        let max_ns = budgets.get(scenario, "max_ns_added")?;
        let max_instr = budgets.get(scenario, "max_instructions_added")?;
        let measured_ns = medians.rounds(suite, id);
        let added: Vec<f64> = measured_ns.iter().zip(baseline).map(|(m, b)| m - b).collect();
        let (lo, hi) = band(&added);
        let added_ns = median(&added);
        let too_noisy = wider_than(lo, hi, max_ns);
        let added_instr = instructions.as_ref().map(|i| i.otel[mode] - i.otel[0]);
        let mut measured =
            format!("{} per call ({added_ns:+.2} ns; band {lo:+.2}…{hi:+.2} ns)", ns(median(measured_ns)));
        if let Some(instr) = added_instr {
            let _ = write!(measured, ", +{instr:.1} instructions");
        }
        let instr_ok = added_instr.is_none_or(|i| i <= max_instr);
        let verdict = match (too_noisy, added_instr) {
            (true, Some(_)) => Verdict::by_instructions(instr_ok),
            _ if instr_ok && added_ns <= max_ns => Verdict::Pass,
            _ => Verdict::Fail,
        };
        rows.push(Row {
            scenario: scenario.to_string(),
            measured,
            budget: format!("≤ {max_ns} ns and ≤ {max_instr} instructions added"),
            verdict,
            python,
        });
    }

    let max = budgets.get("facade_otel_off", "max_ratio")?;
    let a = medians.rounds("facade-noop", "managed_span_disabled");
    let b = medians.rounds("facade-noop", "baseline_empty_closure");
    let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
    let ratio = median(&ratios);
    let (lo, hi) = band(&ratios);
    let instr_ratio = instructions.as_ref().map(|i| i.noop[2] / i.noop[0]);
    let mut measured = format!("{ratio:.3}× wall ({} vs {}; band {lo:.3}–{hi:.3})", ns(median(a)), ns(median(b)));
    if let (Some(r), Some(i)) = (instr_ratio, &instructions) {
        let _ = write!(measured, ", {r:.3}× instructions ({:.1} vs {:.1})", i.noop[2], i.noop[0]);
    }
    let too_noisy = wider_than(lo, hi, max - 1.0);
    let verdict = match instr_ratio {
        Some(r) if too_noisy => Verdict::by_instructions(r <= max),
        _ if ratio <= max && instr_ratio.is_none_or(|r| r <= max) => Verdict::Pass,
        _ => Verdict::Fail,
    };
    rows.push(Row {
        scenario: "facade_otel_off".to_string(),
        measured,
        budget: format!("≤ {max}×"),
        verdict,
        python: "",
    });
    Ok(rows)
}

/// The simulator's rows: the whole-iteration time with telemetry on over
/// off; when its band is wider than the budget's margin, the whole
/// process's CPU per iteration decides ([`report::ratio_or_cpu`]), and when
/// that CPU's rounds spread wider than the margin too, the whole process's
/// instructions per iteration under callgrind
/// ([`sim::instructions_per_iteration`]).
fn sim_rows(budgets: &Budgets, rounds: usize) -> Result<Vec<Row>> {
    let binary = sim::build()?;
    let scratch = workspace_root().join("target/xtask-bench/sim");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let measured_sim = sim::measure(&binary, &scratch, rounds)?;
    let sleep_ms = measured_sim.sleep_ms;
    let mut rows = Vec::new();
    // The off side's instructions per iteration, counted on first need.
    let mut off_instructions: Option<f64> = None;
    for (result, (_, scenario)) in measured_sim.presets.iter().zip(sim::PRESETS) {
        let max = budgets.get(scenario, "max_ratio")?;
        let ratios = result.ratios();
        let ratio = median(&ratios);
        let (lo, hi) = band(&ratios);
        let side = |f: fn(&sim::Run) -> f64, on: bool| -> f64 {
            median(&result.rounds.iter().map(|(off, run_on)| f(if on { run_on } else { off })).collect::<Vec<_>>())
        };
        let (on, off) = (side(|r| r.iteration_ms, true), side(|r| r.iteration_ms, false));
        let mut measured = format!(
            "{ratio:.3}× whole iteration ({on:.2} vs {off:.2} ms; step {:.2} vs {:.2} ms, {sleep_ms} ms of it sleep; \
             band {lo:.3}–{hi:.3})",
            side(|r| r.step_ms, true),
            side(|r| r.step_ms, false),
        );
        let cpu = CpuCost::from_rounds(result.rounds.iter().map(|(off, on)| (off.cpu_ms, on.cpu_ms, off.iteration_ms)));
        let missing = "no process CPU in the summary";
        let noisy_cpu = cpu.filter(|c| c.rounds_wider_than(max - 1.0));
        let mut verdict = decide_with_cpu(&mut measured, (ratio, lo, hi, max), cpu, "iteration", missing);
        if let Some(cpu) = noisy_cpu.filter(|_| wider_than(lo, hi, max - 1.0) && callgrind::available()) {
            // The CPU rounds spread wider than the budget too: the
            // instructions telemetry adds decide, as time at the off run's
            // CPU per instruction, over the off run's wall time per
            // iteration (the CPU rule's terms, without its noise).
            let off_i = match off_instructions {
                Some(off) => off,
                None => *off_instructions.insert(sim::instructions_per_iteration(&binary, &scratch, None)?),
            };
            let on_i = sim::instructions_per_iteration(&binary, &scratch, Some(result.preset))?;
            let ns_per_instruction = cpu.off_ms * 1e6 / off_i;
            let added_ms = (on_i - off_i) * ns_per_instruction / 1e6;
            let by_instructions = 1.0 + added_ms / cpu.off_wall_ms;
            let _ = write!(
                measured,
                "; its rounds wider than the budget too: the whole process's instructions per iteration, under \
                 callgrind with one compute thread, {on_i:.0} vs {off_i:.0} ({:+.2}%), at the off run's \
                 {ns_per_instruction:.3} ns CPU per instruction {added_ms:+.3} ms over {:.3} ms wall = \
                 {by_instructions:.4}×",
                (on_i / off_i - 1.0) * 100.0,
                cpu.off_wall_ms
            );
            verdict = Verdict::by_instructions(by_instructions <= max);
        }
        rows.push(Row {
            scenario: (*scenario).to_string(),
            measured,
            budget: format!("≤ {max}×"),
            verdict,
            python: "",
        });
    }
    Ok(rows)
}

/// The inference server's rows: tokens per second (off over on) and p99
/// latency (on over off), each the median of the per-round ratios. When the
/// throughput ratios spread wider than the budget's margin, the server's
/// CPU per generated token decides (every thread, load start to exit, on
/// minus off, over the off run's wall time per token); when that CPU's
/// rounds spread wider than the margin too, the whole server's
/// instructions per token under callgrind decide
/// ([`serve::instructions_per_token`]). A tail latency has no instruction
/// count: when the p99 ratios spread wider than that budget's margin, as
/// many rounds again are measured and every round's ratio counts (the
/// median of twice the rounds moves less from run to run), whichever side
/// of the budget the first rounds fell on.
fn serve_rows(budgets: &Budgets, rounds: usize) -> Result<Vec<Row>> {
    let binary = sim::build()?;
    let scratch = workspace_root().join("target/xtask-bench/serve");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let mut measured = serve::measure(&binary, &scratch, rounds)?;
    let p99_ratios = |measured: &serve::Measured| -> Vec<f64> {
        measured.rounds.iter().map(|(off, on)| on.p99_ms / off.p99_ms).collect()
    };
    let (first_lo, first_hi) = band(&p99_ratios(&measured));
    let p99_margin = budgets.get("serve_p99", "max_ratio")? - 1.0;
    let extended = wider_than(first_lo, first_hi, p99_margin);
    if extended {
        say(&format!(
            "xtask bench: serve_p99's {rounds} round(s) spread {first_lo:.3}–{first_hi:.3}, wider than its budget's \
             margin: {rounds} more"
        ));
        measured.rounds.extend(serve::measure(&binary, &scratch, rounds)?.rounds);
    }
    let mut rows = Vec::new();
    for scenario in ["serve_tokens_per_sec", "serve_p99"] {
        let max = budgets.get(scenario, "max_ratio")?;
        let (ratios, on, off): (Vec<f64>, Vec<f64>, Vec<f64>) = if scenario == "serve_p99" {
            (
                p99_ratios(&measured),
                measured.rounds.iter().map(|(_, on)| on.p99_ms).collect(),
                measured.rounds.iter().map(|(off, _)| off.p99_ms).collect(),
            )
        } else {
            let r = measured.rounds.iter().map(|(off, on)| off.tokens_per_sec / on.tokens_per_sec).collect();
            let on = measured.rounds.iter().map(|(_, on)| on.tokens_per_sec).collect();
            (r, on, measured.rounds.iter().map(|(off, _)| off.tokens_per_sec).collect())
        };
        let ratio = median(&ratios);
        let (lo, hi) = band(&ratios);
        let unit = if scenario == "serve_p99" { "ms p99" } else { "tokens/s" };
        let mut text = format!(
            "{ratio:.3}× ({:.1} vs {:.1} {unit} with `default` vs off; band {lo:.3}–{hi:.3})",
            median(&on),
            median(&off)
        );
        if extended {
            let _ = write!(
                text,
                "; {} rounds: the first {rounds} spread wider than the p99 budget's margin \
                 ({first_lo:.3}–{first_hi:.3}), so as many again were measured",
                measured.rounds.len()
            );
        }
        let verdict = if scenario == "serve_tokens_per_sec" {
            // The off run's wall time per token is the inverse of its throughput.
            let cpu = CpuCost::from_rounds(
                measured
                    .rounds
                    .iter()
                    .map(|(off, on)| (off.cpu_ms_per_token, on.cpu_ms_per_token, 1e3 / off.tokens_per_sec)),
            );
            let cpu_noisy = cpu.as_ref().is_some_and(|c| c.rounds_wider_than(max - 1.0));
            let verdict = decide_with_cpu(&mut text, (ratio, lo, hi, max), cpu, "token", "no server CPU from /proc");
            if wider_than(lo, hi, max - 1.0) && cpu_noisy && callgrind::available() {
                // The CPU rounds spread wider than the budget too: the
                // server's instructions per token decide.
                let (off_i, on_i) = serve::instructions_per_token(&binary, &scratch)?;
                let _ = write!(
                    text,
                    "; its rounds wider than the budget too: whole server {:.3}× instructions per token \
                     ({on_i:.0} vs {off_i:.0}, every thread, under callgrind)",
                    on_i / off_i
                );
                Verdict::by_instructions(on_i / off_i <= max)
            } else {
                verdict
            }
        } else if ratio <= max {
            Verdict::Pass
        } else {
            Verdict::Fail
        };
        rows.push(Row {
            scenario: scenario.to_string(),
            measured: text,
            budget: format!("≤ {max}×"),
            verdict,
            python: "",
        });
    }
    Ok(rows)
}

/// [`report::ratio_or_cpu`] for a row: the median `ratio`, its band
/// `lo..=hi` and the budget `max`; when the band is wider than the margin,
/// `measured` gains the CPU breakdown per `unit`, or says why there is none
/// (`missing`) and that wall time decided.
fn decide_with_cpu(
    measured: &mut String,
    (ratio, lo, hi, max): (f64, f64, f64, f64),
    cpu: Option<CpuCost>,
    unit: &str,
    missing: &str,
) -> Verdict {
    if wider_than(lo, hi, max - 1.0) {
        let _ = match &cpu {
            Some(cpu) => write!(measured, "; band wider than the budget: {}", cpu.describe(unit)),
            None => write!(measured, "; band wider than the budget ({missing}: decided by wall time)"),
        };
    }
    report::ratio_or_cpu(ratio, (lo, hi), max, cpu.as_ref())
}

fn update_docs(page: &Path, table: &str) -> Result<()> {
    let text = std::fs::read_to_string(page).with_context(|| format!("could not read {}", page.display()))?;
    let (Some(start), Some(end)) = (text.find(START_MARKER), text.find(END_MARKER)) else {
        bail!("{} lacks the markers {START_MARKER} and {END_MARKER}", page.display());
    };
    if end < start {
        bail!("{}: {END_MARKER} comes before {START_MARKER}", page.display());
    }
    let updated = format!("{}{START_MARKER}\n{table}{}", &text[..start], &text[end..]);
    std::fs::write(page, updated).with_context(|| format!("could not write {}", page.display()))
}
