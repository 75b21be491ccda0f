//! `pto run` reports (issue 11, items 6 and 8): failed rows keep their sizing, the check column
//! is per task, env problems and diagnostics locations in the case footer, one diagnostics
//! layout in both modes, and `--report FILE.html`.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::util::{pto, stderr, stdout};

fn scenes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes")
}

/// The table lines of `case` whose task is `task`.
fn row<'a>(table: &'a str, case: &str, task: &str) -> &'a str {
    table
        .lines()
        .find(|l| {
            let mut cells = l.split_whitespace();
            cells.next() == Some(case) && cells.next() == Some(task)
        })
        .unwrap_or_else(|| panic!("no row {case} {task}:\n{table}"))
}

#[test]
fn failed_rows_keep_their_sizing_and_are_marked_expected() {
    let dir = TempDir::new().unwrap();
    let run = |json: bool| {
        let mut cmd = pto(dir.path());
        cmd.arg("run")
            .arg(scenes().join("heterogeneous_fanout.toml"))
            .args(["--fast", "--case", "global_max_on_small_chips"]);
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = run(false);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    let failed = row(&table, "global_max_on_small_chips", "ew1");
    assert!(
        failed.contains("64c,64c,64c,64c")
            && failed.contains("64Kc,128Kc,512Kc,64Kc")
            && failed.contains("1.97 MiB")
            && failed.ends_with("expected FAIL (DEVICE_MEMORY_EXHAUSTED)"),
        "{failed}"
    );
    assert!(row(&table, "global_max_on_small_chips", "attn").ends_with("  ok"));
    assert!(
        table.contains("case global_max_on_small_chips: pass\n"),
        "{table}"
    );
    let out = run(true);
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failed: Vec<_> = lines.iter().filter(|l| !l["error"].is_null()).collect();
    assert!(!failed.is_empty());
    // A failed bind reserves what the same sizing reserved where it fit (ew0 on chip 0).
    let bound = lines.iter().find(|l| l["task"] == "ew0").unwrap();
    assert!(bound["reserved_bytes"].as_u64().unwrap() > 0);
    for l in failed {
        assert_eq!(l["rings"].as_array().map(Vec::len), Some(4), "{l}");
        assert_eq!(l["rings"][0]["heap"]["value"], 65536);
        assert_eq!(l["reserved_bytes"], bound["reserved_bytes"]);
        assert_eq!(l["status"], "expected_failure");
        assert_eq!(l["task_check"], "expected FAIL (DEVICE_MEMORY_EXHAUSTED)");
        assert_eq!(l["error"]["code"], 1004);
        assert_eq!(l["case_status"], "ok");
    }
}

#[test]
fn check_column_is_per_task_with_the_code_name() {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("s.toml"),
        "scene = \"vector_example\"\n\
         [[cases]]\nname = \"fine\"\n[cases.params]\nn = 64\n\
         [[cases]]\nname = \"too_small\"\n[cases.config.runtime_env]\n\
         ring_task_window = [0, 4, 0, 0]\n[cases.params]\nn = 1024\nclusters = 1\n",
    )
    .unwrap();
    let out = pto(dir.path()).args(["run", "s.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let table = stdout(&out);
    assert!(
        row(&table, "fine", "vector_example").ends_with("  ok"),
        "{table}"
    );
    let failed = row(&table, "too_small", "vector_example");
    assert!(
        failed.contains("16384d,4c,16384d,16384d") && failed.ends_with("FAIL (SCOPE_DEADLOCK)"),
        "{failed}"
    );
    assert!(!failed.contains(" 0 B "), "{failed}");
    assert!(table.contains("case fine: pass\n"), "{table}");
    assert!(
        table.contains("case too_small FAILED: SCOPE_DEADLOCK: "),
        "{table}"
    );
}

#[test]
fn env_problems_appear_once_in_the_case_footer() {
    let dir = TempDir::new().unwrap();
    for mode in ["in-process", "child-process"] {
        let out = pto(dir.path())
            .arg("run")
            .arg(scenes().join("per_task_runtime_env.toml"))
            .args(["--fast", "--case", "three_sizings", "--mode", mode])
            .args(["--ring-env", "PTO2_RING_HEAP=abc"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        let table = stdout(&out);
        let problems: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("case three_sizings: env problem: "))
            .collect();
        assert_eq!(problems.len(), 1, "{mode}: {table}");
        assert!(
            problems[0].contains("PTO2_RING_HEAP=\"abc\" ignored"),
            "{mode}: {table}"
        );
    }
}

#[test]
fn each_case_says_where_its_diagnostics_went() {
    let dir = TempDir::new().unwrap();
    let scene = scenes().join("vector_example.toml");
    let out = pto(dir.path())
        .arg("run")
        .arg(&scene)
        .args(["--fast", "--enable-scope-stats", "--output", "diag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    for case in ["defaults", "ring1_sized"] {
        let line = format!(
            "case {case}: diagnostics: diag/{case}/ (1 task directory, 1 file: scope_stats)"
        );
        assert!(table.contains(&line), "{table}");
    }
    let out = pto(dir.path())
        .arg("run")
        .arg(&scene)
        .arg("--fast")
        .output()
        .unwrap();
    assert!(!stdout(&out).contains("diagnostics:"), "{}", stdout(&out));
}

/// Regular files below `dir`, relative to it, sorted.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    files
}

#[test]
fn diagnostics_layout_is_the_same_in_both_modes() {
    let dir = TempDir::new().unwrap();
    for scene in ["vector_example.toml", "multi_chip_dispatch.toml"] {
        let mut lists = Vec::new();
        for mode in ["in-process", "child-process"] {
            let output = format!("{mode}-{scene}");
            let out = pto(dir.path())
                .arg("run")
                .arg(scenes().join(scene))
                .args(["--fast", "--mode", mode, "--output", &output])
                .args(["--enable-scope-stats", "--enable-dep-gen"])
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{scene} {mode}: {}",
                stderr(&out)
            );
            lists.push(files_below(&dir.path().join(output)));
        }
        assert!(!lists[0].is_empty(), "{scene}");
        assert_eq!(lists[0], lists[1], "{scene}");
        assert!(
            lists[0].iter().all(|f| f.components().count() == 5),
            "<case>/chip<c>/run<r>_task<t>_<label>/<kind>/<file>: {:?}",
            lists[0]
        );
    }
}

#[test]
fn report_writes_one_self_contained_html_page() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .arg("run")
        .arg(scenes().join("multi_chip_dispatch.toml"))
        .args(["--fast", "--enable-scope-stats", "--report", "r.html"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The run says where the page went, on stderr (stdout keeps the table).
    assert!(
        stderr(&out).contains("pto: wrote the HTML report to r.html ("),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("wrote the HTML report"));
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    for name in [
        "data-case=\"two_chips_one_sub\"",
        "data-task=\"add0\"",
        "data-task=\"add1\"",
    ] {
        assert!(html.contains(name), "{name}");
    }
    assert!(html.contains("<svg class=\"bars\"") && html.contains("<svg class=\"occupancy\""));
    for forbidden in ["http://", "https://", "<script", "<link", "src=", "url("] {
        assert!(!html.contains(forbidden), "{forbidden}");
    }
}

#[test]
fn an_unwritable_report_file_exits_2_naming_it_before_any_case_runs() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .arg("run")
        .arg(scenes().join("vector_example.toml"))
        .args(["--fast", "--report", "missing/r.html"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with("pto: --report missing/r.html: cannot write: "),
        "{err}"
    );
    assert_eq!(stdout(&out), "");
}
