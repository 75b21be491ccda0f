//! `_Worker`: an L3 Worker driven from Python (`pto.Worker` wraps it).
//!
//! Chips run where the mode says (child processes by default); sub workers are always
//! threads of this process, so Python sub functions run here (`subs_in_process`). The GIL is
//! released while Rust waits or works; Python code (the orchestration function, sub
//! functions) takes it back. `run` waits in short slices and checks for signals between
//! them, so Ctrl-C cancels the run (`RunHandle::cancel`) and raises `KeyboardInterrupt`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use pto_types::{EnvSnapshot, EnvSource};

use pto_node::{
    Callable, EndpointMode, MappedArgs, RunHandle, SubContext, SubmitRunError, TaskError,
    WaitError, Worker,
};

use crate::config::PyCallConfig;
use crate::errors::{
    buffer_error, build_error, describe, init_error, option_error, register_error, run_error,
    submit_run_error, worker_error,
};
use crate::memory::{PyMemory, dtype_names, dtype_of};
use crate::orch::{PyHandle, orchestrate};
use crate::report::{PyRunReport, TaskConfigs};

/// How often `run` looks for Ctrl-C while it waits.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// The endpoint mode Python names (`"child-process"` or `"in-process"`).
pub(crate) fn mode_of(py: Python<'_>, mode: &str) -> PyResult<EndpointMode> {
    match mode.parse() {
        Ok(mode) => Ok(mode),
        Err(_) => Err(option_error(
            py,
            "mode",
            format!("mode {mode:?}: expected \"child-process\" or \"in-process\""),
        )),
    }
}

#[pyclass(frozen, module = "pto._native", name = "_Worker")]
pub(crate) struct PyWorker {
    inner: Worker,
    mode: &'static str,
    /// What the chips read as their environment: this process's, with the Worker's `env`.
    chip_env: EnvSource,
    /// Its snapshot, taken when the chips take theirs (`init`).
    chip_snapshot: OnceLock<EnvSnapshot>,
    closed: AtomicBool,
}

