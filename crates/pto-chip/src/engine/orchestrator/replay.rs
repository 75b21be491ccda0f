//! Replaying a recorded graph (`crate::replay`): the submit pipeline of [`OrchCore::submit`]
//! with the dependency analysis of the graph's inside taken from the recording.
//!
//! Per task: admission and heap as any submit; producers = the recorded edges, mapped to this
//! replay's ids, plus what inference finds for the **boundary** arguments (over a graph input
//! or a buffer the graph returns), which also register as TensorMap writers. Buffers that stay
//! inside the graph never enter the TensorMap: no task outside the graph can name them, so the
//! only live writers inference could find there are graph tasks, and the recording has those.
//!
//! Verify mode runs full inference over every argument instead, registers every writer, and
//! fails the run (INTERNAL_ERROR) when the recording and inference disagree on a live edge.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use pto_types::{ErrorCode, RING_COUNT, Resource, WarCheck};

use crate::diag::deps::EdgeKind;
use crate::engine::TaskPayload;
use crate::engine::graph::ProducerState;
use crate::engine::infer;
use crate::error::{ChipError, Detector, OrchResult, ResourceKind};
use crate::replay::{
    GraphInner, Origin, RecordedArg, RecordedEdge, RecordedGraph, RecordedTask, Step, start_delta,
};
use crate::task_id::TaskId;
use crate::tensor::{BufferAddr, TensorDesc};

use super::super::graph::NewTask;
use super::{
    ArgTensor, ArgTensors, MAX_SCOPE_DEPTH, OrchCore, Site, dedup_producers, payload_names,
};

/// The ids and heap bases this replay gave the graph's tasks so far.
pub(super) struct Replayed<'a> {
    pub(super) graph: &'a GraphInner,
    pub(super) bound: &'a [TensorDesc],
    pub(super) ids: Vec<TaskId>,
    pub(super) bases: Vec<u64>,
    /// Verify mode: graph task index by id.
    pub(super) index: Option<HashMap<TaskId, u32>>,
}

impl Replayed<'_> {
    /// A recorded argument over this replay's buffers.
    pub(super) fn arg(&self, a: &RecordedArg) -> ArgTensor {
        match (a.arg, a.origin) {
            (ArgTensor::Existing { tag, desc }, Some(origin)) => ArgTensor::Existing {
                tag,
                desc: self.rebase(&desc, origin),
            },
            (arg, _) => arg,
        }
    }

    /// `desc` (recorded over `origin`) moved onto this replay's buffers.
    pub(super) fn rebase(&self, desc: &TensorDesc, origin: Origin) -> TensorDesc {
        match origin {
            Origin::Input(i) => {
                let (b, r) = (&self.bound[i as usize], &self.graph.inputs[i as usize]);
                let start = b.start_offset().wrapping_add(start_delta(desc, r));
                desc.relocated(b.buffer(), start, b.owner())
            }
            Origin::Task(k) => {
                let task = &self.graph.tasks[k as usize];
                let base = self.bases[k as usize] + (desc.base() - task.virt_base);
                desc.relocated(
                    BufferAddr::device(base, desc.buffer_bytes()),
                    desc.start_offset(),
                    Some(self.ids[k as usize]),
                )
            }
        }
    }
}

