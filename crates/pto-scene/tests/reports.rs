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

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// Renders the page of a shipped scene run with scope stats and checks its structure: every
/// case and task, one bar chart per task, one occupancy chart per ring with samples, nothing
/// fetched from anywhere.
#[test]
fn html_report_of_a_shipped_scene_is_self_contained() {
    let file = scene("multi_chip_dispatch.toml");
    let out = tempfile::tempdir().unwrap();
    let opts = options(out.path(), None, true);
    let reports = run(&file, &opts);
    let html = render_html(&HtmlPage::of_run(&file, &opts, &reports), &reports);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    let mut tasks = 0;
    let mut rings = 0;
    for report in &reports {
        assert!(html.contains(&format!("data-case=\"{}\"", report.name)));
        for row in &report.result.rows {
            assert!(html.contains(&format!("data-task=\"{}\"", row.task)));
            tasks += 1;
            let stats: PathBuf = row.diagnostics_dir.clone().unwrap();
            let series = ScopeSeries::read(&stats.join("scope_stats/scope_stats.jsonl")).unwrap();
            rings += series.samples.iter().filter(|s| !s.is_empty()).count();
        }
    }
    assert!(tasks > 0 && rings > 0);
    assert_eq!(count(&html, "<svg class=\"bars\""), tasks);
    assert_eq!(count(&html, "<svg class=\"occupancy\""), rings);
    assert_eq!(count(&html, "<svg"), tasks + rings);
    for forbidden in [
        "http://", "https://", "<script", "<link", "src=", "url(", "@import",
    ] {
        assert!(!html.contains(forbidden), "{forbidden}");
    }
    let without = options(out.path(), None, false);
    let html = render_html(&HtmlPage::of_run(&file, &without, &reports), &reports);
    assert!(html.contains("Occupancy over the run needs <code>--enable-scope-stats</code>"));
    assert_eq!(count(&html, "<svg class=\"occupancy\""), 0);
}
