//! Tensor geometry: the bytes of its buffer that a strided view touches, and how two views of
//! one buffer relate. Both TensorMaps classify with it: the chip's (CHIP_RUNTIME.md §3.7, which
//! adds its version rule first) and the node's (NODE_RUNTIME.md §2.3); so does the node's check
//! of overlapping write-tagged tensors of one task. [`IntervalForest`] is the region index both
//! maps keep per buffer.
//!
//! # Canonical form
//!
//! A view of element size `e` whose element `c` starts at byte `offset + Σ c_i·stride_i·e`
//! touches the bytes `offset + Σ c_i·(stride_i·e) + b`, `0 ≤ b < e`: a strided set of bytes with
//! one more axis, `(e, 1)`. [`Geometry::new`] stores that set in a canonical form, so views of
//! different dtypes compare byte for byte: axes of one index (and broadcast axes, stride 0) are
//! dropped, the element axis `(e, 1)` is added, axes are sorted by byte stride, and an axis
//! whose stride is the whole extent of the run inside it continues that run (`(n, m·s)` over
//! `(m, s)` becomes `(n·m, s)`). The form is at most [`MAX_AXES`] axes in fixed arrays: no
//! allocation. A transposed or permuted view, a reshape and the view itself have one form.
//!
//! Two properties of a form decide what can be computed exactly:
//! - **ordered**: every stride exceeds the extent `Σ (n_j − 1)·s_j` of the axes inside it. The
//!   bytes are then distinct and increase with the index read as a number (outermost digit
//!   first); a row-major box of any array is ordered, an aliasing view (two indices, one byte)
//!   never is;
//! - **contiguous**: one axis of stride 1 (or a single byte): the bytes are exactly the span.
//!
//! # Classification and when it is exact
//!
//! [`Geometry::classify`] is always **sound**: [`Overlap::NoOverlap`] only when the byte sets
//! are disjoint, [`Overlap::Covered`] only when the first view's bytes contain all of the
//! second's; [`Overlap::Other`] otherwise. Its answer **equals the truth** when
//!
//! 1. either view is empty, or their byte spans are disjoint;
//! 2. both have the same canonical form and offset (the same bytes);
//! 3. one of them is contiguous and the other ordered: the bytes of an ordered view below any
//!    address are counted digit by digit, so the count inside the contiguous one's span decides;
//! 4. both are ordered **boxes of one mixed radix**: the strides of both forms and 1, sorted,
//!    must each divide the next larger one (so the levels `R_0 = 1 < R_1 < …` define digits, a
//!    byte `x` having digit `(x / R_j) mod (R_{j+1} / R_j)` on level `j` and `x / R_top` on the
//!    top level), and each view's bytes must be a box of that radix: one interval of digits per
//!    level, all combinations taken. Written in the radix, that means no axis carries into the
//!    level above — except an axis of whole rows from a row boundary, which is split into a
//!    full level and an interval of the level above — and the top level is unbounded, so no
//!    buffer capacity is involved. Boxes are compared level by level. Examples: sub-boxes of
//!    one row-major array, transposed or not; disjoint column halves and interleaved views
//!    (identical strides, origins apart by less than the smallest stride), both `NoOverlap`;
//!    rows of a 16-wide matrix against columns of the same bytes seen 8 wide. Views of any
//!    dtypes whose byte strides are all powers of two always share a radix; whether each is a
//!    box then depends on its offset and extents.
//!
//! In addition, a `Covered` answer is exact whenever the first view is contiguous (its span
//! contains the second's). Outside these classes — strides that are not multiples of each other
//! (rows of 12 against rows of 8), views that alias — the answer may be `Other` for views that
//! are in truth disjoint or covered. `geometry/tests.rs` checks soundness on random views
//! against enumerated byte sets, and the answer against the truth wherever these classes,
//! decided there independently (box-ness by enumeration), say it is exact.
//!
//! Both older algorithms are contained: the chip's per-dimension boxes of identical nested
//! layouts (class 4 without its buffer-capacity rule, which only lost precision) and the node's
//! stride-sorted mixed radix (class 4) and dense cover (the remark above; the node's "dense"
//! test also held for aliasing views whose element count happened to equal their extent, which
//! was unsound).
//!
//! Cost: building a form sorts at most [`MAX_AXES`] axes; a classification is a few compares
//! for disjoint spans, equal forms or a contiguous cover, and otherwise O(levels) with one
//! division per level.

