//! A replayed graph run as one task (`docs/decisions/graph-replay.md`, "Fused replay").
//!
//! A replay of a graph without MIX or sync-start tasks can skip the shared graph for its
//! inside: the orchestrator publishes a single task (the *fused task*) whose blocks run the
//! graph's tasks themselves, ordered by counters copied from the recording. What crosses
//! threads per graph task is then one atomic decrement per edge and one take from a queue
//! that is filled once, instead of a publication, a take and a finish under the graph lock.
//!
//! The counters and the ready queue are `pto_types::wait::Countdown`, whose rules F1 (a node
//! is made ready once) and F2 (a block may stop whenever it finds nothing ready: no ready node
//! is stranded) the loom models of `pto-types/src/wait/loom_tests.rs` check, and which the
//! fused property of `pto-kernels/tests/prop_replay.rs` runs over random graphs. Here:
//! - **F3** a block waits for nothing but the queue: it spins at most the chip's spin window
//!   while nothing is ready and then leaves (at once when every node is done), so a fused
//!   task never holds a CPU for long behind a sibling's kernel.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use pto_types::wait::{Countdown, SpinPolicy, SpinWindow, Take};

use crate::kernel::{BoundTensor, CoreId, KernelCtx, KernelRef};
use crate::replay::RecordedTask;
use crate::ring::align_heap;
use crate::task_id::TaskId;

use super::Shape;
use super::core::note_kernel_time;

/// A waiting block reads the clock on every 64th step (as a searching executor does).
const SPIN_CLOCK_EVERY: u32 = 64;

/// What a graph's fused replays share, computed once from the recording.
#[derive(Debug)]
pub(crate) struct FusedPlan {
    /// The core type of the fused task's blocks, and the kernels it names (a node's).
    pub(crate) shape: Shape,
    pub(crate) nominal: [Option<KernelRef>; 3],
    /// The graph task of each node: every task but the hidden tasks of `alloc_tensors`.
    pub(crate) tasks: Vec<u32>,
    /// Node successors, CSR: node `n`'s are `succ[succ_start[n]..succ_start[n + 1]]`.
    succ_start: Vec<u32>,
    succ: Vec<u32>,
    /// Producers inside the graph, per node.
    fanin: Vec<u32>,
    /// Each graph task's heap offset inside the fused task's one allocation, and its size.
    pub(crate) heap_offsets: Vec<u64>,
    pub(crate) heap_bytes: u64,
    /// Arguments over a graph input or output: at most this many TensorMap entries.
    pub(crate) boundary_args: usize,
    /// The kernels its nodes run, each once.
    kernels: Vec<KernelRef>,
    /// Every write-after-read pair inside the graph (`RecordedTask::war_readers` and
    /// `boundary_war_readers`) is ordered
    /// by the plan's edges: the reader always runs before the writer, so the write-after-read
    /// check has nothing to find in a fused replay, whatever the timing.
    pub(crate) war_ordered: bool,
}

/// Whether node `to` waits for node `from` through `preds` (the nodes' producers).
fn reaches(preds: &[Vec<u32>], from: u32, to: u32) -> bool {
    if from == u32::MAX || to == u32::MAX {
        return false;
    }
    let mut seen = vec![false; preds.len()];
    let mut stack = vec![to];
    while let Some(n) = stack.pop() {
        for &p in &preds[n as usize] {
            if p == from {
                return true;
            }
            if !std::mem::replace(&mut seen[p as usize], true) {
                stack.push(p);
            }
        }
    }
    false
}

