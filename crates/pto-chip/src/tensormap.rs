//! The TensorMap: which live tasks last wrote (or, with `track_war`, read) each buffer.
//!
//! Implements CHIP_RUNTIME.md §3.7 (TensorMap, overlap classification, cleanup) and the
//! optional reader entries of §3.8 (`track_war`). Used by submit steps 6, 8 and 10 (§3.2).
//! The map is orchestrator-private: one thread owns it, so it needs no synchronisation.
#![allow(dead_code)] // used by the chip runtime (in progress)

use pto_types::RING_COUNT;

use crate::task_id::TaskId;
use crate::tensor::TensorDesc;

/// Stale entries are cleaned once the watermark has moved this far since the last cleanup.
pub(crate) const CLEANUP_BATCH: u64 = 64;

/// How a probe relates to an entry with the same buffer base (§3.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // the names of CHIP_RUNTIME.md §3.7
pub(crate) enum Overlap {
    /// No element is accessed by both.
    NoOverlap,
    /// The probe accesses every element of the entry (and maybe more).
    Covered,
    /// They may share elements; nothing more is known.
    Other,
}

/// Classifies probe `p` against entry `e` of the same buffer (§3.7, steps 1–5).
///
/// Sound by construction: `NoOverlap` only when the element sets are disjoint, `Covered` only
/// when `p`'s element set contains `e`'s; anything unproven is `Other`. Two refinements of the
/// tabled algorithm, both only more precise: an empty tensor (some dimension 0) overlaps
/// nothing, and step 2 compares byte ranges so that differing dtypes are handled correctly.
pub(crate) fn classify_overlap(p: &TensorDesc, e: &TensorDesc) -> Overlap {
    if p.is_empty() || e.is_empty() {
        return Overlap::NoOverlap;
    }
    // Step 1: a newer version of the buffer depends on everything recorded for it.
    if p.version() > e.version() {
        return Overlap::Other;
    }
    // Step 2: disjoint address ranges.
    let (pr, er) = (p.byte_span(), e.byte_span());
    if pr.end <= er.start || er.end <= pr.start {
        return Overlap::NoOverlap;
    }
    // Step 3: only identical, nested row-major layouts are decomposed.
    let ndims = p.ndims();
    let same_layout = p.dtype() == e.dtype() && ndims == e.ndims() && p.strides() == e.strides();
    if !same_layout {
        return Overlap::Other;
    }
    let strides = p.strides();
    let nested = strides[ndims - 1] == 1 && strides.windows(2).all(|w| w[0].is_multiple_of(w[1]));
    if !nested {
        return Overlap::Other;
    }
    // Step 4: both are boxes in the reference array of shape A.
    let (Some(p_off), Some(e_off)) = (box_offsets(p), box_offsets(e)) else {
        return Overlap::Other;
    };
    // Step 5: per-dimension intervals.
    let mut covered = true;
    for d in 0..ndims {
        let (ps, pe) = (p_off[d], p_off[d] + u64::from(p.shape()[d]));
        let (es, ee) = (e_off[d], e_off[d] + u64::from(e.shape()[d]));
        if pe <= es || ee <= ps {
            return Overlap::NoOverlap;
        }
        covered &= ps <= es && ee <= pe;
    }
    if covered {
        Overlap::Covered
    } else {
        Overlap::Other
    }
}

/// Step 4 for one tensor whose strides passed step 3: the offsets of its box in the reference
/// shape `A[i] = stride[i−1]/stride[i]`, `A[0] = capacity/stride[0]`, or `None` when the
/// tensor is not such a box.
fn box_offsets(t: &TensorDesc) -> Option<[u64; crate::tensor::MAX_DIMS]> {
    let strides = t.strides();
    let capacity = t.capacity_elems();
    if !capacity.is_multiple_of(strides[0]) {
        return None;
    }
    let mut offsets = [0u64; crate::tensor::MAX_DIMS];
    let mut rest = t.start_offset();
    for (d, &stride) in strides.iter().enumerate() {
        offsets[d] = rest / stride;
        rest %= stride;
        let reference = if d == 0 {
            capacity / stride
        } else {
            strides[d - 1] / stride
        };
        if offsets[d] + u64::from(t.shape()[d]) > reference {
            return None;
        }
    }
    // The last stride is 1, so nothing is left over.
    debug_assert_eq!(rest, 0);
    Some(offsets)
}

/// What an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A task that writes the tensor (INOUT, OUTPUT_EXISTING).
    Writer,
    /// A task that reads the tensor (INPUT), recorded only with `track_war` (§3.8).
    Reader,
}

/// Which entries a lookup reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// Readers (INPUT, INOUT) depend on writers only.
    Writers,
    /// Writers under `track_war` also depend on earlier readers.
    WritersAndReaders,
}

/// The caller's decision for one lookup hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Visit {
    Keep,
    /// Free the entry now (an INOUT, or a `track_war` writer, with a `Covered` overlap).
    Remove,
}

/// Handle of an entry; valid until that entry is removed or cleaned up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EntryId(u32);

