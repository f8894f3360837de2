//! Test support (feature `testing`): capture the spans that instrumented code
//! emits, and set the span-group gate directly.
//!
//! [`capture`] installs tracers that export to memory (the facade's spans
//! on the span recorder, as a job's setup puts them; spans started through
//! the OpenTelemetry API on the SDK's tracer), enables exactly the groups it
//! is given, and returns a [`Capture`] guard to read the finished spans
//! from (reading collects what the threads' buffers hold first). The active tracer and the gate are process-global, so a
//! capture also holds a process-wide lock: tests in one binary that each take
//! a capture run one after the other. Dropping the guard disables every group
//! and removes the tracer, so the next capture (or a `setup_telemetry` later
//! in the same binary) starts from nothing.
//!
//! ```
//! use lens_fallbacks::attr::KeyValue;
//! use lens_fallbacks::groups::SpanGroup;
//! use lens_fallbacks::span::managed_span;
//!
//! let spans = lens_fallbacks::testing::capture(&[SpanGroup::STEP]);
//! drop(managed_span(SpanGroup::STEP, "example.step", [KeyValue::new("example.iteration", 3)]));
//! drop(managed_span(SpanGroup::OPTIMIZER, "example.optimizer", [])); // disabled: not recorded
//! assert_eq!(spans.span_names(), ["example.step"]);
//! assert_eq!(spans.span("example.step").attributes.len(), 1);
//!
//! // Dropping the capture disables the groups and removes its tracer, so
//! // another capture can install its own.
//! drop(spans);
//! assert!(!lens_fallbacks::groups::is_span_group_enabled(SpanGroup::STEP));
//! let again = lens_fallbacks::testing::capture(&[]);
//! drop(managed_span(SpanGroup::STEP, "example.step", []));
//! assert!(again.finished_spans().is_empty());
//! ```

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

use crate::groups::{GroupSet, SpanGroup};
use crate::otel::batch::{BatchConfig, LensBatchRecordProcessor};
use crate::otel::closer::OpenSpanCloser;
use crate::otel::lens_tracer::LensTracer;
use crate::otel::recorder::{Recorder, RecordsAsSpanData};
use crate::otel::sampler::{DelegateSampler, LensSampler, delegate_from};
use crate::otel::spool::{ANONYMOUS_SLOTS, SpoolTable};
use crate::otel::{active, ids::SeedIndependentIdGenerator};

/// How long reading a capture waits for the recorder's flush.
const FLUSH_LIMIT: Duration = Duration::from_secs(10);

/// Replaces the enabled span groups, as setup and shutdown do. For tests and
/// benchmarks that drive the gate without a full setup; instrumented code
/// only reads the gate ([`crate::groups::is_span_group_enabled`]).
#[cold]
pub fn set_enabled_span_groups(groups: GroupSet) {
    crate::groups::set_enabled_span_groups(groups);
}

/// Serialises the captures of one process.
static CAPTURE_LOCK: Mutex<()> = Mutex::new(());

/// Starts capturing: takes the capture lock (waiting for another capture in
/// this process to end), installs tracers exporting to memory (the facade's
/// on the span recorder, with an open-span closer in anonymous memory, and
/// the SDK's; lens's own id generator, so chosen trace ids apply; a
/// parent-based always-on sampler, so every span is sampled) and enables
/// exactly `groups`.
///
/// # Panics
///
/// When telemetry is already set up in this process (a tracer is installed):
/// shut it down first, or keep the capture tests in their own test binary.
pub fn capture(groups: &[SpanGroup]) -> Capture {
    let lock = CAPTURE_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_id_generator(SeedIndependentIdGenerator::new())
        .build();
    let scope = InstrumentationScope::builder("lens-testing").build();
    let processor = LensBatchRecordProcessor::new(
        Arc::new(RecordsAsSpanData::new(exporter.clone(), scope.clone())),
        BatchConfig::default(),
    );
    let recorder = Recorder::with_processor(processor.clone());
    let closer = OpenSpanCloser::with_records(processor, SpoolTable::anonymous(ANONYMOUS_SLOTS));
    let sampler = LensSampler::new(delegate_from(DelegateSampler::ParentBasedAlwaysOn, None))
        .with_delegate_kind(DelegateSampler::ParentBasedAlwaysOn);
    if active::install(provider.tracer_with_scope(scope.clone())).is_err()
        || active::install_lens(LensTracer::new(recorder.clone(), sampler, closer, scope)).is_err()
    {
        panic!(
            "lens_fallbacks::testing::capture: a lens tracer is already installed in this process; shut the telemetry \
             down before capturing, or keep capture tests in their own test binary"
        );
    }
    set_enabled_span_groups(GroupSet::of(groups));
    Capture { exporter, recorder, _lock: lock }
}

/// The spans captured since [`capture`] (or the last
/// [`reset`](Capture::reset)); see the [module docs](self). Dropping it
/// disables every group and removes the tracer.
#[must_use = "spans are captured only while the guard lives"]
pub struct Capture {
    exporter: InMemorySpanExporter,
    /// The facade's spans' recorder: flushed before every read.
    recorder: Recorder,
    // Dropped last, after `Drop` has reset the gate and the tracer.
    _lock: MutexGuard<'static, ()>,
}

impl Capture {
    /// The finished spans, in the order they ended (on one thread; the
    /// facade's spans ended on other threads come a thread at a time).
    pub fn finished_spans(&self) -> Vec<SpanData> {
        // A flush that times out leaves what is pending for the next read.
        let _ = self.recorder.force_flush(FLUSH_LIMIT);
        // The in-memory exporter fails only when its lock is poisoned.
        self.exporter.get_finished_spans().unwrap_or_default()
    }

    /// The names of the finished spans, in the order they ended.
    pub fn span_names(&self) -> Vec<String> {
        self.finished_spans().into_iter().map(|span| span.name.into_owned()).collect()
    }

    /// The first finished span named `name`.
    ///
    /// # Panics
    ///
    /// When no finished span has that name (the message lists the names
    /// there are), so a test reads as its assertion.
    pub fn span(&self, name: &str) -> SpanData {
        let mut spans = self.finished_spans();
        match spans.iter().position(|span| span.name == name) {
            Some(index) => spans.swap_remove(index),
            None => panic!("no finished span named {name:?}; the finished spans are {:?}", self.span_names()),
        }
    }

    /// Forgets the spans captured so far.
    pub fn reset(&self) {
        let _ = self.recorder.force_flush(FLUSH_LIMIT);
        self.exporter.reset();
    }

    /// Enables exactly `groups` from now on (the spans captured so far stay).
    pub fn enable(&self, groups: &[SpanGroup]) {
        set_enabled_span_groups(GroupSet::of(groups));
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        set_enabled_span_groups(GroupSet::EMPTY);
        active::uninstall();
        // Stops the recorder's export thread (the tracer itself stays
        // leaked in no slot, as shutdown leaves a job's).
        let _ = self.recorder.shutdown(FLUSH_LIMIT);
    }
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("spans", &self.span_names()).finish()
    }
}
