//! A replayed graph run as one task (`docs/decisions/graph-replay.md`, "Fused replay").
//!
//! A replay whose tasks are all one-block kernels of one core type can skip the shared graph
//! for its inside: the orchestrator publishes a single task (the *fused task*) whose blocks run
//! the graph's tasks themselves, ordered by counters copied from the recording. What crosses
//! threads per graph task is then one atomic decrement per edge and one pop from a queue that
//! is filled once, instead of a publication, a take and a finish under the graph lock.
//!
//! Invariants (the fused property of `pto-kernels/tests/prop_replay.rs` runs random graphs
//! through them):
//! - **F1** a node is pushed onto the ready queue exactly once: by the orchestrator when it has
//!   no producer inside the graph, else by the block whose decrement took its counter to zero;
//!   so the queue never holds more than the graph's nodes and never wraps.
//! - **F2** a block that pushes pops again before it leaves; a block leaves only when its pop
//!   finds the queue empty (or a push not yet stored, which its pusher will pop). So no ready
//!   node is stranded, and when the last block leaves, every node has run (the recording is a
//!   DAG), or the replay failed.
//! - **F3** a block waits for nothing but its own pops: its spin is bounded by the chip's spin
//!   window, after which it leaves, so a fused task never holds a CPU for a sibling's kernel.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use pto_types::wait::{SpinPolicy, SpinWindow};

use crate::kernel::{BoundTensor, CoreId, KernelCtx, KernelRef};
use crate::replay::RecordedTask;
use crate::ring::align_heap;
use crate::task_id::TaskId;

use super::Shape;
use super::graph::LONG_KERNEL_NS;

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
    /// Nodes without one, in graph order.
    roots: Vec<u32>,
    /// Each graph task's heap offset inside the fused task's one allocation, and its size.
    pub(crate) heap_offsets: Vec<u64>,
    pub(crate) heap_bytes: u64,
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
        let roots = (0..nodes.len() as u32)
            .filter(|&n| fanin[n as usize] == 0)
            .collect();
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
            roots,
            heap_offsets,
            heap_bytes,
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

/// The ready nodes of one fused replay: a queue each node enters once (F1), so a slot array as
/// long as the nodes never wraps. A slot holds its node + 1 once stored (0: not yet).
#[derive(Debug)]
struct ReadyQueue {
    slots: Box<[AtomicU32]>,
    head: AtomicUsize,
    tail: AtomicUsize,
}

/// What a pop found.
#[derive(Debug, PartialEq, Eq)]
enum Pop {
    Node(u32),
    /// Nothing pushed that is not taken.
    Empty,
    /// A push reserved the head slot and has not stored it yet; its pusher pops it (F2).
    Storing,
}

