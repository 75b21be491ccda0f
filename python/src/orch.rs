//! The orchestrator a Python orchestration function receives, and the crate's main `unsafe`
//! (the other is one FFI call in `gil.rs`).
//!
//! `Worker::submit` lends its `&mut Orchestrator` to a Rust closure for the duration of the
//! orchestration function. Python cannot hold a borrow, so the closure parks a pointer to it
//! in a slot shared with the `_Orchestrator` object and empties the slot before it returns.
//! Invariants that make each dereference sound:
//! - O1: the slot holds a pointer only while the closure that received the `&mut` runs; it is
//!   emptied on every path out of that closure (`orchestrate`).
//! - O2: every method first checks that it runs on the thread that created the object, the
//!   thread running the closure (it can only be inside the Python function the closure runs);
//!   other threads get `pto.WorkerError`.
//! - O3: methods take `&mut self`, so PyO3's borrow flag refuses a call that re-enters the
//!   object (say from a sub function run inline on this thread): at most one `&mut` exists.

use std::ptr::NonNull;
use std::sync::Arc;
use std::thread::ThreadId;

use parking_lot::Mutex;
use pyo3::prelude::*;

use pto_node::{CallableHandle, OrchError, Orchestrator};
use pto_types::{TaskArgs, Tensor, TensorTag};

use crate::config::PyCallConfig;
use crate::errors::{describe, raise, submit_error, worker_error};
use crate::memory::{PyMemory, TensorSpec, dtype_names, dtype_of};
use crate::report::TaskConfigs;

/// The lent orchestrator, while it is lent (O1).
type Slot = Arc<Mutex<Option<OrchPtr>>>;

#[derive(Clone, Copy)]
struct OrchPtr(NonNull<Orchestrator<'static>>);
// SAFETY: the pointer is only dereferenced by `PyOrchestrator::with`, on the thread that lent
// it (O2); other threads may hold the object (Python objects travel), never use the pointer.
unsafe impl Send for OrchPtr {}

/// A value that `Python::detach` may carry although it is not `Send`: detach runs its closure
/// on the calling thread, so the value never reaches another thread.
struct OnThisThread<T>(T);
// SAFETY: `with` moves an `OnThisThread` only into a closure that `Python::detach` runs
// synchronously on the thread that created it (detach releases the GIL, it does not spawn).
unsafe impl<T> Send for OnThisThread<T> {}

/// Runs the Python orchestration function with a `_Orchestrator` over `o`. A Python exception
/// is kept in `failure` (re-raised by `Worker.run` as it was) and fails the run.
pub(crate) fn orchestrate(
    o: &mut Orchestrator<'_>,
    orch_fn: &Py<PyAny>,
    failure: &Mutex<Option<PyErr>>,
    configs: &Arc<TaskConfigs>,
) -> Result<(), OrchError> {
    Python::attach(|py| {
        let slot: Slot = Arc::new(Mutex::new(Some(OrchPtr(NonNull::from(o).cast()))));
        let obj = Py::new(
            py,
            PyOrchestrator {
                slot: Arc::clone(&slot),
                thread: std::thread::current().id(),
                configs: Arc::clone(configs),
            },
        );
        let result = obj.and_then(|obj| orch_fn.call1(py, (obj,)));
        *slot.lock() = None; // O1
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                let text = describe(py, &e);
                *failure.lock() = Some(e);
                Err(OrchError::msg(text))
            }
        }
    })
}

/// A registered callable, as `Worker.register` returns it.
#[pyclass(frozen, module = "pto._native", name = "CallableHandle")]
pub(crate) struct PyHandle {
    pub(crate) handle: CallableHandle,
    #[pyo3(get)]
    pub(crate) name: String,
    /// `chip` or `sub`.
    #[pyo3(get)]
    pub(crate) kind: &'static str,
}

#[pymethods]
impl PyHandle {
    fn __repr__(&self) -> String {
        format!("CallableHandle({} {:?})", self.kind, self.name)
    }
}

/// One task's arguments from Python: tensor specs, scalars (as `u64` bits) and a label.
pub(crate) type ArgsSpec<'py> = (Vec<TensorSpec<'py>>, Vec<u64>, Option<String>);

/// The Rust `TaskArgs` of one spec; a bad tensor raises `pto.SubmitError` naming its index.
fn task_args(py: Python<'_>, (tensors, scalars, label): ArgsSpec<'_>) -> PyResult<TaskArgs> {
    let mut args = TaskArgs::new();
    for (i, (tag, memory, offset, shape, strides, dtype)) in tensors.into_iter().enumerate() {
        let bad = |why: String| raise(py, "SubmitError", format!("tensor {i}: {why}"), &[]);
        let tag = TensorTag::from_name(&tag).ok_or_else(|| bad(format!("unknown tag {tag:?}")))?;
        let dtype = dtype_of(&dtype)
            .ok_or_else(|| bad(format!("dtype {dtype} (pto holds {})", dtype_names())))?;
        let buffer = memory.get().buffer.clone();
        let tensor =
            Tensor::new(buffer, offset, &shape, &strides, dtype).map_err(|e| bad(e.to_string()))?;
        args = args.tensor(tag, &tensor);
    }
    for s in scalars {
        args = args.scalar(s);
    }
    if let Some(label) = label {
        args = args.label(&label);
    }
    args.check()
        .map_err(|e| raise(py, "SubmitError", e.to_string(), &[]))?;
    Ok(args)
}

