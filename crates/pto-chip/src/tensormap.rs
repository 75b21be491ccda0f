//! The TensorMap: which live tasks last wrote each region of each buffer.
//!
//! Implements CHIP_RUNTIME.md §3.7 (TensorMap, overlap classification, cleanup). Used by submit
//! steps 6, 8 and 10 (§3.2). The map is orchestrator-private: one thread owns it, so it needs no
//! synchronisation.
//!
//! # Region index
//!
//! A lookup costs O(writers that overlap the probe), not O(live writers of the buffer): a
//! stencil keeps thousands of disjoint writers of one grid live, and every new task probes the
//! grid. So the entries of each buffer base form an interval treap, ordered by byte start, in
//! which each node also carries the largest byte end and the oldest version of its subtree. A
//! lookup descends only into subtrees that can hold a candidate: an entry whose bytes intersect
//! the probe's, or whose version is older than the probe's (step 1 of the classification makes
//! such an entry a hit whatever its bytes). Reaching `k` candidates costs `O(k · log n)`, and
//! `O(k + log n)` when the entries are disjoint. Two simpler schemes fail common cases: a
//! window of starts widened by the longest entry of the base degrades to a full scan as soon as
//! one task writes the whole buffer, and block hashing needs one node per block an entry spans,
//! which a fixed pool cannot bound.
//!
//! Each entry's byte span is computed once, at insert ([`TensorDesc::byte_span`] loops over
//! the rank); the index and the cheap disjointness test of the classification compare the
//! cached spans. One record per buffer base with entries holds its treap's root; the records
//! sit in the hash chains, so a lookup finds its treap in O(1) expected. Entries, nodes and
//! records are pools sized at construction and reused by [`TensorMap::reset`]: an insert or a
//! removal allocates nothing.

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

/// The absolute byte addresses `[start, end)` spanned by a tensor, as
/// [`TensorDesc::byte_span`] gives them: `start == end` exactly when the tensor is empty
/// (a non-empty tensor spans at least one element of at least one byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: u64,
    end: u64,
}

impl Span {
    fn of(t: &TensorDesc) -> Span {
        let r = t.byte_span();
        Span {
            start: r.start,
            end: r.end,
        }
    }

    fn is_empty(self) -> bool {
        self.start == self.end
    }

