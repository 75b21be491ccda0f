//! The execution engine of a chip: graph state, orchestrator and executors (CHIP_RUNTIME.md §3
//! and §6).
//!
//! Threads and ownership:
//! - the **orchestrator** is the thread that calls `ChipWorker::run`; it runs the user's
//!   orchestration function and owns every ring allocator, the TensorMap and the scope stack
//!   ([`orchestrator::OrchCore`]); nothing else touches them. It also runs the no-progress
//!   watchdog (code 100) whenever it waits ([`run::Watch`]), and while it waits it runs
//!   *helpable* work itself (one-block tasks: quick ones, or any seen to return when it is
//!   the chip's last worker; [`orchestrator::help`]), so that on a small host the threads
//!   running kernels are as many as the CPUs instead of one more; as the last worker it also
//!   runs surplus quick work when it gets 8 live tasks per worker ahead (H7);
//! - **executors** (`min(simulated cores, host parallelism)` threads per chip, one fewer when
//!   the cores outnumber the CPUs and the orchestrator is the last worker) take a ready
//!   block, claim a *logical* core for it, run the kernel, complete it — releasing its consumers
//!   into the ready lanes — and take the next block themselves, in one hold of the graph lock
//!   per block ([`executor`]). Simulated cores are not threads: a core is a slot in the graph's
//!   occupancy table, so 24 simulated cores on a 2-CPU host cost 2 threads, not 24. A parked
//!   executor keeps the watchdog too while its run is live, for the time the orchestrator
//!   spends in a kernel;
//! - **gang threads**, one per logical core and started the first time that core needs one, run
//!   the extra parts of work that must run *at the same time*: the blocks of a
//!   `require_sync_start` cohort and the parts of a MIX block (their kernels may wait for each
//!   other, as on the device). They only run such parts and never take work themselves;
//! - the **stand-in**, started the first time a waiting orchestrator that is the chip's last
//!   worker finds a block it may not run itself (a kernel never seen to return): it runs that
//!   one block, finishes it and parks, and never takes work itself ([`StandIn`],
//!   `orchestrator/help.rs` H5).
//!
//! All task state shared between them — slot records, fanout lists, ready lanes, core
//! occupancy — sits behind one parking mutex ([`graph::Graph`], locked through
//! [`run::RunShared::lock_graph`]), taken once per submit (wiring and publication) and once per
//! finished block (completion and the next take, together). A submit that finds it held hands
//! its task to the holder instead, who publishes it when it unlocks ([`run::GraphGuard`]);
//! while every executor is busy, a submit leaves its task unpublished and the submit after up
//! to seven such tasks publishes them with its own in one hold, unless an executor that runs
//! out of work publishes them first (`OrchCore::may_leave`, rule HO4 of `pto_types::wait::Handoff`). This removes the
//! classic bug classes of fine-grained task graphs
//! (lost readiness, double consumption, reuse of a slot still referenced) at the cost of a short
//! critical section (`docs/decisions/chip-engine.md` has the measurements); the ring
//! allocators, pools and TensorMap stay lock-free because only the orchestrator uses them. The
//! watermark of each ring is published in an atomic for the orchestrator's refresh.
//!
//! Waking executors ([`ChipShared::signal_work`]) follows `pto_types::wait::WorkSignal`:
//! whoever makes a block dispatchable moves the chip's work epoch and wakes one parked executor
//! only when no executor is searching (spinning for work). A searching executor watches the
//! epoch; before it parks it stops counting itself as searching, takes a key and re-checks the
//! epoch. The epoch and the count share one word, so either the signal reads the executor still
//! counted, or the re-check sees the move (the proof is in `pto_types::wait`'s README; loom
//! checks it in `loom_tests.rs`).

pub(crate) mod core;
pub(crate) mod executor;
pub(crate) mod fused;
pub(crate) mod graph;
pub(crate) mod infer;
// Host pointers of run memory (rules H1, H2).
#[allow(unsafe_code)]
pub(crate) mod heap;
pub(crate) mod orchestrator;
pub(crate) mod run;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pto_types::wait::{EventCount, SpinPolicy, WorkSignal};

