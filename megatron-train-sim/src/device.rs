//! Where the matrix products run: the [`Device`] trait and its CPU
//! implementation.
//!
//! The model calls three products (forward, weight gradient, input
//! gradient) through this trait and nothing else, so a GPU implementation
//! (a later `cuda` cargo feature) plugs in here without touching the model.
//! `--device auto` picks the CPU when no GPU support is compiled in.

use crate::cli::DeviceChoice;

/// The matrix products of a dense layer, on row-major `f32` matrices.
pub(crate) trait Device: Send + Sync {
    /// The device's name, as the summary prints it (`cpu`, `cuda:0`).
    fn name(&self) -> String;

    /// `out (m×n) = a (m×k) · b (k×n)`.
    fn matmul(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]);

    /// `out (k×n) += aᵀ · b`, with `a (m×k)` and `b (m×n)` (weight gradients).
    fn matmul_at_b_acc(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]);

    /// `out (m×k) = a (m×n) · bᵀ`, with `b (k×n)` (input gradients).
    fn matmul_a_bt(&self, a: &[f32], b: &[f32], m: usize, n: usize, k: usize, out: &mut [f32]);

    /// Peak memory of this rank on the device, in bytes: for the CPU the
    /// process's peak resident set (`VmHWM`), for a GPU its peak allocation.
    fn peak_memory_bytes(&self) -> Option<u64>;
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

    fn peak_memory_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// Why the requested device cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct DeviceUnavailable(pub(crate) String);

impl std::fmt::Display for DeviceUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The device `choice` selects.
pub(crate) fn select(choice: DeviceChoice) -> Result<Box<dyn Device>, DeviceUnavailable> {
    match choice {
        DeviceChoice::Cpu | DeviceChoice::Auto => Ok(Box::new(Cpu)),
        DeviceChoice::Cuda => Err(DeviceUnavailable(
            "--device cuda: this build has no GPU support (it comes with the `cuda` cargo feature); \
             use --device cpu or --device auto"
                .to_string(),
        )),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_products_agree_with_their_definitions() {
        let cpu = Cpu;
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2×3
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]; // 3×2
        let mut out = [0.0; 4];
        cpu.matmul(&a, &b, 2, 3, 2, &mut out);
        assert_eq!(out, [4.0, 5.0, 10.0, 11.0]);
        // aᵀ (3×2) · c (2×2)
        let c = [1.0, 2.0, 3.0, 4.0];
        let mut grad = [1.0; 6];
        cpu.matmul_at_b_acc(&a, &c, 2, 3, 2, &mut grad);
        assert_eq!(grad, [1.0 + 13.0, 1.0 + 18.0, 1.0 + 17.0, 1.0 + 24.0, 1.0 + 21.0, 1.0 + 30.0]);
        // c (2×2) · bᵀ (2×3)
        let mut input_grad = [0.0; 6];
        cpu.matmul_a_bt(&c, &b, 2, 2, 3, &mut input_grad);
        assert_eq!(input_grad, [1.0, 2.0, 3.0, 3.0, 4.0, 7.0]);
        assert!(sniff_test(&cpu).is_ok());
    }

    #[test]
    fn cuda_without_gpu_support_is_refused_with_the_alternatives() {
        let error = select(DeviceChoice::Cuda).err().unwrap();
        assert!(error.0.contains("--device cpu"), "{error}");
        assert_eq!(select(DeviceChoice::Auto).unwrap().name(), "cpu");
    }
}
