//! Measurements of several runtimes taken in turns (`metg`): each runtime's sweep runs on a
//! thread of its own, and a measured run of one is followed by a measured run of the next one
//! still sweeping, round-robin. A sweep is adaptive (its next grain depends on its last
//! result), so the sweeps cannot share one list of grains; taking turns still puts the
//! runtimes' runs in the same seconds while they all sweep. A sweep that goes on longer
//! (rayon's goes to finer grains than pto's) finishes its last runs alone. One sweep after the
//! other let a slow stretch of the VM of a few seconds land on one runtime: pto's METG read
//! 2.96×, 0.46× and 0.48× the OpenMP peer's in three runs of one build within two minutes.
//!
//! Only one measured run is in progress at any time. The waiting sweep threads are parked
//! on a condition variable, and before each measured run the process is let go quiet
//! ([`settle`]): the threads of the runtime measured last may still be spinning. GCC libgomp's
//! idle team spins ~7.5 ms of CPU after a parallel region on the reference VM (its default
//! spin count); a run started in that time shared its two cores with it, and pto's METG read
//! twice the OpenMP peer's instead of ~1.3x.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Each look of [`settle`] at the process's CPU use lasts this long: longer than a scheduler
/// tick, because the CPU time of a thread running on another CPU reaches the process's clock
/// at that CPU's ticks (4 ms at HZ=250). With 1 ms looks, libgomp's spinning thread went
/// unseen, and pto's efficiency right after an OpenMP run read 0.29-0.43 against 0.46-0.55
/// alone; with 10 ms looks, 0.46-0.56 in both cases.
const SETTLE_STEP: Duration = Duration::from_millis(10);

/// [`settle`] gives up waiting after this long (a runtime that never goes quiet).
const SETTLE_MAX: Duration = Duration::from_millis(100);

/// Under this share of one core over a [`SETTLE_STEP`], the process is quiet.
const QUIET: f64 = 0.1;

/// Waits until the process uses under a tenth of a core over a 10 ms look (`QUIET`,
/// `SETTLE_STEP`), giving up after 100 ms (`SETTLE_MAX`): every thread of the runtimes not
/// being measured has gone idle. Returns how long it waited.
pub fn settle() -> Duration {
    settle_by(crate::idle::process_cpu_s)
}

/// [`settle`] with the process's CPU time (s) read by `cpu`.
fn settle_by(mut cpu: impl FnMut() -> f64) -> Duration {
    let started = Instant::now();
    loop {
        let (used, at) = (cpu(), Instant::now());
        std::thread::sleep(SETTLE_STEP);
        let busy = (cpu() - used).max(0.0) / at.elapsed().as_secs_f64();
        if busy < QUIET || started.elapsed() >= SETTLE_MAX {
            return started.elapsed();
        }
    }
}

/// The rotation. `live[i]`: sweep `i` has not finished; `turn`: the sweep whose run is next.
struct Turns {
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    turn: usize,
    live: Vec<bool>,
}

impl State {
    /// The next live sweep after `from`, cyclically (`from` itself if it is the only one).
    fn next_after(&self, from: usize) -> usize {
        let n = self.live.len();
        (1..=n)
            .map(|k| (from + k) % n)
            .find(|&i| self.live[i])
            .unwrap_or(from)
    }
}

