//! Scope peak samples with save/restore, so nested scopes sharing a ring each get their own peak
//! (implements the `*_peak` and `heap_largest_alloc` fields of CHIP_RUNTIME.md §7).
//!
//! A ring is sampled at every scope begin and end of the depth that maps to it; ring 3 serves
//! every depth ≥ 3, so its scopes nest and the tracker is a stack.

/// A sample whose fields are maxima: merging two samples takes the larger of each field.
pub(super) trait Peak: Copy {
    fn max_with(self, other: Self) -> Self;
}

impl Peak for u64 {
    fn max_with(self, other: u64) -> u64 {
        self.max(other)
    }
}

/// Peaks of the innermost open scope, with the peaks of the enclosing scopes saved below it.
///
/// Invariants:
/// 1. `current` is the field-wise maximum of every sample observed since the innermost
///    [`begin`](PeakStack::begin) (or since construction when the stack is empty), including the
///    occupancy passed to `begin`.
/// 2. `saved[i]` is the same quantity for the i-th enclosing scope, frozen when its child began;
///    [`end`](PeakStack::end) folds the child's peaks back into it, because the child's lifetime
///    lies inside the parent's.
#[derive(Clone, Debug)]
pub(super) struct PeakStack<P> {
    current: P,
    saved: Vec<P>,
}

impl<P: Peak> PeakStack<P> {
    /// A tracker with no scope open whose peak starts at `initial`.
    pub(super) fn new(initial: P) -> PeakStack<P> {
        PeakStack {
            current: initial,
            saved: Vec::new(),
        }
    }

    /// Records an occupancy sample (called after every allocation).
    pub(super) fn observe(&mut self, sample: P) {
        self.current = self.current.max_with(sample);
    }

    /// Opens a scope whose peaks start at the occupancy `now`.
    pub(super) fn begin(&mut self, now: P) {
        self.saved.push(self.current);
        self.current = now;
    }

    /// Closes the innermost scope and returns its peaks; the enclosing scope inherits them.
    ///
    /// An `end` without a matching `begin` is a runtime bug: debug builds panic, release builds
    /// return the peaks since construction (or the last unmatched end) and keep them.
    pub(super) fn end(&mut self) -> P {
        let peaks = self.current;
        match self.saved.pop() {
            Some(parent) => self.current = parent.max_with(peaks),
            None => debug_assert!(false, "end_scope_sample without begin_scope_sample"),
        }
        peaks
    }

    /// Number of open scopes.
    #[cfg(test)]
    pub(super) fn depth(&self) -> usize {
        self.saved.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_scope_peaks_fold_into_the_parent() {
        let mut peaks = PeakStack::new(0u64);
        peaks.begin(2);
        peaks.observe(3);
        peaks.begin(3);
        peaks.observe(9);
        assert_eq!(peaks.depth(), 2);
        assert_eq!(peaks.end(), 9);
        peaks.observe(4);
        assert_eq!(peaks.end(), 9);
        assert_eq!(peaks.depth(), 0);
        peaks.begin(1);
        assert_eq!(peaks.end(), 1);
    }
}
