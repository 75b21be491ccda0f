//! The typed errors of the node runtime (NODE_RUNTIME.md §1.7, RING_CONFIG.md §3.1 C2/C3).
//!
//! Where each error surfaces: [`BuildError`] at `build()`, [`InitError`] at `init()`,
//! [`RegisterError`] at `register`, [`SubmitRunError`] at `Worker::submit` before or after the
//! orchestration function, [`SubmitError`] synchronously at every `submit_*` of the
//! [`crate::Orchestrator`] (no task is created), [`AllocError`] at `alloc`, [`WaitError`] /
//! [`RunError`] at `RunHandle::wait`. A [`RunError`] prints its chain outermost first:
//! `run 3: task 5 'attn' on chip[0]: L2 run failed: SCOPE_DEADLOCK (1): …`.

use std::fmt;

use pto_types::{BufferId, ConfigError, ErrorCode};

use crate::callable::CallableKind;
use crate::report::{NodeTaskId, RunReport};

/// A builder option with an illegal value (`Worker::builder(..).build()`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Worker option {option}: {reason}")]
pub struct BuildError {
    /// The option's builder method name, e.g. `"level"`, `"heap_ring_size"`.
    pub option: &'static str,
    pub reason: String,
}

/// Why `Worker::init` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InitError {
    #[error("init() was already called on this Worker")]
    AlreadyInitialized,
    #[error("the Worker is closed")]
    Closed,
    /// A chip or sub worker could not start; `child` names it (`chip[1]`, `chip_child[1]`),
    /// `pid` is the child process's (child-process mode).
    #[error("{child}{} failed to start: {message}", pid.map(|p| format!(" pid={p}")).unwrap_or_default())]
    ChildFailed {
        child: String,
        pid: Option<u32>,
        message: String,
    },
    /// A level-4 Worker with neither Worker children nor sub workers.
    #[error("a level-4 Worker needs at least one Worker child (add_worker) or sub worker")]
    NoWorkers,
    /// Children that did not report ready within `startup_timeout` (all were stopped), each
    /// as `<name> pid=<pid>`.
    #[error("start-up timed out waiting for {}", pending.join(", "))]
    Timeout { pending: Vec<String> },
    /// The requested endpoint mode or level is not available in this build.
    #[error("{what} is not implemented yet ({issue})")]
    NotImplemented {
        what: &'static str,
        issue: &'static str,
    },
    #[error("cannot start a Worker thread: {0}")]
    Thread(String),
    /// This process was started as a pto child (`PTO_CHILD=1`) but its `main` did not call
    /// `pto_node::child_main()` first; starting children would start this image again, without
    /// end, so nothing is started.
    #[error(
        "this process was started as a pto child process (PTO_CHILD=1) but did not call pto_node::child_main() first in main (test binaries: pto_node::test_child_entry!()); refusing to start child processes, which would run this program again without end"
    )]
    ChildMainMissing,
}

/// Why `Worker::add_worker` refused a child Worker (NODE_RUNTIME.md §6.1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddWorkerError {
    /// Only Workers of level 4 or more have Worker children.
    #[error("add_worker needs a Worker of level 4 or more (this one is level {level})")]
    RequiresLevel4 { level: u32 },
    /// The parent is no longer NEW.
    #[error("add_worker is only possible before init")]
    NotNew,
    /// The child must be NEW (it is started by the parent's init).
    #[error("the child Worker must be NEW (not initialised, not closed)")]
    ChildNotNew,
    /// The child is not one level below the parent.
    #[error("a level-{parent} Worker takes level-{} children, not level {child}", parent - 1)]
    WrongLevel { parent: u32, child: u32 },
    /// The child has closure callables, which cannot cross the process boundary.
    #[error("the child Worker has closure callables; children resolve callables by name")]
    Closures,
}

/// Why a callable could not be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("callable name {name:?} must be 1-64 characters of [A-Za-z0-9_.-]")]
    BadName { name: String },
    #[error(
        "no {kind} callable named {name:?} is registered in this image{}",
        crate::callable::known_hint(*kind, name)
    )]
    UnknownCallable { kind: CallableKind, name: String },
    #[error("closure callables need EndpointMode::InProcess (children resolve callables by name)")]
    ClosureRequiresInProcess,
    #[error("a {kind} callable named {name:?} is already registered on this Worker")]
    DuplicateName { kind: CallableKind, name: String },
    #[error("a level-{level} Worker has no {kind} workers")]
    WrongLevel { level: u32, kind: CallableKind },
    #[error("the Worker is closed")]
    Closed,
}

