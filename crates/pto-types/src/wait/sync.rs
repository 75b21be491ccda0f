//! The `cfg(loom)` shim of the wait primitive (STYLE.md habit 13).
//!
//! [`EventCount`](super::EventCount) and [`Waiter`](super::Waiter) import their atomics, lock,
//! condition variable and spin hints only from here. A normal build re-exports `std`; a build
//! with `RUSTFLAGS="--cfg loom"` re-exports `loom`, so the code that CHIP_RUNTIME.md §6.5 and
//! NODE_RUNTIME.md §3.4 describe is the code loom model-checks, not a copy of it.
//!
//! Loom has no real time: under `cfg(loom)` [`REAL_TIME`] is `false`, which makes every waiter
//! skip the spin window (as if its policy were [`SpinPolicy::PARK_IMMEDIATELY`]) and ignore
//! deadlines (parks are untimed). Loom's `Condvar::wait_timeout` never times out anyway, and a
//! clock read would make the explored executions depend on the wall clock.
//!
//! [`SpinPolicy::PARK_IMMEDIATELY`]: super::SpinPolicy::PARK_IMMEDIATELY

#[cfg(not(loom))]
pub(super) use std::{
    hint::spin_loop,
    sync::{
        Condvar, Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    },
    thread::yield_now,
};

#[cfg(loom)]
pub(super) use loom::{
    hint::spin_loop,
    sync::{
        Condvar, Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    },
    thread::yield_now,
};

/// Whether the wall clock exists: `true` normally, `false` under loom (see the module docs).
pub(super) const REAL_TIME: bool = !cfg!(loom);
