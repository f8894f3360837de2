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
//! # Streaming
//!
//! [`metric_lines`] and [`span_lines`] read a file one line (one export
//! request) at a time: each item holds what that line held (its resource,
//! its points, or its spans and their events) and nothing of the lines
//! before it, so that an analysis that aggregates as it goes (`lens
//! analyze`) keeps memory that grows with what it aggregates (ranks,
//! phases), not with the file's size. [`read_metric_lines`] and
//! [`read_span_lines`] collect the same items into one value, for small
//! files and tests.
//!
//! [`tree`] reads the same traces files with ids, parents, links and status,
//! for tools that rebuild the traces (`lens trace-view`).
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
use std::fs::File;
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
    /// `startTimeUnixNano` (0 when absent, as on a gauge): a cumulative
    /// counter's start, which changes when its process restarts.
    pub start_time_unix_nano: u64,
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
        // Whatever the entry is: one that cannot be read as a file (a
        // dangling link, a directory) is then an error naming it, not a
        // directory without exports.
        .filter_map(|path| Some((rank_in_name(&path, prefix)?, path)))
        .collect();
    files.sort();
    Ok(files)
}

/// Whether `path` is named as a file of a `file` export
/// (`traces-rank<N>.jsonl`, `metrics-rank<N>.jsonl`, `logs-rank<N>.jsonl`).
///
/// ```
/// use std::path::Path;
/// use lens_core::otlp_file::is_export_file_name;
///
/// assert!(is_export_file_name(Path::new("telemetry/r/metrics-rank3.jsonl")));
/// assert!(!is_export_file_name(Path::new("trace.json")));
/// ```
pub fn is_export_file_name(path: &Path) -> bool {
    ["traces-rank", "metrics-rank", "logs-rank"].iter().any(|prefix| rank_in_name(path, prefix).is_some())
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
    Ok(read_span_lines(BufReader::new(File::open(path)?), file_rank))
}

/// Reads OTLP/JSON trace lines from `reader`, all at once (see
/// [`span_lines`] to read them one line at a time).
pub fn read_span_lines(reader: impl BufRead, file_rank: u32) -> SpanFile {
    let mut file = SpanFile::default();
    for line in span_lines(reader, file_rank) {
        file.skipped += line.skipped;
        file.spans.extend(line.spans);
        if let Some(resource) = line.resource {
            file.resource = resource;
        }
    }
    file
}

/// One span event, flat (the watchdog's hang event, for one).
#[derive(Clone, Debug, PartialEq)]
pub struct SpanEventRecord {
    /// The rank of the file it came from (`traces-rank<N>.jsonl`).
    pub file_rank: u32,
    /// The name of the span that carries it.
    pub span_name: String,
    /// The event name.
    pub name: String,
    /// `timeUnixNano` (0 when absent).
    pub time_unix_nano: u64,
    /// The event's attributes.
    pub attributes: BTreeMap<String, AttributeValue>,
}

/// What one line (one `ExportTraceServiceRequest`) of a traces file held.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpanLine {
    /// The line's index in the file, 0-based (blank lines count).
    pub line: usize,
    /// The attributes of the line's last resource (`None`: the line names
    /// none).
    pub resource: Option<BTreeMap<String, AttributeValue>>,
    /// The line's spans, in order.
    pub spans: Vec<SpanRecord>,
    /// The events of those spans, in order.
    pub events: Vec<SpanEventRecord>,
    /// 1 when the line is not JSON (or could not be read), plus the spans
    /// without times.
    pub skipped: u64,
}

/// What one line (one `ExportMetricsServiceRequest`) of a metrics file held.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricLine {
    /// The line's index in the file, 0-based (blank lines count): the
    /// points' [`MetricPoint::export`].
    pub export: usize,
    /// The attributes of the line's last resource (`None`: the line names
    /// none).
    pub resource: Option<BTreeMap<String, AttributeValue>>,
    /// The line's gauge and sum points, in order.
    pub points: Vec<MetricPoint>,
    /// 1 when the line is not JSON (or could not be read), plus the points
    /// without a value.
    pub skipped: u64,
}

/// The non-blank lines of a reader, parsed one at a time into one reused
/// buffer: `(index, None)` for a line that is not JSON; a read error ends
/// the iteration after one such item.
#[derive(Debug)]
struct JsonLines<R> {
    reader: R,
    index: usize,
    buffer: Vec<u8>,
    finished: bool,
}

impl<R: BufRead> Iterator for JsonLines<R> {
    type Item = (usize, Option<Value>);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.finished {
            self.buffer.clear();
            let index = self.index;
            match self.reader.read_until(b'\n', &mut self.buffer) {
                Ok(0) => self.finished = true,
                Ok(_) => {
                    self.index += 1;
                    if !self.buffer.iter().all(u8::is_ascii_whitespace) {
                        return Some((index, serde_json::from_slice(&self.buffer).ok()));
                    }
                }
                Err(_) => {
                    self.finished = true;
                    return Some((index, None));
                }
            }
        }
        None
    }
}

/// The lines of a traces file, one [`SpanLine`] per non-blank line, read
/// as the iterator advances.
#[derive(Debug)]
pub struct SpanLines<R> {
    lines: JsonLines<R>,
    file_rank: u32,
}

/// The lines of a metrics file, one [`MetricLine`] per non-blank line,
/// read as the iterator advances.
#[derive(Debug)]
pub struct MetricLines<R> {
    lines: JsonLines<R>,
    file_rank: u32,
}

