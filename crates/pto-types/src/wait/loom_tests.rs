//! Loom model checks of the wait protocol (CHIP_RUNTIME.md §6.5, NODE_RUNTIME.md §3.4).
//!
//! Built only with `--cfg loom`, where the `sync` shim swaps in loom's atomics, mutex and
//! condition variable, so these tests explore the interleavings of the real [`EventCount`] and
//! [`Waiter`] code. Under loom there is no spinning and no deadline (see the shim), so every
//! wait goes through W1–W5 and parks; a lost wake-up shows up as a loom deadlock. Run them with
//! the command in `wait/README.md` (`LOOM_MAX_PREEMPTIONS=2`).

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

use super::{EventCount, Handoff, SpinPolicy, WaitOutcome, Waiter, WorkSignal, wait_until};

/// Bound the search like crossbeam's and tokio's loom CI: two preemptions per execution,
/// unless `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// [`model`] with at least three preemptions: the handoff models need three to reach a direct
/// add that overtakes an item still queued (a few seconds each).
fn model_3(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(0).max(3));
    builder.check(f);
}

/// Raw protocol: W1 prepare, W2 re-check, W3–W5 wait; the producer publishes, then N1–N2.
#[test]
fn loom_wait_prepare_recheck_wait_never_loses_the_notify() {
    model(|| {
        let ec = Arc::new(EventCount::new());
        let flag = Arc::new(AtomicBool::new(false));
        let producer = {
            let (ec, flag) = (ec.clone(), flag.clone());
            thread::spawn(move || {
                flag.store(true, Ordering::Release);
                ec.notify_one();
            })
        };
        loop {
            if flag.load(Ordering::Acquire) {
                break;
            }
            let key = ec.prepare();
            if flag.load(Ordering::Acquire) {
                break;
            }
            ec.wait(key, None).expect("no deadline");
        }
        producer.join().unwrap();
        assert_eq!(ec.registered_waiters(), 0);
    });
}

/// `wait_until` (spin skipped under loom) against a producer using `notify_one`.
#[test]
fn loom_wait_until_wakes_on_notify_one() {
    model(|| {
        let ec = Arc::new(EventCount::new());
        let flag = Arc::new(AtomicBool::new(false));
        let producer = {
            let (ec, flag) = (ec.clone(), flag.clone());
            thread::spawn(move || {
                flag.store(true, Ordering::Release);
                ec.notify_one();
            })
        };
        let got = wait_until(&ec, SpinPolicy::DEFAULT, None, || {
            flag.load(Ordering::Acquire).then_some(42)
        });
        assert_eq!(got, Ok(42));
        producer.join().unwrap();
    });
}

/// Two waiters for the same flag, one `notify_all`: both must wake.
#[test]
fn loom_wait_notify_all_wakes_two_waiters() {
    model(|| {
        let ec = Arc::new(EventCount::new());
        let flag = Arc::new(AtomicBool::new(false));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (ec, flag) = (ec.clone(), flag.clone());
                thread::spawn(move || {
                    wait_until(&ec, SpinPolicy::PARK_IMMEDIATELY, None, || {
                        flag.load(Ordering::Acquire).then_some(())
                    })
                })
            })
            .collect();
        flag.store(true, Ordering::Release);
        ec.notify_all();
        for waiter in waiters {
            assert_eq!(waiter.join().unwrap(), Ok(()));
        }
        assert_eq!(ec.registered_waiters(), 0);
    });
}

/// Two interchangeable consumers, two tokens each followed by `notify_one`: both tokens are
/// taken, whichever consumer each wake-up reaches.
#[test]
fn loom_wait_notify_one_hands_out_two_tokens() {
    model(|| {
        let ec = Arc::new(EventCount::new());
        let tokens = Arc::new(AtomicUsize::new(0));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (ec, tokens) = (ec.clone(), tokens.clone());
                thread::spawn(move || {
                    wait_until(&ec, SpinPolicy::PARK_IMMEDIATELY, None, || {
                        // A CAS loop, not a single CAS: a lost CAS race is not an empty queue.
                        // (With one CAS, loom finds the test's own lost token: the re-check
                        // fails on contention and the consumer parks with a token left.)
                        tokens
                            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                            .ok()
                            .map(drop)
                    })
                })
            })
            .collect();
        for _ in 0..2 {
            tokens.fetch_add(1, Ordering::Release);
            ec.notify_one();
        }
        for consumer in consumers {
            assert_eq!(consumer.join().unwrap(), Ok(()));
        }
        assert_eq!(tokens.load(Ordering::Relaxed), 0);
    });
}

