//! Issue 11 through the real binary: advice pasted back into a scene file reruns and reserves
//! less, per-label blocks, the label family rule, `pto tune`, `pto config resolve --scene`.

use std::path::Path;

use serde_json::Value;

use crate::util::{pto, stderr, stdout};

fn scenes() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes")
}

/// A copy of a shipped scene file in `dir`.
fn copy_scene(dir: &Path, name: &str) -> String {
    std::fs::copy(scenes().join(name), dir.join(name)).unwrap();
    name.to_string()
}

/// `pto run … --json` rows.
fn rows(dir: &Path, args: &[&str]) -> Vec<Value> {
    let out = pto(dir)
        .arg("run")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn total_reserved(rows: &[Value]) -> u64 {
    rows.iter()
        .map(|r| r["reserved_bytes"].as_u64().unwrap())
        .sum()
}

#[test]
fn advice_pasted_back_reruns_and_reserves_less() {
    let dir = tempfile::tempdir().unwrap();
    let scene = copy_scene(dir.path(), "heterogeneous_fanout.toml");
    let case = "per_task_sizing";
    let before = rows(
        dir.path(),
        &[
            &scene,
            "--case",
            case,
            "--fast",
            "--enable-scope-stats",
            "--output",
            "out",
        ],
    );
    let out = pto(dir.path())
        .args([
            "advise",
            "out/per_task_sizing",
            "--scene",
            &scene,
            "--case",
            case,
            "--write",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let block = stdout(&out);
    // One block per config key: the attention job and the `ew` family (ew0..ew7 merged).
    assert!(
        block.contains("[cases.config.tasks.attn.runtime_env]"),
        "{block}"
    );
    assert!(
        block.contains("[cases.config.tasks.ew.runtime_env]"),
        "{block}"
    );
    assert!(!block.contains("tasks.ew3"), "{block}");
    let after = rows(
        dir.path(),
        &[&scene, "--case", "per_task_sizing_advised", "--fast"],
    );
    assert_eq!(after.len(), before.len());
    assert!(after.iter().all(|r| r["status"] == "ok"), "{after:?}");
    assert!(total_reserved(&after) < total_reserved(&before));
    // Every task binds what the advice says, from call_config, on every ring.
    for r in &after {
        for ring in r["rings"].as_array().unwrap() {
            for res in ["task_window", "heap", "dep_pool"] {
                assert_eq!(ring[res]["source"], "call_config", "{r}");
            }
        }
    }
    // The original cases are untouched; writing again replaces the advised case.
    let text = std::fs::read_to_string(dir.path().join(&scene)).unwrap();
    let original = std::fs::read_to_string(scenes().join(&scene)).unwrap();
    assert!(
        text.starts_with(original.trim_end()),
        "the file's start is kept"
    );
    let again = pto(dir.path())
        .args([
            "advise",
            "out/per_task_sizing",
            "--scene",
            &scene,
            "--case",
            case,
            "--write",
        ])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let text = std::fs::read_to_string(dir.path().join(&scene)).unwrap();
    assert_eq!(
        text.matches("name = \"per_task_sizing_advised\"").count(),
        1
    );
}

#[test]
fn many_labels_give_per_label_blocks_for_config_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let scene = copy_scene(dir.path(), "heterogeneous_fanout.toml");
    rows(
        dir.path(),
        &[
            &scene,
            "--case",
            "per_task_sizing",
            "--fast",
            "--enable-scope-stats",
            "--output",
            "out",
        ],
    );
    let out = pto(dir.path()).args(["advise", "out"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let block = stdout(&out);
    assert!(block.contains("[tasks.attn.runtime_env]"), "{block}");
    assert!(block.contains("[tasks.ew3.runtime_env]"), "{block}");
    assert!(
        !block.contains(" 0,") && !block.contains("[0,"),
        "never 0: {block}"
    );
    std::fs::write(dir.path().join("advice.toml"), &block).unwrap();
    let resolved = pto(dir.path())
        .args([
            "config",
            "resolve",
            "--config",
            "advice.toml",
            "--label",
            "attn",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(resolved.status.code(), Some(0), "{}", stderr(&resolved));
    let v: Value = serde_json::from_str(stdout(&resolved).trim()).unwrap();
    assert_eq!(v["rings"][2]["heap"]["source"], "call_config");
    // One environment cannot carry eight sizings.
    let env = pto(dir.path())
        .args(["advise", "out", "--format", "env"])
        .output()
        .unwrap();
    assert_eq!(env.status.code(), Some(2));
    assert!(stderr(&env).contains("--format env"), "{}", stderr(&env));
    // JSON: one line per label.
    let json = pto(dir.path())
        .args(["advise", "out", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(stdout(&json).lines().count(), 9, "attn + ew0..ew7");
}

#[test]
fn a_family_key_sizes_every_member_and_a_member_key_wins() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
scene = "heterogeneous_fanout"
level = 3
[[cases]]
name = "families"
[cases.config.tasks.ew.runtime_env]
ring_heap = 2097152
[cases.config.tasks.ew3.runtime_env]
ring_heap = 4194304
"#;
    std::fs::write(dir.path().join("f.toml"), text).unwrap();
    let rows = rows(dir.path(), &["f.toml", "--fast"]);
    let heap0 = |task: &str| {
        let r = rows.iter().find(|r| r["task"] == task).unwrap();
        r["rings"][0]["heap"]["value"].as_u64().unwrap()
    };
    assert_eq!(heap0("ew3"), 4 << 20);
    assert_eq!(heap0("ew2"), 2 << 20);
    assert_eq!(heap0("ew7"), 2 << 20);
    assert_eq!(heap0("attn"), 256 << 20, "attn keeps the default");
    // `pto config resolve --scene` binds exactly what the run did.
    let out = pto(dir.path())
        .args([
            "config", "resolve", "--scene", "f.toml", "--case", "families", "--label", "ew3",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["rings"][0]["heap"]["value"], 4 << 20);
    // A key that matches no label is a load error listing the scene's labels.
    std::fs::write(
        dir.path().join("g.toml"),
        text.replace("tasks.ew3.", "tasks.ewx."),
    )
    .unwrap();
    let out = pto(dir.path()).args(["run", "g.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("config.tasks.ewx") && err.contains("attn; ew, ew<N>"),
        "{err}"
    );
}

#[test]
fn tune_writes_a_verified_advised_case() {
    let dir = tempfile::tempdir().unwrap();
    let scene = copy_scene(dir.path(), "paged_attention.toml");
    let out = pto(dir.path())
        .args([
            "tune",
            &scene,
            "--case",
            "ringbuffer_stress",
            "--fast",
            "--write",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    for needle in [
        "before",
        "after",
        "verified",
        "heap reserved/high-water",
        "wrote",
    ] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
    let after = rows(
        dir.path(),
        &[&scene, "--case", "ringbuffer_stress_advised", "--fast"],
    );
    assert!(after.iter().all(|r| r["status"] == "ok"));
}

#[test]
fn tune_skips_an_expected_failure_and_refuses_bad_flags() {
    let dir = tempfile::tempdir().unwrap();
    let scene = copy_scene(dir.path(), "heterogeneous_fanout.toml");
    let out = pto(dir.path())
        .args([
            "tune",
            &scene,
            "--case",
            "global_max_on_small_chips",
            "--fast",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("skipped"), "{}", stdout(&out));
    for bad in [
        &["--max-rounds", "1"][..],
        &["--headroom", "-1"],
        &["--case", "nope"],
    ] {
        let out = pto(dir.path())
            .args(["tune", &scene])
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
    }
}

#[test]
fn toml_integers_above_i64_max_say_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("big.toml"),
        "scene = \"vector_example\"\n[[cases]]\nname = \"c\"\n[cases.config.runtime_env]\nring_heap = 18446744073709551615\n",
    )
    .unwrap();
    let out = pto(dir.path()).args(["run", "big.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("line 5") && err.contains("2^63-1"), "{err}");
}

#[test]
fn tune_report_is_one_self_contained_page_with_both_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let scene = copy_scene(dir.path(), "vector_example.toml");
    let out = pto(dir.path())
        .args([
            "tune", &scene, "--case", "defaults", "--fast", "--report", "t.html",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = std::fs::read_to_string(dir.path().join("t.html")).unwrap();
    assert!(
        page.contains("defaults_advised") && page.contains("pto tune"),
        "both rounds"
    );
    for banned in ["http://", "https://", "<script", "<link"] {
        assert!(!page.contains(banned), "{banned}");
    }
    assert!(page.matches("<svg").count() >= 4);
    // Before and after side by side: the chart, the case's row with its verdict, its tasks.
    assert!(page.contains("<h2>Before and after tuning</h2>"));
    assert!(page.contains("<svg class=\"strategies\""));
    assert!(
        page.contains("verified: defaults_advised passes with the advice"),
        "{page}"
    );
    assert!(page.contains("<table class=\"pairs\" data-case=\"defaults\">"));
    // The rounds ran in a temporary directory that is gone: the page does not point there.
    assert!(!page.contains("diagnostics:"), "{page}");
    let kept = dir.path().join("kept");
    let out = pto(dir.path())
        .args([
            "tune", &scene, "--case", "defaults", "--fast", "--report", "k.html",
        ])
        .arg("--output")
        .arg(&kept)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = std::fs::read_to_string(dir.path().join("k.html")).unwrap();
    assert!(page.contains("diagnostics:"));
}

#[test]
fn strict_env_problems_exit_2_in_both_modes_and_say_it_once() {
    let dir = tempfile::tempdir().unwrap();
    for mode in ["in-process", "child-process"] {
        let out = pto(dir.path())
            .arg("run")
            .arg(scenes().join("multi_chip_dispatch.toml"))
            .args([
                "--strict-env",
                "--ring-env",
                "PTO2_RING_HEAP=abc",
                "--fast",
                "--mode",
                mode,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{mode}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.matches("PTO2_RING_HEAP=\"abc\"").count(), 1, "{err}");
        assert_eq!(err.matches("strict environment mode").count(), 1, "{err}");
        assert!(stdout(&out).is_empty(), "no case ran");
    }
}
