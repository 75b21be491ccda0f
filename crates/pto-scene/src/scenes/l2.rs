//! The shipped level-2 scenes: the vector example, paged attention and per-case sizing.

use pto_chip::ChipSpec;
use pto_chip::spec::{DEFAULT_CLUSTERS, MAX_CLUSTERS};
use pto_kernels::paged_attention::{PA_SMALL, PaCase, TOLERANCE, golden, make_inputs};
use pto_types::TensorTag;

use crate::config_block::{CaseConfig, SceneLevel};
use crate::l2::{EntryArgs, EntryTensor, f32s_of, run_l2, verdict};
use crate::params::{Param, ParamError, Params};
use crate::scene::{CaseResult, CaseRun, Scene};

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
            EntryTensor::f32s(TensorTag::Input, &vec![2.0; n], &shape),
            EntryTensor::f32s(TensorTag::Input, &vec![3.0; n], &shape),
            EntryTensor::f32s(TensorTag::OutputExisting, &vec![0.0; n], &shape),
        ];
        let spec = ChipSpec {
            clusters: case.param("clusters")?,
            ..ChipSpec::default()
        };
        let outcome = run_l2(
            case,
            spec,
            "vector_example",
            &EntryArgs::from(Vec::from(tensors)),
        )?;
        let out = f32s_of(&outcome.tensors[2]);
        Ok(verdict(case, outcome.row, || {
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
            EntryTensor::bf16s(TensorTag::Input, &inputs.query, &pa.query_shape()),
            EntryTensor::bf16s(TensorTag::Input, &inputs.key_cache, &pa.cache_shape()),
            EntryTensor::bf16s(TensorTag::Input, &inputs.value_cache, &pa.cache_shape()),
            EntryTensor::i32s(
                TensorTag::Input,
                &inputs.block_table,
                &pa.block_table_shape(),
            ),
            EntryTensor::i32s(TensorTag::Input, &inputs.context_lens, &[pa.batch]),
            EntryTensor::f32s(
                TensorTag::OutputExisting,
                &vec![0.0; pa.out_len()],
                &pa.query_shape(),
            ),
        ];
        let spec = ChipSpec {
            clusters: case.param("clusters")?,
            ..ChipSpec::default()
        };
        let outcome = run_l2(
            case,
            spec,
            "paged_attention",
            &EntryArgs::from(Vec::from(tensors)),
        )?;
        let actual = f32s_of(&outcome.tensors[5]);
        Ok(verdict(case, outcome.row, || {
            TOLERANCE
                .check(&actual, &golden(&pa, &inputs))
                .map_err(|m| m.to_string())
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

/// The canonical write-after-read hazard (`pto_kernels::hazard::war_hazard`): a slow read of x
/// into y, then an overwrite of x. The case passes when y holds x's old values, which needs the
/// read tracked (`config.track_war`, or `tracked_input = 1`); untracked, the overwrite can land
/// mid-read, and the write-after-read check reports it on the case.
pub(crate) struct WarHazard;

impl Scene for WarHazard {
    fn name(&self) -> &'static str {
        "war_hazard"
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L2
    }

    fn params(&self) -> &'static [Param] {
        WAR_PARAMS
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let len: u32 = case.param("n")?;
        let n = len as usize;
        let wait_us: u64 = case.param("read_wait_us")?;
        let tracked: u64 = case.param("tracked_input")?;
        let args = EntryArgs::new()
            .tensor(EntryTensor::f32s(TensorTag::Input, &vec![1.0; n], &[len]).named("x"))
            .tensor(EntryTensor::f32s(TensorTag::OutputExisting, &vec![0.0; n], &[len]).named("y"))
            .scalar(wait_us)
            .scalar(tracked);
        let outcome = run_l2(case, ChipSpec::default(), "war_hazard", &args)?;
        let y = f32s_of(&outcome.tensors[1]);
        Ok(verdict(case, outcome.row, || {
            match y.iter().position(|&v| v != 1.0) {
                None => Ok(()),
                Some(i) => Err(format!(
                    "y[{i}] = {}, expected 1: the overwrite of x ran while the read was under \
                     way (set config.track_war = true, or tracked_input = 1)",
                    y[i]
                )),
            }
        }))
    }
}

static WAR_PARAMS: &[Param] = &[
    Param::new("n", 1, 1 << 20, 1024, "elements of x and y"),
    Param::new(
        "read_wait_us",
        0,
        10_000_000,
        100_000,
        "how long the reader waits before it reads x (µs)",
    )
    .with_fast_default(20_000),
    Param::new(
        "tracked_input",
        0,
        1,
        0,
        "1: the reader tags x tracked_input",
    ),
];
