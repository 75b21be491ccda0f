//! Run diagnostics: scope stats, the task DAG dump and the swimlane trace (CHIP_RUNTIME.md §7,
//! §8; RING_CONFIG.md §3 "Where diagnostics go").
//!
//! Recording is opt-in per run through `CallConfig` (`enable_scope_stats`, `enable_dep_gen`,
//! `enable_chip_swimlane`); nothing is recorded otherwise. Files are written after the run,
//! also when it failed, into the run's own directory ([`diagnostics_dir`]), so tasks never
//! overwrite each other's files.
//!
//! Each file format is typed records with serde's derives, a `SCHEMA` and `VERSION`, module
//! docs that describe it once, the chip's writer and a reader: [`scope_stats`], [`deps`]
//! (`deps.json`) and [`trace`] (`chip_swimlane.json`). The JSON outputs of the crates above
//! follow the same shape and print through [`json_line`] / [`json_text`].

pub mod deps;
pub mod scope_stats;
pub mod trace;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::Error as _;

use crate::worker::RunContext;

/// `record` as compact JSON: how every pto JSON output is printed. The records hold strings,
/// numbers, booleans and nulls under string keys, which serde_json always serializes.
pub fn json_text(record: &impl Serialize) -> String {
    serde_json::to_string(record).expect("a pto JSON record serializes")
}

/// [`json_text`] and a newline: one line of a JSON-lines output.
pub fn json_line(record: &impl Serialize) -> String {
    let mut line = json_text(record);
    line.push('\n');
    line
}

/// `Ok` when a file says it is `schema` at `version`, the only version each reader reads.
pub(crate) fn check_header(
    found: (&str, u64),
    schema: &str,
    version: u64,
) -> Result<(), serde_json::Error> {
    if found.0 != schema {
        let text = format!("schema: expected {schema:?}, found {:?}", found.0);
        return Err(serde_json::Error::custom(text));
    }
    if found.1 != version {
        let text = format!(
            "version: unsupported version {} (this pto reads version {version})",
            found.1
        );
        return Err(serde_json::Error::custom(text));
    }
    Ok(())
}

/// The directory of one run's diagnostics: `<prefix>/` for an L2-direct run,
/// `<prefix>/chip<c>/run<r>_task<t>[_<label>]/` for a task dispatched by an L3.
pub fn diagnostics_dir(prefix: &Path, ctx: &RunContext) -> PathBuf {
    match ctx.l3 {
        None => prefix.to_path_buf(),
        Some((run, task)) => {
            let mut leaf = format!("run{run}_task{task}");
            if let Some(label) = &ctx.label {
                leaf.push('_');
                leaf.push_str(label);
            }
            prefix.join(format!("chip{}", ctx.chip)).join(leaf)
        }
    }
}

/// Writes `contents` to `dir/sub/name`, creating the directories.
pub(crate) fn write_file(
    dir: &Path,
    sub: &str,
    name: &str,
    contents: &str,
) -> std::io::Result<PathBuf> {
    let folder = dir.join(sub);
    std::fs::create_dir_all(&folder)?;
    let path = folder.join(name);
    std::fs::write(&path, contents)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l2_direct_runs_write_under_the_prefix_itself() {
        let ctx = RunContext::default();
        assert_eq!(
            diagnostics_dir(Path::new("out"), &ctx),
            PathBuf::from("out")
        );
    }

    #[test]
    fn l3_tasks_get_their_own_directory() {
        let ctx = RunContext {
            chip: 2,
            label: Some("small".into()),
            l3: Some((3, 7)),
        };
        assert_eq!(
            diagnostics_dir(Path::new("out"), &ctx),
            PathBuf::from("out/chip2/run3_task7_small")
        );
        let unlabelled = RunContext { label: None, ..ctx };
        assert_eq!(
            diagnostics_dir(Path::new("out"), &unlabelled),
            PathBuf::from("out/chip2/run3_task7")
        );
    }
}
