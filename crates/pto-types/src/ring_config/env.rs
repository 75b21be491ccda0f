//! The environment tier of ring sizing and chip properties (RING_CONFIG.md §4).
//!
//! A chip reads its environment once, at start-up, into an [`EnvSnapshot`]: the three
//! `PTO2_RING_*` variables (§4.2), the chip variables of CHIP_RUNTIME.md §1.1 ([`ChipEnv`]) and
//! `PTO2_RING_STRICT` (§4.3). Every bad value becomes an [`EnvProblem`] whose text names the
//! variable, the raw value, the offending piece, the reason and the fallback; in strict mode the
//! problems fail start-up with an [`EnvError`]. The environment enters only through an explicit
//! [`EnvSource`], and [`EnvSource::process`] is the one place in the workspace that reads the
//! process environment. Nothing here ever changes the process environment.
//!
//! The legal values come from [`Resource::check`], the one rule table of the ring resources.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::sync::Arc;

use super::{RING_COUNT, Resource, RuleViolation};

/// The variable that turns strict mode on (RING_CONFIG.md §4.3).
pub const STRICT_VAR: &str = "PTO2_RING_STRICT";

/// Prefixes of the names checked for typos: any such name that is not known is an
/// [`EnvProblemKind::UnknownVariable`].
pub const RING_VAR_PREFIXES: [&str; 2] = ["PTO2_RING_", "PTO_RING_"];

/// The known names beginning with one of [`RING_VAR_PREFIXES`]; suggestions are drawn from these.
pub const KNOWN_RING_VARS: [&str; 4] = [
    Resource::TaskWindow.env_var(),
    Resource::Heap.env_var(),
    Resource::DepPool.env_var(),
    STRICT_VAR,
];

/// A lookup function of [`EnvSource::from_fn`].
type LookupFn = dyn Fn(&str) -> Option<OsString> + Send + Sync;

/// Where a chip's environment comes from (RING_CONFIG.md §4.1).
///
/// A source is a set of explicit `name = value` pairs, optionally over a lookup function; a pair
/// always wins over the function. Cloning is cheap enough for start-up (the pairs are copied, the
/// function is shared).
#[derive(Clone, Default)]
pub struct EnvSource {
    /// Explicit pairs; they win over `lookup`.
    pairs: BTreeMap<OsString, OsString>,
    /// The function of a [`EnvSource::from_fn`] source, consulted for names not in `pairs`.
    lookup: Option<Arc<LookupFn>>,
}

impl EnvSource {
    /// A copy of the process environment, taken now.
    ///
    /// Later changes to the process environment do not reach this source. This is the only
    /// function of the workspace that reads the process environment.
    // The one safe door of clippy.toml's ban on `std::env::var*`: everything else reads the
    // environment through an `EnvSource`, so tests can supply theirs without touching the process.
    #[allow(clippy::disallowed_methods)]
    pub fn process() -> EnvSource {
        EnvSource {
            pairs: std::env::vars_os().collect(),
            lookup: None,
        }
    }

    /// A source with no variables at all.
    pub fn empty() -> EnvSource {
        EnvSource::default()
    }

    /// A source holding exactly `pairs`; when a name repeats, the later pair wins.
    ///
    /// Names and values are `OsString`s, so values that are not valid Unicode can be expressed.
    pub fn from_pairs(
        pairs: impl IntoIterator<Item = (impl Into<OsString>, impl Into<OsString>)>,
    ) -> EnvSource {
        EnvSource::empty().overlay(pairs)
    }

    /// A source that asks `f` for each variable it needs.
    ///
    /// `f` is called at most once per variable and snapshot ([`EnvSnapshot::take`]). Such a source
    /// cannot list its names, so it skips [`EnvProblemKind::UnknownVariable`] detection (for the
    /// names of pairs laid over it with [`EnvSource::overlay`], detection still runs).
    pub fn from_fn(f: impl Fn(&str) -> Option<OsString> + Send + Sync + 'static) -> EnvSource {
        EnvSource {
            pairs: BTreeMap::new(),
            lookup: Some(Arc::new(f)),
        }
    }

    /// This source overlaid with `pairs`: a name set by `pairs` takes its value from there (the
    /// later pair wins when a name repeats), every other name keeps this source's value.
    ///
    /// This is how a `Worker` combines the process environment with its `ring_env` pairs.
    pub fn overlay(
        mut self,
        pairs: impl IntoIterator<Item = (impl Into<OsString>, impl Into<OsString>)>,
    ) -> EnvSource {
        for (name, value) in pairs {
            self.pairs.insert(name.into(), value.into());
        }
        self
    }

    /// The value of variable `name`, if it is set.
    pub fn get(&self, name: &str) -> Option<OsString> {
        if let Some(value) = self.pairs.get(OsStr::new(name)) {
            return Some(value.clone());
        }
        match &self.lookup {
            Some(lookup) => lookup(name),
            None => None,
        }
    }

    /// The names this source can list with their values (the explicit pairs), in name order.
    fn listed(&self) -> impl Iterator<Item = (&OsString, &OsString)> {
        self.pairs.iter()
    }
}

impl fmt::Debug for EnvSource {
    /// Shows the values of the variables whose names start with `PTO` and only counts the rest,
    /// so that printing a copy of the process environment does not spill unrelated values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pto: BTreeMap<String, String> = self
            .pairs
            .iter()
            .filter(|(name, _)| name.as_encoded_bytes().starts_with(b"PTO"))
            .map(|(name, value)| {
                (
                    name.to_string_lossy().into_owned(),
                    value.to_string_lossy().into_owned(),
                )
            })
            .collect();
        f.debug_struct("EnvSource")
            .field("pto_vars", &pto)
            .field("other_vars", &(self.pairs.len() - pto.len()))
            .field("from_fn", &self.lookup.is_some())
            .finish()
    }
}

