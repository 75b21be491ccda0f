//! The waiting orchestrator runs helpable work itself (`engine/orchestrator/help.rs`): quick
//! one-block tasks do run on its thread, a kernel never seen to return never does (long ones
//! only when the orchestrator is one of the chip's workers), work it may not run goes to its
//! stand-in, and a helped kernel that hangs is still caught by the watchdog.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use common::{chip, run_plain, with_timeout};
use pto_chip::kernel::{CoreType, KernelCtx, KernelRef};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_chip::{ChipRunError, ChipSpec, ChipWorker};
use pto_types::ring_config::env::EnvSource;
use pto_types::{DType, ErrorCode};

/// Tasks per run (a multiple of 8): far more than the 16-slot window, so the orchestrator
/// waits often.
const TASKS: u64 = 600;

/// Where a kernel ran: calls in all, calls on the orchestrator's thread, and whether the very
/// first call was there.
struct Calls {
    orchestrator: OnceLock<ThreadId>,
    all: AtomicU64,
    on_orchestrator: AtomicU64,
    first_on_orchestrator: AtomicBool,
}

impl Calls {
    const fn new() -> Calls {
        Calls {
            orchestrator: OnceLock::new(),
            all: AtomicU64::new(0),
            on_orchestrator: AtomicU64::new(0),
            first_on_orchestrator: AtomicBool::new(false),
        }
    }

    /// Names the calling thread as the orchestrator: it is about to call `run`.
    fn orchestrated_here(&self) {
        self.orchestrator
            .set(std::thread::current().id())
            .expect("one test per kernel");
    }

    /// Counts a call; returns whether it runs on the orchestrator's thread.
    fn note(&self) -> bool {
        let here = self.orchestrator.get() == Some(&std::thread::current().id());
        if self.all.fetch_add(1, Ordering::SeqCst) == 0 {
            self.first_on_orchestrator.store(here, Ordering::SeqCst);
        }
        if here {
            self.on_orchestrator.fetch_add(1, Ordering::SeqCst);
        }
        here
    }
}

