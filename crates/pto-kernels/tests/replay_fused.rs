//! A replay run as one task (`pto_chip::replay`, "Fused replay"): with verify off and nothing
//! observing tasks one by one, a graph without MIX or sync-start tasks runs as a single task
//! whose blocks run the graph's tasks. It must compute what a task-by-task replay computes
//! (AIC, AIV, dummy and multi-block tasks, intermediates, outputs), fail a panicking kernel
//! naming the graph's task, and fall back to task by task when the ring heap cannot hold the
//! whole graph at once.
//!
//! Which way a replay ran shows in the task id its kernels see: one per replay when fused.

mod common;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Mutex;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_chip::replay::{GraphInput, RecordedGraph};
use pto_chip::{RunContext, TaskId};
use pto_kernels::bench::INC;
use pto_kernels::hazard::{COPY_AFTER, FILL_WITH, OVERWRITE};
use pto_kernels::vector::ADD;
use pto_types::{CallConfig, DType, ErrorCode, RuntimeEnv, TaskArgs, WarCheck};

const N: u32 = 64;

/// The task ids the test kernels ran under.
static SEEN: Mutex<Vec<TaskId>> = Mutex::new(Vec::new());

/// Held by each test: `cargo test` runs them on threads of one process, and `SEEN` is shared.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn seen(ctx: &KernelCtx<'_>) {
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(ctx.task());
}

/// out = 3 · in, on an AIC core; panics when scalar 0 is 1.
fn kernel_triple_aic(ctx: &mut KernelCtx<'_>) {
    seen(ctx);
    assert!(ctx.scalar::<u64>(0) != 1, "told to panic");
    let x = ctx.input::<f32>(0);
    let mut out = ctx.output::<f32>(1);
    for i in 0..N {
        out.set(&[i], 3.0 * x.get(&[i]));
    }
}

/// out[i] = in[i] + 1 for the elements of this block (i mod block_num = block_idx).
fn kernel_plus_one_blocks(ctx: &mut KernelCtx<'_>) {
    seen(ctx);
    let x = ctx.input::<f32>(0);
    let mut out = ctx.output::<f32>(1);
    let (b, n) = (ctx.block_idx(), ctx.block_num());
    for i in (b..N).step_by(n as usize) {
        out.set(&[i], x.get(&[i]) + 1.0);
    }
}

pto_chip::register_kernel!(
    TRIPLE_AIC = "test.triple_aic",
    CoreType::Aic,
    kernel_triple_aic
);
pto_chip::register_kernel!(
    PLUS_ONE = "test.plus_one_blocks",
    CoreType::Aiv,
    kernel_plus_one_blocks
);

/// x → y = x + x (AIV) → t = 3y (AIC, into an `alloc_tensors` intermediate) → a dummy over t →
/// z = t + 1 (AIV, 4 blocks) → z[0] += 1; returns z = 6x + 1 (+1 at element 0). `panic`:
/// the AIC task panics.
fn mixed_graph(panic: bool) -> RecordedGraph {
    let x = GraphInput::new(&[N], DType::F32).unwrap();
    RecordedGraph::record("mixed", &[x], |r, ins| {
        let ci = TensorCreateInfo::new(&[N], DType::F32);
        let t = r.alloc_tensors(&[ci])?.tensor(0);
        let y = r
            .submit_aiv(
                ADD,
                KernelArgs::new().input(ins[0]).input(ins[0]).output(ci),
            )?
            .tensor(0);
        let triple = KernelArgs::new().input(y).output_existing(t);
        r.submit_aic(TRIPLE_AIC, triple.scalar(u64::from(panic)))?;
        r.submit_dummy(KernelArgs::new().inout(t))?;
        let plus = KernelArgs::new().input(t).output(ci).block_num(4);
        let z = r.submit_aiv(PLUS_ONE, plus)?.tensor(0);
        r.submit_aiv(INC, KernelArgs::new().inout(z))?;
        Ok(vec![z])
    })
    .unwrap()
}

