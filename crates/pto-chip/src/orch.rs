//! The orchestration API (CHIP_RUNTIME.md §2): what an L2 orchestration function uses to build
//! its task graph while it runs.
//!
//! Scopes are closures, so a scope cannot be left open. Lifetimes make scope misuse a compile
//! error: a [`OrchTensor<'s>`] created in a scope cannot leave it, while tensors of enclosing scopes
//! are usable inside (`OrchTensor` is covariant and `Scope<'i, 's>` implies `'s: 'i`):
//!
//! ```compile_fail
//! # use pto_chip::orch::*;
//! fn escape<'r>(s: &mut RootScope<'r>) -> OrchResult<()> {
//!     let ci = TensorCreateInfo::new(&[16], pto_types::DType::F32);
//!     let leaked = s.scope(|s| {
//!         let t = s.alloc_tensors(&[ci])?.tensor(0);
//!         Ok(t) // a tensor of the inner scope cannot be returned
//!     })?;
//!     let _ = leaked;
//!     Ok(())
//! }
//! ```
//!
//! ```compile_fail
//! # use pto_chip::orch::*;
//! fn store<'r>(s: &mut RootScope<'r>) -> OrchResult<()> {
//!     let ci = TensorCreateInfo::new(&[16], pto_types::DType::F32);
//!     let mut kept: Vec<OrchTensor<'r>> = Vec::new();
//!     s.scope(|s| {
//!         kept.push(s.alloc_tensors(&[ci])?.tensor(0)); // nor stored outside
//!         Ok(())
//!     })?;
//!     Ok(())
//! }
//! ```
//!
//! ```
//! # use pto_chip::orch::*;
//! fn nested<'r>(s: &mut RootScope<'r>, outer: OrchTensor<'r>) -> OrchResult<()> {
//!     s.scope(|s| s.scope(|s| {
//!         s.submit_dummy(KernelArgs::new().input(outer))?; // an outer tensor two scopes down
//!         Ok(())
//!     }))
//! }
//! ```

use std::marker::PhantomData;

use pto_types::{DType, ErrorCode, TensorTag};

use crate::engine::orchestrator::{ArgTensor, ArgTensors, CreateInfo, OrchCore, SubmitRequest};
use crate::engine::{Scalars, Shape};
use crate::error::{ChipError, Detector};
pub use crate::error::{Fatal, OrchResult};
use crate::kernel::{CoreType, Element, KernelRef, Scalar};
use crate::task_id::TaskId;
use crate::tensor::{MAX_DIMS, TensorDesc};

/// The orchestration's handle to a chip tensor, usable in scope `'s` and the scopes nested in it.
/// (A task argument over a buffer is `pto_types::Tensor`; the descriptor inside is [`TensorDesc`].)
#[derive(Clone, Copy, Debug)]
pub struct OrchTensor<'s> {
    desc: TensorDesc,
    _scope: PhantomData<&'s ()>,
}

impl<'s> OrchTensor<'s> {
    pub(crate) fn new(desc: TensorDesc) -> OrchTensor<'s> {
        OrchTensor {
            desc,
            _scope: PhantomData,
        }
    }

    /// The descriptor (shape, strides, dtype, owner).
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }

    pub fn shape(&self) -> &[u32] {
        self.desc.shape()
    }

    pub fn dtype(&self) -> DType {
        self.desc.dtype()
    }

    /// A zero-copy sub-box: `shape` elements starting at `offsets`.
    #[inline]
    pub fn view(
        &self,
        shape: &[u32],
        offsets: &[u32],
    ) -> Result<OrchTensor<'s>, crate::tensor::TensorError> {
        self.desc.view(shape, offsets).map(OrchTensor::new)
    }

    /// A zero-copy slice of one dimension.
    pub fn slice(
        &self,
        dim: usize,
        start: u32,
        len: u32,
    ) -> Result<OrchTensor<'s>, crate::tensor::TensorError> {
        self.desc.slice(dim, start, len).map(OrchTensor::new)
    }

    /// A zero-copy reshape of a contiguous tensor.
    pub fn reshape(&self, shape: &[u32]) -> Result<OrchTensor<'s>, crate::tensor::TensorError> {
        self.desc.reshape(shape).map(OrchTensor::new)
    }
}

