//! The control file (SPEC A24): what may change while a job runs, decided
//! as plain data.
//!
//! A job launched with `<PREFIX>_CONTROL_FILE` has a lens thread on each
//! rank that looks at the file (one `stat` per `<PREFIX>_CONTROL_POLL_S`,
//! a read only when it changed, at most [`MAX_CONTROL_BYTES`]). What it
//! reads is parsed here ([`parse_request`]) against the job's catalog and
//! launch settings; the training thread feeds each accepted request to a
//! [`ControlSchedule`], which says at each iteration boundary what to
//! apply ([`ControlSchedule::at_iteration`]). Every rank computes the same
//! answer from the same file and the same iteration, so the ranks change
//! together without talking to each other: every version names the
//! iteration it starts at, and the version in force holds until then; a
//! rank that read the file late applies at its next iteration (the
//! [`Change`] says how late) and ends the window at the same iteration as
//! every other rank. [`check_generation`] tells a new version from the one
//! accepted again, and refuses a lower or reused generation.
//!
//! Also here: the file checks that refuse a file others could have written
//! ([`check_file`]), the status file the job writes beside the control file
//! for `lens control` ([`ControlStatus`]), and the file's own format
//! ([`ControlRequest::to_json`]), so that the job and the command share one
//! definition.
//!
//! ```
//! use lens_core::config::HangTimeout;
//! use lens_core::control::{ControlSchedule, Settings, parse_request};
//! use lens_core::groups::LENS_CATALOG;
//!
//! let launch = Settings {
//!     groups: LENS_CATALOG.resolve("default").unwrap(),
//!     sampling_ratio: None,
//!     rank_metrics: false,
//!     hang_timeout: HangTimeout::Auto,
//! };
//! let text = r#"{"generation": 1, "span_groups": "per_step", "from_iteration": 10, "iterations": 5}"#;
//! let request = parse_request(text, &LENS_CATALOG, &launch, "NEMO_LENS").unwrap();
//! let mut schedule = ControlSchedule::new(launch);
//! schedule.set_request(Some(request));
//! assert!(schedule.at_iteration(9).is_none());
//! let start = schedule.at_iteration(10).unwrap();
//! assert_eq!((start.generation, start.late_by), (1, 0));
//! assert_eq!(start.after.groups, LENS_CATALOG.resolve("per_step").unwrap());
//! assert!(schedule.at_iteration(14).is_none());
//! let end = schedule.at_iteration(15).unwrap();
//! assert_eq!(end.after, launch);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::config::HangTimeout;
use crate::groups::{GroupSet, SpanGroup, SpanGroupCatalog};

/// The most bytes of the control file that are read: a longer file is a bad
/// file (warned about, nothing changes).
pub const MAX_CONTROL_BYTES: u64 = 64 * 1024;

/// What the job writes beside the control file: `<FILE>.status`.
pub const STATUS_SUFFIX: &str = ".status";

/// The control file's keys.
pub mod keys {
    /// The file's version: each change has a higher one (integer, 1 or more).
    pub const GENERATION: &str = "generation";
    /// A span-group spec, against the job's catalog.
    pub const SPAN_GROUPS: &str = "span_groups";
    /// The first iteration of the window (the iteration the span of
    /// `Training::iteration` carries).
    pub const FROM_ITERATION: &str = "from_iteration";
    /// How many iterations the window lasts.
    pub const ITERATIONS: &str = "iterations";
    /// The window's last iteration, inclusive.
    pub const UNTIL_ITERATION: &str = "until_iteration";
    /// The per-iteration trace sampling ratio, in `[0, 1]`.
    pub const SAMPLING_RATIO: &str = "sampling_ratio";
    /// Per-rank metrics paused (`false`) or resumed (`true`).
    pub const RANK_METRICS: &str = "rank_metrics";
    /// The hang watchdog's timeout: seconds, `0` (off) or `"auto"`.
    pub const HANG_TIMEOUT_S: &str = "hang_timeout_s";
    /// Every key the file accepts.
    pub const ALL: [&str; 8] = [
        GENERATION,
        SPAN_GROUPS,
        FROM_ITERATION,
        ITERATIONS,
        UNTIL_ITERATION,
        SAMPLING_RATIO,
        RANK_METRICS,
        HANG_TIMEOUT_S,
    ];
    /// What can never change in flight (only at launch).
    pub const NEVER: [&str; 5] = ["endpoint", "headers", "exporter", "rank_strategy", "resource"];
}

/// The settings a control file can change, as a rank has them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// The enabled span groups (the gate's mask).
    pub groups: GroupSet,
    /// The per-iteration trace sampling ratio; `None`: the launch sampler
    /// (`OTEL_TRACES_SAMPLER[_ARG]`) decides.
    pub sampling_ratio: Option<f64>,
    /// Whether per-rank metrics record (they can be paused and resumed,
    /// never turned on without a launch with them on).
    pub rank_metrics: bool,
    /// The hang watchdog's timeout.
    pub hang_timeout: HangTimeout,
}

impl Settings {
    /// The names of the settings that differ between `self` and `other`,
    /// each with its new value (`span_groups=job,step`), in key order.
    pub fn changes_to(&self, other: &Settings, catalog: &SpanGroupCatalog) -> Vec<String> {
        let mut changed = Vec::new();
        if self.groups != other.groups {
            changed.push(format!("{}={}", keys::SPAN_GROUPS, catalog.names(other.groups).join(",")));
        }
        if self.sampling_ratio != other.sampling_ratio {
            let ratio = other.sampling_ratio.map_or_else(|| "launch".to_string(), |r| r.to_string());
            changed.push(format!("{}={ratio}", keys::SAMPLING_RATIO));
        }
        if self.rank_metrics != other.rank_metrics {
            changed.push(format!("{}={}", keys::RANK_METRICS, if other.rank_metrics { "on" } else { "off" }));
        }
        if self.hang_timeout != other.hang_timeout {
            changed.push(format!("{}={}", keys::HANG_TIMEOUT_S, other.hang_timeout));
        }
        changed
    }
}

/// What a job's control thread needs from its configuration: the file,
/// the poll, the prefix (for messages), the catalog and the launch
/// settings (the configured span groups, whatever this rank records).
#[derive(Clone, Debug)]
pub struct ControlSetup {
    /// The control file (`<PREFIX>_CONTROL_FILE`).
    pub file: PathBuf,
    /// The poll period (`<PREFIX>_CONTROL_POLL_S`).
    pub poll: std::time::Duration,
    /// The job's primary prefix.
    pub prefix: String,
    /// The catalog span-group specs resolve against.
    pub catalog: &'static SpanGroupCatalog,
    /// The launch settings.
    pub launch: Settings,
}

impl ControlSetup {
    /// The control setup of `config`; `None` without a control file, with
    /// telemetry off, or with a span-group spec that does not resolve
    /// (validation refused it already).
    pub fn from_config(config: &crate::config::LensConfig) -> Option<ControlSetup> {
        let file = config.control_file.clone().filter(|_| config.telemetry_enabled())?;
        Some(ControlSetup {
            file,
            poll: config.control_poll,
            prefix: config.origins.prefix().unwrap_or(crate::config::DEFAULT_PREFIX).to_string(),
            catalog: config.catalog,
            launch: Settings {
                groups: config.resolved_span_groups().ok()?,
                sampling_ratio: None,
                rank_metrics: config.rank_metrics,
                hang_timeout: config.hang_timeout,
            },
        })
    }
}

/// One version of the control file, parsed and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlRequest {
    /// The file's generation.
    pub generation: u64,
    /// The span-group spec and what it resolves to.
    pub span_groups: Option<(String, GroupSet)>,
    /// The window's first iteration: every version names it, so that every
    /// rank changes at that same iteration.
    pub from_iteration: u64,
    /// The window's last iteration, inclusive (`None`: until the next change).
    pub until_iteration: Option<u64>,
    /// The per-iteration trace sampling ratio.
    pub sampling_ratio: Option<f64>,
    /// Per-rank metrics on (resume) or off (pause).
    pub rank_metrics: Option<bool>,
    /// The hang timeout.
    pub hang_timeout: Option<HangTimeout>,
}

impl ControlRequest {
    /// A request that only moves to `generation` from `from_iteration` on
    /// (back to the launch configuration: `lens control --reset`).
    pub fn reset(generation: u64, from_iteration: u64) -> ControlRequest {
        ControlRequest {
            generation,
            span_groups: None,
            from_iteration,
            until_iteration: None,
            sampling_ratio: None,
            rank_metrics: None,
            hang_timeout: None,
        }
    }

    /// The settings during the window, over `launch`.
    pub fn settings_over(&self, launch: &Settings) -> Settings {
        Settings {
            groups: self.span_groups.as_ref().map_or(launch.groups, |(_, set)| *set),
            sampling_ratio: self.sampling_ratio.or(launch.sampling_ratio),
            rank_metrics: self.rank_metrics.unwrap_or(launch.rank_metrics),
            hang_timeout: self.hang_timeout.unwrap_or(launch.hang_timeout),
        }
    }

