//! How tasks reach the executors: a slot's payload is reused by the slot's next task
//! (`Graph::publish` gives it back, `TaskPayload::fresh` refills it), and a replay may queue
//! tasks while an executor holds the graph lock (`OrchCore::enqueue`) but returns only once
//! every task it submitted is published.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{chip, f32_tensor, run_plain, with_timeout};
use pto_chip::kernel::{CoreType, KernelCtx, KernelRef};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope};
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

/// Replays the graph `REPLAYS` times, each in a scope of its own; after each replay returns,
/// waits in user code (no runtime call, which would publish queued tasks) for every task
/// submitted so far to run. A replay that returned with tasks still queued would leave them
/// where no executor can see them, and this wait would time out.
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
                let deadline = Instant::now() + Duration::from_secs(10);
                while RAN.load(Ordering::SeqCst) < want {
                    if Instant::now() > deadline {
                        return Err(s.report_fatal(format!(
                            "replay {r} returned, but only {} of its {GRAPH_TASKS} tasks ran within 10 s",
                            GRAPH_TASKS + RAN.load(Ordering::SeqCst) - want
                        )));
                    }
                    std::thread::yield_now();
                }
                Ok(())
            })?;
        }
        Ok(())
    })
}

#[test]
fn a_replay_returns_only_when_every_task_it_submitted_is_published() {
    with_timeout(120, || {
        let chip: ChipWorker = chip(2, &[]);
        run_plain(&chip, replays_then_wait_outside_the_runtime)
            .expect("every replayed task ran while the orchestration waited");
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

#[test]
fn a_run_that_fails_during_a_replay_drops_the_queued_tasks_and_the_chip_goes_on() {
    with_timeout(120, || {
        let chip: ChipWorker = chip(2, &[]);
        for _ in 0..5 {
            let e = run_plain(&chip, replays_a_failing_graph).expect_err("a kernel panics");
            assert!(e.to_string().contains("KERNEL_PANIC"), "{e}");
            let before = RAN_AFTER.load(Ordering::SeqCst);
            run_plain(&chip, replays_eight).expect("the next run on the same chip succeeds");
            assert_eq!(RAN_AFTER.load(Ordering::SeqCst), before + GRAPH_TASKS);
        }
    });
}
