//! The `console` exporters: compact JSON lines (as the original forces them,
//! rather than the SDK's pretty-printed JSON).
//!
//! One line per span, one line per metric batch, one line per log record,
//! each a complete JSON object, written to standard output or to any
//! `Write` (tests pass a buffer). Unlike the SDK's pretty printer this is
//! grep- and `jq`-friendly. The format is lens's own (readable field names,
//! hex ids, times in Unix nanoseconds); use the [`file`](super::file)
//! exporter for the standard OTLP/JSON encoding.
//!
//! Keys are written in alphabetical order. Span lines: `name`, `trace_id`, `span_id`, `parent_span_id` (empty for a
//! root), `kind`, `start_time_unix_nano`, `end_time_unix_nano`, `status`
//! (`code`, `description`), `attributes`, `events`, `links`, `scope`,
//! `resource` (the resource's attributes). Metric lines: `resource`, and
//! `scope_metrics` with every metric's `name`, `description`, `unit`,
//! `kind` (`gauge`, `sum`, `histogram`, `exponential_histogram`),
//! `temporality`, `is_monotonic` and `data_points`.

use std::fmt;
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde_json::{Map, Value as Json, json};

use crate::span_record::unix_nanos;

type Output = Mutex<Option<Box<dyn Write + Send>>>;

fn stdout() -> Box<dyn Write + Send> {
    Box::new(std::io::stdout())
}

/// Writes one line and flushes; fails once shut down.
fn write_line(output: &Output, line: &Json) -> OTelSdkResult {
    let mut guard = output.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let writer = guard.as_mut().ok_or(OTelSdkError::AlreadyShutdown)?;
    let mut text = line.to_string();
    text.push('\n');
    writer
        .write_all(text.as_bytes())
        .and_then(|()| writer.flush())
        .map_err(|error| OTelSdkError::InternalFailure(format!("console exporter: {error}")))
}

fn close(output: &Output) -> OTelSdkResult {
    let mut guard = output.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match guard.take() {
        Some(mut writer) => {
            writer.flush().map_err(|error| OTelSdkError::InternalFailure(format!("console exporter: {error}")))
        }
        None => Err(OTelSdkError::AlreadyShutdown),
    }
}

fn flush(output: &Output) -> OTelSdkResult {
    let mut guard = output.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match guard.as_mut() {
        Some(writer) => {
            writer.flush().map_err(|error| OTelSdkError::InternalFailure(format!("console exporter: {error}")))
        }
        None => Ok(()),
    }
}

/// An attribute value as JSON (non-finite floats become strings).
pub(crate) fn value_json(value: &Value) -> Json {
    match value {
        Value::Bool(value) => Json::Bool(*value),
        Value::I64(value) => json!(value),
        Value::F64(value) => f64_json(*value),
        Value::String(value) => Json::String(value.as_str().to_owned()),
        Value::Array(array) => match array {
            opentelemetry::Array::Bool(values) => json!(values),
            opentelemetry::Array::I64(values) => json!(values),
            opentelemetry::Array::F64(values) => Json::Array(values.iter().copied().map(f64_json).collect()),
            opentelemetry::Array::String(values) => {
                Json::Array(values.iter().map(|value| Json::String(value.as_str().to_owned())).collect())
            }
            other => Json::String(format!("{other:?}")),
        },
        other => Json::String(other.as_str().into_owned()),
    }
}

fn attributes_json<'a>(attributes: impl IntoIterator<Item = &'a KeyValue>) -> Json {
    Json::Object(attributes.into_iter().map(|kv| (kv.key.as_str().to_owned(), value_json(&kv.value))).collect())
}

fn resource_json(resource: &Resource) -> Json {
    Json::Object(resource.iter().map(|(key, value)| (key.as_str().to_owned(), value_json(value))).collect())
}

fn scope_json(scope: &opentelemetry::InstrumentationScope) -> Json {
    let mut object = Map::new();
    object.insert("name".into(), Json::String(scope.name().to_owned()));
    if let Some(version) = scope.version() {
        object.insert("version".into(), Json::String(version.to_owned()));
    }
    Json::Object(object)
}

