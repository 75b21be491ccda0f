//! A replayed graph run as one task (`docs/decisions/graph-replay.md`, "Fused replay").
//!
//! A replay of a graph without MIX or sync-start tasks can skip the shared graph for its
//! inside: the orchestrator publishes a single task (the *fused task*) whose blocks run the
//! graph's tasks themselves, ordered by counters copied from the recording. What crosses
//! threads per graph task is then one atomic decrement per edge and one take from a queue
//! that is filled once, instead of a publication, a take and a finish under the graph lock.
//!
//! The counters and the ready queue are `pto_types::wait::Countdown`, whose rules F1 (a node
//! is made ready once), F2 (a block may stop whenever it finds nothing ready: no ready node
//! is stranded) and F3 (finished nodes are counted in batches; `Done` is never early) the
//! loom models of `pto-types/src/wait/loom_tests.rs` check, and which the fused property of
//! `pto-kernels/tests/prop_replay.rs` runs over random graphs. Here:
//! - **F4** a block waits for nothing but the queue: it spins at most the chip's spin window
//!   while nothing is ready and then leaves (at once when every node is done), so a fused
//!   task never holds a CPU for long behind a sibling's kernel.
//! - **F5** a block times a kernel's first run (so the quick-or-long mark the orchestrator's
//!   helping reads is set, `orchestrator/help.rs` H1 and H8), every node whose kernel is not
//!   the one it timed last (so no kernel keeps a stale mark behind another's samples, whatever
//!   the order nodes run in), and otherwise one node in [`TIMED_EVERY`]: two clock reads per
//!   node were a sixth of a no-op node's cost, and for a run of one kernel's nodes a sample
//!   tells the run's last kernel time and the kernel's mark as well.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use pto_types::TensorTag;
use pto_types::wait::{Countdown, Cursor, SpinPolicy, SpinWindow, Take};
use smallvec::SmallVec;

use crate::engine::orchestrator::ArgTensor;
use crate::engine::{BoundTensors, INLINE_ARGS};
use crate::kernel::{BoundTensor, CoreId, KernelCtx, KernelRef};
use crate::replay::{Origin, RecordedTask};
use crate::ring::align_heap;
use crate::task_id::TaskId;
use crate::tensor::{BufferAddr, TensorDesc};

use super::Shape;
use super::core::note_kernel_time;

/// A waiting block reads the clock on every 64th step (as a searching executor does).
const SPIN_CLOCK_EVERY: u32 = 64;

/// A block times one node in this many (F5).
const TIMED_EVERY: u32 = 16;

/// What a graph's fused replays share, computed once from the recording.
#[derive(Debug)]
pub(crate) struct FusedPlan {
    /// The core type of the fused task's blocks, and the kernels it names (a node's).
    pub(crate) shape: Shape,
    pub(crate) nominal: [Option<KernelRef>; 3],
    /// The graph task of each node: every task but the hidden tasks of `alloc_tensors`.
    pub(crate) tasks: Vec<u32>,
    /// Per node: its kernel (none for a dummy task), block count and shape, and where its
    /// tensors and scalars start (one more entry each closes the last node's).
    kernels_of: Vec<(Option<KernelRef>, u32, Shape)>,
    tensor_start: Vec<u32>,
    tensors: Vec<NodeTensor>,
    scalar_start: Vec<u32>,
    scalars: Vec<u64>,
    /// Graph tasks the orchestrator binds at each replay, in order: the hidden tasks of
    /// `alloc_tensors` and the tasks that create a tensor with an initial value (binding fills
    /// it). Every other node is bound by the block that runs it.
    pub(crate) eager: Vec<bool>,
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
    /// The boundary arguments as the fused task looks them up and registers them: merged
    /// where their bytes make one run ([`merged_boundary`]).
    pub(crate) boundary: Vec<BoundaryArg>,
    /// The kernels its nodes run, each once.
    kernels: Vec<KernelRef>,
    /// Every write-after-read pair inside the graph (`RecordedTask::war_readers` and
    /// `boundary_war_readers`) is ordered
    /// by the plan's edges: the reader always runs before the writer, so the write-after-read
    /// check has nothing to find in a fused replay, whatever the timing.
    pub(crate) war_ordered: bool,
}

