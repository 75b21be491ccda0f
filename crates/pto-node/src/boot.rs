//! The boot-block form of a chip's spec (NODE_RUNTIME.md §4.6, §6.1): `ChipSpec` ↔
//! `pto_types::node_wire::boot::BootChipSpec`.
//!
//! Both sides of a process boundary use it: the parent writes a chip child's boot block
//! (`launch.rs`) and an L4's spec of an L3 child Worker (`worker.rs`), the child reads them back
//! (`child/serve.rs`, `Worker::from_spec`). It lives here, beside neither side, so the parent
//! never imports from `child`. pto-chip cannot hold these conversions: it knows nothing of the
//! node's wire records.

use std::time::Duration;

use pto_chip::ChipSpec;
use pto_types::node_wire::boot::BootChipSpec;

/// `ChipSpec` from its boot-block form.
pub(crate) fn chip_spec_from_boot(b: &BootChipSpec) -> ChipSpec {
    let opt = |ns: Option<u64>| ns.map(Duration::from_nanos);
    ChipSpec {
        clusters: b.clusters,
        device_memory_bytes: b.device_memory_bytes,
        max_aicpu_threads: b.max_aicpu_threads,
        tensormap_pool: b.tensormap_pool,
        tensormap_buckets: b.tensormap_buckets,
        scheduler_timeout: opt(b.scheduler_timeout_ns),
        tensor_wait_timeout: opt(b.tensor_wait_timeout_ns),
        alloc_backstop: Duration::from_nanos(b.alloc_backstop_ns),
        spin: opt(b.spin_ns),
        arena_cache_entries: b.arena_cache_entries,
        strict_env: b.strict_env,
        prewarm: b.prewarm,
    }
}

/// The boot-block form of a `ChipSpec`. Durations travel as nanoseconds; one too long for a
/// `u64` (over 584 years) saturates below `u64::MAX`, which the record reserves for "unset".
pub(crate) fn chip_spec_to_boot(s: &ChipSpec) -> BootChipSpec {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1);
    BootChipSpec {
        clusters: s.clusters,
        device_memory_bytes: s.device_memory_bytes,
        max_aicpu_threads: s.max_aicpu_threads,
        tensormap_pool: s.tensormap_pool,
        tensormap_buckets: s.tensormap_buckets,
        scheduler_timeout_ns: s.scheduler_timeout.map(ns),
        tensor_wait_timeout_ns: s.tensor_wait_timeout.map(ns),
        alloc_backstop_ns: ns(s.alloc_backstop),
        spin_ns: s.spin.map(ns),
        arena_cache_entries: s.arena_cache_entries,
        strict_env: s.strict_env,
        prewarm: s.prewarm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pto_types::RuntimeEnv;

    #[test]
    fn chip_specs_round_trip_through_the_boot_form() {
        let every_field = ChipSpec {
            clusters: 3,
            device_memory_bytes: 5 << 30,
            max_aicpu_threads: 3,
            tensormap_pool: Some(1024),
            tensormap_buckets: 256,
            scheduler_timeout: Some(Duration::from_millis(2500)),
            tensor_wait_timeout: Some(Duration::from_secs(3)),
            alloc_backstop: Duration::from_millis(40),
            spin: Some(Duration::ZERO),
            arena_cache_entries: 2,
            strict_env: true,
            prewarm: Some(RuntimeEnv::default()),
        };
        for spec in [ChipSpec::default(), every_field] {
            assert_eq!(chip_spec_from_boot(&chip_spec_to_boot(&spec)), spec);
        }
        let forever = ChipSpec {
            alloc_backstop: Duration::MAX,
            ..ChipSpec::default()
        };
        assert_eq!(chip_spec_to_boot(&forever).alloc_backstop_ns, u64::MAX - 1);
    }
}
