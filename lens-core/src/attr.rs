//! Attribute values in lens's own types, so that the pure part of lens-core,
//! the resource detectors and the compiled-out facade never name an
//! OpenTelemetry type.
//!
//! The accepted types follow the original's `safe_set_span_attributes`:
//! booleans, integers, floats, strings and homogeneous lists of those.
//! `None` means "do not set". The runtime (`lens_otel_runtime::convert`)
//! turns them into `opentelemetry::Value`s.
//!
//! The pure pieces of the span helpers live here too, so that both sides of
//! the facade (its span helpers with `otel` and the compiled-out no-ops) share
//! one definition: the redaction rule ([`DEFAULT_REDACT_KEYS`], [`REDACTED`],
//! [`redact_value`]) and attributes computed only when a span is recorded
//! ([`lazy_attributes`]).
//!
//! ```
//! use lens_core::attr::{AttrValue, KeyValue};
//!
//! let kv = KeyValue::new("megatron.iteration", 42_i64);
//! assert_eq!(kv.value, AttrValue::I64(42));
//! assert_eq!(KeyValue::new("dl.loss", 0.5).value, AttrValue::F64(0.5));
//! assert_eq!(KeyValue::new("host.name", "node-1").value.to_string(), "node-1");
//! ```

use std::borrow::Cow;
use std::fmt;

/// A typed attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// A boolean.
    Bool(bool),
    /// A signed integer (unsigned values are converted, saturating).
    I64(i64),
    /// A float.
    F64(f64),
    /// A string.
    Str(Cow<'static, str>),
    /// A list of booleans.
    BoolArray(Vec<bool>),
    /// A list of integers.
    I64Array(Vec<i64>),
    /// A list of floats.
    F64Array(Vec<f64>),
    /// A list of strings.
    StrArray(Vec<Cow<'static, str>>),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
            f.write_str("[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{item}")?;
            }
            f.write_str("]")
        }
        match self {
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::I64(v) => write!(f, "{v}"),
            AttrValue::F64(v) => write!(f, "{v}"),
            AttrValue::Str(v) => f.write_str(v),
            AttrValue::BoolArray(v) => list(f, v),
            AttrValue::I64Array(v) => list(f, v),
            AttrValue::F64Array(v) => list(f, v),
            AttrValue::StrArray(v) => list(f, v),
        }
    }
}

macro_rules! from_scalar {
    ($variant:ident: $($ty:ty),*) => {$(
        impl From<$ty> for AttrValue {
            #[inline]
            fn from(value: $ty) -> AttrValue {
                AttrValue::$variant(value.into())
            }
        }
    )*};
}

from_scalar!(Bool: bool);
from_scalar!(I64: i64, i32, i16, i8, u32, u16, u8);
from_scalar!(F64: f64, f32);
from_scalar!(Str: &'static str, String, Cow<'static, str>);

macro_rules! from_saturating {
    ($($ty:ty),*) => {$(
        impl From<$ty> for AttrValue {
            #[inline]
            fn from(value: $ty) -> AttrValue {
                AttrValue::I64(i64::try_from(value).unwrap_or(i64::MAX))
            }
        }
    )*};
}

from_saturating!(u64, usize, isize, u128, i128);

impl From<Vec<bool>> for AttrValue {
    fn from(value: Vec<bool>) -> AttrValue {
        AttrValue::BoolArray(value)
    }
}

impl From<Vec<i64>> for AttrValue {
    fn from(value: Vec<i64>) -> AttrValue {
        AttrValue::I64Array(value)
    }
}

impl From<Vec<f64>> for AttrValue {
    fn from(value: Vec<f64>) -> AttrValue {
        AttrValue::F64Array(value)
    }
}

impl From<Vec<String>> for AttrValue {
    fn from(value: Vec<String>) -> AttrValue {
        AttrValue::StrArray(value.into_iter().map(Cow::Owned).collect())
    }
}

