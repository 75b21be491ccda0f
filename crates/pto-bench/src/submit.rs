//! B1: L2 orchestration cost per task (`pto bench submit`, BENCHMARKS.md B1).
//!
//! One chip run submits N tasks in four shapes — independent no-op AIV tasks, dummy tasks
//! (no kernel), a 1-D stencil of width 16 (each task reads 3 entries of the previous step's
//! row), a chain (one INOUT tensor) — in scopes of 64 tasks, with window 1024 (back-pressure)
//! and 262144 (none). Reported per task, end to end (the `run` call), in µs. Also: the fixed
//! cost of an empty run, and independent tasks on chips of 1, 2, 8 and 24 clusters (the cost
//! must not grow with the simulated size). Peers in the same run: rayon's `scope.spawn` of a
//! no-op closure per task, and a sequential loop through a `black_box`.
//!
//! The `replayed` shapes submit the same patterns by replaying a recorded graph
//! (`pto_chip::replay`), one scope per replay: independent (64 tasks per graph), chain (64
//! INOUT tasks over a tensor allocated in the graph, chained through the input by the first and
//! the last), stencil_1d (16 steps per graph, the steps between the first and the last over a
//! grid allocated in the graph). The ratio rows divide a replayed median by the inferred one
//! of the same run.

use std::hint::black_box;
use std::time::Instant;

use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, OrchTensor, RootScope, TensorCreateInfo};
use pto_chip::replay::{GraphInput, RecordedGraph};
use pto_chip::{ChipSpec, ChipWorker, RunContext};
use pto_types::ring_config::env::EnvSource;
use pto_types::{BufferId, CallConfig, DType, RuntimeEnv, TaskArgs, Tensor, WarCheck};

use crate::{Point, Stats, sample, us_since};

/// Tasks per scope (a root scope may not hold more tasks than its window).
const CHUNK: u64 = 64;
use crate::WIDTH;

fn noop() -> pto_chip::kernel::KernelRef {
    pto_kernels::link();
    pto_chip::kernel::find_kernel("bench.noop").expect("pto-kernels registers bench.noop")
}

fn independent<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let n: u64 = a.scalar(0);
    let k = noop();
    let mut left = n;
    while left > 0 {
        let chunk = left.min(CHUNK);
        s.scope(|s| {
            for _ in 0..chunk {
                s.submit_aiv(k, KernelArgs::new())?;
            }
            Ok(())
        })?;
        left -= chunk;
    }
    Ok(())
}

fn dummies<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let n: u64 = a.scalar(0);
    let mut left = n;
    while left > 0 {
        let chunk = left.min(CHUNK);
        s.scope(|s| {
            for _ in 0..chunk {
                s.submit_dummy(KernelArgs::new())?;
            }
            Ok(())
        })?;
        left -= chunk;
    }
    Ok(())
}

fn empty<'r>(_: &mut RootScope<'r>, _: &OrchArgs<'r>) -> OrchResult<()> {
    Ok(())
}

fn chain<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let n: u64 = a.scalar(0);
    let (k, x) = (noop(), a.tensor(0));
    let mut left = n;
    while left > 0 {
        let chunk = left.min(CHUNK);
        s.scope(|s| {
            for _ in 0..chunk {
                s.submit_aiv(k, KernelArgs::new().inout(x))?;
            }
            Ok(())
        })?;
        left -= chunk;
    }
    Ok(())
}

/// Step t writes row t % 2 of a 2 × WIDTH grid; task (t, j) reads columns j-1..=j+1 of the
/// other row (clamped at the edges: 2 or 3 producers).
fn stencil<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let n: u64 = a.scalar(0);
    let k = noop();
    let steps = n.div_ceil(u64::from(WIDTH));
    crate::stencil_1d(s, &a.tensor(0), steps, |s, args| {
        s.submit_aiv(k, args)?;
        Ok(())
    })
}

