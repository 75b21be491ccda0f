//! Record a block of submissions once as a graph; replay it many times.
//!
//! A job that submits the same pattern again and again (a layer per layer, a decode step per
//! token, a stencil per time step) pays the dependency analysis of every task each time. A
//! [`RecordedGraph`] pays it once:
//!
//! - [`RecordedGraph::record`] runs a recording closure offline, on no chip, against a
//!   [`Recorder`] that has the submit methods of a [`Scope`]. The closure receives one
//!   [`OrchTensor`] per [`GraphInput`] and returns the graph's outputs (tensors created inside
//!   it). The recording keeps every task (kernels, block counts, scalars, tensor roles) and
//!   every edge between its tasks that inference finds: the recorder runs the very inference
//!   code of a submit (`engine/infer.rs`) over a TensorMap of its own in which no task ever
//!   retires, so it finds the edges of every timing (RAW, WAR/WAW through INOUT and
//!   OUTPUT_EXISTING, overlapping views, creator edges, explicit `dep`s).
//! - [`Scope::replay`] submits the graph into a running chip job, binding its inputs to tensors
//!   of the recorded shapes and returning its outputs. Edges between graph tasks come from the
//!   recording; only the **boundary** goes through the TensorMap — arguments over a graph input,
//!   and arguments over a buffer the graph returns — so a replay orders against the tasks
//!   before and after it exactly as inference would. Buffers that stay inside the graph
//!   (intermediates) never enter the TensorMap.
//! - A graph knows what it needs from the rings ([`GraphNeeds`]): a replay whose pinned task
//!   slots or heap bytes cannot fit the run's sizing fails at once (SCOPE_DEADLOCK or
//!   HEAP_RING_DEADLOCK, naming the ring and the recommended minimum), and
//!   `pto_sizing::advise::advise_graph` turns the same numbers into a `runtime_env`.
//! - **Verify mode** ([`RecordedGraph::verified`]; on by default in debug builds, so in tests)
//!   replays through full inference as well and fails the run with INTERNAL_ERROR on any
//!   difference in edges.
//!
//! **Fused replay.** A replay with verify off may run as *one task*: when the graph has no
//! MIX or sync-start task ([`RecordedGraph::fusable`]), no DAG dump, trace or scope stats
//! observe the run, every write-after-read pair inside the graph is ordered by its edges
//! (when `track_war` or `war_check` is on), the caller's ring heap holds the graph's whole
//! heap twice over beside what open scopes pin, and its boundary arguments take at most half
//! the TensorMap. The orchestrator then makes one heap allocation for all
//! the graph's tasks, looks the boundary up in the TensorMap as the one task, and publishes
//! it; each of its blocks (one per thread that runs kernels) runs the graph's tasks, ordered
//! by counters copied from the recording (`engine/fused.rs`; a multi-block task's blocks
//! run one after another). Tasks before and after the replay order against the whole
//! graph, and its kernels see the one task's id. The upfront check is the same either way
//! (the task-by-task needs), so a job sized for a replay runs it whichever way it goes.
//! Otherwise the replay runs task by task as described above.
//!
//! A replay is checked against its recording before anything is submitted: the number of
//! inputs, each input's dtype, shape, strides, version and `manual_dep`, and that no two bound
//! inputs overlap (the recording had them disjoint). A mismatch is INVALID_ARGS naming the graph
//! and the input.
//!
//! ```
//! use pto_chip::orch::{KernelArgs, OrchTensor, RootScope, OrchArgs, OrchResult};
//! use pto_chip::replay::{GraphInput, RecordedGraph};
//! use pto_types::DType;
//!
//! // Record once (offline): x → y = f(x) in a fresh buffer, then g(y) in place.
//! fn record(f: pto_chip::kernel::KernelRef, g: pto_chip::kernel::KernelRef) -> RecordedGraph {
//!     let x = GraphInput::new(&[64], DType::F32).unwrap();
//!     RecordedGraph::record("step", &[x], |r, ins| {
//!         let y = r.submit_aiv(f, KernelArgs::new().input(ins[0]).output(
//!             pto_chip::orch::TensorCreateInfo::new(&[64], DType::F32),
//!         ))?.tensor(0);
//!         r.submit_aiv(g, KernelArgs::new().inout(y))?;
//!         Ok(vec![y])
//!     })
//!     .expect("the recording is valid")
//! }
//!
//! // Replay many times in a chip job: each step's output is the next step's input.
//! fn orchestrate<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>, graph: &RecordedGraph) -> OrchResult<()> {
//!     let mut x: OrchTensor<'r> = a.tensor(0);
//!     for _ in 0..8 {
//!         x = s.replay(graph, &[x])?[0];
//!     }
//!     Ok(())
//! }
//! ```
//!
//! [`Scope`]: crate::orch::Scope
//! [`Scope::replay`]: crate::orch::Scope::replay

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use pto_types::{DType, RING_COUNT};

use crate::diag::deps::EdgeKind;
use crate::engine::infer;
use crate::engine::orchestrator::{
    ArgTensor, CreateInfo, INLINE_FANIN, MAX_SCALARS, MAX_SCOPE_DEPTH, MAX_TENSORS, SubmitRequest,
};
use crate::engine::{INLINE_ARGS, Scalars, Shape};
use crate::error::{Fatal, OrchResult};
use crate::kernel::KernelRef;
use crate::orch::{
    KernelArgs, KernelPlan, MixedKernels, OrchTensor, ScopeMarker, TaskOutputs, TensorCreateInfo,
    mix_plan,
};
use crate::ring::align_heap;
use crate::task_id::TaskId;
use crate::tensor::{BufferAddr, TensorDesc, TensorError};
use crate::tensormap::TensorMap;

/// The ring of the ids a recording hands out (`TaskOutputs::task_id`, tensor owners): no chip
/// has it, so a recorded id can never be mistaken for a task of a run. The local id holds the
/// recording's serial above [`LOCAL_BITS`], so an id of another recording is refused too.
pub(crate) const RECORDED_RING: u8 = 0xFE;
/// Bits of a recorded local id that number the task; the bits above number the recording.
const LOCAL_BITS: u32 = 32;
const LOCAL_MASK: u64 = (1 << LOCAL_BITS) - 1;
/// Serial numbers of recordings (wrapping within the 24 bits a local id has left).
static RECORDINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
/// Where the recording's virtual input buffers start, one per 2^48 bytes.
const INPUT_SPACE: u64 = 1 << 56;
/// Where the recording's virtual heap starts (below every input buffer).
const HEAP_SPACE: u64 = 1 << 40;

/// One input of a graph: the shape, strides and dtype every bound tensor must have.
#[derive(Clone, Copy, Debug)]
pub struct GraphInput {
    desc: TensorDesc,
}

