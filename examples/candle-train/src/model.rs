//! The model and its data: a tiny next-token classifier built from
//! candle-transformers' `with_tracing` layers (an embedding and three linear
//! layers), so that every layer's forward is a `tracing` span of target
//! `candle_transformers::models::with_tracing`, and synthetic batches from a
//! seeded generator (nothing is downloaded).
//!
//! The task: for a token `x` of a vocabulary of [`VOCAB`], predict
//! `(3x + 1) mod VOCAB`. Small enough to train in milliseconds per
//! iteration on one CPU core, large enough to show the loss falling.

use candle_core::{D, DType, Device, Module, Result, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::with_tracing::{Embedding, Linear, linear};

/// Tokens in the vocabulary.
pub(crate) const VOCAB: usize = 32;
/// Width of the embedding.
pub(crate) const EMBED: usize = 16;
/// Width of the hidden layers.
pub(crate) const HIDDEN: usize = 32;
/// Tokens per training batch (one iteration).
pub(crate) const BATCH: usize = 16;
/// Tokens of the evaluation set.
pub(crate) const EVAL_TOKENS: usize = 64;

/// `with_tracing` layer spans one forward pass enters: the embedding and the
/// three linear layers (what tests/export.rs counts under each forward span).
#[cfg(test)]
const LAYER_SPANS_PER_FORWARD: usize = 4;

/// The model: embedding, two hidden linear layers with ReLU, an output layer.
#[derive(Debug)]
pub(crate) struct Model {
    embedding: Embedding,
    hidden1: Linear,
    hidden2: Linear,
    output: Linear,
}

impl Model {
    /// A model whose weights live in `vars` (so that AdamW and the
    /// checkpoint see them). Build it after the `tracing` subscriber is
    /// installed: `with_tracing` creates each layer's span here.
    pub(crate) fn new(vars: &VarMap, device: &Device) -> Result<Model> {
        let vb = VarBuilder::from_varmap(vars, DType::F32, device);
        Ok(Model {
            embedding: Embedding::new(VOCAB, EMBED, vb.pp("embedding"))?,
            hidden1: linear(EMBED, HIDDEN, vb.pp("hidden1"))?,
            hidden2: linear(HIDDEN, HIDDEN, vb.pp("hidden2"))?,
            output: linear(HIDDEN, VOCAB, vb.pp("output"))?,
        })
    }

    /// Sets every weight from a generator seeded with `seed` (uniform in
    /// `±1/√fan_in`), so that two runs with the same seed train the same model
    /// (candle's CPU device has no seed of its own).
    pub(crate) fn init(vars: &VarMap, seed: u64) -> Result<()> {
        let data =
            vars.data().lock().map_err(|_| candle_core::Error::Msg("the model's variables are poisoned".into()))?;
        let mut names: Vec<&String> = data.keys().collect();
        names.sort();
        for (index, name) in names.into_iter().enumerate() {
            let var = &data[name];
            let fan_in = *var.dims().last().unwrap_or(&1) as f64;
            let bound = 1.0 / fan_in.sqrt();
            let stream = seed.wrapping_mul(0x1_0000_0001).wrapping_add(index as u64);
            let values: Vec<f32> = (0..var.elem_count() as u64)
                .map(|i| {
                    let unit = (splitmix64(stream.wrapping_mul(1_000_003).wrapping_add(i)) >> 11) as f64
                        / (1_u64 << 53) as f64;
                    ((2.0 * unit - 1.0) * bound) as f32
                })
                .collect();
            var.set(&Tensor::from_vec(values, var.shape(), var.device())?)?;
        }
        Ok(())
    }

    /// The trained parameters: embedding, then weights and biases.
    pub(crate) const PARAMETERS: u64 =
        (VOCAB * EMBED + EMBED * HIDDEN + HIDDEN + HIDDEN * HIDDEN + HIDDEN + HIDDEN * VOCAB + VOCAB) as u64;

    /// Logits `(tokens, VOCAB)` for `tokens` (a `u32` vector).
    pub(crate) fn forward(&self, tokens: &Tensor) -> Result<Tensor> {
        let xs = self.embedding.forward(tokens)?;
        let xs = self.hidden1.forward(&xs)?.relu()?;
        let xs = self.hidden2.forward(&xs)?.relu()?;
        self.output.forward(&xs)
    }
}

/// The floating-point operations of one training iteration, by the usual
/// estimate: 6 × parameters × tokens (2 for the forward pass, 4 for the
/// backward pass, per parameter and token). What MFU divides by the peak.
pub(crate) const FLOPS_PER_ITERATION: f64 = 6.0 * Model::PARAMETERS as f64 * BATCH as f64;

/// The label of token `x`.
fn label(x: u32) -> u32 {
    (3 * x + 1) % VOCAB as u32
}

/// SplitMix64: a seeded generator, so that iteration `n`'s batch is the same
/// in every run (a resumed run sees the batches the stopped one would have).
fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `count` tokens and their labels from stream `stream`.
fn tokens(stream: u64, count: usize, device: &Device) -> Result<(Tensor, Tensor)> {
    let inputs: Vec<u32> = (0..count as u64)
        .map(|i| (splitmix64(stream.wrapping_mul(1_000_003).wrapping_add(i)) % VOCAB as u64) as u32)
        .collect();
    let labels: Vec<u32> = inputs.iter().copied().map(label).collect();
    Ok((Tensor::from_vec(inputs, count, device)?, Tensor::from_vec(labels, count, device)?))
}

/// Iteration `iteration`'s batch: [`BATCH`] tokens and their labels.
pub(crate) fn batch(iteration: u64, device: &Device) -> Result<(Tensor, Tensor)> {
    tokens(iteration, BATCH, device)
}

/// The evaluation set (its own stream, never trained on as such).
pub(crate) fn eval_set(device: &Device) -> Result<(Tensor, Tensor)> {
    tokens(u64::MAX, EVAL_TOKENS, device)
}

/// Mean cross-entropy of `logits` against `labels`.
pub(crate) fn loss(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    candle_nn::loss::cross_entropy(logits, labels)
}

/// Share of `labels` the logits' argmax gets right.
pub(crate) fn accuracy(logits: &Tensor, labels: &Tensor) -> Result<f64> {
    let right = logits.argmax(D::Minus1)?.eq(labels)?.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
    Ok(f64::from(right) / labels.dim(0)? as f64)
}

/// Held by every test that makes a model: `tracing`'s callsite registry is
/// process-wide, and a model made on another thread while the span-counting
/// test installs its subscriber could leave candle's callsites disabled.
#[cfg(test)]
pub(crate) static MODEL_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_the_same_in_every_run_and_labelled_by_the_rule() {
        let device = Device::Cpu;
        let (x1, y1) = batch(7, &device).unwrap();
        let (x2, _) = batch(7, &device).unwrap();
        let (x3, _) = batch(8, &device).unwrap();
        let x1 = x1.to_vec1::<u32>().unwrap();
        assert_eq!(x1, x2.to_vec1::<u32>().unwrap());
        assert_ne!(x1, x3.to_vec1::<u32>().unwrap());
        let expected: Vec<u32> = x1.iter().map(|x| (3 * x + 1) % 32).collect();
        assert_eq!(y1.to_vec1::<u32>().unwrap(), expected);
    }

    #[test]
    fn the_parameter_count_is_the_model_s() {
        let _serial = MODEL_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let vars = VarMap::new();
        let _model = Model::new(&vars, &Device::Cpu).unwrap();
        let counted: usize = vars.all_vars().iter().map(|var| var.elem_count()).sum();
        assert_eq!(counted as u64, Model::PARAMETERS);
        assert_eq!(Model::PARAMETERS, 32 * 16 + 16 * 32 + 32 + 32 * 32 + 32 + 32 * 32 + 32);
    }

    #[test]
    fn a_forward_pass_enters_one_with_tracing_span_per_layer() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};

        use tracing_subscriber::layer::{Context, SubscriberExt as _};
        use tracing_subscriber::registry::LookupSpan;

        /// Counts entries of candle's layer spans.
        struct Entries(Arc<AtomicUsize>);
        impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Entries {
            fn on_enter(&self, id: &tracing::span::Id, ctx: Context<'_, S>) {
                if ctx
                    .span(id)
                    .is_some_and(|span| span.metadata().target() == "candle_transformers::models::with_tracing")
                {
                    self.0.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let _serial = MODEL_TESTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entries = Arc::new(AtomicUsize::new(0));
        let subscriber = tracing_subscriber::registry().with(Entries(Arc::clone(&entries)));
        tracing::subscriber::with_default(subscriber, || {
            // Other tests of this binary may have registered candle's
            // callsites (before this one took the lock) with no subscriber.
            tracing::callsite::rebuild_interest_cache();
            let device = Device::Cpu;
            let vars = VarMap::new();
            let model = Model::new(&vars, &device).unwrap();
            let (inputs, _) = batch(1, &device).unwrap();
            model.forward(&inputs).unwrap();
            assert_eq!(entries.load(Ordering::Relaxed), LAYER_SPANS_PER_FORWARD);
            model.forward(&inputs).unwrap();
            assert_eq!(entries.load(Ordering::Relaxed), 2 * LAYER_SPANS_PER_FORWARD);
        });
    }
}
