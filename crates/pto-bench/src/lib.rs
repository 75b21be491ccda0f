//! `pto bench` (BENCHMARKS.md): each benchmark measures pto and, where one exists, a peer in the
//! same process run, and reports one [`Point`] per measured figure — a readable table or, with
//! `--json`, one [`JsonPoint`] per line: `bench`, `case`, `unit`, `median`, `min`, `max`,
//! `runs`; `peer`, `peer_median` and `ratio` = ours / peer where a peer exists; `anchor`
//! where a published figure is printed beside it. Fields are added, never renamed.
//!
//! - [`submit`] — B1, L2 orchestration cost per task (rayon `scope.spawn` and a sequential
//!   loop as peers);
//! - [`metg`] — B2, METG(50%) of stencil_1d on 2 simulated cores (OpenMP tasks, as one graph
//!   and with a `taskwait` every 8 steps, and a rayon bulk-synchronous loop as peers; every
//!   runtime computes with the same calibrated kernel, [`spin`], and the sweeps take turns,
//!   [`turns`]);
//! - [`dispatch`] — B3, L3 dispatch cost, both endpoint modes (thread ping-pong floors);
//! - [`idle`] — B4, CPU of the whole process tree per wall second while idle;
//! - [`footprint`] — B5, device memory of the fan-out scene's three sizings (it runs the
//!   shipped scene through `pto_scene`'s runner);
//! - [`deadlock`] — B6, detection latency of each undersized-ring reproducer and a killed child.
//!
//! Benchmarks are not tests: nothing here asserts a speed. `quick` shrinks every workload so a
//! test can prove each benchmark runs and its output parses.
#![deny(unsafe_code)]

pub mod deadlock;
pub mod dispatch;
pub mod footprint;
pub mod idle;
pub mod metg;
// The one foreign call: the OpenMP peer's C function.
#[allow(unsafe_code)]
pub mod omp;
pub mod spin;
pub mod submit;
pub mod turns;

use std::time::Instant;

use serde::{Deserialize, Deserializer, Serialize};

/// One measured figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub bench: &'static str,
    /// What was measured, e.g. `independent window=1024 n=200000`.
    pub case: String,
    pub unit: &'static str,
    pub stats: Stats,
    /// Peers measured in the same run, each with its median in the same unit; the first is
    /// the one `ratio` compares with.
    pub peers: Vec<Peer>,
    /// A published figure printed beside it, with its source (not measured here).
    pub anchor: Option<String>,
}

/// Another runtime measured in the same run as a point.
#[derive(Clone, Debug, PartialEq)]
pub struct Peer {
    pub name: String,
    /// Its median, in the point's unit (NaN: not measured).
    pub median: f64,
}

impl Point {
    pub fn new(
        bench: &'static str,
        case: impl Into<String>,
        unit: &'static str,
        stats: Stats,
    ) -> Point {
        Point {
            bench,
            case: case.into(),
            unit,
            stats,
            peers: Vec::new(),
            anchor: None,
        }
    }

    /// Adds a peer (the first one added is the one `ratio` compares with).
    pub fn with_peer(mut self, name: impl Into<String>, median: f64) -> Point {
        self.peers.push(Peer {
            name: name.into(),
            median,
        });
        self
    }

    /// Adds a published figure; a second one is appended to the first.
    pub fn with_anchor(mut self, anchor: impl Into<String>) -> Point {
        let anchor = anchor.into();
        self.anchor = Some(match self.anchor.take() {
            Some(first) => format!("{first}; {anchor}"),
            None => anchor,
        });
        self
    }

    /// The point with no fraction above 1, which cannot be: an efficiency measured above 1
    /// means a calibrated kernel ran shorter than its calibration (a few per cent at most).
    /// Such a value is shown as 1, and the anchor says how far above it was measured.
    pub fn capped(mut self) -> Point {
        if self.unit != FRACTION {
            return self;
        }
        let s = &mut self.stats;
        let values = [&mut s.median, &mut s.min, &mut s.max].into_iter();
        let peers = self.peers.iter_mut().map(|p| &mut p.median);
        let mut highest = f64::NEG_INFINITY;
        for v in values.chain(peers).filter(|v| **v > 1.0) {
            highest = highest.max(*v);
            *v = 1.0;
        }
        if highest > 1.0 {
            self.with_anchor(format!(
                "measured up to {highest:.3} and shown as 1: a calibrated kernel ran shorter \
                 than its calibration"
            ))
        } else {
            self
        }
    }

