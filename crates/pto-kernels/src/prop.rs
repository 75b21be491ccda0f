//! A generic kernel for randomized tests: its result is a deterministic function of its
//! arguments, so a sequential model can predict every buffer byte (`tests/prop_chip.rs`).
//!
//! Scalars: `[seed, inout_mask, write_mask, parts_per_block]`. Bit `i` of `inout_mask` marks
//! tensor `i` as read-then-written, of `write_mask` as write-only; other tensors are read.
//! The kernel folds the element sums of every read tensor (INOUT ones included, before
//! writing) into `acc = acc·31 + sum` (wrapping `u32`), starting from `seed`. Then every
//! element `k` (row-major) of a written tensor becomes `old·3 + acc + k` (INOUT) or
//! `acc + 7k` (write-only), restricted to this core's part: the element range
//! `block_chunk(len, part, block_num · parts_per_block)` with
//! `part = block_idx · parts_per_block + lane` (lane 0 for AIC and single-kind tasks, 1 + sub
//! block for the AIVs of a MIX task). Multi-part tasks must not have INOUT tensors.

pub mod program;

use pto_chip::kernel::{CoreType, KernelCtx, block_chunk};

/// Applies the rule above for the given lane.
fn apply(ctx: &mut KernelCtx<'_>, lane: u32) {
    let seed: u32 = ctx.scalar(0);
    let inout: u32 = ctx.scalar(1);
    let write: u32 = ctx.scalar(2);
    let parts: u32 = ctx.scalar(3);
    let part = ctx.block_idx() * parts + lane;
    let total_parts = ctx.block_num() * parts;
    let ctx = &*ctx;
    // Each tensor is viewed once: INOUT and write-only ones mutably, the others for reading.
    let mut acc = seed;
    let mut outputs = Vec::new();
    for i in 0..ctx.num_tensors() {
        let bit = 1u32 << i;
        if write & bit != 0 {
            outputs.push((ctx.output::<u32>(i), false));
        } else if inout & bit != 0 {
            let view = ctx.output::<u32>(i);
            let sum = view.to_vec().iter().fold(0u32, |s, v| s.wrapping_add(*v));
            acc = acc.wrapping_mul(31).wrapping_add(sum);
            outputs.push((view, true));
        } else {
            let sum = ctx
                .input::<u32>(i)
                .iter()
                .fold(0u32, |s, v| s.wrapping_add(v));
            acc = acc.wrapping_mul(31).wrapping_add(sum);
        }
    }
    for (view, is_inout) in &mut outputs {
        let shape = view.shape().to_vec();
        let len = view.len() as u64;
        for k in block_chunk(len, part, total_parts) {
            let index = unflatten(k, &shape);
            let value = if *is_inout {
                view.get(&index)
                    .wrapping_mul(3)
                    .wrapping_add(acc)
                    .wrapping_add(k as u32)
            } else {
                acc.wrapping_add(7u32.wrapping_mul(k as u32))
            };
            view.set(&index, value);
        }
    }
}

/// Row-major index of element `k` of `shape`.
pub fn unflatten(mut k: u64, shape: &[u32]) -> Vec<u32> {
    let mut index = vec![0u32; shape.len()];
    for d in (0..shape.len()).rev() {
        let n = u64::from(shape[d]);
        index[d] = (k % n) as u32;
        k /= n;
    }
    index
}

fn kernel_apply_aiv(ctx: &mut KernelCtx<'_>) {
    let parts: u32 = ctx.scalar(3);
    let lane = if parts > 1 { 1 + ctx.sub_block_id() } else { 0 };
    apply(ctx, lane);
}

fn kernel_apply_aic(ctx: &mut KernelCtx<'_>) {
    apply(ctx, 0);
}

pto_chip::register_kernel!(
    /// The generic test kernel on AIV cores.
    APPLY_AIV = "prop.apply_aiv", CoreType::Aiv, kernel_apply_aiv
);
pto_chip::register_kernel!(
    /// The generic test kernel on AIC cores.
    APPLY_AIC = "prop.apply_aic", CoreType::Aic, kernel_apply_aic
);

pub(crate) fn link() {}
