//! `pto advise`: ring sizing recommended from a run's scope stats (CHIP_RUNTIME.md §7,
//! RING_CONFIG.md §8, test vectors ST3 and T86).
//!
//! ```text
//! pto advise <scope_stats.jsonl> [--headroom H] [--format toml|env|json]
//! ```
//!
//! [`ScopeStats::parse`] reads a `scope_stats.jsonl` file with the one reader of the format,
//! [`pto_chip::diag::scope_stats::read`] (the metadata record's capacities, their sources and the
//! failed run's `error`; the peaks of every end record), and keeps what advice needs. Malformed
//! input is a [`ScopeStatsError`] naming the line and the field; parsing never panics.
//!
//! [`advise`] takes, per ring, the maximum of each peak over all end records and recommends, with
//! headroom `H` (a fraction, default 0.25; [`Headroom::parse`] also accepts `25%`):
//!
//! | Resource | Recommendation |
//! |---|---|
//! | window | `max(4, next_pow2(ceil(peak_live·(1+H)) + 1))` |
//! | heap | `max(1024, align64(ceil((heap_peak + heap_largest_alloc)·(1+H))))` |
//! | dep pool | `max(4, ceil(max(dep_pool_peak, spill_peak)·(1+H)))` |
//!
//! Every value is clamped to a legal one with [`Resource::legal_at_least`], and every value is
//! concrete (never 0, which would mean "unset" and fall back to the 256 MiB defaults): when the
//! run succeeded a ring is capped at the capacity it had, and a ring without end records gets
//! the smallest legal value; when it failed, rings keep at least their capacity and the ring
//! and resource named by the metadata `error` are raised to at least its `recommended_min`,
//! flagged as a lower bound. [`advise_all`] merges many runs of one task label (largest demand
//! and capacity per ring). The headroom is applied in exact decimal arithmetic, so `0.1` means
//! exactly one tenth.
//!
//! Output ([`Advice::render`]), exactly one block on stdout, the same values in every format:
//!
//! * [`AdviseFormat::Toml`] (default) — accepted by `pto config resolve --config` and, pasted
//!   under `[cases.config.runtime_env]`, by the scene loader:
//!   ```toml
//!   [runtime_env]
//!   ring_task_window = [4, 8, 4, 4]
//!   ring_heap = [1024, 262144, 1024, 1024]
//!   ring_dep_pool = [4, 4, 4, 4]
//!   ```
//! * [`AdviseFormat::Env`] — `PTO2_RING_TASK_WINDOW=a,b,c,d`, `PTO2_RING_HEAP=…`,
//!   `PTO2_RING_DEP_POOL=…`.
//! * [`AdviseFormat::Json`] — one line, [`JsonAdvice`]:
//!   `{"runtime_env":{"ring_task_window":[…],"ring_heap":[…],"ring_dep_pool":[…]},"rings":[…]}`,
//!   one `rings` entry per ring ([`JsonRingAdvice`]) with its peaks and, per resource, the
//!   demand, capacity, source, recommendation, lower-bound flag and arena bytes saved
//!   (negative) or added ([`JsonResourceAdvice`]). `pto advise --format json` prints one per
//!   label, with `label` and `runs` after these (`pto_scene::advice::JsonKeyAdvice`). Fields
//!   are added, never renamed.
//!
//! [`Advice::render_table`] is the human table (peak, capacity with source, recommendation,
//! arena bytes saved or added) that the command prints on stderr.

use std::fmt;

use pto_types::ring_config::resolve::{Resolved, SizeSource};
use pto_types::{RING_COUNT, Resource, RuntimeEnv};
use serde::{Deserialize, Serialize};

use pto_chip::diag::scope_stats::{self, Meta, Peaks, Samples};
pub use pto_chip::diag::scope_stats::{MetaError, ScopeStatsError};
use pto_chip::error::ResourceKind;
use pto_chip::footprint::{DEP_ENTRY, DESC, FANIN_ENTRY, PAYLOAD, SLOT};

/// The largest heap value TOML can carry (TOML integers are signed 64-bit), kept 64-aligned.
const MAX_TOML_HEAP: u64 = (i64::MAX as u64) & !63;

// ---------------------------------------------------------------------------------------------
// Headroom
// ---------------------------------------------------------------------------------------------

/// Headroom `H`, kept exactly as the decimal fraction `num / den`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headroom {
    num: u128,
    den: u128,
}

/// Why a headroom text was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeadroomError {
    Negative(String),
    NotNumeric(String),
}

impl fmt::Display for HeadroomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadroomError::Negative(text) => write!(f, "{text:?}: headroom must not be negative"),
            HeadroomError::NotNumeric(text) => write!(
                f,
                "{text:?}: expected a non-negative fraction such as 0.25 or a percentage such as 25%"
            ),
        }
    }
}

impl std::error::Error for HeadroomError {}

/// Digits allowed on either side of the decimal point.
const MAX_HEADROOM_DIGITS: usize = 18;

impl Headroom {
    /// The default headroom, 0.25.
    pub const DEFAULT: Headroom = Headroom { num: 1, den: 4 };
    /// No headroom: the advice covers exactly the demand it saw.
    pub const ZERO: Headroom = Headroom { num: 0, den: 1 };

    /// Parses `0.25`, `.5`, `2`, `25%` or `12.5%` (decimal digits only, no exponent or sign).
    pub fn parse(text: &str) -> Result<Headroom, HeadroomError> {
        let trimmed = text.trim();
        let (body, percent) = match trimmed.strip_suffix('%') {
            Some(body) => (body.trim_end(), true),
            None => (trimmed, false),
        };
        if body.starts_with('-') {
            return Err(HeadroomError::Negative(text.to_string()));
        }
        let not_numeric = || HeadroomError::NotNumeric(text.to_string());
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        let digits_ok =
            |s: &str| s.len() <= MAX_HEADROOM_DIGITS && s.bytes().all(|b| b.is_ascii_digit());
        if (int.is_empty() && frac.is_empty()) || !digits_ok(int) || !digits_ok(frac) {
            return Err(not_numeric());
        }
        let den = 10u128.pow(frac.len() as u32);
        let int_value: u128 = if int.is_empty() {
            0
        } else {
            int.parse().map_err(|_| not_numeric())?
        };
        let frac_value: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(|_| not_numeric())?
        };
        let num = int_value * den + frac_value;
        let den = if percent { den * 100 } else { den };
        Ok(Headroom { num, den })
    }

    /// `H` as a float, for display.
    pub fn as_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// `ceil(value · (1 + H))`, exactly, saturating at `u64::MAX`.
    pub fn grow(self, value: u64) -> u64 {
        let factor = self.num + self.den;
        let Some(product) = u128::from(value).checked_mul(factor) else {
            return u64::MAX;
        };
        u64::try_from(product.div_ceil(self.den)).unwrap_or(u64::MAX)
    }
}

impl Default for Headroom {
    fn default() -> Headroom {
        Headroom::DEFAULT
    }
}

impl std::str::FromStr for Headroom {
    type Err = HeadroomError;

    fn from_str(text: &str) -> Result<Headroom, HeadroomError> {
        Headroom::parse(text)
    }
}

