//! Integration tests of `pto-node` (one binary, modules by theme; STYLE.md habit 16).
//!
//! Tests are named after the rows they pin: `nNN_…` for NODE_RUNTIME.md §9, `tNN_…` for
//! RING_CONFIG.md §14, `done_…` for the "Done when" list. Every body runs under a
//! watchdog ([`common::with_timeout`]); every Worker is in-process with small chips and an
//! explicit environment source, so the process environment is never read for ring variables
//! and never written.

#[path = "../examples/support/mod.rs"]
mod support;

mod common;

mod api;
mod config;
mod done_when;
mod examples;
mod failure;
mod graph;
mod heap;
