//! The simulated L2 chip runtime (CHIP_RUNTIME.md).
//!
//! A chip runs task DAGs that an orchestration function builds while it executes, into four
//! scope-depth rings sized per run from a resolved `CallConfig` (RING_CONFIG.md). The entry
//! point is [`ChipWorker`]: `ChipWorker::new(spec, env)` starts a chip, `run` binds one
//! `CallConfig` and runs one registered orchestration ([`register_chip!`]) whose kernels are
//! registered by name ([`register_kernel!`]). The orchestration API is in [`orch`].
//!
//! Architecture invariants: this crate knows nothing about L3; it is usable directly. `unsafe`
//! lives only in `kernel/view.rs`, `kernel/ctx.rs`, `memory/host_memory.rs` and
//! `engine/heap.rs`: the crate denies it, and only those four modules allow it.
#![deny(unsafe_code)]

/// Wrappers of crate-private hot paths for the criterion benches (feature `bench-internals`).
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod bench_support;
pub mod callable;
pub mod diag;
mod engine;
pub mod error;
pub mod footprint;
pub mod kernel;
pub mod memory;
pub mod orch;
pub mod plan;
pub mod replay;
pub(crate) mod ring;
pub mod spec;
pub mod task_id;
pub mod tensor;
pub(crate) mod tensormap;
mod worker;

pub use error::{BindError, ChipError, ChipRunError, Detector, Fatal, OrchResult, ResourceKind};
pub use plan::{Plan, PlanError};
/// What a chip user passes to `ChipWorker::new` and reads from a report, re-exported so that
/// depending on `pto-chip` is enough to drive a chip.
pub use pto_types::{EnvSnapshot, EnvSource, ResolvedSizing, SizeSource};
pub use spec::ChipSpec;
pub use task_id::TaskId;
pub use worker::{
    ChipRunReport, ChipStartError, ChipWorker, DEVICE_BUFFER_OWNER, RingUsage, RunContext,
};
