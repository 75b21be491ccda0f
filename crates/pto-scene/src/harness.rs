//! Scene cases as cargo tests: every case of every scene file under a directory becomes one
//! named test, `<scene>::<case>`, run by a libtest-compatible harness (`libtest-mimic`), so
//! `cargo test` filters, lists (`--list`), skips (`ignore = true` in the case, `--ignored` to
//! run them) and runs cases in parallel like ordinary tests.
//!
//! Use it from a test target with `harness = false`:
//!
//! ```toml
//! [[test]]
//! name = "scenes"
//! harness = false
//! ```
//!
//! ```no_run
//! // tests/scenes.rs
//! fn main() -> std::process::ExitCode {
//!     pto_scene::harness::Harness::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenes")).run()
//! }
//! ```
//!
//! Each test runs its case in every selected endpoint mode (default both: in-process, then
//! child-process, whose children re-execute the test binary — [`Harness::run`] enters
//! `pto_node::child_main` first). A failing test prints the case's result table as `pto run`
//! does (`--json`: its JSON lines). Options, as flags after `--` or as environment variables
//! (flags win; cargo passes flags after `--` to every test binary, so use the variables when
//! running several targets):
//!
//! | flag | variable | meaning |
//! |---|---|---|
//! | `--mode in-process\|child-process\|both` | `PTO_SCENE_MODE` | endpoint modes each case runs in |
//! | `--fast` / `--full` | `PTO_SCENE_FAST=1\|0` | the scenes' fast param defaults (`pto run --fast`) |
//! | `--json` | `PTO_SCENE_JSON=1` | a failure prints JSON lines instead of the table |
//! | `--case-timeout SECS` | `PTO_SCENE_TIMEOUT` | fail a case (per mode) still running after SECS |
//!
//! A scene file that does not load is one failing test, `<file>::load`, with the load error.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use pto_node::EndpointMode;
use pto_types::ring_config::env::EnvSource;

use crate::file::SceneFile;
use crate::runner::{CaseReport, Diagnostics, RunOptions, render_json_lines, render_table};
use crate::scene::RunnerEnv;

/// `Harness::new(dir).run()`: every scene file under `dir`, with the defaults.
pub fn main(dir: impl Into<PathBuf>) -> ExitCode {
    Harness::new(dir).run()
}

/// The default time one case may take in one mode.
pub const DEFAULT_CASE_TIMEOUT: Duration = Duration::from_secs(600);

/// Which scene files to turn into tests, and how to run them.
#[derive(Clone, Debug)]
pub struct Harness {
    dir: PathBuf,
    modes: Vec<EndpointMode>,
    fast: bool,
    json: bool,
    timeout: Duration,
}

impl Harness {
    /// Every `*.toml` file under `dir` (searched recursively, in name order) is a scene file.
    pub fn new(dir: impl Into<PathBuf>) -> Harness {
        Harness {
            dir: dir.into(),
            modes: vec![EndpointMode::InProcess, EndpointMode::ChildProcess],
            fast: false,
            json: false,
            timeout: DEFAULT_CASE_TIMEOUT,
        }
    }

    /// The endpoint modes each case runs in, in order (default both).
    pub fn modes(mut self, modes: &[EndpointMode]) -> Harness {
        self.modes = modes.to_vec();
        self
    }

    /// Whether cases use their scenes' fast param defaults (default false).
    pub fn fast(mut self, fast: bool) -> Harness {
        self.fast = fast;
        self
    }

    /// How long one case may run in one mode (default [`DEFAULT_CASE_TIMEOUT`]).
    pub fn case_timeout(mut self, timeout: Duration) -> Harness {
        self.timeout = timeout;
        self
    }

    /// Enters the child runtime when this process is a child, else parses the command line,
    /// runs the selected cases and returns the exit status (101 when a test failed, as
    /// libtest does).
    pub fn run(self) -> ExitCode {
        pto_node::child_main();
        pto_kernels::link();
        let (harness, args) = match self.configured(std::env::args_os().collect()) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let args = Arguments::from_iter(args);
        libtest_mimic::run(&args, harness.trials()).exit_code()
    }

