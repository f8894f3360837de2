//! The bridge against a real SDK tracer with an in-memory exporter: which
//! `tracing` spans are recorded, how they nest with lens's spans, their
//! attributes and events, per-entry spans, remote parents, and that a
//! disabled group leaves the callsite to the other layers.
//!
//! The active tracer and the group gate are process-global, so the tests take
//! a lock. Run with `cargo test -p lens-tracing --features testing --test bridge`.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lens_fallbacks::KeyValue;
use lens_fallbacks::groups::{GroupSet, LENS_CATALOG, SpanGroup};
use lens_fallbacks::otel::active;
use lens_fallbacks::propagation::RemoteContext;
use lens_fallbacks::span::{add_event_to_current, managed_span};
use lens_fallbacks::testing::{Capture, capture, set_enabled_span_groups};
use lens_fallbacks::tracing_rules::TracingRules;
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt as _;

static LOCK: Mutex<()> = Mutex::new(());

/// The tracer the bridge records on.
#[derive(Clone, Copy, Debug)]
enum Tracer {
    /// lens's span recorder, as setup installs it (`testing::capture`):
    /// spans kept in the registry, made current on lens's stack.
    Recorder,
    /// An SDK tracer installed alone: spans in OpenTelemetry contexts.
    Sdk,
}

/// Every test runs on both.
const TRACERS: [Tracer; 2] = [Tracer::Recorder, Tracer::Sdk];

/// A tracer installed for one run of a test, exporting to memory; removed
/// when dropped.
struct Setup {
    exporter: Option<InMemorySpanExporter>,
    capture: Option<Capture>,
    _lock: MutexGuard<'static, ()>,
}

impl Setup {
    fn spans(&self) -> Vec<SpanData> {
        match (&self.capture, &self.exporter) {
            (Some(capture), _) => capture.finished_spans(),
            (None, Some(exporter)) => exporter.get_finished_spans().unwrap(),
            (None, None) => unreachable!("a setup has a capture or an exporter"),
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if self.exporter.is_some() {
            set_enabled_span_groups(GroupSet::EMPTY);
            active::uninstall();
        }
    }
}

fn setup(tracer: Tracer, groups: &[SpanGroup]) -> Setup {
    let lock = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    match tracer {
        Tracer::Recorder => Setup { exporter: None, capture: Some(capture(groups)), _lock: lock },
        Tracer::Sdk => {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
            active::install(provider.tracer("lens-tracing-test")).expect("no tracer is installed yet");
            set_enabled_span_groups(GroupSet::of(groups));
            Setup { exporter: Some(exporter), capture: None, _lock: lock }
        }
    }
}

fn rules(spec: &str) -> TracingRules {
    TracingRules::parse(spec, &LENS_CATALOG).unwrap()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name} in {:?}", names(spans)))
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|s| s.name.to_string()).collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
}

#[test]
fn tracing_and_lens_spans_nest_both_ways_in_one_trace() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::JOB, SpanGroup::STEP]);
        let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job")));
        tracing::subscriber::with_default(subscriber, || {
            let _outer = managed_span(SpanGroup::STEP, "lens.outer", []);
            let request = tracing::info_span!(target: "my_app::server", "request");
            let _entered = request.enter();
            let _inner = managed_span(SpanGroup::STEP, "lens.inner", []);
        });
        let spans = setup.spans();
        let (outer, request, inner) =
            (named(&spans, "lens.outer"), named(&spans, "request"), named(&spans, "lens.inner"));
        assert_eq!(request.parent_span_id, outer.span_context.span_id(), "the tracing span is the lens span's child");
        assert_eq!(inner.parent_span_id, request.span_context.span_id(), "the lens span is the tracing span's child");
        assert_eq!(inner.span_context.trace_id(), outer.span_context.trace_id());
    }
}

