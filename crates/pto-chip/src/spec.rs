//! Chip properties: [`ChipSpec`] and its resolved form [`EffectiveChipSpec`].
//!
//! Implements CHIP_RUNTIME.md §1.1 (the property table and `ChipSpec::default()`) and the
//! precedence rule of RING_CONFIG.md §4.1: a field set explicitly in the `ChipSpec` wins over the
//! chip's environment snapshot ([`ChipEnv`]), which wins over the default. The fields the
//! environment may set are `Option`s, so "explicitly set" is visible in the type; `None` means
//! "take the environment, then the default".

use std::fmt;
use std::time::Duration;

use pto_types::RuntimeEnv;
use pto_types::ring_config::env::{ChipEnv, ChipVar};
use pto_types::ring_config::{ConfigError, PLATFORM_MAX_AICPU_THREADS};

/// Default number of clusters (1 AIC + 2 AIV each).
pub const DEFAULT_CLUSTERS: u32 = 8;
/// Largest number of clusters a chip may have.
pub const MAX_CLUSTERS: u32 = 64;
/// Default device memory capacity: 16 GiB.
pub const DEFAULT_DEVICE_MEMORY_BYTES: u64 = 16 << 30;
/// Smallest legal `max_aicpu_threads` (one orchestrator and one scheduler).
pub const MIN_AICPU_THREADS: u32 = 2;
/// Default TensorMap entry pool (`PTO_TENSORMAP_POOL`).
pub const DEFAULT_TENSORMAP_POOL: u32 = 65536;
/// Default TensorMap bucket count (a power of two).
pub const DEFAULT_TENSORMAP_BUCKETS: u32 = 4096;
/// Default no-progress watchdog (`PTO_SCHEDULER_TIMEOUT_MS`).
pub const DEFAULT_SCHEDULER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `get/set_tensor_data` wait limit (`PTO_TENSOR_DATA_TIMEOUT_MS`).
pub const DEFAULT_TENSOR_WAIT_TIMEOUT: Duration = Duration::from_secs(15);
/// Default quiescence backstop for ring waits (CHIP_RUNTIME.md §5.2).
pub const DEFAULT_ALLOC_BACKSTOP: Duration = Duration::from_millis(500);
/// Default spin budget before a waiting thread parks (`PTO_SPIN_US`): the wait primitive's own
/// default, defined once in `pto_types::wait`.
pub use pto_types::wait::DEFAULT_SPIN;
/// Default number of cached arenas per chip (RING_CONFIG.md §7.3).
pub const DEFAULT_ARENA_CACHE_ENTRIES: u32 = 4;

/// The properties of one simulated chip, fixed when the chip is created (CHIP_RUNTIME.md §1.1).
///
/// Fields of type `Option` may also be set by the chip's environment; `None` leaves them to the
/// environment and then to the default, `Some` wins over the environment. Resolve with
/// [`ChipSpec::effective`] after [`ChipSpec::validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChipSpec {
    /// Clusters of 1 AIC + 2 AIV, giving `3 × clusters` simulated cores; 1..=64.
    pub clusters: u32,
    /// Capacity for run arenas and device allocations (RING_CONFIG.md §7.2); > 0.
    pub device_memory_bytes: u64,
    /// AICPU threads created with the chip; `2..=PLATFORM_MAX_AICPU_THREADS` (4).
    pub max_aicpu_threads: u32,
    /// TensorMap entries; `None` → `PTO_TENSORMAP_POOL` → 65536. Explicit values must be ≥ 1.
    pub tensormap_pool: Option<u32>,
    /// TensorMap buckets; a power of two.
    pub tensormap_buckets: u32,
    /// No-progress watchdog (error code 100); `None` → `PTO_SCHEDULER_TIMEOUT_MS` → 10 s.
    /// Explicit values must be non-zero.
    pub scheduler_timeout: Option<Duration>,
    /// `get/set_tensor_data` wait limit (error code 8); `None` →
    /// `PTO_TENSOR_DATA_TIMEOUT_MS` → 15 s. Explicit values must be non-zero.
    pub tensor_wait_timeout: Option<Duration>,
    /// Quiescence backstop for ring waits (CHIP_RUNTIME.md §5.2); non-zero.
    pub alloc_backstop: Duration,
    /// Spin budget before a waiting thread parks; `None` → `PTO_SPIN_US` → 50 µs.
    /// `Some(Duration::ZERO)` parks at once.
    pub spin: Option<Duration>,
    /// Cached arenas per chip (RING_CONFIG.md §7.3); ≥ 1.
    pub arena_cache_entries: u32,
    /// Environment problems fail chip start-up (RING_CONFIG.md §4.3). Pass it to
    /// `EnvSnapshot::take`; `PTO2_RING_STRICT` can also turn strict mode on.
    pub strict_env: bool,
    /// A sizing whose arena is to be built at start-up (RING_CONFIG.md §7.3). Validated and
    /// carried to chip children, but no arena is built from it yet.
    pub prewarm: Option<RuntimeEnv>,
}

