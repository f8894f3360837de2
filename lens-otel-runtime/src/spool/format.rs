//! The spool file's layout: a fixed header, a metadata block (host, run id,
//! resource) and fixed-size slots, each holding one open span or one ended
//! span not yet exported. Everything is little-endian at fixed offsets, so
//! that a writer updates a field with one store and a reader (the next
//! attempt, `lens recover`) decodes a file whose writer died at any
//! instruction: a slot whose state says "being written" is skipped, a
//! record that does not decode is skipped and counted.
//!
//! This module is pure: it encodes into and decodes from byte slices.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use crate::span_record::{time_of, unix_nanos};

/// What the spool keeps of a span, borrowed from the SDK's `SpanData` or
/// from a lens span record ([`crate::span_record::SpanRecord`]) with the
/// scope it is recorded in.
#[derive(Clone, Copy, Debug)]
pub struct SpanView<'a> {
    /// Its trace and span id, flags and trace state.
    pub span_context: &'a SpanContext,
    /// The parent's span id.
    pub parent_span_id: SpanId,
    /// Whether the parent came from another process.
    pub parent_span_is_remote: bool,
    /// Its kind.
    pub span_kind: &'a SpanKind,
    /// Its name.
    pub name: &'a str,
    /// When it started, in nanoseconds since the Unix epoch.
    pub start_time_unix_nano: u64,
    /// When it ended (its start while open), in nanoseconds since the
    /// Unix epoch.
    pub end_time_unix_nano: u64,
    /// Its status.
    pub status: &'a Status,
    /// The scope it is recorded in.
    pub scope: &'a InstrumentationScope,
    /// Its attributes.
    pub attributes: &'a [KeyValue],
    /// Attributes dropped before the spool saw it.
    pub dropped_attributes_count: u32,
    /// Its events.
    pub events: &'a [Event],
    /// Events dropped before the spool saw it.
    pub dropped_events_count: u32,
    /// `scope`'s name and version as a slot holds them
    /// ([`encode_scope`]), when the caller keeps them; empty: encoded from
    /// `scope`.
    pub scope_encoded: &'a [u8],
}

impl<'a> From<&'a SpanData> for SpanView<'a> {
    fn from(span: &'a SpanData) -> SpanView<'a> {
        SpanView {
            span_context: &span.span_context,
            parent_span_id: span.parent_span_id,
            parent_span_is_remote: span.parent_span_is_remote,
            span_kind: &span.span_kind,
            name: &span.name,
            start_time_unix_nano: nanos(span.start_time),
            end_time_unix_nano: nanos(span.end_time),
            status: &span.status,
            scope: &span.instrumentation_scope,
            attributes: &span.attributes,
            dropped_attributes_count: span.dropped_attributes_count,
            events: &span.events.events,
            dropped_events_count: span.events.dropped_count,
            scope_encoded: &[],
        }
    }
}

impl<'a> SpanView<'a> {
    /// The view of `record`, recorded in `scope`.
    pub fn of_record(record: &'a crate::span_record::SpanRecord, scope: &'a InstrumentationScope) -> SpanView<'a> {
        SpanView::of_record_encoded(record, scope, &[])
    }

    /// [`of_record`](Self::of_record) with `scope`'s encoding
    /// ([`encode_scope`]), copied into a slot as it is: built in one go,
    /// as lens's tracer does twice per span.
    #[inline]
    pub fn of_record_encoded(
        record: &'a crate::span_record::SpanRecord,
        scope: &'a InstrumentationScope,
        scope_encoded: &'a [u8],
    ) -> SpanView<'a> {
        SpanView {
            span_context: &record.span_context,
            parent_span_id: record.parent_span_id,
            parent_span_is_remote: record.parent_span_is_remote,
            span_kind: &record.span_kind,
            name: &record.name,
            start_time_unix_nano: record.start_time_unix_nano,
            end_time_unix_nano: record.end_time_unix_nano,
            status: &record.status,
            scope,
            attributes: &record.attributes,
            dropped_attributes_count: record.dropped_attributes_count,
            events: &record.events,
            dropped_events_count: 0,
            scope_encoded,
        }
    }

    /// The spool's key of the span: its span id as a number.
    pub fn key(&self) -> u64 {
        u64::from_be_bytes(self.span_context.span_id().to_bytes())
    }
}

/// The first eight bytes of every spool file.
pub const MAGIC: [u8; 8] = *b"LENSSPL\0";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// The header's size: the fixed fields and the metadata block.
pub const HEADER_SIZE: usize = 16 * 1024;
/// One slot: one span.
pub const SLOT_SIZE: usize = 1024;

