//! The scheduler's doorbell (NODE_RUNTIME.md §3.4): one wake-up source for everything that
//! creates work — a READY task, a run promotion, a child's reply, a child's death, a control
//! request, stop.
//!
//! [`Doorbell`] starts local (a `pto_types::wait::EventCount`, enough when every waker is a
//! thread of this process) and is attached to the node control segment when child processes
//! start ([`Doorbell::attach`]); from then on it is a futex word shared with the children.
//! [`DoorbellWaiter`] is the scheduler's (and `init`'s) spin-then-park wait on either form, one
//! step at a time like `pto_types::wait::Waiter`, spinning through the same `SpinWindow`.
//!
//! The shared form follows the two-word variant of the wait protocol (steps N1–N2, W1–W5 and
//! the proof): `crates/pto-types/src/wait/README.md`, "The two-word variant". Its words are
//! `OFF_DOORBELL` (the epoch) and `OFF_SCHED_PARKED` (the registration, only ever accessed by
//! read-modify-writes); each access below names its step. `loom_tests.rs` model-checks the
//! shared form with the mailbox.

use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Instant;

use pto_types::node_wire::control_segment::{OFF_DOORBELL, OFF_SCHED_PARKED, OFF_SHUTDOWN_ALL};
use pto_types::wait::{EventCount, SpinPolicy, SpinStep, SpinWindow, Waiter};

use super::segment::Segment;
use super::shared::{SharedMem, SharedWord};

/// The doorbell words of a node control segment (or, under loom, of the model memory of
/// `loom_tests.rs`).
#[derive(Debug)]
pub(crate) struct SharedDoorbell<S: SharedMem = Segment> {
    seg: Arc<S>,
}

impl<S: SharedMem> Clone for SharedDoorbell<S> {
    fn clone(&self) -> Self {
        SharedDoorbell {
            seg: Arc::clone(&self.seg),
        }
    }
}

impl<S: SharedMem> SharedDoorbell<S> {
    pub(crate) fn new(seg: Arc<S>) -> SharedDoorbell<S> {
        SharedDoorbell { seg }
    }

    /// Wakes the waiter, if registered; call it after making the work visible.
    pub(crate) fn ring(&self) {
        // N1 (bump).
        self.seg.word(OFF_DOORBELL).seq_fetch_add(1);
        // N2 (wake, only a registered waiter).
        // An RMW, as the waiter's registration is: the later of the two in the word's
        // modification order synchronizes with the earlier (no cross-word total order needed).
        if self.seg.word(OFF_SCHED_PARKED).seq_read_latest() == 1 {
            self.seg.word(OFF_DOORBELL).futex_wake(u32::MAX);
        }
    }

    /// The sticky "every child exits" word (parent-only, 0 → 1).
    pub(crate) fn set_shutdown_all(&self) {
        self.seg.word(OFF_SHUTDOWN_ALL).seq_store(1);
    }

    pub(crate) fn shutdown_all(&self) -> bool {
        self.seg.word(OFF_SHUTDOWN_ALL).seq_load() != 0
    }
}

/// A [`Doorbell`]'s ring count, in its local or shared form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Epoch {
    Local(pto_types::wait::Key),
    Shared(u32),
}

/// The scheduler's doorbell: local until child processes attach the shared words.
#[derive(Debug)]
pub(crate) struct Doorbell<S: SharedMem = Segment> {
    local: EventCount,
    shared: OnceLock<SharedDoorbell<S>>,
}

impl Doorbell {
    pub(crate) fn new() -> Doorbell {
        Doorbell::unattached()
    }

    /// Closes the shared segment's descriptor (the mapping stays usable); for `close`.
    pub(crate) fn close_shared_fd(&self) {
        if let Some(s) = self.shared.get() {
            s.seg.close_fd();
        }
    }
}

impl<S: SharedMem> Doorbell<S> {
    /// A local doorbell over any shared memory (`new` is the one over a [`Segment`]).
    pub(crate) fn unattached() -> Doorbell<S> {
        Doorbell {
            local: EventCount::new(),
            shared: OnceLock::new(),
        }
    }

    /// From now on rings go to the shared words (before any waiter or child exists).
    pub(crate) fn attach(&self, shared: SharedDoorbell<S>) {
        let _ = self.shared.set(shared);
    }

    /// The number of rings so far (W1 without a wait): a waiter that reads the same epoch
    /// before and after its checks knows nothing rang in between.
    pub(crate) fn epoch(&self) -> Epoch {
        match self.shared.get() {
            Some(s) => Epoch::Shared(s.seg.word(OFF_DOORBELL).seq_load()),
            None => Epoch::Local(self.local.prepare()),
        }
    }

    /// Announces new work; call it after making the work visible.
    pub(crate) fn notify_one(&self) {
        match self.shared.get() {
            Some(s) => s.ring(),
            None => self.local.notify_one(),
        }
    }
}

