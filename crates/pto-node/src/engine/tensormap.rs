//! The L3 TensorMap: which task last wrote (or read) which part of which buffer
//! (NODE_RUNTIME.md §2.3).
//!
//! Keyed by the **full** buffer identity ([`BufferKey`]: owner uid, buffer id, generation,
//! device worker) — the hash only picks a bucket, so distinct buffers never alias. Each entry is
//! a task and the [`Geometry`] of its access; two accesses of one buffer are compared with the
//! one classification of both levels, [`Geometry::classify`] (sound always, exact in the
//! classes its module doc lists: disjoint column halves, interleaved views, transposed and
//! other-dtype views of one array…). Precision matters: a spurious edge between disjoint
//! halves of a buffer can deadlock group tasks.
//!
//! # Cost
//!
//! Tasks of the outer scope stay live until the run ends, so one buffer can hold a hundred
//! thousand disjoint writers; a scan of them per submit made submitting quadratic (80k tasks
//! took 22.6 s). So the entries of each key form a tree of the shared region index
//! ([`IntervalForest`], the chip's too): ordered by byte start, each node knowing the largest
//! byte end below it. A lookup, and the search an insert makes for the entries it covers, visit
//! O(entries whose byte spans meet the access + log n) nodes, not O(entries of the buffer).
//!
//! Inserts return an [`EntryHandle`] that the task's slot keeps, so consumption erases exactly
//! its entries without a search. An entry may be gone by then — pruned when a later writer
//! covered it, its index maybe reused — so a handle carries the entry's generation, bumped
//! whenever an entry leaves; a stale handle matches nothing.

use std::collections::HashMap;

use pto_types::BufferId;
use pto_types::geometry::{Geometry, IntervalForest, NIL, Overlap};

use super::SlotId;

/// A buffer's full identity (device tensors would add their chip).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BufferKey {
    pub(crate) buffer: BufferId,
    pub(crate) device_worker: Option<u32>,
}

/// Which entries a lookup reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entries {
    Writers,
    /// Reader entries only (`track_war`).
    Readers,
    Both,
}

impl Entries {
    fn includes(self, reader: bool) -> bool {
        match self {
            Entries::Writers => !reader,
            Entries::Readers => reader,
            Entries::Both => true,
        }
    }
}

/// An entry as its task knows it: valid until the entry leaves the map (erased, or pruned by a
/// covering writer), and never again after that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryHandle {
    index: u32,
    generation: u32,
}

/// Entry `i` of the arena, index node `i` of the forest.
///
/// While `in_use`, the node is in the tree of `roots[key]` with the span of `geometry`; while
/// free, the index is on the free list and the node in no tree. `generation` counts how often
/// the entry left the map.
#[derive(Clone, Debug)]
struct Entry {
    key: BufferKey,
    geometry: Geometry,
    task: SlotId,
    /// A reader entry (`track_war`), not a writer.
    reader: bool,
    generation: u32,
    in_use: bool,
}

/// One run's TensorMap.
///
/// Invariants: `roots` holds exactly the keys with entries in use, each the root of the tree of
/// those entries; `live` counts the entries in use; `free` lists every other index below
/// `entries.len()` once.
#[derive(Default)]
pub(crate) struct TensorMap {
    roots: HashMap<BufferKey, u32>,
    entries: Vec<Entry>,
    index: IntervalForest<()>,
    free: Vec<u32>,
    live: usize,
    /// Scratch of the searches, kept so that they reuse their allocations.
    stack: Vec<u32>,
    covered: Vec<u32>,
}

impl TensorMap {
    /// Appends to `out` the tasks of the `which` entries of `key` whose bytes overlap
    /// `geometry`'s, in no particular order.
    pub(crate) fn lookup(
        &mut self,
        key: &BufferKey,
        geometry: &Geometry,
        which: Entries,
        out: &mut Vec<SlotId>,
    ) {
        let Some(&root) = self.roots.get(key) else {
            return;
        };
        let entries = &self.entries;
        let hit = |x: u32| {
            let e = &entries[x as usize];
            if which.includes(e.reader) && geometry.classify(&e.geometry) != Overlap::NoOverlap {
                out.push(e.task);
            }
        };
        self.index
            .search(root, geometry.span(), |()| false, &mut self.stack, hit);
    }

