//! The simulated L2 chip runtime (CHIP_RUNTIME.md).
//!
//! A chip runs task DAGs that an orchestration function builds while it executes, into four
//! scope-depth rings sized per run from a resolved `CallConfig` (RING_CONFIG.md).
//!
//! Architecture invariant: this crate knows nothing about L3; it is usable directly.

pub mod footprint;
