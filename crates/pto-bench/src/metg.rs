//! B2: minimum effective task granularity, METG(50%) (`pto bench metg`, BENCHMARKS.md B2).
//!
//! One chip with one cluster (W = 2 AIV cores) and 2 AICPU threads runs `stencil_1d` of width
//! 16 (each task reads 3 entries of the previous step) for S steps; every task is the kernel
//! `bench.spin(g)`, which computes for g ([`crate::spin`]: a loop calibrated with every core
//! busy right before each measured run, for every runtime alike). Efficiency =
//! (tasks × g) / (wall × W). g sweeps from 100 µs down by 1.5× until efficiency drops below
//! 50 %; METG is interpolated (log g) between the last point above and the first below, each
//! of those two (and the 100 µs start) the median of three runs; one run decides every other
//! grain. Task
//! Bench's METG, the task granularity wall × W / tasks at the same crossing, is reported beside
//! it. The peers, swept the same way in the same process: the same pattern as `omp task depend`
//! tasks on an OpenMP team of W threads ([`crate::omp`]; GCC's libgomp here), issued as one graph and with a
//! `taskwait` every 8 steps (libgomp's best on this pattern), and as bulk-synchronous steps on
//! a rayon pool of W threads (one parallel loop per step). The replayed row runs the same
//! pattern by replaying a recorded graph of 16 steps (`pto_chip::replay`), one scope each,
//! and compares with OpenMP's taskwait form and rayon.
//!
//! Every sweep (pto at W = 2, at W = 1 and replayed, each on a chip of its own; rayon; both
//! OpenMP forms) runs on a thread of its own and they take turns, one measured run each,
//! every run starting on a quiet process ([`crate::turns`]): a slow stretch of the VM meets
//! every runtime alike, and no runtime's idle threads spin into another's run.

use std::time::Instant;

use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{OrchArgs, OrchResult, RootScope};
use pto_chip::replay::RecordedGraph;
use pto_chip::{ChipSpec, ChipWorker, RunContext};
use pto_types::ring_config::env::EnvSource;
use pto_types::{BufferId, CallConfig, DType, RuntimeEnv, TaskArgs, Tensor, WarCheck};
use rayon::prelude::*;

use crate::omp::Issue;
use crate::turns::{Seat, SweepFn};
use crate::{Point, Stats};

use crate::WIDTH;
const W: f64 = 2.0;

fn kernel_spin(ctx: &mut KernelCtx<'_>) {
    let ns: u64 = ctx.scalar(0);
    crate::spin::spin(ns);
}

pto_chip::register_kernel!(
    /// Computes for `scalar(0)` ns ([`crate::spin`], BENCHMARKS.md B2).
    SPIN = "bench.spin", CoreType::Aiv, kernel_spin
);
pto_chip::register_kernel!(
    /// `bench.spin` on the cluster's one AIC core (W = 1).
    SPIN_AIC = "bench.spin_aic", CoreType::Aic, kernel_spin
);

/// `stencil_1d`: scalar 0 = steps, scalar 1 = g (ns), scalar 2 = 1 for the AIC core (W = 1),
/// 0 for the two AIV cores (W = 2); the grid is 2 × WIDTH.
fn stencil<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (steps, g, aic): (u64, u64, u64) = (a.scalar(0), a.scalar(1), a.scalar(2));
    crate::stencil_1d(s, &a.tensor(0), steps, |s, args| {
        let args = args.scalar(g);
        if aic == 1 {
            s.submit_aic(SPIN_AIC, args)?;
        } else {
            s.submit_aiv(SPIN, args)?;
        }
        Ok(())
    })
}

/// pto's efficiency at grain `g_ns` over `steps` steps on `w` cores (2: AIV, 1: AIC).
pub fn pto_efficiency(chip: &ChipWorker, steps: u64, g_ns: u64, w: f64) -> anyhow::Result<f64> {
    grid_efficiency(chip, stencil, steps, g_ns, w)
}

