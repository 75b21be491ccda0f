//! Scene files: `scene`, optional `level`, and `[[cases]]` with `name`, `config` and `params`
//! (RING_CONFIG.md §11, checkpoint C4).
//!
//! Loading is strict: every key is checked when the file is read, and an error names the file,
//! the case and the key path, e.g.
//! `scenes/x.toml: cases[0] ("small"): unknown key(s) in config.runtime_env: ring_heep (allowed: …)`.
//!
//! Scene inputs cannot crash the runner (issue 10, item 6): only regular files of at most
//! [`MAX_FILE_BYTES`] are read (never a FIFO or a device, which could block or never end);
//! params are checked against the scene's declarations ([`crate::params`]) and its cross-param
//! hook; case names and labels must be safe path components (item 7), since they name
//! directories under `--output`. Every user string echoed in a message is cut to
//! [`crate::params::MAX_ECHO_CHARS`] characters.

use std::collections::BTreeSet;
use std::fs::{File, Metadata, OpenOptions};
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use pto_types::ErrorCode;
use toml::{Table, Value};

use crate::config_block::{
    CaseConfig, LABEL_RULE, is_valid_label, parse_config_block, unknown_keys_message,
};
use crate::params::{Params, cut};
use crate::scene::{Scene, find_scene};

/// The largest scene file read: 16 MiB, far above any real one.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// The most cases in one file.
pub const MAX_CASES: usize = 1024;

/// Keys allowed at the top of a scene file.
pub const TOP_KEYS: [&str; 3] = ["cases", "level", "scene"];
/// Keys allowed in a case.
pub const CASE_KEYS: [&str; 5] = ["config", "expect_failure", "ignore", "name", "params"];

/// One case of a scene file.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub config: CaseConfig,
    pub params: Params,
    /// `expect_failure = "HEAP_RING_DEADLOCK"` (a code name or number): the case passes only
    /// when a task fails with this code (the rows say `expected FAIL (…)`), and fails when
    /// every task succeeds or one fails otherwise.
    pub expect_failure: Option<ErrorCode>,
    /// `ignore = true` or `ignore = "why"`: the test harness marks the case ignored (run it
    /// with `--ignored`); `pto run` still runs it.
    pub ignore: Option<String>,
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
        let text = read_text(path, MAX_FILE_BYTES)
            .map_err(|msg| LoadError(format!("{}: {msg}", path.display())))?;
        SceneFile::parse(path, &text)
    }

    /// Checks the text of a scene file (`path` is used in messages).
    pub fn parse(path: &Path, text: &str) -> Result<SceneFile, LoadError> {
        let fail = |msg: String| LoadError(format!("{}: {msg}", path.display()));
        let table = parse_toml(text).map_err(fail)?;
        if let Some(msg) = unknown_keys_message(&table, &TOP_KEYS, "the file") {
            return Err(fail(msg));
        }
        let scene = scene_of(&table).map_err(fail)?;
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
        if cases.len() > MAX_CASES {
            return Err(fail(format!(
                "cases: {} cases; a scene file may hold at most {MAX_CASES}",
                cases.len()
            )));
        }
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(cases.len());
        for (i, case) in cases.iter().enumerate() {
            out.push(parse_case(scene, i, case, &mut seen).map_err(fail)?);
        }
        Ok(SceneFile {
            path: path.to_path_buf(),
            scene,
            cases: out,
        })
    }
}

/// The text of a file of at most `limit` bytes. Only regular files are opened: a FIFO or a
/// device could block or never end (`pto run /dev/zero`). The metadata is checked before
/// opening and again on the opened file (it may have been replaced meanwhile; the open does
/// not block on a FIFO), and at most `limit + 1` bytes are read, so a file that grows while
/// it is read is still refused.
pub fn read_text(path: &Path, limit: u64) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    check_regular(&meta, limit)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| format!("cannot read: {e}"))?;
    check_regular(
        &file.metadata().map_err(|e| format!("cannot read: {e}"))?,
        limit,
    )?;
    let mut bytes = Vec::new();
    File::take(file, limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "grew past {limit} bytes while being read; a scene file may be at most {limit} bytes"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

fn check_regular(meta: &Metadata, limit: u64) -> Result<(), String> {
    let kind = meta.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    };
    if let Some(what) = what {
        return Err(format!("is {what}, not a regular file"));
    }
    if meta.len() > limit {
        return Err(format!(
            "is {} bytes; a scene file may be at most {limit} bytes (16 MiB)",
            meta.len()
        ));
    }
    Ok(())
}

/// The TOML table of `text`; errors say where (line and column) and what.
fn parse_toml(text: &str) -> Result<Table, String> {
    toml::from_str(text).map_err(|e: toml::de::Error| {
        let mut message = cut(&e.message().replace('\n', " "));
        if message.contains("too large") {
            // TOML integers are signed 64-bit: say so, not only that a number did not fit.
            message.push_str(" (TOML integers stop at 2^63-1 = 9223372036854775807)");
        }
        match e.span() {
            Some(span) => {
                let before = text.get(..span.start).unwrap_or(text);
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!("line {line}, column {column}: {message}")
            }
            None => message,
        }
    })
}

