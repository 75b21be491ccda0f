//! The chip tensor descriptor and its zero-copy views.
//!
//! Implements CHIP_RUNTIME.md §1.4 (tensor descriptor, views) over the addresses of §1.3.
//! A [`TensorDesc`] is a plain `Copy` value; every constructor and view validates it, so a
//! descriptor that exists always lies inside its buffer.

use std::fmt;
use std::ops::Range;

use pto_types::DType;
use pto_types::geometry::{self, Geometry};

use crate::task_id::TaskId;

/// Maximum tensor rank (the contract's, so that every view has a [`Geometry`]).
pub const MAX_DIMS: usize = pto_types::args::MAX_TENSOR_DIMS;

/// Which side of the one 64-bit address space a buffer lives in (§1.3).
///
/// Device allocations and registered host buffers occupy disjoint address ranges, so the base
/// address alone identifies a buffer; the space only tells the runtime which table resolves
/// the [`RegionId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrSpace {
    /// Device memory allocated by the chip (run heap or device allocations).
    Device,
    /// A host buffer registered with the chip for one run (caller tensors, shared memory).
    Host,
}

/// Index into the run's table of backing pointers for one address space (§1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u32);

/// Where the buffer a tensor views lives in the chip's address space, and how many bytes it
/// has. (A task argument names its buffer by identity instead: `pto_types::BufferRef`; a chip
/// run registers that buffer and gives it a `BufferAddr`.)
///
/// Any value is a valid `BufferAddr`; [`TensorDesc`] constructors check that `base + bytes` does
/// not overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferAddr {
    pub space: AddrSpace,
    pub region: RegionId,
    /// Device address of the buffer's first byte; the TensorMap key.
    pub base: u64,
    /// Size of the buffer in bytes.
    pub bytes: u64,
}

impl BufferAddr {
    /// A device buffer in region 0.
    pub const fn device(base: u64, bytes: u64) -> BufferAddr {
        BufferAddr {
            space: AddrSpace::Device,
            region: RegionId(0),
            base,
            bytes,
        }
    }
}

/// Why a descriptor or a view could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    #[error("tensor rank {0} is outside 1..=5")]
    Rank(usize),
    #[error("{got} {what} given for a rank-{ndims} tensor")]
    ArgCount {
        what: &'static str,
        got: usize,
        ndims: usize,
    },
    #[error("stride of dimension {dim} is 0 (strides must be > 0)")]
    ZeroStride { dim: usize },
    #[error("buffer at {base:#x} with {bytes} bytes overflows the address space")]
    BufferOverflow { base: u64, bytes: u64 },
    #[error(
        "tensor needs elements [{start}, {end}) but the buffer holds {capacity} {dtype} elements"
    )]
    OutOfBounds {
        start: u64,
        end: u64,
        capacity: u64,
        dtype: DType,
    },
    #[error("view of dimension {dim}: offset {offset} + length {len} exceeds size {size}")]
    ViewOutOfRange {
        dim: usize,
        offset: u32,
        len: u32,
        size: u32,
    },
    #[error("dimension {dim} is out of range for a rank-{ndims} tensor")]
    BadDim { dim: usize, ndims: usize },
    #[error("{perm:?} is not a permutation of 0..{ndims}")]
    BadPermutation { perm: Vec<usize>, ndims: usize },
    #[error("reshape needs a contiguous tensor")]
    NotContiguous,
    #[error("reshape from {from} to {to} elements")]
    NumelMismatch { from: u64, to: u64 },
}