    /// The harness with the environment's and the command line's options applied, and the
    /// command line without them (for libtest's parser).
    fn configured(mut self, argv: Vec<OsString>) -> Result<(Harness, Vec<OsString>), String> {
        let env = EnvSource::process();
        let var = |k: &str| env.get(k).map(|v| v.to_string_lossy().into_owned());
        if let Some(v) = var("PTO_SCENE_MODE") {
            self.modes = parse_modes(&v).map_err(|e| format!("PTO_SCENE_MODE: {e}"))?;
        }
        if let Some(v) = var("PTO_SCENE_FAST") {
            self.fast = parse_flag(&v).map_err(|e| format!("PTO_SCENE_FAST: {e}"))?;
        }
        if let Some(v) = var("PTO_SCENE_JSON") {
            self.json = parse_flag(&v).map_err(|e| format!("PTO_SCENE_JSON: {e}"))?;
        }
        if let Some(v) = var("PTO_SCENE_TIMEOUT") {
            self.timeout = parse_secs(&v).map_err(|e| format!("PTO_SCENE_TIMEOUT: {e}"))?;
        }
        let mut rest = Vec::with_capacity(argv.len());
        let mut args = argv.into_iter();
        while let Some(arg) = args.next() {
            let mut value = |flag: &str| {
                args.next()
                    .map(|v| v.to_string_lossy().into_owned())
                    .ok_or_else(|| format!("{flag} needs a value"))
            };
            match arg.to_str() {
                Some("--mode") => self.modes = parse_modes(&value("--mode")?)?,
                Some("--fast") => self.fast = true,
                Some("--full") => self.fast = false,
                Some("--json") => self.json = true,
                Some("--case-timeout") => self.timeout = parse_secs(&value("--case-timeout")?)?,
                _ => rest.push(arg),
            }
        }
        Ok((self, rest))
    }

    /// One trial per case of every scene file, and one failing trial per file that does not
    /// load.
    pub fn trials(&self) -> Vec<Trial> {
        let mut names = BTreeSet::new();
        let mut trials = Vec::new();
        for path in scene_files(&self.dir) {
            let stem = path
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
            let file = match SceneFile::load(&path) {
                Ok(file) => Arc::new(file),
                Err(e) => {
                    let message = e.to_string();
                    trials.push(Trial::test(format!("{stem}::load"), move || {
                        Err(Failed::from(message))
                    }));
                    continue;
                }
            };
            for case in &file.cases {
                let mut name = format!("{}::{}", file.scene.name(), case.name);
                if !names.insert(name.clone()) {
                    // Two files with cases of one scene and one name: the file tells them apart.
                    name = format!("{}::{}::{stem}", file.scene.name(), case.name);
                    names.insert(name.clone());
                }
                let (file, case_name, harness) =
                    (Arc::clone(&file), case.name.clone(), self.clone());
                trials.push(
                    Trial::test(name, move || harness.run_case(&file, &case_name))
                        .with_ignored_flag(case.ignore.is_some()),
                );
            }
        }
        if trials.is_empty() {
            let dir = self.dir.display().to_string();
            trials.push(Trial::test("scene_files::found", move || {
                Err(Failed::from(format!("no scene file (*.toml) under {dir}")))
            }));
        }
        trials
    }

    /// Runs `case` of `file` in each mode; the first mode that fails fails the test.
    fn run_case(&self, file: &Arc<SceneFile>, case: &str) -> Result<(), Failed> {
        for &mode in &self.modes {
            let out = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
            let options = RunOptions {
                case: Some(case.to_string()),
                output: out.path().to_path_buf(),
                diagnostics: Diagnostics::default(),
                env: RunnerEnv::new(mode, self.fast),
            };
            let reports = self.run_bounded(Arc::clone(file), options)?;
            if reports.iter().all(|r| r.result.passed()) {
                continue;
            }
            let shown = match self.json {
                true => render_json_lines(&reports),
                false => render_table(file, &reports),
            };
            let why: Vec<String> = reports
                .iter()
                .filter_map(|r| r.result.check.as_ref().err().cloned())
                .collect();
            return Err(Failed::from(format!(
                "case {case} failed in {} mode: {}\n{shown}",
                mode_name(mode),
                why.join("; ")
            )));
        }
        Ok(())
    }