mod forest;
#[cfg(test)]
mod tests;

use std::ops::Range;

pub use forest::{IntervalForest, NIL, Summary};

use crate::args::MAX_TENSOR_DIMS;

/// How many elements a strided view spans: `1 + Σ (shape_i − 1)·stride_i`, or 0 for an empty
/// view (some `shape_i` is 0). In `u128`, where five `u32 × u64` products and a `u64` cannot
/// overflow.
pub fn element_extent(shape: &[u32], strides: &[u64]) -> u128 {
    if shape.contains(&0) {
        return 0;
    }
    let spread: u128 = shape
        .iter()
        .zip(strides)
        .map(|(&n, &s)| u128::from(n - 1) * u128::from(s))
        .sum();
    1 + spread
}

/// A view that ends past its buffer: it needs elements up to `end` (exclusive), the buffer
/// holds `capacity` whole elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfBounds {
    pub end: u128,
    pub capacity: u64,
}

/// **The bounds rule of a strided view**, for a task argument (`pto_types::Tensor`) and the
/// chip's descriptor (`pto_chip`'s `TensorDesc`) alike: a view whose first element is element
/// `start` of its buffer must end inside it, `start + element_extent ≤ buffer_bytes / elem_bytes`.
/// An empty view touches no element and always fits, wherever it starts.
pub fn check_inside(
    elem_bytes: u64,
    start: u64,
    shape: &[u32],
    strides: &[u64],
    buffer_bytes: u64,
) -> Result<(), OutOfBounds> {
    let extent = element_extent(shape, strides);
    if extent == 0 {
        return Ok(());
    }
    let capacity = buffer_bytes / elem_bytes.max(1);
    let end = u128::from(start) + extent;
    if end > u128::from(capacity) {
        return Err(OutOfBounds { end, capacity });
    }
    Ok(())
}

/// Most axes of a canonical form: a tensor's dimensions and the bytes of one element.
pub const MAX_AXES: usize = MAX_TENSOR_DIMS + 1;

/// Most levels of a radix common to two forms: both stride lists and 1.
const MAX_LEVELS: usize = 2 * MAX_AXES + 1;

/// How a view relates to another view of the same buffer (CHIP_RUNTIME.md §3.7's COVERED /
/// OTHER / NO_OVERLAP, NODE_RUNTIME.md §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::enum_variant_names)] // the names of CHIP_RUNTIME.md §3.7
pub enum Overlap {
    /// No byte is touched by both.
    NoOverlap,
    /// The first view touches every byte of the second (and maybe more).
    Covered,
    /// They may share bytes; nothing more is known.
    Other,
}

/// The bytes a view touches, relative to the start of its buffer, in canonical form (module
/// doc).
///
/// Invariants: `rank ≤ MAX_AXES`; axes `k < rank` are `(sizes[k] ≥ 2, strides[k] ≥ 1)` in
/// bytes, **innermost first** (strides non-decreasing), none continuing the run inside it
/// (`strides[k + 1] ≠ sizes[k] · strides[k]`); entries from `rank` on are 0; `end = start + 1 +
/// Σ (sizes[k] − 1) · strides[k]`; `ordered` is as defined in the module doc. The empty view is
/// [`Geometry::EMPTY`] (`start == end == 0`), so all empty views are equal.
#[derive(Clone, Copy, Debug, Eq)]
pub struct Geometry {
    start: u64,
    end: u64,
    rank: u8,
    ordered: bool,
    sizes: [u64; MAX_AXES],
    strides: [u64; MAX_AXES],
}

impl PartialEq for Geometry {
    /// The same bytes in the same form. Entries from `rank` on are 0 and `ordered` follows from
    /// the axes, so comparing the axes in use is comparing every field.
    fn eq(&self, other: &Geometry) -> bool {
        self.start == other.start
            && self.end == other.end
            && self.rank == other.rank
            && self.inner_first().eq(other.inner_first())
    }
}

impl Geometry {
    /// A view that touches no byte.
    pub const EMPTY: Geometry = Geometry {
        start: 0,
        end: 0,
        rank: 0,
        ordered: true,
        sizes: [0; MAX_AXES],
        strides: [0; MAX_AXES],
    };

