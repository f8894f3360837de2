//! What an export attempt gives lens's batch processors: success, or an
//! error that says whether and when the export may be tried again (OTLP's
//! rules, which lens's OTLP span sender reads from the collector's answer).
//! A leaf module: the batch processors and the exporters both name it.

use std::fmt;
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkError;

/// What one export attempt gave.
pub type ExportResult = Result<(), ExportError>;

/// A failed export attempt: the error, and whether the export may be
/// tried again ([`Retry`]). Any `OTelSdkError` converts into one that is
/// retried with backoff, so an exporter that knows nothing of OTLP's rules
/// keeps lens's retry window.
#[derive(Debug)]
pub struct ExportError {
    /// What went wrong.
    pub error: OTelSdkError,
    /// Whether and when to try again.
    pub retry: Retry,
}

impl From<OTelSdkError> for ExportError {
    fn from(error: OTelSdkError) -> ExportError {
        ExportError { error, retry: Retry::Backoff }
    }
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

/// Whether a failed export may be tried again, as the destination said
/// (OTLP's rules: `docs/exporters.md`, "Retries").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Retried with exponential backoff within the retry window (no answer,
    /// an answer that says to try later, any failure of an exporter that
    /// does not say).
    Backoff,
    /// Retried no sooner than this, as the destination asked (HTTP
    /// `Retry-After`, gRPC `RetryInfo`), nor sooner than the backoff,
    /// within the retry window.
    After(Duration),
    /// Never retried: the destination's answer is final (HTTP 400, 401,
    /// 403, 404, 413, ...; gRPC `UNAUTHENTICATED`, `INVALID_ARGUMENT`,
    /// ...). The batch is dropped and counted at once.
    Never,
}
