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

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pto_chip::ChipWorker;
use pto_types::node_wire::mailbox::KindCode;
use pto_types::node_wire::worker_spec::WorkerSpec;
use pto_types::ring_config::env::EnvSource;
use pto_types::wait::{SpinPolicy, wait_until};
use pto_types::{BufferId, CallConfig, DType, TaskArgs};

use crate::boot::{chip_spec_from_boot, chip_spec_to_boot};
use crate::buffer::{BufferInner, BufferTable, HostBuffer, Memory};
use crate::builder::{EndpointMode, WorkerBuilder, WorkerOptions};
use crate::callable::{Callable, CallableHandle, CallableKind, CallableTable};
use crate::device::DeviceTensor;
use crate::endpoint::in_process::{InProcessEndpoint, LaneWork, panic_message};
use crate::endpoint::{ControlCmd, ControlReply, Endpoint};
use crate::engine::{ControlJob, ControlSlot, Engine, EngineConfig, Lane, RunFence};
use crate::error::{
    AddWorkerError, BufferError, ControlError, InitError, OrchError, RegisterError, SubmitRunError,
    WaitError, WorkerRunError,
};
use crate::heap::{HEAP_RINGS, HeapRings};
use crate::launch::{ChildRuntime, launch};
use crate::orch::Orchestrator;
use crate::report::{CloseReport, RunReport, WorkerStats};
use crate::scheduler::{PumpSlot, Scheduler};
use crate::shm::doorbell::Epoch;
use crate::shm::{Segment, SegmentKey};

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
    scheduler: Mutex<Option<JoinHandle<(usize, usize)>>>,
    /// The scheduler's pump, set at `init`: in-process lanes make passes through it.
    pub(crate) pump: PumpSlot,
    /// Level ≥ 4: the Worker children, NEW until `init` sends their specs to their processes.
    node_children: Mutex<Vec<Worker>>,
    /// The sessions of the remote workers (level 4), opened at `init`, in index order.
    pub(crate) remotes: Mutex<Vec<Arc<crate::remote::Connection>>>,
    /// Child-process mode: the monitor thread and the control segment.
    children: Mutex<Option<ChildRuntime>>,
    /// Every shared segment this Worker created; their descriptors close at `close`.
    segments: Mutex<Vec<Weak<Segment>>>,
}

