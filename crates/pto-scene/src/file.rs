//! Scene files: `scene`, optional `level`, and `[[cases]]` with `name`, `config` and `params`
//! (RING_CONFIG.md §11, checkpoint C4).
//!
//! Loading is strict: every key is checked when the file is read, and an error names the file,
//! the case and the key path, e.g.
//! `scenes/x.toml: cases[0] ("small"): unknown key(s) in config.runtime_env: ring_heep (allowed: …)`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use crate::config_block::{CaseConfig, SceneLevel, parse_config_block, unknown_keys_message};
use crate::scene::{Scene, find_scene};

/// Keys allowed at the top of a scene file.
pub const TOP_KEYS: [&str; 3] = ["cases", "level", "scene"];
/// Keys allowed in a case.
pub const CASE_KEYS: [&str; 3] = ["config", "name", "params"];

/// One case of a scene file.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub config: CaseConfig,
    pub params: Table,
}

/// A loaded scene file.
pub struct SceneFile {
    pub path: PathBuf,
    pub scene: &'static dyn Scene,
    pub cases: Vec<Case>,
}

/// A load error: one line naming the file, the case and the key path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError(pub String);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

impl SceneFile {
    /// Reads and checks a scene file.
    pub fn load(path: &Path) -> Result<SceneFile, LoadError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LoadError(format!("{}: cannot read: {e}", path.display())))?;
        SceneFile::parse(path, &text)
    }

    /// Checks the text of a scene file (`path` is used in messages).
    pub fn parse(path: &Path, text: &str) -> Result<SceneFile, LoadError> {
        let file = path.display();
        let fail = |msg: String| LoadError(format!("{file}: {msg}"));
        let table: Table = toml::from_str(text).map_err(|e| fail(e.message().to_string()))?;
        if let Some(msg) = unknown_keys_message(&table, &TOP_KEYS, "the file") {
            return Err(fail(msg));
        }
        let name = match table.get("scene") {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                return Err(fail(format!(
                    "scene: must be a string, found {}",
                    other.type_str()
                )));
            }
            None => {
                return Err(fail(
                    "scene: missing (the registered scene whose cases these are)".into(),
                ));
            }
        };
        let scene = find_scene(name).ok_or_else(|| {
            fail(format!(
                "scene: no scene named {name:?} is registered (known: {})",
                crate::scene::scene_names().join(", ")
            ))
        })?;
        if let Some(level) = table.get("level") {
            let expected = match scene.level() {
                SceneLevel::L2 => 2,
                SceneLevel::L3 => 3,
            };
            match level {
                Value::Integer(l) if *l == expected => {}
                Value::Integer(l) => {
                    return Err(fail(format!(
                        "level: the file says {l} but scene {name:?} is level {expected}"
                    )));
                }
                other => {
                    return Err(fail(format!(
                        "level: must be an integer, found {}",
                        other.type_str()
                    )));
                }
            }
        }
        let cases = match table.get("cases") {
            Some(Value::Array(cases)) => cases,
            Some(other) => {
                return Err(fail(format!(
                    "cases: must be an array of tables, found {}",
                    other.type_str()
                )));
            }
            None => return Err(fail("cases: missing (add at least one [[cases]])".into())),
        };
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(cases.len());
        for (i, case) in cases.iter().enumerate() {
            let Value::Table(case) = case else {
                return Err(fail(format!(
                    "cases[{i}]: must be a table, found {}",
                    case.type_str()
                )));
            };
            let name = match case.get("name") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(Value::String(_)) => {
                    return Err(fail(format!("cases[{i}]: name: must not be empty")));
                }
                Some(other) => {
                    return Err(fail(format!(
                        "cases[{i}]: name: must be a string, found {}",
                        other.type_str()
                    )));
                }
                None => return Err(fail(format!("cases[{i}]: name: missing"))),
            };
            let at = format!("cases[{i}] ({name:?})");
            if !seen.insert(name.clone()) {
                return Err(fail(format!(
                    "{at}: name: another case is already called {name:?}"
                )));
            }
            if let Some(msg) = unknown_keys_message(case, &CASE_KEYS, "the case") {
                return Err(fail(format!("{at}: {msg}")));
            }
            let empty = Value::Table(Table::new());
            let config = parse_config_block(
                case.get("config").unwrap_or(&empty),
                "config",
                scene.level(),
            )
            .map_err(|e| fail(format!("{at}: {e}")))?;
            let params = match case.get("params") {
                None => Table::new(),
                Some(Value::Table(t)) => t.clone(),
                Some(other) => {
                    return Err(fail(format!(
                        "{at}: params: must be a table, found {}",
                        other.type_str()
                    )));
                }
            };
            if let Err(msg) = scene.check_params(&params) {
                return Err(fail(format!("{at}: params: {msg}")));
            }
            out.push(Case {
                name,
                config,
                params,
            });
        }
        Ok(SceneFile {
            path: path.to_path_buf(),
            scene,
            cases: out,
        })
    }
}
