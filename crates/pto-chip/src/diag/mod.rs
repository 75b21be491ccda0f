//! Run diagnostics: scope stats, the task DAG dump and the swimlane trace (CHIP_RUNTIME.md §7,
//! §8; RING_CONFIG.md §3 "Where diagnostics go").
//!
//! Recording is opt-in per run through `CallConfig` (`enable_scope_stats`, `enable_dep_gen`,
//! `enable_chip_swimlane`); nothing is recorded otherwise. Files are written after the run,
//! also when it failed, into the run's own directory ([`diagnostics_dir`]), so tasks never
//! overwrite each other's files.

pub(crate) mod deps;
pub mod scope_stats;
pub(crate) mod trace;

use std::path::{Path, PathBuf};

use crate::worker::RunContext;

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