use crate::diag::trace::SchedulerLanes;
use crate::kernel::{BoundTensor, KernelRef};
use crate::task_id::TaskId;

use self::run::RunShared;

/// How a task occupies cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Aic,
    Aiv,
    /// Cores of one cluster; bit 0 AIC, bit 1 AIV0, bit 2 AIV1.
    Mix(u8),
    Dummy,
}

impl Shape {
    /// Cores one block occupies.
    pub(crate) fn cores_per_block(self) -> u32 {
        match self {
            Shape::Aic | Shape::Aiv => 1,
            Shape::Mix(mask) => mask.count_ones(),
            Shape::Dummy => 0,
        }
    }
}

/// Arguments a task keeps inline, without an allocation of their own: four tensors and four
/// scalars cover the kernels we ship; more spill to the heap.
pub(crate) const INLINE_ARGS: usize = 4;

/// A task's bound tensors, inline up to [`INLINE_ARGS`].
pub(crate) type BoundTensors = smallvec::SmallVec<[BoundTensor; INLINE_ARGS]>;

/// A task's scalars, inline up to [`INLINE_ARGS`].
pub(crate) type Scalars = smallvec::SmallVec<[u64; INLINE_ARGS]>;

/// What a task runs: immutable once published, shared with the threads running its blocks.
/// Its arguments are inline, and the `Arc` is reused: the graph keeps the payloads of a few
/// consumed tasks, each publication gives one back to the orchestrator (`graph::Recycled`), and
/// [`TaskPayload::fresh`] refills it when no block still holds it.
#[derive(Debug)]
pub(crate) struct TaskPayload {
    pub(crate) shape: Shape,
    /// AIC, AIV0, AIV1 kernels (AIC tasks use slot 0, AIV tasks slot 1).
    pub(crate) kernels: [Option<KernelRef>; 3],
    pub(crate) tensors: BoundTensors,
    pub(crate) scalars: Scalars,
    pub(crate) block_num: u32,
    pub(crate) sync_start: bool,
    /// A fused replay (`fused.rs`): each block runs the graph's tasks instead of `kernels`.
    pub(crate) fused: Option<Arc<fused::FusedRun>>,
}

impl TaskPayload {
    /// A payload of `shape` with no tensors yet, in `reuse` when no other thread shares it
    /// (no allocation), else in a new one.
    pub(crate) fn fresh(
        reuse: Option<Arc<TaskPayload>>,
        shape: Shape,
        kernels: [Option<KernelRef>; 3],
        scalars: &[u64],
        block_num: u32,
        sync_start: bool,
    ) -> Arc<TaskPayload> {
        let fill = |p: &mut TaskPayload| {
            p.shape = shape;
            p.kernels = kernels;
            p.tensors.clear();
            p.scalars.clear();
            p.scalars.extend_from_slice(scalars);
            p.block_num = block_num;
            p.sync_start = sync_start;
            p.fused = None;
        };
        if let Some(mut arc) = reuse
            && let Some(p) = Arc::get_mut(&mut arc)
        {
            fill(p);
            return arc;
        }
        Arc::new(TaskPayload {
            shape,
            kernels,
            tensors: BoundTensors::new(),
            scalars: Scalars::from_slice(scalars),
            block_num,
            sync_start,
            fused: None,
        })
    }

    /// A one-block AIC or AIV task outside any sync-start cohort: one thread runs all of it,
    /// and an unstarted one can be given back whole.
    pub(crate) fn is_one_block(&self) -> bool {
        self.block_num == 1
            && !self.sync_start
            && self.fused.is_none()
            && matches!(self.shape, Shape::Aic | Shape::Aiv)
    }

    /// The kernel names, for messages.
    pub(crate) fn kernel_names(&self) -> String {
        let names: Vec<&str> = self.kernels.iter().flatten().map(|k| k.name()).collect();
        if names.is_empty() {
            "dummy".to_string()
        } else {
            names.join("+")
        }
    }
}