#[pymethods]
impl PyWorker {
    #[new]
    #[pyo3(signature = (level, chips, sub_workers, mode, heap_ring_size=None, task_timeout=None,
        env=None, strict_env=false, lane_depth=None, track_war=false))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, one per builder option
    fn new(
        py: Python<'_>,
        level: u32,
        chips: usize,
        sub_workers: usize,
        mode: &str,
        heap_ring_size: Option<u64>,
        task_timeout: Option<f64>,
        env: Option<BTreeMap<String, String>>,
        strict_env: bool,
        lane_depth: Option<usize>,
        track_war: bool,
    ) -> PyResult<Self> {
        if level != 3 {
            return Err(option_error(
                py,
                "level",
                format!("level {level}: Python drives level-3 Workers (chips and sub workers)"),
            ));
        }
        let endpoint = mode_of(py, mode)?;
        let mut b = Worker::builder(level)
            .chips(chips)
            .sub_workers(sub_workers)
            .endpoint_mode(endpoint)
            .subs_in_process(true)
            .strict_env(strict_env)
            .track_war(track_war);
        if let Some(bytes) = heap_ring_size {
            b = b.heap_ring_size(bytes);
        }
        if let Some(t) = task_timeout {
            b = b.task_timeout(Some(seconds(py, "task_timeout", t)?));
        }
        if let Some(n) = lane_depth {
            b = b.lane_depth(n);
        }
        let env = env.unwrap_or_default();
        for (var, value) in &env {
            b = b.ring_env(var, value);
        }
        let inner = b.build().map_err(|e| build_error(py, &e))?;
        let mode = endpoint.name();
        Ok(PyWorker {
            inner,
            mode,
            chip_env: EnvSource::process().overlay(env),
            chip_snapshot: OnceLock::new(),
            closed: AtomicBool::new(false),
        })
    }

    /// Registers the chip callable `name` (built into the module, e.g. `elementwise_add`).
    fn register_chip(&self, py: Python<'_>, name: &str) -> PyResult<PyHandle> {
        let handle = self
            .inner
            .register(Callable::chip(name))
            .map_err(|e| register_error(py, &e))?;
        Ok(PyHandle {
            handle,
            name: name.to_string(),
            kind: "chip",
        })
    }

    /// Registers a Python sub function: `adapter(memories, scalars, context)` runs it.
    fn register_sub(&self, py: Python<'_>, name: &str, adapter: Py<PyAny>) -> PyResult<PyHandle> {
        let callable = Callable::sub_closure(name, move |ctx, args| call_sub(&adapter, ctx, args));
        let handle = self
            .inner
            .register(callable)
            .map_err(|e| register_error(py, &e))?;
        Ok(PyHandle {
            handle,
            name: name.to_string(),
            kind: "sub",
        })
    }

    /// Starts the chips and sub workers (child processes in child-process mode).
    fn init(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.init())
            .map_err(|e| init_error(py, &e))?;
        let snapshot = EnvSnapshot::take(&self.chip_env, false).unwrap_or_default();
        let _ = self.chip_snapshot.set(snapshot);
        Ok(())
    }

    /// A zero-filled buffer of `shape` and `dtype` in memory the chips see.
    fn create_buffer(&self, py: Python<'_>, shape: Vec<u32>, dtype: &str) -> PyResult<PyMemory> {
        if self.closed.load(Ordering::Acquire) {
            return Err(worker_error(py, "create_buffer: the Worker is closed"));
        }
        let d = dtype_of(dtype).ok_or_else(|| {
            worker_error(py, format!("dtype {dtype}: pto holds {}", dtype_names()))
        })?;
        let count = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d as usize))
            .ok_or_else(|| worker_error(py, format!("shape {shape:?} is too large")))?;
        let bytes = count.saturating_mul(d.size()).max(1);
        let buffer = py
            .detach(|| self.inner.create_buffer(bytes))
            .map_err(|e| buffer_error(py, &e))?;
        let tensor = buffer
            .tensor(&shape, d)
            .map_err(|e| worker_error(py, format!("create_buffer: shape {shape:?}: {e}")))?;
        PyMemory::of_tensor(&tensor)
            .ok_or_else(|| worker_error(py, "the buffer has no host bytes in this process"))
    }

    /// Runs `orch_fn(orchestrator)` to build a run with base config `config`, then waits for
    /// it; `timeout` (seconds) cancels it when it passes.
    #[pyo3(signature = (orch_fn, config, timeout=None))]
    fn run(
        &self,
        py: Python<'_>,
        orch_fn: Py<PyAny>,
        config: PyCallConfig,
        timeout: Option<f64>,
    ) -> PyResult<PyRunReport> {
        let deadline = match timeout {
            Some(t) => Some(Instant::now() + seconds(py, "timeout", t)?),
            None => None,
        };
        let failure = Mutex::new(None::<PyErr>);
        let env = self.chip_snapshot.get().cloned().unwrap_or_default();
        let configs = Arc::new(TaskConfigs::new(env));
        let submitted = py.detach(|| {
            self.inner.submit(
                |o, _args, _cfg| orchestrate(o, &orch_fn, &failure, &configs),
                pto_types::TaskArgs::new(),
                config.inner.clone(),
            )
        });
        let handle = match submitted {
            Ok(h) => h,
            // The orchestration function's own exception, as it was raised.
            Err(e @ SubmitRunError::Orchestration { .. }) => {
                return Err(failure
                    .into_inner()
                    .unwrap_or_else(|| submit_run_error(py, &e)));
            }
            Err(e) => return Err(submit_run_error(py, &e)),
        };
        // The run had failed before its orchestration raised: its failure is the outcome
        // (issue 23). When the orchestration re-raised the `RunError` a submit gave it, that
        // same object comes out, brought up to the run's final failure and full report.
        match (wait(py, &handle, deadline, &configs), failure.into_inner()) {
            (Err(run), Some(raised)) => {
                Err(crate::errors::run_error_as_raised(py, &raised, &run).unwrap_or(run))
            }
            (outcome, _) => outcome,
        }
    }

    /// Stops every worker and child process; the Worker cannot run again.
    fn close(&self, py: Python<'_>) -> bool {
        self.closed.store(true, Ordering::Release);
        py.detach(|| self.inner.close()).graceful
    }

    /// The Worker's identity (the owner of its buffers).
    #[getter]
    fn uid(&self) -> u64 {
        self.inner.uid()
    }

    #[getter]
    fn chips(&self) -> usize {
        self.inner.chips()
    }

    #[getter]
    fn sub_workers(&self) -> usize {
        self.inner.sub_workers()
    }

    #[getter]
    fn mode(&self) -> &'static str {
        self.mode
    }

    /// Process ids of the child processes (empty in in-process mode).
    fn child_pids(&self) -> Vec<u32> {
        self.inner.child_pids()
    }
}

