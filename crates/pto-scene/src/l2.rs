//! Running one L2 chip job for a scene (what every level-2 scene does): the case's callable
//! with the case's `CallConfig` and some entry tensors ([`run_l2`]), a verdict that checks the
//! per-case sizing reached the chip ([`verdict`]), and [`L2Scene`], a level-2 scene declared
//! by its inputs and golden alone (the reference system's `generate_args` / `compute_golden`).
//!
//! In-process mode the chip is a `ChipWorker` driven directly. In child-process mode the same
//! callable runs on a one-chip Worker whose chip is an OS process, with the inputs in shared
//! buffers. Diagnostics go to `<output>/<case>/chip0/run1_task0_<callable>/` in both modes: the
//! direct run passes the run context the Worker would (`direct_context`).

use std::time::Instant;

use anyhow::Context as _;
use pto_chip::memory::HostMemory;
use pto_chip::{ChipRunError, ChipSpec, RunContext};
use pto_node::{Callable, EndpointMode};
use pto_types::ring_config::env::EnvSnapshot;
use pto_types::ring_config::resolve::SizeSource;
/// Re-exported because [`L2Scene`]'s tolerance and [`compare`] take it: a scene author needs
/// no pto-types import for it. The rule is `pto_types::tolerance`'s, defined once.
pub use pto_types::tolerance::Tolerance;
use pto_types::{BufferId, DType, Resource, TaskArgs, Tensor, TensorTag};

use crate::config_block::{CaseConfig, SceneLevel};
use crate::l3::rows_of;
use crate::params::{Param, Params};
use crate::scene::{CaseResult, CaseRun, Scene, TaskErrorInfo, TaskRow, TaskSizing};

/// One entry tensor of an L2 run: its tag, initial bytes (little-endian elements), shape and
/// dtype. Tensors tagged `OutputExisting` or `InOut` are the outputs an [`L2Scene`] compares.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryTensor {
    pub tag: TensorTag,
    pub bytes: Vec<u8>,
    pub shape: Vec<u32>,
    pub dtype: DType,
    /// A name for messages (`out`); empty: the tensor is named by its index.
    pub name: String,
}

impl EntryTensor {
    /// A tensor of `dtype` and `shape` over little-endian `bytes`. Fails when the byte count
    /// is not the shape's element count times the dtype's size.
    pub fn from_bytes(
        tag: TensorTag,
        dtype: DType,
        shape: &[u32],
        bytes: Vec<u8>,
    ) -> anyhow::Result<EntryTensor> {
        let elements: u64 = shape.iter().map(|&d| u64::from(d)).product();
        let want = elements.saturating_mul(dtype.size() as u64);
        anyhow::ensure!(
            bytes.len() as u64 == want,
            "an entry tensor of shape {shape:?} and dtype {dtype:?} has {want} bytes, not {}",
            bytes.len()
        );
        Ok(EntryTensor {
            tag,
            bytes,
            shape: shape.to_vec(),
            dtype,
            name: String::new(),
        })
    }

    /// A tensor of zeros.
    pub fn zeros(tag: TensorTag, dtype: DType, shape: &[u32]) -> EntryTensor {
        let elements: usize = shape.iter().map(|&d| d as usize).product();
        EntryTensor {
            tag,
            bytes: vec![0; elements * dtype.size()],
            shape: shape.to_vec(),
            dtype,
            name: String::new(),
        }
    }

