//! Span groups: named switches that decide which spans are recorded.
//!
//! A [`SpanGroup`] is a name and a bit index. A [`SpanGroupCatalog`] lists the
//! groups a framework knows and its named presets; [`LENS_CATALOG`] holds the
//! eight base groups of Lens, and a framework (Megatron) extends it with its
//! own groups and presets. [`SpanGroupCatalog::resolve`] parses a spec such as
//! `"default, step"` into a [`GroupSet`] (a 64-bit mask).
//!
//! The process-wide gate is one `AtomicU64`. [`is_span_group_enabled`] is a
//! relaxed load and a mask test, with no lock and no allocation, so that a
//! disabled span costs about as much as an empty function call. Only setup
//! and shutdown write the gate, and, besides them, an in-flight change from
//! the control file (SPEC A24), applied on the training thread at an
//! iteration boundary (tests write it through `lens_core::testing`, with
//! the `testing` feature).
//!
//! ```
//! use lens_core::groups::{GroupSet, LENS_CATALOG, SpanGroup};
//!
//! let groups = LENS_CATALOG.resolve("default, STEP").unwrap();
//! assert!(groups.contains(SpanGroup::JOB));
//! assert!(groups.contains(SpanGroup::STEP));
//! assert!(!groups.contains(SpanGroup::OPTIMIZER));
//! assert_eq!(LENS_CATALOG.resolve("").unwrap(), GroupSet::EMPTY);
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most groups one catalog can hold: one bit each in a `u64`.
pub const MAX_GROUPS: u8 = 64;

/// A named span group with its bit in the gate mask.
///
/// Groups are compared by bit; the name is for specs, docs and errors.
#[derive(Clone, Copy)]
pub struct SpanGroup {
    name: &'static str,
    bit: u8,
}

impl SpanGroup {
    /// Whole-job structure: startup, the `train` intervals. Rarely anything else.
    pub const JOB: SpanGroup = SpanGroup::new("job", 0);
    /// Checkpoint save and finalisation.
    pub const CHECKPOINT: SpanGroup = SpanGroup::new("checkpoint", 1);
    /// Evaluation runs.
    pub const EVALUATE: SpanGroup = SpanGroup::new("evaluate", 2);
    /// Model construction.
    pub const MODEL_INIT: SpanGroup = SpanGroup::new("model_init", 3);
    /// Checkpoint loading.
    pub const LOAD_CHECKPOINT: SpanGroup = SpanGroup::new("load_checkpoint", 4);
    /// One span per training iteration.
    pub const STEP: SpanGroup = SpanGroup::new("step", 5);
    /// The forward and backward passes of an iteration.
    pub const FORWARD_BACKWARD: SpanGroup = SpanGroup::new("forward_backward", 6);
    /// The optimizer step of an iteration.
    pub const OPTIMIZER: SpanGroup = SpanGroup::new("optimizer", 7);

    /// A group with `name` (lower case, as it is written in specs) and `bit`
    /// (below [`MAX_GROUPS`], unique within a catalog).
    ///
    /// A bit of 64 or more fails at compile time when used in a `const`.
    pub const fn new(name: &'static str, bit: u8) -> SpanGroup {
        assert!(bit < MAX_GROUPS, "a span group bit must be below 64");
        SpanGroup { name, bit }
    }

    /// The group's name, as written in a span-group spec.
    #[inline]
    pub const fn name(self) -> &'static str {
        self.name
    }

    /// The group's bit index in the gate mask.
    #[inline]
    pub const fn bit(self) -> u8 {
        self.bit
    }

    /// The mask with only this group's bit set.
    #[inline(always)]
    pub const fn mask(self) -> u64 {
        1u64 << self.bit
    }
}

impl PartialEq for SpanGroup {
    fn eq(&self, other: &Self) -> bool {
        self.bit == other.bit
    }
}

impl Eq for SpanGroup {}

impl std::hash::Hash for SpanGroup {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bit.hash(state);
    }
}

impl fmt::Debug for SpanGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl fmt::Display for SpanGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A set of span groups, as a bit mask.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GroupSet(u64);