/// One round trip through two event counts: ping waits on `ecs[0]`, pong on `ecs[1]`.
#[test]
fn loom_wait_ping_pong_through_two_event_counts() {
    model(|| {
        let ecs = Arc::new([EventCount::new(), EventCount::new()]);
        let turn = Arc::new(AtomicUsize::new(0));
        let pong = {
            let (ecs, turn) = (ecs.clone(), turn.clone());
            thread::spawn(move || {
                wait_until(&ecs[1], SpinPolicy::DEFAULT, None, || {
                    (turn.load(Ordering::Acquire) == 1).then_some(())
                })
                .unwrap();
                turn.store(2, Ordering::Release);
                ecs[0].notify_one();
            })
        };
        turn.store(1, Ordering::Release);
        ecs[1].notify_one();
        wait_until(&ecs[0], SpinPolicy::DEFAULT, None, || {
            (turn.load(Ordering::Acquire) == 2).then_some(())
        })
        .unwrap();
        pong.join().unwrap();
    });
}

/// A step-at-a-time [`Waiter`] loop that watches two flags (work and fatal) on one event count.
#[test]
fn loom_wait_waiter_loop_sees_fatal_flag() {
    model(|| {
        let ec = Arc::new(EventCount::new());
        let fatal = Arc::new(AtomicBool::new(false));
        let killer = {
            let (ec, fatal) = (ec.clone(), fatal.clone());
            thread::spawn(move || {
                fatal.store(true, Ordering::Release);
                ec.notify_all();
            })
        };
        let mut waiter = Waiter::new(&ec, SpinPolicy::DEFAULT);
        let mut parks = 0;
        while !fatal.load(Ordering::Acquire) {
            match waiter.wait(None) {
                WaitOutcome::Prepared => {}
                WaitOutcome::Notified => parks += 1,
                other => panic!("{other:?} under loom (no spinning, no deadline)"),
            }
        }
        assert!(parks <= 1);
        killer.join().unwrap();
    });
}

/// One worker of the `WorkSignal` models, shaped like a chip's executor: it searches for an
/// item (watching the epoch, parking through `Search::park`); once it holds one, it runs it,
/// and then takes the next item directly, as the executor's finish takes the next block in the
/// same lock hold, searching again only when there is none. An item may make one more item
/// ready: that is signalled without a wake, since this worker comes back for work itself.
fn work_signal_worker(
    signal: &WorkSignal,
    items: &loom::sync::Mutex<Vec<bool>>,
    taken: &AtomicUsize,
    done: &EventCount,
    stop: &AtomicBool,
    total: usize,
) {
    let mut seen = None;
    let mut next = None;
    loop {
        let item = match next.take() {
            Some(item) => item,
            None => {
                let mut search = signal.search_from(seen);
                let found = loop {
                    if stop.load(Ordering::SeqCst) {
                        break None;
                    }
                    if search.news() {
                        search.look();
                        if let Some(item) = items.lock().unwrap().pop() {
                            break Some(item);
                        }
                    }
                    search.park(|| stop.load(Ordering::SeqCst), None);
                };
                seen = search.seen();
                match found {
                    Some(item) => item,
                    None => return,
                }
            }
        };
        if item {
            items.lock().unwrap().push(false);
            signal.signal(false);
        }
        if taken.fetch_add(1, Ordering::SeqCst) + 1 == total {
            done.notify_all();
        }
        next = items.lock().unwrap().pop();
    }
}

