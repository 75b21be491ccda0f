//! Scenes: workloads written in Rust (inputs, orchestration, golden, tolerances, level) whose
//! cases come from TOML files (RING_CONFIG.md §11).
//!
//! A scene receives a [`CaseRun`]: the case's base `CallConfig` (its `runtime_env` and
//! `aicpu_thread_num`, plus the diagnostics chosen on the command line), per-label overrides
//! through [`CaseRun::for_label`], and constructors for chips and Workers that apply the
//! runner's environment tier and endpoint mode. Nothing here reads or changes the process
//! environment except through `EnvSource`.
//!
//! `pto scenes --json` prints one [`JsonScene`] per line: what a scene accepts in a scene file.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::Duration;

use std::path::PathBuf;

use pto_chip::Plan;
use pto_chip::footprint::Footprint;
use pto_chip::{ChipRunReport, ChipSpec, ChipWorker, RingUsage, RunContext};
use pto_node::{EndpointMode, Worker, WorkerBuilder};
use pto_types::ring_config::env::{EnvSnapshot, EnvSource};
use pto_types::ring_config::resolve::ResolvedSizing;
use pto_types::{CallConfig, ErrorCode, RING_COUNT, Resource};

use crate::config_block::{CaseConfig, SceneLevel};
use crate::labels::Label;
use crate::params::{Param, Params};
use pto_sizing::{Block, SizingBlocks};
use serde::{Deserialize, Serialize};

/// A registered workload.
pub trait Scene: Sync {
    fn name(&self) -> &'static str;
    fn level(&self) -> SceneLevel;
    /// Params this scene accepts, each with its range and default; any other key, and any
    /// value outside its range, is a load error.
    fn params(&self) -> &'static [Param];
    /// Task labels the orchestration requests through [`CaseRun::for_label`]; a case's
    /// `config.tasks` keys must match one (see [`crate::labels`]).
    fn labels(&self) -> &'static [Label] {
        &[]
    }
    /// Allowed `config.device_count` and `config.num_sub_workers` of this scene's cases.
    fn worker_bounds(&self) -> WorkerBounds {
        WorkerBounds::ONE_CHIP
    }
    /// How many remote workers (`--remote`) a case of this level-4 scene uses; `None` for a
    /// scene that takes none. The runner refuses a `--remote` count that differs.
    fn remote_workers(&self, _config: &CaseConfig) -> Option<usize> {
        None
    }
    /// Checks between params (and the case's worker counts) that a range cannot express,
    /// e.g. a size that must divide another; run at load after every value is in range. The
    /// error names the keys and values involved.
    fn validate(&self, _params: &Params, _config: &CaseConfig) -> Result<(), String> {
        Ok(())
    }
    /// Runs one case: builds inputs, runs, checks against the golden.
    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult>;
    /// Lines printed after all cases of a file ran (e.g. comparisons between cases).
    fn summary(&self, _cases: &[(String, CaseResult)]) -> Vec<String> {
        Vec::new()
    }
}

/// The `config.device_count` and `config.num_sub_workers` a scene can run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerBounds {
    pub device_count: (u32, u32),
    pub num_sub_workers: (u32, u32),
}

impl WorkerBounds {
    /// One chip, no sub workers: every level-2 scene.
    pub const ONE_CHIP: WorkerBounds = WorkerBounds {
        device_count: (1, 1),
        num_sub_workers: (0, 0),
    };

