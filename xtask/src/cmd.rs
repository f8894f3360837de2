//! Running commands and reporting progress: the helpers every task uses (a
//! leaf module, so that no task imports another for them).

use std::process::Command;

use anyhow::{Context, Result, bail};

/// Prints a line of progress on standard error.
pub(crate) fn say(line: &str) {
    #[expect(clippy::print_stderr, reason = "xtask reports progress on standard error")]
    {
        eprintln!("{line}");
    }
}

/// The workspace root (the parent of this crate's directory).
pub(crate) fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(ToOwned::to_owned).unwrap_or_default()
}

/// A `cargo` command run in the workspace root.
pub(crate) fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    cmd.args(args).current_dir(workspace_root());
    cmd
}

/// Runs `cmd`, echoing it first, and fails when it fails.
pub(crate) fn run_cmd(mut cmd: Command) -> Result<()> {
    say(&format!("$ {}", display(&cmd)));
    let status = cmd.status().with_context(|| format!("could not start {}", display(&cmd)))?;
    if !status.success() {
        bail!("{} failed with {status}", display(&cmd));
    }
    Ok(())
}

/// Runs `cmd` and returns its standard output.
pub(crate) fn output(mut cmd: Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("could not start {}", display(&cmd)))?;
    if !out.status.success() {
        bail!("{} failed with {}:\n{}", display(&cmd), out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn display(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}
