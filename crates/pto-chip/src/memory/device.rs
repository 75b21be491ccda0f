//! The device-memory ledger of one chip and its device address space.
//!
//! Implements CHIP_RUNTIME.md §1.3 (device memory is a byte arena with a capacity; one 64-bit
//! device address space; host buffers registered in a disjoint high range) and RING_CONFIG.md
//! §7.2 (a ledger holds every cached arena, active or idle, and every user device allocation).
//!
//! Reservation is accounting: the ledger counts committed bytes against the capacity and hands
//! out address ranges; the host memory behind them is a lazily committed
//! [`HostMemory`] owned by the arena or allocation.
//!
//! Addresses: every reservation gets a fresh, 4096-aligned range from a bump counter starting at
//! [`DEVICE_ADDR_BASE`], followed by one unused guard page; ranges are never reused, so a
//! TensorMap key (a buffer's base address) never names two buffers, across arenas and
//! allocations alike. Host buffers registered for a run live at [`HOST_ADDR_BASE`] and above.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::host_memory::HostMemory;

/// First address of the host range: buffers registered per run are addressed at or above this,
/// device reservations always below it.
pub const HOST_ADDR_BASE: u64 = 1 << 62;
/// First device address handed out.
pub const DEVICE_ADDR_BASE: u64 = 0x1000_0000;
/// Alignment of every device range (and the largest alignment [`DeviceLedger::malloc`] accepts).
pub const DEVICE_ADDR_ALIGN: u64 = 4096;

/// Unused addresses left after each range, so an overrun does not land in the next buffer.
const GUARD_BYTES: u64 = DEVICE_ADDR_ALIGN;

/// A range of device addresses: `[base, base + bytes)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceRange {
    /// First address (a multiple of [`DEVICE_ADDR_ALIGN`] for ledger ranges).
    pub base: u64,
    /// Length in bytes.
    pub bytes: u64,
}

impl DeviceRange {
    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.base + self.bytes
    }

    /// True when `addr` lies inside the range.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.bytes
    }
}

/// Identity of a user device allocation; never reused within a ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllocId(pub u64);

/// Why a device allocation or reservation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceMemoryError {
    /// Not enough free device memory.
    Exhausted { need: u64, free: u64, capacity: u64 },
    /// The alignment is not a power of two in `1..=DEVICE_ADDR_ALIGN`.
    InvalidAlign { align: u64 },
    /// No live allocation has this id (never allocated, or already freed).
    UnknownAllocation { id: AllocId },
    /// The device address space below [`HOST_ADDR_BASE`] is used up (addresses are never reused).
    AddressSpaceExhausted { need: u64 },
    /// The host could not map memory to back the device bytes.
    HostMap { bytes: u64, message: String },
    /// A copy range `offset..offset + len` is not inside an allocation of `bytes`.
    OutOfRange { offset: u64, len: u64, bytes: u64 },
}

impl fmt::Display for DeviceMemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceMemoryError::Exhausted {
                need,
                free,
                capacity,
            } => write!(
                f,
                "device memory exhausted: need {need} bytes, {free} free of {capacity}: free \
                 device allocations or raise ChipSpec.device_memory_bytes"
            ),
            DeviceMemoryError::InvalidAlign { align } => write!(
                f,
                "device alignment {align} is not a power of two in 1..={DEVICE_ADDR_ALIGN}"
            ),
            DeviceMemoryError::UnknownAllocation { id } => {
                write!(f, "no live device allocation has id {}", id.0)
            }
            DeviceMemoryError::AddressSpaceExhausted { need } => write!(
                f,
                "the device address space is used up (cannot place {need} more bytes)"
            ),
            DeviceMemoryError::HostMap { bytes, message } => {
                write!(f, "cannot map {bytes} bytes of host memory: {message}")
            }
            DeviceMemoryError::OutOfRange { offset, len, bytes } => write!(
                f,
                "bytes {offset}..{} are outside the {bytes}-byte device allocation",
                offset.saturating_add(*len)
            ),
        }
    }
}

impl std::error::Error for DeviceMemoryError {}

