//! The TensorMap: which live tasks last wrote each region of each buffer.
//!
//! Implements CHIP_RUNTIME.md §3.7 (TensorMap, overlap classification, cleanup). Used by submit
//! steps 6, 8 and 10 (§3.2). The map is orchestrator-private: one thread owns it, so it needs no
//! synchronisation.
//!
//! # Classification
//!
//! Step 1 of §3.7 is chip semantics and stays here: a probe of a newer version than an entry
//! depends on it whatever their bytes. The rest (steps 2–5) is the one tensor geometry of both
//! levels, [`pto_types::geometry`]: sound always, and exact in the classes its module doc lists
//! (which hold every case the tabled steps decide, and more: transposed views, other dtypes,
//! interleaved views, no buffer-capacity rule).
//!
//! # Region index
//!
//! A lookup costs O(writers that overlap the probe), not O(live writers of the buffer): the
//! entries of each buffer base form a tree of the shared region index
//! ([`pto_types::geometry::IntervalForest`]), ordered by byte start, whose nodes also carry the
//! largest byte end and the oldest version of their subtree ([`Oldest`]). A lookup descends only
//! into subtrees that can hold a candidate: an entry whose bytes intersect the probe's, or whose
//! version is older than the probe's (step 1 makes such an entry a hit whatever its bytes).
//! Reaching `k` candidates costs `O(k · log n)`, and `O(k + log n)` when the entries are
//! disjoint.
//!
//! Each entry's [`Geometry`] (and so its byte span) is computed once, at insert; a lookup
//! computes the probe's once. One record per buffer base with entries holds its tree's root; the
//! records sit in the hash chains, so a lookup finds its tree in O(1) expected. Entries, index
//! nodes and records are pools sized at construction and reused by [`TensorMap::reset`]: an
//! insert or a removal allocates nothing.

use pto_types::RING_COUNT;
use pto_types::geometry::{Geometry, IntervalForest, NIL, Overlap, Summary};

use crate::task_id::TaskId;
use crate::tensor::TensorDesc;

/// Stale entries are cleaned once the watermark has moved this far since the last cleanup.
/// CHIP_RUNTIME.md §3.7 says 64. But until it is cleaned, a stale entry stays in its tree, and
/// every lookup whose probe overlaps it visits it, while the cleaning costs the same per entry
/// whatever the batch: a smaller batch adds only a call per so many retired tasks. 16 made
/// the inferred stencil_1d submit 17-25 % cheaper than 64 (`submit_point`, window 1024:
/// 0.61-0.74 → 0.50-0.52 µs per task; independent tasks 0.28-0.31 → 0.21-0.23), and 1, 4
/// and 8 measured as 16 (BENCHMARKS.md, "Issue 25, stop 46").
pub(crate) const CLEANUP_BATCH: u64 = 16;

/// [`classify`] of two descriptors: the tests' entry point.
#[cfg(test)]
pub(crate) fn classify_overlap(p: &TensorDesc, e: &TensorDesc) -> Overlap {
    classify(p.version(), &p.geometry(), e.version(), &e.geometry())
}

/// Classifies a probe (version `p_version`, bytes `p`) against an entry of the same buffer
/// (§3.7): empty views overlap nothing, step 1 (a newer probe version is `Other`), then the
/// shared geometry (steps 2–5).
fn classify(p_version: i32, p: &Geometry, e_version: i32, e: &Geometry) -> Overlap {
    if p.is_empty() || e.is_empty() {
        return Overlap::NoOverlap;
    }
    if p_version > e_version {
        return Overlap::Other;
    }
    p.classify(e)
}

/// Most contiguous runs per view walked to decide a reader entry's overlap exactly.
const READER_EXACT_RUNS: usize = 4096;

