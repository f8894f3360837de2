//! The eight `megatron.training.*` metrics (the original's
//! metrics page).
//!
//! The names, kinds, units, descriptions and Prometheus names are data:
//! [`METRICS`] holds one [`MetricDef`] per instrument, the instruments are
//! created from it, and the table in `docs/metrics-megatron.md` is generated
//! from it (`cargo xtask codegen`), so that dashboards, docs and code agree.
//!
//! Only the step duration declares a unit (`ms`). The other units (TFLOP/s,
//! tokens/s, GiB) are in the descriptions only: a declared unit makes the
//! OpenTelemetry-to-Prometheus translation append a suffix, and the seed's
//! Prometheus names (`megatron_training_throughput_tflops`, ...) have none.
//! No metric carries attributes: one series per process, identified by the
//! resource attributes (`nemo.run.id`, ranks, ...).
//!
//! [`TrainingMetrics`] has no `cfg` of its own: it is built on lens-core's
//! metric handles ([`lens_fallbacks::metrics`]), which hold OpenTelemetry
//! instruments with the `otel` feature and nothing without it, so this module
//! is one definition for both builds, like the pure helpers
//! ([`TrainingValues`], [`select_loss`], [`PeakTracker`]).
//!
//! Recording is the caller's job, and only on the exporting rank, once per log
//! interval (the lifecycle decides); a non-exporting rank holds
//! [`TrainingMetrics::noop`] and records nothing.
//!
//! ```
//! use megatron_telemetry::metrics::{PeakTracker, TrainingMetrics, TrainingValues, select_loss};
//!
//! let metrics = TrainingMetrics::noop(); // a non-exporting rank
//! let peak = PeakTracker::new();
//! let losses = [("lm loss", 2.5), ("advanced iterations", 10.0)];
//! metrics.record(&TrainingValues {
//!     step_duration_ms: Some(812.0),
//!     loss: select_loss(&losses).value(),
//!     memory_allocated_gb: Some(peak.observe_bytes(3 << 30)),
//!     ..TrainingValues::default()
//! });
//! assert_eq!(peak.peak_gib(), Some(3.0));
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

/// One metric's definition and its instrument kind: lens-training's, so
/// that Megatron's table and the shared `dl.*` tables have one shape.
pub use lens_training::names::{InstrumentKind, MetricDef};

/// `megatron.training.step_duration_ms`: histogram, unit `ms`.
pub const STEP_DURATION_MS: MetricDef = MetricDef {
    name: "megatron.training.step_duration_ms",
    kind: InstrumentKind::Histogram,
    unit: Some("ms"),
    value_unit: Some("ms"),
    description: "Duration of one training step in milliseconds (average over the log interval)",
    prometheus_name: "megatron_training_step_duration_ms_milliseconds",
};
/// `megatron.training.loss`: gauge.
pub const LOSS: MetricDef = MetricDef {
    name: "megatron.training.loss",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: None,
    description: "Training loss (last value per log interval)",
    prometheus_name: "megatron_training_loss",
};
/// `megatron.training.throughput_tflops`: gauge, values in TFLOP/s per GPU.
pub const THROUGHPUT_TFLOPS: MetricDef = MetricDef {
    name: "megatron.training.throughput_tflops",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: Some("TFLOP/s"),
    description: "Training throughput in TFLOP/s/GPU",
    prometheus_name: "megatron_training_throughput_tflops",
};
/// `megatron.training.tokens_per_sec`: gauge, values in tokens/s.
pub const TOKENS_PER_SEC: MetricDef = MetricDef {
    name: "megatron.training.tokens_per_sec",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: Some("tokens/s"),
    description: "Training throughput in tokens per second (tokens/s, global batch)",
    prometheus_name: "megatron_training_tokens_per_sec",
};
/// `megatron.training.grad_norm`: gauge.
pub const GRAD_NORM: MetricDef = MetricDef {
    name: "megatron.training.grad_norm",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: None,
    description: "Global gradient norm",
    prometheus_name: "megatron_training_grad_norm",
};
/// `megatron.training.skipped_iters`: counter.
pub const SKIPPED_ITERS: MetricDef = MetricDef {
    name: "megatron.training.skipped_iters",
    kind: InstrumentKind::Counter,
    unit: None,
    value_unit: None,
    description: "Optimizer steps skipped (NaN/inf loss)",
    prometheus_name: "megatron_training_skipped_iters_total",
};
/// `megatron.training.learning_rate`: gauge.
pub const LEARNING_RATE: MetricDef = MetricDef {
    name: "megatron.training.learning_rate",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: None,
    description: "Current learning rate",
    prometheus_name: "megatron_training_learning_rate",
};
/// `megatron.training.memory_allocated_gb`: gauge, values in GiB.
pub const MEMORY_ALLOCATED_GB: MetricDef = MetricDef {
    name: "megatron.training.memory_allocated_gb",
    kind: InstrumentKind::Gauge,
    unit: None,
    value_unit: Some("GiB"),
    description: "Peak GPU memory allocated, in GiB (1024^3 bytes)",
    prometheus_name: "megatron_training_memory_allocated_gb",
};

