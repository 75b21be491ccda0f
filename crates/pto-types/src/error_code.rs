//! The one table of numbered error codes, with their names and hints.
//!
//! Chip runtime codes (1–199) keep the reference implementation's numbers and names
//! (CHIP_RUNTIME.md §5.1); reply codes (1001–1009) are what a child reports over the mailbox
//! (NODE_RUNTIME.md §4.8); 1010–1013 are decided by the parent about a child (task timeout,
//! death, unresponsiveness, a lost remote worker) and never travel on the wire. Reserved numbers (6, 10, 101–104) are never reused. pto adds 12
//! ORCH_PANIC, 110 KERNEL_PANIC (CHIP_RUNTIME.md §3.9) and 120 INTERNAL_ERROR (a caught panic in a
//! scheduler thread: the run fails, the chip survives).

use std::fmt;

/// A numbered error code. `code()` is stable; `name()` is the upper-case name used in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    ScopeDeadlock,
    HeapRingDeadlock,
    FlowControlDeadlock,
    DepPoolOverflow,
    InvalidArgs,
    RequireSyncStartInvalid,
    TensorWaitTimeout,
    ExplicitOrchFatal,
    TensormapOverflow,
    OrchPanic,
    WarHazard,
    SchedulerTimeout,
    KernelPanic,
    InternalError,
    BadFrame,
    UnknownCallable,
    InvalidConfig,
    DeviceMemoryExhausted,
    BufferUnavailable,
    CallableFailed,
    CallablePanicked,
    InnerRunFailed,
    UnsupportedOp,
    TaskTimeout,
    ChildDied,
    ChildUnresponsive,
    WorkerLost,
}

/// One row of the table.
struct Row {
    code: ErrorCode,
    number: u32,
    name: &'static str,
    hint: &'static str,
}

const TABLE: [Row; 27] = [
    Row {
        code: ErrorCode::ScopeDeadlock,
        number: 1,
        name: "SCOPE_DEADLOCK",
        hint: "the innermost scope holds as many tasks as its ring's window allows: raise runtime_env.ring_task_window for that ring or split the scope",
    },
    Row {
        code: ErrorCode::HeapRingDeadlock,
        number: 2,
        name: "HEAP_RING_DEADLOCK",
        hint: "the ring's heap cannot hold the outputs that must be live at once: raise runtime_env.ring_heap for that ring or split the scope",
    },
    Row {
        code: ErrorCode::FlowControlDeadlock,
        number: 3,
        name: "FLOW_CONTROL_DEADLOCK",
        hint: "the ring's task window is full of tasks that cannot retire: raise runtime_env.ring_task_window for that ring",
    },
    Row {
        code: ErrorCode::DepPoolOverflow,
        number: 4,
        name: "DEP_POOL_OVERFLOW",
        hint: "the ring's dependency pool cannot hold the live edges: raise runtime_env.ring_dep_pool for that ring",
    },
    Row {
        code: ErrorCode::InvalidArgs,
        number: 5,
        name: "INVALID_ARGS",
        hint: "fix the orchestration: a builder error, a bad explicit dependency, an empty alloc_tensors, a scope nested too deep or too few entry arguments",
    },
    Row {
        code: ErrorCode::RequireSyncStartInvalid,
        number: 7,
        name: "REQUIRE_SYNC_START_INVALID",
        hint: "a sync-start task needs more blocks than the chip has cores of its kind: lower block_num or raise the chip's clusters",
    },
    Row {
        code: ErrorCode::TensorWaitTimeout,
        number: 8,
        name: "TENSOR_WAIT_TIMEOUT",
        hint: "get/set_tensor_data waited longer than tensor_wait_timeout: check the producer, or raise PTO_TENSOR_DATA_TIMEOUT_MS",
    },
    Row {
        code: ErrorCode::ExplicitOrchFatal,
        number: 9,
        name: "EXPLICIT_ORCH_FATAL",
        hint: "the orchestration reported a fatal error; see its message",
    },
    Row {
        code: ErrorCode::TensormapOverflow,
        number: 11,
        name: "TENSORMAP_OVERFLOW",
        hint: "the TensorMap has no free entries: raise the chip's tensormap_pool (PTO_TENSORMAP_POOL)",
    },
    Row {
        code: ErrorCode::OrchPanic,
        number: 12,
        name: "ORCH_PANIC",
        hint: "the orchestration function panicked; see the panic message",
    },
    Row {
        code: ErrorCode::WarHazard,
        number: 13,
        name: "WAR_HAZARD",
        hint: "a task overwrites bytes an earlier task may still be reading: set track_war in the task's CallConfig, tag the read TrackedInput, or order the two with a dependency",
    },
    Row {
        code: ErrorCode::SchedulerTimeout,
        number: 100,
        name: "SCHEDULER_TIMEOUT",
        hint: "no progress for scheduler_timeout while work was outstanding: look for a kernel that never returns, or raise PTO_SCHEDULER_TIMEOUT_MS",
    },
    Row {
        code: ErrorCode::KernelPanic,
        number: 110,
        name: "KERNEL_PANIC",
        hint: "a kernel panicked on a core; see the panic message, task and core",
    },
    Row {
        code: ErrorCode::InternalError,
        number: 120,
        name: "INTERNAL_ERROR",
        hint: "a runtime invariant broke; the run was failed and the chip stays usable: please report it with the message",
    },
    Row {
        code: ErrorCode::BadFrame,
        number: 1001,
        name: "BAD_FRAME",
        hint: "a mailbox frame failed to decode or a bound was violated",
    },
    Row {
        code: ErrorCode::UnknownCallable,
        number: 1002,
        name: "UNKNOWN_CALLABLE",
        hint: "the callable is not registered in this image",
    },
    Row {
        code: ErrorCode::InvalidConfig,
        number: 1003,
        name: "INVALID_CONFIG",
        hint: "the CallConfig failed re-validation or an effective-value check; see the field, ring and value",
    },
    Row {
        code: ErrorCode::DeviceMemoryExhausted,
        number: 1004,
        name: "DEVICE_MEMORY_EXHAUSTED",
        hint: "the arena or allocation exceeds the chip's device memory: use a smaller per-task runtime_env or raise ChipSpec.device_memory_bytes",
    },
    Row {
        code: ErrorCode::BufferUnavailable,
        number: 1005,
        name: "BUFFER_UNAVAILABLE",
        hint: "an unknown or too-small segment or device allocation",
    },
    Row {
        code: ErrorCode::CallableFailed,
        number: 1006,
        name: "CALLABLE_FAILED",
        hint: "a sub or node callable returned an error; see its message",
    },
    Row {
        code: ErrorCode::CallablePanicked,
        number: 1007,
        name: "CALLABLE_PANICKED",
        hint: "a sub or node callable panicked; see the panic message",
    },
    Row {
        code: ErrorCode::InnerRunFailed,
        number: 1008,
        name: "INNER_RUN_FAILED",
        hint: "a node child's inner run failed; see the chain",
    },
    Row {
        code: ErrorCode::UnsupportedOp,
        number: 1009,
        name: "UNSUPPORTED_OP",
        hint: "the operation is not valid for this child",
    },
    Row {
        code: ErrorCode::TaskTimeout,
        number: 1010,
        name: "TASK_TIMEOUT",
        hint: "the task ran longer than WorkerBuilder::task_timeout (pto run --task-timeout); its child was killed and restarted: raise the timeout or look for a callable that never returns",
    },
    Row {
        code: ErrorCode::ChildDied,
        number: 1011,
        name: "CHILD_DIED",
        hint: "the child process that owned the task died (signal or exit); its lane is restarted in the background, the task is not retried",
    },
    Row {
        code: ErrorCode::ChildUnresponsive,
        number: 1012,
        name: "CHILD_UNRESPONSIVE",
        hint: "the child stopped answering liveness probes (stopped, or stuck outside any callable) and was killed; raise WorkerBuilder::liveness_timeout (pto run --liveness-timeout) if it is only slow",
    },
    Row {
        code: ErrorCode::WorkerLost,
        number: 1013,
        name: "WORKER_LOST",
        hint: "the connection to a remote worker failed or stopped answering HTTP/2 keepalive pings; check that `pto serve` still runs at that address (the worker stays unavailable to this Worker)",
    },
];