/// Reads OTLP/JSON trace lines from `reader` one line at a time.
///
/// ```
/// use lens_core::otlp_file::span_lines;
///
/// let text = concat!(
///     r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"step","startTimeUnixNano":"1","#,
///     r#""endTimeUnixNano":"5","events":[{"name":"hang","timeUnixNano":"4"}]}]}]}]}"#,
///     "\n{\"truncated\n",
/// );
/// let lines: Vec<_> = span_lines(text.as_bytes(), 0).collect();
/// assert_eq!((lines[0].spans[0].name.as_str(), lines[0].events[0].name.as_str()), ("step", "hang"));
/// assert_eq!((lines.len(), lines[1].skipped), (2, 1));
/// ```
pub fn span_lines<R: BufRead>(reader: R, file_rank: u32) -> SpanLines<R> {
    SpanLines { lines: JsonLines { reader, index: 0, buffer: Vec::new(), finished: false }, file_rank }
}

/// Opens the traces file at `path` (of rank `file_rank`) for [`span_lines`].
pub fn open_span_lines(path: &Path, file_rank: u32) -> io::Result<SpanLines<BufReader<File>>> {
    Ok(span_lines(BufReader::new(File::open(path)?), file_rank))
}

/// Reads OTLP/JSON metric lines from `reader` one line at a time.
pub fn metric_lines<R: BufRead>(reader: R, file_rank: u32) -> MetricLines<R> {
    MetricLines { lines: JsonLines { reader, index: 0, buffer: Vec::new(), finished: false }, file_rank }
}

/// Opens the metrics file at `path` (of rank `file_rank`) for [`metric_lines`].
pub fn open_metric_lines(path: &Path, file_rank: u32) -> io::Result<MetricLines<BufReader<File>>> {
    Ok(metric_lines(BufReader::new(File::open(path)?), file_rank))
}

impl<R: BufRead> Iterator for SpanLines<R> {
    type Item = SpanLine;

    fn next(&mut self) -> Option<SpanLine> {
        let (line, request) = self.lines.next()?;
        let mut out = SpanLine { line, ..SpanLine::default() };
        let Some(request) = request else {
            out.skipped = 1;
            return Some(out);
        };
        for resource_spans in array(&request, "resourceSpans") {
            if let Some(resource) = resource_spans.get("resource") {
                out.resource = Some(attributes(resource));
            }
            for scope_spans in array(resource_spans, "scopeSpans") {
                for span in array(scope_spans, "spans") {
                    match read_span(span, self.file_rank) {
                        Some(record) => {
                            out.events.extend(array(span, "events").iter().map(|event| SpanEventRecord {
                                file_rank: self.file_rank,
                                span_name: record.name.clone(),
                                name: event.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                                time_unix_nano: event.get("timeUnixNano").and_then(exact_nanos).unwrap_or(0),
                                attributes: attributes(event),
                            }));
                            out.spans.push(record);
                        }
                        None => out.skipped += 1,
                    }
                }
            }
        }
        Some(out)
    }
}

impl<R: BufRead> Iterator for MetricLines<R> {
    type Item = MetricLine;

    fn next(&mut self) -> Option<MetricLine> {
        let (export, request) = self.lines.next()?;
        let mut out = MetricLine { export, ..MetricLine::default() };
        match request {
            Some(request) => read_request(&request, self.file_rank, &mut out),
            None => out.skipped = 1,
        }
        Some(out)
    }
}

/// A Unix time in nanoseconds, exactly from an integer string, else
/// through `f64`.
fn exact_nanos(value: &Value) -> Option<u64> {
    if let Some(exact) = value.as_str().and_then(|s| s.trim().parse::<u64>().ok()).or_else(|| value.as_u64()) {
        return Some(exact);
    }
    let time = number(value)?;
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a Unix time in nanoseconds")]
    (time.is_finite() && time >= 0.0).then_some(time as u64)
}

fn read_span(span: &Value, file_rank: u32) -> Option<SpanRecord> {
    // Through f64 a Unix time in nanoseconds keeps ~0.25 µs: enough for
    // intervals; an integer string is read exactly.
    let start_unix_nano = exact_nanos(span.get("startTimeUnixNano")?)?;
    let end_unix_nano = exact_nanos(span.get("endTimeUnixNano")?)?.max(start_unix_nano);
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
    Ok(read_metric_lines(BufReader::new(File::open(path)?), file_rank))
}

/// Reads OTLP/JSON metric lines from `reader`, all at once (see
/// [`metric_lines`] to read them one line at a time).
pub fn read_metric_lines(reader: impl BufRead, file_rank: u32) -> MetricFile {
    let mut file = MetricFile::default();
    for line in metric_lines(reader, file_rank) {
        file.skipped += line.skipped;
        file.points.extend(line.points);
    }
    file
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn read_request(request: &Value, file_rank: u32, line: &mut MetricLine) {
    for resource_metrics in array(request, "resourceMetrics") {
        if let Some(resource) = resource_metrics.get("resource") {
            line.resource = Some(attributes(resource));
        }
        for scope_metrics in array(resource_metrics, "scopeMetrics") {
            for metric in array(scope_metrics, "metrics") {
                let name = metric.get("name").and_then(Value::as_str).unwrap_or("");
                let data = metric.get("gauge").or_else(|| metric.get("sum"));
                for point in data.map_or(&[][..], |d| array(d, "dataPoints")) {
                    match read_point(point) {
                        Some((attributes, time_unix_nano, value)) => line.points.push(MetricPoint {
                            file_rank,
                            export: line.export,
                            metric: name.to_string(),
                            attributes,
                            time_unix_nano,
                            start_time_unix_nano: point.get("startTimeUnixNano").and_then(exact_nanos).unwrap_or(0),
                            value,
                        }),
                        None => line.skipped += 1,
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
