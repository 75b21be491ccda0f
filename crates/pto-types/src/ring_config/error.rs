//! `ConfigError`: the one error type of `CallConfig` validation (RING_CONFIG.md §3).
//!
//! Messages are part of the contract (tests and users match on them); they name the field,
//! the ring and the value, and the heap hint is computed from the same rule as the check.

use std::fmt;

use super::{PLATFORM_MAX_AICPU_THREADS, Resource};

/// Why a `CallConfig` (or one of its parts) is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    AicpuThreadNum {
        value: u32,
        max: u32,
    },
    SwimlaneLevel {
        value: u8,
    },
    OutputPrefixTooLong {
        len: usize,
    },
    /// The prefix is empty or contains a NUL byte.
    OutputPrefixInvalid {
        reason: PrefixProblem,
    },
    /// Diagnostics are on but there is nowhere to write them; `enabled` lists the flags.
    MissingOutputPrefix {
        enabled: Vec<&'static str>,
    },
    RingListLength {
        field: Resource,
        len: usize,
    },
    TaskWindow {
        ring: usize,
        value: u64,
    },
    Heap {
        ring: usize,
        value: u64,
    },
    DepPool {
        ring: usize,
        value: u64,
    },
}

/// What is wrong with a present `output_prefix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixProblem {
    Empty,
    ContainsNul,
}

impl ConfigError {
    /// The error for a value of `resource` on `ring` that breaks its rule.
    pub fn ring_value(resource: Resource, ring: usize, value: u64) -> ConfigError {
        match resource {
            Resource::TaskWindow => ConfigError::TaskWindow { ring, value },
            Resource::Heap => ConfigError::Heap { ring, value },
            Resource::DepPool => ConfigError::DepPool { ring, value },
        }
    }

    /// The field path the error is about, e.g. `runtime_env.ring_task_window` or `output_prefix`.
    pub fn field(&self) -> &'static str {
        match self {
            ConfigError::AicpuThreadNum { .. } => "aicpu_thread_num",
            ConfigError::SwimlaneLevel { .. } => "enable_chip_swimlane",
            ConfigError::OutputPrefixTooLong { .. }
            | ConfigError::OutputPrefixInvalid { .. }
            | ConfigError::MissingOutputPrefix { .. } => "output_prefix",
            ConfigError::RingListLength { field, .. } => field.config_path(),
            ConfigError::TaskWindow { .. } => Resource::TaskWindow.config_path(),
            ConfigError::Heap { .. } => Resource::Heap.config_path(),
            ConfigError::DepPool { .. } => Resource::DepPool.config_path(),
        }
    }

    /// The resource of a ring error.
    pub fn resource(&self) -> Option<Resource> {
        match self {
            ConfigError::RingListLength { field, .. } => Some(*field),
            ConfigError::TaskWindow { .. } => Some(Resource::TaskWindow),
            ConfigError::Heap { .. } => Some(Resource::Heap),
            ConfigError::DepPool { .. } => Some(Resource::DepPool),
            _ => None,
        }
    }

    /// The ring a ring-value error is about.
    pub fn ring(&self) -> Option<usize> {
        match self {
            ConfigError::TaskWindow { ring, .. }
            | ConfigError::Heap { ring, .. }
            | ConfigError::DepPool { ring, .. } => Some(*ring),
            _ => None,
        }
    }

    /// The offending value, where there is one.
    pub fn value(&self) -> Option<u64> {
        match self {
            ConfigError::AicpuThreadNum { value, .. } => Some(u64::from(*value)),
            ConfigError::SwimlaneLevel { value } => Some(u64::from(*value)),
            ConfigError::OutputPrefixTooLong { len } => Some(*len as u64),
            ConfigError::RingListLength { len, .. } => Some(*len as u64),
            ConfigError::TaskWindow { value, .. }
            | ConfigError::Heap { value, .. }
            | ConfigError::DepPool { value, .. } => Some(*value),
            ConfigError::OutputPrefixInvalid { .. } | ConfigError::MissingOutputPrefix { .. } => {
                None
            }
        }
    }
}

/// The hint after a bad heap value: the nearest legal values around it.
fn heap_hint(value: u64) -> String {
    let min = Resource::Heap.min();
    if value < min {
        return format!("(use at least {min})");
    }
    let below = value - value % 64;
    match value.checked_next_multiple_of(64) {
        Some(above) => format!("(nearest valid: {below}, {above})"),
        None => format!("(nearest valid: {below})"),
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::AicpuThreadNum { value, max } => write!(
                f,
                "aicpu_thread_num={value}: must be 0 (auto) or between 2 and {max}"
            ),
            ConfigError::SwimlaneLevel { value } => {
                write!(f, "enable_chip_swimlane={value}: must be between 0 and 4")
            }
            ConfigError::OutputPrefixTooLong { len } => write!(
                f,
                "output_prefix is {len} bytes; the limit is {}",
                super::MAX_OUTPUT_PREFIX_BYTES
            ),
            ConfigError::OutputPrefixInvalid {
                reason: PrefixProblem::Empty,
            } => f.write_str("output_prefix is empty; use None"),
            ConfigError::OutputPrefixInvalid {
                reason: PrefixProblem::ContainsNul,
            } => f.write_str("output_prefix contains a NUL byte"),
            ConfigError::MissingOutputPrefix { enabled } => write!(
                f,
                "output_prefix is required when diagnostics are enabled ({})",
                enabled.join(", ")
            ),
            ConfigError::RingListLength { field, len } => write!(
                f,
                "{}: a list must have exactly 4 entries (one per ring), got {len}",
                field.config_path()
            ),
            ConfigError::TaskWindow { ring, value } => write!(
                f,
                "{}[{ring}]={value}: {}",
                Resource::TaskWindow.config_path(),
                Resource::TaskWindow.rule_text()
            ),
            ConfigError::Heap { ring, value } => write!(
                f,
                "{}[{ring}]={value}: {} {}",
                Resource::Heap.config_path(),
                Resource::Heap.rule_text(),
                heap_hint(*value)
            ),
            ConfigError::DepPool { ring, value } => write!(
                f,
                "{}[{ring}]={value}: {}",
                Resource::DepPool.config_path(),
                Resource::DepPool.rule_text()
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

// Keep the thread-count bound in the message and the constant in step.
const _: () = assert!(PLATFORM_MAX_AICPU_THREADS == 4);
