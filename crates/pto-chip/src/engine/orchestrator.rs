//! The orchestrator side of a run: the submit pipeline, scopes and ring waits
//! (CHIP_RUNTIME.md §3.2, §3.6, §4, §5.2).
//!
//! [`OrchCore`] lives on the orchestrator thread and owns the ring allocators, the dep pools,
//! the TensorMap and the scope stack; other threads never see them. It talks to the shared
//! graph only under its lock, to wire and publish a task or to end a scope, or hands a task to
//! the lock's holder ([`OrchCore::publish`]), and reads the published watermarks to reclaim
//! ring resources.
//!
//! Every wait for a ring resource runs one loop (§5.2): refresh, try, then prove or wait. A
//! request larger than the resource is *Impossible*; a ring whose head task belongs to a scope
//! that is still open can never free anything (only this thread ends scopes, and it is waiting),
//! which is *Structural*; anything else is waited for, with a quiescence backstop that only runs
//! while no core is busy and nothing progresses.

use std::borrow::Borrow;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pto_types::ring_config::resolve::ResolvedSizing;
use pto_types::wait::{SpinPolicy, WaitOutcome, Waiter};
use pto_types::{ErrorCode, RING_COUNT, Resource, TensorTag};

use crate::diag::deps::{DepGraph, EdgeKind};
use crate::diag::scope_stats::{Counters, Peaks, Phase, Recorder};
use crate::diag::trace::AicpuSpan;
use crate::error::{ChipError, Detector, Fatal, OrchResult, ResourceKind};
use crate::kernel::{BoundTensor, CoreId, Element, KernelCtx, KernelRef};
use crate::ring::{AllocFailureKind, DepPool, TaskRing};
use crate::task_id::TaskId;
use crate::tensor::TensorDesc;
use crate::tensormap::{Role, TensorMap, Visit};

use super::graph::{
    Effects, Graph, Handed, LONG_KERNEL_NS, NewTask, SHORT_KERNEL_NS, Signal, SlotStore,
};
use super::heap::RunMemory;
use super::infer;
use super::run::{GraphGuard, RunShared, Watch};
use super::{ChipShared, INLINE_ARGS, Scalars, Shape, TaskPayload};
use help::Helper;

mod fused_replay;
pub(crate) mod help;
mod replay;
mod war;

/// Most tensors per task.
pub(crate) const MAX_TENSORS: usize = 32;
/// Most scalars per task.
pub(crate) const MAX_SCALARS: usize = 16;
/// Fanin edges kept inline per task; the rest use the ring's spill pool.
pub(crate) const INLINE_FANIN: u64 = 64;
/// Deepest scope nesting, counting the implicit root scope.
pub(crate) const MAX_SCOPE_DEPTH: usize = 64;

/// Most tasks handed off to the graph lock's holder (or left, below) and not yet booked
/// ([`OrchCore::publish`]); past it the orchestrator waits for the lock. Twice
/// [`LEAVE_LIMIT`], so that a batch of left tasks that meets the lock held can be handed off
/// with the submits after it instead of waiting for the lock to book them (independent no-op
/// tasks: 0.76-0.86 µs against 0.90-0.95 with a limit of 8, in the VM's slow stretch).
const HANDOFF_LIMIT: u64 = 16;

/// Tasks per batch of a submit that publishes what was left (HO4, [`OrchCore::may_leave`]):
/// up to `LEAVE_LIMIT - 1` left, and the submit after them publishes them all with its own in
/// one hold, or hands them off. 8 measured best of 2-8 and alike with 16 (`metg_point`,
/// BENCHMARKS.md "Issue 25, stop 55").
const LEAVE_LIMIT: u64 = 8;

/// Most replayed tasks queued while an executor holds the lock before the replay waits for it
/// ([`OrchCore::enqueue`]).
const REPLAY_QUEUE_LIMIT: usize = 8;

/// Most spare payloads that keep a fused replay's buffers ([`OrchCore::recycle`]).
const SPARE_FUSED: usize = 2;

/// Replayed tasks queued while every executor is active before a hold of the graph lock
/// publishes them ([`OrchCore::enqueue`]). `submit_point`'s replayed chain and stencil rows
/// measured 3-10 % faster with 4 than with a lock hold per task (stop 45).
const REPLAY_BATCH: usize = 4;
/// Live tasks per worker thread (the executors and this one) past which an orchestrator that
/// is the chip's last worker runs surplus ready work before it submits more (`help.rs`, H7);
/// it runs until half as many are live. On the 2-vCPU VM: 16 live tasks, one step of the
/// stencil_1d bench (`pto bench metg`), whose submit slowed with every step it ran ahead (8
/// and 4 per worker measured alike there, 16 no better in the VM's fast mode and worse in
/// its slow one: BENCHMARKS.md "Issue 25, stop 44").
const LOOKAHEAD_PER_WORKER: u64 = 8;
/// Each OUTPUT is padded to this many bytes inside its task's heap buffer.
pub(crate) const OUTPUT_ALIGN: u64 = 1024;

/// A submit's tensor arguments, inline up to [`INLINE_ARGS`].
pub(crate) type ArgTensors = smallvec::SmallVec<[ArgTensor; INLINE_ARGS]>;

/// A tensor argument of a submit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ArgTensor {
    Existing { tag: TensorTag, desc: TensorDesc },
    Create(CreateInfo),
}

/// A runtime-allocated OUTPUT.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CreateInfo {
    pub(crate) shape: [u32; crate::tensor::MAX_DIMS],
    pub(crate) ndims: usize,
    pub(crate) dtype: pto_types::DType,
    pub(crate) manual_dep: bool,
    /// Element bit pattern to fill the buffer with (little-endian, `dtype.size()` bytes).
    pub(crate) initial_value: Option<u64>,
}

impl CreateInfo {
    pub(crate) fn shape(&self) -> &[u32] {
        &self.shape[..self.ndims]
    }

    /// The bytes its buffer takes, padded to [`OUTPUT_ALIGN`]; `u64::MAX` (more than any heap
    /// holds, so an impossible request) when that does not fit in a `u64`.
    pub(crate) fn padded_bytes(&self) -> u64 {
        self.shape()
            .iter()
            .try_fold(self.dtype.size() as u64, |n, &d| {
                n.checked_mul(u64::from(d))
            })
            .and_then(|bytes| bytes.checked_next_multiple_of(OUTPUT_ALIGN))
            .unwrap_or(u64::MAX)
    }
}

/// Everything a submit carries.
pub(crate) struct SubmitRequest {
    pub(crate) kernels: [Option<KernelRef>; 3],
    pub(crate) shape: Shape,
    pub(crate) tensors: ArgTensors,
    pub(crate) scalars: Scalars,
    /// Explicit dependencies: (producer, RETAIN).
    pub(crate) deps: Vec<(TaskId, bool)>,
    pub(crate) block_num: u32,
    pub(crate) sync_start: bool,
    /// The first problem the argument builder recorded.
    pub(crate) error: Option<String>,
}

/// Orchestrator-private bookkeeping of one slot.
#[derive(Clone, Copy, Debug, Default)]
struct SlotMarks {
    /// Packed heap end, relative to the ring's heap.
    packed_end: u64,
    dep_mark: u64,
    demand_mark: u64,
    spill_mark: u64,
    /// The task's scope is still open.
    scope_open: bool,
}

/// What a chip's run leaves to its next run: the TensorMap, and memory sized by the run's
/// windows that a repeated job would otherwise fault in and grow again, run after run: the
/// orchestrator's slot marks (written at each booking before they are read, so reusable
/// after any run) and the graph's slot records (only after a clean run: `SlotStore`).
pub(crate) struct Carried {
    pub(crate) tensormap: TensorMap,
    marks: [Vec<SlotMarks>; RING_COUNT],
    pub(crate) slots: SlotStore,
}

impl Carried {
    /// What a new chip starts with.
    pub(crate) fn new(tensormap: TensorMap) -> Carried {
        Carried {
            tensormap,
            marks: Default::default(),
            slots: SlotStore::default(),
        }
    }
}

struct ScopeFrame {
    ring: usize,
    tasks: Vec<TaskId>,
    /// Heap bytes (aligned) its tasks pin until it ends: what a replay must fit beside
    /// (`replay.rs`).
    heap: u64,
    /// Where the scope was opened, for scope stats and traces.
    site: Site,
    /// With scope stats on: the tasks replays of each graph submitted here.
    graphs: Vec<(Arc<str>, u64)>,
}

/// Where a scope was opened. Named (`file:line`, `graph <name>`, the callable's name) only
/// when scope stats or a trace print it: a scope per few tasks would otherwise format and
/// free a string each.
#[derive(Clone)]
enum Site {
    /// The root scope: the callable's name.
    Root(&'static str),
    /// `Scope::scope` at this line of the orchestration.
    Caller(&'static std::panic::Location<'static>),
    /// A scope of a replayed graph.
    Graph(Arc<str>),
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Site::Root(name) => f.write_str(name),
            Site::Caller(at) => write!(f, "{}:{}", short_path(at.file()), at.line()),
            Site::Graph(name) => write!(f, "graph {name}"),
        }
    }
}

/// Task lists of ended scopes kept for the next scopes (no allocation per scope), and the
/// longest list kept: past it a list is freed, so one huge scope does not pin its memory.
const SPARE_FRAMES: usize = 8;
const SPARE_FRAME_TASKS: usize = 4096;

