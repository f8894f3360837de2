//! The `otel`-off side of the seam: the runtime's items with identical names,
//! arguments and types, doing nothing.
//!
//! Every function is `#[inline(always)]`, so a call compiles to the
//! evaluation of its arguments (which the optimiser drops when they have no
//! side effects) and, for the closure forms, to the body itself. Nothing here
//! names an OpenTelemetry type, and the build has no OpenTelemetry crate.
//!
//! The pieces that behave the same in both modes (redaction, lazy
//! attributes, the bootstrap's error) are not twins: both sides re-export
//! lens-core's one definition (`lens_core::attr`, `lens_core::bootstrap`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::time::SystemTime;

use lens_core::attr::{AttrValue, KeyValue};
pub use lens_core::attr::{DEFAULT_REDACT_KEYS, LazyAttributes, REDACTED, lazy_attributes, redact_value};
pub use lens_core::bootstrap::InvalidBootstrap;
use lens_core::env::EnvSource;
use lens_core::groups::SpanGroup;

/// Always false: with `otel` off no span is ever recorded.
#[inline(always)]
pub fn is_span_group_enabled(group: SpanGroup) -> bool {
    let _ = group;
    false
}

/// "No context": with `otel` off there is never a context to carry.
#[derive(Clone, Default)]
pub struct RemoteContext;

impl RemoteContext {
    /// "No context".
    #[inline(always)]
    pub fn none() -> RemoteContext {
        RemoteContext
    }

    /// Always false.
    #[inline(always)]
    pub fn is_valid(&self) -> bool {
        false
    }

    /// Always `None`.
    #[inline(always)]
    pub fn trace_id_hex(&self) -> Option<String> {
        None
    }

    /// Always `None`.
    #[inline(always)]
    pub fn span_id_hex(&self) -> Option<String> {
        None
    }

    /// Writes nothing.
    #[inline(always)]
    pub fn inject(&self, carrier: &mut impl Extend<(String, String)>) {
        let _ = carrier;
    }

    /// An empty carrier.
    #[inline(always)]
    pub fn to_carrier(&self) -> HashMap<String, String> {
        HashMap::new()
    }

    /// No bytes (which decode to "no context" with either mode).
    #[inline(always)]
    pub fn to_bytes(&self) -> Vec<u8> {
        Vec::new()
    }

    /// Attaches nothing.
    #[inline(always)]
    pub fn attach(&self) -> AttachedContext {
        AttachedContext { _not_send: PhantomData }
    }
}

impl fmt::Debug for RemoteContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RemoteContext(none)")
    }
}

/// The guard of [`RemoteContext::attach`]: nothing to detach.
#[must_use = "the context is current only while the guard lives: bind it with `let _context = ...`"]
pub struct AttachedContext {
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for AttachedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttachedContext").field("attached", &false).finish()
    }
}

/// A link to another span: never recorded.
#[derive(Clone, Debug)]
pub struct SpanLink;

impl SpanLink {
    /// A link that is skipped.
    #[inline(always)]
    pub fn new(remote: &RemoteContext) -> SpanLink {
        let _ = remote;
        SpanLink
    }

    /// The same link; the attributes are dropped.
    #[inline(always)]
    #[must_use]
    pub fn with_attributes(self, attributes: impl IntoIterator<Item = KeyValue>) -> SpanLink {
        let _ = attributes;
        self
    }

    /// Always false.
    #[inline(always)]
    pub fn is_valid(&self) -> bool {
        false
    }
}

pub use lens_core::attr::SpanKind;

/// An inert detached span, zero-sized. Like the real one it is `Send`.
#[must_use = "the span ends when it is dropped"]
#[derive(Debug)]
pub struct DetachedSpan;

impl DetachedSpan {
    /// An inert span.
    #[inline(always)]
    pub const fn noop() -> DetachedSpan {
        DetachedSpan
    }

    /// Always false.
    #[inline(always)]
    pub fn is_recording(&self) -> bool {
        false
    }

    /// Does nothing.
    #[inline(always)]
    pub fn set_attribute(&self, key: impl Into<Cow<'static, str>>, value: impl Into<AttrValue>) {
        let _ = (key, value);
    }

    /// Does nothing.
    #[inline(always)]
    pub fn set_attributes(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        let _ = attributes;
    }

    /// Does nothing.
    #[inline(always)]
    pub fn set_status_error(&self, description: impl Into<Cow<'static, str>>) {
        let _ = description;
    }

