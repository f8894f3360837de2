//! Lens's own diagnostics: one-line warnings on standard error.
//!
//! Telemetry must never flood the job's output, so repeated warnings go
//! through a [`RateLimit`] that lets one message through per period and
//! counts the ones it held back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Writes `lens: warning: {message}` on standard error, every line of a
/// message of several (a configuration's problems, one a line) prefixed, so
/// that each line of several ranks' interleaved output says what it is.
///
/// Lens never writes secrets through here: callers pass redacted values.
#[cold]
pub fn warn(message: impl std::fmt::Display) {
    use std::io::Write as _;
    // One `write` call, so that the warnings of several ranks sharing one
    // stderr never interleave mid-line.
    let lines = prefixed("lens: warning: ", &message.to_string());
    let _ = std::io::stderr().lock().write_all(lines.as_bytes());
}

/// `message` with `prefix` before each of its lines, each line ended.
///
/// ```
/// # use lens_core::diag::prefixed;
/// assert_eq!(prefixed("lens: warning: ", "two problems:\nthe second"), "lens: warning: two problems:\nlens: warning: the second\n");
/// ```
pub fn prefixed(prefix: &str, message: &str) -> String {
    if message.is_empty() {
        return format!("{prefix}\n");
    }
    message.lines().map(|line| format!("{prefix}{line}\n")).collect()
}

