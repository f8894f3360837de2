//! The device choice as a user meets it, on any machine: `CUDA_VISIBLE_DEVICES`
//! is set empty, so that even a machine with a GPU behaves as one without
//! (the driver then reports no device), and the outcome does not depend on
//! where the tests run. The GPU itself is exercised by `cargo xtask
//! gpu-check` on a GPU machine (docs/gpu.md).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::temp_dir;

const BIN: &str = env!("CARGO_BIN_EXE_megatron-train-sim");

/// Variables of the test runner's environment that would change the runs.
const CLEARED: &[&str] = &[
    "MEGATRON_OTEL_ENABLED",
    "NEMO_LENS_ENABLED",
    "MEGATRON_OTEL_EXPORTER",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "MEGATRON_TRAIN_SIM_ROLE",
];

/// Runs the simulator with no visible GPU, for at most 60 s.
fn run(dir: &PathBuf, args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.current_dir(dir).args(args).env("CUDA_VISIBLE_DEVICES", "").stdin(Stdio::null());
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    for variable in CLEARED {
        command.env_remove(variable);
    }
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the simulator did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn device_cuda_without_a_usable_gpu_exits_2_saying_what_is_missing() {
    let dir = temp_dir("cuda");
    for args in [&["--device", "cuda", "--train-iters", "2"][..], &["--device", "cuda", "--nproc-per-node", "2"]] {
        let out = run(&dir, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("error: --device cuda: "), "{stderr}");
        assert!(stderr.contains("use --device cpu or --device auto"), "{stderr}");
        if cfg!(feature = "cuda") {
            // No driver library at all, or a driver that sees no GPU.
            assert!(stderr.contains("libcuda.so.1") || stderr.contains("sees no GPU"), "{stderr}");
        } else {
            assert!(stderr.contains("--features cuda"), "{stderr}");
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.contains("launching"), "ranks were started: {stderr}");
        assert!(!stderr.contains("iter "), "training started: {stderr}");
    }
}

#[test]
fn device_auto_without_a_gpu_trains_on_the_cpu() {
    let dir = temp_dir("auto");
    let summary = dir.join("summary.json");
    let summary_arg = summary.to_str().unwrap();
    let out = run(
        &dir,
        &[
            "--device",
            "auto",
            "--train-iters",
            "3",
            "--hidden-size",
            "32",
            "--seq-length",
            "8",
            "--summary-json",
            summary_arg,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // No GPU is not worth a word under auto.
    assert!(!stderr.contains("--device auto"), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(summary["device"], "cpu");
    assert_eq!(summary["final_iteration"], 3);
    // On the CPU the peak memory is the resident set: megabytes, not zero.
    assert!(summary["peak_memory_bytes"].as_u64().is_some_and(|bytes| bytes > 1 << 20), "{summary}");
}
