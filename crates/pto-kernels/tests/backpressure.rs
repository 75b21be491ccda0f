//! Back-pressure: more tasks than a ring holds must flow through it with correct results
//! (CHIP_RUNTIME.md §4, §10 rows E5–E7 and the 208-tasks-through-a-window-of-16 case).

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{chip, f32_tensor, with_timeout};
use pto_chip::RunContext;
use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_kernels::bench::{FILL, INC};
use pto_types::{CallConfig, DType, RuntimeEnv, TaskArgs};

fn run(
    chip: &pto_chip::ChipWorker,
    orch: pto_chip::orch::OrchFn,
    args: &TaskArgs,
    env: RuntimeEnv,
) {
    chip.run_fn(
        orch,
        args,
        &CallConfig::with_runtime_env(env),
        &RunContext::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// 208 INOUT increments of one counter, 8 per scope, through windows of 16.
fn chain_208<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let counter = a.tensor(0);
    for _ in 0..26 {
        s.scope(|s| {
            for _ in 0..8 {
                s.submit_aiv(INC, KernelArgs::new().inout(counter))?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

#[test]
fn backpressure_208_chained_tasks_through_a_window_of_16() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let (buf, counter) = f32_tensor(1, 0.0);
        let env = RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(4096)
            .with_dep_pool(16);
        run(&chip, chain_208, &TaskArgs::new().inout(&counter), env);
        assert_eq!(buf.read_f32(0, 1), [208.0]);
    });
}

/// 208 independent tasks, each filling its own element, 13 per scope.
fn independent_208<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let out = a.tensor(0);
    for chunk in 0..16u32 {
        s.scope(|s| {
            for i in 0..13u32 {
                let element = out.view(&[1], &[chunk * 13 + i]).expect("in bounds");
                s.submit_aiv(FILL, KernelArgs::new().output_existing(element))?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

#[test]
fn backpressure_208_independent_tasks_through_a_window_of_16() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let (buf, out) = f32_tensor(208, 0.0);
        let env = RuntimeEnv::default()
            .with_task_window(16)
            .with_dep_pool(4)
            .with_heap(1024);
        run(
            &chip,
            independent_208,
            &TaskArgs::new().output_existing(&out),
            env,
        );
        assert!(buf.read_f32(0, 208).iter().all(|&v| v == 1.0));
    });
}

/// 2000 chained increments in nested scopes of two tasks each, on windows of 4.
fn nested_chain<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let counter = a.tensor(0);
    for _ in 0..250 {
        s.scope(|s| {
            s.submit_aiv(INC, KernelArgs::new().inout(counter))?;
            s.scope(|s| {
                s.submit_aiv(INC, KernelArgs::new().inout(counter))?;
                s.scope(|s| {
                    s.submit_aiv(INC, KernelArgs::new().inout(counter))?;
                    s.scope(|s| {
                        for _ in 0..2 {
                            s.submit_aiv(INC, KernelArgs::new().inout(counter))?;
                        }
                        Ok(())
                    })?;
                    s.submit_aiv(INC, KernelArgs::new().inout(counter))?;
                    Ok(())
                })?;
                s.submit_aiv(INC, KernelArgs::new().inout(counter))?;
                Ok(())
            })?;
            s.submit_aiv(INC, KernelArgs::new().inout(counter))?;
            Ok(())
        })?;
    }
    Ok(())
}

#[test]
fn backpressure_2000_tasks_through_windows_of_4_and_8() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let (buf, counter) = f32_tensor(1, 0.0);
        // Ring 3 holds the depth-3 scope (2 tasks) and the depth-4 scope (2 tasks) at once.
        let env = RuntimeEnv::default()
            .with_task_window([4, 4, 4, 8])
            .with_heap(1024)
            .with_dep_pool(4);
        run(&chip, nested_chain, &TaskArgs::new().inout(&counter), env);
        assert_eq!(buf.read_f32(0, 1), [2000.0]);
    });
}

fn kernel_fill42(ctx: &mut KernelCtx<'_>) {
    ctx.output::<f32>(0).fill(42.0);
}

fn kernel_copy0(ctx: &mut KernelCtx<'_>) {
    let v = ctx.input::<f32>(0).get(&[0]);
    ctx.output::<f32>(1).set(&[0], v);
}

fn kernel_sleep(ctx: &mut KernelCtx<'_>) {
    let ms: u64 = ctx.scalar(0);
    std::thread::sleep(Duration::from_millis(ms));
}

pto_chip::register_kernel!(FILL42 = "test.fill42", CoreType::Aiv, kernel_fill42);
pto_chip::register_kernel!(COPY0 = "test.copy0", CoreType::Aiv, kernel_copy0);
pto_chip::register_kernel!(SLEEP = "test.sleep", CoreType::Aiv, kernel_sleep);

/// E6: two sequential scopes each fill a 1 MiB scratch and copy element 0 into y1 / y2.
fn rebase<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (y1, y2) = (a.tensor(0), a.tensor(1));
    let scratch = TensorCreateInfo::new(&[256 * 1024], DType::F32);
    for y in [y1, y2] {
        s.scope(|s| {
            let t = s
                .submit_aiv(FILL42, KernelArgs::new().output(scratch))?
                .tensor(0);
            s.submit_aiv(COPY0, KernelArgs::new().input(t).output_existing(y))?;
            Ok(())
        })?;
    }
    Ok(())
}