#[test]
fn fields_become_attributes_record_adds_them_and_events_become_span_events() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::JOB]);
        let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job")));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: "my_app", "handle", user = "ada", retries = 2_u64, status = tracing::field::Empty);
            let _entered = span.enter();
            tracing::warn!(target: "my_app", attempt = 3, "slow backend");
            span.record("status", 200);
        });
        let spans = setup.spans();
        let span = named(&spans, "handle");
        assert_eq!(attribute(span, "user").as_deref(), Some("ada"));
        assert_eq!(attribute(span, "retries").as_deref(), Some("2"));
        assert_eq!(attribute(span, "status").as_deref(), Some("200"));
        let event = span.events.iter().next().expect("the event is on the span");
        assert_eq!(event.name, "slow backend");
        let event_attr =
            |key: &str| event.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string());
        assert_eq!(event_attr("attempt").as_deref(), Some("3"));
        assert_eq!(event_attr("level").as_deref(), Some("WARN"));
    }
}

#[test]
fn a_span_entered_1000_times_with_per_entry_recording_gives_1000_spans() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::STEP]);
        let subscriber =
            tracing_subscriber::registry().with(lens_tracing::layer(rules("candle=step:per_entry, my_app=step")));
        tracing::subscriber::with_default(subscriber, || {
            // A layer span made once, as candle does, and entered on every forward pass.
            let layer_span = tracing::info_span!(target: "candle::nn", "linear", layer = 3);
            let by_field = tracing::info_span!(target: "my_app", "block", lens.per_entry = true);
            for _ in 0..1000 {
                let _pass = managed_span(SpanGroup::STEP, "forward", []);
                let _entered = layer_span.enter();
            }
            for _ in 0..5 {
                let _entered = by_field.enter();
            }
        });
        let spans = setup.spans();
        let layer_spans: Vec<&SpanData> = spans.iter().filter(|s| s.name == "linear").collect();
        assert_eq!(layer_spans.len(), 1000);
        assert_eq!(spans.iter().filter(|s| s.name == "block").count(), 5);
        // Each entry is a child of the forward pass it ran in.
        let forwards: Vec<SpanId> =
            spans.iter().filter(|s| s.name == "forward").map(|s| s.span_context.span_id()).collect();
        assert!(layer_spans.iter().all(|s| forwards.contains(&s.parent_span_id)));
        assert_eq!(attribute(layer_spans[999], "layer").as_deref(), Some("3"));
    }
}

/// Counts how often `tracing` formats it: only a layer that records the
/// callsite does.
struct Probe(Arc<AtomicUsize>);

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fetch_add(1, Ordering::Relaxed);
        f.write_str("probe")
    }
}

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_disabled_groups_callsite_is_never_called_into_yet_fmt_beside_the_bridge_prints_it() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::JOB]);
        let calls = Arc::new(AtomicUsize::new(0));
        let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules("h2=off, my_app=step")));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..3 {
                let span = tracing::info_span!(target: "h2::proto", "stream", probe = ?Probe(calls.clone()));
                assert!(span.is_disabled(), "an off target's span is disabled like a filtered-out callsite");
                let span = tracing::info_span!(target: "my_app", "step", probe = ?Probe(calls.clone()));
                assert!(span.is_disabled(), "a disabled group's span is disabled like a filtered-out callsite");
                tracing::info!(target: "my_app", probe = ?Probe(calls.clone()), "event");
            }
        });
        assert_eq!(calls.load(Ordering::Relaxed), 0, "the disabled callsites' fields were never evaluated");

        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry()
            .with(lens_tracing::layer(rules("my_app=step")))
            .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(move || writer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: "my_app", "step");
            let _entered = span.enter();
            tracing::info!(target: "my_app", "printed by fmt");
        });
        let printed = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert!(printed.contains("printed by fmt") && printed.contains("step"), "{printed}");
        assert!(setup.spans().is_empty(), "the bridge recorded nothing: {:?}", names(&setup.spans()));
    }
}

#[test]
fn changing_the_enabled_groups_rebuilds_the_interest_cache() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[]);
        let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=step")));
        // As in a job: the subscriber is the default while setup and shutdown
        // change the groups, and one callsite is hit in every phase.
        tracing::subscriber::with_default(subscriber, || {
            let open = || drop(tracing::info_span!(target: "my_app", "lifetime"));
            open(); // before setup: off
            set_enabled_span_groups(GroupSet::of(&[SpanGroup::STEP]));
            open(); // first lifetime: on
            set_enabled_span_groups(GroupSet::EMPTY);
            open(); // shutdown: off
            set_enabled_span_groups(GroupSet::of(&[SpanGroup::STEP]));
            open(); // second lifetime: on again
        });
        assert_eq!(setup.spans().len(), 2);
    }
}

