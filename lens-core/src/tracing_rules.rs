//! The rules that map `tracing` targets to span groups
//! (`<PREFIX>_TRACING_GROUPS`), read by the `lens-tracing` bridge.
//!
//! A spec is a comma-separated list of `target_prefix=group` items, where
//! `group` is a group of the catalog or `off`, optionally followed by
//! `:per_entry` (one span per entry of the `tracing` span instead of one per
//! span). A prefix matches a target that equals it or that continues with
//! `::` after it (`h2` matches `h2::proto`, not `h2c`); the longest matching
//! prefix wins. The prefix `*` is the default for every target that no other
//! rule matches and that is not a `lens::<group>` target; without it the
//! default is `off`.
//!
//! ```
//! use lens_core::groups::{LENS_CATALOG, SpanGroup};
//! use lens_core::tracing_rules::TracingRules;
//!
//! let rules =
//!     TracingRules::parse("tower_http=job, candle_transformers=forward_backward:per_entry, h2=off", &LENS_CATALOG)
//!         .unwrap();
//! assert_eq!(rules.decide("tower_http::trace::on_request").group, Some(SpanGroup::JOB));
//! // candle's layer spans.
//! assert!(rules.decide("candle_transformers::models::with_tracing").per_entry);
//! assert!(rules.has_per_entry() && !TracingRules::parse("h2=off", &LENS_CATALOG).unwrap().has_per_entry());
//! assert_eq!(rules.decide("h2::proto").group, None);
//! assert_eq!(rules.decide("lens::checkpoint").group, Some(SpanGroup::CHECKPOINT));
//! assert_eq!(rules.decide("my_app").group, None, "off unless configured");
//!
//! let err = TracingRules::parse("candle=stpe", &LENS_CATALOG).unwrap_err();
//! assert!(err.to_string().contains("did you mean 'step'?"), "{err}");
//! ```
//!
//! A rule whose prefix matches no target the bridge saw is reported at
//! shutdown with the nearest targets it did see ([`TracingRules::unmatched`]):
//! a bridge notes each callsite's target once, when `tracing` asks its filter
//! about the callsite ([`TracingRules::note_callsite`]), never per span.
//!
//! ```
//! use lens_core::groups::LENS_CATALOG;
//! use lens_core::tracing_rules::TracingRules;
//!
//! let rules = TracingRules::parse("candle=step:per_entry, tower_http=job", &LENS_CATALOG).unwrap();
//! rules.note_callsite("candle_transformers::models::with_tracing");
//! rules.note_callsite("tower_http::trace::on_request");
//! let unmatched: Vec<String> = rules.unmatched().iter().map(ToString::to_string).collect();
//! assert_eq!(
//!     unmatched,
//!     ["rule candle=step:per_entry matched nothing; seen: candle_transformers::models::with_tracing"]
//! );
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::groups::{SpanGroup, SpanGroupCatalog};

/// The group word that turns a target off.
pub const OFF: &str = "off";

/// The rule option that records one span per entry.
pub const PER_ENTRY: &str = "per_entry";

/// The prefix of a rule that applies to every target no other rule matches.
pub const DEFAULT_TARGET: &str = "*";

/// The target prefix that names a group directly: `lens::<group>`.
pub const LENS_TARGET_PREFIX: &str = "lens::";

/// What the rules decide for one target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracingDecision {
    /// The span group, or `None` when the target is off.
    pub group: Option<SpanGroup>,
    /// Whether each entry of a span is recorded as a span of its own.
    pub per_entry: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    prefix: String,
    decision: TracingDecision,
}

/// At most this many distinct targets are kept for the nearest-target list
/// of [`TracingRules::unmatched`] (a program has a few hundred).
pub const MAX_SEEN_TARGETS: usize = 4096;

/// At most this many nearest targets are named per unmatched rule.
pub const MAX_NEAREST_TARGETS: usize = 5;

/// A seen target is named for an unmatched rule when its Jaro-Winkler
/// similarity to the rule's prefix (at its best `::` boundary) is at least
/// this.
const NEAREST_SIMILARITY: f64 = 0.7;