/// Describes a runtime-allocated OUTPUT.
#[derive(Clone, Copy, Debug)]
pub struct TensorCreateInfo {
    info: CreateInfo,
    error: Option<&'static str>,
}

impl TensorCreateInfo {
    pub fn new(shape: &[u32], dtype: DType) -> TensorCreateInfo {
        let mut dims = [0u32; MAX_DIMS];
        let ndims = shape.len().min(MAX_DIMS);
        dims[..ndims].copy_from_slice(&shape[..ndims]);
        let error = (shape.is_empty() || shape.len() > MAX_DIMS)
            .then_some("a created tensor needs 1 to 5 dimensions");
        TensorCreateInfo {
            info: CreateInfo {
                shape: dims,
                ndims,
                dtype,
                manual_dep: false,
                initial_value: None,
            },
            error,
        }
    }

    /// Exclude the tensor from automatic dependency tracking.
    pub fn manual_dep(mut self, manual: bool) -> TensorCreateInfo {
        self.info.manual_dep = manual;
        self
    }

    /// Fill the buffer with `value`, converted to the tensor's dtype, before the task runs
    /// (heap memory is not zeroed otherwise).
    pub fn initial_value(mut self, value: impl Into<f64>) -> TensorCreateInfo {
        self.info.initial_value = Some(dtype_bits(self.info.dtype, value.into()));
        self
    }
}

/// The little-endian bit pattern of `value` as one element of `dtype`.
fn dtype_bits(dtype: DType, value: f64) -> u64 {
    match dtype {
        DType::F32 => u64::from((value as f32).to_bits()),
        DType::F16 => u64::from(half::f16::from_f64(value).to_bits()),
        DType::BF16 => u64::from(half::bf16::from_f64(value).to_bits()),
        DType::I8 => u64::from(value as i8 as u8),
        DType::U8 => u64::from(value as u8),
        DType::Bool => u64::from(value != 0.0),
        DType::I16 => u64::from(value as i16 as u16),
        DType::U16 => u64::from(value as u16),
        DType::I32 => u64::from(value as i32 as u32),
        DType::U32 => u64::from(value as u32),
        DType::I64 => value as i64 as u64,
        DType::U64 => value as u64,
    }
}

/// The arguments of one submit: tensors with their tags (in argument order), scalars, explicit
/// dependencies and SPMD settings. Problems are recorded and reported at submit as INVALID_ARGS.
#[derive(Debug)]
pub struct KernelArgs<'s> {
    tensors: ArgTensors,
    scalars: Scalars,
    deps: Vec<(TaskId, bool)>,
    block_num: u32,
    sync_start: bool,
    error: Option<String>,
    _scope: PhantomData<&'s ()>,
}

impl Default for KernelArgs<'_> {
    fn default() -> Self {
        KernelArgs::new()
    }
}