/// The registered scene the file names, after checking `level` against it.
fn scene_of(table: &Table) -> Result<&'static dyn Scene, String> {
    let name = match table.get("scene") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(format!(
                "scene: must be a string, found {}",
                other.type_str()
            ));
        }
        None => {
            return Err("scene: missing (the registered scene whose cases these are)".into());
        }
    };
    let scene = find_scene(name).map_err(|e| format!("scene: {e}"))?;
    let Some(level) = table.get("level") else {
        return Ok(scene);
    };
    let expected = i64::from(scene.level().number());
    match level {
        Value::Integer(l) if *l == expected => Ok(scene),
        Value::Integer(l) => Err(format!(
            "level: the file says {l} but scene {name:?} is level {expected}"
        )),
        other => Err(format!(
            "level: must be an integer, found {}",
            other.type_str()
        )),
    }
}

/// The case's `name`: a safe path component (it names `<output>/<name>`), unique in the file.
fn case_name(i: usize, case: &Table, seen: &mut BTreeSet<String>) -> Result<String, String> {
    let name = match case.get("name") {
        Some(Value::String(s)) if s.is_empty() => {
            return Err(format!("cases[{i}]: name: must not be empty"));
        }
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(format!(
                "cases[{i}]: name: must be a string, found {}",
                other.type_str()
            ));
        }
        None => return Err(format!("cases[{i}]: name: missing")),
    };
    if !is_valid_label(name) {
        return Err(format!(
            "cases[{i}] ({:?}): name: a case name {LABEL_RULE} (it names a directory under --output)",
            cut(name)
        ));
    }
    if !seen.insert(name.clone()) {
        return Err(format!(
            "cases[{i}] ({name:?}): name: another case is already called {name:?}"
        ));
    }
    Ok(name.clone())
}

/// Checks case `i`: name, keys, config block (with the scene's worker bounds), params (with
/// the scene's declarations and cross-param hook).
fn parse_case(
    scene: &'static dyn Scene,
    i: usize,
    case: &Value,
    seen: &mut BTreeSet<String>,
) -> Result<Case, String> {
    let Value::Table(case) = case else {
        return Err(format!(
            "cases[{i}]: must be a table, found {}",
            case.type_str()
        ));
    };
    let name = case_name(i, case, seen)?;
    let at = format!("cases[{i}] ({name:?})");
    if let Some(msg) = unknown_keys_message(case, &CASE_KEYS, "the case") {
        return Err(format!("{at}: {msg}"));
    }
    let empty = Value::Table(Table::new());
    let config = parse_config_block(
        case.get("config").unwrap_or(&empty),
        "config",
        scene.level(),
    )
    .map_err(|e| format!("{at}: {e}"))?;
    scene
        .worker_bounds()
        .check(scene.name(), &config)
        .map_err(|e| format!("{at}: {e}"))?;
    for key in config.tasks.keys() {
        crate::labels::check_key(scene.name(), key, scene.labels())
            .map_err(|e| format!("{at}: config.tasks.{}: {e}", cut(key)))?;
    }
    let params = match case.get("params") {
        None => Params::defaults(scene.params()),
        Some(Value::Table(t)) => {
            Params::parse(scene.params(), t).map_err(|e| format!("{at}: {e}"))?
        }
        Some(other) => {
            return Err(format!(
                "{at}: params: must be a table, found {}",
                other.type_str()
            ));
        }
    };
    scene
        .validate(&params, &config)
        .map_err(|e| format!("{at}: {e}"))?;
    Ok(Case {
        name,
        config,
        params,
        expect_failure: expect_failure(case).map_err(|e| format!("{at}: {e}"))?,
        ignore: ignore(case).map_err(|e| format!("{at}: {e}"))?,
    })
}

