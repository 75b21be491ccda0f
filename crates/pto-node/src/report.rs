//! Per-run reports (NODE_RUNTIME.md §1.4): every task's id, label, workers, outcome, timings and,
//! for chip tasks, the full `ChipRunReport` (resolved sizing with provenance, arena outcome,
//! footprint) — how a caller checks that each L2 task bound exactly its own sizing.

use std::fmt;
use std::time::Duration;

use pto_chip::ChipRunReport;

use crate::error::TaskFailure;

/// A task of a run: the run id and the task's index in submission order (0-based).
///
/// The index also names the chip's diagnostics directory (`run<r>_task<t>`, RING_CONFIG.md §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    pub run_id: u64,
    pub index: u32,
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {}", self.index)
    }
}

/// Which kind of worker a task ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// One L2 chip job (`submit_next_level`) or a group of them.
    NextLevel,
    /// A host function on a sub worker (`submit_sub`) or a group of them.
    Sub,
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskOutcome {
    Success,
    /// Failed itself, or skipped (see `TaskFailure::kind`).
    Failed(TaskFailure),
}

impl TaskOutcome {
    pub fn is_success(&self) -> bool {
        matches!(self, TaskOutcome::Success)
    }
}

/// One group member's (or a single task's) execution on one worker.
#[derive(Clone, Debug)]
pub struct MemberReport {
    /// `chip[0]`, `sub[1]`; empty when the member was never dispatched.
    pub worker: String,
    /// Time the callable ran on the worker (chip: bind and run).
    pub exec_time: Duration,
    /// The chip's report (chip tasks that bound an arena and ran successfully).
    pub chip: Option<ChipRunReport>,
}

/// One task of a run. Times are offsets from the run's start (`submit`).
#[derive(Clone, Debug)]
pub struct TaskReport {
    pub id: TaskId,
    pub label: Option<String>,
    pub kind: TaskKind,
    /// The callable's registered name.
    pub callable: String,
    pub outcome: TaskOutcome,
    /// Producers this task waited for (distinct, not yet consumed at submit), in task order.
    pub producers: Vec<TaskId>,
    pub members: Vec<MemberReport>,
    pub submitted: Duration,
    /// When the last producer finished (or at submit).
    pub ready: Option<Duration>,
    pub dispatched: Option<Duration>,
    pub finished: Option<Duration>,
}

impl TaskReport {
    /// Number of producers (fan-in).
    pub fn fanin(&self) -> usize {
        self.producers.len()
    }

    /// The chip report of a single chip task (member 0).
    pub fn chip_report(&self) -> Option<&ChipRunReport> {
        self.members.first().and_then(|m| m.chip.as_ref())
    }
}

/// Every task of one run, in submission order.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub run_id: u64,
    pub tasks: Vec<TaskReport>,
    /// From `submit` to the run's completion.
    pub wall: Duration,
}

impl RunReport {
    /// The first task with this label.
    pub fn task(&self, label: &str) -> Option<&TaskReport> {
        self.tasks
            .iter()
            .find(|t| t.label.as_deref() == Some(label))
    }
}

/// What `Worker::close` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CloseReport {
    /// Every run finished and every worker thread stopped in time.
    pub graceful: bool,
    /// Runs failed because they did not finish within `close_timeout`.
    pub abandoned_runs: usize,
    /// Worker threads left running past the deadline (a kernel or sub function that never
    /// returned); they are detached.
    pub detached_threads: usize,
}

/// A snapshot of a Worker's live state (`Worker::stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Task slots in use (not yet consumed).
    pub live_tasks: usize,
    /// Runs submitted and not yet completed.
    pub unfinished_runs: usize,
    /// Bytes held by `alloc` slabs, per heap ring.
    pub heap_in_use: [u64; 4],
}
