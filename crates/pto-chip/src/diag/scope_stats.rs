//! Scope stats (CHIP_RUNTIME.md §7): the `scope_stats.jsonl` format, its writer (the chip's
//! `Recorder`) and its one reader ([`read`]).
//!
//! Line 1 is the metadata record, [`Meta`]: `schema` [`SCHEMA`], `version` [`VERSION`], the
//! effective capacities `task_window_max` / `heap_max` / `dep_pool_max` with their `*_source`
//! arrays, and `error`, null or the failed run's [`MetaError`]. Every further line is one
//! [`Sample`], one per scope begin and end, the root scope included.
//!
//! Counters are monotonic (`heap_*` counts cumulative bytes as `lap·H + offset`), so
//! `end − start` is an occupancy and the `*_peak` fields of end records give the high-water
//! marks `pto advise` sizes rings from.
//!
//! The reader also checks what the types cannot say (the schema and version, capacities that
//! are legal values, rings that exist and match the depth, the peaks of every end record).
//! Malformed input is a [`ScopeStatsError`] naming the line and the field; reading never panics.

use std::fmt;

use pto_types::ring_config::resolve::{Resolved, ResolvedSizing, SizeSource};
use pto_types::ring_config::ring_for_depth;
use pto_types::{RING_COUNT, Resource};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use serde_path_to_error::{Path, Segment};

use super::json_line;
use crate::error::{ChipError, ResourceKind};

/// The `schema` of the metadata record.
pub const SCHEMA: &str = "pto.scope_stats";
/// The only `version` written and read.
pub const VERSION: u64 = 1;

/// Most samples kept per run; later ones are counted as dropped.
pub(crate) const MAX_SAMPLES: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

/// The metadata record (line 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub schema: String,
    pub version: u64,
    pub fatal: bool,
    /// Samples not recorded (a run keeps at most 2^20); 0 when absent.
    #[serde(default)]
    pub dropped: u64,
    /// Tasks published.
    pub total: u64,
    pub label: Option<String>,
    pub clusters: u32,
    pub aicpu_thread_num: u32,
    pub task_window_max: [u64; RING_COUNT],
    pub heap_max: [u64; RING_COUNT],
    pub dep_pool_max: [u64; RING_COUNT],
    pub tensormap_max: u64,
    #[serde(with = "source_names")]
    pub task_window_source: [SizeSource; RING_COUNT],
    #[serde(with = "source_names")]
    pub heap_source: [SizeSource; RING_COUNT],
    #[serde(with = "source_names")]
    pub dep_pool_source: [SizeSource; RING_COUNT],
    pub error: Option<MetaError>,
}

/// The failed run's error, in the metadata record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaError {
    pub code: u64,
    pub name: String,
    pub ring: Option<usize>,
    pub resource: Option<ResourceKind>,
    pub requested: Option<u64>,
    pub used: Option<u64>,
    pub recommended_min: Option<u64>,
}

/// Whether a sample opens or closes its scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Begin,
    End,
}

/// One scope boundary on the scope's ring. End records carry the closed scope's peaks, the
/// five `*_peak` / `heap_largest_alloc` fields ([`Sample::end_peaks`]); begin records none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// 1-based over all boundaries, dropped ones included.
    pub seq: u64,
    /// `file:line` of the scope.
    pub site: String,
    pub phase: Phase,
    pub depth: usize,
    /// `min(depth, 3)`.
    pub ring: usize,
    pub task_window_start: u64,
    pub task_window_end: u64,
    pub heap_start: u64,
    pub heap_end: u64,
    pub dep_pool_start: u64,
    pub dep_pool_end: u64,
    /// Live TensorMap entries.
    pub tensormap: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_window_peak: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_peak: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_largest_alloc: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dep_pool_peak: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_peak: Option<u64>,
    /// Microseconds since the run started, to 0.1 µs.
    pub t_us: f64,
    /// End records: the tasks of the scope that replays of recorded graphs submitted, per
    /// graph, in the order the graphs were first replayed in it; absent when none were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graphs: Vec<GraphTasks>,
}

/// Tasks a scope got from replays of one recorded graph ([`Sample::graphs`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphTasks {
    pub graph: String,
    pub tasks: u64,
}