    /// Whether the window ends at or before `last_iteration`, an
    /// iteration that has already begun: none of its iterations is ahead.
    pub fn ended_by(&self, last_iteration: u64) -> bool {
        self.until_iteration.is_some_and(|until| until <= last_iteration)
    }

    /// Whether `iteration` is inside the window.
    pub fn covers(&self, iteration: u64) -> bool {
        iteration >= self.from_iteration && self.until_iteration.is_none_or(|until| iteration <= until)
    }

    /// The file's text: one JSON object, keys in a fixed order.
    pub fn to_json(&self) -> String {
        let mut object = Map::new();
        object.insert(keys::GENERATION.into(), self.generation.into());
        if let Some((spec, _)) = &self.span_groups {
            object.insert(keys::SPAN_GROUPS.into(), spec.clone().into());
        }
        object.insert(keys::FROM_ITERATION.into(), self.from_iteration.into());
        if let Some(until) = self.until_iteration {
            object.insert(keys::UNTIL_ITERATION.into(), until.into());
        }
        if let Some(ratio) = self.sampling_ratio {
            object.insert(keys::SAMPLING_RATIO.into(), ratio.into());
        }
        if let Some(on) = self.rank_metrics {
            object.insert(keys::RANK_METRICS.into(), on.into());
        }
        match self.hang_timeout {
            None => {}
            Some(HangTimeout::Auto) => {
                object.insert(keys::HANG_TIMEOUT_S.into(), "auto".into());
            }
            Some(HangTimeout::Off) => {
                object.insert(keys::HANG_TIMEOUT_S.into(), 0.into());
            }
            Some(HangTimeout::After(d)) => {
                object.insert(keys::HANG_TIMEOUT_S.into(), d.as_secs_f64().into());
            }
        }
        let mut text = Value::Object(object).to_string();
        text.push('\n');
        text
    }
}

/// Why a version of the control file changes nothing: the key and the value
/// at fault, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlInputError {
    /// The key at fault (`(file)` for the file as a whole).
    pub key: String,
    /// The value at fault, as written.
    pub value: String,
    /// What is wrong and what is accepted.
    pub reason: String,
}

impl ControlInputError {
    fn new(key: &str, value: impl fmt::Display, reason: impl Into<String>) -> ControlInputError {
        ControlInputError { key: key.to_string(), value: value.to_string(), reason: reason.into() }
    }
}

impl fmt::Display for ControlInputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key '{}' = {}: {}", self.key, self.value, self.reason)
    }
}

impl std::error::Error for ControlInputError {}

const WHOLE_FILE: &str = "(file)";

/// Words in a key's name that mark its value as a possible credential
/// (compared in lower case): a refused or unknown key holding one is never
/// quoted, since the warning reaches every rank's log.
const SECRET_KEY_WORDS: [&str; 9] =
    ["header", "endpoint", "auth", "token", "secret", "password", "passwd", "credential", "key"];

/// `value` of `key` as a warning may show it. The headers show their keys
/// only (`"Authorization=[REDACTED]"`, as [`Headers`](crate::config::Headers)
/// show themselves), an endpoint shows without its credentials
/// ([`redact_endpoint`](crate::config::redact_endpoint)); any other value
/// of a key whose name suggests a credential (`token`, `api_key`, ...) and
/// a value of those two that is not a well-formed string is `[REDACTED]`.
/// Every other value shows as JSON.
fn shown(key: &str, value: &Value) -> String {
    let lower = key.to_ascii_lowercase();
    match (lower.as_str(), value) {
        ("headers", Value::String(list)) => match crate::config::Headers::parse(list) {
            Ok(headers) => Value::String(headers.to_string()).to_string(),
            Err(_) => "[REDACTED]".to_string(),
        },
        ("endpoint", Value::String(url)) => Value::String(crate::config::redact_endpoint(url)).to_string(),
        _ if SECRET_KEY_WORDS.iter().any(|word| lower.contains(word)) => "[REDACTED]".to_string(),
        _ => value.to_string(),
    }
}

