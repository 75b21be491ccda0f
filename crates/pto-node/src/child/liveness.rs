//! The child's liveness thread (mailbox rule M7).
//!
//! The parent's monitor bumps the mailbox's probe word; this thread, which no callable ever
//! blocks, copies it into the ack word — but only while the serving thread is healthy: waiting
//! for work, inside a callable or control operation (a long kernel is not a hang; the parent's
//! `task_timeout` bounds those), or visibly moving (its step counter advanced since the last
//! answer). A serving thread stuck in the runtime's own code outside any callable therefore
//! stops the answers, and a stopped process (SIGSTOP) answers nothing at all; either way the
//! parent kills it after `liveness_timeout`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::shm::Mailbox;

/// What the serving thread is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Phase {
    /// Parked or spinning on the state word.
    Waiting = 0,
    /// Running a callable or a control operation.
    Working = 1,
    /// The runtime's own code between the two (decode, reply, socket).
    Serving = 2,
}

/// Shared between the serving thread and the liveness thread.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    phase: AtomicU32,
    steps: AtomicU64,
    stop: AtomicBool,
}

impl Progress {
    /// Records a phase change (and a step of progress).
    pub(crate) fn enter(&self, phase: Phase) {
        self.phase.store(phase as u32, Relaxed);
        self.steps.fetch_add(1, Relaxed);
    }

    fn healthy(&self, steps_at_last_answer: u64) -> bool {
        self.phase.load(Relaxed) != Phase::Serving as u32
            || self.steps.load(Relaxed) != steps_at_last_answer
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Relaxed);
    }
}

/// How often an unanswered probe is re-checked while the serving thread looks stuck.
const RECHECK: Duration = Duration::from_millis(5);
/// The longest park between probes (bounds the exit after `stop`).
const PARK: Duration = Duration::from_millis(250);

/// Starts the liveness thread for `mailbox`.
pub(crate) fn start(mailbox: Mailbox, progress: Arc<Progress>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("pto-child-liveness".to_string())
        .spawn(move || {
            let mut answered = mailbox.probe_ack();
            let mut steps = progress.steps.load(Relaxed);
            while !progress.stop.load(Relaxed) {
                let probe = mailbox.wait_probe(answered, PARK);
                if probe == answered {
                    continue;
                }
                if progress.healthy(steps) {
                    steps = progress.steps.load(Relaxed);
                    mailbox.ack_probe(probe);
                    answered = probe;
                } else {
                    std::thread::sleep(RECHECK);
                }
            }
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serving_thread_that_does_not_move_is_unhealthy() {
        let h = Progress::default();
        h.enter(Phase::Serving);
        let steps = h.steps.load(Relaxed);
        assert!(!h.healthy(steps), "stuck in Serving since the last answer");
        assert!(h.healthy(steps - 1), "moved since the last answer");
        h.enter(Phase::Working);
        assert!(h.healthy(h.steps.load(Relaxed)), "inside a callable");
        h.enter(Phase::Waiting);
        assert!(h.healthy(h.steps.load(Relaxed)), "waiting for work");
    }
}