    /// `config.KEY = VALUE is out of range for scene S (allowed MIN..=MAX)` for the first
    /// count outside its bounds.
    pub fn check(&self, scene: &str, config: &CaseConfig) -> Result<(), String> {
        let counts = [
            ("device_count", config.device_count, self.device_count),
            (
                "num_sub_workers",
                config.num_sub_workers,
                self.num_sub_workers,
            ),
        ];
        for (key, value, (min, max)) in counts {
            match value {
                Some(v) if !(min..=max).contains(&v) => {
                    return Err(format!(
                        "config.{key} = {v} is out of range for scene {scene} (allowed {min}..={max})"
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A scene registered by [`register_scene!`](crate::register_scene) (not used directly).
#[doc(hidden)]
pub struct __SceneRegistration(pub fn() -> &'static dyn Scene);

inventory::collect!(__SceneRegistration);

/// Registers a scene so that scene files, `pto_cli::main()` and the test harness find it by
/// its name, from any crate linked into the binary (the same mechanism as
/// `pto_chip::register_kernel!`). The argument is a constant expression of a type that
/// implements [`Scene`]: a unit struct, or an [`L2Scene`](crate::L2Scene) built with its
/// `const` builder.
///
/// ```ignore
/// struct MyScene;
/// impl pto_scene::Scene for MyScene { /* name, level, params, run, … */ }
/// pto_scene::register_scene!(MyScene);
/// ```
#[macro_export]
macro_rules! register_scene {
    ($scene:expr $(,)?) => {
        const _: () = {
            static SCENE: &(dyn $crate::Scene) = &$scene;
            fn get() -> &'static dyn $crate::Scene {
                SCENE
            }
            $crate::__inventory::submit! { $crate::scene::__SceneRegistration(get) }
        };
    };
}

/// The shipped scenes and every registered one, with the names registered more than once.
struct Registry {
    scenes: Vec<&'static dyn Scene>,
    duplicates: BTreeSet<&'static str>,
}

fn registry() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| {
        let registered = inventory::iter::<__SceneRegistration>
            .into_iter()
            .map(|r| (r.0)());
        let mut scenes: Vec<&'static dyn Scene> = Vec::new();
        let mut duplicates = BTreeSet::new();
        for scene in crate::scenes::ALL.iter().copied().chain(registered) {
            if scenes.iter().any(|s| s.name() == scene.name()) {
                duplicates.insert(scene.name());
            } else {
                scenes.push(scene);
            }
        }
        scenes.sort_by_key(|s| s.name());
        Registry { scenes, duplicates }
    })
}

/// Every scene this binary knows, sorted by name: the shipped ones and those registered with
/// [`register_scene!`](crate::register_scene) by any linked crate.
pub fn scenes() -> &'static [&'static dyn Scene] {
    &registry().scenes
}

/// The scene registered as `name`. The error says why not: no such scene (listing the known
/// ones), or two scenes registered under that name (which one a file means is then unknown).
pub fn find_scene(name: &str) -> Result<&'static dyn Scene, String> {
    let reg = registry();
    if reg.duplicates.contains(name) {
        return Err(format!(
            "two scenes are registered as {:?} in this binary (rename one)",
            crate::params::cut(name)
        ));
    }
    reg.scenes
        .iter()
        .copied()
        .find(|s| s.name() == name)
        .ok_or_else(|| {
            format!(
                "no scene named {:?} is registered (known: {})",
                crate::params::cut(name),
                scene_names().join(", ")
            )
        })
}

/// Registered scene names, sorted.
pub fn scene_names() -> Vec<&'static str> {
    scenes().iter().map(|s| s.name()).collect()
}

/// One line of `pto scenes --json` ([`JsonScene::of`]). Fields are added, never renamed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonScene {
    /// The name a scene file's `scene` key gives.
    pub scene: String,
    /// 2, 3 or 4 (`level` in the file).
    pub level: u32,
    /// Chips a case may ask for, `[min, max]` ([`WorkerBounds`]).
    pub device_count: [u32; 2],
    /// Sub workers a case may ask for, `[min, max]`.
    pub num_sub_workers: [u32; 2],
    /// The params a case may set, in declaration order.
    pub params: Vec<JsonParam>,
    /// The labels `config.tasks` may size; empty: size tasks with `config.runtime_env`.
    pub labels: Vec<JsonLabel>,
}

/// A declared param ([`Param`]): an integer in `min..=max`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonParam {
    pub name: String,
    pub min: u64,
    pub max: u64,
    /// The value when a case does not give one.
    pub default: u64,
    /// The value under `--fast` when a case does not give one; null: `default`.
    pub fast_default: Option<u64>,
    /// What the param means, in one line.
    pub doc: String,
}

