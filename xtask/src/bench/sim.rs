//! The simulator's whole-iteration time with telemetry on at a span-group
//! preset, against telemetry off, at an iteration of about 10 ms.
//!
//! The simulator (`megatron-train-sim`, one rank, built with the bench
//! profile) runs once per configuration per round, the configurations
//! alternating within a round (off, default, per_step, all, rank_metrics,
//! off, ...), and each run's `mean_iteration_time_ms` (the wall time from
//! one iteration boundary of the training loop to the next: the step plus
//! the heartbeat, report, log, metric records and goodput writes around it)
//! and `process_cpu_ms_per_iteration` (the whole process's CPU, every
//! thread, from the loop's start through telemetry's final flush, per
//! iteration) come from `--summary-json`. A preset's ratio is the median of
//! its per-round ratios to the round's off run.
//! Telemetry goes to the file exporter in a temporary directory.
//!
//! When the per-round ratios spread wider than a budget, wall time cannot
//! decide it, and the whole process's CPU decides instead
//! ([`super::report::CpuCost`]): the CPU per iteration telemetry adds (on
//! minus off, the median over rounds) over the off run's wall time per
//! iteration, against the budget's margin.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{cargo, run_cmd, say, workspace_root};

/// The presets and the budgets file's scenario for each.
pub(crate) const PRESETS: &[(&str, &str)] =
    &[("default", "sim_default"), ("per_step", "sim_per_step"), ("all", "sim_all"), (RANK_METRICS, "sim_rank_metrics")];

/// The pseudo-preset of `sim_rank_metrics`: the `default` groups with
/// `MEGATRON_OTEL_RANK_METRICS=1` (phase markers and the per-rank metrics).
/// The hang watchdog runs in it as in every preset with telemetry on (its
/// default timeout, `auto`, arms after 5 iterations; the environment is
/// cleared above, so nothing turns it off).
const RANK_METRICS: &str = "rank_metrics";

/// The whole-iteration time the scenario aims at.
const TARGET_ITERATION_MS: f64 = 10.0;
const ITERATIONS: u32 = 60;

/// What one run of the simulator reported, per iteration, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    /// `mean_step_time_ms`: `train_step` alone.
    pub(crate) step_ms: f64,
    /// `mean_iteration_time_ms`: boundary to boundary on the training loop.
    pub(crate) iteration_ms: f64,
    /// `process_cpu_ms_per_iteration`: every thread (`None` where the
    /// simulator's platform does not say).
    pub(crate) cpu_ms: Option<f64>,
}

/// What was measured for one preset: every round's (off, on) runs.
pub(crate) struct PresetResult {
    pub(crate) preset: &'static str,
    pub(crate) rounds: Vec<(Run, Run)>,
}

impl PresetResult {
    /// The per-round ratios of the whole-iteration time, on over off.
    pub(crate) fn ratios(&self) -> Vec<f64> {
        self.rounds.iter().map(|(off, on)| on.iteration_ms / off.iteration_ms).collect()
    }
}

/// Builds the simulator and returns its path.
pub(crate) fn build() -> Result<PathBuf> {
    run_cmd(cargo(&["build", "-p", "megatron-train-sim", "--profile", "bench"]))?;
    let binary = workspace_root().join("target/release/megatron-train-sim");
    if !binary.exists() {
        bail!("the simulator was built but {} is missing", binary.display());
    }
    Ok(binary)
}

fn sim_command(binary: &Path, scratch: &Path, preset: Option<&str>, iterations: u32, sleep_ms: u32) -> Command {
    sim_command_under(Command::new(binary), scratch, preset, iterations, sleep_ms)
}

/// [`sim_command`] on `cmd` (the simulator, or valgrind running it).
fn sim_command_under(
    mut cmd: Command,
    scratch: &Path,
    preset: Option<&str>,
    iterations: u32,
    sleep_ms: u32,
) -> Command {
    // The child must not inherit a collector or settings from this shell.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("OTEL_") || key.starts_with("MEGATRON_OTEL") || key.starts_with("NEMO_LENS") {
            cmd.env_remove(key);
        }
    }
    cmd.env("MEGATRON_OTEL_FILE_DIR", scratch.join("telemetry"))
        .env("MEGATRON_OTEL_RUN_ID", "xtask-bench")
        .current_dir(scratch)
        .args(["--train-iters", &iterations.to_string(), "--log-interval", "10"])
        .args(["--step-sleep-ms", &sleep_ms.to_string()]);
    if let Some(preset) = preset {
        let groups = if preset == RANK_METRICS { "default" } else { preset };
        cmd.args(["--otel-enabled", "--otel-span-groups", groups]);
        super::telemetry_env::apply(&mut cmd);
        if preset == RANK_METRICS {
            cmd.env("MEGATRON_OTEL_RANK_METRICS", "1");
        }
    }
    cmd
}

