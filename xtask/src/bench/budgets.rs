//! The budgets file (`xtask/budgets.toml`): `[scenario]` sections of
//! `key = number` lines with `#` comments. A tiny reader for that subset of
//! TOML, so that xtask needs no TOML crate.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Every scenario's limits, by section and key.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    sections: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Budgets {
    pub(crate) fn load(path: &Path) -> Result<Budgets> {
        let text = std::fs::read_to_string(path).with_context(|| format!("could not read {}", path.display()))?;
        Budgets::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    pub(crate) fn parse(text: &str) -> Result<Budgets> {
        let mut budgets = Budgets::default();
        let mut current: Option<String> = None;
        for (index, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                current = Some(name.trim().to_string());
                budgets.sections.entry(name.trim().to_string()).or_default();
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                bail!("line {}: expected `key = number`, found `{raw}`", index + 1);
            };
            let Some(section) = &current else {
                bail!("line {}: `{}` outside a [scenario] section", index + 1, key.trim());
            };
            let value: f64 = value
                .trim()
                .replace('_', "")
                .parse()
                .with_context(|| format!("line {}: `{}` is not a number", index + 1, value.trim()))?;
            budgets.sections.entry(section.clone()).or_default().insert(key.trim().to_string(), value);
        }
        Ok(budgets)
    }

    /// Every scenario, by name (the docs test checks each has a row).
    #[cfg(test)]
    pub(crate) fn scenarios(&self) -> impl Iterator<Item = &str> {
        self.sections.keys().map(String::as_str)
    }

    /// The limit `key` of `scenario`; a missing one is an error that names both.
    pub(crate) fn get(&self, scenario: &str, key: &str) -> Result<f64> {
        self.sections
            .get(scenario)
            .and_then(|keys| keys.get(key))
            .copied()
            .with_context(|| format!("budgets file: no `{key}` in [{scenario}]"))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::Budgets;

    #[test]
    fn reads_sections_keys_and_comments() {
        let budgets = Budgets::parse("# top\n[a]\nmax_ratio = 1.01 # note\n[b]\nmin = 1_000\n").unwrap();
        assert_eq!(budgets.get("a", "max_ratio").unwrap(), 1.01);
        assert_eq!(budgets.get("b", "min").unwrap(), 1000.0);
        assert!(budgets.get("a", "min").unwrap_err().to_string().contains("[a]"));
        assert!(Budgets::parse("x = 1\n").is_err());
    }

    /// docs/performance.md's budget table (not the results between the bench
    /// markers) has three columns in every row and names every scenario of
    /// the budgets file: result rows pasted over budget rows once replaced
    /// `record_training_metrics` and both tracing budgets there.
    #[test]
    fn the_docs_budget_table_names_every_budget_and_holds_no_result_rows() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let budgets = Budgets::load(&root.join("xtask/budgets.toml")).unwrap();
        let page = std::fs::read_to_string(root.join("docs/performance.md")).unwrap();
        let section = page.split("## What each budget protects").nth(1).expect("the budget table's heading");
        let rows: Vec<&str> =
            section.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')).collect();
        assert_eq!(rows.first().copied(), Some("| Scenario | Budget | What it protects |"));
        for row in rows.iter().filter(|row| !row.starts_with("|---")) {
            assert_eq!(row.matches(" | ").count(), 2, "not a budget row (scenario, budget, what it protects): {row}");
        }
        for scenario in budgets.scenarios() {
            let named = rows.iter().any(|row| row.split(" | ").next().unwrap().contains(&format!("`{scenario}`")));
            assert!(named, "docs/performance.md's budget table has no row for `{scenario}`");
        }
    }
}