    /// The bytes of the view whose element `c` (index `c_i < shape[i]`) occupies the `elem_bytes`
    /// bytes from `byte_offset + Σ c_i · strides[i] · elem_bytes` (strides in elements).
    ///
    /// `None` when `shape` and `strides` differ in length or exceed [`MAX_TENSOR_DIMS`],
    /// `elem_bytes` is 0, or a byte of a non-empty view lies beyond `u64::MAX`.
    ///
    /// ```
    /// use pto_types::geometry::{Geometry, Overlap};
    ///
    /// // Left and right halves of a 4×8 f32 matrix: their byte spans interleave.
    /// let left = Geometry::new(4, 0, &[4, 4], &[8, 1]).unwrap();
    /// let right = Geometry::new(4, 16, &[4, 4], &[8, 1]).unwrap();
    /// assert_eq!(left.classify(&right), Overlap::NoOverlap);
    /// // The whole matrix as bytes covers the right half.
    /// let whole = Geometry::new(1, 0, &[128], &[1]).unwrap();
    /// assert_eq!(whole.classify(&right), Overlap::Covered);
    /// ```
    #[inline]
    pub fn new(
        elem_bytes: u64,
        byte_offset: u64,
        shape: &[u32],
        strides: &[u64],
    ) -> Option<Geometry> {
        if !well_formed(elem_bytes, shape, strides) {
            return None;
        }
        match Geometry::dense(elem_bytes, shape, strides) {
            Dense::Empty => return Some(Geometry::EMPTY),
            Dense::Bytes(len) => return Geometry::contiguous(byte_offset, len),
            Dense::Overflow => return None,
            Dense::Strided => {}
        }
        Geometry::strided(elem_bytes, byte_offset, shape, strides)
    }

    /// The common case of [`Geometry::new`] without sorting: a view whose axes, innermost
    /// first and leaving out single indices and broadcasts, each continue the run inside
    /// them. Those axes are sorted already and merge into one run, so the canonical form is
    /// that run whatever the general algorithm would have done with them ([`Dense::Bytes`]).
    /// Otherwise: [`Dense::Empty`] when an axis has no index, [`Dense::Overflow`] when a
    /// stride in bytes exceeds `u64::MAX` (what [`Geometry::new`] refuses), and
    /// [`Dense::Strided`] for the general algorithm to decide.
    #[inline]
    fn dense(elem_bytes: u64, shape: &[u32], strides: &[u64]) -> Dense {
        let mut run = elem_bytes;
        let mut dense = true;
        for (&n, &s) in shape.iter().zip(strides).rev() {
            if n == 0 {
                return Dense::Empty;
            }
            if n == 1 || s == 0 {
                continue;
            }
            let Some(stride) = s.checked_mul(elem_bytes) else {
                // An empty view is empty whatever its strides.
                return if shape.contains(&0) {
                    Dense::Empty
                } else {
                    Dense::Overflow
                };
            };
            // A run too long for `u64` is left to the general algorithm, which refuses it.
            match run.checked_mul(u64::from(n)) {
                Some(len) if dense && stride == run => run = len,
                _ => dense = false,
            }
        }
        if dense {
            Dense::Bytes(run)
        } else {
            Dense::Strided
        }
    }

    /// The bytes `start .. start + len`, `len ≥ 1`: one axis of stride 1, or none for a single
    /// byte; `None` past `u64::MAX`.
    #[inline]
    fn contiguous(start: u64, len: u64) -> Option<Geometry> {
        Some(Geometry::run(start, start.checked_add(len)?, len))
    }