#[test]
fn a_lens_group_field_decides_per_span() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::CHECKPOINT]);
        let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules("")));
        tracing::subscriber::with_default(subscriber, || {
            for group in ["checkpoint", "step", "nope"] {
                drop(tracing::info_span!(target: "my_app", "save", lens.group = group));
            }
            drop(tracing::info_span!(target: "lens::checkpoint", "by_target"));
            drop(tracing::info_span!(target: "my_app", "unruled"));
        });
        let spans = setup.spans();
        assert_eq!(names(&spans), ["save", "by_target"], "only the enabled group's spans");
        assert_eq!(attribute(&spans[0], "lens.group"), None, "the control field is not an attribute");
    }
}

#[test]
fn set_parent_joins_a_remote_trace_and_context_of_propagates_a_span() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::JOB]);
        let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job")));
        let carrier = std::collections::HashMap::from([(
            "traceparent".to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
        )]);
        let remote = lens_fallbacks::propagation::extract_context(&carrier);
        assert!(remote.is_valid());
        let mut propagated = RemoteContext::none();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: "my_app", "server_request");
            lens_tracing::set_parent(&span, &remote);
            let _entered = span.enter();
            propagated = lens_tracing::context_of(&span);
        });
        let spans = setup.spans();
        let span = named(&spans, "server_request");
        assert_eq!(span.span_context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(span.parent_span_id.to_string(), "00f067aa0ba902b7");
        assert_eq!(propagated.span_id_hex(), Some(span.span_context.span_id().to_string()));
    }
}

#[test]
fn nothing_on_lens_s_export_path_is_recorded_and_a_thread_s_name_does_not_matter() {
    for tracer in TRACERS {
        use lens_fallbacks::export_path::{ExportScope, mark_thread};

        let setup = setup(tracer, &[SpanGroup::JOB]);
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(lens_tracing::layer(rules("*=job"))));
        let on_thread = |name: &str, work: fn()| {
            let dispatch = dispatch.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || tracing::dispatcher::with_default(&dispatch, work))
                .unwrap()
                .join()
                .unwrap();
        };
        // A job's thread is recorded whatever its name, lens's prefix included.
        on_thread("lens-user", || {
            drop(tracing::info_span!(target: "h2::proto", "send", otel.name = "lens-user").entered())
        });
        // reqwest's blocking-client thread (the OTLP/HTTP exporter's) and a
        // thread lens marks are never recorded.
        on_thread("reqwest-internal-sync-runtime", || {
            drop(tracing::info_span!(target: "hyper_util", "send", otel.name = "reqwest").entered());
        });
        on_thread("user", || {
            mark_thread();
            drop(tracing::info_span!(target: "h2::proto", "send", otel.name = "marked").entered());
        });
        // While an export runs on a job's thread inside a recorded span: neither
        // its spans nor its events; before and after, the job's are.
        on_thread("user", || {
            let job = tracing::info_span!(target: "my_app", "job").entered();
            {
                let _export = ExportScope::enter();
                drop(tracing::info_span!(target: "h2::proto", "send", otel.name = "in an export").entered());
                tracing::info!(target: "tower::buffer", "export event");
            }
            tracing::info!(target: "my_app", "job event");
            drop(job);
        });
        let spans = setup.spans();
        let mut recorded = names(&spans);
        recorded.sort();
        assert_eq!(recorded, ["job", "lens-user"]);
        let events: Vec<String> = named(&spans, "job").events.iter().map(|e| e.name.to_string()).collect();
        assert_eq!(events, ["job event"]);
    }
}