/// The chip tensor descriptor (§1.4).
///
/// Element `c` is at byte `base + (start_offset + Σ c_i·stride_i)·elem`.
///
/// Invariants (established by every constructor and view, relied on by the TensorMap and by
/// kernel views):
/// - `1 ≤ ndims ≤ 5`; entries of `shape` and `strides` at index `≥ ndims` are 0;
/// - `strides[i] > 0` for `i < ndims` (elements, not bytes);
/// - `base + buffer_bytes` does not overflow;
/// - the tensor lies inside its buffer: `start_offset + element_extent() ≤ buffer_bytes / elem`,
///   where the extent is `1 + Σ (shape_i − 1)·stride_i`;
/// - an **empty** tensor (some `shape_i` is 0) touches no element: its extent is 0 and its
///   `start_offset` is unconstrained (an empty view may start past the buffer end).
///
/// `version`, `manual_dep` and `owner` are free-form metadata; views keep them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorDesc {
    buffer: BufferAddr,
    start_offset: u64,
    shape: [u32; MAX_DIMS],
    strides: [u64; MAX_DIMS],
    ndims: u8,
    dtype: DType,
    version: i32,
    manual_dep: bool,
    owner: Option<TaskId>,
}

impl TensorDesc {
    /// A validated descriptor over `buffer` (version 0, no `manual_dep`, no owner).
    pub fn new(
        buffer: BufferAddr,
        start_offset: u64,
        shape: &[u32],
        strides: &[u64],
        dtype: DType,
    ) -> Result<TensorDesc, TensorError> {
        let ndims = shape.len();
        if ndims == 0 || ndims > MAX_DIMS {
            return Err(TensorError::Rank(ndims));
        }
        if strides.len() != ndims {
            return Err(TensorError::ArgCount {
                what: "strides",
                got: strides.len(),
                ndims,
            });
        }
        let mut desc = TensorDesc {
            buffer,
            start_offset,
            shape: [0; MAX_DIMS],
            strides: [0; MAX_DIMS],
            ndims: ndims as u8,
            dtype,
            version: 0,
            manual_dep: false,
            owner: None,
        };
        desc.shape[..ndims].copy_from_slice(shape);
        desc.strides[..ndims].copy_from_slice(strides);
        desc.validate()?;
        Ok(desc)
    }