impl FusedPlan {
    /// The plan of a graph that can run fused: no MIX task (its parts run together as a
    /// gang) and no sync-start task (its blocks must start together), at least two tasks to
    /// run. `None` otherwise. A node of several blocks runs them one after another, which a
    /// task without sync start allows.
    pub(crate) fn of(tasks: &[RecordedTask]) -> Option<FusedPlan> {
        let mut nodes = Vec::new();
        let mut node_of = vec![u32::MAX; tasks.len()];
        let mut kernels = Vec::new();
        let mut nominal = None;
        for (k, t) in tasks.iter().enumerate() {
            if t.alloc {
                continue;
            }
            if t.sync_start || matches!(t.shape, Shape::Mix(_)) {
                return None;
            }
            if t.shape != Shape::Dummy {
                let kernel = t.kernels[kernel_slot(t.shape)]?;
                if !kernels.contains(&kernel) {
                    kernels.push(kernel);
                }
                // The fused task runs on AIV cores unless every kernel is an AIC one.
                if nominal.is_none_or(|(shape, _)| shape == Shape::Aic && t.shape == Shape::Aiv) {
                    nominal = Some((t.shape, t.kernels));
                }
            }
            node_of[k] = nodes.len() as u32;
            nodes.push(k as u32);
        }
        let (shape, nominal) = nominal?;
        if nodes.len() < 2 {
            return None;
        }
        // Edges between nodes: what a replay wires, and what its boundary lookups find between
        // graph tasks (those are not wired: `RecordedEdge::wirable`). Producers that are
        // hidden alloc tasks are complete at once and order nothing.
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); nodes.len()];
        for (n, &k) in nodes.iter().enumerate() {
            let t = &tasks[k as usize];
            let wired = t.wiring.iter().map(|&(p, _)| p);
            let found = t.edges.iter().filter(|e| !e.wirable).map(|e| e.from);
            let p = &mut preds[n];
            p.extend(wired.chain(found).map(|k| node_of[k as usize]));
            p.retain(|&m| m != u32::MAX);
            p.sort_unstable();
            p.dedup();
        }
        let mut succ_count = vec![0u32; nodes.len() + 1];
        for p in preds.iter().flatten() {
            succ_count[*p as usize + 1] += 1;
        }
        let mut succ_start = succ_count;
        for i in 1..succ_start.len() {
            succ_start[i] += succ_start[i - 1];
        }
        let mut fill = succ_start.clone();
        let mut succ = vec![0u32; *succ_start.last().expect("n + 1 entries") as usize];
        for (n, p) in preds.iter().enumerate() {
            for &m in p {
                succ[fill[m as usize] as usize] = n as u32;
                fill[m as usize] += 1;
            }
        }
        let war_ordered = tasks.iter().enumerate().all(|(k, t)| {
            let readers = t.war_readers.iter().map(|&(r, _)| r);
            let mut readers = readers.chain(t.boundary_war_readers.iter().copied());
            readers.all(|r| reaches(&preds, node_of[r as usize], node_of[k]))
        });
        let fanin: Vec<u32> = preds.iter().map(|p| p.len() as u32).collect();
        let mut heap_offsets = Vec::with_capacity(tasks.len());
        let mut heap_bytes = 0u64;
        for t in tasks {
            heap_offsets.push(heap_bytes);
            heap_bytes = heap_bytes.saturating_add(align_heap(t.heap_bytes));
        }
        Some(FusedPlan {
            shape,
            nominal,
            tasks: nodes,
            succ_start,
            succ,
            fanin,
            heap_offsets,
            heap_bytes,
            boundary_args: tasks
                .iter()
                .map(|t| t.args.iter().filter(|a| a.boundary).count())
                .sum(),
            kernels,
            war_ordered,
        })
    }

    fn successors(&self, n: u32) -> &[u32] {
        let (a, b) = (self.succ_start[n as usize], self.succ_start[n as usize + 1]);
        &self.succ[a as usize..b as usize]
    }

    pub(crate) fn nodes(&self) -> usize {
        self.tasks.len()
    }
}

/// The slot of a task's kernels that a block of `shape` runs (as `Graph::take` picks it).
pub(crate) fn kernel_slot(shape: Shape) -> usize {
    match shape {
        Shape::Aic => 0,
        _ => 1,
    }
}

/// One fused replay in flight: the fused task's payload holds it, and each of its blocks
/// runs [`FusedRun::run_block`]. Its buffers are reused by later replays (the orchestrator
/// recycles consumed payloads), so a replay binds its nodes into memory already in cache.
#[derive(Debug)]
pub(crate) struct FusedRun {
    plan: Arc<FusedPlan>,
    graph: Arc<str>,
    /// Per node: its kernel (none for a dummy task) and block count, and where its tensors
    /// and scalars start (one more entry each closes the last node's).
    kernels: Vec<(Option<KernelRef>, u32, Shape)>,
    tensor_start: Vec<u32>,
    tensors: Vec<BoundTensor>,
    scalar_start: Vec<u32>,
    scalars: Vec<u64>,
    /// Producers not yet run, per node, and the ready queue (F1, F2).
    countdown: Countdown,
    spin: SpinPolicy,
    failed: AtomicBool,
    /// The first kernel panic, as graph task, kernel and message.
    panic: Mutex<Option<(u32, KernelRef, String)>>,
}

impl FusedRun {
    /// An empty replay of `plan`, reusing `old`'s buffers: push its nodes in plan order,
    /// then [`FusedRun::arm`] it.
    pub(crate) fn start(
        old: Option<FusedRun>,
        plan: Arc<FusedPlan>,
        graph: Arc<str>,
        spin: SpinPolicy,
    ) -> FusedRun {
        let mut run = match old {
            Some(run) => FusedRun {
                plan,
                graph,
                spin,
                ..run
            },
            None => FusedRun {
                plan,
                graph,
                kernels: Vec::new(),
                tensor_start: Vec::new(),
                tensors: Vec::new(),
                scalar_start: Vec::new(),
                scalars: Vec::new(),
                countdown: Countdown::new(),
                spin,
                failed: AtomicBool::new(false),
                panic: Mutex::new(None),
            },
        };
        run.kernels.clear();
        run.tensors.clear();
        run.scalars.clear();
        run.tensor_start.clear();
        run.tensor_start.push(0);
        run.scalar_start.clear();
        run.scalar_start.push(0);
        run
    }

