//! The sampling markers a span can carry at its start, and the sampling key
//! of an iteration: plain names and a pure function, read by the runtime's
//! sampler (`lens_otel_runtime::sampler`) and set by the facade's span
//! helpers.

/// Start attribute that marks a span as structural: the sampler always
/// records and samples it (see the runtime's sampler, `lens_otel_runtime::sampler`).
pub const STRUCTURAL_ATTRIBUTE: &str = "lens.sampling.structural";

/// Start attribute that carries a span's sampling key (an `i64`, usually from
/// [`sampling_key`]): the span is decided by the key instead of its trace id,
/// and its subtree follows that decision.
pub const SAMPLING_KEY_ATTRIBUTE: &str = "lens.sampling.key";

/// The sampling key of one iteration of one run: the first 8 bytes of the MD5
/// digest of the UTF-8 text `"{run_id}:{restart_attempt}:{iteration}"`, read
/// as a big-endian signed integer (the same value in both builds).
///
/// It is the same in every process, on every platform and in Python:
///
/// ```python
/// int.from_bytes(hashlib.md5(f"{run_id}:{restart_attempt}:{iteration}".encode()).digest()[:8], "big", signed=True)
/// ```
///
/// ```
/// use lens_core::sampling::sampling_key;
/// assert_eq!(sampling_key("run", 0, 7), sampling_key("run", 0, 7));
/// assert_ne!(sampling_key("run", 0, 7), sampling_key("run", 1, 7));
/// // md5("abc:0:1") = 1c8d4331 fed728e5 …
/// assert_eq!(sampling_key("abc", 0, 1), 0x1c8d_4331_fed7_28e5);
/// ```
pub fn sampling_key(run_id: &str, restart_attempt: u32, iteration: u64) -> i64 {
    use md5::{Digest as _, Md5};
    let text = format!("{run_id}:{restart_attempt}:{iteration}");
    let digest = Md5::digest(text.as_bytes());
    let mut first = [0_u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}
