//! The training loop: data, forward, backward and optimizer per iteration,
//! an evaluation and a checkpoint on their intervals, the stop and the stall
//! of the command line, and a resume from the checkpoint.
//!
//! Each training event is announced to lens once, through lens-training's
//! [`Training`]: the call opens the event's span, marks the rank's phase and
//! informs the goodput accountant together; the hang watchdog, the per-rank
//! counters and MFU follow from the same calls. candle's own layer spans
//! (`with_tracing`) nest under the forward span through the `tracing` bridge.

use std::fmt;
use std::path::Path;
use std::time::Instant;

use candle_core::Device;
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarMap};
use lens_fallbacks::{Counter, Gauge, Meter};
use lens_training::{Phase, Training};

use crate::args::Args;
use crate::checkpoint;
use crate::model::{self, Model};

/// The learning rate of AdamW.
const LEARNING_RATE: f64 = 0.01;

/// The program's own metrics (docs/own-program.md, "Metrics of your own"):
/// the loss and the evaluation as time series, and the tokens trained on
/// (the throughput is its rate). On a rank that does not export, and
/// without `otel`, they record nothing.
pub(crate) struct Metrics {
    loss: Gauge<f64>,
    eval_loss: Gauge<f64>,
    eval_accuracy: Gauge<f64>,
    tokens: Counter<u64>,
}

impl Metrics {
    /// The instruments, from the handle's meter.
    pub(crate) fn new(meter: &Meter) -> Metrics {
        Metrics {
            loss: meter
                .f64_gauge("candle.train.loss")
                .with_description("Training loss of the latest iteration")
                .build(),
            eval_loss: meter.f64_gauge("candle.eval.loss").with_description("Loss on the evaluation set").build(),
            eval_accuracy: meter
                .f64_gauge("candle.eval.accuracy")
                .with_unit("1")
                .with_description("Next-token accuracy on the evaluation set")
                .build(),
            tokens: meter
                .u64_counter("candle.train.tokens")
                .with_unit("{token}")
                .with_description("Tokens trained on (their rate is the throughput)")
                .build(),
        }
    }
}

/// What a run did, printed at its end.
#[derive(Debug)]
pub(crate) struct Summary {
    /// The iteration the run resumed after (0 for a fresh run).
    pub(crate) resumed_after: u64,
    /// The last iteration it trained.
    pub(crate) last_iteration: u64,
    /// Whether it stopped early (`--stop-after`).
    pub(crate) stopped: bool,
    /// The iteration of the newest durable checkpoint.
    pub(crate) checkpoint: Option<u64>,
    /// The last evaluation: loss and accuracy.
    pub(crate) eval: Option<(f64, f64)>,
    /// The training loss of the last iteration.
    pub(crate) loss: f64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.stopped { "stopped" } else { "finished" };
        write!(f, "{verb} after iteration {} (resumed after {})", self.last_iteration, self.resumed_after)?;
        if self.last_iteration == self.resumed_after {
            // The checkpoint is already at --iterations: a rerun that finds
            // the last run's checkpoint, not a loss of NaN.
            return write!(
                f,
                "; nothing to train: the checkpoint of --checkpoint-dir is at iteration {}, at or past \
                 --iterations; remove that directory to start over",
                self.resumed_after
            );
        }
        write!(f, "; loss {:.4}", self.loss)?;
        if let Some((loss, accuracy)) = self.eval {
            write!(f, "; eval loss {loss:.4}, accuracy {accuracy:.3}")?;
        }
        match self.checkpoint {
            Some(iteration) => write!(f, "; checkpoint at iteration {iteration}"),
            None => write!(f, "; no checkpoint"),
        }
    }
}

/// Loads the newest checkpoint of `dir` into `vars`, announced as a load;
/// returns its iteration (0 for a fresh run).
fn resume(training: &Training, dir: &Path, vars: &mut VarMap) -> anyhow::Result<u64> {
    let Some(iteration) = checkpoint::latest(dir)? else { return Ok(0) };
    let load = training.checkpoint_load();
    checkpoint::load(dir, iteration, vars)?;
    // Goodput continues the run from the progress record beside the
    // checkpoint: what the stopped attempt had not saved is lost progress.
    load.resumed(dir, iteration);
    Ok(iteration)
}

