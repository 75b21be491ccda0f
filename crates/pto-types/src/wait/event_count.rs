//! [`EventCount`]: the doorbell of CHIP_RUNTIME.md §6.5 and NODE_RUNTIME.md §3.4.
//!
//! The protocol (states, the named steps N1–N2 and W1–W5, the lost-wake-up race and the proof
//! sketch) is written down in `wait/README.md`; every atomic access below names its step.

use std::fmt;
use std::sync::PoisonError;
use std::time::Instant;

use super::TimedOut;
use super::sync::{AtomicU64, Condvar, Mutex, Ordering::SeqCst, REAL_TIME};

/// Bits of the state word that count registered waiters (the low bits).
const WAITER_BITS: u32 = 24;
/// Mask of the waiter count in the state word.
const WAITER_MASK: u64 = (1 << WAITER_BITS) - 1;
/// One registered waiter.
const WAITER_ONE: u64 = 1;
/// One epoch step: the epoch lives in the high `64 - WAITER_BITS` bits and wraps silently.
const EPOCH_ONE: u64 = 1 << WAITER_BITS;

/// Most waiters that may be registered on one [`EventCount`] at the same time (2^24 − 1).
///
/// Registering one more panics; no runtime comes near it (one waiter per thread).
pub const MAX_WAITERS: usize = WAITER_MASK as usize;

/// The epoch part of a state word.
const fn epoch_of(state: u64) -> u64 {
    state >> WAITER_BITS
}

/// The waiter-count part of a state word.
const fn waiters_of(state: u64) -> u64 {
    state & WAITER_MASK
}

/// The epoch an [`EventCount`] had at [`EventCount::prepare`] (step W1).
///
/// A key is a plain value, not a registration: dropping it costs nothing. Pass it to
/// [`EventCount::wait`] after re-checking the awaited condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a key only matters when it is passed to EventCount::wait"]
pub struct Key(u64);

/// An event count, a.k.a. doorbell: the one wake-up primitive of every waiting thread.
///
/// Whoever makes a condition true bumps the count with [`notify_one`](Self::notify_one) or
/// [`notify_all`](Self::notify_all); whoever waits for a condition takes a [`Key`] with
/// [`prepare`](Self::prepare), re-checks the condition, and only then calls
/// [`wait`](Self::wait), which returns at once if the count moved since the key was taken. No
/// wake-up is lost (proof in `wait/README.md`), and one event count may serve any number of
/// conditions: a waiter that wakes for somebody else's event re-checks and waits again.
///
/// Most callers want [`wait_until`](super::wait_until) or a [`Waiter`](super::Waiter), which
/// spin for a short window first (CHIP_RUNTIME.md §6.5).
///
/// # Fields and their access rules
///
/// 1. `state` packs the epoch (high 40 bits, wrapping) and the number of registered waiters
///    (low 24 bits). Notifiers only add one epoch step (`1 << 24`); a waiter adds one waiter at
///    W3 and removes exactly that one at W5. All accesses are `SeqCst`: read-modify-writes,
///    except the W1 and W4 loads (and diagnostic loads that decide nothing).
/// 2. `lock` guards nothing but the gap between a waiter's W4 compare and its sleep in `cond`:
///    a notifier passes through it (N2) before signalling, so it cannot signal in that gap.
/// 3. `cond` is waited on only with `lock` held and only while the epoch equals the key.
///
/// # Cost
///
/// A notify with nobody registered is one atomic read-modify-write (N1), no lock and no system
/// call. The lock and the condition variable are touched only when a waiter is registered.
///
/// # Example
///
/// ```no_run
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use pto_types::wait::EventCount;
///
/// let ec = Arc::new(EventCount::new());
/// let flag = Arc::new(AtomicBool::new(false));
/// let (ec2, flag2) = (ec.clone(), flag.clone());
/// let t = std::thread::spawn(move || {
///     flag2.store(true, Ordering::Release); // make the condition true...
///     ec2.notify_all(); // ...then ring the doorbell
/// });
/// loop {
///     if flag.load(Ordering::Acquire) {
///         break;
///     }
///     let key = ec.prepare(); // W1
///     if flag.load(Ordering::Acquire) {
///         break; // W2: re-check after taking the key
///     }
///     let _ = ec.wait(key, None); // W3..W5: park unless notified since W1
/// }
/// t.join().unwrap();
/// ```
pub struct EventCount {
    /// Epoch and waiter count (rule 1).
    state: AtomicU64,
    /// Closes the compare-then-sleep gap (rule 2).
    lock: Mutex<()>,
    /// Where registered waiters sleep (rule 3).
    cond: Condvar,
}