// Header offsets.
pub(crate) const OFF_VERSION: usize = 8;
pub(crate) const OFF_SLOT_SIZE: usize = 12;
pub(crate) const OFF_SLOT_COUNT: usize = 16;
pub(crate) const OFF_HEADER_SIZE: usize = 20;
pub(crate) const OFF_PID: usize = 24;
pub(crate) const OFF_UID: usize = 28;
pub(crate) const OFF_RANK: usize = 32;
pub(crate) const OFF_WORLD_SIZE: usize = 36;
pub(crate) const OFF_CREATED: usize = 40;
/// Nanoseconds since the epoch; refreshed every second by lens's thread.
pub(crate) const OFF_LAST_ALIVE: usize = 48;
/// Ended spans that gave their slot up to a new span because every slot
/// was taken (lost if the process died before exporting them).
pub(crate) const OFF_OVERFLOW: usize = 56;
/// The progress record's sequence: odd while it is being written.
pub(crate) const OFF_PROGRESS_SEQ: usize = 64;
pub(crate) const OFF_REACHED: usize = 72;
pub(crate) const OFF_COMPLETED: usize = 80;
pub(crate) const OFF_DURABLE: usize = 88;
/// When the progress record was written (0: never).
pub(crate) const OFF_PROGRESS_AT: usize = 96;
/// Bit 0: the writer shut down cleanly (no span to replay). Bit 1: an
/// earlier setup's replay took the progress record (a replay whose export
/// failed keeps the file, and charging the record again would count the
/// dead attempt's loss twice).
pub(crate) const OFF_FLAGS: usize = 104;
pub(crate) const OFF_BOOT_ID: usize = 112;
pub(crate) const BOOT_ID_LEN: usize = 40;
pub(crate) const OFF_META_LEN: usize = 152;
/// Spans open now that got no slot because every slot held an open span (a
/// `u32` in what were the metadata length's padding bytes, zero in files
/// written before it).
pub(crate) const OFF_OPEN_UNKEPT: usize = 156;
pub(crate) const OFF_META: usize = 160;
/// The flag bit of a clean shutdown.
pub(crate) const FLAG_CLOSED_CLEANLY: u64 = 1;
/// The flag bit of a progress record already handed to a setup's replay.
pub(crate) const FLAG_PROGRESS_TAKEN: u64 = 2;
/// `u64::MAX` in a progress field: none.
pub(crate) const NONE: u64 = u64::MAX;

// Slot offsets.
pub(crate) const SLOT_STATE: usize = 0;
pub(crate) const SLOT_LEN: usize = 4;
const SLOT_TRACE_ID: usize = 8;
const SLOT_SPAN_ID: usize = 24;
const SLOT_PARENT: usize = 32;
const SLOT_START: usize = 40;
const SLOT_END: usize = 48;
const SLOT_TRACE_FLAGS: usize = 56;
const SLOT_KIND: usize = 57;
const SLOT_PARENT_REMOTE: usize = 58;
const SLOT_STATUS: usize = 59;
const SLOT_DROPPED_ATTRIBUTES: usize = 60;
const SLOT_PAYLOAD: usize = 64;

/// A free slot.
pub(crate) const STATE_FREE: u32 = 0;
/// A slot being written (a writer that died here left nothing usable).
pub(crate) const STATE_WRITING: u32 = 1;
/// An open span.
pub(crate) const STATE_OPEN: u32 = 2;
/// An ended span, not yet exported.
pub(crate) const STATE_ENDED: u32 = 3;

/// What a reader finds wrong with a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Not a spool file, or cut short.
    #[error("not a lens spool file, or cut short ({0})")]
    Damaged(&'static str),
    /// A spool of another format version.
    #[error("spool format version {found}, this lens reads version {VERSION}")]
    OtherVersion {
        /// The version in the file.
        found: u32,
    },
}

/// The fixed part of a header, as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The writer's process id.
    pub pid: u32,
    /// The writer's user id.
    pub uid: u32,
    /// The writer's rank.
    pub rank: u32,
    /// The writer's world size.
    pub world_size: u32,
    /// The writer's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// The writer's host name.
    pub host: String,
    /// The writer's run id.
    pub run_id: String,
    /// The writer's resource.
    pub resource: Vec<KeyValue>,
    /// The last-alive stamp.
    pub last_alive: SystemTime,
    /// Ended spans that gave their slot up because the spool was full.
    pub overflow: u64,
    /// Spans open when the writer last wrote that got no slot because
    /// every slot held an open span: lost if the writer died.
    pub open_unkept: u32,
    /// The progress record, if one was written.
    pub progress: Option<Progress>,
    /// The writer shut down cleanly.
    pub closed_cleanly: bool,
    /// An earlier setup's replay took the progress record (and kept the
    /// file, its export having failed): the record is not charged again.
    pub progress_taken: bool,
    /// Slots in the file.
    pub slot_count: u32,
}

/// A progress record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The iteration reached.
    pub reached: u64,
    /// The last completed iteration.
    pub completed: Option<u64>,
    /// The last durably checkpointed iteration.
    pub durable: Option<u64>,
    /// When it was written.
    pub at: SystemTime,
}

/// How many slots a file of `total` bytes holds.
pub fn slot_count(total: usize) -> u32 {
    (total.saturating_sub(HEADER_SIZE) / SLOT_SIZE).min(u32::MAX as usize) as u32
}

/// `time` as the file keeps it: nanoseconds since the Unix epoch, below
/// `u64::MAX` (a progress field's "none").
pub(crate) fn nanos(time: SystemTime) -> u64 {
    unix_nanos(time).min(u64::MAX - 1)
}

