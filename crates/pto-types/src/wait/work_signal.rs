//! The wake-up protocol of a pool of workers that search for work and park when they find none
//! (a chip's executors): [`WorkSignal`] and [`Search`].
//!
//! Whoever makes work takeable calls [`WorkSignal::signal`]: it moves the epoch, which every
//! searching worker watches, and with `wake` it wakes one parked worker, but only when no worker
//! is searching (one that searches will see the epoch move and take the work, so a wake would
//! cost a system call for nothing). A worker that finds nothing parks with
//! [`Search::park`]: it stops counting itself as searching, takes a key (W1), re-checks for news
//! (W2) and only then parks.
//!
//! The epoch and the searching count share one word (epoch above the low 16 bits, count
//! below), so that a signal is one read-modify-write that also reads the count. No lost
//! wake-up, from the modification order of that one word alone: if the signal's RMW comes
//! before the worker's decrement, the worker's re-check (a later load of the same word) sees
//! the moved epoch and it does not park; if the worker's decrement comes first, the signal
//! reads a count without it, so (when the count is zero) it notifies. That notify either finds
//! the worker's key registered and wakes it, or came before the key was taken, so the worker's
//! re-check after taking it (which happens after the notify, hence after the signal) sees the
//! moved epoch. If another worker is still counted, that one is responsible by the
//! same argument. A `signal` without `wake` is for work that a worker running right now will
//! come back for; it never needs a wake.
//!
//! The argument never uses the `SeqCst` total order across two locations, so loom (which
//! weakens `SeqCst` to `AcqRel`) checks it faithfully: see `loom_tests.rs`, two workers and a
//! producer.

use std::time::Instant;

use super::EventCount;
use super::sync::{AtomicU64, Ordering};

/// Low bits of [`WorkSignal`]'s word that count searching workers.
const SEARCHING_BITS: u32 = 16;
const SEARCHING_MASK: u64 = (1 << SEARCHING_BITS) - 1;
const EPOCH_ONE: u64 = 1 << SEARCHING_BITS;

/// The shared half: the epoch and the count of searching workers in one word, and the event
/// count parked workers wait on.
pub struct WorkSignal {
    word: AtomicU64,
    parked: EventCount,
}

impl Default for WorkSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkSignal {
    pub fn new() -> Self {
        WorkSignal {
            word: AtomicU64::new(0),
            parked: EventCount::new(),
        }
    }

    /// Something became takeable: searching workers see the epoch move, and with `wake` one
    /// parked worker is woken unless a worker is searching (module docs).
    pub fn signal(&self, wake: bool) {
        let before = self.word.fetch_add(EPOCH_ONE, Ordering::SeqCst);
        if wake && before & SEARCHING_MASK == 0 {
            self.parked.notify_one();
        }
    }

    /// Moves the epoch and wakes every parked worker (a shutdown, a new run).
    pub fn signal_all(&self) {
        self.word.fetch_add(EPOCH_ONE, Ordering::SeqCst);
        self.parked.notify_all();
    }

    /// The epoch: it moves on every signal. A thread that takes work outside a search (a
    /// waiting orchestrator that helps) compares it to skip looks that cannot find anything.
    pub fn epoch(&self) -> u64 {
        self.word.load(Ordering::SeqCst) >> SEARCHING_BITS
    }

    /// Starts a search: the caller counts as searching until the [`Search`] is dropped, except
    /// while it parks. The first worker to search is the one that spins.
    pub fn search(&self) -> Search<'_> {
        self.search_from(None)
    }

    /// [`WorkSignal::search`], resuming from the epoch an earlier search saw
    /// ([`Search::seen`]): without news since then, the first [`Search::news`] is false.
    pub fn search_from(&self, seen: Option<u64>) -> Search<'_> {
        let spins = self.word.fetch_add(1, Ordering::SeqCst) & SEARCHING_MASK == 0;
        Search {
            signal: self,
            spins,
            seen,
        }
    }

    /// Workers searching right now.
    pub fn searching(&self) -> u32 {
        (self.word.load(Ordering::SeqCst) & SEARCHING_MASK) as u32
    }

    /// The event count workers park on, for waits outside a search (a worker that rests).
    pub fn parked(&self) -> &EventCount {
        &self.parked
    }
}

/// One worker's search, from [`WorkSignal::search`] until it is dropped (when the worker found
/// work or stops).
pub struct Search<'a> {
    signal: &'a WorkSignal,
    spins: bool,
    /// The epoch when the worker last looked for work.
    seen: Option<u64>,
}

impl Search<'_> {
    /// Whether this worker is the one that spins before parking (the others park at once, so
    /// that idle workers take no CPU from the ones working).
    pub fn spins(&self) -> bool {
        self.spins
    }

    /// Whether work may have become takeable since the last [`Search::look`] (always, before
    /// the first).
    pub fn news(&self) -> bool {
        self.seen != Some(self.signal.epoch())
    }

    /// Call right before looking for work: a signal after this is news.
    pub fn look(&mut self) {
        self.seen = Some(self.signal.epoch());
    }

    /// The epoch of the last [`Search::look`], to resume from ([`WorkSignal::search_from`]).
    pub fn seen(&self) -> Option<u64> {
        self.seen
    }

    /// Parks until a signal (or `deadline`), unless there is news already or `other_news`
    /// (checked after the key is taken, like the epoch) says so; then searches again, and
    /// spins if no other worker does.
    pub fn park(&mut self, other_news: impl Fn() -> bool, deadline: Option<Instant>) {
        let signal = self.signal;
        signal.word.fetch_sub(1, Ordering::SeqCst);
        let key = signal.parked.prepare();
        // The re-check after the key (W2): it sees a signal whose read-modify-write came before
        // the one above, and one whose notify came before the key (module docs).
        if !self.news() && !other_news() {
            let _ = signal.parked.wait(key, deadline);
        }
        self.spins = signal.word.fetch_add(1, Ordering::SeqCst) & SEARCHING_MASK == 0;
    }
}

impl Search<'_> {
    /// The worker found work and goes to do it: it stops searching, and then, if `more` is
    /// `Some(wake)`, signals work it left behind. In that order: a signal sent while the finder
    /// still counts as searching wakes nobody (a searcher will see it), but this one will not
    /// search again until its work is done, so a parked worker would sleep through work it
    /// could run now.
    pub fn found(self, more: Option<bool>) {
        let signal = self.signal;
        drop(self);
        if let Some(wake) = more {
            signal.signal(wake);
        }
    }
}

impl Drop for Search<'_> {
    fn drop(&mut self) {
        self.signal.word.fetch_sub(1, Ordering::SeqCst);
    }
}