/// One block (or one core's part of a MIX block) on the logical core it claimed. It belongs
/// to the run whose graph handed it out; whoever holds it also holds that run.
pub(crate) struct Assignment {
    pub(crate) core: u32,
    pub(crate) task: TaskId,
    pub(crate) payload: Arc<TaskPayload>,
    pub(crate) kernel: KernelRef,
    pub(crate) block_idx: u32,
    pub(crate) sub_block_id: u32,
    /// When the block was handed out (µs since the run started; 0 unless tracing).
    pub(crate) dispatch_us: f64,
}

/// What one take from the ready lanes hands a thread.
pub(crate) enum Work {
    /// One block on one core.
    Single(Assignment),
    /// Parts that must run at the same time (a sync-start cohort, the parts of a MIX block):
    /// the taker runs the first, gang threads the others.
    Gang(Vec<Assignment>),
}

/// The report that one assignment finished.
pub(crate) struct Completion {
    pub(crate) core: u32,
    pub(crate) task: TaskId,
    pub(crate) block_idx: u32,
    /// The kernel that ran (its name is in panic reports).
    pub(crate) kernel: KernelRef,
    /// The panic message, if the kernel panicked.
    pub(crate) panic: Option<String>,
    /// How long the kernel ran, ns.
    pub(crate) ran_ns: u64,
    /// Kernel start and end, µs since the run started (0 unless tracing).
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    pub(crate) dispatch_us: f64,
    pub(crate) sub_block_id: u32,
    pub(crate) block_num: u32,
}

impl Completion {
    /// The completion of an assignment whose kernel never ran (no times, no panic).
    pub(crate) fn unrun(a: &Assignment) -> Completion {
        Completion {
            core: a.core,
            task: a.task,
            block_idx: a.block_idx,
            kernel: a.kernel,
            panic: None,
            ran_ns: 0,
            start_us: 0.0,
            end_us: 0.0,
            dispatch_us: a.dispatch_us,
            sub_block_id: a.sub_block_id,
            block_num: a.payload.block_num,
        }
    }
}

/// Where a logical core sits in its cluster.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoreInfo {
    /// Its AIV index in the cluster (0 for the AIC core): the kernel's `sub_block_id`.
    pub(crate) sub_block: u32,
}

/// The gang thread of one logical core (or the stand-in): its mailbox and the event count it
/// parks on.
#[derive(Default)]
pub(crate) struct GangCell {
    pub(crate) mailbox: Mutex<Option<(Arc<RunShared>, Assignment)>>,
    pub(crate) ec: EventCount,
    /// The thread, once started.
    pub(crate) thread: Mutex<Option<JoinHandle<()>>>,
}

/// The orchestrator's stand-in (`orchestrator/help.rs`, H5): a thread, started the first
/// time it is needed, that runs the block a waiting orchestrator hands it because it may not
/// run that block itself: a kernel never seen to return, or, in a tensor wait, one that was
/// not quick; a block of a multi-block task as well. Never a gang.
#[derive(Default)]
pub(crate) struct StandIn {
    /// Its mailbox, event count and thread, as a gang thread's.
    pub(crate) cell: GangCell,
    /// A block was handed to it and is not finished yet: it takes one at a time.
    pub(crate) busy: AtomicBool,
}

