//! Typed, strided views of bound tensors: [`View`] reads, [`ViewMut`] writes.
//!
//! Implements the kernel side of CHIP_RUNTIME.md §1.4: element `c` of a tensor lives at host
//! address `base_ptr + (start_offset + Σ c_i·stride_i)·elem`, where `base_ptr` is the host
//! address of the buffer's first byte. The descriptor's device base (`desc.base()`) is never
//! used for address arithmetic.
//!
//! # Safety rules
//!
//! Every `unsafe` block of the kernel module (this file and `ctx.rs`) cites these rules.
//!
//! * **R1 — binding.** The runtime binds a tensor only while its buffer is alive and at a fixed
//!   address: a [`BoundTensor`](super::BoundTensor)'s `base_ptr` is the host address of the
//!   buffer's first byte and is valid for reads (and, when `writable`, writes) of
//!   `desc.buffer_bytes()` bytes until every invocation of the task has returned. With the
//!   [`TensorDesc`] invariant (every element of a non-empty tensor lies inside the buffer),
//!   every element address a view computes is in bounds.
//! * **R2 — between tasks.** The runtime orders every task that writes bytes against every task
//!   that reads or writes them (CHIP_RUNTIME.md §3: dependency edges, with a Release/Acquire pair
//!   at completion and dispatch), so no other task touches the bytes a task writes while it
//!   runs. Exception: a graph missing an edge (untracked WAR for pure readers, §3.8, or a manual
//!   scope without the explicit dep) races, as on hardware. That is documented, not prevented
//!   (the design's `race_check` debug option, which would detect it, is not implemented).
//! * **R3 — within one invocation.** A [`KernelCtx`](super::KernelCtx) never hands out a mutable
//!   view whose host bytes overlap any other live view it handed out, nor a view overlapping a
//!   live mutable view (checked at run time by its ledger, conservatively by byte span). A
//!   [`View`] counts as live until the invocation returns (its slices may outlive it); a
//!   [`ViewMut`] until it is dropped (every borrow from it borrows the view).
//! * **R4 — between concurrent invocations of one task** (SPMD blocks, and the lanes of a MIX
//!   block). When more than one invocation may run at once (`block_num > 1` or more than one
//!   lane; the context is then *shared*):
//!   - (a) element accesses through a [`ViewMut`], and through a [`View`] of a *tainted* tensor
//!     (writable, or overlapping a writable argument), are relaxed atomics of the element's
//!     width, so conflicting element accesses are races with an unspecified value, never data
//!     races;
//!   - (b) a plain shared slice ([`View::as_slice`]) is given only for untainted tensors, which
//!     no invocation of the task can write;
//!   - (c) the only mutable slice is [`ViewMut::block_chunk_mut`]: the `block_idx`-th of
//!     `block_num` disjoint chunks, refused with more than one lane (lanes of one block would
//!     share a chunk); [`ViewMut::as_mut_slice`] returns `None`.
//!
//!   Precondition: the runtime tells the context how many invocations share the task
//!   (`block_num`, and the lane count of a MIX task). Residual, like R2's exception: while a
//!   block holds its chunk slice, another block that accesses bytes of that chunk (element-wise,
//!   or through an overlapping tensor) races with a non-atomic access. That is a kernel bug:
//!   a kernel that takes chunk slices must stay inside its own chunk ([`block_chunk`] is the
//!   partition).
//! * **R5 — alignment.** `base_ptr` is aligned to the element size (checked when a view is
//!   created; device allocations are 64-byte aligned). Offsets count whole elements, so every
//!   element address is aligned for `T` and for the atomic of its width.
//!
//! Views hold raw pointers, so they are neither `Send` nor `Sync`: they stay on the core thread
//! running the invocation.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

use crate::tensor::{MAX_DIMS, TensorDesc};

use super::Element;
use super::ctx::Release;

/// The element range of block `block_idx` when `len` elements are split into `block_num`
/// contiguous, near-equal chunks (the first `len % block_num` chunks have one more element).
///
/// Panics when `block_idx >= block_num`.
pub fn block_chunk(len: u64, block_idx: u32, block_num: u32) -> Range<u64> {
    assert!(
        block_idx < block_num,
        "block_idx {block_idx} is out of range for block_num {block_num}"
    );
    let (k, n) = (u64::from(block_idx), u64::from(block_num));
    let (base, rem) = (len / n, len % n);
    let start = k * base + k.min(rem);
    let size = base + u64::from(k < rem);
    start..start + size
}

fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Reads the element at `p`.
///
/// # Safety
///
/// `p` is valid for reads of `size_of::<T>()` bytes (R1) and aligned to `size_of::<T>()` (R5).
/// When `atomic` is false no other thread writes those bytes during the call (R2, R3, R4b);
/// when it is true other threads access them only atomically (R4a).
unsafe fn read_elem<T: Element>(p: *const u8, atomic: bool) -> T {
    if !atomic {
        // SAFETY: valid and aligned per the contract (R1, R5), not written concurrently (R2–R4);
        // every bit pattern is a valid `T` (`Element` requirement).
        return unsafe { p.cast::<T>().read() };
    }
    let p = p.cast_mut();
    // SAFETY (every arm): the atomic has the element's size, `p` is valid and aligned to that
    // size (R1, R5) and concurrent accesses are atomic (R4a); `transmute_copy` reads the
    // same number of bytes it was given, and every bit pattern is a valid `T`.
    unsafe {
        match size_of::<T>() {
            1 => std::mem::transmute_copy(&AtomicU8::from_ptr(p).load(Ordering::Relaxed)),
            2 => std::mem::transmute_copy(&AtomicU16::from_ptr(p.cast()).load(Ordering::Relaxed)),
            4 => std::mem::transmute_copy(&AtomicU32::from_ptr(p.cast()).load(Ordering::Relaxed)),
            8 => std::mem::transmute_copy(&AtomicU64::from_ptr(p.cast()).load(Ordering::Relaxed)),
            n => unreachable!("element size {n} is not 1, 2, 4 or 8"),
        }
    }
}

/// Writes `v` to the element at `p`.
///
/// # Safety
///
/// `p` is valid for writes of `size_of::<T>()` bytes (R1, writable) and aligned to
/// `size_of::<T>()` (R5). When `atomic` is false no other thread accesses those bytes during the
/// call (R2, R3, R4); when it is true other threads access them only atomically (R4a).
unsafe fn write_elem<T: Element>(p: *mut u8, v: T, atomic: bool) {
    if !atomic {
        // SAFETY: valid, writable and aligned per the contract (R1, R5), not accessed
        // concurrently (R2–R4).
        unsafe { p.cast::<T>().write(v) };
        return;
    }
    // SAFETY (every arm): as in `read_elem`; `T` has no padding, so its bytes are initialized
    // and `transmute_copy` to an integer of the same size is a plain bit copy.
    unsafe {
        match size_of::<T>() {
            1 => AtomicU8::from_ptr(p).store(std::mem::transmute_copy(&v), Ordering::Relaxed),
            2 => {
                AtomicU16::from_ptr(p.cast()).store(std::mem::transmute_copy(&v), Ordering::Relaxed)
            }
            4 => {
                AtomicU32::from_ptr(p.cast()).store(std::mem::transmute_copy(&v), Ordering::Relaxed)
            }
            8 => {
                AtomicU64::from_ptr(p.cast()).store(std::mem::transmute_copy(&v), Ordering::Relaxed)
            }
            n => unreachable!("element size {n} is not 1, 2, 4 or 8"),
        }
    }
}

/// Element offsets (from the buffer start, in elements) of a tensor in row-major order.
#[derive(Clone, Debug)]
struct Offsets {
    shape: [u32; MAX_DIMS],
    strides: [u64; MAX_DIMS],
    ndims: usize,
    idx: [u32; MAX_DIMS],
    next: Option<u64>,
    remaining: u64,
}

impl Offsets {
    fn new(desc: &TensorDesc) -> Offsets {
        let ndims = desc.ndims();
        let mut shape = [0; MAX_DIMS];
        let mut strides = [0; MAX_DIMS];
        shape[..ndims].copy_from_slice(desc.shape());
        strides[..ndims].copy_from_slice(desc.strides());
        let next = match desc.is_empty() {
            true => None,
            false => Some(desc.start_offset()),
        };
        Offsets {
            shape,
            strides,
            ndims,
            idx: [0; MAX_DIMS],
            next,
            remaining: if desc.is_empty() { 0 } else { desc.numel() },
        }
    }
}

impl Iterator for Offsets {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let cur = self.next?;
        self.remaining = self.remaining.saturating_sub(1);
        // Odometer step; every intermediate offset stays within the tensor's element range.
        let mut off = cur;
        self.next = None;
        for d in (0..self.ndims).rev() {
            self.idx[d] += 1;
            if self.idx[d] < self.shape[d] {
                off += self.strides[d];
                self.next = Some(off);
                break;
            }
            off -= u64::from(self.shape[d] - 1) * self.strides[d];
            self.idx[d] = 0;
        }
        Some(cur)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = to_usize(self.remaining);
        (n, usize::try_from(self.remaining).ok())
    }
}

