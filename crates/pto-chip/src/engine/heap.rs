//! The orchestrator's window onto run memory: the arena heap and the run's host regions.
//!
//! Device addresses name bytes in either space (CHIP_RUNTIME.md §1.3): the arena heap occupies
//! one device range, each host buffer registered for the run one range at or above
//! `HOST_ADDR_BASE`. This module turns a tensor's buffer into the host pointer a kernel uses,
//! and fills fresh output buffers with their initial value.
//!
//! Rules the `unsafe` code below relies on:
//! - **H1** the heap mapping and every registered host buffer stay mapped, at a fixed address,
//!   for the whole run (the arena lease and the `BufferRef`s are held by `ChipWorker::run`
//!   until every core is idle);
//! - **H2** bytes just returned by a ring allocator belong to no live task: the allocator only
//!   hands out ranges whose previous owners were CONSUMED (CHIP_RUNTIME.md §4.2), so the
//!   orchestrator may write them until it publishes the task that owns them.

use crate::tensor::{AddrSpace, TensorDesc};

/// A host buffer registered for one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostRegion {
    pub(crate) ptr: *mut u8,
    pub(crate) bytes: u64,
    pub(crate) device_base: u64,
}

/// The arena heap and the host regions of one run.
pub(crate) struct RunMemory {
    pub(crate) heap_ptr: *mut u8,
    pub(crate) heap_device_base: u64,
    pub(crate) heap_len: u64,
    pub(crate) regions: Vec<HostRegion>,
}

impl RunMemory {
    /// The host address of the first byte of `desc`'s buffer.
    pub(crate) fn buffer_ptr(&self, desc: &TensorDesc) -> *mut u8 {
        match desc.space() {
            AddrSpace::Host => self.regions[desc.region().0 as usize].ptr,
            AddrSpace::Device => {
                debug_assert!(
                    desc.base() - self.heap_device_base + desc.buffer_bytes() <= self.heap_len
                );
                self.heap_ptr_at(desc.base())
            }
        }
    }

    /// The host address of the heap byte at device address `addr`.
    pub(crate) fn heap_ptr_at(&self, addr: u64) -> *mut u8 {
        let offset = addr - self.heap_device_base;
        debug_assert!(offset <= self.heap_len);
        self.heap_ptr.wrapping_add(offset as usize)
    }

    /// Fills `bytes` bytes of heap at device address `addr` with copies of `pattern`.
    pub(crate) fn fill_heap(&self, addr: u64, bytes: u64, pattern: &[u8]) {
        let offset = addr - self.heap_device_base;
        assert!(offset + bytes <= self.heap_len, "fill inside the heap");
        assert!(!pattern.is_empty() && bytes.is_multiple_of(pattern.len() as u64));
        let start = self.heap_ptr.wrapping_add(offset as usize);
        for chunk_start in (0..bytes).step_by(pattern.len()) {
            // SAFETY: H1 keeps the heap mapped; the range lies inside it (asserted above); H2
            // gives the orchestrator exclusive access to these freshly allocated bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    pattern.as_ptr(),
                    start.add(chunk_start as usize),
                    pattern.len(),
                );
            }
        }
    }
}
