//! Run arenas and the per-chip arena cache.
//!
//! Implements CHIP_RUNTIME.md §1.3 (a run reserves its arena, exactly the RING_CONFIG.md §7.1
//! formula) and RING_CONFIG.md §7.2–§7.3: on a miss the chip evicts idle cached arenas, least
//! recently used first, until the reservation fits, else bind fails with
//! `SizingError::DeviceMemoryExhausted`; the cache is keyed by `SizingKey` (values only, so the
//! same values from other sources hit), holds at most `ChipSpec.arena_cache_entries` entries,
//! evicts the least recently used idle entry when over capacity and never evicts the arena in
//! use. Test vectors: RING_CONFIG.md §14 rows T56, T57, T58.
//!
//! An [`Arena`] holds the device reservation (the whole footprint), the host memory of the
//! heaps (`Σ H_r` bytes, lazily committed) and the runtime's per-sizing payload `T`. The
//! image and dep pools are counted in the reservation but live in the payload, which the
//! runtime builds with the `make` closure of [`ArenaCache::acquire`].

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pto_types::Resource;
use pto_types::ring_config::resolve::{ResolvedSizing, SizingError, SizingKey};

use super::device::{DeviceLedger, DeviceMemoryError, DeviceRange};
use super::host_memory::HostMemory;
use crate::footprint::Footprint;
use crate::plan::Plan;

/// The memory of one sizing: device reservation, heap memory and the runtime's payload.
///
/// Device layout of the reservation `[device_base, device_base + footprint.arena)`: image, then
/// dep pools, then the heaps of rings 0..4 back to back (see [`Arena::heap_range`]). Only the
/// heap part has host memory here.
pub struct Arena<T> {
    key: SizingKey,
    footprint: Footprint,
    range: DeviceRange,
    heap: HostMemory,
    payload: T,
}

impl<T> Arena<T> {
    /// The sizing values this arena was built for.
    pub fn key(&self) -> &SizingKey {
        &self.key
    }

    /// The footprint reserved in device memory.
    pub fn footprint(&self) -> &Footprint {
        &self.footprint
    }

    /// The reserved device range (`bytes` = `footprint.arena`).
    pub fn device_range(&self) -> DeviceRange {
        self.range
    }

    /// First device address of the reservation.
    pub fn device_base(&self) -> u64 {
        self.range.base
    }

    /// Device addresses of the heaps: `Σ H_r` bytes after the image and the dep pools. Ring
    /// `r`'s heap starts at `heap_range().base + Σ_{k<r} H_k` (`DerivedCapacities::heap_bases`).
    /// A device address `a` in this range is host byte `heap_ptr() + (a - heap_range().base)`.
    pub fn heap_range(&self) -> DeviceRange {
        DeviceRange {
            base: self.range.base + self.footprint.image + self.footprint.deps,
            bytes: self.footprint.heaps,
        }
    }

    /// The host memory behind the heaps (zeroed when built; keeps old contents on reuse).
    pub fn heap(&self) -> &HostMemory {
        &self.heap
    }

    /// First host byte of the heaps (page-aligned).
    pub fn heap_ptr(&self) -> *mut u8 {
        self.heap.as_ptr()
    }

    /// The runtime's per-sizing state.
    pub fn payload(&self) -> &T {
        &self.payload
    }

    /// The runtime's per-sizing state, mutably.
    pub fn payload_mut(&mut self) -> &mut T {
        &mut self.payload
    }
}

impl<T> fmt::Debug for Arena<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("key", &self.key)
            .field("footprint", &self.footprint)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

/// Whether [`ArenaCache::acquire`] reused a cached arena (RING_CONFIG.md §7.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArenaOutcome {
    /// A cached arena with the same `SizingKey` was reused; no new reservation. The runtime
    /// must reset the payload's ring state.
    Hit,
    /// A new arena was built; `evicted` idle arenas were dropped to make room in device memory
    /// or in the cache.
    Miss { evicted: u32 },
}

impl fmt::Display for ArenaOutcome {
    /// `hit` or `miss` / `miss(evicted 2)`, as in the bind log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArenaOutcome::Hit => f.write_str("hit"),
            ArenaOutcome::Miss { evicted: 0 } => f.write_str("miss"),
            ArenaOutcome::Miss { evicted } => write!(f, "miss(evicted {evicted})"),
        }
    }
}