pub(crate) fn put_u32(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u64(buf: &mut [u8], at: usize, value: u64) {
    buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().unwrap_or([0; 4]))
}

pub(crate) fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// Writes the fixed header fields of a fresh file (the metadata block is
/// [`write_meta`]'s).
#[expect(clippy::too_many_arguments, reason = "one call site, each a header field")]
pub(crate) fn write_header(
    buf: &mut [u8],
    slots: u32,
    pid: u32,
    uid: u32,
    rank: u32,
    world_size: u32,
    boot_id: &str,
    now: SystemTime,
) {
    buf[..8].copy_from_slice(&MAGIC);
    put_u32(buf, OFF_VERSION, VERSION);
    put_u32(buf, OFF_SLOT_SIZE, SLOT_SIZE as u32);
    put_u32(buf, OFF_SLOT_COUNT, slots);
    put_u32(buf, OFF_HEADER_SIZE, HEADER_SIZE as u32);
    put_u32(buf, OFF_PID, pid);
    put_u32(buf, OFF_UID, uid);
    put_u32(buf, OFF_RANK, rank);
    put_u32(buf, OFF_WORLD_SIZE, world_size);
    put_u64(buf, OFF_CREATED, nanos(now));
    put_u64(buf, OFF_LAST_ALIVE, nanos(now));
    put_u64(buf, OFF_REACHED, NONE);
    put_u64(buf, OFF_COMPLETED, NONE);
    put_u64(buf, OFF_DURABLE, NONE);
    let boot = boot_id.as_bytes();
    let n = boot.len().min(BOOT_ID_LEN);
    buf[OFF_BOOT_ID..OFF_BOOT_ID + BOOT_ID_LEN].fill(0);
    buf[OFF_BOOT_ID..OFF_BOOT_ID + n].copy_from_slice(&boot[..n]);
}

/// Encodes the metadata block (host, run id, resource) into `buf` (the
/// header's tail); resource attributes that do not fit are left out.
/// Returns its length.
pub(crate) fn encode_meta(buf: &mut [u8], host: &str, run_id: &str, resource: &[KeyValue]) -> usize {
    let mut w = Writer { buf, at: 0, full: false, reserve: 0 };
    w.str(host);
    w.str(run_id);
    w.attributes(resource);
    w.at
}

/// Decodes a header from the start of a file.
pub fn read_header(file: &[u8]) -> Result<Header, FormatError> {
    if file.len() < HEADER_SIZE || file[..8] != MAGIC {
        return Err(FormatError::Damaged("no spool header"));
    }
    let version = get_u32(file, OFF_VERSION);
    if version != VERSION {
        return Err(FormatError::OtherVersion { found: version });
    }
    if get_u32(file, OFF_SLOT_SIZE) as usize != SLOT_SIZE || get_u32(file, OFF_HEADER_SIZE) as usize != HEADER_SIZE {
        return Err(FormatError::Damaged("slot or header size"));
    }
    let slot_count = get_u32(file, OFF_SLOT_COUNT);
    if HEADER_SIZE + slot_count as usize * SLOT_SIZE > file.len() {
        return Err(FormatError::Damaged("more slots than the file holds"));
    }
    let boot = &file[OFF_BOOT_ID..OFF_BOOT_ID + BOOT_ID_LEN];
    let boot_id = String::from_utf8_lossy(&boot[..boot.iter().position(|b| *b == 0).unwrap_or(BOOT_ID_LEN)]).into();
    let meta_len = get_u32(file, OFF_META_LEN) as usize;
    if OFF_META + meta_len > HEADER_SIZE {
        return Err(FormatError::Damaged("metadata length"));
    }
    let mut r = Reader { buf: &file[OFF_META..OFF_META + meta_len], at: 0 };
    let (host, run_id, resource) = if meta_len == 0 {
        (String::new(), String::new(), Vec::new())
    } else {
        let host = r.str().ok_or(FormatError::Damaged("host"))?.into_owned();
        let run_id = r.str().ok_or(FormatError::Damaged("run id"))?.into_owned();
        let resource = r.attributes().ok_or(FormatError::Damaged("resource"))?;
        (host, run_id, resource)
    };
    let progress_at = get_u64(file, OFF_PROGRESS_AT);
    let optional = |v: u64| (v != NONE).then_some(v);
    let progress = (progress_at != 0).then(|| Progress {
        reached: get_u64(file, OFF_REACHED),
        completed: optional(get_u64(file, OFF_COMPLETED)),
        durable: optional(get_u64(file, OFF_DURABLE)),
        at: time_of(progress_at),
    });
    Ok(Header {
        pid: get_u32(file, OFF_PID),
        uid: get_u32(file, OFF_UID),
        rank: get_u32(file, OFF_RANK),
        world_size: get_u32(file, OFF_WORLD_SIZE),
        boot_id,
        host,
        run_id,
        resource,
        last_alive: time_of(get_u64(file, OFF_LAST_ALIVE)),
        overflow: get_u64(file, OFF_OVERFLOW),
        open_unkept: get_u32(file, OFF_OPEN_UNKEPT),
        progress,
        closed_cleanly: get_u64(file, OFF_FLAGS) & FLAG_CLOSED_CLEANLY != 0,
        progress_taken: get_u64(file, OFF_FLAGS) & FLAG_PROGRESS_TAKEN != 0,
        slot_count,
    })
}

