//! Orchestrator-private ring allocators: task window, heap ring and dep pools of one scope-depth
//! ring (implements CHIP_RUNTIME.md §4; retirement as in §3.5–§3.6; failure data for §5.2–§5.3;
//! scope-stats counters and peaks for §7).
//!
//! These are plain single-threaded data structures owned by the orchestrator thread: no atomics,
//! no waiting. The runtime observes the published watermark `last_alive` of a ring and feeds it
//! in (the "refresh" step of the §5.2 wait loop), then retries:
//!
//! * [`TaskRing`] (per ring): `try_alloc(bytes)` checks the window first, then the heap, and
//!   commits both or nothing. `retire_to(L, packed_end(L − 1))` retires tasks below `L` and moves
//!   the heap tail, honouring a pending rebase anchor.
//! * [`DepPool`] (two per ring: dep-list nodes and fanin spill entries): `try_alloc_n(n)` reserves
//!   a run of linear positions; `advance_tail(mark(L − 1))` frees below a task's mark.
//!
//! Every allocator keeps a run-wide high-water mark and a stack of scope peak samples
//! (`begin_scope_sample` / `end_scope_sample`), so nested scopes on ring 3 get their own peaks;
//! `TaskRing::counters` and the pools' `tail`/`top` give the monotonic `*_start`/`*_end`
//! counters of a scope-stats sample.

mod dep_pool;
mod heap;
pub(crate) use heap::align_heap;
mod peaks;
mod task_ring;

#[cfg(test)]
mod prop_tests;

pub(crate) use dep_pool::DepPool;
pub(crate) use task_ring::{AllocFailureKind, Allocation, TaskRing};
