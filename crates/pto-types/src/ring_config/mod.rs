//! Per-task ring configuration: the contract of `RING_CONFIG.md`.
//!
//! An L2 chip run binds three [`Resource`]s on each of [`RING_COUNT`] scope-depth rings. The
//! values come from the task's [`CallConfig::runtime_env`], then the chip's environment snapshot
//! ([`mod@env`]), then the built-in defaults; [`mod@resolve`] applies that precedence and records where
//! every value came from.
//!
//! The rules for legal values live in one table, [`Resource`], used by validation
//! ([`CallConfig::validate`]), by the environment parser and by every hint that suggests a value,
//! so a message can never describe a rule that the checker does not apply.

mod call_config;
pub mod env;
mod error;
pub mod resolve;
mod runtime_env;

pub use call_config::{
    CallConfig, MAX_OUTPUT_PREFIX_BYTES, MAX_SWIMLANE_LEVEL, PLATFORM_MAX_AICPU_THREADS,
    TaskOverrides, WarCheck,
};
pub use error::ConfigError;
pub use runtime_env::{RingValue, RuntimeEnv};

use std::fmt;

/// Number of scope-depth rings. A task submitted at scope depth `d` uses ring `min(d, 3)`.
pub const RING_COUNT: usize = 4;

/// The ring used by a task submitted at scope depth `depth` (depth 0 is the implicit root scope).
pub const fn ring_for_depth(depth: usize) -> usize {
    if depth < RING_COUNT {
        depth
    } else {
        RING_COUNT - 1
    }
}

/// One of the three per-ring resources, and the single table of its rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    TaskWindow,
    Heap,
    DepPool,
}

/// Why a value breaks a [`Resource`] rule. Shared by validation and environment parsing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleViolation {
    OutOfRange { min: u64, max: u64 },
    NotPowerOfTwo,
    NotMultipleOf64,
}

impl Resource {
    /// The three resources in the fixed order used by validation, reports and wire records.
    pub const ALL: [Resource; 3] = [Resource::TaskWindow, Resource::Heap, Resource::DepPool];

    /// The `RuntimeEnv` field name, e.g. `ring_task_window`.
    pub const fn field(self) -> &'static str {
        match self {
            Resource::TaskWindow => "ring_task_window",
            Resource::Heap => "ring_heap",
            Resource::DepPool => "ring_dep_pool",
        }
    }

    /// The `CallConfig` path of the field, e.g. `runtime_env.ring_heap`.
    pub const fn config_path(self) -> &'static str {
        match self {
            Resource::TaskWindow => "runtime_env.ring_task_window",
            Resource::Heap => "runtime_env.ring_heap",
            Resource::DepPool => "runtime_env.ring_dep_pool",
        }
    }

    /// The environment variable of the environment tier.
    pub const fn env_var(self) -> &'static str {
        match self {
            Resource::TaskWindow => "PTO2_RING_TASK_WINDOW",
            Resource::Heap => "PTO2_RING_HEAP",
            Resource::DepPool => "PTO2_RING_DEP_POOL",
        }
    }

    /// The unit of a value, for messages.
    pub const fn unit(self) -> &'static str {
        match self {
            Resource::TaskWindow => "slots",
            Resource::Heap => "bytes",
            Resource::DepPool => "entries",
        }
    }

    /// The short name used in reports (`task_window`, `heap`, `dep_pool`).
    pub const fn short_name(self) -> &'static str {
        match self {
            Resource::TaskWindow => "task_window",
            Resource::Heap => "heap",
            Resource::DepPool => "dep_pool",
        }
    }

    /// Built-in default for every ring.
    pub const fn default_value(self) -> u64 {
        match self {
            Resource::TaskWindow => 16384,
            Resource::Heap => 256 << 20,
            Resource::DepPool => 16384,
        }
    }

    /// Smallest legal value.
    pub const fn min(self) -> u64 {
        match self {
            Resource::TaskWindow => 4,
            Resource::Heap => 1024,
            Resource::DepPool => 4,
        }
    }

    /// Largest legal value (before the power-of-two rule for windows).
    pub const fn max(self) -> u64 {
        match self {
            Resource::TaskWindow | Resource::DepPool => (1 << 31) - 1,
            Resource::Heap => u64::MAX,
        }
    }

    /// Checks a non-zero value against this resource's rules.
    pub const fn check(self, value: u64) -> Result<(), RuleViolation> {
        if value < self.min() || value > self.max() {
            return Err(RuleViolation::OutOfRange {
                min: self.min(),
                max: self.max(),
            });
        }
        match self {
            Resource::TaskWindow if !value.is_power_of_two() => Err(RuleViolation::NotPowerOfTwo),
            Resource::Heap if !value.is_multiple_of(64) => Err(RuleViolation::NotMultipleOf64),
            _ => Ok(()),
        }
    }

    /// The rule in words, as used by `ConfigError` messages.
    pub const fn rule_text(self) -> &'static str {
        match self {
            Resource::TaskWindow => "must be a power of two between 4 and 1073741824",
            Resource::Heap => "must be at least 1024 bytes and a multiple of 64",
            Resource::DepPool => "must be between 4 and 2147483647",
        }
    }

    /// The smallest legal value that is at least `want` (saturating at the largest legal value).
    /// Used by hints and `pto advise`.
    pub fn legal_at_least(self, want: u64) -> u64 {
        let want = want.max(self.min());
        match self {
            Resource::TaskWindow => want
                .checked_next_power_of_two()
                .unwrap_or(1 << 30)
                .min(1 << 30),
            Resource::Heap => want.checked_next_multiple_of(64).unwrap_or(u64::MAX - 63),
            Resource::DepPool => want.min(self.max()),
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field())
    }
}

// The defaults are legal values of their own rules.
const _: () = {
    assert!(
        Resource::TaskWindow
            .check(Resource::TaskWindow.default_value())
            .is_ok()
    );
    assert!(Resource::Heap.check(Resource::Heap.default_value()).is_ok());
    assert!(
        Resource::DepPool
            .check(Resource::DepPool.default_value())
            .is_ok()
    );
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t48_ring_index_for_depth() {
        let rings: Vec<usize> = [0, 1, 2, 3, 4, 63].map(ring_for_depth).to_vec();
        assert_eq!(rings, [0, 1, 2, 3, 3, 3]);
    }

    #[test]
    fn legal_at_least_rounds_to_the_rule() {
        assert_eq!(Resource::TaskWindow.legal_at_least(0), 4);
        assert_eq!(Resource::TaskWindow.legal_at_least(9), 16);
        assert_eq!(Resource::TaskWindow.legal_at_least(u64::MAX), 1 << 30);
        assert_eq!(Resource::Heap.legal_at_least(1), 1024);
        assert_eq!(Resource::Heap.legal_at_least(1030), 1088);
        assert_eq!(Resource::DepPool.legal_at_least(5), 5);
        assert_eq!(Resource::DepPool.legal_at_least(u64::MAX), (1 << 31) - 1);
    }
}
