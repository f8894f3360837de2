//! The trained byte-level language model for inference: loaded from the
//! checkpoints training writes (any tensor/pipeline layout, the shards
//! merged into one model in one process), next-byte logits for a batch of
//! contexts, and sampling that only ever returns printable ASCII.
//!
//! The model is the one [`crate::model`] describes; inference runs its
//! forward pass on the CPU with every column on one rank. Contexts longer
//! than the training sequence length use their last
//! [`InferenceModel::max_context`] bytes, the window the mixers were trained
//! on (a causal model's logits at a position depend only on the bytes up to
//! it, so a shorter context is padded after its end and read at its last
//! byte).

use std::path::Path;

use crate::checkpoint::{self, Expected, LoadError};
use crate::config::Coords;
use crate::corpus::is_printable;
use crate::device::Cpu;
use crate::model::{self, LayerKind, Stage, VOCAB};

/// A trained byte-level LM loaded for inference in one process, merged from any TP/PP layout.
#[derive(Debug)]
pub(crate) struct InferenceModel {
    /// Every parameter of the model, as a one-rank stage holds them.
    stage: Stage,
    num_layers: u32,
    hidden: u64,
}

/// `path: problem`, the message of a checkpoint that cannot be loaded.
fn describe(error: &LoadError) -> String {
    format!("{}: {}", error.path.display(), error.problem)
}

/// The parameter count of the shard at pipeline stage `stage` of a layout
/// with `tp` × `pp` model-parallel ranks, computed without allocating
/// (`None` on overflow: a damaged header).
fn shard_parameters(num_layers: u32, hidden: u64, tp: u32, pp: u32, stage: u32) -> Option<u64> {
    let (tp, vocab) = (u64::from(tp), VOCAB as u64);
    let columns = hidden / tp;
    let layer = hidden.checked_mul(columns)?.checked_add(columns)?;
    let mut total = u64::from(num_layers / pp).checked_mul(layer)?;
    if stage == 0 {
        total = total.checked_add(vocab.checked_mul(columns)?)?;
    }
    if stage + 1 == pp {
        total = total.checked_add(hidden.checked_mul(vocab / tp)?.checked_add(vocab / tp)?)?;
    }
    Some(total)
}

impl InferenceModel {
    /// Loads the latest checkpoint under `dir` written by training (any tensor/pipeline layout: shards merged).
    /// Errors name the path and what is wrong (damaged, truncated, foreign: see checkpoint.rs's checks).
    pub(crate) fn load(dir: &Path) -> Result<InferenceModel, String> {
        let iteration = checkpoint::read_tracker(dir).map_err(|e| describe(&e))?;
        let first = checkpoint::read_rank_as_saved(dir, iteration, 0).map_err(|e| describe(&e))?;
        let (layout, num_layers, hidden) = (first.layout, first.num_layers, first.hidden_size);
        let first_path = checkpoint::iteration_dir(dir, iteration).join("rank_00000.ckpt");
        let refuse = |problem: String| format!("{}: {problem}", first_path.display());
        if num_layers == 0 || !num_layers.is_multiple_of(layout.pp) {
            return Err(refuse(format!("{num_layers} layers cannot be split into {} pipeline stages", layout.pp)));
        }
        if !hidden.is_multiple_of(u64::from(layout.tp)) || !(VOCAB as u32).is_multiple_of(layout.tp) {
            return Err(refuse(format!(
                "width {hidden} and the vocabulary {VOCAB} cannot be split over {} tensor-parallel ranks",
                layout.tp
            )));
        }
        let whole = (0..layout.pp).try_fold(0_u64, |sum, stage| {
            sum.checked_add(
                shard_parameters(num_layers, hidden, layout.tp, layout.pp, stage)?.checked_mul(u64::from(layout.tp))?,
            )
        });
        if shard_parameters(num_layers, hidden, layout.tp, layout.pp, 0) != Some(first.params.len() as u64)
            || whole != Some(model::model_parameters(num_layers, hidden))
        {
            return Err(refuse(format!(
                "holds {} parameters, which is not rank 0's share of a model of {num_layers} layers of width {hidden} \
                 over TP={} PP={}",
                first.params.len(),
                layout.tp,
                layout.pp
            )));
        }
        let kinds = LayerKind::from_pattern(first.hybrid_override_pattern.as_deref(), num_layers);
        let seq = usize::try_from(first.seq_length).unwrap_or(usize::MAX).max(1);
        let h = hidden as usize;
        let mut stage = Stage::new(0, &kinds, h, seq, 1, 0, 1, 0);
        stage.grads = Vec::new();
        for pp in 0..layout.pp {
            for tp in 0..layout.tp {
                let rank = layout.rank(Coords { tp, dp: 0, pp });
                let state = if rank == 0 {
                    first.clone()
                } else {
                    let expected = Expected { iteration, rank, layout, num_layers, hidden_size: hidden };
                    checkpoint::read_rank(dir, expected).map_err(|e| describe(&e).replacen("--load: ", "", 1))?
                };
                let path = checkpoint::iteration_dir(dir, iteration).join(format!("rank_{rank:05}.ckpt"));
                let shard = Stage::new(0, &kinds, h, seq, layout.pp, pp, layout.tp, tp);
                if state.params.len() != shard.params.len()
                    || state.seq_length != first.seq_length
                    || state.hybrid_override_pattern != first.hybrid_override_pattern
                {
                    return Err(format!(
                        "{}: does not fit rank 0's model: {} parameters (this rank's share is {}), sequence length {} \
                         and layer pattern {:?} (rank 0: {} and {:?})",
                        path.display(),
                        state.params.len(),
                        shard.params.len(),
                        state.seq_length,
                        state.hybrid_override_pattern,
                        first.seq_length,
                        first.hybrid_override_pattern
                    ));
                }
                stage.absorb(&shard, &state.params);
            }
        }
        Ok(InferenceModel { stage, num_layers, hidden })
    }