/// Writes `lens: {message}` on standard error: information a person running
/// the job needs once (where telemetry goes), not a problem.
#[cold]
pub fn note(message: impl std::fmt::Display) {
    use std::io::Write as _;
    let line = format!("lens: {message}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Writes `lens: warning: {message}` on standard error unless this process
/// has already written the same message through here.
///
/// For warnings about the configuration: a program that reads it twice (a
/// framework's own check, then setup) would otherwise print each problem
/// twice on every rank.
#[cold]
pub fn warn_once(message: impl std::fmt::Display) {
    let message = message.to_string();
    if first_time(&message) {
        warn(message);
    }
}

/// Whether `message` is new to this process (and remembers it).
fn first_time(message: &str) -> bool {
    static SEEN: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    !seen.contains(message) && seen.insert(message.to_owned())
}

/// The fewest bytes of a secret that [`redact`] hides when a message holds
/// only part of it (a collector that echoes a token cut short).
pub const PARTIAL_SECRET_LEN: usize = 8;

/// The fewest bytes a secret must have for [`redact`] to hide it: a header
/// value of one to three characters (`x-org=e`) is no credential, and
/// hiding it everywhere it occurs would leave nothing of a message to read.
pub const MIN_SECRET_LEN: usize = 4;

/// The most bytes of a message [`redact`] reads: it keeps 300 of them.
const REDACT_READ: usize = 4096;

/// `message` with every secret in `secrets` replaced by `<redacted>` and
/// cut to 300 bytes, for quoting an exporter's error in a warning. A whole
/// secret (of at least [`MIN_SECRET_LEN`] bytes) is replaced wherever it
/// appears, and so is any run of at least
/// [`PARTIAL_SECRET_LEN`] bytes of one (a collector may echo a token cut
/// short, or its tail): one pass over the message, the longest match first
/// at each place, so that a short secret never matches inside a longer one
/// or inside `<redacted>` itself.
///
/// ```
/// assert_eq!(lens_core::diag::redact("401: token s3cr3t refused", &["s3cr3t".into()]), "401: token <redacted> refused");
/// let secrets = ["e".to_string(), "Bearer xyz".to_string()];
/// assert_eq!(lens_core::diag::redact("echo Bearer xyz", &secrets), "echo <redacted>");
/// // Part of a secret: its first nine bytes, then its last eight.
/// let secrets = ["Bearer 0123456789abcdef".to_string()];
/// assert_eq!(lens_core::diag::redact("bad token Bearer 01...", &secrets), "bad token <redacted>...");
/// assert_eq!(lens_core::diag::redact("bad token ...89abcdef", &secrets), "bad token ...<redacted>");
/// ```
pub fn redact(message: &str, secrets: &[String]) -> String {
    let mut read = message.len().min(REDACT_READ);
    while !message.is_char_boundary(read) {
        read -= 1;
    }
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).filter(|s| s.len() >= MIN_SECRET_LEN).collect();
    // Every run of PARTIAL_SECRET_LEN bytes of a secret, not starting with
    // a space: a place where none begins holds no partial match, so most
    // places cost one lookup.
    let windows: std::collections::HashSet<&[u8]> = secrets
        .iter()
        .flat_map(|secret| secret.as_bytes().windows(PARTIAL_SECRET_LEN))
        .filter(|window| !window[0].is_ascii_whitespace())
        .collect();
    let mut out = String::with_capacity(read);
    let mut rest = &message[..read];
    while let Some(c) = rest.chars().next() {
        match secret_at(rest, &secrets, &windows) {
            0 => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
            len => {
                out.push_str("<redacted>");
                rest = &rest[len..];
            }
        }
    }
    let mut message_out = out;
    if message_out.len() > 300 {
        let mut cut = 300;
        while !message_out.is_char_boundary(cut) {
            cut -= 1;
        }
        message_out.truncate(cut);
        message_out.push('…');
    } else if read < message.len() {
        message_out.push('…');
    }
    message_out
}

/// How many bytes at the start of `text` are to be hidden: the longest
/// whole secret it starts with, or the longest run of at least
/// [`PARTIAL_SECRET_LEN`] bytes that is part of a secret and does not
/// start with a space (a char boundary of `text`); 0 for none. `windows`:
/// the secrets' runs of [`PARTIAL_SECRET_LEN`] bytes.
fn secret_at(text: &str, secrets: &[&str], windows: &std::collections::HashSet<&[u8]>) -> usize {
    let whole = secrets.iter().filter(|secret| text.starts_with(**secret)).map(|s| s.len()).max().unwrap_or(0);
    let bytes = text.as_bytes();
    if bytes.len() < PARTIAL_SECRET_LEN || !windows.contains(&bytes[..PARTIAL_SECRET_LEN]) {
        return whole;
    }
    let mut part = 0;
    for secret in secrets {
        for from in 0..secret.len() {
            let common = bytes.iter().zip(&secret.as_bytes()[from..]).take_while(|(a, b)| a == b).count();
            part = part.max(common);
        }
    }
    while !text.is_char_boundary(part) {
        part -= 1;
    }
    if part < PARTIAL_SECRET_LEN { whole } else { whole.max(part) }
}

/// Lets at most one event through per period, counting the ones held back.
///
/// ```
/// use std::time::Duration;
/// use lens_core::diag::RateLimit;
///
/// let limit = RateLimit::new(Duration::from_secs(60));
/// assert_eq!(limit.check(), Some(0)); // first event passes, none held back
/// assert_eq!(limit.check(), None); // within the period: held back
/// ```
#[derive(Debug)]
pub struct RateLimit {
    period_ms: u64,
    /// Milliseconds since the epoch when the last event passed, plus one
    /// (zero means "never").
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimit {
    /// A limit of one event per `period`.
    pub const fn new(period: Duration) -> RateLimit {
        RateLimit { period_ms: period.as_millis() as u64, last: AtomicU64::new(0), suppressed: AtomicU64::new(0) }
    }

    /// `Some(n)` when this event may pass (`n` events were held back since
    /// the last one that passed), `None` when it is held back.
    pub fn check(&self) -> Option<u64> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64) + 1;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < self.period_ms {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self.last.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::{PARTIAL_SECRET_LEN, first_time, redact};

    #[test]
    fn a_partial_echo_of_a_secret_is_hidden_from_eight_bytes_on() {
        let secrets = ["Bearer tok3n-0123456789".to_string(), "tok3n-0123456789".to_string()];
        // A collector that echoes the first 9 bytes, a middle run, the tail.
        assert_eq!(redact("401: got 'Bearer to'", &secrets), "401: got '<redacted>'");
        assert_eq!(redact("401: got '...n-012345...'", &secrets), "401: got '...<redacted>...'");
        assert_eq!(redact("401: got '...456789'", &secrets), "401: got '...456789'");
        assert_eq!(redact("401: got '...23456789'", &secrets), "401: got '...<redacted>'");
        // Fewer than eight bytes of a secret are text, not an echo.
        assert_eq!("tok3n-0".len(), PARTIAL_SECRET_LEN - 1);
        assert_eq!(redact("id:tok3n-0 is new", &secrets), "id:tok3n-0 is new");
    }

    #[test]
    fn a_partial_echo_ends_on_a_character() {
        let secrets = ["clé-secrète-très-longue".to_string()];
        // "é" and "è" share their first byte: the bytes in common end inside
        // the message's "é", and what is hidden ends before it.
        assert_eq!(redact("x clé-secréx", &secrets), "x <redacted>éx");
    }

    #[test]
    fn a_long_message_is_read_in_its_first_4096_bytes_and_kept_to_300() {
        let message = format!("{}tok3n-0123456789", "a".repeat(5000));
        let redacted = redact(&message, &["tok3n-0123456789".to_string()]);
        assert_eq!(redacted, format!("{}…", "a".repeat(300)));
        // A long token first: what is kept is short, and still marked cut.
        let token = "t".repeat(4000);
        let message = format!("{token} end {}", "b".repeat(500));
        assert_eq!(redact(&message, &[token]), format!("<redacted> end {}…", "b".repeat(91)));
    }

    #[test]
    fn a_message_is_new_only_the_first_time() {
        assert!(first_time("diag test: the first message"));
        assert!(!first_time("diag test: the first message"));
        assert!(first_time("diag test: another message"));
    }
}