fn spin_for(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

static QUICK_CALLS: Calls = Calls::new();
fn quick(_ctx: &mut KernelCtx<'_>) {
    QUICK_CALLS.note();
    spin_for(Duration::from_micros(3));
}
pto_chip::register_kernel!(QUICK = "test.help.quick", CoreType::Aiv, quick);

static SLOW_CALLS: Calls = Calls::new();
fn slow(_ctx: &mut KernelCtx<'_>) {
    SLOW_CALLS.note();
    spin_for(Duration::from_micros(60));
}
pto_chip::register_kernel!(SLOW = "test.help.slow", CoreType::Aiv, slow);

/// Quick, except on the orchestrator's thread: there it hangs until the run is cancelled.
static TRAP_CALLS: Calls = Calls::new();
fn trap(ctx: &mut KernelCtx<'_>) {
    if TRAP_CALLS.note() {
        while !ctx.cancelled() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    spin_for(Duration::from_micros(3));
}
pto_chip::register_kernel!(TRAP = "test.help.trap", CoreType::Aiv, trap);

fn noop(_ctx: &mut KernelCtx<'_>) {}
pto_chip::register_kernel!(NOOP = "test.help.noop", CoreType::Aiv, noop);

/// `TASKS` independent tasks, 8 per scope (a scope's tasks retire when it ends).
fn independent(s: &mut RootScope<'_>, kernel: KernelRef) -> OrchResult<()> {
    for _ in 0..TASKS / 8 {
        s.scope(|s| {
            for _ in 0..8 {
                s.submit_aiv(kernel, KernelArgs::new())?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

fn many_quick<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    independent(s, QUICK)
}

fn many_slow<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    independent(s, SLOW)
}

fn many_noops<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    independent(s, NOOP)
}

fn many_traps<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    independent(s, TRAP)
}

fn small_window_chip() -> ChipWorker {
    chip(1, &[("PTO2_RING_TASK_WINDOW", "16")])
}

#[test]
fn the_waiting_orchestrator_runs_quick_tasks_but_never_a_kernel_first() {
    with_timeout(120, || {
        let chip = small_window_chip();
        QUICK_CALLS.orchestrated_here();
        for _ in 0..5 {
            run_plain(&chip, many_quick).expect("runs");
        }
        assert_eq!(QUICK_CALLS.all.load(Ordering::SeqCst), 5 * TASKS);
        assert!(
            !QUICK_CALLS.first_on_orchestrator.load(Ordering::SeqCst),
            "a kernel never seen to return ran first on the orchestrator"
        );
        let helped = QUICK_CALLS.on_orchestrator.load(Ordering::SeqCst);
        assert!(
            helped > 0,
            "the orchestrator, blocked on a 16-slot window {} times over, ran no task itself",
            5 * TASKS / 16
        );
    });
}

#[test]
fn a_long_kernel_runs_on_the_orchestrator_only_when_it_is_a_worker_and_never_first() {
    with_timeout(120, || {
        let chip = small_window_chip();
        SLOW_CALLS.orchestrated_here();
        for _ in 0..3 {
            run_plain(&chip, many_slow).expect("runs");
        }
        assert_eq!(SLOW_CALLS.all.load(Ordering::SeqCst), 3 * TASKS);
        assert!(
            !SLOW_CALLS.first_on_orchestrator.load(Ordering::SeqCst),
            "a kernel never seen to return ran first on the orchestrator"
        );
        let helped = SLOW_CALLS.on_orchestrator.load(Ordering::SeqCst);
        if chip.orchestrator_is_worker() {
            // One executor fewer: the orchestrator, blocked on a 16-slot window, is the other
            // worker, for long kernels too.
            assert!(
                helped > 0,
                "the orchestrator ran no 60 us task of {}",
                3 * TASKS
            );
        } else {
            assert_eq!(
                helped, 0,
                "a long kernel ran on the orchestrator beside enough executors"
            );
        }
    });
}

#[test]
fn a_chip_with_more_cores_than_the_host_has_cpus_starts_one_executor_fewer() {
    with_timeout(60, || {
        let host = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chip = chip(24, &[]); // 72 simulated cores
        let worker = (2..=72).contains(&host);
        assert_eq!(chip.orchestrator_is_worker(), worker);
        let executors = if worker { host - 1 } else { 72.min(host) };
        assert_eq!(chip.executor_threads(), executors);
    });
}

static FAN_CALLS: Calls = Calls::new();
fn fan_part(_ctx: &mut KernelCtx<'_>) {
    FAN_CALLS.note();
    std::thread::sleep(Duration::from_millis(30));
}
pto_chip::register_kernel!(FAN = "test.help.fan", CoreType::Aiv, fan_part);

/// One 30 ms task, then 8 more that read what it wrote: they become ready only when it
/// finishes, long after the orchestrator, with nothing to run, parked at the end of the run.
fn fan_out<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    let ci = TensorCreateInfo::new(&[1], DType::F32);
    let root = s.submit_aiv(FAN, KernelArgs::new().output(ci))?.tensor(0);
    for _ in 0..8 {
        s.submit_aiv(FAN, KernelArgs::new().input(root).output(ci))?;
    }
    Ok(())
}

#[test]
fn a_parked_last_worker_is_called_back_for_a_fan_out() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        FAN_CALLS.orchestrated_here();
        // The first run lets the kernel return once, so the orchestrator may run it.
        run_plain(&chip, fan_out).expect("runs");
        let before = FAN_CALLS.on_orchestrator.load(Ordering::SeqCst);
        run_plain(&chip, fan_out).expect("runs");
        let helped = FAN_CALLS.on_orchestrator.load(Ordering::SeqCst) - before;
        if chip.orchestrator_is_worker() {
            // Without the call back (H6) it sleeps until the run is over, and the 8 tasks run
            // one after another on the executors it left.
            assert!(helped > 0, "the orchestrator ran none of the fan-out");
        } else {
            assert_eq!(
                helped, 0,
                "a long kernel ran on the orchestrator beside enough executors"
            );
        }
    });
}

/// The two kernels of one run of [`first_runs`], registered afresh for it (none has returned
/// before, so the orchestrator may not run them itself), and whether the first has started.
static FIRST_RUNS: Mutex<Option<(KernelRef, KernelRef, Arc<AtomicBool>)>> = Mutex::new(None);

