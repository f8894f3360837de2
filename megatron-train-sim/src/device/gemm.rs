//! The GPU kernel as data: the embedded PTX, and how each of the
//! [`Device`](super::Device) products maps onto its one strided kernel.
//!
//! Kept apart from the CUDA code so that it is tested on every machine
//! (it is compiled with the `cuda` feature and in tests): the launch parameters of the three products are checked here
//! against the CPU, through a host emulation of the kernel's tiled loop,
//! where no GPU is needed.
//!
//! `kernels.ptx` is generated from `kernels.ll` (LLVM IR for the NVPTX back
//! end; the CUDA C it implements is in that file's header) with
//! `llc-14 -O3 -march=nvptx64 -mcpu=sm_75 -mattr=+ptx70`; see docs/gpu.md.

/// The PTX the CUDA driver loads (`cuModuleLoadData` JIT-compiles it for
/// the GPU at hand).
pub(crate) const KERNELS_PTX: &str = include_str!("kernels.ptx");

/// The kernel's entry point in [`KERNELS_PTX`].
pub(crate) const MATMUL_KERNEL: &str = "matmul_f32";

/// The kernel's tile edge: blocks are `TILE × TILE` threads, each block
/// computes one `TILE × TILE` tile of the output.
pub(crate) const TILE: u32 = 16;

/// One launch of the kernel: `C (m×n, row-major) = A (m×k) · B (k×n)`,
/// plus the old `C` when `accumulate`, where `A(i, p) = a[i·sai + p·sap]`
/// and `B(p, j) = b[p·sbp + j·sbj]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gemm {
    /// Output rows.
    pub(crate) m: usize,
    /// Output columns.
    pub(crate) n: usize,
    /// Inner dimension.
    pub(crate) k: usize,
    /// Stride of `A` along its rows (`i`).
    pub(crate) sai: usize,
    /// Stride of `A` along the inner dimension (`p`).
    pub(crate) sap: usize,
    /// Stride of `B` along the inner dimension (`p`).
    pub(crate) sbp: usize,
    /// Stride of `B` along its columns (`j`).
    pub(crate) sbj: usize,
    /// Whether the product is added to the output's current contents.
    pub(crate) accumulate: bool,
}

impl Gemm {
    /// [`Device::matmul`](super::Device::matmul): `out (m×n) = a (m×k) · b (k×n)`.
    pub(crate) fn ab(m: usize, k: usize, n: usize) -> Gemm {
        Gemm { m, n, k, sai: k, sap: 1, sbp: n, sbj: 1, accumulate: false }
    }

    /// [`Device::matmul_at_b_acc`](super::Device::matmul_at_b_acc):
    /// `out (k×n) += aᵀ · b` with `a (m×k)`, `b (m×n)`.
    pub(crate) fn at_b_acc(m: usize, k: usize, n: usize) -> Gemm {
        Gemm { m: k, n, k: m, sai: 1, sap: k, sbp: n, sbj: 1, accumulate: true }
    }

    /// [`Device::matmul_a_bt`](super::Device::matmul_a_bt):
    /// `out (m×k) = a (m×n) · bᵀ` with `b (k×n)`.
    pub(crate) fn a_bt(m: usize, n: usize, k: usize) -> Gemm {
        Gemm { m, n: k, k: n, sai: n, sap: 1, sbp: 1, sbj: n, accumulate: false }
    }

    /// The launch grid: `(⌈n / TILE⌉, ⌈m / TILE⌉, 1)` blocks.
    pub(crate) fn grid(&self) -> (u32, u32, u32) {
        let blocks = |extent: usize| u32::try_from(extent.div_ceil(TILE as usize)).unwrap_or(u32::MAX);
        (blocks(self.n), blocks(self.m), 1)
    }

    /// The integer arguments in the kernel's order (after the three
    /// pointers): `M, N, K, sai, sap, sbp, sbj, accumulate`; `None` when a
    /// size does not fit the kernel's `int`.
    pub(crate) fn int_args(&self) -> Option<[i32; 8]> {
        let int = |v: usize| i32::try_from(v).ok();
        Some([
            int(self.m)?,
            int(self.n)?,
            int(self.k)?,
            int(self.sai)?,
            int(self.sap)?,
            int(self.sbp)?,
            int(self.sbj)?,
            i32::from(self.accumulate),
        ])
    }

