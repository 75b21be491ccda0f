//! `CallConfig`: how one task is run (RING_CONFIG.md §3 and §10).
//!
//! A `CallConfig` travels by value from the submitting level to the chip. Every level that
//! receives one validates it again ([`CallConfig::validate`]); only the chip interprets
//! `runtime_env`.

use super::error::PrefixProblem;
use super::{ConfigError, RING_COUNT, Resource, RuntimeEnv};

/// Most AICPU threads a chip may run: 1 orchestrator and up to 3 schedulers.
pub const PLATFORM_MAX_AICPU_THREADS: u32 = 4;
/// Highest `enable_chip_swimlane` level.
pub const MAX_SWIMLANE_LEVEL: u8 = 4;
/// Longest `output_prefix`, in bytes (it must fit the wire record).
pub const MAX_OUTPUT_PREFIX_BYTES: usize = 1024;

/// The per-task run configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallConfig {
    /// 0 = auto (the chip's `max_aicpu_threads`), else 2..=4.
    pub aicpu_thread_num: u32,
    /// 0 = off; 1..=4 writes a swimlane trace of that detail level.
    pub enable_chip_swimlane: u8,
    /// Dump the task DAG as JSON and Graphviz DOT.
    pub enable_dep_gen: bool,
    /// Write `scope_stats/scope_stats.jsonl`.
    pub enable_scope_stats: bool,
    /// Directory for diagnostics; required when any diagnostic is on.
    pub output_prefix: Option<String>,
    /// Ring sizing; zero entries fall through to the environment, then the defaults.
    pub runtime_env: RuntimeEnv,
    /// Write-after-read for every input of the chip job: a task that writes bytes an earlier
    /// task reads (`InOut`, `OutputExisting`) waits for that reader to finish. Off by default
    /// (the reference system's semantics); a `TrackedInput` is tracked either way.
    pub track_war: bool,
    /// What a chip does about a write-after-read it does not order (CHIP_RUNTIME.md §3.8).
    pub war_check: WarCheck,
}

/// What a chip does when a task writes bytes that an earlier, unfinished task reads and nothing
/// orders the two (write-after-read with `track_war` off and no `TrackedInput`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WarCheck {
    /// [`WarCheck::Report`] in debug builds of the chip (so in tests), [`WarCheck::Off`] in
    /// release builds.
    #[default]
    Auto,
    /// Not checked: readers leave no entries behind.
    Off,
    /// The first such pair of a run is reported once (a warning of the run report), with the
    /// number of pairs found.
    Report,
    /// The first such pair fails the run (WAR_HAZARD).
    Strict,
}

impl WarCheck {
    pub const ALL: [WarCheck; 4] = [
        WarCheck::Auto,
        WarCheck::Off,
        WarCheck::Report,
        WarCheck::Strict,
    ];

    /// The stable wire value.
    pub const fn code(self) -> u8 {
        match self {
            WarCheck::Auto => 0,
            WarCheck::Off => 1,
            WarCheck::Report => 2,
            WarCheck::Strict => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<WarCheck> {
        WarCheck::ALL.get(usize::from(code)).copied()
    }

    /// The name scene files and the command line use.
    pub const fn name(self) -> &'static str {
        match self {
            WarCheck::Auto => "auto",
            WarCheck::Off => "off",
            WarCheck::Report => "report",
            WarCheck::Strict => "strict",
        }
    }

    pub fn from_name(name: &str) -> Option<WarCheck> {
        WarCheck::ALL.into_iter().find(|w| w.name() == name)
    }

    /// `Auto` made concrete for a chip built with or without debug assertions.
    pub const fn resolved(self, debug_build: bool) -> WarCheck {
        match self {
            WarCheck::Auto if debug_build => WarCheck::Report,
            WarCheck::Auto => WarCheck::Off,
            other => other,
        }
    }
}

/// Per-task changes applied on top of a base config by [`CallConfig::derive`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TaskOverrides {
    /// Replaces the thread count when `Some`.
    pub aicpu_thread_num: Option<u32>,
    /// Non-zero entries replace the base's entries; zero entries keep them.
    pub runtime_env: RuntimeEnv,
    /// Replaces `track_war` when `Some`.
    pub track_war: Option<bool>,
}

impl CallConfig {
    /// A config with only ring sizing set.
    pub fn with_runtime_env(runtime_env: RuntimeEnv) -> CallConfig {
        CallConfig {
            runtime_env,
            ..CallConfig::default()
        }
    }