/// A user device allocation: its id, address range and the host memory behind it.
#[derive(Debug)]
pub struct DeviceAllocation {
    id: AllocId,
    range: DeviceRange,
    memory: Arc<HostMemory>,
}

impl DeviceAllocation {
    /// The allocation's id.
    pub fn id(&self) -> AllocId {
        self.id
    }

    /// Its device addresses (`bytes` as requested).
    pub fn range(&self) -> DeviceRange {
        self.range
    }

    /// Its first device address.
    pub fn base(&self) -> u64 {
        self.range.base
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> u64 {
        self.range.bytes
    }

    /// The zero-initialised host memory backing it (page-aligned, `bytes` long).
    pub fn memory(&self) -> &Arc<HostMemory> {
        &self.memory
    }
}

/// Source of ledger identities, so a cache can check it is always given the same ledger.
static NEXT_LEDGER_UID: AtomicU64 = AtomicU64::new(1);

/// The device memory of one chip: capacity, committed bytes and the device address space.
///
/// Committed = bytes of every cached arena (active or idle) + bytes of every user allocation.
/// Not thread-safe by itself: the chip keeps it with its arena cache under one mutex.
#[derive(Debug)]
pub struct DeviceLedger {
    uid: u64,
    capacity: u64,
    arena_bytes: u64,
    user_bytes: u64,
    /// Next free device address (a multiple of `DEVICE_ADDR_ALIGN`).
    next_addr: u64,
    /// Live user allocations by base address.
    allocations: BTreeMap<u64, DeviceAllocation>,
    /// Base address of each live user allocation.
    ids: HashMap<AllocId, u64>,
    next_id: u64,
}

impl DeviceLedger {
    /// An empty ledger of `capacity` bytes (`ChipSpec.device_memory_bytes`).
    pub fn new(capacity: u64) -> DeviceLedger {
        DeviceLedger {
            uid: NEXT_LEDGER_UID.fetch_add(1, Ordering::Relaxed),
            capacity,
            arena_bytes: 0,
            user_bytes: 0,
            next_addr: DEVICE_ADDR_BASE,
            allocations: BTreeMap::new(),
            ids: HashMap::new(),
            next_id: 1,
        }
    }

    /// The chip's device memory capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes committed: arenas plus user allocations.
    pub fn committed_bytes(&self) -> u64 {
        self.arena_bytes + self.user_bytes
    }

    /// Bytes not committed.
    pub fn free_bytes(&self) -> u64 {
        self.capacity - self.committed_bytes()
    }

    /// Bytes committed by cached arenas (active or idle).
    pub fn arena_bytes(&self) -> u64 {
        self.arena_bytes
    }

    /// Bytes committed by user device allocations.
    pub fn user_bytes(&self) -> u64 {
        self.user_bytes
    }

    /// Identity of this ledger (unique in the process).
    pub(crate) fn uid(&self) -> u64 {
        self.uid
    }

    /// Commits `bytes` for an arena and gives it a fresh address range.
    ///
    /// Fails with [`DeviceMemoryError::Exhausted`] without side effects when the bytes do not
    /// fit; evicting idle arenas first is the cache's job.
    pub(crate) fn reserve(&mut self, bytes: u64) -> Result<DeviceRange, DeviceMemoryError> {
        self.check_fits(bytes)?;
        let range = self.take_range(bytes)?;
        self.arena_bytes += bytes;
        Ok(range)
    }

    /// Returns the bytes of an arena range obtained from [`DeviceLedger::reserve`]. The
    /// addresses are not reused.
    pub(crate) fn release(&mut self, range: DeviceRange) {
        debug_assert!(
            range.bytes <= self.arena_bytes,
            "release of unreserved bytes"
        );
        self.arena_bytes -= range.bytes.min(self.arena_bytes);
    }

