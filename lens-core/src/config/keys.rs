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

impl LensConfig {
    /// The variable or flag that set `field` (a path such as `enabled` or
    /// `otel.otlp_traces.endpoint`), when the field still holds the value it
    /// set; `None` for defaults and values changed in code.
    pub fn variable_for(&self, field: &str) -> Option<&str> {
        let (variable, repr) = self.origins.fields.get(field)?;
        (self.current_repr(field).as_deref() == Some(repr.as_str())).then_some(variable.as_str())
    }

    /// The name a problem about `field` uses: the variable that set it, or
    /// `LensConfig.<field>` when it was set in code.
    pub(super) fn source_name(&self, field: &str) -> String {
        self.variable_for(field).map_or_else(|| format!("LensConfig.{field}"), str::to_string)
    }

    /// The value of `field` as [`Origins`] records it.
    fn current_repr(&self, field: &str) -> Option<String> {
        let o = &self.otel;
        let otlp = |signal: Signal, part: &str| -> Option<String> {
            let s = o.otlp(signal);
            match part {
                "endpoint" => s.endpoint.as_ref().map(|e| e.url.clone()),
                "protocol" => Some(s.protocol.as_str().into()),
                "headers" => Some(header_keys(&s.headers)),
                "timeout" => Some(s.timeout.as_millis().to_string()),
                "compression" => Some(s.compression.as_str().into()),
                "certificate" => s.certificate.as_ref().map(|p| p.display().to_string()),
                _ => None,
            }
        };
        Some(match field {
            "enabled" => self.enabled.to_string(),
            "service_name" => self.service_name.clone(),
            "rank_strategy" => self.rank_strategy.clone(),
            "export_rank" => self.export_rank.to_string(),
            "export_sample_rate" => py_float(self.export_sample_rate),
            "sampling_strategy" => self.sampling_strategy.clone(),
            "traces_enabled" => self.traces_enabled.to_string(),
            "metrics_enabled" => self.metrics_enabled.to_string(),
            "rank_metrics" => self.rank_metrics.to_string(),
            "logs_enabled" => self.logs_enabled.to_string(),
            "span_groups" => self.span_groups.clone(),
            "tracing_groups" => self.tracing_groups.clone(),
            "exporter" => self.exporter?.as_str().into(),
            "run_id" => self.run_id.clone(),
            "launch_id" => self.launch_id.clone(),
            "user" => self.user.clone(),
            "wandb_entity" => self.wandb_entity.clone(),
            "wandb_project" => self.wandb_project.clone(),
            "file_dir" => self.file_dir.as_ref()?.display().to_string(),
            "export_retry_window" => self.export_retry_window.as_millis().to_string(),
            "shutdown_timeout" => self.shutdown_timeout.as_millis().to_string(),
            "prometheus_linger" => self.prometheus_linger.as_millis().to_string(),
            "prometheus_resource_labels" => self.prometheus_resource_labels.join(","),
            "peak_tflops" => py_float(self.peak_tflops?),
            "hang_timeout" => self.hang_timeout.to_string(),
            "otel.sdk_disabled" => o.sdk_disabled.to_string(),
            "otel.traces_exporter" => o.traces_exporter?.as_str().into(),
            "otel.metrics_exporter" => o.metrics_exporter?.as_str().into(),
            "otel.logs_exporter" => o.logs_exporter?.as_str().into(),
            "otel.traces_sampler" => o.traces_sampler.as_str().into(),
            "otel.traces_sampler_arg" => py_float(o.traces_sampler.ratio()?),
            "otel.metric_export_interval" => o.metric_export_interval.as_millis().to_string(),
            "otel.prometheus_host" => o.prometheus_host.clone(),
            "otel.prometheus_port" => o.prometheus_port.to_string(),
            "otel.propagators" => propagator_names(&o.propagators),
            "otel.batch.max_queue_size" => o.batch.max_queue_size.to_string(),
            "otel.batch.max_export_batch_size" => o.batch.max_export_batch_size.to_string(),
            "otel.batch.schedule_delay" => o.batch.schedule_delay.as_millis().to_string(),
            "otel.batch.max_concurrent_exports" => o.batch.max_concurrent_exports.to_string(),
            other => {
                let rest = other.strip_prefix("otel.otlp_")?;
                let (signal, part) = rest.split_once('.')?;
                let signal = Signal::ALL.into_iter().find(|s| s.as_str() == signal)?;
                return otlp(signal, part);
            }
        })
    }
}
