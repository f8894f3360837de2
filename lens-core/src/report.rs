//! What telemetry exported and lost, as plain data.
//!
//! These types are pure (no OpenTelemetry type in them) so that the
//! compiled-out facade returns the same reports as the real runtime: a call
//! site that prints or inspects a [`ShutdownReport`] compiles in both modes.
//! The runtime fills them from the batch span processor's and the metric
//! exporter's counters.

use std::fmt;

/// The span counters of the batch processor (`lens_otel_runtime::batch::SpanExportCounters`, moved by the events of `lens_otel_runtime::ledger`) at one moment.
///
/// Every sampled span handed to the processor is counted once, in
/// `accepted`, `dropped_queue_full` or `rejected_after_shutdown`; every
/// accepted span ends in `exported`, `dropped_export_failed` or
/// `dropped_at_shutdown`, and until then it is [`pending`](Self::pending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpanExportSnapshot {
    /// Spans that entered the queue.
    pub accepted: u64,
    /// Spans the exporter acknowledged.
    pub exported: u64,
    /// Spans dropped because the queue was full.
    pub dropped_queue_full: u64,
    /// Spans dropped because their batch still failed after the retry window.
    pub dropped_export_failed: u64,
    /// Spans unsent when shutdown's deadline passed: still queued, in an
    /// export that had not returned, or in a batch whose retries the
    /// deadline cut short.
    pub dropped_at_shutdown: u64,
    /// Export attempts that failed (each retry that fails counts again).
    pub export_errors: u64,
    /// Export attempts that were retries.
    pub retries: u64,
    /// Spans in batches being exported now.
    pub in_flight_spans: u64,
    /// Export requests in flight now.
    pub in_flight_exports: u64,
    /// Spans that ended after shutdown began (not queued, not dropped: after
    /// shutdown the open-span closer has already exported their truncated
    /// copies).
    pub rejected_after_shutdown: u64,
}

impl SpanExportSnapshot {
    /// All spans dropped, for whatever reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_queue_full + self.dropped_export_failed + self.dropped_at_shutdown
    }

    /// Accepted spans neither exported nor dropped yet (queued or in flight).
    pub fn pending(&self) -> u64 {
        self.accepted.saturating_sub(self.exported + self.dropped_export_failed + self.dropped_at_shutdown)
    }
}

/// The metric export counters (`lens_otel_runtime::accounting::MetricExportCounters`) at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricExportSnapshot {
    /// Export calls that succeeded.
    pub exports: u64,
    /// Data points in those exports.
    pub points_exported: u64,
    /// Export calls that failed.
    pub failed_exports: u64,
    /// Data points in the collections whose first export failed (kept for
    /// resending when the exporter can resend: see `points_dropped` for
    /// what was lost).
    pub points_failed: u64,
    /// Resends of collections whose export had failed.
    pub retries: u64,
    /// Failed collections kept for resending now.
    pub collections_kept: u64,
    /// Collections lost: over the cap of kept collections, past the retry
    /// window, still kept at shutdown, or failed on an exporter that cannot
    /// resend.
    pub collections_dropped: u64,
    /// Data points in the lost collections.
    pub points_dropped: u64,
}

/// What shutdown (or a flush) achieved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Span accounting of the batch processor (exported, dropped, errors).
    pub spans: SpanExportSnapshot,
    /// Metric accounting of the periodic reader's exporter.
    pub metrics: MetricExportSnapshot,
    /// Log-record accounting of the batch log processor (the span counters'
    /// type, counting records).
    pub logs: SpanExportSnapshot,
    /// Spans still open at shutdown, ended and marked `nemo.span.truncated`.
    pub truncated_spans: usize,
    /// Spans still open at shutdown that shutdown could not end: they
    /// started while every slot of the open-span table held an open span
    /// (`<PREFIX>_SPOOL_SIZE_KIB` sizes it), so nothing kept them. Lost.
    pub lost_open_spans: u64,
    /// The steps that did not finish before the deadline (empty when all did).
    pub unfinished: Vec<&'static str>,
    /// Errors reported by the providers, secrets removed.
    pub errors: Vec<String>,
    /// Records (spans, metric collections, log records) the `file`
    /// exporter did not write because their file had reached its cap
    /// (`<PREFIX>_FILE_MAX_BYTES`).
    pub dropped_file_full: u64,
    /// Spans the collector answered as rejected in an export it accepted
    /// (OTLP's partial success, `rejected_spans`): counted among the
    /// exported, never sent again.
    pub rejected_spans: u64,
    /// Where each signal went, in words (`traces: file /abs/path`, `metrics:
    /// OTLP grpc http://localhost:4317`): the handle's destinations.
    pub destinations: Vec<String>,
    /// The crash spool file (`docs/crashes.md`) that keeps the spans this
    /// shutdown left unsent, when there is one: the next attempt of the job
    /// replays it, or `lens recover` on its directory sends them.
    pub spool_kept: Option<std::path::PathBuf>,
    /// Ended spans whose spool slot was given up during the run because
    /// every slot was taken (the spool's overflow): those of them left
    /// unsent are not in [`spool_kept`](Self::spool_kept).
    pub spool_overflow: u64,
    /// Whether this call did the work (false on a second shutdown, or for a
    /// handle that never exported).
    pub performed: bool,
}

