//! OTLP headers (`OTEL_EXPORTER_OTLP_HEADERS`), which usually carry secrets.
//!
//! [`Headers`] parses the W3C-baggage-style list `key=value,key2=value2`
//! (values percent-decoded) and never shows a value: its `Debug` and
//! `Display` print each key with `[REDACTED]`, and its errors name a key or
//! an entry's position, never a value. The only way to read a value is
//! [`Headers::iter`] (for the exporter that sends them).
//!
//! ```
//! use lens_core::config::Headers;
//!
//! let headers = Headers::parse("Authorization=Bearer%20s3cr3t, X-Tenant=team-a").unwrap();
//! assert_eq!(headers.get("authorization"), Some("Bearer s3cr3t"));
//! assert_eq!(format!("{headers}"), "Authorization=[REDACTED], X-Tenant=[REDACTED]");
//! assert!(!format!("{headers:?}").contains("s3cr3t"));
//! ```

use std::fmt;

/// The shortest credential part (after `Bearer `) redacted on its own:
/// shorter ones would redact ordinary words of a message.
const MIN_CREDENTIAL_LEN: usize = 6;

/// An ordered list of header names and values whose values are never shown.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    entries: Vec<(String, String)>,
}

/// Why a header list or a header could not be accepted. Never holds a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Entry number `position` (1-based) has no `=`.
    #[error("entry #{position} has no '=' (the entry is not shown, it may hold a secret)")]
    MissingEquals {
        /// 1-based position of the entry in the list.
        position: usize,
    },
    /// Entry number `position` has nothing after its first `=` but more
    /// `=` or nothing at all: a bare token (base64 such as `dGVzdA==`
    /// splits into the "key" `dGVzdA` and the "value" `=`), not a
    /// `key=value` pair. Neither part is shown: the "key" is the secret.
    #[error(
        "entry #{position} is malformed: nothing but '=' follows its first '=' (a bare token such as base64 is not \
         key=value; write name=value, e.g. Authorization=Bearer%20<token>; the entry is not shown, it may hold a secret)"
    )]
    NoValue {
        /// 1-based position of the entry in the list.
        position: usize,
    },
    /// Entry number `position` has nothing before its `=`.
    #[error("entry #{position} has an empty key")]
    EmptyKey {
        /// 1-based position of the entry in the list.
        position: usize,
    },
    /// A key with characters an HTTP header name cannot hold. The key is
    /// not shown either: a mistyped list such as `Authorization: Bearer x=y`
    /// would put the secret into the key.
    #[error("{} has a key that is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)", entry_name(*position))]
    InvalidKey {
        /// 1-based position of the entry in the list, when parsed from one.
        position: Option<usize>,
    },
    /// A value whose percent-encoding is broken or that decodes to bytes a
    /// header cannot hold.
    #[error("the value of key '{key}' {reason} (the value is not shown)")]
    InvalidValue {
        /// The key whose value is bad.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl Headers {
    /// No headers.
    pub const fn new() -> Headers {
        Headers { entries: Vec::new() }
    }

    /// Parses `key=value,key2=value2`: entries and keys trimmed, empty
    /// entries skipped, values trimmed and percent-decoded (so a value may
    /// hold `,` as `%2C`). A later entry with the same key (compared without
    /// regard to case) replaces an earlier one.
    pub fn parse(list: &str) -> Result<Headers, HeaderError> {
        let mut headers = Headers::new();
        for (i, entry) in list.split(',').enumerate() {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let position = i + 1;
            let Some((key, value)) = entry.split_once('=') else {
                return Err(HeaderError::MissingEquals { position });
            };
            let key = key.trim();
            if value.chars().all(|c| c == '=' || c.is_whitespace()) {
                return Err(HeaderError::NoValue { position });
            }
            if key.is_empty() {
                return Err(HeaderError::EmptyKey { position });
            }
            check_key(key).map_err(|_| HeaderError::InvalidKey { position: Some(position) })?;
            let value = percent_decode(value.trim()).ok_or_else(|| HeaderError::InvalidValue {
                key: key.to_string(),
                reason: "has a broken %-escape or is not UTF-8",
            })?;
            headers.insert(key, &value)?;
        }
        Ok(headers)
    }

    /// Adds or replaces (case-insensitively by key) one header, checking that
    /// the key is a valid header name and the value holds no control
    /// character.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), HeaderError> {
        check_key(key)?;
        if value.chars().any(|c| c.is_control() && c != '\t') {
            return Err(HeaderError::InvalidValue { key: key.to_string(), reason: "holds a control character" });
        }
        match self.entries.iter_mut().find(|(k, _)| k.eq_ignore_ascii_case(key)) {
            Some(entry) => *entry = (key.to_string(), value.to_string()),
            None => self.entries.push((key.to_string(), value.to_string())),
        }
        Ok(())
    }

    /// `self` with every header of `overrides` added, replacing same-named
    /// ones (per-signal headers over the general ones).
    #[must_use]
    pub fn merged_with(&self, overrides: &Headers) -> Headers {
        let mut merged = self.clone();
        for (key, value) in &overrides.entries {
            match merged.entries.iter_mut().find(|(k, _)| k.eq_ignore_ascii_case(key)) {
                Some(entry) => *entry = (key.clone(), value.clone()),
                None => merged.entries.push((key.clone(), value.clone())),
            }
        }
        merged
    }

    /// The value of `key` (compared without regard to case).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str())
    }

    /// Every key and value, in order. This is the only way to read values:
    /// hand them to the exporter, never to a log.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// What a message must never show: every value and, for a value of
    /// the form `<scheme> <credential>` (`Bearer s3cr3t`), the credential
    /// alone too (a collector may echo just that). For
    /// [`crate::diag::redact`].
    ///
    /// ```
    /// let headers = lens_core::config::Headers::parse("Authorization=Bearer%20s3cr3t").unwrap();
    /// assert_eq!(headers.secrets(), ["Bearer s3cr3t", "s3cr3t"]);
    /// ```
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets = Vec::new();
        for (_, value) in &self.entries {
            secrets.push(value.clone());
            if let Some((_, credential)) = value.trim().split_once(char::is_whitespace) {
                let credential = credential.trim();
                if credential.len() >= MIN_CREDENTIAL_LEN {
                    secrets.push(credential.to_string());
                }
            }
        }
        secrets.retain(|s| !s.is_empty());
        secrets
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// How many headers there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.entries.iter().map(|(k, _)| (k, Redacted))).finish()
    }
}

