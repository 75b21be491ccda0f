//! `ChipWorker`: one simulated chip that serves many runs (CHIP_RUNTIME.md §1.5).
//!
//! `run` is checkpoint C6 of RING_CONFIG.md §3.1: it re-validates the `CallConfig` (the chip
//! never trusts its input), resolves this run's ring sizing — non-zero `runtime_env` entries >
//! the chip's environment snapshot > defaults — checks the derived limits, binds an arena from
//! the cache (reserving device memory on a miss), logs the bind line, and runs the
//! orchestration on the calling thread while the chip's executor threads execute the
//! graph. The in-process endpoint and the chip child of later layers both call exactly this.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pto_types::ring_config::env::{EnvError, EnvSnapshot, EnvSource};
use pto_types::ring_config::resolve::{DerivedCapacities, ResolvedSizing};
use pto_types::wait::{SpinPolicy, Waiter};
use pto_types::{
    BufferId, BufferMemory, BufferRef, CallConfig, ErrorCode, RING_COUNT, Resource, TaskArgs,
    WarCheck,
};

use crate::callable::{ChipCallable, find_chip_callable};
use crate::diag::scope_stats::RunInfo;
use crate::diag::trace::TraceRun;
use crate::diag::{diagnostics_dir, json_text, write_file};
use crate::engine::ChipShared;
use crate::engine::core::panic_message;
use crate::engine::executor::executor_main;
use crate::engine::graph::Graph;
use crate::engine::heap::{HostRegion, RunMemory};
use crate::engine::orchestrator::help::Helper;
use crate::engine::orchestrator::{Carried, OrchCore, OrchSettings};
use crate::engine::run::{RunShared, Watch};
use crate::error::{BindError, ChipError, ChipRunError, Detector};
use crate::footprint::Footprint;
use crate::kernel::{CoreType, KernelCtx, KernelNameError, KernelRef, register_kernel_closure};
use crate::memory::arena::{AcquireError, ArenaCache, ArenaLease, ArenaOutcome};
use crate::memory::device::{AllocId, DeviceLedger, DeviceMemoryError, HOST_ADDR_BASE};
use crate::orch::{OrchArgs, OrchFn, OrchTensor, Scope};
use crate::plan::{Plan, PlanError};
use crate::spec::{ChipSpec, ChipSpecError, EffectiveChipSpec};
use crate::task_id::TaskId;
use crate::tensor::{AddrSpace, BufferAddr, RegionId, TensorDesc};
use crate::tensormap::TensorMap;

/// Where a run comes from: the chip index and, for runs dispatched by an L3, the label and the
/// L3 run and task ids (they name the diagnostics directory and appear in logs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunContext {
    pub chip: u32,
    pub label: Option<String>,
    /// `(run id, task index)` of the L3 task.
    pub l3: Option<(u64, u64)>,
}

/// Per-ring high-water marks of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingUsage {
    /// Most live tasks at once.
    pub task_window_peak: u64,
    /// Most heap bytes in use at once.
    pub heap_peak: u64,
    /// Most dep-list entries in use at once.
    pub dep_pool_peak: u64,
}

impl RingUsage {
    /// The high-water mark of `resource`.
    pub fn peak(&self, resource: pto_types::Resource) -> u64 {
        match resource {
            pto_types::Resource::TaskWindow => self.task_window_peak,
            pto_types::Resource::Heap => self.heap_peak,
            pto_types::Resource::DepPool => self.dep_pool_peak,
        }
    }
}

/// What a successful run reports.
#[derive(Clone, Debug)]
pub struct ChipRunReport {
    pub chip: u32,
    pub label: Option<String>,
    /// The sizing this run bound, with the source of every value.
    pub sizing: ResolvedSizing,
    pub derived: DerivedCapacities,
    pub footprint: Footprint,
    pub arena: ArenaOutcome,
    /// Problems of this chip's environment (kept from start-up).
    pub env_problems: Vec<String>,
    /// Tasks submitted (hidden alloc tasks included).
    pub tasks: u64,
    pub usage: [RingUsage; RING_COUNT],
    /// AICPU threads the run was configured with (`aicpu_thread_num`, validated against the chip).
    pub aicpu_threads: u32,
    pub wall: Duration,
    /// Diagnostics files written for this run.
    pub diagnostics: Vec<PathBuf>,
    /// What the run's checks found that did not fail it: today the write-after-read check's
    /// first hazard with the number found (`CallConfig::war_check` report).
    pub warnings: Vec<String>,
}