impl GraphInput {
    /// A row-major contiguous input.
    pub fn new(shape: &[u32], dtype: DType) -> Result<GraphInput, TensorError> {
        let overflow = TensorError::BufferOverflow {
            base: 0,
            bytes: u64::MAX,
        };
        let numel = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)))
            .ok_or(overflow.clone())?;
        let bytes = numel
            .max(1)
            .checked_mul(dtype.size() as u64)
            .ok_or(overflow)?;
        Ok(GraphInput {
            desc: TensorDesc::contiguous(0, bytes, shape, dtype)?,
        })
    }

    /// An input laid out like `t` (shape, strides, dtype, version, `manual_dep`): for a graph
    /// recorded from the tensors of a run, e.g. a view with strides.
    pub fn like(t: &OrchTensor<'_>) -> GraphInput {
        let d = *t.desc();
        let buffer = BufferAddr::device(0, d.buffer_bytes());
        GraphInput {
            desc: d.relocated(buffer, d.start_offset(), None),
        }
    }

    /// The recorded layout.
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }
}

/// What a graph needs of one ring when it is replayed at one scope depth: its most tasks,
/// heap bytes and dependency entries pinned at once by scopes that are open while it runs.
/// Pinned resources cannot be freed until the replay's enclosing scope ends, so a replay fits
/// only if the ring holds them on top of what is pinned already.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingNeed {
    /// Most graph tasks pinned at once (a window must be larger than the live tasks).
    pub task_window: u64,
    /// Most heap bytes pinned at once (64-byte aligned allocations).
    pub heap: u64,
    /// The largest single heap allocation (slack for the ring heap's wrap).
    pub heap_largest_alloc: u64,
    /// Most dependency entries between graph tasks pinned at once: the dep pool's worst case
    /// (every producer still running when its consumer is wired) with verify off (verify
    /// mode wires every edge inference finds). It counts the edges the recording wires and
    /// those a replay's lookups of graph inputs and outputs find between graph tasks; edges to
    /// tasks outside the graph (an earlier replay's included) are not counted.
    pub dep_pool: u64,
    /// Most fan-in spill entries pinned at once (the edges of a task past the 64 it holds
    /// inline), counted as `dep_pool` is. The spill pool is a pool of its own, sized by the
    /// same `ring_dep_pool` setting.
    pub fanin_spill: u64,
}

/// What a graph needs from the rings, per replay depth (the scope depth `Scope::replay` is
/// called at; depths from `RING_COUNT - 1` on share the last ring).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphNeeds {
    per_depth: [[RingNeed; RING_COUNT]; RING_COUNT],
    /// Per depth and ring, everything the graph puts on the ring: what it needs behind a task
    /// that an open scope pins already (nothing after that task retires).
    totals: [[RingNeed; RING_COUNT]; RING_COUNT],
}

impl GraphNeeds {
    /// Per ring, what a replay at scope depth `depth` needs.
    pub fn at_depth(&self, depth: usize) -> &[RingNeed; RING_COUNT] {
        &self.per_depth[depth.min(RING_COUNT - 1)]
    }

    /// Per ring, all the graph puts on it when replayed at `depth`.
    pub(crate) fn totals_at_depth(&self, depth: usize) -> &[RingNeed; RING_COUNT] {
        &self.totals[depth.min(RING_COUNT - 1)]
    }
}

/// A recording that is not a valid graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("recording graph {graph:?}: {message}")]
pub struct RecordError {
    pub graph: String,
    pub message: String,
}

/// A recorded graph; cheap to clone and share between threads and runs.
#[derive(Clone, Debug)]
pub struct RecordedGraph {
    pub(crate) inner: Arc<GraphInner>,
    verify: bool,
}

impl RecordedGraph {
    /// Records the submissions of `f` as the graph `name`, with one input per `inputs`. `f`
    /// returns the graph's outputs: tensors created inside it (or views of them).
    pub fn record<F>(
        name: impl Into<String>,
        inputs: &[GraphInput],
        f: F,
    ) -> Result<RecordedGraph, RecordError>
    where
        F: for<'g> FnOnce(
            &mut Recorder<'g, 'g>,
            &[OrchTensor<'g>],
        ) -> OrchResult<Vec<OrchTensor<'g>>>,
    {
        let name = name.into();
        let mut state = RecordState::new(inputs);
        let ins: Vec<OrchTensor<'_>> = state.inputs.iter().map(|&d| OrchTensor::new(d)).collect();
        let result = {
            let mut root = Recorder {
                state: &mut state,
                _marker: PhantomData,
            };
            f(&mut root, &ins)
        };
        let outputs: Vec<TensorDesc> = match result {
            Ok(outputs) => outputs.iter().map(|t| *t.desc()).collect(),
            Err(Fatal(())) => {
                // A failure of the recorder is in `state.error`; any other one (e.g. a `Fatal`
                // of a running scope passed up through the closure) fails the recording too.
                let _ = state.fail(
                    "the recording closure failed with an error that is not the recorder's".into(),
                );
                Vec::new()
            }
        };
        let inner = state
            .finish(Arc::from(name.as_str()), outputs)
            .map_err(|message| RecordError {
                graph: name.clone(),
                message,
            })?;
        Ok(RecordedGraph {
            inner: Arc::new(inner),
            verify: cfg!(debug_assertions),
        })
    }

    /// The same graph with verify mode on or off (default: on in debug builds).
    pub fn verified(mut self, on: bool) -> RecordedGraph {
        self.verify = on;
        self
    }

    /// Whether replays of this handle also run full inference and compare edges.
    pub fn verifies(&self) -> bool {
        self.verify
    }

    /// Whether a replay of this graph can run as one task (module docs, "Fused replay"): it
    /// has at least two tasks to run and no MIX or sync-start task. A replay runs so when
    /// this holds, verify mode is off, no DAG dump, trace or scope stats observe the run,
    /// write-after-read inside is ordered by the graph's edges (when `track_war` or
    /// `war_check` is on), and the heap and the TensorMap have room (module docs).
    pub fn fusable(&self) -> bool {
        self.inner.fused.is_some()
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Tasks per replay (hidden `alloc_tensors` tasks included).
    pub fn num_tasks(&self) -> usize {
        self.inner.tasks.len()
    }

    pub fn inputs(&self) -> impl Iterator<Item = &TensorDesc> {
        self.inner.inputs.iter()
    }

    pub fn num_outputs(&self) -> usize {
        self.inner.outputs.len()
    }

    /// The edges between graph tasks as inference finds them, `(producer, consumer)` as task
    /// indices in submit order. A replay wires [`RecordedGraph::wired_edges`].
    pub fn edges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.inner
            .tasks
            .iter()
            .enumerate()
            .flat_map(|(k, t)| t.edges.iter().map(move |e| (e.from as usize, k)))
    }

