//! Model FLOPs utilisation (MFU): the model's FLOP/s per GPU over the GPU's
//! peak, the headline efficiency figure torchtitan reports (issue #13).
//!
//! The peak comes from `<PREFIX>_PEAK_TFLOPS` (lens-core's
//! `LensConfig::peak_tflops`, validated there) when set, else from
//! [`KNOWN_GPUS`], a table of rows named by the whole words of a device
//! name (the CUDA driver's `cuDeviceGetName`, which NVML reports too, such
//! as `NVIDIA H100 80GB HBM3` or `NVIDIA A100-SXM4-80GB`) and the precision
//! the model computes in. A name is split into tokens at spaces and `-`,
//! and a row matches when every token of its name is one of the device's
//! tokens (ASCII case ignored): `L40` matches `NVIDIA L40` but not
//! `NVIDIA L40S`, `H200` does not match `NVIDIA GH200 480GB`. The first
//! matching row in table order wins, and the table lists the more specific
//! rows first (`H100 PCIe` before `H100`).
//!
//! No peak, and so no MFU (absent, never guessed), for a device that is not
//! a GPU (the simulator's CPU), for a GPU that is not in the table, and for
//! a MIG instance (a name with the token `MIG`, such as
//! `NVIDIA A100-SXM4-40GB MIG 1g.5gb`): a slice of a GPU has a share of its
//! peak that the table does not know. `<PREFIX>_PEAK_TFLOPS` gives a peak in
//! all three cases. [`resolve_peak`] says which peak is used, or why there
//! is none, for a program's startup output.
//!
//! ```
//! use lens_training::mfu::{known_peak_tflops, mfu, peak_tflops};
//! use lens_training::mfu::Precision;
//!
//! assert_eq!(known_peak_tflops("NVIDIA H100 80GB HBM3", Precision::Bf16), Some(989.4));
//! assert_eq!(known_peak_tflops("NVIDIA H100 80GB HBM3", Precision::Fp32), Some(67.0));
//! assert_eq!(known_peak_tflops("cpu", Precision::Bf16), None);
//! // The configured peak wins over the table.
//! assert_eq!(peak_tflops(Some(500.0), "NVIDIA H100 80GB HBM3", Precision::Bf16), Some(500.0));
//! assert_eq!(mfu(Some(494.7), Some(989.4)), Some(0.5));
//! assert_eq!(mfu(Some(494.7), None), None);
//! ```

use std::fmt;

/// The numeric precision of training, the column of [`KNOWN_GPUS`] MFU divides by
/// (Megatron's resource reports it as `megatron.precision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Half precision (`--fp16`).
    Fp16,
    /// Brain float 16 (`--bf16`).
    Bf16,
    /// Neither flag: single precision.
    Fp32,
}

impl Precision {
    /// From Megatron's two flags: `fp16` wins when both are set (as in the
    /// original), `fp32` when neither is.
    ///
    /// ```
    /// use lens_training::mfu::Precision;
    ///
    /// assert_eq!(Precision::from_flags(true, true), Precision::Fp16);
    /// assert_eq!(Precision::from_flags(false, true).as_str(), "bf16");
    /// assert_eq!(Precision::from_flags(false, false).as_str(), "fp32");
    /// ```
    pub const fn from_flags(fp16: bool, bf16: bool) -> Precision {
        if fp16 {
            Precision::Fp16
        } else if bf16 {
            Precision::Bf16
        } else {
            Precision::Fp32
        }
    }

    /// The attribute value: `fp16`, `bf16` or `fp32`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Fp32 => "fp32",
        }
    }
}

/// One known GPU: the tokens of its name, its dense peaks in TFLOP/s (no
/// structured sparsity), and where they come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuPeak {
    /// The row's name: its tokens (separated by spaces) must all be tokens
    /// of the device name (see the module documentation).
    pub name: &'static str,
    /// Dense BF16 tensor-core peak.
    pub bf16: f64,
    /// Dense FP16 tensor-core peak.
    pub fp16: f64,
    /// FP32 peak (CUDA cores, no TF32: PyTorch does not use TF32 for
    /// matrix products unless asked).
    pub fp32: f64,
    /// The vendor datasheet the figures come from: its title and address.
    pub source: &'static str,
}