/// One run's times and CPU per iteration.
fn run_once(binary: &Path, scratch: &Path, preset: Option<&str>, sleep_ms: u32) -> Result<Run> {
    let summary = scratch.join("summary.json");
    let mut cmd = sim_command(binary, scratch, preset, ITERATIONS, sleep_ms);
    cmd.arg("--summary-json").arg(&summary);
    let out = cmd.output().context("could not run the simulator")?;
    if !out.status.success() {
        bail!("the simulator failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&summary)?)?;
    if let Some(dropped) = json["telemetry"]["spans_dropped"].as_u64()
        && dropped > 0
    {
        bail!("the simulator dropped {dropped} spans at preset {preset:?}");
    }
    let field = |name: &str| json[name].as_f64().with_context(|| format!("no `{name}` in the simulator's summary"));
    Ok(Run {
        step_ms: field("mean_step_time_ms")?,
        iteration_ms: field("mean_iteration_time_ms")?,
        cpu_ms: json["process_cpu_ms_per_iteration"].as_f64(),
    })
}

/// Iterations of the smaller callgrind run (the larger runs twice as many).
const INSTRUCTION_ITERATIONS: u32 = 10;

/// The whole process's instructions (every thread, under callgrind) over a
/// run of `iterations` iterations at `preset` (`None`: telemetry off), with
/// one compute thread (`RAYON_NUM_THREADS=1`), so that no thread pool's
/// spinning is counted, and no sleep.
fn instructions(binary: &Path, scratch: &Path, preset: Option<&str>, iterations: u32) -> Result<u64> {
    let mut valgrind = Command::new("valgrind");
    valgrind.args(["--tool=callgrind", "--callgrind-out-file=/dev/null"]).arg(binary).env("RAYON_NUM_THREADS", "1");
    let out = sim_command_under(valgrind, scratch, preset, iterations, 0).output().context("could not run valgrind")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("the simulator under callgrind failed at preset {preset:?} ({}):\n{stderr}", out.status);
    }
    super::callgrind::collected(&stderr).with_context(|| format!("no `Collected :` line from callgrind:\n{stderr}"))
}

/// The whole process's instructions per iteration at `preset` (`None`:
/// off): the difference between [`INSTRUCTION_ITERATIONS`] and twice as
/// many over the difference in iterations, so that start-up and the final
/// flush cancel.
pub(crate) fn instructions_per_iteration(binary: &Path, scratch: &Path, preset: Option<&str>) -> Result<f64> {
    let once = instructions(binary, scratch, preset, INSTRUCTION_ITERATIONS)?;
    let twice = instructions(binary, scratch, preset, 2 * INSTRUCTION_ITERATIONS)?;
    let per = (twice as f64 - once as f64) / f64::from(INSTRUCTION_ITERATIONS);
    say(&format!(
        "xtask bench: simulator {}: {per:.0} instructions per iteration (every thread)",
        preset.unwrap_or("off")
    ));
    Ok(per)
}

/// What [`measure`] found: the sleep per step and each preset's rounds.
pub(crate) struct Measured {
    pub(crate) sleep_ms: u32,
    pub(crate) presets: Vec<PresetResult>,
}

/// Calibrates the sleep for a ~10 ms iteration, then runs `rounds`
/// alternating rounds.
pub(crate) fn measure(binary: &Path, scratch: &Path, rounds: usize) -> Result<Measured> {
    let compute = run_once(binary, scratch, None, 0)?;
    let sleep_ms = (TARGET_ITERATION_MS - compute.iteration_ms).round().max(1.0) as u32;
    say(&format!(
        "xtask bench: simulator iteration without sleep {:.2} ms (step {:.2} ms); sleeping {sleep_ms} ms per step",
        compute.iteration_ms, compute.step_ms
    ));
    let mut results: Vec<PresetResult> =
        PRESETS.iter().map(|(preset, _)| PresetResult { preset, rounds: Vec::new() }).collect();
    for round in 0..rounds {
        say(&format!("xtask bench: simulator round {}/{rounds}", round + 1));
        let off = run_once(binary, scratch, None, sleep_ms)?;
        for result in &mut results {
            let on = run_once(binary, scratch, Some(result.preset), sleep_ms)?;
            result.rounds.push((off, on));
        }
    }
    Ok(Measured { sleep_ms, presets: results })
}