/// Which rules matched a callsite, and the targets seen, shared by every
/// clone of one [`TracingRules`].
#[derive(Debug, Default)]
struct RuleUsage {
    /// Whether any callsite was noted (a bridge uses these rules).
    observed: AtomicBool,
    /// Per rule, in the order of `TracingRules::rules`.
    matched: Vec<AtomicBool>,
    /// Distinct targets seen, at most [`MAX_SEEN_TARGETS`].
    seen: Mutex<BTreeSet<&'static str>>,
    /// `lens::<word>` targets warned about (no such group, no rule).
    warned: Mutex<BTreeSet<&'static str>>,
    /// `lens.group` field values warned about (no such group), at most
    /// [`MAX_SEEN_TARGETS`].
    warned_fields: Mutex<BTreeSet<String>>,
}

/// Parsed `<PREFIX>_TRACING_GROUPS` rules, with the catalog that resolves
/// `lens::<group>` targets.
///
/// Clones share what [`note_callsite`](TracingRules::note_callsite) records.
#[derive(Clone, Debug)]
pub struct TracingRules {
    /// Longest prefix first.
    rules: Vec<Rule>,
    default: TracingDecision,
    catalog: &'static SpanGroupCatalog,
    usage: Arc<RuleUsage>,
    /// The variable the rules were read from, for warnings
    /// (`MYJOB_OTEL_TRACING_GROUPS`); `<PREFIX>_TRACING_GROUPS` when unknown.
    variable: Option<Arc<str>>,
}

/// A rule that matched no callsite's target, with the nearest targets seen:
/// its `Display` is the warning setup's handle gives at shutdown
/// (`rule candle=step matched nothing; seen: candle_transformers::models::with_tracing`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnmatchedRule {
    /// The rule as written back (`candle=step:per_entry`).
    pub rule: String,
    /// At most [`MAX_NEAREST_TARGETS`] seen targets close to its prefix,
    /// nearest first.
    pub nearest: Vec<&'static str>,
}

impl fmt::Display for UnmatchedRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {} matched nothing", self.rule)?;
        if self.nearest.is_empty() {
            f.write_str(" (no `tracing` target seen is close to its prefix)")
        } else {
            write!(f, "; seen: {}", self.nearest.join(", "))
        }
    }
}

impl TracingRules {
    /// No rules: every target is off except `lens::<group>` targets.
    pub fn none(catalog: &'static SpanGroupCatalog) -> TracingRules {
        TracingRules {
            rules: Vec::new(),
            default: TracingDecision::default(),
            catalog,
            usage: Arc::new(RuleUsage::default()),
            variable: None,
        }
    }

    /// The rules, their warnings naming `variable` (the variable they were
    /// read from, such as `MYJOB_OTEL_TRACING_GROUPS`).
    #[must_use]
    pub fn for_variable(mut self, variable: impl Into<String>) -> TracingRules {
        self.variable = Some(Arc::from(variable.into()));
        self
    }

    /// The variable the rules were read from, for messages.
    fn variable(&self) -> &str {
        self.variable.as_deref().unwrap_or("<PREFIX>_TRACING_GROUPS")
    }

    /// The warning, once per value (`None` after), that a span's
    /// `lens.group` field names `word`, a group the catalog does not have:
    /// the span (of `target`) is not recorded, which a misspelt field would
    /// otherwise leave unsaid. `None` for a group the catalog has.
    pub fn unknown_group_field(&self, word: &str, target: &str) -> Option<String> {
        if self.catalog.group(word).is_some() {
            return None;
        }
        let mut warned = self.usage.warned_fields.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.len() >= MAX_SEEN_TARGETS || !warned.insert(word.to_string()) {
            return None;
        }
        drop(warned);
        let groups = self.catalog.names(self.catalog.all_groups());
        let suggestion = crate::suggest::closest(word, groups.iter().copied());
        Some(format!(
            "a `tracing` span of target {target} names span group '{word}' in its lens.group field, which the {} \
             catalog does not have: such spans are not recorded{}; name one of its groups ({})",
            self.catalog.name(),
            did_you_mean(suggestion),
            groups.join(", ")
        ))
    }