thread_local! {
    static GRAPH: RefCell<Option<RecordedGraph>> = const { RefCell::new(None) };
}

/// Entry: tensors (x, zeros, out), scalar steps; out = graph^steps(x), by replay.
fn chain<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = GRAPH.with(|g| g.borrow().clone()).expect("installed");
    let steps: u64 = a.scalar(0);
    let mut x = a.tensor(0);
    for _ in 0..steps {
        x = s.replay(&g, &[x])?[0];
    }
    let args = KernelArgs::new().input(x).input(a.tensor(1));
    s.submit_aiv(ADD, args.output_existing(a.tensor(2)))?;
    Ok(())
}

/// Runs `steps` replays of `g` with `env`; returns the output, how many task ids the test
/// kernels saw and the tasks the run report counts, or the run's error.
fn run(
    g: RecordedGraph,
    steps: u64,
    env: RuntimeEnv,
) -> Result<(Vec<f32>, usize, u64), Box<pto_chip::ChipError>> {
    GRAPH.with(|slot| *slot.borrow_mut() = Some(g));
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clear();
    let chip = chip(2, &[]);
    let (_x, xt) = f32_tensor(N as usize, 1.0);
    let (_z, zt) = f32_tensor(N as usize, 0.0);
    let (out, ot) = f32_tensor(N as usize, -1.0);
    let args = TaskArgs::new()
        .input(&xt)
        .input(&zt)
        .output(&ot)
        .scalar(steps);
    let cfg = CallConfig::with_runtime_env(env);
    let result = chip.run_fn(chain, &args, &cfg, &RunContext::default());
    GRAPH.with(|slot| *slot.borrow_mut() = None);
    let report = match result {
        Ok(report) => report,
        Err(pto_chip::ChipRunError::Run(e)) => return Err(e),
        Err(other) => panic!("expected a run error, got {other:?}"),
    };
    let ids: BTreeSet<TaskId> = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .copied()
        .collect();
    Ok((out.read_f32(0, N as usize), ids.len(), report.tasks))
}

#[test]
fn a_fused_replay_computes_what_a_replay_task_by_task_does() {
    let _serial = serial();
    with_timeout(60, || {
        let steps = 4;
        let env = RuntimeEnv::default;
        let (by_task, by_task_ids, by_task_count) =
            run(mixed_graph(false).verified(true), steps, env()).unwrap();
        let (fused, fused_ids, fused_count) =
            run(mixed_graph(false).verified(false), steps, env()).unwrap();
        assert_eq!(fused, by_task);
        // The report counts what the orchestration submitted either way: 6 graph tasks (the
        // hidden alloc task included) per replay, and the final copy.
        assert_eq!(by_task_count, 6 * steps + 1);
        assert_eq!(fused_count, by_task_count);
        // x ← 6x + 1 (element 0: + 2), four times from 1.
        let mut want = [1.0f32, 1.0];
        for _ in 0..steps {
            want = [6.0 * want[0] + 2.0, 6.0 * want[1] + 1.0];
        }
        assert_eq!(fused[0], want[0]);
        assert!(
            fused[1..].iter().all(|&v| v == want[1]),
            "{:?}",
            &fused[..4]
        );
        // Task by task, the AIC and the 4-block task of each replay are two tasks; fused, the
        // whole replay is one.
        assert_eq!(by_task_ids, 2 * steps as usize);
        assert_eq!(fused_ids, steps as usize);
    });
}

#[test]
fn a_kernel_panic_inside_a_fused_replay_fails_the_run_naming_the_graph_task() {
    let _serial = serial();
    with_timeout(60, || {
        let error = run(mixed_graph(true).verified(false), 2, RuntimeEnv::default())
            .expect_err("the AIC kernel panics");
        let e = &*error;
        assert_eq!(e.code, ErrorCode::KernelPanic, "{e}");
        for part in [
            "kernel test.triple_aic of task",
            "graph \"mixed\" task 2: ",
            "told to panic",
        ] {
            assert!(e.to_string().contains(part), "{part:?} missing from {e}");
        }
    });
}

