//! The `config` block of a scene case, loaded strictly (RING_CONFIG.md §11, checkpoint C4).
//!
//! Every key is checked: unknown keys, wrong types, wrong list lengths, negative values and
//! out-of-range values are errors that name the key path, so a typo such as `ring_heep` can
//! never silently fall back to a default. The same loader reads `pto config resolve --config`
//! files and the `[runtime_env]` block printed by `pto advise`.

use std::collections::BTreeMap;
use std::fmt;

use pto_sizing::{Block, SizingBlocks};
use pto_types::ring_config::PLATFORM_MAX_AICPU_THREADS;
use pto_types::ring_config::resolve::{ResolvedSizing, SizeSource};
use pto_types::{
    CallConfig, ConfigError, RING_COUNT, Resource, RingValue, RuntimeEnv, TaskOverrides,
};
use toml::{Table, Value};

use crate::params::{cut, key_list};

/// Whether a scene runs chip callables directly (level 2), an L3 orchestration (level 3) or an
/// L4 orchestration over L3 workers, e.g. remote ones (level 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SceneLevel {
    L2,
    L3,
    L4,
}

impl SceneLevel {
    /// 2, 3 or 4: the `level` of a scene file.
    pub fn number(self) -> u32 {
        match self {
            SceneLevel::L2 => 2,
            SceneLevel::L3 => 3,
            SceneLevel::L4 => 4,
        }
    }

    /// Keys allowed directly in `config` at this level, sorted.
    pub fn allowed_config_keys(self) -> &'static [&'static str] {
        match self {
            SceneLevel::L2 => &[
                "aicpu_thread_num",
                "device_count",
                "num_sub_workers",
                "runtime_env",
                "track_war",
            ],
            SceneLevel::L3 | SceneLevel::L4 => &[
                "aicpu_thread_num",
                "device_count",
                "num_sub_workers",
                "runtime_env",
                "tasks",
                "track_war",
            ],
        }
    }
}

/// Keys allowed in a `runtime_env` table, sorted.
pub const RUNTIME_ENV_KEYS: [&str; 3] = ["ring_dep_pool", "ring_heap", "ring_task_window"];
/// Keys allowed in a `tasks.<label>` table, sorted.
pub const TASK_KEYS: [&str; 3] = ["aicpu_thread_num", "runtime_env", "track_war"];
/// Most chips a case may ask for (`config.device_count`); a scene may allow fewer.
pub const MAX_DEVICE_COUNT: u32 = 64;
/// Most sub workers a case may ask for (`config.num_sub_workers`); a scene may allow fewer.
pub const MAX_SUB_WORKERS: u32 = 64;
/// Most labels under `config.tasks`: more than any orchestration requests.
pub const MAX_TASK_LABELS: usize = 256;

/// A loaded and validated `config` block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaseConfig {
    /// 0 = auto.
    pub aicpu_thread_num: u32,
    /// Chips the case needs, when given.
    pub device_count: Option<u32>,
    /// Sub workers the case needs, when given.
    pub num_sub_workers: Option<u32>,
    /// Base ring sizing of every L2 task of the case.
    pub runtime_env: RuntimeEnv,
    /// Per-label overrides (level 3 only), applied with [`CallConfig::derive`].
    pub tasks: BTreeMap<String, TaskOverrides>,
    /// Write-after-read tracking of every L2 task of the case (`CallConfig::track_war`).
    pub track_war: bool,
}

impl CaseConfig {
    /// The base `CallConfig` of the case, without diagnostics (those come from the command line).
    pub fn base_call_config(&self) -> CallConfig {
        CallConfig {
            aicpu_thread_num: self.aicpu_thread_num,
            runtime_env: self.runtime_env,
            track_war: self.track_war,
            ..CallConfig::default()
        }
    }

    /// The `config.tasks` blocks that apply to a task labelled `label`, least specific first
    /// (the family's, then the task's own: [`crate::labels::applicable_keys`]).
    pub fn task_blocks(&self, label: &str) -> Vec<(Block, &TaskOverrides)> {
        crate::labels::applicable_keys(label, self.tasks.keys())
            .into_iter()
            .map(|key| {
                let block = match key == label {
                    true => Block::Task(key.to_string()),
                    false => Block::Family(key.to_string()),
                };
                (block, &self.tasks[key])
            })
            .collect()
    }

    /// `base` with every block that applies to `label` layered on it, least specific first:
    /// each sets only its non-zero entries (and `aicpu_thread_num` when given).
    pub fn layered(&self, base: &CallConfig, label: &str) -> Result<CallConfig, ConfigError> {
        self.task_blocks(label)
            .into_iter()
            .try_fold(base.clone(), |cfg, (_, overrides)| cfg.derive(overrides))
    }

