//! What an instrument is, as data: name, kind, unit, description, attribute
//! keys and bucket boundaries.
//!
//! Each module of this crate declares its instruments as
//! [`InstrumentDescriptor`] constants and builds them from those constants,
//! so the code, the tests and the docs tables read one source (the docs test
//! fails when `docs/metrics-lens.md` drifts from them). Other crates build
//! the same instruments from the same constants (megatron-telemetry's
//! inference server builds its `gen_ai.*` histograms with
//! [`InstrumentDescriptor::f64_histogram`] and
//! [`InstrumentDescriptor::u64_histogram`]), so no name, unit, description
//! or boundary list is written twice.

use lens_fallbacks::metrics::{Gauge, Histogram, Meter};

/// The kind of an instrument (lens-core's, shared with megatron-telemetry's
/// metric definitions).
pub use lens_fallbacks::instrument_values::InstrumentKind;

/// One metric instrument, as data.
///
/// ```
/// use lens_instruments::{InstrumentKind, inference};
///
/// let duration = inference::REQUEST_DURATION;
/// assert_eq!(duration.name, "gen_ai.server.request.duration");
/// assert_eq!(duration.kind, InstrumentKind::Histogram);
/// assert_eq!(duration.unit, "s");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstrumentDescriptor {
    /// The metric name, such as `rl.reward.mean`.
    pub name: &'static str,
    /// Histogram, gauge or counter.
    pub kind: InstrumentKind,
    /// The UCUM unit (`s`, `ms`, `{token}`, `{token}/s`), or `""` for none.
    pub unit: &'static str,
    /// The description exporters carry (`# HELP` in Prometheus).
    pub description: &'static str,
    /// The attribute keys a data point can carry; empty for none.
    pub attributes: &'static [&'static str],
    /// Explicit histogram bucket boundaries; empty for other kinds.
    pub boundaries: &'static [f64],
}

impl InstrumentDescriptor {
    /// Creates this histogram on `meter` with `f64` values: the descriptor's
    /// name, description, unit (none when empty) and bucket boundaries.
    ///
    /// ```
    /// use lens_fallbacks::metrics::Meter;
    /// use lens_instruments::inference;
    ///
    /// let ttft = inference::TIME_TO_FIRST_TOKEN.f64_histogram(&Meter::noop());
    /// ttft.record(0.03, &[]);
    /// ```
    ///
    /// A descriptor of another kind is a programming error: debug builds
    /// assert the kind, release builds create the histogram anyway.
    #[must_use]
    pub fn f64_histogram(&self, meter: &Meter) -> Histogram<f64> {
        debug_assert_eq!(self.kind, InstrumentKind::Histogram, "{}", self.name);
        let builder =
            meter.f64_histogram(self.name).with_description(self.description).with_boundaries(self.boundaries.to_vec());
        if self.unit.is_empty() { builder.build() } else { builder.with_unit(self.unit).build() }
    }

    /// Creates this histogram on `meter` with `u64` values (counts such as
    /// tokens), as [`InstrumentDescriptor::f64_histogram`] does.
    #[must_use]
    pub fn u64_histogram(&self, meter: &Meter) -> Histogram<u64> {
        debug_assert_eq!(self.kind, InstrumentKind::Histogram, "{}", self.name);
        let builder =
            meter.u64_histogram(self.name).with_description(self.description).with_boundaries(self.boundaries.to_vec());
        if self.unit.is_empty() { builder.build() } else { builder.with_unit(self.unit).build() }
    }

    pub(crate) fn f64_gauge(&self, meter: &Meter) -> Gauge<f64> {
        debug_assert_eq!(self.kind, InstrumentKind::Gauge, "{}", self.name);
        let builder = meter.f64_gauge(self.name).with_description(self.description);
        if self.unit.is_empty() { builder.build() } else { builder.with_unit(self.unit).build() }
    }

    pub(crate) fn u64_gauge(&self, meter: &Meter) -> Gauge<u64> {
        debug_assert_eq!(self.kind, InstrumentKind::Gauge, "{}", self.name);
        let builder = meter.u64_gauge(self.name).with_description(self.description);
        if self.unit.is_empty() { builder.build() } else { builder.with_unit(self.unit).build() }
    }
}
