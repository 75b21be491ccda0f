//! The shared task graph of one run: slot records, fanout lists, ready queues and core
//! occupancy (CHIP_RUNTIME.md §3.1, §3.3–§3.5, §6.1–§6.3).
//!
//! Everything here is mutated only under [`super::run::RunShared::graph`]. Invariants:
//! - **I1** a slot holds the task whose id it records; a task's slot is not reused before the
//!   task is CONSUMED, because the orchestrator admits a task only when
//!   `(next_id - last_alive) + 1 < W` (the ring allocator) and `last_alive` passes only CONSUMED
//!   slots;
//! - **I2** a task is routed ready exactly once: when `fanin_done` reaches `fanin_total`, which
//!   counts the producers that were not COMPLETED when the task was wired (both under the lock);
//! - **I3** CONSUMED = COMPLETED, its scope ended, and every RETAIN pin taken by a consumer was
//!   released (a consumer releases its pins when it completes);
//! - **I4** the watermark `last_alive` of a ring only passes CONSUMED slots and never passes
//!   `next_id`; it is published to the orchestrator after every move.
//! - **I5** a logical core is busy from the [`Graph::take`] that claims it until the
//!   [`Graph::finish`] of the one part that ran on it; `idle_aic` / `idle_aiv` hold exactly the
//!   idle cores. Threads are not cores: any executor may run any core's part.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use pto_types::RING_COUNT;

use crate::task_id::TaskId;

use super::run::RunShared;
use super::{Assignment, ChipShared, Completion, Shape, TaskPayload, Work};

/// A kernel this long (ns) makes a parked executor worth waking for a single waiting block:
/// about the cost of the wake itself on the reference VM. Kernels that last returned sooner
/// are *quick*: a waiting orchestrator may run them itself (`orchestrator/help.rs`).
pub(crate) const LONG_KERNEL_NS: u64 = 20_000;

/// Below this (ns), a kernel is shorter than the lock and cache-line traffic a second thread
/// running kernels adds: one executor keeps up with the orchestrator, and more only slow it down
/// (`pto bench submit`, independent no-op tasks: 0.3-0.5 µs with one executor active, 1.0-1.6
/// µs with both). [`super::executor`] lets all but one executor go and takes batches when
/// kernels are this short, and the orchestrator does not help while it runs ahead
/// (`orchestrator/help.rs`, H7). Above it, two threads running kernels beat one: at stencil_1d
/// grains of 0.6-0.9 µs on two CPUs, efficiency rose from 0.34-0.39 to 0.40-0.55 (medians)
/// when this went from 1 µs to 300 ns, while at 0.2 µs one thread still beats two (0.21
/// against 0.05, inferred); `docs/decisions/chip-engine.md`, "Short kernels".
pub(crate) const SHORT_KERNEL_NS: u64 = 300;

/// Lifecycle of a slot's task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Waiting for producers, ready, or running.
    Pending,
    Completed,
    Consumed,
}

/// The shared record of one task.
pub(crate) struct Slot {
    pub(crate) id: TaskId,
    pub(crate) state: SlotState,
    /// The owning scope has not ended.
    pub(crate) scope_open: bool,
    /// RETAIN pins taken by consumers, and how many they released.
    pub(crate) pins: u32,
    pub(crate) pins_released: u32,
    /// Producers not COMPLETED at wiring, and how many of them completed since.
    pub(crate) fanin_total: u32,
    pub(crate) fanin_done: u32,
    /// Consumers waiting for this task (its fanout list).
    pub(crate) consumers: Vec<TaskId>,
    /// Producers this task pinned with RETAIN; released when this task completes.
    pub(crate) retained: Vec<TaskId>,
    pub(crate) payload: Option<Arc<TaskPayload>>,
    pub(crate) total_subtasks: u32,
    pub(crate) completed_subtasks: u32,
    /// Next block to dispatch.
    pub(crate) next_block: u32,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            id: TaskId::INVALID,
            state: SlotState::Consumed,
            scope_open: false,
            pins: 0,
            pins_released: 0,
            fanin_total: 0,
            fanin_done: 0,
            consumers: Vec::new(),
            retained: Vec::new(),
            payload: None,
            total_subtasks: 0,
            completed_subtasks: 0,
            next_block: 0,
        }
    }
}

/// The slots of one ring and its watermark.
pub(crate) struct RingSlots {
    /// Grown lazily up to the window, so untouched slots cost nothing.
    slots: Vec<Slot>,
    mask: u64,
    /// One past the newest published task.
    pub(crate) next_id: u64,
    /// Oldest task not CONSUMED.
    pub(crate) last_alive: u64,
}

/// Ready lanes (CHIP_RUNTIME.md §6.1). Dummy tasks never wait in a lane: they complete as soon as
/// they are ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    Aic,
    Aiv,
    Mix,
    AicSync,
    AivSync,
    MixSync,
}

impl Lane {
    fn of(shape: Shape, sync: bool) -> Lane {
        match (shape, sync) {
            (Shape::Aic, false) => Lane::Aic,
            (Shape::Aic, true) => Lane::AicSync,
            (Shape::Aiv, false) => Lane::Aiv,
            (Shape::Aiv, true) => Lane::AivSync,
            (Shape::Mix(_), false) => Lane::Mix,
            (Shape::Mix(_), true) => Lane::MixSync,
            (Shape::Dummy, _) => unreachable!("dummy tasks have no lane"),
        }
    }
}