    /// Parses `spec` against `catalog` (empty items are skipped; group names
    /// and options are case-insensitive, target prefixes are not).
    pub fn parse(spec: &str, catalog: &'static SpanGroupCatalog) -> Result<TracingRules, TracingRulesError> {
        let mut rules = TracingRules::none(catalog);
        // Only commas: a broken template rather than no rule (which is the
        // variable unset or empty), as for the other list variables.
        if !spec.trim().is_empty() && spec.split(',').all(|item| item.trim().is_empty()) {
            return Err(TracingRulesError::OnlyCommas);
        }
        for item in spec.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let Some((prefix, rest)) = item.split_once('=') else {
                return Err(TracingRulesError::MissingGroup { item: item.to_string() });
            };
            let prefix = prefix.trim();
            if prefix.is_empty() || prefix.chars().any(char::is_whitespace) {
                return Err(TracingRulesError::BadTarget { item: item.to_string() });
            }
            let (group_word, option) = match rest.split_once(':') {
                Some((group, option)) => (group.trim().to_lowercase(), Some(option.trim().to_lowercase())),
                None => (rest.trim().to_lowercase(), None),
            };
            let group = if group_word == OFF {
                None
            } else {
                match catalog.group(&group_word) {
                    Some(group) => Some(group),
                    None => {
                        let mut valid: Vec<&'static str> = catalog.groups().iter().map(|g| g.name()).collect();
                        valid.push(OFF);
                        valid.sort_unstable();
                        let suggestion = crate::suggest::closest(&group_word, valid.iter().copied());
                        return Err(TracingRulesError::UnknownGroup {
                            item: item.to_string(),
                            word: group_word,
                            valid,
                            suggestion,
                        });
                    }
                }
            };
            let per_entry = match option.as_deref() {
                None => false,
                Some(PER_ENTRY) => true,
                Some(other) => {
                    return Err(TracingRulesError::UnknownOption {
                        item: item.to_string(),
                        option: other.to_string(),
                        suggestion: crate::suggest::closest(other, [PER_ENTRY]),
                    });
                }
            };
            let decision = TracingDecision { group, per_entry };
            // A later rule for a target replaces an earlier one, so that
            // appending to the variable (`"$X,h2=off"`) overrides.
            if prefix == DEFAULT_TARGET {
                rules.default = decision;
            } else {
                rules.rules.retain(|rule| rule.prefix != prefix);
                rules.rules.push(Rule { prefix: prefix.to_string(), decision });
            }
        }
        rules.rules.sort_by_key(|rule| std::cmp::Reverse(rule.prefix.len()));
        rules.usage = Arc::new(RuleUsage {
            matched: rules.rules.iter().map(|_| AtomicBool::new(false)).collect(),
            ..RuleUsage::default()
        });
        Ok(rules)
    }

    /// Notes a callsite's target: which rules' prefixes match it, and the
    /// target itself for [`unmatched`](TracingRules::unmatched). A bridge
    /// calls it where `tracing` asks about a callsite (once per callsite and
    /// per rebuild of the interest cache), never per span.
    pub fn note_callsite(&self, target: &'static str) {
        self.usage.observed.store(true, Ordering::Relaxed);
        for (rule, matched) in self.rules.iter().zip(&self.usage.matched) {
            if prefix_matches(&rule.prefix, target) {
                matched.store(true, Ordering::Relaxed);
            }
        }
        let mut seen = self.usage.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() < MAX_SEEN_TARGETS {
            seen.insert(target);
        }
        drop(seen);
        if let Some(warning) = self.unknown_lens_group(target)
            && self.usage.warned.lock().unwrap_or_else(PoisonError::into_inner).insert(target)
        {
            crate::diag::warn(warning);
        }
    }

    /// Why the spans of `target` are silently off, when it is a
    /// `lens::<word>` target whose word names no group of the catalog and
    /// no rule (nor a `*` rule) decides it: a target written for another
    /// catalog (Megatron's `lens::inference`) in a program with its own.
    pub fn unknown_lens_group(&self, target: &str) -> Option<String> {
        let rest = target.strip_prefix(LENS_TARGET_PREFIX)?;
        let word = rest.split("::").next().unwrap_or(rest);
        if self.catalog.group(word).is_some()
            || self.default.group.is_some()
            || self.rules.iter().any(|rule| prefix_matches(&rule.prefix, target))
        {
            return None;
        }
        let groups = self.catalog.names(self.catalog.all_groups());
        let suggestion = crate::suggest::closest(word, groups.iter().copied());
        Some(format!(
            "`tracing` target {target} names span group '{word}', which the {} catalog does not have: its spans are \
             not recorded{}; name one of its groups ({}) as lens::<group>, or give the target a rule in {}",
            self.catalog.name(),
            did_you_mean(suggestion),
            groups.join(", "),
            self.variable()
        ))
    }

    /// The rules whose prefix matched no target noted so far, each with the
    /// nearest targets seen; empty when no callsite was noted at all (no
    /// bridge used these rules).
    pub fn unmatched(&self) -> Vec<UnmatchedRule> {
        if !self.usage.observed.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let seen = self.usage.seen.lock().unwrap_or_else(PoisonError::into_inner);
        self.rules
            .iter()
            .zip(&self.usage.matched)
            .filter(|(_, matched)| !matched.load(Ordering::Relaxed))
            .map(|(rule, _)| UnmatchedRule {
                rule: format!("{}={}", rule.prefix, rule.decision),
                nearest: nearest_targets(&rule.prefix, seen.iter().copied()),
            })
            .collect()
    }

    /// The catalog that names the groups.
    pub fn catalog(&self) -> &'static SpanGroupCatalog {
        self.catalog
    }

    /// The decision for `target`: the longest matching rule, else the group
    /// of a `lens::<group>` target, else the `*` rule (off without one).
    pub fn decide(&self, target: &str) -> TracingDecision {
        if let Some(rule) = self.rules.iter().find(|rule| prefix_matches(&rule.prefix, target)) {
            return rule.decision;
        }
        if let Some(rest) = target.strip_prefix(LENS_TARGET_PREFIX) {
            let word = rest.split("::").next().unwrap_or(rest);
            if let Some(group) = self.catalog.group(word) {
                return TracingDecision { group: Some(group), per_entry: false };
            }
        }
        self.default
    }

    /// Whether any rule (or the default) asks for per-entry spans: without
    /// one, the bridge never needs a span's decision after its filter.
    pub fn has_per_entry(&self) -> bool {
        self.default.per_entry || self.rules.iter().any(|rule| rule.decision.per_entry)
    }

    /// Whether no rule and no default is configured.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.default == TracingDecision::default()
    }
}

