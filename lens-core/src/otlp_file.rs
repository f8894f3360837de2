//! A reader of lens's `file` export format: OTLP/JSON lines, one
//! `ExportMetricsServiceRequest` a line in `metrics-rank<N>.jsonl`, one
//! `ExportTraceServiceRequest` a line in `traces-rank<N>.jsonl` (see
//! `otel::exporters::file` and docs/exporters.md).
//!
//! It is pure (no OpenTelemetry crate) so that offline tools read a run's
//! directory in either build: the framework layers build their analyses on
//! the flat [`MetricPoint`]s it returns (Megatron's straggler attribution,
//! for one). Gauge and sum data points are read; histograms are skipped.
//! Spans are read as flat [`SpanRecord`]s (name, times, attributes), for
//! analyses that need intervals rather than a tree (Megatron's goodput from
//! the spans, for one). Bad input never panics: a line that is not JSON, a
//! point without a value or a span without times, is counted in
//! [`MetricFile::skipped`] or [`SpanFile::skipped`].
//!
//! [`tree`] reads the same traces files with ids, parents, links and status,
//! for tools that rebuild the traces (the simulator's `trace-view`).
//!
//! ```
//! use lens_core::otlp_file::{AttributeValue, read_metric_lines};
//!
//! let line = r#"{"resourceMetrics":[{"resource":{"attributes":[]},"scopeMetrics":[{"metrics":[
//!   {"name":"megatron.rank.iteration","gauge":{"dataPoints":[
//!     {"attributes":[{"key":"dl.rank","value":{"intValue":"3"}}],"timeUnixNano":"5","asInt":"20"}]}}]}]}]}"#;
//! let line = line.replace('\n', ""); // one export request a line
//! let file = read_metric_lines(line.as_bytes(), 3);
//! assert_eq!(file.points[0].value, 20.0);
//! assert_eq!(file.points[0].attributes["dl.rank"], AttributeValue::Int(3));
//! ```

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde_json::Value;

pub mod tree;

/// An attribute value as the file holds it.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeValue {
    /// `stringValue`.
    String(String),
    /// `intValue`.
    Int(i64),
    /// `doubleValue`.
    Double(f64),
    /// `boolValue`.
    Bool(bool),
    /// Arrays, maps, bytes: not interpreted.
    Other,
}

impl AttributeValue {
    /// The value as an integer (`Int`, or a whole `Double`).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            AttributeValue::Int(v) => Some(*v),
            #[expect(clippy::cast_possible_truncation, reason = "checked whole and in range")]
            AttributeValue::Double(v) if v.fract() == 0.0 && v.abs() < 9.0e15 => Some(*v as i64),
            _ => None,
        }
    }

    /// The value as a string (`String` only).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttributeValue::String(v) => Some(v),
            _ => None,
        }
    }
}

/// One gauge or sum data point.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricPoint {
    /// The rank of the file it came from (`metrics-rank<N>.jsonl`).
    pub file_rank: u32,
    /// The line (export) it came from, 0-based: points of one collection share it.
    pub export: usize,
    /// The metric name.
    pub metric: String,
    /// The point's attributes.
    pub attributes: BTreeMap<String, AttributeValue>,
    /// `timeUnixNano`.
    pub time_unix_nano: u64,
    /// `asDouble` or `asInt`.
    pub value: f64,
}

/// What one metrics file held.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricFile {
    /// The gauge and sum points, in file order.
    pub points: Vec<MetricPoint>,
    /// Lines or points that could not be read.
    pub skipped: u64,
}

/// The `metrics-rank<N>.jsonl` files of `dir`, with their ranks, by rank.
pub fn metrics_files(dir: &Path) -> io::Result<Vec<(u32, PathBuf)>> {
    rank_files(dir, "metrics-rank")
}

/// The `traces-rank<N>.jsonl` files of `dir`, with their ranks, by rank.
pub fn traces_files(dir: &Path) -> io::Result<Vec<(u32, PathBuf)>> {
    rank_files(dir, "traces-rank")
}