/// The byte range of slot `index`.
pub(crate) fn slot_range(index: u32) -> std::ops::Range<usize> {
    let start = HEADER_SIZE + index as usize * SLOT_SIZE;
    start..start + SLOT_SIZE
}

/// Encodes `span` into `slot` (the state word is left to the caller):
/// ids, times, kind, status, name, scope, then as many attributes and
/// events as fit (the rest counted as dropped attributes). Links are not
/// kept.
///
/// The slot is an array, so that its fields at fixed offsets need no bounds
/// checks.
pub(crate) fn encode_span(slot: &mut [u8; SLOT_SIZE], span: &SpanView<'_>) {
    slot[SLOT_TRACE_ID..SLOT_TRACE_ID + 16].copy_from_slice(&span.span_context.trace_id().to_bytes());
    slot[SLOT_SPAN_ID..SLOT_SPAN_ID + 8].copy_from_slice(&span.span_context.span_id().to_bytes());
    slot[SLOT_PARENT..SLOT_PARENT + 8].copy_from_slice(&span.parent_span_id.to_bytes());
    put_u64(slot, SLOT_START, span.start_time_unix_nano);
    put_u64(slot, SLOT_END, span.end_time_unix_nano);
    slot[SLOT_TRACE_FLAGS] = span.span_context.trace_flags().to_u8();
    slot[SLOT_KIND] = kind_code(span.span_kind);
    slot[SLOT_PARENT_REMOTE] = u8::from(span.parent_span_is_remote);
    slot[SLOT_STATUS] = match span.status {
        Status::Unset => 0,
        Status::Ok => 1,
        Status::Error { .. } => 2,
    };
    let (head, payload) = slot.split_at_mut(SLOT_PAYLOAD);
    if let Some(end) = encode_plain_payload(payload, span) {
        put_u32(head, SLOT_DROPPED_ATTRIBUTES, span.dropped_attributes_count);
        put_u32(head, SLOT_LEN, end as u32);
        return;
    }
    encode_payload(head, payload, span);
}

/// The payload of a span with no attributes or events, an unset or `Ok`
/// status and its scope encoded, when it fits (most spans of a job, as
/// they start): the bytes [`encode_payload`] writes for it, in straight
/// copies. Its length, or `None` (nothing written) for any other span.
fn encode_plain_payload(payload: &mut [u8], span: &SpanView<'_>) -> Option<usize> {
    if !span.attributes.is_empty()
        || !span.events.is_empty()
        || matches!(span.status, Status::Error { .. })
        || span.scope_encoded.is_empty()
    {
        return None;
    }
    let name = span.name.as_bytes();
    let name_len = u16::try_from(name.len()).ok()?;
    let scope_at = 2 + name.len();
    let end = scope_at + span.scope_encoded.len() + 6;
    let out = payload.get_mut(..end)?;
    out[..2].copy_from_slice(&name_len.to_le_bytes());
    out[2..scope_at].copy_from_slice(name);
    out[scope_at..end - 6].copy_from_slice(span.scope_encoded);
    // An empty status description, no attributes, no events.
    out[end - 6..].fill(0);
    Some(end)
}

/// The payload of any span: what fits of it, attributes and events cut
/// where the slot ends (counted in `head`).
fn encode_payload(head: &mut [u8], payload: &mut [u8], span: &SpanView<'_>) {
    // A name longer than the slot is cut where it leaves room for the
    // scope, an empty description and the two counts, so that the slot
    // still decodes (a name gets at least half the payload).
    let scope_len = if span.scope_encoded.is_empty() {
        4 + span.scope.name().len() + span.scope.version().map_or(0, str::len)
    } else {
        span.scope_encoded.len()
    };
    let reserve = (scope_len + 6).min(payload.len() / 2);
    let mut w = Writer { buf: payload, at: 0, full: false, reserve };
    w.str(span.name);
    w.reserve = 2;
    if !span.scope_encoded.is_empty() && w.fits(span.scope_encoded.len()) {
        w.bytes(span.scope_encoded);
    } else {
        w.str(span.scope.name());
        w.str(span.scope.version().unwrap_or(""));
    }
    if let Status::Error { description } = span.status {
        w.str(description);
    } else {
        // An empty description: its length.
        w.u16(0);
    }
    let kept = w.attributes(span.attributes);
    let dropped = span.dropped_attributes_count as usize + span.attributes.len() - kept;
    put_u32(head, SLOT_DROPPED_ATTRIBUTES, dropped.min(u32::MAX as usize) as u32);
    // Events: as many as fit, each with its attributes.
    w.full = false;
    w.reserve = 0;
    let count_at = w.at;
    w.u16(0);
    let mut events = 0_u16;
    for event in span.events {
        let mark = w.at;
        w.str(&event.name);
        w.u64(nanos(event.timestamp));
        w.attributes(&event.attributes);
        if w.full {
            w.at = mark;
            break;
        }
        events += 1;
    }
    w.full = false;
    let end = w.at;
    w.at = count_at;
    w.u16(events);
    put_u32(head, SLOT_LEN, end as u32);
}

