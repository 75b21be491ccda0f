//! Running one block on a logical core (CHIP_RUNTIME.md §6.4), and the gang threads that run
//! the parts of work that must run at the same time.
//!
//! A block runs under `catch_unwind`: a panicking kernel is reported as KERNEL_PANIC and the
//! thread survives. Whoever ran a block completes it ([`finish_block`]): there is no hop to
//! another thread between a kernel's return and its consumers becoming ready.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pto_types::ErrorCode;
use pto_types::wait::Waiter;

use crate::diag::trace::{AicpuSpan, BlockSpan};
use crate::error::{ChipError, Detector};
use crate::kernel::{CoreId, KernelCtx, KernelRef};

use super::graph::{Effects, LONG_KERNEL_NS, Signal};
use super::run::RunShared;
use super::{Assignment, ChipShared, Completion, GangCell, Shape, Work};

/// Runs the kernel of `a`, a block of `run`, on the calling thread.
pub(crate) fn run_block(run: &RunShared, a: &Assignment) -> Completion {
    run_block_from(run, a, Instant::now()).0
}

/// [`run_block`] timed from `started`; also returns when the kernel ended. A thread running
/// blocks back to back starts each at the end of the last: one clock read per block instead of
/// two (a read costs ~45 ns on the reference VM, a fifth of a no-op task), and what lies
/// between (a few pushes) is counted as kernel time, far below the thresholds the times feed.
pub(crate) fn run_block_from(
    run: &RunShared,
    a: &Assignment,
    started: Instant,
) -> (Completion, Instant) {
    let tracing = run.trace_level > 0;
    let payload = &a.payload;
    let mut ctx = KernelCtx::new(
        &payload.tensors,
        &payload.scalars,
        a.block_idx,
        payload.block_num,
        a.sub_block_id,
        CoreId(a.core),
        a.task,
        &run.cancelled,
    );
    if let Shape::Mix(mask) = payload.shape {
        ctx = ctx.with_mix_lanes(mask.count_ones());
    }
    let mut kernel = a.kernel;
    let panic = match &payload.fused {
        // Each node's kernel records its own time; a panic names the node's kernel.
        Some(fused) => fused
            .run_block(
                CoreId(a.core),
                a.sub_block_id,
                a.task,
                &run.cancelled,
                &run.last_kernel_ns,
            )
            .map(|(k, message)| {
                kernel = k;
                message
            }),
        None => catch_unwind(AssertUnwindSafe(|| kernel.call(&mut ctx)))
            .err()
            .map(|p| panic_message(p.as_ref())),
    };
    let ended = Instant::now();
    let ran = u64::try_from((ended - started).as_nanos()).unwrap_or(u64::MAX);
    if payload.fused.is_none() {
        note_kernel_time(&run.last_kernel_ns, kernel, ran);
    }
    let micros = |t: Instant| if tracing { run.micros(t) } else { 0.0 };
    let completion = Completion {
        core: a.core,
        task: a.task,
        block_idx: a.block_idx,
        kernel,
        panic,
        ran_ns: ran,
        start_us: micros(started),
        end_us: micros(ended),
        dispatch_us: a.dispatch_us,
        sub_block_id: a.sub_block_id,
        block_num: payload.block_num,
    };
    (completion, ended)
}

/// Records that `kernel` just ran for `ns`: the run's last kernel time (what `Graph::signal` and
/// the orchestrator's helping read) and the kernel's quick-or-long mark.
pub(crate) fn note_kernel_time(last_kernel_ns: &AtomicU64, kernel: KernelRef, ns: u64) {
    // Never 0: 0 means "no kernel of the run has finished" (`Graph::signal`).
    last_kernel_ns.store(ns.max(1), Ordering::Relaxed);
    kernel.record_run(ns, LONG_KERNEL_NS);
}

