//! The names the bridge reads (its fields) and
//! the one test on them that the filter and the bridge share: a leaf module,
//! so that the crate root only declares and re-exports.

use tracing_core::Metadata;

/// The field that names a span's group per span (a string, decided when the
/// span is created): `tracing::info_span!("load", lens.group = "checkpoint")`.
pub const GROUP_FIELD: &str = "lens.group";

/// The field that asks for one span per entry (`lens.per_entry = true`).
pub const PER_ENTRY_FIELD: &str = "lens.per_entry";

/// The field that names the recorded span, when its name is not known at
/// compile time (`otel.name = format!("{method} {route}")`), as
/// `tracing-opentelemetry` reads it; recording it later renames the span.
pub const NAME_FIELD: &str = "otel.name";

/// The field that gives the span's kind: `server`, `client`, `producer`,
/// `consumer` or `internal` (the default), as `tracing-opentelemetry` reads it.
pub const KIND_FIELD: &str = "otel.kind";

/// The field that sets the span's status: `error`, `ok` or `unset`, as
/// `tracing-opentelemetry` reads it (record it when the outcome is known).
pub const STATUS_CODE_FIELD: &str = "otel.status_code";

/// The field with the description of an `error` status. Recorded alone
/// (at the span's creation or later) it makes the status `error` with that
/// description; `otel.status_code = "ok"` still wins, as OpenTelemetry's
/// order of statuses says.
pub const STATUS_DESCRIPTION_FIELD: &str = "otel.status_description";

/// `tracing-opentelemetry`'s name for [`STATUS_DESCRIPTION_FIELD`], read
/// the same way, so that spans written for it keep their descriptions.
pub const STATUS_MESSAGE_FIELD: &str = "otel.status_message";

/// Whether a callsite's group is decided per span, by its [`GROUP_FIELD`].
pub(crate) fn decided_per_span(metadata: &Metadata<'_>) -> bool {
    metadata.fields().field(GROUP_FIELD).is_some()
}
