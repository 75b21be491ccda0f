//! `pto bench` (issue 12 item 6): every benchmark runs with `--quick` and its JSON parses.
//! No test asserts a speed.

use crate::util::{pto, stderr, stdout};

#[test]
fn every_bench_runs_quick_and_its_json_has_the_stable_fields() {
    let dir = tempfile::tempdir().unwrap();
    let out = pto(dir.path())
        .args(["bench", "all", "--quick", "--json"])
        .timeout(std::time::Duration::from_secs(110))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut benches = std::collections::BTreeSet::new();
    for line in stdout(&out).lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for field in ["bench", "case", "unit", "median", "min", "max", "runs"] {
            assert!(v.get(field).is_some(), "{field} missing: {line}");
        }
        if v.get("peer").is_some() {
            for field in ["peer_median", "ratio"] {
                assert!(v.get(field).is_some(), "{field} missing: {line}");
            }
        }
        benches.insert(v["bench"].as_str().unwrap().to_string());
    }
    let want: std::collections::BTreeSet<String> = [
        "submit",
        "metg",
        "dispatch",
        "idle",
        "footprint",
        "deadlock",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(benches, want);
}

#[test]
fn the_table_and_an_unknown_bench() {
    let dir = tempfile::tempdir().unwrap();
    let out = pto(dir.path())
        .args(["bench", "footprint", "--quick"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("per_task_tuned: device memory"),
        "{}",
        stdout(&out)
    );
    let out = pto(dir.path()).args(["bench", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("submit"), "{}", stderr(&out));
}
