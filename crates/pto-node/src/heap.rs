//! The L3 heap rings behind `orch.alloc` (NODE_RUNTIME.md §2.8).
//!
//! One mapping of `4 × heap_ring_size` bytes (lazily committed), created at `init`. Each ring
//! is an independent bump allocator with wrap-around in 1 KiB granules, reclaimed in FIFO order:
//! a slab returns when its scope ended and no unfinished task uses it, and the ring's tail
//! advances over returned slabs only, so inner-scope churn never waits on long-lived outer
//! slabs of other rings. When a request does not fit:
//!
//! 1. **Structural proof.** If the ring's oldest unreturned slab is still held by its scope,
//!    that scope is open on the submitting thread — the only thread that allocates and ends
//!    scopes — and cannot end while this call blocks, so the tail can never advance: fail at
//!    once with `HeapExhausted { provable: true }`.
//! 2. Otherwise wait (spin, then park on the ring's event count, never holding the engine lock)
//!    up to `heap_alloc_timeout`, then `HeapExhausted { provable: false }`.
//!
//! The heap has its own lock; lock order is engine → buffer uses → heap, and `alloc` takes
//! only the heap lock.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pto_types::wait::{EventCount, SpinPolicy, Waiter};

use crate::buffer::Memory;
use crate::error::AllocError;

/// Allocation granule.
pub(crate) const GRANULE: u64 = 1024;
/// Number of heap rings (ring = `min(scope depth, 3)`).
pub(crate) const HEAP_RINGS: usize = 4;

struct SlabRec {
    id: u64,
    offset: u64,
    len: u64,
    released: bool,
    scope_held: Arc<AtomicBool>,
}

#[derive(Default)]
struct Ring {
    /// Live slabs in allocation order; the front is the tail.
    slabs: VecDeque<SlabRec>,
}

impl Ring {
    /// Offset (within the ring) where `len` bytes fit, if any.
    fn fit(&self, len: u64, capacity: u64) -> Option<u64> {
        let (Some(front), Some(back)) = (self.slabs.front(), self.slabs.back()) else {
            return (len <= capacity).then_some(0);
        };
        let tail = front.offset;
        let head = back.offset + back.len;
        if front.offset <= back.offset {
            // Not wrapped: free space is [head, capacity) and [0, tail).
            if capacity - head >= len {
                return Some(head);
            }
            return (tail >= len).then_some(0);
        }
        // Wrapped: free space is [head, tail).
        (tail - head >= len).then_some(head)
    }

    fn in_use(&self) -> u64 {
        self.slabs.iter().map(|s| s.len).sum()
    }
}

/// A reserved slab.
#[derive(Debug)]
pub(crate) struct Slab {
    pub(crate) id: u64,
    /// Byte offset inside the heap mapping.
    pub(crate) base: usize,
    pub(crate) scope_held: Arc<AtomicBool>,
}

/// The four heap rings of one Worker.
pub(crate) struct HeapRings {
    memory: Memory,
    ring_size: u64,
    rings: Mutex<([Ring; HEAP_RINGS], u64)>,
    released: EventCount,
    spin: SpinPolicy,
}

impl HeapRings {
    /// Rings over a private anonymous mapping (in-process mode).
    pub(crate) fn new(ring_size: u64, spin: SpinPolicy) -> std::io::Result<HeapRings> {
        let mapping = pto_chip::memory::HostMemory::new((ring_size * HEAP_RINGS as u64) as usize)?;
        Ok(HeapRings::over(Memory::Anon(mapping), ring_size, spin))
    }

    /// Rings over `memory` (at least `4 × ring_size` bytes; a shared segment in child-process
    /// mode).
    pub(crate) fn over(memory: Memory, ring_size: u64, spin: SpinPolicy) -> HeapRings {
        assert!(memory.len() as u64 >= ring_size * HEAP_RINGS as u64);
        HeapRings {
            memory,
            ring_size,
            rings: Mutex::new((Default::default(), 1)),
            released: EventCount::new(),
            spin,
        }
    }

    pub(crate) fn memory(&self) -> Memory {
        self.memory.clone()
    }