impl ReadyQueue {
    fn new(len: usize) -> ReadyQueue {
        ReadyQueue {
            slots: (0..len).map(|_| AtomicU32::new(0)).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    /// Empty again, for `len` nodes.
    fn reset(&mut self, len: usize) {
        if self.slots.len() < len {
            self.slots = (0..len).map(|_| AtomicU32::new(0)).collect();
        }
        for s in &mut self.slots[..len] {
            *s.get_mut() = 0;
        }
        *self.head.get_mut() = 0;
        *self.tail.get_mut() = 0;
    }

    fn push(&self, node: u32) {
        let i = self.tail.fetch_add(1, Ordering::AcqRel);
        self.slots[i].store(node + 1, Ordering::Release);
    }

    fn pop(&self) -> Pop {
        loop {
            let h = self.head.load(Ordering::Acquire);
            if h >= self.tail.load(Ordering::Acquire) {
                return Pop::Empty;
            }
            let v = self.slots[h].load(Ordering::Acquire);
            if v == 0 {
                return Pop::Storing;
            }
            if self
                .head
                .compare_exchange_weak(h, h + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Pop::Node(v - 1);
            }
        }
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
    kernels: Vec<(Option<KernelRef>, u32)>,
    tensor_start: Vec<u32>,
    tensors: Vec<BoundTensor>,
    scalar_start: Vec<u32>,
    scalars: Vec<u64>,
    /// Producers not yet run, per node.
    waiting: Vec<AtomicU32>,
    ready: ReadyQueue,
    /// Nodes run to the end.
    done: AtomicUsize,
    spin: SpinPolicy,
    failed: AtomicBool,
    /// The first kernel panic, as graph task, kernel and message.
    panic: Mutex<Option<(u32, &'static str, String)>>,
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
        let mut run = old.unwrap_or_else(|| FusedRun {
            plan: Arc::clone(&plan),
            graph: Arc::clone(&graph),
            kernels: Vec::new(),
            tensor_start: Vec::new(),
            tensors: Vec::new(),
            scalar_start: Vec::new(),
            scalars: Vec::new(),
            waiting: Vec::new(),
            ready: ReadyQueue::new(0),
            done: AtomicUsize::new(0),
            spin,
            failed: AtomicBool::new(false),
            panic: Mutex::new(None),
        });
        run.plan = plan;
        run.graph = graph;
        run.spin = spin;
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
    pub(crate) fn push_node(&mut self, kernel: Option<KernelRef>, blocks: u32, scalars: &[u64]) {
        self.kernels.push((kernel, blocks));
        self.tensor_start.push(self.tensors.len() as u32);
        self.scalars.extend_from_slice(scalars);
        self.scalar_start.push(self.scalars.len() as u32);
    }

    /// Sets every node's counter from the plan and makes the roots ready.
    pub(crate) fn arm(&mut self) {
        let plan = &self.plan;
        debug_assert_eq!(self.kernels.len(), plan.nodes());
        self.waiting.clear();
        self.waiting
            .extend(plan.fanin.iter().map(|&f| AtomicU32::new(f)));
        self.ready.reset(plan.nodes());
        for &r in &plan.roots {
            self.ready.push(r);
        }
        *self.done.get_mut() = 0;
        *self.failed.get_mut() = false;
        *self.panic.get_mut() = None;
    }

    /// Every kernel of its nodes has returned before in this process (a waiting orchestrator
    /// runs a block only then: `orchestrator/help.rs`, H1 and H8).
    pub(crate) fn has_returned(&self) -> bool {
        self.plan.kernels.iter().all(KernelRef::has_returned)
    }

    /// Runs ready nodes on the calling thread until none is left for it (F2, F3). Returns the
    /// panic message for the fused task's block when a node's kernel panicked (in this block
    /// or another: the first block to finish after it reports it, so exactly one does).
    pub(crate) fn run_block(
        &self,
        core: CoreId,
        sub_block_id: u32,
        task: TaskId,
        cancelled: &AtomicBool,
        last_kernel_ns: &std::sync::atomic::AtomicU64,
    ) -> Option<String> {
        let mut window = SpinWindow::new(self.spin).reading_clock_every(SPIN_CLOCK_EVERY);
        let mut next: Option<u32> = None;
        let mut started = Instant::now();
        loop {
            if self.failed.load(Ordering::Acquire) || cancelled.load(Ordering::Relaxed) {
                break;
            }
            let n = match next.take() {
                Some(n) => n,
                None => match self.ready.pop() {
                    Pop::Node(n) => n,
                    Pop::Empty | Pop::Storing => {
                        let all_done = self.done.load(Ordering::Acquire) == self.kernels.len();
                        if !all_done && window.step().is_spinning() {
                            continue;
                        }
                        break;
                    }
                },
            };
            window.reset();
            let i = n as usize;
            let tensors =
                &self.tensors[self.tensor_start[i] as usize..self.tensor_start[i + 1] as usize];
            let scalars =
                &self.scalars[self.scalar_start[i] as usize..self.scalar_start[i + 1] as usize];
            let (kernel, blocks) = self.kernels[i];
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
                last_kernel_ns.store(ran.max(1), Ordering::Relaxed);
                kernel.record_run(ran / u64::from(blocks), LONG_KERNEL_NS);
            }
            if let Err(p) = panicked {
                let message = super::core::panic_message(p.as_ref());
                let mut first = self.panic.lock();
                if first.is_none() {
                    let name = kernel.map_or("dummy", |k| k.name());
                    *first = Some((self.plan.tasks[n as usize], name, message));
                }
                self.failed.store(true, Ordering::Release);
                break;
            }
            self.done.fetch_add(1, Ordering::AcqRel);
            // The first successor this node made ready runs next on this thread: no queue
            // round trip, and its inputs are in this CPU's cache.
            for &s in self.plan.successors(n) {
                if self.waiting[s as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                    match next {
                        None => next = Some(s),
                        Some(_) => self.ready.push(s),
                    }
                }
            }
        }
        self.panic.lock().take().map(|(k, kernel, message)| {
            format!(
                "graph {:?} task {k} (kernel {kernel}) panicked: {message}",
                self.graph
            )
        })
    }
}
