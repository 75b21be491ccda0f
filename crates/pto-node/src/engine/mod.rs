//! The engine: task slots, per-run TensorMaps, the run FIFO and the ready queues, all behind
//! **one** mutex (NODE_RUNTIME.md §2).
//!
//! Every method of [`EngineState`] runs with the engine lock held, taken once per submit (after
//! validation), once per batch of completions and dispatches, and once per scope end. That is
//! what makes these invariants easy to keep:
//!
//! 1. **Exactly-once readiness.** A task's `fanin_count` (live producers at publication) and
//!    every producer's `fanin_done += 1` are written under the lock, so a producer finishing
//!    mid-submit is counted once — as not live, or as done (§2.5 step 8).
//! 2. **State machine** (§2.6): `Free → Building → Pending | Ready → Running → Completed |
//!    Failed → (consumed) Free`; `Failed` also from `Building` (producer already failed),
//!    `Pending`/`Ready` (poisoned or cancelled). A running task is never cancelled.
//! 3. **References** (§2.7): one scope reference, one per consumer, plus the task's own terminal
//!    self-release; a task is consumed when terminal and `refs_released == refs_total + 1`:
//!    its TensorMap entries are erased, its buffers dropped, its run's `active` decremented,
//!    its slot recycled with `generation + 1`. Poisoning uses a work list, never recursion.
//! 4. **Runs** (§2.9): a FIFO; only the head run's ready tasks are queued, later runs' wait in
//!    `deferred_ready`; a run completes when its submission is closed and `active == 0`, and
//!    only at the head, so runs complete in order and an empty run completes at close.
//!
//! Queues for the head run (§3.1): `directed[w]` per chip, `groups`, `subs`; the scheduler
//! thread drains them in [`EngineState::dispatch_pass`].

pub(crate) mod tensormap;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use pto_chip::ChipRunReport;
use pto_types::wait::EventCount;
use pto_types::{CallConfig, ErrorCode, TaskArgs, TensorTag};

use crate::buffer::BufferInner;
use crate::callable::CallableKind;
use crate::endpoint::{
    Completion, ControlCmd, ControlReply, Death, EndpointError, Failure, TaskRequest,
};
use crate::error::{FailureKind, RunError, SubmitError, TaskFailure};
use crate::report::{
    LaneStats, MemberReport, NodeTaskId, RunReport, TaskKind, TaskOutcome, TaskReport,
};
use crate::shm::doorbell::Doorbell;
use tensormap::{BufferKey, Entries, EntryHandle, TensorMap};

/// A task slot: index into the slab and the generation it was claimed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SlotId {
    index: u32,
    generation: u32,
}

impl SlotId {
    /// The slot's generation (the low half of a frame's task id).
    pub(crate) fn generation(self) -> u32 {
        self.generation
    }

    /// Slot `index`, generation 0: task identities for `bench_support` only.
    #[cfg(feature = "bench-internals")]
    pub(crate) fn for_bench(index: u32) -> SlotId {
        SlotId {
            index,
            generation: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Building,
    Pending,
    Ready,
    Running,
    Completed,
    Failed,
}

impl State {
    fn is_terminal(self) -> bool {
        matches!(self, State::Completed | State::Failed)
    }
}

/// A lane of the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    Chip(usize),
    Sub(usize),
}

/// Where a task runs.
#[derive(Clone, Debug)]
pub(crate) enum Placement {
    /// Member i on chip `workers[i]`.
    Chips(Vec<usize>),
    /// `size` distinct sub lanes, chosen at dispatch.
    Subs(usize),
}

/// One tensor access of a task, computed at validation.
#[derive(Clone, Debug)]
pub(crate) struct Access {
    pub(crate) tag: TensorTag,
    pub(crate) key: BufferKey,
    pub(crate) geometry: pto_types::geometry::Geometry,
}

/// A validated task, ready for the engine.
pub(crate) struct NewTask {
    pub(crate) kind: TaskKind,
    pub(crate) callable_id: u32,
    pub(crate) callable: Arc<str>,
    pub(crate) label: Option<String>,
    pub(crate) config: Option<CallConfig>,
    /// Per member: the args and the buffer behind each tensor.
    pub(crate) members: Vec<(TaskArgs, Vec<Arc<BufferInner>>)>,
    pub(crate) placement: Placement,
    /// Every member's accesses (non-empty tensors only).
    pub(crate) accesses: Vec<Access>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemberState {
    NotDispatched,
    Running,
    Success,
    Failed,
}

struct Member {
    args: TaskArgs,
    buffers: Vec<Arc<BufferInner>>,
    lane: Option<Lane>,
    state: MemberState,
    exec_time: Duration,
    chip: Option<Box<ChipRunReport>>,
    inner: Option<Box<RunReport>>,
    failure: Option<Failure>,
}

impl Member {
    /// A member with its args and buffers, not yet handed to a lane.
    fn not_dispatched(args: TaskArgs, buffers: Vec<Arc<BufferInner>>) -> Member {
        Member {
            args,
            buffers,
            lane: None,
            state: MemberState::NotDispatched,
            exec_time: Duration::ZERO,
            chip: None,
            inner: None,
            failure: None,
        }
    }
}

struct Slot {
    generation: u32,
    state: State,
    run_id: u64,
    index: u32,
    label: Option<String>,
    kind: TaskKind,
    callable_id: u32,
    callable: Arc<str>,
    config: Option<CallConfig>,
    members: Vec<Member>,
    placement: Placement,
    fanin_count: u32,
    fanin_done: u32,
    producers: Vec<SlotId>,
    producer_ids: Vec<NodeTaskId>,
    consumers: Vec<SlotId>,
    refs_total: u32,
    refs_released: u32,
    output_keys: Vec<EntryHandle>,
    /// Distinct buffers, each holding one task use until the task is terminal.
    buffers: Vec<Arc<BufferInner>>,
    failure: Option<TaskFailure>,
    submitted: Instant,
    ready: Option<Instant>,
    dispatched: Option<Instant>,
    finished: Option<Instant>,
}

impl Slot {
    /// A FREE slot. `since` fills the submit time nobody reads until the slot is built again:
    /// a consumed slot passes its own, since a clock read per consumed task is not free.
    fn free(since: Instant) -> Slot {
        Slot {
            generation: 0,
            state: State::Free,
            run_id: 0,
            index: 0,
            label: None,
            kind: TaskKind::Sub,
            callable_id: 0,
            callable: no_callable(),
            config: None,
            members: Vec::new(),
            placement: Placement::Subs(0),
            fanin_count: 0,
            fanin_done: 0,
            producers: Vec::new(),
            producer_ids: Vec::new(),
            consumers: Vec::new(),
            refs_total: 0,
            refs_released: 0,
            output_keys: Vec::new(),
            buffers: Vec::new(),
            failure: None,
            submitted: since,
            ready: None,
            dispatched: None,
            finished: None,
        }
    }

