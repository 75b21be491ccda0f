//! [`HostMemory`]: zeroed, page-aligned, lazily committed bytes shared with a chip.
//!
//! Implements the memory side of CHIP_RUNTIME.md §1.3: every block that backs a device
//! allocation, a run heap or a caller tensor is an anonymous private mapping, zero-initialised
//! and committed by the OS only where touched, so a large heap costs resident memory only for
//! the pages a run writes (RING_CONFIG.md §7.2, "reservation is accounting").
//!
//! # Host access rule
//!
//! The host helpers ([`HostMemory::write_bytes`], [`HostMemory::read_f32`], …) are safe to call
//! from any thread: they check bounds and serialise with each other through a per-buffer lock.
//! They must not run while a chip run uses the buffer, because kernels reach the same bytes
//! through [`BufferMemory::as_ptr`] without that lock. The L2 API guarantees this by being
//! synchronous: `ChipWorker::run` returns before the caller touches its buffers again. The L3
//! layer adds an in-use guard for buffers it hands to asynchronous runs. Code that dereferences
//! [`BufferMemory::as_ptr`] takes on this rule (the pointer is "the caller's (unsafe)
//! responsibility", `pto_types::args`).

use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use memmap2::{MmapMut, MmapOptions};
use pto_types::args::{BufferId, BufferMemory, BufferRef};

mod sealed {
    // Seals `HostScalar`: only the primitive types below implement it.
    #[allow(unreachable_pub)]
    pub trait Sealed {}
}

/// A primitive number that may be copied to and from a [`HostMemory`] as raw bytes.
///
/// Implemented for `u8`, `i8`, `u16`, `i16`, `u32`, `i32`, `u64`, `i64`, `f16`, `bf16`, `f32`
/// and `f64`: types without padding for which every bit pattern is a valid value. Sealed. Every
/// tensor element type (`pto_chip::kernel::Element`) is one.
pub trait HostScalar: Copy + sealed::Sealed + 'static {}

macro_rules! host_scalar {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl HostScalar for $t {}
    )*};
}
host_scalar!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    half::f16,
    half::bf16,
    f32,
    f64
);

/// Zero-initialised, page-aligned bytes at a fixed address, committed lazily by the OS.
///
/// Implements [`BufferMemory`], so it can back a [`BufferRef`]. See the module documentation
/// for the rule on host access while a run uses the buffer.
pub struct HostMemory {
    /// Owns the mapping; only `ptr` is used to reach the bytes.
    _map: MmapMut,
    /// First byte of the mapping (page-aligned); valid for `max(len, 1)` bytes.
    ptr: NonNull<u8>,
    /// Size in bytes as requested (the mapping has at least one byte even when this is 0).
    len: usize,
    /// Serialises the host helpers with each other.
    host_access: Mutex<()>,
}