impl fmt::Display for Headroom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_f64())
    }
}

// ---------------------------------------------------------------------------------------------
// Scope stats summary
// ---------------------------------------------------------------------------------------------

/// The per-ring maxima of the end-record peaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingPeaks {
    /// End records seen for this ring (0 = no samples).
    pub end_records: u64,
    pub task_window_peak: u64,
    pub heap_peak: u64,
    pub heap_largest_alloc: u64,
    pub dep_pool_peak: u64,
    pub spill_peak: u64,
}

impl RingPeaks {
    /// Takes the larger of each peak of `other` (a ring of another run) and its records.
    fn merge(&mut self, other: &RingPeaks) {
        self.end_records += other.end_records;
        self.task_window_peak = self.task_window_peak.max(other.task_window_peak);
        self.heap_peak = self.heap_peak.max(other.heap_peak);
        self.heap_largest_alloc = self.heap_largest_alloc.max(other.heap_largest_alloc);
        self.dep_pool_peak = self.dep_pool_peak.max(other.dep_pool_peak);
        self.spill_peak = self.spill_peak.max(other.spill_peak);
    }

    fn absorb(&mut self, end: &Peaks) {
        self.merge(&RingPeaks {
            end_records: 1,
            task_window_peak: end.task_window,
            heap_peak: end.heap,
            heap_largest_alloc: end.heap_largest_alloc,
            dep_pool_peak: end.dep_pool,
            spill_peak: end.spill,
        });
    }

    /// The quantity the recommendation for `resource` scales by the headroom.
    pub fn demand(&self, resource: Resource) -> u64 {
        match resource {
            Resource::TaskWindow => self.task_window_peak,
            Resource::Heap => self.heap_peak.saturating_add(self.heap_largest_alloc),
            Resource::DepPool => self.dep_pool_peak.max(self.spill_peak),
        }
    }
}

/// What `pto advise` needs of a `scope_stats.jsonl`: its metadata and per-ring peaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeStats {
    pub fatal: bool,
    /// Samples the writer dropped (0 when the field is absent).
    pub dropped: u64,
    /// Effective capacities and their sources, per resource (in [`Resource::ALL`] order).
    pub capacity: [[Resolved; RING_COUNT]; 3],
    pub error: Option<MetaError>,
    /// The task's label (the metadata's `label`), if it had one.
    pub label: Option<String>,
    /// Per-ring maxima over all end records.
    pub rings: [RingPeaks; RING_COUNT],
    /// Begin and end records read.
    pub samples: u64,
}

impl ScopeStats {
    /// Reads the bytes of a file ([`scope_stats::read_bytes`]).
    pub fn parse_bytes(bytes: &[u8]) -> Result<ScopeStats, ScopeStatsError> {
        let (meta, samples) = scope_stats::read_bytes(bytes)?;
        ScopeStats::summarize(meta, samples)
    }

    /// Reads the text of a file ([`scope_stats::read`]).
    pub fn parse(text: &str) -> Result<ScopeStats, ScopeStatsError> {
        let (meta, samples) = scope_stats::read(text)?;
        ScopeStats::summarize(meta, samples)
    }

    fn summarize(meta: Meta, samples: Samples<'_>) -> Result<ScopeStats, ScopeStatsError> {
        let mut stats = ScopeStats {
            fatal: meta.fatal,
            dropped: meta.dropped,
            capacity: Resource::ALL.map(|r| std::array::from_fn(|ring| meta.capacity(r, ring))),
            error: meta.error,
            label: meta.label,
            rings: [RingPeaks::default(); RING_COUNT],
            samples: 0,
        };
        for sample in samples {
            let sample = sample?;
            stats.samples += 1;
            if let Some(peaks) = sample.end_peaks() {
                stats.rings[sample.ring].absorb(&peaks);
            }
        }
        Ok(stats)
    }

    /// The capacity and source of `resource` on `ring`.
    pub fn capacity(&self, resource: Resource, ring: usize) -> Resolved {
        self.capacity[resource_index(resource)][ring]
    }
}

fn resource_index(resource: Resource) -> usize {
    match resource {
        Resource::TaskWindow => 0,
        Resource::Heap => 1,
        Resource::DepPool => 2,
    }
}

// ---------------------------------------------------------------------------------------------
// Advice
// ---------------------------------------------------------------------------------------------

/// The recommendation for one resource on one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceAdvice {
    /// The scaled quantity ([`RingPeaks::demand`]); `None` when the ring has no samples.
    pub demand: Option<u64>,
    /// The capacity the run had, from the metadata.
    pub capacity: Resolved,
    /// The recommended value: always a legal, non-zero value.
    pub recommended: u64,
    /// Raised from a failed run's `recommended_min`: re-run with it and advise again.
    pub lower_bound: bool,
}

impl ResourceAdvice {
    /// The value a run would bind with the advice.
    pub fn effective(&self) -> u64 {
        self.recommended
    }
}

/// The recommendations for one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingAdvice {
    pub ring: usize,
    pub peaks: RingPeaks,
    /// In [`Resource::ALL`] order.
    pub resources: [ResourceAdvice; 3],
}

impl RingAdvice {
    pub fn get(&self, resource: Resource) -> &ResourceAdvice {
        &self.resources[resource_index(resource)]
    }

    fn get_mut(&mut self, resource: Resource) -> &mut ResourceAdvice {
        &mut self.resources[resource_index(resource)]
    }
}

/// The output of [`advise`].
#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    pub headroom: Headroom,
    pub rings: [RingAdvice; RING_COUNT],
    /// Things the user should know (failed run, dropped samples, non-ring resources).
    pub notes: Vec<String>,
}

/// The stdout format of `pto advise`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdviseFormat {
    #[default]
    Toml,
    Env,
    Json,
}

/// `resource`'s recommendation for `demand`. `legal_at_least` supplies the `max(min, …)`, the
/// next power of two (window) and the 64-byte alignment (heap) of the formulas.
pub fn recommend(resource: Resource, demand: u64, headroom: Headroom) -> u64 {
    let grown = headroom.grow(demand);
    let want = match resource {
        Resource::TaskWindow => grown.saturating_add(1),
        Resource::Heap | Resource::DepPool => grown,
    };
    let value = resource.legal_at_least(want);
    match resource {
        Resource::Heap => value.min(MAX_TOML_HEAP),
        _ => value,
    }
}

/// Recommends a ring sizing from parsed scope stats.
pub fn advise(stats: &ScopeStats, headroom: Headroom) -> Advice {
    advise_all(std::slice::from_ref(stats), headroom)
}