    /// The edges a replay wires: [`RecordedGraph::edges`] less the edges that only order and
    /// that a path through other edges implies (graphs of at most 8192 tasks).
    pub fn wired_edges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.inner
            .tasks
            .iter()
            .enumerate()
            .flat_map(|(k, t)| t.wiring.iter().map(move |&(p, _)| (p as usize, k)))
    }

    /// What a replay needs from the rings.
    pub fn needs(&self) -> &GraphNeeds {
        &self.inner.needs
    }

    /// What `replays` replays in a row in one scope at depth `depth` need from each ring: the
    /// graph's own level stays pinned by that scope, so its tasks add up; its nested scopes
    /// free theirs as they end.
    pub fn needs_of_replays(&self, depth: usize, replays: u32) -> [RingNeed; RING_COUNT] {
        let inner = &self.inner;
        pinned_peaks(
            &inner.steps,
            &inner.tasks,
            depth.min(RING_COUNT - 1),
            replays,
        )
        .0
    }
}

/// A step of a recording, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Task(u32),
    Begin,
    End,
}

/// Where a recorded argument's buffer comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Input(u32),
    /// The heap allocation of graph task `k`.
    Task(u32),
}

/// One tensor argument of a recorded task.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordedArg {
    /// The argument with its recorded (virtual) descriptor.
    pub(crate) arg: ArgTensor,
    /// `None` for a tensor the task creates.
    pub(crate) origin: Option<Origin>,
    /// Goes through the TensorMap at replay: over a graph input, or over a buffer the graph
    /// returns.
    pub(crate) boundary: bool,
}

impl RecordedArg {
    /// A tensor the task creates with an initial value: binding it fills the buffer.
    pub(crate) fn fills(&self) -> bool {
        matches!(self.arg, ArgTensor::Create(ci) if ci.initial_value.is_some())
    }
}

/// How far `desc`, recorded over the graph input `recorded`, starts after that input's start:
/// a replay starts it as far after the bound view's start (elements, wrapping).
pub(crate) fn start_delta(desc: &TensorDesc, recorded: &TensorDesc) -> u64 {
    desc.start_offset().wrapping_sub(recorded.start_offset())
}

/// One recorded edge into a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordedEdge {
    pub(crate) from: u32,
    pub(crate) retain: bool,
    /// The kinds inference found it by, as [`kind_bit`] bits.
    pub(crate) kinds: u8,
    /// Found by an explicit dependency, a creator, or a TensorMap hit through an argument that
    /// is not boundary. An edge found only through boundary arguments is not wired from the
    /// recording: the replay's own lookup of those arguments finds it (at the bound tensors'
    /// real offsets, where a view's classification may differ from the recorded one).
    pub(crate) wirable: bool,
    /// Some TensorMap hit through a boundary argument found it: the replay's lookup finds it
    /// too, wired or not ([`RecordedTask::worst_fanin`]).
    pub(crate) through_boundary: bool,
}

impl RecordedEdge {
    pub(crate) fn kinds(&self) -> impl Iterator<Item = EdgeKind> + '_ {
        EDGE_KINDS
            .into_iter()
            .filter(|&k| self.kinds & kind_bit(k) != 0)
    }
}

const EDGE_KINDS: [EdgeKind; 4] = [
    EdgeKind::Creator,
    EdgeKind::TensorMap,
    EdgeKind::Explicit,
    EdgeKind::War,
];

fn kind_bit(kind: EdgeKind) -> u8 {
    match kind {
        EdgeKind::Creator => 1,
        EdgeKind::TensorMap => 2,
        EdgeKind::Explicit => 4,
        EdgeKind::War => 8,
    }
}

/// One recorded task.
#[derive(Clone, Debug)]
pub(crate) struct RecordedTask {
    pub(crate) kernels: [Option<KernelRef>; 3],
    pub(crate) shape: Shape,
    pub(crate) scalars: Scalars,
    pub(crate) block_num: u32,
    pub(crate) sync_start: bool,
    /// The hidden task of `alloc_tensors` (complete at once).
    pub(crate) alloc: bool,
    /// Its heap allocation (OUTPUTs padded), unaligned as a submit computes it.
    pub(crate) heap_bytes: u64,
    /// The virtual device address of its heap allocation.
    pub(crate) virt_base: u64,
    pub(crate) args: smallvec::SmallVec<[RecordedArg; INLINE_ARGS]>,
    /// Explicit dependencies first (as the orchestration gave them), then inferred ones: every
    /// edge, as inference finds it when nothing has retired.
    pub(crate) edges: Vec<RecordedEdge>,
    /// What a replay wires: `edges` less the ordering-only edges another path implies
    /// (`(producer, RETAIN)`, see [`reduce_edges`]).
    pub(crate) wiring: Vec<(u32, bool)>,
    /// Some argument goes through the TensorMap at replay.
    pub(crate) boundary: bool,
    /// Earlier graph tasks whose plain input read overlaps what this task writes through an
    /// argument that stays inside the graph, as (reader, argument index): the readers the
    /// write-after-read check looks at when the chip job has `war_check` on (a submit's
    /// lookup would find them; a replay does not look intermediates up).
    pub(crate) war_readers: Vec<(u32, u32)>,
    /// The same for arguments over a graph input or output: earlier graph tasks whose plain
    /// read this task's writes there overlap. A replay task by task finds them by lookup; a
    /// fused one runs only when the graph's edges order them (`FusedPlan::war_ordered`).
    pub(crate) boundary_war_readers: Vec<u32>,
}

impl RecordedTask {
    /// The dependency entries a replay of this task takes at most with verify off (every
    /// producer still running): one per edge the recording wires, and one per other edge
    /// between graph tasks that its lookups of boundary arguments find — found only so, or
    /// also through an intermediate but left out of the wiring because another path implies
    /// it ([`reduce_edges`]). Edges to tasks outside the graph (an earlier replay's included)
    /// come on top.
    pub(crate) fn worst_fanin(&self) -> u64 {
        let wired = |from: u32| self.wiring.iter().any(|&(p, _)| p == from);
        let found = self
            .edges
            .iter()
            .filter(|e| e.through_boundary && !wired(e.from));
        (self.wiring.len() + found.count()) as u64
    }
}

/// A graph output: a view of a buffer created by a graph task.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordedOutput {
    pub(crate) task: u32,
    pub(crate) desc: TensorDesc,
}

