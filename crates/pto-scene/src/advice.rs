//! Advice for scene cases (issue 11): the scope stats of many runs, grouped by the
//! `config.tasks` key that sizes them, merged into one sizing per key
//! (`pto_sizing::advise::advise_all`), and written back as a case of the scene file.
//!
//! Grouping: without a scene, by each run's own label (runs without one size the case's
//! `runtime_env`); with a scene, a level-2 scene's runs all size `runtime_env`, and a level-3
//! scene's runs size the most specific block the case has for their label
//! ([`crate::labels::advice_key`]: `ew3` → `tasks.ew3` when the case has it, else `tasks.ew`
//! when `ew` is a family). The advised case is the original case (params, worker
//! counts, other overrides kept) with each advised key's `runtime_env` replaced, named
//! `<case>_advised`; [`write_case`] replaces a case of that name or appends it, keeping the
//! rest of the file byte for byte.
//!
//! `pto advise --format json` prints one line per key, [`JsonKeyAdvice`]: the key's
//! [`JsonAdvice`] with `label` and `runs` after it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pto_sizing::advise::{Advice, Headroom, JsonAdvice, ScopeStats, advise_all};
use pto_types::{Resource, RuntimeEnv};
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use crate::config_block::CaseConfig;
use crate::config_block::SceneLevel;
use crate::file::{MAX_FILE_BYTES, SceneFile, read_text};
use crate::labels::advice_key;
use crate::scene::Scene;

/// The file name a run's scope stats are written to.
pub const STATS_FILE: &str = "scope_stats.jsonl";

/// One run's scope stats and where they came from.
#[derive(Clone, Debug)]
pub struct StatsRun {
    pub path: PathBuf,
    pub stats: ScopeStats,
}

/// Every `scope_stats.jsonl` under `paths`: files as given, directories searched recursively;
/// sorted, so the result does not depend on directory order.
pub fn find_stats(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if meta.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(format!(
            "no {STATS_FILE} under {} (run with --enable-scope-stats --output DIR)",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let kind = entry
            .file_type()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        if kind.is_dir() {
            walk(&path, out)?;
        } else if kind.is_file() && entry.file_name() == STATS_FILE {
            out.push(path);
        }
    }
    Ok(())
}

/// Reads and parses every file; an error names the file, the line and the field.
pub fn load_runs(files: &[PathBuf]) -> Result<Vec<StatsRun>, String> {
    files
        .iter()
        .map(|path| {
            let text =
                read_text(path, MAX_FILE_BYTES).map_err(|e| format!("{}: {e}", path.display()))?;
            let stats = ScopeStats::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(StatsRun {
                path: path.clone(),
                stats,
            })
        })
        .collect()
}

/// The advice for one `config.tasks` key (`None`: the case's own `runtime_env`).
#[derive(Clone, Debug)]
pub struct KeyAdvice {
    pub key: Option<String>,
    pub runs: usize,
    pub advice: Advice,
}

/// One line of `pto advise --format json`: one key's advice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonKeyAdvice {
    /// `runtime_env` and `rings`, first.
    #[serde(flatten)]
    pub advice: JsonAdvice,
    /// The runs' label or, with a scene, the `config.tasks` key that sizes them; null for
    /// runs that size the case's `runtime_env`.
    pub label: Option<String>,
    /// How many runs were merged.
    pub runs: usize,
}

impl KeyAdvice {
    /// The line `pto advise --format json` prints for this key.
    pub fn to_json(&self) -> JsonKeyAdvice {
        JsonKeyAdvice {
            advice: self.advice.to_json(),
            label: self.key.clone(),
            runs: self.runs,
        }
    }
}

/// What the advice is for: the scene whose runs these are and, when known, the case whose
/// `config.tasks` blocks they ran with.
#[derive(Clone, Copy, Default)]
pub struct AdviceTarget<'a> {
    pub scene: Option<&'a dyn Scene>,
    pub case: Option<&'a CaseConfig>,
}

/// The key that sizes a run labelled `label` ([`advice_key`]; `None`: the case's
/// `runtime_env`).
fn key_of(label: Option<&str>, target: AdviceTarget<'_>) -> Option<String> {
    let keys: Vec<&String> = target
        .case
        .map(|c| c.tasks.keys().collect())
        .unwrap_or_default();
    match target.scene {
        Some(s) if s.level() == SceneLevel::L2 => None,
        Some(s) => label.map(|l| advice_key(l, keys.iter().copied(), s.labels()).to_string()),
        None => label.map(str::to_string),
    }
}

