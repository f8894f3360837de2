//! The GPU: the [`Device`] products on an NVIDIA GPU through the CUDA driver
//! API (`cudarc`, with `libcuda.so` loaded at run time), built only with the
//! `cuda` cargo feature.
//!
//! No CUDA toolkit is needed to build or to run: the one kernel ships as PTX
//! ([`gemm::KERNELS_PTX`]) that the driver JIT-compiles when the device is
//! opened, so the driver alone suffices (no NVRTC, no cuBLAS). Each product
//! copies its operands to the GPU, runs the kernel and copies the result
//! back; the device keeps three grow-only buffers, so memory is allocated
//! only when a product is larger than every one before it.
//!
//! Peak memory ([`Device::peak_memory_bytes`]) is the largest total of those
//! buffers: what this rank allocated on the GPU, like PyTorch's
//! `max_memory_allocated` (the CUDA context's own memory is not counted).
//!
//! The driver's name for the GPU (`cuDeviceGetName`, such as `NVIDIA H200`)
//! is its [`Device::gpu_name`], which picks the MFU peak
//! (`crate::telemetry::MfuPeak`); the summary's `cuda:N` is its
//! [`name`](Device::name).
//!
//! A driver call that fails mid-run does not abort training: the product is
//! computed on the CPU instead, the first failure is printed once, and the
//! device's [`name`](Device::name) becomes `cuda:N (failed over to the cpu)`,
//! which the summary reports and the GPU check rejects.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

use super::gemm::{self, Gemm, TILE};
use super::{Cpu, Device};

/// What the CUDA driver says about this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// `libcuda` cannot be loaded (no NVIDIA driver, or not on the loader's path).
    NoDriver,
    /// The driver loaded but failed (`cuInit`/`cuDeviceGetCount`), with the reason.
    DriverError(String),
    /// The driver sees this many GPUs (after `CUDA_VISIBLE_DEVICES`).
    Gpus(u32),
}

/// Loads the driver (once per process) and counts the GPUs it sees.
pub(crate) fn probe() -> Probe {
    // SAFETY: loading the driver library runs its initialisers; libcuda is
    // built to be `dlopen`ed, and nothing else in this process is loading it.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Probe::NoDriver;
    }
    match quietly(CudaContext::device_count) {
        Ok(Ok(count)) => Probe::Gpus(u32::try_from(count).unwrap_or(0)),
        // `CUDA_VISIBLE_DEVICES=""`, or no GPU behind the driver.
        Ok(Err(error)) if error.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => Probe::Gpus(0),
        Ok(Err(error)) => Probe::DriverError(error.to_string()),
        Err(panic) => Probe::DriverError(format!("{panic} (is it the NVIDIA driver, for CUDA 13 or newer?)")),
    }
}

/// Runs `call` into the driver, turning a panic of `cudarc` (a symbol the
/// installed driver lacks) into its message, without the panic hook's
/// report. Start-up only: the hook is process-wide, and no other thread
/// exists yet when the device is chosen.
fn quietly<T>(call: impl FnOnce() -> T) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = catch_unwind(AssertUnwindSafe(call));
    std::panic::set_hook(hook);
    result.map_err(|payload| panic_message(payload.as_ref()))
}

/// The message of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("no message");
    format!("a CUDA driver call panicked: {message}")
}

/// The CUDA device of one rank.
pub(crate) struct Cuda {
    ordinal: usize,
    label: String,
    stream: Arc<CudaStream>,
    kernel: CudaFunction,
    buffers: Mutex<Buffers>,
    failure: OnceLock<String>,
}

impl std::fmt::Debug for Cuda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cuda").field("ordinal", &self.ordinal).field("label", &self.label).finish_non_exhaustive()
    }
}

/// The device buffers: the two operands and the output, grown on demand.
#[derive(Default)]
struct Buffers {
    a: Option<CudaSlice<f32>>,
    b: Option<CudaSlice<f32>>,
    c: Option<CudaSlice<f32>>,
    peak_bytes: u64,
}

