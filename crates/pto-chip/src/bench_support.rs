//! Thin public wrappers over crate-private hot paths, for the criterion benches in `benches/`
//! only (cargo feature `bench-internals`, off by default). Not an API: nothing here is stable,
//! and the runtime never uses this module. Each wrapper forwards to the real code path
//! unchanged, so a bench measures what the engine runs.

use std::sync::Arc;

use parking_lot::Mutex;
use pto_types::RING_COUNT;
use pto_types::wait::SpinPolicy;

use crate::engine::graph::{Effects, Graph, NewTask};
use crate::engine::run::RunShared;
use crate::engine::{Assignment, ChipShared, Completion, Shape, TaskPayload, Work};
use crate::kernel::{CoreType, KernelCtx, KernelDef, KernelRef};
use crate::task_id::TaskId;
use crate::tensor::TensorDesc;

/// `ring::TaskRing`: task window plus heap ring of one scope-depth ring.
pub struct TaskRing(crate::ring::TaskRing);

impl TaskRing {
    /// Window `window` (a power of two, at least 4) and `heap` bytes (a multiple of 64).
    pub fn new(window: u32, heap: u64) -> TaskRing {
        TaskRing(crate::ring::TaskRing::new(window, heap))
    }

    /// `try_alloc(bytes)`: on success the task's local id and packed heap end.
    pub fn try_alloc(&mut self, bytes: u64) -> Option<(u64, u64)> {
        self.0.try_alloc(bytes).ok().map(|a| (a.id, a.end))
    }

    /// `retire_to(last_alive, prev_end)`.
    pub fn retire_to(&mut self, last_alive: u64, prev_end: u64) {
        self.0.retire_to(last_alive, prev_end);
    }
}

/// `ring::DepPool<u64>`: a dep-list / spill pool.
pub struct DepPool(crate::ring::DepPool<u64>);

impl DepPool {
    pub fn new(capacity: u32) -> DepPool {
        DepPool(crate::ring::DepPool::new(capacity))
    }

    /// `try_alloc_n(n)`: the first linear position of the run.
    pub fn try_alloc_n(&mut self, n: u64) -> Option<u64> {
        self.0.try_alloc_n(n).ok()
    }

    /// `top()`: the mark a task records at wiring.
    pub fn top(&self) -> u64 {
        self.0.top()
    }

    /// `advance_tail(mark)`.
    pub fn advance_tail(&mut self, mark: u64) {
        self.0.advance_tail(mark);
    }
}

/// Handle of a chip TensorMap entry.
#[derive(Clone, Copy, Debug)]
pub struct EntryId(crate::tensormap::EntryId);

/// `tensormap::TensorMap`: the chip's orchestrator-private TensorMap (§3.7).
pub struct TensorMap(crate::tensormap::TensorMap);

impl TensorMap {
    /// `capacity` pool entries, `buckets` chains (a power of two), per-ring windows.
    pub fn new(capacity: usize, buckets: usize, windows: [u64; RING_COUNT]) -> TensorMap {
        TensorMap(crate::tensormap::TensorMap::new(capacity, buckets, windows))
    }

    /// `insert(producer, tensor)` (submit step 10); `None` when the pool is full.
    pub fn insert(&mut self, producer: TaskId, tensor: TensorDesc) -> Option<EntryId> {
        self.0.insert(producer, tensor).ok().map(EntryId)
    }

    /// `remove(entry)`.
    pub fn remove(&mut self, entry: EntryId) {
        self.0.remove(entry.0);
    }

    /// `lookup(probe, last_alive, ..)` keeping every hit (submit step 8 for an input); returns
    /// the number of hits.
    pub fn lookup(&mut self, probe: &TensorDesc, last_alive: &[u64; RING_COUNT]) -> usize {
        let mut hits = 0;
        self.0.lookup(probe, last_alive, |_| {
            hits += 1;
            crate::tensormap::Visit::Keep
        });
        hits
    }

    /// Entries in use.
    pub fn live_count(&self) -> usize {
        self.0.live_count()
    }
}