/// Address of element offset `off` (in elements from the buffer start).
///
/// # Safety
///
/// `off` is the offset of an element of a non-empty tensor bound under R1.
unsafe fn elem_addr(base: *const u8, off: u64, size: usize) -> *const u8 {
    // SAFETY: the element lies inside the buffer, which is one live allocation (R1), so the
    // byte offset fits in `usize` and the result is in bounds.
    unsafe { base.add(off as usize * size) }
}

fn index_panic(index: &[u32], desc: &TensorDesc) -> ! {
    panic!(
        "index {index:?} is out of bounds for a tensor of shape {:?}",
        desc.shape()
    )
}

/// A read-only view of a bound tensor as elements of type `T`.
pub struct View<'a, T: Element> {
    base: *const u8,
    desc: TensorDesc,
    atomic: bool,
    _marker: PhantomData<&'a [T]>,
}

impl<'a, T: Element> View<'a, T> {
    /// # Safety
    ///
    /// For `'a`: `base` and `desc` satisfy R1 and R5, `T::accepts(desc.dtype())`, and no thread
    /// writes the tensor's bytes, except through relaxed atomics when `atomic` is true (R2–R4).
    pub(super) unsafe fn from_raw(base: *const u8, desc: TensorDesc, atomic: bool) -> View<'a, T> {
        debug_assert!(T::accepts(desc.dtype()));
        debug_assert!((base as usize).is_multiple_of(size_of::<T>()));
        View {
            base,
            desc,
            atomic,
            _marker: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        to_usize(self.desc.numel())
    }

    /// `true` when some dimension is 0.
    pub fn is_empty(&self) -> bool {
        self.desc.is_empty()
    }

    pub fn shape(&self) -> &[u32] {
        self.desc.shape()
    }

    /// The tensor's descriptor.
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }

    /// The element at `index`; panics when the index has the wrong rank or is out of bounds.
    pub fn get(&self, index: &[u32]) -> T {
        let Some(off) = self.desc.element_offset(index) else {
            index_panic(index, &self.desc)
        };
        // SAFETY: `off` is an element of this non-empty tensor (R1); the view's contract covers
        // alignment and concurrent writers (R2–R5).
        unsafe { read_elem(elem_addr(self.base, off, size_of::<T>()), self.atomic) }
    }

    /// The elements in row-major order.
    pub fn iter(&self) -> ViewIter<'a, T> {
        ViewIter {
            base: self.base,
            offsets: Offsets::new(&self.desc),
            atomic: self.atomic,
            _marker: PhantomData,
        }
    }

    /// The elements in row-major order, copied.
    pub fn to_vec(&self) -> Vec<T> {
        if let Some(s) = self.as_slice() {
            return s.to_vec();
        }
        self.iter().collect()
    }

    /// The elements as a slice when the tensor is contiguous and no invocation of this task
    /// can write it (R4b); `None` otherwise.
    pub fn as_slice(&self) -> Option<&'a [T]> {
        if self.atomic || !self.desc.is_contiguous() {
            return None;
        }
        if self.desc.is_empty() {
            return Some(&[]);
        }
        // SAFETY: a contiguous non-empty tensor occupies elements
        // [start_offset, start_offset + numel) of the live buffer (R1), aligned (R5); nothing
        // writes them during 'a: other tasks are ordered (R2), this invocation holds no
        // overlapping mutable view (R3) and no other invocation can write an untainted
        // tensor (R4b).
        unsafe {
            let p = elem_addr(self.base, self.desc.start_offset(), size_of::<T>());
            Some(std::slice::from_raw_parts(p.cast::<T>(), self.len()))
        }
    }
}

impl<T: Element> fmt::Debug for View<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("desc", &self.desc)
            .field("atomic", &self.atomic)
            .finish()
    }
}

/// Row-major iterator over a [`View`]'s elements.
pub struct ViewIter<'a, T: Element> {
    base: *const u8,
    offsets: Offsets,
    atomic: bool,
    _marker: PhantomData<&'a [T]>,
}

impl<T: Element> Iterator for ViewIter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let off = self.offsets.next()?;
        // SAFETY: `off` is an element of the view's non-empty tensor; the view's contract
        // (R1–R5) holds for the iterator's lifetime.
        Some(unsafe { read_elem(elem_addr(self.base, off, size_of::<T>()), self.atomic) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.offsets.size_hint()
    }
}