impl Default for ChipSpec {
    fn default() -> ChipSpec {
        ChipSpec {
            clusters: DEFAULT_CLUSTERS,
            device_memory_bytes: DEFAULT_DEVICE_MEMORY_BYTES,
            max_aicpu_threads: PLATFORM_MAX_AICPU_THREADS,
            tensormap_pool: None,
            tensormap_buckets: DEFAULT_TENSORMAP_BUCKETS,
            scheduler_timeout: None,
            tensor_wait_timeout: None,
            alloc_backstop: DEFAULT_ALLOC_BACKSTOP,
            spin: None,
            arena_cache_entries: DEFAULT_ARENA_CACHE_ENTRIES,
            strict_env: false,
            prewarm: None,
        }
    }
}

/// A [`ChipSpec`] field with an illegal value. `Display` names the field, the value and the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChipSpecError {
    /// `clusters` outside `1..=MAX_CLUSTERS`.
    Clusters { value: u32 },
    /// `device_memory_bytes` is 0.
    DeviceMemory { value: u64 },
    /// `max_aicpu_threads` outside `2..=PLATFORM_MAX_AICPU_THREADS`.
    MaxAicpuThreads { value: u32 },
    /// `tensormap_pool` is `Some(0)`.
    TensormapPool { value: u32 },
    /// `tensormap_buckets` is not a power of two.
    TensormapBuckets { value: u32 },
    /// A duration field that must be positive is zero.
    ZeroDuration { field: &'static str },
    /// `arena_cache_entries` is 0.
    ArenaCacheEntries { value: u32 },
    /// `prewarm` does not pass `RuntimeEnv::validate`.
    Prewarm(ConfigError),
}

impl ChipSpecError {
    /// The name of the offending `ChipSpec` field.
    pub fn field(&self) -> &'static str {
        match self {
            ChipSpecError::Clusters { .. } => "clusters",
            ChipSpecError::DeviceMemory { .. } => "device_memory_bytes",
            ChipSpecError::MaxAicpuThreads { .. } => "max_aicpu_threads",
            ChipSpecError::TensormapPool { .. } => "tensormap_pool",
            ChipSpecError::TensormapBuckets { .. } => "tensormap_buckets",
            ChipSpecError::ZeroDuration { field } => field,
            ChipSpecError::ArenaCacheEntries { .. } => "arena_cache_entries",
            ChipSpecError::Prewarm(_) => "prewarm",
        }
    }
}

impl fmt::Display for ChipSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = self.field();
        match self {
            ChipSpecError::Clusters { value } => {
                write!(
                    f,
                    "ChipSpec.{field} = {value} is outside 1..={MAX_CLUSTERS}"
                )
            }
            ChipSpecError::DeviceMemory { value } => {
                write!(f, "ChipSpec.{field} = {value}: device memory must be > 0")
            }
            ChipSpecError::MaxAicpuThreads { value } => write!(
                f,
                "ChipSpec.{field} = {value} is outside {MIN_AICPU_THREADS}..={PLATFORM_MAX_AICPU_THREADS} \
                 (one orchestrator and at least one scheduler)"
            ),
            ChipSpecError::TensormapPool { value } => {
                write!(
                    f,
                    "ChipSpec.{field} = Some({value}): the pool needs at least 1 entry"
                )
            }
            ChipSpecError::TensormapBuckets { value } => {
                write!(f, "ChipSpec.{field} = {value} is not a power of two")
            }
            ChipSpecError::ZeroDuration { .. } => {
                write!(f, "ChipSpec.{field} is zero: it must be positive")
            }
            ChipSpecError::ArenaCacheEntries { value } => {
                write!(
                    f,
                    "ChipSpec.{field} = {value}: the arena cache needs at least 1 entry"
                )
            }
            ChipSpecError::Prewarm(error) => write!(f, "ChipSpec.{field} is invalid: {error}"),
        }
    }
}

