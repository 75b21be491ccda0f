//! Level-2 scenes: one chip runs the case's callable with the case's `CallConfig`.

use std::sync::Arc;

use anyhow::Context as _;
use pto_chip::memory::HostBuffer;
use pto_chip::{ChipRunError, ChipSpec, RunContext};
use pto_kernels::paged_attention::{PaCase, check, golden, make_inputs};
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{BufferId, DType, Resource, TaskArgs, Tensor};

use crate::config_block::SceneLevel;
use crate::scene::{CaseResult, CaseRun, Scene, TaskErrorInfo, TaskRow};

/// A host buffer of `values` and a tensor of `shape` over it.
fn buffer<T: pto_chip::memory::HostScalar>(
    id: u64,
    values: &[T],
    shape: &[u32],
    dtype: DType,
) -> anyhow::Result<(Arc<HostBuffer>, Tensor)> {
    let buf = HostBuffer::new(std::mem::size_of_val(values).max(1))?;
    buf.write(0, values);
    let bid = BufferId {
        owner_uid: 0x5CE0E,
        buffer_id: id,
        generation: 0,
    };
    let tensor = Tensor::contiguous(buf.buffer_ref(bid), shape, dtype)?;
    Ok((buf, tensor))
}

/// Runs `callable` on a chip for the case; a failed run becomes an error row.
fn run_chip(
    case: &CaseRun<'_>,
    spec: ChipSpec,
    callable: &str,
    args: &TaskArgs,
) -> anyhow::Result<TaskRow> {
    let chip = case.chip(spec).context("starting the chip")?;
    match chip.run(callable, args, &case.base, &RunContext::default()) {
        Ok(report) => Ok(TaskRow::from_report(callable, &report)),
        Err(e) => {
            let (code, name) = match &e {
                ChipRunError::Run(c) => (Some(c.code.code()), c.code.name().to_string()),
                ChipRunError::Bind(_) => (None, "BIND".to_string()),
            };
            Ok(TaskRow {
                task: callable.to_string(),
                chip: 0,
                sizing: None,
                arena: None,
                reserved_bytes: 0,
                high_water_bytes: 0,
                wall: std::time::Duration::ZERO,
                error: Some(TaskErrorInfo {
                    code,
                    name,
                    message: e.to_string(),
                }),
            })
        }
    }
}

/// Every non-zero entry of the case's `runtime_env` must be bound as asked, with source
/// `call_config` (the per-case sizing reached the chip).
fn check_sizing(case: &CaseRun<'_>, row: &TaskRow) -> Result<(), String> {
    let Some(sizing) = &row.sizing else {
        return Ok(());
    };
    for resource in Resource::ALL {
        let asked = case.base.runtime_env.get(resource);
        for (ring, &want) in asked.iter().enumerate() {
            if want == 0 {
                continue;
            }
            let got = sizing.at(resource, ring);
            if got.value != want || got.source != SizeSource::CallConfig {
                return Err(format!(
                    "{}[{ring}] bound {} ({}), the case asked for {want}",
                    resource.config_path(),
                    got.value,
                    got.source
                ));
            }
        }
    }
    Ok(())
}

fn finish(
    case: &CaseRun<'_>,
    row: TaskRow,
    verify: impl FnOnce() -> Result<(), String>,
) -> CaseResult {
    let check = match &row.error {
        Some(e) => Err(format!("{}: {}", e.name, e.message)),
        None => check_sizing(case, &row).and_then(|()| verify()),
    };
    let mut result = CaseResult::new(vec![row]);
    result.check = check;
    result
}

/// `f = (a+b+1)(a+b+2)+(a+b)` with a = 2, b = 3: 47 everywhere (CHIP_RUNTIME.md §9.1).
pub(crate) struct VectorExample;

