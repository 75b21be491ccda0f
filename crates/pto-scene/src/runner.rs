//! The case runner behind `pto run` (RING_CONFIG.md §11.1): runs the cases of a scene file,
//! prints a result table (or one JSON object per case and task, [`JsonRow`]) and says whether
//! all passed.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pto_chip::diag::json_line;
use pto_node::EndpointMode;
use pto_types::{CallConfig, Resource, WarCheck};

use crate::figures::CaseFigures;
use crate::file::{Case, SceneFile};
use crate::params::{cut, key_list};
use crate::scene::RemoteSource;
use crate::scene::{CaseResult, CaseRun, RunnerEnv, TaskRow};
use pto_sizing::report::human_bytes;

mod json;
pub use json::{JsonCaseFigures, JsonRow, JsonTaskError, json_rows};

/// Diagnostics chosen on the command line; each case writes under `<output>/<case name>`.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    pub scope_stats: bool,
    pub swimlane: u8,
    pub dep_gen: bool,
    /// What chips do about an unordered write-after-read (`--war-check`; `--strict` makes it
    /// `strict`).
    pub war_check: WarCheck,
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
#[derive(Clone, Debug)]
pub struct CaseReport {
    pub name: String,
    pub result: CaseResult,
    pub wall: Duration,
    /// Distinct problems of the chips' environment, in first-seen order: as the chips reported
    /// them on the rows (the case's snapshot when no task row exists).
    pub env_problems: Vec<String>,
    /// The files the case's diagnostics wrote (`None` when no diagnostics flag is on).
    pub diagnostics: Option<DiagnosticsFiles>,
    /// Where the case's chips and sub workers ran (`--mode`).
    pub mode: EndpointMode,
}

/// The diagnostics files under one case's output directory.
#[derive(Clone, Debug)]
pub struct DiagnosticsFiles {
    /// `<output>/<case name>`.
    pub dir: PathBuf,
    /// Regular files below `dir`, relative to it, sorted.
    pub files: Vec<PathBuf>,
}

/// Most files listed per case; a chip writes at most four per run.
const MAX_LISTED_FILES: usize = 100_000;

impl DiagnosticsFiles {
    /// Lists the regular files below `dir` (symlinks are not followed; a directory that
    /// cannot be read lists nothing).
    pub fn scan(dir: &Path) -> DiagnosticsFiles {
        let files = regular_files_under(dir, MAX_LISTED_FILES)
            .into_iter()
            .map(|p| p.strip_prefix(dir).map(Path::to_path_buf).unwrap_or(p))
            .collect();
        DiagnosticsFiles {
            dir: dir.to_path_buf(),
            files,
        }
    }

    /// `DIR/ (2 task directories, 8 files: dep_gen, scope_stats, swimlane)`: each file is
    /// `<task directory>/<kind>/<name>` (pto-chip's layout).
    pub fn describe(&self) -> String {
        let dir = self.dir.display();
        if self.files.is_empty() {
            return format!("{dir}/ (no files written)");
        }
        let mut tasks = BTreeSet::new();
        let mut kinds = BTreeSet::new();
        for f in &self.files {
            let parts: Vec<_> = f.iter().collect();
            if parts.len() >= 2 {
                kinds.insert(parts[parts.len() - 2].to_string_lossy().into_owned());
                tasks.insert(parts[..parts.len() - 2].to_vec());
            }
        }
        let count =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{dir}/ ({}, {}: {})",
            count(tasks.len(), "task directory", "task directories"),
            count(self.files.len(), "file", "files"),
            kinds.into_iter().collect::<Vec<_>>().join(", ")
        )
    }
}

/// The regular files below `dir` (at most `limit`), recursively, sorted by path; symlinks are
/// not followed and a directory that cannot be read lists nothing.
pub(crate) fn regular_files_under(dir: &Path, limit: usize) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() && files.len() < limit {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    files
}