/// A synchronous rejection of one `submit_*` call: nothing was created, nothing dispatched.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SubmitError {
    /// Checkpoint C3: the task's `CallConfig` fails validation. Names field, ring and value.
    #[error("invalid CallConfig: {0}")]
    InvalidConfig(ConfigError),
    /// A tensor or the argument list is unusable; `index` is the tensor's position when one
    /// tensor is at fault.
    #[error("invalid arguments{}: {reason}", index.map(|i| format!(" (tensor {i})")).unwrap_or_default())]
    InvalidArgs {
        index: Option<usize>,
        reason: String,
    },
    /// A tensor's buffer cannot be reached by the worker the task is for: a host buffer of
    /// this process aimed at a remote worker, or a remote buffer aimed at another worker.
    #[error("tensor {index}: {reason}")]
    BufferNotReachable { index: usize, reason: String },
    /// Two write-tagged tensors of one task overlap.
    #[error("write-tagged tensors {a} and {b} of one task overlap")]
    WriteOverlap { a: usize, b: usize },
    #[error("no worker {worker} (this Worker has {workers} next-level workers)")]
    UnknownWorker { worker: usize, workers: usize },
    #[error("worker {worker} appears twice in one group")]
    DuplicateWorker { worker: usize },
    #[error("a group has {args} argument lists but {workers} workers")]
    GroupSizeMismatch { args: usize, workers: usize },
    #[error("a sub group of {size} needs {size} sub workers; this Worker has {sub_workers}")]
    GroupTooLarge { size: usize, sub_workers: usize },
    #[error("expected a {expected} callable, got a {got} callable")]
    WrongCallableKind {
        expected: CallableKind,
        got: CallableKind,
    },
    #[error("the callable handle belongs to another Worker")]
    ForeignHandle,
    #[error("the callable handle is not registered on this Worker")]
    StaleHandle,
    /// `code`: why the worker went away (`CHILD_DIED`, `CHILD_UNRESPONSIVE`, `WORKER_LOST`,
    /// `TASK_TIMEOUT`), when a death is the reason.
    #[error("{worker} is unavailable: {cause}")]
    WorkerUnavailable {
        worker: String,
        cause: String,
        code: Option<ErrorCode>,
    },
    /// Fail-fast: the run already has a failed task.
    #[error("the run has failed: {0}")]
    RunFailed(Box<RunError>),
}

/// Why `Worker::submit` / `Worker::run` did not produce a run, or why its orchestration failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SubmitRunError {
    /// Checkpoint C2: the run's base config fails validation; nothing ran.
    #[error("invalid base CallConfig: {0}")]
    InvalidConfig(ConfigError),
    #[error("the Worker is not initialised (call init() first)")]
    NotReady,
    #[error("the Worker is closed")]
    Closed,
    /// `submit` was called from inside an orchestration function of the same Worker.
    #[error("submit() called from inside an orchestration function of the same Worker")]
    Reentrant,
    /// The orchestration function returned an error or panicked. Returned once the tasks it
    /// had started finished; tasks not yet started were cancelled.
    #[error("run {run_id}: orchestration failed: {source}")]
    Orchestration { run_id: u64, source: OrchError },
}

/// What an orchestration function returns on failure; `?` converts the runtime's errors.
#[derive(Clone, Debug, thiserror::Error)]
pub enum OrchError {
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Alloc(#[from] AllocError),
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// A per-task config could not be derived (`CallConfig::derive`).
    #[error("invalid CallConfig: {0}")]
    Config(#[from] ConfigError),
    #[error("orchestration panicked: {0}")]
    Panic(String),
    /// Chip memory control inside the orchestration (`orch.alloc_child_tensor`, …).
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("{0}")]
    Message(String),
}

impl OrchError {
    /// An error with a free-form message.
    pub fn msg(message: impl Into<String>) -> OrchError {
        OrchError::Message(message.into())
    }

    /// The numbered code behind this error, when a worker's death is why the orchestration
    /// could not go on (the run's failure then carries it).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            OrchError::Submit(SubmitError::WorkerUnavailable { code, .. }) => *code,
            _ => None,
        }
    }
}

/// Scope misuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("scope nesting deeper than {max} (including the run's outer scope)")]
    TooDeep { max: usize },
    /// `exit_scope` with no scope opened by `enter_scope`.
    #[error("exit_scope() without a matching enter_scope()")]
    NotOpen,
}

/// Why `orch.alloc` failed (NODE_RUNTIME.md §2.8).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error(
        "alloc of {requested} bytes is larger than heap ring {ring} ({capacity} bytes); raise heap_ring_size"
    )]
    TooLarge {
        ring: usize,
        requested: u64,
        capacity: u64,
    },
    /// `provable`: the oldest slab is held by a scope open on this thread, so waiting could
    /// never succeed (returned at once); otherwise the wait hit `heap_alloc_timeout`.
    #[error(
        "heap ring {ring} exhausted: requested {requested} bytes, capacity {capacity}, in use {in_use}{}; raise heap_ring_size or use a narrower scope",
        if *provable { " (its oldest slab is held by a scope still open on this thread, so waiting cannot help)" } else { " (timed out waiting for slabs to be released)" }
    )]
    HeapExhausted {
        ring: usize,
        requested: u64,
        capacity: u64,
        in_use: u64,
        provable: bool,
    },
    #[error("invalid shape: {reason}")]
    BadShape { reason: String },
}

