//! Rank strategies (which ranks export) and sampling strategies (which
//! exporting ranks record spans), each with a process-wide registry.
//!
//! A strategy is a pure decision from the configuration and the rank
//! context, taken once per process at setup. The built-in rank strategies
//! are the Python original's: `single_rank` (the default; `export_rank`
//! `-1` means the last rank), `all_ranks`, `sampled` and
//! `first_rank_per_node`. The built-in sampling strategy is `rank_aware`
//! (it records spans on a sample of the exporting ranks). `sampled` and `rank_aware` pick ranks with the original's hash,
//! `(int(md5(str(rank)).hexdigest(), 16) % 10000) / 10000 < rate`, so a mixed
//! Python and Rust job picks the same ranks.
//!
//! Frameworks add their own with [`register_rank_strategy`] and
//! [`register_sampling_strategy`]; a configuration then names them in
//! `<PREFIX>_RANK_STRATEGY` / `<PREFIX>_SAMPLING_STRATEGY`. Built-ins can be
//! replaced only with `allow_override` and never unregistered. Error texts are
//! the original's.
//!
//! ```
//! use lens_core::config::LensConfig;
//! use lens_core::identity::RankContext;
//! use lens_core::strategies::{register_rank_strategy, should_export};
//!
//! register_rank_strategy("even_ranks", |_config, ctx| ctx.rank % 2 == 0, false).unwrap();
//! let config = LensConfig { rank_strategy: "even_ranks".into(), ..LensConfig::default() };
//! let rank = |rank| RankContext { rank, world_size: 4, ..RankContext::SINGLE };
//! assert!(should_export(&config, &rank(2)).unwrap());
//! assert!(!should_export(&config, &rank(3)).unwrap());
//! ```
//!
//! The OpenTelemetry sampler that applies a sampling strategy lives in the
//! runtime crate (`lens_otel_runtime::sampler`); this module only decides.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use md5::{Digest, Md5};

use crate::config::LensConfig;
use crate::identity::RankContext;

/// A rank strategy: whether this process exports telemetry.
pub type RankStrategy = Arc<dyn Fn(&LensConfig, &RankContext) -> bool + Send + Sync>;

/// A sampling strategy: whether this (exporting) process records spans.
pub type SamplingStrategy = Arc<dyn Fn(&LensConfig, &RankContext) -> bool + Send + Sync>;

/// The built-in rank strategies, sorted.
pub const BUILTIN_RANK_STRATEGIES: [&str; 4] = ["all_ranks", "first_rank_per_node", "sampled", "single_rank"];

/// The built-in sampling strategies.
pub const BUILTIN_SAMPLING_STRATEGIES: [&str; 1] = ["rank_aware"];

/// Which registry an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyKind {
    /// Rank strategies.
    Rank,
    /// Sampling strategies.
    Sampling,
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StrategyKind::Rank => "rank strategy",
            StrategyKind::Sampling => "sampling strategy",
        })
    }
}

/// A registry operation or lookup that failed (the original's texts).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StrategyError {
    /// Registering under an empty name.
    #[error("Strategy name must be a non-empty string.")]
    EmptyName,
    /// Registering a name that exists without `allow_override`.
    #[error("Strategy '{0}' is already registered. Pass allow_override=true to replace it.")]
    AlreadyRegistered(String),
    /// Unregistering a built-in.
    #[error("Cannot unregister built-in strategy '{0}'.")]
    Builtin(String),
    /// Unregistering a name that is not registered.
    #[error("Strategy '{0}' is not registered.")]
    NotRegistered(String),
    /// `single_rank` with an export rank the job does not have: no rank
    /// would export.
    #[error(
        "{variable}={export_rank} is not below the world size {world_size}, so no rank would export under \
         single_rank; expected -1 (the last rank) or a rank from 0 to {}",
        world_size.saturating_sub(1)
    )]
    ExportRankOutOfRange {
        /// The variable or flag that set it.
        variable: String,
        /// The export rank.
        export_rank: i64,
        /// The job's world size.
        world_size: u32,
    },
    /// Looking up a name that is not registered.
    #[error(
        "Unknown {kind} '{name}'. Registered strategies: {}.{}",
        crate::config::pyrepr::py_list(registered),
        suggestion.as_ref().map(|s| format!(" Did you mean '{s}'?")).unwrap_or_default()
    )]
    Unknown {
        /// The registry looked in.
        kind: StrategyKind,
        /// The name asked for.
        name: String,
        /// Every registered name, sorted.
        registered: Vec<String>,
        /// The closest registered name, when one is close enough to be a typo.
        suggestion: Option<String>,
    },
}