/// The case's `expect_failure`: an error code by name (`"DEVICE_MEMORY_EXHAUSTED"`) or number.
fn expect_failure(case: &Table) -> Result<Option<ErrorCode>, String> {
    let code = match case.get("expect_failure") {
        None => return Ok(None),
        Some(Value::String(name)) => ErrorCode::all().find(|c| c.name() == name.as_str()),
        Some(Value::Integer(n)) => u32::try_from(*n).ok().and_then(ErrorCode::from_code),
        Some(other) => {
            return Err(format!(
                "expect_failure: must be an error code name or number, found {}",
                other.type_str()
            ));
        }
    };
    match code {
        Some(code) => Ok(Some(code)),
        None => Err(format!(
            "expect_failure: {} is not an error code (codes: {})",
            crate::params::show_value(&case["expect_failure"]),
            ErrorCode::all()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The case's `ignore`: `true`, `false` or the reason as a string.
fn ignore(case: &Table) -> Result<Option<String>, String> {
    match case.get("ignore") {
        None | Some(Value::Boolean(false)) => Ok(None),
        Some(Value::Boolean(true)) => Ok(Some(String::new())),
        Some(Value::String(why)) => Ok(Some(cut(why))),
        Some(other) => Err(format!(
            "ignore: must be a boolean or the reason as a string, found {}",
            other.type_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn load_err(text: &str) -> String {
        match SceneFile::parse(Path::new("s.toml"), text) {
            Ok(_) => panic!("expected a load error"),
            Err(e) => e.to_string(),
        }
    }

    fn case(body: &str) -> String {
        format!("scene = \"vector_example\"\n[[cases]]\n{body}\n")
    }

    #[test]
    fn case_names_must_be_safe_path_components() {
        for name in ["../x", "a/b", ".", "..", "a b", "/abs", "é"] {
            let e = load_err(&case(&format!("name = {name:?}")));
            assert!(
                e.starts_with(&format!(
                    "s.toml: cases[0] ({name:?}): name: a case name must be"
                )),
                "{e}"
            );
        }
        let long = "x".repeat(65);
        let e = load_err(&case(&format!("name = {long:?}")));
        assert!(e.contains(&format!("({long:?})")), "{e}");
        let huge = "y".repeat(10_000);
        let e = load_err(&case(&format!("name = {huge:?}")));
        assert!(
            e.contains(&format!("{}…", "y".repeat(80))) && e.len() < 300,
            "{e}"
        );
        SceneFile::parse(Path::new("s.toml"), &case("name = \"a.b-c_9\"")).unwrap();
    }

    #[test]
    fn labels_dot_and_dotdot_are_refused() {
        let text = "scene = \"multi_chip_dispatch\"\n[[cases]]\nname = \"c\"\n\
                    [cases.config.tasks.\"..\"]\naicpu_thread_num = 2\n";
        let e = load_err(text);
        assert!(
            e.contains("cases[0] (\"c\"): config.tasks.\"..\": a label must be"),
            "{e}"
        );
    }

    #[test]
    fn params_and_counts_are_range_checked_at_load() {
        let e = load_err(&case("name = \"c\"\n[cases.params]\nclusters = 4294967297"));
        assert_eq!(
            e,
            "s.toml: cases[0] (\"c\"): params.clusters = 4294967297 is out of range (allowed 1..=64)"
        );
        let e = load_err(&case("name = \"c\"\n[cases.params]\nn = 0"));
        assert!(
            e.ends_with("params.n = 0 is out of range (allowed 1..=4194304)"),
            "{e}"
        );
        let e = load_err(&case("name = \"c\"\n[cases.config]\ndevice_count = 0"));
        assert!(
            e.ends_with("config.device_count = 0 is out of range (allowed 1..=64)"),
            "{e}"
        );
        let e = load_err(&case("name = \"c\"\n[cases.config]\ndevice_count = 2"));
        assert!(
            e.ends_with(
                "config.device_count = 2 is out of range for scene vector_example (allowed 1..=1)"
            ),
            "{e}"
        );
        let e = load_err(&case(
            "name = \"c\"\n[cases.config]\naicpu_thread_num = 4294967298",
        ));
        assert!(
            e.ends_with("config.aicpu_thread_num = 4294967298 is out of range (allowed 0..=4)"),
            "{e}"
        );
    }

    #[test]
    fn too_many_cases_are_refused() {
        let text = format!(
            "scene = \"vector_example\"\n{}",
            (0..=MAX_CASES)
                .map(|i| format!("[[cases]]\nname = \"c{i}\"\n"))
                .collect::<String>()
        );
        assert!(load_err(&text).contains("1025 cases; a scene file may hold at most 1024"));
    }

    #[test]
    fn toml_errors_say_where() {
        let e = load_err("scene = \"vector_example\"\n[[cases]\n");
        assert!(e.starts_with("s.toml: line 2, column "), "{e}");
    }

    #[test]
    fn only_regular_files_of_at_most_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let err = |p: &Path| read_text(p, 100).unwrap_err();
        assert_eq!(err(dir.path()), "is a directory, not a regular file");
        assert_eq!(
            err(Path::new("/dev/zero")),
            "is a device, not a regular file"
        );
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::RWXU).unwrap();
        assert_eq!(err(&fifo), "is a FIFO, not a regular file");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, [b'#'; 101]).unwrap();
        assert!(err(&big).starts_with("is 101 bytes; a scene file may be at most 100"));
        std::fs::write(&big, [b'#'; 100]).unwrap();
        assert_eq!(read_text(&big, 100).unwrap().len(), 100);
        std::fs::write(&big, [0xff, b'a']).unwrap();
        assert!(err(&big).starts_with("is not UTF-8 text"));
        assert!(err(&dir.path().join("missing")).starts_with("cannot read: "));
    }
}
