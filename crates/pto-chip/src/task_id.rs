//! Task identity: a ring number and a per-ring local id packed into one `u64`.
//!
//! Implements CHIP_RUNTIME.md §3.1 (identity). A task's slot in its ring is
//! `local & (W_r − 1)`; ids are shown as `r1:42`.

use std::fmt;

/// The identity of a task within one run.
///
/// Layout (one `u64`): bits 63..56 are the ring, bits 55..0 the per-ring local id.
///
/// Invariants:
/// - the local id is assigned by the ring in submission order, starting at 0 for every run, and
///   never wraps (2^56 submits per ring per run is out of reach);
/// - ordering is by ring first, then by local id, so it is meaningful only within one ring;
/// - [`TaskId::INVALID`] (all bits set) is never issued: no ring 255 exists.
///
/// Ids are plain `Copy` values; a stale id (its task retired, its slot reused) is detected at
/// run time by comparing with the slot's occupant (§3.2).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(u64);

impl TaskId {
    /// Number of bits of the per-ring local id.
    pub const LOCAL_BITS: u32 = 56;
    /// Largest representable local id.
    pub const MAX_LOCAL: u64 = (1 << Self::LOCAL_BITS) - 1;
    /// An id that names no task (ring 255, all local bits set).
    pub const INVALID: TaskId = TaskId(u64::MAX);

    /// Packs `ring` and `local`.
    ///
    /// `local` must be at most [`TaskId::MAX_LOCAL`]; higher bits are a caller bug (checked in
    /// debug builds, masked off in release builds).
    pub const fn new(ring: u8, local: u64) -> TaskId {
        debug_assert!(local <= Self::MAX_LOCAL, "TaskId local id exceeds 56 bits");
        TaskId(((ring as u64) << Self::LOCAL_BITS) | (local & Self::MAX_LOCAL))
    }

    /// The ring this task was submitted to (`min(depth, 3)`).
    pub const fn ring(self) -> u8 {
        (self.0 >> Self::LOCAL_BITS) as u8
    }

    /// The per-ring, per-run local id.
    pub const fn local(self) -> u64 {
        self.0 & Self::MAX_LOCAL
    }

    /// The slot index in a ring whose window is `window_mask + 1` (a power of two).
    pub const fn slot(self, window_mask: u64) -> usize {
        (self.local() & window_mask) as usize
    }

    /// `false` only for [`TaskId::INVALID`].
    pub const fn is_valid(self) -> bool {
        self.0 != Self::INVALID.0
    }

    /// The packed bit pattern (for reports and wire records).
    pub const fn to_bits(self) -> u64 {
        self.0
    }

    /// The id with this packed bit pattern.
    pub const fn from_bits(bits: u64) -> TaskId {
        TaskId(bits)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_valid() {
            return f.write_str("invalid");
        }
        write!(f, "r{}:{}", self.ring(), self.local())
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_ring_and_local() {
        let id = TaskId::new(1, 42);
        assert_eq!(id.ring(), 1);
        assert_eq!(id.local(), 42);
        assert_eq!(id.to_string(), "r1:42");
        assert_eq!(format!("{id:?}"), "TaskId(r1:42)");
        assert_eq!(TaskId::from_bits(id.to_bits()), id);

        let max = TaskId::new(3, TaskId::MAX_LOCAL);
        assert_eq!(max.ring(), 3);
        assert_eq!(max.local(), TaskId::MAX_LOCAL);
    }

    #[test]
    fn slot_masks_the_local_id() {
        assert_eq!(TaskId::new(0, 0).slot(15), 0);
        assert_eq!(TaskId::new(2, 17).slot(15), 1);
        assert_eq!(TaskId::new(2, 32).slot(31), 0);
    }

    #[test]
    fn invalid_is_distinct_and_displayed() {
        assert!(!TaskId::INVALID.is_valid());
        assert!(TaskId::new(0, 0).is_valid());
        assert!(TaskId::new(3, TaskId::MAX_LOCAL).is_valid());
        assert_eq!(TaskId::INVALID.to_string(), "invalid");
    }

    #[test]
    fn orders_by_ring_then_local() {
        let mut ids = vec![TaskId::new(1, 0), TaskId::new(0, 5), TaskId::new(0, 1)];
        ids.sort();
        assert_eq!(
            ids,
            [TaskId::new(0, 1), TaskId::new(0, 5), TaskId::new(1, 0)]
        );
    }
}
