//! Handing work to whoever holds a lock, instead of waiting for it (`README.md`, "Handoff").
//!
//! A thread that finds a lock busy leaves its item here and goes on; the thread that holds the
//! lock takes the item before or after it unlocks. Three rules make sure no item is stranded
//! with nobody to take it (a fourth, HO4 below, lets an offerer leave items for later):
//!
//! - **HO1** an offerer queues its item, then raises `waiting` with a read-modify-write, and
//!   only then tries the lock ([`Handoff::offer`]); if it gets the lock it takes the queue.
//! - **HO2** every holder, after it unlocks, reads `waiting` with a read-modify-write; if it is
//!   raised it tries the lock again and takes the queue ([`Handoff::after_unlock`]), and so on
//!   until `waiting` is down or the lock is busy (then its holder does the same). With a single
//!   offerer, its own unlocks may skip HO2: no offer can have failed against its holds.
//! - **HO3** a taker lowers `waiting` (a read-modify-write) before it empties the queue
//!   ([`Handoff::take`]), so an item queued after the take raises it again.
//!
//! Why nothing is stranded. Every access to `waiting` is a read-modify-write, so the offerer's
//! raise and a holder's HO2 read are ordered in that one word's modification order. Say the
//! offerer's try found the lock held by H. If H's HO2 read comes after the raise, it sees
//! `waiting` raised (only a taker lowers it, and a taker took the item). If it came before, the
//! raise read from it (directly or through other read-modify-writes), so H's unlock happens
//! before the offerer's try, which therefore cannot have seen H holding the lock. Then H tries
//! the lock; if that fails, the next holder is in the same position. The argument uses only
//! acquire/release and one word's modification order, which is what loom models faithfully;
//! `loom_tests.rs` checks it with an offerer and one or two holders. Every take happens under
//! the lock, so items leave the queue in the order they were offered.
//!
//! An offerer may also **leave** an item (HO4, [`Handoff::leave`]): queue it without raising
//! `waiting`, so that holders' HO2 passes it by and the offerer can publish several at once
//! later. Such an item raises `left` instead, and the caller vouches that a *looker* will take
//! it: a thread that, after it stops counting itself in some count `n` (a read-modify-write),
//! reads `left` ([`Handoff::has_left`]) and takes the queue under the lock when it is raised.
//! The offerer reads `n` with a read-modify-write after it raised `left`; unless `n` says every
//! looker still counts, it raises the item like an offer ([`Handoff::raise`]). Why that
//! suffices: both accesses to `n` are read-modify-writes, so one reads from the other. If the
//! offerer's comes first, it saw the looker counted, and the looker's read-modify-write reads
//! from it (directly or through others), which orders the raise of `left` before the looker's
//! read of `left`: it sees it raised (only a taker lowers it, and a taker took the item). If
//! the looker's comes first, the offerer sees it gone and raises (a looker that reads `left`
//! down and counts itself again is in the same position at its next stop). Acquire/release
//! and modification orders again, which loom checks (`loom_tests.rs`). With sequentially
//! consistent accesses a plain load of `n` would do in the C++ model, which forbids store
//! buffering among them, but loom treats such a load as an acquire load and finds the
//! stranded item; the read-modify-write holds in both.

use std::collections::VecDeque;

use crossbeam_utils::CachePadded;

use super::sync::{AtomicBool, Mutex, Ordering};

/// Items offered to the holder of some lock (HO1-HO3). The lock is the caller's: every method
/// that needs it takes a `try_lock` closure.
pub struct Handoff<T> {
    /// Raised after an item is queued (HO1), lowered by a taker (HO3). Its own cache line:
    /// every holder reads it after every unlock, while the offerer writes the queue below.
    waiting: CachePadded<AtomicBool>,
    /// Raised after an item is left (HO4), lowered by a taker (HO3).
    left: AtomicBool,
    items: Mutex<VecDeque<T>>,
}

impl<T> Default for Handoff<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Handoff<T> {
    pub fn new() -> Self {
        Handoff {
            waiting: CachePadded::new(AtomicBool::new(false)),
            left: AtomicBool::new(false),
            items: Mutex::new(VecDeque::new()),
        }
    }

    /// HO1: queues `item`, then tries the lock. `Some(guard)`: the caller holds the lock and
    /// must [`take`](Handoff::take) the queue (its own item included) before it unlocks;
    /// `None`: the lock's holder will.
    pub fn offer<G>(&self, item: T, try_lock: impl FnOnce() -> Option<G>) -> Option<G> {
        self.lock_items().push_back(item);
        self.waiting.swap(true, Ordering::SeqCst);
        try_lock()
    }

    /// HO4: queues `item` without raising `waiting`, raises `left`, then asks `looker_counts`
    /// whether every looker still counts itself; it must read the count with a
    /// read-modify-write (module doc). `true`: the item is left for a looker or a later
    /// [`Handoff::raise`]; `false`: the caller must [`raise`](Handoff::raise) it now.
    pub fn leave(&self, item: T, looker_counts: impl FnOnce() -> bool) -> bool {
        self.lock_items().push_back(item);
        self.left.swap(true, Ordering::SeqCst);
        looker_counts()
    }

    /// HO1 for the items queued so far (left ones too): raises `waiting`, then tries the lock.
    /// `Some(guard)`: the caller holds the lock and must [`take`](Handoff::take) the queue.
    pub fn raise<G>(&self, try_lock: impl FnOnce() -> Option<G>) -> Option<G> {
        self.waiting.swap(true, Ordering::SeqCst);
        try_lock()
    }

    /// Whether items were left (HO4) and not taken since: a looker that stopped counting
    /// itself takes the queue when this is `true`.
    pub fn has_left(&self) -> bool {
        self.left.load(Ordering::SeqCst)
    }

    /// HO2: to be called after every unlock of the lock. `Some(guard)`: items wait and the
    /// caller got the lock again; it must take them, unlock and call this again.
    pub fn after_unlock<G>(&self, try_lock: impl FnOnce() -> Option<G>) -> Option<G> {
        if self.waiting.fetch_or(false, Ordering::SeqCst) {
            try_lock()
        } else {
            None
        }
    }

    /// Whether an item may be waiting (a hint, for a holder deciding to take early).
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    /// HO3, under the lock: moves every queued item, oldest first, to the back of `out`.
    pub fn take(&self, out: &mut VecDeque<T>) {
        self.waiting.swap(false, Ordering::SeqCst);
        self.left.swap(false, Ordering::SeqCst);
        let mut items = self.lock_items();
        if out.is_empty() {
            // The usual case: no copy, and the queue keeps `out`'s buffer for the next items.
            std::mem::swap(&mut *items, out);
        } else {
            out.extend(items.drain(..));
        }
    }

    fn lock_items(&self) -> impl std::ops::DerefMut<Target = VecDeque<T>> + '_ {
        // A panic while the queue is locked cannot leave it half-changed (push and drain are
        // whole operations), so a poisoned lock is still a good queue.
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }
}
