//! [`LensConfig::validate`]: every semantic check on a whole configuration,
//! all problems reported at once.

use std::time::Duration;

use super::error::{ConfigError, ConfigProblem};
use super::keys::otlp_fields;
use super::model::LensConfig;
use super::pyrepr::py_float;
use super::read::unknown_name;
use super::standard::{self, ExporterKind, Signal};

/// What a PEM certificate begins with.
const CERTIFICATE_MARK: &[u8] = b"-----BEGIN CERTIFICATE-----";

/// The most a private CA file (`OTEL_EXPORTER_OTLP_CERTIFICATE`) may
/// hold: 4 MiB. A CA bundle, even the whole public web's, is well under
/// 1 MiB; the cap keeps a wrong path (`/dev/zero`, a data file) from
/// filling the job's memory.
pub const MAX_CERTIFICATE_BYTES: u64 = 4 * 1024 * 1024;

/// Reads the private CA file at `path` for the configuration's check and
/// for the exporter that uses it, or says why not (the reason alone, in
/// words, for the caller's message).
///
/// Only a regular file of at most [`MAX_CERTIFICATE_BYTES`] is read
/// ([`read_bounded`](crate::control::read_bounded)), so that neither a
/// device, a FIFO nor a file growing while read can hang the job or fill
/// its memory. A symbolic link is followed (system CA bundles are links).
///
/// ```
/// use lens_core::config::read_certificate_file;
///
/// let reason = read_certificate_file(std::path::Path::new("/dev/zero")).unwrap_err();
/// assert_eq!(reason, "it is a character device, not a regular file");
/// ```
pub fn read_certificate_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use crate::control::{BoundedReadError, read_bounded};
    let too_long = |length: u64| {
        format!("it is {length} bytes long, more than the {MAX_CERTIFICATE_BYTES} bytes (4 MiB) a CA file may hold")
    };
    read_bounded(path, MAX_CERTIFICATE_BYTES, true).map_err(|error| match error {
        BoundedReadError::Io(error) => format!("cannot read the file: {error}"),
        BoundedReadError::NotRegular(kind) => format!("it is {kind}, not a regular file"),
        BoundedReadError::TooLong(length) => too_long(length),
        BoundedReadError::Grew => too_long(MAX_CERTIFICATE_BYTES + 1),
    })
}