/// Peaks of one scope, reported on its end record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peaks {
    pub task_window: u64,
    pub heap: u64,
    pub heap_largest_alloc: u64,
    pub dep_pool: u64,
    pub spill: u64,
}

impl Peaks {
    /// The peak occupancy of `resource` (without the largest allocation or the spill).
    pub fn occupancy(&self, resource: Resource) -> u64 {
        match resource {
            Resource::TaskWindow => self.task_window,
            Resource::Heap => self.heap,
            Resource::DepPool => self.dep_pool,
        }
    }
}

impl Meta {
    /// The four capacities of `resource`.
    pub fn max(&self, resource: Resource) -> [u64; RING_COUNT] {
        match resource {
            Resource::TaskWindow => self.task_window_max,
            Resource::Heap => self.heap_max,
            Resource::DepPool => self.dep_pool_max,
        }
    }

    /// The capacity of `resource` on `ring` and where it came from.
    pub fn capacity(&self, resource: Resource, ring: usize) -> Resolved {
        let source = match resource {
            Resource::TaskWindow => self.task_window_source,
            Resource::Heap => self.heap_source,
            Resource::DepPool => self.dep_pool_source,
        };
        Resolved {
            value: self.max(resource)[ring],
            source: source[ring],
        }
    }
}

impl Sample {
    /// The peaks of an end record; `None` on begin records.
    pub fn end_peaks(&self) -> Option<Peaks> {
        if self.phase == Phase::Begin {
            return None;
        }
        Some(Peaks {
            task_window: self.task_window_peak?,
            heap: self.heap_peak?,
            heap_largest_alloc: self.heap_largest_alloc?,
            dep_pool: self.dep_pool_peak?,
            spill: self.spill_peak?,
        })
    }

    /// `end − start` of `resource`'s counters: its occupancy at this boundary.
    pub fn occupancy(&self, resource: Resource) -> u64 {
        let (start, end) = match resource {
            Resource::TaskWindow => (self.task_window_start, self.task_window_end),
            Resource::Heap => (self.heap_start, self.heap_end),
            Resource::DepPool => (self.dep_pool_start, self.dep_pool_end),
        };
        end.saturating_sub(start)
    }

    fn peak_fields(&self) -> [(&'static str, Option<u64>); 5] {
        [
            ("task_window_peak", self.task_window_peak),
            ("heap_peak", self.heap_peak),
            ("heap_largest_alloc", self.heap_largest_alloc),
            ("dep_pool_peak", self.dep_pool_peak),
            ("spill_peak", self.spill_peak),
        ]
    }
}

/// `*_source` arrays as the names of [`SizeSource::as_str`] (pto-types has no serde).
mod source_names {
    use pto_types::RING_COUNT;
    use pto_types::ring_config::resolve::SizeSource;
    use serde::de::{Error, Unexpected};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    const ALL: [SizeSource; 3] = [SizeSource::CallConfig, SizeSource::Env, SizeSource::Default];

