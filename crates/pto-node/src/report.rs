//! Per-run reports (NODE_RUNTIME.md §1.4): every task's id, label, workers, outcome, timings and,
//! for chip tasks, the full `ChipRunReport` (resolved sizing with provenance, arena outcome,
//! footprint) — how a caller checks that each L2 task bound exactly its own sizing.

use std::fmt;
use std::time::{Duration, Instant};

use pto_chip::ChipRunReport;

use crate::error::TaskFailure;

/// A task of a node run: the run id and the task's index in submission order (0-based).
/// (A chip's own tasks are `pto_chip::TaskId`: ring and local id.)
///
/// The index also names the chip's diagnostics directory (`run<r>_task<t>`, RING_CONFIG.md §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeTaskId {
    pub run_id: u64,
    pub index: u32,
}

impl fmt::Display for NodeTaskId {
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
    /// Node tasks (L4): the inner run's report from the L3 child, every chip task's sizing
    /// included (also when the inner run failed).
    pub inner: Option<Box<RunReport>>,
}

/// One task of a run. Times are offsets from the run's start (`submit`).
#[derive(Clone, Debug)]
pub struct TaskReport {
    pub id: NodeTaskId,
    pub label: Option<String>,
    pub kind: TaskKind,
    /// The callable's registered name.
    pub callable: String,
    pub outcome: TaskOutcome,
    /// Producers this task waited for (distinct, not yet consumed at submit), in task order.
    pub producers: Vec<NodeTaskId>,
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
    /// When `submit` opened the run: task times are offsets from here, so runs compare.
    pub started: Instant,
    /// From `submit` to the run's completion.
    pub wall: Duration,
    /// Every lane of the Worker when the run completed: name, restarts so far, availability
    /// (empty in an L4's copy of an inner run's report).
    pub lanes: Vec<LaneStats>,
}

/// One lane (chip, Worker child or sub worker) of a Worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneStats {
    /// `chip_child[1] pid=4242` (the current child), `sub[0]`.
    pub name: String,
    /// How many times its child process was restarted after dying.
    pub restarts: u32,
    /// False while the lane is dead or being restarted (submits to it are refused).
    pub available: bool,
}

impl RunReport {
    /// The instant `offset` (a task time of this report) stands for.
    pub fn at(&self, offset: Duration) -> Instant {
        self.started + offset
    }

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
    /// Child processes that did not exit within `shutdown_grace` and were killed.
    pub killed_children: usize,
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
    /// Chip (or Worker-child) lanes first, then sub lanes.
    pub lanes: Vec<LaneStats>,
}

/// Wire forms of reports: an L3 child sends its inner run's report to its L4 parent
/// (NODE_RUNTIME.md §6.1; the record is `pto_types::node_wire::run_report`).
pub(crate) mod wire {
    use std::time::{Duration, Instant};

    use pto_chip::memory::ArenaOutcome;
    use pto_chip::{ChipRunReport, RingUsage};
    use pto_types::ErrorCode;
    use pto_types::node_wire::mailbox::{ChipReplyExtra, ReportArea};
    use pto_types::node_wire::run_report::{
        WireChipReport, WireFailure, WireMember, WireRunReport, WireTaskReport,
    };

    use super::{MemberReport, NodeTaskId, RunReport, TaskKind, TaskOutcome, TaskReport};
    use crate::error::{FailureKind, TaskFailure};

    /// The report area and reply extension of a chip run.
    pub(crate) fn chip_to_wire(
        report: &ChipRunReport,
        device_committed: u64,
    ) -> (ReportArea, ChipReplyExtra) {
        let mut area = ReportArea::from_sizing(&report.sizing);
        match report.arena {
            ArenaOutcome::Hit => area.arena_hit = true,
            ArenaOutcome::Miss { evicted } => {
                area.evicted = evicted.min(u32::from(u16::MAX)) as u16
            }
        }
        area.arena_bytes = report.footprint.arena;
        area.device_committed = device_committed;
        let extra = ChipReplyExtra {
            tasks: report.tasks,
            aicpu_threads: report.aicpu_threads,
            wall_ns: report.wall.as_nanos() as u64,
            usage: report
                .usage
                .map(|u| [u.task_window_peak, u.heap_peak, u.dep_pool_peak]),
            diagnostics: report
                .diagnostics
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            warnings: report.warnings.clone(),
        };
        (area, extra)
    }

    /// Rebuilds a chip's run report from its report area and reply extension.
    pub(crate) fn chip_from_wire(
        index: u32,
        label: Option<String>,
        area: &ReportArea,
        extra: ChipReplyExtra,
        env_problems: Vec<String>,
    ) -> Result<ChipRunReport, String> {
        let sizing = area.sizing().map_err(|e| e.to_string())?;
        let pto_chip::Plan {
            sizing,
            derived,
            footprint,
        } = pto_chip::Plan::of(sizing).map_err(|e| e.to_string())?;
        Ok(ChipRunReport {
            chip: index,
            label,
            sizing,
            derived,
            footprint,
            arena: if area.arena_hit {
                ArenaOutcome::Hit
            } else {
                ArenaOutcome::Miss {
                    evicted: u32::from(area.evicted),
                }
            },
            env_problems,
            tasks: extra.tasks,
            usage: extra.usage.map(|[live, heap, dep]| RingUsage {
                task_window_peak: live,
                heap_peak: heap,
                dep_pool_peak: dep,
            }),
            aicpu_threads: extra.aicpu_threads,
            wall: Duration::from_nanos(extra.wall_ns),
            diagnostics: extra.diagnostics.into_iter().map(Into::into).collect(),
            warnings: extra.warnings,
        })
    }

