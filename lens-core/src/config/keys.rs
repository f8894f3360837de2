//! Field paths: the names [`Origins`](super::Origins) records fields under
//! (`export_sample_rate`, `otel.otlp_traces.endpoint`, ...), each field's
//! value as recorded, and the variable behind a field for messages.

use super::headers::Headers;
use super::model::LensConfig;
use super::pyrepr::py_float;
use super::standard::{Propagator, Signal};

/// The field paths of one signal's OTLP settings, for [`Origins`].
pub(super) struct OtlpFields {
    pub(super) endpoint: &'static str,
    pub(super) protocol: &'static str,
    pub(super) headers: &'static str,
    pub(super) timeout: &'static str,
    pub(super) compression: &'static str,
    pub(super) certificate: &'static str,
}

pub(super) const fn otlp_fields(signal: Signal) -> OtlpFields {
    match signal {
        Signal::Traces => OtlpFields {
            endpoint: "otel.otlp_traces.endpoint",
            protocol: "otel.otlp_traces.protocol",
            headers: "otel.otlp_traces.headers",
            timeout: "otel.otlp_traces.timeout",
            compression: "otel.otlp_traces.compression",
            certificate: "otel.otlp_traces.certificate",
        },
        Signal::Metrics => OtlpFields {
            endpoint: "otel.otlp_metrics.endpoint",
            protocol: "otel.otlp_metrics.protocol",
            headers: "otel.otlp_metrics.headers",
            timeout: "otel.otlp_metrics.timeout",
            compression: "otel.otlp_metrics.compression",
            certificate: "otel.otlp_metrics.certificate",
        },
        Signal::Logs => OtlpFields {
            endpoint: "otel.otlp_logs.endpoint",
            protocol: "otel.otlp_logs.protocol",
            headers: "otel.otlp_logs.headers",
            timeout: "otel.otlp_logs.timeout",
            compression: "otel.otlp_logs.compression",
            certificate: "otel.otlp_logs.certificate",
        },
    }
}

pub(super) fn header_keys(headers: &Headers) -> String {
    headers.keys().collect::<Vec<_>>().join(",")
}

pub(super) fn propagator_names(propagators: &[Propagator]) -> String {
    propagators.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(",")
}

/// How one field's value is written in [`Origins`](super::Origins) (`None`
/// when the field is unset).
type FieldRepr = fn(&LensConfig) -> Option<String>;

/// Every field path of [`LensConfig`] outside the OTLP blocks, with the
/// field's value as [`Origins`](super::Origins) records it. The OTLP blocks'
/// paths (`otel.otlp_<signal>.<part>`) are read by [`otlp_repr`].
const FIELDS: &[(&str, FieldRepr)] = &[
    ("enabled", |c| Some(c.enabled.to_string())),
    ("service_name", |c| Some(c.service_name.clone())),
    ("rank_strategy", |c| Some(c.rank_strategy.clone())),
    ("export_rank", |c| Some(c.export_rank.to_string())),
    ("export_sample_rate", |c| Some(py_float(c.export_sample_rate))),
    ("sampling_strategy", |c| Some(c.sampling_strategy.clone())),
    ("traces_enabled", |c| Some(c.traces_enabled.to_string())),
    ("metrics_enabled", |c| Some(c.metrics_enabled.to_string())),
    ("rank_metrics", |c| Some(c.rank_metrics.to_string())),
    ("logs_enabled", |c| Some(c.logs_enabled.to_string())),
    ("span_groups", |c| Some(c.span_groups.clone())),
    ("tracing_groups", |c| Some(c.tracing_groups.clone())),
    ("exporter", |c| Some(c.exporter?.as_str().into())),
    ("run_id", |c| Some(c.run_id.clone())),
    ("launch_id", |c| Some(c.launch_id.clone())),
    ("user", |c| Some(c.user.clone())),
    ("wandb_entity", |c| Some(c.wandb_entity.clone())),
    ("wandb_project", |c| Some(c.wandb_project.clone())),
    ("file_dir", |c| Some(c.file_dir.as_ref()?.display().to_string())),
    ("file_max_bytes", |c| Some(c.file_max_bytes.to_string())),
    ("export_retry_window", |c| Some(c.export_retry_window.as_millis().to_string())),
    ("shutdown_timeout", |c| Some(c.shutdown_timeout.as_millis().to_string())),
    ("prometheus_linger", |c| Some(c.prometheus_linger.as_millis().to_string())),
    ("prometheus_resource_labels", |c| Some(c.prometheus_resource_labels.join(","))),
    ("peak_tflops", |c| Some(py_float(c.peak_tflops?))),
    ("hang_timeout", |c| Some(c.hang_timeout.to_string())),
    ("spool", |c| Some(c.spool.to_string())),
    ("spool_dir", |c| Some(c.spool_dir.as_ref()?.display().to_string())),
    ("spool_size_kib", |c| Some(c.spool_size_kib.to_string())),
    ("context_per_span", |c| Some(c.context_per_span.to_string())),
    // --- control file (issue 23) ---
    ("control_file", |c| Some(c.control_file.as_ref()?.display().to_string())),
    ("control_poll", |c| Some(py_float(c.control_poll.as_secs_f64()))),
    // --- end control file ---
    ("otel.sdk_disabled", |c| Some(c.otel.sdk_disabled.to_string())),
    ("otel.traces_exporter", |c| Some(c.otel.traces_exporter?.as_str().into())),
    ("otel.metrics_exporter", |c| Some(c.otel.metrics_exporter?.as_str().into())),
    ("otel.logs_exporter", |c| Some(c.otel.logs_exporter?.as_str().into())),
    ("otel.traces_sampler", |c| Some(c.otel.traces_sampler.as_str().into())),
    ("otel.traces_sampler_arg", |c| Some(py_float(c.otel.traces_sampler.ratio()?))),
    ("otel.metric_export_interval", |c| Some(c.otel.metric_export_interval.as_millis().to_string())),
    ("otel.prometheus_host", |c| Some(c.otel.prometheus_host.clone())),
    ("otel.prometheus_port", |c| Some(c.otel.prometheus_port.to_string())),
    ("otel.propagators", |c| Some(propagator_names(&c.otel.propagators))),
    ("otel.batch.max_queue_size", |c| Some(c.otel.batch.max_queue_size.to_string())),
    ("otel.batch.max_export_batch_size", |c| Some(c.otel.batch.max_export_batch_size.to_string())),
    ("otel.batch.schedule_delay", |c| Some(c.otel.batch.schedule_delay.as_millis().to_string())),
    ("otel.batch.max_concurrent_exports", |c| Some(c.otel.batch.max_concurrent_exports.to_string())),
];