/// What a fresh task needs to be published.
pub(crate) struct NewTask {
    pub(crate) id: TaskId,
    pub(crate) payload: Arc<TaskPayload>,
    /// Live producers (deduplicated), with whether this task pins them (RETAIN).
    pub(crate) producers: Vec<(TaskId, bool)>,
    /// The task is complete at publication (the hidden task of `alloc_tensors`).
    pub(crate) completed: bool,
}

/// Payloads of consumed tasks kept for reuse: enough for the tasks retiring between two
/// publications, not a window's worth of memory.
const SPARE_PAYLOADS: usize = 64;

/// What a publication gives back to the orchestrator for its next submit: no allocation per
/// task for the producer list, and none for the payload of a consumed task once no thread
/// shares it (its blocks dropped their references before they finished, so it usually is not
/// shared).
pub(crate) struct Recycled {
    pub(crate) producers: Vec<(TaskId, bool)>,
    pub(crate) payload: Option<Arc<TaskPayload>>,
}

/// What [`Graph::publish`] wired: the live edges (producers not gone) and, of those, the
/// producers still pending, as [`Graph::live_edges`] would have counted them just before.
pub(crate) struct Wired {
    pub(crate) edges: u64,
    pub(crate) pending: u64,
    pub(crate) recycled: Recycled,
}

/// A task an executor published for the orchestrator ([`Graph::publish_handed`]), for the
/// orchestrator to book in id order at its next hold of the graph lock: the dep-pool entries
/// it took, and what the publication gives back.
pub(crate) struct Handed {
    pub(crate) id: TaskId,
    /// Live edges (producers not gone) and, of those, producers still pending.
    pub(crate) edges: u64,
    pub(crate) pending: u64,
    /// `false`: the run had failed, and the task was dropped unpublished.
    pub(crate) published: bool,
    pub(crate) recycled: Recycled,
}

/// What a live producer looks like at wiring time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProducerState {
    /// Consumed (or its slot reused): no edge.
    Gone,
    Completed,
    Pending,
}

/// Whom new dispatchable work concerns ([`Graph::signal`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Signal {
    #[default]
    Nothing,
    /// Searching executors (they watch the run's work epoch).
    Searchers,
    /// Also a parked executor, if none is searching.
    Wake,
}

/// Side effects the caller must carry out after releasing the lock.
#[derive(Default)]
pub(crate) struct Effects {
    /// Set by the caller from [`Graph::signal`] at the end of its lock hold.
    pub(crate) wake: Signal,
    pub(crate) watermark_moved: bool,
    /// No block runs any more (set by the finishing thread under the lock): whoever waits must
    /// look, since nothing else may move.
    pub(crate) quiescent: bool,
    pub(crate) became_ready: u32,
    pub(crate) completed_tasks: u32,
}

pub(crate) struct Graph {
    rings: [RingSlots; RING_COUNT],
    lanes: [VecDeque<TaskId>; 6],
    core_busy: Vec<bool>,
    /// Idle cores, most recently used last (they are likely still spinning).
    idle_aic: Vec<u32>,
    idle_aiv: Vec<u32>,
    clusters: u32,
    /// Scratch work list of tasks to complete (dummy chains complete without recursion).
    to_complete: Vec<TaskId>,
    /// Tasks published (alloc tasks included), for the watchdog.
    pub(crate) published: u64,
    /// Blocks in the ready lanes not yet taken.
    ready_blocks: u64,
    /// Payloads of consumed tasks, for publications to give back ([`Recycled`]).
    spare_payloads: Vec<Arc<TaskPayload>>,
    /// Tasks the orchestrator handed off, taken from the run's inbox ([`Graph::publish_handed`]).
    inbox: VecDeque<NewTask>,
    /// Handed-off tasks published (or dropped) and not yet booked by the orchestrator.
    pub(crate) handed: Vec<Handed>,
}

/// The slot records of a finished run in which every published task was consumed, kept by
/// the chip for its next run ([`Graph::take_store`]): a chip that runs the same job again
/// writes its slots into memory it already touched, instead of faulting in and growing a new
/// vector of them per run (at window 262,144, a fifth of a run of no-op tasks was the kernel
/// mapping and zeroing pages). Every slot in it is CONSUMED, which is all
/// [`Graph::publish`] asks of a slot it reuses (I1). Ids restart at 0 in every run, and a
/// record is read only for an id this run published (or, through [`Graph::producer_state`],
/// between a ring's watermark and its next id), besides the one `publish` fills: no stale
/// record is seen. The records keep their fanout lists' capacity too.
#[derive(Default)]
pub(crate) struct SlotStore([Vec<Slot>; RING_COUNT]);

impl SlotStore {
    /// Slot records kept, over every ring.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }
}