impl Turns {
    /// A rotation of `sweeps` sweeps, sweep 0 first.
    fn new(sweeps: usize) -> Turns {
        Turns {
            state: Mutex::new(State {
                turn: 0,
                live: vec![true; sweeps],
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is two plain fields, each left consistent by every writer: a panic of
        // another sweep thread does not corrupt it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `measure` as sweep `me`'s next run, when its turn comes, and passes the turn on.
    /// The wait ends: the sweep whose turn it is is running a measurement (bounded by that
    /// runtime) or about to ask for its turn, and a sweep that ends leaves the rotation
    /// ([`Turns::leave`], also on error or panic through [`Seat`], which passes the turn on
    /// when `measure` panicked while holding it).
    fn take<T>(&self, me: usize, measure: impl FnOnce() -> T) -> T {
        let mut state = self.lock();
        while state.turn != me {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(state);
        settle();
        let out = measure();
        let mut state = self.lock();
        state.turn = state.next_after(me);
        drop(state);
        self.changed.notify_all();
        out
    }

    /// Sweep `me` is done: the rotation skips it from now on.
    fn leave(&self, me: usize) {
        let mut state = self.lock();
        state.live[me] = false;
        if state.turn == me {
            state.turn = state.next_after(me);
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Sweep `me`'s place in the rotation, given up when dropped.
    fn seat(&self, me: usize) -> Seat<'_> {
        Seat { turns: self, me }
    }
}

/// A sweep's place in the rotation of [`in_turns`]; dropping it (the sweep returned, failed or
/// panicked) lets the others go on without it.
pub struct Seat<'t> {
    turns: &'t Turns,
    me: usize,
}

impl Seat<'_> {
    /// Runs `measure` in this sweep's turn.
    pub fn take<T>(&self, measure: impl FnOnce() -> T) -> T {
        self.turns.take(self.me, measure)
    }
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        self.turns.leave(self.me);
    }
}

/// One sweep: it measures each run through its [`Seat`] and returns its result.
pub type SweepFn<'env, T> = Box<dyn FnOnce(&Seat<'_>) -> T + Send + 'env>;

/// Runs `sweeps` on threads of their own, taking turns for every measured run, and returns
/// their results in order. Each gets its [`Seat`]: a measured run is `seat.take(|| ...)`.
pub fn in_turns<'env, T: Send>(sweeps: Vec<SweepFn<'env, T>>) -> Vec<T> {
    let turns = Turns::new(sweeps.len());
    let turns = &turns;
    std::thread::scope(|s| {
        let handles: Vec<_> = sweeps
            .into_iter()
            .enumerate()
            .map(|(i, sweep)| {
                s.spawn(move || {
                    let seat = turns.seat(i);
                    sweep(&seat)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    type Sweep<'e> = SweepFn<'e, Result<usize, String>>;
    type Log = Arc<Mutex<Vec<usize>>>;

    /// A sweep of `runs` runs that logs each as its index, failing at run `fail_at`.
    fn logging(i: usize, runs: usize, fail_at: Option<usize>, log: &Log) -> Sweep<'static> {
        let log = Arc::clone(log);
        Box::new(move |seat| {
            for r in 0..runs {
                seat.take(|| log.lock().unwrap().push(i));
                if fail_at == Some(r) {
                    return Err(format!("sweep {i} failed"));
                }
            }
            Ok(runs)
        })
    }

    /// Runs `sweeps` in turns under a watchdog (a rotation that strands a sweep hangs), and
    /// returns their results (or the panic) and the log.
    fn run(
        sweeps: impl FnOnce(&Log) -> Vec<Sweep<'static>> + Send + 'static,
    ) -> (std::thread::Result<Vec<Result<usize, String>>>, Vec<usize>) {
        pto_testkit::with_timeout(60, move || {
            let log: Log = Arc::default();
            let sweeps = sweeps(&log);
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| in_turns(sweeps)));
            let log = log.lock().unwrap().clone();
            (out, log)
        })
    }

    /// A process CPU clock that runs at a full core for `busy` reads, then stands still; and
    /// how many times it was read.
    fn clock(busy: u32) -> (impl FnMut() -> f64, std::rc::Rc<std::cell::Cell<u32>>) {
        let reads = std::rc::Rc::new(std::cell::Cell::new(0u32));
        let (counted, mut t) = (std::rc::Rc::clone(&reads), 0.0);
        let read = move || {
            counted.set(counted.get() + 1);
            if counted.get() <= busy {
                t += 2.0 * SETTLE_STEP.as_secs_f64();
            }
            t
        };
        (read, reads)
    }

    #[test]
    fn settling_waits_for_the_process_to_go_quiet_and_not_past_its_limit() {
        // Busy over the first two looks (reads 1-4), quiet over the third (reads 5-6).
        let (read, reads) = clock(4);
        settle_by(read);
        assert_eq!(reads.get(), 6);
        let (read, reads) = clock(0);
        settle_by(read);
        assert_eq!(reads.get(), 2);
        let (read, _) = clock(u32::MAX);
        assert!(settle_by(read) >= SETTLE_MAX);
    }

    #[test]
    fn sweeps_take_turns_and_a_finished_one_leaves_the_rotation() {
        let (out, log) = run(|log| {
            vec![
                logging(0, 3, None, log),
                logging(1, 1, None, log),
                logging(2, 2, None, log),
            ]
        });
        assert_eq!(out.unwrap(), vec![Ok(3), Ok(1), Ok(2)]);
        assert_eq!(log, vec![0, 1, 2, 0, 2, 0]);
    }

    #[test]
    fn a_failed_sweep_leaves_and_the_others_finish() {
        let (out, log) = run(|log| {
            vec![
                logging(0, 2, None, log),
                logging(1, 4, Some(0), log),
                logging(2, 2, None, log),
            ]
        });
        let out = out.unwrap();
        assert_eq!(out[1], Err("sweep 1 failed".to_string()));
        assert_eq!((out[0].clone(), out[2].clone()), (Ok(2), Ok(2)));
        assert_eq!(log, vec![0, 1, 2, 0, 2]);
    }

    #[test]
    fn a_sweep_that_never_measures_is_skipped() {
        let (out, log) = run(|log| {
            let idle: Sweep<'static> = Box::new(|_: &Seat<'_>| Ok(0));
            vec![idle, logging(1, 2, None, log), logging(2, 2, None, log)]
        });
        assert_eq!(out.unwrap(), vec![Ok(0), Ok(2), Ok(2)]);
        assert_eq!(log, vec![1, 2, 1, 2]);
    }

    /// Sweep 0 runs 3 times beside a sweep that panics in (`during`) or after its one run: the
    /// panic reaches the caller, and sweep 0 gets every turn it needs.
    fn beside_a_panic(during: bool) {
        let (out, log) = run(move |log| {
            let panicking: Sweep<'static> = Box::new(move |seat| {
                seat.take(|| assert!(!during, "a run of sweep 1 panicked"));
                panic!("sweep 1 panicked after its run");
            });
            vec![logging(0, 3, None, log), panicking]
        });
        assert!(out.is_err());
        assert_eq!(log, vec![0, 0, 0]);
    }

    #[test]
    fn a_panic_between_runs_leaves_the_rotation_and_reaches_the_caller() {
        beside_a_panic(false);
    }

    #[test]
    fn a_panic_during_a_run_passes_the_turn_on() {
        // Sweep 1 panics while it holds the turn; sweep 0, which still has runs, must get it.
        beside_a_panic(true);
    }
}