    fn kind_code(k: FailureKind) -> u8 {
        match k {
            FailureKind::Task => 0,
            FailureKind::Bind => 1,
            FailureKind::Endpoint => 2,
            FailureKind::Skipped => 3,
            FailureKind::Orchestration => 4,
            FailureKind::Cancelled => 5,
        }
    }

    fn kind_from(code: u8) -> FailureKind {
        match code {
            1 => FailureKind::Bind,
            2 => FailureKind::Endpoint,
            3 => FailureKind::Skipped,
            4 => FailureKind::Orchestration,
            5 => FailureKind::Cancelled,
            _ => FailureKind::Task,
        }
    }

    fn ns(d: Option<Duration>) -> Option<u64> {
        d.map(|d| d.as_nanos().min(u128::from(u64::MAX - 1)) as u64)
    }

    pub(crate) fn run_to_wire(r: &RunReport) -> WireRunReport {
        WireRunReport {
            run_id: r.run_id,
            wall_ns: r.wall.as_nanos() as u64,
            truncated: false,
            tasks: r
                .tasks
                .iter()
                .map(|t| WireTaskReport {
                    index: t.id.index,
                    label: t.label.clone(),
                    kind: match t.kind {
                        TaskKind::NextLevel => 0,
                        TaskKind::Sub => 1,
                    },
                    callable: t.callable.clone(),
                    failure: match &t.outcome {
                        TaskOutcome::Success => None,
                        TaskOutcome::Failed(f) => Some(WireFailure {
                            kind: kind_code(f.kind),
                            code: f.code.map_or(0, |c| c.code()),
                            worker: f.worker.clone(),
                            message: f.message.clone(),
                        }),
                    },
                    producers: t.producers.iter().map(|p| p.index).collect(),
                    members: t
                        .members
                        .iter()
                        .map(|m| WireMember {
                            worker: m.worker.clone(),
                            exec_ns: m.exec_time.as_nanos() as u64,
                            chip: m.chip.as_ref().map(|c| {
                                let (area, extra) = chip_to_wire(c, 0);
                                WireChipReport {
                                    chip: c.chip,
                                    label: c.label.clone(),
                                    area,
                                    extra,
                                    env_problems: c.env_problems.clone(),
                                }
                            }),
                            inner: m.inner.as_ref().map(|i| Box::new(run_to_wire(i))),
                        })
                        .collect(),
                    times_ns: [
                        ns(Some(t.submitted)),
                        ns(t.ready),
                        ns(t.dispatched),
                        ns(t.finished),
                    ],
                })
                .collect(),
        }
    }

    /// The report of a run of another process. Its `started` is reconstructed as "now minus
    /// its wall time" (instants do not cross processes).
    pub(crate) fn run_from_wire(w: &WireRunReport) -> Result<RunReport, String> {
        let wall = Duration::from_nanos(w.wall_ns);
        let mut tasks = Vec::with_capacity(w.tasks.len());
        for t in &w.tasks {
            let id = NodeTaskId {
                run_id: w.run_id,
                index: t.index,
            };
            let mut members = Vec::with_capacity(t.members.len());
            for m in &t.members {
                let chip = match &m.chip {
                    Some(c) => Some(chip_from_wire(
                        c.chip,
                        c.label.clone(),
                        &c.area,
                        c.extra.clone(),
                        c.env_problems.clone(),
                    )?),
                    None => None,
                };
                let inner = match &m.inner {
                    Some(i) => Some(Box::new(run_from_wire(i)?)),
                    None => None,
                };
                members.push(MemberReport {
                    worker: m.worker.clone(),
                    exec_time: Duration::from_nanos(m.exec_ns),
                    chip,
                    inner,
                });
            }
            let time = |i: usize| t.times_ns[i].map(Duration::from_nanos);
            tasks.push(TaskReport {
                id,
                label: t.label.clone(),
                kind: if t.kind == 1 {
                    TaskKind::Sub
                } else {
                    TaskKind::NextLevel
                },
                callable: t.callable.clone(),
                outcome: match &t.failure {
                    None => TaskOutcome::Success,
                    Some(f) => TaskOutcome::Failed(TaskFailure {
                        task: Some(id),
                        label: t.label.clone(),
                        worker: f.worker.clone(),
                        kind: kind_from(f.kind),
                        code: ErrorCode::from_code(f.code),
                        message: f.message.clone(),
                    }),
                },
                producers: t
                    .producers
                    .iter()
                    .map(|&index| NodeTaskId {
                        run_id: w.run_id,
                        index,
                    })
                    .collect(),
                members,
                submitted: time(0).unwrap_or_default(),
                ready: time(1),
                dispatched: time(2),
                finished: time(3),
            });
        }
        let now = Instant::now();
        Ok(RunReport {
            run_id: w.run_id,
            tasks,
            started: now.checked_sub(wall).unwrap_or(now),
            wall,
            lanes: Vec::new(),
        })
    }
}