    fn intersects(self, other: Span) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// [`classify`], computing both spans: the tests' entry point.
#[cfg(test)]
pub(crate) fn classify_overlap(p: &TensorDesc, e: &TensorDesc) -> Overlap {
    classify(p, Span::of(p), e, Span::of(e))
}

/// Classifies probe `p` against entry `e` of the same buffer (§3.7, steps 1–5), given their
/// byte spans `ps` and `es` (cached at insert for entries).
///
/// Sound by construction: `NoOverlap` only when the element sets are disjoint, `Covered` only
/// when `p`'s element set contains `e`'s; anything unproven is `Other`. Two refinements of the
/// tabled algorithm, both only more precise: an empty tensor (some dimension 0) overlaps
/// nothing, and step 2 compares byte ranges so that differing dtypes are handled correctly.
fn classify(p: &TensorDesc, ps: Span, e: &TensorDesc, es: Span) -> Overlap {
    debug_assert!(ps == Span::of(p) && es == Span::of(e));
    if ps.is_empty() || es.is_empty() {
        return Overlap::NoOverlap;
    }
    // Step 1: a newer version of the buffer depends on everything recorded for it.
    if p.version() > e.version() {
        return Overlap::Other;
    }
    // Step 2: disjoint address ranges.
    if !ps.intersects(es) {
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

/// The caller's decision for one lookup hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Visit {
    Keep,
    /// Free the entry now (an INOUT with a `Covered` overlap).
    Remove,
}

/// Handle of an entry; valid until that entry is removed or cleaned up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EntryId(u32);

/// One live writer entry overlapping a lookup probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    pub(crate) entry: EntryId,
    pub(crate) producer: TaskId,
    /// `Covered` or `Other`, never `NoOverlap`.
    pub(crate) overlap: Overlap,
}

/// The entry pool is exhausted (the caller cleans up, waits, or fails with code 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("TensorMap pool is full")]
pub(crate) struct Full;

const NIL: u32 = u32::MAX;
const GOLDEN_RATIO: u64 = 0x9E37_79B9_7F4A_7C15;
/// First state of the priority generator: a fixed seed makes every run's trees, and so the
/// order of lookup hits, reproducible.
const PRIO_SEED: u32 = 0x2545_F491;

/// One pool entry: a writer and its view.
///
/// While `in_use`, the entry is in exactly one slot chain (`(producer.ring(),
/// producer.slot(mask))`, `slot_prev`/`slot_next` consistent both ways, `NIL` ending it) and
/// its node is in the treap of base record `record`. While free, it is on the free list, linked
/// through `slot_next`, and the other fields are meaningless.
#[derive(Clone, Copy, Debug)]
struct Entry {
    producer: TaskId,
    tensor: TensorDesc,
    record: u32,
    slot_prev: u32,
    slot_next: u32,
    in_use: bool,
}

/// Entry `i`'s node in the treap of its base (`nodes[i]`). Apart from [`Entry`] so that a
/// descent reads 48-byte nodes, not descriptors.
///
/// Invariants while the entry is in use:
/// - `span` is the entry's [`Span`]; `version` is its tensor's version, or `i32::MAX` when the
///   span is empty (an empty entry overlaps nothing, not even a newer probe);
/// - search order: keys `(span.start, index)` of the left subtree are smaller than the node's,
///   those of the right subtree larger;
/// - heap order: `prio` is at least the children's. Priorities are pseudo-random, so the
///   expected depth is `O(log n)` whatever the insertion order;
/// - `max_end` and `min_version` are the largest `span.end` and smallest `version` of the
///   subtree rooted here: they are what a lookup prunes on;
/// - `parent`/`left`/`right` agree both ways; `NIL` for none, and a root's parent is `NIL`.
#[derive(Clone, Copy, Debug)]
struct Node {
    span: Span,
    max_end: u64,
    version: i32,
    min_version: i32,
    left: u32,
    right: u32,
    parent: u32,
    prio: u32,
}

// The cache footprint of a descent, as documented above.
const _: () = assert!(std::mem::size_of::<Node>() == 48);

/// A buffer base with entries: the root of its treap.
///
/// While in use: `root` is not `NIL`, the treap holds exactly the in-use entries with
/// `tensor.base() == base`, no other record has this `base`, and `prev`/`next` link the hash
/// chain of the bucket of `base`. While free, it is on the record free list through `next`.
#[derive(Clone, Copy, Debug)]
struct BaseRecord {
    base: u64,
    root: u32,
    prev: u32,
    next: u32,
}

/// What the last lookup did, for tests of its cost.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
struct ProbeStats {
    /// Treap nodes the descent entered.
    visited: usize,
    /// Live candidates handed to [`classify`].
    classified: usize,
}

/// The TensorMap (§3.7).
///
/// Invariants:
/// - `entries.len() == nodes.len() ≤ capacity`; entries `0..entries.len()` have been handed out
///   at least once (a bump allocator), and every one of them is either in use or on the free
///   list; `in_use + free_len == entries.len()`;
/// - `bases.len() ≤ capacity` (a record exists only for a base with an entry in use), and every
///   record is either in use or on the record free list;
/// - the three pools are allocated at construction, so they never reallocate;
/// - `bucket_heads.len()` is a power of two and `bucket_bits` its log2;
/// - `slot_heads[r].len() == window_masks[r] + 1`, a power of two;
/// - every non-`NIL` slot head of ring `r` is listed in `dirty_slots[r]`, and every non-`NIL`
///   bucket head in `dirty_buckets`, unless that list is `None` (it overflowed): so `reset`
///   clears only what the last run touched, not `Σ windows` heads (an empty run with the
///   default 16384-slot windows spent most of its time in that fill);
/// - every entry with producer local `< cursors[r]` on ring `r` has been freed;
/// - an entry is **live** iff `producer.local() ≥ last_alive[producer.ring()]`; stale entries
///   stay indexed until cleanup and are skipped by lookups.
#[derive(Debug)]
pub(crate) struct TensorMap {
    capacity: usize,
    entries: Vec<Entry>,
    nodes: Vec<Node>,
    free_head: u32,
    free_len: usize,
    in_use: usize,
    bases: Vec<BaseRecord>,
    free_base: u32,
    bucket_heads: Vec<u32>,
    bucket_bits: u32,
    slot_heads: [Vec<u32>; RING_COUNT],
    dirty_slots: [Option<Vec<u32>>; RING_COUNT],
    dirty_buckets: Option<Vec<u32>>,
    window_masks: [u64; RING_COUNT],
    cursors: [u64; RING_COUNT],
    /// xorshift32 state for node priorities.
    prio_state: u32,
    /// Scratch of [`TensorMap::lookup`], kept so that lookups reuse their allocations.
    stack: Vec<u32>,
    hits: Vec<Hit>,
    #[cfg(test)]
    probe_stats: ProbeStats,
}

impl TensorMap {
    /// An empty map with `capacity` entries (chip property `tensormap_pool`), `buckets` hash
    /// chains of buffer bases (`tensormap_buckets`, a power of two) and the run's per-ring
    /// windows.
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
            nodes: Vec::with_capacity(capacity),
            free_head: NIL,
            free_len: 0,
            in_use: 0,
            bases: Vec::with_capacity(capacity),
            free_base: NIL,
            bucket_heads: vec![NIL; buckets],
            bucket_bits: buckets.trailing_zeros(),
            slot_heads: Default::default(),
            dirty_slots: Default::default(),
            dirty_buckets: None,
            window_masks: [0; RING_COUNT],
            cursors: [0; RING_COUNT],
            prio_state: PRIO_SEED,
            stack: Vec::new(),
            hits: Vec::new(),
            #[cfg(test)]
            probe_stats: ProbeStats::default(),
        };
        map.reset(windows);
        map
    }

    /// Empties the map for a new run with these per-ring windows (powers of two). Costs the
    /// heads the last run touched (`O(buckets + Σ W_r)` at worst: a first reset, a window that
    /// changed size, or a run that touched more than a quarter of the heads); the pools keep
    /// their allocations.
    pub(crate) fn reset(&mut self, windows: [u64; RING_COUNT]) {
        self.entries.clear();
        self.nodes.clear();
        self.free_head = NIL;
        self.free_len = 0;
        self.in_use = 0;
        self.bases.clear();
        self.free_base = NIL;
        match self.dirty_buckets.as_mut() {
            Some(dirty) => dirty
                .drain(..)
                .for_each(|b| self.bucket_heads[b as usize] = NIL),
            None => self.bucket_heads.fill(NIL),
        }
        self.dirty_buckets = Some(self.dirty_buckets.take().unwrap_or_default());
        for (r, &w) in windows.iter().enumerate() {
            assert!(w.is_power_of_two(), "ring window must be a power of two");
            self.window_masks[r] = w - 1;
            let heads = &mut self.slot_heads[r];
            match self.dirty_slots[r].as_mut() {
                Some(dirty) if heads.len() == w as usize => {
                    dirty.drain(..).for_each(|slot| heads[slot as usize] = NIL);
                }
                _ => {
                    heads.clear();
                    heads.resize(w as usize, NIL);
                }
            }
            let mut dirty = self.dirty_slots[r].take().unwrap_or_default();
            dirty.clear();
            self.dirty_slots[r] = Some(dirty);
        }
        self.cursors = [0; RING_COUNT];
        self.prio_state = PRIO_SEED;
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
    #[cfg(test)]
    fn free_list_len(&self) -> usize {
        self.free_len
    }

    /// Retired ids below the cursor of `ring` have been cleaned up.
    #[cfg(test)]
    fn cursor(&self, ring: u8) -> u64 {
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
        assert!(
            usize::from(producer.ring()) < RING_COUNT,
            "TensorMap insert for {producer}"
        );
        let idx = self.alloc_entry(producer, tensor)?;
        let record = self.base_record(tensor.base());
        self.entries[idx as usize].record = record;
        self.tree_insert(record, idx);

        let (ring, slot) = self.slot_of(producer);
        let old = self.slot_heads[ring][slot];
        self.entries[idx as usize].slot_next = old;
        if old != NIL {
            self.entries[old as usize].slot_prev = idx;
        } else {
            let limit = self.slot_heads[ring].len() / 4;
            note_dirty(&mut self.dirty_slots[ring], slot as u32, limit);
        }
        self.slot_heads[ring][slot] = idx;
        Ok(EntryId(idx))
    }

    /// Takes an entry from the free list or the unused tail of the pool and fills it and its
    /// unlinked node.
    fn alloc_entry(&mut self, producer: TaskId, tensor: TensorDesc) -> Result<u32, Full> {
        if self.free_head == NIL && self.entries.len() == self.capacity {
            return Err(Full);
        }
        let span = Span::of(&tensor);
        let version = if span.is_empty() {
            i32::MAX
        } else {
            tensor.version()
        };
        let entry = Entry {
            producer,
            tensor,
            record: NIL,
            slot_prev: NIL,
            slot_next: NIL,
            in_use: true,
        };
        let node = Node {
            span,
            max_end: span.end,
            version,
            min_version: version,
            left: NIL,
            right: NIL,
            parent: NIL,
            prio: self.next_prio(),
        };
        let idx = if self.free_head != NIL {
            let idx = self.free_head;
            self.free_head = self.entries[idx as usize].slot_next;
            self.free_len -= 1;
            self.entries[idx as usize] = entry;
            self.nodes[idx as usize] = node;
            idx
        } else {
            self.entries.push(entry);
            self.nodes.push(node);
            (self.entries.len() - 1) as u32
        };
        self.in_use += 1;
        Ok(idx)
    }

    fn next_prio(&mut self) -> u32 {
        let mut x = self.prio_state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.prio_state = x;
        x
    }

    /// The record of `base`, if it has entries.
    fn find_base(&self, base: u64) -> Option<u32> {
        let mut rec = self.bucket_heads[self.bucket_of(base)];
        while rec != NIL {
            let r = &self.bases[rec as usize];
            if r.base == base {
                return Some(rec);
            }
            rec = r.next;
        }
        None
    }

    /// The record of `base`, created (with an empty treap) when the base has no entries. Never
    /// runs out: a new record comes with a new entry, and there are at most `capacity` of those.
    fn base_record(&mut self, base: u64) -> u32 {
        if let Some(rec) = self.find_base(base) {
            return rec;
        }
        let bucket = self.bucket_of(base);
        let head = self.bucket_heads[bucket];
        let record = BaseRecord {
            base,
            root: NIL,
            prev: NIL,
            next: head,
        };
        let rec = if self.free_base != NIL {
            let rec = self.free_base;
            self.free_base = self.bases[rec as usize].next;
            self.bases[rec as usize] = record;
            rec
        } else {
            debug_assert!(self.bases.len() < self.capacity);
            self.bases.push(record);
            (self.bases.len() - 1) as u32
        };
        if head != NIL {
            self.bases[head as usize].prev = rec;
        } else {
            let limit = self.bucket_heads.len() / 4;
            note_dirty(&mut self.dirty_buckets, bucket as u32, limit);
        }
        self.bucket_heads[bucket] = rec;
        rec
    }

    /// Unlinks the record of a base whose last entry left and puts it on the free list.
    fn free_base_record(&mut self, rec: u32) {
        let r = self.bases[rec as usize];
        debug_assert_eq!(r.root, NIL);
        if r.prev != NIL {
            self.bases[r.prev as usize].next = r.next;
        } else {
            let bucket = self.bucket_of(r.base);
            debug_assert_eq!(self.bucket_heads[bucket], rec);
            self.bucket_heads[bucket] = r.next;
        }
        if r.next != NIL {
            self.bases[r.next as usize].prev = r.prev;
        }
        self.bases[rec as usize].next = self.free_base;
        self.free_base = rec;
    }

    /// Frees an entry: takes it out of its treap and slot chain and pushes it on the free list.
    pub(crate) fn remove(&mut self, id: EntryId) {
        let idx = id.0;
        let e = self.entries[idx as usize];
        assert!(e.in_use, "TensorMap remove of a free entry");

        self.tree_remove(e.record, idx);
        if self.bases[e.record as usize].root == NIL {
            self.free_base_record(e.record);
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
        freed.slot_next = self.free_head;
        self.free_head = idx;
        self.free_len += 1;
        self.in_use -= 1;
    }

    // ----- the treap of one base -----

    /// Recomputes the subtree summary of `x` from its own values and its children's; returns
    /// whether it changed (when not, no ancestor's can have).
    fn pull(&mut self, x: u32) -> bool {
        let n = self.nodes[x as usize];
        let (mut max_end, mut min_version) = (n.span.end, n.version);
        for child in [n.left, n.right] {
            if child != NIL {
                let c = &self.nodes[child as usize];
                max_end = max_end.max(c.max_end);
                min_version = min_version.min(c.min_version);
            }
        }
        let n = &mut self.nodes[x as usize];
        let changed = (n.max_end, n.min_version) != (max_end, min_version);
        (n.max_end, n.min_version) = (max_end, min_version);
        changed
    }

    /// Makes `new` the child of `parent` in place of `old` (the root of `rec` when `parent` is
    /// `NIL`).
    fn replace_child(&mut self, rec: u32, parent: u32, old: u32, new: u32) {
        if parent == NIL {
            self.bases[rec as usize].root = new;
        } else if self.nodes[parent as usize].left == old {
            self.nodes[parent as usize].left = new;
        } else {
            debug_assert_eq!(self.nodes[parent as usize].right, old);
            self.nodes[parent as usize].right = new;
        }
    }

    /// Rotates `x` above its parent, keeping the search order and both summaries exact.
    fn rotate_up(&mut self, rec: u32, x: u32) {
        let p = self.nodes[x as usize].parent;
        let g = self.nodes[p as usize].parent;
        let mid = if self.nodes[p as usize].left == x {
            let mid = self.nodes[x as usize].right;
            self.nodes[p as usize].left = mid;
            self.nodes[x as usize].right = p;
            mid
        } else {
            let mid = self.nodes[x as usize].left;
            self.nodes[p as usize].right = mid;
            self.nodes[x as usize].left = p;
            mid
        };
        if mid != NIL {
            self.nodes[mid as usize].parent = p;
        }
        self.nodes[p as usize].parent = x;
        self.nodes[x as usize].parent = g;
        self.replace_child(rec, g, p, x);
        self.pull(p);
        self.pull(x);
    }

    /// Adds the unlinked node `x` to the treap of `rec`.
    fn tree_insert(&mut self, rec: u32, x: u32) {
        let n = self.nodes[x as usize];
        let key = (n.span.start, x);
        let (mut parent, mut cur, mut left) = (NIL, self.bases[rec as usize].root, false);
        while cur != NIL {
            // Every node on the way gets `x` in its subtree.
            let c = &mut self.nodes[cur as usize];
            c.max_end = c.max_end.max(n.span.end);
            c.min_version = c.min_version.min(n.version);
            left = key < (c.span.start, cur);
            parent = cur;
            cur = if left { c.left } else { c.right };
        }
        self.nodes[x as usize].parent = parent;
        if parent == NIL {
            self.bases[rec as usize].root = x;
        } else if left {
            self.nodes[parent as usize].left = x;
        } else {
            self.nodes[parent as usize].right = x;
        }
        loop {
            let p = self.nodes[x as usize].parent;
            if p == NIL || self.nodes[p as usize].prio >= n.prio {
                break;
            }
            self.rotate_up(rec, x);
        }
    }

    /// Takes node `x` out of the treap of `rec`: rotates it down below its higher-priority
    /// child until it has at most one child, splices it out and repairs the summaries above.
    fn tree_remove(&mut self, rec: u32, x: u32) {
        loop {
            let n = self.nodes[x as usize];
            if n.left == NIL || n.right == NIL {
                break;
            }
            let (l, r) = (n.left, n.right);
            let up = if self.nodes[l as usize].prio > self.nodes[r as usize].prio {
                l
            } else {
                r
            };
            self.rotate_up(rec, up);
        }
        let n = self.nodes[x as usize];
        let child = if n.left != NIL { n.left } else { n.right };
        if child != NIL {
            self.nodes[child as usize].parent = n.parent;
        }
        self.replace_child(rec, n.parent, x, child);
        let mut up = n.parent;
        while up != NIL && self.pull(up) {
            up = self.nodes[up as usize].parent;
        }
    }

    // ----- lookup and cleanup -----

    /// Calls `f` for every live entry of `probe.base()` that overlaps the probe (`Covered` or
    /// `Other`), in no particular order. `f` may ask to free the entry it was given: the hits
    /// are all found before the first call, so a removal neither disturbs the search nor
    /// invalidates the other hits' handles.
    ///
    /// `last_alive[r]` is ring `r`'s current watermark; older producers are stale and skipped.
    pub(crate) fn lookup(
        &mut self,
        probe: &TensorDesc,
        last_alive: &[u64; RING_COUNT],
        mut f: impl FnMut(Hit) -> Visit,
    ) {
        let mut hits = std::mem::take(&mut self.hits);
        self.find_hits(probe, last_alive, &mut hits);
        for &hit in &hits {
            if f(hit) == Visit::Remove {
                self.remove(hit.entry);
            }
        }
        hits.clear();
        self.hits = hits;
    }

    /// Appends the hits of `probe` to `hits`, descending only into subtrees that can hold a
    /// candidate: an entry whose bytes intersect the probe's, or an older version. Every hit is
    /// a candidate (`classify` says `NoOverlap` for the others), so none is missed.
    fn find_hits(
        &mut self,
        probe: &TensorDesc,
        last_alive: &[u64; RING_COUNT],
        hits: &mut Vec<Hit>,
    ) {
        #[cfg(test)]
        {
            self.probe_stats = ProbeStats::default();
        }
        let span = Span::of(probe);
        let Some(rec) = self.find_base(probe.base()).filter(|_| !span.is_empty()) else {
            return;
        };
        let version = probe.version();
        // A subtree is worth entering if some entry in it ends after the probe starts (the
        // caller checks that starts can be below the probe's end) or is an older version.
        let worth =
            |n: &Node, bytes: bool| (bytes && n.max_end > span.start) || n.min_version < version;
        let mut stack = std::mem::take(&mut self.stack);
        let root = self.bases[rec as usize].root;
        if worth(&self.nodes[root as usize], true) {
            stack.push(root);
        }
        while let Some(x) = stack.pop() {
            let n = self.nodes[x as usize];
            #[cfg(test)]
            {
                self.probe_stats.visited += 1;
            }
            if n.left != NIL && worth(&self.nodes[n.left as usize], true) {
                stack.push(n.left);
            }
            // Right starts are ≥ this start: no byte intersection once it reaches the end.
            let bytes = n.span.start < span.end;
            if n.right != NIL && worth(&self.nodes[n.right as usize], bytes) {
                stack.push(n.right);
            }
            if !(n.span.intersects(span) || n.version < version) {
                continue;
            }
            let e = &self.entries[x as usize];
            if e.producer.local() < last_alive[usize::from(e.producer.ring())] {
                continue;
            }
            #[cfg(test)]
            {
                self.probe_stats.classified += 1;
            }
            let overlap = classify(probe, span, &e.tensor, n.span);
            if overlap != Overlap::NoOverlap {
                hits.push(Hit {
                    entry: EntryId(x),
                    producer: e.producer,
                    overlap,
                });
            }
        }
        self.stack = stack;
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

/// Records that head `index` became non-`NIL`; past `limit` entries the list gives up (`None`)
/// and the next reset clears every head, which then costs no more than the list would have.
fn note_dirty(list: &mut Option<Vec<u32>>, index: u32, limit: usize) {
    if let Some(dirty) = list {
        if dirty.len() < limit.max(1) {
            dirty.push(index);
        } else {
            *list = None;
        }
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

    /// Lookup hits as `(producer, overlap)` in producer order (the map's order is unspecified),
    /// keeping every entry.
    #[track_caller]
    fn hits(
        map: &mut TensorMap,
        probe: &TensorDesc,
        last_alive: [u64; 4],
    ) -> Vec<(TaskId, Overlap)> {
        let mut out = Vec::new();
        map.lookup(probe, &last_alive, |h| {
            out.push((h.producer, h.overlap));
            Visit::Keep
        });
        out.sort_unstable_by_key(|h| h.0);
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
        /// Walks every chain and treap and checks the invariants listed on the types.
        #[track_caller]
        fn check_invariants(&self) {
            if let Some(dirty) = &self.dirty_buckets {
                for (b, &head) in self.bucket_heads.iter().enumerate() {
                    assert!(
                        head == NIL || dirty.contains(&(b as u32)),
                        "bucket {b} not dirty"
                    );
                }
            }
            for (r, heads) in self.slot_heads.iter().enumerate() {
                if let Some(dirty) = &self.dirty_slots[r] {
                    for (slot, &head) in heads.iter().enumerate() {
                        assert!(
                            head == NIL || dirty.contains(&(slot as u32)),
                            "slot {r}:{slot}"
                        );
                    }
                }
            }
            let mut seen_tree = 0;
            let mut seen_bases = std::collections::HashSet::new();
            for (b, &head) in self.bucket_heads.iter().enumerate() {
                let (mut prev, mut rec) = (NIL, head);
                while rec != NIL {
                    let r = &self.bases[rec as usize];
                    assert_eq!(r.prev, prev);
                    assert_eq!(self.bucket_of(r.base), b);
                    assert!(seen_bases.insert(r.base), "two records of {:#x}", r.base);
                    assert_ne!(r.root, NIL);
                    assert_eq!(self.nodes[r.root as usize].parent, NIL);
                    let (size, _, _) = self.check_subtree(rec, r.root, None, None);
                    seen_tree += size;
                    (prev, rec) = (rec, r.next);
                }
            }
            let mut free_bases = 0;
            let mut rec = self.free_base;
            while rec != NIL {
                free_bases += 1;
                rec = self.bases[rec as usize].next;
            }
            assert_eq!(seen_bases.len() + free_bases, self.bases.len());
            assert!(self.bases.len() <= self.capacity);
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
                idx = self.entries[idx as usize].slot_next;
            }
            assert_eq!(seen_tree, self.in_use);
            assert_eq!(seen_slot, self.in_use);
            assert_eq!(free, self.free_len);
            assert_eq!(self.in_use + self.free_len, self.entries.len());
            assert_eq!(self.nodes.len(), self.entries.len());
            assert!(self.entries.len() <= self.capacity);
        }

        /// Checks the subtree at `x` of record `rec`, whose keys must lie strictly between the
        /// bounds; returns its size, largest end and smallest version.
        fn check_subtree(
            &self,
            rec: u32,
            x: u32,
            lo: Option<(u64, u32)>,
            hi: Option<(u64, u32)>,
        ) -> (usize, u64, i32) {
            let n = self.nodes[x as usize];
            let e = &self.entries[x as usize];
            assert!(e.in_use);
            assert_eq!(e.record, rec);
            assert_eq!(e.tensor.base(), self.bases[rec as usize].base);
            assert_eq!(n.span, Span::of(&e.tensor));
            let version = if n.span.is_empty() {
                i32::MAX
            } else {
                e.tensor.version()
            };
            assert_eq!(n.version, version);
            let key = (n.span.start, x);
            assert!(lo.is_none_or(|lo| lo < key) && hi.is_none_or(|hi| key < hi));
            let (mut size, mut max_end, mut min_version) = (1, n.span.end, n.version);
            for (child, lo, hi) in [(n.left, lo, Some(key)), (n.right, Some(key), hi)] {
                if child == NIL {
                    continue;
                }
                let c = self.nodes[child as usize];
                assert_eq!(c.parent, x);
                assert!(c.prio <= n.prio, "heap order");
                let (s, m, v) = self.check_subtree(rec, child, lo, hi);
                size += s;
                max_end = max_end.max(m);
                min_version = min_version.min(v);
            }
            assert_eq!(
                (n.max_end, n.min_version),
                (max_end, min_version),
                "summary of {x}"
            );
            (size, max_end, min_version)
        }
    }

    // ----- §10 rows M1–M12 -----

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
        map.lookup(&x, &alive, |h| {
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
        assert_eq!(got, [id(0, 0), id(0, 2), id(0, 3), id(0, 4)]);
    }

    #[test]
    fn remove_middle_head_and_tail() {
        let mut map = m_map();
        let t = tensor(X, &[16]);
        let e: Vec<EntryId> = (0..5)
            .map(|l| map.insert(id(1, l * 32), t).unwrap())
            .collect();
        // All five share a treap and a slot chain.
        for victim in [e[2], e[4], e[0]] {
            map.remove(victim);
            map.check_invariants();
        }
        let got: Vec<TaskId> = hits(&mut map, &t, [0; 4])
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(got, [id(1, 32), id(1, 96)]);
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
        assert_eq!(got, [id(3, 10), id(3, 11)]);
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

    // ----- the region index -----

    #[test]
    fn lookup_visits_only_overlapping_writers() {
        use Overlap::*;
        // A 1-D stencil's window: N disjoint writers of W elements of one grid.
        const N: u32 = 10_000;
        const W: u32 = 16;
        // A treap of 10 000 nodes is about 30 deep; a full scan would visit all 10 000.
        const BOUND: usize = 80;
        let grid = tensor(X, &[N * W]);
        let mut map = TensorMap::new(N as usize + 1, 16, [1 << 14; RING_COUNT]);
        // Inserted in a scrambled order (7919 is prime to N): the shape owes nothing to it.
        for k in 0..N {
            let i = k * 7919 % N;
            let view = grid.slice(0, i * W, W).unwrap();
            map.insert(id(0, u64::from(i)), view).unwrap();
        }
        let mut worst = 0;
        for i in (0..N - 1).step_by(97) {
            // Straddles writers i and i + 1.
            let probe = grid.slice(0, i * W + W / 2, W).unwrap();
            let got = hits(&mut map, &probe, [0; 4]);
            let (a, b) = (u64::from(i), u64::from(i + 1));
            assert_eq!(got, [(id(0, a), Other), (id(0, b), Other)]);
            assert_eq!(map.probe_stats.classified, 2);
            worst = worst.max(map.probe_stats.visited);
        }
        assert!(worst <= BOUND, "a lookup visited {worst} of {N} entries");
        // One writer of the whole grid does not widen the search for the others.
        map.insert(id(1, 0), grid).unwrap();
        let probe = grid.slice(0, 5 * W, W).unwrap();
        let got = hits(&mut map, &probe, [0; 4]);
        assert_eq!(got, [(id(0, 5), Covered), (id(1, 0), Other)]);
        assert_eq!(map.probe_stats.classified, 2);
        assert!(map.probe_stats.visited <= BOUND);
        map.check_invariants();
    }

    #[test]
    fn newer_version_probe_hits_disjoint_writers() {
        let buf = tensor(X, &[64]);
        let mut map = m_map();
        for i in 0..4u32 {
            let view = buf.slice(0, i * 16, 16).unwrap().with_version(i as i32 % 2);
            map.insert(id(0, u64::from(i)), view).unwrap();
        }
        // Bytes 0..64 only touch writer 0, but step 1 makes every older version a hit.
        let probe = buf.slice(0, 0, 16).unwrap().with_version(1);
        assert_eq!(
            hits(&mut map, &probe, [0; 4]),
            [(id(0, 0), Overlap::Other), (id(0, 2), Overlap::Other)]
        );
        // No version older than 0: only the byte overlap counts, and only it is classified.
        let probe = buf.slice(0, 16, 16).unwrap();
        assert_eq!(
            hits(&mut map, &probe, [0; 4]),
            [(id(0, 1), Overlap::Covered)]
        );
        assert_eq!(map.probe_stats.classified, 1);
        // Empty entries and probes overlap nothing, whatever their versions.
        map.insert(id(0, 4), buf.slice(0, 8, 0).unwrap()).unwrap();
        let empty = buf.slice(0, 8, 0).unwrap().with_version(5);
        assert_eq!(hits(&mut map, &empty, [0; 4]), []);
        let newest = buf.slice(0, 0, 1).unwrap().with_version(5);
        assert_eq!(hits(&mut map, &newest, [0; 4]).len(), 4);
        assert_eq!(map.probe_stats.classified, 4);
        assert_eq!(hits(&mut map, &buf.with_version(-1), [0; 4]).len(), 4);
        map.check_invariants();
    }

    #[test]
    fn reset_keeps_the_pools() {
        let mut map = TensorMap::new(64, 4, [32; RING_COUNT]);
        let pools =
            |map: &TensorMap| (map.entries.as_ptr(), map.nodes.as_ptr(), map.bases.as_ptr());
        let before = pools(&map);
        for round in 0..3 {
            // Distinct bases, so every insert also takes a base record.
            for local in 0..64 {
                let t = tensor(X + local * 0x100, &[16]);
                map.insert(id(0, local), t).unwrap();
            }
            assert_eq!(map.insert(id(0, 64), tensor(X, &[16])), Err(Full));
            map.check_invariants();
            assert_eq!(pools(&map), before, "round {round}");
            map.reset([32; RING_COUNT]);
        }
    }

    #[test]
    fn reset_clears_every_head_a_run_touched() {
        // 8 buckets and window 32: a few inserts stay on the dirty lists, many overflow them.
        for inserts in [1u64, 3, 40] {
            for next_window in [32u64, 64] {
                let mut map = TensorMap::new(64, 8, [32; RING_COUNT]);
                for local in 0..inserts {
                    let t = tensor(X + local * 0x100, &[16]);
                    map.insert(id((local % 4) as u8, local), t).unwrap();
                }
                map.check_invariants();
                map.reset([next_window; RING_COUNT]);
                assert!(map.bucket_heads.iter().all(|&h| h == NIL));
                assert!(map.slot_heads.iter().flatten().all(|&h| h == NIL));
                assert!(
                    map.slot_heads
                        .iter()
                        .all(|h| h.len() == next_window as usize)
                );
                map.check_invariants();
                // The map works after the reset.
                map.insert(id(0, 0), tensor(X, &[16])).unwrap();
                assert_eq!(hits(&mut map, &tensor(X, &[16]), [0; 4]).len(), 1);
            }
        }
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
        base_tensor_at(X)
    }

    /// A whole 1-D or 2-D f32 buffer at `base`, maybe with unused elements at its end.
    fn base_tensor_at(base: u64) -> impl Strategy<Value = TensorDesc> {
        let shape = prop_oneof![
            (1u32..=64).prop_map(|n| vec![n]),
            (1u32..=8, 1u32..=8).prop_map(|(r, c)| vec![r, c]),
        ];
        (shape, 0u64..=16).prop_map(move |(shape, slack)| {
            let numel: u64 = shape.iter().map(|&n| u64::from(n)).product();
            TensorDesc::contiguous(base, (numel + slack) * 4, &shape, DType::F32).unwrap()
        })
    }

    /// One to three buffers, at distinct bases.
    fn buffers() -> impl Strategy<Value = Vec<TensorDesc>> {
        (1usize..=3).prop_flat_map(|n| {
            (0..n)
                .map(|i| base_tensor_at(X + 0x1000 * i as u64))
                .collect::<Vec<_>>()
        })
    }

    /// A view: `(buffer, steps, version)`, the steps applied to the whole buffer (nested,
    /// strided, transposed, flattened and empty views all occur).
    type ViewSpec = (usize, Vec<Step>, i32);

    fn view_spec(max_version: i32) -> impl Strategy<Value = ViewSpec> {
        (
            0usize..3,
            prop::collection::vec(any::<Step>(), 0..4),
            0..=max_version,
        )
    }

    fn make_view(buffers: &[TensorDesc], (b, steps, version): &ViewSpec) -> TensorDesc {
        let whole = buffers[b % buffers.len()];
        steps
            .iter()
            .fold(whole, |t, &s| apply(t, s))
            .with_version(*version)
    }

    /// One step of [`index_matches_brute_force`]: `(op, ring, local, entry view, probe view,
    /// remove covered hits)`.
    type IndexOp = (u8, u8, u64, ViewSpec, ViewSpec, bool);

    /// The brute-force lookup: every live entry of the model, classified against `probe`.
    fn scan(
        model: &BTreeMap<u32, (TaskId, TensorDesc)>,
        probe: &TensorDesc,
        last_alive: &[u64; RING_COUNT],
    ) -> (Vec<(u32, Overlap)>, usize) {
        let live: Vec<(u32, TensorDesc)> = model
            .iter()
            .filter(|(_, (p, e))| {
                e.base() == probe.base() && p.local() >= last_alive[usize::from(p.ring())]
            })
            .map(|(&k, &(_, e))| (k, e))
            .collect();
        // What the index must examine: the live entries that intersect in bytes or are older.
        let (ps, empty) = (Span::of(probe), probe.is_empty());
        let candidates = live
            .iter()
            .filter(|(_, e)| {
                let es = Span::of(e);
                !empty && !es.is_empty() && (ps.intersects(es) || e.version() < probe.version())
            })
            .count();
        let hits = live
            .iter()
            .map(|&(k, e)| (k, classify_overlap(probe, &e)))
            .filter(|&(_, o)| o != Overlap::NoOverlap)
            .collect();
        (hits, candidates)
    }

    /// Applies one non-lookup step of [`index_matches_brute_force`] to the map and the model.
    fn apply_index_op(
        map: &mut TensorMap,
        model: &mut BTreeMap<u32, (TaskId, TensorDesc)>,
        last_alive: &mut [u64; RING_COUNT],
        buffers: &[TensorDesc],
        (op, ring, local, view, _, _): &IndexOp,
    ) -> Result<(), TestCaseError> {
        let (ring, r) = (*ring, usize::from(*ring));
        match op {
            // Producers are live when they register (local ≥ watermark).
            0..=2 => {
                let producer = id(ring, (*local).max(last_alive[r]));
                let t = make_view(buffers, view);
                match map.insert(producer, t) {
                    Ok(e) => prop_assert!(model.insert(e.0, (producer, t)).is_none()),
                    Err(Full) => prop_assert_eq!(model.len(), map.capacity()),
                }
            }
            3 => {
                if let Some(&k) = model.keys().nth(*local as usize % model.len().max(1)) {
                    map.remove(EntryId(k));
                    model.remove(&k);
                }
            }
            // The watermark moves; the stale entries stay until a cleanup.
            4 => last_alive[r] = last_alive[r].max(*local),
            5 => {
                let from = map.cursor(ring);
                let to = last_alive[r].max(*local);
                map.cleanup_retired(ring, from, to);
                last_alive[r] = to;
                model.retain(|_, (p, _)| p.ring() != ring || !(from..to).contains(&p.local()));
            }
            _ => {
                let from: [u64; RING_COUNT] = std::array::from_fn(|r| map.cursor(r as u8));
                map.cleanup_all(last_alive);
                model.retain(|_, (p, _)| {
                    let r = usize::from(p.ring());
                    !(from[r]..last_alive[r]).contains(&p.local())
                });
            }
        }
        Ok(())
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
                map.lookup(&t, &last_alive, |h| {
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Random inserts, removals, watermark moves and cleanups of random views over one to
        /// three buffers, each followed by a lookup of a random probe (removing its covered hits
        /// or not): the region index reports exactly the hits of a scan of every live entry, and
        /// classifies exactly the live entries that intersect the probe's bytes or are older.
        #[test]
        fn index_matches_brute_force(
            buffers in buffers(),
            buckets in prop_oneof![Just(1usize), Just(2), Just(8)],
            ops in prop::collection::vec(
                (0u8..7, 0u8..4, 0u64..48, view_spec(1), view_spec(2), any::<bool>()),
                1..100,
            ),
        ) {
            let mut map = TensorMap::new(24, buckets, [8; RING_COUNT]);
            let mut model: BTreeMap<u32, (TaskId, TensorDesc)> = BTreeMap::new();
            let mut last_alive = [0u64; RING_COUNT];
            for op in &ops {
                apply_index_op(&mut map, &mut model, &mut last_alive, &buffers, op)?;
                map.check_invariants();
                prop_assert_eq!(map.live_count(), model.len());
                let (probe, remove_covered) = (make_view(&buffers, &op.4), op.5);
                let (want, candidates) = scan(&model, &probe, &last_alive);
                let mut got = Vec::new();
                map.lookup(&probe, &last_alive, |h| {
                    got.push((h.entry.0, h.overlap));
                    if remove_covered && h.overlap == Overlap::Covered {
                        Visit::Remove
                    } else {
                        Visit::Keep
                    }
                });
                prop_assert_eq!(map.probe_stats.classified, candidates);
                got.sort_unstable_by_key(|g| g.0);
                prop_assert_eq!(&got, &want, "probe {}", probe);
                for &(k, o) in &got {
                    if remove_covered && o == Overlap::Covered {
                        model.remove(&k);
                    }
                }
                map.check_invariants();
                prop_assert_eq!(map.live_count(), model.len());
            }
        }
    }
}