    pub(super) fn serialize<S: Serializer>(
        sources: &[SizeSource; RING_COUNT],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        sources.map(SizeSource::as_str).serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<[SizeSource; RING_COUNT], D::Error> {
        Ok(<[Name; RING_COUNT]>::deserialize(deserializer)?.map(|n| n.0))
    }

    /// Deserialized one by one, so an error names its index.
    struct Name(SizeSource);

    impl<'de> Deserialize<'de> for Name {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Name, D::Error> {
            let text = String::deserialize(deserializer)?;
            ALL.into_iter()
                .find(|s| s.as_str() == text)
                .map(Name)
                .ok_or_else(|| {
                    let expected = "\"call_config\", \"env\" or \"default\"";
                    D::Error::invalid_value(Unexpected::Str(&text), &expected)
                })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------------

/// Occupancy counters of one ring at a scope boundary.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub(crate) task_window_start: u64,
    pub(crate) task_window_end: u64,
    pub(crate) heap_start: u64,
    pub(crate) heap_end: u64,
    pub(crate) dep_pool_start: u64,
    pub(crate) dep_pool_end: u64,
}

/// Records the samples of one run and renders the file.
#[derive(Default)]
pub(crate) struct Recorder {
    samples: Vec<Sample>,
    dropped: u64,
}

impl Recorder {
    /// Records a scope boundary; `peaks` is `Some` on end records, and `graphs` the tasks
    /// replays gave the scope, per graph.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &mut self,
        site: &str,
        phase: Phase,
        depth: usize,
        ring: usize,
        c: Counters,
        tensormap: usize,
        t_us: f64,
        peaks: Option<Peaks>,
        graphs: &[(std::sync::Arc<str>, u64)],
    ) {
        if self.samples.len() >= MAX_SAMPLES {
            self.dropped += 1;
            return;
        }
        self.samples.push(Sample {
            seq: self.samples.len() as u64 + self.dropped + 1,
            site: site.to_string(),
            phase,
            depth,
            ring,
            task_window_start: c.task_window_start,
            task_window_end: c.task_window_end,
            heap_start: c.heap_start,
            heap_end: c.heap_end,
            dep_pool_start: c.dep_pool_start,
            dep_pool_end: c.dep_pool_end,
            tensormap: tensormap as u64,
            task_window_peak: peaks.map(|p| p.task_window),
            heap_peak: peaks.map(|p| p.heap),
            heap_largest_alloc: peaks.map(|p| p.heap_largest_alloc),
            dep_pool_peak: peaks.map(|p| p.dep_pool),
            spill_peak: peaks.map(|p| p.spill),
            t_us: (t_us * 10.0).round() / 10.0,
            graphs: graphs
                .iter()
                .map(|(graph, tasks)| GraphTasks {
                    graph: graph.to_string(),
                    tasks: *tasks,
                })
                .collect(),
        });
    }

    /// The file: metadata line, then one sample per line.
    pub(crate) fn render(&self, run: &RunInfo<'_>) -> String {
        let mut out = json_line(&run.meta(self.dropped));
        for sample in &self.samples {
            out.push_str(&json_line(sample));
        }
        out
    }
}

/// What the metadata record says about the run.
pub(crate) struct RunInfo<'a> {
    pub(crate) sizing: &'a ResolvedSizing,
    pub(crate) label: Option<&'a str>,
    pub(crate) clusters: u32,
    pub(crate) aicpu_thread_num: u32,
    pub(crate) tensormap_max: usize,
    pub(crate) total: u64,
    pub(crate) error: Option<&'a ChipError>,
}

impl RunInfo<'_> {
    fn meta(&self, dropped: u64) -> Meta {
        let s = self.sizing;
        Meta {
            schema: SCHEMA.to_string(),
            version: VERSION,
            fatal: self.error.is_some(),
            dropped,
            total: self.total,
            label: self.label.map(str::to_string),
            clusters: self.clusters,
            aicpu_thread_num: self.aicpu_thread_num,
            task_window_max: s.values(Resource::TaskWindow),
            heap_max: s.values(Resource::Heap),
            dep_pool_max: s.values(Resource::DepPool),
            tensormap_max: self.tensormap_max as u64,
            task_window_source: s.sources(Resource::TaskWindow),
            heap_source: s.sources(Resource::Heap),
            dep_pool_source: s.sources(Resource::DepPool),
            error: self.error.map(meta_error),
        }
    }
}

fn meta_error(e: &ChipError) -> MetaError {
    MetaError {
        code: u64::from(e.code.code()),
        name: e.code.name().to_string(),
        ring: e.ring,
        resource: e.resource,
        requested: e.requested,
        used: e.used,
        recommended_min: e.recommended_min,
    }
}

// ---------------------------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------------------------

/// A malformed `scope_stats.jsonl`: the 1-based line, the field (if one is at fault) and what
/// is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeStatsError {
    pub line: usize,
    pub field: Option<String>,
    pub problem: String,
}

impl fmt::Display for ScopeStatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "line {}: {field}: {}", self.line, self.problem),
            None => write!(f, "line {}: {}", self.line, self.problem),
        }
    }
}

impl std::error::Error for ScopeStatsError {}

fn problem(line: usize, field: Option<&str>, text: impl Into<String>) -> ScopeStatsError {
    ScopeStatsError {
        line,
        field: field.map(str::to_string),
        problem: text.into(),
    }
}

