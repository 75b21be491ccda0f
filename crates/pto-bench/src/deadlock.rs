//! B6: failure detection latency (`pto bench deadlock`, BENCHMARKS.md B6): each undersized-ring
//! reproducer (scope deadlock, heap deadlock, flow-control deadlock, dep-pool overflow) run on
//! a chip, timed from the run call to the error (the runs submit a handful of tasks before the
//! submit that cannot proceed, so this is the detection latency up to a few µs), and a child
//! process killed mid-task, timed from the kill to the failed run.

use std::time::{Duration, Instant};

use pto_chip::orch::{
    KernelArgs, OrchArgs, OrchFn, OrchResult, RootScope, Scope, TensorCreateInfo,
};
use pto_chip::{ChipRunError, ChipSpec, ChipWorker, RunContext};
use pto_node::{Callable, EndpointMode, MappedArgs, SubContext, TaskError, Worker};
use pto_types::ring_config::env::EnvSource;
use pto_types::{CallConfig, DType, ErrorCode, RuntimeEnv, TaskArgs};

use crate::{Point, sample};

fn eight_in_a_scope<'r>(s: &mut RootScope<'r>, _: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        for _ in 0..8 {
            s.submit_dummy(KernelArgs::new())?;
        }
        Ok(())
    })
}

fn output_larger_than_the_heap<'r>(s: &mut RootScope<'r>, _: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_dummy(KernelArgs::new().output(TensorCreateInfo::new(&[8192], DType::I32)))?;
    Ok(())
}

fn nested_scopes<'r>(s: &mut RootScope<'r>, _: &OrchArgs<'r>) -> OrchResult<()> {
    fn level(s: &mut Scope<'_, '_>, remaining: u32) -> OrchResult<()> {
        if remaining == 0 {
            return Ok(());
        }
        s.scope(|s| {
            for _ in 0..3 {
                s.submit_dummy(KernelArgs::new())?;
            }
            level(s, remaining - 1)
        })
    }
    level(s, 8)
}

fn fan_in_128<'r>(s: &mut RootScope<'r>, _: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        let mut args = KernelArgs::new();
        for _ in 0..128 {
            args = args.dep(s.submit_dummy(KernelArgs::new())?.task_id());
        }
        s.submit_dummy(args)?;
        Ok(())
    })
}

/// The reproducers: name, orchestration, the undersized ring, the code they must fail with.
fn reproducers() -> [(&'static str, OrchFn, RuntimeEnv, ErrorCode); 4] {
    [
        (
            "scope deadlock",
            eight_in_a_scope,
            RuntimeEnv::default().with_task_window(4),
            ErrorCode::ScopeDeadlock,
        ),
        (
            "heap deadlock",
            output_larger_than_the_heap,
            RuntimeEnv::default().with_heap(1024),
            ErrorCode::HeapRingDeadlock,
        ),
        (
            "flow-control deadlock",
            nested_scopes,
            RuntimeEnv::default().with_task_window(4),
            ErrorCode::FlowControlDeadlock,
        ),
        (
            "dep-pool overflow",
            fan_in_128,
            RuntimeEnv::default().with_dep_pool(4),
            ErrorCode::DepPoolOverflow,
        ),
    ]
}

fn sleep_sub(_: &SubContext, a: &MappedArgs) -> Result<(), TaskError> {
    let ms = a.scalars().first().copied().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(ms));
    Ok(())
}
pto_node::register_sub!("bench.sleep_sub", sleep_sub);

/// ms from SIGKILL of the sub child (mid-task) to the run's failure.
fn killed_child() -> anyhow::Result<f64> {
    let w = Worker::builder(3)
        .sub_workers(1)
        .endpoint_mode(EndpointMode::ChildProcess)
        .heap_ring_size(1 << 20)
        .restart_children(false)
        .build()?;
    let sleep = w.register(Callable::sub("bench.sleep_sub"))?;
    w.init()?;
    let name = w.sub_name(0).unwrap_or_default();
    let pid: i32 = name.rsplit("pid=").next().unwrap_or("").parse()?;
    let run = w.submit(
        move |o, _, _| {
            o.submit_sub(&sleep, TaskArgs::new().scalar(10_000u64))?;
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )?;
    std::thread::sleep(Duration::from_millis(100));
    let pid =
        rustix::process::Pid::from_raw(pid).ok_or_else(|| anyhow::anyhow!("bad pid {pid}"))?;
    let killed = Instant::now();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)?;
    let failed = run.wait(Some(Duration::from_secs(10))).is_err();
    let ms = killed.elapsed().as_secs_f64() * 1e3;
    w.close();
    anyhow::ensure!(failed, "the run did not fail after its child was killed");
    Ok(ms)
}

pub fn run(quick: bool) -> anyhow::Result<Vec<Point>> {
    let runs = if quick { 1 } else { 5 };
    let chip = ChipWorker::new(ChipSpec::default(), EnvSource::empty())?;
    let mut points = Vec::new();
    for (name, orch, env, code) in reproducers() {
        let cfg = CallConfig::with_runtime_env(env);
        let stats = sample(runs, || {
            let started = Instant::now();
            let result = chip.run_fn(orch, &TaskArgs::new(), &cfg, &RunContext::default());
            let ms = started.elapsed().as_secs_f64() * 1e3;
            match result {
                Err(ChipRunError::Run(e)) if e.code == code => Ok(ms),
                other => anyhow::bail!("{name}: expected {code}, got {other:?}"),
            }
        })?;
        points.push(Point::new(
            "deadlock",
            format!("{name} ({code})"),
            "ms",
            stats,
        ));
    }
    let killed = sample(runs, killed_child)?;
    points.push(Point::new(
        "deadlock",
        "child killed mid-task (SIGKILL)",
        "ms",
        killed,
    ));
    Ok(points)
}