/// Submits the first kernel, waits in its own code until an executor started it, then submits
/// the second and ends: waiting for the run's end, the orchestrator finds the second ready and
/// every executor busy.
fn first_runs<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    let (first, second, started) = FIRST_RUNS.lock().unwrap().clone().expect("installed");
    s.submit_aiv(first, KernelArgs::new())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !started.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    s.submit_aiv(second, KernelArgs::new())?;
    Ok(())
}

/// Registers a pair for [`first_runs`]; `second` runs as the second kernel.
fn install_first_runs(
    chip: &ChipWorker,
    first: impl Fn(&mut KernelCtx<'_>) + Send + Sync + 'static,
    second: impl Fn(&mut KernelCtx<'_>) + Send + Sync + 'static,
) -> Arc<AtomicBool> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let started = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&started);
    let first = chip
        .register_kernel_closure(&format!("test.help.first{n}"), CoreType::Aiv, move |ctx| {
            flag.store(true, Ordering::SeqCst);
            first(ctx);
        })
        .unwrap();
    let second = chip
        .register_kernel_closure(&format!("test.help.second{n}"), CoreType::Aiv, second)
        .unwrap();
    *FIRST_RUNS.lock().unwrap() = Some((first, second, Arc::clone(&started)));
    started
}

fn on_stand_in() -> bool {
    std::thread::current().name() == Some("pto-standin")
}

#[test]
fn two_first_runs_run_at_once_on_a_host_with_two_cpus() {
    with_timeout(60, || {
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return; // one CPU: one executor, and nothing else may run a first run
        }
        let chip = chip(1, &[]);
        // Each kernel waits (at most 10 s) until both have started.
        let met = Arc::new(AtomicU64::new(0));
        let stand_in = Arc::new(AtomicBool::new(false));
        let meet = |met: Arc<AtomicU64>, stand_in: Arc<AtomicBool>| {
            move |_: &mut KernelCtx<'_>| {
                stand_in.fetch_or(on_stand_in(), Ordering::SeqCst);
                met.fetch_add(1, Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(10);
                while met.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        };
        let started = install_first_runs(
            &chip,
            meet(Arc::clone(&met), Arc::clone(&stand_in)),
            meet(Arc::clone(&met), Arc::clone(&stand_in)),
        );
        let t0 = Instant::now();
        run_plain(&chip, first_runs).expect("runs");
        assert!(started.load(Ordering::SeqCst));
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the two first runs did not overlap: {:?}",
            t0.elapsed()
        );
        // With one executor, the second can only have run beside the first on the stand-in.
        if chip.orchestrator_is_worker() && chip.executor_threads() == 1 {
            assert!(stand_in.load(Ordering::SeqCst), "the stand-in ran neither");
        }
    });
}

/// [`behind_a_stand_in`]'s kernels: the executor's first block, the stand-in's long first run,
/// a quick kernel, whether the first has started.
type Behind = (KernelRef, KernelRef, KernelRef, Arc<AtomicBool>);
static BEHIND: Mutex<Option<Behind>> = Mutex::new(None);

/// The first kernel (an executor takes it, and it writes a tensor), then the long first run
/// and a quick task, then a read of the first kernel's tensor: waiting for it, the
/// orchestrator hands the long first run to the stand-in, and after the read the executor
/// has run the quick task, has nothing left and parks. Then one more quick task: one ready
/// block, which the wake rule would leave to a thread that comes back for more.
fn behind_a_stand_in<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    let (first, long, quick, started) = BEHIND.lock().unwrap().clone().expect("installed");
    let ci = TensorCreateInfo::new(&[1], DType::F32);
    let out = s.submit_aiv(first, KernelArgs::new().output(ci))?.tensor(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !started.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    s.submit_aiv(long, KernelArgs::new())?;
    // Run by the executor after the first: the last kernel to finish is then a quick one, so
    // the wake rule would leave a lone quick block to a thread that comes back.
    s.submit_aiv(quick, KernelArgs::new())?;
    let _: f32 = s.get_tensor_data(out, &[0])?;
    // Let the executor find nothing and park.
    std::thread::sleep(Duration::from_millis(20));
    s.submit_aiv(quick, KernelArgs::new())?;
    Ok(())
}

fn only_quick<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    let (_, _, quick, _) = BEHIND.lock().unwrap().clone().expect("installed");
    s.submit_aiv(quick, KernelArgs::new())?;
    Ok(())
}