/// A boundary argument of the fused task, over graph input or output `origin`: one of the
/// graph's, or the union of several ([`merged_boundary`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BoundaryArg {
    pub(crate) origin: Origin,
    pub(crate) tag: TensorTag,
    pub(crate) desc: TensorDesc,
}

/// The graph's boundary arguments, those of one tag over one buffer (one origin and one
/// buffer in it; same element type, version and `manual_dep`) merged where their elements
/// make one contiguous run. Looking a
/// run up finds what its arguments would, and registering it leaves what theirs would for a
/// later lookup to find, because each of its bytes is some argument's and all are the one
/// fused task's (an INOUT's or a write's supersession frees only entries whose bytes the task
/// writes, as before). One TensorMap operation per run instead of one per argument: the
/// stencil's 32 boundary arguments per replay are 2 runs. A replay moves every argument over
/// one buffer by the same offset, so runs stay runs.
fn merged_boundary(tasks: &[RecordedTask]) -> Vec<BoundaryArg> {
    let mut out = Vec::new();
    // Mergeable arguments by key, each group's arguments.
    let mut groups: Vec<Vec<BoundaryArg>> = Vec::new();
    let args = tasks.iter().filter(|t| !t.alloc).flat_map(|t| &t.args);
    for a in args.filter(|a| a.boundary) {
        let (ArgTensor::Existing { tag, desc }, Some(origin)) = (a.arg, a.origin) else {
            continue;
        };
        let arg = BoundaryArg { origin, tag, desc };
        if desc.is_empty() || !desc.is_contiguous() {
            out.push(arg);
            continue;
        }
        // The buffer too: the heap of one graph task (one origin) may hold several.
        let key = |b: &BoundaryArg| {
            let d = &b.desc;
            (
                b.origin,
                d.buffer(),
                b.tag,
                d.dtype(),
                d.version(),
                d.manual_dep(),
            )
        };
        match groups.iter_mut().find(|g| key(&g[0]) == key(&arg)) {
            Some(group) => group.push(arg),
            None => groups.push(vec![arg]),
        }
    }
    for mut group in groups {
        group.sort_unstable_by_key(|b| b.desc.start_offset());
        let mut rest = &group[..];
        while let Some(first) = rest.first() {
            // The longest prefix whose elements make one run.
            let mut end = first.desc.start_offset() + first.desc.numel();
            let mut n = 1;
            while let Some(b) = rest.get(n).filter(|b| b.desc.start_offset() <= end) {
                end = end.max(b.desc.start_offset() + b.desc.numel());
                n += 1;
            }
            let d = &first.desc;
            let start = d.start_offset();
            let run = u32::try_from(end - start)
                .ok()
                .and_then(|len| TensorDesc::new(d.buffer(), start, &[len], &[1], d.dtype()).ok());
            match run {
                Some(run) => out.push(BoundaryArg {
                    desc: run
                        .with_version(d.version())
                        .with_manual_dep(d.manual_dep())
                        .with_owner(d.owner()),
                    ..*first
                }),
                None => out.extend_from_slice(&rest[..n]),
            }
            rest = &rest[n..];
        }
    }
    out
}

/// Where a node's tensor lies in a replay: its recorded descriptor, moved onto the replay's
/// buffers as `Replayed::rebase` moves it (the block that runs the node binds it).
#[derive(Clone, Copy, Debug)]
enum Place {
    /// In the fused task's one heap allocation, at this offset (the buffer's base).
    Heap(u64),
    /// Over bound input `index`, starting `delta` elements after the bound view's start.
    Input { index: u32, delta: u64 },
}

/// A node's tensor argument, bound at run time ([`FusedRun::bind`]).
#[derive(Clone, Copy, Debug)]
struct NodeTensor {
    desc: TensorDesc,
    place: Place,
    writable: bool,
}

