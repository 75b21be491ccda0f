//! A dep pool of one ring: `D` entries addressed by linear counters, used for both the dep-list
//! pool (fanout-list nodes) and the fanin spill pool (contiguous runs of spilled edges)
//! (implements CHIP_RUNTIME.md §4.3; reclaimed with `dep_mark`/`spill_mark` as §3.6 says;
//! feeds `dep_pool_start`/`_end`, `dep_pool_peak` and `spill_peak` of §7).

use super::peaks::PeakStack;

/// Linear position 0 is never allocated: it means "no mark" or "end of list" (§4.3). The
/// runtime relies on the rule (a mark of 0 is a no-op), the tests on the name.
#[cfg(test)]
pub(crate) const POOL_SENTINEL: u64 = 0;

/// Why [`DepPool::try_alloc_n`] refused (DEP_POOL_OVERFLOW, code 4). Nothing was committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolFull {
    /// Entries requested.
    pub(crate) requested: u64,
    /// Entries in use, `top − tail`.
    pub(crate) used: u64,
    /// Pool capacity `D`.
    pub(crate) capacity: u64,
    /// `requested > D`: no reclamation can ever satisfy it (detector Impossible).
    pub(crate) impossible: bool,
}

#[cfg(test)]
impl PoolFull {
    /// `recommended_min` of §5.3 for code 4: `used + needed`.
    pub(crate) fn recommended_min(&self) -> u64 {
        self.used.saturating_add(self.requested)
    }
}

/// A ring of `D` entries of `T`, owned by the orchestrator. `DepPool<()>` keeps only the counters,
/// for a runtime that stores the entries elsewhere (e.g. in the run arena).
///
/// Invariants (between calls):
/// 1. `1 ≤ tail ≤ top` and `used = top − tail ≤ D`; linear positions `[tail, top)` are live and
///    position `p` lives at index `p % D`, so the whole capacity is usable and live positions
///    never share an index.
/// 2. `top` and `tail` never decrease; a run from [`try_alloc_n`](DepPool::try_alloc_n) is
///    contiguous in linear positions and wraps at most once in indices.
/// 3. `entries.len() == D`, allocated once at construction.
/// 4. `high_water` and the scope peaks dominate every `used` reached after an allocation.
#[derive(Clone, Debug)]
pub(crate) struct DepPool<T> {
    entries: Vec<T>,
    top: u64,
    tail: u64,
    high_water: u64,
    scope_peaks: PeakStack<u64>,
}

impl<T: Copy + Default> DepPool<T> {
    /// An empty pool of `capacity` entries (at least 1; the resolver guarantees at least 4), as
    /// resolved per ring by `ResolvedSizing::dep_pool`.
    pub(crate) fn new(capacity: u32) -> DepPool<T> {
        assert!(capacity >= 1, "dep pool capacity must be positive");
        DepPool {
            entries: vec![T::default(); capacity as usize],
            top: 1,
            tail: 1,
            high_water: 0,
            scope_peaks: PeakStack::new(0),
        }
    }

    /// Allocates one entry holding `value`; returns its linear position (never
    /// `POOL_SENTINEL`).
    #[cfg(test)]
    pub(crate) fn try_alloc(&mut self, value: T) -> Result<u64, PoolFull> {
        let pos = self.try_alloc_n(1)?;
        *self.get_mut(pos) = value;
        Ok(pos)
    }

    /// The entry at linear position `pos`.
    #[cfg(test)]
    pub(crate) fn get(&self, pos: u64) -> T {
        self.entries[self.index_of(pos)]
    }

    /// The entry at linear position `pos`, for filling it after a reservation.
    #[cfg(test)]
    pub(crate) fn get_mut(&mut self, pos: u64) -> &mut T {
        let index = self.index_of(pos);
        &mut self.entries[index]
    }
}

impl<T> DepPool<T> {
    /// Linear `top`: the next position to allocate (`dep_pool_end`; recorded as a task's
    /// `dep_mark`/`spill_mark` at wiring).
    pub(crate) fn top(&self) -> u64 {
        self.top
    }

