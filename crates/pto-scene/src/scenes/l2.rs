//! Level-2 scenes: one chip runs the case's callable with the case's `CallConfig`.
//!
//! In-process mode the chip is a `ChipWorker` driven directly. In child-process mode the same
//! callable runs on a one-chip Worker whose chip is an OS process, with the inputs in shared
//! buffers. Diagnostics go to `<output>/<case>/chip0/run1_task0_<callable>/` in both modes: the
//! direct run passes the run context the Worker would ([`direct_context`]).

use std::time::Instant;

use anyhow::Context as _;
use pto_chip::memory::HostBuffer as ChipBuffer;
use pto_chip::spec::{DEFAULT_CLUSTERS, MAX_CLUSTERS};
use pto_chip::{ChipRunError, ChipSpec, RunContext};
use pto_kernels::paged_attention::{PA_SMALL, PaCase, check, golden, make_inputs};
use pto_node::{Callable, EndpointMode};
use pto_types::ring_config::env::EnvSnapshot;
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{BufferId, DType, Resource, TaskArgs, Tensor, TensorTag};

use super::rows_of;
use crate::config_block::{CaseConfig, SceneLevel};
use crate::params::{Param, ParamError, Params};
use crate::scene::{CaseResult, CaseRun, Scene, TaskErrorInfo, TaskRow, TaskSizing};

/// One entry tensor of an L2 run: its tag, initial bytes (little-endian elements), shape, dtype.
pub(crate) struct L2Tensor {
    pub(crate) tag: TensorTag,
    pub(crate) bytes: Vec<u8>,
    pub(crate) shape: Vec<u32>,
    pub(crate) dtype: DType,
}

impl L2Tensor {
    pub(crate) fn f32s(tag: TensorTag, values: &[f32], shape: &[u32]) -> L2Tensor {
        L2Tensor {
            tag,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            shape: shape.to_vec(),
            dtype: DType::F32,
        }
    }

    pub(crate) fn i32s(tag: TensorTag, values: &[i32], shape: &[u32]) -> L2Tensor {
        L2Tensor {
            tag,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            shape: shape.to_vec(),
            dtype: DType::I32,
        }
    }

    pub(crate) fn bf16s(tag: TensorTag, values: &[half::bf16], shape: &[u32]) -> L2Tensor {
        L2Tensor {
            tag,
            bytes: values
                .iter()
                .flat_map(|v| v.to_bits().to_le_bytes())
                .collect(),
            shape: shape.to_vec(),
            dtype: DType::BF16,
        }
    }
}