/// CHUNK independent no-op tasks, as one inferred scope submits them.
fn record_independent() -> anyhow::Result<RecordedGraph> {
    let k = noop();
    Ok(RecordedGraph::record("independent", &[], |r, _| {
        for _ in 0..CHUNK {
            r.submit_aiv(k, KernelArgs::new())?;
        }
        Ok(vec![])
    })?)
}

/// A chain of CHUNK INOUT tasks over a tensor allocated in the graph; the first also reads the
/// input and the last writes it, so replays chain through the input.
fn record_chain() -> anyhow::Result<RecordedGraph> {
    let k = noop();
    let x = GraphInput::new(&[1], DType::F32)?;
    Ok(RecordedGraph::record("chain", &[x], |r, ins| {
        let t = r
            .alloc_tensors(&[TensorCreateInfo::new(&[1], DType::F32)])?
            .tensor(0);
        for i in 0..CHUNK {
            let mut args = KernelArgs::new().inout(t);
            if i == 0 {
                args = args.input(ins[0]);
            }
            if i == CHUNK - 1 {
                args = args.inout(ins[0]);
            }
            r.submit_aiv(k, args)?;
        }
        Ok(vec![])
    })?)
}

/// The recorded graphs of the replay shapes, recorded once per process.
struct Graphs {
    independent: RecordedGraph,
    chain: RecordedGraph,
    stencil: RecordedGraph,
}

static GRAPHS: std::sync::OnceLock<Graphs> = std::sync::OnceLock::new();

fn graphs() -> &'static Graphs {
    GRAPHS.get().expect("recorded before the runs")
}

fn record_graphs() -> anyhow::Result<()> {
    if GRAPHS.get().is_none() {
        let k = noop();
        let graphs = Graphs {
            independent: record_independent()?,
            chain: record_chain()?,
            stencil: crate::record_stencil_1d(|r, args| r.submit_aiv(k, args).map(|_| ()))?,
        };
        let _ = GRAPHS.set(graphs);
    }
    Ok(())
}

/// `n / CHUNK` replays of a graph of CHUNK tasks, one scope each.
fn replay_chunks<'r>(
    s: &mut RootScope<'r>,
    a: &OrchArgs<'r>,
    graph: &RecordedGraph,
    inputs: usize,
) -> OrchResult<()> {
    let n: u64 = a.scalar(0);
    let ins: Vec<OrchTensor<'r>> = (0..inputs).map(|i| a.tensor(i)).collect();
    for _ in 0..n / CHUNK {
        s.scope(|s| s.replay(graph, &ins).map(|_| ()))?;
    }
    Ok(())
}

fn independent_replayed<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    replay_chunks(s, a, &graphs().independent, 0)
}

fn chain_replayed<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    replay_chunks(s, a, &graphs().chain, 1)
}

fn stencil_replayed<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let n: u64 = a.scalar(0);
    let steps = n.div_ceil(u64::from(WIDTH));
    crate::replay_stencil_1d(s, &a.tensor(0), steps, &graphs().stencil)
}

/// stencil_1d's submissions as dummy tasks: the orchestrator's submit path alone (views,
/// TensorMap, binding, publication, scopes) on one thread, with no executor sharing its cache
/// lines. Against `stencil_1d`, what running the tasks on another thread adds.
fn stencil_dummies<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let n: u64 = a.scalar(0);
    let steps = n.div_ceil(u64::from(WIDTH));
    crate::stencil_1d(s, &a.tensor(0), steps, |s, args| {
        s.submit_dummy(args)?;
        Ok(())
    })
}

/// One shape: its orchestration and the entry tensor it needs.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    orch: pto_chip::orch::OrchFn,
    grid: bool,
    /// `CallConfig::track_war` and `war_check` of the run (off unless the case measures it, so
    /// that debug and release builds measure the same engine).
    track_war: bool,
    war_check: WarCheck,
}