/// The control file's text as `lens control --show` prints it: as written
/// when it is a JSON object of accepted keys only (none of which holds a
/// credential); else an object with each value as a refusal shows it
/// (`"headers": "authorization=[REDACTED]"`), and anything that is not an
/// object by its size only, as [`parse_request`] words it. Whoever reads
/// the output may not be whoever may read the file's credentials.
///
/// ```
/// use lens_core::control::shown_text;
///
/// let text = r#"{"generation": 9, "from_iteration": 10, "headers": "authorization=Bearer s3cr3t"}"#;
/// assert_eq!(shown_text(text), r#"{"from_iteration": 10, "generation": 9, "headers": "authorization=[REDACTED]"}"#);
/// assert_eq!(shown_text(r#"{"generation": 9}"#), r#"{"generation": 9}"#);
/// assert_eq!(shown_text("Bearer s3cr3t"), "(13 bytes, not JSON, not shown)");
/// ```
pub fn shown_text(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) if object.keys().all(|key| keys::ALL.contains(&key.as_str())) => {
            text.trim().to_string()
        }
        Ok(Value::Object(object)) => {
            let entries: Vec<String> = object
                .iter()
                .map(|(key, value)| format!("{}: {}", Value::from(key.as_str()), shown(key, value)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
        Ok(other) => describe_not_object(&other),
        Err(_) => format!("({} bytes, not JSON, not shown)", text.len()),
    }
}

/// What a control file that is JSON but not an object holds, in words: a
/// number, `true`, `false` or `null` as written, a string or an array by
/// its kind and size only (either may hold a credential).
fn describe_not_object(value: &Value) -> String {
    match value {
        Value::String(text) => format!("(a string of {} characters, not shown)", text.chars().count()),
        Value::Array(items) => format!("(an array of {} items, not shown)", items.len()),
        other => other.to_string(),
    }
}

/// The JSON text of `key`'s value in the object `text`, as written (the
/// file was parsed already and holds each key once).
fn raw_value(text: &str, key: &str) -> Option<String> {
    let raw: std::collections::HashMap<String, &serde_json::value::RawValue> = serde_json::from_str(text).ok()?;
    raw.get(key).map(|value| value.get().to_string())
}

fn as_iteration(key: &str, value: &Value) -> Result<u64, ControlInputError> {
    value.as_u64().ok_or_else(|| ControlInputError::new(key, value, "expected a whole number of iterations, 0 or more"))
}

/// What a span-group spec resolves against: the job's catalog (in the
/// job), or its data as the status file carries it (in `lens control`), so
/// that both run the one [`parse_request`].
pub trait SpecResolver {
    /// The groups `spec` names, or the error text ("Unknown span group or
    /// preset ... (did you mean ...)").
    fn resolve_spec(&self, spec: &str) -> Result<GroupSet, String>;
}

impl SpecResolver for SpanGroupCatalog {
    fn resolve_spec(&self, spec: &str) -> Result<GroupSet, String> {
        self.resolve(spec).map_err(|error| error.to_string())
    }
}

impl SpecResolver for CatalogData {
    fn resolve_spec(&self, spec: &str) -> Result<GroupSet, String> {
        self.resolve(spec)
    }
}

/// Parses one version of the control file against `catalog` and the
/// rank's `launch` settings (`prefix`: the job's variable prefix, for the
/// messages). Any problem (not JSON, not an object, an unknown key, a key
/// that can never change in flight, a bad value, no `from_iteration`, a
/// `job` group different from the launch's, per-rank metrics turned on
/// without a launch with them on) is an error naming the key and the
/// value: the version changes nothing.
///
/// A version without `from_iteration` is refused: each rank would apply it
/// at the iteration it happens to read the file, and no rank can know the
/// iteration another one reads it at without talking to it.
pub fn parse_request(
    text: &str,
    catalog: &(impl SpecResolver + ?Sized),
    launch: &Settings,
    prefix: &str,
) -> Result<ControlRequest, ControlInputError> {
    // A file that is not JSON is never quoted: it may be anything, a token
    // pasted into the wrong file included. The parser's error says where
    // it stopped (line and column), which is enough to find the fault.
    let value: Value = serde_json::from_str(text).map_err(|error| {
        ControlInputError::new(WHOLE_FILE, format!("({} bytes, not shown)", text.len()), format!("not JSON: {error}"))
    })?;
    let Value::Object(object) = value else {
        return Err(ControlInputError::new(WHOLE_FILE, describe_not_object(&value), "expected a JSON object"));
    };
    if let Some(key) = duplicate_key(text) {
        let value = object.get(&key).cloned().unwrap_or(Value::Null);
        return Err(ControlInputError::new(&key, shown(&key, &value), "given more than once; give each key once"));
    }
    for (key, value) in &object {
        if keys::NEVER.contains(&key.as_str()) {
            return Err(ControlInputError::new(
                key,
                shown(key, value),
                "can never be changed while the job runs (only at launch); accepted keys: ".to_string()
                    + &keys::ALL.join(", "),
            ));
        }
        if !keys::ALL.contains(&key.as_str()) {
            let hint =
                crate::suggest::closest(key, keys::ALL).map_or(String::new(), |s| format!(" (did you mean '{s}'?)"));
            return Err(ControlInputError::new(
                key,
                shown(key, value),
                format!("unknown key; accepted keys: {}{hint}", keys::ALL.join(", ")),
            ));
        }
    }
    let generation = match object.get(keys::GENERATION) {
        Some(value) => value.as_u64().filter(|g| (1..=MAX_GENERATION).contains(g)).ok_or_else(|| {
            ControlInputError::new(
                keys::GENERATION,
                value,
                format!("expected a whole number from 1 to {MAX_GENERATION} (the most an OTLP integer holds)"),
            )
        })?,
        None => return Err(ControlInputError::new(keys::GENERATION, "(missing)", "every version needs a generation")),
    };
    let mut request = ControlRequest::reset(generation, 0);
    if let Some(value) = object.get(keys::SPAN_GROUPS) {
        let spec = value
            .as_str()
            .ok_or_else(|| ControlInputError::new(keys::SPAN_GROUPS, value, "expected a span-group spec (a string)"))?;
        let set =
            catalog.resolve_spec(spec).map_err(|error| ControlInputError::new(keys::SPAN_GROUPS, value, error))?;
        if set.contains(SpanGroup::JOB) != launch.groups.contains(SpanGroup::JOB) {
            let state = if launch.groups.contains(SpanGroup::JOB) { "on" } else { "off" };
            return Err(ControlInputError::new(
                keys::SPAN_GROUPS,
                value,
                format!(
                    "the 'job' group (the intervals) cannot change while the job runs; it was {state} at launch, \
                     keep it {state}"
                ),
            ));
        }
        request.span_groups = Some((spec.to_string(), set));
    }
    if let Some(value) = object.get(keys::FROM_ITERATION) {
        request.from_iteration = as_iteration(keys::FROM_ITERATION, value)?;
    }
    match (object.get(keys::ITERATIONS), object.get(keys::UNTIL_ITERATION)) {
        (Some(_), Some(value)) => {
            return Err(ControlInputError::new(
                keys::UNTIL_ITERATION,
                value,
                "give either 'iterations' or 'until_iteration', not both",
            ));
        }
        (Some(value), None) => {
            if !object.contains_key(keys::FROM_ITERATION) {
                return Err(ControlInputError::new(keys::ITERATIONS, value, "'iterations' needs 'from_iteration'"));
            }
            let count = value
                .as_u64()
                .filter(|n| *n >= 1)
                .ok_or_else(|| ControlInputError::new(keys::ITERATIONS, value, "expected a whole number, 1 or more"))?;
            request.until_iteration = Some(request.from_iteration.checked_add(count - 1).ok_or_else(|| {
                ControlInputError::new(keys::ITERATIONS, value, "the window would end past the last iteration there is")
            })?);
        }
        (None, Some(value)) => {
            let until = as_iteration(keys::UNTIL_ITERATION, value)?;
            if until < request.from_iteration {
                return Err(ControlInputError::new(
                    keys::UNTIL_ITERATION,
                    value,
                    format!("before from_iteration {}", request.from_iteration),
                ));
            }
            request.until_iteration = Some(until);
        }
        (None, None) => {}
    }
    if let Some(value) = object.get(keys::SAMPLING_RATIO) {
        request.sampling_ratio =
            Some(value.as_f64().filter(|r| (0.0..=1.0).contains(r)).ok_or_else(|| {
                ControlInputError::new(keys::SAMPLING_RATIO, value, "expected a number in [0.0, 1.0]")
            })?);
    }
    if let Some(value) = object.get(keys::RANK_METRICS) {
        let on = value.as_bool().ok_or_else(|| {
            ControlInputError::new(keys::RANK_METRICS, value, "expected true (resume) or false (pause)")
        })?;
        if on && !launch.rank_metrics {
            return Err(ControlInputError::new(
                keys::RANK_METRICS,
                value,
                format!(
                    "per-rank metrics can only be paused and resumed here: turning them on needs a launch with \
                     {prefix}_RANK_METRICS=1"
                ),
            ));
        }
        request.rank_metrics = Some(on);
    }
    if let Some(value) = object.get(keys::HANG_TIMEOUT_S) {
        // A number as written, not as parsed: `1e-400` parses to 0.0,
        // which is not the written zero that means off.
        let written = match value {
            Value::Number(number) => raw_value(text, keys::HANG_TIMEOUT_S).unwrap_or_else(|| number.to_string()),
            other => other.to_string(),
        };
        let parsed = match value {
            Value::String(text) => HangTimeout::parse(text),
            Value::Number(_) => HangTimeout::parse(&written),
            _ => None,
        };
        request.hang_timeout = Some(parsed.ok_or_else(|| {
            ControlInputError::new(keys::HANG_TIMEOUT_S, &written, format!("expected {}", HangTimeout::EXPECTED))
        })?);
    }
    if !object.contains_key(keys::FROM_ITERATION) {
        return Err(ControlInputError::new(
            keys::FROM_ITERATION,
            "(missing)",
            "every version needs the iteration it starts at, so that every rank changes at that same iteration \
             (lens control writes it)",
        ));
    }
    Ok(request)
}

/// Whether a parsed version is new to a job whose highest accepted
/// generation is `highest` (`accepted`: that version, when known):
/// `Ok(true)` a higher generation, `Ok(false)` the accepted version again
/// (nothing to do), and an error for a lower generation, or the same one
/// with a different content, both of which change nothing.
pub fn check_generation(
    request: &ControlRequest,
    highest: u64,
    accepted: Option<&ControlRequest>,
) -> Result<bool, ControlInputError> {
    const NEXT: &str = "each change needs a higher generation: lens control writes the next one";
    if request.generation > highest {
        return Ok(true);
    }
    if request.generation < highest {
        return Err(ControlInputError::new(
            keys::GENERATION,
            request.generation,
            format!("lower than generation {highest}, the highest this job accepted ({NEXT})"),
        ));
    }
    match accepted {
        Some(accepted) if accepted != request => Err(ControlInputError::new(
            keys::GENERATION,
            request.generation,
            format!(
                "the generation this job already accepted, with a different content (a version is read once per \
                 generation; {NEXT})"
            ),
        )),
        _ => Ok(false),
    }
}

/// What to apply at one iteration boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The generation in force from this iteration.
    pub generation: u64,
    /// The iteration it applies at.
    pub iteration: u64,
    /// How many iterations after the window's first this rank applies it
    /// (0: on time; more: the file was read late).
    pub late_by: u64,
    /// The settings until now.
    pub before: Settings,
    /// The settings from this iteration.
    pub after: Settings,
    /// Whether this is the end of a window (back to the launch settings).
    pub window_end: bool,
}

/// One rank's schedule of control changes: which settings each iteration
/// has, from the launch settings and the accepted requests. The training
/// thread asks it at each iteration boundary.
///
/// A request takes over at its `from_iteration`, not when it is read: the
/// one in force (its window open, or ended) holds until then, so that a
/// rank that reads a later generation early does not end the window in
/// force before every other rank does.
#[derive(Clone, Debug)]
pub struct ControlSchedule {
    launch: Settings,
    /// The request in force: its window has started (and may have ended).
    current: Option<ControlRequest>,
    /// The latest accepted request whose window has not started yet.
    pending: Option<ControlRequest>,
    in_force: Settings,
    generation: u64,
}

impl ControlSchedule {
    /// A schedule at the launch settings, generation 0.
    pub fn new(launch: Settings) -> ControlSchedule {
        ControlSchedule { launch, current: None, pending: None, in_force: launch, generation: 0 }
    }

    /// The launch settings.
    pub fn launch(&self) -> &Settings {
        &self.launch
    }

    /// The settings in force.
    pub fn in_force(&self) -> &Settings {
        &self.in_force
    }

    /// The generation in force (0: the launch configuration, no file
    /// applied yet).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The latest accepted request: it takes over at its `from_iteration`
    /// (at once when that is past), and replaces one accepted earlier that
    /// has not started yet. `None`: the file is missing, the launch
    /// configuration holds from the next iteration.
    pub fn set_request(&mut self, request: Option<ControlRequest>) {
        match request {
            Some(request) => self.pending = Some(request),
            None => {
                self.pending = None;
                self.current = None;
            }
        }
    }

    /// The first iteration after `iteration` at which [`Self::at_iteration`]
    /// may return a change (`u64::MAX`: none is due), so that the training
    /// thread can skip the schedule with one comparison.
    pub fn next_due(&self, iteration: u64) -> u64 {
        let next = iteration.saturating_add(1);
        let start = self.pending.as_ref().map_or(u64::MAX, |pending| pending.from_iteration.max(next));
        let end = match &self.current {
            _ if self.in_force == self.launch => u64::MAX,
            Some(current) => match current.until_iteration {
                Some(until) if until >= iteration => until.saturating_add(1),
                Some(_) => next,
                None => u64::MAX,
            },
            None => next,
        };
        start.min(end)
    }

