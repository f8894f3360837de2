//! The simulator's step time with telemetry on at a span-group preset,
//! against telemetry off, at a step of about 10 ms.
//!
//! The simulator (`megatron-train-sim`, one rank, built with the bench
//! profile) runs once per configuration per round, the configurations
//! alternating within a round (off, default, per_step, all, off, ...), and
//! each run's `mean_step_time_ms` comes from `--summary-json`. A preset's
//! ratio is the median of its per-round ratios to the round's off run.
//! Telemetry goes to the file exporter in a temporary directory.
//!
//! When the per-round ratios spread wider than a budget, wall time cannot
//! decide it, and the training thread's instructions decide instead: the
//! simulator runs under callgrind with `--separate-threads=yes` for `N` and
//! `2N` iterations, the main thread's (the training loop's) count per
//! iteration with telemetry on minus the same with it off is what telemetry
//! adds per step. It is converted to time at the training thread's own
//! measured speed (the step's compute time without sleep, over the off run's
//! instructions per step) and divided by the measured off step time.

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

/// The step time the scenario aims at.
const TARGET_STEP_MS: f64 = 10.0;
const ITERATIONS: u32 = 60;

/// What was measured for one preset.
pub(crate) struct PresetResult {
    pub(crate) preset: &'static str,
    pub(crate) ratios: Vec<f64>,
    pub(crate) on_ms: Vec<f64>,
    pub(crate) off_ms: Vec<f64>,
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
    let mut cmd = Command::new(binary);
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
        if preset == RANK_METRICS {
            cmd.env("MEGATRON_OTEL_RANK_METRICS", "1");
        }
    }
    cmd
}

/// One run's mean step time in milliseconds.
fn mean_step_ms(binary: &Path, scratch: &Path, preset: Option<&str>, sleep_ms: u32) -> Result<f64> {
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
    json["mean_step_time_ms"].as_f64().context("no mean_step_time_ms in the simulator's summary")
}

/// Calibrates the sleep for a ~10 ms step, then runs `rounds` alternating rounds.
/// What [`measure`] found: the sleep per step, the step's compute time
/// without sleep (ms) and each preset's rounds.
pub(crate) struct Measured {
    pub(crate) sleep_ms: u32,
    pub(crate) compute_ms: f64,
    pub(crate) presets: Vec<PresetResult>,
}

pub(crate) fn measure(binary: &Path, scratch: &Path, rounds: usize) -> Result<Measured> {
    let compute_ms = mean_step_ms(binary, scratch, None, 0)?;
    let sleep_ms = (TARGET_STEP_MS - compute_ms).round().max(1.0) as u32;
    say(&format!("xtask bench: simulator step without sleep {compute_ms:.2} ms; sleeping {sleep_ms} ms per step"));
    let mut results: Vec<PresetResult> = PRESETS
        .iter()
        .map(|(preset, _)| PresetResult { preset, ratios: Vec::new(), on_ms: Vec::new(), off_ms: Vec::new() })
        .collect();
    for round in 0..rounds {
        say(&format!("xtask bench: simulator round {}/{rounds}", round + 1));
        let off = mean_step_ms(binary, scratch, None, sleep_ms)?;
        for result in &mut results {
            let on = mean_step_ms(binary, scratch, Some(result.preset), sleep_ms)?;
            result.ratios.push(on / off);
            result.on_ms.push(on);
            result.off_ms.push(off);
        }
    }
    Ok(Measured { sleep_ms, compute_ms, presets: results })
}

/// Instructions of the main (training) thread over a whole run.
fn main_thread_instructions(binary: &Path, scratch: &Path, preset: Option<&str>, iterations: u32) -> Result<u64> {
    let out_dir = scratch.join("callgrind");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir)?;
    let inner = sim_command(binary, scratch, preset, iterations, 0);
    let mut cmd = Command::new("valgrind");
    cmd.args(["--tool=callgrind", "--separate-threads=yes"])
        .arg(format!("--callgrind-out-file={}", out_dir.join("cg.out").display()))
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(scratch);
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let out = cmd.output().context("could not run the simulator under valgrind")?;
    if !out.status.success() {
        bail!("the simulator failed under callgrind ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let main_file = out_dir.join("cg.out-01");
    let text = std::fs::read_to_string(&main_file).with_context(|| format!("no {}", main_file.display()))?;
    text.lines()
        .find_map(|line| line.strip_prefix("totals:").or_else(|| line.strip_prefix("summary:")))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no totals line in {}", main_file.display()))
}

/// Instructions of the training thread per step at `preset` (`None`: telemetry off).
pub(crate) fn instructions_per_step(binary: &Path, scratch: &Path, preset: Option<&str>) -> Result<f64> {
    const N: u32 = 10;
    let once = main_thread_instructions(binary, scratch, preset, N)?;
    let twice = main_thread_instructions(binary, scratch, preset, 2 * N)?;
    Ok((twice as f64 - once as f64) / f64::from(N))
}
