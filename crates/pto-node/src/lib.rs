//! `pto-node`: the L3+ node runtime (NODE_RUNTIME.md).
//!
//! A [`Worker`] of level 3 owns N chip workers and M sub workers; a Worker of level 4 owns L3
//! Worker children (`add_worker`) and sub workers. A user orchestration function, given to
//! [`Worker::submit`], builds a task graph through the [`Orchestrator`] facade; the engine
//! infers dependencies from tensor tags in a per-run TensorMap, the scheduler thread dispatches
//! ready tasks to the children through endpoints, and each run reports every task's outcome —
//! for chip tasks the full `ChipRunReport` (also across the process boundary, and nested in the
//! report of an L4 node task), so a caller can see that each L2 task bound exactly the sizing
//! its own `CallConfig` asked for (RING_CONFIG.md).
//!
//! Children are threads ([`EndpointMode::InProcess`]) or, by default, **child processes**
//! ([`EndpointMode::ChildProcess`]): the current executable re-executed (a binary calls
//! [`child_main`] first in `main`; a test binary declares [`test_child_entry!`]), driven through
//! a 64 KiB shared-memory mailbox per child, with host buffers in shared `memfd` segments.
//!
//! Map (each file's `//!` cites its spec section):
//! - [`builder`] — `Worker::builder(level)` options (§1.1);
//! - [`worker`](Worker) — lifecycle, `register`, `add_worker`, `submit`/`run`, `RunHandle`,
//!   `close` (§1, §6.1);
//! - [`callable`] — callables by name, [`register_sub!`], [`register_node!`] (§1.2);
//! - `orch` — the [`Orchestrator`] facade, scopes, `alloc` (§1.5, §2.4, §2.5);
//! - `engine` — slots, state machine, TensorMap, runs, queues behind one mutex (§2);
//! - `heap` — the four heap rings behind `alloc` (§2.8);
//! - `scheduler` — the scheduler thread (§3);
//! - `endpoint` — the `Endpoint` trait, in-process lanes, child-process endpoints (§4.1);
//! - `shm` — segments, the mailbox protocol (rules M1–M8), the cross-process doorbell (§3.4,
//!   §4.3–§4.6); the only `unsafe` of the crate, in `shm/segment.rs` (rules S1–S5) and
//!   `spawn.rs`;
//! - `spawn` — the one place that starts processes (§4.2); `monitor` — the thread that spawns,
//!   watches pidfds and reaps (§4.9); `launch` — start-up handshake and rollback (§4.6);
//! - `child` — what a child process runs: chip, sub and node roles (§5, §6.1); `boot` — the
//!   boot-block form of a `ChipSpec`, which the parent writes and the child reads;
//! - `buffer`, `sub` — host buffers, `MappedArgs` for sub functions (§1.3, §5);
//! - [`error`], [`report`] — typed errors (§1.7) and run reports (§1.4).
//!
//! Architecture invariants: all graph state sits behind one engine mutex; endpoints are called
//! only by the holder of the scheduler's mutex (`scheduler::Pump`; lock order scheduler →
//! engine → lane queue); every wait spins briefly, then parks (a `pto_types::wait` event
//! count, or the futex doorbell shared with child processes); the process environment is read
//! only through `EnvSource::process()` and never written; every binary record that crosses a
//! process boundary is defined in `pto_types::node_wire`.
#![deny(unsafe_code)]

/// Wrappers of crate-private hot paths for the criterion benches (feature `bench-internals`).
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod bench_support;
mod boot;
mod buffer;
pub mod builder;
pub mod callable;
mod child;
mod device;
mod endpoint;
mod engine;
pub mod error;
pub mod floor;
mod heap;
mod launch;
mod monitor;
#[cfg(feature = "mpi")]
pub mod mpi;
mod orch;
pub mod remote;
pub mod report;
mod scheduler;
mod shm;
mod spawn;
mod sub;
mod worker;

pub use buffer::{Element, HostBuffer};
pub use builder::{
    ChildExe, DEFAULT_LANE_DEPTH, DEFAULT_LIVENESS_TIMEOUT, EndpointMode, MAX_LANE_DEPTH,
    UnknownMode, WorkerBuilder, set_host_child_exe,
};
pub use callable::{Callable, CallableHandle, CallableKind, NodeFn, SubFn};
pub use child::child_main;
pub use device::DeviceTensor;
pub use error::{
    AddWorkerError, AllocError, BufferError, BuildError, ControlError, FailureKind, InitError,
    OrchError, RegisterError, RunError, ScopeError, SubmitError, SubmitRunError, TaskFailure,
    WaitError, WorkerRunError,
};
pub use orch::{MAX_SCOPE_DEPTH, Orchestrator};
/// What a Worker user passes to `WorkerBuilder::chip_env_source` and reads from chip reports,
/// re-exported so that depending on `pto-node` is enough to drive a Worker.
pub use pto_types::{EnvSource, ResolvedSizing, SizeSource};
pub use report::{
    CloseReport, LaneStats, MemberReport, NodeTaskId, RunReport, TaskKind, TaskOutcome, TaskReport,
    WorkerStats,
};
pub use sub::{MappedArgs, SubContext, TaskError};
pub use worker::{RunHandle, Worker};

/// Declares the child entry of a **test binary** (NODE_RUNTIME.md §4.2): a `#[test]` named
/// `__pto_child` that runs [`child_main`]. A Worker in child-process mode re-executes the
/// current binary with `--exact __pto_child`, so in a test binary only this test runs, and it
/// becomes the child (with `PTO_CHILD=1`); run normally, it returns at once.
///
/// ```ignore
/// pto_node::test_child_entry!();
/// ```
#[macro_export]
macro_rules! test_child_entry {
    () => {
        #[test]
        fn __pto_child() {
            $crate::child_main();
        }
    };
}

// The lib's own tests start children too (re-executing the lib test binary).
#[cfg(test)]
test_child_entry!();
