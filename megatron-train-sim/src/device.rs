//! Where the matrix products run: the choice between the CPU and a GPU.
//! The [`Device`] trait, its CPU implementation and the checks that run on
//! any device are in [`products`], which the GPU implementation builds on
//! too.
//!
//! The model calls three products (forward, weight gradient, input
//! gradient) through this trait and nothing else, so the GPU implementation
//! (the `cuda` cargo feature, [`cuda`]) plugs in here without touching the
//! model. [`gemm`] holds the GPU kernel as data (its PTX and the launch of
//! each product), compiled and tested on every machine.
//!
//! Choosing ([`select`], per rank; [`check`], in the launcher before any
//! rank starts): local rank `r` uses CUDA device `r`, in CUDA's numbering,
//! which already follows `CUDA_VISIBLE_DEVICES` (NVML's physical numbering
//! for the identity attributes is `megatron_telemetry::nvml`'s business).
//!
//! - `cpu`: the CPU.
//! - `cuda`: GPU `r`, or exit 2 with a message naming `--device cuda` and
//!   what is missing: the `cuda` feature, the driver library
//!   (`libcuda.so.1`), any GPU, or GPU `r`.
//! - `auto`: GPU `r` when the feature is compiled in and the driver sees
//!   it, else the CPU (with a note when a GPU was there but unusable).

use crate::config::DeviceChoice;

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(any(feature = "cuda", test))]
mod gemm;
mod products;

pub(crate) use products::{Cpu, Device, sniff_test, warm_up};

/// Why the requested device cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct DeviceUnavailable(pub(crate) String);

impl std::fmt::Display for DeviceUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The CUDA driver library the `cuda` feature loads at run time.
pub(crate) const CUDA_DRIVER_LIBRARY: &str = "libcuda.so.1";

/// What this build and machine offer: no GPU support compiled in, or what
/// the CUDA driver said.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(any(feature = "cuda", test)), expect(dead_code, reason = "only the cuda feature asks a driver"))]
enum Gpus {
    /// Built without the `cuda` feature.
    #[cfg_attr(all(feature = "cuda", not(test)), expect(dead_code, reason = "what a build without the feature sees"))]
    NotCompiled,
    /// [`CUDA_DRIVER_LIBRARY`] cannot be loaded.
    NoDriver,
    /// The driver loaded but failed, with its error.
    DriverError(String),
    /// The driver sees this many GPUs.
    Count(u32),
}

/// Asks the driver (when compiled in).
fn probe() -> Gpus {
    #[cfg(feature = "cuda")]
    {
        match cuda::probe() {
            cuda::Probe::NoDriver => Gpus::NoDriver,
            cuda::Probe::DriverError(error) => Gpus::DriverError(error),
            cuda::Probe::Gpus(count) => Gpus::Count(count),
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        Gpus::NotCompiled
    }
}

/// What a rank runs on.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// The CPU; with a note to print when `auto` passed over a GPU.
    Cpu(Option<String>),
    /// The GPU with this CUDA ordinal.
    Gpu(u32),
}

/// The choice for local rank `local_rank` (or, with `ranks`, for local
/// ranks `0..ranks`, as the launcher checks) given what `gpus` offers.
fn decide(choice: DeviceChoice, gpus: &Gpus, local_rank: u32, ranks: u32) -> Result<Decision, DeviceUnavailable> {
    let needed = local_rank.max(ranks.saturating_sub(1));
    let refusal = match (choice, gpus) {
        (DeviceChoice::Cpu, _) => return Ok(Decision::Cpu(None)),
        (_, Gpus::Count(count)) if needed < *count => return Ok(Decision::Gpu(local_rank)),
        (_, Gpus::NotCompiled) => "this build has no GPU support (it comes with the `cuda` cargo feature: \
             cargo build --release -p megatron-train-sim --features cuda)"
            .to_string(),
        (_, Gpus::NoDriver) => format!(
            "the CUDA driver library {CUDA_DRIVER_LIBRARY} could not be loaded \
             (no NVIDIA driver on this machine, or it is not on the loader's path)"
        ),
        (_, Gpus::DriverError(error)) => format!("the CUDA driver failed to start: {error}"),
        (_, Gpus::Count(0)) => "the CUDA driver sees no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)".to_string(),
        (_, Gpus::Count(count)) => format!(
            "local rank {needed} needs GPU {needed}, but the CUDA driver sees {count} \
             (one GPU per local rank; check --nproc-per-node and CUDA_VISIBLE_DEVICES)"
        ),
    };
    match choice {
        DeviceChoice::Auto => {
            // Passing over a GPU that is there deserves a word; having none does not.
            let quiet = matches!(gpus, Gpus::NotCompiled | Gpus::NoDriver | Gpus::Count(0));
            Ok(Decision::Cpu((!quiet).then(|| format!("--device auto: using the CPU: {refusal}"))))
        }
        _ => Err(DeviceUnavailable(format!("--device cuda: {refusal}; use --device cpu or --device auto"))),
    }
}