    /// The config of a task labelled `label` (without diagnostics).
    pub fn config_for(&self, label: &str) -> Result<CallConfig, ConfigError> {
        self.layered(&self.base_call_config(), label)
    }

    /// The most specific block that sets `resource` on `ring` for `label`, if any does.
    pub fn block_of(&self, label: &str, resource: Resource, ring: usize) -> Option<Block> {
        let mut blocks = self.task_blocks(label);
        blocks.reverse();
        blocks
            .into_iter()
            .find(|(_, o)| o.runtime_env.get(resource)[ring] != 0)
            .map(|(block, _)| block)
            .or_else(|| (self.runtime_env.get(resource)[ring] != 0).then_some(Block::Case))
    }

    /// Which block set each value of `sizing`, bound by a task labelled `label`: a value
    /// counts as the case's only when its source is `call_config` and it is the value the case
    /// gives that label (a scene may build a task's config itself).
    pub fn blocks_for(&self, label: &str, sizing: &ResolvedSizing) -> SizingBlocks {
        let wanted = self.config_for(label).ok();
        let mut out = SizingBlocks::default();
        for (r, resource) in Resource::ALL.into_iter().enumerate() {
            for (ring, slot) in out[r].iter_mut().enumerate() {
                let bound = sizing.at(resource, ring);
                let asked = wanted.as_ref().map(|c| c.runtime_env.get(resource)[ring]);
                if bound.source == SizeSource::CallConfig && asked == Some(bound.value) {
                    *slot = self.block_of(label, resource, ring);
                }
            }
        }
        out
    }
}

/// A problem in a `config` block: the key path it concerns and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockError {
    /// E.g. `config.runtime_env.ring_heap`; empty for unknown keys, whose message names the
    /// table that holds them.
    pub path: String,
    /// What is wrong, e.g. `must be non-negative`.
    pub problem: String,
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            return f.write_str(&self.problem);
        }
        // Range errors read `path = value is out of range …`, like those of params.
        if self.problem.starts_with("= ") {
            return write!(f, "{} {}", self.path, self.problem);
        }
        write!(f, "{}: {}", self.path, self.problem)
    }
}

impl std::error::Error for BlockError {}

fn error(path: impl Into<String>, problem: impl Into<String>) -> BlockError {
    BlockError {
        path: path.into(),
        problem: problem.into(),
    }
}

/// `path = value is out of range (allowed min..=max)`.
fn range_error(path: &str, value: impl fmt::Display, min: u64, max: u64) -> BlockError {
    error(
        path,
        format!("= {value} is out of range (allowed {min}..={max})"),
    )
}

/// `unknown key(s) in <what>: a, b (allowed: …)`, or `None` when every key is allowed.
pub(crate) fn unknown_keys_message(table: &Table, allowed: &[&str], what: &str) -> Option<String> {
    let mut unknown: Vec<&str> = table
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    unknown.sort_unstable();
    Some(format!(
        "unknown key(s) in {what}: {} (allowed: {})",
        key_list(unknown),
        allowed.join(", ")
    ))
}

/// Checks that every key of `table` is allowed; lists all unknown ones, sorted.
fn check_keys(table: &Table, path: &str, allowed: &[&str]) -> Result<(), BlockError> {
    match unknown_keys_message(table, allowed, path) {
        None => Ok(()),
        Some(problem) => Err(BlockError {
            path: String::new(),
            problem,
        }),
    }
}

fn as_table<'v>(value: &'v Value, path: &str) -> Result<&'v Table, BlockError> {
    match value {
        Value::Table(t) => Ok(t),
        other => Err(error(
            path,
            format!("must be a table, found {}", other.type_str()),
        )),
    }
}

fn non_negative(value: &Value, path: &str) -> Result<u64, BlockError> {
    match value {
        Value::Integer(i) if *i < 0 => Err(error(path, "must be non-negative")),
        Value::Integer(i) => Ok(*i as u64),
        other => Err(error(
            path,
            format!(
                "expected a non-negative integer, found {}",
                other.type_str()
            ),
        )),
    }
}

/// An integer in `min..=max` (a count: threads, chips, sub workers).
fn bounded_count(value: &Value, path: &str, min: u32, max: u32) -> Result<u32, BlockError> {
    let (min64, max64) = (u64::from(min), u64::from(max));
    match value {
        Value::Integer(i) => match u32::try_from(*i) {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(range_error(path, i, min64, max64)),
        },
        other => Err(error(
            path,
            format!(
                "expected a non-negative integer, found {}",
                other.type_str()
            ),
        )),
    }
}