impl Cuda {
    /// Opens GPU `ordinal` (CUDA's numbering, which follows
    /// `CUDA_VISIBLE_DEVICES`), loads the kernel and checks one product
    /// against the CPU.
    pub(crate) fn open(ordinal: usize) -> Result<Cuda, String> {
        let opened = quietly(|| -> Result<Cuda, DriverError> {
            let context = CudaContext::new(ordinal)?;
            let name = context.name().unwrap_or_else(|_| "unknown GPU".to_string());
            let module = context.load_module(Ptx::from_src(gemm::KERNELS_PTX))?;
            let kernel = module.load_function(gemm::MATMUL_KERNEL)?;
            Ok(Cuda {
                ordinal,
                label: name,
                stream: context.default_stream(),
                kernel,
                buffers: Mutex::new(Buffers::default()),
                failure: OnceLock::new(),
            })
        });
        let cuda = match opened {
            Ok(Ok(cuda)) => cuda,
            Ok(Err(error)) => return Err(format!("GPU {ordinal} could not be opened: {error}")),
            Err(panic) => return Err(format!("GPU {ordinal} could not be opened: {panic}")),
        };
        quietly(|| super::sniff_test(&cuda).and_then(|()| cuda.agrees_with_the_cpu()))??;
        if let Some(failure) = cuda.failure.get() {
            return Err(format!("GPU {ordinal} ({}) failed its first products: {failure}", cuda.label));
        }
        Ok(cuda)
    }

    /// The three products at sizes that are not multiples of the tile, on
    /// the GPU and on the CPU: equal within a relative `1e-4` (the GPU
    /// fuses multiply and add, the CPU does not).
    fn agrees_with_the_cpu(&self) -> Result<(), String> {
        let (m, k, n) = (37, 70, 19);
        let values =
            |len: usize, salt: f32| -> Vec<f32> { (0..len).map(|i| ((i as f32 + salt) * 0.731).sin()).collect() };
        let (a, b, g, bt) = (values(m * k, 0.0), values(k * n, 7.0), values(m * n, 3.0), values(k * n, 5.0));
        let compare = |what: &str, gpu: &[f32], cpu: &[f32]| -> Result<(), String> {
            match gpu.iter().zip(cpu).position(|(x, y)| (x - y).abs() > 1e-4 * (1.0 + y.abs())) {
                None => Ok(()),
                Some(i) => Err(format!(
                    "GPU {} ({}) computes {what} wrongly: element {i} is {}, the CPU says {}",
                    self.ordinal, self.label, gpu[i], cpu[i]
                )),
            }
        };
        let (mut gpu, mut cpu) = (vec![0.0; m * n], vec![0.0; m * n]);
        self.matmul(&a, &b, m, k, n, &mut gpu);
        Cpu.matmul(&a, &b, m, k, n, &mut cpu);
        compare("a·b", &gpu, &cpu)?;
        let (mut gpu, mut cpu) = (values(k * n, 11.0), values(k * n, 11.0));
        self.matmul_at_b_acc(&a, &g, m, k, n, &mut gpu);
        Cpu.matmul_at_b_acc(&a, &g, m, k, n, &mut cpu);
        compare("aᵀ·b", &gpu, &cpu)?;
        let (mut gpu, mut cpu) = (vec![0.0; m * k], vec![0.0; m * k]);
        self.matmul_a_bt(&g, &bt, m, n, k, &mut gpu);
        Cpu.matmul_a_bt(&g, &bt, m, n, k, &mut cpu);
        compare("a·bᵀ", &gpu, &cpu)
    }

