//! The orchestrator-private allocator of one scope-depth ring: task window plus heap ring,
//! checked together and committed together (implements CHIP_RUNTIME.md §4.1–§4.2 and submit step
//! 4 of §3.2, fed by the watermark of §3.5 as §3.6 describes; failure data for §5.2–§5.3;
//! counters and peaks for the scope stats of §7).

use super::heap::{HeapPlacement, HeapRing, align_heap};
use super::peaks::{Peak, PeakStack};

/// A committed allocation: a task slot and its packed heap buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Allocation {
    /// Per-ring, per-run local task id; never wraps.
    pub(crate) id: u64,
    /// `id & (W − 1)` (as `TaskId::slot`).
    pub(crate) slot: usize,
    /// Buffer start, relative to the ring's heap base.
    pub(crate) offset: u64,
    /// Packed end, relative to the ring's heap base: `offset + align64(bytes)`; equal to
    /// `offset` for a zero-size request. Store it in the slot and feed it back to
    /// [`TaskRing::retire_to`].
    pub(crate) end: u64,
    /// Which row of the heap table placed the buffer (for traces and logs).
    pub(crate) placement: HeapPlacement,
}

/// Which resource refused an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocFailureKind {
    /// `W − 1` tasks are live. Checked first (FLOW_CONTROL_DEADLOCK, code 3).
    WindowFull,
    /// The window has room but the heap cannot place the request now (HEAP_RING_DEADLOCK, 2).
    HeapFull,
}

/// Why [`TaskRing::try_alloc`] refused, with what the error report of §5.3 needs. Nothing was
/// committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AllocFailure {
    pub(crate) kind: AllocFailureKind,
    /// The heap request exceeds the heap (`needed > H`): no retirement can ever satisfy it.
    /// Independent of `kind`: a request that is impossible for the heap is reported as
    /// HEAP_RING_DEADLOCK, detector Impossible, even while the window is also full (§5.2 tests
    /// `request > capacity` right after `fits`).
    pub(crate) impossible: bool,
    /// The heap request rounded up to 64 bytes.
    pub(crate) needed: u64,
    /// Live tasks, `next_id − last_alive`.
    pub(crate) live: u64,
    /// Task window `W`.
    pub(crate) window: u64,
    /// Heap bytes in use (as the allocator sees them).
    pub(crate) heap_used: u64,
    /// Heap capacity `H`.
    pub(crate) heap_capacity: u64,
}

impl AllocFailure {
    /// `recommended_min` of §5.3 for this failure: with `impossible`, the heap (code 2,
    /// Impossible) `align64(used + request)`; for a blocked heap (Structural or Backstop)
    /// `max(align64(used + request), H + align64(request))`; for a full window (code 3) the next
    /// power of two `≥ live + 2`.
    pub(crate) fn recommended_min(&self) -> u64 {
        let used_plus_request = align_heap(self.heap_used.saturating_add(self.needed));
        if self.impossible {
            return used_plus_request;
        }
        match self.kind {
            AllocFailureKind::HeapFull => {
                used_plus_request.max(self.heap_capacity.saturating_add(self.needed))
            }
            AllocFailureKind::WindowFull => (self.live + 2).next_power_of_two(),
        }
    }
}

/// Occupancy maxima of one ring: over the whole run ([`TaskRing::high_water`]) or over one scope
/// ([`TaskRing::end_scope_sample`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TaskRingPeaks {
    /// Most live tasks (`task_window_peak`).
    pub(crate) live: u64,
    /// Most heap bytes in use (`heap_peak`).
    pub(crate) heap_used: u64,
    /// Largest heap request, rounded up to 64 bytes (`heap_largest_alloc`).
    pub(crate) largest_alloc: u64,
}

impl Peak for TaskRingPeaks {
    fn max_with(self, other: TaskRingPeaks) -> TaskRingPeaks {
        TaskRingPeaks {
            live: self.live.max(other.live),
            heap_used: self.heap_used.max(other.heap_used),
            largest_alloc: self.largest_alloc.max(other.largest_alloc),
        }
    }
}