/// Settings the orchestrator needs from the chip and the run.
pub(crate) struct OrchSettings {
    pub(crate) clusters: u32,
    pub(crate) scope_stats: bool,
    pub(crate) dep_gen: bool,
    pub(crate) alloc_backstop: Duration,
    pub(crate) tensor_wait_timeout: Duration,
    pub(crate) spin: SpinPolicy,
    /// The no-progress watchdog (code 100), checked while this thread waits.
    pub(crate) watchdog: Duration,
    /// Names the root scope in scope stats (the callable's name).
    pub(crate) root_site: &'static str,
    /// Which reads leave reader entries (`track_war`, the write-after-read check).
    pub(crate) war: infer::WarPolicy,
    /// The run's `war_check`, `Auto` resolved.
    pub(crate) war_check: pto_types::WarCheck,
}

/// The orchestrator of one run.
pub(crate) struct OrchCore {
    pub(crate) run: Arc<RunShared>,
    chip: Arc<ChipShared>,
    sizing: ResolvedSizing,
    rings: [TaskRing; RING_COUNT],
    dep_pools: [DepPool<()>; RING_COUNT],
    /// Every live dependency edge of a ring, whether or not its producer had completed at
    /// wiring: the dep pool's worst case. Scope stats report its peaks, so `pto advise` sizes
    /// dep pools for any timing, not just the one that was measured.
    dep_demand: [DepPool<()>; RING_COUNT],
    spill_pools: [DepPool<()>; RING_COUNT],
    marks: [Vec<SlotMarks>; RING_COUNT],
    /// Watermarks as of the last refresh.
    observed: [u64; RING_COUNT],
    pub(crate) tensormap: TensorMap,
    scopes: Vec<ScopeFrame>,
    memory: RunMemory,
    heap_bases: [u64; RING_COUNT],
    settings: OrchSettings,
    /// Whether this thread's waits spin first.
    spin: AdaptiveSpin,
    /// Replayed tasks not yet published, in id order, all of the innermost scope
    /// ([`OrchCore::enqueue`]).
    pending: std::collections::VecDeque<NewTask>,
    /// Tasks handed off to the graph lock's holder ([`OrchCore::publish`]) and not booked yet,
    /// all of the innermost scope ([`OrchCore::flush`]).
    handed: u64,
    /// Dep-list and spill entries reserved for the handed-off tasks, per ring: each reserved its
    /// worst case (every producer pending) before it was handed off.
    reserved_deps: [u64; RING_COUNT],
    reserved_spill: [u64; RING_COUNT],
    /// The graph's records of handed-off tasks, being booked (kept for its buffer).
    booking: Vec<Handed>,
    /// Producer lists of published tasks, for the next submits (recycled).
    spare_lists: Vec<Vec<(TaskId, bool)>>,
    /// Task lists of ended scopes, for the next scopes ([`SPARE_FRAMES`]).
    spare_frames: Vec<Vec<TaskId>>,
    /// Payloads publications gave back, for the next tasks to reuse.
    spare_payloads: Vec<Arc<TaskPayload>>,
    /// Tasks published so far (alloc tasks included).
    pub(crate) published: u64,
    /// Graph tasks that fused replays ran beyond the one task each published
    /// ([`OrchCore::tasks_submitted`]).
    fused_extra: u64,
    /// Diagnostics recorded on this thread (each `Some` only when enabled).
    pub(crate) scope_stats: Option<Recorder>,
    pub(crate) deps: Option<DepGraph>,
    /// Start time and name of each open scope, for the level-4 trace.
    scope_spans: Vec<(f64, String)>,
    /// The write-after-read check's findings.
    war: war::WarCheckState,
    /// Live tasks on a ring past which this thread runs surplus ready work first (H7); 0
    /// when it is not one of the chip's workers.
    lookahead: u64,
    /// At the last such look that found nothing: the work epoch less `own_signals`, and
    /// `own_ready`.
    ahead_seen: Option<(u64, u64)>,
    /// Work signals this thread's publications sent, and the tasks they made ready
    /// ([`OrchCore::after_lock`]): what of the work epoch's moves is its own doing.
    own_signals: u64,
    own_ready: u64,
    /// The graph a replay is submitting, named by the errors its submits meet.
    pub(crate) replaying: Option<Arc<str>>,
}

/// Why a ring resource refused a request, for the wait loop.
struct Blocked {
    /// The resource frees only as ring `ring` retires tasks (window, heap, dep pool), so a wake
    /// can wait for several retirements (a dep-pool need that shrinks because producers on
    /// other rings complete is seen at that wake); the TensorMap frees on any ring.
    ring_bound: bool,
    code: ErrorCode,
    resource: ResourceKind,
    impossible: bool,
    used: u64,
    requested: u64,
    recommended_min: u64,
}

impl OrchCore {
    pub(crate) fn new(
        run: Arc<RunShared>,
        chip: Arc<ChipShared>,
        sizing: ResolvedSizing,
        heap_bases: [u64; RING_COUNT],
        carried: Carried,
        memory: RunMemory,
        settings: OrchSettings,
    ) -> OrchCore {
        let Carried {
            mut tensormap,
            marks,
            slots: _,
        } = carried;
        let root_site = Site::Root(settings.root_site);
        let windows: [u32; RING_COUNT] = std::array::from_fn(|r| sizing.task_window(r));
        tensormap.reset(windows.map(u64::from));
        let scope_stats = settings.scope_stats.then(Recorder::default);
        let deps = settings.dep_gen.then(DepGraph::default);
        let lookahead = if chip.orchestrator_is_worker {
            LOOKAHEAD_PER_WORKER * (chip.executors as u64 + 1)
        } else {
            0
        };
        let mut core = OrchCore {
            run,
            chip,
            rings: std::array::from_fn(|r| TaskRing::new(windows[r], sizing.heap(r))),
            dep_pools: std::array::from_fn(|r| DepPool::new(sizing.dep_pool(r))),
            dep_demand: std::array::from_fn(|_| DepPool::new(u32::MAX)),
            spill_pools: std::array::from_fn(|r| DepPool::new(sizing.dep_pool(r))),
            marks,
            observed: [0; RING_COUNT],
            tensormap,
            scopes: Vec::new(),
            memory,
            heap_bases,
            settings,
            spin: AdaptiveSpin::default(),
            pending: std::collections::VecDeque::with_capacity(REPLAY_QUEUE_LIMIT),
            handed: 0,
            reserved_deps: [0; RING_COUNT],
            reserved_spill: [0; RING_COUNT],
            booking: Vec::new(),
            spare_lists: Vec::new(),
            spare_frames: Vec::new(),
            spare_payloads: Vec::new(),
            published: 0,
            fused_extra: 0,
            sizing,
            scope_stats,
            deps,
            scope_spans: Vec::new(),
            war: war::WarCheckState::default(),
            lookahead,
            ahead_seen: None,
            own_signals: 0,
            own_ready: 0,
            replaying: None,
        };
        core.open_frame(root_site);
        core
    }

    /// Pushes a scope frame and records its begin sample and span start.
    fn open_frame(&mut self, site: Site) {
        let depth = self.scopes.len();
        let ring = pto_types::ring_config::ring_for_depth(depth);
        // A submit reads only its own ring's watermark while it is not blocked (`wait_for`):
        // the other rings' are read here, so that what the outer scopes retired is seen
        // (fewer edges to finished producers, TensorMap entries cleaned) within a scope.
        self.refresh_all();
        if self.scope_stats.is_some() {
            self.rings[ring].begin_scope_sample();
            self.dep_demand[ring].begin_scope_sample();
            self.spill_pools[ring].begin_scope_sample();
            let counters = self.counters(ring);
            let tensormap = self.tensormap.live_count();
            let t_us = self.run.micros(Instant::now());
            if let Some(stats) = &mut self.scope_stats {
                stats.record(
                    &site.to_string(),
                    Phase::Begin,
                    depth,
                    ring,
                    counters,
                    tensormap,
                    t_us,
                    None,
                    &[],
                );
            }
        }
        if self.run.trace_level >= 4 {
            self.scope_spans
                .push((self.run.micros(Instant::now()), format!("scope {site}")));
        }
        let tasks = self.spare_frames.pop().unwrap_or_default();
        self.scopes.push(ScopeFrame {
            ring,
            tasks,
            heap: 0,
            site,
            graphs: Vec::new(),
        });
    }

    /// The scope-stats counters of `ring` now.
    fn counters(&self, ring: usize) -> Counters {
        let c = self.rings[ring].counters();
        Counters {
            task_window_start: c.task_window_start,
            task_window_end: c.task_window_end,
            heap_start: c.heap_start,
            heap_end: c.heap_end,
            dep_pool_start: self.dep_pools[ring].tail(),
            dep_pool_end: self.dep_pools[ring].top(),
        }
    }

    /// Current scope depth (0 = the implicit root scope).
    pub(crate) fn depth(&self) -> usize {
        self.scopes.len() - 1
    }

    pub(crate) fn clusters(&self) -> u32 {
        self.settings.clusters
    }

    /// `Err(Fatal)` once any error is latched.
    pub(crate) fn check_fatal(&self) -> OrchResult<()> {
        if self.run.is_cancelled() {
            Err(Fatal(()))
        } else {
            Ok(())
        }
    }

    /// Latches an orchestrator error and returns `Fatal` for `?`.
    pub(crate) fn fail(&self, error: ChipError) -> Fatal {
        self.run.latch_orch(error);
        Fatal(())
    }