    /// What to apply at the boundary of `iteration` (`None`: nothing
    /// changes). The first boundary at or after a request's window start
    /// applies it (late when after it); the boundary after its last
    /// iteration goes back to the launch settings.
    pub fn at_iteration(&mut self, iteration: u64) -> Option<Change> {
        let before = self.in_force;
        let mut late_by = 0;
        let mut generation_changed = false;
        if self.pending.as_ref().is_some_and(|pending| iteration >= pending.from_iteration) {
            let request = self.pending.take()?;
            late_by = iteration - request.from_iteration;
            generation_changed = request.generation != self.generation;
            self.generation = request.generation;
            self.current = Some(request);
        }
        let desired = match &self.current {
            Some(current) if current.covers(iteration) => current.settings_over(&self.launch),
            _ => self.launch,
        };
        if desired == before && !generation_changed {
            return None;
        }
        self.in_force = desired;
        Some(Change {
            generation: self.generation,
            iteration,
            late_by,
            before,
            after: desired,
            window_end: !generation_changed && desired == self.launch,
        })
    }
}

/// Why a control file is refused before it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The path is a symbolic link.
    Symlink,
    /// Another user owns the file (its uid).
    NotOwner(u32),
    /// Other users can write the file (its mode).
    WritableByOthers(u32),
    /// Other users can write the directory (its mode), so they could
    /// replace the file.
    DirectoryWritableByOthers(PathBuf, u32),
    /// Not a regular file (what it is: "a directory", "a FIFO", ...).
    NotAFile(&'static str),
    /// Longer than [`MAX_CONTROL_BYTES`] (its length).
    TooLong(u64),
}

impl Refusal {
    /// What a control file must be instead, for the message after the
    /// refusal.
    pub fn accepted(&self) -> &'static str {
        match self {
            Refusal::Symlink => "give the file itself, not a symbolic link to it",
            Refusal::NotOwner(_) | Refusal::WritableByOthers(_) | Refusal::DirectoryWritableByOthers(..) => {
                "only the job's user may write the file that changes what a job sends: keep it in a directory only \
                 that user can write (chmod 700), with mode 0600"
            }
            Refusal::NotAFile(_) => "a control file is a regular file holding one JSON object",
            Refusal::TooLong(_) => "a control file is one JSON object of at most 64 KiB (65536 bytes)",
        }
    }
}

/// What a file type is, in words: "a directory" or "not a regular file"
/// where the platform tells no more.
#[cfg(not(unix))]
pub fn kind_of(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_dir() { "a directory" } else { "not a regular file" }
}

/// What a file type is, in words ("a directory", "a FIFO (named pipe)",
/// ...), for [`Refusal::NotAFile`] and for every other file lens refuses
/// to read or write because it is not a regular file (a private CA file,
/// a file exporter's output).
#[cfg(unix)]
pub fn kind_of(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Symlink => f.write_str("it is a symbolic link"),
            Refusal::NotOwner(uid) => write!(f, "it is owned by uid {uid}, not by the job's user"),
            Refusal::WritableByOthers(mode) => write!(f, "other users can write it (mode {mode:o})"),
            Refusal::DirectoryWritableByOthers(dir, mode) => {
                write!(f, "other users can write its directory {} (mode {mode:o})", dir.display())
            }
            Refusal::NotAFile(kind) => write!(f, "it is {kind}, not a regular file"),
            Refusal::TooLong(len) => {
                write!(f, "it is {len} bytes long, more than the {MAX_CONTROL_BYTES} bytes (64 KiB) read")
            }
        }
    }
}

/// Whether a mode lets users other than the owner write: the group or
/// world write bit (a sticky directory, such as `/tmp`, still lets them
/// replace nothing of ours, but lens asks for a directory only its owner
/// writes, so the rule stays one line).
fn others_write(mode: u32) -> bool {
    mode & 0o022 != 0
}

/// The file's metadata if lens may read it: not a symbolic link, a regular
/// file owned by `uid` (the job's user), not writable by others, in a
/// directory that others cannot write, at most [`MAX_CONTROL_BYTES`] long.
/// `Ok(None)`: there is no file (the launch configuration holds).
#[cfg(unix)]
pub fn check_file(path: &Path, uid: u32) -> Result<Option<std::fs::Metadata>, Refusal> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(None) };
    if meta.file_type().is_symlink() {
        return Err(Refusal::Symlink);
    }
    regular_and_short(&meta)?;
    if meta.uid() != uid {
        return Err(Refusal::NotOwner(meta.uid()));
    }
    if others_write(meta.mode()) {
        return Err(Refusal::WritableByOthers(meta.mode() & 0o7777));
    }
    check_directory(path)?;
    Ok(Some(meta))
}

/// Whether the directory of `path` (a control file, or its status file)
/// is one that only its owner can write, as [`check_file`] requires of a
/// control file's: in any other, another user could replace what lens
/// reads, and the job writes no status there either.
#[cfg(unix)]
pub fn check_directory(path: &Path) -> Result<(), Refusal> {
    use std::os::unix::fs::MetadataExt as _;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if let Ok(dir_meta) = std::fs::metadata(&dir)
        && others_write(dir_meta.mode())
    {
        return Err(Refusal::DirectoryWritableByOthers(dir, dir_meta.mode() & 0o7777));
    }
    Ok(())
}

/// A regular file, at most [`MAX_CONTROL_BYTES`] long: what both the path
/// ([`check_file`]) and the opened file ([`read_capped`]) must be.
fn regular_and_short(meta: &std::fs::Metadata) -> Result<(), Refusal> {
    if !meta.is_file() {
        return Err(Refusal::NotAFile(kind_of(meta.file_type())));
    }
    if meta.len() > MAX_CONTROL_BYTES {
        return Err(Refusal::TooLong(meta.len()));
    }
    Ok(())
}

/// Why [`read_bounded`] read nothing.
#[derive(Debug)]
pub enum BoundedReadError {
    /// The open, the `fstat` or the read failed (`NotFound` when there is
    /// no file).
    Io(std::io::Error),
    /// Not a regular file: what it is, in words ([`kind_of`]).
    NotRegular(&'static str),
    /// Longer than the cap: its length.
    TooLong(u64),
    /// It grew past the cap while being read.
    Grew,
}

/// The bytes of the regular file at `path`, at most `cap`, through a
/// symbolic link only when `follow_links`: how lens reads every file a
/// user names (a control file, a private CA file, a progress record).
///
/// It never blocks on what is not a regular file, nor fills memory: the
/// open is non-blocking (a FIFO with no writer opens at once), the opened
/// descriptor is checked (`fstat`: a regular file, at most `cap`) before
/// anything is read, so that a file replaced by a FIFO between a `stat`
/// and the open is refused, not waited on, and the read stops past `cap`.
///
/// ```
/// use lens_core::control::{BoundedReadError, read_bounded};
///
/// let error = read_bounded(std::path::Path::new("/dev/zero"), 1024, true).unwrap_err();
/// assert!(matches!(error, BoundedReadError::NotRegular("a character device")));
/// ```
pub fn read_bounded(path: &Path, cap: u64, follow_links: bool) -> Result<Vec<u8>, BoundedReadError> {
    use std::io::Read as _;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let no_follow = if follow_links { 0 } else { libc::O_NOFOLLOW };
        options.custom_flags(no_follow | libc::O_NONBLOCK);
    }
    #[cfg(not(unix))]
    let _ = follow_links;
    let file = options.open(path).map_err(BoundedReadError::Io)?;
    let meta = file.metadata().map_err(BoundedReadError::Io)?;
    if !meta.is_file() {
        return Err(BoundedReadError::NotRegular(kind_of(meta.file_type())));
    }
    if meta.len() > cap {
        return Err(BoundedReadError::TooLong(meta.len()));
    }
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes).map_err(BoundedReadError::Io)?;
    if bytes.len() as u64 > cap {
        return Err(BoundedReadError::Grew);
    }
    Ok(bytes)
}

/// The file's text, at most [`MAX_CONTROL_BYTES`], never through a
/// symbolic link ([`read_bounded`]); the error says why in words.
pub fn read_capped(path: &Path) -> Result<String, String> {
    let refused = |refusal: Refusal| format!("{refusal}; {}", refusal.accepted());
    let bytes = read_bounded(path, MAX_CONTROL_BYTES, false).map_err(|error| match error {
        BoundedReadError::Io(e) => format!("cannot read it: {e}"),
        BoundedReadError::NotRegular(kind) => refused(Refusal::NotAFile(kind)),
        BoundedReadError::TooLong(length) => refused(Refusal::TooLong(length)),
        BoundedReadError::Grew => format!(
            "it grew past {MAX_CONTROL_BYTES} bytes (64 KiB) while being read; {}",
            Refusal::TooLong(0).accepted()
        ),
    })?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())
}