/// `aicpu_thread_num`: any `u32` passes here; `CallConfig::validate` then applies the §3 rule
/// with its own text, and only values no `u32` can hold are range errors.
fn thread_count(value: &Value, path: &str) -> Result<u32, BlockError> {
    match value {
        Value::Integer(i) if *i < 0 => Err(error(path, "must be non-negative")),
        Value::Integer(i) if *i > i64::from(u32::MAX) => Err(range_error(
            path,
            i,
            0,
            u64::from(PLATFORM_MAX_AICPU_THREADS),
        )),
        _ => bounded_count(value, path, 0, u32::MAX),
    }
}

/// A `runtime_env` value: a non-negative integer (broadcast) or a list of exactly 4.
fn ring_value(value: &Value, path: &str) -> Result<RingValue, BlockError> {
    match value {
        Value::Integer(_) => Ok(RingValue::Broadcast(non_negative(value, path)?)),
        Value::Array(items) => {
            if items.len() != RING_COUNT {
                return Err(error(
                    path,
                    format!(
                        "a list must have exactly 4 entries (one per ring), got {}",
                        items.len()
                    ),
                ));
            }
            let mut out = [0u64; RING_COUNT];
            for (ring, item) in items.iter().enumerate() {
                out[ring] = match item {
                    Value::Integer(_) => non_negative(item, &format!("{path}[{ring}]"))?,
                    other => {
                        return Err(error(
                            format!("{path}[{ring}]"),
                            format!(
                                "expected a non-negative integer, found {}",
                                other.type_str()
                            ),
                        ));
                    }
                };
            }
            Ok(RingValue::PerRing(out))
        }
        other => Err(error(
            path,
            format!(
                "expected a non-negative integer or a list of 4, found {}",
                other.type_str()
            ),
        )),
    }
}

/// Parses a `runtime_env` table. Range rules are checked later, on the whole `CallConfig`.
pub fn parse_runtime_env(value: &Value, path: &str) -> Result<RuntimeEnv, BlockError> {
    let table = as_table(value, path)?;
    check_keys(table, path, &RUNTIME_ENV_KEYS)?;
    let mut env = RuntimeEnv::default();
    for resource in Resource::ALL {
        if let Some(v) = table.get(resource.field()) {
            let key_path = format!("{path}.{}", resource.field());
            env.set(resource, ring_value(v, &key_path)?);
        }
    }
    Ok(env)
}

