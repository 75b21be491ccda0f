//! The orchestrator as a part-time executor: while it waits (for ring space, for a tensor's
//! producer, for the end of the run) it takes ready work, runs it and finishes it, instead of
//! parking while a third thread runs it (`docs/decisions/chip-engine.md`, "The orchestrator
//! helps"). On a two-CPU host the orchestrator and two executors are three runnable threads at
//! few-µs kernels, and every wake of one preempts another; with the orchestrator helping, one
//! executor steps back and two threads share the two CPUs.
//!
//! Rules:
//! - H1. Only *helpable* work ([`Graph::helpable`]): a one-block AIC or AIV task (no gang, no
//!   MIX, no sync-start cohort) whose kernel's last run in this process returned within
//!   `LONG_KERNEL_NS`. A kernel never seen to return, or one that runs long, never runs on this
//!   thread, so the waits around it keep their watchdog and a hung first run fails the run as
//!   before.
//! - H2. While the orchestrator is not parked, the run says so
//!   ([`RunShared::orchestrator_helps`], set when the run starts): a signal for helpable work
//!   then wakes no parked executor when a block is running (its thread comes back for more,
//!   and so does this one when it next waits), and an executor that ran helpable work steps
//!   back when another executor is active (`executor::serve`). One executor and the
//!   orchestrator then share such work.
//! - H3. Before it parks, the orchestrator clears the flag, then, under the graph lock, gives
//!   back the block it took but did not start and signals whatever is dispatchable by the rule
//!   that holds without the flag. A finisher that saw the flag set read it under the lock
//!   before that look, so the look sees its work; one that comes after sees the flag clear.
//!   No work is left with nobody coming back for it. After the park the flag is set again.
//! - H4. Helping counts as progress: a wait that ran a block goes round again without parking
//!   and without its watchdog check (a block finished).
//!
//! [`Graph::helpable`]: super::super::graph::Graph::helpable

use std::sync::Arc;
use std::sync::atomic::Ordering;

use pto_types::wait::Waiter;

use super::super::core::{after_finish, finish_block, run_block};
use super::super::graph::{Effects, Signal};
use super::super::run::RunShared;
use super::super::{Assignment, ChipShared};

/// One wait's helping state. Dropping it gives back the block taken but not started.
pub(crate) struct Helper<'a> {
    run: &'a Arc<RunShared>,
    chip: &'a ChipShared,
    /// Taken in the hold that finished the last block, not started yet.
    next: Option<Assignment>,
    /// The chip's work epoch before the last look that found nothing: until it moves there is
    /// nothing new to look for, so a wait's spin steps cost no lock.
    seen: Option<u64>,
    /// [`Helper::before_park`] cleared the run's flag.
    off: bool,
}

impl<'a> Helper<'a> {
    pub(crate) fn new(run: &'a Arc<RunShared>, chip: &'a ChipShared) -> Helper<'a> {
        Helper {
            run,
            chip,
            next: None,
            seen: None,
            off: false,
        }
    }

    /// The step of a wait loop before it waits: runs a helpable block (the loop made
    /// progress, so the waiter's spin window starts again, H4) or, when the waiter's next step
    /// parks, steps away (H3). Returns whether it ran a block.
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
    /// same hold of the graph lock. Returns whether it ran one.
    fn help(&mut self) -> bool {
        let a = match self.next.take() {
            Some(a) => a,
            None => {
                if !self.news() {
                    return false;
                }
                self.seen = Some(self.chip.work.epoch());
                match self
                    .run
                    .lock_graph_as_offerer()
                    .take_helpable(self.run, self.chip)
                {
                    Some(a) => a,
                    None => return false,
                }
            }
        };
        let c = run_block(self.run, &a);
        drop(a);
        let mut fx = Effects::default();
        {
            let mut graph = self.run.lock_graph_as_offerer();
            finish_block(&mut graph, self.chip, self.run, &c, &mut fx);
            self.next = graph.take_helpable(self.run, self.chip);
            fx.quiescent = self.run.running.load(Ordering::SeqCst) == 0;
            fx.wake = graph.signal(self.run);
        }
        after_finish(self.chip, self.run, std::slice::from_ref(&c), &fx);
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
