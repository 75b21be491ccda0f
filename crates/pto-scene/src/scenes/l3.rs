//! Level-3 scenes: an L3 orchestration fans chip jobs out through a `pto_node::Worker`; per-task
//! configs come from `CaseRun::for_label` (the case's `config.tasks.<label>` overrides).

use anyhow::Context as _;
use pto_node::{Callable, CallableHandle, MappedArgs, SubContext, TaskError, Worker};
use pto_types::{CallConfig, TaskArgs};

use crate::config_block::SceneLevel;
use crate::l3::{check_task_sizing, f32_buffer, run_l3, small_chip};
use crate::labels::Label;
use crate::params::Param;
use crate::scene::{CaseResult, CaseRun, Scene, WorkerBounds};

/// Sub callable `scene.sum_outputs`: the last tensor = the element-wise sum of the others.
fn sum_outputs(_ctx: &SubContext, args: &MappedArgs) -> Result<(), TaskError> {
    let n = args.num_tensors();
    if n < 2 {
        return Err(TaskError::new(
            "scene.sum_outputs needs inputs and one output",
        ));
    }
    let mut total = vec![0.0f32; args.read::<f32>(n - 1)?.len()];
    for i in 0..n - 1 {
        for (t, x) in total.iter_mut().zip(args.read::<f32>(i)?) {
            *t += x;
        }
    }
    args.write(n - 1, &total)
}

pto_node::register_sub!("scene.sum_outputs", sum_outputs);

/// Elements of each f32 vector of the L3 scenes: 16 MiB per buffer at most (the fan-out has
/// ten such buffers).
pub(crate) const MAX_L3_ELEMENTS: u64 = 1 << 22;
/// Device memory of one chip in MiB: 64 GiB (a capacity; arenas are committed lazily).
pub(crate) const MAX_CHIP_MIB: u64 = 64 << 10;

/// `n` of the L3 element-wise scenes.
static N_PARAMS: &[Param] = &[Param::new(
    "n",
    1,
    MAX_L3_ELEMENTS,
    4096,
    "elements of each f32 vector",
)];

/// Params of `multi_chip_dispatch`.
static DISPATCH_PARAMS: &[Param] = &[
    Param::new("n", 1, MAX_L3_ELEMENTS, 4096, "elements of each f32 vector"),
    Param::new(
        "chip_delay_ms",
        0,
        600_000,
        0,
        "each chip task waits this long before its add (the sum task is PENDING meanwhile)",
    ),
];

fn register(w: &Worker, c: Callable) -> anyhow::Result<CallableHandle> {
    Ok(w.register(c)?)
}

/// NODE_RUNTIME.md §8.2: three element-wise tasks on one chip, each with its own
/// `runtime_env` (from `config.tasks.<label>`), and one task with the case's base config.
pub(crate) struct PerTaskRuntimeEnv;

const PER_TASK_LABELS: [&str; 4] = ["l2_scalar_small", "l2_scalar_large", "l2_per_ring", "base"];

/// The task labels the orchestration requests.
static PER_TASK_LABEL_DECLS: &[Label] = &[
    Label::one("l2_scalar_small", "a job with a small scalar sizing"),
    Label::one("l2_scalar_large", "a job with a large scalar sizing"),
    Label::one("l2_per_ring", "a job sized per ring"),
    Label::one("base", "a job with the case's base sizing"),
];

impl Scene for PerTaskRuntimeEnv {
    fn name(&self) -> &'static str {
        "per_task_runtime_env"
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L3
    }

    fn labels(&self) -> &'static [Label] {
        PER_TASK_LABEL_DECLS
    }

    fn params(&self) -> &'static [Param] {
        N_PARAMS
    }

    fn worker_bounds(&self) -> WorkerBounds {
        // Every task runs on chip 0; more chips would only idle.
        WorkerBounds {
            device_count: (1, 4),
            num_sub_workers: (0, 4),
        }
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let n: usize = case.param("n")?;
        let w = case
            .worker_builder(1, 0)
            .chip_spec(0, small_chip(4 << 30))
            .build()?;
        let add = register(&w, Callable::chip("elementwise_add"))?;
        w.init().context("starting the worker")?;
        let (_a, a) = f32_buffer(&w, n, 1.5)?;
        let mut outs = Vec::new();
        for _ in PER_TASK_LABELS {
            outs.push(f32_buffer(&w, n, 0.0)?);
        }
        let configs: Vec<CallConfig> = PER_TASK_LABELS.iter().map(|l| case.for_label(l)).collect();
        let config_of = |label: &str| {
            PER_TASK_LABELS
                .iter()
                .position(|l| *l == label)
                .map_or_else(|| case.base.clone(), |i| configs[i].clone())
        };
        let (mut result, report) = run_l3(&w, case, &config_of, |orch, _, _| {
            for (i, label) in PER_TASK_LABELS.iter().enumerate() {
                let args = TaskArgs::new()
                    .input(&a)
                    .input(&a)
                    .output_existing(&outs[i].1)
                    .label(label);
                orch.submit_next_level(&add, args, &configs[i], 0)?;
            }
            Ok(())
        })?;
        if let Some(report) = report {
            result.check = (|| {
                for (i, label) in PER_TASK_LABELS.iter().enumerate() {
                    check_task_sizing(&report, label, &configs[i])?;
                    let v = outs[i].0.read_vec::<f32>(0, n).map_err(|e| e.to_string())?;
                    if v.iter().any(|&x| x != 3.0) {
                        return Err(format!("task {label}: wrong output"));
                    }
                }
                Ok(())
            })();
        }
        result.reserved_per_chip = vec![w.committed_device_memory(0).unwrap_or(0)];
        w.close();
        Ok(result)
    }
}