/// Distinct problems of the rows, or of `snapshot` when there are no rows.
fn env_problems_of(result: &CaseResult, run: &CaseRun<'_>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let from_rows = result
        .rows
        .iter()
        .flat_map(|r| r.env_problems.iter().cloned());
    let snapshot: Vec<String> = match result.rows.is_empty() {
        true => run
            .chip_env()
            .problems
            .iter()
            .map(|p| p.to_string())
            .collect(),
        false => Vec::new(),
    };
    for p in from_rows.chain(snapshot) {
        if seen.insert(p.clone()) {
            out.push(p);
        }
    }
    out
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
        anyhow::bail!(no_such_case(file, options.case.as_deref().unwrap_or("")));
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
        for row in &mut result.rows {
            row.blocks = row
                .sizing
                .as_ref()
                .map(|sizing| case.config.blocks_for(&row.task, sizing));
        }
        if let Some(code) = case.expect_failure {
            expect_failure(&mut result, code);
        }
        let warnings: Vec<String> = result
            .rows
            .iter()
            .flat_map(|row| {
                row.warnings
                    .iter()
                    .map(move |w| format!("{}: {w}", row.task))
            })
            .collect();
        result.notes.extend(warnings);
        let unrequested = run.unrequested_labels();
        if result.check.is_ok() && !unrequested.is_empty() {
            result.check = Err(format!(
                "label(s) declared under config.tasks but never requested by the orchestration: {}",
                unrequested.join(", ")
            ));
        }
        progress(&case.name);
        reports.push(CaseReport {
            mode: options.env.mode,
            name: case.name.clone(),
            env_problems: env_problems_of(&result, &run),
            diagnostics: options
                .diagnostics
                .any()
                .then(|| DiagnosticsFiles::scan(&output)),
            result,
            wall: started.elapsed(),
        });
    }
    Ok(reports)
}