/// `scope`'s name and version as the span encoder writes them, for
/// [`SpanView::of_record_encoded`].
pub fn encode_scope(scope: &InstrumentationScope) -> Box<[u8]> {
    let mut buf = vec![0_u8; SLOT_SIZE - SLOT_PAYLOAD];
    let mut w = Writer { buf: &mut buf, at: 0, full: false, reserve: 0 };
    w.str(scope.name());
    w.str(scope.version().unwrap_or(""));
    let len = w.at;
    buf.truncate(len);
    buf.into_boxed_slice()
}

/// Whether `slot` was written for a span named `name` (its first string).
pub(crate) fn holds_name(slot: &[u8], name: &str) -> bool {
    let payload = &slot[SLOT_PAYLOAD..];
    let len = u16::from_le_bytes([payload[0], payload[1]]) as usize;
    payload.get(2..2 + len) == Some(name.as_bytes())
}

/// Writes what ending changes in a slot written at the span's start, when
/// its attributes, events and name are the same: the end time and an `Ok`
/// or unset status (an error's description is in the payload, so an
/// error needs [`encode_span`]; here it would keep the start's empty one).
pub(crate) fn encode_end(slot: &mut [u8], span: &SpanView<'_>) {
    put_u64(slot, SLOT_END, span.end_time_unix_nano);
    slot[SLOT_STATUS] = match span.status {
        Status::Unset => 0,
        Status::Ok => 1,
        Status::Error { .. } => 2,
    };
}

/// Decodes the span in `slot`; `None` when it does not decode.
pub(crate) fn decode_span(slot: &[u8]) -> Option<SpanData> {
    let len = get_u32(slot, SLOT_LEN) as usize;
    if SLOT_PAYLOAD + len > slot.len() {
        return None;
    }
    let trace_id = TraceId::from_bytes(slot[SLOT_TRACE_ID..SLOT_TRACE_ID + 16].try_into().ok()?);
    let span_id = SpanId::from_bytes(slot[SLOT_SPAN_ID..SLOT_SPAN_ID + 8].try_into().ok()?);
    let parent = SpanId::from_bytes(slot[SLOT_PARENT..SLOT_PARENT + 8].try_into().ok()?);
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let mut r = Reader { buf: &slot[SLOT_PAYLOAD..SLOT_PAYLOAD + len], at: 0 };
    let name = r.str()?.into_owned();
    let scope = r.str()?.into_owned();
    let version = r.str()?.into_owned();
    let description = r.str()?.into_owned();
    let attributes = r.attributes()?;
    let mut events = SpanEvents::default();
    for _ in 0..r.u16()? {
        let name = r.str()?.into_owned();
        let at = time_of(r.u64()?);
        let attributes = r.attributes()?;
        events.events.push(opentelemetry::trace::Event::new(name, at, attributes, 0));
    }
    let mut scope = InstrumentationScope::builder(scope);
    if !version.is_empty() {
        scope = scope.with_version(version);
    }
    Some(SpanData {
        span_context: SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::new(slot[SLOT_TRACE_FLAGS]),
            false,
            TraceState::default(),
        ),
        parent_span_id: parent,
        parent_span_is_remote: slot[SLOT_PARENT_REMOTE] != 0,
        span_kind: kind_from(slot[SLOT_KIND]),
        name: Cow::Owned(name),
        start_time: time_of(get_u64(slot, SLOT_START)),
        end_time: time_of(get_u64(slot, SLOT_END)),
        attributes,
        dropped_attributes_count: get_u32(slot, SLOT_DROPPED_ATTRIBUTES),
        events,
        links: SpanLinks::default(),
        status: match slot[SLOT_STATUS] {
            1 => Status::Ok,
            2 => Status::error(description),
            _ => Status::Unset,
        },
        instrumentation_scope: scope.build(),
    })
}

fn kind_code(kind: &SpanKind) -> u8 {
    match kind {
        SpanKind::Internal => 0,
        SpanKind::Server => 1,
        SpanKind::Client => 2,
        SpanKind::Producer => 3,
        SpanKind::Consumer => 4,
    }
}

fn kind_from(code: u8) -> SpanKind {
    match code {
        1 => SpanKind::Server,
        2 => SpanKind::Client,
        3 => SpanKind::Producer,
        4 => SpanKind::Consumer,
        _ => SpanKind::Internal,
    }
}

/// A bounded writer: a write that does not fit sets `full` and writes
/// nothing.
struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
    full: bool,
    /// Bytes kept free at the end (for what follows).
    reserve: usize,
}

