//! `pto config resolve` (RING_CONFIG.md §8).

use std::ffi::OsString;

use pto_scene::config_block::{SceneLevel, parse_config_block};
use pto_scene::sizing_report::{SizingReport, SizingReportError, SizingRequest};
use pto_types::ring_config::env::EnvSource;
use pto_types::{CallConfig, RING_COUNT, Resource, RingValue, RuntimeEnv, TaskOverrides};

use crate::cli::ResolveArgs;
use crate::{InputError, Outcome};

pub(crate) fn run(args: &ResolveArgs) -> anyhow::Result<Outcome> {
    let config = call_config(args)?;
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
    let report = SizingReport::build(&request).map_err(|e| match e {
        SizingReportError::InvalidConfig(_)
        | SizingReportError::Env(_)
        | SizingReportError::Sizing(_) => InputError(e.to_string()),
    })?;
    if args.json {
        crate::print_out(&format!("{}\n", report.to_json()));
    } else {
        crate::print_out(&report.render_table());
    }
    match report.device_memory {
        Some((_, false)) => Ok(Outcome::CheckFailed),
        _ => Ok(Outcome::Success),
    }
}

/// The config file (if any) as the base, with the sizing flags' non-zero entries on top.
fn call_config(args: &ResolveArgs) -> anyhow::Result<CallConfig> {
    let mut base = CallConfig::default();
    if let Some(path) = &args.config {
        // The same guard as scene files: a regular file of at most 16 MiB, never a FIFO.
        let text = pto_scene::file::read_text(path, pto_scene::file::MAX_FILE_BYTES)
            .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
        let table: toml::Table = toml::from_str(&text)
            .map_err(|e| InputError(format!("{}: {}", path.display(), e.message())))?;
        let block = parse_config_block(&toml::Value::Table(table), "config", SceneLevel::L3)
            .map_err(|e| InputError(format!("{}: {e}", path.display())))?;
        base = block.base_call_config();
        if let Some(label) = &args.label {
            let overrides = block.tasks.get(label).ok_or_else(|| {
                let known: Vec<&str> = block.tasks.keys().map(String::as_str).collect();
                InputError(format!(
                    "{}: no tasks.{label} in the file (labels: {})",
                    path.display(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ))
            })?;
            base = base
                .derive(overrides)
                .map_err(|e| InputError(format!("{}: tasks.{label}: {e}", path.display())))?;
        }
    }
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
        aicpu_thread_num: None,
        runtime_env: flags,
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
