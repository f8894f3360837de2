//! The export-path check: whether the current thread is one of lens's export
//! threads (named with a prefix of [`crate::names::EXPORT_THREAD_PREFIXES`]), where
//! the OTLP exporter's own `tracing` spans (hyper, h2, tonic, reqwest) are
//! emitted and must never be recorded, whatever the rules say.
//!
//! The name is read once per thread and the answer kept in a thread-local,
//! so the check is a thread-local load.

use std::cell::Cell;

/// 0: not known yet, 1: an export thread, 2: any other thread.
const UNKNOWN: u8 = 0;
const EXPORT: u8 = 1;
const OTHER: u8 = 2;

thread_local! {
    static KIND: Cell<u8> = const { Cell::new(UNKNOWN) };
}

/// Whether the current thread is on lens's export path.
#[inline]
pub(crate) fn on_export_path() -> bool {
    KIND.try_with(|kind| {
        let mut known = kind.get();
        if known == UNKNOWN {
            known = classify();
            kind.set(known);
        }
        known == EXPORT
    })
    // During thread teardown: record nothing rather than guess.
    .unwrap_or(true)
}

#[cold]
fn classify() -> u8 {
    let thread = std::thread::current();
    let export =
        thread.name().is_some_and(|name| crate::names::EXPORT_THREAD_PREFIXES.iter().any(|p| name.starts_with(p)));
    if export { EXPORT } else { OTHER }
}

#[cfg(test)]
mod tests {
    use super::on_export_path;

    #[test]
    fn lens_threads_are_on_the_export_path_and_others_are_not() {
        let on =
            |name: &str| std::thread::Builder::new().name(name.into()).spawn(on_export_path).unwrap().join().unwrap();
        assert!(on("lens-otlp"));
        assert!(on("lens-send-3"));
        assert!(on("reqwest-internal-sync-runtime"));
        assert!(!on("tokio-runtime-worker"));
        assert!(!on("lensing"));
    }
}