/// One chip variable of CHIP_RUNTIME.md §1.1, read into [`ChipEnv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChipVar {
    /// `PTO_TENSORMAP_POOL`: TensorMap entries.
    TensormapPool,
    /// `PTO_SCHEDULER_TIMEOUT_MS`: the no-progress watchdog, in milliseconds.
    SchedulerTimeoutMs,
    /// `PTO_TENSOR_DATA_TIMEOUT_MS`: the `get/set_tensor_data` wait limit, in milliseconds.
    TensorDataTimeoutMs,
    /// `PTO_SPIN_US`: the spin budget before a waiting thread parks, in microseconds.
    SpinUs,
}

impl ChipVar {
    /// The four chip variables, in the order they are read and reported.
    pub const ALL: [ChipVar; 4] = [
        ChipVar::TensormapPool,
        ChipVar::SchedulerTimeoutMs,
        ChipVar::TensorDataTimeoutMs,
        ChipVar::SpinUs,
    ];

    /// The environment variable, e.g. `PTO_SPIN_US`.
    pub const fn env_var(self) -> &'static str {
        match self {
            ChipVar::TensormapPool => "PTO_TENSORMAP_POOL",
            ChipVar::SchedulerTimeoutMs => "PTO_SCHEDULER_TIMEOUT_MS",
            ChipVar::TensorDataTimeoutMs => "PTO_TENSOR_DATA_TIMEOUT_MS",
            ChipVar::SpinUs => "PTO_SPIN_US",
        }
    }

    /// The `ChipSpec` field the variable sets when the spec leaves it `None`.
    pub const fn spec_field(self) -> &'static str {
        match self {
            ChipVar::TensormapPool => "tensormap_pool",
            ChipVar::SchedulerTimeoutMs => "scheduler_timeout",
            ChipVar::TensorDataTimeoutMs => "tensor_wait_timeout",
            ChipVar::SpinUs => "spin",
        }
    }

    /// Smallest legal value; the largest is `u64::MAX`.
    pub const MIN: u64 = 1;

    /// Checks a value against the chip-variable rule (at least [`ChipVar::MIN`]).
    const fn check(value: u64) -> Result<(), RuleViolation> {
        if value < ChipVar::MIN {
            return Err(RuleViolation::OutOfRange {
                min: ChipVar::MIN,
                max: u64::MAX,
            });
        }
        Ok(())
    }
}

/// The chip variables of a snapshot; `None` = absent or ignored because of a problem.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChipEnv {
    /// `PTO_TENSORMAP_POOL`.
    pub tensormap_pool: Option<u64>,
    /// `PTO_SCHEDULER_TIMEOUT_MS`.
    pub scheduler_timeout_ms: Option<u64>,
    /// `PTO_TENSOR_DATA_TIMEOUT_MS`.
    pub tensor_data_timeout_ms: Option<u64>,
    /// `PTO_SPIN_US`.
    pub spin_us: Option<u64>,
}

impl ChipEnv {
    /// The value of one chip variable.
    pub fn get(&self, var: ChipVar) -> Option<u64> {
        match var {
            ChipVar::TensormapPool => self.tensormap_pool,
            ChipVar::SchedulerTimeoutMs => self.scheduler_timeout_ms,
            ChipVar::TensorDataTimeoutMs => self.tensor_data_timeout_ms,
            ChipVar::SpinUs => self.spin_us,
        }
    }

    fn slot(&mut self, var: ChipVar) -> &mut Option<u64> {
        match var {
            ChipVar::TensormapPool => &mut self.tensormap_pool,
            ChipVar::SchedulerTimeoutMs => &mut self.scheduler_timeout_ms,
            ChipVar::TensorDataTimeoutMs => &mut self.tensor_data_timeout_ms,
            ChipVar::SpinUs => &mut self.spin_us,
        }
    }
}

/// What is wrong with one environment variable (RING_CONFIG.md §4.2 and §4.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvProblemKind {
    /// The value is not valid Unicode.
    NotUnicode,
    /// The value is empty after trimming ASCII whitespace.
    Empty,
    /// More than one piece and the last one is empty (`64,`).
    TrailingComma,
    /// The number of pieces is not 1 or 4 (chip variables: not 1).
    WrongCount { found: usize },
    /// A piece is empty (`128,,32,16`).
    EmptyToken,
    /// A piece starts with `-`.
    Negative,
    /// A piece has a character other than `0`–`9` (`+64`, `0x40`, `64k`, `1 024`, `6_4`).
    NotDecimal,
    /// A piece does not fit in `u64`.
    TooLarge,
    /// A piece is outside `[min, max]` (zero always is).
    OutOfRange { min: u64, max: u64 },
    /// A task-window piece is not a power of two.
    NotPowerOfTwo,
    /// A heap piece is not a multiple of 64.
    NotMultipleOf64,
    /// A name beginning with `PTO2_RING_` or `PTO_RING_` that nothing reads (a typo, probably).
    UnknownVariable { suggestion: &'static str },
    /// `PTO2_RING_STRICT` is not `1`, `true`, `0`, `false` (case-insensitive) or empty.
    InvalidFlag,
}

impl From<RuleViolation> for EnvProblemKind {
    fn from(violation: RuleViolation) -> EnvProblemKind {
        match violation {
            RuleViolation::OutOfRange { min, max } => EnvProblemKind::OutOfRange { min, max },
            RuleViolation::NotPowerOfTwo => EnvProblemKind::NotPowerOfTwo,
            RuleViolation::NotMultipleOf64 => EnvProblemKind::NotMultipleOf64,
        }
    }
}