    /// Runs one launch on the GPU: copies in, kernel, copies out.
    fn run(&self, gemm: Gemm, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), String> {
        let (a_len, b_len, c_len) = gemm.lens();
        let ints = gemm.int_args().ok_or("a dimension does not fit the kernel's 32-bit int")?;
        if a.len() < a_len || b.len() < b_len || out.len() < c_len {
            return Err("operand shorter than its dimensions".to_string());
        }
        let mut buffers = self.buffers.lock().map_err(|_| "buffer lock poisoned")?;
        let stream = &self.stream;
        let driver = |error: DriverError| error.to_string();
        let grow = |slot: &mut Option<CudaSlice<f32>>, len: usize| -> Result<(), String> {
            if slot.as_ref().is_none_or(|buffer| buffer.len() < len) {
                *slot = None;
                // SAFETY: the buffer is written (copied into, or fully
                // overwritten by the kernel) before anything reads it.
                *slot = Some(unsafe { stream.alloc::<f32>(len.max(1)) }.map_err(driver)?);
            }
            Ok(())
        };
        grow(&mut buffers.a, a_len)?;
        grow(&mut buffers.b, b_len)?;
        grow(&mut buffers.c, c_len)?;
        let total: usize =
            [&buffers.a, &buffers.b, &buffers.c].iter().filter_map(|s| s.as_ref()).map(|s| s.len()).sum();
        buffers.peak_bytes = buffers.peak_bytes.max(total as u64 * 4);
        let Buffers { a: Some(dev_a), b: Some(dev_b), c: Some(dev_c), .. } = &mut *buffers else {
            return Err("buffers missing after allocation".to_string());
        };
        stream.memcpy_htod(&a[..a_len], dev_a).map_err(driver)?;
        stream.memcpy_htod(&b[..b_len], dev_b).map_err(driver)?;
        if gemm.accumulate {
            stream.memcpy_htod(&out[..c_len], dev_c).map_err(driver)?;
        }
        let config = LaunchConfig { grid_dim: gemm.grid(), block_dim: (TILE, TILE, 1), shared_mem_bytes: 0 };
        let mut launch = stream.launch_builder(&self.kernel);
        launch.arg(&*dev_a).arg(&*dev_b).arg(&mut *dev_c);
        for int in &ints {
            launch.arg(int);
        }
        // SAFETY: the arguments match the kernel's signature (three device
        // pointers, eight ints, checked against the PTX in gemm's tests), and
        // the buffers hold at least the elements the launch touches.
        unsafe { launch.launch(config) }.map_err(driver)?;
        stream.memcpy_dtoh(&dev_c.slice(..c_len), &mut out[..c_len]).map_err(driver)?;
        stream.synchronize().map_err(driver)
    }

    /// Runs `gemm` on the GPU, or on the CPU with `fallback` once the GPU
    /// has failed.
    fn product(&self, gemm: Gemm, a: &[f32], b: &[f32], out: &mut [f32], fallback: impl FnOnce(&mut [f32])) {
        if self.failure.get().is_none() {
            let saved = gemm.accumulate.then(|| out.to_vec());
            let result = catch_unwind(AssertUnwindSafe(|| self.run(gemm, a, b, out)))
                .unwrap_or_else(|payload| Err(panic_message(payload.as_ref())));
            match result {
                Ok(()) => return,
                Err(error) => {
                    if let Some(saved) = saved {
                        out.copy_from_slice(&saved);
                    }
                    if self.failure.set(error.clone()).is_ok() {
                        crate::output::note(&format!(
                            "cuda:{}: {error}; the matrix products continue on the CPU",
                            self.ordinal
                        ));
                    }
                }
            }
        }
        fallback(out);
    }
}

impl Device for Cuda {
    fn name(&self) -> String {
        if self.failure.get().is_some() {
            format!("cuda:{} (failed over to the cpu)", self.ordinal)
        } else {
            format!("cuda:{}", self.ordinal)
        }
    }

    fn gpu_name(&self) -> Option<String> {
        Some(self.label.clone())
    }

    fn matmul(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
        self.product(Gemm::ab(m, k, n), a, b, out, |out| Cpu.matmul(a, b, m, k, n, out));
    }

    fn matmul_at_b_acc(&self, a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
        self.product(Gemm::at_b_acc(m, k, n), a, b, out, |out| Cpu.matmul_at_b_acc(a, b, m, k, n, out));
    }

    fn matmul_a_bt(&self, a: &[f32], b: &[f32], m: usize, n: usize, k: usize, out: &mut [f32]) {
        self.product(Gemm::a_bt(m, n, k), a, b, out, |out| Cpu.matmul_a_bt(a, b, m, n, k, out));
    }

    fn peak_memory_bytes(&self) -> Option<u64> {
        self.buffers.lock().ok().map(|buffers| buffers.peak_bytes)
    }
}
