//! `RuntimeEnv`: per-ring sizing requested by one task (RING_CONFIG.md §2).
//!
//! Plain data: every value is representable, ranges are checked by `CallConfig::validate`.
//! Zero means "unset for this ring" and falls through to the environment, then the default.

use std::fmt;

use super::{ConfigError, RING_COUNT, Resource};

/// Ring sizing carried by a `CallConfig`. Each array is indexed by ring; 0 = unset.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Debug)]
pub struct RuntimeEnv {
    pub ring_task_window: [u64; RING_COUNT],
    pub ring_heap: [u64; RING_COUNT],
    pub ring_dep_pool: [u64; RING_COUNT],
}

/// A value for one resource: a scalar broadcast to every ring, or one value per ring.
///
/// The form is not remembered once applied: a broadcast and an equal list are the same
/// `RuntimeEnv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingValue {
    Broadcast(u64),
    PerRing([u64; RING_COUNT]),
}

impl RingValue {
    /// A value from a list that must have exactly one entry per ring.
    pub fn from_slice(field: Resource, values: &[u64]) -> Result<RingValue, ConfigError> {
        match <[u64; RING_COUNT]>::try_from(values) {
            Ok(array) => Ok(RingValue::PerRing(array)),
            Err(_) => Err(ConfigError::RingListLength {
                field,
                len: values.len(),
            }),
        }
    }

    /// The four per-ring values this stands for.
    pub fn to_array(self) -> [u64; RING_COUNT] {
        match self {
            RingValue::Broadcast(v) => [v; RING_COUNT],
            RingValue::PerRing(array) => array,
        }
    }
}

impl From<u64> for RingValue {
    fn from(v: u64) -> RingValue {
        RingValue::Broadcast(v)
    }
}

impl From<[u64; RING_COUNT]> for RingValue {
    fn from(array: [u64; RING_COUNT]) -> RingValue {
        RingValue::PerRing(array)
    }
}

impl RuntimeEnv {
    /// The four values of one resource.
    pub fn get(&self, resource: Resource) -> [u64; RING_COUNT] {
        *self.field(resource)
    }

    /// Sets one resource on every ring (scalar) or per ring (list). Scalar 0 clears all rings.
    pub fn set(&mut self, resource: Resource, value: impl Into<RingValue>) {
        *self.field_mut(resource) = value.into().to_array();
    }

    /// Builder form of [`RuntimeEnv::set`] for the task window.
    pub fn with_task_window(mut self, value: impl Into<RingValue>) -> RuntimeEnv {
        self.set(Resource::TaskWindow, value);
        self
    }

    /// Builder form of [`RuntimeEnv::set`] for the heap.
    pub fn with_heap(mut self, value: impl Into<RingValue>) -> RuntimeEnv {
        self.set(Resource::Heap, value);
        self
    }

    /// Builder form of [`RuntimeEnv::set`] for the dep pool.
    pub fn with_dep_pool(mut self, value: impl Into<RingValue>) -> RuntimeEnv {
        self.set(Resource::DepPool, value);
        self
    }

    /// Checks every non-zero entry against its rule (ring 0 first; window, heap, dep pool).
    pub fn validate(&self) -> Result<(), ConfigError> {
        super::call_config::validate_runtime_env(self)
    }

    /// True iff all twelve entries are 0.
    pub fn is_unset(&self) -> bool {
        *self == RuntimeEnv::default()
    }

    /// A copy where every non-zero entry of `overrides` replaces the corresponding entry.
    pub fn overlaid_with(&self, overrides: &RuntimeEnv) -> RuntimeEnv {
        let mut out = *self;
        for resource in Resource::ALL {
            let over = overrides.get(resource);
            let target = out.field_mut(resource);
            for (slot, value) in target.iter_mut().zip(over) {
                if value != 0 {
                    *slot = value;
                }
            }
        }
        out
    }

    fn field(&self, resource: Resource) -> &[u64; RING_COUNT] {
        match resource {
            Resource::TaskWindow => &self.ring_task_window,
            Resource::Heap => &self.ring_heap,
            Resource::DepPool => &self.ring_dep_pool,
        }
    }

    fn field_mut(&mut self, resource: Resource) -> &mut [u64; RING_COUNT] {
        match resource {
            Resource::TaskWindow => &mut self.ring_task_window,
            Resource::Heap => &mut self.ring_heap,
            Resource::DepPool => &mut self.ring_dep_pool,
        }
    }
}

impl fmt::Display for RuntimeEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unset() {
            return f.write_str("unset");
        }
        for (i, resource) in Resource::ALL.into_iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let [a, b, c, d] = self.get(resource);
            write!(f, "{}=[{a}, {b}, {c}, {d}]", resource.field())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    fn hash_of(env: &RuntimeEnv) -> u64 {
        let mut h = DefaultHasher::new();
        env.hash(&mut h);
        h.finish()
    }

    #[test]
    fn t2_broadcast_reads_back_four_entries() {
        let env = RuntimeEnv::default().with_task_window(64);
        assert_eq!(env.ring_task_window, [64, 64, 64, 64]);
    }

    #[test]
    fn t3_broadcast_zero_clears_every_ring() {
        let mut env = RuntimeEnv::default().with_task_window(64);
        env.set(Resource::TaskWindow, 0);
        assert_eq!(env.ring_task_window, [0, 0, 0, 0]);
        assert!(env.is_unset());
    }

    #[test]
    fn t4_list_reads_back_exactly() {
        let value = RingValue::from_slice(Resource::TaskWindow, &[16, 32, 128, 256]).unwrap();
        let env = RuntimeEnv::default().with_task_window(value);
        assert_eq!(env.ring_task_window, [16, 32, 128, 256]);
    }

    #[test]
    fn t5_list_of_wrong_length_is_rejected() {
        for len in [3usize, 5] {
            let values = vec![1024u64; len];
            let err = RingValue::from_slice(Resource::Heap, &values).unwrap_err();
            assert_eq!(
                err,
                ConfigError::RingListLength {
                    field: Resource::Heap,
                    len
                }
            );
            assert_eq!(
                err.to_string(),
                format!(
                    "runtime_env.ring_heap: a list must have exactly 4 entries (one per ring), got {len}"
                )
            );
        }
    }

    #[test]
    fn broadcast_and_equal_list_are_the_same_value() {
        let a = RuntimeEnv::default().with_heap(4096);
        let b = RuntimeEnv::default().with_heap([4096; 4]);
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
    }

    #[test]
    fn display_lists_every_ring_or_says_unset() {
        assert_eq!(RuntimeEnv::default().to_string(), "unset");
        let env = RuntimeEnv::default()
            .with_task_window([16, 32, 64, 128])
            .with_heap(1024);
        assert_eq!(
            env.to_string(),
            "ring_task_window=[16, 32, 64, 128] ring_heap=[1024, 1024, 1024, 1024] ring_dep_pool=[0, 0, 0, 0]"
        );
    }

    #[test]
    fn overlay_replaces_only_non_zero_entries() {
        let base = RuntimeEnv::default()
            .with_task_window(64)
            .with_heap(8 << 20);
        let over = RuntimeEnv::default().with_task_window([0, 0, 0, 16]);
        let out = base.overlaid_with(&over);
        assert_eq!(out.ring_task_window, [64, 64, 64, 16]);
        assert_eq!(out.ring_heap, [8 << 20; 4]);
    }
}