/// A task label ([`Label`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonLabel {
    pub name: String,
    /// Tasks are labelled `<name><N>`, and `tasks.<name>` sizes all of them.
    pub family: bool,
    pub doc: String,
}

impl JsonScene {
    /// What `scene` accepts.
    pub fn of(scene: &dyn Scene) -> JsonScene {
        let b = scene.worker_bounds();
        let params = scene.params().iter().map(|p| JsonParam {
            name: p.name.to_string(),
            min: p.min,
            max: p.max,
            default: p.default,
            fast_default: p.fast_default,
            doc: p.doc.to_string(),
        });
        let labels = scene.labels().iter().map(|l| JsonLabel {
            name: l.name.to_string(),
            family: l.family,
            doc: l.doc.to_string(),
        });
        JsonScene {
            scene: scene.name().to_string(),
            level: scene.level().number(),
            device_count: [b.device_count.0, b.device_count.1],
            num_sub_workers: [b.num_sub_workers.0, b.num_sub_workers.1],
            params: params.collect(),
            labels: labels.collect(),
        }
    }
}

/// What the runner gives every case.
#[derive(Clone, Debug)]
pub struct RunnerEnv {
    pub mode: EndpointMode,
    /// Chip environment pairs laid over the process environment (`--ring-env`).
    pub ring_env: Vec<(OsString, OsString)>,
    pub strict_env: bool,
    /// Smaller inputs, for `cargo test`.
    pub fast: bool,
    /// `WorkerBuilder::task_timeout` of every L3 Worker (`--task-timeout`).
    pub task_timeout: Option<Duration>,
    /// `WorkerBuilder::liveness_timeout` of every L3 Worker (`--liveness-timeout`; `None`:
    /// the default).
    pub liveness_timeout: Option<Duration>,
    /// `WorkerBuilder::startup_timeout` of every L3 Worker (`None`: the default).
    pub startup_timeout: Option<Duration>,
    /// Remote L3 workers (`pto serve` addresses) for level-4 scenes (`--remote`); empty: such
    /// a scene starts its own servers on loopback ports in this process.
    pub remote: Vec<pto_node::remote::RemoteWorker>,
    /// Where `remote` came from, which decides how a case may use it.
    pub remote_source: RemoteSource,
}

/// Where a run's remote workers come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RemoteSource {
    /// `--remote`, one per worker a case needs: a case must get exactly its count.
    #[default]
    Flags,
    /// The serving ranks of an MPI job (`--launcher mpi`): a case takes the first ones it
    /// needs, and needs at least that many.
    Mpi,
}

impl RemoteSource {
    /// How many a run got, said after what a case needs.
    pub fn describe(self, given: usize) -> String {
        match self {
            RemoteSource::Flags => format!("got {given} (--remote)"),
            RemoteSource::Mpi => format!(
                "but the MPI job has {given} serving rank(s) (mpirun -n {}); start it with one rank more than the remote workers a case needs",
                given + 1
            ),
        }
    }
}

impl RunnerEnv {
    /// Cases in `mode` (`fast`: the scenes' fast params) with nothing else set: the process
    /// environment as it is, no timeouts beyond the defaults, no remote workers.
    pub fn new(mode: EndpointMode, fast: bool) -> RunnerEnv {
        RunnerEnv {
            mode,
            ring_env: Vec::new(),
            strict_env: false,
            fast,
            task_timeout: None,
            liveness_timeout: None,
            startup_timeout: None,
            remote: Vec::new(),
            remote_source: RemoteSource::Flags,
        }
    }
}

/// One case being run.
pub struct CaseRun<'a> {
    pub name: &'a str,
    pub params: &'a Params,
    pub config: &'a CaseConfig,
    /// Base config of every L2 task of the case.
    pub base: CallConfig,
    pub env: &'a RunnerEnv,
    requested: RefCell<BTreeSet<String>>,
}