impl From<Vec<&'static str>> for AttrValue {
    fn from(value: Vec<&'static str>) -> AttrValue {
        AttrValue::StrArray(value.into_iter().map(Cow::Borrowed).collect())
    }
}

/// A key and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyValue {
    /// The attribute key, such as `megatron.iteration`.
    pub key: Cow<'static, str>,
    /// The value.
    pub value: AttrValue,
}

impl KeyValue {
    /// A key-value pair from anything that converts.
    #[inline]
    pub fn new(key: impl Into<Cow<'static, str>>, value: impl Into<AttrValue>) -> KeyValue {
        KeyValue { key: key.into(), value: value.into() }
    }
}

/// The keys whose string values `SpanGuard::set_attributes_redacted` (the
/// original's `safe_set_span_attributes`) replaces with [`REDACTED`], as in the original: exact, case-sensitive
/// matches.
pub const DEFAULT_REDACT_KEYS: &[&str] =
    &["prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"];

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// `value`, or [`REDACTED`] when `key` is one of `redact_keys` (an exact,
/// case-sensitive match). Pure, so it behaves the same whether or not
/// telemetry is compiled in.
///
/// ```
/// use lens_core::attr::{AttrValue, DEFAULT_REDACT_KEYS, redact_value};
///
/// assert_eq!(redact_value("password", "hunter2".into(), DEFAULT_REDACT_KEYS), AttrValue::from("[REDACTED]"));
/// assert_eq!(redact_value("Password", "hunter2".into(), DEFAULT_REDACT_KEYS), AttrValue::from("hunter2"));
/// ```
#[inline]
pub fn redact_value(key: &str, value: AttrValue, redact_keys: &[&str]) -> AttrValue {
    if redact_keys.contains(&key) { AttrValue::Str(Cow::Borrowed(REDACTED)) } else { value }
}

/// Attributes computed only when the span is recorded; see [`lazy_attributes`].
#[derive(Clone, Copy)]
pub struct LazyAttributes<F>(F);

/// Defers computing attributes until a span is actually recorded (with
/// telemetry compiled out, never).
///
/// A span helper iterates its attributes only when its span records, and
/// iterating a `LazyAttributes` is what calls `compute`.
///
/// ```
/// use lens_core::attr::{KeyValue, lazy_attributes};
///
/// let shape = vec![8, 1024];
/// let attributes = lazy_attributes(|| [KeyValue::new("megatron.shape", format!("{shape:?}"))]);
/// let computed: Vec<KeyValue> = attributes.into_iter().collect();
/// assert_eq!(computed, [KeyValue::new("megatron.shape", "[8, 1024]")]);
/// ```
#[inline]
pub fn lazy_attributes<F, I>(compute: F) -> LazyAttributes<F>
where
    F: FnOnce() -> I,
    I: IntoIterator<Item = KeyValue>,
{
    LazyAttributes(compute)
}

impl<F, I> IntoIterator for LazyAttributes<F>
where
    F: FnOnce() -> I,
    I: IntoIterator<Item = KeyValue>,
{
    type Item = KeyValue;
    type IntoIter = I::IntoIter;

    fn into_iter(self) -> I::IntoIter {
        (self.0)().into_iter()
    }
}

impl<F> fmt::Debug for LazyAttributes<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LazyAttributes")
    }
}

/// The role of a span in a request between processes (OpenTelemetry's
/// `SpanKind`): a [`Server`](SpanKind::Server) span handles a request that
/// arrived from elsewhere, an [`Internal`](SpanKind::Internal) one is work
/// inside the process. Pure data, the same type in both facade modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SpanKind {
    /// Work inside the process (the default).
    #[default]
    Internal,
    /// The handling of a request from a remote client.
    Server,
    /// A request to a remote server.
    Client,
    /// A message sent for later processing.
    Producer,
    /// The processing of a message from a producer.
    Consumer,
}