impl ShutdownReport {
    /// Whether everything finished within the deadline.
    pub fn completed(&self) -> bool {
        self.unfinished.is_empty()
    }

    /// Whether anything was lost: spans, log records or metric collections
    /// dropped, records the file cap kept out, open spans lost, or a step
    /// past the deadline.
    ///
    /// ```
    /// let mut report = lens_core::report::ShutdownReport::default();
    /// assert!(!report.lost_something());
    /// report.spans.dropped_queue_full = 1;
    /// assert!(report.lost_something());
    /// ```
    pub fn lost_something(&self) -> bool {
        self.spans.dropped() > 0
            || self.logs.dropped() > 0
            || self.metrics.collections_dropped > 0
            || self.dropped_file_full > 0
            || self.lost_open_spans > 0
            || !self.unfinished.is_empty()
    }
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.spans;
        let m = &self.metrics;
        write!(
            f,
            "spans: {} exported, {} dropped ({} queue full, {} export failed, {} at shutdown), {} export errors; \
             metric points: {} exported, {} in failed exports; metric collections: {} dropped ({} points)",
            s.exported,
            s.dropped(),
            s.dropped_queue_full,
            s.dropped_export_failed,
            s.dropped_at_shutdown,
            s.export_errors,
            m.points_exported,
            m.points_failed,
            m.collections_dropped,
            m.points_dropped,
        )?;
        let l = &self.logs;
        if l.accepted + l.dropped() + l.export_errors > 0 {
            write!(
                f,
                "; log records: {} exported, {} dropped ({} queue full, {} export failed, {} at shutdown)",
                l.exported,
                l.dropped(),
                l.dropped_queue_full,
                l.dropped_export_failed,
                l.dropped_at_shutdown,
            )?;
        }
        if self.dropped_file_full > 0 {
            // Counted among the exported above: the exporter took them.
            write!(f, "; {} of the exported records not written: file size cap reached", self.dropped_file_full)?;
        }
        if self.rejected_spans > 0 {
            // Counted among the exported above: the collector took the
            // export, and said it kept none of these.
            write!(f, "; {} of the exported spans rejected by the collector (partial success)", self.rejected_spans)?;
        }
        if !self.destinations.is_empty() {
            write!(f, "; sent to {}", self.destinations.join(", "))?;
        }
        if self.truncated_spans > 0 {
            write!(f, "; {} open spans truncated", self.truncated_spans)?;
        }
        if self.lost_open_spans > 0 {
            write!(
                f,
                "; {} open spans lost (they started while every slot of the open-span table held an open span)",
                self.lost_open_spans
            )?;
        }
        if !self.unfinished.is_empty() {
            write!(f, "; did not finish in time: {}", self.unfinished.join(", "))?;
        }
        if let Some(spool) = &self.spool_kept {
            let dir = spool.parent().unwrap_or(spool);
            let except = if self.spool_overflow > 0 {
                format!(
                    " (but not those among the {} ended spans that gave their slot up when the spool was full)",
                    self.spool_overflow
                )
            } else {
                String::new()
            };
            write!(
                f,
                "; the spans unsent at shutdown are kept in the crash spool {}{except}: the next attempt of this job \
                 sends them, or `lens recover {}`",
                spool.display(),
                dir.display()
            )?;
        }
        Ok(())
    }
}