enum Mode<'a, S: SharedMem> {
    Local(Waiter<'a>),
    Shared {
        bell: &'a SharedDoorbell<S>,
        spin: SpinWindow,
        /// W1's value, taken once the window is over; the next step parks with it.
        key: Option<u32>,
    },
}

/// A spin-then-park wait on a [`Doorbell`], one step per call (the caller re-checks its
/// sources between steps and calls `reset` after progress).
pub(crate) struct DoorbellWaiter<'a, S: SharedMem = Segment> {
    mode: Mode<'a, S>,
}

impl<'a, S: SharedMem> DoorbellWaiter<'a, S> {
    pub(crate) fn new(bell: &'a Doorbell<S>, policy: SpinPolicy) -> DoorbellWaiter<'a, S> {
        let mode = match bell.shared.get() {
            Some(shared) => Mode::Shared {
                bell: shared,
                spin: SpinWindow::new(policy),
                key: None,
            },
            None => Mode::Local(Waiter::new(&bell.local, policy)),
        };
        DoorbellWaiter { mode }
    }

    /// One step; returns false when `deadline` passed.
    pub(crate) fn wait(&mut self, deadline: Option<Instant>) -> bool {
        match &mut self.mode {
            Mode::Local(w) => !w.wait(deadline).is_timed_out(),
            Mode::Shared { bell, spin, key } => {
                let doorbell = bell.seg.word(OFF_DOORBELL);
                if let Some(v) = *key {
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        return false;
                    }
                    // W4: sleep while the doorbell still holds `v` (bounded by the deadline).
                    doorbell.futex_wait(v, deadline.map(|d| d.saturating_duration_since(now)));
                    // W1 again, still registered: the caller's next check is W2.
                    *key = Some(doorbell.seq_load());
                    return true;
                }
                match spin.step_until(deadline) {
                    SpinStep::Spun | SpinStep::Yielded => true,
                    SpinStep::TimedOut => false,
                    SpinStep::Over => {
                        // W1 (prepare), then W3a (register); the caller's next check is W2.
                        *key = Some(doorbell.seq_load());
                        bell.seg.word(OFF_SCHED_PARKED).seq_swap(1);
                        true
                    }
                }
            }
        }
    }

    /// A fresh spin window after progress (clears `sched_parked`).
    pub(crate) fn reset(&mut self) {
        match &mut self.mode {
            Mode::Local(w) => w.reset(),
            Mode::Shared { bell, spin, key } => {
                if key.take().is_some() {
                    // W5 (deregister).
                    bell.seg.word(OFF_SCHED_PARKED).seq_swap(0);
                }
                spin.reset();
            }
        }
    }
}

impl<S: SharedMem> Drop for DoorbellWaiter<'_, S> {
    fn drop(&mut self) {
        self.reset();
    }
}

/// Waits on `bell` until `ready` returns `Some` or `deadline` passes (one last check then).
pub(crate) fn wait_on<S: SharedMem, T>(
    bell: &Doorbell<S>,
    policy: SpinPolicy,
    deadline: Option<Instant>,
    mut ready: impl FnMut() -> Option<T>,
) -> Option<T> {
    let mut waiter = DoorbellWaiter::new(bell, policy);
    loop {
        if let Some(v) = ready() {
            return Some(v);
        }
        if !waiter.wait(deadline) {
            return ready();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::segment::SegmentKey;
    use super::*;
    use pto_types::node_wire::control_segment::SEGMENT_BYTES;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    /// A producer thread bumps a counter and rings; the consumer waits through the shared
    /// doorbell with a zero spin window (always parking). A lost wake-up hangs the test.
    #[test]
    fn no_lost_wake_ups_through_the_futex_doorbell() {
        let seg = Arc::new(
            Segment::create(
                SegmentKey {
                    owner: 1,
                    segment: u64::MAX - 1,
                },
                "pto-test-ctl",
                SEGMENT_BYTES,
            )
            .unwrap(),
        );
        let bell = Arc::new(Doorbell::new());
        bell.attach(SharedDoorbell::new(Arc::clone(&seg)));
        let counter = Arc::new(AtomicU64::new(0));
        const N: u64 = 3000;
        let (b2, c2) = (Arc::clone(&bell), Arc::clone(&counter));
        let producer = std::thread::spawn(move || {
            for _ in 0..N {
                c2.fetch_add(1, Ordering::SeqCst);
                b2.notify_one();
                if c2.load(Ordering::SeqCst) % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen < N {
            let got = wait_on(&bell, SpinPolicy::PARK_IMMEDIATELY, Some(deadline), || {
                let now = counter.load(Ordering::SeqCst);
                (now > seen).then_some(now)
            });
            seen = got.expect("woken before the deadline");
        }
        producer.join().unwrap();
        assert_eq!(seg.word(OFF_SCHED_PARKED).load(Ordering::SeqCst), 0);
    }
}