fn prefix_matches(prefix: &str, target: &str) -> bool {
    target.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

/// The seen targets nearest to `prefix`: each scored by its best
/// Jaro-Winkler similarity to `prefix` over its `::` boundaries (so
/// `candle` is close to `candle_transformers::models::with_tracing` through
/// `candle_transformers`), those at least [`NEAREST_SIMILARITY`], best
/// first, at most [`MAX_NEAREST_TARGETS`].
fn nearest_targets(prefix: &str, seen: impl Iterator<Item = &'static str>) -> Vec<&'static str> {
    let score = |target: &str| {
        target
            .match_indices("::")
            .map(|(at, _)| &target[..at])
            .chain([target])
            .map(|head| strsim::jaro_winkler(prefix, head))
            .fold(0.0_f64, f64::max)
    };
    let mut scored: Vec<(f64, &'static str)> =
        seen.map(|target| (score(target), target)).filter(|(score, _)| *score >= NEAREST_SIMILARITY).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().take(MAX_NEAREST_TARGETS).map(|(_, target)| target).collect()
}

/// A `<PREFIX>_TRACING_GROUPS` spec that cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TracingRulesError {
    /// An item without `=`.
    #[error("'{item}' has no group: write target_prefix=group, e.g. 'tower_http=job'")]
    MissingGroup {
        /// The item.
        item: String,
    },
    /// An empty target prefix, or one with spaces.
    #[error(
        "'{item}' has no valid target prefix: write target_prefix=group, e.g. 'tower_http=job' (or '*=group' for the default)"
    )]
    BadTarget {
        /// The item.
        item: String,
    },
    /// A group that the catalog does not have.
    #[error("'{item}' names unknown span group '{word}'. Valid options: {}{}", quoted(valid), did_you_mean(*suggestion))]
    UnknownGroup {
        /// The item.
        item: String,
        /// The group word, lower-cased.
        word: String,
        /// Every accepted word (the catalog's groups and `off`), sorted.
        valid: Vec<&'static str>,
        /// The closest accepted word, when one is close enough to be a typo.
        suggestion: Option<&'static str>,
    },
    /// Only commas: no rule at all.
    #[error(
        "no rule, only commas: write target_prefix=group items separated by commas, e.g. 'tower_http=job,h2=off', or leave the variable unset for none"
    )]
    OnlyCommas,
    /// An option other than `per_entry`.
    #[error("'{item}' has unknown option '{option}'. The only option is 'per_entry'{}", did_you_mean(*suggestion))]
    UnknownOption {
        /// The item.
        item: String,
        /// The option, lower-cased.
        option: String,
        /// `per_entry`, when the option is close to it.
        suggestion: Option<&'static str>,
    },
}

