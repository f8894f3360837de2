//! A span as plain data ([`SpanRecord`]), what the span recorder
//! ([`crate::recorder`]) keeps per thread and the batch processor queues,
//! and the OTLP request built straight from such records
//! ([`encode_request`]), without the SDK's span object. A leaf module: the
//! recorder and the batch processor both use it.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{Event, Link, SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource as ProtoResource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span as ProtoSpan, span, status};
use opentelemetry_proto::transform::common::tonic::{Attributes, ResourceAttributesWithSchema};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// One ended span as plain data: what the calling thread records.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    /// The span's name (usually a `&'static str`).
    pub name: Cow<'static, str>,
    /// Its trace and span id, flags and trace state.
    pub span_context: SpanContext,
    /// The parent's span id ([`SpanId::INVALID`] for a root).
    pub parent_span_id: SpanId,
    /// Whether the parent came from another process (`traceparent`).
    pub parent_span_is_remote: bool,
    /// The span's kind.
    pub span_kind: SpanKind,
    /// When it started, in nanoseconds since the Unix epoch (OTLP's and
    /// the spool's unit: the calling thread converts nothing).
    pub start_time_unix_nano: u64,
    /// When it ended, in nanoseconds since the Unix epoch.
    pub end_time_unix_nano: u64,
    /// Its attributes, by value.
    pub attributes: Vec<KeyValue>,
    /// Attributes dropped before it was recorded (a spool slot's limit on a
    /// replayed or truncated copy).
    pub dropped_attributes_count: u32,
    /// Its events.
    pub events: Vec<Event>,
    /// Its links.
    pub links: Vec<Link>,
    /// Its status.
    pub status: Status,
    /// The spool slot that keeps it until it is exported (set by lens's
    /// tracer; `None` for a record made elsewhere).
    pub spool_slot: Option<SpoolSlot>,
}

/// The slot that keeps a span started by lens's tracer, from its start
/// until the batch processor releases it (exported or dropped). Its claim
/// tells it apart from a later holder of the same slot: releasing a slot
/// given up since (a full table, the closer's drain) does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpoolSlot {
    pub(crate) order: NonZeroU64,
    pub(crate) index: u32,
    /// The numbers of attributes and events the slot holds (written at the
    /// start, and again when an event is added), saturated.
    pub(crate) attributes: u16,
    pub(crate) events: u16,
}

impl SpoolSlot {
    /// The index of a span that got no slot because every slot held an open
    /// span: nothing is written for it, and the table counts it until it
    /// ends.
    pub(crate) const UNKEPT: u32 = u32::MAX;

    /// Whether the span has a slot (not [`UNKEPT`](Self::UNKEPT)).
    pub(crate) fn is_kept(&self) -> bool {
        self.index != Self::UNKEPT
    }
}

impl SpanRecord {
    /// The SDK's `SpanData` of this record in `scope`, for exporters that
    /// consume it.
    pub fn to_span_data(self, scope: &InstrumentationScope) -> SpanData {
        let mut events = SpanEvents::default();
        events.events = self.events;
        let mut links = SpanLinks::default();
        links.links = self.links;
        SpanData {
            span_context: self.span_context,
            parent_span_id: self.parent_span_id,
            parent_span_is_remote: self.parent_span_is_remote,
            span_kind: self.span_kind,
            name: self.name,
            start_time: time_of(self.start_time_unix_nano),
            end_time: time_of(self.end_time_unix_nano),
            attributes: self.attributes,
            dropped_attributes_count: self.dropped_attributes_count,
            events,
            links,
            status: self.status,
            instrumentation_scope: scope.clone(),
        }
    }

    /// The record of a span the SDK ended (its scope is left out: a
    /// recorder's exporter puts every record in its own scope).
    pub fn from_span_data(span: SpanData) -> SpanRecord {
        SpanRecord {
            name: span.name,
            span_context: span.span_context,
            parent_span_id: span.parent_span_id,
            parent_span_is_remote: span.parent_span_is_remote,
            span_kind: span.span_kind,
            start_time_unix_nano: unix_nanos(span.start_time),
            end_time_unix_nano: unix_nanos(span.end_time),
            attributes: span.attributes,
            dropped_attributes_count: span.dropped_attributes_count,
            events: span.events.events,
            links: span.links.links,
            status: span.status,
            spool_slot: None,
        }
    }

