//! `cargo xtask tidy`'s check of the links between the Markdown pages (the
//! README, `docs/`, the crates' READMEs): a relative link names a file or
//! directory that exists, and a link to a heading (`#anchor`, in the same
//! page or in another `.md`) names one the page has, by GitHub's rule for
//! heading anchors, or an explicit `<a id="...">`. A link that rots is the
//! first thing a new user following the guide falls into.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

/// GitHub's anchor of a heading: lower-cased, every character that is not
/// a letter, digit, space, `-` or `_` dropped (backticks, dots, slashes,
/// parentheses, ...), each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of `text` outside fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter(move |(_, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchors `text` defines: its headings' (a repeated heading gets
/// `-1`, `-2`, ... as GitHub gives it) and its `<a id="...">` and
/// `<a name="...">`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let mut anchor = base.clone();
            let mut n = 0;
            while !found.insert(anchor.clone()) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
        }
        for marker in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(marker) {
                rest = &rest[at + marker.len()..];
                if let Some(end) = rest.find('"') {
                    found.insert(rest[..end].to_string());
                }
            }
        }
    }
    found
}

/// The link targets of `text`'s prose (`[text](target)`), with their line
/// numbers (from 1); inline code spans are left out.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in prose_lines(text) {
        // Inline code (`...`) is not a link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                let target = rest[..end].split_whitespace().next().unwrap_or("");
                found.push((index + 1, target.to_string()));
                rest = &rest[end..];
            }
        }
    }
    found
}

/// What is wrong with the links of `page` (its text `text`): one line per
/// broken link. `read` gives another page's text, `None` when there is no
/// such file; `exists` says whether a path exists.
fn page_problems(
    page: &Path,
    text: &str,
    read: &dyn Fn(&Path) -> Option<String>,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<String> {
    let own = anchors(text);
    let mut problems = Vec::new();
    for (line, target) in links(text) {
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let shown = format!("{}:{line}: ({target})", page.display());
        if path.is_empty() {
            if let Some(anchor) = anchor
                && !own.contains(anchor)
            {
                problems.push(format!("{shown}: this page has no heading or <a id> `{anchor}`"));
            }
            continue;
        }
        let resolved: PathBuf = page.parent().unwrap_or(Path::new("")).join(path);
        if !exists(&resolved) {
            problems.push(format!("{shown}: no such file"));
            continue;
        }
        if let Some(anchor) = anchor
            && path.ends_with(".md")
            && !read(&resolved).is_some_and(|other| anchors(&other).contains(anchor))
        {
            problems.push(format!("{shown}: {path} has no heading or <a id> `{anchor}`"));
        }
    }
    problems
}

/// Checks the links of the README, every page of `docs/` and the READMEs
/// of `crates` (directories under `root`).
pub(crate) fn check(root: &Path, crates: &[&str]) -> Result<()> {
    let mut pages = vec![root.join("README.md")];
    let docs = root.join("docs");
    for entry in std::fs::read_dir(&docs).with_context(|| format!("could not read {}", docs.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    for krate in crates {
        let readme = root.join(krate).join("README.md");
        if readme.is_file() {
            pages.push(readme);
        }
    }
    pages.sort();
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    let exists = |path: &Path| path.exists();
    let mut problems = Vec::new();
    for page in &pages {
        let text = read(page).with_context(|| format!("could not read {}", page.display()))?;
        let shown = page.strip_prefix(root).unwrap_or(page);
        problems.extend(
            page_problems(page, &text, &read, &exists)
                .into_iter()
                .map(|problem| problem.replacen(&page.display().to_string(), &shown.display().to_string(), 1)),
        );
    }
    if !problems.is_empty() {
        bail!("broken links between the pages:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_anchor_as_github_anchors_them() {
        assert_eq!(slug(" 401 / Unauthenticated"), "401--unauthenticated");
        assert_eq!(slug("`lens control`: change a running job"), "lens-control-change-a-running-job");
        assert_eq!(slug("Protocol and port mismatch (4317 vs 4318)"), "protocol-and-port-mismatch-4317-vs-4318");
        let text = "# A\n## Twice\n```\n## In code\n```\n## Twice\n<a id=\"ports\"></a>\n";
        let expected: BTreeSet<String> = ["a", "twice", "twice-1", "ports"].map(String::from).into();
        assert_eq!(anchors(text), expected);
    }

    #[test]
    fn a_link_to_a_missing_heading_or_file_is_named_with_its_line() {
        let page = Path::new("docs/a.md");
        let text = "# Top\nSee [top](#top), [gone](#gone), [b](b.md#there) and [c](c.md).\n\
                    `[not](#a-link)` and <https://x.y/#z> [web](https://x.y/#z)\n```\n[code](#nope)\n```\n";
        let read = |path: &Path| (path == Path::new("docs/b.md")).then(|| "## Elsewhere\n".to_string());
        let exists = |path: &Path| path == Path::new("docs/b.md");
        assert_eq!(
            page_problems(page, text, &read, &exists),
            [
                "docs/a.md:2: (#gone): this page has no heading or <a id> `gone`",
                "docs/a.md:2: (b.md#there): b.md has no heading or <a id> `there`",
                "docs/a.md:2: (c.md): no such file",
            ]
        );
    }
}