/// The offending piece of a comma-separated value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvPiece {
    /// 1-based position of the piece.
    pub position: usize,
    /// Number of pieces in the value.
    pub count: usize,
    /// The piece, trimmed.
    pub text: String,
}

/// One problem with the environment: which variable, its raw value, what is wrong and where.
///
/// The variable is ignored as a whole (RING_CONFIG.md §4.2, all or nothing). `Display` gives the
/// message of §4.3, which names the variable, the raw value, the piece and its position, the
/// reason and the fallback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvProblem {
    /// The variable name.
    pub variable: String,
    /// The raw value, untrimmed (lossily converted when it is not valid Unicode).
    pub raw: String,
    /// What is wrong.
    pub kind: EnvProblemKind,
    /// The offending piece, for the per-piece kinds (`EmptyToken` to `NotMultipleOf64`).
    pub piece: Option<EnvPiece>,
}

impl EnvProblem {
    /// The ring resource the variable sets, if it is one of the three `PTO2_RING_*` variables.
    pub fn resource(&self) -> Option<Resource> {
        Resource::ALL
            .into_iter()
            .find(|resource| resource.env_var() == self.variable)
    }

    /// The chip variable, if it is one of [`ChipVar::ALL`].
    pub fn chip_var(&self) -> Option<ChipVar> {
        ChipVar::ALL
            .into_iter()
            .find(|var| var.env_var() == self.variable)
    }

    /// The reason in words, without variable, value or fallback.
    fn write_reason(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let piece_text = self.piece.as_ref().map_or("", |piece| piece.text.as_str());
        if let Some(piece) = &self.piece {
            write!(
                f,
                "value {} of {} ({:?}) ",
                piece.position, piece.count, piece.text
            )?;
        }
        match &self.kind {
            EnvProblemKind::NotUnicode => f.write_str("the value is not valid Unicode"),
            EnvProblemKind::Empty => f.write_str("the value is empty"),
            EnvProblemKind::TrailingComma => f.write_str("the value has a trailing comma"),
            EnvProblemKind::WrongCount { found } => {
                if self.chip_var().is_some() {
                    write!(f, "the value has {found} values; give exactly 1")
                } else {
                    write!(
                        f,
                        "the value has {found} values; give 1 (every ring) or 4 (one per ring)"
                    )
                }
            }
            EnvProblemKind::EmptyToken => f.write_str("is empty"),
            EnvProblemKind::Negative => f.write_str("is negative"),
            EnvProblemKind::NotDecimal => f.write_str("is not a non-negative decimal integer"),
            EnvProblemKind::TooLarge => {
                write!(f, "does not fit in 64 bits (largest {})", u64::MAX)
            }
            EnvProblemKind::OutOfRange { min, max } => match piece_text.parse::<u64>() {
                Ok(0) => write!(
                    f,
                    "is below the minimum {min} (0 does not mean unset in the environment)"
                ),
                Ok(value) if value < *min => write!(f, "is below the minimum {min}"),
                Ok(value) if value > *max => {
                    write!(f, "is above the maximum {max}")?;
                    // The task window's largest legal value is below its range maximum.
                    match self.resource().map(|r| r.legal_at_least(u64::MAX)) {
                        Some(largest) if largest < *max => {
                            write!(f, " (largest valid: {largest})")
                        }
                        _ => Ok(()),
                    }
                }
                _ => write!(f, "is outside {min}..={max}"),
            },
            EnvProblemKind::NotPowerOfTwo => {
                f.write_str("is not a power of two")?;
                write_nearest(f, Resource::TaskWindow, piece_text, |value| {
                    value.checked_next_power_of_two().map_or(1 << 63, |p| p / 2)
                })
            }
            EnvProblemKind::NotMultipleOf64 => {
                f.write_str("is not a multiple of 64")?;
                write_nearest(f, Resource::Heap, piece_text, |value| value - value % 64)
            }
            EnvProblemKind::UnknownVariable { suggestion } => write!(
                f,
                "{} is not a known variable (did you mean {suggestion}?)",
                self.variable
            ),
            EnvProblemKind::InvalidFlag => {
                f.write_str("the value is not 1, true, 0, false (case-insensitive) or empty")
            }
        }
    }

    /// What happens instead, e.g. `ring_heap uses the default 268435456 on every ring …`.
    fn write_fallback(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let EnvProblemKind::UnknownVariable { .. } = self.kind {
            return f.write_str("nothing reads it");
        }
        if let Some(resource) = self.resource() {
            return write!(
                f,
                "{} uses the default {} on every ring the CallConfig leaves unset",
                resource.field(),
                resource.default_value()
            );
        }
        if let Some(var) = self.chip_var() {
            return write!(
                f,
                "{} keeps its ChipSpec value (the default unless set explicitly)",
                var.spec_field()
            );
        }
        if self.variable == STRICT_VAR {
            return f.write_str("strict mode stays off unless enabled another way");
        }
        f.write_str("nothing reads it")
    }
}

/// Writes ` (nearest valid: lo, hi)` for a piece that breaks a divisibility rule of `resource`;
/// `below` gives the largest candidate not above the value, checked against the rule table.
fn write_nearest(
    f: &mut fmt::Formatter<'_>,
    resource: Resource,
    piece_text: &str,
    below: impl Fn(u64) -> u64,
) -> fmt::Result {
    let Ok(value) = piece_text.parse::<u64>() else {
        return Ok(());
    };
    let lower = below(value);
    let upper = resource.legal_at_least(value);
    let lower_ok = resource.check(lower).is_ok();
    let upper_ok = upper > value && resource.check(upper).is_ok();
    match (lower_ok, upper_ok) {
        (true, true) => write!(f, " (nearest valid: {lower}, {upper})"),
        (true, false) => write!(f, " (nearest valid: {lower})"),
        (false, true) => write!(f, " (nearest valid: {upper})"),
        (false, false) => Ok(()),
    }
}