    /// The OTLP span of this record, built directly (no `SpanData`).
    fn into_proto(self) -> ProtoSpan {
        let context = &self.span_context;
        let mut flags = span_flags::HAS_IS_REMOTE | u32::from(context.trace_flags().to_u8());
        if self.parent_span_is_remote {
            flags |= span_flags::IS_REMOTE;
        }
        let kind: span::SpanKind = self.span_kind.into();
        ProtoSpan {
            trace_id: context.trace_id().to_bytes().to_vec(),
            span_id: context.span_id().to_bytes().to_vec(),
            trace_state: context.trace_state().header(),
            parent_span_id: if self.parent_span_id == SpanId::INVALID {
                Vec::new()
            } else {
                self.parent_span_id.to_bytes().to_vec()
            },
            flags,
            name: self.name.into_owned(),
            kind: kind as i32,
            start_time_unix_nano: self.start_time_unix_nano,
            end_time_unix_nano: self.end_time_unix_nano,
            attributes: Attributes::from(self.attributes).0,
            dropped_attributes_count: self.dropped_attributes_count,
            events: self
                .events
                .into_iter()
                .map(|event| span::Event {
                    time_unix_nano: unix_nanos(event.timestamp),
                    name: event.name.into_owned(),
                    attributes: Attributes::from(event.attributes).0,
                    dropped_attributes_count: event.dropped_attributes_count,
                })
                .collect(),
            dropped_events_count: 0,
            links: self.links.into_iter().map(Into::into).collect(),
            dropped_links_count: 0,
            status: Some(opentelemetry_proto::tonic::trace::v1::Status {
                code: status::StatusCode::from(&self.status).into(),
                message: match self.status {
                    Status::Error { description } => description.into_owned(),
                    _ => String::new(),
                },
            }),
        }
    }
}

/// OTLP's span flags (`opentelemetry.proto.trace.v1.SpanFlags`).
pub(crate) mod span_flags {
    /// The flags say whether the parent is remote.
    pub(crate) const HAS_IS_REMOTE: u32 = 0x100;
    /// The parent is remote.
    pub(crate) const IS_REMOTE: u32 = 0x200;
}

/// `time` in nanoseconds since the Unix epoch (0 before it).
pub fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The time `nanos` nanoseconds after the Unix epoch.
pub fn time_of(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

/// Now, in nanoseconds since the Unix epoch: one read of the realtime
/// clock (a vDSO call), without `SystemTime`'s checked arithmetic and
/// conversion (a span reads the clock at its start and its end).
#[inline]
pub fn now_unix_nano() -> u64 {
    #[cfg(unix)]
    {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `now` is a valid timespec to write to, and
        // CLOCK_REALTIME is a clock every Unix has.
        let read = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
        if read == 0
            && let (Ok(seconds), Ok(nanos)) = (u64::try_from(now.tv_sec), u64::try_from(now.tv_nsec))
        {
            return seconds.saturating_mul(1_000_000_000).saturating_add(nanos);
        }
    }
    unix_nanos(SystemTime::now())
}

/// The OTLP request of `records`, all in `scope`, for `resource`: built
/// straight from the records, as the SDK's exporter would build it from
/// their `SpanData` (`group_spans_by_resource_and_scope`).
pub fn encode_request(
    records: Vec<SpanRecord>,
    resource: &ResourceAttributesWithSchema,
    scope: &InstrumentationScope,
) -> ExportTraceServiceRequest {
    let scope_spans = if records.is_empty() {
        Vec::new()
    } else {
        vec![ScopeSpans {
            scope: Some((scope, None).into()),
            schema_url: scope.schema_url().map(ToOwned::to_owned).unwrap_or_default(),
            spans: records.into_iter().map(SpanRecord::into_proto).collect(),
        }]
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(ProtoResource {
                attributes: resource.attributes.0.clone(),
                dropped_attributes_count: 0,
                entity_refs: Vec::new(),
            }),
            scope_spans,
            schema_url: resource.schema_url.clone().unwrap_or_default(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock a record's times come from is the system's realtime
    /// clock, in nanoseconds: read between two `SystemTime` reads, and
    /// unchanged through `time_of` and back; a time before the epoch is 0.
    #[test]
    fn a_record_s_clock_is_the_system_clock_in_nanoseconds() {
        let before = unix_nanos(SystemTime::now());
        let now = now_unix_nano();
        let after = unix_nanos(SystemTime::now());
        assert!(before <= now && now <= after, "{before} <= {now} <= {after}");
        assert_eq!(unix_nanos(time_of(now)), now);
        assert_eq!(unix_nanos(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }
}