/// The user this process runs as (its effective uid): the only user whose
/// control file it reads.
#[cfg(unix)]
pub fn job_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The identity of one version of a file as `stat` sees it (device, inode,
/// size, modification time in nanoseconds, mode, owner): a poll reads the
/// file only when this changes.
#[cfg(unix)]
pub fn file_version(meta: &std::fs::Metadata) -> [u64; 6] {
    use std::os::unix::fs::MetadataExt as _;
    let mtime = (meta.mtime() as u64).wrapping_mul(1_000_000_000).wrapping_add(meta.mtime_nsec() as u64);
    [meta.dev(), meta.ino(), meta.len(), mtime, u64::from(meta.mode()), u64::from(meta.uid())]
}

/// The path of the status file beside `control_file`.
pub fn status_path(control_file: &Path) -> PathBuf {
    let mut name = control_file.as_os_str().to_os_string();
    name.push(STATUS_SUFFIX);
    PathBuf::from(name)
}

/// A span-group catalog as data (the status file carries the job's, so
/// that `lens control` checks a spec against the catalog the job has).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogData {
    /// The catalog's name.
    pub name: String,
    /// Its groups with their bits.
    pub groups: Vec<(String, u8)>,
    /// Its presets with their masks.
    pub presets: Vec<(String, u64)>,
}

impl CatalogData {
    /// The data of `catalog`.
    pub fn of(catalog: &SpanGroupCatalog) -> CatalogData {
        CatalogData {
            name: catalog.name().to_string(),
            groups: catalog.groups().iter().map(|g| (g.name().to_string(), g.bit())).collect(),
            presets: {
                let mut presets: Vec<(String, u64)> =
                    catalog.presets().iter().map(|p| (p.name.to_string(), p.groups.bits())).collect();
                presets.sort();
                presets
            },
        }
    }

    /// Resolves `spec` as [`SpanGroupCatalog::resolve`] does, with the same
    /// error text ("Unknown span group or preset ... (did you mean ...)").
    pub fn resolve(&self, spec: &str) -> Result<GroupSet, String> {
        let mut bits = 0u64;
        for item in spec.split(',') {
            let word = item.trim().to_lowercase();
            if word.is_empty() {
                continue;
            }
            if let Some((_, mask)) = self.presets.iter().find(|(name, _)| *name == word) {
                bits |= mask;
            } else if let Some((_, bit)) = self.groups.iter().find(|(name, _)| *name == word) {
                bits |= 1u64 << (bit & 63);
            } else {
                let mut valid: Vec<&str> = self
                    .groups
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .chain(self.presets.iter().map(|(n, _)| n.as_str()))
                    .collect();
                valid.sort_unstable();
                valid.dedup();
                let suggestion = crate::suggest::closest(&word, valid.iter().copied());
                return Err(crate::groups::unknown_group_message(&word, &valid, suggestion));
            }
        }
        Ok(GroupSet::from_bits(bits))
    }

    fn to_value(&self) -> Value {
        let groups: Map<String, Value> = self.groups.iter().map(|(n, b)| (n.clone(), Value::from(*b))).collect();
        let presets: Map<String, Value> = self.presets.iter().map(|(n, m)| (n.clone(), Value::from(*m))).collect();
        serde_json::json!({ "name": self.name, "groups": groups, "presets": presets })
    }

    fn from_value(value: &Value) -> Option<CatalogData> {
        let name = value.get("name")?.as_str()?.to_string();
        let mut groups: Vec<(String, u8)> = value
            .get("groups")?
            .as_object()?
            .iter()
            .map(|(n, b)| Some((n.clone(), u8::try_from(b.as_u64()?).ok().filter(|b| *b < 64)?)))
            .collect::<Option<_>>()?;
        groups.sort_by_key(|(_, bit)| *bit);
        let mut presets: Vec<(String, u64)> = value
            .get("presets")?
            .as_object()?
            .iter()
            .map(|(n, m)| Some((n.clone(), m.as_u64()?)))
            .collect::<Option<_>>()?;
        presets.sort();
        Some(CatalogData { name, groups, presets })
    }
}

/// What the job writes beside the control file (`<FILE>.status`, global
/// rank 0): its catalog and launch settings at startup, its last iteration,
/// generations and update period at each log interval, for `lens control`
/// (which picks a start from it with [`ControlStatus::safe_start`], and
/// checks a version against it as the job would).
#[derive(Clone, Debug, PartialEq)]
pub struct ControlStatus {
    /// The job's span-group catalog.
    pub catalog: CatalogData,
    /// The launch span groups (names).
    pub launch_groups: Vec<String>,
    /// The job's variable prefix.
    pub prefix: String,
    /// The poll period, seconds.
    pub poll_s: f64,
    /// The last iteration that began (`None` before the first).
    pub last_iteration: Option<u64>,
    /// Seconds per iteration over the latest log interval (`None`: unknown).
    pub iteration_time_s: Option<f64>,
    /// The generation in force on rank 0.
    pub generation: u64,
    /// The highest generation rank 0 accepted (its window may not have
    /// started yet): `lens control` writes the one after it.
    pub highest_generation: u64,
    /// Whether the job was launched with per-rank metrics (`None`: not
    /// said, a status from an older job).
    pub launch_rank_metrics: Option<bool>,
    /// Seconds between this update and the one before it (`None`:
    /// unknown): how often the job updates the file, so that `lens control`
    /// can tell a status the job stopped updating.
    pub update_period_s: Option<f64>,
    /// When this was written, seconds since the epoch.
    pub written_unix_s: f64,
    /// The version of the highest generation rank 0 accepted, as
    /// [`ControlRequest::to_json`] writes it (`None`: none accepted, or a
    /// status from an older job): a file that reuses that generation with
    /// another content is refused, and `lens control --show` says so.
    pub accepted: Option<String>,
    /// Whether the job ended (its last status, written as it stopped):
    /// no running job reads the control file then.
    pub ended: bool,
}

/// How many polls, beyond twice its usual update period, a status may be
/// old before `lens control` takes it for one the job stopped updating.
pub const STALE_STATUS_POLLS: f64 = 5.0;

/// Why [`ControlStatus::safe_start`] cannot pick a start.
#[derive(Clone, Debug, PartialEq)]
pub enum UnknownStart {
    /// The job has begun no iteration yet (or never said).
    NoIteration,
    /// The job has said its last iteration but not yet its iteration time
    /// (it writes one from its second log interval on), so where it is now
    /// cannot be extrapolated.
    NoIterationTime {
        /// Its last iteration.
        last_iteration: u64,
    },
    /// The status is older than the job's updates explain: the job stopped
    /// updating it (it ended, or hangs), so its last iteration says nothing
    /// of where it is now.
    Stale {
        /// How old the status is, seconds.
        age_s: f64,
        /// The oldest it may be, seconds.
        limit_s: f64,
        /// Its last iteration.
        last_iteration: u64,
    },
}

impl fmt::Display for UnknownStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnknownStart::NoIteration => {
                f.write_str("it has no last iteration yet (the job writes it at each log interval)")
            }
            UnknownStart::NoIterationTime { last_iteration } => write!(
                f,
                "it has no iteration time yet (the job writes one from its second log interval on), so where the \
                 job is now, past its last iteration {last_iteration}, is unknown"
            ),
            UnknownStart::Stale { age_s, limit_s, last_iteration } => write!(
                f,
                "it is {age_s:.0} s old (last iteration {last_iteration}), older than the {limit_s:.0} s within which \
                 a running job updates it: the job may have stopped or hung, so where it is now is unknown"
            ),
        }
    }
}