    /// A user device allocation of `bytes` zeroed bytes at a fresh address aligned to `align`
    /// (a power of two, at most [`DEVICE_ADDR_ALIGN`]; every range is 4096-aligned anyway).
    ///
    /// Idle cached arenas are not evicted here; call `ArenaCache::make_room` first to let
    /// them yield.
    pub fn malloc(&mut self, bytes: u64, align: u64) -> Result<AllocId, DeviceMemoryError> {
        if !align.is_power_of_two() || align > DEVICE_ADDR_ALIGN {
            return Err(DeviceMemoryError::InvalidAlign { align });
        }
        self.check_fits(bytes)?;
        let host_len = usize::try_from(bytes).map_err(|_| DeviceMemoryError::HostMap {
            bytes,
            message: "larger than the host address space".to_owned(),
        })?;
        let memory = HostMemory::new(host_len).map_err(|error| DeviceMemoryError::HostMap {
            bytes,
            message: error.to_string(),
        })?;
        let range = self.take_range(bytes)?;
        let id = AllocId(self.next_id);
        self.next_id += 1;
        self.user_bytes += bytes;
        self.ids.insert(id, range.base);
        self.allocations
            .insert(range.base, DeviceAllocation { id, range, memory });
        Ok(id)
    }

    /// Frees a user allocation; returns its size. Its addresses are not reused. The host
    /// memory is unmapped once no `Arc` to it remains.
    pub fn free(&mut self, id: AllocId) -> Result<u64, DeviceMemoryError> {
        let base = self
            .ids
            .remove(&id)
            .ok_or(DeviceMemoryError::UnknownAllocation { id })?;
        let allocation = self
            .allocations
            .remove(&base)
            .expect("every id names a live allocation");
        self.user_bytes -= allocation.bytes();
        Ok(allocation.bytes())
    }

    /// The live allocation with this id.
    pub fn allocation(&self, id: AllocId) -> Option<&DeviceAllocation> {
        self.ids
            .get(&id)
            .and_then(|base| self.allocations.get(base))
    }

    /// The live allocation containing device address `addr`, with the offset of `addr` in it.
    pub fn lookup(&self, addr: u64) -> Option<(&DeviceAllocation, u64)> {
        let (_, allocation) = self.allocations.range(..=addr).next_back()?;
        allocation
            .range
            .contains(addr)
            .then(|| (allocation, addr - allocation.base()))
    }

    /// Live user allocations in address order.
    pub fn allocations(&self) -> impl Iterator<Item = &DeviceAllocation> {
        self.allocations.values()
    }

