//! `pto-node`: the L3 node runtime (NODE_RUNTIME.md).
//!
//! A [`Worker`] (level 3) owns N chip workers and M sub workers. A user orchestration function,
//! given to [`Worker::submit`], builds a task graph through the [`Orchestrator`] facade; the
//! engine infers dependencies from tensor tags in a per-run TensorMap, the scheduler thread
//! dispatches ready tasks to the children through endpoints, and each run reports every task's
//! outcome — for chip tasks the full `ChipRunReport`, so a caller can see that each L2 task
//! bound exactly the sizing its own `CallConfig` asked for (RING_CONFIG.md).
//!
//! Map (each file's `//!` cites its spec section):
//! - [`builder`] — `Worker::builder(level)` options (§1.1);
//! - [`worker`](Worker) — lifecycle, `register`, `submit`/`run`, `RunHandle`, `close` (§1);
//! - [`callable`] — callables by name, [`register_sub!`] (§1.2);
//! - `orch` — the [`Orchestrator`] facade, scopes, `alloc` (§1.5, §2.4, §2.5);
//! - `engine` — slots, state machine, TensorMap, runs, queues behind one mutex (§2);
//! - `heap` — the four heap rings behind `alloc` (§2.8);
//! - `scheduler` — the scheduler thread (§3);
//! - `endpoint` — the `Endpoint` trait and the in-process lanes (§4.1);
//! - `buffer`, `sub` — host buffers, `MappedArgs` for sub functions (§1.3, §5);
//! - [`error`], [`report`] — typed errors (§1.7) and run reports (§1.4).
//!
//! Architecture invariants: all graph state sits behind one engine mutex; only the scheduler
//! thread calls endpoints; every wait spins briefly, then parks on a `pto_types::wait`
//! event count; the process environment is read only through `EnvSource::process()` (once per
//! `init`) and never written. This crate has no `unsafe` in the in-process mode.
#![forbid(unsafe_code)]

mod buffer;
pub mod builder;
pub mod callable;
mod endpoint;
mod engine;
pub mod error;
mod heap;
mod orch;
pub mod report;
mod scheduler;
mod sub;
mod worker;

pub use buffer::{Element, HostBuffer};
pub use builder::{EndpointMode, WorkerBuilder};
pub use callable::{Callable, CallableHandle, CallableKind, SubFn};
pub use error::{
    AllocError, BufferError, BuildError, ControlError, FailureKind, InitError, OrchError,
    RegisterError, RunError, ScopeError, SubmitError, SubmitRunError, TaskFailure, WaitError,
    WorkerRunError,
};
pub use orch::{MAX_SCOPE_DEPTH, Orchestrator};
pub use report::{
    CloseReport, MemberReport, RunReport, TaskId, TaskKind, TaskOutcome, TaskReport, WorkerStats,
};
pub use sub::{MappedArgs, SubContext, TaskError};
pub use worker::{RunHandle, Worker};
