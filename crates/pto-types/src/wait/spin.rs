//! Spin briefly, then park: [`SpinPolicy`], [`SpinWindow`], [`Waiter`] and [`wait_until`].
//!
//! CHIP_RUNTIME.md §6.5 and NODE_RUNTIME.md §3.4: poll with `spin_loop()` for [`PURE_SPIN`],
//! then alternate `spin_loop()` with `yield_now()` until the spin window ([`DEFAULT_SPIN`] unless
//! configured) has elapsed, then take a key, re-check and park on the [`EventCount`]. The state
//! machine (running → spinning → registered → parked) is drawn in `wait/README.md`.
//! [`SpinWindow`] is the spinning half on its own: every spin loop of the workspace steps one,
//! including those that park on something other than an [`EventCount`].

use std::time::{Duration, Instant};

use super::sync::{REAL_TIME, spin_loop, yield_now};
use super::{EventCount, Key, TimedOut};

/// How long a waiter polls with `spin_loop()` alone before it starts yielding: ~2 µs.
///
/// A spinning shared-memory round trip costs ~0.15 µs on the reference VM, so answers that come
/// this fast are caught without giving the core away; a `yield_now()` costs ~0.8 µs.
pub const PURE_SPIN: Duration = Duration::from_micros(2);

/// The default spin window, after which a waiter parks: 50 µs.
///
/// A futex wake costs tens of µs on the reference VM (CHIP_RUNTIME.md §6.5), so a partner that
/// answers within this window is cheaper to spin for; beyond it, spinning steals one of the two
/// cores from the simulated chips. The chip's default (`pto_chip::spec::DEFAULT_SPIN`, the
/// fallback of `PTO_SPIN_US`) is this constant.
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

/// What one [`SpinWindow`] step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a caller stops spinning once the window is over or timed out"]
pub enum SpinStep {
    /// Issued one `spin_loop()` hint; the window goes on.
    Spun,
    /// Called `yield_now()` once; the window goes on.
    Yielded,
    /// The window is over; nothing was issued. The caller goes on to park.
    Over,
    /// The deadline passed (seen at a clock read); nothing was issued.
    TimedOut,
}

impl SpinStep {
    /// Whether the caller keeps spinning: check its condition again, then step again.
    pub const fn is_spinning(self) -> bool {
        matches!(self, Self::Spun | Self::Yielded)
    }
}

/// The limit of a [`SpinWindow`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limit {
    /// A [`SpinPolicy`]'s window of time.
    Time(SpinPolicy),
    /// A number of `spin_loop()` steps, without reading the clock.
    Steps(u32),
}

/// The spinning half of a wait, one step at a time: the one spin loop of the workspace.
///
/// The caller owns the loop: check its condition; if it is false, [`step`](Self::step); keep
/// going while the step [`is_spinning`](SpinStep::is_spinning), then park (on an
/// [`EventCount`] through [`Waiter`], or on whatever the caller waits with, following the
/// steps of `wait/README.md`). A step spins or yields as [`SpinPolicy`] says: `spin_loop()`
/// for the policy's pure part, then alternately `spin_loop()` and `yield_now()`, until the
/// window has elapsed since the first step. A zero window, and every window under `cfg(loom)`,
/// is over at the first step.
///
/// The window reads the clock on its first step and then every
/// [`reading_clock_every`](Self::reading_clock_every) steps (by default every step). A loop
/// whose check costs less than a clock read (~45 ns on the reference VM) reads it less often,
/// at the price of overrunning the window by up to that many steps; the window and the
/// deadline are judged only when the clock is read. [`counted`](Self::counted) windows never
/// read it.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use pto_types::wait::{SpinPolicy, SpinWindow};
///
/// /// Spins until `flag` is set or the window is over; returns whether it was set.
/// fn spin_for(flag: &AtomicBool) -> bool {
///     let mut window = SpinWindow::new(SpinPolicy::DEFAULT).reading_clock_every(16);
///     loop {
///         if flag.load(Ordering::Acquire) {
///             return true;
///         }
///         if !window.step().is_spinning() {
///             return false; // the caller parks now
///         }
///     }
/// }
/// assert!(spin_for(&AtomicBool::new(true)));
/// ```
#[derive(Clone, Debug)]
pub struct SpinWindow {
    limit: Limit,
    /// Read the clock every this many steps (≥ 1).
    clock_every: u32,
    /// Steps taken in this window.
    steps: u32,
    /// The step that reads the clock next: a comparison per step, not a division by the
    /// runtime `clock_every`, since the executor's search steps this loop.
    next_read: u32,
    /// The first step's clock reading.
    started: Option<Instant>,
    /// Time since `started` at the last clock reading.
    elapsed: Duration,
    /// In the yield phase: whether the next step yields (else it spins).
    yield_next: bool,
}

impl SpinWindow {
    /// A window of `policy`, reading the clock at every step.
    pub const fn new(policy: SpinPolicy) -> Self {
        Self::with_limit(Limit::Time(policy))
    }

