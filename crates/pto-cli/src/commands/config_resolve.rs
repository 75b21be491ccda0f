//! `pto config resolve` (RING_CONFIG.md §8).

use std::ffi::OsString;

use pto_chip::diag::json_line;
use pto_scene::SceneFile;
use pto_scene::config_block::{SceneLevel, parse_config_block};
use pto_scene::params::{cut, key_list};
use pto_sizing::report::{SizingReport, SizingReportError, SizingRequest};
use pto_types::ring_config::env::EnvSource;
use pto_types::{CallConfig, RING_COUNT, Resource, RingValue, RuntimeEnv, TaskOverrides};

use crate::args::ResolveArgs;
use crate::{InputError, Outcome};

pub(crate) fn run(args: &ResolveArgs) -> anyhow::Result<Outcome> {
    let block = config_block(args)?;
    let config = call_config(args, block.as_ref())?;
    let env = if args.env.is_empty() {
        EnvSource::process()
    } else {
        EnvSource::from_pairs(parse_env_pairs(&args.env)?)
    };
    let request = SizingRequest {
        config,
        env,
        strict_env: args.strict_env,
        device_memory: args.device_memory,
    };
    let mut report = SizingReport::build(&request).map_err(|e| match e {
        SizingReportError::InvalidConfig(_)
        | SizingReportError::Env(_)
        | SizingReportError::Sizing(_) => InputError(e.to_string()),
    })?;
    if let Some(block) = &block {
        let blocks = block.blocks_for(args.label.as_deref().unwrap_or(""), &report.sizing);
        report = report.with_blocks(blocks);
    }
    if args.json {
        crate::print_out(&json_line(&report.to_json()));
    } else {
        crate::print_out(&report.render_table());
    }
    match report.device_memory {
        Some((_, false)) => Ok(Outcome::CheckFailed),
        _ => Ok(Outcome::Success),
    }
}

/// The config block `--config` or `--scene`/`--case` names, if any.
fn config_block(args: &ResolveArgs) -> anyhow::Result<Option<pto_scene::CaseConfig>> {
    Ok(match (&args.config, &args.scene, &args.case) {
        (Some(path), _, _) => Some(config_file_block(path)?),
        (None, Some(path), Some(case)) => {
            Some(scene_case_block(path, case, args.label.as_deref())?)
        }
        _ if args.label.is_some() => {
            return Err(InputError("--label needs --config or --scene".to_string()).into());
        }
        _ => None,
    })
}

/// The base (a config file, or a scene case) with the task's label blocks layered on, then
/// the sizing flags' non-zero entries on top.
fn call_config(
    args: &ResolveArgs,
    block: Option<&pto_scene::CaseConfig>,
) -> anyhow::Result<CallConfig> {
    let base = match block {
        Some(block) => with_label(block, args.label.as_deref()).map_err(|e| {
            let at = args.config.as_ref().or(args.scene.as_ref());
            let case = args.case.as_deref().filter(|_| args.config.is_none());
            let what = case.map_or(String::new(), |c| format!(" case {c:?}:"));
            InputError(format!(
                "{}:{what} {e}",
                at.map_or(String::new(), |p| p.display().to_string())
            ))
        })?,
        None => CallConfig::default(),
    };
    let mut flags = RuntimeEnv::default();
    let sizing_flags = [
        (Resource::TaskWindow, "--task-window", &args.task_window),
        (Resource::Heap, "--heap", &args.heap),
        (Resource::DepPool, "--dep-pool", &args.dep_pool),
    ];
    for (resource, flag, value) in sizing_flags {
        if let Some(text) = value {
            flags.set(resource, parse_ring_flag(flag, text)?);
        }
    }
    let overrides = TaskOverrides {
        runtime_env: flags,
        ..TaskOverrides::default()
    };
    base.derive(&overrides)
        .map_err(|e| InputError(format!("invalid config: {e}")).into())
}

/// `N` (every ring) or `A,B,C,D` (one per ring), decimal, 0 = unset.
fn parse_ring_flag(flag: &str, text: &str) -> Result<RingValue, InputError> {
    let pieces: Vec<&str> = text.split(',').map(str::trim).collect();
    let mut values = Vec::with_capacity(pieces.len());
    for piece in &pieces {
        let value = piece.parse::<u64>().map_err(|_| {
            InputError(format!(
                "{flag} {text:?}: {piece:?} is not a non-negative decimal integer"
            ))
        })?;
        values.push(value);
    }
    match values.len() {
        1 => Ok(RingValue::Broadcast(values[0])),
        RING_COUNT => Ok(RingValue::PerRing([
            values[0], values[1], values[2], values[3],
        ])),
        n => Err(InputError(format!(
            "{flag} {text:?}: give one value or exactly 4 (one per ring), got {n}"
        ))),
    }
}

fn parse_env_pairs(pairs: &[String]) -> Result<Vec<(OsString, OsString)>, InputError> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key.into(), value.into())),
            _ => Err(InputError(format!("--env {pair:?}: expected KEY=VALUE"))),
        })
        .collect()
}

/// The config block of a `--config` file.
fn config_file_block(path: &std::path::Path) -> Result<pto_scene::CaseConfig, InputError> {
    // The same guard as scene files: a regular file of at most 16 MiB, never a FIFO.
    let text = pto_scene::file::read_text(path, pto_scene::file::MAX_FILE_BYTES)
        .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| InputError(format!("{}: {}", path.display(), e.message())))?;
    parse_config_block(&toml::Value::Table(table), "config", SceneLevel::L3)
        .map_err(|e| InputError(format!("{}: {e}", path.display())))
}

/// The config block of case `case` of a scene file (`label` checked against the scene's).
fn scene_case_block(
    path: &std::path::Path,
    case: &str,
    label: Option<&str>,
) -> Result<pto_scene::CaseConfig, InputError> {
    let file = SceneFile::load(path).map_err(|e| InputError(e.to_string()))?;
    let Some(c) = file.cases.iter().find(|c| c.name == case) else {
        return Err(InputError(format!(
            "{}: no case named {:?} (cases: {})",
            path.display(),
            cut(case),
            key_list(file.cases.iter().map(|c| c.name.as_str()))
        )));
    };
    if let Some(label) = label {
        pto_scene::labels::check_key(file.scene.name(), label, file.scene.labels())
            .map_err(|e| InputError(format!("{}: --label {}: {e}", path.display(), cut(label))))?;
    }
    Ok(c.config.clone())
}

/// `block`'s base config with the `tasks` blocks that apply to `label` layered on (none
/// applies: the base itself, as for a task of that label in a run).
fn with_label(block: &pto_scene::CaseConfig, label: Option<&str>) -> Result<CallConfig, String> {
    let Some(label) = label else {
        return Ok(block.base_call_config());
    };
    if block.task_blocks(label).is_empty() && !block.tasks.is_empty() {
        return Err(format!(
            "no tasks.{} applies to label {:?} (keys: {})",
            cut(label),
            cut(label),
            key_list(block.tasks.keys().map(String::as_str))
        ));
    }
    block.config_for(label).map_err(|e| format!("tasks: {e}"))
}