    /// Where the next node's bound tensors go: extend it, then [`FusedRun::push_node`].
    pub(crate) fn tensors_mut(&mut self) -> &mut Vec<BoundTensor> {
        &mut self.tensors
    }

    /// Closes the next node: its kernel, blocks and scalars (its tensors were bound already).
    pub(crate) fn push_node(
        &mut self,
        shape: Shape,
        kernel: Option<KernelRef>,
        blocks: u32,
        scalars: &[u64],
    ) {
        self.kernels.push((kernel, blocks, shape));
        self.tensor_start.push(self.tensors.len() as u32);
        self.scalars.extend_from_slice(scalars);
        self.scalar_start.push(self.scalars.len() as u32);
    }

    /// Sets every node's counter from the plan and makes the roots ready.
    pub(crate) fn arm(&mut self) {
        debug_assert_eq!(self.kernels.len(), self.plan.nodes());
        self.countdown.arm(&self.plan.fanin);
        *self.failed.get_mut() = false;
        *self.panic.get_mut() = None;
    }

    /// Every kernel of its nodes has returned before in this process (a waiting orchestrator
    /// runs a block only then: `orchestrator/help.rs`, H1 and H8).
    pub(crate) fn has_returned(&self) -> bool {
        self.plan.kernels.iter().all(KernelRef::has_returned)
    }

    /// Runs ready nodes on the calling thread until none is left for it (F2, F3). Returns the
    /// kernel that panicked and its message (naming the graph task) when a node's kernel
    /// panicked, in this block or another: the first block to stop after it reports it (a
    /// second panic in another block may be reported too; the run keeps the first error).
    pub(crate) fn run_block(
        &self,
        core: CoreId,
        sub_block_id: u32,
        task: TaskId,
        cancelled: &AtomicBool,
        last_kernel_ns: &std::sync::atomic::AtomicU64,
    ) -> Option<(KernelRef, String)> {
        let mut window = SpinWindow::new(self.spin).reading_clock_every(SPIN_CLOCK_EVERY);
        let mut held: Option<u32> = None;
        let mut started = Instant::now();
        let mut spun = false;
        loop {
            if self.failed.load(Ordering::Acquire) || cancelled.load(Ordering::Relaxed) {
                break;
            }
            let n = match self.countdown.take(&mut held) {
                Take::Node(n) => n,
                Take::Done => break,
                // F2: stopping is safe; the spin only keeps this CPU on the graph while its
                // other blocks may make more ready.
                Take::Empty | Take::Storing if window.step().is_spinning() => {
                    spun = true;
                    continue;
                }
                Take::Empty | Take::Storing => break,
            };
            window.reset();
            if std::mem::take(&mut spun) {
                // A kernel's time starts where it does, not where the wait for it did.
                started = Instant::now();
            }
            let i = n as usize;
            let tensors =
                &self.tensors[self.tensor_start[i] as usize..self.tensor_start[i + 1] as usize];
            let scalars =
                &self.scalars[self.scalar_start[i] as usize..self.scalar_start[i + 1] as usize];
            let (kernel, blocks, shape) = self.kernels[i];
            // An AIC kernel has no sub-block (`KernelCtx::sub_block_id`), wherever it runs.
            let sub_block_id = if shape == Shape::Aic { 0 } else { sub_block_id };
            let panicked = kernel.map_or(Ok(()), |kernel| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    for b in 0..blocks {
                        let mut ctx = KernelCtx::new(
                            tensors,
                            scalars,
                            b,
                            blocks,
                            sub_block_id,
                            core,
                            task,
                            cancelled,
                        );
                        kernel.call(&mut ctx);
                    }
                }))
            });
            if let Some(kernel) = kernel {
                let ended = Instant::now();
                let ran = u64::try_from((ended - started).as_nanos()).unwrap_or(u64::MAX);
                started = ended;
                // Per block, as the kernel's own blocks are timed outside a fused replay.
                note_kernel_time(last_kernel_ns, kernel, ran / u64::from(blocks));
            }
            if let Err(p) = panicked {
                let message = super::core::panic_message(p.as_ref());
                let mut first = self.panic.lock();
                if let (None, Some(kernel)) = (&*first, kernel) {
                    *first = Some((self.plan.tasks[n as usize], kernel, message));
                }
                self.failed.store(true, Ordering::Release);
                break;
            }
            self.countdown.finish(n, self.plan.successors(n), &mut held);
        }
        self.panic.lock().take().map(|(k, kernel, message)| {
            let message = format!("graph {:?} task {k}: {message}", self.graph);
            (kernel, message)
        })
    }
}