/// Why no arena could be acquired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireError {
    /// The sizing cannot be bound: its footprint overflows, or it does not fit in device memory
    /// even after evicting every idle arena (`SizingError::DeviceMemoryExhausted`).
    Sizing(SizingError),
    /// The host could not back the heaps (`HostMap`) or the device address space is used up.
    Device(DeviceMemoryError),
}

impl From<SizingError> for AcquireError {
    fn from(error: SizingError) -> AcquireError {
        AcquireError::Sizing(error)
    }
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Sizing(error) => error.fmt(f),
            AcquireError::Device(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for AcquireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AcquireError::Sizing(error) => Some(error),
            AcquireError::Device(error) => Some(error),
        }
    }
}

/// Arenas of leases dropped without [`ArenaCache::release`], waiting to be taken back.
type Returned<T> = Arc<Mutex<Vec<Box<Arena<T>>>>>;

fn lock<T>(returned: &Mutex<Vec<Box<Arena<T>>>>) -> MutexGuard<'_, Vec<Box<Arena<T>>>> {
    // Pushing or draining a `Vec` cannot leave it inconsistent, so poisoning is ignored.
    returned.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Exclusive use of one cached arena for the duration of a run.
///
/// Derefs to [`Arena`] (heap pointer, device addresses, `payload_mut`). Give it back with
/// [`ArenaCache::release`]; a lease that is dropped instead (for example while unwinding) hands
/// its arena back to the cache, which takes it in as idle at its next call.
pub struct ArenaLease<T> {
    /// `Some` until released or dropped.
    arena: Option<Box<Arena<T>>>,
    returned: Returned<T>,
}

impl<T> ArenaLease<T> {
    fn arena(&self) -> &Arena<T> {
        self.arena.as_deref().expect("a live lease holds its arena")
    }
}

impl<T> Deref for ArenaLease<T> {
    type Target = Arena<T>;

    fn deref(&self) -> &Arena<T> {
        self.arena()
    }
}

impl<T> DerefMut for ArenaLease<T> {
    fn deref_mut(&mut self) -> &mut Arena<T> {
        self.arena
            .as_deref_mut()
            .expect("a live lease holds its arena")
    }
}

impl<T> Drop for ArenaLease<T> {
    fn drop(&mut self) {
        if let Some(arena) = self.arena.take() {
            lock(&self.returned).push(arena);
        }
    }
}

impl<T> fmt::Debug for ArenaLease<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ArenaLease").field(self.arena()).finish()
    }
}

/// One cache entry: the arena when idle, or a marker while leased.
struct Entry<T> {
    key: SizingKey,
    range: DeviceRange,
    /// Tick of the last acquire or release; smaller = less recently used.
    last_used: u64,
    /// `Some` when idle, `None` while leased.
    idle: Option<Box<Arena<T>>>,
}

/// The arenas of one chip, keyed by `SizingKey` (RING_CONFIG.md §7.3).
///
/// Not thread-safe by itself: the chip keeps it with its [`DeviceLedger`] under one mutex and
/// always passes that same ledger.
pub struct ArenaCache<T> {
    capacity: usize,
    entries: Vec<Entry<T>>,
    tick: u64,
    returned: Returned<T>,
    /// The ledger this cache's reservations were made in (checked on every call).
    ledger_uid: Option<u64>,
}

impl<T> ArenaCache<T> {
    /// An empty cache of `capacity` entries (`ChipSpec.arena_cache_entries`; 0 is taken as 1).
    pub fn new(capacity: u32) -> ArenaCache<T> {
        ArenaCache {
            capacity: capacity.max(1) as usize,
            entries: Vec::new(),
            tick: 0,
            returned: Arc::new(Mutex::new(Vec::new())),
            ledger_uid: None,
        }
    }

    /// Most entries kept (idle plus in use) after a release.
    pub fn capacity(&self) -> u32 {
        self.capacity as u32
    }

    /// Number of cached arenas, idle or in use.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no arena is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of idle arenas (leases dropped without release still count as in use until the
    /// next call that takes a ledger).
    pub fn idle_len(&self) -> usize {
        self.entries.iter().filter(|e| e.idle.is_some()).count()
    }

    /// True when an arena of `key` is cached, idle or in use.
    pub fn contains(&self, key: &SizingKey) -> bool {
        self.entries.iter().any(|e| e.key == *key)
    }