/// Records a finished block in the graph (under the lock the caller holds): latches a kernel
/// panic, releases the core, completes the task when it was its last part.
pub(crate) fn finish_block(
    graph: &mut super::graph::Graph,
    chip: &ChipShared,
    run: &RunShared,
    c: &Completion,
    fx: &mut Effects,
) {
    if let Some(message) = &c.panic {
        let mut e = ChipError::new(
            ErrorCode::KernelPanic,
            Detector::Immediate,
            format!(
                "kernel {} of task {} (block {}) panicked on core {}: {message}",
                c.kernel.name(),
                c.task,
                c.block_idx,
                CoreId(c.core).label(chip.clusters)
            ),
        );
        e.task = Some(c.task);
        run.latch_sched(e);
    }
    graph.finish(c, run, fx);
    // Under the lock, so that a `Graph::signal` of this same hold does not count this block as
    // one that will come back for more work.
    fx.quiescent = run.running.fetch_sub(1, Ordering::AcqRel) == 1;
}

/// Finishes a block without taking more work (gang threads, the stand-in): one lock hold,
/// then the wakes. For the stand-in's block (`stood_in`), the block stops counting as the
/// stand-in's in the same hold, so that hold's signal sees the stand-in gone; then the
/// stand-in is free for the next hand-off.
fn finish_alone(chip: &ChipShared, run: &RunShared, c: &Completion, stood_in: bool) {
    let mut fx = Effects::default();
    {
        let mut graph = run.lock_graph();
        finish_block(&mut graph, chip, run, c, &mut fx);
        if stood_in {
            run.stand_in_running.store(0, Ordering::Release);
        }
        fx.wake = graph.signal(run);
    }
    if stood_in {
        chip.stand_in.busy.store(false, Ordering::Release);
    }
    after_finish(chip, run, std::slice::from_ref(c), &fx);
}

/// What the caller of [`finish_block`] does once the lock is released: records progress and
/// the blocks' trace spans, and wakes whoever the graph changes concern.
pub(crate) fn after_finish(chip: &ChipShared, run: &RunShared, done: &[Completion], fx: &Effects) {
    for c in done {
        run.bump_progress();
        if let Some(trace) = &run.trace {
            trace.lock().block(BlockSpan {
                core: c.core,
                task: c.task,
                kernel: c.kernel.name(),
                block_idx: c.block_idx,
                block_num: c.block_num,
                sub_block: c.sub_block_id,
                dispatch_us: c.dispatch_us,
                start_us: c.start_us,
                end_us: c.end_us,
                finish_us: run.micros(Instant::now()),
            });
        }
    }
    after_effects(chip, run, fx);
}

/// Wakes the orchestrator (ring space, run end) and executors (new ready work) as `fx` says.
pub(crate) fn after_effects(chip: &ChipShared, run: &RunShared, fx: &Effects) {
    if fx.wake != Signal::Nothing {
        chip.signal_work(fx.wake == Signal::Wake);
        if fx.wake == Signal::Wake && calls_back_the_last_worker(chip, run) {
            // It parks on the run's events, not on the work signal (H6).
            run.ring_progress.notify_one();
            run.done.notify_all();
        }
    }
    if (fx.watermark_moved || fx.completed_tasks > 0) && run.wants_ring_wake(fx.quiescent) {
        run.ring_progress.notify_one();
    }
    if run.is_finished() {
        run.done.notify_all();
    }
}

/// `orchestrator/help.rs` H6: work worth waking a CPU for calls back an orchestrator that is
/// the chip's last worker and parked (its flag clear), unless its stand-in has its CPU.
fn calls_back_the_last_worker(chip: &ChipShared, run: &RunShared) -> bool {
    chip.orchestrator_is_worker
        && !run.orchestrator_helps()
        && !chip.stand_in.busy.load(Ordering::Acquire)
}

/// Hands the parts of a gang but the first to the gang threads of their cores (starting them
/// the first time) and returns the first, for the caller to run. A gang thread that cannot be
/// started fails the run (INTERNAL_ERROR) and its part is finished unrun.
pub(crate) fn scatter_gang(chip: &Arc<ChipShared>, run: &Arc<RunShared>, work: Work) -> Assignment {
    let parts = match work {
        Work::Single(a) => return a,
        Work::Gang(parts) => parts,
    };
    let mut parts = parts.into_iter();
    let first = parts.next().expect("a gang has parts");
    for a in parts {
        let core = a.core;
        if let Err(e) = Mailbox::Gang(core).ensure_thread(chip) {
            run.latch_sched(ChipError::new(
                ErrorCode::InternalError,
                Detector::Immediate,
                format!("cannot start the thread of core {core} for a co-scheduled part: {e}"),
            ));
            finish_alone(chip, run, &Completion::unrun(&a), false);
            continue;
        }
        Mailbox::Gang(core).hand(chip, run, a);
    }
    first
}