    /// A window of `steps` pure `spin_loop()` steps that never reads the clock: for a
    /// wait so short that one clock read would be a large part of it (a lock hold).
    pub const fn counted(steps: u32) -> Self {
        Self::with_limit(Limit::Steps(steps))
    }

    const fn with_limit(limit: Limit) -> Self {
        Self {
            limit,
            clock_every: 1,
            steps: 0,
            next_read: 1,
            started: None,
            elapsed: Duration::ZERO,
            yield_next: false,
        }
    }

    /// The same window, reading the clock only on its first step and every `steps`-th step
    /// after it (`0` counts as `1`).
    pub const fn reading_clock_every(self, steps: u32) -> Self {
        let clock_every = if steps == 0 { 1 } else { steps };
        Self {
            clock_every,
            next_read: clock_every,
            ..self
        }
    }

    /// One step without a deadline: spin, yield, or report the window [`Over`](SpinStep::Over).
    #[inline]
    pub fn step(&mut self) -> SpinStep {
        self.step_until(None)
    }

    /// One step: [`TimedOut`](SpinStep::TimedOut) if a clock read finds `deadline` passed,
    /// [`Over`](SpinStep::Over) once the window has elapsed, else one `spin_loop()` or
    /// `yield_now()`. [`counted`](Self::counted) windows ignore the deadline; so does every
    /// window under `cfg(loom)`.
    #[inline]
    pub fn step_until(&mut self, deadline: Option<Instant>) -> SpinStep {
        let policy = match self.limit {
            Limit::Steps(steps) => return self.counted_step(steps),
            Limit::Time(policy) if policy.parks_immediately() => return SpinStep::Over,
            Limit::Time(policy) => policy,
        };
        self.steps = self.steps.wrapping_add(1);
        let due = self.steps == self.next_read;
        if due {
            self.next_read = self.next_read.wrapping_add(self.clock_every);
        }
        if due || self.started.is_none() {
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return SpinStep::TimedOut;
            }
            self.elapsed = now - *self.started.get_or_insert(now);
        }
        if self.elapsed >= policy.spin {
            SpinStep::Over
        } else if self.elapsed < policy.pure_spin || !self.yield_next {
            self.yield_next = self.elapsed >= policy.pure_spin;
            spin_loop();
            SpinStep::Spun
        } else {
            self.yield_next = false;
            yield_now();
            SpinStep::Yielded
        }
    }

    #[inline]
    fn counted_step(&mut self, steps: u32) -> SpinStep {
        if !REAL_TIME || self.steps >= steps {
            return SpinStep::Over;
        }
        self.steps += 1;
        spin_loop();
        SpinStep::Spun
    }

    /// Starts a fresh window: call it after the loop made progress or parked.
    pub fn reset(&mut self) {
        *self = Self::with_limit(self.limit).reading_clock_every(self.clock_every);
    }
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
    /// The spinning state: running ⇄ spinning until the window is over.
    spin: SpinWindow,
    /// Taken once the spin window is over (W1); the next step parks with it.
    key: Option<Key>,
}

impl<'a> Waiter<'a> {
    /// A waiter on `ec` with a fresh spin window.
    pub fn new(ec: &'a EventCount, policy: SpinPolicy) -> Self {
        Self {
            ec,
            policy,
            spin: SpinWindow::new(policy),
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
        match self.spin.step_until(deadline) {
            SpinStep::Spun => WaitOutcome::Spun,
            SpinStep::Yielded => WaitOutcome::Yielded,
            SpinStep::TimedOut => WaitOutcome::TimedOut,
            SpinStep::Over => self.prepare(),
        }
    }

    /// Spinning → registered: take the key (W1) that the next step parks with.
    fn prepare(&mut self) -> WaitOutcome {
        self.key = Some(self.ec.prepare());
        WaitOutcome::Prepared
    }

    /// Starts a fresh spin window and drops any key: call it after the loop made progress.
    pub fn reset(&mut self) {
        self.spin.reset();
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

/// Takes something usually held for a few µs at most — a lock — by trying `try_take` for up
/// to `steps` pure `spin_loop()` rounds (no clock, no `yield_now()`), then `block`, which may
/// park. On a small host a parking lock costs a futex round trip and a context switch (tens of
/// µs on the reference VM) each time its holder is busy for a moment; spinning first turns
/// most of those waits into a few hundred ns. `try_take` should look before it writes (a load
/// of the lock word, then a try-lock), so that spinning waiters do not pull the holder's cache
/// line back and forth.
#[inline]
pub fn spin_then<T>(
    steps: u32,
    mut try_take: impl FnMut() -> Option<T>,
    block: impl FnOnce() -> T,
) -> T {
    let mut window = SpinWindow::counted(steps);
    loop {
        if let Some(taken) = try_take() {
            return taken;
        }
        if !window.step().is_spinning() {
            return block();
        }
    }
}
