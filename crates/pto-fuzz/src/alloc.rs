//! The allocation probe: a global allocator that forwards to the system allocator and, while a
//! thread has armed it, records the largest single request that thread made. A decoder that
//! sizes a buffer from a length field it did not check shows up as a request far larger than
//! its input.
//!
//! A binary (or test) opts in with `#[global_allocator] static A: pto_fuzz::Probe =
//! pto_fuzz::Probe;`; without it the probe reads 0 and the check is skipped.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Armed: the largest request since arming (`Some`); not armed: `None`.
    static LARGEST: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The probing allocator.
pub struct Probe;

fn note(size: usize) {
    // `try_with`: the thread-local may already be gone while a thread exits.
    let _ = LARGEST.try_with(|l| {
        if let Some(m) = l.get() {
            l.set(Some(m.max(size)));
        }
    });
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the bookkeeping touches only a const-initialised thread-local `Cell`,
// which never allocates.
unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `layout` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout` (every allocation above does).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as in `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` with the probe armed on this thread; returns its result and the largest single
/// allocation it requested (0 when the probe is not the global allocator).
pub fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.with(|l| l.set(Some(0)));
    let r = f();
    let largest = LARGEST.with(|l| l.replace(None)).unwrap_or(0);
    (r, largest)
}