/// An immutable recording.
#[derive(Clone, Debug)]
pub(crate) struct GraphInner {
    pub(crate) name: Arc<str>,
    /// The virtual descriptor of each input.
    pub(crate) inputs: Vec<TensorDesc>,
    pub(crate) steps: Vec<Step>,
    pub(crate) tasks: Vec<RecordedTask>,
    pub(crate) outputs: Vec<RecordedOutput>,
    pub(crate) needs: GraphNeeds,
    /// Deepest relative scope depth (0 = no nested scope).
    pub(crate) max_depth: usize,
    /// How the graph runs as one task, when it can (`engine/fused.rs`).
    pub(crate) fused: Option<Arc<crate::engine::fused::FusedPlan>>,
}

impl GraphInner {
    /// The first write-after-read pair inside the graph that the recording does not order by
    /// a write-after-read edge because the read is a plain input, as (reader, writer)
    /// ([`RecordedTask::war_readers`]). A replay in a chip job with `track_war` would miss
    /// those edges, so it is refused while any exist.
    pub(crate) fn first_untracked_war(&self) -> Option<(u32, u32)> {
        self.tasks
            .iter()
            .enumerate()
            .find_map(|(k, t)| t.war_readers.first().map(|&(r, _)| (r, k as u32)))
    }
}

/// The recorder of one graph: a scope of the recording, depth `'s`, nested in `'p` (the same
/// lifetime rules as [`crate::orch::Scope`]).
pub struct Recorder<'s, 'p> {
    state: &'s mut RecordState,
    _marker: ScopeMarker<'s, 'p>,
}

impl<'s, 'p> Recorder<'s, 'p> {
    /// Records `f` in a nested scope: at replay its tasks go to the next ring down and are
    /// released when it ends, as in [`crate::orch::Scope::scope`].
    pub fn scope<R>(
        &mut self,
        f: impl for<'i> FnOnce(&mut Recorder<'i, 's>) -> OrchResult<R>,
    ) -> OrchResult<R> {
        self.state.check()?;
        if self.state.depth + 1 >= MAX_SCOPE_DEPTH {
            return Err(self.state.fail(format!(
                "scopes nest at most {MAX_SCOPE_DEPTH} deep, counting the root scope"
            )));
        }
        self.state.steps.push(Step::Begin);
        self.state.depth += 1;
        let result = {
            let mut inner: Recorder<'_, 's> = Recorder {
                state: &mut *self.state,
                _marker: PhantomData,
            };
            f(&mut inner)
        };
        self.state.depth -= 1;
        self.state.steps.push(Step::End);
        result
    }

    /// Records a task with the kernel slots and shape of `plan` (the mapping a scope uses).
    fn submit(&mut self, plan: KernelPlan, args: KernelArgs<'s>) -> OrchResult<TaskOutputs<'s>> {
        let (kernels, shape) = plan.map_err(|e| self.state.fail(e))?;
        let (task, outputs) = self
            .state
            .submit(args.into_request(kernels, shape), false)?;
        Ok(TaskOutputs::new(task, outputs))
    }

    /// Records an AIC (cube) task.
    pub fn submit_aic(
        &mut self,
        kernel: KernelRef,
        args: KernelArgs<'s>,
    ) -> OrchResult<TaskOutputs<'s>> {
        self.submit(mix_plan(MixedKernels::aic(kernel)), args)
    }

    /// Records an AIV (vector) task.
    pub fn submit_aiv(
        &mut self,
        kernel: KernelRef,
        args: KernelArgs<'s>,
    ) -> OrchResult<TaskOutputs<'s>> {
        self.submit(mix_plan(MixedKernels::aiv(kernel)), args)
    }

    /// Records a task over the cores of one cluster (as [`crate::orch::Scope::submit_mix`]).
    pub fn submit_mix(
        &mut self,
        kernels: MixedKernels,
        args: KernelArgs<'s>,
    ) -> OrchResult<TaskOutputs<'s>> {
        self.submit(mix_plan(kernels), args)
    }

    /// Records a task that takes part in dependencies but runs no kernel.
    pub fn submit_dummy(&mut self, args: KernelArgs<'s>) -> OrchResult<TaskOutputs<'s>> {
        self.submit(mix_plan(MixedKernels::default()), args)
    }

    /// Records an `alloc_tensors`: buffers owned by a hidden task that is complete at once.
    pub fn alloc_tensors(&mut self, infos: &[TensorCreateInfo]) -> OrchResult<TaskOutputs<'s>> {
        if infos.is_empty() {
            return Err(self
                .state
                .fail("alloc_tensors needs at least one tensor".into()));
        }
        let args = infos
            .iter()
            .fold(KernelArgs::new(), |args, &ci| args.output(ci));
        let (task, outputs) = self
            .state
            .submit(args.into_request([None; 3], Shape::Dummy), true)?;
        Ok(TaskOutputs::new(task, outputs))
    }

    /// Fails the recording with `message` ([`RecordedGraph::record`] returns it).
    pub fn report_fatal(&mut self, message: impl Into<String>) -> Fatal {
        self.state.fail(message.into())
    }

    /// The scope depth relative to the graph (0 = the graph's own level).
    pub fn depth(&self) -> usize {
        self.state.depth
    }
}

/// A recording in progress.
struct RecordState {
    /// This recording's serial, in the bits of its ids above [`LOCAL_BITS`].
    serial: u64,
    inputs: Vec<TensorDesc>,
    tasks: Vec<RecordedTask>,
    steps: Vec<Step>,
    depth: usize,
    /// Buffer base → where the buffer comes from.
    origins: HashMap<u64, Origin>,
    next_virt: u64,
    error: Option<String>,
}