/// One live entry overlapping a lookup probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    pub(crate) entry: EntryId,
    pub(crate) producer: TaskId,
    pub(crate) kind: EntryKind,
    /// `Covered` or `Other`, never `NoOverlap`.
    pub(crate) overlap: Overlap,
}

/// The entry pool is exhausted (the caller cleans up, waits, or fails with code 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("TensorMap pool is full")]
pub(crate) struct Full;

const NIL: u32 = u32::MAX;
const GOLDEN_RATIO: u64 = 0x9E37_79B9_7F4A_7C15;

/// One pool entry.
///
/// Invariants while `in_use`: the entry is in exactly one bucket chain (the bucket of
/// `tensor.base()`) and exactly one slot chain (`(producer.ring(), producer.slot(mask))`), and
/// `*_prev`/`*_next` are consistent in both directions (`NIL` ends a chain). While free, the
/// entry is on the free list, linked through `bucket_next`, and the other links are
/// meaningless.
#[derive(Clone, Copy, Debug)]
struct Entry {
    producer: TaskId,
    kind: EntryKind,
    tensor: TensorDesc,
    bucket_prev: u32,
    bucket_next: u32,
    slot_prev: u32,
    slot_next: u32,
    in_use: bool,
}

/// The TensorMap (§3.7).
///
/// Invariants:
/// - `entries.len() ≤ capacity`; entries `0..entries.len()` have been handed out at least once
///   (a bump allocator), and every one of them is either in use or on the free list;
/// - `in_use + free_len == entries.len()`;
/// - `bucket_heads.len()` is a power of two and `bucket_bits` its log2;
/// - `slot_heads[r].len() == window_masks[r] + 1`, a power of two;
/// - every entry with producer local `< cursors[r]` on ring `r` has been freed;
/// - an entry is **live** iff `producer.local() ≥ last_alive[producer.ring()]`; stale entries
///   stay in the chains until cleanup and are skipped by lookups.
#[derive(Debug)]
pub(crate) struct TensorMap {
    capacity: usize,
    entries: Vec<Entry>,
    free_head: u32,
    free_len: usize,
    in_use: usize,
    bucket_heads: Vec<u32>,
    bucket_bits: u32,
    slot_heads: [Vec<u32>; RING_COUNT],
    window_masks: [u64; RING_COUNT],
    cursors: [u64; RING_COUNT],
}

impl TensorMap {
    /// An empty map with `capacity` entries (chip property `tensormap_pool`), `buckets` bucket
    /// chains (`tensormap_buckets`, a power of two) and the run's per-ring windows.
    ///
    /// Panics on a bucket count or window that is not a power of two, or a capacity that does
    /// not fit entry indices (`≥ u32::MAX`): these are validated with the chip spec and the
    /// resolved sizing.
    pub(crate) fn new(capacity: usize, buckets: usize, windows: [u64; RING_COUNT]) -> TensorMap {
        assert!(
            buckets.is_power_of_two(),
            "TensorMap buckets must be a power of two"
        );
        assert!(
            capacity < NIL as usize,
            "TensorMap capacity must be below u32::MAX"
        );
        let mut map = TensorMap {
            capacity,
            entries: Vec::with_capacity(capacity),
            free_head: NIL,
            free_len: 0,
            in_use: 0,
            bucket_heads: vec![NIL; buckets],
            bucket_bits: buckets.trailing_zeros(),
            slot_heads: Default::default(),
            window_masks: [0; RING_COUNT],
            cursors: [0; RING_COUNT],
        };
        map.reset(windows);
        map
    }

    /// Empties the map for a new run with these per-ring windows (powers of two). Costs
    /// `O(buckets + Σ W_r)`; the pool is not touched.
    pub(crate) fn reset(&mut self, windows: [u64; RING_COUNT]) {
        self.entries.clear();
        self.free_head = NIL;
        self.free_len = 0;
        self.in_use = 0;
        self.bucket_heads.fill(NIL);
        for (r, &w) in windows.iter().enumerate() {
            assert!(w.is_power_of_two(), "ring window must be a power of two");
            self.window_masks[r] = w - 1;
            self.slot_heads[r].clear();
            self.slot_heads[r].resize(w as usize, NIL);
        }
        self.cursors = [0; RING_COUNT];
    }

    /// Pool size.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries in use, stale ones not yet cleaned included (scope stats `tensormap`).
    pub(crate) fn live_count(&self) -> usize {
        self.in_use
    }

    /// Entries that can be inserted before the pool is full.
    pub(crate) fn available(&self) -> usize {
        self.capacity - self.in_use
    }

    /// Entries on the free list (freed at least once and not reused since).
    pub(crate) fn free_list_len(&self) -> usize {
        self.free_len
    }

    /// Retired ids below the cursor of `ring` have been cleaned up.
    pub(crate) fn cursor(&self, ring: u8) -> u64 {
        self.cursors[usize::from(ring)]
    }

    fn bucket_of(&self, base: u64) -> usize {
        if self.bucket_bits == 0 {
            return 0;
        }
        (base.wrapping_mul(GOLDEN_RATIO) >> (64 - self.bucket_bits)) as usize
    }

    fn slot_of(&self, producer: TaskId) -> (usize, usize) {
        let ring = usize::from(producer.ring());
        (ring, producer.slot(self.window_masks[ring]))
    }