impl Shape {
    const fn new(name: &'static str, orch: pto_chip::orch::OrchFn, grid: bool) -> Shape {
        Shape {
            name,
            orch,
            grid,
            track_war: false,
            war_check: WarCheck::Off,
        }
    }

    const fn tracked(self, name: &'static str) -> Shape {
        Shape {
            name,
            track_war: true,
            ..self
        }
    }

    const fn checked(self, name: &'static str) -> Shape {
        Shape {
            name,
            war_check: WarCheck::Report,
            ..self
        }
    }
}

const SHAPES: [Shape; 11] = [
    Shape::new("independent", independent, false),
    Shape::new("dummy", dummies, false),
    Shape::new("stencil_1d", stencil, true),
    Shape::new("stencil_1d dummy", stencil_dummies, true),
    Shape::new("chain", chain, false),
    Shape::new("independent replayed", independent_replayed, false),
    Shape::new("stencil_1d replayed", stencil_replayed, true),
    Shape::new("chain replayed", chain_replayed, false),
    // Write-after-read: stencil_1d overwrites row t % 2 while step t - 1's tasks may still read
    // it, so tracking adds up to 3 edges per task; the chain has no plain reads at all.
    Shape::new("stencil_1d", stencil, true).tracked("stencil_1d track_war"),
    Shape::new("chain", chain, false).tracked("chain track_war"),
    Shape::new("stencil_1d", stencil, true).checked("stencil_1d war_check=report"),
];

/// Each pair of cases compared by a ratio row: (case, baseline).
const RATIOS: [(&str, &str); 7] = [
    ("stencil_1d", "stencil_1d dummy"),
    ("independent replayed", "independent"),
    ("stencil_1d replayed", "stencil_1d"),
    ("chain replayed", "chain"),
    ("stencil_1d track_war", "stencil_1d"),
    ("chain track_war", "chain"),
    ("stencil_1d war_check=report", "stencil_1d"),
];

thread_local! {
    /// The orchestration [`timed`] runs, and how long its last run took (ns).
    static TIMED: std::cell::Cell<(Option<pto_chip::orch::OrchFn>, u64)> =
        const { std::cell::Cell::new((None, 0)) };
}

/// Runs the installed orchestration and records how long it took: the orchestrator's own
/// cost (it runs on the thread that called `run`), without the wait for the last tasks.
fn timed<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (orch, _) = TIMED.with(|t| t.get());
    let started = Instant::now();
    let result = orch.expect("installed")(s, a);
    let ns = started.elapsed().as_nanos() as u64;
    TIMED.with(|t| t.set((orch, ns)));
    result
}

/// µs per task of one run of `shape` with `n` tasks and window `window`: end to end, and in
/// the orchestration function.
fn run_timed(chip: &ChipWorker, shape: &Shape, n: u64, window: u64) -> anyhow::Result<(f64, f64)> {
    TIMED.with(|t| t.set((Some(shape.orch), 0)));
    let end_to_end = run_once(
        chip,
        &Shape {
            orch: timed,
            ..*shape
        },
        n,
        window,
    )?;
    let orch_us = TIMED.with(|t| t.get().1) as f64 / 1e3 / n as f64;
    Ok((end_to_end, orch_us))
}

/// µs per task of one run of `shape` with `n` tasks and window `window`.
fn run_once(chip: &ChipWorker, shape: &Shape, n: u64, window: u64) -> anyhow::Result<f64> {
    let buf = pto_chip::memory::HostMemory::new((2 * WIDTH as usize) * 4)?;
    let id = BufferId {
        owner_uid: 0xBE7C,
        buffer_id: 1,
        generation: 0,
    };
    let shape_dims: &[u32] = if shape.grid { &[2, WIDTH] } else { &[1] };
    let t = Tensor::contiguous(buf.buffer_ref(id), shape_dims, DType::F32)?;
    let args = TaskArgs::new().inout(&t).scalar(n);
    let cfg = CallConfig {
        track_war: shape.track_war,
        war_check: shape.war_check,
        ..CallConfig::with_runtime_env(
            RuntimeEnv::default()
                .with_task_window(window)
                .with_heap(1 << 20)
                .with_dep_pool(window.min(1 << 20)),
        )
    };
    let started = Instant::now();
    chip.run_fn(shape.orch, &args, &cfg, &RunContext::default())?;
    Ok(us_since(started) / n as f64)
}