#[test]
fn quick_work_never_waits_for_the_stand_in_to_come_back() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let started = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&started);
        let long_started = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&long_started);
        // Keeps the one executor busy until the long kernel has started (at most 10 s), so
        // that one can only go to the stand-in.
        let first = chip
            .register_kernel_closure("test.help.behind.first", CoreType::Aiv, move |_| {
                flag.store(true, Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(10);
                while !seen.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .unwrap();
        let long_ran_on = Arc::new(Mutex::new(None));
        let on = Arc::clone(&long_ran_on);
        let long = chip
            .register_kernel_closure("test.help.behind.long", CoreType::Aiv, move |_| {
                *on.lock().unwrap() = std::thread::current().name().map(str::to_string);
                long_started.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_secs(2));
            })
            .unwrap();
        let last_quick = Arc::new(Mutex::new(None));
        let last = Arc::clone(&last_quick);
        let quick = chip
            .register_kernel_closure("test.help.behind.quick", CoreType::Aiv, move |_| {
                *last.lock().unwrap() = Some(Instant::now());
            })
            .unwrap();
        *BEHIND.lock().unwrap() = Some((first, long, quick, started));
        run_plain(&chip, only_quick).expect("the quick kernel returns once");
        let t0 = Instant::now();
        run_plain(&chip, behind_a_stand_in).expect("runs");
        let quick_done = last_quick.lock().unwrap().expect("quick tasks ran") - t0;
        // The quick task needs the executor (the orchestrator helps with nothing while the
        // stand-in runs), which must be woken for it rather than the task left for the
        // stand-in, which never comes back for more.
        assert!(
            quick_done < Duration::from_secs(1),
            "the quick task finished {quick_done:?} in, behind the 2 s kernel"
        );
        if chip.orchestrator_is_worker() && chip.executor_threads() == 1 {
            assert_eq!(long_ran_on.lock().unwrap().as_deref(), Some("pto-standin"));
        }
    });
}

#[test]
fn a_first_run_that_hangs_on_the_stand_in_is_caught_by_the_watchdog_and_the_chip_recovers() {
    with_timeout(120, || {
        pto_kernels::link();
        let spec = ChipSpec {
            clusters: 1,
            scheduler_timeout: Some(Duration::from_millis(300)),
            ..ChipSpec::default()
        };
        let chip = ChipWorker::new(spec, EnvSource::empty()).unwrap();
        if !(chip.orchestrator_is_worker() && chip.executor_threads() == 1) {
            return; // a host with more CPUs than this chip has cores: no stand-in
        }
        let on = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&on);
        let second_started = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&second_started);
        install_first_runs(
            &chip,
            // Keeps the one executor busy until the second has started (at most 10 s), so
            // the second can only go to the stand-in, however slowly the orchestrator gets to
            // its wait.
            move |_| {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !seen.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            move |ctx| {
                second_started.store(true, Ordering::SeqCst);
                if on_stand_in() {
                    flag.store(true, Ordering::SeqCst);
                    while !ctx.cancelled() {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            },
        );
        let started = Instant::now();
        let e = match run_plain(&chip, first_runs) {
            Err(ChipRunError::Run(e)) => e,
            other => panic!("expected the watchdog's error, got {other:?}"),
        };
        assert!(
            on.load(Ordering::SeqCst),
            "the second kernel did not run on the stand-in"
        );
        assert_eq!(e.code, ErrorCode::SchedulerTimeout, "{e}");
        assert!(started.elapsed() < Duration::from_secs(30));
        run_plain(&chip, many_noops).expect("a normal run after the failure");
    });
}

#[test]
fn a_helped_kernel_that_hangs_is_caught_by_the_watchdog_and_the_chip_recovers() {
    with_timeout(120, || {
        pto_kernels::link();
        let spec = ChipSpec {
            clusters: 1,
            scheduler_timeout: Some(Duration::from_millis(300)),
            ..ChipSpec::default()
        };
        let chip = ChipWorker::new(
            spec,
            EnvSource::from_pairs([("PTO2_RING_TASK_WINDOW", "16")]),
        )
        .unwrap();
        TRAP_CALLS.orchestrated_here();
        // A run succeeds until the orchestrator helps with a trap (as the first test shows,
        // within a few runs).
        let e = (0..20)
            .find_map(|_| {
                let started = Instant::now();
                match run_plain(&chip, many_traps) {
                    Ok(()) => None,
                    Err(ChipRunError::Run(e)) => Some((e, started.elapsed())),
                    Err(other) => panic!("expected a run error, got {other}"),
                }
            })
            .map(|(e, took)| {
                assert!(took < Duration::from_secs(30), "{took:?}");
                e
            })
            .expect("the orchestrator helped with no trap in 20 runs");
        assert_eq!(e.code, ErrorCode::SchedulerTimeout, "{e}");
        assert_eq!(TRAP_CALLS.on_orchestrator.load(Ordering::SeqCst), 1);
        assert!(e.detail.contains("no progress for 300 ms"), "{}", e.detail);
        // The chip is usable again.
        run_plain(&chip, many_noops).expect("a normal run after the failure");
    });
}

static IN_KERNEL_SEEN: AtomicU64 = AtomicU64::new(0);
static IN_KERNEL_MISSED: AtomicU64 = AtomicU64::new(0);
fn reports_in_kernel(ctx: &mut KernelCtx<'_>) {
    let counter = if pto_chip::kernel::in_kernel() {
        &IN_KERNEL_SEEN
    } else {
        &IN_KERNEL_MISSED
    };
    counter.fetch_add(1, Ordering::SeqCst);
    if ctx.task().local() % 7 == 3 {
        panic!("a kernel panic the chip reports");
    }
}
pto_chip::register_kernel!(
    IN_KERNEL = "test.help.in_kernel",
    CoreType::Aiv,
    reports_in_kernel
);

fn many_in_kernel<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    independent(s, IN_KERNEL)
}