    /// Records that `producer` writes `tensor` (submit step 10).
    pub(crate) fn insert(&mut self, producer: TaskId, tensor: TensorDesc) -> Result<EntryId, Full> {
        self.insert_entry(producer, EntryKind::Writer, tensor)
    }

    /// Records that `producer` reads `tensor` (`track_war`, §3.8).
    pub(crate) fn insert_reader(
        &mut self,
        producer: TaskId,
        tensor: TensorDesc,
    ) -> Result<EntryId, Full> {
        self.insert_entry(producer, EntryKind::Reader, tensor)
    }

    fn insert_entry(
        &mut self,
        producer: TaskId,
        kind: EntryKind,
        tensor: TensorDesc,
    ) -> Result<EntryId, Full> {
        assert!(
            usize::from(producer.ring()) < RING_COUNT,
            "TensorMap insert for {producer}"
        );
        let entry = Entry {
            producer,
            kind,
            tensor,
            bucket_prev: NIL,
            bucket_next: NIL,
            slot_prev: NIL,
            slot_next: NIL,
            in_use: true,
        };
        let idx = if self.free_head != NIL {
            let idx = self.free_head;
            self.free_head = self.entries[idx as usize].bucket_next;
            self.free_len -= 1;
            self.entries[idx as usize] = entry;
            idx
        } else if self.entries.len() < self.capacity {
            self.entries.push(entry);
            (self.entries.len() - 1) as u32
        } else {
            return Err(Full);
        };
        self.in_use += 1;

        let bucket = self.bucket_of(tensor.base());
        let old = self.bucket_heads[bucket];
        self.entries[idx as usize].bucket_next = old;
        if old != NIL {
            self.entries[old as usize].bucket_prev = idx;
        }
        self.bucket_heads[bucket] = idx;

        let (ring, slot) = self.slot_of(producer);
        let old = self.slot_heads[ring][slot];
        self.entries[idx as usize].slot_next = old;
        if old != NIL {
            self.entries[old as usize].slot_prev = idx;
        }
        self.slot_heads[ring][slot] = idx;
        Ok(EntryId(idx))
    }

    /// Frees an entry: unlinks it from both chains and pushes it on the free list.
    pub(crate) fn remove(&mut self, id: EntryId) {
        let idx = id.0;
        let e = self.entries[idx as usize];
        assert!(e.in_use, "TensorMap remove of a free entry");

        if e.bucket_prev != NIL {
            self.entries[e.bucket_prev as usize].bucket_next = e.bucket_next;
        } else {
            let bucket = self.bucket_of(e.tensor.base());
            debug_assert_eq!(self.bucket_heads[bucket], idx);
            self.bucket_heads[bucket] = e.bucket_next;
        }
        if e.bucket_next != NIL {
            self.entries[e.bucket_next as usize].bucket_prev = e.bucket_prev;
        }

        if e.slot_prev != NIL {
            self.entries[e.slot_prev as usize].slot_next = e.slot_next;
        } else {
            let (ring, slot) = self.slot_of(e.producer);
            debug_assert_eq!(self.slot_heads[ring][slot], idx);
            self.slot_heads[ring][slot] = e.slot_next;
        }
        if e.slot_next != NIL {
            self.entries[e.slot_next as usize].slot_prev = e.slot_prev;
        }

        let freed = &mut self.entries[idx as usize];
        freed.in_use = false;
        freed.bucket_next = self.free_head;
        self.free_head = idx;
        self.free_len += 1;
        self.in_use -= 1;
    }

    /// Walks the whole chain of `probe.base()` (no truncation: rings interleave) and calls `f`
    /// for every live entry of that base that overlaps the probe (`Covered` or `Other`) and is
    /// of a wanted kind. `f` may ask to free the entry it was given; other entries' handles stay
    /// valid during the walk.
    ///
    /// `last_alive[r]` is ring `r`'s current watermark; older producers are stale and skipped.
    pub(crate) fn lookup(
        &mut self,
        probe: &TensorDesc,
        last_alive: &[u64; RING_COUNT],
        want: Want,
        mut f: impl FnMut(Hit) -> Visit,
    ) {
        let mut idx = self.bucket_heads[self.bucket_of(probe.base())];
        while idx != NIL {
            let e = &self.entries[idx as usize];
            let next = e.bucket_next;
            let live = e.producer.local() >= last_alive[usize::from(e.producer.ring())];
            let wanted = e.kind == EntryKind::Writer || want == Want::WritersAndReaders;
            if live && wanted && e.tensor.base() == probe.base() {
                let overlap = classify_overlap(probe, &e.tensor);
                if overlap != Overlap::NoOverlap {
                    let hit = Hit {
                        entry: EntryId(idx),
                        producer: e.producer,
                        kind: e.kind,
                        overlap,
                    };
                    if f(hit) == Visit::Remove {
                        self.remove(EntryId(idx));
                    }
                }
            }
            idx = next;
        }
    }

