//! `RuntimeEnv`, `CallConfig` and `resolve`: the per-task ring sizing of RING_CONFIG.md in
//! Python. Every value is checked where it is given, and a bad one raises
//! `pto.ConfigError` naming the field, the ring and the value.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PyTuple};

use pto_sizing::report::{SizingReport, SizingReportError, SizingRequest};
use pto_types::{CallConfig, EnvSource, RING_COUNT, Resource, RingValue, TaskOverrides, WarCheck};

use crate::errors::{ConfigAt, config_error, config_error_at, config_value_error, obj, raise};
use crate::report::PySizing;

/// `e` (about ring 0 of `resource`) for a value given once for every ring: ring None, and
/// the message names the field without a ring index.
fn broadcast_error(py: Python<'_>, resource: Resource, e: &pto_types::ConfigError) -> PyErr {
    let field = resource.config_path();
    let message = e
        .to_string()
        .replacen(&format!("{field}[0]="), &format!("{field}="), 1);
    let at = ConfigAt {
        field,
        resource: Some(resource.field()),
        ring: None,
        value: obj(py, e.value()),
    };
    config_error_at(py, message, at)
}

/// One ring value from Python: a non-negative integer below 2^64, not a bool.
fn ring_int(
    py: Python<'_>,
    resource: Resource,
    ring: Option<usize>,
    v: &Bound<'_, PyAny>,
) -> PyResult<u64> {
    let bad = |why: &str| {
        config_value_error(
            py,
            resource.config_path(),
            Some(resource.field()),
            ring,
            v.clone().unbind(),
            why,
        )
    };
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(bad("must be an integer (0 = unset)"));
    }
    v.extract::<u64>()
        .map_err(|_| bad("must be an integer in 0..2^64 (0 = unset)"))
}

/// `None` (unset), an int (every ring) or a list of one int per ring.
fn ring_value(
    py: Python<'_>,
    resource: Resource,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<RingValue>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut values = Vec::new();
        for (ring, item) in v.try_iter()?.enumerate() {
            values.push(ring_int(py, resource, Some(ring), &item?)?);
        }
        return RingValue::from_slice(resource, &values)
            .map(Some)
            .map_err(|e| config_error(py, &e));
    }
    Ok(Some(RingValue::Broadcast(ring_int(py, resource, None, v)?)))
}

/// The ring sizing of one task: `ring_task_window`, `ring_heap`, `ring_dep_pool`, each a
/// scalar for every ring or a list of four (one per scope-depth ring); 0 = unset (the
/// environment's `PTO2_RING_*`, then the built-in default).
#[pyclass(
    frozen,
    eq,
    from_py_object,
    module = "pto._native",
    name = "RuntimeEnv"
)]
#[derive(Clone, PartialEq)]
pub(crate) struct PyRuntimeEnv {
    pub(crate) inner: pto_types::RuntimeEnv,
}

impl PyRuntimeEnv {
    fn build(
        py: Python<'_>,
        values: [Option<&Bound<'_, PyAny>>; 3],
    ) -> PyResult<pto_types::RuntimeEnv> {
        let mut env = pto_types::RuntimeEnv::default();
        for (resource, v) in Resource::ALL.into_iter().zip(values) {
            let Some(value) = ring_value(py, resource, v)? else {
                continue;
            };
            let mut alone = pto_types::RuntimeEnv::default();
            alone.set(resource, value);
            if let Err(e) = alone.validate() {
                return Err(match value {
                    // One value for every ring: the error is not about ring 0.
                    RingValue::Broadcast(_) => broadcast_error(py, resource, &e),
                    RingValue::PerRing(_) => config_error(py, &e),
                });
            }
            env.set(resource, value);
        }
        Ok(env)
    }
}

#[pymethods]
impl PyRuntimeEnv {
    #[new]
    #[pyo3(signature = (ring_task_window=None, ring_heap=None, ring_dep_pool=None))]
    fn new(
        py: Python<'_>,
        ring_task_window: Option<&Bound<'_, PyAny>>,
        ring_heap: Option<&Bound<'_, PyAny>>,
        ring_dep_pool: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let inner = Self::build(py, [ring_task_window, ring_heap, ring_dep_pool])?;
        Ok(PyRuntimeEnv { inner })
    }

    /// Task-window slots per ring (0 = unset).
    #[getter]
    fn ring_task_window(&self) -> [u64; RING_COUNT] {
        self.inner.ring_task_window
    }

    /// Heap bytes per ring (0 = unset).
    #[getter]
    fn ring_heap(&self) -> [u64; RING_COUNT] {
        self.inner.ring_heap
    }

    /// Dependency-pool entries per ring (0 = unset).
    #[getter]
    fn ring_dep_pool(&self) -> [u64; RING_COUNT] {
        self.inner.ring_dep_pool
    }

