//! Endpoints: the scheduler's connection to one child (NODE_RUNTIME.md §4.1).
//!
//! One trait for every transport, called only by the holder of the scheduler's mutex
//! (`scheduler::Pump`), never blocking:
//! `dispatch` hands over one task; a lane holds up to its **depth** of tasks (a bounded queue,
//! `WorkerBuilder::lane_depth`; the mailbox's ring of frames) and runs them in order, so a busy
//! lane goes from one task to the next without waiting for the scheduler. A control command
//! runs only on an idle lane and is then the only request in flight. `poll` collects every
//! reply that arrived (in dispatch order), `poll_control` the control reply, `health` reports
//! a dead child, and shutdown is two-phase (`begin_shutdown` for every lane, then
//! `finish_shutdown` with one deadline for all). Of the tasks in flight only the oldest can
//! have started: the others are *queued*, and a lane's death or timeout fails or hands back
//! exactly those (the scheduler decides which).
//!
//! Implementations:
//! - [`in_process`]: chips and subs on threads of this process, a queue of up to the lane
//!   depth of requests per lane passing Rust values;
//! - [`child_process`]: a child process per lane behind a mailbox in a `memfd` segment, one
//!   64 KiB frame per request the lane holds (rule M8 of `shm::mailbox`): `dispatch` encodes
//!   the request into its frame (the `CallConfig` record, the args blob) and stores
//!   TASK_READY; `poll` reads the state words of busy lanes; `health` comes from the monitor
//!   thread's pidfds;
//! - `crate::remote::endpoint`: a remote L3 worker over gRPC; `dispatch` spawns a `Submit`
//!   call on the client runtime, outcomes arrive on a channel and ring the scheduler's
//!   doorbell.
//!
//! Requests are plain data (`TaskRequest` owns cloned args and config), so each
//! implementation can encode them or pass them on. All three live in this crate, so the trait
//! stays crate-private.

pub(crate) mod child_process;
pub(crate) mod in_process;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pto_chip::ChipRunReport;
use pto_types::{CallConfig, ErrorCode, TaskArgs};

use crate::buffer::BufferInner;
use crate::callable::CallableKind;
use crate::engine::SlotId;
use crate::error::FailureKind;
use crate::report::NodeTaskId;

/// One task (or one group member) for one lane.
#[derive(Clone, Debug)]
pub(crate) struct TaskRequest {
    pub(crate) slot: SlotId,
    pub(crate) task: NodeTaskId,
    /// Group member index and group size (0 and 1 for a single task).
    pub(crate) member: u32,
    pub(crate) group_size: u32,
    pub(crate) callable_id: u32,
    pub(crate) callable: Arc<str>,
    pub(crate) kind: CallableKind,
    pub(crate) label: Option<String>,
    /// Chip tasks: the task's own config, by value. Sub tasks: `None`.
    pub(crate) config: Option<CallConfig>,
    pub(crate) args: TaskArgs,
    /// The buffer behind each tensor of `args`, in order.
    pub(crate) buffers: Vec<Arc<BufferInner>>,
    /// The run's cancel flag: an in-process lane skips a queued task whose run was cancelled.
    pub(crate) cancelled: Arc<std::sync::atomic::AtomicBool>,
}

/// Why a task did not succeed, as the child reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) kind: FailureKind,
    pub(crate) code: Option<ErrorCode>,
    /// Below the worker name: `L2 run failed: …`, `boom`.
    pub(crate) message: String,
}

/// A lane's reply to a task.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) slot: SlotId,
    pub(crate) member: u32,
    /// Chip tasks: the chip's report, boxed (it is large and most completions move around
    /// without one).
    pub(crate) result: Result<Option<Box<ChipRunReport>>, Failure>,
    pub(crate) exec_time: Duration,
    /// Node tasks: the inner run's report (also when it failed).
    pub(crate) inner: Option<Box<crate::report::RunReport>>,
}