    /// Always "no context".
    #[inline(always)]
    pub fn remote_context(&self) -> RemoteContext {
        RemoteContext
    }

    /// Does nothing.
    #[inline(always)]
    pub fn end_at(self, end_time: SystemTime) {
        let _ = end_time;
    }
}

/// An inert detached span.
#[inline(always)]
pub fn detached_span(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    kind: SpanKind,
    parent: &RemoteContext,
    start_time: Option<SystemTime>,
    links: impl IntoIterator<Item = SpanLink>,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> DetachedSpan {
    let _ = (group, name, kind, parent, start_time, links, attributes);
    DetachedSpan
}

/// An inert span guard, zero-sized. Like the real guard it is neither `Send`
/// nor `Sync`, so code that compiles in one mode compiles in the other.
#[must_use = "the span ends when the guard is dropped: bind it with `let _span = ...`"]
pub struct SpanGuard {
    _not_send: PhantomData<*const ()>,
}

impl SpanGuard {
    /// An inert guard.
    #[inline(always)]
    pub const fn noop() -> SpanGuard {
        SpanGuard { _not_send: PhantomData }
    }

    /// Always false.
    #[inline(always)]
    pub fn is_recording(&self) -> bool {
        false
    }

    /// Does nothing.
    #[inline(always)]
    pub fn set_attribute(&self, key: impl Into<Cow<'static, str>>, value: impl Into<AttrValue>) {
        let _ = (key, value);
    }

    /// Does nothing.
    #[inline(always)]
    pub fn set_attributes(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        let _ = attributes;
    }

    /// Does nothing.
    #[inline(always)]
    pub fn add_event(&self, name: impl Into<Cow<'static, str>>, attributes: impl IntoIterator<Item = KeyValue>) {
        let _ = (name, attributes);
    }

    /// Does nothing.
    #[inline(always)]
    pub fn record_error(&self, error: &dyn Error) {
        let _ = error;
    }

    /// Does nothing.
    #[inline(always)]
    pub fn set_status_error(&self, description: impl Into<Cow<'static, str>>) {
        let _ = description;
    }

    /// "No context".
    #[inline(always)]
    pub fn remote_context(&self) -> RemoteContext {
        RemoteContext
    }

    /// Does nothing.
    #[inline(always)]
    pub fn end(self) {}

    /// Does nothing.
    #[inline(always)]
    pub fn end_at(self, end_time: SystemTime) {
        let _ = end_time;
    }
}

impl fmt::Debug for SpanGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SpanGuard(inert)")
    }
}

/// An inert guard.
#[inline(always)]
pub fn span_cm(name: impl Into<Cow<'static, str>>, attributes: impl IntoIterator<Item = KeyValue>) -> SpanGuard {
    let _ = (name, attributes);
    SpanGuard::noop()
}

/// An inert guard.
#[inline(always)]
pub fn managed_span(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    let _ = (group, name, attributes);
    SpanGuard::noop()
}

/// An inert guard.
#[inline(always)]
pub fn managed_span_since(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    start_time: SystemTime,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    let _ = (group, name, start_time, attributes);
    SpanGuard::noop()
}