/// Recommends one ring sizing that fits every run of `runs` (runs of the same task label, e.g.
/// from many L3 runs): per ring and resource the largest demand and the largest capacity.
///
/// Every value is a concrete legal value, so the three output formats agree and applying the
/// advice never falls back to a default:
/// - a ring with samples gets the formula's value; when no run failed it is capped at the
///   largest capacity the runs had (they all succeeded with it), so the advice never reserves
///   more than its runs did;
/// - a ring without samples gets the smallest legal value when every run succeeded (no scope
///   used it), and its capacity when a run failed (the part that never ran may need it);
/// - a failed run's own ring and resource are raised to its error's `recommended_min`
///   (a lower bound: re-run and advise again — `pto tune` does).
pub fn advise_all(runs: &[ScopeStats], headroom: Headroom) -> Advice {
    let failed = runs.iter().any(|s| s.fatal);
    let rings = std::array::from_fn(|ring| ring_advice(runs, ring, headroom, failed));
    let mut advice = Advice {
        headroom,
        rings,
        notes: Vec::new(),
    };
    let dropped: u64 = runs.iter().map(|s| s.dropped).sum();
    if dropped > 0 {
        advice.notes.push(format!(
            "{dropped} sample(s) were dropped: the peaks may be understated"
        ));
    }
    if runs.len() > 1 {
        advice.notes.push(format!(
            "merged {} runs: per ring, the largest of each",
            runs.len()
        ));
    }
    for stats in runs {
        if let Some(err) = &stats.error {
            apply_run_error(&mut advice, err);
        } else if stats.fatal {
            advice.notes.push(
                "a run failed: its peaks cover only the part that ran; the advice keeps its capacities"
                    .to_string(),
            );
        }
    }
    advice
}

/// Recommends a ring sizing for a chip job that replays `graph` `replays` times in a row in one
/// scope at depth `depth`, before it ever runs: the graph's needs
/// ([`pto_chip::replay::RecordedGraph::needs_of_replays`]: the most task slots, heap bytes and
/// worst-case dependency and fan-in spill entries pinned at once per ring) take the place of
/// measured peaks, through the same formulas as [`advise`]. Rings the graph does not use get
/// the smallest legal value; capacities are the compile-time defaults (what the advice is
/// compared with). The job's own tasks around the replays are not counted, nor are edges to
/// them: size those from a run's scope stats and take the larger value.
pub fn advise_graph(
    graph: &pto_chip::replay::RecordedGraph,
    depth: usize,
    replays: u32,
    headroom: Headroom,
) -> Advice {
    let needs = graph.needs_of_replays(depth, replays);
    let rings = std::array::from_fn(|ring| {
        let need = &needs[ring];
        let used = need.task_window > 0;
        let peaks = RingPeaks {
            end_records: u64::from(used),
            task_window_peak: need.task_window,
            heap_peak: need.heap,
            heap_largest_alloc: need.heap_largest_alloc,
            dep_pool_peak: need.dep_pool,
            spill_peak: need.fanin_spill,
        };
        let resources = Resource::ALL.map(|resource| {
            let demand = used.then(|| peaks.demand(resource));
            ResourceAdvice {
                demand,
                capacity: Resolved {
                    value: resource.default_value(),
                    source: SizeSource::Default,
                },
                recommended: match demand {
                    Some(d) => recommend(resource, d, headroom),
                    None => resource.legal_at_least(0),
                },
                lower_bound: false,
            }
        });
        RingAdvice {
            ring,
            peaks,
            resources,
        }
    });
    Advice {
        headroom,
        rings,
        notes: vec![format!(
            "from the needs of graph {:?} replayed {replays} time(s) at scope depth {depth}, before any run",
            graph.name()
        )],
    }
}

fn ring_advice(runs: &[ScopeStats], ring: usize, headroom: Headroom, failed: bool) -> RingAdvice {
    let mut peaks = RingPeaks::default();
    for s in runs.iter().filter(|s| s.rings[ring].end_records > 0) {
        peaks.merge(&s.rings[ring]);
    }
    let resources = Resource::ALL.map(|resource| {
        let capacity = runs
            .iter()
            .map(|s| s.capacity(resource, ring))
            .max_by_key(|c| c.value)
            .unwrap_or(Resolved {
                value: resource.min(),
                source: SizeSource::Default,
            });
        let demand = (peaks.end_records > 0).then(|| peaks.demand(resource));
        let recommended = match (demand, failed) {
            (Some(d), false) => recommend(resource, d, headroom).min(capacity.value),
            (Some(d), true) => recommend(resource, d, headroom).max(capacity.value),
            (None, false) => resource.legal_at_least(0),
            (None, true) => capacity.value,
        };
        ResourceAdvice {
            demand,
            capacity,
            recommended,
            lower_bound: false,
        }
    });
    RingAdvice {
        ring,
        peaks,
        resources,
    }
}

fn apply_run_error(advice: &mut Advice, err: &MetaError) {
    let what = format!("the run failed with {} ({})", err.name, err.code);
    let target = err.resource.and_then(ResourceKind::ring_resource);
    let (Some(resource), Some(ring), Some(min)) = (target, err.ring, err.recommended_min) else {
        let why = match err.resource {
            Some(kind @ (ResourceKind::TensorMap | ResourceKind::Cores)) => {
                format!("{} is not sized by runtime_env", kind.as_str())
            }
            _ => "the error names no ring resource with a recommended_min".to_string(),
        };
        advice.notes.push(format!(
            "{what}: {why}; the peaks cover only the part that ran"
        ));
        return;
    };
    let entry = advice.rings[ring].get_mut(resource);
    entry.recommended = entry.recommended.max(recommend_min(resource, min));
    entry.lower_bound = true;
    advice.notes.push(format!(
        "{what}: {}[{ring}] is a lower bound (at least {}); re-run with it and advise again",
        resource.field(),
        entry.recommended
    ));
}

fn recommend_min(resource: Resource, min: u64) -> u64 {
    let value = resource.legal_at_least(min);
    match resource {
        Resource::Heap => value.min(MAX_TOML_HEAP),
        _ => value,
    }
}

/// Arena bytes that `value` of `resource` costs on one ring (RING_CONFIG.md §7.1, using the
/// constants of [`pto_chip::footprint`]).
fn ring_bytes(resource: Resource, value: u64) -> i128 {
    let a = |per: u64, n: u64| (i128::from(per) * i128::from(n) + 63) / 64 * 64;
    match resource {
        Resource::TaskWindow => a(DESC, value) + a(PAYLOAD, value) + a(SLOT, value),
        Resource::Heap => i128::from(value),
        Resource::DepPool => a(DEP_ENTRY, value.saturating_add(1)) + a(FANIN_ENTRY, value),
    }
}

impl ResourceAdvice {
    /// Arena bytes added (positive) or saved (negative) by the recommendation.
    pub fn bytes_delta(&self, resource: Resource) -> i128 {
        ring_bytes(resource, self.effective()) - ring_bytes(resource, self.capacity.value)
    }
}

impl Advice {
    /// The `runtime_env` to apply: a concrete value for every ring and resource.
    pub fn runtime_env(&self) -> RuntimeEnv {
        let mut env = RuntimeEnv::default();
        for resource in Resource::ALL {
            env.set(resource, self.values(resource));
        }
        env
    }

    /// Per-ring values of `resource`.
    pub fn values(&self, resource: Resource) -> [u64; RING_COUNT] {
        self.rings.map(|r| r.get(resource).recommended)
    }

    /// Total arena bytes added (positive) or saved (negative).
    pub fn total_bytes_delta(&self) -> i128 {
        self.rings
            .iter()
            .flat_map(|r| Resource::ALL.map(|res| r.get(res).bytes_delta(res)))
            .sum()
    }