/// Control commands (NODE_RUNTIME.md §4.7, §1.6) the Worker issues today. PREWARM,
/// RESOLVE_CONFIG and TRIM_ARENAS have wire encodings (`pto_types::node_wire::mailbox`) only.
#[derive(Clone, Debug)]
pub(crate) enum ControlCmd {
    CommittedDeviceMemory,
    /// Echo the bytes (health, round-trip benchmark).
    Ping(Vec<u8>),
    /// Allocate device memory on the chip.
    Malloc {
        bytes: u64,
        align: u64,
    },
    /// Free a device allocation.
    Free {
        alloc: u64,
    },
    /// Copy the whole host buffer `host` into allocation `alloc` at `offset`.
    CopyTo {
        alloc: u64,
        offset: u64,
        host: Arc<BufferInner>,
    },
    /// Copy `host.bytes()` bytes of allocation `alloc` from `offset` into `host`.
    CopyFrom {
        alloc: u64,
        offset: u64,
        host: Arc<BufferInner>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ControlReply {
    Bytes(u64),
    Echo(Vec<u8>),
    /// MALLOC: the allocation id and its device address.
    Alloc {
        alloc: u64,
        address: u64,
    },
    /// COPY_TO / COPY_FROM.
    Done,
}

/// A transport-level failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EndpointError {
    #[error("the lane is busy")]
    Busy,
    #[error("the lane is dead: {0}")]
    Dead(String),
    #[error("{0} is not supported by this worker")]
    Unsupported(&'static str),
    /// The child answered with an error code.
    #[error("{0}")]
    Failed(String),
}

/// Whether a lane can still serve requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    Alive,
    Dead(Death),
}

/// How a lane's child died, in parts the scheduler composes into messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Death {
    /// After the lane's name: `terminated by signal 9 (SIGKILL)`, `stopped answering liveness
    /// probes for 1.02 s and was killed (SIGKILL)`.
    pub(crate) fate: String,
    /// What it was doing: ` while running task 3 ('attn') of run 2`, or empty.
    pub(crate) during: String,
    /// `CHILD_DIED`, `CHILD_UNRESPONSIVE` or `TASK_TIMEOUT`.
    pub(crate) code: ErrorCode,
}

impl Death {
    /// `chip_child[1] pid=4242 terminated by signal 9 (SIGKILL) while running task 3 …`.
    pub(crate) fn describe(&self, name: &str) -> String {
        format!("{name} {}{}", self.fate, self.during)
    }
}

/// How a lane ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShutdownOutcome {
    Graceful,
    /// The lane's thread was still busy at the deadline and was left detached.
    Detached,
    /// The child process did not exit in time and was killed.
    Killed,
}

/// A sub task whose predecessor on its lane ran at least this long queues at most one task
/// behind the running one.
pub(crate) const LONG_SUB_TASK: Duration = Duration::from_micros(50);

/// How many tasks a lane of `depth` holds now. Queueing pays for short tasks (it hides the
/// scheduler round trip, µs); for long sub tasks it would cost balance instead, as a sub task
/// queued on a busy lane cannot move to one that becomes idle: such lanes hold the running
/// task and one more. Chip tasks are aimed at their chip, so their queue costs nothing.
pub(crate) fn lane_capacity(depth: usize, sub: bool, last_exec: Duration) -> usize {
    if sub && last_exec >= LONG_SUB_TASK {
        depth.min(2)
    } else {
        depth
    }
}

/// The scheduler's view of one child (NODE_RUNTIME.md §4.1).
pub(crate) trait Endpoint: Send {
    /// `chip[0]`, `sub[1]` (child processes: `chip_child[0]`).
    fn name(&self) -> &str;
    /// The code of a task that could not be dispatched because the lane is dead
    /// ([`EndpointError::Dead`]): its worker was lost before the task reached it.
    fn lost_code(&self) -> pto_types::ErrorCode {
        pto_types::ErrorCode::ChildDied
    }
    /// No task or control command in flight.
    fn is_idle(&self) -> bool;
    /// How many more tasks `dispatch` accepts now: the depth minus the tasks in flight, 0
    /// while a control command runs or the lane cannot take work.
    fn room(&self) -> usize;
    /// Queues one task behind those in flight (`room() > 0`).
    fn dispatch(&mut self, req: TaskRequest) -> Result<(), EndpointError>;
    /// Appends the replies that have arrived, oldest first. Never blocks.
    fn poll(&mut self, out: &mut Vec<Completion>);
    fn start_control(&mut self, cmd: ControlCmd) -> Result<(), EndpointError>;
    fn poll_control(&mut self) -> Option<Result<ControlReply, EndpointError>>;
    fn health(&self) -> Health;
    /// The oldest task in flight has run for `elapsed`, past the Worker's `task_timeout`. A
    /// child process is killed (its death then fails the task with `TASK_TIMEOUT`: `None`); a
    /// lane that cannot be killed returns the failure to record now and stays busy until the
    /// callable returns, discarding its late reply.
    fn time_out(&mut self, elapsed: Duration, limit: Duration) -> Option<Failure>;
    /// Hands back the queued (unstarted) tasks, newest last, when the lane can still tell
    /// them from a started one (in-process lanes); a child process cannot (its child may be
    /// starting one right now) and returns nothing.
    fn take_back(&mut self) -> Vec<(SlotId, u32)> {
        Vec::new()
    }
    /// Kills the lane's child for `why` (a control command timed out); threads cannot be.
    fn kill(&mut self, why: String);
    /// After `health` reported a death: starts a replacement in the background. False when
    /// this lane cannot be restarted (in-process lanes, or restarts exhausted).
    fn restart(&mut self) -> bool {
        false
    }
    /// The outcome of the restart in progress: `Some(Ok(()))` once this endpoint serves a new
    /// child (with a new name), `Some(Err(why))` if the replacement failed to start.
    fn poll_restart(&mut self) -> Option<Result<(), String>> {
        None
    }
    fn begin_shutdown(&mut self);
    fn finish_shutdown(&mut self, deadline: Instant) -> ShutdownOutcome;
}
