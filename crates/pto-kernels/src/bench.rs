//! Kernels of the fine-grained DAG workloads (CHIP_RUNTIME.md §9.4).

use pto_chip::kernel::{CoreType, KernelCtx};

fn kernel_noop(_ctx: &mut KernelCtx<'_>) {}

fn kernel_fill(ctx: &mut KernelCtx<'_>) {
    let mut out = ctx.output::<f32>(0);
    out.fill(1.0);
}

fn kernel_inc(ctx: &mut KernelCtx<'_>) {
    let mut x = ctx.output::<f32>(0);
    let v = x.get(&[0]);
    x.set(&[0], v + 1.0);
}

pto_chip::register_kernel!(
    /// Does nothing.
    NOOP = "bench.noop", CoreType::Aiv, kernel_noop
);
pto_chip::register_kernel!(
    /// Writes 1.0 to every element of its first tensor.
    FILL = "bench.fill", CoreType::Aiv, kernel_fill
);
pto_chip::register_kernel!(
    /// `x[0] += 1` on its first tensor (INOUT).
    INC = "bench.inc", CoreType::Aiv, kernel_inc
);

pub(crate) fn link() {}