impl EventCount {
    /// A new event count at epoch 0 with no waiter.
    pub fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            lock: Mutex::new(()),
            cond: Condvar::new(),
        }
    }

    /// Bumps the epoch and wakes at least one parked waiter, if any is registered.
    ///
    /// Use it only when every waiter can consume the event (for example, threads taking tokens
    /// from one queue); if waiters wait for different conditions, the one woken may not be the
    /// one the event is for: use [`notify_all`](Self::notify_all).
    pub fn notify_one(&self) {
        if self.bump() {
            self.wake(false);
        }
    }

    /// Bumps the epoch and wakes every parked waiter, if any is registered.
    pub fn notify_all(&self) {
        if self.bump() {
            self.wake(true);
        }
    }

    /// Step N1: bump the epoch; report whether any waiter was registered at that instant.
    #[inline]
    fn bump(&self) -> bool {
        // N1 (bump). SeqCst RMW on the state word: it reads the latest value in the word's
        // modification order, so either it sees a waiter's W3 registration (and we go on to N2),
        // or that W3 comes later and reads this bump (and the waiter does not sleep).
        let prev = self.state.fetch_add(EPOCH_ONE, SeqCst);
        waiters_of(prev) != 0
    }

    /// Step N2: pass through the lock, then signal the condition variable.
    #[cold]
    fn wake(&self, all: bool) {
        // Passing through the lock orders this signal after any W4 compare that missed the bump
        // (that waiter is then already asleep in `cond`, which released the lock atomically) and
        // before any W4 compare that has yet to run (which then sees the bump).
        drop(self.lock.lock().unwrap_or_else(PoisonError::into_inner));
        if all {
            self.cond.notify_all();
        } else {
            self.cond.notify_one();
        }
    }

    /// Step W1: take a key (the current epoch). Re-check the awaited condition after this call
    /// and before [`wait`](Self::wait).
    pub fn prepare(&self) -> Key {
        // W1 (prepare). SeqCst load: if it reads a notifier's N1 bump (or anything later), the
        // condition that notifier published before N1 is visible to the W2 re-check.
        Key(epoch_of(self.state.load(SeqCst)))
    }

    /// Steps W3–W5: park until the epoch differs from `key`, or until `deadline`.
    ///
    /// Returns `Ok(())` as soon as the epoch moved past `key` (at once if it already has),
    /// and `Err(TimedOut)` if `deadline` passed first. With `deadline == None` it never times
    /// out. A parked thread costs no CPU. Under `cfg(loom)` the deadline is ignored (no real
    /// time; see the `sync` shim).
    ///
    /// # Panics
    ///
    /// If [`MAX_WAITERS`] threads are already registered.
    pub fn wait(&self, key: Key, deadline: Option<Instant>) -> Result<(), TimedOut> {
        // W3 (register and compare). SeqCst RMW on the same word as N1: either it reads a bump
        // made after W1 (epoch != key: return without sleeping), or every later N1 reads this
        // registration and performs N2.
        let prev = self.state.fetch_add(WAITER_ONE, SeqCst);
        if waiters_of(prev) == WAITER_MASK {
            // The increment carried into the epoch (a harmless spurious bump); undo it.
            self.state.fetch_sub(WAITER_ONE, SeqCst);
            panic!("more than {MAX_WAITERS} waiters registered on one EventCount");
        }
        let result = if epoch_of(prev) != key.0 {
            Ok(())
        } else {
            self.park(key, deadline)
        };
        // W5 (deregister). SeqCst RMW: removes exactly the W3 registration. Until here every N1
        // saw a non-zero count, so no notify could skip N2 while this thread might sleep.
        self.state.fetch_sub(WAITER_ONE, SeqCst);
        result
    }

    /// Step W4: compare under the lock, sleep in the condition variable, repeat.
    fn park(&self, key: Key, deadline: Option<Instant>) -> Result<(), TimedOut> {
        let deadline = deadline.filter(|_| REAL_TIME);
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            // W4 (compare under the lock). SeqCst load while holding the lock: a notifier whose
            // N2 passed the lock before us made its N1 visible here; one that passes it after
            // us finds us asleep in `cond`. Also absorbs spurious wake-ups.
            if epoch_of(self.state.load(SeqCst)) != key.0 {
                return Ok(());
            }
            guard = match deadline {
                None => self
                    .cond
                    .wait(guard)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(TimedOut);
                    }
                    self.cond
                        .wait_timeout(guard, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// How many waiters are registered (between W3 and W5) right now.
    ///
    /// A racy snapshot for diagnostics and tests; never base a wake-up decision on it.
    pub fn registered_waiters(&self) -> usize {
        // Diagnostic load, not a protocol step.
        waiters_of(self.state.load(SeqCst)) as usize
    }
}

impl Default for EventCount {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for EventCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Diagnostic load, not a protocol step.
        let state = self.state.load(SeqCst);
        f.debug_struct("EventCount")
            .field("epoch", &epoch_of(state))
            .field("waiters", &waiters_of(state))
            .finish()
    }
}