fn quoted(words: &[&str]) -> String {
    let words: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    format!("[{}]", words.join(", "))
}

fn did_you_mean(suggestion: Option<&str>) -> String {
    suggestion.map_or_else(String::new, |s| format!(" (did you mean '{s}'?)"))
}

impl fmt::Display for TracingDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.group {
            Some(group) => write!(f, "{group}")?,
            None => f.write_str(OFF)?,
        }
        if self.per_entry {
            write!(f, ":{PER_ENTRY}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::LENS_CATALOG;

    #[test]
    fn the_longest_prefix_wins_on_module_boundaries() {
        let rules = TracingRules::parse("tower=job, tower_http=step, h2=off, *=evaluate", &LENS_CATALOG).unwrap();
        assert_eq!(rules.decide("tower_http::trace").group, Some(SpanGroup::STEP));
        assert_eq!(rules.decide("tower::buffer").group, Some(SpanGroup::JOB));
        assert_eq!(rules.decide("h2").group, None);
        assert_eq!(rules.decide("h2c").group, Some(SpanGroup::EVALUATE), "h2 does not match h2c");
    }

    #[test]
    fn a_misspelt_group_field_is_said_once_per_value() {
        let rules = TracingRules::none(&LENS_CATALOG);
        let warning = rules.unknown_group_field("chekpoint", "my_app::save").expect("said the first time");
        assert!(
            warning.starts_with(
                "a `tracing` span of target my_app::save names span group 'chekpoint' in its lens.group field, which \
                 the lens catalog does not have: such spans are not recorded (did you mean 'checkpoint'?)"
            ),
            "{warning}"
        );
        assert_eq!(rules.clone().unknown_group_field("chekpoint", "my_app::other"), None, "once per value");
        assert_eq!(rules.unknown_group_field("checkpoint", "my_app::save"), None, "a group it has");
    }

    #[test]
    fn warnings_name_the_variable_the_rules_came_from() {
        let rules = TracingRules::none(&LENS_CATALOG).for_variable("MYJOB_OTEL_TRACING_GROUPS");
        let warning = rules.unknown_lens_group("lens::inference::http").unwrap();
        assert!(warning.ends_with("or give the target a rule in MYJOB_OTEL_TRACING_GROUPS"), "{warning}");
    }

    #[test]
    fn a_rule_beats_a_lens_target_and_a_lens_target_beats_the_default() {
        // A `lens::` target of a group this catalog lacks, and no rule:
        // named, with the groups there are; a rule or a group decides it.
        let warning = TracingRules::none(&LENS_CATALOG).unknown_lens_group("lens::inference::http").unwrap();
        assert!(
            warning.starts_with(
                "`tracing` target lens::inference::http names span group 'inference', which the lens catalog does \
                 not have: its spans are not recorded; name one of its groups (job, "
            ) && warning.ends_with("as lens::<group>, or give the target a rule in <PREFIX>_TRACING_GROUPS"),
            "{warning}"
        );
        assert!(
            TracingRules::none(&LENS_CATALOG)
                .unknown_lens_group("lens::chekpoint")
                .unwrap()
                .contains("not recorded (did you mean 'checkpoint'?);")
        );
        assert_eq!(TracingRules::none(&LENS_CATALOG).unknown_lens_group("lens::job::http"), None);
        assert_eq!(TracingRules::none(&LENS_CATALOG).unknown_lens_group("my_app"), None);
        let ruled = TracingRules::parse("lens::inference=job", &LENS_CATALOG).unwrap();
        assert_eq!(ruled.unknown_lens_group("lens::inference::http"), None);
        let rules = TracingRules::parse("lens::job=off, *=step", &LENS_CATALOG).unwrap();
        assert_eq!(rules.decide("lens::job").group, None);
        assert_eq!(rules.decide("lens::checkpoint::save").group, Some(SpanGroup::CHECKPOINT));
        assert_eq!(rules.decide("lens::nope").group, Some(SpanGroup::STEP));
    }

    #[test]
    fn an_unmatched_rule_names_at_most_five_nearest_targets_and_a_matched_one_is_not_reported() {
        let rules = TracingRules::parse("candle=step:per_entry, tower_http=job, h2=off, *=job", &LENS_CATALOG).unwrap();
        assert!(rules.unmatched().is_empty(), "nothing noted: no bridge used the rules");
        let clone = rules.clone();
        for target in [
            "tower_http::trace",
            "candle_transformers::models::with_tracing",
            "candle_nn::ops",
            "candle_core::tensor",
            "candle_datasets",
            "candle_onnx",
            "my_app",
        ] {
            clone.note_callsite(target);
        }
        let unmatched = rules.unmatched();
        let rules_named: Vec<&str> = unmatched.iter().map(|u| u.rule.as_str()).collect();
        assert_eq!(rules_named, ["candle=step:per_entry", "h2=off"]);
        // Five candle targets seen, the nearest first; `my_app` and
        // `tower_http` are not close.
        assert_eq!(
            unmatched[0].nearest,
            [
                "candle_nn::ops",
                "candle_core::tensor",
                "candle_onnx",
                "candle_datasets",
                "candle_transformers::models::with_tracing"
            ]
        );
        clone.note_callsite("candle_examples");
        assert_eq!(rules.unmatched()[0].nearest.len(), MAX_NEAREST_TARGETS, "at most five");
        assert_eq!(
            unmatched[1].to_string(),
            "rule h2=off matched nothing (no `tracing` target seen is close to its prefix)"
        );
    }

    #[test]
    fn bad_items_say_what_to_write() {
        let err = |spec| TracingRules::parse(spec, &LENS_CATALOG).unwrap_err().to_string();
        assert!(err("tower_http").contains("write target_prefix=group"));
        assert!(err("=job").contains("no valid target prefix"));
        assert!(err("candle=step:per_entyr").contains("did you mean 'per_entry'?"));
        let text = err("candle=chekpoint");
        assert!(text.contains("'checkpoint'") && text.contains("'off'") && text.contains("did you mean"), "{text}");
        assert!(err(" , ,").starts_with("no rule, only commas"), "{}", err(" , ,"));
        // A later rule for a target replaces an earlier one (appending to
        // the variable overrides).
        let rules = TracingRules::parse("my_app=step, h2=off, my_app=off, *=job, *=step", &LENS_CATALOG).unwrap();
        assert_eq!(rules.decide("my_app").group, None);
        assert_eq!(rules.decide("other").group, Some(SpanGroup::STEP));
        // An empty value is no rule, and empty items between rules are skipped.
        assert!(TracingRules::parse("", &LENS_CATALOG).is_ok());
        assert!(TracingRules::parse("h2=off,,tower=job,", &LENS_CATALOG).is_ok());
    }
}