/// The monotonic counters a scope-stats sample records for a ring (§7). Each pair satisfies
/// `start ≤ end`, with `heap_end − heap_start ∈ [0, H]` and
/// `task_window_end − task_window_start ∈ [0, W − 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingCounters {
    /// `last_alive`.
    pub(crate) task_window_start: u64,
    /// `next_id`.
    pub(crate) task_window_end: u64,
    /// Cumulative bytes reclaimed, `lap·H + tail`.
    pub(crate) heap_start: u64,
    /// Cumulative bytes allocated, `lap·H + top`.
    pub(crate) heap_end: u64,
}

/// Task window and heap ring of one scope-depth ring, owned by the orchestrator.
///
/// Invariants (between calls):
/// 1. `last_alive ≤ next_id` and `next_id − last_alive ≤ W − 1`: the slot of `next_id` is
///    always free (§4.1).
/// 2. `last_alive` is the newest watermark passed to [`retire_to`](TaskRing::retire_to); it
///    never decreases.
/// 3. The heap invariants of `HeapRing` hold; every live buffer lies in `[0, H)` and no two
///    overlap, provided retirement is fed the packed ends this allocator returned.
/// 4. `high_water` and the scope peaks dominate every occupancy reached after an allocation.
#[derive(Clone, Debug)]
pub(crate) struct TaskRing {
    window: u64,
    next_id: u64,
    last_alive: u64,
    heap: HeapRing,
    high_water: TaskRingPeaks,
    scope_peaks: PeakStack<TaskRingPeaks>,
}

impl TaskRing {
    /// An empty ring with task window `window` (a power of two, at least 4) and `heap` bytes (a
    /// positive multiple of 64), as resolved per ring by `ResolvedSizing::task_window` and
    /// `ResolvedSizing::heap`.
    pub(crate) fn new(window: u32, heap: u64) -> TaskRing {
        assert!(
            window >= 4 && window.is_power_of_two(),
            "task window {window} must be a power of two of at least 4"
        );
        TaskRing {
            window: u64::from(window),
            next_id: 0,
            last_alive: 0,
            heap: HeapRing::new(heap),
            high_water: TaskRingPeaks::default(),
            scope_peaks: PeakStack::new(TaskRingPeaks::default()),
        }
    }

    /// Task window `W`.
    pub(crate) fn window(&self) -> u32 {
        self.window as u32
    }

    /// The next local id to be allocated.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The watermark as last fed to [`retire_to`](TaskRing::retire_to).
    #[cfg(test)]
    pub(crate) fn last_alive(&self) -> u64 {
        self.last_alive
    }

    /// Live tasks, `next_id − last_alive`.
    pub(crate) fn active(&self) -> u64 {
        self.next_id - self.last_alive
    }

    /// The slot of local id `id`: `id & (W − 1)`.
    pub(crate) fn slot_of(&self, id: u64) -> usize {
        (id & (self.window - 1)) as usize
    }

    /// Heap `top` (next byte), relative to the ring's heap base.
    #[cfg(test)]
    pub(crate) fn heap_top(&self) -> u64 {
        self.heap.top()
    }

    /// Heap `tail` (oldest live byte), relative to the ring's heap base.
    #[cfg(test)]
    pub(crate) fn heap_tail(&self) -> u64 {
        self.heap.tail()
    }

    /// Heap bytes in use, wasted wrap region included.
    #[cfg(test)]
    pub(crate) fn heap_used(&self) -> u64 {
        self.heap.used()
    }

    /// The largest heap request that would succeed now (§4.2; for reports, not a fit test).
    #[cfg(test)]
    pub(crate) fn heap_available(&self) -> u64 {
        self.heap.available()
    }

