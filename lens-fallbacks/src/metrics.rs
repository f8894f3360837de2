//! Metric handles: [`Meter`], [`Counter`], [`UpDownCounter`], [`Gauge`] and [`Histogram`],
//! defined once for both builds.
//!
//! With the `otel` feature a handle wraps the OpenTelemetry instrument it was
//! created as (a [`Meter`] comes from `Telemetry::meter`, or from an
//! OpenTelemetry meter with `Meter::from`); without it a handle holds nothing
//! and every method is an inline no-op. The methods and their signatures are
//! the same in both builds, so a custom metric written against them compiles
//! whether or not telemetry is compiled in. [`Meter::noop`] (a `const fn`, as
//! in metrics-rs) gives handles that record nothing in either build.
//!
//! Instruments are created once, from a builder that mirrors OpenTelemetry's
//! (`with_description`, `with_unit`, and for histograms `with_boundaries`),
//! and recorded with lens's own [`KeyValue`]s. A record with no attributes
//! (`&[]`) converts nothing; attributes are converted to OpenTelemetry's type
//! on each record that has them.
//!
//! ```
//! use lens_fallbacks::attr::KeyValue;
//! use lens_fallbacks::metrics::Meter;
//!
//! let meter = Meter::noop(); // or `telemetry.meter()` after setup
//! let requests = meter.u64_counter("example.requests").with_description("Requests served").build();
//! let queue = meter.f64_gauge("example.queue_depth").build();
//! let latency = meter.f64_histogram("example.latency").with_unit("s").with_boundaries(vec![0.1, 1.0, 10.0]).build();
//!
//! requests.add(1, &[KeyValue::new("example.route", "/generate")]);
//! queue.record(3.0, &[]);
//! latency.record(0.42, &[]);
//! ```

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use crate::attr::KeyValue;

/// Creates metric instruments. Cheap to clone; clones create instruments in
/// the same scope.
///
/// A meter from [`Meter::noop`] (and every meter without the `otel`
/// feature) creates instruments that record nothing.
#[derive(Clone, Default)]
pub struct Meter {
    #[cfg(feature = "otel")]
    inner: Option<opentelemetry::metrics::Meter>,
    /// The fork generation of the process the meter was made in.
    #[cfg(feature = "otel")]
    generation: u64,
}

impl Meter {
    /// A meter whose instruments record nothing.
    #[inline]
    pub const fn noop() -> Meter {
        Meter {
            #[cfg(feature = "otel")]
            inner: None,
            #[cfg(feature = "otel")]
            generation: 0,
        }
    }

    /// Whether instruments of this meter record nothing.
    #[inline]
    pub fn is_noop(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.inner.is_none();
        #[cfg(not(feature = "otel"))]
        return true;
    }

    /// The OpenTelemetry meter behind this one (`otel` only; not part of the
    /// facade API).
    #[cfg(feature = "otel")]
    pub fn otel_meter(&self) -> Option<&opentelemetry::metrics::Meter> {
        self.inner.as_ref()
    }