impl<'s> KernelArgs<'s> {
    #[inline]
    pub fn new() -> KernelArgs<'s> {
        KernelArgs {
            tensors: ArgTensors::new(),
            scalars: Scalars::new(),
            deps: Vec::new(),
            block_num: 1,
            sync_start: false,
            error: None,
            _scope: PhantomData,
        }
    }

    #[inline]
    fn existing(mut self, tag: TensorTag, t: OrchTensor<'s>) -> KernelArgs<'s> {
        self.tensors.push(ArgTensor::Existing { tag, desc: t.desc });
        self
    }

    #[inline]
    pub fn input(self, t: OrchTensor<'s>) -> KernelArgs<'s> {
        self.existing(TensorTag::Input, t)
    }

    /// An input whose read a later writer of the same bytes waits for (write-after-read),
    /// whether or not the chip job's `CallConfig::track_war` is on. Costs a TensorMap entry
    /// per read and a dep-pool entry per writer that waits.
    #[inline]
    pub fn tracked_input(self, t: OrchTensor<'s>) -> KernelArgs<'s> {
        self.existing(TensorTag::TrackedInput, t)
    }

    #[inline]
    pub fn inout(self, t: OrchTensor<'s>) -> KernelArgs<'s> {
        self.existing(TensorTag::InOut, t)
    }

    #[inline]
    pub fn output_existing(self, t: OrchTensor<'s>) -> KernelArgs<'s> {
        self.existing(TensorTag::OutputExisting, t)
    }

    #[inline]
    pub fn no_dep(self, t: OrchTensor<'s>) -> KernelArgs<'s> {
        self.existing(TensorTag::NoDep, t)
    }

    /// A new buffer allocated by the runtime in this task's heap allocation.
    #[inline]
    pub fn output(mut self, ci: TensorCreateInfo) -> KernelArgs<'s> {
        if let Some(e) = ci.error {
            self.error.get_or_insert_with(|| e.to_string());
        }
        self.tensors.push(ArgTensor::Create(ci.info));
        self
    }

    /// A scalar, bit-cast into a `u64` slot.
    #[inline]
    pub fn scalar(mut self, value: impl pto_types::args::ScalarArg) -> KernelArgs<'s> {
        self.scalars.push(value.to_bits());
        self
    }

    /// Wait for `task` and keep its outputs alive while this task runs (WAIT|RETAIN).
    #[inline]
    pub fn dep(mut self, task: TaskId) -> KernelArgs<'s> {
        self.deps.push((task, true));
        self
    }

    /// Wait for `task` only (WAIT).
    #[inline]
    pub fn dep_wait(mut self, task: TaskId) -> KernelArgs<'s> {
        self.deps.push((task, false));
        self
    }

    /// Run `n` blocks (SPMD).
    #[inline]
    pub fn block_num(mut self, n: u32) -> KernelArgs<'s> {
        if n == 0 {
            self.error
                .get_or_insert_with(|| "block_num must be at least 1".to_string());
        }
        self.block_num = n;
        self
    }

    /// Start all blocks together (cross-block barriers become possible).
    #[inline]
    pub fn require_sync_start(mut self, on: bool) -> KernelArgs<'s> {
        self.sync_start = on;
        self
    }

    pub(crate) fn into_request(
        self,
        kernels: [Option<KernelRef>; 3],
        shape: Shape,
    ) -> SubmitRequest {
        SubmitRequest {
            kernels,
            shape,
            tensors: self.tensors,
            scalars: self.scalars,
            deps: self.deps,
            block_num: self.block_num,
            sync_start: self.sync_start,
            error: self.error,
        }
    }
}

/// The kernels of a MIX task, one per core of a cluster.
#[derive(Clone, Copy, Debug, Default)]
pub struct MixedKernels {
    pub aic: Option<KernelRef>,
    pub aiv0: Option<KernelRef>,
    pub aiv1: Option<KernelRef>,
}

impl MixedKernels {
    /// `kernel` alone on the AIC core: what `submit_aic` submits.
    pub(crate) fn aic(kernel: KernelRef) -> MixedKernels {
        MixedKernels {
            aic: Some(kernel),
            ..MixedKernels::default()
        }
    }

    /// `kernel` alone on an AIV core: what `submit_aiv` submits.
    pub(crate) fn aiv(kernel: KernelRef) -> MixedKernels {
        MixedKernels {
            aiv0: Some(kernel),
            ..MixedKernels::default()
        }
    }
}

/// The OUTPUT tensors of a submitted task, in argument order, and its id.
#[derive(Clone, Debug)]
pub struct TaskOutputs<'s> {
    task: TaskId,
    tensors: Vec<TensorDesc>,
    _scope: PhantomData<&'s ()>,
}

