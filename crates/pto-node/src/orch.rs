//! The `Orchestrator` facade handed to an L3 orchestration function (NODE_RUNTIME.md §1.5,
//! §2.4, §2.5 step 1).
//!
//! Every `submit_*` validates synchronously, **without** the engine lock, before anything is
//! created (checkpoint C3 of RING_CONFIG.md §3.1): handle, `CallConfig::validate` (errors name
//! field, ring and value), worker ids, argument lists, buffers (each tensor must name a live
//! buffer of this Worker: `create_buffer` or `alloc`), and overlapping write-tagged tensors.
//! A rejected submit claims no slot, changes no TensorMap and does not fail the run; the
//! orchestration decides (`?` propagates and fails it). Then one engine-lock section does the
//! rest of §2.5 (fail-fast, claim, dependencies, fan-in, publication).
//!
//! Scopes are a stack of frames touched only by the submitting thread; the run's outer scope is
//! depth 0. Every task and every `alloc` slab takes a reference in the innermost frame, released
//! when the frame is popped — on every exit path, including unwinding.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;

use pto_types::geometry::Overlap;
use pto_types::{BufferId, CallConfig, DType, TaskArgs, Tensor};

use crate::buffer::{BufferInner, HostBuffer};
use crate::callable::{CallableHandle, CallableKind};
use crate::device::DeviceTensor;
use crate::engine::tensormap::BufferKey;
use crate::engine::{Access, NewTask, Placement, SlotId};
use crate::error::{AllocError, ControlError, OrchError, ScopeError, SubmitError};
use crate::heap::HEAP_RINGS;
use crate::report::{NodeTaskId, TaskKind};
use crate::worker::WorkerShared;

/// Deepest scope nesting, the run's outer scope included.
pub const MAX_SCOPE_DEPTH: usize = 64;

enum ScopeItem {
    Task(SlotId),
    Slab(Arc<BufferInner>),
}

/// Builds one run's task graph; valid only while the run builds (the lifetime ties it to the
/// orchestration function's call).
pub struct Orchestrator<'run> {
    shared: &'run WorkerShared,
    run_id: u64,
    base: &'run CallConfig,
    frames: Vec<Vec<ScopeItem>>,
    submitted: u32,
    warned_blank_config: bool,
}

/// A member's arguments and the buffer behind each tensor.
type Member = (TaskArgs, Vec<Arc<BufferInner>>);

/// One member's checked arguments.
struct Prepared {
    args: TaskArgs,
    buffers: Vec<Arc<BufferInner>>,
    accesses: Vec<Access>,
}

impl<'run> Orchestrator<'run> {
    pub(crate) fn new(shared: &'run WorkerShared, run_id: u64, base: &'run CallConfig) -> Self {
        Orchestrator {
            shared,
            run_id,
            base,
            frames: vec![Vec::new()],
            submitted: 0,
            warned_blank_config: false,
        }
    }

    /// This run's id.
    pub fn run_id(&self) -> u64 {
        self.run_id
    }

    /// The run's base config (what `submit` received).
    pub fn base_config(&self) -> &CallConfig {
        self.base
    }

    /// Number of next-level workers (chips at L3, Worker children at L4).
    pub fn next_level_workers(&self) -> usize {
        self.shared.next_level_workers()
    }

    /// The handle of a callable registered on this Worker, by kind and name — how a node
    /// function (running in an L3 child) finds the chip and sub callables it submits.
    pub fn callable(&self, kind: CallableKind, name: &str) -> Result<CallableHandle, SubmitError> {
        self.shared
            .callables
            .lookup(kind, name)
            .ok_or(SubmitError::StaleHandle)
    }

    pub fn sub_workers(&self) -> usize {
        self.shared.options.sub_workers
    }

    /// Tasks this function submitted successfully so far.
    pub fn submitted_tasks(&self) -> u32 {
        self.submitted
    }

    /// Entries in this run's TensorMap now (diagnostics and tests).
    pub fn tensormap_entries(&self) -> usize {
        self.shared.engine.lock_state().tensormap_len(self.run_id)
    }

    /// Current scope depth (0 = the run's outer scope).
    pub fn depth(&self) -> usize {
        self.frames.len() - 1
    }

    /// One L2 task on chip `worker`, run with `config` (stored by value).
    pub fn submit_next_level(
        &mut self,
        h: &CallableHandle,
        args: TaskArgs,
        config: &CallConfig,
        worker: usize,
    ) -> Result<NodeTaskId, SubmitError> {
        let callable = self.shared.callables.check(h, self.next_level_kind())?;
        config.validate().map_err(SubmitError::InvalidConfig)?;
        self.check_worker(worker)?;
        let label = args.label_str().map(str::to_string);
        let p = self.prepare(args, None, Some(worker))?;
        let id = self.push(NewTask {
            kind: TaskKind::NextLevel,
            callable_id: h.id(),
            callable,
            label: label.clone(),
            config: Some(config.clone()),
            members: vec![(p.args, p.buffers)],
            placement: Placement::Chips(vec![worker]),
            accesses: p.accesses,
        })?;
        self.warn_blank_config(id, label.as_deref(), config);
        Ok(id)
    }

