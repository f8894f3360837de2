//! `cargo xtask tidy`: the invariants of `docs/architecture.md` and the
//! checks that keep code, docs and dependencies in step, so that a change
//! that breaks one fails CI (`cargo xtask ci` runs this first):
//!
//! - no OpenTelemetry crate with `otel` off, none in lens-core's build at
//!   all, no tonic, reqwest or hyper in a file-only application's build
//!   (the facade with `otel` and no transport feature), and dependencies
//!   flow one way (from `cargo tree`);
//! - one door: no crate above the facade names lens-core or the runtime
//!   crate, in its `Cargo.toml` (any dependency kind) or its code;
//! - the feature rule: a library crate depends on a workspace crate that has
//!   an `otel` feature with `default-features = false` and without turning
//!   `otel` on (from `cargo metadata`); only applications turn it on;
//! - every `.rs` file under a crate's `src/` starts with `//!`;
//! - every configuration variable the code reads is in
//!   `docs/configuration.md` and every one there is read (lens-core's
//!   `tests/config.rs` holds that logic; tidy runs those tests);
//! - the README states the two commands CI runs (`cargo xtask ci` and
//!   [`MAIN_COMMAND`](crate::commands::MAIN_COMMAND));
//! - every dependency's license is permissive (from `cargo metadata`);
//! - no two modules of a crate import each other, directly or through others
//!   ([`crate::circles`]).
//!
//! The generated docs tables are checked by `cargo xtask codegen --check`,
//! which `ci` runs right after this.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::{cargo, output, run_cmd, say, workspace_root};

/// Crates that must never be built when `otel` is off (the facade's no-op
/// build stays free of OpenTelemetry and its transports).
const FORBIDDEN_WITHOUT_OTEL: &[&str] = &["opentelemetry", "tonic", "prost", "reqwest", "hyper", "tokio"];

/// The library crates whose `otel`-off build, tests and examples included
/// (dev edges), must stay free of them.
const LIBRARY_CRATES: &[&str] =
    &["lens-core", "lens-instruments", "lens-fallbacks", "lens-tracing", "lens-training", "megatron-telemetry"];

/// The transports a program that only writes files must not build: the
/// facade with `otel` and none of `otlp-grpc`, `otlp-http`, `prometheus`.
const TRANSPORT_CRATES: &[&str] = &["tonic", "reqwest", "hyper"];

/// The crates below the facade, which no crate above it may name.
const BELOW_FACADE: &[&str] = &["lens-core", "lens-otel-runtime"];

/// The crates above the facade: they depend on lens-fallbacks (and on each
/// other, one way), never on what is below it. A crate not in the workspace
/// (yet) is skipped.
const ABOVE_FACADE: &[&str] =
    &["lens-instruments", "lens-tracing", "lens-training", "megatron-telemetry", "lens-command", "megatron-train-sim"];

/// The application crates whose `otel`-off build must have no OpenTelemetry
/// crate (their own runtime, such as the simulator's tokio, is allowed).
const APPLICATION_CRATES: &[&str] = &["megatron-train-sim", "lens-command", crate::commands::CANDLE_EXAMPLE];

/// The crates that do not live in a folder of their own name at the root.
const CRATE_DIRS: &[(&str, &str)] = &[(crate::commands::CANDLE_EXAMPLE, "examples/candle-train")];

/// The folder of workspace crate `krate`.
fn crate_dir(krate: &str) -> std::path::PathBuf {
    let dir = CRATE_DIRS.iter().find(|(name, _)| *name == krate).map_or(krate, |(_, dir)| *dir);
    workspace_root().join(dir)
}