type Strategy = Arc<dyn Fn(&LensConfig, &RankContext) -> bool + Send + Sync>;

struct Registry {
    kind: StrategyKind,
    builtins: &'static [&'static str],
    map: LazyLock<RwLock<BTreeMap<String, Strategy>>>,
}

impl Registry {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Strategy>> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Strategy>> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }

    #[cold]
    fn register(&self, name: &str, strategy: Strategy, allow_override: bool) -> Result<(), StrategyError> {
        let name = name.trim();
        if name.is_empty() {
            return Err(StrategyError::EmptyName);
        }
        let mut map = self.write();
        if map.contains_key(name) && !allow_override {
            return Err(StrategyError::AlreadyRegistered(name.to_string()));
        }
        map.insert(name.to_string(), strategy);
        Ok(())
    }

    #[cold]
    fn unregister(&self, name: &str) -> Result<(), StrategyError> {
        if self.builtins.contains(&name) {
            return Err(StrategyError::Builtin(name.to_string()));
        }
        match self.write().remove(name) {
            Some(_) => Ok(()),
            None => Err(StrategyError::NotRegistered(name.to_string())),
        }
    }

    fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    fn get(&self, name: &str) -> Result<Strategy, StrategyError> {
        let map = self.read();
        if let Some(strategy) = map.get(name) {
            return Ok(Arc::clone(strategy));
        }
        let registered: Vec<String> = map.keys().cloned().collect();
        drop(map);
        let suggestion = crate::suggest::closest(name, registered.iter().map(String::as_str)).map(str::to_string);
        Err(StrategyError::Unknown { kind: self.kind, name: name.to_string(), registered, suggestion })
    }
}

static RANK_STRATEGIES: Registry = Registry {
    kind: StrategyKind::Rank,
    builtins: &BUILTIN_RANK_STRATEGIES,
    map: LazyLock::new(|| {
        let mut map: BTreeMap<String, Strategy> = BTreeMap::new();
        map.insert("all_ranks".into(), Arc::new(all_ranks));
        map.insert("first_rank_per_node".into(), Arc::new(first_rank_per_node));
        map.insert("sampled".into(), Arc::new(sampled));
        map.insert("single_rank".into(), Arc::new(single_rank));
        RwLock::new(map)
    }),
};

static SAMPLING_STRATEGIES: Registry = Registry {
    kind: StrategyKind::Sampling,
    builtins: &BUILTIN_SAMPLING_STRATEGIES,
    map: LazyLock::new(|| {
        let mut map: BTreeMap<String, Strategy> = BTreeMap::new();
        map.insert("rank_aware".into(), Arc::new(rank_aware));
        RwLock::new(map)
    }),
};

/// Registers a rank strategy under `name`. An existing name (a built-in
/// included) is replaced only with `allow_override`.
pub fn register_rank_strategy<F>(name: &str, strategy: F, allow_override: bool) -> Result<(), StrategyError>
where
    F: Fn(&LensConfig, &RankContext) -> bool + Send + Sync + 'static,
{
    RANK_STRATEGIES.register(name, Arc::new(strategy), allow_override)
}

/// Removes a registered rank strategy. Built-ins cannot be removed.
pub fn unregister_rank_strategy(name: &str) -> Result<(), StrategyError> {
    RANK_STRATEGIES.unregister(name)
}

