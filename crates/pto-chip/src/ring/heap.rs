//! The heap ring of one scope-depth ring: orchestrator-private byte offsets `top`/`tail` with
//! end fit, wrap and rebase (implements CHIP_RUNTIME.md §4.2, the heap part of the reclamation
//! in §3.6, and the cumulative `heap_start`/`heap_end` counters of §7).

use std::fmt;

/// Heap requests are rounded up to this many bytes (§4.2).
pub(crate) const HEAP_ALIGN: u64 = 64;

/// `bytes` rounded up to [`HEAP_ALIGN`]; a request too large to round saturates to `u64::MAX`,
/// which exceeds every heap and is therefore reported as impossible.
pub(crate) fn align_heap(bytes: u64) -> u64 {
    bytes
        .checked_next_multiple_of(HEAP_ALIGN)
        .unwrap_or(u64::MAX)
}

/// Which row of the §4.2 table placed a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeapPlacement {
    /// `n = 0`: the buffer is `top` itself, nothing changes (zero-size tasks alias).
    ZeroSize,
    /// `top ≥ tail` and `H − top ≥ n`: placed at `top`.
    EndFit,
    /// `top ≥ tail`, no end fit, `tail > n`: placed at 0; `[old top, H)` is wasted until the
    /// tail wraps.
    Wrap,
    /// `top == tail` (empty), no end fit and no wrap, `n ≤ H`: placed at 0, `tail := 0`, and the
    /// task becomes the rebase anchor.
    Rebase,
    /// `top < tail` and `tail − top > n`: placed at `top`, below the live bytes.
    BeforeTail,
}

impl fmt::Display for HeapPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeapPlacement::ZeroSize => "zero-size",
            HeapPlacement::EndFit => "end fit",
            HeapPlacement::Wrap => "wrap",
            HeapPlacement::Rebase => "rebase",
            HeapPlacement::BeforeTail => "before tail",
        })
    }
}

/// Heap ring state, written only by the orchestrator.
///
/// Invariants (between calls):
/// 1. `top` and `tail` are multiples of [`HEAP_ALIGN`] in `[0, size]`; live buffers never
///    straddle `size`.
/// 2. `top == tail` means empty. Strict inequalities in the fit tests keep a full ring from
///    reaching `top == tail`.
/// 3. Laps: `alloc_lap == reclaim_lap` iff `top ≥ tail`, else `alloc_lap == reclaim_lap + 1`.
///    Hence `allocated_total − reclaimed_total == used ∈ [0, size]`, and both totals are
///    monotonic.
/// 4. `anchor = Some(a)` ⇒ `tail == 0 < top`, and no wrap or rebase can happen until it clears
///    (a wrap needs `tail > n > 0`, a rebase needs `top == tail`).
#[derive(Clone, Debug)]
pub(super) struct HeapRing {
    size: u64,
    top: u64,
    tail: u64,
    /// Local id of the task that rebased; tail updates for watermarks `≤ anchor` are ignored
    /// because they describe buffers from before the rebase.
    anchor: Option<u64>,
    alloc_lap: u64,
    reclaim_lap: u64,
}

impl HeapRing {
    /// An empty heap ring of `size` bytes, a positive multiple of [`HEAP_ALIGN`].
    pub(super) fn new(size: u64) -> HeapRing {
        assert!(
            size > 0 && size.is_multiple_of(HEAP_ALIGN),
            "heap ring size {size} must be a positive multiple of {HEAP_ALIGN}"
        );
        HeapRing {
            size,
            top: 0,
            tail: 0,
            anchor: None,
            alloc_lap: 0,
            reclaim_lap: 0,
        }
    }

    pub(super) fn size(&self) -> u64 {
        self.size
    }

    #[cfg(test)]
    pub(super) fn top(&self) -> u64 {
        self.top
    }

    #[cfg(test)]
    pub(super) fn tail(&self) -> u64 {
        self.tail
    }