impl<'a> CaseRun<'a> {
    pub(crate) fn new(
        name: &'a str,
        params: &'a Params,
        config: &'a CaseConfig,
        base: CallConfig,
        env: &'a RunnerEnv,
    ) -> CaseRun<'a> {
        CaseRun {
            name,
            params,
            config,
            base,
            env,
            requested: RefCell::new(BTreeSet::new()),
        }
    }

    /// Param `key` as a `T`: the case's value (checked against the scene's declaration at
    /// load) or the declared default (the fast default under `--fast`). Fails, never
    /// truncates, when the value does not fit `T` or the scene did not declare `key`.
    pub fn param<T: TryFrom<u64>>(&self, key: &str) -> anyhow::Result<T> {
        Ok(self.params.get(key, self.env.fast)?)
    }

    /// The config of the task labelled `label`: the base with the case's `tasks` blocks for
    /// it layered on (`tasks.ew`, then `tasks.ew3`, for `ew3`; validated at load), or the base
    /// itself. Records the label as requested.
    pub fn for_label(&self, label: &str) -> CallConfig {
        self.requested.borrow_mut().insert(label.to_string());
        self.config
            .layered(&self.base, label)
            .expect("label overrides were validated when the file was loaded")
    }

    /// `config.tasks` keys that applied to no requested task (T84).
    pub(crate) fn unrequested_labels(&self) -> Vec<String> {
        let requested = self.requested.borrow();
        let used: BTreeSet<&str> = requested
            .iter()
            .flat_map(|l| crate::labels::applicable_keys(l, self.config.tasks.keys()))
            .collect();
        self.config
            .tasks
            .keys()
            .filter(|k| !used.contains(k.as_str()))
            .cloned()
            .collect()
    }

    /// The chip environment: the process environment overlaid with the runner's pairs.
    pub fn env_source(&self) -> EnvSource {
        EnvSource::process().overlay(self.env.ring_env.iter().cloned())
    }

    /// The environment snapshot every chip of this case takes (never strict: problems only
    /// make a variable ignored, which is what the chip resolves with too). A child-process
    /// chip inherits this process's environment plus the same pairs, so it sees the same.
    pub fn chip_env(&self) -> EnvSnapshot {
        EnvSnapshot::take(&self.env_source(), false).unwrap_or_else(|_| EnvSnapshot::empty())
    }

    /// The directory the chip writes the diagnostics of the run `ctx` to (the chip's own
    /// naming, `pto_chip::diag::diagnostics_dir`), when the case records any.
    pub fn diagnostics_dir(&self, ctx: &RunContext) -> Option<PathBuf> {
        let b = &self.base;
        let any = b.enable_scope_stats || b.enable_dep_gen || b.enable_chip_swimlane > 0;
        let prefix = b.output_prefix.as_deref().filter(|_| any)?;
        Some(pto_chip::diag::diagnostics_dir(
            std::path::Path::new(prefix),
            ctx,
        ))
    }

    /// An L2 chip for this case.
    pub fn chip(&self, spec: ChipSpec) -> anyhow::Result<ChipWorker> {
        pto_kernels::link();
        let spec = ChipSpec {
            strict_env: spec.strict_env || self.env.strict_env,
            ..spec
        };
        Ok(ChipWorker::new(spec, self.env_source())?)
    }

    /// A level-3 Worker builder with the runner's mode and environment tier; the case's
    /// `device_count` and `num_sub_workers` (when given) override the scene's defaults.
    pub fn worker_builder(&self, chips: usize, subs: usize) -> WorkerBuilder {
        pto_kernels::link();
        let chips = self.config.device_count.map_or(chips, |n| n as usize);
        let subs = self.config.num_sub_workers.map_or(subs, |n| n as usize);
        let mut b = Worker::builder(3)
            .chips(chips)
            .sub_workers(subs)
            .endpoint_mode(self.env.mode)
            .strict_env(self.env.strict_env)
            .heap_ring_size(64 << 20)
            .task_timeout(self.env.task_timeout);
        if let Some(t) = self.env.liveness_timeout {
            b = b.liveness_timeout(t);
        }
        if let Some(t) = self.env.startup_timeout {
            b = b.startup_timeout(t);
        }
        for (k, v) in &self.env.ring_env {
            b = b.ring_env(k.clone(), v.clone());
        }
        b
    }
}

