//! `pto run` (RING_CONFIG.md §11.1): exit status, JSON lines, load errors.

use tempfile::TempDir;

use crate::util::{pto, stderr, stdout};

fn scenes() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes")
}

#[test]
fn run_prints_a_table_and_exits_0() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .arg("run")
        .arg(scenes().join("per_task_runtime_env_l2.toml"))
        .arg("--fast")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.contains("per_ring") && table.contains("128c,64c,32c,16c"),
        "{table}"
    );
    assert!(table.trim_end().ends_with("4 passed, 0 failed"), "{table}");
}

#[test]
fn run_json_prints_one_object_per_case_and_task() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .arg("run")
        .arg(scenes().join("per_task_runtime_env.toml"))
        .args(["--json", "--case", "three_sizings"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let small = lines
        .iter()
        .find(|l| l["task"] == "l2_scalar_small")
        .unwrap();
    assert_eq!(small["case"], "three_sizings");
    assert_eq!(small["status"], "ok");
    assert_eq!(small["rings"].as_array().unwrap().len(), 4);
    assert_eq!(
        small["rings"][2]["heap"],
        serde_json::json!({"value": 1048576, "source": "call_config",
                           "block": "tasks.l2_scalar_small"})
    );
    assert_eq!(small["reserved_bytes"], 4519552);
    assert_eq!(small["error"], serde_json::Value::Null);
}

#[test]
fn misspelled_key_exits_2_naming_the_case_and_allowed_keys() {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("bad.toml"),
        "scene = \"vector_example\"\n[[cases]]\nname = \"typo\"\n[cases.config.runtime_env]\nring_heep = 1024\n",
    )
    .unwrap();
    let out = pto(dir.path()).args(["run", "bad.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("cases[0] (\"typo\")")
            && err.contains("ring_heep (allowed: ring_dep_pool, ring_heap, ring_task_window)"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_failing_case_exits_1_with_its_error() {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("small.toml"),
        "scene = \"vector_example\"\n[[cases]]\nname = \"too_small\"\n[cases.config.runtime_env]\nring_task_window = [0, 4, 0, 0]\n[cases.params]\nn = 1024\nclusters = 1\n",
    )
    .unwrap();
    let out = pto(dir.path())
        .args(["run", "small.toml", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let line: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(line["status"], "failed");
    assert_eq!(line["error"]["name"], "SCOPE_DEADLOCK");
    assert_eq!(line["error"]["code"], 1);
}

#[test]
fn diagnostics_go_under_the_output_directory_per_case() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .arg("run")
        .arg(scenes().join("vector_example.toml"))
        .args([
            "--case",
            "defaults",
            "--enable-scope-stats",
            "--output",
            "diag",
            "--fast",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        dir.path()
            .join("diag/defaults/chip0/run1_task0_vector_example/scope_stats/scope_stats.jsonl")
            .is_file()
    );
}

#[test]
fn child_process_mode_runs_workers_as_processes() {
    let dir = TempDir::new().unwrap();
    for scene in [
        "multi_chip_dispatch.toml",
        "per_task_runtime_env.toml",
        "vector_example.toml",
    ] {
        let out = pto(dir.path())
            .arg("run")
            .arg(scenes().join(scene))
            .args(["--mode", "child-process", "--fast", "--json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{scene}: {}", stderr(&out));
        for line in stdout(&out).lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["status"], "ok", "{line}");
        }
    }
}

/// `war_hazard` with a case that tracks nothing: `--strict` fails it with WAR_HAZARD, the
/// default report mode (tests are debug builds, `--war-check auto` reports) puts the hazard on
/// the case, `--war-check off` says nothing, and the shipped cases (tracked) pass.
#[test]
fn an_untracked_write_after_read_is_reported_or_fails_under_strict() {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("war.toml");
    std::fs::write(
        &file,
        "scene = \"war_hazard\"\nlevel = 2\n\n[[cases]]\nname = \"untracked\"\n\
         [cases.params]\nread_wait_us = 100000\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        pto(dir.path())
            .arg("run")
            .arg(&file)
            .args(extra)
            .output()
            .unwrap()
    };
    let strict = run(&["--strict"]);
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    let table = stdout(&strict);
    assert!(table.contains("FAIL (WAR_HAZARD)"), "{table}");
    assert!(
        table.contains("hazard.fill_with") && table.contains("track_war"),
        "{table}"
    );
    for args in [&["--war-check", "report"][..], &[]] {
        let reported = run(args);
        let table = stdout(&reported);
        assert!(
            table.contains("case untracked: war_hazard: write-after-read hazard: task"),
            "{args:?}: {table}"
        );
    }
    let off = run(&["--war-check", "off"]);
    assert!(
        !stdout(&off).contains("write-after-read"),
        "{}",
        stdout(&off)
    );
    let bad = run(&["--war-check", "loud"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("auto, off, report, strict"),
        "{}",
        stderr(&bad)
    );
    let shipped = pto(dir.path())
        .arg("run")
        .arg(scenes().join("war_hazard.toml"))
        .arg("--strict")
        .output()
        .unwrap();
    assert_eq!(shipped.status.code(), Some(0), "{}", stdout(&shipped));
}

/// The command line's rough edges (issue "What users see and install"): a misspelt command or
/// case gets a "did you mean", an unknown `--ring-env` key is a usage error naming the known
/// ones, and the table and JSON lines say where the chips ran.
#[test]
fn misspellings_get_a_suggestion_and_the_table_names_the_mode() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path()).arg("rn").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("'run'"), "{}", stderr(&out));
    let scene = scenes().join("per_task_runtime_env_l2.toml");
    let run = |extra: &[&str]| {
        pto(dir.path())
            .arg("run")
            .arg(&scene)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--case", "per_rng"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no case named \"per_rng\" (did you mean per_ring?)"),
        "{}",
        stderr(&out)
    );
    let out = run(&["--ring-env", "FOO=1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("FOO is not a ring variable (known: PTO2_RING_TASK_WINDOW"),
        "{err}"
    );
    let out = run(&["--ring-env", "PTO2_RING_HEEP=1048576"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("(did you mean PTO2_RING_HEAP?)"),
        "{}",
        stderr(&out)
    );
    let out = run(&[
        "--fast",
        "--case",
        "per_ring",
        "--ring-env",
        "PTO2_RING_HEAP=1048576",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .contains(", chips in-process)"),
        "{table}"
    );
    let out = run(&[
        "--fast",
        "--case",
        "per_ring",
        "--mode",
        "child-process",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for line in stdout(&out).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["mode"], "child-process", "{line}");
    }
}
