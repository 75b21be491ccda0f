//! Executor threads (CHIP_RUNTIME.md §6.2–§6.4, with logical cores).
//!
//! An executor takes a unit of work from the ready lanes (claiming its logical core), runs it,
//! and then — in one hold of the graph lock — finishes it (releasing its consumers into the
//! lanes) and takes the next unit. Only when nothing is dispatchable does it search: it spins on
//! the run's `work_epoch` for the chip's executor spin window, then parks on the chip's `work`
//! event count (the wake-up rule is in the module doc of `engine/mod.rs`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use pto_types::ErrorCode;

use crate::diag::trace::AicpuSpan;
use crate::error::{ChipError, Detector};

use super::core::{after_finish, finish_block, panic_message, run_block, scatter_gang};
use super::graph::{Effects, Signal};
use super::run::RunShared;
use super::{ChipShared, Completion, Work};

/// The body of executor thread `index`. A broken invariant fails the run it happened in
/// (INTERNAL_ERROR), not the chip: the panic is caught and the thread goes on serving.
pub(crate) fn executor_main(chip: Arc<ChipShared>, index: usize) {
    let mut search = Search::default();
    loop {
        match catch_unwind(AssertUnwindSafe(|| serve(&chip, index, &mut search))) {
            Ok(()) => return,
            Err(panic) => {
                let run = chip.run.lock().clone();
                if let Some(run) = run {
                    run.latch_sched(ChipError::new(
                        ErrorCode::InternalError,
                        Detector::Immediate,
                        format!(
                            "executor {index} panicked: {}",
                            panic_message(panic.as_ref())
                        ),
                    ));
                }
                search = Search::default();
            }
        }
    }
}

/// Takes, runs and finishes work until the chip shuts down.
fn serve(chip: &Arc<ChipShared>, index: usize, search: &mut Search) {
    while let Some((run, work)) = search.find(chip, index) {
        let mut next = Some(work);
        while let Some(work) = next.take() {
            let a = scatter_gang(chip, &run, work);
            let c = run_block(&run, &a);
            drop(a);
            next = finish_and_take(chip, &run, &c, index);
        }
    }
}

/// Finishes `c` and takes the next unit of the same run, in one lock hold.
fn finish_and_take(
    chip: &ChipShared,
    run: &Arc<RunShared>,
    c: &Completion,
    index: usize,
) -> Option<Work> {
    let mut fx = Effects::default();
    let pass_start = run.trace.as_ref().map(|_| Instant::now());
    let work = {
        let mut graph = run.lock_graph();
        finish_block(&mut graph, chip, run, c, &mut fx);
        let work = graph.take(run, chip);
        fx.wake = graph.signal(run);
        work
    };
    trace_pass(run, index, pass_start, work.is_some());
    after_finish(chip, run, c, &fx);
    work
}

/// Records an executor pass (trace level 3).
fn trace_pass(run: &RunShared, index: usize, start: Option<Instant>, took: bool) {
    if let (Some(trace), Some(start)) = (&run.trace, start) {
        trace.lock().span(AicpuSpan {
            scheduler: Some(index),
            name: if took { "complete+take" } else { "complete" }.to_string(),
            start_us: run.micros(start),
            end_us: run.micros(Instant::now()),
        });
    }
}

/// What a searching executor remembers between checks.
#[derive(Default)]
struct Search {
    /// The chip's `run_seq` when `run` was read.
    seen_seq: Option<u64>,
    run: Option<Arc<RunShared>>,
    /// The run's `work_epoch` at the last failed take.
    seen_epoch: Option<u64>,
}

impl Search {
    /// Spins, then parks, until a unit of work can be taken; `None` once the chip shuts down.
    fn find(&mut self, chip: &ChipShared, index: usize) -> Option<(Arc<RunShared>, Work)> {
        // One searcher spins; the others park at once, so that idle executors do not take
        // CPU time from the orchestrator on a small host.
        let mut spins = chip.searching.fetch_add(1, Ordering::SeqCst) == 0;
        let mut spin_start = Instant::now();
        let mut steps = 0u32;
        loop {
            if chip.shutdown.load(Ordering::SeqCst) {
                chip.searching.fetch_sub(1, Ordering::SeqCst);
                return None;
            }
            if let Some(work) = self.try_take(chip, index) {
                chip.searching.fetch_sub(1, Ordering::SeqCst);
                let run = Arc::clone(self.run.as_ref().expect("work comes from a run"));
                return Some((run, work));
            }
            // Reading the clock costs more than a check: look at it every 64th step.
            steps = steps.wrapping_add(1);
            if spins
                && (!steps.is_multiple_of(64) || spin_start.elapsed() < chip.executor_spin.spin())
            {
                std::hint::spin_loop();
                continue;
            }
            // Park: stop searching first, then re-check (module doc of `engine/mod.rs`).
            chip.searching.fetch_sub(1, Ordering::SeqCst);
            let key = chip.work.prepare();
            if !self.news(chip) {
                if self.seen_epoch.is_some() && self.run_finished() {
                    // Let a finished run's memory go while parked.
                    self.run = None;
                    self.seen_seq = None;
                    self.seen_epoch = None;
                }
                let _ = chip.work.wait(key, None);
            }
            spins = chip.searching.fetch_add(1, Ordering::SeqCst) == 0;
            spin_start = Instant::now();
        }
    }

    fn run_finished(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.is_finished())
    }

    /// Whether anything changed since the last failed take: a new run or a work signal.
    fn news(&self, chip: &ChipShared) -> bool {
        let seq = chip.run_seq.load(Ordering::SeqCst);
        if self.seen_seq != Some(seq) {
            return true;
        }
        match &self.run {
            Some(run) => Some(run.work_epoch.load(Ordering::SeqCst)) != self.seen_epoch,
            None => false,
        }
    }

    /// Takes a unit from the current run when something changed since the last try.
    fn try_take(&mut self, chip: &ChipShared, index: usize) -> Option<Work> {
        if !self.news(chip) {
            return None;
        }
        let seq = chip.run_seq.load(Ordering::SeqCst);
        if self.seen_seq != Some(seq) {
            self.seen_seq = Some(seq);
            self.run = chip.run.lock().clone();
            self.seen_epoch = None;
        }
        let run = self.run.as_ref()?;
        // Read the epoch before looking: a signal after this load is seen by the next check.
        self.seen_epoch = Some(run.work_epoch.load(Ordering::SeqCst));
        let pass_start = run.trace.as_ref().map(|_| Instant::now());
        let (work, more) = {
            let mut graph = run.lock_graph();
            let work = graph.take(run, chip);
            (work, graph.signal(run))
        };
        if work.is_some() {
            trace_pass_take(run, index, pass_start);
            if more != Signal::Nothing {
                chip.signal_work(run, more == Signal::Wake);
            }
        }
        work
    }
}

/// Records a take by a searching executor (trace level 3).
fn trace_pass_take(run: &RunShared, index: usize, start: Option<Instant>) {
    if let (Some(trace), Some(start)) = (&run.trace, start) {
        trace.lock().span(AicpuSpan {
            scheduler: Some(index),
            name: "take".to_string(),
            start_us: run.micros(start),
            end_us: run.micros(Instant::now()),
        });
    }
}