// SAFETY: `ptr` points into the mapping owned by `_map`, which lives as long as `self` and never
// moves; `MmapMut` itself is `Send + Sync`. Every access through `ptr` made by this type is a
// raw-pointer copy done under `host_access`, so the safe methods never race each other; access
// through `BufferMemory::as_ptr` is governed by the documented host access rule, whose
// obligations rest on the (unsafe) code that dereferences that pointer.
unsafe impl Send for HostMemory {}
// SAFETY: see `Send` above; shared references only reach the bytes through the locked helpers or
// the raw pointer.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// A zero-filled buffer of `bytes` bytes (0 is allowed), shared through an `Arc`.
    ///
    /// The mapping is reserved, not committed: untouched pages cost no resident memory.
    pub fn new(bytes: usize) -> io::Result<Arc<HostMemory>> {
        HostMemory::zeroed(bytes).map(Arc::new)
    }

    /// A zero-filled, lazily committed mapping of `bytes` bytes, not yet shared.
    ///
    /// Maps with `MAP_NORESERVE` where supported, so a large heap is not refused by the
    /// kernel's overcommit heuristic before any page is touched.
    pub(crate) fn zeroed(bytes: usize) -> io::Result<HostMemory> {
        // A zero-length mapping is not possible; map one page's worth (the OS rounds up).
        let map_len = bytes.max(1);
        let mut map = MmapOptions::new()
            .len(map_len)
            .no_reserve_swap()
            .map_anon()?;
        let ptr = NonNull::new(map.as_mut_ptr())
            .ok_or_else(|| io::Error::other("anonymous mapping returned a null pointer"))?;
        Ok(HostMemory {
            _map: map,
            ptr,
            len: bytes,
            host_access: Mutex::new(()),
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte (page-aligned, never null, also for an empty buffer).
    ///
    /// Valid for [`HostMemory::len`] bytes while `self` lives. Dereferencing it is unsafe and
    /// subject to the host access rule of the module documentation.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// A [`BufferRef`] with identity `id` backed by this buffer (the `Arc` keeps it alive).
    pub fn buffer_ref(self: &Arc<Self>, id: BufferId) -> BufferRef {
        let memory: Arc<dyn BufferMemory> = Arc::clone(self) as Arc<dyn BufferMemory>;
        BufferRef::with_memory(id, memory)
    }

    /// Copies `src` into the buffer at byte `offset`.
    ///
    /// # Panics
    /// If `[offset, offset + src.len())` is not inside the buffer.
    pub fn write_bytes(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len(), "write");
        let _guard = self.lock();
        // SAFETY: the range is inside the mapping (checked above); `src` is a distinct Rust
        // allocation, so the ranges do not overlap; the host helpers are serialised by the lock
        // and runs do not use the buffer during host access (module rule).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(offset), src.len()) }
    }

    /// Copies `dst.len()` bytes starting at byte `offset` into `dst`.
    ///
    /// # Panics
    /// If `[offset, offset + dst.len())` is not inside the buffer.
    pub fn read_into(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len(), "read");
        let _guard = self.lock();
        // SAFETY: as in `write_bytes`, with source and destination swapped; `dst` is an
        // exclusive borrow, so nothing else writes it.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        }
    }

    /// `len` bytes starting at byte `offset`.
    ///
    /// # Panics
    /// If `[offset, offset + len)` is not inside the buffer.
    pub fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.read_into(offset, &mut out);
        out
    }

    /// Sets `len` bytes starting at byte `offset` to `value`.
    ///
    /// # Panics
    /// If `[offset, offset + len)` is not inside the buffer.
    pub fn fill_bytes(&self, offset: usize, len: usize, value: u8) {
        self.check(offset, len, "fill");
        let _guard = self.lock();
        // SAFETY: the range is inside the mapping (checked above); host helpers are serialised
        // by the lock and runs do not use the buffer during host access (module rule).
        unsafe { std::ptr::write_bytes(self.as_ptr().add(offset), value, len) }
    }

    /// Copies `src` into the buffer starting at element `offset_elems` (byte offset
    /// `offset_elems × size_of::<T>()`), in native byte order.
    ///
    /// # Panics
    /// If the elements are not inside the buffer.
    pub fn write<T: HostScalar>(&self, offset_elems: usize, src: &[T]) {
        let (offset, bytes) = Self::elem_range::<T>(offset_elems, src.len());
        self.check(offset, bytes, "write");
        let _guard = self.lock();
        // SAFETY: the byte range is inside the mapping (checked above) and `src` covers exactly
        // `bytes` bytes of initialised, padding-free values (`HostScalar`); a byte copy has no
        // alignment requirement; serialisation as in `write_bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr().cast::<u8>(),
                self.as_ptr().add(offset),
                bytes,
            )
        }
    }

    /// `count` elements starting at element `offset_elems`, in native byte order.
    ///
    /// # Panics
    /// If the elements are not inside the buffer.
    pub fn read<T: HostScalar>(&self, offset_elems: usize, count: usize) -> Vec<T> {
        let (offset, bytes) = Self::elem_range::<T>(offset_elems, count);
        self.check(offset, bytes, "read");
        let mut out: Vec<T> = Vec::with_capacity(count);
        let _guard = self.lock();
        // SAFETY: the byte range is inside the mapping (checked above); `out` has capacity for
        // `count` elements, i.e. `bytes` bytes, in a distinct allocation; every bit pattern is a
        // valid `T` (`HostScalar`), so after the copy the first `count` elements are
        // initialised and `set_len` is sound.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().add(offset),
                out.as_mut_ptr().cast::<u8>(),
                bytes,
            );
            out.set_len(count);
        }
        out
    }

    /// Copies `src` into the buffer starting at `f32` element `offset_elems`.
    ///
    /// # Panics
    /// If the elements are not inside the buffer.
    pub fn write_f32(&self, offset_elems: usize, src: &[f32]) {
        self.write(offset_elems, src);
    }

    /// `count` `f32` elements starting at element `offset_elems`.
    ///
    /// # Panics
    /// If the elements are not inside the buffer.
    pub fn read_f32(&self, offset_elems: usize, count: usize) -> Vec<f32> {
        self.read(offset_elems, count)
    }

    /// Byte offset and length of `count` elements of `T` from element `offset_elems`.
    fn elem_range<T>(offset_elems: usize, count: usize) -> (usize, usize) {
        let size = std::mem::size_of::<T>();
        match (offset_elems.checked_mul(size), count.checked_mul(size)) {
            (Some(offset), Some(bytes)) => (offset, bytes),
            _ => panic!(
                "host access of {count} elements at element {offset_elems} overflows the address space"
            ),
        }
    }

    /// Panics unless `[offset, offset + len)` lies inside the buffer.
    fn check(&self, offset: usize, len: usize, what: &str) {
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len);
        assert!(
            inside,
            "host {what} of {len} bytes at offset {offset} is outside the {}-byte buffer",
            self.len
        );
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data, so a panic while holding it leaves nothing inconsistent.
        self.host_access
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl BufferMemory for HostMemory {
    fn as_ptr(&self) -> *mut u8 {
        HostMemory::as_ptr(self)
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostMemory")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// Resident set size of this process in bytes, from `/proc/self/status` (Linux only).
#[cfg(test)]
pub(crate) fn vm_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> BufferId {
        BufferId {
            owner_uid: 7,
            buffer_id: 1,
            generation: 0,
        }
    }

    #[test]
    fn host_memory_starts_zeroed_and_page_aligned() {
        let buf = HostMemory::new(10_000).unwrap();
        assert_eq!(buf.len(), 10_000);
        assert!(!buf.is_empty());
        assert_eq!(buf.as_ptr() as usize % 4096, 0);
        assert_eq!(buf.read_bytes(0, 10_000), vec![0u8; 10_000]);
    }

    #[test]
    fn host_memory_of_zero_bytes_works() {
        let buf = HostMemory::new(0).unwrap();
        assert_eq!(buf.len(), 0);
        assert!(buf.is_empty());
        assert!(!buf.as_ptr().is_null());
        assert_eq!(buf.read_bytes(0, 0), Vec::<u8>::new());
        buf.write_bytes(0, &[]);
        buf.fill_bytes(0, 0, 1);
        assert_eq!(buf.read_f32(0, 0), Vec::<f32>::new());
        let r = buf.buffer_ref(id());
        assert_eq!(r.bytes(), 0);
        assert!(r.memory().unwrap().is_empty());
    }

    #[test]
    fn host_memory_round_trips_bytes_and_scalars() {
        let buf = HostMemory::new(64).unwrap();
        buf.write_bytes(3, &[1, 2, 3]);
        assert_eq!(buf.read_bytes(2, 5), vec![0, 1, 2, 3, 0]);
        buf.fill_bytes(10, 4, 0xAB);
        assert_eq!(buf.read_bytes(9, 6), vec![0, 0xAB, 0xAB, 0xAB, 0xAB, 0]);
        buf.write_f32(4, &[1.5, -2.0, f32::INFINITY]);
        assert_eq!(buf.read_f32(4, 3), vec![1.5, -2.0, f32::INFINITY]);
        assert_eq!(buf.read_bytes(16, 4), 1.5f32.to_ne_bytes().to_vec());
        buf.write::<i64>(7, &[-5]);
        assert_eq!(buf.read::<i64>(7, 1), vec![-5]);
        assert_eq!(buf.read::<u16>(24, 2), vec![0, 0]);
        assert_eq!(buf.read::<u8>(56, 1), vec![0xFB]);
        let mut dst = [0u8; 4];
        buf.read_into(16, &mut dst);
        assert_eq!(dst, 1.5f32.to_ne_bytes());
    }

    #[test]
    #[should_panic(expected = "outside the 64-byte buffer")]
    fn host_memory_rejects_out_of_bounds_writes() {
        let buf = HostMemory::new(64).unwrap();
        buf.write_f32(15, &[1.0, 2.0]);
    }

    #[test]
    #[should_panic(expected = "outside the 8-byte buffer")]
    fn host_memory_rejects_overflowing_ranges() {
        let buf = HostMemory::new(8).unwrap();
        let _ = buf.read_bytes(usize::MAX, 2);
    }

    #[test]
    fn host_memory_backs_a_buffer_ref() {
        let buf = HostMemory::new(256).unwrap();
        let r = buf.buffer_ref(id());
        assert_eq!(r.id(), id());
        assert_eq!(r.bytes(), 256);
        let memory = r.memory().unwrap();
        assert_eq!(memory.len(), 256);
        assert_eq!(memory.as_ptr(), buf.as_ptr());
        buf.write_f32(0, &[4.0]);
        // SAFETY: the buffer is alive (held by `buf` and `r`) and no other access runs.
        let first = unsafe { memory.as_ptr().cast::<f32>().read() };
        assert_eq!(first, 4.0);
    }

    #[test]
    fn host_memory_helpers_are_safe_across_threads() {
        let buf = HostMemory::new(4096).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let buf = &buf;
                s.spawn(move || {
                    for _ in 0..100 {
                        buf.fill_bytes(usize::from(t) * 1024, 1024, t + 1);
                    }
                });
            }
        });
        for t in 0..4u8 {
            assert_eq!(
                buf.read_bytes(usize::from(t) * 1024, 1024),
                vec![t + 1; 1024]
            );
        }
    }

    #[test]
    fn host_memory_memory_is_committed_lazily() {
        let Some(before) = vm_rss_bytes() else {
            return; // not Linux
        };
        let buf = HostMemory::new(1 << 30).unwrap();
        buf.write_bytes((1 << 30) - 1, &[1]);
        let after = vm_rss_bytes().unwrap();
        assert_eq!(buf.read_bytes((1 << 30) - 1, 1), vec![1]);
        // Other tests run concurrently, so allow generous noise; committing 1 GiB would show.
        assert!(
            after.saturating_sub(before) < 64 << 20,
            "RSS grew from {before} to {after} bytes"
        );
    }
}