    fn builder<I>(&self, name: &'static str) -> InstrumentBuilder<'_, I> {
        InstrumentBuilder {
            meter: self,
            name,
            description: None,
            unit: None,
            boundaries: None,
            _instrument: PhantomData,
        }
    }

    /// A counter of `u64` values.
    pub fn u64_counter(&self, name: &'static str) -> InstrumentBuilder<'_, Counter<u64>> {
        self.builder(name)
    }

    /// A counter of `f64` values.
    pub fn f64_counter(&self, name: &'static str) -> InstrumentBuilder<'_, Counter<f64>> {
        self.builder(name)
    }

    /// An up-down counter of `i64` values (a count that rises and falls,
    /// such as requests in flight).
    pub fn i64_up_down_counter(&self, name: &'static str) -> InstrumentBuilder<'_, UpDownCounter<i64>> {
        self.builder(name)
    }

    /// A gauge of `u64` values.
    pub fn u64_gauge(&self, name: &'static str) -> InstrumentBuilder<'_, Gauge<u64>> {
        self.builder(name)
    }

    /// A gauge of `i64` values.
    pub fn i64_gauge(&self, name: &'static str) -> InstrumentBuilder<'_, Gauge<i64>> {
        self.builder(name)
    }

    /// A gauge of `f64` values.
    pub fn f64_gauge(&self, name: &'static str) -> InstrumentBuilder<'_, Gauge<f64>> {
        self.builder(name)
    }

    /// A histogram of `u64` values.
    pub fn u64_histogram(&self, name: &'static str) -> InstrumentBuilder<'_, Histogram<u64>> {
        self.builder(name)
    }

    /// A histogram of `f64` values.
    pub fn f64_histogram(&self, name: &'static str) -> InstrumentBuilder<'_, Histogram<f64>> {
        self.builder(name)
    }
}

#[cfg(feature = "otel")]
impl From<opentelemetry::metrics::Meter> for Meter {
    fn from(meter: opentelemetry::metrics::Meter) -> Meter {
        Meter { inner: Some(meter), generation: crate::otel::ids::fork_generation() }
    }
}

impl fmt::Debug for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Meter").field("noop", &self.is_noop()).finish()
    }
}

/// The settings of an instrument before it is created: from one of
/// [`Meter`]'s methods, finished with `build()`.
#[must_use = "an instrument is created by `build()`"]
#[cfg_attr(not(feature = "otel"), expect(dead_code, reason = "the settings are read only when instruments are real"))]
pub struct InstrumentBuilder<'a, I> {
    meter: &'a Meter,
    name: &'static str,
    description: Option<Cow<'static, str>>,
    unit: Option<Cow<'static, str>>,
    boundaries: Option<Vec<f64>>,
    _instrument: PhantomData<fn() -> I>,
}

impl<I> InstrumentBuilder<'_, I> {
    /// The description exporters carry (`# HELP` in Prometheus).
    pub fn with_description(mut self, description: impl Into<Cow<'static, str>>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The UCUM unit (`s`, `ms`, `{token}`). A declared unit becomes a
    /// suffix of the Prometheus name.
    pub fn with_unit(mut self, unit: impl Into<Cow<'static, str>>) -> Self {
        self.unit = Some(unit.into());
        self
    }
}

impl<T> InstrumentBuilder<'_, Histogram<T>> {
    /// Explicit bucket boundaries (the SDK's defaults otherwise).
    pub fn with_boundaries(mut self, boundaries: Vec<f64>) -> Self {
        self.boundaries = Some(boundaries);
        self
    }
}

/// Converts lens's attributes for one record: none allocates nothing.
#[cfg(feature = "otel")]
#[inline]
fn with_otel_attributes(attributes: &[KeyValue], record: impl FnOnce(&[opentelemetry::KeyValue])) {
    if attributes.is_empty() {
        record(&[]);
    } else {
        let converted: Vec<opentelemetry::KeyValue> =
            attributes.iter().cloned().map(lens_otel_runtime::convert::ToOtel::to_otel).collect();
        record(&converted);
    }
}

/// Defines one instrument handle: the struct, `noop`, `Clone`, `Debug` and
/// its recording method, once for both builds.
macro_rules! instrument {
    ($(#[$doc:meta])* $name:ident, $method:ident, $verb:literal) => {
        $(#[$doc])*
        pub struct $name<T> {
            #[cfg(feature = "otel")]
            inner: Option<opentelemetry::metrics::$name<T>>,
            _value: PhantomData<fn(T)>,
        }

        impl<T> $name<T> {
            /// A handle that records nothing.
            #[inline]
            pub const fn noop() -> Self {
                Self {
                    #[cfg(feature = "otel")]
                    inner: None,
                    _value: PhantomData,
                }
            }

            /// Whether this handle records nothing.
            #[inline]
            pub fn is_noop(&self) -> bool {
                #[cfg(feature = "otel")]
                return self.inner.is_none();
                #[cfg(not(feature = "otel"))]
                return true;
            }

            #[doc = concat!($verb, " `value` with `attributes` (`&[]` for none). Does nothing on a no-op handle.")]
            #[inline]
            pub fn $method(&self, value: T, attributes: &[KeyValue]) {
                #[cfg(feature = "otel")]
                if let Some(inner) = &self.inner {
                    with_otel_attributes(attributes, |attributes| inner.$method(value, attributes));
                }
                #[cfg(not(feature = "otel"))]
                let _ = (value, attributes);
            }
        }

        impl<T: Clone> Clone for $name<T> {
            fn clone(&self) -> Self {
                Self {
                    #[cfg(feature = "otel")]
                    inner: self.inner.clone(),
                    _value: PhantomData,
                }
            }
        }

        impl<T> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name)).field("noop", &self.is_noop()).finish()
            }
        }
    };
}

instrument!(
    /// A monotonic counter: values are added.
    Counter,
    add,
    "Adds"
);
instrument!(
    /// An up-down counter: values (positive or negative) are added.
    UpDownCounter,
    add,
    "Adds"
);
instrument!(
    /// A gauge: the last value recorded wins.
    Gauge,
    record,
    "Records"
);
instrument!(
    /// A histogram: every value is counted into buckets.
    Histogram,
    record,
    "Records"
);

/// Says once, in a process forked from the one that set telemetry up, that
/// its new instruments record nothing: the SDK's meter may have been
/// locked by a collection at the fork (making an instrument would wait
/// for it forever), and its export thread is the parent's.
#[cfg(feature = "otel")]
#[cold]
fn forked_child_gets_noop_instruments() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::diag::warn(format_args!(
            "process {} was forked after telemetry was set up: instruments it makes from the parent's meter record \
             nothing (telemetry exports from the process that set it up); set telemetry up again in this process \
             to export its own",
            std::process::id()
        ));
    }
}

/// Creates one kind of instrument from a builder, in both builds.
macro_rules! build {
    ($instrument:ident < $value:ty >, $create:ident, $($boundaries:ident)?) => {
        impl InstrumentBuilder<'_, $instrument<$value>> {
            /// Creates the instrument (one that records nothing on a no-op meter).
            pub fn build(self) -> $instrument<$value> {
                #[cfg(feature = "otel")]
                {
                    let Some(meter) = &self.meter.inner else { return $instrument::noop() };
                    if self.meter.generation != crate::otel::ids::fork_generation() {
                        forked_child_gets_noop_instruments();
                        return $instrument::noop();
                    }
                    let mut builder = meter.$create(self.name);
                    if let Some(description) = self.description {
                        builder = builder.with_description(description);
                    }
                    if let Some(unit) = self.unit {
                        builder = builder.with_unit(unit);
                    }
                    $(if let Some($boundaries) = self.$boundaries {
                        builder = builder.with_boundaries($boundaries);
                    })?
                    $instrument { inner: Some(builder.build()), _value: PhantomData }
                }
                #[cfg(not(feature = "otel"))]
                $instrument::noop()
            }
        }
    };
}

