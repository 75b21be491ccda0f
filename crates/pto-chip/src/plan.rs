//! What a chip binds for a task, computed in one place: the ring sizing resolved from the
//! task's `runtime_env` over the chip's environment snapshot and the built-in defaults
//! (RING_CONFIG.md §5), the capacities derived from it (§6) and the arena it needs (§7.1).
//!
//! `ChipWorker::run` binds exactly this; reports rebuilt from a wire record, the sizing rows
//! of tasks that failed before a chip reported, and `pto config resolve` all call [`Plan`]
//! too, so what they show is what a chip would bind.

use pto_types::ring_config::env::EnvSnapshot;
use pto_types::ring_config::resolve::{
    DerivedCapacities, ResolvedSizing, RingDefaults, SizingError, resolve,
};
use pto_types::{ConfigError, RuntimeEnv};

use crate::footprint::{Footprint, footprint};

/// A task's sizing and everything a chip derives from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub sizing: ResolvedSizing,
    pub derived: DerivedCapacities,
    pub footprint: Footprint,
}

/// Why a task's sizing cannot be bound.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A `runtime_env` value breaks a ring rule.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The sizing is legal per value but its derived limits or arena overflow.
    #[error("{0}")]
    Sizing(#[from] SizingError),
}

impl Plan {
    /// What a chip whose environment snapshot is `env` binds for `runtime_env`.
    pub fn resolve(runtime_env: &RuntimeEnv, env: &EnvSnapshot) -> Result<Plan, PlanError> {
        let sizing = resolve(runtime_env, env, &RingDefaults::BUILT_IN)?;
        Ok(Plan::of(sizing)?)
    }

    /// The plan of a sizing resolved before (read back from a report, say).
    pub fn of(sizing: ResolvedSizing) -> Result<Plan, SizingError> {
        Ok(Plan {
            sizing,
            derived: sizing.derived()?,
            footprint: footprint(&sizing)?,
        })
    }
}
