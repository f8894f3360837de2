//! An instrumented training loop that builds and runs in both facade modes:
//!
//! ```text
//! cargo run -p lens-fallbacks --example instrumented
//! cargo run -p lens-fallbacks --no-default-features --example instrumented
//! EXAMPLE_OTEL_ENABLED=1 EXAMPLE_OTEL_EXPORTER=console cargo run -p lens-fallbacks --example instrumented
//! ```
//!
//! The code never mentions the `otel` feature. It sets telemetry up with one
//! call (`Telemetry::from_env("EXAMPLE_OTEL")`: `EXAMPLE_OTEL_*`, then
//! `NEMO_LENS_*`), records spans and three metrics of its own (a counter, a
//! gauge and a histogram) and shuts down. With `otel` the spans and metrics
//! are real once the environment enables telemetry; without it every call
//! compiles to its body, and an environment that enables telemetry gets one
//! warning naming the missing feature.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use lens_fallbacks::{
    Counter, Gauge, Histogram, KeyValue, Meter, SpanGroup, Telemetry, WorkerBootstrap, in_managed_span, inject_context,
    lazy_attributes, managed_span, span, trace_fn, try_in_managed_span,
};

/// The example's own metrics, created once from the handle's meter (no-op
/// handles when telemetry is off or compiled out).
struct LoopMetrics {
    samples: Counter<u64>,
    loss: Gauge<f64>,
    step_seconds: Histogram<f64>,
}

impl LoopMetrics {
    fn new(meter: &Meter) -> LoopMetrics {
        LoopMetrics {
            samples: meter.u64_counter("example.samples").with_description("Samples trained on").build(),
            loss: meter.f64_gauge("example.loss").with_description("Loss of the latest step").build(),
            step_seconds: meter
                .f64_histogram("example.step.duration")
                .with_unit("s")
                .with_description("Wall time of one training step")
                .with_boundaries(vec![0.001, 0.01, 0.1, 1.0])
                .build(),
        }
    }
}

#[trace_fn(group = SpanGroup::FORWARD_BACKWARD, name = "example.forward_backward")]
fn forward_backward(iteration: u64) -> f64 {
    1.0 / (iteration as f64 + 1.0)
}

#[trace_fn(group = SpanGroup::CHECKPOINT, name = "example.checkpoint.save")]
fn save_checkpoint(iteration: u64) -> Result<u64, String> {
    if iteration > 1_000 { Err(format!("iteration {iteration} is past the end")) } else { Ok(iteration) }
}

fn train(iterations: u64, metrics: &LoopMetrics) -> Result<f64, String> {
    let mut loss = 0.0;
    for iteration in 0..iterations {
        let started = Instant::now();
        let step = managed_span(SpanGroup::STEP, "example.train_step", [KeyValue::new("example.iteration", iteration)]);
        loss = forward_backward(iteration);
        metrics.samples.add(32, &[]);
        metrics.loss.record(loss, &[]);
        in_managed_span(SpanGroup::OPTIMIZER, "example.optimizer", [], |span| {
            span.set_attribute("example.lr", 1e-4);
        });
        step.set_attribute("example.loss", loss);
        if iteration % 2 == 1 {
            try_in_managed_span(
                SpanGroup::CHECKPOINT,
                "example.checkpoint",
                lazy_attributes(|| [KeyValue::new("example.path", format!("ckpt/iter_{iteration:07}"))]),
                |_| save_checkpoint(iteration),
            )?;
        }
        metrics.step_seconds.record(started.elapsed().as_secs_f64(), &[]);
    }
    Ok(loss)
}

// `Box<dyn Error>` prints an error's `Debug`, which for lens's `SetupError`
// is the same human message as its `Display`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = SystemTime::now();
    let telemetry = Telemetry::from_env("EXAMPLE_OTEL")?;
    let metrics = LoopMetrics::new(telemetry.meter());
    let loss = train(4, &metrics)?;
    let _startup = span(SpanGroup::JOB, "example.startup").start_time(started).end_at(SystemTime::now());

    let mut carrier = HashMap::new();
    inject_context(&mut carrier);
    let worker = WorkerBootstrap::capture(telemetry.is_enabled(), None, None);
    report(loss, carrier.len(), &worker.to_env_vars("EXAMPLE"));
    let shutdown = telemetry.shutdown(Duration::from_secs(5));
    summary(telemetry.is_enabled(), &shutdown);
    Ok(())
}

#[expect(clippy::print_stdout, reason = "an example program reports what it did")]
fn report(loss: f64, carried: usize, worker_env: &[(String, String)]) {
    println!("final loss {loss:.3}; {carried} context fields carried; worker environment {worker_env:?}");
}

#[expect(clippy::print_stdout, reason = "an example program reports what it did")]
fn summary(enabled: bool, shutdown: &lens_fallbacks::ShutdownReport) {
    println!("telemetry enabled: {enabled}; {shutdown}");
}
