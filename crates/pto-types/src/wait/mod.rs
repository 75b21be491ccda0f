//! Spin briefly, then park: the wait primitive of the workspace.
//!
//! CHIP_RUNTIME.md §6.5 and NODE_RUNTIME.md §3.4 ask every waiting thread (back-pressure, tensor
//! waits, idle schedulers and cores, a caller awaiting a run) to use one primitive; this is it.
//! Loops that park on something else (a futex word in shared memory, a chip's executor search)
//! spin through the same [`SpinWindow`]; `README.md` lists every such loop and its cadence. The
//! primitive:
//!
//! - [`EventCount`] (the doorbell): wakers [`notify_one`](EventCount::notify_one) or
//!   [`notify_all`](EventCount::notify_all) after making their change visible; waiters take a
//!   [`Key`] with [`prepare`](EventCount::prepare), re-check, and
//!   [`wait`](EventCount::wait). A notify with nobody registered is one atomic read-modify-write.
//! - [`wait_until`]: the whole spin-then-park loop around a `ready` closure.
//! - [`Waiter`]: the same loop one step at a time, for callers that also watch a fatal flag or
//!   a watchdog.
//! - [`SpinPolicy`] with the named limits [`PURE_SPIN`] (~2 µs of `spin_loop()` only) and
//!   [`DEFAULT_SPIN`] (50 µs window, then park).
//! - [`SpinWindow`]: the spinning half alone, one [`SpinStep`] at a time, for loops that park
//!   on something other than an [`EventCount`] or that read the clock less often.
//! - [`WorkSignal`] and [`Search`]: the wake-up protocol of workers that search for work and
//!   park when they find none (a chip's executors), built on an [`EventCount`].
//! - [`Handoff`]: items a thread leaves for the holder of a busy lock instead of waiting for it
//!   (a chip's orchestrator publishing while an executor holds the graph lock).
//! - [`Countdown`]: a fixed DAG run by several threads without a lock (a chip's fused
//!   replay): per-node producer counters and a ready queue each node enters once; a thread
//!   that finds nothing may stop at any time (rules F1-F2 in `countdown.rs`).
//!
//! A park has a timeout only when the caller passes a deadline, so an idle runtime has every
//! thread parked and costs ~0 % CPU. The protocol, its states and named steps, the lost-wake-up
//! race and the proof sketch are in `README.md` beside this file (STYLE.md habit 14); the code
//! imports its atomics and lock through a `cfg(loom)` shim (habit 13) and is model-checked by
//! the loom tests in `loom_tests.rs`.
//!
//! This module needs no `unsafe`: it is built from atomics, mutexes and a `Condvar`. The cross-process waits of NODE_RUNTIME.md §3.4 and §4.6 (futex words in shared
//! memory) live in `pto-node` and follow the same steps; the README gives their two-word
//! variant of the steps and of the proof.

mod countdown;
mod event_count;
mod handoff;
mod spin;
mod sync;
mod work_signal;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

use std::fmt;

pub use countdown::{Countdown, Cursor, Take};
pub use event_count::{EventCount, Key, MAX_WAITERS};
pub use handoff::Handoff;
pub use spin::{
    DEFAULT_SPIN, PURE_SPIN, SpinPolicy, SpinStep, SpinWindow, WaitOutcome, Waiter, spin_then,
    wait_until,
};
pub use work_signal::{Search, WorkSignal};

/// A wait ended because its deadline passed before the awaited condition held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimedOut;

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the deadline passed before the awaited condition held")
    }
}

impl std::error::Error for TimedOut {}
