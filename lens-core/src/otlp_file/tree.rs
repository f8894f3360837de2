//! The spans of a `traces-rank<N>.jsonl` file with everything that makes
//! them a tree: trace, span and parent ids, the instrumentation scope, the
//! status and the links, and the attributes as plain JSON values (arrays and
//! maps kept). Where [`super::SpanRecord`] is for interval analyses, a
//! [`TreeSpan`] is for viewers that rebuild the traces (the simulator's
//! `trace-view`, for one).
//!
//! The rank of a span is its resource's `dl.rank`, else the rank in the file
//! name ([`traces_file_rank`]), else the one the caller gives. Bad input
//! never panics: a line that is not an OTLP/JSON traces request is counted
//! in [`SpanTree::malformed_lines`], a span without ids or times in
//! [`SpanTree::malformed_spans`]; only an I/O error stops the reading.
//!
//! ```
//! use lens_core::otlp_file::tree::SpanTree;
//!
//! let line = r#"{"resourceSpans":[{"resource":{"attributes":[
//!     {"key":"dl.rank","value":{"intValue":"1"}}]},
//!   "scopeSpans":[{"scope":{"name":"megatron"},"spans":[
//!     {"traceId":"AB","spanId":"01","name":"megatron.train.iteration",
//!      "startTimeUnixNano":"1000","endTimeUnixNano":"3000",
//!      "attributes":[{"key":"megatron.iteration","value":{"intValue":"7"}}],
//!      "links":[{"traceId":"cd","spanId":"02"}]}]}]}]}"#;
//! let line = line.replace('\n', ""); // one export request a line
//! let mut tree = SpanTree::default();
//! tree.read_lines(format!("{line}\nnot json\n").as_bytes(), 0).unwrap();
//! let span = &tree.spans[0];
//! assert_eq!((span.rank, span.trace_id.as_str(), span.scope.as_str()), (1, "ab", "megatron"));
//! assert_eq!(span.end_unix_nano - span.start_unix_nano, 2000);
//! assert_eq!(span.attributes["megatron.iteration"], 7);
//! assert_eq!(span.links[0].span_id, "02");
//! assert_eq!(tree.malformed_lines, 1);
//! ```

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde_json::{Map, Value};

/// One span, with its place in its trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeSpan {
    /// The rank: the resource's `dl.rank`, else the file's.
    pub rank: u32,
    /// The trace id, lower-case hex.
    pub trace_id: String,
    /// The span id, lower-case hex.
    pub span_id: String,
    /// The parent's span id (lower-case hex), `None` for a root.
    pub parent_span_id: Option<String>,
    /// The span name.
    pub name: String,
    /// The instrumentation scope's name (empty when absent).
    pub scope: String,
    /// `startTimeUnixNano`.
    pub start_unix_nano: u64,
    /// `endTimeUnixNano` (never before the start).
    pub end_unix_nano: u64,
    /// The attributes as plain JSON values (`{"intValue": "5"}` is `5`).
    pub attributes: Map<String, Value>,
    /// The status, when it is not the default (unset, no message).
    pub status: Option<SpanStatus>,
    /// The spans it links to.
    pub links: Vec<SpanLink>,
}

/// A span's status as the file holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanStatus {
    /// The OTLP status code: 0 unset, 1 ok, 2 error.
    pub code: i64,
    /// The message (may be empty).
    pub message: String,
}

/// A link to another span.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpanLink {
    /// The linked span's trace id, lower-case hex.
    pub trace_id: String,
    /// The linked span's id, lower-case hex.
    pub span_id: String,
}

/// The spans read from one or more traces files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpanTree {
    /// The spans, in file order.
    pub spans: Vec<TreeSpan>,
    /// Lines that were not an OTLP/JSON traces request.
    pub malformed_lines: usize,
    /// Spans without ids or times.
    pub malformed_spans: usize,
    /// The `nemo.run.id` values of the resources read (more than one: the
    /// files hold several runs).
    pub run_ids: BTreeSet<String>,
    /// The attributes of the last resource read (the program's
    /// `lens.config.prefix` and `lens.span_groups`, its `service.name`).
    pub resource: Map<String, Value>,
    /// Whether the resources read differ in those three: runs of several
    /// programs, or of one with other span groups (`resource` is then one
    /// of them only).
    pub programs_differ: bool,
}