fn rank_files(dir: &Path, prefix: &str) -> io::Result<Vec<(u32, PathBuf)>> {
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .filter_map(|path| Some((rank_in_name(&path, prefix)?, path)))
        .collect();
    files.sort();
    Ok(files)
}

/// The rank in a `<prefix><N>.jsonl` file name.
fn rank_in_name(path: &Path, prefix: &str) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix(prefix)?.strip_suffix(".jsonl")?.parse().ok()
}

/// One span, flat: no ids, no tree.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    /// The rank of the file it came from (`traces-rank<N>.jsonl`).
    pub file_rank: u32,
    /// The span name.
    pub name: String,
    /// `startTimeUnixNano`.
    pub start_unix_nano: u64,
    /// `endTimeUnixNano` (never before the start).
    pub end_unix_nano: u64,
    /// The span's attributes.
    pub attributes: BTreeMap<String, AttributeValue>,
}

/// What one traces file held.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpanFile {
    /// The spans, in file order.
    pub spans: Vec<SpanRecord>,
    /// The attributes of the last resource seen.
    pub resource: BTreeMap<String, AttributeValue>,
    /// Lines or spans that could not be read.
    pub skipped: u64,
}

/// Reads the traces file at `path` (of rank `file_rank`).
pub fn read_span_file(path: &Path, file_rank: u32) -> io::Result<SpanFile> {
    Ok(read_span_lines(BufReader::new(std::fs::File::open(path)?), file_rank))
}

/// Reads OTLP/JSON trace lines from `reader`.
pub fn read_span_lines(reader: impl BufRead, file_rank: u32) -> SpanFile {
    let mut file = SpanFile::default();
    for line in reader.lines() {
        let Ok(line) = line else {
            file.skipped += 1;
            break;
        };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(request) = serde_json::from_str::<Value>(&line) else {
            file.skipped += 1;
            continue;
        };
        for resource_spans in array(&request, "resourceSpans") {
            if let Some(resource) = resource_spans.get("resource") {
                file.resource = attributes(resource);
            }
            for scope_spans in array(resource_spans, "scopeSpans") {
                for span in array(scope_spans, "spans") {
                    match read_span(span, file_rank) {
                        Some(span) => file.spans.push(span),
                        None => file.skipped += 1,
                    }
                }
            }
        }
    }
    file
}

fn read_span(span: &Value, file_rank: u32) -> Option<SpanRecord> {
    let time = |key: &str| -> Option<u64> {
        let time = number(span.get(key)?)?;
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a Unix time in nanoseconds")]
        (time.is_finite() && time >= 0.0).then_some(time as u64)
    };
    // Through f64 a Unix time in nanoseconds keeps ~0.25 µs: enough for
    // intervals; an integer string is read exactly.
    let exact = |key: &str| span.get(key).and_then(Value::as_str).and_then(|s| s.trim().parse::<u64>().ok());
    let start_unix_nano = exact("startTimeUnixNano").or_else(|| time("startTimeUnixNano"))?;
    let end_unix_nano = exact("endTimeUnixNano").or_else(|| time("endTimeUnixNano"))?.max(start_unix_nano);
    Some(SpanRecord {
        file_rank,
        name: span.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
        start_unix_nano,
        end_unix_nano,
        attributes: attributes(span),
    })
}

/// The `attributes` list of `holder` as a map.
fn attributes(holder: &Value) -> BTreeMap<String, AttributeValue> {
    array(holder, "attributes")
        .iter()
        .filter_map(|kv| Some((kv.get("key")?.as_str()?.to_string(), attribute(kv.get("value")?))))
        .collect()
}

/// Reads the metrics file at `path` (of rank `file_rank`).
pub fn read_metric_file(path: &Path, file_rank: u32) -> io::Result<MetricFile> {
    Ok(read_metric_lines(BufReader::new(std::fs::File::open(path)?), file_rank))
}

