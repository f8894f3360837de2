//! Configuration problems.
//!
//! Reading and validating a configuration never stops at the first problem:
//! every problem is collected into a [`ConfigError`], so that a user fixes a
//! job script in one round. Each [`ConfigProblem`] names the variable that
//! was actually read (or the field set in code, or the command-line flag),
//! the bad value, and what is accepted. Header values of
//! `OTEL_EXPORTER_OTLP_HEADERS` never appear here: a header problem shows the
//! key (or the position of the entry) only.

use std::fmt;

use super::pyrepr::{did_you_mean, py_float, py_list};
use crate::groups::UnknownSpanGroup;
use crate::strategies::StrategyError;

/// One thing wrong with a configuration.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigProblem {
    /// A boolean variable holds something other than the accepted spellings.
    #[error("Invalid boolean for {variable}: '{value}'. Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'.")]
    InvalidBoolean {
        /// The variable read.
        variable: String,
        /// The value found (trimmed).
        value: String,
    },
    /// An integer variable does not hold an integer (the original's text,
    /// then what the variable accepts).
    #[error("Invalid integer for {variable}: '{value}'. Expected {expected}.")]
    InvalidInteger {
        /// The variable read.
        variable: String,
        /// The value found (trimmed).
        value: String,
        /// What the variable accepts, in words.
        expected: String,
    },
    /// A float variable does not hold a number (the original's text, then
    /// what the variable accepts).
    #[error("Invalid float for {variable}: '{value}'. Expected {expected}.")]
    InvalidFloat {
        /// The variable read.
        variable: String,
        /// The value found (trimmed).
        value: String,
        /// What the variable accepts, in words.
        expected: String,
    },
    /// `export_sample_rate` outside `[0.0, 1.0]` (the original's text).
    #[error("Invalid value for {variable}: export_sample_rate must be in [0.0, 1.0], got {}", py_float(*value))]
    SampleRateOutOfRange {
        /// The variable (or field) the rate came from.
        variable: String,
        /// The rate.
        value: f64,
    },
    /// A number outside its accepted range, or a value of the wrong shape.
    #[error("Invalid value for {variable}: '{value}'. Expected {expected}.")]
    InvalidValue {
        /// The variable (or field) the value came from.
        variable: String,
        /// The value found.
        value: String,
        /// What is accepted, in words.
        expected: String,
    },
    /// A name that is not one of a fixed set (exporter, protocol, sampler, ...).
    #[error("Unknown {what} '{value}' in {variable}. Expected one of: {}{}", py_list(accepted), did_you_mean(suggestion.as_deref()))]
    UnknownName {
        /// The variable (or field) the name came from.
        variable: String,
        /// What kind of name it is, e.g. `exporter`.
        what: &'static str,
        /// The name found.
        value: String,
        /// Every accepted name.
        accepted: Vec<&'static str>,
        /// The closest accepted name, when one is close enough to be a typo.
        suggestion: Option<&'static str>,
    },
    /// A rank or sampling strategy name that is not registered.
    #[error("{variable}: {source}")]
    UnknownStrategy {
        /// The variable (or field) the name came from.
        variable: String,
        /// The registry's error, listing the registered names.
        source: StrategyError,
    },
    /// A span-group spec naming an unknown group or preset.
    #[error("Invalid span-group spec in {variable} ('{value}'): {source}")]
    UnknownSpanGroup {
        /// The variable (or field, or flag) the spec came from.
        variable: String,
        /// The whole spec.
        value: String,
        /// The parser's error, with the accepted words and a suggestion.
        source: UnknownSpanGroup,
    },
    /// A `<PREFIX>_TRACING_GROUPS` spec that cannot be parsed.
    #[error("Invalid tracing rules in {variable} ('{value}'): {source}")]
    InvalidTracingRules {
        /// The variable (or field) the spec came from.
        variable: String,
        /// The whole spec.
        value: String,
        /// What is wrong, with the accepted words and a suggestion.
        source: crate::tracing_rules::TracingRulesError,
    },
    /// A canonical variable and its alias are both set and disagree.
    #[error(
        "{variable}='{value}' and its alias {alias}='{alias_value}' disagree. Set only one of them ({variable} is the canonical name)."
    )]
    AliasConflict {
        /// The canonical variable.
        variable: String,
        /// Its value.
        value: String,
        /// The alias variable.
        alias: String,
        /// The alias's value.
        alias_value: String,
    },
    /// An OTLP endpoint that is not an `http`/`https` URL with a host.
    #[error(
        "Invalid endpoint URL in {variable}: '{value}' ({reason}). Expected http://host[:port][/path] or https://host[:port][/path], e.g. 'http://localhost:4317'."
    )]
    InvalidEndpoint {
        /// The variable (or field) the endpoint came from.
        variable: String,
        /// The endpoint, with any user-info part replaced by `[REDACTED]`.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A header list that does not follow the `key=value,key2=value2` syntax.
    /// Never shows a header value.
    #[error(
        "Invalid header list in {variable}: {detail}. Expected comma-separated key=value pairs with percent-encoded values, e.g. 'Authorization=Bearer <token>,X-Tenant=team-a'."
    )]
    InvalidHeaders {
        /// The variable the headers came from.
        variable: String,
        /// What is wrong, naming the key or the entry's position only.
        detail: String,
    },
}

impl ConfigProblem {
    /// The variable (or field, or flag) the problem is about.
    pub fn variable(&self) -> &str {
        match self {
            ConfigProblem::InvalidBoolean { variable, .. }
            | ConfigProblem::InvalidInteger { variable, .. }
            | ConfigProblem::InvalidFloat { variable, .. }
            | ConfigProblem::SampleRateOutOfRange { variable, .. }
            | ConfigProblem::InvalidValue { variable, .. }
            | ConfigProblem::UnknownName { variable, .. }
            | ConfigProblem::UnknownStrategy { variable, .. }
            | ConfigProblem::UnknownSpanGroup { variable, .. }
            | ConfigProblem::InvalidTracingRules { variable, .. }
            | ConfigProblem::AliasConflict { variable, .. }
            | ConfigProblem::InvalidEndpoint { variable, .. }
            | ConfigProblem::InvalidHeaders { variable, .. } => variable,
        }
    }
}

/// Every problem found in a configuration; `Display` lists them one per line.
///
/// `Debug` prints the same message as `Display` (as the facade's
/// `SetupError` does), so
/// `fn main() -> Result<(), ConfigError>` with `?` shows the problems a
/// person can act on rather than the structure; like the message, it never
/// shows a header value or an endpoint's credentials.
#[derive(Clone, PartialEq)]
pub struct ConfigError {
    problems: Vec<ConfigProblem>,
}

impl ConfigError {
    /// An error holding `problems` (callers never build an empty one).
    /// A problem listed twice (a bad general OTLP endpoint shared by three
    /// signals) is kept once.
    pub fn new(problems: Vec<ConfigProblem>) -> ConfigError {
        let mut unique: Vec<ConfigProblem> = Vec::with_capacity(problems.len());
        for problem in problems {
            if !unique.contains(&problem) {
                unique.push(problem);
            }
        }
        ConfigError { problems: unique }
    }

    /// The problems, in the order they were found.
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }

    /// The problems, by value.
    pub fn into_problems(self) -> Vec<ConfigProblem> {
        self.problems
    }

    /// Whether some problem concerns `variable`.
    pub fn mentions(&self, variable: &str) -> bool {
        self.problems.iter().any(|p| p.variable() == variable)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for ConfigError {}