    /// Ours / the first peer.
    pub fn ratio(&self) -> Option<f64> {
        self.peers.first().and_then(|p| self.ratio_to(p))
    }

    /// Ours / `peer`, when both were measured and the peer's median is positive.
    pub fn ratio_to(&self, peer: &Peer) -> Option<f64> {
        let r = self.stats.median / peer.median;
        (peer.median > 0.0 && r.is_finite()).then_some(r)
    }

    /// The line `pto bench --json` prints for this point.
    pub fn to_json(&self) -> JsonPoint {
        let json_peer = |p: &Peer| JsonPeer {
            peer: p.name.clone(),
            peer_median: p.median,
            ratio: self.ratio_to(p),
        };
        JsonPoint {
            bench: self.bench.to_string(),
            case: self.case.clone(),
            unit: self.unit.to_string(),
            median: self.stats.median,
            min: self.stats.min,
            max: self.stats.max,
            runs: self.stats.runs,
            peer: self.peers.first().map(json_peer),
            other_peers: self.peers.iter().skip(1).map(json_peer).collect(),
            anchor: self.anchor.clone(),
        }
    }
}

/// One line of `pto bench --json` ([module docs](self)). A figure no run measured (NaN) is
/// printed as null and read back as NaN.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsonPoint {
    /// The benchmark: `submit`, `metg`, `dispatch`, `idle`, `footprint`, `deadlock`.
    pub bench: String,
    /// What was measured, e.g. `independent window=1024 n=200000`.
    pub case: String,
    /// The unit of `median`, `min`, `max` and `peer_median`, e.g. `us/task`.
    pub unit: String,
    #[serde(deserialize_with = "nan_if_null")]
    pub median: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub min: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max: f64,
    /// Finite values measured (1 for a figure derived from several, such as a slope; 0 when
    /// nothing could be measured).
    pub runs: usize,
    /// The first peer measured in the same run: `peer`, `peer_median`, `ratio`; absent without
    /// one.
    #[serde(flatten)]
    pub peer: Option<JsonPeer>,
    /// Further peers of the same run, each with its own ratio; absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_peers: Vec<JsonPeer>,
    /// A published figure printed beside it, with its source (not measured here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
}

/// The peer of a point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsonPeer {
    /// What the peer is, e.g. `rayon scope.spawn`.
    pub peer: String,
    /// The peer's median, in the point's unit.
    #[serde(deserialize_with = "nan_if_null")]
    pub peer_median: f64,
    /// `median / peer_median`; null when either was not measured or the peer's is not
    /// positive.
    pub ratio: Option<f64>,
}

/// A JSON number, or NaN for the null serde_json prints for it.
fn nan_if_null<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
}

/// The unit of an efficiency (1 at most).
pub const FRACTION: &str = "fraction";

/// Median, minimum and maximum of a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Stats {
    /// The statistics of `values` (at least one).
    pub fn of(values: &[f64]) -> Stats {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Stats {
            median,
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
            runs: n,
        }
    }

    /// One value measured once.
    pub fn one(value: f64) -> Stats {
        Stats::of(&[value])
    }

    /// A cost derived from several measurements (a slope, a difference of medians): one value.
    /// A negative cost cannot be, so one means the noise of the runs exceeded the cost itself;
    /// it is reported as not measured (NaN, `runs` 0) rather than printed.
    pub fn cost(value: f64) -> Stats {
        if value >= 0.0 {
            Stats::one(value)
        } else {
            Stats::of(&[])
        }
    }
}

/// Runs `f` `runs` times and returns the statistics of what it returns.
pub fn sample(runs: usize, mut f: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<Stats> {
    let values = (0..runs.max(1))
        .map(|_| f())
        .collect::<anyhow::Result<Vec<f64>>>()?;
    Ok(Stats::of(&values))
}

/// Columns of the stencil_1d pattern (B1, B2).
pub(crate) const WIDTH: u32 = 16;

/// The tensors of stencil task `(t, j)` over a 2 × WIDTH grid: step t writes row t % 2 and
/// task j reads columns j-1..=j+1 (clamped at the edges) of the other row.
pub(crate) fn stencil_views<'s>(
    grid: &pto_chip::orch::OrchTensor<'s>,
    t: u64,
    j: u32,
) -> Result<
    (
        pto_chip::orch::OrchTensor<'s>,
        pto_chip::orch::OrchTensor<'s>,
    ),
    pto_chip::tensor::TensorError,