/// Every registered rank strategy name, sorted.
pub fn registered_rank_strategies() -> Vec<String> {
    RANK_STRATEGIES.names()
}

/// The rank strategy registered as `name`.
pub fn rank_strategy(name: &str) -> Result<RankStrategy, StrategyError> {
    RANK_STRATEGIES.get(name)
}

/// Whether this process exports, by `config.rank_strategy`. Evaluated once,
/// at setup; the registry lock is released before the strategy runs.
///
/// Under `single_rank`, an export rank at or past the world size is an error
/// (the original exports from no rank then, silently).
pub fn should_export(config: &LensConfig, ctx: &RankContext) -> Result<bool, StrategyError> {
    if config.rank_strategy == "single_rank" && config.export_rank >= i64::from(ctx.world_size) {
        return Err(StrategyError::ExportRankOutOfRange {
            variable: config.origins.variable("export_rank").unwrap_or("export_rank").to_string(),
            export_rank: config.export_rank,
            world_size: ctx.world_size,
        });
    }
    let strategy = rank_strategy(&config.rank_strategy)?;
    Ok(strategy(config, ctx))
}

/// A warning when the strategies pick none of the ranks of a one-node job
/// of `world_size` ranks (rank `r` is local rank `r`): no rank exports, or
/// no exporting rank records spans. For a launcher, which knows the world
/// size before any rank starts; `None` when some rank is picked, and when a
/// strategy is not registered (that is the ranks' error to report).
///
/// ```
/// use lens_core::config::LensConfig;
/// use lens_core::strategies::picks_no_rank;
///
/// // Ranks 0 and 1 score 0.785 and 0.8411 (the original's md5 hash).
/// let config = LensConfig { rank_strategy: "sampled".into(), export_sample_rate: 0.1, ..LensConfig::default() };
/// assert_eq!(
///     picks_no_rank(&config, 2).unwrap(),
///     "the rank strategy sampled picks none of the 2 ranks at LensConfig.export_sample_rate=0.1 (a rank is picked \
///      when the original's hash of its number is below the rate): no rank exports spans or training metrics; \
///      raise LensConfig.export_sample_rate or choose another rank strategy"
/// );
/// assert_eq!(picks_no_rank(&LensConfig { export_sample_rate: 0.8, ..config }, 2), None);
/// ```
pub fn picks_no_rank(config: &LensConfig, world_size: u32) -> Option<String> {
    let context = |rank| RankContext { rank, world_size, local_rank: rank, node_rank: Some(0) };
    let mut exporting = (0..world_size).map(context).filter(|ctx| should_export(config, ctx).unwrap_or(true));
    let rate = config.variable_to_set("export_sample_rate", "EXPORT_SAMPLE_RATE");
    // The built-in strategies that pick by the rate; a registered one may not.
    let by_rate = |name: &str| {
        matches!(name, "sampled" | "rank_aware").then(|| {
            format!(
                " at {rate}={} (a rank is picked when the original's hash of its number is below the rate)",
                config.export_sample_rate
            )
        })
    };
    let remedy = |what: &str, name: &str| match by_rate(name) {
        Some(_) => format!("raise {rate} or choose another {what} strategy"),
        None => format!("choose another {what} strategy"),
    };
    let rank_metrics = if config.rank_metrics { " (every rank still exports its rank metrics)" } else { "" };
    let Some(first) = exporting.next() else {
        let strategy = &config.rank_strategy;
        return Some(format!(
            "the rank strategy {strategy} picks none of the {world_size} ranks{}: no rank exports spans or training \
             metrics{rank_metrics}; {}",
            by_rate(strategy).unwrap_or_default(),
            remedy("rank", strategy)
        ));
    };
    if std::iter::once(first).chain(exporting).any(|ctx| records_spans(config, &ctx).unwrap_or(true)) {
        return None;
    }
    let strategy = &config.sampling_strategy;
    Some(format!(
        "the sampling strategy {strategy} picks none of the exporting ranks (of {world_size}){}: no span is recorded; {}",
        by_rate(strategy).unwrap_or_default(),
        remedy("sampling", strategy)
    ))
}