/// Records nothing; "no context".
#[inline(always)]
pub fn backdated_span(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    start_time: SystemTime,
    end_time: SystemTime,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> RemoteContext {
    let _ = (group, name, start_time, end_time, attributes);
    RemoteContext
}

/// An inert guard.
#[inline(always)]
pub fn new_trace_linked(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    links: impl IntoIterator<Item = SpanLink>,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    let _ = (group, name, links, attributes);
    SpanGuard::noop()
}

/// An inert guard.
#[inline(always)]
pub fn root_span_with_trace_id(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    trace_id: [u8; 16],
    start_time: Option<SystemTime>,
    links: impl IntoIterator<Item = SpanLink>,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    let _ = (group, name, trace_id, start_time, links, attributes);
    SpanGuard::noop()
}

/// Start attribute that marks a span as structural (the same key as with
/// `otel`; nothing reads it here).
pub const STRUCTURAL_ATTRIBUTE: &str = "lens.sampling.structural";

/// Start attribute that carries a span's sampling key (the same key as with
/// `otel`; nothing reads it here).
pub const SAMPLING_KEY_ATTRIBUTE: &str = "lens.sampling.key";

/// Always 0: with `otel` off no span is recorded, so no span needs a key
/// (callers compute keys only for spans that are recorded).
#[inline(always)]
pub fn sampling_key(run_id: &str, restart_attempt: u32, iteration: u64) -> i64 {
    let _ = (run_id, restart_attempt, iteration);
    0
}

/// Runs `body` with an inert guard.
#[inline(always)]
pub fn in_managed_span<R>(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
    body: impl FnOnce(&SpanGuard) -> R,
) -> R {
    let _ = (group, name, attributes);
    body(&SpanGuard::noop())
}

/// Runs `body` with an inert guard; an `Err` is returned unchanged.
#[inline(always)]
pub fn try_in_managed_span<T, E: fmt::Display>(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
    body: impl FnOnce(&SpanGuard) -> Result<T, E>,
) -> Result<T, E> {
    let _ = (group, name, attributes);
    body(&SpanGuard::noop())
}

/// `future` itself.
#[inline(always)]
pub fn instrument_future<F: Future>(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
    future: F,
) -> impl Future<Output = F::Output> {
    let _ = (group, name, attributes);
    future
}

/// `future` itself.
#[inline(always)]
pub fn try_instrument_future<T, E: fmt::Display, F: Future<Output = Result<T, E>>>(
    group: SpanGroup,
    name: impl Into<Cow<'static, str>>,
    attributes: impl IntoIterator<Item = KeyValue>,
    future: F,
) -> impl Future<Output = Result<T, E>> {
    let _ = (group, name, attributes);
    future
}

/// Does nothing.
#[inline(always)]
pub fn safe_set_span_attributes(
    span: &SpanGuard,
    attributes: impl IntoIterator<Item = impl Into<Option<KeyValue>>>,
    redact_keys: &[&str],
) {
    let _ = (span, attributes, redact_keys);
}

/// "No context".
#[inline(always)]
pub fn current_context() -> RemoteContext {
    RemoteContext
}

/// Writes nothing.
#[inline(always)]
pub fn inject_context(carrier: &mut impl Extend<(String, String)>) {
    let _ = carrier;
}

/// "No context".
#[inline(always)]
pub fn extract_context(carrier: &(impl EnvSource + ?Sized)) -> RemoteContext {
    let _ = carrier;
    RemoteContext
}

/// Always `None`.
#[inline(always)]
pub fn context_from_env(env: &(impl EnvSource + ?Sized)) -> Option<RemoteContext> {
    let _ = env;
    None
}

/// No bytes.
#[inline(always)]
pub fn encode_context() -> Vec<u8> {
    Vec::new()
}

/// Always `None`.
#[inline(always)]
pub fn decode_context(bytes: &[u8]) -> Option<RemoteContext> {
    let _ = bytes;
    None
}

/// An inert guard.
#[inline(always)]
pub fn create_linked_span(
    group: Option<SpanGroup>,
    name: impl Into<Cow<'static, str>>,
    remote: &RemoteContext,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    let _ = (group, name, remote, attributes);
    SpanGuard::noop()
}

/// An inert guard.
#[inline(always)]
pub fn create_linked_span_since(
    group: Option<SpanGroup>,
    name: impl Into<Cow<'static, str>>,
    remote: &RemoteContext,
    start_time: SystemTime,
    attributes: impl IntoIterator<Item = KeyValue>,
) -> SpanGuard {
    let _ = (group, name, remote, start_time, attributes);
    SpanGuard::noop()
}

/// The worker bootstrap, always disabled: a worker built without `otel`
/// stays off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerBootstrap {
    /// Whether the worker sets telemetry up: always false here.
    pub enabled: bool,
    /// The service name, when the parent chose one.
    pub service_name: Option<String>,
    /// The span-group spec, when the parent chose one.
    pub span_groups: Option<String>,
    /// The parent's `traceparent`.
    pub traceparent: Option<String>,
    /// The parent's `tracestate`.
    pub tracestate: Option<String>,
    /// The parent's `baggage`.
    pub baggage: Option<String>,
}

impl WorkerBootstrap {
    /// An inert bootstrap.
    pub fn disabled() -> WorkerBootstrap {
        WorkerBootstrap::default()
    }

    /// An inert bootstrap, whatever the arguments.
    pub fn capture(enabled: bool, service_name: Option<String>, span_groups: Option<String>) -> WorkerBootstrap {
        let _ = (enabled, service_name, span_groups);
        WorkerBootstrap::disabled()
    }

    /// `<prefix>_ENABLED=0`, as a disabled bootstrap gives with `otel`.
    pub fn to_env_vars(&self, prefix: &str) -> Vec<(String, String)> {
        vec![(format!("{prefix}_ENABLED"), "0".to_owned())]
    }