impl OrchCore {
    /// Submits the tasks of `graph` with its inputs bound to `bound`; returns its outputs.
    pub(crate) fn replay(
        &mut self,
        graph: &RecordedGraph,
        bound: &[TensorDesc],
    ) -> OrchResult<Vec<TensorDesc>> {
        self.check_fatal()?;
        // The replay reads producer states and publishes in id order.
        self.flush()?;
        let inner = &*graph.inner;
        if let Err(e) = graph.check_binding(bound) {
            return Err(self.fail_immediate(ErrorCode::InvalidArgs, e));
        }
        if self.scopes.len() + inner.max_depth > MAX_SCOPE_DEPTH {
            return Err(self.fail_immediate(
                ErrorCode::InvalidArgs,
                format!(
                    "graph {:?} nests {} scope(s) below depth {}: scopes nest at most {MAX_SCOPE_DEPTH} deep",
                    inner.name,
                    inner.max_depth,
                    self.depth()
                ),
            ));
        }
        if self.settings.war.track_all
            && let Some((reader, writer)) = inner.first_untracked_war()
        {
            return Err(self.fail_immediate(
                ErrorCode::InvalidArgs,
                format!(
                    "graph {:?} was recorded with plain input reads that a later task of the \
                     graph overwrites (task {writer} writes what task {reader} reads), and this \
                     chip job has track_war on: the replay would miss that write-after-read \
                     edge; tag those reads tracked_input when recording",
                    inner.name
                ),
            ));
        }
        for t in inner.tasks.iter().filter(|t| t.sync_start) {
            self.check_sync_start(t.shape, t.block_num)?;
        }
        self.check_needs(graph)?;
        if let Some(plan) = self.fusable(graph) {
            self.replaying = Some(Arc::clone(&inner.name));
            let replayed = self.replay_fused(inner, plan, bound);
            self.replaying = None;
            return replayed;
        }
        let mut state = Replayed {
            graph: inner,
            bound,
            ids: Vec::with_capacity(inner.tasks.len()),
            bases: Vec::with_capacity(inner.tasks.len()),
            index: graph.verifies().then(HashMap::new),
        };
        let mut open = 0usize;
        let mut result = Ok(());
        self.replaying = Some(Arc::clone(&inner.name));
        for step in &inner.steps {
            result = match *step {
                Step::Begin => self
                    .begin_scope_at(Site::Graph(Arc::clone(&inner.name)))
                    .map(|()| open += 1),
                Step::End => {
                    self.end_scope();
                    open -= 1;
                    Ok(())
                }
                Step::Task(k) => self.replay_task(&mut state, k),
            };
            if result.is_err() {
                break;
            }
        }
        for _ in 0..open {
            self.end_scope();
        }
        let handed = self.hand_off_queue();
        self.replaying = None;
        result?;
        handed?;
        Ok(inner
            .outputs
            .iter()
            .map(|o| state.rebase(&o.desc, Origin::Task(o.task)))
            .collect())
    }

