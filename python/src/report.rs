//! Run reports as Python objects: every task with its outcome and, for chip tasks, the sizing
//! the chip bound (value and source per ring and resource), reserved bytes and high-water.

use std::collections::HashMap;

use parking_lot::Mutex;
use pyo3::prelude::*;

use pto_chip::ChipRunReport;
use pto_node::{FailureKind, MemberReport, RunReport, TaskKind, TaskOutcome, TaskReport};
use pto_types::{CallConfig, EnvSnapshot, RING_COUNT, ResolvedSizing, Resource};

/// The config of each chip task a run submitted and the chips' environment (as they
/// snapshotted it at `init`), so that a chip
/// task that failed before its chip reported (a bind or L2 failure) still shows the sizing it
/// bound: resolved as the chip resolves it (the same rule as `pto run`'s rows).
pub(crate) struct TaskConfigs {
    env: EnvSnapshot,
    by_task: Mutex<HashMap<u32, CallConfig>>,
}

impl TaskConfigs {
    pub(crate) fn new(env: EnvSnapshot) -> TaskConfigs {
        TaskConfigs {
            env,
            by_task: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn record(&self, task: u32, config: &CallConfig) {
        self.by_task.lock().insert(task, config.clone());
    }

    /// Task `task`'s sizing and arena bytes, as its chip resolved them ([`pto_chip::Plan`]).
    fn resolved(&self, task: u32) -> Option<(PySizing, u64)> {
        let by_task = self.by_task.lock();
        let plan = pto_chip::Plan::resolve(&by_task.get(&task)?.runtime_env, &self.env).ok()?;
        Some((PySizing::from(&plan.sizing), plan.footprint.arena))
    }
}

pub(crate) fn failure_kind(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Task => "task",
        FailureKind::Bind => "bind",
        FailureKind::Endpoint => "endpoint",
        FailureKind::Skipped => "skipped",
        FailureKind::Orchestration => "orchestration",
        FailureKind::Cancelled => "cancelled",
    }
}

/// One resolved value: `value` and where it came from (`call_config`, `env`, `default`).
#[pyclass(frozen, get_all, eq, module = "pto._native", name = "Resolved")]
#[derive(Clone, PartialEq)]
pub(crate) struct PyResolved {
    value: u64,
    source: &'static str,
}

#[pymethods]
impl PyResolved {
    fn __repr__(&self) -> String {
        format!("{}({})", self.value, self.source)
    }
}

/// The sizing a chip resolved: per resource, one `Resolved` per ring.
#[pyclass(frozen, get_all, module = "pto._native", name = "Sizing")]
#[derive(Clone)]
pub(crate) struct PySizing {
    task_window: Vec<PyResolved>,
    heap: Vec<PyResolved>,
    dep_pool: Vec<PyResolved>,
    /// The tables' form: `task_window=64c,32c,16c,16c heap=4Mc,… dep_pool=…`.
    text: String,
}

impl From<&ResolvedSizing> for PySizing {
    fn from(s: &ResolvedSizing) -> PySizing {
        let one = |resource: Resource| -> Vec<PyResolved> {
            (0..RING_COUNT)
                .map(|ring| {
                    let r = s.at(resource, ring);
                    PyResolved {
                        value: r.value,
                        source: r.source.as_str(),
                    }
                })
                .collect()
        };
        PySizing {
            task_window: one(Resource::TaskWindow),
            heap: one(Resource::Heap),
            dep_pool: one(Resource::DepPool),
            text: s.compact(),
        }
    }
}

#[pymethods]
impl PySizing {
    /// The values of one resource (`task_window`, `heap` or `dep_pool`, or their
    /// `ring_*` field names), one per ring.
    fn values(&self, resource: &str) -> PyResult<Vec<u64>> {
        Ok(self.resource(resource)?.iter().map(|r| r.value).collect())
    }

    /// The sources of one resource, one per ring.
    fn sources(&self, resource: &str) -> PyResult<Vec<&'static str>> {
        Ok(self.resource(resource)?.iter().map(|r| r.source).collect())
    }

    /// `sizing["heap"]` (or `"ring_heap"`): the resource's `Resolved` values, one per ring.
    fn __getitem__(&self, resource: &str) -> PyResult<Vec<PyResolved>> {
        Ok(self.resource(resource)?.to_vec())
    }

