//! `pto bench` (BENCHMARKS.md): each benchmark measures pto and, where one exists, a peer in the
//! same process run, and reports one [`Point`] per measured figure — a readable table or one
//! JSON object per line with stable field names (`bench`, `case`, `unit`, `median`, `min`,
//! `max`, `runs`, and `peer`, `peer_median`, `ratio` = ours / peer where a peer exists).
//!
//! - [`submit`] — B1, L2 orchestration cost per task (rayon `scope.spawn` and a sequential
//!   loop as peers);
//! - [`metg`] — B2, METG(50%) of stencil_1d on 2 simulated cores (a rayon bulk-synchronous
//!   loop as peer);
//! - [`dispatch`] — B3, L3 dispatch cost, both endpoint modes (thread ping-pong floors);
//! - [`idle`] — B4, CPU of the whole process tree per wall second while idle;
//! - [`footprint`] — B5, device memory of the fan-out scene's three sizings (it runs the
//!   shipped scene through `pto_scene`'s runner);
//! - [`deadlock`] — B6, detection latency of each undersized-ring reproducer and a killed child.
//!
//! Benchmarks are not tests: nothing here asserts a speed. `quick` shrinks every workload so a
//! test can prove each benchmark runs and its output parses.
#![forbid(unsafe_code)]

pub mod deadlock;
pub mod dispatch;
pub mod footprint;
pub mod idle;
pub mod metg;
pub mod submit;

use std::time::Instant;

use serde_json::{Map, Value, json};

/// One measured figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub bench: &'static str,
    /// What was measured, e.g. `independent window=1024 n=200000`.
    pub case: String,
    pub unit: &'static str,
    pub stats: Stats,
    /// The peer measured in the same run, with its median in the same unit.
    pub peer: Option<(String, f64)>,
    /// A published figure printed beside it, with its source (not measured here).
    pub anchor: Option<String>,
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
            peer: None,
            anchor: None,
        }
    }

    pub fn with_peer(mut self, name: impl Into<String>, median: f64) -> Point {
        self.peer = Some((name.into(), median));
        self
    }

    pub fn with_anchor(mut self, anchor: impl Into<String>) -> Point {
        self.anchor = Some(anchor.into());
        self
    }

    /// Ours / peer.
    pub fn ratio(&self) -> Option<f64> {
        self.peer
            .as_ref()
            .filter(|(_, m)| *m > 0.0)
            .map(|(_, m)| self.stats.median / m)
    }

    /// The JSON object of this point (field names are stable: add, never rename).
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("bench".into(), json!(self.bench));
        o.insert("case".into(), json!(self.case));
        o.insert("unit".into(), json!(self.unit));
        o.insert("median".into(), json!(self.stats.median));
        o.insert("min".into(), json!(self.stats.min));
        o.insert("max".into(), json!(self.stats.max));
        o.insert("runs".into(), json!(self.stats.runs));
        if let Some((peer, median)) = &self.peer {
            o.insert("peer".into(), json!(peer));
            o.insert("peer_median".into(), json!(median));
            o.insert("ratio".into(), json!(self.ratio()));
        }
        if let Some(anchor) = &self.anchor {
            o.insert("anchor".into(), json!(anchor));
        }
        Value::Object(o)
    }
}

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

/// The benchmark called `name`, if there is one.
pub fn find(name: &str) -> Option<&'static Bench> {
    BENCHES.iter().find(|b| b.name == name)
}

/// Runs benchmark `name` (`all`: every one, in order).
pub fn run(name: &str, quick: bool) -> anyhow::Result<Vec<Point>> {
    if name == "all" {
        let mut all = Vec::new();
        for b in &BENCHES {
            all.extend((b.run)(quick)?);
        }
        return Ok(all);
    }
    match find(name) {
        Some(b) => (b.run)(quick),
        None => anyhow::bail!("no benchmark named {name:?} (benchmarks: {}, all)", names()),
    }
}

/// `submit, metg, …`: the names of every benchmark.
pub fn names() -> String {
    BENCHES
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The readable table of `points`: one line per point, grouped by benchmark.
pub fn render_table(points: &[Point]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut bench = "";
    for p in points {
        if p.bench != bench {
            bench = p.bench;
            let _ = writeln!(
                out,
                "\n== {bench}\n{:<44} {:>12} {:>12} {:>12} {:<8} {:<26} {:>12} {:>8}",
                "case", "median", "min", "max", "unit", "peer", "peer median", "ratio"
            );
        }
        let (peer, peer_median, ratio) = match (&p.peer, p.ratio()) {
            (Some((name, m)), r) => (
                name.as_str(),
                format!("{m:.3}"),
                r.map_or("-".into(), |r| format!("{r:.2}")),
            ),
            (None, _) => ("-", "-".to_string(), "-".to_string()),
        };
        let _ = writeln!(
            out,
            "{:<44} {:>12.3} {:>12.3} {:>12.3} {:<8} {:<26} {:>12} {:>8}",
            p.case, p.stats.median, p.stats.min, p.stats.max, p.unit, peer, peer_median, ratio
        );
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
    fn stats_and_json_fields() {
        let s = Stats::of(&[3.0, 1.0, 2.0, f64::NAN]);
        assert_eq!((s.median, s.min, s.max, s.runs), (2.0, 1.0, 3.0, 3));
        let p = Point::new("submit", "c", "us/task", s).with_peer("rayon", 1.0);
        let v = p.to_json();
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
}