impl RecordState {
    fn new(inputs: &[GraphInput]) -> RecordState {
        let inputs: Vec<TensorDesc> = inputs
            .iter()
            .enumerate()
            .map(|(i, input)| {
                let d = input.desc;
                let base = INPUT_SPACE + ((i as u64) << 48);
                d.relocated(
                    BufferAddr::device(base, d.buffer_bytes()),
                    d.start_offset(),
                    None,
                )
            })
            .collect();
        let origins = inputs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.base(), Origin::Input(i as u32)))
            .collect();
        let serial = RECORDINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xFF_FFFF;
        RecordState {
            serial,
            inputs,
            tasks: Vec::new(),
            steps: Vec::new(),
            depth: 0,
            origins,
            next_virt: HEAP_SPACE,
            error: None,
        }
    }

    fn check(&self) -> OrchResult<()> {
        match self.error {
            Some(_) => Err(Fatal(())),
            None => Ok(()),
        }
    }

    /// Keeps the first error; every later call fails too.
    fn fail(&mut self, message: String) -> Fatal {
        self.error.get_or_insert(message);
        Fatal(())
    }

    /// The id task `k` of this recording has in its `TaskOutputs` and tensor owners.
    fn id(&self, k: u32) -> TaskId {
        TaskId::new(RECORDED_RING, self.serial << LOCAL_BITS | u64::from(k))
    }

    fn submit(&mut self, req: SubmitRequest, alloc: bool) -> OrchResult<(TaskId, Vec<TensorDesc>)> {
        self.check()?;
        let Ok(k) = u32::try_from(self.tasks.len()) else {
            return Err(self.fail("a graph holds at most 2^32 tasks".into()));
        };
        match self.record_task(k, req, alloc) {
            Ok(outputs) => {
                self.steps.push(Step::Task(k));
                Ok((self.id(k), outputs))
            }
            Err(message) => Err(self.fail(format!("task {k}: {message}"))),
        }
    }

    fn record_task(
        &mut self,
        k: u32,
        req: SubmitRequest,
        alloc: bool,
    ) -> Result<Vec<TensorDesc>, String> {
        if let Some(error) = req.error {
            return Err(error);
        }
        if req.tensors.len() > MAX_TENSORS || req.scalars.len() > MAX_SCALARS {
            return Err(format!(
                "{} tensors and {} scalars; the limits are {MAX_TENSORS} and {MAX_SCALARS}",
                req.tensors.len(),
                req.scalars.len()
            ));
        }
        let mut edges = Vec::new();
        for &(dep, retain) in &req.deps {
            let ours = dep.ring() == RECORDED_RING && dep.local() >> LOCAL_BITS == self.serial;
            if !ours || dep.local() & LOCAL_MASK >= u64::from(k) {
                return Err(format!(
                    "explicit dependency on {dep}, which is not an earlier task of this graph"
                ));
            }
            edges.push(RecordedEdge {
                from: (dep.local() & LOCAL_MASK) as u32,
                retain,
                kinds: kind_bit(EdgeKind::Explicit),
                wirable: true,
                through_boundary: false,
            });
        }
        let virt_base = self.next_virt;
        let mut next = virt_base;
        let mut args = smallvec::SmallVec::new();
        let mut outputs = Vec::new();
        for (i, arg) in req.tensors.iter().enumerate() {
            let origin = match *arg {
                ArgTensor::Existing { desc, .. } => Some(
                    self.origin_of(&desc)
                        .map_err(|why| format!("tensor argument {i} {why}"))?,
                ),
                ArgTensor::Create(ci) => {
                    let end = next
                        .checked_add(ci.padded_bytes())
                        .filter(|&end| end < INPUT_SPACE)
                        .ok_or_else(|| {
                            format!(
                                "output {i} ({} bytes) exceeds every heap",
                                ci.padded_bytes()
                            )
                        })?;
                    outputs.push(created(next, ci, self.id(k)));
                    self.origins.insert(next, Origin::Task(k));
                    next = end;
                    None
                }
            };
            args.push(RecordedArg {
                arg: *arg,
                origin,
                boundary: false,
            });
        }
        // At least a page per task: a task whose outputs are all empty takes no bytes, and the
        // next task's buffers must not share its bases.
        self.next_virt = (next.max(virt_base + 1)).next_multiple_of(1 << 12);
        self.tasks.push(RecordedTask {
            kernels: req.kernels,
            shape: req.shape,
            scalars: req.scalars,
            block_num: req.block_num,
            sync_start: req.sync_start,
            alloc,
            heap_bytes: next - virt_base,
            virt_base,
            args,
            edges,
            wiring: Vec::new(),
            boundary: false,
            war_readers: Vec::new(),
            boundary_war_readers: Vec::new(),
        });
        Ok(outputs)
    }

    /// Where `desc`'s buffer comes from; an error names what is wrong with it.
    fn origin_of(&self, desc: &TensorDesc) -> Result<Origin, String> {
        let Some(&origin) = self.origins.get(&desc.base()) else {
            return Err(
                "is not derived from a graph input or a tensor created in the graph".to_string(),
            );
        };
        match origin {
            Origin::Input(i) => {
                let input = &self.inputs[i as usize];
                let inside = desc.is_empty()
                    || (desc.element_range().start >= input.element_range().start
                        && desc.element_range().end <= input.element_range().end);
                if !inside || desc.owner().is_some() {
                    return Err(format!("is not a view of graph input {i}"));
                }
            }
            Origin::Task(k) => {
                if desc.owner() != Some(self.id(k)) {
                    return Err(format!("is not a view of a tensor created by task {k}"));
                }
            }
        }
        Ok(origin)
    }

    /// Checks the outputs, marks the boundary, infers the edges and the needs.
    fn finish(mut self, name: Arc<str>, outputs: Vec<TensorDesc>) -> Result<GraphInner, String> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        let mut exported = vec![false; self.tasks.len()];
        let mut recorded_outputs = Vec::with_capacity(outputs.len());
        for (i, desc) in outputs.iter().enumerate() {
            match self.origin_of(desc) {
                Ok(Origin::Task(k)) => {
                    exported[k as usize] = true;
                    recorded_outputs.push(RecordedOutput {
                        task: k,
                        desc: *desc,
                    });
                }
                Ok(Origin::Input(j)) => {
                    return Err(format!(
                        "output {i} is a view of graph input {j}; return only tensors created in the graph"
                    ));
                }
                Err(why) => return Err(format!("output {i} {why}")),
            }
        }
        for task in &mut self.tasks {
            for arg in &mut task.args {
                arg.boundary = match arg.origin {
                    Some(Origin::Input(_)) => true,
                    Some(Origin::Task(k)) => exported[k as usize],
                    None => false,
                };
            }
            task.boundary = task.args.iter().any(|a| a.boundary);
        }
        infer_edges(&mut self.tasks);
        reduce_edges(&mut self.tasks);
        let max_depth = self
            .steps
            .iter()
            .scan(0usize, |depth, step| {
                match step {
                    Step::Begin => *depth += 1,
                    Step::End => *depth -= 1,
                    Step::Task(_) => {}
                }
                Some(*depth)
            })
            .max()
            .unwrap_or(0);
        let per_depth = std::array::from_fn(|d| pinned_peaks(&self.steps, &self.tasks, d, 1));
        let needs = GraphNeeds {
            per_depth: per_depth.map(|(peak, _)| peak),
            totals: per_depth.map(|(_, total)| total),
        };
        let fused = crate::engine::fused::FusedPlan::of(&self.tasks, &self.inputs).map(Arc::new);
        Ok(GraphInner {
            name,
            fused,
            inputs: self.inputs,
            steps: self.steps,
            tasks: self.tasks,
            outputs: recorded_outputs,
            needs,
            max_depth,
        })
    }
}