impl std::error::Error for ChipSpecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ChipSpecError::Prewarm(error) => Some(error),
            _ => None,
        }
    }
}

impl ChipSpec {
    /// Checks every explicit field; the first illegal one is returned.
    ///
    /// Values from the environment are legal by construction (RING_CONFIG.md §4.2), so only
    /// this type's own fields are checked.
    pub fn validate(&self) -> Result<(), ChipSpecError> {
        if !(1..=MAX_CLUSTERS).contains(&self.clusters) {
            return Err(ChipSpecError::Clusters {
                value: self.clusters,
            });
        }
        if self.device_memory_bytes == 0 {
            return Err(ChipSpecError::DeviceMemory {
                value: self.device_memory_bytes,
            });
        }
        if !(MIN_AICPU_THREADS..=PLATFORM_MAX_AICPU_THREADS).contains(&self.max_aicpu_threads) {
            return Err(ChipSpecError::MaxAicpuThreads {
                value: self.max_aicpu_threads,
            });
        }
        if self.tensormap_pool == Some(0) {
            return Err(ChipSpecError::TensormapPool { value: 0 });
        }
        if !self.tensormap_buckets.is_power_of_two() {
            return Err(ChipSpecError::TensormapBuckets {
                value: self.tensormap_buckets,
            });
        }
        for (field, value) in [
            ("scheduler_timeout", self.scheduler_timeout),
            ("tensor_wait_timeout", self.tensor_wait_timeout),
            ("alloc_backstop", Some(self.alloc_backstop)),
        ] {
            if value == Some(Duration::ZERO) {
                return Err(ChipSpecError::ZeroDuration { field });
            }
        }
        if self.arena_cache_entries == 0 {
            return Err(ChipSpecError::ArenaCacheEntries {
                value: self.arena_cache_entries,
            });
        }
        if let Some(prewarm) = &self.prewarm {
            prewarm.validate().map_err(ChipSpecError::Prewarm)?;
        }
        Ok(())
    }

    /// Number of simulated cores: `3 × clusters`.
    pub fn cores(&self) -> u32 {
        3 * self.clusters
    }

    /// Every property resolved: explicit field > `env` > default (RING_CONFIG.md §4.1).
    ///
    /// `PTO_TENSORMAP_POOL` is an entry count (saturated to `u32::MAX`), `PTO_SCHEDULER_TIMEOUT_MS`
    /// and `PTO_TENSOR_DATA_TIMEOUT_MS` are milliseconds, `PTO_SPIN_US` is microseconds.
    /// Call [`ChipSpec::validate`] first; this function does not check.
    pub fn effective(&self, env: &ChipEnv) -> EffectiveChipSpec {
        let from_env = |var: ChipVar| env.get(var);
        EffectiveChipSpec {
            clusters: self.clusters,
            device_memory_bytes: self.device_memory_bytes,
            max_aicpu_threads: self.max_aicpu_threads,
            tensormap_pool: self.tensormap_pool.unwrap_or_else(|| {
                from_env(ChipVar::TensormapPool).map_or(DEFAULT_TENSORMAP_POOL, |v| {
                    u32::try_from(v).unwrap_or(u32::MAX)
                })
            }),
            tensormap_buckets: self.tensormap_buckets,
            scheduler_timeout: self.scheduler_timeout.unwrap_or_else(|| {
                from_env(ChipVar::SchedulerTimeoutMs)
                    .map_or(DEFAULT_SCHEDULER_TIMEOUT, Duration::from_millis)
            }),
            tensor_wait_timeout: self.tensor_wait_timeout.unwrap_or_else(|| {
                from_env(ChipVar::TensorDataTimeoutMs)
                    .map_or(DEFAULT_TENSOR_WAIT_TIMEOUT, Duration::from_millis)
            }),
            alloc_backstop: self.alloc_backstop,
            spin: self.spin.unwrap_or_else(|| {
                from_env(ChipVar::SpinUs).map_or(DEFAULT_SPIN, Duration::from_micros)
            }),
            arena_cache_entries: self.arena_cache_entries,
            strict_env: self.strict_env,
            prewarm: self.prewarm,
        }
    }
}