impl ControlStatus {
    /// The status as JSON (one line).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::json!({
            "catalog": self.catalog.to_value(),
            "launch_span_groups": self.launch_groups,
            "prefix": self.prefix,
            "poll_s": self.poll_s,
            "last_iteration": self.last_iteration,
            "iteration_time_s": self.iteration_time_s,
            "generation": self.generation,
            "highest_generation": self.highest_generation,
            "launch_rank_metrics": self.launch_rank_metrics,
            "update_period_s": self.update_period_s,
            "written_unix_s": self.written_unix_s,
            "accepted": self.accepted,
            "ended": self.ended,
        })
        .to_string();
        text.push('\n');
        text
    }

    /// The status from its JSON (`None`: not a status file).
    pub fn from_json(text: &str) -> Option<ControlStatus> {
        let value: Value = serde_json::from_str(text).ok()?;
        Some(ControlStatus {
            catalog: CatalogData::from_value(value.get("catalog")?)?,
            launch_groups: value
                .get("launch_span_groups")?
                .as_array()?
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()?,
            prefix: value.get("prefix")?.as_str()?.to_string(),
            poll_s: value.get("poll_s")?.as_f64()?,
            last_iteration: value.get("last_iteration").and_then(Value::as_u64),
            iteration_time_s: value.get("iteration_time_s").and_then(Value::as_f64),
            generation: value.get("generation").and_then(Value::as_u64).unwrap_or(0),
            highest_generation: value.get("highest_generation").and_then(Value::as_u64).unwrap_or(0),
            launch_rank_metrics: value.get("launch_rank_metrics").and_then(Value::as_bool),
            update_period_s: value.get("update_period_s").and_then(Value::as_f64),
            written_unix_s: value.get("written_unix_s").and_then(Value::as_f64).unwrap_or(0.0),
            accepted: value.get("accepted").and_then(Value::as_str).map(str::to_string),
            ended: value.get("ended").and_then(Value::as_bool).unwrap_or(false),
        })
    }

    /// The first iteration a change written now can safely start at: the
    /// last iteration (extrapolated to now at the iteration time) plus a
    /// margin of two polls' worth of iterations (at least one). Refused
    /// when the last iteration is unknown, or when the status is older than
    /// [`STALE_STATUS_POLLS`] polls plus twice its update period (the job
    /// stopped updating it: extrapolating would invent iterations).
    pub fn safe_start(&self, now_unix_s: f64) -> Result<u64, UnknownStart> {
        let last = self.last_iteration.ok_or(UnknownStart::NoIteration)?;
        let elapsed = (now_unix_s - self.written_unix_s).max(0.0);
        let limit_s = STALE_STATUS_POLLS * self.poll_s + 2.0 * self.update_period_s.unwrap_or(0.0).max(0.0);
        if elapsed > limit_s {
            return Err(UnknownStart::Stale { age_s: elapsed, limit_s, last_iteration: last });
        }
        // Without an iteration time the job may be any number of iterations
        // past `last` (a whole log interval of them): a start picked from it
        // alone could be long past, so none is picked.
        let t =
            self.iteration_time_s.filter(|t| *t > 0.0).ok_or(UnknownStart::NoIterationTime { last_iteration: last })?;
        let (since, margin) = ((elapsed / t).ceil() as u64, ((2.0 * self.poll_s) / t).ceil() as u64);
        Ok(last.saturating_add(since).saturating_add(margin.max(1)))
    }

    /// The job's iteration now, as far as the status tells: its last
    /// iteration, extrapolated to `now_unix_s` at the iteration time (not
    /// extrapolated when that is unknown).
    pub fn iteration_now(&self, now_unix_s: f64) -> Option<u64> {
        let last = self.last_iteration?;
        let elapsed = (now_unix_s - self.written_unix_s).max(0.0);
        let since = self.iteration_time_s.filter(|t| *t > 0.0).map_or(0, |t| (elapsed / t).floor() as u64);
        Some(last.saturating_add(since))
    }

    /// The highest generation the job has seen: the one after it is the
    /// next change's.
    pub fn highest(&self) -> u64 {
        self.generation.max(self.highest_generation)
    }

    /// The job's launch settings as far as the status says them (the
    /// launch span groups, per-rank metrics; `None`: a launch span group
    /// this catalog does not know), to check a version against as the job
    /// does ([`parse_request`]). Per-rank metrics not said count as on, so
    /// that only the job can refuse them.
    pub fn launch(&self) -> Option<Settings> {
        Some(Settings {
            groups: self.catalog.resolve(&self.launch_groups.join(",")).ok()?,
            sampling_ratio: None,
            rank_metrics: self.launch_rank_metrics.unwrap_or(true),
            hang_timeout: HangTimeout::Auto,
        })
    }
}

/// The highest generation a version may have: the job exports the one in
/// force as an OTLP integer (`dl.control.generation`, the change events),
/// which is signed, so a higher one would read as another number.
pub const MAX_GENERATION: u64 = i64::MAX as u64;

/// The first key `text`'s top-level JSON object gives twice, if any
/// (`serde_json`'s `Value` keeps the last silently).
fn duplicate_key(text: &str) -> Option<String> {
    struct Keys;
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
            // The whole map is read, even past a duplicate: serde_json
            // refuses a map left unfinished, which read as no duplicate.
            let mut seen = std::collections::BTreeSet::new();
            let mut first = None;
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
                if first.is_none() && !seen.insert(key.clone()) {
                    first = Some(key);
                }
            }
            Ok(first)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_map(&mut deserializer, Keys).ok().flatten()
}

/// Writes `text` to `path` atomically: a temporary file beside it (mode
/// 0600), then a rename over it, so that a reader sees the old version or
/// the new one, never a part. No `fsync`: the job writes its status file
/// with this on the training thread, and a control file lost in a crash
/// of the writer's machine is simply written again.
///
/// The temporary file is always a new one (`O_CREAT | O_EXCL`, and
/// `O_NOFOLLOW`): a file or symbolic link already at its name, left
/// behind or planted by another user of a shared directory, is never
/// opened, written or truncated; the next name is tried instead.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static WRITES: AtomicU64 = AtomicU64::new(0);
    /// Names tried before giving up (each taken by something else).
    const TRIES: u32 = 8;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(|| "control".into(), |n| n.to_string_lossy().into_owned());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let mut last = None;
    for _ in 0..TRIES {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let serial = WRITES.fetch_add(1, Ordering::Relaxed);
        let temporary = dir.join(format!(".{name}.{}.{serial}.{nanos:08x}.tmp", std::process::id()));
        let mut file = match options.open(&temporary) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                last = Some(error);
                continue;
            }
            Err(error) => return Err(error),
        };
        let result = file.write_all(text.as_bytes()).and_then(|()| {
            drop(file);
            std::fs::rename(&temporary, path)
        });
        if result.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        return result;
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no temporary file name was free")))
}

