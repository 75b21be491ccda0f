//! The L3 TensorMap: which task last wrote (or read) which part of which buffer
//! (NODE_RUNTIME.md §2.3).
//!
//! Keyed by the **full** buffer identity ([`BufferKey`]: owner uid, buffer id, generation,
//! device worker) — the hash only picks a bucket, so distinct buffers never alias. Each entry is
//! a tensor [`Footprint`] and its task. Overlap of two footprints of one buffer:
//!
//! 1. disjoint byte ranges → [`Overlap::None`];
//! 2. same dtype, rank and strides, with both origins expressible as per-axis coordinates in
//!    the mixed radix those strides define (each stride a whole multiple of the next smaller
//!    one, each view inside its "row") → exact per-axis interval tests: `None`, `Covered` or
//!    `Partial`;
//! 3. otherwise `Partial` (conservative), except that a dense view covers everything inside
//!    its byte range.
//!
//! Precision matters: a spurious edge between disjoint halves of a buffer can deadlock group
//! tasks. One map per run; entries are erased when their task is consumed.

use std::collections::HashMap;

use pto_types::{BufferId, DType, Tensor};

use super::SlotId;

/// A buffer's full identity (device tensors would add their chip).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BufferKey {
    pub(crate) buffer: BufferId,
    pub(crate) device_worker: Option<u32>,
}

/// The bytes a tensor touches, in a form that overlap tests can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Byte range `[lo, hi)` of the bounding extent.
    lo: u64,
    hi: u64,
    dtype: DType,
    shape: Vec<u32>,
    strides: Vec<u32>,
    /// Element offset of the view's first element.
    origin: u64,
}

/// How a footprint relates to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overlap {
    None,
    /// The first footprint covers every byte of the second.
    Covered,
    Partial,
}

impl Footprint {
    /// `None` for a zero-size tensor (skipped by the TensorMap).
    pub(crate) fn of(t: &Tensor) -> Option<Footprint> {
        if t.numel() == 0 {
            return None;
        }
        let elem = t.dtype().size() as u64;
        let extent: u64 = 1 + t
            .shape()
            .iter()
            .zip(t.strides())
            .map(|(&n, &s)| u64::from(n - 1) * u64::from(s))
            .sum::<u64>();
        Some(Footprint {
            lo: t.byte_offset(),
            hi: t.byte_offset() + extent * elem,
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            strides: t.strides().to_vec(),
            origin: t.byte_offset() / elem,
        })
    }

    /// Every byte of `[lo, hi)` belongs to the view.
    fn is_dense(&self) -> bool {
        let numel: u64 = self.shape.iter().map(|&n| u64::from(n)).product();
        numel * self.dtype.size() as u64 == self.hi - self.lo
    }

    /// Per-axis `[start, end)` coordinates in the radix of the strides (largest stride first),
    /// or `None` when the view is not a box of that radix.
    fn boxed(&self) -> Option<Vec<(u64, u64)>> {
        let mut axes: Vec<usize> = (0..self.shape.len()).collect();
        axes.sort_by(|&a, &b| self.strides[b].cmp(&self.strides[a]));
        let mut rem = self.origin;
        let mut out = Vec::with_capacity(axes.len());
        for (k, &axis) in axes.iter().enumerate() {
            let stride = u64::from(self.strides[axis]);
            let start = rem / stride;
            rem %= stride;
            let end = start + u64::from(self.shape[axis]);
            if k > 0 {
                let outer = u64::from(self.strides[axes[k - 1]]);
                if outer % stride != 0 || end > outer / stride {
                    return None;
                }
            }
            out.push((start, end));
        }
        (rem == 0).then_some(out)
    }