/// One case of `pto bench submit` on a chip of its own, to run again and again while profiling
/// (`examples/submit_point.rs`).
pub struct SubmitCase {
    chip: ChipWorker,
    shape: Shape,
}

impl SubmitCase {
    /// The case named `name`: a `pto bench submit` case name without its window and task
    /// count, e.g. `independent` or `stencil_1d replayed`.
    pub fn new(name: &str) -> anyhow::Result<SubmitCase> {
        let shape = *SHAPES.iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
            anyhow::anyhow!("no submit case {name:?}; the cases: {}", names.join(", "))
        })?;
        record_graphs()?;
        let chip = ChipWorker::new(ChipSpec::default(), EnvSource::empty())?;
        Ok(SubmitCase { chip, shape })
    }

    /// One run of `n` tasks with window `window`: µs per task end to end, and in the
    /// orchestration function.
    pub fn run(&self, n: u64, window: u64) -> anyhow::Result<(f64, f64)> {
        run_timed(&self.chip, &self.shape, n, window)
    }
}

/// The peers: µs per task of rayon `scope.spawn` and of a sequential loop.
fn peers(n: u64, runs: usize) -> anyhow::Result<(Stats, Stats)> {
    let rayon = sample(runs, || {
        let started = Instant::now();
        rayon::scope(|s| {
            for _ in 0..n {
                s.spawn(|_| black_box(()));
            }
        });
        Ok(us_since(started) / n as f64)
    })?;
    let sequential = sample(runs, || {
        let started = Instant::now();
        for i in 0..n {
            black_box(i);
        }
        Ok(us_since(started) / n as f64)
    })?;
    Ok((rayon, sequential))
}

/// The fixed cost of a run that submits nothing (µs): binding, the root scope, the report.
fn empty_run(chip: &ChipWorker, runs: usize) -> anyhow::Result<Stats> {
    let cfg = CallConfig::default();
    chip.run_fn(empty, &TaskArgs::new(), &cfg, &RunContext::default())?;
    sample(runs, || {
        let started = Instant::now();
        chip.run_fn(empty, &TaskArgs::new(), &cfg, &RunContext::default())?;
        Ok(us_since(started))
    })
}

/// Independent no-op AIV tasks on chips of 1 to 24 clusters (3 to 72 simulated cores) on the
/// same host: with logical cores the cost per task should not depend on the simulated size.
fn by_clusters(n: u64, runs: usize) -> anyhow::Result<Vec<Point>> {
    let mut points = Vec::new();
    let mut medians = Vec::new();
    for clusters in [1u32, 2, 8, 24] {
        let spec = ChipSpec {
            clusters,
            ..ChipSpec::default()
        };
        let chip = ChipWorker::new(spec, EnvSource::empty())?;
        let stats = sample(runs, || run_once(&chip, &SHAPES[0], n, 262_144))?;
        medians.push(stats.median);
        points.push(Point::new(
            "submit",
            format!("independent clusters={clusters} n={n}"),
            "us/task",
            stats,
        ));
    }
    let (lo, hi) = medians
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &m| {
            (lo.min(m), hi.max(m))
        });
    points.push(Point::new(
        "submit",
        "independent, clusters 1 to 24: slowest / fastest median",
        "ratio",
        Stats::one(hi / lo),
    ));
    Ok(points)
}

