//! The chip's threads: an idle chip costs ~0 % CPU, every executor and gang thread parks
//! (CHIP_RUNTIME.md §6.5, row E12), and simulated cores are not threads (issue 13: at most
//! `min(cores, host CPUs)` executors, one fewer when the cores outnumber the CPUs, gang
//! threads only for parts that must run together).
//! Measured on the chip's own threads (named `pto-*`), which every chip of this process shares:
//! so the tests of this file take [`PROCESS_THREADS`] and never run at the same time, whether
//! the runner gives each test a process (nextest) or runs them as threads of one (`cargo
//! test`). The ≤ 1 % figure itself is benchmark B4; the idle test asserts a liveness bound with
//! a wide margin.

mod common;

use std::time::Duration;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::RunContext;
use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{KernelArgs, MixedKernels, OrchArgs, OrchResult, RootScope};
use pto_types::{CallConfig, TaskArgs};

/// Held by every test here: each counts or times all of this process's `pto-*` threads, so a
/// chip of another test running at the same time would change what it measures.
static PROCESS_THREADS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`PROCESS_THREADS`] (a test that panicked while holding it poisons nothing here).
fn alone() -> std::sync::MutexGuard<'static, ()> {
    PROCESS_THREADS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Names of this process's threads that start with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("procfs")
        .filter(|entry| {
            let dir = entry.as_ref().expect("task entry").path();
            std::fs::read_to_string(dir.join("comm"))
                .unwrap_or_default()
                .starts_with(prefix)
        })
        .count()
}

/// Each part records its simulated core; the MIX parts meet (they run at the same time).
static CORES_SEEN: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
static MIX_CORES: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
static MIX_ARRIVED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn record_core(ctx: &mut KernelCtx<'_>) {
    CORES_SEEN.lock().unwrap().push(ctx.core().0);
}

fn mix_meet(ctx: &mut KernelCtx<'_>) {
    use std::sync::atomic::Ordering;
    MIX_CORES.lock().unwrap().push(ctx.core().0);
    MIX_ARRIVED.fetch_add(1, Ordering::AcqRel);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while MIX_ARRIVED.load(Ordering::Acquire) < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the MIX parts did not run together"
        );
        std::thread::yield_now();
    }
}

pto_chip::register_kernel!(REC_AIV = "test.record_core_aiv", CoreType::Aiv, record_core);
pto_chip::register_kernel!(MEET_AIC = "test.mix_meet_aic", CoreType::Aic, mix_meet);
pto_chip::register_kernel!(MEET_AIV = "test.mix_meet_aiv", CoreType::Aiv, mix_meet);

fn wide_and_mix<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_aiv(REC_AIV, KernelArgs::new().block_num(48))?;
    let parts = MixedKernels {
        aic: Some(MEET_AIC),
        aiv0: Some(MEET_AIV),
        aiv1: Some(MEET_AIV),
    };
    s.submit_mix(parts, KernelArgs::new())?;
    Ok(())
}

#[test]
fn simulated_cores_are_logical_and_mix_parts_run_together() {
    let _alone = alone();
    with_timeout(60, || {
        let host = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chip = chip(24, &[]); // 72 simulated cores
        // A thread names itself when it starts: give them a moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // At least as many cores as CPUs: one executor fewer, the orchestrator is the last
        // worker.
        let executors = chip.executor_threads();
        let expected = if (2..=72).contains(&host) {
            host - 1
        } else {
            72.min(host)
        };
        assert_eq!(executors, expected);
        while threads_named("pto-exec") < executors && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(threads_named("pto-exec"), executors);
        assert_eq!(
            threads_named("pto-gang"),
            0,
            "no gang thread before one is needed"
        );
        chip.run_fn(
            wide_and_mix,
            &TaskArgs::new(),
            &CallConfig::default(),
            &RunContext::default(),
        )
        .unwrap();
        // Blocks ran on AIV cores (ids 24..72), the MIX parts on one cluster's three cores.
        let seen = CORES_SEEN.lock().unwrap().clone();
        assert_eq!(seen.len(), 48);
        assert!(seen.iter().all(|&c| (24..72).contains(&c)), "{seen:?}");
        let mix = MIX_CORES.lock().unwrap().clone();
        let cluster = mix.iter().copied().find(|&c| c < 24).expect("the AIC part");
        let mut want = vec![cluster, 24 + 2 * cluster, 24 + 2 * cluster + 1];
        let mut got = mix.clone();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "the MIX parts share one cluster");
        // Two parts needed threads of their own; the chip never grows past what it used.
        assert_eq!(threads_named("pto-gang"), 2);
        assert_eq!(threads_named("pto-exec"), executors);
    });
}

/// CPU time (utime + stime, clock ticks) of this process's threads whose name starts `pto-`.
fn pto_thread_ticks() -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let dir = entry.expect("task entry").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("pto-") {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.len() > 12 {
            total +=
                fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
        }
    }
    total
}

#[test]
fn e12_idle_chip_threads_park() {
    let _alone = alone();
    with_timeout(60, || {
        let chip = chip(8, &[]);
        let (_a, a) = f32_tensor(16384, 2.0);
        let (_b, b) = f32_tensor(16384, 3.0);
        let (_f, f) = f32_tensor(16384, 0.0);
        let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
        chip.run(
            "vector_example",
            &args,
            &CallConfig::default(),
            &RunContext::default(),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let before = pto_thread_ticks();
        std::thread::sleep(Duration::from_secs(2));
        let used = pto_thread_ticks() - before;
        // Clock ticks are 10 ms here; 0.2 s of CPU over 2 s of idleness is 20 ticks.
        assert!(
            used < 20,
            "idle chip threads used {used} ticks of CPU in 2 s"
        );
    });
}