/// A case that expects `code` passes when a task failed with it, and only then (its rows are
/// marked expected); it fails when every task succeeded or one failed otherwise.
fn expect_failure(result: &mut CaseResult, code: pto_types::ErrorCode) {
    let failed_so = result.expect_failures(code);
    let others: Vec<String> = result
        .rows
        .iter()
        .filter_map(|r| r.error.as_ref())
        .filter(|e| !e.expected && !e.skipped)
        .map(|e| format!("{}: {}", e.name, e.message))
        .collect();
    result.check = match (failed_so, others.first(), &result.check) {
        (true, None, _) => Ok(()),
        (true, Some(other), _) => Err(format!(
            "expected {}, and a task also failed otherwise: {other}",
            code.name()
        )),
        (false, _, Err(e)) => Err(format!("expected {}, but: {e}", code.name())),
        (false, _, Ok(())) => Err(format!(
            "expected {}, but every task succeeded",
            code.name()
        )),
    };
    if result.check.is_ok() {
        result
            .notes
            .push(format!("failed as expected ({})", code.name()));
    }
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
        track_war: case.config.track_war,
        war_check: options.diagnostics.war_check,
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
    let given = options.env.remote.len();
    let source = options.env.remote_source;
    let level = file.scene.level();
    if (given > 0 || source == RemoteSource::Mpi) && level != crate::SceneLevel::L4 {
        let what = match source {
            RemoteSource::Flags => "--remote",
            RemoteSource::Mpi => "--launcher mpi",
        };
        return Err(format!(
            "{}: {what} is for level-4 scenes; this one is level {}",
            file.path.display(),
            level.number()
        ));
    }
    file.cases
        .iter()
        .filter(|c| options.case.as_deref().is_none_or(|n| n == c.name))
        .try_for_each(|case| {
            if let Some(needed) = file.scene.remote_workers(&case.config) {
                let fits = match source {
                    RemoteSource::Flags => given == 0 || given == needed,
                    RemoteSource::Mpi => given >= needed,
                };
                if !fits {
                    return Err(format!(
                        "case {}: needs {needed} remote worker(s) (config.device_count), {}",
                        case.name,
                        source.describe(given)
                    ));
                }
            }
            base_config(file, case, options).map(|_| ())
        })
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

/// What the letters after sizing values mean.
pub const SOURCE_LEGEND: &str = "t = tasks.<label>, f = tasks.<family>, c = call_config (the \
     case's runtime_env, or a config the scene built), e = env, d = default";

/// The result table: one row per (case, task), then each case's footer lines.
pub fn render_table(file: &SceneFile, reports: &[CaseReport]) -> String {
    let mut out = String::new();
    // Every case of a run has the same mode; say it, since the Worker APIs and `pto serve`
    // default to child processes and `pto run` to in-process.
    let mode = reports
        .first()
        .map_or(String::new(), |r| format!(", chips {}", r.mode));
    let _ = writeln!(
        out,
        "scene {} ({}{mode}): sizing per ring as value+source ({SOURCE_LEGEND})",
        file.scene.name(),
        file.path.display()
    );
    let header = TABLE_HEADER;
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for report in reports {
        if report.result.rows.is_empty() {
            let mut cells = vec![report.name.clone()];
            cells.extend(std::iter::repeat_n("-".to_string(), header.len() - 1));
            rows.push(cells);
        }
        rows.extend(
            report
                .result
                .rows
                .iter()
                .map(|row| table_row(&report.name, row)),
        );
    }
    out.push_str(&aligned(&rows));
    for report in reports {
        for line in case_footer(report) {
            let _ = writeln!(out, "case {}{line}", report.name);
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

/// The per-ring cells of `resource` of a row: `16384d,16384d,64c,8Kt`, or `-` without a
/// sizing.
pub fn rings_cell(row: &TaskRow, resource: Resource) -> String {
    let Some(s) = &row.sizing else {
        return "-".to_string();
    };
    s.cells_with(resource, |ring, v| {
        row.block(resource, ring)
            .map_or(v.source.letter(), |b| b.letter())
    })
}

/// The columns of the result table ([`table_row`]).
pub const TABLE_HEADER: [&str; 10] = [
    "case",
    "task",
    "chip",
    "task_window",
    "heap",
    "dep_pool",
    "arena",
    "heap high-water",
    "wall",
    "check",
];

/// One task's cells of the result table, in [`TABLE_HEADER`] order (the terminal table and
/// the HTML report's task tables). Failed tasks keep the sizing they bound or tried to bind.
pub fn table_row(case: &str, row: &TaskRow) -> Vec<String> {
    vec![
        case.to_string(),
        row.task.clone(),
        row.chip.to_string(),
        rings_cell(row, Resource::TaskWindow),
        rings_cell(row, Resource::Heap),
        rings_cell(row, Resource::DepPool),
        arena_cell(row),
        row.high_water_bytes.map_or("-".to_string(), human_bytes),
        row.wall.map_or("-".to_string(), |w| format!("{w:.1?}")),
        row.check_cell(),
    ]
}

/// The arena column: the bytes the task's sizing reserves (or a failed bind asked for), `-`
/// for a skipped task or one without a sizing.
pub fn arena_cell(row: &TaskRow) -> String {
    let skipped = row.error.as_ref().is_some_and(|e| e.skipped);
    if skipped || row.sizing.is_none() {
        "-".to_string()
    } else {
        human_bytes(row.reserved_bytes)
    }
}

/// `rows` as left-aligned columns separated by two spaces.
fn aligned(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// The footer lines of one case, each to follow `case <name>`: reserved memory, notes,
/// environment problems (once each), where diagnostics went, and the case's result.
pub fn case_footer(report: &CaseReport) -> Vec<String> {
    let mut lines = Vec::new();
    let result = &report.result;
    if !result.rows.is_empty() || !result.reserved_per_chip.is_empty() {
        lines.push(format!(": {}", CaseFigures::of(result).describe()));
    }
    lines.extend(result.notes.iter().map(|n| format!(": {n}")));
    lines.extend(
        report
            .env_problems
            .iter()
            .map(|p| format!(": env problem: {p}")),
    );
    if let Some(d) = &report.diagnostics {
        lines.push(format!(": diagnostics: {}", d.describe()));
    }
    lines.push(match &result.check {
        Ok(()) => ": pass".to_string(),
        Err(e) => format!(" FAILED: {e}"),
    });
    lines
}

/// `pto run --json`: one [`JsonRow`] per line ([`json_rows`]).
pub fn render_json_lines(reports: &[CaseReport]) -> String {
    json_rows(reports).iter().map(json_line).collect()
}

/// The message for a `--case` that names no case of `file`, with the nearest name if any.
pub fn no_such_case(file: &SceneFile, name: &str) -> String {
    let names = || file.cases.iter().map(|c| c.name.as_str());
    format!(
        "{}: no case named {:?}{} (cases: {})",
        file.path.display(),
        cut(name),
        pto_types::suggest::did_you_mean(name, names()),
        key_list(names())
    )
}

/// The default output directory of `pto run`.
pub fn default_output() -> PathBuf {
    Path::new("pto-out").to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostics_are_described_by_task_directory_and_kind() {
        let dir = tempfile::tempdir().unwrap();
        let case = dir.path().join("c");
        for f in [
            "chip0/run1_task0_a/scope_stats/scope_stats.jsonl",
            "chip0/run1_task0_a/dep_gen/deps.json",
            "chip1/run1_task1_b/scope_stats/scope_stats.jsonl",
        ] {
            let path = case.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        let files = DiagnosticsFiles::scan(&case);
        assert_eq!(files.files.len(), 3);
        assert_eq!(
            files.describe(),
            format!(
                "{}/ (2 task directories, 3 files: dep_gen, scope_stats)",
                case.display()
            )
        );
        let empty = DiagnosticsFiles::scan(&dir.path().join("missing"));
        assert!(empty.describe().ends_with("/ (no files written)"));
    }
}
