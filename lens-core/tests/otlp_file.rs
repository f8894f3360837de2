//! lens-core's reader of `file` exports, read one line at a time
//! (`otlp_file::{metric_lines, span_lines}`): what each line yields, what a
//! damaged line yields, and that an item holds one line's data whatever the
//! file's length.

use lens_core::otlp_file::{AttributeValue, metric_lines, read_span_lines, span_lines};

/// One metrics line: a gauge point of `rank` at `iteration`, under run `run`.
fn metric_line(run: &str, rank: i64, iteration: i64) -> String {
    format!(
        concat!(
            r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"nemo.run.id","value":{{"stringValue":"{}"}}}}]}},"#,
            r#""scopeMetrics":[{{"metrics":[{{"name":"it","gauge":{{"dataPoints":[{{"attributes":[{{"key":"dl.rank","#,
            r#""value":{{"intValue":"{}"}}}}],"timeUnixNano":"{}","asInt":"{}"}}]}}}}]}}]}}]}}"#
        ),
        run, rank, iteration, iteration
    )
}

/// One traces line: a span with a hang event.
fn span_line(iteration: i64) -> String {
    format!(
        concat!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"lens.config.prefix","value":{{"stringValue":"MYJOB_OTEL"}}}}]}},"#,
            r#""scopeSpans":[{{"spans":[{{"name":"step","startTimeUnixNano":"{}","endTimeUnixNano":"{}","#,
            r#""events":[{{"name":"dl.training.hang_suspected","timeUnixNano":"{}","attributes":["#,
            r#"{{"key":"dl.phase","value":{{"stringValue":"backward"}}}}]}}]}}]}}]}}]}}"#
        ),
        iteration * 10,
        iteration * 10 + 5,
        iteration * 10 + 4
    )
}

#[test]
fn each_metrics_line_yields_its_resource_and_points_and_a_damaged_line_is_counted() {
    let text = format!("{}\n\n{}\n{{\"resourceMetrics\":[{{\"trunc", metric_line("a", 1, 5), metric_line("b", 1, 6));
    let lines: Vec<_> = metric_lines(text.as_bytes(), 1).collect();
    assert_eq!(lines.len(), 3, "blank lines yield nothing");
    assert_eq!(lines[0].resource.as_ref().unwrap()["nemo.run.id"], AttributeValue::String("a".into()));
    assert_eq!((lines[0].points[0].value, lines[0].points[0].export), (5.0, 0));
    // The blank line counts in the line index (the points' `export`).
    assert_eq!((lines[1].export, lines[1].points[0].export, lines[1].points[0].value), (2, 2, 6.0));
    assert_eq!((lines[2].skipped, lines[2].points.len(), lines[2].resource.is_none()), (1, 0, true));
}

#[test]
fn each_traces_line_yields_its_spans_and_their_events() {
    let text = format!("{}\nnot json\n", span_line(3));
    let lines: Vec<_> = span_lines(text.as_bytes(), 2).collect();
    assert_eq!(lines.len(), 2);
    let event = &lines[0].events[0];
    assert_eq!(
        (event.name.as_str(), event.span_name.as_str(), event.time_unix_nano, event.file_rank),
        ("dl.training.hang_suspected", "step", 34, 2)
    );
    assert_eq!(event.attributes["dl.phase"], AttributeValue::String("backward".into()));
    assert_eq!(lines[0].resource.as_ref().unwrap()["lens.config.prefix"], AttributeValue::String("MYJOB_OTEL".into()));
    assert_eq!(lines[1].skipped, 1);
    // The collecting reader gives the same spans and count.
    let file = read_span_lines(text.as_bytes(), 2);
    assert_eq!((file.spans.len(), file.skipped), (1, 1));
}

#[test]
fn an_item_holds_one_lines_data_whatever_the_files_length() {
    // N and 10N lines: every item holds exactly one point (one line's), and
    // the reader yields them one by one (the largest item does not grow).
    for lines in [50, 500] {
        let text: String = (0..lines).map(|i| metric_line("r", 0, i) + "\n").collect();
        let mut largest = 0;
        let mut count = 0;
        for line in metric_lines(text.as_bytes(), 0) {
            largest = largest.max(line.points.len());
            count += 1;
        }
        assert_eq!((largest, count), (1, lines as usize));
        let mut largest = 0;
        let spans: String = (0..lines).map(|i| span_line(i) + "\n").collect();
        for line in span_lines(spans.as_bytes(), 0) {
            largest = largest.max(line.spans.len() + line.events.len());
        }
        assert_eq!(largest, 2);
    }
}
