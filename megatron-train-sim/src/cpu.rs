//! The whole process's CPU time, every thread (the training loop, the
//! exporters, the watchdog, the async-save worker), user and system: what
//! `--summary-json` reports beside the wall times, so that `cargo xtask
//! bench` can weigh what telemetry costs the whole job when wall time is too
//! noisy to say (docs/performance.md). `getrusage(RUSAGE_SELF)` counts the
//! threads that have ended too.

use std::time::Duration;

/// The CPU this process has used so far, every thread; `None` where the
/// platform does not say.
pub(crate) fn process_cpu() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `getrusage` writes one `rusage` into the pointer it is
        // given, which points at a zeroed value of that type we own.
        let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
        if status != 0 {
            return None;
        }
        // SAFETY: `getrusage` returned 0, so it filled the value (and a
        // zeroed `rusage` is a valid one anyway: plain integers).
        let usage = unsafe { usage.assume_init() };
        let time = |t: libc::timeval| {
            Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
                + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
        };
        Some(time(usage.ru_utime) + time(usage.ru_stime))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::process_cpu;
    use std::time::Duration;

    #[test]
    fn the_work_of_a_thread_that_has_ended_is_counted() {
        let before = process_cpu().expect("getrusage answers on unix");
        // A fixed amount of dependent arithmetic (some 20 ms of CPU at 4 GHz in a release build,
        // more on a slower core), on a thread that ends before the reading.
        let busy = std::thread::spawn(|| {
            let mut x = 1_u64;
            for _ in 0..20_000_000_u64 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
            x
        });
        let _ = busy.join();
        let used = process_cpu().unwrap() - before;
        assert!(used >= Duration::from_millis(5), "{used:?}");
    }
}