/// A [`ChipSpec`] with every tiered value resolved (explicit field > environment > default).
///
/// No field is optional except `prewarm`, which is "no prewarm" rather than a tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectiveChipSpec {
    /// Clusters of 1 AIC + 2 AIV.
    pub clusters: u32,
    /// Device memory capacity in bytes.
    pub device_memory_bytes: u64,
    /// AICPU threads created with the chip.
    pub max_aicpu_threads: u32,
    /// TensorMap entries.
    pub tensormap_pool: u32,
    /// TensorMap buckets (a power of two).
    pub tensormap_buckets: u32,
    /// No-progress watchdog.
    pub scheduler_timeout: Duration,
    /// `get/set_tensor_data` wait limit.
    pub tensor_wait_timeout: Duration,
    /// Quiescence backstop for ring waits.
    pub alloc_backstop: Duration,
    /// Spin budget before parking.
    pub spin: Duration,
    /// Cached arenas per chip.
    pub arena_cache_entries: u32,
    /// `ChipSpec.strict_env` as given (the snapshot's `strict` also counts `PTO2_RING_STRICT`).
    pub strict_env: bool,
    /// The sizing to prewarm at start-up, if any (not acted on yet; see `ChipSpec::prewarm`).
    pub prewarm: Option<RuntimeEnv>,
}

