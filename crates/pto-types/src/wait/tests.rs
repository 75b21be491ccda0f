//! Tests of the spin-then-park primitive (CHIP_RUNTIME.md §6.5, NODE_RUNTIME.md §3.4).
//!
//! Every test body runs under [`with_timeout`], so a lost wake-up fails the test in seconds
//! instead of hanging the suite. Timing assertions are one-sided and generous ("not before the
//! deadline", "within 2 s"): no performance assertions. The loom model checks are in
//! `loom_tests.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use pto_testkit::with_timeout;

use super::{
    DEFAULT_SPIN, EventCount, PURE_SPIN, SpinPolicy, SpinStep, SpinWindow, TimedOut, WaitOutcome,
    Waiter, WorkSignal, spin_then, wait_until,
};

/// Watchdog for every test: the budget of one test body.
const WATCHDOG_SECS: u64 = 10;

/// Generous upper bound on how late a timed-out wait may return.
const LATE_BOUND: Duration = Duration::from_secs(2);

/// Polls `cond` every millisecond (test-side only; the code under test never sleeps-polls).
fn eventually(mut cond: impl FnMut() -> bool) {
    while !cond() {
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn wait_spin_policy_limits_are_named() {
    assert_eq!(PURE_SPIN, Duration::from_micros(2));
    assert_eq!(DEFAULT_SPIN, Duration::from_micros(50));
    assert_eq!(SpinPolicy::default(), SpinPolicy::DEFAULT);
    assert_eq!(SpinPolicy::DEFAULT.spin(), DEFAULT_SPIN);
    assert_eq!(SpinPolicy::DEFAULT.pure_spin(), PURE_SPIN);
    assert!(!SpinPolicy::DEFAULT.parks_immediately());
    assert!(SpinPolicy::PARK_IMMEDIATELY.parks_immediately());
    assert_eq!(SpinPolicy::PARK_IMMEDIATELY.pure_spin(), Duration::ZERO);
    let short = SpinPolicy::new(Duration::from_micros(1));
    assert_eq!(short.pure_spin(), Duration::from_micros(1));
    let custom = SpinPolicy::new(Duration::from_micros(10)).with_pure_spin(Duration::from_secs(1));
    assert_eq!(custom.pure_spin(), Duration::from_micros(10));
    let custom = custom.with_pure_spin(Duration::from_micros(3));
    assert_eq!(custom.pure_spin(), Duration::from_micros(3));
    assert_eq!(custom.spin(), Duration::from_micros(10));
}

#[test]
fn wait_spin_window_spins_then_yields_then_is_over() {
    with_timeout(WATCHDOG_SECS, || {
        // A long window: pure spinning first, then spins and yields alternate.
        let mut window = SpinWindow::new(SpinPolicy::new(Duration::from_secs(3600)));
        let started = Instant::now();
        assert_eq!(
            window.step(),
            SpinStep::Spun,
            "the window starts with pure spinning"
        );
        while window.step() != SpinStep::Yielded {}
        assert!(started.elapsed() >= PURE_SPIN, "no yield before PURE_SPIN");
        assert_eq!(
            window.step(),
            SpinStep::Spun,
            "a yield is followed by a spin"
        );
        // A short window ends, and stays over until reset.
        let policy = SpinPolicy::new(Duration::from_micros(200));
        let mut window = SpinWindow::new(policy);
        let started = Instant::now();
        while window.step().is_spinning() {}
        assert!(started.elapsed() >= policy.spin());
        assert_eq!(
            window.step(),
            SpinStep::Over,
            "an elapsed window stays over"
        );
        window.reset();
        assert_eq!(window.step(), SpinStep::Spun, "reset starts a fresh window");
    });
}

#[test]
fn wait_spin_window_pure_policy_never_yields() {
    with_timeout(WATCHDOG_SECS, || {
        let spin = Duration::from_micros(100);
        let mut window = SpinWindow::new(SpinPolicy::new(spin).with_pure_spin(spin));
        let mut steps = 0;
        while window.step().is_spinning() {
            steps += 1;
        }
        assert!(steps > 0);
        let mut window = SpinWindow::new(SpinPolicy::new(spin).with_pure_spin(spin));
        loop {
            match window.step() {
                SpinStep::Spun => {}
                SpinStep::Over => break,
                other => panic!("a pure window never yields: {other:?}"),
            }
        }
    });
}

#[test]
fn wait_spin_window_zero_is_over_at_once() {
    let mut window = SpinWindow::new(SpinPolicy::PARK_IMMEDIATELY).reading_clock_every(64);
    assert_eq!(window.step(), SpinStep::Over);
    let past = Instant::now() - Duration::from_millis(1);
    assert_eq!(window.step_until(Some(past)), SpinStep::Over);
    assert!(!SpinStep::Over.is_spinning());
    assert!(!SpinStep::TimedOut.is_spinning());
    assert!(SpinStep::Spun.is_spinning() && SpinStep::Yielded.is_spinning());
}

#[test]
fn wait_spin_window_counted_spins_exactly_n_steps() {
    let mut window = SpinWindow::counted(5);
    let mut steps = 0;
    // A counted window never reads the clock, so a past deadline does not end it.
    let past = Instant::now() - Duration::from_millis(1);
    while window.step_until(Some(past)).is_spinning() {
        steps += 1;
    }
    assert_eq!(steps, 5);
    assert_eq!(window.step(), SpinStep::Over);
    window.reset();
    assert_eq!(window.step(), SpinStep::Spun);
    assert_eq!(SpinWindow::counted(0).step(), SpinStep::Over);
}

#[test]
fn wait_spin_window_deadline_is_seen_at_clock_reads() {
    with_timeout(WATCHDOG_SECS, || {
        let far = SpinPolicy::new(Duration::from_secs(3600));
        // Every step reads the clock: a passed deadline ends the first step.
        let past = Instant::now() - Duration::from_millis(1);
        let mut window = SpinWindow::new(far);
        assert_eq!(window.step_until(Some(past)), SpinStep::TimedOut);
        // Every 8th step: the first step reads, steps 2..=7 do not, step 8 does.
        let mut window = SpinWindow::new(far).reading_clock_every(8);
        let soon = Instant::now() + Duration::from_millis(5);
        assert_eq!(window.step_until(Some(soon)), SpinStep::Spun);
        thread::sleep(Duration::from_millis(10));
        for step in 2..8 {
            assert_eq!(
                window.step_until(Some(soon)),
                SpinStep::Spun,
                "step {step} reads no clock"
            );
        }
        assert_eq!(window.step_until(Some(soon)), SpinStep::TimedOut);
        // The window's end, too, is judged only at clock reads.
        let mut window =
            SpinWindow::new(SpinPolicy::new(Duration::from_millis(1))).reading_clock_every(4);
        assert_eq!(window.step(), SpinStep::Spun);
        thread::sleep(Duration::from_millis(5));
        for _ in 2..4 {
            assert!(window.step().is_spinning());
        }
        assert_eq!(window.step(), SpinStep::Over);
        // `0` reads at every step, like `1`.
        let mut window = SpinWindow::new(far).reading_clock_every(0);
        assert_eq!(window.step(), SpinStep::Spun);
        assert_eq!(window.step_until(Some(past)), SpinStep::TimedOut);
    });
}

#[test]
fn wait_returns_at_once_when_notified_since_prepare() {
    with_timeout(WATCHDOG_SECS, || {
        let ec = EventCount::new();
        let key = ec.prepare();
        ec.notify_one();
        assert_eq!(ec.wait(key, None), Ok(()));
        let key = ec.prepare();
        ec.notify_all();
        assert_eq!(ec.wait(key, None), Ok(()));
        assert_eq!(ec.registered_waiters(), 0);
        // A stale key returns at once even with a deadline in the past: no timeout is reported
        // when the epoch already moved.
        assert_eq!(ec.wait(key, Some(Instant::now())), Ok(()));
    });
}

#[test]
fn wait_event_count_deadline_expires_on_time() {
    with_timeout(WATCHDOG_SECS, || {
        let ec = EventCount::new();
        let timeout = Duration::from_millis(50);
        let start = Instant::now();
        let deadline = start + timeout;
        assert_eq!(ec.wait(ec.prepare(), Some(deadline)), Err(TimedOut));
        let now = Instant::now();
        assert!(now >= deadline, "returned {:?} early", deadline - now);
        assert!(
            now - start < timeout + LATE_BOUND,
            "returned {:?} late",
            now - deadline
        );
        assert_eq!(
            ec.registered_waiters(),
            0,
            "W5 must undo the W3 registration"
        );
        // A deadline already in the past times out without sleeping.
        assert_eq!(ec.wait(ec.prepare(), Some(start)), Err(TimedOut));
    });
}

#[test]
fn wait_until_deadline_expires_on_time_for_every_policy() {
    with_timeout(WATCHDOG_SECS, || {
        for policy in [
            SpinPolicy::DEFAULT,
            SpinPolicy::PARK_IMMEDIATELY,
            SpinPolicy::new(Duration::from_millis(1)),
        ] {
            let ec = EventCount::new();
            let timeout = Duration::from_millis(40);
            let start = Instant::now();
            let deadline = start + timeout;
            let mut polls = 0_u64;
            let result = wait_until(&ec, policy, Some(deadline), || {
                polls += 1;
                None::<()>
            });
            let now = Instant::now();
            assert_eq!(result, Err(TimedOut), "{policy:?}");
            assert!(
                now >= deadline,
                "{policy:?}: returned {:?} early",
                deadline - now
            );
            assert!(now - start < timeout + LATE_BOUND, "{policy:?}: late");
            assert!(
                polls >= 2,
                "{policy:?}: ready must be polled again at the deadline"
            );
            assert_eq!(ec.registered_waiters(), 0);
        }
    });
}

#[test]
fn wait_until_polls_once_more_at_the_deadline() {
    with_timeout(WATCHDOG_SECS, || {
        let ec = EventCount::new();
        let deadline = Instant::now() + Duration::from_millis(20);
        // Becomes ready exactly when the deadline passes, with no notify: the final poll sees it.
        let result = wait_until(&ec, SpinPolicy::PARK_IMMEDIATELY, Some(deadline), || {
            (Instant::now() >= deadline).then_some(7)
        });
        assert_eq!(result, Ok(7));
    });
}

#[test]
fn wait_until_ready_at_once_never_waits() {
    with_timeout(WATCHDOG_SECS, || {
        let ec = EventCount::new();
        let past = Some(Instant::now());
        assert_eq!(
            wait_until(&ec, SpinPolicy::PARK_IMMEDIATELY, past, || Some(1)),
            Ok(1)
        );
        assert_eq!(
            wait_until(&ec, SpinPolicy::DEFAULT, None, || Some(2)),
            Ok(2)
        );
        assert_eq!(ec.registered_waiters(), 0);
    });
}

#[test]
fn wait_until_ready_during_spin_window() {
    with_timeout(WATCHDOG_SECS, || {
        let ec = EventCount::new();
        let mut polls = 0;
        let policy = SpinPolicy::new(Duration::from_secs(5));
        // Ready on the 100th poll: found while spinning, without any notify.
        let result = wait_until(&ec, policy, None, || {
            polls += 1;
            (polls == 100).then_some(polls)
        });
        assert_eq!(result, Ok(100));
    });
}

#[test]
fn wait_parked_waiter_wakes_on_notify() {
    with_timeout(WATCHDOG_SECS, || {
        for policy in [SpinPolicy::DEFAULT, SpinPolicy::PARK_IMMEDIATELY] {
            let ec = Arc::new(EventCount::new());
            let flag = Arc::new(AtomicBool::new(false));
            let waiter = {
                let (ec, flag) = (ec.clone(), flag.clone());
                thread::spawn(move || {
                    wait_until(&ec, policy, None, || {
                        flag.load(Ordering::Acquire).then_some(())
                    })
                })
            };
            eventually(|| ec.registered_waiters() == 1);
            flag.store(true, Ordering::Release);
            ec.notify_one();
            assert_eq!(waiter.join().unwrap(), Ok(()));
            assert_eq!(ec.registered_waiters(), 0);
        }
    });
}

/// Passes a token `passes` times around a ring of `2 * pairs` threads, through two event counts:
/// thread `i` waits on `ecs[i % 2]` until the turn is `i`, then hands it on and notifies the
/// other event count. Waiters of one event count wait for different turns, hence `notify_all`.
fn token_ring(pairs: usize, passes: usize, policy: SpinPolicy) {
    let threads = 2 * pairs;
    let ecs = Arc::new([EventCount::new(), EventCount::new()]);
    let turn = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|me| {
            let (ecs, turn) = (ecs.clone(), turn.clone());
            thread::spawn(move || {
                let mut moves = 0_usize;
                loop {
                    let t = wait_until(&ecs[me % 2], policy, None, || {
                        let t = turn.load(Ordering::Acquire);
                        (t >= passes || t % threads == me).then_some(t)
                    })
                    .expect("no deadline");
                    if t >= passes {
                        return moves;
                    }
                    moves += 1;
                    turn.store(t + 1, Ordering::Release);
                    if t + 1 == passes {
                        ecs[0].notify_all();
                        ecs[1].notify_all();
                    } else {
                        ecs[(me + 1) % 2].notify_all();
                    }
                }
            })
        })
        .collect();
    let moves: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(moves, passes);
    assert_eq!(ecs[0].registered_waiters() + ecs[1].registered_waiters(), 0);
}

#[test]
fn wait_ping_pong_two_threads_10000() {
    with_timeout(WATCHDOG_SECS, || token_ring(1, 10_000, SpinPolicy::DEFAULT));
}

#[test]
fn wait_ping_pong_two_threads_10000_always_parking() {
    with_timeout(WATCHDOG_SECS, || {
        token_ring(1, 10_000, SpinPolicy::PARK_IMMEDIATELY)
    });
}

/// Six threads on the default policy: fewer passes, because with more runnable threads than cores
/// every `yield_now()` of the spin window may give a whole scheduler slice (~1 ms under EEVDF)
/// to another thread, so a pass can cost ~1 ms on a loaded 2-core host. The 10,000-pass
/// many-thread run below parks at once instead. No performance assertion either way.
#[test]
fn wait_token_ring_six_threads_1000_spinning() {
    with_timeout(WATCHDOG_SECS, || token_ring(3, 1_000, SpinPolicy::DEFAULT));
}

#[test]
fn wait_token_ring_six_threads_10000_always_parking() {
    with_timeout(WATCHDOG_SECS, || {
        token_ring(3, 10_000, SpinPolicy::PARK_IMMEDIATELY)
    });
}

/// Hands out `tokens` one at a time with `notify_one` to `consumers` interchangeable consumers.
fn notify_one_tokens(consumers: usize, tokens: u64, policy: SpinPolicy) {
    let ec = Arc::new(EventCount::new());
    let available = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let take = |available: &AtomicU64| {
        available
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    };
    let handles: Vec<_> = (0..consumers)
        .map(|_| {
            let (ec, available, closed) = (ec.clone(), available.clone(), closed.clone());
            thread::spawn(move || {
                let mut taken = 0_u64;
                loop {
                    let got = wait_until(&ec, policy, None, || {
                        if take(&available) {
                            Some(true)
                        } else if closed.load(Ordering::Acquire) {
                            // Every token was published before `closed`: one more try drains.
                            Some(take(&available))
                        } else {
                            None
                        }
                    })
                    .expect("no deadline");
                    if !got {
                        return taken;
                    }
                    taken += 1;
                }
            })
        })
        .collect();
    for _ in 0..tokens {
        available.fetch_add(1, Ordering::Release);
        ec.notify_one();
    }
    closed.store(true, Ordering::Release);
    ec.notify_all();
    let taken: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(taken, tokens);
}

#[test]
fn wait_notify_one_hands_out_10000_tokens() {
    with_timeout(WATCHDOG_SECS, || {
        notify_one_tokens(4, 10_000, SpinPolicy::DEFAULT)
    });
}

#[test]
fn wait_notify_one_hands_out_10000_tokens_always_parking() {
    with_timeout(WATCHDOG_SECS, || {
        notify_one_tokens(4, 10_000, SpinPolicy::PARK_IMMEDIATELY)
    });
}

#[test]
fn wait_no_lost_wakeup_when_notify_races_the_park() {
    with_timeout(WATCHDOG_SECS, || {
        for round in 0..2_000 {
            let ec = Arc::new(EventCount::new());
            let flag = Arc::new(AtomicBool::new(false));
            let waiter = {
                let (ec, flag) = (ec.clone(), flag.clone());
                thread::spawn(move || {
                    wait_until(&ec, SpinPolicy::PARK_IMMEDIATELY, None, || {
                        flag.load(Ordering::Acquire).then_some(())
                    })
                })
            };
            // Vary where the notify lands relative to W1..W4 of the waiter.
            for _ in 0..round % 64 {
                std::hint::spin_loop();
            }
            flag.store(true, Ordering::Release);
            ec.notify_one();
            assert_eq!(waiter.join().unwrap(), Ok(()));
        }
    });
}

#[test]
fn wait_waiter_steps_spin_then_yield_then_park() {
    with_timeout(WATCHDOG_SECS, || {
        let ec = EventCount::new();
        let mut waiter = Waiter::new(&ec, SpinPolicy::new(Duration::from_micros(200)));
        assert_eq!(
            waiter.wait(None),
            WaitOutcome::Spun,
            "the window starts with pure spinning"
        );
        let mut steps = 1;
        loop {
            match waiter.wait(None) {
                WaitOutcome::Spun | WaitOutcome::Yielded => steps += 1,
                WaitOutcome::Prepared => break,
                other => panic!("unexpected {other:?} inside the spin window"),
            }
        }
        assert!(steps > 1);
        assert!(waiter.is_parking());
        // Nobody notifies: the parked step times out on time.
        let deadline = Instant::now() + Duration::from_millis(20);
        assert_eq!(waiter.wait(Some(deadline)), WaitOutcome::TimedOut);
        assert!(Instant::now() >= deadline);
        waiter.reset();
        assert!(!waiter.is_parking());
        assert_eq!(
            waiter.wait(None),
            WaitOutcome::Spun,
            "reset starts a fresh spin window"
        );
        assert_eq!(waiter.policy().spin(), Duration::from_micros(200));
    });
}

#[test]
fn wait_waiter_park_immediately_prepares_then_parks() {
    with_timeout(WATCHDOG_SECS, || {
        let ec = Arc::new(EventCount::new());
        let mut waiter = Waiter::new(&ec, SpinPolicy::PARK_IMMEDIATELY);
        assert_eq!(waiter.wait(None), WaitOutcome::Prepared);
        let notifier = {
            let ec = ec.clone();
            thread::spawn(move || {
                eventually(|| ec.registered_waiters() == 1);
                ec.notify_all();
            })
        };
        assert_eq!(waiter.wait(None), WaitOutcome::Notified);
        notifier.join().unwrap();
        // The fresh key taken after the wake-up is current: the next park times out.
        let deadline = Instant::now() + Duration::from_millis(10);
        assert_eq!(waiter.wait(Some(deadline)), WaitOutcome::TimedOut);
    });
}

#[test]
fn wait_waiter_custom_loop_sees_fatal_flag() {
    with_timeout(WATCHDOG_SECS, || {
        let ec = Arc::new(EventCount::new());
        let fatal = Arc::new(AtomicBool::new(false));
        let work = Arc::new(AtomicBool::new(false));
        let worker = {
            let (ec, fatal, work) = (ec.clone(), fatal.clone(), work.clone());
            thread::spawn(move || {
                let mut waiter = Waiter::new(&ec, SpinPolicy::DEFAULT);
                let mut outcomes = Vec::new();
                loop {
                    if fatal.load(Ordering::Acquire) {
                        return outcomes;
                    }
                    if work.swap(false, Ordering::AcqRel) {
                        waiter.reset();
                        continue;
                    }
                    let outcome = waiter.wait(None);
                    assert!(!outcome.is_timed_out());
                    outcomes.push(outcome);
                }
            })
        };
        eventually(|| ec.registered_waiters() == 1);
        fatal.store(true, Ordering::Release);
        ec.notify_all();
        let outcomes = worker.join().unwrap();
        assert!(outcomes.contains(&WaitOutcome::Prepared));
        assert_eq!(outcomes.last(), Some(&WaitOutcome::Notified));
    });
}

#[test]
fn wait_debug_shows_epoch_and_waiters() {
    let ec = EventCount::default();
    ec.notify_one();
    ec.notify_all();
    assert_eq!(format!("{ec:?}"), "EventCount { epoch: 2, waiters: 0 }");
    assert_eq!(
        TimedOut.to_string(),
        "the deadline passed before the awaited condition held"
    );
}

/// CPU accounting of one thread, read from procfs without libc.
#[cfg(target_os = "linux")]
mod cpu {
    use std::time::Duration;

    /// `USER_HZ`: the unit of `utime`/`stime` in `/proc/.../stat`, 100 on every Linux ABI we run.
    const CLOCK_TICKS_PER_SEC: u64 = 100;

    /// `/proc/<pid>/task/<tid>/stat` of the calling thread, or `None` without procfs.
    pub(super) fn current_thread_stat_path() -> Option<String> {
        let link = std::fs::read_link("/proc/thread-self").ok()?;
        Some(format!("/proc/{}/stat", link.display()))
    }

    /// Scheduler state letter and `utime + stime` of the thread whose stat file is `path`.
    pub(super) fn state_and_cpu(path: &str) -> (char, Duration) {
        let stat = std::fs::read_to_string(path).expect("read thread stat");
        // The command name (field 2) may contain spaces and parentheses: skip past the last ')'.
        let rest = &stat[stat.rfind(')').expect("stat has a comm field") + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = fields[0].chars().next().expect("state field");
        // Fields 14 (utime) and 15 (stime), counted from 1 with field 3 at index 0.
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        (
            state,
            Duration::from_millis(ticks * 1000 / CLOCK_TICKS_PER_SEC),
        )
    }
}

/// A waiter parked with `deadline` uses (almost) no CPU over 300 ms of idleness.
#[cfg(target_os = "linux")]
fn parked_waiter_is_idle(deadline: Option<Instant>) {
    let ec = Arc::new(EventCount::new());
    let flag = Arc::new(AtomicBool::new(false));
    let (path_tx, path_rx) = mpsc::channel();
    let waiter = {
        let (ec, flag) = (ec.clone(), flag.clone());
        thread::spawn(move || {
            path_tx.send(cpu::current_thread_stat_path()).unwrap();
            wait_until(&ec, SpinPolicy::DEFAULT, deadline, || {
                flag.load(Ordering::Acquire).then_some(())
            })
        })
    };
    let path = path_rx.recv().unwrap();
    eventually(|| ec.registered_waiters() == 1);
    if let Some(path) = path {
        let (_, before) = cpu::state_and_cpu(&path);
        thread::sleep(Duration::from_millis(300));
        let (state, after) = cpu::state_and_cpu(&path);
        assert_eq!(state, 'S', "a parked waiter sleeps");
        let used = after - before;
        assert!(
            used < Duration::from_millis(50),
            "parked waiter used {used:?} of CPU in 300 ms"
        );
    } else {
        eprintln!("no /proc/thread-self: CPU check skipped");
    }
    flag.store(true, Ordering::Release);
    ec.notify_all();
    assert_eq!(waiter.join().unwrap(), Ok(()));
}

#[cfg(target_os = "linux")]
#[test]
fn wait_parked_waiter_costs_no_cpu() {
    with_timeout(WATCHDOG_SECS, || parked_waiter_is_idle(None));
}

#[cfg(target_os = "linux")]
#[test]
fn wait_parked_waiter_with_far_deadline_costs_no_cpu() {
    with_timeout(WATCHDOG_SECS, || {
        parked_waiter_is_idle(Some(Instant::now() + Duration::from_secs(60)));
    });
}

#[test]
fn wait_work_signal_counts_searchers_and_reports_news() {
    with_timeout(WATCHDOG_SECS, || {
        let signal = WorkSignal::new();
        let mut a = signal.search();
        assert!(a.spins(), "the first searcher spins");
        assert!(a.news(), "nothing seen yet");
        a.look();
        assert!(!a.news());
        let b = signal.search();
        assert!(!b.spins(), "a second searcher parks at once");
        assert_eq!(signal.searching(), 2);
        signal.signal(false);
        assert!(a.news(), "a signal is news");
        a.look();
        let seen = a.seen();
        drop(a);
        drop(b);
        assert_eq!(signal.searching(), 0);
        // A search resumed from what an earlier one saw has no news until the next signal.
        let c = signal.search_from(seen);
        assert!(!c.news());
        signal.signal(true);
        assert!(c.news());
    });
}

/// A worker that searches, looks once and then parks until news; returns once it has looked.
fn parked_worker(signal: &Arc<WorkSignal>) -> thread::JoinHandle<()> {
    let (tx, rx) = mpsc::channel();
    let signal = Arc::clone(signal);
    let worker = thread::spawn(move || {
        let mut s = signal.search();
        s.look();
        tx.send(()).unwrap();
        while !s.news() {
            s.park(|| false, None);
        }
    });
    rx.recv().unwrap();
    worker
}

#[test]
fn wait_work_signal_wakes_a_parked_worker_and_park_returns_on_news() {
    with_timeout(WATCHDOG_SECS, || {
        let signal = Arc::new(WorkSignal::new());
        // News before parking: park returns at once.
        let mut s = signal.search();
        s.look();
        signal.signal(false);
        s.park(|| false, None);
        assert_eq!(signal.searching(), 1, "searching again after park");
        drop(s);
        // A parked worker wakes on `signal(true)` when nobody searches.
        let worker = parked_worker(&signal);
        eventually(|| signal.searching() == 0 || worker.is_finished());
        signal.signal(true);
        worker.join().unwrap();
        assert_eq!(signal.searching(), 0);
    });
}

/// A worker that found work and leaves more behind must wake a parked peer: `Search::found`
/// stops searching before it signals. In the other order (the executors' before issue 25's
/// second session) nobody is notified and this test times out.
#[test]
fn wait_work_signal_a_finder_leaving_work_wakes_a_parked_peer() {
    with_timeout(WATCHDOG_SECS, || {
        let signal = Arc::new(WorkSignal::new());
        let peer = parked_worker(&signal);
        eventually(|| signal.searching() == 0);
        // The finder counts as searching while it takes: had it signalled now, the signal
        // would have found a searcher and notified nobody, and the peer would sleep on.
        let finder = signal.search();
        assert_eq!(signal.searching(), 1);
        finder.found(Some(true));
        peer.join().unwrap();
        assert_eq!(signal.searching(), 0);
    });
}

/// `spin_then` returns what the try yields as soon as it yields it, without blocking.
#[test]
fn spin_then_takes_what_a_try_finds_within_the_window() {
    let mut tries = 0;
    let got = spin_then(
        64,
        || {
            tries += 1;
            (tries == 5).then_some("tried")
        },
        || "blocked",
    );
    assert_eq!((got, tries), ("tried", 5));
}

/// Once its rounds are spent, `spin_then` blocks, once, after about `steps` failed tries.
#[test]
fn spin_then_blocks_once_the_rounds_are_spent() {
    let mut tries = 0u32;
    let mut blocked = 0;
    let got = spin_then(
        16,
        || {
            tries += 1;
            None::<&str>
        },
        || {
            blocked += 1;
            "blocked"
        },
    );
    assert_eq!(got, "blocked");
    assert_eq!(blocked, 1);
    assert!((16..=17).contains(&tries), "{tries} tries for 16 rounds");
}