    /// Allocates the next task id, its slot and a heap buffer of `bytes` (rounded up to 64):
    /// both resources are checked, then both committed; on failure nothing changes. The window
    /// is checked first: admitted iff `(next_id − last_alive) + 1 < W`.
    pub(crate) fn try_alloc(&mut self, bytes: u64) -> Result<Allocation, AllocFailure> {
        let needed = align_heap(bytes);
        let live = self.active();
        let failure = |kind| AllocFailure {
            kind,
            impossible: needed > self.heap.size(),
            needed,
            live,
            window: self.window,
            heap_used: self.heap.used(),
            heap_capacity: self.heap.size(),
        };
        if live + 1 >= self.window {
            return Err(failure(AllocFailureKind::WindowFull));
        }
        let Some(placement) = self.heap.place(needed) else {
            return Err(failure(AllocFailureKind::HeapFull));
        };

        let id = self.next_id;
        let offset = self.heap.commit(needed, placement, id);
        self.next_id += 1;

        let sample = TaskRingPeaks {
            live: live + 1,
            heap_used: self.heap.used(),
            largest_alloc: needed,
        };
        self.high_water = self.high_water.max_with(sample);
        self.scope_peaks.observe(sample);

        Ok(Allocation {
            id,
            slot: self.slot_of(id),
            offset,
            end: offset + needed,
            placement,
        })
    }

    /// Feeds an observed watermark (§3.6): tasks below `last_alive` are retired, their slots are
    /// free, and the heap tail becomes `prev_end`, the packed end of task `last_alive − 1` as
    /// returned in [`Allocation::end`], unless a rebase anchor is pending.
    ///
    /// A watermark that is not larger than the last one is ignored (so re-observing is
    /// harmless). Read `prev_end` from the slot of `last_alive − 1` before allocating again:
    /// the next allocation may reuse that slot.
    ///
    /// # Panics
    /// If `last_alive > next_id`, or `prev_end` is not a 64-aligned position in `[0, H]`.
    pub(crate) fn retire_to(&mut self, last_alive: u64, prev_end: u64) {
        if last_alive <= self.last_alive {
            return;
        }
        assert!(
            last_alive <= self.next_id,
            "watermark {last_alive} is past next_id {}",
            self.next_id
        );
        self.last_alive = last_alive;
        self.heap.retire(last_alive, prev_end);
    }

    /// The scope-stats counters of this ring now (§7 `task_window_*`, `heap_*`).
    pub(crate) fn counters(&self) -> RingCounters {
        RingCounters {
            task_window_start: self.last_alive,
            task_window_end: self.next_id,
            heap_start: self.heap.reclaimed_total(),
            heap_end: self.heap.allocated_total(),
        }
    }

    /// Occupancy maxima over the whole run.
    pub(crate) fn high_water(&self) -> TaskRingPeaks {
        self.high_water
    }

    /// Opens a peak sample for a scope on this ring; the peaks start at the current occupancy.
    /// Samples nest (ring 3 serves every depth ≥ 3).
    pub(crate) fn begin_scope_sample(&mut self) {
        self.scope_peaks.begin(TaskRingPeaks {
            live: self.active(),
            heap_used: self.heap.used(),
            largest_alloc: 0,
        });
    }

    /// Closes the innermost peak sample and returns its peaks; the enclosing sample inherits
    /// them. Must pair with [`begin_scope_sample`](TaskRing::begin_scope_sample).
    pub(crate) fn end_scope_sample(&mut self) -> TaskRingPeaks {
        self.scope_peaks.end()
    }

    /// Peak samples currently open.
    #[cfg(test)]
    pub(crate) fn open_scope_samples(&self) -> usize {
        self.scope_peaks.depth()
    }

