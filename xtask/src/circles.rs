//! The module-graph check of `cargo xtask tidy`: no import circle between the
//! files of a crate.
//!
//! Each `.rs` file under a crate's `src/` is one node (`src/bin/` and
//! `src/main.rs` of a crate with a `lib.rs` are separate crates and are left
//! out). A file depends on another when its code names an item defined there:
//! a private `use crate::…`, `use super::…`, `use self::…` or a `use` of a
//! child module, and the same paths written inline (`crate::taxonomy::SPANS`).
//! A path is resolved to the file that defines the item: the longest prefix
//! that is a module file, then through that file's `use` items (a `pub use`
//! re-export, or a private `use` that children reach through `crate::`), so
//! that a module which only declares and re-exports its children (such as
//! `lens-core/src/config/mod.rs`) depends on nothing. A `pub use` of the
//! file's own descendants (a parent re-exporting its children) is the
//! module's public face and adds no edge; a `pub use` of anything else is a
//! dependency like any other `use` (a module that re-exports a sibling's
//! items while that sibling names it is a circle: issue 21 found
//! `setup.rs` ↔ `otel/setup.rs` hidden that way). `mod` declarations add no
//! edge. Inline modules (`mod tests { … }`)
//! belong to their file: their `super::` is the file itself.
//!
//! Every strongly connected set of two or more files is a circle. A circle
//! tolerated while work removes it goes in [`ALLOWED`] (empty today); any other
//! fails tidy with the files of the circle, and an allowed entry that no
//! longer holds a circle fails too, so that the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::{say, workspace_root};

/// Circles tolerated while work removes them: a circle is allowed when all
/// its files are in one entry. Empty now that every crate is free of them;
/// an entry whose circle is gone fails tidy, so the list only shrinks.
const ALLOWED: &[&[&str]] = &[];

/// The target of a `use` of another crate's item: no file of this crate.
const EXTERN: &str = "::extern";

/// One file's module path (`["config", "model"]`) and what it says.
struct ModuleFile {
    /// The file, relative to the workspace root.
    file: String,
    path: Vec<String>,
    /// Every `use` item at the file's top level: the name it binds and the
    /// absolute path it names.
    uses: Vec<UseItem>,
    /// Absolute paths that the file's code names (private `use` items and
    /// inline paths).
    references: Vec<Vec<String>>,
}

struct UseItem {
    name: String,
    target: Vec<String>,
}

/// Fails when a crate's files import each other in a circle not in [`ALLOWED`].
pub(crate) fn no_import_circles(crates: &[&str]) -> Result<()> {
    let root = workspace_root();
    let mut circles = Vec::new();
    for krate in crates {
        let src = root.join(krate).join("src");
        if src.is_dir() {
            circles.extend(crate_circles(&root, &src)?);
        }
    }
    let allowed = |circle: &Circle| {
        ALLOWED.iter().position(|entry| circle.files.iter().all(|f| entry.iter().any(|e| covers(e, f))))
    };
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for circle in &circles {
        match allowed(circle) {
            Some(i) => {
                used.insert(i);
                say(&format!("xtask tidy: known import circle (allowed): {}", describe(circle)));
            }
            None => problems.push(format!("import circle: {}", describe(circle))),
        }
    }
    for (i, entry) in ALLOWED.iter().enumerate() {
        if !used.contains(&i) {
            problems.push(format!(
                "the allowed circle {entry:?} is gone: remove its entry from ALLOWED in xtask/src/circles.rs"
            ));
        }
    }
    if !problems.is_empty() {
        bail!(
            "each module is one concept and modules do not import each other in circles \
             (move what both need into a leaf module):\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// `a -> b -> a`, and the other files of the set when there are more.
fn describe(circle: &Circle) -> String {
    let others: Vec<&str> = circle.files.iter().filter(|f| !circle.cycle.contains(f)).map(String::as_str).collect();
    if others.is_empty() {
        circle.cycle.join(" -> ")
    } else {
        format!("{} (in one set with {})", circle.cycle.join(" -> "), others.join(", "))
    }
}

/// Whether the allow-list entry `entry` (a file, or a folder ending in `/`)
/// covers `file`.
fn covers(entry: &str, file: &str) -> bool {
    if entry.ends_with('/') { file.starts_with(entry) } else { file == entry }
}

/// A set of files that import each other, directly or through others.
#[derive(Debug)]
struct Circle {
    /// One cycle through them, the first file repeated at the end.
    cycle: Vec<String>,
    /// Every file of the set (a strongly connected component).
    files: Vec<String>,
}

/// The circles among the files of one crate's `src/`.
fn crate_circles(root: &Path, src: &Path) -> Result<Vec<Circle>> {
    let mut files = Vec::new();
    collect(src, &mut files)?;
    let is_lib = src.join("lib.rs").is_file();
    let mut modules = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap_or(&file);
        let Some(path) = module_path(relative, is_lib) else { continue };
        let text = std::fs::read_to_string(&file).with_context(|| format!("could not read {}", file.display()))?;
        let display = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        modules.push(parse_file(display, path, &text));
    }
    let index: BTreeMap<Vec<String>, usize> = modules.iter().enumerate().map(|(i, m)| (m.path.clone(), i)).collect();
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); modules.len()];
    for (i, module) in modules.iter().enumerate() {
        for reference in &module.references {
            if let Some(j) = resolve(&modules, &index, reference, 0)
                && j != i
            {
                edges[i].insert(j);
            }
        }
    }
    Ok(strongly_connected(&edges)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| Circle {
            cycle: cycle_through(&edges, &component).into_iter().map(|i| modules[i].file.clone()).collect(),
            files: component.iter().map(|&i| modules[i].file.clone()).collect(),
        })
        .collect())
}