#[test]
fn otel_fields_name_the_span_and_give_its_kind_and_status() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::JOB]);
        let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job")));
        tracing::subscriber::with_default(subscriber, || {
            let route = "/v1/completions";
            let span = tracing::info_span!(
                target: "my_app",
                "request",
                otel.name = format!("POST {route}"),
                otel.kind = "server",
                otel.status_code = tracing::field::Empty,
                http.response.status_code = tracing::field::Empty,
            );
            let entered = span.enter();
            // Recorded after the span started, as a server does with the response.
            span.record("http.response.status_code", 503);
            span.record("otel.status_code", "error");
            drop(entered);
            // Before the span starts: the status waits for it.
            let early = tracing::info_span!(target: "my_app", "early", otel.status_code = "ok", otel.kind = "client");
            drop(early);
            // The description recorded in a call of its own, after the code
            // or before it, or alone (tracing-opentelemetry's field name too).
            for (name, calls) in [
                ("code then description", &[("otel.status_code", "error"), ("otel.status_description", "late")][..]),
                ("description then code", &[("otel.status_description", "late"), ("otel.status_code", "error")]),
                ("description alone", &[("otel.status_description", "late")]),
                ("message alone", &[("otel.status_message", "late")]),
                ("description then ok", &[("otel.status_description", "late"), ("otel.status_code", "ok")]),
            ] {
                let span = tracing::info_span!(
                    target: "my_app",
                    "described",
                    otel.name = name,
                    otel.status_code = tracing::field::Empty,
                    otel.status_description = tracing::field::Empty,
                    otel.status_message = tracing::field::Empty,
                );
                let entered = span.enter();
                for (field, value) in calls {
                    span.record(*field, *value);
                }
                drop(entered);
            }
        });
        let spans = setup.spans();
        let span = named(&spans, "POST /v1/completions");
        assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Server);
        assert!(matches!(span.status, opentelemetry::trace::Status::Error { .. }), "{:?}", span.status);
        assert_eq!(attribute(span, "http.response.status_code").as_deref(), Some("503"));
        let early = named(&spans, "early");
        assert_eq!(early.span_kind, opentelemetry::trace::SpanKind::Client);
        assert_eq!(early.status, opentelemetry::trace::Status::Ok);
        for span in [span, early] {
            assert!(span.attributes.iter().all(|kv| !kv.key.as_str().starts_with("otel.")), "{:?}", span.attributes);
        }
        for name in ["code then description", "description then code", "description alone", "message alone"] {
            let span = named(&spans, name);
            assert_eq!(span.status, opentelemetry::trace::Status::error("late"), "{name}");
            assert!(span.attributes.iter().all(|kv| !kv.key.as_str().starts_with("otel.")), "{:?}", span.attributes);
        }
        assert_eq!(named(&spans, "description then ok").status, opentelemetry::trace::Status::Ok);
    }
}

#[test]
fn events_no_recorded_span_takes_and_log_records_are_correlated_with_the_current_span() {
    for tracer in TRACERS {
        use lens_fallbacks::otel::logs::{EVENT_SCOPE, install_log_bridge, uninstall_log_bridge};
        use opentelemetry::logs::{AnyValue, Severity};
        use opentelemetry_sdk::logs::{InMemoryLogExporter, SdkLoggerProvider};

        let setup = setup(tracer, &[SpanGroup::JOB, SpanGroup::STEP]);
        let logs = InMemoryLogExporter::default();
        let provider = SdkLoggerProvider::builder().with_simple_exporter(logs.clone()).build();
        let _log_crate_bridge = install_log_bridge(&provider, log::LevelFilter::Info);
        let subscriber = tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job")));
        tracing::subscriber::with_default(subscriber, || {
            let _step = managed_span(SpanGroup::STEP, "lens.step", []);
            // Outside every tracing span: a log record in the lens span's trace.
            tracing::warn!(target: "my_app::loader", shard = 3, "shard is slow");
            // The `log` crate's records too (the lens span is on lens's own
            // stack, not in the OpenTelemetry context the SDK reads).
            log::warn!(target: "my_app::loader", "through the log crate");
            // Below the log pipeline's level, and at a target no group takes.
            tracing::debug!(target: "my_app::loader", "detail");
            tracing::warn!(target: "quiet", "not bridged");
            // Inside a recorded span: a span event, not a log record.
            let request = tracing::info_span!(target: "my_app", "request");
            let _entered = request.enter();
            tracing::info!(target: "my_app", "inside");
        });
        uninstall_log_bridge();
        tracing::subscriber::with_default(
            tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job"))),
            || tracing::warn!(target: "my_app", "after the pipeline is gone"),
        );
        let records = logs.get_emitted_logs().unwrap();
        let bodies: Vec<String> =
            records.iter().map(|r| r.record.body().map(|b| format!("{b:?}")).unwrap_or_default()).collect();
        assert_eq!(records.len(), 2, "{bodies:?}");
        let (record, scope) = (&records[0].record, &records[0].instrumentation);
        let through_log = &records[1].record;
        assert_eq!(through_log.body(), Some(&AnyValue::String("through the log crate".into())));
        assert_eq!(record.body(), Some(&AnyValue::String("shard is slow".into())));
        assert_eq!((record.severity_number(), record.severity_text()), (Some(Severity::Warn), Some("WARN")));
        assert_eq!(record.target().map(|t| t.to_string()).as_deref(), Some("my_app::loader"));
        assert_eq!(scope.name(), EVENT_SCOPE);
        let shard = record.attributes_iter().find(|(key, _)| key.as_str() == "shard").map(|(_, value)| value.clone());
        assert_eq!(shard, Some(AnyValue::Int(3)));
        let spans = setup.spans();
        let step = named(&spans, "lens.step");
        for record in [record, through_log] {
            let trace = record.trace_context().expect("the record is correlated");
            assert_eq!((trace.trace_id, trace.span_id), (step.span_context.trace_id(), step.span_context.span_id()));
        }
        let request = named(&spans, "request");
        assert_eq!(request.events.iter().map(|e| e.name.to_string()).collect::<Vec<_>>(), ["inside"]);
    }
}

