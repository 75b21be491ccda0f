//! The shipped scenes. Each has a TOML file of cases under `scenes/` at the repository root.

mod fanout;
mod l2;
mod l3;

use pto_node::{RunReport, TaskKind, TaskOutcome};

use crate::scene::{Scene, TaskErrorInfo, TaskRow};

/// Every built-in scene.
pub(crate) static ALL: &[&dyn Scene] = &[
    &l2::VectorExample,
    &l2::PagedAttention,
    &l3::PerTaskRuntimeEnv,
    &l3::MultiChipDispatch,
    &fanout::HeterogeneousFanout,
];

/// Rows for the chip tasks of an L3 run report (failed ones included).
pub(crate) fn rows_of(report: &RunReport) -> Vec<TaskRow> {
    let mut rows = Vec::new();
    for task in &report.tasks {
        let label = task
            .label
            .clone()
            .unwrap_or_else(|| format!("task{}", task.id.index));
        for member in &task.members {
            if let Some(chip) = &member.chip {
                rows.push(TaskRow::from_report(&label, chip));
            }
        }
        if let TaskOutcome::Failed(f) = &task.outcome {
            let chip_task = task.kind == TaskKind::NextLevel;
            if chip_task && task.members.iter().all(|m| m.chip.is_none()) {
                rows.push(TaskRow {
                    task: label.clone(),
                    chip: worker_index(&f.worker),
                    sizing: None,
                    arena: None,
                    reserved_bytes: 0,
                    high_water_bytes: 0,
                    wall: std::time::Duration::ZERO,
                    error: Some(TaskErrorInfo {
                        code: f.code.map(|c| c.code()),
                        name: f
                            .code
                            .map_or("FAILED".to_string(), |c| c.name().to_string()),
                        message: f.message.clone(),
                    }),
                });
            }
        }
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
