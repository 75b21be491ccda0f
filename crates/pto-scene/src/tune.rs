//! `pto tune` (issue 11, item 3): run a case with scope stats, advise, re-run the advised
//! case to verify it, and repeat while a run fails with a capacity error (bounded).
//!
//! Round 0 runs the case as written. Each later round runs `<case>_advised`, built from the
//! scope stats of every earlier round of this tuning (so a failed round's raised lower bound
//! and a passing round's peaks both count). The loop ends when an advised round passes its
//! scene's golden check with no failed task (verified), when a round fails with anything but
//! a ring capacity error, or after `max_rounds` rounds. Nothing is written to the scene file
//! unless the caller asks ([`write_case`](crate::advice::write_case)) and the result is
//! verified.

use std::path::{Path, PathBuf};

use pto_sizing::advise::Headroom;
use toml::Table;

use crate::advice::{
    AdviceTarget, advise_by_key, advised_case, advised_name, find_stats, load_runs, with_case,
};
use crate::figures::CaseFigures;
use crate::file::{MAX_FILE_BYTES, SceneFile, read_text};
use crate::runner::{CaseReport, Diagnostics, RunOptions, run_file};
use crate::scene::{RunnerEnv, TaskRow};

/// Codes of ring capacity errors (`SCOPE_DEADLOCK`, `HEAP_RING_DEADLOCK`,
/// `FLOW_CONTROL_DEADLOCK`, `DEP_POOL_OVERFLOW`): raising the advice can fix them.
const CAPACITY_CODES: [u32; 4] = [1, 2, 3, 4];

/// How to tune.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub headroom: Headroom,
    /// Runs in all, the case as written included (at least 2).
    pub max_rounds: usize,
    /// Where each round writes its diagnostics (`<work>/round<k>/<case>`).
    pub work: PathBuf,
    pub env: RunnerEnv,
}

/// One run of a tuning.
#[derive(Debug)]
pub struct Round {
    /// The case name that ran (`c` or `c_advised`).
    pub case: String,
    pub report: CaseReport,
}

/// What tuning one case found.
#[derive(Debug)]
pub struct Tuning {
    pub case: String,
    pub rounds: Vec<Round>,
    /// The last advised case (verified when `verdict` is `Verified`).
    pub advised: Option<Table>,
    pub verdict: Verdict,
}

/// How a tuning ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The advised case ran and passed with no failed task.
    Verified,
    /// Not tuned, and rightly so (a case that passes by failing).
    Skipped(String),
    /// Tuning did not reach a passing advised case.
    Failed(String),
}

impl Tuning {
    /// The round of the case as written.
    pub fn before(&self) -> &Round {
        &self.rounds[0]
    }

    /// The last round (the verified advised case when `verdict` is `Verified`).
    pub fn after(&self) -> &Round {
        self.rounds.last().expect("a tuning has at least one round")
    }

    /// Every task of the case as written with the same task (label and chip) of the last
    /// round, when there is one.
    pub fn pairs(&self) -> Vec<(&TaskRow, Option<&TaskRow>)> {
        let after = &self.after().report.result.rows;
        self.before()
            .report
            .result
            .rows
            .iter()
            .map(|row| {
                let later = after
                    .iter()
                    .find(|r| r.task == row.task && r.chip == row.chip);
                (row, later)
            })
            .collect()
    }

    /// How it ended: `verified: c_advised passes with the advice`, `skipped: …`,
    /// `not verified: …`.
    pub fn verdict_line(&self) -> String {
        match &self.verdict {
            Verdict::Verified => {
                format!("verified: {} passes with the advice", self.after().case)
            }
            Verdict::Skipped(why) => format!("skipped: {why}"),
            Verdict::Failed(why) => format!("not verified: {why}"),
        }
    }
}

/// Whether every row of a round succeeded and its check passed.
fn clean(report: &CaseReport) -> bool {
    report.result.passed() && report.result.rows.iter().all(|r| r.error.is_none())
}