/// Which workspace crates each crate may depend on directly (dependencies
/// flow one way: lens-core ← lens-otel-runtime ← lens-fallbacks (the facade,
/// with lens-macros) ← lens-instruments, lens-tracing, lens-training ←
/// megatron-telemetry ← lens-command, the simulator). A crate not in the
/// workspace (yet) is skipped.
const ALLOWED_INTERNAL: &[(&str, &[&str])] = &[
    ("lens-core", &[]),
    ("lens-macros", &[]),
    ("lens-otel-runtime", &["lens-core"]),
    ("lens-fallbacks", &["lens-core", "lens-otel-runtime", "lens-macros"]),
    ("lens-instruments", &["lens-fallbacks"]),
    // The `tracing` bridge sits on the facade; nothing depends on it but
    // applications (the simulator's `serve`: its HTTP SERVER span).
    ("lens-tracing", &["lens-fallbacks"]),
    ("lens-training", &["lens-fallbacks"]),
    ("megatron-telemetry", &["lens-fallbacks", "lens-instruments", "lens-training"]),
    ("lens-command", &["lens-fallbacks", "lens-training", "megatron-telemetry"]),
    (
        "megatron-train-sim",
        &["megatron-telemetry", "lens-tracing", "lens-fallbacks", "lens-instruments", "lens-training", "lens-command"],
    ),
    // The candle example: instrumented through the facade, the training
    // crate and the bridge only (docs/own-program.md).
    (crate::commands::CANDLE_EXAMPLE, &["lens-training", "lens-tracing", "lens-fallbacks"]),
];

pub(crate) fn run() -> Result<()> {
    no_otel_without_feature()?;
    pure_core_and_file_only_builds()?;
    one_door()?;
    feature_rule()?;
    bench_builds()?;
    dependency_direction()?;
    module_docs()?;
    readme_commands()?;
    crate::doc_links::check(&workspace_root(), CRATES)?;
    licenses()?;
    crate::circles::no_import_circles(CRATES)?;
    // Logic that lives in the crates' own tests, run here by name.
    run_cmd(cargo(&["test", "-p", "lens-core", "--test", "config", "documented"]))?;
    say("xtask tidy: ok");
    Ok(())
}

/// Names of the crates in `cargo tree` output (one `name vX` per line).
fn tree_crates(args: &[&str]) -> Result<Vec<String>> {
    let mut full = vec!["tree", "--prefix", "none", "--format", "{p}"];
    full.extend_from_slice(args);
    let text = output(cargo(&full))?;
    Ok(text.lines().filter_map(|line| line.split_whitespace().next()).map(str::to_string).collect())
}

