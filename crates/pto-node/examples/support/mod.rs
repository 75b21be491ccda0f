//! Shared pieces of the pto-node examples (NODE_RUNTIME.md §8.1 and §8.2).
//!
//! The chip callable is pto-kernels' `elementwise_add` (`out = a + b`); the sub callable
//! `sum_outputs` is registered here once
//! and the examples' logic lives in plain functions, so each example binary's `main` and the
//! integration tests (`tests/examples.rs`) run exactly the same code.
#![allow(dead_code)]

use std::error::Error;
use std::fmt::Write as _;
use std::time::Duration;

use pto_chip::ChipSpec;
use pto_node::{
    Callable, CallableHandle, EndpointMode, HostBuffer, MappedArgs, RunReport, SubContext,
    TaskError, TaskReport, Worker,
};
use pto_types::ring_config::env::EnvSource;
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{CallConfig, DType, Resource, RuntimeEnv, TaskArgs, TaskOverrides, Tensor};

pub(crate) type ExampleResult = Result<String, Box<dyn Error + Send + Sync>>;

/// Sub callable `sum_outputs`: the last tensor (write-tagged) = sum of all the others.
pub(crate) fn sum_outputs(_ctx: &SubContext, args: &MappedArgs) -> Result<(), TaskError> {
    let n = args.num_tensors();
    if n < 2 {
        return Err(TaskError::new("sum_outputs needs inputs and one output"));
    }
    let mut total = args.read::<f32>(n - 1)?;
    total.iter_mut().for_each(|t| *t = 0.0);
    for i in 0..n - 1 {
        for (t, x) in total.iter_mut().zip(args.read::<f32>(i)?) {
            *t += x;
        }
    }
    args.write(n - 1, &total)
}

pto_node::register_sub!("sum_outputs", sum_outputs);

/// A small simulated chip (1 cluster, 1 scheduler thread) so examples and tests stay light.
pub(crate) fn small_chip(device_memory_bytes: u64) -> ChipSpec {
    ChipSpec {
        clusters: 1,
        max_aicpu_threads: 2,
        device_memory_bytes,
        ..ChipSpec::default()
    }
}

/// A buffer of `n` f32 values set to `f(i)`, and a 1-D tensor over it.
pub(crate) fn f32_buffer(
    worker: &Worker,
    n: usize,
    f: impl Fn(usize) -> f32,
) -> Result<(HostBuffer, Tensor), Box<dyn Error + Send + Sync>> {
    let buffer = worker.create_buffer(n * 4)?;
    let values: Vec<f32> = (0..n).map(f).collect();
    buffer.write_from(0, &values)?;
    let tensor = buffer.tensor(&[n as u32], DType::F32)?;
    Ok((buffer, tensor))
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), Box<dyn Error + Send + Sync>> {
    if ok { Ok(()) } else { Err(what().into()) }
}

/// §8.1 `multi_chip_dispatch`: L3 with 2 chips and 1 sub worker. Chip i adds `a[i] + b[i]`
/// into `out[i]`; the sub task sums both outputs into `total`. Checks the sums and, from the
/// report, that the sub task had fan-in 2 and was dispatched after both chip tasks finished.
pub(crate) fn multi_chip_dispatch(mode: EndpointMode) -> ExampleResult {
    const N: usize = 4096;
    pto_kernels::link();
    let worker = Worker::builder(3)
        .chips(2)
        .chip_spec(0, small_chip(1 << 30))
        .chip_spec(1, small_chip(1 << 30))
        .sub_workers(1)
        .endpoint_mode(mode)
        .heap_ring_size(1 << 20)
        .build()?;
    let add = worker.register(Callable::chip("elementwise_add"))?;
    let sum = worker.register(Callable::sub("sum_outputs"))?;
    worker.init()?;
    let mut a = Vec::new();
    let mut b = Vec::new();
    let mut out = Vec::new();
    for i in 0..2 {
        a.push(f32_buffer(&worker, N, |j| (i * 1000 + j) as f32)?);
        b.push(f32_buffer(&worker, N, |j| (2 * j) as f32)?);
        out.push(f32_buffer(&worker, N, |_| 0.0)?);
    }
    let total = f32_buffer(&worker, N, |_| -1.0)?;
    let tensors = (
        a.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
        b.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
        out.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
        total.1.clone(),
    );
    let report = run_adds_then_sum(&worker, &add, &sum, tensors)?;
    let mut text = String::new();
    check_dispatch_sums(&out, &total.0, N)?;
    writeln!(
        text,
        "sums correct: out[i] = a[i] + b[i] on chip i, total = out[0] + out[1]"
    )?;
    let (sum_worker, dispatched) = check_sum_after_adds(&worker, &report)?;
    writeln!(
        text,
        "sub task 'sum' on {sum_worker}: fan-in 2, dispatched at {dispatched:?} after both chip tasks finished"
    )?;
    let close = worker.close();
    ensure(close.graceful, || {
        format!("close was not graceful: {close:?}")
    })?;
    Ok(text)
}