    /// One task of `args_list.len()` members: member i runs `args_list[i]` on `workers[i]`;
    /// all start together. One config for all members, validated once. The task's label is
    /// member 0's.
    pub fn submit_next_level_group(
        &mut self,
        h: &CallableHandle,
        args_list: Vec<TaskArgs>,
        config: &CallConfig,
        workers: &[usize],
    ) -> Result<NodeTaskId, SubmitError> {
        let callable = self.shared.callables.check(h, self.next_level_kind())?;
        config.validate().map_err(SubmitError::InvalidConfig)?;
        if args_list.len() != workers.len() || workers.is_empty() {
            return Err(SubmitError::GroupSizeMismatch {
                args: args_list.len(),
                workers: workers.len(),
            });
        }
        for (i, &w) in workers.iter().enumerate() {
            self.check_worker(w)?;
            if workers[..i].contains(&w) {
                return Err(SubmitError::DuplicateWorker { worker: w });
            }
        }
        let label = args_list[0].label_str().map(str::to_string);
        let (members, accesses) = self.prepare_all(args_list, Some(workers))?;
        let id = self.push(NewTask {
            kind: TaskKind::NextLevel,
            callable_id: h.id(),
            callable,
            label: label.clone(),
            config: Some(config.clone()),
            members,
            placement: Placement::Chips(workers.to_vec()),
            accesses,
        })?;
        self.warn_blank_config(id, label.as_deref(), config);
        Ok(id)
    }

    /// A host task on any idle sub worker (no CallConfig).
    pub fn submit_sub(
        &mut self,
        h: &CallableHandle,
        args: TaskArgs,
    ) -> Result<NodeTaskId, SubmitError> {
        self.submit_sub_group(h, vec![args])
    }

    /// `args_list.len()` host tasks on as many distinct sub workers, started together.
    pub fn submit_sub_group(
        &mut self,
        h: &CallableHandle,
        args_list: Vec<TaskArgs>,
    ) -> Result<NodeTaskId, SubmitError> {
        let callable = self.shared.callables.check(h, CallableKind::Sub)?;
        let size = args_list.len();
        let sub_workers = self.shared.options.sub_workers;
        if size == 0 {
            return Err(SubmitError::GroupSizeMismatch {
                args: 0,
                workers: 0,
            });
        }
        if size > sub_workers {
            return Err(SubmitError::GroupTooLarge { size, sub_workers });
        }
        let label = args_list[0].label_str().map(str::to_string);
        let (members, accesses) = self.prepare_all(args_list, None)?;
        self.push(NewTask {
            kind: TaskKind::Sub,
            callable_id: h.id(),
            callable,
            label,
            config: None,
            members,
            placement: Placement::Subs(size),
            accesses,
        })
    }