impl fmt::Display for EnvProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?} ignored: ", self.variable, self.raw)?;
        self.write_reason(f)?;
        f.write_str("; ")?;
        self.write_fallback(f)
    }
}

/// Start-up failure in strict mode: the environment has at least one problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvError {
    /// Every problem found, in the order of [`EnvSnapshot::problems`].
    pub problems: Vec<EnvProblem>,
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "strict environment mode: {n} problem{} in the chip environment",
            if n == 1 { "" } else { "s" }
        )?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for EnvError {}

/// Per-resource values and chip variables taken from a chip's environment at start-up
/// (RING_CONFIG.md §4.1).
///
/// `Default` is the empty environment: every tier absent, no problems, strict off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvSnapshot {
    /// `PTO2_RING_TASK_WINDOW`, per ring; `None` = absent or ignored.
    pub task_window: Option<[u64; RING_COUNT]>,
    /// `PTO2_RING_HEAP`, per ring; `None` = absent or ignored.
    pub heap: Option<[u64; RING_COUNT]>,
    /// `PTO2_RING_DEP_POOL`, per ring; `None` = absent or ignored.
    pub dep_pool: Option<[u64; RING_COUNT]>,
    /// The chip variables of CHIP_RUNTIME.md §1.1.
    pub chip: ChipEnv,
    /// Every problem found, to be logged once and shown in run reports: ring variables in
    /// [`Resource::ALL`] order, then `PTO2_RING_STRICT`, then chip variables in [`ChipVar::ALL`]
    /// order, then unknown variables by name.
    pub problems: Vec<EnvProblem>,
    /// Strict mode: requested by the caller or by `PTO2_RING_STRICT`.
    pub strict: bool,
}

impl EnvSnapshot {
    /// The empty environment (same as `Default`).
    pub fn empty() -> EnvSnapshot {
        EnvSnapshot::default()
    }

    /// Reads every variable of `source` once.
    ///
    /// `strict` is strict mode as requested by the caller (`ChipSpec.strict_env`, the `Worker`
    /// option or `--strict-env`); `PTO2_RING_STRICT` can also turn it on. In strict mode any
    /// problem fails with an [`EnvError`] listing all of them; otherwise the problems are kept
    /// in the snapshot for the caller to log.
    pub fn take(source: &EnvSource, strict: bool) -> Result<EnvSnapshot, EnvError> {
        let mut snapshot = EnvSnapshot::empty();
        for resource in Resource::ALL {
            let name = resource.env_var();
            let Some(raw) = source.get(name) else {
                continue;
            };
            match parse_ring_var(&raw, resource) {
                Ok(values) => *snapshot.ring_slot(resource) = Some(values),
                Err(problem) => snapshot.problems.push(problem.into_problem(name, &raw)),
            }
        }
        let mut strict_from_env = false;
        if let Some(raw) = source.get(STRICT_VAR) {
            match parse_flag(&raw) {
                Ok(on) => strict_from_env = on,
                Err(problem) => snapshot
                    .problems
                    .push(problem.into_problem(STRICT_VAR, &raw)),
            }
        }
        for var in ChipVar::ALL {
            let name = var.env_var();
            let Some(raw) = source.get(name) else {
                continue;
            };
            match parse_pieces(&raw, Arity::One, ChipVar::check) {
                Ok(values) => *snapshot.chip.slot(var) = Some(values[0]),
                Err(problem) => snapshot.problems.push(problem.into_problem(name, &raw)),
            }
        }
        for (name, raw) in source.listed() {
            let Some(suggestion) = unknown_ring_var(name) else {
                continue;
            };
            let problem = Parse::whole(EnvProblemKind::UnknownVariable { suggestion });
            let name = name.to_string_lossy();
            snapshot.problems.push(problem.into_problem(&name, raw));
        }
        snapshot.strict = strict || strict_from_env;
        if snapshot.strict && !snapshot.problems.is_empty() {
            return Err(EnvError {
                problems: snapshot.problems,
            });
        }
        Ok(snapshot)
    }

    /// The environment tier for one resource, if the variable was set and valid.
    pub fn ring_values(&self, resource: Resource) -> Option<[u64; RING_COUNT]> {
        match resource {
            Resource::TaskWindow => self.task_window,
            Resource::Heap => self.heap,
            Resource::DepPool => self.dep_pool,
        }
    }

    fn ring_slot(&mut self, resource: Resource) -> &mut Option<[u64; RING_COUNT]> {
        match resource {
            Resource::TaskWindow => &mut self.task_window,
            Resource::Heap => &mut self.heap,
            Resource::DepPool => &mut self.dep_pool,
        }
    }
}

/// A parse failure before the variable name and raw value are attached.
#[derive(Debug)]
struct Parse {
    kind: EnvProblemKind,
    piece: Option<EnvPiece>,
}

impl Parse {
    fn whole(kind: EnvProblemKind) -> Parse {
        Parse { kind, piece: None }
    }

    fn into_problem(self, variable: &str, raw: &OsStr) -> EnvProblem {
        EnvProblem {
            variable: variable.to_owned(),
            raw: raw.to_string_lossy().into_owned(),
            kind: self.kind,
            piece: self.piece,
        }
    }
}

/// How many pieces a variable may have.
#[derive(Clone, Copy, Debug)]
enum Arity {
    /// One value for every ring, or one per ring.
    OneOrFour,
    /// Exactly one value.
    One,
}

/// Rules 1–6 of RING_CONFIG.md §4.2 for one ring variable that is present.
fn parse_ring_var(raw: &OsStr, resource: Resource) -> Result<[u64; RING_COUNT], Parse> {
    let values = parse_pieces(raw, Arity::OneOrFour, |value| resource.check(value))?;
    match values.as_slice() {
        [one] => Ok([*one; RING_COUNT]),
        _ => Ok(std::array::from_fn(|ring| values[ring])),
    }
}

