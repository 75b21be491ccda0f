//! Arena footprint of a resolved sizing (RING_CONFIG.md §7.1).
//!
//! The arena is what one run reserves from a chip's device memory: the shared-memory image
//! (per-slot descriptors, payloads and states, growing linearly with the windows), the dep-list
//! and fanin-spill pools, and the summed ring heaps. The per-entry constants below are the
//! only place these sizes are written down; if the runtime's structures change, change them here
//! and regenerate the pinned figures of RING_CONFIG.md §14 (T53–T55).

use pto_types::RING_COUNT;
use pto_types::ring_config::resolve::{ResolvedSizing, SizingError};

/// Fixed header of the shared-memory image.
pub const HEADER: u64 = 896;
/// Per-slot task descriptor.
pub const DESC: u64 = 40;
/// Per-slot payload (kernel ids, tensors by value, scalars).
pub const PAYLOAD: u64 = 4864;
/// Per-slot state record (one cache line).
pub const SLOT: u64 = 64;
/// One dep-list node.
pub const DEP_ENTRY: u64 = 16;
/// One fanin-spill entry.
pub const FANIN_ENTRY: u64 = 8;

/// The terms of an arena's size, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Footprint {
    pub image: u64,
    pub deps: u64,
    pub heaps: u64,
    pub arena: u64,
}

/// `x` rounded up to a multiple of 64, or `None` on overflow.
fn align64(x: u64) -> Option<u64> {
    x.checked_next_multiple_of(64)
}

/// `align64(per_entry * count)` with overflow checks.
fn aligned_product(per_entry: u64, count: u64) -> Option<u64> {
    per_entry.checked_mul(count).and_then(align64)
}

/// The arena footprint of `sizing`, with checked arithmetic throughout.
pub fn footprint(sizing: &ResolvedSizing) -> Result<Footprint, SizingError> {
    compute(sizing).ok_or(SizingError::ArenaSizeOverflow)
}

/// One ring's share of the arena: its slots' image, its dep-list and spill pools and its
/// heap, in bytes (`None` on overflow). The arena is the header plus these over the rings, so
/// a report can say how many bytes each ring reserves.
pub fn ring_bytes(window: u64, heap: u64, dep_pool: u64) -> Option<u64> {
    let (image, deps) = ring_terms(window, dep_pool)?;
    image.checked_add(deps)?.checked_add(heap)
}

/// A ring's (image, deps) terms.
fn ring_terms(window: u64, dep_pool: u64) -> Option<(u64, u64)> {
    let mut image = 0u64;
    for per_slot in [DESC, PAYLOAD, SLOT] {
        image = image.checked_add(aligned_product(per_slot, window)?)?;
    }
    // One spare dep-list node per ring keeps parity with the reference layout.
    let deps = aligned_product(DEP_ENTRY, dep_pool.checked_add(1)?)?
        .checked_add(aligned_product(FANIN_ENTRY, dep_pool)?)?;
    Some((image, deps))
}

fn compute(sizing: &ResolvedSizing) -> Option<Footprint> {
    let mut image = align64(HEADER)?;
    let mut deps = 0u64;
    let mut heaps = 0u64;
    for ring in 0..RING_COUNT {
        let window = u64::from(sizing.task_window(ring));
        let dep_pool = u64::from(sizing.dep_pool(ring));
        let (ring_image, ring_deps) = ring_terms(window, dep_pool)?;
        image = image.checked_add(ring_image)?;
        deps = deps.checked_add(ring_deps)?;
        heaps = heaps.checked_add(sizing.heap(ring))?;
    }
    let arena = image.checked_add(deps)?.checked_add(heaps)?;
    Some(Footprint {
        image,
        deps,
        heaps,
        arena,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pto_types::RuntimeEnv;
    use pto_types::ring_config::env::EnvSnapshot;
    use pto_types::ring_config::resolve::{RingDefaults, resolve};

    fn sizing(call: RuntimeEnv) -> ResolvedSizing {
        resolve(&call, &EnvSnapshot::default(), &RingDefaults::BUILT_IN).unwrap()
    }

    #[test]
    fn t53_default_footprint() {
        let fp = footprint(&sizing(RuntimeEnv::default())).unwrap();
        assert_eq!(
            fp,
            Footprint {
                image: 325583744,
                deps: 1573120,
                heaps: 1073741824,
                arena: 1400898688,
            }
        );
    }

    /// The arena is the header plus each ring's bytes.
    #[test]
    fn rings_add_up_to_the_arena() {
        let s = sizing(
            RuntimeEnv::default()
                .with_task_window([4, 8, 64, 16])
                .with_heap([1024, 65536, 4096, 1024])
                .with_dep_pool([4, 23, 64, 8]),
        );
        let rings: u64 = (0..RING_COUNT)
            .map(|r| {
                let (w, h, d) = (s.task_window(r), s.heap(r), s.dep_pool(r));
                ring_bytes(u64::from(w), h, u64::from(d)).unwrap()
            })
            .sum();
        assert_eq!(
            align64(HEADER).unwrap() + rings,
            footprint(&s).unwrap().arena
        );
        assert_eq!(ring_bytes(u64::MAX, 0, 4), None);
    }

    #[test]
    fn t54_small_footprints() {
        let medium = RuntimeEnv::default()
            .with_task_window(128)
            .with_heap(8 << 20)
            .with_dep_pool(256);
        assert_eq!(footprint(&sizing(medium)).unwrap().arena, 36123776);
        let tiny = RuntimeEnv::default()
            .with_task_window(4)
            .with_heap(1024)
            .with_dep_pool(4);
        assert_eq!(footprint(&sizing(tiny)).unwrap().arena, 85376);
    }

    #[test]
    fn t55_image_grows_with_the_windows() {
        let growing = footprint(&sizing(
            RuntimeEnv::default().with_task_window([128, 256, 512, 1024]),
        ))
        .unwrap();
        let flat = footprint(&sizing(RuntimeEnv::default().with_task_window(128))).unwrap();
        assert_eq!(growing.image, 9539456);
        assert_eq!(flat.image, 2544512);
    }

    #[test]
    fn heaps_near_u64_max_overflow_the_arena() {
        let huge = RuntimeEnv::default().with_heap([u64::MAX - 63, 1024, 1024, 1024]);
        assert_eq!(
            footprint(&sizing(huge)),
            Err(SizingError::ArenaSizeOverflow)
        );
    }
}