    fn check_fits(&self, need: u64) -> Result<(), DeviceMemoryError> {
        let free = self.free_bytes();
        if need > free {
            return Err(DeviceMemoryError::Exhausted {
                need,
                free,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    /// A fresh range of `bytes` addresses (at least one page is consumed even for 0 bytes, so
    /// every range has a distinct base), followed by a guard page.
    fn take_range(&mut self, bytes: u64) -> Result<DeviceRange, DeviceMemoryError> {
        let base = self.next_addr;
        let next = bytes
            .max(1)
            .checked_next_multiple_of(DEVICE_ADDR_ALIGN)
            .and_then(|span| span.checked_add(GUARD_BYTES))
            .and_then(|span| base.checked_add(span))
            .filter(|&next| next <= HOST_ADDR_BASE)
            .ok_or(DeviceMemoryError::AddressSpaceExhausted { need: bytes })?;
        self.next_addr = next;
        Ok(DeviceRange { base, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_malloc_and_free_account_bytes() {
        let mut ledger = DeviceLedger::new(1 << 20);
        let a = ledger.malloc(1000, 64).unwrap();
        let b = ledger.malloc(4096, 4096).unwrap();
        assert_eq!(ledger.committed_bytes(), 5096);
        assert_eq!(ledger.user_bytes(), 5096);
        assert_eq!(ledger.free_bytes(), (1 << 20) - 5096);
        let alloc = ledger.allocation(a).unwrap();
        assert_eq!(alloc.bytes(), 1000);
        assert_eq!(alloc.memory().len(), 1000);
        assert_eq!(alloc.memory().read_bytes(0, 1000), vec![0; 1000]);
        assert_eq!(ledger.free(a), Ok(1000));
        assert_eq!(
            ledger.free(a),
            Err(DeviceMemoryError::UnknownAllocation { id: a })
        );
        assert!(ledger.allocation(a).is_none());
        assert_eq!(ledger.committed_bytes(), 4096);
        assert_eq!(ledger.free(b), Ok(4096));
        assert_eq!(ledger.committed_bytes(), 0);
    }

    #[test]
    fn ledger_malloc_fails_when_full_and_on_bad_alignment() {
        let mut ledger = DeviceLedger::new(10_000);
        ledger.malloc(6000, 1).unwrap();
        let err = ledger.malloc(5000, 64).unwrap_err();
        assert_eq!(
            err,
            DeviceMemoryError::Exhausted {
                need: 5000,
                free: 4000,
                capacity: 10_000
            }
        );
        assert!(err.to_string().contains("device_memory_bytes"));
        for align in [0, 3, 8192] {
            assert_eq!(
                ledger.malloc(64, align),
                Err(DeviceMemoryError::InvalidAlign { align })
            );
        }
        assert_eq!(ledger.committed_bytes(), 6000);
    }

    #[test]
    fn ledger_lookup_finds_the_allocation_of_an_address() {
        let mut ledger = DeviceLedger::new(1 << 20);
        let a = ledger.malloc(100, 64).unwrap();
        let b = ledger.malloc(0, 64).unwrap();
        let base_a = ledger.allocation(a).unwrap().base();
        let (found, offset) = ledger.lookup(base_a + 99).unwrap();
        assert_eq!((found.id(), offset), (a, 99));
        assert!(ledger.lookup(base_a + 100).is_none());
        assert!(ledger.lookup(base_a - 1).is_none());
        // A zero-byte allocation has an address but contains none.
        let base_b = ledger.allocation(b).unwrap().base();
        assert_ne!(base_a, base_b);
        assert!(ledger.lookup(base_b).is_none());
    }

    #[test]
    fn device_address_ranges_never_overlap_or_repeat() {
        let mut ledger = DeviceLedger::new(1 << 30);
        let mut ranges = Vec::new();
        for round in 0..50u64 {
            let id = ledger.malloc(round * 1000, 64).unwrap();
            ranges.push(ledger.allocation(id).unwrap().range());
            let arena = ledger.reserve(round * 7919 + 1).unwrap();
            ranges.push(arena);
            if round % 2 == 0 {
                ledger.free(id).unwrap();
                ledger.release(arena);
            }
        }
        assert_eq!(
            ledger.committed_bytes(),
            ledger.arena_bytes() + ledger.user_bytes()
        );
        let mut bases: Vec<u64> = ranges.iter().map(|r| r.base).collect();
        bases.sort_unstable();
        bases.dedup();
        assert_eq!(bases.len(), ranges.len(), "a base address repeats");
        let mut sorted = ranges.clone();
        sorted.sort_by_key(|r| r.base);
        for pair in sorted.windows(2) {
            assert!(pair[0].end() < pair[1].base, "{pair:?} overlap or touch");
        }
        for r in &ranges {
            assert_eq!(r.base % DEVICE_ADDR_ALIGN, 0);
            assert!(r.base >= DEVICE_ADDR_BASE);
            assert!(r.end() < HOST_ADDR_BASE);
        }
    }

    #[test]
    fn ledger_reserve_is_all_or_nothing() {
        let mut ledger = DeviceLedger::new(100);
        assert_eq!(
            ledger.reserve(101),
            Err(DeviceMemoryError::Exhausted {
                need: 101,
                free: 100,
                capacity: 100
            })
        );
        assert_eq!(ledger.committed_bytes(), 0);
        let r = ledger.reserve(100).unwrap();
        assert_eq!(r.base, DEVICE_ADDR_BASE);
        assert_eq!(ledger.arena_bytes(), 100);
        ledger.release(r);
        assert_eq!(ledger.committed_bytes(), 0);
    }

    #[test]
    fn ledger_address_space_exhaustion_is_an_error() {
        let mut ledger = DeviceLedger::new(u64::MAX);
        ledger.next_addr = HOST_ADDR_BASE - 2 * DEVICE_ADDR_ALIGN;
        assert!(ledger.reserve(1).is_ok());
        assert_eq!(
            ledger.reserve(1),
            Err(DeviceMemoryError::AddressSpaceExhausted { need: 1 })
        );
        assert_eq!(ledger.arena_bytes(), 1);
    }
}
