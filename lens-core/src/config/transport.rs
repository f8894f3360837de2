//! Which transports a build has, and the configuration that selects one it
//! lacks (issue 21 item 3, SPEC A8/A22).
//!
//! The runtime's transports sit behind cargo features of the facade
//! (`lens-fallbacks`): OTLP over gRPC (`otlp-grpc`), OTLP over HTTP
//! (`otlp-http`) and the Prometheus pull endpoint (`prometheus`); the file
//! and console exporters are always there. A configuration that selects a
//! transport the build lacks is a setup error naming the variable, its value
//! and the feature to enable ([`MissingTransport`]), found before anything
//! is installed or exported. When nothing selects a destination, the
//! default rule never picks OTLP in a build without gRPC: it writes files,
//! without probing ([`default_destination_in`]).
//!
//! Pure: the build's transports are passed in ([`Transports`]); the facade
//! passes its own (`lens_fallbacks::setup::TRANSPORTS`).
//!
//! ```
//! use lens_core::config::{LensConfig, Transports};
//! use lens_core::groups::LENS_CATALOG;
//!
//! let env = [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_EXPORTER", "otlp")];
//! let config = LensConfig::from_env(&env, "MYJOB_OTEL", None, &LENS_CATALOG)?;
//! let missing = config.missing_transport(Transports::FILES_ONLY).unwrap();
//! assert_eq!((missing.variable.as_str(), missing.value.as_str(), missing.feature), ("MYJOB_OTEL_EXPORTER", "otlp", "otlp-grpc"));
//! assert!(config.missing_transport(Transports::ALL).is_none());
//! # Ok::<(), lens_core::config::ConfigError>(())
//! ```

use std::fmt;

use super::destination::{DefaultDestination, default_destination};
use super::model::LensConfig;
use super::standard::{ExporterKind, OtlpProtocol, Signal, redact_endpoint};

/// The cargo feature of lens-fallbacks that brings OTLP over gRPC.
pub const FEATURE_OTLP_GRPC: &str = "otlp-grpc";
/// The cargo feature of lens-fallbacks that brings OTLP over HTTP.
pub const FEATURE_OTLP_HTTP: &str = "otlp-http";
/// The cargo feature of lens-fallbacks that brings the Prometheus endpoint.
pub const FEATURE_PROMETHEUS: &str = "prometheus";

/// The transports a build has, beyond the file and console exporters that
/// every build with `otel` has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transports {
    /// OTLP over gRPC (`grpc`).
    pub otlp_grpc: bool,
    /// OTLP over HTTP (`http/protobuf`, `http/json`).
    pub otlp_http: bool,
    /// The Prometheus pull endpoint (`OTEL_METRICS_EXPORTER=prometheus`).
    pub prometheus: bool,
}

impl Transports {
    /// Every transport.
    pub const ALL: Transports = Transports { otlp_grpc: true, otlp_http: true, prometheus: true };
    /// Files and console only.
    pub const FILES_ONLY: Transports = Transports { otlp_grpc: false, otlp_http: false, prometheus: false };

    /// Whether OTLP over `protocol` is in the build, and the feature that
    /// brings it.
    pub fn otlp(self, protocol: OtlpProtocol) -> (bool, &'static str) {
        match protocol {
            OtlpProtocol::Grpc => (self.otlp_grpc, FEATURE_OTLP_GRPC),
            OtlpProtocol::HttpProtobuf | OtlpProtocol::HttpJson => (self.otlp_http, FEATURE_OTLP_HTTP),
        }
    }
}

/// A configuration selects a transport this build lacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct MissingTransport {
    /// The variable that selects it (or `LensConfig.<field>` when code did).
    pub variable: String,
    /// Its value.
    pub value: String,
    /// What it selects, in words (`OTLP over gRPC for traces`).
    pub selects: String,
    /// The cargo feature of lens-fallbacks to enable.
    pub feature: &'static str,
}

impl fmt::Display for MissingTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={} selects {}, which this program was built without: enable the cargo feature `{}` of lens-fallbacks \
             (\"lens-fallbacks/{}\" in your application's `otel` feature, or features = [\"{}\"] on its \
             lens-fallbacks line), or choose an exporter this build has (file, console)",
            self.variable, self.value, self.selects, self.feature, self.feature, self.feature
        )
    }
}

impl LensConfig {
    /// The first transport this configuration selects that `available` lacks,
    /// for the signals it enables; `None` when the build has everything it
    /// selects, and when nothing selects a destination (then the default
    /// rule, [`default_destination_in`], decides and never needs a missing
    /// transport).
    pub fn missing_transport(&self, available: Transports) -> Option<MissingTransport> {
        self.missing_transport_except(available, &[])
    }

