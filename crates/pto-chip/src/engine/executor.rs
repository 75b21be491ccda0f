//! Executor threads (CHIP_RUNTIME.md §6.2–§6.4, with logical cores).
//!
//! An executor takes a unit of work from the ready lanes (claiming its logical core), runs it,
//! and then — in one hold of the graph lock — finishes it (releasing its consumers into the
//! lanes) and takes the next unit. Only when nothing is dispatchable does it search: it spins on
//! the run's `work_epoch` for the chip's executor spin window, then parks on the chip's `work`
//! event count (the wake-up rule is in the module doc of `engine/mod.rs`).

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pto_types::ErrorCode;
use pto_types::wait::{Search, SpinWindow};

use crate::error::{ChipError, Detector};

use super::core::{
    after_finish, finish_block, panic_message, run_block_from, scatter_gang, trace_pass,
};
use super::graph::{Effects, Signal};
use super::graph::{LONG_KERNEL_NS, SHORT_KERNEL_NS};
use super::run::{RunShared, Watch};
use super::{Assignment, ChipShared, Completion, Work};

/// The body of executor thread `index`. A broken invariant fails the run it happened in
/// (INTERNAL_ERROR), not the chip: the panic is caught and the thread goes on serving.
pub(crate) fn executor_main(chip: Arc<ChipShared>, index: usize) {
    let mut search = SearchState::default();
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
                search = SearchState::default();
            }
        }
    }
}

/// Takes, runs and finishes work until the chip shuts down.
///
/// While kernels are short (under [`SHORT_KERNEL_NS`]) an executor takes up to [`BATCH`]
/// one-block tasks per lock hold and finishes them together in the next, and all but one
/// executor step back: at kernels that short the lock hand-offs between the orchestrator and the
/// executors are the cost, not the kernels. All but one step back too while the orchestrator
/// helps (it is the other one). One that steps back rests (parks for at most
/// [`REST`]) and then searches again, so work queued behind a long kernel waits at most that.
/// A kernel that turns out long ends the batch: its unstarted blocks are given back.
fn serve(chip: &Arc<ChipShared>, index: usize, search: &mut SearchState) {
    let mut batch = Batch::default();
    while let Some((run, work)) = search.find(chip, index) {
        let mut active = Active::enter(&chip.active);
        batch.first = Some(work);
        loop {
            let (short, helpable) = batch.run(chip, &run);
            // The orchestrator counts as an active executor for helpable work
            // (`orchestrator/help.rs`, H2).
            if (short || (helpable && run.orchestrator_helps())) && chip.try_leave() {
                active.left();
                batch.finish(chip, &run, index, 0);
                search.resting = true;
                break;
            }
            if !batch.finish(chip, &run, index, if short { BATCH } else { 1 }) {
                break;
            }
        }
    }
}

/// This executor's count in [`ChipShared::active`] while it works: given back when it runs
/// out of work, and also when a broken invariant unwinds out of [`serve`] (which
/// `executor_main` catches and restarts), so the count never keeps a thread that left.
struct Active<'a> {
    count: &'a std::sync::atomic::AtomicU32,
    counted: bool,
}