/// One merged advice per key, the case's own `runtime_env` first, then keys in order. Runs
/// are grouped by the block that sized them, so one member's larger peaks never size its
/// family, and a group's advice never exceeds the capacity its successful runs had.
pub fn advise_by_key(
    runs: &[StatsRun],
    target: AdviceTarget<'_>,
    headroom: Headroom,
) -> Vec<KeyAdvice> {
    let mut groups: BTreeMap<Option<String>, Vec<ScopeStats>> = BTreeMap::new();
    for r in runs {
        groups
            .entry(key_of(r.stats.label.as_deref(), target))
            .or_default()
            .push(r.stats.clone());
    }
    groups
        .into_iter()
        .map(|(key, stats)| KeyAdvice {
            key,
            runs: stats.len(),
            advice: advise_all(&stats, headroom),
        })
        .collect()
}

/// `runtime_env` as a TOML table of three 4-entry lists.
pub fn runtime_env_table(env: &RuntimeEnv) -> Table {
    let mut t = Table::new();
    for resource in Resource::ALL {
        let values = env
            .get(resource)
            .map(|v| Value::Integer(v.min(i64::MAX as u64) as i64));
        t.insert(resource.field().to_string(), Value::Array(values.to_vec()));
    }
    t
}

/// The block `pto advise` prints without a scene: one group as `[runtime_env]` (what one run
/// needs), several as `[runtime_env]` for unlabelled runs plus `[tasks.<label>.runtime_env]`
/// per label — the format `pto config resolve --config [--label L]` reads.
pub fn render_toml(groups: &[KeyAdvice]) -> String {
    let mut doc = Table::new();
    let single = groups.len() == 1;
    let mut tasks = Table::new();
    for g in groups {
        let env = Value::Table(runtime_env_table(&g.advice.runtime_env()));
        match (&g.key, single) {
            (Some(key), false) => {
                let mut t = Table::new();
                t.insert("runtime_env".into(), env);
                tasks.insert(key.clone(), Value::Table(t));
            }
            _ => {
                doc.insert("runtime_env".into(), env);
            }
        }
    }
    if !tasks.is_empty() {
        doc.insert("tasks".into(), Value::Table(tasks));
    }
    toml::to_string(&doc).unwrap_or_default()
}

/// The advised case of `file`'s case `case`, as a TOML table named `<case>_advised`.
/// `text` is the file's text (the caller has read it once already).
pub fn advised_case(
    file: &SceneFile,
    text: &str,
    case: &str,
    groups: &[KeyAdvice],
) -> Result<Table, String> {
    let doc: Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let original = doc
        .get("cases")
        .and_then(Value::as_array)
        .and_then(|cases| {
            cases
                .iter()
                .filter_map(Value::as_table)
                .find(|c| c.get("name").and_then(Value::as_str) == Some(case))
        })
        .ok_or_else(|| format!("{}: no case named {case:?}", file.path.display()))?;
    let mut out = original.clone();
    out.insert("name".into(), Value::String(advised_name(case)));
    let config = out
        .entry("config")
        .or_insert_with(|| Value::Table(Table::new()));
    let config = config
        .as_table_mut()
        .ok_or("config is not a table (the file was checked when loaded)")?;
    for g in groups {
        let env = Value::Table(runtime_env_table(&g.advice.runtime_env()));
        match &g.key {
            None => {
                config.insert("runtime_env".into(), env);
            }
            Some(key) => {
                let tasks = config
                    .entry("tasks")
                    .or_insert_with(|| Value::Table(Table::new()));
                let tasks = tasks.as_table_mut().ok_or("config.tasks is not a table")?;
                let entry = tasks
                    .entry(key.clone())
                    .or_insert_with(|| Value::Table(Table::new()));
                entry
                    .as_table_mut()
                    .ok_or("config.tasks.<label> is not a table")?
                    .insert("runtime_env".into(), env);
            }
        }
    }
    Ok(out)
}

/// `<case>_advised` (the case name rule leaves room: names are at most 64 characters, so a
/// long name is shortened first).
pub fn advised_name(case: &str) -> String {
    let stem: String = case.chars().take(64 - "_advised".len()).collect();
    format!("{stem}_advised")
}

