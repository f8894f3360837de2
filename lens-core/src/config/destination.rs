//! Where telemetry goes when nothing says (SPEC A22, amending A8): the one
//! place that decides.
//!
//! A configuration *selects a destination* when any of these is set:
//! `<PREFIX>_EXPORTER` (or the fallback prefix's), `OTEL_TRACES_EXPORTER`,
//! `OTEL_METRICS_EXPORTER`, `OTEL_LOGS_EXPORTER`, or any
//! `OTEL_EXPORTER_OTLP_*` variable lens reads (endpoint, protocol, headers,
//! timeout, compression, certificate; general or per signal), or when code
//! set the same fields. Then the configuration is followed as it stands.
//!
//! When nothing selects one, the OTLP default (`localhost:4317`, gRPC) is
//! kept if a collector answers there at setup: a TCP connect to
//! [`DEFAULT_COLLECTOR`] bounded by [`COLLECTOR_PROBE_TIMEOUT`] per address
//! (at most [`COLLECTOR_PROBE_TIMEOUT`] × 2 in all, for `localhost`'s IPv4
//! and IPv6 addresses), made only on ranks that export. Otherwise every
//! signal goes to OTLP/JSON files under the file directory
//! (`<PREFIX>_FILE_DIR`, default `telemetry/<run_id>/`), as the `file`
//! exporter writes them.
//!
//! [`default_destination`] is pure (the probe is passed in), so the rule is
//! tested without a network; [`collector_answers`] is the probe setup uses.
//!
//! ```
//! use lens_core::config::{DefaultDestination, LensConfig, default_destination};
//! use lens_core::groups::LENS_CATALOG;
//!
//! let quiet = LensConfig::from_env(&[("MYJOB_OTEL_ENABLED", "1")], "MYJOB_OTEL", None, &LENS_CATALOG)?;
//! assert!(!quiet.destination_selected());
//! assert_eq!(default_destination(&quiet, || false), DefaultDestination::Files);
//! assert_eq!(default_destination(&quiet, || true), DefaultDestination::Collector);
//!
//! let env = [("MYJOB_OTEL_ENABLED", "1"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")];
//! let chosen = LensConfig::from_env(&env, "MYJOB_OTEL", None, &LENS_CATALOG)?;
//! assert_eq!(default_destination(&chosen, || unreachable!("no probe")), DefaultDestination::Selected);
//! # Ok::<(), lens_core::config::ConfigError>(())
//! ```

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::model::LensConfig;
use super::standard::{OtlpSettings, Signal};

/// The address probed for a collector when nothing selects a destination:
/// the OTLP gRPC default, as OpenTelemetry documents it and node-local
/// collectors rely on.
pub const DEFAULT_COLLECTOR: &str = "localhost:4317";

/// How long the probe waits for one address of [`DEFAULT_COLLECTOR`] to
/// accept a connection.
pub const COLLECTOR_PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// The most addresses of [`DEFAULT_COLLECTOR`] the probe tries.
const PROBED_ADDRESSES: usize = 2;

/// Where telemetry goes, by the default-destination rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultDestination {
    /// The configuration selects its destination: follow it.
    Selected,
    /// Nothing selected, and a collector answered at [`DEFAULT_COLLECTOR`]:
    /// OTLP there.
    Collector,
    /// Nothing selected and no collector: OTLP/JSON files under the file
    /// directory.
    Files,
}

impl LensConfig {
    /// Whether the configuration selects where telemetry goes: any of
    /// `<PREFIX>_EXPORTER` (or the fallback prefix's), `OTEL_TRACES_EXPORTER`,
    /// `OTEL_METRICS_EXPORTER`, `OTEL_LOGS_EXPORTER` or an
    /// `OTEL_EXPORTER_OTLP_*` variable, or the same fields set in code. False
    /// means [`default_destination`] applies its rule.
    pub fn destination_selected(&self) -> bool {
        self.exporter_configured()
            || self.origins.fields.keys().any(|field| field.starts_with("otel.otlp_"))
            || Signal::ALL.iter().any(|signal| *self.otel.otlp(*signal) != OtlpSettings::default())
    }
}

/// The default-destination rule: [`DefaultDestination::Selected`] when
/// `config` selects a destination, else [`DefaultDestination::Collector`]
/// when `collector_answers()` (called only then), else
/// [`DefaultDestination::Files`].
pub fn default_destination(config: &LensConfig, collector_answers: impl FnOnce() -> bool) -> DefaultDestination {
    if config.destination_selected() {
        DefaultDestination::Selected
    } else if collector_answers() {
        DefaultDestination::Collector
    } else {
        DefaultDestination::Files
    }
}

