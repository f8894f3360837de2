//! [`WorkerBootstrap`]: the telemetry settings and trace context a spawned
//! thread or process needs, as plain strings.

use super::context::{RemoteContext, current_context};
use super::w3c::{BAGGAGE, BAGGAGE_ENV, TRACEPARENT, TRACEPARENT_ENV, TRACESTATE, TRACESTATE_ENV, extract_fields};
pub use crate::bootstrap::InvalidBootstrap;
use crate::config::parse_bool;
use crate::env::EnvSource;

/// The telemetry settings and trace context that a spawned thread or process
/// needs, as plain strings, so that a worker (Megatron's async-checkpoint
/// process) follows an environment-enabled run and joins its trace.
///
/// The parent builds it with [`WorkerBootstrap::capture`] and passes
/// [`to_env_vars`](WorkerBootstrap::to_env_vars) to the child's environment
/// (or its fields through any channel: every field is a plain string); the
/// child reads it back with [`from_env`](WorkerBootstrap::from_env). The
/// variables are the ones the child's own configuration reads
/// (`<PREFIX>_ENABLED`, `OTEL_SERVICE_NAME`, `<PREFIX>_SPAN_GROUPS`) and the
/// environment carrier (`TRACEPARENT`, `TRACESTATE`, `BAGGAGE`), so a child that sets up telemetry from
/// its environment needs nothing else. A disabled bootstrap is inert: it
/// carries no context and tells the child to stay off. Without `otel` every
/// bootstrap is disabled (captured or read back), so a worker of a build
/// without telemetry stays off.
///
/// ```
/// use lens_fallbacks::propagation::WorkerBootstrap;
///
/// # if cfg!(feature = "otel") {
/// let bootstrap = WorkerBootstrap::capture(true, Some("megatron-lm".into()), Some("default".into()));
/// let vars = bootstrap.to_env_vars("MEGATRON_OTEL");
/// assert!(vars.contains(&("MEGATRON_OTEL_ENABLED".to_string(), "1".to_string())));
///
/// let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
/// let child = WorkerBootstrap::from_env(env.as_slice(), "MEGATRON_OTEL").unwrap();
/// assert_eq!(child, bootstrap);
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerBootstrap {
    /// Whether the worker sets telemetry up.
    pub enabled: bool,
    /// The service name, when the parent chose one.
    pub service_name: Option<String>,
    /// The span-group spec, when the parent chose one.
    pub span_groups: Option<String>,
    /// The parent's `traceparent`, when a span was current.
    pub traceparent: Option<String>,
    /// The parent's `tracestate`, when not empty.
    pub tracestate: Option<String>,
    /// The parent's `baggage`, when not empty.
    pub baggage: Option<String>,
}

impl WorkerBootstrap {
    /// An inert bootstrap: the worker stays off.
    pub fn disabled() -> WorkerBootstrap {
        WorkerBootstrap::default()
    }

    /// A bootstrap with these settings and, when `enabled`, the current
    /// context.
    pub fn capture(enabled: bool, service_name: Option<String>, span_groups: Option<String>) -> WorkerBootstrap {
        if !enabled || cfg!(not(feature = "otel")) {
            return WorkerBootstrap::disabled();
        }
        let mut carrier = current_context().to_carrier();
        WorkerBootstrap {
            enabled,
            service_name,
            span_groups,
            traceparent: carrier.remove(TRACEPARENT),
            tracestate: carrier.remove(TRACESTATE).filter(|v| !v.is_empty()),
            baggage: carrier.remove(BAGGAGE).filter(|v| !v.is_empty()),
        }
    }

    /// The variables to set in the worker's environment, for configuration
    /// read with `prefix` (such as `MEGATRON_OTEL`). A disabled bootstrap
    /// gives only `<prefix>_ENABLED=0`.
    pub fn to_env_vars(&self, prefix: &str) -> Vec<(String, String)> {
        let enabled = format!("{prefix}_ENABLED");
        if !self.enabled {
            return vec![(enabled, "0".to_owned())];
        }
        let mut vars = vec![(enabled, "1".to_owned())];
        let optional = [
            ("OTEL_SERVICE_NAME".to_owned(), &self.service_name),
            (format!("{prefix}_SPAN_GROUPS"), &self.span_groups),
            (TRACEPARENT_ENV.to_owned(), &self.traceparent),
            (TRACESTATE_ENV.to_owned(), &self.tracestate),
            (BAGGAGE_ENV.to_owned(), &self.baggage),
        ];
        vars.extend(optional.into_iter().filter_map(|(key, value)| value.clone().map(|value| (key, value))));
        vars
    }

    /// Reads a bootstrap from the worker's environment (see
    /// [`to_env_vars`](WorkerBootstrap::to_env_vars)). An unset
    /// `<prefix>_ENABLED` means disabled; the context is kept only when
    /// enabled.
    pub fn from_env(env: &(impl EnvSource + ?Sized), prefix: &str) -> Result<WorkerBootstrap, InvalidBootstrap> {
        if cfg!(not(feature = "otel")) {
            return Ok(WorkerBootstrap::disabled());
        }
        let variable = format!("{prefix}_ENABLED");
        let enabled = match env.non_empty(&variable) {
            None => false,
            Some(value) => match parse_bool(&value) {
                Some(enabled) => enabled,
                None => return Err(InvalidBootstrap { variable, value }),
            },
        };
        if !enabled {
            return Ok(WorkerBootstrap::disabled());
        }
        Ok(WorkerBootstrap {
            enabled,
            service_name: env.non_empty("OTEL_SERVICE_NAME"),
            span_groups: env.non_empty(&format!("{prefix}_SPAN_GROUPS")),
            traceparent: env.non_empty(TRACEPARENT_ENV),
            tracestate: env.non_empty(TRACESTATE_ENV),
            baggage: env.non_empty(BAGGAGE_ENV),
        })
    }

    /// The parent's context, when it is carried and valid.
    pub fn remote_context(&self) -> Option<RemoteContext> {
        if !self.enabled {
            return None;
        }
        let remote = extract_fields(|field| match field {
            TRACEPARENT => self.traceparent.clone(),
            TRACESTATE => self.tracestate.clone(),
            _ => self.baggage.clone(),
        });
        remote.is_valid().then_some(remote)
    }
}
