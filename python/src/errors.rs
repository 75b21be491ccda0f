//! Rust errors as the exceptions of `pto.errors`.
//!
//! The exception classes are defined in Python (`pto/errors.py`), so that they have docstrings,
//! several bases (`ConfigError` is also a `ValueError`) and attributes; this module builds
//! them with keyword arguments carrying the same information as the Rust error.

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use pto_node::{
    BufferError, BuildError, InitError, RegisterError, RunError, SubmitError, SubmitRunError,
    TaskFailure,
};
use pto_types::ConfigError;

use crate::report::{PyRunReport, TaskConfigs};

/// `pto.errors.<class>(message, **attrs)` as a `PyErr`.
pub(crate) fn raise(
    py: Python<'_>,
    class: &str,
    message: impl Into<String>,
    attrs: &[(&str, Py<PyAny>)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("pto.errors")?.getattr(class)?;
        let kwargs = PyDict::new(py);
        for (key, value) in attrs {
            kwargs.set_item(key, value)?;
        }
        let exc = cls.call((message.into(),), Some(&kwargs))?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|e| e)
}

/// `v` as a Python object (None if it cannot be one).
pub(crate) fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> Py<PyAny> {
    v.into_py_any(py).unwrap_or_else(|_| py.None())
}

/// Where a `pto.ConfigError` points: the field path, the resource (`ring_heap`…), the ring
/// (None for a value given for every ring) and the value as given.
pub(crate) struct ConfigAt<'a> {
    pub(crate) field: &'a str,
    pub(crate) resource: Option<&'a str>,
    pub(crate) ring: Option<usize>,
    pub(crate) value: Py<PyAny>,
}

/// `pto.errors.ConfigError(message)` with the attributes of `at`.
pub(crate) fn config_error_at(py: Python<'_>, message: String, at: ConfigAt<'_>) -> PyErr {
    raise(
        py,
        "ConfigError",
        message,
        &[
            ("field", obj(py, at.field)),
            ("resource", obj(py, at.resource)),
            ("ring", obj(py, at.ring)),
            ("value", at.value),
        ],
    )
}

/// `pto.errors.ConfigError` naming field, resource, ring and value.
pub(crate) fn config_error(py: Python<'_>, e: &ConfigError) -> PyErr {
    let at = ConfigAt {
        field: e.field(),
        resource: e.resource().map(|r| r.field()),
        ring: e.ring(),
        value: obj(py, e.value()),
    };
    config_error_at(py, e.to_string(), at)
}

/// A ConfigError for a value Python gave that no `u64` holds (negative, too large, not an int).
pub(crate) fn config_value_error(
    py: Python<'_>,
    field: &str,
    resource: Option<&str>,
    ring: Option<usize>,
    value: Py<PyAny>,
    why: &str,
) -> PyErr {
    let ring_text = ring.map(|r| format!("[{r}]")).unwrap_or_default();
    let shown = value
        .bind(py)
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_default();
    let message = format!("{field}{ring_text}={shown}: {why}");
    let at = ConfigAt {
        field,
        resource,
        ring,
        value,
    };
    config_error_at(py, message, at)
}

/// `pto.errors.WorkerError` naming the Worker option at fault.
pub(crate) fn option_error(py: Python<'_>, option: &str, message: impl Into<String>) -> PyErr {
    raise(py, "WorkerError", message, &[("option", obj(py, option))])
}

/// `pto.errors.WorkerError` for what goes wrong building, starting or using a Worker.
pub(crate) fn worker_error(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "WorkerError", message, &[])
}

pub(crate) fn build_error(py: Python<'_>, e: &BuildError) -> PyErr {
    option_error(py, e.option, e.to_string())
}

pub(crate) fn init_error(py: Python<'_>, e: &InitError) -> PyErr {
    worker_error(py, format!("init failed: {e}"))
}

pub(crate) fn register_error(py: Python<'_>, e: &RegisterError) -> PyErr {
    worker_error(py, format!("register failed: {e}"))
}

pub(crate) fn buffer_error(py: Python<'_>, e: &BufferError) -> PyErr {
    worker_error(py, e.to_string())
}

