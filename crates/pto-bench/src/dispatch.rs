//! B3: L3 dispatch cost (`pto bench dispatch`, BENCHMARKS.md B3).
//!
//! A Worker with one chip and one sub worker, in both endpoint modes, runs k trivial tasks per
//! run (k ∈ {0, 1, 4, 16, 64, 256, 1024}, each k after two unmeasured runs of it, the two
//! largest 41 times); a robust line (Theil–Sen) through the per-k medians gives the fixed µs
//! per run, the slope between the two largest k the marginal µs per task, for no-op sub
//! tasks and for chip tasks whose chip callable submits nothing (reported above the chip's
//! own empty L2 run; these two marginals are the median over three Workers, with their
//! range); a run of one task (the fixed cost with one task) and a chip task end to end above
//! the empty L2 run;
//! the marginal cost with lane depths 1 and 16 next to the default; and the submit cost per
//! task with 1k, 10k and 100k tasks writing disjoint slices of one buffer (the L3 TensorMap's
//! scaling). Floors measured in the same run: a thread-to-thread round trip by spinning on an
//! atomic and by a blocking hand-off (a kernel wake each way), and a process-to-process round
//! trip over shared memory.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pto_chip::orch::{OrchArgs, OrchResult, RootScope};
use pto_chip::{ChipSpec, ChipWorker, RunContext};
use pto_node::{Callable, CallableHandle, EndpointMode, MappedArgs, SubContext, TaskError, Worker};
use pto_types::ring_config::env::EnvSource;
use pto_types::{CallConfig, RuntimeEnv, TaskArgs};

use crate::{Point, Stats, sample, us_since};

fn noop_sub(_: &SubContext, _: &MappedArgs) -> Result<(), TaskError> {
    Ok(())
}
pto_node::register_sub!("bench.noop_sub", noop_sub);

/// `bench.gate_sub`: sleeps `scalar(0)` ms; the tasks that read its output wait for it.
fn gate_sub(_: &SubContext, a: &MappedArgs) -> Result<(), TaskError> {
    std::thread::sleep(std::time::Duration::from_millis(a.scalar(0)?));
    Ok(())
}
pto_node::register_sub!("bench.gate_sub", gate_sub);

/// `bench.noop_node`: an L3 run that submits nothing (the remote row's task).
fn noop_node(
    _: &mut pto_node::Orchestrator<'_>,
    _: &TaskArgs,
    _: &CallConfig,
) -> Result<(), pto_node::OrchError> {
    Ok(())
}
pto_node::register_node!("bench.noop_node", noop_node);

fn empty_chip<'r>(_: &mut RootScope<'r>, _: &OrchArgs<'r>) -> OrchResult<()> {
    Ok(())
}
pto_chip::register_chip!("bench.empty_chip", empty_chip, unlisted);

/// A small chip: dispatch cost, not chip start-up, is measured.
fn chip_spec() -> ChipSpec {
    ChipSpec {
        clusters: 1,
        max_aicpu_threads: 2,
        device_memory_bytes: 1 << 30,
        ..ChipSpec::default()
    }
}

fn small_cfg() -> CallConfig {
    CallConfig::with_runtime_env(
        RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(4096)
            .with_dep_pool(16),
    )
}

/// µs of one run of `k` tasks of `handle` (sub or chip).
/// Chip tasks go round robin over the Worker's chips.
pub fn one_run(w: &Worker, handle: CallableHandle, chip: bool, k: usize) -> anyhow::Result<f64> {
    let cfg = small_cfg();
    let w_chips = w.chips().max(1);
    let started = Instant::now();
    w.run(
        move |orch, _, _| {
            for i in 0..k {
                if chip {
                    let chip_index = i % w_chips;
                    orch.submit_next_level(&handle, TaskArgs::new(), &cfg, chip_index)?;
                } else {
                    orch.submit_sub(&handle, TaskArgs::new())?;
                }
            }
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )?;
    Ok(us_since(started))
}

/// A line `y = a + b·x` through the points by Theil–Sen: `b` is the median of the pairwise
/// slopes, `a` the median of `y − b·x`. One slow run (a page fault, a preempted thread on 2
/// cores) moves a least-squares intercept by hundreds of µs; it barely moves these medians.
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let median = |mut v: Vec<f64>| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let mut slopes = Vec::new();
    for (i, &(x1, y1)) in points.iter().enumerate() {
        for &(x2, y2) in &points[i + 1..] {
            if x2 != x1 {
                slopes.push((y2 - y1) / (x2 - x1));
            }
        }
    }
    let b = median(slopes);
    let a = median(points.iter().map(|&(x, y)| y - b * x).collect());
    (a, b)
}