impl Graph {
    /// A graph for one run. `store`: the slot records a finished run left ([`SlotStore`]).
    pub(crate) fn new(windows: [u32; RING_COUNT], clusters: u32, store: SlotStore) -> Graph {
        let mut stored = store.0.into_iter();
        Graph {
            rings: windows.map(|w| RingSlots {
                slots: stored.next().unwrap_or_default(),
                mask: u64::from(w) - 1,
                next_id: 0,
                last_alive: 0,
            }),
            lanes: Default::default(),
            core_busy: vec![false; 3 * clusters as usize],
            idle_aic: (0..clusters).rev().collect(),
            idle_aiv: (clusters..3 * clusters).rev().collect(),
            clusters,
            to_complete: Vec::new(),
            published: 0,
            ready_blocks: 0,
            spare_payloads: Vec::with_capacity(SPARE_PAYLOADS),
            inbox: VecDeque::new(),
            handed: Vec::new(),
        }
    }

    /// This run's slot records, for the chip's next run, if every task it published was
    /// consumed (each ring's watermark reached its next id, I4) and no block is out. The
    /// rings keep their ids and lose their records: every id reads as gone to
    /// [`Graph::producer_state`] from here on, and nothing else reads a record of a run that
    /// has no task left to take, finish or end.
    pub(crate) fn take_store(&mut self, run: &RunShared) -> Option<SlotStore> {
        let clean = self.rings.iter().all(|r| r.last_alive == r.next_id)
            && run.running.load(Ordering::SeqCst) == 0;
        clean.then(|| SlotStore(self.rings.each_mut().map(|r| std::mem::take(&mut r.slots))))
    }

    fn slot(&self, id: TaskId) -> &Slot {
        let ring = &self.rings[usize::from(id.ring())];
        &ring.slots[(id.local() & ring.mask) as usize]
    }

    fn slot_mut(&mut self, id: TaskId) -> &mut Slot {
        let ring = &mut self.rings[usize::from(id.ring())];
        &mut ring.slots[(id.local() & ring.mask) as usize]
    }

    /// The state of a would-be producer, by id (generation-checked).
    pub(crate) fn producer_state(&self, id: TaskId) -> ProducerState {
        let ring = &self.rings[usize::from(id.ring())];
        if id.local() < ring.last_alive || id.local() >= ring.next_id {
            return ProducerState::Gone;
        }
        let slot = self.slot(id);
        if slot.id != id {
            return ProducerState::Gone;
        }
        match slot.state {
            SlotState::Consumed => ProducerState::Gone,
            SlotState::Completed => ProducerState::Completed,
            SlotState::Pending => ProducerState::Pending,
        }
    }

    /// Whether `id` is live and not COMPLETED: waiting, ready or running.
    pub(crate) fn is_pending(&self, id: TaskId) -> bool {
        self.producer_state(id) == ProducerState::Pending
    }

    /// Whether one of `targets` is `from` or a pending descendant of it, visiting at most
    /// `budget` tasks (past that: `true`, so a caller never reports an order it could not rule
    /// out). The consumer lists of a pending task hold every consumer wired since it was
    /// published, and those are pending too (none completes before its producer), so the search
    /// over them finds every published descendant.
    pub(crate) fn reaches(&self, from: TaskId, targets: &[TaskId], budget: usize) -> bool {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![from];
        while let Some(id) = stack.pop() {
            if targets.contains(&id) {
                return true;
            }
            if !seen.insert(id) {
                continue;
            }
            if seen.len() > budget {
                return true;
            }
            if self.producer_state(id) == ProducerState::Pending {
                stack.extend(self.slot(id).consumers.iter().copied());
            }
        }
        false
    }

    /// `id (kernels)` and the tensors its payload binds, for messages.
    pub(crate) fn describe(&self, id: TaskId) -> String {
        let live = self.producer_state(id) != ProducerState::Gone;
        match live.then(|| self.slot(id).payload.as_ref()).flatten() {
            Some(p) => {
                let tensors: Vec<String> = p.tensors.iter().map(|t| t.desc.to_string()).collect();
                format!("{id} ({}) over [{}]", p.kernel_names(), tensors.join(", "))
            }
            _ => id.to_string(),
        }
    }

    /// Whether `id` no longer holds anyone back from its outputs: COMPLETED (or gone) and, with
    /// `released`, every RETAIN pin taken by its consumers released too.
    pub(crate) fn producer_done(&self, id: TaskId, released: bool) -> bool {
        match self.producer_state(id) {
            ProducerState::Gone => true,
            ProducerState::Pending => false,
            ProducerState::Completed => {
                !released || {
                    let slot = self.slot(id);
                    slot.pins_released == slot.pins
                }
            }
        }
    }

    /// The live edges of a task about to be published with `producers`, and how many of those
    /// producers are still pending (each takes a dep-list entry).
    pub(crate) fn live_edges(&self, producers: &[(TaskId, bool)]) -> (u64, u64) {
        let mut edges = 0;
        let mut pending = 0;
        for &(p, _) in producers {
            match self.producer_state(p) {
                ProducerState::Gone => {}
                ProducerState::Completed => edges += 1,
                ProducerState::Pending => {
                    edges += 1;
                    pending += 1;
                }
            }
        }
        (edges, pending)
    }