/// The value of an OTLP block's field (`otel.otlp_traces.endpoint`, ...) as
/// recorded.
fn otlp_repr(config: &LensConfig, field: &str) -> Option<String> {
    let rest = field.strip_prefix("otel.otlp_")?;
    let (signal, part) = rest.split_once('.')?;
    let signal = Signal::ALL.into_iter().find(|s| s.as_str() == signal)?;
    let s = config.otel.otlp(signal);
    match part {
        "endpoint" => s.endpoint.as_ref().map(|e| e.url.clone()),
        "protocol" => Some(s.protocol.as_str().into()),
        "headers" => Some(header_keys(&s.headers)),
        "timeout" => Some(s.timeout.as_millis().to_string()),
        "compression" => Some(s.compression.as_str().into()),
        "certificate" => s.certificate.as_ref().map(|p| p.display().to_string()),
        _ => None,
    }
}

impl LensConfig {
    /// The variable or flag that set `field` (a path such as `enabled` or
    /// `otel.otlp_traces.endpoint`), when the field still holds the value it
    /// set; `None` for defaults and values changed in code.
    pub fn variable_for(&self, field: &str) -> Option<&str> {
        let (variable, repr) = self.origins.fields.get(field)?;
        (self.current_repr(field).as_deref() == Some(repr.as_str())).then_some(variable.as_str())
    }

    /// The variable a user sets to change `field`: the one that set it, else
    /// `<PREFIX>_<key>` under the primary prefix the configuration was read
    /// with, else `LensConfig.<field>` for a configuration built in code.
    ///
    /// ```
    /// use lens_core::config::LensConfig;
    /// use lens_core::groups::LENS_CATALOG;
    ///
    /// let env = [("NEMO_LENS_FILE_DIR", "/scratch/t")];
    /// let config = LensConfig::from_env(&env, "MYJOB_OTEL", Some("NEMO_LENS"), &LENS_CATALOG)?;
    /// assert_eq!(config.variable_to_set("file_dir", "FILE_DIR"), "NEMO_LENS_FILE_DIR");
    /// let config = LensConfig::from_env(&[("X", "y")], "MYJOB_OTEL", Some("NEMO_LENS"), &LENS_CATALOG)?;
    /// assert_eq!(config.variable_to_set("file_dir", "FILE_DIR"), "MYJOB_OTEL_FILE_DIR");
    /// assert_eq!(LensConfig::default().variable_to_set("file_dir", "FILE_DIR"), "LensConfig.file_dir");
    /// # Ok::<(), lens_core::config::ConfigError>(())
    /// ```
    pub fn variable_to_set(&self, field: &str, key: &str) -> String {
        match self.variable_for(field) {
            Some(variable) => variable.to_string(),
            None => {
                self.origins.prefixed_names(key).into_iter().next().unwrap_or_else(|| format!("LensConfig.{field}"))
            }
        }
    }

    /// The value of `field` as a problem quotes it: as typed in the
    /// variable that set it (`0`) while the field still holds what was
    /// read, else `repr`, the value it holds (`0.0`, for a value set in
    /// code or by a flag).
    pub(super) fn shown_value(&self, field: &str, repr: String) -> String {
        match (self.variable_for(field), self.origins.written.get(field)) {
            (Some(_), Some(written)) => written.clone(),
            _ => repr,
        }
    }

    /// The name a problem about `field` uses: the variable that set it, or
    /// `LensConfig.<field>` when it was set in code.
    pub(super) fn source_name(&self, field: &str) -> String {
        self.variable_for(field).map_or_else(|| format!("LensConfig.{field}"), str::to_string)
    }

    /// The value of `field` as [`Origins`] records it.
    fn current_repr(&self, field: &str) -> Option<String> {
        match FIELDS.iter().find(|(name, _)| *name == field) {
            Some((_, repr)) => repr(self),
            None => otlp_repr(self, field),
        }
    }
}