/// Reads OTLP/JSON metric lines from `reader`.
pub fn read_metric_lines(reader: impl BufRead, file_rank: u32) -> MetricFile {
    let mut file = MetricFile::default();
    for (export, line) in reader.lines().enumerate() {
        let Ok(line) = line else {
            file.skipped += 1;
            break;
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&line) {
            Ok(request) => read_request(&request, file_rank, export, &mut file),
            Err(_) => file.skipped += 1,
        }
    }
    file
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn read_request(request: &Value, file_rank: u32, export: usize, file: &mut MetricFile) {
    for resource_metrics in array(request, "resourceMetrics") {
        for scope_metrics in array(resource_metrics, "scopeMetrics") {
            for metric in array(scope_metrics, "metrics") {
                let name = metric.get("name").and_then(Value::as_str).unwrap_or("");
                let data = metric.get("gauge").or_else(|| metric.get("sum"));
                for point in data.map_or(&[][..], |d| array(d, "dataPoints")) {
                    match read_point(point) {
                        Some((attributes, time_unix_nano, value)) => file.points.push(MetricPoint {
                            file_rank,
                            export,
                            metric: name.to_string(),
                            attributes,
                            time_unix_nano,
                            value,
                        }),
                        None => file.skipped += 1,
                    }
                }
            }
        }
    }
}

type Point = (BTreeMap<String, AttributeValue>, u64, f64);

fn read_point(point: &Value) -> Option<Point> {
    let value = match (point.get("asDouble"), point.get("asInt")) {
        (Some(v), _) if !v.is_null() => number(v)?,
        (_, Some(v)) if !v.is_null() => number(v)?,
        _ => return None,
    };
    let time = point.get("timeUnixNano").and_then(number).unwrap_or(0.0);
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a Unix time in nanoseconds")]
    let time = time.max(0.0) as u64;
    Some((attributes(point), time, value))
}

/// A number as OTLP/JSON writes it: a JSON number or a decimal string.
fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn attribute(value: &Value) -> AttributeValue {
    if let Some(v) = value.get("stringValue").and_then(Value::as_str) {
        return AttributeValue::String(v.to_string());
    }
    if let Some(v) = value.get("intValue").and_then(number) {
        #[expect(clippy::cast_possible_truncation, reason = "an OTLP int64")]
        return AttributeValue::Int(v as i64);
    }
    if let Some(v) = value.get("doubleValue").and_then(number) {
        return AttributeValue::Double(v);
    }
    if let Some(v) = value.get("boolValue").and_then(Value::as_bool) {
        return AttributeValue::Bool(v);
    }
    AttributeValue::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_and_points_are_counted_not_fatal() {
        let text = "not json\n{\"resourceMetrics\":[{\"scopeMetrics\":[{\"metrics\":[{\"name\":\"m\",\"sum\":{\"dataPoints\":[{\"asDouble\":1.5},{}]}}]}]}]}\n";
        let file = read_metric_lines(text.as_bytes(), 0);
        assert_eq!(file.skipped, 2);
        assert_eq!(file.points.len(), 1);
        assert_eq!((file.points[0].metric.as_str(), file.points[0].value, file.points[0].export), ("m", 1.5, 1));
    }

    #[test]
    fn spans_are_read_flat_and_bad_spans_are_counted() {
        let text = concat!(
            "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"dl.rank\",\"value\":{\"intValue\":\"1\"}}]},",
            "\"scopeSpans\":[{\"spans\":[{\"name\":\"a\",\"startTimeUnixNano\":\"1700000000000000123\",",
            "\"endTimeUnixNano\":\"1700000000000000456\",\"attributes\":[{\"key\":\"i\",\"value\":{\"intValue\":\"7\"}}]},",
            "{\"name\":\"no times\"}]}]}]}\n",
            "[1,2\n"
        );
        let file = read_span_lines(text.as_bytes(), 1);
        assert_eq!(file.skipped, 2);
        assert_eq!(file.spans.len(), 1);
        let span = &file.spans[0];
        assert_eq!(
            (span.name.as_str(), span.start_unix_nano, span.end_unix_nano),
            ("a", 1_700_000_000_000_000_123, 1_700_000_000_000_000_456)
        );
        assert_eq!(span.attributes["i"], AttributeValue::Int(7));
        assert_eq!(file.resource["dl.rank"], AttributeValue::Int(1));
    }
}