    /// Publishes, in the order they were handed off, the tasks the orchestrator put in the
    /// run's inbox while another thread held this lock or while every executor was busy
    /// (`RunShared::inbox`; rules HO1-HO4 of `pto_types::wait::Handoff`), and records each in
    /// [`Graph::handed`]. The orchestrator
    /// reserved the dep-pool entries of every producer before it handed a task off, so none
    /// waits here. On a failed run the tasks are dropped, not published.
    pub(crate) fn publish_handed(&mut self, run: &RunShared, fx: &mut Effects) {
        let mut inbox = std::mem::take(&mut self.inbox);
        run.inbox.take(&mut inbox);
        let cancelled = run.is_cancelled();
        while let Some(task) = inbox.pop_front() {
            let id = task.id;
            let wired = if cancelled {
                let recycled = Recycled {
                    producers: task.producers,
                    payload: None,
                };
                Wired {
                    edges: 0,
                    pending: 0,
                    recycled,
                }
            } else {
                self.publish(task, run, fx)
            };
            self.handed.push(Handed {
                id,
                edges: wired.edges,
                pending: wired.pending,
                published: !cancelled,
                recycled: wired.recycled,
            });
        }
        self.inbox = inbox;
    }

    /// Publishes a task: records it, pins and wires its producers, and routes it if ready.
    /// The caller checked every producer's state under this same lock hold and reserved the
    /// dep-list entries for the pending ones (or room for every producer). Returns what it
    /// wired, the producer list's buffer and the payload of the slot's previous task, for
    /// reuse ([`Recycled`]).
    pub(crate) fn publish(&mut self, task: NewTask, run: &RunShared, fx: &mut Effects) -> Wired {
        let id = task.id;
        let ring = &mut self.rings[usize::from(id.ring())];
        debug_assert_eq!(id.local(), ring.next_id, "tasks are published in id order");
        let index = (id.local() & ring.mask) as usize;
        if index == ring.slots.len() {
            ring.slots.push(Slot::empty());
        }
        ring.next_id = id.local() + 1;
        self.published += 1;
        let mut fanin_total = 0;
        let mut edges = 0;
        let mut retained = std::mem::take(&mut self.slot_mut(id).retained);
        retained.clear();
        for &(producer, retain) in &task.producers {
            let state = self.producer_state(producer);
            if state == ProducerState::Gone {
                continue;
            }
            edges += 1;
            let p = self.slot_mut(producer);
            if retain {
                p.pins += 1;
                retained.push(producer);
            }
            if state == ProducerState::Pending {
                p.consumers.push(id);
                fanin_total += 1;
            }
        }
        let shape = task.payload.shape;
        let total_subtasks = task.payload.block_num * shape.cores_per_block();
        let slot = self.slot_mut(id);
        debug_assert_eq!(slot.state, SlotState::Consumed, "I1: the slot is free");
        slot.id = id;
        slot.state = SlotState::Pending;
        slot.scope_open = true;
        slot.pins = 0;
        slot.pins_released = 0;
        slot.fanin_total = fanin_total;
        slot.fanin_done = 0;
        slot.consumers.clear();
        slot.retained = retained;
        slot.total_subtasks = total_subtasks;
        slot.completed_subtasks = 0;
        slot.next_block = 0;
        slot.payload = Some(task.payload);
        let payload = self.spare_payloads.pop();
        if task.completed {
            self.complete(id, run, fx);
        } else if fanin_total == 0 {
            self.route_ready(id, run, fx);
        }
        Wired {
            edges,
            pending: u64::from(fanin_total),
            recycled: Recycled {
                producers: task.producers,
                payload,
            },
        }
    }

    /// Routes a task whose producers have all completed (I2).
    fn route_ready(&mut self, id: TaskId, run: &RunShared, fx: &mut Effects) {
        let slot = self.slot(id);
        let payload = slot.payload.as_ref().expect("a ready task has a payload");
        if payload.shape == Shape::Dummy {
            self.complete(id, run, fx);
            return;
        }
        let lane = Lane::of(payload.shape, payload.sync_start);
        self.ready_blocks += u64::from(payload.block_num);
        self.lanes[lane as usize].push_back(id);
        fx.became_ready += 1;
    }

    /// Completes a task and everything that completes with it (dummy consumers), without
    /// recursion.
    pub(crate) fn complete(&mut self, id: TaskId, run: &RunShared, fx: &mut Effects) {
        debug_assert!(self.to_complete.is_empty());
        self.to_complete.push(id);
        while let Some(task) = self.to_complete.pop() {
            self.complete_one(task, run, fx);
        }
    }

    fn complete_one(&mut self, id: TaskId, run: &RunShared, fx: &mut Effects) {
        let slot = self.slot_mut(id);
        debug_assert_eq!(slot.state, SlotState::Pending);
        slot.state = SlotState::Completed;
        let mut consumers = std::mem::take(&mut slot.consumers);
        let mut retained = std::mem::take(&mut slot.retained);
        fx.completed_tasks += 1;
        run.completed.fetch_add(1, Ordering::AcqRel);
        for &consumer in &consumers {
            let c = self.slot_mut(consumer);
            c.fanin_done += 1;
            if c.fanin_done == c.fanin_total {
                let dummy = c.payload.as_ref().is_some_and(|p| p.shape == Shape::Dummy);
                if dummy {
                    self.to_complete.push(consumer);
                } else {
                    self.route_ready(consumer, run, fx);
                }
            }
        }
        for &producer in &retained {
            let p = self.slot_mut(producer);
            p.pins_released += 1;
            self.consumed_check(producer, run, fx);
        }
        consumers.clear();
        retained.clear();
        let slot = self.slot_mut(id);
        slot.consumers = consumers;
        slot.retained = retained;
        self.consumed_check(id, run, fx);
    }

