//! The shipped scenes. Each has a TOML file of cases under `scenes/` at the repository root.

mod fanout;
mod l2;
mod l3;

use pto_chip::RunContext;
use pto_node::{FailureKind, RunReport, TaskKind, TaskOutcome};
use pto_types::CallConfig;

use crate::scene::{CaseRun, Scene, TaskErrorInfo, TaskRow, TaskSizing};

/// Every built-in scene.
pub(crate) static ALL: &[&dyn Scene] = &[
    &l2::VectorExample,
    &l2::PagedAttention,
    &l3::PerTaskRuntimeEnv,
    &l3::MultiChipDispatch,
    &fanout::HeterogeneousFanout,
];

/// Rows for the chip tasks of an L3 run report (failed ones included). A task without a chip
/// report shows the sizing its config (`config_of(label)`) resolves to against the case's chip
/// environment, as the chip resolved it before failing.
pub(crate) fn rows_of(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_block::CaseConfig;
    use crate::params::Params;

    /// Every declaration is usable: unique names, `min <= default <= max`, bounds a TOML
    /// integer can write, and the defaults pass the scene's own cross-param check.
    #[test]
    fn every_scene_declares_sane_params() {
        for scene in ALL {
            let specs = scene.params();
            for (i, p) in specs.iter().enumerate() {
                let at = format!("{}.{}", scene.name(), p.name);
                assert!(!specs[..i].iter().any(|q| q.name == p.name), "{at} twice");
                assert!(p.min <= p.default && p.default <= p.max, "{at}");
                assert!(p.fast_default.is_none_or(|f| (p.min..=p.max).contains(&f)));
                assert!(
                    p.max <= i64::MAX as u64,
                    "{at}: max cannot be written in TOML"
                );
                assert!(!p.doc.is_empty(), "{at} has no doc");
            }
            let defaults = Params::defaults(specs);
            scene
                .validate(&defaults, &CaseConfig::default())
                .unwrap_or_else(|e| panic!("{}: defaults fail: {e}", scene.name()));
            let b = scene.worker_bounds();
            assert!(b.device_count.0 >= 1 && b.device_count.1 <= 64);
            assert!(b.num_sub_workers.0 <= b.num_sub_workers.1);
        }
    }

    fn pa_check(text: &str) -> Result<(), String> {
        let scene = &l2::PagedAttention;
        let params = Params::parse(scene.params(), &toml::from_str(text).unwrap())?;
        scene.validate(&params, &CaseConfig::default())
    }

    #[test]
    fn paged_attention_rejects_mismatched_shapes() {
        assert_eq!(
            pa_check("block = 100").unwrap_err(),
            "params.max_model_len = 4096 (default) must be a multiple of params.block = 100"
        );
        assert_eq!(
            pa_check("ctx = 8192").unwrap_err(),
            "params.ctx = 8192 must not exceed params.max_model_len = 4096 (default)"
        );
        let big =
            pa_check("batch = 256\nblock = 1024\nctx = 65536\nmax_model_len = 65536").unwrap_err();
        assert!(big.contains("at most 268435456 bytes"), "{big}");
        let tasks = pa_check("block = 1\nctx = 4096").unwrap_err();
        assert!(
            tasks.contains("submit 16385 tasks; at most 16384"),
            "{tasks}"
        );
        pa_check("batch = 32\nctx = 4096\nmax_model_len = 32768").unwrap();
    }
}