impl<'s> TaskOutputs<'s> {
    pub(crate) fn new(task: TaskId, tensors: Vec<TensorDesc>) -> TaskOutputs<'s> {
        TaskOutputs {
            task,
            tensors,
            _scope: PhantomData,
        }
    }

    pub fn task_id(&self) -> TaskId {
        self.task
    }

    /// OUTPUT `i` (counting OUTPUT arguments only).
    pub fn tensor(&self, i: usize) -> OrchTensor<'s> {
        OrchTensor::new(self.tensors[i])
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

/// The entry arguments of an orchestration.
#[derive(Debug)]
pub struct OrchArgs<'r> {
    pub(crate) tensors: Vec<OrchTensor<'r>>,
    pub(crate) scalars: Vec<u64>,
}

impl<'r> OrchArgs<'r> {
    /// Entry tensor `i` (panics if there is none: the orchestration is then caught as
    /// ORCH_PANIC).
    pub fn tensor(&self, i: usize) -> OrchTensor<'r> {
        match self.tensors.get(i) {
            Some(t) => *t,
            None => panic!(
                "entry tensor {i} requested, but the run has {} tensor argument(s)",
                self.tensors.len()
            ),
        }
    }

    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Entry scalar `j`, decoded from its bit pattern.
    pub fn scalar<S: Scalar>(&self, j: usize) -> S {
        match self.scalars.get(j) {
            Some(&bits) => S::from_bits(bits),
            None => panic!(
                "entry scalar {j} requested, but the run has {} scalar argument(s)",
                self.scalars.len()
            ),
        }
    }

    pub fn num_scalars(&self) -> usize {
        self.scalars.len()
    }
}