    /// How `self` relates to `other` (both views of one buffer).
    pub(crate) fn overlap(&self, other: &Footprint) -> Overlap {
        if self.hi <= other.lo || other.hi <= self.lo {
            return Overlap::None;
        }
        let dense_cover = self.is_dense() && self.lo <= other.lo && other.hi <= self.hi;
        let same_layout = self.dtype == other.dtype && self.strides == other.strides;
        if let (true, Some(a), Some(b)) = (same_layout, self.boxed(), other.boxed()) {
            if a.iter().zip(&b).any(|(x, y)| x.1 <= y.0 || y.1 <= x.0) {
                return Overlap::None;
            }
            if a.iter().zip(&b).all(|(x, y)| x.0 <= y.0 && y.1 <= x.1) {
                return Overlap::Covered;
            }
        }
        if dense_cover {
            Overlap::Covered
        } else {
            Overlap::Partial
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    footprint: Footprint,
    task: SlotId,
    /// A reader entry (`track_war`), not a writer.
    reader: bool,
}

/// One run's TensorMap.
#[derive(Default)]
pub(crate) struct TensorMap {
    map: HashMap<BufferKey, Vec<Entry>>,
}

impl TensorMap {
    /// Appends to `out` the tasks whose entries overlap `fp`: writers, and readers too when
    /// `readers` is set.
    pub(crate) fn lookup(
        &self,
        key: &BufferKey,
        fp: &Footprint,
        readers: bool,
        out: &mut Vec<SlotId>,
    ) {
        let Some(entries) = self.map.get(key) else {
            return;
        };
        for e in entries {
            if (readers || !e.reader) && fp.overlap(&e.footprint) != Overlap::None {
                out.push(e.task);
            }
        }
    }

    /// Records `task` as the writer of `fp`, dropping every entry it covers.
    pub(crate) fn insert_writer(&mut self, key: BufferKey, fp: Footprint, task: SlotId) {
        let entries = self.map.entry(key).or_default();
        entries.retain(|e| fp.overlap(&e.footprint) != Overlap::Covered);
        entries.push(Entry {
            footprint: fp,
            task,
            reader: false,
        });
    }

    /// Records `task` as a reader of `fp` (`track_war`).
    pub(crate) fn insert_reader(&mut self, key: BufferKey, fp: Footprint, task: SlotId) {
        self.map.entry(key).or_default().push(Entry {
            footprint: fp,
            task,
            reader: true,
        });
    }

    /// Erases the entries of `key` still owned by `task`.
    pub(crate) fn erase(&mut self, key: &BufferKey, task: SlotId) {
        if let Some(entries) = self.map.get_mut(key) {
            entries.retain(|e| e.task != task);
            if entries.is_empty() {
                self.map.remove(key);
            }
        }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.map.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pto_types::BufferRef;

    fn view(offset_elems: u64, shape: &[u32], strides: &[u32]) -> Footprint {
        let buffer = BufferRef::detached(
            BufferId {
                owner_uid: 1,
                buffer_id: 1,
                generation: 0,
            },
            1 << 20,
        );
        let t = Tensor::new(buffer, offset_elems * 4, shape, strides, DType::F32).unwrap();
        Footprint::of(&t).unwrap()
    }

    #[track_caller]
    fn check(a: &Footprint, b: &Footprint, expect: Overlap) {
        assert_eq!(a.overlap(b), expect, "{a:?} vs {b:?}");
    }

    #[test]
    fn row_halves_are_disjoint_and_whole_covers_halves() {
        let whole = view(0, &[16, 8], &[8, 1]);
        let top = view(0, &[8, 8], &[8, 1]);
        let bottom = view(64, &[8, 8], &[8, 1]);
        check(&top, &bottom, Overlap::None);
        check(&whole, &top, Overlap::Covered);
        check(&top, &whole, Overlap::Partial);
    }

    #[test]
    fn column_halves_interleave_but_do_not_overlap() {
        // Left and right halves of a 4×8 matrix: byte ranges interleave.
        let left = view(0, &[4, 4], &[8, 1]);
        let right = view(4, &[4, 4], &[8, 1]);
        check(&left, &right, Overlap::None);
        let whole = view(0, &[4, 8], &[8, 1]);
        check(&whole, &right, Overlap::Covered);
        let middle = view(2, &[4, 4], &[8, 1]);
        check(&middle, &right, Overlap::Partial);
    }

    #[test]
    fn one_element_overlap_and_different_layouts() {
        let a = view(0, &[10], &[1]);
        let b = view(9, &[10], &[1]);
        check(&a, &b, Overlap::Partial);
        let c = view(10, &[10], &[1]);
        check(&a, &c, Overlap::None);
        // Strided views of different layouts inside one range: conservative.
        let even = view(0, &[5], &[2]);
        let odd = view(1, &[5], &[2]);
        check(&even, &odd, Overlap::Partial);
        // Dense covers anything inside its range.
        check(&a, &even, Overlap::Covered);
    }
}
