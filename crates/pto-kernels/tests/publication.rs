//! How tasks reach the executors: a slot's payload is reused by the slot's next task
//! (`Graph::publish` gives it back, `TaskPayload::fresh` refills it); a submit that finds the
//! graph lock held hands its task to the lock's holder (`OrchCore::publish`, rules HO1-HO3 of
//! `pto_types::wait::Handoff`), one submitted while every executor is busy may be left
//! unpublished for a later submit or an executor out of work (HO4), and a replay queues tasks
//! while an executor holds the lock
//! (`OrchCore::enqueue`) and hands off what is left when it returns. Either way a task is
//! published without another runtime call: an orchestration may wait for it in its own code.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{chip, f32_tensor, run_plain, with_timeout};
use pto_chip::kernel::{CoreType, KernelCtx, KernelRef};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchFn, OrchResult, RootScope};
use pto_chip::replay::RecordedGraph;
use pto_chip::{ChipWorker, RunContext};
use pto_types::{CallConfig, TaskArgs};

/// Task `i` of [`varied`] binds `i % 6` tensors (more than the four a payload keeps inline
/// for some) and `1 + i % 5` scalars: the first is its tensor count, the others `1000 i + j`.
fn arguments_of(i: u64) -> (usize, usize) {
    ((i % 6) as usize, 1 + (i % 5) as usize)
}

static CHECKED: AtomicU64 = AtomicU64::new(0);

/// Panics (failing the run with KERNEL_PANIC) unless the payload holds exactly the arguments
/// its task was submitted with.
fn check_arguments(ctx: &mut KernelCtx<'_>) {
    let tensors: u64 = ctx.scalar(0);
    let i: u64 = if ctx.num_scalars() > 1 {
        ctx.scalar::<u64>(1) / 1000
    } else {
        u64::MAX
    };
    if i != u64::MAX {
        let (want_tensors, want_scalars) = arguments_of(i);
        assert_eq!(ctx.num_scalars(), want_scalars, "task {i}: scalars");
        for j in 1..want_scalars {
            assert_eq!(
                ctx.scalar::<u64>(j),
                1000 * i + j as u64,
                "task {i}: scalar {j}"
            );
        }
        assert_eq!(tensors as usize, want_tensors, "task {i}: tensor count");
    }
    assert_eq!(ctx.num_tensors() as u64, tensors, "tensor count");
    for k in 0..ctx.num_tensors() {
        assert_eq!(ctx.input::<f32>(k).get(&[0]), 2.5, "tensor {k}");
    }
    CHECKED.fetch_add(1, Ordering::SeqCst);
}
pto_chip::register_kernel!(
    CHECK = "test.publication.check",
    CoreType::Aiv,
    check_arguments
);

const VARIED_TASKS: u64 = 2_000;

