//! B2: minimum effective task granularity, METG(50%) (`pto bench metg`, BENCHMARKS.md B2).
//!
//! One chip with one cluster (W = 2 AIV cores) and 2 AICPU threads runs `stencil_1d` of width
//! 16 (each task reads 3 entries of the previous step) for S steps; every task is the kernel
//! `bench.spin(g)`, which spins until its thread's CPU time advanced by g. Efficiency =
//! (tasks × g) / (wall × W). g sweeps from 100 µs down by 1.5× until efficiency drops below
//! 50 %; METG is interpolated (log g) between the last point above and the first below. The
//! peer is the same pattern as bulk-synchronous steps on a rayon pool of W threads (one
//! parallel loop per step), swept the same way.

use std::time::Instant;

use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{OrchArgs, OrchResult, RootScope};
use pto_chip::{ChipSpec, ChipWorker, RunContext};
use pto_types::ring_config::env::EnvSource;
use pto_types::{BufferId, CallConfig, DType, RuntimeEnv, TaskArgs, Tensor};
use rayon::prelude::*;

use crate::{Point, Stats};

use crate::WIDTH;
const W: f64 = 2.0;

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Spins until this thread used `ns` more CPU time.
fn spin_cpu(ns: u64) {
    let until = thread_cpu_ns() + ns;
    while thread_cpu_ns() < until {
        std::hint::spin_loop();
    }
}

fn kernel_spin(ctx: &mut KernelCtx<'_>) {
    let ns: u64 = ctx.scalar(0);
    spin_cpu(ns);
}

pto_chip::register_kernel!(
    /// Spins until its thread's CPU time advanced by `scalar(0)` ns (BENCHMARKS.md B2).
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
    let cfg = CallConfig::with_runtime_env(
        RuntimeEnv::default()
            .with_task_window(256)
            .with_heap(1 << 16)
            .with_dep_pool(1024),
    );
    let started = Instant::now();
    chip.run_fn(stencil, &args, &cfg, &RunContext::default())?;
    let wall = started.elapsed().as_secs_f64();
    Ok((steps * u64::from(WIDTH)) as f64 * g_ns as f64 * 1e-9 / (wall * w))
}

/// The rayon bulk-synchronous peer's efficiency at grain `g_ns`.
fn rayon_efficiency(pool: &rayon::ThreadPool, steps: u64, g_ns: u64) -> f64 {
    let started = Instant::now();
    pool.install(|| {
        for _ in 0..steps {
            (0..WIDTH).into_par_iter().for_each(|_| spin_cpu(g_ns));
        }
    });
    let wall = started.elapsed().as_secs_f64();
    (steps * u64::from(WIDTH)) as f64 * g_ns as f64 * 1e-9 / (wall * W)
}

/// Interpolates log(g) linearly in efficiency between (g1, e1) and (g2, e2) at 50 %.
fn at_half(g1: f64, e1: f64, g2: f64, e2: f64) -> f64 {
    let f = if (e1 - e2).abs() > f64::EPSILON {
        (e1 - 0.5) / (e1 - e2)
    } else {
        0.5
    };
    (g1.ln() + f * (g2.ln() - g1.ln())).exp()
}

/// METG(50%) in µs from `efficiency(g_ns)`: from 100 µs down by 1.5× while efficiency stays at
/// least 50 %, or up by 1.5× (to 10 ms) while it is below; `None` if 10 ms is still below.
/// Also returns the efficiency at 100 µs.
fn sweep(
    mut efficiency: impl FnMut(u64) -> anyhow::Result<f64>,
) -> anyhow::Result<(Option<f64>, f64)> {
    let start = 100_000.0f64;
    let first = efficiency(start as u64)?;
    let (mut g, mut e) = (start, first);
    let (step, limit): (f64, f64) = if first >= 0.5 {
        (1.0 / 1.5, 500.0)
    } else {
        (1.5, 1e7)
    };
    loop {
        let next = g * step;
        if (step < 1.0 && next < limit) || (step > 1.0 && next > limit) {
            // Never crossed 50 %: the last grain tried bounds it.
            return Ok(((first >= 0.5).then_some(g / 1000.0), first));
        }
        let e_next = efficiency(next as u64)?;
        if (e_next >= 0.5) != (e >= 0.5) {
            return Ok((Some(at_half(g, e, next, e_next) / 1000.0), first));
        }
        (g, e) = (next, e_next);
    }
}