/// The descriptor of an OUTPUT created at virtual address `base` by the task `owner`.
fn created(base: u64, ci: CreateInfo, owner: TaskId) -> TensorDesc {
    TensorDesc::contiguous(base, ci.padded_bytes(), ci.shape(), ci.dtype)
        .expect("a created buffer fits its tensor")
        .with_owner(Some(owner))
        .with_manual_dep(ci.manual_dep)
}

/// A recording tracks the reads a `TrackedInput` tags, whatever the run it is replayed in; it
/// notes the other reads that a later write inside the graph overlaps
/// ([`RecordedTask::war_readers`]).
const RECORDED_READS: infer::WarPolicy = infer::WarPolicy {
    track_all: false,
    check: true,
};

/// Runs submit inference over the recording, with nothing ever retiring, and appends each
/// task's edges (deduplicated, kinds merged) after its explicit ones, and the plain-input
/// reads that its writes inside the graph overlap ([`RecordedTask::war_readers`]).
fn infer_edges(tasks: &mut [RecordedTask]) {
    let n = tasks.len() as u64;
    let writers: usize = tasks
        .iter()
        .flat_map(|t| &t.args)
        .filter(|a| {
            matches!(a.arg, ArgTensor::Existing { tag, desc }
                if infer::writes(tag, &desc) || RECORDED_READS.reader_role(tag, &desc).is_some())
        })
        .count();
    let window = (n + 1).next_power_of_two();
    let mut map = TensorMap::new(writers + 1, 256, [window, 1, 1, 1]);
    let never_retired = [0; RING_COUNT];
    for (k, task) in tasks.iter_mut().enumerate() {
        let mut found: Vec<RecordedEdge> = Vec::new();
        let mut war_readers: Vec<(u32, u32)> = Vec::new();
        let mut boundary_war_readers: Vec<u32> = Vec::new();
        for (i, arg) in task.args.iter().enumerate() {
            let ArgTensor::Existing { tag, desc } = arg.arg else {
                continue;
            };
            infer::arg_producers(
                &mut map,
                &never_retired,
                tag,
                &desc,
                |p, retain, kind| {
                    found.push(RecordedEdge {
                        from: (p.local() & LOCAL_MASK) as u32,
                        retain,
                        kinds: kind_bit(kind),
                        wirable: !matches!(kind, EdgeKind::TensorMap | EdgeKind::War)
                            || !arg.boundary,
                        through_boundary: matches!(kind, EdgeKind::TensorMap | EdgeKind::War)
                            && arg.boundary,
                    });
                },
                |reader| {
                    let reader = (reader.local() & LOCAL_MASK) as u32;
                    if reader as usize == k {
                        return;
                    }
                    // A boundary argument's replay lookup finds its readers itself, unless
                    // the replay runs as one task (`engine/fused.rs`).
                    if arg.boundary {
                        boundary_war_readers.push(reader);
                    } else {
                        war_readers.push((reader, i as u32));
                    }
                },
            );
        }
        for arg in &task.args {
            let ArgTensor::Existing { tag, desc } = arg.arg else {
                continue;
            };
            if let Some(role) = RECORDED_READS.entry_role(tag, &desc) {
                map.insert_as(TaskId::new(0, k as u64), desc, role)
                    .expect("the map holds every entry of the recording");
            }
        }
        for e in found {
            if e.from as usize == k {
                continue;
            }
            match task.edges.iter_mut().find(|x| x.from == e.from) {
                Some(x) => {
                    x.retain |= e.retain;
                    x.kinds |= e.kinds;
                    x.wirable |= e.wirable;
                    x.through_boundary |= e.through_boundary;
                }
                None => task.edges.push(e),
            }
        }
        task.war_readers = war_readers;
        task.boundary_war_readers = boundary_war_readers;
    }
}

/// Graphs up to this many tasks get their wiring reduced (the ancestor sets cost N²/8 bytes).
const REDUCE_LIMIT: usize = 8192;

/// Fills each task's wiring: its wirable edges ([`RecordedEdge::wirable`]), less those that
/// only order (not RETAIN) and that a path of wirable edges through another of its producers
/// implies. Offline inference finds the edges of every
/// timing — in a stencil, a task's lookups find every earlier writer of its columns, which a
/// run would mostly have retired — so a replay wiring them all would pay for edges that order
/// nothing. The order a replay enforces is the same: a consumer still starts only after every
/// producer inference found has completed.
fn reduce_edges(tasks: &mut [RecordedTask]) {
    let n = tasks.len();
    let wirable = |t: &RecordedTask| -> Vec<(u32, bool)> {
        let edges = t.edges.iter().filter(|e| e.wirable);
        edges.map(|e| (e.from, e.retain)).collect()
    };
    if n > REDUCE_LIMIT {
        for t in tasks.iter_mut() {
            t.wiring = wirable(t);
        }
        return;
    }
    let words = n.div_ceil(64);
    let has = |set: &[u64], i: u32| set[i as usize / 64] & (1 << (i % 64)) != 0;
    // ancestors[k]: every task task k transitively waits for.
    let mut ancestors: Vec<Vec<u64>> = Vec::with_capacity(n);
    for t in tasks.iter_mut() {
        let mut direct = wirable(t);
        direct.sort_unstable_by_key(|&(p, _)| std::cmp::Reverse(p));
        let mut covered = vec![0u64; words];
        let mut wiring = Vec::with_capacity(direct.len());
        for (p, retain) in direct {
            if retain || !has(&covered, p) {
                wiring.push((p, retain));
                for (c, a) in covered.iter_mut().zip(&ancestors[p as usize]) {
                    *c |= a;
                }
            }
            covered[p as usize / 64] |= 1 << (p % 64);
        }
        wiring.reverse();
        t.wiring = wiring;
        ancestors.push(covered);
    }
}

