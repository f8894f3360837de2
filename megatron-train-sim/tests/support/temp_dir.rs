//! Test directories that do not outlive a passing test. Shared by the
//! simulator's tests and `lens-command`'s (which include this file by path).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A test's directory under the system's temporary directory: removed when
/// the test passes (dropped outside a panic), kept for the post-mortem when
/// it fails, with its path printed beside the failure. Without it every
/// test run left its telemetry, checkpoints and spools behind in `/tmp`.
#[derive(Debug)]
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty `PREFIX-NAME-PID-N` under the temporary directory.
    pub(crate) fn fresh(prefix: &str, name: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "{prefix}-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = PathBuf;

    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            #[expect(clippy::print_stderr, reason = "the test harness shows a failed test's stderr")]
            {
                eprintln!("kept for the failed test: {}", self.0.display());
            }
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