    /// [`Geometry::new`] for a view its caller has validated (inside a buffer that fits the
    /// address space), so that the common form is written straight into the caller's result
    /// instead of through an `Option` on the stack: two one-byte fields stored apart and
    /// read back as one word stalled store forwarding (half the chip's geometry time in
    /// `perf annotate`).
    ///
    /// # Panics
    ///
    /// Where [`Geometry::new`] gives `None`: a view that is not valid.
    #[inline]
    pub fn of_valid(elem_bytes: u64, byte_offset: u64, shape: &[u32], strides: &[u64]) -> Geometry {
        if well_formed(elem_bytes, shape, strides) {
            // Each form returned as it is built: no `Option` around the common one.
            match Geometry::dense(elem_bytes, shape, strides) {
                Dense::Empty => return Geometry::EMPTY,
                Dense::Bytes(len) => {
                    if let Some(end) = byte_offset.checked_add(len) {
                        return Geometry::run(byte_offset, end, len);
                    }
                }
                Dense::Strided => {
                    if let Some(g) = Geometry::strided(elem_bytes, byte_offset, shape, strides) {
                        return g;
                    }
                }
                Dense::Overflow => {}
            }
        }
        invalid_view(shape, strides)
    }

    /// The bytes `start .. end`, `len = end - start ≥ 1` of them, in canonical form.
    #[inline]
    fn run(start: u64, end: u64, len: u64) -> Geometry {
        // Built field by field rather than by editing a copy of `EMPTY`: the copy went through
        // the stack and cost a third of the chip's geometry time.
        let mut sizes = [0; MAX_AXES];
        let mut strides = [0; MAX_AXES];
        let rank = u8::from(len > 1);
        if len > 1 {
            (sizes[0], strides[0]) = (len, 1);
        }
        Geometry {
            start,
            end,
            rank,
            ordered: true,
            sizes,
            strides,
        }
    }

    /// [`Geometry::new`] for any non-empty view: sorts the axes and merges runs.
    fn strided(
        elem_bytes: u64,
        byte_offset: u64,
        shape: &[u32],
        strides: &[u64],
    ) -> Option<Geometry> {
        // Sizes and strides apart, each written and read as one `u64`: a 16-byte load of two
        // 8-byte stores stalls store forwarding, which showed in profiles of the chip's insert.
        let mut sizes = [0u64; MAX_AXES];
        let mut byte_strides = [0u64; MAX_AXES];
        let mut rank = 0;
        if elem_bytes > 1 {
            (sizes[0], byte_strides[0]) = (elem_bytes, 1);
            rank = 1;
        }
        // One index (whatever its stride: the chip allows any), or a broadcast (stride 0), adds
        // no byte to the set.
        for (&n, &s) in shape.iter().zip(strides).filter(|&(&n, &s)| n > 1 && s > 0) {
            let stride = s.checked_mul(elem_bytes)?;
            insert_sorted(&mut sizes, &mut byte_strides, rank, u64::from(n), stride);
            rank += 1;
        }
        let mut g = Geometry::EMPTY;
        g.fill(byte_offset, &sizes[..rank], &byte_strides[..rank])
            .then_some(g)
    }

    /// Makes `self` the canonical form of the bytes `start + Σ c_k · strides[k]` of axes of
    /// `sizes[k] ≥ 2` and `strides[k] ≥ 1`, sorted by stride, innermost first; false when a byte
    /// lies beyond `u64::MAX`.
    #[inline]
    fn fill(&mut self, start: u64, sizes: &[u64], strides: &[u64]) -> bool {
        self.start = start;
        let mut runs = 0;
        let mut inner_extent = 0u64;
        for (&n, &s) in sizes.iter().zip(strides) {
            let Some(extent) = (n - 1)
                .checked_mul(s)
                .and_then(|e| e.checked_add(inner_extent))
            else {
                return false;
            };
            // An axis continuing the run inside it lengthens that run.
            if runs > 0 {
                let (rn, rs) = (self.sizes[runs - 1], self.strides[runs - 1]);
                if rn.checked_mul(rs) == Some(s) {
                    let Some(len) = rn.checked_mul(n) else {
                        return false;
                    };
                    self.sizes[runs - 1] = len;
                    inner_extent = extent;
                    continue;
                }
            }
            self.ordered &= s > inner_extent;
            inner_extent = extent;
            (self.sizes[runs], self.strides[runs]) = (n, s);
            runs += 1;
        }
        self.rank = runs as u8;
        match start
            .checked_add(inner_extent)
            .and_then(|e| e.checked_add(1))
        {
            Some(end) => {
                self.end = end;
                true
            }
            None => false,
        }
    }

    /// The byte offsets `[first, last + 1)` spanned, relative to the buffer; `0..0` when empty.
    pub fn span(&self) -> Range<u64> {
        self.start..self.end
    }