    /// The BUILDING slot `me` of task `task_index` of run `run_id`, not yet wired.
    fn building(
        me: SlotId,
        run_id: u64,
        task_index: u32,
        new: NewTask,
        output_keys: Vec<EntryHandle>,
        buffers: Vec<Arc<BufferInner>>,
        now: Instant,
    ) -> Slot {
        let members = new
            .members
            .into_iter()
            .map(|(args, bufs)| Member::not_dispatched(args, bufs))
            .collect();
        Slot {
            generation: me.generation,
            state: State::Building,
            run_id,
            index: task_index,
            label: new.label,
            kind: new.kind,
            callable_id: new.callable_id,
            callable: new.callable,
            config: new.config,
            members,
            placement: new.placement,
            fanin_count: 0,
            fanin_done: 0,
            producers: Vec::new(),
            producer_ids: Vec::new(),
            consumers: Vec::new(),
            refs_total: 1,
            refs_released: 0,
            output_keys,
            buffers,
            failure: None,
            submitted: now,
            ready: None,
            dispatched: None,
            finished: None,
        }
    }

    fn task_id(&self) -> NodeTaskId {
        NodeTaskId {
            run_id: self.run_id,
            index: self.index,
        }
    }
}

/// The callable name of a free slot: one shared empty name (slots are recycled per task).
fn no_callable() -> Arc<str> {
    static EMPTY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    Arc::clone(EMPTY.get_or_init(|| Arc::from("")))
}

/// Where a run's result is published; `RunHandle`s wait on it.
pub(crate) struct RunFence {
    pub(crate) run_id: u64,
    pub(crate) result: Mutex<Option<Result<RunReport, RunError>>>,
    pub(crate) done: EventCount,
}

struct RunState {
    id: u64,
    started: Instant,
    /// Submission still open (the orchestration function is running).
    building: bool,
    /// Tasks not yet consumed.
    active: u32,
    next_index: u32,
    first_error: Option<TaskFailure>,
    failed: u32,
    skipped: u32,
    tensormap: TensorMap,
    deferred_ready: Vec<SlotId>,
    reports: Vec<Option<TaskReport>>,
    fence: Arc<RunFence>,
    /// Set when the run is cancelled; every request carries it, so a task already queued on
    /// an in-process lane is skipped instead of run (`endpoint::in_process`).
    cancelled: Arc<AtomicBool>,
}

impl RunState {
    fn record_failure(&mut self, f: &TaskFailure) {
        if f.kind == FailureKind::Skipped {
            self.skipped += 1;
        } else {
            self.failed += 1;
        }
        let replace = match &self.first_error {
            None => true,
            // A real failure outranks the skips it caused (cancellation records a skip first).
            Some(first) => first.kind == FailureKind::Skipped && f.kind != FailureKind::Skipped,
        };
        if replace {
            self.first_error = Some(f.clone());
        }
    }

    fn report(&self) -> RunReport {
        RunReport {
            run_id: self.id,
            tasks: self.reports.iter().flatten().cloned().collect(),
            started: self.started,
            wall: self.started.elapsed(),
            lanes: Vec::new(),
        }
    }

    /// The run's result, its task reports moved (not copied) into it.
    // The fence stores exactly this type, once per run.
    #[allow(clippy::result_large_err)]
    fn into_result(mut self, lanes: Vec<LaneStats>) -> Result<RunReport, RunError> {
        // Sized once: a collect through `flatten` cannot know the length, and growing by
        // doubling copied the reports and faulted fresh pages in at every step (a tenth of a
        // lane thread's samples in runs of 1024 no-op sub tasks, BENCHMARKS.md stop 47).
        let mut tasks = Vec::with_capacity(self.reports.len());
        tasks.extend(self.reports.drain(..).flatten());
        let report = RunReport {
            run_id: self.id,
            tasks,
            started: self.started,
            wall: self.started.elapsed(),
            lanes,
        };
        match self.first_error.take() {
            None => Ok(report),
            Some(first) => Err(RunError {
                run_id: self.id,
                first,
                failed: self.failed,
                skipped: self.skipped,
                report: Box::new(report),
            }),
        }
    }