    /// An inert bootstrap, whatever the environment.
    pub fn from_env(env: &(impl EnvSource + ?Sized), prefix: &str) -> Result<WorkerBootstrap, InvalidBootstrap> {
        let _ = (env, prefix);
        Ok(WorkerBootstrap::disabled())
    }

    /// Always `None`.
    pub fn remote_context(&self) -> Option<RemoteContext> {
        None
    }
}

/// The metric handles' meter: lens-core's one definition, which creates
/// instruments that record nothing with `otel` off.
pub use lens_core::metrics::Meter;

/// Why setup refused to start. With `otel` off only bad configuration can
/// fail: the same validation runs in both modes, so a typo in a variable is
/// an error whether or not telemetry is compiled in.
#[derive(Debug)]
#[non_exhaustive]
pub enum SetupError {
    /// The configuration has problems; every one is listed.
    Config(lens_core::config::ConfigError),
    /// The rank strategy could not decide.
    Strategy(lens_core::strategies::StrategyError),
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::Config(error) => error.fmt(f),
            SetupError::Strategy(error) => error.fmt(f),
        }
    }
}

impl Error for SetupError {}

impl From<lens_core::config::ConfigError> for SetupError {
    fn from(error: lens_core::config::ConfigError) -> SetupError {
        SetupError::Config(error)
    }
}

/// What a caller can add to setup. With `otel` off the additions are
/// accepted and unused (lazy resource attributes are never evaluated).
#[derive(Debug, Default)]
pub struct SetupOptions;

impl SetupOptions {
    /// No additions.
    #[inline(always)]
    pub fn new() -> SetupOptions {
        SetupOptions
    }

    /// Accepted and unused.
    #[inline(always)]
    #[must_use]
    pub fn with_rank_strategy(
        self,
        strategy: impl Fn(&lens_core::config::LensConfig, &lens_core::identity::RankContext) -> bool + Send + Sync + 'static,
    ) -> SetupOptions {
        let _ = strategy;
        self
    }

    /// Accepted and never evaluated.
    #[inline(always)]
    #[must_use]
    pub fn with_lazy_resource(self, attributes: impl FnOnce() -> Vec<KeyValue> + Send + 'static) -> SetupOptions {
        let _ = attributes;
        self
    }

    /// Accepted and unused.
    #[inline(always)]
    #[must_use]
    pub fn with_scope(self, scope: impl Into<Cow<'static, str>>) -> SetupOptions {
        let _ = scope;
        self
    }

    /// Accepted and unused.
    #[inline(always)]
    #[must_use]
    pub fn with_env(self, env: impl EnvSource + Send + Sync + 'static) -> SetupOptions {
        let _ = env;
        self
    }
}

/// The handle of a telemetry lifetime that records and exports nothing.
#[derive(Debug)]
pub struct Telemetry {
    enabled: bool,
    rank: lens_core::identity::RankContext,
    meter: Meter,
}

impl Telemetry {
    /// A no-op meter.
    #[inline(always)]
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Whether the configuration asked for telemetry (it is compiled out).
    #[inline(always)]
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Always false.
    #[inline(always)]
    pub fn is_exporting(&self) -> bool {
        false
    }

    /// Always false.
    #[inline(always)]
    pub fn records_spans(&self) -> bool {
        false
    }

    /// Always empty.
    #[inline(always)]
    pub fn enabled_groups(&self) -> lens_core::groups::GroupSet {
        lens_core::groups::GroupSet::EMPTY
    }

    /// This process's rank context.
    #[inline(always)]
    pub fn rank(&self) -> lens_core::identity::RankContext {
        self.rank
    }

    /// Always empty.
    #[inline(always)]
    pub fn run_id(&self) -> &str {
        ""
    }

    /// Always 0.
    #[inline(always)]
    pub fn restart_attempt(&self) -> u32 {
        0
    }

    /// Always 0.
    #[inline(always)]
    pub fn lifetime_index(&self) -> u32 {
        0
    }

    /// Always `None`.
    #[inline(always)]
    pub fn incoming_context(&self) -> Option<&RemoteContext> {
        None
    }

    /// Always empty.
    #[inline(always)]
    pub fn destinations(&self) -> &[String] {
        &[]
    }

    /// An empty report.
    #[inline(always)]
    pub fn report(&self) -> crate::ShutdownReport {
        crate::ShutdownReport::default()
    }

    /// An empty report.
    #[inline(always)]
    pub fn force_flush(&self, timeout: std::time::Duration) -> crate::ShutdownReport {
        let _ = timeout;
        crate::ShutdownReport::default()
    }