build!(Counter<u64>, u64_counter,);
build!(Counter<f64>, f64_counter,);
build!(UpDownCounter<i64>, i64_up_down_counter,);
build!(Gauge<u64>, u64_gauge,);
build!(Gauge<i64>, i64_gauge,);
build!(Gauge<f64>, f64_gauge,);
build!(Histogram<u64>, u64_histogram, boundaries);
build!(Histogram<f64>, f64_histogram, boundaries);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noop_meter_gives_handles_that_record_nothing_and_never_panic() {
        let meter = Meter::noop();
        assert!(meter.is_noop());
        let counter = meter.u64_counter("test.counter").with_description("d").with_unit("{item}").build();
        let gauge = meter.i64_gauge("test.gauge").build();
        let histogram = meter.f64_histogram("test.histogram").with_boundaries(vec![1.0, 2.0]).build();
        counter.add(1, &[KeyValue::new("test.key", "value")]);
        gauge.record(-3, &[]);
        histogram.record(1.5, &[]);
        assert!(counter.is_noop() && gauge.is_noop() && histogram.is_noop());
        assert_eq!(format!("{:?}", counter.clone()), "Counter { noop: true }");
    }

    #[test]
    fn noop_handles_are_const() {
        static COUNTER: Counter<u64> = Counter::noop();
        static METER: Meter = Meter::noop();
        COUNTER.add(1, &[]);
        assert!(METER.is_noop());
    }
}