    /// True when the view touches no byte.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The canonical axes `(size, byte stride)`, outermost first (module doc).
    pub fn axes(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.inner_first().rev()
    }

    /// Every stride exceeds the extent of the axes inside it (module doc).
    pub fn is_ordered(&self) -> bool {
        !self.is_empty() && self.ordered
    }

    /// The bytes are exactly the span (module doc).
    pub fn is_contiguous(&self) -> bool {
        !self.is_empty() && (self.rank == 0 || (self.rank == 1 && self.strides[0] == 1))
    }

    fn inner_strides(&self) -> &[u64] {
        &self.strides[..usize::from(self.rank)]
    }

    /// The axes `(size, byte stride)`, innermost first.
    fn inner_first(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + ExactSizeIterator + '_ {
        let rank = usize::from(self.rank);
        self.sizes[..rank]
            .iter()
            .copied()
            .zip(self.strides[..rank].iter().copied())
    }

    /// How `self` relates to `other`, a view of the same buffer: sound always, exact in the
    /// classes of the module doc.
    pub fn classify(&self, other: &Geometry) -> Overlap {
        if self.is_empty() || other.is_empty() || self.end <= other.start || other.end <= self.start
        {
            return Overlap::NoOverlap;
        }
        if self == other {
            return Overlap::Covered;
        }
        if self.is_contiguous() && self.start <= other.start && other.end <= self.end {
            return Overlap::Covered;
        }
        if let Some(overlap) = contiguous_against_ordered(self, other) {
            return overlap;
        }
        if let Some(overlap) = boxes_of_one_radix(self, other) {
            return overlap;
        }
        Overlap::Other
    }

    /// Bytes of an ordered, non-empty view below byte offset `x`.
    ///
    /// Digit by digit, outermost first: blocks of axis `k` below the one holding `x` lie wholly
    /// below it and those above wholly above, because each block's bytes stay below the next
    /// block's start (the view is ordered).
    fn bytes_below(&self, x: u64) -> u64 {
        debug_assert!(self.is_ordered());
        if x <= self.start {
            return 0;
        }
        let mut rest = x - self.start;
        let mut block: u64 = self.sizes[..usize::from(self.rank)].iter().product();
        let mut below = 0;
        for (n, s) in self.axes() {
            block /= n;
            let digit = rest / s;
            if digit >= n {
                return below + n * block;
            }
            below += digit * block;
            rest -= digit * s;
        }
        // The one byte left is at `rest` bytes below `x`.
        below + u64::from(rest > 0)
    }

    /// Writes this view's `(first digit, number of digits)` on every level of `radix` to
    /// `digits`; false when it is not a box of that radix. `self` is ordered, so two of its axes
    /// never share a level and an axis below an axis of its own fits its level.
    fn digit_box(&self, radix: &Radix, digits: &mut [(u64, u64); MAX_LEVELS]) -> bool {
        let top = radix.len - 1;
        let mut rest = self.start;
        for j in (1..=top).rev() {
            digits[j] = (rest / radix.levels[j], 1);
            rest %= radix.levels[j];
        }
        digits[0] = (rest, 1);
        // Both lists are sorted, innermost first, and the radix holds every stride.
        let mut j = 0;
        for (n, s) in self.inner_first() {
            while radix.levels[j] != s {
                j += 1;
            }
            digits[j].1 = n;
        }
        // Innermost level out: a range must stay inside its level, unless it is a whole number
        // of rows from a row boundary, which is a range of the level above. The top level is
        // unbounded.
        for j in 0..top {
            let row = radix.rows[j];
            let (first, count) = digits[j];
            if first.saturating_add(count) <= row {
                continue;
            }
            if first != 0 || !count.is_multiple_of(row) || digits[j + 1].1 != 1 {
                return false;
            }
            digits[j] = (0, row);
            digits[j + 1].1 = count / row;
        }
        true
    }

    /// Whether `self` and `other`, views of one buffer, share a byte, exactly: where
    /// [`Geometry::classify`] cannot tell ([`Overlap::Other`]), by walking both views'
    /// contiguous runs in address order. `None` when either view has more than `max_runs`
    /// runs, and the walk would cost more than the caller allows.
    pub fn shares_bytes(&self, other: &Geometry, max_runs: usize) -> Option<bool> {
        match self.classify(other) {
            Overlap::NoOverlap => Some(false),
            Overlap::Covered => Some(true),
            Overlap::Other => self.runs_share_bytes(other, max_runs),
        }
    }

