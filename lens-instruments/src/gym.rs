//! NeMo Gym server metrics in the `gym.*` namespace: three duration
//! histograms in milliseconds and two gauges.
//!
//! [`GymMetrics::new`] creates the five instruments once from a [`Meter`];
//! [`GymMetrics::record`] (or [`record_gym_metrics`], the original's name,
//! available only from this module) records the values that are present.
//! The data points carry no attributes of their own.
//!
//! ```
//! use lens_instruments::gym::{GymMetrics, GymValues, record_gym_metrics};
//! use lens_fallbacks::metrics::Meter;
//!
//! // `telemetry.meter()` after setup; a no-op meter here, so the example
//! // runs with and without `otel`.
//! let metrics = GymMetrics::new(&Meter::noop());
//!
//! record_gym_metrics(
//!     &metrics,
//!     &GymValues {
//!         server_request_duration_ms: Some(42.0),
//!         verify_duration_ms: Some(120.0),
//!         verify_success_rate: Some(0.87),
//!         active_servers: Some(4),
//!         ..Default::default()
//!     },
//! );
//! ```

use lens_fallbacks::metrics::{Gauge, Histogram, Meter};

use crate::descriptor::{InstrumentDescriptor, InstrumentKind};
use crate::{buckets, semconv};

const fn histogram_ms(
    name: &'static str,
    description: &'static str,
    boundaries: &'static [f64],
) -> InstrumentDescriptor {
    InstrumentDescriptor { name, kind: InstrumentKind::Histogram, unit: "ms", description, attributes: &[], boundaries }
}

/// `gym.server.request_duration_ms`: histogram, milliseconds.
pub const SERVER_REQUEST_DURATION: InstrumentDescriptor = histogram_ms(
    "gym.server.request_duration_ms",
    "Duration of one request to a Gym server in milliseconds.",
    buckets::REQUEST_DURATION_MS,
);
/// `gym.rollout.duration_ms`: histogram, milliseconds.
pub const ROLLOUT_DURATION: InstrumentDescriptor = histogram_ms(
    "gym.rollout.duration_ms",
    "Duration of one Gym rollout in milliseconds.",
    buckets::ROLLOUT_DURATION_MS,
);
/// `gym.verify.duration_ms`: histogram, milliseconds.
pub const VERIFY_DURATION: InstrumentDescriptor = histogram_ms(
    "gym.verify.duration_ms",
    "Duration of one verification in milliseconds.",
    buckets::REQUEST_DURATION_MS,
);
/// `gym.verify.success_rate`: gauge.
pub const VERIFY_SUCCESS_RATE: InstrumentDescriptor = InstrumentDescriptor {
    name: semconv::GYM_VERIFY_SUCCESS_RATE,
    kind: InstrumentKind::Gauge,
    unit: "",
    description: "Share of verifications that succeeded, from 0 to 1.",
    attributes: &[],
    boundaries: &[],
};
/// `gym.servers.active`: gauge.
pub const SERVERS_ACTIVE: InstrumentDescriptor = InstrumentDescriptor {
    name: "gym.servers.active",
    kind: InstrumentKind::Gauge,
    unit: "",
    description: "Number of active Gym servers.",
    attributes: &[],
    boundaries: &[],
};

/// Every instrument of this module, in the docs table's order.
pub const INSTRUMENTS: &[InstrumentDescriptor] =
    &[SERVER_REQUEST_DURATION, ROLLOUT_DURATION, VERIFY_DURATION, VERIFY_SUCCESS_RATE, SERVERS_ACTIVE];

pub use lens_fallbacks::instrument_values::GymValues;

/// The `gym.*` instruments of one meter, created once.
///
/// Cloning is cheap and clones record into the same instruments. Creating
/// this never fails and never panics: the OpenTelemetry API reports no error
/// from instrument creation; an SDK that rejects an instrument logs why and
/// hands back a no-op one, so a broken meter records nothing.
#[derive(Clone, Debug)]
pub struct GymMetrics {
    server_request_duration: Histogram<f64>,
    rollout_duration: Histogram<f64>,
    verify_duration: Histogram<f64>,
    verify_success_rate: Gauge<f64>,
    servers_active: Gauge<u64>,
}

impl GymMetrics {
    /// Creates the five instruments on `meter`.
    #[must_use]
    pub fn new<M: Clone + Into<Meter>>(meter: &M) -> Self {
        let meter = &meter.clone().into();
        Self {
            server_request_duration: SERVER_REQUEST_DURATION.f64_histogram(meter),
            rollout_duration: ROLLOUT_DURATION.f64_histogram(meter),
            verify_duration: VERIFY_DURATION.f64_histogram(meter),
            verify_success_rate: VERIFY_SUCCESS_RATE.f64_gauge(meter),
            servers_active: SERVERS_ACTIVE.u64_gauge(meter),
        }
    }

    /// A handle that records nothing, for code paths where telemetry is off.
    #[must_use]
    pub fn noop() -> Self {
        Self::new(&Meter::noop())
    }

    /// Records the values that are present and skips the others.
    // Inline, so that at a call site that names its fields the absent ones
    // fold away and only the present values are recorded.
    #[inline]
    pub fn record(&self, values: &GymValues) {
        let histograms = [
            (&self.server_request_duration, values.server_request_duration_ms),
            (&self.rollout_duration, values.rollout_duration_ms),
            (&self.verify_duration, values.verify_duration_ms),
        ];
        for (histogram, value) in histograms {
            if let Some(value) = value {
                histogram.record(value, &[]);
            }
        }
        if let Some(rate) = values.verify_success_rate {
            self.verify_success_rate.record(rate, &[]);
        }
        if let Some(count) = values.active_servers {
            self.servers_active.record(count, &[]);
        }
    }
}

/// Records the values that are present on `metrics`; the original's name
/// for [`GymMetrics::record`].
pub fn record_gym_metrics(metrics: &GymMetrics, values: &GymValues) {
    metrics.record(values);
}