impl GroupSet {
    /// No group.
    pub const EMPTY: GroupSet = GroupSet(0);

    /// The set with exactly these groups.
    pub const fn of(groups: &[SpanGroup]) -> GroupSet {
        let mut bits = 0;
        let mut i = 0;
        while i < groups.len() {
            bits |= groups[i].mask();
            i += 1;
        }
        GroupSet(bits)
    }

    /// The set from a raw mask.
    pub const fn from_bits(bits: u64) -> GroupSet {
        GroupSet(bits)
    }

    /// The raw mask.
    #[inline]
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Whether `group` is in the set.
    #[inline(always)]
    pub const fn contains(self, group: SpanGroup) -> bool {
        self.0 & group.mask() != 0
    }

    /// Whether every group of `other` is in `self`.
    pub const fn is_superset(self, other: GroupSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two sets.
    #[must_use]
    pub const fn union(self, other: GroupSet) -> GroupSet {
        GroupSet(self.0 | other.0)
    }

    /// The intersection of two sets.
    #[must_use]
    pub const fn intersection(self, other: GroupSet) -> GroupSet {
        GroupSet(self.0 & other.0)
    }

    /// The set with `group` added.
    #[must_use]
    pub const fn with(self, group: SpanGroup) -> GroupSet {
        GroupSet(self.0 | group.mask())
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many groups the set holds.
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }
}

impl fmt::Debug for GroupSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupSet({:#x})", self.0)
    }
}

/// A named preset: a spec word that stands for several groups.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    /// The word used in a spec (lower case).
    pub name: &'static str,
    /// The groups it stands for.
    pub groups: GroupSet,
}

impl Preset {
    /// A preset named `name` standing for `groups`.
    pub const fn new(name: &'static str, groups: &[SpanGroup]) -> Preset {
        Preset { name, groups: GroupSet::of(groups) }
    }
}

/// The span groups and presets that one framework knows.
///
/// A catalog is built in a `const` so that a duplicate bit, a duplicate name
/// or a preset naming an unknown bit fails the build rather than a run.
/// A framework extends the Lens catalog by listing [`LENS_GROUPS`] first and
/// its own groups after them; its presets replace the base presets (as in the
/// original, `MegatronSpanGroup._PRESETS is not SpanGroup._PRESETS`).
///
/// ```
/// use lens_core::groups::{LENS_GROUPS, Preset, SpanGroup, SpanGroupCatalog};
///
/// const MICROBATCH: SpanGroup = SpanGroup::new("microbatch", 8);
/// const GROUPS: &[SpanGroup] = &[
///     LENS_GROUPS[0], LENS_GROUPS[1], LENS_GROUPS[2], LENS_GROUPS[3],
///     LENS_GROUPS[4], LENS_GROUPS[5], LENS_GROUPS[6], LENS_GROUPS[7], MICROBATCH,
/// ];
/// const MY_CATALOG: SpanGroupCatalog = SpanGroupCatalog::new(
///     "my-framework",
///     GROUPS,
///     &[Preset::new("default", &[SpanGroup::JOB]), Preset::new("all", GROUPS)],
/// );
/// assert!(MY_CATALOG.resolve("all").unwrap().contains(MICROBATCH));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SpanGroupCatalog {
    name: &'static str,
    groups: &'static [SpanGroup],
    presets: &'static [Preset],
    all: GroupSet,
}

impl SpanGroupCatalog {
    /// A catalog named `name` (used in messages) with these groups and presets.
    ///
    /// Fails at compile time (when used in a `const`) on a duplicate bit or
    /// name, a preset or group name that is not lower case, a preset that
    /// shares a name with a group, or a preset that names a bit outside the
    /// catalog.
    pub const fn new(name: &'static str, groups: &'static [SpanGroup], presets: &'static [Preset]) -> SpanGroupCatalog {
        let all = GroupSet::of(groups);
        assert!(all.len() as usize == groups.len(), "two span groups share a bit");
        let mut i = 0;
        while i < groups.len() {
            assert!(is_lower_word(groups[i].name), "span group names are lower-case words");
            let mut j = i + 1;
            while j < groups.len() {
                assert!(!str_eq(groups[i].name, groups[j].name), "two span groups share a name");
                j += 1;
            }
            let mut p = 0;
            while p < presets.len() {
                assert!(!str_eq(groups[i].name, presets[p].name), "a preset shares a group's name");
                p += 1;
            }
            i += 1;
        }
        let mut p = 0;
        while p < presets.len() {
            assert!(is_lower_word(presets[p].name), "preset names are lower-case words");
            assert!(all.is_superset(presets[p].groups), "a preset names a group outside its catalog");
            let mut q = p + 1;
            while q < presets.len() {
                assert!(!str_eq(presets[p].name, presets[q].name), "two presets share a name");
                q += 1;
            }
            p += 1;
        }
        SpanGroupCatalog { name, groups, presets, all }
    }

