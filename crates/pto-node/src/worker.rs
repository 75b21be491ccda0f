//! `Worker` (level 3) and `RunHandle`: lifecycle, registration, runs (NODE_RUNTIME.md §1).
//!
//! Lifecycle `NEW → INITIALIZING → READY | FAILED → CLOSED`; FAILED accepts only `close`.
//! `init` snapshots the chips' environment (RING_CONFIG.md §4.1: the process environment, or
//! `chip_env_source`, overlaid with the `ring_env` pairs), creates the heap rings, one
//! in-process lane per chip and sub worker and the scheduler thread.
//!
//! `submit` (§1.4): validates the base config (C2), refuses re-entry from an orchestration
//! function, serialises builders (one run builds at a time), blocks while `max_queued_runs`
//! runs are unfinished, opens the run and its outer scope, calls the function on the calling
//! thread (catching panics), closes scope and submission and returns a [`RunHandle`]; the head
//! run's tasks dispatch while the function still submits. An orchestration error or panic
//! cancels the run's unstarted tasks and `submit` returns once the started ones finished.
//!
//! `close` (idempotent; `Drop` calls it): waits up to `close_timeout` for unfinished runs,
//! fails the rest, stops the scheduler, and joins every lane within `shutdown_grace`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pto_chip::ChipWorker;
use pto_types::ring_config::env::EnvSource;
use pto_types::wait::{SpinPolicy, wait_until};
use pto_types::{BufferId, CallConfig, TaskArgs};

use crate::buffer::{BufferInner, BufferTable, HostBuffer};
use crate::builder::{EndpointMode, WorkerBuilder, WorkerOptions};
use crate::callable::{Callable, CallableHandle, CallableKind, CallableTable};
use crate::endpoint::in_process::{InProcessEndpoint, LaneWork, panic_message};
use crate::endpoint::{ControlCmd, ControlReply, Endpoint};
use crate::engine::{ControlJob, ControlSlot, Engine, EngineConfig, Lane, RunFence};
use crate::error::{
    BufferError, ControlError, InitError, OrchError, RegisterError, SubmitRunError, WaitError,
    WorkerRunError,
};
use crate::heap::HeapRings;
use crate::orch::Orchestrator;
use crate::report::{CloseReport, RunReport, WorkerStats};
use crate::scheduler::Scheduler;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifecycle {
    New,
    Initializing,
    Ready,
    Failed,
    Closed,
}

/// State shared by a Worker's API, its orchestrators and its threads.
pub(crate) struct WorkerShared {
    pub(crate) options: WorkerOptions,
    pub(crate) uid: u64,
    pub(crate) callables: Arc<CallableTable>,
    pub(crate) engine: Arc<Engine>,
    pub(crate) buffers: BufferTable,
    pub(crate) heap: OnceLock<Arc<HeapRings>>,
    lifecycle: Mutex<Lifecycle>,
    /// Held while a run builds: one building run at a time.
    build_lock: Mutex<()>,
    /// The thread running an orchestration function now (re-entry check).
    building_thread: Mutex<Option<ThreadId>>,
    next_buffer_id: AtomicU64,
    scheduler: Mutex<Option<JoinHandle<usize>>>,
}

impl WorkerShared {
    pub(crate) fn next_buffer_id(&self) -> u64 {
        self.next_buffer_id.fetch_add(1, Ordering::Relaxed)
    }

    fn waiter_spin(&self) -> SpinPolicy {
        SpinPolicy::new(self.options.waiter_spin)
    }
}

/// A process-unique Worker identity: the pid in the high half, a counter in the low half.
fn new_uid() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 32) | (NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff)
}

/// An L3 node: N chip workers and M sub workers (NODE_RUNTIME.md §1). `Send + Sync`; every
/// method takes `&self`.
pub struct Worker {
    shared: Arc<WorkerShared>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("uid", &self.shared.uid)
            .field("level", &self.shared.options.level)
            .field("chips", &self.shared.options.chips)
            .field("sub_workers", &self.shared.options.sub_workers)
            .field("lifecycle", &*self.shared.lifecycle.lock())
            .finish()
    }
}

/// Clears the re-entry marker when a build ends, however it ends.
struct BuildingGuard<'a>(&'a Mutex<Option<ThreadId>>);

impl Drop for BuildingGuard<'_> {
    fn drop(&mut self) {
        *self.0.lock() = None;
    }
}

impl Worker {
    /// Starts building a Worker of `level` (3: chips and subs).
    pub fn builder(level: u32) -> WorkerBuilder {
        WorkerBuilder::new(level)
    }