    fn fail_immediate(&self, code: ErrorCode, detail: String) -> Fatal {
        self.fail(ChipError::new(code, Detector::Immediate, detail))
    }

    /// Reclaims what the published watermark of `ring` frees (CHIP_RUNTIME.md §3.6); whether
    /// it moved.
    fn refresh(&mut self, ring: usize) -> bool {
        let last_alive = self.run.last_alive[ring].load(Ordering::Acquire);
        if last_alive <= self.observed[ring] {
            return false;
        }
        self.observed[ring] = last_alive;
        let mask = u64::from(self.rings[ring].window()) - 1;
        let marks = self.marks[ring][((last_alive - 1) & mask) as usize];
        self.rings[ring].retire_to(last_alive, marks.packed_end);
        self.dep_pools[ring].advance_tail(marks.dep_mark);
        self.dep_demand[ring].advance_tail(marks.demand_mark);
        self.spill_pools[ring].advance_tail(marks.spill_mark);
        true
    }

    /// [`OrchCore::refresh`] of every ring; whether any watermark moved.
    fn refresh_all(&mut self) -> bool {
        let mut moved = false;
        for ring in 0..RING_COUNT {
            moved |= self.refresh(ring);
        }
        moved
    }

    /// The watermark worth waking for: a quarter of the live tasks of `ring`, at most
    /// [`WAKE_BATCH_MAX`], at least one — so that a back-pressured orchestrator submits in
    /// bursts instead of waking for every retired task — but never past the first task of a
    /// scope that is still open, which cannot retire while this thread waits (then only a run
    /// with nothing left to run would wake it).
    fn wake_target(&self, ring: usize) -> u64 {
        let head = self.observed[ring];
        let next = self.rings[ring].next_id();
        let want = head + ((next - head) / 4).clamp(1, WAKE_BATCH_MAX);
        let mask = u64::from(self.rings[ring].window()) - 1;
        (head..want.min(next))
            .find(|&id| self.marks[ring][(id & mask) as usize].scope_open)
            .map_or(want, |open| open.max(head + 1))
    }

    /// True when ring `ring`'s oldest live task belongs to a scope that is still open: then the
    /// ring can free nothing until that scope ends, which only this thread can do.
    fn head_scope_open(&self, ring: usize) -> Option<TaskId> {
        let head = self.observed[ring];
        if head >= self.rings[ring].next_id() {
            return None;
        }
        let mask = u64::from(self.rings[ring].window()) - 1;
        let marks = self.marks[ring][(head & mask) as usize];
        marks.scope_open.then(|| TaskId::new(ring as u8, head))
    }

    /// The wait loop of CHIP_RUNTIME.md §5.2 around `attempt`.
    fn wait_for<T>(
        &mut self,
        ring: usize,
        task: Option<TaskId>,
        mut attempt: impl FnMut(&mut OrchCore) -> Result<T, Blocked>,
    ) -> OrchResult<T> {
        // The fast path: no clock, no waiter, and the other rings' watermarks (shared lines
        // the executors write) read only when this ring's alone does not do; they are read at
        // every scope's start too (`open_frame`), so they lag by one scope at most.
        self.refresh(ring);
        let mut blocked = match attempt(self) {
            Ok(value) => return Ok(value),
            Err(blocked) => blocked,
        };
        if self.refresh_all() {
            blocked = match attempt(self) {
                Ok(value) => return Ok(value),
                Err(blocked) => blocked,
            };
        }
        let mut first = Some(blocked);
        if self.handed > 0 || !self.pending.is_empty() {
            // What this waits for may need them booked (the pools) or published (producers
            // that must run).
            self.flush()?;
            first = None;
        }
        let run = Arc::clone(&self.run);
        let started = Instant::now();
        let mut waiter = Waiter::new(&run.ring_progress, self.spin.policy(self.settings.spin));
        let mut last_progress = run.progress.load(Ordering::Acquire);
        let mut quiet_since = started;
        let mut watch = Watch::default();
        let _clear = ClearWake(&run);
        let chip = Arc::clone(&self.chip);
        let mut helper = Helper::new(&run, &chip);
        loop {
            let blocked = match first.take() {
                Some(blocked) => blocked,
                None => {
                    self.refresh_all();
                    match attempt(self) {
                        Ok(value) => {
                            self.spin.record(started.elapsed(), self.settings.spin);
                            return Ok(value);
                        }
                        Err(blocked) => blocked,
                    }
                }
            };
            let detector = if blocked.impossible {
                Some(Detector::Impossible)
            } else if self.head_scope_open(ring).is_some() {
                Some(Detector::Structural)
            } else {
                None
            };
            self.check_fatal()?;
            // Deterministic first (CHIP_RUNTIME.md §5.2): a request the ring can never hold now
            // fails before this thread helps, so the verdict does not depend on how many
            // producers the help happens to finish first.
            if let Some(detector) = detector {
                return Err(self.fail(self.capacity_error(ring, task, blocked, detector)));
            }
            if helper.help_or_step_away(&mut waiter) {
                continue;
            }
            let now = Instant::now();
            let progress = run.progress.load(Ordering::Acquire);
            if progress != last_progress || run.running.load(Ordering::Acquire) > 0 {
                last_progress = progress;
                quiet_since = now;
            }
            if now - quiet_since >= self.settings.alloc_backstop {
                let backstop = Detector::Backstop;
                return Err(self.fail(self.capacity_error(ring, task, blocked, backstop)));
            }
            let backstop = quiet_since + self.settings.alloc_backstop;
            let deadline = match watch.check(&run, self.settings.watchdog) {
                Some(watchdog) => backstop.min(watchdog),
                None => backstop,
            };
            let wake = blocked.ring_bound.then(|| (ring, self.wake_target(ring)));
            run.want_ring_wake(wake);
            pause(
                &run,
                &mut waiter,
                wake,
                deadline.max(now + Duration::from_millis(1)),
                || helper.news(),
            );
            helper.after_wait();
        }
    }

    fn capacity_error(
        &self,
        ring: usize,
        task: Option<TaskId>,
        blocked: Blocked,
        detector: Detector,
    ) -> ChipError {
        let capacity = blocked
            .resource
            .ring_resource()
            .map(|r| self.sizing.at(r, ring));
        let head = (self.observed[ring] < self.rings[ring].next_id())
            .then(|| TaskId::new(ring as u8, self.observed[ring]));
        let capacity_text = match capacity {
            Some(c) => format!(
                "{} capacity {} {} (source: {})",
                blocked.resource.as_str(),
                c.value,
                blocked.resource.ring_resource().map_or("", Resource::unit),
                c.source
            ),
            None => format!("{} capacity", blocked.resource.as_str()),
        };
        let why = match detector {
            Detector::Impossible => "the request alone exceeds the capacity".to_string(),
            Detector::Structural => match head {
                Some(h) => format!("head {h} is pinned by its open scope"),
                None => "the ring cannot free anything".to_string(),
            },
            _ => {
                let census = self.run.lock_graph_as_offerer().stall_census();
                format!(
                    "no progress for {} ms ({census})",
                    self.settings.alloc_backstop.as_millis()
                )
            }
        };
        let mut who = match task {
            Some(t) => format!("task {t}"),
            None => "a submit".to_string(),
        };
        if let Some(graph) = &self.replaying {
            who = format!("{who} (replaying graph {graph:?})");
        }
        let detail = format!(
            "{who} on ring {ring} needs {} more; {capacity_text}, used {}; {why}",
            blocked.requested, blocked.used
        );
        ChipError {
            code: blocked.code,
            detector,
            ring: Some(ring),
            resource: Some(blocked.resource),
            capacity,
            used: Some(blocked.used),
            requested: Some(blocked.requested),
            recommended_min: Some(blocked.recommended_min),
            task,
            head,
            detail,
        }
    }

    /// Submits one task (CHIP_RUNTIME.md §3.2). Returns its id and its OUTPUT tensors.
    pub(crate) fn submit(&mut self, req: SubmitRequest) -> OrchResult<(TaskId, Vec<TensorDesc>)> {
        self.check_fatal()?;
        let submit_start = (self.run.trace_level >= 4).then(|| self.run.micros(Instant::now()));
        // 1. Validate.
        self.validate(&req)?;
        // 2. Output layout: one heap allocation, each OUTPUT padded to 1 KiB.
        let total_bytes: u64 = req
            .tensors
            .iter()
            .map(|t| match t {
                ArgTensor::Create(ci) => ci.padded_bytes(),
                ArgTensor::Existing { .. } => 0,
            })
            .fold(0, u64::saturating_add);
        let (id, offset) = self.admit_and_allocate(total_bytes)?;
        let ring = usize::from(id.ring());
        // 6. TensorMap sync for this ring.
        self.tensormap
            .sync_ring(id.ring(), self.observed[ring], id.local() + 1);
        // 7–9. Explicit, creator and TensorMap edges, deduplicated.
        let producers = self.producers(id, &req)?;
        self.check_war(id, &req.kernels, &req.tensors, &producers)?;
        // 10. Register this task as the writer of its INOUT / OUTPUT_EXISTING tensors (and as
        // a reader of what it reads, when reads are tracked or checked).
        self.register_entries(id, &req.tensors)?;
        // 11. Payload: bind every tensor to host memory.
        let mut payload = TaskPayload::fresh(
            self.spare_payloads.pop(),
            req.shape,
            req.kernels,
            &req.scalars,
            req.block_num,
            req.sync_start,
        );
        let outputs = self.bind_tensors(id, ring, offset, &req.tensors, &mut payload);
        // 12. Wire and publish.
        self.publish(
            NewTask {
                id,
                payload,
                producers,
                completed: false,
            },
            true,
        )?;
        if let Some(start) = submit_start {
            self.trace_orch(
                format!("submit {id} {}", payload_names(&req.kernels)),
                start,
            );
        }
        Ok((id, outputs))
    }