#[test]
fn in_kernel_is_true_inside_every_kernel_and_false_after_one_panics() {
    with_timeout(120, || {
        // A hook that keeps kernel panics quiet (as the Python module's does) would consult
        // `in_kernel` on whichever thread runs the kernel: executors, the stand-in, or the
        // orchestrator helping on a 16-slot window.
        let chip = small_window_chip();
        for _ in 0..3 {
            let e = run_plain(&chip, many_in_kernel).expect_err("some kernels panic");
            assert!(matches!(e, ChipRunError::Run(ref e) if e.code == ErrorCode::KernelPanic));
        }
        assert!(IN_KERNEL_SEEN.load(Ordering::SeqCst) > 0);
        assert_eq!(IN_KERNEL_MISSED.load(Ordering::SeqCst), 0);
        assert!(
            !pto_chip::kernel::in_kernel(),
            "the orchestrator's thread after the runs"
        );
    });
}

/// Set while the orchestration of [`runs_ahead`] or [`a_chain`] is still submitting.
static SUBMITTING: AtomicBool = AtomicBool::new(false);
/// Calls of [`ahead`] on the orchestrator's thread while it was still submitting.
static RAN_WHILE_SUBMITTING: AtomicU64 = AtomicU64::new(0);
static AHEAD_CALLS: Calls = Calls::new();
fn ahead(_ctx: &mut KernelCtx<'_>) {
    if AHEAD_CALLS.note() && SUBMITTING.load(Ordering::SeqCst) {
        RAN_WHILE_SUBMITTING.fetch_add(1, Ordering::SeqCst);
    }
    spin_for(Duration::from_micros(3));
}
pto_chip::register_kernel!(AHEAD = "test.help.ahead", CoreType::Aiv, ahead);

/// Holders started, and how many the next run of [`runs_ahead`] submits (the executors).
static HOLDERS_STARTED: AtomicU64 = AtomicU64::new(0);
static HOLDERS: AtomicU64 = AtomicU64::new(0);
/// Keeps an executor busy until the orchestration stops submitting (10 s at most).
fn holder(_ctx: &mut KernelCtx<'_>) {
    HOLDERS_STARTED.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    while SUBMITTING.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(100));
    }
}
pto_chip::register_kernel!(HOLDER = "test.help.holder", CoreType::Aiv, holder);

/// Tasks [`runs_ahead`] submits past the holders: more than 64 per worker thread, so well
/// past any lookahead the rule allows.
fn ahead_tasks() -> u64 {
    64 * (HOLDERS.load(Ordering::SeqCst) + 1) + 64
}