impl LensConfig {
    /// Checks every value that reading cannot check alone on this configuration, including values
    /// set or changed in code, and reports every problem at once: the sample
    /// rate, the rank and sampling strategy names (against the registries),
    /// the span-group spec, exporter names per signal, endpoint URLs,
    /// timeouts, the export interval, the sampler ratio, the Prometheus host,
    /// the batch settings and the Prometheus labels. (Booleans, integers,
    /// protocol names and header syntax are checked when read; [`Headers`](super::Headers)
    /// cannot hold a malformed header.)
    ///
    /// ```
    /// use lens_core::config::LensConfig;
    ///
    /// let config = LensConfig { export_sample_rate: 1.5, ..LensConfig::default() };
    /// let err = config.validate().unwrap_err();
    /// assert!(err.to_string().contains("export_sample_rate must be in [0.0, 1.0], got 1.5"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let o = &self.otel;
        if !(0.0..=1.0).contains(&self.export_sample_rate) {
            problems.push(ConfigProblem::SampleRateOutOfRange {
                variable: self.source_name("export_sample_rate"),
                value: self.export_sample_rate,
            });
        }
        if self.export_rank < -1 {
            // The original took any negative rank for the last one; a
            // Python user reads -2 as the one before it, so it is refused.
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("export_rank"),
                value: self.export_rank.to_string(),
                expected: super::load::EXPORT_RANK_EXPECTED.into(),
            });
        }
        if let Some(reason) = run_id_problem(&self.run_id) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("run_id"),
                value: self.run_id.escape_debug().to_string(),
                expected: format!("{RUN_ID_EXPECTED} ({reason})"),
            });
        }
        if let Err(source) = crate::strategies::rank_strategy(&self.rank_strategy) {
            problems.push(ConfigProblem::UnknownStrategy { variable: self.source_name("rank_strategy"), source });
        }
        if !self.sampling_strategy.is_empty()
            && let Err(source) = crate::strategies::sampling_strategy(&self.sampling_strategy)
        {
            problems.push(ConfigProblem::UnknownStrategy { variable: self.source_name("sampling_strategy"), source });
        }
        if !self.span_groups.trim().is_empty() && super::read::only_commas(&self.span_groups) {
            // No spans is said with <PREFIX>_TRACES_ENABLED=0.
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("span_groups"),
                value: self.span_groups.clone(),
                expected: format!(
                    "comma-separated span-group names and presets, e.g. 'default' or 'per_step,trace_region' (to \
                     record no spans, set {}_TRACES_ENABLED=0)",
                    self.origins.prefixes.first().map_or("<PREFIX>", String::as_str)
                ),
            });
        } else if let Err(source) = self.resolved_span_groups() {
            problems.push(ConfigProblem::UnknownSpanGroup {
                variable: self.source_name("span_groups"),
                value: self.span_groups.clone(),
                source,
            });
        }
        if let Err(source) = self.tracing_rules() {
            problems.push(ConfigProblem::InvalidTracingRules {
                variable: self.source_name("tracing_groups"),
                value: self.tracing_groups.clone(),
                source,
            });
        }
        if let Some(kind) = self.exporter.filter(|k| !ExporterKind::ALL_SIGNALS_NAMES.contains(&k.as_str())) {
            problems.push(unknown_name(
                self.source_name("exporter"),
                "exporter",
                kind.as_str().into(),
                ExporterKind::ALL_SIGNALS_NAMES,
            ));
        }
        for (field, signal) in [("otel.traces_exporter", Signal::Traces), ("otel.logs_exporter", Signal::Logs)] {
            if o.exporter_override(signal) == Some(ExporterKind::Prometheus) {
                problems.push(unknown_name(
                    self.source_name(field),
                    "exporter",
                    "prometheus".into(),
                    ExporterKind::TRACES_LOGS_NAMES,
                ));
            }
        }
        if self.file_max_bytes == 0 {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("file_max_bytes"),
                value: "0".into(),
                expected: super::load::FILE_MAX_BYTES_EXPECTED.into(),
            });
        }
        if !(super::model::MIN_SPOOL_SIZE_KIB..=super::model::MAX_SPOOL_SIZE_KIB).contains(&self.spool_size_kib) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("spool_size_kib"),
                value: self.spool_size_kib.to_string(),
                expected: super::load::SPOOL_SIZE_EXPECTED.into(),
            });
        }
        if let Some(peak) =
            self.peak_tflops.filter(|p| !(super::load::MIN_PEAK_TFLOPS..=super::load::MAX_PEAK_TFLOPS).contains(p))
        {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("peak_tflops"),
                value: self.shown_value("peak_tflops", py_float(peak)),
                expected: super::load::PEAK_TFLOPS_EXPECTED.into(),
            });
        }
        if let Some(ratio) = o.traces_sampler.ratio().filter(|r| !(0.0..=1.0).contains(r)) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("otel.traces_sampler_arg"),
                value: self.shown_value("otel.traces_sampler_arg", py_float(ratio)),
                expected: super::load::RATIO_EXPECTED.into(),
            });
        }
        for signal in Signal::ALL {
            let fields = otlp_fields(signal);
            let s = o.otlp(signal);
            if let Some(endpoint) = &s.endpoint
                && let Err(reason) = standard::check_endpoint(&endpoint.url)
            {
                problems.push(ConfigProblem::InvalidEndpoint {
                    variable: self.source_name(fields.endpoint),
                    value: standard::redact_endpoint(&endpoint.url),
                    reason: reason.into(),
                });
            }
            if s.timeout.is_zero() {
                problems.push(self.positive_millis(fields.timeout, s.timeout));
            }
        }
        if o.metric_export_interval.is_zero() {
            problems.push(self.positive_millis("otel.metric_export_interval", o.metric_export_interval));
        }
        if o.batch.schedule_delay.is_zero() {
            problems.push(self.positive_millis("otel.batch.schedule_delay", o.batch.schedule_delay));
        }
        if o.prometheus_host.trim().is_empty() || o.prometheus_host.chars().any(char::is_whitespace) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("otel.prometheus_host"),
                value: o.prometheus_host.clone(),
                expected: "a host name or IP address without spaces, e.g. 'localhost' or '0.0.0.0'".into(),
            });
        }
        for (field, n) in [
            ("otel.batch.max_queue_size", o.batch.max_queue_size),
            ("otel.batch.max_export_batch_size", o.batch.max_export_batch_size),
            ("otel.batch.max_concurrent_exports", o.batch.max_concurrent_exports),
        ] {
            if n == 0 {
                problems.push(ConfigProblem::InvalidValue {
                    variable: self.source_name(field),
                    value: "0".into(),
                    expected: super::load::COUNT_EXPECTED.into(),
                });
            }
        }
        if o.batch.max_export_batch_size > o.batch.max_queue_size && o.batch.max_queue_size > 0 {
            // Name the setting that was changed: the batch size if it was,
            // else the queue size that became too small for the default batch.
            let problem = if self.variable_for("otel.batch.max_export_batch_size").is_some()
                || self.variable_for("otel.batch.max_queue_size").is_none()
            {
                ConfigProblem::InvalidValue {
                    variable: self.source_name("otel.batch.max_export_batch_size"),
                    value: o.batch.max_export_batch_size.to_string(),
                    expected: format!("a batch size no larger than the queue size ({})", o.batch.max_queue_size),
                }
            } else {
                ConfigProblem::InvalidValue {
                    variable: self.source_name("otel.batch.max_queue_size"),
                    value: o.batch.max_queue_size.to_string(),
                    expected: format!(
                        "a queue size at least the export batch size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, {})",
                        o.batch.max_export_batch_size
                    ),
                }
            };
            problems.push(problem);
        }
        if self.prometheus_resource_labels.iter().any(|l| l.trim().is_empty() || l.chars().any(char::is_whitespace)) {
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("prometheus_resource_labels"),
                value: self.prometheus_resource_labels.join(","),
                expected: "resource attribute keys such as 'nemo.run.id', none of them empty or with a space".into(),
            });
        }
        if problems.is_empty() { Ok(()) } else { Err(ConfigError::new(problems)) }
    }

    /// Checks the files a configuration names, as far as reading can tell
    /// before anything is built: each private CA file of an OTLP signal that
    /// is on (readable, holding a PEM certificate) and the file exporter's
    /// directory when files may be written (not a file, nor under one).
    /// Nothing when telemetry is off.
    ///
    /// Run on every rank before the rank strategy decides, and by a launcher
    /// before it starts ranks, so that a bad file stops every rank at once
    /// rather than the exporting rank alone, late, while the others wait.
    ///
    /// ```
    /// use lens_core::config::ConfigLoader;
    ///
    /// let env = [("NEMO_LENS_ENABLED", "1"), ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/no/such/ca.pem")];
    /// let config = ConfigLoader::new("NEMO_LENS").load(&env).unwrap();
    /// let error = config.check_files().unwrap_err().to_string();
    /// assert!(error.starts_with("Invalid value for OTEL_EXPORTER_OTLP_CERTIFICATE: '/no/such/ca.pem'. Expected a readable PEM file"), "{error}");
    ///
    /// // A file directory under a file, when files may be written (here,
    /// // nothing selects a destination: files if no collector answers).
    /// let env = [("NEMO_LENS_ENABLED", "1"), ("NEMO_LENS_FILE_DIR", "/dev/null/telemetry")];
    /// let error = ConfigLoader::new("NEMO_LENS").load(&env).unwrap().check_files().unwrap_err().to_string();
    /// assert!(error.ends_with("Expected a directory (made if missing), not a file: /dev/null is a file."), "{error}");
    ///
    /// // Not read for a signal that does not export over OTLP.
    /// let env = [("NEMO_LENS_ENABLED", "1"), ("NEMO_LENS_EXPORTER", "file"), ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/no/such/ca.pem")];
    /// assert!(ConfigLoader::new("NEMO_LENS").load(&env).unwrap().check_files().is_ok());
    /// ```
    pub fn check_files(&self) -> Result<(), ConfigError> {
        self.check_files_except(&[])
    }

    /// [`check_files`](Self::check_files) for the signals whose exporter
    /// the configuration builds: not those in `given`, whose exporter the
    /// program gives in code (lens's setup options). With any given, the
    /// default destination's files are not written, so the directory is
    /// checked only when a signal left to the configuration selects files.
    ///
    /// ```
    /// use lens_core::config::{ConfigLoader, Signal};
    ///
    /// let env = [("NEMO_LENS_ENABLED", "1"), ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/no/such/ca.pem")];
    /// let config = ConfigLoader::new("NEMO_LENS").load(&env).unwrap();
    /// // The program's own span exporter: metrics still export over OTLP.
    /// assert!(config.check_files_except(&[Signal::Traces]).is_err());
    /// assert!(config.check_files_except(&[Signal::Traces, Signal::Metrics, Signal::Logs]).is_ok());
    /// ```
    pub fn check_files_except(&self, given: &[Signal]) -> Result<(), ConfigError> {
        if !self.telemetry_enabled() {
            return Ok(());
        }
        let mut problems = Vec::new();
        let signals = [
            (Signal::Traces, self.traces_enabled),
            (Signal::Metrics, self.metrics_enabled),
            (Signal::Logs, self.logs_enabled),
        ];
        let on: Vec<Signal> = signals
            .into_iter()
            .filter(|(signal, on)| *on && !given.contains(signal))
            .map(|(signal, _)| signal)
            .collect();
        let mut checked = Vec::new();
        for &signal in &on {
            let Some(path) = self.otel.otlp(signal).certificate.as_ref() else { continue };
            if self.exporter_for(signal) != ExporterKind::Otlp || checked.contains(&path) {
                continue;
            }
            checked.push(path);
            // The exporter parses the PEM when it is built; this is the
            // check that needs no parser, in the exporter's words.
            let reason = match read_certificate_file(path) {
                Err(reason) => Some(reason),
                Ok(pem) if !pem.windows(CERTIFICATE_MARK.len()).any(|w| w == CERTIFICATE_MARK) => {
                    Some(format!("the file holds no PEM certificate ({})", String::from_utf8_lossy(CERTIFICATE_MARK)))
                }
                Ok(_) => None,
            };
            if let Some(reason) = reason {
                problems.push(ConfigProblem::InvalidValue {
                    variable: self.source_name(otlp_fields(signal).certificate),
                    value: path.display().to_string(),
                    expected: format!("a readable PEM file of CA certificates ({reason})"),
                });
            }
        }
        // Files are written when a signal selects them, or when nothing
        // selects a destination and no collector answers at setup.
        let files = !on.is_empty()
            && ((given.is_empty() && !self.destination_selected())
                || on.iter().any(|&signal| self.exporter_for(signal) == ExporterKind::File));
        if let Some(dir) = &self.file_dir
            && files
            && let Some(file) = dir.ancestors().find(|path| path.exists()).filter(|path| !path.is_dir())
        {
            let within = if file == dir { String::new() } else { format!(": {} is a file", file.display()) };
            problems.push(ConfigProblem::InvalidValue {
                variable: self.source_name("file_dir"),
                value: dir.display().to_string(),
                expected: format!("a directory (made if missing), not a file{within}"),
            });
        }
        if problems.is_empty() { Ok(()) } else { Err(ConfigError::new(problems)) }
    }

    fn positive_millis(&self, field: &'static str, value: Duration) -> ConfigProblem {
        ConfigProblem::InvalidValue {
            variable: self.source_name(field),
            value: value.as_millis().to_string(),
            expected: super::load::millis_expected(1).into(),
        }
    }
}

/// What `<PREFIX>_RUN_ID` accepts: the run id names the `file` exporter's
/// directory (`telemetry/<run_id>`), so it must be one path component.
pub(crate) const RUN_ID_EXPECTED: &str = "a run id of 1 to 200 bytes without '/', '\\' or control characters, other than '.' and '..', \
     since it names the directory telemetry/<run_id>";

/// Why `run_id` (when set) cannot name one directory, or `None` when it can.
fn run_id_problem(run_id: &str) -> Option<&'static str> {
    if run_id.is_empty() {
        None
    } else if run_id.len() > 200 {
        Some("it is longer than 200 bytes")
    } else if run_id.contains(['/', '\\']) || run_id == "." || run_id == ".." {
        Some("it would leave that directory")
    } else if run_id.chars().any(char::is_control) {
        Some("it holds a control character")
    } else {
        None
    }
}