/// Checks, before any rank starts, that `choice` can serve `ranks` local
/// ranks (the launcher's early error; opens no GPU).
pub(crate) fn check(choice: DeviceChoice, ranks: u32) -> Result<(), DeviceUnavailable> {
    if choice == DeviceChoice::Cpu {
        return Ok(());
    }
    decide(choice, &probe(), 0, ranks).map(|_| ())
}

/// The device of local rank `local_rank`.
pub(crate) fn select(choice: DeviceChoice, local_rank: u32) -> Result<Box<dyn Device>, DeviceUnavailable> {
    if choice == DeviceChoice::Cpu {
        return Ok(Box::new(Cpu));
    }
    match decide(choice, &probe(), local_rank, 0)? {
        Decision::Cpu(note) => {
            if let Some(note) = note {
                crate::output::note(&note);
            }
            Ok(Box::new(Cpu))
        }
        Decision::Gpu(ordinal) => open_gpu(choice, ordinal),
    }
}

/// Opens GPU `ordinal`; under `auto`, a GPU that fails to open leaves the
/// CPU (with a note).
#[cfg(feature = "cuda")]
fn open_gpu(choice: DeviceChoice, ordinal: u32) -> Result<Box<dyn Device>, DeviceUnavailable> {
    match cuda::Cuda::open(ordinal as usize) {
        Ok(gpu) => Ok(Box::new(gpu)),
        Err(error) if choice == DeviceChoice::Auto => {
            crate::output::note(&format!("--device auto: using the CPU: {error}"));
            Ok(Box::new(Cpu))
        }
        Err(error) => Err(DeviceUnavailable(format!("--device cuda: {error}; use --device cpu or --device auto"))),
    }
}

/// Without the feature no decision names a GPU.
#[cfg(not(feature = "cuda"))]
fn open_gpu(_choice: DeviceChoice, ordinal: u32) -> Result<Box<dyn Device>, DeviceUnavailable> {
    Err(DeviceUnavailable(format!("--device cuda: GPU {ordinal} needs the `cuda` cargo feature")))
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
    fn cuda_without_gpu_support_is_refused_naming_what_is_missing() {
        let refused = |gpus: Gpus, rank| decide(DeviceChoice::Cuda, &gpus, rank, 0).unwrap_err().0;
        let error = refused(Gpus::NotCompiled, 0);
        assert!(error.starts_with("--device cuda: ") && error.contains("--features cuda"), "{error}");
        let error = refused(Gpus::NoDriver, 0);
        assert!(error.starts_with("--device cuda: ") && error.contains("libcuda.so.1"), "{error}");
        assert!(error.ends_with("use --device cpu or --device auto"), "{error}");
        assert!(refused(Gpus::Count(0), 0).contains("sees no GPU"));
        assert!(refused(Gpus::DriverError("CUDA_ERROR_NO_DEVICE".into()), 0).contains("CUDA_ERROR_NO_DEVICE"));
        let error = refused(Gpus::Count(2), 2);
        assert!(error.contains("local rank 2 needs GPU 2, but the CUDA driver sees 2"), "{error}");
        // The launcher's check covers every local rank it will start.
        let error = decide(DeviceChoice::Cuda, &Gpus::Count(1), 0, 2).unwrap_err().0;
        assert!(error.contains("local rank 1 needs GPU 1"), "{error}");
        // This machine (no CUDA in the unit-test environment) is refused the same way.
        if !cfg!(feature = "cuda") {
            assert!(select(DeviceChoice::Cuda, 0).err().unwrap().0.contains("--features cuda"));
        }
    }

    #[test]
    fn each_local_rank_gets_its_own_gpu_and_auto_falls_back_to_the_cpu() {
        assert_eq!(decide(DeviceChoice::Cuda, &Gpus::Count(2), 1, 0), Ok(Decision::Gpu(1)));
        assert_eq!(decide(DeviceChoice::Auto, &Gpus::Count(4), 3, 0), Ok(Decision::Gpu(3)));
        assert_eq!(decide(DeviceChoice::Cuda, &Gpus::Count(2), 0, 2), Ok(Decision::Gpu(0)));
        // No GPU support or no GPU: the CPU, quietly.
        for gpus in [Gpus::NotCompiled, Gpus::NoDriver, Gpus::Count(0)] {
            assert_eq!(decide(DeviceChoice::Auto, &gpus, 0, 0), Ok(Decision::Cpu(None)), "{gpus:?}");
        }
        // A GPU that is there but unusable for this rank: the CPU, with a note.
        let Ok(Decision::Cpu(Some(note))) = decide(DeviceChoice::Auto, &Gpus::Count(1), 1, 0) else {
            panic!("auto with too few GPUs must fall back to the CPU with a note")
        };
        assert!(note.contains("local rank 1 needs GPU 1"), "{note}");
        // --device cpu never asks the driver.
        assert_eq!(decide(DeviceChoice::Cpu, &Gpus::Count(8), 0, 0), Ok(Decision::Cpu(None)));
        assert_eq!(select(DeviceChoice::Cpu, 5).unwrap().name(), "cpu");
        assert!(check(DeviceChoice::Cpu, 64).is_ok());
    }
}
