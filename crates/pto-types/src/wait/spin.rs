//! Spin briefly, then park: [`SpinPolicy`], [`Waiter`] and [`wait_until`].
//!
//! CHIP_RUNTIME.md §6.5 and NODE_RUNTIME.md §3.4: poll with `spin_loop()` for [`PURE_SPIN`],
//! then alternate `spin_loop()` with `yield_now()` until the spin window ([`DEFAULT_SPIN`] unless
//! configured) has elapsed, then take a key, re-check and park on the [`EventCount`]. The state
//! machine (running → spinning → registered → parked) is drawn in `wait/README.md`.

use std::time::{Duration, Instant};

use super::sync::{REAL_TIME, spin_loop, yield_now};
use super::{EventCount, Key, TimedOut};

/// How long a waiter polls with `spin_loop()` alone before it starts yielding: ~2 µs.
pub const PURE_SPIN: Duration = Duration::from_micros(2);

/// The default spin window, after which a waiter parks: 50 µs.
///
/// A futex wake costs tens of µs on the reference VM (CHIP_RUNTIME.md §6.5), so a partner that
/// answers within this window is cheaper to spin for; beyond it, spinning steals one of the two
/// cores from the simulated chips.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// How long a waiter spins before it parks.
///
/// The window is measured from the waiter's first step. During the first
/// [`pure_spin`](Self::pure_spin) of it the waiter only issues `spin_loop()` hints; for the rest
/// it alternates them with `yield_now()`. A zero window parks at once. Under `cfg(loom)` every
/// policy behaves like [`PARK_IMMEDIATELY`](Self::PARK_IMMEDIATELY) (no real time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpinPolicy {
    /// Whole window, pure spinning included.
    spin: Duration,
    /// Leading part with `spin_loop()` only; never longer than `spin`.
    pure_spin: Duration,
}

impl SpinPolicy {
    /// [`DEFAULT_SPIN`] window with [`PURE_SPIN`] of pure spinning.
    pub const DEFAULT: Self = Self::new(DEFAULT_SPIN);

    /// No spinning: take a key, re-check and park on the first step.
    pub const PARK_IMMEDIATELY: Self = Self::new(Duration::ZERO);

    /// A window of `spin`, the first `min(spin, PURE_SPIN)` of it pure spinning.
    pub const fn new(spin: Duration) -> Self {
        Self {
            spin,
            pure_spin: min(spin, PURE_SPIN),
        }
    }

    /// The same window with `pure_spin` (clamped to the window) of pure spinning.
    pub const fn with_pure_spin(self, pure_spin: Duration) -> Self {
        Self {
            spin: self.spin,
            pure_spin: min(self.spin, pure_spin),
        }
    }

    /// The whole spin window.
    pub const fn spin(self) -> Duration {
        self.spin
    }

    /// The leading part of the window that uses `spin_loop()` only.
    pub const fn pure_spin(self) -> Duration {
        self.pure_spin
    }

    /// Whether waiters skip spinning altogether: a zero window, or any window under `cfg(loom)`.
    pub const fn parks_immediately(self) -> bool {
        !REAL_TIME || self.spin.is_zero()
    }
}

impl Default for SpinPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// `min` for `Duration` in a `const` context.
const fn min(a: Duration, b: Duration) -> Duration {
    if a.as_nanos() <= b.as_nanos() { a } else { b }
}

/// What one [`Waiter::wait`] step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a TimedOut outcome must end the wait"]
pub enum WaitOutcome {
    /// Issued one `spin_loop()` hint; still inside the spin window.
    Spun,
    /// Called `yield_now()` once; still inside the spin window.
    Yielded,
    /// The spin window is over and a key was taken (step W1); the next step parks.
    Prepared,
    /// Parked, and woke because the event count moved; a fresh key is already taken, so the
    /// next step parks again unless the caller's re-check succeeds.
    Notified,
    /// The deadline passed before the event count moved.
    TimedOut,
}

impl WaitOutcome {
    /// Whether the wait must end (the deadline passed).
    pub const fn is_timed_out(self) -> bool {
        matches!(self, Self::TimedOut)
    }
}