impl EffectiveChipSpec {
    /// Number of simulated cores: `3 × clusters`.
    pub fn cores(&self) -> u32 {
        3 * self.clusters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pto_types::ring_config::env::{EnvSnapshot, EnvSource};

    fn chip_env(pairs: &[(&str, &str)]) -> ChipEnv {
        EnvSnapshot::take(&EnvSource::from_pairs(pairs.iter().copied()), false)
            .unwrap()
            .chip
    }

    #[test]
    fn spec_defaults_match_the_table() {
        let spec = ChipSpec::default();
        assert_eq!(spec.validate(), Ok(()));
        assert_eq!(spec.cores(), 24);
        let eff = spec.effective(&ChipEnv::default());
        assert_eq!(
            eff,
            EffectiveChipSpec {
                clusters: 8,
                device_memory_bytes: 17179869184,
                max_aicpu_threads: 4,
                tensormap_pool: 65536,
                tensormap_buckets: 4096,
                scheduler_timeout: Duration::from_secs(10),
                tensor_wait_timeout: Duration::from_secs(15),
                alloc_backstop: Duration::from_millis(500),
                spin: Duration::from_micros(50),
                arena_cache_entries: 4,
                strict_env: false,
                prewarm: None,
            }
        );
    }

    #[test]
    fn spec_env_fills_unset_fields_in_its_units() {
        let env = chip_env(&[
            ("PTO_TENSORMAP_POOL", "1024"),
            ("PTO_SCHEDULER_TIMEOUT_MS", "250"),
            ("PTO_TENSOR_DATA_TIMEOUT_MS", "7000"),
            ("PTO_SPIN_US", "3"),
        ]);
        let eff = ChipSpec::default().effective(&env);
        assert_eq!(eff.tensormap_pool, 1024);
        assert_eq!(eff.scheduler_timeout, Duration::from_millis(250));
        assert_eq!(eff.tensor_wait_timeout, Duration::from_secs(7));
        assert_eq!(eff.spin, Duration::from_micros(3));
    }

    #[test]
    fn spec_explicit_field_beats_env() {
        let env = chip_env(&[
            ("PTO_TENSORMAP_POOL", "1024"),
            ("PTO_SCHEDULER_TIMEOUT_MS", "250"),
            ("PTO_TENSOR_DATA_TIMEOUT_MS", "7000"),
            ("PTO_SPIN_US", "3"),
        ]);
        let spec = ChipSpec {
            tensormap_pool: Some(65536),
            scheduler_timeout: Some(Duration::from_secs(2)),
            tensor_wait_timeout: Some(Duration::from_secs(15)),
            spin: Some(Duration::ZERO),
            ..ChipSpec::default()
        };
        assert_eq!(spec.validate(), Ok(()));
        let eff = spec.effective(&env);
        // An explicit value equal to the default still wins over the environment.
        assert_eq!(eff.tensormap_pool, 65536);
        assert_eq!(eff.scheduler_timeout, Duration::from_secs(2));
        assert_eq!(eff.tensor_wait_timeout, Duration::from_secs(15));
        assert_eq!(eff.spin, Duration::ZERO);
    }

    #[test]
    fn spec_bad_env_value_falls_back_to_the_default() {
        let env = chip_env(&[("PTO_SPIN_US", "0"), ("PTO_TENSORMAP_POOL", "99999999999")]);
        let eff = ChipSpec::default().effective(&env);
        assert_eq!(eff.spin, DEFAULT_SPIN);
        assert_eq!(eff.tensormap_pool, u32::MAX);
    }

    #[track_caller]
    fn rejects(spec: ChipSpec, field: &str, text: &str) {
        let err = spec.validate().unwrap_err();
        assert_eq!(err.field(), field);
        let shown = err.to_string();
        assert!(shown.contains(field), "{shown:?} lacks {field:?}");
        assert!(shown.contains(text), "{shown:?} lacks {text:?}");
    }

    #[test]
    fn spec_validation_names_field_and_value() {
        let d = ChipSpec::default;
        rejects(ChipSpec { clusters: 0, ..d() }, "clusters", "= 0");
        rejects(
            ChipSpec {
                clusters: 65,
                ..d()
            },
            "clusters",
            "= 65",
        );
        assert_eq!(
            ChipSpec {
                clusters: 64,
                ..d()
            }
            .validate(),
            Ok(())
        );
        assert_eq!(ChipSpec { clusters: 1, ..d() }.validate(), Ok(()));
        let threads = |v| ChipSpec {
            max_aicpu_threads: v,
            ..d()
        };
        rejects(threads(1), "max_aicpu_threads", "= 1");
        rejects(threads(5), "max_aicpu_threads", "= 5");
        assert_eq!(threads(2).validate(), Ok(()));
        assert_eq!(threads(3).validate(), Ok(()));
        let buckets = |v| ChipSpec {
            tensormap_buckets: v,
            ..d()
        };
        rejects(buckets(0), "tensormap_buckets", "= 0");
        rejects(buckets(3000), "tensormap_buckets", "= 3000");
        assert_eq!(buckets(1).validate(), Ok(()));
        rejects(
            ChipSpec {
                device_memory_bytes: 0,
                ..d()
            },
            "device_memory_bytes",
            "= 0",
        );
        rejects(
            ChipSpec {
                arena_cache_entries: 0,
                ..d()
            },
            "arena_cache_entries",
            "= 0",
        );
        rejects(
            ChipSpec {
                tensormap_pool: Some(0),
                ..d()
            },
            "tensormap_pool",
            "Some(0)",
        );
        rejects(
            ChipSpec {
                scheduler_timeout: Some(Duration::ZERO),
                ..d()
            },
            "scheduler_timeout",
            "zero",
        );
        rejects(
            ChipSpec {
                alloc_backstop: Duration::ZERO,
                ..d()
            },
            "alloc_backstop",
            "zero",
        );
        rejects(
            ChipSpec {
                prewarm: Some(RuntimeEnv::default().with_task_window(48)),
                ..d()
            },
            "prewarm",
            "invalid",
        );
        assert_eq!(
            ChipSpec {
                prewarm: Some(RuntimeEnv::default().with_task_window(64)),
                ..d()
            }
            .validate(),
            Ok(())
        );
    }
}