#[test]
fn e6_heap_rebase_between_scopes() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let (b1, y1) = f32_tensor(8, -1.0);
        let (b2, y2) = f32_tensor(8, -1.0);
        let env = RuntimeEnv::default().with_heap([256 << 20, 1536 << 10, 256 << 20, 256 << 20]);
        run(
            &chip,
            rebase,
            &TaskArgs::new().output_existing(&y1).output_existing(&y2),
            env,
        );
        for b in [b1, b2] {
            let v = b.read_f32(0, 8);
            assert_eq!(v[0], 42.0);
            assert!(v[1..].iter().all(|&x| x == -1.0));
        }
    });
}

/// E5: a consumed child scope's bytes are reclaimed and a later request wraps to 0.
fn wrap_after_child<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        s.scope(|s| {
            s.scope(|s| {
                s.scope(|s| {
                    let big = TensorCreateInfo::new(&[768], DType::F32); // 3072 B
                    s.submit_dummy(KernelArgs::new().output(big))?;
                    Ok(())
                })?;
                let kib = TensorCreateInfo::new(&[256], DType::F32); // 1024 B
                s.submit_dummy(KernelArgs::new().output(kib))?;
                let tiny = TensorCreateInfo::new(&[1], DType::F32); // padded to 1024 B
                s.submit_dummy(KernelArgs::new().output(tiny))?;
                Ok(())
            })
        })
    })
}

#[test]
fn e5_consumed_child_scope_lets_the_heap_wrap() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let env = RuntimeEnv::default().with_heap([0, 0, 0, 4096]);
        run(&chip, wrap_after_child, &TaskArgs::new(), env);
    });
}

/// E7: the head of ring 1 (from a closed scope) runs a 1 s kernel while the orchestrator
/// waits for a slot; the backstop must not fire while a kernel runs.
fn slow_head<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        s.submit_aiv(SLEEP, KernelArgs::new().scalar(1000u64))?;
        Ok(())
    })?;
    s.scope(|s| {
        for _ in 0..3 {
            s.submit_dummy(KernelArgs::new())?;
        }
        Ok(())
    })
}

#[test]
fn e7_backstop_pauses_while_a_kernel_runs() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let started = Instant::now();
        let env = RuntimeEnv::default().with_task_window([0, 4, 0, 0]);
        run(&chip, slow_head, &TaskArgs::new(), env);
        assert!(started.elapsed() >= Duration::from_millis(1000));
    });
}

static COHORT_ARRIVED: AtomicU32 = AtomicU32::new(0);

/// Every block waits until all blocks of its task have started: only a co-scheduled cohort
/// gets past the barrier.
fn kernel_barrier(ctx: &mut KernelCtx<'_>) {
    let want = ctx.block_num();
    COHORT_ARRIVED.fetch_add(1, Ordering::AcqRel);
    let deadline = Instant::now() + Duration::from_secs(10);
    while COHORT_ARRIVED.load(Ordering::Acquire) < want {
        assert!(
            Instant::now() < deadline,
            "the sync-start cohort did not start together"
        );
        std::thread::yield_now();
    }
}

pto_chip::register_kernel!(BARRIER = "test.barrier", CoreType::Aiv, kernel_barrier);

fn sync_cohort<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    // Busy the cores first so the cohort has to wait for all of them to drain.
    for _ in 0..6 {
        s.submit_aiv(SLEEP, KernelArgs::new().scalar(20u64))?;
    }
    s.submit_aiv(
        BARRIER,
        KernelArgs::new().block_num(4).require_sync_start(true),
    )?;
    for _ in 0..6 {
        s.submit_aiv(SLEEP, KernelArgs::new().scalar(5u64))?;
    }
    Ok(())
}

#[test]
fn sync_start_cohort_runs_all_blocks_together() {
    with_timeout(60, || {
        let chip = chip(2, &[]); // 4 AIV cores: the cohort needs all of them
        COHORT_ARRIVED.store(0, Ordering::Release);
        run(&chip, sync_cohort, &TaskArgs::new(), RuntimeEnv::default());
        assert_eq!(COHORT_ARRIVED.load(Ordering::Acquire), 4);
    });
}

/// A dep-pool wait on ring 1 whose need shrinks when a producer on ring 0 completes, while
/// ring 1's head (from a closed scope) runs a long kernel: the orchestrator waits for ring 1's
/// wake target (issue 25) and the run completes, without a false capacity error.
fn cross_ring_dep_wait<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (t, y) = (a.tensor(0), a.tensor(1));
    s.submit_aiv(SLEEP, KernelArgs::new().inout(t).scalar(50u64))?;
    s.scope(|s| {
        s.submit_aiv(SLEEP, KernelArgs::new().scalar(200u64))?;
        // Four consumers of the pending producer fill ring 1's pool of four dep entries.
        for _ in 0..4 {
            s.submit_dummy(KernelArgs::new().input(t))?;
        }
        Ok(())
    })?;
    s.scope(|s| {
        s.submit_aiv(COPY0, KernelArgs::new().input(t).output_existing(y))?;
        Ok(())
    })
}

#[test]
fn dep_pool_wait_across_rings_completes() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let (_, t) = f32_tensor(1, 7.0);
        let (out, y) = f32_tensor(1, -1.0);
        let env = RuntimeEnv::default().with_dep_pool([16, 4, 16, 16]);
        let args = TaskArgs::new().inout(&t).output_existing(&y);
        run(&chip, cross_ring_dep_wait, &args, env);
        assert_eq!(out.read_f32(0, 1), [7.0]);
    });
}
