//! The orchestrator as a part-time executor: while it waits (for ring space, for a tensor's
//! producer, for the end of the run), and when it is the chip's last worker also while it runs
//! ahead (H7), it takes ready work, runs it and finishes it, instead of parking while a third
//! thread runs it (`docs/decisions/chip-engine.md`, "The orchestrator helps"). On a two-CPU
//! host the orchestrator and two executors were three runnable threads at few-µs kernels,
//! and every wake of one preempted another. Now a chip whose cores
//! outnumber the host's CPUs starts one executor fewer and counts the orchestrator as its
//! last worker ([`ChipShared::orchestrator_is_worker`]); on other hosts the orchestrator helps
//! with quick work only and one executor steps back while it does.
//!
//! Rules:
//! - H1. Only *helpable* work: a one-block AIC or AIV task (no gang, no MIX, no sync-start
//!   cohort) whose kernels have returned before in this process. In a wait that only the
//!   chip's progress ends (ring space, dep-pool and TensorMap entries, the end of the run) and
//!   when the orchestrator is a worker, any such task ([`Helper::new`]); otherwise only one
//!   whose kernel's last run returned within `LONG_KERNEL_NS` ([`Graph::helpable`],
//!   [`Helper::quick_only`]: a tensor wait, which the orchestration is waiting on, and every
//!   wait on a host with a CPU per executor). A kernel never seen to return never runs on
//!   this thread, so the waits around it keep their watchdog and a hung first run fails the
//!   run as before.
//! - H2. While the orchestrator is not parked, the run says so
//!   ([`RunShared::orchestrator_helps`], set when the run starts): a signal for quick helpable
//!   work then wakes no parked executor when a block is running (its thread comes back for
//!   more, and so does this one when it next waits or runs ahead, H7), and an executor that
//!   ran helpable work steps back when another executor is active (`executor::serve`). One
//!   executor and the orchestrator then share such work.
//! - H3. Before it parks, the orchestrator clears the flag, then, under the graph lock, gives
//!   back the block it took but did not start and signals whatever is dispatchable by the rule
//!   that holds without the flag. A finisher that saw the flag set read it under the lock
//!   before that look, so the look sees its work; one that comes after sees the flag clear.
//!   No work is left with nobody coming back for it. After the park the flag is set again.
//! - H4. Helping counts as progress: a wait that ran a block, or handed one to the stand-in,
//!   goes round again without parking and without its watchdog check. A wait that can prove
//!   the ring can never hold its request (Impossible, Structural) fails before it helps, so
//!   the verdict does not depend on what the help happens to finish first.
//! - H5. The stand-in. When the orchestrator is a worker and finds nothing helpable, it takes
//!   one block of the next AIC or AIV task whatever its kernel ([`Graph::take_block`]: a
//!   first run, a block of a multi-block task; never a gang) and hands it to the chip's
//!   stand-in thread ([`StandIn`]), which runs it and finishes it as an executor would. One
//!   block at a time, and the orchestrator helps with nothing while one runs: the stand-in
//!   uses the CPU the waiting orchestrator leaves, so the threads running kernels stay as
//!   many as the host's CPUs. The stand-in never comes back for more work, so its block is
//!   counted apart (`RunShared::stand_in_running`, set and cleared under the graph lock in
//!   the holds that take and finish it) and the wake rule does not leave work to it: with
//!   the orchestrator not helping, work it could have helped with is left only to a running
//!   executor, which comes back, or wakes one. A block handed over is taken under the graph
//!   lock like any other, so H3 is untouched; a stand-in whose kernel hangs is caught like an
//!   executor (the waits' and the parked executors' watchdogs, then the chip's poisoning).
//!   Two first runs thus still run at once on a two-CPU host. Every wait hands over, the
//!   quick-only tensor wait too: what it hands is what it may not run.
//! - H6. The last worker is called back. A parked orchestrator waits on the run's events
//!   (ring progress, the run's end), not on the work signal, so when it is the chip's last
//!   worker, a hold whose signal is a wake (work worth a CPU: `Graph::signal`) also notifies
//!   those events while its flag is clear and the stand-in idle (`core::after_effects`).
//!   Without it, a fan-out that became ready after the orchestrator parked at the end of the
//!   run ran on the one executor alone (a test shows it). A finisher that read the flag still
//!   set before the orchestrator cleared it does not call back; the look under the lock
//!   before the park (H3) then wakes an executor for that work, and the next wake calls the
//!   orchestrator back: a missed call back costs parallelism for a while, never progress.
//! - H7. The last worker keeps close. When the orchestrator is one of the chip's workers and
//!   a ring holds at least 8 live tasks per worker thread, it runs ready work before its next
//!   submit (`OrchCore::keep_close`), until half as many are live, at most 4 blocks per worker
//!   per submit (a scope whose tasks cannot retire would otherwise keep it running all the
//!   surplus at once). Not a wait: with nothing to take it submits on, parks never, hands
//!   nothing to the stand-in. It takes quick work only (each helped kernel delays the next
//!   submit by less than `LONG_KERNEL_NS`), only while more AIC and AIV tasks are ready than
//!   the executors could take (a chain's one ready task stays with them:
//!   [`Graph::take_surplus`]), and not while the run's last kernel took under
//!   `SHORT_KERNEL_NS` (then one executor keeps up better alone). Why: a submit costs more
//!   the further the orchestration runs ahead. Every overlapping writer still live is a
//!   TensorMap hit, a producer edge and a fan-out entry; stencil_1d's reads found about 8 per
//!   cell with a 256-slot window, and staying two steps ahead made a task's engine work about
//!   0.4 µs cheaper (`pto bench metg`, BENCHMARKS.md "Issue 25, stop 44"). Handed-off tasks
//!   are published first (the helper locks as the inbox's offerer, which does not serve the
//!   inbox). After a look that found nothing it looks again only when another thread moved
//!   the work epoch or one of its own publications made a task ready, so such submits cost
//!   no lock. At trace level 4 a submit's span includes the kernels it helped with.
//! - H8. Fused replays (`engine/fused.rs`). In a wait where it takes any returned work (H1),
//!   a worker orchestrator with nothing helpable takes a block of a fused replay whose
//!   kernels have all returned before ([`Graph::take_fused_block`]) and runs it at once,
//!   instead of handing it to the stand-in: one wake less before the block's CPU runs the
//!   graph (stencil_1d replayed at 0.3 µs grains: efficiency 0.57-0.62 against 0.33-0.45
//!   through the stand-in). It never holds such a block unstarted, so H3's give-back never
//!   meets one; the block returns once the graph has nothing ready for it (F4), or runs
//!   its kernels as an executor would. A fused block is a whole graph, so a fused task
//!   made ready is always work worth a CPU (`Graph::signal`) and calls a parked
//!   orchestrator back (H6), however quick the graph's kernels. Before, the executor that
//!   finished a replay took the next one's first block and left the second to its own
//!   return: once the orchestrator parked at a graph's tail it slept through the rest of
//!   the run, and the executor ran every graph alone (`pto bench metg` replayed runs at
//!   efficiency 0.49 at 1.7-3.9 µs grains; `replay_fused.rs` shows it).
//!
//! [`Graph::take_fused_block`]: super::super::graph::Graph::take_fused_block
//! [`Graph::take_surplus`]: super::super::graph::Graph::take_surplus
//! [`ChipShared::orchestrator_is_worker`]: super::super::ChipShared::orchestrator_is_worker
//! [`StandIn`]: super::super::StandIn
//! [`Graph::take_block`]: super::super::graph::Graph::take_block
//! [`Graph::helpable`]: super::super::graph::Graph::helpable

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use pto_types::wait::Waiter;

