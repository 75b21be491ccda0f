//! Scene-test harness: scenes registered in Rust, their cases in TOML, and the runner behind
//! `pto run` (RING_CONFIG.md §11).
//!
//! - [`advice`] — scope stats of many runs merged per `config.tasks` key, and the advised
//!   case written back into a scene file (`pto advise --scene`, `pto tune`).
//! - [`config_block`] — the strict loader of a case's `config` block (also used by
//!   `pto config resolve --config`).
//! - [`mod@file`] — scene files (`scene`, `level`, `[[cases]]`), checked when loaded.
//! - [`labels`] — the task labels a scene requests and the family rule for `config.tasks`.
//! - [`params`] — declared scene params ([`Param`]) and a case's checked values ([`Params`]).
//! - [`scene`] — the [`Scene`] trait, the registry of shipped scenes and [`CaseRun`].
//! - [`runner`] — runs a file's cases and renders the table or JSON lines.
//! - [`report_html`] — the self-contained HTML page of `pto run --report`.
//! - [`sizing_report`] — the report behind `pto config resolve`.
//! - [`tune`] — `pto tune`: run, advise, verify the advised case, repeat on capacity errors.
//!
//! Nothing here changes the process environment: chips see it through an `EnvSource`
//! overlaid with the runner's `--ring-env` pairs.
#![forbid(unsafe_code)]

pub mod advice;
pub mod config_block;
pub mod file;
pub mod labels;
pub mod params;
pub mod report_html;
pub mod runner;
pub mod scene;
mod scenes;
pub mod sizing_report;
pub mod tune;

pub use config_block::{BlockError, CaseConfig, SceneLevel, parse_config_block};
pub use file::{LoadError, SceneFile};
pub use labels::Label;
pub use params::{Param, Params};
pub use scene::{CaseResult, CaseRun, RunnerEnv, Scene, TaskRow, WorkerBounds};
