//! The training loop: data, forward, backward, optimizer per iteration, an
//! evaluation and a checkpoint on their intervals, the stop and the stall of
//! the command line, and a resume from the checkpoint. Each training event
//! is announced to lens once.

use std::fmt;
use std::time::Instant;

use candle_core::Device;
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarMap};
use lens_fallbacks::{KeyValue, SpanGroup, Telemetry, managed_span};

use crate::args::Args;
use crate::checkpoint;
use crate::model::{self, Model};

/// The example's span names (the training crate's names replace them).
mod names {
    pub(super) const ITERATION: &str = "candle_example.iteration";
    pub(super) const FORWARD: &str = "candle_example.forward";
    pub(super) const BACKWARD: &str = "candle_example.backward";
    pub(super) const OPTIMIZER: &str = "candle_example.optimizer";
    pub(super) const EVAL: &str = "candle_example.eval";
    pub(super) const CHECKPOINT: &str = "candle_example.checkpoint";
    pub(super) const ITERATION_ATTRIBUTE: &str = "candle_example.iteration";
}

/// The learning rate of AdamW.
const LEARNING_RATE: f64 = 0.01;

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
        write!(
            f,
            "{verb} after iteration {} (resumed after {}); loss {:.4}",
            self.last_iteration, self.resumed_after, self.loss
        )?;
        if let Some((loss, accuracy)) = self.eval {
            write!(f, "; eval loss {loss:.4}, accuracy {accuracy:.3}")?;
        }
        match self.checkpoint {
            Some(iteration) => write!(f, "; checkpoint at iteration {iteration}"),
            None => write!(f, "; no checkpoint"),
        }
    }
}

/// Trains per `args`, resuming from the checkpoint if there is one.
pub(crate) fn run(args: &Args, telemetry: &Telemetry) -> anyhow::Result<Summary> {
    let _ = telemetry;
    let device = Device::Cpu;
    let mut vars = VarMap::new();
    let model = Model::new(&vars, &device)?;
    Model::init(&vars, args.seed)?;
    let resumed_after = {
        let _span = managed_span!(SpanGroup::LOAD_CHECKPOINT, "candle_example.load_checkpoint");
        checkpoint::load(&args.checkpoint_dir, &mut vars, &device)?.unwrap_or(0)
    };
    let mut optimizer = AdamW::new(vars.all_vars(), ParamsAdamW { lr: LEARNING_RATE, ..ParamsAdamW::default() })?;
    let eval_set = model::eval_set(&device)?;
    let mut summary = Summary {
        resumed_after,
        last_iteration: resumed_after,
        stopped: false,
        checkpoint: (resumed_after > 0).then_some(resumed_after),
        eval: None,
        loss: f64::NAN,
    };
    for iteration in resumed_after + 1..=args.iterations {
        let _iteration_span =
            managed_span!(SpanGroup::STEP, names::ITERATION, names::ITERATION_ATTRIBUTE => iteration as i64);
        let (inputs, labels) = model::batch(iteration, &device)?;
        if args.stall_at_iteration == Some(iteration) {
            // The deliberate stall: a data loader that hangs for a while.
            std::thread::sleep(args.stall);
        }
        let loss = {
            let _span = managed_span!(SpanGroup::FORWARD_BACKWARD, names::FORWARD);
            model::loss(&model.forward(&inputs)?, &labels)?
        };
        let grads = {
            let _span = managed_span!(SpanGroup::FORWARD_BACKWARD, names::BACKWARD);
            loss.backward()?
        };
        {
            let _span = managed_span!(SpanGroup::OPTIMIZER, names::OPTIMIZER);
            optimizer.step(&grads)?;
        }
        summary.loss = f64::from(loss.to_scalar::<f32>()?);
        summary.last_iteration = iteration;
        if iteration % args.eval_every == 0 || iteration == args.iterations {
            let _span = managed_span!(SpanGroup::EVALUATE, names::EVAL);
            let logits = model.forward(&eval_set.0)?;
            let loss = f64::from(model::loss(&logits, &eval_set.1)?.to_scalar::<f32>()?);
            summary.eval = Some((loss, model::accuracy(&logits, &eval_set.1)?));
        }
        if iteration % args.checkpoint_every == 0 || iteration == args.iterations {
            let started = Instant::now();
            let span = managed_span(
                SpanGroup::CHECKPOINT,
                names::CHECKPOINT,
                [KeyValue::new("candle_example.iteration", iteration as i64)],
            );
            checkpoint::save(&args.checkpoint_dir, &vars, iteration)?;
            span.set_attribute("candle_example.save_s", started.elapsed().as_secs_f64());
            summary.checkpoint = Some(iteration);
        }
        if args.stop_after == Some(iteration) {
            summary.stopped = true;
            break;
        }
    }
    Ok(summary)
}
