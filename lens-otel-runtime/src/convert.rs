//! lens's own attribute types ([`lens_core::attr`]) as OpenTelemetry's.
//!
//! lens-core has no OpenTelemetry dependency, so the conversions live here,
//! as one trait: `value.to_otel()`.

use std::borrow::Cow;

use lens_core::attr::{AttrValue, KeyValue, SpanKind};
use opentelemetry::{Array, Key, StringValue, Value};

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
            AttrValue::Str(v) => Value::String(string_value(v)),
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
        opentelemetry::KeyValue::new(key(self.key), self.value.to_otel())
    }
}

// OpenTelemetry's `From<Cow<'static, str>>` conversions are out of line (a
// call per key on every span with attributes); a static string, the usual
// key and value, is built here in place.
#[inline]
fn key(key: Cow<'static, str>) -> Key {
    match key {
        Cow::Borrowed(key) => Key::from_static_str(key),
        Cow::Owned(key) => Key::from(key),
    }
}

#[inline]
fn string_value(value: Cow<'static, str>) -> StringValue {
    match value {
        Cow::Borrowed(value) => StringValue::from(value),
        Cow::Owned(value) => StringValue::from(value),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_owned_strings_convert_to_the_same_attribute() {
        let owned = KeyValue::new(String::from("bench.phase"), String::from("train")).to_otel();
        let borrowed = KeyValue::new("bench.phase", "train").to_otel();
        assert_eq!(owned, opentelemetry::KeyValue::new("bench.phase", "train"));
        assert_eq!(borrowed, owned);
        assert_eq!(borrowed.key.as_str(), "bench.phase");
        assert_eq!(borrowed.value.as_str(), "train");
    }

    #[test]
    fn every_value_kind_keeps_its_type_and_value() {
        let cases = [
            (AttrValue::Bool(true), Value::Bool(true)),
            (AttrValue::I64(-3), Value::I64(-3)),
            (AttrValue::F64(2.5), Value::F64(2.5)),
            (AttrValue::Str(Cow::Owned("x".into())), Value::String("x".into())),
            (AttrValue::BoolArray(vec![false]), Value::Array(Array::Bool(vec![false]))),
            (AttrValue::I64Array(vec![1, 2]), Value::Array(Array::I64(vec![1, 2]))),
            (AttrValue::F64Array(vec![0.5]), Value::Array(Array::F64(vec![0.5]))),
            (
                AttrValue::StrArray(vec![Cow::Borrowed("a"), Cow::Owned("b".into())]),
                Value::Array(Array::String(vec!["a".into(), "b".into()])),
            ),
        ];
        for (lens, otel) in cases {
            assert_eq!(lens.to_otel(), otel);
        }
    }
}