    /// Linear `tail`: the oldest live position (`dep_pool_start`).
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// Entries in use, `top − tail`.
    pub(crate) fn used(&self) -> u64 {
        self.top - self.tail
    }

    /// Entries free, `D − used`.
    pub(crate) fn available(&self) -> u64 {
        self.capacity_u64() - self.used()
    }

    /// Most entries ever in use at once.
    pub(crate) fn high_water(&self) -> u64 {
        self.high_water
    }

    /// Reserves `n` consecutive linear positions `[first, first + n)` and returns `first`
    /// (never `POOL_SENTINEL`; for `n = 0`, the current `top`). Fails if `used + n > D`.
    /// The entries keep stale contents until written.
    pub(crate) fn try_alloc_n(&mut self, n: u64) -> Result<u64, PoolFull> {
        let capacity = self.capacity_u64();
        let used = self.used();
        if n > capacity - used {
            return Err(PoolFull {
                requested: n,
                used,
                capacity,
                impossible: n > capacity,
            });
        }
        let first = self.top;
        self.top += n;
        let used = self.used();
        self.high_water = self.high_water.max(used);
        self.scope_peaks.observe(used);
        Ok(first)
    }

    /// Frees every position below `mark` (a `dep_mark`/`spill_mark` of task `last_alive − 1`,
    /// §3.6). Marks not above the current tail are ignored, so re-observing is harmless and the
    /// sentinel 0 is a no-op.
    ///
    /// # Panics
    /// If `mark > top`.
    pub(crate) fn advance_tail(&mut self, mark: u64) {
        if mark <= self.tail {
            return;
        }
        assert!(
            mark <= self.top,
            "pool mark {mark} is past top {}",
            self.top
        );
        self.tail = mark;
    }

    /// The entries of the run `[first, first + n)` as at most two slices (the second is non-empty
    /// only when the run wraps past index `D − 1`).
    #[cfg(test)]
    pub(crate) fn run(&self, first: u64, n: u64) -> (&[T], &[T]) {
        if n == 0 {
            return (&[], &[]);
        }
        debug_assert!(
            self.tail <= first && first + n <= self.top,
            "run is not live"
        );
        let start = self.index_of(first);
        let len = n as usize;
        let head_len = len.min(self.entries.len() - start);
        (
            &self.entries[start..start + head_len],
            &self.entries[..len - head_len],
        )
    }

    /// Opens a peak sample for a scope on this ring; the peak starts at the current `used`.
    pub(crate) fn begin_scope_sample(&mut self) {
        self.scope_peaks.begin(self.used());
    }

    /// Closes the innermost peak sample and returns its peak `used` (`dep_pool_peak` or
    /// `spill_peak`); the enclosing sample inherits it.
    pub(crate) fn end_scope_sample(&mut self) -> u64 {
        self.scope_peaks.end()
    }

    fn capacity_u64(&self) -> u64 {
        self.entries.len() as u64
    }

