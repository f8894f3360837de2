//! The inference server's instruments as an SDK meter exports them: the
//! `gen_ai.*` histograms carry exactly the name, unit, description and bucket
//! boundaries of lens-instruments' descriptors (the one definition of the
//! GenAI metrics), their data points the attribute values lens-instruments
//! defines, and the two `megatron.inference.requests.*` counters are
//! UpDownCounters (feature `testing`: the SDK's in-memory exporter).

use std::collections::BTreeMap;
use std::time::Duration;

use lens_instruments::inference as gen_ai;
use megatron_telemetry::inference::{
    PROVIDER_NAME, REQUESTS_RUNNING, REQUESTS_WAITING, RequestValues, SERVER_METRICS, ServerMetrics, TOKEN_TYPE_INPUT,
    TOKEN_TYPE_OUTPUT,
};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

/// One request and some queue movement recorded through [`ServerMetrics`] on
/// an SDK meter: the one export.
fn exported_after_one_request() -> Vec<ResourceMetrics> {
    let exporter = InMemoryMetricExporter::default();
    let reader = PeriodicReader::builder(exporter.clone()).with_interval(Duration::from_secs(3600)).build();
    let provider = SdkMeterProvider::builder().with_reader(reader).build();
    let metrics = ServerMetrics::new(&provider.meter("megatron-sim"));
    metrics.waiting_add(2);
    metrics.waiting_add(-1);
    metrics.running_add(1);
    metrics.record_request(&RequestValues {
        operation: "chat",
        model: "megatron-sim",
        duration_s: 0.3,
        time_to_first_token_s: Some(0.03),
        time_per_output_token_s: Some(0.012),
        input_tokens: 12,
        output_tokens: 40,
    });
    provider.force_flush().expect("flush the in-memory exporter");
    exporter.get_finished_metrics().expect("the exported metrics")
}

/// Every metric of `export`, by name.
fn by_name(export: &[ResourceMetrics]) -> BTreeMap<&str, &Metric> {
    export
        .iter()
        .flat_map(ResourceMetrics::scope_metrics)
        .flat_map(|scope| scope.metrics())
        .map(|metric| (metric.name(), metric))
        .collect()
}

/// A histogram's bucket boundaries, the same for each of its data points.
fn bounds(metric: &Metric) -> Vec<f64> {
    let per_point: Vec<Vec<f64>> = match metric.data() {
        AggregatedMetrics::F64(MetricData::Histogram(h)) => h.data_points().map(|p| p.bounds().collect()).collect(),
        AggregatedMetrics::U64(MetricData::Histogram(h)) => h.data_points().map(|p| p.bounds().collect()).collect(),
        other => panic!("{}: not a histogram: {other:?}", metric.name()),
    };
    assert!(!per_point.is_empty(), "{}: no data point", metric.name());
    assert!(per_point.windows(2).all(|pair| pair[0] == pair[1]), "{}: {per_point:?}", metric.name());
    per_point[0].clone()
}

#[test]
fn the_gen_ai_histograms_are_exported_as_lens_instruments_describes_them() {
    let export = exported_after_one_request();
    let exported = by_name(&export);
    for descriptor in gen_ai::INSTRUMENTS {
        let metric = exported.get(descriptor.name).unwrap_or_else(|| {
            panic!("{} not exported; exported: {:?}", descriptor.name, exported.keys().collect::<Vec<_>>())
        });
        assert_eq!(metric.unit(), descriptor.unit, "{}", descriptor.name);
        assert_eq!(metric.description(), descriptor.description, "{}", descriptor.name);
        assert_eq!(bounds(metric), descriptor.boundaries, "{}", descriptor.name);
    }
    // Nothing else is exported than the documented table.
    let table: Vec<&str> = SERVER_METRICS.iter().map(|def| def.name).collect();
    let mut names: Vec<&str> = exported.keys().copied().collect();
    names.sort_by_key(|name| table.iter().position(|row| row == name));
    assert_eq!(names, table);
}

#[test]
fn token_usage_points_carry_lens_instruments_token_types_and_provider() {
    let export = exported_after_one_request();
    let exported = by_name(&export);
    let AggregatedMetrics::U64(MetricData::Histogram(usage)) = exported[gen_ai::TOKEN_USAGE.name].data() else {
        panic!("token usage is not a u64 histogram: {:?}", exported[gen_ai::TOKEN_USAGE.name]);
    };
    let mut sums = BTreeMap::new();
    for point in usage.data_points() {
        let attribute = |key: &str| {
            point.attributes().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string()).unwrap_or_default()
        };
        assert_eq!(attribute("gen_ai.provider.name"), PROVIDER_NAME);
        assert_eq!(attribute("gen_ai.operation.name"), "chat");
        sums.insert(attribute("gen_ai.token.type"), point.sum());
    }
    assert_eq!(sums, BTreeMap::from([(TOKEN_TYPE_INPUT.to_owned(), 12), (TOKEN_TYPE_OUTPUT.to_owned(), 40)]));
    // The re-exports are lens-instruments' values, under the old names.
    assert_eq!(
        (PROVIDER_NAME, TOKEN_TYPE_INPUT, TOKEN_TYPE_OUTPUT),
        (gen_ai::DEFAULT_PROVIDER_NAME, gen_ai::TOKEN_TYPE_INPUT, gen_ai::TOKEN_TYPE_OUTPUT)
    );
}

#[test]
fn the_request_counters_are_up_down_counters_with_their_units() {
    let export = exported_after_one_request();
    let exported = by_name(&export);
    for (def, value) in [(REQUESTS_RUNNING, 1), (REQUESTS_WAITING, 1)] {
        let metric = &exported[def.name];
        assert_eq!(metric.unit(), def.unit, "{}", def.name);
        assert_eq!(metric.description(), def.description, "{}", def.name);
        let AggregatedMetrics::I64(MetricData::Sum(sum)) = metric.data() else {
            panic!("{}: not an i64 sum: {metric:?}", def.name);
        };
        assert!(!sum.is_monotonic(), "{}: an UpDownCounter", def.name);
        let values: Vec<i64> = sum.data_points().map(|point| point.value()).collect();
        assert_eq!(values, [value], "{}", def.name);
    }
}