fn kind_str(kind: &SpanKind) -> &'static str {
    match kind {
        SpanKind::Client => "client",
        SpanKind::Server => "server",
        SpanKind::Producer => "producer",
        SpanKind::Consumer => "consumer",
        SpanKind::Internal => "internal",
    }
}

fn status_json(status: &Status) -> Json {
    match status {
        Status::Unset => json!({"code": "unset"}),
        Status::Ok => json!({"code": "ok"}),
        Status::Error { description } => json!({"code": "error", "description": description.as_ref()}),
    }
}

/// One span as a JSON object (without the resource).
pub(crate) fn span_json(span: &SpanData) -> Map<String, Json> {
    let parent = if span.parent_span_id == opentelemetry::trace::SpanId::INVALID {
        String::new()
    } else {
        span.parent_span_id.to_string()
    };
    let events: Vec<Json> = span
        .events
        .events
        .iter()
        .map(|event| {
            json!({
                "name": event.name.as_ref(),
                "time_unix_nano": unix_nanos(event.timestamp),
                "attributes": attributes_json(&event.attributes),
            })
        })
        .collect();
    let links: Vec<Json> = span
        .links
        .links
        .iter()
        .map(|link| {
            json!({
                "trace_id": link.span_context.trace_id().to_string(),
                "span_id": link.span_context.span_id().to_string(),
                "attributes": attributes_json(&link.attributes),
            })
        })
        .collect();
    let mut object = Map::new();
    object.insert("name".into(), Json::String(span.name.to_string()));
    object.insert("trace_id".into(), Json::String(span.span_context.trace_id().to_string()));
    object.insert("span_id".into(), Json::String(span.span_context.span_id().to_string()));
    object.insert("parent_span_id".into(), Json::String(parent));
    object.insert("kind".into(), Json::String(kind_str(&span.span_kind).into()));
    object.insert("start_time_unix_nano".into(), json!(unix_nanos(span.start_time)));
    object.insert("end_time_unix_nano".into(), json!(unix_nanos(span.end_time)));
    object.insert("status".into(), status_json(&span.status));
    object.insert("attributes".into(), attributes_json(&span.attributes));
    object.insert("events".into(), Json::Array(events));
    object.insert("links".into(), Json::Array(links));
    object.insert("scope".into(), scope_json(&span.instrumentation_scope));
    object
}

/// Writes one compact JSON line per span.
///
/// ```
/// use lens_otel_runtime::exporters::ConsoleSpanExporter;
/// use opentelemetry::trace::{Tracer, TracerProvider as _};
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// # use std::sync::{Arc, Mutex};
/// # #[derive(Clone, Default)] struct Buffer(Arc<Mutex<Vec<u8>>>);
/// # impl std::io::Write for Buffer {
/// #     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> { self.0.lock().unwrap().write(b) }
/// #     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
/// # }
/// let buffer = Buffer::default();
/// let provider = SdkTracerProvider::builder()
///     .with_simple_exporter(ConsoleSpanExporter::new(Box::new(buffer.clone())))
///     .build();
/// provider.tracer("demo").in_span("step", |_| {});
/// let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
/// assert_eq!(text.lines().count(), 1);
/// let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
/// assert_eq!(line["name"], "step");
/// ```
pub struct ConsoleSpanExporter {
    output: Output,
    resource: Json,
}

impl ConsoleSpanExporter {
    /// Writes to `output`.
    pub fn new(output: Box<dyn Write + Send>) -> Self {
        ConsoleSpanExporter { output: Mutex::new(Some(output)), resource: Json::Object(Map::new()) }
    }

    /// Writes to standard output.
    pub fn stdout() -> Self {
        Self::new(stdout())
    }
}

impl Default for ConsoleSpanExporter {
    fn default() -> Self {
        Self::stdout()
    }
}

impl fmt::Debug for ConsoleSpanExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConsoleSpanExporter")
    }
}

impl SpanExporter for ConsoleSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        for span in &batch {
            let mut object = span_json(span);
            object.insert("resource".into(), self.resource.clone());
            write_line(&self.output, &Json::Object(object))?;
        }
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        close(&self.output)
    }

    fn force_flush(&self) -> OTelSdkResult {
        flush(&self.output)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource_json(resource);
    }
}

