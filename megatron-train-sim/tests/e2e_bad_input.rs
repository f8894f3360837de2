//! Bad configuration, run as a user runs it: every malformed
//! boolean, number, rate, strategy or group name, exporter, protocol,
//! endpoint, header list, interval, rank variable and simulator flag of the
//! table below makes the binary exit with status 2 and one clear message
//! naming the variable (or flag) and the bad value, exports nothing (no
//! telemetry directory, no connection to the collector), and panics
//! nowhere, on every rank.
//!
//! Each case runs through the launcher (`--nproc-per-node 2`) and as each
//! of two ranks started by an outside launcher (torchrun-style `RANK` /
//! `WORLD_SIZE`, a rendezvous address nobody answers), because every rank
//! validates the whole configuration before anything is installed, whether
//! or not it exports. Rank-variable cases run as one rank. Cases run in
//! parallel, a few at a time, each with a time limit.
#![cfg(feature = "otel")]

mod e2e_faults_support;
mod e2e_support;

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2e_faults_support::{Hanging, panicked, refused_port};
use e2e_support::{BIN, Ctx, Proc, SMALL, clean_command};

/// How a case is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Through the launcher, and as rank 0 and rank 1 of two.
    Everywhere,
    /// As one rank (the case sets the rank variables).
    OneRank,
    /// Through the launcher only (the case is about the launcher's flags).
    Launcher,
}

/// One bad input.
struct Case {
    /// Environment variables set on top of the base run.
    env: &'static [(&'static str, &'static str)],
    /// Flags added to the base run.
    args: &'static [&'static str],
    /// Strings the error must contain (case-insensitive): the variable or
    /// flag, and the bad value.
    expect: &'static [&'static str],
    /// A string that must not appear (a secret-bearing value).
    hidden: Option<&'static str>,
    /// How to run it.
    mode: Mode,
}

const fn env(env: &'static [(&'static str, &'static str)], expect: &'static [&'static str]) -> Case {
    Case { env, args: &[], expect, hidden: None, mode: Mode::Everywhere }
}

const fn flag(args: &'static [&'static str], expect: &'static [&'static str]) -> Case {
    Case { env: &[], args, expect, hidden: None, mode: Mode::Everywhere }
}