    /// Names of the diagnostics that are on, in field order.
    pub fn enabled_diagnostics(&self) -> Vec<&'static str> {
        let mut enabled = Vec::new();
        if self.enable_chip_swimlane > 0 {
            enabled.push("enable_chip_swimlane");
        }
        if self.enable_dep_gen {
            enabled.push("enable_dep_gen");
        }
        if self.enable_scope_stats {
            enabled.push("enable_scope_stats");
        }
        enabled
    }

    /// True when any diagnostic is on.
    pub fn diagnostics_enabled(&self) -> bool {
        self.enable_chip_swimlane > 0 || self.enable_dep_gen || self.enable_scope_stats
    }

    /// Checks every rule and returns the first violation in the documented order: thread
    /// count, swimlane level, output prefix, diagnostics-need-prefix, then `runtime_env` ring
    /// by ring (window, heap, dep pool within a ring).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let threads = self.aicpu_thread_num;
        if threads == 1 || threads > PLATFORM_MAX_AICPU_THREADS {
            return Err(ConfigError::AicpuThreadNum {
                value: threads,
                max: PLATFORM_MAX_AICPU_THREADS,
            });
        }
        if self.enable_chip_swimlane > MAX_SWIMLANE_LEVEL {
            return Err(ConfigError::SwimlaneLevel {
                value: self.enable_chip_swimlane,
            });
        }
        if let Some(prefix) = &self.output_prefix {
            validate_output_prefix(prefix)?;
        }
        if self.output_prefix.is_none() && self.diagnostics_enabled() {
            return Err(ConfigError::MissingOutputPrefix {
                enabled: self.enabled_diagnostics(),
            });
        }
        validate_runtime_env(&self.runtime_env)
    }

    /// A copy of `self` with `overrides` applied, validated. Diagnostics settings and
    /// `output_prefix` are always kept, so per-task configs never lose them.
    pub fn derive(&self, overrides: &TaskOverrides) -> Result<CallConfig, ConfigError> {
        let mut out = self.clone();
        if let Some(threads) = overrides.aicpu_thread_num {
            out.aicpu_thread_num = threads;
        }
        out.runtime_env = self.runtime_env.overlaid_with(&overrides.runtime_env);
        if let Some(track) = overrides.track_war {
            out.track_war = track;
        }
        out.validate()?;
        Ok(out)
    }
}

/// Checks a present output prefix: length, then NUL, then emptiness.
pub(crate) fn validate_output_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.len() > MAX_OUTPUT_PREFIX_BYTES {
        return Err(ConfigError::OutputPrefixTooLong { len: prefix.len() });
    }
    if prefix.contains('\0') {
        return Err(ConfigError::OutputPrefixInvalid {
            reason: PrefixProblem::ContainsNul,
        });
    }
    if prefix.is_empty() {
        return Err(ConfigError::OutputPrefixInvalid {
            reason: PrefixProblem::Empty,
        });
    }
    Ok(())
}

