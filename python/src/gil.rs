//! Taking the GIL from the runtime's own threads (sub lanes running Python sub functions).
//!
//! `Python::attach` on a thread CPython does not know creates a thread state and frees it when
//! the GIL is released, and freeing a thread state unmaps its frame stack: on every sub task,
//! a `munmap` whose TLB shootdown interrupts every core (a third of a no-op sub task's cost,
//! BENCHMARKS.md "Python bindings"). A lane thread therefore registers with CPython once and
//! keeps its thread state for the rest of its life; each task then only takes and drops the
//! GIL. The one thread state per lane thread is not freed: lane threads live as long as their
//! Worker, and CPython frees leftover thread states when the interpreter finalises.

use std::cell::Cell;

use pyo3::prelude::*;

thread_local! {
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// `Python::attach`, keeping this thread's CPython thread state between calls.
pub(crate) fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    if !REGISTERED.get() {
        REGISTERED.set(true);
        // Take the GIL once through pyo3, so that the interpreter is known to be running, then
        // keep one more thread-state reference than pyo3 will ever release.
        Python::attach(|_| {
            // SAFETY: the GIL is held here (inside attach), as PyGILState_Ensure's nested use
            // allows; the returned state is never released, so the thread state this thread
            // got for this attach outlives it (its counter stays above zero).
            let _kept = unsafe { pyo3::ffi::PyGILState_Ensure() };
        });
    }
    Python::attach(f)
}
