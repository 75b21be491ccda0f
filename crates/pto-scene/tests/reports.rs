//! `pto run` reports (issue 11, items 6 and 8): failed tasks keep the sizing they tried to
//! bind, per-task checks, and the self-contained HTML page.

use std::path::{Path, PathBuf};

use pto_node::EndpointMode;
use pto_scene::report_html::{HtmlPage, ScopeSeries, render_html};
use pto_scene::runner::{CaseReport, Diagnostics, RunOptions, run_file};
use pto_scene::scene::TaskSizing;
use pto_scene::{RunnerEnv, SceneFile};
use pto_types::ring_config::env::{EnvSnapshot, EnvSource};

pto_node::test_child_entry!();

fn scene(file: &str) -> SceneFile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenes")
        .join(file);
    SceneFile::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn options(output: &Path, case: Option<&str>, scope_stats: bool) -> RunOptions {
    RunOptions {
        case: case.map(str::to_string),
        output: output.to_path_buf(),
        diagnostics: Diagnostics {
            scope_stats,
            ..Diagnostics::default()
        },
        env: RunnerEnv::new(EndpointMode::InProcess, true),
    }
}

fn run(file: &SceneFile, opts: &RunOptions) -> Vec<CaseReport> {
    run_file(file, opts, |_| {}).unwrap()
}

/// A failed bind's row shows the sizing and footprint the chip resolved before failing: the
/// same as a task with the same config that did bind, and as `TaskSizing::resolve`.
#[test]
fn failed_rows_keep_the_sizing_they_tried_to_bind() {
    let file = scene("heterogeneous_fanout.toml");
    let out = tempfile::tempdir().unwrap();
    let opts = options(out.path(), Some("global_max_on_small_chips"), false);
    let reports = run(&file, &opts);
    let result = &reports[0].result;
    assert!(result.passed(), "{:?}", result.check);
    let bound = result.rows.iter().find(|r| r.task == "ew0").unwrap();
    assert!(bound.error.is_none());
    let failed: Vec<_> = result.rows.iter().filter(|r| r.error.is_some()).collect();
    assert!(!failed.is_empty());
    for row in &failed {
        assert_eq!(row.sizing, bound.sizing, "{}", row.task);
        assert_eq!(row.reserved_bytes, bound.reserved_bytes, "{}", row.task);
        assert_eq!(row.check_cell(), "expected FAIL (DEVICE_MEMORY_EXHAUSTED)");
        assert_eq!(row.status(), "expected_failure");
        assert_eq!(row.high_water_bytes, None);
    }
    let case = file
        .cases
        .iter()
        .find(|c| c.name == "global_max_on_small_chips")
        .unwrap();
    let cfg = case.config.base_call_config();
    let env = EnvSnapshot::take(&EnvSource::process(), false).unwrap();
    let resolved = TaskSizing::resolve(&cfg, &env).unwrap();
    assert_eq!(Some(resolved.sizing), bound.sizing);
    assert_eq!(resolved.footprint.arena, bound.reserved_bytes);
}

/// The HTML page of a run, as `pto run --report` writes it.
fn page(file: &SceneFile, opts: &RunOptions, reports: &[CaseReport]) -> String {
    render_html(&HtmlPage::of_run(file, opts, reports), reports)
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// Renders the page of a shipped scene run with scope stats and checks its structure: every
/// case and task, one bar chart per task that bound, one occupancy chart per ring with samples
/// in the details, the busiest task's rings above them, nothing fetched from anywhere.
#[test]
fn html_report_of_a_shipped_scene_is_self_contained() {
    let file = scene("multi_chip_dispatch.toml");
    let out = tempfile::tempdir().unwrap();
    let opts = options(out.path(), None, true);
    let reports = run(&file, &opts);
    let html = page(&file, &opts, &reports);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    let mut tasks = 0;
    let mut rings = 0;
    let mut overview = 0;
    for report in &reports {
        assert!(html.contains(&format!("data-case=\"{}\"", report.name)));
        let mut busiest = (None, 0);
        for row in &report.result.rows {
            assert!(html.contains(&format!("data-task=\"{}\"", row.task)));
            tasks += 1;
            let stats: PathBuf = row.diagnostics_dir.clone().unwrap();
            let series = ScopeSeries::read(&stats.join("scope_stats/scope_stats.jsonl")).unwrap();
            let n = series.samples.iter().filter(|s| !s.is_empty()).count();
            rings += n;
            if busiest.0.is_none_or(|hw| row.high_water_bytes > hw) {
                busiest = (Some(row.high_water_bytes), n);
            }
        }
        overview += busiest.1;
        assert!(html.contains(&format!("<h3>case {}, task ", report.name)));
    }
    assert!(tasks > 0 && rings > 0);
    assert_eq!(count(&html, "<svg class=\"bars\""), tasks);
    assert_eq!(count(&html, "<svg class=\"occupancy\""), rings);
    assert_eq!(count(&html, "<svg class=\"occupancy overview\""), overview);
    assert_eq!(count(&html, "<svg class=\"strategies\""), 1);
    assert_eq!(count(&html, "<svg"), tasks + rings + overview + 1);
    for forbidden in [
        "http://", "https://", "<script", "<link", "src=", "url(", "@import",
    ] {
        assert!(!html.contains(forbidden), "{forbidden}");
    }
    let without = options(out.path(), None, false);
    let html = page(&file, &without, &reports);
    assert!(html.contains("Occupancy over the run needs <code>--enable-scope-stats</code>"));
    assert_eq!(count(&html, "<svg class=\"occupancy"), 0);
}

/// The cells of the `<tr>` rows of the first `<table class="CLASS">`, as markup.
fn table_rows(html: &str, class: &str) -> Vec<Vec<String>> {
    let start = html
        .find(&format!("<table class=\"{class}\""))
        .unwrap_or_else(|| panic!("no table {class}"));
    let body = &html[start..];
    let body = &body[body.find("<tbody>").unwrap()..body.find("</tbody>").unwrap()];
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let inner = &cell[cell.find('>').unwrap() + 1..];
                    let inner = &inner[..inner.find("</td>").unwrap()];
                    inner.to_string()
                })
                .collect()
        })
        .collect()
}