/// Per ring, the most tasks, heap bytes and dep entries the graph pins at once when replayed
/// `replays` times in a row in one scope at depth `depth`, and (second) what it puts on each
/// ring in all.
///
/// A ring retires in order, so a task stays live while any earlier task of its ring belongs to
/// a scope that is still open: what is pinned is the span from the first such task to the
/// newest. (Where two graph levels share ring 3, the tasks of a scope that has ended stay
/// behind an open outer scope's task.)
fn pinned_peaks(
    steps: &[Step],
    tasks: &[RecordedTask],
    depth: usize,
    replays: u32,
) -> ([RingNeed; RING_COUNT], [RingNeed; RING_COUNT]) {
    /// One task on a ring: its frame, heap bytes, dependency and spill entries.
    struct Live {
        frame: usize,
        heap: u64,
        deps: u64,
        spill: u64,
    }
    #[derive(Default)]
    struct RingSpan {
        tasks: Vec<Live>,
        /// The first task of the span: every earlier one can retire.
        first: usize,
        heap: u64,
        deps: u64,
        spill: u64,
    }
    let ring_of = |rel: usize| pto_types::ring_config::ring_for_depth(depth + rel);
    let fanin: Vec<u64> = tasks.iter().map(RecordedTask::worst_fanin).collect();
    // Open frames (ids), the graph's own level first; a frame id is never reused.
    let mut open: Vec<usize> = vec![0];
    let mut next_frame = 1;
    let mut rings: [RingSpan; RING_COUNT] = Default::default();
    let mut peak = [RingNeed::default(); RING_COUNT];
    let mut total = [RingNeed::default(); RING_COUNT];
    for step in (0..replays).flat_map(|_| steps) {
        match *step {
            Step::Begin => {
                open.push(next_frame);
                next_frame += 1;
            }
            Step::End => {
                open.pop();
            }
            Step::Task(k) => {
                let t = &tasks[k as usize];
                let ring = ring_of(open.len() - 1);
                let (heap, deps) = (align_heap(t.heap_bytes), fanin[k as usize]);
                let spill = deps.saturating_sub(INLINE_FANIN);
                let span = &mut rings[ring];
                span.tasks.push(Live {
                    frame: *open.last().expect("the graph's own level"),
                    heap,
                    deps,
                    spill,
                });
                span.heap += heap;
                span.deps += deps;
                span.spill += spill;
                while !open.contains(&span.tasks[span.first].frame) {
                    let gone = &span.tasks[span.first];
                    span.heap -= gone.heap;
                    span.deps -= gone.deps;
                    span.spill -= gone.spill;
                    span.first += 1;
                }
                let peak = &mut peak[ring];
                peak.task_window = peak.task_window.max((span.tasks.len() - span.first) as u64);
                peak.heap = peak.heap.max(span.heap);
                peak.heap_largest_alloc = peak.heap_largest_alloc.max(heap);
                peak.dep_pool = peak.dep_pool.max(span.deps);
                peak.fanin_spill = peak.fanin_spill.max(span.spill);
                let total = &mut total[ring];
                total.task_window += 1;
                total.heap += heap;
                total.heap_largest_alloc = total.heap_largest_alloc.max(heap);
                total.dep_pool += deps;
                total.fanin_spill += spill;
            }
        }
    }
    (peak, total)
}

