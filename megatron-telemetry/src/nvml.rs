//! The one place that reads NVML, the NVIDIA Management Library: the GPU
//! identity resource attributes (`dl.gpu.*`, as the original names them), and the GPU count
//! and memory the simulator reports.
//!
//! NVML is loaded at run time (`dlopen("libnvidia-ml.so.1")`, through the
//! `nvml-wrapper` crate), never linked: a build needs no CUDA, and a
//! machine without the driver, without a GPU, or with a broken library
//! gets no attributes and `None`s, never an error or a panic. Loading and
//! initialising NVML takes tens of milliseconds on a GPU host, so:
//!
//! - the identity is a lazy resource attribute, computed only on exporting
//!   ranks, after the export decision:
//!   `SetupOptions::new().with_lazy_resource(move || gpu_identity(local_rank, &ProcessEnv))`;
//! - repeated queries (the simulator's memory readings) go through one
//!   [`Nvml`] handle, which keeps the library loaded until it is dropped.
//!
//! NVML numbers GPUs physically and ignores `CUDA_VISIBLE_DEVICES`;
//! [`physical_gpu_index`] maps a local rank to the physical index the way
//! the original does (before `torch.cuda.set_device`, rank `i` uses the
//! `i`-th visible device). A `CUDA_VISIBLE_DEVICES` that names devices by
//! UUID or MIG instance cannot be mapped, and yields no identity.
//!
//! ```
//! use megatron_telemetry::nvml::{gpu_identity, physical_gpu_index};
//!
//! assert_eq!(physical_gpu_index(1, &[("CUDA_VISIBLE_DEVICES", "4,5,6,7")]), Some(5));
//! assert_eq!(physical_gpu_index(1, &[("RANK", "1")]), Some(1));
//! // MIG instances cannot be mapped to a physical index: no attributes, and NVML is not even loaded.
//! assert!(gpu_identity(0, &[("CUDA_VISIBLE_DEVICES", "MIG-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901")]).is_empty());
//! ```

use std::ffi::OsStr;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use lens_fallbacks::attr::KeyValue;
use lens_fallbacks::env::EnvSource;
use lens_fallbacks::semconv;
use nvml_wrapper::enums::device::UsedGpuMemory;

/// The library NVML is loaded from on Linux (the driver's soname, present
/// wherever the NVIDIA driver is installed).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// The physical GPU index that local rank `local_rank` uses, as NVML
/// numbers GPUs.
///
/// - `CUDA_VISIBLE_DEVICES` unset: `local_rank`.
/// - Set: its `local_rank`-th comma-separated entry, when that entry is a
///   non-negative integer (surrounding blanks allowed).
/// - `None` when the entry is missing (out of range, or the variable is
///   blank) or is not an integer (a `GPU-…` UUID or a `MIG-…` instance).
///
/// ```
/// use megatron_telemetry::nvml::physical_gpu_index;
///
/// assert_eq!(physical_gpu_index(0, &[("CUDA_VISIBLE_DEVICES", "3,1")]), Some(3));
/// assert_eq!(physical_gpu_index(2, &[("CUDA_VISIBLE_DEVICES", "3,1")]), None);
/// assert_eq!(physical_gpu_index(0, &[("CUDA_VISIBLE_DEVICES", "GPU-8a4e2c1f")]), None);
/// ```
pub fn physical_gpu_index(local_rank: u32, env: &(impl EnvSource + ?Sized)) -> Option<u32> {
    let Some(visible) = env.var("CUDA_VISIBLE_DEVICES") else {
        return Some(local_rank);
    };
    let entry = visible.split(',').nth(usize::try_from(local_rank).ok()?)?;
    entry.trim().parse::<u32>().ok()
}

/// Whether `CUDA_VISIBLE_DEVICES` gives CUDA device `ordinal` (local rank
/// `ordinal`'s device) as a MIG instance: its entry is `MIG-…` (a MIG UUID,
/// or the older `MIG-GPU-…/<gi>/<ci>` form). A MIG instance has a share of
/// its GPU's peak, so [`lens_training::mfu`] gives it none.
///
/// ```
/// use megatron_telemetry::nvml::visible_device_is_mig;
///
/// let env = [("CUDA_VISIBLE_DEVICES", "0, MIG-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901")];
/// assert!(!visible_device_is_mig(0, &env) && visible_device_is_mig(1, &env));
/// assert!(!visible_device_is_mig(0, &[("RANK", "0")]));
/// ```
pub fn visible_device_is_mig(ordinal: u32, env: &(impl EnvSource + ?Sized)) -> bool {
    let Some(visible) = env.var("CUDA_VISIBLE_DEVICES") else {
        return false;
    };
    let entry = usize::try_from(ordinal).ok().and_then(|ordinal| visible.split(',').nth(ordinal));
    entry.is_some_and(|entry| entry.trim().starts_with("MIG-"))
}

/// The GPU identity of local rank `local_rank`: `dl.gpu.index` (the
/// physical index, see [`physical_gpu_index`]), `dl.gpu.name`,
/// `dl.gpu.uuid`, and, when NVML reports them, `dl.gpu.serial` and
/// `dl.gpu.pci_bus_id`. With `CUDA_VISIBLE_DEVICES` unset it adds
/// `host.gpu.count`, the GPUs NVML counts on the host (the original's
/// `nvidia-smi --query-gpu=count`; when the variable is set, lens-core's
/// `detect_host` counts its entries).
///
/// Empty when the index cannot be mapped (checked before NVML is loaded),
/// when NVML cannot be loaded or initialised; without the identity when
/// there is no such GPU, or when the name or UUID cannot be read. Loads
/// NVML and releases it again:
/// call it once, on an exporting rank (as a lazy resource attribute), or
/// use [`Nvml::gpu_identity`] with a handle you keep.
pub fn gpu_identity(local_rank: u32, env: &(impl EnvSource + ?Sized)) -> Vec<KeyValue> {
    let Some(index) = physical_gpu_index(local_rank, env) else {
        return Vec::new();
    };
    let Some(nvml) = Nvml::load() else {
        return Vec::new();
    };
    let mut attrs = nvml.gpu_identity(index);
    if env.var("CUDA_VISIBLE_DEVICES").is_none()
        && let Some(count) = nvml.gpu_count()
    {
        attrs.push(KeyValue::new(semconv::HOST_GPU_COUNT, i64::from(count)));
    }
    attrs
}

