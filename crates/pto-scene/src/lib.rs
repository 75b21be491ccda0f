//! Scene-test harness: scene files, their cases and per-case configuration (RING_CONFIG.md §11).
//!
//! So far this crate holds the strict loader of a case's `config` block ([`config_block`]),
//! shared by scene files and `pto config resolve --config`, and the ring-sizing report behind
//! `pto config resolve` ([`sizing_report`]).
#![forbid(unsafe_code)]

pub mod config_block;
pub mod sizing_report;

pub use config_block::{BlockError, CaseConfig, SceneLevel, parse_config_block};