/// `WorkSignal` (the chip executors' search and park): `workers` workers and a producer that
/// publishes two items with `signal(true)`, one of which makes a third ready (`signal(false)`).
/// Every item is taken: a worker that parks while an item waits, with nobody left to take it,
/// is a loom deadlock.
fn work_signal_model(workers: usize) {
    model(move || {
        let signal = Arc::new(WorkSignal::new());
        let items = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let taken = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(EventCount::new());
        let stop = Arc::new(AtomicBool::new(false));
        let total = 3;
        let workers: Vec<_> = (0..workers)
            .map(|_| {
                let (signal, items, taken, done, stop) = (
                    signal.clone(),
                    items.clone(),
                    taken.clone(),
                    done.clone(),
                    stop.clone(),
                );
                thread::spawn(move || {
                    work_signal_worker(&signal, &items, &taken, &done, &stop, total)
                })
            })
            .collect();
        for follow_up in [true, false] {
            items.lock().unwrap().push(follow_up);
            signal.signal(true);
        }
        wait_until(&done, SpinPolicy::PARK_IMMEDIATELY, None, || {
            (taken.load(Ordering::SeqCst) == total).then_some(())
        })
        .expect("no deadline");
        stop.store(true, Ordering::SeqCst);
        signal.signal_all();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(signal.searching(), 0);
    });
}

#[test]
fn loom_work_signal_one_worker_never_misses_an_item() {
    work_signal_model(1);
}

#[test]
fn loom_work_signal_two_workers_never_strand_an_item() {
    work_signal_model(2);
}

/// A worker that takes work and leaves more behind must not strand it while it runs what it
/// took (`Search::found`: stop searching, then signal). Two items are published before either
/// worker looks; the first item's run cannot end until the second was taken (the chip's
/// write-after-read test: a slow read waits out an overwrite that needs the other executor).
/// The items arrive in one push with one signal, which wakes at most one parked worker.
/// Signalling while still counted as searching wakes nobody: a loom deadlock.
#[test]
fn loom_work_signal_a_taker_never_strands_work_it_waits_for() {
    model(|| {
        let signal = Arc::new(WorkSignal::new());
        let items = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let second_taken = Arc::new(AtomicBool::new(false));
        let taken_ec = Arc::new(EventCount::new());
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (signal, items, second_taken, taken_ec) = (
                    signal.clone(),
                    items.clone(),
                    second_taken.clone(),
                    taken_ec.clone(),
                );
                thread::spawn(move || {
                    let mut search = signal.search();
                    let (item, more) = loop {
                        if search.news() {
                            search.look();
                            let mut queue = items.lock().unwrap();
                            if let Some(item) = queue.pop() {
                                break (item, !queue.is_empty());
                            }
                        }
                        search.park(|| false, None);
                    };
                    search.found(more.then_some(true));
                    if item == "second" {
                        second_taken.store(true, Ordering::SeqCst);
                        taken_ec.notify_all();
                    } else {
                        wait_until(&taken_ec, SpinPolicy::PARK_IMMEDIATELY, None, || {
                            second_taken.load(Ordering::SeqCst).then_some(())
                        })
                        .expect("no deadline");
                    }
                })
            })
            .collect();
        // Both published in one hold (popped from the back: the waiting item first), one
        // signal: it wakes one parked worker at most.
        items.lock().unwrap().extend(["second", "first"]);
        signal.signal(true);
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(signal.searching(), 0);
    });
}

/// A chip's waiting orchestrator as a part-time worker (pto-chip `engine/orchestrator/help.rs`,
/// rules H2 and H3). While it is not parked, a finisher that makes work ready wakes no parked
/// worker (the orchestrator comes back for it); before the orchestrator parks it clears its
/// flag, then looks at the queue under the lock and signals with a wake what it finds. Here
/// the finisher is a gang thread (it never takes work itself) and the orchestrator parks for
/// good after stepping away, so only the parked worker can take the item: with the look
/// before the clear, loom finds the finisher reading the flag still set after the look and a
/// deadlock.
#[test]
fn loom_orchestrator_stepping_away_never_strands_work() {
    model(|| {
        let signal = Arc::new(WorkSignal::new());
        let items = Arc::new(loom::sync::Mutex::new(0u32));
        let helps = Arc::new(AtomicBool::new(true));
        let worker = {
            let (signal, items) = (signal.clone(), items.clone());
            thread::spawn(move || {
                let mut search = signal.search();
                loop {
                    if search.news() {
                        search.look();
                        let mut queue = items.lock().unwrap();
                        if *queue > 0 {
                            *queue -= 1;
                            break;
                        }
                    }
                    search.park(|| false, None);
                }
                search.found(None);
            })
        };
        let finisher = {
            let (signal, items, helps) = (signal.clone(), items.clone(), helps.clone());
            thread::spawn(move || {
                let wake = {
                    let mut queue = items.lock().unwrap();
                    *queue += 1;
                    !helps.load(Ordering::SeqCst)
                };
                signal.signal(wake);
            })
        };
        // The orchestrator steps away: clear, then look under the lock.
        helps.store(false, Ordering::SeqCst);
        let found = *items.lock().unwrap() > 0;
        if found {
            signal.signal(true);
        }
        finisher.join().unwrap();
        worker.join().unwrap();
        assert_eq!(*items.lock().unwrap(), 0);
    });
}