    fn error(&self) -> Option<RunError> {
        let first = self.first_error.clone()?;
        Some(RunError {
            run_id: self.id,
            first,
            failed: self.failed,
            skipped: self.skipped,
            report: Box::new(self.report()),
        })
    }
}

/// A control command for one lane, queued by an API thread (NODE_RUNTIME.md §1.6).
pub(crate) struct ControlJob {
    pub(crate) lane: Lane,
    pub(crate) cmd: ControlCmd,
    pub(crate) reply: Arc<ControlSlot>,
}

/// The one-shot reply of a [`ControlJob`].
#[derive(Default)]
pub(crate) struct ControlSlot {
    pub(crate) value: Mutex<Option<Result<ControlReply, EndpointError>>>,
    pub(crate) done: EventCount,
}

impl ControlSlot {
    pub(crate) fn set(&self, r: Result<ControlReply, EndpointError>) {
        *self.value.lock() = Some(r);
        self.done.notify_all();
    }
}

/// What a lane can take in one dispatch pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LaneRoom {
    /// Tasks it accepts (its depth minus its tasks in flight).
    pub(crate) room: usize,
    /// Nothing in flight: a group member may start here.
    pub(crate) idle: bool,
}

impl LaneRoom {
    fn take(&mut self) {
        self.room = self.room.saturating_sub(1);
        self.idle = false;
    }
}

/// One task (member) to hand to a lane.
pub(crate) struct Dispatch {
    pub(crate) lane: Lane,
    pub(crate) req: TaskRequest,
}

/// Options the engine needs.
pub(crate) struct EngineConfig {
    pub(crate) chip_names: Vec<String>,
    pub(crate) sub_names: Vec<String>,
    pub(crate) track_war: bool,
    /// What next-level tasks run: chip callables at L3, node callables at L4.
    pub(crate) next_level_kind: CallableKind,
}

/// Why a lane takes no work, and the code of the death that made it so (none for a cause
/// that is not a death).
#[derive(Clone, Debug)]
pub(crate) struct Unavailable {
    /// The lane's name when it died (`sub_child[0] pid=4243`): the process that died.
    pub(crate) who: String,
    pub(crate) cause: String,
    pub(crate) code: Option<ErrorCode>,
}

/// Most report slots a new run starts with (`EngineState::report_capacity`): larger runs grow
/// their list as before, and a run after a 100k-task one does not reserve tens of MiB.
const REPORT_CAPACITY_MAX: usize = 4096;

/// All graph state (§2.1).
pub(crate) struct EngineState {
    config: EngineConfig,
    slots: Vec<Slot>,
    free: Vec<u32>,
    runs: VecDeque<RunState>,
    next_run_id: u64,
    directed: Vec<VecDeque<SlotId>>,
    groups: VecDeque<SlotId>,
    subs: VecDeque<SlotId>,
    /// Why each lane is unavailable (dead, restarting), if it is, and the code of the death
    /// that made it so.
    dead_chips: Vec<Option<Unavailable>>,
    dead_subs: Vec<Option<Unavailable>>,
    restarts_chips: Vec<u32>,
    restarts_subs: Vec<u32>,
    pub(crate) controls: VecDeque<ControlJob>,
    /// Lanes whose child must be killed (a control command timed out), with why.
    pub(crate) kills: Vec<(Lane, String)>,
    /// Set by `close`: the scheduler stops once no lane is busy.
    pub(crate) stop: bool,
    /// Tasks of the last run that completed, at most [`REPORT_CAPACITY_MAX`]: a new run's
    /// report list starts that long, so runs of the same size never grow it while they submit.
    report_capacity: usize,
    /// `finish`'s work list, empty between calls.
    finish_work: Vec<(SlotId, Option<TaskFailure>)>,
    doorbell: Arc<Doorbell>,
    runs_changed: Arc<EventCount>,
}

/// The engine lock and the two event counts around it.
pub(crate) struct Engine {
    /// Taken through [`Engine::lock_state`].
    state: Mutex<EngineState>,
    /// The scheduler's doorbell: new ready work, completions, control, stop.
    pub(crate) doorbell: Arc<Doorbell>,
    /// Bumped when a run completes (submit back-pressure, close).
    pub(crate) runs_changed: Arc<EventCount>,
}

/// Spin rounds before the engine lock blocks ([`pto_types::wait::spin_then`]): its holds are
/// a submit, a scope's release or a scheduler pass, a few µs at most, while a blocked
/// `parking_lot` lock parks after a few rounds; with lanes passing every 16 short tasks, the
/// submitting thread parked on it for 31 % of its samples (BENCHMARKS.md, stop 42).
const STATE_LOCK_SPINS: u32 = 512;

impl Engine {
    /// Locks the engine state, spinning first ([`STATE_LOCK_SPINS`]).
    pub(crate) fn lock_state(&self) -> MutexGuard<'_, EngineState> {
        pto_types::wait::spin_then(
            STATE_LOCK_SPINS,
            || {
                if self.state.is_locked() {
                    None
                } else {
                    self.state.try_lock()
                }
            },
            || self.state.lock(),
        )
    }

    pub(crate) fn new(config: EngineConfig) -> Engine {
        let doorbell = Arc::new(Doorbell::new());
        let runs_changed = Arc::new(EventCount::new());
        let chips = config.chip_names.len();
        let subs = config.sub_names.len();
        Engine {
            state: Mutex::new(EngineState {
                config,
                slots: Vec::new(),
                free: Vec::new(),
                runs: VecDeque::new(),
                next_run_id: 1,
                directed: (0..chips).map(|_| VecDeque::new()).collect(),
                groups: VecDeque::new(),
                subs: VecDeque::new(),
                dead_chips: vec![None; chips],
                dead_subs: vec![None; subs],
                restarts_chips: vec![0; chips],
                restarts_subs: vec![0; subs],
                controls: VecDeque::new(),
                kills: Vec::new(),
                stop: false,
                report_capacity: 0,
                finish_work: Vec::new(),
                doorbell: Arc::clone(&doorbell),
                runs_changed: Arc::clone(&runs_changed),
            }),
            doorbell,
            runs_changed,
        }
    }
}

impl EngineState {
    fn lane_name(&self, lane: Lane) -> String {
        match lane {
            Lane::Chip(w) => self.config.chip_names[w].clone(),
            Lane::Sub(s) => self.config.sub_names[s].clone(),
        }
    }

