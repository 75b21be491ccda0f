//! State of one run shared by the orchestrator, the executors and the gang threads, and the
//! no-progress watchdog the orchestrator runs while it waits.
//!
//! Error latching follows CHIP_RUNTIME.md §5.1: the orchestrator and the executing threads each
//! keep their first error; the orchestrator's takes precedence in the report. Once any error is
//! latched, `cancelled` is set: orchestration calls return `Err(Fatal)`, executors take nothing
//! new and kernels see `ctx.cancelled()`.

use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pto_types::wait::{EventCount, Handoff, spin_then};
use pto_types::{ErrorCode, RING_COUNT};

use crate::diag::trace::TraceBuffer;
use crate::error::{ChipError, Detector};

use super::ChipShared;
use super::graph::{Effects, Graph, NewTask};

/// Spins of [`RunShared::lock_graph`] before it blocks on the mutex. 512 rounds of a load and a
/// `spin_loop()` take ~5-20 µs (the hint's latency varies by CPU): many graph-lock holds (each a
/// fraction of a µs) but less than the futex round trip of a blocked lock. Counted, not timed:
/// a clock read would cost as much as a round.
const GRAPH_LOCK_SPINS: u32 = 512;

/// Marker for "orchestration has not finished yet" in [`RunShared::total_tasks`].
pub(crate) const TOTAL_UNKNOWN: u64 = u64::MAX;

/// Each atomic sits in its own cache line: executors write the counters on every block while
/// the orchestrator reads `cancelled` and the watermarks on every submit, and sharing a line
/// would turn each of those reads into a cache miss.
pub(crate) struct RunShared {
    /// Unique per chip; completions carry it so a late completion never reaches another run.
    pub(crate) id: u64,
    /// Slots, fanout lists, ready queues, core occupancy (see [`Graph`]). Locked only through
    /// [`RunShared::lock_graph`] and [`RunShared::try_lock_graph`], whose guard serves the
    /// inbox when it unlocks.
    graph: Mutex<Graph>,
    /// Tasks the orchestrator handed off instead of waiting while another thread held the
    /// graph lock, which every holder publishes after it unlocks ([`GraphGuard`]), and tasks it
    /// left while every executor was busy (HO4), which its own next hold publishes, or an
    /// executor that finds no other work.
    pub(crate) inbox: CachePadded<Handoff<NewTask>>,
    /// Whom to wake for tasks published from the inbox.
    chip: Weak<ChipShared>,
    /// Per-ring watermark (oldest task not CONSUMED), published after every advance (Release)
    /// for the orchestrator's refresh (Acquire).
    pub(crate) last_alive: CachePadded<[AtomicU64; RING_COUNT]>,
    /// Bumped on every subtask completion and watermark move: "something progressed".
    pub(crate) progress: CachePadded<AtomicU64>,
    /// Notified on every watermark move, task completion and latched error: the orchestrator
    /// waits on it for ring resources.
    pub(crate) ring_progress: CachePadded<EventCount>,
    /// What a waiting orchestrator needs before it is worth waking: `ring + 1` and the
    /// watermark it waits for (`0` = any progress). See [`RunShared::wants_ring_wake`].
    wake_ring: CachePadded<AtomicU64>,
    wake_at: CachePadded<AtomicU64>,
    /// Tasks completed (dummy tasks and alloc tasks included).
    pub(crate) completed: CachePadded<AtomicU64>,
    /// Tasks submitted, set once orchestration has finished; [`TOTAL_UNKNOWN`] before.
    pub(crate) total_tasks: CachePadded<AtomicU64>,
    /// How long the last finished kernel ran (ns): when kernels are long, one waiting block is
    /// worth waking a parked executor for ([`super::graph::Graph::signal`]).
    pub(crate) last_kernel_ns: CachePadded<AtomicU64>,
    /// Blocks currently running on cores.
    pub(crate) running: CachePadded<AtomicU64>,
    /// Of `running`, the block the orchestrator's stand-in runs (0 or 1; changed under the
    /// graph lock): its thread never comes back for more work, so the wake rule does not count
    /// it as a thread that will ([`super::graph::Graph::signal`], `orchestrator/help.rs` H5).
    pub(crate) stand_in_running: AtomicU64,
    /// The orchestrator is not parked: it comes back for helpable work before it parks, unless
    /// its stand-in runs (then the look under the graph lock before it parks, H3, is what
    /// keeps the work from being stranded; `orchestrator/help.rs`, H2 and H5). Set from the
    /// start of the run.
    orchestrator_helps: CachePadded<AtomicBool>,
    /// Notified when the run may have finished (all tasks completed, or failed and idle).
    pub(crate) done: CachePadded<EventCount>,
    /// Set when any error is latched.
    pub(crate) cancelled: CachePadded<AtomicBool>,
    orch_error: Mutex<Option<ChipError>>,
    sched_error: Mutex<Option<ChipError>>,
    /// Time zero of the run's trace and samples.
    pub(crate) epoch: Instant,
    /// Swimlane level (0 = off) and its event buffer.
    pub(crate) trace_level: u8,
    pub(crate) trace: Option<Mutex<TraceBuffer>>,
}