/// A reader entry's overlap where the geometry cannot tell (`Other`), decided byte for byte
/// ([`Geometry::runs_share_bytes`]): a reader found by a write that shares no byte with it would
/// be a write-after-read hazard the check reports, or an edge `track_war` adds, for nothing.
/// Past [`READER_EXACT_RUNS`] runs it stays `Other` (sound: an edge, or a report). Writer
/// entries keep the cheaper classification: an edge too many only orders.
fn exact_for_reader(probe: &Geometry, entry: &Geometry) -> Overlap {
    match probe.runs_share_bytes(entry, READER_EXACT_RUNS) {
        Some(false) => Overlap::NoOverlap,
        _ => Overlap::Other,
    }
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

/// What an entry records about its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The task writes the bytes (submit step 10).
    Writer,
    /// The task reads the bytes (CHIP_RUNTIME.md §3.8): a later writer of overlapping bytes
    /// waits for it when `tracked` (`track_war`, a `TrackedInput`); otherwise the entry is
    /// only there for the write-after-read check.
    Reader { tracked: bool },
}

/// One live entry overlapping a lookup probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    pub(crate) entry: EntryId,
    pub(crate) producer: TaskId,
    /// `Covered` or `Other`, never `NoOverlap`.
    pub(crate) overlap: Overlap,
    pub(crate) role: Role,
}

/// The entry pool is exhausted (the caller cleans up, waits, or fails with code 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("TensorMap pool is full")]
pub(crate) struct Full;

const GOLDEN_RATIO: u64 = 0x9E37_79B9_7F4A_7C15;

/// The index summary of a subtree: its oldest version (`i32::MAX` stands for an empty entry,
/// which overlaps nothing, not even a newer probe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Oldest(i32);

impl Summary for Oldest {
    fn combine(self, other: Oldest) -> Oldest {
        Oldest(self.0.min(other.0))
    }
}

/// The index summary of one entry.
fn index_version(e: &Entry) -> Oldest {
    Oldest(if e.geometry.is_empty() {
        i32::MAX
    } else {
        e.version
    })
}

/// One pool entry: a writer and the bytes it writes.
///
/// While `in_use`, the entry is in exactly one slot chain (`(producer.ring(),
/// producer.slot(mask))`, `slot_prev`/`slot_next` consistent both ways, `NIL` ending it) and
/// its index node (same index) is in the tree of base record `record`, with the span of
/// `geometry` and [`Oldest`]`(version)` (`i32::MAX` when the geometry is empty). While free, it
/// is on the free list, linked through `slot_next`, and the other fields are meaningless.
#[derive(Clone, Copy, Debug)]
struct Entry {
    producer: TaskId,
    role: Role,
    geometry: Geometry,
    version: i32,
    record: u32,
    slot_prev: u32,
    slot_next: u32,
    in_use: bool,
}

/// A buffer base with entries: the root of its tree.
///
/// While in use: `root` is not `NIL`, the tree holds exactly the in-use entries inserted with
/// this `base`, no other record has this `base`, and `prev`/`next` link the hash chain of the
/// bucket of `base`. While free, it is on the record free list through `next`.
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
    /// Index nodes the descent entered.
    visited: usize,
    /// Live candidates handed to [`classify`].
    classified: usize,
}