    /// Bytes between tail and top, including a wasted end region awaiting the tail's wrap.
    pub(super) fn used(&self) -> u64 {
        if self.top >= self.tail {
            self.top - self.tail
        } else {
            self.size - self.tail + self.top
        }
    }

    /// The largest request that would succeed now (§4.2; reporting only, never the fit test).
    #[cfg(test)]
    pub(super) fn available(&self) -> u64 {
        if self.top == self.tail {
            self.size
        } else if self.top > self.tail {
            (self.size - self.top).max(self.tail.saturating_sub(HEAP_ALIGN))
        } else {
            (self.tail - self.top).saturating_sub(HEAP_ALIGN)
        }
    }

    /// Cumulative bytes allocated, `alloc_lap·H + top` (§7 `heap_end`).
    pub(super) fn allocated_total(&self) -> u64 {
        self.alloc_lap * self.size + self.top
    }

    /// Cumulative bytes reclaimed, `reclaim_lap·H + tail` (§7 `heap_start`).
    pub(super) fn reclaimed_total(&self) -> u64 {
        self.reclaim_lap * self.size + self.tail
    }

    /// Where a request of `n` bytes (already rounded) would go now, without changing anything.
    /// Rows are tried in the table's order: end fit, wrap, rebase (upstream's order).
    pub(super) fn place(&self, n: u64) -> Option<HeapPlacement> {
        debug_assert!(n.is_multiple_of(HEAP_ALIGN));
        if n == 0 {
            return Some(HeapPlacement::ZeroSize);
        }
        if self.top >= self.tail {
            if self.size - self.top >= n {
                return Some(HeapPlacement::EndFit);
            }
            if self.tail > n {
                return Some(HeapPlacement::Wrap);
            }
            if self.top == self.tail && n <= self.size {
                return Some(HeapPlacement::Rebase);
            }
            return None;
        }
        if self.tail - self.top > n {
            return Some(HeapPlacement::BeforeTail);
        }
        None
    }

    /// Commits a placement returned by [`place`](HeapRing::place) for the same `n`, for task
    /// `id`; returns the buffer's offset.
    pub(super) fn commit(&mut self, n: u64, placement: HeapPlacement, id: u64) -> u64 {
        let offset = match placement {
            HeapPlacement::ZeroSize => self.top,
            HeapPlacement::EndFit | HeapPlacement::BeforeTail => {
                let offset = self.top;
                self.top += n;
                offset
            }
            HeapPlacement::Wrap => {
                self.alloc_lap += 1;
                self.top = n;
                0
            }
            HeapPlacement::Rebase => {
                debug_assert!(self.anchor.is_none(), "rebase while an anchor is pending");
                self.alloc_lap += 1;
                self.reclaim_lap += 1;
                self.top = n;
                self.tail = 0;
                self.anchor = Some(id);
                0
            }
        };
        self.debug_check();
        offset
    }

    /// The watermark moved to `last_alive`, and task `last_alive − 1` has packed end `end`
    /// (§3.6): `tail := end`, unless a rebase anchor is pending.
    pub(super) fn retire(&mut self, last_alive: u64, end: u64) {
        if let Some(anchor) = self.anchor {
            if last_alive <= anchor {
                return;
            }
            self.anchor = None;
        }
        assert!(
            end <= self.size && end.is_multiple_of(HEAP_ALIGN),
            "packed end {end} is not a heap position of a {} B ring",
            self.size
        );
        // Tail positions only decrease when the tail crosses the end of the ring: every buffer
        // placed after a wrap ends strictly below the tail of its allocation time.
        if end < self.tail {
            self.reclaim_lap += 1;
        }
        self.tail = end;
        self.debug_check();
    }

    fn debug_check(&self) {
        debug_assert!(self.top <= self.size && self.tail <= self.size);
        debug_assert_eq!(
            self.alloc_lap,
            self.reclaim_lap + u64::from(self.top < self.tail),
            "heap laps out of step (top {}, tail {})",
            self.top,
            self.tail
        );
        debug_assert!(self.anchor.is_none() || (self.tail == 0 && self.top > 0));
    }
}
