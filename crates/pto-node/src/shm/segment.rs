//! [`Segment`]: one `memfd` mapped shared, the unit of memory a node shares with its children
//! (NODE_RUNTIME.md §4.3). Nothing is named in `/dev/shm`: the kernel frees a segment with its
//! last descriptor and mapping, even after a crash.
//!
//! The parent creates segments ([`Segment::create`]) and keeps the descriptor until the Worker
//! closes (it is sent to children with `SCM_RIGHTS`); [`Segment::close_fd`] drops it while the
//! mapping stays usable. A child maps what it receives ([`Segment::from_fd`]). The rules S1–S5
//! cited below are in the module documentation of `shm`.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use memmap2::MmapMut;
use parking_lot::Mutex;
use pto_chip::memory::HostScalar;
use pto_types::BufferMemory;
use rustix::fs::MemfdFlags;
use rustix::thread::futex;

/// A segment's identity: `(owner_uid, segment_id)`; the generation is always 0 in v1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SegmentKey {
    pub(crate) owner: u64,
    pub(crate) segment: u64,
}

/// A shared mapping of a `memfd`.
pub(crate) struct Segment {
    key: SegmentKey,
    /// Owns the mapping; only `ptr` is used to reach the bytes.
    _map: MmapMut,
    ptr: NonNull<u8>,
    len: usize,
    fd: Mutex<Option<OwnedFd>>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("key", &self.key)
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: S1 — `ptr` points into the mapping owned by `_map`, which lives and stays in place as
// long as `self`; S3/S4 — all access through `ptr` is atomic or by copy, so sharing the value
// between threads adds no aliasing of Rust references.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`.
unsafe impl Sync for Segment {}

impl Segment {
    /// A new zero-filled segment of `len` bytes named `name` (it shows as `memfd:<name>` in
    /// `/proc/<pid>/fd`). The descriptor is close-on-exec; spawning hands it over explicitly.
    pub(crate) fn create(key: SegmentKey, name: &str, len: usize) -> io::Result<Segment> {
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&fd, len.max(1) as u64)?;
        Segment::map(key, fd, len)
    }

    /// Maps a received descriptor; fails unless the file holds at least `len` bytes.
    pub(crate) fn from_fd(key: SegmentKey, fd: OwnedFd, len: usize) -> io::Result<Segment> {
        let stat = rustix::fs::fstat(&fd)?;
        if (stat.st_size as u64) < len.max(1) as u64 {
            return Err(io::Error::other(format!(
                "segment {key:?} has {} bytes, expected at least {len}",
                stat.st_size
            )));
        }
        Segment::map(key, fd, len)
    }

    fn map(key: SegmentKey, fd: OwnedFd, len: usize) -> io::Result<Segment> {
        let file = File::from(fd.try_clone()?);
        // SAFETY: S1/S4 — the mapping is owned by the returned value; its bytes are shared with
        // other processes and therefore only reached through the raw pointer by copies and
        // atomics, never through `MmapMut`'s slice views.
        let mut map = unsafe { memmap2::MmapOptions::new().len(len.max(1)).map_mut(&file)? };
        drop(file);
        let ptr = NonNull::new(map.as_mut_ptr())
            .ok_or_else(|| io::Error::other("mmap returned a null pointer"))?;
        Ok(Segment {
            key,
            _map: map,
            ptr,
            len,
            fd: Mutex::new(Some(fd)),
        })
    }

    pub(crate) fn key(&self) -> SegmentKey {
        self.key
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first byte (page-aligned). Dereferencing it is subject to S4/S5.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Runs `f` with the descriptor, if it is still open.
    pub(crate) fn with_fd<R>(&self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> Option<R> {
        let fd = self.fd.lock();
        fd.as_ref().map(|fd| f(fd.as_fd()))
    }

    /// Closes the descriptor; the mapping stays valid.
    pub(crate) fn close_fd(&self) {
        self.fd.lock().take();
    }

    fn check(&self, offset: usize, len: usize) {
        let end = offset.checked_add(len);
        assert!(
            end.is_some_and(|e| e <= self.len),
            "segment access [{offset}, +{len}) outside {} bytes",
            self.len
        );
    }

    /// Copies `dst.len()` bytes from `offset` (S4).
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        // SAFETY: S2 checked the range; S1 the mapping is alive for `&self`; S4 this is a copy
        // into private memory.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len());
        }
    }

