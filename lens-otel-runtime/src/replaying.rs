//! Whether the export being started on this thread sends spans replayed
//! from a crash spool: set by the batch processor around a replay's export,
//! read by the OTLP exporter to word its failures for a replay. A leaf, so
//! that neither imports the other.

thread_local! {
    /// Whether the exports started on this thread send spans replayed from
    /// a crash spool (the batch processor's `export_with_resource`), not
    /// the job's own.
    static REPLAYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether an export started on this thread now sends spans replayed from a
/// crash spool (setup's replay, `lens recover`): an exporter that words its
/// failures by context reads it as it starts the export.
#[cfg_attr(
    not(any(test, feature = "otlp-grpc", feature = "otlp-http")),
    expect(dead_code, reason = "only the OTLP exporter words its failures by context")
)]
pub(crate) fn replaying() -> bool {
    REPLAYING.with(std::cell::Cell::get)
}

/// Marks this thread as replaying until dropped.
pub(crate) struct ReplayScope;

impl ReplayScope {
    pub(crate) fn enter() -> ReplayScope {
        REPLAYING.with(|replaying| replaying.set(true));
        ReplayScope
    }
}

impl Drop for ReplayScope {
    fn drop(&mut self) {
        REPLAYING.with(|replaying| replaying.set(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_started_during_a_replay_know_it_and_later_ones_do_not() {
        assert!(!replaying());
        {
            let _replay = ReplayScope::enter();
            assert!(replaying());
        }
        assert!(!replaying());
    }
}