impl GpuPeak {
    /// The peak for `precision`.
    pub const fn for_precision(&self, precision: Precision) -> f64 {
        match precision {
            Precision::Bf16 => self.bf16,
            Precision::Fp16 => self.fp16,
            Precision::Fp32 => self.fp32,
        }
    }

    /// Whether every token of this row's name is a token of `device_name`.
    fn matches(&self, device_name: &str) -> bool {
        self.name.split(' ').all(|token| name_tokens(device_name).any(|t| t.eq_ignore_ascii_case(token)))
    }
}

const H100_SHEET: &str = "\"NVIDIA H100 Tensor Core GPU\" datasheet, https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet";
const H200_SHEET: &str = "\"NVIDIA H200 Tensor Core GPU\" datasheet, https://www.nvidia.com/en-us/data-center/h200/";

/// Dense peaks of known GPUs, from the vendor datasheets (the sparsity
/// figures halved where the sheet gives only those); each row's
/// [`source`](GpuPeak::source) names its sheet:
///
/// - H100 SXM, PCIe, NVL: BF16/FP16 1,979 / 1,513 / 1,671 TFLOPS with
///   sparsity, FP32 67 / 51 / 60.
/// - H200 SXM, NVL: BF16/FP16 1,979 / 1,671 with sparsity, FP32 67 / 60.
///   GH200's Hopper GPU as H100 SXM ("NVIDIA GH200 Grace Hopper Superchip"
///   datasheet).
/// - B200: 8 GPUs 36 PFLOPS FP16/BF16 with sparsity, 600 TFLOPS FP32.
/// - A100 (SXM and PCIe): BF16/FP16 312, FP32 19.5.
/// - L40S: BF16/FP16 362.05 dense (733 with sparsity), FP32 91.6.
/// - L40: BF16/FP16 181.05 dense (362.1 with sparsity), FP32 90.5.
/// - L4: BF16/FP16 242 with sparsity, FP32 30.3. A10: BF16/FP16 125, FP32
///   31.2.
///
/// More specific rows come first (a test checks that no row is hidden by an
/// earlier one).
pub const KNOWN_GPUS: &[GpuPeak] = &[
    GpuPeak {
        name: "GH200",
        bf16: 989.4,
        fp16: 989.4,
        fp32: 67.0,
        source: "\"NVIDIA GH200 Grace Hopper Superchip\" datasheet (its Hopper GPU as H100 SXM)",
    },
    GpuPeak { name: "H200 NVL", bf16: 835.5, fp16: 835.5, fp32: 60.0, source: H200_SHEET },
    GpuPeak { name: "H200", bf16: 989.4, fp16: 989.4, fp32: 67.0, source: H200_SHEET },
    GpuPeak { name: "H100 PCIe", bf16: 756.5, fp16: 756.5, fp32: 51.0, source: H100_SHEET },
    GpuPeak { name: "H100 NVL", bf16: 835.5, fp16: 835.5, fp32: 60.0, source: H100_SHEET },
    GpuPeak { name: "H100", bf16: 989.4, fp16: 989.4, fp32: 67.0, source: H100_SHEET },
    GpuPeak {
        name: "B200",
        bf16: 2250.0,
        fp16: 2250.0,
        fp32: 75.0,
        source: "\"NVIDIA HGX B200\" datasheet (8 GPUs), https://www.nvidia.com/en-us/data-center/hgx/",
    },
    GpuPeak {
        name: "A100",
        bf16: 312.0,
        fp16: 312.0,
        fp32: 19.5,
        source: "\"NVIDIA A100 Tensor Core GPU\" datasheet, https://www.nvidia.com/en-us/data-center/a100/",
    },
    GpuPeak {
        name: "L40S",
        bf16: 362.05,
        fp16: 362.05,
        fp32: 91.6,
        source: "\"NVIDIA L40S\" datasheet, https://www.nvidia.com/en-us/data-center/l40s/",
    },
    GpuPeak {
        name: "L40",
        bf16: 181.05,
        fp16: 181.05,
        fp32: 90.5,
        source: "\"NVIDIA L40\" datasheet, https://www.nvidia.com/en-us/data-center/l40/",
    },
    GpuPeak { name: "L4", bf16: 121.0, fp16: 121.0, fp32: 30.3, source: "\"NVIDIA L4 Tensor Core GPU\" datasheet" },
    GpuPeak { name: "A10", bf16: 125.0, fp16: 125.0, fp32: 31.2, source: "\"NVIDIA A10 Tensor Core GPU\" datasheet" },
];