fn temporality_str(temporality: Temporality) -> &'static str {
    match temporality {
        Temporality::Delta => "delta",
        Temporality::LowMemory => "low_memory",
        _ => "cumulative",
    }
}

fn number<T: Into<Json>>(value: T) -> Json {
    value.into()
}

/// A float as JSON; a non-finite one (which JSON cannot hold) as a string.
fn f64_json(value: f64) -> Json {
    serde_json::Number::from_f64(value).map_or_else(|| Json::String(value.to_string()), Json::Number)
}

fn metric_data_json<T: Copy>(data: &MetricData<T>, to_json: fn(T) -> Json) -> (&'static str, Map<String, Json>) {
    let mut object = Map::new();
    let kind = match data {
        MetricData::Gauge(gauge) => {
            let points = gauge
                .data_points()
                .map(
                    |point| json!({"attributes": attributes_json(point.attributes()), "value": to_json(point.value())}),
                )
                .collect();
            object.insert("time_unix_nano".into(), json!(unix_nanos(gauge.time())));
            object.insert("data_points".into(), Json::Array(points));
            "gauge"
        }
        MetricData::Sum(sum) => {
            let points = sum
                .data_points()
                .map(
                    |point| json!({"attributes": attributes_json(point.attributes()), "value": to_json(point.value())}),
                )
                .collect();
            object.insert("temporality".into(), json!(temporality_str(sum.temporality())));
            object.insert("is_monotonic".into(), json!(sum.is_monotonic()));
            object.insert("start_time_unix_nano".into(), json!(unix_nanos(sum.start_time())));
            object.insert("time_unix_nano".into(), json!(unix_nanos(sum.time())));
            object.insert("data_points".into(), Json::Array(points));
            "sum"
        }
        MetricData::Histogram(histogram) => {
            let points = histogram
                .data_points()
                .map(|point| {
                    json!({
                        "attributes": attributes_json(point.attributes()),
                        "count": point.count(),
                        "sum": to_json(point.sum()),
                        "min": point.min().map(to_json),
                        "max": point.max().map(to_json),
                        "bounds": point.bounds().map(f64_json).collect::<Vec<_>>(),
                        "bucket_counts": point.bucket_counts().collect::<Vec<_>>(),
                    })
                })
                .collect();
            object.insert("temporality".into(), json!(temporality_str(histogram.temporality())));
            object.insert("start_time_unix_nano".into(), json!(unix_nanos(histogram.start_time())));
            object.insert("time_unix_nano".into(), json!(unix_nanos(histogram.time())));
            object.insert("data_points".into(), Json::Array(points));
            "histogram"
        }
        MetricData::ExponentialHistogram(histogram) => {
            let points = histogram
                .data_points()
                .map(|point| {
                    json!({
                        "attributes": attributes_json(point.attributes()),
                        "count": point.count(),
                        "sum": to_json(point.sum()),
                        "scale": point.scale(),
                        "zero_count": point.zero_count(),
                        "positive_offset": point.positive_bucket().offset(),
                        "positive_counts": point.positive_bucket().counts().collect::<Vec<_>>(),
                        "negative_offset": point.negative_bucket().offset(),
                        "negative_counts": point.negative_bucket().counts().collect::<Vec<_>>(),
                    })
                })
                .collect();
            object.insert("temporality".into(), json!(temporality_str(histogram.temporality())));
            object.insert("time_unix_nano".into(), json!(unix_nanos(histogram.time())));
            object.insert("data_points".into(), Json::Array(points));
            "exponential_histogram"
        }
    };
    (kind, object)
}

fn metric_json(metric: &Metric) -> Json {
    let (kind, data) = match metric.data() {
        AggregatedMetrics::F64(data) => metric_data_json(data, f64_json),
        AggregatedMetrics::U64(data) => metric_data_json(data, number::<u64>),
        AggregatedMetrics::I64(data) => metric_data_json(data, number::<i64>),
    };
    let mut object = Map::new();
    object.insert("name".into(), Json::String(metric.name().to_owned()));
    object.insert("description".into(), Json::String(metric.description().to_owned()));
    object.insert("unit".into(), Json::String(metric.unit().to_owned()));
    object.insert("kind".into(), Json::String(kind.into()));
    object.extend(data);
    Json::Object(object)
}