fn collect(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("could not list {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, found)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    Ok(())
}

/// `lib.rs` → `[]`, `a.rs` and `a/mod.rs` → `[a]`, `a/b.rs` → `[a, b]`;
/// `None` for files of other crates in the same folder (`bin/`, and
/// `main.rs` next to a `lib.rs`).
fn module_path(relative: &Path, is_lib: bool) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?.to_string();
    match stem.as_str() {
        "lib" | "main" if parts.is_empty() => (stem == "lib" || !is_lib).then_some(parts),
        "mod" => Some(parts),
        _ => {
            parts.push(stem);
            Some(parts)
        }
    }
}

/// The file defining what `path` (absolute) names, following `use` items;
/// `depth` bounds the chain of re-exports.
fn resolve(
    modules: &[ModuleFile],
    index: &BTreeMap<Vec<String>, usize>,
    path: &[String],
    depth: usize,
) -> Option<usize> {
    let (i, length) = (0..=path.len()).rev().find_map(|n| index.get(&path[..n]).map(|&i| (i, n)))?;
    let Some(next) = path.get(length) else { return Some(i) };
    if depth < 8
        && let Some(item) = modules[i].uses.iter().find(|u| &u.name == next)
    {
        if item.target.first().is_some_and(|first| first == EXTERN) {
            return None;
        }
        let mut target = item.target.clone();
        target.extend_from_slice(&path[length + 1..]);
        if let Some(j) = resolve(modules, index, &target, depth + 1) {
            return Some(j);
        }
    }
    Some(i)
}

/// Tarjan's strongly connected components.
fn strongly_connected(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            component.sort_unstable();
            s.out.push(component);
        }
    }
    let n = edges.len();
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