/// The token of a device name that marks a MIG instance.
pub const MIG_TOKEN: &str = "MIG";

/// The tokens of a device name: its words split at spaces and `-`.
///
/// ```
/// use lens_training::mfu::name_tokens;
///
/// let tokens: Vec<&str> = name_tokens("NVIDIA A100-SXM4-80GB").collect();
/// assert_eq!(tokens, ["NVIDIA", "A100", "SXM4", "80GB"]);
/// ```
pub fn name_tokens(device_name: &str) -> impl Iterator<Item = &str> {
    device_name.split([' ', '-']).filter(|token| !token.is_empty())
}

/// Whether `device_name` names a MIG instance (it has the token
/// [`MIG_TOKEN`], as CUDA and NVML name one:
/// `NVIDIA A100-SXM4-40GB MIG 1g.5gb`).
pub fn is_mig_instance(device_name: &str) -> bool {
    name_tokens(device_name).any(|token| token.eq_ignore_ascii_case(MIG_TOKEN))
}

/// The row of [`KNOWN_GPUS`] for the GPU named `device_name`: the first
/// whose tokens are all the device's; `None` for a GPU not in the table and
/// for a MIG instance.
///
/// ```
/// use lens_training::mfu::known_gpu;
///
/// assert_eq!(known_gpu("NVIDIA L40").map(|row| row.name), Some("L40"));
/// assert_eq!(known_gpu("NVIDIA L40S").map(|row| row.name), Some("L40S"));
/// assert_eq!(known_gpu("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), None);
/// assert_eq!(known_gpu("cuda:0"), None);
/// ```
pub fn known_gpu(device_name: &str) -> Option<&'static GpuPeak> {
    if is_mig_instance(device_name) {
        return None;
    }
    KNOWN_GPUS.iter().find(|gpu| gpu.matches(device_name))
}

/// The table's peak for the GPU named `device_name` at `precision` (see
/// [`known_gpu`]).
pub fn known_peak_tflops(device_name: &str, precision: Precision) -> Option<f64> {
    known_gpu(device_name).map(|gpu| gpu.for_precision(precision))
}

/// The peak to divide by: `configured` (`<PREFIX>_PEAK_TFLOPS`) when set,
/// else the table's.
pub fn peak_tflops(configured: Option<f64>, device_name: &str, precision: Precision) -> Option<f64> {
    configured.or_else(|| known_peak_tflops(device_name, precision))
}

/// Where a [`Peak`] comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PeakSource {
    /// `<PREFIX>_PEAK_TFLOPS`.
    Configured,
    /// A row of [`KNOWN_GPUS`], at [`Peak::precision`].
    Known(&'static GpuPeak),
}

/// The peak MFU divides by, and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peak {
    /// The peak, in TFLOP/s.
    pub tflops: f64,
    /// The precision of the table's figure (the precision asked for; with
    /// a configured peak, whatever the user measured).
    pub precision: Precision,
    /// The configuration or the table's row.
    pub source: PeakSource,
}

/// Why there is no peak (and so no MFU).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoPeak {
    /// The device is not a GPU (the simulator's CPU).
    NotAGpu,
    /// The GPU, named so, is a MIG instance.
    MigInstance(String),
    /// No row of [`KNOWN_GPUS`] matches the GPU, named so.
    UnknownGpu(String),
}

