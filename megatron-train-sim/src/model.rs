//! The model, its data and its optimizer: a stack of layers trained to
//! imitate a fixed random "teacher" on synthetic inputs.
//!
//! # Model
//!
//! `--num-layers` layers of width `--hidden-size`, mean squared error
//! against the teacher's output. Every token of every sample is one row, so
//! a microbatch is a `(micro_batch_size × seq_length) × hidden_size` matrix.
//! Each layer has two sub-blocks, as a transformer layer has:
//!
//! - a **token mixer** that moves information along the sequence, the only
//!   place where tokens of one sample meet. In a transformer layer (`*` in
//!   `--hybrid-override-pattern`, the default) it is "self-attention-like":
//!   each token becomes `0.9·x_t + 0.1·mean(x_0..=x_t)`, a residual plus
//!   attention with uniform causal weights (no parameters). In a
//!   Mamba layer (`M`) it is a "Mamba mixer": a causal exponential scan
//!   `y_t = a·y_(t-1) + (1-a)·x_t` per feature (a fixed-decay selective
//!   scan), followed by the layer's projection inside the mixer;
//! - a dense **MLP** sub-block `tanh(m·W + b)` (no `tanh` on the model's
//!   last layer), the only parameters of the layer.
//!
//! The mixers are parameter-free and linear, so every layout computes them
//! alike; the teacher's targets are `tanh(mix(x)·A)` with the transformer
//! mixer, so the student can fit them.
//!
//! Pipeline parallelism gives each stage `num_layers / PP` consecutive
//! layers. Tensor parallelism splits each layer's weight by output columns:
//! a tensor-parallel rank computes its columns, the ranks all-gather the
//! full output, and in the backward pass each rank's input-gradient share
//! is all-reduced. Parameters are generated per layer from the seed and
//! then sliced, so every layout starts from the same model, and the data of
//! a sample depend only on the seed and the sample's global index, so every
//! layout trains on the same data in the same order.
//!
//! # FLOPs
//!
//! A dense layer costs `2·h²` FLOPs per token forward and `4·h²` backward, so
//! one iteration costs `6 × parameters × tokens` (tokens = global batch ×
//! sequence length), the usual estimate; biases are counted in the
//! parameters.

use crate::device::Device;