    /// The `RuntimeEnv` field names as aliases: `sizing.ring_heap` is `sizing.heap`.
    #[getter]
    fn ring_task_window(&self) -> Vec<PyResolved> {
        self.task_window.clone()
    }

    #[getter]
    fn ring_heap(&self) -> Vec<PyResolved> {
        self.heap.clone()
    }

    #[getter]
    fn ring_dep_pool(&self) -> Vec<PyResolved> {
        self.dep_pool.clone()
    }

    fn __str__(&self) -> String {
        self.text.clone()
    }

    fn __repr__(&self) -> String {
        format!("Sizing({})", self.text)
    }
}

impl PySizing {
    fn resource(&self, name: &str) -> PyResult<&[PyResolved]> {
        match name.strip_prefix("ring_").unwrap_or(name) {
            "task_window" => Ok(&self.task_window),
            "heap" => Ok(&self.heap),
            "dep_pool" => Ok(&self.dep_pool),
            _ => Err(pyo3::exceptions::PyKeyError::new_err(format!(
                "{name:?}: expected task_window, heap or dep_pool"
            ))),
        }
    }
}

/// Peak use of one ring during a chip run.
#[pyclass(frozen, get_all, module = "pto._native", name = "RingUsage")]
#[derive(Clone)]
pub(crate) struct PyRingUsage {
    task_window: u64,
    heap: u64,
    dep_pool: u64,
}

#[pymethods]
impl PyRingUsage {
    fn __repr__(&self) -> String {
        format!(
            "RingUsage(task_window={}, heap={}, dep_pool={})",
            self.task_window, self.heap, self.dep_pool
        )
    }
}

/// What one chip run reported.
#[pyclass(frozen, get_all, module = "pto._native", name = "ChipReport")]
#[derive(Clone)]
pub(crate) struct PyChipReport {
    chip: u32,
    label: Option<String>,
    sizing: PySizing,
    /// Device memory the run's arena reserved, in bytes.
    reserved_bytes: u64,
    /// Peak use per ring (the high-water marks).
    high_water: Vec<PyRingUsage>,
    /// Kernel tasks the L2 graph ran.
    tasks: u64,
    aicpu_threads: u32,
    wall: f64,
    env_problems: Vec<String>,
    diagnostics: Vec<String>,
    /// What the run's checks found without failing it (a write-after-read hazard).
    warnings: Vec<String>,
}

impl From<&ChipRunReport> for PyChipReport {
    fn from(c: &ChipRunReport) -> PyChipReport {
        PyChipReport {
            chip: c.chip,
            label: c.label.clone(),
            sizing: PySizing::from(&c.sizing),
            reserved_bytes: c.footprint.arena,
            high_water: c
                .usage
                .iter()
                .map(|u| PyRingUsage {
                    task_window: u.task_window_peak,
                    heap: u.heap_peak,
                    dep_pool: u.dep_pool_peak,
                })
                .collect(),
            tasks: c.tasks,
            aicpu_threads: c.aicpu_threads,
            wall: c.wall.as_secs_f64(),
            env_problems: c.env_problems.clone(),
            diagnostics: c
                .diagnostics
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
            warnings: c.warnings.clone(),
        }
    }
}

#[pymethods]
impl PyChipReport {
    fn __repr__(&self) -> String {
        format!(
            "ChipReport(chip={}, label={:?}, sizing={}, reserved_bytes={})",
            self.chip, self.label, self.sizing.text, self.reserved_bytes
        )
    }
}

/// One member of a task (a single task has one) on the worker that ran it.
#[pyclass(frozen, get_all, module = "pto._native", name = "MemberReport")]
#[derive(Clone)]
pub(crate) struct PyMemberReport {
    worker: String,
    exec_time: f64,
    chip: Option<PyChipReport>,
}

impl From<&MemberReport> for PyMemberReport {
    fn from(m: &MemberReport) -> PyMemberReport {
        PyMemberReport {
            worker: m.worker.clone(),
            exec_time: m.exec_time.as_secs_f64(),
            chip: m.chip.as_ref().map(PyChipReport::from),
        }
    }
}