    /// Ends a scope: drops the scope reference of each of its tasks.
    pub(crate) fn end_scope(&mut self, tasks: &[TaskId], run: &RunShared, fx: &mut Effects) {
        for &id in tasks {
            let slot = self.slot_mut(id);
            if slot.id != id {
                continue;
            }
            slot.scope_open = false;
            self.consumed_check(id, run, fx);
        }
    }

    /// I3: COMPLETED, scope ended, pins released → CONSUMED; then try to advance (I4).
    fn consumed_check(&mut self, id: TaskId, run: &RunShared, fx: &mut Effects) {
        let slot = self.slot_mut(id);
        if slot.id != id
            || slot.state != SlotState::Completed
            || slot.scope_open
            || slot.pins_released != slot.pins
        {
            return;
        }
        slot.state = SlotState::Consumed;
        // Kept for a later publication to give back to the orchestrator ([`Recycled`]); past
        // `SPARE_PAYLOADS` it is freed, so a run's payload memory follows its live tasks.
        if let Some(payload) = slot.payload.take()
            && self.spare_payloads.len() < SPARE_PAYLOADS
        {
            self.spare_payloads.push(payload);
        }
        let ring_index = usize::from(id.ring());
        let ring = &mut self.rings[ring_index];
        if ring.last_alive != id.local() {
            return;
        }
        while ring.last_alive < ring.next_id {
            let s = &ring.slots[(ring.last_alive & ring.mask) as usize];
            if s.state != SlotState::Consumed || s.id.local() != ring.last_alive {
                break;
            }
            ring.last_alive += 1;
        }
        // SeqCst: pairs with the orchestrator's wake threshold (`RunShared::wants_ring_wake`).
        run.last_alive[ring_index].store(ring.last_alive, Ordering::SeqCst);
        run.bump_progress();
        fx.watermark_moved = true;
    }

    /// Handles one finished block (or MIX part) reported by a core.
    pub(crate) fn finish(&mut self, c: &Completion, run: &RunShared, fx: &mut Effects) {
        self.release_core(c.core);
        let slot = self.slot_mut(c.task);
        slot.completed_subtasks += 1;
        if slot.completed_subtasks == slot.total_subtasks {
            self.complete(c.task, run, fx);
        }
    }

    fn release_core(&mut self, core: u32) {
        let index = core as usize;
        debug_assert!(self.core_busy[index]);
        self.core_busy[index] = false;
        if core < self.clusters {
            self.idle_aic.push(core);
        } else {
            self.idle_aiv.push(core);
        }
    }

    fn claim_core(&mut self, core: u32) {
        self.core_busy[core as usize] = true;
        let list = if core < self.clusters {
            &mut self.idle_aic
        } else {
            &mut self.idle_aiv
        };
        if let Some(pos) = list.iter().rposition(|&c| c == core) {
            list.swap_remove(pos);
        }
    }

    /// The lane a thread would take from now, if any (CHIP_RUNTIME.md §6.2–§6.3). Tier 0:
    /// sync-start cohorts, admitted only when all their units are idle at once; a cohort that
    /// waits holds back tier-1 work of the core kinds it needs. Tier 1: MIX, then AIC, then AIV.
    fn pick(&self) -> Option<Lane> {
        let mut hold_aic = false;
        let mut hold_aiv = false;
        let gated = [Lane::MixSync, Lane::AicSync, Lane::AivSync];
        // Most runs have no sync-start cohort: one look at the three lanes, not the loop.
        if gated.iter().any(|&l| !self.lanes[l as usize].is_empty()) {
            for lane in gated {
                let Some(&id) = self.lanes[lane as usize].front() else {
                    continue;
                };
                let payload = self.slot(id).payload.as_ref().expect("payload");
                let blocks = payload.block_num as usize;
                let admitted = match payload.shape {
                    Shape::Aic => self.idle_aic.len() >= blocks,
                    Shape::Aiv => self.idle_aiv.len() >= blocks,
                    Shape::Mix(mask) => self.idle_clusters(mask).count() >= blocks,
                    Shape::Dummy => unreachable!("dummy tasks have no lane"),
                };
                if admitted {
                    return Some(lane);
                }
                let (aic, aiv) = shape_uses(payload.shape);
                hold_aic |= aic;
                hold_aiv |= aiv;
            }
        }
        let has = |lane: Lane| !self.lanes[lane as usize].is_empty();
        if !hold_aic && !hold_aiv && has(Lane::Mix) {
            let id = self.lanes[Lane::Mix as usize][0];
            if let Some(Shape::Mix(mask)) = self.slot(id).payload.as_ref().map(|p| p.shape)
                && self.idle_clusters(mask).next().is_some()
            {
                return Some(Lane::Mix);
            }
        }
        if !hold_aic && has(Lane::Aic) && !self.idle_aic.is_empty() {
            return Some(Lane::Aic);
        }
        if !hold_aiv && has(Lane::Aiv) && !self.idle_aiv.is_empty() {
            return Some(Lane::Aiv);
        }
        None
    }

