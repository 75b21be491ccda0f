//! NODE_RUNTIME.md §8.3, the heterogeneous fan-out: one attention L2 task with a large heap and
//! window on chip 0, eight element-wise L2 tasks over chips 0–3. Per-task sizing (labels
//! `attn` and `ew` under `config.tasks`) reserves about one large and four small arenas;
//! one global sizing big enough for the attention job reserves four large ones.

use anyhow::Context as _;
use pto_kernels::paged_attention::{PA_SMALL, TOLERANCE, golden, make_inputs};
use pto_node::{Callable, HostBuffer, RunReport, SubmitError, Worker};
use pto_types::{CallConfig, DType, ErrorCode, TaskArgs, Tensor};

use super::l3::{MAX_CHIP_MIB, MAX_L3_ELEMENTS};
use crate::config_block::SceneLevel;
use crate::l3::{check_task_sizing, f32_buffer, run_l3, small_chip};
use crate::labels::Label;
use crate::params::Param;
use crate::scene::{CaseResult, CaseRun, Scene, WorkerBounds};
use pto_sizing::report::human_bytes;

pub(crate) struct HeterogeneousFanout;

const CHIPS: usize = 4;
const ELEMENTWISE_TASKS: usize = 8;

static FANOUT_PARAMS: &[Param] = &[
    Param::new(
        "n",
        1,
        MAX_L3_ELEMENTS,
        4096,
        "elements of each element-wise vector",
    ),
    Param::new(
        "chip_mib",
        1,
        MAX_CHIP_MIB,
        2048,
        "device memory of chip 0 (MiB)",
    ),
    Param::new(
        "small_chips_mib",
        0,
        MAX_CHIP_MIB,
        0,
        "device memory of chips 1-3 (MiB); 0 = chip_mib",
    ),
    Param::new(
        "expect_exhausted",
        0,
        1,
        0,
        "1: the case passes only if a task fails with DEVICE_MEMORY_EXHAUSTED",
    ),
];

fn bf16_buffer(
    w: &Worker,
    values: &[half::bf16],
    shape: &[u32],
) -> anyhow::Result<(pto_node::HostBuffer, Tensor)> {
    let buf = w.create_buffer(values.len() * 2)?;
    let bits: Vec<u16> = values.iter().map(|v| v.to_bits()).collect();
    buf.write_from(0, &bits)?;
    let t = buf.tensor(shape, DType::BF16)?;
    Ok((buf, t))
}

fn i32_buffer(
    w: &Worker,
    values: &[i32],
    shape: &[u32],
) -> anyhow::Result<(pto_node::HostBuffer, Tensor)> {
    let buf = w.create_buffer(values.len() * 4)?;
    buf.write_from(0, values)?;
    let t = buf.tensor(shape, DType::I32)?;
    Ok((buf, t))
}

/// The task labels the orchestration requests.
static FANOUT_LABELS: &[Label] = &[
    Label::one("attn", "the paged-attention job on chip 0"),
    Label::family("ew", "the element-wise jobs ew0, ew1, … over all chips"),
];

