//! The open-span closer as the provider uses it: spans still open at
//! shutdown are exported once, innermost first, marked truncated; nothing
//! else changes. Run with `--features testing` (the in-memory exporter).

#[cfg(feature = "testing")]
mod with_testing {
    use std::time::Duration;

    use lens_otel_runtime::batch::{BatchConfig, LensBatchSpanProcessor};
    use lens_otel_runtime::closer::{
        OpenSpanCloser, SPAN_TRUNCATED, SPAN_TRUNCATED_REASON, SPAN_TRUNCATED_REASON_AT_SHUTDOWN,
    };
    use lens_otel_runtime::exporters::testing::KeepingSpanExporter;
    use opentelemetry::trace::{Span as _, Status, TraceContextExt as _, Tracer as _, TracerProvider as _};
    use opentelemetry::{Context, KeyValue, Value};
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanProcessor as _};

    struct Setup {
        exporter: KeepingSpanExporter,
        closer: OpenSpanCloser,
        batch: LensBatchSpanProcessor,
        provider: SdkTracerProvider,
    }

    fn setup() -> Setup {
        let exporter = KeepingSpanExporter::default();
        let batch = LensBatchSpanProcessor::new(exporter.clone(), BatchConfig::default());
        let closer = OpenSpanCloser::with_target(batch.clone());
        let provider =
            SdkTracerProvider::builder().with_span_processor(closer.clone()).with_span_processor(batch.clone()).build();
        Setup { exporter, closer, batch, provider }
    }

    impl Setup {
        fn exported(&self) -> Vec<SpanData> {
            self.exporter.get_finished_spans().unwrap_or_default()
        }

        fn named(&self, name: &str) -> Vec<SpanData> {
            self.exported().into_iter().filter(|span| span.name == name).collect()
        }

        fn shutdown(&self) {
            let result = self.provider.shutdown_with_timeout(Duration::from_secs(10));
            assert!(result.is_ok(), "{result:?}");
        }
    }

    fn is_truncated(span: &SpanData) -> bool {
        let attribute =
            span.attributes.iter().any(|kv| kv.key.as_str() == SPAN_TRUNCATED && kv.value == Value::Bool(true));
        let event = span.events.iter().any(|event| {
            event.name == SPAN_TRUNCATED
                && event.attributes.iter().any(|kv| {
                    kv.key.as_str() == SPAN_TRUNCATED_REASON
                        && kv.value == Value::from(SPAN_TRUNCATED_REASON_AT_SHUTDOWN)
                })
        });
        assert_eq!(attribute, event, "attribute and event go together: {span:?}");
        attribute
    }

    #[test]
    fn an_open_span_is_exported_at_shutdown_marked_truncated() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        let mut open = tracer.start("train");
        open.set_attribute(KeyValue::new("late", true));
        setup.shutdown();
        let spans = setup.named("train");
        assert_eq!(spans.len(), 1, "{spans:?}");
        let span = &spans[0];
        assert!(is_truncated(span));
        assert_eq!(span.status, Status::Unset);
        assert!(span.end_time >= span.start_time);
        assert_eq!(span.span_context.span_id(), open.span_context().span_id());
        // A copy taken at start: what was added later is not in it.
        assert!(!span.attributes.iter().any(|kv| kv.key.as_str() == "late"));
        drop(open);
        assert_eq!(setup.exported().len(), 1);
    }

    /// More spans open at once than the table has slots: the ones past them
    /// are counted until they end, and those still open at shutdown are
    /// counted as lost, apart from the truncated ones.
    #[test]
    fn spans_open_past_the_tables_slots_are_counted_as_lost_not_truncated() {
        let exporter = KeepingSpanExporter::default();
        let config = BatchConfig { max_queue_size: 8192, ..BatchConfig::default() };
        let batch = LensBatchSpanProcessor::new(exporter.clone(), config);
        let closer = OpenSpanCloser::with_target(batch.clone());
        let provider =
            SdkTracerProvider::builder().with_span_processor(closer.clone()).with_span_processor(batch.clone()).build();
        let tracer = provider.tracer("test");
        let slots = lens_otel_runtime::spool::ANONYMOUS_SLOTS as usize;
        let mut open: Vec<_> = (0..slots + 3).map(|n| tracer.start(format!("open {n}"))).collect();
        assert_eq!((closer.open_count(), closer.open_unkept()), (slots, 3));
        // One of the three ends: exported as usual, and counted no more.
        let mut last = open.pop().expect("a span");
        last.end();
        assert_eq!(closer.open_unkept(), 2);
        let result = provider.shutdown_with_timeout(Duration::from_secs(10));
        assert!(result.is_ok(), "{result:?}");
        assert_eq!((closer.truncated_count(), closer.open_unkept()), (slots, 2));
        let spans = exporter.get_finished_spans().unwrap_or_default();
        assert_eq!(spans.len(), slots + 1);
        assert_eq!(spans.iter().filter(|span| is_truncated(span)).count(), slots);
        drop(open);
    }

    #[test]
    fn attributes_given_at_start_are_kept() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        let _open = tracer.span_builder("step").with_attributes([KeyValue::new("step", 7)]).start(&tracer);
        setup.shutdown();
        let spans = setup.named("step");
        assert_eq!(spans.len(), 1);
        assert!(spans[0].attributes.contains(&KeyValue::new("step", 7)));
        assert_eq!(spans[0].instrumentation_scope.name(), "test");
    }

    #[test]
    fn force_flush_does_not_end_open_spans() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        let mut open = tracer.start("train");
        assert!(setup.provider.force_flush().is_ok());
        assert!(setup.exported().is_empty());
        assert_eq!(setup.closer.open_count(), 1);
        open.end();
        assert!(setup.batch.force_flush_with_timeout(Duration::from_secs(10)).is_ok());
        let spans = setup.named("train");
        assert_eq!(spans.len(), 1);
        assert!(!is_truncated(&spans[0]));
        assert_eq!(setup.closer.open_count(), 0);
    }

    #[test]
    fn ended_spans_are_not_exported_again() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        tracer.start("done").end();
        let _open = tracer.start("open");
        assert_eq!(setup.closer.open_count(), 1);
        setup.shutdown();
        assert_eq!(setup.named("done").len(), 1);
        assert_eq!(setup.named("open").len(), 1);
        assert_eq!(setup.exported().len(), 2);
    }

    #[test]
    fn children_are_closed_first_and_end_no_later_than_their_parents() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        let parent = tracer.start("parent");
        let parent_cx = Context::current_with_span(parent);
        let child = tracer.start_with_context("child", &parent_cx);
        let child_cx = parent_cx.with_span(child);
        let _grandchild = tracer.start_with_context("grandchild", &child_cx);
        setup.shutdown();
        let spans = setup.exported();
        let names: Vec<&str> = spans.iter().map(|span| span.name.as_ref()).collect();
        assert_eq!(names, ["grandchild", "child", "parent"]);
        assert!(spans.iter().all(is_truncated));
        assert!(spans[0].end_time <= spans[1].end_time && spans[1].end_time <= spans[2].end_time);
        assert_eq!(spans[0].parent_span_id, spans[1].span_context.span_id());
        assert_eq!(spans[1].parent_span_id, spans[2].span_context.span_id());
    }

    #[test]
    fn ten_abandoned_spans_are_all_exported() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        let abandoned: Vec<_> = (0..10).map(|i| tracer.start(format!("abandoned-{i}"))).collect();
        setup.shutdown();
        let spans = setup.exported();
        assert_eq!(spans.len(), 10);
        assert!(spans.iter().all(is_truncated));
        drop(abandoned);
        assert_eq!(setup.exported().len(), 10, "spans ended after shutdown were exported again");
    }

    #[test]
    fn the_marker_is_only_on_force_closed_spans() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        let _open = tracer.start("open-1");
        tracer.start("ended-1").end();
        let _open_too = tracer.start("open-2");
        tracer.start("ended-2").end();
        setup.shutdown();
        let spans = setup.exported();
        assert_eq!(spans.len(), 4);
        for span in &spans {
            assert_eq!(is_truncated(span), span.name.starts_with("open"), "{}", span.name);
        }
    }

    #[test]
    fn spans_started_after_shutdown_are_not_retained() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        assert!(setup.closer.shutdown().is_ok());
        let _late = tracer.start("late");
        assert_eq!(setup.closer.open_count(), 0);
        assert!(setup.closer.drain_truncated().is_empty());
    }

    #[test]
    fn a_second_shutdown_does_nothing() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        let _open = tracer.start("open");
        assert!(setup.closer.shutdown().is_ok());
        assert!(setup.closer.shutdown().is_ok());
        setup.shutdown();
        assert_eq!(setup.named("open").len(), 1);
    }

    #[test]
    fn a_span_ended_after_the_processors_shut_down_is_not_exported_twice() {
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        let mut open = tracer.start("open");
        // Shut down processor by processor, leaving the provider running, so
        // that the late end does reach the processors.
        assert!(setup.closer.shutdown().is_ok());
        assert!(setup.batch.shutdown_with_timeout(Duration::from_secs(10)).is_ok());
        open.end();
        let spans = setup.named("open");
        assert_eq!(spans.len(), 1);
        assert!(is_truncated(&spans[0]));
        assert_eq!(setup.batch.counters().snapshot().rejected_after_shutdown, 1);
    }

    #[test]
    fn a_closer_without_target_hands_its_copies_to_the_caller() {
        let closer = OpenSpanCloser::new();
        let provider = SdkTracerProvider::builder().with_span_processor(closer.clone()).build();
        let tracer = provider.tracer("test");
        let _first = tracer.start("first");
        let _second = tracer.start("second");
        let drained = closer.drain_truncated();
        let names: Vec<&str> = drained.iter().map(|span| span.name.as_ref()).collect();
        assert_eq!(names, ["second", "first"]);
        assert!(drained.iter().all(is_truncated));
        assert!(closer.drain_truncated().is_empty());
    }

    #[test]
    fn open_copies_are_chained_linked_marked_and_the_originals_still_end_normally() {
        use lens_otel_runtime::closer::SPAN_OPEN;
        let setup = setup();
        let tracer = setup.provider.tracer("test");
        tracer.start("done").end();
        let parent = tracer.start("iteration");
        let parent_cx = Context::current_with_span(parent);
        let child = tracer.start_with_context("backward", &parent_cx);
        let child_cx = parent_cx.with_span(child);
        let names = setup.closer.export_open_copies("hang", vec![KeyValue::new("phase", "backward")]);
        assert_eq!(names, ["iteration", "backward"], "outermost first");
        assert!(setup.batch.force_flush_with_timeout(Duration::from_secs(10)).is_ok());
        let copies: Vec<SpanData> = setup.exported().into_iter().filter(|s| s.name != "done").collect();
        assert_eq!(copies.len(), 2, "{copies:?}");
        let (outer, inner) = (&copies[0], &copies[1]);
        let (parent_id, child_id) =
            (parent_cx.span().span_context().span_id(), child_cx.span().span_context().span_id());
        assert_ne!(outer.span_context.span_id(), parent_id, "a fresh span id");
        assert_ne!(inner.span_context.span_id(), child_id);
        assert_eq!(inner.parent_span_id, outer.span_context.span_id(), "chained like the originals");
        assert_eq!(outer.span_context.trace_id(), parent_cx.span().span_context().trace_id());
        for (copy, original) in [(outer, parent_id), (inner, child_id)] {
            assert!(copy.attributes.contains(&KeyValue::new(SPAN_OPEN, true)), "{copy:?}");
            assert_eq!(copy.links.links.len(), 1);
            assert_eq!(copy.links.links[0].span_context.span_id(), original, "linked to its original");
            assert!(!is_truncated(copy));
        }
        assert!(outer.events.events.is_empty());
        assert_eq!(inner.events.events.len(), 1, "the event is on the innermost");
        assert_eq!(inner.events.events[0].name, "hang");
        assert_eq!(setup.closer.open_count(), 2, "the originals are still open");
        drop(child_cx);
        drop(parent_cx);
        setup.shutdown();
        let iterations = setup.named("iteration");
        assert_eq!(iterations.len(), 2, "the copy and the original");
        assert!(iterations.iter().any(|s| s.span_context.span_id() == parent_id && !is_truncated(s)));
    }
}