/// The sizing a task row shows and the arena it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskSizing {
    pub sizing: ResolvedSizing,
    pub footprint: Footprint,
}

impl TaskSizing {
    /// What a chip whose environment snapshot is `env` binds for `cfg` ([`Plan`], what
    /// `ChipWorker::run` binds). Used for tasks without a chip report (failed or skipped), so
    /// their rows show the sizing they tried to bind; `None` when the config itself cannot be
    /// resolved (the row then says why in its error).
    pub fn resolve(cfg: &CallConfig, env: &EnvSnapshot) -> Option<TaskSizing> {
        let plan = Plan::resolve(&cfg.runtime_env, env).ok()?;
        Some(TaskSizing {
            sizing: plan.sizing,
            footprint: plan.footprint,
        })
    }

    /// What a chip report says it bound.
    pub fn of_report(report: &ChipRunReport) -> TaskSizing {
        TaskSizing {
            sizing: report.sizing,
            footprint: report.footprint,
        }
    }
}

/// Outcome of one task (an L2 run).
#[derive(Clone, Debug)]
pub struct TaskRow {
    pub task: String,
    pub chip: u32,
    /// What the task bound (chip report) or tried to bind (resolved like the chip does).
    pub sizing: Option<ResolvedSizing>,
    /// Which block of the case set each `call_config` value of `sizing` (set by the runner,
    /// [`CaseConfig::blocks_for`]); `None` outside a scene case.
    pub blocks: Option<SizingBlocks>,
    pub arena: Option<String>,
    /// The arena footprint the sizing needs (bound, or asked for by a failed bind); 0 for a
    /// skipped task, which never asked.
    pub reserved_bytes: u64,
    /// Σ per-ring heap high-water bytes (`None` without a chip report).
    pub high_water_bytes: Option<u64>,
    /// Per-ring high-water marks (`None` without a chip report).
    pub usage: Option<[RingUsage; RING_COUNT]>,
    /// `None` when the task never ran on a chip.
    pub wall: Option<Duration>,
    pub error: Option<TaskErrorInfo>,
    /// Problems of the chip's environment, as the chip reports them.
    pub env_problems: Vec<String>,
    /// What the chip run's checks found without failing it (`ChipRunReport::warnings`).
    pub warnings: Vec<String>,
    /// The directory the chip writes this task's diagnostics to (`None` without diagnostics).
    pub diagnostics_dir: Option<PathBuf>,
}

/// Why a task failed.
#[derive(Clone, Debug)]
pub struct TaskErrorInfo {
    pub code: Option<u32>,
    pub name: String,
    pub message: String,
    /// Not run because a producer failed.
    pub skipped: bool,
    /// The scene expected this failure (the case passes because of it).
    pub expected: bool,
}

impl TaskErrorInfo {
    pub fn new(code: Option<ErrorCode>, message: String) -> TaskErrorInfo {
        TaskErrorInfo {
            code: code.map(|c| c.code()),
            name: code.map_or("FAILED", |c| c.name()).to_string(),
            message,
            skipped: false,
            expected: false,
        }
    }
}

