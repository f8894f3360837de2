//! Shared by the test binaries: temporary directories, the `lens` binary,
//! and OTLP/JSON lines written by hand.

use std::path::Path;
use std::process::{Command, Output, Stdio};

#[path = "../../../megatron-train-sim/tests/support/temp_dir.rs"]
mod temp_dir;
pub(crate) use temp_dir::TempDir;

/// The `lens` binary cargo built for these tests.
pub(crate) const LENS: &str = env!("CARGO_BIN_EXE_lens");

/// A fresh, empty directory under the system's temporary directory,
/// removed when the test passes.
pub(crate) fn temp_dir(name: &str) -> TempDir {
    TempDir::fresh("lens-command", name)
}

/// Runs `lens <args>`: (exit code, stdout, stderr).
pub(crate) fn lens(args: &[&Path]) -> (i32, String, String) {
    let output: Output = Command::new(LENS).args(args).stdin(Stdio::null()).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// An OTLP/JSON attribute list from (key, JSON value) pairs, where the
/// value is already an `AnyValue` (`{"intValue":"3"}`).
pub(crate) fn attributes(pairs: &[(&str, String)]) -> String {
    let items: Vec<String> = pairs.iter().map(|(key, value)| format!(r#"{{"key":"{key}","value":{value}}}"#)).collect();
    format!("[{}]", items.join(","))
}

/// `{"stringValue": ...}`.
pub(crate) fn string(value: &str) -> String {
    format!(r#"{{"stringValue":"{value}"}}"#)
}

/// `{"intValue": ...}`.
pub(crate) fn int(value: i64) -> String {
    format!(r#"{{"intValue":"{value}"}}"#)
}

/// `{"doubleValue": ...}`.
pub(crate) fn double(value: f64) -> String {
    format!(r#"{{"doubleValue":{value}}}"#)
}

/// One gauge metric with one point.
pub(crate) fn gauge(name: &str, point_attributes: &str, time: u64, value: f64) -> String {
    format!(
        r#"{{"name":"{name}","gauge":{{"dataPoints":[{{"attributes":{point_attributes},"timeUnixNano":"{time}","asDouble":{value}}}]}}}}"#
    )
}

/// One metrics line (an `ExportMetricsServiceRequest`).
pub(crate) fn metrics_line(resource: &str, metrics: &[String]) -> String {
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":{resource}}},"scopeMetrics":[{{"metrics":[{}]}}]}}]}}"#,
        metrics.join(",")
    ) + "\n"
}

/// One span (with optional events, already JSON).
pub(crate) fn span(
    name: &str,
    id: &str,
    parent: Option<&str>,
    start: u64,
    end: u64,
    attributes: &str,
    events: &str,
) -> String {
    let parent = parent.map_or_else(String::new, |p| format!(r#""parentSpanId":"{p}","#));
    format!(
        r#"{{"traceId":"0102","spanId":"{id}",{parent}"name":"{name}","startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":{attributes},"events":[{events}]}}"#
    )
}

/// One traces line (an `ExportTraceServiceRequest`).
pub(crate) fn traces_line(resource: &str, spans: &[String]) -> String {
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":{resource}}},"scopeSpans":[{{"scope":{{"name":"test"}},"spans":[{}]}}]}}]}}"#,
        spans.join(",")
    ) + "\n"
}