/// NODE_RUNTIME.md §8.1: per chip an element-wise add, then a sub task sums both outputs; the
/// sub task has fan-in 2 and starts after both chip tasks finished.
pub(crate) struct MultiChipDispatch;

/// Most chips of a multi-chip dispatch case (each a 1-cluster chip: a few threads; 16 chips
/// with the largest `n` needed 1.3 GB).
const MAX_DISPATCH_CHIPS: u32 = 8;

/// The task labels the orchestration requests.
static DISPATCH_LABELS: &[Label] = &[Label::family(
    "add",
    "the element-wise job of chip N is addN",
)];

impl Scene for MultiChipDispatch {
    fn name(&self) -> &'static str {
        "multi_chip_dispatch"
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L3
    }

    fn labels(&self) -> &'static [Label] {
        DISPATCH_LABELS
    }

    fn params(&self) -> &'static [Param] {
        DISPATCH_PARAMS
    }

    fn worker_bounds(&self) -> WorkerBounds {
        // One element-wise task per chip and a sum task on a sub worker.
        WorkerBounds {
            device_count: (1, MAX_DISPATCH_CHIPS),
            num_sub_workers: (1, 4),
        }
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let n: usize = case.param("n")?;
        let delay_ms: u64 = case.param("chip_delay_ms")?;
        // Every chip is small, so the largest allowed device_count stays light.
        let chips = case.config.device_count.unwrap_or(2) as usize;
        let mut builder = case.worker_builder(2, 1);
        for i in 0..chips {
            builder = builder.chip_spec(i, small_chip(4 << 30));
        }
        let w = builder.build()?;
        let add = match delay_ms {
            0 => register(&w, Callable::chip("elementwise_add"))?,
            _ => register(&w, Callable::chip("elementwise_add_after"))?,
        };
        let sum = register(&w, Callable::sub("scene.sum_outputs"))?;
        w.init().context("starting the worker")?;
        let chips = w.chips();
        let mut inputs = Vec::new();
        let mut outs = Vec::new();
        for i in 0..chips {
            inputs.push((f32_buffer(&w, n, i as f32 + 1.0)?, f32_buffer(&w, n, 10.0)?));
            outs.push(f32_buffer(&w, n, 0.0)?);
        }
        let (total_buf, total) = f32_buffer(&w, n, 0.0)?;
        let configs: Vec<_> = (0..chips)
            .map(|i| case.for_label(&format!("add{i}")))
            .collect();
        let config_of = |label: &str| case.for_label(label);
        let (mut result, report) = run_l3(&w, case, &config_of, |orch, _, _| {
            for i in 0..chips {
                let args = TaskArgs::new()
                    .input(&inputs[i].0.1)
                    .input(&inputs[i].1.1)
                    .output_existing(&outs[i].1)
                    .label(&format!("add{i}"));
                let args = if delay_ms > 0 {
                    args.scalar(delay_ms)
                } else {
                    args
                };
                orch.submit_next_level(&add, args, &configs[i], i)?;
            }
            let mut args = TaskArgs::new();
            for (_, out) in &outs {
                args = args.input(out);
            }
            orch.submit_sub(&sum, args.output_existing(&total).label("sum"))?;
            Ok(())
        })?;
        if let Some(report) = report {
            result.check = (|| {
                let expect: f32 = (0..chips).map(|i| i as f32 + 11.0).sum();
                let v = total_buf.read_vec::<f32>(0, n).map_err(|e| e.to_string())?;
                if v.iter().any(|&x| x != expect) {
                    return Err(format!("total = {}, expected {expect}", v[0]));
                }
                let sum = report.task("sum").ok_or("no sum task")?;
                if sum.fanin() != chips {
                    return Err(format!(
                        "the sum task had fan-in {}, expected {chips}",
                        sum.fanin()
                    ));
                }
                let last_chip_end = (0..chips)
                    .filter_map(|i| report.task(&format!("add{i}")).and_then(|t| t.finished))
                    .max();
                if sum.dispatched < last_chip_end {
                    return Err(
                        "the sum task was dispatched before both chip tasks finished".into(),
                    );
                }
                Ok(())
            })();
        }
        result.reserved_per_chip = (0..chips)
            .map(|i| w.committed_device_memory(i).unwrap_or(0))
            .collect();
        w.close();
        Ok(result)
    }
}