    /// [`Geometry::shares_bytes`] for a pair [`Geometry::classify`] already found `Other`:
    /// the walk alone.
    pub fn runs_share_bytes(&self, other: &Geometry, max_runs: usize) -> Option<bool> {
        let total = self.run_count(max_runs)? + other.run_count(max_runs)?;
        // A lookup of the chip's TensorMap asks this per hit: few runs need no allocation.
        let mut stack = [(0u64, 0u64, false); STACK_RUNS];
        let mut heap = Vec::new();
        let runs = if total <= STACK_RUNS {
            &mut stack[..total]
        } else {
            heap.resize(total, (0, 0, false));
            &mut heap[..]
        };
        let mut n = 0;
        for (view, mine) in [(self, true), (other, false)] {
            view.for_each_run(|start, end| {
                runs[n] = (start, end, mine);
                n += 1;
            });
        }
        runs.sort_unstable();
        // In start order, a run shares a byte with the other view's runs before it exactly
        // when it starts below the furthest end among them.
        let mut ends = [0u64; 2];
        for &(start, end, mine) in runs.iter() {
            if start < ends[usize::from(!mine)] {
                return Some(true);
            }
            let own = &mut ends[usize::from(mine)];
            *own = (*own).max(end);
        }
        Some(false)
    }

    /// The view's contiguous runs of bytes: the innermost axis when it has stride 1, and each
    /// combination of the axes outside it.
    fn run_axes(&self) -> (u64, &[u64], &[u64]) {
        let rank = usize::from(self.rank);
        let (sizes, strides) = (&self.sizes[..rank], &self.strides[..rank]);
        match strides.first() {
            Some(1) => (sizes[0], &sizes[1..], &strides[1..]),
            _ => (1, sizes, strides),
        }
    }

    /// How many contiguous runs of bytes the view has; `None` past `max_runs`.
    fn run_count(&self, max_runs: usize) -> Option<usize> {
        if self.is_empty() {
            return Some(0);
        }
        let (_, sizes, _) = self.run_axes();
        let count = sizes.iter().try_fold(1u64, |c, &n| c.checked_mul(n))?;
        usize::try_from(count).ok().filter(|&c| c <= max_runs)
    }

    /// Calls `f(start, end)` for each contiguous run of bytes of a non-empty view.
    fn for_each_run(&self, mut f: impl FnMut(u64, u64)) {
        if self.is_empty() {
            return;
        }
        let (run, sizes, strides) = self.run_axes();
        let mut index = [0u64; MAX_AXES];
        loop {
            let offset: u64 = strides.iter().zip(&index).map(|(&s, &i)| i * s).sum();
            f(self.start + offset, self.start + offset + run);
            // The next index, innermost axis first; past the last, every run was seen.
            let mut k = 0;
            loop {
                if k == sizes.len() {
                    return;
                }
                index[k] += 1;
                if index[k] < sizes[k] {
                    break;
                }
                index[k] = 0;
                k += 1;
            }
        }
    }
}

/// Runs [`Geometry::shares_bytes`] sorts on the stack.
const STACK_RUNS: usize = 64;

/// Shape and strides of one length within the dimension limit, and elements of some size:
/// what [`Geometry::new`] and [`Geometry::of_valid`] ask before they look at the axes.
#[inline]
fn well_formed(elem_bytes: u64, shape: &[u32], strides: &[u64]) -> bool {
    shape.len() == strides.len() && shape.len() <= MAX_TENSOR_DIMS && elem_bytes > 0
}

/// The panic of [`Geometry::of_valid`], out of its way.
#[cold]
#[inline(never)]
fn invalid_view(shape: &[u32], strides: &[u64]) -> ! {
    panic!("not a valid view: shape {shape:?}, strides {strides:?}")
}

/// What [`Geometry::dense`] found.
enum Dense {
    /// Some axis has no index.
    Empty,
    /// One run of this many bytes.
    Bytes(u64),
    /// Axes that do not merge into one run: the general algorithm decides.
    Strided,
    /// A stride beyond `u64::MAX` bytes.
    Overflow,
}