const fn rank(env: &'static [(&'static str, &'static str)], expect: &'static [&'static str]) -> Case {
    Case { env, args: &[], expect, hidden: None, mode: Mode::OneRank }
}

const CASES: &[Case] = &[
    // Booleans.
    env(&[("MEGATRON_OTEL_ENABLED", "maybe")], &["MEGATRON_OTEL_ENABLED", "'maybe'"]),
    env(&[("NEMO_LENS_ENABLED", "2")], &["NEMO_LENS_ENABLED", "'2'"]),
    env(&[("MEGATRON_OTEL_TRACES_ENABLED", "yes please")], &["MEGATRON_OTEL_TRACES_ENABLED", "'yes please'"]),
    env(&[("MEGATRON_OTEL_METRICS_ENABLED", "tru")], &["MEGATRON_OTEL_METRICS_ENABLED", "'tru'"]),
    env(&[("MEGATRON_OTEL_LOGS_ENABLED", "-1")], &["MEGATRON_OTEL_LOGS_ENABLED", "'-1'"]),
    env(&[("OTEL_SDK_DISABLED", "perhaps")], &["OTEL_SDK_DISABLED", "'perhaps'"]),
    env(&[("NEMO_LENS_SAMPLER_ENABLED", "maybe")], &["NEMO_LENS_SAMPLER_ENABLED", "'maybe'"]),
    // Numbers and durations.
    env(&[("MEGATRON_OTEL_EXPORT_RANK", "last")], &["MEGATRON_OTEL_EXPORT_RANK", "'last'"]),
    env(&[("MEGATRON_OTEL_EXPORT_RANK", "1.5")], &["MEGATRON_OTEL_EXPORT_RANK", "'1.5'"]),
    // A rank the two-rank job does not have: no rank would export.
    env(&[("MEGATRON_OTEL_EXPORT_RANK", "7")], &["MEGATRON_OTEL_EXPORT_RANK=7", "world size 2", "0 to 1"]),
    env(&[("OTEL_BSP_MAX_QUEUE_SIZE", "abc")], &["OTEL_BSP_MAX_QUEUE_SIZE", "'abc'"]),
    env(&[("OTEL_BSP_MAX_QUEUE_SIZE", "0")], &["OTEL_BSP_MAX_QUEUE_SIZE", "'0'"]),
    env(&[("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-3")], &["OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "'-3'"]),
    env(&[("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100000")], &["OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "'100000'"]),
    env(&[("OTEL_BSP_SCHEDULE_DELAY", "soon")], &["OTEL_BSP_SCHEDULE_DELAY", "'soon'"]),
    env(&[("OTEL_BSP_MAX_CONCURRENT_EXPORTS", "0")], &["OTEL_BSP_MAX_CONCURRENT_EXPORTS", "'0'"]),
    env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "0")], &["OTEL_EXPORTER_OTLP_TIMEOUT", "'0'"]),
    env(&[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "10s")], &["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "'10s'"]),
    env(&[("MEGATRON_OTEL_EXPORT_RETRY_WINDOW_MS", "-5")], &["MEGATRON_OTEL_EXPORT_RETRY_WINDOW_MS", "'-5'"]),
    env(&[("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", "forever")], &["MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", "'forever'"]),
    env(&[("MEGATRON_OTEL_PROMETHEUS_LINGER_MS", "x")], &["MEGATRON_OTEL_PROMETHEUS_LINGER_MS", "'x'"]),
    env(&[("OTEL_EXPORTER_PROMETHEUS_PORT", "70000")], &["OTEL_EXPORTER_PROMETHEUS_PORT", "'70000'"]),
    // Rates.
    env(&[("MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "1.5")], &["MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "1.5"]),
    env(&[("MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "half")], &["MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "half"]),
    env(&[("MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "NaN")], &["MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "nan"]),
    env(
        &[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "2")],
        &["OTEL_TRACES_SAMPLER_ARG", "2"],
    ),
    // Strategy and sampler names.
    env(
        &[("MEGATRON_OTEL_RANK_STRATEGY", "singel_rank")],
        &["MEGATRON_OTEL_RANK_STRATEGY", "'singel_rank'", "single_rank"],
    ),
    env(&[("NEMO_LENS_EXPORT_STRATEGY", "everyone")], &["NEMO_LENS_EXPORT_STRATEGY", "'everyone'"]),
    env(&[("MEGATRON_OTEL_SAMPLING_STRATEGY", "rank_awre")], &["MEGATRON_OTEL_SAMPLING_STRATEGY", "'rank_awre'"]),
    env(
        &[("MEGATRON_OTEL_RANK_STRATEGY", "all_ranks"), ("MEGATRON_OTEL_EXPORT_STRATEGY", "single_rank")],
        &["MEGATRON_OTEL_RANK_STRATEGY", "MEGATRON_OTEL_EXPORT_STRATEGY", "'single_rank'", "disagree"],
    ),
    env(&[("OTEL_TRACES_SAMPLER", "jaeger_remote")], &["OTEL_TRACES_SAMPLER", "'jaeger_remote'"]),
    // Span groups.
    env(
        &[("MEGATRON_OTEL_SPAN_GROUPS", "default, chekpoint")],
        &["MEGATRON_OTEL_SPAN_GROUPS", "'chekpoint'", "checkpoint"],
    ),
    env(&[("NEMO_LENS_SPAN_GROUPS", "all;step")], &["NEMO_LENS_SPAN_GROUPS", "'all;step'"]),
    flag(&["--otel-span-groups", "per_stepp"], &["--otel-span-groups", "'per_stepp'", "per_step"]),
    // Exporters.
    env(&[("MEGATRON_OTEL_EXPORTER", "consol")], &["MEGATRON_OTEL_EXPORTER", "'consol'", "console"]),
    env(&[("OTEL_TRACES_EXPORTER", "zipkin")], &["OTEL_TRACES_EXPORTER", "'zipkin'"]),
    env(&[("OTEL_METRICS_EXPORTER", "statsd")], &["OTEL_METRICS_EXPORTER", "'statsd'"]),
    env(&[("OTEL_LOGS_EXPORTER", "prometheus")], &["OTEL_LOGS_EXPORTER", "'prometheus'"]),
    // Protocols and compression.
    env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http")], &["OTEL_EXPORTER_OTLP_PROTOCOL", "'http'"]),
    env(
        &[("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc/json")],
        &["OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "'grpc/json'"],
    ),
    env(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")], &["OTEL_EXPORTER_OTLP_COMPRESSION", "'zstd'"]),
    env(&[("OTEL_PROPAGATORS", "b3")], &["OTEL_PROPAGATORS", "'b3'"]),
    // Endpoints.
    env(
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector:4317")],
        &["OTEL_EXPORTER_OTLP_ENDPOINT", "'ftp://collector:4317'"],
    ),
    env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317")], &["OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317"]),
    env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://:4317")], &["OTEL_EXPORTER_OTLP_ENDPOINT", "'http://:4317'"]),
    Case {
        env: &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://user:pa55word@collector:4318")],
        args: &[],
        expect: &["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "credentials"],
        hidden: Some("pa55word"),
        mode: Mode::Everywhere,
    },
    // Header lists: the variable is named, a value never shown.
    Case {
        env: &[("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%ZZs3cr3t")],
        args: &[],
        expect: &["OTEL_EXPORTER_OTLP_HEADERS", "'Authorization'"],
        hidden: Some("s3cr3t"),
        mode: Mode::Everywhere,
    },
    Case {
        env: &[("OTEL_EXPORTER_OTLP_HEADERS", "s3cr3t-without-a-key")],
        args: &[],
        expect: &["OTEL_EXPORTER_OTLP_HEADERS", "entry #1"],
        hidden: Some("s3cr3t"),
        mode: Mode::Everywhere,
    },
    env(&[("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "=value")], &["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "empty key"]),
    // Intervals.
    env(&[("OTEL_METRIC_EXPORT_INTERVAL", "0")], &["OTEL_METRIC_EXPORT_INTERVAL", "'0'"]),
    env(&[("OTEL_METRIC_EXPORT_INTERVAL", "fast")], &["OTEL_METRIC_EXPORT_INTERVAL", "'fast'"]),
    // Rank variables, as an outside launcher would set them.
    rank(&[("RANK", "x"), ("WORLD_SIZE", "2")], &["RANK", "\"x\""]),
    rank(&[("RANK", "0"), ("WORLD_SIZE", "abc")], &["WORLD_SIZE", "\"abc\""]),
    rank(&[("RANK", "3"), ("WORLD_SIZE", "2")], &["RANK=3", "WORLD_SIZE=2"]),
    rank(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "-1")], &["LOCAL_RANK", "\"-1\""]),
    rank(&[("RANK", "0"), ("WORLD_SIZE", "3")], &["world size (3, from WORLD_SIZE)", "--pipeline-model-parallel-size"]),
    rank(&[("SLURM_PROCID", "z"), ("SLURM_NTASKS", "2")], &["SLURM_PROCID", "\"z\""]),
    // Simulator flags.
    Case {
        env: &[],
        args: &["--nproc-per-node", "0"],
        expect: &["--nproc-per-node", "0"],
        hidden: None,
        mode: Mode::Launcher,
    },
    flag(&["--micro-batch-size", "abc"], &["--micro-batch-size", "'abc'"]),
    flag(&["--global-batch-size", "7"], &["--global-batch-size", "(7)"]),
    flag(&["--device", "tpu"], &["--device", "'tpu'"]),
    flag(&["--lr-decay-style", "exp"], &["--lr-decay-style", "'exp'"]),
    flag(&["--hybrid-override-pattern", "*X**"], &["--hybrid-override-pattern", "\"*X**\""]),
    flag(&["--bf16", "--fp16"], &["--bf16", "--fp16"]),
    flag(&["--num-layers", "3"], &["--num-layers", "(3)", "--pipeline-model-parallel-size"]),
    flag(&["--log-interval", "0"], &["--log-interval", "0"]),
    // Found by the sweep of every variable and flag (docs/configuration.md).
    env(&[("MEGATRON_OTEL_EXPORT_RANK", "-2")], &["MEGATRON_OTEL_EXPORT_RANK", "'-2'", "-1 for the last rank"]),
    env(&[("MEGATRON_OTEL_RUN_ID", "../escape")], &["MEGATRON_OTEL_RUN_ID", "'../escape'", "telemetry/<run_id>"]),
    env(&[("OTEL_PROPAGATORS", ",")], &["OTEL_PROPAGATORS", "','", "'none'"]),
    env(&[("MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", "5s")], &["MEGATRON_OTEL_SHUTDOWN_TIMEOUT_MS", "'5s'", "milliseconds"]),
    flag(&["--num-layers", "4000000000"], &["--num-layers (4000000000)", "at most 64 GiB"]),
    flag(&["--inject-crash-at", "9"], &["--inject-crash-at 9", "no iteration 9"]),
    flag(&["--summary-json", "/nonexistent-lens-dir/summary.json"], &["--summary-json", "/nonexistent-lens-dir"]),
    // Files the configuration names, checked on every rank, the ones that
    // do not export included, and by the launcher before it starts any.
    env(
        &[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent-lens-dir/ca.pem")],
        &["OTEL_EXPORTER_OTLP_CERTIFICATE", "'/nonexistent-lens-dir/ca.pem'", "readable PEM file"],
    ),
    env(
        &[("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/dev/null")],
        &["OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "'/dev/null'", "it is a character device, not a regular file"],
    ),
    env(
        &[("MEGATRON_OTEL_EXPORTER", "file"), ("MEGATRON_OTEL_FILE_DIR", "/dev/null")],
        &["MEGATRON_OTEL_FILE_DIR", "'/dev/null'", "not a file"],
    ),
];

/// The flags of every run: two pipeline stages (so a layout mismatch shows),
/// telemetry on, a short run.
const BASE: &[&str] =
    &["--otel-enabled", "--pipeline-model-parallel-size", "2", "--train-iters", "2", "--comm-timeout", "2"];
/// How long one process may take (they all fail at once).
const PROCESS_LIMIT: Duration = Duration::from_secs(30);
/// Processes at a time.
const PARALLEL: usize = 4;

/// One process to run: a case in one mode.
struct Job {
    case: usize,
    /// `None`: through the launcher; `Some(r)`: as rank `r` of two.
    rank: Option<u32>,
}

/// Runs `job`; a description of what went wrong, if anything.
fn run_job(ctx: &Ctx, job: &Job, endpoint: &str, master_port: u16) -> Result<(), String> {
    let case = &CASES[job.case];
    let label = format!("case{}-{}", job.case, job.rank.map_or("launcher".to_string(), |r| format!("rank{r}")));
    let dir = ctx.path(&label);
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = clean_command(BIN);
    command.current_dir(&dir).args(SMALL).args(BASE).args(case.args);
    if case.mode == Mode::Everywhere && job.rank.is_none() {
        command.args(["--nproc-per-node", "2"]);
    }
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    command.env("MASTER_ADDR", "127.0.0.1").env("MASTER_PORT", master_port.to_string());
    if let Some(rank) = job.rank {
        command.env("RANK", rank.to_string()).env("WORLD_SIZE", "2").env("LOCAL_RANK", rank.to_string());
    }
    // The case's variables last: they win over the base ones.
    command.envs(case.env.iter().copied());
    let finished = Proc::spawn(ctx, &label, command).wait(PROCESS_LIMIT);
    let stderr = &finished.stderr;
    let what = format!("{label} {:?} {:?}", case.env, case.args);
    let mut problems = Vec::new();
    if finished.status.code() != Some(2) {
        problems.push(format!("exit status {} (expected 2)", finished.status));
    }
    if panicked(stderr) {
        problems.push("a panic".to_string());
    }
    let errors = stderr.lines().filter(|l| l.to_lowercase().contains("error")).count();
    if errors != 1 {
        problems.push(format!("{errors} error lines (expected one message)"));
    }
    let lower = stderr.to_lowercase();
    for expected in case.expect {
        if !lower.contains(&expected.to_lowercase()) {
            problems.push(format!("the message does not contain {expected:?}"));
        }
    }
    if let Some(hidden) = case.hidden
        && stderr.contains(hidden)
    {
        problems.push(format!("the message shows the secret {hidden:?}"));
    }
    if dir.join("telemetry").exists() {
        problems.push("a telemetry directory was created".to_string());
    }
    if problems.is_empty() { Ok(()) } else { Err(format!("{what}: {}\nstderr:\n{stderr}", problems.join("; "))) }
}

#[test]
fn every_bad_value_exits_2_with_one_message_naming_it_exports_nothing_and_panics_nowhere() {
    assert!(CASES.len() >= 40, "the table has {} cases", CASES.len());
    let ctx = Ctx::new("bad-input");
    let collector = Hanging::start();
    let endpoint = collector.endpoint();
    // Where a rank that got past validation would look for its peers.
    let master_port = refused_port();
    let jobs: Vec<Job> = CASES
        .iter()
        .enumerate()
        .flat_map(|(index, case)| {
            let ranks: &[Option<u32>] = match case.mode {
                Mode::Everywhere => &[None, Some(0), Some(1)],
                Mode::OneRank | Mode::Launcher => &[None],
            };
            ranks.iter().map(move |&rank| Job { case: index, rank })
        })
        .collect();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(index) else { break };
                    let outcome =
                        std::panic::catch_unwind(AssertUnwindSafe(|| run_job(&ctx, job, &endpoint, master_port)))
                            .unwrap_or_else(|panic| {
                                let text = panic
                                    .downcast_ref::<String>()
                                    .cloned()
                                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                                    .unwrap_or_default();
                                Err(format!("case {}: {text}", job.case))
                            });
                    if let Err(failure) = outcome {
                        failures.lock().unwrap().push(failure);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} of {} runs failed:\n\n{}", failures.len(), jobs.len(), failures.join("\n\n"));
    assert_eq!(collector.connections(), 0, "a run with bad input connected to the collector");
    ctx.finish();
}