    fn slot(&self, id: SlotId) -> Option<&Slot> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation && s.state != State::Free)
    }

    fn slot_mut(&mut self, id: SlotId) -> Option<&mut Slot> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation && s.state != State::Free)
    }

    fn run_mut(&mut self, run_id: u64) -> Option<&mut RunState> {
        self.runs.iter_mut().find(|r| r.id == run_id)
    }

    pub(crate) fn is_head(&self, run_id: u64) -> bool {
        self.runs.front().is_some_and(|r| r.id == run_id)
    }

    /// Adds a next-level lane (an L4's Worker child) named `name`.
    pub(crate) fn add_next_level_lane(&mut self, name: String) {
        self.config.chip_names.push(name);
        self.directed.push(VecDeque::new());
        self.dead_chips.push(None);
        self.restarts_chips.push(0);
    }

    /// Renames the lanes (child processes are named with their pids once started).
    pub(crate) fn set_lane_names(&mut self, chips: Vec<String>, subs: Vec<String>) {
        self.config.chip_names = chips;
        self.config.sub_names = subs;
    }

    /// Runs submitted and not yet completed.
    pub(crate) fn unfinished_runs(&self) -> usize {
        self.runs.len()
    }

    /// Slots in use.
    pub(crate) fn live_tasks(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Opens a run at the tail of the FIFO.
    pub(crate) fn open_run(&mut self) -> Arc<RunFence> {
        let id = self.next_run_id;
        self.next_run_id += 1;
        let fence = Arc::new(RunFence {
            run_id: id,
            result: Mutex::new(None),
            done: EventCount::new(),
        });
        self.runs.push_back(RunState {
            id,
            started: Instant::now(),
            building: true,
            active: 0,
            next_index: 0,
            first_error: None,
            failed: 0,
            skipped: 0,
            tensormap: TensorMap::default(),
            deferred_ready: Vec::new(),
            reports: Vec::with_capacity(self.report_capacity),
            fence: Arc::clone(&fence),
            cancelled: Arc::new(AtomicBool::new(false)),
        });
        fence
    }

    /// The run's error so far (fail-fast), if a task failed.
    pub(crate) fn run_error(&mut self, run_id: u64) -> Option<RunError> {
        self.runs.iter().find(|r| r.id == run_id)?.error()
    }

    /// Whether a task of the run has already failed (or the run was cancelled).
    pub(crate) fn run_has_failed(&self, run_id: u64) -> bool {
        self.runs
            .iter()
            .any(|r| r.id == run_id && r.first_error.is_some())
    }

    /// Entries of a run's TensorMap (diagnostics and tests).
    pub(crate) fn tensormap_len(&self, run_id: u64) -> usize {
        self.runs
            .iter()
            .find(|r| r.id == run_id)
            .map_or(0, |r| r.tensormap.len())
    }

    /// Closes a run's submission (its function returned).
    pub(crate) fn close_submission(&mut self, run_id: u64) {
        if let Some(run) = self.run_mut(run_id) {
            run.building = false;
        }
        self.complete_runs();
    }

    /// Orchestration error or panic (§2.10): every task of the run that has not started is
    /// failed as skipped ("cancelled"); running tasks finish. Submission stays open until
    /// `close_submission`.
    /// `code`: the numbered code behind the orchestration's error, if any
    /// ([`crate::OrchError::code`]).
    pub(crate) fn cancel_run(&mut self, run_id: u64, message: &str, code: Option<ErrorCode>) {
        self.cancel_unstarted(
            run_id,
            FailureKind::Orchestration,
            message,
            "cancelled: the orchestration function failed",
            code,
        );
    }

    /// `RunHandle::cancel`: the run's unstarted tasks are failed as skipped, running tasks
    /// finish, and the run completes with a `Cancelled` failure.
    pub(crate) fn cancel_by_caller(&mut self, run_id: u64, reason: &str) {
        let message = format!("cancelled: {reason}");
        self.cancel_unstarted(run_id, FailureKind::Cancelled, &message, &message, None);
        self.complete_runs();
    }

    fn cancel_unstarted(
        &mut self,
        run_id: u64,
        kind: FailureKind,
        message: &str,
        skip: &str,
        code: Option<ErrorCode>,
    ) {
        let failure = TaskFailure {
            task: None,
            label: None,
            worker: String::new(),
            kind,
            code,
            message: message.to_string(),
        };
        if let Some(run) = self.run_mut(run_id) {
            run.record_failure(&failure);
            run.failed = run.failed.saturating_sub(1);
            run.cancelled.store(true, Ordering::Release);
        }
        let victims: Vec<SlotId> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.run_id == run_id && matches!(s.state, State::Pending | State::Ready))
            .map(|(i, s)| SlotId {
                index: i as u32,
                generation: s.generation,
            })
            .collect();
        for id in victims {
            let Some(s) = self.slot(id) else { continue };
            if !matches!(s.state, State::Pending | State::Ready) {
                continue; // poisoned by an earlier victim
            }
            let f = skipped(s, skip.to_string());
            self.finish(id, Some(f));
        }
    }

    /// Fails every unfinished run (close timed out); running tasks are abandoned.
    pub(crate) fn abandon_runs(&mut self, message: &str) -> usize {
        let ids: Vec<u64> = self.runs.iter().map(|r| r.id).collect();
        for &run_id in &ids {
            // Running tasks first: their failures name the stuck lanes and lead the run's error.
            let running: Vec<SlotId> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.run_id == run_id && s.state == State::Running)
                .map(|(i, s)| SlotId {
                    index: i as u32,
                    generation: s.generation,
                })
                .collect();
            for id in running {
                let Some(s) = self.slot(id) else { continue };
                // Name the lanes still running it: they are what kept the run from finishing.
                let stuck: Vec<String> = s
                    .members
                    .iter()
                    .filter(|m| m.state == MemberState::Running)
                    .filter_map(|m| m.lane.map(|l| self.lane_name(l)))
                    .collect();
                let f = TaskFailure {
                    task: Some(s.task_id()),
                    label: s.label.clone(),
                    worker: stuck.join(", "),
                    kind: FailureKind::Endpoint,
                    code: None,
                    message: format!("{message} (still running on {})", stuck.join(", ")),
                };
                self.finish(id, Some(f));
            }
            self.cancel_run(run_id, message, None);
            // Drop every remaining reference so the run's tasks are consumed.
            let held: Vec<SlotId> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.run_id == run_id && s.state.is_terminal())
                .map(|(i, s)| SlotId {
                    index: i as u32,
                    generation: s.generation,
                })
                .collect();
            for id in held {
                if let Some(s) = self.slot_mut(id) {
                    s.refs_released = s.refs_total + 1;
                }
                self.try_consume(id);
            }
            if let Some(run) = self.run_mut(run_id) {
                run.building = false;
                run.active = 0;
            }
        }
        self.complete_runs();
        ids.len()
    }

    /// Submit steps 2–8 of §2.5 for a validated task; returns its id.
    pub(crate) fn submit(
        &mut self,
        run_id: u64,
        new: NewTask,
    ) -> Result<(NodeTaskId, SlotId), SubmitError> {
        self.check_submittable(run_id, &new.placement)?;
        let buffers = acquire_buffers(&new.members)?;
        let index = self.claim_slot();
        let track_war = self.config.track_war;
        let generation = self.slots[index as usize].generation;
        let me = SlotId { index, generation };
        let Some(run) = self.runs.iter_mut().find(|r| r.id == run_id && r.building) else {
            release_buffers(&buffers);
            self.free.push(index);
            return Err(SubmitError::WorkerUnavailable {
                worker: "this Worker".to_string(),
                cause: "the run was abandoned (the Worker is closing)".to_string(),
                code: None,
            });
        };
        let task_index = run.next_index;
        run.next_index += 1;
        run.active += 1;
        run.reports.push(None);
        // Dependencies: look up producers before inserting this task's own entries.
        let mut producers = lookup_producers(&mut run.tensormap, &new.accesses);
        let output_keys = insert_accesses(&mut run.tensormap, &new.accesses, track_war, me);
        producers.sort_by_key(|p| (p.index, p.generation));
        producers.dedup();
        producers.retain(|p| *p != me);
        let now = Instant::now();
        self.slots[index as usize] =
            Slot::building(me, run_id, task_index, new, output_keys, buffers, now);
        let (live, poisoned) = self.wire_fanin(me, producers);
        let id = self.slots[index as usize].task_id();
        self.publish(me, live, poisoned, now);
        Ok((id, me))
    }

    /// Fail-fast checks: the run has not failed and the task's lanes are alive.
    fn check_submittable(&mut self, run_id: u64, placement: &Placement) -> Result<(), SubmitError> {
        if let Some(e) = self.run_error(run_id) {
            return Err(SubmitError::RunFailed(Box::new(e)));
        }
        if let Placement::Chips(workers) = placement {
            for &w in workers {
                if let Some(u) = &self.dead_chips[w] {
                    return Err(SubmitError::WorkerUnavailable {
                        worker: self.config.chip_names[w].clone(),
                        cause: u.cause.clone(),
                        code: u.code,
                    });
                }
            }
        }
        if matches!(placement, Placement::Subs(_)) && self.dead_subs.iter().all(Option::is_some) {
            // Each death names its process, so the error says which children died and how.
            let deaths: Vec<String> = self
                .dead_subs
                .iter()
                .flatten()
                .map(|u| format!("{} {}", u.who, u.cause))
                .collect();
            return Err(SubmitError::WorkerUnavailable {
                worker: "sub workers".to_string(),
                cause: format!("every sub worker is dead ({})", deaths.join("; ")),
                code: self.dead_subs.iter().flatten().find_map(|u| u.code),
            });
        }
        Ok(())
    }

    /// Claims a slot (FREE → BUILDING): a recycled one, else a new one at the end.
    fn claim_slot(&mut self) -> u32 {
        match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot::free(Instant::now()));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Wires `me` into its producers' consumer lists; returns its live fan-in and the first
    /// failed producer, if any.
    fn wire_fanin(
        &mut self,
        me: SlotId,
        producers: Vec<SlotId>,
    ) -> (u32, Option<(NodeTaskId, Option<String>)>) {
        let mut live = 0u32;
        let mut poisoned: Option<(NodeTaskId, Option<String>)> = None;
        let mut wired = Vec::new();
        let mut wired_ids = Vec::new();
        for p in producers {
            let Some(ps) = self.slot_mut(p) else {
                continue; // consumed
            };
            ps.consumers.push(me);
            ps.refs_total += 1;
            wired.push(p);
            wired_ids.push(ps.task_id());
            match ps.state {
                State::Failed => {
                    poisoned.get_or_insert((ps.task_id(), ps.label.clone()));
                }
                State::Completed => {}
                _ => live += 1,
            }
        }
        let slot = &mut self.slots[me.index as usize];
        slot.producers = wired;
        slot.producer_ids = wired_ids;
        slot.fanin_count = live;
        (live, poisoned)
    }

    /// Publishes a wired task: skipped if a producer failed, else READY or PENDING.
    fn publish(
        &mut self,
        me: SlotId,
        live: u32,
        poisoned: Option<(NodeTaskId, Option<String>)>,
        now: Instant,
    ) {
        let slot = &mut self.slots[me.index as usize];
        if let Some((task, label)) = poisoned {
            let f = skipped(slot, producer_failed(task, label.as_deref()));
            self.finish(me, Some(f));
        } else if live == 0 {
            slot.state = State::Ready;
            slot.ready = Some(now);
            self.route(me);
        } else {
            slot.state = State::Pending;
        }
    }

    /// Queues a READY task: the head run's go to the scheduler's queues, later runs' wait.
    fn route(&mut self, id: SlotId) {
        let Some(slot) = self.slot(id) else { return };
        let run_id = slot.run_id;
        if !self.is_head(run_id) {
            if let Some(run) = self.run_mut(run_id) {
                run.deferred_ready.push(id);
            }
            return;
        }
        match &slot.placement {
            Placement::Chips(workers) if workers.len() == 1 => {
                let w = workers[0];
                self.directed[w].push_back(id);
            }
            Placement::Chips(_) => self.groups.push_back(id),
            Placement::Subs(_) => self.subs.push_back(id),
        }
        self.doorbell.notify_one();
    }

    /// Drops one scope reference of each task (a scope ended).
    pub(crate) fn release_scope(&mut self, ids: &[SlotId]) {
        for &id in ids {
            self.release(id);
        }
        self.complete_runs();
    }

    fn release(&mut self, id: SlotId) {
        if let Some(s) = self.slot_mut(id) {
            s.refs_released += 1;
        }
        self.try_consume(id);
    }

    fn try_consume(&mut self, id: SlotId) {
        let Some(s) = self.slot(id) else { return };
        if !s.state.is_terminal() || s.refs_released < s.refs_total + 1 {
            return;
        }
        let since = s.submitted;
        let slot = std::mem::replace(&mut self.slots[id.index as usize], Slot::free(since));
        self.slots[id.index as usize].generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        if let Some(run) = self.run_mut(slot.run_id) {
            for &entry in &slot.output_keys {
                run.tensormap.erase(entry, id);
            }
            run.active -= 1;
        }
        // `slot` (its buffers and args) drops here.
    }

    /// Marks a task terminal and propagates: consumers get `fanin_done` (success) or are
    /// poisoned (failure, through a work list); the task and its producers are released.
    fn finish(&mut self, start: SlotId, failure: Option<TaskFailure>) {
        // The work list is kept between calls: a finish per task, and most lists hold one item.
        let mut work = std::mem::take(&mut self.finish_work);
        work.push((start, failure));
        while let Some((id, failure)) = work.pop() {
            let now = Instant::now();
            let Some(slot) = self.slot_mut(id) else {
                continue;
            };
            if slot.state.is_terminal() {
                continue;
            }
            slot.state = if failure.is_some() {
                State::Failed
            } else {
                State::Completed
            };
            slot.finished = Some(now);
            slot.failure = failure.clone();
            for b in &slot.buffers {
                b.release_task();
            }
            let run_id = slot.run_id;
            let task = slot.task_id();
            let label = slot.label.clone();
            // A terminal slot's edges are never read again (wiring only appends to them).
            let consumers = std::mem::take(&mut slot.consumers);
            let producers = std::mem::take(&mut slot.producers);
            let report = self.task_report(id);
            if let Some(run) = self.run_mut(run_id) {
                if let Some(f) = &failure {
                    run.record_failure(f);
                }
                if let Some(r) = report {
                    run.reports[task.index as usize] = Some(r);
                }
            }
            for c in consumers {
                let Some(cs) = self.slot_mut(c) else { continue };
                match &failure {
                    None => {
                        cs.fanin_done += 1;
                        if cs.state == State::Pending && cs.fanin_done == cs.fanin_count {
                            cs.state = State::Ready;
                            cs.ready = Some(now);
                            self.route(c);
                        }
                    }
                    Some(_) => {
                        if matches!(cs.state, State::Pending | State::Ready) {
                            let f = skipped(cs, producer_failed(task, label.as_deref()));
                            work.push((c, Some(f)));
                        }
                    }
                }
            }
            self.release(id);
            for p in producers {
                self.release(p);
            }
        }
        self.finish_work = work;
        self.complete_runs();
    }

    /// The report of task `id`, which just became terminal: its members' chip reports and
    /// inner reports move into it (nothing reads them from the slot afterwards).
    fn task_report(&mut self, id: SlotId) -> Option<TaskReport> {
        let mut members = std::mem::take(&mut self.slot_mut(id)?.members);
        let member_reports = members
            .iter_mut()
            .map(|m| MemberReport {
                worker: m.lane.map(|l| self.lane_name(l)).unwrap_or_default(),
                exec_time: m.exec_time,
                chip: m.chip.take().map(|c| *c),
                inner: m.inner.take(),
            })
            .collect();
        self.slot_mut(id)?.members = members;
        let s = self.slot(id)?;
        let run = self.runs.iter().find(|r| r.id == s.run_id)?;
        let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(run.started));
        Some(TaskReport {
            id: s.task_id(),
            label: s.label.clone(),
            kind: s.kind,
            callable: String::from(&*s.callable),
            outcome: match &s.failure {
                None => TaskOutcome::Success,
                Some(f) => TaskOutcome::Failed(f.clone()),
            },
            producers: s.producer_ids.clone(),
            members: member_reports,
            submitted: s.submitted.saturating_duration_since(run.started),
            ready: since(s.ready),
            dispatched: since(s.dispatched),
            finished: since(s.finished),
        })
    }

    /// Completes finished runs at the head of the FIFO and promotes the next head.
    fn complete_runs(&mut self) {
        let mut changed = false;
        while let Some(head) = self.runs.front() {
            if head.building || head.active > 0 {
                break;
            }
            let run = self.runs.pop_front().expect("head exists");
            self.report_capacity = run.reports.len().min(REPORT_CAPACITY_MAX);
            let lanes = self.lane_stats();
            let fence = Arc::clone(&run.fence);
            let result = run.into_result(lanes);
            *fence.result.lock() = Some(result);
            fence.done.notify_all();
            changed = true;
            // Promote the next head: its deferred READY tasks enter the queues.
            let deferred = match self.runs.front_mut() {
                Some(next) => std::mem::take(&mut next.deferred_ready),
                None => Vec::new(),
            };
            for id in deferred {
                if self.slot(id).is_some_and(|s| s.state == State::Ready) {
                    self.route(id);
                }
            }
        }
        if changed {
            self.runs_changed.notify_all();
            self.doorbell.notify_one();
        }
    }

    /// One dispatch pass (§3.2): fills the lanes' room, using it up in the slices. Group
    /// members start only on idle lanes (members that may wait for each other never queue
    /// behind other work); single tasks queue behind whatever their lane runs.
    pub(crate) fn dispatch_pass(
        &mut self,
        chips: &mut [LaneRoom],
        subs: &mut [LaneRoom],
    ) -> Vec<Dispatch> {
        let mut out = Vec::new();
        let mut reserved = vec![false; chips.len()];
        self.dispatch_groups(chips, &mut reserved, &mut out);
        // 2. Singles, per chip in id order.
        for w in 0..chips.len() {
            if reserved[w] {
                continue;
            }
            while chips[w].room > 0 {
                let Some(id) = self.directed[w].pop_front() else {
                    break;
                };
                if self.slot(id).is_some_and(|s| s.state == State::Ready) {
                    chips[w].take();
                    self.start(id, &[Lane::Chip(w)], &mut out);
                }
            }
        }
        self.dispatch_subs(subs, &mut out);
        out
    }

    /// Step 1, the group head: all targets idle, or it reserves them and blocks the groups
    /// behind it.
    fn dispatch_groups(
        &mut self,
        chips: &mut [LaneRoom],
        reserved: &mut [bool],
        out: &mut Vec<Dispatch>,
    ) {
        while let Some(&id) = self.groups.front() {
            let Some(slot) = self.slot(id).filter(|s| s.state == State::Ready) else {
                self.groups.pop_front();
                continue;
            };
            let Placement::Chips(targets) = &slot.placement else {
                unreachable!("groups hold chip groups")
            };
            let targets = targets.clone();
            if targets.iter().all(|&w| chips[w].idle) {
                self.groups.pop_front();
                for &w in &targets {
                    chips[w].take();
                }
                let lanes: Vec<Lane> = targets.into_iter().map(Lane::Chip).collect();
                self.start(id, &lanes, out);
            } else {
                for &w in &targets {
                    reserved[w] = true;
                }
                break;
            }
        }
    }

    /// Step 3, the sub queue: the head takes the least loaded lane (a group: that many idle
    /// lanes) or waits; no overtaking.
    fn dispatch_subs(&mut self, subs: &mut [LaneRoom], out: &mut Vec<Dispatch>) {
        while let Some(&id) = self.subs.front() {
            let Some(slot) = self.slot(id).filter(|s| s.state == State::Ready) else {
                self.subs.pop_front();
                continue;
            };
            let Placement::Subs(size) = slot.placement else {
                unreachable!("the sub queue holds sub tasks")
            };
            let chosen: Vec<usize> = if size == 1 {
                let most = (0..subs.len()).max_by_key(|&i| (subs[i].room, usize::MAX - i));
                most.filter(|&i| subs[i].room > 0).into_iter().collect()
            } else {
                (0..subs.len())
                    .filter(|&i| subs[i].idle)
                    .take(size)
                    .collect()
            };
            if chosen.len() < size {
                break;
            }
            self.subs.pop_front();
            for &i in &chosen {
                subs[i].take();
            }
            let lanes: Vec<Lane> = chosen.into_iter().map(Lane::Sub).collect();
            self.start(id, &lanes, out);
        }
    }

    /// A single task handed back unstarted by its lane (a dead sub lane's queue, an
    /// in-process lane past its timeout): RUNNING → READY, first in its queue again.
    pub(crate) fn requeue(&mut self, id: SlotId, member: u32) {
        if member != 0 || !self.unqueue(id) {
            return;
        }
        let Some(slot) = self.slot(id) else { return };
        match &slot.placement {
            Placement::Chips(ws) => {
                let w = ws[0];
                self.directed[w].push_front(id);
            }
            Placement::Subs(_) => self.subs.push_front(id),
        }
        self.doorbell.notify_one();
    }

    /// RUNNING → READY for a single task its lane never started; false if it is not one
    /// (groups start only on idle lanes, so none is ever queued).
    fn unqueue(&mut self, id: SlotId) -> bool {
        let Some(slot) = self.slot_mut(id) else {
            return false;
        };
        if slot.state != State::Running || slot.members.len() != 1 {
            return false;
        }
        slot.state = State::Ready;
        slot.dispatched = None;
        let m = &mut slot.members[0];
        m.lane = None;
        m.state = MemberState::NotDispatched;
        true
    }

    /// READY → RUNNING: one request per member.
    fn start(&mut self, id: SlotId, lanes: &[Lane], out: &mut Vec<Dispatch>) {
        let next_level_kind = self.config.next_level_kind;
        let Some(run_id) = self.slot(id).map(|s| s.run_id) else {
            return;
        };
        let cancelled = match self.runs.iter().find(|r| r.id == run_id) {
            Some(run) => Arc::clone(&run.cancelled),
            None => Arc::new(AtomicBool::new(false)),
        };
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        slot.state = State::Running;
        slot.dispatched = Some(Instant::now());
        let size = slot.members.len() as u32;
        let task = slot.task_id();
        for (i, (m, &lane)) in slot.members.iter_mut().zip(lanes).enumerate() {
            m.lane = Some(lane);
            m.state = MemberState::Running;
            out.push(Dispatch {
                lane,
                req: TaskRequest {
                    slot: id,
                    task,
                    member: i as u32,
                    group_size: size,
                    callable_id: slot.callable_id,
                    callable: Arc::clone(&slot.callable),
                    kind: match slot.kind {
                        TaskKind::NextLevel => next_level_kind,
                        TaskKind::Sub => CallableKind::Sub,
                    },
                    label: slot.label.clone(),
                    config: slot.config.clone(),
                    args: m.args.clone(),
                    buffers: m.buffers.clone(),
                    cancelled: Arc::clone(&cancelled),
                },
            });
        }
    }

    /// A lane's reply (§3.3): record the member; aggregate when every member is terminal.
    pub(crate) fn complete(&mut self, lane: Lane, c: Completion) {
        let Some(slot) = self.slot_mut(c.slot) else {
            return;
        };
        if slot.state != State::Running {
            return;
        }
        let Some(m) = slot.members.get_mut(c.member as usize) else {
            return;
        };
        m.exec_time = c.exec_time;
        m.inner = c.inner;
        match c.result {
            Ok(report) => {
                m.state = MemberState::Success;
                m.chip = report;
            }
            Err(f) => {
                m.state = MemberState::Failed;
                m.failure = Some(f);
            }
        }
        if slot
            .members
            .iter()
            .any(|m| matches!(m.state, MemberState::Running | MemberState::NotDispatched))
        {
            return;
        }
        let size = slot.members.len();
        let task = slot.task_id();
        let label = slot.label.clone();
        let first = slot
            .members
            .iter()
            .enumerate()
            .find_map(|(i, m)| m.failure.clone().map(|f| (i, m.lane.unwrap_or(lane), f)));
        let failure = first.map(|(i, member_lane, f)| TaskFailure {
            task: Some(task),
            label,
            worker: self.lane_name(member_lane),
            kind: f.kind,
            code: f.code,
            message: if size > 1 {
                format!("group member {i} of {size}: {}", f.message)
            } else {
                f.message
            },
        });
        self.finish(c.slot, failure);
    }

    /// A lane died (`name` is its child's name, `death` how): it is marked unavailable, and
    /// every task aimed at it that has not started — PENDING on producers or READY in a
    /// queue, in any run, a group member included — fails now with the death's message and
    /// code; their dependents are skipped by the usual propagation. A sub lane's death fails
    /// the sub tasks that need more sub lanes than are still alive.
    pub(crate) fn lane_died(&mut self, lane: Lane, name: &str, death: &Death, restarting: bool) {
        let state = if restarting {
            "restarting in the background"
        } else {
            "not restarted"
        };
        let unavailable = Unavailable {
            who: name.to_string(),
            cause: format!("{} ({state})", death.fate),
            code: Some(death.code),
        };
        match lane {
            Lane::Chip(w) => {
                self.dead_chips[w] = Some(unavailable);
                self.directed[w].clear();
            }
            Lane::Sub(s) => self.dead_subs[s] = Some(unavailable),
        }
        let alive_subs = self.dead_subs.iter().filter(|d| d.is_none()).count();
        let victims: Vec<SlotId> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.state, State::Pending | State::Ready))
            .filter(|(_, s)| match (&s.placement, lane) {
                (Placement::Chips(ws), Lane::Chip(w)) => ws.contains(&w),
                (Placement::Subs(n), Lane::Sub(_)) => *n > alive_subs,
                _ => false,
            })
            .map(|(i, s)| SlotId {
                index: i as u32,
                generation: s.generation,
            })
            .collect();
        for id in victims {
            self.fail_unstarted(id, name, death);
        }
    }

    /// Fails a PENDING or READY task that was aimed at the dead lane `name`, or one queued
    /// there (RUNNING, never started: it becomes READY again first, so its report shows no
    /// dispatch, as for a task that never left the engine).
    pub(crate) fn fail_unstarted(&mut self, id: SlotId, name: &str, death: &Death) {
        if self.slot(id).is_some_and(|s| s.state == State::Running) {
            self.unqueue(id);
        }
        let Some(s) = self.slot(id) else { return };
        if !matches!(s.state, State::Pending | State::Ready) {
            return; // skipped meanwhile through an earlier victim
        }
        let f = TaskFailure {
            task: Some(s.task_id()),
            label: s.label.clone(),
            worker: name.to_string(),
            kind: FailureKind::Endpoint,
            code: Some(death.code),
            message: format!(
                "EndpointFailure: {name} {} before the task could start",
                death.fate
            ),
        };
        self.finish(id, Some(f));
    }

    /// A dead lane's restart failed (`why`); it stays unavailable.
    pub(crate) fn lane_restart_failed(&mut self, lane: Lane, why: &str, retrying: bool) {
        let next = if retrying { "retrying" } else { "giving up" };
        let cause = format!("its restart failed ({why}); {next}");
        // The death that started it all keeps its code.
        let slot = match lane {
            Lane::Chip(w) => &mut self.dead_chips[w],
            Lane::Sub(s) => &mut self.dead_subs[s],
        };
        let code = slot.as_ref().and_then(|u| u.code);
        let who = slot.as_ref().map(|u| u.who.clone()).unwrap_or_default();
        *slot = Some(Unavailable { who, cause, code });
    }

    /// A dead lane serves again as `name` (a fresh child process).
    pub(crate) fn lane_revived(&mut self, lane: Lane, name: String) {
        match lane {
            Lane::Chip(w) => {
                self.dead_chips[w] = None;
                self.restarts_chips[w] += 1;
                self.config.chip_names[w] = name;
            }
            Lane::Sub(s) => {
                self.dead_subs[s] = None;
                self.restarts_subs[s] += 1;
                self.config.sub_names[s] = name;
            }
        }
        self.doorbell.notify_one();
    }

    /// Every lane's name, restarts and availability (`Worker::stats`, run reports): chip
    /// (next-level) lanes first, then sub lanes.
    pub(crate) fn lane_stats(&self) -> Vec<LaneStats> {
        let chips = (0..self.config.chip_names.len()).map(Lane::Chip);
        let subs = (0..self.config.sub_names.len()).map(Lane::Sub);
        chips
            .chain(subs)
            .map(|lane| LaneStats {
                name: self.lane_name(lane),
                restarts: match lane {
                    Lane::Chip(w) => self.restarts_chips[w],
                    Lane::Sub(s) => self.restarts_subs[s],
                },
                available: !self.is_dead(lane),
            })
            .collect()
    }

    /// The name of `lane`, if it exists.
    pub(crate) fn lane_name_of(&self, lane: Lane) -> Option<String> {
        match lane {
            Lane::Chip(w) => self.config.chip_names.get(w).cloned(),
            Lane::Sub(s) => self.config.sub_names.get(s).cloned(),
        }
    }

    /// How many next-level lanes (chips, or an L4's Worker children) there are.
    pub(crate) fn next_level_lanes(&self) -> usize {
        self.config.chip_names.len()
    }

    /// Whether a lane is marked dead.
    pub(crate) fn is_dead(&self, lane: Lane) -> bool {
        match lane {
            Lane::Chip(w) => self.dead_chips[w].is_some(),
            Lane::Sub(s) => self.dead_subs[s].is_some(),
        }
    }
}

