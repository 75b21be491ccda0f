//! `pto._native`: the Rust side of the `pto` Python package (PyO3, CPython's stable ABI).
//!
//! Python-facing names and conversions live in the package's Python code (`pto/`); this
//! module exposes the runtime: Workers (`worker`), the orchestrator an orchestration function
//! receives (`orch`; with `gil`, the only `unsafe`), buffers as numpy-visible memory (`memory`), configs
//! and sizing resolution (`config`), reports (`report`), errors (`errors`) and scene files
//! (`scenes`). A child process a Worker starts is this interpreter again, running
//! `_child_main` (set up by `_set_child_command` when the package is imported).

use pyo3::prelude::*;

mod config;
mod errors;
mod gil;
mod memory;
mod orch;
mod report;
mod scenes;
mod worker;

/// Serves a chip as a child process of a Worker, and exits; returns at once in any process a
/// Worker did not start.
#[pyfunction]
fn _child_main(py: Python<'_>) {
    py.detach(pto_node::child_main);
}

/// What a Worker in this process starts as a child: `program` with `args` (the interpreter,
/// told to import this module and call `_child_main`).
#[pyfunction]
fn _set_child_command(program: std::path::PathBuf, args: Vec<String>) {
    pto_node::set_host_child_exe(pto_node::ChildExe::Command {
        program,
        args: args.into_iter().map(Into::into).collect(),
    });
}

/// The numbered error codes: `(code, name, hint)` for each.
#[pyfunction]
fn error_codes() -> Vec<(u32, &'static str, &'static str)> {
    pto_types::ErrorCode::all()
        .map(|c| (c.code(), c.name(), c.hint()))
        .collect()
}

/// The chip callables this module links for users (`ChipCallable` names; the runtime's own,
/// such as `bench.empty_chip`, are not listed).
#[pyfunction]
fn chip_callables() -> Vec<&'static str> {
    pto_chip::callable::listed_chip_callable_names()
}

/// Keeps kernel panics off stderr: the chip runtime catches them on whichever thread runs the
/// kernel and reports them in the task's error (`KERNEL_PANIC`, with the panic's message), so
/// the default hook's print would only repeat it into the user's terminal. Other panics print
/// as before.
fn quiet_kernel_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !pto_chip::kernel::in_kernel() {
            previous(info);
        }
    }));
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    pto_kernels::link();
    quiet_kernel_panics();
    m.add_class::<config::PyRuntimeEnv>()?;
    m.add_class::<config::PyCallConfig>()?;
    m.add_class::<config::PyResolution>()?;
    m.add_class::<memory::PyMemory>()?;
    m.add_class::<orch::PyOrchestrator>()?;
    m.add_class::<orch::PyHandle>()?;
    m.add_class::<report::PyResolved>()?;
    m.add_class::<report::PySizing>()?;
    m.add_class::<report::PyRingUsage>()?;
    m.add_class::<report::PyChipReport>()?;
    m.add_class::<report::PyMemberReport>()?;
    m.add_class::<report::PyTaskReport>()?;
    m.add_class::<report::PyRunReport>()?;
    m.add_class::<worker::PyWorker>()?;
    m.add_function(wrap_pyfunction!(config::resolve, m)?)?;
    m.add_function(wrap_pyfunction!(scenes::scene_cases, m)?)?;
    m.add_function(wrap_pyfunction!(scenes::scene_names, m)?)?;
    m.add_function(wrap_pyfunction!(scenes::run_scene_case, m)?)?;
    m.add_function(wrap_pyfunction!(_child_main, m)?)?;
    m.add_function(wrap_pyfunction!(_set_child_command, m)?)?;
    m.add_function(wrap_pyfunction!(error_codes, m)?)?;
    m.add_function(wrap_pyfunction!(chip_callables, m)?)?;
    Ok(())
}
