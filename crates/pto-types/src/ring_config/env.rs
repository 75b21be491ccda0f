//! The environment tier (RING_CONFIG.md §4): placeholder types, completed by the env module work.

use super::{RING_COUNT, Resource};

/// Per-resource values taken from a chip's environment at start-up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvSnapshot {
    pub task_window: Option<[u64; RING_COUNT]>,
    pub heap: Option<[u64; RING_COUNT]>,
    pub dep_pool: Option<[u64; RING_COUNT]>,
    pub strict: bool,
}

impl EnvSnapshot {
    /// The environment tier for one resource, if the variable was set and valid.
    pub fn ring_values(&self, resource: Resource) -> Option<[u64; RING_COUNT]> {
        match resource {
            Resource::TaskWindow => self.task_window,
            Resource::Heap => self.heap,
            Resource::DepPool => self.dep_pool,
        }
    }
}