/// Reads a file: its metadata record and its samples, read as the iterator is advanced. Blank
/// lines are skipped; line numbers count them.
pub fn read(text: &str) -> Result<(Meta, Samples<'_>), ScopeStatsError> {
    let mut samples = Samples {
        lines: text.lines().enumerate(),
    };
    let Some((line, first)) = samples.next_line() else {
        return Err(problem(1, None, "empty file: expected the metadata record"));
    };
    Ok((Meta::from_line(line, first)?, samples))
}

/// [`read`] of a file's bytes; invalid UTF-8 is reported with its line.
pub fn read_bytes(bytes: &[u8]) -> Result<(Meta, Samples<'_>), ScopeStatsError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => read(text),
        Err(e) => {
            let before = &bytes[..e.valid_up_to()];
            let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
            Err(problem(line, None, "not valid UTF-8"))
        }
    }
}

/// The sample lines of a file ([`read`]).
pub struct Samples<'a> {
    lines: std::iter::Enumerate<std::str::Lines<'a>>,
}

impl<'a> Samples<'a> {
    fn next_line(&mut self) -> Option<(usize, &'a str)> {
        let (i, text) = self.lines.find(|(_, l)| !l.trim().is_empty())?;
        Some((i + 1, text))
    }
}

impl Iterator for Samples<'_> {
    type Item = Result<Sample, ScopeStatsError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (line, text) = self.next_line()?;
        Some(Sample::from_line(line, text))
    }
}

impl Meta {
    /// Reads `text`, line `line` of a file, as the metadata record.
    pub fn from_line(line: usize, text: &str) -> Result<Meta, ScopeStatsError> {
        let record = object(line, text)?;
        check_header(line, &record)?;
        let meta: Meta = decode(line, record)?;
        meta.check(line)?;
        Ok(meta)
    }

    fn check(&self, line: usize) -> Result<(), ScopeStatsError> {
        for resource in Resource::ALL {
            for (ring, value) in self.max(resource).into_iter().enumerate() {
                if resource.check(value).is_err() {
                    let field = format!("{}_max[{ring}]", resource.short_name());
                    let text = format!("{value} {}", resource.rule_text());
                    return Err(problem(line, Some(&field), text));
                }
            }
        }
        match self.error.as_ref().and_then(|e| e.ring) {
            Some(ring) => check_ring(line, "error.ring", ring),
            None => Ok(()),
        }
    }
}

impl Sample {
    /// Reads `text`, line `line` of a file, as a sample.
    pub fn from_line(line: usize, text: &str) -> Result<Sample, ScopeStatsError> {
        let record = object(line, text)?;
        if record.contains_key("schema") {
            return Err(problem(
                line,
                Some("schema"),
                "a second metadata record (only line 1 may be metadata)",
            ));
        }
        let sample: Sample = decode(line, record)?;
        sample.check(line)?;
        Ok(sample)
    }

    fn check(&self, line: usize) -> Result<(), ScopeStatsError> {
        check_ring(line, "ring", self.ring)?;
        if self.ring != ring_for_depth(self.depth) {
            return Err(problem(
                line,
                Some("ring"),
                format!(
                    "ring {} does not match depth {} (ring = min(depth, 3))",
                    self.ring, self.depth
                ),
            ));
        }
        if self.t_us < 0.0 {
            let text = format!("expected a non-negative number, found {}", self.t_us);
            return Err(problem(line, Some("t_us"), text));
        }
        let missing = self.peak_fields().into_iter().find(|(_, v)| v.is_none());
        match (self.phase, missing) {
            (Phase::End, Some((field, _))) => Err(problem(line, Some(field), "missing field")),
            _ => Ok(()),
        }
    }
}

fn check_ring(line: usize, field: &str, ring: usize) -> Result<(), ScopeStatsError> {
    if ring < RING_COUNT {
        return Ok(());
    }
    Err(problem(
        line,
        Some(field),
        format!("{ring} is not a ring (0 to 3)"),
    ))
}

/// A line as a JSON object.
fn object(line: usize, text: &str) -> Result<Map<String, Value>, ScopeStatsError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(problem(
            line,
            None,
            format!("expected a JSON object, found {}", describe(&other)),
        )),
        Err(e) => Err(problem(line, None, format!("not valid JSON: {e}"))),
    }
}

