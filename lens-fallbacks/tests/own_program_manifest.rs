//! The dependency lines of `docs/own-program.md` resolve: the page's two
//! `Cargo.toml` blocks (a library `myjob-model`, the application `myjob`)
//! become two crates beside a checkout of this repository at `lens/` (a
//! symbolic link to it), and `cargo tree --offline` must resolve the
//! application, with `lens-fallbacks` taken from the checkout. A `version`
//! line (lens is not on crates.io) fails here, as it fails for a reader.
//! With its `otel` feature the application has OTLP over gRPC (tonic), which
//! the page's commands use; built without it, the application (the
//! `tracing` bridge included) holds no OpenTelemetry crate, tonic, reqwest,
//! hyper or tokio.
//!
//! Offline: every crate lens needs is already in cargo's cache, since this
//! test was built. One test in the `otel` build only (the page does not
//! depend on the mode).

#![cfg(all(feature = "otel", unix))]

use std::path::{Path, PathBuf};
use std::process::Command;

const PAGE: &str = include_str!("../../docs/own-program.md");

/// The page's ```toml blocks, in order.
fn toml_blocks(page: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```toml") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

fn write_crate(dir: &Path, name: &str, manifest_tail: &str, lib: bool) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n{manifest_tail}");
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    let (file, code) = if lib { ("lib.rs", "") } else { ("main.rs", "fn main() {}\n") };
    std::fs::write(dir.join("src").join(file), code).unwrap();
}

#[test]
fn the_pages_dependency_lines_resolve_against_a_checkout() {
    let blocks = toml_blocks(PAGE);
    assert_eq!(blocks.len(), 2, "the page has a library and an application manifest: {blocks:#?}");
    let (library, application) = (&blocks[0], &blocks[1]);
    for block in &blocks {
        let line = block.lines().find(|l| l.starts_with("lens-fallbacks")).expect("a lens-fallbacks line");
        assert!(!line.contains("version"), "lens is not on crates.io; a version line cannot resolve: {line}");
    }

    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().canonicalize().unwrap();
    let root: PathBuf = std::env::temp_dir().join(format!("lens-own-program-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(&checkout, root.join("lens")).unwrap();
    write_crate(&root.join("myjob-model"), "myjob-model", library, true);
    write_crate(&root.join("myjob"), "myjob", application, false);

    // The checkout's lock file, so that cargo picks the versions this
    // workspace built (all in its cache); `cargo tree` resolves and reads the
    // packages of this platform only.
    std::fs::copy(checkout.join("Cargo.lock"), root.join("myjob/Cargo.lock")).unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "--offline", "--edges", "normal", "--prefix", "none", "--manifest-path"])
        .arg(root.join("myjob/Cargo.toml"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo cannot resolve the page's manifests: {stderr}");
    // `lens-fallbacks v0.1.0 (PATH)`, PATH through the link or resolved.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find(|line| line.starts_with("lens-fallbacks v")).unwrap_or_else(|| panic!("{stdout}"));
    let path = line.split_once(" (").and_then(|(_, rest)| rest.split(')').next()).unwrap_or_else(|| panic!("{line}"));
    assert_eq!(
        Path::new(path).canonicalize().unwrap(),
        checkout.join("lens-fallbacks"),
        "lens-fallbacks comes from the checkout: {stdout}"
    );
    assert!(stdout.lines().any(|line| line.starts_with("myjob-model v0.1.0")), "{stdout}");
    // The bridge follows the application's `otel`: on with it ...
    assert!(stdout.lines().any(|line| line.starts_with("lens-tracing v0.1.0")), "{stdout}");
    assert!(stdout.lines().any(|line| line.starts_with("opentelemetry_sdk v")), "{stdout}");
    // OTLP over gRPC, which the page's `MYJOB_OTEL_ENABLED=1 ./myjob` (a
    // collector on localhost:4317) and `OTEL_EXPORTER_OTLP_ENDPOINT` need.
    assert!(stdout.lines().any(|line| line.starts_with("tonic v")), "the application has no OTLP/gRPC: {stdout}");
    // ... and the compiled-out build holds no OpenTelemetry or transport
    // through it (lens-tracing with its defaults).
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "tree",
            "--offline",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--no-default-features",
            "--manifest-path",
        ])
        .arg(root.join("myjob/Cargo.toml"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.lines().any(|line| line.starts_with("lens-tracing v0.1.0")), "{stdout}");
    let forbidden: Vec<&str> = stdout
        .lines()
        .filter(|line| ["opentelemetry", "tonic", "reqwest", "hyper", "tokio"].iter().any(|bad| line.starts_with(bad)))
        .collect();
    assert!(forbidden.is_empty(), "the compiled-out application builds {forbidden:?}");
    let _ = std::fs::remove_dir_all(&root);
}