/// The resource attributes that say which program, and which span groups.
const PROGRAM_KEYS: [&str; 3] =
    [crate::semconv::LENS_CONFIG_PREFIX, crate::semconv::LENS_SPAN_GROUPS, crate::semconv::SERVICE_NAME];

/// The rank in a `traces-rank<N>.jsonl` file name.
///
/// ```
/// use std::path::Path;
/// use lens_core::otlp_file::tree::traces_file_rank;
///
/// assert_eq!(traces_file_rank(Path::new("telemetry/run/traces-rank3.jsonl")), Some(3));
/// assert_eq!(traces_file_rank(Path::new("metrics-rank3.jsonl")), None);
/// ```
pub fn traces_file_rank(path: &Path) -> Option<u32> {
    super::rank_in_name(path, "traces-rank")
}

impl SpanTree {
    /// Adds the spans of the traces file at `path`; spans whose resource
    /// has no `dl.rank` get the rank in the file name, else
    /// `fallback_rank`.
    ///
    /// ```no_run
    /// use lens_core::otlp_file::tree::SpanTree;
    ///
    /// let mut tree = SpanTree::default();
    /// tree.read_file("telemetry/run/traces-rank0.jsonl".as_ref(), 0)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_file(&mut self, path: &Path, fallback_rank: u32) -> io::Result<()> {
        let rank = traces_file_rank(path).unwrap_or(fallback_rank);
        self.read_lines(BufReader::new(File::open(path)?), rank)
    }

    /// Adds the spans of OTLP/JSON trace lines from `reader` (one
    /// `ExportTraceServiceRequest` a line, blank lines ignored; a line need
    /// not be UTF-8 to be counted as malformed). See the module example.
    pub fn read_lines(&mut self, mut reader: impl BufRead, fallback_rank: u32) -> io::Result<()> {
        let mut line = Vec::new();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                return Ok(());
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Value>(&line) {
                Ok(request) if request.get("resourceSpans").is_some_and(Value::is_array) => {
                    self.read_request(&request, fallback_rank);
                }
                _ => self.malformed_lines += 1,
            }
        }
    }

    fn read_request(&mut self, request: &Value, fallback_rank: u32) {
        for resource_spans in array(request, "resourceSpans") {
            let resource = attributes(resource_spans.get("resource").map_or(&[], |r| array(r, "attributes")));
            let rank = resource
                .get("dl.rank")
                .and_then(Value::as_i64)
                .and_then(|rank| u32::try_from(rank).ok())
                .unwrap_or(fallback_rank);
            if let Some(run_id) = resource.get(crate::semconv::NEMO_RUN_ID).and_then(Value::as_str) {
                self.run_ids.insert(run_id.to_string());
            }
            if !resource.is_empty() {
                if !self.resource.is_empty()
                    && PROGRAM_KEYS.iter().any(|key| self.resource.get(*key) != resource.get(*key))
                {
                    self.programs_differ = true;
                }
                self.resource = resource;
            }
            for scope_spans in array(resource_spans, "scopeSpans") {
                let scope = scope_spans.get("scope").and_then(|s| s.get("name")).and_then(Value::as_str).unwrap_or("");
                for span in array(scope_spans, "spans") {
                    match read_span(span, rank, scope) {
                        Some(span) => self.spans.push(span),
                        None => self.malformed_spans += 1,
                    }
                }
            }
        }
    }
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn read_span(span: &Value, rank: u32, scope: &str) -> Option<TreeSpan> {
    let id = |key: &str| span.get(key).and_then(Value::as_str).filter(|id| !id.is_empty()).map(str::to_ascii_lowercase);
    let start_unix_nano = nanos(span.get("startTimeUnixNano")?)?;
    let end_unix_nano = nanos(span.get("endTimeUnixNano")?)?.max(start_unix_nano);
    let status = span.get("status").and_then(|status| {
        let code = status.get("code").and_then(integer).unwrap_or(0);
        let message = status.get("message").and_then(Value::as_str).unwrap_or("");
        (code != 0 || !message.is_empty()).then(|| SpanStatus { code, message: message.to_string() })
    });
    let links = array(span, "links")
        .iter()
        .filter_map(|link| {
            let trace_id = link.get("traceId")?.as_str()?.to_ascii_lowercase();
            let span_id = link.get("spanId")?.as_str()?.to_ascii_lowercase();
            Some(SpanLink { trace_id, span_id })
        })
        .collect();
    Some(TreeSpan {
        rank,
        trace_id: id("traceId")?,
        span_id: id("spanId")?,
        parent_span_id: id("parentSpanId"),
        name: span.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
        scope: scope.to_string(),
        start_unix_nano,
        end_unix_nano,
        attributes: attributes(array(span, "attributes")),
        status,
        links,
    })
}