    /// Whether a heap request of `bytes` would be placed now, ignoring the window.
    #[cfg(test)]
    pub(super) fn heap_fits(&self, bytes: u64) -> bool {
        self.heap.place(align_heap(bytes)).is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    /// Runs `script` on a `W = 16`, `H = 4096` ring and compares the transcript with `expect`
    /// (lines compared after trimming; blank lines ignored).
    ///
    /// Script lines: `alloc BYTES` and `retire L T` ("retire to L, tail T": watermark L, task
    /// L−1's packed end T). The transcript has one line per step and a final state line.
    #[track_caller]
    fn check(script: &str, expect: &str) {
        let mut ring = TaskRing::new(16, 4096);
        let mut actual = String::new();
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let num = |s: &str| -> u64 { s.parse().unwrap() };
            match words.as_slice() {
                ["alloc", bytes] => match ring.try_alloc(num(bytes)) {
                    Ok(a) => writeln!(
                        actual,
                        "{line}: id {} slot {} at [{}, {}) {}",
                        a.id, a.slot, a.offset, a.end, a.placement
                    ),
                    Err(f) => writeln!(
                        actual,
                        "{line}: {:?}{}",
                        f.kind,
                        if f.impossible { " impossible" } else { "" }
                    ),
                },
                ["retire", l, t] => {
                    ring.retire_to(num(l), num(t));
                    writeln!(
                        actual,
                        "{line}: tail {} used {}",
                        ring.heap_tail(),
                        ring.heap_used()
                    )
                }
                _ => panic!("bad script line {line:?}"),
            }
            .unwrap();
        }
        let c = ring.counters();
        writeln!(
            actual,
            "active {} top {} tail {} used {} available {} heap {}..{}",
            ring.active(),
            ring.heap_top(),
            ring.heap_tail(),
            ring.heap_used(),
            ring.heap_available(),
            c.heap_start,
            c.heap_end
        )
        .unwrap();
        let normalize = |s: &str| -> Vec<String> {
            s.lines()
                .map(|l| l.trim().to_owned())
                .filter(|l| !l.is_empty())
                .collect()
        };
        assert_eq!(normalize(&actual), normalize(expect), "\n{actual}");
    }

    #[test]
    fn a1_fresh_allocator() {
        check("", "active 0 top 0 tail 0 used 0 available 4096 heap 0..0");
    }

    #[test]
    fn a2_alloc_rounds_to_64() {
        check(
            "alloc 100",
            "alloc 100: id 0 slot 0 at [0, 128) end fit
             active 1 top 128 tail 0 used 128 available 3968 heap 0..128",
        );
    }

    #[test]
    fn a3_consecutive_allocs() {
        check(
            "alloc 1
             alloc 33
             alloc 64",
            "alloc 1: id 0 slot 0 at [0, 64) end fit
             alloc 33: id 1 slot 1 at [64, 128) end fit
             alloc 64: id 2 slot 2 at [128, 192) end fit
             active 3 top 192 tail 0 used 192 available 3904 heap 0..192",
        );
    }

    #[test]
    fn a4_zero_size_allocs_alias() {
        check(
            &"alloc 0\n".repeat(5),
            "alloc 0: id 0 slot 0 at [0, 0) zero-size
             alloc 0: id 1 slot 1 at [0, 0) zero-size
             alloc 0: id 2 slot 2 at [0, 0) zero-size
             alloc 0: id 3 slot 3 at [0, 0) zero-size
             alloc 0: id 4 slot 4 at [0, 0) zero-size
             active 5 top 0 tail 0 used 0 available 4096 heap 0..0",
        );
    }

    #[test]
    fn a5_top_equal_tail_is_empty() {
        check(
            "alloc 256
             retire 1 256
             alloc 0",
            "alloc 256: id 0 slot 0 at [0, 256) end fit
             retire 1 256: tail 256 used 0
             alloc 0: id 1 slot 1 at [256, 256) zero-size
             active 1 top 256 tail 256 used 0 available 4096 heap 256..256",
        );
    }

    #[test]
    fn a6_end_fit_uses_ge() {
        check(
            "alloc 4032
             alloc 64",
            "alloc 4032: id 0 slot 0 at [0, 4032) end fit
             alloc 64: id 1 slot 1 at [4032, 4096) end fit
             active 2 top 4096 tail 0 used 4096 available 0 heap 0..4096",
        );
    }

    #[test]
    fn a7_wrap_needs_strict_tail() {
        check(
            "alloc 4096
             retire 1 64
             alloc 64",
            "alloc 4096: id 0 slot 0 at [0, 4096) end fit
             retire 1 64: tail 64 used 4032
             alloc 64: HeapFull
             active 0 top 4096 tail 64 used 4032 available 0 heap 64..4096",
        );
    }

