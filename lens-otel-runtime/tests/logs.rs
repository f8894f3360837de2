//! The log bridge as a user sees it: a `log::info!` inside a span becomes an
//! OpenTelemetry log record that carries the span's trace and span ids.
//!
//! This binary owns the process's `log` logger, so every check runs in one
//! test function, in order.

use lens_otel_runtime::logs::{LogBridgeError, install_log_bridge, uninstall_log_bridge};
use opentelemetry::Context;
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry_sdk::logs::{InMemoryLogExporter, SdkLoggerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

fn bodies(exporter: &InMemoryLogExporter) -> Vec<String> {
    exporter.get_emitted_logs().expect("exporter is up").iter().map(|log| format!("{:?}", log.record.body())).collect()
}

#[test]
fn bridged_records_correlate_with_the_current_span() {
    let spans = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
    let tracer = tracer_provider.tracer("test");

    let logs = InMemoryLogExporter::default();
    let logger_provider = SdkLoggerProvider::builder().with_simple_exporter(logs.clone()).build();
    install_log_bridge(&logger_provider, log::LevelFilter::Info).expect("no other logger");

    // Inside an active span: the record carries its ids.
    let span = tracer.start("megatron.train");
    let span_context = span.span_context().clone();
    {
        let _active = Context::current_with_span(span).attach();
        log::info!(answer = 42; "inside the span");
        log::debug!("below the level");
        log::info!(target: "hyper_util::client", "the transport's own record");
    }
    log::warn!("outside any span");

    let emitted = logs.get_emitted_logs().expect("exporter is up");
    assert_eq!(emitted.len(), 2, "{:?}", bodies(&logs));
    let inside = &emitted[0].record;
    assert!(format!("{:?}", inside.body()).contains("inside the span"));
    let trace = inside.trace_context().expect("the record carries the span's context");
    assert_eq!(trace.trace_id, span_context.trace_id());
    assert_eq!(trace.span_id, span_context.span_id());
    assert_eq!(inside.severity_text(), Some("INFO"));
    assert!(inside.attributes_iter().any(|(key, _)| key.as_str() == "answer"));
    let outside = &emitted[1].record;
    assert!(format!("{:?}", outside.body()).contains("outside any span"));
    assert!(outside.trace_context().is_none());

    // A second lifetime bridges to its own provider.
    let second_logs = InMemoryLogExporter::default();
    let second_provider = SdkLoggerProvider::builder().with_simple_exporter(second_logs.clone()).build();
    install_log_bridge(&second_provider, log::LevelFilter::Debug).expect("lens's own logger is replaced");
    log::debug!("second lifetime");
    assert_eq!(bodies(&logs).len(), 2, "the first provider gets nothing more");
    assert_eq!(bodies(&second_logs).len(), 1);

    // Uninstalled: records go nowhere.
    assert!(uninstall_log_bridge());
    log::error!("after uninstall");
    assert_eq!(bodies(&second_logs).len(), 1);
    assert!(!uninstall_log_bridge());
}

/// Set on the child process that [`another_logger_is_reported_not_replaced`]
/// starts: that process installs a logger of its own first.
const CHILD: &str = "LENS_TEST_LOG_BRIDGE_CHILD";

/// A logger that is not lens's, counting what it receives.
struct Counting(std::sync::atomic::AtomicUsize);

impl log::Log for Counting {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, _: &log::Record<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn flush(&self) {}
}

static COUNTING: Counting = Counting(std::sync::atomic::AtomicUsize::new(0));

#[test]
fn another_logger_is_reported_not_replaced() {
    if std::env::var_os(CHILD).is_some() {
        log::set_logger(&COUNTING).expect("the child's first logger");
        log::set_max_level(log::LevelFilter::Info);
        let provider = SdkLoggerProvider::builder().with_simple_exporter(InMemoryLogExporter::default()).build();
        let error = install_log_bridge(&provider, log::LevelFilter::Info).expect_err("a logger exists");
        assert_eq!(error, LogBridgeError::OtherLoggerInstalled);
        let message = error.to_string();
        assert!(message.contains("LOGS_ENABLED") && message.contains("another logger"), "{message}");
        log::info!("still the user's logger");
        assert_eq!(COUNTING.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        return;
    }

    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "another_logger_is_reported_not_replaced", "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the child test process");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("child status") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().expect("kill the child");
            panic!("the child test process did not finish within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // The child writes a few lines only, well under a pipe's buffer.
    let mut output = String::new();
    for pipe in [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut pipe = pipe;
        std::io::Read::read_to_string(&mut pipe, &mut output).expect("child output");
    }
    assert!(status.success(), "child failed: {output}");
}