impl Scene for HeterogeneousFanout {
    fn name(&self) -> &'static str {
        "heterogeneous_fanout"
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L3
    }

    fn labels(&self) -> &'static [Label] {
        FANOUT_LABELS
    }

    fn params(&self) -> &'static [Param] {
        FANOUT_PARAMS
    }

    fn worker_bounds(&self) -> WorkerBounds {
        // Chip i gets a spec and element-wise task i % 4 goes to chip i % 4: exactly 4 chips.
        WorkerBounds {
            device_count: (CHIPS as u32, CHIPS as u32),
            num_sub_workers: (0, 4),
        }
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let len: u32 = case.param("n")?;
        let n = len as usize;
        let chip_mib: u64 = case.param("chip_mib")?;
        let chip_bytes = chip_mib << 20;
        let small_bytes = match case.param::<u64>("small_chips_mib")? {
            0 => chip_bytes,
            mib => mib << 20,
        };
        let expect_exhausted = case.param::<u8>("expect_exhausted")? == 1;
        let w = fanout_worker(case, chip_bytes, small_bytes)?;
        let attention = w.register(Callable::chip("paged_attention"))?;
        let add = w.register(Callable::chip("elementwise_add"))?;
        w.init().context("starting the worker")?;

        let pa = PA_SMALL;
        let inputs = make_inputs(&pa);
        let (_q, q) = bf16_buffer(&w, &inputs.query, &pa.query_shape())?;
        let (_k, k) = bf16_buffer(&w, &inputs.key_cache, &pa.cache_shape())?;
        let (_v, v) = bf16_buffer(&w, &inputs.value_cache, &pa.cache_shape())?;
        let (_t, t) = i32_buffer(&w, &inputs.block_table, &pa.block_table_shape())?;
        let (_c, c) = i32_buffer(&w, &inputs.context_lens, &[pa.batch])?;
        let out_buf = w.create_buffer(pa.out_len() * 4)?;
        let out = out_buf.tensor(&pa.query_shape(), DType::F32)?;
        let (_a, a) = f32_buffer(&w, n, 0.25)?;
        let mut ew_outs = Vec::new();
        for _ in 0..ELEMENTWISE_TASKS {
            ew_outs.push(f32_buffer(&w, n, 0.0)?);
        }
        let attn_cfg = case.for_label("attn");
        let ew_cfgs: Vec<_> = (0..ew_outs.len())
            .map(|i| case.for_label(&format!("ew{i}")))
            .collect();
        let config_of = |label: &str| case.for_label(label);
        let (mut result, report) = run_l3(&w, case, &config_of, |orch, _, _| {
            let args = TaskArgs::new()
                .input(&q)
                .input(&k)
                .input(&v)
                .input(&t)
                .input(&c)
                .output_existing(&out)
                .label("attn");
            orch.submit_next_level(&attention, args, &attn_cfg, 0)?;
            for (i, (_, o)) in ew_outs.iter().enumerate() {
                let args = TaskArgs::new()
                    .input(&a)
                    .input(&a)
                    .output_existing(o)
                    .label(&format!("ew{i}"));
                match orch.submit_next_level(&add, args, &ew_cfgs[i], i % CHIPS) {
                    // A task of this run already failed (e.g. an arena that does not fit a
                    // small chip): stop submitting; the run's report says which and why.
                    Err(SubmitError::RunFailed(_)) => return Ok(()),
                    other => other?,
                };
            }
            Ok(())
        })?;
        result.reserved_per_chip = (0..CHIPS)
            .map(|i| w.committed_device_memory(i).unwrap_or(0))
            .collect();
        w.close();
        if expect_exhausted {
            expect_exhausted_verdict(&mut result);
            return Ok(result);
        }
        if let Some(report) = report {
            result.check = (|| {
                check_task_sizing(&report, "attn", &attn_cfg)?;
                check_elementwise(&report, &ew_outs, &ew_cfgs, n)?;
                let actual = out_buf
                    .read_vec::<f32>(0, pa.out_len())
                    .map_err(|e| e.to_string())?;
                TOLERANCE
                    .check(&actual, &golden(&pa, &inputs))
                    .map_err(|m| format!("attn: {m}"))
            })();
        }
        Ok(result)
    }

    /// BENCHMARKS.md B5: every way of sizing that passed (no expected failure), with the
    /// device memory it reserved, its heaps reserved against their high-water (on rings with
    /// heap traffic), and how much more memory each way needs than the leanest.
    fn summary(&self, cases: &[(String, CaseResult)]) -> Vec<String> {
        let ways = crate::figures::strategies(cases.iter().map(|(n, r)| (n.as_str(), r)));
        let Some((best_name, best)) = crate::figures::leanest(&ways) else {
            return Vec::new();
        };
        let mut lines = vec![format!(
            "{:<26} {:>14} {:>14} {:>16} {:>25}",
            "sizing",
            "device memory",
            "heap reserved",
            "heap high-water",
            "heap reserved/high-water"
        )];
        for (name, f) in &ways {
            lines.push(format!(
                "{name:<26} {:>14} {:>14} {:>16} {:>25}",
                human_bytes(f.device_memory()),
                human_bytes(f.heap_reserved),
                human_bytes(f.heap_high_water),
                f.heap_ratio_text()
            ));
        }
        lines.push(format!("({})", crate::figures::LEGEND));
        for (name, f) in &ways {
            let times = f.times(best);
            if *name != best_name && times >= 1.05 {
                lines.push(format!(
                    "{name} needs {times:.2}x the device memory of {best_name} for identical results"
                ));
            }
        }
        lines
    }
}

/// The fan-out's Worker: chip 0 with `chip_bytes` of device memory, the others with
/// `small_bytes`.
fn fanout_worker(case: &CaseRun<'_>, chip_bytes: u64, small_bytes: u64) -> anyhow::Result<Worker> {
    let mut builder = case.worker_builder(CHIPS, 0);
    for i in 0..CHIPS {
        let bytes = if i == 0 { chip_bytes } else { small_bytes };
        builder = builder.chip_spec(i, small_chip(bytes));
    }
    Ok(builder.build()?)
}

/// A case that expects DEVICE_MEMORY_EXHAUSTED passes when the run failed with it, and only
/// then.
fn expect_exhausted_verdict(result: &mut CaseResult) {
    let exhausted = result.expect_failures(ErrorCode::DeviceMemoryExhausted);
    result.check = match (&result.check, exhausted) {
        (Err(_), true) => Ok(()),
        (Err(e), false) => Err(format!("failed, but not with DEVICE_MEMORY_EXHAUSTED: {e}")),
        (Ok(()), _) => Err("expected DEVICE_MEMORY_EXHAUSTED, but every task fit".to_string()),
    };
    result
        .notes
        .push("failed as expected: the global sizing does not fit the small chips".into());
}

/// Each element-wise task `ew{i}` ran with its own sizing and wrote `n` values of 0.5.
fn check_elementwise(
    report: &RunReport,
    ew_outs: &[(HostBuffer, Tensor)],
    ew_cfgs: &[CallConfig],
    n: usize,
) -> Result<(), String> {
    for (i, (buf, _)) in ew_outs.iter().enumerate() {
        check_task_sizing(report, &format!("ew{i}"), &ew_cfgs[i])?;
        let v = buf.read_vec::<f32>(0, n).map_err(|e| e.to_string())?;
        if v.iter().any(|&x| x != 0.5) {
            return Err(format!("ew{i}: wrong output"));
        }
    }
    Ok(())
}