    /// The context length the model was trained with (bytes); longer contexts use their last `max_context()` bytes.
    pub(crate) fn max_context(&self) -> usize {
        self.stage.seq
    }

    /// Next-byte logits (256 each) for the last position of each context in a batch (contexts may differ in length; each non-empty).
    /// An empty context is read as a single newline.
    pub(crate) fn next_logits(&self, contexts: &[&[u8]]) -> Vec<[f32; 256]> {
        let seq = self.max_context();
        let mut tokens = vec![b' '; contexts.len() * seq];
        let mut last = Vec::with_capacity(contexts.len());
        for (sample, context) in contexts.iter().enumerate() {
            let context: &[u8] = if context.is_empty() { b"\n" } else { &context[context.len().saturating_sub(seq)..] };
            tokens[sample * seq..sample * seq + context.len()].copy_from_slice(context);
            last.push(sample * seq + context.len() - 1);
        }
        let logits = self.forward(&tokens);
        last.iter()
            .map(|&row| {
                let mut out = [0.0_f32; VOCAB];
                out.copy_from_slice(&logits[row * VOCAB..(row + 1) * VOCAB]);
                out
            })
            .collect()
    }

    /// The logits of every position of `tokens` (samples of `max_context()` bytes).
    fn forward(&self, tokens: &[u8]) -> Vec<f32> {
        let never = |_: &[f32]| -> Result<Vec<f32>, std::convert::Infallible> {
            unreachable!("one rank holds every column: nothing to gather")
        };
        let (device, stage) = (&Cpu, &self.stage);
        let Ok((mut activations, _)) = stage.embed_forward(device, tokens, never);
        for index in 0..stage.layers.len() {
            let mixed = stage.mix_forward(index, activations);
            let Ok((output, _)) = stage.dense_forward(device, index, mixed, never);
            activations = output;
        }
        let Ok((logits, _)) = stage.head_forward(device, activations, never);
        logits
    }

    /// Model FLOPs for one forward token (for throughput/MFU accounting of inference).
    pub(crate) fn forward_flops_per_token(&self) -> u64 {
        model::forward_flops_per_token(self.num_layers, self.hidden)
    }
}

