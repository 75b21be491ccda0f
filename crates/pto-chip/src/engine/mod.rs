//! The execution engine of a chip: graph state, orchestrator, schedulers and cores
//! (CHIP_RUNTIME.md §3 and §6).
//!
//! Threads and ownership:
//! - the **orchestrator** is the thread that calls `ChipWorker::run`; it runs the user's
//!   orchestration function and owns every ring allocator, the TensorMap and the scope stack
//!   ([`orchestrator::OrchCore`]); nothing else touches them;
//! - **scheduler threads** (`aicpu_thread_num - 1` per run) complete tasks, route consumers to
//!   the ready queues, advance ring watermarks and dispatch ready blocks to cores
//!   ([`scheduler`]);
//! - **core threads** (3 per cluster) run kernels ([`core`]).
//!
//! All task state shared between them — slot records, fanout lists, ready queues, core
//! occupancy — sits behind one parking mutex, [`run::RunShared::graph`] ([`graph::Graph`]),
//! taken once per submit (wiring and publication) and once per batch of completions. This
//! removes the classic bug classes of fine-grained task graphs (lost readiness, double
//! consumption, reuse of a slot still referenced) at the cost of a short critical section; the
//! ring allocators, pools and TensorMap stay lock-free because only the orchestrator uses them.
//! The watermark of each ring is published in an atomic for the orchestrator's refresh.

pub(crate) mod core;
pub(crate) mod graph;
pub(crate) mod heap;
pub(crate) mod orchestrator;
pub(crate) mod run;
pub(crate) mod scheduler;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;
use pto_types::wait::{EventCount, SpinPolicy};

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

/// What a task runs: immutable once published, shared with the cores running its blocks.
#[derive(Debug)]
pub(crate) struct TaskPayload {
    pub(crate) shape: Shape,
    /// AIC, AIV0, AIV1 kernels (AIC tasks use slot 0, AIV tasks slot 1).
    pub(crate) kernels: [Option<KernelRef>; 3],
    pub(crate) tensors: Vec<BoundTensor>,
    pub(crate) scalars: Vec<u64>,
    pub(crate) block_num: u32,
    pub(crate) sync_start: bool,
}

impl TaskPayload {
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

/// One block (or one core's part of a MIX block) handed to a core.
pub(crate) struct Assignment {
    pub(crate) run: Arc<RunShared>,
    pub(crate) task: TaskId,
    pub(crate) payload: Arc<TaskPayload>,
    pub(crate) kernel: KernelRef,
    pub(crate) block_idx: u32,
    pub(crate) sub_block_id: u32,
    /// When the block was handed to the core (µs since the run started).
    pub(crate) dispatch_us: f64,
}

/// A core's report that it finished one assignment.
pub(crate) struct Completion {
    pub(crate) run_id: u64,
    pub(crate) core: u32,
    pub(crate) task: TaskId,
    pub(crate) block_idx: u32,
    /// The kernel that ran (its name is in panic reports).
    pub(crate) kernel: KernelRef,
    /// The panic message, if the kernel panicked.
    pub(crate) panic: Option<String>,
    /// Kernel start and end, µs since the run started.
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    pub(crate) dispatch_us: f64,
    pub(crate) sub_block_id: u32,
    pub(crate) block_num: u32,
}

/// A simulated core: its mailbox and the event count it parks on.
pub(crate) struct CoreCell {
    pub(crate) cluster: u32,
    pub(crate) sub_block: u32,
    pub(crate) mailbox: Mutex<Option<Assignment>>,
    pub(crate) ec: EventCount,
}

/// A scheduler thread's inbox of completions and the event count it parks on.
pub(crate) struct SchedCell {
    pub(crate) inbox: Mutex<Vec<Completion>>,
    pub(crate) ec: EventCount,
}

/// State shared by a chip's threads for the chip's lifetime.
pub(crate) struct ChipShared {
    pub(crate) clusters: u32,
    pub(crate) cores: Vec<CoreCell>,
    pub(crate) schedulers: Vec<SchedCell>,
    /// The run in progress, if any. Schedulers read it when they wake.
    pub(crate) run: Mutex<Option<Arc<RunShared>>>,
    pub(crate) shutdown: AtomicBool,
    /// Spin window of schedulers and the orchestrator.
    pub(crate) spin: SpinPolicy,
    /// Spin window of core threads: short and without yields, because a chip has many more
    /// core threads than a small host has CPUs, and `yield_now` can hand a whole time slice to
    /// another thread (see `pto_types::wait`'s README).
    pub(crate) core_spin: SpinPolicy,
}

impl ChipShared {
    pub(crate) fn new(
        clusters: u32,
        schedulers: usize,
        spin: SpinPolicy,
        core_spin: SpinPolicy,
    ) -> ChipShared {
        let mut cores = Vec::with_capacity(3 * clusters as usize);
        for id in 0..3 * clusters {
            let (cluster, sub_block) = if id < clusters {
                (id, 0)
            } else {
                let aiv = id - clusters;
                (aiv / 2, aiv % 2)
            };
            cores.push(CoreCell {
                cluster,
                sub_block,
                mailbox: Mutex::new(None),
                ec: EventCount::new(),
            });
        }
        ChipShared {
            clusters,
            cores,
            schedulers: (0..schedulers)
                .map(|_| SchedCell {
                    inbox: Mutex::new(Vec::new()),
                    ec: EventCount::new(),
                })
                .collect(),
            run: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            spin,
            core_spin,
        }
    }
}