/// Whether a round failed only with ring capacity errors (which advice can raise).
fn capacity_failure(report: &CaseReport) -> bool {
    let failed: Vec<_> = report
        .result
        .rows
        .iter()
        .filter_map(|r| r.error.as_ref())
        .collect();
    !failed.is_empty()
        && failed
            .iter()
            .all(|e| e.code.is_some_and(|c| CAPACITY_CODES.contains(&c)))
}

/// Tunes case `case` of `file`.
pub fn tune_case(file: &SceneFile, case: &str, options: &TuneOptions) -> anyhow::Result<Tuning> {
    let text = read_text(&file.path, MAX_FILE_BYTES).map_err(anyhow::Error::msg)?;
    let mut tuning = Tuning {
        case: case.to_string(),
        rounds: Vec::new(),
        advised: None,
        verdict: Verdict::Failed("not run".to_string()),
    };
    let first = run_round(file, case, &round_dir(options, 0), &options.env)?;
    let expected_failure = first.result.passed() && !clean(&first);
    let usable = clean(&first) || capacity_failure(&first);
    tuning.rounds.push(Round {
        case: case.to_string(),
        report: first,
    });
    if expected_failure {
        tuning.verdict =
            Verdict::Skipped("the case passes by failing (an expected failure): not tuned".into());
        return Ok(tuning);
    }
    if !usable {
        tuning.verdict = Verdict::Failed(
            "the case as written fails with more than a capacity error: fix it first".into(),
        );
        return Ok(tuning);
    }
    for k in 1..options.max_rounds.max(2) {
        let advised = advise_rounds(file, &text, case, options, k)?;
        let with_advised = with_case(&text, &advised).map_err(anyhow::Error::msg)?;
        let scene = SceneFile::parse(&file.path, &with_advised).map_err(anyhow::Error::msg)?;
        let name = advised_name(case);
        let report = run_round(&scene, &name, &round_dir(options, k), &options.env)?;
        let done = clean(&report);
        let retry = capacity_failure(&report);
        tuning.rounds.push(Round { case: name, report });
        tuning.advised = Some(advised);
        if done {
            tuning.verdict = Verdict::Verified;
            return Ok(tuning);
        }
        if !retry {
            tuning.verdict = Verdict::Failed(format!(
                "the advised case failed with more than a capacity error in round {k}"
            ));
            return Ok(tuning);
        }
    }
    tuning.verdict = Verdict::Failed(format!(
        "still failing with a capacity error after {} rounds",
        tuning.rounds.len()
    ));
    Ok(tuning)
}

fn round_dir(options: &TuneOptions, k: usize) -> PathBuf {
    options.work.join(format!("round{k}"))
}

/// The advised case from the scope stats of rounds `0..k`.
fn advise_rounds(
    file: &SceneFile,
    text: &str,
    case: &str,
    options: &TuneOptions,
    k: usize,
) -> anyhow::Result<Table> {
    let dirs: Vec<PathBuf> = (0..k)
        .map(|r| round_dir(options, r))
        .filter(|d| d.is_dir())
        .collect();
    let files = find_stats(&dirs).map_err(anyhow::Error::msg)?;
    let runs = load_runs(&files).map_err(anyhow::Error::msg)?;
    let target = AdviceTarget {
        scene: Some(file.scene),
        case: file
            .cases
            .iter()
            .find(|c| c.name == case)
            .map(|c| &c.config),
    };
    let groups = advise_by_key(&runs, target, options.headroom);
    advised_case(file, text, case, &groups).map_err(anyhow::Error::msg)
}

/// Runs one case of `file` with scope stats into `dir`.
fn run_round(
    file: &SceneFile,
    case: &str,
    dir: &Path,
    env: &RunnerEnv,
) -> anyhow::Result<CaseReport> {
    let options = RunOptions {
        case: Some(case.to_string()),
        output: dir.to_path_buf(),
        diagnostics: Diagnostics {
            scope_stats: true,
            ..Diagnostics::default()
        },
        env: env.clone(),
    };
    let mut reports = run_file(file, &options, |_| {})?;
    reports
        .pop()
        .ok_or_else(|| anyhow::anyhow!("case {case:?} did not run"))
}

