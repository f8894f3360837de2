//! The model and its optimizer: a byte-level causal language model.
//!
//! # Model
//!
//! The vocabulary is the 256 byte values. A sample is `--seq-length` bytes
//! of the synthetic corpus ([`crate::corpus`]) and the model predicts each
//! next byte: every position of every sample is one row, so a microbatch is
//! a `(micro_batch_size × seq_length)`-row matrix. The model is
//!
//! - an **embedding** (`256 × h`): the one-hot rows of the bytes times the
//!   embedding matrix, a matrix product on the device (a gather, computed
//!   as the product so that it runs where the other products run);
//! - `--num-layers` layers of width `--hidden-size`, each with two
//!   sub-blocks, as a transformer layer has:
//!   - a **token mixer** that moves information along the sequence, the
//!     only place where positions of one sample meet. In a transformer
//!     layer (`*` in `--hybrid-override-pattern`, the default) it is
//!     "self-attention-like": each position becomes
//!     `0.9·x_t + 0.1·mean(x_0..=x_t)`, a residual plus attention with
//!     uniform causal weights (no parameters). In a Mamba layer (`M`) it
//!     is a "Mamba mixer": a causal exponential scan
//!     `y_t = a·y_(t-1) + (1-a)·x_t` per feature (a fixed-decay selective
//!     scan), followed by the layer's projection inside the mixer;
//!   - a dense **MLP** sub-block `tanh(m·W + b)` (no `tanh` on the model's
//!     last layer), the only parameters of the layer;
//! - an **output projection** (`h × 256` and a bias) to the next byte's
//!   logits, and softmax cross-entropy in nats against the next byte,
//!   averaged over the global batch's positions: the `lm loss`.
//!
//! Both mixers are causal, so the logits at position `t` depend on bytes
//! `0..=t` only. They have no parameters, so what the model learns is
//! mostly short-range statistics (which byte follows which), enough to end
//! well below the corpus's single-byte entropy.
//!
//! Pipeline parallelism gives each stage `num_layers / PP` consecutive
//! layers, the embedding to the first stage and the output projection to
//! the last. Tensor parallelism splits every dense block by output columns
//! (the embedding's `h`, each layer's `h`, the projection's 256
//! vocabulary columns, as Megatron's vocabulary-parallel output layer): a
//! tensor-parallel rank computes its columns, the ranks all-gather the full
//! output, and in the backward pass each rank's input-gradient share is
//! all-reduced. Parameters are generated per block from the seed and then
//! sliced, so every layout starts from the same model, and the bytes of a
//! sample depend only on the seed and the sample's global index, so every
//! layout trains on the same data in the same order.
//!
//! # FLOPs
//!
//! A dense block of `k × n` costs `2·k·n` FLOPs per token forward and
//! `4·k·n` backward, so one iteration costs `6 × parameters × tokens`
//! (tokens = global batch × sequence length: bytes predicted), the usual
//! estimate, less `2 × 256·h` per token because the embedding needs no
//! input gradient; biases are counted in the parameters and the
//! parameter-free mixers not at all. One token of inference costs
//! `2 × parameters` ([`forward_flops_per_token`]).

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
        self.unit() * 2.0 - 1.0
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1_u64 << 24) as f32
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

/// Random streams.
pub(crate) mod stream {
    /// The layers' weights (index: the layer's number).
    pub(crate) const WEIGHTS: u64 = 1;
    /// The embedding.
    pub(crate) const EMBEDDING: u64 = 5;
    /// The output projection.
    pub(crate) const HEAD: u64 = 6;
    /// The corpus's grammar and text.
    pub(crate) const CORPUS: u64 = 7;
}

/// The vocabulary: every byte value.
pub(crate) const VOCAB: usize = 256;

/// Which data set a sample comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// Training samples (index = iteration × global batch + position).
    Train,
    /// Validation samples.
    Eval,
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

/// The share of the causal mean in the transformer mixer's output.
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