impl WorkerShared {
    pub(crate) fn next_buffer_id(&self) -> u64 {
        self.next_buffer_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs one control command on `lane` (§1.6). Outside runs (`in_run: None`) only when no
    /// run is unfinished; inside run `in_run` (before its first submit, checked by the
    /// Orchestrator) once that run heads the FIFO, so every lane is idle.
    pub(crate) fn control(
        &self,
        lane: Lane,
        cmd: ControlCmd,
        in_run: Option<u64>,
    ) -> Result<ControlReply, ControlError> {
        if *self.lifecycle.lock() != Lifecycle::Ready {
            return Err(ControlError::NotReady);
        }
        let (index, count) = match lane {
            Lane::Chip(w) => (w, self.options.chips),
            Lane::Sub(s) => (s, self.options.sub_workers),
        };
        if index >= count {
            return Err(ControlError::UnknownWorker { worker: index });
        }
        let name = self
            .engine
            .lock_state()
            .lane_name_of(lane)
            .unwrap_or_default();
        if let Some(run_id) = in_run {
            // Earlier runs always complete (§3), so this wait has a progress guarantee.
            let _ = wait_until(&self.engine.runs_changed, self.waiter_spin(), None, || {
                self.engine.lock_state().is_head(run_id).then_some(())
            });
        }
        let reply = Arc::new(ControlSlot::default());
        {
            let mut st = self.engine.lock_state();
            let runs = st.unfinished_runs();
            let own = usize::from(in_run.is_some_and(|r| st.is_head(r)));
            if runs > own {
                return Err(ControlError::RunsInFlight { count: runs });
            }
            st.controls.push_back(ControlJob {
                lane,
                cmd,
                reply: Arc::clone(&reply),
            });
        }
        self.engine.doorbell.notify_one();
        let deadline = Instant::now() + self.options.control_timeout;
        let result = wait_until(&reply.done, self.waiter_spin(), Some(deadline), || {
            reply.value.lock().take()
        })
        .map_err(|_| {
            // The frame's owner is unknown now: a child process is killed (the scheduler then
            // sees it die, fails what it held and restarts it); §4.7.
            let why = format!(
                "no reply to a control command within control_timeout ({:?})",
                self.options.control_timeout
            );
            self.engine.lock_state().kills.push((lane, why));
            self.engine.doorbell.notify_one();
            ControlError::Timeout {
                worker: name.clone(),
            }
        })?;
        result.map_err(|e| ControlError::Endpoint {
            worker: name,
            message: e.to_string(),
        })
    }

    fn waiter_spin(&self) -> SpinPolicy {
        SpinPolicy::new(self.options.waiter_spin)
    }

    /// Next-level workers: chips at L3, Worker children at L4.
    /// Why a tensor whose buffer is `remote` (`(worker, handle)` of a remote buffer, or `None`
    /// for a buffer of this process) cannot be used by a task for next-level worker `target`
    /// (`None`: a sub task), if it cannot.
    pub(crate) fn reachability(
        &self,
        remote: Option<(u32, u64)>,
        target: Option<usize>,
    ) -> Option<String> {
        let remotes = &self.options.remote_workers;
        let at = |w: usize| {
            remotes.get(w).map_or_else(
                || format!("remote worker {w}"),
                |r| format!("remote worker {w} ({r})"),
            )
        };
        match (remote, target) {
            (Some((w, _)), None) => Some(format!(
                "a buffer of {} cannot be used by a sub task of this process",
                at(w as usize)
            )),
            (Some((w, _)), Some(t)) if w as usize != t => Some(format!(
                "a buffer of {} cannot be used by a task for worker {t}",
                at(w as usize)
            )),
            (None, Some(t)) if t < remotes.len() => Some(format!(
                "a host buffer of this process is not reachable from {}; create the buffer there with Worker::create_remote_buffer({t}, ..)",
                at(t)
            )),
            _ => None,
        }
    }

    pub(crate) fn next_level_workers(&self) -> usize {
        self.engine.lock_state().next_level_lanes()
    }

    /// Makes a buffer of another Worker (an L4 parent's segment, mapped by this process) one of
    /// this Worker's buffers under its original identity, so tasks of this Worker may name it
    /// and its children receive it under that identity (§4.3, §6.1).
    pub(crate) fn adopt_buffer(
        &self,
        id: BufferId,
        memory: Memory,
        base: usize,
        len: usize,
    ) -> Arc<BufferInner> {
        let inner = BufferInner::new_window(id, memory, base, len);
        self.buffers.insert(&inner);
        inner
    }
}

/// The chip lanes and the sub lanes a scheduler drives.
type Lanes = (Vec<Box<dyn Endpoint>>, Vec<Box<dyn Endpoint>>);

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
        let mut chip_names: Vec<String> =
            (0..options.chips).map(|i| format!("chip[{i}]")).collect();
        // A level-4 Worker's remote workers are its first next-level workers.
        chip_names.extend(
            options
                .remote_workers
                .iter()
                .enumerate()
                .map(|(i, w)| crate::remote::endpoint::lane_name(i, &w.to_string())),
        );
        let sub_names: Vec<String> = (0..options.sub_workers)
            .map(|i| format!("sub[{i}]"))
            .collect();
        let engine = Engine::new(EngineConfig {
            chip_names,
            sub_names,
            track_war: options.track_war,
            next_level_kind: if options.level >= 4 {
                CallableKind::Node
            } else {
                CallableKind::Chip
            },
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
                pump: PumpSlot::default(),
                node_children: Mutex::new(Vec::new()),
                children: Mutex::new(None),
                segments: Mutex::new(Vec::new()),
                remotes: Mutex::new(Vec::new()),
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

    /// The name failures and reports give chip `i`: `chip[0]` in-process, `chip_child[0]
    /// pid=4242` for a child process (after `init`).
    pub fn chip_name(&self, i: usize) -> Option<String> {
        self.shared.engine.lock_state().lane_name_of(Lane::Chip(i))
    }

    /// The name of sub worker `i` (`sub[0]`, `sub_child[0] pid=4243`).
    pub fn sub_name(&self, i: usize) -> Option<String> {
        self.shared.engine.lock_state().lane_name_of(Lane::Sub(i))
    }

    /// The pids of this Worker's child processes (child-process mode), whether or not they are
    /// still alive.
    pub fn child_pids(&self) -> Vec<u32> {
        match &*self.shared.children.lock() {
            Some(rt) => rt.monitor.children().iter().map(|c| c.pid()).collect(),
            None => Vec::new(),
        }
    }

    /// Registers a callable; same kind and name give the same handle.
    pub fn register(&self, c: Callable) -> Result<CallableHandle, RegisterError> {
        if *self.shared.lifecycle.lock() == Lifecycle::Closed {
            return Err(RegisterError::Closed);
        }
        let o = &self.shared.options;
        let closures_run_here = o.mode == EndpointMode::InProcess || o.subs_in_process;
        if c.is_closure() && !closures_run_here {
            return Err(RegisterError::ClosureRequiresInProcess);
        }
        let level = self.shared.options.level;
        let wrong = match c.kind() {
            CallableKind::Node => level < 4,
            CallableKind::Chip => level >= 4,
            CallableKind::Sub => false,
        };
        if wrong {
            return Err(RegisterError::WrongLevel {
                level,
                kind: c.kind(),
            });
        }
        self.shared.callables.register(c)
    }

    /// Adds an L3 Worker (NEW, named registrations only) as a child of this level-4 Worker;
    /// returns its worker index for `submit_next_level` (after the builder's remote workers;
    /// its lane is named `node_child[j]`, `j` counting local children only). The child's options and registrations
    /// travel to its process in the boot block at `init` (NODE_RUNTIME.md §6.1).
    pub fn add_worker(&self, child: Worker) -> Result<usize, AddWorkerError> {
        let level = self.shared.options.level;
        if level < 4 {
            return Err(AddWorkerError::RequiresLevel4 { level });
        }
        if *self.shared.lifecycle.lock() != Lifecycle::New {
            return Err(AddWorkerError::NotNew);
        }
        if *child.shared.lifecycle.lock() != Lifecycle::New {
            return Err(AddWorkerError::ChildNotNew);
        }
        if child.shared.options.level + 1 != level {
            return Err(AddWorkerError::WrongLevel {
                parent: level,
                child: child.shared.options.level,
            });
        }
        if child.shared.callables.has_closures() {
            return Err(AddWorkerError::Closures);
        }
        let mut children = self.shared.node_children.lock();
        // Remote workers (from the builder) are next-level workers 0..R; children follow.
        let index = self.shared.options.remote_workers.len() + children.len();
        children.push(child);
        let name = format!("node[{index}]");
        self.shared.engine.lock_state().add_next_level_lane(name);
        Ok(index)
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
            if crate::child::is_unentered_child() {
                return Err(InitError::ChildMainMissing);
            }
            crate::spawn::raise_fd_limit();
        }
        let (chips, subs) = match options.mode {
            EndpointMode::InProcess => self.start_in_process()?,
            EndpointMode::ChildProcess => self.start_children()?,
        };
        let scheduler = Scheduler {
            engine: Arc::clone(&self.shared.engine),
            chips,
            subs,
            spin: SpinPolicy::new(options.scheduler_spin),
            shutdown_grace: options.shutdown_grace,
            task_timeout: options.task_timeout,
        };
        let pump = scheduler.into_pump();
        let _ = self.shared.pump.set(Arc::downgrade(&pump));
        let handle = std::thread::Builder::new()
            .name("pto-node-sched".to_string())
            .spawn(move || pump.run())
            .map_err(|e| InitError::Thread(e.to_string()))?;
        *self.shared.scheduler.lock() = Some(handle);
        Ok(())
    }

    /// See `WorkerShared::adopt_buffer`.
    pub(crate) fn adopt_buffer(
        &self,
        id: BufferId,
        memory: Memory,
        base: usize,
        len: usize,
    ) -> Arc<BufferInner> {
        self.shared.adopt_buffer(id, memory, base, len)
    }

    /// This Worker's options and registrations as a child spec (§6.1).
    pub(crate) fn spec(&self) -> WorkerSpec {
        let o = &self.shared.options;
        let ms = |d: Duration| d.as_millis().min(u128::from(u64::MAX)) as u64;
        let us = |d: Duration| d.as_micros().min(u128::from(u32::MAX)) as u32;
        WorkerSpec {
            level: o.level,
            chips: o.chip_specs.iter().map(chip_spec_to_boot).collect(),
            sub_workers: o.sub_workers as u32,
            heap_ring_size: o.heap_ring_size,
            max_queued_runs: o.max_queued_runs as u32,
            timeouts_ms: [
                ms(o.startup_timeout),
                ms(o.control_timeout),
                ms(o.heap_alloc_timeout),
                ms(o.close_timeout),
                ms(o.shutdown_grace),
            ],
            spin_us: [us(o.scheduler_spin), us(o.lane_spin), us(o.waiter_spin)],
            ring_env: o
                .ring_env
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
            strict_env: o.strict_env,
            track_war: o.track_war,
            callables: self
                .shared
                .callables
                .entries()
                .into_iter()
                .map(|(_, kind, name)| {
                    let code = match kind {
                        CallableKind::Chip => KindCode::Chip,
                        CallableKind::Sub => KindCode::Sub,
                        CallableKind::Node => KindCode::Node,
                    };
                    (code, name.to_string())
                })
                .collect(),
        }
    }

    /// Builds a NEW Worker from a child spec (the node child's side of §6.1): child-process
    /// mode, this executable as the grandchildren's image, the registrations replayed in order.
    pub(crate) fn from_spec(spec: &WorkerSpec, startup_budget: Duration) -> Result<Worker, String> {
        let ms = Duration::from_millis;
        let us = |v: u32| Duration::from_micros(u64::from(v));
        let mut b = Worker::builder(spec.level)
            .chips(spec.chips.len())
            .sub_workers(spec.sub_workers as usize)
            .endpoint_mode(EndpointMode::ChildProcess)
            .heap_ring_size(spec.heap_ring_size)
            .max_queued_runs(spec.max_queued_runs as usize)
            .startup_timeout(ms(spec.timeouts_ms[0]).min(startup_budget).max(ms(1)))
            .control_timeout(ms(spec.timeouts_ms[1]))
            .heap_alloc_timeout(ms(spec.timeouts_ms[2]))
            .close_timeout(ms(spec.timeouts_ms[3]))
            .shutdown_grace(ms(spec.timeouts_ms[4]))
            .spin_window(
                us(spec.spin_us[0]),
                us(spec.spin_us[1]),
                us(spec.spin_us[2]),
            )
            .strict_env(spec.strict_env)
            .track_war(spec.track_war);
        for (i, c) in spec.chips.iter().enumerate() {
            b = b.chip_spec(i, chip_spec_from_boot(c));
        }
        for (k, v) in &spec.ring_env {
            b = b.ring_env(OsStr::from_bytes(k), OsStr::from_bytes(v));
        }
        let w = b.build().map_err(|e| e.to_string())?;
        for (kind, name) in &spec.callables {
            let c = match kind {
                KindCode::Chip => Callable::chip(name),
                KindCode::Sub => Callable::sub(name),
                KindCode::Node => Callable::node(name),
            };
            w.register(c).map_err(|e| e.to_string())?;
        }
        Ok(w)
    }

    /// Lanes as threads of this process (§4.1 `InProcess`).
    fn start_in_process(&self) -> Result<Lanes, InitError> {
        let options = &self.shared.options;
        let heap = HeapRings::new(options.heap_ring_size, SpinPolicy::new(options.waiter_spin))
            .map_err(|e| InitError::ChildFailed {
                child: "heap rings".to_string(),
                pid: None,
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
                pid: None,
                message: e.to_string(),
            })?;
            let work = LaneWork::Chip {
                index: i,
                chip: Box::new(chip),
            };
            let ep = InProcessEndpoint::start(
                name,
                work,
                Arc::clone(&doorbell),
                lane_spin,
                options.lane_depth,
                Arc::clone(&self.shared.pump),
            )
            .map_err(|e| InitError::Thread(e.to_string()))?;
            chips.push(Box::new(ep));
        }
        Ok((chips, self.in_process_subs()?))
    }

