//! Integration tests of lens-instruments: every instrument recorded through
//! an SDK meter provider with an in-memory exporter, checked by name, kind,
//! unit, description, attributes, values and bucket boundaries, plus the
//! check that `docs/metrics-lens.md` matches the instrument descriptors.
//!
//! One test binary (modules below) so the SDK is linked once.

mod common;
mod docs;
mod gym;
mod handles;
mod inference;
mod rl;