pub fn run(quick: bool) -> anyhow::Result<Vec<Point>> {
    // Whole graphs: n is a multiple of CHUNK and of GRAPH_STEPS × WIDTH tasks.
    let (n, runs) = if quick {
        (2_048u64, 1)
    } else {
        (204_800u64, 3)
    };
    record_graphs()?;
    let chip = ChipWorker::new(ChipSpec::default(), EnvSource::empty())?;
    let (rayon, sequential) = peers(n, runs)?;
    let mut points = Vec::new();
    let mut medians: Vec<(&str, u64, f64)> = Vec::new();
    let mut orch_medians: Vec<(&str, u64, f64)> = Vec::new();
    for shape in &SHAPES {
        for window in [1024u64, 262_144] {
            let cpu_before = crate::idle::process_cpu_s();
            let mut orch_us = Vec::new();
            let stats = sample(runs, || {
                let (end_to_end, orch) = run_timed(&chip, shape, n, window)?;
                orch_us.push(orch);
                Ok(end_to_end)
            })?;
            let cpu = crate::idle::process_cpu_s() - cpu_before;
            points.push(Point::new(
                "submit",
                format!("{} window={window} n={n}: CPU per task", shape.name),
                "us CPU/task",
                Stats::one(cpu * 1e6 / (n as f64 * stats.runs as f64)),
            ));
            let orch = Stats::of(&orch_us);
            orch_medians.push((shape.name, window, orch.median));
            points.push(Point::new(
                "submit",
                format!("{} window={window} n={n}: orchestration", shape.name),
                "us/task",
                orch,
            ));
            let case = format!("{} window={window} n={n}", shape.name);
            medians.push((shape.name, window, stats.median));
            let mut p = Point::new("submit", case, "us/task", stats)
                .with_peer("rayon scope.spawn", rayon.median);
            if shape.name == "independent" && window == 1024 {
                p = p.with_anchor(
                    "upstream simulator ~4.8 us per no-op kernel task on this machine (issue 12); upstream device orchestrator 0.87 us/task (BENCHMARKS.md B1)",
                );
            }
            points.push(p);
        }
    }
    for (case, baseline) in RATIOS {
        for window in [1024u64, 262_144] {
            let median = |of: &[(&str, u64, f64)], shape: &str| {
                of.iter()
                    .find(|m| m.0 == shape && m.1 == window)
                    .map_or(f64::NAN, |m| m.2)
            };
            for (what, of) in [("end to end", &medians), ("orchestration", &orch_medians)] {
                points.push(Point::new(
                    "submit",
                    format!("window={window}: {case} / {baseline}, {what}"),
                    "ratio",
                    Stats::one(median(of, case) / median(of, baseline)),
                ));
            }
        }
    }
    points.push(Point::new(
        "submit",
        "empty run (fixed cost)",
        "us",
        empty_run(&chip, if quick { 20 } else { 200 })?,
    ));
    points.extend(by_clusters(n / 4, runs)?);
    // What the chip costs once the runs are over: its threads must park (idle ~0 %).
    let idle = std::time::Duration::from_millis(if quick { 200 } else { 1000 });
    let before = crate::idle::process_cpu_s();
    std::thread::sleep(idle);
    let idle_cpu = (crate::idle::process_cpu_s() - before) / idle.as_secs_f64();
    points.push(Point::new(
        "submit",
        "idle CPU after the runs",
        "% of a core",
        Stats::one(idle_cpu * 100.0),
    ));
    points.push(Point::new(
        "submit",
        "peak RSS of the process",
        "MiB",
        Stats::one(crate::idle::peak_rss_mib()),
    ));
    points.push(Point::new(
        "submit",
        format!("peer: rayon scope.spawn n={n}"),
        "us/task",
        rayon,
    ));
    points.push(Point::new(
        "submit",
        format!("peer: sequential loop n={n}"),
        "us/task",
        sequential,
    ));
    Ok(points)
}
