//! What the mailbox and doorbell protocols need of memory they share with another process:
//! atomic words with futex waits (S3) and plain bytes moved by copy (S4). [`Segment`] is the
//! one production implementation; `loom_tests.rs` implements the same surface over loom's
//! atomics, cells and condition variables, so the protocol code of [`super::mailbox`] and
//! [`super::doorbell`] is the code loom model-checks, not a copy of it.

use std::fmt::Debug;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::segment::{Segment, futex_wait, futex_wake};

/// Memory shared with another process, as the protocols use it.
pub(crate) trait SharedMem: Send + Sync + Debug {
    type Word: SharedWord;

    /// Bytes in the memory.
    fn len(&self) -> usize;

    /// The atomic word at `offset` (S3): a word the layout declares atomic.
    fn word(&self, offset: usize) -> &Self::Word;

    /// Copies `dst.len()` bytes from `offset` (S4).
    fn read(&self, offset: usize, dst: &mut [u8]);

    /// Copies `src` to `offset` (S4).
    fn write(&self, offset: usize, src: &[u8]);
}

/// One atomic word of shared memory. Every access is `SeqCst`; the wake-up arguments (M6, the
/// doorbell) do not lean on the total order across two words, which loom does not model: the
/// registration of a parked side and the other side's look at it are read-modify-writes
/// ([`SharedWord::seq_swap`], [`SharedWord::seq_read_latest`]), so whichever comes second in
/// the word's modification order synchronizes with the first. Every write of a registration
/// word is a swap (registering and deregistering alike), so that word's modification order is
/// the order of its read-modify-writes, the one thing the argument (and loom) reason about.
pub(crate) trait SharedWord {
    fn seq_load(&self) -> u32;
    fn seq_store(&self, v: u32);
    fn seq_fetch_add(&self, v: u32) -> u32;
    fn seq_swap(&self, v: u32) -> u32;
    /// The latest value in the word's modification order, read by a read-modify-write that
    /// writes it back (a plain load may read an older one, unless ordered by a total order).
    fn seq_read_latest(&self) -> u32 {
        self.seq_fetch_add(0)
    }
    /// `from → to`; the value found on failure.
    fn seq_compare_exchange(&self, from: u32, to: u32) -> Result<u32, u32>;
    /// Parks while the word holds `expected`, at most `timeout`; spurious returns are allowed.
    fn futex_wait(&self, expected: u32, timeout: Option<Duration>);
    /// Wakes up to `n` threads parked on the word.
    fn futex_wake(&self, n: u32);
}

impl SharedWord for AtomicU32 {
    fn seq_load(&self) -> u32 {
        self.load(SeqCst)
    }

    fn seq_store(&self, v: u32) {
        self.store(v, SeqCst);
    }

    fn seq_fetch_add(&self, v: u32) -> u32 {
        self.fetch_add(v, SeqCst)
    }

    fn seq_swap(&self, v: u32) -> u32 {
        self.swap(v, SeqCst)
    }

    fn seq_compare_exchange(&self, from: u32, to: u32) -> Result<u32, u32> {
        self.compare_exchange(from, to, SeqCst, SeqCst)
    }

    fn futex_wait(&self, expected: u32, timeout: Option<Duration>) {
        futex_wait(self, expected, timeout);
    }

    fn futex_wake(&self, n: u32) {
        futex_wake(self, n);
    }
}

impl SharedMem for Segment {
    type Word = AtomicU32;

    fn len(&self) -> usize {
        Segment::len(self)
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        Segment::word(self, offset)
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        Segment::read(self, offset, dst);
    }

    fn write(&self, offset: usize, src: &[u8]) {
        Segment::write(self, offset, src);
    }
}
