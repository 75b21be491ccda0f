//! Integration tests of the real `pto` binary (STYLE.md habit 16): one test binary, each test
//! with its own directory and an explicit environment; the process environment is never changed.

mod advise;
mod bench;
mod config_resolve;
mod inputs;
mod liveness;
#[cfg(feature = "mpi")]
mod mpi;
mod readme;
mod remote;
mod reports;
mod run;
mod scenes;
mod sizing_loop;
mod util;