    /// Whether a thread could take work now, and whether a parked executor should be woken
    /// for it: when no block runs whose thread comes back for more (nobody else would come
    /// back for it; the stand-in's block does not count, `orchestrator/help.rs` H5), when
    /// kernels are long or not measured yet (no kernel of the run has finished: the one
    /// running may be long, and the work would wait for all of it), when at least two blocks
    /// wait behind kernels that are not very short, or when the work is a fused replay's
    /// block (a whole graph) — except helpable work while the orchestrator is not parked and
    /// kernels are quick (`orchestrator/help.rs`, H2). Otherwise the work is left to the
    /// thread running a block — a wake costs the waker a system call, and a
    /// second executor on short kernels (`SHORT_KERNEL_NS`) costs more than it adds
    /// (`docs/decisions/chip-engine.md`).
    pub(crate) fn signal(&self, run: &RunShared) -> Signal {
        self.signal_searching(run, false)
    }

    /// [`Graph::signal`] for a caller that looks for work itself right after (`searcher`): it
    /// counts as a running block that will come back.
    pub(crate) fn signal_searching(&self, run: &RunShared, searcher: bool) -> Signal {
        if run.is_cancelled() {
            return Signal::Nothing;
        }
        let Some(lane) = self.pick() else {
            return Signal::Nothing;
        };
        let coming_back = run
            .running
            .load(Ordering::Acquire)
            .saturating_sub(run.stand_in_running.load(Ordering::Acquire));
        let running = coming_back + u64::from(searcher);
        let kernel_ns = run.last_kernel_ns.load(Ordering::Relaxed);
        if running > 0
            && kernel_ns < LONG_KERNEL_NS
            && run.orchestrator_helps()
            && self.helpable(lane)
        {
            // A running block's thread comes back for it (kernels are quick), and so does the
            // orchestrator before it parks (`orchestrator/help.rs`, H2): a woken executor
            // would be one thread more than the host has CPUs for.
            return Signal::Searchers;
        }
        let wake = running == 0
            || kernel_ns == 0
            || kernel_ns >= LONG_KERNEL_NS
            || (kernel_ns >= SHORT_KERNEL_NS && self.ready_blocks >= 2)
            || self.fused_first(lane);
        if wake {
            Signal::Wake
        } else {
            Signal::Searchers
        }
    }

    /// Takes the next unit of work, claiming its logical core(s): one block, a whole
    /// sync-start cohort, or the parts of one MIX block. Nothing once the run failed.
    pub(crate) fn take(&mut self, run: &Arc<RunShared>, chip: &ChipShared) -> Option<Work> {
        if run.is_cancelled() {
            return None;
        }
        let lane = self.pick()?;
        let id = *self.lanes[lane as usize]
            .front()
            .expect("picked lanes are not empty");
        // Out of the slot while its blocks are assigned (and put back): a reference count
        // changes only for the parts handed out.
        let payload = self.slot_mut(id).payload.take().expect("payload");
        let mut parts = Vec::new();
        if matches!(lane, Lane::MixSync | Lane::AicSync | Lane::AivSync) {
            for _ in 0..payload.block_num {
                self.assign_block(id, &payload, run, chip, &mut parts);
            }
        } else {
            self.assign_block(id, &payload, run, chip, &mut parts);
        }
        if self.slot(id).next_block == payload.block_num {
            self.lanes[lane as usize].pop_front();
        }
        self.slot_mut(id).payload = Some(payload);
        if parts.len() == 1 {
            parts.pop().map(Work::Single)
        } else {
            Some(Work::Gang(parts))
        }
    }

    /// Takes one block of the next AIC or AIV task (of any block count), for the
    /// orchestrator's stand-in (`orchestrator/help.rs`, H5); nothing when the next unit is a
    /// gang (a sync-start cohort, a MIX block), which needs a thread that comes back.
    pub(crate) fn take_block(
        &mut self,
        run: &Arc<RunShared>,
        chip: &ChipShared,
    ) -> Option<Assignment> {
        if !matches!(self.pick()?, Lane::Aic | Lane::Aiv) {
            return None;
        }
        match self.take(run, chip)? {
            Work::Single(a) => Some(a),
            Work::Gang(_) => unreachable!("an AIC or AIV lane hands out one block at a time"),
        }
    }

    /// Takes a block of the next task when it is a fused replay whose kernels have all
    /// returned before, for a waiting orchestrator that is one of the chip's workers to run
    /// at once (`orchestrator/help.rs`, H8).
    pub(crate) fn take_fused_block(
        &mut self,
        run: &Arc<RunShared>,
        chip: &ChipShared,
    ) -> Option<Assignment> {
        let lane = self
            .pick()
            .filter(|&l| matches!(l, Lane::Aic | Lane::Aiv))?;
        let id = *self.lanes[lane as usize].front()?;
        let payload = self.slot(id).payload.as_ref().expect("payload");
        if !payload.fused.as_ref().is_some_and(|f| f.has_returned()) {
            return None;
        }
        self.take_block(run, chip)
    }

    /// Takes one more block for a batch of short kernels: only a one-block AIC or AIV task, so
    /// that an unstarted one can be given back whole ([`Graph::give_back`]).
    pub(crate) fn take_one_block(
        &mut self,
        run: &Arc<RunShared>,
        chip: &ChipShared,
    ) -> Option<Assignment> {
        self.take_one_block_if(run, chip, |_| true)
    }

