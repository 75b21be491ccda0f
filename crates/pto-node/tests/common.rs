//! Helpers: watchdog, small Workers in either endpoint mode, buffers, registered test callables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope};
use pto_node::{
    Callable, CallableHandle, EndpointMode, HostBuffer, MappedArgs, SubContext, TaskError, Worker,
    WorkerBuilder,
};
use pto_types::ring_config::env::EnvSource;
use pto_types::{DType, Tensor};

pub(crate) use crate::support::{f32_buffer, small_chip};

/// The watchdog every test body runs under (one home for all the crates' tests).
pub(crate) use pto_testkit::with_timeout;

/// The two endpoint modes every L3 test runs in (NODE_RUNTIME.md §9: † rows both ways).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    InProcess,
    ChildProcess,
}

/// Generates `in_process::<name>` and `child_process::<name>` tests calling `<name>(mode)`.
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::common::Mode::InProcess)
                }
            )*
        }
        mod child_process {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::common::Mode::ChildProcess)
                }
            )*
        }
    };
}
pub(crate) use both_modes;

/// A level-3 builder with `chips` small chips (16 GiB of accounted memory each), `subs` sub
/// workers and 1 MiB heap rings. In-process chips see an empty environment; chip children see
/// the test process's environment (which sets no `PTO2_RING_*`) — either way, plus the
/// `ring_env` pairs a test adds.
pub(crate) fn builder(mode: Mode, chips: usize, subs: usize) -> WorkerBuilder {
    pto_kernels::link();
    let mut b = Worker::builder(3)
        .chips(chips)
        .sub_workers(subs)
        .heap_ring_size(1 << 20)
        .close_timeout(Duration::from_secs(10))
        .shutdown_grace(Duration::from_secs(2));
    b = match mode {
        Mode::InProcess => b
            .endpoint_mode(EndpointMode::InProcess)
            .chip_env_source(EnvSource::empty()),
        Mode::ChildProcess => b.endpoint_mode(EndpointMode::ChildProcess),
    };
    for i in 0..chips {
        b = b.chip_spec(i, small_chip(16 << 30));
    }
    b
}

/// Builds and initialises.
pub(crate) fn start(b: WorkerBuilder) -> Worker {
    let w = b.build().expect("builds");
    w.init().expect("initialises");
    w
}

/// A buffer of `n` f32 set to `value`.
pub(crate) fn buf(w: &Worker, n: usize, value: f32) -> (HostBuffer, Tensor) {
    f32_buffer(w, n, |_| value).expect("buffer")
}

pub(crate) fn chip(w: &Worker, name: &str) -> CallableHandle {
    w.register(Callable::chip(name)).expect("chip callable")
}

/// A registered sub callable (both modes: children resolve it by name).
pub(crate) fn sub(w: &Worker, name: &str) -> CallableHandle {
    w.register(Callable::sub(name)).expect("sub callable")
}

/// `sleep`: sleeps `scalar(0)` ms (0 if absent).
fn sleep_sub(_: &SubContext, a: &MappedArgs) -> Result<(), TaskError> {
    let ms = a.scalars().first().copied().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(ms));
    Ok(())
}
pto_node::register_sub!("sleep", sleep_sub);

pub(crate) fn sleeper(w: &Worker) -> CallableHandle {
    sub(w, "sleep")
}

/// `copy`: copies tensor 0 into tensor 1 (f32).
fn copy_sub(_: &SubContext, a: &MappedArgs) -> Result<(), TaskError> {
    let x = a.read::<f32>(0)?;
    a.write(1, &x)
}
pto_node::register_sub!("copy", copy_sub);

pub(crate) fn copier(w: &Worker) -> CallableHandle {
    sub(w, "copy")
}

/// `fill`: fills every write-tagged tensor with `scalar(0)` as f32 bits, after sleeping
/// `scalar(1)` ms if given.
fn fill_sub(_: &SubContext, a: &MappedArgs) -> Result<(), TaskError> {
    let value = f32::from_bits(a.scalar(0)? as u32);
    if let Some(&ms) = a.scalars().get(1) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    for i in 0..a.num_tensors() {
        if a.tag(i).is_some_and(|t| t.writes()) {
            a.with_slice_mut::<f32, _>(i, |s| s.fill(value))?;
        }
    }
    Ok(())
}
pto_node::register_sub!("fill", fill_sub);

pub(crate) fn filler(w: &Worker) -> CallableHandle {
    sub(w, "fill")
}

/// `step`: `x = x * 10 + scalar(0)` over tensor 0 (the final value spells the order).
fn step_sub(_: &SubContext, a: &MappedArgs) -> Result<(), TaskError> {
    let k = a.scalar(0)? as f32;
    a.with_slice_mut::<f32, _>(0, |s| s.iter_mut().for_each(|v| *v = *v * 10.0 + k))?;
    Ok(())
}
pto_node::register_sub!("step", step_sub);

/// `fail_after`: sleeps `scalar(0)` ms (0 if absent), then fails with `boom`.
fn fail_after_sub(_: &SubContext, a: &MappedArgs) -> Result<(), TaskError> {
    let ms = a.scalars().first().copied().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(ms));
    Err("boom".into())
}
pto_node::register_sub!("fail_after", fail_after_sub);

static SLEEP_CALLS: AtomicU64 = AtomicU64::new(0);

fn kernel_sleep(ctx: &mut KernelCtx<'_>) {
    let ms: u64 = ctx.scalar(0);
    SLEEP_CALLS.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(ms));
}

pto_chip::register_kernel!(
    /// Sleeps `scalar(0)` ms.
    SLEEP = "node_tests.sleep", CoreType::Aiv, kernel_sleep
);

/// L2 orchestration `sleep_chip`: one kernel sleeping `scalar(0)` ms.
fn sleep_chip<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let ms: u64 = a.scalar(0);
    s.submit_aiv(SLEEP, KernelArgs::new().scalar(ms))?;
    Ok(())
}

pto_chip::register_chip!("sleep_chip", sleep_chip, expected_args = 1);

/// L2 orchestration `fail_if`: fails with EXPLICIT_ORCH_FATAL when `scalar(0) != 0`, else
/// sleeps `scalar(1)` ms.
/// L2 orchestration `fail_if`: scalar 0 = fail, scalar 1 = milliseconds to take first (a
/// failing member sleeps before failing, so a test can finish submitting before fail-fast).
fn fail_if<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let fail: u64 = a.scalar(0);
    let ms: u64 = a.scalar(1);
    if fail != 0 {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        return Err(s.report_fatal("this member was asked to fail"));
    }
    s.submit_aiv(SLEEP, KernelArgs::new().scalar(ms))?;
    Ok(())
}

pto_chip::register_chip!("fail_if", fail_if, expected_args = 2);

/// L2 orchestration `eight_in_scope`: 8 dummy tasks in one scope (ring 1).
fn eight_in_scope<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        for _ in 0..8 {
            s.submit_dummy(KernelArgs::new())?;
        }
        Ok(())
    })
}

pto_chip::register_chip!("eight_in_scope", eight_in_scope);

/// A 1-D f32 tensor view of `len` elements at element `offset` of `b`.
pub(crate) fn view(b: &HostBuffer, offset: u64, len: u32) -> Tensor {
    b.view(offset * 4, &[len], &[1], DType::F32).expect("view")
}
