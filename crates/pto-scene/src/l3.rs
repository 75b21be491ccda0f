//! Running an L3 orchestration for a scene: a Worker built for the case
//! ([`CaseRun::worker_builder`]), the run turned into one row per chip task with the sizing
//! each task bound or tried to bind ([`run_l3`], [`rows_of`]), and the check that a task
//! bound exactly what its config asked ([`check_task_sizing`]).

use pto_chip::{ChipSpec, RunContext};
use pto_node::{FailureKind, HostBuffer, RunReport, TaskKind, TaskOutcome, Worker, WorkerRunError};
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{CallConfig, DType, Resource, TaskArgs, Tensor};

use crate::scene::{CaseResult, CaseRun, TaskErrorInfo, TaskRow, TaskSizing};

/// A small chip (1 cluster, 1 scheduler) so L3 scenes stay light on a 2-core host.
pub fn small_chip(device_memory_bytes: u64) -> ChipSpec {
    ChipSpec {
        clusters: 1,
        max_aicpu_threads: 2,
        device_memory_bytes,
        ..ChipSpec::default()
    }
}

/// A worker buffer of `n` f32 set to `value`, and a 1-D tensor over it.
pub fn f32_buffer(w: &Worker, n: usize, value: f32) -> anyhow::Result<(HostBuffer, Tensor)> {
    let len = u32::try_from(n)?;
    let buf = w.create_buffer(n * 4)?;
    buf.write_from(0, &vec![value; n])?;
    let t = buf.tensor(&[len], DType::F32)?;
    Ok((buf, t))
}

/// Runs an L3 orchestration and turns its report (or failure) into a case result;
/// `config_of(label)` is the config the orchestration gave the task labelled `label` (rows of
/// tasks without a chip report show what it resolves to).
pub fn run_l3(
    w: &Worker,
    case: &CaseRun<'_>,
    config_of: &dyn Fn(&str) -> CallConfig,
    f: impl FnOnce(
        &mut pto_node::Orchestrator<'_>,
        &TaskArgs,
        &CallConfig,
    ) -> Result<(), pto_node::OrchError>,
) -> anyhow::Result<(CaseResult, Option<RunReport>)> {
    match w.run(f, TaskArgs::new(), case.base.clone()) {
        Ok(report) => Ok((
            CaseResult::new(rows_of(&report, case, config_of)),
            Some(report),
        )),
        Err(WorkerRunError::Failed(e)) => {
            let mut result = CaseResult::new(rows_of(&e.report, case, config_of));
            result.check = Err(e.to_string());
            Ok((result, None))
        }
        Err(e) => Err(e.into()),
    }
}

/// Each overridden entry of `cfg` must be bound as asked, with source `call_config`.
pub fn check_task_sizing(report: &RunReport, label: &str, cfg: &CallConfig) -> Result<(), String> {
    let task = report
        .task(label)
        .ok_or_else(|| format!("no task labelled {label}"))?;
    let chip = task
        .chip_report()
        .ok_or_else(|| format!("task {label} has no chip report"))?;
    for resource in Resource::ALL {
        let asked = cfg.runtime_env.get(resource);
        for (ring, &want) in asked.iter().enumerate() {
            let got = chip.sizing.at(resource, ring);
            let ok = if want == 0 {
                got.source != SizeSource::CallConfig
            } else {
                got.value == want && got.source == SizeSource::CallConfig
            };
            if !ok {
                return Err(format!(
                    "task {label}: {}[{ring}] bound {} ({}), its config asked for {}",
                    resource.config_path(),
                    got.value,
                    got.source,
                    want
                ));
            }
        }
    }
    Ok(())
}

/// Rows for the chip tasks of an L3 run report (failed ones included). A task without a chip
/// report shows the sizing its config (`config_of(label)`) resolves to against the case's chip
/// environment, as the chip resolved it before failing.
pub fn rows_of(
    report: &RunReport,
    case: &CaseRun<'_>,
    config_of: &dyn Fn(&str) -> CallConfig,
) -> Vec<TaskRow> {
    let env = case.chip_env();
    let problems: Vec<String> = env.problems.iter().map(|p| p.to_string()).collect();
    let mut rows = Vec::new();
    for task in report
        .tasks
        .iter()
        .filter(|t| t.kind == TaskKind::NextLevel)
    {
        let label = task
            .label
            .clone()
            .unwrap_or_else(|| format!("task{}", task.id.index));
        let dir = |chip: u32| {
            case.diagnostics_dir(&RunContext {
                chip,
                label: task.label.clone(),
                l3: Some((task.id.run_id, u64::from(task.id.index))),
            })
        };
        for member in &task.members {
            if let Some(chip) = &member.chip {
                let mut row = TaskRow::from_report(&label, chip);
                row.diagnostics_dir = dir(chip.chip);
                rows.push(row);
            }
        }
        let TaskOutcome::Failed(f) = &task.outcome else {
            continue;
        };
        if task.members.iter().any(|m| m.chip.is_some()) {
            continue;
        }
        let mut error = TaskErrorInfo::new(f.code, f.message.clone());
        error.skipped = f.kind == FailureKind::Skipped;
        let chip = worker_index(&f.worker);
        let sizing = TaskSizing::resolve(&config_of(&label), &env);
        let mut row = TaskRow::failed(&label, chip, sizing, error);
        row.wall = task
            .members
            .iter()
            .find(|m| !m.worker.is_empty())
            .map(|m| m.exec_time);
        row.env_problems = problems.clone();
        row.diagnostics_dir = dir(chip).filter(|_| f.kind != FailureKind::Skipped);
        rows.push(row);
    }
    rows
}

/// `chip[2]` → 2.
fn worker_index(worker: &str) -> u32 {
    worker
        .split(['[', ']'])
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