    /// A row-major contiguous tensor at the start of a device buffer in region 0.
    ///
    /// Use [`TensorDesc::with_location`] for host buffers or other regions.
    pub fn contiguous(
        base: u64,
        buffer_bytes: u64,
        shape: &[u32],
        dtype: DType,
    ) -> Result<TensorDesc, TensorError> {
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(TensorError::Rank(shape.len()));
        }
        let strides = contiguous_strides(shape);
        TensorDesc::new(
            BufferAddr::device(base, buffer_bytes),
            0,
            shape,
            &strides[..shape.len()],
            dtype,
        )
    }

    /// Checks the invariants listed on the type.
    fn validate(&self) -> Result<(), TensorError> {
        let ndims = self.ndims();
        if ndims == 0 || ndims > MAX_DIMS {
            return Err(TensorError::Rank(ndims));
        }
        if let Some(dim) = self.strides().iter().position(|&s| s == 0) {
            return Err(TensorError::ZeroStride { dim });
        }
        if self.buffer.base.checked_add(self.buffer.bytes).is_none() {
            return Err(TensorError::BufferOverflow {
                base: self.buffer.base,
                bytes: self.buffer.bytes,
            });
        }
        geometry::check_inside(
            self.elem_size(),
            self.start_offset,
            self.shape(),
            self.strides(),
            self.buffer.bytes,
        )
        .map_err(|e| TensorError::OutOfBounds {
            start: self.start_offset,
            end: u64::try_from(e.end).unwrap_or(u64::MAX),
            capacity: e.capacity,
            dtype: self.dtype,
        })
    }

    fn extent_u128(&self) -> u128 {
        geometry::element_extent(self.shape(), self.strides())
    }

    // ----- metadata builders (views keep metadata) -----

    /// The same view with another owner (the allocating task; `None` for external tensors).
    pub fn with_owner(mut self, owner: Option<TaskId>) -> TensorDesc {
        self.owner = owner;
        self
    }

    /// The same view with another version.
    pub fn with_version(mut self, version: i32) -> TensorDesc {
        self.version = version;
        self
    }

    /// The same view with `manual_dep` set or cleared (skips TensorMap lookup and insert).
    pub fn with_manual_dep(mut self, manual_dep: bool) -> TensorDesc {
        self.manual_dep = manual_dep;
        self
    }

    /// The same view with the buffer's address space and region replaced.
    pub fn with_location(mut self, space: AddrSpace, region: RegionId) -> TensorDesc {
        self.buffer.space = space;
        self.buffer.region = region;
        self
    }

    /// The same view over `buffer`, `start_offset` elements in, owned by `owner`: how a replay
    /// moves a recorded view onto the tensors it binds. The caller guarantees that the view lies
    /// inside `buffer` (the binding was checked against the recording).
    pub(crate) fn relocated(
        mut self,
        buffer: BufferAddr,
        start_offset: u64,
        owner: Option<TaskId>,
    ) -> TensorDesc {
        self.buffer = buffer;
        self.start_offset = start_offset;
        self.owner = owner;
        debug_assert!(self.validate().is_ok(), "a relocated view fits its buffer");
        self
    }

    // ----- getters -----

    pub fn buffer(&self) -> BufferAddr {
        self.buffer
    }
    /// Buffer base address: the TensorMap key.
    pub fn base(&self) -> u64 {
        self.buffer.base
    }
    pub fn buffer_bytes(&self) -> u64 {
        self.buffer.bytes
    }
    pub fn space(&self) -> AddrSpace {
        self.buffer.space
    }
    pub fn region(&self) -> RegionId {
        self.buffer.region
    }
    /// Offset of element `[0, …, 0]` from the buffer base, in elements.
    pub fn start_offset(&self) -> u64 {
        self.start_offset
    }
    pub fn ndims(&self) -> usize {
        usize::from(self.ndims)
    }
    pub fn shape(&self) -> &[u32] {
        &self.shape[..self.ndims()]
    }
    /// Strides in elements, all `> 0`.
    pub fn strides(&self) -> &[u64] {
        &self.strides[..self.ndims()]
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Element size in bytes.
    pub fn elem_size(&self) -> u64 {
        self.dtype.size() as u64
    }
    pub fn version(&self) -> i32 {
        self.version
    }
    pub fn manual_dep(&self) -> bool {
        self.manual_dep
    }
    pub fn owner(&self) -> Option<TaskId> {
        self.owner
    }

    // ----- derived quantities -----

    /// Number of elements (`Π shape_i`), saturating at `u64::MAX` (only a view whose
    /// elements alias each other can get there).
    pub fn numel(&self) -> u64 {
        saturating_numel(self.shape())
    }

    /// `true` when some dimension is 0.
    pub fn is_empty(&self) -> bool {
        self.shape().contains(&0)
    }

    /// `numel · elem` bytes, saturating.
    pub fn nbytes(&self) -> u64 {
        self.numel().saturating_mul(self.elem_size())
    }

    /// Whole elements that fit in the buffer.
    pub fn capacity_elems(&self) -> u64 {
        self.buffer.bytes / self.elem_size()
    }

    /// `1 + Σ (shape_i − 1)·stride_i`, or 0 for an empty tensor.
    pub fn element_extent(&self) -> u64 {
        // Fits: validation bounded it by the buffer capacity.
        self.extent_u128() as u64
    }

    /// The element offsets `[start_offset, start_offset + extent)` spanned by the tensor
    /// (`start_offset..start_offset` for an empty tensor).
    pub fn element_range(&self) -> Range<u64> {
        self.start_offset..self.start_offset + self.element_extent()
    }

    /// The absolute byte addresses spanned by the tensor; `base..base` for an empty tensor.
    pub fn byte_span(&self) -> Range<u64> {
        if self.is_empty() {
            return self.buffer.base..self.buffer.base;
        }
        let elems = self.element_range();
        let elem = self.elem_size();
        self.buffer.base + elems.start * elem..self.buffer.base + elems.end * elem
    }

    /// The bytes of the buffer the tensor touches, relative to its base: what the TensorMap
    /// compares (§3.7).
    #[inline]
    pub fn geometry(&self) -> Geometry {
        let elem = self.elem_size();
        // An empty view's offset is unconstrained (it may lie past the buffer end), so its
        // byte offset may wrap; `Geometry::of_valid` makes it `EMPTY` without reading it. A
        // validated tensor lies inside its buffer.
        Geometry::of_valid(
            elem,
            self.start_offset.wrapping_mul(elem),
            self.shape(),
            self.strides(),
        )
    }

    /// Offset in elements from the buffer base of the element at `index`, or `None` when the
    /// index has the wrong rank or is out of bounds.
    pub fn element_offset(&self, index: &[u32]) -> Option<u64> {
        if index.len() != self.ndims() {
            return None;
        }
        let mut off = self.start_offset;
        for ((&i, &n), &s) in index.iter().zip(self.shape()).zip(self.strides()) {
            if i >= n {
                return None;
            }
            off += u64::from(i) * s;
        }
        Some(off)
    }

    /// `true` when the elements occupy `[start_offset, start_offset + numel)` in row-major
    /// order. Dimensions of size 1 may have any stride; empty tensors are contiguous.
    pub fn is_contiguous(&self) -> bool {
        if self.is_empty() {
            return true;
        }
        let mut expected = 1u64;
        for (&n, &s) in self.shape().iter().zip(self.strides()).rev() {
            if n != 1 && s != expected {
                return false;
            }
            expected *= u64::from(n);
        }
        true
    }

    // ----- zero-copy views -----

    /// The sub-box `offsets[i] .. offsets[i] + shape[i]` of every dimension: same strides,
    /// `start_offset` advanced by `Σ offsets_i·stride_i`.
    #[inline]
    pub fn view(&self, shape: &[u32], offsets: &[u32]) -> Result<TensorDesc, TensorError> {
        let ndims = self.ndims();
        if shape.len() != ndims {
            return Err(TensorError::ArgCount {
                what: "view dimensions",
                got: shape.len(),
                ndims,
            });
        }
        if offsets.len() != ndims {
            return Err(TensorError::ArgCount {
                what: "view offsets",
                got: offsets.len(),
                ndims,
            });
        }
        let mut new_shape = self.shape;
        let mut start_offset = self.start_offset;
        // A loop of constant length, which the compiler unrolls: the new shape stays in
        // registers and the result is written once. Editing a copy of `self` in memory, one
        // dimension at a time, made every caller's reload of it stall store forwarding
        // (`perf annotate`: three fifths of a view's time).
        for dim in 0..MAX_DIMS {
            if dim >= ndims {
                break;
            }
            let (offset, len, size) = (offsets[dim], shape[dim], self.shape[dim]);
            if u64::from(offset) + u64::from(len) > u64::from(size) {
                return Err(TensorError::ViewOutOfRange {
                    dim,
                    offset,
                    len,
                    size,
                });
            }
            new_shape[dim] = len;
            // Only an empty view can step past the buffer end (and then arbitrarily far).
            let step = u64::from(offset).saturating_mul(self.strides[dim]);
            start_offset = start_offset.saturating_add(step);
        }
        let out = TensorDesc {
            shape: new_shape,
            start_offset,
            ..*self
        };
        debug_assert_eq!(out.validate(), Ok(()));
        Ok(out)
    }

    /// Elements `start .. start + len` of dimension `dim`, the others unchanged.
    pub fn slice(&self, dim: usize, start: u32, len: u32) -> Result<TensorDesc, TensorError> {
        let ndims = self.ndims();
        if dim >= ndims {
            return Err(TensorError::BadDim { dim, ndims });
        }
        let mut shape = self.shape;
        let mut offsets = [0u32; MAX_DIMS];
        shape[dim] = len;
        offsets[dim] = start;
        self.view(&shape[..ndims], &offsets[..ndims])
    }

    /// Dimensions `a` and `b` swapped (shape and strides).
    pub fn transpose(&self, a: usize, b: usize) -> Result<TensorDesc, TensorError> {
        let ndims = self.ndims();
        for dim in [a, b] {
            if dim >= ndims {
                return Err(TensorError::BadDim { dim, ndims });
            }
        }
        let mut out = *self;
        out.shape.swap(a, b);
        out.strides.swap(a, b);
        Ok(out)
    }

    /// Dimension `i` of the result is dimension `perm[i]` of `self`.
    pub fn permute(&self, perm: &[usize]) -> Result<TensorDesc, TensorError> {
        let ndims = self.ndims();
        let mut seen = [false; MAX_DIMS];
        let valid = perm.len() == ndims
            && perm
                .iter()
                .all(|&p| p < ndims && !std::mem::replace(&mut seen[p], true));
        if !valid {
            return Err(TensorError::BadPermutation {
                perm: perm.to_vec(),
                ndims,
            });
        }
        let mut out = *self;
        for (i, &p) in perm.iter().enumerate() {
            out.shape[i] = self.shape[p];
            out.strides[i] = self.strides[p];
        }
        Ok(out)
    }

    /// The same elements, in row-major order, with another shape. Only contiguous tensors can
    /// be reshaped; the result is contiguous with the same `start_offset`.
    pub fn reshape(&self, new_shape: &[u32]) -> Result<TensorDesc, TensorError> {
        if new_shape.is_empty() || new_shape.len() > MAX_DIMS {
            return Err(TensorError::Rank(new_shape.len()));
        }
        if !self.is_contiguous() {
            return Err(TensorError::NotContiguous);
        }
        // A contiguous tensor's numel is at most its buffer capacity, so saturation cannot
        // produce a false match.
        let to = saturating_numel(new_shape);
        if to != self.numel() {
            return Err(TensorError::NumelMismatch {
                from: self.numel(),
                to,
            });
        }
        let ndims = new_shape.len();
        let mut out = *self;
        out.ndims = ndims as u8;
        out.shape = [0; MAX_DIMS];
        out.shape[..ndims].copy_from_slice(new_shape);
        out.strides = contiguous_strides(new_shape);
        debug_assert_eq!(out.validate(), Ok(()));
        Ok(out)
    }
}

