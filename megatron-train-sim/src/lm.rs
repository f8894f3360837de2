//! The inference interface of the simulator's byte-level causal LM: what
//! `serve` codes against.
//!
//! **TEMPORARY STAND-IN (branch h11b-serve).** The real model (the trained
//! weights of a checkpoint, any TP/PP layout merged on load) is written on
//! branch h11a-lm in this very file, with these exact signatures; the
//! integrator replaces this file with that one at merge. This stand-in only
//! checks that the directory holds a training checkpoint (its tracker file)
//! and derives fixed bigram-like logits from the tracker's content, so that
//! the server, its tests and its benchmark run end to end. Nothing outside
//! this file depends on what the logits are.

use std::path::Path;

use crate::checkpoint::TRACKER;

/// Bytes of context the stand-in accepts (prompt plus output).
const STAND_IN_MAX_CONTEXT: usize = 4096;

/// A loaded model, ready to predict the next byte. `Send + Sync`: the engine
/// thread owns it.
#[derive(Debug)]
pub(crate) struct InferenceModel {
    /// `table[previous byte]`: the next byte's logits (stand-in).
    table: Vec<[f32; 256]>,
}

impl InferenceModel {
    /// Loads the latest checkpoint under `dir` (a training run's `--save`
    /// directory), merging any TP/PP layout.
    pub(crate) fn load(dir: &Path) -> Result<InferenceModel, String> {
        let tracker = dir.join(TRACKER);
        let text = std::fs::read_to_string(&tracker).map_err(|error| {
            format!("{} is not a training checkpoint (reading {}: {error})", dir.display(), tracker.display())
        })?;
        let iteration: u64 = text.trim().parse().map_err(|_| {
            format!(
                "{}: {:?} is not an iteration number; is this a checkpoint directory?",
                tracker.display(),
                text.trim()
            )
        })?;
        let mut state = iteration.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        let table = (0..256)
            .map(|_| {
                let mut row = [0.0_f32; 256];
                for logit in &mut row {
                    *logit = next() * 4.0;
                }
                row
            })
            .collect();
        Ok(InferenceModel { table })
    }

    /// Bytes of context (prompt plus output) the model accepts.
    pub(crate) fn max_context(&self) -> usize {
        STAND_IN_MAX_CONTEXT
    }

    /// The logits of the next byte after each context (the last position of
    /// each), for a batch.
    pub(crate) fn next_logits(&self, contexts: &[&[u8]]) -> Vec<[f32; 256]> {
        contexts.iter().map(|context| self.table[usize::from(context.last().copied().unwrap_or(b'\n'))]).collect()
    }

    /// Floating-point operations of one token's forward pass.
    pub(crate) fn forward_flops_per_token(&self) -> u64 {
        2 * 256 * 256
    }
}

/// Samples one byte from `logits`, restricted to printable ASCII and `'\n'`:
/// greedy at `temperature` 0, otherwise softmax at `temperature` within the
/// nucleus `top_p`; `rng` gives uniform numbers in `[0, 1)`.
pub(crate) fn sample_printable(logits: &[f32; 256], temperature: f32, top_p: f32, rng: &mut impl FnMut() -> f32) -> u8 {
    let allowed = |byte: usize| byte == usize::from(b'\n') || (0x20..0x7f).contains(&byte);
    let mut candidates: Vec<(u8, f32)> = (0..256)
        .filter(|&byte| allowed(byte))
        .map(|byte| (u8::try_from(byte).unwrap_or(b' '), if logits[byte].is_finite() { logits[byte] } else { -1e30 }))
        .collect();
    candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
    if temperature <= 0.0 || !temperature.is_finite() {
        return candidates[0].0;
    }
    let top = candidates[0].1;
    let mut weights: Vec<f32> = candidates.iter().map(|(_, logit)| ((logit - top) / temperature).exp()).collect();
    let total: f32 = weights.iter().sum();
    let mut kept = 0.0;
    let mut cut = weights.len();
    for (i, weight) in weights.iter_mut().enumerate() {
        *weight /= total;
        kept += *weight;
        if kept >= top_p.clamp(0.0, 1.0) {
            cut = i + 1;
            break;
        }
    }
    let nucleus = &weights[..cut];
    let mass: f32 = nucleus.iter().sum();
    let mut draw = rng().clamp(0.0, 1.0) * mass;
    for (i, weight) in nucleus.iter().enumerate() {
        if draw < *weight {
            return candidates[i].0;
        }
        draw -= weight;
    }
    candidates[cut - 1].0
}
