//! Shared memory between a node and its child processes: segments, the mailbox frame and the
//! cross-process doorbell (NODE_RUNTIME.md §3.4, §4.3–§4.6).
//!
//! This is the only place of the crate with `unsafe`, and all of it is in [`segment`] (and,
//! in test builds under `--cfg pto_loom`, the model memory of `loom_tests.rs`): mapping
//! a `memfd`, copying bytes in and out of the mapping, viewing a 4-aligned word as an
//! `AtomicU32`, and the futex calls on such words. [`mailbox`] and [`doorbell`] build the
//! protocols on that safe surface. Every `SAFETY` comment cites one of these rules:
//!
//! - **S1 (lifetime).** A [`Segment`]'s mapping lives exactly as long as the `Segment` value; a
//!   pointer into it is formed only from `&self` and used before that borrow ends, or handed out
//!   through [`pto_types::BufferMemory`] by a value that holds an `Arc<Segment>`.
//! - **S2 (bounds).** Every access checks `offset + len <= self.len()` first (no overflow) and
//!   panics otherwise, before a pointer is formed.
//! - **S3 (atomic words).** A word the layout declares atomic (the mailbox `state`,
//!   `child_parked`, `shutdown`; the control segment's `doorbell`, `sched_parked`,
//!   `shutdown_all`) is only ever accessed as an `AtomicU32` at a 4-aligned offset; the mapping
//!   is page-aligned, so the address is aligned. Both processes use atomics on it, so these
//!   accesses never race in the memory model.
//! - **S4 (plain bytes move by copy).** Every other byte is read and written only by
//!   `copy_nonoverlapping` between the mapping and private memory — never through a `&[u8]` or
//!   `&mut [u8]` into shared memory, which another process could change behind the reference.
//!   The mailbox rules (M1–M8 in [`mailbox`]) make the owner of a region its only writer while
//!   it is copied; a peer that breaks the protocol can only make us copy garbage, which the
//!   `pto_types::node_wire` decoders reject (a copy observes bytes, it creates no reference the
//!   compiler may reason about). This is the compromise crossbeam's deque documents for its
//!   buffer reads.
//! - **S5 (host data).** Bytes of host buffers (the `BufferMemory` of a segment window) are
//!   accessed by a task only while it holds a use of the buffer, and by host helpers only while
//!   no task does (the in-use guard of `buffer.rs`); chip kernels follow the host access rule of
//!   `pto_chip::memory`.

pub(crate) mod doorbell;
#[cfg(all(test, pto_loom))]
#[allow(unsafe_code)]
mod loom_tests;
pub(crate) mod mailbox;
#[allow(unsafe_code)]
pub(crate) mod segment;
pub(crate) mod shared;

pub(crate) use doorbell::SharedDoorbell;
pub(crate) use mailbox::Mailbox;
pub(crate) use segment::{Segment, SegmentKey, SegmentWindow};
