//! A template for your own workload on pto: two kernels, an L2 chip job built from them, an L3
//! orchestration that fans chip jobs out to two chips with per-label sizing, and the scenes
//! that run them (`scenes/*.toml`). Everything registers by name, so `pto_cli::main()` (this
//! crate's binary) and `pto_scene::harness` (its cargo tests) find it.
//!
//! - kernels `cw.scale` (`out = alpha · x`) and `cw.add` (`out = x + y`), AIV, f32;
//! - chip job `cw.axpy`: entry tensors `x`, `y`, `out`, scalar `alpha`; `out = alpha · x + y`
//!   in two kernel tasks with an intermediate tensor on the chip's heap (ring 0);
//! - scene `cw_axpy` (level 2): the chip job against a golden computed on the host;
//! - scene `cw_fanout` (level 3): one large `big` job on chip 0 and `small0`, `small1`, … on
//!   chip 1, each task sized by the case's `config.tasks` blocks (`tasks.small` for every
//!   small job, a `tasks.small2` block layered on it for small2 alone).

use anyhow::Context as _;
use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_node::{Callable, HostBuffer};
use pto_scene::l3::{check_task_sizing, run_l3, small_chip};
use pto_scene::{
    CaseResult, CaseRun, EntryArgs, EntryTensor, L2Scene, Label, Param, Scene, SceneLevel,
    WorkerBounds,
};
use pto_types::{CallConfig, DType, TaskArgs, TensorTag};

/// Call from every binary and test harness that should see this crate's kernels, chip jobs
/// and scenes: it makes sure the linker keeps this crate (registrations are collected from
/// every linked object file).
pub fn link() {}

// ---- Kernels: each block of the SPMD launch computes its own chunk of the output. ----------

fn kernel_scale(ctx: &mut KernelCtx<'_>) {
    let alpha: f32 = ctx.scalar(0);
    let x = ctx.input::<f32>(0).to_vec();
    let mut out = ctx.output::<f32>(1);
    let range = out.block_chunk_range();
    for (o, i) in out.block_chunk_mut().iter_mut().zip(range) {
        *o = alpha * x[i];
    }
}

fn kernel_add(ctx: &mut KernelCtx<'_>) {
    let x = ctx.input::<f32>(0).to_vec();
    let y = ctx.input::<f32>(1).to_vec();
    let mut out = ctx.output::<f32>(2);
    let range = out.block_chunk_range();
    for (o, i) in out.block_chunk_mut().iter_mut().zip(range) {
        *o = x[i] + y[i];
    }
}

pto_chip::register_kernel!(
    /// `out = alpha · x` (scalar 0 is alpha as f32).
    SCALE = "cw.scale", CoreType::Aiv, kernel_scale
);
pto_chip::register_kernel!(
    /// `out = x + y`.
    ADD = "cw.add", CoreType::Aiv, kernel_add
);

// ---- The L2 chip job. -------------------------------------------------------------------------

/// `out = alpha · x + y`: the scaled copy lives on the chip's heap between the two tasks, so
/// ring 0's heap must hold `4 · len(x)` bytes (the capacity the failing case undersizes).
pub fn axpy<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (x, y, out) = (a.tensor(0), a.tensor(1), a.tensor(2));
    let alpha: f32 = a.scalar(0);
    let scaled = TensorCreateInfo::new(&[x.shape()[0]], DType::F32);
    let ax = s
        .submit_aiv(
            SCALE,
            KernelArgs::new().input(x).output(scaled).scalar(alpha),
        )?
        .tensor(0);
    s.submit_aiv(
        ADD,
        KernelArgs::new().input(ax).input(y).output_existing(out),
    )?;
    Ok(())
}

pto_chip::register_chip!("cw.axpy", axpy, expected_args = 4);

// ---- Scene cw_axpy (level 2): inputs and golden, the runner does the rest. --------------------

static AXPY_PARAMS: &[Param] = &[
    Param::new("n", 1, 1 << 22, 4096, "elements of each f32 vector"),
    Param::new(
        "alpha_x10",
        0,
        1000,
        25,
        "alpha times ten (alpha = 2.5 by default)",
    ),
];

fn axpy_inputs(case: &CaseRun<'_>) -> anyhow::Result<EntryArgs> {
    let n: u32 = case.param("n")?;
    let alpha = case.param::<u32>("alpha_x10")? as f32 / 10.0;
    let x: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    Ok(EntryArgs::new()
        .tensor(EntryTensor::f32s(TensorTag::Input, &x, &[n]).named("x"))
        .tensor(EntryTensor::f32s(TensorTag::Input, &vec![1.0; n as usize], &[n]).named("y"))
        .tensor(EntryTensor::zeros(TensorTag::OutputExisting, DType::F32, &[n]).named("out"))
        .scalar(alpha))
}

fn axpy_golden(_case: &CaseRun<'_>, args: &mut EntryArgs) -> anyhow::Result<()> {
    let alpha = f32::from_bits(args.scalars[0] as u32);
    let (x, y) = (args.tensors[0].to_f32s(), args.tensors[1].to_f32s());
    let out: Vec<f32> = x.iter().zip(&y).map(|(x, y)| alpha * x + y).collect();
    args.tensors[2].set_f32s(&out);
    Ok(())
}

pto_scene::register_scene!(
    L2Scene::new("cw_axpy", "cw.axpy", axpy_inputs, axpy_golden)
        .with_params(AXPY_PARAMS)
        .with_tolerance(1e-6, 1e-6)
);

