//! Ring sizing as users see it, outside the chip runtime: the chip binds a sizing
//! ([`pto_chip::Plan`]) and records its scope stats (`pto_chip::diag::scope_stats`); this crate
//! answers the questions around that, for every command and binding that asks them.
//!
//! - [`report`] — what a config binds in an environment ([`SizingReport`], behind
//!   `pto config resolve` and Python's `pto.resolve`), its JSON ([`report::JsonReport`]), the
//!   one JSON rendering of a resolved sizing ([`report::rings_json`]) and which block of a
//!   layered config set each value ([`Block`]).
//! - [`advise`] — a per-ring sizing recommended from the scope stats of runs (`pto advise`,
//!   `pto tune`).
//!
//! Grouping runs by a scene's labels, writing advice back into scene files and the tuning
//! loop run scenes, so they live in `pto-scene` on top of this crate.
#![forbid(unsafe_code)]

pub mod advise;
pub mod report;

pub use report::{
    Block, SizingBlocks, SizingReport, SizingReportError, SizingRequest, human_bytes, rings_json,
};