/// Submits one holder per executor and waits (in its own code, 10 s at most) until all have
/// started.
fn hold_executors(s: &mut RootScope<'_>) -> OrchResult<()> {
    let holders = HOLDERS.load(Ordering::SeqCst);
    for _ in 0..holders {
        s.submit_aiv(HOLDER, KernelArgs::new())?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while HOLDERS_STARTED.load(Ordering::SeqCst) < holders && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Every executor held, then independent quick tasks in the root scope (none retires before
/// the run ends): they pile up ready, and only the orchestrator can run them.
fn runs_ahead<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    hold_executors(s)?;
    for _ in 0..ahead_tasks() {
        s.submit_aiv(AHEAD, KernelArgs::new())?;
    }
    SUBMITTING.store(false, Ordering::SeqCst);
    Ok(())
}

/// A warm-up run of [`AHEAD`] alone (afterwards it is a kernel seen to return quickly).
fn warm_up<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    for _ in 0..16 {
        s.submit_aiv(AHEAD, KernelArgs::new())?;
    }
    Ok(())
}

/// Every executor held, then a chain of quick INOUT tasks: one ready task at a time, never
/// a surplus.
fn a_chain<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    hold_executors(s)?;
    let ci = TensorCreateInfo::new(&[1], DType::F32);
    let t = s.submit_aiv(AHEAD, KernelArgs::new().output(ci))?.tensor(0);
    for _ in 0..ahead_tasks() {
        s.submit_aiv(AHEAD, KernelArgs::new().inout(t))?;
    }
    SUBMITTING.store(false, Ordering::SeqCst);
    Ok(())
}

/// Runs `orch` with [`SUBMITTING`] set; returns how many [`AHEAD`] calls ran on the
/// orchestrator's thread while it submitted.
fn ran_while_submitting(chip: &ChipWorker, orch: pto_chip::orch::OrchFn) -> u64 {
    let before = RAN_WHILE_SUBMITTING.load(Ordering::SeqCst);
    HOLDERS_STARTED.store(0, Ordering::SeqCst);
    SUBMITTING.store(true, Ordering::SeqCst);
    let result = run_plain(chip, orch);
    SUBMITTING.store(false, Ordering::SeqCst);
    result.expect("runs");
    RAN_WHILE_SUBMITTING.load(Ordering::SeqCst) - before
}

#[test]
fn an_orchestrator_that_runs_ahead_runs_surplus_work_but_never_a_chains_one_ready_task() {
    with_timeout(120, || {
        // More AIV cores (2 per cluster) than the host has CPUs: every executor holds one and
        // there are cores left for the rest. A worker on any host of 2 CPUs or more.
        let host = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chip = chip(24.max(host as u32), &[]);
        HOLDERS.store(chip.executor_threads() as u64, Ordering::SeqCst);
        AHEAD_CALLS.orchestrated_here();
        let tasks = ahead_tasks();
        // The window (16384 by default) never fills and nothing waits for a tensor: only the
        // lookahead rule (H7) runs work on the orchestrator before it stops submitting. It
        // takes quick kernels only, and one run preempted past 20 µs marks the kernel long
        // (then only the held executors may run it): a few attempts, each after a warm-up.
        let mut helped = 0;
        for _ in 0..3 {
            run_plain(&chip, warm_up).expect("runs");
            helped = ran_while_submitting(&chip, runs_ahead);
            assert_eq!(
                HOLDERS_STARTED.load(Ordering::SeqCst),
                chip.executor_threads() as u64,
                "every executor took a holder"
            );
            if helped > 0 {
                break;
            }
        }
        assert!(
            !AHEAD_CALLS.first_on_orchestrator.load(Ordering::SeqCst),
            "a kernel never seen to return ran first on the orchestrator"
        );
        if chip.orchestrator_is_worker() {
            // On a quiet host all but the last lookahead's worth (8 per worker).
            assert!(
                helped > 0,
                "with every executor held, the orchestrator ran none of {tasks} ready tasks \
                 while it submitted"
            );
        } else {
            assert_eq!(
                helped, 0,
                "the orchestrator ran ahead work beside enough executors"
            );
        }
        // A chain has one ready task at a time, no surplus: it is left to the executors, even
        // held ones (the one task an executor comes back for is never taken).
        for _ in 0..3 {
            assert_eq!(
                ran_while_submitting(&chip, a_chain),
                0,
                "the orchestrator took a chain's one ready task while it submitted"
            );
        }
    });
}