impl<'a> Active<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicU32) -> Active<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Active {
            count,
            counted: true,
        }
    }

    /// [`ChipShared::try_leave`] took this executor out of the count already.
    fn left(&mut self) {
        self.counted = false;
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Most blocks an executor takes per lock hold while kernels are short.
const BATCH: usize = 8;

/// How long an executor that stepped back rests before it searches again.
const REST: Duration = Duration::from_millis(1);

/// A searching executor reads the clock on every 64th step: a step (a few atomic loads and a
/// `spin_loop()`) costs about as much as a clock read (~45 ns on the reference VM), so this
/// keeps the clock at ~2 % of the search, and the window overruns by at most ~3 µs.
const SEARCH_CLOCK_EVERY: u32 = 64;

/// The work an executor holds between two lock holds.
#[derive(Default)]
struct Batch {
    /// What a take returned: one block or a gang.
    first: Option<Work>,
    /// More one-block tasks, taken with `first` while kernels are short.
    singles: VecDeque<Assignment>,
    done: Vec<Completion>,
}

impl Batch {
    /// Runs the batch; stops early after a kernel that was not short (the rest stays in
    /// `singles`, unstarted). Returns whether every kernel it ran was short, and whether the
    /// first unit was work the orchestrator could have run (`Graph::helpable`).
    fn run(&mut self, chip: &Arc<ChipShared>, run: &Arc<RunShared>) -> (bool, bool) {
        let mut short = true;
        let mut helpable = false;
        let mut first_end = None;
        if let Some(work) = self.first.take() {
            let one_block = matches!(&work, Work::Single(a) if a.payload.is_one_block());
            let a = scatter_gang(chip, run, work);
            let (c, ended) = run_block_from(run, &a, Instant::now());
            first_end = Some(ended);
            short = c.ran_ns < SHORT_KERNEL_NS;
            helpable = one_block && c.ran_ns < LONG_KERNEL_NS;
            self.done.push(c);
        }
        // Traces show each block's own start; otherwise a block starts where the last ended.
        let chain = run.trace_level == 0;
        let mut last_end = first_end.filter(|_| chain);
        while short {
            let Some(a) = self.singles.pop_front() else {
                break;
            };
            let (c, ended) = run_block_from(run, &a, last_end.unwrap_or_else(Instant::now));
            last_end = chain.then_some(ended);
            short = c.ran_ns < SHORT_KERNEL_NS;
            self.done.push(c);
        }
        (short, helpable)
    }

    /// One lock hold: finishes what ran, gives back what did not start, and takes up to
    /// `want` blocks. Returns whether it took any.
    fn finish(
        &mut self,
        chip: &ChipShared,
        run: &Arc<RunShared>,
        index: usize,
        want: usize,
    ) -> bool {
        let mut fx = Effects::default();
        let pass_start = run.trace.as_ref().map(|_| Instant::now());
        {
            // Without `want` this executor rests after the hold, but only because another is
            // active (`ChipShared::try_leave`), which comes back for work: a wake for what this
            // hold publishes from the inbox would only bring a third thread onto two CPUs.
            let mut graph = run.lock_graph_then_search();
            for c in &self.done {
                finish_block(&mut graph, chip, run, c, &mut fx);
            }
            for a in self.singles.drain(..) {
                graph.give_back(a, run);
            }
            // Tasks the orchestrator handed off while this thread waited for the lock: publish
            // them now, so this hold can take them.
            graph.take_handed(&mut fx, false);
            if want > 0 {
                self.first = graph.take(run, chip);
                // Out of other work: the tasks the orchestrator left (HO4) are this thread's to
                // publish now, not after it stopped counting as active.
                if self.first.is_none() && run.inbox.has_left() {
                    graph.take_handed(&mut fx, true);
                    self.first = graph.take(run, chip);
                }
            }
            let single = matches!(self.first, Some(Work::Single(_)));
            while single && self.singles.len() + 1 < want {
                match graph.take_one_block(run, chip) {
                    Some(a) => self.singles.push_back(a),
                    None => break,
                }
            }
            fx.quiescent = run.running.load(Ordering::SeqCst) == 0;
            fx.wake = graph.signal(run);
        }
        let took = self.first.is_some();
        let name = if took { "complete+take" } else { "complete" };
        trace_pass(run, index, pass_start, name);
        after_finish(chip, run, &self.done, &fx);
        self.done.clear();
        took
    }
}

/// What a searching executor remembers between checks.
#[derive(Default)]
struct SearchState {
    /// The chip's `run_seq` when `run` was read.
    seen_seq: Option<u64>,
    run: Option<Arc<RunShared>>,
    /// The chip's work epoch at the last failed take (`pto_types::wait::Search::seen`).
    seen_epoch: Option<u64>,
    /// This executor stepped back ([`serve`]): rest before searching.
    resting: bool,
    /// The no-progress watchdog this executor keeps while it parks during a live run.
    watch: Watch,
}

impl SearchState {
    /// Spins, then parks, until a unit of work can be taken; `None` once the chip shuts down.
    fn find(&mut self, chip: &ChipShared, index: usize) -> Option<(Arc<RunShared>, Work)> {
        // HO4: this executor stopped counting as active (`Active`'s drop, a read-modify-write)
        // before this read, so it sees every task the orchestrator left before it could see
        // the executor gone (`OrchCore::may_leave`); the first try below takes them. Later
        // tasks are not left while this one does not count.
        let mut left = self.run.as_ref().is_some_and(|run| run.inbox.has_left());
        if std::mem::take(&mut self.resting) && !left {
            // Not searching, so signals wake the active executor's peers only when needed;
            // the timeout bounds how long queued work can wait behind a long kernel.
            let parked = chip.work.parked();
            let key = parked.prepare();
            if !chip.shutdown.load(Ordering::SeqCst) {
                let _ = parked.wait(key, Some(Instant::now() + REST));
            }
        }
        // One searcher spins; the others park at once, so that idle executors do not take
        // CPU time from the orchestrator on a small host.
        let mut search = chip.work.search_from(self.seen_epoch);
        // The one searcher spins without yielding for its whole window: a yield (~0.8 µs) would
        // delay noticing work that is usually microseconds away.
        let pure = chip.spin.with_pure_spin(chip.spin.spin());
        let mut window = SpinWindow::new(pure).reading_clock_every(SEARCH_CLOCK_EVERY);
        let found = loop {
            if chip.shutdown.load(Ordering::SeqCst) {
                break None;
            }
            if let Some((work, more)) =
                self.try_take(chip, index, &mut search, std::mem::take(&mut left))
            {
                let run = Arc::clone(self.run.as_ref().expect("work comes from a run"));
                break Some((run, work, more));
            }
            if search.spins() && window.step().is_spinning() {
                continue;
            }
            if !search.news() && self.run_finished() {
                // Let a finished run's memory go while parked.
                self.run = None;
            }
            // Stop searching, re-check, park (`pto_types::wait::WorkSignal`); a new run or a
            // shutdown is news too.
            let seen_seq = self.seen_seq;
            let deadline = self.watch_deadline(chip);
            search.park(
                || {
                    chip.shutdown.load(Ordering::SeqCst)
                        || Some(chip.run_seq.load(Ordering::SeqCst)) != seen_seq
                },
                deadline,
            );
            window.reset();
        };
        self.seen_epoch = search.seen();
        // Stop counting as searching, then say there is more (`Search::found`): this executor
        // goes to run what it took, and a signal that still counted it would wake nobody.
        let Some((run, work, more)) = found else {
            drop(search);
            return None;
        };
        search.found((more != Signal::Nothing).then_some(more == Signal::Wake));
        Some((run, work))
    }

    /// While its run is live, a parked executor keeps the no-progress watchdog (code 100) and
    /// wakes by its deadline: the orchestrator keeps it whenever it waits, but not while it
    /// runs a block itself (`orchestrator/help.rs`), and that block may be the one that hangs.
    fn watch_deadline(&mut self, chip: &ChipShared) -> Option<Instant> {
        match &self.run {
            Some(run) if !run.is_finished() => self.watch.check(run, chip.watchdog),
            _ => {
                self.watch = Watch::default();
                None
            }
        }
    }

    fn run_finished(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.is_finished())
    }

    /// Takes a unit from the current run when something changed since the last try: a new run,
    /// a work signal, or tasks the orchestrator `left` (HO4). Returns it with whom the work
    /// left behind concerns, for the caller to signal once it stopped searching.
    fn try_take(
        &mut self,
        chip: &ChipShared,
        index: usize,
        search: &mut Search<'_>,
        left: bool,
    ) -> Option<(Work, Signal)> {
        let seq = chip.run_seq.load(Ordering::SeqCst);
        let new_run = self.seen_seq != Some(seq);
        if !new_run && !search.news() && !left {
            return None;
        }
        if new_run {
            self.seen_seq = Some(seq);
            self.run = chip.run.lock().clone();
        }
        // Note the epoch before looking: a signal after this is news for the next check.
        search.look();
        let run = self.run.as_ref()?;
        let pass_start = run.trace.as_ref().map(|_| Instant::now());
        let (work, more) = {
            let mut graph = run.lock_graph_then_search();
            // As in `Batch::finish`: what was handed off can be taken in this hold. The effects
            // beyond the wake concern only a waiting orchestrator, which hands nothing off.
            graph.take_handed(&mut Effects::default(), true);
            let work = graph.take(run, chip);
            (work, graph.signal(run))
        };
        let work = work?;
        trace_pass(run, index, pass_start, "take");
        Some((work, more))
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::Active;

    #[test]
    fn the_active_count_gives_back_an_executor_that_unwinds_or_left() {
        let count = AtomicU32::new(0);
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            let _active = Active::enter(&count);
            assert_eq!(count.load(Ordering::SeqCst), 1);
            panic!("a broken invariant in serve");
        }));
        assert!(unwound.is_err());
        assert_eq!(
            count.load(Ordering::SeqCst),
            0,
            "the unwinding gave it back"
        );
        // One that left through `try_leave` was taken out already: not twice.
        let mut active = Active::enter(&count);
        count.fetch_sub(1, Ordering::SeqCst);
        active.left();
        drop(active);
        assert_eq!(count.load(Ordering::SeqCst), 0);
    }
}
