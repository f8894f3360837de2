//! The `megatron.training.*` metrics: the original's `test_training_metrics`
//! adapted. The table and the pure helpers are tested in every
//! build; with `otel` the instruments are read back through the SDK's
//! in-memory exporter; without it, the same calls compile and record nothing
//! even when handed a real meter.

use std::collections::HashSet;

use megatron_telemetry::metrics::{
    self, InstrumentKind, LossChoice, METRICS, PeakTracker, STEP_DURATION_BOUNDARIES_MS, TrainingMetrics,
    TrainingValues, select_loss,
};

/// A small in-memory SDK pipeline: a meter provider whose only reader feeds
/// an in-memory exporter, flushed on demand (feature `testing`).
#[cfg(feature = "testing")]
mod sdk {
    use std::time::Duration;

    use opentelemetry::metrics::{Meter, MeterProvider as _};
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

    pub(crate) struct Pipeline {
        pub(crate) provider: SdkMeterProvider,
        exporter: InMemoryMetricExporter,
    }

    /// One exported metric, reduced to what the tests look at.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) struct Point {
        pub(crate) scope: String,
        pub(crate) name: String,
        pub(crate) unit: String,
        pub(crate) description: String,
        pub(crate) kind: &'static str,
        /// Gauge: last value; counter: sum; histogram: sum.
        pub(crate) value: f64,
        /// Histogram: sample count; otherwise 0.
        pub(crate) count: u64,
        pub(crate) bounds: Vec<f64>,
        pub(crate) attributes: usize,
    }

    impl Pipeline {
        pub(crate) fn new() -> Pipeline {
            let exporter = InMemoryMetricExporter::default();
            let reader = PeriodicReader::builder(exporter.clone()).with_interval(Duration::from_secs(3600)).build();
            let provider = SdkMeterProvider::builder().with_reader(reader).build();
            Pipeline { provider, exporter }
        }

        pub(crate) fn meter(&self, scope: &'static str) -> Meter {
            self.provider.meter(scope)
        }

        /// Flushes and returns every data point of this export.
        pub(crate) fn collect(&self) -> Vec<Point> {
            self.exporter.reset();
            self.provider.force_flush().expect("flush");
            let mut points = Vec::new();
            for resource in self.exporter.get_finished_metrics().expect("metrics") {
                for scope in resource.scope_metrics() {
                    for metric in scope.metrics() {
                        let mut point = Point {
                            scope: scope.scope().name().to_string(),
                            name: metric.name().to_string(),
                            unit: metric.unit().to_string(),
                            description: metric.description().to_string(),
                            kind: "",
                            value: 0.0,
                            count: 0,
                            bounds: Vec::new(),
                            attributes: 0,
                        };
                        match metric.data() {
                            AggregatedMetrics::F64(MetricData::Gauge(g)) => {
                                let dp: Vec<_> = g.data_points().collect();
                                assert_eq!(dp.len(), 1, "{}: one series", point.name);
                                point.kind = "gauge";
                                point.value = dp[0].value();
                                point.attributes = dp[0].attributes().count();
                            }
                            AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                                let dp: Vec<_> = h.data_points().collect();
                                assert_eq!(dp.len(), 1, "{}: one series", point.name);
                                point.kind = "histogram";
                                point.value = dp[0].sum();
                                point.count = dp[0].count();
                                point.bounds = dp[0].bounds().collect();
                                point.attributes = dp[0].attributes().count();
                            }
                            AggregatedMetrics::U64(MetricData::Sum(s)) => {
                                let dp: Vec<_> = s.data_points().collect();
                                assert_eq!(dp.len(), 1, "{}: one series", point.name);
                                assert!(s.is_monotonic(), "{}: a counter", point.name);
                                point.kind = "counter";
                                point.value = dp[0].value() as f64;
                                point.attributes = dp[0].attributes().count();
                            }
                            other => panic!("{}: unexpected data {other:?}", point.name),
                        }
                        points.push(point);
                    }
                }
            }
            points
        }
    }
}