/// The eight training metrics, in the seed page's order.
pub const METRICS: &[MetricDef] = &[
    STEP_DURATION_MS,
    LOSS,
    THROUGHPUT_TFLOPS,
    TOKENS_PER_SEC,
    GRAD_NORM,
    SKIPPED_ITERS,
    LEARNING_RATE,
    MEMORY_ALLOCATED_GB,
];

/// Bucket boundaries of the step-duration histogram, in ms: 1 ms to 10 min
/// in a 1-2-5 series, since the SDK's default boundaries (0 to 10,000) put
/// every step over 10 s into one bucket.
pub const STEP_DURATION_BOUNDARIES_MS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0, 20_000.0, 30_000.0,
    60_000.0, 120_000.0, 300_000.0, 600_000.0,
];

/// The values of one log interval. Only the ones present are recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TrainingValues {
    /// Average duration of one step over the interval, in ms (one histogram
    /// sample per log interval, not per step).
    pub step_duration_ms: Option<f64>,
    /// The training loss (see [`select_loss`] for which key).
    pub loss: Option<f64>,
    /// Throughput in TFLOP/s per GPU.
    pub throughput_tflops: Option<f64>,
    /// The global gradient norm.
    pub grad_norm: Option<f64>,
    /// Optimizer steps skipped in this interval; added to the counter only
    /// when above zero.
    pub skipped_iters: Option<u64>,
    /// The current learning rate.
    pub learning_rate: Option<f64>,
    /// Tokens per second (global batch size times sequence length over the
    /// step time).
    pub tokens_per_sec: Option<f64>,
    /// Peak GPU memory allocated so far, in GiB (see [`PeakTracker`]).
    pub memory_allocated_gb: Option<f64>,
}

/// The loss key that wins when present.
pub const LM_LOSS_KEY: &str = "lm loss";

/// Keys of a loss dict that are counters, not losses; [`select_loss`]
/// ignores them.
pub const META_LOSS_KEYS: [&str; 3] = ["advanced iterations", "skipped iterations", "nan iterations"];

/// Which loss [`select_loss`] picked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossChoice<'a> {
    /// Export this key's value.
    Chosen {
        /// The key picked.
        key: &'a str,
        /// Its value.
        value: f64,
    },
    /// No loss key at all (empty, or only meta keys): nothing to export.
    NoLoss,
    /// Several loss keys and none is `lm loss`: which one is meant is
    /// ambiguous, so the loss metric is skipped.
    Ambiguous {
        /// How many loss keys there were.
        candidates: usize,
    },
}