/// State shared by a chip's threads for the chip's lifetime.
pub(crate) struct ChipShared {
    pub(crate) clusters: u32,
    pub(crate) cores: Vec<CoreInfo>,
    /// Executor threads of this chip.
    pub(crate) executors: usize,
    /// The chip has at least as many simulated cores as the host has CPUs and started one
    /// executor fewer than the host has CPUs: the orchestrator's thread is the last worker. A
    /// waiting orchestrator then runs long kernels too, and hands what it may not run to its
    /// stand-in (`orchestrator/help.rs`, H1 and H5).
    pub(crate) orchestrator_is_worker: bool,
    /// The work epoch, the searching executors and where they park (see the module doc).
    pub(crate) work: CachePadded<WorkSignal>,
    /// Executors between taking work and running out of it. Every decrement is a
    /// read-modify-write, and an executor reads the run inbox's `has_left` after it: the
    /// orchestrator leaves tasks unpublished only while this counts every executor (rule HO4
    /// of `pto_types::wait::Handoff`, `OrchCore::may_leave`).
    pub(crate) active: CachePadded<AtomicU32>,
    /// Tasks the orchestrator left unpublished on this chip (HO4), for tests that check they
    /// run.
    #[cfg(test)]
    pub(crate) tasks_left: AtomicU64,
    /// The run in progress, if any, and a sequence number bumped whenever it changes, so that
    /// executors read the mutex only when there is something new.
    pub(crate) run: Mutex<Option<Arc<RunShared>>>,
    pub(crate) run_seq: CachePadded<AtomicU64>,
    pub(crate) gangs: Vec<GangCell>,
    pub(crate) stand_in: StandIn,
    pub(crate) shutdown: AtomicBool,
    /// Spin window of every waiting thread of the chip: pure spinning (no `yield_now`, which
    /// can hand a whole time slice to another thread on a small host; see `pto_types::wait`'s
    /// README).
    pub(crate) spin: SpinPolicy,
    /// The no-progress watchdog's timeout (`scheduler_timeout`): idle executors keep it for
    /// a live run too, since the orchestrator cannot while it runs a block itself
    /// (`orchestrator/help.rs`).
    pub(crate) watchdog: std::time::Duration,
}

impl ChipShared {
    pub(crate) fn new(
        clusters: u32,
        (executors, orchestrator_is_worker): (usize, bool),
        spin: SpinPolicy,
        watchdog: std::time::Duration,
    ) -> ChipShared {
        let cores = (0..3 * clusters)
            .map(|id| {
                let sub_block = if id < clusters {
                    0
                } else {
                    (id - clusters) % 2
                };
                CoreInfo { sub_block }
            })
            .collect();
        ChipShared {
            clusters,
            cores,
            executors,
            orchestrator_is_worker,
            work: CachePadded::new(WorkSignal::new()),
            active: CachePadded::new(AtomicU32::new(0)),
            #[cfg(test)]
            tasks_left: AtomicU64::new(0),
            run: Mutex::new(None),
            run_seq: CachePadded::new(AtomicU64::new(0)),
            gangs: (0..3 * clusters).map(|_| GangCell::default()).collect(),
            stand_in: StandIn::default(),
            shutdown: AtomicBool::new(false),
            spin,
            watchdog,
        }
    }

    /// Makes `run` (or nothing) the chip's current run.
    pub(crate) fn install(&self, run: Option<Arc<RunShared>>) {
        *self.run.lock() = run;
        self.run_seq.fetch_add(1, Ordering::SeqCst);
    }

    /// Something became dispatchable: tells searching executors, and with `wake` wakes one
    /// parked executor unless one is searching already (module doc).
    pub(crate) fn signal_work(&self, wake: bool) {
        self.work.signal(wake);
    }

    /// Lets the calling executor stop being active if another one is (never the last).
    pub(crate) fn try_leave(&self) -> bool {
        self.active
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n > 1).then(|| n - 1)
            })
            .is_ok()
    }

    /// The trace lanes of the chip's threads that make scheduling passes.
    pub(crate) fn scheduler_lanes(&self) -> SchedulerLanes {
        SchedulerLanes {
            executors: self.executors,
            stand_in: self.orchestrator_is_worker,
        }
    }

    /// Stops every thread of the chip (they exit at their next check).
    pub(crate) fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.run_seq.fetch_add(1, Ordering::SeqCst);
        self.work.signal_all();
        for g in &self.gangs {
            g.ec.notify_all();
        }
        self.stand_in.cell.ec.notify_all();
    }
}