/// Samples one byte from logits with temperature and top-p, masking everything outside printable ASCII (0x20..=0x7E, plus '\n'), deterministic for a given rng state.
///
/// `temperature <= 0` (or not a number) is greedy: the printable byte with
/// the largest logit (the lowest such byte on a tie). `top_p` keeps the
/// most likely bytes whose probabilities add up to at least `top_p` (at
/// least one byte; `>= 1` keeps them all). `rng` is called once when
/// sampling (not when greedy) and should return a value in `[0, 1)`; others
/// are clamped. Logits that are not numbers count as impossible; when no
/// printable byte has a usable logit the result is a space.
pub(crate) fn sample_printable(logits: &[f32; 256], temperature: f32, top_p: f32, rng: &mut impl FnMut() -> f32) -> u8 {
    let usable =
        |b: u8| is_printable(b) && !logits[usize::from(b)].is_nan() && logits[usize::from(b)] > f32::NEG_INFINITY;
    let mut candidates: Vec<u8> = (0..=255_u8).filter(|&b| usable(b)).collect();
    let Some(&best) =
        candidates.iter().max_by(|&&a, &&b| logits[usize::from(a)].total_cmp(&logits[usize::from(b)]).then(b.cmp(&a)))
    else {
        return b' ';
    };
    let max = logits[usize::from(best)];
    if temperature.is_nan() || temperature <= 0.0 || max == f32::INFINITY {
        return best;
    }
    // Most likely first (the lower byte first on a tie).
    candidates.sort_by(|&a, &b| logits[usize::from(b)].total_cmp(&logits[usize::from(a)]).then(a.cmp(&b)));
    let weights: Vec<f64> =
        candidates.iter().map(|&b| (f64::from(logits[usize::from(b)] - max) / f64::from(temperature)).exp()).collect();
    let total: f64 = weights.iter().sum();
    let keep_mass = if top_p.is_nan() { 0.0 } else { f64::from(top_p).clamp(0.0, 1.0) } * total;
    let mut kept = 0;
    let mut mass = 0.0;
    while kept < weights.len() && (kept == 0 || mass < keep_mass) {
        mass += weights[kept];
        kept += 1;
    }
    let draw = rng();
    let draw = if draw.is_nan() { 0.0 } else { f64::from(draw).clamp(0.0, 1.0) } * mass;
    let mut cumulative = 0.0;
    for (byte, weight) in candidates.iter().zip(&weights).take(kept) {
        cumulative += weight;
        if draw < cumulative {
            return *byte;
        }
    }
    candidates[kept - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_damaged_checkpoint_is_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("mtsim-lm-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let error = InferenceModel::load(&dir).unwrap_err();
        assert!(error.contains("latest_checkpointed_iteration.txt"), "{error}");
        std::fs::create_dir_all(dir.join("iter_0000003")).unwrap();
        checkpoint::write_tracker(&dir, 3).unwrap();
        std::fs::write(dir.join("iter_0000003/rank_00000.ckpt"), b"MTSIM-CKPT 1\n{}\n").unwrap();
        let error = InferenceModel::load(&dir).unwrap_err();
        assert!(error.contains("iter_0000003/rank_00000.ckpt") && error.contains("another format"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn greedy_sampling_takes_the_most_likely_printable_byte() {
        let mut logits = [0.0_f32; 256];
        logits[0x07] = 50.0; // BEL: never returned
        logits[usize::from(b'q')] = 3.0;
        logits[usize::from(b'z')] = 2.0;
        let mut never = || -> f32 { panic!("greedy sampling draws nothing") };
        assert_eq!(sample_printable(&logits, 0.0, 1.0, &mut never), b'q');
        // A tiny top-p keeps only the most likely byte; a draw past the end stays inside.
        assert_eq!(sample_printable(&logits, 1.0, 1e-6, &mut || 0.99), b'q');
        // At a high temperature every printable byte is possible.
        let seen: std::collections::BTreeSet<u8> =
            (0..2000).map(|i| sample_printable(&logits, 100.0, 1.0, &mut || i as f32 / 2000.0)).collect();
        assert!(seen.len() > 90 && seen.contains(&b'\n') && !seen.contains(&0x07), "{seen:?}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Whatever the logits (NaN, infinities, a huge non-printable one),
        /// temperature, top-p and draws, the byte is printable ASCII or a
        /// newline, and the same inputs give the same byte.
        #[test]
        fn sampling_never_returns_a_non_printable_byte(
            values in proptest::collection::vec(proptest::num::f32::ANY, 256),
            temperature in proptest::num::f32::ANY,
            top_p in proptest::num::f32::ANY,
            draws in proptest::collection::vec(proptest::num::f32::ANY, 1..8),
        ) {
            let mut logits = [0.0_f32; 256];
            logits.copy_from_slice(&values);
            for draw in draws {
                let byte = sample_printable(&logits, temperature, top_p, &mut || draw);
                proptest::prop_assert!(is_printable(byte), "{byte:#x}");
                proptest::prop_assert_eq!(byte, sample_printable(&logits, temperature, top_p, &mut || draw));
            }
        }
    }
}