impl fmt::Display for NoPeak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoPeak::NotAGpu => f.write_str("the device is not a GPU, and the table of known GPUs has no peak for it"),
            NoPeak::MigInstance(name) => write!(
                f,
                "GPU \"{name}\" is a MIG instance, a slice of a GPU whose share of the peak the table of known GPUs does not know"
            ),
            NoPeak::UnknownGpu(name) => write!(f, "GPU \"{name}\" is not in the table of known GPUs"),
        }
    }
}

/// The peak for the device a process opened, or why there is none:
/// `configured` (`<PREFIX>_PEAK_TFLOPS`) when set; else, for a GPU named
/// `gpu_name` (`None`: the device is not a GPU) that is not a MIG instance
/// (by its name, or `mig` when the caller knows so otherwise, e.g. from
/// `CUDA_VISIBLE_DEVICES`), its row of [`KNOWN_GPUS`] at `precision`.
///
/// ```
/// use lens_training::mfu::{NoPeak, PeakSource, resolve_peak};
/// use lens_training::mfu::Precision;
///
/// let peak = resolve_peak(None, Some("NVIDIA H200"), false, Precision::Fp32).unwrap();
/// assert_eq!(peak.tflops, 67.0);
/// assert!(matches!(peak.source, PeakSource::Known(row) if row.name == "H200"));
/// assert_eq!(resolve_peak(None, None, false, Precision::Fp32), Err(NoPeak::NotAGpu));
/// let mig = resolve_peak(None, Some("NVIDIA H200"), true, Precision::Fp32);
/// assert_eq!(mig, Err(NoPeak::MigInstance("NVIDIA H200".to_string())));
/// // The configuration answers for any device.
/// assert_eq!(resolve_peak(Some(40.0), None, false, Precision::Bf16).unwrap().source, PeakSource::Configured);
/// ```
pub fn resolve_peak(
    configured: Option<f64>,
    gpu_name: Option<&str>,
    mig: bool,
    precision: Precision,
) -> Result<Peak, NoPeak> {
    if let Some(tflops) = configured {
        return Ok(Peak { tflops, precision, source: PeakSource::Configured });
    }
    let name = gpu_name.ok_or(NoPeak::NotAGpu)?;
    if mig || is_mig_instance(name) {
        return Err(NoPeak::MigInstance(name.to_string()));
    }
    let row = known_gpu(name).ok_or_else(|| NoPeak::UnknownGpu(name.to_string()))?;
    Ok(Peak { tflops: row.for_precision(precision), precision, source: PeakSource::Known(row) })
}

/// The model FLOPs of an iteration, as the program counts them: the FLOP
/// count MFU divides the peak into. A closure `Fn(u64) -> f64` is one (the
/// iteration's number in, its FLOPs out); a model that knows its shapes
/// implements it (the simulator's count, `6 × parameters × tokens` plus
/// attention, is one implementation).
///
/// The count is the whole job's FLOPs for one iteration (every rank's
/// share, as a framework's formula gives it for the global batch); the
/// event API divides by the world size for the per-GPU figure.
///
/// ```
/// use lens_training::mfu::FlopCount;
///
/// let per_token = 6.0 * 124e6; // 6 × parameters
/// let tokens = 8.0 * 1024.0;
/// let count = move |_iteration: u64| per_token * tokens;
/// assert_eq!(count.flops(1), 6.0 * 124e6 * 8.0 * 1024.0);
/// ```
pub trait FlopCount: Send + Sync {
    /// The model FLOPs of iteration `iteration` (1-based), the whole job's.
    fn flops(&self, iteration: u64) -> f64;
}

impl<F: Fn(u64) -> f64 + Send + Sync> FlopCount for F {
    fn flops(&self, iteration: u64) -> f64 {
        self(iteration)
    }
}