/// The efficiency of one run of `orch` (scalars: steps, g, 1 for the AIC core) over a fresh
/// 2 × WIDTH grid, on `w` cores.
fn grid_efficiency(
    chip: &ChipWorker,
    orch: pto_chip::orch::OrchFn,
    steps: u64,
    g_ns: u64,
    w: f64,
) -> anyhow::Result<f64> {
    let buf = pto_chip::memory::HostMemory::new((2 * WIDTH as usize) * 4)?;
    let id = BufferId {
        owner_uid: 0xBE7D,
        buffer_id: 1,
        generation: 0,
    };
    let t = Tensor::contiguous(buf.buffer_ref(id), &[2, WIDTH], DType::F32)?;
    let aic = u64::from(w < 2.0);
    let args = TaskArgs::new()
        .inout(&t)
        .scalar(steps)
        .scalar(g_ns)
        .scalar(aic);
    // Every write-after-read pair of stencil_1d is ordered by its read-after-write edges (task
    // (t+1, j) reads what the readers of its cell wrote), so the check has nothing to find:
    // off, so that debug and release builds measure the same engine.
    let cfg = CallConfig {
        war_check: WarCheck::Off,
        ..CallConfig::with_runtime_env(
            RuntimeEnv::default()
                .with_task_window(256)
                .with_heap(1 << 16)
                .with_dep_pool(1024),
        )
    };
    let started = Instant::now();
    chip.run_fn(orch, &args, &cfg, &RunContext::default())?;
    let wall = started.elapsed().as_secs_f64();
    Ok((steps * u64::from(WIDTH)) as f64 * g_ns as f64 * 1e-9 / (wall * w))
}

thread_local! {
    /// The stencil graph of the last grain replayed, by grain: recorded once per grain.
    static GRAPH: std::cell::RefCell<Option<(u64, RecordedGraph)>> =
        const { std::cell::RefCell::new(None) };
}

/// The recorded stencil graph whose tasks spin `g_ns` (W = 2).
fn graph_for(g_ns: u64) -> anyhow::Result<RecordedGraph> {
    if let Some((g, graph)) = GRAPH.with(|c| c.borrow().clone())
        && g == g_ns
    {
        return Ok(graph);
    }
    let graph =
        crate::record_stencil_1d(|r, args| r.submit_aiv(SPIN, args.scalar(g_ns)).map(|_| ()))?;
    GRAPH.with(|c| *c.borrow_mut() = Some((g_ns, graph.clone())));
    Ok(graph)
}

/// `stencil_1d` by replay: scalar 0 = steps, scalar 1 = g (ns); W = 2.
fn stencil_replayed<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (steps, g): (u64, u64) = (a.scalar(0), a.scalar(1));
    let Ok(graph) = graph_for(g) else {
        return Err(s.report_fatal("recording the stencil graph failed"));
    };
    crate::replay_stencil_1d(s, &a.tensor(0), steps, &graph)
}

/// pto's efficiency at grain `g_ns` over `steps` steps (rounded up to whole graphs) replaying
/// a recorded graph of the pattern (W = 2).
pub fn pto_replayed_efficiency(chip: &ChipWorker, steps: u64, g_ns: u64) -> anyhow::Result<f64> {
    let steps = steps.div_ceil(crate::GRAPH_STEPS) * crate::GRAPH_STEPS;
    graph_for(g_ns)?;
    grid_efficiency(chip, stencil_replayed, steps, g_ns, W)
}

/// The rayon bulk-synchronous peer's efficiency at grain `g_ns`.
fn rayon_efficiency(pool: &rayon::ThreadPool, steps: u64, g_ns: u64) -> f64 {
    let started = Instant::now();
    pool.install(|| {
        for _ in 0..steps {
            (0..WIDTH)
                .into_par_iter()
                .for_each(|_| crate::spin::spin(g_ns));
        }
    });
    let wall = started.elapsed().as_secs_f64();
    (steps * u64::from(WIDTH)) as f64 * g_ns as f64 * 1e-9 / (wall * W)
}

/// Where a sweep crossed 50 % efficiency, by both definitions in use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Crossing {
    /// The kernel time (µs) at which efficiency is 50 %: `pto bench metg`'s METG.
    pub kernel_us: f64,
    /// Task Bench's METG at the same point: the task granularity, wall × workers / tasks (µs);
    /// at exactly 50 % it is twice the kernel time.
    pub granularity_us: f64,
    /// The sweep stayed at or above 50 % down to its finest grain: METG is at most this.
    pub at_most: bool,
}

/// One sweep: the crossing (`None` when 10 ms is still below 50 %) and the efficiency at
/// 100 µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sweep {
    pub crossing: Option<Crossing>,
    pub at_100: f64,
}