    /// Submit step 1: argument limits, block counts, sync-start limits.
    fn validate(&self, req: &SubmitRequest) -> OrchResult<()> {
        if let Some(error) = &req.error {
            return Err(self.fail_immediate(ErrorCode::InvalidArgs, error.clone()));
        }
        if req.tensors.len() > MAX_TENSORS || req.scalars.len() > MAX_SCALARS {
            return Err(self.fail_immediate(
                ErrorCode::InvalidArgs,
                format!(
                    "a task has {} tensors and {} scalars; the limits are {MAX_TENSORS} and {MAX_SCALARS}",
                    req.tensors.len(),
                    req.scalars.len()
                ),
            ));
        }
        if req.block_num == 0 {
            return Err(self.fail_immediate(
                ErrorCode::InvalidArgs,
                "block_num must be at least 1".into(),
            ));
        }
        if req.sync_start {
            self.check_sync_start(req.shape, req.block_num)?;
        }
        Ok(())
    }

    /// A sync-start task must fit the chip's cores at once.
    fn check_sync_start(&self, shape: Shape, block_num: u32) -> OrchResult<()> {
        let clusters = self.settings.clusters;
        let limit = match shape {
            Shape::Aiv => 2 * clusters,
            Shape::Aic | Shape::Mix(_) => clusters,
            Shape::Dummy => u32::MAX,
        };
        if block_num > 1 && block_num > limit {
            let mut e = ChipError::new(
                ErrorCode::RequireSyncStartInvalid,
                Detector::Immediate,
                format!(
                    "a sync-start task with block_num {block_num} needs more cores than the chip has (limit {limit} for this shape, {clusters} clusters)"
                ),
            );
            e.resource = Some(ResourceKind::Cores);
            e.requested = Some(u64::from(block_num));
            e.used = Some(u64::from(limit));
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// Submit steps 7–9: explicit, creator and TensorMap edges of `id`, deduplicated (and
    /// recorded in the DAG dump when it is on).
    fn producers(&mut self, id: TaskId, req: &SubmitRequest) -> OrchResult<Vec<(TaskId, bool)>> {
        let mut producers = self.explicit_deps(id, &req.deps)?;
        let observed = self.observed;
        let deps = &mut self.deps;
        if let Some(graph) = deps.as_mut() {
            let kernels = payload_names(&req.kernels);
            graph.task(id, kernels, self.scopes.len() - 1, req.block_num);
            for &(p, retain) in &producers {
                graph.edge(p, id, EdgeKind::Explicit, retain);
            }
        }
        let war = &mut self.war;
        for (i, arg) in req.tensors.iter().enumerate() {
            let ArgTensor::Existing { tag, desc } = arg else {
                continue;
            };
            infer::arg_producers(
                &mut self.tensormap,
                &observed,
                *tag,
                desc,
                |p, retain, kind| {
                    producers.push((p, retain));
                    if let Some(graph) = deps.as_mut() {
                        graph.edge(p, id, kind, retain);
                    }
                },
                |reader| war.note(reader, i),
            );
        }
        dedup_producers(&mut producers, id);
        Ok(producers)
    }

    /// Submits the hidden task of `alloc_tensors`: it owns the buffers and is COMPLETED at once.
    pub(crate) fn alloc_tensors(
        &mut self,
        infos: &[CreateInfo],
    ) -> OrchResult<(TaskId, Vec<TensorDesc>)> {
        self.check_fatal()?;
        if infos.is_empty() {
            return Err(self.fail_immediate(
                ErrorCode::InvalidArgs,
                "alloc_tensors needs at least one tensor".into(),
            ));
        }
        let tensors: Vec<ArgTensor> = infos.iter().copied().map(ArgTensor::Create).collect();
        let total_bytes: u64 = infos
            .iter()
            .map(CreateInfo::padded_bytes)
            .fold(0, u64::saturating_add);
        let (id, offset) = self.admit_and_allocate(total_bytes)?;
        let ring = usize::from(id.ring());
        let mut payload = TaskPayload::fresh(
            self.spare_payloads.pop(),
            Shape::Dummy,
            [None; 3],
            &[],
            1,
            false,
        );
        let outputs = self.bind_tensors(id, ring, offset, tensors.iter().copied(), &mut payload);
        self.publish(
            NewTask {
                id,
                payload,
                producers: Vec::new(),
                completed: true,
            },
            true,
        )?;
        Ok((id, outputs))
    }

    /// Steps 3–4: scope admission, then a slot and heap bytes on the current ring.
    fn admit_and_allocate(&mut self, total_bytes: u64) -> OrchResult<(TaskId, u64)> {
        let ring = self.check_admission()?;
        self.keep_close(ring)?;
        let alloc = self.wait_for(ring, None, |core| core.try_allocate(ring, total_bytes))?;
        Ok(self.allocated(ring, alloc, total_bytes))
    }

    /// Before step 4, when this thread is one of the chip's workers and at least `lookahead`
    /// tasks of `ring` are live: runs surplus quick work until half as many are, at most
    /// `lookahead / 2` blocks (`help.rs`, H7). Not a wait: with nothing to take it submits on.
    fn keep_close(&mut self, ring: usize) -> OrchResult<()> {
        if self.lookahead == 0 {
            return Ok(());
        }
        let live = |core: &OrchCore| core.rings[ring].next_id() - core.observed[ring];
        self.refresh(ring);
        if live(self) < self.lookahead {
            return Ok(());
        }
        // Nothing new to take since the last look found nothing: no other thread signalled
        // work (this thread's own publications move the epoch too, and are not news unless
        // they made a task ready).
        let news = (
            self.chip.work.epoch().wrapping_sub(self.own_signals),
            self.own_ready,
        );
        if self.ahead_seen == Some(news) {
            return Ok(());
        }
        // A heuristic on the run's last kernel, not the ready ones: below `SHORT_KERNEL_NS` a
        // kernel is cheaper than the lock traffic of one more thread running them, and the
        // executor keeps up better alone. 0: none has returned yet.
        let kernel_ns = self.run.last_kernel_ns.load(Ordering::Relaxed);
        if (1..SHORT_KERNEL_NS).contains(&kernel_ns) {
            return Ok(());
        }
        // Handed-off tasks go first: a helper holds the lock as the inbox's offerer, whose
        // unlock does not serve the inbox (HO2), so they would wait for an executor's hold.
        self.flush()?;
        let (run, chip) = (Arc::clone(&self.run), Arc::clone(&self.chip));
        let mut helper = Helper::surplus(&run, &chip);
        self.ahead_seen = None;
        for _ in 0..self.lookahead / 2 {
            if !helper.help() {
                let own = self.own_signals;
                self.ahead_seen = helper
                    .seen()
                    .map(|epoch| (epoch.wrapping_sub(own), self.own_ready));
                return Ok(());
            }
            self.check_fatal()?;
            self.refresh(ring);
            // A block taken in the last finish's hold runs too: giving it back would cost a
            // hold of the lock for nothing.
            if live(self) <= self.lookahead / 2 && !helper.holds_next() {
                break;
            }
        }
        Ok(())
    }

    /// Step 3: a scope may not hold more tasks than its ring keeps live. Returns the ring.
    fn check_admission(&self) -> OrchResult<usize> {
        let ring = pto_types::ring_config::ring_for_depth(self.depth());
        let window = u64::from(self.rings[ring].window());
        // Handed-off tasks belong to the innermost scope too (`flush`).
        let in_scope = (self.scopes.last().expect("root scope").tasks.len() + self.pending.len())
            as u64
            + self.handed;
        if in_scope < window - 1 {
            return Ok(ring);
        }
        let mut e = ChipError::new(
            ErrorCode::ScopeDeadlock,
            Detector::Immediate,
            format!(
                "the scope at depth {} already holds {in_scope} tasks on ring {ring}; a ring of window {window} keeps at most {} live",
                self.depth(),
                window - 1
            ),
        );
        e.ring = Some(ring);
        e.resource = Some(ResourceKind::TaskWindow);
        e.capacity = Some(self.sizing.at(Resource::TaskWindow, ring));
        e.used = Some(in_scope);
        e.requested = Some(1);
        e.recommended_min = Some(2 * window);
        Err(self.fail(e))
    }

    /// Step 4's attempt: a slot and `total_bytes` of heap on `ring`, or why not.
    fn try_allocate(
        &mut self,
        ring: usize,
        total_bytes: u64,
    ) -> Result<crate::ring::Allocation, Blocked> {
        self.rings[ring].try_alloc(total_bytes).map_err(|f| {
            let heap = f.impossible || f.kind == AllocFailureKind::HeapFull;
            Blocked {
                ring_bound: true,
                code: if heap {
                    ErrorCode::HeapRingDeadlock
                } else {
                    ErrorCode::FlowControlDeadlock
                },
                resource: if heap {
                    ResourceKind::Heap
                } else {
                    ResourceKind::TaskWindow
                },
                impossible: f.impossible,
                used: if heap { f.heap_used } else { f.live },
                requested: if heap { f.needed } else { 1 },
                recommended_min: f.recommended_min(),
            }
        })
    }

    /// Books an allocation: the slot's marks and the scope's pinned heap.
    fn allocated(
        &mut self,
        ring: usize,
        alloc: crate::ring::Allocation,
        total_bytes: u64,
    ) -> (TaskId, u64) {
        let marks = &mut self.marks[ring];
        if alloc.slot == marks.len() {
            marks.push(SlotMarks::default());
        }
        marks[alloc.slot] = SlotMarks {
            packed_end: alloc.end,
            dep_mark: 0,
            demand_mark: 0,
            spill_mark: 0,
            scope_open: true,
        };
        self.scopes.last_mut().expect("root scope").heap += crate::ring::align_heap(total_bytes);
        (TaskId::new(ring as u8, alloc.id), alloc.offset)
    }

    /// Step 7: explicit dependencies; invalid ones fail the run, retired ones are skipped.
    fn explicit_deps(
        &mut self,
        id: TaskId,
        deps: &[(TaskId, bool)],
    ) -> OrchResult<Vec<(TaskId, bool)>> {
        // A buffer of an earlier submit, given back by the graph: no allocation per task.
        let mut producers = self.spare_lists.pop().unwrap_or_default();
        producers.clear();
        for &(dep, retain) in deps {
            let valid = dep.is_valid()
                && usize::from(dep.ring()) < RING_COUNT
                && dep != id
                && dep.local() < self.rings[usize::from(dep.ring())].next_id();
            if !valid {
                return Err(self.fail_immediate(
                    ErrorCode::InvalidArgs,
                    format!("explicit dependency on {dep}, which is not an issued task"),
                ));
            }
            if dep.local() >= self.observed[usize::from(dep.ring())] {
                producers.push((dep, retain));
            }
        }
        Ok(producers)
    }

    /// Step 10: reserve and insert TensorMap entries for the tensors this task writes, and
    /// for the reads the run tracks (CHIP_RUNTIME.md §3.8). The write-after-read check's
    /// entries are a diagnostic: they take only room that is free, and never make a submit
    /// wait or fail (a read left out is a read the check cannot see: `WarCheckState::skipped`).
    fn register_entries(&mut self, id: TaskId, tensors: &[ArgTensor]) -> OrchResult<()> {
        let policy = self.settings.war;
        // The role of an argument: two bytes, recomputed rather than kept in a list.
        let role = |t: &ArgTensor| match *t {
            ArgTensor::Existing { tag, ref desc } => policy.entry_role(tag, desc),
            ArgTensor::Create(_) => None,
        };
        let check_only = Some(Role::Reader { tracked: false });
        let needed = tensors
            .iter()
            .map(role)
            .filter(|r| r.is_some() && *r != check_only)
            .count();
        if needed > 0 {
            self.reserve_entries(id, needed)?;
        }
        for t in tensors {
            let (ArgTensor::Existing { desc, .. }, Some(role)) = (t, role(t)) else {
                continue;
            };
            if Some(role) == check_only && self.tensormap.available() == 0 {
                self.war.skipped += 1;
                continue;
            }
            self.tensormap
                .insert_as(id, *desc, role)
                .expect("entries were reserved above or are free");
        }
        Ok(())
    }

    /// Waits until the TensorMap has `needed` free entries for task `id` (cleaning retired
    /// entries first), or fails with TENSORMAP_OVERFLOW.
    fn reserve_entries(&mut self, id: TaskId, needed: usize) -> OrchResult<()> {
        let ring = usize::from(id.ring());
        let capacity = self.tensormap.capacity() as u64;
        self.wait_for(ring, Some(id), |core| {
            if core.tensormap.available() < needed {
                let observed = core.observed;
                core.tensormap.cleanup_all(&observed);
            }
            if core.tensormap.available() >= needed {
                return Ok(());
            }
            let used = (core.tensormap.capacity() - core.tensormap.available()) as u64;
            Err(Blocked {
                ring_bound: false,
                code: ErrorCode::TensormapOverflow,
                resource: ResourceKind::TensorMap,
                impossible: needed as u64 > capacity,
                used,
                requested: needed as u64,
                recommended_min: used + needed as u64,
            })
        })
    }

    /// Step 11: host pointers for every tensor, into `payload` (fresh from
    /// [`TaskPayload::fresh`], so not shared); OUTPUTs are materialised in the heap buffer and
    /// returned.
    fn bind_tensors(
        &mut self,
        id: TaskId,
        ring: usize,
        offset: u64,
        tensors: impl IntoIterator<Item = impl Borrow<ArgTensor>>,
        payload: &mut Arc<TaskPayload>,
    ) -> Vec<TensorDesc> {
        let bound = &mut Arc::get_mut(payload)
            .expect("a fresh payload is not shared")
            .tensors;
        let next = self.memory.heap_device_base + self.heap_bases[ring] + offset;
        let mut outputs = Vec::new();
        self.bind_into(id, next, tensors, |b| bound.push(b), &mut outputs);
        outputs
    }

    /// [`OrchCore::bind_tensors`], each bound tensor handed to `bind` (a push: the descriptor is
    /// built where it goes, not returned through an iterator), its OUTPUTs laid out from device
    /// address `next` and pushed onto `outputs`.
    fn bind_into(
        &mut self,
        id: TaskId,
        mut next: u64,
        tensors: impl IntoIterator<Item = impl Borrow<ArgTensor>>,
        mut bind: impl FnMut(BoundTensor),
        outputs: &mut Vec<TensorDesc>,
    ) {
        // By reference up to the push: a descriptor copied through temporaries is stored in
        // pieces and reloaded whole, which stalls store forwarding (`perf annotate` showed
        // two fifths of this function's time on one such load).
        for t in tensors {
            let (desc, writable) = match *t.borrow() {
                ArgTensor::Existing { tag, ref desc } => (*desc, tag.writes()),
                ArgTensor::Create(ci) => {
                    let bytes = ci.padded_bytes();
                    let desc = TensorDesc::contiguous(next, bytes, ci.shape(), ci.dtype)
                        .expect("a runtime-allocated buffer fits its tensor")
                        .with_owner(Some(id))
                        .with_manual_dep(ci.manual_dep);
                    if let Some(bits) = ci.initial_value {
                        let size = ci.dtype.size();
                        let pattern = &bits.to_le_bytes()[..size];
                        self.memory.fill_heap(next, bytes, pattern);
                    }
                    next += bytes;
                    outputs.push(desc);
                    (desc, true)
                }
            };
            bind(BoundTensor {
                desc,
                base_ptr: self.memory.buffer_ptr(&desc),
                writable,
            });
        }
    }

    /// Step 12: wire and publish `new` under the graph lock, after the tasks handed off before
    /// it. With `may_hand_off`, when another thread holds the lock, the task is handed to that
    /// thread instead (rule HO1 of `pto_types::wait::Handoff`), which publishes it when it
    /// unlocks ([`super::run::GraphGuard`]), and this thread goes on. Only a task whose
    /// worst-case dep-list and spill entries fit beside those already reserved is handed off,
    /// at most [`HANDOFF_LIMIT`] at a time; any other waits for the lock and the pools here
    /// ([`OrchCore::publish_one`]), so a full pool still blocks (or fails) the submit that
    /// meets it. While every executor is busy the task is instead left in the inbox
    /// unpublished, for the next submits to publish in one hold ([`OrchCore::may_leave`]),
    /// unless an executor runs out of work first and publishes it.
    fn publish(&mut self, new: NewTask, may_hand_off: bool) -> OrchResult<()> {
        if !(may_hand_off && self.can_hand_off(&new)) {
            self.flush()?;
            return self.publish_one(new);
        }
        let run = Arc::clone(&self.run);
        if self.may_leave() {
            self.reserve(&new);
            let chip = &self.chip;
            if run.inbox.leave(new, || all_active(chip)) {
                #[cfg(test)]
                self.chip.tasks_left.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            return match run.inbox.raise(|| run.try_lock_graph_as_offerer()) {
                Some(graph) => self.publish_inbox(&run, graph),
                None => Ok(()),
            };
        }
        // Two paths rather than the task through an `Option`: its five words moved through
        // temporaries stalled store forwarding (a fifth of this function in `perf annotate`).
        let Some(mut graph) = run.try_lock_graph_as_offerer() else {
            self.reserve(&new);
            return match run.inbox.offer(new, || run.try_lock_graph_as_offerer()) {
                Some(graph) => self.publish_inbox(&run, graph),
                None => Ok(()),
            };
        };
        let mut fx = Effects::default();
        // What was handed off before `new` goes first. On a failed run the holder may have
        // dropped some: publishing `new` would leave a gap in the ids.
        self.take_and_book(&mut graph, &mut fx)?;
        let id = new.id;
        let refused = match self.publish_locked(&mut graph, new, &mut fx) {
            Ok(()) => {
                self.after_publish(id);
                None
            }
            Err((new, _)) => Some(new),
        };
        self.end_hold(&run, graph, fx, refused)
    }

    /// A hold of the graph lock that an offer or a raise of the inbox got: publishes the inbox
    /// (the task just put there included) and books it, then ends the hold.
    fn publish_inbox(&mut self, run: &RunShared, mut graph: GraphGuard<'_>) -> OrchResult<()> {
        let mut fx = Effects::default();
        self.take_and_book(&mut graph, &mut fx)?;
        self.end_hold(run, graph, fx, None)
    }

    /// The end of [`OrchCore::publish`]'s hold of the graph lock: signals what it made ready,
    /// unlocks, and publishes a refused task the blocking way.
    fn end_hold(
        &mut self,
        run: &RunShared,
        graph: GraphGuard<'_>,
        mut fx: Effects,
        refused: Option<NewTask>,
    ) -> OrchResult<()> {
        fx.wake = graph.signal(run);
        drop(graph);
        self.after_lock(&fx);
        match refused {
            // Cannot happen (the worst case fitted), but a refusal only means waiting.
            Some(new) => self.publish_one(new),
            None => Ok(()),
        }
    }

    /// Whether `new` may be handed off: few enough are, and its worst case fits the pools
    /// beside the entries reserved for them.
    fn can_hand_off(&self, new: &NewTask) -> bool {
        let ring = usize::from(new.id.ring());
        let (deps, spill) = worst_case(&new.producers);
        self.handed < HANDOFF_LIMIT
            && self.dep_pools[ring].available() >= self.reserved_deps[ring] + deps
            && self.spill_pools[ring].available() >= self.reserved_spill[ring] + spill
    }

    /// Whether the task being published may be left in the inbox unpublished (HO4 of
    /// `pto_types::wait::Handoff`), for a later hold to publish with the tasks after it: every
    /// executor is active (each comes back for work and, when it finds none, publishes what
    /// was left: `executor.rs`), the last kernel was not long, and this is not the task that
    /// completes a batch of [`LEAVE_LIMIT`], which publishes them all. One hold for several
    /// tasks moves the graph's cache lines between the threads once instead of per task
    /// ("Issue 25, stop 55" in BENCHMARKS.md).
    ///
    /// What it costs: a left task waits for the next submits (at most `LEAVE_LIMIT - 1`), a
    /// wait of this thread (which flushes), or an executor that finds no published work. So
    /// an orchestration that waits in its own code for a left task (no runtime call) waits
    /// until the executors ran out of the work published before it and what that work made
    /// ready: never for ever, but behind a chain of tasks that keeps them busy.
    fn may_leave(&self) -> bool {
        let kernel_ns = self.run.last_kernel_ns.load(Ordering::Relaxed);
        self.handed + 1 < LEAVE_LIMIT
            && (1..LONG_KERNEL_NS).contains(&kernel_ns)
            && self.executors_busy()
    }

    /// Whether every executor counts as active (between taking work and running out of it):
    /// each comes back for more without a wake. A plain read, for decisions that only cost
    /// time when stale (see [`OrchCore::enqueue`] on what it costs); HO4's check after a task
    /// is left reads it with [`all_active`].
    fn executors_busy(&self) -> bool {
        self.chip.active.load(Ordering::Relaxed) as usize >= self.chip.executors
    }

    fn reserve(&mut self, new: &NewTask) {
        let ring = usize::from(new.id.ring());
        let (deps, spill) = worst_case(&new.producers);
        self.handed += 1;
        self.reserved_deps[ring] += deps;
        self.reserved_spill[ring] += spill;
    }

    /// Under the graph lock: books, in id order, the handed-off tasks the graph published (or
    /// dropped, on a failed run) since the last booking: their exact dep-list and spill
    /// entries in place of the reservation, and the orchestrator's books
    /// ([`OrchCore::after_publish`]). Before any publication of this thread, which must come
    /// after them in the pools as in the graph.
    fn book_handed(&mut self, graph: &mut Graph) {
        if graph.handed.is_empty() {
            return;
        }
        std::mem::swap(&mut self.booking, &mut graph.handed);
        let mut booking = std::mem::take(&mut self.booking);
        for handed in booking.drain(..) {
            let ring = usize::from(handed.id.ring());
            let (deps, spill) = worst_case(&handed.recycled.producers);
            self.handed -= 1;
            self.reserved_deps[ring] -= deps;
            self.reserved_spill[ring] -= spill;
            if handed.published {
                self.take_entries(ring, handed.edges, handed.pending);
                self.after_publish(handed.id);
            }
            self.recycle(handed.recycled);
        }
        self.booking = booking;
    }

    /// Publishes a replayed task, with the tasks queued before it, when the graph lock is free
    /// (and the executors are not all busy, below);
    /// queues it while an executor holds the lock (up to [`REPLAY_QUEUE_LIMIT`] tasks, then it
    /// waits for the lock). The replay goes on with its next task instead of waiting for the
    /// executor's hold to end, and publishes the queue with its next task that finds the lock
    /// free, before any wait and at its scope boundaries ([`OrchCore::flush`]); when it
    /// returns, it hands what is left to the lock's holder ([`OrchCore::hand_off_queue`]).
    /// Unlike a hand-off, the queue keeps the publication work on this thread, which matters
    /// when executors are the bottleneck (a replayed chain). While every executor is active
    /// (between taking work and running out of it: it comes back for more without a wake), it
    /// also queues up to [`REPLAY_BATCH`] tasks before it tries the lock: one hold for several
    /// tasks moves the lock's cache line between the threads once instead of per task. A task
    /// waits so for at most `REPLAY_BATCH - 1` more submits of this replay (an executor may
    /// come back for work meanwhile: a short delay, never a stranded task, since every wait,
    /// scope boundary and the replay's end publish the queue). `ChipShared::active` changes
    /// when an executor starts or stops working, not per block as `RunShared::running` does:
    /// reading it costs the orchestrator no cache line the executors write per task.
    pub(crate) fn enqueue(&mut self, task: NewTask) -> OrchResult<()> {
        debug_assert_eq!(self.handed, 0, "a replay starts with nothing handed off");
        debug_assert!(
            self.pending
                .front()
                .is_none_or(|t| t.id.ring() == task.id.ring()),
            "a scope boundary flushes the queue"
        );
        self.pending.push_back(task);
        let wait = self.pending.len() >= REPLAY_QUEUE_LIMIT;
        if !wait && self.executors_busy() && self.pending.len() < REPLAY_BATCH {
            return Ok(());
        }
        self.publish_pending(wait)
    }

    /// At the end of a replay: publishes the queue if the lock is free, else hands it off
    /// ([`OrchCore::publish`]), so the replay returns without waiting for the lock.
    pub(crate) fn hand_off_queue(&mut self) -> OrchResult<()> {
        self.publish_pending(false)?;
        for task in std::mem::take(&mut self.pending) {
            self.publish(task, true)?;
        }
        Ok(())
    }

    /// Publishes every queued and handed-off task and books it, waiting for the graph lock.
    /// Called before anything that needs them in the graph or in the books: a wait (what it
    /// waits for may need them to run), a scope boundary (they belong to the innermost scope),
    /// a publication that cannot be handed off, a tensor access, the write-after-read check, a
    /// replay.
    pub(crate) fn flush(&mut self) -> OrchResult<()> {
        // Never both: a replay starts with a flush and ends with its queue handed off.
        self.publish_pending(true)?;
        if self.handed == 0 {
            return Ok(());
        }
        let run = Arc::clone(&self.run);
        let mut fx = Effects::default();
        let mut graph = run.lock_graph_as_offerer();
        let booked = self.take_and_book(&mut graph, &mut fx);
        fx.wake = graph.signal(&run);
        drop(graph);
        self.after_lock(&fx);
        booked?;
        debug_assert_eq!(
            self.handed, 0,
            "the graph took and published every handed-off task"
        );
        Ok(())
    }

    /// Under the graph lock: publishes what is still in the inbox (HO3) and books every
    /// handed-off task the graph published. On a failed run the graph dropped them (or lost
    /// them to a panic under the lock), and so does this thread: `Err`.
    fn take_and_book(&mut self, graph: &mut GraphGuard<'_>, fx: &mut Effects) -> OrchResult<()> {
        graph.take_handed(fx, true);
        self.book_handed(graph);
        if self.run.is_cancelled() {
            return Err(self.drop_handed());
        }
        Ok(())
    }

    /// On a failed run: forgets the handed-off tasks not booked (the graph drops them, or a
    /// panic under the lock lost them) and their reservations.
    fn drop_handed(&mut self) -> Fatal {
        self.handed = 0;
        self.reserved_deps = [0; RING_COUNT];
        self.reserved_spill = [0; RING_COUNT];
        Fatal(())
    }

    /// Publishes the queued tasks in id order, with the lock (`wait`) or only if it is free:
    /// as many as the pools admit in one hold of the graph lock, then the rest one at a time
    /// through the wait loop.
    fn publish_pending(&mut self, wait: bool) -> OrchResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if self.run.is_cancelled() {
            // A failed run takes no more tasks: the queued ones are dropped unpublished.
            self.pending.clear();
            return Err(Fatal(()));
        }
        // Before the lock: the pools' free room is what the publications below check.
        self.refresh_all();
        let run = Arc::clone(&self.run);
        let graph = if wait {
            Some(run.lock_graph_as_offerer())
        } else {
            run.try_lock_graph_as_offerer()
        };
        let Some(mut graph) = graph else {
            return Ok(());
        };
        let mut batch = std::mem::take(&mut self.pending);
        let mut fx = Effects::default();
        while let Some(new) = batch.pop_front() {
            let id = new.id;
            match self.publish_locked(&mut graph, new, &mut fx) {
                Ok(()) => self.after_publish(id),
                Err((new, _)) => {
                    batch.push_front(new);
                    break;
                }
            }
        }
        fx.wake = graph.signal(&run);
        drop(graph);
        self.after_lock(&fx);
        while let Some(new) = batch.pop_front() {
            self.publish_one(new)?;
        }
        self.pending = batch;
        Ok(())
    }

    /// Publishes one task, waiting for dep-pool entries if need be.
    fn publish_one(&mut self, new: NewTask) -> OrchResult<()> {
        let id = new.id;
        let ring = usize::from(id.ring());
        let run = Arc::clone(&self.run);
        let mut task = Some(new);
        let mut fx = Effects::default();
        self.wait_for(ring, Some(id), |core| {
            let mut graph = run.lock_graph_as_offerer();
            let new = task.take().expect("published once");
            match core.publish_locked(&mut graph, new, &mut fx) {
                Ok(()) => {
                    fx.wake = graph.signal(&run);
                    Ok(())
                }
                Err((new, blocked)) => {
                    task = Some(new);
                    Err(blocked)
                }
            }
        })?;
        self.after_publish(id);
        self.after_lock(&fx);
        Ok(())
    }

    /// Under the graph lock: publishes `new` and takes the dep-list and spill entries it
    /// wired ([`Graph::publish`] counts them), or gives the task back with why the pools
    /// refused it.
    fn publish_locked(
        &mut self,
        graph: &mut Graph,
        new: NewTask,
        fx: &mut Effects,
    ) -> Result<(), (NewTask, Blocked)> {
        let ring = usize::from(new.id.ring());
        if let Some(blocked) = self.refusal(graph, ring, &new.producers) {
            return Err((new, blocked));
        }
        let wired = graph.publish(new, &self.run, fx);
        self.take_entries(ring, wired.edges, wired.pending);
        self.recycle(wired.recycled);
        Ok(())
    }

    /// Why ring `ring`'s pools cannot take a task with `producers` now, if they cannot. With
    /// room for the worst case (every producer pending) the producers' states are not read;
    /// else the live edges are counted ([`Graph::live_edges`]) to see whether they fit.
    fn refusal(&self, graph: &Graph, ring: usize, producers: &[(TaskId, bool)]) -> Option<Blocked> {
        let (worst_deps, worst_spill) = worst_case(producers);
        if self.dep_pools[ring].available() >= worst_deps
            && self.spill_pools[ring].available() >= worst_spill
        {
            return None;
        }
        let (edges, pending) = graph.live_edges(producers);
        let spill = edges.saturating_sub(INLINE_FANIN);
        let nodes_ok = self.dep_pools[ring].available() >= pending;
        let spill_ok = self.spill_pools[ring].available() >= spill;
        if nodes_ok && spill_ok {
            return None;
        }
        let capacity = u64::from(self.sizing.dep_pool(ring));
        let (resource, needed, pool) = if !spill_ok {
            (ResourceKind::FaninSpill, spill, &self.spill_pools[ring])
        } else {
            (ResourceKind::DepList, pending, &self.dep_pools[ring])
        };
        Some(Blocked {
            ring_bound: true,
            code: ErrorCode::DepPoolOverflow,
            resource,
            impossible: needed > capacity,
            used: pool.used(),
            requested: needed,
            recommended_min: pool.used() + needed,
        })
    }

    /// Takes a published task's entries: a dep-list entry per pending producer, spill entries
    /// for the edges past the inline ones, and its edges in the demand ledger.
    fn take_entries(&mut self, ring: usize, edges: u64, pending: u64) {
        let spill = edges.saturating_sub(INLINE_FANIN);
        if pending > 0 {
            self.dep_pools[ring]
                .try_alloc_n(pending)
                .expect("checked available");
        }
        if spill > 0 {
            self.spill_pools[ring]
                .try_alloc_n(spill)
                .expect("checked available");
        }
        if edges > 0 {
            self.dep_demand[ring]
                .try_alloc_n(edges)
                .expect("the demand ledger is unbounded");
        }
    }

    /// Keeps what a publication gave back for the next submits: one spare per task that may
    /// be handed off at once.
    fn recycle(&mut self, recycled: super::graph::Recycled) {
        if self.spare_lists.len() < HANDOFF_LIMIT as usize {
            self.spare_lists.push(recycled.producers);
        }
        if let Some(mut payload) = recycled.payload
            && self.spare_payloads.len() < HANDOFF_LIMIT as usize
        {
            // A fused replay's counters and ready queue are as long as its graph: the spares
            // keep those of at most `SPARE_FUSED` of them, enough for replays one after another.
            let kept = self
                .spare_payloads
                .iter()
                .filter(|p| p.fused.is_some())
                .count();
            if kept >= SPARE_FUSED
                && let Some(p) = Arc::get_mut(&mut payload)
            {
                p.fused = None;
            }
            self.spare_payloads.push(payload);
        }
    }

    /// A spare payload for a fused replay: one that keeps a fused replay's buffers, if any.
    fn spare_for_fused(&mut self) -> Option<Arc<TaskPayload>> {
        let at = self.spare_payloads.iter().rposition(|p| p.fused.is_some());
        match at {
            Some(i) => Some(self.spare_payloads.swap_remove(i)),
            None => self.spare_payloads.pop(),
        }
    }

    /// The orchestrator's books after task `id` was published.
    fn after_publish(&mut self, id: TaskId) {
        let ring = usize::from(id.ring());
        self.published += 1;
        let mask = u64::from(self.rings[ring].window()) - 1;
        let marks = &mut self.marks[ring][(id.local() & mask) as usize];
        marks.dep_mark = self.dep_pools[ring].top();
        marks.demand_mark = self.dep_demand[ring].top();
        marks.spill_mark = self.spill_pools[ring].top();
        self.scopes.last_mut().expect("root scope").tasks.push(id);
    }

    /// Records an orchestrator span (trace level 4).
    fn trace_orch(&self, name: String, start_us: f64) {
        if let Some(trace) = &self.run.trace {
            trace.lock().span(AicpuSpan {
                scheduler: None,
                name,
                start_us,
                end_us: self.run.micros(Instant::now()),
            });
        }
    }

    /// Wakes the executors a publication concerns. `ring_progress` and `done` are waited on
    /// only by this thread, so changes it makes itself notify nobody.
    fn after_lock(&mut self, fx: &Effects) {
        self.own_ready += u64::from(fx.became_ready);
        if fx.wake != Signal::Nothing {
            self.own_signals += 1;
            self.chip.signal_work(fx.wake == Signal::Wake);
        }
    }

    /// Blocking element access for `get/set_tensor_data` (CHIP_RUNTIME.md §2.3): waits until
    /// the tensor's creator and every live overlapping TensorMap writer completed (for a write,
    /// also until their consumers released them), bounded by `tensor_wait_timeout` (code 8),
    /// then reads or writes one element through a one-tensor kernel context.
    pub(crate) fn access_element<T: Element>(
        &mut self,
        desc: TensorDesc,
        idx: &[u32],
        write: Option<T>,
    ) -> OrchResult<T> {
        self.check_fatal()?;
        let what = if write.is_some() {
            "set_tensor_data"
        } else {
            "get_tensor_data"
        };
        if !T::accepts(desc.dtype()) {
            return Err(self.fail_immediate(
                ErrorCode::InvalidArgs,
                format!(
                    "{what}: the tensor has dtype {}, not {}",
                    desc.dtype(),
                    T::DTYPE
                ),
            ));
        }
        if idx.len() != desc.ndims() || desc.element_offset(idx).is_none() {
            return Err(self.fail_immediate(
                ErrorCode::InvalidArgs,
                format!("{what}: index {idx:?} is outside the tensor {desc}"),
            ));
        }
        // Its producers must be in the graph to be waited for.
        self.flush()?;
        self.refresh_all();
        let mut producers: Vec<TaskId> = desc.owner().into_iter().collect();
        if !desc.manual_dep() {
            let observed = self.observed;
            self.tensormap.lookup(&desc, &observed, |hit| {
                producers.push(hit.producer);
                Visit::Keep
            });
        }
        let run = Arc::clone(&self.run);
        let deadline = Instant::now() + self.settings.tensor_wait_timeout;
        let mut waiter = Waiter::new(&run.ring_progress, self.settings.spin);
        let mut watch = Watch::default();
        let chip = Arc::clone(&self.chip);
        let mut helper = Helper::quick_only(&run, &chip);
        loop {
            let pending = {
                let graph = run.lock_graph_as_offerer();
                producers
                    .iter()
                    .copied()
                    .find(|&p| !graph.producer_done(p, write.is_some()))
            };
            let Some(blocking) = pending else { break };
            self.check_fatal()?;
            if Instant::now() >= deadline {
                let mut e = ChipError::new(
                    ErrorCode::TensorWaitTimeout,
                    Detector::Timeout,
                    format!(
                        "{what} waited {} ms for producer {blocking} of tensor {desc}",
                        self.settings.tensor_wait_timeout.as_millis()
                    ),
                );
                e.task = Some(blocking);
                return Err(self.fail(e));
            }
            if helper.help_or_step_away(&mut waiter) {
                continue;
            }
            let wait_until = match watch.check(&run, self.settings.watchdog) {
                Some(watchdog) => deadline.min(watchdog),
                None => deadline,
            };
            let _ = waiter.wait(Some(wait_until));
            helper.after_wait();
        }
        let bound = [BoundTensor {
            desc,
            base_ptr: self.memory.buffer_ptr(&desc),
            writable: write.is_some(),
        }];
        let ctx = KernelCtx::new(
            &bound,
            &[],
            0,
            1,
            0,
            CoreId(u32::MAX),
            TaskId::INVALID,
            &run.cancelled,
        );
        Ok(match write {
            Some(value) => {
                ctx.output::<T>(0).set(idx, value);
                value
            }
            None => ctx.input::<T>(0).get(idx),
        })
    }

    /// Opens a nested scope opened at `site`.
    pub(crate) fn begin_scope(
        &mut self,
        site: &'static std::panic::Location<'static>,
    ) -> OrchResult<()> {
        self.begin_scope_at(Site::Caller(site))
    }

    /// Opens a nested scope named `site` in scope stats and traces.
    fn begin_scope_at(&mut self, site: Site) -> OrchResult<()> {
        self.check_fatal()?;
        self.flush()?;
        if self.scopes.len() >= MAX_SCOPE_DEPTH {
            return Err(self.fail_immediate(
                ErrorCode::InvalidArgs,
                format!("scopes nest at most {MAX_SCOPE_DEPTH} deep, counting the root scope"),
            ));
        }
        self.open_frame(site);
        Ok(())
    }

    /// Ends the innermost scope (always, also after a failure), releasing its tasks.
    pub(crate) fn end_scope(&mut self) {
        // On failure the run is cancelled and the queued tasks are dropped unpublished (never
        // counted in `published`).
        let _ = self.flush();
        let depth = self.scopes.len() - 1;
        if self.scope_stats.is_some() {
            let ring = self.scopes[depth].ring;
            self.refresh_all();
            let ring_peaks = self.rings[ring].end_scope_sample();
            let peaks = Peaks {
                task_window: ring_peaks.live,
                heap: ring_peaks.heap_used,
                heap_largest_alloc: ring_peaks.largest_alloc,
                dep_pool: self.dep_demand[ring].end_scope_sample(),
                spill: self.spill_pools[ring].end_scope_sample(),
            };
            let counters = self.counters(ring);
            let tensormap = self.tensormap.live_count();
            let t_us = self.run.micros(Instant::now());
            let site = self.scopes[depth].site.to_string();
            if let Some(stats) = &mut self.scope_stats {
                stats.record(
                    &site,
                    Phase::End,
                    depth,
                    ring,
                    counters,
                    tensormap,
                    t_us,
                    Some(peaks),
                    &self.scopes[depth].graphs,
                );
            }
        }
        if let Some((start, name)) = self.scope_spans.pop() {
            self.trace_orch(name, start);
        }
        let mut frame = self.scopes.pop().expect("a scope is open");
        let mask = u64::from(self.rings[frame.ring].window()) - 1;
        for id in &frame.tasks {
            let ring = usize::from(id.ring());
            let marks = &mut self.marks[ring][(id.local() & mask) as usize];
            marks.scope_open = false;
        }
        let run = Arc::clone(&self.run);
        let mut fx = Effects::default();
        run.lock_graph_as_offerer()
            .end_scope(&frame.tasks, &run, &mut fx);
        self.after_lock(&fx);
        if self.spare_frames.len() < SPARE_FRAMES && frame.tasks.capacity() <= SPARE_FRAME_TASKS {
            frame.tasks.clear();
            self.spare_frames.push(frame.tasks);
        }
    }

    /// Ends the root scope and declares the task total: the run may now finish.
    pub(crate) fn finish(&mut self) {
        while !self.scopes.is_empty() {
            self.end_scope();
        }
        self.run
            .total_tasks
            .store(self.published, Ordering::Release);
    }

    /// The tasks the orchestration submitted, replayed ones included, whichever way a replay
    /// ran: a fused replay counts its graph's tasks (hidden alloc tasks included), as task by
    /// task, though the engine ran one.
    pub(crate) fn tasks_submitted(&self) -> u64 {
        self.published + self.fused_extra
    }

    /// Run-long peaks per ring: (live tasks, heap bytes, dep-list entries).
    pub(crate) fn high_water(&self) -> [(u64, u64, u64); RING_COUNT] {
        std::array::from_fn(|r| {
            let peaks = self.rings[r].high_water();
            (peaks.live, peaks.heap_used, self.dep_demand[r].high_water())
        })
    }

    /// The write-after-read check's findings (each reported once per run).
    pub(crate) fn war_report(&self) -> Vec<String> {
        self.war.report()
    }

    /// What this run leaves to the chip's next ([`Carried`]; the caller adds the slot records).
    pub(crate) fn into_carried(self) -> Carried {
        Carried {
            tensormap: self.tensormap,
            marks: self.marks,
            slots: SlotStore::default(),
        }
    }
}

/// Kernel names of a submit, for diagnostics.
fn payload_names(kernels: &[Option<KernelRef>; 3]) -> String {
    let names: Vec<&str> = kernels.iter().flatten().map(|k| k.name()).collect();
    if names.is_empty() {
        "dummy".to_string()
    } else {
        names.join("+")
    }
}

/// The last two components of a source path (`src/vector.rs`), for compact sites.
fn short_path(file: &str) -> &str {
    let mut cut = file.len();
    for _ in 0..2 {
        match file[..cut].rfind(['/', '\\']) {
            Some(i) => cut = i,
            None => return file,
        }
    }
    &file[cut + 1..]
}

/// Whether every executor of the chip counts as active, read with a read-modify-write: the
/// check of HO4 after a task is left, paired with each executor's read-modify-writes when it
/// stops counting and then reads `has_left` (`pto_types::wait::Handoff`'s module doc). A chip
/// without executors (none is started today) would have none to look.
fn all_active(chip: &ChipShared) -> bool {
    chip.executors > 0 && chip.active.fetch_add(0, Ordering::SeqCst) as usize >= chip.executors
}

/// The dep-list and spill entries a task with `producers` takes at most: every producer
/// pending at publication.
fn worst_case(producers: &[(TaskId, bool)]) -> (u64, u64) {
    let deps = producers.len() as u64;
    (deps, deps.saturating_sub(INLINE_FANIN))
}

/// Sorts, merges duplicates (RETAIN wins) and drops self-edges.
fn dedup_producers(producers: &mut Vec<(TaskId, bool)>, me: TaskId) {
    producers.retain(|&(p, _)| p != me);
    producers.sort_unstable_by_key(|&(p, _)| p);
    producers.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            earlier.1 |= later.1;
            true
        } else {
            false
        }
    });
}