impl Writer<'_> {
    fn fits(&self, n: usize) -> bool {
        self.at + n + self.reserve <= self.buf.len()
    }

    fn bytes(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        if self.full || end + self.reserve > self.buf.len() {
            self.full = true;
            return;
        }
        self.buf[self.at..end].copy_from_slice(bytes);
        self.at = end;
    }

    fn u16(&mut self, value: u16) {
        self.bytes(&value.to_le_bytes());
    }

    fn u64(&mut self, value: u64) {
        self.bytes(&value.to_le_bytes());
    }

    #[inline]
    fn str(&mut self, value: &str) {
        // The usual case first: it fits, its length and bytes in one go.
        let (at, n) = (self.at, value.len());
        if !self.full && n <= usize::from(u16::MAX) && at + 2 + n + self.reserve <= self.buf.len() {
            self.buf[at..at + 2].copy_from_slice(&(n as u16).to_le_bytes());
            self.buf[at + 2..at + 2 + n].copy_from_slice(value.as_bytes());
            self.at = at + 2 + n;
            return;
        }
        self.str_cut(value);
    }

    /// [`str`](Self::str) when `value` may not fit.
    #[cold]
    fn str_cut(&mut self, value: &str) {
        let room = self.buf.len().saturating_sub(self.at + 2 + self.reserve);
        let mut n = value.len();
        if n > room || n > usize::from(u16::MAX) {
            // A string longer than a slot is cut at a character boundary.
            n = n.min(room).min(usize::from(u16::MAX));
            while !value.is_char_boundary(n) {
                n -= 1;
            }
        }
        // Cut, or after a write that did not fit (`full`: this one writes
        // nothing either).
        self.u16(n as u16);
        self.bytes(&value.as_bytes()[..n]);
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Bool(v) => {
                self.bytes(&[0, u8::from(*v)]);
            }
            Value::I64(v) => {
                self.bytes(&[1]);
                self.bytes(&v.to_le_bytes());
            }
            Value::F64(v) => {
                self.bytes(&[2]);
                self.bytes(&v.to_le_bytes());
            }
            Value::String(v) => {
                self.bytes(&[3]);
                self.str(v.as_str());
            }
            other => {
                // Arrays (and anything newer) as their text.
                self.bytes(&[3]);
                self.str(&other.to_string());
            }
        }
    }

    /// Writes `kv` as [`attributes`](Self::attributes) does, with one
    /// bounds check, when it fits whole (and its value is a bool, number or
    /// short string); `false`, writing nothing, otherwise.
    fn whole_attribute(&mut self, kv: &KeyValue) -> bool {
        let key = kv.key.as_str().as_bytes();
        let (tag, fixed, text): (u8, [u8; 8], &[u8]) = match &kv.value {
            Value::Bool(v) => (0, [u8::from(*v), 0, 0, 0, 0, 0, 0, 0], &[]),
            Value::I64(v) => (1, v.to_le_bytes(), &[]),
            Value::F64(v) => (2, v.to_le_bytes(), &[]),
            Value::String(v) => (3, [0; 8], v.as_str().as_bytes()),
            _ => return false,
        };
        let value_len = match tag {
            0 => 1,
            3 => 2 + text.len(),
            _ => 8,
        };
        let end = self.at + 2 + key.len() + 1 + value_len;
        if self.full
            || key.len() > usize::from(u16::MAX)
            || text.len() > usize::from(u16::MAX)
            || end + self.reserve > self.buf.len()
        {
            return false;
        }
        let buf = &mut self.buf[self.at..end];
        buf[..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        copy_short(&mut buf[2..2 + key.len()], key);
        let rest = &mut buf[2 + key.len()..];
        rest[0] = tag;
        match tag {
            0 => rest[1] = fixed[0],
            3 => {
                rest[1..3].copy_from_slice(&(text.len() as u16).to_le_bytes());
                copy_short(&mut rest[3..], text);
            }
            _ => rest[1..9].copy_from_slice(&fixed),
        }
        self.at = end;
        true
    }

    /// Writes as many attributes as fit; returns how many.
    fn attributes(&mut self, attributes: &[KeyValue]) -> usize {
        if self.full {
            return 0;
        }
        if attributes.is_empty() {
            let reserve = std::mem::take(&mut self.reserve);
            self.u16(0);
            self.reserve = reserve;
            return 0;
        }
        let count_at = self.at;
        self.u16(0);
        let mut kept = 0_usize;
        for kv in attributes {
            if kept == usize::from(u16::MAX) {
                break;
            }
            if self.whole_attribute(kv) {
                kept += 1;
                continue;
            }
            let mark = self.at;
            self.str(kv.key.as_str());
            self.value(&kv.value);
            if self.full {
                self.at = mark;
                break;
            }
            kept += 1;
        }
        self.full = false;
        let end = self.at;
        self.at = count_at;
        let reserve = std::mem::take(&mut self.reserve);
        self.u16(kept as u16);
        self.reserve = reserve;
        self.at = end;
        kept
    }
}

