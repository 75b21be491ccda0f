//! Scenes: workloads written in Rust (inputs, orchestration, golden, level) whose cases live in
//! TOML files (RING_CONFIG.md §11), registered by name from any crate; the runner behind
//! `pto run`, `pto tune` and `pto advise`, and the cargo-test harness.
//!
//! A user's crate registers its scenes with [`register_scene!`] (a type implementing
//! [`Scene`], or an [`L2Scene`] declared by its inputs and golden), runs their cases as cargo
//! tests with [`harness`], and gets the `pto` command line over them by calling
//! `pto_cli::main()` from its own binary (README, "Write your own workload"). This crate links
//! no command-line parser.
//!
//! - [`scene`] — the [`Scene`] trait, the registry and [`CaseRun`], what a case sees.
//! - [`l2`] — one L2 chip job for a scene ([`l2::run_l2`]) and [`L2Scene`].
//! - [`l3`] — an L3 orchestration for a scene ([`l3::run_l3`]) and its rows.
//! - [`harness`] — every case of every scene file in a directory as one cargo test.
//! - [`advice`] — scope stats of many runs merged per `config.tasks` key, and the advised
//!   case written back into a scene file (`pto advise --scene`, `pto tune`).
//! - [`config_block`] — the strict loader of a case's `config` block (also used by
//!   `pto config resolve --config`).
//! - [`figures`] — the memory figures of a case (device memory, heap reserved and high-water),
//!   defined once for every command and format.
//! - [`mod@file`] — scene files (`scene`, `level`, `[[cases]]`), checked when loaded.
//! - [`labels`] — the task labels a scene requests and the family rule for `config.tasks`.
//! - [`params`] — declared scene params ([`Param`]) and a case's checked values ([`Params`]).
//! - [`runner`] — runs a file's cases and renders the table or JSON lines.
//! - [`report_html`] — the self-contained HTML page of `pto run --report`.
//! - [`tune`] — `pto tune`: run, advise, verify the advised case, repeat on capacity errors.
//!
//! Nothing here changes the process environment: chips see it through an `EnvSource`
//! overlaid with the runner's `--ring-env` pairs.
#![forbid(unsafe_code)]

pub mod advice;
pub mod config_block;
pub mod figures;
pub mod file;
#[cfg(feature = "harness")]
pub mod harness;
pub mod l2;
pub mod l3;
pub mod labels;
pub mod params;
pub mod report_html;
pub mod runner;
pub mod scene;
mod scenes;
pub mod soak;
pub mod tune;

pub use config_block::{BlockError, CaseConfig, SceneLevel, parse_config_block};
pub use file::{LoadError, SceneFile};
pub use l2::{EntryArgs, EntryTensor, L2Scene, Tolerance};
pub use labels::Label;
pub use params::{Param, Params};
pub use scene::{CaseResult, CaseRun, RemoteSource, RunnerEnv, Scene, TaskRow, WorkerBounds};

/// The crates a scene is written against, so that depending on `pto-scene` alone is enough
/// (`pto_scene::pto_chip::register_kernel!` works like `pto_chip::register_kernel!`).
pub use {pto_chip, pto_node, pto_sizing, pto_types};

#[doc(hidden)]
pub use inventory as __inventory;