/// MFU over a window: `flops` model FLOPs (the whole job's) done in
/// `seconds` of step time, on `world_size` GPUs of `peak_tflops` each:
/// `flops / seconds / world_size / (peak_tflops × 10¹²)`. `None` when a
/// figure is unknown, zero or not finite.
///
/// ```
/// use lens_training::mfu::mfu_of;
///
/// // 2 iterations of 1.5 PFLOP on 8 GPUs in 1 s each: 187.5 TFLOP/s per GPU.
/// assert_eq!(mfu_of(3e15, 2.0, 8, Some(375.0)), Some(0.5));
/// assert_eq!(mfu_of(3e15, 0.0, 8, Some(375.0)), None);
/// assert_eq!(mfu_of(3e15, 2.0, 8, None), None);
/// ```
pub fn mfu_of(flops: f64, seconds: f64, world_size: u32, peak_tflops: Option<f64>) -> Option<f64> {
    if !(flops.is_finite() && flops >= 0.0 && seconds.is_finite() && seconds > 0.0 && world_size > 0) {
        return None;
    }
    mfu(Some(flops / seconds / f64::from(world_size) / 1e12), peak_tflops)
}

/// MFU from the achieved model TFLOP/s per GPU and the peak; `None` when
/// either is unknown or not a positive finite number.
pub fn mfu(achieved_tflops: Option<f64>, peak_tflops: Option<f64>) -> Option<f64> {
    match (achieved_tflops, peak_tflops) {
        (Some(achieved), Some(peak)) if achieved.is_finite() && achieved >= 0.0 && peak.is_finite() && peak > 0.0 => {
            Some(achieved / peak)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row `device_name` matches, by name.
    fn row(device_name: &str) -> Option<&'static str> {
        known_gpu(device_name).map(|gpu| gpu.name)
    }

    #[test]
    fn real_device_names_find_their_rows() {
        // Names as the CUDA driver (cuDeviceGetName) and nvidia-smi print them.
        for (device, expected) in [
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA H100 PCIe", "H100 PCIe"),
            ("NVIDIA H100 NVL", "H100 NVL"),
            ("NVIDIA H200", "H200"),
            ("NVIDIA H200 NVL", "H200 NVL"),
            ("NVIDIA GH200 480GB", "GH200"),
            ("NVIDIA B200", "B200"),
            ("NVIDIA A100-SXM4-80GB", "A100"),
            ("NVIDIA A100-SXM4-40GB", "A100"),
            ("NVIDIA A100 80GB PCIe", "A100"),
            ("NVIDIA A100-PCIE-40GB", "A100"),
            ("NVIDIA L40S", "L40S"),
            ("NVIDIA L40", "L40"),
            ("NVIDIA L4", "L4"),
            ("NVIDIA A10", "A10"),
        ] {
            assert_eq!(row(device), Some(expected), "{device}");
        }
        // The figures of the rows the simulator and a bf16 job divide by.
        assert_eq!(known_peak_tflops("NVIDIA H100 80GB HBM3", Precision::Bf16), Some(989.4));
        assert_eq!(known_peak_tflops("NVIDIA H100 80GB HBM3", Precision::Fp32), Some(67.0));
        assert_eq!(known_peak_tflops("NVIDIA H200", Precision::Bf16), Some(989.4));
        assert_eq!(known_peak_tflops("NVIDIA H200", Precision::Fp32), Some(67.0));
        assert_eq!(known_peak_tflops("NVIDIA H100 PCIe", Precision::Bf16), Some(756.5));
        assert_eq!(known_peak_tflops("NVIDIA H200 NVL", Precision::Fp16), Some(835.5));
        assert_eq!(known_peak_tflops("NVIDIA A100-SXM4-80GB", Precision::Fp32), Some(19.5));
        assert_eq!(known_peak_tflops("NVIDIA A100 80GB PCIe", Precision::Bf16), Some(312.0));
        assert_eq!(known_peak_tflops("NVIDIA GH200 480GB", Precision::Bf16), Some(989.4));
        assert_eq!(known_peak_tflops("NVIDIA L40", Precision::Fp32), Some(90.5));
        assert_eq!(known_peak_tflops("NVIDIA L40", Precision::Bf16), Some(181.05));
        assert_eq!(known_peak_tflops("NVIDIA L40S", Precision::Fp32), Some(91.6));
        assert_eq!(known_peak_tflops("NVIDIA L40S", Precision::Bf16), Some(362.05));
        assert_eq!(known_peak_tflops("NVIDIA L4", Precision::Bf16), Some(121.0));
        assert_eq!(known_peak_tflops("NVIDIA A10", Precision::Bf16), Some(125.0));
        // Case is ignored, blanks and dashes both separate.
        assert_eq!(row("nvidia h100 pcie"), Some("H100 PCIe"));
        assert_eq!(row("  NVIDIA--H200  "), Some("H200"));
    }

    #[test]
    fn names_that_are_not_a_known_whole_gpu_have_no_row() {
        for device in [
            "cuda:0",
            "cuda:1 (failed over to the cpu)",
            "cpu",
            "",
            "Tesla T4",
            "NVIDIA A10G",
            "NVIDIA H800",
            "NVIDIA GeForce RTX 4090",
            "NVIDIA RTX A6000",
            // A MIG instance is a slice of a known GPU.
            "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
            "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        ] {
            assert_eq!(row(device), None, "{device}");
            assert_eq!(known_peak_tflops(device, Precision::Fp32), None, "{device}");
        }
        assert!(is_mig_instance("NVIDIA H200 MIG 1g.18gb") && is_mig_instance("MIG-1b2c3d4e"));
        assert!(!is_mig_instance("NVIDIA H200") && !is_mig_instance("NVIDIA MIGHTY"));
    }

    #[test]
    fn each_row_is_reachable_so_the_specific_rows_come_first() {
        for gpu in KNOWN_GPUS {
            assert_eq!(row(&format!("NVIDIA {}", gpu.name)), Some(gpu.name), "an earlier row hides {}", gpu.name);
            assert!(gpu.fp32 > 0.0 && gpu.bf16 >= gpu.fp32 && gpu.fp16 == gpu.bf16, "{gpu:?}");
            assert!(gpu.source.contains("datasheet"), "{gpu:?}");
        }
    }

    #[test]
    fn the_resolved_peak_names_its_row_or_why_there_is_none() {
        let peak = resolve_peak(None, Some("NVIDIA H200"), false, Precision::Fp32).unwrap();
        assert_eq!((peak.tflops, peak.precision), (67.0, Precision::Fp32));
        let PeakSource::Known(gpu) = peak.source else { panic!("{peak:?}") };
        assert_eq!((gpu.name, gpu.source), ("H200", H200_SHEET));
        // The configured peak wins, over the table and over MIG.
        let configured = resolve_peak(Some(12.5), Some("NVIDIA H200 MIG 1g.18gb"), true, Precision::Bf16);
        assert_eq!(configured, Ok(Peak { tflops: 12.5, precision: Precision::Bf16, source: PeakSource::Configured }));
        let mig = resolve_peak(None, Some("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), false, Precision::Fp32).unwrap_err();
        assert!(mig.to_string().contains("\"NVIDIA A100-SXM4-40GB MIG 1g.5gb\" is a MIG instance"), "{mig}");
        let unknown = resolve_peak(None, Some("Tesla T4"), false, Precision::Fp32).unwrap_err();
        assert_eq!(unknown.to_string(), "GPU \"Tesla T4\" is not in the table of known GPUs");
        assert_eq!(resolve_peak(None, None, false, Precision::Fp32), Err(NoPeak::NotAGpu));
    }

    #[test]
    fn mfu_is_absent_without_a_usable_peak() {
        assert_eq!(mfu(Some(1.0), Some(0.0)), None);
        assert_eq!(mfu(Some(f64::NAN), Some(10.0)), None);
        assert_eq!(mfu(None, Some(10.0)), None);
        assert_eq!(mfu(Some(2.5), Some(10.0)), Some(0.25));
    }
}