/// Workers, each with threads (and children) of its own, whose slopes the sub and chip
/// marginal rows take the median of. The slope of one Worker depends on where its threads
/// land: 15 fresh in-process Workers on the 2-vCPU VM read 0.60-1.05 µs per no-op sub task,
/// in two groups (BENCHMARKS.md, "Issues 25 and 26, stop 47"), so one Worker's slope is a
/// draw from those groups, not the typical cost.
const MARGINAL_WORKERS: usize = 3;

/// Runs at each of the two largest task counts, whose medians give the marginal. With 7, four
/// fresh Workers' slopes read 1.4-2.1 µs per no-op sub task in one process and 0.8-1.1 in
/// the next; with 40, 0.68-1.03 in both (BENCHMARKS.md, "Issues 25 and 26, stop 47"). Odd,
/// so the median is one run.
const MARGINAL_RUNS: usize = 41;

/// Unmeasured runs at each task count before its sampled ones: the first runs of a new size
/// cost 1.5-3× the later ones (a run of 1024 no-op sub tasks after runs of 256: 2.1-2.6 ms,
/// then 1.2-1.8 ms, then 0.8-1.1 ms), a per-size cost that the medians of a few runs would
/// fold into the per-task slope.
const WARM_RUNS_PER_SIZE: usize = 2;

/// How much of each measurement a `pto bench dispatch` makes (`--quick` shrinks all of it).
struct Plan<'a> {
    /// Tasks per run.
    ks: &'a [usize],
    /// Measured runs per task count.
    runs: usize,
    /// Measured runs at the two largest task counts ([`MARGINAL_RUNS`]).
    marginal_runs: usize,
    /// Workers whose marginals the sub and chip rows take the median of ([`MARGINAL_WORKERS`]).
    workers: usize,
}

/// Fixed and marginal points of one mode and task kind.
fn measure_kind(
    w: &Worker,
    handle: CallableHandle,
    chip: bool,
    plan: &Plan<'_>,
) -> anyhow::Result<(Stats, Stats)> {
    let ks = plan.ks;
    // One warm-up run binds the chip's arena and faults the mailbox in.
    one_run(w, handle, chip, 1)?;
    let mut medians = Vec::new();
    for (i, &k) in ks.iter().enumerate() {
        for _ in 0..WARM_RUNS_PER_SIZE {
            one_run(w, handle, chip, k)?;
        }
        // The two largest sizes give the marginal: their medians get more runs.
        let n = if i + 2 >= ks.len() {
            plan.marginal_runs
        } else {
            plan.runs
        };
        let s = sample(n, || one_run(w, handle, chip, k))?;
        medians.push((k as f64, s.median));
    }
    let (fixed, _) = fit(&medians);
    // The marginal cost is the slope between the two largest runs: the pairs of small runs
    // that dominate a Theil–Sen slope differ by a few tasks and by a wake-up's noise.
    let (k1, t1) = medians[medians.len() - 2];
    let (k2, t2) = medians[medians.len() - 1];
    let marginal = (t2 - t1) / (k2 - k1);
    // Both are derived figures, one value each; a negative one is noise (`Stats::cost`).
    Ok((Stats::cost(fixed), Stats::cost(marginal)))
}

/// The chip's own empty L2 run (µs), what a chip task costs below the node.
fn empty_l2_run(runs: usize) -> anyhow::Result<Stats> {
    let chip = ChipWorker::new(chip_spec(), EnvSource::empty())?;
    let cfg = small_cfg();
    chip.run_fn(empty_chip, &TaskArgs::new(), &cfg, &RunContext::default())?;
    sample(runs * 20, || {
        let started = Instant::now();
        chip.run_fn(empty_chip, &TaskArgs::new(), &cfg, &RunContext::default())?;
        Ok(us_since(started))
    })
}