/// Copies `src` into `dst` (of the same length): up to 16 bytes with two
/// overlapping word moves instead of a call to `memcpy` (attribute keys and
/// short values are a few bytes each, and a slot holds dozens of them).
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if (8..=16).contains(&n) {
        let (head, tail) = (&src[..8], &src[n - 8..]);
        let tail: [u8; 8] = tail.try_into().unwrap_or([0; 8]);
        dst[..8].copy_from_slice(head);
        dst[n - 8..].copy_from_slice(&tail);
    } else if (4..8).contains(&n) {
        let tail: [u8; 4] = src[n - 4..].try_into().unwrap_or([0; 4]);
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&tail);
    } else if n < 4 {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// A reader that answers `None` past the end.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.buf.get(self.at..self.at + n)?;
        self.at += n;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    fn str(&mut self) -> Option<Cow<'a, str>> {
        let n = self.u16()? as usize;
        Some(String::from_utf8_lossy(self.bytes(n)?))
    }

    fn value(&mut self) -> Option<Value> {
        Some(match self.u8()? {
            0 => Value::Bool(self.u8()? != 0),
            1 => Value::I64(i64::from_le_bytes(self.bytes(8)?.try_into().ok()?)),
            2 => Value::F64(f64::from_le_bytes(self.bytes(8)?.try_into().ok()?)),
            3 => Value::String(StringValue::from(self.str()?.into_owned())),
            _ => return None,
        })
    }

    fn attributes(&mut self) -> Option<Vec<KeyValue>> {
        let n = self.u16()?;
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let key = self.str()?.into_owned();
            let value = self.value()?;
            out.push(KeyValue::new(key, value));
        }
        Some(out)
    }
}