/// The schema and version, before the rest: a file of another format or version is reported as
/// such rather than as its first field this version does not know.
fn check_header(line: usize, record: &Map<String, Value>) -> Result<(), ScopeStatsError> {
    let Some(schema) = record.get("schema") else {
        return Err(problem(
            line,
            Some("schema"),
            "missing field (line 1 must be the metadata record)",
        ));
    };
    if schema != SCHEMA {
        let text = format!("expected \"{SCHEMA}\", found {}", describe(schema));
        return Err(problem(line, Some("schema"), text));
    }
    match record.get("version").and_then(Value::as_u64) {
        Some(version) if version != VERSION => Err(problem(
            line,
            Some("version"),
            format!("unsupported version {version} (this pto reads version {VERSION})"),
        )),
        // A missing or mistyped version is left to `decode`, which says what is wrong.
        _ => Ok(()),
    }
}

/// `record` as a `T`; an error names the field at fault and what was found there.
fn decode<T: for<'de> Deserialize<'de>>(
    line: usize,
    record: Map<String, Value>,
) -> Result<T, ScopeStatsError> {
    let record = Value::Object(record);
    serde_path_to_error::deserialize(&record).map_err(|e| {
        let path = e.path().clone();
        decode_error(line, &record, &path, &e.into_inner().to_string())
    })
}

/// serde's `message` about the field at `path` of `record`, in the terms of a JSON file.
fn decode_error(line: usize, record: &Value, path: &Path, message: &str) -> ScopeStatsError {
    let root = path.iter().next().is_none();
    if let Some(name) = message.strip_prefix("missing field `") {
        let name = name.trim_end_matches('`');
        let field = if root {
            name.to_string()
        } else {
            format!("{path}.{name}")
        };
        return problem(line, Some(&field), "missing field");
    }
    let text = match message.split_once(", expected ") {
        Some((_, expected)) => {
            let found = lookup(record, path).map_or_else(|| "nothing".to_string(), describe);
            format!("expected {}, found {found}", json_terms(expected))
        }
        None => message.to_string(),
    };
    let field = (!root).then(|| path.to_string());
    problem(line, field.as_deref(), text)
}

/// serde names what it expected in Rust terms ("u64", "a boolean", "`begin` or `end`"); the
/// person fixing the file reads JSON.
fn json_terms(expected: &str) -> String {
    let term = match expected {
        "u64" | "usize" => "a non-negative integer",
        "u32" => "a non-negative integer below 2^32",
        "f64" => "a number",
        "a boolean" => "true or false",
        "string or map" => "a string",
        // Every list of the format has one entry per ring.
        "an array of length 4" | "fewer elements in array" => "4 entries (one per ring)",
        other if other.starts_with("struct ") => "an object",
        other => return other.replace('`', "\""),
    };
    term.to_string()
}

