//! The case runner behind `pto run` (RING_CONFIG.md §11.1): runs the cases of a scene file,
//! prints a result table (or one JSON object per case and task) and says whether all passed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pto_types::{CallConfig, RING_COUNT, Resource};
use serde_json::{Value, json};

use crate::file::{Case, SceneFile};
use crate::params::{cut, key_list};
use crate::scene::{CaseResult, CaseRun, RunnerEnv};
use crate::sizing_report::{human_bytes, rings_json};

/// Diagnostics chosen on the command line; each case writes under `<output>/<case name>`.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    pub scope_stats: bool,
    pub swimlane: u8,
    pub dep_gen: bool,
}

impl Diagnostics {
    /// Whether a run writes any diagnostics file.
    pub fn any(&self) -> bool {
        self.scope_stats || self.swimlane > 0 || self.dep_gen
    }
}

/// How to run a file.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub case: Option<String>,
    pub output: PathBuf,
    pub diagnostics: Diagnostics,
    pub env: RunnerEnv,
}

/// One case's outcome.
#[derive(Debug)]
pub struct CaseReport {
    pub name: String,
    pub result: CaseResult,
    pub wall: Duration,
}

/// Runs the cases of `file` (all, or the one named in `options.case`), calling `progress`
/// after each.
pub fn run_file(
    file: &SceneFile,
    options: &RunOptions,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<Vec<CaseReport>> {
    let cases: Vec<_> = file
        .cases
        .iter()
        .filter(|c| options.case.as_deref().is_none_or(|n| n == c.name))
        .collect();
    if cases.is_empty() {
        anyhow::bail!(
            "{}: no case named {:?} (cases: {})",
            file.path.display(),
            cut(options.case.as_deref().unwrap_or("")),
            key_list(file.cases.iter().map(|c| c.name.as_str()))
        );
    }
    let mut reports = Vec::with_capacity(cases.len());
    for case in cases {
        let base = base_config(file, case, options).map_err(anyhow::Error::msg)?;
        let run = CaseRun::new(&case.name, &case.params, &case.config, base, &options.env);
        let started = Instant::now();
        let output = options.output.join(&case.name);
        let outcome = check_output(&output, options.diagnostics.any())
            .map_err(anyhow::Error::msg)
            .and_then(|()| file.scene.run(&run));
        let mut result = match outcome {
            Ok(result) => result,
            Err(e) => {
                let mut r = CaseResult::new(Vec::new());
                r.check = Err(format!("{e:#}"));
                r
            }
        };
        let unrequested = run.unrequested_labels();
        if result.check.is_ok() && !unrequested.is_empty() {
            result.check = Err(format!(
                "label(s) declared under config.tasks but never requested by the orchestration: {}",
                unrequested.join(", ")
            ));
        }
        progress(&case.name);
        reports.push(CaseReport {
            name: case.name.clone(),
            result,
            wall: started.elapsed(),
        });
    }
    Ok(reports)
}

/// The base `CallConfig` of `case`: its sizing plus the command line's diagnostics, with
/// `output_prefix` = `<output>/<case name>` (a safe path component, checked at load).
fn base_config(file: &SceneFile, case: &Case, options: &RunOptions) -> Result<CallConfig, String> {
    let base = CallConfig {
        aicpu_thread_num: case.config.aicpu_thread_num,
        runtime_env: case.config.runtime_env,
        enable_scope_stats: options.diagnostics.scope_stats,
        enable_chip_swimlane: options.diagnostics.swimlane,
        enable_dep_gen: options.diagnostics.dep_gen,
        output_prefix: Some(
            options
                .output
                .join(&case.name)
                .to_string_lossy()
                .into_owned(),
        ),
    };
    base.validate()
        .map_err(|e| format!("{}: case {:?}: {e}", file.path.display(), case.name))?;
    Ok(base)
}

/// Checks the options against every case they select before anything runs (e.g. an
/// `--output` too long for `output_prefix`): a usage error, not a failed case.
pub fn check_options(file: &SceneFile, options: &RunOptions) -> Result<(), String> {
    file.cases
        .iter()
        .filter(|c| options.case.as_deref().is_none_or(|n| n == c.name))
        .try_for_each(|case| base_config(file, case, options).map(|_| ()))
}

/// Checks, before a case runs, that its output directory `dir` (`<output>/<case>`) can be
/// written (issue 10, item 7). The chip only logs a diagnostics file it cannot write and
/// carries on; `pto run` fails the case instead, naming the path and the OS error. With
/// diagnostics (`create`) the directory is created and a probe file written and removed;
/// without, nothing is created: the nearest existing ancestor must be a directory this
/// process may write to, so the outcome never depends on the diagnostics flags.
pub fn check_output(dir: &Path, create: bool) -> Result<(), String> {
    let fail = |at: &Path, e: &dyn std::fmt::Display| {
        format!("cannot write to output directory {}: {e}", at.display())
    };
    if create {
        std::fs::create_dir_all(dir).map_err(|e| fail(dir, &e))?;
        let probe = dir.join(".pto-write-probe");
        std::fs::write(&probe, b"").map_err(|e| fail(dir, &e))?;
        return std::fs::remove_file(&probe).map_err(|e| fail(dir, &e));
    }
    for at in dir.ancestors() {
        let at = if at.as_os_str().is_empty() {
            Path::new(".")
        } else {
            at
        };
        match std::fs::metadata(at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(fail(dir, &e)),
            Ok(meta) if !meta.is_dir() => {
                return Err(fail(dir, &format!("{} is not a directory", at.display())));
            }
            Ok(_) => {
                let access = rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK;
                return rustix::fs::access(at, access)
                    .map_err(|e| fail(dir, &std::io::Error::from(e)));
            }
        }
    }
    Ok(())
}

/// `16384d`, `64e`, `128c`: a value with the first letter of its source.
fn cell(value: u64, source: &str, bytes: bool) -> String {
    let v = if bytes {
        short_bytes(value)
    } else {
        value.to_string()
    };
    format!("{v}{}", &source[..1])
}

/// `256M`, `1M`, `4K`, `1088`.
fn short_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
    }
}