/// A writable view of a bound tensor (OUTPUT, INOUT or OUTPUT_EXISTING) as elements of `T`.
///
/// In a shared context (several invocations of the task may run at once, R4) element accesses
/// are relaxed atomics, [`ViewMut::as_mut_slice`] returns `None` and
/// [`ViewMut::block_chunk_mut`] is the way to get a slice.
pub struct ViewMut<'a, T: Element> {
    base: *mut u8,
    desc: TensorDesc,
    shared: bool,
    block_idx: u32,
    block_num: u32,
    lanes: u32,
    /// Keeps this view's R3 ledger entry until the view is dropped.
    _release: Release<'a>,
    _marker: PhantomData<&'a mut [T]>,
}

impl<'a, T: Element> ViewMut<'a, T> {
    /// # Safety
    ///
    /// For `'a`: `base` and `desc` satisfy R1 (writable) and R5, `T::accepts(desc.dtype())`, no
    /// other view of this invocation overlaps the tensor while `release` is held (R3), and
    /// `shared` is true whenever another invocation of the task may run at once, with
    /// `block_idx`, `block_num` and `lanes` describing them (R4).
    pub(super) unsafe fn from_raw(
        base: *mut u8,
        desc: TensorDesc,
        shared: bool,
        block_idx: u32,
        block_num: u32,
        lanes: u32,
        release: Release<'a>,
    ) -> ViewMut<'a, T> {
        debug_assert!(T::accepts(desc.dtype()));
        debug_assert!((base as usize).is_multiple_of(size_of::<T>()));
        debug_assert!(block_idx < block_num);
        ViewMut {
            base,
            desc,
            shared,
            block_idx,
            block_num,
            lanes,
            _release: release,
            _marker: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        to_usize(self.desc.numel())
    }

    /// `true` when some dimension is 0.
    pub fn is_empty(&self) -> bool {
        self.desc.is_empty()
    }

    pub fn shape(&self) -> &[u32] {
        self.desc.shape()
    }

    /// The tensor's descriptor.
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }

    fn addr(&self, index: &[u32]) -> *mut u8 {
        let Some(off) = self.desc.element_offset(index) else {
            index_panic(index, &self.desc)
        };
        // SAFETY: `off` is an element of this non-empty tensor (R1).
        unsafe { elem_addr(self.base, off, size_of::<T>()).cast_mut() }
    }

    /// The element at `index`; panics when the index has the wrong rank or is out of bounds.
    pub fn get(&self, index: &[u32]) -> T {
        let p = self.addr(index);
        // SAFETY: in bounds (R1) and aligned (R5); exclusive to this invocation (R2, R3) or,
        // when shared, accessed atomically by every invocation (R4a).
        unsafe { read_elem(p, self.shared) }
    }

    /// The elements in row-major order, copied.
    pub fn to_vec(&self) -> Vec<T> {
        let size = size_of::<T>();
        Offsets::new(&self.desc)
            // SAFETY: as in `get`, for every element offset of the tensor.
            .map(|off| unsafe { read_elem(elem_addr(self.base, off, size), self.shared) })
            .collect()
    }

    /// Writes `value` at `index`; panics when the index has the wrong rank or is out of bounds.
    pub fn set(&mut self, index: &[u32], value: T) {
        let p = self.addr(index);
        // SAFETY: in bounds and writable (R1), aligned (R5); exclusive to this invocation
        // (R2, R3) or, when shared, accessed atomically by every invocation (R4a).
        unsafe { write_elem(p, value, self.shared) }
    }

    /// Writes `value` to every element.
    pub fn fill(&mut self, value: T) {
        if let Some(s) = self.as_mut_slice() {
            s.fill(value);
            return;
        }
        let size = size_of::<T>();
        for off in Offsets::new(&self.desc) {
            // SAFETY: as in `set`, for every element offset of the tensor.
            unsafe {
                write_elem(
                    elem_addr(self.base, off, size).cast_mut(),
                    value,
                    self.shared,
                )
            }
        }
    }

    /// Writes `src` into the tensor in row-major order; panics unless `src.len() == self.len()`.
    pub fn copy_from_slice(&mut self, src: &[T]) {
        assert_eq!(
            src.len(),
            self.len(),
            "copy_from_slice: source has {} elements, tensor of shape {:?} has {}",
            src.len(),
            self.desc.shape(),
            self.len()
        );
        if let Some(s) = self.as_mut_slice() {
            s.copy_from_slice(src);
            return;
        }
        let size = size_of::<T>();
        for (off, &v) in Offsets::new(&self.desc).zip(src) {
            // SAFETY: as in `set`, for every element offset of the tensor.
            unsafe { write_elem(elem_addr(self.base, off, size).cast_mut(), v, self.shared) }
        }
    }

    /// The whole tensor as a slice when it is contiguous and the context is not shared (one
    /// block, one lane); `None` otherwise (use [`ViewMut::block_chunk_mut`] in SPMD kernels).
    pub fn as_mut_slice(&mut self) -> Option<&mut [T]> {
        if self.shared || !self.desc.is_contiguous() {
            return None;
        }
        let whole = 0..self.desc.numel();
        Some(self.slice_of(whole))
    }

    /// The row-major element range of this block's chunk: the `block_idx`-th of `block_num`
    /// near-equal contiguous chunks ([`block_chunk`]).
    pub fn block_chunk_range(&self) -> Range<usize> {
        let r = block_chunk(self.desc.numel(), self.block_idx, self.block_num);
        to_usize(r.start)..to_usize(r.end)
    }

    /// This block's chunk of a contiguous tensor as a slice ([`ViewMut::block_chunk_range`]).
    ///
    /// Sound in SPMD tasks because chunks of different blocks are disjoint (R4c). Panics when
    /// the tensor is not contiguous, or when the task runs more than one lane per block (MIX),
    /// whose lanes would share the chunk.
    pub fn block_chunk_mut(&mut self) -> &mut [T] {
        assert!(
            self.desc.is_contiguous(),
            "block_chunk_mut needs a contiguous tensor, got shape {:?} strides {:?}",
            self.desc.shape(),
            self.desc.strides()
        );
        assert!(
            self.lanes == 1,
            "block_chunk_mut is unavailable when {} kernels of a MIX task share each block",
            self.lanes
        );
        let r = block_chunk(self.desc.numel(), self.block_idx, self.block_num);
        self.slice_of(r)
    }

    /// Elements `r` (row-major indices) of a contiguous tensor as a slice.
    fn slice_of(&mut self, r: Range<u64>) -> &mut [T] {
        debug_assert!(self.desc.is_contiguous() && r.end <= self.desc.numel());
        if r.is_empty() {
            return &mut [];
        }
        // SAFETY: the tensor is contiguous and non-empty, so elements
        // [start_offset + r.start, start_offset + r.end) lie in the live, writable buffer (R1)
        // at aligned addresses (R5). No other access overlaps them while the slice (borrowing
        // `self` mutably) lives: other tasks are ordered (R2), this invocation holds no other
        // overlapping view (R3), and other invocations are either absent (`as_mut_slice` needs
        // an unshared context) or own disjoint chunks (R4c).
        unsafe {
            let p = elem_addr(
                self.base,
                self.desc.start_offset() + r.start,
                size_of::<T>(),
            );
            let len = (r.end - r.start) as usize;
            std::slice::from_raw_parts_mut(p.cast_mut().cast::<T>(), len)
        }
    }
}