/// The value at `path` in `record`.
fn lookup<'a>(record: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter()
        .try_fold(record, |value, segment| match segment {
            Segment::Seq { index } => value.get(index),
            Segment::Map { key } => value.get(key),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
}

/// A short description of a JSON value for messages.
fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".to_string(),
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let mut text = value.to_string();
    if text.len() > 40 {
        let cut = (0..=37)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push_str("...");
    }
    format!("{kind} {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two runs' worth of lines as the writer wrote them before the records were typed.
    const OLD_FILE: &str = r#"{"schema":"pto.scope_stats","version":1,"fatal":true,"dropped":0,"total":4,"label":"small","clusters":8,"aicpu_thread_num":4,"task_window_max":[16384,8,16384,16384],"heap_max":[268435456,262144,268435456,268435456],"dep_pool_max":[16384,64,16384,16384],"tensormap_max":65536,"task_window_source":["default","call_config","default","default"],"heap_source":["default","call_config","default","default"],"dep_pool_source":["env","call_config","env","env"],"error":{"code":2,"name":"HEAP_RING_DEADLOCK","ring":1,"resource":"heap","requested":65536,"used":262144,"recommended_min":400000}}
{"seq":1,"site":"vector_example.rs:1","phase":"begin","depth":0,"ring":0,"task_window_start":0,"task_window_end":0,"heap_start":0,"heap_end":0,"dep_pool_start":1,"dep_pool_end":1,"tensormap":0,"t_us":1.0}
{"seq":2,"site":"vector_example.rs:5","phase":"end","depth":1,"ring":1,"task_window_start":0,"task_window_end":4,"heap_start":0,"heap_end":196608,"dep_pool_start":1,"dep_pool_end":4,"tensormap":1,"task_window_peak":4,"heap_peak":196608,"heap_largest_alloc":65536,"dep_pool_peak":3,"spill_peak":0,"t_us":212.5}
"#;

    fn read_all(text: &str) -> Result<(Meta, Vec<Sample>), ScopeStatsError> {
        let (meta, samples) = read(text)?;
        Ok((meta, samples.collect::<Result<_, _>>()?))
    }

    fn error_of(text: &str) -> ScopeStatsError {
        read_all(text).unwrap_err()
    }

    fn sizing() -> ResolvedSizing {
        use pto_types::ring_config::resolve::{RingDefaults, resolve};
        let call = pto_types::RuntimeEnv::default().with_task_window([16, 8, 4, 4]);
        resolve(
            &call,
            &pto_types::EnvSnapshot::default(),
            &RingDefaults::BUILT_IN,
        )
        .unwrap()
    }

    #[test]
    fn written_records_read_back_equal() {
        let sizing = sizing();
        let mut recorder = Recorder::default();
        let c = Counters {
            task_window_end: 3,
            heap_end: 4096,
            dep_pool_start: 1,
            dep_pool_end: 2,
            ..Counters::default()
        };
        recorder.record("a.rs:1", Phase::Begin, 0, 0, c, 0, 0.04, None, &[]);
        let peaks = Peaks {
            task_window: 3,
            heap: 4096,
            heap_largest_alloc: 1024,
            dep_pool: 1,
            spill: 2,
        };
        let graphs = [(std::sync::Arc::from("step"), 6)];
        recorder.record(
            "a.rs:1",
            Phase::End,
            0,
            0,
            c,
            2,
            17.25,
            Some(peaks),
            &graphs,
        );
        let error = ChipError::new(
            pto_types::ErrorCode::HeapRingDeadlock,
            crate::error::Detector::Structural,
            "full",
        );
        let run = RunInfo {
            sizing: &sizing,
            label: Some("t"),
            clusters: 2,
            aicpu_thread_num: 3,
            tensormap_max: 64,
            total: 1,
            error: Some(&error),
        };
        let (meta, samples) = read_all(&recorder.render(&run)).unwrap();
        assert_eq!(meta, run.meta(0));
        assert_eq!(samples, recorder.samples);
        assert_eq!(samples[1].end_peaks(), Some(peaks));
        assert_eq!(samples[0].end_peaks(), None);
        assert_eq!(samples[1].t_us, 17.3);
        let counted = GraphTasks {
            graph: "step".to_string(),
            tasks: 6,
        };
        assert_eq!(
            (samples[0].graphs.len(), &samples[1].graphs[..]),
            (0, &[counted][..])
        );
        assert_eq!(meta.capacity(Resource::TaskWindow, 1).value, 8);
    }

    #[test]
    fn files_written_before_read_and_write_back_byte_for_byte() {
        let (meta, samples) = read_all(OLD_FILE).unwrap();
        assert_eq!(
            meta.error.as_ref().unwrap().resource,
            Some(ResourceKind::Heap)
        );
        assert_eq!(samples[1].phase, Phase::End);
        let mut again = json_line(&meta);
        for s in &samples {
            again.push_str(&json_line(s));
        }
        assert_eq!(again, OLD_FILE);
    }

    /// `OLD_FILE` with `from` replaced by `to` on line `line`.
    fn edited(line: usize, from: &str, to: &str) -> String {
        let mut lines: Vec<String> = OLD_FILE.lines().map(str::to_string).collect();
        assert!(lines[line - 1].contains(from), "{from}");
        lines[line - 1] = lines[line - 1].replace(from, to);
        lines.join("\n")
    }

    /// Each case, `(line, from, to, field, text)`: `OLD_FILE` with `from` replaced by `to` on
    /// `line` is an error naming `line` and `field` whose message contains `text`.
    fn assert_errors(cases: &[(usize, &str, &str, Option<&str>, &str)]) {
        for &(line, from, to, field, text) in cases {
            let err = error_of(&edited(line, from, to));
            assert_eq!((err.line, err.field.as_deref()), (line, field), "{err}");
            assert!(err.to_string().contains(text), "{err} lacks {text:?}");
        }
    }

    #[test]
    fn a_bad_field_names_its_line_and_field() {
        assert_errors(&[
            (
                1,
                r#""total":4"#,
                r#""total":"four""#,
                Some("total"),
                r#"string "four""#,
            ),
            (
                1,
                r#""clusters":8"#,
                r#""clusters":-8"#,
                Some("clusters"),
                "number -8",
            ),
            (
                1,
                r#""label":"small""#,
                r#""label":7"#,
                Some("label"),
                "expected a string",
            ),
            (
                1,
                r#""ring":1,"#,
                r#""ring":"one","#,
                Some("error.ring"),
                r#""one""#,
            ),
            (
                1,
                r#""ring":1,"#,
                r#""ring":4,"#,
                Some("error.ring"),
                "not a ring",
            ),
            (
                1,
                r#""error":{"#,
                r#""error":[1],"x":{"#,
                Some("error"),
                "an object",
            ),
            (
                1,
                r#""heap","#,
                r#""disk","#,
                Some("error.resource"),
                r#""tensormap""#,
            ),
            (
                1,
                r#""env","env"]"#,
                r#""env",7]"#,
                Some("dep_pool_source[3]"),
                "a string",
            ),
            (
                2,
                r#""seq":1"#,
                r#""seq":true"#,
                Some("seq"),
                "found boolean true",
            ),
            (
                2,
                r#""site":"vector_example.rs:1","#,
                "",
                Some("site"),
                "missing field",
            ),
            (
                3,
                r#""phase":"end""#,
                r#""phase":"later""#,
                Some("phase"),
                r#""begin" or "end""#,
            ),
            (
                3,
                r#""phase":"end""#,
                r#""phase":3"#,
                Some("phase"),
                "a string, found number 3",
            ),
            (
                3,
                r#""tensormap":1"#,
                r#""tensormap":[1]"#,
                Some("tensormap"),
                "found array [1]",
            ),
            (
                3,
                r#""t_us":212.5"#,
                r#""t_us":-1.5"#,
                Some("t_us"),
                "non-negative number",
            ),
            (
                3,
                r#""t_us":212.5"#,
                r#""t_us":"soon""#,
                Some("t_us"),
                "expected a number",
            ),
        ]);
    }

    #[test]
    fn huge_or_wrong_typed_numbers_are_errors() {
        let u64_max = "18446744073709551615";
        assert_errors(&[
            (
                3,
                r#""heap_peak":196608"#,
                r#""heap_peak":1e400"#,
                None,
                "not valid JSON",
            ),
            (
                3,
                r#""heap_peak":196608"#,
                r#""heap_peak":18446744073709551616"#,
                Some("heap_peak"),
                "expected a non-negative integer, found number 1.8446744073709552e+19",
            ),
            (
                3,
                r#""depth":1"#,
                r#""depth":1.5"#,
                Some("depth"),
                "integer, found number 1.5",
            ),
            (
                3,
                r#""ring":1"#,
                &format!(r#""ring":{u64_max}"#),
                Some("ring"),
                "is not a ring",
            ),
            (
                3,
                r#""depth":1"#,
                &format!(r#""depth":{u64_max}"#),
                Some("ring"),
                "match depth",
            ),
            (
                1,
                r#""clusters":8"#,
                r#""clusters":4294967296"#,
                Some("clusters"),
                "below 2^32",
            ),
        ]);
    }

    #[test]
    fn lists_have_one_entry_per_ring() {
        for (from, to) in [
            ("[16384,8,16384,16384]", "[16384,8]"),
            ("[16384,8,16384,16384]", "[16384,8,16384,16384,1]"),
        ] {
            let err = error_of(&edited(1, from, to));
            assert_eq!(err.field.as_deref(), Some("task_window_max"), "{err}");
            assert!(
                err.problem
                    .starts_with("expected 4 entries (one per ring), found array"),
                "{err}"
            );
        }
    }
}