    pub(crate) fn new(options: WorkerOptions) -> Worker {
        let uid = new_uid();
        let engine = Engine::new(EngineConfig {
            chip_names: (0..options.chips).map(|i| format!("chip[{i}]")).collect(),
            sub_names: (0..options.sub_workers)
                .map(|i| format!("sub[{i}]"))
                .collect(),
            track_war: options.track_war,
        });
        Worker {
            shared: Arc::new(WorkerShared {
                options,
                uid,
                callables: Arc::new(CallableTable::new(uid)),
                engine: Arc::new(engine),
                buffers: BufferTable::default(),
                heap: OnceLock::new(),
                lifecycle: Mutex::new(Lifecycle::New),
                build_lock: Mutex::new(()),
                building_thread: Mutex::new(None),
                next_buffer_id: AtomicU64::new(1),
                scheduler: Mutex::new(None),
            }),
        }
    }

    /// This Worker's identity (the `owner_uid` of its buffers).
    pub fn uid(&self) -> u64 {
        self.shared.uid
    }

    pub fn level(&self) -> u32 {
        self.shared.options.level
    }

    pub fn chips(&self) -> usize {
        self.shared.options.chips
    }

    pub fn sub_workers(&self) -> usize {
        self.shared.options.sub_workers
    }

    /// Registers a callable; same kind and name give the same handle.
    pub fn register(&self, c: Callable) -> Result<CallableHandle, RegisterError> {
        if *self.shared.lifecycle.lock() == Lifecycle::Closed {
            return Err(RegisterError::Closed);
        }
        if c.is_closure() && self.shared.options.mode != EndpointMode::InProcess {
            return Err(RegisterError::ClosureRequiresInProcess);
        }
        if c.kind() == CallableKind::Node {
            return Err(RegisterError::WrongLevel {
                level: self.shared.options.level,
                kind: CallableKind::Node,
            });
        }
        self.shared.callables.register(c)
    }

    /// Starts the Worker's chips, sub workers and scheduler.
    pub fn init(&self) -> Result<(), InitError> {
        {
            let mut lc = self.shared.lifecycle.lock();
            match *lc {
                Lifecycle::New => *lc = Lifecycle::Initializing,
                Lifecycle::Closed => return Err(InitError::Closed),
                _ => return Err(InitError::AlreadyInitialized),
            }
        }
        let result = self.init_inner();
        let mut lc = self.shared.lifecycle.lock();
        *lc = match (&result, *lc) {
            (_, Lifecycle::Closed) => Lifecycle::Closed,
            (Ok(()), _) => Lifecycle::Ready,
            (Err(_), _) => Lifecycle::Failed,
        };
        result
    }

    fn init_inner(&self) -> Result<(), InitError> {
        let options = &self.shared.options;
        if options.mode == EndpointMode::ChildProcess {
            return Err(InitError::NotImplemented {
                what: "EndpointMode::ChildProcess",
                issue: "child-process endpoints arrive with issue 6; use EndpointMode::InProcess",
            });
        }
        let heap = HeapRings::new(options.heap_ring_size, SpinPolicy::new(options.waiter_spin))
            .map_err(|e| InitError::ChildFailed {
                child: "heap rings".to_string(),
                message: e.to_string(),
            })?;
        let _ = self.shared.heap.set(Arc::new(heap));
        let env = options
            .chip_env_source
            .clone()
            .unwrap_or_else(EnvSource::process)
            .overlay(options.ring_env.iter().cloned());
        let doorbell = Arc::clone(&self.shared.engine.doorbell);
        let lane_spin = SpinPolicy::new(options.lane_spin);
        let mut chips: Vec<Box<dyn Endpoint>> = Vec::with_capacity(options.chips);
        for (i, spec) in options.chip_specs.iter().enumerate() {
            let name = format!("chip[{i}]");
            let mut spec = spec.clone();
            spec.strict_env |= options.strict_env;
            let chip = ChipWorker::new(spec, env.clone()).map_err(|e| InitError::ChildFailed {
                child: name.clone(),
                message: e.to_string(),
            })?;
            let work = LaneWork::Chip {
                index: i,
                chip: Box::new(chip),
            };
            let ep = InProcessEndpoint::start(name, work, Arc::clone(&doorbell), lane_spin)
                .map_err(|e| InitError::Thread(e.to_string()))?;
            chips.push(Box::new(ep));
        }
        let mut subs: Vec<Box<dyn Endpoint>> = Vec::with_capacity(options.sub_workers);
        for i in 0..options.sub_workers {
            let work = LaneWork::Sub {
                index: i,
                callables: Arc::clone(&self.shared.callables),
            };
            let ep = InProcessEndpoint::start(
                format!("sub[{i}]"),
                work,
                Arc::clone(&doorbell),
                lane_spin,
            )
            .map_err(|e| InitError::Thread(e.to_string()))?;
            subs.push(Box::new(ep));
        }
        let scheduler = Scheduler {
            engine: Arc::clone(&self.shared.engine),
            chips,
            subs,
            spin: SpinPolicy::new(options.scheduler_spin),
            shutdown_grace: options.shutdown_grace,
        };
        let handle = std::thread::Builder::new()
            .name("pto-node-sched".to_string())
            .spawn(move || scheduler.run())
            .map_err(|e| InitError::Thread(e.to_string()))?;
        *self.shared.scheduler.lock() = Some(handle);
        Ok(())
    }

