//! L3 host buffers and `alloc` slabs: identity, in-use guard, typed copies (NODE_RUNTIME.md §1.3).
//!
//! Every buffer an L3 task may name is a [`BufferInner`]: a byte range of a [`Memory`] — a
//! private `pto_chip::memory::HostMemory` mapping in in-process mode, a shared `memfd`
//! [`Segment`] in child-process mode (a whole segment for `Worker::create_buffer`, a slab of
//! the heap-ring segment for `orch.alloc`) — with the identity `(owner_uid, buffer_id,
//! generation)`. Tensors carry an `Arc<BufferInner>` as their `BufferMemory`, and the Worker's
//! [`BufferTable`] maps identities back to it, so a submit proves that a tensor's buffer is this
//! Worker's and still live. A child receives the segment's descriptor once and finds the bytes
//! by `(segment, offset)` ([`BufferInner::location`]), never by pointer; a node child adopts
//! its parent's buffers under their original identity.
//!
//! In-use guard: each unfinished task referencing a buffer holds one use; host access
//! ([`HostBuffer::read_vec`], …) takes the same lock and fails with [`BufferError::InUse`] while
//! a use is held, so host copies and task execution never overlap. A slab additionally holds a
//! scope hold until its scope ends; when both drop to zero the slab returns to its heap ring.
//!
//! No `unsafe` here: host and sub-task access copies through bounds-checked helpers
//! (`pto_chip::memory::HostMemory`'s locked ones, or `Segment`'s, rule S4 of `shm`).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
pub use pto_chip::kernel::Element;
use pto_chip::memory::{HostMemory, HostScalar};
use pto_types::args::ArgsError;
use pto_types::node_wire::args_blob::{TensorLocation, TensorSpace};
use pto_types::{BufferId, BufferMemory, BufferRef, DType, Tensor};

use crate::error::BufferError;
use crate::heap::HeapRings;
use crate::shm::{Segment, SegmentKey};

/// The bytes of `src` in memory order (a remote buffer's `WriteBuffer` payload), copied
/// through a staging mapping's bounds-checked accessors (no `unsafe` here).
pub(crate) fn to_bytes<T: Element>(src: &[T]) -> Result<Vec<u8>, BufferError> {
    let n = std::mem::size_of_val(src);
    let staging = HostMemory::new(n.max(1)).map_err(|e| BufferError::Create {
        bytes: n,
        reason: e.to_string(),
    })?;
    staging.write::<T>(0, src);
    Ok(staging.read::<u8>(0, n))
}

/// The elements of `bytes` (a remote buffer's `ReadBuffer` payload, whole elements).
pub(crate) fn from_bytes<T: Element>(bytes: &[u8]) -> Result<Vec<T>, BufferError> {
    let count = bytes.len() / std::mem::size_of::<T>();
    let staging = HostMemory::new(bytes.len().max(1)).map_err(|e| BufferError::Create {
        bytes: bytes.len(),
        reason: e.to_string(),
    })?;
    staging.write::<u8>(0, bytes);
    Ok(staging.read::<T>(0, count))
}

/// The bytes behind buffers: a private anonymous mapping (in-process mode) or a shared
/// `memfd` segment (child-process mode, and every buffer a child maps).
#[derive(Clone, Debug)]
pub(crate) enum Memory {
    Anon(Arc<HostMemory>),
    Shared(Arc<Segment>),
    /// A chip's device allocation (`alloc_child_tensor`): no host bytes in this process; the
    /// chip resolves it (in-process lane: `ChipWorker::device_buffer`; child: the wire tensor).
    Device {
        chip: u32,
        alloc: u64,
        bytes: usize,
    },
    /// A buffer of a remote worker's session (`Worker::create_remote_buffer`): no host bytes
    /// in this process; tasks for that worker name it by `handle`, the server's buffer id.
    Remote {
        worker: u32,
        handle: u64,
        bytes: usize,
    },
}

