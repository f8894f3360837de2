//! Model FLOPs utilisation (MFU): the model's FLOP/s per GPU over the GPU's
//! peak, the headline efficiency figure torchtitan reports (issue #13).
//!
//! The peak comes from `<PREFIX>_PEAK_TFLOPS` (lens-core's
//! `LensConfig::peak_tflops`, validated there) when set, else from
//! [`KNOWN_GPUS`], a table keyed by a substring of the NVML (or CUDA)
//! device name and the training precision. A GPU that is not in the table
//! (and the simulator's CPU device) has no peak, and MFU is then absent,
//! never guessed.
//!
//! ```
//! use megatron_telemetry::mfu::{known_peak_tflops, mfu, peak_tflops};
//! use megatron_telemetry::resource::Precision;
//!
//! assert_eq!(known_peak_tflops("NVIDIA H100 80GB HBM3", Precision::Bf16), Some(989.4));
//! assert_eq!(known_peak_tflops("cpu", Precision::Bf16), None);
//! // The configured peak wins over the table.
//! assert_eq!(peak_tflops(Some(500.0), "NVIDIA H100 80GB HBM3", Precision::Bf16), Some(500.0));
//! assert_eq!(mfu(Some(494.7), Some(989.4)), Some(0.5));
//! assert_eq!(mfu(Some(494.7), None), None);
//! ```

use crate::resource::Precision;

/// One known GPU: a substring of its device name, and its dense peaks in
/// TFLOP/s (no structured sparsity).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuPeak {
    /// A substring of the NVML device name (first match in table order wins,
    /// so the more specific names come first).
    pub name_contains: &'static str,
    /// Dense BF16 tensor-core peak.
    pub bf16: f64,
    /// Dense FP16 tensor-core peak.
    pub fp16: f64,
    /// FP32 peak (CUDA cores, no TF32: PyTorch does not use TF32 for
    /// matrix products unless asked).
    pub fp32: f64,
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
}

/// Dense peaks of known GPUs, from the vendor datasheets (the sparsity
/// figures halved where the sheet gives only those):
///
/// - H100 SXM, PCIe, NVL: "NVIDIA H100 Tensor Core GPU" datasheet
///   (<https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet>):
///   BF16/FP16 1,979 / 1,513 / 1,671 TFLOPS with sparsity, FP32 67 / 51 / 60.
/// - H200 SXM, NVL: "NVIDIA H200 Tensor Core GPU" datasheet
///   (<https://www.nvidia.com/en-us/data-center/h200/>): BF16/FP16 1,979 /
///   1,671 with sparsity, FP32 67 / 60. GH200's Hopper GPU as H100 SXM
///   ("NVIDIA GH200 Grace Hopper Superchip" datasheet).
/// - B200: "NVIDIA HGX B200" datasheet (<https://www.nvidia.com/en-us/data-center/hgx/>):
///   8 GPUs 36 PFLOPS FP16/BF16 with sparsity, 600 TFLOPS FP32.
/// - A100 (SXM and PCIe): "NVIDIA A100 Tensor Core GPU" datasheet
///   (<https://www.nvidia.com/en-us/data-center/a100/>): BF16/FP16 312, FP32 19.5.
/// - L40S: "NVIDIA L40S" datasheet (<https://www.nvidia.com/en-us/data-center/l40s/>):
///   BF16/FP16 362.05 dense (733 with sparsity), FP32 91.6.
/// - L4: "NVIDIA L4 Tensor Core GPU" datasheet: BF16/FP16 242 with
///   sparsity, FP32 30.3. A10: "NVIDIA A10 Tensor Core GPU" datasheet:
///   BF16/FP16 125, FP32 31.2.
pub const KNOWN_GPUS: &[GpuPeak] = &[
    GpuPeak { name_contains: "GH200", bf16: 989.4, fp16: 989.4, fp32: 67.0 },
    GpuPeak { name_contains: "H200 NVL", bf16: 835.5, fp16: 835.5, fp32: 60.0 },
    GpuPeak { name_contains: "H200", bf16: 989.4, fp16: 989.4, fp32: 67.0 },
    GpuPeak { name_contains: "H100 PCIe", bf16: 756.5, fp16: 756.5, fp32: 51.0 },
    GpuPeak { name_contains: "H100 NVL", bf16: 835.5, fp16: 835.5, fp32: 60.0 },
    GpuPeak { name_contains: "H100", bf16: 989.4, fp16: 989.4, fp32: 67.0 },
    GpuPeak { name_contains: "B200", bf16: 2250.0, fp16: 2250.0, fp32: 75.0 },
    GpuPeak { name_contains: "A100", bf16: 312.0, fp16: 312.0, fp32: 19.5 },
    GpuPeak { name_contains: "L40S", bf16: 362.05, fp16: 362.05, fp32: 91.6 },
    GpuPeak { name_contains: "L4", bf16: 121.0, fp16: 121.0, fp32: 30.3 },
    GpuPeak { name_contains: "A10", bf16: 125.0, fp16: 125.0, fp32: 31.2 },
];

/// The table's peak for the GPU named `device_name` at `precision`.
pub fn known_peak_tflops(device_name: &str, precision: Precision) -> Option<f64> {
    KNOWN_GPUS.iter().find(|gpu| device_name.contains(gpu.name_contains)).map(|gpu| gpu.for_precision(precision))
}

/// The peak to divide by: `configured` (`<PREFIX>_PEAK_TFLOPS`) when set,
/// else the table's.
pub fn peak_tflops(configured: Option<f64>, device_name: &str, precision: Precision) -> Option<f64> {
    configured.or_else(|| known_peak_tflops(device_name, precision))
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

    #[test]
    fn specific_names_win_over_their_prefixes() {
        assert_eq!(known_peak_tflops("NVIDIA H100 PCIe", Precision::Bf16), Some(756.5));
        assert_eq!(known_peak_tflops("NVIDIA H200 NVL", Precision::Fp16), Some(835.5));
        assert_eq!(known_peak_tflops("NVIDIA H200", Precision::Fp32), Some(67.0));
        assert_eq!(known_peak_tflops("NVIDIA L40S", Precision::Bf16), Some(362.05));
        assert_eq!(known_peak_tflops("NVIDIA L4", Precision::Bf16), Some(121.0));
        assert_eq!(known_peak_tflops("NVIDIA A100-SXM4-80GB", Precision::Bf16), Some(312.0));
        assert_eq!(known_peak_tflops("NVIDIA A10", Precision::Bf16), Some(125.0));
        assert_eq!(known_peak_tflops("NVIDIA GH200 480GB", Precision::Bf16), Some(989.4));
        assert_eq!(known_peak_tflops("Tesla T4", Precision::Bf16), None);
    }

    #[test]
    fn mfu_is_absent_without_a_usable_peak() {
        assert_eq!(mfu(Some(1.0), Some(0.0)), None);
        assert_eq!(mfu(Some(f64::NAN), Some(10.0)), None);
        assert_eq!(mfu(None, Some(10.0)), None);
        assert_eq!(mfu(Some(2.5), Some(10.0)), Some(0.25));
    }
}