    /// A host buffer of `nbytes` zero bytes that this Worker's tasks can use.
    pub fn create_buffer(&self, nbytes: usize) -> Result<HostBuffer, BufferError> {
        let id = BufferId {
            owner_uid: self.shared.uid,
            buffer_id: self.shared.next_buffer_id(),
            generation: 0,
        };
        let inner = BufferInner::new_buffer(id, nbytes)?;
        self.shared.buffers.insert(&inner);
        Ok(HostBuffer::new(inner))
    }

    /// Submits a run: `f` builds its graph on this thread; returns once `f` returned.
    pub fn submit<F>(
        &self,
        f: F,
        args: TaskArgs,
        config: CallConfig,
    ) -> Result<RunHandle, SubmitRunError>
    where
        F: FnOnce(&mut Orchestrator<'_>, &TaskArgs, &CallConfig) -> Result<(), OrchError>,
    {
        let mut f = Some(f);
        self.submit_dyn(
            &mut |o, a, c| match f.take() {
                Some(f) => f(o, a, c),
                None => Err(OrchError::msg("the orchestration function ran twice")),
            },
            args,
            config,
        )
    }

    fn submit_dyn(
        &self,
        f: &mut dyn FnMut(&mut Orchestrator<'_>, &TaskArgs, &CallConfig) -> Result<(), OrchError>,
        args: TaskArgs,
        config: CallConfig,
    ) -> Result<RunHandle, SubmitRunError> {
        self.check_ready()?;
        config.validate().map_err(SubmitRunError::InvalidConfig)?;
        let me = std::thread::current().id();
        if *self.shared.building_thread.lock() == Some(me) {
            return Err(SubmitRunError::Reentrant);
        }
        let build = self.shared.build_lock.lock();
        *self.shared.building_thread.lock() = Some(me);
        let building = BuildingGuard(&self.shared.building_thread);
        // Back-pressure: at most `max_queued_runs` unfinished runs. Runs complete without this
        // thread's help, so the wait makes progress.
        let engine = &self.shared.engine;
        let max = self.shared.options.max_queued_runs;
        let _ = wait_until(
            &engine.runs_changed,
            self.shared.waiter_spin(),
            None,
            || (engine.state.lock().unfinished_runs() < max).then_some(()),
        );
        self.check_ready()?;
        let fence = engine.state.lock().open_run();
        let run_id = fence.run_id;
        let mut orch = Orchestrator::new(&self.shared, run_id, &config);
        let outcome = catch_unwind(AssertUnwindSafe(|| f(&mut orch, &args, &config)));
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(panic) => Some(OrchError::Panic(panic_message(panic.as_ref()))),
        };
        if let Some(e) = &failure {
            engine
                .state
                .lock()
                .cancel_run(run_id, &format!("orchestration failed: {e}"));
        }
        orch.end_all_scopes();
        engine.state.lock().close_submission(run_id);
        drop(building);
        drop(build);
        let handle = RunHandle {
            fence,
            spin: self.shared.waiter_spin(),
        };
        match failure {
            None => Ok(handle),
            Some(source) => {
                // Started tasks finish first; the run fails, and the Worker stays usable.
                let _ = handle.wait(None);
                Err(SubmitRunError::Orchestration { run_id, source })
            }
        }
    }

    /// `submit` then `wait(None)`.
    pub fn run<F>(
        &self,
        f: F,
        args: TaskArgs,
        config: CallConfig,
    ) -> Result<RunReport, WorkerRunError>
    where
        F: FnOnce(&mut Orchestrator<'_>, &TaskArgs, &CallConfig) -> Result<(), OrchError>,
    {
        let handle = self.submit(f, args, config)?;
        match handle.wait(None) {
            Ok(report) => Ok(report),
            Err(WaitError::Failed(e)) => Err(WorkerRunError::Failed(e)),
            Err(WaitError::Timeout) => unreachable!("no timeout was given"),
        }
    }

    fn check_ready(&self) -> Result<(), SubmitRunError> {
        match *self.shared.lifecycle.lock() {
            Lifecycle::Ready => Ok(()),
            Lifecycle::Closed => Err(SubmitRunError::Closed),
            _ => Err(SubmitRunError::NotReady),
        }
    }

    /// Device memory accounted on chip `chip` (cached arenas and allocations). Runs only when
    /// no run is unfinished (chip control shares the lane with tasks, §1.6).
    pub fn committed_device_memory(&self, chip: usize) -> Result<u64, ControlError> {
        match self.control(Lane::Chip(chip), ControlCmd::CommittedDeviceMemory)? {
            ControlReply::Bytes(b) => Ok(b),
        }
    }

    fn control(&self, lane: Lane, cmd: ControlCmd) -> Result<ControlReply, ControlError> {
        if *self.shared.lifecycle.lock() != Lifecycle::Ready {
            return Err(ControlError::NotReady);
        }
        let (index, count, name) = match lane {
            Lane::Chip(w) => (w, self.shared.options.chips, format!("chip[{w}]")),
            Lane::Sub(s) => (s, self.shared.options.sub_workers, format!("sub[{s}]")),
        };
        if index >= count {
            return Err(ControlError::UnknownWorker { worker: index });
        }
        let reply = Arc::new(ControlSlot::default());
        {
            let mut st = self.shared.engine.state.lock();
            let runs = st.unfinished_runs();
            if runs > 0 {
                return Err(ControlError::RunsInFlight { count: runs });
            }
            st.controls.push_back(ControlJob {
                lane,
                cmd,
                reply: Arc::clone(&reply),
            });
        }
        self.shared.engine.doorbell.notify_one();
        let deadline = Instant::now() + self.shared.options.control_timeout;
        let result = wait_until(
            &reply.done,
            self.shared.waiter_spin(),
            Some(deadline),
            || reply.value.lock().take(),
        )
        .map_err(|_| ControlError::Timeout {
            worker: name.clone(),
        })?;
        result.map_err(|e| ControlError::Endpoint {
            worker: name,
            message: e.to_string(),
        })
    }

    /// Live slots, unfinished runs and heap-ring use now.
    pub fn stats(&self) -> WorkerStats {
        let (live_tasks, unfinished_runs) = {
            let st = self.shared.engine.state.lock();
            (st.live_tasks(), st.unfinished_runs())
        };
        WorkerStats {
            live_tasks,
            unfinished_runs,
            heap_in_use: self.shared.heap.get().map_or([0; 4], |h| h.in_use()),
        }
    }

    /// Waits for unfinished runs (up to `close_timeout`), stops every thread. Idempotent.
    pub fn close(&self) -> CloseReport {
        let previous = {
            let mut lc = self.shared.lifecycle.lock();
            let previous = *lc;
            *lc = Lifecycle::Closed;
            previous
        };
        if previous == Lifecycle::Closed {
            return CloseReport {
                graceful: true,
                ..CloseReport::default()
            };
        }
        let engine = &self.shared.engine;
        let deadline = Instant::now() + self.shared.options.close_timeout;
        let drained = wait_until(
            &engine.runs_changed,
            self.shared.waiter_spin(),
            Some(deadline),
            || (engine.state.lock().unfinished_runs() == 0).then_some(()),
        );
        let abandoned_runs = match drained {
            Ok(()) => 0,
            Err(_) => engine
                .state
                .lock()
                .abandon_runs("EndpointFailure: the Worker closed before the task finished"),
        };
        engine.state.lock().stop = true;
        engine.doorbell.notify_one();
        let detached_threads = match self.shared.scheduler.lock().take() {
            Some(handle) => handle.join().unwrap_or(0),
            None => 0,
        };
        CloseReport {
            graceful: abandoned_runs == 0 && detached_threads == 0,
            abandoned_runs,
            detached_threads,
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A submitted run; cloneable, waitable many times with the same result.
#[derive(Clone)]
pub struct RunHandle {
    fence: Arc<RunFence>,
    spin: SpinPolicy,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("run_id", &self.fence.run_id)
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl RunHandle {
    pub fn run_id(&self) -> u64 {
        self.fence.run_id
    }

    /// Whether the run has completed (successfully or not).
    pub fn is_finished(&self) -> bool {
        self.fence.result.lock().is_some()
    }

    /// Waits for the run; `Err(Timeout)` leaves it running. `None` waits without a limit
    /// (every run completes: tasks finish, fail, or are failed by `close`).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<RunReport, WaitError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        match wait_until(&self.fence.done, self.spin, deadline, || {
            self.fence.result.lock().clone()
        }) {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(e)) => Err(WaitError::Failed(Box::new(e))),
            Err(_) => Err(WaitError::Timeout),
        }
    }
}