/// One cycle inside `component`, from its first file back to it (a
/// breadth-first search for the shortest way back).
fn cycle_through(edges: &[BTreeSet<usize>], component: &[usize]) -> Vec<usize> {
    let start = component[0];
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let mut previous: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &edges[v] {
            if !inside.contains(&w) {
                continue;
            }
            if w == start {
                // Walk back from `v` to `start`, then read it forwards.
                let mut cycle = vec![v];
                while let Some(&p) = previous.get(cycle.last().unwrap_or(&start)) {
                    cycle.push(p);
                }
                if cycle.last() != Some(&start) {
                    cycle.push(start);
                }
                cycle.reverse();
                cycle.push(start);
                return cycle;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = previous.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    component.to_vec()
}

/// A token of Rust source with comments, strings and characters removed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || (next == Some('#') && raw_string_start(&chars, i + 1))) {
            let mut hashes = 0;
            i += 1;
            while chars.get(i) == Some(&'#') {
                hashes += 1;
                i += 1;
            }
            i += 1;
            while i < chars.len() {
                if chars[i] == '"' && (0..hashes).all(|k| chars.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{1F600}'), else a lifetime.
            if next == Some('\\') {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // `b"…"` and `br"…"` are strings; the prefix is not an identifier.
            if (word == "b" || word == "br" || word == "c") && chars.get(i).is_some_and(|&c| c == '"' || c == '#') {
                if word.ends_with('r') {
                    i -= 1;
                }
                continue;
            }
            tokens.push(Token::Ident(word));
        } else if c == ':' && next == Some(':') {
            tokens.push(Token::PathSep);
            i += 2;
        } else if c.is_numeric() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                if chars[i] == '.' && !chars.get(i + 1).is_some_and(|c| c.is_numeric()) {
                    break;
                }
                i += 1;
            }
        } else {
            if !c.is_whitespace() {
                tokens.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    tokens
}

/// Whether `r#…` at `at` starts a raw string (`r#"`), not a raw identifier.
fn raw_string_start(chars: &[char], mut at: usize) -> bool {
    while chars.get(at) == Some(&'#') {
        at += 1;
    }
    chars.get(at) == Some(&'"')
}

fn ident(token: Option<&Token>) -> Option<&str> {
    match token {
        Some(Token::Ident(word)) => Some(word),
        _ => None,
    }
}

/// Reads one file's `use` items, its child modules and the paths it names.
fn parse_file(file: String, path: Vec<String>, text: &str) -> ModuleFile {
    let tokens = tokenize(text);
    // Child modules declared by this file (`mod x;` and `mod x { … }`).
    let mut children = BTreeSet::new();
    for w in tokens.windows(2) {
        if ident(Some(&w[0])) == Some("mod")
            && let Some(name) = ident(Some(&w[1]))
        {
            children.insert(name.to_string());
        }
    }
    let mut module = ModuleFile { file, path: path.clone(), uses: Vec::new(), references: Vec::new() };
    // The inline modules open at each point, with the brace depth they opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth: usize = 0;
    let mut i = 0;
    while i < tokens.len() {
        let current: Vec<String> = path.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect();
        match &tokens[i] {
            Token::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Token::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                i += 1;
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(name), Some(Token::Punct('{'))) = (ident(tokens.get(i + 1)), tokens.get(i + 2)) {
                    inline.push((name.to_string(), depth));
                    depth += 1;
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Token::Ident(word) if word == "use" && !matches!(tokens.get(i.wrapping_sub(1)), Some(Token::PathSep)) => {
                let public = is_public(&tokens, i);
                let end = tokens[i..].iter().position(|t| *t == Token::Punct(';')).map_or(tokens.len(), |p| i + p);
                let mut items = Vec::new();
                use_tree(&tokens[i + 1..end], &mut Vec::new(), &mut items);
                for (segments, alias) in items {
                    let Some(target) = absolute(&current, &children, &segments, true) else {
                        // Another crate's item under a name of this module
                        // (the facade's `pub use lens_core::{config, ...}`):
                        // a path through that name leaves this crate.
                        if inline.is_empty()
                            && let Some(name) = alias.or_else(|| segments.last().cloned())
                        {
                            module.uses.push(UseItem { name, target: vec![EXTERN.to_string()] });
                        }
                        continue;
                    };
                    let name = alias.or_else(|| segments.last().cloned()).unwrap_or_default();
                    let name = if name == "self" { current_last(&target) } else { name };
                    if inline.is_empty() {
                        module.uses.push(UseItem { name, target: target.clone() });
                    }
                    if !public || !descends_from(&target, &path) {
                        module.references.push(target);
                    }
                }
                i = end + 1;
            }
            Token::Ident(_) if !matches!(tokens.get(i.wrapping_sub(1)), Some(Token::PathSep)) => {
                let mut segments = Vec::new();
                let mut j = i;
                while let Some(word) = ident(tokens.get(j)) {
                    segments.push(word.to_string());
                    if tokens.get(j + 1) == Some(&Token::PathSep) {
                        j += 2;
                    } else {
                        break;
                    }
                }
                if segments.len() > 1
                    && let Some(target) = absolute(&current, &children, &segments, false)
                {
                    module.references.push(target);
                }
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    module
}

/// Whether `target` lies strictly inside the module `module` (a parent's
/// re-export of its children).
fn descends_from(target: &[String], module: &[String]) -> bool {
    target.len() > module.len() && target[..module.len()] == *module
}

fn current_last(target: &[String]) -> String {
    target.last().cloned().unwrap_or_default()
}

/// Whether the `use` at `at` is `pub` (any `pub(…)`).
fn is_public(tokens: &[Token], at: usize) -> bool {
    let before = &tokens[..at];
    match before {
        [.., Token::Ident(p)] => p == "pub",
        // `pub(crate) use`, `pub(super) use`, `pub(in path) use`.
        [.., Token::Punct(')')] => {
            let open = before.iter().rposition(|t| *t == Token::Punct('(')).unwrap_or(0);
            ident(before.get(open.wrapping_sub(1))) == Some("pub")
        }
        _ => false,
    }
}

/// Flattens a use tree (`a::{b, c::{self, d as e}}`) into paths with their
/// aliases.
fn use_tree(tokens: &[Token], prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    let mut i = 0;
    let start_len = prefix.len();
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(word) if word == "as" => {
                if let (Some(alias), Some(last)) = (ident(tokens.get(i + 1)), out.last_mut()) {
                    last.1 = Some(alias.to_string());
                }
                i += 2;
            }
            Token::Ident(word) => {
                prefix.push(word.clone());
                if tokens.get(i + 1) == Some(&Token::PathSep) {
                    i += 2;
                } else {
                    out.push((prefix.clone(), None));
                    prefix.pop();
                    i += 1;
                }
            }
            Token::Punct('*') => {
                out.push((prefix.clone(), None));
                i += 1;
            }
            Token::Punct('{') => {
                let mut depth = 0;
                let mut end = i;
                for (k, t) in tokens[i..].iter().enumerate() {
                    match t {
                        Token::Punct('{') => depth += 1,
                        Token::Punct('}') => {
                            depth -= 1;
                            if depth == 0 {
                                end = i + k;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let inner = &tokens[i + 1..end.max(i + 1)];
                for part in split_top_level(inner) {
                    let mut nested = prefix.clone();
                    use_tree(part, &mut nested, out);
                }
                i = end + 1;
            }
            Token::Punct(',') => {
                prefix.truncate(start_len);
                i += 1;
            }
            _ => i += 1,
        }
    }
    prefix.truncate(start_len);
}

fn split_top_level(tokens: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (k, t) in tokens.iter().enumerate() {
        match t {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => depth -= 1,
            Token::Punct(',') if depth == 0 => {
                parts.push(&tokens[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&tokens[start..]);
    parts
}

/// The absolute module path that `segments` names from module `current`:
/// `crate::…`, `super::…`, `self::…`, or a child module of this file's
/// module (`ci::run`); `None` for other crates and local names.
fn absolute(current: &[String], children: &BTreeSet<String>, segments: &[String], in_use: bool) -> Option<Vec<String>> {
    let first = segments.first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => current.to_vec(),
        "super" => {
            let mut base = current.to_vec();
            let mut k = 0;
            while segments.get(k).is_some_and(|s| s == "super") {
                base.pop()?;
                k += 1;
            }
            base.extend_from_slice(&segments[k..]);
            return Some(base);
        }
        name if children.contains(name) => {
            let mut base = current.to_vec();
            base.push(name.to_string());
            base.extend_from_slice(&segments[1..]);
            return Some(base);
        }
        // A `use` of a name from this module's scope is ambiguous without
        // name resolution; other crates are not this graph's business.
        _ => {
            let _ = in_use;
            return None;
        }
    };
    base.extend_from_slice(&segments[1..]);
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn circles_of(name: &str, files: &[(&str, &str)]) -> Vec<Vec<String>> {
        let dir = std::env::temp_dir().join(format!("xtask-circles-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, text) in files {
            let path = dir.join("src").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let circles = crate_circles(&dir, &dir.join("src")).unwrap().into_iter().map(|c| c.cycle).collect();
        let _ = std::fs::remove_dir_all(&dir);
        circles
    }

    #[test]
    fn two_files_that_import_each_other_are_a_circle() {
        let circles = circles_of(
            "pair",
            &[
                ("lib.rs", "//! x\nmod a;\nmod b;\n"),
                ("a.rs", "//! a\nuse crate::b::B;\npub struct A;\n"),
                ("b.rs", "//! b\npub struct B;\nfn f() { let _ = crate::a::A; }\n"),
            ],
        );
        assert_eq!(circles, vec![vec!["src/a.rs".to_string(), "src/b.rs".into(), "src/a.rs".into()]]);
    }

    #[test]
    fn a_re_exporting_parent_is_no_circle_and_a_leaf_breaks_one() {
        let circles = circles_of(
            "reexport",
            &[
                ("lib.rs", "//! x\npub mod config;\nmod strategies;\n"),
                ("config/mod.rs", "//! c\nmod model;\nmod error;\npub use model::Config;\npub use error::Error;\n"),
                ("config/model.rs", "//! m\npub struct Config;\n"),
                ("config/error.rs", "//! e\nuse crate::strategies::StrategyError;\npub struct Error(StrategyError);\n"),
                ("strategies.rs", "//! s\nuse crate::config::Config;\npub struct StrategyError;\n"),
            ],
        );
        assert!(circles.is_empty(), "{circles:?}");
    }

    #[test]
    fn a_child_naming_its_parent_that_uses_it_is_a_circle_but_tests_are_not() {
        let circles = circles_of(
            "parent",
            &[
                ("lib.rs", "//! x\nmod config;\n"),
                ("config/mod.rs", "//! c\nmod read;\nuse read::Reader;\npub fn parse_bool() {}\n"),
                (
                    "config/read.rs",
                    "//! r\nuse super::parse_bool;\npub struct Reader;\n#[cfg(test)]\nmod tests { use super::*; }\n",
                ),
            ],
        );
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert!(circles[0].contains(&"src/config/read.rs".to_string()));
    }

    #[test]
    fn a_pub_use_of_a_sibling_counts_and_a_parent_re_exporting_children_does_not() {
        // The shape issue 21 found: the runtime's setup re-exported the API's
        // handle while the API named the runtime's setup.
        let circles = circles_of(
            "pubuse",
            &[
                (
                    "lib.rs",
                    "//! x
pub mod setup;
pub mod otel;
pub use setup::Telemetry;
",
                ),
                (
                    "setup.rs",
                    "//! s
pub struct Telemetry(crate::otel::setup::Parts);
",
                ),
                (
                    "otel/mod.rs",
                    "//! o
pub mod setup;
",
                ),
                (
                    "otel/setup.rs",
                    "//! r
pub use crate::setup::Telemetry;
pub struct Parts;
",
                ),
            ],
        );
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert!(circles[0].contains(&"src/otel/setup.rs".to_string()) && circles[0].contains(&"src/setup.rs".into()));
    }

    #[test]
    fn a_path_through_another_crates_re_export_names_no_file() {
        // The facade re-exports lens-core's modules at its root and its span
        // module names `crate::attr::KeyValue`, while the root's macro names
        // the span module: no circle, `attr` is lens-core's.
        let circles = circles_of(
            "extern",
            &[
                (
                    "lib.rs",
                    "//! x
pub use lens_core::{attr, config};
pub mod span;
pub use span::Guard;
fn f() { crate::Guard::noop(); }
",
                ),
                (
                    "span.rs",
                    "//! s
use crate::attr::KeyValue;
pub struct Guard;
",
                ),
            ],
        );
        assert!(circles.is_empty(), "{circles:?}");
    }

    #[test]
    fn comments_and_strings_name_nothing() {
        let circles = circles_of(
            "comments",
            &[
                ("lib.rs", "//! x\nmod a;\nmod b;\n"),
                ("a.rs", "//! see crate::b::B\nuse crate::b::B;\n"),
                (
                    "b.rs",
                    "//! b\n/* crate::a::A */ const S: &str = \"crate::a::A\"; const R: &str = r#\"crate::a\"#;\n",
                ),
            ],
        );
        assert!(circles.is_empty(), "{circles:?}");
    }
}