/// The lock of the handoff models, built like parking_lot's raw mutex (a compare-exchange to
/// take it, a release store to give it back) out of loom atomics: loom's own `Mutex::try_lock`
/// is not a point its search preempts around, so with it the models never saw a busy lock.
/// `taken` is what holders take items into, in order; only a holder touches it.
struct ModelLock {
    locked: AtomicBool,
    taken: loom::sync::Mutex<Vec<u32>>,
}

struct Held<'a>(&'a ModelLock);

impl ModelLock {
    fn new() -> ModelLock {
        ModelLock {
            locked: AtomicBool::new(false),
            taken: loom::sync::Mutex::new(Vec::new()),
        }
    }

    fn try_lock(&self) -> Option<Held<'_>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Held(self))
    }
}

impl Held<'_> {
    fn push(&self, item: u32) {
        self.0.taken.lock().unwrap().push(item);
    }

    /// Under the lock: takes the queued items (HO3).
    fn take_items(&self, handoff: &Handoff<u32>) {
        let mut items = std::collections::VecDeque::new();
        handoff.take(&mut items);
        self.0.taken.lock().unwrap().extend(items);
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.locked.store(false, Ordering::Release);
    }
}

/// Unlocks, then HO2 until no item waits or the lock is busy.
fn unlock_and_serve(handoff: &Handoff<u32>, lock: &ModelLock, held: Held<'_>) {
    drop(held);
    while let Some(held) = handoff.after_unlock(|| lock.try_lock()) {
        held.take_items(handoff);
    }
}

/// An offerer of `count` items, as the chip's orchestrator publishes: it tries the lock first
/// and, holding it, takes what it handed off before (HO3) and then adds its item itself; only
/// when the lock is busy does it hand the item off (HO1), taking the queue if its try then
/// gets the lock. So the order check below also covers a direct add overtaking an item still
/// queued.
fn offerer(handoff: Arc<Handoff<u32>>, lock: Arc<ModelLock>, count: u32) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for item in 1..=count {
            let held = match lock.try_lock() {
                Some(held) => {
                    if handoff.is_waiting() {
                        held.take_items(&handoff);
                    }
                    held.push(item);
                    held
                }
                None => match handoff.offer(item, || lock.try_lock()) {
                    Some(held) => {
                        held.take_items(&handoff);
                        held
                    }
                    None => continue,
                },
            };
            // The only offerer skips HO2 after its own holds, as the chip's orchestrator does:
            // no offer can have failed against them.
            drop(held);
        }
    })
}

/// A holder (an executor): `holds` tries of the lock (a spinning lock would make loom's search
/// explode; what matters is that it holds the lock at times), each hold taking early when
/// items wait, as the chip's executors do, then unlocking by HO2.
fn holder(handoff: Arc<Handoff<u32>>, lock: Arc<ModelLock>, holds: u32) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for _ in 0..holds {
            let Some(held) = lock.try_lock() else {
                continue;
            };
            if handoff.is_waiting() {
                held.take_items(&handoff);
            }
            unlock_and_serve(&handoff, &lock, held);
        }
    })
}

/// One offerer of `items` items beside one holder per entry of `holds` (its number of tries):
/// once every thread is done, every item was taken, in order (a stranded item would be left
/// in the queue with nobody holding the lock).
fn check_handoff(items: u32, holds: &'static [u32]) {
    model_3(move || {
        let handoff = Arc::new(Handoff::new());
        let lock = Arc::new(ModelLock::new());
        let offering = offerer(handoff.clone(), lock.clone(), items);
        let holding: Vec<_> = holds
            .iter()
            .map(|&n| holder(handoff.clone(), lock.clone(), n))
            .collect();
        offering.join().unwrap();
        for h in holding {
            h.join().unwrap();
        }
        assert_eq!(*lock.taken.lock().unwrap(), (1..=items).collect::<Vec<_>>());
    });
}