fn seconds(py: Python<'_>, what: &str, t: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(t)
        .map_err(|_| option_error(py, what, format!("{what} = {t}: expected seconds >= 0")))
}

/// Waits for the run in slices; between them Ctrl-C (or the deadline) cancels it.
fn wait(
    py: Python<'_>,
    handle: &RunHandle,
    deadline: Option<Instant>,
    configs: &TaskConfigs,
) -> PyResult<PyRunReport> {
    loop {
        if let Some(outcome) = wait_slice(py, handle, configs) {
            return outcome;
        }
        if let Err(interrupt) = py.check_signals() {
            handle.cancel("interrupted (KeyboardInterrupt)");
            // The run's own outcome (a failure: it was cancelled) gives way to the interrupt.
            return finish_cancelled(py, handle, configs).and_then(|_| Err(interrupt));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            handle.cancel("the run's timeout passed");
            return finish_cancelled(py, handle, configs)?;
        }
    }
}

/// The run's outcome if it ends within one slice.
fn wait_slice(
    py: Python<'_>,
    handle: &RunHandle,
    configs: &TaskConfigs,
) -> Option<PyResult<PyRunReport>> {
    match py.detach(|| handle.wait(Some(SIGNAL_CHECK))) {
        Ok(report) => Some(Ok(PyRunReport::new(&report, Some(configs)))),
        Err(WaitError::Failed(e)) => Some(Err(run_error(py, &e, configs))),
        Err(WaitError::Timeout) => None,
    }
}

/// After a cancel: waits for the running tasks to finish and returns the run's outcome. A
/// further signal (Ctrl-C again) stops waiting and is the outer error: a sub function that
/// never returns must not trap the user; the run then ends unobserved.
fn finish_cancelled(
    py: Python<'_>,
    handle: &RunHandle,
    configs: &TaskConfigs,
) -> PyResult<PyResult<PyRunReport>> {
    loop {
        if let Some(outcome) = wait_slice(py, handle, configs) {
            return Ok(outcome);
        }
        py.check_signals()?;
    }
}

/// One sub task: the adapter receives a `_Memory` per tensor, the scalars and the context.
fn call_sub(adapter: &Py<PyAny>, ctx: &SubContext, args: &MappedArgs) -> Result<(), TaskError> {
    crate::gil::attach(|py| {
        let call = || -> PyResult<()> {
            let mut memories = Vec::with_capacity(args.num_tensors());
            for i in 0..args.num_tensors() {
                let t = args.tensor(i).expect("i < num_tensors");
                let m = PyMemory::of_tensor(t).ok_or_else(|| {
                    worker_error(py, format!("tensor {i} has no host bytes in this process"))
                })?;
                memories.push(Py::new(py, m)?);
            }
            let context = PyDict::new(py);
            context.set_item("worker", ctx.worker)?;
            context.set_item("task", ctx.task.index)?;
            context.set_item("label", ctx.label.clone())?;
            context.set_item("member", ctx.member)?;
            adapter.call1(py, (memories, args.scalars().to_vec(), context))?;
            Ok(())
        };
        call().map_err(|e| TaskError::new(describe(py, &e)))
    })
}
