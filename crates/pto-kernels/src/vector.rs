//! The vector example of CHIP_RUNTIME.md §9.1: `f = (a + b + 1)·(a + b + 2) + (a + b)`.
//!
//! AIV kernels `vector.add`, `vector.adds` (scalar bits as f32) and `vector.mul`; the
//! orchestration `vector_example` takes `a`, `b` and `f` (OUTPUT_EXISTING) as entry tensors.
//! t0 `c = a + b` runs at depth 0 (ring 0); t1..t4 run in one scope (ring 1).

use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_types::DType;

// Each block computes its own contiguous chunk of the output (SPMD); inputs are read at the
// same element range.

fn kernel_add(ctx: &mut KernelCtx<'_>) {
    let x = ctx.input::<f32>(0);
    let y = ctx.input::<f32>(1);
    let mut z = ctx.output::<f32>(2);
    let range = z.block_chunk_range();
    let (x, y) = (x.to_vec(), y.to_vec());
    for (o, i) in z.block_chunk_mut().iter_mut().zip(range) {
        *o = x[i] + y[i];
    }
}

fn kernel_adds(ctx: &mut KernelCtx<'_>) {
    let s: f32 = ctx.scalar(0);
    let x = ctx.input::<f32>(0).to_vec();
    let mut z = ctx.output::<f32>(1);
    let range = z.block_chunk_range();
    for (o, i) in z.block_chunk_mut().iter_mut().zip(range) {
        *o = x[i] + s;
    }
}

fn kernel_mul(ctx: &mut KernelCtx<'_>) {
    let x = ctx.input::<f32>(0).to_vec();
    let y = ctx.input::<f32>(1).to_vec();
    let mut z = ctx.output::<f32>(2);
    let range = z.block_chunk_range();
    for (o, i) in z.block_chunk_mut().iter_mut().zip(range) {
        *o = x[i] * y[i];
    }
}

pto_chip::register_kernel!(
    /// `z = x + y` (f32, elementwise).
    ADD = "vector.add", CoreType::Aiv, kernel_add
);
pto_chip::register_kernel!(
    /// `z = x + s` with scalar 0 as f32.
    ADDS = "vector.adds", CoreType::Aiv, kernel_adds
);
pto_chip::register_kernel!(
    /// `z = x · y` (f32, elementwise).
    MUL = "vector.mul", CoreType::Aiv, kernel_mul
);

/// The vector example's orchestration.
pub fn vector_example<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (x, y, f) = (a.tensor(0), a.tensor(1), a.tensor(2));
    let ci = TensorCreateInfo::new(&[x.shape()[0]], DType::F32);
    let c = s
        .submit_aiv(ADD, KernelArgs::new().input(x).input(y).output(ci))?
        .tensor(0);
    s.scope(|s| {
        let d = s
            .submit_aiv(ADDS, KernelArgs::new().input(c).output(ci).scalar(1.0f32))?
            .tensor(0);
        let e = s
            .submit_aiv(ADDS, KernelArgs::new().input(c).output(ci).scalar(2.0f32))?
            .tensor(0);
        let g = s
            .submit_aiv(MUL, KernelArgs::new().input(d).input(e).output(ci))?
            .tensor(0);
        s.submit_aiv(ADD, KernelArgs::new().input(g).input(c).output_existing(f))?;
        Ok(())
    })
}

pto_chip::register_chip!("vector_example", vector_example, expected_args = 3);

/// `elementwise_add`: `out = a + b` in one task (entry tensors a, b, out; f32). The small
/// element-wise L2 job of the L3 scenes.
pub fn elementwise_add<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_aiv(
        ADD,
        KernelArgs::new()
            .input(a.tensor(0))
            .input(a.tensor(1))
            .output_existing(a.tensor(2)),
    )?;
    Ok(())
}

pto_chip::register_chip!("elementwise_add", elementwise_add, expected_args = 3);

/// `elementwise_add_after`: waits `scalar(0)` milliseconds in the orchestration, then does
/// `elementwise_add` (a slow chip job for liveness tests and scenes: while it waits, its
/// consumers are PENDING).
pub fn elementwise_add_after<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let ms: u64 = a.scalar(0);
    std::thread::sleep(std::time::Duration::from_millis(ms));
    elementwise_add(s, a)
}

pto_chip::register_chip!("elementwise_add_after", elementwise_add_after);

pub(crate) fn link() {}