/// Variance marker of [`Scope`]: `'s` invariant (`fn(&'s ()) -> &'s ()`), and `'p: 's` implied
/// by the well-formedness of `&'s mut &'p ()`.
pub(crate) type ScopeMarker<'s, 'p> = PhantomData<(&'s mut &'p (), fn(&'s ()) -> &'s ())>;

/// A scope: depth `'s`, nested in `'p`.
pub struct Scope<'s, 'p> {
    core: &'s mut OrchCore,
    _marker: ScopeMarker<'s, 'p>,
}

/// The implicit depth-0 scope around the orchestration entry.
pub type RootScope<'r> = Scope<'r, 'r>;

/// A registered L2 orchestration function.
pub type OrchFn = for<'r> fn(&mut RootScope<'r>, &OrchArgs<'r>) -> OrchResult<()>;

impl<'s, 'p> Scope<'s, 'p> {
    pub(crate) fn root(core: &'s mut OrchCore) -> Scope<'s, 's> {
        Scope {
            core,
            _marker: PhantomData,
        }
    }

    /// Runs `f` in a nested scope (ring `min(depth, 3)`); the scope ends on every exit path.
    #[track_caller]
    pub fn scope<R>(
        &mut self,
        f: impl for<'i> FnOnce(&mut Scope<'i, 's>) -> OrchResult<R>,
    ) -> OrchResult<R> {
        self.core.begin_scope(std::panic::Location::caller())?;
        /// Ends the scope even if `f` panics (the panic is then reported as ORCH_PANIC).
        struct EndOnDrop<'a>(&'a mut OrchCore);
        impl Drop for EndOnDrop<'_> {
            fn drop(&mut self) {
                self.0.end_scope();
            }
        }
        let guard = EndOnDrop(&mut *self.core);
        let mut inner: Scope<'_, 's> = Scope {
            core: &mut *guard.0,
            _marker: PhantomData,
        };
        f(&mut inner)
    }

    /// Submits a task with the kernel slots and shape of `plan` ([`mix_plan`]); a plan that
    /// failed fails the run with INVALID_ARGS.
    fn submit(&mut self, plan: KernelPlan, args: KernelArgs<'s>) -> OrchResult<TaskOutputs<'s>> {
        let (kernels, shape) = match plan {
            Ok(plan) => plan,
            Err(e) => {
                let error = ChipError::new(ErrorCode::InvalidArgs, Detector::Immediate, e);
                return Err(self.core.fail(error));
            }
        };
        let (task, tensors) = self.core.submit(args.into_request(kernels, shape))?;
        Ok(TaskOutputs::new(task, tensors))
    }

    /// Submits an AIC (cube) task.
    pub fn submit_aic(
        &mut self,
        kernel: KernelRef,
        args: KernelArgs<'s>,
    ) -> OrchResult<TaskOutputs<'s>> {
        self.submit(mix_plan(MixedKernels::aic(kernel)), args)
    }

    /// Submits an AIV (vector) task.
    pub fn submit_aiv(
        &mut self,
        kernel: KernelRef,
        args: KernelArgs<'s>,
    ) -> OrchResult<TaskOutputs<'s>> {
        self.submit(mix_plan(MixedKernels::aiv(kernel)), args)
    }

    /// Submits a task over the cores of one cluster. The shape follows from the kernels given:
    /// none → dummy, AIC alone → AIC, one AIV alone → AIV, two or more → MIX.
    pub fn submit_mix(
        &mut self,
        kernels: MixedKernels,
        args: KernelArgs<'s>,
    ) -> OrchResult<TaskOutputs<'s>> {
        self.submit(mix_plan(kernels), args)
    }

    /// Submits a task that takes full part in dependencies but runs no kernel.
    pub fn submit_dummy(&mut self, args: KernelArgs<'s>) -> OrchResult<TaskOutputs<'s>> {
        self.submit(mix_plan(MixedKernels::default()), args)
    }

    /// Allocates buffers owned by a hidden task that is complete at once; its id can be an
    /// explicit dependency.
    pub fn alloc_tensors(&mut self, infos: &[TensorCreateInfo]) -> OrchResult<TaskOutputs<'s>> {
        if let Some(e) = infos.iter().find_map(|ci| ci.error) {
            return Err(self.core.fail(ChipError::new(
                ErrorCode::InvalidArgs,
                Detector::Immediate,
                e.to_string(),
            )));
        }
        let infos: Vec<CreateInfo> = infos.iter().map(|ci| ci.info).collect();
        let (task, tensors) = self.core.alloc_tensors(&infos)?;
        Ok(TaskOutputs::new(task, tensors))
    }

    /// Reads one element of `t` once every task that writes it has completed (a blocking read
    /// for control flow, e.g. a loop bound). Waits at most the chip's `tensor_wait_timeout`
    /// (TENSOR_WAIT_TIMEOUT, 8). Readers that are plain INPUT tasks are not waited for.
    pub fn get_tensor_data<T: Element>(&mut self, t: OrchTensor<'s>, idx: &[u32]) -> OrchResult<T> {
        self.core.access_element(t.desc, idx, None)
    }

    /// Writes one element of `t` once every task that writes it has completed and released it.
    /// As upstream, plain INPUT readers of an external tensor are not waited for.
    pub fn set_tensor_data<T: Element>(
        &mut self,
        t: OrchTensor<'s>,
        idx: &[u32],
        value: T,
    ) -> OrchResult<()> {
        self.core
            .access_element(t.desc, idx, Some(value))
            .map(|_| ())
    }

    /// Replays the recorded `graph` here with its inputs bound to `inputs` (same dtype, shape
    /// and strides as recorded, no two overlapping); returns its outputs. Edges inside the graph
    /// come from the recording; arguments over the inputs and outputs go through the TensorMap,
    /// so the replay orders against the tasks before and after it as if each task had been
    /// submitted here. Every task of the replay can run once this returns, as after a submit
    /// (while executors hold the graph lock, the replay publishes several tasks at a time).
    /// See [`crate::replay`].
    ///
    /// # Errors
    ///
    /// `Err` when the run has failed already (nothing more is submitted), or fails it, as a
    /// failed submit does (the error is the run's, with its code):
    /// - INVALID_ARGS, before anything is submitted: a binding that does not fit the recording
    ///   (input count, dtype, shape, strides, version, `manual_dep`, or two bound inputs that
    ///   overlap), a graph whose scopes would nest deeper than scopes may, or a chip job with
    ///   `track_war` on and a graph recorded with plain reads a later graph task overwrites;
    /// - REQUIRE_SYNC_START_INVALID, before anything is submitted: a sync-start task of the
    ///   graph that this chip cannot start at once;
    /// - SCOPE_DEADLOCK or HEAP_RING_DEADLOCK, before anything is submitted: the graph's task
    ///   slots or heap bytes cannot fit beside what the open scopes pin
    ///   ([`crate::replay::RecordedGraph::needs`]), with the ring and the recommended minimum;
    /// - as any submit, while it submits: the ring, dep-pool and TensorMap errors (naming the
    ///   graph), WAR_HAZARD under `war_check` strict, and in verify mode INTERNAL_ERROR when
    ///   inference and the recording disagree on an edge.
    pub fn replay(
        &mut self,
        graph: &crate::replay::RecordedGraph,
        inputs: &[OrchTensor<'s>],
    ) -> OrchResult<Vec<OrchTensor<'s>>> {
        let bound: Vec<TensorDesc> = inputs.iter().map(|t| t.desc).collect();
        let outputs = self.core.replay(graph, &bound)?;
        Ok(outputs.into_iter().map(OrchTensor::new).collect())
    }

    /// Clusters of the chip (C).
    pub fn available_cluster_count(&self) -> u32 {
        self.core.clusters()
    }

    /// AIV cores of the chip (2C).
    pub fn available_aiv_count(&self) -> u32 {
        2 * self.core.clusters()
    }

    /// The current scope depth (0 = root).
    pub fn depth(&self) -> usize {
        self.core.depth()
    }

    /// Fails the run with EXPLICIT_ORCH_FATAL (9) and `message`; later calls return `Err`.
    pub fn report_fatal(&mut self, message: impl Into<String>) -> Fatal {
        self.core.fail(ChipError::new(
            ErrorCode::ExplicitOrchFatal,
            Detector::Immediate,
            message.into(),
        ))
    }
}

