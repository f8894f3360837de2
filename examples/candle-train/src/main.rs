//! A small candle training program instrumented with lens: the example that
//! docs/own-program.md walks through.
//!
//! It trains a tiny model built from candle-transformers' `with_tracing`
//! layers on synthetic data with AdamW, evaluates it, writes a safetensors
//! checkpoint, can stop after an iteration (`--stop-after N`, a preemption)
//! and resumes from its checkpoint on the next start. Telemetry goes through
//! the facade (`lens-fallbacks`), the training diagnosis (`lens-training`:
//! one call per training event) and lens-tracing's bridge only; with the
//! example's `otel` feature off the same program trains the same model and
//! records nothing.
//!
//! ```text
//! CANDLE_OTEL_ENABLED=1 CANDLE_OTEL_EXPORTER=file CANDLE_OTEL_FILE_DIR=/tmp/candle-telemetry \
//! CANDLE_OTEL_SPAN_GROUPS=all \
//! CANDLE_OTEL_TRACING_GROUPS=candle_transformers=forward_backward:per_entry \
//! CANDLE_OTEL_RANK_METRICS=1 CANDLE_OTEL_PEAK_TFLOPS=0.001 \
//!     cargo run -p lens-example-candle --features otel -- --checkpoint-dir /tmp/candle-ckpt
//! ```

mod args;
mod checkpoint;
mod model;
mod train;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use lens_fallbacks::Telemetry;
use lens_tracing::TelemetryExt as _;
use lens_training::{Training, TrainingOptions};
use tracing_subscriber::layer::SubscriberExt as _;

use crate::args::{Args, USAGE};

/// The prefix of this program's telemetry variables (`CANDLE_OTEL_*`, with
/// the `NEMO_LENS_*` fallback).
const PREFIX: &str = "CANDLE_OTEL";

/// How long shutdown may take to flush what is left.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(error) => {
            complain(&error);
            return ExitCode::from(2);
        }
    };
    if args.help {
        say(USAGE);
        return ExitCode::SUCCESS;
    }
    // One call reads CANDLE_OTEL_* and sets telemetry up; a bad value is an
    // error naming the variable (with `otel` compiled out, a warning). The
    // checkpoint directory is where the next attempt resumes from: the crash
    // spool goes there, so that after a kill the next attempt finds it.
    let telemetry = match Telemetry::builder(PREFIX).checkpoint_dir(&args.checkpoint_dir).setup() {
        Ok(telemetry) => Arc::new(telemetry),
        Err(error) => {
            complain(&error);
            return ExitCode::from(2);
        }
    };
    // The bridge, with the rules of CANDLE_OTEL_TRACING_GROUPS, installed
    // before the model is built: `with_tracing` makes each layer's span then.
    let subscriber = tracing_subscriber::registry().with(telemetry.tracing_layer());
    if let Err(error) = tracing::subscriber::set_global_default(subscriber) {
        complain(&error);
        return ExitCode::from(2);
    }
    // The training diagnosis: the hang timeout and the peak come from the
    // configuration setup read (CANDLE_OTEL_HANG_TIMEOUT_S,
    // CANDLE_OTEL_PEAK_TFLOPS), the FLOP count from the model, and the
    // goodput progress record goes beside the checkpoints.
    let training = Training::new(
        &telemetry,
        TrainingOptions::for_rank(telemetry.rank())
            .with_flop_count(|_iteration: u64| model::FLOPS_PER_ITERATION)
            .with_checkpoint_dir(&args.checkpoint_dir),
    );
    let metrics = train::Metrics::new(telemetry.meter());
    let outcome = train::run(&args, &training, &metrics);
    drop(training);
    let report = telemetry.shutdown(SHUTDOWN_TIMEOUT);
    match outcome {
        Ok(summary) => {
            say(&summary.to_string());
            if telemetry.is_enabled() {
                say(&format!("telemetry: {report}"));
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            complain(&error);
            ExitCode::FAILURE
        }
    }
}

#[expect(clippy::print_stdout, reason = "a program's own report of what it did")]
fn say(line: &str) {
    println!("{line}");
}

#[expect(clippy::print_stderr, reason = "a program's error message")]
fn complain(error: &dyn std::fmt::Display) {
    eprintln!("lens-example-candle: {error}");
}
