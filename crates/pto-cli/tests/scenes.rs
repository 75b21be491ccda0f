//! `pto scenes` (issue 11 item 5): every scene with its level, params and labels.

use crate::util::{pto, stderr, stdout};

#[test]
fn scenes_lists_levels_params_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let out = pto(dir.path()).arg("scenes").output().unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    for needle in [
        "heterogeneous_fanout (level 3)",
        "vector_example (level 2)",
        "ew, ew<N>",
        "attn",
        "chip_delay_ms",
        "labels: none",
    ] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
}

#[test]
fn one_scene_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = pto(dir.path())
        .args(["scenes", "heterogeneous_fanout", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["level"], 3);
    let labels = v["labels"].as_array().unwrap();
    assert!(
        labels
            .iter()
            .any(|l| l["name"] == "ew" && l["family"] == true),
        "{v}"
    );
    let n = v["params"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "n")
        .unwrap();
    assert_eq!(n["min"], 1);
}

#[test]
fn an_unknown_scene_is_a_usage_error_listing_the_scenes() {
    let dir = tempfile::tempdir().unwrap();
    let out = pto(dir.path()).args(["scenes", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("multi_chip_dispatch"),
        "{}",
        stderr(&out)
    );
}