/// One dense block's place in this rank's flat parameter vector: `y =
/// x·W + b` with `W` of `inputs × outputs`, of which this rank holds
/// `columns` consecutive output columns (those of its tensor-parallel
/// index).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dense {
    /// Input width `k`.
    inputs: usize,
    /// Output width of the whole block `n`.
    outputs: usize,
    /// Output columns on this rank `n / TP`.
    columns: usize,
    /// Offset of this rank's weight columns (`k × columns`, row-major).
    weight: usize,
    /// Offset of this rank's bias share (`columns`), if the block has one.
    bias: Option<usize>,
    /// Whether `tanh` follows it.
    activation: bool,
}

/// One layer's place in this rank's flat parameter vector.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerSlot {
    /// The layer's number in the whole model (1-based, as Megatron counts).
    pub(crate) number: u32,
    /// What mixes its tokens.
    pub(crate) kind: LayerKind,
    /// Its MLP (`h × h`, `tanh` on every layer but the model's last).
    dense: Dense,
}

/// What one dense block kept from the forward pass for the backward pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Saved {
    /// The block's input (the mixer's output; the one-hot bytes for the
    /// embedding).
    pub(crate) input: Vec<f32>,
    /// The block's output after `tanh` (all columns); empty without `tanh`
    /// (the backward pass does not need it).
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

/// This rank's share of the model: the embedding on the first pipeline
/// stage, its stage's layers, the output projection on the last stage, each
/// by its tensor-parallel columns.
#[derive(Debug)]
pub(crate) struct Stage {
    /// Model width `h`.
    pub(crate) hidden: usize,
    /// Tokens per sample (the mixers work along them).
    pub(crate) seq: usize,
    /// This rank's tensor-parallel index.
    pub(crate) tp_rank: usize,
    /// The embedding (`256 × h`, no bias), on the first stage only.
    pub(crate) embedding: Option<Dense>,
    /// The layers of this stage.
    pub(crate) layers: Vec<LayerSlot>,
    /// The output projection (`h × 256` and a bias), on the last stage only.
    pub(crate) head: Option<Dense>,
    /// All parameters of this rank, flat.
    pub(crate) params: Vec<f32>,
    /// Their gradients.
    pub(crate) grads: Vec<f32>,
}

/// Appends this rank's columns of the `inputs × outputs` matrix `full`
/// (and a zero bias share) to `params`; the block's slot.
fn push_dense(params: &mut Vec<f32>, full: &[f32], shape: (usize, usize), tp: (usize, usize), bias: bool) -> Dense {
    let ((inputs, outputs), (tp, tp_rank)) = (shape, tp);
    let columns = outputs / tp;
    let weight = params.len();
    for row in 0..inputs {
        let start = row * outputs + tp_rank * columns;
        params.extend_from_slice(&full[start..start + columns]);
    }
    let bias = bias.then(|| {
        let at = params.len();
        params.extend(std::iter::repeat_n(0.0, columns));
        at
    });
    Dense { inputs, outputs, columns, weight, bias, activation: false }
}

/// `count` values uniform in `[-scale, scale)` from stream `(seed, stream, index)`.
fn uniform_matrix(seed: u64, stream: u64, index: u64, count: usize, scale: f32) -> Vec<f32> {
    let mut rng = Rng::new(seed, stream, index);
    (0..count).map(|_| rng.uniform() * scale).collect()
}

/// The output gradient columns of tensor-parallel rank `tp_rank` (`columns`
/// wide) out of full rows of `outputs`.
fn my_columns(full: &[f32], outputs: usize, columns: usize, tp_rank: usize) -> Vec<f32> {
    let rows = full.len() / outputs;
    let mut mine = vec![0.0; rows * columns];
    for row in 0..rows {
        let start = row * outputs + tp_rank * columns;
        mine[row * columns..(row + 1) * columns].copy_from_slice(&full[start..start + columns]);
    }
    mine
}