impl Memory {
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        match self {
            Memory::Anon(m) => m.as_ptr(),
            Memory::Shared(s) => s.as_ptr(),
            Memory::Device { .. } | Memory::Remote { .. } => std::ptr::null_mut(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Memory::Anon(m) => m.len(),
            Memory::Shared(s) => s.len(),
            Memory::Device { bytes, .. } | Memory::Remote { bytes, .. } => *bytes,
        }
    }

    /// `count` elements from element `at` (bounds-checked; panics outside the memory).
    fn read<T: HostScalar>(&self, at: usize, count: usize) -> Vec<T> {
        match self {
            Memory::Anon(m) => m.read::<T>(at, count),
            Memory::Shared(s) => s.read_elems::<T>(at, count),
            // `check_elems` refuses device and remote buffers before any read.
            Memory::Device { .. } | Memory::Remote { .. } => Vec::new(),
        }
    }

    fn write<T: HostScalar>(&self, at: usize, src: &[T]) {
        match self {
            Memory::Anon(m) => m.write::<T>(at, src),
            Memory::Shared(s) => s.write_elems::<T>(at, src),
            Memory::Device { .. } | Memory::Remote { .. } => {}
        }
    }

    pub(crate) fn segment(&self) -> Option<&Arc<Segment>> {
        match self {
            Memory::Anon(_) | Memory::Device { .. } | Memory::Remote { .. } => None,
            Memory::Shared(s) => Some(s),
        }
    }
}

/// Uses of a buffer; guarded by `BufferInner::uses`.
#[derive(Debug, Default)]
struct Uses {
    /// Unfinished tasks referencing the buffer.
    tasks: u32,
    /// Slabs: the scope that allocated it is still open.
    scope_hold: bool,
    /// Slabs: returned to the heap ring; the identity is dead.
    released: bool,
}

/// Where a slab lives in the heap rings.
struct SlabLink {
    heap: Arc<HeapRings>,
    ring: usize,
    slab: u64,
}

/// One buffer: identity, memory range and uses.
pub(crate) struct BufferInner {
    id: BufferId,
    memory: Memory,
    /// First byte inside `mapping`.
    base: usize,
    len: usize,
    uses: Mutex<Uses>,
    /// Mirrors `Uses::scope_hold`, readable by the heap ring without this buffer's lock.
    scope_held: Arc<AtomicBool>,
    slab: Option<SlabLink>,
}

impl fmt::Debug for BufferInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferInner")
            .field("id", &self.id)
            .field("len", &self.len)
            .field("slab", &self.slab.as_ref().map(|s| (s.ring, s.slab)))
            .finish()
    }
}

