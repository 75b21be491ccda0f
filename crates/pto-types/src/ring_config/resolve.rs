//! Resolution of ring sizing with provenance, and the derived capacities (RING_CONFIG.md §5, §6).
//!
//! [`resolve`] is the only way to build a [`ResolvedSizing`], so every chip binds values that
//! passed the rules of [`Resource`]: raw numbers never reach an allocator.

use std::fmt;

use super::call_config::validate_runtime_env;
use super::env::EnvSnapshot;
use super::{ConfigError, RING_COUNT, Resource, RuntimeEnv};

/// Where a resolved value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SizeSource {
    CallConfig,
    Env,
    Default,
}

impl SizeSource {
    /// The serialised name: `call_config`, `env` or `default`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SizeSource::CallConfig => "call_config",
            SizeSource::Env => "env",
            SizeSource::Default => "default",
        }
    }

    /// The wire code used in reply areas: 0 default, 1 env, 2 call_config.
    pub const fn code(self) -> u8 {
        match self {
            SizeSource::Default => 0,
            SizeSource::Env => 1,
            SizeSource::CallConfig => 2,
        }
    }

    /// The source with this wire code.
    pub const fn from_code(code: u8) -> Option<SizeSource> {
        match code {
            0 => Some(SizeSource::Default),
            1 => Some(SizeSource::Env),
            2 => Some(SizeSource::CallConfig),
            _ => None,
        }
    }
}

impl fmt::Display for SizeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resolved value and its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Resolved {
    pub value: u64,
    pub source: SizeSource,
}

/// The built-in defaults of the last tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingDefaults {
    pub task_window: u64,
    pub heap: u64,
    pub dep_pool: u64,
}

impl RingDefaults {
    /// The compile-time defaults of RING_CONFIG.md §1.
    pub const BUILT_IN: RingDefaults = RingDefaults {
        task_window: Resource::TaskWindow.default_value(),
        heap: Resource::Heap.default_value(),
        dep_pool: Resource::DepPool.default_value(),
    };

    fn get(&self, resource: Resource) -> u64 {
        match resource {
            Resource::TaskWindow => self.task_window,
            Resource::Heap => self.heap,
            Resource::DepPool => self.dep_pool,
        }
    }
}

/// The sizing a chip binds for one run: twelve legal values, each with its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResolvedSizing {
    values: [[Resolved; RING_COUNT]; 3],
}

/// The twelve values of a sizing without their sources: the arena-cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SizingKey {
    pub task_window: [u64; RING_COUNT],
    pub heap: [u64; RING_COUNT],
    pub dep_pool: [u64; RING_COUNT],
}

/// Resolves every resource on every ring: non-zero `call` entry > environment > default.
///
/// `call` is validated first (the chip never trusts its input); the environment snapshot and
/// the defaults are legal by construction.
pub fn resolve(
    call: &RuntimeEnv,
    env: &EnvSnapshot,
    defaults: &RingDefaults,
) -> Result<ResolvedSizing, ConfigError> {
    validate_runtime_env(call)?;
    let one = |resource: Resource| -> [Resolved; RING_COUNT] {
        let call_values = call.get(resource);
        let env_values = env.ring_values(resource);
        std::array::from_fn(|ring| {
            if call_values[ring] != 0 {
                return Resolved {
                    value: call_values[ring],
                    source: SizeSource::CallConfig,
                };
            }
            match env_values {
                Some(list) => Resolved {
                    value: list[ring],
                    source: SizeSource::Env,
                },
                None => Resolved {
                    value: defaults.get(resource),
                    source: SizeSource::Default,
                },
            }
        })
    };
    Ok(ResolvedSizing {
        values: Resource::ALL.map(one),
    })
}

impl ResolvedSizing {
    /// The four resolved values of one resource.
    pub fn get(&self, resource: Resource) -> &[Resolved; RING_COUNT] {
        &self.values[resource as usize]
    }

    /// One resolved value.
    pub fn at(&self, resource: Resource, ring: usize) -> Resolved {
        self.values[resource as usize][ring]
    }

    /// The four values of one resource, without sources.
    pub fn values(&self, resource: Resource) -> [u64; RING_COUNT] {
        self.get(resource).map(|r| r.value)
    }

    /// The four sources of one resource.
    pub fn sources(&self, resource: Resource) -> [SizeSource; RING_COUNT] {
        self.get(resource).map(|r| r.source)
    }

    /// Task window of `ring` (a power of two, at most 2^30).
    pub fn task_window(&self, ring: usize) -> u32 {
        self.at(Resource::TaskWindow, ring).value as u32
    }