/// Interpolates log(g) and log(granularity) linearly in efficiency between (g1, e1) and
/// (g2, e2) at 50 %; granularity = g / e (wall × workers / tasks).
fn at_half(g1: f64, e1: f64, g2: f64, e2: f64) -> Crossing {
    let f = if (e1 - e2).abs() > f64::EPSILON {
        (e1 - 0.5) / (e1 - e2)
    } else {
        0.5
    };
    let log_lerp = |a: f64, b: f64| (a.ln() + f * (b.ln() - a.ln())).exp();
    Crossing {
        kernel_us: log_lerp(g1, g2) / 1000.0,
        granularity_us: log_lerp(g1 / e1, g2 / e2) / 1000.0,
        at_most: false,
    }
}

/// One grain of a sweep: its efficiency, and whether that is already the median of
/// [`SETTLE_RUNS`] runs.
#[derive(Clone, Copy)]
struct SweepPoint {
    g: f64,
    e: f64,
    settled: bool,
}

impl SweepPoint {
    /// Makes `e` the median of [`SETTLE_RUNS`] runs (this one among them).
    fn settle(
        &mut self,
        efficiency: &mut impl FnMut(u64) -> anyhow::Result<f64>,
    ) -> anyhow::Result<()> {
        if !self.settled {
            let mut runs = vec![self.e];
            for _ in 1..SETTLE_RUNS {
                runs.push(efficiency(self.g as u64)?);
            }
            runs.sort_by(f64::total_cmp);
            self.e = runs[runs.len() / 2];
            self.settled = true;
        }
        Ok(())
    }
}

/// Runs per point at the two grains that bracket 50 %: one run of a few tens of ms is at the
/// mercy of one hiccup of a noisy VM, and one low point ended the sweep a grain early (pto's
/// METG on the 2-vCPU VM came out 2.2 or 4.1 µs in the same hour).
const SETTLE_RUNS: usize = 3;

/// METG(50%) from `efficiency(g_ns)`: from 100 µs down by 1.5× while efficiency stays at
/// least 50 %, or up by 1.5× (to 10 ms) while it is below. The start is settled as the median
/// of [`SETTLE_RUNS`] runs: it is the "efficiency at 100 µs" figure and sets the direction,
/// and its first run is the process's first of that runtime (threads started, kernels not yet
/// seen to return). Each further grain is run once until one lands on the other side of 50 %;
/// that one and the grain before it are then settled too, and the sweep goes on, or steps
/// back, until two settled neighbours bracket 50 %. A sweep that stays above 50 % down to
/// 0.1 µs reports its last point, which the rows name as an upper bound. Finer grains would
/// not tell more: the kernel's call costs a few ns, and rayon's steps on two threads level off
/// at ~50 % below ~0.3 µs (a step runs mostly on one thread at little overhead), so where
/// they first dip under 50 % is noise.
fn sweep(mut efficiency: impl FnMut(u64) -> anyhow::Result<f64>) -> anyhow::Result<Sweep> {
    let start = 100_000.0f64;
    let mut origin = SweepPoint {
        g: start,
        e: efficiency(start as u64)?,
        settled: false,
    };
    origin.settle(&mut efficiency)?;
    let first = origin.e;
    let down = first >= 0.5;
    let (step, limit): (f64, f64) = if down { (1.0 / 1.5, 100.0) } else { (1.5, 1e7) };
    // On the side the sweep started on.
    let near = |e: f64| (e >= 0.5) == down;
    let done = |crossing| Sweep {
        crossing,
        at_100: first,
    };
    // The grains tried so far on the near side, the start first.
    let mut path = vec![origin];
    loop {
        let last = *path.last().expect("the start stays on the path");
        let next = last.g * step;
        if (step < 1.0 && next < limit) || (step > 1.0 && next > limit) {
            // Never crossed 50 %: the last grain tried bounds it.
            return Ok(done(down.then(|| Crossing {
                kernel_us: last.g / 1000.0,
                granularity_us: last.g / last.e / 1000.0,
                at_most: true,
            })));
        }
        let mut far = SweepPoint {
            g: next,
            e: efficiency(next as u64)?,
            settled: false,
        };
        if near(far.e) {
            path.push(far);
            continue;
        }
        far.settle(&mut efficiency)?;
        if near(far.e) {
            // One low (or high) run: the sweep goes on from the settled grain.
            path.push(far);
            continue;
        }
        // Settle the near neighbour; if it lands on the far side too, the crossing is
        // earlier: step back (the start is never moved, so the direction holds).
        loop {
            let n = path.len();
            let near_point = path.last_mut().expect("the start stays on the path");
            near_point.settle(&mut efficiency)?;
            if n == 1 || near(near_point.e) {
                let c = at_half(near_point.g, near_point.e, far.g, far.e);
                return Ok(done(Some(c)));
            }
            far = path.pop().expect("n > 1");
        }
    }
}