impl fmt::Display for Headers {
    /// `key=[REDACTED], key2=[REDACTED]`, or `(none)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("(none)");
        }
        for (i, (key, _)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key}=[REDACTED]")?;
        }
        Ok(())
    }
}

struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

fn check_key(key: &str) -> Result<(), HeaderError> {
    let is_tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if key.is_empty() || !key.chars().all(is_tchar) {
        return Err(HeaderError::InvalidKey { position: None });
    }
    Ok(())
}

fn entry_name(position: Option<usize>) -> String {
    position.map_or_else(|| "a header".to_string(), |p| format!("entry #{p}"))
}

/// Decodes `%XX` escapes; `None` on a broken escape or non-UTF-8 result.
fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_redacts() {
        let h = Headers::parse(" a=x%2Cy , ,B=2,a=3").unwrap();
        assert_eq!(h.get("A"), Some("3"));
        assert_eq!(h.get("b"), Some("2"));
        assert_eq!(h.len(), 2);
        assert_eq!(format!("{h:?}"), r#"{"a": [REDACTED], "B": [REDACTED]}"#);
    }

    #[test]
    fn secrets_hold_values_and_bare_credentials() {
        let h = Headers::parse("Authorization=Bearer%20tok3n-value,x-tenant=a,x-key=Basic%20ab").unwrap();
        assert_eq!(h.secrets(), ["Bearer tok3n-value", "tok3n-value", "a", "Basic ab"]);
        let message = crate::diag::redact("401 from collector: echo tok3n-value", &h.secrets());
        assert_eq!(message, "401 from collector: echo <redacted>");
    }

    #[test]
    fn rejects_bad_syntax_without_showing_values() {
        assert_eq!(Headers::parse("Bearer secret"), Err(HeaderError::MissingEquals { position: 1 }));
        assert_eq!(Headers::parse("a=1,=secret"), Err(HeaderError::EmptyKey { position: 2 }));
        // Bare base64 tokens: their first '=' split gives a "key" that is
        // the secret, which must not be accepted (and so shown) as a name.
        for list in ["a=1, dGVzdHNlY3JldA==", "a=1,dGVzdHNlY3JldA=", "a=1,dGVzdHNlY3JldA= ="] {
            let err = Headers::parse(list).unwrap_err();
            assert_eq!(err, HeaderError::NoValue { position: 2 }, "{list}");
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("dGVzdHNlY3JldA"), "{shown}");
            assert!(shown.contains("entry #2 is malformed"), "{shown}");
        }
        assert_eq!(Headers::parse("k==x").unwrap().get("k"), Some("=x"), "a value may start with '='");
        let err = Headers::parse("k=%zzsecret").unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = Headers::parse("a=1,Authorization: Bearer s3cr3t=x").unwrap_err();
        assert_eq!(err, HeaderError::InvalidKey { position: Some(2) });
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }
}