impl RunShared {
    pub(crate) fn new(id: u64, graph: Graph, trace_level: u8, chip: Weak<ChipShared>) -> RunShared {
        RunShared {
            id,
            graph: Mutex::new(graph),
            inbox: CachePadded::new(Handoff::new()),
            chip,
            last_alive: CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))),
            progress: CachePadded::new(AtomicU64::new(0)),
            ring_progress: CachePadded::new(EventCount::new()),
            wake_ring: CachePadded::new(AtomicU64::new(0)),
            wake_at: CachePadded::new(AtomicU64::new(0)),
            completed: CachePadded::new(AtomicU64::new(0)),
            total_tasks: CachePadded::new(AtomicU64::new(TOTAL_UNKNOWN)),
            last_kernel_ns: CachePadded::new(AtomicU64::new(0)),
            running: CachePadded::new(AtomicU64::new(0)),
            stand_in_running: AtomicU64::new(0),
            orchestrator_helps: CachePadded::new(AtomicBool::new(true)),
            done: CachePadded::new(EventCount::new()),
            cancelled: CachePadded::new(AtomicBool::new(false)),
            orch_error: Mutex::new(None),
            sched_error: Mutex::new(None),
            epoch: Instant::now(),
            trace_level,
            trace: (trace_level > 0).then(|| Mutex::new(TraceBuffer::default())),
        }
    }

    /// The graph lock if it is free now.
    pub(crate) fn try_lock_graph(&self) -> Option<GraphGuard<'_>> {
        if self.graph.is_locked() {
            None
        } else {
            self.graph
                .try_lock()
                .map(|guard| GraphGuard::new(self, guard))
        }
    }

    /// [`RunShared::lock_graph`] for the orchestrator thread, the inbox's only offerer: its
    /// unlocks skip HO2. An offer fails only while another thread holds the lock, so that
    /// thread's unlock serves it; the orchestrator cannot offer while it holds the lock itself.
    /// Skipping saves a read-modify-write per orchestrator unlock on the line that executors'
    /// unlocks touch too.
    pub(crate) fn lock_graph_as_offerer(&self) -> GraphGuard<'_> {
        let mut guard = self.lock_graph();
        guard.offerer = true;
        guard
    }

    /// [`RunShared::try_lock_graph`] for the orchestrator thread (see
    /// [`RunShared::lock_graph_as_offerer`]).
    pub(crate) fn try_lock_graph_as_offerer(&self) -> Option<GraphGuard<'_>> {
        let mut guard = self.try_lock_graph()?;
        guard.offerer = true;
        Some(guard)
    }

    /// [`RunShared::lock_graph`] for an executor, which looks for work as soon as it unlocks:
    /// tasks it publishes from the inbox then wake a parked executor only when they would with
    /// this one running a block ([`Graph::signal`]).
    pub(crate) fn lock_graph_then_search(&self) -> GraphGuard<'_> {
        let mut guard = self.lock_graph();
        guard.searcher = true;
        guard
    }

    /// Locks the graph, spinning (loads, no `yield_now`) for [`GRAPH_LOCK_SPINS`] rounds first:
    /// the holds are a fraction of a µs, while parking_lot's own slow path yields the time slice
    /// and then parks — both far more expensive on a small host than a short wait
    /// (`docs/decisions/chip-engine.md`).
    pub(crate) fn lock_graph(&self) -> GraphGuard<'_> {
        spin_then(
            GRAPH_LOCK_SPINS,
            || self.try_lock_graph(),
            || GraphGuard::new(self, self.graph.lock()),
        )
    }

    /// Rule HO2, after every unlock of the graph: publishes what the orchestrator handed off
    /// meanwhile, and wakes whom those tasks concern.
    fn serve_inbox(&self, searcher: bool) {
        while let Some(mut graph) = self.inbox.after_unlock(|| self.graph.try_lock()) {
            let mut fx = Effects::default();
            graph.publish_handed(self, &mut fx);
            fx.wake = graph.signal_searching(self, searcher);
            drop(graph);
            if let Some(chip) = self.chip.upgrade() {
                super::core::after_effects(&chip, self, &fx);
            }
        }
    }

    /// The orchestrator waits for ring space and is worth waking only once the watermark of
    /// `ring` reaches `at` (`None`: at any progress). Batching the wakes matters on a small
    /// host: a wake per retired task preempts a kernel for the orchestrator's few µs each time.
    pub(crate) fn want_ring_wake(&self, wake: Option<(usize, u64)>) {
        let (ring, at) = wake.map_or((0, 0), |(ring, at)| (ring as u64 + 1, at));
        self.wake_at.store(at, Ordering::SeqCst);
        self.wake_ring.store(ring, Ordering::SeqCst);
    }

    /// Whether a completion or watermark move should wake the orchestrator: it asked for any
    /// progress, its ring's watermark reached its threshold, or nothing runs any more
    /// (`quiescent`: then nothing else will move, and it must look — a deadlock detector, an
    /// error, or space that fewer retirements freed). Both sides use `SeqCst`: the orchestrator
    /// stores the threshold then reads the watermark; a finishing thread stores the watermark then
    /// reads the threshold; one of them sees the other's store.
    pub(crate) fn wants_ring_wake(&self, quiescent: bool) -> bool {
        let ring = self.wake_ring.load(Ordering::SeqCst);
        if ring == 0 || quiescent {
            return true;
        }
        self.watermark_reached((ring - 1) as usize, self.wake_at.load(Ordering::SeqCst))
    }

    /// Whether the watermark of `ring` reached `at` (`SeqCst`: see `wants_ring_wake`).
    pub(crate) fn watermark_reached(&self, ring: usize, at: u64) -> bool {
        self.last_alive[ring].load(Ordering::SeqCst) >= at
    }

    /// Whether the orchestrator is taking quick work ([`RunShared::set_orchestrator_helps`]).
    pub(crate) fn orchestrator_helps(&self) -> bool {
        self.orchestrator_helps.load(Ordering::SeqCst)
    }

    /// Set by the orchestrator only. Clearing it is followed by a look at the lanes under the
    /// graph lock, so a signal that counted on the orchestrator is never lost
    /// (`orchestrator/help.rs`).
    pub(crate) fn set_orchestrator_helps(&self, on: bool) {
        self.orchestrator_helps.store(on, Ordering::SeqCst);
    }

    /// Microseconds since the run started.
    pub(crate) fn micros(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64() * 1e6
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Latches the orchestrator's first error.
    pub(crate) fn latch_orch(&self, error: ChipError) {
        let mut slot = self.orch_error.lock();
        if slot.is_none() {
            *slot = Some(error);
        }
        drop(slot);
        self.cancel();
    }

    /// Latches the first error of an executing thread (a kernel panic, a broken invariant).
    pub(crate) fn latch_sched(&self, error: ChipError) {
        let mut slot = self.sched_error.lock();
        if slot.is_none() {
            *slot = Some(error);
        }
        drop(slot);
        self.cancel();
    }

    fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.ring_progress.notify_all();
        self.done.notify_all();
    }

    /// The error to report: the orchestrator's if any, else the executing threads'.
    pub(crate) fn take_error(&self) -> Option<ChipError> {
        if let Some(e) = self.orch_error.lock().take() {
            return Some(e);
        }
        self.sched_error.lock().take()
    }

    pub(crate) fn bump_progress(&self) {
        self.progress.fetch_add(1, Ordering::Release);
    }

    /// True when the run can end: every task completed, or an error is latched and no block
    /// runs (RUNNING work must finish; its memory is still in use).
    pub(crate) fn is_finished(&self) -> bool {
        let total = self.total_tasks.load(Ordering::Acquire);
        if total == TOTAL_UNKNOWN {
            return false;
        }
        if self.is_cancelled() {
            return self.running.load(Ordering::Acquire) == 0;
        }
        self.completed.load(Ordering::Acquire) == total
    }
}

