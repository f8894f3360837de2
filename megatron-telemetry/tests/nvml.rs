//! The NVML module: the `CUDA_VISIBLE_DEVICES` mapping, and the paths where
//! NVML is absent or unusable (no attributes, no panic, quickly). On a host
//! with the NVIDIA driver the same tests check the identity NVML reports.

use std::time::{Duration, Instant};

use lens_fallbacks::attr::AttrValue;
use megatron_telemetry::nvml::{Nvml, gpu_count, gpu_identity, memory_used_bytes, physical_gpu_index};

fn cvd(value: &str) -> [(&str, &str); 1] {
    [("CUDA_VISIBLE_DEVICES", value)]
}

#[test]
fn local_rank_maps_through_cuda_visible_devices() {
    assert_eq!(physical_gpu_index(2, &cvd("0,1,2,3")), Some(2));
    assert_eq!(physical_gpu_index(0, &cvd("3,1")), Some(3));
    assert_eq!(physical_gpu_index(1, &cvd("3,1")), Some(1));
    assert_eq!(physical_gpu_index(1, &cvd("6, 7")), Some(7), "blanks around an entry are allowed");
}

#[test]
fn unmappable_entries_give_no_index() {
    assert_eq!(physical_gpu_index(0, &cvd("GPU-8a4e2c1f-3b5d-4e6f-9a0b-1c2d3e4f5a6b")), None);
    assert_eq!(physical_gpu_index(0, &cvd("MIG-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901")), None);
    assert_eq!(physical_gpu_index(1, &cvd("0,GPU-8a4e2c1f")), None);
    assert_eq!(physical_gpu_index(4, &cvd("0,1,2,3")), None, "out of range");
    assert_eq!(physical_gpu_index(u32::MAX, &cvd("0")), None, "far out of range");
    assert_eq!(physical_gpu_index(0, &cvd("")), None, "blank: no GPU is visible");
    assert_eq!(physical_gpu_index(0, &cvd("-1")), None, "negative");
}

#[test]
fn unset_cuda_visible_devices_uses_the_local_rank() {
    let env: [(&str, &str); 1] = [("LOCAL_RANK", "5")];
    assert_eq!(physical_gpu_index(5, &env), Some(5));
    assert_eq!(physical_gpu_index(0, &env), Some(0));
}

#[test]
fn an_unmappable_rank_gets_no_gpu_identity() {
    for value in ["MIG-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", "", "0,1"] {
        assert!(gpu_identity(3, &cvd(value)).is_empty(), "CUDA_VISIBLE_DEVICES={value:?}");
    }
}

#[test]
fn a_missing_or_foreign_library_loads_as_none_without_panicking() {
    let started = Instant::now();
    assert!(Nvml::load_from("/nonexistent/lens-test/libnvidia-ml.so.1").is_none());
    // A real shared library that is not NVML: loads, lacks `nvmlInit_v2`.
    assert!(Nvml::load_from("libc.so.6").is_none());
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

#[test]
fn gpu_identity_is_empty_without_nvml_and_complete_with_it() {
    let started = Instant::now();
    let attrs = gpu_identity(0, &[("LOCAL_RANK", "0")]);
    match Nvml::load() {
        None => {
            assert!(attrs.is_empty(), "no NVML, yet {attrs:?}");
            assert_eq!(gpu_count(), None);
            assert_eq!(memory_used_bytes(0), None);
            assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        }
        Some(nvml) => {
            let count = nvml.gpu_count();
            assert_eq!(count, gpu_count());
            if count.unwrap_or(0) == 0 {
                assert!(attrs.is_empty());
                return;
            }
            let get = |key: &str| attrs.iter().find(|kv| kv.key == key).map(|kv| kv.value.clone());
            assert_eq!(get("dl.gpu.index"), Some(AttrValue::I64(0)));
            assert!(matches!(get("dl.gpu.name"), Some(AttrValue::Str(name)) if !name.is_empty()));
            assert!(matches!(get("dl.gpu.uuid"), Some(AttrValue::Str(uuid)) if uuid.starts_with("GPU-")));
            assert_eq!(attrs, nvml.gpu_identity(0));
            let used = nvml.memory_used_bytes(0).expect("memory of GPU 0");
            assert!(used <= nvml.memory_total_bytes(0).expect("total memory of GPU 0"));
            assert!(nvml.gpu_identity(count.unwrap_or(0)).is_empty(), "no GPU past the last one");
            assert_eq!(nvml.process_memory_used_bytes(0, u32::MAX), None, "no such process");
        }
    }
}

#[test]
fn the_handle_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Nvml>();
}
