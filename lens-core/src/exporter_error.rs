//! [`ExporterError`]: what can be wrong with an exporter's settings or
//! resources at setup. A leaf module: the exporters and setup both name it.

/// A setup error of an exporter. Its `Display` names the variable to fix and
/// what is accepted; it never contains a header value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExporterError {
    /// The OTLP endpoint is not an `http://` or `https://` URL.
    #[error(
        "{variable}={value:?} is not a valid OTLP endpoint ({reason}); expected an http:// or https:// URL such as http://localhost:4317 (gRPC) or http://localhost:4318 (HTTP)"
    )]
    InvalidEndpoint {
        /// The variable the endpoint came from.
        variable: &'static str,
        /// The endpoint.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A header name or value cannot be sent. Only the name is reported.
    #[error(
        "OTEL_EXPORTER_OTLP_HEADERS: the header {name:?} cannot be sent ({reason}); expected comma-separated key=value pairs of visible ASCII characters"
    )]
    InvalidHeader {
        /// The header name (never its value).
        name: String,
        /// What is wrong: with the name or with the value.
        reason: &'static str,
    },
    /// The private CA file cannot be read or holds no PEM certificate.
    #[error(
        "OTEL_EXPORTER_OTLP_CERTIFICATE={path}: {reason}; expected a readable PEM file with the certificate of the CA that signed the collector's certificate"
    )]
    Certificate {
        /// The file named by the variable.
        path: std::path::PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The OTLP exporter could not be built.
    #[error("cannot build the OTLP {signal} exporter for {endpoint}: {reason}")]
    Build {
        /// The signal.
        signal: crate::config::Signal,
        /// The resolved endpoint.
        endpoint: String,
        /// The reason given by the transport.
        reason: String,
    },
    /// The private runtime of the gRPC exporters could not start.
    #[error("cannot start the lens-otlp runtime thread for the gRPC exporter: {reason}")]
    Runtime {
        /// The reason.
        reason: String,
    },
    /// A telemetry file cannot be created or opened.
    #[error("{variable}: cannot open {path} for appending: {source}; choose a writable directory with {variable}")]
    File {
        /// What chose the directory: the variable setup reads it from
        /// (`MYJOB_OTEL_FILE_DIR`, `NEMO_LENS_FILE_DIR`, ...), or "the file
        /// exporter's directory" when a file exporter is created directly.
        variable: String,
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The exporter's transport is not in this build (a cargo feature of
    /// lens-fallbacks is off).
    #[error("{0}")]
    MissingTransport(#[from] crate::config::MissingTransport),
    /// The Prometheus host does not resolve to an address.
    #[error(
        "OTEL_EXPORTER_PROMETHEUS_HOST={host:?} does not resolve to an address to listen on ({reason}); expected a host name or IP address such as localhost or 0.0.0.0"
    )]
    PrometheusHost {
        /// The host.
        host: String,
        /// The resolver's reason.
        reason: String,
    },
    /// The Prometheus port cannot be bound.
    #[error("{variable}: cannot serve Prometheus metrics on {address}: {source}; {remedy}")]
    PrometheusBind {
        /// The variable to change: `OTEL_EXPORTER_PROMETHEUS_HOST` for an
        /// address of no interface of this host, else
        /// `OTEL_EXPORTER_PROMETHEUS_PORT`.
        variable: &'static str,
        /// What to set it to.
        remedy: &'static str,
        /// The address that could not be bound.
        address: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