impl TaskRow {
    /// Heap bytes reserved and used (high-water) on the rings of this task that had heap
    /// traffic: a ring nobody allocated on holds only the smallest legal heap, which says
    /// nothing about how well a sizing fits. `None` without a chip report or heap traffic.
    pub fn heap_fit(&self) -> Option<(u64, u64)> {
        let (sizing, usage) = (self.sizing.as_ref()?, self.usage.as_ref()?);
        let heaps = sizing.values(pto_types::Resource::Heap);
        let (mut reserved, mut high) = (0u64, 0u64);
        for (ring, u) in usage.iter().enumerate().filter(|(_, u)| u.heap_peak > 0) {
            reserved += heaps[ring];
            high += u.heap_peak;
        }
        (high > 0).then_some((reserved, high))
    }

    /// The block that set `resource` on `ring`, when a block of the case did.
    pub fn block(&self, resource: Resource, ring: usize) -> Option<&Block> {
        let r = Resource::ALL.iter().position(|x| *x == resource)?;
        self.blocks.as_ref()?[r][ring].as_ref()
    }

    /// `call_config (tasks.ew3)`, `env`, `default`: where the value of `resource` on `ring`
    /// came from, with the block when the case's.
    pub fn source_text(&self, resource: Resource, ring: usize) -> Option<String> {
        let source = self.sizing.as_ref()?.at(resource, ring).source.as_str();
        Some(match self.block(resource, ring) {
            Some(b) => format!("{source} ({})", b.path()),
            None => source.to_string(),
        })
    }

    /// The row of a successful chip run.
    pub fn from_report(task: &str, report: &ChipRunReport) -> TaskRow {
        let mut row = TaskRow::new(task, report.chip, Some(TaskSizing::of_report(report)));
        row.arena = Some(match report.arena {
            pto_chip::memory::ArenaOutcome::Hit => "hit".to_string(),
            pto_chip::memory::ArenaOutcome::Miss { .. } => "miss".to_string(),
        });
        row.high_water_bytes = Some((0..RING_COUNT).map(|r| report.usage[r].heap_peak).sum());
        row.usage = Some(report.usage);
        row.wall = Some(report.wall);
        row.env_problems = report.env_problems.clone();
        row.warnings = report.warnings.clone();
        row
    }

    /// Whether the task never held its arena: skipped, or refused before binding it (no device
    /// memory for it, or a sizing the chip rejects). Other failures without a chip report
    /// (deadlocks, timeouts, a dead child) happened after the bind.
    pub fn never_bound(&self) -> bool {
        self.error.as_ref().is_some_and(|e| {
            e.skipped
                || [ErrorCode::DeviceMemoryExhausted, ErrorCode::InvalidConfig]
                    .iter()
                    .any(|c| e.code == Some(c.code()))
        }) || self.sizing.is_none()
    }

    /// The row of a task without a chip report: `sizing` is what it tried to bind
    /// ([`TaskSizing::resolve`]); a skipped task reserves nothing.
    pub fn failed(
        task: &str,
        chip: u32,
        sizing: Option<TaskSizing>,
        error: TaskErrorInfo,
    ) -> TaskRow {
        let mut row = TaskRow::new(task, chip, sizing);
        if error.skipped {
            row.reserved_bytes = 0;
        }
        row.error = Some(error);
        row
    }

    /// Every row's sizing and reserved bytes come from here, so rows with and without a chip
    /// report agree.
    fn new(task: &str, chip: u32, sizing: Option<TaskSizing>) -> TaskRow {
        TaskRow {
            task: task.to_string(),
            chip,
            sizing: sizing.map(|s| s.sizing),
            blocks: None,
            arena: None,
            reserved_bytes: sizing.map_or(0, |s| s.footprint.arena),
            high_water_bytes: None,
            usage: None,
            wall: None,
            error: None,
            env_problems: Vec::new(),
            warnings: Vec::new(),
            diagnostics_dir: None,
        }
    }

    /// The `check` cell: `ok`, `FAIL (CODE_NAME)`, `expected FAIL (CODE_NAME)`, `skipped`.
    pub fn check_cell(&self) -> String {
        match &self.error {
            None => "ok".to_string(),
            Some(e) if e.skipped => "skipped".to_string(),
            Some(e) => {
                let fail = match e.code {
                    Some(_) => format!("FAIL ({})", e.name),
                    None => "FAIL".to_string(),
                };
                if e.expected {
                    format!("expected {fail}")
                } else {
                    fail
                }
            }
        }
    }

