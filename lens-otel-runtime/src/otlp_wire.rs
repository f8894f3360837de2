//! The OTLP/protobuf request of span records, written straight from the
//! records into its bytes: what [`crate::span_record::encode_request`]
//! builds as `opentelemetry-proto` messages and prost then encodes, without
//! the messages (their ids, names and attributes copied into owned vectors
//! and strings, then freed). The export thread's share of a span.
//!
//! Each message's size is computed first (protobuf prefixes a nested
//! message with its length), then its fields are written in field-number
//! order, defaults left out, as prost writes them. The rare parts (the
//! resource and scope, once a request; links; array values) are encoded by
//! prost. A differential test decodes the bytes with prost and compares
//! them with the messages' request.

use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope as ProtoScope};
use opentelemetry_proto::tonic::resource::v1::Resource as ProtoResource;
use opentelemetry_proto::tonic::trace::v1::span;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use prost::Message as _;
use prost::encoding::{encode_varint, encoded_len_varint};

use crate::span_record::{SpanRecord, span_flags, unix_nanos};

// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// The key of field `tag` with wire type `wire`.
const fn key(tag: u32, wire: u32) -> u64 {
    ((tag << 3) | wire) as u64
}

/// The size of a length-delimited field of `n` bytes.
fn len_field(tag: u32, n: usize) -> usize {
    encoded_len_varint(key(tag, LEN)) + encoded_len_varint(n as u64) + n
}

/// The size of a varint field holding `value`.
fn varint_field(tag: u32, value: u64) -> usize {
    encoded_len_varint(key(tag, VARINT)) + encoded_len_varint(value)
}

fn put_key(buf: &mut Vec<u8>, tag: u32, wire: u32) {
    encode_varint(key(tag, wire), buf);
}

fn put_len(buf: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    put_key(buf, tag, LEN);
    encode_varint(bytes.len() as u64, buf);
    buf.extend_from_slice(bytes);
}

/// A string or bytes field, left out when empty (proto3's default).
fn put_nonempty(buf: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    if !bytes.is_empty() {
        put_len(buf, tag, bytes);
    }
}

fn nonempty_len(tag: u32, n: usize) -> usize {
    if n == 0 { 0 } else { len_field(tag, n) }
}

/// A varint field, left out when 0.
fn put_varint(buf: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        put_key(buf, tag, VARINT);
        encode_varint(value, buf);
    }
}

fn varint_len(tag: u32, value: u64) -> usize {
    if value == 0 { 0 } else { varint_field(tag, value) }
}

/// A fixed64 field, left out when 0.
fn put_fixed64(buf: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        put_key(buf, tag, FIXED64);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

fn fixed64_len(tag: u32, value: u64) -> usize {
    if value == 0 { 0 } else { encoded_len_varint(key(tag, FIXED64)) + 8 }
}

/// The size of `AnyValue` for `value` (a oneof: always written, default or
/// not).
fn any_value_len(value: &Value) -> usize {
    match value {
        Value::Bool(v) => varint_field(2, u64::from(*v)),
        // int64 is a varint of the two's complement.
        Value::I64(v) => varint_field(3, *v as u64),
        Value::F64(_) => 1 + 8,
        Value::String(v) => len_field(1, v.as_str().len()),
        other => AnyValue::from(other.clone()).encoded_len(),
    }
}

fn put_any_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(v) => {
            put_key(buf, 2, VARINT);
            encode_varint(u64::from(*v), buf);
        }
        Value::I64(v) => {
            put_key(buf, 3, VARINT);
            encode_varint(*v as u64, buf);
        }
        Value::F64(v) => {
            put_key(buf, 4, FIXED64);
            buf.extend_from_slice(&v.to_le_bytes());
        }
        Value::String(v) => put_len(buf, 1, v.as_str().as_bytes()),
        other => buf.extend_from_slice(&AnyValue::from(other.clone()).encode_to_vec()),
    }
}

/// The size of a `KeyValue` message's content.
fn key_value_len(kv: &KeyValue) -> usize {
    nonempty_len(1, kv.key.as_str().len()) + len_field(2, any_value_len(&kv.value))
}

fn put_key_value(buf: &mut Vec<u8>, kv: &KeyValue) {
    put_nonempty(buf, 1, kv.key.as_str().as_bytes());
    put_key(buf, 2, LEN);
    encode_varint(any_value_len(&kv.value) as u64, buf);
    put_any_value(buf, &kv.value);
}

/// The size of repeated `KeyValue` field `tag`.
fn attributes_len(tag: u32, attributes: &[KeyValue]) -> usize {
    attributes.iter().map(|kv| len_field(tag, key_value_len(kv))).sum()
}

fn put_attributes(buf: &mut Vec<u8>, tag: u32, attributes: &[KeyValue]) {
    for kv in attributes {
        put_key(buf, tag, LEN);
        encode_varint(key_value_len(kv) as u64, buf);
        put_key_value(buf, kv);
    }
}

/// OTLP's span kind number.
fn kind_number(kind: &SpanKind) -> u64 {
    span::SpanKind::from(kind.clone()) as i32 as u64
}

/// The OTLP status code and message of `status`.
fn status_parts(status: &Status) -> (u64, &str) {
    match status {
        Status::Unset => (0, ""),
        Status::Ok => (1, ""),
        Status::Error { description } => (2, description),
    }
}

/// One span, measured once and then written.
struct SpanSizes {
    /// The `Span` message's content.
    span: usize,
    /// Its `Status` message's content.
    status: usize,
    /// Each event's content.
    events: Vec<usize>,
    /// Its links, encoded by prost.
    links: Vec<Vec<u8>>,
    trace_state: String,
}