/// Rules 2–5 of RING_CONFIG.md §4.2: the checked pieces, or the first problem.
fn parse_pieces(
    raw: &OsStr,
    arity: Arity,
    rule: impl Fn(u64) -> Result<(), RuleViolation>,
) -> Result<Vec<u64>, Parse> {
    let Some(text) = raw.to_str() else {
        return Err(Parse::whole(EnvProblemKind::NotUnicode));
    };
    let text = text.trim_ascii();
    if text.is_empty() {
        return Err(Parse::whole(EnvProblemKind::Empty));
    }
    let pieces: Vec<&str> = text.split(',').map(str::trim_ascii).collect();
    let count = pieces.len();
    if count > 1 && pieces[count - 1].is_empty() {
        return Err(Parse::whole(EnvProblemKind::TrailingComma));
    }
    let count_ok = match arity {
        Arity::OneOrFour => count == 1 || count == RING_COUNT,
        Arity::One => count == 1,
    };
    if !count_ok {
        return Err(Parse::whole(EnvProblemKind::WrongCount { found: count }));
    }
    let mut values = Vec::with_capacity(count);
    for (index, piece) in pieces.iter().enumerate() {
        let fail = |kind: EnvProblemKind| Parse {
            kind,
            piece: Some(EnvPiece {
                position: index + 1,
                count,
                text: (*piece).to_owned(),
            }),
        };
        let value = parse_piece(piece, &rule).map_err(fail)?;
        values.push(value);
    }
    Ok(values)
}

/// Rule 5 of RING_CONFIG.md §4.2 for one trimmed piece.
fn parse_piece(
    piece: &str,
    rule: impl Fn(u64) -> Result<(), RuleViolation>,
) -> Result<u64, EnvProblemKind> {
    if piece.is_empty() {
        return Err(EnvProblemKind::EmptyToken);
    }
    if piece.starts_with('-') {
        return Err(EnvProblemKind::Negative);
    }
    if !piece.bytes().all(|b| b.is_ascii_digit()) {
        return Err(EnvProblemKind::NotDecimal);
    }
    // Only digits are left, so the one possible failure is overflow.
    let Ok(value) = piece.parse::<u64>() else {
        return Err(EnvProblemKind::TooLarge);
    };
    rule(value)?;
    Ok(value)
}

/// `PTO2_RING_STRICT`: `1`/`true` on, `0`/`false`/empty off (case-insensitive, ASCII whitespace
/// trimmed like every other variable).
fn parse_flag(raw: &OsStr) -> Result<bool, Parse> {
    let Some(text) = raw.to_str() else {
        return Err(Parse::whole(EnvProblemKind::NotUnicode));
    };
    let text = text.trim_ascii();
    if text == "1" || text.eq_ignore_ascii_case("true") {
        return Ok(true);
    }
    if text.is_empty() || text == "0" || text.eq_ignore_ascii_case("false") {
        return Ok(false);
    }
    Err(Parse::whole(EnvProblemKind::InvalidFlag))
}

