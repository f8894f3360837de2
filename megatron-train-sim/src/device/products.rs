//! The matrix products of the model: the [`Device`] trait (forward, weight
//! gradient, input gradient), its CPU implementation ([`Cpu`]), and the two
//! checks that run on any device ([`warm_up`], [`sniff_test`]). A leaf: the
//! GPU implementation (`super::cuda`) and the choice of device
//! (`super::select`) build on it.

use std::sync::atomic::{AtomicU64, Ordering};

/// The matrix products of a dense layer, on row-major `f32` matrices.
pub(crate) trait Device: Send + Sync {
    /// The device's name, as the summary prints it (`cpu`, `cuda:0`).
    fn name(&self) -> String;

    /// The GPU's model name as its driver gives it (`cuDeviceGetName`:
    /// `NVIDIA H200`, `NVIDIA A100-SXM4-40GB MIG 1g.5gb`), which picks the
    /// MFU peak; `None` for the CPU.
    fn gpu_name(&self) -> Option<String> {
        None
    }

    /// `out (m×n) = a (m×k) · b (k×n)`.
    fn matmul(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]);

    /// `out (k×n) += aᵀ · b`, with `a (m×k)` and `b (m×n)` (weight gradients).
    fn matmul_at_b_acc(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]);

    /// `out (m×k) = a (m×n) · bᵀ`, with `b (k×n)` (input gradients).
    fn matmul_a_bt(&self, a: &[f32], b: &[f32], m: usize, n: usize, k: usize, out: &mut [f32]);

    /// Peak memory of this rank on the device, in bytes: for the CPU the
    /// process's peak resident set (`VmHWM`), for a GPU its peak allocation.
    fn peak_memory_bytes(&self) -> Option<u64>;

    /// Captures the training step's kernels for replay (Megatron's CUDA
    /// graphs, `--enable-cuda-graph`). The CPU has nothing to capture: a
    /// no-op there.
    fn capture_step(&self) {}
}

/// The CPU: plain loops in cache-friendly order, one thread.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cpu;

impl Device for Cpu {
    fn name(&self) -> String {
        "cpu".to_string()
    }

    fn matmul(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
        out[..m * n].fill(0.0);
        for i in 0..m {
            let row = &mut out[i * n..(i + 1) * n];
            for p in 0..k {
                let scale = a[i * k + p];
                if scale == 0.0 {
                    // Adds nothing for finite `b` (the one-hot rows of the
                    // embedding are mostly zeros).
                    continue;
                }
                let b_row = &b[p * n..(p + 1) * n];
                for (o, &bv) in row.iter_mut().zip(b_row) {
                    *o += scale * bv;
                }
            }
        }
    }

    fn matmul_at_b_acc(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
        for i in 0..m {
            let b_row = &b[i * n..(i + 1) * n];
            for p in 0..k {
                let scale = a[i * k + p];
                if scale == 0.0 {
                    continue;
                }
                let row = &mut out[p * n..(p + 1) * n];
                for (o, &bv) in row.iter_mut().zip(b_row) {
                    *o += scale * bv;
                }
            }
        }
    }

    fn matmul_a_bt(&self, a: &[f32], b: &[f32], m: usize, n: usize, k: usize, out: &mut [f32]) {
        for i in 0..m {
            let a_row = &a[i * n..(i + 1) * n];
            for p in 0..k {
                let b_row = &b[p * n..(p + 1) * n];
                out[i * k + p] = a_row.iter().zip(b_row).map(|(x, y)| x * y).sum();
            }
        }
    }

    /// The process's peak resident memory (`VmHWM`), kept as a running
    /// peak: the kernel's figure was seen to read lower later in the same
    /// process, and Megatron's metric, PyTorch's peak-allocated counter,
    /// never goes down. The reading is the process's, so the peak kept is
    /// too (one for every `Cpu`).
    fn peak_memory_bytes(&self) -> Option<u64> {
        static PEAK: AtomicU64 = AtomicU64::new(0);
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        let bytes = kib * 1024;
        Some(PEAK.fetch_max(bytes, Ordering::Relaxed).max(bytes))
    }
}

/// Runs one small product so that a device's first real product pays no
/// start-up cost (Megatron's `jit_fusion_options` phase warms its fused
/// kernels up the same way). The GPU has already JIT-compiled its kernel
/// and run its self-check when it was opened; this is cheap everywhere.
pub(crate) fn warm_up(device: &dyn Device) {
    let (a, b) = ([1.0_f32; 16 * 16], [1.0_f32; 16 * 16]);
    let mut out = [0.0_f32; 16 * 16];
    device.matmul(&a, &b, 16, 16, 16, &mut out);
}

/// A small self-check of the device (the sniff test): a product with a known
/// answer. Returns a description of the mismatch, if any.
pub(crate) fn sniff_test(device: &dyn Device) -> Result<(), String> {
    let a: Vec<f32> = (0..12).map(|i| i as f32).collect(); // 3×4
    let b: Vec<f32> = (0..8).map(|i| (i % 3) as f32 - 1.0).collect(); // 4×2
    let mut out = [0.0_f32; 6];
    device.matmul(&a, &b, 3, 4, 2, &mut out);
    let mut expected = [0.0_f32; 6];
    for i in 0..3 {
        for j in 0..2 {
            expected[i * 2 + j] = (0..4).map(|p| a[i * 4 + p] * b[p * 2 + j]).sum();
        }
    }
    if out == expected { Ok(()) } else { Err(format!("{} gave {out:?}, expected {expected:?}", device.name())) }
}