impl<T: Element> fmt::Debug for ViewMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ViewMut")
            .field("desc", &self.desc)
            .field("shared", &self.shared)
            .field(
                "block",
                &format_args!("{}/{}", self.block_idx, self.block_num),
            )
            .field("lanes", &self.lanes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_block_chunk_partitions() {
        for len in [0u64, 1, 7, 8, 100, 1001] {
            for num in 1..=12u32 {
                let mut next = 0;
                for idx in 0..num {
                    let r = block_chunk(len, idx, num);
                    assert_eq!(r.start, next, "len {len} num {num} idx {idx}");
                    let size = r.end - r.start;
                    assert!(size == len / u64::from(num) || size == len / u64::from(num) + 1);
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
        assert_eq!(block_chunk(10, 0, 3), 0..4);
        assert_eq!(block_chunk(10, 1, 3), 4..7);
        assert_eq!(block_chunk(10, 2, 3), 7..10);
    }

    #[test]
    fn kernel_offsets_row_major() {
        let t = TensorDesc::contiguous(0, 4 * 24, &[2, 3, 4], pto_types::DType::F32).unwrap();
        let all: Vec<u64> = Offsets::new(&t).collect();
        assert_eq!(all, (0..24).collect::<Vec<_>>());
        let tt = t.transpose(0, 2).unwrap();
        let mut expect = Vec::new();
        for k in 0..4u64 {
            for j in 0..3u64 {
                for i in 0..2u64 {
                    expect.push(12 * i + 4 * j + k);
                }
            }
        }
        let got: Vec<u64> = Offsets::new(&tt).collect();
        assert_eq!(got, expect);
        let empty = t.slice(1, 0, 0).unwrap();
        assert_eq!(Offsets::new(&empty).count(), 0);
        assert_eq!(Offsets::new(&t).size_hint(), (24, Some(24)));
    }
}