/// `1.15`, or `-` without heap traffic.
fn ratio(row: &crate::scene::TaskRow) -> String {
    row.heap_fit().map_or("-".to_string(), |(r, h)| {
        format!("{:.2}", r as f64 / h as f64)
    })
}

impl Tuning {
    /// Heap reserved by the last round / the largest heap high-water any round of this tuning
    /// saw, over the rings with heap traffic of every task. The high-water of one run depends
    /// on timing (how fast tasks retire); the advice must hold the largest one seen, so that is
    /// what its fit is measured against.
    pub fn heap_ratio(&self) -> Option<f64> {
        let (mut reserved, mut high) = (0u64, 0u64);
        for row in &self.after().report.result.rows {
            let (Some(sizing), Some(_)) = (row.sizing.as_ref(), row.usage.as_ref()) else {
                continue;
            };
            // This task's usage in every round (the same task label on the same chip).
            let seen: Vec<_> = self
                .rounds
                .iter()
                .flat_map(|r| r.report.result.rows.iter())
                .filter(|r| r.task == row.task && r.chip == row.chip)
                .filter_map(|r| r.usage.as_ref())
                .collect();
            let heaps = sizing.values(pto_types::Resource::Heap);
            for (ring, &heap) in heaps.iter().enumerate() {
                let peak = seen.iter().map(|u| u[ring].heap_peak).max().unwrap_or(0);
                if peak > 0 {
                    reserved += heap;
                    high += peak;
                }
            }
        }
        (high > 0).then(|| reserved as f64 / high as f64)
    }
}

/// The text `pto tune` prints for one case: per task the sizing and reserved bytes before and
/// after, the heap's reserved / high-water after, then the totals and the verdict.
pub fn render_tuning(t: &Tuning) -> String {
    use crate::runner::rings_cell;
    use pto_sizing::report::human_bytes;
    use pto_types::Resource;
    use std::fmt::Write as _;
    let (before, after) = (&t.before().report, &t.after().report);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:<5} {:<7} {:<26} {:<30} {:<26} {:<23} {:<16} heap reserved/high-water",
        "task", "chip", "", "task_window", "heap", "dep_pool", "arena", "heap high-water"
    );
    for (row, later) in t.pairs() {
        let rounds = if t.rounds.len() > 1 {
            vec![("before", Some(row)), ("after", later)]
        } else {
            vec![("as is", Some(row))]
        };
        for (when, r) in rounds {
            let Some(r) = r else { continue };
            let _ = writeln!(
                out,
                "{:<16} {:<5} {:<7} {:<26} {:<30} {:<26} {:<23} {:<16} {}",
                if when == "after" { "" } else { r.task.as_str() },
                r.chip,
                when,
                rings_cell(r, Resource::TaskWindow),
                rings_cell(r, Resource::Heap),
                rings_cell(r, Resource::DepPool),
                human_bytes(r.reserved_bytes),
                r.high_water_bytes.map_or("-".to_string(), human_bytes),
                ratio(r),
            );
        }
    }
    let (was, now) = (
        CaseFigures::of(&before.result),
        CaseFigures::of(&after.result),
    );
    let _ = writeln!(
        out,
        "case {}: device memory {} -> {}; heap reserved {} -> {}; heap reserved/high-water {} -> {} ({} against the largest high-water of {} round(s))",
        t.case,
        human_bytes(was.device_memory()),
        human_bytes(now.device_memory()),
        human_bytes(was.heap_reserved),
        human_bytes(now.heap_reserved),
        was.heap_ratio_text(),
        now.heap_ratio_text(),
        t.heap_ratio()
            .map_or("-".to_string(), |x| format!("{x:.2}")),
        t.rounds.len()
    );
    let _ = writeln!(out, "case {}: {}", t.case, t.verdict_line());
    out
}