    /// Heap bytes of `ring` (a multiple of 64, at least 1024).
    pub fn heap(&self, ring: usize) -> u64 {
        self.at(Resource::Heap, ring).value
    }

    /// Dep-pool entries of `ring` (at most 2^31 - 1).
    pub fn dep_pool(&self, ring: usize) -> u32 {
        self.at(Resource::DepPool, ring).value as u32
    }

    /// The values without sources.
    pub fn key(&self) -> SizingKey {
        SizingKey {
            task_window: self.values(Resource::TaskWindow),
            heap: self.values(Resource::Heap),
            dep_pool: self.values(Resource::DepPool),
        }
    }

    /// The derived capacities, with their overflow guards (RING_CONFIG.md §6).
    pub fn derived(&self) -> Result<DerivedCapacities, SizingError> {
        let windows = self.values(Resource::TaskWindow);
        let scope_task_cap: u64 = windows.iter().sum();
        if scope_task_cap > (1 << 31) - 1 {
            return Err(SizingError::ScopeTaskCapOverflow {
                sum: scope_task_cap,
            });
        }
        let mut heap_bases = [0u64; RING_COUNT];
        let mut heap_total: u64 = 0;
        for (ring, base) in heap_bases.iter_mut().enumerate() {
            *base = heap_total;
            heap_total = heap_total
                .checked_add(self.heap(ring))
                .ok_or(SizingError::HeapSumOverflow)?;
        }
        Ok(DerivedCapacities {
            live_tasks: windows.map(|w| w - 1),
            scope_task_cap,
            heap_total,
            heap_bases,
            dep_capacity: self.values(Resource::DepPool),
        })
    }
}

impl fmt::Display for ResolvedSizing {
    /// `task_window=[16(call_config), …] heap=[…] dep_pool=[…]`, as in the bind log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, resource) in Resource::ALL.into_iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}=[", resource.short_name())?;
            for (ring, r) in self.get(resource).iter().enumerate() {
                if ring > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{}({})", r.value, r.source)?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// Quantities computed from a resolved sizing at bind time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DerivedCapacities {
    /// Most live tasks per ring: `W_r - 1`.
    pub live_tasks: [u64; RING_COUNT],
    /// `Σ W_r`, at most 2^31 - 1.
    pub scope_task_cap: u64,
    /// `Σ H_r`.
    pub heap_total: u64,
    /// Offset of ring r's heap: `Σ_{k<r} H_k`.
    pub heap_bases: [u64; RING_COUNT],
    /// Dep-list and fanin-spill capacity per ring: `D_r`.
    pub dep_capacity: [u64; RING_COUNT],
}

/// A resolved sizing that cannot be bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizingError {
    ScopeTaskCapOverflow {
        sum: u64,
    },
    HeapSumOverflow,
    ArenaSizeOverflow,
    DeviceMemoryExhausted {
        chip: u32,
        need: u64,
        image: u64,
        deps: u64,
        heaps: u64,
        heap_sources: [SizeSource; RING_COUNT],
        free: u64,
        capacity: u64,
    },
}

impl fmt::Display for SizingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizingError::ScopeTaskCapOverflow { sum } => write!(
                f,
                "the task windows add up to {sum} slots; their sum (scope task capacity) must be at most 2147483647: lower runtime_env.ring_task_window"
            ),
            SizingError::HeapSumOverflow => f.write_str(
                "the ring heaps add up to more than 2^64 bytes: lower runtime_env.ring_heap",
            ),
            SizingError::ArenaSizeOverflow => f.write_str(
                "the arena size overflows 64 bits: lower runtime_env.ring_heap or ring_task_window",
            ),
            SizingError::DeviceMemoryExhausted {
                chip,
                need,
                image,
                deps,
                heaps,
                heap_sources,
                free,
                capacity,
            } => {
                write!(
                    f,
                    "chip {chip}: arena needs {need} bytes (image {image} + dep pools {deps} + heaps {heaps}, heap from "
                )?;
                let mut named = Vec::new();
                for source in heap_sources {
                    if !named.contains(source) {
                        named.push(*source);
                    }
                }
                let names: Vec<&str> = named.iter().map(|s| s.as_str()).collect();
                write!(
                    f,
                    "{}); device memory has {free} bytes free of {capacity}: set a per-task runtime_env.ring_heap",
                    names.join("/")
                )?;
                if named.iter().any(|s| *s != SizeSource::CallConfig) {
                    f.write_str(" (or lower PTO2_RING_HEAP)")?;
                }
                f.write_str(" or raise ChipSpec.device_memory_bytes")
            }
        }
    }
}

impl std::error::Error for SizingError {}