/// The orchestration function's handle on its run (valid only while the function runs).
#[pyclass(module = "pto._native", name = "_Orchestrator")]
pub(crate) struct PyOrchestrator {
    slot: Slot,
    thread: ThreadId,
    /// Each chip task's config, for the sizing of tasks that fail before their chip reports.
    configs: Arc<TaskConfigs>,
}

impl PyOrchestrator {
    /// Calls `f` on the orchestrator with the GIL released (a submit may wait for room,
    /// which Python sub functions on other threads must be able to make).
    fn with<R: Send>(
        &mut self,
        py: Python<'_>,
        f: impl FnOnce(&mut Orchestrator<'static>) -> R + Send,
    ) -> PyResult<R> {
        if std::thread::current().id() != self.thread {
            return Err(worker_error(
                py,
                "the orchestrator is usable only on the thread running its orchestration function (submit from that function, not from another thread)",
            ));
        }
        let Some(OrchPtr(ptr)) = *self.slot.lock() else {
            return Err(worker_error(
                py,
                "this orchestrator belongs to an orchestration function that has returned; use the one your function receives",
            ));
        };
        // SAFETY: the slot is full, so the closure that lent the `&mut Orchestrator` is still
        // running (O1) on this very thread (O2, checked above), and nothing else holds a
        // reference to it (O3); the reference does not outlive this call.
        let orch = OnThisThread(unsafe { &mut *ptr.as_ptr() });
        Ok(py.detach(move || {
            let OnThisThread(o) = orch;
            f(o)
        }))
    }
}

impl PyOrchestrator {
    /// A chip task's outcome: its index, its config remembered for the report.
    fn recorded(
        &self,
        py: Python<'_>,
        r: Result<pto_node::NodeTaskId, pto_node::SubmitError>,
        config: &PyCallConfig,
    ) -> PyResult<u32> {
        match r {
            Ok(id) => {
                self.configs.record(id.index, &config.inner);
                Ok(id.index)
            }
            Err(e) => Err(submit_error(py, &e, &self.configs)),
        }
    }
}

#[pymethods]
impl PyOrchestrator {
    fn submit_next_level(
        &mut self,
        py: Python<'_>,
        handle: &PyHandle,
        args: ArgsSpec<'_>,
        config: PyCallConfig,
        worker: usize,
    ) -> PyResult<u32> {
        let args = task_args(py, args)?;
        let h = handle.handle;
        let cfg = config.inner.clone();
        let r = self.with(py, move |o| o.submit_next_level(&h, args, &cfg, worker))?;
        self.recorded(py, r, &config)
    }

    fn submit_next_level_group(
        &mut self,
        py: Python<'_>,
        handle: &PyHandle,
        members: Vec<ArgsSpec<'_>>,
        config: PyCallConfig,
        workers: Vec<usize>,
    ) -> PyResult<u32> {
        let list = members
            .into_iter()
            .map(|m| task_args(py, m))
            .collect::<PyResult<Vec<_>>>()?;
        let h = handle.handle;
        let cfg = config.inner.clone();
        let r = self.with(py, move |o| {
            o.submit_next_level_group(&h, list, &cfg, &workers)
        })?;
        self.recorded(py, r, &config)
    }

    fn submit_sub(
        &mut self,
        py: Python<'_>,
        handle: &PyHandle,
        args: ArgsSpec<'_>,
    ) -> PyResult<u32> {
        let args = task_args(py, args)?;
        let h = handle.handle;
        let r = self.with(py, move |o| o.submit_sub(&h, args))?;
        r.map(|id| id.index)
            .map_err(|e| submit_error(py, &e, &self.configs))
    }

    fn submit_sub_group(
        &mut self,
        py: Python<'_>,
        handle: &PyHandle,
        members: Vec<ArgsSpec<'_>>,
    ) -> PyResult<u32> {
        let list = members
            .into_iter()
            .map(|m| task_args(py, m))
            .collect::<PyResult<Vec<_>>>()?;
        let h = handle.handle;
        let r = self.with(py, move |o| o.submit_sub_group(&h, list))?;
        r.map(|id| id.index)
            .map_err(|e| submit_error(py, &e, &self.configs))
    }

    fn enter_scope(&mut self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |o| o.enter_scope())?
            .map_err(|e| raise(py, "SubmitError", e.to_string(), &[]))
    }

    fn exit_scope(&mut self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |o| o.exit_scope())?
            .map_err(|e| raise(py, "SubmitError", e.to_string(), &[]))
    }

    /// A row-major intermediate from the heap ring of the current scope depth.
    fn alloc(&mut self, py: Python<'_>, shape: Vec<u32>, dtype: &str) -> PyResult<PyMemory> {
        let d = dtype_of(dtype).ok_or_else(|| {
            raise(
                py,
                "SubmitError",
                format!("alloc: dtype {dtype} (pto holds {})", dtype_names()),
                &[],
            )
        })?;
        let tensor = self
            .with(py, move |o| o.alloc(&shape, d))?
            .map_err(|e| raise(py, "SubmitError", format!("alloc: {e}"), &[]))?;
        PyMemory::of_tensor(&tensor)
            .ok_or_else(|| worker_error(py, "alloc: the intermediate has no host bytes"))
    }

    #[getter]
    fn depth(&mut self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |o| o.depth())
    }

    #[getter]
    fn submitted_tasks(&mut self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |o| o.submitted_tasks())
    }

    #[getter]
    fn next_level_workers(&mut self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |o| o.next_level_workers())
    }

    #[getter]
    fn sub_workers(&mut self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |o| o.sub_workers())
    }

    #[getter]
    fn run_id(&mut self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |o| o.run_id())
    }
}