/// A 64-bit integer as OTLP/JSON writes it: a decimal string or a number.
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::String(text) => text.trim().parse().ok(),
        Value::Number(number) => number.as_i64(),
        _ => None,
    }
}

/// A Unix time in nanoseconds: a decimal string or a number.
fn nanos(value: &Value) -> Option<u64> {
    match value {
        Value::String(text) => text.trim().parse().ok(),
        Value::Number(number) => number.as_u64().or_else(|| {
            let float = number.as_f64()?;
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "checked finite and non-negative"
            )]
            (float.is_finite() && float >= 0.0).then_some(float as u64)
        }),
        _ => None,
    }
}

/// OTLP `KeyValue`s as a JSON object of plain values.
fn attributes(list: &[Value]) -> Map<String, Value> {
    list.iter()
        .filter_map(|kv| Some((kv.get("key")?.as_str()?.to_string(), kv.get("value").map_or(Value::Null, any_value))))
        .collect()
}

/// An OTLP `AnyValue` (`{"stringValue": ...}`, `{"intValue": "5"}`, ...) as
/// a plain JSON value.
fn any_value(value: &Value) -> Value {
    let Some(object) = value.as_object() else { return Value::Null };
    if let Some(int) = object.get("intValue") {
        return integer(int).map_or_else(|| int.clone(), Value::from);
    }
    if let Some(array) = object.get("arrayValue") {
        return Value::Array(
            array.get("values").and_then(Value::as_array).map_or_else(Vec::new, |v| v.iter().map(any_value).collect()),
        );
    }
    if let Some(list) = object.get("kvlistValue") {
        return Value::Object(attributes(list.get("values").and_then(Value::as_array).map_or(&[], Vec::as_slice)));
    }
    ["stringValue", "doubleValue", "boolValue", "bytesValue"]
        .iter()
        .find_map(|key| object.get(*key).cloned())
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn otlp_values_become_plain_json() {
        assert_eq!(any_value(&json!({"intValue": "42"})), json!(42));
        assert_eq!(any_value(&json!({"intValue": 42})), json!(42));
        assert_eq!(any_value(&json!({"stringValue": "x"})), json!("x"));
        assert_eq!(any_value(&json!({"boolValue": true})), json!(true));
        assert_eq!(any_value(&json!({"doubleValue": 1.5})), json!(1.5));
        assert_eq!(
            any_value(&json!({"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "a"}]}})),
            json!([1, "a"])
        );
        assert_eq!(nanos(&json!("1700000000000000123")), Some(1_700_000_000_000_000_123));
        assert_eq!(nanos(&json!(1_700_000_000_000_000_123_u64)), Some(1_700_000_000_000_000_123));
        assert_eq!(nanos(&json!(-1)), None);
        assert_eq!(nanos(&json!("soon")), None);
    }

    #[test]
    fn spans_without_ids_or_times_and_lines_that_are_not_requests_are_counted() {
        let lines = concat!(
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":["#,
            r#"{"spanId":"01","startTimeUnixNano":"1","endTimeUnixNano":"2"},"#,
            r#"{"traceId":"ab","spanId":"02","startTimeUnixNano":"5","endTimeUnixNano":"4","#,
            r#""status":{"code":2,"message":"boom"}}]}]}]}"#,
            "\n\n",
            r#"{"resourceMetrics":[]}"#,
            "\n"
        );
        let mut tree = SpanTree::default();
        tree.read_lines([lines.as_bytes(), b"\xff\n"].concat().as_slice(), 4).unwrap();
        assert_eq!((tree.malformed_spans, tree.malformed_lines), (1, 2));
        let span = &tree.spans[0];
        assert_eq!((span.rank, span.start_unix_nano, span.end_unix_nano), (4, 5, 5), "end clamped to the start");
        assert_eq!(span.status, Some(SpanStatus { code: 2, message: "boom".into() }));
        assert_eq!(span.parent_span_id, None);
    }
}