    /// The elements of `a`, `b` and the output the kernel touches.
    pub(crate) fn lens(&self) -> (usize, usize, usize) {
        (self.m * self.k, self.k * self.n, self.m * self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Cpu, Device};

    /// What the kernel computes, block by block and tile by tile as in
    /// `kernels.ll` (zero padding past the edges, one fused multiply-add
    /// per inner step).
    fn emulate(g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
        let t = TILE as usize;
        let (gx, gy, _) = g.grid();
        for by in 0..gy as usize {
            for bx in 0..gx as usize {
                for ty in 0..t {
                    for tx in 0..t {
                        let (row, col) = (by * t + ty, bx * t + tx);
                        let mut sum = 0.0_f32;
                        let mut start = 0;
                        while start < g.k {
                            for q in 0..t {
                                let p = start + q;
                                let x = if row < g.m && p < g.k { a[row * g.sai + p * g.sap] } else { 0.0 };
                                let y = if p < g.k && col < g.n { b[p * g.sbp + col * g.sbj] } else { 0.0 };
                                sum = x.mul_add(y, sum);
                            }
                            start += t;
                        }
                        if row < g.m && col < g.n {
                            let o = row * g.n + col;
                            c[o] = if g.accumulate { c[o] + sum } else { sum };
                        }
                    }
                }
            }
        }
    }

    fn values(len: usize, salt: f32) -> Vec<f32> {
        (0..len).map(|i| ((i as f32 + salt) * 0.731).sin()).collect()
    }

    fn assert_close(got: &[f32], expected: &[f32]) {
        assert_eq!(got.len(), expected.len());
        for (i, (g, e)) in got.iter().zip(expected).enumerate() {
            assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "element {i}: kernel {g}, cpu {e}");
        }
    }

    #[test]
    fn the_kernel_launches_compute_what_the_cpu_computes_at_awkward_sizes() {
        // Sizes that are not multiples of the tile, one smaller than a tile,
        // and several tiles deep.
        for (m, k, n) in [(3, 5, 2), (17, 33, 18), (40, 16, 1), (1, 70, 31)] {
            let cpu = Cpu;
            let (a, b) = (values(m * k, 0.0), values(k * n, 7.0));
            let (mut want, mut got) = (vec![0.0; m * n], vec![f32::NAN; m * n]);
            cpu.matmul(&a, &b, m, k, n, &mut want);
            emulate(Gemm::ab(m, k, n), &a, &b, &mut got);
            assert_close(&got, &want);

            // aᵀ · g accumulated onto existing gradients.
            let g = values(m * n, 3.0);
            let mut want = values(k * n, 11.0);
            let mut got = want.clone();
            cpu.matmul_at_b_acc(&a, &g, m, k, n, &mut want);
            emulate(Gemm::at_b_acc(m, k, n), &a, &g, &mut got);
            assert_close(&got, &want);

            // g · bᵀ, with b (k×n) read transposed.
            let bt = values(k * n, 5.0);
            let (mut want, mut got) = (vec![0.0; m * k], vec![f32::NAN; m * k]);
            cpu.matmul_a_bt(&g, &bt, m, n, k, &mut want);
            emulate(Gemm::a_bt(m, n, k), &g, &bt, &mut got);
            assert_close(&got, &want);
        }
    }

    #[test]
    fn launch_shapes_cover_the_output_and_sizes_must_fit_an_int() {
        assert_eq!(Gemm::ab(33, 4, 16).grid(), (1, 3, 1));
        assert_eq!(Gemm::at_b_acc(8, 20, 17).grid(), (2, 2, 1));
        assert_eq!(Gemm::ab(2, 3, 4).lens(), (6, 12, 8));
        assert_eq!(Gemm::at_b_acc(2, 3, 4).int_args(), Some([3, 4, 2, 1, 3, 4, 1, 1]));
        assert_eq!(Gemm::ab(1 << 31, 1, 1).int_args(), None);
    }

    #[test]
    fn the_embedded_ptx_has_the_entry_point_the_launch_expects() {
        assert!(KERNELS_PTX.contains(".target sm_75"), "PTX target changed: update docs/gpu.md");
        let entry = KERNELS_PTX
            .split_once(&format!(".entry {MATMUL_KERNEL}("))
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(params, _)| params)
            .expect("the PTX defines the matmul entry point");
        let pointers = entry.matches(".param .u64").count();
        let ints = entry.matches(".param .u32").count();
        // Three pointers, then the eight integers of `Gemm::int_args`.
        assert_eq!((pointers, ints), (3, Gemm::ab(1, 1, 1).int_args().map_or(0, |a| a.len())));
        // The source the PTX comes from is in the repository.
        let source = include_str!("kernels.ll");
        assert!(source.contains(&format!("define void @{MATMUL_KERNEL}(")));
    }
}