    /// Records `task` as the writer of `geometry`, dropping every entry (writer or reader) it
    /// covers.
    pub(crate) fn insert_writer(
        &mut self,
        key: BufferKey,
        geometry: Geometry,
        task: SlotId,
    ) -> EntryHandle {
        let root = self.roots.entry(key).or_insert(NIL);
        let entries = &self.entries;
        let covered = &mut self.covered;
        covered.clear();
        let hit = |x: u32| {
            if geometry.classify(&entries[x as usize].geometry) == Overlap::Covered {
                covered.push(x);
            }
        };
        self.index
            .search(*root, geometry.span(), |()| false, &mut self.stack, hit);
        // The covered entries share `key`, so they leave the tree at hand.
        for &x in &self.covered {
            self.index.remove(root, x);
            leave(&mut self.entries[x as usize]);
            self.free.push(x);
            self.live -= 1;
        }
        let handle = add_entry(
            &mut self.entries,
            &mut self.free,
            key,
            geometry,
            task,
            false,
        );
        self.index.set(handle.index, geometry.span(), ());
        self.index.insert(root, handle.index);
        self.live += 1;
        handle
    }

    /// Records `task` as a reader of `geometry` (`track_war`).
    pub(crate) fn insert_reader(
        &mut self,
        key: BufferKey,
        geometry: Geometry,
        task: SlotId,
    ) -> EntryHandle {
        let root = self.roots.entry(key).or_insert(NIL);
        let handle = add_entry(&mut self.entries, &mut self.free, key, geometry, task, true);
        self.index.set(handle.index, geometry.span(), ());
        self.index.insert(root, handle.index);
        self.live += 1;
        handle
    }

    /// Erases the entry of `handle` if it is still in the map and still `task`'s (consumption
    /// of `task`); nothing when a covering writer pruned it.
    pub(crate) fn erase(&mut self, handle: EntryHandle, task: SlotId) {
        let Some(e) = self.entries.get_mut(handle.index as usize) else {
            return;
        };
        if !(e.in_use && e.generation == handle.generation && e.task == task) {
            return;
        }
        let key = e.key;
        leave(e);
        let root = self
            .roots
            .get_mut(&key)
            .expect("an entry in use has its key's tree");
        self.index.remove(root, handle.index);
        if *root == NIL {
            self.roots.remove(&key);
        }
        self.free.push(handle.index);
        self.live -= 1;
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.live
    }
}

/// Fills a free entry (or a new one) for `task` and returns its handle; the caller indexes it.
fn add_entry(
    entries: &mut Vec<Entry>,
    free: &mut Vec<u32>,
    key: BufferKey,
    geometry: Geometry,
    task: SlotId,
    reader: bool,
) -> EntryHandle {
    let mut entry = Entry {
        key,
        geometry,
        task,
        reader,
        generation: 0,
        in_use: true,
    };
    let index = match free.pop() {
        Some(index) => {
            let slot = &mut entries[index as usize];
            entry.generation = slot.generation;
            *slot = entry;
            index
        }
        None => {
            let index = u32::try_from(entries.len())
                .ok()
                .filter(|&i| i != NIL)
                .expect("fewer than 2^32 - 1 TensorMap entries");
            entries.push(entry);
            index
        }
    };
    EntryHandle {
        index,
        generation: entries[index as usize].generation,
    }
}