    /// Sub workers as threads of this process (`sub[i]`): in-process mode, and child-process
    /// mode with `subs_in_process`.
    fn in_process_subs(&self) -> Result<Vec<Box<dyn Endpoint>>, InitError> {
        let options = &self.shared.options;
        let mut subs: Vec<Box<dyn Endpoint>> = Vec::with_capacity(options.sub_workers);
        for i in 0..options.sub_workers {
            let work = LaneWork::Sub {
                index: i,
                callables: Arc::clone(&self.shared.callables),
            };
            let ep = InProcessEndpoint::start(
                format!("sub[{i}]"),
                work,
                Arc::clone(&self.shared.engine.doorbell),
                SpinPolicy::new(options.lane_spin),
                options.lane_depth,
                Arc::clone(&self.shared.pump),
            )
            .map_err(|e| InitError::Thread(e.to_string()))?;
            subs.push(Box::new(ep));
        }
        Ok(subs)
    }

    /// Lanes as child processes (§4): the heap-ring segment, then `launch`.
    fn start_children(&self) -> Result<Lanes, InitError> {
        let options = &self.shared.options;
        let uid = self.shared.uid;
        let heap_seg = Segment::create(
            SegmentKey {
                owner: uid,
                segment: 0,
            },
            &format!("pto-{uid:x}-heap"),
            (options.heap_ring_size * HEAP_RINGS as u64) as usize,
        )
        .map(Arc::new)
        .map_err(|e| InitError::ChildFailed {
            child: "heap rings".to_string(),
            pid: None,
            message: e.to_string(),
        })?;
        self.shared.segments.lock().push(Arc::downgrade(&heap_seg));
        let heap = HeapRings::over(
            Memory::Shared(Arc::clone(&heap_seg)),
            options.heap_ring_size,
            SpinPolicy::new(options.waiter_spin),
        );
        let _ = self.shared.heap.set(Arc::new(heap));
        let node_specs: Vec<Vec<u8>> = self
            .shared
            .node_children
            .lock()
            .iter()
            .map(|w| w.spec().encode())
            .collect();
        let no_remote = options.remote_workers.is_empty();
        if options.level >= 4 && node_specs.is_empty() && no_remote && options.sub_workers == 0 {
            return Err(InitError::NoWorkers);
        }
        let remote = self.open_remotes()?;
        // With subs_in_process the children are the chips (and L3 nodes) only.
        let child_options = match options.subs_in_process {
            true => WorkerOptions {
                sub_workers: 0,
                ..options.clone()
            },
            false => options.clone(),
        };
        let launched = launch(
            &child_options,
            uid,
            &self.shared.callables,
            &self.shared.engine.doorbell,
            &heap_seg,
            &node_specs,
        )?;
        let mut chip_names: Vec<String> = remote.iter().map(|ep| ep.name().to_string()).collect();
        chip_names.extend(launched.chip_names);
        let (subs, sub_names) = match options.subs_in_process {
            true => {
                let subs = self.in_process_subs()?;
                let names = subs.iter().map(|ep| ep.name().to_string()).collect();
                (subs, names)
            }
            false => (launched.subs, launched.sub_names),
        };
        self.shared
            .engine
            .lock_state()
            .set_lane_names(chip_names, sub_names);
        self.shared
            .segments
            .lock()
            .push(Arc::downgrade(&launched.runtime.control));
        *self.shared.children.lock() = Some(launched.runtime);
        let mut chips = remote;
        chips.extend(launched.chips);
        Ok((chips, subs))
    }