fn saturating_numel(shape: &[u32]) -> u64 {
    shape
        .iter()
        .fold(1u64, |acc, &n| acc.saturating_mul(u64::from(n)))
}

/// Row-major strides for `shape` (dimensions of size 0 count as 1, so strides stay > 0);
/// entries beyond `shape.len()` are 0.
fn contiguous_strides(shape: &[u32]) -> [u64; MAX_DIMS] {
    let mut strides = [0u64; MAX_DIMS];
    let mut acc = 1u64;
    for (i, &n) in shape.iter().enumerate().rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(u64::from(n.max(1)));
    }
    strides
}

impl fmt::Display for TensorDesc {
    /// `f32[4, 8] @0x1000+16 strides [8, 1]`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{:?} @{:#x}+{} strides {:?}",
            self.dtype,
            self.shape(),
            self.buffer.base,
            self.start_offset,
            self.strides()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x1000;

    /// A contiguous f32 tensor of `shape` filling its buffer exactly.
    fn full(shape: &[u32]) -> TensorDesc {
        let numel: u64 = shape.iter().map(|&n| u64::from(n)).product();
        TensorDesc::contiguous(BASE, numel * 4, shape, DType::F32).unwrap()
    }

    /// Shape, strides and start offset, the parts the view operations change.
    #[track_caller]
    fn check_layout(t: &TensorDesc, shape: &[u32], strides: &[u64], start: u64) {
        assert_eq!(
            (t.shape(), t.strides(), t.start_offset()),
            (shape, strides, start)
        );
    }