/// Most retirements a back-pressured orchestrator lets pass before it is woken
/// ([`OrchCore::wake_target`]). Each wake is a futex wake and a context switch onto a CPU
/// that runs a kernel; at 100 µs stencil kernels a cap of 16 cost the orchestrator 1.7-2.0 µs
/// of CPU per task, 64 costs 1.4-1.5 (BENCHMARKS.md, stop 42). Three quarters of the live
/// tasks are still queued when it wakes, so the executors do not run dry meanwhile — unless
/// those tasks form one chain: a window full of a serial chain then holds back the
/// independent work submitted after it for up to 64 retirements (16 before) while other
/// cores idle: the price of fewer wakes, paid only with 68 or more live tasks.
const WAKE_BATCH_MAX: u64 = 64;

/// Spin-or-park for the orchestrator's waits, chosen from the last wait: a wait that outlasted
/// the spin window (a slow kernel holds the ring) makes the next one park at once, so that the
/// orchestrator does not take a CPU from the kernels it waits for; every [`RESPIN_EVERY`]th wait
/// spins again to notice when waits have become short.
#[derive(Default)]
struct AdaptiveSpin {
    park: bool,
    waits: u32,
}

/// While waits outlast the spin window, one wait in 16 spins anyway: a probe costs at most one
/// window (50 µs by default), so probing every 16th wait spends at most ~3 µs per wait on
/// noticing that waits have become short again.
const RESPIN_EVERY: u32 = 16;