    /// Whether no value is set.
    fn is_unset(&self) -> bool {
        self.inner.is_unset()
    }

    fn __repr__(&self) -> String {
        format!(
            "RuntimeEnv(ring_task_window={:?}, ring_heap={:?}, ring_dep_pool={:?})",
            self.inner.ring_task_window, self.inner.ring_heap, self.inner.ring_dep_pool
        )
    }
}

/// A task's configuration (RING_CONFIG.md §2): its `runtime_env` sizing and diagnostics.
/// Validated when built; `derive` makes a per-task variant.
#[pyclass(
    frozen,
    eq,
    from_py_object,
    module = "pto._native",
    name = "CallConfig"
)]
#[derive(Clone, PartialEq)]
pub(crate) struct PyCallConfig {
    pub(crate) inner: CallConfig,
}

#[pymethods]
impl PyCallConfig {
    #[new]
    #[pyo3(signature = (runtime_env=None, *, aicpu_thread_num=None, enable_scope_stats=false,
        enable_dep_gen=false, enable_chip_swimlane=None, output_prefix=None, track_war=false,
        war_check="auto"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        runtime_env: Option<PyRuntimeEnv>,
        aicpu_thread_num: Option<&Bound<'_, PyAny>>,
        enable_scope_stats: bool,
        enable_dep_gen: bool,
        enable_chip_swimlane: Option<&Bound<'_, PyAny>>,
        output_prefix: Option<std::path::PathBuf>,
        track_war: bool,
        war_check: &str,
    ) -> PyResult<Self> {
        let mut inner = CallConfig::default();
        if let Some(env) = runtime_env {
            inner.runtime_env = env.inner;
        }
        if let Some(n) = aicpu_thread_num.filter(|n| !n.is_none()) {
            inner.aicpu_thread_num = config_int(py, "aicpu_thread_num", n)?;
        }
        inner.enable_scope_stats = enable_scope_stats;
        inner.enable_dep_gen = enable_dep_gen;
        if let Some(level) = enable_chip_swimlane.filter(|n| !n.is_none()) {
            inner.enable_chip_swimlane = config_int(py, "enable_chip_swimlane", level)?;
        }
        inner.output_prefix = output_prefix.map(|p| p.to_string_lossy().into_owned());
        inner.track_war = track_war;
        inner.war_check = war_check_named(py, war_check)?;
        inner.validate().map_err(|e| config_error(py, &e))?;
        Ok(PyCallConfig { inner })
    }

    /// A copy whose non-zero sizing entries (from `runtime_env` and the `ring_*` keywords,
    /// the keywords last) replace this config's; the rest is inherited.
    #[pyo3(signature = (runtime_env=None, *, aicpu_thread_num=None, ring_task_window=None,
        ring_heap=None, ring_dep_pool=None, track_war=None))]
    #[allow(clippy::too_many_arguments)]
    fn derive(
        &self,
        py: Python<'_>,
        runtime_env: Option<PyRuntimeEnv>,
        aicpu_thread_num: Option<&Bound<'_, PyAny>>,
        ring_task_window: Option<&Bound<'_, PyAny>>,
        ring_heap: Option<&Bound<'_, PyAny>>,
        ring_dep_pool: Option<&Bound<'_, PyAny>>,
        track_war: Option<bool>,
    ) -> PyResult<Self> {
        let keywords = PyRuntimeEnv::build(py, [ring_task_window, ring_heap, ring_dep_pool])?;
        let base = runtime_env.map(|e| e.inner).unwrap_or_default();
        let threads = aicpu_thread_num.filter(|n| !n.is_none());
        let overrides = TaskOverrides {
            aicpu_thread_num: threads
                .map(|n| config_int(py, "aicpu_thread_num", n))
                .transpose()?,
            runtime_env: base.overlaid_with(&keywords),
            track_war,
        };
        let inner = self
            .inner
            .derive(&overrides)
            .map_err(|e| config_error(py, &e))?;
        Ok(PyCallConfig { inner })
    }

    #[getter]
    fn runtime_env(&self) -> PyRuntimeEnv {
        PyRuntimeEnv {
            inner: self.inner.runtime_env,
        }
    }

    #[getter]
    fn aicpu_thread_num(&self) -> u32 {
        self.inner.aicpu_thread_num
    }

    #[getter]
    fn enable_scope_stats(&self) -> bool {
        self.inner.enable_scope_stats
    }

    #[getter]
    fn enable_dep_gen(&self) -> bool {
        self.inner.enable_dep_gen
    }

    #[getter]
    fn enable_chip_swimlane(&self) -> u8 {
        self.inner.enable_chip_swimlane
    }

    #[getter]
    fn output_prefix(&self) -> Option<String> {
        self.inner.output_prefix.clone()
    }

    #[getter]
    fn track_war(&self) -> bool {
        self.inner.track_war
    }

    #[getter]
    fn war_check(&self) -> &'static str {
        self.inner.war_check.name()
    }

    fn __repr__(&self) -> String {
        let env = self.runtime_env().__repr__();
        format!(
            "CallConfig(runtime_env={env}, aicpu_thread_num={}, enable_scope_stats={}, output_prefix={:?}, track_war={}, war_check={:?})",
            self.inner.aicpu_thread_num,
            self.inner.enable_scope_stats,
            self.inner.output_prefix,
            if self.inner.track_war {
                "True"
            } else {
                "False"
            },
            self.inner.war_check.name()
        )
    }
}