/// The number of GPUs NVML sees on this host (all of them, whatever
/// `CUDA_VISIBLE_DEVICES` says); `None` without NVML. Loads NVML and
/// releases it again.
pub fn gpu_count() -> Option<u32> {
    Nvml::load()?.gpu_count()
}

/// The memory in use on the GPU with physical index `index`, in bytes, by
/// every process together; `None` without NVML or without that GPU. Loads
/// NVML and releases it again: for repeated readings keep an [`Nvml`].
pub fn memory_used_bytes(index: u32) -> Option<u64> {
    Nvml::load()?.memory_used_bytes(index)
}

/// A loaded and initialised NVML, for repeated queries. Dropping it shuts
/// NVML down.
///
/// Every query returns an `Option` (or an empty `Vec`): an NVML error, a
/// missing GPU or a query the GPU does not support is `None`, never a
/// panic.
///
/// ```
/// use megatron_telemetry::nvml::Nvml;
///
/// // On a host without the NVIDIA driver, `load` is `None` and nothing runs.
/// if let Some(nvml) = Nvml::load() {
///     for index in 0..nvml.gpu_count().unwrap_or(0) {
///         let _used = nvml.memory_used_bytes(index);
///     }
/// }
/// ```
pub struct Nvml {
    inner: nvml_wrapper::Nvml,
}

impl fmt::Debug for Nvml {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nvml").finish_non_exhaustive()
    }
}

impl Nvml {
    /// Loads [`NVML_LIBRARY`] and initialises NVML; `None` when the library
    /// is absent or is not NVML, or when initialisation fails (no driver,
    /// no permission).
    #[cold]
    pub fn load() -> Option<Nvml> {
        Nvml::load_from(NVML_LIBRARY)
    }

    /// Like [`load`](Nvml::load), from another library path or name (a
    /// driver installed outside the loader's search path).
    #[cold]
    pub fn load_from(library: impl AsRef<OsStr>) -> Option<Nvml> {
        let library = library.as_ref();
        guarded(|| nvml_wrapper::Nvml::builder().lib_path(library).init().ok()).flatten().map(|inner| Nvml { inner })
    }

    /// The number of GPUs NVML sees (physical, all of them).
    pub fn gpu_count(&self) -> Option<u32> {
        guarded(|| self.inner.device_count().ok()).flatten()
    }

    /// The identity of the GPU with *physical* index `index` (see
    /// [`gpu_identity`] for the keys); empty when there is no such GPU or
    /// its name or UUID cannot be read.
    pub fn gpu_identity(&self, index: u32) -> Vec<KeyValue> {
        guarded(|| {
            let device = self.inner.device_by_index(index).ok()?;
            let name = device.name().ok()?;
            let uuid = device.uuid().ok()?;
            let mut attrs = vec![
                KeyValue::new(semconv::DL_GPU_INDEX, index),
                KeyValue::new(semconv::DL_GPU_NAME, name),
                KeyValue::new(semconv::DL_GPU_UUID, uuid),
            ];
            if let Some(serial) = device.serial().ok().filter(|s| !s.trim().is_empty()) {
                attrs.push(KeyValue::new(semconv::DL_GPU_SERIAL, serial));
            }
            if let Some(bus_id) = device.pci_info().ok().map(|pci| pci.bus_id).filter(|s| !s.trim().is_empty()) {
                attrs.push(KeyValue::new(semconv::DL_GPU_PCI_BUS_ID, bus_id));
            }
            Some(attrs)
        })
        .flatten()
        .unwrap_or_default()
    }

    /// The memory in use on the GPU with physical index `index`, in bytes,
    /// by every process together.
    pub fn memory_used_bytes(&self, index: u32) -> Option<u64> {
        guarded(|| Some(self.inner.device_by_index(index).ok()?.memory_info().ok()?.used)).flatten()
    }

    /// The memory installed on the GPU with physical index `index`, in
    /// bytes.
    pub fn memory_total_bytes(&self, index: u32) -> Option<u64> {
        guarded(|| Some(self.inner.device_by_index(index).ok()?.memory_info().ok()?.total)).flatten()
    }

    /// The memory process `pid` holds on the GPU with physical index
    /// `index`, in bytes, summed over its compute contexts; `None` when the
    /// process has none there, or when NVML cannot tell (some platforms
    /// report no per-process usage). NVML reports the host's process ids:
    /// inside a container with its own pid namespace, pass the host pid.
    pub fn process_memory_used_bytes(&self, index: u32, pid: u32) -> Option<u64> {
        guarded(|| {
            let processes = self.inner.device_by_index(index).ok()?.running_compute_processes().ok()?;
            let mut total = None;
            for process in processes.iter().filter(|p| p.pid == pid) {
                if let UsedGpuMemory::Used(bytes) = process.used_gpu_memory {
                    total = Some(total.unwrap_or(0_u64).saturating_add(bytes));
                }
            }
            total
        })
        .flatten()
    }
}

/// Runs an NVML query, turning a panic inside the wrapper into `None`: the
/// telemetry layer must never take a training job down.
fn guarded<T>(query: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(query)).ok()
}