    /// An empty report (`performed: false`).
    #[inline(always)]
    pub fn shutdown(&self, timeout: std::time::Duration) -> crate::ShutdownReport {
        let _ = timeout;
        crate::ShutdownReport::default()
    }
}

/// Validates `config` as the real setup does, then returns an inert handle.
pub fn setup_telemetry(
    config: &lens_core::config::LensConfig,
    rank: &lens_core::identity::RankContext,
    resource_attributes: Vec<KeyValue>,
    options: SetupOptions,
) -> Result<Telemetry, SetupError> {
    let _ = (resource_attributes, options);
    config.validate()?;
    Ok(Telemetry { enabled: config.telemetry_enabled(), rank: *rank, meter: Meter::noop() })
}

/// The metric recording of `lens-instruments`, compiled out: handles with the
/// same names and signatures that record nothing.
///
/// The values structs are lens-core's pure ones
/// (`lens_core::instrument_values`), the very types the `otel` build
/// records, so building them compiles identically in both modes. The handles
/// are zero-sized; like the real ones they are `Clone` and `Debug` but not
/// `Copy` or `Default`, so code written against one mode compiles in the
/// other. As with `otel`, inference recording is also at this module's root;
/// RL and Gym recording only in their modules.
pub mod instruments {
    pub use self::inference::{InferenceMetrics, InferenceValues, record_inference_metrics};

    /// GenAI inference metrics (`gen_ai.*`), compiled out.
    pub mod inference {
        use crate::Meter;
        pub use lens_core::instrument_values::InferenceValues;

        /// The GenAI inference instruments: none, here.
        #[derive(Clone, Debug)]
        pub struct InferenceMetrics {
            _private: (),
        }

        impl InferenceMetrics {
            /// A handle that records nothing.
            #[inline(always)]
            #[must_use]
            pub fn new(meter: &Meter) -> Self {
                let _ = meter;
                Self { _private: () }
            }

            /// A handle that records nothing.
            #[inline(always)]
            #[must_use]
            pub fn noop() -> Self {
                Self { _private: () }
            }

            /// Records nothing.
            #[inline(always)]
            pub fn record(&self, values: &InferenceValues<'_>) {
                let _ = values;
            }
        }

        /// Records nothing.
        #[inline(always)]
        pub fn record_inference_metrics(metrics: &InferenceMetrics, values: &InferenceValues<'_>) {
            let _ = (metrics, values);
        }
    }

    /// NeMo RL metrics (`rl.*`), compiled out.
    pub mod rl {
        use crate::Meter;
        pub use lens_core::instrument_values::RlValues;

        /// The `rl.*` instruments: none, here.
        #[derive(Clone, Debug)]
        pub struct RlMetrics {
            _private: (),
        }

        impl RlMetrics {
            /// A handle that records nothing.
            #[inline(always)]
            #[must_use]
            pub fn new(meter: &Meter) -> Self {
                let _ = meter;
                Self { _private: () }
            }

            /// A handle that records nothing.
            #[inline(always)]
            #[must_use]
            pub fn noop() -> Self {
                Self { _private: () }
            }

            /// Records nothing.
            #[inline(always)]
            pub fn record(&self, values: &RlValues) {
                let _ = values;
            }
        }

        /// Records nothing.
        #[inline(always)]
        pub fn record_rl_metrics(metrics: &RlMetrics, values: &RlValues) {
            let _ = (metrics, values);
        }
    }

    /// NeMo Gym server metrics (`gym.*`), compiled out.
    pub mod gym {
        use crate::Meter;
        pub use lens_core::instrument_values::GymValues;

        /// The `gym.*` instruments: none, here.
        #[derive(Clone, Debug)]
        pub struct GymMetrics {
            _private: (),
        }

        impl GymMetrics {
            /// A handle that records nothing.
            #[inline(always)]
            #[must_use]
            pub fn new(meter: &Meter) -> Self {
                let _ = meter;
                Self { _private: () }
            }

            /// A handle that records nothing.
            #[inline(always)]
            #[must_use]
            pub fn noop() -> Self {
                Self { _private: () }
            }

            /// Records nothing.
            #[inline(always)]
            pub fn record(&self, values: &GymValues) {
                let _ = values;
            }
        }

        /// Records nothing.
        #[inline(always)]
        pub fn record_gym_metrics(metrics: &GymMetrics, values: &GymValues) {
            let _ = (metrics, values);
        }
    }
}