/// Steps per point: about `budget` of CPU per point, within `range`.
fn steps_for(g_ns: u64, budget_ns: f64, range: (u64, u64)) -> u64 {
    ((budget_ns / (f64::from(WIDTH) * g_ns as f64)) as u64).clamp(range.0, range.1)
}

/// The OpenMP-tasks peer's efficiency at grain `g_ns` (W = 2 threads).
fn omp_efficiency(steps: u64, g_ns: u64, issue: Issue) -> anyhow::Result<f64> {
    let steps_u32 = u32::try_from(steps)?;
    let wall = crate::omp::stencil_1d_wall(steps_u32, WIDTH, g_ns, W as i32, issue)?;
    Ok((steps * u64::from(WIDTH)) as f64 * g_ns as f64 * 1e-9 / (wall * W))
}

/// One measured run of `runtime` at grain `g_ns` in `seat`'s turn, the kernel calibrated with
/// every core busy just before it ([`crate::spin::calibrate`]): a grain is g of computing under
/// the load of the run. W = 1 runs too: their kernels run on one core while the orchestrator
/// keeps the other busy. Each run's efficiency is logged (target `pto::bench`, debug level:
/// `pto bench metg -vv`): on a noisy host the sweeps' paths show what moved a crossing.
fn measured(
    seat: &Seat<'_>,
    runtime: &str,
    g_ns: u64,
    run: impl FnOnce() -> anyhow::Result<f64>,
) -> anyhow::Result<f64> {
    let efficiency = seat.take(|| {
        crate::spin::calibrate(W as usize);
        run()
    })?;
    tracing::debug!(target: "pto::bench", runtime, grain_ns = g_ns, efficiency, "metg run");
    Ok(efficiency)
}

/// The peers' names, as the rows print them.
const OPENMP: &str = concat!(
    "OpenMP tasks, whole graph (",
    env!("PTO_OPENMP_RUNTIME"),
    ", omp task depend)"
);
const OPENMP_WAIT: &str = concat!(
    "OpenMP tasks, taskwait every 8 steps (",
    env!("PTO_OPENMP_RUNTIME"),
    ")"
);
const RAYON: &str = "rayon bulk-synchronous";
/// pto's sweeps, as the run log names them.
const PTO: &str = "pto W=2";
const PTO_W1: &str = "pto W=1";
const PTO_REPLAYED: &str = "pto W=2 replayed";

/// The chip B2 runs on: one cluster (W = 2 AIV cores, or its AIC core for W = 1), 2 AICPU
/// threads.
pub fn chip() -> anyhow::Result<ChipWorker> {
    let spec = ChipSpec {
        clusters: 1,
        max_aicpu_threads: 2,
        ..ChipSpec::default()
    };
    Ok(ChipWorker::new(spec, EnvSource::empty())?)
}

/// Full rounds of every sweep in a full run: each figure is the median of the rounds, their
/// range its min and max. One round's METG moved between 1.0 and 1.6 µs for the same build
/// within minutes on the reference VM: the efficiency curve is flat near 50 %, so a few per
/// cent of noise in one run moves the crossing far.
const ROUNDS: usize = 3;

/// One round: every runtime's sweep, taken in turns.
struct Round {
    ours: Sweep,
    ours_w1: Sweep,
    replayed: Sweep,
    rayon: Sweep,
    /// `Err` in a build without OpenMP.
    openmp: anyhow::Result<Sweep>,
    openmp_wait: anyhow::Result<Sweep>,
}

/// One runtime's sweep of a round, if it was measured.
type Pick = fn(&Round) -> Option<&Sweep>;