impl Stage {
    /// The model of pipeline stage `stage` (of `stages`), tensor-parallel
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
        let split = (tp as usize, tp_rank as usize);
        let per_stage = num_layers / stages;
        let mut params = Vec::new();
        let embedding = (stage == 0 && !kinds.is_empty()).then(|| {
            let full = uniform_matrix(seed, stream::EMBEDDING, 0, VOCAB * hidden, 1.0);
            push_dense(&mut params, &full, (VOCAB, hidden), split, false)
        });
        let scale = (3.0 / hidden as f32).sqrt();
        let mut layers = Vec::new();
        for local in 0..per_stage {
            let number = stage * per_stage + local + 1;
            let full = uniform_matrix(seed, stream::WEIGHTS, u64::from(number), hidden * hidden, scale);
            let mut dense = push_dense(&mut params, &full, (hidden, hidden), split, true);
            dense.activation = number < num_layers;
            layers.push(LayerSlot { number, kind: kinds[number as usize - 1], dense });
        }
        let head = (stage + 1 == stages && !kinds.is_empty()).then(|| {
            let full = uniform_matrix(seed, stream::HEAD, 0, hidden * VOCAB, scale);
            push_dense(&mut params, &full, (hidden, VOCAB), split, true)
        });
        let grads = vec![0.0; params.len()];
        Stage { hidden, seq, tp_rank: tp_rank as usize, embedding, layers, head, params, grads }
    }

    /// Every dense block of this rank with a key naming it in the whole
    /// model (0: the embedding, a layer's number, `u32::MAX`: the output
    /// projection), in parameter order.
    fn blocks(&self) -> impl Iterator<Item = (u32, Dense)> + '_ {
        let layers = self.layers.iter().map(|l| (l.number, l.dense));
        self.embedding.map(|d| (0, d)).into_iter().chain(layers).chain(self.head.map(|d| (u32::MAX, d)))
    }

    /// Copies the parameters `shard_params` of `shard` (another layout's
    /// rank of the same model) into this stage's, which holds every column
    /// of the blocks they share: merges tensor- and pipeline-parallel
    /// shards into one model.
    pub(crate) fn absorb(&mut self, shard: &Stage, shard_params: &[f32]) {
        for (key, theirs) in shard.blocks() {
            let Some((_, mine)) = self.blocks().find(|(k, _)| *k == key) else { continue };
            let offset = shard.tp_rank * theirs.columns;
            for row in 0..theirs.inputs {
                let from = theirs.weight + row * theirs.columns;
                let to = mine.weight + row * mine.columns + offset;
                self.params[to..to + theirs.columns].copy_from_slice(&shard_params[from..from + theirs.columns]);
            }
            if let (Some(from), Some(to)) = (theirs.bias, mine.bias) {
                let to = to + offset;
                self.params[to..to + theirs.columns].copy_from_slice(&shard_params[from..from + theirs.columns]);
            }
        }
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

    /// Layer `index`'s dense part on the mixer's output `input` (rows × h).
    pub(crate) fn dense_forward<E>(
        &self,
        device: &dyn Device,
        index: usize,
        input: Vec<f32>,
        gather: impl FnOnce(&[f32]) -> Result<Vec<f32>, E>,
    ) -> Result<(Vec<f32>, Saved), E> {
        self.block_forward(device, self.layers[index].dense, input, gather)
    }

    /// The embedding of `tokens` (the first stage's input): the one-hot
    /// rows times the embedding matrix, a product on the device.
    pub(crate) fn embed_forward<E>(
        &self,
        device: &dyn Device,
        tokens: &[u8],
        gather: impl FnOnce(&[f32]) -> Result<Vec<f32>, E>,
    ) -> Result<(Vec<f32>, Saved), E> {
        let Some(embedding) = self.embedding else { return Ok((Vec::new(), Saved::default())) };
        let mut one_hot = vec![0.0; tokens.len() * VOCAB];
        for (row, &token) in tokens.iter().enumerate() {
            one_hot[row * VOCAB + usize::from(token)] = 1.0;
        }
        self.block_forward(device, embedding, one_hot, gather)
    }

    /// The output projection of the last layer's output `input`: the
    /// logits (rows × 256), all columns.
    pub(crate) fn head_forward<E>(
        &self,
        device: &dyn Device,
        input: Vec<f32>,
        gather: impl FnOnce(&[f32]) -> Result<Vec<f32>, E>,
    ) -> Result<(Vec<f32>, Saved), E> {
        let Some(head) = self.head else { return Ok((input, Saved::default())) };
        self.block_forward(device, head, input, gather)
    }

    /// A dense block on `input` (rows × inputs): this rank's columns,
    /// completed by `gather` (the tensor-parallel all-gather, which returns
    /// every rank's columns concatenated rank by rank).
    fn block_forward<E>(
        &self,
        device: &dyn Device,
        block: Dense,
        input: Vec<f32>,
        gather: impl FnOnce(&[f32]) -> Result<Vec<f32>, E>,
    ) -> Result<(Vec<f32>, Saved), E> {
        let (k, n, c) = (block.inputs, block.outputs, block.columns);
        let rows = input.len() / k;
        let mut mine = vec![0.0; rows * c];
        device.matmul(&input, &self.params[block.weight..block.weight + k * c], rows, k, c, &mut mine);
        if let Some(at) = block.bias {
            let bias = &self.params[at..at + c];
            for row in mine.chunks_exact_mut(c) {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
        }
        let mut output = if c == n {
            mine
        } else {
            let chunks = gather(&mine)?;
            let mut full = vec![0.0; rows * n];
            for part in 0..n / c {
                let chunk = &chunks[part * rows * c..(part + 1) * rows * c];
                for row in 0..rows {
                    full[row * n + part * c..row * n + (part + 1) * c].copy_from_slice(&chunk[row * c..(row + 1) * c]);
                }
            }
            full
        };
        let kept = if block.activation {
            output.iter_mut().for_each(|v| *v = v.tanh());
            output.clone()
        } else {
            Vec::new()
        };
        Ok((output, Saved { input, output: kept }))
    }

    /// Layer `index`'s backward pass (dense part, then mixer): accumulates this rank's weight and
    /// bias gradients and returns the input gradient, completed by `reduce`
    /// (the tensor-parallel all-reduce of the partial input gradients).
    pub(crate) fn layer_backward<E>(
        &mut self,
        device: &dyn Device,
        index: usize,
        saved: &Saved,
        grad_output: Vec<f32>,
        reduce: impl FnOnce(&mut [f32]) -> Result<(), E>,
    ) -> Result<Vec<f32>, E> {
        let slot = self.layers[index];
        let mut grad_input = self.block_backward(device, slot.dense, saved, grad_output, Some(reduce))?;
        match slot.kind {
            LayerKind::Transformer => causal_mix_backward(&mut grad_input, self.hidden, self.seq),
            LayerKind::Mamba => scan_backward(&mut grad_input, self.hidden, self.seq),
        }
        Ok(grad_input)
    }

    /// The output projection's backward pass: its gradients, and the
    /// gradient of the last layer's output.
    pub(crate) fn head_backward<E>(
        &mut self,
        device: &dyn Device,
        saved: &Saved,
        grad_logits: Vec<f32>,
        reduce: impl FnOnce(&mut [f32]) -> Result<(), E>,
    ) -> Result<Vec<f32>, E> {
        let Some(head) = self.head else { return Ok(grad_logits) };
        self.block_backward(device, head, saved, grad_logits, Some(reduce))
    }

    /// The embedding's backward pass: its weight gradient (the bytes'
    /// rows); nothing flows further back.
    pub(crate) fn embed_backward(&mut self, device: &dyn Device, saved: &Saved, grad_output: Vec<f32>) {
        if let Some(embedding) = self.embedding {
            let _ = self.block_backward(device, embedding, saved, grad_output, None::<NoReduce>);
        }
    }

    /// A dense block's backward pass: accumulates this rank's weight and
    /// bias gradients; with `reduce`, returns the input gradient completed
    /// by it (the tensor-parallel all-reduce of the partial input
    /// gradients), else nothing.
    fn block_backward<E>(
        &mut self,
        device: &dyn Device,
        block: Dense,
        saved: &Saved,
        mut grad_output: Vec<f32>,
        reduce: Option<impl FnOnce(&mut [f32]) -> Result<(), E>>,
    ) -> Result<Vec<f32>, E> {
        let (k, n, c) = (block.inputs, block.outputs, block.columns);
        let rows = saved.input.len() / k;
        if block.activation {
            grad_output.iter_mut().zip(&saved.output).for_each(|(g, y)| *g *= 1.0 - y * y);
        }
        let mine = if c == n { grad_output } else { my_columns(&grad_output, n, c, self.tp_rank) };
        device.matmul_at_b_acc(&saved.input, &mine, rows, k, c, &mut self.grads[block.weight..block.weight + k * c]);
        if let Some(at) = block.bias {
            let bias_grad = &mut self.grads[at..at + c];
            for row in mine.chunks_exact(c) {
                bias_grad.iter_mut().zip(row).for_each(|(g, v)| *g += v);
            }
        }
        let Some(reduce) = reduce else { return Ok(Vec::new()) };
        let mut grad_input = vec![0.0; rows * k];
        device.matmul_a_bt(&mine, &self.params[block.weight..block.weight + k * c], rows, c, k, &mut grad_input);
        if c != n {
            reduce(&mut grad_input)?;
        }
        Ok(grad_input)
    }
}

/// No input gradient wanted (the embedding's input is bytes).
type NoReduce = fn(&mut [f32]) -> Result<(), ()>;

/// The parameters of the whole model: the embedding (`256·h`), each
/// layer's weight and bias (`h² + h`), the output projection (`256·h +
/// 256`).
pub(crate) fn model_parameters(num_layers: u32, hidden: u64) -> u64 {
    let vocab = VOCAB as u64;
    vocab * hidden + u64::from(num_layers) * (hidden * hidden + hidden) + hidden * vocab + vocab
}

/// Model FLOPs of one token forward: two per parameter (a multiply and an
/// add of each product; the embedding's one-hot product included).
pub(crate) fn forward_flops_per_token(num_layers: u32, hidden: u64) -> u64 {
    2 * model_parameters(num_layers, hidden)
}

/// Model FLOPs of one token trained: `6 × parameters` (forward, then the
/// input and weight gradients), except that the embedding has no input
/// gradient (`4 × 256·h`).
pub(crate) fn training_flops_per_token(num_layers: u32, hidden: u64) -> u64 {
    6 * model_parameters(num_layers, hidden) - 2 * VOCAB as u64 * hidden
}

/// Softmax cross-entropy (in nats) of `logits` (rows × 256) against the
/// next bytes `targets`: the sum over rows and the logits' gradient scaled
/// by `1 / normaliser` (the token count of the whole global batch), so
/// that gradients summed over microbatches and data-parallel ranks are
/// those of the global mean.
pub(crate) fn cross_entropy(logits: &[f32], targets: &[u8], normaliser: f64) -> (f64, Vec<f32>) {
    let scale = (1.0 / normaliser) as f32;
    let mut sum = 0.0_f64;
    let mut grad = vec![0.0_f32; logits.len()];
    for ((row, g), &target) in logits.chunks_exact(VOCAB).zip(grad.chunks_exact_mut(VOCAB)).zip(targets) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0_f32;
        for (g, v) in g.iter_mut().zip(row) {
            *g = (v - max).exp();
            total += *g;
        }
        sum += f64::from(total.ln()) - f64::from(row[usize::from(target)] - max);
        let normalise = scale / total;
        g.iter_mut().for_each(|g| *g *= normalise);
        g[usize::from(target)] -= scale;
    }
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
    style: crate::config::DecayStyle,
) -> f64 {
    use crate::config::DecayStyle;
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
    use crate::config::DecayStyle;
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
            let w = halves[1].layers[0].dense.weight;
            cpu.matmul(&mixed, &halves[1].params[w..w + hidden * c], rows, hidden, c, &mut second);
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