> {
    let (row, prev) = ((t % 2) as u32, ((t + 1) % 2) as u32);
    let lo = j.saturating_sub(1);
    let len = (j + 2).min(WIDTH) - lo;
    Ok((
        grid.view(&[1, len], &[prev, lo])?,
        grid.view(&[1, 1], &[row, j])?,
    ))
}

/// Runs `steps` steps of stencil_1d over `grid`, one scope per step: `submit` submits task
/// `(t, j)` with its arguments (INPUT: columns j-1..=j+1 of the other row; OUTPUT_EXISTING: its
/// element), to which it may add scalars.
pub(crate) fn stencil_1d<'r>(
    s: &mut pto_chip::orch::RootScope<'r>,
    grid: &pto_chip::orch::OrchTensor<'r>,
    steps: u64,
    mut submit: impl for<'i> FnMut(
        &mut pto_chip::orch::Scope<'i, 'r>,
        pto_chip::orch::KernelArgs<'i>,
    ) -> pto_chip::orch::OrchResult<()>,
) -> pto_chip::orch::OrchResult<()> {
    for t in 0..steps {
        s.scope(|s| {
            for j in 0..WIDTH {
                let (input, output) = match stencil_views(grid, t, j) {
                    Ok(views) => views,
                    Err(e) => return Err(s.report_fatal(e.to_string())),
                };
                let args = pto_chip::orch::KernelArgs::new()
                    .input(input)
                    .output_existing(output);
                submit(s, args)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Steps per recorded stencil_1d graph (the replay rows of B1 and B2).
pub(crate) const GRAPH_STEPS: u64 = 16;

/// Records [`GRAPH_STEPS`] steps of stencil_1d as a graph over one input, the 2 × WIDTH grid
/// of the run, one nested scope per step. The steps between the first and the last work on a
/// grid allocated inside the graph: the first reads the input's row 1, the last writes it, so
/// consecutive replays chain through the input (the TensorMap orders them) while the steps in
/// between are wired from the recording alone. `submit` submits one task with its arguments.
pub(crate) fn record_stencil_1d(
    mut submit: impl for<'i, 'p> FnMut(
        &mut pto_chip::replay::Recorder<'i, 'p>,
        pto_chip::orch::KernelArgs<'i>,
    ) -> pto_chip::orch::OrchResult<()>,
) -> anyhow::Result<pto_chip::replay::RecordedGraph> {
    use pto_chip::orch::{KernelArgs, TensorCreateInfo};
    let grid = pto_chip::replay::GraphInput::new(&[2, WIDTH], pto_types::DType::F32)?;
    let graph = pto_chip::replay::RecordedGraph::record("stencil_1d", &[grid], |r, ins| {
        let ci = TensorCreateInfo::new(&[2, WIDTH], pto_types::DType::F32);
        let inner = r.alloc_tensors(&[ci])?.tensor(0);
        for t in 0..GRAPH_STEPS {
            let src = if t == 0 { ins[0] } else { inner };
            let dst = if t == GRAPH_STEPS - 1 { ins[0] } else { inner };
            r.scope(|r| {
                for j in 0..WIDTH {
                    // Views of a WIDTH-wide grid cannot fail; the error is reported anyway.
                    let (input, output) =
                        match (stencil_views(&src, t, j), stencil_views(&dst, t, j)) {
                            (Ok((input, _)), Ok((_, output))) => (input, output),
                            (Err(e), _) | (_, Err(e)) => {
                                return Err(r.report_fatal(e.to_string()));
                            }
                        };
                    submit(r, KernelArgs::new().input(input).output_existing(output))?;
                }
                Ok(())
            })?;
        }
        Ok(vec![])
    })?;
    Ok(graph)
}

/// Runs `steps` steps (rounded up to whole graphs) of stencil_1d over `grid` by replaying
/// `graph` (from [`record_stencil_1d`]), one scope per replay.
pub(crate) fn replay_stencil_1d<'r>(
    s: &mut pto_chip::orch::RootScope<'r>,
    grid: &pto_chip::orch::OrchTensor<'r>,
    steps: u64,
    graph: &pto_chip::replay::RecordedGraph,
) -> pto_chip::orch::OrchResult<()> {
    for _ in 0..steps.div_ceil(GRAPH_STEPS) {
        s.scope(|s| s.replay(graph, &[*grid]).map(|_| ()))?;
    }
    Ok(())
}

/// Microseconds since `t`.
pub fn us_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// One benchmark: its name on the command line and what runs it (`quick`: a smoke run).
#[derive(Clone, Copy, Debug)]
pub struct Bench {
    pub name: &'static str,
    pub run: fn(bool) -> anyhow::Result<Vec<Point>>,
}

/// Every benchmark, in the order `all` runs them.
pub const BENCHES: [Bench; 6] = [
    Bench {
        name: "submit",
        run: submit::run,
    },
    Bench {
        name: "metg",
        run: metg::run,
    },
    Bench {
        name: "dispatch",
        run: dispatch::run,
    },
    Bench {
        name: "idle",
        run: idle::run,
    },
    Bench {
        name: "footprint",
        run: footprint::run,
    },
    Bench {
        name: "deadlock",
        run: deadlock::run,
    },
];

/// A benchmark name that `pto bench` does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no benchmark named {name:?} (benchmarks: {}, all)", names())]
pub struct UnknownBench {
    /// The name asked for, shortened for messages.
    pub name: String,
}

/// The benchmarks `name` selects: one by its name, or every one, in order, for `all`.
pub fn select(name: &str) -> Result<&'static [Bench], UnknownBench> {
    if name == "all" {
        return Ok(&BENCHES);
    }
    BENCHES
        .iter()
        .position(|b| b.name == name)
        .map(|i| &BENCHES[i..=i])
        .ok_or_else(|| UnknownBench {
            name: pto_scene::params::cut(name),
        })
}

/// Runs `benches` in order (`quick`: a smoke run of each).
pub fn run(benches: &[Bench], quick: bool) -> anyhow::Result<Vec<Point>> {
    let mut points = Vec::new();
    for b in benches {
        points.extend((b.run)(quick)?.into_iter().map(Point::capped));
    }
    Ok(points)
}

/// `submit, metg, …`: the names of every benchmark, in order.
pub fn names() -> String {
    BENCHES
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the table's columns are, printed above it.
const LEGEND: &str = "median, min, max: over `runs` measured values (runs 1: one value, or a figure derived \
from several, such as a slope or a difference); '-': not measured. unit: of median, min, max and the \
peer's median (us: microseconds; fraction: an efficiency, 1 at most, higher is better). peer: another \
runtime measured in this same run, with its median in the same unit; ratio: ours / peer (for times \
and costs below 1 means pto is faster or cheaper; for a fraction above 1 means pto is more \
efficient). anchor: a published figure to compare with, or how to read the row.";

/// A figure for the table: `-` when it was not measured; three decimals, or three significant
/// digits when three decimals would round a measured figure to zero (a sequential loop's
/// 0.0004 µs per task is not 0.000).
pub(crate) fn figure(v: f64) -> String {
    if !v.is_finite() {
        "-".to_string()
    } else if v != 0.0 && v.abs() < 0.0005 {
        format!("{v:.2e}")
    } else {
        format!("{v:.3}")
    }
}

/// A ratio for the table: two decimals, or [`figure`]'s digits when two would round it to 0.
fn ratio_figure(r: f64) -> String {
    if r < 0.005 {
        figure(r)
    } else {
        format!("{r:.2}")
    }
}

/// The readable table of `points`: the legend, then one line per point (and one more per
/// further peer), grouped by benchmark. The case column is as wide as the longest case.
pub fn render_table(points: &[Point]) -> String {
    use std::fmt::Write as _;
    let width = points
        .iter()
        .map(|p| p.case.chars().count())
        .max()
        .unwrap_or(0)
        .max("case".len());
    let unit_width = points
        .iter()
        .map(|p| p.unit.len())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = format!("{LEGEND}\n");
    let mut bench = "";
    for p in points {
        if p.bench != bench {
            bench = p.bench;
            let _ = writeln!(
                out,
                "\n== {bench}\n{:<width$} {:>10} {:>10} {:>10} {:>4} {:<unit_width$}  {:>11} {:>7}  peer",
                "case", "median", "min", "max", "runs", "unit", "peer median", "ratio"
            );
        }
        let s = &p.stats;
        let head = format!(
            "{:<width$} {:>10} {:>10} {:>10} {:>4} {:<unit_width$}",
            p.case,
            figure(s.median),
            figure(s.min),
            figure(s.max),
            s.runs,
            p.unit,
        );
        if p.peers.is_empty() {
            let _ = writeln!(out, "{}", head.trim_end());
        }
        for (i, peer) in p.peers.iter().enumerate() {
            if i == 0 {
                out.push_str(&head);
            } else {
                let _ = write!(out, "{:pad$}", "", pad = head.chars().count());
            }
            let ratio = p.ratio_to(peer).map_or("-".to_string(), ratio_figure);
            let _ = writeln!(
                out,
                "  {:>11} {:>7}  {}",
                figure(peer.median),
                ratio,
                peer.name
            );
        }
        if let Some(anchor) = &p.anchor {
            let _ = writeln!(out, "    anchor: {anchor}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fraction_above_one_is_shown_as_one_and_said() {
        let p = Point::new("metg", "eff", FRACTION, Stats::of(&[0.97, 1.02, 0.99]))
            .with_peer("rayon", 1.05)
            .with_peer("omp", 0.9)
            .capped();
        assert_eq!(
            (p.stats.median, p.stats.min, p.stats.max),
            (0.99, 0.97, 1.0)
        );
        assert_eq!((p.peers[0].median, p.peers[1].median), (1.0, 0.9));
        let anchor = p.anchor.as_deref().unwrap();
        assert!(
            anchor.contains("measured up to 1.050 and shown as 1"),
            "{anchor}"
        );
        // Within 1, or another unit: unchanged.
        let within = Point::new("metg", "eff", FRACTION, Stats::one(0.5)).capped();
        assert!(within.anchor.is_none() && within.stats.median == 0.5);
        let time = Point::new("metg", "t", "us", Stats::one(3.0)).capped();
        assert_eq!(time.stats.median, 3.0);
    }

    #[test]
    fn the_legend_says_every_column_and_which_way_a_ratio_is_better() {
        for part in [
            "median, min, max",
            "runs",
            "unit",
            "peer",
            "ratio",
            "anchor",
            "fraction",
        ] {
            assert!(LEGEND.contains(part), "{part:?}");
        }
        assert!(LEGEND.contains("for a fraction above 1 means pto is more efficient"));
        assert_eq!(ratio_figure(0.004), "0.004");
        assert_eq!(ratio_figure(0.0001), "1.00e-4");
        assert_eq!(ratio_figure(1.234), "1.23");
    }

    #[test]
    fn stats_and_json_fields() {
        let s = Stats::of(&[3.0, 1.0, 2.0, f64::NAN]);
        assert_eq!((s.median, s.min, s.max, s.runs), (2.0, 1.0, 3.0, 3));
        let p = Point::new("submit", "c", "us/task", s).with_peer("rayon", 1.0);
        let v = serde_json::to_value(p.to_json()).unwrap();
        for field in [
            "bench",
            "case",
            "unit",
            "median",
            "min",
            "max",
            "runs",
            "peer",
            "peer_median",
            "ratio",
        ] {
            assert!(v.get(field).is_some(), "{field}");
        }
        assert_eq!(v["ratio"], 2.0);
    }

    /// Lines `pto bench --json` printed before the output was typed: without a peer, with a
    /// peer and an anchor, with a peer that measured nothing (null), with an anchor only.
    const OLD_LINES: [&str; 4] = [
        r#"{"bench":"submit","case":"independent window=1024 n=2000: CPU per task","unit":"us CPU/task","median":0.0,"min":0.0,"max":0.0,"runs":1}"#,
        r#"{"bench":"submit","case":"independent window=1024 n=2000","unit":"us/task","median":4.6588205,"min":4.6588205,"max":4.6588205,"runs":1,"peer":"rayon scope.spawn","peer_median":0.45041450000000005,"ratio":10.343407017314052,"anchor":"upstream simulator ~4.8 us per no-op kernel task on this machine (issue 12); upstream device orchestrator 0.87 us/task (BENCHMARKS.md B1)"}"#,
        r#"{"bench":"metg","case":"stencil_1d width 16 W=2: METG(50%)","unit":"us","median":72.92057114214049,"min":72.92057114214049,"max":72.92057114214049,"runs":1,"peer":"rayon bulk-synchronous","peer_median":null,"ratio":null,"anchor":"Task Bench (32 cores): MPI 4.6 us, OpenMP tasks 64 us, StarPU 361-739 us (BENCHMARKS.md B2)"}"#,
        r#"{"bench":"dispatch","case":"chip task end to end above the empty L2 run, in-process","unit":"us","median":161.648,"min":161.648,"max":161.648,"runs":1,"anchor":"a run of one chip task 174.86 us minus the chip's empty L2 run 13.21 us"}"#,
    ];

    #[test]
    fn lines_printed_before_read_and_print_back_byte_for_byte() {
        for line in OLD_LINES {
            let point: JsonPoint = serde_json::from_str(line).unwrap();
            assert_eq!(pto_chip::diag::json_text(&point), line);
        }
        let unmeasured: JsonPoint = serde_json::from_str(OLD_LINES[2]).unwrap();
        let peer = unmeasured.peer.unwrap();
        assert!(peer.peer_median.is_nan() && peer.ratio.is_none());
    }

    /// The byte offset of `needle` in each line that has it.
    fn columns(table: &str, needle: &str) -> Vec<usize> {
        table.lines().filter_map(|l| l.find(needle)).collect()
    }

    #[test]
    fn the_table_aligns_long_cases_and_prints_no_impossible_figure() {
        let long = "a case whose name is much longer than fifty characters, as some are";
        let points = [
            Point::new("dispatch", "short", "us", Stats::of(&[1.0, 2.0, 3.0]))
                .with_peer("first peer", 2.0)
                .with_peer("second peer", f64::NAN),
            Point::new("dispatch", long, "us/task", Stats::cost(-0.852)),
            Point::new("dispatch", "derived", "us/task", Stats::cost(0.5)),
        ];
        let table = render_table(&points);
        assert!(table.starts_with("median, min, max:"), "{table}");
        // Every figure column starts at the same offset on every row: the case column is as
        // wide as the longest case.
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("short") || l.starts_with(long) || l.starts_with("derived"))
            .collect();
        let header = table.lines().find(|l| l.starts_with("case")).unwrap();
        let unit_at = header.find("unit").unwrap();
        for row in &rows {
            assert!(
                row.len() > unit_at && row[..unit_at].ends_with(' '),
                "{table}"
            );
        }
        assert_eq!(&rows[0][unit_at..unit_at + 2], "us", "{table}");
        assert_eq!(&rows[1][unit_at..unit_at + 7], "us/task", "{table}");
        // A negative cost is not printed: the row says "-" and runs 0.
        assert!(
            !table.contains("-0.852") && !table.contains("NaN"),
            "{table}"
        );
        assert!(
            rows[1].contains(" - ") && rows[1].contains(" 0 "),
            "{table}"
        );
        // The second peer has its own line, its figures under the first peer's.
        assert_eq!(
            columns(&table, "first peer"),
            columns(&table, "second peer")
        );
        assert!(table.contains("1.00  first peer"), "{table}");
        assert!(table.contains("-       -  second peer"), "{table}");
    }

    #[test]
    fn a_tiny_figure_keeps_its_digits_and_zero_stays_zero() {
        assert_eq!(figure(0.000_412_3), "4.12e-4");
        assert_eq!(figure(0.0005), "0.001");
        assert_eq!(figure(1.234_56), "1.235");
        assert_eq!(figure(0.0), "0.000");
        assert_eq!(figure(f64::NAN), "-");
        let table = render_table(&[Point::new(
            "submit",
            "peer: sequential loop",
            "us/task",
            Stats::of(&[0.000_31, 0.000_29, 0.000_33]),
        )]);
        assert!(
            table.contains("3.10e-4") && !table.contains("0.000"),
            "{table}"
        );
    }

    #[test]
    fn other_peers_round_trip_with_their_own_ratio() {
        let p = Point::new("metg", "c", "us", Stats::one(2.0))
            .with_peer("a", 4.0)
            .with_peer("b", 1.0);
        let json = p.to_json();
        assert_eq!(json.peer.as_ref().unwrap().ratio, Some(0.5));
        assert_eq!(json.other_peers[0].ratio, Some(2.0));
        let text = pto_chip::diag::json_text(&json);
        assert_eq!(serde_json::from_str::<JsonPoint>(&text).unwrap(), json);
    }

    #[test]
    fn points_read_back_equal() {
        let s = Stats::of(&[3.0, 1.0, 2.0]);
        let plain = Point::new("idle", "c", "%", s);
        let full = plain.clone().with_peer("rayon", 4.0).with_anchor("a");
        for point in [plain, full] {
            let json = point.to_json();
            let text = pto_chip::diag::json_text(&json);
            assert_eq!(serde_json::from_str::<JsonPoint>(&text).unwrap(), json);
        }
    }
}
