//! A replay run as one task (`engine/fused.rs`): the orchestrator's side. The graph's tasks
//! get one heap allocation, the boundary goes through the TensorMap as task by task (every
//! lookup and registration made as the one fused task), and one task is published.

use std::sync::Arc;

use pto_types::WarCheck;

use crate::engine::TaskPayload;
use crate::engine::fused::{Buffers, FusedPlan, FusedRun};
use crate::engine::graph::NewTask;
use crate::error::OrchResult;
use crate::kernel::BoundTensor;
use crate::replay::{GraphInner, Origin, RecordedGraph};
use crate::tensor::TensorDesc;

use super::replay::Replayed;
use super::{ArgTensor, ArgTensors, OrchCore, dedup_producers};

impl OrchCore {
    /// The plan to replay `graph` fused with, when this replay may run so:
    /// - not in verify mode, which infers every task's edges;
    /// - not while a DAG dump, a trace or scope stats show each task with its own id;
    /// - not when write-after-read inside the graph is the runtime's to order or check
    ///   (`track_war` or `war_check` on) and a plain read inside it is not ordered before a
    ///   later overwrite by the graph's edges (`FusedPlan::war_ordered`; task by task, the
    ///   overwrite waits for the tracked reader, or the check looks at it, as a submit's);
    /// - only while the graph's boundary arguments take at most half the TensorMap;
    /// - only when the caller's ring heap holds the graph's whole heap (one allocation, for
    ///   as long as the fused task lives) beside what the open scopes pin, with the same
    ///   slack for the wrap the upfront check asks of a task-by-task replay.
    ///
    /// Otherwise the replay runs task by task, which the upfront check has just shown fits.
    pub(super) fn fusable<'g>(&self, graph: &'g RecordedGraph) -> Option<&'g Arc<FusedPlan>> {
        let inner = &*graph.inner;
        let plan = inner.fused.as_ref()?;
        // Task by task, a plain read of a graph input that a later graph task overwrites is a
        // tracked reader under `track_war` (its writer waits for it) and a checked one under
        // `war_check`; fused, only the graph's own edges order the two.
        let war_matters = self.settings.war_check != WarCheck::Off || self.settings.war.track_all;
        let war_inside = war_matters && !plan.war_ordered;
        // Every boundary entry stays registered under the one task until it retires, where
        // task by task the earlier tasks' entries could be cleaned up before the later ones
        // register: fused only while they take at most half the TensorMap.
        let entries_fit = plan.boundary_args <= self.tensormap.capacity() / 2;
        let observed =
            self.deps.is_some() || self.run.trace.is_some() || self.scope_stats.is_some();
        let ring = self.scopes.last().expect("root scope").ring;
        let pinned = self.pinned_heap(ring);
        let fits =
            pinned.saturating_add(plan.heap_bytes.saturating_mul(2)) <= self.sizing.heap(ring);
        (!graph.verifies() && !observed && !war_inside && fits && entries_fit).then_some(plan)
    }

    /// Submits `graph` as one task running `plan`, its inputs bound to `bound`.
    pub(super) fn replay_fused(
        &mut self,
        graph: &GraphInner,
        plan: &Arc<FusedPlan>,
        bound: &[TensorDesc],
    ) -> OrchResult<Vec<TensorDesc>> {
        let (id, offset) = self.admit_and_allocate(plan.heap_bytes)?;
        let ring = usize::from(id.ring());
        // A fused task is a whole graph, so the batch of retired ids `sync_ring` waits for
        // would leave that many graphs' boundary entries to every lookup of the input: their
        // retired entries go at once.
        self.tensormap.cleanup_ring(id.ring(), self.observed[ring]);
        let base = self.memory.heap_device_base + self.heap_bases[ring] + offset;
        let st = Replayed {
            graph,
            bound,
            ids: vec![id; graph.tasks.len()],
            bases: plan.heap_offsets.iter().map(|o| base + o).collect(),
            index: None,
        };
        let mut producers = self.spare_lists.pop().unwrap_or_default();
        producers.clear();
        let mut payload = self.spare_for_fused();
        let old = payload
            .as_mut()
            .and_then(Arc::get_mut)
            .and_then(|p| p.fused.take())
            .and_then(Arc::into_inner);
        let memory = &self.memory;
        let mut inputs = bound.iter().map(|desc| BoundTensor {
            desc: *desc,
            base_ptr: memory.buffer_ptr(desc),
            writable: false,
        });
        let buffers = Buffers {
            heap: base,
            heap_host: memory.heap_ptr_at(base),
            inputs: &mut inputs,
        };
        let mut run = FusedRun::start(
            old,
            Arc::clone(plan),
            Arc::clone(&graph.name),
            self.chip.spin,
            buffers,
        );
        // Nodes bind their own tensors as they run; here only what binding fills, and the
        // boundary, which goes through the TensorMap as the one fused task.
        let mut created: Vec<TensorDesc> = Vec::new();
        let mut unbound: Vec<BoundTensor> = Vec::new();
        // With the write-after-read check off, the boundary goes through the TensorMap as the
        // plan's merged runs (`FusedPlan::boundary`); with it on, argument by argument, so
        // that a hazard names its task and argument.
        let merged = self.settings.war_check == WarCheck::Off;
        for (k, t) in graph.tasks.iter().enumerate() {
            let eager = plan.eager[k];
            let boundary = t.boundary && !t.alloc && !merged;
            if !(eager || boundary) {
                continue;
            }
            let args = t.args.iter().map(|a| st.arg(a));
            if eager {
                created.clear();
                unbound.clear();
                let bind = |b| unbound.push(b);
                self.bind_into(id, st.bases[k], args.clone(), bind, &mut created);
            }
            if boundary {
                let tensors: ArgTensors = args.collect();
                self.boundary_lookups(t, id, &tensors, &mut producers)?;
                self.check_war(id, &t.kernels, &tensors, &producers)?;
            }
        }
        if merged {
            let runs = plan.boundary.iter().enumerate().map(|(i, b)| {
                let desc = st.rebase(&b.desc, b.origin);
                (i, ArgTensor::Existing { tag: b.tag, desc })
            });
            self.infer_boundary(id, runs, &mut producers)?;
        }
        run.arm();
        dedup_producers(&mut producers, id);
        // A block per thread that runs kernels: the executors, and the orchestrator's
        // stand-in when the orchestrator is one of the chip's workers (`help.rs`, H5).
        let workers = self.chip.executors + usize::from(self.chip.orchestrator_is_worker);
        let blocks = workers.clamp(1, plan.nodes()) as u32;
        let mut payload = TaskPayload::fresh(payload, plan.shape, plan.nominal, &[], blocks, false);
        Arc::get_mut(&mut payload)
            .expect("a fresh payload is not shared")
            .fused = Some(Arc::new(run));
        self.fused_extra += graph.tasks.len() as u64 - 1;
        self.publish(
            NewTask {
                id,
                payload,
                producers,
                completed: false,
            },
            true,
        )?;
        Ok(graph
            .outputs
            .iter()
            .map(|o| st.rebase(&o.desc, Origin::Task(o.task)))
            .collect())
    }
}