    /// An f32 tensor.
    pub fn f32s(tag: TensorTag, values: &[f32], shape: &[u32]) -> EntryTensor {
        Self::of(
            tag,
            DType::F32,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()),
        )
    }

    /// An i32 tensor.
    pub fn i32s(tag: TensorTag, values: &[i32], shape: &[u32]) -> EntryTensor {
        Self::of(
            tag,
            DType::I32,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()),
        )
    }

    /// A bf16 tensor.
    pub fn bf16s(tag: TensorTag, values: &[half::bf16], shape: &[u32]) -> EntryTensor {
        let bytes = values.iter().flat_map(|v| v.to_bits().to_le_bytes());
        Self::of(tag, DType::BF16, shape, bytes)
    }

    fn of(
        tag: TensorTag,
        dtype: DType,
        shape: &[u32],
        bytes: impl Iterator<Item = u8>,
    ) -> EntryTensor {
        EntryTensor {
            tag,
            bytes: bytes.collect(),
            shape: shape.to_vec(),
            dtype,
            name: String::new(),
        }
    }

    /// The same tensor, named `name` in messages.
    pub fn named(mut self, name: &str) -> EntryTensor {
        self.name = name.to_string();
        self
    }

    /// The elements as f32 (an f32 tensor; other dtypes give an empty vector).
    pub fn to_f32s(&self) -> Vec<f32> {
        match self.dtype {
            DType::F32 => f32s_of(&self.bytes),
            _ => Vec::new(),
        }
    }

    /// Overwrites the elements of an f32 tensor (the golden writes expected outputs so).
    pub fn set_f32s(&mut self, values: &[f32]) {
        self.bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    }

    /// Whether an [`L2Scene`] compares this tensor after the run.
    pub fn is_output(&self) -> bool {
        matches!(
            self.tag,
            TensorTag::Output | TensorTag::OutputExisting | TensorTag::InOut
        )
    }

    fn label(&self, index: usize) -> String {
        match self.name.is_empty() {
            true => format!("tensor {index}"),
            false => format!("tensor {index} ({})", self.name),
        }
    }
}

/// The entry arguments of an L2 run: tensors, then scalars (as the chip callable reads them
/// with `OrchArgs::tensor(i)` and `OrchArgs::scalar(j)`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EntryArgs {
    pub tensors: Vec<EntryTensor>,
    /// Each scalar's 64 bits (`ScalarArg::to_bits`).
    pub scalars: Vec<u64>,
}

impl EntryArgs {
    /// No arguments.
    pub fn new() -> EntryArgs {
        EntryArgs::default()
    }

    /// These arguments and tensor `t`.
    pub fn tensor(mut self, t: EntryTensor) -> EntryArgs {
        self.tensors.push(t);
        self
    }

    /// These arguments and a scalar (`f32`, `i64`, `u32`, …).
    pub fn scalar(mut self, value: impl pto_types::args::ScalarArg) -> EntryArgs {
        self.scalars.push(value.to_bits());
        self
    }
}

impl From<Vec<EntryTensor>> for EntryArgs {
    fn from(tensors: Vec<EntryTensor>) -> EntryArgs {
        EntryArgs {
            tensors,
            scalars: Vec::new(),
        }
    }
}