/// A skipped-task failure for `s`.
/// Takes one task use of every distinct buffer of `members`; on a released buffer, gives back
/// the uses taken so far (a slab whose scope ended may be gone).
fn acquire_buffers(
    members: &[(TaskArgs, Vec<Arc<BufferInner>>)],
) -> Result<Vec<Arc<BufferInner>>, SubmitError> {
    let mut buffers: Vec<Arc<BufferInner>> = Vec::new();
    for (_, bufs) in members {
        for (i, b) in bufs.iter().enumerate() {
            if buffers.iter().any(|x| Arc::ptr_eq(x, b)) {
                continue;
            }
            if b.acquire_task().is_err() {
                release_buffers(&buffers);
                return Err(SubmitError::InvalidArgs {
                    index: Some(i),
                    reason: format!(
                        "buffer {:?} was released (the scope of its alloc ended)",
                        b.id()
                    ),
                });
            }
            buffers.push(Arc::clone(b));
        }
    }
    Ok(buffers)
}

/// Gives back the task use of each buffer taken by [`acquire_buffers`].
fn release_buffers(buffers: &[Arc<BufferInner>]) {
    for x in buffers {
        x.release_task();
    }
}

/// The tasks `accesses` depend on, in lookup order with repeats. Reader entries exist only for
/// reads that are tracked (`track_war`, or a `TrackedInput`), so writers always look for them.
fn lookup_producers(map: &mut TensorMap, accesses: &[Access]) -> Vec<SlotId> {
    let mut producers: Vec<SlotId> = Vec::new();
    for a in accesses {
        let which = match a.tag {
            TensorTag::Input | TensorTag::TrackedInput => Entries::Writers,
            TensorTag::InOut => Entries::Both,
            // Write-after-read only: the readers since the last covering write.
            TensorTag::Output | TensorTag::OutputExisting => Entries::Readers,
            TensorTag::NoDep => continue,
        };
        map.lookup(&a.key, &a.geometry, which, &mut producers);
    }
    producers
}