impl RecordedGraph {
    /// The recorded input descriptors are virtual; this checks `bound` against them and says
    /// what does not fit, naming the input.
    pub(crate) fn check_binding(&self, bound: &[TensorDesc]) -> Result<(), String> {
        let inputs = &self.inner.inputs;
        if bound.len() != inputs.len() {
            return Err(format!(
                "graph {:?} has {} input(s), the replay bound {}",
                self.name(),
                inputs.len(),
                bound.len()
            ));
        }
        for (i, (b, r)) in bound.iter().zip(inputs).enumerate() {
            let mismatch = if b.dtype() != r.dtype() {
                Some(format!("dtype {} (recorded {})", b.dtype(), r.dtype()))
            } else if b.shape() != r.shape() {
                Some(format!("shape {:?} (recorded {:?})", b.shape(), r.shape()))
            } else if b.strides() != r.strides() {
                Some(format!(
                    "strides {:?} (recorded {:?})",
                    b.strides(),
                    r.strides()
                ))
            } else if b.version() != r.version() {
                Some(format!(
                    "version {} (recorded {})",
                    b.version(),
                    r.version()
                ))
            } else if b.manual_dep() != r.manual_dep() {
                Some(format!(
                    "manual_dep {} (recorded {})",
                    b.manual_dep(),
                    r.manual_dep()
                ))
            } else {
                None
            };
            if let Some(what) = mismatch {
                return Err(format!(
                    "graph {:?}: input {i} is bound to a tensor with {what}",
                    self.name()
                ));
            }
        }
        for i in 0..bound.len() {
            for j in i + 1..bound.len() {
                let (a, b) = (&bound[i], &bound[j]);
                if a.base() == b.base()
                    && a.space() == b.space()
                    && a.geometry().classify(&b.geometry())
                        != pto_types::geometry::Overlap::NoOverlap
                {
                    return Err(format!(
                        "graph {:?}: inputs {i} and {j} are bound to overlapping tensors ({a} and {b}); the recording had them disjoint",
                        self.name()
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use pto_types::ring_config::env::EnvSource;
    use pto_types::{CallConfig, ErrorCode, TaskArgs};

    use super::*;
    use crate::orch::{OrchArgs, RootScope};
    use crate::{ChipRunError, ChipSpec, ChipWorker, RunContext};

    /// alloc → A writes t (INOUT) → B reads t: one TensorMap edge A → B and creator edges.
    fn graph() -> RecordedGraph {
        RecordedGraph::record("g", &[], |r, _| {
            let t = r
                .alloc_tensors(&[TensorCreateInfo::new(&[16], DType::F32)])?
                .tensor(0);
            r.submit_dummy(KernelArgs::new().inout(t))?;
            r.submit_dummy(KernelArgs::new().input(t))?;
            Ok(vec![])
        })
        .unwrap()
    }

    #[test]
    fn a_binding_names_what_does_not_fit_and_views_overlap_by_their_elements() {
        let x = GraphInput::new(&[8, 4], DType::F32).unwrap();
        let g = RecordedGraph::record("pair", &[x, x], |r, ins| {
            r.submit_dummy(KernelArgs::new().inout(ins[0]).input(ins[1]))?;
            Ok(vec![])
        })
        .unwrap();
        let buf = TensorDesc::contiguous(0x1000, 64 * 8 * 4, &[64, 8], DType::F32).unwrap();
        // Rows 0-7 and rows 8-15 of one buffer, each [8, 4] with the recorded strides.
        let rows = |first: u32| {
            let v = buf.view(&[8, 8], &[first, 0]).unwrap();
            v.reshape(&[64])
                .unwrap()
                .slice(0, 0, 32)
                .unwrap()
                .reshape(&[8, 4])
        };
        let (a, b) = (rows(0).unwrap(), rows(8).unwrap());
        assert_eq!(g.check_binding(&[a, b]), Ok(()));
        // Half of one view over half of the other: overlapping, though neither is the other.
        let shifted = buf
            .reshape(&[512])
            .unwrap()
            .slice(0, 16, 32)
            .unwrap()
            .reshape(&[8, 4])
            .unwrap();
        let e = g.check_binding(&[a, shifted]).unwrap_err();
        assert!(
            e.contains("inputs 0 and 1 are bound to overlapping tensors"),
            "{e}"
        );
        // The same shape with other strides: columns 0-3 of rows 0-7 of the [64, 8] buffer.
        let strided = buf.view(&[8, 4], &[0, 0]).unwrap();
        assert_eq!(strided.strides(), &[8, 1]);
        let e = g.check_binding(&[strided, b]).unwrap_err();
        assert!(
            e.contains("input 0 is bound to a tensor with strides [8, 1] (recorded [4, 1])"),
            "{e}"
        );
        let e = g.check_binding(&[a, b.with_version(1)]).unwrap_err();
        assert!(
            e.contains("input 1 is bound to a tensor with version 1 (recorded 0)"),
            "{e}"
        );
        let e = g.check_binding(&[a.with_manual_dep(true), b]).unwrap_err();
        assert!(
            e.contains("input 0 is bound to a tensor with manual_dep true (recorded false)"),
            "{e}"
        );
    }

    #[test]
    fn an_edge_reduced_out_of_the_wiring_but_found_through_the_boundary_is_counted() {
        // A creates b; P writes the input x and b; Q reads b into c; T reads x, b and c. P → T
        // (through x and through b) only orders and P → Q → T implies it, so the wiring drops
        // it; but T's lookup of the input x finds P at replay, and takes an entry for it.
        let x = GraphInput::new(&[16], DType::F32).unwrap();
        let g = RecordedGraph::record("reduced", &[x], |r, ins| {
            let ci = TensorCreateInfo::new(&[16], DType::F32);
            let b = r.submit_dummy(KernelArgs::new().output(ci))?.tensor(0);
            r.submit_dummy(KernelArgs::new().inout(ins[0]).inout(b))?;
            let c = r
                .submit_dummy(KernelArgs::new().input(b).output(ci))?
                .tensor(0);
            r.submit_dummy(KernelArgs::new().input(ins[0]).input(b).input(c))?;
            Ok(vec![])
        })
        .unwrap();
        let t = &g.inner.tasks[3];
        assert!(t.wiring.iter().all(|&(p, _)| p != 1), "{:?}", t.wiring);
        assert_eq!((t.wiring.len(), t.worst_fanin()), (2, 3));
        // A 0, P 1 (A), Q 2 (A, P), T 3.
        assert_eq!(g.needs().at_depth(0)[0].dep_pool, 6);
    }

    #[test]
    fn fan_in_past_the_inline_edges_counts_spill_entries() {
        // 70 tracked readers of an input, then its overwrite: 70 edges found through the
        // boundary, 6 past the 64 held inline; then a reader of 3 tensors one `alloc_tensors`
        // created: one wired creator edge.
        let x = GraphInput::new(&[16], DType::F32).unwrap();
        let g = RecordedGraph::record("wide", &[x], |r, ins| {
            for _ in 0..70 {
                r.submit_dummy(KernelArgs::new().tracked_input(ins[0]))?;
            }
            r.submit_dummy(KernelArgs::new().output_existing(ins[0]))?;
            let ci = TensorCreateInfo::new(&[16], DType::F32);
            let ts = r.alloc_tensors(&[ci, ci, ci])?;
            let args = (0..3).fold(KernelArgs::new(), |a, i| a.input(ts.tensor(i)));
            r.submit_dummy(args)?;
            Ok(vec![])
        })
        .unwrap();
        let need = g.needs().at_depth(0)[0];
        assert_eq!((need.dep_pool, need.fanin_spill), (70 + 1, 6), "{need:?}");
    }

    thread_local! {
        static GRAPH: RefCell<Option<RecordedGraph>> = const { RefCell::new(None) };
    }

    fn replay_it<'r>(s: &mut RootScope<'r>, _: &OrchArgs<'r>) -> OrchResult<()> {
        let g = GRAPH.with(|g| g.borrow().clone()).unwrap();
        s.replay(&g, &[]).map(|_| ())
    }

    fn run(g: RecordedGraph) -> Result<(), Box<crate::ChipError>> {
        GRAPH.with(|slot| *slot.borrow_mut() = Some(g));
        let chip = ChipWorker::new(ChipSpec::default(), EnvSource::empty()).unwrap();
        match chip.run_fn(
            replay_it,
            &TaskArgs::new(),
            &CallConfig::default(),
            &RunContext::default(),
        ) {
            Ok(_) => Ok(()),
            Err(ChipRunError::Run(e)) => Err(e),
            Err(e) => panic!("{e}"),
        }
    }

    /// The recording with `edit` applied to task 2, in verify mode.
    fn corrupted(edit: impl FnOnce(&mut RecordedTask)) -> RecordedGraph {
        let g = graph();
        let mut inner = (*g.inner).clone();
        edit(&mut inner.tasks[2]);
        RecordedGraph {
            inner: Arc::new(inner),
            verify: true,
        }
    }

    #[test]
    fn the_recording_has_the_edges_inference_finds() {
        let mut edges: Vec<(usize, usize)> = graph().edges().collect();
        edges.sort_unstable();
        assert_eq!(edges, vec![(0, 1), (0, 2), (1, 2)]);
        run(graph().verified(true)).unwrap();
    }

    #[test]
    fn verify_mode_fails_loudly_on_a_missing_edge() {
        let g = corrupted(|task| {
            task.edges.retain(|e| e.from != 1);
            task.wiring.retain(|&(p, _)| p != 1);
        });
        let e = run(g.clone()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InternalError, "{e}");
        assert!(
            e.detail.contains("inference found edge task 1 → task 2"),
            "{e}"
        );
        // Without verify the corrupted recording is trusted: that is what verify is for.
        run(g.verified(false)).unwrap();
    }

    #[test]
    fn verify_mode_fails_loudly_on_an_extra_edge() {
        // Two readers of t: no edge between them, until one is made up.
        let g = RecordedGraph::record("readers", &[], |r, _| {
            let t = r
                .alloc_tensors(&[TensorCreateInfo::new(&[16], DType::F32)])?
                .tensor(0);
            r.submit_dummy(KernelArgs::new().input(t))?;
            r.submit_dummy(KernelArgs::new().input(t))?;
            Ok(vec![])
        })
        .unwrap();
        let mut inner = (*g.inner).clone();
        inner.tasks[2].edges.push(RecordedEdge {
            from: 1,
            retain: false,
            kinds: kind_bit(EdgeKind::TensorMap),
            wirable: true,
            through_boundary: false,
        });
        inner.tasks[2].wiring.push((1, false));
        let g = RecordedGraph {
            inner: Arc::new(inner),
            verify: true,
        };
        // The root scope stays open, so task 1 cannot have retired: inference must see it.
        let e = run(g).unwrap_err();
        assert_eq!(e.code, ErrorCode::InternalError, "{e}");
        assert!(
            e.detail
                .contains("the recording has edge task 1 → task 2, which inference did not find"),
            "{e}"
        );
    }
}