impl LossChoice<'_> {
    /// The value to record, if any.
    pub fn value(&self) -> Option<f64> {
        match self {
            LossChoice::Chosen { value, .. } => Some(*value),
            LossChoice::NoLoss | LossChoice::Ambiguous { .. } => None,
        }
    }
}

/// Picks the loss to export from a loss dict: the `lm loss` key
/// when present, otherwise the only non-meta key; several non-meta keys
/// without `lm loss` are [`LossChoice::Ambiguous`]. The meta keys
/// ([`META_LOSS_KEYS`]) are ignored. Values are returned as given: pass the
/// interval's averaged losses, read before the accumulators are reset.
///
/// ```
/// use megatron_telemetry::metrics::{LossChoice, select_loss};
///
/// assert_eq!(select_loss(&[("mtp loss", 1.0), ("lm loss", 2.0)]).value(), Some(2.0));
/// assert_eq!(select_loss(&[("skipped iterations", 0.0), ("loss", 3.0)]).value(), Some(3.0));
/// assert_eq!(select_loss(&[("a", 1.0), ("b", 2.0)]), LossChoice::Ambiguous { candidates: 2 });
/// assert_eq!(select_loss(&[("advanced iterations", 10.0)]), LossChoice::NoLoss);
/// ```
pub fn select_loss<'a>(losses: &[(&'a str, f64)]) -> LossChoice<'a> {
    if let Some((key, value)) = losses.iter().find(|(key, _)| *key == LM_LOSS_KEY) {
        return LossChoice::Chosen { key, value: *value };
    }
    let mut candidates = losses.iter().filter(|(key, _)| !META_LOSS_KEYS.contains(key));
    match (candidates.next(), candidates.count()) {
        (None, _) => LossChoice::NoLoss,
        (Some((key, value)), 0) => LossChoice::Chosen { key, value: *value },
        (Some(_), rest) => LossChoice::Ambiguous { candidates: rest + 1 },
    }
}

/// Bytes in one GiB.
pub const BYTES_PER_GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// `bytes` in GiB.
#[inline]
pub fn bytes_to_gib(bytes: u64) -> f64 {
    bytes as f64 / BYTES_PER_GIB
}

/// A running peak of allocated GPU memory, for
/// [`TrainingValues::memory_allocated_gb`].
///
/// The original exported PyTorch's peak-allocated counter, which it never
/// reset, so the metric is a running peak over the run; feed this the current
/// (or the framework's peak) allocation each interval and export what it
/// returns. Lock-free, so it can be shared.
#[derive(Debug, Default)]
pub struct PeakTracker {
    /// The peak in bytes, plus one (zero means "nothing observed").
    peak_plus_one: AtomicU64,
}

impl PeakTracker {
    /// A tracker that has observed nothing.
    pub const fn new() -> PeakTracker {
        PeakTracker { peak_plus_one: AtomicU64::new(0) }
    }

    /// Observes an allocation of `bytes` and returns the running peak in GiB.
    pub fn observe_bytes(&self, bytes: u64) -> f64 {
        let candidate = bytes.saturating_add(1);
        let previous = self.peak_plus_one.fetch_max(candidate, Ordering::Relaxed);
        bytes_to_gib(previous.max(candidate) - 1)
    }

    /// The peak so far in GiB, or `None` before the first observation.
    pub fn peak_gib(&self) -> Option<f64> {
        match self.peak_plus_one.load(Ordering::Relaxed) {
            0 => None,
            n => Some(bytes_to_gib(n - 1)),
        }
    }

    /// Forgets the peak (for a new telemetry lifetime in the same process).
    pub fn reset(&self) {
        self.peak_plus_one.store(0, Ordering::Relaxed);
    }
}

use std::sync::atomic::{AtomicBool, AtomicU8};

use lens_fallbacks::metrics::{Counter, Gauge, Histogram, Meter};