/// The no-progress watchdog (code 100), run by the orchestrator whenever it waits: work is
/// outstanding and nothing progressed for the chip's `scheduler_timeout`.
#[derive(Default)]
pub(crate) struct Watch {
    last_progress: u64,
    since: Option<Instant>,
}

impl Watch {
    /// Returns the deadline to park with, latching SCHEDULER_TIMEOUT when it has passed.
    pub(crate) fn check(&mut self, run: &RunShared, timeout: Duration) -> Option<Instant> {
        let outstanding = {
            let graph = run.lock_graph();
            graph.published > run.completed.load(Ordering::Acquire)
        };
        if !outstanding || run.is_cancelled() {
            self.since = None;
            return None;
        }
        let now = Instant::now();
        let progress = run.progress.load(Ordering::Acquire);
        let since = match self.since {
            Some(since) if progress == self.last_progress => since,
            _ => {
                self.last_progress = progress;
                self.since = Some(now);
                now
            }
        };
        if now - since < timeout {
            return Some(since + timeout);
        }
        let census = run.lock_graph().stall_census();
        let orchestration_done = run.total_tasks.load(Ordering::Acquire) != TOTAL_UNKNOWN;
        let class = census.class(orchestration_done);
        let mut e = ChipError::new(
            ErrorCode::SchedulerTimeout,
            Detector::Timeout,
            format!(
                "no progress for {} ms with work outstanding: {class} ({census})",
                timeout.as_millis()
            ),
        );
        e.used = Some(census.running);
        run.latch_sched(e);
        self.since = None;
        None
    }
}

