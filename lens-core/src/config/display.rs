//! How a [`LensConfig`] prints: `Debug` (every field, header values
//! redacted) and `Display` (a readable summary naming each value's variable).

use std::fmt;

use super::keys::propagator_names;
use super::model::LensConfig;
use super::pyrepr::py_float;
use super::standard::{self, ExporterKind, Signal};

impl fmt::Debug for LensConfig {
    /// Every field; the catalog by name; header values redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensConfig")
            .field("enabled", &self.enabled)
            .field("service_name", &self.service_name)
            .field("rank_strategy", &self.rank_strategy)
            .field("export_rank", &self.export_rank)
            .field("export_sample_rate", &self.export_sample_rate)
            .field("sampling_strategy", &self.sampling_strategy)
            .field("traces_enabled", &self.traces_enabled)
            .field("metrics_enabled", &self.metrics_enabled)
            .field("rank_metrics", &self.rank_metrics)
            .field("logs_enabled", &self.logs_enabled)
            .field("span_groups", &self.span_groups)
            .field("tracing_groups", &self.tracing_groups)
            .field("exporter", &self.exporter)
            .field("run_id", &self.run_id)
            .field("launch_id", &self.launch_id)
            .field("user", &self.user)
            .field("wandb_entity", &self.wandb_entity)
            .field("wandb_project", &self.wandb_project)
            .field("catalog", &self.catalog.name())
            .field("file_dir", &self.file_dir)
            .field("file_max_bytes", &self.file_max_bytes)
            .field("export_retry_window", &self.export_retry_window)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("prometheus_linger", &self.prometheus_linger)
            .field("prometheus_resource_labels", &self.prometheus_resource_labels)
            .field("peak_tflops", &self.peak_tflops)
            .field("hang_timeout", &self.hang_timeout)
            .field("spool", &self.spool)
            .field("spool_dir", &self.spool_dir)
            .field("spool_size_kib", &self.spool_size_kib)
            .field("context_per_span", &self.context_per_span)
            .field("control_file", &self.control_file)
            .field("control_poll", &self.control_poll)
            .field("otel", &self.otel)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for LensConfig {
    /// A readable multi-line summary of the resolved configuration, with the
    /// variable behind each value that did not come from a default. Header
    /// values are shown as `[REDACTED]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.otel;
        let line = |f: &mut fmt::Formatter<'_>, name: &str, field: &str, value: &dyn fmt::Display| match self
            .variable_for(field)
        {
            Some(variable) => writeln!(f, "  {name:<26} {value}  [{variable}]"),
            None => writeln!(f, "  {name:<26} {value}"),
        };
        writeln!(f, "lens configuration (span-group catalog '{}')", self.catalog.name())?;
        let enabled = if self.enabled && o.sdk_disabled {
            "false (OTEL_SDK_DISABLED=true)".to_string()
        } else {
            self.enabled.to_string()
        };
        line(f, "enabled", "enabled", &enabled)?;
        line(f, "service_name", "service_name", &self.service_name)?;
        line(f, "rank_strategy", "rank_strategy", &self.rank_strategy)?;
        let export_rank = if self.export_rank < 0 {
            format!("{} (last rank)", self.export_rank)
        } else {
            self.export_rank.to_string()
        };
        line(f, "export_rank", "export_rank", &export_rank)?;
        line(f, "export_sample_rate", "export_sample_rate", &py_float(self.export_sample_rate))?;
        let sampling = if self.sampling_strategy.is_empty() { "(none)" } else { &self.sampling_strategy };
        line(f, "sampling_strategy", "sampling_strategy", &sampling)?;
        line(f, "traces_enabled", "traces_enabled", &self.traces_enabled)?;
        line(f, "metrics_enabled", "metrics_enabled", &self.metrics_enabled)?;
        line(f, "rank_metrics", "rank_metrics", &self.rank_metrics)?;
        line(f, "hang_timeout_s", "hang_timeout", &self.hang_timeout)?;
        if let Some(control_file) = &self.control_file {
            let control =
                format!("{} (polled every {} s)", control_file.display(), py_float(self.control_poll.as_secs_f64()));
            line(f, "control_file", "control_file", &control)?;
        }
        line(f, "logs_enabled", "logs_enabled", &self.logs_enabled)?;
        let groups = match self.resolved_span_groups() {
            Ok(set) => format!("{} = {{{}}}", self.span_groups, self.catalog.names(set).join(", ")),
            Err(err) => format!("{} (invalid: {err})", self.span_groups),
        };
        line(f, "span_groups", "span_groups", &groups)?;
        if !self.tracing_groups.is_empty() {
            line(f, "tracing_groups", "tracing_groups", &self.tracing_groups)?;
        }
        for (signal, field) in [
            (Signal::Traces, "otel.traces_exporter"),
            (Signal::Metrics, "otel.metrics_exporter"),
            (Signal::Logs, "otel.logs_exporter"),
        ] {
            let field = if o.exporter_override(signal).is_some() { field } else { "exporter" };
            let default = if self.exporter_configured() { "" } else { " (default)" };
            line(f, &format!("{signal} exporter"), field, &format_args!("{}{default}", self.exporter_for(signal)))?;
        }
        let run_id = if self.run_id.is_empty() { "(detected at setup)" } else { &self.run_id };
        line(f, "run_id", "run_id", &run_id)?;
        for (name, value) in [
            ("launch_id", &self.launch_id),
            ("user", &self.user),
            ("wandb_entity", &self.wandb_entity),
            ("wandb_project", &self.wandb_project),
        ] {
            if !value.is_empty() {
                line(f, name, name, value)?;
            }
        }
        if Signal::ALL.iter().any(|s| self.exporter_for(*s) == ExporterKind::File) {
            let dir =
                self.file_dir.as_ref().map_or_else(|| "telemetry/<run_id>".to_string(), |d| d.display().to_string());
            line(f, "file_dir", "file_dir", &dir)?;
            line(f, "file_max_bytes", "file_max_bytes", &self.file_max_bytes)?;
        }
        line(
            f,
            "export_retry_window",
            "export_retry_window",
            &format_args!("{} ms", self.export_retry_window.as_millis()),
        )?;
        line(f, "shutdown_timeout", "shutdown_timeout", &format_args!("{} ms", self.shutdown_timeout.as_millis()))?;
        line(f, "trace sampler", "otel.traces_sampler", &o.traces_sampler)?;
        let propagators = if o.propagators.is_empty() { "none".to_string() } else { propagator_names(&o.propagators) };
        line(f, "propagators", "otel.propagators", &propagators)?;
        line(
            f,
            "metric_export_interval",
            "otel.metric_export_interval",
            &format_args!("{} ms", o.metric_export_interval.as_millis()),
        )?;
        let b = &o.batch;
        writeln!(
            f,
            "  {:<26} queue {}, batch {}, delay {} ms, {} concurrent",
            "batch span processor",
            b.max_queue_size,
            b.max_export_batch_size,
            b.schedule_delay.as_millis(),
            b.max_concurrent_exports
        )?;
        for signal in Signal::ALL {
            match self.exporter_for(signal) {
                ExporterKind::Otlp => {
                    let s = o.otlp(signal);
                    write!(
                        f,
                        "  {:<26} {} {}, headers: {}, timeout {} ms, compression {}",
                        format!("otlp {signal}"),
                        s.protocol,
                        standard::redact_endpoint(&s.endpoint_url(signal)),
                        s.headers,
                        s.timeout.as_millis(),
                        s.compression.as_str()
                    )?;
                    if let Some(cert) = &s.certificate {
                        write!(f, ", certificate {}", cert.display())?;
                    }
                    writeln!(f)?;
                }
                ExporterKind::Prometheus => {
                    writeln!(
                        f,
                        "  {:<26} http://{}:{}/metrics, labels {:?}, linger {} ms",
                        "prometheus",
                        o.prometheus_host,
                        o.prometheus_port,
                        self.prometheus_resource_labels,
                        self.prometheus_linger.as_millis()
                    )?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}