impl Round {
    fn ours(&self) -> Option<&Sweep> {
        Some(&self.ours)
    }

    fn ours_w1(&self) -> Option<&Sweep> {
        Some(&self.ours_w1)
    }

    fn replayed(&self) -> Option<&Sweep> {
        Some(&self.replayed)
    }

    fn rayon(&self) -> Option<&Sweep> {
        Some(&self.rayon)
    }

    fn openmp(&self) -> Option<&Sweep> {
        self.openmp.as_ref().ok()
    }

    fn openmp_wait(&self) -> Option<&Sweep> {
        self.openmp_wait.as_ref().ok()
    }
}

/// The chips and the rayon pool a round measures on, kept across rounds.
struct Runtimes {
    /// A chip per pto sweep: runs of one leave no state in the chip another sweep runs on.
    chips: [ChipWorker; 3],
    pool: rayon::ThreadPool,
}

fn round(rt: &Runtimes, budget: f64, range: (u64, u64)) -> anyhow::Result<Round> {
    let steps = |g| steps_for(g, budget, range);
    let ([w2, w1, replaying], pool) = (&rt.chips, &rt.pool);
    let sweeps: Vec<SweepFn<'_, anyhow::Result<Sweep>>> = vec![
        Box::new(|seat| sweep(|g| measured(seat, PTO, g, || pto_efficiency(w2, steps(g), g, W)))),
        Box::new(|seat| {
            let steps = |g| steps_for(g, budget / 2.0, range);
            sweep(|g| measured(seat, PTO_W1, g, || pto_efficiency(w1, steps(g), g, 1.0)))
        }),
        Box::new(|seat| {
            sweep(|g| {
                measured(seat, PTO_REPLAYED, g, || {
                    pto_replayed_efficiency(replaying, steps(g), g)
                })
            })
        }),
        Box::new(|seat| {
            sweep(|g| measured(seat, RAYON, g, || Ok(rayon_efficiency(pool, steps(g), g))))
        }),
        // A build without OpenMP reports the peer as unmeasured (NaN) and says why in the
        // anchor.
        Box::new(|seat| {
            sweep(|g| {
                measured(seat, OPENMP, g, || {
                    omp_efficiency(steps(g), g, Issue::Graph)
                })
            })
        }),
        Box::new(|seat| {
            let every = Issue::TaskwaitEvery(8);
            sweep(|g| measured(seat, OPENMP_WAIT, g, || omp_efficiency(steps(g), g, every)))
        }),
    ];
    let [ours, ours_w1, replayed, rayon, openmp, openmp_wait]: [anyhow::Result<Sweep>; 6] =
        crate::turns::in_turns(sweeps)
            .try_into()
            .unwrap_or_else(|_| unreachable!("one result per sweep"));
    Ok(Round {
        ours: ours?,
        ours_w1: ours_w1?,
        replayed: replayed?,
        rayon: rayon?,
        openmp,
        openmp_wait,
    })
}

/// The efficiency reference: the same tasks one after another on one thread (W = 1), the
/// kernel calibrated on that thread alone.
fn sequential_efficiency(budget: f64, range: (u64, u64)) -> f64 {
    let seq_steps = steps_for(100_000, budget, range);
    crate::turns::settle();
    crate::spin::calibrate(1);
    let started = Instant::now();
    for _ in 0..seq_steps * u64::from(WIDTH) {
        crate::spin::spin(100_000);
    }
    (seq_steps * u64::from(WIDTH)) as f64 * 1e-4 / started.elapsed().as_secs_f64()
}