    /// Opens a session on every remote worker (in parallel: each starts an L3 Worker there)
    /// and returns their lanes, in index order.
    fn open_remotes(&self) -> Result<Vec<Box<dyn Endpoint>>, InitError> {
        let remotes = &self.shared.options.remote_workers;
        let bell = Arc::clone(&self.shared.engine.doorbell);
        let on_lost: Arc<dyn Fn() + Send + Sync> = Arc::new(move || bell.notify_one());
        let opened: Vec<Result<crate::remote::Connection, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = remotes
                .iter()
                .map(|w| {
                    let on_lost = Arc::clone(&on_lost);
                    s.spawn(move || crate::remote::Connection::open(w, on_lost))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("the opening thread panicked".into()))
                })
                .collect()
        });
        let mut lanes: Vec<Box<dyn Endpoint>> = Vec::with_capacity(opened.len());
        let mut conns = Vec::with_capacity(opened.len());
        for (i, conn) in opened.into_iter().enumerate() {
            let conn = Arc::new(conn.map_err(|message| InitError::ChildFailed {
                child: format!("remote[{i}]"),
                pid: None,
                message,
            })?);
            conns.push(Arc::clone(&conn));
            let doorbell = Arc::clone(&self.shared.engine.doorbell);
            lanes.push(Box::new(crate::remote::endpoint::RemoteEndpoint::new(
                i,
                conn,
                doorbell,
                self.shared.options.lane_depth,
            )));
        }
        *self.shared.remotes.lock() = conns;
        Ok(lanes)
    }

    /// A buffer of `nbytes` zero bytes in the session of remote worker `worker` (level 4,
    /// after `init`): name its tensor in tasks for that worker; fill and read it with
    /// `write_from` / `read_vec` (gRPC streams).
    pub fn create_remote_buffer(
        &self,
        worker: usize,
        nbytes: usize,
    ) -> Result<crate::remote::RemoteBuffer, BufferError> {
        let conn = {
            let remotes = self.shared.remotes.lock();
            match remotes.get(worker) {
                Some(c) => Arc::clone(c),
                None if remotes.is_empty() => {
                    return Err(BufferError::NoRemote(
                        "this Worker has no open remote worker (remote workers open at init)"
                            .to_string(),
                    ));
                }
                None => {
                    return Err(BufferError::NoRemote(format!(
                        "no remote worker {worker} (this Worker has {})",
                        remotes.len()
                    )));
                }
            }
        };
        let id = BufferId {
            owner_uid: self.shared.uid,
            buffer_id: self.shared.next_buffer_id(),
            generation: 0,
        };
        let buffer = crate::remote::RemoteBuffer::create(conn, worker, id, nbytes)?;
        self.shared.buffers.insert(buffer.inner());
        Ok(buffer)
    }

    /// A host buffer of `nbytes` zero bytes that this Worker's tasks can use.
    pub fn create_buffer(&self, nbytes: usize) -> Result<HostBuffer, BufferError> {
        let id = BufferId {
            owner_uid: self.shared.uid,
            buffer_id: self.shared.next_buffer_id(),
            generation: 0,
        };
        let inner = match self.shared.options.mode {
            EndpointMode::InProcess => BufferInner::new_buffer(id, nbytes)?,
            EndpointMode::ChildProcess => {
                let uid = self.shared.uid;
                let seg = Segment::create(
                    SegmentKey {
                        owner: uid,
                        segment: id.buffer_id,
                    },
                    &format!("pto-{uid:x}-buf{}", id.buffer_id),
                    nbytes,
                )
                .map_err(|e| BufferError::Create {
                    bytes: nbytes,
                    reason: e.to_string(),
                })?;
                let seg = Arc::new(seg);
                let mut segments = self.shared.segments.lock();
                segments.retain(|w| w.strong_count() > 0);
                segments.push(Arc::downgrade(&seg));
                BufferInner::new_shared(id, seg)
            }
        };
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
            || (engine.lock_state().unfinished_runs() < max).then_some(()),
        );
        self.check_ready()?;
        let fence = engine.lock_state().open_run();
        let run_id = fence.run_id;
        let mut orch = Orchestrator::new(&self.shared, run_id, &config);
        let outcome = catch_unwind(AssertUnwindSafe(|| f(&mut orch, &args, &config)));
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(panic) => Some(OrchError::Panic(panic_message(panic.as_ref()))),
        };
        // A run that failed before its orchestration gave up (typically the orchestration
        // passing up `SubmitError::RunFailed` with `?`) is reported as that run's failure,
        // with its full report: the orchestration's error is a consequence, not the cause.
        let mut failure = failure;
        if let Some(e) = &failure {
            let mut state = engine.lock_state();
            let failed_first = state.run_has_failed(run_id);
            state.cancel_run(run_id, &format!("orchestration failed: {e}"), e.code());
            drop(state);
            if failed_first {
                tracing::debug!(run_id, "orchestration returned after its run failed: {e}");
                failure = None;
            }
        }
        orch.end_all_scopes();
        engine.lock_state().close_submission(run_id);
        drop(building);
        drop(build);
        let handle = RunHandle {
            fence,
            spin: self.shared.waiter_spin(),
            engine: Arc::clone(&self.shared.engine),
            pump: Arc::clone(&self.shared.pump),
            help_once: self.shared.options.mode == EndpointMode::InProcess,
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
        match handle.wait_taking() {
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
        self.shared.committed(chip, None)
    }

    /// Allocates a row-major `shape` of `dtype` in chip `worker`'s device memory (§1.3, §1.6);
    /// between runs only. Use its tensor in tasks for that chip; release it with `free`.
    pub fn alloc_child_tensor(
        &self,
        worker: usize,
        shape: &[u32],
        dtype: DType,
    ) -> Result<DeviceTensor, ControlError> {
        self.shared.alloc_child_tensor(worker, shape, dtype, None)
    }

    /// Copies the whole host buffer `src` into `dst` (equal sizes); between runs only.
    pub fn copy_to(&self, dst: &DeviceTensor, src: &HostBuffer) -> Result<(), ControlError> {
        self.shared.copy_to_device(dst, src, None)
    }

    /// Copies the whole device tensor `src` into the host buffer `dst` (equal sizes); between
    /// runs only.
    pub fn copy_from(&self, src: &DeviceTensor, dst: &HostBuffer) -> Result<(), ControlError> {
        self.shared.copy_from_device(src, dst, None)
    }

    /// Frees a device tensor; returns the bytes released. Between runs only.
    pub fn free(&self, t: DeviceTensor) -> Result<u64, ControlError> {
        self.shared.free_device(t, None)
    }

    /// Sends PING with `data` to chip `chip` (or, with `sub: true`, sub worker `chip`) and
    /// returns the echo: a health check through the worker's lane and mailbox. Runs only
    /// between runs, like every control command.
    pub fn ping(&self, worker: usize, sub: bool, data: &[u8]) -> Result<Vec<u8>, ControlError> {
        let lane = if sub {
            Lane::Sub(worker)
        } else {
            Lane::Chip(worker)
        };
        match self
            .shared
            .control(lane, ControlCmd::Ping(data.to_vec()), None)?
        {
            ControlReply::Echo(v) => Ok(v),
            _ => Err(ControlError::Endpoint {
                worker: format!("worker {worker}"),
                message: "unexpected reply to PING".to_string(),
            }),
        }
    }

    /// Live slots, unfinished runs and heap-ring use now.
    pub fn stats(&self) -> WorkerStats {
        let (live_tasks, unfinished_runs) = {
            let st = self.shared.engine.lock_state();
            (st.live_tasks(), st.unfinished_runs())
        };
        WorkerStats {
            live_tasks,
            unfinished_runs,
            heap_in_use: self.shared.heap.get().map_or([0; 4], |h| h.in_use()),
            lanes: self.shared.engine.lock_state().lane_stats(),
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
            || (engine.lock_state().unfinished_runs() == 0).then_some(()),
        );
        let abandoned_runs = match drained {
            Ok(()) => 0,
            Err(_) => engine
                .lock_state()
                .abandon_runs(&format!(
                    "EndpointFailure: the Worker closed after waiting close_timeout ({:?}) for the task",
                    self.shared.options.close_timeout
                )),
        };
        if let Some(rt) = &*self.shared.children.lock() {
            rt.shutdown_all();
        }
        engine.lock_state().stop = true;
        engine.doorbell.notify_one();
        let (detached_threads, killed_children) = match self.shared.scheduler.lock().take() {
            Some(handle) => handle.join().unwrap_or((0, 0)),
            None => (0, 0),
        };
        // Child-process mode: every child was asked to exit (and killed after the grace
        // period) by the scheduler's shutdown; the monitor reaps what is left and stops.
        if let Some(mut runtime) = self.shared.children.lock().take() {
            runtime.monitor.stop();
        }
        for seg in self.shared.segments.lock().drain(..) {
            if let Some(seg) = seg.upgrade() {
                seg.close_fd();
            }
        }
        self.shared.engine.doorbell.close_shared_fd();
        CloseReport {
            graceful: abandoned_runs == 0 && detached_threads == 0 && killed_children == 0,
            abandoned_runs,
            detached_threads,
            killed_children,
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
    /// A waiting thread helps: it makes a scheduler pass when the doorbell moved and no pass
    /// runs, so the run's tasks dispatch (and, from child processes, complete) without a hop
    /// to the scheduler thread. In-process lanes make their own passes, and a waiter that kept
    /// passing only contended with them (measured): there it helps once per wait, which
    /// dispatches what the orchestration function left ready.
    engine: Arc<Engine>,
    pump: PumpSlot,
    help_once: bool,
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

    /// Cancels the run: its tasks that have not started fail as skipped (`cancelled:
    /// <reason>`), tasks already running finish, and `wait` then returns the run's failure
    /// (kind `Cancelled`). A run that already completed is unchanged. For a caller that stops
    /// waiting (Ctrl-C in a host language) without leaving work behind.
    pub fn cancel(&self, reason: &str) {
        if self.is_finished() {
            return;
        }
        self.engine
            .lock_state()
            .cancel_by_caller(self.fence.run_id, reason);
        self.engine.doorbell.notify_one();
    }

    /// Whether the run has completed (successfully or not).
    pub fn is_finished(&self) -> bool {
        self.fence.result.lock().is_some()
    }

    /// Waits for the run; `Err(Timeout)` leaves it running. `None` waits without a limit
    /// (every run completes: tasks finish, fail, or are failed by `close`).
    /// One scheduler pass if the doorbell moved since `seen` and no pass runs; true if made.
    fn help(&self, seen: &mut Option<Epoch>) -> bool {
        let epoch = self.engine.doorbell.epoch();
        if *seen == Some(epoch) || (self.help_once && seen.is_some()) {
            return false;
        }
        *seen = Some(epoch);
        self.pump
            .get()
            .and_then(Weak::upgrade)
            .is_some_and(|p| p.try_pass())
    }

    /// `wait(None)` for the only handle of a run (`Worker::run`): moves the result out
    /// instead of copying every task report.
    fn wait_taking(self) -> Result<RunReport, WaitError> {
        let mut seen = None;
        match wait_until(&self.fence.done, self.spin, None, || {
            // Never hold the result's lock while helping: a pass may complete this run.
            let taken = self.fence.result.lock().take();
            if taken.is_some() || !self.help(&mut seen) {
                return taken;
            }
            self.fence.result.lock().take()
        }) {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(e)) => Err(WaitError::Failed(Box::new(e))),
            Err(_) => Err(WaitError::Timeout),
        }
    }

    pub fn wait(&self, timeout: Option<Duration>) -> Result<RunReport, WaitError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut seen = None;
        match wait_until(&self.fence.done, self.spin, deadline, || {
            // Never hold the result's lock while helping: a pass may complete this run.
            let found = self.fence.result.lock().clone();
            if found.is_some() || !self.help(&mut seen) {
                return found;
            }
            self.fence.result.lock().clone()
        }) {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(e)) => Err(WaitError::Failed(Box::new(e))),
            Err(_) => Err(WaitError::Timeout),
        }
    }
}