    /// The catalog's name, for messages.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Every group of the catalog, in declaration order.
    pub const fn groups(&self) -> &'static [SpanGroup] {
        self.groups
    }

    /// Every preset of the catalog, in declaration order.
    pub const fn presets(&self) -> &'static [Preset] {
        self.presets
    }

    /// The set of every group in the catalog.
    pub const fn all_groups(&self) -> GroupSet {
        self.all
    }

    /// The group named `name` (exact, lower case), if the catalog has it.
    pub fn group(&self, name: &str) -> Option<SpanGroup> {
        self.groups.iter().copied().find(|g| g.name == name)
    }

    /// The preset named `name` (exact, lower case), if the catalog has it.
    pub fn preset(&self, name: &str) -> Option<GroupSet> {
        self.presets.iter().find(|p| p.name == name).map(|p| p.groups)
    }

    /// The groups of `set` in declaration order.
    pub fn names(&self, set: GroupSet) -> Vec<&'static str> {
        self.groups.iter().filter(|g| set.contains(**g)).map(|g| g.name).collect()
    }

    /// Every word a spec accepts (group and preset names), sorted.
    pub fn valid_words(&self) -> Vec<&'static str> {
        let mut words: Vec<&'static str> =
            self.groups.iter().map(|g| g.name).chain(self.presets.iter().map(|p| p.name)).collect();
        words.sort_unstable();
        words.dedup();
        words
    }

    /// Parses a span-group spec into the union of the groups it names.
    ///
    /// The grammar is the original's: comma-separated items, case-insensitive,
    /// surrounding whitespace ignored, empty items skipped (so `""` is the
    /// empty set), presets and group names mixed freely, presets checked
    /// before group names. There is no negation: `-step` is an unknown name.
    pub fn resolve(&self, spec: &str) -> Result<GroupSet, UnknownSpanGroup> {
        let mut set = GroupSet::EMPTY;
        for item in spec.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let word = item.to_lowercase();
            if let Some(groups) = self.preset(&word) {
                set = set.union(groups);
            } else if let Some(group) = self.group(&word) {
                set = set.with(group);
            } else {
                return Err(UnknownSpanGroup::new(word, self.valid_words()));
            }
        }
        Ok(set)
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn is_lower_word(s: &str) -> bool {
    let s = s.as_bytes();
    if s.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_') {
            return false;
        }
        i += 1;
    }
    true
}

/// A span-group spec named a word that is neither a group nor a preset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownSpanGroup {
    /// The unknown word, lower-cased as the parser saw it.
    pub word: String,
    /// Every accepted word, sorted.
    pub valid: Vec<&'static str>,
    /// The closest accepted word, when one is close enough to be a typo.
    pub suggestion: Option<&'static str>,
}

impl UnknownSpanGroup {
    fn new(word: String, valid: Vec<&'static str>) -> UnknownSpanGroup {
        // `-step` is not a misspelling of `step`: there is no negation, and
        // suggesting the group would suggest turning it on.
        let negated = word.starts_with(['-', '!', '~']);
        let suggestion = (!negated).then(|| crate::suggest::closest(&word, valid.iter().copied())).flatten();
        UnknownSpanGroup { word, valid, suggestion }
    }
}

impl fmt::Display for UnknownSpanGroup {
    /// The original's text, `Unknown span group or preset: 'x'. Valid
    /// options: [...]`, plus a suggestion when one is close.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&unknown_group_message(&self.word, &self.valid, self.suggestion))
    }
}