    /// Fails at once when the graph's pinned task slots or heap bytes cannot fit beside what
    /// the open scopes pin already (they could never be freed while the replay runs). The
    /// window check is exact; the heap check is a necessary condition (the ring heap also
    /// loses bytes to wrapping, which the run-time detectors catch). The dep pool is not
    /// checked here: its worst case assumes every producer is still running, and a replay
    /// whose producers finish in time fits in less.
    fn check_needs(&self, graph: &RecordedGraph) -> OrchResult<()> {
        let peaks = graph.needs().at_depth(self.depth());
        let totals = graph.needs().totals_at_depth(self.depth());
        for ring in 0..RING_COUNT {
            if totals[ring].task_window == 0 {
                continue;
            }
            // A ring retires in order: from the first task of a scope still open on it, every
            // task stays live — and so does every task the graph puts there.
            let frames = self.scopes.iter().filter(|f| f.ring == ring);
            let first_pinned = frames.filter_map(|f| f.tasks.first()).min();
            let tasks = first_pinned.map_or(0, |id| self.rings[ring].next_id() - id.local());
            let heap = self.pinned_heap(ring);
            let need = if tasks > 0 {
                &totals[ring]
            } else {
                &peaks[ring]
            };
            let window = u64::from(self.rings[ring].window());
            let capacity = self.sizing.heap(ring);
            let (code, resource, used, requested, min) = if tasks + need.task_window > window - 1 {
                let min = Resource::TaskWindow.legal_at_least(tasks + need.task_window + 1);
                let kind = ResourceKind::TaskWindow;
                (ErrorCode::ScopeDeadlock, kind, tasks, need.task_window, min)
            } else if heap + need.heap > capacity {
                let min = Resource::Heap.legal_at_least(heap + need.heap + need.heap_largest_alloc);
                (
                    ErrorCode::HeapRingDeadlock,
                    ResourceKind::Heap,
                    heap,
                    need.heap,
                    min,
                )
            } else {
                continue;
            };
            let res = resource.ring_resource().expect("a ring resource");
            let cap = self.sizing.at(res, ring);
            let mut e = ChipError::new(
                code,
                Detector::Immediate,
                format!(
                    "replaying graph {:?} at depth {} pins {requested} {} on ring {ring} beside {used} pinned by open scopes; {} capacity {} (source: {}); recommended minimum {min}",
                    graph.name(),
                    self.depth(),
                    res.unit(),
                    resource.as_str(),
                    cap.value,
                    cap.source
                ),
            );
            e.ring = Some(ring);
            e.resource = Some(resource);
            e.capacity = Some(cap);
            e.used = Some(used);
            e.requested = Some(requested);
            e.recommended_min = Some(min);
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// Heap bytes that the open scopes on `ring` pin: a replay's heap comes on top of them.
    pub(super) fn pinned_heap(&self, ring: usize) -> u64 {
        let frames = self.scopes.iter().filter(|f| f.ring == ring);
        frames.map(|f| f.heap).sum()
    }

    /// Submits graph task `k`.
    fn replay_task(&mut self, st: &mut Replayed<'_>, k: u32) -> OrchResult<()> {
        self.check_fatal()?;
        let t: &RecordedTask = &st.graph.tasks[k as usize];
        let submit_start = (self.run.trace_level >= 4).then(|| self.run.micros(Instant::now()));
        let (id, offset) = self.admit_and_allocate(t.heap_bytes)?;
        let ring = usize::from(id.ring());
        self.tensormap
            .sync_ring(id.ring(), self.observed[ring], id.local() + 1);
        st.ids.push(id);
        if self.scope_stats.is_some() {
            self.count_graph_task(&st.graph.name);
        }
        st.bases
            .push(self.memory.heap_device_base + self.heap_bases[ring] + offset);
        if let Some(index) = &mut st.index {
            index.insert(id, k);
        }
        if let Some(deps) = &mut self.deps {
            let names = payload_names(&t.kernels);
            deps.replayed_task(
                id,
                names,
                self.scopes.len() - 1,
                t.block_num,
                st.graph.name.clone(),
            );
            // Edges through boundary arguments are found (and dumped) by the lookups below.
            for e in t.edges.iter().filter(|e| e.wirable) {
                for kind in e.kinds() {
                    deps.edge(st.ids[e.from as usize], id, kind, e.retain);
                }
            }
        }
        let mut payload = TaskPayload::fresh(
            self.spare_payloads.pop(),
            t.shape,
            t.kernels,
            &t.scalars,
            t.block_num,
            t.sync_start,
        );
        let war_readers = self.war_readers(st, t);
        let producers = if st.index.is_none() && !t.boundary && war_readers.is_empty() {
            // Every argument stays inside the graph: the recording has its edges, and no
            // lookup noted a reader for the write-after-read check. No argument list either:
            // the rebased tensors go straight into the payload.
            debug_assert!(!self.war.has_unordered(), "checked by the last submit");
            self.bind_tensors(
                id,
                ring,
                offset,
                t.args.iter().map(|a| st.arg(a)),
                &mut payload,
            );
            self.wired_producers(st, t)
        } else {
            let tensors: ArgTensors = t.args.iter().map(|a| st.arg(a)).collect();
            let producers = if st.index.is_some() {
                self.verified_producers(st, k, id, &tensors)?
            } else {
                self.replayed_producers(st, t, id, &tensors)?
            };
            for &(reader, arg) in war_readers {
                self.war.note(st.ids[reader as usize], arg as usize);
            }
            self.check_war(id, &t.kernels, &tensors, &producers)?;
            self.bind_tensors(id, ring, offset, tensors.iter().copied(), &mut payload);
            producers
        };
        if let Some(trace) = &self.run.trace {
            trace.lock().graph_task(id, st.graph.name.clone());
        }
        let task = NewTask {
            id,
            payload,
            producers,
            completed: t.alloc,
        };
        if st.index.is_some() {
            // Verification reads producer states: every earlier task must be in the graph.
            self.publish(task, false)?;
        } else {
            self.enqueue(task)?;
        }
        if let Some(start) = submit_start {
            let names = payload_names(&t.kernels);
            self.trace_orch(format!("replay {id} {names} ({})", st.graph.name), start);
        }
        Ok(())
    }

    /// Counts a task of graph `name` in the innermost scope's scope stats.
    fn count_graph_task(&mut self, name: &Arc<str>) {
        let graphs = &mut self.scopes.last_mut().expect("root scope").graphs;
        match graphs.iter_mut().find(|(g, _)| g == name) {
            Some((_, tasks)) => *tasks += 1,
            None => graphs.push((Arc::clone(name), 1)),
        }
    }

    /// The plain reads inside the graph that `t`'s writes overlap, for the write-after-read
    /// check as a submit's lookups would have fed it: none with `war_check` off, and none in
    /// verify mode, whose full inference notes them itself.
    fn war_readers<'g>(&self, st: &Replayed<'_>, t: &'g RecordedTask) -> &'g [(u32, u32)] {
        if self.settings.war_check == WarCheck::Off || st.index.is_some() {
            &[]
        } else {
            &t.war_readers
        }
    }

    /// A task with boundary arguments: recorded edges, plus inference over those arguments.
    fn replayed_producers(
        &mut self,
        st: &Replayed<'_>,
        t: &RecordedTask,
        id: TaskId,
        tensors: &ArgTensors,
    ) -> OrchResult<Vec<(TaskId, bool)>> {
        let mut producers = self.wired_producers(st, t);
        self.boundary_lookups(t, id, tensors, &mut producers)?;
        dedup_producers(&mut producers, id);
        Ok(producers)
    }

    /// Inference over `t`'s boundary arguments as task `id`: the producers it finds are
    /// pushed onto `producers`, and `id` registers as their writer (or reader).
    pub(super) fn boundary_lookups(
        &mut self,
        t: &RecordedTask,
        id: TaskId,
        tensors: &ArgTensors,
        producers: &mut Vec<(TaskId, bool)>,
    ) -> OrchResult<()> {
        let args = t.args.iter().zip(tensors).enumerate();
        let boundary = args.filter(|(_, (a, _))| a.boundary);
        self.infer_boundary(id, boundary.map(|(i, (_, arg))| (i, *arg)), producers)
    }

    /// Inference over boundary arguments `args` (each with its index among its task's
    /// arguments) as task `id`: the producers it finds are pushed onto `producers`, and `id`
    /// registers as their writer (or reader).
    pub(super) fn infer_boundary(
        &mut self,
        id: TaskId,
        args: impl IntoIterator<Item = (usize, ArgTensor)>,
        producers: &mut Vec<(TaskId, bool)>,
    ) -> OrchResult<()> {
        let observed = self.observed;
        let mut writers = ArgTensors::new();
        for (i, arg) in args {
            let ArgTensor::Existing { tag, desc } = arg else {
                continue;
            };
            let (deps, war) = (&mut self.deps, &mut self.war);
            infer::arg_producers(
                &mut self.tensormap,
                &observed,
                tag,
                &desc,
                |p, retain, kind| {
                    producers.push((p, retain));
                    if let Some(graph) = deps.as_mut() {
                        graph.edge(p, id, kind, retain);
                    }
                },
                |reader| war.note(reader, i),
            );
            writers.push(arg);
        }
        // A boundary write covering the entries of writers this task waits for supersedes
        // them (`infer::supersede`): consecutive replays that rewrite a graph input leave one
        // generation of its writers in the TensorMap, not one per replay still running.
        for arg in &writers {
            if let ArgTensor::Existing { tag, desc } = *arg
                && infer::writes(tag, &desc)
            {
                let waits_for = |p: TaskId| p == id || producers.iter().any(|&(q, _)| q == p);
                infer::supersede(&mut self.tensormap, &observed, &desc, waits_for);
            }
        }
        self.register_entries(id, &writers)
    }

    /// Verify mode: full inference over every argument, compared with the recording.
    fn verified_producers(
        &mut self,
        st: &Replayed<'_>,
        k: u32,
        id: TaskId,
        tensors: &ArgTensors,
    ) -> OrchResult<Vec<(TaskId, bool)>> {
        let t = &st.graph.tasks[k as usize];
        let index = st.index.as_ref().expect("verify mode");
        let observed = self.observed;
        let mut inferred: Vec<(TaskId, bool, usize)> = Vec::new();
        for (i, arg) in tensors.iter().enumerate() {
            if let ArgTensor::Existing { tag, desc } = *arg {
                let (deps, boundary) = (&mut self.deps, t.args[i].boundary);
                let war = &mut self.war;
                infer::arg_producers(
                    &mut self.tensormap,
                    &observed,
                    tag,
                    &desc,
                    |p, retain, kind| {
                        inferred.push((p, retain, i));
                        // As on the fast path, the dump has what boundary lookups find.
                        if let (Some(graph), true) = (deps.as_mut(), boundary) {
                            graph.edge(p, id, kind, retain);
                        }
                    },
                    |reader| war.note(reader, i),
                );
            }
        }
        self.register_entries(id, tensors)?;
        let recorded = |j: u32| t.edges.iter().any(|e: &RecordedEdge| e.from == j);
        let mut problem = None;
        for &(p, _, i) in &inferred {
            if p == id || t.args[i].boundary {
                // A boundary argument is looked up at replay as here: nothing to compare.
                continue;
            }
            // A stale TensorMap entry of a graph task on heap its buffer's owner gave back
            // (retired) can be found for a new buffer at the same address: that task never
            // wrote this argument's buffer, and the edge orders nothing.
            let wrote_this_buffer = |j: u32| {
                let origin = t.args[i].origin;
                st.graph.tasks[j as usize].args.iter().any(|a| {
                    a.origin == origin
                        && matches!(a.arg, ArgTensor::Existing { tag, desc } if infer::writes(tag, &desc))
                })
            };
            match index.get(&p) {
                Some(&j) if !recorded(j) && wrote_this_buffer(j) => {
                    problem = Some(format!(
                        "inference found edge task {j} → task {k} (argument {i}), which the recording lacks"
                    ));
                }
                None if !self.completed(p) => {
                    problem = Some(format!(
                        "argument {i} of task {k} stays inside the graph, but inference found the running task {p} outside it"
                    ));
                }
                _ => {}
            }
        }
        for e in t.edges.iter().filter(|e| e.wirable) {
            let p = st.ids[e.from as usize];
            let explicit_only = e.kinds().all(|kind| kind == EdgeKind::Explicit);
            let retired = p.local() < observed[usize::from(p.ring())];
            if !explicit_only && !retired && !inferred.iter().any(|&(q, _, _)| q == p) {
                problem = Some(format!(
                    "the recording has edge task {} → task {k}, which inference did not find",
                    e.from
                ));
            }
        }
        if let Some(problem) = problem {
            let mut e = ChipError::new(
                ErrorCode::InternalError,
                Detector::Immediate,
                format!("replay verify of graph {:?}: {problem}", st.graph.name),
            );
            e.task = Some(id);
            return Err(self.fail(e));
        }
        let mut producers = self.wired_producers(st, t);
        producers.extend(inferred.iter().map(|&(p, retain, _)| (p, retain)));
        dedup_producers(&mut producers, id);
        Ok(producers)
    }

    /// The producers the recording wires for `t`, as this replay's ids, in the recycled list.
    fn wired_producers(&mut self, st: &Replayed<'_>, t: &RecordedTask) -> Vec<(TaskId, bool)> {
        let mut producers = self.spare_lists.pop().unwrap_or_default();
        producers.clear();
        let wired = t
            .wiring
            .iter()
            .map(|&(p, retain)| (st.ids[p as usize], retain));
        producers.extend(wired);
        producers
    }

    /// `p` has completed (or retired): an edge to it orders nothing.
    fn completed(&self, p: TaskId) -> bool {
        p.local() < self.observed[usize::from(p.ring())]
            || self.run.lock_graph_as_offerer().producer_state(p) != ProducerState::Pending
    }
}
