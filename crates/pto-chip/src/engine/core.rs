//! Simulated core threads (CHIP_RUNTIME.md §6.4).
//!
//! A core waits for an assignment in its mailbox (spin briefly, then park), runs the kernel
//! under `catch_unwind`, and reports to the scheduler that owns its cluster. A panicking kernel
//! is reported as KERNEL_PANIC; the thread survives.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use pto_types::wait::Waiter;

use crate::kernel::{CoreId, KernelCtx};

use super::{Assignment, ChipShared, Completion, Shape};

/// The body of core thread `id`.
pub(crate) fn core_main(chip: Arc<ChipShared>, id: u32) {
    let cell = &chip.cores[id as usize];
    let mut waiter = Waiter::new(&cell.ec, chip.core_spin);
    loop {
        let assignment = cell.mailbox.lock().take();
        if let Some(a) = assignment {
            run_assignment(&chip, id, a);
            waiter.reset();
            continue;
        }
        if chip.shutdown.load(Ordering::Acquire) {
            return;
        }
        let _ = waiter.wait(None);
    }
}

fn run_assignment(chip: &ChipShared, id: u32, a: Assignment) {
    let started = Instant::now();
    let panic = {
        let payload = &a.payload;
        let mut ctx = KernelCtx::new(
            &payload.tensors,
            &payload.scalars,
            a.block_idx,
            payload.block_num,
            a.sub_block_id,
            CoreId(id),
            a.task,
            &a.run.cancelled,
        );
        if let Shape::Mix(mask) = payload.shape {
            ctx = ctx.with_mix_lanes(mask.count_ones());
        }
        let kernel = a.kernel;
        catch_unwind(AssertUnwindSafe(|| kernel.call(&mut ctx)))
            .err()
            .map(|p| panic_message(p.as_ref()))
    };
    let ended = Instant::now();
    let cluster = chip.cores[id as usize].cluster;
    let owner = cluster as usize % a.run.active_schedulers;
    chip.schedulers[owner].inbox.lock().push(Completion {
        run_id: a.run.id,
        core: id,
        task: a.task,
        block_idx: a.block_idx,
        kernel: a.kernel,
        panic,
        start_us: a.run.micros(started),
        end_us: a.run.micros(ended),
        dispatch_us: a.dispatch_us,
        sub_block_id: a.sub_block_id,
        block_num: a.payload.block_num,
    });
    let run = Arc::clone(&a.run);
    drop(a);
    run.running.fetch_sub(1, Ordering::AcqRel);
    run.bump_progress();
    chip.schedulers[owner].ec.notify_one();
    if run.is_cancelled() {
        run.done.notify_all();
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}