/// One batch of metrics as one JSON object.
pub(crate) fn resource_metrics_json(metrics: &ResourceMetrics) -> Json {
    let scopes: Vec<Json> = metrics
        .scope_metrics()
        .map(|scope| {
            json!({
                "scope": scope_json(scope.scope()),
                "metrics": scope.metrics().map(metric_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({"resource": resource_json(metrics.resource()), "scope_metrics": scopes})
}

/// Writes one compact JSON line per metric batch (cumulative temporality).
pub struct ConsoleMetricExporter {
    output: Output,
}

impl ConsoleMetricExporter {
    /// Writes to `output`.
    pub fn new(output: Box<dyn Write + Send>) -> Self {
        ConsoleMetricExporter { output: Mutex::new(Some(output)) }
    }

    /// Writes to standard output.
    pub fn stdout() -> Self {
        Self::new(stdout())
    }
}

impl Default for ConsoleMetricExporter {
    fn default() -> Self {
        Self::stdout()
    }
}

impl fmt::Debug for ConsoleMetricExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConsoleMetricExporter")
    }
}

impl PushMetricExporter for ConsoleMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        write_line(&self.output, &resource_metrics_json(metrics))
    }

    fn force_flush(&self) -> OTelSdkResult {
        flush(&self.output)
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        close(&self.output)
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

fn any_value_json(value: &opentelemetry::logs::AnyValue) -> Json {
    use opentelemetry::logs::AnyValue;
    match value {
        AnyValue::Int(value) => json!(value),
        AnyValue::Double(value) => f64_json(*value),
        AnyValue::String(value) => Json::String(value.as_str().to_owned()),
        AnyValue::Boolean(value) => Json::Bool(*value),
        AnyValue::Bytes(bytes) => Json::String(bytes.iter().map(|byte| format!("{byte:02x}")).collect()),
        AnyValue::ListAny(values) => Json::Array(values.iter().map(any_value_json).collect()),
        AnyValue::Map(map) => {
            Json::Object(map.iter().map(|(key, value)| (key.as_str().to_owned(), any_value_json(value))).collect())
        }
        other => Json::String(format!("{other:?}")),
    }
}

/// Writes one compact JSON line per log record.
pub struct ConsoleLogExporter {
    output: Output,
    resource: Json,
}

impl ConsoleLogExporter {
    /// Writes to `output`.
    pub fn new(output: Box<dyn Write + Send>) -> Self {
        ConsoleLogExporter { output: Mutex::new(Some(output)), resource: Json::Object(Map::new()) }
    }

    /// Writes to standard output.
    pub fn stdout() -> Self {
        Self::new(stdout())
    }
}

impl Default for ConsoleLogExporter {
    fn default() -> Self {
        Self::stdout()
    }
}

impl fmt::Debug for ConsoleLogExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConsoleLogExporter")
    }
}

impl LogExporter for ConsoleLogExporter {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        for (record, scope) in batch.iter() {
            let mut object = Map::new();
            object.insert("timestamp_unix_nano".into(), json!(record.timestamp().map(unix_nanos)));
            object.insert("observed_timestamp_unix_nano".into(), json!(record.observed_timestamp().map(unix_nanos)));
            object.insert("severity_number".into(), json!(record.severity_number().map(|severity| severity as i32)));
            object.insert("severity_text".into(), json!(record.severity_text()));
            object.insert("body".into(), record.body().map_or(Json::Null, any_value_json));
            object.insert(
                "attributes".into(),
                Json::Object(
                    record
                        .attributes_iter()
                        .map(|(key, value)| (key.as_str().to_owned(), any_value_json(value)))
                        .collect(),
                ),
            );
            if let Some(context) = record.trace_context() {
                object.insert("trace_id".into(), Json::String(context.trace_id.to_string()));
                object.insert("span_id".into(), Json::String(context.span_id.to_string()));
            }
            object.insert("event_name".into(), json!(record.event_name()));
            object.insert("target".into(), json!(record.target().map(|target| target.as_ref())));
            object.insert("scope".into(), scope_json(scope));
            object.insert("resource".into(), self.resource.clone());
            write_line(&self.output, &Json::Object(object))?;
        }
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        close(&self.output)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource_json(resource);
    }
}