    /// The stdout block in `format`, ending with a newline.
    pub fn render(&self, format: AdviseFormat) -> String {
        match format {
            AdviseFormat::Toml => self.to_toml(),
            AdviseFormat::Env => self.to_env(),
            AdviseFormat::Json => pto_chip::diag::json_line(&self.to_json()),
        }
    }

    /// `[runtime_env]` with the three keys as 4-entry lists.
    pub fn to_toml(&self) -> String {
        let mut out = String::from("[runtime_env]\n");
        for resource in Resource::ALL {
            let [a, b, c, d] = self.values(resource);
            out.push_str(&format!("{} = [{a}, {b}, {c}, {d}]\n", resource.field()));
        }
        out
    }

    /// Three `PTO2_RING_*=a,b,c,d` lines, the same values as the other formats.
    pub fn to_env(&self) -> String {
        let mut out = String::new();
        for resource in Resource::ALL {
            let [a, b, c, d] = self.values(resource);
            out.push_str(&format!("{}={a},{b},{c},{d}\n", resource.env_var()));
        }
        out
    }

    /// `{"runtime_env":{…},"rings":[…]}`.
    pub fn to_json(&self) -> JsonAdvice {
        JsonAdvice {
            runtime_env: JsonRuntimeEnv {
                ring_task_window: self.values(Resource::TaskWindow),
                ring_heap: self.values(Resource::Heap),
                ring_dep_pool: self.values(Resource::DepPool),
            },
            rings: self.rings.map(|r| r.to_json()),
        }
    }

    /// The per-ring table printed on stderr.
    pub fn render_table(&self) -> String {
        let mut out = format!("pto advise: headroom {}\n", self.headroom);
        out.push_str(&format!(
            "{:<5} {:<12} {:<28} {:<26} {:<26} {}\n",
            "ring", "resource", "peak", "capacity (source)", "advice", "arena bytes"
        ));
        for ring in &self.rings {
            for resource in Resource::ALL {
                out.push_str(&table_row(ring, resource));
            }
        }
        out.push_str(&format!(
            "total: arena bytes {}\n",
            bytes_text(self.total_bytes_delta())
        ));
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out
    }
}

/// The JSON of `pto advise --format json` ([`Advice::to_json`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonAdvice {
    /// The recommendation, the keys and values of the TOML format's `[runtime_env]`.
    pub runtime_env: JsonRuntimeEnv,
    /// The details, ring by ring.
    pub rings: [JsonRingAdvice; RING_COUNT],
}

/// A concrete `runtime_env`: one value per ring of each resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonRuntimeEnv {
    /// Task slots.
    pub ring_task_window: [u64; RING_COUNT],
    /// Bytes.
    pub ring_heap: [u64; RING_COUNT],
    /// Entries.
    pub ring_dep_pool: [u64; RING_COUNT],
}

/// One ring's observed peaks and recommendations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonRingAdvice {
    /// 0 to 3.
    pub ring: usize,
    /// End records of scopes on this ring, over all runs merged (0 = no samples).
    pub end_records: u64,
    /// The largest peaks over those end records; null without samples.
    pub peaks: Option<JsonPeaks>,
    /// In task slots.
    pub task_window: JsonResourceAdvice,
    /// In bytes.
    pub heap: JsonResourceAdvice,
    /// In entries.
    pub dep_pool: JsonResourceAdvice,
}

/// The largest peaks of a ring's scopes ([`RingPeaks`]), as scope stats name them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonPeaks {
    /// Live tasks.
    pub task_window_peak: u64,
    /// Heap bytes in use.
    pub heap_peak: u64,
    /// The largest single heap allocation, in bytes.
    pub heap_largest_alloc: u64,
    /// Dep-pool entries in use.
    pub dep_pool_peak: u64,
    /// Fan-in spill entries in use.
    pub spill_peak: u64,
}

/// The recommendation for one resource on one ring ([`ResourceAdvice`]), in the resource's
/// unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonResourceAdvice {
    /// What the recommendation scales ([`RingPeaks::demand`]); null without samples.
    pub demand: Option<u64>,
    /// The capacity the runs had (the largest, when merged).
    pub capacity: u64,
    /// Where that capacity came from: `call_config`, `env` or `default`.
    pub source: String,
    /// The recommended value: legal and never 0.
    pub recommended: u64,
    /// Raised to a failed run's `recommended_min`: re-run with it and advise again.
    pub lower_bound: bool,
    /// Arena bytes the recommendation adds (positive) or saves (negative), saturated to
    /// `i64`.
    pub bytes_delta: i64,
}

impl RingAdvice {
    fn to_json(self) -> JsonRingAdvice {
        let p = &self.peaks;
        let peaks = (p.end_records > 0).then_some(JsonPeaks {
            task_window_peak: p.task_window_peak,
            heap_peak: p.heap_peak,
            heap_largest_alloc: p.heap_largest_alloc,
            dep_pool_peak: p.dep_pool_peak,
            spill_peak: p.spill_peak,
        });
        let resource = |resource: Resource| {
            let entry = self.get(resource);
            let delta = entry.bytes_delta(resource);
            JsonResourceAdvice {
                demand: entry.demand,
                capacity: entry.capacity.value,
                source: entry.capacity.source.as_str().to_string(),
                recommended: entry.recommended,
                lower_bound: entry.lower_bound,
                bytes_delta: i64::try_from(delta).unwrap_or(i64::MAX),
            }
        };
        JsonRingAdvice {
            ring: self.ring,
            end_records: p.end_records,
            peaks,
            task_window: resource(Resource::TaskWindow),
            heap: resource(Resource::Heap),
            dep_pool: resource(Resource::DepPool),
        }
    }
}

fn peak_text(ring: &RingAdvice, resource: Resource) -> String {
    let p = &ring.peaks;
    if p.end_records == 0 {
        return "-".to_string();
    }
    match resource {
        Resource::TaskWindow => p.task_window_peak.to_string(),
        Resource::Heap => format!("{} + largest {}", p.heap_peak, p.heap_largest_alloc),
        Resource::DepPool => format!("{} (spill {})", p.dep_pool_peak, p.spill_peak),
    }
}

fn advice_text(entry: &ResourceAdvice) -> String {
    match (entry.demand, entry.lower_bound) {
        (_, true) => format!(">= {} (lower bound)", entry.recommended),
        (None, false) => format!("{} (no samples)", entry.recommended),
        (Some(_), false) => entry.recommended.to_string(),
    }
}

fn bytes_text(delta: i128) -> String {
    match delta {
        0 => "0".to_string(),
        d if d < 0 => format!("{} saved", -d),
        d => format!("{d} added"),
    }
}

