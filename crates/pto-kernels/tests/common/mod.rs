//! Shared helpers of the chip tests: chips with explicit environments, host buffers, and a
//! watchdog so that a hang fails the test instead of blocking the suite.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pto_chip::memory::HostMemory;
use pto_chip::orch::OrchFn;
use pto_chip::{ChipRunError, ChipSpec, ChipWorker, RunContext};
use pto_types::ring_config::env::EnvSource;
use pto_types::{BufferId, CallConfig, DType, TaskArgs, Tensor};

/// A chip with `clusters` clusters and an environment of exactly `env`.
pub(crate) fn chip(clusters: u32, env: &[(&str, &str)]) -> ChipWorker {
    pto_kernels::link();
    let spec = ChipSpec {
        clusters,
        ..ChipSpec::default()
    };
    ChipWorker::new(spec, EnvSource::from_pairs(env.iter().copied())).expect("chip starts")
}

/// A host buffer of `n` f32 values, filled with `value`, and a 1-D tensor over it.
pub(crate) fn f32_tensor(n: usize, value: f32) -> (Arc<HostMemory>, Tensor) {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let buffer = HostMemory::new(n * 4).expect("host buffer");
    buffer.write_f32(0, &vec![value; n]);
    let id = BufferId {
        owner_uid: 7,
        buffer_id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        generation: 0,
    };
    let tensor = Tensor::contiguous(buffer.buffer_ref(id), &[n as u32], DType::F32).unwrap();
    (buffer, tensor)
}

/// One run of `orch` on `chip` with no arguments and the default `CallConfig`.
pub(crate) fn run_plain(chip: &ChipWorker, orch: OrchFn) -> Result<(), ChipRunError> {
    chip.run_fn(
        orch,
        &TaskArgs::new(),
        &CallConfig::default(),
        &RunContext::default(),
    )
    .map(|_| ())
}

/// The watchdog every test body runs under (one home for all the crates' tests).
pub(crate) use pto_testkit::with_timeout;
