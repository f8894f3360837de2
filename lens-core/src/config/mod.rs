//! The configuration model: one [`LensConfig`] per process, read from the
//! environment, overridden from the command line, validated as a whole.
//!
//! Precedence: command-line flag ([`CliOverrides`]) > the primary
//! prefix (`MEGATRON_OTEL_*`) > the fallback prefix (`NEMO_LENS_*`) > the
//! default. An empty value counts as unset. Within one prefix a canonical
//! name and its Lens v0.2.0 alias are read together, and a disagreement is an
//! error naming both: `*_EXPORT_STRATEGY` means `*_RANK_STRATEGY`,
//! `*_SAMPLER_ENABLED=1` means `*_SAMPLING_STRATEGY=rank_aware`.
//!
//! The standard `OTEL_*` variables are part of the model ([`OtelSettings`]),
//! typed, because lens sets every SDK option itself (the SDK reads no
//! environment on its own).
//!
//! Reading and [`LensConfig::validate`] collect every problem and report them
//! together in a [`ConfigError`], each naming the variable that was actually
//! read, the value and what is accepted, before anything is installed. Header values of
//! `OTEL_EXPORTER_OTLP_HEADERS` never appear in `Debug`, `Display` or errors.
//!
//! ```
//! use lens_core::config::{ConfigLoader, LensConfig};
//! use lens_core::groups::LENS_CATALOG;
//!
//! let env = [
//!     ("MEGATRON_OTEL_ENABLED", "1"),
//!     ("NEMO_LENS_EXPORTER", "console"),
//!     ("MEGATRON_OTEL_EXPORT_STRATEGY", "all_ranks"), // the Lens alias
//! ];
//! let config = ConfigLoader::new("MEGATRON_OTEL")
//!     .fallback_prefix("NEMO_LENS")
//!     .default_service_name("megatron-lm")
//!     .load(&env)
//!     .unwrap();
//! assert!(config.enabled);
//! assert_eq!(config.rank_strategy, "all_ranks");
//! assert_eq!(config.service_name, "megatron-lm");
//! assert_eq!(config.variable_for("rank_strategy"), Some("MEGATRON_OTEL_EXPORT_STRATEGY"));
//!
//! let err = LensConfig::from_env(&[("NEMO_LENS_ENABLED", "maybe")], "NEMO_LENS", None, &LENS_CATALOG)
//!     .unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "Invalid boolean for NEMO_LENS_ENABLED: 'maybe'. Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'."
//! );
//! ```

mod destination;
mod display;
mod error;
mod headers;
mod keys;
mod load;
mod model;
pub(crate) mod pyrepr;
mod read;
mod standard;
mod transport;
mod validate;

pub use destination::{
    COLLECTOR_PROBE_TIMEOUT, DEFAULT_COLLECTOR, DefaultDestination, collector_answers, default_destination,
};
pub use error::{ConfigError, ConfigProblem};
pub use headers::{HeaderError, Headers};
pub use load::ConfigLoader;
pub use model::{
    CliOverrides, DEFAULT_FILE_MAX_BYTES, DEFAULT_PREFIX, DEFAULT_PROMETHEUS_RESOURCE_LABELS, DEFAULT_SERVICE_NAME,
    DEFAULT_SPOOL_SIZE_KIB, HangTimeout, LensConfig, MAX_SPOOL_SIZE_KIB, MIN_SPOOL_SIZE_KIB, Origins, parse_bool,
};
// --- control file (issue 23) ---
pub use model::{CONTROL_POLL_EXPECTED, DEFAULT_CONTROL_POLL, parse_control_poll};
// --- end control file ---
pub use standard::{
    BatchSettings, Compression, ExporterKind, OtelSettings, OtlpEndpoint, OtlpProtocol, OtlpSettings, Propagator,
    Signal, TracesSampler, redact_endpoint,
};
pub use transport::{
    FEATURE_OTLP_GRPC, FEATURE_OTLP_HTTP, FEATURE_PROMETHEUS, MissingTransport, Transports, default_destination_in,
};
pub use validate::{MAX_CERTIFICATE_BYTES, read_certificate_file};