/// A spin-then-park wait taken one step at a time, for loops that check more than one thing.
///
/// The caller owns the loop: check everything (its condition, a fatal flag, a watchdog), and if
/// nothing is ready call [`wait`](Self::wait) for one step, then check again. Steps spin or
/// yield inside the window of the [`SpinPolicy`]; then one step takes a key and returns
/// [`WaitOutcome::Prepared`], so the caller's next check is the re-check of step W2; the step
/// after that parks on the [`EventCount`] until a notify or the deadline.
///
/// ```no_run
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use pto_types::wait::{EventCount, SpinPolicy, Waiter};
///
/// fn wait_for_work(ec: &EventCount, work: &AtomicBool, fatal: &AtomicBool) -> bool {
///     let mut waiter = Waiter::new(ec, SpinPolicy::DEFAULT);
///     loop {
///         if fatal.load(Ordering::Acquire) {
///             return false;
///         }
///         if work.swap(false, Ordering::AcqRel) {
///             return true;
///         }
///         let _ = waiter.wait(None); // no deadline: never TimedOut
///     }
/// }
/// ```
///
/// A notifier must make its condition visible before notifying, and the caller must re-check
/// after every step that returns anything but [`WaitOutcome::TimedOut`]; then no wake-up is
/// lost. A long-lived loop that found work calls [`reset`](Self::reset) so that its next idle
/// period spins again.
#[derive(Debug)]
pub struct Waiter<'a> {
    ec: &'a EventCount,
    policy: SpinPolicy,
    /// Start of the spin window, set by the first step.
    spin_started: Option<Instant>,
    /// In the yield phase: whether the next step yields (else it spins).
    yield_next: bool,
    /// Taken once the spin window is over (W1); the next step parks with it.
    key: Option<Key>,
}

impl<'a> Waiter<'a> {
    /// A waiter on `ec` with a fresh spin window.
    pub fn new(ec: &'a EventCount, policy: SpinPolicy) -> Self {
        Self {
            ec,
            policy,
            spin_started: None,
            yield_next: false,
            key: None,
        }
    }

    /// One step of the wait: spin, yield, take a key, or park until notified or `deadline`.
    ///
    /// Call it only after checking the awaited condition and finding it false. A `None`
    /// deadline never yields [`WaitOutcome::TimedOut`]. Under `cfg(loom)` deadlines are ignored.
    pub fn wait(&mut self, deadline: Option<Instant>) -> WaitOutcome {
        if let Some(key) = self.key {
            // Registered → parked (W3–W5), then back to running with a fresh key (W1), so the
            // caller's next check is a re-check.
            return match self.ec.wait(key, deadline) {
                Ok(()) => {
                    self.key = Some(self.ec.prepare());
                    WaitOutcome::Notified
                }
                Err(TimedOut) => WaitOutcome::TimedOut,
            };
        }
        if self.policy.parks_immediately() {
            return self.prepare();
        }
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            return WaitOutcome::TimedOut;
        }
        let elapsed = now - *self.spin_started.get_or_insert(now);
        if elapsed >= self.policy.spin {
            self.prepare()
        } else if elapsed < self.policy.pure_spin || !self.yield_next {
            self.yield_next = elapsed >= self.policy.pure_spin;
            spin_loop();
            WaitOutcome::Spun
        } else {
            self.yield_next = false;
            yield_now();
            WaitOutcome::Yielded
        }
    }

    /// Spinning → registered: take the key (W1) that the next step parks with.
    fn prepare(&mut self) -> WaitOutcome {
        self.key = Some(self.ec.prepare());
        WaitOutcome::Prepared
    }

    /// Starts a fresh spin window and drops any key: call it after the loop made progress.
    pub fn reset(&mut self) {
        self.spin_started = None;
        self.yield_next = false;
        self.key = None;
    }

    /// Whether the spin window is over, so that the next step parks.
    pub fn is_parking(&self) -> bool {
        self.key.is_some()
    }

    /// The policy this waiter spins with.
    pub fn policy(&self) -> SpinPolicy {
        self.policy
    }
}

/// Waits until `ready` returns `Some`, spinning for the window of `spin`, then parking on `ec`.
///
/// `ready` is polled before every step of a [`Waiter`], so it runs many times while spinning:
/// keep it cheap and free of side effects unless it returns `Some` (a successful `ready` may
/// claim something, e.g. pop a queue). Whoever makes `ready` succeed must notify `ec` after
/// making its change visible.
///
/// Parks have a timeout only when `deadline` is `Some`. When the deadline passes, `ready` is
/// polled one last time; `Err(TimedOut)` means it still returned `None`. Under `cfg(loom)` the
/// deadline is ignored and there is no spinning.
///
/// ```no_run
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use pto_types::wait::{EventCount, SpinPolicy, wait_until};
///
/// fn take_token(ec: &EventCount, tokens: &AtomicU32) {
///     wait_until(ec, SpinPolicy::DEFAULT, None, || {
///         tokens
///             .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
///             .ok()
///     })
///     .expect("no deadline, so no timeout");
/// }
/// ```
pub fn wait_until<T>(
    ec: &EventCount,
    spin: SpinPolicy,
    deadline: Option<Instant>,
    mut ready: impl FnMut() -> Option<T>,
) -> Result<T, TimedOut> {
    let mut waiter = Waiter::new(ec, spin);
    loop {
        if let Some(value) = ready() {
            return Ok(value);
        }
        if waiter.wait(deadline).is_timed_out() {
            return ready().ok_or(TimedOut);
        }
    }
}