    /// [`missing_transport`](Self::missing_transport) for the signals
    /// whose exporter the configuration builds: not those in `given`, whose
    /// exporter the program gives in code.
    pub fn missing_transport_except(&self, available: Transports, given: &[Signal]) -> Option<MissingTransport> {
        if !self.destination_selected() {
            return None;
        }
        let enabled = [
            (Signal::Traces, self.traces_enabled),
            (Signal::Metrics, self.metrics_enabled),
            (Signal::Logs, self.logs_enabled),
        ];
        enabled
            .into_iter()
            .filter(|(signal, on)| *on && !given.contains(signal))
            .find_map(|(signal, _)| self.signal_missing(signal, available))
    }

    fn signal_missing(&self, signal: Signal, available: Transports) -> Option<MissingTransport> {
        let name = signal.as_str();
        let exporter_field = match signal {
            Signal::Traces => "otel.traces_exporter",
            Signal::Metrics => "otel.metrics_exporter",
            Signal::Logs => "otel.logs_exporter",
        };
        let exporter_field = if self.otel.exporter_override(signal).is_some() { exporter_field } else { "exporter" };
        match self.exporter_for(signal) {
            ExporterKind::Prometheus if !available.prometheus => {
                let (variable, value) = self.origin_of(exporter_field, "prometheus");
                Some(MissingTransport {
                    variable,
                    value,
                    selects: "the Prometheus endpoint for metrics".to_string(),
                    feature: FEATURE_PROMETHEUS,
                })
            }
            ExporterKind::Otlp => {
                let protocol = self.otel.otlp(signal).protocol;
                let (present, feature) = available.otlp(protocol);
                if present {
                    return None;
                }
                let protocol_field = format!("otel.otlp_{name}.protocol");
                // The protocol's variable when one chose it, else the
                // exporter's, else whichever OTLP variable selected OTLP.
                let (variable, value) = if self.origins.fields.contains_key(protocol_field.as_str()) {
                    self.origin_of(&protocol_field, protocol.as_str())
                } else if self.origins.fields.contains_key(exporter_field) {
                    self.origin_of(exporter_field, "otlp")
                } else {
                    let prefix = format!("otel.otlp_{name}.");
                    self.origins
                        .fields
                        .iter()
                        .filter(|(field, _)| field.starts_with(&prefix))
                        .map(|(field, (variable, value))| (variable.clone(), shown(field, value)))
                        .min()
                        .unwrap_or_else(|| (format!("LensConfig.otel.otlp_{name}"), protocol.as_str().to_string()))
                };
                let transport = if protocol == OtlpProtocol::Grpc { "gRPC" } else { "HTTP" };
                Some(MissingTransport {
                    variable,
                    value,
                    selects: format!("OTLP over {transport} ({}) for {name}", protocol.as_str()),
                    feature,
                })
            }
            _ => None,
        }
    }

    /// The variable that set `field` and the value it gave, else
    /// `LensConfig.<field>` and `current`.
    fn origin_of(&self, field: &str, current: &str) -> (String, String) {
        match self.origins.fields.get(field) {
            Some((variable, value)) => (variable.clone(), shown(field, value)),
            None => (format!("LensConfig.{field}"), current.to_string()),
        }
    }
}

/// `value`, as set for `field`, the way a message may quote it: an
/// endpoint without its credentials ([`redact_endpoint`]).
fn shown(field: &str, value: &str) -> String {
    if field.ends_with(".endpoint") { redact_endpoint(value) } else { value.to_string() }
}