/// True for labels and case names that are safe path components: 1–64 characters from
/// `[A-Za-z0-9_.-]`, and not `.` or `..` (they name directories under `--output`).
pub fn is_valid_label(label: &str) -> bool {
    (1..=64).contains(&label.len())
        && label != "."
        && label != ".."
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The text of a refused label or case name.
pub const LABEL_RULE: &str = "must be 1-64 characters of [A-Za-z0-9_.-], not . or ..";

/// A `true` / `false` value.
fn flag(value: &Value, path: &str) -> Result<bool, BlockError> {
    value.as_bool().ok_or_else(|| {
        error(
            path,
            format!("must be true or false, not {}", value.type_str()),
        )
    })
}

fn parse_task(value: &Value, path: &str) -> Result<TaskOverrides, BlockError> {
    let table = as_table(value, path)?;
    check_keys(table, path, &TASK_KEYS)?;
    let mut overrides = TaskOverrides::default();
    if let Some(v) = table.get("aicpu_thread_num") {
        overrides.aicpu_thread_num = Some(thread_count(v, &format!("{path}.aicpu_thread_num"))?);
    }
    if let Some(v) = table.get("runtime_env") {
        overrides.runtime_env = parse_runtime_env(v, &format!("{path}.runtime_env"))?;
    }
    if let Some(v) = table.get("track_war") {
        overrides.track_war = Some(flag(v, &format!("{path}.track_war"))?);
    }
    Ok(overrides)
}

/// Loads a `config` block found at key path `path` (normally `config`), checks every key and
/// validates the base config and every label's derived config (checkpoint C4).
pub fn parse_config_block(
    value: &Value,
    path: &str,
    level: SceneLevel,
) -> Result<CaseConfig, BlockError> {
    let table = as_table(value, path)?;
    if level == SceneLevel::L2 && table.contains_key("tasks") {
        return Err(error(
            format!("{path}.tasks"),
            "config.tasks is only allowed in level-3 scenes",
        ));
    }
    check_keys(table, path, level.allowed_config_keys())?;
    let mut config = CaseConfig::default();
    if let Some(v) = table.get("aicpu_thread_num") {
        config.aicpu_thread_num = thread_count(v, &format!("{path}.aicpu_thread_num"))?;
    }
    if let Some(v) = table.get("device_count") {
        let key = format!("{path}.device_count");
        config.device_count = Some(bounded_count(v, &key, 1, MAX_DEVICE_COUNT)?);
    }
    if let Some(v) = table.get("num_sub_workers") {
        let key = format!("{path}.num_sub_workers");
        config.num_sub_workers = Some(bounded_count(v, &key, 0, MAX_SUB_WORKERS)?);
    }
    if let Some(v) = table.get("runtime_env") {
        config.runtime_env = parse_runtime_env(v, &format!("{path}.runtime_env"))?;
    }
    if let Some(v) = table.get("track_war") {
        config.track_war = flag(v, &format!("{path}.track_war"))?;
    }
    let base = config.base_call_config();
    base.validate().map_err(|e| error(path, e.to_string()))?;
    if let Some(v) = table.get("tasks") {
        let tasks_path = format!("{path}.tasks");
        let tasks = as_table(v, &tasks_path)?;
        if tasks.len() > MAX_TASK_LABELS {
            return Err(error(
                tasks_path,
                format!(
                    "{} labels; at most {MAX_TASK_LABELS} are allowed",
                    tasks.len()
                ),
            ));
        }
        for (label, task) in tasks {
            if !is_valid_label(label) {
                return Err(error(
                    format!("{tasks_path}.{:?}", cut(label)),
                    format!("a label {LABEL_RULE}"),
                ));
            }
            let task_path = format!("{tasks_path}.{label}");
            let overrides = parse_task(task, &task_path)?;
            base.derive(&overrides)
                .map_err(|e| error(&task_path, e.to_string()))?;
            config.tasks.insert(label.clone(), overrides);
        }
        // A member block layers on its family's: the combination must be valid too.
        for label in config.tasks.keys() {
            config
                .config_for(label)
                .map_err(|e| error(format!("{tasks_path}.{label}"), e.to_string()))?;
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, level: SceneLevel) -> Result<CaseConfig, String> {
        let value: Value = toml::from_str::<Table>(text).map(Value::Table).unwrap();
        let config = value
            .get("config")
            .cloned()
            .unwrap_or(Value::Table(Table::new()));
        parse_config_block(&config, "config", level).map_err(|e| e.to_string())
    }

    #[track_caller]
    fn check_err(text: &str, level: SceneLevel, expect: &str) {
        let err = load(text, level).unwrap_err();
        assert!(err.contains(expect), "{err:?} does not contain {expect:?}");
    }

    #[test]
    fn track_war_is_a_boolean_per_case_and_per_label() {
        let config = load(
            "[config]\ntrack_war = true\n[config.tasks.small]\ntrack_war = false\n",
            SceneLevel::L3,
        )
        .unwrap();
        assert!(config.track_war && config.base_call_config().track_war);
        assert!(!config.config_for("small").unwrap().track_war);
        assert!(config.config_for("big").unwrap().track_war);
        check_err(
            "[config]\ntrack_war = 1",
            SceneLevel::L2,
            "config.track_war: must be true or false, not integer",
        );
        check_err(
            "[config.tasks.ew]\ntrack_war = \"yes\"",
            SceneLevel::L3,
            "config.tasks.ew.track_war: must be true or false, not string",
        );
    }

    #[test]
    fn t75_unknown_config_key_lists_allowed_keys() {
        check_err(
            "[config]\nblock_dim = 24",
            SceneLevel::L3,
            "unknown key(s) in config: block_dim (allowed: aicpu_thread_num, device_count, num_sub_workers, runtime_env, tasks, track_war)",
        );
        check_err(
            "[config]\nblock_dim = 24",
            SceneLevel::L2,
            "(allowed: aicpu_thread_num, device_count, num_sub_workers, runtime_env, track_war)",
        );
    }

    #[test]
    fn t76_misspelled_runtime_env_key() {
        check_err(
            "[config.runtime_env]\nring_heep = 1024",
            SceneLevel::L3,
            "unknown key(s) in config.runtime_env: ring_heep (allowed: ring_dep_pool, ring_heap, ring_task_window)",
        );
    }

    #[test]
    fn unknown_keys_are_all_listed_sorted() {
        check_err(
            "[config.runtime_env]\nzz = 1\nring_heep = 1024",
            SceneLevel::L3,
            "unknown key(s) in config.runtime_env: ring_heep, zz (allowed:",
        );
    }

    #[test]
    fn t77_wrong_table_types() {
        check_err(
            "[config]\nruntime_env = 5",
            SceneLevel::L3,
            "config.runtime_env: must be a table, found integer",
        );
        check_err(
            "config = \"x\"",
            SceneLevel::L3,
            "config: must be a table, found string",
        );
    }

    #[test]
    fn t78_list_of_three() {
        check_err(
            "[config.runtime_env]\nring_task_window = [16, 32, 64]",
            SceneLevel::L3,
            "config.runtime_env.ring_task_window: a list must have exactly 4 entries (one per ring), got 3",
        );
    }

    #[test]
    fn t79_negative_and_non_integer_values() {
        check_err(
            "[config.runtime_env]\nring_dep_pool = -1",
            SceneLevel::L3,
            "config.runtime_env.ring_dep_pool: must be non-negative",
        );
        check_err(
            "[config.runtime_env]\nring_heap = \"4MiB\"",
            SceneLevel::L3,
            "config.runtime_env.ring_heap: expected a non-negative integer or a list of 4",
        );
        check_err(
            "[config.runtime_env]\nring_heap = [1024, 1024, -64, 1024]",
            SceneLevel::L3,
            "config.runtime_env.ring_heap[2]: must be non-negative",
        );
    }

    #[test]
    fn t80_range_error_names_ring_and_value() {
        check_err(
            "[config.runtime_env]\nring_task_window = 48",
            SceneLevel::L3,
            "config: runtime_env.ring_task_window[0]=48: must be a power of two",
        );
    }

    #[test]
    fn t81_unknown_key_in_a_label_override() {
        check_err(
            "[config.tasks.small.runtime_env]\nring_window = 16",
            SceneLevel::L3,
            "unknown key(s) in config.tasks.small.runtime_env: ring_window (allowed: ring_dep_pool, ring_heap, ring_task_window)",
        );
    }

    #[test]
    fn t82_tasks_only_at_level_3() {
        check_err(
            "[config.tasks.small.runtime_env]\nring_heap = 1024",
            SceneLevel::L2,
            "config.tasks is only allowed in level-3 scenes",
        );
    }

    #[test]
    fn t83_all_allowed_keys_load() {
        let config = load(
            "[config]\naicpu_thread_num = 2\ndevice_count = 1\nnum_sub_workers = 1\n\
             [config.runtime_env]\nring_task_window = 64\nring_heap = 1024\nring_dep_pool = 32\n\
             [config.tasks.small]\naicpu_thread_num = 4\n\
             [config.tasks.small.runtime_env]\nring_task_window = [0, 64, 32, 16]\n\
             [params]\nn = 4096",
            SceneLevel::L3,
        )
        .unwrap();
        assert_eq!(config.aicpu_thread_num, 2);
        assert_eq!(config.device_count, Some(1));
        assert_eq!(config.num_sub_workers, Some(1));
        assert_eq!(config.runtime_env.ring_task_window, [64; 4]);
        assert_eq!(config.runtime_env.ring_heap, [1024; 4]);
        assert_eq!(config.runtime_env.ring_dep_pool, [32; 4]);
        let small = config.tasks["small"];
        assert_eq!(small.aicpu_thread_num, Some(4));
        let derived = config.base_call_config().derive(&small).unwrap();
        assert_eq!(derived.runtime_env.ring_task_window, [64, 64, 32, 16]);
    }

    #[test]
    fn label_override_is_validated_after_derive() {
        check_err(
            "[config.tasks.big.runtime_env]\nring_heap = [0, 1030, 0, 0]",
            SceneLevel::L3,
            "config.tasks.big: runtime_env.ring_heap[1]=1030",
        );
    }

    #[test]
    fn bad_label_is_rejected() {
        check_err(
            "[config.tasks.\"bad label\"]\naicpu_thread_num = 2",
            SceneLevel::L3,
            "a label must be 1-64 characters",
        );
        assert!(is_valid_label("l2_per-ring.0"));
        assert!(!is_valid_label(""));
        assert!(!is_valid_label(&"x".repeat(65)));
    }

    #[test]
    fn advise_output_shape_loads() {
        let config = load(
            "[config.runtime_env]\nring_task_window = [8, 8, 4, 4]\nring_heap = [1024, 327680, 0, 0]\nring_dep_pool = [4, 8, 0, 0]",
            SceneLevel::L3,
        )
        .unwrap();
        assert_eq!(config.runtime_env.ring_heap, [1024, 327680, 0, 0]);
    }
}