/// The graph lock, held. Unlocking it (the drop) publishes the tasks the orchestrator handed
/// off while it was held (rule HO2), so a handed-off task never waits for a lock nobody holds.
/// Tasks it left (HO4) are not handed off: an executor out of work or the orchestrator's next
/// hold publishes them ([`GraphGuard::take_handed`]).
pub(crate) struct GraphGuard<'a> {
    run: &'a RunShared,
    guard: Option<parking_lot::MutexGuard<'a, Graph>>,
    /// The holder looks for work right after it unlocks ([`RunShared::lock_graph_then_search`]).
    searcher: bool,
    /// The holder is the inbox's only offerer ([`RunShared::lock_graph_as_offerer`]).
    offerer: bool,
}

impl<'a> GraphGuard<'a> {
    fn new(run: &'a RunShared, guard: parking_lot::MutexGuard<'a, Graph>) -> GraphGuard<'a> {
        GraphGuard {
            run,
            guard: Some(guard),
            searcher: false,
            offerer: false,
        }
    }

    /// Publishes the tasks handed off so far (rule HO3) in this hold, so that this holder can
    /// take them at once. Left ones (HO4, [`OrchCore::publish`]) only `with_left`: by a thread
    /// out of other work, and by the orchestrator.
    ///
    /// [`OrchCore::publish`]: super::orchestrator::OrchCore
    pub(crate) fn take_handed(&mut self, fx: &mut Effects, with_left: bool) {
        let run = self.run;
        if run.inbox.is_waiting() || (with_left && run.inbox.has_left()) {
            Graph::publish_handed(self, run, fx);
        }
    }
}