/// The TensorMap (§3.7).
///
/// Invariants:
/// - `entries.len() == index.len() ≤ capacity`; entries `0..entries.len()` have been handed out
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
    index: IntervalForest<Oldest>,
    free_head: u32,
    free_len: usize,
    in_use: usize,
    /// Entries in use with [`Role::Reader`]: writers look for readers only when there are any.
    readers: usize,
    bases: Vec<BaseRecord>,
    free_base: u32,
    bucket_heads: Vec<u32>,
    bucket_bits: u32,
    slot_heads: [Vec<u32>; RING_COUNT],
    dirty_slots: [Option<Vec<u32>>; RING_COUNT],
    dirty_buckets: Option<Vec<u32>>,
    window_masks: [u64; RING_COUNT],
    cursors: [u64; RING_COUNT],
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
            index: IntervalForest::with_capacity(capacity),
            free_head: NIL,
            free_len: 0,
            in_use: 0,
            readers: 0,
            bases: Vec::with_capacity(capacity),
            free_base: NIL,
            bucket_heads: vec![NIL; buckets],
            bucket_bits: buckets.trailing_zeros(),
            slot_heads: Default::default(),
            dirty_slots: Default::default(),
            dirty_buckets: None,
            window_masks: [0; RING_COUNT],
            cursors: [0; RING_COUNT],
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
        self.index.clear();
        self.free_head = NIL;
        self.free_len = 0;
        self.in_use = 0;
        self.readers = 0;
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
    }

    /// Pool size.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries in use, stale ones not yet cleaned included (scope stats `tensormap`).
    pub(crate) fn live_count(&self) -> usize {
        self.in_use
    }

    /// Whether any reader entry is in use (stale ones not yet cleaned included).
    pub(crate) fn has_readers(&self) -> bool {
        self.readers > 0
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
    #[cfg(test)]
    pub(crate) fn insert(&mut self, producer: TaskId, tensor: TensorDesc) -> Result<EntryId, Full> {
        self.insert_as(producer, tensor, Role::Writer)
    }

    /// Records that `producer` writes or reads `tensor`.
    pub(crate) fn insert_as(
        &mut self,
        producer: TaskId,
        tensor: TensorDesc,
        role: Role,
    ) -> Result<EntryId, Full> {
        assert!(
            usize::from(producer.ring()) < RING_COUNT,
            "TensorMap insert for {producer}"
        );
        let idx = self.alloc_entry(producer, &tensor, role)?;
        let record = self.base_record(tensor.base());
        self.entries[idx as usize].record = record;
        let mut root = self.bases[record as usize].root;
        self.index.insert(&mut root, idx);
        self.bases[record as usize].root = root;

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
    /// unlinked index node.
    fn alloc_entry(
        &mut self,
        producer: TaskId,
        tensor: &TensorDesc,
        role: Role,
    ) -> Result<u32, Full> {
        if self.free_head == NIL && self.entries.len() == self.capacity {
            return Err(Full);
        }
        let geometry = tensor.geometry();
        let entry = Entry {
            producer,
            role,
            geometry,
            version: tensor.version(),
            record: NIL,
            slot_prev: NIL,
            slot_next: NIL,
            in_use: true,
        };
        let idx = if self.free_head != NIL {
            let idx = self.free_head;
            self.free_head = self.entries[idx as usize].slot_next;
            self.free_len -= 1;
            self.entries[idx as usize] = entry;
            idx
        } else {
            self.entries.push(entry);
            (self.entries.len() - 1) as u32
        };
        self.index.set(idx, geometry.span(), index_version(&entry));
        self.in_use += 1;
        if role != Role::Writer {
            self.readers += 1;
        }
        Ok(idx)
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

    /// The record of `base`, created (with an empty tree) when the base has no entries. Never
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

    /// Frees an entry: takes it out of its tree and slot chain and pushes it on the free list.
    pub(crate) fn remove(&mut self, id: EntryId) {
        let idx = id.0;
        let e = self.entries[idx as usize];
        assert!(e.in_use, "TensorMap remove of a free entry");

        let mut root = self.bases[e.record as usize].root;
        self.index.remove(&mut root, idx);
        self.bases[e.record as usize].root = root;
        if root == NIL {
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
        if e.role != Role::Writer {
            self.readers -= 1;
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

    /// Appends the hits of `probe` to `hits`: the index yields the entries whose bytes intersect
    /// the probe's or that are older versions, and [`classify`] says `NoOverlap` for all others,
    /// so none is missed.
    fn find_hits(
        &mut self,
        probe: &TensorDesc,
        last_alive: &[u64; RING_COUNT],
        hits: &mut Vec<Hit>,
    ) {
        let geometry = probe.geometry();
        let Some(rec) = self
            .find_base(probe.base())
            .filter(|_| !geometry.is_empty())
        else {
            self.note_probe(0, 0);
            return;
        };
        let version = probe.version();
        let entries = &self.entries;
        let mut classified = 0;
        let visited = self.index.search(
            self.bases[rec as usize].root,
            geometry.span(),
            |oldest| oldest.0 < version,
            &mut self.stack,
            |x| {
                let e = &entries[x as usize];
                if e.producer.local() < last_alive[usize::from(e.producer.ring())] {
                    return;
                }
                classified += 1;
                let mut overlap = classify(version, &geometry, e.version, &e.geometry);
                let reader = matches!(e.role, Role::Reader { .. });
                if overlap == Overlap::Other && reader && e.version == version {
                    overlap = exact_for_reader(&geometry, &e.geometry);
                }
                if overlap != Overlap::NoOverlap {
                    hits.push(Hit {
                        entry: EntryId(x),
                        producer: e.producer,
                        overlap,
                        role: e.role,
                    });
                }
            },
        );
        self.note_probe(visited, classified);
    }

    #[cfg(test)]
    fn note_probe(&mut self, visited: usize, classified: usize) {
        self.probe_stats = ProbeStats {
            visited,
            classified,
        };
    }

    #[cfg(not(test))]
    fn note_probe(&mut self, _visited: usize, _classified: usize) {}

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
            freed += self.cleanup_ring(r as u8, alive);
        }
        freed
    }

    /// Cleans `ring` up to its watermark now, whatever [`cleanup_due`] says. Returns entries
    /// freed.
    pub(crate) fn cleanup_ring(&mut self, ring: u8, last_alive: u64) -> usize {
        self.cleanup_retired(ring, self.cursors[usize::from(ring)], last_alive)
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

    use crate::tensor::BufferAddr;

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

    #[test]
    fn a_reader_entry_that_shares_no_byte_with_the_write_is_no_hit() {
        // u32 views with strides [8, 1] of one buffer: the reader's rows (elements 47-48 and
        // 55-56) interleave with the writer's (42-45, 50-53) without sharing a byte, which the
        // geometry alone cannot tell.
        let grid = |offset: u64, shape: &[u32]| {
            TensorDesc::new(
                BufferAddr::device(X, 256),
                offset,
                shape,
                &[8, 1],
                DType::U32,
            )
            .unwrap()
        };
        let (read, write, touching) = (grid(47, &[2, 2]), grid(42, &[2, 4]), grid(45, &[2, 2]));
        for tracked in [false, true] {
            let mut map = m_map();
            map.insert_as(id(0, 0), read, Role::Reader { tracked })
                .unwrap();
            assert_eq!(hits(&mut map, &write, [0; 4]), vec![], "tracked {tracked}");
            map.insert_as(id(0, 1), touching, Role::Reader { tracked })
                .unwrap();
            assert_eq!(
                hits(&mut map, &write, [0; 4]),
                vec![(id(0, 1), Overlap::Other)]
            );
        }
        // A writer entry keeps the geometry's answer: an edge too many only orders.
        let mut map = m_map();
        map.insert(id(0, 0), read).unwrap();
        assert_eq!(
            hits(&mut map, &write, [0; 4]),
            vec![(id(0, 0), Overlap::Other)]
        );
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
                    seen_tree += self.check_tree(rec);
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
            assert_eq!(self.index.len(), self.entries.len());
            assert!(self.entries.len() <= self.capacity);
        }

        /// Checks the tree of record `rec` (the index checks its own invariants) and that it
        /// holds in-use entries of that record, each with its span and version; returns its
        /// size.
        fn check_tree(&self, rec: u32) -> usize {
            self.index.check_tree(self.bases[rec as usize].root, |x| {
                let e = &self.entries[x as usize];
                assert!(e.in_use);
                assert_eq!(e.record, rec);
                assert_eq!(self.index.get(x), (e.geometry.span(), index_version(e)));
            })
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
        // Transposed, reshaped and other-dtype views of the same bytes: the tabled step 3 said
        // Other, the shared geometry compares bytes (CHIP_RUNTIME.md §3.7 allows any sound
        // answer; COVERED and OTHER both wait).
        assert_eq!(classify_overlap(&m.transpose(0, 1).unwrap(), &m), Covered);
        assert_eq!(classify_overlap(&m.reshape(&[64]).unwrap(), &m), Covered);
        let as_i32 = TensorDesc::contiguous(X, 256, &[8, 8], DType::I32).unwrap();
        assert_eq!(classify_overlap(&as_i32, &m), Covered);
        let left = v(&[8, 4], &[0, 0]);
        assert_eq!(
            classify_overlap(&left.transpose(0, 1).unwrap(), &v(&[8, 4], &[0, 4])),
            NoOverlap
        );
        // Step 2 in bytes: a u8 view of bytes 0..4 against f32 element 1 (bytes 4..8).
        let bytes = TensorDesc::contiguous(X, 256, &[4], DType::U8).unwrap();
        assert_eq!(
            classify_overlap(&bytes, &m.view(&[1, 1], &[0, 1]).unwrap()),
            NoOverlap
        );
        // Step 4's capacity rule is gone: the outermost dimension needs no bound, so a buffer
        // that the outer stride does not divide changes nothing.
        let even = TensorDesc::new(m.buffer(), 0, &[2, 8], &[8, 1], DType::F32).unwrap();
        let odd_buf = TensorDesc::new(
            crate::tensor::BufferAddr {
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
        assert_eq!(classify_overlap(&odd_buf, &odd_buf), Covered);
        let top = odd_buf.slice(0, 0, 1).unwrap();
        assert_eq!(classify_overlap(&odd_buf, &top), Covered);
        assert_eq!(
            classify_overlap(&top, &odd_buf.slice(0, 1, 1).unwrap()),
            NoOverlap
        );
        // A box that wraps a row (offset 6, width 4 in rows of 8) holds element 8 (row 1,
        // column 0) but not element 10.
        let wrap = TensorDesc::new(m.buffer(), 6, &[2, 4], &[8, 1], DType::F32).unwrap();
        assert_eq!(classify_overlap(&wrap, &v(&[1, 1], &[1, 0])), Covered);
        assert_eq!(classify_overlap(&wrap, &v(&[1, 1], &[1, 2])), NoOverlap);
        assert_eq!(classify_overlap(&wrap, &v(&[1, 4], &[1, 0])), Other);
        // A dimension of one element may have any stride (§1.4): it adds no byte.
        let row1 = TensorDesc::new(m.buffer(), 8, &[1, 8], &[u64::MAX, 1], DType::F32).unwrap();
        assert_eq!(classify_overlap(&row1, &v(&[1, 8], &[1, 0])), Covered);
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
        // Watermark moved one short of the batch: not yet, unless the new slot is the
        // cursor's.
        assert!(!cleanup_due(0, CLEANUP_BATCH - 1, 70, 127));
        assert!(cleanup_due(0, CLEANUP_BATCH, 70, 127));
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
        // Watermark 10, next id 31: not due (moved 10 < CLEANUP_BATCH, slot 31 ≠ slot 0).
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
        // The index reallocates only to grow, so an unchanged capacity is an unmoved pool.
        let pools = |map: &TensorMap| {
            (
                map.entries.as_ptr(),
                map.index.capacity(),
                map.bases.as_ptr(),
            )
        };
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
        let (ps, empty) = (probe.byte_span(), probe.is_empty());
        let candidates = live
            .iter()
            .filter(|(_, e)| {
                let es = e.byte_span();
                let bytes = ps.start < es.end && es.start < ps.end;
                !empty && !e.is_empty() && (bytes || e.version() < probe.version())
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