/// Checks every non-zero entry, ring 0 first and, within a ring, window, heap, dep pool.
pub(crate) fn validate_runtime_env(env: &RuntimeEnv) -> Result<(), ConfigError> {
    for ring in 0..RING_COUNT {
        for resource in Resource::ALL {
            let value = env.get(resource)[ring];
            if value != 0 && resource.check(value).is_err() {
                return Err(ConfigError::ring_value(resource, ring, value));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring_config::RingValue;

    fn with_env(env: RuntimeEnv) -> CallConfig {
        CallConfig::with_runtime_env(env)
    }

    #[track_caller]
    fn check_err(config: &CallConfig, expected: ConfigError, text: &str) {
        let err = config.validate().unwrap_err();
        assert_eq!(err, expected);
        let shown = err.to_string();
        assert!(shown.contains(text), "{shown:?} does not contain {text:?}");
    }

    #[test]
    fn t1_default_is_valid_and_unset() {
        let config = CallConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert!(config.runtime_env.is_unset());
        for resource in Resource::ALL {
            assert_eq!(config.runtime_env.get(resource), [0; 4]);
        }
    }

    #[test]
    fn t2_t4_broadcast_and_list_validate() {
        assert_eq!(
            with_env(RuntimeEnv::default().with_task_window(64)).validate(),
            Ok(())
        );
        let list = RingValue::from_slice(Resource::TaskWindow, &[16, 32, 128, 256]).unwrap();
        assert_eq!(
            with_env(RuntimeEnv::default().with_task_window(list)).validate(),
            Ok(())
        );
    }

    #[test]
    fn t6_window_below_minimum() {
        let config = with_env(RuntimeEnv::default().with_task_window(3));
        check_err(
            &config,
            ConfigError::TaskWindow { ring: 0, value: 3 },
            "runtime_env.ring_task_window[0]=3: must be a power of two between 4 and 1073741824",
        );
    }

    #[test]
    fn t7_window_not_a_power_of_two() {
        let config = with_env(RuntimeEnv::default().with_task_window(48));
        check_err(
            &config,
            ConfigError::TaskWindow { ring: 0, value: 48 },
            "runtime_env.ring_task_window[0]=48: must be a power of two",
        );
    }

    #[test]
    fn t8_window_upper_bound() {
        assert_eq!(
            with_env(RuntimeEnv::default().with_task_window(1 << 30)).validate(),
            Ok(())
        );
        let config = with_env(RuntimeEnv::default().with_task_window(1 << 31));
        check_err(
            &config,
            ConfigError::TaskWindow {
                ring: 0,
                value: 2147483648,
            },
            "=2147483648:",
        );
    }

    #[test]
    fn t9_window_error_names_its_ring() {
        let config = with_env(RuntimeEnv::default().with_task_window([16, 32, 48, 64]));
        check_err(
            &config,
            ConfigError::TaskWindow { ring: 2, value: 48 },
            "runtime_env.ring_task_window[2]=48: must be a power of two between 4 and 1073741824",
        );
    }

    #[test]
    fn t10_heap_minimum_and_grain() {
        assert_eq!(
            with_env(RuntimeEnv::default().with_heap(1024)).validate(),
            Ok(())
        );
        check_err(
            &with_env(RuntimeEnv::default().with_heap(1023)),
            ConfigError::Heap {
                ring: 0,
                value: 1023,
            },
            "(use at least 1024)",
        );
        check_err(
            &with_env(RuntimeEnv::default().with_heap(1030)),
            ConfigError::Heap {
                ring: 0,
                value: 1030,
            },
            "runtime_env.ring_heap[0]=1030: must be at least 1024 bytes and a multiple of 64 (nearest valid: 1024, 1088)",
        );
        assert_eq!(
            with_env(RuntimeEnv::default().with_heap(1088)).validate(),
            Ok(())
        );
    }

    #[test]
    fn heap_hint_near_the_top_of_u64() {
        let value = u64::MAX - 1;
        let err = with_env(RuntimeEnv::default().with_heap(value))
            .validate()
            .unwrap_err();
        let below = value - value % 64;
        assert!(
            err.to_string()
                .ends_with(&format!("(nearest valid: {below})"))
        );
    }

    #[test]
    fn t11_heap_has_no_power_of_two_rule() {
        assert_eq!(
            with_env(RuntimeEnv::default().with_heap(2621440)).validate(),
            Ok(())
        );
        let list = RuntimeEnv::default().with_heap([10240, 20480, 30720, 40960]);
        assert_eq!(with_env(list).validate(), Ok(()));
    }

    #[test]
    fn t12_dep_pool_range() {
        check_err(
            &with_env(RuntimeEnv::default().with_dep_pool(3)),
            ConfigError::DepPool { ring: 0, value: 3 },
            "runtime_env.ring_dep_pool[0]=3: must be between 4 and 2147483647",
        );
        for ok in [4u64, 100, 2147483647] {
            assert_eq!(
                with_env(RuntimeEnv::default().with_dep_pool(ok)).validate(),
                Ok(())
            );
        }
        check_err(
            &with_env(RuntimeEnv::default().with_dep_pool(2147483648)),
            ConfigError::DepPool {
                ring: 0,
                value: 2147483648,
            },
            "=2147483648: must be between 4 and 2147483647",
        );
    }

    #[test]
    fn t13_ring_zero_is_checked_before_ring_one() {
        let env = RuntimeEnv::default()
            .with_task_window([0, 48, 0, 0])
            .with_heap([512, 0, 0, 0]);
        check_err(
            &with_env(env),
            ConfigError::Heap {
                ring: 0,
                value: 512,
            },
            "ring_heap[0]=512",
        );
    }

    #[test]
    fn t14_diagnostics_need_a_prefix() {
        let mut config = CallConfig {
            enable_scope_stats: true,
            ..CallConfig::default()
        };
        check_err(
            &config,
            ConfigError::MissingOutputPrefix {
                enabled: vec!["enable_scope_stats"],
            },
            "output_prefix is required when diagnostics are enabled (enable_scope_stats)",
        );
        config.output_prefix = Some("out".into());
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn t15_swimlane_level_range() {
        let config = CallConfig {
            enable_chip_swimlane: 5,
            ..CallConfig::default()
        };
        check_err(
            &config,
            ConfigError::SwimlaneLevel { value: 5 },
            "enable_chip_swimlane=5: must be between 0 and 4",
        );
        let config = CallConfig {
            enable_chip_swimlane: 4,
            output_prefix: Some("out".into()),
            ..CallConfig::default()
        };
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn t16_aicpu_thread_num() {
        let results: Vec<bool> = [0u32, 1, 2, 4, 5]
            .iter()
            .map(|&n| {
                CallConfig {
                    aicpu_thread_num: n,
                    ..CallConfig::default()
                }
                .validate()
                .is_ok()
            })
            .collect();
        assert_eq!(results, [true, false, true, true, false]);
        let err = CallConfig {
            aicpu_thread_num: 5,
            ..CallConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(err, ConfigError::AicpuThreadNum { value: 5, max: 4 });
        let err = CallConfig {
            aicpu_thread_num: 1,
            ..CallConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("aicpu_thread_num=1: must be 0 (auto) or between 2 and 4")
        );
    }

    #[test]
    fn t17_output_prefix_rules() {
        let with_prefix = |p: String| CallConfig {
            output_prefix: Some(p),
            ..CallConfig::default()
        };
        assert_eq!(with_prefix("a".repeat(1024)).validate(), Ok(()));
        check_err(
            &with_prefix("a".repeat(1025)),
            ConfigError::OutputPrefixTooLong { len: 1025 },
            "output_prefix is 1025 bytes; the limit is 1024",
        );
        check_err(
            &with_prefix("a\0b".into()),
            ConfigError::OutputPrefixInvalid {
                reason: PrefixProblem::ContainsNul,
            },
            "output_prefix contains a NUL byte",
        );
        check_err(
            &with_prefix(String::new()),
            ConfigError::OutputPrefixInvalid {
                reason: PrefixProblem::Empty,
            },
            "output_prefix is empty; use None",
        );
    }

    #[test]
    fn error_accessors_name_field_ring_and_value() {
        let err = ConfigError::TaskWindow { ring: 2, value: 48 };
        assert_eq!(err.field(), "runtime_env.ring_task_window");
        assert_eq!(err.ring(), Some(2));
        assert_eq!(err.value(), Some(48));
        let err = ConfigError::OutputPrefixInvalid {
            reason: PrefixProblem::Empty,
        };
        assert_eq!(err.field(), "output_prefix");
        assert_eq!(err.ring(), None);
    }

    #[test]
    fn t72_derive_keeps_diagnostics() {
        let base = CallConfig {
            enable_scope_stats: true,
            output_prefix: Some("out/c1".into()),
            runtime_env: RuntimeEnv::default().with_task_window(64),
            ..CallConfig::default()
        };
        let derived = base
            .derive(&TaskOverrides {
                runtime_env: RuntimeEnv::default().with_task_window(16),
                ..TaskOverrides::default()
            })
            .unwrap();
        assert!(derived.enable_scope_stats);
        assert_eq!(derived.output_prefix.as_deref(), Some("out/c1"));
        assert_eq!(derived.runtime_env.ring_task_window, [16; 4]);
        assert_eq!(base.derive(&TaskOverrides::default()).unwrap(), base);
    }

    #[test]
    fn t73_derive_replaces_only_non_zero_entries() {
        let base = with_env(
            RuntimeEnv::default()
                .with_task_window(64)
                .with_heap(8 << 20),
        );
        let derived = base
            .derive(&TaskOverrides {
                runtime_env: RuntimeEnv::default().with_task_window([0, 0, 0, 16]),
                ..TaskOverrides::default()
            })
            .unwrap();
        assert_eq!(derived.runtime_env.ring_task_window, [64, 64, 64, 16]);
        assert_eq!(derived.runtime_env.ring_heap, [8388608; 4]);
    }

    #[test]
    fn derive_validates_and_overrides_thread_count() {
        let base = CallConfig::default();
        let derived = base
            .derive(&TaskOverrides {
                aicpu_thread_num: Some(2),
                ..TaskOverrides::default()
            })
            .unwrap();
        assert_eq!(derived.aicpu_thread_num, 2);
        let err = base
            .derive(&TaskOverrides {
                runtime_env: RuntimeEnv::default().with_task_window(48),
                ..TaskOverrides::default()
            })
            .unwrap_err();
        assert_eq!(err, ConfigError::TaskWindow { ring: 0, value: 48 });
    }
}