/// The result table.
pub fn render_table(file: &SceneFile, reports: &[CaseReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scene {} ({}): sizing per ring as value+source (c = call_config, e = env, d = default)",
        file.scene.name(),
        file.path.display()
    );
    let header = [
        "case",
        "task",
        "chip",
        "task_window",
        "heap",
        "dep_pool",
        "reserved",
        "high-water",
        "wall",
        "check",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for report in reports {
        let check = match &report.result.check {
            Ok(()) => "pass".to_string(),
            Err(_) => "FAIL".to_string(),
        };
        if report.result.rows.is_empty() {
            rows.push(vec![
                report.name.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                format!("{:.1?}", report.wall),
                check.clone(),
            ]);
        }
        for row in &report.result.rows {
            let rings = |resource: Resource, bytes: bool| match &row.sizing {
                Some(s) => {
                    let cells: Vec<String> = (0..RING_COUNT)
                        .map(|r| {
                            let v = s.at(resource, r);
                            cell(v.value, v.source.as_str(), bytes)
                        })
                        .collect();
                    cells.join(",")
                }
                None => "-".to_string(),
            };
            let status = match &row.error {
                Some(e) => format!("{check} ({})", e.name),
                None => check.clone(),
            };
            rows.push(vec![
                report.name.clone(),
                row.task.clone(),
                row.chip.to_string(),
                rings(Resource::TaskWindow, false),
                rings(Resource::Heap, true),
                rings(Resource::DepPool, false),
                human_bytes(row.reserved_bytes),
                human_bytes(row.high_water_bytes),
                if row.sizing.is_none() {
                    "-".to_string()
                } else {
                    format!("{:.1?}", row.wall)
                },
                status,
            ]);
        }
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    for report in reports {
        if !report.result.reserved_per_chip.is_empty() {
            let per_chip: Vec<String> = report
                .result
                .reserved_per_chip
                .iter()
                .enumerate()
                .map(|(i, b)| format!("chip{i} {}", human_bytes(*b)))
                .collect();
            let total: u64 = report.result.reserved_per_chip.iter().sum();
            let _ = writeln!(
                out,
                "case {}: device memory reserved: {} — total {}",
                report.name,
                per_chip.join(", "),
                human_bytes(total)
            );
        }
        for note in &report.result.notes {
            let _ = writeln!(out, "case {}: {note}", report.name);
        }
        if let Err(e) = &report.result.check {
            let _ = writeln!(out, "case {} FAILED: {e}", report.name);
        }
    }
    let pairs: Vec<(String, CaseResult)> = reports
        .iter()
        .map(|r| (r.name.clone(), r.result.clone()))
        .collect();
    for line in file.scene.summary(&pairs) {
        let _ = writeln!(out, "{line}");
    }
    let passed = reports.iter().filter(|r| r.result.passed()).count();
    let _ = writeln!(out, "{passed} passed, {} failed", reports.len() - passed);
    out
}

/// One JSON object per (case, task), with `rings` exactly as `pto config resolve --json`.
pub fn render_json_lines(reports: &[CaseReport]) -> Vec<Value> {
    let mut lines = Vec::new();
    for report in reports {
        let status = if report.result.passed() {
            "ok"
        } else {
            "failed"
        };
        for row in &report.result.rows {
            let error = match &row.error {
                Some(e) => json!({"code": e.code, "name": e.name, "message": e.message}),
                None => Value::Null,
            };
            lines.push(json!({
                "case": report.name,
                "task": row.task,
                "chip": row.chip,
                "status": if row.error.is_some() { "failed" } else { status },
                "rings": row.sizing.as_ref().map(rings_json),
                "arena": row.arena,
                "reserved_bytes": row.reserved_bytes,
                "high_water_bytes": row.high_water_bytes,
                "wall_us": row.wall.as_micros() as u64,
                "check": report.result.check.as_ref().err(),
                "error": error,
            }));
        }
        if report.result.rows.is_empty() {
            lines.push(json!({
                "case": report.name, "task": null, "chip": null, "status": status, "rings": null,
                "arena": null, "reserved_bytes": 0, "high_water_bytes": 0,
                "wall_us": report.wall.as_micros() as u64,
                "check": report.result.check.as_ref().err(), "error": null,
            }));
        }
    }
    lines
}

/// The default output directory of `pto run`.
pub fn default_output() -> PathBuf {
    Path::new("pto-out").to_path_buf()
}