/// Why a chip could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ChipStartError {
    // Transparent: the wrapped error is the whole message (printing it as a source as well
    // would say everything twice).
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    Spec(#[from] ChipSpecError),
    #[error("cannot start chip threads: {0}")]
    Thread(std::io::Error),
}

struct ChipState {
    arenas: ArenaCache<()>,
    ledger: DeviceLedger,
    /// What the last run left to the next (the TensorMap and reusable memory); taken by the
    /// run in progress.
    carried: Option<Carried>,
    next_run_id: u64,
    /// Set when a kernel of a failed run did not return: later runs fail at once, naming it,
    /// until the kernel returns (the run's `running` count drops to 0).
    poisoned: Option<(String, Arc<RunShared>)>,
}

/// What checkpoint C6 hands the run: the thread count, the sizing and the entry tensors.
struct CheckedCall {
    threads: u32,
    plan: Plan,
    regions: Vec<HostRegion>,
    entry_tensors: Vec<TensorDesc>,
}

/// A simulated chip.
pub struct ChipWorker {
    spec: EffectiveChipSpec,
    env: EnvSnapshot,
    shared: Arc<ChipShared>,
    threads: Vec<JoinHandle<()>>,
    state: Mutex<ChipState>,
}

impl ChipWorker {
    /// Creates a chip: snapshots its environment (checkpoint C7; strict mode fails here), then
    /// starts its executor threads, all parked until a run arrives.
    pub fn new(spec: ChipSpec, env: EnvSource) -> Result<ChipWorker, ChipStartError> {
        spec.validate()?;
        let snapshot = EnvSnapshot::take(&env, spec.strict_env)?;
        for problem in &snapshot.problems {
            tracing::warn!(target: "pto::ring_config", "{problem}");
        }
        let effective = spec.effective(&snapshot.chip);
        let spin = SpinPolicy::new(effective.spin).with_pure_spin(effective.spin);
        let (executors, orchestrator_is_worker) = executor_count(effective.cores());
        let shared = Arc::new(ChipShared::new(
            effective.clusters,
            (executors, orchestrator_is_worker),
            spin,
            effective.scheduler_timeout,
        ));
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(ChipStartError::Thread)
        };
        for index in 0..executors {
            let chip = Arc::clone(&shared);
            match spawn(
                format!("pto-exec{index}"),
                Box::new(move || executor_main(chip, index)),
            ) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    shared.stop();
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(e);
                }
            }
        }
        let windows = [u64::from(Resource::TaskWindow.default_value() as u32); RING_COUNT];
        let tensormap = TensorMap::new(
            effective.tensormap_pool as usize,
            effective.tensormap_buckets as usize,
            windows,
        );
        let state = ChipState {
            arenas: ArenaCache::new(effective.arena_cache_entries),
            ledger: DeviceLedger::new(effective.device_memory_bytes),
            carried: Some(Carried::new(tensormap)),
            next_run_id: 1,
            poisoned: None,
        };
        Ok(ChipWorker {
            spec: effective,
            env: snapshot,
            shared,
            threads,
            state: Mutex::new(state),
        })
    }

    /// The chip's properties after the environment tier.
    pub fn spec(&self) -> &EffectiveChipSpec {
        &self.spec
    }

    /// The environment snapshot taken at start-up.
    pub fn env(&self) -> &EnvSnapshot {
        &self.env
    }

    /// Executor threads the chip started: its simulated cores, but never more than the host
    /// has CPUs, and one fewer when the orchestrator is a worker
    /// ([`ChipWorker::orchestrator_is_worker`]).
    pub fn executor_threads(&self) -> usize {
        self.shared.executors
    }

    /// Whether the thread that calls `run` is one of the chip's workers: the chip has at least
    /// as many simulated cores as the host has CPUs (two or more), so it started one executor
    /// fewer, and the orchestrator, while it waits for ring space or the end of the run, runs
    /// kernels seen to return (long ones too) and hands what it may not run to a stand-in
    /// thread; when it runs ahead of the chip it runs surplus quick work before it submits more
    /// (`docs/decisions/chip-engine.md`, "Threads").
    pub fn orchestrator_is_worker(&self) -> bool {
        self.shared.orchestrator_is_worker
    }

    /// Device memory accounted now (cached arenas and allocations).
    pub fn committed_device_memory(&self) -> u64 {
        self.state.lock().ledger.committed_bytes()
    }

    /// Allocates `bytes` of device memory (zeroed, lazily committed), evicting idle cached
    /// arenas if that makes it fit (chip memory control, NODE_RUNTIME.md §1.6). A tensor over
    /// it is passed to runs like any buffer: [`ChipWorker::device_buffer`].
    pub fn malloc(&self, bytes: u64, align: u64) -> Result<AllocId, DeviceMemoryError> {
        let mut state = self.state.lock();
        let state = &mut *state;
        if bytes > state.ledger.free_bytes() {
            let _ = state.arenas.make_room(bytes, &mut state.ledger);
        }
        state.ledger.malloc(bytes, align)
    }

    /// Frees a device allocation; returns its size.
    pub fn free(&self, id: AllocId) -> Result<u64, DeviceMemoryError> {
        self.state.lock().ledger.free(id)
    }

    /// A buffer reference to a device allocation, usable in `TaskArgs` of this chip's runs.
    /// The allocation stays alive while the reference does, even after `free`.
    pub fn device_buffer(&self, id: AllocId) -> Result<BufferRef, DeviceMemoryError> {
        let state = self.state.lock();
        let allocation = state
            .ledger
            .allocation(id)
            .ok_or(DeviceMemoryError::UnknownAllocation { id })?;
        let memory: Arc<dyn BufferMemory> =
            Arc::clone(allocation.memory()) as Arc<dyn BufferMemory>;
        Ok(BufferRef::with_memory(
            BufferId {
                owner_uid: DEVICE_BUFFER_OWNER,
                buffer_id: allocation.base(),
                generation: 0,
            },
            memory,
        ))
    }

    /// Copies `src` into a device allocation at `offset` (COPY_TO). Not while a run uses it.
    pub fn copy_to_device(
        &self,
        id: AllocId,
        offset: u64,
        src: &[u8],
    ) -> Result<(), DeviceMemoryError> {
        let state = self.state.lock();
        let allocation = state
            .ledger
            .allocation(id)
            .ok_or(DeviceMemoryError::UnknownAllocation { id })?;
        check_range(allocation.bytes(), offset, src.len() as u64)?;
        allocation.memory().write_bytes(offset as usize, src);
        Ok(())
    }

    /// Copies `len` bytes of a device allocation from `offset` (COPY_FROM).
    pub fn copy_from_device(
        &self,
        id: AllocId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, DeviceMemoryError> {
        let state = self.state.lock();
        let allocation = state
            .ledger
            .allocation(id)
            .ok_or(DeviceMemoryError::UnknownAllocation { id })?;
        check_range(allocation.bytes(), offset, len)?;
        Ok(allocation
            .memory()
            .read_bytes(offset as usize, len as usize))
    }

    /// Registers a kernel closure (in-process use; see `register_kernel_closure`).
    pub fn register_kernel_closure(
        &self,
        name: &str,
        core: CoreType,
        f: impl Fn(&mut KernelCtx<'_>) + Send + Sync + 'static,
    ) -> Result<KernelRef, KernelNameError> {
        register_kernel_closure(name, core, f)
    }

    /// Runs the chip callable registered as `callable`.
    pub fn run(
        &self,
        callable: &str,
        args: &TaskArgs,
        cfg: &CallConfig,
        ctx: &RunContext,
    ) -> Result<ChipRunReport, ChipRunError> {
        let Some(c) = find_chip_callable(callable) else {
            return Err(ChipRunError::Bind(BindError::UnknownCallable {
                name: callable.to_string(),
            }));
        };
        self.run_callable(c, args, cfg, ctx)
    }

    /// Runs an orchestration function that is not registered (in-process use and tests).
    pub fn run_fn(
        &self,
        orch: OrchFn,
        args: &TaskArgs,
        cfg: &CallConfig,
        ctx: &RunContext,
    ) -> Result<ChipRunReport, ChipRunError> {
        let c = ChipCallable {
            name: "<unregistered>",
            orch,
            expected_args: 0,
            listed: false,
        };
        self.run_callable(c, args, cfg, ctx)
    }

    /// Checkpoint C6: validate the configuration again, check the thread count, resolve and
    /// derive the sizing, check the arguments and register their host buffers.
    fn check_call(
        &self,
        callable: &ChipCallable,
        args: &TaskArgs,
        cfg: &CallConfig,
    ) -> Result<CheckedCall, ChipRunError> {
        let bind = |e: BindError| ChipRunError::Bind(e);
        cfg.validate()
            .map_err(|e| bind(BindError::InvalidConfig(e)))?;
        let threads = match cfg.aicpu_thread_num {
            0 => self.spec.max_aicpu_threads,
            n if n > self.spec.max_aicpu_threads => {
                return Err(bind(BindError::AicpuThreads {
                    requested: n,
                    chip_max: self.spec.max_aicpu_threads,
                }));
            }
            n => n,
        };
        let plan = Plan::resolve(&cfg.runtime_env, &self.env).map_err(|e| match e {
            PlanError::Config(e) => bind(BindError::InvalidConfig(e)),
            PlanError::Sizing(e) => bind(BindError::Sizing(e)),
        })?;
        args.check().map_err(|e| {
            bind(BindError::InvalidArgs {
                reason: e.to_string(),
            })
        })?;
        let (regions, entry_tensors) = register_host_buffers(args).map_err(bind)?;
        let given = args.tensors().len() + args.scalars().len();
        if given < callable.expected_args {
            return Err(ChipRunError::Run(Box::new(ChipError::new(
                ErrorCode::InvalidArgs,
                Detector::Immediate,
                format!(
                    "{} expects {} entry arguments, got {given}",
                    callable.name, callable.expected_args
                ),
            ))));
        }
        Ok(CheckedCall {
            threads,
            plan,
            regions,
            entry_tensors,
        })
    }

    fn run_callable(
        &self,
        callable: ChipCallable,
        args: &TaskArgs,
        cfg: &CallConfig,
        ctx: &RunContext,
    ) -> Result<ChipRunReport, ChipRunError> {
        let started = Instant::now();
        let bind = |e: BindError| ChipRunError::Bind(e);
        let mut state = self.state.lock();
        check_poisoned(&mut state, ctx)?;
        let CheckedCall {
            threads,
            plan,
            regions,
            entry_tensors,
        } = self.check_call(&callable, args, cfg)?;
        let (sizing, derived) = (plan.sizing, plan.derived);
        // Bind an arena for exactly this sizing.
        let state = &mut *state;
        let (lease, outcome) = state
            .arenas
            .acquire(&plan, ctx.chip, &mut state.ledger, |_| ())
            .map_err(|e| bind(acquire_error(e)))?;
        log_binding(ctx, &sizing, &outcome);
        let footprint = *lease.footprint();
        let memory = run_memory(&lease, regions);
        // Start the run.
        let run_id = state.next_run_id;
        state.next_run_id += 1;
        let windows: [u32; RING_COUNT] = std::array::from_fn(|r| sizing.task_window(r));
        let mut carried = state
            .carried
            .take()
            .expect("the chip holds what its last run left");
        let run = Arc::new(RunShared::new(
            run_id,
            Graph::new(
                windows,
                self.spec.clusters,
                std::mem::take(&mut carried.slots),
            ),
            cfg.enable_chip_swimlane,
            Arc::downgrade(&self.shared),
        ));
        self.shared.install(Some(Arc::clone(&run)));
        let war_check = cfg.war_check.resolved(cfg!(debug_assertions));
        let mut core = OrchCore::new(
            Arc::clone(&run),
            Arc::clone(&self.shared),
            sizing,
            derived.heap_bases,
            carried,
            memory,
            OrchSettings {
                clusters: self.spec.clusters,
                scope_stats: cfg.enable_scope_stats,
                // Flow arrows of swimlane level 2+ come from the recorded edges.
                dep_gen: cfg.enable_dep_gen || cfg.enable_chip_swimlane >= 2,
                alloc_backstop: self.spec.alloc_backstop,
                tensor_wait_timeout: self.spec.tensor_wait_timeout,
                spin: self.shared.spin,
                watchdog: self.spec.scheduler_timeout,
                root_site: callable.name,
                war: crate::engine::infer::WarPolicy {
                    track_all: cfg.track_war,
                    check: war_check != WarCheck::Off,
                },
                war_check,
            },
        );
        run_orchestration(&callable, &mut core, entry_tensors, args, &run);
        core.finish();
        let usage_marks = core.high_water();
        let tasks = core.tasks_submitted();
        let warnings = core.war_report();
        let poisoned = self.wait_for_end(&run);
        self.shared.install(None);
        let error = run.take_error();
        let diagnostics =
            self.write_diagnostics(cfg, ctx, &run, &mut core, &sizing, threads, error.as_ref());
        let mut carried = core.into_carried();
        if poisoned.is_none()
            && let Some(store) = run.lock_graph().take_store(&run)
        {
            carried.slots = store;
        }
        state.carried = Some(carried);
        state.arenas.release(lease, &mut state.ledger);
        if let Some(reason) = poisoned {
            state.poisoned = Some((reason, Arc::clone(&run)));
        }
        if let Some(error) = error {
            return Err(ChipRunError::Run(Box::new(error)));
        }
        Ok(ChipRunReport {
            chip: ctx.chip,
            label: ctx.label.clone(),
            sizing,
            derived,
            footprint,
            arena: outcome,
            env_problems: self.env.problems.iter().map(|p| p.to_string()).collect(),
            tasks,
            usage: usage_marks.map(|(live, heap, dep)| RingUsage {
                task_window_peak: live,
                heap_peak: heap,
                dep_pool_peak: dep,
            }),
            aicpu_threads: threads,
            wall: started.elapsed(),
            diagnostics,
            warnings,
        })
    }

    /// Writes the enabled diagnostics into the run's directory; a write failure is logged and
    /// does not fail the run. Returns the files written.
    #[allow(clippy::too_many_arguments)]
    fn write_diagnostics(
        &self,
        cfg: &CallConfig,
        ctx: &RunContext,
        run: &RunShared,
        core: &mut OrchCore,
        sizing: &ResolvedSizing,
        threads: u32,
        error: Option<&ChipError>,
    ) -> Vec<PathBuf> {
        let Some(prefix) = &cfg.output_prefix else {
            return Vec::new();
        };
        let dir = diagnostics_dir(Path::new(prefix), ctx);
        let mut files = Vec::new();
        let mut write = |sub: &str, name: &str, contents: String| match write_file(
            &dir, sub, name, &contents,
        ) {
            Ok(path) => files.push(path),
            Err(e) => tracing::warn!(
                target: "pto::diag",
                "cannot write {}: {e}",
                dir.join(sub).join(name).display()
            ),
        };
        if let Some(stats) = core.scope_stats.take() {
            let run_info = RunInfo {
                sizing,
                label: ctx.label.as_deref(),
                clusters: self.spec.clusters,
                aicpu_thread_num: threads,
                tensormap_max: core.tensormap.capacity(),
                total: core.tasks_submitted(),
                error,
            };
            write("scope_stats", "scope_stats.jsonl", stats.render(&run_info));
        }
        let deps = core.deps.take();
        if let (Some(graph), true) = (&deps, cfg.enable_dep_gen) {
            write("dep_gen", "deps.json", json_text(&graph.to_deps()));
            write("dep_gen", "deps.dot", graph.to_dot());
        }
        if let Some(trace) = &run.trace {
            let edges: Vec<(TaskId, TaskId)> = deps
                .as_ref()
                .map(|g| g.edge_pairs().collect())
                .unwrap_or_default();
            let trace_run = TraceRun {
                level: cfg.enable_chip_swimlane,
                chip: ctx.chip,
                label: ctx.label.as_deref(),
                clusters: self.spec.clusters,
                aicpu_thread_num: threads,
                sizing,
                error,
            };
            let text = trace
                .lock()
                .render(&trace_run, self.shared.scheduler_lanes(), &edges);
            write("swimlane", "chip_swimlane.json", text);
        }
        files
    }

    /// Waits until the run has finished. After a failure, a kernel that never returns would
    /// keep its core forever: after the scheduler timeout the run returns anyway and the chip
    /// is poisoned (returned as `Some(reason)`).
    fn wait_for_end(&self, run: &Arc<RunShared>) -> Option<String> {
        let mut waiter = Waiter::new(&run.done, self.shared.spin);
        let mut cancelled_at: Option<Instant> = None;
        let mut watch = Watch::default();
        let mut helper = Helper::new(run, &self.shared);
        loop {
            if run.is_finished() {
                return None;
            }
            if helper.help_or_step_away(&mut waiter) {
                continue;
            }
            let now = Instant::now();
            let deadline = if !run.is_cancelled() {
                watch.check(run, self.spec.scheduler_timeout)
            } else {
                let since = *cancelled_at.get_or_insert(now);
                if now - since >= self.spec.scheduler_timeout {
                    let census = run.lock_graph().stall_census();
                    return Some(format!(
                        "{} kernel block(s) of run {} did not return after the run failed ({})",
                        run.running.load(Ordering::Acquire),
                        run.id,
                        census.first.as_deref().unwrap_or("task unknown")
                    ));
                }
                Some(since + self.spec.scheduler_timeout)
            };
            let _ = waiter.wait(deadline);
            helper.after_wait();
        }
    }
}

impl Drop for ChipWorker {
    fn drop(&mut self) {
        self.shared.stop();
        let poisoned = self
            .state
            .lock()
            .poisoned
            .as_ref()
            .is_some_and(|(_, run)| run.running.load(Ordering::Acquire) > 0);
        let gangs = self
            .shared
            .gangs
            .iter()
            .filter_map(|g| g.thread.lock().take());
        let stand_in = self.shared.stand_in.cell.thread.lock().take();
        let threads: Vec<JoinHandle<()>> = self
            .threads
            .drain(..)
            .chain(gangs)
            .chain(stand_in)
            .collect();
        if poisoned {
            // A thread stuck in a kernel cannot be joined; leave the threads detached.
            return;
        }
        for t in threads {
            let _ = t.join();
        }
    }
}

/// `owner_uid` of buffer identities that name device allocations (their `buffer_id` is the
/// allocation's device address, unique and never reused on a chip).
pub const DEVICE_BUFFER_OWNER: u64 = u64::MAX;

/// `offset + len` must lie inside an allocation of `bytes`.
fn check_range(bytes: u64, offset: u64, len: u64) -> Result<(), DeviceMemoryError> {
    match offset.checked_add(len) {
        Some(end) if end <= bytes => Ok(()),
        _ => Err(DeviceMemoryError::OutOfRange { offset, len, bytes }),
    }
}

fn acquire_error(e: AcquireError) -> BindError {
    match e {
        AcquireError::Sizing(s) => BindError::Sizing(s),
        AcquireError::Device(d) => BindError::DeviceMemory {
            reason: d.to_string(),
        },
    }
}

/// Registers each distinct host buffer of `args` as a region and converts the entry tensors.
fn register_host_buffers(args: &TaskArgs) -> Result<(Vec<HostRegion>, Vec<TensorDesc>), BindError> {
    let mut regions: Vec<HostRegion> = Vec::new();
    let mut ids = Vec::new();
    let mut tensors = Vec::with_capacity(args.tensors().len());
    const REGION_SPAN: u64 = 1 << 40;
    for (i, (_tag, t)) in args.tensors().iter().enumerate() {
        let buffer = t.buffer();
        let Some(memory) = buffer.memory() else {
            return Err(BindError::InvalidArgs {
                reason: format!("entry tensor {i}: its buffer is not mapped in this process"),
            });
        };
        let index = match ids.iter().position(|id| *id == buffer.id()) {
            Some(index) => index,
            None => {
                let index = regions.len();
                regions.push(HostRegion {
                    ptr: memory.as_ptr(),
                    bytes: memory.len() as u64,
                    device_base: HOST_ADDR_BASE + index as u64 * REGION_SPAN,
                });
                ids.push(buffer.id());
                index
            }
        };
        let region = regions[index];
        let elem = t.dtype().size() as u64;
        let strides: Vec<u64> = t.strides().iter().map(|&s| u64::from(s)).collect();
        let desc = TensorDesc::new(
            BufferAddr {
                space: AddrSpace::Host,
                region: RegionId(index as u32),
                base: region.device_base,
                bytes: region.bytes,
            },
            t.byte_offset() / elem,
            t.shape(),
            &strides,
            t.dtype(),
        )
        .map_err(|e| BindError::InvalidArgs {
            reason: format!("entry tensor {i}: {e}"),
        })?;
        tensors.push(desc);
    }
    Ok((regions, tensors))
}

/// Host pointers of a run's memory: the arena's heap and the entry tensors' host buffers.
fn run_memory(lease: &ArenaLease<()>, regions: Vec<HostRegion>) -> RunMemory {
    let heap = lease.heap_range();
    RunMemory {
        heap_ptr: lease.heap_ptr(),
        heap_device_base: heap.base,
        heap_len: heap.bytes,
        regions,
    }
}

/// The bind log line of a run (target `pto::ring_config`).
fn log_binding(ctx: &RunContext, sizing: &ResolvedSizing, outcome: &ArenaOutcome) {
    tracing::info!(
        target: "pto::ring_config",
        "ring sizing chip={} task={} {} arena={}",
        ctx.chip,
        ctx.label.as_deref().unwrap_or("-"),
        sizing,
        match outcome {
            ArenaOutcome::Hit => "hit",
            ArenaOutcome::Miss { .. } => "miss",
        }
    );
}

/// Fails at once while a kernel of an earlier failed run has not returned; clears the mark
/// once it has.
fn check_poisoned(state: &mut ChipState, ctx: &RunContext) -> Result<(), ChipRunError> {
    if let Some((reason, stuck)) = &state.poisoned {
        if stuck.running.load(Ordering::Acquire) > 0 {
            return Err(ChipRunError::Bind(BindError::Poisoned {
                reason: reason.clone(),
            }));
        }
        tracing::info!(target: "pto::chip", "chip {}: the stuck kernel returned; the chip is usable again", ctx.chip);
        state.poisoned = None;
    }
    Ok(())
}

/// Runs the user's orchestration function on this thread; a panic fails the run (ORCH_PANIC).
fn run_orchestration(
    callable: &ChipCallable,
    core: &mut OrchCore,
    entry_tensors: Vec<TensorDesc>,
    args: &TaskArgs,
    run: &RunShared,
) {
    let orch_args = OrchArgs {
        tensors: entry_tensors.into_iter().map(OrchTensor::new).collect(),
        scalars: args.scalars().to_vec(),
    };
    let outcome_of_orch = catch_unwind(AssertUnwindSafe(|| {
        let mut root = Scope::root(core);
        (callable.orch)(&mut root, &orch_args)
    }));
    if let Err(panic) = outcome_of_orch {
        run.latch_orch(ChipError::new(
            ErrorCode::OrchPanic,
            Detector::Immediate,
            format!(
                "orchestration {} panicked: {}",
                callable.name,
                panic_message(panic.as_ref())
            ),
        ));
    }
}

/// Executor threads of a chip with `cores` simulated cores, and whether the orchestrator's
/// thread is its last worker ([`ChipShared::orchestrator_is_worker`]): never more threads that
/// run kernels than the host can run at once, since a kernel is CPU work on this simulator.
/// When the cores outnumber the host's CPUs, one executor fewer: the orchestrator's thread
/// needs a CPU too, and while it waits it runs kernels (`docs/decisions/chip-engine.md`,
/// "Threads").
fn executor_count(cores: u32) -> (usize, bool) {
    let host = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    executors_on(cores as usize, host)
}

/// [`executor_count`] on a host of `host` CPUs.
fn executors_on(cores: usize, host: usize) -> (usize, bool) {
    if host >= 2 && cores >= host {
        (host - 1, true)
    } else {
        (cores.min(host).max(1), false)
    }
}

#[cfg(test)]
mod tests {
    use pto_types::{CallConfig, DType, TaskArgs};

    use super::*;
    use crate::kernel::CoreType;
    use crate::orch::{KernelArgs, OrchArgs, RootScope, TensorCreateInfo};
    use crate::spec::ChipSpec;

    crate::register_kernel!(
        // The macro makes the static `pub`, for kernels an orchestration crate exports.
        #[allow(unreachable_pub)]
        WAITS = "test.worker.waits",
        CoreType::Aiv,
        wait_for_cancel
    );

    /// Returns once its run is cancelled (at most 10 s).
    fn wait_for_cancel(ctx: &mut crate::kernel::KernelCtx<'_>) {
        let until = Instant::now() + Duration::from_secs(10);
        while !ctx.cancelled() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Five hidden alloc tasks: complete at publication, consumed when the root scope ends.
    fn clean<'r>(s: &mut RootScope<'r>, _: &OrchArgs<'r>) -> crate::error::OrchResult<()> {
        for _ in 0..5 {
            s.alloc_tensors(&[TensorCreateInfo::new(&[4], DType::F32)])?;
        }
        Ok(())
    }

    /// A task that runs until the run fails, and a reader of its output that is published
    /// (its scope's end publishes it) before the orchestration fails the run: the reader never
    /// runs, so it is never consumed.
    fn failing<'r>(s: &mut RootScope<'r>, _: &OrchArgs<'r>) -> crate::error::OrchResult<()> {
        let out = TensorCreateInfo::new(&[4], DType::F32);
        let t = s
            .submit_aiv(WAITS, KernelArgs::new().output(out))?
            .tensor(0);
        s.scope(|s| {
            let next = TensorCreateInfo::new(&[4], DType::F32);
            s.submit_aiv(WAITS, KernelArgs::new().input(t).output(next))
                .map(|_| ())
        })?;
        Err(s.report_fatal("the test fails this run"))
    }

    fn kept_slots(chip: &ChipWorker) -> usize {
        let state = chip.state.lock();
        state.carried.as_ref().expect("between runs").slots.len()
    }

    /// `Carried`: the chip keeps the slot records of a run whose every task was consumed for
    /// the next run, and gives up those of a run that left a task unconsumed.
    #[test]
    fn a_chip_keeps_a_clean_runs_slot_records_and_not_those_of_a_run_left_unconsumed() {
        let chip = ChipWorker::new(ChipSpec::default(), EnvSource::empty()).unwrap();
        let (args, cfg, ctx) = (
            TaskArgs::new(),
            CallConfig::default(),
            RunContext::default(),
        );
        assert_eq!(kept_slots(&chip), 0);
        chip.run_fn(clean, &args, &cfg, &ctx).unwrap();
        assert_eq!(kept_slots(&chip), 5, "one record per task of the clean run");
        let failed = chip.run_fn(failing, &args, &cfg, &ctx).unwrap_err();
        assert!(
            failed.to_string().contains("the test fails this run"),
            "{failed}"
        );
        assert_eq!(kept_slots(&chip), 0, "the reader was never consumed");
        chip.run_fn(clean, &args, &cfg, &ctx).unwrap();
        assert_eq!(kept_slots(&chip), 5);
    }

    static SPUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    crate::register_kernel!(
        #[allow(unreachable_pub)]
        SPINS = "test.worker.spins",
        CoreType::Aiv,
        spin_a_while
    );

    /// Runs for about 2 µs (a short kernel, not one under `SHORT_KERNEL_NS`), then counts.
    fn spin_a_while(_ctx: &mut crate::kernel::KernelCtx<'_>) {
        let until = Instant::now() + Duration::from_micros(2);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        SPUN.fetch_add(1, Ordering::SeqCst);
    }

    /// Rounds of three submits, each followed by a wait in the orchestration's own code (no
    /// runtime call, which would publish what it left) until they ran, 10 s at most.
    fn submit_then_wait_in_user_code<'r>(
        s: &mut RootScope<'r>,
        _: &OrchArgs<'r>,
    ) -> crate::error::OrchResult<()> {
        let base = SPUN.load(Ordering::SeqCst);
        for round in 1..=2_000u64 {
            for _ in 0..3 {
                s.submit_aiv(SPINS, KernelArgs::new())?;
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while SPUN.load(Ordering::SeqCst) < base + 3 * round {
                if Instant::now() > deadline {
                    return Err(s.report_fatal(format!("round {round}: a task did not run")));
                }
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// HO4: a submit while every executor is busy leaves its task unpublished for a later hold;
    /// an executor that runs out of work publishes it, so an orchestration that then waits in
    /// its own code for that task never waits for ever. With one executor (every 2-CPU host,
    /// where the orchestrator is the other worker) it is busy with the round's first task
    /// whenever the next are submitted, so tasks are left in every run; with more executors
    /// than a round keeps busy none may be, and the test only checks that every task ran.
    #[test]
    fn a_task_left_unpublished_runs_while_the_orchestration_waits_in_its_own_code() {
        let chip = ChipWorker::new(ChipSpec::default(), EnvSource::empty()).unwrap();
        let (args, cfg, ctx) = (
            TaskArgs::new(),
            CallConfig::default(),
            RunContext::default(),
        );
        chip.run_fn(submit_then_wait_in_user_code, &args, &cfg, &ctx)
            .unwrap();
        if chip.shared.executors == 1 {
            let left = chip.shared.tasks_left.load(Ordering::Relaxed);
            assert!(left > 0, "no task was left: the test did not test HO4");
        }
    }

    #[test]
    fn the_orchestrator_is_the_last_worker_when_the_cores_outnumber_the_cpus() {
        // (cores, host CPUs) → (executors, orchestrator is a worker)
        assert_eq!(executors_on(72, 2), (1, true));
        assert_eq!(executors_on(3, 2), (1, true));
        assert_eq!(executors_on(3, 3), (2, true));
        assert_eq!(executors_on(72, 64), (63, true));
        // A CPU for every core and one for the orchestrator: as many executors as cores.
        assert_eq!(executors_on(3, 4), (3, false));
        assert_eq!(executors_on(1, 2), (1, false));
        // One CPU: one executor, and no worker to spare.
        assert_eq!(executors_on(72, 1), (1, false));
    }
}