    #[test]
    fn contiguous_constructor() {
        let t = TensorDesc::contiguous(BASE, 1024, &[4, 8], DType::F32).unwrap();
        check_layout(&t, &[4, 8], &[8, 1], 0);
        assert_eq!(t.ndims(), 2);
        assert_eq!(t.numel(), 32);
        assert_eq!(t.nbytes(), 128);
        assert_eq!(t.capacity_elems(), 256);
        assert_eq!(t.element_extent(), 32);
        assert_eq!(t.byte_span(), BASE..BASE + 128);
        assert_eq!((t.space(), t.region()), (AddrSpace::Device, RegionId(0)));
        assert_eq!((t.version(), t.manual_dep(), t.owner()), (0, false, None));
        assert!(t.is_contiguous());
        assert_eq!(t.to_string(), "f32[4, 8] @0x1000+0 strides [8, 1]");
    }

    #[test]
    fn new_with_explicit_strides_and_metadata() {
        let buf = BufferAddr {
            space: AddrSpace::Host,
            region: RegionId(3),
            base: BASE,
            bytes: 64,
        };
        let t = TensorDesc::new(buf, 2, &[3, 2], &[4, 2], DType::I16).unwrap();
        // Extent 1 + 2·4 + 1·2 = 11; 2 + 11 = 13 ≤ 32 elements.
        assert_eq!(t.element_extent(), 11);
        assert_eq!(t.element_range(), 2..13);
        assert_eq!(t.byte_span(), BASE + 4..BASE + 26);
        assert!(!t.is_contiguous());
        let id = TaskId::new(1, 7);
        let m = t.with_owner(Some(id)).with_version(3).with_manual_dep(true);
        assert_eq!(
            (m.owner(), m.version(), m.manual_dep()),
            (Some(id), 3, true)
        );
        let moved = m.with_location(AddrSpace::Device, RegionId(9));
        assert_eq!(
            moved.buffer(),
            BufferAddr {
                space: AddrSpace::Device,
                region: RegionId(9),
                ..buf
            }
        );
    }