    /// Frees the entries of the retired tasks `ring:from .. ring:to`, matching producer ids
    /// exactly (a reused slot may also hold newer entries). Advances the ring's cleanup cursor
    /// when the range starts at or below it. Returns the number of entries freed.
    pub(crate) fn cleanup_retired(&mut self, ring: u8, from: u64, to: u64) -> usize {
        let r = usize::from(ring);
        if from >= to {
            return 0;
        }
        let mask = self.window_masks[r];
        // Each slot holds ids congruent modulo the window; one pass per slot suffices.
        let n_slots = (to - from).min(mask + 1);
        let mut freed = 0;
        for local in from..from + n_slots {
            let mut idx = self.slot_heads[r][(local & mask) as usize];
            while idx != NIL {
                let e = &self.entries[idx as usize];
                let next = e.slot_next;
                debug_assert_eq!(e.producer.ring(), ring);
                if (from..to).contains(&e.producer.local()) {
                    self.remove(EntryId(idx));
                    freed += 1;
                }
                idx = next;
            }
        }
        if from <= self.cursors[r] {
            self.cursors[r] = self.cursors[r].max(to);
        }
        freed
    }

    /// Submit step 6 for ring `ring` with watermark `last_alive` and the new task's local id:
    /// cleans `[cursor, last_alive)` when [`cleanup_due`] says so. Returns entries freed.
    pub(crate) fn sync_ring(&mut self, ring: u8, last_alive: u64, next_local: u64) -> usize {
        let r = usize::from(ring);
        let cursor = self.cursors[r];
        if !cleanup_due(cursor, last_alive, next_local, self.window_masks[r]) {
            return 0;
        }
        self.cleanup_retired(ring, cursor, last_alive)
    }

    /// Cleans every ring up to its watermark (pool pressure). Returns entries freed.
    pub(crate) fn cleanup_all(&mut self, last_alive: &[u64; RING_COUNT]) -> usize {
        let mut freed = 0;
        for (r, &alive) in last_alive.iter().enumerate() {
            freed += self.cleanup_retired(r as u8, self.cursors[r], alive);
        }
        freed
    }
}

