//! Scheduler threads (CHIP_RUNTIME.md §6.2).
//!
//! Each iteration drains the completions of the cores this scheduler owns (cluster `k` belongs
//! to scheduler `k mod S`), completes tasks and routes their consumers, then dispatches ready
//! blocks onto idle cores — all in one hold of the graph lock — and finally hands the
//! assignments to the cores. When nothing happened it spins briefly and parks. Scheduler 0 also
//! runs the no-progress watchdog (code 100) while tasks are outstanding.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pto_types::ErrorCode;
use pto_types::wait::Waiter;

use crate::diag::trace::{AicpuSpan, BlockSpan};
use crate::error::{ChipError, Detector};
use crate::kernel::CoreId;

use super::core::panic_message;
use super::graph::Effects;
use super::run::{RunShared, TOTAL_UNKNOWN};
use super::{Assignment, ChipShared, Completion};

/// The body of scheduler thread `index`.
pub(crate) fn scheduler_main(chip: Arc<ChipShared>, index: usize, watchdog: Duration) {
    let cell = &chip.schedulers[index];
    let mut waiter = Waiter::new(&cell.ec, chip.spin);
    let mut completions: Vec<Completion> = Vec::new();
    let mut assigned: Vec<(u32, Assignment)> = Vec::new();
    let mut watch = Watch::default();
    loop {
        if chip.shutdown.load(Ordering::Acquire) {
            return;
        }
        let run = chip.run.lock().clone();
        let Some(run) = run.filter(|r| index < r.active_schedulers) else {
            let _ = waiter.wait(None);
            continue;
        };
        completions.append(&mut cell.inbox.lock());
        // A broken invariant fails this run, not the chip: the panic is caught and latched.
        let stepped = catch_unwind(AssertUnwindSafe(|| {
            step(index, &chip, &run, &mut completions, &mut assigned)
        }));
        let progressed = stepped.unwrap_or_else(|panic| {
            completions.clear();
            assigned.clear();
            run.latch_sched(ChipError::new(
                ErrorCode::InternalError,
                Detector::Immediate,
                format!(
                    "scheduler {index} panicked: {}",
                    panic_message(panic.as_ref())
                ),
            ));
            true
        });
        if progressed {
            waiter.reset();
            continue;
        }
        let deadline = if index == 0 {
            watch.check(&run, watchdog)
        } else {
            None
        };
        let _ = waiter.wait(deadline);
    }
}

/// One scheduling pass. Returns whether anything happened.
fn step(
    index: usize,
    chip: &ChipShared,
    run: &Arc<RunShared>,
    completions: &mut Vec<Completion>,
    assigned: &mut Vec<(u32, Assignment)>,
) -> bool {
    let mut fx = Effects::default();
    // A completion of a newer run can arrive while this pass still holds the previous run
    // (the run pointer was read before the new run was installed): keep it for the next pass.
    // Completions of older runs are stale and dropped.
    let mut later = Vec::new();
    let mut finished_any = false;
    let tracing = run.trace_level > 0;
    let pass_start = tracing.then(Instant::now);
    let mut blocks = Vec::new();
    {
        let mut graph = run.graph.lock();
        for c in completions.drain(..) {
            if c.run_id != run.id {
                if c.run_id > run.id {
                    later.push(c);
                }
                continue;
            }
            finished_any = true;
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
            graph.finish(&c, run, &mut fx);
            if tracing {
                blocks.push(BlockSpan {
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
        graph.dispatch(run, chip, assigned);
    }
    let traced = !blocks.is_empty() || !assigned.is_empty();
    if let (Some(trace), Some(start), true) = (&run.trace, pass_start, traced) {
        let mut buffer = trace.lock();
        let name = match (blocks.is_empty(), assigned.is_empty()) {
            (false, false) => "complete+dispatch",
            (false, true) => "complete",
            _ => "dispatch",
        };
        buffer.span(AicpuSpan {
            scheduler: Some(index),
            name: name.to_string(),
            start_us: run.micros(start),
            end_us: run.micros(Instant::now()),
        });
        for b in blocks {
            buffer.block(b);
        }
    }
    let dispatched = !assigned.is_empty();
    for (core, a) in assigned.drain(..) {
        let cell = &chip.cores[core as usize];
        *cell.mailbox.lock() = Some(a);
        cell.ec.notify_one();
    }
    if fx.watermark_moved || fx.completed_tasks > 0 {
        run.ring_progress.notify_one();
    }
    if finished_any && run.is_finished() {
        run.done.notify_all();
    }
    let retry = !later.is_empty();
    completions.append(&mut later);
    finished_any || dispatched || retry
}

/// The no-progress watchdog of scheduler 0.
#[derive(Default)]
struct Watch {
    last_progress: u64,
    since: Option<Instant>,
}

impl Watch {
    /// Returns the deadline to park with, latching SCHEDULER_TIMEOUT when it has passed.
    fn check(&mut self, run: &RunShared, timeout: Duration) -> Option<Instant> {
        let outstanding = {
            let graph = run.graph.lock();
            graph.published > run.completed.load(Ordering::Acquire)
        };
        if !outstanding || run.is_cancelled() {
            self.since = None;
            return None;
        }
        let now = Instant::now();
        let progress = run.progress.load(Ordering::Acquire);
        let since = match self.since {
            Some(since) if progress == self.last_progress => since,
            _ => {
                self.last_progress = progress;
                self.since = Some(now);
                now
            }
        };
        if now - since >= timeout {
            let census = run.graph.lock().stall_census();
            let orchestration_done = run.total_tasks.load(Ordering::Acquire) != TOTAL_UNKNOWN;
            let class = census.class(orchestration_done);
            let mut e = ChipError::new(
                ErrorCode::SchedulerTimeout,
                Detector::Timeout,
                format!(
                    "no progress for {} ms with work outstanding: {class} ({census})",
                    timeout.as_millis()
                ),
            );
            e.used = Some(census.running);
            run.latch_sched(e);
            self.since = None;
            return None;
        }
        Some(since + timeout)
    }
}
