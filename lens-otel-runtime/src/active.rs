//! The active tracer: the one process-global slot that the span helpers read.
//!
//! Setup installs the tracer of the providers it built, shutdown removes it;
//! nothing else writes the slot. The span helpers read it after their group's
//! gate has passed, so a disabled span never reaches this module.
//!
//! The slot is an [`AtomicPtr`] to a leaked `Box<SdkTracer>`: reading it is
//! one `Acquire` load, with no lock and no `Arc` clone per span, and the
//! reference it hands out is `&'static`. The price is one leaked tracer (a few
//! hundred bytes, and the provider it keeps alive) per telemetry lifetime,
//! because a reader may still hold the reference when shutdown empties the
//! slot; `tracing`'s global dispatcher makes the same trade. Shutting the
//! provider down does not depend on dropping it, so the leak never keeps a
//! provider exporting: a tracer whose provider was shut down starts only
//! non-recording spans.

use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use opentelemetry::Context;
use opentelemetry::trace::{SpanBuilder, TraceContextExt as _, Tracer as _};
use opentelemetry_sdk::trace::SdkTracer;

use crate::lens_tracer::LensTracer;

/// The slot: null (no tracer) or a pointer from `Box::into_raw` that is never
/// freed once published.
static ACTIVE: AtomicPtr<SdkTracer> = AtomicPtr::new(ptr::null_mut());

/// The facade's tracer on the span recorder, when setup built one: null or
/// a leaked `Box`, as [`ACTIVE`].
static ACTIVE_LENS: AtomicPtr<LensTracer> = AtomicPtr::new(ptr::null_mut());

/// The facade's tracer on the span recorder ([`crate::lens_tracer`]), if
/// setup installed one; the span helpers prefer it to [`tracer`].
///
/// One `Acquire` load.
#[inline]
pub fn lens_tracer() -> Option<&'static LensTracer> {
    read(&ACTIVE_LENS)
}

/// Installs `tracer` as the facade's tracer on the recorder, next to the
/// SDK tracer of [`install`] (setup calls both). Fails, and drops `tracer`,
/// when one is already installed.
#[doc(hidden)]
#[cold]
pub fn install_lens(tracer: LensTracer) -> Result<(), TracerAlreadyInstalled> {
    publish(&ACTIVE_LENS, tracer)
}

/// What `slot` holds, for `'static`.
#[inline]
fn read<T>(slot: &AtomicPtr<T>) -> Option<&'static T> {
    let pointer = slot.load(Ordering::Acquire);
    // SAFETY: a slot holds either null or a pointer that came from
    // `Box::into_raw` in `publish` and is never freed after it was published
    // (uninstall leaks it on purpose), so it is valid for `'static`; the
    // `Acquire` load pairs with the `AcqRel` exchange that published it, so
    // the tracer's initialisation is visible here.
    unsafe { pointer.as_ref() }
}

/// Publishes `value` in the empty `slot`; fails, and drops `value`, when the
/// slot holds one already.
fn publish<T>(slot: &AtomicPtr<T>, value: T) -> Result<(), TracerAlreadyInstalled> {
    let pointer = Box::into_raw(Box::new(value));
    match slot.compare_exchange(ptr::null_mut(), pointer, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Ok(()),
        Err(_) => {
            // SAFETY: `pointer` came from `Box::into_raw` just above and was
            // never published, so this is its only owner.
            drop(unsafe { Box::from_raw(pointer) });
            Err(TracerAlreadyInstalled)
        }
    }
}

/// The tracer a span starts on: the facade's tracer on the span recorder
/// when one is installed (setup and the `testing` capture install it), else
/// an SDK tracer installed alone (a bench, a program's own). The facade's
/// helpers and the `tracing` bridge both choose through [`active_tracer`].
#[derive(Clone, Copy, Debug)]
pub enum ActiveTracer {
    /// The facade's tracer on the span recorder.
    Recorder(&'static LensTracer),
    /// An SDK tracer installed alone.
    Sdk(&'static SdkTracer),
}

/// The active tracer, if telemetry is set up (one or two loads).
#[inline]
pub fn active_tracer() -> Option<ActiveTracer> {
    if let Some(tracer) = lens_tracer() {
        return Some(ActiveTracer::Recorder(tracer));
    }
    tracer().map(ActiveTracer::Sdk)
}

impl ActiveTracer {
    /// `parent` with a new span of `builder`, a child of its span.
    pub fn build_with_context(self, builder: SpanBuilder, parent: &Context) -> Context {
        match self {
            ActiveTracer::Recorder(tracer) => tracer.build_with_context(builder, parent),
            ActiveTracer::Sdk(tracer) => parent.with_span(tracer.build_with_context(builder, parent)),
        }
    }
}

/// A tracer is already installed; shut the active telemetry down first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracerAlreadyInstalled;

impl fmt::Display for TracerAlreadyInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a lens tracer is already installed in this process: shut the active telemetry down before setting it up again")
    }
}

impl std::error::Error for TracerAlreadyInstalled {}

/// The tracer the span helpers use, if telemetry is set up.
///
/// One `Acquire` load. `None` before setup, on ranks that record no spans and
/// after shutdown.
#[inline]
pub fn tracer() -> Option<&'static SdkTracer> {
    read(&ACTIVE)
}

/// Installs `tracer` as the active tracer.
///
/// Only setup calls this (it is public for lens-core's integration tests).
/// Fails, and drops `tracer`, when a tracer is already installed.
#[doc(hidden)]
#[cold]
pub fn install(tracer: SdkTracer) -> Result<(), TracerAlreadyInstalled> {
    publish(&ACTIVE, tracer)
}

/// Empties the slots. The tracers that were there are leaked (see the module
/// docs); new spans are inert from here on.
///
/// Only shutdown calls this. Returns whether a tracer was installed.
#[doc(hidden)]
#[cold]
pub fn uninstall() -> bool {
    let lens = !ACTIVE_LENS.swap(ptr::null_mut(), Ordering::AcqRel).is_null();
    !ACTIVE.swap(ptr::null_mut(), Ordering::AcqRel).is_null() || lens
}