#[test]
fn a_graph_whose_heap_does_not_fit_twice_replays_task_by_task() {
    let _serial = serial();
    with_timeout(60, || {
        // Two steps of 256 KiB intermediates, each in a scope of its own: task by task they
        // need one at a time; fused, the whole graph's heap stays allocated.
        const BIG: u32 = 64 * 1024;
        let x = GraphInput::new(&[N], DType::F32).unwrap();
        let g = RecordedGraph::record("big", &[x], |r, ins| {
            let small = TensorCreateInfo::new(&[N], DType::F32);
            let mids = r.alloc_tensors(&[small, small])?;
            let mut cur = ins[0];
            for step in 0..2 {
                let mid = mids.tensor(step);
                r.scope(|r| {
                    let ci = TensorCreateInfo::new(&[BIG], DType::F32);
                    let scratch = r.alloc_tensors(&[ci])?.tensor(0);
                    let triple = KernelArgs::new().input(cur).output_existing(scratch);
                    r.submit_aic(TRIPLE_AIC, triple.scalar(0u64))?;
                    let plus = KernelArgs::new().input(scratch).output_existing(mid);
                    r.submit_aiv(PLUS_ONE, plus)?;
                    Ok(())
                })?;
                cur = mid;
            }
            Ok(vec![cur])
        })
        .unwrap()
        .verified(false);
        let ids = |heap: u64| {
            let env = RuntimeEnv::default().with_heap(heap);
            run(g.clone(), 1, env).unwrap().1
        };
        assert_eq!(
            ids(8 << 20),
            1,
            "fused when the heap holds the graph twice over"
        );
        assert_eq!(ids(768 << 10), 4, "task by task when it does not");
    });
}

/// x is read (slowly, a plain input) into y, then overwritten: a write-after-read pair through
/// a graph input that no edge of the graph orders. Returns y.
fn read_then_overwrite_graph() -> RecordedGraph {
    let x = GraphInput::new(&[N], DType::F32).unwrap();
    RecordedGraph::record("war", &[x], |r, ins| {
        let ci = TensorCreateInfo::new(&[N], DType::F32);
        let read = KernelArgs::new().input(ins[0]).output(ci).scalar(50_000u64);
        let y = r.submit_aiv(COPY_AFTER, read)?.tensor(0);
        let overwrite = KernelArgs::new().output_existing(ins[0]);
        r.submit_aiv(FILL_WITH, overwrite.scalar(OVERWRITE))?;
        Ok(vec![y])
    })
    .unwrap()
    .verified(false)
}

/// Entry (x, out): out = y of one replay over x.
fn replay_war<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = GRAPH.with(|g| g.borrow().clone()).expect("installed");
    let y = s.replay(&g, &[a.tensor(0)])?[0];
    let copy = KernelArgs::new().input(y).output_existing(a.tensor(1));
    s.submit_aiv(COPY_AFTER, copy.scalar(0u64))?;
    Ok(())
}

#[test]
fn track_war_orders_an_overwrite_inside_a_graph_that_no_edge_of_it_orders() {
    let _serial = serial();
    with_timeout(60, || {
        let g = read_then_overwrite_graph();
        assert!(
            g.fusable(),
            "the graph qualifies; the replay must not fuse it anyway"
        );
        GRAPH.with(|slot| *slot.borrow_mut() = Some(g));
        let chip = chip(2, &[]);
        let (_x, xt) = f32_tensor(N as usize, 1.0);
        let (out, ot) = f32_tensor(N as usize, -1.0);
        let cfg = CallConfig {
            track_war: true,
            war_check: WarCheck::Off,
            ..CallConfig::default()
        };
        let args = TaskArgs::new().inout(&xt).output(&ot);
        chip.run_fn(replay_war, &args, &cfg, &RunContext::default())
            .unwrap();
        GRAPH.with(|slot| *slot.borrow_mut() = None);
        let y = out.read_f32(0, N as usize);
        assert!(
            y.iter().all(|&v| v == 1.0),
            "the read saw the overwrite: {:?}",
            &y[..4]
        );
    });
}