#[test]
fn lens_s_current_span_edits_reach_an_entered_tracing_span_and_spans_may_close_on_another_thread() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::JOB, SpanGroup::STEP]);
        let dispatch =
            tracing::Dispatch::new(tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job"))));
        let handed_over = tracing::dispatcher::with_default(&dispatch, || {
            let step = managed_span(SpanGroup::STEP, "lens.step", []);
            let request = tracing::info_span!(target: "my_app", "request");
            {
                let _entered = request.enter();
                add_event_to_current("marked", [KeyValue::new("by", "lens")]);
            }
            // After the exit, lens's current span is the step again.
            add_event_to_current("on the step", []);
            let handed_over = tracing::info_span!(target: "my_app", "handed_over", item = 7);
            drop(step);
            handed_over
        });
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                let _entered = handed_over.enter();
                tracing::info!(target: "my_app", "on another thread");
            });
        })
        .join()
        .unwrap();
        let spans = setup.spans();
        let (step, request, handed_over) =
            (named(&spans, "lens.step"), named(&spans, "request"), named(&spans, "handed_over"));
        let events = |span: &SpanData| span.events.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
        assert_eq!(events(request), ["marked"], "{tracer:?}");
        assert_eq!(events(step), ["on the step"], "{tracer:?}");
        assert_eq!(request.parent_span_id, step.span_context.span_id(), "{tracer:?}");
        // Created under the step, entered, given an event and closed on
        // another thread: the step's child still, with its field and event.
        assert_eq!(handed_over.parent_span_id, step.span_context.span_id(), "{tracer:?}");
        assert_eq!(attribute(handed_over, "item").as_deref(), Some("7"), "{tracer:?}");
        assert_eq!(events(handed_over), ["on another thread"], "{tracer:?}");
    }
}

#[test]
fn an_edit_of_the_current_span_never_lands_in_another_subscriber_s_span_of_the_same_id() {
    for tracer in TRACERS {
        let setup = setup(tracer, &[SpanGroup::JOB]);
        let outer =
            tracing::Dispatch::new(tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job"))));
        let inner =
            tracing::Dispatch::new(tracing_subscriber::registry().with(lens_tracing::layer(rules("my_app=job"))));
        tracing::dispatcher::with_default(&outer, || {
            let first = tracing::info_span!(target: "my_app", "first");
            let _entered = first.enter();
            tracing::dispatcher::with_default(&inner, || {
                let other = tracing::info_span!(target: "my_app", "other");
                assert_eq!(other.id(), first.id(), "each registry's first span has the same id");
                drop(other.enter());
                // The current span is still `first` (the inner span was
                // exited); the inner registry's span of that id is not it.
                add_event_to_current("meant for first", []);
            });
            add_event_to_current("on first", []);
        });
        let spans = setup.spans();
        let events = |name: &str| named(&spans, name).events.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
        assert_eq!(events("other"), Vec::<String>::new(), "{tracer:?}");
        assert!(events("first").contains(&"on first".to_string()), "{tracer:?}");
    }
}