impl AdaptiveSpin {
    fn policy(&mut self, spin: SpinPolicy) -> SpinPolicy {
        self.waits = self.waits.wrapping_add(1);
        if self.park && !self.waits.is_multiple_of(RESPIN_EVERY) {
            SpinPolicy::PARK_IMMEDIATELY
        } else {
            spin
        }
    }

    fn record(&mut self, waited: Duration, spin: SpinPolicy) {
        self.park = waited > spin.spin();
    }
}

/// Waits until a blocked request is worth trying again: while spinning, until the watermark of
/// the awaited ring reaches its wake target (`wake`), or, without one, until anything
/// progressed, or the run failed; once the spin window is over, until a notification (which
/// comes at the same threshold, or when nothing runs any more) or `deadline`. Trying again only
/// then makes a back-pressured orchestrator submit in bursts: retrying on every spin step made
/// it wait once per task, each wait a few µs of spinning on the graph lock, in lock step with the
/// executors' retirements.
fn pause(
    run: &RunShared,
    waiter: &mut Waiter<'_>,
    wake: Option<(usize, u64)>,
    deadline: Instant,
    work_to_help: impl Fn() -> bool,
) {
    let progress = run.progress.load(Ordering::Acquire);
    let worth_retrying = || {
        run.is_cancelled()
            || work_to_help()
            || match wake {
                Some((ring, at)) => run.watermark_reached(ring, at),
                None => run.progress.load(Ordering::Acquire) != progress,
            }
    };
    loop {
        match waiter.wait(Some(deadline)) {
            WaitOutcome::Spun | WaitOutcome::Yielded if !worth_retrying() => continue,
            // Spinning found it worth retrying; or a key was just taken (W1), and the caller's
            // full re-check must come between it and the park; or parked and notified, or out
            // of time.
            _ => return,
        }
    }
}

/// Clears the orchestrator's wake threshold when a wait ends, however it ends.
struct ClearWake<'a>(&'a RunShared);

impl Drop for ClearWake<'_> {
    fn drop(&mut self) {
        self.0.want_ring_wake(None);
    }
}