/// One task of a run.
#[pyclass(frozen, get_all, module = "pto._native", name = "TaskReport")]
#[derive(Clone)]
pub(crate) struct PyTaskReport {
    index: u32,
    label: Option<String>,
    /// `next_level` (chip jobs) or `sub`.
    kind: &'static str,
    callable: String,
    ok: bool,
    /// `completed`, `failed`, `skipped` or `cancelled`.
    outcome: &'static str,
    error: Option<String>,
    code: Option<u32>,
    code_name: Option<&'static str>,
    producers: Vec<u32>,
    members: Vec<PyMemberReport>,
    /// The first chip member's report (None for sub tasks, and chip tasks that failed before
    /// their chip reported).
    chip: Option<PyChipReport>,
    /// The sizing the chip bound (None for sub tasks).
    sizing: Option<PySizing>,
    /// Device memory the chip's arena reserved, in bytes (None for sub tasks).
    reserved_bytes: Option<u64>,
    /// Peak use per ring (None without a chip report).
    high_water: Option<Vec<PyRingUsage>>,
    /// `chip` (from the chip's report), `resolved` (a chip task that failed before reporting:
    /// its config resolved against the chips' environment, as the chip did), or None.
    sizing_from: Option<&'static str>,
}

impl PyTaskReport {
    fn new(t: &TaskReport, configs: Option<&TaskConfigs>) -> PyTaskReport {
        let members: Vec<PyMemberReport> = t.members.iter().map(PyMemberReport::from).collect();
        let chip = members.iter().find_map(|m| m.chip.clone());
        let resolved = match (&chip, t.kind, configs) {
            (None, TaskKind::NextLevel, Some(c)) => c.resolved(t.id.index),
            _ => None,
        };
        let (outcome, error, code) = match &t.outcome {
            TaskOutcome::Success => ("completed", None, None),
            TaskOutcome::Failed(f) => {
                let outcome = match f.kind {
                    FailureKind::Skipped => "skipped",
                    FailureKind::Cancelled => "cancelled",
                    _ => "failed",
                };
                (outcome, Some(f.to_string()), f.code)
            }
        };
        PyTaskReport {
            index: t.id.index,
            label: t.label.clone(),
            kind: match t.kind {
                TaskKind::NextLevel => "next_level",
                TaskKind::Sub => "sub",
            },
            callable: t.callable.clone(),
            ok: t.outcome.is_success(),
            outcome,
            error,
            code: code.map(|c| c.code()),
            code_name: code.map(|c| c.name()),
            producers: t.producers.iter().map(|p| p.index).collect(),
            sizing_from: match (&chip, &resolved) {
                (Some(_), _) => Some("chip"),
                (None, Some(_)) => Some("resolved"),
                (None, None) => None,
            },
            sizing: chip
                .as_ref()
                .map(|c| c.sizing.clone())
                .or_else(|| resolved.as_ref().map(|r| r.0.clone())),
            reserved_bytes: chip
                .as_ref()
                .map(|c| c.reserved_bytes)
                .or(resolved.map(|r| r.1)),
            high_water: chip.as_ref().map(|c| c.high_water.clone()),
            chip,
            members,
        }
    }
}

#[pymethods]
impl PyTaskReport {
    fn __repr__(&self) -> String {
        format!(
            "TaskReport(index={}, label={:?}, kind={}, outcome={})",
            self.index, self.label, self.kind, self.outcome
        )
    }
}

/// A finished run: every task in submission order.
#[pyclass(frozen, get_all, module = "pto._native", name = "RunReport")]
pub(crate) struct PyRunReport {
    run_id: u64,
    /// Seconds from submit to the last task's end.
    wall: f64,
    tasks: Vec<PyTaskReport>,
}

impl PyRunReport {
    /// The report of `r`; `configs` fills in the sizing of chip tasks without a chip report.
    pub(crate) fn new(r: &RunReport, configs: Option<&TaskConfigs>) -> PyRunReport {
        PyRunReport {
            run_id: r.run_id,
            wall: r.wall.as_secs_f64(),
            tasks: r
                .tasks
                .iter()
                .map(|t| PyTaskReport::new(t, configs))
                .collect(),
        }
    }
}

#[pymethods]
impl PyRunReport {
    /// The task labelled `label` (the first one), or None.
    fn task(&self, label: &str) -> Option<PyTaskReport> {
        self.tasks
            .iter()
            .find(|t| t.label.as_deref() == Some(label))
            .cloned()
    }

    fn __len__(&self) -> usize {
        self.tasks.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "RunReport(run_id={}, tasks={})",
            self.run_id,
            self.tasks.len()
        )
    }
}