    /// `ok`, `failed`, `skipped` or `expected_failure` (the JSON `status`).
    pub fn status(&self) -> &'static str {
        match &self.error {
            None => "ok",
            Some(e) if e.skipped => "skipped",
            Some(e) if e.expected => "expected_failure",
            Some(_) => "failed",
        }
    }
}

/// What a case produced.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub rows: Vec<TaskRow>,
    /// `Err(message)` when the results did not match the golden or an expectation failed.
    pub check: Result<(), String>,
    /// Extra lines for the report (e.g. reserved memory per chip).
    pub notes: Vec<String>,
    /// Device memory reserved per chip after the case (`committed_device_memory`).
    pub reserved_per_chip: Vec<u64>,
}

impl CaseResult {
    /// A result with `rows` that passes unless `check` says otherwise.
    pub fn new(rows: Vec<TaskRow>) -> CaseResult {
        CaseResult {
            rows,
            check: Ok(()),
            notes: Vec::new(),
            reserved_per_chip: Vec::new(),
        }
    }

    /// Whether the case passed (the scene decides which task failures are expected).
    pub fn passed(&self) -> bool {
        self.check.is_ok()
    }

    /// Marks the rows that failed with `code` as expected failures; whether there was one.
    pub fn expect_failures(&mut self, code: ErrorCode) -> bool {
        let mut any = false;
        for error in self.rows.iter_mut().filter_map(|r| r.error.as_mut()) {
            if error.code == Some(code.code()) {
                error.expected = true;
                any = true;
            }
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pto_chip::diag::json_text;

    /// Lines `pto scenes --json` printed before the output was typed.
    const OLD_LINES: [&str; 2] = [
        r#"{"scene":"heterogeneous_fanout","level":3,"device_count":[4,4],"num_sub_workers":[0,4],"params":[{"name":"n","min":1,"max":4194304,"default":4096,"fast_default":null,"doc":"elements of each element-wise vector"},{"name":"chip_mib","min":1,"max":65536,"default":2048,"fast_default":null,"doc":"device memory of chip 0 (MiB)"},{"name":"small_chips_mib","min":0,"max":65536,"default":0,"fast_default":null,"doc":"device memory of chips 1-3 (MiB); 0 = chip_mib"},{"name":"expect_exhausted","min":0,"max":1,"default":0,"fast_default":null,"doc":"1: the case passes only if a task fails with DEVICE_MEMORY_EXHAUSTED"}],"labels":[{"name":"attn","family":false,"doc":"the paged-attention job on chip 0"},{"name":"ew","family":true,"doc":"the element-wise jobs ew0, ew1, … over all chips"}]}"#,
        r#"{"scene":"vector_example","level":2,"device_count":[1,1],"num_sub_workers":[0,0],"params":[{"name":"n","min":1,"max":4194304,"default":16384,"fast_default":4096,"doc":"elements of each f32 vector"},{"name":"clusters","min":1,"max":64,"default":8,"fast_default":null,"doc":"clusters of the chip (1 AIC + 2 AIV cores each)"}],"labels":[]}"#,
    ];

    #[test]
    fn lines_printed_before_read_and_print_back_byte_for_byte() {
        for line in OLD_LINES {
            let scene: JsonScene = serde_json::from_str(line).unwrap();
            assert_eq!(json_text(&scene), line);
        }
    }

    #[test]
    fn every_registered_scene_reads_back_equal() {
        for scene in scenes() {
            let json = JsonScene::of(*scene);
            assert_eq!(
                (json.scene.as_str(), json.params.len()),
                (scene.name(), scene.params().len())
            );
            assert_eq!(
                serde_json::from_str::<JsonScene>(&json_text(&json)).unwrap(),
                json
            );
        }
    }
}
