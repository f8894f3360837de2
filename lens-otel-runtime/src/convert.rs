//! lens's own attribute types ([`lens_core::attr`]) as OpenTelemetry's.
//!
//! lens-core has no OpenTelemetry dependency, so the conversions live here,
//! as one trait: `value.to_otel()`.

use lens_core::attr::{AttrValue, KeyValue, SpanKind};
use opentelemetry::{Array, StringValue, Value};

/// Converts one of lens's attribute types into OpenTelemetry's.
pub trait ToOtel {
    /// The OpenTelemetry type.
    type Otel;
    /// The conversion.
    fn to_otel(self) -> Self::Otel;
}

impl ToOtel for AttrValue {
    type Otel = Value;
    #[inline]
    fn to_otel(self) -> Value {
        match self {
            AttrValue::Bool(v) => Value::Bool(v),
            AttrValue::I64(v) => Value::I64(v),
            AttrValue::F64(v) => Value::F64(v),
            AttrValue::Str(v) => Value::String(StringValue::from(v)),
            AttrValue::BoolArray(v) => Value::Array(Array::Bool(v)),
            AttrValue::I64Array(v) => Value::Array(Array::I64(v)),
            AttrValue::F64Array(v) => Value::Array(Array::F64(v)),
            AttrValue::StrArray(v) => Value::Array(Array::String(v.into_iter().map(StringValue::from).collect())),
        }
    }
}

impl ToOtel for KeyValue {
    type Otel = opentelemetry::KeyValue;
    #[inline]
    fn to_otel(self) -> opentelemetry::KeyValue {
        opentelemetry::KeyValue::new(self.key, self.value.to_otel())
    }
}

impl ToOtel for SpanKind {
    type Otel = opentelemetry::trace::SpanKind;
    #[inline]
    fn to_otel(self) -> opentelemetry::trace::SpanKind {
        match self {
            SpanKind::Internal => opentelemetry::trace::SpanKind::Internal,
            SpanKind::Server => opentelemetry::trace::SpanKind::Server,
            SpanKind::Client => opentelemetry::trace::SpanKind::Client,
            SpanKind::Producer => opentelemetry::trace::SpanKind::Producer,
            SpanKind::Consumer => opentelemetry::trace::SpanKind::Consumer,
        }
    }
}

/// Every attribute of `attributes`, converted.
#[inline]
pub fn key_values(attributes: impl IntoIterator<Item = KeyValue>) -> Vec<opentelemetry::KeyValue> {
    attributes.into_iter().map(ToOtel::to_otel).collect()
}