/// The case as a `[[cases]]` block, ready to append to a scene file.
pub fn case_toml(case: &Table) -> String {
    let mut doc = Table::new();
    doc.insert(
        "cases".into(),
        Value::Array(vec![Value::Table(case.clone())]),
    );
    toml::to_string(&doc).unwrap_or_default()
}

/// The scene-file text `text` with `case` in it: a case of the same name is removed, then
/// `case` is appended as a `[[cases]]` block; the rest (comments, order, formatting) is kept.
pub fn with_case(text: &str, case: &Table) -> Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| e.to_string())?;
    let name = case.get("name").and_then(Value::as_str).unwrap_or_default();
    if let Some(cases) = doc
        .get_mut("cases")
        .and_then(|c| c.as_array_of_tables_mut())
    {
        cases.retain(|c| c.get("name").and_then(|n| n.as_str()) != Some(name));
    }
    let mut out = doc.to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&case_toml(case));
    Ok(out)
}

/// Puts `case` into the scene file at `path` ([`with_case`]).
pub fn write_case(path: &Path, case: &Table) -> Result<(), String> {
    let at = |e: String| format!("{}: {e}", path.display());
    let text = read_text(path, MAX_FILE_BYTES).map_err(at)?;
    let out = with_case(&text, case).map_err(at)?;
    std::fs::write(path, out).map_err(|e| at(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pto_chip::diag::json_text;

    /// A line `pto advise --format json` printed before the output was typed.
    const OLD_LINE: &str = r#"{"runtime_env":{"ring_task_window":[16384,8,16384,16384],"ring_heap":[268435456,268435456,268435456,268435456],"ring_dep_pool":[16384,16384,16384,16384]},"rings":[{"ring":0,"end_records":1,"peaks":{"task_window_peak":1,"heap_peak":4096,"heap_largest_alloc":4096,"dep_pool_peak":0,"spill_peak":0},"task_window":{"demand":1,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0},"heap":{"demand":8192,"capacity":268435456,"source":"default","recommended":268435456,"lower_bound":false,"bytes_delta":0},"dep_pool":{"demand":0,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0}},{"ring":1,"end_records":1,"peaks":{"task_window_peak":3,"heap_peak":12288,"heap_largest_alloc":4096,"dep_pool_peak":4,"spill_peak":0},"task_window":{"demand":3,"capacity":4,"source":"call_config","recommended":8,"lower_bound":true,"bytes_delta":19840},"heap":{"demand":16384,"capacity":268435456,"source":"default","recommended":268435456,"lower_bound":false,"bytes_delta":0},"dep_pool":{"demand":4,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0}},{"ring":2,"end_records":0,"peaks":null,"task_window":{"demand":null,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0},"heap":{"demand":null,"capacity":268435456,"source":"default","recommended":268435456,"lower_bound":false,"bytes_delta":0},"dep_pool":{"demand":null,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0}},{"ring":3,"end_records":0,"peaks":null,"task_window":{"demand":null,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0},"heap":{"demand":null,"capacity":268435456,"source":"default","recommended":268435456,"lower_bound":false,"bytes_delta":0},"dep_pool":{"demand":null,"capacity":16384,"source":"default","recommended":16384,"lower_bound":false,"bytes_delta":0}}],"label":"vector_example","runs":1}"#;

    #[test]
    fn a_line_printed_before_reads_and_prints_back_byte_for_byte() {
        let line: JsonKeyAdvice = serde_json::from_str(OLD_LINE).unwrap();
        assert_eq!(
            (line.label.as_deref(), line.runs),
            (Some("vector_example"), 1)
        );
        assert!(line.advice.rings[1].task_window.lower_bound);
        assert_eq!(json_text(&line), OLD_LINE);
    }

    #[test]
    fn the_case_runtime_env_is_a_null_label() {
        let mut line: JsonKeyAdvice = serde_json::from_str(OLD_LINE).unwrap();
        line.label = None;
        let text = json_text(&line);
        assert!(text.ends_with(r#"}],"label":null,"runs":1}"#), "{text}");
        assert_eq!(serde_json::from_str::<JsonKeyAdvice>(&text).unwrap(), line);
    }
}