/// For a name with a ring prefix that nothing reads, the nearest known name.
fn unknown_ring_var(name: &OsStr) -> Option<&'static str> {
    let bytes = name.as_encoded_bytes();
    let has_prefix = RING_VAR_PREFIXES
        .iter()
        .any(|prefix| bytes.starts_with(prefix.as_bytes()));
    if !has_prefix
        || KNOWN_RING_VARS
            .iter()
            .any(|known| known.as_bytes() == bytes)
    {
        return None;
    }
    KNOWN_RING_VARS
        .into_iter()
        .min_by_key(|known| crate::suggest::edit_distance(bytes, known.as_bytes()))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::os::unix::ffi::OsStringExt;
    use std::sync::Mutex;

    use super::*;

    const W: &str = "PTO2_RING_TASK_WINDOW";
    const H: &str = "PTO2_RING_HEAP";
    const D: &str = "PTO2_RING_DEP_POOL";

    fn snap(pairs: &[(&str, &str)]) -> EnvSnapshot {
        EnvSnapshot::take(&EnvSource::from_pairs(pairs.iter().copied()), false).unwrap()
    }

    /// The snapshot of one variable, which must have exactly one problem; returns it.
    fn only_problem(name: &str, value: &str) -> EnvProblem {
        let snapshot = snap(&[(name, value)]);
        assert_eq!(snapshot.ring_values(Resource::TaskWindow), None);
        assert_eq!(snapshot.ring_values(Resource::Heap), None);
        assert_eq!(snapshot.ring_values(Resource::DepPool), None);
        assert_eq!(snapshot.chip, ChipEnv::default());
        assert_eq!(snapshot.problems.len(), 1, "{name}={value:?}");
        snapshot.problems.into_iter().next().unwrap()
    }

    fn kind_of(name: &str, value: &str) -> EnvProblemKind {
        only_problem(name, value).kind
    }

    #[test]
    fn t19_absent_variable() {
        let snapshot = snap(&[]);
        assert_eq!(snapshot.task_window, None);
        assert!(snapshot.problems.is_empty());
        assert_eq!(snapshot, EnvSnapshot::empty());
        assert_eq!(snapshot, EnvSnapshot::default());
    }

    #[test]
    fn t20_one_value_broadcasts() {
        for value in ["64", "  64\t", "0064"] {
            assert_eq!(snap(&[(W, value)]).task_window, Some([64; 4]), "{value:?}");
            assert!(snap(&[(W, value)]).problems.is_empty());
        }
    }

    #[test]
    fn t21_four_values_one_per_ring() {
        for value in ["128,64,32,16", " 128 , 64 ,32,16 "] {
            let snapshot = snap(&[(W, value)]);
            assert_eq!(snapshot.task_window, Some([128, 64, 32, 16]), "{value:?}");
            assert!(snapshot.problems.is_empty());
        }
    }

    #[test]
    fn t22_heap_has_no_power_of_two_rule() {
        assert_eq!(snap(&[(H, "2621440")]).heap, Some([2621440; 4]));
    }

    #[test]
    fn t23_dep_pool() {
        assert_eq!(snap(&[(D, "100")]).dep_pool, Some([100; 4]));
    }

    #[test]
    fn t24_empty_value() {
        for value in ["", "   "] {
            let problem = only_problem(W, value);
            assert_eq!(problem.kind, EnvProblemKind::Empty);
            assert_eq!(problem.piece, None);
            assert_eq!(problem.raw, value);
        }
    }

    #[test]
    fn t25_negative() {
        let problem = only_problem(W, "-1");
        assert_eq!(problem.kind, EnvProblemKind::Negative);
        assert_eq!(problem.piece.unwrap().position, 1);
    }

    #[test]
    fn t26_not_decimal() {
        for value in ["+64", "0x40", "64k", "1 024", "6_4"] {
            assert_eq!(kind_of(W, value), EnvProblemKind::NotDecimal, "{value:?}");
        }
    }

    #[test]
    fn t27_zero_is_out_of_range() {
        let problem = only_problem(W, "0");
        assert_eq!(
            problem.kind,
            EnvProblemKind::OutOfRange {
                min: 4,
                max: 2147483647
            }
        );
        assert!(
            problem.to_string().contains("below the minimum 4"),
            "{problem}"
        );
    }

    #[test]
    fn t28_too_large() {
        assert_eq!(kind_of(H, "18446744073709551616"), EnvProblemKind::TooLarge);
        // Leading zeros do not count towards the size.
        assert_eq!(
            snap(&[(H, "000000000000000000000001024")]).heap,
            Some([1024; 4])
        );
    }

    #[test]
    fn t29_resource_rules() {
        assert_eq!(kind_of(W, "48"), EnvProblemKind::NotPowerOfTwo);
        assert_eq!(
            kind_of(H, "1000"),
            EnvProblemKind::OutOfRange {
                min: 1024,
                max: u64::MAX
            }
        );
        assert_eq!(kind_of(H, "1030"), EnvProblemKind::NotMultipleOf64);
        assert_eq!(
            kind_of(D, "2147483648"),
            EnvProblemKind::OutOfRange {
                min: 4,
                max: 2147483647
            }
        );
        let window = only_problem(W, "48").to_string();
        assert!(
            window.contains("not a power of two (nearest valid: 32, 64)"),
            "{window}"
        );
        let heap = only_problem(H, "1030").to_string();
        assert!(
            heap.contains("not a multiple of 64 (nearest valid: 1024, 1088)"),
            "{heap}"
        );
        let dep = only_problem(D, "2147483648").to_string();
        assert!(dep.contains("above the maximum 2147483647;"), "{dep}");
        let window = only_problem(W, "2147483648").to_string();
        assert!(
            window.contains("above the maximum 2147483647 (largest valid: 1073741824)"),
            "{window}"
        );
    }

    #[test]
    fn t30_three_values() {
        let problem = only_problem(W, "128,64,32");
        assert_eq!(problem.kind, EnvProblemKind::WrongCount { found: 3 });
        assert!(
            problem.to_string().contains("has 3 values; give 1"),
            "{problem}"
        );
    }

    #[test]
    fn t31_trailing_comma() {
        assert_eq!(kind_of(W, "128,64,32,16,"), EnvProblemKind::TrailingComma);
        assert_eq!(kind_of(W, "64,"), EnvProblemKind::TrailingComma);
        assert_eq!(
            kind_of(W, "128,64,32,16, \t"),
            EnvProblemKind::TrailingComma
        );
    }

    #[test]
    fn t32_five_values() {
        assert_eq!(
            kind_of(W, "128,64,32,16,8"),
            EnvProblemKind::WrongCount { found: 5 }
        );
    }

    #[test]
    fn t33_empty_token() {
        let problem = only_problem(W, "128,,32,16");
        assert_eq!(problem.kind, EnvProblemKind::EmptyToken);
        let piece = problem.piece.unwrap();
        assert_eq!((piece.position, piece.count), (2, 4));
        assert_eq!(kind_of(W, "128, ,32,16"), EnvProblemKind::EmptyToken);
    }

    #[test]
    fn t34_all_or_nothing() {
        let problem = only_problem(W, "128,64,0,16");
        assert!(matches!(problem.kind, EnvProblemKind::OutOfRange { .. }));
        let piece = problem.piece.unwrap();
        assert_eq!((piece.position, piece.text.as_str()), (3, "0"));
        // The first bad piece ends the parse.
        let problem = only_problem(W, "128,48,abc,16");
        assert_eq!(problem.kind, EnvProblemKind::NotPowerOfTwo);
        assert_eq!(problem.piece.unwrap().position, 2);
    }

    #[test]
    fn t35_message_names_everything() {
        let text = only_problem(W, "128,64,abc,16").to_string();
        for needle in [W, "\"abc\"", "value 3 of 4", "16384"] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
        assert_eq!(
            text,
            "PTO2_RING_TASK_WINDOW=\"128,64,abc,16\" ignored: value 3 of 4 (\"abc\") is not a \
             non-negative decimal integer; ring_task_window uses the default 16384 on every ring \
             the CallConfig leaves unset"
        );
    }

    #[test]
    fn t36_variables_are_independent() {
        let snapshot = snap(&[(W, "-1"), (H, "4194304")]);
        assert_eq!(snapshot.task_window, None);
        assert_eq!(snapshot.heap, Some([4194304; 4]));
        assert_eq!(snapshot.dep_pool, None);
        assert_eq!(snapshot.problems.len(), 1);
        assert_eq!(snapshot.problems[0].variable, W);
    }

    #[test]
    fn t37_unknown_variable() {
        let snapshot = snap(&[("PTO2_RING_HEEP", "1024"), (H, "2048")]);
        assert_eq!(snapshot.heap, Some([2048; 4]));
        assert_eq!(snapshot.task_window, None);
        assert_eq!(snapshot.problems.len(), 1);
        let problem = &snapshot.problems[0];
        assert_eq!(problem.variable, "PTO2_RING_HEEP");
        assert_eq!(
            problem.kind,
            EnvProblemKind::UnknownVariable {
                suggestion: "PTO2_RING_HEAP"
            }
        );
        let text = problem.to_string();
        assert!(text.contains("PTO2_RING_HEEP") && text.contains("did you mean PTO2_RING_HEAP?"));
    }

    #[test]
    fn t38_strict_turns_problems_into_errors() {
        let relaxed = snap(&[(W, "-1")]);
        assert!(!relaxed.strict);
        assert_eq!(relaxed.problems.len(), 1);

        let source = EnvSource::from_pairs([(W, "-1"), (STRICT_VAR, "1")]);
        let error = EnvSnapshot::take(&source, false).unwrap_err();
        assert_eq!(error.problems.len(), 1);
        assert_eq!(error.problems[0].kind, EnvProblemKind::Negative);

        // Strict requested by the caller works the same.
        let source = EnvSource::from_pairs([(W, "-1")]);
        assert!(EnvSnapshot::take(&source, true).is_err());

        // Strict without problems succeeds and records strict mode.
        let source = EnvSource::from_pairs([(W, "64"), (STRICT_VAR, "1")]);
        let strict = EnvSnapshot::take(&source, false).unwrap();
        assert!(strict.strict);
        assert_eq!(strict.task_window, Some([64; 4]));
    }

    #[test]
    fn t39_strict_error_lists_every_problem() {
        let source = EnvSource::from_pairs([(W, "-1"), ("PTO2_RING_HEEP", "1")]);
        let error = EnvSnapshot::take(&source, true).unwrap_err();
        assert_eq!(error.problems.len(), 2);
        let text = error.to_string();
        assert!(text.contains("2 problems"), "{text}");
        assert!(
            text.contains("PTO2_RING_TASK_WINDOW=\"-1\" ignored"),
            "{text}"
        );
        assert!(text.contains("PTO2_RING_HEEP=\"1\" ignored"), "{text}");
        for problem in &error.problems {
            assert!(text.contains(&problem.to_string()));
        }
    }

    #[test]
    fn t87_from_fn_snapshot_is_taken_once() {
        let map: Arc<Mutex<HashMap<String, OsString>>> = Arc::default();
        map.lock().unwrap().insert(W.to_owned(), "64".into());
        let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let source = {
            let map = Arc::clone(&map);
            let calls = Arc::clone(&calls);
            EnvSource::from_fn(move |name| {
                *calls.lock().unwrap().entry(name.to_owned()).or_default() += 1;
                map.lock().unwrap().get(name).cloned()
            })
        };
        let snapshot = EnvSnapshot::take(&source, false).unwrap();
        map.lock().unwrap().insert(W.to_owned(), "128".into());
        assert_eq!(snapshot.task_window, Some([64; 4]));
        // Each variable was read exactly once.
        assert!(calls.lock().unwrap().values().all(|&n| n == 1));
        assert_eq!(calls.lock().unwrap().get(W), Some(&1));
        // A new snapshot sees the change; the old one never does.
        assert_eq!(
            EnvSnapshot::take(&source, false).unwrap().task_window,
            Some([128; 4])
        );
        assert_eq!(snapshot.task_window, Some([64; 4]));
    }

    #[test]
    fn not_unicode_value() {
        let source = EnvSource::from_pairs([(OsString::from(H), OsString::from_vec(vec![0xff]))]);
        let snapshot = EnvSnapshot::take(&source, false).unwrap();
        assert_eq!(snapshot.heap, None);
        let problem = &snapshot.problems[0];
        assert_eq!(problem.kind, EnvProblemKind::NotUnicode);
        assert_eq!(problem.raw, "\u{fffd}");
        assert!(problem.to_string().contains("not valid Unicode"));
    }

    #[test]
    fn chip_variables() {
        let snapshot = snap(&[
            ("PTO_TENSORMAP_POOL", "1024"),
            ("PTO_SCHEDULER_TIMEOUT_MS", " 2000 "),
            ("PTO_TENSOR_DATA_TIMEOUT_MS", "18446744073709551615"),
            ("PTO_SPIN_US", "1"),
        ]);
        assert!(snapshot.problems.is_empty());
        assert_eq!(
            snapshot.chip,
            ChipEnv {
                tensormap_pool: Some(1024),
                scheduler_timeout_ms: Some(2000),
                tensor_data_timeout_ms: Some(u64::MAX),
                spin_us: Some(1),
            }
        );
        assert_eq!(snapshot.chip.get(ChipVar::SpinUs), Some(1));
        // Chip variables never set ring tiers.
        assert_eq!(snapshot.task_window, None);
    }

    #[test]
    fn chip_variable_problems() {
        let spin = "PTO_SPIN_US";
        assert_eq!(
            kind_of(spin, "0"),
            EnvProblemKind::OutOfRange {
                min: 1,
                max: u64::MAX
            }
        );
        assert_eq!(
            kind_of(spin, "5,5,5,5"),
            EnvProblemKind::WrongCount { found: 4 }
        );
        assert_eq!(kind_of(spin, "5,"), EnvProblemKind::TrailingComma);
        assert_eq!(kind_of(spin, "-5"), EnvProblemKind::Negative);
        assert_eq!(kind_of(spin, "5ms"), EnvProblemKind::NotDecimal);
        assert_eq!(kind_of(spin, ""), EnvProblemKind::Empty);
        assert_eq!(
            kind_of(spin, "18446744073709551616"),
            EnvProblemKind::TooLarge
        );
        let text = only_problem("PTO_TENSORMAP_POOL", "1,2").to_string();
        assert_eq!(
            text,
            "PTO_TENSORMAP_POOL=\"1,2\" ignored: the value has 2 values; give exactly 1; \
             tensormap_pool keeps its ChipSpec value (the default unless set explicitly)"
        );
        let text = only_problem(spin, "abc").to_string();
        assert!(text.contains("value 1 of 1 (\"abc\") is not a non-negative decimal integer"));

        // Strict-fatal like the ring variables.
        let source = EnvSource::from_pairs([(spin, "0")]);
        let error = EnvSnapshot::take(&source, true).unwrap_err();
        assert!(error.to_string().contains("PTO_SPIN_US=\"0\""));
    }

    #[test]
    fn unknown_variable_suggestions() {
        let suggestion = |name: &str| match kind_of(name, "1") {
            EnvProblemKind::UnknownVariable { suggestion } => suggestion,
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(suggestion("PTO2_RING_HEEP"), "PTO2_RING_HEAP");
        assert_eq!(suggestion("PTO_RING_HEAP"), "PTO2_RING_HEAP");
        assert_eq!(suggestion("PTO2_RING_WINDOW"), "PTO2_RING_TASK_WINDOW");
        assert_eq!(suggestion("PTO2_RING_DEPPOOL"), "PTO2_RING_DEP_POOL");
        assert_eq!(suggestion("PTO2_RING_STRCT"), "PTO2_RING_STRICT");
        // Other names, even close ones, are not checked.
        assert!(
            snap(&[("PTO2_HEAP", "1"), ("PTO_SPIN", "1")])
                .problems
                .is_empty()
        );
        // A from_fn source cannot list names, so it has no unknown variables ...
        let source = EnvSource::from_fn(|name| (name == "PTO2_RING_HEEP").then(|| "1".into()));
        assert!(
            EnvSnapshot::take(&source, true)
                .unwrap()
                .problems
                .is_empty()
        );
        // ... but pairs laid over it are checked.
        let source = source.overlay([("PTO2_RING_HEEP", "1")]);
        assert_eq!(EnvSnapshot::take(&source, false).unwrap().problems.len(), 1);
    }

    #[test]
    fn strict_variable_values() {
        let strict = |value: &str| {
            let source = EnvSource::from_pairs([(STRICT_VAR, value)]);
            let snapshot = EnvSnapshot::take(&source, false).unwrap();
            (snapshot.strict, snapshot.problems.len())
        };
        for on in ["1", "true", "TRUE", "True", " 1 "] {
            assert_eq!(strict(on), (true, 0), "{on:?}");
        }
        for off in ["0", "false", "FALSE", "", "  "] {
            assert_eq!(strict(off), (false, 0), "{off:?}");
        }
        for bad in ["yes", "2", "on", "01"] {
            assert_eq!(strict(bad), (false, 1), "{bad:?}");
            let text = only_problem(STRICT_VAR, bad).to_string();
            assert!(text.contains("strict mode stays off"), "{text}");
        }
        // A bad flag is itself strict-fatal when the caller asks for strict mode.
        let source = EnvSource::from_pairs([(STRICT_VAR, "yes")]);
        let error = EnvSnapshot::take(&source, true).unwrap_err();
        assert_eq!(error.problems[0].kind, EnvProblemKind::InvalidFlag);
        let source =
            EnvSource::from_pairs([(OsString::from(STRICT_VAR), OsString::from_vec(vec![0xff]))]);
        let snapshot = EnvSnapshot::take(&source, false).unwrap();
        assert!(!snapshot.strict);
        assert_eq!(snapshot.problems[0].kind, EnvProblemKind::NotUnicode);
    }

    #[test]
    fn overlay_precedence() {
        let base = EnvSource::from_pairs([(W, "64"), (H, "2048"), (W, "32")]);
        assert_eq!(base.get(W), Some("32".into()));
        let over = base.clone().overlay([(W, "128"), (D, "8"), (D, "16")]);
        assert_eq!(over.get(W), Some("128".into()));
        assert_eq!(over.get(H), Some("2048".into()));
        assert_eq!(over.get(D), Some("16".into()));
        assert_eq!(base.get(D), None);
        let snapshot = EnvSnapshot::take(&over, false).unwrap();
        assert_eq!(snapshot.task_window, Some([128; 4]));
        assert_eq!(snapshot.heap, Some([2048; 4]));
        assert_eq!(snapshot.dep_pool, Some([16; 4]));

        // Pairs win over a lookup function.
        let source = EnvSource::from_fn(|name| (name == W).then(|| "64".into()));
        assert_eq!(source.get(W), Some("64".into()));
        let source = source.overlay([(W, "256")]);
        assert_eq!(source.get(W), Some("256".into()));
        assert_eq!(source.get(H), None);
    }

    #[test]
    fn process_source_is_a_copy() {
        // Only reads the process environment; nothing is ever written to it.
        let source = EnvSource::process().overlay([(W, "64")]);
        assert_eq!(source.get(W), Some("64".into()));
        let debug = format!("{:?}", EnvSource::from_pairs([(W, "64"), ("SECRET", "x")]));
        assert!(debug.contains("64") && !debug.contains("\"x\""), "{debug}");
    }
}