/// SplitMix64: a small, good, seedable generator (data and initialisation
/// must not depend on a crate's algorithm changing between versions).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for the stream `(seed, stream, index)`.
    pub(crate) fn new(seed: u64, stream: u64, index: u64) -> Rng {
        let mut rng =
            Rng(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
        rng.next_u64();
        rng
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`.
    pub(crate) fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1_u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Random streams.
mod stream {
    pub(super) const WEIGHTS: u64 = 1;
    pub(super) const TEACHER: u64 = 2;
    pub(super) const TRAIN: u64 = 3;
    pub(super) const EVAL: u64 = 4;
}

/// Which data set a sample comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// Training samples (index = iteration × global batch + position).
    Train,
    /// Validation samples.
    Eval,
}

/// The synthetic data: inputs from the seed, targets from the teacher.
#[derive(Debug)]
pub(crate) struct Data {
    seed: u64,
    hidden: usize,
    seq: usize,
    /// The teacher's weight (`h×h`), only where targets are needed.
    teacher: Option<Vec<f32>>,
}

impl Data {
    /// The data of a run; `with_targets` on the last pipeline stage.
    pub(crate) fn new(seed: u64, hidden: usize, seq: usize, with_targets: bool) -> Data {
        let teacher = with_targets.then(|| {
            let scale = (3.0 / hidden as f32).sqrt() * 1.5;
            let mut rng = Rng::new(seed, stream::TEACHER, 0);
            (0..hidden * hidden).map(|_| rng.uniform() * scale).collect()
        });
        Data { seed, hidden, seq, teacher }
    }

    /// The inputs of samples `first..first + count` (rows: samples × tokens).
    pub(crate) fn inputs(&self, split: Split, first: u64, count: u64) -> Vec<f32> {
        let stream = match split {
            Split::Train => stream::TRAIN,
            Split::Eval => stream::EVAL,
        };
        let per_sample = self.seq * self.hidden;
        let mut out = Vec::with_capacity(per_sample * count as usize);
        for sample in first..first + count {
            let mut rng = Rng::new(self.seed, stream, sample);
            out.extend((0..per_sample).map(|_| rng.uniform()));
        }
        out
    }

    /// The teacher's outputs for `inputs` (`tanh(mix(x)·A)`, with the
    /// transformer mixer).
    pub(crate) fn targets(&self, device: &dyn Device, inputs: &[f32]) -> Vec<f32> {
        let teacher = self.teacher.as_deref().unwrap_or(&[]);
        let rows = inputs.len() / self.hidden;
        let mut mixed = inputs.to_vec();
        causal_mix(&mut mixed, self.hidden, self.seq);
        let mut out = vec![0.0; rows * self.hidden];
        device.matmul(&mixed, teacher, rows, self.hidden, self.hidden, &mut out);
        out.iter_mut().for_each(|v| *v = v.tanh());
        out
    }
}

/// What mixes the tokens of a layer (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LayerKind {
    /// A transformer layer: self-attention-like mixer, then the MLP.
    Transformer,
    /// A Mamba layer: a causal scan and the projection, both in the mixer.
    Mamba,
}

impl LayerKind {
    /// The kinds of `num_layers` layers from Megatron's
    /// `--hybrid-override-pattern` (`M` Mamba, `*` transformer; `None`:
    /// all transformer). The pattern is validated by the command line.
    pub(crate) fn from_pattern(pattern: Option<&str>, num_layers: u32) -> Vec<LayerKind> {
        match pattern {
            Some(p) => p.chars().map(|c| if c == 'M' { LayerKind::Mamba } else { LayerKind::Transformer }).collect(),
            None => vec![LayerKind::Transformer; num_layers as usize],
        }
    }
}

/// The share of the causal mean in the transformer mixer's output (small,
/// so that the deep student can still fit the one-mixer teacher).
const MIX: f32 = 0.1;

/// The Mamba mixer's decay `a`.
const SCAN_DECAY: f32 = 0.5;

/// The transformer mixer, in place: each token of each sample (rows of
/// `hidden` values, `seq` rows per sample) becomes
/// `(1 - MIX)·x_t + MIX·mean(x_0..=x_t)`.
pub(crate) fn causal_mix(values: &mut [f32], hidden: usize, seq: usize) {
    let mut sum = vec![0.0_f32; hidden];
    for sample in values.chunks_exact_mut(hidden * seq) {
        sum.fill(0.0);
        for (t, row) in sample.chunks_exact_mut(hidden).enumerate() {
            let count = (t + 1) as f32;
            for (v, s) in row.iter_mut().zip(&mut sum) {
                *s += *v;
                *v = (1.0 - MIX) * *v + MIX * *s / count;
            }
        }
    }
}

/// The transpose of [`causal_mix`] (its backward pass), in place:
/// `g_x_s = (1 - MIX)·g_s + MIX·Σ_(t ≥ s) g_t / (t+1)`.
fn causal_mix_backward(grads: &mut [f32], hidden: usize, seq: usize) {
    let mut tail = vec![0.0_f32; hidden];
    for sample in grads.chunks_exact_mut(hidden * seq) {
        tail.fill(0.0);
        for (t, row) in sample.chunks_exact_mut(hidden).enumerate().rev() {
            let count = (t + 1) as f32;
            for (g, acc) in row.iter_mut().zip(&mut tail) {
                *acc += *g / count;
                *g = (1.0 - MIX) * *g + MIX * *acc;
            }
        }
    }
}

/// The Mamba mixer's scan, in place: `y_t = a·y_(t-1) + (1-a)·x_t` per
/// feature, restarting at each sample.
fn scan(values: &mut [f32], hidden: usize, seq: usize) {
    let mut state = vec![0.0_f32; hidden];
    for sample in values.chunks_exact_mut(hidden * seq) {
        state.fill(0.0);
        for row in sample.chunks_exact_mut(hidden) {
            for (v, y) in row.iter_mut().zip(&mut state) {
                *y = SCAN_DECAY * *y + (1.0 - SCAN_DECAY) * *v;
                *v = *y;
            }
        }
    }
}

/// The transpose of [`scan`]: `G_t = g_t + a·G_(t+1)`, `g_x_t = (1-a)·G_t`.
fn scan_backward(grads: &mut [f32], hidden: usize, seq: usize) {
    let mut carry = vec![0.0_f32; hidden];
    for sample in grads.chunks_exact_mut(hidden * seq) {
        carry.fill(0.0);
        for row in sample.chunks_exact_mut(hidden).rev() {
            for (g, c) in row.iter_mut().zip(&mut carry) {
                *c = *g + SCAN_DECAY * *c;
                *g = (1.0 - SCAN_DECAY) * *c;
            }
        }
    }
}

/// One layer's place in this rank's flat parameter vector.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerSlot {
    /// The layer's number in the whole model (1-based, as Megatron counts).
    pub(crate) number: u32,
    /// What mixes its tokens.
    pub(crate) kind: LayerKind,
    /// Whether `tanh` follows it (every layer but the model's last).
    pub(crate) activation: bool,
    /// Offset of the weight (`h × c`, row-major) in the parameters.
    weight: usize,
    /// Offset of the bias (`c`).
    bias: usize,
}

/// What one layer kept from the forward pass for the backward pass.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Saved {
    /// The MLP's input (the mixer's output).
    pub(crate) input: Vec<f32>,
    /// The layer's output (after the activation, all columns).
    pub(crate) output: Vec<f32>,
}

/// A microbatch's saved activations moved out of the working set
/// (`--fine-grained-activation-offloading`): one contiguous side buffer and
/// the lengths to cut it back into [`Saved`] values.
#[derive(Debug)]
pub(crate) struct Offloaded {
    buffer: Vec<f32>,
    lengths: Vec<(usize, usize)>,
}

impl Offloaded {
    /// Copies `saved` into one side buffer and frees the originals.
    pub(crate) fn offload(saved: Vec<Saved>) -> Offloaded {
        let total = saved.iter().map(|s| s.input.len() + s.output.len()).sum();
        let mut buffer = Vec::with_capacity(total);
        let mut lengths = Vec::with_capacity(saved.len());
        for layer in saved {
            buffer.extend_from_slice(&layer.input);
            buffer.extend_from_slice(&layer.output);
            lengths.push((layer.input.len(), layer.output.len()));
        }
        Offloaded { buffer, lengths }
    }

    /// Copies the activations back out of the side buffer.
    pub(crate) fn reload(self) -> Vec<Saved> {
        let mut at = 0;
        self.lengths
            .iter()
            .map(|&(input, output)| {
                let layer = Saved {
                    input: self.buffer[at..at + input].to_vec(),
                    output: self.buffer[at + input..at + input + output].to_vec(),
                };
                at += input + output;
                layer
            })
            .collect()
    }
}

/// This rank's share of the model: its stage's layers, its columns of each.
#[derive(Debug)]
pub(crate) struct Stage {
    /// Model width `h`.
    pub(crate) hidden: usize,
    /// Tokens per sample (the mixers work along them).
    pub(crate) seq: usize,
    /// Columns per tensor-parallel rank `c = h / TP`.
    pub(crate) columns: usize,
    /// This rank's tensor-parallel index.
    pub(crate) tp_rank: usize,
    /// The layers of this stage.
    pub(crate) layers: Vec<LayerSlot>,
    /// All parameters of this rank, flat.
    pub(crate) params: Vec<f32>,
    /// Their gradients.
    pub(crate) grads: Vec<f32>,
}

impl Stage {
    /// The layers of pipeline stage `stage` (of `stages`), tensor-parallel
    /// rank `tp_rank` of `tp`, initialised from `seed`; `kinds` has one
    /// entry per layer of the whole model.
    #[expect(clippy::too_many_arguments, reason = "the layout coordinates are plain numbers")]
    pub(crate) fn new(
        seed: u64,
        kinds: &[LayerKind],
        hidden: usize,
        seq: usize,
        stages: u32,
        stage: u32,
        tp: u32,
        tp_rank: u32,
    ) -> Stage {
        let num_layers = kinds.len() as u32;
        let columns = hidden / tp as usize;
        let per_stage = num_layers / stages;
        let scale = (3.0 / hidden as f32).sqrt();
        let mut params = Vec::new();
        let mut layers = Vec::new();
        for local in 0..per_stage {
            let number = stage * per_stage + local + 1;
            let mut rng = Rng::new(seed, stream::WEIGHTS, u64::from(number));
            let full: Vec<f32> = (0..hidden * hidden).map(|_| rng.uniform() * scale).collect();
            let weight = params.len();
            for row in 0..hidden {
                let start = row * hidden + tp_rank as usize * columns;
                params.extend_from_slice(&full[start..start + columns]);
            }
            let bias = params.len();
            params.extend(std::iter::repeat_n(0.0, columns));
            let kind = kinds[number as usize - 1];
            layers.push(LayerSlot { number, kind, activation: number < num_layers, weight, bias });
        }
        let grads = vec![0.0; params.len()];
        Stage { hidden, seq, columns, tp_rank: tp_rank as usize, layers, params, grads }
    }

    /// The number of parameters of the whole model.
    pub(crate) fn model_parameters(num_layers: u32, hidden: u64) -> u64 {
        u64::from(num_layers) * (hidden * hidden + hidden)
    }

    /// Layer `index`'s token mixer on `input` (rows × h): the
    /// self-attention-like mixer of a transformer layer or the scan of a
    /// Mamba layer. The same on every tensor-parallel rank.
    pub(crate) fn mix_forward(&self, index: usize, mut input: Vec<f32>) -> Vec<f32> {
        match self.layers[index].kind {
            LayerKind::Transformer => causal_mix(&mut input, self.hidden, self.seq),
            LayerKind::Mamba => scan(&mut input, self.hidden, self.seq),
        }
        input
    }

    /// Layer `index`'s whole forward pass (mixer, then dense part).
    #[cfg(test)]
    pub(crate) fn layer_forward<E>(
        &self,
        device: &dyn Device,
        index: usize,
        input: Vec<f32>,
        gather: impl FnOnce(&[f32]) -> Result<Vec<f32>, E>,
    ) -> Result<(Vec<f32>, Saved), E> {
        let mixed = self.mix_forward(index, input);
        self.dense_forward(device, index, mixed, gather)
    }

    /// Layer `index`'s dense part on the mixer's output `input` (rows × h):
    /// this rank's columns, completed by `gather` (the tensor-parallel
    /// all-gather, which returns every rank's columns concatenated rank by
    /// rank).
    pub(crate) fn dense_forward<E>(
        &self,
        device: &dyn Device,
        index: usize,
        input: Vec<f32>,
        gather: impl FnOnce(&[f32]) -> Result<Vec<f32>, E>,
    ) -> Result<(Vec<f32>, Saved), E> {
        let slot = self.layers[index];
        let (h, c) = (self.hidden, self.columns);
        let rows = input.len() / h;
        let mut mine = vec![0.0; rows * c];
        device.matmul(&input, &self.params[slot.weight..slot.weight + h * c], rows, h, c, &mut mine);
        let bias = &self.params[slot.bias..slot.bias + c];
        for row in mine.chunks_exact_mut(c) {
            row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
        }
        let output = if c == h {
            mine
        } else {
            let chunks = gather(&mine)?;
            let parts = h / c;
            let mut full = vec![0.0; rows * h];
            for part in 0..parts {
                let chunk = &chunks[part * rows * c..(part + 1) * rows * c];
                for row in 0..rows {
                    full[row * h + part * c..row * h + (part + 1) * c].copy_from_slice(&chunk[row * c..(row + 1) * c]);
                }
            }
            full
        };
        let mut output = output;
        if slot.activation {
            output.iter_mut().for_each(|v| *v = v.tanh());
        }
        Ok((output.clone(), Saved { input, output }))
    }

    /// Layer `index`'s backward pass (dense part, then mixer): accumulates this rank's weight and
    /// bias gradients and returns the input gradient, completed by `reduce`
    /// (the tensor-parallel all-reduce of the partial input gradients).
    pub(crate) fn layer_backward<E>(
        &mut self,
        device: &dyn Device,
        index: usize,
        saved: &Saved,
        mut grad_output: Vec<f32>,
        reduce: impl FnOnce(&mut [f32]) -> Result<(), E>,
    ) -> Result<Vec<f32>, E> {
        let slot = self.layers[index];
        let (h, c) = (self.hidden, self.columns);
        let rows = saved.input.len() / h;
        if slot.activation {
            grad_output.iter_mut().zip(&saved.output).for_each(|(g, y)| *g *= 1.0 - y * y);
        }
        let mut mine = vec![0.0; rows * c];
        for row in 0..rows {
            let start = row * h + self.tp_rank * c;
            mine[row * c..(row + 1) * c].copy_from_slice(&grad_output[start..start + c]);
        }
        device.matmul_at_b_acc(&saved.input, &mine, rows, h, c, &mut self.grads[slot.weight..slot.weight + h * c]);
        let bias_grad = &mut self.grads[slot.bias..slot.bias + c];
        for row in mine.chunks_exact(c) {
            bias_grad.iter_mut().zip(row).for_each(|(g, v)| *g += v);
        }
        let mut grad_input = vec![0.0; rows * h];
        device.matmul_a_bt(&mine, &self.params[slot.weight..slot.weight + h * c], rows, c, h, &mut grad_input);
        if c != h {
            reduce(&mut grad_input)?;
        }
        match slot.kind {
            LayerKind::Transformer => causal_mix_backward(&mut grad_input, h, self.seq),
            LayerKind::Mamba => scan_backward(&mut grad_input, h, self.seq),
        }
        Ok(grad_input)
    }
}

/// Mean-squared-error pieces for one microbatch: the sum of squared errors
/// and the output gradient scaled by `1 / normaliser` (the element count of
/// the whole global batch), so that gradients summed over microbatches and
/// data-parallel ranks are those of the global mean.
pub(crate) fn mse(output: &[f32], target: &[f32], normaliser: f64) -> (f64, Vec<f32>) {
    let scale = (2.0 / normaliser) as f32;
    let mut sum = 0.0_f64;
    let grad = output
        .iter()
        .zip(target)
        .map(|(o, t)| {
            let d = o - t;
            sum += f64::from(d) * f64::from(d);
            d * scale
        })
        .collect();
    (sum, grad)
}

/// The learning rate of 1-based iteration `step` (Megatron's
/// `OptimizerParamScheduler`, in iterations): linear warm-up, then the
/// decay style down to `min_lr` at `decay_iters`.
pub(crate) fn learning_rate(
    step: u64,
    lr: f64,
    min_lr: f64,
    warmup: u64,
    decay_iters: u64,
    style: crate::cli::DecayStyle,
) -> f64 {
    use crate::cli::DecayStyle;
    if warmup > 0 && step <= warmup {
        return lr * step as f64 / warmup as f64;
    }
    if style == DecayStyle::Constant {
        return lr;
    }
    if step > decay_iters {
        return min_lr;
    }
    let span = decay_iters.saturating_sub(warmup).max(1) as f64;
    let ratio = ((step - warmup) as f64 / span).clamp(0.0, 1.0);
    let coefficient = match style {
        DecayStyle::Linear => 1.0 - ratio,
        _ => 0.5 * ((std::f64::consts::PI * ratio).cos() + 1.0),
    };
    min_lr + coefficient * (lr - min_lr)
}

/// Adam (or SGD) state for a flat parameter vector.
#[derive(Clone, Debug)]
pub(crate) struct Optimizer {
    /// Adam when true, SGD otherwise.
    pub(crate) adam: bool,
    /// Updates applied.
    pub(crate) steps: u64,
    /// First moments.
    pub(crate) m: Vec<f32>,
    /// Second moments.
    pub(crate) v: Vec<f32>,
}

impl Optimizer {
    /// Fresh state for `len` parameters.
    pub(crate) fn new(adam: bool, len: usize) -> Optimizer {
        let moments = if adam { len } else { 0 };
        Optimizer { adam, steps: 0, m: vec![0.0; moments], v: vec![0.0; moments] }
    }

    /// One update with gradients already scaled (clipped) by `grad_scale`.
    pub(crate) fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f64, grad_scale: f32) {
        self.steps += 1;
        if !self.adam {
            let lr = lr as f32;
            params.iter_mut().zip(grads).for_each(|(p, g)| *p -= lr * g * grad_scale);
            return;
        }
        let (beta1, beta2, eps) = (0.9_f32, 0.999_f32, 1e-8_f32);
        let t = self.steps as i32;
        let correction1 = 1.0 - beta1.powi(t);
        let correction2 = 1.0 - beta2.powi(t);
        let lr = lr as f32;
        for (((p, g), m), v) in params.iter_mut().zip(grads).zip(&mut self.m).zip(&mut self.v) {
            let g = g * grad_scale;
            *m = beta1 * *m + (1.0 - beta1) * g;
            *v = beta2 * *v + (1.0 - beta2) * g * g;
            *p -= lr * (*m / correction1) / ((*v / correction2).sqrt() + eps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::DecayStyle;
    use crate::device::Cpu;

    #[test]
    fn schedule_warms_up_then_decays_to_the_minimum() {
        let lr = |step, style| learning_rate(step, 1.0, 0.1, 4, 20, style);
        assert_eq!(lr(1, DecayStyle::Cosine), 0.25);
        assert_eq!(lr(4, DecayStyle::Cosine), 1.0);
        assert!((lr(12, DecayStyle::Cosine) - 0.55).abs() < 1e-9);
        assert!((lr(12, DecayStyle::Linear) - 0.55).abs() < 1e-9);
        assert!((lr(20, DecayStyle::Cosine) - 0.1).abs() < 1e-9);
        assert_eq!(lr(30, DecayStyle::Linear), 0.1);
        assert_eq!(lr(30, DecayStyle::Constant), 1.0);
    }

    #[test]
    fn column_split_layers_compute_what_the_whole_layer_computes() {
        let cpu = Cpu;
        let hidden = 8;
        let kinds = [LayerKind::Transformer; 2];
        let whole = Stage::new(7, &kinds, hidden, 3, 1, 0, 1, 0);
        let halves = [Stage::new(7, &kinds, hidden, 3, 1, 0, 2, 0), Stage::new(7, &kinds, hidden, 3, 1, 0, 2, 1)];
        let input: Vec<f32> = (0..3 * hidden).map(|i| (i as f32 * 0.37).sin()).collect();
        let never = |_: &[f32]| -> Result<Vec<f32>, ()> { unreachable!("no gather without tensor parallelism") };
        let (expected, _) = whole.layer_forward(&cpu, 0, input.clone(), never).unwrap();
        // Rank 0 gathers its own columns and rank 1's.
        let (other, _) = {
            let local_only = |mine: &[f32]| -> Result<Vec<f32>, ()> { Ok(mine.to_vec()) };
            let rows = 3;
            let c = hidden / 2;
            let mut second = vec![0.0; rows * c];
            let _ = local_only;
            let mixed = halves[1].mix_forward(0, input.clone());
            cpu.matmul(&mixed, &halves[1].params[..hidden * c], rows, hidden, c, &mut second);
            (second, ())
        };
        let (got, _) = halves[0]
            .layer_forward(&cpu, 0, input, |mine: &[f32]| -> Result<Vec<f32>, ()> {
                Ok(mine.iter().chain(&other).copied().collect())
            })
            .unwrap();
        for (a, b) in got.iter().zip(&expected) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    /// `<mix(x), g> == <x, mixᵀ(g)>` for both mixers: the backward passes
    /// are the transposes of the forward passes.
    #[test]
    fn mixer_backward_passes_are_the_transposes_of_their_forward_passes() {
        let (hidden, seq) = (3, 4);
        let x: Vec<f32> = (0..2 * hidden * seq).map(|i| ((i * 7) % 11) as f32 * 0.1 - 0.5).collect();
        let g: Vec<f32> = (0..2 * hidden * seq).map(|i| ((i * 5) % 13) as f32 * 0.1 - 0.6).collect();
        type Pass = fn(&mut [f32], usize, usize);
        let pairs: [(Pass, Pass); 2] = [(causal_mix, causal_mix_backward), (scan, scan_backward)];
        for (forward, backward) in pairs {
            let mut fx = x.clone();
            forward(&mut fx, hidden, seq);
            let mut bg = g.clone();
            backward(&mut bg, hidden, seq);
            let left: f32 = fx.iter().zip(&g).map(|(a, b)| a * b).sum();
            let right: f32 = x.iter().zip(&bg).map(|(a, b)| a * b).sum();
            assert!((left - right).abs() < 1e-4, "{left} vs {right}");
            assert_ne!(fx, x, "the mixer changed nothing");
        }
    }

    #[test]
    fn offloaded_activations_come_back_unchanged() {
        let saved = vec![
            Saved { input: vec![1.0, 2.0], output: vec![3.0] },
            Saved { input: vec![4.0], output: vec![5.0, 6.0, 7.0] },
        ];
        assert_eq!(Offloaded::offload(saved.clone()).reload(), saved);
    }

    #[test]
    fn adam_moves_parameters_against_the_gradient() {
        let mut params = vec![1.0, -1.0];
        let mut optimizer = Optimizer::new(true, 2);
        optimizer.step(&mut params, &[0.5, -0.5], 0.1, 1.0);
        assert!(params[0] < 1.0 && params[1] > -1.0);
        assert_eq!(optimizer.steps, 1);
    }
}