/// HO1-HO3 with one holder.
#[test]
fn loom_handoff_strands_no_item_with_one_holder() {
    check_handoff(2, &[2]);
}

/// The same with two holders: a holder whose HO2 try fails leaves the items to the other.
#[test]
fn loom_handoff_strands_no_item_with_two_holders() {
    check_handoff(1, &[1, 1]);
}

/// HO4: the offerer leaves `items` items one by one while a looker (an executor) counts itself
/// active, checking the count after each (SC); seeing the looker gone, it raises the queue
/// like an offer (trying the lock, taking the queue when it gets it). The looker first makes
/// `holds` tries of the lock that end in HO2 (they must pass left items by, as an executor's
/// holds do while it has work), then stops counting itself and, seeing items left, takes the
/// lock (spinning: the offerer holds it only briefly) and the queue. Once both are done every
/// item was taken, in order: no left item is stranded with nobody to look.
fn check_leave(items: u32, holds: u32) {
    model_3(move || {
        let handoff = Arc::new(Handoff::new());
        let lock = Arc::new(ModelLock::new());
        let active = Arc::new(AtomicUsize::new(1));
        let looker = {
            let (handoff, lock, active) = (handoff.clone(), lock.clone(), active.clone());
            thread::spawn(move || {
                for _ in 0..holds {
                    if let Some(held) = lock.try_lock() {
                        if handoff.is_waiting() {
                            held.take_items(&handoff);
                        }
                        unlock_and_serve(&handoff, &lock, held);
                    }
                }
                active.fetch_sub(1, Ordering::SeqCst);
                if handoff.has_left() {
                    let held = loop {
                        match lock.try_lock() {
                            Some(held) => break held,
                            None => thread::yield_now(),
                        }
                    };
                    held.take_items(&handoff);
                    unlock_and_serve(&handoff, &lock, held);
                }
            })
        };
        for item in 1..=items {
            if handoff.leave(item, || active.fetch_add(0, Ordering::SeqCst) >= 1) {
                continue;
            }
            if let Some(held) = handoff.raise(|| lock.try_lock()) {
                held.take_items(&handoff);
                // The only offerer skips HO2 after its own holds (see `offerer`).
                drop(held);
            }
        }
        looker.join().unwrap();
        assert_eq!(*lock.taken.lock().unwrap(), (1..=items).collect::<Vec<_>>());
    });
}

/// HO4 with one item and a looker that stops at once.
#[test]
fn loom_left_item_is_taken_by_the_looker_or_raised() {
    check_leave(1, 0);
}

/// HO4 with two items and a looker that holds the lock once before it stops: its HO2 passes
/// left items by, and a raise after its stop still finds a taker.
#[test]
fn loom_left_items_survive_a_hold_that_passes_them_by() {
    check_leave(2, 1);
}

/// An executor of the publication model: first (when `holds`) one hold of the graph lock that
/// ends in HO2, publishing what was handed off meanwhile with a signal that wakes nobody, as
/// pto-chip's `RunShared::serve_inbox` does for a holder that searches right after (its
/// `Graph::signal_searching` counts it as coming back); then it searches and parks like
/// [`work_signal_worker`] until told to stop, taking one item per find.
fn publishing_executor(
    handoff: Arc<Handoff<u32>>,
    lock: Arc<ModelLock>,
    signal: Arc<WorkSignal>,
    taken: Arc<AtomicUsize>,
    done: Arc<EventCount>,
    stop: Arc<AtomicBool>,
    holds: bool,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        if let Some(held) = holds.then(|| lock.try_lock()).flatten() {
            drop(held);
            while let Some(held) = handoff.after_unlock(|| lock.try_lock()) {
                held.take_items(&handoff);
                drop(held);
                signal.signal(false);
            }
        }
        let mut search = signal.search();
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            if search.news() {
                search.look();
                let item = lock.taken.lock().unwrap().pop();
                if item.is_some() {
                    search.found(None);
                    taken.fetch_add(1, Ordering::SeqCst);
                    done.notify_all();
                    search = signal.search();
                    continue;
                }
            }
            search.park(|| stop.load(Ordering::SeqCst), None);
        }
    })
}