    /// [`Graph::take_one_block`] for the waiting orchestrator: only helpable work
    /// ([`Graph::helpable`]), or with `any_returned` any one-block AIC or AIV task whose
    /// kernels have all returned before (`orchestrator/help.rs`, H1).
    pub(crate) fn take_helpable(
        &mut self,
        run: &Arc<RunShared>,
        chip: &ChipShared,
        any_returned: bool,
    ) -> Option<Assignment> {
        if any_returned {
            self.take_one_block_if(run, chip, has_returned)
        } else {
            self.take_one_block_if(run, chip, is_quick)
        }
    }

    /// [`Graph::take_helpable`] (quick work only) while more AIC and AIV tasks are ready than
    /// `keep` threads could take: the orchestrator that runs ahead takes surplus work only
    /// (`orchestrator/help.rs`, H7), never the one task an executor is about to come back
    /// for. (Gangs are not counted: this thread could not take one anyway.)
    pub(crate) fn take_surplus(
        &mut self,
        run: &Arc<RunShared>,
        chip: &ChipShared,
        keep: u64,
    ) -> Option<Assignment> {
        let ready = self.lanes[Lane::Aic as usize].len() + self.lanes[Lane::Aiv as usize].len();
        if ready as u64 <= keep {
            return None;
        }
        self.take_helpable(run, chip, false)
    }

    /// Whether the next task of `lane` is a fused replay: each of its blocks runs a whole
    /// graph, so a block left to a running thread's return would wait for all of that
    /// thread's graph, however quick the graph's kernels (`engine/fused.rs`).
    fn fused_first(&self, lane: Lane) -> bool {
        self.lanes[lane as usize].front().is_some_and(|&id| {
            let payload = self.slot(id).payload.as_ref().expect("payload");
            payload.fused.is_some()
        })
    }

    /// Whether the work a thread would take next is *helpable*: a one-block AIC or AIV task
    /// whose kernel returned within [`LONG_KERNEL_NS`] the last time it ran in this process.
    /// A waiting orchestrator runs such work itself (`orchestrator/help.rs`, H1).
    pub(crate) fn helpable(&self, lane: Lane) -> bool {
        matches!(lane, Lane::Aic | Lane::Aiv)
            && self.lanes[lane as usize].front().is_some_and(|&id| {
                let payload = self.slot(id).payload.as_ref().expect("payload");
                payload.is_one_block() && is_quick(payload)
            })
    }

    fn take_one_block_if(
        &mut self,
        run: &Arc<RunShared>,
        chip: &ChipShared,
        accept: impl Fn(&TaskPayload) -> bool,
    ) -> Option<Assignment> {
        if run.is_cancelled() {
            return None;
        }
        let lane = self
            .pick()
            .filter(|&l| matches!(l, Lane::Aic | Lane::Aiv))?;
        let id = *self.lanes[lane as usize].front()?;
        let payload = self.slot(id).payload.as_ref().expect("payload");
        // A fused replay's block runs a whole graph: never a batch's extra block, nor quick
        // work for a waiting orchestrator (H8 takes it apart).
        if payload.block_num != 1 || payload.fused.is_some() || !accept(payload) {
            return None;
        }
        let payload = self.slot_mut(id).payload.take().expect("payload");
        let mut parts = Vec::with_capacity(1);
        self.assign_block(id, &payload, run, chip, &mut parts);
        self.slot_mut(id).payload = Some(payload);
        self.lanes[lane as usize].pop_front();
        parts.pop()
    }

    /// Undoes [`Graph::take_one_block`] for a block that was never started: the task goes back
    /// to the front of its lane and the core is idle again.
    pub(crate) fn give_back(&mut self, a: Assignment, run: &RunShared) {
        let slot = self.slot_mut(a.task);
        debug_assert_eq!((slot.next_block, slot.completed_subtasks), (1, 0));
        slot.next_block = 0;
        self.ready_blocks += 1;
        self.release_core(a.core);
        let shape = a.payload.shape;
        self.lanes[Lane::of(shape, false) as usize].push_front(a.task);
        run.running.fetch_sub(1, Ordering::AcqRel);
    }

