//! An instrumented training loop that builds and runs in both facade modes:
//!
//! ```text
//! cargo run -p lens-fallbacks --example instrumented
//! cargo run -p lens-fallbacks --no-default-features --example instrumented
//! ```
//!
//! The code never mentions the `otel` feature. With it, the spans are real
//! once telemetry is set up (the setup call goes where the comment in `main`
//! says); without it every call compiles to its body.

use std::collections::HashMap;
use std::time::SystemTime;

use lens_fallbacks::{
    KeyValue, SpanGroup, WorkerBootstrap, in_managed_span, inject_context, lazy_attributes, managed_span, span,
    trace_fn, try_in_managed_span,
};

#[trace_fn(group = SpanGroup::FORWARD_BACKWARD, name = "example.forward_backward")]
fn forward_backward(iteration: u64) -> f64 {
    1.0 / (iteration as f64 + 1.0)
}

#[trace_fn(group = SpanGroup::CHECKPOINT, name = "example.checkpoint.save")]
fn save_checkpoint(iteration: u64) -> Result<u64, String> {
    if iteration > 1_000 { Err(format!("iteration {iteration} is past the end")) } else { Ok(iteration) }
}

fn train(iterations: u64) -> Result<f64, String> {
    let mut loss = 0.0;
    for iteration in 0..iterations {
        let step = managed_span(SpanGroup::STEP, "example.train_step", [KeyValue::new("example.iteration", iteration)]);
        loss = forward_backward(iteration);
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
    }
    Ok(loss)
}

fn main() -> Result<(), String> {
    // With `otel` on, set telemetry up here (the setup API of lens-core).
    let started = SystemTime::now();
    let loss = train(4)?;
    let _startup = span(SpanGroup::JOB, "example.startup").start_time(started).end_at(SystemTime::now());

    let mut carrier = HashMap::new();
    inject_context(&mut carrier);
    let worker = WorkerBootstrap::capture(false, None, None);
    report(loss, carrier.len(), &worker.to_env_vars("EXAMPLE"));
    Ok(())
}

#[expect(clippy::print_stdout, reason = "an example program reports what it did")]
fn report(loss: f64, carried: usize, worker_env: &[(String, String)]) {
    println!("final loss {loss:.3}; {carried} context fields carried; worker environment {worker_env:?}");
}