/// [`default_destination`] in a build with `available` transports: the OTLP
/// default (`localhost:4317`, gRPC) is considered only when the build has
/// gRPC; without it, nothing selected means files, and nothing is probed.
pub fn default_destination_in(
    config: &LensConfig,
    available: Transports,
    collector_answers: impl FnOnce() -> bool,
) -> DefaultDestination {
    default_destination(config, || available.otlp_grpc && collector_answers())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::LENS_CATALOG;

    fn config(env: &[(&str, &str)]) -> LensConfig {
        LensConfig::from_env(env, "MYJOB_OTEL", Some("NEMO_LENS"), &LENS_CATALOG).unwrap()
    }

    fn missing(env: &[(&str, &str)], available: Transports) -> Option<(String, String, &'static str)> {
        config(env).missing_transport(available).map(|m| (m.variable, m.value, m.feature))
    }

    fn owned(variable: &str, value: &str, feature: &'static str) -> Option<(String, String, &'static str)> {
        Some((variable.to_string(), value.to_string(), feature))
    }

    #[test]
    fn otlp_selected_without_grpc_names_the_exporter_variable_and_the_feature() {
        let env = [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_EXPORTER", "otlp")];
        assert_eq!(missing(&env, Transports::FILES_ONLY), owned("MYJOB_OTEL_EXPORTER", "otlp", "otlp-grpc"));
        let http_only = Transports { otlp_http: true, ..Transports::FILES_ONLY };
        assert_eq!(missing(&env, http_only), owned("MYJOB_OTEL_EXPORTER", "otlp", "otlp-grpc"));
        assert_eq!(missing(&env, Transports { otlp_grpc: true, ..Transports::FILES_ONLY }), None);
    }

    #[test]
    fn a_protocol_names_its_own_variable() {
        let env = [("MYJOB_OTEL_ENABLED", "1"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
        let found = missing(&env, Transports::FILES_ONLY);
        assert_eq!(found, owned("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "otlp-grpc"));
        let env = [("MYJOB_OTEL_ENABLED", "1"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")];
        let grpc_only = Transports { otlp_grpc: true, ..Transports::FILES_ONLY };
        assert_eq!(missing(&env, grpc_only), owned("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "otlp-http"));
        let env = [("MYJOB_OTEL_ENABLED", "1"), ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")];
        let found = missing(&env, grpc_only);
        assert_eq!(found, owned("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "otlp-http"));
    }

    #[test]
    fn an_endpoint_alone_selects_grpc_otlp() {
        let env = [("MYJOB_OTEL_ENABLED", "1"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")];
        let found = missing(&env, Transports::FILES_ONLY).unwrap();
        assert_eq!((found.1.as_str(), found.2), ("http://collector:4317", "otlp-grpc"));
        assert!(found.0.starts_with("OTEL_EXPORTER_OTLP_"), "{found:?}");
        // Its credentials are not quoted.
        let env =
            [("MYJOB_OTEL_ENABLED", "1"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317/?token=sk-LEAK")];
        let missing = config(&env).missing_transport(Transports::FILES_ONLY).unwrap();
        assert_eq!(missing.value, "http://collector:4317/?token=[REDACTED]");
        assert!(!missing.to_string().contains("sk-LEAK"), "{missing}");
    }

    #[test]
    fn prometheus_without_the_feature_names_the_metrics_variable() {
        let env =
            [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_EXPORTER", "file"), ("OTEL_METRICS_EXPORTER", "prometheus")];
        assert_eq!(missing(&env, Transports::FILES_ONLY), owned("OTEL_METRICS_EXPORTER", "prometheus", "prometheus"));
        assert_eq!(missing(&env, Transports { prometheus: true, ..Transports::FILES_ONLY }), None);
        // Metrics off: prometheus is never built, so it is not missing.
        let env = [
            ("MYJOB_OTEL_ENABLED", "1"),
            ("MYJOB_OTEL_EXPORTER", "file"),
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("MYJOB_OTEL_METRICS_ENABLED", "0"),
        ];
        assert_eq!(missing(&env, Transports::FILES_ONLY), None);
    }

    #[test]
    fn files_console_and_none_need_no_transport() {
        for exporter in ["file", "console"] {
            let env =
                [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_EXPORTER", exporter), ("OTEL_TRACES_EXPORTER", "none")];
            assert_eq!(missing(&env, Transports::FILES_ONLY), None, "{exporter}");
        }
    }

    #[test]
    fn the_message_names_the_variable_the_value_and_the_feature() {
        let env = [("MYJOB_OTEL_ENABLED", "1"), ("MYJOB_OTEL_EXPORTER", "otlp")];
        let message = config(&env).missing_transport(Transports::FILES_ONLY).unwrap().to_string();
        assert!(message.starts_with("MYJOB_OTEL_EXPORTER=otlp selects OTLP over gRPC (grpc) for traces"), "{message}");
        assert!(message.contains("`otlp-grpc` of lens-fallbacks"), "{message}");
    }

    #[test]
    fn without_grpc_the_default_rule_writes_files_and_never_probes() {
        let quiet = config(&[("MYJOB_OTEL_ENABLED", "1")]);
        let probed = std::cell::Cell::new(false);
        let probe = || {
            probed.set(true);
            true
        };
        assert_eq!(default_destination_in(&quiet, Transports::FILES_ONLY, probe), DefaultDestination::Files);
        assert!(!probed.get());
        assert_eq!(default_destination_in(&quiet, Transports::ALL, || true), DefaultDestination::Collector);
        assert_eq!(default_destination_in(&quiet, Transports::ALL, || false), DefaultDestination::Files);
        // Nothing selected: nothing is missing, whatever the build.
        assert_eq!(quiet.missing_transport(Transports::FILES_ONLY), None);
    }
}
