//! Scene files from Python (`pto.testing.scene_cases`): the cases of a file, and one case run
//! as `pto run` runs it, for the scenes linked into this module.

use std::path::{Path, PathBuf};

use pyo3::prelude::*;

use pto_scene::SceneFile;
use pto_scene::runner::{Diagnostics, RunOptions, render_table, run_file};

use crate::errors::worker_error;

fn load(py: Python<'_>, path: &Path) -> PyResult<SceneFile> {
    SceneFile::load(path).map_err(|e| crate::errors::raise(py, "ConfigError", e.to_string(), &[]))
}

/// One case: its name, why it is ignored (if it is) and the code it is expected to fail with.
type CaseInfo = (String, Option<String>, Option<&'static str>);

/// Every case of the file at `path`.
#[pyfunction]
pub(crate) fn scene_cases(py: Python<'_>, path: PathBuf) -> PyResult<Vec<CaseInfo>> {
    let file = load(py, &path)?;
    Ok(file
        .cases
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.ignore.clone(),
                c.expect_failure.map(|e| e.name()),
            )
        })
        .collect())
}

/// The names of the scenes this module links (the ones a scene file may name).
#[pyfunction]
pub(crate) fn scene_names() -> Vec<&'static str> {
    pto_scene::scene::scenes()
        .iter()
        .map(|s| s.name())
        .collect()
}

/// Runs case `case` of the file at `path` in `mode`; returns whether it passed, the `pto run`
/// table of the case and why it failed (empty when it passed).
#[pyfunction]
#[pyo3(signature = (path, case, mode="child-process", fast=false))]
pub(crate) fn run_scene_case(
    py: Python<'_>,
    path: PathBuf,
    case: &str,
    mode: &str,
    fast: bool,
) -> PyResult<(bool, String, String)> {
    let mode = crate::worker::mode_of(py, mode)?;
    let file = load(py, &path)?;
    let out = std::env::temp_dir().join(format!("pto-scene-{}", std::process::id()));
    let options = RunOptions {
        case: Some(case.to_string()),
        output: out.join(case),
        diagnostics: Diagnostics::default(),
        env: pto_scene::RunnerEnv::new(mode, fast),
    };
    let reports = py
        .detach(|| run_file(&file, &options, |_| {}))
        .map_err(|e| worker_error(py, format!("{e:#}")))?;
    let passed = reports.iter().all(|r| r.result.passed());
    let why: Vec<String> = reports
        .iter()
        .filter_map(|r| r.result.check.as_ref().err().cloned())
        .collect();
    Ok((passed, render_table(&file, &reports), why.join("; ")))
}