/// The eight training instruments, created once from a meter.
///
/// Create it at setup on the exporting rank, keep it for the telemetry
/// lifetime, and call [`TrainingMetrics::record`] once per log interval.
/// Other ranks hold [`TrainingMetrics::noop`]. One definition for both
/// builds: it is built on lens-core's metric handles, which are
/// OpenTelemetry instruments with the `otel` feature and no-ops without it.
#[derive(Debug)]
pub struct TrainingMetrics {
    /// No-op handles on a no-op handle: each record checks its own
    /// instrument only, as a raw instrument would be called.
    instruments: Instruments,
    loss_warned: AtomicBool,
    /// The metrics (bits in [`METRICS`]' order) already warned about for a
    /// value they cannot carry.
    refused_warned: AtomicU8,
}

#[derive(Debug)]
struct Instruments {
    step_duration_ms: Histogram<f64>,
    loss: Gauge<f64>,
    throughput_tflops: Gauge<f64>,
    tokens_per_sec: Gauge<f64>,
    grad_norm: Gauge<f64>,
    skipped_iters: Counter<u64>,
    learning_rate: Gauge<f64>,
    memory_allocated_gb: Gauge<f64>,
}

fn gauge(meter: &Meter, def: &MetricDef) -> Gauge<f64> {
    meter.f64_gauge(def.name).with_description(def.description).build()
}

impl TrainingMetrics {
    /// Creates the eight instruments on `meter` (lens's [`Meter`], or with
    /// `otel` an OpenTelemetry one). Instruments are never looked up again:
    /// recording goes straight to them. A no-op meter gives a no-op handle.
    pub fn new<M: Clone + Into<Meter>>(meter: &M) -> TrainingMetrics {
        let meter: Meter = meter.clone().into();
        if meter.is_noop() {
            return TrainingMetrics::noop();
        }
        let mut histogram = meter
            .f64_histogram(STEP_DURATION_MS.name)
            .with_description(STEP_DURATION_MS.description)
            .with_boundaries(STEP_DURATION_BOUNDARIES_MS.to_vec());
        if let Some(unit) = STEP_DURATION_MS.unit {
            histogram = histogram.with_unit(unit);
        }
        let instruments = Instruments {
            step_duration_ms: histogram.build(),
            loss: gauge(&meter, &LOSS),
            throughput_tflops: gauge(&meter, &THROUGHPUT_TFLOPS),
            tokens_per_sec: gauge(&meter, &TOKENS_PER_SEC),
            grad_norm: gauge(&meter, &GRAD_NORM),
            skipped_iters: meter.u64_counter(SKIPPED_ITERS.name).with_description(SKIPPED_ITERS.description).build(),
            learning_rate: gauge(&meter, &LEARNING_RATE),
            memory_allocated_gb: gauge(&meter, &MEMORY_ALLOCATED_GB),
        };
        TrainingMetrics { instruments, loss_warned: AtomicBool::new(false), refused_warned: AtomicU8::new(0) }
    }

    /// A handle that records nothing (non-exporting ranks, telemetry off).
    pub const fn noop() -> TrainingMetrics {
        let instruments = Instruments {
            step_duration_ms: Histogram::noop(),
            loss: Gauge::noop(),
            throughput_tflops: Gauge::noop(),
            tokens_per_sec: Gauge::noop(),
            grad_norm: Gauge::noop(),
            skipped_iters: Counter::noop(),
            learning_rate: Gauge::noop(),
            memory_allocated_gb: Gauge::noop(),
        };
        TrainingMetrics { instruments, loss_warned: AtomicBool::new(false), refused_warned: AtomicU8::new(0) }
    }

    /// Whether this handle records nothing (always true without `otel`).
    pub fn is_noop(&self) -> bool {
        // All eight are created together: one stands for them.
        self.instruments.loss.is_noop()
    }