/// What the previous attempt's spool of this rank said when setup replayed it
/// (the crash-safe spool, `docs/crashes.md`): its last progress record and
/// its writer's last-alive stamp.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayedProgress {
    /// The spool file that was replayed.
    pub file: std::path::PathBuf,
    /// The run id in that spool's header (it may differ from this run's).
    pub run_id: String,
    /// The last iteration reached (entered) by the dead attempt.
    pub reached: u64,
    /// The last iteration it completed, if any.
    pub completed: Option<u64>,
    /// The last iteration whose checkpoint was durable, if any.
    pub durable: Option<u64>,
    /// When that progress record was written.
    pub recorded_at: std::time::SystemTime,
    /// The dead writer's last-alive stamp (refreshed every second while it
    /// lived): the best estimate of its time of death.
    pub last_alive: std::time::SystemTime,
}

impl ReplayedProgress {
    /// A record (the runtime's replay fills these from a spool header).
    pub fn new(
        file: std::path::PathBuf,
        run_id: String,
        (reached, completed, durable): (u64, Option<u64>, Option<u64>),
        recorded_at: std::time::SystemTime,
        last_alive: std::time::SystemTime,
    ) -> ReplayedProgress {
        ReplayedProgress { file, run_id, reached, completed, durable, recorded_at, last_alive }
    }
}

/// What a replay of crash-safe spools did (setup's, or `lens recover`'s).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// The spool files replayed and removed (consumed).
    pub consumed: Vec<std::path::PathBuf>,
    /// Spans exported.
    pub spans: usize,
    /// The run ids of the spools whose spans were exported, each once, in
    /// the order they were replayed: the recovered spans keep their run's
    /// id, not the replaying process's.
    pub runs: Vec<String>,
    /// Of those, spans open when their process died (ended truncated).
    pub truncated: usize,
    /// Ended spans the dead processes had dropped from their full spools.
    pub overflow: u64,
    /// Spools left alone because their writer is alive (its lock held).
    pub alive: usize,
    /// Spools that could not be read, decoded or exported (each named in a
    /// warning), left in place.
    pub failed: usize,
    /// Damaged spools (some records did not decode): the spans that did
    /// were exported, and each file was renamed to this path (`<name>.damaged`),
    /// out of every later replay's way, for inspection.
    pub set_aside: Vec<std::path::PathBuf>,
    /// Warnings (damaged or foreign files, failed exports), each also
    /// written on standard error.
    pub warnings: Vec<String>,
    /// The progress record of the replayed spool (consumed, or kept after
    /// a failed export) of the replaying rank's own rank number (rank 0's
    /// for `lens recover`) with the latest last-alive stamp, unless an
    /// earlier setup's replay already took it.
    pub progress: Option<ReplayedProgress>,
}

impl ReplayReport {
    /// Whose spans were replayed, for messages: `run R`, or `runs R1, R2`.
    ///
    /// ```
    /// let mut report = lens_core::report::ReplayReport::default();
    /// report.runs = vec!["a".into()];
    /// assert_eq!(report.runs_named(), "run a");
    /// report.runs.push("b".into());
    /// assert_eq!(report.runs_named(), "runs a, b");
    /// ```
    pub fn runs_named(&self) -> String {
        let word = if self.runs.len() == 1 { "run" } else { "runs" };
        format!("{word} {}", self.runs.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::ShutdownReport;

    /// Open spans that shutdown could not end are counted apart from the
    /// truncated ones.
    #[test]
    fn open_spans_without_a_slot_are_reported_lost() {
        let mut report = ShutdownReport::default();
        (report.truncated_spans, report.lost_open_spans) = (4080, 1920);
        let said = report.to_string();
        assert!(
            said.ends_with(
                "; 4080 open spans truncated; 1920 open spans lost (they started while every slot of the open-span \
                 table held an open span)"
            ),
            "{said}"
        );
    }

    /// The report names the spool that keeps the unsent spans, and says
    /// that a spool that was full during the run does not keep them all.
    #[test]
    fn a_kept_spool_says_what_a_full_spool_gave_up() {
        let mut report = ShutdownReport::default();
        report.spans.dropped_at_shutdown = 3;
        report.spool_kept = Some("/d/spool-rank0.bin".into());
        let said = report.to_string();
        assert!(
            said.ends_with(
                "; the spans unsent at shutdown are kept in the crash spool /d/spool-rank0.bin: the next attempt \
                 of this job sends them, or `lens recover /d`"
            ),
            "{said}"
        );
        report.spool_overflow = 7;
        let said = report.to_string();
        assert!(
            said.contains(
                "kept in the crash spool /d/spool-rank0.bin (but not those among the 7 ended spans that gave their \
                 slot up when the spool was full): the next attempt"
            ),
            "{said}"
        );
    }
}
