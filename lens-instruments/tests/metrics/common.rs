//! A meter provider with an in-memory exporter, and a plain snapshot of what
//! it exported, so the tests compare simple values.

use std::collections::BTreeMap;

use lens_instruments::InstrumentKind;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

/// The number type of an exported metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Number {
    F64,
    U64,
    I64,
}

/// One exported data point; `value` for gauges and sums, the rest for
/// histograms.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Point {
    pub(crate) attributes: BTreeMap<String, String>,
    pub(crate) value: f64,
    pub(crate) count: u64,
    pub(crate) sum: f64,
    pub(crate) bounds: Vec<f64>,
    pub(crate) bucket_counts: Vec<u64>,
}

/// One exported metric.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Exported {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) unit: String,
    pub(crate) kind: InstrumentKind,
    pub(crate) number: Number,
    pub(crate) points: Vec<Point>,
}

impl Exported {
    /// The only data point; fails the test when there are several.
    pub(crate) fn point(&self) -> &Point {
        assert_eq!(self.points.len(), 1, "{}: expected one data point, got {:?}", self.name, self.points);
        &self.points[0]
    }

    /// The data point whose attribute `key` equals `value`.
    pub(crate) fn point_with(&self, key: &str, value: &str) -> &Point {
        self.points
            .iter()
            .find(|point| point.attributes.get(key).map(String::as_str) == Some(value))
            .unwrap_or_else(|| panic!("{}: no point with {key}={value} in {:?}", self.name, self.points))
    }
}

/// A meter provider whose only reader exports into memory on `collect`.
pub(crate) struct Harness {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

impl Harness {
    pub(crate) fn new() -> Self {
        let exporter = InMemoryMetricExporter::default();
        let provider =
            SdkMeterProvider::builder().with_reader(PeriodicReader::builder(exporter.clone()).build()).build();
        Self { provider, exporter }
    }

    pub(crate) fn meter(&self) -> Meter {
        self.provider.meter("lens-instruments-test")
    }

    /// Flushes and returns the metrics of the latest export (cumulative),
    /// sorted by name; empty when nothing was ever recorded.
    pub(crate) fn collect(&self) -> Vec<Exported> {
        self.provider.force_flush().expect("force_flush");
        let batches = self.exporter.get_finished_metrics().expect("finished metrics");
        let Some(latest) = batches.last() else { return Vec::new() };
        let mut exported: Vec<Exported> = latest
            .scope_metrics()
            .flat_map(|scope| scope.metrics())
            .map(|metric| {
                let (kind, number, points) = match metric.data() {
                    AggregatedMetrics::F64(data) => convert(data, Number::F64, |value| value),
                    AggregatedMetrics::U64(data) => convert(data, Number::U64, |value| value as f64),
                    AggregatedMetrics::I64(data) => convert(data, Number::I64, |value| value as f64),
                };
                Exported {
                    name: metric.name().to_owned(),
                    description: metric.description().to_owned(),
                    unit: metric.unit().to_owned(),
                    kind,
                    number,
                    points,
                }
            })
            .collect();
        exported.sort_by(|left, right| left.name.cmp(&right.name));
        exported
    }

    /// The exported metric named `name`; fails the test when absent.
    pub(crate) fn metric(&self, name: &str) -> Exported {
        let all = self.collect();
        all.iter()
            .find(|metric| metric.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("no metric {name}; exported: {:?}", names(&all)))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// The names of `metrics`, in order.
pub(crate) fn names(metrics: &[Exported]) -> Vec<&str> {
    metrics.iter().map(|metric| metric.name.as_str()).collect()
}

fn attributes<'a>(pairs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> BTreeMap<String, String> {
    pairs.map(|pair| (pair.key.as_str().to_owned(), pair.value.as_str().into_owned())).collect()
}

fn convert<T: Copy>(
    data: &MetricData<T>,
    number: Number,
    to_f64: impl Fn(T) -> f64,
) -> (InstrumentKind, Number, Vec<Point>) {
    let empty =
        |attributes| Point { attributes, value: 0.0, count: 0, sum: 0.0, bounds: vec![], bucket_counts: vec![] };
    match data {
        MetricData::Gauge(gauge) => {
            let points = gauge
                .data_points()
                .map(|point| Point { value: to_f64(point.value()), ..empty(attributes(point.attributes())) })
                .collect();
            (InstrumentKind::Gauge, number, points)
        }
        MetricData::Sum(sum) => {
            let points = sum
                .data_points()
                .map(|point| Point { value: to_f64(point.value()), ..empty(attributes(point.attributes())) })
                .collect();
            (InstrumentKind::Counter, number, points)
        }
        MetricData::Histogram(histogram) => {
            let points = histogram
                .data_points()
                .map(|point| Point {
                    count: point.count(),
                    sum: to_f64(point.sum()),
                    bounds: point.bounds().collect(),
                    bucket_counts: point.bucket_counts().collect(),
                    ..empty(attributes(point.attributes()))
                })
                .collect();
            (InstrumentKind::Histogram, number, points)
        }
        MetricData::ExponentialHistogram(_) => panic!("no instrument of lens-instruments is an exponential histogram"),
    }
}

/// The bucket index a value falls in: bucket `i` holds
/// `(bounds[i - 1], bounds[i]]`, the last one everything above.
pub(crate) fn bucket_of(bounds: &[f64], value: f64) -> usize {
    bounds.iter().position(|bound| value <= *bound).unwrap_or(bounds.len())
}