    /// Records the values present in `values`, with no attributes; the
    /// skipped-iterations counter only when its value is above zero.
    ///
    /// Inline, so that at a call site that names its fields the absent
    /// ones fold away.
    ///
    /// A value a metric cannot carry is not recorded, and warned about once
    /// per metric and handle: a NaN or infinite value (a diverged loss or
    /// grad norm; OpenTelemetry drops it, so the gauge would go on
    /// exporting the last finite value unannounced), and a negative step
    /// duration.
    #[inline]
    pub fn record(&self, values: &TrainingValues) {
        let i = &self.instruments;
        if let Some(v) = values.step_duration_ms
            && self.carries(0, &STEP_DURATION_MS, v, v >= 0.0)
        {
            i.step_duration_ms.record(v, &[]);
        }
        if let Some(v) = values.loss
            && self.carries(1, &LOSS, v, true)
        {
            i.loss.record(v, &[]);
        }
        if let Some(v) = values.throughput_tflops
            && self.carries(2, &THROUGHPUT_TFLOPS, v, true)
        {
            i.throughput_tflops.record(v, &[]);
        }
        if let Some(v) = values.tokens_per_sec
            && self.carries(3, &TOKENS_PER_SEC, v, true)
        {
            i.tokens_per_sec.record(v, &[]);
        }
        if let Some(v) = values.grad_norm
            && self.carries(4, &GRAD_NORM, v, true)
        {
            i.grad_norm.record(v, &[]);
        }
        if let Some(v) = values.skipped_iters
            && v > 0
        {
            i.skipped_iters.add(v, &[]);
        }
        if let Some(v) = values.learning_rate
            && self.carries(6, &LEARNING_RATE, v, true)
        {
            i.learning_rate.record(v, &[]);
        }
        if let Some(v) = values.memory_allocated_gb
            && self.carries(7, &MEMORY_ALLOCATED_GB, v, true)
        {
            i.memory_allocated_gb.record(v, &[]);
        }
    }

    /// Whether `metric` (bit `bit`) can carry `value`: finite, and `in_range`.
    /// Otherwise warns the first time for this metric.
    #[inline]
    fn carries(&self, bit: u8, metric: &MetricDef, value: f64, in_range: bool) -> bool {
        if value.is_finite() && in_range {
            return true;
        }
        self.refuse(bit, metric, value);
        false
    }

    #[cold]
    fn refuse(&self, bit: u8, metric: &MetricDef, value: f64) {
        if self.is_noop() || self.refused_warned.fetch_or(1 << bit, Ordering::Relaxed) & (1 << bit) != 0 {
            return;
        }
        let why = if value.is_finite() { "a duration cannot be negative" } else { "a metric cannot carry it" };
        lens_fallbacks::diag::warn(format_args!(
            "{} is {value}: {why}, so it is not recorded, and the last value recorded stays the one exported (warned \
             once; later such values are not recorded either)",
            metric.name
        ));
    }

    /// The loss to record from a loss dict, per [`select_loss`]. When the
    /// choice is ambiguous this warns once per handle (naming the keys)
    /// and returns `None`, so the loss metric is skipped. A no-op handle
    /// never warns (nothing is recorded).
    pub fn loss_from(&self, losses: &[(&str, f64)]) -> Option<f64> {
        let choice = select_loss(losses);
        if let LossChoice::Ambiguous { .. } = choice
            && !self.is_noop()
            && !self.loss_warned.swap(true, Ordering::Relaxed)
        {
            warn_ambiguous(losses);
        }
        choice.value()
    }
}

#[cold]
fn warn_ambiguous(losses: &[(&str, f64)]) {
    let keys: Vec<&str> = losses.iter().map(|(k, _)| *k).filter(|k| !META_LOSS_KEYS.contains(k)).collect();
    lens_fallbacks::diag::warn(format_args!(
        "megatron.training.loss is not recorded: the loss dict has several keys ({}) and none is '{}'; \
         name the loss to export 'lm loss'",
        keys.join(", "),
        LM_LOSS_KEY
    ));
}