fn all_values() -> TrainingValues {
    TrainingValues {
        step_duration_ms: Some(812.5),
        loss: Some(2.25),
        throughput_tflops: Some(410.0),
        grad_norm: Some(1.5),
        skipped_iters: Some(3),
        learning_rate: Some(3.0e-4),
        tokens_per_sec: Some(125_000.0),
        memory_allocated_gb: Some(61.5),
    }
}

/// Each field of [`TrainingValues`] alone, with the metric it feeds.
fn single_fields() -> Vec<(TrainingValues, &'static str)> {
    let none = TrainingValues::default();
    vec![
        (TrainingValues { step_duration_ms: Some(1.0), ..none }, metrics::STEP_DURATION_MS.name),
        (TrainingValues { loss: Some(1.0), ..none }, metrics::LOSS.name),
        (TrainingValues { throughput_tflops: Some(1.0), ..none }, metrics::THROUGHPUT_TFLOPS.name),
        (TrainingValues { grad_norm: Some(1.0), ..none }, metrics::GRAD_NORM.name),
        (TrainingValues { skipped_iters: Some(1), ..none }, metrics::SKIPPED_ITERS.name),
        (TrainingValues { learning_rate: Some(1.0), ..none }, metrics::LEARNING_RATE.name),
        (TrainingValues { tokens_per_sec: Some(1.0), ..none }, metrics::TOKENS_PER_SEC.name),
        (TrainingValues { memory_allocated_gb: Some(1.0), ..none }, metrics::MEMORY_ALLOCATED_GB.name),
    ]
}

// ---- The table (every build) ------------------------------------------------

#[test]
fn names_are_in_the_training_namespace_and_unique() {
    assert_eq!(METRICS.len(), 8);
    let mut seen = HashSet::new();
    for metric in METRICS {
        assert!(metric.name.starts_with("megatron.training."), "{}", metric.name);
        assert!(seen.insert(metric.name), "duplicate {}", metric.name);
    }
}

#[test]
fn kinds_follow_the_seed_page() {
    for metric in METRICS {
        let expected = match metric.name {
            "megatron.training.step_duration_ms" => InstrumentKind::Histogram,
            "megatron.training.skipped_iters" => InstrumentKind::Counter,
            _ => InstrumentKind::Gauge,
        };
        assert_eq!(metric.kind, expected, "{}", metric.name);
    }
}

#[test]
fn only_the_step_duration_declares_a_unit() {
    for metric in METRICS {
        let expected = (metric.name == "megatron.training.step_duration_ms").then_some("ms");
        assert_eq!(metric.unit, expected, "{}", metric.name);
    }
    // The other units are stated in the descriptions.
    assert!(metrics::THROUGHPUT_TFLOPS.description.contains("TFLOP/s"));
    assert!(metrics::TOKENS_PER_SEC.description.contains("tokens/s"));
    assert!(metrics::MEMORY_ALLOCATED_GB.description.contains("GiB"));
}

/// The OpenTelemetry-to-Prometheus name translation, for the units used here:
/// `.` becomes `_`, a declared unit is appended as a word, counters get
/// `_total`.
fn prometheus_name(name: &str, unit: Option<&str>, kind: InstrumentKind) -> String {
    let mut out = name.replace('.', "_");
    match unit {
        Some("ms") => out.push_str("_milliseconds"),
        Some(other) => panic!("no translation for unit {other}"),
        None => {}
    }
    if kind == InstrumentKind::Counter {
        out.push_str("_total");
    }
    out
}

#[test]
fn prometheus_names_are_exactly_the_seed_names() {
    let names: Vec<_> = METRICS.iter().map(|m| m.prometheus_name).collect();
    assert_eq!(
        names,
        [
            "megatron_training_step_duration_ms_milliseconds",
            "megatron_training_loss",
            "megatron_training_throughput_tflops",
            "megatron_training_tokens_per_sec",
            "megatron_training_grad_norm",
            "megatron_training_skipped_iters_total",
            "megatron_training_learning_rate",
            "megatron_training_memory_allocated_gb",
        ]
    );
    for metric in METRICS {
        assert_eq!(metric.prometheus_name, prometheus_name(metric.name, metric.unit, metric.kind), "{}", metric.name);
    }
}