/// Records task `me`'s writes (and, tracking WAR, its reads); returns the entries it made.
fn insert_accesses(
    map: &mut TensorMap,
    accesses: &[Access],
    track_war: bool,
    me: SlotId,
) -> Vec<EntryHandle> {
    let mut output_keys = Vec::new();
    for a in accesses {
        if a.tag.writes() {
            output_keys.push(map.insert_writer(a.key, a.geometry, me));
        } else if a.tag == TensorTag::TrackedInput || (track_war && a.tag == TensorTag::Input) {
            output_keys.push(map.insert_reader(a.key, a.geometry, me));
        }
    }
    output_keys
}

fn skipped(s: &Slot, message: String) -> TaskFailure {
    TaskFailure {
        task: Some(s.task_id()),
        label: s.label.clone(),
        worker: String::new(),
        kind: FailureKind::Skipped,
        code: None,
        message,
    }
}

fn producer_failed(task: NodeTaskId, label: Option<&str>) -> String {
    match label {
        Some(l) => format!("skipped: producer {task} ('{l}') failed"),
        None => format!("skipped: producer {task} failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sub submit refused because every sub worker died names each dead process and how it
    /// died: the soak test's rule that a failure names the faulted process (found by CI).
    #[test]
    fn a_submit_refused_because_every_sub_died_names_each_dead_process() {
        let engine = Engine::new(EngineConfig {
            chip_names: Vec::new(),
            sub_names: vec!["sub_child[0]".into(), "sub_child[1]".into()],
            track_war: false,
            next_level_kind: CallableKind::Chip,
        });
        let mut st = engine.lock_state();
        for (s, pid) in [(0, 4243), (1, 4244)] {
            let death = Death {
                fate: "terminated by signal 9 (SIGKILL)".into(),
                during: String::new(),
                code: ErrorCode::ChildDied,
            };
            st.lane_died(
                Lane::Sub(s),
                &format!("sub_child[{s}] pid={pid}"),
                &death,
                false,
            );
        }
        let e = st.check_submittable(1, &Placement::Subs(1)).unwrap_err();
        let text = e.to_string();
        for needle in [
            "every sub worker is dead",
            "sub_child[0] pid=4243 terminated by signal 9 (SIGKILL)",
            "sub_child[1] pid=4244 terminated by signal 9 (SIGKILL)",
        ] {
            assert!(text.contains(needle), "{text} does not contain {needle:?}");
        }
        assert!(matches!(
            e,
            SubmitError::WorkerUnavailable {
                code: Some(ErrorCode::ChildDied),
                ..
            }
        ));
    }

    /// A completed run's reports come out in task order in a list sized once, and the next
    /// run's list starts at that size: runs of 1024 no-op sub tasks spent a tenth of their
    /// lane thread's samples growing both (BENCHMARKS.md, stop 47).
    #[test]
    fn a_runs_reports_keep_task_order_in_one_allocation_and_size_the_next_run() {
        let engine = Engine::new(EngineConfig {
            chip_names: Vec::new(),
            sub_names: vec!["sub[0]".into()],
            track_war: false,
            next_level_kind: CallableKind::Chip,
        });
        let mut st = engine.lock_state();
        let fence = st.open_run();
        let run = st.runs.back_mut().expect("the run just opened");
        run.building = false;
        // Reports arrive as tasks finish, in any order; five tasks, slots filled out of order.
        run.reports.resize_with(5, || None);
        for index in [3u32, 0, 4, 1, 2] {
            run.reports[index as usize] = Some(TaskReport {
                id: NodeTaskId {
                    run_id: fence.run_id,
                    index,
                },
                label: None,
                kind: TaskKind::Sub,
                callable: "noop".into(),
                outcome: TaskOutcome::Success,
                producers: Vec::new(),
                members: Vec::new(),
                submitted: Duration::ZERO,
                ready: None,
                dispatched: None,
                finished: None,
            });
        }
        st.complete_runs();
        let report = fence
            .result
            .lock()
            .take()
            .expect("completed")
            .expect("no failure");
        let order: Vec<u32> = report.tasks.iter().map(|t| t.id.index).collect();
        assert_eq!(order, [0, 1, 2, 3, 4]);
        assert_eq!(
            report.tasks.capacity(),
            5,
            "collected into a list of the exact size"
        );
        st.open_run();
        let next = st.runs.back().expect("the next run");
        assert!(
            next.reports.capacity() >= 5,
            "the next run starts at the last run's size"
        );
    }
}