    /// Runs `f` in a nested scope; the scope's references are released however `f` exits.
    pub fn scope<R>(
        &mut self,
        f: impl FnOnce(&mut Orchestrator<'run>) -> Result<R, OrchError>,
    ) -> Result<R, OrchError> {
        if self.frames.len() >= MAX_SCOPE_DEPTH {
            return Err(ScopeError::TooDeep {
                max: MAX_SCOPE_DEPTH,
            }
            .into());
        }
        self.frames.push(Vec::new());
        let outcome = catch_unwind(AssertUnwindSafe(|| f(self)));
        let frame = self.frames.pop().expect("the scope's frame");
        self.release(frame);
        match outcome {
            Ok(r) => r,
            Err(panic) => resume_unwind(panic),
        }
    }

    /// Opens a nested scope without a closure, for host languages whose scopes are blocks
    /// (Python's `with orch.scope():`). Pair it with [`exit_scope`](Self::exit_scope); scopes
    /// still open when the orchestration function returns end then.
    pub fn enter_scope(&mut self) -> Result<(), ScopeError> {
        if self.frames.len() >= MAX_SCOPE_DEPTH {
            return Err(ScopeError::TooDeep {
                max: MAX_SCOPE_DEPTH,
            });
        }
        self.frames.push(Vec::new());
        Ok(())
    }

    /// Ends the innermost scope opened by [`enter_scope`](Self::enter_scope), releasing its
    /// references; the run's outer scope cannot be ended this way.
    pub fn exit_scope(&mut self) -> Result<(), ScopeError> {
        if self.frames.len() <= 1 {
            return Err(ScopeError::NotOpen);
        }
        let frame = self.frames.pop().expect("a nested scope's frame");
        self.release(frame);
        Ok(())
    }

    /// A row-major intermediate of `shape` from heap ring `min(depth, 3)`, reclaimed when its
    /// scope ended and no unfinished task uses it. Tag it `InOut` in the task that writes it so
    /// readers follow the writer.
    pub fn alloc(&mut self, shape: &[u32], dtype: DType) -> Result<Tensor, AllocError> {
        let heap = self
            .shared
            .heap
            .get()
            .expect("a building run implies an initialised Worker");
        let numel = shape
            .iter()
            .try_fold(1u64, |acc, &n| acc.checked_mul(u64::from(n)));
        let Some(bytes) = numel.and_then(|n| n.checked_mul(dtype.size() as u64)) else {
            return Err(AllocError::BadShape {
                reason: format!("{shape:?} of {dtype} overflows"),
            });
        };
        let ring = self.depth().min(HEAP_RINGS - 1);
        let slab = heap.alloc(ring, bytes, self.shared.options.heap_alloc_timeout)?;
        let id = BufferId {
            owner_uid: self.shared.uid,
            buffer_id: self.shared.next_buffer_id(),
            generation: 0,
        };
        let inner = BufferInner::new_slab(
            id,
            Arc::clone(heap),
            ring,
            slab.id,
            slab.base,
            bytes as usize,
            slab.scope_held,
        );
        let tensor = match Tensor::contiguous(inner.buffer_ref(), shape, dtype) {
            Ok(t) => t,
            Err(e) => {
                inner.release_scope();
                return Err(AllocError::BadShape {
                    reason: e.to_string(),
                });
            }
        };
        self.shared.buffers.insert(&inner);
        self.frames
            .last_mut()
            .expect("the outer scope")
            .push(ScopeItem::Slab(inner));
        Ok(tensor)
    }

    /// Chip control inside a run (§1.6): only before the run's first submit; the call first
    /// waits until this run heads the FIFO (every earlier run completed).
    fn control_run(&self) -> Result<Option<u64>, ControlError> {
        if self.submitted > 0 {
            return Err(ControlError::AfterFirstSubmit);
        }
        Ok(Some(self.run_id))
    }

    /// `Worker::alloc_child_tensor` inside the run, before its first submit.
    pub fn alloc_child_tensor(
        &mut self,
        worker: usize,
        shape: &[u32],
        dtype: DType,
    ) -> Result<DeviceTensor, ControlError> {
        let run = self.control_run()?;
        self.shared.alloc_child_tensor(worker, shape, dtype, run)
    }

    /// `Worker::copy_to` inside the run, before its first submit.
    pub fn copy_to(&mut self, dst: &DeviceTensor, src: &HostBuffer) -> Result<(), ControlError> {
        let run = self.control_run()?;
        self.shared.copy_to_device(dst, src, run)
    }

    /// `Worker::copy_from` inside the run, before its first submit.
    pub fn copy_from(&mut self, src: &DeviceTensor, dst: &HostBuffer) -> Result<(), ControlError> {
        let run = self.control_run()?;
        self.shared.copy_from_device(src, dst, run)
    }

    /// `Worker::free` inside the run, before its first submit.
    pub fn free(&mut self, t: DeviceTensor) -> Result<u64, ControlError> {
        let run = self.control_run()?;
        self.shared.free_device(t, run)
    }

    /// `Worker::committed_device_memory` inside the run, before its first submit.
    pub fn committed_device_memory(&mut self, chip: usize) -> Result<u64, ControlError> {
        let run = self.control_run()?;
        self.shared.committed(chip, run)
    }

    /// Pops every frame (the run's function returned or failed).
    pub(crate) fn end_all_scopes(&mut self) {
        while let Some(frame) = self.frames.pop() {
            self.release(frame);
        }
    }

    fn release(&self, frame: Vec<ScopeItem>) {
        let mut tasks = Vec::new();
        let mut slabs = Vec::new();
        for item in frame {
            match item {
                ScopeItem::Task(id) => tasks.push(id),
                ScopeItem::Slab(b) => slabs.push(b),
            }
        }
        self.shared.engine.lock_state().release_scope(&tasks);
        for b in slabs {
            b.release_scope();
        }
    }

    fn next_level_kind(&self) -> CallableKind {
        if self.shared.options.level >= 4 {
            CallableKind::Node
        } else {
            CallableKind::Chip
        }
    }

    fn check_worker(&self, worker: usize) -> Result<(), SubmitError> {
        let workers = self.shared.next_level_workers();
        if worker >= workers {
            return Err(SubmitError::UnknownWorker { worker, workers });
        }
        Ok(())
    }

    /// `workers`: the members' next-level workers; `None` for sub tasks.
    fn prepare_all(
        &self,
        args_list: Vec<TaskArgs>,
        workers: Option<&[usize]>,
    ) -> Result<(Vec<Member>, Vec<Access>), SubmitError> {
        let mut members = Vec::with_capacity(args_list.len());
        let mut accesses = Vec::new();
        let group = args_list.len() > 1;
        for (m, args) in args_list.into_iter().enumerate() {
            let p = self.prepare(args, group.then_some(m), workers.map(|w| w[m]))?;
            members.push((p.args, p.buffers));
            accesses.extend(p.accesses);
        }
        Ok((members, accesses))
    }

    /// Step 1 of §2.5 for one argument list, run on next-level worker `worker` (`None`: a sub
    /// task). A device tensor may appear only in a task for its own chip (§9 row 20).
    fn prepare(
        &self,
        args: TaskArgs,
        member: Option<usize>,
        worker: Option<usize>,
    ) -> Result<Prepared, SubmitError> {
        let in_member = |reason: String| match member {
            Some(m) => format!("group member {m}: {reason}"),
            None => reason,
        };
        args.check().map_err(|e| SubmitError::InvalidArgs {
            index: None,
            reason: in_member(e.to_string()),
        })?;
        let mut buffers = Vec::with_capacity(args.tensors().len());
        let mut accesses: Vec<(usize, Access)> = Vec::new();
        for (i, (tag, t)) in args.tensors().iter().enumerate() {
            let Some(b) = self.shared.buffers.resolve(t.buffer()) else {
                return Err(SubmitError::InvalidArgs {
                    index: Some(i),
                    reason: in_member(format!(
                        "buffer {:?} is not a live buffer of this Worker (use Worker::create_buffer or orch.alloc)",
                        t.buffer().id()
                    )),
                });
            };
            if let Some(reason) = self.shared.reachability(b.remote(), worker) {
                return Err(SubmitError::BufferNotReachable {
                    index: i,
                    reason: in_member(reason),
                });
            }
            let device_worker = b.device().map(|(chip, _)| chip);
            if let Some(chip) = device_worker {
                let reason = match worker {
                    None => Some("device tensors cannot be used by sub tasks".to_string()),
                    Some(w) if w != chip as usize => Some(format!(
                        "device tensor belongs to chip {chip}, not chip {w}"
                    )),
                    Some(_) => None,
                };
                if let Some(reason) = reason {
                    return Err(SubmitError::InvalidArgs {
                        index: Some(i),
                        reason: in_member(reason),
                    });
                }
            }
            buffers.push(b);
            let geometry = t.geometry();
            if !geometry.is_empty() {
                accesses.push((
                    i,
                    Access {
                        tag: *tag,
                        key: BufferKey {
                            buffer: t.buffer().id(),
                            device_worker,
                        },
                        geometry,
                    },
                ));
            }
        }
        let writes: Vec<&(usize, Access)> =
            accesses.iter().filter(|(_, a)| a.tag.writes()).collect();
        for (k, (a, x)) in writes.iter().enumerate() {
            for (b, y) in &writes[k + 1..] {
                if x.key == y.key && x.geometry.classify(&y.geometry) != Overlap::NoOverlap {
                    return Err(SubmitError::WriteOverlap { a: *a, b: *b });
                }
            }
        }
        Ok(Prepared {
            args,
            buffers,
            accesses: accesses.into_iter().map(|(_, a)| a).collect(),
        })
    }

    fn push(&mut self, task: NewTask) -> Result<NodeTaskId, SubmitError> {
        let (id, slot) = self.shared.engine.lock_state().submit(self.run_id, task)?;
        self.frames
            .last_mut()
            .expect("the outer scope")
            .push(ScopeItem::Task(slot));
        self.submitted += 1;
        Ok(id)
    }

    /// RING_CONFIG.md §10 guard (T74): once per run, a chip task whose config has every
    /// diagnostic off while the run's base config enables one.
    fn warn_blank_config(&mut self, id: NodeTaskId, label: Option<&str>, config: &CallConfig) {
        if self.warned_blank_config
            || !self.base.diagnostics_enabled()
            || config.diagnostics_enabled()
        {
            return;
        }
        self.warned_blank_config = true;
        let named = match label {
            Some(l) => format!("{id} ('{l}')"),
            None => id.to_string(),
        };
        tracing::warn!(
            target: "pto::node",
            "run {}: {named} was submitted with every diagnostic off while the run's base config enables {}; build per-task configs with CallConfig::derive to keep them",
            self.run_id,
            self.base.enabled_diagnostics().join(", ")
        );
    }
}
