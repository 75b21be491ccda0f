//! Fuzzing of every decoder of bytes that come from another process or the network, on the
//! stable toolchain: no coverage instrumentation, but structured seeds (valid records with
//! random fields, from the crate's own encoders), AFL-style byte mutations, a kept corpus
//! (`fuzz/corpus/<target>/`) that grows by distinct outcomes, and four checks per input — no
//! panic, no hang, no allocation out of proportion to the input (a length field of 2^40 must
//! not allocate), and every rejection a clear one-line message.
//!
//! The `pto-fuzz` binary runs it (`pto-fuzz --seconds 60`, as `.ci/run` does); `targets`
//! lists what is fuzzed and who sends those bytes.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod alloc;
mod mutate;
mod run;
mod targets;

pub use alloc::{Probe, largest_allocation};
pub use mutate::mutate;
pub use run::{Corpus, Finding, Limits, Problem, Stats, check, fuzz};
pub use targets::{Outcome, TARGETS, Target, target};
