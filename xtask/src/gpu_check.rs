//! `cargo xtask gpu-check`: the simulator on a real NVIDIA GPU.
//!
//! GPU machines may have the driver but no Rust toolchain and no network,
//! so the check is a package: a release `megatron-train-sim` built here with
//! the `cuda` feature (which loads the CUDA driver at run time, so it builds
//! without CUDA) plus `gpu-check.sh`, in `target/gpu-check/`. Copy that
//! directory to the GPU machine and run `sh gpu-check.sh` there (see
//! docs/gpu.md for what it runs and reports).
//!
//! - `cargo xtask gpu-check --build`: build and pack only.
//! - `cargo xtask gpu-check`: build, pack, then run the script when this
//!   machine has `nvidia-smi`; otherwise say that no GPU is present and
//!   succeed (the package is ready to copy).
//! - `--debug`: a debug build instead of a release one (quicker to try the
//!   packing; the GPU run is slower).
//!
//! The package must start on the GPU machine's C library: the binary's
//! newest `GLIBC_2.*` symbol version is reported and must not exceed
//! [`MAX_GLIBC`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{cargo, run_cmd, say, workspace_root};

/// The script, shipped next to the binary.
const SCRIPT: &str = include_str!("gpu-check.sh");

/// The newest glibc the binary may need (Debian 12's; the GPU machines the
/// check is meant for have it or newer).
const MAX_GLIBC: (u32, u32) = (2, 36);

/// Runs the task with its arguments (after `gpu-check`).
pub(crate) fn run(args: &[String]) -> Result<()> {
    let (mut build_only, mut debug) = (false, false);
    for arg in args {
        match arg.as_str() {
            "--build" => build_only = true,
            "--debug" => debug = true,
            other => bail!("unknown option '{other}' for gpu-check (accepted: --build, --debug)"),
        }
    }
    let package = build_and_pack(debug)?;
    if build_only {
        return Ok(());
    }
    if find_in_path("nvidia-smi").is_none() {
        say(&format!(
            "xtask gpu-check: no NVIDIA GPU on this machine (nvidia-smi not found); the check is built but not run.\n\
             Copy {} to a machine with an NVIDIA GPU and run `sh gpu-check.sh` there (docs/gpu.md).",
            package.display()
        ));
        return Ok(());
    }
    let mut script = Command::new("sh");
    script.arg(package.join("gpu-check.sh"));
    run_cmd(script)
}

/// Builds the simulator with `--features cuda` and packs it with the script
/// into `target/gpu-check/`; returns that directory.
fn build_and_pack(debug: bool) -> Result<PathBuf> {
    let mut build = vec!["build", "-p", "megatron-train-sim", "--features", "cuda"];
    if !debug {
        build.push("--release");
    }
    run_cmd(cargo(&build))?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let target = if target.is_absolute() { target } else { workspace_root().join(target) };
    let binary = target.join(if debug { "debug" } else { "release" }).join("megatron-train-sim");
    let bytes = std::fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?;
    match newest_glibc(&bytes) {
        Some(version) if version > MAX_GLIBC => bail!(
            "{} needs glibc {}.{}, newer than the {}.{} the GPU machines have: build on an older distribution",
            binary.display(),
            version.0,
            version.1,
            MAX_GLIBC.0,
            MAX_GLIBC.1
        ),
        Some((major, minor)) => say(&format!("xtask gpu-check: the binary needs glibc {major}.{minor} or newer")),
        None => say("xtask gpu-check: the binary names no glibc version (static?)"),
    }
    let package = target.join("gpu-check");
    if package.exists() {
        std::fs::remove_dir_all(&package).with_context(|| format!("removing {}", package.display()))?;
    }
    std::fs::create_dir_all(&package).with_context(|| format!("creating {}", package.display()))?;
    let packed_binary = package.join("megatron-train-sim");
    std::fs::copy(&binary, &packed_binary).with_context(|| format!("copying {}", binary.display()))?;
    let script = package.join("gpu-check.sh");
    std::fs::write(&script, SCRIPT).with_context(|| format!("writing {}", script.display()))?;
    make_executable(&script)?;
    make_executable(&packed_binary)?;
    say(&format!(
        "xtask gpu-check: packed {} ({} MiB): megatron-train-sim, gpu-check.sh",
        package.display(),
        bytes.len() >> 20
    ));
    Ok(package)
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<()> {
    Ok(())
}

/// `program` in one of the `PATH` directories.
fn find_in_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|path| path.is_file())
}

/// The newest `GLIBC_<major>.<minor>[.<patch>]` symbol version named in an
/// ELF binary's bytes (its version-needs strings), patch ignored.
fn newest_glibc(bytes: &[u8]) -> Option<(u32, u32)> {
    const TAG: &[u8] = b"GLIBC_";
    let mut newest = None;
    let mut rest = bytes;
    while let Some(at) = rest.windows(TAG.len()).position(|w| w == TAG) {
        rest = &rest[at + TAG.len()..];
        let text: Vec<u8> = rest.iter().copied().take_while(|b| b.is_ascii_digit() || *b == b'.').collect();
        let mut parts = std::str::from_utf8(&text).ok()?.split('.').map(str::parse::<u32>);
        if let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) {
            newest = newest.max(Some((major, minor)));
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_glibc_version_is_found_among_the_binary_strings() {
        let bytes = b"\0GLIBC_2.2.5\0GLIBC_2.34\0libc.so.6\0GLIBC_2.9\0GLIBC_PRIVATE\0GLIBC_2.17\0";
        assert_eq!(newest_glibc(bytes), Some((2, 34)));
        assert_eq!(newest_glibc(b"no versions here"), None);
        assert!(newest_glibc(b"\0GLIBC_2.38\0").is_some_and(|v| v > MAX_GLIBC));
    }

    #[test]
    fn the_script_runs_the_cuda_device_and_reads_what_the_simulator_writes() {
        // Flags and summary keys the script relies on; renaming one in the
        // simulator must show up here, not on a GPU machine.
        for needle in [
            "--device cuda",
            "--nproc-per-node",
            "--summary-json",
            "MEGATRON_OTEL_EXPORTER=file",
            "MEGATRON_OTEL_FILE_DIR",
            "traces-rank",
            "dl\\.gpu",
            "peak_memory_bytes",
            "tokens_per_sec",
            "throughput_tflops_per_rank",
            "final_iteration",
            // The startup line of output.rs's mfu_peak_line, and the
            // summary's goodput.mfu.
            "megatron-train-sim: \\(MFU peak: .*\\|MFU: none: .*\\)",
            "goodput_field \"$summary\" mfu",
        ] {
            assert!(SCRIPT.contains(needle), "gpu-check.sh lacks {needle}");
        }
    }
}