#[test]
fn step_duration_buckets_span_a_millisecond_to_ten_minutes() {
    assert!(STEP_DURATION_BOUNDARIES_MS.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
    assert_eq!(STEP_DURATION_BOUNDARIES_MS.first(), Some(&1.0));
    assert_eq!(STEP_DURATION_BOUNDARIES_MS.last(), Some(&600_000.0));
    // Typical step times (0.3 s to 30 s) spread over several buckets.
    let buckets_between = STEP_DURATION_BOUNDARIES_MS.iter().filter(|b| (300.0..=30_000.0).contains(*b)).count();
    assert!(buckets_between >= 6, "{buckets_between}");
}

#[test]
fn metrics_docs_are_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics-megatron.md");
    let text = std::fs::read_to_string(path).expect("docs/metrics-megatron.md exists");
    let generated = megatron_telemetry::markdown::training_metrics();
    assert!(
        text.contains(&format!("<!-- generated:metrics:start -->\n{generated}<!-- generated:metrics:end -->")),
        "docs/metrics-megatron.md is out of date: run `cargo xtask codegen`"
    );
}

// ---- Loss key and memory peak (every build) ---------------------------------

#[test]
fn lm_loss_wins_over_other_keys_in_any_order() {
    let choice = select_loss(&[("mtp loss", 0.5), ("load balancing loss", 0.1), ("lm loss", 2.0)]);
    assert_eq!(choice, LossChoice::Chosen { key: "lm loss", value: 2.0 });
}

#[test]
fn the_only_loss_key_is_chosen_and_meta_keys_are_ignored() {
    let losses = [("advanced iterations", 10.0), ("skipped iterations", 1.0), ("nan iterations", 0.0), ("loss", 3.5)];
    assert_eq!(select_loss(&losses), LossChoice::Chosen { key: "loss", value: 3.5 });
}

#[test]
fn several_loss_keys_without_lm_loss_are_ambiguous() {
    let choice = select_loss(&[("a loss", 1.0), ("advanced iterations", 4.0), ("b loss", 2.0)]);
    assert_eq!(choice, LossChoice::Ambiguous { candidates: 2 });
    assert_eq!(choice.value(), None);
    let metrics = TrainingMetrics::noop();
    assert_eq!(metrics.loss_from(&[("a loss", 1.0), ("b loss", 2.0)]), None);
    assert_eq!(metrics.loss_from(&[("lm loss", 1.25)]), Some(1.25));
}

#[test]
fn no_loss_key_is_no_loss() {
    assert_eq!(select_loss(&[]), LossChoice::NoLoss);
    assert_eq!(select_loss(&[("advanced iterations", 1.0)]), LossChoice::NoLoss);
}

#[test]
fn peak_tracker_keeps_the_running_peak_in_gib() {
    let peak = PeakTracker::new();
    assert_eq!(peak.peak_gib(), None);
    assert_eq!(peak.observe_bytes(2 << 30), 2.0);
    assert_eq!(peak.observe_bytes(1 << 30), 2.0, "a lower value does not lower the peak");
    assert_eq!(peak.observe_bytes(3 << 29), 2.0);
    assert_eq!(peak.observe_bytes(5 << 30), 5.0);
    assert_eq!(peak.peak_gib(), Some(5.0));
    assert_eq!(peak.observe_bytes(0), 5.0);
    peak.reset();
    assert_eq!(peak.peak_gib(), None);
    assert_eq!(peak.observe_bytes(0), 0.0, "zero bytes is an observation");
    assert_eq!(peak.peak_gib(), Some(0.0));
    assert_eq!(metrics::bytes_to_gib(1 << 30), 1.0);
}

#[test]
fn handles_can_be_shared_and_live_in_statics() {
    fn shared<T: Send + Sync>(_: &T) {}
    static METRICS_SLOT: TrainingMetrics = TrainingMetrics::noop();
    static PEAK: PeakTracker = PeakTracker::new();
    shared(&METRICS_SLOT);
    shared(&PEAK);
    METRICS_SLOT.record(&all_values());
    assert!(METRICS_SLOT.is_noop());
    assert_eq!(PEAK.observe_bytes(1 << 30), 1.0);
}