/// The f32 values of some little-endian bytes.
pub fn f32s_of(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The task row and the final bytes of every entry tensor.
pub struct L2Outcome {
    pub row: TaskRow,
    pub tensors: Vec<Vec<u8>>,
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
pub fn run_l2(
    case: &CaseRun<'_>,
    spec: ChipSpec,
    callable: &str,
    args: &EntryArgs,
) -> anyhow::Result<L2Outcome> {
    match case.env.mode {
        EndpointMode::InProcess => run_direct(case, spec, callable, args),
        _ => run_on_worker(case, spec, callable, args),
    }
}

fn run_direct(
    case: &CaseRun<'_>,
    spec: ChipSpec,
    callable: &str,
    entry: &EntryArgs,
) -> anyhow::Result<L2Outcome> {
    let tensors = &entry.tensors;
    let mut buffers = Vec::with_capacity(tensors.len());
    let mut args = TaskArgs::new();
    for (i, t) in tensors.iter().enumerate() {
        let buf = HostMemory::new(t.bytes.len().max(1))?;
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
    for &bits in &entry.scalars {
        args = args.scalar(bits);
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
    entry: &EntryArgs,
) -> anyhow::Result<L2Outcome> {
    let tensors = &entry.tensors;
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
    for &bits in &entry.scalars {
        args = args.scalar(bits);
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
pub fn check_sizing(case: &CaseRun<'_>, row: &TaskRow) -> Result<(), String> {
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

pub fn verdict(
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

/// Builds a case's entry tensors (the reference system's `generate_args`).
pub type InputsFn = fn(&CaseRun<'_>) -> anyhow::Result<EntryArgs>;
/// Writes the expected outputs into a copy of the entry arguments (`compute_golden`): the
/// output tensors' bytes become what the run must produce.
pub type GoldenFn = fn(&CaseRun<'_>, &mut EntryArgs) -> anyhow::Result<()>;
/// The chip a case runs on.
pub type ChipFn = fn(&CaseRun<'_>) -> anyhow::Result<ChipSpec>;
/// A cross-param check ([`Scene::validate`]).
pub type ValidateFn = fn(&Params, &CaseConfig) -> Result<(), String>;

/// A level-2 scene declared by its parts: the chip callable it runs, the params it accepts,
/// how a case's entry tensors are made and what the outputs must be. Its cases run the
/// callable once with the case's `CallConfig` (in both endpoint modes), check that the case's
/// sizing reached the chip (source `call_config`) and compare every output tensor with the
/// golden within the tolerance. Build it with the `const` methods and register it:
///
/// ```ignore
/// pto_scene::register_scene!(
///     pto_scene::L2Scene::new("my_add", "my.add_job", inputs, golden)
///         .with_params(PARAMS)
///         .with_tolerance(1e-6, 1e-6)
/// );
/// ```
pub struct L2Scene {
    name: &'static str,
    callable: &'static str,
    inputs: InputsFn,
    golden: GoldenFn,
    params: &'static [Param],
    tolerance: Tolerance,
    chip: Option<ChipFn>,
    validate: Option<ValidateFn>,
}

impl L2Scene {
    /// Scene `name` runs chip callable `callable` (registered with `pto_chip::register_chip!`)
    /// on the tensors `inputs` makes and compares its outputs with those `golden` writes.
    pub const fn new(
        name: &'static str,
        callable: &'static str,
        inputs: InputsFn,
        golden: GoldenFn,
    ) -> L2Scene {
        L2Scene {
            name,
            callable,
            inputs,
            golden,
            params: &[],
            tolerance: Tolerance::DEFAULT,
            chip: None,
            validate: None,
        }
    }

    /// The params cases may set (each with its range and default).
    pub const fn with_params(self, params: &'static [Param]) -> L2Scene {
        L2Scene { params, ..self }
    }

    /// The tolerance of float outputs (default [`Tolerance::DEFAULT`]).
    pub const fn with_tolerance(self, rtol: f64, atol: f64) -> L2Scene {
        L2Scene {
            tolerance: Tolerance::new(rtol, atol),
            ..self
        }
    }

    /// The chip of a case (default `ChipSpec::default()`).
    pub const fn with_chip(self, chip: ChipFn) -> L2Scene {
        L2Scene {
            chip: Some(chip),
            ..self
        }
    }

    /// A check between params that ranges cannot express, run when the file loads.
    pub const fn with_validate(self, validate: ValidateFn) -> L2Scene {
        L2Scene {
            validate: Some(validate),
            ..self
        }
    }
}

impl Scene for L2Scene {
    fn name(&self) -> &'static str {
        self.name
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L2
    }

    fn params(&self) -> &'static [Param] {
        self.params
    }

    fn validate(&self, params: &Params, config: &CaseConfig) -> Result<(), String> {
        self.validate.map_or(Ok(()), |f| f(params, config))
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let args = (self.inputs)(case).context("making the entry arguments")?;
        let mut expected = args.clone();
        (self.golden)(case, &mut expected).context("computing the golden")?;
        let spec = match self.chip {
            Some(f) => f(case)?,
            None => ChipSpec::default(),
        };
        let outcome = run_l2(case, spec, self.callable, &args)?;
        let tolerance = self.tolerance;
        Ok(verdict(case, outcome.row, || {
            for (i, (want, got)) in expected.tensors.iter().zip(&outcome.tensors).enumerate() {
                if want.is_output() {
                    compare(i, want, got, tolerance)?;
                }
            }
            Ok(())
        }))
    }
}

/// Compares output `index`'s final bytes `got` with its golden `want`: float dtypes element by
/// element within `tolerance` ([`Tolerance::check`]: NaN never matches, an infinity only
/// itself), integer and bool dtypes bit for bit.
pub fn compare(
    index: usize,
    want: &EntryTensor,
    got: &[u8],
    tolerance: Tolerance,
) -> Result<(), String> {
    let what = want.label(index);
    if got.len() != want.bytes.len() {
        return Err(format!(
            "{what}: {} bytes after the run, the golden has {}",
            got.len(),
            want.bytes.len()
        ));
    }
    let size = want.dtype.size().max(1);
    let (Some(w), Some(g)) = (floats(want.dtype, &want.bytes), floats(want.dtype, got)) else {
        let bad = (0..got.len() / size)
            .filter(|&e| got[e * size..(e + 1) * size] != want.bytes[e * size..(e + 1) * size])
            .collect::<Vec<_>>();
        return match bad.first() {
            None => Ok(()),
            Some(&e) => Err(format!(
                "{what}: {} of {} elements differ from the golden; first at [{e}]",
                bad.len(),
                got.len() / size
            )),
        };
    };
    tolerance
        .check(&g, &w)
        .map_err(|mismatch| format!("{what}: {mismatch}"))
}

/// The elements of a float tensor as f64 (`None` for integer and bool dtypes).
fn floats(dtype: DType, bytes: &[u8]) -> Option<Vec<f64>> {
    let two = |c: &[u8]| u16::from_le_bytes([c[0], c[1]]);
    Some(match dtype {
        DType::F32 => f32s_of(bytes).into_iter().map(f64::from).collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(two(c)).to_f64())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_bits(two(c)).to_f64())
            .collect(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_block::CaseConfig;
    use crate::params::Params;
    use crate::scene::RunnerEnv;

    /// The worker path of child-process mode, exercised with in-process endpoints: same rows,
    /// same results as the direct path.
    #[test]
    fn l2_scene_through_a_one_chip_worker() {
        let params = Params::defaults(&[]);
        let config = CaseConfig {
            runtime_env: pto_types::RuntimeEnv::default().with_task_window([0, 8, 0, 0]),
            ..CaseConfig::default()
        };
        let env = RunnerEnv::new(EndpointMode::InProcess, true);
        let base = config.base_call_config();
        let case = CaseRun::new("c", &params, &config, base, &env);
        let n = 1024;
        let tensors = [
            EntryTensor::f32s(TensorTag::Input, &vec![2.0; n], &[n as u32]),
            EntryTensor::f32s(TensorTag::Input, &vec![3.0; n], &[n as u32]),
            EntryTensor::f32s(TensorTag::OutputExisting, &vec![0.0; n], &[n as u32]),
        ];
        let spec = ChipSpec {
            clusters: 1,
            ..ChipSpec::default()
        };
        let args = EntryArgs::from(tensors.to_vec());
        let via_worker = run_on_worker(&case, spec.clone(), "vector_example", &args).unwrap();
        let direct = run_direct(&case, spec, "vector_example", &args).unwrap();
        for outcome in [&via_worker, &direct] {
            assert!(outcome.row.error.is_none(), "{:?}", outcome.row.error);
            assert!(f32s_of(&outcome.tensors[2]).iter().all(|&v| v == 47.0));
            check_sizing(&case, &outcome.row).unwrap();
        }
        assert_eq!(via_worker.row.sizing, direct.row.sizing);
    }
}