/// The tensors of `multi_chip_dispatch`: `a`, `b` and `out` per chip, then `total`.
type DispatchTensors = (Vec<Tensor>, Vec<Tensor>, Vec<Tensor>, Tensor);

/// One run of `multi_chip_dispatch`: `add{i}` on chip i, then the sub task `sum` of both.
fn run_adds_then_sum(
    worker: &Worker,
    add: &CallableHandle,
    sum: &CallableHandle,
    tensors: DispatchTensors,
) -> Result<RunReport, Box<dyn Error + Send + Sync>> {
    // Small per-task sizing: elementwise_add submits one kernel at depth 0.
    let overrides = TaskOverrides {
        runtime_env: RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(1 << 20)
            .with_dep_pool(64),
        ..TaskOverrides::default()
    };
    let report = worker.run(
        move |orch, _args, cfg| {
            let (a, b, out, total) = &tensors;
            let task_cfg = cfg.derive(&overrides)?;
            for i in 0..2 {
                let args = TaskArgs::new()
                    .input(&a[i])
                    .input(&b[i])
                    .output_existing(&out[i])
                    .label(&format!("add{i}"));
                orch.submit_next_level(add, args, &task_cfg, i)?;
            }
            let args = TaskArgs::new()
                .input(&out[0])
                .input(&out[1])
                .output_existing(total)
                .label("sum");
            orch.submit_sub(sum, args)?;
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )?;
    Ok(report)
}

/// Checks `out[i] = a[i] + b[i]` and `total = out[0] + out[1]` over `n` values.
fn check_dispatch_sums(
    out: &[(HostBuffer, Tensor)],
    total: &HostBuffer,
    n: usize,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    for (i, (out_buf, _)) in out.iter().enumerate() {
        let got = out_buf.read_vec::<f32>(0, n)?;
        ensure(
            got.iter()
                .enumerate()
                .all(|(j, &v)| v == (i * 1000 + 3 * j) as f32),
            || format!("out[{i}] is wrong: {:?}…", &got[..4]),
        )?;
    }
    let got = total.read_vec::<f32>(0, n)?;
    ensure(
        got.iter()
            .enumerate()
            .all(|(j, &v)| v == (1000 + 6 * j) as f32),
        || format!("total is wrong: {:?}…", &got[..4]),
    )
}

/// Checks from the report that `sum` had fan-in 2 and was dispatched after `add{i}` finished
/// on chip i; returns the lane `sum` ran on and when it was dispatched.
fn check_sum_after_adds(
    worker: &Worker,
    report: &RunReport,
) -> Result<(String, Duration), Box<dyn Error + Send + Sync>> {
    let sum_task = report.task("sum").ok_or("no task 'sum' in the report")?;
    ensure(sum_task.fanin() == 2, || {
        format!("sum has fan-in {}, expected 2", sum_task.fanin())
    })?;
    let dispatched = sum_task.dispatched.ok_or("sum was never dispatched")?;
    for i in 0..2 {
        let chip_task = report
            .task(&format!("add{i}"))
            .ok_or("a chip task is missing from the report")?;
        let finished = chip_task.finished.ok_or("a chip task never finished")?;
        ensure(finished <= dispatched, || {
            format!("sum was dispatched at {dispatched:?}, before add{i} finished at {finished:?}")
        })?;
        ensure(
            Some(&chip_task.members[0].worker) == worker.chip_name(i).as_ref(),
            || format!("add{i} ran on {}", chip_task.members[0].worker),
        )?;
    }
    Ok((sum_task.members[0].worker.clone(), dispatched))
}

/// The three overridden sizings of §8.2, by label.
pub(crate) fn per_task_overrides() -> [(&'static str, RuntimeEnv); 3] {
    const MIB: u64 = 1 << 20;
    [
        (
            "l2_scalar_small",
            RuntimeEnv::default()
                .with_task_window(16)
                .with_heap(MIB)
                .with_dep_pool(64),
        ),
        (
            "l2_scalar_large",
            RuntimeEnv::default()
                .with_task_window(128)
                .with_heap(8 * MIB)
                .with_dep_pool(256),
        ),
        (
            "l2_per_ring",
            RuntimeEnv::default()
                .with_task_window([128, 64, 32, 16])
                .with_heap([8 * MIB, 4 * MIB, 2 * MIB, MIB])
                .with_dep_pool([256, 128, 64, 64]),
        ),
    ]
}

/// One run of §8.2 on a fresh Worker whose chip sees the environment pairs `env` (in-process:
/// an empty environment plus the pairs; a chip child: its own environment, which the pairs are
/// added to at spawn): three `elementwise_add` tasks with derived configs plus `l2_default` without
/// overrides; every output checked. Returns the report of each task, in submission order.
pub(crate) fn per_task_run(
    mode: EndpointMode,
    env: &[(&str, &str)],
) -> Result<Vec<TaskReport>, Box<dyn Error + Send + Sync>> {
    const N: usize = 1024;
    pto_kernels::link();
    let mut builder = Worker::builder(3)
        .chips(1)
        .chip_spec(0, small_chip(16 << 30))
        .endpoint_mode(mode)
        .heap_ring_size(1 << 20);
    if mode == EndpointMode::InProcess {
        builder = builder.chip_env_source(EnvSource::empty());
    }
    for (k, v) in env {
        builder = builder.ring_env(*k, *v);
    }
    let worker = builder.build()?;
    let add = worker.register(Callable::chip("elementwise_add"))?;
    worker.init()?;
    let (_a, ta) = f32_buffer(&worker, N, |j| j as f32)?;
    let (_b, tb) = f32_buffer(&worker, N, |_| 0.5)?;
    let mut outs = Vec::new();
    for _ in 0..4 {
        outs.push(f32_buffer(&worker, N, |_| 0.0)?);
    }
    let out_tensors: Vec<Tensor> = outs.iter().map(|(_, t)| t.clone()).collect();
    let report = worker.run(
        move |orch, _args, cfg| {
            let mut labels: Vec<(&str, CallConfig)> = Vec::new();
            for (label, env) in per_task_overrides() {
                let overrides = TaskOverrides {
                    runtime_env: env,
                    ..TaskOverrides::default()
                };
                labels.push((label, cfg.derive(&overrides)?));
            }
            labels.push(("l2_default", cfg.clone()));
            for ((label, task_cfg), out) in labels.iter().zip(&out_tensors) {
                let args = TaskArgs::new()
                    .input(&ta)
                    .input(&tb)
                    .output_existing(out)
                    .label(label);
                orch.submit_next_level(&add, args, task_cfg, 0)?;
            }
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )?;
    for (k, (buffer, _)) in outs.iter().enumerate() {
        let got = buffer.read_vec::<f32>(0, N)?;
        ensure(
            got.iter().enumerate().all(|(j, &v)| v == j as f32 + 0.5),
            || format!("output {k} is wrong: {:?}…", &got[..4]),
        )?;
    }
    worker.close();
    Ok(report.tasks)
}

/// `[value(source), …]` of one resource of a task's resolved sizing.
pub(crate) fn sizing_line(task: &TaskReport, resource: Resource) -> String {
    let Some(chip) = task.chip_report() else {
        return "no chip report".to_string();
    };
    let ring = chip.sizing.get(resource);
    let parts: Vec<String> = ring
        .iter()
        .map(|r| format!("{}({})", r.value, r.source))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// §8.2 `per_task_runtime_env`: the three overridden tasks report exactly their own sizing
/// with source `call_config` (pairwise different); `l2_default` reports the environment
/// snapshot (`ring_env`) in one run and the defaults in a run with an empty environment, and
/// it is the only task that changes between the two.
pub(crate) fn per_task_runtime_env(mode: EndpointMode) -> ExampleResult {
    let env = [
        ("PTO2_RING_TASK_WINDOW", "256"),
        ("PTO2_RING_HEAP", "2097152"),
        ("PTO2_RING_DEP_POOL", "128"),
    ];
    let with_env = per_task_run(mode, &env)?;
    let without_env = per_task_run(mode, &[])?;
    let mut text = String::new();
    for (label, expected) in per_task_overrides() {
        let task = with_env
            .iter()
            .find(|t| t.label.as_deref() == Some(label))
            .ok_or("task missing from the report")?;
        let chip = task.chip_report().ok_or("no chip report")?;
        for resource in Resource::ALL {
            let values = chip.sizing.values(resource);
            let sources = chip.sizing.sources(resource);
            ensure(values == expected.get(resource), || {
                format!("{label}: {} is {values:?}", resource.field())
            })?;
            ensure(sources.iter().all(|s| *s == SizeSource::CallConfig), || {
                format!("{label}: {} sources are {sources:?}", resource.field())
            })?;
        }
        let other = without_env
            .iter()
            .find(|t| t.label.as_deref() == Some(label))
            .and_then(|t| t.chip_report())
            .ok_or("task missing from the second report")?;
        ensure(other.sizing == chip.sizing, || {
            format!("{label} changed with the environment")
        })?;
        writeln!(
            text,
            "{label:16} task_window={} heap={} dep_pool={}",
            sizing_line(task, Resource::TaskWindow),
            sizing_line(task, Resource::Heap),
            sizing_line(task, Resource::DepPool)
        )?;
    }
    let keys: Vec<_> = with_env
        .iter()
        .take(3)
        .filter_map(|t| t.chip_report().map(|c| c.sizing.key()))
        .collect();
    ensure(
        keys.len() == 3 && keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2],
        || "the three overridden sizings are not pairwise different".to_string(),
    )?;
    for (tasks, source, window, heap, dep) in [
        (&with_env, SizeSource::Env, 256, 2097152, 128),
        (&without_env, SizeSource::Default, 16384, 268435456, 16384),
    ] {
        let task = tasks
            .iter()
            .find(|t| t.label.as_deref() == Some("l2_default"))
            .ok_or("l2_default missing")?;
        let chip = task.chip_report().ok_or("no chip report")?;
        for (resource, value) in [
            (Resource::TaskWindow, window),
            (Resource::Heap, heap),
            (Resource::DepPool, dep),
        ] {
            ensure(chip.sizing.values(resource) == [value; 4], || {
                format!(
                    "l2_default {}: {:?}",
                    resource.field(),
                    chip.sizing.values(resource)
                )
            })?;
            ensure(chip.sizing.sources(resource) == [source; 4], || {
                format!(
                    "l2_default {} sources: {:?}",
                    resource.field(),
                    chip.sizing.sources(resource)
                )
            })?;
        }
        writeln!(
            text,
            "{:20} task_window={} heap={} dep_pool={}",
            format!("l2_default ({source})"),
            sizing_line(task, Resource::TaskWindow),
            sizing_line(task, Resource::Heap),
            sizing_line(task, Resource::DepPool)
        )?;
    }
    writeln!(
        text,
        "all outputs correct; only l2_default changed with the environment"
    )?;
    Ok(text)
}