/// Round trips between two threads, µs each: spinning on an atomic, and blocking hand-offs.
fn ping_pong(rounds: u64) -> (f64, f64) {
    let word = Arc::new(AtomicU64::new(0));
    let other = Arc::clone(&word);
    let t = std::thread::spawn(move || {
        for i in 0..rounds {
            while other.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            other.store(2 * i + 2, Ordering::Release);
        }
    });
    let started = Instant::now();
    for i in 0..rounds {
        word.store(2 * i + 1, Ordering::Release);
        while word.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let spin = us_since(started) / rounds as f64;
    let _ = t.join();
    let (to, from) = (
        std::sync::mpsc::sync_channel::<u64>(0),
        std::sync::mpsc::sync_channel::<u64>(0),
    );
    let (tx, rx_back) = (to.0, from.1);
    let (rx, tx_back) = (to.1, from.0);
    let t = std::thread::spawn(move || {
        while let Ok(v) = rx.recv() {
            if tx_back.send(v).is_err() {
                break;
            }
        }
    });
    let blocking_rounds = (rounds / 10).max(10);
    let started = Instant::now();
    for i in 0..blocking_rounds {
        let _ = tx.send(i);
        black_box(rx_back.recv().ok());
    }
    let blocking = us_since(started) / blocking_rounds as f64;
    drop(tx);
    let _ = t.join();
    (spin, blocking)
}

/// The Worker B3 measures, initialised: one chip (`chip_spec`), one sub lane of `depth`.
pub fn worker(mode: EndpointMode, depth: usize) -> anyhow::Result<Worker> {
    pto_kernels::link();
    let w = Worker::builder(3)
        .chips(1)
        .chip_spec(0, chip_spec())
        .sub_workers(1)
        .endpoint_mode(mode)
        .lane_depth(depth)
        .heap_ring_size(1 << 20)
        .build()?;
    w.init()?;
    Ok(w)
}

/// Median µs of whole runs of one task (`pto bench`'s "fixed cost with one task").
fn one_task_run(
    w: &Worker,
    handle: CallableHandle,
    chip: bool,
    runs: usize,
) -> anyhow::Result<Stats> {
    one_run(w, handle, chip, 1)?;
    sample(runs * 20, || one_run(w, handle, chip, 1))
}

/// Submit cost per task when `n` tasks each write their own 4-byte slice of one buffer (all
/// live until the run ends: the L3 TensorMap holds `n` entries of one buffer): µs per task
/// of the orchestration function's loop. Every task also reads the output of a gate task that
/// sleeps 5 µs per task submitted, so no task runs while the loop submits and the figure is
/// the submit path alone (lookup of the gate, insert of the slice), not its contention with
/// execution.
fn submit_on_one_buffer(
    w: &Worker,
    gate: CallableHandle,
    sub: CallableHandle,
    n: usize,
) -> anyhow::Result<f64> {
    let out = w.create_buffer(n * 4)?;
    let views = (0..n)
        .map(|i| out.view(i as u64 * 4, &[1], &[1], pto_types::DType::F32))
        .collect::<Result<Vec<_>, _>>()?;
    let gate_buf = w.create_buffer(4)?;
    let gate_view = gate_buf.view(0, &[1], &[1], pto_types::DType::F32)?;
    let gate_ms = (n as u64 * 5 / 1000).max(20);
    let took = Arc::new(std::sync::Mutex::new(0.0));
    let t = Arc::clone(&took);
    w.run(
        move |orch, _, _| {
            orch.submit_sub(
                &gate,
                TaskArgs::new().output_existing(&gate_view).scalar(gate_ms),
            )?;
            let started = Instant::now();
            for v in &views {
                orch.submit_sub(&sub, TaskArgs::new().input(&gate_view).output_existing(v))?;
            }
            *t.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = us_since(started);
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )?;
    let us = *took
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(us / n as f64)
}

/// The submit-scaling rows, per mode: µs per task at each size, the growth from the smallest
/// to the largest, and the largest submit's total.
fn submit_scaling(quick: bool) -> anyhow::Result<Vec<Point>> {
    let sizes: &[usize] = if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let mut points = Vec::new();
    for mode in [EndpointMode::InProcess, EndpointMode::ChildProcess] {
        let mode_name = mode.name();
        let w = worker(mode, pto_node::DEFAULT_LANE_DEPTH)?;
        let sub = w.register(Callable::sub("bench.noop_sub"))?;
        let gate = w.register(Callable::sub("bench.gate_sub"))?;
        // One run at the largest size first: slots, reports and the map's arenas then exist,
        // so each size measures steady-state submits, not first-touch page faults.
        submit_on_one_buffer(&w, gate, sub, sizes[sizes.len() - 1])?;
        let mut per_task = Vec::new();
        for &n in sizes {
            let stats = sample(3, || submit_on_one_buffer(&w, gate, sub, n))?;
            per_task.push(stats.median);
            points.push(Point::new(
                "dispatch",
                format!("submit cost per task, {n} tasks on one buffer, {mode_name}"),
                "us/task",
                stats,
            ));
        }
        let (first, last) = (per_task[0], per_task[per_task.len() - 1]);
        let n_last = sizes[sizes.len() - 1];
        points.push(Point::new(
            "dispatch",
            format!(
                "submit cost growth, {} -> {n_last} tasks on one buffer, {mode_name}",
                sizes[0]
            ),
            "x",
            Stats::one(last / first),
        ));
        points.push(Point::new(
            "dispatch",
            format!("submit of {n_last} tasks on one buffer, total, {mode_name}"),
            "s",
            Stats::one(last * n_last as f64 / 1e6),
        ));
        w.close();
    }
    Ok(points)
}

/// Marginal µs per no-op sub task with lanes of `depth` (the default is chosen from these).
fn depth_rows(plan: &Plan<'_>) -> anyhow::Result<Vec<Point>> {
    let mut points = Vec::new();
    for mode in [EndpointMode::InProcess, EndpointMode::ChildProcess] {
        let mode_name = mode.name();
        for depth in [1, 16] {
            let w = worker(mode, depth)?;
            let sub = w.register(Callable::sub("bench.noop_sub"))?;
            let (_, marginal) = measure_kind(&w, sub, false, plan)?;
            w.close();
            points.push(Point::new(
                "dispatch",
                format!("sub task marginal, lane depth {depth}, {mode_name}"),
                "us/task",
                marginal,
            ));
        }
    }
    Ok(points)
}

pub fn run(quick: bool) -> anyhow::Result<Vec<Point>> {
    let plan = if quick {
        Plan {
            ks: &[0, 1, 4, 16],
            runs: 2,
            marginal_runs: 2,
            workers: 1,
        }
    } else {
        Plan {
            ks: &[0, 1, 4, 16, 64, 256, 1024],
            runs: 7,
            marginal_runs: MARGINAL_RUNS,
            workers: MARGINAL_WORKERS,
        }
    };
    let runs = plan.runs;
    let (spin, blocking) = ping_pong(if quick { 2_000 } else { 100_000 });
    let process = pto_node::floor::shm_round_trip(if quick { 2_000 } else { 100_000 }, false)?;
    let empty_l2 = empty_l2_run(runs)?;
    let mut points = vec![
        Point::new(
            "dispatch",
            "floor: thread round trip, spinning",
            "us",
            Stats::one(spin),
        ),
        Point::new(
            "dispatch",
            "floor: thread round trip, blocking",
            "us",
            Stats::one(blocking),
        ),
        Point::new(
            "dispatch",
            "floor: process round trip, spinning (shared memory)",
            "us",
            Stats::one(process),
        ),
        Point::new("dispatch", "chip: empty L2 run (no node)", "us", empty_l2),
    ];
    for mode in [EndpointMode::InProcess, EndpointMode::ChildProcess] {
        let mode_name = mode.name();
        let (w, sub, chip) = sub_and_chip_worker(mode)?;
        let (fixed, marginal) = measure_kind(&w, sub, false, &plan)?;
        points.push(Point::new(
            "dispatch",
            format!("run of one sub task, {mode_name}"),
            "us",
            one_task_run(&w, sub, false, runs)?,
        ));
        let one_chip = one_task_run(&w, chip, true, runs)?;
        let (cfixed, cmarginal) = measure_kind(&w, chip, true, &plan)?;
        w.close();
        let (marginal, cmarginal) = over_more_workers(mode, &plan, marginal, cmarginal)?;
        points.push(
            Point::new(
                "dispatch",
                format!("chip task end to end above the empty L2 run, {mode_name}"),
                "us",
                Stats::cost(one_chip.median - empty_l2.median),
            )
            .with_anchor(format!(
                "a run of one chip task {} us minus the chip's empty L2 run {} us",
                crate::figure(one_chip.median),
                crate::figure(empty_l2.median)
            )),
        );
        let (floor_name, floor) = match mode {
            EndpointMode::InProcess => ("thread round trip, spinning", spin),
            EndpointMode::ChildProcess => ("process round trip, spinning", process),
        };
        points.push(Point::new(
            "dispatch",
            format!("sub task fixed per run, {mode_name}"),
            "us",
            fixed,
        ));
        points.push(
            Point::new(
                "dispatch",
                format!("sub task marginal, {mode_name}"),
                "us/task",
                marginal,
            )
            .with_peer(floor_name, floor)
            .with_anchor("upstream Python L3 path: 43.3 us per run + 8.08 us per task (issue 12)"),
        );
        points.push(Point::new(
            "dispatch",
            format!("chip task fixed per run, {mode_name}"),
            "us",
            cfixed,
        ));
        points.push(
            Point::new(
                "dispatch",
                format!("chip task marginal, {mode_name}"),
                "us/task",
                cmarginal,
            )
            .with_peer("chip: empty L2 run", empty_l2.median),
        );
        points.push(four_chips(mode, mode_name, &plan, empty_l2.median)?);
    }
    points.extend(depth_rows(&plan)?);
    points.extend(submit_scaling(quick)?);
    points.extend(remote_rows(&plan, process)?);
    Ok(points)
}

/// A Worker of `mode` at the default lane depth, with the no-op sub and the empty chip
/// callable registered.
fn sub_and_chip_worker(
    mode: EndpointMode,
) -> anyhow::Result<(Worker, CallableHandle, CallableHandle)> {
    let w = worker(mode, pto_node::DEFAULT_LANE_DEPTH)?;
    let sub = w.register(Callable::sub("bench.noop_sub"))?;
    let chip = w.register(Callable::chip("bench.empty_chip"))?;
    Ok((w, sub, chip))
}

/// The sub and chip marginals of a first Worker with those of `plan.workers - 1` fresh
/// Workers of `mode`: the median over the Workers, their range as min and max, and `runs`
/// counting Workers.
fn over_more_workers(
    mode: EndpointMode,
    plan: &Plan<'_>,
    first_sub: Stats,
    first_chip: Stats,
) -> anyhow::Result<(Stats, Stats)> {
    let (mut subs, mut chips) = (vec![first_sub.median], vec![first_chip.median]);
    for _ in 1..plan.workers {
        let (w, sub, chip) = sub_and_chip_worker(mode)?;
        subs.push(measure_kind(&w, sub, false, plan)?.1.median);
        chips.push(measure_kind(&w, chip, true, plan)?.1.median);
        w.close();
    }
    Ok((marginal_of(&subs), marginal_of(&chips)))
}

/// The statistics of per-Worker slopes (NaN: a Worker whose slope was not a cost). The median
/// is over every measured slope, so a noisy negative one counts as low rather than vanishing;
/// a negative median is not a cost and is reported as not measured ([`Stats::cost`]); min and
/// max are over the slopes that are costs (a median ≥ 0 leaves at least one), so no printed
/// figure is negative.
fn marginal_of(slopes: &[f64]) -> Stats {
    let measured: Vec<f64> = slopes.iter().copied().filter(|x| x.is_finite()).collect();
    let median = Stats::of(&measured).median;
    if median.is_nan() || median < 0.0 {
        return Stats::of(&[]);
    }
    let costs: Vec<f64> = measured.iter().copied().filter(|x| *x >= 0.0).collect();
    let range = Stats::of(&costs);
    Stats {
        median,
        min: range.min.min(median),
        max: range.max.max(median),
        runs: measured.len(),
    }
}

/// An L4 Worker whose one remote worker is a server in this process on a loopback port
/// (its session's chip on threads): each task is a `Submit` call over HTTP/2 running an empty
/// L3 run there, so the marginal is the loopback gRPC round trip plus that run.
fn remote_rows(plan: &Plan<'_>, process_floor: f64) -> anyhow::Result<Vec<Point>> {
    let server = pto_node::remote::serve(pto_node::remote::ServeOptions {
        listen: std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0)),
        chips: 1,
        mode: EndpointMode::InProcess,
        chip_spec: chip_spec(),
        heap_ring_size: 1 << 20,
        ..Default::default()
    })?;
    let w = Worker::builder(4)
        .remote_worker(&format!("http://{}", server.local_addr()))
        .heap_ring_size(1 << 20)
        .build()?;
    let node = w.register(Callable::node("bench.noop_node"))?;
    w.init()?;
    let (fixed, marginal) = measure_kind(&w, node, true, plan)?;
    w.close();
    Ok(vec![
        Point::new(
            "dispatch",
            "remote L3 task fixed per run, loopback gRPC",
            "us",
            fixed,
        ),
        Point::new(
            "dispatch",
            "remote L3 task marginal, loopback gRPC (Submit round trip + an empty L3 run)",
            "us/task",
            marginal,
        )
        .with_peer("process round trip, spinning", process_floor),
    ])
}