/// Marks an entry as left: no handle to it matches any more.
fn leave(e: &mut Entry) {
    debug_assert!(e.in_use);
    e.in_use = false;
    e.generation = e.generation.wrapping_add(1);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use pto_types::{BufferRef, DType, Tensor};

    use super::*;

    fn key(buffer_id: u64) -> BufferKey {
        BufferKey {
            buffer: BufferId {
                owner_uid: 1,
                buffer_id,
                generation: 0,
            },
            device_worker: None,
        }
    }

    fn view(offset_elems: u64, shape: &[u32], strides: &[u32]) -> Geometry {
        let buffer = BufferRef::detached(key(1).buffer, 1 << 20);
        let t = Tensor::new(buffer, offset_elems * 4, shape, strides, DType::F32).unwrap();
        t.geometry()
    }

    fn task(index: u32) -> SlotId {
        SlotId {
            index,
            generation: 0,
        }
    }

    #[track_caller]
    fn check(a: &Geometry, b: &Geometry, expect: Overlap) {
        assert_eq!(a.classify(b), expect, "{a:?} vs {b:?}");
    }

    #[track_caller]
    fn lookup(map: &mut TensorMap, k: u64, g: &Geometry, which: Entries) -> Vec<u32> {
        let mut out = Vec::new();
        map.lookup(&key(k), g, which, &mut out);
        let mut tasks: Vec<u32> = out.iter().map(|t| t.index).collect();
        tasks.sort_unstable();
        tasks
    }

    #[test]
    fn row_halves_are_disjoint_and_whole_covers_halves() {
        let whole = view(0, &[16, 8], &[8, 1]);
        let top = view(0, &[8, 8], &[8, 1]);
        let bottom = view(64, &[8, 8], &[8, 1]);
        check(&top, &bottom, Overlap::NoOverlap);
        check(&whole, &top, Overlap::Covered);
        check(&top, &whole, Overlap::Other);
    }

    #[test]
    fn column_halves_interleave_but_do_not_overlap() {
        // Left and right halves of a 4×8 matrix: byte ranges interleave.
        let left = view(0, &[4, 4], &[8, 1]);
        let right = view(4, &[4, 4], &[8, 1]);
        check(&left, &right, Overlap::NoOverlap);
        let whole = view(0, &[4, 8], &[8, 1]);
        check(&whole, &right, Overlap::Covered);
        let middle = view(2, &[4, 4], &[8, 1]);
        check(&middle, &right, Overlap::Other);
    }

    #[test]
    fn one_element_overlap_and_different_layouts() {
        let a = view(0, &[10], &[1]);
        let b = view(9, &[10], &[1]);
        check(&a, &b, Overlap::Other);
        let c = view(10, &[10], &[1]);
        check(&a, &c, Overlap::NoOverlap);
        // Even and odd elements interleave inside one range without sharing one (the old
        // per-buffer algorithm answered `Partial` here).
        let even = view(0, &[5], &[2]);
        let odd = view(1, &[5], &[2]);
        check(&even, &odd, Overlap::NoOverlap);
        // Dense covers anything inside its range.
        check(&a, &even, Overlap::Covered);
    }

    #[test]
    fn a_covering_writer_prunes_and_stale_handles_match_nothing() {
        let mut map = TensorMap::default();
        let (left, right, whole) = (
            view(0, &[4, 4], &[8, 1]),
            view(4, &[4, 4], &[8, 1]),
            view(0, &[4, 8], &[8, 1]),
        );
        let h_left = map.insert_writer(key(1), left, task(1));
        map.insert_writer(key(1), right, task(2));
        let h_reader = map.insert_reader(key(1), left, task(3));
        assert_eq!(lookup(&mut map, 1, &left, Entries::Writers), [1]);
        assert_eq!(lookup(&mut map, 1, &left, Entries::Readers), [3]);
        assert_eq!(lookup(&mut map, 1, &whole, Entries::Both), [1, 2, 3]);
        // A whole-buffer writer covers all three, so they leave the map.
        let h_whole = map.insert_writer(key(1), whole, task(4));
        assert_eq!(map.len(), 1);
        assert_eq!(lookup(&mut map, 1, &right, Entries::Both), [4]);
        // The pruned entries' indices are reused; their old handles erase nothing.
        let h_new = map.insert_writer(key(2), left, task(5));
        map.erase(h_left, task(1));
        map.erase(h_reader, task(3));
        assert_eq!(map.len(), 2);
        // A handle erases only for its task.
        map.erase(h_new, task(1));
        assert_eq!(map.len(), 2);
        map.erase(h_new, task(5));
        map.erase(h_whole, task(4));
        assert_eq!(map.len(), 0);
        assert!(map.roots.is_empty(), "empty trees leave the key map");
        map.erase(h_whole, task(4));
        assert_eq!(map.len(), 0);
    }

    #[test]
    fn a_pruned_entry_reused_by_its_own_task_is_not_erased_twice() {
        // One task reads the left half (a `track_war` reader entry), then writes the whole
        // buffer: the write prunes the read and takes its index.
        let mut map = TensorMap::default();
        let (left, whole) = (view(0, &[4, 4], &[8, 1]), view(0, &[4, 8], &[8, 1]));
        let read = map.insert_reader(key(1), left, task(7));
        let write = map.insert_writer(key(1), whole, task(7));
        assert_eq!(read.index, write.index);
        assert_eq!(map.len(), 1);
        // Consumption erases both handles; the stale one first must leave the write alone.
        map.erase(read, task(7));
        assert_eq!(map.len(), 1);
        assert_eq!(lookup(&mut map, 1, &left, Entries::Writers), [7]);
        map.erase(write, task(7));
        assert_eq!(map.len(), 0);
    }

    /// One step of [`map_matches_a_scan`]: `(op, task, buffer, offset, width, stride)`.
    type Op = (u8, u32, u64, u64, u32, u32);

    /// The old map, one vector of `(handle, geometry, task, reader, key)` scanned per access.
    type Model = Vec<(EntryHandle, Geometry, u32, bool, u64)>;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random writers (pruning what they cover), readers, erasures and lookups on two
        /// buffers: the indexed map reports exactly what a scan of every entry reports, and a
        /// stale handle erases nothing.
        #[test]
        fn map_matches_a_scan(ops in prop::collection::vec((0u8..6, 0u32..12, 0u64..2, 0u64..48, 1u32..8, 1u32..3), 1..150)) {
            let mut map = TensorMap::default();
            let mut model: Model = Vec::new();
            let mut handles: Vec<(EntryHandle, u32)> = Vec::new();
            for &(op, t, k, offset, width, stride) in &ops as &[Op] {
                let g = view(offset, &[width], &[stride]);
                match op {
                    0 | 1 => {
                        let h = map.insert_writer(key(k), g, task(t));
                        model.retain(|e| e.4 != k || g.classify(&e.1) != Overlap::Covered);
                        model.push((h, g, t, false, k));
                        handles.push((h, t));
                    }
                    2 => {
                        let h = map.insert_reader(key(k), g, task(t));
                        model.push((h, g, t, true, k));
                        handles.push((h, t));
                    }
                    3 if !handles.is_empty() => {
                        let (h, owner) = handles[offset as usize % handles.len()];
                        // Sometimes the wrong task: nothing happens.
                        let by = if stride == 1 { owner } else { owner + 1 };
                        map.erase(h, task(by));
                        model.retain(|e| !(e.0 == h && e.2 == by));
                    }
                    _ => {
                        for which in [Entries::Writers, Entries::Readers, Entries::Both] {
                            let mut want: Vec<u32> = model
                                .iter()
                                .filter(|e| e.4 == k && which.includes(e.3) && g.classify(&e.1) != Overlap::NoOverlap)
                                .map(|e| e.2)
                                .collect();
                            want.sort_unstable();
                            prop_assert_eq!(lookup(&mut map, k, &g, which), want);
                        }
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                for (&k, &root) in &map.roots {
                    let size = map.index.check_tree(root, |x| {
                        let e = &map.entries[x as usize];
                        assert!(e.in_use && e.key == k);
                    });
                    prop_assert_eq!(size, model.iter().filter(|e| key(e.4) == k).count());
                }
            }
        }
    }
}