/// Steps per point: about `budget` of CPU per point, within `range`.
fn steps_for(g_ns: u64, budget_ns: f64, range: (u64, u64)) -> u64 {
    ((budget_ns / (f64::from(WIDTH) * g_ns as f64)) as u64).clamp(range.0, range.1)
}

pub fn run(quick: bool) -> anyhow::Result<Vec<Point>> {
    let (budget, range) = if quick {
        (2e7, (2, 10))
    } else {
        (1.6e9, (10, 1000))
    };
    let chip = ChipWorker::new(
        ChipSpec {
            clusters: 1,
            max_aicpu_threads: 2,
            ..ChipSpec::default()
        },
        EnvSource::empty(),
    )?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(W as usize)
        .build()?;
    let (ours, ours_100) = sweep(|g| pto_efficiency(&chip, steps_for(g, budget, range), g, W))?;
    let (ours_w1, _) = sweep(|g| pto_efficiency(&chip, steps_for(g, budget / 2.0, range), g, 1.0))?;
    let (peer, peer_100) = sweep(|g| Ok(rayon_efficiency(&pool, steps_for(g, budget, range), g)))?;
    // The efficiency reference: the same tasks one after another on one thread (W = 1).
    let seq_steps = steps_for(100_000, budget, range);
    let started = Instant::now();
    for _ in 0..seq_steps * u64::from(WIDTH) {
        spin_cpu(100_000);
    }
    let sequential = (seq_steps * u64::from(WIDTH)) as f64 * 1e-4 / started.elapsed().as_secs_f64();
    let case = format!("stencil_1d width {WIDTH} W=2");
    // Not reached below 10 ms: reported as NaN (JSON null).
    let metg = |v: Option<f64>| v.unwrap_or(f64::NAN);
    Ok(vec![
        Point::new("metg", format!("{case}: METG(50%)"), "us", Stats::one(metg(ours)))
            .with_peer("rayon bulk-synchronous", metg(peer))
            .with_anchor("Task Bench (32 cores): MPI 4.6 us, OpenMP tasks 64 us, StarPU 361-739 us (BENCHMARKS.md B2)"),
        Point::new("metg", format!("{case}: efficiency at 100 us"), "fraction", Stats::one(ours_100))
            .with_peer("rayon bulk-synchronous", peer_100),
        Point::new(
            "metg",
            format!("stencil_1d width {WIDTH} W=1 (the AIC core): METG(50%)"),
            "us",
            Stats::one(metg(ours_w1)),
        ),
        Point::new(
            "metg",
            "sequential loop (W=1): efficiency at 100 us",
            "fraction",
            Stats::one(sequential),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeping_finds_the_half_efficiency_grain() {
        // Efficiency g / (g + 50 µs): 50 % exactly at 50 µs.
        let model = |g: u64| Ok(g as f64 / (g as f64 + 50_000.0));
        let (metg, at_100) = sweep(model).unwrap();
        assert!((metg.unwrap() - 50.0).abs() < 5.0, "{metg:?}");
        assert!((at_100 - 2.0 / 3.0).abs() < 1e-9);
        // Below 50 % at 100 µs: the sweep goes up (400 µs here).
        let slow = |g: u64| Ok(g as f64 / (g as f64 + 400_000.0));
        let (metg, _) = sweep(slow).unwrap();
        assert!((metg.unwrap() - 400.0).abs() < 40.0, "{metg:?}");
    }
}