impl Scene for VectorExample {
    fn name(&self) -> &'static str {
        "vector_example"
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L2
    }

    fn params(&self) -> &'static [&'static str] {
        &["n", "clusters"]
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let n = case.param("n", if case.env.fast { 4096 } else { 16384 }) as usize;
        let clusters = case.param("clusters", 8) as u32;
        let (_a, a) = buffer(1, &vec![2.0f32; n], &[n as u32], DType::F32)?;
        let (_b, b) = buffer(2, &vec![3.0f32; n], &[n as u32], DType::F32)?;
        let (f_buf, f) = buffer(3, &vec![0.0f32; n], &[n as u32], DType::F32)?;
        let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
        let spec = ChipSpec {
            clusters,
            ..ChipSpec::default()
        };
        let row = run_chip(case, spec, "vector_example", &args)?;
        Ok(finish(case, row, || {
            let out = f_buf.read_f32(0, n);
            match out.iter().position(|&v| (v - 47.0).abs() > 1e-5) {
                None => Ok(()),
                Some(i) => Err(format!("f[{i}] = {}, expected 47", out[i])),
            }
        }))
    }
}

/// Paged attention with online softmax (CHIP_RUNTIME.md §9.2), checked against the f32
/// golden within rtol = atol = 1e-3.
pub(crate) struct PagedAttention;

impl Scene for PagedAttention {
    fn name(&self) -> &'static str {
        "paged_attention"
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L2
    }

    fn params(&self) -> &'static [&'static str] {
        &[
            "batch",
            "heads",
            "d",
            "block",
            "ctx",
            "max_model_len",
            "seed",
            "clusters",
        ]
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let pa = pa_case(case);
        let inputs = make_inputs(&pa);
        let (args, out_buf, _keep) = pa_args_l2(&pa, &inputs)?;
        let spec = ChipSpec {
            clusters: case.param("clusters", 8) as u32,
            ..ChipSpec::default()
        };
        let row = run_chip(case, spec, "paged_attention", &args)?;
        Ok(finish(case, row, || {
            let expected = golden(&pa, &inputs);
            let actual = out_buf.read_f32(0, pa.out_len());
            check(&actual, &expected, 1e-3, 1e-3).map_err(|m| m.to_string())
        }))
    }
}

/// The paged-attention case described by the case's params (defaults: `pa_small`).
pub(crate) fn pa_case(case: &CaseRun<'_>) -> PaCase {
    let d = pto_kernels::paged_attention::PA_SMALL;
    PaCase {
        batch: case.param("batch", u64::from(d.batch)) as u32,
        heads: case.param("heads", u64::from(d.heads)) as u32,
        d: case.param("d", u64::from(d.d)) as u32,
        block: case.param("block", u64::from(d.block)) as u32,
        ctx: case.param("ctx", u64::from(d.ctx)) as u32,
        max_model_len: case.param("max_model_len", u64::from(d.max_model_len)) as u32,
        seed: case.param("seed", d.seed),
    }
}

type Keep = Vec<Arc<HostBuffer>>;

/// Entry arguments of `paged_attention` over fresh host buffers.
fn pa_args_l2(
    pa: &PaCase,
    inputs: &pto_kernels::paged_attention::PaInputs,
) -> anyhow::Result<(TaskArgs, Arc<HostBuffer>, Keep)> {
    let bits = |v: &[half::bf16]| -> Vec<u16> { v.iter().map(|x| x.to_bits()).collect() };
    let (q_buf, q) = buffer(10, &bits(&inputs.query), &pa.query_shape(), DType::BF16)?;
    let (k_buf, k) = buffer(11, &bits(&inputs.key_cache), &pa.cache_shape(), DType::BF16)?;
    let (v_buf, v) = buffer(
        12,
        &bits(&inputs.value_cache),
        &pa.cache_shape(),
        DType::BF16,
    )?;
    let (t_buf, t) = buffer(13, &inputs.block_table, &pa.block_table_shape(), DType::I32)?;
    let (c_buf, c) = buffer(14, &inputs.context_lens, &[pa.batch], DType::I32)?;
    let (o_buf, o) = buffer(
        15,
        &vec![0.0f32; pa.out_len()],
        &pa.query_shape(),
        DType::F32,
    )?;
    let args = TaskArgs::new()
        .input(&q)
        .input(&k)
        .input(&v)
        .input(&t)
        .input(&c)
        .output_existing(&o);
    Ok((
        args,
        Arc::clone(&o_buf),
        vec![q_buf, k_buf, v_buf, t_buf, c_buf, o_buf],
    ))
}