/// Host access to a buffer failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    #[error("buffer {buffer:?} is used by {tasks} unfinished task(s)")]
    InUse { buffer: BufferId, tasks: u32 },
    #[error("elements [{offset}, {end}) are outside the {len}-element buffer")]
    OutOfBounds {
        offset: usize,
        end: usize,
        len: usize,
    },
    #[error("cannot allocate a {bytes}-byte buffer: {reason}")]
    Create { bytes: usize, reason: String },
    #[error("the buffer was released")]
    Released,
    /// A remote buffer's transfer failed (the message names the worker and why).
    #[error("{reason}")]
    Remote { reason: String },
    /// `create_remote_buffer` named no remote worker, or the Worker is not initialised.
    #[error("{0}")]
    NoRemote(String),
}

/// Why a control request (outside runs) failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("{count} run(s) are unfinished; chip control runs only between runs")]
    RunsInFlight { count: usize },
    #[error("no worker {worker}")]
    UnknownWorker { worker: usize },
    #[error("the Worker is not initialised")]
    NotReady,
    #[error("{worker}: {message}")]
    Endpoint { worker: String, message: String },
    #[error("timed out waiting for {worker}")]
    Timeout { worker: String },
    /// Inside an orchestration function, chip control runs only before the run's first submit.
    #[error("chip control inside a run is allowed only before the run's first submit")]
    AfterFirstSubmit,
    /// `copy_to` / `copy_from` copy whole tensors: the sizes must be equal.
    #[error(
        "the device tensor has {device} bytes, the host buffer {host}; copies need equal sizes"
    )]
    SizeMismatch { device: u64, host: u64 },
    /// A level-4 Worker has no chips of its own.
    #[error("a level-4 Worker has no chips; chip control belongs to its L3 children")]
    NoChips,
    /// The device tensor or host buffer belongs to another Worker (or was freed).
    #[error("{what} is not a live buffer of this Worker")]
    Foreign { what: String },
    #[error("invalid shape: {reason}")]
    BadShape { reason: String },
}

/// How a task failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The callable or the chip run failed (an L2 code, `CALLABLE_FAILED`, …).
    Task,
    /// The chip could not bind the run (invalid config, sizing, device memory); no task of the
    /// L2 graph ran. Does not poison the endpoint (RING_CONFIG.md T88).
    Bind,
    /// The endpoint died or timed out while running the task.
    Endpoint,
    /// Not run: a producer failed or the run was cancelled.
    Skipped,
    /// The orchestration function failed; not a task.
    Orchestration,
    /// The caller cancelled the run (`RunHandle::cancel`); not a task.
    Cancelled,
}

/// One task's failure with its message chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskFailure {
    /// `None` for a run-level failure (orchestration).
    pub task: Option<NodeTaskId>,
    pub label: Option<String>,
    /// The worker that ran it (`chip[0]`, `sub[1]`); empty when it never ran.
    pub worker: String,
    pub kind: FailureKind,
    /// The numbered code, when there is one (`SCOPE_DEADLOCK`, `DEVICE_MEMORY_EXHAUSTED`, …).
    pub code: Option<ErrorCode>,
    /// The chain below the worker, e.g. `L2 run failed: SCOPE_DEADLOCK (1): …`.
    pub message: String,
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.task {
            Some(task) => write!(f, "{task}")?,
            None => f.write_str("orchestration")?,
        }
        if let Some(label) = &self.label {
            write!(f, " '{label}'")?;
        }
        // An endpoint failure's message names the child already; say it once.
        if !self.worker.is_empty() && !self.message.contains(&self.worker) {
            write!(f, " on {}", self.worker)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A failed run: the first failure, counts and the full report (NODE_RUNTIME.md §1.7).
#[derive(Clone, Debug)]
pub struct RunError {
    pub run_id: u64,
    pub first: TaskFailure,
    /// Tasks that failed themselves (not counting skipped ones).
    pub failed: u32,
    /// Tasks never run because a producer failed or the run was cancelled.
    pub skipped: u32,
    /// Every task of the run, including the ones that completed.
    pub report: Box<RunReport>,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "run {}: {}", self.run_id, self.first)?;
        if self.failed > 1 || self.skipped > 0 {
            write!(
                f,
                " ({} task(s) failed, {} skipped)",
                self.failed, self.skipped
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for RunError {}

/// What `RunHandle::wait` returns instead of a report.
#[derive(Clone, Debug, thiserror::Error)]
pub enum WaitError {
    /// The timeout passed; the run is not cancelled and can be waited for again.
    #[error("the run did not finish within the timeout")]
    Timeout,
    #[error("{0}")]
    Failed(Box<RunError>),
}

/// What `Worker::run` returns on failure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum WorkerRunError {
    #[error(transparent)]
    Submit(#[from] SubmitRunError),
    #[error("{0}")]
    Failed(Box<RunError>),
}

impl WorkerRunError {
    /// The numbered code of the failure: the first failed task's, or the one behind the
    /// orchestration's error (a worker that died under it: [`OrchError::code`]).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            WorkerRunError::Failed(e) => e.first.code,
            WorkerRunError::Submit(SubmitRunError::Orchestration { source, .. }) => source.code(),
            WorkerRunError::Submit(_) => None,
        }
    }
}