    /// The cached keys, least recently used first.
    pub fn keys_by_recency(&self) -> Vec<SizingKey> {
        let mut entries: Vec<&Entry<T>> = self.entries.iter().collect();
        entries.sort_by_key(|e| e.last_used);
        entries.into_iter().map(|e| e.key).collect()
    }

    /// Device bytes reserved by the cached arenas, idle or in use.
    pub fn committed_bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.range.bytes).sum()
    }

    /// Device bytes reserved by idle arenas (what eviction could free).
    pub fn idle_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.idle.is_some())
            .map(|e| e.range.bytes)
            .sum()
    }

    /// An arena for the plan's sizing, leased for one run.
    ///
    /// Hit (an idle arena with the same `SizingKey`): reused as is, with no new reservation;
    /// the runtime resets its state. Miss: the plan's footprint (computed once, by
    /// [`Plan::resolve`]) is reserved: idle arenas are evicted least recently used first until the reservation fits in `ledger`
    /// (nothing is evicted when even evicting all of them would not suffice:
    /// `SizingError::DeviceMemoryExhausted`, whose `free` counts the bytes of idle arenas as
    /// available), the heaps are mapped, `make(sizing)` builds the payload, and the entry is
    /// inserted, evicting the least recently used idle entry if the cache is over capacity.
    /// Arenas in use are never evicted.
    ///
    /// # Panics
    /// If `ledger` is not the ledger of earlier calls.
    pub fn acquire(
        &mut self,
        plan: &Plan,
        chip: u32,
        ledger: &mut DeviceLedger,
        make: impl FnOnce(&ResolvedSizing) -> T,
    ) -> Result<(ArenaLease<T>, ArenaOutcome), AcquireError> {
        self.take_back_returned(ledger);
        let (sizing, fp) = (&plan.sizing, plan.footprint);
        let key = sizing.key();
        let tick = self.next_tick();
        if let Some(entry) = self
            .entries
            .iter_mut()
            .find(|e| e.key == key && e.idle.is_some())
        {
            entry.last_used = tick;
            let arena = entry.idle.take();
            return Ok((self.lease(arena), ArenaOutcome::Hit));
        }

        let available = ledger.free_bytes() + self.idle_bytes();
        if fp.arena > available {
            return Err(AcquireError::Sizing(SizingError::DeviceMemoryExhausted {
                chip,
                need: fp.arena,
                image: fp.image,
                deps: fp.deps,
                heaps: fp.heaps,
                heap_sources: sizing.sources(Resource::Heap),
                free: available,
                capacity: ledger.capacity(),
            }));
        }
        // Map and build before evicting or reserving: a host failure does not cost cached
        // arenas, and a panicking `make` leaves the ledger untouched.
        let heap = map_heap(fp.heaps)?;
        let payload = make(sizing);
        let mut evicted = self
            .make_room(fp.arena, ledger)
            .expect("the idle arenas cover the shortfall");
        let range = ledger.reserve(fp.arena).map_err(AcquireError::Device)?;
        let arena = Box::new(Arena {
            key,
            footprint: fp,
            range,
            heap,
            payload,
        });
        self.entries.push(Entry {
            key,
            range,
            last_used: tick,
            idle: None,
        });
        evicted += self.trim_to_capacity(ledger);
        Ok((self.lease(Some(arena)), ArenaOutcome::Miss { evicted }))
    }

    /// Takes a lease back: its arena becomes idle (most recently used), then the cache is
    /// trimmed to capacity by evicting least recently used idle arenas.
    ///
    /// # Panics
    /// If the lease comes from another cache, or `ledger` is not the ledger of earlier calls.
    pub fn release(&mut self, mut lease: ArenaLease<T>, ledger: &mut DeviceLedger) {
        assert!(
            Arc::ptr_eq(&lease.returned, &self.returned),
            "the lease belongs to another arena cache"
        );
        let arena = lease.arena.take().expect("a live lease holds its arena");
        drop(lease);
        self.put_back(arena);
        self.take_back_returned(ledger);
        self.trim_to_capacity(ledger);
    }

    /// Evicts every idle arena; returns the device bytes released.
    pub fn trim_idle(&mut self, ledger: &mut DeviceLedger) -> u64 {
        self.take_back_returned(ledger);
        let mut released = 0;
        while let Some(bytes) = self.evict_lru_idle(ledger) {
            released += bytes;
        }
        released
    }

    /// Evicts idle arenas, least recently used first, until `ledger` has `need` free bytes;
    /// returns how many were evicted. When even evicting all idle arenas would not free enough,
    /// nothing is evicted and `None` is returned. For user device allocations
    /// ([`DeviceLedger::malloc`]) that should displace idle arenas.
    pub fn make_room(&mut self, need: u64, ledger: &mut DeviceLedger) -> Option<u32> {
        self.take_back_returned(ledger);
        if need > ledger.free_bytes() + self.idle_bytes() {
            return None;
        }
        let mut evicted = 0;
        while ledger.free_bytes() < need {
            self.evict_lru_idle(ledger)
                .expect("idle arenas cover the shortfall");
            evicted += 1;
        }
        Some(evicted)
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn lease(&self, arena: Option<Box<Arena<T>>>) -> ArenaLease<T> {
        debug_assert!(arena.is_some());
        ArenaLease {
            arena,
            returned: Arc::clone(&self.returned),
        }
    }

    /// Marks the entry of `arena` idle and most recently used.
    fn put_back(&mut self, arena: Box<Arena<T>>) {
        let tick = self.next_tick();
        let entry = self
            .entries
            .iter_mut()
            .find(|e| e.range.base == arena.range.base && e.idle.is_none())
            .expect("a leased arena has an in-use entry");
        entry.last_used = tick;
        entry.idle = Some(arena);
    }

    /// Checks the ledger and takes in the arenas of dropped leases.
    fn take_back_returned(&mut self, ledger: &DeviceLedger) {
        let uid = *self.ledger_uid.get_or_insert(ledger.uid());
        assert_eq!(
            uid,
            ledger.uid(),
            "an arena cache must always be used with the same device ledger"
        );
        let returned = std::mem::take(&mut *lock(&self.returned));
        for arena in returned {
            self.put_back(arena);
        }
    }

    /// Evicts least recently used idle arenas while over capacity; returns how many.
    fn trim_to_capacity(&mut self, ledger: &mut DeviceLedger) -> u32 {
        let mut evicted = 0;
        while self.entries.len() > self.capacity && self.evict_lru_idle(ledger).is_some() {
            evicted += 1;
        }
        evicted
    }

    /// Drops the least recently used idle arena and releases its reservation; returns its
    /// bytes, or `None` when no arena is idle.
    fn evict_lru_idle(&mut self, ledger: &mut DeviceLedger) -> Option<u64> {
        let index = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.idle.is_some())
            .min_by_key(|(_, e)| e.last_used)
            .map(|(index, _)| index)?;
        let entry = self.entries.swap_remove(index);
        ledger.release(entry.range);
        Some(entry.range.bytes)
    }
}