/// Node task `k`'s tensors as [`NodeTensor`]s; `None` when one has no place a replay moves
/// (recordings give every existing tensor an origin, so this is a guard).
fn node_tensors(
    tasks: &[RecordedTask],
    inputs: &[TensorDesc],
    heap_offsets: &[u64],
    k: usize,
) -> Option<SmallVec<[NodeTensor; INLINE_ARGS]>> {
    let t = &tasks[k];
    let mut next = heap_offsets[k];
    let mut out = SmallVec::new();
    for a in &t.args {
        let tensor = match (a.arg, a.origin) {
            (ArgTensor::Existing { tag, desc }, Some(Origin::Input(i))) => NodeTensor {
                desc,
                place: Place::Input {
                    index: i,
                    delta: crate::replay::start_delta(&desc, inputs.get(i as usize)?),
                },
                writable: tag.writes(),
            },
            (ArgTensor::Existing { tag, desc }, Some(Origin::Task(p))) => {
                let p = p as usize;
                let offset = heap_offsets[p] + (desc.base() - tasks[p].virt_base);
                NodeTensor {
                    desc,
                    place: Place::Heap(offset),
                    writable: tag.writes(),
                }
            }
            (ArgTensor::Create(ci), _) => {
                let bytes = ci.padded_bytes();
                let desc = TensorDesc::contiguous(next, bytes, ci.shape(), ci.dtype)
                    .ok()?
                    .with_manual_dep(ci.manual_dep);
                let tensor = NodeTensor {
                    desc,
                    place: Place::Heap(next),
                    writable: true,
                };
                next += bytes;
                tensor
            }
            (ArgTensor::Existing { .. }, None) => return None,
        };
        out.push(tensor);
    }
    Some(out)
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
    pub(crate) fn of(tasks: &[RecordedTask], inputs: &[TensorDesc]) -> Option<FusedPlan> {
        let mut heap_offsets = Vec::with_capacity(tasks.len());
        let mut heap_bytes = 0u64;
        for t in tasks {
            heap_offsets.push(heap_bytes);
            heap_bytes = heap_bytes.saturating_add(align_heap(t.heap_bytes));
        }
        let mut nodes = Vec::new();
        let mut node_of = vec![u32::MAX; tasks.len()];
        let mut kernels = Vec::new();
        let mut nominal = None;
        let mut kernels_of = Vec::new();
        let (mut tensor_start, mut tensors) = (vec![0u32], Vec::new());
        let (mut scalar_start, mut scalars) = (vec![0u32], Vec::new());
        for (k, t) in tasks.iter().enumerate() {
            if t.alloc {
                continue;
            }
            if t.sync_start || matches!(t.shape, Shape::Mix(_)) {
                return None;
            }
            let mut node_kernel = None;
            if t.shape != Shape::Dummy {
                let kernel = t.kernels[kernel_slot(t.shape)]?;
                node_kernel = Some(kernel);
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
            kernels_of.push((node_kernel, t.block_num, t.shape));
            tensors.extend(node_tensors(tasks, inputs, &heap_offsets, k)?);
            tensor_start.push(tensors.len() as u32);
            scalars.extend_from_slice(&t.scalars);
            scalar_start.push(scalars.len() as u32);
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
        let eager = tasks
            .iter()
            .map(|t| t.alloc || t.args.iter().any(|a| a.fills()))
            .collect();
        Some(FusedPlan {
            shape,
            nominal,
            tasks: nodes,
            kernels_of,
            tensor_start,
            tensors,
            scalar_start,
            scalars,
            eager,
            succ_start,
            succ,
            fanin,
            heap_offsets,
            heap_bytes,
            boundary: merged_boundary(tasks),
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
/// runs [`FusedRun::run_block`]. A replay holds only where its buffers are; a block binds each
/// node's tensors from the plan just before running it. Its counters are reused by later
/// replays (the orchestrator recycles consumed payloads).
#[derive(Debug)]
pub(crate) struct FusedRun {
    plan: Arc<FusedPlan>,
    graph: Arc<str>,
    /// The device address of the fused task's heap allocation, and its host address (atomic
    /// only to be `Send` and `Sync` without `unsafe`: it is stored before the task is
    /// published, which orders the store before every block's load).
    heap: u64,
    heap_host: AtomicPtr<u8>,
    /// The tensors bound to the graph's inputs (not writable here: a node's own argument
    /// says whether it writes).
    inputs: Vec<BoundTensor>,
    /// Producers not yet run, per node, and the ready queue (F1, F2).
    countdown: Countdown,
    spin: SpinPolicy,
    failed: AtomicBool,
    /// The first kernel panic, as graph task, kernel and message.
    panic: Mutex<Option<(u32, KernelRef, String)>>,
}

/// Where a fused replay's buffers are: its heap allocation (device address and host address)
/// and the tensors bound to the graph's inputs.
pub(crate) struct Buffers<'a> {
    pub(crate) heap: u64,
    pub(crate) heap_host: *mut u8,
    pub(crate) inputs: &'a mut dyn Iterator<Item = BoundTensor>,
}

impl FusedRun {
    /// A replay of `plan` over `buffers`, reusing `old`'s memory; then [`FusedRun::arm`] it.
    pub(crate) fn start(
        old: Option<FusedRun>,
        plan: Arc<FusedPlan>,
        graph: Arc<str>,
        spin: SpinPolicy,
        buffers: Buffers<'_>,
    ) -> FusedRun {
        let (mut inputs, countdown) = match old {
            Some(run) => (run.inputs, run.countdown),
            None => (Vec::new(), Countdown::new()),
        };
        inputs.clear();
        inputs.extend(buffers.inputs);
        FusedRun {
            plan,
            graph,
            heap: buffers.heap,
            heap_host: AtomicPtr::new(buffers.heap_host),
            inputs,
            countdown,
            spin,
            failed: AtomicBool::new(false),
            panic: Mutex::new(None),
        }
    }

    /// Node `n`'s tensors in this replay (owned, where the graph's heap holds them, by the
    /// fused task `task`), onto `out`: what the orchestrator's binding gives a task-by-task
    /// replay of the same graph task.
    fn bind(&self, n: usize, task: TaskId, out: &mut BoundTensors) {
        let plan = &*self.plan;
        let range = plan.tensor_start[n] as usize..plan.tensor_start[n + 1] as usize;
        let heap_host = self.heap_host.load(Ordering::Relaxed);
        out.extend(plan.tensors[range].iter().map(|t| {
            let (desc, base_ptr) = match t.place {
                Place::Heap(offset) => {
                    let buffer = BufferAddr::device(self.heap + offset, t.desc.buffer_bytes());
                    let desc = t.desc.relocated(buffer, t.desc.start_offset(), Some(task));
                    (desc, heap_host.wrapping_add(offset as usize))
                }
                Place::Input { index, delta } => {
                    let b = &self.inputs[index as usize];
                    let start = b.desc.start_offset().wrapping_add(delta);
                    let desc = t.desc.relocated(b.desc.buffer(), start, b.desc.owner());
                    (desc, b.base_ptr)
                }
            };
            BoundTensor {
                desc,
                base_ptr,
                writable: t.writable,
            }
        }));
    }

    /// Sets every node's counter from the plan and makes the roots ready.
    pub(crate) fn arm(&mut self) {
        self.countdown.arm(&self.plan.fanin);
        *self.failed.get_mut() = false;
        *self.panic.get_mut() = None;
    }

    /// Every kernel of its nodes has returned before in this process (a waiting orchestrator
    /// runs a block only then: `orchestrator/help.rs`, H1 and H8).
    pub(crate) fn has_returned(&self) -> bool {
        self.plan.kernels.iter().all(KernelRef::has_returned)
    }

    /// Runs ready nodes on the calling thread until none is left for it (F2, F4). Returns the
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
        let mut held = Cursor::new();
        let (mut untimed, mut last_timed) = (0u32, None);
        let mut tensors = BoundTensors::new();
        loop {
            if self.failed.load(Ordering::Acquire) || cancelled.load(Ordering::Relaxed) {
                break;
            }
            let n = match self.countdown.take(&mut held) {
                Take::Node(n) => n,
                Take::Done => break,
                // F2: stopping is safe; the spin only keeps this CPU on the graph while its
                // other blocks may make more ready.
                Take::Empty | Take::Storing if window.step().is_spinning() => continue,
                Take::Empty | Take::Storing => break,
            };
            window.reset();
            let i = n as usize;
            let plan = &*self.plan;
            tensors.clear();
            self.bind(i, task, &mut tensors);
            let scalars =
                &plan.scalars[plan.scalar_start[i] as usize..plan.scalar_start[i + 1] as usize];
            let (kernel, blocks, shape) = plan.kernels_of[i];
            // F5: a kernel's first run is timed, a node whose kernel is not the last timed
            // one, and one node in TIMED_EVERY.
            let started = kernel
                .filter(|&k| {
                    !k.has_returned() || last_timed != Some(k) || untimed + 1 >= TIMED_EVERY
                })
                .map(|_| Instant::now());
            untimed += 1;
            // An AIC kernel has no sub-block (`KernelCtx::sub_block_id`), wherever it runs.
            let sub_block_id = if shape == Shape::Aic { 0 } else { sub_block_id };
            let panicked = kernel.map_or(Ok(()), |kernel| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    for b in 0..blocks {
                        let mut ctx = KernelCtx::new(
                            &tensors,
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
            if let (Some(kernel), Some(started)) = (kernel, started) {
                (untimed, last_timed) = (0, Some(kernel));
                let ran = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
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

#[cfg(test)]
mod tests {
    use pto_types::DType;

    use super::*;
    use crate::orch::KernelArgs;
    use crate::replay::{GraphInput, RecordedGraph};

    /// `(tag, first element, elements)` of each boundary argument the plan looks up.
    fn runs(graph: &RecordedGraph) -> Vec<(TensorTag, u64, u64)> {
        let mut out: Vec<_> = merged_boundary(&graph.inner.tasks)
            .iter()
            .map(|b| (b.tag, b.desc.start_offset(), b.desc.numel()))
            .collect();
        out.sort_unstable_by_key(|&(tag, start, n)| (tag as u8, start, n));
        out
    }

    #[test]
    fn boundary_arguments_merge_where_their_elements_make_one_run() {
        let grid = GraphInput::new(&[2, 16], DType::F32).unwrap();
        let graph = RecordedGraph::record("runs", &[grid], |r, ins| {
            let g = ins[0];
            let view = |shape: &[u32], at: &[u32]| g.view(shape, at).expect("inside the grid");
            // Row 1, columns 0-2 and 2-5 (overlapping) then 6-7 (adjacent): one run, 16..24.
            for (col, len) in [(0, 3), (2, 4), (6, 2)] {
                r.submit_dummy(KernelArgs::new().input(view(&[1, len], &[1, col])))?;
            }
            // Columns 10-11 of row 1: a gap before them, so a run of its own.
            r.submit_dummy(KernelArgs::new().input(view(&[1, 2], &[1, 10])))?;
            // Row 0 written: another tag, another run, even where elements touch row 1's.
            r.submit_dummy(KernelArgs::new().output_existing(view(&[1, 16], &[0, 0])))?;
            // A column (stride 16) is not contiguous: looked up as it is.
            r.submit_dummy(KernelArgs::new().input(view(&[2, 1], &[0, 12])))?;
            Ok(vec![])
        })
        .unwrap();
        assert_eq!(
            runs(&graph),
            vec![
                (TensorTag::Input, 12, 2),
                (TensorTag::Input, 16, 8),
                (TensorTag::Input, 26, 2),
                (TensorTag::OutputExisting, 0, 16),
            ]
        );
    }

    #[test]
    fn boundary_arguments_over_two_buffers_of_one_task_stay_apart() {
        // `alloc_tensors` makes both buffers in one task's heap (one origin); the graph
        // returns one, which makes every argument over that heap a boundary argument.
        let graph = RecordedGraph::record("two buffers", &[], |r, _| {
            let ci = crate::orch::TensorCreateInfo::new(&[16], DType::F32);
            let cells = r.alloc_tensors(&[ci, ci])?;
            let (a, b) = (cells.tensor(0), cells.tensor(1));
            r.submit_dummy(KernelArgs::new().inout(a))?;
            r.submit_dummy(KernelArgs::new().inout(b))?;
            Ok(vec![a])
        })
        .unwrap();
        let bases: std::collections::BTreeSet<u64> = merged_boundary(&graph.inner.tasks)
            .iter()
            .map(|b| b.desc.base())
            .collect();
        assert_eq!(runs(&graph), vec![(TensorTag::InOut, 0, 16); 2]);
        assert_eq!(bases.len(), 2, "one run per buffer");
    }
}