/// Publication and search together (issue 25): the orchestrator publishes its item itself,
/// with a wake, when the graph lock is free, or hands it to the lock's holder (HO1); the
/// holder is an executor that publishes handed items on unlock without waking anyone, because
/// it searches right after; a second executor is parked. Every item is taken: an item
/// stranded in the inbox, or a holder that published without a wake and then parked past its
/// own publication, is a loom deadlock.
#[test]
fn loom_publication_by_a_searching_holder_never_strands_work() {
    model_3(|| {
        let handoff = Arc::new(Handoff::new());
        let lock = Arc::new(ModelLock::new());
        let signal = Arc::new(WorkSignal::new());
        let taken = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(EventCount::new());
        let stop = Arc::new(AtomicBool::new(false));
        let executors: Vec<_> = [true, false]
            .into_iter()
            .map(|holds| {
                publishing_executor(
                    handoff.clone(),
                    lock.clone(),
                    signal.clone(),
                    taken.clone(),
                    done.clone(),
                    stop.clone(),
                    holds,
                )
            })
            .collect();
        // The orchestrator: one item, published directly with a wake (no executor runs a
        // block) or handed off; the offer's own try may get the lock after all (HO1).
        let published = match lock.try_lock() {
            Some(held) => {
                held.push(1);
                Some(held)
            }
            None => handoff.offer(1, || lock.try_lock()).inspect(|held| {
                held.take_items(&handoff);
            }),
        };
        if let Some(held) = published {
            drop(held);
            signal.signal(true);
        }
        wait_until(&done, SpinPolicy::PARK_IMMEDIATELY, None, || {
            (taken.load(Ordering::SeqCst) == 1).then_some(())
        })
        .expect("no deadline");
        stop.store(true, Ordering::SeqCst);
        signal.signal_all();
        for e in executors {
            e.join().unwrap();
        }
        assert!(lock.taken.lock().unwrap().is_empty());
    });
}

/// One block of a fused replay (`Countdown`): takes and runs nodes, and stops as soon as it
/// finds nothing ready (the harshest rule F2 allows: no spin at all). `ran[n]` counts the runs
/// of node `n`; a node must see every producer's run before its own.
fn countdown_block(
    countdown: &super::Countdown,
    succ: &[Vec<u32>],
    preds: &[Vec<u32>],
    ran: &[AtomicUsize],
) {
    let mut held = super::Cursor::new();
    loop {
        match countdown.take(&mut held) {
            super::Take::Node(n) => {
                for &p in &preds[n as usize] {
                    assert_eq!(ran[p as usize].load(Ordering::SeqCst), 1, "{p} before {n}");
                }
                ran[n as usize].fetch_add(1, Ordering::SeqCst);
                countdown.finish(n, &succ[n as usize], &mut held);
            }
            super::Take::Done | super::Take::Empty | super::Take::Storing => return,
        }
    }
}

/// F1, F2: two blocks run a DAG of four nodes (two roots, a join, and a node made ready by
/// both roots' successors) and stop whenever they find nothing; once both have stopped every
/// node ran exactly once, after its producers, in every interleaving.
#[test]
fn loom_countdown_blocks_that_stop_on_nothing_ready_strand_no_node() {
    model(|| {
        // 0 → 2, 1 → 2, 1 → 3, 2 → 3.
        let succ: Arc<Vec<Vec<u32>>> = Arc::new(vec![vec![2], vec![2, 3], vec![3], vec![]]);
        let preds: Arc<Vec<Vec<u32>>> = Arc::new(vec![vec![], vec![], vec![0, 1], vec![1, 2]]);
        let mut countdown = super::Countdown::new();
        countdown.arm(&[0, 0, 2, 2]);
        let countdown = Arc::new(countdown);
        let ran: Arc<Vec<AtomicUsize>> = Arc::new((0..4).map(|_| AtomicUsize::new(0)).collect());
        let other = {
            let (c, s, p, r) = (countdown.clone(), succ.clone(), preds.clone(), ran.clone());
            thread::spawn(move || countdown_block(&c, &s, &p, &r))
        };
        countdown_block(&countdown, &succ, &preds, &ran);
        other.join().unwrap();
        for (n, r) in ran.iter().enumerate() {
            assert_eq!(r.load(Ordering::SeqCst), 1, "node {n}");
        }
        let mut held = super::Cursor::new();
        assert_eq!(countdown.take(&mut held), super::Take::Done);
    });
}