/// Registers a sampling strategy under `name`. An existing name (a built-in
/// included) is replaced only with `allow_override`.
pub fn register_sampling_strategy<F>(name: &str, strategy: F, allow_override: bool) -> Result<(), StrategyError>
where
    F: Fn(&LensConfig, &RankContext) -> bool + Send + Sync + 'static,
{
    SAMPLING_STRATEGIES.register(name, Arc::new(strategy), allow_override)
}

/// Removes a registered sampling strategy. Built-ins cannot be removed.
pub fn unregister_sampling_strategy(name: &str) -> Result<(), StrategyError> {
    SAMPLING_STRATEGIES.unregister(name)
}

/// Every registered sampling strategy name, sorted.
pub fn registered_sampling_strategies() -> Vec<String> {
    SAMPLING_STRATEGIES.names()
}

/// The sampling strategy registered as `name`.
pub fn sampling_strategy(name: &str) -> Result<SamplingStrategy, StrategyError> {
    SAMPLING_STRATEGIES.get(name)
}

/// Whether this process records spans, by `config.sampling_strategy`: always
/// when it is empty, else as the strategy decides. (A rank that records
/// spans still applies `OTEL_TRACES_SAMPLER` per trace; that composition is
/// the runtime's.)
pub fn records_spans(config: &LensConfig, ctx: &RankContext) -> Result<bool, StrategyError> {
    if config.sampling_strategy.is_empty() {
        return Ok(true);
    }
    let strategy = sampling_strategy(&config.sampling_strategy)?;
    Ok(strategy(config, ctx))
}

/// The original's per-rank hash score in `[0, 1)`:
/// `(int(md5(str(rank).encode()).hexdigest(), 16) % 10000) / 10000`.
///
/// ```
/// // python3 -c "import hashlib; print((int(hashlib.md5(b'0').hexdigest(),16)%10000)/10000)"
/// assert_eq!(lens_core::strategies::rank_score(0), 0.785);
/// ```
pub fn rank_score(rank: u32) -> f64 {
    let digest = Md5::digest(rank.to_string().as_bytes());
    let value = u128::from_be_bytes(digest.into());
    (value % 10_000) as f64 / 10_000.0
}

/// `all_ranks`: every rank exports.
pub fn all_ranks(_config: &LensConfig, _ctx: &RankContext) -> bool {
    true
}

/// `single_rank`: only `export_rank` exports; a negative `export_rank` means
/// the last rank (`world_size - 1`). A rank beyond the job means nobody
/// (which [`should_export`] refuses as an error).
pub fn single_rank(config: &LensConfig, ctx: &RankContext) -> bool {
    let resolved = if config.export_rank >= 0 { config.export_rank } else { i64::from(ctx.world_size) - 1 };
    i64::from(ctx.rank) == resolved
}

/// `sampled`: the ranks whose [`rank_score`] is below `export_sample_rate`.
pub fn sampled(config: &LensConfig, ctx: &RankContext) -> bool {
    rank_score(ctx.rank) < config.export_sample_rate
}

/// `first_rank_per_node`: local rank 0 of each node.
pub fn first_rank_per_node(_config: &LensConfig, ctx: &RankContext) -> bool {
    ctx.local_rank == 0
}

/// `rank_aware`: a rate of 1 or more keeps every rank, 0 or less none,
/// otherwise the ranks whose [`rank_score`] is below `export_sample_rate`.
pub fn rank_aware(config: &LensConfig, ctx: &RankContext) -> bool {
    let rate = config.export_sample_rate;
    if rate >= 1.0 {
        true
    } else if rate <= 0.0 {
        false
    } else {
        rank_score(ctx.rank) < rate
    }
}