// ---- Scene cw_fanout (level 3): an orchestration written against the Worker API. -------------

/// One large job and a family of small ones, each sized by the case's `config.tasks`.
pub struct CwFanout;

static FANOUT_PARAMS: &[Param] = &[
    Param::new(
        "big_n",
        1,
        1 << 22,
        1 << 16,
        "elements of the big job's vectors",
    ),
    Param::new(
        "small_n",
        1,
        1 << 20,
        1024,
        "elements of each small job's vectors",
    ),
    Param::new("smalls", 1, 8, 2, "small jobs, labelled small0, small1, …"),
    Param::new(
        "pause_ms",
        0,
        10_000,
        0,
        "ms the orchestration waits after submitting the big job",
    ),
];

static FANOUT_LABELS: &[Label] = &[
    Label::one("big", "the large axpy job on chip 0"),
    Label::family("small", "the small axpy jobs on chip 1: small0, small1, …"),
];

/// Alpha of every fan-out job.
const ALPHA: f32 = 0.5;

impl Scene for CwFanout {
    fn name(&self) -> &'static str {
        "cw_fanout"
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L3
    }

    fn params(&self) -> &'static [Param] {
        FANOUT_PARAMS
    }

    fn labels(&self) -> &'static [Label] {
        FANOUT_LABELS
    }

    fn worker_bounds(&self) -> WorkerBounds {
        WorkerBounds {
            device_count: (2, 2),
            num_sub_workers: (0, 0),
        }
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let (big_n, small_n): (usize, usize) = (case.param("big_n")?, case.param("small_n")?);
        let smalls: usize = case.param("smalls")?;
        let pause = std::time::Duration::from_millis(case.param("pause_ms")?);
        // Two 1-cluster chips with 4 GiB of device memory each (arenas are committed lazily).
        let w = case
            .worker_builder(2, 0)
            .chip_spec(0, small_chip(4 << 30))
            .chip_spec(1, small_chip(4 << 30))
            .build()?;
        let job = w.register(Callable::chip("cw.axpy"))?;
        w.init().context("starting the worker")?;

        // Each job: label, chip, length, and its own config (the case's base with the most
        // specific `config.tasks` block for its label).
        let mut jobs = vec![("big".to_string(), 0, big_n)];
        jobs.extend((0..smalls).map(|i| (format!("small{i}"), 1, small_n)));
        let configs: Vec<CallConfig> = jobs.iter().map(|(l, ..)| case.for_label(l)).collect();
        let mut buffers = Vec::new();
        for (_, _, n) in &jobs {
            buffers.push(JobBuffers::new(&w, *n)?);
        }
        let config_of = |label: &str| {
            let i = jobs.iter().position(|(l, ..)| l == label);
            i.map_or_else(|| case.base.clone(), |i| configs[i].clone())
        };
        let (mut result, report) = run_l3(&w, case, &config_of, |orch, _, _| {
            for (i, (label, chip, _)) in jobs.iter().enumerate() {
                let b = &buffers[i];
                let args = TaskArgs::new()
                    .input(&b.x.1)
                    .input(&b.y.1)
                    .output_existing(&b.out.1)
                    .scalar(ALPHA)
                    .label(label);
                // A failed run makes the next submit return `RunFailed`, which `?` passes
                // up; the run still comes back as that run's failure, with every row.
                orch.submit_next_level(&job, args, &configs[i], *chip)?;
                if i == 0 {
                    std::thread::sleep(pause);
                }
            }
            Ok(())
        })?;
        if let Some(report) = report {
            result.check = jobs.iter().enumerate().try_for_each(|(i, (label, ..))| {
                check_task_sizing(&report, label, &configs[i])?;
                buffers[i].check(label)
            });
        }
        result.reserved_per_chip = (0..2)
            .map(|c| w.committed_device_memory(c).unwrap_or(0))
            .collect();
        w.close();
        Ok(result)
    }
}

pto_scene::register_scene!(CwFanout);

/// The shared buffers of one fan-out job: `x[i] = i mod 5`, `y = 1`, `out`.
struct JobBuffers {
    n: usize,
    x: (HostBuffer, pto_types::Tensor),
    y: (HostBuffer, pto_types::Tensor),
    out: (HostBuffer, pto_types::Tensor),
}

impl JobBuffers {
    fn new(w: &pto_node::Worker, n: usize) -> anyhow::Result<JobBuffers> {
        let x: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
        let y = vec![1.0f32; n];
        let make = |values: &[f32]| -> anyhow::Result<(HostBuffer, pto_types::Tensor)> {
            let buf = w.create_buffer(values.len() * 4)?;
            buf.write_from(0, values)?;
            let t = buf.tensor(&[u32::try_from(values.len())?], DType::F32)?;
            Ok((buf, t))
        };
        Ok(JobBuffers {
            n,
            x: make(&x)?,
            y: make(&y)?,
            out: make(&vec![0.0; n])?,
        })
    }

    /// `out = ALPHA · x + y` exactly (small integers and halves are exact in f32).
    fn check(&self, label: &str) -> Result<(), String> {
        let out = self
            .out
            .0
            .read_vec::<f32>(0, self.n)
            .map_err(|e| e.to_string())?;
        match (0..self.n).find(|&i| out[i] != ALPHA * (i % 5) as f32 + 1.0) {
            None => Ok(()),
            Some(i) => Err(format!("{label}: out[{i}] = {}", out[i])),
        }
    }
}