    #[cfg(test)]
    fn index_of(&self, pos: u64) -> usize {
        debug_assert!(
            self.tail <= pos && pos < self.top,
            "position {pos} is not live [{}, {})",
            self.tail,
            self.top
        );
        (pos % self.capacity_u64()) as usize
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    /// Runs `script` on a pool of capacity 8 and compares the transcript with `expect` (lines
    /// compared after trimming). Script lines: `alloc` (one entry), `alloc_n N`, `advance MARK`.
    #[track_caller]
    fn check(script: &str, expect: &str) {
        let mut pool = DepPool::<u64>::new(8);
        let mut actual = String::new();
        for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let result = match words.as_slice() {
                ["alloc"] => pool.try_alloc(7),
                ["alloc_n", n] => pool.try_alloc_n(n.parse().unwrap()),
                ["advance", mark] => {
                    pool.advance_tail(mark.parse().unwrap());
                    writeln!(actual, "{line}: tail {}", pool.tail()).unwrap();
                    continue;
                }
                _ => panic!("bad script line {line:?}"),
            };
            match result {
                Ok(first) => writeln!(actual, "{line}: at {first}"),
                Err(f) => writeln!(
                    actual,
                    "{line}: full{}",
                    if f.impossible { " impossible" } else { "" }
                ),
            }
            .unwrap();
        }
        writeln!(
            actual,
            "used {} available {} tail {} top {} high {}",
            pool.used(),
            pool.available(),
            pool.tail(),
            pool.top(),
            pool.high_water()
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
    fn d1_fresh_pool() {
        check("", "used 0 available 8 tail 1 top 1 high 0");
    }

    #[test]
    fn d2_ninth_allocation_fails() {
        let expect: String = (1..=8)
            .map(|pos| format!("alloc: at {pos}\n"))
            .chain([
                "alloc: full\n".to_owned(),
                "used 8 available 0 tail 1 top 9 high 8".to_owned(),
            ])
            .collect();
        check(&"alloc\n".repeat(9), &expect);
    }

    #[test]
    fn d3_advance_tail_frees() {
        check(
            "alloc
             alloc
             alloc
             alloc
             advance 4",
            "alloc: at 1
             alloc: at 2
             alloc: at 3
             alloc: at 4
             advance 4: tail 4
             used 1 available 7 tail 4 top 5 high 4",
        );
    }

    #[test]
    fn d4_high_water_is_kept() {
        check(
            "alloc_n 5
             advance 4
             alloc_n 3",
            "alloc_n 5: at 1
             advance 4: tail 4
             alloc_n 3: at 6
             used 5 available 3 tail 4 top 9 high 5",
        );
        // The same with single allocations, as the row is written.
        let mut pool = DepPool::<()>::new(8);
        for _ in 0..5 {
            pool.try_alloc(()).unwrap();
        }
        pool.advance_tail(4);
        for _ in 0..3 {
            pool.try_alloc(()).unwrap();
        }
        assert_eq!((pool.used(), pool.high_water()), (5, 5));
    }

    #[test]
    fn runs_wrap_and_oversize_runs_are_impossible() {
        check(
            "alloc_n 9
             alloc_n 8
             alloc_n 1
             advance 6
             alloc_n 4
             alloc_n 2
             alloc_n 0
             advance 3
             advance 13",
            "alloc_n 9: full impossible
             alloc_n 8: at 1
             alloc_n 1: full
             advance 6: tail 6
             alloc_n 4: at 9
             alloc_n 2: full
             alloc_n 0: at 13
             advance 3: tail 6
             advance 13: tail 13
             used 0 available 8 tail 13 top 13 high 8",
        );

        let mut pool = DepPool::<u64>::new(8);
        pool.try_alloc_n(5).unwrap();
        pool.advance_tail(6);
        let first = pool.try_alloc_n(4).unwrap();
        assert_eq!(first, 6); // indices 6, 7, 0, 1
        for k in 0..4 {
            *pool.get_mut(first + k) = 100 + k;
        }
        assert_eq!(pool.run(first, 4), (&[100, 101][..], &[102, 103][..]));
        assert_eq!(pool.get(first + 3), 103);
        let failure = pool.try_alloc_n(5).unwrap_err();
        assert_eq!(
            (failure.used, failure.impossible, failure.recommended_min()),
            (4, false, 9)
        );
    }

    #[test]
    fn pool_scope_peaks_nest() {
        let mut pool = DepPool::<()>::new(8);
        pool.begin_scope_sample();
        pool.try_alloc_n(2).unwrap();
        pool.begin_scope_sample();
        pool.try_alloc_n(3).unwrap();
        pool.advance_tail(6);
        assert_eq!(pool.end_scope_sample(), 5);
        pool.try_alloc_n(1).unwrap();
        assert_eq!(pool.end_scope_sample(), 5);
        pool.begin_scope_sample();
        assert_eq!(pool.end_scope_sample(), 1);
    }
}