/// Whether something accepts a TCP connection at `address` (`host:port`)
/// within `timeout` per resolved address (at most two are tried). Never an
/// error: an address that does not resolve is "no".
///
/// ```
/// use std::time::Duration;
/// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// let address = listener.local_addr().unwrap().to_string();
/// assert!(lens_core::config::collector_answers(&address, Duration::from_millis(200)));
/// drop(listener);
/// ```
pub fn collector_answers(address: &str, timeout: Duration) -> bool {
    let Ok(addresses) = address.to_socket_addrs() else { return false };
    addresses.take(PROBED_ADDRESSES).any(|socket| TcpStream::connect_timeout(&socket, timeout).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::LENS_CATALOG;
    use proptest::prelude::*;

    /// Every variable that selects a destination, with a valid value.
    const SELECTING: &[(&str, &str)] = &[
        ("MYJOB_OTEL_EXPORTER", "otlp"),
        ("NEMO_LENS_EXPORTER", "file"),
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_METRICS_EXPORTER", "none"),
        ("OTEL_LOGS_EXPORTER", "console"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4317"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4317"),
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:4317"),
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://c:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "a=b"),
        ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "a=b"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
        ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "1000"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
        ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/ca.pem"),
    ];

    /// Variables that select nothing about the destination.
    const NEUTRAL: &[(&str, &str)] = &[
        ("MYJOB_OTEL_ENABLED", "1"),
        ("MYJOB_OTEL_FILE_DIR", "/scratch/t"),
        ("MYJOB_OTEL_SPAN_GROUPS", "all"),
        ("OTEL_SERVICE_NAME", "job"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
        ("OTEL_TRACES_SAMPLER", "always_on"),
        ("OTEL_EXPORTER_PROMETHEUS_PORT", "9999"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "100000"),
    ];

    fn config(env: &[(&str, &str)]) -> LensConfig {
        LensConfig::from_env(env, "MYJOB_OTEL", Some("NEMO_LENS"), &LENS_CATALOG).unwrap()
    }

    #[test]
    fn nothing_set_is_the_default_rule_and_the_probe_decides() {
        let quiet = config(&[("MYJOB_OTEL_ENABLED", "1")]);
        assert_eq!(default_destination(&quiet, || false), DefaultDestination::Files);
        assert_eq!(default_destination(&quiet, || true), DefaultDestination::Collector);
        assert_eq!(default_destination(&LensConfig::default(), || false), DefaultDestination::Files);
    }

    #[test]
    fn each_selecting_variable_alone_selects_and_skips_the_probe() {
        for pair in SELECTING {
            let c = config(&[("MYJOB_OTEL_ENABLED", "1"), *pair]);
            assert!(c.destination_selected(), "{pair:?}");
            assert_eq!(
                default_destination(&c, || panic!("probed although {pair:?} is set")),
                DefaultDestination::Selected
            );
        }
    }

    #[test]
    fn the_file_cap_is_validated_under_its_variable_or_field() {
        let error = LensConfig::from_env(&[("MYJOB_OTEL_FILE_MAX_BYTES", "0")], "MYJOB_OTEL", None, &LENS_CATALOG)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("MYJOB_OTEL_FILE_MAX_BYTES") && error.contains("bytes from 1 to 18446744073709551615"),
            "{error}"
        );
        let error = LensConfig::from_env(
            &[("NEMO_LENS_FILE_MAX_BYTES", "1GiB")],
            "MYJOB_OTEL",
            Some("NEMO_LENS"),
            &LENS_CATALOG,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("NEMO_LENS_FILE_MAX_BYTES") && error.contains("1GiB"), "{error}");
        assert_eq!(config(&[("MYJOB_OTEL_FILE_MAX_BYTES", "1_000")]).file_max_bytes, 1000);
        assert_eq!(LensConfig::default().file_max_bytes, crate::config::DEFAULT_FILE_MAX_BYTES);
        let in_code = LensConfig { file_max_bytes: 0, ..LensConfig::default() };
        assert!(in_code.validate().unwrap_err().to_string().contains("LensConfig.file_max_bytes"));
    }

    #[test]
    fn an_endpoint_set_in_code_selects() {
        let mut c = LensConfig::default();
        c.otel.otlp_mut(Signal::Metrics).endpoint =
            Some(crate::config::OtlpEndpoint { url: "http://c:4317".into(), signal_specific: true });
        assert!(c.destination_selected());
    }

    #[test]
    fn the_probe_sees_a_listener_and_not_a_closed_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        assert!(collector_answers(&address, COLLECTOR_PROBE_TIMEOUT));
        drop(listener);
        let started = std::time::Instant::now();
        assert!(!collector_answers(&address, COLLECTOR_PROBE_TIMEOUT));
        assert!(started.elapsed() < COLLECTOR_PROBE_TIMEOUT * 3, "{:?}", started.elapsed());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any mix of neutral variables keeps the default rule; adding any
        /// selecting variable selects.
        #[test]
        fn selected_exactly_when_a_selecting_variable_is_set(
            neutral in proptest::sample::subsequence(NEUTRAL.to_vec(), 0..=NEUTRAL.len()),
            selecting in proptest::sample::subsequence(SELECTING.to_vec(), 0..=3),
        ) {
            let mut env = neutral.clone();
            env.extend(selecting.iter().copied());
            prop_assert_eq!(config(&env).destination_selected(), !selecting.is_empty());
        }
    }
}
