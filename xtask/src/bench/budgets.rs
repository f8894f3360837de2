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
    use super::Budgets;

    #[test]
    fn reads_sections_keys_and_comments() {
        let budgets = Budgets::parse("# top\n[a]\nmax_ratio = 1.01 # note\n[b]\nmin = 1_000\n").unwrap();
        assert_eq!(budgets.get("a", "max_ratio").unwrap(), 1.01);
        assert_eq!(budgets.get("b", "min").unwrap(), 1000.0);
        assert!(budgets.get("a", "min").unwrap_err().to_string().contains("[a]"));
        assert!(Budgets::parse("x = 1\n").is_err());
    }
}