fn measure(record: &SpanRecord) -> SpanSizes {
    let trace_state = record.span_context.trace_state().header();
    let (code, message) = status_parts(&record.status);
    let status = nonempty_len(2, message.len()) + varint_len(3, code);
    let events: Vec<usize> = record
        .events
        .iter()
        .map(|event| {
            fixed64_len(1, unix_nanos(event.timestamp))
                + nonempty_len(2, event.name.len())
                + attributes_len(3, &event.attributes)
                + varint_len(4, u64::from(event.dropped_attributes_count))
        })
        .collect();
    let links: Vec<Vec<u8>> = record.links.iter().map(|link| span::Link::from(link.clone()).encode_to_vec()).collect();
    let parent = if record.parent_span_id == SpanId::INVALID { 0 } else { 8 };
    let span = len_field(1, 16)
        + len_field(2, 8)
        + nonempty_len(3, trace_state.len())
        + nonempty_len(4, parent)
        + nonempty_len(5, record.name.len())
        + varint_len(6, kind_number(&record.span_kind))
        + fixed64_len(7, record.start_time_unix_nano)
        + fixed64_len(8, record.end_time_unix_nano)
        + attributes_len(9, &record.attributes)
        + varint_len(10, u64::from(record.dropped_attributes_count))
        + events.iter().map(|&n| len_field(11, n)).sum::<usize>()
        + links.iter().map(|link| len_field(13, link.len())).sum::<usize>()
        + len_field(15, status)
        + encoded_len_varint(key(16, FIXED32))
        + 4;
    SpanSizes { span, status, events, links, trace_state }
}

fn put_span(buf: &mut Vec<u8>, record: &SpanRecord, sizes: &SpanSizes) {
    let context = &record.span_context;
    put_len(buf, 1, &context.trace_id().to_bytes());
    put_len(buf, 2, &context.span_id().to_bytes());
    put_nonempty(buf, 3, sizes.trace_state.as_bytes());
    if record.parent_span_id != SpanId::INVALID {
        put_len(buf, 4, &record.parent_span_id.to_bytes());
    }
    put_nonempty(buf, 5, record.name.as_bytes());
    put_varint(buf, 6, kind_number(&record.span_kind));
    put_fixed64(buf, 7, record.start_time_unix_nano);
    put_fixed64(buf, 8, record.end_time_unix_nano);
    put_attributes(buf, 9, &record.attributes);
    put_varint(buf, 10, u64::from(record.dropped_attributes_count));
    for (event, &size) in record.events.iter().zip(&sizes.events) {
        put_key(buf, 11, LEN);
        encode_varint(size as u64, buf);
        put_fixed64(buf, 1, unix_nanos(event.timestamp));
        put_nonempty(buf, 2, event.name.as_bytes());
        put_attributes(buf, 3, &event.attributes);
        put_varint(buf, 4, u64::from(event.dropped_attributes_count));
    }
    for link in &sizes.links {
        put_len(buf, 13, link);
    }
    let (code, message) = status_parts(&record.status);
    put_key(buf, 15, LEN);
    encode_varint(sizes.status as u64, buf);
    put_nonempty(buf, 2, message.as_bytes());
    put_varint(buf, 3, code);
    let mut flags = span_flags::HAS_IS_REMOTE | u32::from(context.trace_flags().to_u8());
    if record.parent_span_is_remote {
        flags |= span_flags::IS_REMOTE;
    }
    put_key(buf, 16, FIXED32);
    buf.extend_from_slice(&flags.to_le_bytes());
}

/// The protobuf bytes of the OTLP request of `records`, all in `scope`, for
/// `resource`: the bytes of [`crate::span_record::encode_request`]'s
/// request, written without building it.
pub fn encode_request_bytes(
    records: &[SpanRecord],
    resource: &ResourceAttributesWithSchema,
    scope: &InstrumentationScope,
) -> Vec<u8> {
    let resource_bytes = ProtoResource {
        attributes: resource.attributes.0.clone(),
        dropped_attributes_count: 0,
        entity_refs: Vec::new(),
    }
    .encode_to_vec();
    let resource_schema = resource.schema_url.as_deref().unwrap_or_default();
    let sizes: Vec<SpanSizes> = records.iter().map(measure).collect();
    let scope_bytes = ProtoScope::from((scope, None)).encode_to_vec();
    let scope_schema = scope.schema_url().unwrap_or_default();
    let scope_spans = if records.is_empty() {
        0
    } else {
        len_field(1, scope_bytes.len())
            + sizes.iter().map(|size| len_field(2, size.span)).sum::<usize>()
            + nonempty_len(3, scope_schema.len())
    };
    let resource_spans = len_field(1, resource_bytes.len())
        + if records.is_empty() { 0 } else { len_field(2, scope_spans) }
        + nonempty_len(3, resource_schema.len());
    let total = len_field(1, resource_spans);

    let mut buf = Vec::with_capacity(total);
    put_key(&mut buf, 1, LEN);
    encode_varint(resource_spans as u64, &mut buf);
    put_len(&mut buf, 1, &resource_bytes);
    if !records.is_empty() {
        put_key(&mut buf, 2, LEN);
        encode_varint(scope_spans as u64, &mut buf);
        put_len(&mut buf, 1, &scope_bytes);
        for (record, size) in records.iter().zip(&sizes) {
            put_key(&mut buf, 2, LEN);
            encode_varint(size.span as u64, &mut buf);
            put_span(&mut buf, record, size);
        }
        put_nonempty(&mut buf, 3, scope_schema.as_bytes());
    }
    put_nonempty(&mut buf, 3, resource_schema.as_bytes());
    debug_assert_eq!(buf.len(), total, "the measured size is the written size");
    buf
}