/// A rejected submit: a `ConfigError` for a bad config, a `RunError` when the run already
/// failed (fail-fast), a `SubmitError` otherwise.
pub(crate) fn submit_error(py: Python<'_>, e: &SubmitError, configs: &TaskConfigs) -> PyErr {
    match e {
        SubmitError::InvalidConfig(c) => config_error(py, c),
        SubmitError::RunFailed(run) => run_error(py, run, configs),
        other => raise(py, "SubmitError", other.to_string(), &[]),
    }
}

/// Why `Worker.run` produced no run.
pub(crate) fn submit_run_error(py: Python<'_>, e: &SubmitRunError) -> PyErr {
    match e {
        SubmitRunError::InvalidConfig(c) => config_error(py, c),
        // Using a Worker in the wrong state (not initialised, closed, from inside its own run).
        SubmitRunError::NotReady | SubmitRunError::Closed | SubmitRunError::Reentrant => {
            worker_error(py, e.to_string())
        }
        other => raise(py, "SubmitError", other.to_string(), &[]),
    }
}

/// The levels of a task failure, outermost first: the run, the task on its worker, the
/// message below the worker (the chip's or sub function's own chain).
fn chain(run_id: u64, f: &TaskFailure) -> Vec<String> {
    let mut task = match f.task {
        Some(t) => format!("task {}", t.index),
        None => "orchestration".to_string(),
    };
    if let Some(label) = &f.label {
        task.push_str(&format!(" '{label}'"));
    }
    if !f.worker.is_empty() {
        task.push_str(&format!(" on {}", f.worker));
    }
    vec![format!("run {run_id}"), task, f.message.clone()]
}

/// `pto.errors.RunError`: the first failure's chain, code, hint and the whole report.
pub(crate) fn run_error(py: Python<'_>, e: &RunError, configs: &TaskConfigs) -> PyErr {
    let f = &e.first;
    let report = Py::new(py, PyRunReport::new(&e.report, Some(configs)))
        .map(|r| r.into_any())
        .unwrap_or_else(|_| py.None());
    raise(
        py,
        "RunError",
        e.to_string(),
        &[
            ("chain", obj(py, chain(e.run_id, f))),
            ("code", obj(py, f.code.map(|c| c.code()))),
            ("code_name", obj(py, f.code.map(|c| c.name()))),
            ("hint", obj(py, f.code.map(|c| c.hint()))),
            ("kind", obj(py, crate::report::failure_kind(f.kind))),
            ("task", obj(py, f.task.map(|t| t.index))),
            ("label", obj(py, f.label.clone())),
            (
                "worker",
                obj(py, Some(f.worker.clone()).filter(|w| !w.is_empty())),
            ),
            ("failed", obj(py, e.failed)),
            ("skipped", obj(py, e.skipped)),
            ("report", report),
        ],
    )
}

/// The attributes of a `RunError` (besides `message` and `args`), as `run_error` sets them.
const RUN_ERROR_ATTRS: [&str; 11] = [
    "chain",
    "code",
    "code_name",
    "hint",
    "kind",
    "task",
    "label",
    "worker",
    "failed",
    "skipped",
    "report",
];

/// When the orchestration raised a `RunError` (the one a submit gave it after its run failed),
/// that same exception object brought up to the run's final failure `run` (every attribute,
/// the full report); `None` when it raised something else.
pub(crate) fn run_error_as_raised(py: Python<'_>, raised: &PyErr, run: &PyErr) -> Option<PyErr> {
    let refresh = || -> PyResult<bool> {
        let cls = py.import("pto.errors")?.getattr("RunError")?;
        let (old, new) = (raised.value(py), run.value(py));
        if !old.is_instance(&cls)? || !new.is_instance(&cls)? {
            return Ok(false);
        }
        for attr in RUN_ERROR_ATTRS.into_iter().chain(["message", "args"]) {
            old.setattr(attr, new.getattr(attr)?)?;
        }
        Ok(true)
    };
    matches!(refresh(), Ok(true)).then(|| raised.clone_ref(py))
}

/// A Python exception as one text: `Type: message` and its traceback.
pub(crate) fn describe(py: Python<'_>, e: &PyErr) -> String {
    let head = e.to_string();
    let traceback = e
        .traceback(py)
        .and_then(|tb| tb.format().ok())
        .unwrap_or_default();
    match traceback.is_empty() {
        true => head,
        false => format!("{head}\n{}", traceback.trim_end()),
    }
}
