//! Device memory of a simulated chip: host buffers, the device-memory ledger and run arenas.
//!
//! Implements CHIP_RUNTIME.md §1.3 (device memory and addresses) and RING_CONFIG.md §7.2–§7.3
//! (device memory ledger, arena cache):
//!
//! - [`host_memory::HostMemory`]: zeroed, page-aligned, lazily committed bytes that can back a
//!   `pto_types::BufferRef`, with safe host read/write helpers;
//! - [`device::DeviceLedger`]: the capacity accounting of one chip and its one 64-bit device
//!   address space (fresh, never reused ranges; registered host buffers use the disjoint range
//!   from [`device::HOST_ADDR_BASE`]);
//! - [`arena::ArenaCache`]: per-chip arenas keyed by `SizingKey`, LRU among idle entries.
//!
//! All `unsafe` code of the chip's memory lives in this module.

pub mod arena;
pub mod device;
// The one anonymous mapping behind every arena.
#[allow(unsafe_code)]
pub mod host_memory;

pub use arena::{AcquireError, Arena, ArenaCache, ArenaLease, ArenaOutcome};
pub use device::{
    AllocId, DEVICE_ADDR_ALIGN, DEVICE_ADDR_BASE, DeviceAllocation, DeviceLedger,
    DeviceMemoryError, DeviceRange, HOST_ADDR_BASE,
};
pub use host_memory::{HostMemory, HostScalar};