    #[test]
    fn a8_wrap_to_zero() {
        check(
            "alloc 4096
             retire 1 128
             alloc 64",
            "alloc 4096: id 0 slot 0 at [0, 4096) end fit
             retire 1 128: tail 128 used 3968
             alloc 64: id 1 slot 1 at [0, 64) wrap
             active 1 top 64 tail 128 used 4032 available 0 heap 128..4160",
        );
    }

    #[test]
    fn a9_rebase_when_empty() {
        check(
            "alloc 3000
             retire 1 3008
             alloc 3000",
            "alloc 3000: id 0 slot 0 at [0, 3008) end fit
             retire 1 3008: tail 3008 used 0
             alloc 3000: id 1 slot 1 at [0, 3008) rebase
             active 1 top 3008 tail 0 used 3008 available 1088 heap 4096..7104",
        );
    }

    #[test]
    fn a10_rebase_anchor_ignores_older_tails() {
        check(
            "alloc 3000
             retire 1 3008
             alloc 0
             alloc 3000
             retire 2 3008
             retire 3 3008",
            "alloc 3000: id 0 slot 0 at [0, 3008) end fit
             retire 1 3008: tail 3008 used 0
             alloc 0: id 1 slot 1 at [3008, 3008) zero-size
             alloc 3000: id 2 slot 2 at [0, 3008) rebase
             retire 2 3008: tail 0 used 3008
             retire 3 3008: tail 3008 used 0
             active 0 top 3008 tail 3008 used 0 available 4096 heap 7104..7104",
        );
    }

    #[test]
    fn a11_before_tail_needs_strict_gap() {
        check(
            "alloc 4032
             retire 1 4032
             alloc 128
             alloc 3904",
            "alloc 4032: id 0 slot 0 at [0, 4032) end fit
             retire 1 4032: tail 4032 used 0
             alloc 128: id 1 slot 1 at [0, 128) wrap
             alloc 3904: HeapFull
             active 1 top 128 tail 4032 used 192 available 3840 heap 4032..4224",
        );
    }

    #[test]
    fn a12_available_takes_the_larger_side() {
        check(
            "alloc 3008
             retire 1 1024
             alloc 0",
            "alloc 3008: id 0 slot 0 at [0, 3008) end fit
             retire 1 1024: tail 1024 used 1984
             alloc 0: id 1 slot 1 at [3008, 3008) zero-size
             active 1 top 3008 tail 1024 used 1984 available 1088 heap 1024..3008",
        );
    }

    #[test]
    fn a13_full_heap_without_retirement() {
        check(
            "alloc 4096
             alloc 64",
            "alloc 4096: id 0 slot 0 at [0, 4096) end fit
             alloc 64: HeapFull
             active 1 top 4096 tail 0 used 4096 available 0 heap 0..4096",
        );
    }

    #[test]
    fn a14_window_saturates_at_w_minus_1() {
        let expect: String = (0..15)
            .map(|id| format!("alloc 0: id {id} slot {id} at [0, 0) zero-size\n"))
            .chain([
                "alloc 0: WindowFull\n".to_owned(),
                "active 15 top 0 tail 0 used 0 available 4096 heap 0..0".to_owned(),
            ])
            .collect();
        check(&"alloc 0\n".repeat(16), &expect);
    }

    #[test]
    fn slots_wrap_with_the_window() {
        let mut ring = TaskRing::new(16, 4096);
        for id in 0..40u64 {
            let a = ring.try_alloc(0).unwrap();
            assert_eq!((a.id, a.slot), (id, (id % 16) as usize));
            ring.retire_to(id + 1, a.end);
        }
        assert_eq!(ring.counters().task_window_start, 40);
    }

    #[test]
    fn oversize_request_is_impossible_even_when_the_window_is_full() {
        check(
            "alloc 4097
             alloc 4096",
            "alloc 4097: HeapFull impossible
             alloc 4096: id 0 slot 0 at [0, 4096) end fit
             active 1 top 4096 tail 0 used 4096 available 0 heap 0..4096",
        );
        let mut ring = TaskRing::new(4, 4096);
        for _ in 0..3 {
            ring.try_alloc(0).unwrap();
        }
        let failure = ring.try_alloc(5000).unwrap_err();
        assert_eq!(failure.kind, AllocFailureKind::WindowFull);
        assert!(failure.impossible);
        assert_eq!(failure.needed, 5056);
        assert_eq!(failure.recommended_min(), 5056);
        assert!(ring.try_alloc(u64::MAX).unwrap_err().impossible);
    }

