//! Errors of a chip run (CHIP_RUNTIME.md §5.3) and of binding a run (RING_CONFIG.md §3.1, C6).
//!
//! A [`ChipError`] is a numbered runtime failure (codes from `pto_types::ErrorCode`) with the
//! context a user needs to fix it: which ring and resource, its current size and where that size
//! came from, what was used and requested, a recommended minimum, and the knob to turn. A
//! [`BindError`] means no task of the graph ran.

use std::fmt;

use pto_types::ring_config::resolve::{Resolved, SizeSource, SizingError};
use pto_types::{ConfigError, ErrorCode, Resource};
use serde::{Deserialize, Serialize};

use crate::task_id::TaskId;

/// How a failure was detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detector {
    /// Checked directly at the call (bad arguments, a scope over its window).
    Immediate,
    /// The request exceeds the resource's total capacity.
    Impossible,
    /// Progress is provably impossible (e.g. the ring head's scope is open).
    Structural,
    /// No progress for the quiescence backstop.
    Backstop,
    /// A watchdog or wait timeout.
    Timeout,
}

impl Detector {
    pub fn as_str(self) -> &'static str {
        match self {
            Detector::Immediate => "immediate",
            Detector::Impossible => "impossible",
            Detector::Structural => "structural",
            Detector::Backstop => "backstop",
            Detector::Timeout => "timeout",
        }
    }
}

/// The exhausted resource. The serde names are those of scope-stats error records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    TaskWindow,
    Heap,
    DepList,
    FaninSpill,
    #[serde(rename = "tensormap")]
    TensorMap,
    Cores,
}

impl ResourceKind {
    /// The ring resource whose size bounds this one, if any.
    pub fn ring_resource(self) -> Option<Resource> {
        match self {
            ResourceKind::TaskWindow => Some(Resource::TaskWindow),
            ResourceKind::Heap => Some(Resource::Heap),
            ResourceKind::DepList | ResourceKind::FaninSpill => Some(Resource::DepPool),
            ResourceKind::TensorMap | ResourceKind::Cores => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::TaskWindow => "task window",
            ResourceKind::Heap => "heap",
            ResourceKind::DepList => "dep-list pool",
            ResourceKind::FaninSpill => "fanin spill pool",
            ResourceKind::TensorMap => "TensorMap",
            ResourceKind::Cores => "cores",
        }
    }
}

/// A failed chip run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChipError {
    pub code: ErrorCode,
    pub detector: Detector,
    pub ring: Option<usize>,
    pub resource: Option<ResourceKind>,
    /// The resource's capacity and its provenance (ring resources only).
    pub capacity: Option<Resolved>,
    pub used: Option<u64>,
    pub requested: Option<u64>,
    pub recommended_min: Option<u64>,
    /// The task being submitted or run when the failure happened.
    pub task: Option<TaskId>,
    /// The ring head that could not retire, for capacity failures.
    pub head: Option<TaskId>,
    /// What happened, in words.
    pub detail: String,
}

impl ChipError {
    /// An error with only a code, a detector and a message.
    pub fn new(code: ErrorCode, detector: Detector, detail: impl Into<String>) -> ChipError {
        ChipError {
            code,
            detector,
            ring: None,
            resource: None,
            capacity: None,
            used: None,
            requested: None,
            recommended_min: None,
            task: None,
            head: None,
            detail: detail.into(),
        }
    }

    /// The knob that sizes the exhausted resource: the `CallConfig` field path (with the ring)
    /// and the environment variable, e.g. `("runtime_env.ring_heap[0]", "PTO2_RING_HEAP")`.
    pub fn knob(&self) -> Option<(String, &'static str)> {
        let resource = self.resource?;
        if resource == ResourceKind::TensorMap {
            return Some(("ChipSpec.tensormap_pool".to_string(), "PTO_TENSORMAP_POOL"));
        }
        let ring_resource = resource.ring_resource()?;
        let ring = self.ring?;
        Some((
            format!("{}[{ring}]", ring_resource.config_path()),
            ring_resource.env_var(),
        ))
    }