impl<T> fmt::Debug for ArenaCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArenaCache")
            .field("capacity", &self.capacity)
            .field("entries", &self.entries.len())
            .field("idle", &self.idle_len())
            .field("committed_bytes", &self.committed_bytes())
            .finish()
    }
}

/// Lazily committed host memory for `bytes` of heaps.
fn map_heap(bytes: u64) -> Result<HostMemory, AcquireError> {
    let host_map =
        |message: String| AcquireError::Device(DeviceMemoryError::HostMap { bytes, message });
    let len = usize::try_from(bytes)
        .map_err(|_| host_map("larger than the host address space".to_owned()))?;
    HostMemory::zeroed(len).map_err(|error| host_map(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::footprint::footprint;
    use crate::memory::device::HOST_ADDR_BASE;
    use crate::memory::host_memory::vm_rss_bytes;
    use pto_types::RuntimeEnv;
    use pto_types::ring_config::env::{EnvSnapshot, EnvSource};
    use pto_types::ring_config::resolve::{RingDefaults, SizeSource, resolve};

    const GIB: u64 = 1 << 30;

    fn env(pairs: &[(&str, &str)]) -> EnvSnapshot {
        EnvSnapshot::take(&EnvSource::from_pairs(pairs.iter().copied()), false).unwrap()
    }

    fn sizing_in(call: RuntimeEnv, env: &EnvSnapshot) -> ResolvedSizing {
        resolve(&call, env, &RingDefaults::BUILT_IN).unwrap()
    }

    fn sizing(call: RuntimeEnv) -> ResolvedSizing {
        sizing_in(call, &EnvSnapshot::empty())
    }

    /// A small sizing whose heaps are `heap` bytes per ring.
    fn small(heap: u64) -> ResolvedSizing {
        sizing(
            RuntimeEnv::default()
                .with_task_window(4)
                .with_heap(heap)
                .with_dep_pool(4),
        )
    }

    /// The payload used in tests: the key it was built for.
    type Cache = ArenaCache<SizingKey>;

    fn acquire(
        cache: &mut Cache,
        sizing: &ResolvedSizing,
        ledger: &mut DeviceLedger,
    ) -> Result<(ArenaLease<SizingKey>, ArenaOutcome), AcquireError> {
        let plan = Plan::of(*sizing).map_err(AcquireError::Sizing)?;
        cache.acquire(&plan, 0, ledger, |s| s.key())
    }

    fn plan(sizing: &ResolvedSizing) -> Plan {
        Plan::of(*sizing).unwrap()
    }

    /// Acquires and releases at once; returns the outcome.
    fn run(cache: &mut Cache, sizing: &ResolvedSizing, ledger: &mut DeviceLedger) -> ArenaOutcome {
        let (lease, outcome) = acquire(cache, sizing, ledger).unwrap();
        assert_eq!(*lease.payload(), sizing.key());
        cache.release(lease, ledger);
        outcome
    }

    fn medium() -> RuntimeEnv {
        RuntimeEnv::default()
            .with_task_window(128)
            .with_heap(8 << 20)
            .with_dep_pool(256)
    }

    #[test]
    fn t56_global_heap_exhausts_a_4_gib_chip_then_per_task_fits() {
        let mut ledger = DeviceLedger::new(4 * GIB);
        let mut cache = Cache::new(4);
        let snapshot = env(&[("PTO2_RING_HEAP", "1073741824")]);
        let global = sizing_in(RuntimeEnv::default(), &snapshot);
        let err = acquire(&mut cache, &global, &mut ledger).unwrap_err();
        assert_eq!(
            err,
            AcquireError::Sizing(SizingError::DeviceMemoryExhausted {
                chip: 0,
                need: 4622124160,
                image: 325583744,
                deps: 1573120,
                heaps: 4294967296,
                heap_sources: [SizeSource::Env; 4],
                free: 4294967296,
                capacity: 4294967296,
            })
        );
        let text = err.to_string();
        for part in ["PTO2_RING_HEAP", "runtime_env.ring_heap", "4622124160"] {
            assert!(text.contains(part), "{text:?} lacks {part:?}");
        }
        assert_eq!(ledger.committed_bytes(), 0);
        assert!(cache.is_empty());

        let per_task = sizing_in(medium(), &snapshot);
        let (lease, outcome) = acquire(&mut cache, &per_task, &mut ledger).unwrap();
        assert_eq!(outcome, ArenaOutcome::Miss { evicted: 0 });
        assert_eq!(lease.footprint().arena, 36123776);
        assert_eq!(ledger.committed_bytes(), 36123776);
        assert_eq!(cache.committed_bytes(), 36123776);
        cache.release(lease, &mut ledger);
        assert_eq!(ledger.committed_bytes(), 36123776);
    }

    #[test]
    fn t57_cache_hit_on_same_values_from_other_sources() {
        let mut ledger = DeviceLedger::new(16 * GIB);
        let mut cache = Cache::new(4);
        let from_call = sizing(medium());
        assert_eq!(
            run(&mut cache, &from_call, &mut ledger),
            ArenaOutcome::Miss { evicted: 0 }
        );
        let from_env = sizing_in(
            RuntimeEnv::default(),
            &env(&[
                ("PTO2_RING_TASK_WINDOW", "128"),
                ("PTO2_RING_HEAP", "8388608"),
                ("PTO2_RING_DEP_POOL", "256"),
            ]),
        );
        assert_ne!(from_call, from_env);
        assert_eq!(run(&mut cache, &from_env, &mut ledger), ArenaOutcome::Hit);
        assert_eq!(ledger.committed_bytes(), 36123776);
        let changed = sizing(medium().with_heap([8 << 20, 8 << 20, 4 << 20, 8 << 20]));
        assert_eq!(
            run(&mut cache, &changed, &mut ledger),
            ArenaOutcome::Miss { evicted: 0 }
        );
        assert_eq!(cache.len(), 2);
        assert_eq!(ledger.committed_bytes(), cache.committed_bytes());
    }

    #[test]
    fn t58_idle_arena_is_evicted_for_a_new_sizing() {
        let mut ledger = DeviceLedger::new(4 * GIB);
        let mut cache = Cache::new(4);
        let big = sizing(RuntimeEnv::default().with_heap(805306368));
        let (lease, outcome) = acquire(&mut cache, &big, &mut ledger).unwrap();
        assert_eq!(outcome, ArenaOutcome::Miss { evicted: 0 });
        assert_eq!(lease.footprint().arena, 3548382336);
        cache.release(lease, &mut ledger);
        assert_eq!(cache.idle_len(), 1);
        assert_eq!(ledger.committed_bytes(), 3548382336);

        let defaults = sizing(RuntimeEnv::default());
        let (lease, outcome) = acquire(&mut cache, &defaults, &mut ledger).unwrap();
        assert_eq!(outcome, ArenaOutcome::Miss { evicted: 1 });
        assert_eq!(lease.footprint().arena, 1400898688);
        assert_eq!(ledger.committed_bytes(), 1400898688);
        assert!(!cache.contains(&big.key()));
        cache.release(lease, &mut ledger);
    }

    #[test]
    fn arena_cache_evicts_least_recently_used_first() {
        let mut ledger = DeviceLedger::new(GIB);
        let mut cache = Cache::new(3);
        let [a, b, c, d] = [1024u64, 2048, 4096, 8192].map(small);
        for s in [&a, &b, &c] {
            run(&mut cache, s, &mut ledger);
        }
        // Touch `a`: now `b` is the least recently used.
        assert_eq!(run(&mut cache, &a, &mut ledger), ArenaOutcome::Hit);
        assert_eq!(cache.keys_by_recency(), vec![b.key(), c.key(), a.key()]);
        assert_eq!(
            run(&mut cache, &d, &mut ledger),
            ArenaOutcome::Miss { evicted: 1 }
        );
        assert!(!cache.contains(&b.key()));
        assert_eq!(cache.keys_by_recency(), vec![c.key(), a.key(), d.key()]);
        assert_eq!(ledger.committed_bytes(), cache.committed_bytes());
    }

    #[test]
    fn arena_cache_memory_eviction_goes_lru_first_and_only_as_far_as_needed() {
        let one = small(1024);
        let unit = footprint(&one).unwrap().arena;
        let [a, b, c] = [2048u64, 4096, 8192].map(small);
        let bytes = |s: &ResolvedSizing| footprint(s).unwrap().arena;
        // Room for `a`, `b` and `c` but not one more small arena on top.
        let mut ledger = DeviceLedger::new(bytes(&a) + bytes(&b) + bytes(&c) + unit / 2);
        let mut cache = Cache::new(8);
        for s in [&a, &b, &c] {
            run(&mut cache, s, &mut ledger);
        }
        assert_eq!(
            run(&mut cache, &one, &mut ledger),
            ArenaOutcome::Miss { evicted: 1 }
        );
        assert!(!cache.contains(&a.key()));
        assert!(cache.contains(&b.key()) && cache.contains(&c.key()));
    }

    #[test]
    fn arena_cache_capacity_eviction() {
        let mut ledger = DeviceLedger::new(GIB);
        let mut cache = Cache::new(2);
        let [a, b, c] = [1024u64, 2048, 4096].map(small);
        run(&mut cache, &a, &mut ledger);
        run(&mut cache, &b, &mut ledger);
        assert_eq!(
            run(&mut cache, &c, &mut ledger),
            ArenaOutcome::Miss { evicted: 1 }
        );
        assert_eq!(cache.len(), 2);
        assert!(!cache.contains(&a.key()));
        assert_eq!(ledger.committed_bytes(), bytes_of(&[&b, &c]));
    }

    fn bytes_of(sizings: &[&ResolvedSizing]) -> u64 {
        sizings.iter().map(|s| footprint(s).unwrap().arena).sum()
    }

    #[test]
    fn arena_in_use_is_never_evicted() {
        let [a, b] = [1024u64, 2048].map(small);
        // Capacity: over the cache's entry limit while `a` is leased.
        let mut ledger = DeviceLedger::new(GIB);
        let mut cache = Cache::new(1);
        let (held, _) = acquire(&mut cache, &a, &mut ledger).unwrap();
        let (lease_b, outcome) = acquire(&mut cache, &b, &mut ledger).unwrap();
        assert_eq!(outcome, ArenaOutcome::Miss { evicted: 0 });
        assert_eq!(cache.len(), 2);
        cache.release(lease_b, &mut ledger);
        // Back under the limit by evicting the idle `b`, never the leased `a`.
        assert_eq!(cache.len(), 1);
        assert!(cache.contains(&a.key()));
        cache.release(held, &mut ledger);
        assert_eq!(cache.idle_len(), 1);

        // Memory: a leased arena is not evicted to make room.
        let mut ledger = DeviceLedger::new(bytes_of(&[&a]) + bytes_of(&[&b]) - 1);
        let mut cache = Cache::new(4);
        let (held, _) = acquire(&mut cache, &a, &mut ledger).unwrap();
        let err = acquire(&mut cache, &b, &mut ledger).unwrap_err();
        assert!(matches!(
            err,
            AcquireError::Sizing(SizingError::DeviceMemoryExhausted { .. })
        ));
        assert!(cache.contains(&a.key()));
        assert_eq!(ledger.committed_bytes(), bytes_of(&[&a]));
        cache.release(held, &mut ledger);
        // Once idle, it yields.
        assert_eq!(
            run(&mut cache, &b, &mut ledger),
            ArenaOutcome::Miss { evicted: 1 }
        );
    }

    #[test]
    fn arena_exhaustion_evicts_nothing_when_it_cannot_fit() {
        let [a, b] = [1024u64, 2048].map(small);
        let mut ledger = DeviceLedger::new(bytes_of(&[&b]) + 100);
        let mut cache = Cache::new(4);
        run(&mut cache, &a, &mut ledger);
        let huge = small(1 << 20);
        match acquire(&mut cache, &huge, &mut ledger).unwrap_err() {
            AcquireError::Sizing(SizingError::DeviceMemoryExhausted { free, capacity, .. }) => {
                // Free counts the idle arena as available.
                assert_eq!(free, capacity);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(cache.contains(&a.key()));
        assert_eq!(
            run(&mut cache, &b, &mut ledger),
            ArenaOutcome::Miss { evicted: 1 }
        );
    }

    #[test]
    fn an_unbindable_sizing_never_reaches_the_cache() {
        // `acquire` takes a `Plan`, and a sizing whose limits or footprint overflow has none.
        let huge = sizing(RuntimeEnv::default().with_heap([u64::MAX - 63, 1024, 1024, 1024]));
        assert_eq!(Plan::of(huge).unwrap_err(), SizingError::HeapSumOverflow);
        let mut ledger = DeviceLedger::new(GIB);
        let mut cache = Cache::new(4);
        assert_eq!(
            acquire(&mut cache, &huge, &mut ledger).unwrap_err(),
            AcquireError::Sizing(SizingError::HeapSumOverflow)
        );
        assert!(cache.is_empty());
        assert_eq!(ledger.committed_bytes(), 0);
    }

    #[test]
    fn arena_dropped_lease_comes_back_idle() {
        let mut ledger = DeviceLedger::new(GIB);
        let mut cache = Cache::new(4);
        let a = small(1024);
        let (lease, _) = acquire(&mut cache, &a, &mut ledger).unwrap();
        let base = lease.device_base();
        drop(lease);
        let (lease, outcome) = acquire(&mut cache, &a, &mut ledger).unwrap();
        assert_eq!(outcome, ArenaOutcome::Hit);
        assert_eq!(lease.device_base(), base);
        cache.release(lease, &mut ledger);
        assert_eq!(cache.trim_idle(&mut ledger), bytes_of(&[&a]));
        assert!(cache.is_empty());
        assert_eq!(ledger.committed_bytes(), 0);
    }

    #[test]
    fn arena_layout_heap_and_payload() {
        let mut ledger = DeviceLedger::new(GIB);
        let mut cache: ArenaCache<Vec<u32>> = ArenaCache::new(4);
        let s = small(4096);
        let (mut lease, _) = cache
            .acquire(&plan(&s), 3, &mut ledger, |s| {
                vec![0; s.task_window(0) as usize]
            })
            .unwrap();
        let fp = *lease.footprint();
        assert_eq!(lease.device_range().bytes, fp.arena);
        assert_eq!(lease.device_base() % 4096, 0);
        assert!(lease.device_range().end() < HOST_ADDR_BASE);
        let heap = lease.heap_range();
        assert_eq!(heap.base, lease.device_base() + fp.image + fp.deps);
        assert_eq!(heap.end(), lease.device_range().end());
        assert_eq!(heap.bytes, 4 * 4096);
        assert_eq!(lease.heap().len(), 4 * 4096);
        assert_eq!(lease.heap_ptr() as usize % 4096, 0);
        lease.heap().write_f32(0, &[2.5]);
        lease.payload_mut()[1] = 7;
        assert_eq!(lease.payload(), &vec![0, 7, 0, 0]);
        cache.release(lease, &mut ledger);
        let (lease, outcome) = cache
            .acquire(&plan(&s), 3, &mut ledger, |_| {
                unreachable!("a hit builds nothing")
            })
            .unwrap();
        assert_eq!(outcome, ArenaOutcome::Hit);
        // Reuse keeps contents; resetting is the runtime's job.
        assert_eq!(lease.payload(), &vec![0, 7, 0, 0]);
        assert_eq!(lease.heap().read_f32(0, 1), vec![2.5]);
        cache.release(lease, &mut ledger);
    }

    #[test]
    fn arena_and_allocation_addresses_are_disjoint() {
        let mut ledger = DeviceLedger::new(GIB);
        let mut cache = Cache::new(1);
        let mut ranges = Vec::new();
        for heap in [1024u64, 2048, 1024, 4096] {
            let (lease, _) = acquire(&mut cache, &small(heap), &mut ledger).unwrap();
            ranges.push(lease.device_range());
            let id = ledger.malloc(heap, 64).unwrap();
            ranges.push(ledger.allocation(id).unwrap().range());
            cache.release(lease, &mut ledger);
        }
        ranges.sort_by_key(|r| r.base);
        for pair in ranges.windows(2) {
            assert!(pair[0].end() <= pair[1].base, "{pair:?} overlap");
            assert_ne!(pair[0].base, pair[1].base);
        }
    }

    #[test]
    fn arena_make_room_lets_a_device_allocation_displace_idle_arenas() {
        let a = small(1 << 20);
        let mut ledger = DeviceLedger::new(bytes_of(&[&a]) + 4096);
        let mut cache = Cache::new(4);
        run(&mut cache, &a, &mut ledger);
        assert!(ledger.malloc(8192, 64).is_err());
        assert_eq!(cache.make_room(8192, &mut ledger), Some(1));
        assert!(ledger.malloc(8192, 64).is_ok());
        assert_eq!(cache.make_room(ledger.capacity(), &mut ledger), None);
    }

    #[test]
    fn arena_memory_is_committed_lazily() {
        let Some(before) = vm_rss_bytes() else {
            return; // not Linux
        };
        let mut ledger = DeviceLedger::new(16 * GIB);
        let mut cache = Cache::new(4);
        let one_gib = small(GIB / 4);
        let (lease, _) = acquire(&mut cache, &one_gib, &mut ledger).unwrap();
        assert_eq!(lease.heap().len() as u64, GIB);
        lease.heap().write_bytes(GIB as usize - 1, &[1]);
        let after = vm_rss_bytes().unwrap();
        // Other tests run concurrently, so allow generous noise; committing 1 GiB would show.
        assert!(
            after.saturating_sub(before) < 64 << 20,
            "RSS grew from {before} to {after} bytes"
        );
        cache.release(lease, &mut ledger);
    }

    #[test]
    #[should_panic(expected = "same device ledger")]
    fn arena_cache_rejects_a_second_ledger() {
        let mut first = DeviceLedger::new(GIB);
        let mut second = DeviceLedger::new(GIB);
        let mut cache = Cache::new(4);
        run(&mut cache, &small(1024), &mut first);
        let _ = acquire(&mut cache, &small(1024), &mut second);
    }

    #[test]
    fn arena_types_cross_threads() {
        fn send_sync<X: Send + Sync>() {}
        send_sync::<HostMemory>();
        send_sync::<DeviceLedger>();
        send_sync::<ArenaCache<Vec<u64>>>();
        send_sync::<ArenaLease<Vec<u64>>>();
    }

    #[test]
    fn arena_outcome_display() {
        assert_eq!(ArenaOutcome::Hit.to_string(), "hit");
        assert_eq!(ArenaOutcome::Miss { evicted: 0 }.to_string(), "miss");
        assert_eq!(
            ArenaOutcome::Miss { evicted: 2 }.to_string(),
            "miss(evicted 2)"
        );
    }
}
