//! Where configuration reads its variables from.
//!
//! Everything that reads the environment takes an [`EnvSource`], so tests
//! pass a map and never mutate the process environment. [`ProcessEnv`] reads
//! the real one.
//!
//! ```
//! use std::collections::HashMap;
//! use lens_core::env::EnvSource;
//!
//! let env = HashMap::from([("RANK".to_string(), "3".to_string())]);
//! assert_eq!(env.var("RANK").as_deref(), Some("3"));
//! assert_eq!(env.var("WORLD_SIZE"), None);
//! ```

use std::collections::{BTreeMap, HashMap};

/// A source of environment variables.
pub trait EnvSource {
    /// The raw value of `key`, if set (possibly empty; callers decide what
    /// empty means, usually "unset").
    fn var(&self, key: &str) -> Option<String>;

    /// The value of `key`, trimmed, with an empty value treated as unset.
    fn non_empty(&self, key: &str) -> Option<String> {
        self.var(key).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
    }
}

/// The process environment.
///
/// A value that is not UTF-8 comes back with each bad byte replaced by
/// U+FFFD (`to_string_lossy`), which keeps the variables lens only records
/// (`SLURM_*`, host names) readable. The configuration refuses a value of
/// its own settings that holds U+FFFD, naming the variable, so that a
/// replaced value never silently means another path or credential; every
/// wrapper of a source (`FnEnv`, a map) passes the mark on unchanged.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
    }
}

impl<S: std::hash::BuildHasher> EnvSource for HashMap<String, String, S> {
    fn var(&self, key: &str) -> Option<String> {
        self.get(key).cloned()
    }
}

impl EnvSource for BTreeMap<String, String> {
    fn var(&self, key: &str) -> Option<String> {
        self.get(key).cloned()
    }
}

impl EnvSource for [(&str, &str)] {
    fn var(&self, key: &str) -> Option<String> {
        self.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| (*v).to_string())
    }
}

impl<const N: usize> EnvSource for [(&str, &str); N] {
    fn var(&self, key: &str) -> Option<String> {
        self.as_slice().var(key)
    }
}

impl<T: EnvSource + ?Sized> EnvSource for &T {
    fn var(&self, key: &str) -> Option<String> {
        (**self).var(key)
    }
}

/// A lookup function as a source: `FnEnv(|key| ...)`.
#[derive(Clone, Copy)]
pub struct FnEnv<F>(pub F);

impl<F: Fn(&str) -> Option<String>> EnvSource for FnEnv<F> {
    fn var(&self, key: &str) -> Option<String> {
        (self.0)(key)
    }
}