impl BufferMemory for BufferInner {
    fn as_ptr(&self) -> *mut u8 {
        // `wrapping_add` is safe; `base + len` is inside the mapping by construction.
        self.memory.as_ptr().wrapping_add(self.base)
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl BufferInner {
    /// A whole mapping of `bytes` bytes.
    pub(crate) fn new_buffer(id: BufferId, bytes: usize) -> Result<Arc<BufferInner>, BufferError> {
        let mapping = HostMemory::new(bytes).map_err(|e| BufferError::Create {
            bytes,
            reason: e.to_string(),
        })?;
        Ok(BufferInner::new_window(id, Memory::Anon(mapping), 0, bytes))
    }

    /// A whole shared segment (child-process mode: `Worker::create_buffer`).
    pub(crate) fn new_shared(id: BufferId, segment: Arc<Segment>) -> Arc<BufferInner> {
        let len = segment.len();
        BufferInner::new_window(id, Memory::Shared(segment), 0, len)
    }

    /// `len` bytes of `memory` from `base`, with no slab (a child's view of a parent buffer).
    pub(crate) fn new_window(
        id: BufferId,
        memory: Memory,
        base: usize,
        len: usize,
    ) -> Arc<BufferInner> {
        Arc::new(BufferInner {
            id,
            memory,
            base,
            len,
            uses: Mutex::new(Uses::default()),
            scope_held: Arc::new(AtomicBool::new(false)),
            slab: None,
        })
    }

    /// A slab of a heap ring, held by its scope. `scope_held` is shared with the ring's record.
    pub(crate) fn new_slab(
        id: BufferId,
        heap: Arc<HeapRings>,
        ring: usize,
        slab: u64,
        base: usize,
        len: usize,
        scope_held: Arc<AtomicBool>,
    ) -> Arc<BufferInner> {
        let memory = heap.memory();
        Arc::new(BufferInner {
            id,
            memory,
            base,
            len,
            uses: Mutex::new(Uses {
                tasks: 0,
                scope_hold: true,
                released: false,
            }),
            scope_held,
            slab: Some(SlabLink { heap, ring, slab }),
        })
    }

    pub(crate) fn id(&self) -> BufferId {
        self.id
    }

    /// A device allocation `alloc` of `bytes` on chip `chip`, named by `id` in this Worker.
    pub(crate) fn new_device(
        id: BufferId,
        chip: u32,
        alloc: u64,
        bytes: usize,
    ) -> Arc<BufferInner> {
        BufferInner::new_window(id, Memory::Device { chip, alloc, bytes }, 0, bytes)
    }

    /// A remote worker's buffer (`Worker::create_remote_buffer`).
    pub(crate) fn new_remote(
        id: BufferId,
        worker: u32,
        handle: u64,
        bytes: usize,
    ) -> Arc<BufferInner> {
        BufferInner::new_window(
            id,
            Memory::Remote {
                worker,
                handle,
                bytes,
            },
            0,
            bytes,
        )
    }

    /// `(remote worker, server buffer handle)` of a remote buffer.
    pub(crate) fn remote(&self) -> Option<(u32, u64)> {
        match self.memory {
            Memory::Remote { worker, handle, .. } => Some((worker, handle)),
            _ => None,
        }
    }

    /// `(chip, allocation id)` of a device buffer.
    pub(crate) fn device(&self) -> Option<(u32, u64)> {
        match self.memory {
            Memory::Device { chip, alloc, .. } => Some((chip, alloc)),
            _ => None,
        }
    }

    /// Bytes of the buffer.
    pub(crate) fn bytes(&self) -> usize {
        self.len
    }

    /// The shared segment holding the buffer, if any.
    pub(crate) fn segment(&self) -> Option<&Arc<Segment>> {
        self.memory.segment()
    }

    /// Where a child finds the buffer's bytes (host segments only; `None` in-process).
    pub(crate) fn location(&self) -> Option<(SegmentKey, TensorLocation)> {
        let seg = self.memory.segment()?;
        Some((
            seg.key(),
            TensorLocation {
                space: TensorSpace::Host,
                device_worker: None,
                segment: seg.key().segment,
                segment_offset: self.base as u64,
            },
        ))
    }

    /// A `BufferRef` whose memory is this buffer.
    pub(crate) fn buffer_ref(self: &Arc<Self>) -> BufferRef {
        BufferRef::with_memory(self.id, Arc::clone(self) as Arc<dyn BufferMemory>)
    }

    /// Whether `r` is a reference to exactly this buffer (same allocation, not just same id).
    pub(crate) fn is_behind(self: &Arc<Self>, r: &BufferRef) -> bool {
        match r.memory() {
            Some(memory) => {
                let theirs = Arc::as_ptr(memory) as *const u8;
                let ours = Arc::as_ptr(self) as *const u8;
                std::ptr::eq(theirs, ours)
            }
            None => false,
        }
    }

    /// Takes one task use; fails if the slab was already released.
    pub(crate) fn acquire_task(&self) -> Result<(), BufferError> {
        let mut uses = self.uses.lock();
        if uses.released {
            return Err(BufferError::Released);
        }
        uses.tasks += 1;
        Ok(())
    }

    /// Drops one task use; a slab with no uses left returns to its ring.
    pub(crate) fn release_task(&self) {
        let release = {
            let mut uses = self.uses.lock();
            uses.tasks = uses.tasks.saturating_sub(1);
            self.take_slab_release(&mut uses)
        };
        if release {
            self.return_slab();
        }
    }

    /// Drops the scope hold of a slab.
    pub(crate) fn release_scope(&self) {
        let release = {
            let mut uses = self.uses.lock();
            uses.scope_hold = false;
            self.scope_held.store(false, Ordering::Release);
            self.take_slab_release(&mut uses)
        };
        if release {
            self.return_slab();
        }
    }

    fn take_slab_release(&self, uses: &mut Uses) -> bool {
        if self.slab.is_some() && uses.tasks == 0 && !uses.scope_hold && !uses.released {
            uses.released = true;
            return true;
        }
        false
    }

    fn return_slab(&self) {
        if let Some(link) = &self.slab {
            link.heap.release(link.ring, link.slab);
        }
    }

    /// Runs `f` while no task uses the buffer (host access).
    fn host_access<R>(&self, f: impl FnOnce() -> R) -> Result<R, BufferError> {
        let uses = self.uses.lock();
        if uses.released {
            return Err(BufferError::Released);
        }
        if uses.tasks > 0 {
            return Err(BufferError::InUse {
                buffer: self.id,
                tasks: uses.tasks,
            });
        }
        let out = f();
        drop(uses);
        Ok(out)
    }

    fn check_elems<T>(&self, offset: usize, count: usize) -> Result<usize, BufferError> {
        let size = std::mem::size_of::<T>();
        let len = if self.device().is_some() || self.remote().is_some() {
            0 // device memory has no host bytes here (use Worker::copy_from)
        } else {
            self.len / size
        };
        let end = offset.checked_add(count).filter(|&e| e <= len);
        match end {
            Some(_) => Ok((self.base / size) + offset),
            None => Err(BufferError::OutOfBounds {
                offset,
                end: offset.saturating_add(count),
                len,
            }),
        }
    }

    /// Reads `count` elements from element `offset` (no use check: the caller holds a use or
    /// the lock).
    pub(crate) fn read_raw<T: Element>(
        &self,
        offset: usize,
        count: usize,
    ) -> Result<Vec<T>, BufferError> {
        let at = self.check_elems::<T>(offset, count)?;
        Ok(self.memory.read::<T>(at, count))
    }

    /// Writes `src` at element `offset` (no use check).
    pub(crate) fn write_raw<T: Element>(
        &self,
        offset: usize,
        src: &[T],
    ) -> Result<(), BufferError> {
        let at = self.check_elems::<T>(offset, src.len())?;
        self.memory.write::<T>(at, src);
        Ok(())
    }

    /// Elements of `t` (a view of this buffer) in row-major order of its shape.
    pub(crate) fn gather<T: Element>(&self, t: &Tensor) -> Result<Vec<T>, BufferError> {
        let mut out = Vec::with_capacity(t.numel() as usize);
        for_each_run(t, |start, len| {
            out.extend(self.read_raw::<T>(start, len)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Writes `data` (row-major over `t`'s shape) into the view `t` of this buffer.
    pub(crate) fn scatter<T: Element>(&self, t: &Tensor, data: &[T]) -> Result<(), BufferError> {
        let mut at = 0usize;
        for_each_run(t, |start, len| {
            self.write_raw::<T>(start, &data[at..at + len])?;
            at += len;
            Ok(())
        })
    }
}

/// Calls `f(first_element, count)` for each contiguous run of `t`'s elements, in row-major
/// order (element offsets relative to the buffer start).
fn for_each_run(
    t: &Tensor,
    mut f: impl FnMut(usize, usize) -> Result<(), BufferError>,
) -> Result<(), BufferError> {
    let shape = t.shape();
    let strides = t.strides();
    if shape.contains(&0) {
        return Ok(());
    }
    let origin = (t.byte_offset() / t.dtype().size() as u64) as usize;
    let rank = shape.len();
    let last = rank - 1;
    let (run, outer_rank) = if strides[last] == 1 {
        (shape[last] as usize, last)
    } else {
        (1, rank)
    };
    let mut index = vec![0u32; outer_rank];
    loop {
        let offset: usize = origin
            + index
                .iter()
                .zip(strides)
                .map(|(&i, &s)| i as usize * s as usize)
                .sum::<usize>();
        f(offset, run)?;
        // Advance the odometer over the outer dimensions.
        let mut dim = outer_rank;
        loop {
            if dim == 0 {
                return Ok(());
            }
            dim -= 1;
            index[dim] += 1;
            if index[dim] < shape[dim] {
                break;
            }
            index[dim] = 0;
        }
    }
}

/// A host buffer of a Worker (`Worker::create_buffer`): shareable with its tasks by identity.
///
/// Cloning gives another handle to the same buffer. Host access fails with
/// [`BufferError::InUse`] while an unfinished task references the buffer.
#[derive(Clone, Debug)]
pub struct HostBuffer {
    inner: Arc<BufferInner>,
}

impl HostBuffer {
    pub(crate) fn new(inner: Arc<BufferInner>) -> HostBuffer {
        HostBuffer { inner }
    }

    pub(crate) fn inner(&self) -> &Arc<BufferInner> {
        &self.inner
    }

    /// The buffer's identity `(owner_uid, buffer_id, generation)`.
    pub fn id(&self) -> BufferId {
        self.inner.id
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// A reference to put into tensors.
    pub fn buffer_ref(&self) -> BufferRef {
        self.inner.buffer_ref()
    }

    /// A row-major tensor over the buffer from byte 0.
    pub fn tensor(&self, shape: &[u32], dtype: DType) -> Result<Tensor, ArgsError> {
        Tensor::contiguous(self.buffer_ref(), shape, dtype)
    }

    /// A strided view (`strides` in elements, `byte_offset` a multiple of the element size).
    pub fn view(
        &self,
        byte_offset: u64,
        shape: &[u32],
        strides: &[u32],
        dtype: DType,
    ) -> Result<Tensor, ArgsError> {
        Tensor::new(self.buffer_ref(), byte_offset, shape, strides, dtype)
    }

    /// Copies `src` into the buffer from element `offset`.
    pub fn write_from<T: Element>(&self, offset: usize, src: &[T]) -> Result<(), BufferError> {
        self.inner
            .host_access(|| self.inner.write_raw(offset, src))?
    }

    /// `count` elements from element `offset`.
    pub fn read_vec<T: Element>(&self, offset: usize, count: usize) -> Result<Vec<T>, BufferError> {
        self.inner
            .host_access(|| self.inner.read_raw(offset, count))?
    }

    /// Calls `f` with the whole buffer as `&[T]` (a copy taken while no task uses it).
    pub fn with_slice<T: Element, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R, BufferError> {
        let count = self.inner.len / std::mem::size_of::<T>();
        let data = self.read_vec::<T>(0, count)?;
        Ok(f(&data))
    }

    /// Unfinished tasks referencing the buffer now.
    pub fn tasks_using(&self) -> u32 {
        self.inner.uses.lock().tasks
    }
}

/// The identities of a Worker's live buffers, to resolve the buffers tensors name.
#[derive(Default)]
pub(crate) struct BufferTable {
    map: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    map: HashMap<BufferId, Weak<BufferInner>>,
    inserts_since_sweep: usize,
}

impl BufferTable {
    pub(crate) fn insert(&self, inner: &Arc<BufferInner>) {
        let mut t = self.map.lock();
        t.inserts_since_sweep += 1;
        if t.inserts_since_sweep >= 256 {
            t.map.retain(|_, w| w.strong_count() > 0);
            t.inserts_since_sweep = 0;
        }
        t.map.insert(inner.id, Arc::downgrade(inner));
    }

    /// Forgets a buffer (a freed device allocation): tasks naming it are refused.
    pub(crate) fn remove(&self, id: BufferId) {
        self.map.lock().map.remove(&id);
    }

    /// The live buffer behind `r`, if `r` is one of this table's buffers.
    pub(crate) fn resolve(&self, r: &BufferRef) -> Option<Arc<BufferInner>> {
        let inner = self.map.lock().map.get(&r.id())?.upgrade()?;
        inner.is_behind(r).then_some(inner)
    }
}