/// The f32 values of some little-endian bytes.
pub(crate) fn f32s_of(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The task row and the final bytes of every entry tensor.
pub(crate) struct L2Outcome {
    pub(crate) row: TaskRow,
    pub(crate) tensors: Vec<Vec<u8>>,
}

/// The row of a run that produced no chip report: the sizing it tried to bind, resolved like
/// the chip resolves (`env`: the chip's snapshot).
fn error_row(case: &CaseRun<'_>, task: &str, env: &EnvSnapshot, error: TaskErrorInfo) -> TaskRow {
    let mut row = TaskRow::failed(task, 0, TaskSizing::resolve(&case.base, env), error);
    row.env_problems = env.problems.iter().map(|p| p.to_string()).collect();
    row
}

/// The run context of the L2-direct path: the one a fresh one-chip Worker gives its first
/// task (run 1, task 0, labelled with the callable), so the chip writes diagnostics to the same
/// `chip0/run1_task0_<callable>/` directory in both modes.
fn direct_context(callable: &str) -> RunContext {
    RunContext {
        chip: 0,
        label: Some(callable.to_string()),
        l3: Some((FIRST_WORKER_RUN, 0)),
    }
}

/// The id of a Worker's first run (`pto_node` numbers runs from 1).
const FIRST_WORKER_RUN: u64 = 1;

/// Runs `callable` once with `tensors` as entry arguments, in the runner's mode.
pub(crate) fn run_l2(
    case: &CaseRun<'_>,
    spec: ChipSpec,
    callable: &str,
    tensors: &[L2Tensor],
) -> anyhow::Result<L2Outcome> {
    match case.env.mode {
        EndpointMode::InProcess => run_direct(case, spec, callable, tensors),
        _ => run_on_worker(case, spec, callable, tensors),
    }
}

fn run_direct(
    case: &CaseRun<'_>,
    spec: ChipSpec,
    callable: &str,
    tensors: &[L2Tensor],
) -> anyhow::Result<L2Outcome> {
    let mut buffers = Vec::with_capacity(tensors.len());
    let mut args = TaskArgs::new();
    for (i, t) in tensors.iter().enumerate() {
        let buf = ChipBuffer::new(t.bytes.len().max(1))?;
        buf.write_bytes(0, &t.bytes);
        let id = BufferId {
            owner_uid: 0x5CE0E,
            buffer_id: i as u64,
            generation: 0,
        };
        let tensor = Tensor::contiguous(buf.buffer_ref(id), &t.shape, t.dtype)?;
        args = args.tensor(t.tag, &tensor);
        buffers.push(buf);
    }
    let chip = case.chip(spec).context("starting the chip")?;
    let ctx = direct_context(callable);
    let started = Instant::now();
    let mut row = match chip.run(callable, &args, &case.base, &ctx) {
        Ok(report) => TaskRow::from_report(callable, &report),
        Err(e) => {
            let code = match &e {
                ChipRunError::Run(c) => c.code,
                ChipRunError::Bind(b) => b.code(),
            };
            let mut row = error_row(
                case,
                callable,
                chip.env(),
                TaskErrorInfo::new(Some(code), e.to_string()),
            );
            row.wall = Some(started.elapsed());
            row
        }
    };
    row.diagnostics_dir = case.diagnostics_dir(&ctx);
    let tensors = tensors
        .iter()
        .zip(&buffers)
        .map(|(t, b)| b.read_bytes(0, t.bytes.len()))
        .collect();
    Ok(L2Outcome { row, tensors })
}

fn run_on_worker(
    case: &CaseRun<'_>,
    spec: ChipSpec,
    callable: &str,
    tensors: &[L2Tensor],
) -> anyhow::Result<L2Outcome> {
    let w = case.worker_builder(1, 0).chip_spec(0, spec).build()?;
    let handle = w.register(Callable::chip(callable))?;
    w.init().context("starting the worker")?;
    let mut buffers = Vec::with_capacity(tensors.len());
    let mut args = TaskArgs::new();
    for t in tensors {
        let buf = w.create_buffer(t.bytes.len().max(1))?;
        buf.write_from(0, &t.bytes)?;
        let tensor = buf.tensor(&t.shape, t.dtype)?;
        args = args.tensor(t.tag, &tensor);
        buffers.push(buf);
    }
    let base = case.base.clone();
    let config_of = |_: &str| case.base.clone();
    let rows = match w.run(
        |orch, _, _| {
            orch.submit_next_level(&handle, args.clone().label(callable), &base, 0)?;
            Ok(())
        },
        TaskArgs::new(),
        case.base.clone(),
    ) {
        Ok(report) => rows_of(&report, case, &config_of),
        Err(pto_node::WorkerRunError::Failed(e)) => {
            let mut rows = rows_of(&e.report, case, &config_of);
            if rows.is_empty() {
                let error = TaskErrorInfo::new(e.first.code, e.to_string());
                rows.push(error_row(case, callable, &case.chip_env(), error));
            }
            rows
        }
        Err(e) => return Err(e.into()),
    };
    let row = rows.into_iter().next().unwrap_or_else(|| {
        let error = TaskErrorInfo::new(None, "no report".into());
        error_row(case, callable, &case.chip_env(), error)
    });
    let tensors = tensors
        .iter()
        .zip(&buffers)
        .map(|(t, b)| b.read_vec::<u8>(0, t.bytes.len()).unwrap_or_default())
        .collect();
    w.close();
    Ok(L2Outcome { row, tensors })
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

    fn params(&self) -> &'static [Param] {
        VECTOR_PARAMS
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let len: u32 = case.param("n")?;
        let n = len as usize;
        let shape = [len];
        let tensors = [
            L2Tensor::f32s(TensorTag::Input, &vec![2.0; n], &shape),
            L2Tensor::f32s(TensorTag::Input, &vec![3.0; n], &shape),
            L2Tensor::f32s(TensorTag::OutputExisting, &vec![0.0; n], &shape),
        ];
        let spec = ChipSpec {
            clusters: case.param("clusters")?,
            ..ChipSpec::default()
        };
        let outcome = run_l2(case, spec, "vector_example", &tensors)?;
        let out = f32s_of(&outcome.tensors[2]);
        Ok(finish(case, outcome.row, || {
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

    fn params(&self) -> &'static [Param] {
        PA_PARAMS
    }

    fn validate(&self, params: &Params, _config: &CaseConfig) -> Result<(), String> {
        let pa = pa_of(params, false).map_err(|e| e.to_string())?;
        let show = |key| params.show(key);
        if !pa.max_model_len.is_multiple_of(pa.block) {
            return Err(format!(
                "{} must be a multiple of {}",
                show("max_model_len"),
                show("block")
            ));
        }
        if pa.ctx > pa.max_model_len {
            return Err(format!(
                "{} must not exceed {}",
                show("ctx"),
                show("max_model_len")
            ));
        }
        if pa.expected_tasks() > PA_MAX_TASKS {
            return Err(format!(
                "{}, {}, {}, {} submit {} tasks; at most {PA_MAX_TASKS} are allowed",
                show("batch"),
                show("heads"),
                show("block"),
                show("ctx"),
                pa.expected_tasks()
            ));
        }
        let (bytes, work) = pa_cost(&pa);
        if bytes > PA_MAX_INPUT_BYTES || work > PA_MAX_WORK {
            return Err(format!(
                "{}, {}, {}, {}, {} need {bytes} bytes of inputs and {work} multiply-adds per \
                 pass; at most {PA_MAX_INPUT_BYTES} bytes and {PA_MAX_WORK} are allowed",
                show("batch"),
                show("heads"),
                show("d"),
                show("block"),
                show("ctx")
            ));
        }
        Ok(())
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let pa = pa_of(case.params, case.env.fast)?;
        let inputs = make_inputs(&pa);
        let tensors = [
            L2Tensor::bf16s(TensorTag::Input, &inputs.query, &pa.query_shape()),
            L2Tensor::bf16s(TensorTag::Input, &inputs.key_cache, &pa.cache_shape()),
            L2Tensor::bf16s(TensorTag::Input, &inputs.value_cache, &pa.cache_shape()),
            L2Tensor::i32s(
                TensorTag::Input,
                &inputs.block_table,
                &pa.block_table_shape(),
            ),
            L2Tensor::i32s(TensorTag::Input, &inputs.context_lens, &[pa.batch]),
            L2Tensor::f32s(
                TensorTag::OutputExisting,
                &vec![0.0; pa.out_len()],
                &pa.query_shape(),
            ),
        ];
        let spec = ChipSpec {
            clusters: case.param("clusters")?,
            ..ChipSpec::default()
        };
        let outcome = run_l2(case, spec, "paged_attention", &tensors)?;
        let actual = f32s_of(&outcome.tensors[5]);
        Ok(finish(case, outcome.row, || {
            check(&actual, &golden(&pa, &inputs), 1e-3, 1e-3).map_err(|m| m.to_string())
        }))
    }
}

/// Elements of each vector of the vector example: 16 MiB per f32 tensor at most, so a case
/// stays within seconds and well under 1 GiB of host memory.
const MAX_VECTOR_ELEMENTS: u64 = 1 << 22;

static VECTOR_PARAMS: &[Param] = &[
    Param::new(
        "n",
        1,
        MAX_VECTOR_ELEMENTS,
        16384,
        "elements of each f32 vector",
    )
    .with_fast_default(4096),
    Param::new(
        "clusters",
        1,
        MAX_CLUSTERS as u64,
        DEFAULT_CLUSTERS as u64,
        "clusters of the chip (1 AIC + 2 AIV cores each)",
    ),
];

/// Bytes of all paged-attention inputs and the output together: 256 MiB at most (4x the
/// ringbuffer_stress case).
const PA_MAX_INPUT_BYTES: u64 = 256 << 20;
/// Multiply-adds of one QK (or PV) pass over every sequence: that of the ringbuffer_stress
/// case (2^28), so no case runs for minutes (the golden repeats the chip's work on one host
/// thread; 2^30 took 45 s unoptimised).
const PA_MAX_WORK: u64 = 1 << 28;
/// Tasks of one case (`chunks · (1 + 4 · max_bn)`): 64x the ringbuffer_stress case; 65k tasks
/// (block 1) took 8 s.
const PA_MAX_TASKS: u64 = 16384;

static PA_PARAMS: &[Param] = &[
    Param::new("batch", 1, 256, PA_SMALL.batch as u64, "sequences"),
    Param::new("heads", 1, 128, PA_SMALL.heads as u64, "query heads"),
    Param::new("d", 1, 512, PA_SMALL.d as u64, "head dimension"),
    Param::new(
        "block",
        1,
        1024,
        PA_SMALL.block as u64,
        "positions per KV block",
    ),
    Param::new(
        "ctx",
        1,
        65536,
        PA_SMALL.ctx as u64,
        "context length of every sequence",
    ),
    Param::new(
        "max_model_len",
        1,
        65536,
        PA_SMALL.max_model_len as u64,
        "longest context: a multiple of block, at least ctx",
    ),
    Param::new(
        "seed",
        0,
        i64::MAX as u64,
        PA_SMALL.seed,
        "seed of the input stream",
    ),
    Param::new(
        "clusters",
        1,
        MAX_CLUSTERS as u64,
        DEFAULT_CLUSTERS as u64,
        "clusters of the chip (1 AIC + 2 AIV cores each)",
    ),
];

/// The paged-attention case described by `params` (defaults: `pa_small`).
fn pa_of(params: &Params, fast: bool) -> Result<PaCase, ParamError> {
    Ok(PaCase {
        batch: params.get("batch", fast)?,
        heads: params.get("heads", fast)?,
        d: params.get("d", fast)?,
        block: params.get("block", fast)?,
        ctx: params.get("ctx", fast)?,
        max_model_len: params.get("max_model_len", fast)?,
        seed: params.get("seed", fast)?,
    })
}

/// `(bytes of inputs and output, multiply-adds of one QK pass)`; in u64, which the declared
/// ranges cannot overflow (at most 2^8 · 2^17 · 2^10 · 2^9 per product).
fn pa_cost(pa: &PaCase) -> (u64, u64) {
    let [batch, heads, d] = pa.query_shape().map(u64::from);
    let positions = u64::from(pa.total_blocks()) * u64::from(pa.block);
    let bytes = batch * heads * d * (2 + 4)
        + 2 * positions * d * 2
        + batch * u64::from(pa.blocks_per_seq()) * 4
        + batch * 4;
    let work = heads * positions * d;
    (bytes, work)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_block::CaseConfig;
    use crate::scene::RunnerEnv;

    /// The worker path of child-process mode, exercised with in-process endpoints: same rows,
    /// same results as the direct path.
    #[test]
    fn l2_scene_through_a_one_chip_worker() {
        let params = Params::defaults(VectorExample.params());
        let config = CaseConfig {
            runtime_env: pto_types::RuntimeEnv::default().with_task_window([0, 8, 0, 0]),
            ..CaseConfig::default()
        };
        let env = RunnerEnv {
            mode: EndpointMode::InProcess,
            ring_env: Vec::new(),
            strict_env: false,
            fast: true,
            task_timeout: None,
            liveness_timeout: None,
        };
        let base = config.base_call_config();
        let case = CaseRun::new("c", &params, &config, base, &env);
        let n = 1024;
        let tensors = [
            L2Tensor::f32s(TensorTag::Input, &vec![2.0; n], &[n as u32]),
            L2Tensor::f32s(TensorTag::Input, &vec![3.0; n], &[n as u32]),
            L2Tensor::f32s(TensorTag::OutputExisting, &vec![0.0; n], &[n as u32]),
        ];
        let spec = ChipSpec {
            clusters: 1,
            ..ChipSpec::default()
        };
        let via_worker = run_on_worker(&case, spec.clone(), "vector_example", &tensors).unwrap();
        let direct = run_direct(&case, spec, "vector_example", &tensors).unwrap();
        for outcome in [&via_worker, &direct] {
            assert!(outcome.row.error.is_none(), "{:?}", outcome.row.error);
            assert!(f32s_of(&outcome.tensors[2]).iter().all(|&v| v == 47.0));
            check_sizing(&case, &outcome.row).unwrap();
        }
        assert_eq!(via_worker.row.sizing, direct.row.sizing);
    }
}