    /// Clusters whose cores in `mask` are all idle.
    fn idle_clusters(&self, mask: u8) -> impl Iterator<Item = u32> + '_ {
        (0..self.clusters).filter(move |&k| {
            cluster_cores(self.clusters, k, mask)
                .iter()
                .all(|&(core, _, _)| !self.core_busy[core as usize])
        })
    }

    /// Claims idle core(s) for the next block of `id` and appends its part(s) to `out`. A unit
    /// must be available.
    fn assign_block(
        &mut self,
        id: TaskId,
        payload: &Arc<TaskPayload>,
        run: &Arc<RunShared>,
        chip: &ChipShared,
        out: &mut Vec<Assignment>,
    ) {
        let slot = self.slot_mut(id);
        let block_idx = slot.next_block;
        slot.next_block += 1;
        self.ready_blocks -= 1;
        let dispatch_us = if run.trace_level > 0 {
            run.micros(std::time::Instant::now())
        } else {
            0.0
        };
        let mut give = |graph: &mut Graph, core: u32, kernel_slot: usize, sub_block_id: u32| {
            graph.claim_core(core);
            run.running.fetch_add(1, Ordering::AcqRel);
            out.push(Assignment {
                core,
                task: id,
                payload: Arc::clone(payload),
                kernel: payload.kernels[kernel_slot].expect("the shape has this kernel"),
                block_idx,
                sub_block_id,
                dispatch_us,
            });
        };
        match payload.shape {
            Shape::Aic => {
                let core = *self.idle_aic.last().expect("an idle AIC core");
                give(self, core, 0, 0);
            }
            Shape::Aiv => {
                let core = *self.idle_aiv.last().expect("an idle AIV core");
                let sub = chip.cores[core as usize].sub_block;
                give(self, core, 1, sub);
            }
            Shape::Mix(mask) => {
                let cluster = self.idle_clusters(mask).next().expect("an idle cluster");
                for (core, kernel_slot, sub) in cluster_cores(self.clusters, cluster, mask) {
                    give(self, core, kernel_slot, sub);
                }
            }
            Shape::Dummy => unreachable!("dummy tasks are never dispatched"),
        }
    }

    /// Counts live tasks as (running, ready, waiting) and names the first stuck one, for the
    /// SCHEDULER_TIMEOUT stall classes of CHIP_RUNTIME.md §5.1.
    pub(crate) fn stall_census(&self) -> StallCensus {
        let mut census = StallCensus::default();
        for ring in &self.rings {
            for local in ring.last_alive..ring.next_id {
                let slot = &ring.slots[(local & ring.mask) as usize];
                if slot.state != SlotState::Pending {
                    continue;
                }
                let kind = if slot.next_block > 0 {
                    census.running += 1;
                    "running"
                } else if slot.fanin_done == slot.fanin_total {
                    census.ready += 1;
                    "ready"
                } else {
                    census.waiting += 1;
                    "waiting"
                };
                if census.first.is_none() {
                    census.first = Some(format!(
                        "task {} ({}) {kind}, fanin {}/{}, blocks {}/{} dispatched, {}/{} subtasks done",
                        slot.id,
                        slot.payload
                            .as_ref()
                            .map_or("?".to_string(), |p| p.kernel_names()),
                        slot.fanin_done,
                        slot.fanin_total,
                        slot.next_block,
                        slot.payload.as_ref().map_or(0, |p| p.block_num),
                        slot.completed_subtasks,
                        slot.total_subtasks
                    ));
                }
            }
        }
        census.busy_cores = self.core_busy.iter().filter(|&&b| b).count() as u64;
        census.lanes = self.lanes.iter().map(VecDeque::len).collect();
        census
    }
}

/// Live tasks of a stalled run, by state.
#[derive(Debug, Default)]
pub(crate) struct StallCensus {
    pub(crate) running: u64,
    pub(crate) ready: u64,
    pub(crate) waiting: u64,
    pub(crate) busy_cores: u64,
    pub(crate) lanes: Vec<usize>,
    pub(crate) first: Option<String>,
}

impl std::fmt::Display for StallCensus {
    /// `3 running, 0 ready, 5 waiting; 3 core(s) busy; ready lanes [..]; first live: …`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} running, {} ready, {} waiting; {} core(s) busy; ready lanes {:?}; first live: {}",
            self.running,
            self.ready,
            self.waiting,
            self.busy_cores,
            self.lanes,
            self.first.as_deref().unwrap_or("none")
        )
    }
}

impl StallCensus {
    /// The first non-empty class: S1 running-stalled, S3 ready-but-all-idle, S4
    /// dependency-deadlock; else S5 (orchestration not done) or UNKNOWN.
    pub(crate) fn class(&self, orchestration_done: bool) -> &'static str {
        if self.running > 0 {
            "S1 running-stalled"
        } else if self.ready > 0 {
            "S3 ready-but-all-idle"
        } else if self.waiting > 0 {
            "S4 dependency-deadlock"
        } else if !orchestration_done {
            "S5 orchestrator-starvation"
        } else {
            "UNKNOWN"
        }
    }
}

/// Which core kinds a shape occupies: (AIC, AIV).
fn shape_uses(shape: Shape) -> (bool, bool) {
    match shape {
        Shape::Aic => (true, false),
        Shape::Aiv => (false, true),
        Shape::Mix(mask) => (mask & 1 != 0, mask & 6 != 0),
        Shape::Dummy => (false, false),
    }
}

/// The cores of cluster `k` selected by `mask`, as (core id, kernel slot, sub block id).
fn cluster_cores(clusters: u32, k: u32, mask: u8) -> Vec<(u32, usize, u32)> {
    let mut cores = Vec::with_capacity(3);
    if mask & 1 != 0 {
        cores.push((k, 0, 0));
    }
    if mask & 2 != 0 {
        cores.push((clusters + 2 * k, 1, 0));
    }
    if mask & 4 != 0 {
        cores.push((clusters + 2 * k + 1, 2, 1));
    }
    cores
}

/// Whether every kernel of a task returned quickly the last time it ran ([`Graph::helpable`]).
fn is_quick(payload: &TaskPayload) -> bool {
    payload.kernels.iter().flatten().all(|k| k.was_quick())
}

fn has_returned(payload: &TaskPayload) -> bool {
    payload.kernels.iter().flatten().all(|k| k.has_returned())
}