/// Trains per `args`, resuming from the checkpoint if there is one.
pub(crate) fn run(args: &Args, training: &Training, metrics: &Metrics) -> anyhow::Result<Summary> {
    let device = Device::Cpu;
    let mut vars = VarMap::new();
    let model = Model::new(&vars, &device)?;
    Model::init(&vars, args.seed)?;
    let resumed_after = resume(training, &args.checkpoint_dir, &mut vars)?;
    let mut optimizer = AdamW::new(vars.all_vars(), ParamsAdamW { lr: LEARNING_RATE, ..ParamsAdamW::default() })?;
    let (eval_inputs, eval_labels) = model::eval_set(&device)?;
    let mut summary = Summary {
        resumed_after,
        last_iteration: resumed_after,
        stopped: false,
        checkpoint: (resumed_after > 0).then_some(resumed_after),
        eval: None,
        loss: f64::NAN,
    };
    training.loop_started();
    for counter in resumed_after..args.iterations {
        let iteration = counter + 1;
        // The iteration's span; dropping the guard completes the iteration.
        let step = training.iteration(counter);
        training.mark(Phase::Data);
        let data_started = Instant::now();
        let (inputs, labels) = model::batch(iteration, &device)?;
        if args.stall_at_iteration == Some(iteration) {
            // The deliberate stall: a data loader that hangs for a while.
            std::thread::sleep(args.stall);
        }
        std::thread::sleep(args.data_time.saturating_sub(data_started.elapsed()));
        let loss = {
            let _forward = training.phase(Phase::Forward);
            model::loss(&model.forward(&inputs)?, &labels)?
        };
        let grads = {
            let _backward = training.phase(Phase::Backward);
            loss.backward()?
        };
        {
            let _optimizer = training.phase(Phase::Optimizer);
            optimizer.step(&grads)?;
        }
        summary.loss = f64::from(loss.to_scalar::<f32>()?);
        metrics.loss.record(summary.loss, &[]);
        metrics.tokens.add(model::BATCH as u64, &[]);
        drop(step);
        summary.last_iteration = iteration;
        let last = iteration == args.iterations;
        if iteration.is_multiple_of(args.eval_every) || last {
            let _evaluation = training.evaluation(iteration);
            let logits = model.forward(&eval_inputs)?;
            let loss = f64::from(model::loss(&logits, &eval_labels)?.to_scalar::<f32>()?);
            let accuracy = model::accuracy(&logits, &eval_labels)?;
            metrics.eval_loss.record(loss, &[]);
            metrics.eval_accuracy.record(accuracy, &[]);
            summary.eval = Some((loss, accuracy));
        }
        if iteration.is_multiple_of(args.checkpoint_every) || last {
            let save = training.checkpoint_save(iteration);
            match checkpoint::save(&args.checkpoint_dir, &vars, iteration) {
                Ok(_) => save.durable(),
                Err(error) => {
                    save.failed();
                    return Err(error);
                }
            }
            summary.checkpoint = Some(iteration);
        }
        // Every iteration is a log interval: MFU over it, the goodput gauges
        // and the progress record.
        training.log_interval();
        if args.stop_after == Some(iteration) {
            summary.stopped = true;
            break;
        }
    }
    if summary.stopped {
        // A preemption: no normal end, so the iterations after the last
        // checkpoint stay pending (lost, once the next attempt resumes).
        training.stop_watchdog();
    } else {
        training.finish();
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_with_nothing_left_to_train_says_so_instead_of_a_nan_loss() {
        let summary = Summary {
            resumed_after: 12,
            last_iteration: 12,
            stopped: false,
            checkpoint: Some(12),
            eval: None,
            loss: f64::NAN,
        };
        assert_eq!(
            summary.to_string(),
            "finished after iteration 12 (resumed after 12); nothing to train: the checkpoint of --checkpoint-dir is \
             at iteration 12, at or past --iterations; remove that directory to start over"
        );
        let trained = Summary { last_iteration: 13, loss: 1.5, ..summary };
        assert_eq!(
            trained.to_string(),
            "finished after iteration 13 (resumed after 12); loss 1.5000; checkpoint at iteration 12"
        );
    }
}