impl ErrorCode {
    fn row(self) -> &'static Row {
        // The table is in enum order; the test below keeps it that way.
        &TABLE[self as usize]
    }

    /// The stable number.
    pub fn code(self) -> u32 {
        self.row().number
    }

    /// The upper-case name, e.g. `HEAP_RING_DEADLOCK`.
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// What to do about it, in one sentence.
    pub fn hint(self) -> &'static str {
        self.row().hint
    }

    /// The code with this number, if any.
    pub fn from_code(number: u32) -> Option<ErrorCode> {
        TABLE.iter().find(|r| r.number == number).map(|r| r.code)
    }

    /// Every code, in table order.
    pub fn all() -> impl Iterator<Item = ErrorCode> {
        TABLE.iter().map(|r| r.code)
    }
}

impl fmt::Display for ErrorCode {
    /// `NAME (code)`, the one rendering used everywhere.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_enum_order_and_numbers_are_unique() {
        for (i, row) in TABLE.iter().enumerate() {
            assert_eq!(row.code as usize, i, "{}", row.name);
        }
        let mut numbers: Vec<u32> = TABLE.iter().map(|r| r.number).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), TABLE.len());
    }

    #[test]
    fn reserved_numbers_are_never_used() {
        for reserved in [6, 10, 101, 102, 103, 104] {
            assert_eq!(ErrorCode::from_code(reserved), None);
        }
    }

    #[test]
    fn display_is_name_then_code() {
        assert_eq!(
            ErrorCode::HeapRingDeadlock.to_string(),
            "HEAP_RING_DEADLOCK (2)"
        );
        assert_eq!(ErrorCode::from_code(110), Some(ErrorCode::KernelPanic));
        assert_eq!(
            ErrorCode::from_code(1004),
            Some(ErrorCode::DeviceMemoryExhausted)
        );
    }
}