/// Adds the axis `(n, s)` to the first `rank` axes, kept sorted by stride, smallest first (ties:
/// smaller size first, so that equal sets of axes give equal forms).
#[inline]
fn insert_sorted(
    sizes: &mut [u64; MAX_AXES],
    strides: &mut [u64; MAX_AXES],
    rank: usize,
    n: u64,
    s: u64,
) {
    let mut k = rank;
    (sizes[k], strides[k]) = (n, s);
    // Swaps, not a shift: LLVM turns a shifting loop into a call of `memmove`, which costs more
    // than these few axes.
    while k > 0 && (strides[k - 1], sizes[k - 1]) > (s, n) {
        sizes.swap(k - 1, k);
        strides.swap(k - 1, k);
        k -= 1;
    }
}

/// Class 3 of the module doc: one view contiguous, the other ordered; `None` otherwise.
fn contiguous_against_ordered(a: &Geometry, b: &Geometry) -> Option<Overlap> {
    if a.is_contiguous() && b.is_ordered() {
        // `a` does not contain `b`'s span (checked before), so it misses a byte of `b`.
        let inside = b.bytes_below(a.end) - b.bytes_below(a.start);
        return Some(if inside == 0 {
            Overlap::NoOverlap
        } else {
            Overlap::Other
        });
    }
    if b.is_contiguous() && a.is_ordered() {
        let inside = a.bytes_below(b.end) - a.bytes_below(b.start);
        return Some(if inside == 0 {
            Overlap::NoOverlap
        } else if inside == b.end - b.start {
            Overlap::Covered
        } else {
            Overlap::Other
        });
    }
    None
}

/// Class 4 of the module doc: both views ordered boxes of their common radix; `None` otherwise.
fn boxes_of_one_radix(a: &Geometry, b: &Geometry) -> Option<Overlap> {
    if !(a.is_ordered() && b.is_ordered()) {
        return None;
    }
    let radix = Radix::common(a.inner_strides(), b.inner_strides())?;
    let mut da = [(0u64, 0u64); MAX_LEVELS];
    let mut db = [(0u64, 0u64); MAX_LEVELS];
    if !(a.digit_box(&radix, &mut da) && b.digit_box(&radix, &mut db)) {
        return None;
    }
    let mut covered = true;
    for (&(a_first, a_count), &(b_first, b_count)) in da.iter().zip(&db).take(radix.len) {
        let (a_end, b_end) = (a_first + a_count, b_first + b_count);
        if a_end <= b_first || b_end <= a_first {
            return Some(Overlap::NoOverlap);
        }
        covered &= a_first <= b_first && b_end <= a_end;
    }
    Some(if covered {
        Overlap::Covered
    } else {
        Overlap::Other
    })
}

/// The levels of a mixed radix, smallest (1) first, each a multiple of the one before, and the
/// digits per row of each level below the top (`rows[j] = levels[j + 1] / levels[j]`).
struct Radix {
    levels: [u64; MAX_LEVELS],
    rows: [u64; MAX_LEVELS],
    len: usize,
}

impl Radix {
    /// The radix of 1 and the strides of two forms (each innermost first), or `None` when a
    /// level is not a multiple of the one before.
    fn common(a: &[u64], b: &[u64]) -> Option<Radix> {
        let mut radix = Radix {
            levels: [0; MAX_LEVELS],
            rows: [0; MAX_LEVELS],
            len: 1,
        };
        radix.levels[0] = 1;
        let (mut i, mut j) = (0, 0);
        loop {
            let level = match (a.get(i), b.get(j)) {
                (Some(&x), Some(&y)) => x.min(y),
                (Some(&x), None) => x,
                (None, Some(&y)) => y,
                (None, None) => return Some(radix),
            };
            i += usize::from(a.get(i) == Some(&level));
            j += usize::from(b.get(j) == Some(&level));
            let last = radix.levels[radix.len - 1];
            if level == last {
                continue;
            }
            if !level.is_multiple_of(last) {
                return None;
            }
            radix.rows[radix.len - 1] = level / last;
            radix.levels[radix.len] = level;
            radix.len += 1;
        }
    }
}