/// A span for tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    pub(crate) fn span(name: &'static str, span_id: u64, parent: u64, start_s: u64) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(0xabcd_u128),
                SpanId::from(span_id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from(parent),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: time_of(start_s * 1_000_000_000 + 123),
            end_time: time_of(start_s * 1_000_000_000 + 999),
            attributes: vec![
                KeyValue::new("dl.iteration", 17_i64),
                KeyValue::new("dl.loss", 2.5_f64),
                KeyValue::new("dl.ok", true),
                KeyValue::new("dl.phase", "forward_backward"),
            ],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("nemo.lens").with_version("0.1.0").build(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::span;
    use super::*;
    use opentelemetry::trace::Event;

    /// A span with no attributes or events (the plain path) is encoded to
    /// the same bytes as by the general writer, for names from empty to
    /// past what a slot holds, unset and `Ok` statuses, and counted
    /// dropped attributes; and it decodes.
    #[test]
    fn a_plain_span_is_encoded_as_the_general_writer_encodes_it() {
        let scope_encoded = encode_scope(&InstrumentationScope::builder("nemo.lens").with_version("0.1.0").build());
        let names: Vec<String> =
            [0, 1, 10, 900, SLOT_SIZE - SLOT_PAYLOAD - 30, SLOT_SIZE].iter().map(|&n| "é".repeat(n / 2)).collect();
        let mut plain_paths = 0;
        for name in &names {
            for status in [Status::Unset, Status::Ok] {
                for dropped in [0, 3] {
                    let mut original = span("x", 7, 3, 100);
                    original.attributes.clear();
                    original.status = status.clone();
                    original.dropped_attributes_count = dropped;
                    original.name = Cow::Owned(name.clone());
                    let view = SpanView { scope_encoded: &scope_encoded, ..SpanView::from(&original) };
                    let mut fast = [0xAA_u8; SLOT_SIZE];
                    encode_span(&mut fast, &view);
                    let mut general = fast;
                    let (head, payload) = general.split_at_mut(SLOT_PAYLOAD);
                    if encode_plain_payload(&mut payload.to_vec(), &view).is_some() {
                        plain_paths += 1;
                    }
                    payload.fill(0xAA);
                    encode_payload(head, payload, &view);
                    assert_eq!(fast, general, "name of {} bytes, {status:?}, {dropped} dropped", name.len());
                    let decoded =
                        decode_span(&fast).unwrap_or_else(|| panic!("a name of {} bytes decodes", name.len()));
                    assert_eq!(
                        decoded.name,
                        original.name.chars().take(decoded.name.chars().count()).collect::<String>()
                    );
                    assert_eq!(decoded.status, status);
                    assert_eq!(decoded.dropped_attributes_count, dropped);
                }
            }
        }
        // Names that fit took the plain path; the longest did not.
        assert_eq!(plain_paths, 5 * 4);
    }

    #[test]
    fn a_span_round_trips_through_a_slot() {
        let mut original = span("megatron.train.iteration", 7, 3, 100);
        original.events.events.push(Event::new("checkpoint", time_of(5), vec![KeyValue::new("dl.step", 4_i64)], 0));
        original.status = Status::error("boom");
        let mut slot = [0_u8; SLOT_SIZE];
        encode_span(&mut slot, &(&original).into());
        let decoded = decode_span(&slot).expect("decodes");
        assert_eq!(decoded.span_context, original.span_context);
        assert_eq!(decoded.parent_span_id, original.parent_span_id);
        assert_eq!(decoded.name, original.name);
        assert_eq!(decoded.start_time, original.start_time);
        assert_eq!(decoded.end_time, original.end_time);
        assert_eq!(decoded.attributes, original.attributes);
        assert_eq!(decoded.events.events, original.events.events);
        assert_eq!(decoded.status, Status::error("boom"));
        assert_eq!(decoded.instrumentation_scope.name(), "nemo.lens");
        assert_eq!(decoded.instrumentation_scope.version(), Some("0.1.0"));
    }

    /// What docs/crashes.md says a replayed span lacks: its links, its
    /// trace state, its scope's attributes.
    #[test]
    fn a_slot_keeps_no_links_trace_state_or_scope_attributes() {
        use opentelemetry::trace::Link;
        let mut original = span("s", 1, 0, 1);
        let linked = SpanContext::new(
            TraceId::from(0x77_u128),
            SpanId::from(9_u64),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        original.links.links.push(Link::with_context(linked));
        let state = TraceState::from_key_value([("vendor", "value")]).expect("a trace state");
        original.span_context = SpanContext::new(
            original.span_context.trace_id(),
            original.span_context.span_id(),
            original.span_context.trace_flags(),
            false,
            state,
        );
        original.instrumentation_scope = InstrumentationScope::builder("nemo.lens")
            .with_version("0.1.0")
            .with_attributes([KeyValue::new("scope.key", "v")])
            .build();
        let mut slot = [0_u8; SLOT_SIZE];
        encode_span(&mut slot, &(&original).into());
        let decoded = decode_span(&slot).expect("decodes");
        assert!(decoded.links.links.is_empty());
        assert_eq!(decoded.links.dropped_count, 0);
        assert_eq!(decoded.span_context.trace_state().header(), "");
        assert_eq!(decoded.instrumentation_scope.attributes().count(), 0);
        assert_eq!(decoded.instrumentation_scope.version(), Some("0.1.0"));
        assert_eq!(decoded.attributes, original.attributes, "what fits is kept");
    }

    #[test]
    fn attributes_beyond_a_slot_are_dropped_and_counted() {
        let mut big = span("s", 1, 0, 1);
        big.attributes = (0..100).map(|i| KeyValue::new(format!("key.{i}"), "x".repeat(30))).collect();
        let mut slot = [0_u8; SLOT_SIZE];
        encode_span(&mut slot, &(&big).into());
        let decoded = decode_span(&slot).expect("decodes");
        assert!(!decoded.attributes.is_empty() && decoded.attributes.len() < 100, "{}", decoded.attributes.len());
        assert_eq!(decoded.attributes[..], big.attributes[..decoded.attributes.len()]);
        assert_eq!(decoded.dropped_attributes_count as usize, 100 - decoded.attributes.len());
    }

    fn header_bytes() -> Vec<u8> {
        let mut file = vec![0_u8; HEADER_SIZE + 4 * SLOT_SIZE];
        write_header(&mut file, 4, 4242, 1000, 3, 8, "0f1e-boot", time_of(1_000_000_000));
        let resource = [KeyValue::new("service.name", "megatron-lm"), KeyValue::new("dl.rank", 3_i64)];
        let len = encode_meta(&mut file[OFF_META..HEADER_SIZE], "node-07", "run-42", &resource);
        put_u32(&mut file, OFF_META_LEN, len as u32);
        file
    }

    #[test]
    fn a_header_round_trips() {
        let header = read_header(&header_bytes()).expect("reads");
        assert_eq!((header.pid, header.uid, header.rank, header.world_size), (4242, 1000, 3, 8));
        assert_eq!(header.boot_id, "0f1e-boot");
        assert_eq!((header.host.as_str(), header.run_id.as_str()), ("node-07", "run-42"));
        assert_eq!(header.resource[0], KeyValue::new("service.name", "megatron-lm"));
        assert_eq!(header.resource[1], KeyValue::new("dl.rank", 3_i64));
        assert_eq!(header.slot_count, 4);
        assert_eq!(header.progress, None);
        assert!(!header.closed_cleanly && !header.progress_taken);
        let mut taken = header_bytes();
        put_u64(&mut taken, OFF_FLAGS, FLAG_PROGRESS_TAKEN);
        let header = read_header(&taken).expect("reads");
        assert!(header.progress_taken && !header.closed_cleanly);
    }

    #[test]
    fn a_damaged_file_and_another_version_are_errors_not_panics() {
        assert_eq!(read_header(b"hello"), Err(FormatError::Damaged("no spool header")));
        let mut other = header_bytes();
        put_u32(&mut other, OFF_VERSION, 99);
        assert_eq!(read_header(&other), Err(FormatError::OtherVersion { found: 99 }));
        let mut cut = header_bytes();
        cut.truncate(HEADER_SIZE + SLOT_SIZE);
        assert_eq!(read_header(&cut), Err(FormatError::Damaged("more slots than the file holds")));
        let mut meta = header_bytes();
        put_u32(&mut meta, OFF_META_LEN, 3);
        assert!(matches!(read_header(&meta), Err(FormatError::Damaged(_))));
        // A slot of garbage decodes to nothing rather than panicking.
        let mut slot = vec![0xff_u8; SLOT_SIZE];
        put_u32(&mut slot, SLOT_LEN, 40);
        assert!(decode_span(&slot).is_none());
    }
}