/// The cleanup policy of §3.7: retired ids `[cursor, last_alive)` exist and either the
/// watermark moved at least [`CLEANUP_BATCH`] since the last cleanup or the new task's slot is
/// the cursor's slot (the window wrapped onto uncleaned ids).
pub(crate) fn cleanup_due(cursor: u64, last_alive: u64, next_local: u64, window_mask: u64) -> bool {
    if last_alive <= cursor {
        return false;
    }
    last_alive - cursor >= CLEANUP_BATCH || next_local & window_mask == cursor & window_mask
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use pto_types::DType;

    use super::*;

    const X: u64 = 0x1000;

    /// The §10 M-row map: 16 buckets, pool 64, window 32 on every ring.
    fn m_map() -> TensorMap {
        TensorMap::new(64, 16, [32; RING_COUNT])
    }

    fn id(ring: u8, local: u64) -> TaskId {
        TaskId::new(ring, local)
    }

    /// A contiguous f32 tensor of `shape` at `base`, filling its buffer.
    fn tensor(base: u64, shape: &[u32]) -> TensorDesc {
        let numel: u64 = shape.iter().map(|&n| u64::from(n)).product();
        TensorDesc::contiguous(base, numel * 4, shape, DType::F32).unwrap()
    }

    /// The `[256, 1]` f32 buffer of rows M4–M6.
    fn col() -> TensorDesc {
        tensor(X, &[256, 1])
    }

    /// Lookup hits as `(producer, overlap)`, keeping every entry.
    #[track_caller]
    fn hits(
        map: &mut TensorMap,
        probe: &TensorDesc,
        last_alive: [u64; 4],
    ) -> Vec<(TaskId, Overlap)> {
        let mut out = Vec::new();
        map.lookup(probe, &last_alive, Want::Writers, |h| {
            out.push((h.producer, h.overlap));
            Visit::Keep
        });
        out
    }

    /// The single classification of `probe` against one entry `e` in a fresh map.
    #[track_caller]
    fn check_pair(e: TensorDesc, probe: TensorDesc, expect: &[(TaskId, Overlap)]) {
        let mut map = m_map();
        map.insert(id(0, 0), e).unwrap();
        assert_eq!(hits(&mut map, &probe, [0; 4]), expect);
        map.check_invariants();
    }

    impl TensorMap {
        /// Walks every chain and checks the invariants listed on the types.
        #[track_caller]
        fn check_invariants(&self) {
            let mut seen_bucket = 0;
            for (b, &head) in self.bucket_heads.iter().enumerate() {
                let (mut prev, mut idx) = (NIL, head);
                while idx != NIL {
                    let e = &self.entries[idx as usize];
                    assert!(e.in_use);
                    assert_eq!(e.bucket_prev, prev);
                    assert_eq!(self.bucket_of(e.tensor.base()), b);
                    seen_bucket += 1;
                    (prev, idx) = (idx, e.bucket_next);
                }
            }
            let mut seen_slot = 0;
            for (r, heads) in self.slot_heads.iter().enumerate() {
                for (s, &head) in heads.iter().enumerate() {
                    let (mut prev, mut idx) = (NIL, head);
                    while idx != NIL {
                        let e = &self.entries[idx as usize];
                        assert!(e.in_use);
                        assert_eq!(e.slot_prev, prev);
                        assert_eq!(self.slot_of(e.producer), (r, s));
                        assert!(e.producer.local() >= self.cursors[r]);
                        seen_slot += 1;
                        (prev, idx) = (idx, e.slot_next);
                    }
                }
            }
            let mut free = 0;
            let mut idx = self.free_head;
            while idx != NIL {
                assert!(!self.entries[idx as usize].in_use);
                free += 1;
                idx = self.entries[idx as usize].bucket_next;
            }
            assert_eq!(seen_bucket, self.in_use);
            assert_eq!(seen_slot, self.in_use);
            assert_eq!(free, self.free_len);
            assert_eq!(self.in_use + self.free_len, self.entries.len());
            assert!(self.entries.len() <= self.capacity);
        }
    }

    // ----- §10 rows M1–M12, M14 -----

    #[test]
    fn m1_same_tensor_is_covered() {
        let t = tensor(X, &[256]);
        check_pair(t, t, &[(id(0, 0), Overlap::Covered)]);
    }

    #[test]
    fn m2_larger_probe_covers_entry() {
        let buf = tensor(X, &[512]);
        check_pair(
            buf.slice(0, 0, 256).unwrap(),
            buf,
            &[(id(0, 0), Overlap::Covered)],
        );
    }

    #[test]
    fn m3_smaller_probe_is_other() {
        let buf = tensor(X, &[512]);
        check_pair(
            buf,
            buf.slice(0, 0, 256).unwrap(),
            &[(id(0, 0), Overlap::Other)],
        );
    }

    #[test]
    fn m4_disjoint_views_do_not_match() {
        let e = col().view(&[128, 1], &[0, 0]).unwrap();
        let p = col().view(&[128, 1], &[128, 0]).unwrap();
        check_pair(e, p, &[]);
    }

    #[test]
    fn m5_partial_overlap_is_other() {
        let e = col().view(&[192, 1], &[0, 0]).unwrap();
        let p = col().view(&[192, 1], &[64, 0]).unwrap();
        check_pair(e, p, &[(id(0, 0), Overlap::Other)]);
    }

    #[test]
    fn m6_containing_view_is_covered() {
        let e = col().view(&[128, 1], &[64, 0]).unwrap();
        let p = col().view(&[256, 1], &[0, 0]).unwrap();
        check_pair(e, p, &[(id(0, 0), Overlap::Covered)]);
    }

    #[test]
    fn m7_newer_probe_version_is_other() {
        let t = tensor(X, &[256]);
        check_pair(t, t.with_version(1), &[(id(0, 0), Overlap::Other)]);
    }

    #[test]
    fn m8_stale_entry_is_skipped() {
        let mut map = m_map();
        let t = tensor(X, &[256]);
        map.insert(id(0, 0), t).unwrap();
        map.insert(id(0, 1), t).unwrap();
        assert_eq!(
            hits(&mut map, &t, [1, 0, 0, 0]),
            [(id(0, 1), Overlap::Covered)]
        );
    }

    #[test]
    fn m9_stale_entry_does_not_truncate_the_chain() {
        let t = tensor(X, &[256]);
        // Both insertion orders, so the stale entry is once at the head and once behind.
        for order in [[id(0, 0), id(1, 0)], [id(1, 0), id(0, 0)]] {
            let mut map = m_map();
            for producer in order {
                map.insert(producer, t).unwrap();
            }
            assert_eq!(
                hits(&mut map, &t, [1, 0, 0, 0]),
                [(id(1, 0), Overlap::Covered)]
            );
        }
    }

    #[test]
    fn m10_cleanup_frees_retired_entries() {
        let mut map = m_map();
        let t = tensor(X, &[256]);
        for local in 0..3 {
            map.insert(id(0, local), t).unwrap();
        }
        assert_eq!(map.cleanup_retired(0, 0, 2), 2);
        assert_eq!(map.free_list_len(), 2);
        assert_eq!(map.live_count(), 1);
        assert_eq!(hits(&mut map, &t, [0; 4]), [(id(0, 2), Overlap::Covered)]);
        map.check_invariants();
    }

    #[test]
    fn m11_cleanup_spares_newer_entry_in_reused_slot() {
        let mut map = m_map();
        let t = tensor(X, &[256]);
        map.insert(id(0, 0), t).unwrap();
        map.insert(id(0, 32), t).unwrap();
        assert_eq!(map.cleanup_retired(0, 0, 1), 1);
        assert_eq!(
            hits(&mut map, &t, [1, 0, 0, 0]),
            [(id(0, 32), Overlap::Covered)]
        );
        map.check_invariants();
    }

    #[test]
    fn m12_inout_chain_removes_covered_writer() {
        let mut map = m_map();
        let x = tensor(X, &[256]);
        let alive = [0; 4];
        // t1 INOUT X: nothing to wait for; registers as writer.
        assert_eq!(hits(&mut map, &x, alive), []);
        map.insert(id(0, 1), x).unwrap();
        // t2 INOUT X (full): waits on t1 and removes t1's covered entry, then registers.
        let mut t2_waits = Vec::new();
        map.lookup(&x, &alive, Want::Writers, |h| {
            t2_waits.push(h.producer);
            if h.overlap == Overlap::Covered {
                Visit::Remove
            } else {
                Visit::Keep
            }
        });
        assert_eq!(t2_waits, [id(0, 1)]);
        map.insert(id(0, 2), x).unwrap();
        // t3 INPUT X: one edge, to t2.
        assert_eq!(hits(&mut map, &x, alive), [(id(0, 2), Overlap::Covered)]);
        assert_eq!(map.live_count(), 1);
        map.check_invariants();
    }

    #[test]
    fn m14_reader_entries_with_track_war() {
        let x = tensor(X, &[256]);
        let alive = [0; 4];
        let writer_lookup = |map: &mut TensorMap| {
            let mut waits = Vec::new();
            map.lookup(&x, &alive, Want::WritersAndReaders, |h| {
                waits.push((h.producer, h.kind));
                if h.overlap == Overlap::Covered {
                    Visit::Remove
                } else {
                    Visit::Keep
                }
            });
            waits
        };

        // Without track_war, t1 INPUT records nothing: t2 OUTPUT_EXISTING finds no one.
        let mut map = m_map();
        assert_eq!(writer_lookup(&mut map), []);

        // With track_war, t1 records a reader entry; t2's writer lookup waits on it and its
        // covering write removes it.
        let mut map = m_map();
        map.insert_reader(id(0, 1), x).unwrap();
        // Readers do not depend on readers.
        assert_eq!(hits(&mut map, &x, alive), []);
        assert_eq!(writer_lookup(&mut map), [(id(0, 1), EntryKind::Reader)]);
        map.insert(id(0, 2), x).unwrap();
        assert_eq!(map.live_count(), 1);
        // A partial write keeps the reader entry.
        let mut map = m_map();
        map.insert_reader(id(0, 1), x).unwrap();
        let half = x.slice(0, 0, 128).unwrap();
        let mut waits = Vec::new();
        map.lookup(&half, &alive, Want::WritersAndReaders, |h| {
            waits.push((h.producer, h.overlap));
            if h.overlap == Overlap::Covered {
                Visit::Remove
            } else {
                Visit::Keep
            }
        });
        assert_eq!(waits, [(id(0, 1), Overlap::Other)]);
        assert_eq!(map.live_count(), 1);
        map.check_invariants();
    }

    // ----- classification details -----

    #[test]
    fn different_bases_in_one_bucket_do_not_match() {
        // One bucket: every base shares the chain.
        let mut map = TensorMap::new(8, 1, [32; RING_COUNT]);
        let a = tensor(X, &[16]);
        let b = tensor(X + 64, &[16]);
        map.insert(id(0, 0), a).unwrap();
        map.insert(id(0, 1), b).unwrap();
        assert_eq!(hits(&mut map, &a, [0; 4]), [(id(0, 0), Overlap::Covered)]);
        assert_eq!(hits(&mut map, &b, [0; 4]), [(id(0, 1), Overlap::Covered)]);
        map.check_invariants();
    }

    #[test]
    fn classifier_steps() {
        use Overlap::*;
        let m = tensor(X, &[8, 8]);
        let v = |shape: &[u32], off: &[u32]| m.view(shape, off).unwrap();
        // Step 5: disjoint columns inside overlapping element ranges.
        assert_eq!(
            classify_overlap(&v(&[8, 4], &[0, 0]), &v(&[8, 4], &[0, 4])),
            NoOverlap
        );
        assert_eq!(
            classify_overlap(&v(&[4, 4], &[0, 0]), &v(&[2, 2], &[1, 1])),
            Covered
        );
        assert_eq!(
            classify_overlap(&v(&[4, 4], &[0, 0]), &v(&[2, 2], &[3, 3])),
            Other
        );
        // Step 1: an older probe version is classified normally.
        assert_eq!(classify_overlap(&m, &m.with_version(1)), Covered);
        // Step 3: transposed views, other dtypes and reshaped views are conservative.
        assert_eq!(classify_overlap(&m.transpose(0, 1).unwrap(), &m), Other);
        assert_eq!(classify_overlap(&m.reshape(&[64]).unwrap(), &m), Other);
        let as_i32 = TensorDesc::contiguous(X, 256, &[8, 8], DType::I32).unwrap();
        assert_eq!(classify_overlap(&as_i32, &m), Other);
        // Step 2 in bytes: a u8 view of bytes 0..4 against f32 element 1 (bytes 4..8).
        let bytes = TensorDesc::contiguous(X, 256, &[4], DType::U8).unwrap();
        assert_eq!(
            classify_overlap(&bytes, &m.view(&[1, 1], &[0, 1]).unwrap()),
            NoOverlap
        );
        // Step 4: a capacity that the outer stride does not divide.
        let even = TensorDesc::new(m.buffer(), 0, &[2, 8], &[8, 1], DType::F32).unwrap();
        let odd_buf = TensorDesc::new(
            crate::tensor::BufferRef {
                bytes: 4 * 20,
                ..m.buffer()
            },
            0,
            &[2, 8],
            &[8, 1],
            DType::F32,
        )
        .unwrap();
        assert_eq!(classify_overlap(&even, &even), Covered);
        assert_eq!(classify_overlap(&odd_buf, &odd_buf), Other);
        // Step 4: a box that wraps a row (offset 6, width 4 in rows of 8).
        let wrap = TensorDesc::new(m.buffer(), 6, &[2, 4], &[8, 1], DType::F32).unwrap();
        assert_eq!(classify_overlap(&wrap, &v(&[1, 1], &[1, 0])), Other);
        // Empty tensors overlap nothing.
        let empty = m.slice(0, 0, 0).unwrap();
        assert_eq!(classify_overlap(&empty, &m), NoOverlap);
        assert_eq!(classify_overlap(&m, &empty), NoOverlap);
    }

    // ----- pool, chains and cleanup -----

    #[test]
    fn pool_full_and_reuse() {
        let mut map = TensorMap::new(4, 2, [4; RING_COUNT]);
        assert_eq!(map.capacity(), 4);
        let t = tensor(X, &[16]);
        let ids: Vec<EntryId> = (0..4).map(|l| map.insert(id(0, l), t).unwrap()).collect();
        assert_eq!(map.insert(id(0, 4), t), Err(Full));
        assert_eq!(map.available(), 0);
        map.remove(ids[1]);
        assert_eq!((map.available(), map.free_list_len()), (1, 1));
        // The freed entry is reused.
        assert_eq!(map.insert(id(0, 4), t), Ok(ids[1]));
        assert_eq!(map.free_list_len(), 0);
        map.check_invariants();
        let got: Vec<TaskId> = hits(&mut map, &t, [0; 4])
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(got, [id(0, 4), id(0, 3), id(0, 2), id(0, 0)]);
    }

    #[test]
    fn remove_middle_head_and_tail() {
        let mut map = m_map();
        let t = tensor(X, &[16]);
        let e: Vec<EntryId> = (0..5)
            .map(|l| map.insert(id(1, l * 32), t).unwrap())
            .collect();
        // All five share bucket and slot chains; chains are newest first.
        for victim in [e[2], e[4], e[0]] {
            map.remove(victim);
            map.check_invariants();
        }
        let got: Vec<TaskId> = hits(&mut map, &t, [0; 4])
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(got, [id(1, 96), id(1, 32)]);
    }

    #[test]
    fn cleanup_policy() {
        // Nothing retired.
        assert!(!cleanup_due(10, 10, 20, 31));
        // Watermark moved 63: not yet, unless the new slot is the cursor's.
        assert!(!cleanup_due(0, 63, 70, 127));
        assert!(cleanup_due(0, 64, 70, 127));
        assert!(cleanup_due(5, 6, 37, 31));
        assert!(!cleanup_due(5, 6, 36, 31));
    }

    #[test]
    fn sync_ring_and_cleanup_all() {
        let mut map = m_map();
        let t = tensor(X, &[16]);
        for local in 0..31 {
            map.insert(id(2, local), t).unwrap();
        }
        map.insert(id(0, 0), t).unwrap();
        // Watermark 10, next id 31: not due (moved 10 < 64, slot 31 ≠ slot 0).
        assert_eq!(map.sync_ring(2, 10, 31), 0);
        assert_eq!(map.cursor(2), 0);
        // Next id 32 lands in the cursor's slot: clean [0, 10).
        assert_eq!(map.sync_ring(2, 10, 32), 10);
        assert_eq!(map.cursor(2), 10);
        map.check_invariants();
        // Pool pressure: clean every ring to its watermark.
        assert_eq!(map.cleanup_all(&[1, 0, 20, 0]), 1 + 10);
        assert_eq!((map.cursor(0), map.cursor(2)), (1, 20));
        assert_eq!(map.live_count(), 11);
        map.check_invariants();
        // Cleaning the same range again frees nothing.
        assert_eq!(map.cleanup_all(&[1, 0, 20, 0]), 0);
    }

    #[test]
    fn cleanup_range_longer_than_window() {
        let mut map = TensorMap::new(64, 16, [4; RING_COUNT]);
        let t = tensor(X, &[16]);
        for local in 0..12 {
            map.insert(id(3, local), t).unwrap();
        }
        assert_eq!(map.cleanup_retired(3, 0, 10), 10);
        let got: Vec<TaskId> = hits(&mut map, &t, [0; 4])
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(got, [id(3, 11), id(3, 10)]);
        map.check_invariants();
    }

    #[test]
    fn reset_empties_the_map() {
        let mut map = m_map();
        let t = tensor(X, &[16]);
        let e = map.insert(id(0, 0), t).unwrap();
        map.insert(id(1, 0), t).unwrap();
        map.remove(e);
        map.cleanup_retired(1, 0, 1);
        map.reset([8, 16, 32, 64]);
        assert_eq!(
            (map.live_count(), map.free_list_len(), map.cursor(1)),
            (0, 0, 0)
        );
        assert_eq!(hits(&mut map, &t, [0; 4]), []);
        map.insert(id(3, 63), t).unwrap();
        map.check_invariants();
    }

    // ----- property tests -----

    /// One random view step: `(kind, a, b, c, d)`, interpreted against the current tensor.
    type Step = (u8, u32, u32, u32, u32);

    fn apply(t: TensorDesc, (kind, a, b, c, d): Step) -> TensorDesc {
        let ndims = t.ndims();
        let shape = t.shape();
        let pick = |size: u32, x: u32, y: u32| {
            let off = x % (size + 1);
            (off, y % (size - off + 1))
        };
        match kind % 4 {
            0 => {
                let mut sh = [0u32; 2];
                let mut off = [0u32; 2];
                for dim in 0..ndims {
                    let (x, y) = if dim == 0 { (a, b) } else { (c, d) };
                    (off[dim], sh[dim]) = pick(shape[dim], x, y);
                }
                t.view(&sh[..ndims], &off[..ndims]).unwrap()
            }
            1 => {
                let dim = a as usize % ndims;
                let (start, len) = pick(shape[dim], b, c);
                t.slice(dim, start, len).unwrap()
            }
            2 => t.transpose(0, ndims - 1).unwrap(),
            _ => match t.reshape(&[t.numel() as u32]) {
                Ok(flat) => flat,
                Err(_) => t,
            },
        }
    }

    /// Element offsets of `t` as a bit set (buffers here hold at most 80 elements).
    fn elements(t: &TensorDesc) -> u128 {
        let mut set = 0u128;
        let shape = t.shape();
        let mut idx = vec![0u32; t.ndims()];
        if t.is_empty() {
            return 0;
        }
        loop {
            set |= 1 << t.element_offset(&idx).unwrap();
            let mut d = t.ndims();
            loop {
                if d == 0 {
                    return set;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }

    fn base_tensor() -> impl Strategy<Value = TensorDesc> {
        let shape = prop_oneof![
            (1u32..=64).prop_map(|n| vec![n]),
            (1u32..=8, 1u32..=8).prop_map(|(r, c)| vec![r, c]),
        ];
        (shape, 0u64..=16).prop_map(|(shape, slack)| {
            let numel: u64 = shape.iter().map(|&n| u64::from(n)).product();
            TensorDesc::contiguous(X, (numel + slack) * 4, &shape, DType::F32).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn classifier_is_sound(
            base in base_tensor(),
            p_steps in prop::collection::vec(any::<Step>(), 0..4),
            e_steps in prop::collection::vec(any::<Step>(), 0..4),
            p_version in 0i32..2,
        ) {
            let p = p_steps.iter().fold(base, |t, &s| apply(t, s)).with_version(p_version);
            let e = e_steps.iter().fold(base, |t, &s| apply(t, s));
            let (ps, es) = (elements(&p), elements(&e));
            match classify_overlap(&p, &e) {
                Overlap::NoOverlap => prop_assert_eq!(ps & es, 0, "{} vs {}", p, e),
                Overlap::Covered => prop_assert_eq!(ps & es, es, "{} vs {}", p, e),
                Overlap::Other => {}
            }
        }

        /// Random inserts, removals and cleanups against a model: lookups report exactly the
        /// live entries of the probe's base that the classifier says overlap.
        #[test]
        fn map_matches_model(ops in prop::collection::vec((0u8..4, 0u8..4, 0u64..40, 0u8..3), 1..120)) {
            let mut map = TensorMap::new(16, 2, [8; RING_COUNT]);
            let bases = [X, X + 0x100, X + 0x200];
            let mut model: BTreeMap<u32, (TaskId, TensorDesc)> = BTreeMap::new();
            let mut last_alive = [0u64; RING_COUNT];
            for (op, ring, local, b) in ops {
                let t = tensor(bases[usize::from(b)], &[16]).slice(0, u32::from(b) * 4, 8).unwrap();
                match op {
                    // Producers are live when they register (local ≥ watermark).
                    0 | 1 => {
                        let producer = id(ring, local.max(last_alive[usize::from(ring)]));
                        match map.insert(producer, t) {
                            Ok(e) => { model.insert(e.0, (producer, t)); }
                            Err(Full) => prop_assert_eq!(model.len(), 16),
                        }
                    }
                    2 => {
                        if let Some(&k) = model.keys().nth(local as usize % model.len().max(1)) {
                            map.remove(EntryId(k));
                            model.remove(&k);
                        }
                    }
                    _ => {
                        let r = usize::from(ring);
                        let to = last_alive[r].max(local);
                        let from = map.cursor(ring);
                        map.cleanup_retired(ring, from, to);
                        last_alive[r] = to;
                        model.retain(|_, (p, _)| p.ring() != ring || !(from..to).contains(&p.local()));
                    }
                }
                map.check_invariants();
                prop_assert_eq!(map.live_count(), model.len());
                let mut got = Vec::new();
                map.lookup(&t, &last_alive, Want::Writers, |h| {
                    got.push((h.entry.0, h.overlap));
                    Visit::Keep
                });
                got.sort_unstable_by_key(|g| g.0);
                let want: Vec<(u32, Overlap)> = model
                    .iter()
                    .filter(|(_, (p, e))| {
                        e.base() == t.base() && p.local() >= last_alive[usize::from(p.ring())]
                    })
                    .map(|(&k, (_, e))| (k, classify_overlap(&t, e)))
                    .filter(|&(_, o)| o != Overlap::NoOverlap)
                    .collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