    /// The hint: which knob to turn, generated from the capacity's provenance (RING_CONFIG.md §8).
    pub fn hint(&self) -> String {
        let (Some(ring), Some(resource)) = (self.ring, self.resource) else {
            return self.code.hint().to_string();
        };
        if resource == ResourceKind::TensorMap {
            return match self.recommended_min {
                Some(min) => format!(
                    "raise ChipSpec.tensormap_pool (PTO_TENSORMAP_POOL) to at least {min}, or use narrower scopes"
                ),
                None => self.code.hint().to_string(),
            };
        }
        let Some(ring_resource) = resource.ring_resource() else {
            return self.code.hint().to_string();
        };
        let field = format!("CallConfig.{}[{ring}]", ring_resource.config_path());
        let at_least = match self.recommended_min {
            Some(min) => format!(" to at least {}", ring_resource.legal_at_least(min)),
            None => String::new(),
        };
        let split = match self.code {
            ErrorCode::ScopeDeadlock | ErrorCode::HeapRingDeadlock => ", or split the scope",
            _ => "",
        };
        match self.capacity {
            Some(Resolved {
                value,
                source: SizeSource::CallConfig,
            }) => format!(
                "raise {field} ({value}, from call_config){at_least}{split}; scope stats (enable_scope_stats) record the peaks to size it from"
            ),
            Some(Resolved {
                value,
                source: SizeSource::Env,
            }) => format!(
                "raise {} ({value}, from env){at_least}, or override it for this task with {field}{split}; scope stats (enable_scope_stats) record the peaks to size it from",
                ring_resource.env_var()
            ),
            _ => {
                let value = self.capacity.map(|c| c.value).unwrap_or(0);
                format!(
                    "set {field} ({value}, the default){at_least} for this task, or {} for every task{split}; scope stats (enable_scope_stats) record the peaks to size it from",
                    ring_resource.env_var()
                )
            }
        }
    }
}

impl fmt::Display for ChipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chip run failed: {}", self.code)?;
        if let Some(ring) = self.ring {
            write!(f, " ring={ring}")?;
        }
        writeln!(f, " detector={}", self.detector.as_str())?;
        writeln!(f, "error detail: {}", self.detail)?;
        write!(f, "error hint: {}", self.hint())
    }
}

impl std::error::Error for ChipError {}

/// Why a run could not start (no task of its graph ran).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindError {
    InvalidConfig(ConfigError),
    AicpuThreads {
        requested: u32,
        chip_max: u32,
    },
    Sizing(SizingError),
    UnknownCallable {
        name: String,
    },
    InvalidArgs {
        reason: String,
    },
    /// The host could not back the arena, or the device address space is used up.
    DeviceMemory {
        reason: String,
    },
    /// A kernel of an earlier run never returned; its core is still busy.
    Poisoned {
        reason: String,
    },
}

impl BindError {
    /// The numbered code a bind failure is reported with (the reply codes of NODE_RUNTIME.md
    /// §4.8), the same in-process and across the mailbox.
    pub fn code(&self) -> ErrorCode {
        match self {
            BindError::InvalidConfig(_) | BindError::AicpuThreads { .. } => {
                ErrorCode::InvalidConfig
            }
            BindError::Sizing(SizingError::DeviceMemoryExhausted { .. })
            | BindError::DeviceMemory { .. } => ErrorCode::DeviceMemoryExhausted,
            BindError::Sizing(_) => ErrorCode::InvalidConfig,
            BindError::UnknownCallable { .. } => ErrorCode::UnknownCallable,
            BindError::InvalidArgs { .. } => ErrorCode::BufferUnavailable,
            BindError::Poisoned { .. } => ErrorCode::SchedulerTimeout,
        }
    }
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::InvalidConfig(e) => write!(f, "invalid config: {e}"),
            BindError::AicpuThreads {
                requested,
                chip_max,
            } => write!(
                f,
                "aicpu_thread_num={requested}: this chip runs at most {chip_max} AICPU threads"
            ),
            BindError::Sizing(e) => write!(f, "{e}"),
            BindError::UnknownCallable { name } => {
                let listed = crate::callable::listed_chip_callable_names();
                write!(
                    f,
                    "no chip callable named {name:?} is registered in this image{} (registered: {})",
                    pto_types::suggest::did_you_mean(name, listed.iter().copied()),
                    listed.join(", ")
                )
            }
            BindError::InvalidArgs { reason } => write!(f, "invalid arguments: {reason}"),
            BindError::DeviceMemory { reason } => write!(f, "device memory: {reason}"),
            BindError::Poisoned { reason } => write!(f, "chip unusable: {reason}"),
        }
    }
}

impl std::error::Error for BindError {}

/// The error of [`crate::ChipWorker::run`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChipRunError {
    Bind(BindError),
    Run(Box<ChipError>),
}

impl ChipRunError {
    /// The run-time error code, if the graph ran.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ChipRunError::Run(e) => Some(e.code),
            ChipRunError::Bind(_) => None,
        }
    }
}

impl fmt::Display for ChipRunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChipRunError::Bind(e) => write!(f, "chip bind failed: {e}"),
            ChipRunError::Run(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ChipRunError {}

/// Returned by every orchestration call once a run has failed: `?` unwinds the orchestration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fatal(pub(crate) ());

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the chip run has failed; the orchestration must return")
    }
}

impl std::error::Error for Fatal {}

/// The result of an orchestration call.
pub type OrchResult<T> = Result<T, Fatal>;
