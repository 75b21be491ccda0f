//! The canonical write-after-read hazard (CHIP_RUNTIME.md §3.8): a slow task reads `x`, then a
//! later task overwrites `x`. Nothing orders the two unless the read is tracked, so without
//! tracking the overwrite can land while the read is still under way and the reader copies the
//! new values.

use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope};

/// `out = x`, after waiting `scalar(0)` microseconds: the read happens at the end.
fn kernel_copy_after(ctx: &mut KernelCtx<'_>) {
    let wait_us: u64 = ctx.scalar(0);
    std::thread::sleep(std::time::Duration::from_micros(wait_us));
    let x = ctx.input::<f32>(0).to_vec();
    let mut out = ctx.output::<f32>(1);
    for (o, v) in out.block_chunk_mut().iter_mut().zip(x) {
        *o = v;
    }
}

/// Every element of its first tensor = `scalar(0)` (f32).
fn kernel_fill_with(ctx: &mut KernelCtx<'_>) {
    let value: f32 = ctx.scalar(0);
    let mut out = ctx.output::<f32>(0);
    out.fill(value);
}

pto_chip::register_kernel!(
    /// `out = x` after waiting `scalar(0)` µs (tensor 0 read, tensor 1 written).
    COPY_AFTER = "hazard.copy_after", CoreType::Aiv, kernel_copy_after
);
pto_chip::register_kernel!(
    /// Fills its first tensor with `scalar(0)` (f32).
    FILL_WITH = "hazard.fill_with", CoreType::Aiv, kernel_fill_with
);

/// The value the overwrite writes; a reader that sees it read too late.
pub const OVERWRITE: f32 = 9.0;

/// `war_hazard`: entry tensors `x`, `y` (f32, same length), scalars `wait_us` and `tracked`
/// (0 or 1). Task 1 copies `x` into `y` after `wait_us` (reading `x` as a tracked input when
/// `tracked` is 1); task 2 then fills `x` with [`OVERWRITE`]. Ordered, `y` ends as `x` was;
/// unordered, `y` may hold [`OVERWRITE`].
pub fn war_hazard<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (x, y) = (a.tensor(0), a.tensor(1));
    let (wait_us, tracked): (u64, u64) = (a.scalar(0), a.scalar(1));
    let read = KernelArgs::new();
    let read = if tracked != 0 {
        read.tracked_input(x)
    } else {
        read.input(x)
    };
    s.submit_aiv(COPY_AFTER, read.output_existing(y).scalar(wait_us))?;
    s.submit_aiv(
        FILL_WITH,
        KernelArgs::new().output_existing(x).scalar(OVERWRITE),
    )?;
    Ok(())
}

pto_chip::register_chip!("war_hazard", war_hazard, expected_args = 2);

pub(crate) fn link() {}
