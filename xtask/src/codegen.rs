//! `cargo xtask codegen [--check]`: regenerates the docs tables that come
//! from code, so that the docs cannot drift from it (STYLE 8; the original's
//! docs described span names its code no longer emitted).
//!
//! How: xtask depends on no workspace crate (a tidy rule), so it runs the
//! example `megatron-telemetry/examples/render-docs.rs`, which prints one
//! fragment rendered from the data tables (`taxonomy::SPANS`,
//! `metrics::METRICS`, the span-group catalog). The example is built without
//! the `otel` feature, since the tables are pure data. Each fragment is either
//! a whole file or the text between two marker lines in a hand-written page:
//!
//! ```text
//! <!-- generated:NAME:start -->
//! ...generated text, replaced on every run...
//! <!-- generated:NAME:end -->
//! ```
//!
//! Without `--check` the files are rewritten; with it nothing is written and
//! the task fails, naming the file and the first differing line, when a file
//! is not what the generator would write. `cargo xtask ci` runs the check.

use std::fs;

use anyhow::{Context, Result, bail};

use crate::{cargo, output, say, workspace_root};

/// Where a fragment goes.
enum Target {
    /// The fragment is the whole file.
    WholeFile,
    /// The fragment replaces the text between the `generated:NAME` markers.
    Between(&'static str),
}

/// The generated docs: (fragment the example renders, file, where in it).
const OUTPUTS: &[(&str, &str, Target)] = &[
    ("taxonomy", "docs/span-taxonomy.md", Target::WholeFile),
    ("metrics", "docs/metrics-megatron.md", Target::Between("metrics")),
    ("goodput", "docs/metrics-megatron.md", Target::Between("goodput")),
    ("rank-metrics", "docs/metrics-megatron.md", Target::Between("rank-metrics")),
    ("groups", "docs/span-groups.md", Target::Between("groups")),
];

pub(crate) fn run(check: bool) -> Result<()> {
    let mut stale = Vec::new();
    for (fragment, path, target) in OUTPUTS {
        let rendered = render(fragment)?;
        let file = workspace_root().join(path);
        let current = fs::read_to_string(&file).unwrap_or_default();
        let wanted = match target {
            Target::WholeFile => rendered,
            Target::Between(name) => splice(&current, name, &rendered).with_context(|| format!("in {path}"))?,
        };
        if wanted == current {
            continue;
        }
        if check {
            stale.push(format!("{path} (first difference at line {})", first_difference(&current, &wanted)));
        } else {
            fs::write(&file, &wanted).with_context(|| format!("could not write {path}"))?;
            say(&format!("xtask codegen: wrote {path}"));
        }
    }
    if !stale.is_empty() {
        bail!("generated docs are out of date; run `cargo xtask codegen`:\n  {}", stale.join("\n  "));
    }
    say(if check { "xtask codegen --check: docs up to date" } else { "xtask codegen: done" });
    Ok(())
}

/// One fragment, as the example prints it.
fn render(fragment: &str) -> Result<String> {
    output(cargo(&[
        "run",
        "--quiet",
        "-p",
        "megatron-telemetry",
        "--no-default-features",
        "--example",
        "render-docs",
        "--",
        fragment,
    ]))
}

/// `text` with the lines between the `generated:NAME` markers replaced by
/// `fragment`; an error when the markers are missing or out of order.
fn splice(text: &str, name: &str, fragment: &str) -> Result<String> {
    let start = format!("<!-- generated:{name}:start -->");
    let end = format!("<!-- generated:{name}:end -->");
    let Some(start_at) = text.find(&start) else { bail!("marker `{start}` not found") };
    let body_at = start_at + start.len();
    let Some(end_rel) = text[body_at..].find(&end) else { bail!("marker `{end}` not found after `{start}`") };
    let end_at = body_at + end_rel;
    let mut out = String::with_capacity(text.len() + fragment.len());
    out.push_str(&text[..body_at]);
    out.push('\n');
    out.push_str(fragment);
    if !fragment.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&text[end_at..]);
    Ok(out)
}

/// The 1-based number of the first line where `a` and `b` differ.
fn first_difference(a: &str, b: &str) -> usize {
    let mut a_lines = a.lines();
    let mut b_lines = b.lines();
    let mut line = 1;
    loop {
        match (a_lines.next(), b_lines.next()) {
            (Some(x), Some(y)) if x == y => line += 1,
            _ => return line,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{first_difference, splice};

    #[test]
    fn splice_replaces_only_the_text_between_the_markers() {
        let page = "intro\n<!-- generated:t:start -->\nold\n<!-- generated:t:end -->\noutro\n";
        let out = splice(page, "t", "new\n").unwrap();
        assert_eq!(out, "intro\n<!-- generated:t:start -->\nnew\n<!-- generated:t:end -->\noutro\n");
        assert_eq!(splice(&out, "t", "new\n").unwrap(), out, "splicing is idempotent");
    }

    #[test]
    fn splice_fails_without_markers() {
        let err = splice("no markers here", "t", "x").unwrap_err();
        assert!(err.to_string().contains("generated:t:start"), "{err}");
        let err = splice("<!-- generated:t:start -->", "t", "x").unwrap_err();
        assert!(err.to_string().contains("generated:t:end"), "{err}");
    }

    #[test]
    fn first_difference_names_the_line() {
        assert_eq!(first_difference("a\nb\nc\n", "a\nx\nc\n"), 2);
        assert_eq!(first_difference("a\n", "a\nb\n"), 2);
    }
}