impl std::ops::Deref for GraphGuard<'_> {
    type Target = Graph;

    fn deref(&self) -> &Graph {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for GraphGuard<'_> {
    fn deref_mut(&mut self) -> &mut Graph {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for GraphGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        // Not while unwinding from a panic under the lock: the graph may be half-updated, and
        // a second panic would abort. The run fails, and the orchestrator's next flush drops
        // what was handed off.
        if !self.offerer && !std::thread::panicking() {
            self.run.serve_inbox(self.searcher);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::graph::{Effects, ProducerState};
    use crate::engine::{Shape, TaskPayload};
    use crate::task_id::TaskId;

    fn task(local: u64) -> NewTask {
        NewTask {
            id: TaskId::new(0, local),
            payload: Arc::new(TaskPayload {
                shape: Shape::Aiv,
                kernels: [None; 3],
                tensors: Default::default(),
                scalars: Default::default(),
                block_num: 1,
                sync_start: false,
                fused: None,
            }),
            producers: Vec::new(),
            completed: false,
        }
    }

    fn run() -> RunShared {
        RunShared::new(
            0,
            Graph::new([16; RING_COUNT], 1, Default::default()),
            0,
            Weak::new(),
        )
    }

    /// A clean run's slot records serve the next run, whatever its window; a run that left a
    /// task unconsumed keeps its own (`Graph::take_store`).
    #[test]
    fn a_clean_runs_slot_records_serve_the_next_run_and_an_unclean_one_keeps_its_own() {
        let first = run();
        let ids: Vec<TaskId> = (0..10).map(|local| TaskId::new(0, local)).collect();
        let store = {
            let mut graph = first.lock_graph();
            let mut fx = Effects::default();
            for local in 0..10 {
                let mut done = task(local);
                done.completed = true;
                graph.publish(done, &first, &mut fx);
            }
            assert!(graph.take_store(&first).is_none(), "their scope is open");
            graph.end_scope(&ids, &first, &mut fx);
            let store = graph.take_store(&first).expect("every task was consumed");
            assert_eq!(graph.producer_state(ids[3]), ProducerState::Gone);
            assert_eq!(graph.describe(ids[3]), ids[3].to_string());
            store
        };
        // The next run has a smaller window, so its ids wrap over the stored records.
        let next = RunShared::new(1, Graph::new([8; RING_COUNT], 1, store), 0, Weak::new());
        let mut graph = next.lock_graph();
        let mut fx = Effects::default();
        let stored = TaskId::new(0, 5);
        assert_eq!(graph.producer_state(stored), ProducerState::Gone);
        graph.publish(task(0), &next, &mut fx);
        let mut consumer = task(1);
        consumer.producers = vec![(TaskId::new(0, 0), false)];
        let wired = graph.publish(consumer, &next, &mut fx);
        assert_eq!((wired.edges, wired.pending), (1, 1));
        assert!(graph.is_pending(TaskId::new(0, 1)));
        assert!(graph.take_store(&next).is_none(), "two tasks are pending");
    }

    /// HO2 through the guard: whoever held the lock publishes, when it unlocks, what was
    /// handed off meanwhile, in order, with nobody else touching the lock.
    #[test]
    fn tasks_handed_off_while_the_lock_is_held_are_published_when_it_is_released() {
        let run = run();
        let held = run.lock_graph();
        for local in 0..3 {
            let got = run.inbox.offer(task(local), || run.try_lock_graph());
            assert!(got.is_none(), "the lock is held");
        }
        assert_eq!(held.published, 0);
        drop(held);
        let graph = run.try_lock_graph().expect("free again");
        assert_eq!(graph.published, 3);
        let handed: Vec<(u64, bool)> = graph
            .handed
            .iter()
            .map(|h| (h.id.local(), h.published))
            .collect();
        assert_eq!(handed, [(0, true), (1, true), (2, true)]);
    }

    /// On a failed run the holder drops what was handed off, and records it as dropped for the
    /// orchestrator's books.
    #[test]
    fn tasks_handed_off_to_a_failed_run_are_dropped_unpublished() {
        let run = run();
        let held = run.lock_graph();
        assert!(run.inbox.offer(task(0), || run.try_lock_graph()).is_none());
        run.latch_sched(ChipError::new(
            ErrorCode::KernelPanic,
            Detector::Immediate,
            "a test failure",
        ));
        drop(held);
        let graph = run.try_lock_graph().expect("free again");
        assert_eq!(graph.published, 0);
        assert_eq!(graph.handed.len(), 1);
        assert!(!graph.handed[0].published);
    }
}
