//! Integration tests of `pto-node` (one binary, modules by theme; STYLE.md habit 16).
//!
//! Tests are named after the rows they pin: `nNN_…` for NODE_RUNTIME.md §9, `tNN_…` for
//! RING_CONFIG.md §14, `done_…` for the issues' "Done when" lists. Every body runs under a
//! watchdog ([`common::with_timeout`]). The L3 tests run in both endpoint modes
//! (`common::both_modes!`): in-process chips get an explicit empty environment source, chip
//! children their own environment (the test process's, which sets no `PTO2_RING_*`, plus the
//! test's `ring_env` pairs); the process environment is never written. Child processes are this
//! binary re-executed: `test_child_entry!()` below is their entry.

#[path = "../examples/support/mod.rs"]
mod support;

mod common;

mod api;
mod child;
mod config;
mod done_when;
mod examples;
mod failure;
mod graph;
mod heap;
mod l4;
mod liveness;
mod memory;
mod pipeline;
mod remote;
mod replay;
mod war;

pto_node::test_child_entry!();