/// A task's kernel slots (AIC, AIV0, AIV1) and shape, or why its kernels do not fit.
pub(crate) type KernelPlan = Result<([Option<KernelRef>; 3], Shape), String>;

/// Why `kernel` cannot be submitted as a `want` task, if it cannot.
fn kind_error(kernel: KernelRef, want: CoreType) -> Option<String> {
    (kernel.core_type() != want).then(|| {
        format!(
            "kernel {} runs on {:?} cores but was submitted as {:?}",
            kernel.name(),
            kernel.core_type(),
            want
        )
    })
}

/// The kernel slots and shape of every submit: none → dummy, AIC alone → AIC, one AIV alone →
/// AIV (slot 1), two or more → MIX. Fails on a kernel in the wrong slot.
pub(crate) fn mix_plan(kernels: MixedKernels) -> KernelPlan {
    for (k, want) in [
        (kernels.aic, CoreType::Aic),
        (kernels.aiv0, CoreType::Aiv),
        (kernels.aiv1, CoreType::Aiv),
    ] {
        if let Some(e) = k.and_then(|k| kind_error(k, want)) {
            return Err(e);
        }
    }
    let mask = u8::from(kernels.aic.is_some())
        | u8::from(kernels.aiv0.is_some()) << 1
        | u8::from(kernels.aiv1.is_some()) << 2;
    Ok(match mask {
        0 => ([None; 3], Shape::Dummy),
        1 => ([kernels.aic, None, None], Shape::Aic),
        2 | 4 => ([None, kernels.aiv0.or(kernels.aiv1), None], Shape::Aiv),
        _ => ([kernels.aic, kernels.aiv0, kernels.aiv1], Shape::Mix(mask)),
    })
}