fn noop_kernel(_: &mut KernelCtx<'_>) {}

static NOOP_AIV: KernelDef = KernelDef::from_fn("bench.noop_aiv", CoreType::Aiv, noop_kernel);

/// The shared graph of one run (`engine::graph::Graph` behind `RunShared::graph`, the parking
/// mutex), driven through a ready task's whole life as the orchestrator and an executor do:
/// publish (no producers, so it is routed to the AIV ready lane), take (popped from the lane
/// onto an idle logical core), finish (the block's completion), end of scope (consumed, the
/// watermark moves). Each step takes the graph lock once per task, as the engine does. No
/// threads run; the kernels are not called.
pub struct ReadyLanes {
    chip: ChipShared,
    run: Arc<RunShared>,
    payload: Arc<TaskPayload>,
    next_local: u64,
    out: Vec<Assignment>,
}

impl ReadyLanes {
    /// A graph with window `window` on every ring and `clusters` clusters (3 cores each).
    pub fn new(window: u32, clusters: u32) -> ReadyLanes {
        let chip = ChipShared::new(
            clusters,
            (1, false),
            SpinPolicy::PARK_IMMEDIATELY,
            std::time::Duration::from_secs(10),
        );
        let graph = Graph::new([window; RING_COUNT], clusters, Default::default());
        // No executor threads: nothing to wake.
        let run = Arc::new(RunShared::new(0, graph, 0, std::sync::Weak::new()));
        let payload = Arc::new(TaskPayload {
            shape: Shape::Aiv,
            kernels: [None, Some(KernelRef::from_static(&NOOP_AIV)), None],
            tensors: Default::default(),
            scalars: Default::default(),
            block_num: 1,
            sync_start: false,
            fused: None,
        });
        ReadyLanes {
            chip,
            run,
            payload,
            next_local: 0,
            out: Vec::new(),
        }
    }

    /// Publishes `n` ready single-block AIV tasks on ring 0 (each pushed to the AIV lane), one
    /// lock hold per task; returns their ids.
    pub fn publish_ready(&mut self, n: usize, ids: &mut Vec<TaskId>) {
        for _ in 0..n {
            let id = TaskId::new(0, self.next_local);
            self.next_local += 1;
            let mut fx = Effects::default();
            self.run.lock_graph().publish(
                NewTask {
                    id,
                    payload: Arc::clone(&self.payload),
                    producers: Vec::new(),
                    completed: false,
                },
                &self.run,
                &mut fx,
            );
            debug_assert_eq!(fx.became_ready, 1);
            fx.wake = self.run.lock_graph().signal(&self.run);
            ids.push(id);
        }
    }

    /// Takes ready blocks onto idle cores until none is dispatchable, one lock hold per take
    /// (as executors do); returns the number of blocks taken.
    pub fn dispatch(&mut self) -> usize {
        self.out.clear();
        loop {
            let work = self.run.lock_graph().take(&self.run, &self.chip);
            match work {
                Some(Work::Single(a)) => self.out.push(a),
                Some(Work::Gang(parts)) => self.out.extend(parts),
                None => return self.out.len(),
            }
        }
    }

    /// The completions of the last dispatch, then the end of the tasks' scope: one lock hold
    /// per completion (as executors finish blocks) and one for the scope end.
    pub fn finish_dispatched(&mut self, ids: &mut Vec<TaskId>) {
        let mut fx = Effects::default();
        {
            for a in self.out.drain(..) {
                let mut graph = self.run.lock_graph();
                let c = Completion::unrun(&a);
                graph.finish(&c, &self.run, &mut fx);
            }
        }
        self.run.lock_graph().end_scope(ids, &self.run, &mut fx);
        ids.clear();
    }
}

/// The engine's ready-lane operation in isolation: a `VecDeque<TaskId>` behind a
/// `parking_lot::Mutex`, pushed at the back and popped at the front with one lock hold each
/// (as `Graph::route_ready` and `Graph::dispatch_lane` do, minus the rest of the graph).
pub struct LockedLane(Mutex<std::collections::VecDeque<TaskId>>);

impl LockedLane {
    pub fn with_capacity(n: usize) -> LockedLane {
        LockedLane(Mutex::new(std::collections::VecDeque::with_capacity(n)))
    }

    pub fn push(&self, id: TaskId) {
        self.0.lock().push_back(id);
    }

    pub fn pop(&self) -> Option<TaskId> {
        let mut lane = self.0.lock();
        let front = *lane.front()?;
        lane.pop_front();
        Some(front)
    }
}