/// The runtimes of `points` (name, sweep) whose sweep stayed at or above 50 % down to its
/// finest grain in some rounds, where their METG is an upper bound; empty if none did.
fn bound_note(rounds: &[Round], points: &[(&str, Pick)]) -> String {
    points
        .iter()
        .filter_map(|&(name, pick)| {
            let k = rounds
                .iter()
                .filter(|r| pick(r).and_then(|s| s.crossing).is_some_and(|c| c.at_most))
                .count();
            (k > 0).then(|| {
                format!(
                    "{name}: at or above 50 % down to the finest grain in {k} of {} rounds, \
                     where its figure is an upper bound",
                    rounds.len()
                )
            })
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why an OpenMP peer was not measured in some rounds (a build without OpenMP, or a run that
/// failed): per peer, in how many rounds and the first error; empty when both were measured in
/// every round.
fn openmp_note(rounds: &[Round]) -> String {
    type Outcome = fn(&Round) -> &anyhow::Result<Sweep>;
    let peers: [(&str, Outcome); 2] = [(OPENMP_WAIT, |r| &r.openmp_wait), (OPENMP, |r| &r.openmp)];
    let notes: Vec<(&str, String)> = peers
        .into_iter()
        .filter_map(|(name, result)| {
            let mut errors = rounds.iter().filter_map(|r| result(r).as_ref().err());
            let first = errors.next()?;
            let why = format!(
                "not measured in {} of {} rounds: {first}",
                1 + errors.count(),
                rounds.len()
            );
            Some((name, why))
        })
        .collect();
    match &notes[..] {
        [(_, a), (_, b)] if a == b => format!("both OpenMP peers {a}"),
        _ => notes
            .iter()
            .map(|(name, why)| format!("{name}: {why}"))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// Not reached below 10 ms (or not measured): NaN, printed as "-" and JSON null.
fn kernel(s: &Sweep) -> f64 {
    s.crossing.map_or(f64::NAN, |c| c.kernel_us)
}

fn granularity(s: &Sweep) -> f64 {
    s.crossing.map_or(f64::NAN, |c| c.granularity_us)
}

pub fn run(quick: bool) -> anyhow::Result<Vec<Point>> {
    let (budget, range, rounds) = if quick {
        (2e7, (2, 10), 1)
    } else {
        (1.6e9, (10, 1000), ROUNDS)
    };
    let rt = Runtimes {
        chips: [chip()?, chip()?, chip()?],
        pool: rayon::ThreadPoolBuilder::new()
            .num_threads(W as usize)
            .build()?,
    };
    let rounds = (0..rounds)
        .map(|_| round(&rt, budget, range))
        .collect::<anyhow::Result<Vec<Round>>>()?;
    let sequential = sequential_efficiency(budget, range);
    // A figure over the rounds; a peer's is its median (NaN when it was not measured).
    let over = |pick: Pick, figure: &dyn Fn(&Sweep) -> f64| {
        let values: Vec<f64> = rounds
            .iter()
            .map(|r| pick(r).map_or(f64::NAN, figure))
            .collect();
        Stats::of(&values)
    };
    let peer = |pick: Pick, figure: &dyn Fn(&Sweep) -> f64| over(pick, figure).median;
    let case = format!("stencil_1d width {WIDTH} W=2");
    let anchored = |p: Point, note: &str| {
        if note.is_empty() {
            p
        } else {
            p.with_anchor(note)
        }
    };
    let omp_note = openmp_note(&rounds);
    // One W = 2 figure of pto and of every peer.
    let compare = |what: &str, unit: &'static str, figure: &dyn Fn(&Sweep) -> f64| {
        let p = Point::new(
            "metg",
            format!("{case}: {what}"),
            unit,
            over(Round::ours, figure),
        )
        .with_peer(OPENMP_WAIT, peer(Round::openmp_wait, figure))
        .with_peer(OPENMP, peer(Round::openmp, figure))
        .with_peer(RAYON, peer(Round::rayon, figure));
        anchored(p, &omp_note)
    };
    let all = [
        ("pto", Round::ours as Pick),
        (OPENMP_WAIT, Round::openmp_wait),
        (OPENMP, Round::openmp),
        (RAYON, Round::rayon),
    ];
    // A runtime that never fell below 50 % has a METG of at most its finest grain: say so.
    let w2_bounds = bound_note(&rounds, &all);
    let replay_bounds = bound_note(
        &rounds,
        &[
            ("pto replayed", Round::replayed as Pick),
            (RAYON, Round::rayon),
            (OPENMP_WAIT, Round::openmp_wait),
        ],
    );
    let w1_bounds = bound_note(&rounds, &[("pto", Round::ours_w1 as Pick)]);
    let metg = anchored(compare("METG(50%), kernel time", "us", &kernel), &w2_bounds);
    let task_bench = compare("METG(50%), Task Bench granularity", "us", &granularity)
        .with_anchor("Task Bench's definition (wall x workers / tasks at 50 % efficiency); Task Bench on 32 cores: MPI 4.6 us, OpenMP tasks 64 us, StarPU 361-739 us (BENCHMARKS.md B2)");
    let task_bench = anchored(task_bench, &w2_bounds);
    let replayed_case = format!("{case}, replayed (graphs of {} steps)", crate::GRAPH_STEPS);
    let replayed_row = |what: &str, unit: &'static str, figure: &dyn Fn(&Sweep) -> f64| {
        let p = Point::new(
            "metg",
            format!("{replayed_case}: {what}"),
            unit,
            over(Round::replayed, figure),
        )
        .with_peer(RAYON, peer(Round::rayon, figure))
        .with_peer(OPENMP_WAIT, peer(Round::openmp_wait, figure));
        anchored(p, &omp_note)
    };
    let w1_case = format!("stencil_1d width {WIDTH} W=1 (the AIC core)");
    let w1_row = |what: &str, figure: &dyn Fn(&Sweep) -> f64| {
        let p = Point::new(
            "metg",
            format!("{w1_case}: {what}"),
            "us",
            over(Round::ours_w1, figure),
        );
        anchored(p, &w1_bounds)
    };
    let replay_metg = anchored(
        replayed_row("METG(50%), kernel time", "us", &kernel),
        &replay_bounds,
    );
    Ok(vec![
        metg,
        task_bench,
        replay_metg,
        anchored(
            replayed_row("METG(50%), Task Bench granularity", "us", &granularity),
            &replay_bounds,
        ),
        compare("efficiency at 100 us", crate::FRACTION, &|s: &Sweep| {
            s.at_100
        }),
        w1_row("METG(50%), kernel time", &kernel),
        w1_row("METG(50%), Task Bench granularity", &granularity),
        Point::new(
            "metg",
            "sequential loop (W=1): efficiency at 100 us",
            crate::FRACTION,
            Stats::one(sequential),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_that_never_fell_below_half_is_named_as_a_bound() {
        // Efficiency 0.9 at every grain: the sweep ends at its finest grain, a bound.
        let floor = sweep(|_| Ok(0.9)).unwrap();
        let crossed = sweep(|g| Ok(g as f64 / (g as f64 + 5_000.0))).unwrap();
        assert!(floor.crossing.unwrap().at_most);
        assert!(!crossed.crossing.unwrap().at_most);
        let round = |rayon: Sweep| Round {
            ours: crossed,
            ours_w1: crossed,
            replayed: crossed,
            rayon,
            openmp: Err(anyhow::anyhow!("not built")),
            openmp_wait: Ok(crossed),
        };
        let rounds = [round(floor), round(crossed), round(floor)];
        let points = [("pto", Round::ours as Pick), (RAYON, Round::rayon)];
        let note = bound_note(&rounds, &points);
        assert!(note.starts_with(RAYON), "{note}");
        assert!(note.contains("in 2 of 3 rounds"), "{note}");
        assert!(!note.contains("pto"), "{note}");
        assert_eq!(bound_note(&rounds[1..2], &points), "");
    }

    #[test]
    fn every_round_an_openmp_peer_was_not_measured_in_is_said() {
        let crossed = sweep(|g| Ok(g as f64 / (g as f64 + 5_000.0))).unwrap();
        let round = |wait_fails: bool| Round {
            ours: crossed,
            ours_w1: crossed,
            replayed: crossed,
            rayon: crossed,
            openmp: Err(anyhow::anyhow!("OpenMP was not built")),
            openmp_wait: if wait_fails {
                Err(anyhow::anyhow!("libgomp failed"))
            } else {
                Ok(crossed)
            },
        };
        // The taskwait form failed in a later round only: still said, with its count.
        let note = openmp_note(&[round(false), round(true), round(false)]);
        assert!(
            note.contains(&format!(
                "{OPENMP_WAIT}: not measured in 1 of 3 rounds: libgomp failed"
            )),
            "{note}"
        );
        assert!(
            note.contains(&format!(
                "{OPENMP}: not measured in 3 of 3 rounds: OpenMP was not built"
            )),
            "{note}"
        );
        let not_built = openmp_note(&[round(false), round(false)]);
        assert!(not_built.starts_with(OPENMP) && not_built.contains("2 of 2 rounds"));
        assert!(!not_built.contains(OPENMP_WAIT), "{not_built}");
        let both = Round {
            openmp_wait: Err(anyhow::anyhow!("OpenMP was not built")),
            ..round(false)
        };
        assert_eq!(
            openmp_note(&[both]),
            "both OpenMP peers not measured in 1 of 1 rounds: OpenMP was not built"
        );
        let measured = Round {
            openmp: Ok(crossed),
            ..round(false)
        };
        assert_eq!(openmp_note(&[measured]), "");
    }

    #[test]
    fn sweeping_finds_the_half_efficiency_grain() {
        // Efficiency g / (g + 50 µs): 50 % exactly at 50 µs.
        let model = |g: u64| Ok(g as f64 / (g as f64 + 50_000.0));
        let s = sweep(model).unwrap();
        let c = s.crossing.unwrap();
        assert!((c.kernel_us - 50.0).abs() < 5.0, "{c:?}");
        // Task Bench's granularity at 50 %: g / 0.5 = 100 µs.
        assert!((c.granularity_us - 100.0).abs() < 10.0, "{c:?}");
        assert!((s.at_100 - 2.0 / 3.0).abs() < 1e-9);
        // Below 50 % at 100 µs: the sweep goes up (400 µs here).
        let slow = |g: u64| Ok(g as f64 / (g as f64 + 400_000.0));
        let c = sweep(slow).unwrap().crossing.unwrap();
        assert!((c.kernel_us - 400.0).abs() < 40.0, "{c:?}");
        // Never below 50 %: the last grain tried (under 1 µs) bounds it.
        let fast = |_: u64| Ok(0.9);
        let c = sweep(fast).unwrap().crossing.unwrap();
        assert!(c.kernel_us < 1.0 && (c.granularity_us - c.kernel_us / 0.9).abs() < 1e-9);
    }

    /// `g / (g + half)`, except the first run at the grain nearest `odd_g` (within 1 %),
    /// which returns `odd_e`.
    fn with_one_odd_run(
        half: f64,
        odd_g: f64,
        odd_e: f64,
    ) -> impl FnMut(u64) -> anyhow::Result<f64> {
        let mut seen = false;
        move |g: u64| {
            let g = g as f64;
            if !seen && (g / odd_g - 1.0).abs() < 0.01 {
                seen = true;
                return Ok(odd_e);
            }
            Ok(g / (g + half))
        }
    }

    #[test]
    fn one_odd_run_near_the_crossing_does_not_move_it() {
        let grains = |n: i32| 100_000.0 / 1.5f64.powi(n);
        // A low run at 19.75 µs, far above the 5 µs crossing: the sweep goes on past it.
        let c = sweep(with_one_odd_run(5_000.0, grains(4), 0.1))
            .unwrap()
            .crossing
            .unwrap();
        assert!((c.kernel_us - 5.0).abs() < 0.5, "{c:?}");
        // A high run just below the 10 µs crossing (8.78 µs): the next grain is below, the
        // settled 8.78 µs is below too, and the sweep steps back to bracket 10 µs.
        let c = sweep(with_one_odd_run(10_000.0, grains(6), 0.9))
            .unwrap()
            .crossing
            .unwrap();
        assert!((c.kernel_us - 10.0).abs() < 1.0, "{c:?}");
        // The runs a sweep takes: one per grain, and two more at the start and at each of the
        // bracket's ends.
        let mut runs = 0;
        let counted = |g: u64| {
            runs += 1;
            Ok(g as f64 / (g as f64 + 5_000.0))
        };
        sweep(counted).unwrap();
        assert_eq!(runs, 9 + 3 * (SETTLE_RUNS - 1));
    }

    #[test]
    fn a_slow_first_run_does_not_decide_the_efficiency_at_100_us() {
        // The process's first run at 100 µs is low (warm-up); the figure is the settled one.
        let s = sweep(with_one_odd_run(5_000.0, 100_000.0, 0.7)).unwrap();
        let steady = 100_000.0 / 105_000.0;
        assert!((s.at_100 - steady).abs() < 1e-9, "{}", s.at_100);
        // A first run below 50 % does not turn the sweep upwards either.
        let s = sweep(with_one_odd_run(5_000.0, 100_000.0, 0.3)).unwrap();
        let c = s.crossing.unwrap();
        assert!((c.kernel_us - 5.0).abs() < 0.5, "{c:?}");
    }
}