/// The keys of a request for display (`lens control --show`): key → value.
pub fn describe(request: &ControlRequest) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    out.insert(keys::GENERATION, request.generation.to_string());
    if let Some((spec, _)) = &request.span_groups {
        out.insert(keys::SPAN_GROUPS, spec.clone());
    }
    out.insert(keys::FROM_ITERATION, request.from_iteration.to_string());
    out.insert(
        keys::UNTIL_ITERATION,
        request.until_iteration.map_or_else(|| "(until the next change)".to_string(), |u| u.to_string()),
    );
    if let Some(ratio) = request.sampling_ratio {
        out.insert(keys::SAMPLING_RATIO, ratio.to_string());
    }
    if let Some(on) = request.rank_metrics {
        out.insert(keys::RANK_METRICS, if on { "on" } else { "off" }.to_string());
    }
    if let Some(timeout) = request.hang_timeout {
        out.insert(keys::HANG_TIMEOUT_S, timeout.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::LENS_CATALOG;

    fn launch() -> Settings {
        Settings {
            groups: LENS_CATALOG.resolve("default").unwrap(),
            sampling_ratio: None,
            rank_metrics: true,
            hang_timeout: HangTimeout::Auto,
        }
    }

    fn parse(text: &str) -> Result<ControlRequest, ControlInputError> {
        parse_request(text, &LENS_CATALOG, &launch(), "NEMO_LENS")
    }

    /// A refused key's value once went to every rank's log as written:
    /// the headers' token, the endpoint's password, the head of a file that
    /// is not JSON.
    #[test]
    fn a_refused_version_never_quotes_a_credential() {
        let accepted = "can never be changed while the job runs (only at launch); accepted keys: generation, \
             span_groups, from_iteration, iterations, until_iteration, sampling_ratio, rank_metrics, hang_timeout_s";
        for (text, expected) in [
            (
                r#"{"generation":9,"from_iteration":1000,"headers":"authorization=Bearer SECRET123"}"#,
                format!(r#"key 'headers' = "authorization=[REDACTED]": {accepted}"#),
            ),
            (r#"{"generation":9,"headers":"Bearer SECRET123"}"#, format!("key 'headers' = [REDACTED]: {accepted}")),
            (r#"{"generation":9,"headers":{"a":"SECRET123"}}"#, format!("key 'headers' = [REDACTED]: {accepted}")),
            (
                r#"{"generation":9,"endpoint":"http://u:SECRET123@h:1"}"#,
                format!(r#"key 'endpoint' = "http://[REDACTED]@h:1": {accepted}"#),
            ),
            (
                r#"{"headers":"a=SECRET123","headers":"b=SECRET123"}"#,
                r#"key 'headers' = "b=[REDACTED]": given more than once; give each key once"#.to_string(),
            ),
            (
                r#"{"generation":9,"api_token":"SECRET123"}"#,
                "key 'api_token' = [REDACTED]: unknown key; accepted keys: generation, span_groups, from_iteration, \
                 iterations, until_iteration, sampling_ratio, rank_metrics, hang_timeout_s"
                    .to_string(),
            ),
            (
                "authorization=Bearer SECRET123",
                "key '(file)' = (30 bytes, not shown): not JSON: expected value at line 1 column 1".to_string(),
            ),
            (
                "{\"generation\": 9,\n \"headers\": \"Bearer SECRET123\" x}",
                "key '(file)' = (51 bytes, not shown): not JSON: expected `,` or `}` at line 2 column 32".to_string(),
            ),
            (
                r#""Bearer SECRET123""#,
                "key '(file)' = (a string of 16 characters, not shown): expected a JSON object".to_string(),
            ),
            (r#"["SECRET123"]"#, "key '(file)' = (an array of 1 items, not shown): expected a JSON object".to_string()),
            ("7", "key '(file)' = 7: expected a JSON object".to_string()),
        ] {
            let error = parse(text).unwrap_err();
            assert_eq!(error.to_string(), expected, "{text}");
            assert!(!format!("{error:?}").contains("SECRET123"), "{text}");
        }
    }

    /// A timeout too small for a float once read as 0.0, off; only a
    /// written zero means off.
    #[test]
    fn only_a_written_zero_turns_the_hang_watchdog_off() {
        let error = parse(r#"{"generation": 2, "from_iteration": 10, "hang_timeout_s": 1e-400}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "key 'hang_timeout_s' = 1e-400: expected auto, 0 (off) or a number of seconds from 0.01 to 31536000 (a \
             year), e.g. 120"
        );
        let error = parse(r#"{"generation": 2, "from_iteration": 10, "hang_timeout_s": "1e-400"}"#).unwrap_err();
        assert_eq!(error.value, r#""1e-400""#);
        for zero in ["0", "0.0", "-0", "0e5", r#""0.000""#] {
            let text = format!(r#"{{"generation": 2, "from_iteration": 10, "hang_timeout_s": {zero}}}"#);
            assert_eq!(parse(&text).unwrap().hang_timeout, Some(HangTimeout::Off), "{zero}");
        }
        let text = r#"{"generation": 2, "from_iteration": 10, "hang_timeout_s": 1.5e1}"#;
        assert_eq!(parse(text).unwrap().hang_timeout, Some(HangTimeout::After(std::time::Duration::from_secs(15))));
    }

    #[test]
    fn bad_versions_name_the_key_and_the_value() {
        let cases: [(&str, &str, &str); 17] = [
            ("{not json", "(file)", "not JSON"),
            (
                r#"{"generation": 2, "from_iteration": 18446744073709551615, "iterations": 2}"#,
                "iterations",
                "past the last iteration",
            ),
            (
                r#"{"generation": 2, "span_groups": "per_step", "from_iteration": 9, "span_groups": "all"}"#,
                "span_groups",
                "given more than once",
            ),
            (r#"{"generation": 3, "generation": 4, "from_iteration": 10}"#, "generation", "given more than once"),
            ("[1]", "(file)", "a JSON object"),
            (r#"{"generation": 2, "spam_groups": "x"}"#, "spam_groups", "did you mean 'span_groups'"),
            (r#"{"generation": 2, "endpoint": "http://x"}"#, "endpoint", "never be changed"),
            (r#"{"span_groups": "per_step"}"#, "generation", "needs a generation"),
            (r#"{"generation": 0}"#, "generation", "from 1 to 9223372036854775807"),
            (r#"{"generation": 9223372036854775808}"#, "generation", "the most an OTLP integer holds"),
            (r#"{"generation": 2, "span_groups": "per_stp"}"#, "span_groups", "did you mean 'per_step'"),
            (r#"{"generation": 2, "span_groups": "step"}"#, "span_groups", "'job' group"),
            (r#"{"generation": 2, "sampling_ratio": 1.5}"#, "sampling_ratio", "[0.0, 1.0]"),
            (
                r#"{"generation": 2, "from_iteration": 5, "iterations": 2, "until_iteration": 9}"#,
                "until_iteration",
                "not both",
            ),
            (r#"{"generation": 2, "iterations": 2}"#, "iterations", "needs 'from_iteration'"),
            (r#"{"generation": 2, "hang_timeout_s": "soon", "from_iteration": 1}"#, "hang_timeout_s", "auto, 0 (off)"),
            // Each rank would apply it whenever it happens to read it.
            (r#"{"generation": 2, "sampling_ratio": 0.5}"#, "from_iteration", "needs the iteration it starts at"),
        ];
        for (text, key, reason) in cases {
            let error = parse(text).unwrap_err();
            assert_eq!(error.key, key, "{text}: {error}");
            assert!(error.to_string().contains(reason), "{text}: {error}");
        }
        let off = Settings { rank_metrics: false, ..launch() };
        let error =
            parse_request(r#"{"generation": 2, "rank_metrics": true}"#, &LENS_CATALOG, &off, "MYJOB").unwrap_err();
        assert!(error.reason.contains("needs a launch with MYJOB_RANK_METRICS=1"), "{error}");
    }

    #[test]
    fn a_request_round_trips_through_its_json() {
        let text = r#"{"generation": 7, "span_groups": "per_step", "from_iteration": 40, "iterations": 10,
            "sampling_ratio": 0.25, "rank_metrics": false, "hang_timeout_s": 90}"#;
        let request = parse(text).unwrap();
        assert_eq!(request.until_iteration, Some(49));
        assert_eq!(parse(&request.to_json()).unwrap(), request);
        assert_eq!(parse(&ControlRequest::reset(8, 120).to_json()).unwrap(), ControlRequest::reset(8, 120));
        assert_eq!(ControlRequest::reset(8, 120).to_json(), "{\"from_iteration\":120,\"generation\":8}\n");
    }

    #[test]
    fn a_late_reader_applies_at_its_next_iteration_and_ends_with_everyone() {
        let request =
            parse(r#"{"generation": 3, "span_groups": "per_step", "from_iteration": 10, "iterations": 10}"#).unwrap();
        let mut schedule = ControlSchedule::new(launch());
        for i in 0..13 {
            assert!(schedule.at_iteration(i).is_none());
        }
        schedule.set_request(Some(request));
        let start = schedule.at_iteration(13).unwrap();
        assert_eq!((start.generation, start.late_by, start.window_end), (3, 3, false));
        assert_eq!(schedule.next_due(13), 20);
        for i in 14..20 {
            assert!(schedule.at_iteration(i).is_none(), "{i}");
        }
        let end = schedule.at_iteration(20).unwrap();
        assert!(end.window_end);
        assert_eq!(end.after, launch());
        assert_eq!(schedule.generation(), 3);
        assert_eq!(schedule.next_due(20), u64::MAX);
    }

    #[test]
    fn a_window_read_after_its_end_changes_only_the_generation() {
        let request =
            parse(r#"{"generation": 4, "span_groups": "per_step", "from_iteration": 1, "until_iteration": 2}"#)
                .unwrap();
        let mut schedule = ControlSchedule::new(launch());
        schedule.set_request(Some(request));
        let change = schedule.at_iteration(9).unwrap();
        assert_eq!(change.after, launch());
        assert_eq!(change.generation, 4);
        assert!(schedule.at_iteration(10).is_none());
    }

    #[test]
    fn a_missing_file_goes_back_to_the_launch_settings() {
        let mut schedule = ControlSchedule::new(launch());
        schedule.set_request(Some(parse(r#"{"generation": 1, "sampling_ratio": 0.5, "from_iteration": 0}"#).unwrap()));
        assert_eq!(schedule.at_iteration(0).unwrap().after.sampling_ratio, Some(0.5));
        schedule.set_request(None);
        assert_eq!(schedule.next_due(0), 1);
        assert_eq!(schedule.at_iteration(1).unwrap().after, launch());
    }

    #[test]
    fn an_atomic_write_replaces_a_link_and_follows_none() {
        let dir = std::env::temp_dir().join(format!("lens-core-write-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        // A link where the file goes: the link is replaced, its target kept.
        let file = dir.join("c.json.status");
        std::os::unix::fs::symlink(&victim, &file).unwrap();
        write_atomic(&file, "{\"a\": 1}").unwrap();
        assert!(!std::fs::symlink_metadata(&file).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{\"a\": 1}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // Nothing else is left beside them: the temporary file was renamed.
        let mut names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["c.json.status", "victim.txt"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("lens-core-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.json.status");
        for (mode, refused) in [(0o700, false), (0o1777, true), (0o770, true), (0o755, false)] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            match check_directory(&file) {
                Err(Refusal::DirectoryWritableByOthers(at, said)) => {
                    assert!(refused, "{mode:o}");
                    assert_eq!((at, said), (dir.clone(), mode));
                }
                Err(other) => panic!("{other}"),
                Ok(()) => assert!(!refused, "{mode:o}"),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_a_file_its_owner_alone_can_write_is_read() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("lens-core-control-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let set_mode =
            |path: &Path, mode: u32| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        set_mode(&dir, 0o700);
        let file = dir.join("control.json");
        assert_eq!(check_file(&file, job_uid()).map(|m| m.is_some()), Ok(false), "missing: the launch configuration");
        write_atomic(&file, "{}").unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(matches!(check_file(&file, job_uid()), Ok(Some(_))));
        assert_eq!(check_file(&file, job_uid().wrapping_add(1)).unwrap_err(), Refusal::NotOwner(job_uid()));
        set_mode(&file, 0o666);
        assert_eq!(check_file(&file, job_uid()).unwrap_err(), Refusal::WritableByOthers(0o666));
        set_mode(&file, 0o600);
        set_mode(&dir, 0o777);
        assert!(matches!(check_file(&file, job_uid()), Err(Refusal::DirectoryWritableByOthers(_, 0o777))));
        set_mode(&dir, 0o700);
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(check_file(&link, job_uid()).unwrap_err(), Refusal::Symlink);
        assert!(read_capped(&link).is_err(), "never read through a link");
        write_atomic(&file, &" ".repeat(MAX_CONTROL_BYTES as usize + 1)).unwrap();
        let too_long = check_file(&file, job_uid()).unwrap_err();
        assert_eq!(too_long, Refusal::TooLong(MAX_CONTROL_BYTES + 1));
        assert_eq!(too_long.to_string(), "it is 65537 bytes long, more than the 65536 bytes (64 KiB) read");
        assert!(too_long.accepted().contains("at most 64 KiB"), "{}", too_long.accepted());
        let error = read_capped(&file).unwrap_err();
        assert!(error.starts_with("it is 65537 bytes long") && error.contains("at most 64 KiB"), "{error}");
        let subdir = dir.join("sub");
        std::fs::create_dir(&subdir).unwrap();
        let refusal = check_file(&subdir, job_uid()).unwrap_err();
        assert_eq!(refusal.to_string(), "it is a directory, not a regular file");
        assert!(refusal.accepted().contains("a regular file"), "{}", refusal.accepted());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_status_round_trips_and_picks_a_start_two_polls_ahead() {
        let status = ControlStatus {
            catalog: CatalogData::of(&LENS_CATALOG),
            launch_groups: vec!["job".into()],
            prefix: "NEMO_LENS".into(),
            poll_s: 1.0,
            last_iteration: Some(100),
            iteration_time_s: Some(0.25),
            generation: 2,
            highest_generation: 3,
            launch_rank_metrics: Some(false),
            update_period_s: Some(2.5),
            written_unix_s: 1000.0,
            accepted: Some(ControlRequest::reset(3, 150).to_json()),
            ended: false,
        };
        assert_eq!(ControlStatus::from_json(&status.to_json()), Some(status.clone()));
        let ended = ControlStatus { ended: true, accepted: None, ..status.clone() };
        assert_eq!(ControlStatus::from_json(&ended.to_json()), Some(ended));
        // Where the job is now: 4 iterations of 0.25 s since the write.
        assert_eq!(status.iteration_now(1001.0), Some(104));
        assert_eq!(ControlStatus { iteration_time_s: None, ..status.clone() }.iteration_now(1001.0), Some(100));
        assert_eq!(status.highest(), 3);
        // 2 polls of 1 s at 0.25 s per iteration: 8 iterations, plus 4 since the write.
        assert_eq!(status.safe_start(1001.0), Ok(112));
        assert_eq!(
            ControlStatus { last_iteration: None, ..status.clone() }.safe_start(1001.0),
            Err(UnknownStart::NoIteration)
        );
        // Said once (no iteration time yet): the job may be a whole log
        // interval past it, so no start is picked.
        let once = ControlStatus { iteration_time_s: None, ..status.clone() }.safe_start(1001.0).unwrap_err();
        assert_eq!(once, UnknownStart::NoIterationTime { last_iteration: 100 });
        assert!(once.to_string().starts_with("it has no iteration time yet"), "{once}");
        // Up to 5 polls plus twice the update period (10 s) old: the job runs.
        assert_eq!(status.safe_start(1010.0), Ok(100 + 40 + 8));
        let stale = status.safe_start(1010.5).unwrap_err();
        assert_eq!(stale, UnknownStart::Stale { age_s: 10.5, limit_s: 10.0, last_iteration: 100 });
        assert!(stale.to_string().starts_with("it is 10 s old (last iteration 100), older than the 10 s"), "{stale}");
        // The launch, as the job checks a version against it.
        let launch = status.launch().unwrap();
        assert_eq!((launch.groups, launch.rank_metrics), (LENS_CATALOG.resolve("job").unwrap(), false));
        let error = parse_request(
            r#"{"generation": 4, "rank_metrics": true, "from_iteration": 1}"#,
            &status.catalog,
            &launch,
            "P",
        )
        .unwrap_err();
        assert_eq!(error.key, "rank_metrics");
        let catalog = CatalogData::of(&LENS_CATALOG);
        assert_eq!(catalog.resolve("default, step"), Ok(LENS_CATALOG.resolve("default,step").unwrap()));
        assert_eq!(catalog.resolve("per_stpe").unwrap_err(), LENS_CATALOG.resolve("per_stpe").unwrap_err().to_string());
    }

    #[test]
    fn a_fifo_is_refused_at_once_never_waited_on() {
        use std::os::unix::ffi::OsStrExt as _;
        let dir = std::env::temp_dir().join(format!("lens-core-control-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("control.json");
        let name = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert_eq!(
            check_file(&fifo, job_uid()).unwrap_err().to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
        // A blocking open of a FIFO with no writer would wait forever; the
        // read is refused at once (bounded here, so that a hang fails).
        let (sender, receiver) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || sender.send(read_capped(&path)));
        let read = receiver.recv_timeout(std::time::Duration::from_secs(10)).expect("read_capped returned");
        let error = read.unwrap_err();
        assert!(
            error.starts_with("it is a FIFO (named pipe), not a regular file; a control file is a regular file"),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_later_generation_waits_for_its_start_and_only_a_late_reader_is_late() {
        let mut schedule = ControlSchedule::new(launch());
        let open = parse(r#"{"generation": 2, "span_groups": "per_step", "from_iteration": 10}"#).unwrap();
        schedule.set_request(Some(open.clone()));
        let start = schedule.at_iteration(10).unwrap();
        assert_eq!((start.generation, start.late_by), (2, 0));
        // Generation 3, read at 12, starts at 20: generation 2 holds until then.
        let next = parse(r#"{"generation": 3, "sampling_ratio": 0.5, "from_iteration": 20, "iterations": 5}"#).unwrap();
        schedule.set_request(Some(next.clone()));
        assert_eq!(schedule.next_due(12), 20);
        for i in 12..20 {
            assert!(schedule.at_iteration(i).is_none(), "{i}");
            assert_eq!(*schedule.in_force(), open.settings_over(&launch()), "{i}");
            assert_eq!(schedule.generation(), 2);
        }
        let change = schedule.at_iteration(20).unwrap();
        assert_eq!((change.generation, change.late_by, change.window_end), (3, 0, false));
        assert_eq!(change.after, next.settings_over(&launch()));
        assert_eq!(schedule.next_due(20), 25);
        assert!(schedule.at_iteration(25).unwrap().window_end);
        // A reset read after its start applies at once, late by that much.
        schedule.set_request(Some(parse(r#"{"generation": 4, "from_iteration": 26}"#).unwrap()));
        let reset = schedule.at_iteration(29).unwrap();
        assert_eq!((reset.generation, reset.late_by, reset.after), (4, 3, launch()));
    }

    #[test]
    fn a_generation_is_new_the_same_again_or_refused() {
        let accepted = parse(r#"{"generation": 5, "sampling_ratio": 0.5, "from_iteration": 10}"#).unwrap();
        let again = parse(r#"{"from_iteration": 10, "sampling_ratio": 0.5,   "generation": 5}"#).unwrap();
        assert_eq!(check_generation(&again, 5, Some(&accepted)), Ok(false), "the same version, written again");
        let other = parse(r#"{"generation": 5, "sampling_ratio": 0.25, "from_iteration": 10}"#).unwrap();
        let error = check_generation(&other, 5, Some(&accepted)).unwrap_err();
        assert_eq!((error.key.as_str(), error.value.as_str()), ("generation", "5"));
        assert!(error.reason.contains("already accepted, with a different content"), "{error}");
        let lower = ControlRequest::reset(4, 10);
        assert!(check_generation(&lower, 5, Some(&accepted)).unwrap_err().reason.contains("lower than generation 5"));
        assert_eq!(check_generation(&ControlRequest::reset(6, 10), 5, Some(&accepted)), Ok(true));
        assert_eq!(check_generation(&ControlRequest::reset(1, 0), 0, None), Ok(true));
    }

    #[test]
    fn a_window_ended_by_an_iteration_that_began_is_past() {
        let window = parse(r#"{"generation": 2, "from_iteration": 10, "until_iteration": 19}"#).unwrap();
        assert!(!window.ended_by(18));
        assert!(window.ended_by(19), "iteration 19 began: nothing of the window is ahead");
        assert!(!ControlRequest::reset(3, 10).ended_by(u64::MAX - 1), "open-ended");
    }

    proptest::proptest! {
        /// Whenever a rank reads a window (before it, inside it or after
        /// it), it has the window's settings at exactly the iterations from
        /// the later of the start and its reading to the common end, and
        /// the launch settings everywhere else.
        #[test]
        fn every_reader_ends_the_window_at_the_same_iteration(
            from in 0u64..40,
            length in 1u64..20,
            seen in 0u64..70,
        ) {
            let until = from + length - 1;
            let text = format!(
                r#"{{"generation": 2, "span_groups": "per_step", "from_iteration": {from}, "until_iteration": {until}}}"#
            );
            let request = parse(&text).unwrap();
            let mut schedule = ControlSchedule::new(launch());
            for iteration in 0..80u64 {
                if iteration == seen {
                    schedule.set_request(Some(request.clone()));
                }
                let due = schedule.next_due(iteration.saturating_sub(1));
                let change = schedule.at_iteration(iteration);
                if change.is_some() && iteration > 0 && seen != iteration {
                    proptest::prop_assert!(iteration >= due, "a change at {} before it was due at {}", iteration, due);
                }
                let inside = iteration >= from.max(seen) && iteration <= until;
                let expected = if inside { request.settings_over(&launch()) } else { launch() };
                proptest::prop_assert_eq!(*schedule.in_force(), expected, "iteration {}", iteration);
                if let Some(change) = change.filter(|c| c.generation == 2 && !c.window_end && seen > from) {
                    proptest::prop_assert_eq!(change.late_by, seen - from);
                }
            }
        }
    }
}