    /// Reserves `bytes` in `ring`, waiting up to `timeout` for releases (see the module docs).
    pub(crate) fn alloc(
        &self,
        ring: usize,
        bytes: u64,
        timeout: Duration,
    ) -> Result<Slab, AllocError> {
        let len = bytes.max(1).div_ceil(GRANULE) * GRANULE;
        if len > self.ring_size {
            return Err(AllocError::TooLarge {
                ring,
                requested: bytes,
                capacity: self.ring_size,
            });
        }
        let deadline = Instant::now() + timeout;
        let mut waiter = Waiter::new(&self.released, self.spin);
        loop {
            {
                let mut guard = self.rings.lock();
                let (rings, next_id) = &mut *guard;
                let r = &mut rings[ring];
                if let Some(offset) = r.fit(len, self.ring_size) {
                    let id = *next_id;
                    *next_id += 1;
                    let scope_held = Arc::new(AtomicBool::new(true));
                    r.slabs.push_back(SlabRec {
                        id,
                        offset,
                        len,
                        released: false,
                        scope_held: Arc::clone(&scope_held),
                    });
                    return Ok(Slab {
                        id,
                        base: (ring as u64 * self.ring_size + offset) as usize,
                        scope_held,
                    });
                }
                let oldest_held = r
                    .slabs
                    .iter()
                    .find(|s| !s.released)
                    .is_some_and(|s| s.scope_held.load(Ordering::Acquire));
                let exhausted = |provable| AllocError::HeapExhausted {
                    ring,
                    requested: bytes,
                    capacity: self.ring_size,
                    in_use: r.in_use(),
                    provable,
                };
                if oldest_held {
                    return Err(exhausted(true));
                }
                if Instant::now() >= deadline {
                    return Err(exhausted(false));
                }
            }
            // Releases notify `released` after updating the ring, so a re-check after the
            // wake-up sees them (pto_types::wait protocol).
            let _ = waiter.wait(Some(deadline));
        }
    }

    /// Returns a slab; the tail advances over every returned slab at the front.
    pub(crate) fn release(&self, ring: usize, slab: u64) {
        {
            let mut guard = self.rings.lock();
            let r = &mut guard.0[ring];
            if let Some(s) = r.slabs.iter_mut().find(|s| s.id == slab) {
                s.released = true;
            }
            while r.slabs.front().is_some_and(|s| s.released) {
                r.slabs.pop_front();
            }
        }
        self.released.notify_all();
    }

    /// Bytes held per ring (returned slabs behind an unreturned one still count).
    pub(crate) fn in_use(&self) -> [u64; HEAP_RINGS] {
        let guard = self.rings.lock();
        std::array::from_fn(|r| guard.0[r].in_use())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rings(size: u64) -> HeapRings {
        HeapRings::new(size, SpinPolicy::PARK_IMMEDIATELY).unwrap()
    }

    #[test]
    fn fifo_reclaim_and_wrap_around() {
        let h = rings(4 * GRANULE);
        let a = h.alloc(0, 2 * GRANULE, Duration::ZERO).unwrap();
        let b = h.alloc(0, GRANULE, Duration::ZERO).unwrap();
        assert_eq!((a.base, b.base), (0, 2 * GRANULE as usize));
        a.scope_held.store(false, Ordering::Release);
        // Two granules do not fit at the end (one left) nor before the tail (a is live).
        let err = h
            .alloc(0, 2 * GRANULE, Duration::from_millis(10))
            .unwrap_err();
        assert!(matches!(
            err,
            AllocError::HeapExhausted {
                provable: false,
                ..
            }
        ));
        h.release(0, a.id);
        // Now [0, 2) is free: wrap around.
        let c = h.alloc(0, 2 * GRANULE, Duration::ZERO).unwrap();
        assert_eq!(c.base, 0);
        assert_eq!(h.in_use()[0], 3 * GRANULE);
        // Releasing c before b does not move the tail past b.
        h.release(0, c.id);
        assert_eq!(h.in_use()[0], 3 * GRANULE);
        h.release(0, b.id);
        assert_eq!(h.in_use()[0], 0);
    }

    #[test]
    fn provable_when_the_oldest_slab_is_scope_held() {
        let h = rings(4 * GRANULE);
        let _a = h.alloc(1, 3 * GRANULE, Duration::ZERO).unwrap();
        let started = Instant::now();
        let err = h
            .alloc(1, 2 * GRANULE, Duration::from_secs(30))
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(
            err,
            AllocError::HeapExhausted {
                ring: 1,
                requested: 2048,
                capacity: 4096,
                in_use: 3072,
                provable: true
            }
        );
        // Other rings are independent.
        assert!(h.alloc(2, 4 * GRANULE, Duration::ZERO).is_ok());
        assert!(matches!(
            h.alloc(0, 5 * GRANULE, Duration::ZERO),
            Err(AllocError::TooLarge { .. })
        ));
    }
}