/// The text of an unknown word in a span-group spec (what
/// [`UnknownSpanGroup`] displays), for catalogs held as data too
/// (`lens control` checks against the catalog a job wrote).
pub(crate) fn unknown_group_message(word: &str, valid: &[&str], suggestion: Option<&str>) -> String {
    let quoted: Vec<String> = valid.iter().map(|w| format!("'{w}'")).collect();
    let mut text = format!("Unknown span group or preset: '{word}'. Valid options: [{}]", quoted.join(", "));
    if let Some(suggestion) = suggestion {
        text.push_str(&format!(" (did you mean '{suggestion}'?)"));
    }
    text
}

impl std::error::Error for UnknownSpanGroup {}

/// The eight base groups of Lens, bits 0 to 7. Frameworks list these first.
pub const LENS_GROUPS: [SpanGroup; 8] = [
    SpanGroup::JOB,
    SpanGroup::CHECKPOINT,
    SpanGroup::EVALUATE,
    SpanGroup::MODEL_INIT,
    SpanGroup::LOAD_CHECKPOINT,
    SpanGroup::STEP,
    SpanGroup::FORWARD_BACKWARD,
    SpanGroup::OPTIMIZER,
];

/// The Lens base catalog: the eight groups and the presets `default`
/// (job, checkpoint, evaluate), `per_step` (all eight) and `all`.
pub const LENS_CATALOG: SpanGroupCatalog = SpanGroupCatalog::new(
    "lens",
    &LENS_GROUPS,
    &[
        Preset::new("default", &[SpanGroup::JOB, SpanGroup::CHECKPOINT, SpanGroup::EVALUATE]),
        Preset::new("per_step", &LENS_GROUPS),
        Preset::new("all", &LENS_GROUPS),
    ],
);

/// The process-wide gate: bit `n` set means the group with bit `n` records.
static ENABLED: AtomicU64 = AtomicU64::new(0);

/// Whether spans of `group` are recorded in this process.
///
/// One relaxed atomic load and a mask test: no lock, no allocation. False
/// before setup, on ranks that do not export, and after shutdown.
#[inline(always)]
pub fn is_span_group_enabled(group: SpanGroup) -> bool {
    ENABLED.load(Ordering::Relaxed) & group.mask() != 0
}

/// The groups currently enabled in this process.
#[inline]
pub fn enabled_span_groups() -> GroupSet {
    GroupSet(ENABLED.load(Ordering::Relaxed))
}

/// Replaces the enabled groups. The runtime's setup and shutdown call this,
/// and lens-training's control-file change at an iteration boundary (SPEC
/// A24); for tests, the facade's `testing::set_enabled_span_groups`;
/// instrumented code only reads the gate. Public for the runtime crate,
/// hidden from the docs: it is not part of the API a program calls.
#[doc(hidden)]
#[cold]
pub fn set_enabled_span_groups(groups: GroupSet) {
    let previous = ENABLED.swap(groups.0, Ordering::Relaxed);
    if previous != groups.0 {
        notify_group_watchers();
    }
}

/// Functions called after the enabled groups change, in registration order.
static WATCHERS: std::sync::Mutex<Vec<fn()>> = std::sync::Mutex::new(Vec::new());

/// Registers `watcher` to be called, on the writer's thread, every time
/// the enabled groups change (setup, shutdown,
/// a later lifetime). A function registered twice is called once.
///
/// For bridges that cache decisions made from the gate: `lens-tracing`
/// rebuilds `tracing`'s interest cache here. The hot path never sees this.
#[doc(hidden)]
#[cold]
pub fn watch_enabled_span_groups(watcher: fn()) {
    let mut watchers = WATCHERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !watchers.iter().any(|w| std::ptr::fn_addr_eq(*w, watcher)) {
        watchers.push(watcher);
    }
}

#[cold]
fn notify_group_watchers() {
    // Copied out so that a watcher may read the gate or register another.
    let watchers = WATCHERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    for watcher in watchers {
        watcher();
    }
}