/// A thread that runs only what is handed to it: the gang thread of a logical core, or the
/// orchestrator's stand-in. Its cell ([`GangCell`]) holds the mailbox, the event count it
/// parks on and the thread once started.
#[derive(Clone, Copy)]
enum Mailbox {
    Gang(u32),
    StandIn,
}

impl Mailbox {
    fn cell(self, chip: &ChipShared) -> &GangCell {
        match self {
            Mailbox::Gang(core) => &chip.gangs[core as usize],
            Mailbox::StandIn => &chip.stand_in.cell,
        }
    }

    /// Starts the thread the first time it is needed.
    fn ensure_thread(self, chip: &Arc<ChipShared>) -> std::io::Result<()> {
        let mut slot = self.cell(chip).thread.lock();
        if slot.is_none() {
            let name = match self {
                Mailbox::Gang(core) => format!("pto-gang{core}"),
                Mailbox::StandIn => "pto-standin".to_string(),
            };
            let shared = Arc::clone(chip);
            *slot = Some(
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || self.serve(shared))?,
            );
        }
        Ok(())
    }

    /// Hands block `a` of `run` to the thread (started by [`Mailbox::ensure_thread`]).
    fn hand(self, chip: &ChipShared, run: &Arc<RunShared>, a: Assignment) {
        let cell = self.cell(chip);
        *cell.mailbox.lock() = Some((Arc::clone(run), a));
        cell.ec.notify_one();
    }

    /// The thread's body: run what arrives in the mailbox and finish it; never take other
    /// work. A gang thread spins the chip's window for its cohort's next part; the stand-in
    /// parks at once, since work reaches it only by a hand-off and a spin would take a CPU
    /// from the threads running kernels.
    fn serve(self, chip: Arc<ChipShared>) {
        let cell = self.cell(&chip);
        let spin = match self {
            Mailbox::Gang(_) => chip.spin,
            Mailbox::StandIn => pto_types::wait::SpinPolicy::PARK_IMMEDIATELY,
        };
        let mut waiter = Waiter::new(&cell.ec, spin);
        loop {
            let handed = cell.mailbox.lock().take();
            if let Some((run, a)) = handed {
                let c = run_block(&run, &a);
                drop(a);
                let stood_in = matches!(self, Mailbox::StandIn);
                let pass_start = run.trace.as_ref().map(|_| Instant::now());
                finish_alone(&chip, &run, &c, stood_in);
                if stood_in {
                    let lane = chip.scheduler_lanes().stand_in();
                    trace_pass(&run, lane, pass_start, "complete");
                }
                waiter.reset();
                continue;
            }
            if chip.shutdown.load(Ordering::Acquire) {
                return;
            }
            let _ = waiter.wait(None);
        }
    }
}

/// Hands block `a` to the orchestrator's stand-in (`orchestrator/help.rs`, H5), starting its
/// thread the first time; the caller set [`StandIn::busy`](super::StandIn) and, under the
/// graph lock that took `a`, `stand_in_running`. A thread that cannot be started fails the
/// run (INTERNAL_ERROR) and the block is finished unrun.
pub(crate) fn hand_to_stand_in(chip: &Arc<ChipShared>, run: &Arc<RunShared>, a: Assignment) {
    if let Err(e) = Mailbox::StandIn.ensure_thread(chip) {
        run.latch_sched(ChipError::new(
            ErrorCode::InternalError,
            Detector::Immediate,
            format!("cannot start the orchestrator's stand-in thread: {e}"),
        ));
        finish_alone(chip, run, &Completion::unrun(&a), true);
        return;
    }
    Mailbox::StandIn.hand(chip, run, a);
}

/// Records a scheduling pass under the graph lock by scheduler `index` (trace level 3;
/// [`SchedulerLanes`](crate::diag::trace::SchedulerLanes)).
pub(crate) fn trace_pass(run: &RunShared, index: usize, start: Option<Instant>, name: &str) {
    if let (Some(trace), Some(start)) = (&run.trace, start) {
        trace.lock().span(AicpuSpan {
            scheduler: Some(index),
            name: name.to_string(),
            start_us: run.micros(start),
            end_us: run.micros(Instant::now()),
        });
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