    #[test]
    fn recommended_min_follows_the_error_report() {
        // §5.4 code 2: 32 KiB into a 1024 B heap, Impossible.
        let failure = TaskRing::new(16, 1024).try_alloc(32768).unwrap_err();
        assert_eq!(
            (failure.kind, failure.impossible),
            (AllocFailureKind::HeapFull, true)
        );
        assert_eq!(failure.recommended_min(), 32768);

        // E3: used 3072 of 4096 (after a wrap), request 1024: 5120.
        let mut ring = TaskRing::new(16, 4096);
        let first = ring.try_alloc(4096).unwrap();
        ring.retire_to(1, first.end);
        assert_eq!(ring.try_alloc(1024).unwrap().placement, HeapPlacement::Wrap);
        ring.try_alloc(2048).unwrap();
        assert_eq!((ring.heap_used(), ring.heap_available()), (3072, 960));
        let failure = ring.try_alloc(1024).unwrap_err();
        assert_eq!(
            (failure.kind, failure.impossible),
            (AllocFailureKind::HeapFull, false)
        );
        assert_eq!(failure.recommended_min(), 5120);

        // Code 3: a full window of 4 recommends 8.
        let mut ring = TaskRing::new(4, 4096);
        for _ in 0..3 {
            ring.try_alloc(0).unwrap();
        }
        let failure = ring.try_alloc(0).unwrap_err();
        assert_eq!(
            (failure.kind, failure.live),
            (AllocFailureKind::WindowFull, 3)
        );
        assert_eq!(failure.recommended_min(), 8);
    }

    #[test]
    fn st2_heap_counters_count_the_wrap() {
        let mut ring = TaskRing::new(16, 4096);
        let first = ring.try_alloc(4096).unwrap();
        ring.retire_to(1, first.end);
        ring.try_alloc(64).unwrap();
        let c = ring.counters();
        assert_eq!((c.heap_start, c.heap_end), (4096, 4160));
        assert_eq!((c.task_window_start, c.task_window_end), (1, 2));
    }

    #[test]
    fn stale_watermarks_are_ignored() {
        let mut ring = TaskRing::new(16, 4096);
        let a = ring.try_alloc(128).unwrap();
        ring.try_alloc(128).unwrap();
        ring.retire_to(1, a.end);
        ring.retire_to(1, 4096);
        ring.retire_to(0, 4096);
        assert_eq!((ring.last_alive(), ring.heap_tail()), (1, 128));
    }

    #[test]
    fn scope_peaks_nest_on_one_ring() {
        let mut ring = TaskRing::new(16, 4096);
        ring.begin_scope_sample(); // outer scope (say depth 3)
        let a = ring.try_alloc(1000).unwrap(); // 1024
        ring.begin_scope_sample(); // inner scope (depth 4), same ring
        ring.try_alloc(2000).unwrap(); // 2048
        ring.try_alloc(0).unwrap();
        let inner = ring.end_scope_sample();
        assert_eq!(
            inner,
            TaskRingPeaks {
                live: 3,
                heap_used: 3072,
                largest_alloc: 2048
            }
        );
        ring.retire_to(1, a.end);
        ring.try_alloc(64).unwrap();
        let outer = ring.end_scope_sample();
        assert_eq!(
            outer,
            TaskRingPeaks {
                live: 3,
                heap_used: 3072,
                largest_alloc: 2048
            }
        );
        assert_eq!(ring.open_scope_samples(), 0);

        // A later scope starts from the occupancy at its begin, not from history.
        ring.begin_scope_sample();
        assert_eq!(
            ring.end_scope_sample(),
            TaskRingPeaks {
                live: 3,
                heap_used: 2112,
                largest_alloc: 0
            }
        );
        assert_eq!(
            ring.high_water(),
            TaskRingPeaks {
                live: 3,
                heap_used: 3072,
                largest_alloc: 2048
            }
        );
    }
}
