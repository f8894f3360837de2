//! Reading typed values from an [`EnvSource`], collecting every problem.
//!
//! A value is looked up under the primary prefix, then the fallback prefix
//! (a flag on the command line wins over both); within one prefix a canonical
//! name and its Lens v0.2.0 alias are read together, and must agree. An empty value (after trimming) counts as unset. Each problem names
//! the variable that was actually read, so a bad value from the fallback
//! prefix is reported under the fallback name (the original named the
//! primary one). Each value read is recorded in [`Origins`].

use std::str::FromStr;

use super::error::ConfigProblem;
use super::model::{Origins, parse_bool};
use crate::env::EnvSource;

/// A variable that was set: its name and trimmed, non-empty value.
pub(crate) struct Found {
    pub(crate) variable: String,
    pub(crate) value: String,
}

/// How an alias's value maps onto the canonical value.
pub(crate) enum Alias {
    /// The alias holds the same kind of value (`EXPORT_STRATEGY`).
    Same(&'static str),
    /// A boolean alias: true means `value`, false says nothing
    /// (`SAMPLER_ENABLED=1` means `rank_aware`).
    FlagMeaning(&'static str, &'static str),
}

pub(crate) struct Reader<'a, E: EnvSource + ?Sized> {
    env: &'a E,
    prefixes: Vec<String>,
    pub(crate) problems: Vec<ConfigProblem>,
    pub(crate) origins: Origins,
    /// Variables whose value is not UTF-8 ([`NOT_UTF8`]), found by
    /// [`Reader::bare`], which reads through `&self` (it is called inside
    /// the arguments of the `&mut self` methods).
    pub(crate) not_utf8: std::cell::RefCell<Vec<ConfigProblem>>,
}

/// What a variable holding bytes that are not UTF-8 accepts, for its
/// problem. [`ProcessEnv`](crate::env::ProcessEnv) hands such a value on
/// with each bad byte replaced by U+FFFD, so the replaced value would
/// silently be another directory, another credential: a value holding
/// U+FFFD is refused instead, and never shown (it may be a secret).
pub(crate) const NOT_UTF8: &str = "UTF-8 text; the value holds bytes that are not UTF-8 (or U+FFFD, what such bytes \
     become), so lens would read a different value than the one set";

/// How a value refused for [`NOT_UTF8`] is shown: not at all.
pub(crate) const NOT_UTF8_SHOWN: &str = "(not UTF-8, not shown)";

impl<'a, E: EnvSource + ?Sized> Reader<'a, E> {
    pub(crate) fn new(env: &'a E, prefix: &str, fallback_prefix: Option<&str>) -> Self {
        let mut prefixes = vec![prefix.to_string()];
        if let Some(fallback) = fallback_prefix.filter(|f| *f != prefix) {
            prefixes.push(fallback.to_string());
        }
        let origins = Origins { prefixes: prefixes.clone(), ..Origins::default() };
        Reader { env, prefixes, problems: Vec::new(), origins, not_utf8: std::cell::RefCell::default() }
    }

    /// A bare variable (no prefix), trimmed, empty = unset. A value that is
    /// not UTF-8 is a problem (once per variable) and reads as unset.
    pub(crate) fn bare(&self, variable: &str) -> Option<Found> {
        let value = self.env.non_empty(variable)?;
        if value.contains(char::REPLACEMENT_CHARACTER) {
            let problem = ConfigProblem::InvalidValue {
                variable: variable.to_string(),
                value: NOT_UTF8_SHOWN.into(),
                expected: NOT_UTF8.into(),
            };
            let mut found = self.not_utf8.borrow_mut();
            if !found.contains(&problem) {
                found.push(problem);
            }
            return None;
        }
        Some(Found { variable: variable.to_string(), value })
    }

    /// `<PREFIX>_<KEY>` under the first prefix that has it.
    pub(crate) fn prefixed(&self, key: &str) -> Option<Found> {
        self.prefixes.iter().find_map(|p| self.bare(&format!("{p}_{key}")))
    }

    /// `<PREFIX>_<KEY>` read together with its alias, prefix by prefix.
    pub(crate) fn prefixed_with_alias(&mut self, key: &str, alias: &Alias) -> Option<Found> {
        for prefix in self.prefixes.clone() {
            let canonical = self.bare(&format!("{prefix}_{key}"));
            let aliased = match alias {
                Alias::Same(alias_key) => self.bare(&format!("{prefix}_{alias_key}")),
                Alias::FlagMeaning(alias_key, meaning) => {
                    let found = self.bare(&format!("{prefix}_{alias_key}"));
                    match found {
                        None => None,
                        Some(found) => match parse_bool(&found.value) {
                            Some(true) => Some(Found { variable: found.variable, value: (*meaning).to_string() }),
                            Some(false) => None,
                            None => {
                                self.problems.push(ConfigProblem::InvalidBoolean {
                                    variable: found.variable,
                                    value: found.value,
                                });
                                None
                            }
                        },
                    }
                }
            };
            match (canonical, aliased) {
                (Some(canonical), Some(aliased)) => {
                    if canonical.value != aliased.value {
                        // The alias's value as written (`1`), not its meaning.
                        let alias_value = self.env.non_empty(&aliased.variable).unwrap_or(aliased.value);
                        self.problems.push(ConfigProblem::AliasConflict {
                            variable: canonical.variable.clone(),
                            value: canonical.value.clone(),
                            alias: aliased.variable,
                            alias_value,
                        });
                    }
                    return Some(canonical);
                }
                (Some(found), None) | (None, Some(found)) => return Some(found),
                (None, None) => {}
            }
        }
        None
    }