/// `VARIED_TASKS` tasks with varying argument counts, 8 per scope, on a 16-slot window: every
/// slot is reused over a hundred times.
fn varied<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let x = a.tensor(0);
    for chunk in 0..VARIED_TASKS / 8 {
        s.scope(|s| {
            for i in chunk * 8..chunk * 8 + 8 {
                let (tensors, scalars) = arguments_of(i);
                let mut args = KernelArgs::new().scalar(tensors as u64);
                for j in 1..scalars {
                    args = args.scalar(1000 * i + j as u64);
                }
                for _ in 0..tensors {
                    args = args.input(x);
                }
                s.submit_aiv(CHECK, args)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

#[test]
fn a_reused_payload_carries_exactly_its_own_tasks_arguments() {
    with_timeout(120, || {
        let chip = chip(1, &[("PTO2_RING_TASK_WINDOW", "16")]);
        let (_buffer, x) = f32_tensor(4, 2.5);
        for run in 1..=3 {
            chip.run_fn(
                varied,
                &TaskArgs::new().input(&x),
                &CallConfig::default(),
                &RunContext::default(),
            )
            .expect("every task saw exactly its own arguments");
            assert_eq!(CHECKED.load(Ordering::SeqCst), run * VARIED_TASKS);
        }
    });
}

static RAN: AtomicU64 = AtomicU64::new(0);

fn count(_ctx: &mut KernelCtx<'_>) {
    RAN.fetch_add(1, Ordering::SeqCst);
}
pto_chip::register_kernel!(COUNT = "test.publication.count", CoreType::Aiv, count);

const GRAPH_TASKS: u64 = 8;
const REPLAYS: u64 = 300;

/// A graph of `tasks` independent tasks of `kernel`, in verify mode off: verify mode publishes
/// each task at once, and the queue is what these tests are about.
fn independent_graph(name: &str, kernel: KernelRef, tasks: u64) -> RecordedGraph {
    RecordedGraph::record(name, &[], |r, _| {
        for _ in 0..tasks {
            r.submit_aiv(kernel, KernelArgs::new())?;
        }
        Ok(Vec::new())
    })
    .expect("records")
    .verified(false)
}

thread_local! {
    static GRAPH: RecordedGraph = independent_graph("eight", COUNT, GRAPH_TASKS);
    static FAILING_GRAPH: RecordedGraph = independent_graph("failing", FAILING, 64);
    static AFTER_GRAPH: RecordedGraph = independent_graph("after", COUNT_AFTER, GRAPH_TASKS);
}

/// Waits in user code (no runtime call, which would publish what is queued or handed off)
/// until `ran` counts `want` tasks, 10 s at most.
fn wait_outside_the_runtime(
    s: &mut pto_chip::orch::Scope<'_, '_>,
    ran: &AtomicU64,
    want: u64,
    what: &str,
) -> OrchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while ran.load(Ordering::SeqCst) < want {
        if Instant::now() > deadline {
            let missing = want - ran.load(Ordering::SeqCst);
            return Err(s.report_fatal(format!(
                "{what} returned, but {missing} of its tasks had not run within 10 s"
            )));
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// Replays the graph `REPLAYS` times, each in a scope of its own, and after each replay waits
/// in user code for every task submitted so far to run. A replay that returned with tasks
/// where no executor can see them would fail the wait.
fn replays_then_wait_outside_the_runtime<'r>(
    s: &mut RootScope<'r>,
    _a: &OrchArgs<'r>,
) -> OrchResult<()> {
    let base = RAN.load(Ordering::SeqCst);
    GRAPH.with(|g| {
        for r in 1..=REPLAYS {
            s.scope(|s| {
                s.replay(g, &[])?;
                let want = base + r * GRAPH_TASKS;
                wait_outside_the_runtime(s, &RAN, want, &format!("replay {r}"))
            })?;
        }
        Ok(())
    })
}

#[test]
fn a_replayed_task_runs_while_the_orchestration_waits_in_its_own_code() {
    with_timeout(120, || {
        let chip: ChipWorker = chip(2, &[]);
        run_plain(&chip, replays_then_wait_outside_the_runtime)
            .expect("every replayed task ran while the orchestration waited");
    });
}

const SUBMIT_ROUNDS: u64 = 2_000;

static RAN_SUBMITTED: AtomicU64 = AtomicU64::new(0);

fn count_submitted(_ctx: &mut KernelCtx<'_>) {
    RAN_SUBMITTED.fetch_add(1, Ordering::SeqCst);
}
pto_chip::register_kernel!(
    COUNT_SUBMITTED = "test.publication.count_submitted",
    CoreType::Aiv,
    count_submitted
);

/// `SUBMIT_ROUNDS` times: submits `GRAPH_TASKS` tasks, then waits in user code for them to
/// run. The executors hold the graph lock for most of each round, so many of these submits
/// find it held and hand their task off.
fn submits_then_wait_outside_the_runtime<'r>(
    s: &mut RootScope<'r>,
    _a: &OrchArgs<'r>,
) -> OrchResult<()> {
    let base = RAN_SUBMITTED.load(Ordering::SeqCst);
    for r in 1..=SUBMIT_ROUNDS {
        s.scope(|s| {
            for _ in 0..GRAPH_TASKS {
                s.submit_aiv(COUNT_SUBMITTED, KernelArgs::new())?;
            }
            let want = base + r * GRAPH_TASKS;
            wait_outside_the_runtime(s, &RAN_SUBMITTED, want, &format!("submit round {r}"))
        })?;
    }
    Ok(())
}

#[test]
fn a_submitted_task_runs_while_the_orchestration_waits_in_its_own_code() {
    with_timeout(180, || {
        let chip: ChipWorker = chip(2, &[]);
        for _ in 0..3 {
            run_plain(&chip, submits_then_wait_outside_the_runtime)
                .expect("every submitted task ran while the orchestration waited");
        }
    });
}

fn panic_once_in_eight(ctx: &mut KernelCtx<'_>) {
    let n = RAN_IN_FAILING.fetch_add(1, Ordering::SeqCst);
    assert!(n % 8 != 3, "the fourth task of a replay fails (call {n})");
    let _ = ctx;
}
static RAN_IN_FAILING: AtomicU64 = AtomicU64::new(0);
pto_chip::register_kernel!(
    FAILING = "test.publication.failing",
    CoreType::Aiv,
    panic_once_in_eight
);

fn replays_a_failing_graph<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    FAILING_GRAPH.with(|g| {
        for _ in 0..50 {
            s.scope(|s| s.replay(g, &[]).map(|_| ()))?;
        }
        Ok(())
    })
}

static RAN_AFTER: AtomicU64 = AtomicU64::new(0);

fn count_after(_ctx: &mut KernelCtx<'_>) {
    RAN_AFTER.fetch_add(1, Ordering::SeqCst);
}
pto_chip::register_kernel!(
    COUNT_AFTER = "test.publication.count_after",
    CoreType::Aiv,
    count_after
);

fn replays_eight<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    AFTER_GRAPH.with(|g| s.scope(|s| s.replay(g, &[]).map(|_| ())))
}

/// Submits 50 scopes of eight tasks of [`FAILING`]: the fourth of every eight calls panics.
fn submits_failing_tasks<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    for _ in 0..50 {
        s.scope(|s| {
            for _ in 0..8 {
                s.submit_aiv(FAILING, KernelArgs::new())?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

static RAN_AFTER_SUBMITS: AtomicU64 = AtomicU64::new(0);

fn count_after_submits(_ctx: &mut KernelCtx<'_>) {
    RAN_AFTER_SUBMITS.fetch_add(1, Ordering::SeqCst);
}
pto_chip::register_kernel!(
    COUNT_AFTER_SUBMITS = "test.publication.count_after_submits",
    CoreType::Aiv,
    count_after_submits
);

fn submits_eight<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    for _ in 0..GRAPH_TASKS {
        s.submit_aiv(COUNT_AFTER_SUBMITS, KernelArgs::new())?;
    }
    Ok(())
}

/// Five times on one chip: `failing` fails with KERNEL_PANIC, then `recovering` runs its
/// `GRAPH_TASKS` tasks (counted by `ran`) to the end.
fn fails_then_the_chip_goes_on(failing: OrchFn, recovering: OrchFn, ran: &'static AtomicU64) {
    with_timeout(120, move || {
        let chip: ChipWorker = chip(2, &[]);
        for _ in 0..5 {
            let e = run_plain(&chip, failing).expect_err("a kernel panics");
            assert!(e.to_string().contains("KERNEL_PANIC"), "{e}");
            let before = ran.load(Ordering::SeqCst);
            run_plain(&chip, recovering).expect("the next run on the same chip succeeds");
            assert_eq!(ran.load(Ordering::SeqCst), before + GRAPH_TASKS);
        }
    });
}

#[test]
fn a_run_that_fails_while_tasks_are_handed_off_drops_them_and_the_chip_goes_on() {
    fails_then_the_chip_goes_on(submits_failing_tasks, submits_eight, &RAN_AFTER_SUBMITS);
}

#[test]
fn a_run_that_fails_during_a_replay_drops_the_queued_tasks_and_the_chip_goes_on() {
    fails_then_the_chip_goes_on(replays_a_failing_graph, replays_eight, &RAN_AFTER);
}