    #[test]
    fn element_offset_checks_bounds() {
        let t = full(&[4, 8]).slice(1, 2, 4).unwrap();
        assert_eq!(t.element_offset(&[0, 0]), Some(2));
        assert_eq!(t.element_offset(&[3, 3]), Some(2 + 24 + 3));
        assert_eq!(t.element_offset(&[4, 0]), None);
        assert_eq!(t.element_offset(&[0, 4]), None);
        assert_eq!(t.element_offset(&[0]), None);
    }

    #[test]
    fn validation_errors() {
        let buf = BufferAddr::device(BASE, 64);
        let f32 = DType::F32;
        assert_eq!(
            TensorDesc::new(buf, 0, &[], &[], f32),
            Err(TensorError::Rank(0))
        );
        assert_eq!(
            TensorDesc::new(buf, 0, &[1; 6], &[1; 6], f32),
            Err(TensorError::Rank(6))
        );
        assert_eq!(
            TensorDesc::contiguous(BASE, 64, &[], f32),
            Err(TensorError::Rank(0))
        );
        assert_eq!(
            TensorDesc::new(buf, 0, &[2, 2], &[1], f32),
            Err(TensorError::ArgCount {
                what: "strides",
                got: 1,
                ndims: 2
            })
        );
        assert_eq!(
            TensorDesc::new(buf, 0, &[2, 2], &[2, 0], f32),
            Err(TensorError::ZeroStride { dim: 1 })
        );
        assert_eq!(
            TensorDesc::new(BufferAddr::device(u64::MAX - 8, 16), 0, &[1], &[1], f32),
            Err(TensorError::BufferOverflow {
                base: u64::MAX - 8,
                bytes: 16
            })
        );
        // 16 f32 elements: [17] does not fit, [16] does, [16] at offset 1 does not.
        assert_eq!(
            TensorDesc::contiguous(BASE, 64, &[17], f32),
            Err(TensorError::OutOfBounds {
                start: 0,
                end: 17,
                capacity: 16,
                dtype: f32
            })
        );
        assert!(TensorDesc::contiguous(BASE, 64, &[16], f32).is_ok());
        assert_eq!(
            TensorDesc::new(buf, 1, &[16], &[1], f32),
            Err(TensorError::OutOfBounds {
                start: 1,
                end: 17,
                capacity: 16,
                dtype: f32
            })
        );
        // Strided: extent 1 + 3·5 = 16 fits exactly; stride 6 does not.
        assert!(TensorDesc::new(buf, 0, &[4], &[5], f32).is_ok());
        assert!(matches!(
            TensorDesc::new(buf, 0, &[4], &[6], f32),
            Err(TensorError::OutOfBounds { end: 19, .. })
        ));
        // Huge strides saturate instead of overflowing.
        assert!(matches!(
            TensorDesc::new(buf, 0, &[u32::MAX; 5], &[u64::MAX; 5], f32),
            Err(TensorError::OutOfBounds { end: u64::MAX, .. })
        ));
        // Aliasing strides are legal; numel saturates.
        let alias = TensorDesc::new(
            BufferAddr::device(BASE, 1 << 24),
            0,
            &[1 << 16; 5],
            &[1; 5],
            f32,
        );
        assert_eq!(alias.unwrap().numel(), u64::MAX);
        // A partial trailing element is not capacity.
        assert!(matches!(
            TensorDesc::contiguous(BASE, 7, &[2], f32),
            Err(TensorError::OutOfBounds { capacity: 1, .. })
        ));
        let msg = TensorDesc::contiguous(BASE, 64, &[17], f32)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "tensor needs elements [0, 17) but the buffer holds 16 f32 elements"
        );
    }

    #[test]
    fn empty_tensors() {
        let t = TensorDesc::contiguous(BASE, 0, &[0, 4], DType::F32).unwrap();
        check_layout(&t, &[0, 4], &[4, 1], 0);
        assert!(t.is_empty());
        assert_eq!(t.element_extent(), 0);
        assert_eq!(t.byte_span(), BASE..BASE);
        assert!(t.is_contiguous());
        let v = full(&[4, 8]).slice(1, 8, 0).unwrap();
        assert_eq!(v.start_offset(), 8);
        assert!(v.is_empty());
        // An empty view may start past the end of the buffer; it spans nothing.
        let past = full(&[1, 4]).view(&[0, 2], &[1, 1]).unwrap();
        assert_eq!(past.start_offset(), 5);
        assert_eq!(past.byte_span(), BASE..BASE);
        assert_eq!(past.element_offset(&[0, 0]), None);
        let far = TensorDesc::new(
            BufferAddr::device(BASE, 0),
            u64::MAX,
            &[0],
            &[1],
            DType::F32,
        );
        let far = far.unwrap();
        assert_eq!(far.element_range(), u64::MAX..u64::MAX);
        // Its byte offset wraps, and is never read.
        assert_eq!(far.geometry(), Geometry::EMPTY);
        assert_eq!(past.geometry(), Geometry::EMPTY);
    }

    #[test]
    fn view_is_a_sub_box() {
        let t = full(&[4, 8])
            .with_owner(Some(TaskId::new(0, 1)))
            .with_version(2);
        let v = t.view(&[2, 3], &[1, 4]).unwrap();
        check_layout(&v, &[2, 3], &[8, 1], 12);
        assert_eq!((v.owner(), v.version(), v.base()), (t.owner(), 2, BASE));
        // The whole tensor is a view of itself.
        assert_eq!(t.view(&[4, 8], &[0, 0]).unwrap(), t);
        // Views compose.
        let vv = v.view(&[1, 2], &[1, 1]).unwrap();
        check_layout(&vv, &[1, 2], &[8, 1], 12 + 8 + 1);
    }

    #[test]
    fn view_errors() {
        let t = full(&[4, 8]);
        assert_eq!(
            t.view(&[2], &[0, 0]),
            Err(TensorError::ArgCount {
                what: "view dimensions",
                got: 1,
                ndims: 2
            })
        );
        assert_eq!(
            t.view(&[2, 2], &[0]),
            Err(TensorError::ArgCount {
                what: "view offsets",
                got: 1,
                ndims: 2
            })
        );
        assert_eq!(
            t.view(&[2, 5], &[0, 4]),
            Err(TensorError::ViewOutOfRange {
                dim: 1,
                offset: 4,
                len: 5,
                size: 8
            })
        );
        assert_eq!(
            t.view(&[1, 1], &[u32::MAX, 0]),
            Err(TensorError::ViewOutOfRange {
                dim: 0,
                offset: u32::MAX,
                len: 1,
                size: 4
            })
        );
    }

    #[test]
    fn slice_one_dimension() {
        let t = full(&[4, 8]);
        let rows = t.slice(0, 1, 2).unwrap();
        check_layout(&rows, &[2, 8], &[8, 1], 8);
        assert!(rows.is_contiguous());
        let cols = t.slice(1, 6, 2).unwrap();
        check_layout(&cols, &[4, 2], &[8, 1], 6);
        assert!(!cols.is_contiguous());
        assert_eq!(
            t.slice(2, 0, 1),
            Err(TensorError::BadDim { dim: 2, ndims: 2 })
        );
        assert_eq!(
            t.slice(0, 3, 2),
            Err(TensorError::ViewOutOfRange {
                dim: 0,
                offset: 3,
                len: 2,
                size: 4
            })
        );
    }

    #[test]
    fn transpose_swaps_shape_and_strides() {
        let t = full(&[2, 3, 4]);
        let tt = t.transpose(0, 2).unwrap();
        check_layout(&tt, &[4, 3, 2], &[1, 4, 12], 0);
        assert!(!tt.is_contiguous());
        assert_eq!(tt.element_extent(), t.element_extent());
        assert_eq!(tt.transpose(2, 0).unwrap(), t);
        assert_eq!(t.transpose(1, 1).unwrap(), t);
        assert_eq!(
            t.transpose(0, 3),
            Err(TensorError::BadDim { dim: 3, ndims: 3 })
        );
    }

    #[test]
    fn permute_reorders_dimensions() {
        let t = full(&[2, 3, 4]);
        let p = t.permute(&[2, 0, 1]).unwrap();
        check_layout(&p, &[4, 2, 3], &[1, 12, 4], 0);
        assert_eq!(t.permute(&[0, 1, 2]).unwrap(), t);
        assert_eq!(t.permute(&[1, 0, 2]).unwrap(), t.transpose(0, 1).unwrap());
        for bad in [&[0, 1][..], &[0, 1, 1], &[0, 1, 3], &[0, 1, 2, 3]] {
            assert_eq!(
                t.permute(bad),
                Err(TensorError::BadPermutation {
                    perm: bad.to_vec(),
                    ndims: 3
                })
            );
        }
    }

    #[test]
    fn reshape_contiguous_only() {
        let t = full(&[4, 8]);
        let r = t.reshape(&[2, 2, 8]).unwrap();
        check_layout(&r, &[2, 2, 8], &[16, 8, 1], 0);
        assert_eq!(r.reshape(&[4, 8]).unwrap(), t);
        // A row slice is contiguous and keeps its start offset.
        let rows = t.slice(0, 1, 2).unwrap().reshape(&[16]).unwrap();
        check_layout(&rows, &[16], &[1], 8);
        // Size-1 dimensions with odd strides are still contiguous: [8, 1] with strides [1, 8].
        let one = t.slice(0, 3, 1).unwrap().transpose(0, 1).unwrap();
        check_layout(&one, &[8, 1], &[1, 8], 24);
        assert!(one.is_contiguous());
        check_layout(&one.reshape(&[2, 4]).unwrap(), &[2, 4], &[4, 1], 24);
        assert_eq!(
            t.transpose(0, 1).unwrap().reshape(&[32]),
            Err(TensorError::NotContiguous)
        );
        assert_eq!(
            t.slice(1, 0, 4).unwrap().reshape(&[16]),
            Err(TensorError::NotContiguous)
        );
        assert_eq!(
            t.reshape(&[31]),
            Err(TensorError::NumelMismatch { from: 32, to: 31 })
        );
        assert_eq!(t.reshape(&[]), Err(TensorError::Rank(0)));
        assert_eq!(t.reshape(&[1; 6]), Err(TensorError::Rank(6)));
        // Reshaping an empty tensor keeps strides positive.
        let e = t.slice(0, 0, 0).unwrap().reshape(&[0, 5]).unwrap();
        check_layout(&e, &[0, 5], &[5, 1], 0);
    }
}