fn table_row(ring: &RingAdvice, resource: Resource) -> String {
    let entry = ring.get(resource);
    let capacity = format!("{} ({})", entry.capacity.value, entry.capacity.source);
    format!(
        "{:<5} {:<12} {:<28} {:<26} {:<26} {}\n",
        ring.ring,
        resource.short_name(),
        peak_text(ring, resource),
        capacity,
        advice_text(entry),
        bytes_text(entry.bytes_delta(resource))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// `Advice::to_json` lines printed before the output was typed: a failed run (a lower
    /// bound, rings without samples) and a roomy one (arena bytes saved).
    const OLD_LINES: [&str; 2] = [
        r#"{"runtime_env":{"ring_task_window":[16384,8,16384,16384],"ring_heap":[268435456,268435456,268435456,268435456],"ring_dep_pool":[16384,16384,16384,16384]},"rings":[{"ring":0,"end_records":1,"peaks":{"task_window_peak":1,"heap_peak":4096,"heap_largest_alloc":4096,"dep_pool_peak":0,"spill_peak":0},"task_window":{"demand":1,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0},"heap":{"demand":8192,"capacity":268435456,"source":"default","recommended":268435456,"lower_bound":false,"bytes_delta":0},"dep_pool":{"demand":0,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0}},{"ring":1,"end_records":1,"peaks":{"task_window_peak":3,"heap_peak":12288,"heap_largest_alloc":4096,"dep_pool_peak":4,"spill_peak":0},"task_window":{"demand":3,"capacity":4,"source":"call_config","recommended":8,"lower_bound":true,"bytes_delta":19840},"heap":{"demand":16384,"capacity":268435456,"source":"default","recommended":268435456,"lower_bound":false,"bytes_delta":0},"dep_pool":{"demand":4,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0}},{"ring":2,"end_records":0,"peaks":null,"task_window":{"demand":null,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0},"heap":{"demand":null,"capacity":268435456,"source":"default","recommended":268435456,"lower_bound":false,"bytes_delta":0},"dep_pool":{"demand":null,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0}},{"ring":3,"end_records":0,"peaks":null,"task_window":{"demand":null,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0},"heap":{"demand":null,"capacity":268435456,"source":"default","recommended":268435456,"lower_bound":false,"bytes_delta":0},"dep_pool":{"demand":null,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0}}]}"#,
        r#"{"runtime_env":{"ring_task_window":[4,8,4,4],"ring_heap":[40960,81920,1024,1024],"ring_dep_pool":[4,8,4,4]},"rings":[{"ring":0,"end_records":2,"peaks":{"task_window_peak":1,"heap_peak":16384,"heap_largest_alloc":16384,"dep_pool_peak":0,"spill_peak":0},"task_window":{"demand":1,"capacity":16384,"source":"default","recommended":4,"lower_bound":false,"bytes_delta":-81375808},"heap":{"demand":32768,"capacity":268435456,"source":"default","recommended":40960,"lower_bound":false,"bytes_delta":-268394496},"dep_pool":{"demand":0,"capacity":16384,"source":"default","recommended":4,"lower_bound":false,"bytes_delta":-393088}},{"ring":1,"end_records":2,"peaks":{"task_window_peak":4,"heap_peak":49152,"heap_largest_alloc":16384,"dep_pool_peak":6,"spill_peak":0},"task_window":{"demand":4,"capacity":16384,"source":"default","recommended":8,"lower_bound":false,"bytes_delta":-81355968},"heap":{"demand":65536,"capacity":268435456,"source":"default","recommended":81920,"lower_bound":false,"bytes_delta":-268353536},"dep_pool":{"demand":6,"capacity":16384,"source":"default","recommended":8,"lower_bound":false,"bytes_delta":-393024}},{"ring":2,"end_records":0,"peaks":null,"task_window":{"demand":null,"capacity":16384,"source":"default","recommended":4,"lower_bound":false,"bytes_delta":-81375808},"heap":{"demand":null,"capacity":268435456,"source":"default","recommended":1024,"lower_bound":false,"bytes_delta":-268434432},"dep_pool":{"demand":null,"capacity":16384,"source":"default","recommended":4,"lower_bound":false,"bytes_delta":-393088}},{"ring":3,"end_records":0,"peaks":null,"task_window":{"demand":null,"capacity":16384,"source":"default","recommended":4,"lower_bound":false,"bytes_delta":-81375808},"heap":{"demand":null,"capacity":268435456,"source":"default","recommended":1024,"lower_bound":false,"bytes_delta":-268434432},"dep_pool":{"demand":null,"capacity":16384,"source":"default","recommended":4,"lower_bound":false,"bytes_delta":-393088}}]}"#,
    ];

    #[test]
    fn lines_printed_before_read_and_print_back_byte_for_byte() {
        for line in OLD_LINES {
            let advice: JsonAdvice = serde_json::from_str(line).unwrap();
            assert_eq!(pto_chip::diag::json_text(&advice), line);
        }
    }

    #[test]
    fn advice_reads_back_equal() {
        let json = st1_advice(Headroom::DEFAULT).to_json();
        let text = st1_advice(Headroom::DEFAULT).render(AdviseFormat::Json);
        assert_eq!(serde_json::from_str::<JsonAdvice>(&text).unwrap(), json);
        assert_eq!(json.rings[2].peaks, None);
        assert!(json.rings[1].peaks.is_some());
    }

    /// The ST1 run of CHIP_RUNTIME.md §7: root scope on ring 0, one user scope on ring 1.
    const ST1: &str = r#"{"schema":"pto.scope_stats","version":1,"fatal":false,"dropped":0,"total":4,"label":"small","clusters":8,"aicpu_thread_num":4,"task_window_max":[16384,8,16384,16384],"heap_max":[268435456,262144,268435456,268435456],"dep_pool_max":[16384,64,16384,16384],"tensormap_max":65536,"task_window_source":["default","call_config","default","default"],"heap_source":["default","call_config","default","default"],"dep_pool_source":["env","call_config","env","env"],"error":null}
{"seq":1,"site":"vector_example.rs:1","phase":"begin","depth":0,"ring":0,"task_window_start":0,"task_window_end":0,"heap_start":0,"heap_end":0,"dep_pool_start":1,"dep_pool_end":1,"tensormap":0,"t_us":1.0}
{"seq":2,"site":"vector_example.rs:5","phase":"begin","depth":1,"ring":1,"task_window_start":0,"task_window_end":0,"heap_start":0,"heap_end":0,"dep_pool_start":1,"dep_pool_end":1,"tensormap":0,"t_us":41.0}
{"seq":3,"site":"vector_example.rs:5","phase":"end","depth":1,"ring":1,"task_window_start":0,"task_window_end":4,"heap_start":0,"heap_end":196608,"dep_pool_start":1,"dep_pool_end":4,"tensormap":1,"task_window_peak":4,"heap_peak":196608,"heap_largest_alloc":65536,"dep_pool_peak":3,"spill_peak":0,"t_us":212.5}
{"seq":4,"site":"vector_example.rs:1","phase":"end","depth":0,"ring":0,"task_window_start":0,"task_window_end":0,"heap_start":0,"heap_end":0,"dep_pool_start":1,"dep_pool_end":1,"tensormap":0,"task_window_peak":0,"heap_peak":0,"heap_largest_alloc":0,"dep_pool_peak":0,"spill_peak":0,"t_us":220.0}
"#;

    fn st1_advice(headroom: Headroom) -> Advice {
        advise(&ScopeStats::parse(ST1).unwrap(), headroom)
    }

    fn parse_err(text: &str) -> ScopeStatsError {
        ScopeStats::parse(text).unwrap_err()
    }

    /// ST1 with line `line` (1-based) replaced.
    fn st1_with_line(line: usize, text: &str) -> String {
        let mut lines: Vec<&str> = ST1.lines().collect();
        lines[line - 1] = text;
        lines.join("\n")
    }

    /// ST3 as CHIP_RUNTIME.md §7 states it, with two deviations that issue 11 asks for: the
    /// heap formula's 327680 is capped at the 262144 the run succeeded with (advice never
    /// reserves more than its run), and rings without samples get the smallest legal values
    /// instead of 0 ("unset" falls back to the 256 MiB defaults).
    #[test]
    fn st3_advise_on_st1_with_default_headroom() {
        let advice = st1_advice(Headroom::DEFAULT);
        let env = advice.runtime_env();
        assert_eq!(env.ring_task_window[1], 8);
        assert_eq!(env.ring_heap[1], 262144);
        assert_eq!(env.ring_dep_pool[1], 4);
        // The root scope ran no tasks: the minimum legal values.
        assert_eq!(env.ring_task_window[0], 4);
        assert_eq!(env.ring_heap[0], 1024);
        assert_eq!(env.ring_dep_pool[0], 4);
        for ring in 2..4 {
            assert_eq!(env.ring_task_window[ring], 4);
            assert_eq!(env.ring_heap[ring], 1024);
            assert_eq!(env.ring_dep_pool[ring], 4);
        }
        assert!(env.validate().is_ok());
        assert!(advice.notes.is_empty());
        // The §7 formula itself, where the capacity does not cap it.
        let roomy = advise(&ScopeStats::parse(&roomy()).unwrap(), Headroom::DEFAULT);
        assert_eq!(roomy.runtime_env().ring_heap[1], 327680);
    }

    #[test]
    fn parse_st1_collects_peaks_and_provenance() {
        let stats = ScopeStats::parse(ST1).unwrap();
        assert_eq!(stats.samples, 4);
        assert!(!stats.fatal);
        assert_eq!(stats.rings[1].end_records, 1);
        assert_eq!(stats.rings[1].demand(Resource::Heap), 262144);
        assert_eq!(stats.rings[2], RingPeaks::default());
        assert_eq!(
            stats.capacity(Resource::DepPool, 0),
            Resolved {
                value: 16384,
                source: SizeSource::Env
            }
        );
        assert_eq!(
            stats.capacity(Resource::TaskWindow, 1),
            Resolved {
                value: 8,
                source: SizeSource::CallConfig
            }
        );
    }

    #[test]
    fn peaks_are_maxima_over_end_records() {
        let counters = r#""task_window_start":0,"task_window_end":0,"heap_start":0,"heap_end":0,"dep_pool_start":1,"dep_pool_end":1,"tensormap":0"#;
        let extra = format!(
            r#"{{"seq":5,"site":"a.rs:9","phase":"end","depth":5,"ring":3,{counters},"task_window_peak":9,"heap_peak":10,"heap_largest_alloc":2000,"dep_pool_peak":1,"spill_peak":7,"t_us":230.0}}
{{"seq":6,"site":"a.rs:8","phase":"end","depth":3,"ring":3,{counters},"task_window_peak":3,"heap_peak":5000,"heap_largest_alloc":64,"dep_pool_peak":2,"spill_peak":0,"t_us":231.0}}"#
        );
        let stats = ScopeStats::parse(&format!("{ST1}{extra}\n")).unwrap();
        let p = stats.rings[3];
        assert_eq!(
            (p.end_records, p.task_window_peak, p.heap_peak),
            (2, 9, 5000)
        );
        assert_eq!(
            (p.heap_largest_alloc, p.dep_pool_peak, p.spill_peak),
            (2000, 2, 7)
        );
        let advice = advise(&stats, Headroom::DEFAULT);
        // window: ceil(9·1.25) + 1 = 13 -> 16; heap: ceil(7000·1.25) = 8750 -> 8768;
        // dep pool: ceil(7·1.25) = 9.
        assert_eq!(advice.values(Resource::TaskWindow)[3], 16);
        assert_eq!(advice.values(Resource::Heap)[3], 8768);
        assert_eq!(advice.values(Resource::DepPool)[3], 9);
    }

    /// ST1 with every capacity at its default, so the headroom is not capped.
    fn roomy() -> String {
        ST1.replace(
            r#""task_window_max":[16384,8,16384,16384]"#,
            r#""task_window_max":[16384,16384,16384,16384]"#,
        )
        .replace(
            r#""heap_max":[268435456,262144,268435456,268435456]"#,
            r#""heap_max":[268435456,268435456,268435456,268435456]"#,
        )
    }

    #[test]
    fn advice_never_exceeds_the_capacity_of_a_successful_run() {
        // ST1's ring 1 ran with window 8 and heap 262144: the formula's 8 and 327680 are capped.
        let env = st1_advice(Headroom::DEFAULT).runtime_env();
        assert_eq!((env.ring_task_window[1], env.ring_heap[1]), (8, 262144));
        // Unsampled rings get the smallest legal values, never 0 (= the 256 MiB defaults).
        assert_eq!(env.ring_heap[2..], [1024, 1024]);
        assert_eq!(env.ring_task_window[2..], [4, 4]);
        assert_eq!(env.ring_dep_pool[2..], [4, 4]);
    }

    #[test]
    fn headroom_variants() {
        let st1_advice = |h: Headroom| advise(&ScopeStats::parse(&roomy()).unwrap(), h);
        let zero = st1_advice(Headroom::parse("0").unwrap()).runtime_env();
        // window: 4 + 1 = 5 -> 8; heap exactly 262144; dep pool max(4, 3) = 4.
        assert_eq!(
            (
                zero.ring_task_window[1],
                zero.ring_heap[1],
                zero.ring_dep_pool[1]
            ),
            (8, 262144, 4)
        );
        let double = st1_advice(Headroom::parse("1").unwrap()).runtime_env();
        // window: 8 + 1 = 9 -> 16; heap 524288; dep pool 6.
        assert_eq!(
            (
                double.ring_task_window[1],
                double.ring_heap[1],
                double.ring_dep_pool[1]
            ),
            (16, 524288, 6)
        );
        let tenth = st1_advice(Headroom::parse("0.1").unwrap()).runtime_env();
        // Exact decimal: ceil(262144·1.1) = 288359 (288358.4) -> 288384; ceil(3·1.1) = 4.
        assert_eq!((tenth.ring_heap[1], tenth.ring_dep_pool[1]), (288384, 4));
    }

    #[test]
    fn headroom_parsing() {
        assert_eq!(
            Headroom::parse("25%").unwrap(),
            Headroom::parse("0.25").unwrap()
        );
        assert_eq!(Headroom::parse("0.25").unwrap().grow(100), 125);
        assert_eq!(Headroom::parse("25%").unwrap().grow(100), 125);
        assert_eq!(Headroom::parse(" 12.5% ").unwrap().grow(8), 9);
        assert_eq!(Headroom::parse(".5").unwrap().grow(10), 15);
        assert_eq!(Headroom::parse("2.").unwrap().grow(10), 30);
        assert_eq!(Headroom::parse("0.1").unwrap().grow(10), 11);
        assert_eq!(Headroom::DEFAULT.grow(u64::MAX), u64::MAX);
        assert_eq!(Headroom::default().as_f64(), 0.25);
        for bad in ["-0.1", "-25%", " -1"] {
            assert!(
                matches!(Headroom::parse(bad), Err(HeadroomError::Negative(_))),
                "{bad}"
            );
        }
        for bad in [
            "",
            "abc",
            "%",
            ".",
            "1e-1",
            "0x10",
            "+1",
            "1.2.3",
            "nan",
            "inf",
            "1 %%",
            "1234567890123456789",
        ] {
            assert!(
                matches!(Headroom::parse(bad), Err(HeadroomError::NotNumeric(_))),
                "{bad:?}"
            );
        }
        let text = Headroom::parse("abc").unwrap_err().to_string();
        assert!(text.contains("\"abc\"") && text.contains("25%"), "{text}");
    }

    #[test]
    fn recommendations_are_clamped_to_legal_values() {
        let h = Headroom::DEFAULT;
        assert_eq!(recommend(Resource::TaskWindow, u64::MAX, h), 1 << 30);
        assert_eq!(recommend(Resource::DepPool, u64::MAX, h), (1 << 31) - 1);
        assert_eq!(recommend(Resource::Heap, u64::MAX, h), MAX_TOML_HEAP);
        assert_eq!(recommend(Resource::Heap, 1, h), 1024);
        assert_eq!(recommend(Resource::Heap, 1000, h), 1280);
        for resource in Resource::ALL {
            assert!(resource.check(recommend(resource, 12345, h)).is_ok());
        }
    }

    #[test]
    fn output_formats() {
        let advice = st1_advice(Headroom::DEFAULT);
        assert_eq!(
            advice.render(AdviseFormat::Toml),
            "[runtime_env]\nring_task_window = [4, 8, 4, 4]\nring_heap = [1024, 262144, 1024, 1024]\nring_dep_pool = [4, 4, 4, 4]\n"
        );
        // The three formats carry the same values.
        assert_eq!(
            advice.render(AdviseFormat::Env),
            "PTO2_RING_TASK_WINDOW=4,8,4,4\nPTO2_RING_HEAP=1024,262144,1024,1024\nPTO2_RING_DEP_POOL=4,4,4,4\n"
        );
        let json: Value = serde_json::from_str(&advice.render(AdviseFormat::Json)).unwrap();
        assert_eq!(
            json["runtime_env"]["ring_heap"],
            json!([1024, 262144, 1024, 1024])
        );
        assert_eq!(json["rings"][1]["heap"]["recommended"], 262144);
        assert_eq!(json["rings"][1]["heap"]["bytes_delta"], 0);
        assert_eq!(json["rings"][1]["task_window"]["source"], "call_config");
        assert_eq!(json["rings"][2]["peaks"], Value::Null);
        assert_eq!(json["rings"][2]["heap"]["recommended"], 1024);
        assert_eq!(
            json["rings"][2]["heap"]["bytes_delta"],
            1024 - 268435456_i64
        );
    }

    #[test]
    fn many_runs_merge_to_the_largest_demand_and_capacity() {
        let a = ScopeStats::parse(&roomy()).unwrap();
        // A second run of the same label whose ring 1 heap peaked higher.
        let b = ScopeStats::parse(&roomy().replace(
            r#""heap_peak":196608,"heap_largest_alloc":65536"#,
            r#""heap_peak":393216,"heap_largest_alloc":65536"#,
        ))
        .unwrap();
        assert_eq!(a.label.as_deref(), Some("small"));
        let merged = advise_all(&[a.clone(), b.clone()], Headroom::parse("0").unwrap());
        assert_eq!(merged.rings[1].get(Resource::Heap).recommended, 458752);
        assert_eq!(merged.rings[1].peaks.end_records, 2);
        assert!(
            merged.notes.iter().any(|n| n.contains("merged 2 runs")),
            "{:?}",
            merged.notes
        );
        // The order does not matter.
        assert_eq!(
            advise_all(&[b, a], Headroom::parse("0").unwrap()).runtime_env(),
            merged.runtime_env()
        );
    }

    #[test]
    fn table_shows_peak_capacity_advice_and_bytes() {
        let table = st1_advice(Headroom::DEFAULT).render_table();
        assert!(table.contains("headroom 0.25"), "{table}");
        assert!(table.contains("196608 + largest 65536"), "{table}");
        assert!(table.contains("262144 (call_config)"), "{table}");
        assert!(
            !table.contains(" added"),
            "advice never adds bytes to a successful run: {table}"
        );
        assert!(table.contains("1024 (no samples)"), "{table}");
        assert!(table.contains("268434432 saved"), "{table}");
        assert!(table.contains("total: "), "{table}");
    }

    #[test]
    fn failed_run_raises_the_resource_to_a_lower_bound() {
        let meta = ST1.lines().next().unwrap().replace(
            r#""fatal":false"#,
            r#""fatal":true"#,
        ).replace(
            r#""error":null"#,
            r#""error":{"code":2,"name":"HEAP_RING_DEADLOCK","ring":1,"resource":"heap","requested":65536,"used":262144,"recommended_min":400000}"#,
        );
        let advice = advise(
            &ScopeStats::parse(&st1_with_line(1, &meta)).unwrap(),
            Headroom::DEFAULT,
        );
        let heap = advice.rings[1].get(Resource::Heap);
        assert_eq!(heap.recommended, 400000_u64.next_multiple_of(64));
        assert!(heap.lower_bound);
        assert!(!advice.rings[1].get(Resource::TaskWindow).lower_bound);
        assert!(advice.render_table().contains(">= 400000 (lower bound)"));
        assert!(
            advice.notes[0].contains("HEAP_RING_DEADLOCK (2)"),
            "{:?}",
            advice.notes
        );
        // A lower bound never lowers the peak-based value, and it sets unsampled rings.
        let meta = meta
            .replace(
                r#""ring":1,"resource":"heap""#,
                r#""ring":3,"resource":"fanin_spill""#,
            )
            .replace("400000", "5");
        let advice = advise(
            &ScopeStats::parse(&st1_with_line(1, &meta)).unwrap(),
            Headroom::DEFAULT,
        );
        // A failed run keeps every capacity it had (the part that never ran may need it): the
        // advice of a failed run never lowers anything.
        let dep = advice.rings[3].get(Resource::DepPool);
        assert_eq!((dep.recommended, dep.lower_bound), (16384, true));
        assert_eq!(
            advice.runtime_env().ring_dep_pool,
            [16384, 64, 16384, 16384]
        );
    }

    #[test]
    fn failed_run_on_a_non_ring_resource_is_a_note() {
        let meta = ST1.lines().next().unwrap().replace(
            r#""error":null"#,
            r#""error":{"code":11,"name":"TENSORMAP_OVERFLOW","ring":null,"resource":"tensormap","requested":1,"used":64,"recommended_min":65}"#,
        );
        let advice = advise(
            &ScopeStats::parse(&st1_with_line(1, &meta)).unwrap(),
            Headroom::DEFAULT,
        );
        assert_eq!(
            advice.runtime_env(),
            st1_advice(Headroom::DEFAULT).runtime_env()
        );
        assert!(
            advice.notes[0].contains("TensorMap is not sized by runtime_env"),
            "{:?}",
            advice.notes
        );
    }

    /// An end record cut short: not JSON.
    const CUT_END_RECORD: &str = "{\"phase\":\"end\"";

    /// ST1 with line `line` (1-based) edited: `from` replaced by `to`.
    fn st1_edited(line: usize, from: &str, to: &str) -> String {
        st1_with_line(line, &ST1.lines().nth(line - 1).unwrap().replace(from, to))
    }

    /// Each case's error names its line and field, and its message contains the expected text.
    fn assert_malformed(cases: Vec<(String, usize, Option<&str>, &str)>) {
        for (text, line, field, expect) in cases {
            let err = parse_err(&text);
            assert_eq!(err.line, line, "{err}");
            assert_eq!(err.field.as_deref(), field, "{err}");
            assert!(
                err.to_string().contains(expect),
                "{err} does not contain {expect:?}"
            );
            assert!(
                err.to_string().starts_with(&format!("line {line}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn malformed_input_names_line_and_field() {
        let meta = |from, to| st1_edited(1, from, to);
        let cases: Vec<(String, usize, Option<&str>, &str)> = vec![
            (String::new(), 1, None, "empty file"),
            ("\n\n".into(), 1, None, "empty file"),
            ("not json".into(), 1, None, "not valid JSON"),
            ("[1,2]".into(), 1, None, "expected a JSON object"),
            (
                st1_with_line(1, r#"{"phase":"begin"}"#),
                1,
                Some("schema"),
                "metadata record",
            ),
            (
                meta("\"version\":1", "\"version\":2"),
                1,
                Some("version"),
                "unsupported version 2",
            ),
            (
                meta("[16384,8,16384,16384]", "[16384,8,16384]"),
                1,
                Some("task_window_max"),
                "expected 4 entries",
            ),
            (
                meta("[16384,8,16384,16384]", "[16384,6,16384,16384]"),
                1,
                Some("task_window_max[1]"),
                "power of two",
            ),
            (
                meta("\"env\",\"call_config\"", "\"envv\",\"call_config\""),
                1,
                Some("dep_pool_source[0]"),
                "\"envv\"",
            ),
            (
                meta(
                    "\"error\":null",
                    "\"error\":{\"code\":1,\"name\":\"X\",\"resource\":\"disk\"}",
                ),
                1,
                Some("error.resource"),
                "\"disk\"",
            ),
            (
                meta("\"error\":null", "\"error\":{\"name\":\"X\"}"),
                1,
                Some("error.code"),
                "missing field",
            ),
            (
                meta("\"fatal\":false", "\"fatal\":0"),
                1,
                Some("fatal"),
                "true or false",
            ),
        ];
        assert_malformed(cases);
    }

    #[test]
    fn malformed_scope_records_name_line_and_field() {
        let cases: Vec<(String, usize, Option<&str>, &str)> = vec![
            (
                st1_edited(4, "\"heap_peak\":196608", "\"heap_peak\":\"abc\""),
                4,
                Some("heap_peak"),
                "non-negative integer, found string \"abc\"",
            ),
            (
                st1_edited(4, "\"spill_peak\":0,", ""),
                4,
                Some("spill_peak"),
                "missing field",
            ),
            (
                st1_edited(4, "\"dep_pool_peak\":3", "\"dep_pool_peak\":-3"),
                4,
                Some("dep_pool_peak"),
                "found number -3",
            ),
            (
                st1_edited(3, "\"phase\":\"begin\"", "\"phase\":\"middle\""),
                3,
                Some("phase"),
                "\"middle\"",
            ),
            (
                st1_edited(3, "\"ring\":1", "\"ring\":4"),
                3,
                Some("ring"),
                "not a ring",
            ),
            (
                st1_edited(3, "\"ring\":1", "\"ring\":2"),
                3,
                Some("ring"),
                "does not match depth 1",
            ),
            (
                st1_with_line(3, ST1.lines().next().unwrap()),
                3,
                Some("schema"),
                "second metadata record",
            ),
            (st1_with_line(5, CUT_END_RECORD), 5, None, "not valid JSON"),
        ];
        assert_malformed(cases);
    }

    #[test]
    fn invalid_utf8_names_its_line() {
        let mut bytes = ST1.as_bytes().to_vec();
        let third = ST1.lines().take(2).map(|l| l.len() + 1).sum::<usize>();
        bytes[third + 3] = 0xff;
        let err = ScopeStats::parse_bytes(&bytes).unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.to_string().contains("UTF-8"));
        assert!(ScopeStats::parse_bytes(ST1.as_bytes()).is_ok());
    }

    #[test]
    fn blank_lines_are_skipped_but_counted() {
        let text = ST1.replace('\n', "\n\n");
        assert_eq!(
            ScopeStats::parse(&text).unwrap(),
            ScopeStats::parse(ST1).unwrap()
        );
        let bad = st1_with_line(2, "\n{}");
        assert_eq!(parse_err(&bad).line, 3);
    }

    proptest! {
        /// Garbage lines never panic; an error always names a line of the input.
        #[test]
        fn garbage_never_panics(lines in proptest::collection::vec(".{0,80}", 0..6), keep_meta in any::<bool>()) {
            let mut text = if keep_meta { format!("{}\n", ST1.lines().next().unwrap()) } else { String::new() };
            text.push_str(&lines.join("\n"));
            let line_count = text.lines().count().max(1);
            if let Err(e) = ScopeStats::parse(&text) {
                prop_assert!(e.line >= 1 && e.line <= line_count, "{e}");
            }
        }

        /// Truncating or corrupting ST1 at any byte is an error or a valid parse, never a panic.
        #[test]
        fn corrupted_st1_never_panics(cut in 0..ST1.len(), byte in any::<u8>(), at in 0..ST1.len()) {
            let mut bytes = ST1.as_bytes().to_vec();
            bytes[at] = byte;
            bytes.truncate(cut.max(at + 1));
            if let Ok(stats) = ScopeStats::parse_bytes(&bytes) {
                let advice = advise(&stats, Headroom::DEFAULT);
                prop_assert!(advice.runtime_env().validate().is_ok());
                let _ = advice.render(AdviseFormat::Json);
                let _ = advice.render_table();
            }
        }

        /// Arbitrary peaks always give legal values that cover the demand.
        #[test]
        fn recommendations_are_legal_and_cover_demand(demand in any::<u64>(), num in 0u32..400) {
            let h = Headroom::parse(&format!("{num}%")).unwrap();
            for resource in Resource::ALL {
                let v = recommend(resource, demand, h);
                prop_assert!(resource.check(v).is_ok());
                let cap = match resource {
                    Resource::TaskWindow => 1 << 30,
                    Resource::Heap => MAX_TOML_HEAP,
                    Resource::DepPool => (1 << 31) - 1,
                };
                prop_assert!(v >= demand || v == cap, "{resource} {demand} -> {v}");
            }
        }
    }
}