fn no_otel_without_feature() -> Result<()> {
    let mut problems = Vec::new();
    let checks =
        LIBRARY_CRATES.iter().map(|krate| (krate, true)).chain(APPLICATION_CRATES.iter().map(|krate| (krate, false)));
    for (krate, library) in checks {
        if !workspace_root().join(krate).join("Cargo.toml").exists() {
            continue;
        }
        let crates = tree_crates(&["-p", krate, "--no-default-features", "-e", "normal,build,dev"])?;
        for name in &crates {
            let forbidden = name.starts_with("opentelemetry") || (library && forbidden(name, FORBIDDEN_WITHOUT_OTEL));
            if forbidden {
                problems.push(format!("{krate} (otel off, dev dependencies included) depends on {name}"));
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "architecture invariant broken: with `otel` off no OpenTelemetry crate is built\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// lens-core holds no OpenTelemetry (nor transport) crate in any build,
/// dev edges included; a file-only application (the facade with `otel` and
/// no transport feature) builds no tonic, reqwest or hyper; OTLP over gRPC
/// alone builds no reqwest, over HTTP alone no tonic.
fn pure_core_and_file_only_builds() -> Result<()> {
    let mut problems = Vec::new();
    let core = tree_crates(&["-p", "lens-core", "--all-features", "-e", "normal,build,dev"])?;
    for name in &core {
        if name.starts_with("opentelemetry") || forbidden(name, FORBIDDEN_WITHOUT_OTEL) {
            problems.push(format!("lens-core (all features, dev dependencies included) depends on {name}"));
        }
    }
    let file_only =
        tree_crates(&["-p", "lens-fallbacks", "--no-default-features", "--features", "otel", "-e", "normal,build"])?;
    for name in &file_only {
        if forbidden(name, TRANSPORT_CRATES) {
            problems.push(format!("lens-fallbacks with `otel` and no transport feature depends on {name}"));
        }
    }
    // Each OTLP transport brings its own client only.
    for (feature, other) in [("otlp-grpc", "reqwest"), ("otlp-http", "tonic")] {
        let crates = tree_crates(&[
            "-p",
            "lens-fallbacks",
            "--no-default-features",
            "--features",
            feature,
            "-e",
            "normal,build",
        ])?;
        if crates.iter().any(|name| forbidden(name, &[other])) {
            problems.push(format!("lens-fallbacks with only `{feature}` depends on {other}"));
        }
    }
    if !problems.is_empty() {
        bail!(
            "architecture invariant broken: lens-core is pure, and a program that writes files builds no network transport
  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// Whether the crate `name` is one of `crates` (or a crate of its family:
/// `hyper-util` for `hyper`).
fn forbidden(name: &str, crates: &[&str]) -> bool {
    crates.iter().any(|bad| name == *bad || name.starts_with(&format!("{bad}-")))
}

/// One door: no crate above the facade names a crate below it, neither as
/// a dependency of any kind (`cargo metadata`) nor in its code, tests,
/// examples and benches (`lens_core::`, `lens_otel_runtime::`).
fn one_door() -> Result<()> {
    let text = output(cargo(&["metadata", "--format-version", "1", "--no-deps"]))?;
    let metadata: serde_json::Value = serde_json::from_str(&text).context("cargo metadata printed no JSON")?;
    let packages: Vec<&serde_json::Value> = metadata["packages"].as_array().into_iter().flatten().collect();
    let mut problems = one_door_dependency_problems(&packages);
    let root = workspace_root();
    for krate in ABOVE_FACADE {
        for folder in ["src", "tests", "examples", "benches"] {
            let dir = root.join(krate).join(folder);
            if !dir.is_dir() {
                continue;
            }
            let mut files = Vec::new();
            rust_files(&dir, &mut files)?;
            for file in files {
                let code =
                    std::fs::read_to_string(&file).with_context(|| format!("could not read {}", file.display()))?;
                problems.extend(one_door_source_problems(&code).into_iter().map(|(line, name)| {
                    format!("{}:{line} names {name}", file.strip_prefix(&root).unwrap_or(&file).display())
                }));
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "one door: crates above the facade name only lens-fallbacks (`lens_core::X` is `lens_fallbacks::X`, the runtime is `lens_fallbacks::otel`)
  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// The dependencies of crates above the facade on crates below it.
fn one_door_dependency_problems(packages: &[&serde_json::Value]) -> Vec<String> {
    let mut problems = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or("?");
        if !ABOVE_FACADE.contains(&name) {
            continue;
        }
        for dependency in package["dependencies"].as_array().into_iter().flatten() {
            let dep = dependency["name"].as_str().unwrap_or("?");
            if BELOW_FACADE.contains(&dep) {
                let kind = dependency["kind"].as_str().unwrap_or("normal");
                problems.push(format!("{name} depends on {dep} ({kind}): depend on lens-fallbacks instead"));
            }
        }
    }
    problems
}

/// The lines (1-based) of `code` that name a crate below the facade.
fn one_door_source_problems(code: &str) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    for (index, line) in code.lines().enumerate() {
        for name in ["lens_core", "lens_otel_runtime"] {
            let named = line.match_indices(name).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + name.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if named {
                found.push((index + 1, name));
            }
        }
    }
    found
}

/// The feature rule of `docs/architecture.md`: every library crate of the
/// workspace depends on the workspace crates that have an `otel` feature
/// with `default-features = false` and without naming a feature that turns
/// `otel` on, so that one dependency cannot switch OpenTelemetry back on
/// behind a user's back. Applications ([`APPLICATION_CRATES`], xtask) may.
/// Dev-dependencies do not reach a user's build and are not checked.
fn feature_rule() -> Result<()> {
    let text = output(cargo(&["metadata", "--format-version", "1", "--no-deps"]))?;
    let metadata: serde_json::Value = serde_json::from_str(&text).context("cargo metadata printed no JSON")?;
    let packages: Vec<&serde_json::Value> = metadata["packages"].as_array().into_iter().flatten().collect();
    let problems = feature_rule_problems(&packages);
    if !problems.is_empty() {
        bail!(
            "the feature rule is broken: library crates depend on lens crates with `default-features = false` and \
             leave `otel` to the application\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// Every bench and example that `cargo xtask bench` builds exists and is
/// built with the features it requires (`required-features`): the bench does
/// not run in CI, so a target that gained a required feature would otherwise
/// break `cargo xtask bench` unseen.
fn bench_builds() -> Result<()> {
    let text = output(cargo(&["metadata", "--format-version", "1", "--no-deps"]))?;
    let metadata: serde_json::Value = serde_json::from_str(&text).context("cargo metadata printed no JSON")?;
    let packages: Vec<&serde_json::Value> = metadata["packages"].as_array().into_iter().flatten().collect();
    let problems: Vec<String> =
        crate::bench::target_builds().iter().filter_map(|args| bench_build_problem(&packages, args)).collect();
    if !problems.is_empty() {
        bail!("`cargo xtask bench` would fail to build:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// What is wrong with the `cargo` invocation `args` (`-p`, `--bench` or
/// `--example`, `--features`, `--no-default-features`), if anything.
fn bench_build_problem(packages: &[&serde_json::Value], args: &[&str]) -> Option<String> {
    let value = |flag: &str| args.iter().position(|a| *a == flag).and_then(|i| args.get(i + 1)).copied();
    let command = args.join(" ");
    let Some(name) = value("-p") else { return Some(format!("`{command}` names no package")) };
    let Some((kind, target)) =
        value("--bench").map(|t| ("bench", t)).or_else(|| value("--example").map(|t| ("example", t)))
    else {
        return Some(format!("`{command}` names no bench or example"));
    };
    let Some(package) = packages.iter().find(|p| p["name"].as_str() == Some(name)) else {
        return Some(format!("`{command}`: no package {name}"));
    };
    let Some(found) = package["targets"].as_array().into_iter().flatten().find(|t| {
        t["name"].as_str() == Some(target) && t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == kind))
    }) else {
        return Some(format!("`{command}`: {name} has no {kind} `{target}`"));
    };
    let features = &package["features"];
    let mut enabled: Vec<&str> = value("--features").map(|f| f.split(',').collect()).unwrap_or_default();
    if !args.contains(&"--no-default-features") {
        enabled.push("default");
    }
    let missing: Vec<&str> = found["required-features"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str())
        .filter(|required| !enabled.iter().any(|feature| enables(features, feature, required, 0)))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "`{command}`: {kind} `{target}` of {name} requires the features {missing:?}: add them to its `--features`"
        )
    })
}

/// Whether `feature` of a package with the feature table `features` turns
/// `wanted` on, itself or through the features it enables.
fn enables(features: &serde_json::Value, feature: &str, wanted: &str, depth: usize) -> bool {
    feature == wanted
        || (depth < 16
            && features[feature]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .any(|f| !f.contains(':') && !f.contains('/') && enables(features, f, wanted, depth + 1)))
}

fn feature_rule_problems(packages: &[&serde_json::Value]) -> Vec<String> {
    let with_otel: Vec<(&str, &serde_json::Value)> = packages
        .iter()
        .filter(|p| p["features"].get("otel").is_some())
        .filter_map(|p| Some((p["name"].as_str()?, &p["features"])))
        .collect();
    let mut problems = Vec::new();
    for package in packages {
        let name = package["name"].as_str().unwrap_or("?");
        if APPLICATION_CRATES.contains(&name) || name == "xtask" {
            continue;
        }
        for dependency in package["dependencies"].as_array().into_iter().flatten() {
            let Some((dep, features)) =
                with_otel.iter().find(|(n, _)| Some(*n) == dependency["name"].as_str()).copied()
            else {
                continue;
            };
            if dependency["kind"].as_str() == Some("dev") {
                continue;
            }
            if dependency["uses_default_features"].as_bool() != Some(false) {
                problems.push(format!(
                    "{name} depends on {dep} with its default features (`otel`): add `default-features = false`"
                ));
            }
            for feature in dependency["features"].as_array().into_iter().flatten().filter_map(|f| f.as_str()) {
                if enables(features, feature, "otel", 0) {
                    problems.push(format!(
                        "{name} turns on {dep}'s `{feature}`, which enables `otel`: forward it from a feature of {name}'s own instead"
                    ));
                }
            }
        }
    }
    problems
}

fn dependency_direction() -> Result<()> {
    let mut problems = Vec::new();
    let members: Vec<&str> = ALLOWED_INTERNAL.iter().map(|(name, _)| *name).collect();
    for (krate, allowed) in ALLOWED_INTERNAL {
        if !crate_dir(krate).join("Cargo.toml").exists() {
            continue;
        }
        let crates = tree_crates(&["-p", krate, "--all-features", "-e", "normal,build", "--depth", "1"])?;
        for name in crates.iter().skip(1) {
            if members.contains(&name.as_str()) && !allowed.contains(&name.as_str()) {
                problems.push(format!("{krate} must not depend on {name}"));
            }
        }
    }
    if !problems.is_empty() {
        bail!("architecture invariant broken: dependencies flow one way\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// The workspace crates whose `src/` trees are checked for module docs.
const CRATES: &[&str] = &[
    "lens-core",
    "lens-otel-runtime",
    "lens-instruments",
    "lens-fallbacks",
    "lens-macros",
    "lens-tracing",
    "lens-training",
    "megatron-telemetry",
    "lens-command",
    "megatron-train-sim",
    "xtask",
    "examples/candle-train",
];

fn rust_files(dir: &Path, found: &mut Vec<std::path::PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("could not list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, found)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    Ok(())
}

/// Every module says why it exists: its file starts with `//!`.
fn module_docs() -> Result<()> {
    let root = workspace_root();
    let mut files = Vec::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        if src.is_dir() {
            rust_files(&src, &mut files)?;
        }
    }
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).with_context(|| format!("could not read {}", file.display()))?;
        if !text.trim_start().starts_with("//!") {
            problems.push(file.strip_prefix(&root).unwrap_or(file).display().to_string());
        }
    }
    if !problems.is_empty() {
        bail!(
            "every module starts with `//!` (why it exists, how it fits); these do not:\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// The README's two commands are the ones CI runs.
fn readme_commands() -> Result<()> {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).context("could not read README.md")?;
    let main = format!("cargo {}", crate::commands::MAIN_COMMAND.join(" "));
    let mut problems = Vec::new();
    for command in [main.as_str(), "cargo xtask ci"] {
        if !readme.lines().any(|line| line.trim() == command) {
            problems.push(format!("README.md does not state `{command}` on a line of its own"));
        }
    }
    if !problems.is_empty() {
        bail!("the README's commands drifted from CI (xtask/src/ci.rs):\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// Licenses a dependency may have. MPL-2.0 is weak copyleft (file-level: a
/// change to an MPL file must be shared, using it is free), allowed as such;
/// CDLA-Permissive-2.0 is a permissive data license (webpki-roots' root
/// certificates); LLVM-exception only widens Apache-2.0.
const ALLOWED_LICENSES: &[&str] = &[
    "MIT",
    "Apache-2.0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "ISC",
    "Zlib",
    "Unicode-3.0",
    "Unicode-DFS-2016",
    "CC0-1.0",
    "MPL-2.0",
    "BSL-1.0",
    "0BSD",
    "Unlicense",
    "CDLA-Permissive-2.0",
];
const ALLOWED_EXCEPTIONS: &[&str] = &["LLVM-exception"];

/// Whether an SPDX expression can be satisfied with allowed licenses
/// (`OR`: any side; `AND`: both; `/` is the old spelling of `OR`).
fn license_ok(expression: &str) -> bool {
    let spaced = expression.replace('(', " ( ").replace(')', " ) ").replace('/', " OR ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut position = 0;
    let ok = or_expression(&tokens, &mut position);
    ok == Some(true) && position == tokens.len()
}

fn or_expression(tokens: &[&str], position: &mut usize) -> Option<bool> {
    let mut value = and_expression(tokens, position)?;
    while tokens.get(*position) == Some(&"OR") {
        *position += 1;
        value |= and_expression(tokens, position)?;
    }
    Some(value)
}

fn and_expression(tokens: &[&str], position: &mut usize) -> Option<bool> {
    let mut value = license_term(tokens, position)?;
    while tokens.get(*position) == Some(&"AND") {
        *position += 1;
        value &= license_term(tokens, position)?;
    }
    Some(value)
}

fn license_term(tokens: &[&str], position: &mut usize) -> Option<bool> {
    let token = *tokens.get(*position)?;
    *position += 1;
    if token == "(" {
        let value = or_expression(tokens, position)?;
        (tokens.get(*position) == Some(&")")).then(|| *position += 1)?;
        return Some(value);
    }
    if [")", "AND", "OR", "WITH"].contains(&token) {
        return None;
    }
    let mut value = ALLOWED_LICENSES.contains(&token);
    if tokens.get(*position) == Some(&"WITH") {
        let exception = *tokens.get(*position + 1)?;
        *position += 2;
        value &= ALLOWED_EXCEPTIONS.contains(&exception);
    }
    Some(value)
}

/// Every package in the dependency graph has a permissive license.
fn licenses() -> Result<()> {
    let text = output(cargo(&["metadata", "--format-version", "1"]))?;
    let metadata: serde_json::Value = serde_json::from_str(&text).context("cargo metadata printed no JSON")?;
    let members: Vec<&str> =
        metadata["workspace_members"].as_array().into_iter().flatten().filter_map(|m| m.as_str()).collect();
    let mut problems = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        if package["id"].as_str().is_some_and(|id| members.contains(&id)) {
            continue;
        }
        let name = package["name"].as_str().unwrap_or("?");
        let version = package["version"].as_str().unwrap_or("?");
        match package["license"].as_str() {
            Some(license) if license_ok(license) => {}
            Some(license) => problems.push(format!("{name} {version}: `{license}`")),
            None => problems.push(format!("{name} {version}: no SPDX license (a license file only)")),
        }
    }
    if !problems.is_empty() {
        bail!(
            "dependencies with a license outside the allowed list ({}):\n  {}",
            ALLOWED_LICENSES.join(", "),
            problems.join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{
        bench_build_problem, feature_rule_problems, license_ok, one_door_dependency_problems, one_door_source_problems,
    };

    #[test]
    fn a_crate_above_the_facade_that_names_one_below_breaks_the_one_door_rule() {
        let package = |name: &str, dependency: &str, kind: Option<&str>| serde_json::json!({ "name": name, "dependencies": [{ "name": dependency, "kind": kind }] });
        let through_facade = package("megatron-telemetry", "lens-fallbacks", None);
        let core = package("lens-tracing", "lens-core", None);
        let runtime_for_tests = package("lens-instruments", "lens-otel-runtime", Some("dev"));
        let below = package("lens-fallbacks", "lens-otel-runtime", None);
        let problems = one_door_dependency_problems(&[&through_facade, &core, &runtime_for_tests, &below]);
        assert_eq!(
            problems,
            [
                "lens-tracing depends on lens-core (normal): depend on lens-fallbacks instead",
                "lens-instruments depends on lens-otel-runtime (dev): depend on lens-fallbacks instead",
            ]
        );
        let code = "use lens_fallbacks::config;\nuse lens_core::config::LensConfig;\n// lens_core_recipe, my_lens_core\nlet x = lens_otel_runtime::active::tracer();\n";
        assert_eq!(one_door_source_problems(code), [(2, "lens_core"), (4, "lens_otel_runtime")]);
    }

    #[test]
    fn a_bench_build_without_its_required_features_is_reported() {
        let package = serde_json::json!({
            "name": "crate-a",
            "features": { "default": ["otel"], "otel": [], "testing": ["otel", "dep:extra"] },
            "targets": [
                { "name": "needs_testing", "kind": ["bench"], "required-features": ["testing"] },
                { "name": "needs_otel", "kind": ["example"], "required-features": ["otel"] },
            ],
        });
        let packages = [&package];
        let problem = |args: &[&str]| bench_build_problem(&packages, args);
        let missing = problem(&["-p", "crate-a", "--bench", "needs_testing"]).unwrap();
        assert!(missing.contains("requires the features [\"testing\"]"), "{missing}");
        assert_eq!(problem(&["-p", "crate-a", "--features", "testing", "--bench", "needs_testing"]), None);
        // `otel` comes with the default features, or through `testing`.
        assert_eq!(problem(&["-p", "crate-a", "--example", "needs_otel"]), None);
        assert!(problem(&["-p", "crate-a", "--example", "needs_otel", "--no-default-features"]).is_some());
        assert_eq!(
            problem(&["-p", "crate-a", "--example", "needs_otel", "--no-default-features", "--features", "testing"]),
            None
        );
        let absent = problem(&["-p", "crate-a", "--bench", "gone"]).unwrap();
        assert!(absent.contains("has no bench `gone`"), "{absent}");
    }

    #[test]
    fn a_library_that_turns_otel_on_breaks_the_feature_rule() {
        let core = serde_json::json!({
            "name": "lens-core", "dependencies": [],
            "features": { "default": [], "otel": ["dep:opentelemetry"], "testing": ["otel"] }
        });
        let library = |uses_default: bool, features: serde_json::Value, kind: Option<&str>| {
            serde_json::json!({
                "name": "my-lib", "features": {},
                "dependencies": [{ "name": "lens-core", "kind": kind, "uses_default_features": uses_default, "features": features }]
            })
        };
        let ok = library(false, serde_json::json!(["clap"]), None);
        assert!(feature_rule_problems(&[&core, &ok]).is_empty());
        let defaults = library(true, serde_json::json!([]), None);
        assert_eq!(feature_rule_problems(&[&core, &defaults]).len(), 1);
        let testing = library(false, serde_json::json!(["testing"]), None);
        let problems = feature_rule_problems(&[&core, &testing]);
        assert!(problems[0].contains("`testing`, which enables `otel`"), "{problems:?}");
        // Dev-dependencies never reach a user's build; applications may turn otel on.
        let dev = library(true, serde_json::json!(["otel"]), Some("dev"));
        assert!(feature_rule_problems(&[&core, &dev]).is_empty());
        let mut app = library(true, serde_json::json!(["otel"]), None);
        app["name"] = "megatron-train-sim".into();
        assert!(feature_rule_problems(&[&core, &app]).is_empty());
    }

    #[test]
    fn license_expressions() {
        assert!(license_ok("MIT OR Apache-2.0"));
        assert!(license_ok("MIT/Apache-2.0"));
        assert!(license_ok("(MIT OR Apache-2.0) AND Unicode-3.0"));
        assert!(license_ok("Apache-2.0 WITH LLVM-exception OR Apache-2.0 OR MIT"));
        assert!(license_ok("MIT OR Apache-2.0 OR LGPL-2.1-or-later"));
        assert!(!license_ok("GPL-3.0-only"));
        assert!(!license_ok("MIT AND GPL-2.0-only"));
        assert!(!license_ok("Apache-2.0 WITH Classpath-exception-2.0"));
        assert!(!license_ok("MIT OR"));
        assert!(!license_ok("(MIT"));
    }
}