    /// Records `found` as the origin of `field`, whose parsed value prints
    /// as `repr`.
    pub(crate) fn record(&mut self, field: &'static str, found: &Found, repr: String) {
        self.origins.set(field, &found.variable, repr);
        if !field.is_empty() {
            self.origins.written.insert(field, found.value.clone());
        }
    }

    pub(crate) fn string(&mut self, field: &'static str, found: Option<Found>) -> Option<String> {
        let found = found?;
        self.record(field, &found, found.value.clone());
        Some(found.value)
    }

    pub(crate) fn bool(&mut self, field: &'static str, found: Option<Found>) -> Option<bool> {
        let found = found?;
        match parse_bool(&found.value) {
            Some(b) => {
                self.record(field, &found, b.to_string());
                Some(b)
            }
            None => {
                self.problems.push(ConfigProblem::InvalidBoolean { variable: found.variable, value: found.value });
                None
            }
        }
    }

    /// An integer; a value that is not one is a problem saying `expected`.
    fn int<T: FromStr + ToString>(&mut self, field: &'static str, found: Option<Found>, expected: &str) -> Option<T> {
        let found = found?;
        match parse_int::<T>(&found.value) {
            Some(n) => {
                self.record(field, &found, n.to_string());
                Some(n)
            }
            None => {
                self.problems.push(ConfigProblem::InvalidInteger {
                    variable: found.variable,
                    value: found.value,
                    expected: expected.into(),
                });
                None
            }
        }
    }

    /// An integer that must lie in `min..=max`, else a problem saying `expected`.
    pub(crate) fn int_in(
        &mut self,
        field: &'static str,
        found: Option<Found>,
        min: i128,
        max: i128,
        expected: &str,
    ) -> Option<i128> {
        let variable = found.as_ref().map(|f| f.variable.clone())?;
        let n: i128 = self.int(field, found, expected)?;
        if n < min || n > max {
            self.problems.push(ConfigProblem::InvalidValue {
                variable,
                value: n.to_string(),
                expected: expected.into(),
            });
            return None;
        }
        Some(n)
    }

    /// A float; a value that is not a number is a problem saying `expected`
    /// (the range is checked by the caller or by validation).
    pub(crate) fn float(&mut self, field: &'static str, found: Option<Found>, expected: &str) -> Option<f64> {
        let found = found?;
        match super::pyrepr::parse_py_float(&found.value).ok_or(()) {
            Ok(x) => {
                self.record(field, &found, super::pyrepr::py_float(x));
                Some(x)
            }
            Err(_) => {
                self.problems.push(ConfigProblem::InvalidFloat {
                    variable: found.variable,
                    value: found.value,
                    expected: expected.into(),
                });
                None
            }
        }
    }

    /// A name from a fixed set, mapped by `parse`.
    pub(crate) fn name<T>(
        &mut self,
        field: &'static str,
        found: Option<Found>,
        what: &'static str,
        accepted: &'static [&'static str],
        parse: impl Fn(&str) -> Option<T>,
    ) -> Option<T> {
        let found = found?;
        let lower = found.value.to_ascii_lowercase();
        match parse(&lower).filter(|_| accepted.contains(&lower.as_str())) {
            Some(v) => {
                self.record(field, &found, lower);
                Some(v)
            }
            None => {
                self.problems.push(unknown_name(found.variable, what, found.value, accepted));
                None
            }
        }
    }

    pub(crate) fn push(&mut self, problem: ConfigProblem) {
        self.problems.push(problem);
    }
}

pub(crate) fn unknown_name(
    variable: String,
    what: &'static str,
    value: String,
    accepted: &'static [&'static str],
) -> ConfigProblem {
    // A name that several accepted ones start with (`http`) means the
    // first of them (the list's order: `http/protobuf`), whatever is
    // closest in spelling.
    let lower = value.trim().to_lowercase();
    let started = accepted.iter().copied().find(|name| !lower.is_empty() && name.starts_with(&lower));
    let suggestion = started.or_else(|| crate::suggest::closest(&value, accepted.iter().copied()));
    ConfigProblem::UnknownName { variable, what, value, accepted: accepted.to_vec(), suggestion }
}

/// Whether a list variable's value (set, so not empty) holds only commas
/// and spaces: no item at all, likely a broken template rather than a list
/// meant empty (which each such variable spells in words).
pub(crate) fn only_commas(value: &str) -> bool {
    value.split(',').all(|item| item.trim().is_empty())
}

/// Python's `int()` on a trimmed string: an optional sign, digits, and
/// single underscores between digits.
fn parse_int<T: FromStr>(s: &str) -> Option<T> {
    super::pyrepr::parse_py_number(s)
}