/// `war_check` by name; another name raises `pto.ConfigError` listing the names.
fn war_check_named(py: Python<'_>, name: &str) -> PyResult<WarCheck> {
    WarCheck::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = WarCheck::ALL.iter().map(|w| w.name()).collect();
        let why = format!("must be one of {}", names.join(", "));
        config_value_error(py, "war_check", None, None, obj(py, name), &why)
    })
}

/// What `pto.resolve` found: the sizing with the source of every value, and the memory it
/// reserves on a chip (`pto config resolve`).
#[pyclass(frozen, module = "pto._native", name = "Resolution")]
pub(crate) struct PyResolution {
    report: SizingReport,
}

#[pymethods]
impl PyResolution {
    #[getter]
    fn sizing(&self) -> PySizing {
        PySizing::from(&self.report.sizing)
    }

    /// Device memory a chip reserves for this sizing (the arena), in bytes.
    #[getter]
    fn reserved_bytes(&self) -> u64 {
        self.report.footprint.arena
    }

    /// Whether the arena fits `device_memory` (None when none was given).
    #[getter]
    fn fits(&self) -> Option<bool> {
        self.report.device_memory.map(|(_, fits)| fits)
    }

    /// Problems of the environment tier (ignored values), rendered.
    #[getter]
    fn env_problems(&self) -> Vec<String> {
        self.report.problems.clone()
    }

    /// The table `pto config resolve` prints.
    fn table(&self) -> String {
        self.report.render_table()
    }

    /// The JSON object of `pto config resolve --json`, as text.
    fn to_json(&self) -> String {
        pto_chip::diag::json_text(&self.report.to_json())
    }

    fn __str__(&self) -> String {
        self.report.sizing.compact()
    }
}

/// Resolves `config`'s sizing as a chip would: per-task values, then `env` (a mapping of
/// `PTO2_RING_*` variables; the process environment when None), then the built-in defaults.
#[pyfunction]
#[pyo3(signature = (config=None, *, env=None, strict_env=false, device_memory=None))]
pub(crate) fn resolve(
    py: Python<'_>,
    config: Option<PyCallConfig>,
    env: Option<HashMap<String, String>>,
    strict_env: bool,
    device_memory: Option<u64>,
) -> PyResult<PyResolution> {
    let request = SizingRequest {
        config: config.map(|c| c.inner).unwrap_or_default(),
        env: match env {
            Some(pairs) => EnvSource::from_pairs(pairs),
            None => EnvSource::process(),
        },
        strict_env,
        device_memory,
    };
    match SizingReport::build(&request) {
        Ok(report) => Ok(PyResolution { report }),
        Err(SizingReportError::InvalidConfig(e)) => Err(config_error(py, &e)),
        Err(SizingReportError::Env(e)) => Err(env_error(py, &e)),
        Err(e) => Err(raise(py, "ConfigError", e.to_string(), &[])),
    }
}

/// A strict environment's first problem: `field` is the variable, `value` its raw text,
/// `ring` the ring of the offending piece (for a per-ring list).
fn env_error(py: Python<'_>, e: &pto_types::EnvError) -> PyErr {
    let Some(p) = e.problems.first() else {
        return raise(py, "ConfigError", e.to_string(), &[]);
    };
    let ring = p.piece.as_ref().filter(|piece| piece.count > 1);
    let at = ConfigAt {
        field: &p.variable,
        resource: p.resource().map(|r| r.field()),
        ring: ring.map(|piece| piece.position - 1),
        value: obj(py, p.raw.as_str()),
    };
    config_error_at(py, e.to_string(), at)
}

/// A small unsigned config field from Python: an int in `0..=T::MAX`, else a `ConfigError`
/// naming the field and the value.
fn config_int<T: TryFrom<i128>>(py: Python<'_>, field: &str, v: &Bound<'_, PyAny>) -> PyResult<T> {
    let bad = |why: &str| config_value_error(py, field, None, None, v.clone().unbind(), why);
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(bad("must be an integer"));
    }
    let wide = v.extract::<i128>().map_err(|_| bad("is out of range"))?;
    T::try_from(wide).map_err(|_| bad("is out of range"))
}