    /// Copies `src` to `offset` (S4).
    pub(crate) fn write(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: S2 checked the range; S1 the mapping is alive; S4 a copy from private memory.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(offset), src.len());
        }
    }

    /// `count` elements of `T` from element `at` (S4, S5).
    pub(crate) fn read_elems<T: HostScalar>(&self, at: usize, count: usize) -> Vec<T> {
        let size = std::mem::size_of::<T>();
        let bytes = count.checked_mul(size).expect("element count overflows");
        self.check(at.checked_mul(size).expect("offset overflows"), bytes);
        let mut out: Vec<T> = Vec::with_capacity(count);
        // SAFETY: S2 checked the range; S1 alive; `out` has capacity for `count` elements and
        // every bit pattern is a valid `T` (`HostScalar`), so `set_len` after the copy is sound.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().add(at * size),
                out.as_mut_ptr().cast::<u8>(),
                bytes,
            );
            out.set_len(count);
        }
        out
    }

    /// Writes `src` at element `at` (S4, S5).
    pub(crate) fn write_elems<T: HostScalar>(&self, at: usize, src: &[T]) {
        let size = std::mem::size_of::<T>();
        self.check(
            at.checked_mul(size).expect("offset overflows"),
            std::mem::size_of_val(src),
        );
        // SAFETY: S2 checked the range; S1 alive; a copy of plain numbers (no padding).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr().cast::<u8>(),
                self.as_ptr().add(at * size),
                std::mem::size_of_val(src),
            );
        }
    }

    /// The atomic word at `offset` (S3).
    ///
    /// # Panics
    /// If `offset` is not 4-aligned or out of range.
    pub(crate) fn word(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset.is_multiple_of(4),
            "atomic word at unaligned offset {offset}"
        );
        self.check(offset, 4);
        // SAFETY: S2 in range; S3 the mapping is page-aligned and `offset` 4-aligned, the word is
        // only ever accessed atomically by every process; S1 the returned reference borrows
        // `self`, so it cannot outlive the mapping.
        unsafe { AtomicU32::from_ptr(self.as_ptr().add(offset).cast::<u32>()) }
    }
}

/// Parks on `word` while it holds `expected` (a shared, non-private futex: the word may be
/// mapped by several processes), at most `timeout`. Spurious returns are allowed.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| rustix::thread::futex::Timespec {
        tv_sec: t.as_secs() as i64,
        tv_nsec: i64::from(t.subsec_nanos()),
    });
    // EAGAIN (value changed), EINTR and ETIMEDOUT all mean "re-check".
    let _ = futex::wait(word, futex::Flags::empty(), expected, ts.as_ref());
}

/// Wakes up to `n` waiters parked on `word`.
pub(crate) fn futex_wake(word: &AtomicU32, n: u32) {
    let _ = futex::wake(word, futex::Flags::empty(), n);
}

/// A buffer's bytes inside a segment: what a tensor's `BufferMemory` is in child-process mode.
#[derive(Debug)]
pub(crate) struct SegmentWindow {
    segment: Arc<Segment>,
    offset: usize,
    len: usize,
}

impl SegmentWindow {
    /// The window `[offset, offset + len)`; `None` when it does not fit.
    pub(crate) fn new(segment: Arc<Segment>, offset: usize, len: usize) -> Option<SegmentWindow> {
        let end = offset.checked_add(len)?;
        (end <= segment.len()).then_some(SegmentWindow {
            segment,
            offset,
            len,
        })
    }
}

impl BufferMemory for SegmentWindow {
    fn as_ptr(&self) -> *mut u8 {
        // S1: the window holds its segment; `wrapping_add` stays inside by construction.
        self.segment.as_ptr().wrapping_add(self.offset)
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_write_read_and_fd_name() {
        let key = SegmentKey {
            owner: 7,
            segment: 1,
        };
        let s = Segment::create(key, "pto-test-seg", 10_000).unwrap();
        s.write(4096, b"hello");
        let mut out = [0u8; 5];
        s.read(4096, &mut out);
        assert_eq!(&out, b"hello");
        s.write_elems::<f32>(10, &[1.5, 2.5]);
        assert_eq!(s.read_elems::<f32>(10, 2), vec![1.5, 2.5]);
        // A second mapping of the same descriptor sees the same bytes and words.
        let fd = s.with_fd(|fd| fd.try_clone_to_owned().unwrap()).unwrap();
        let t = Segment::from_fd(key, fd, 10_000).unwrap();
        t.read(4096, &mut out);
        assert_eq!(&out, b"hello");
        s.word(64).store(5, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(t.word(64).load(std::sync::atomic::Ordering::SeqCst), 5);
        let name = s
            .with_fd(|fd| {
                std::fs::read_link(format!(
                    "/proc/self/fd/{}",
                    std::os::fd::AsRawFd::as_raw_fd(&fd)
                ))
                .unwrap()
            })
            .unwrap();
        assert!(
            name.to_string_lossy().contains("memfd:pto-test-seg"),
            "{name:?}"
        );
        s.close_fd();
        assert!(s.with_fd(|_| ()).is_none());
        s.read(4096, &mut out);
        assert_eq!(&out, b"hello", "the mapping outlives the descriptor");
    }

    #[test]
    fn out_of_range_access_panics() {
        let s = Segment::create(
            SegmentKey {
                owner: 1,
                segment: 1,
            },
            "pto-test-oob",
            64,
        )
        .unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.write(60, &[0; 8])));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.word(2);
        }));
        assert!(r.is_err());
    }
}