/// Chip tasks spread round robin over 4 chip workers (BENCHMARKS.md B3: 1-4 chips).
fn four_chips(
    mode: EndpointMode,
    mode_name: &str,
    plan: &Plan<'_>,
    empty_l2: f64,
) -> anyhow::Result<Point> {
    let mut b = Worker::builder(3)
        .chips(4)
        .endpoint_mode(mode)
        .heap_ring_size(1 << 20);
    for i in 0..4 {
        b = b.chip_spec(i, chip_spec());
    }
    let w = b.build()?;
    let chip = w.register(Callable::chip("bench.empty_chip"))?;
    w.init()?;
    let (_, marginal) = measure_kind(&w, chip, true, plan)?;
    w.close();
    Ok(Point::new(
        "dispatch",
        format!("chip task marginal, 4 chips round robin, {mode_name}"),
        "us/task",
        marginal,
    )
    .with_peer("chip: empty L2 run", empty_l2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-Worker marginals: a noisy negative slope counts in the median (as a low one) but
    /// is never printed; a negative median or no cost at all is "not measured".
    #[test]
    fn a_marginal_over_workers_keeps_noisy_slopes_in_its_median_and_prints_no_negative() {
        let s = marginal_of(&[1.0, -0.5, 0.9]);
        assert_eq!((s.median, s.min, s.max, s.runs), (0.9, 0.9, 1.0, 3));
        let s = marginal_of(&[0.8, f64::NAN]);
        assert_eq!((s.median, s.min, s.max, s.runs), (0.8, 0.8, 0.8, 1));
        for slopes in [&[-0.2, -0.1, 1.0][..], &[f64::NAN], &[]] {
            let s = marginal_of(slopes);
            assert!(s.median.is_nan() && s.runs == 0, "{slopes:?}: {s:?}");
        }
    }

    #[test]
    fn the_empty_chip_is_found_by_name_but_not_listed_for_users() {
        use pto_chip::callable::{
            chip_callable_names, find_chip_callable, listed_chip_callable_names,
        };
        assert!(find_chip_callable("bench.empty_chip").is_some());
        assert!(chip_callable_names().contains(&"bench.empty_chip"));
        assert!(!listed_chip_callable_names().contains(&"bench.empty_chip"));
    }

    #[test]
    fn robust_line_fit() {
        let (a, b) = fit(&[(0.0, 3.0), (1.0, 5.0), (4.0, 11.0)]);
        assert!((a - 3.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9, "{a} {b}");
        // One outlier does not drag the line.
        let (a, b) = fit(&[
            (0.0, 3.0),
            (1.0, 5.0),
            (4.0, 11.0),
            (16.0, 35.0),
            (64.0, 900.0),
        ]);
        assert!((a - 3.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9, "{a} {b}");
    }
}