    /// Runs the case on a thread of its own, so a case that never ends fails its test after
    /// the timeout instead of hanging the run.
    fn run_bounded(
        &self,
        file: Arc<SceneFile>,
        options: RunOptions,
    ) -> Result<Vec<CaseReport>, Failed> {
        let (tx, rx) = std::sync::mpsc::channel();
        let mode = mode_name(options.env.mode);
        std::thread::Builder::new()
            .name("pto-scene-case".into())
            .spawn(move || {
                let _ = tx.send(
                    crate::runner::run_file(&file, &options, |_| {}).map_err(|e| format!("{e:#}")),
                );
            })
            .map_err(|e| format!("starting the case's thread: {e}"))?;
        match rx.recv_timeout(self.timeout) {
            Ok(result) => result.map_err(Failed::from),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(Failed::from(format!(
                "the case did not finish within {:.0} s in {mode} mode",
                self.timeout.as_secs_f64()
            ))),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(Failed::from(format!("the case panicked in {mode} mode")))
            }
        }
    }
}

/// `in-process`, `child-process` or `both`.
fn parse_modes(text: &str) -> Result<Vec<EndpointMode>, String> {
    match text {
        "both" => Ok(vec![EndpointMode::InProcess, EndpointMode::ChildProcess]),
        other => other.parse().map(|m| vec![m]).map_err(|_| {
            format!(
                "{:?} is not a mode (in-process, child-process or both)",
                crate::params::cut(other)
            )
        }),
    }
}

fn parse_flag(text: &str) -> Result<bool, String> {
    match text {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" | "" => Ok(false),
        other => Err(format!("{:?} is not 1 or 0", crate::params::cut(other))),
    }
}

fn parse_secs(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            format!(
                "{:?} is not a number of seconds in (0, 86400]",
                crate::params::cut(text)
            )
        })
}

fn mode_name(mode: EndpointMode) -> &'static str {
    mode.name()
}

/// The `*.toml` files under `dir`, recursively, sorted by path; symlinks are not followed.
fn scene_files(dir: &Path) -> Vec<PathBuf> {
    crate::runner::regular_files_under(dir, usize::MAX)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn own_flags_are_taken_and_the_rest_left_for_libtest() {
        let (h, rest) = Harness::new("x")
            .configured(argv(&[
                "bin",
                "--mode",
                "child-process",
                "--fast",
                "--list",
                "--json",
                "filter",
                "--case-timeout",
                "2.5",
            ]))
            .unwrap();
        assert_eq!(h.modes, [EndpointMode::ChildProcess]);
        assert!(h.fast && h.json);
        assert_eq!(h.timeout, Duration::from_millis(2500));
        assert_eq!(rest, argv(&["bin", "--list", "filter"]));
    }

    #[test]
    fn bad_options_are_errors_naming_the_value() {
        let bad = |args: &[&str]| Harness::new("x").configured(argv(args)).unwrap_err();
        assert!(bad(&["bin", "--mode", "threads"]).contains("\"threads\" is not a mode"));
        assert!(bad(&["bin", "--mode"]).contains("--mode needs a value"));
        assert!(bad(&["bin", "--case-timeout", "-1"]).contains("not a number of seconds"));
    }

    #[test]
    fn a_directory_without_scene_files_is_one_failing_test() {
        let dir = tempfile::tempdir().unwrap();
        let trials = Harness::new(dir.path()).trials();
        assert_eq!(trials.len(), 1);
        assert_eq!(trials[0].name(), "scene_files::found");
    }

    #[test]
    fn cases_become_named_tests_and_bad_files_a_load_test() {
        let dir = tempfile::tempdir().unwrap();
        let case = |name: &str, extra: &str| format!("[[cases]]\nname = \"{name}\"\n{extra}\n");
        let good = format!(
            "scene = \"vector_example\"\n{}{}",
            case("small", "params = { n = 64 }"),
            case("slow", "ignore = \"takes minutes\"")
        );
        std::fs::write(dir.path().join("a.toml"), good).unwrap();
        std::fs::create_dir(dir.path().join("more")).unwrap();
        std::fs::write(
            dir.path().join("more/b.toml"),
            format!("scene = \"vector_example\"\n{}", case("small", "")),
        )
        .unwrap();
        std::fs::write(dir.path().join("bad.toml"), "scene = \"nope\"\n").unwrap();
        let trials = Harness::new(dir.path()).trials();
        let names: Vec<(&str, bool)> = trials
            .iter()
            .map(|t| (t.name(), t.has_ignored_flag()))
            .collect();
        assert_eq!(
            names,
            [
                ("vector_example::small", false),
                ("vector_example::slow", true),
                ("bad::load", false),
                ("vector_example::small::b", false),
            ]
        );
    }
}