/// The main job's page answers the product's question at a glance: a chart with a bar per
/// way of sizing that ran every task (the expected failure left out, and said so), every case
/// in a real table with its figures, the over-reserving tasks worst first, and a task that
/// failed to bind never shown as reserving memory.
#[test]
fn the_main_jobs_page_compares_the_sizings_and_ranks_the_waste() {
    let file = scene("heterogeneous_fanout.toml");
    let out = tempfile::tempdir().unwrap();
    let opts = options(out.path(), None, false);
    let reports = run(&file, &opts);
    assert!(reports.iter().all(|r| r.result.passed()));
    let html = page(&file, &opts, &reports);
    let summary = table_rows(&html, "summary");
    let names: Vec<&str> = summary.iter().map(|r| r[0].as_str()).collect();
    let cases: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, cases);
    let times = |case: &str| summary.iter().find(|r| r[0] == case).unwrap()[4].clone();
    assert_eq!(times("per_task_tuned"), "1.00");
    assert!(times("global_max_sizing").parse::<f64>().unwrap() > 5.0);
    assert_eq!(times("global_max_on_small_chips"), "-");
    let chart = &html[html.find("<svg class=\"strategies\"").unwrap()..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    for case in ["global_max_sizing", "per_task_sizing", "per_task_tuned"] {
        assert!(chart.contains(&format!(">{case}</text>")), "{case}");
    }
    assert!(!chart.contains("global_max_on_small_chips"));
    assert!(chart.contains("the leanest"));
    assert!(html.contains(
        "Not charted (the case failed, or a task of it did not run): global_max_on_small_chips."
    ));
    // Worst first, and the worst is the global sizing's element-wise tasks.
    let waste = table_rows(&html, "waste");
    let over: Vec<f64> = waste.iter().map(|r| bytes(&r[3])).collect();
    assert!(over.windows(2).all(|w| w[0] >= w[1]), "{over:?}");
    assert!(
        waste[0][0].starts_with("global_max_sizing"),
        "{:?}",
        waste[0]
    );
    // 4 ew per chip x 4 chips = 8 tasks, merged: one row.
    assert!(html.contains(
        "<span title=\"ew0, ew1, ew2, ew3, ew4, ew5, ew6, ew7\">ew0 … ew7 (8)</span> · chip 0,1,2,3"
    ));
    // The tuned element-wise tasks hold the smallest legal rings: nothing over.
    let tuned_ew = waste
        .iter()
        .find(|r| r[0].starts_with("per_task_tuned<br><small><span title=\"ew0,"))
        .map(|r| r[3].clone());
    assert_eq!(tuned_ew.as_deref(), Some("0 B"), "{waste:?}");
    // A bind that failed asked for an arena it never got.
    assert!(html.contains("arena needed 1.97 MiB, not bound (DEVICE_MEMORY_EXHAUSTED)"));
    let small = &html[html
        .find("data-case=\"global_max_on_small_chips\"")
        .unwrap()..];
    let ew1 = &small[small.find("data-task=\"ew1\"").unwrap()..];
    let ew1 = &ew1[..ew1.find("</details>").unwrap()];
    assert!(
        !ew1.contains("arena reserved") && !ew1.contains("class=\"bars\""),
        "{ew1}"
    );
}

/// `1.97 MiB` as bytes.
fn bytes(text: &str) -> f64 {
    let text = text.replace("<strong>", "").replace("</strong>", "");
    let (n, unit) = text.split_once(' ').unwrap();
    let scale = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        u => panic!("{u}"),
    };
    n.parse::<f64>().unwrap() * scale
}
