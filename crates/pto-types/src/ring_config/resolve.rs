//! Resolution of ring sizing with provenance, and the derived capacities (RING_CONFIG.md §5, §6).
//!
//! A [`ResolvedSizing`] is built only by [`resolve`], or by [`ResolvedSizing::from_resolved`]
//! from a record another process wrote from `resolve`'s result (it checks every value again),
//! so every chip binds values that passed the rules of [`Resource`]: raw numbers never reach an
//! allocator.

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

    /// The letter tables print after a value: `c`, `e` or `d`.
    pub const fn letter(self) -> char {
        match self {
            SizeSource::CallConfig => 'c',
            SizeSource::Env => 'e',
            SizeSource::Default => 'd',
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

/// Why twelve values and sources read back from a record are not a sizing `resolve` could
/// have produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotResolvable {
    /// A value breaks its resource's ring rule.
    Illegal {
        resource: Resource,
        ring: usize,
        value: u64,
    },
    /// Rings of one resource come from both the environment and the default (the environment
    /// tier gives all four rings or none), or default rings differ (one default per resource).
    MixedTiers { resource: Resource },
}

impl ResolvedSizing {
    /// A sizing read back from a record another process wrote from [`resolve`]'s result: every
    /// value legal for its resource, and per resource the sources `resolve` can produce
    /// (environment and default rings never mixed, one default value).
    pub fn from_resolved(
        values: [[Resolved; RING_COUNT]; 3],
    ) -> Result<ResolvedSizing, NotResolvable> {
        for (resource, rings) in Resource::ALL.into_iter().zip(&values) {
            for (ring, r) in rings.iter().enumerate() {
                if resource.check(r.value).is_err() {
                    return Err(NotResolvable::Illegal {
                        resource,
                        ring,
                        value: r.value,
                    });
                }
            }
            let of = |source| rings.iter().filter(move |r| r.source == source);
            let has_env = of(SizeSource::Env).next().is_some();
            let mut defaults = of(SizeSource::Default).map(|r| r.value);
            let first_default = defaults.next();
            let mixed = has_env && first_default.is_some();
            if mixed || defaults.any(|v| Some(v) != first_default) {
                return Err(NotResolvable::MixedTiers { resource });
            }
        }
        Ok(ResolvedSizing { values })
    }

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

    /// `64c,32c,16c,16c` (`4Mc,1Mc,…` for the heap): one resource over the rings, each value
    /// with its source's letter ([`SizeSource::letter`]), as every table prints it.
    pub fn cells(&self, resource: Resource) -> String {
        self.cells_with(resource, |_, r| r.source.letter())
    }

    /// [`ResolvedSizing::cells`] with the letter of each ring's value chosen by `letter(ring,
    /// value)` (a scene's table names the config block that set a value).
    pub fn cells_with(
        &self,
        resource: Resource,
        letter: impl Fn(usize, Resolved) -> char,
    ) -> String {
        let cells: Vec<String> = (0..RING_COUNT)
            .map(|ring| {
                let r = self.at(resource, ring);
                value_cell(resource, r.value, letter(ring, r))
            })
            .collect();
        cells.join(",")
    }

    /// `task_window=64c,32c,16c,16c heap=4Mc,1Mc,1Mc,1Mc dep_pool=128c,64c,64c,64c`: the
    /// short form of the tables (c = call_config, e = env, d = default).
    pub fn compact(&self) -> String {
        let parts: Vec<String> = Resource::ALL
            .into_iter()
            .map(|r| format!("{}={}", r.short_name(), self.cells(r)))
            .collect();
        parts.join(" ")
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

/// `16384d`, `64e`, `128c`, `8Kt`: one ring's value (heap bytes shortened with
/// [`short_bytes`]) and a source letter.
pub fn value_cell(resource: Resource, value: u64, letter: char) -> String {
    if resource == Resource::Heap {
        format!("{}{letter}", short_bytes(value))
    } else {
        format!("{value}{letter}")
    }
}

/// `256M`, `1M`, `4K`, `1088`: bytes in the largest unit that divides them.
pub fn short_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring_config::CallConfig;
    use crate::ring_config::env::{EnvSnapshot, EnvSource};

    #[test]
    fn from_resolved_takes_back_what_resolve_gives_and_nothing_else() {
        let env = EnvSnapshot::take(
            &EnvSource::from_pairs([("PTO2_RING_HEAP", "1048576")]),
            false,
        )
        .unwrap();
        let call = RuntimeEnv::default().with_task_window([64, 0, 0, 0]);
        let sizing = resolve(&call, &env, &RingDefaults::BUILT_IN).unwrap();
        let parts = sizing.values;
        assert_eq!(ResolvedSizing::from_resolved(parts), Ok(sizing));
        let mut illegal = parts;
        illegal[0][2].value = 48; // not a power of two
        assert_eq!(
            ResolvedSizing::from_resolved(illegal),
            Err(NotResolvable::Illegal {
                resource: Resource::TaskWindow,
                ring: 2,
                value: 48
            })
        );
        let mut mixed = parts;
        mixed[1][3] = Resolved {
            value: 1024,
            source: SizeSource::Default,
        };
        assert_eq!(
            ResolvedSizing::from_resolved(mixed),
            Err(NotResolvable::MixedTiers {
                resource: Resource::Heap
            })
        );
        let mut two_defaults = parts;
        two_defaults[2][1].value = 64;
        assert_eq!(
            ResolvedSizing::from_resolved(two_defaults),
            Err(NotResolvable::MixedTiers {
                resource: Resource::DepPool
            })
        );
    }

    const DEF_WINDOW: &str =
        "task_window=[16384(default), 16384(default), 16384(default), 16384(default)]";
    const DEF_HEAP: &str =
        "heap=[268435456(default), 268435456(default), 268435456(default), 268435456(default)]";
    const DEF_DEP: &str =
        "dep_pool=[16384(default), 16384(default), 16384(default), 16384(default)]";

    fn env(pairs: &[(&str, &str)]) -> EnvSnapshot {
        EnvSnapshot::take(&EnvSource::from_pairs(pairs.iter().copied()), false).unwrap()
    }

    fn resolved(call: RuntimeEnv, env: &EnvSnapshot) -> ResolvedSizing {
        resolve(&call, env, &RingDefaults::BUILT_IN).unwrap()
    }

    /// Resolves and compares the rendering `task_window=[v(src), …] heap=[…] dep_pool=[…]`.
    #[track_caller]
    fn check_resolve(call: RuntimeEnv, env: &EnvSnapshot, expect: &[&str]) {
        assert_eq!(resolved(call, env).to_string(), expect.join(" "));
    }

    #[test]
    fn t40_nothing_set_gives_defaults() {
        check_resolve(
            RuntimeEnv::default(),
            &env(&[]),
            &[DEF_WINDOW, DEF_HEAP, DEF_DEP],
        );
    }

    #[test]
    fn t41_env_fills_every_ring() {
        check_resolve(
            RuntimeEnv::default(),
            &env(&[("PTO2_RING_TASK_WINDOW", "64")]),
            &[
                "task_window=[64(env), 64(env), 64(env), 64(env)]",
                DEF_HEAP,
                DEF_DEP,
            ],
        );
    }

    #[test]
    fn t42_call_ring0_env_elsewhere() {
        check_resolve(
            RuntimeEnv::default().with_task_window([128, 0, 0, 0]),
            &env(&[("PTO2_RING_TASK_WINDOW", "64")]),
            &[
                "task_window=[128(call_config), 64(env), 64(env), 64(env)]",
                DEF_HEAP,
                DEF_DEP,
            ],
        );
    }

    #[test]
    fn t43_call_ring3_defaults_elsewhere() {
        check_resolve(
            RuntimeEnv::default().with_task_window([0, 0, 0, 32]),
            &env(&[]),
            &[
                "task_window=[16384(default), 16384(default), 16384(default), 32(call_config)]",
                DEF_HEAP,
                DEF_DEP,
            ],
        );
    }

    #[test]
    fn t44_call_scalar_beats_env_list() {
        check_resolve(
            RuntimeEnv::default().with_heap(1048576),
            &env(&[("PTO2_RING_HEAP", "4194304,4194304,4194304,4194304")]),
            &[
                DEF_WINDOW,
                "heap=[1048576(call_config), 1048576(call_config), 1048576(call_config), 1048576(call_config)]",
                DEF_DEP,
            ],
        );
    }

    #[test]
    fn t45_bad_env_falls_to_default_with_one_warning() {
        let snapshot = env(&[("PTO2_RING_DEP_POOL", "-1")]);
        assert_eq!(snapshot.problems.len(), 1);
        check_resolve(
            RuntimeEnv::default().with_dep_pool([0, 256, 0, 0]),
            &snapshot,
            &[
                DEF_WINDOW,
                DEF_HEAP,
                "dep_pool=[16384(default), 256(call_config), 16384(default), 16384(default)]",
            ],
        );
    }

    #[test]
    fn t46_each_resource_from_its_own_tier() {
        check_resolve(
            RuntimeEnv::default().with_task_window(64),
            &env(&[("PTO2_RING_HEAP", "1048576")]),
            &[
                "task_window=[64(call_config), 64(call_config), 64(call_config), 64(call_config)]",
                "heap=[1048576(env), 1048576(env), 1048576(env), 1048576(env)]",
                DEF_DEP,
            ],
        );
    }

    #[test]
    fn t47_override_equal_to_default_shares_the_key() {
        let explicit = resolved(RuntimeEnv::default().with_task_window(16384), &env(&[]));
        let none = resolved(RuntimeEnv::default(), &env(&[]));
        assert_eq!(explicit.at(Resource::TaskWindow, 0).value, 16384);
        assert_eq!(
            explicit.sources(Resource::TaskWindow),
            [SizeSource::CallConfig; 4]
        );
        assert_eq!(explicit.key(), none.key());
        assert_ne!(explicit, none);
    }

    #[test]
    fn broadcast_and_list_resolve_identically() {
        let a = resolved(RuntimeEnv::default().with_dep_pool(64), &env(&[]));
        let b = resolved(RuntimeEnv::default().with_dep_pool([64; 4]), &env(&[]));
        assert_eq!(a, b);
    }

    #[test]
    fn resolve_rejects_an_invalid_call_tier() {
        let err = resolve(
            &RuntimeEnv::default().with_task_window([0, 48, 0, 0]),
            &env(&[]),
            &RingDefaults::BUILT_IN,
        )
        .unwrap_err();
        assert_eq!(err, ConfigError::TaskWindow { ring: 1, value: 48 });
    }

    #[test]
    fn t49_scope_task_capacity() {
        let cap = |call: RuntimeEnv| resolved(call, &env(&[])).derived().unwrap().scope_task_cap;
        assert_eq!(cap(RuntimeEnv::default()), 65536);
        assert_eq!(cap(RuntimeEnv::default().with_task_window(4)), 16);
        // 32768 per ring is above the documented largest window only in appearance: it is a
        // power of two below 2^30, so it is legal.
        assert_eq!(cap(RuntimeEnv::default().with_task_window(32768)), 131072);
    }

    #[test]
    fn t50_scope_task_capacity_guard() {
        let fits = resolved(
            RuntimeEnv::default().with_task_window([1 << 30, 1 << 29, 1 << 28, 1 << 27]),
            &env(&[]),
        );
        assert_eq!(fits.derived().unwrap().scope_task_cap, 2013265920);
        let config = CallConfig::with_runtime_env(RuntimeEnv::default().with_task_window([
            1 << 30,
            1 << 30,
            4,
            4,
        ]));
        assert_eq!(config.validate(), Ok(()));
        let overflow = resolved(config.runtime_env, &env(&[]));
        assert_eq!(
            overflow.derived(),
            Err(SizingError::ScopeTaskCapOverflow { sum: 2147483656 })
        );
    }

    #[test]
    fn t51_heap_sum_guard() {
        let config = CallConfig::with_runtime_env(RuntimeEnv::default().with_heap(1 << 62));
        assert_eq!(config.validate(), Ok(()));
        let sizing = resolved(config.runtime_env, &env(&[]));
        assert_eq!(sizing.derived(), Err(SizingError::HeapSumOverflow));
    }

    #[test]
    fn t52_heap_total_and_ring_bases() {
        let sizing = resolved(
            RuntimeEnv::default().with_heap([10240, 20480, 30720, 40960]),
            &env(&[]),
        );
        let derived = sizing.derived().unwrap();
        assert_eq!(derived.heap_total, 102400);
        assert_eq!(derived.heap_bases, [0, 10240, 30720, 61440]);
        assert_eq!(derived.live_tasks, [16383; 4]);
        assert_eq!(derived.dep_capacity, [16384; 4]);
    }

    #[test]
    fn t57_cache_key_ignores_sources() {
        let from_call = resolved(
            RuntimeEnv::default()
                .with_task_window(128)
                .with_heap(8 << 20)
                .with_dep_pool(256),
            &env(&[]),
        );
        let from_env = resolved(
            RuntimeEnv::default(),
            &env(&[
                ("PTO2_RING_TASK_WINDOW", "128"),
                ("PTO2_RING_HEAP", "8388608"),
                ("PTO2_RING_DEP_POOL", "256"),
            ]),
        );
        assert_eq!(from_call.key(), from_env.key());
        let other = resolved(
            RuntimeEnv::default()
                .with_task_window(128)
                .with_heap([8 << 20, 8 << 20, 4 << 20, 8 << 20])
                .with_dep_pool(256),
            &env(&[]),
        );
        assert_ne!(from_call.key(), other.key());
    }

    #[test]
    fn compact_form_is_the_tables_cells() {
        let env = env(&[("PTO2_RING_DEP_POOL", "32")]);
        let call = RuntimeEnv::default()
            .with_task_window([64, 32, 16, 16])
            .with_heap([4 << 20, 1 << 20, 1088, 3 << 30]);
        let s = resolved(call, &env);
        assert_eq!(
            s.compact(),
            "task_window=64c,32c,16c,16c heap=4Mc,1Mc,1088c,3Gc dep_pool=32e,32e,32e,32e"
        );
        assert_eq!(value_cell(Resource::Heap, 8 << 10, 't'), "8Kt");
        assert_eq!(value_cell(Resource::DepPool, 16384, 'd'), "16384d");
    }

    #[test]
    fn source_codes_round_trip() {
        for source in [SizeSource::CallConfig, SizeSource::Env, SizeSource::Default] {
            assert_eq!(SizeSource::from_code(source.code()), Some(source));
        }
        assert_eq!(SizeSource::from_code(3), None);
    }

    #[test]
    fn device_memory_message_names_the_knobs() {
        let err = SizingError::DeviceMemoryExhausted {
            chip: 0,
            need: 4622124160,
            image: 325583744,
            deps: 1573120,
            heaps: 4294967296,
            heap_sources: [SizeSource::Env; 4],
            free: 4294967296,
            capacity: 4294967296,
        };
        let text = err.to_string();
        for part in [
            "chip 0",
            "4622124160",
            "runtime_env.ring_heap",
            "PTO2_RING_HEAP",
            "4294967296",
        ] {
            assert!(text.contains(part), "{text:?} lacks {part:?}");
        }
    }
}