/// The task each chain step ran under, and whether it ran on the orchestrator's thread.
type Steps = Vec<(TaskId, bool)>;

/// The thread the last run's orchestration ran on, and the chain steps since.
static STEPS: Mutex<(Option<std::thread::ThreadId>, Steps)> = Mutex::new((None, Vec::new()));

/// One step of a chain: 10 µs of work (a quick kernel: under the 20 µs the engine calls long).
fn kernel_chain_step(ctx: &mut KernelCtx<'_>) {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_micros(10) {
        std::hint::spin_loop();
    }
    let mut steps = STEPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let here = steps.0 == Some(std::thread::current().id());
    steps.1.push((ctx.task(), here));
}
pto_chip::register_kernel!(
    CHAIN_STEP = "test.fused.chain_step",
    CoreType::Aiv,
    kernel_chain_step
);

/// Two chains of quick steps from the graph's input: 1,500 steps and 300.
fn two_chains_graph() -> RecordedGraph {
    let x = GraphInput::new(&[N], DType::F32).unwrap();
    RecordedGraph::record("two chains", &[x], |r, ins| {
        let ci = TensorCreateInfo::new(&[1], DType::F32);
        let cells = r.alloc_tensors(&[ci, ci])?;
        for (cell, len) in [(cells.tensor(0), 1500), (cells.tensor(1), 300)] {
            r.submit_aiv(CHAIN_STEP, KernelArgs::new().inout(ins[0]).inout(cell))?;
            for _ in 1..len {
                r.submit_aiv(CHAIN_STEP, KernelArgs::new().inout(cell))?;
            }
        }
        Ok(vec![])
    })
    .unwrap()
}

/// Entry: tensor x, scalar replays.
fn replays<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = GRAPH.with(|g| g.borrow().clone()).expect("installed");
    for _ in 0..a.scalar::<u64>(0) {
        s.replay(&g, &[a.tensor(0)])?;
    }
    Ok(())
}

#[test]
fn a_parked_last_worker_is_called_back_for_each_fused_replay() {
    let _serial = serial();
    with_timeout(120, || {
        let chip = chip(1, &[]);
        if !chip.orchestrator_is_worker() {
            // A host with a CPU per core: the orchestrator runs no long work.
            return;
        }
        GRAPH.with(|slot| *slot.borrow_mut() = Some(two_chains_graph().verified(false)));
        let (_x, xt) = f32_tensor(N as usize, 1.0);
        let cfg = CallConfig {
            war_check: WarCheck::Off,
            ..CallConfig::default()
        };
        let run = |replays_n: u64| {
            let args = TaskArgs::new().inout(&xt).scalar(replays_n);
            chip.run_fn(replays, &args, &cfg, &RunContext::default())
                .expect("runs");
        };
        // A first run: the kernel has returned since, so the orchestrator may run it.
        run(1);
        {
            let mut steps = STEPS.lock().unwrap();
            *steps = (Some(std::thread::current().id()), Vec::new());
        }
        run(4);
        GRAPH.with(|slot| *slot.borrow_mut() = None);
        let steps = std::mem::take(&mut STEPS.lock().unwrap().1);
        let replays: BTreeSet<TaskId> = steps.iter().map(|&(t, _)| t).collect();
        assert_eq!(replays.len(), 4, "each replay ran as one task");
        // While the long chain runs on the executor, the orchestrator finishes the short one,
        // finds nothing more and parks. The next replay becomes ready when the long chain
        // ends, on the executor: its second block is a whole graph, and must call the parked
        // orchestrator back (a quick kernel's single block would be left to the executor's
        // return). Without the call back the orchestrator sleeps through replays 2-4.
        let helped: Vec<usize> = replays
            .iter()
            .skip(1)
            .map(|r| steps.iter().filter(|&&(t, here)| t == *r && here).count())
            .collect();
        assert!(
            helped.iter().any(|&n| n > 0),
            "chain steps the orchestrator ran in replays 2-4: {helped:?}"
        );
    });
}
