//! Advice that names the program's own variables and span groups.
//!
//! Setup records the prefix the program's configuration was read with and
//! its resolved span groups on the resource (`lens.config.prefix`, such as
//! `MYJOB_OTEL`, and `lens.span_groups`, such as `default,step`). What the
//! tools tell a user to set is built from those: `MYJOB_OTEL_RANK_METRICS=1`,
//! `MYJOB_OTEL_SPAN_GROUPS=default,step`. Megatron's presets (`per_step`)
//! are named only when the export is Megatron's (its prefix, or, for an
//! export that predates these attributes, its `service.name`); an older
//! export of another program gets neutral advice naming `<PREFIX>_...`.
//!
//! ```
//! use std::collections::BTreeMap;
//! use lens_command::advice::Advice;
//! use lens_fallbacks::otlp_file::AttributeValue;
//!
//! let resource: BTreeMap<String, AttributeValue> = [
//!     ("lens.config.prefix", "MYJOB_OTEL"),
//!     ("lens.span_groups", "default"),
//! ]
//! .into_iter()
//! .map(|(k, v)| (k.to_string(), AttributeValue::String(v.to_string())))
//! .collect();
//! let advice = Advice::from_resource(&resource);
//! assert_eq!(advice.variable("RANK_METRICS"), "MYJOB_OTEL_RANK_METRICS");
//! assert_eq!(advice.span_groups_with(&["step"]), "MYJOB_OTEL_SPAN_GROUPS=default,step");
//! assert_eq!(Advice::default().span_groups_with(&["step"]), "<PREFIX>_SPAN_GROUPS with `step` added");
//! ```

use std::collections::BTreeMap;

use lens_fallbacks::otlp_file::AttributeValue;
use lens_fallbacks::semconv;

/// Megatron's configuration prefix.
pub const MEGATRON_PREFIX: &str = "MEGATRON_OTEL";
/// Megatron's default `service.name` (an export that predates
/// `lens.config.prefix` is recognised by it).
pub const MEGATRON_SERVICE_NAME: &str = "megatron-lm";
/// What advice says for a program whose prefix the export does not record.
pub const UNKNOWN_PREFIX: &str = "<PREFIX>";

/// What the export's resource says about the program's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advice {
    /// `lens.config.prefix`.
    pub prefix: Option<String>,
    /// `lens.span_groups`, split (`None`: not recorded).
    pub span_groups: Option<Vec<String>>,
    /// Whether the export is Megatron's.
    pub megatron: bool,
}

impl Advice {
    /// Reads one resource's attributes.
    pub fn from_resource(resource: &BTreeMap<String, AttributeValue>) -> Advice {
        let text = |key: &str| resource.get(key).and_then(AttributeValue::as_str).map(str::to_string);
        Advice::from_values(
            text(semconv::LENS_CONFIG_PREFIX),
            text(semconv::LENS_SPAN_GROUPS),
            text(semconv::SERVICE_NAME).as_deref(),
        )
    }

    /// Reads one resource's attributes as plain JSON values (the trace
    /// tree's form).
    pub fn from_json_resource(resource: &serde_json::Map<String, serde_json::Value>) -> Advice {
        let text = |key: &str| resource.get(key).and_then(serde_json::Value::as_str).map(str::to_string);
        Advice::from_values(
            text(semconv::LENS_CONFIG_PREFIX),
            text(semconv::LENS_SPAN_GROUPS),
            text(semconv::SERVICE_NAME).as_deref(),
        )
    }

    fn from_values(prefix: Option<String>, groups: Option<String>, service_name: Option<&str>) -> Advice {
        let prefix = prefix.filter(|p| !p.trim().is_empty());
        let megatron = match &prefix {
            Some(prefix) => prefix == MEGATRON_PREFIX,
            None => service_name == Some(MEGATRON_SERVICE_NAME),
        };
        let span_groups =
            groups.map(|g| g.split(',').map(str::trim).filter(|g| !g.is_empty()).map(str::to_string).collect());
        Advice { prefix, span_groups, megatron }
    }

    /// Whether the resource recorded the program's prefix.
    pub fn knows_prefix(&self) -> bool {
        self.prefix.is_some()
    }

    /// The program's variable for `key`: `MYJOB_OTEL_<key>`, Megatron's for
    /// an older Megatron export, else `<PREFIX>_<key>`.
    pub fn variable(&self, key: &str) -> String {
        let prefix = match (&self.prefix, self.megatron) {
            (Some(prefix), _) => prefix.as_str(),
            (None, true) => MEGATRON_PREFIX,
            (None, false) => UNKNOWN_PREFIX,
        };
        format!("{prefix}_{key}")
    }

    /// What to set so that the span groups include `needed`: Megatron's
    /// preset for a Megatron export, the program's recorded groups plus
    /// `needed` when they are known, else a neutral sentence.
    pub fn span_groups_with(&self, needed: &[&str]) -> String {
        let variable = self.variable("SPAN_GROUPS");
        if self.megatron {
            return format!("{variable}=per_step (or all)");
        }
        match &self.span_groups {
            Some(groups) => {
                let mut all: Vec<&str> = groups.iter().map(String::as_str).collect();
                for group in needed {
                    if !all.contains(group) {
                        all.push(group);
                    }
                }
                format!("{variable}={}", all.join(","))
            }
            None => {
                let needed: Vec<String> = needed.iter().map(|g| format!("`{g}`")).collect();
                format!("{variable} with {} added", needed.join(" and "))
            }
        }
    }

    /// Whether the export recorded span group `group` (false when the
    /// groups were not recorded).
    pub fn records_group(&self, group: &str) -> bool {
        self.span_groups.as_ref().is_some_and(|groups| groups.iter().any(|g| g == group))
    }

    /// How the program gets rank metrics, for an export without them:
    /// Megatron is run with its variable; a program of its own records them
    /// through lens-training's `Training`, with its own.
    pub fn rank_metrics(&self) -> String {
        let variable = self.variable("RANK_METRICS");
        if self.megatron {
            format!("run with {variable}=1")
        } else {
            format!("lens-training's `Training` records them with {variable}=1")
        }
    }

    /// How a program of its own gets the spans of a training event:
    /// "announce each with lens-training's `CALL` (docs/goodput.md)";
    /// `None` for a Megatron export (Megatron opens them itself).
    pub fn announce_with(&self, call: &str) -> Option<String> {
        (!self.megatron).then(|| format!("announce each with lens-training's `{call}` (docs/goodput.md)"))
    }

    /// The recorded span groups, comma-separated (`None`: not recorded).
    pub fn recorded_groups(&self) -> Option<String> {
        self.span_groups.as_ref().map(|groups| groups.join(","))
    }
}