use super::super::core::{after_finish, finish_block, hand_to_stand_in, run_block, trace_pass};
use super::super::graph::{Effects, Signal};
use super::super::run::{GraphGuard, RunShared};
use super::super::{Assignment, ChipShared};

/// One wait's (or one H7 look's) helping state. Dropping it gives back the block taken but not
/// started.
pub(crate) struct Helper<'a> {
    run: &'a Arc<RunShared>,
    chip: &'a Arc<ChipShared>,
    /// Taken in the hold that finished the last block, not started yet.
    next: Option<Assignment>,
    /// The chip's work epoch before the last look that found nothing: until it moves there is
    /// nothing new to look for, so a wait's spin steps cost no lock.
    seen: Option<u64>,
    /// [`Helper::before_park`] cleared the run's flag.
    off: bool,
    takes: Takes,
}

/// What a helper may take.
#[derive(Clone, Copy)]
enum Takes {
    /// Any work whose kernels have returned before, long ones too (H1); hands the rest to
    /// the stand-in (H5).
    AnyReturned,
    /// Quick work only (H1); hands the rest to the stand-in (H5).
    Quick,
    /// Quick work while more blocks are ready than this many threads could take, and nothing
    /// for the stand-in (H7).
    Surplus(u64),
}

impl<'a> Helper<'a> {
    /// A helper for a wait that only the chip's progress ends (ring space, the end of the
    /// run): when the orchestrator is one of the chip's workers
    /// ([`ChipShared::orchestrator_is_worker`]) it runs long kernels too (H1).
    pub(crate) fn new(run: &'a Arc<RunShared>, chip: &'a Arc<ChipShared>) -> Helper<'a> {
        Helper {
            run,
            chip,
            next: None,
            seen: None,
            off: false,
            takes: if chip.orchestrator_is_worker {
                Takes::AnyReturned
            } else {
                Takes::Quick
            },
        }
    }

    /// A helper for an orchestrator that runs ahead of the chip (H7): it takes quick work
    /// only, and only while more blocks are ready than the executors could take.
    pub(crate) fn surplus(run: &'a Arc<RunShared>, chip: &'a Arc<ChipShared>) -> Helper<'a> {
        let mut helper = Helper::new(run, chip);
        helper.takes = Takes::Surplus(chip.executors as u64);
        helper
    }

    /// Whether it took a block in the hold that finished the last one (the next
    /// [`Helper::help`] runs it without a look).
    pub(crate) fn holds_next(&self) -> bool {
        self.next.is_some()
    }

    /// The work epoch at its last look for work (after a [`Helper::help`] that returned
    /// `false`: the look that found nothing).
    pub(crate) fn seen(&self) -> Option<u64> {
        self.seen
    }

    /// A helper that runs quick work only, for a wait whose end the orchestration is waiting
    /// for (a tensor's producer): a long kernel would hold it up (H1).
    pub(crate) fn quick_only(run: &'a Arc<RunShared>, chip: &'a Arc<ChipShared>) -> Helper<'a> {
        let mut helper = Helper::new(run, chip);
        helper.takes = Takes::Quick;
        helper
    }

    /// The step of a wait loop before it waits: runs a helpable block or hands one to the
    /// stand-in (the loop made progress, so the waiter's spin window starts again, H4) or,
    /// when the waiter's next step parks, steps away (H3). Returns whether it ran or handed
    /// one.
    pub(crate) fn help_or_step_away(&mut self, waiter: &mut Waiter<'_>) -> bool {
        if self.help() {
            waiter.reset();
            return true;
        }
        if waiter.is_parking() {
            self.before_park();
        }
        false
    }

    /// Runs one helpable block if one is ready (H1) and finishes it, taking the next in the
    /// same hold of the graph lock; with nothing helpable, hands a block to the stand-in
    /// (H5; never for [`Helper::surplus`]). Returns whether it ran or handed one.
    pub(crate) fn help(&mut self) -> bool {
        let a = match self.next.take() {
            Some(a) => a,
            None => {
                if !self.news() {
                    return false;
                }
                self.seen = Some(self.chip.work.epoch());
                // H5: while the stand-in runs, it has the CPU this thread would help on. Its
                // finish moves the epoch, so this thread looks again then.
                if self.chip.stand_in.busy.load(Ordering::Acquire) {
                    return false;
                }
                let pass_start = self.pass_start();
                let mut graph = self.run.lock_graph_as_offerer();
                match self.take(&mut graph) {
                    Some(a) => {
                        drop(graph);
                        self.trace_pass(pass_start, "take");
                        a
                    }
                    None => match self.take_fused(&mut graph) {
                        Some(a) => {
                            drop(graph);
                            self.trace_pass(pass_start, "take");
                            a
                        }
                        None => return self.delegate(graph, pass_start),
                    },
                }
            }
        };
        let c = run_block(self.run, &a);
        drop(a);
        let mut fx = Effects::default();
        let pass_start = self.pass_start();
        {
            let mut graph = self.run.lock_graph_as_offerer();
            finish_block(&mut graph, self.chip, self.run, &c, &mut fx);
            self.next = self.take(&mut graph);
            fx.quiescent = self.run.running.load(Ordering::SeqCst) == 0;
            fx.wake = graph.signal(self.run);
        }
        let name = if self.next.is_some() {
            "complete+take"
        } else {
            "complete"
        };
        self.trace_pass(pass_start, name);
        after_finish(self.chip, self.run, std::slice::from_ref(&c), &fx);
        true
    }

    /// Takes what this helper may take (H1, H7), under the graph lock.
    fn take(&self, graph: &mut GraphGuard<'_>) -> Option<Assignment> {
        match self.takes {
            Takes::AnyReturned => graph.take_helpable(self.run, self.chip, true),
            Takes::Quick => graph.take_helpable(self.run, self.chip, false),
            Takes::Surplus(keep) => graph.take_surplus(self.run, self.chip, keep),
        }
    }

    /// H8: a block of a fused replay, for a worker's wait that runs long kernels too.
    fn take_fused(&self, graph: &mut GraphGuard<'_>) -> Option<Assignment> {
        match self.takes {
            Takes::AnyReturned => graph.take_fused_block(self.run, self.chip),
            Takes::Quick | Takes::Surplus(_) => None,
        }
    }

    /// When a pass under the graph lock starts, if the run is traced.
    fn pass_start(&self) -> Option<Instant> {
        self.run.trace.as_ref().map(|_| Instant::now())
    }

    /// Records a pass on the orchestrator's helping lane (trace level 3).
    fn trace_pass(&self, start: Option<Instant>, name: &str) {
        let lane = self.chip.scheduler_lanes().helping();
        trace_pass(self.run, lane, start, name);
    }

    /// H5: when the orchestrator is a worker, hands the next block it may not run itself to
    /// the stand-in (if that is idle), so that the block runs on the CPU this thread leaves
    /// while it waits. Returns whether it handed one.
    fn delegate(&mut self, mut graph: GraphGuard<'_>, pass_start: Option<Instant>) -> bool {
        let chip = self.chip;
        let stand_in = &chip.stand_in;
        let surplus = matches!(self.takes, Takes::Surplus(_));
        if surplus || !chip.orchestrator_is_worker || stand_in.busy.swap(true, Ordering::AcqRel) {
            return false;
        }
        let Some(a) = graph.take_block(self.run, chip) else {
            stand_in.busy.store(false, Ordering::Release);
            return false;
        };
        self.run.stand_in_running.store(1, Ordering::Release);
        let wake = graph.signal(self.run);
        drop(graph);
        self.trace_pass(pass_start, "hand to stand-in");
        hand_to_stand_in(chip, self.run, a);
        if wake != Signal::Nothing {
            chip.signal_work(wake == Signal::Wake);
        }
        true
    }

    /// Whether work may have become dispatchable since the last look that found nothing.
    pub(crate) fn news(&self) -> bool {
        self.next.is_some() || self.seen != Some(self.chip.work.epoch())
    }

    /// Before the next wait step parks (H3): clears the run's flag and hands back.
    fn before_park(&mut self) {
        if !self.off {
            self.off = true;
            self.run.set_orchestrator_helps(false);
            self.hand_back();
        }
    }

    /// Call after every wait step: sets the flag again once a park is over (H3).
    pub(crate) fn after_wait(&mut self) {
        if std::mem::take(&mut self.off) {
            self.run.set_orchestrator_helps(true);
        }
    }

    /// Gives back the block not started and signals what is dispatchable.
    fn hand_back(&mut self) {
        let wake = {
            let mut graph = self.run.lock_graph_as_offerer();
            if let Some(a) = self.next.take() {
                graph.give_back(a, self.run);
            }
            graph.signal(self.run)
        };
        if wake != Signal::Nothing {
            self.chip.signal_work(wake == Signal::Wake);
        }
    }
}

impl Drop for Helper<'_> {
    fn drop(&mut self) {
        if self.next.is_some() {
            self.hand_back();
        }
    }
}