// ---- Recording (with `otel`) ------------------------------------------------

#[cfg(feature = "testing")]
mod recording {
    use super::*;

    fn recorded(values: &[TrainingValues]) -> Vec<sdk::Point> {
        let pipeline = sdk::Pipeline::new();
        let metrics = TrainingMetrics::new(&pipeline.meter("megatron"));
        for v in values {
            metrics.record(v);
        }
        pipeline.collect()
    }

    fn point<'a>(points: &'a [sdk::Point], name: &str) -> &'a sdk::Point {
        points.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name} not recorded"))
    }

    #[test]
    fn all_eight_are_recorded_with_the_right_kinds_units_and_descriptions() {
        let points = recorded(&[all_values()]);
        assert_eq!(points.len(), 8);
        for def in METRICS {
            let p = point(&points, def.name);
            let kind = match def.kind {
                InstrumentKind::Histogram => "histogram",
                InstrumentKind::Gauge => "gauge",
                InstrumentKind::Counter => "counter",
            };
            assert_eq!(p.kind, kind, "{}", def.name);
            assert_eq!(p.unit, def.unit.unwrap_or(""), "{}", def.name);
            assert_eq!(p.description, def.description, "{}", def.name);
            assert_eq!(p.attributes, 0, "{}: no metric attributes", def.name);
        }
        assert_eq!(point(&points, "megatron.training.step_duration_ms").value, 812.5);
        assert_eq!(point(&points, "megatron.training.loss").value, 2.25);
        assert_eq!(point(&points, "megatron.training.throughput_tflops").value, 410.0);
        assert_eq!(point(&points, "megatron.training.grad_norm").value, 1.5);
        assert_eq!(point(&points, "megatron.training.skipped_iters").value, 3.0);
        assert_eq!(point(&points, "megatron.training.learning_rate").value, 3.0e-4);
        assert_eq!(point(&points, "megatron.training.tokens_per_sec").value, 125_000.0);
        assert_eq!(point(&points, "megatron.training.memory_allocated_gb").value, 61.5);
    }

    #[test]
    fn step_duration_uses_the_explicit_buckets() {
        let points = recorded(&[all_values()]);
        assert_eq!(point(&points, "megatron.training.step_duration_ms").bounds, STEP_DURATION_BOUNDARIES_MS);
    }

    #[test]
    fn all_none_records_nothing() {
        assert_eq!(recorded(&[TrainingValues::default()]), []);
    }

    #[test]
    fn each_field_alone_records_only_its_instrument() {
        for (values, name) in single_fields() {
            let points = recorded(&[values]);
            let names: Vec<_> = points.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, [name]);
        }
    }

    #[test]
    fn values_accumulate_or_replace_across_calls() {
        let first =
            TrainingValues { step_duration_ms: Some(100.0), loss: Some(3.0), skipped_iters: Some(2), ..all_values() };
        let second =
            TrainingValues { step_duration_ms: Some(300.0), loss: Some(2.0), skipped_iters: Some(1), ..all_values() };
        let points = recorded(&[first, second]);
        let step = point(&points, "megatron.training.step_duration_ms");
        assert_eq!((step.count, step.value), (2, 400.0), "histogram: two samples");
        assert_eq!(point(&points, "megatron.training.loss").value, 2.0, "gauge: last value");
        assert_eq!(point(&points, "megatron.training.skipped_iters").value, 3.0, "counter: sum");
    }

    #[test]
    fn skipped_iterations_are_added_only_when_positive() {
        let skipped = |n| TrainingValues { skipped_iters: Some(n), ..TrainingValues::default() };
        assert_eq!(recorded(&[skipped(0)]), []);
        assert_eq!(point(&recorded(&[skipped(1)]), "megatron.training.skipped_iters").value, 1.0);
        assert_eq!(point(&recorded(&[skipped(5)]), "megatron.training.skipped_iters").value, 5.0);
        assert_eq!(point(&recorded(&[skipped(5), skipped(0)]), "megatron.training.skipped_iters").value, 5.0);
    }

    #[test]
    fn zeros_are_recorded() {
        let zeros = TrainingValues {
            loss: Some(0.0),
            grad_norm: Some(0.0),
            learning_rate: Some(0.0),
            ..TrainingValues::default()
        };
        let points = recorded(&[zeros]);
        for name in ["megatron.training.loss", "megatron.training.grad_norm", "megatron.training.learning_rate"] {
            assert_eq!(point(&points, name).value, 0.0, "{name}");
        }
        assert_eq!(points.len(), 3);
    }

    #[test]
    fn separate_meters_get_separate_instruments() {
        let pipeline = sdk::Pipeline::new();
        let a = TrainingMetrics::new(&pipeline.meter("scope-a"));
        let b = TrainingMetrics::new(&pipeline.meter("scope-b"));
        a.record(&TrainingValues { loss: Some(1.0), ..TrainingValues::default() });
        b.record(&TrainingValues { loss: Some(2.0), ..TrainingValues::default() });
        let mut points: Vec<_> = pipeline.collect().into_iter().map(|p| (p.scope, p.name, p.value)).collect();
        points.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            points,
            [
                ("scope-a".to_string(), "megatron.training.loss".to_string(), 1.0),
                ("scope-b".to_string(), "megatron.training.loss".to_string(), 2.0),
            ]
        );
    }

    #[test]
    fn the_noop_handle_records_nothing() {
        let pipeline = sdk::Pipeline::new();
        let _meter = pipeline.meter("megatron");
        let metrics = TrainingMetrics::noop();
        assert!(metrics.is_noop());
        metrics.record(&all_values());
        assert!(!TrainingMetrics::new(&pipeline.meter("megatron")).is_noop());
    }

    #[test]
    fn ambiguous_loss_is_skipped_and_lm_loss_recorded() {
        let pipeline = sdk::Pipeline::new();
        let metrics = TrainingMetrics::new(&pipeline.meter("megatron"));
        let ambiguous = [("a loss", 1.0), ("b loss", 2.0)];
        for _ in 0..3 {
            metrics.record(&TrainingValues { loss: metrics.loss_from(&ambiguous), ..TrainingValues::default() });
        }
        assert_eq!(pipeline.collect(), []);
        metrics.record(&TrainingValues {
            loss: metrics.loss_from(&[("lm loss", 4.0), ("a loss", 1.0)]),
            ..TrainingValues::default()
        });
        assert_eq!(point(&pipeline.collect(), "megatron.training.loss").value, 4.0);
    }

    /// A step duration that is negative or not a number is not recorded: the
    /// histogram's count and sum are those of the real steps (a negative one
    /// used to drag the sum below zero for the rest of the run). NaN and
    /// infinite gauge values are not recorded either (OpenTelemetry would
    /// drop them itself); each metric warns once.
    #[test]
    fn values_a_metric_cannot_carry_are_not_recorded() {
        let none = TrainingValues::default();
        let step = |ms: f64| TrainingValues { step_duration_ms: Some(ms), ..none };
        let loss = |loss: f64| TrainingValues { loss: Some(loss), ..none };
        let points = recorded(&[
            step(100.0),
            step(-50.0),
            step(f64::NAN),
            step(f64::INFINITY),
            step(-1e9),
            step(20.0),
            loss(2.5),
            loss(f64::NAN),
            loss(f64::NEG_INFINITY),
        ]);
        let steps = point(&points, "megatron.training.step_duration_ms");
        assert_eq!((steps.count, steps.value), (2, 120.0), "the two real steps only");
        assert_eq!(point(&points, "megatron.training.loss").value, 2.5);
    }
}

// ---- The no-op build (without `otel`) ---------------------------------------

#[cfg(not(feature = "otel"))]
mod without_otel {
    use super::*;

    #[test]
    fn the_same_calls_compile_and_record_nothing() {
        let metrics = TrainingMetrics::new(&lens_fallbacks::Meter::noop());
        assert!(metrics.is_noop());
        metrics.record(&all_values());
        for (values, _) in single_fields() {
            metrics.record(&values);
        }
        assert_eq!(metrics.loss_from(&[("lm loss", 1.0)]), Some(1.0), "the loss rule still applies");
        assert!(TrainingMetrics::noop().is_noop());
    }
}
