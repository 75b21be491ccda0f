//! `pto advise` (CHIP_RUNTIME.md §7 and row ST3; RING_CONFIG.md §8 and row T86).

use std::path::Path;
use std::process::Output;

use pto_scene::config_block::{SceneLevel, parse_config_block};
use serde_json::json;
use tempfile::TempDir;

use crate::util::{json, pto, stderr, stdout};

/// An ST1-like run following the CHIP_RUNTIME.md §7 example: metadata, root begin, the user
/// scope's begin and end on ring 1, root end.
const ST1: &str = r#"{"schema":"pto.scope_stats","version":1,"fatal":false,"dropped":0,"total":4,"label":"small","clusters":8,"aicpu_thread_num":4,"task_window_max":[16384,8,16384,16384],"heap_max":[268435456,262144,268435456,268435456],"dep_pool_max":[16384,64,16384,16384],"tensormap_max":65536,"task_window_source":["default","call_config","default","default"],"heap_source":["default","call_config","default","default"],"dep_pool_source":["env","call_config","env","env"],"error":null}
{"seq":1,"site":"vector_example.rs:3","phase":"begin","depth":0,"ring":0,"task_window_start":0,"task_window_end":0,"heap_start":0,"heap_end":0,"dep_pool_start":1,"dep_pool_end":1,"tensormap":0,"t_us":1.0}
{"seq":2,"site":"vector_example.rs:5","phase":"begin","depth":1,"ring":1,"task_window_start":0,"task_window_end":0,"heap_start":0,"heap_end":0,"dep_pool_start":1,"dep_pool_end":1,"tensormap":0,"t_us":41.0}
{"seq":3,"site":"vector_example.rs:5","phase":"end","depth":1,"ring":1,"task_window_start":0,"task_window_end":4,"heap_start":0,"heap_end":196608,"dep_pool_start":1,"dep_pool_end":4,"tensormap":1,"task_window_peak":4,"heap_peak":196608,"heap_largest_alloc":65536,"dep_pool_peak":3,"spill_peak":0,"t_us":212.5}
{"seq":4,"site":"vector_example.rs:3","phase":"end","depth":0,"ring":0,"task_window_start":0,"task_window_end":0,"heap_start":0,"heap_end":0,"dep_pool_start":1,"dep_pool_end":1,"tensormap":0,"task_window_peak":0,"heap_peak":0,"heap_largest_alloc":0,"dep_pool_peak":0,"spill_peak":0,"t_us":220.0}
"#;

/// ST3 with issue 11's rules: ring 1's heap capped at the 262144 the run had, unsampled rings
/// at the smallest legal values (never 0, which would fall back to the 256 MiB defaults).
const ST3_TOML: &str = "[runtime_env]\nring_dep_pool = [4, 4, 4, 4]\nring_heap = [1024, 262144, 1024, 1024]\nring_task_window = [4, 8, 4, 4]\n";

/// ST1 with default capacities, so the headroom formula is not capped.
fn roomy() -> String {
    with_meta(
        r#""task_window_max":[16384,8,16384,16384],"heap_max":[268435456,262144,268435456,268435456]"#,
        r#""task_window_max":[16384,16384,16384,16384],"heap_max":[268435456,268435456,268435456,268435456]"#,
    )
}

/// Writes `text` as `scope_stats.jsonl` in a new directory.
fn fixture(text: &str) -> TempDir {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("scope_stats.jsonl"), text).unwrap();
    dir
}

fn advise(dir: &Path, extra: &[&str]) -> Output {
    pto(dir)
        .args(["advise", "scope_stats.jsonl"])
        .args(extra)
        .output()
        .unwrap()
}

/// ST1 with its metadata line edited.
fn with_meta(from: &str, to: &str) -> String {
    let (meta, rest) = ST1.split_once('\n').unwrap();
    assert!(meta.contains(from));
    format!("{}\n{rest}", meta.replace(from, to))
}

#[track_caller]
fn assert_input_error(out: &Output, expect: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(out));
    let err = stderr(out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for part in expect {
        assert!(err.contains(part), "{err:?} does not contain {part:?}");
    }
    assert!(stdout(out).is_empty());
}

#[test]
fn st3_default_toml_on_st1() {
    let dir = fixture(ST1);
    let out = advise(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), ST3_TOML);
    let value: toml::Table = toml::from_str(&stdout(&out)).unwrap();
    assert_eq!(value.len(), 1, "exactly one block");
    let env = value["runtime_env"].as_table().unwrap();
    assert_eq!(env["ring_task_window"][1].as_integer(), Some(8));
    assert_eq!(env["ring_heap"][1].as_integer(), Some(262144));
}

#[test]
fn table_goes_to_stderr() {
    let dir = fixture(ST1);
    let out = advise(dir.path(), &[]);
    let table = stderr(&out);
    assert!(table.contains("headroom 0.25"), "{table}");
    assert!(table.contains("196608 + largest 65536"), "{table}");
    assert!(table.contains("262144 (call_config)"), "{table}");
    assert!(!table.contains(" added"), "{table}");
    assert!(table.contains("16384 (env)"), "{table}");
    assert!(table.contains("1024 (no samples)"), "{table}");
}

#[test]
fn headroom_variants_and_percent_form() {
    let dir = fixture(&roomy());
    let heap_1 = |extra: &[&str]| {
        let out = advise(dir.path(), &[&["--format", "json"][..], extra].concat());
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v = json(&out);
        (
            v["runtime_env"]["ring_task_window"][1].as_u64().unwrap(),
            v["runtime_env"]["ring_heap"][1].as_u64().unwrap(),
            v["runtime_env"]["ring_dep_pool"][1].as_u64().unwrap(),
        )
    };
    assert_eq!(heap_1(&[]), (8, 327680, 4));
    assert_eq!(heap_1(&["--headroom", "0.25"]), (8, 327680, 4));
    assert_eq!(heap_1(&["--headroom", "25%"]), (8, 327680, 4));
    assert_eq!(heap_1(&["--headroom", "0"]), (8, 262144, 4));
    assert_eq!(heap_1(&["--headroom", "1"]), (16, 524288, 6));
    assert_eq!(heap_1(&["--headroom", "100%"]), (16, 524288, 6));
    // Exact decimal: ceil(262144 · 1.1) = 288359 -> 288384.
    assert_eq!(heap_1(&["--headroom", "0.1"]), (8, 288384, 4));
}

#[test]
fn bad_headroom_exits_2() {
    let dir = fixture(ST1);
    let out = advise(dir.path(), &["--headroom", "-0.1"]);
    assert_input_error(&out, &["--headroom", "-0.1", "negative"]);
    let out = advise(dir.path(), &["--headroom=-25%"]);
    assert_input_error(&out, &["--headroom", "negative"]);
    for bad in ["abc", "1e-1", "", "0.2.5"] {
        let out = advise(dir.path(), &["--headroom", bad]);
        assert_input_error(&out, &["--headroom", "25%"]);
    }
}

#[test]
fn toml_output_loads_as_a_config_block_and_under_cases_config() {
    let dir = fixture(ST1);
    let out = advise(dir.path(), &[]);
    let text = stdout(&out);
    // As the `config` table (what `pto config resolve --config` reads).
    let table: toml::Table = toml::from_str(&text).unwrap();
    let block = parse_config_block(&toml::Value::Table(table), "config", SceneLevel::L3).unwrap();
    assert_eq!(block.runtime_env.ring_task_window, [4, 8, 4, 4]);
    assert_eq!(block.runtime_env.ring_heap, [1024, 262144, 1024, 1024]);
    assert_eq!(block.runtime_env.ring_dep_pool, [4, 4, 4, 4]);
    // Pasted under `[cases.config.runtime_env]` of a scene file (T86, checkpoint C4).
    let scene = format!(
        "scene = \"advised\"\nlevel = 2\n[[cases]]\nname = \"a\"\n{}",
        text.replace("[runtime_env]", "[cases.config.runtime_env]")
    );
    let scene: toml::Table = toml::from_str(&scene).unwrap();
    let config = &scene["cases"].as_array().unwrap()[0]["config"];
    let block = parse_config_block(config, "config", SceneLevel::L2).unwrap();
    assert_eq!(block.runtime_env.ring_heap, [1024, 262144, 1024, 1024]);
}

#[test]
fn t86_advise_output_feeds_config_resolve() {
    let dir = fixture(ST1);
    let out = advise(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::write(dir.path().join("out.toml"), &out.stdout).unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--config", "out.toml", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    // The file's [runtime_env] block set every value (issue 23: the block is named).
    let cc = |value: u64| json!({"value": value, "source": "call_config", "block": "runtime_env"});
    assert_eq!(v["rings"][1]["task_window"], cc(8));
    assert_eq!(v["rings"][1]["heap"], cc(262144));
    assert_eq!(v["rings"][1]["dep_pool"], cc(4));
    assert_eq!(v["rings"][0]["task_window"], cc(4));
    assert_eq!(v["rings"][0]["heap"], cc(1024));
    // Every ring is set: nothing falls back to the 256 MiB default.
    assert_eq!(v["rings"][2]["heap"], cc(1024));
    assert_eq!(v["rings"][3]["task_window"], cc(4));
}

#[test]
fn env_format_has_the_same_values_as_toml() {
    let dir = fixture(ST1);
    let out = advise(dir.path(), &["--format", "env"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "PTO2_RING_TASK_WINDOW=4,8,4,4\n\
         PTO2_RING_HEAP=1024,262144,1024,1024\n\
         PTO2_RING_DEP_POOL=4,4,4,4\n"
    );
    // The lines are valid environment values: config resolve accepts them in strict mode.
    let mut cmd = pto(dir.path());
    cmd.args(["config", "resolve", "--strict-env", "--json"]);
    for line in stdout(&out).lines() {
        cmd.args(["--env", line]);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        v["rings"][1]["heap"],
        json!({"value": 262144, "source": "env"})
    );
    assert_eq!(v["problems"], json!([]));
}

#[test]
fn json_format_has_runtime_env_and_rings() {
    let dir = fixture(ST1);
    let out = advise(dir.path(), &["--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        v["runtime_env"],
        json!({
            "ring_task_window": [4, 8, 4, 4],
            "ring_heap": [1024, 262144, 1024, 1024],
            "ring_dep_pool": [4, 4, 4, 4]
        })
    );
    let rings = v["rings"].as_array().unwrap();
    assert_eq!(rings.len(), 4);
    assert_eq!(rings[1]["ring"], 1);
    assert_eq!(rings[1]["peaks"]["heap_largest_alloc"], 65536);
    assert_eq!(
        rings[1]["heap"],
        json!({"demand": 262144, "capacity": 262144, "source": "call_config",
               "recommended": 262144, "lower_bound": false, "bytes_delta": 0})
    );
    assert_eq!(rings[3]["peaks"], serde_json::Value::Null);
    assert_eq!(rings[3]["task_window"]["recommended"], 4);
    assert_eq!(v["label"], "small");
    assert_eq!(v["runs"], 1);
}

#[test]
fn failed_run_raises_the_affected_resource_to_a_lower_bound() {
    let text = with_meta(
        r#""error":null"#,
        r#""error":{"code":1,"name":"SCOPE_DEADLOCK","ring":2,"resource":"task_window","requested":1,"used":7,"recommended_min":16}"#,
    );
    // Ring 2 ran with a window of 8 and needed 16.
    let text = text.replace(
        r#""task_window_max":[16384,8,16384,16384]"#,
        r#""task_window_max":[16384,8,8,16384]"#,
    );
    let dir = fixture(&text.replace(r#""fatal":false"#, r#""fatal":true"#));
    let out = advise(dir.path(), &["--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    // A failed run keeps its capacities (the part that never ran may need them) and raises
    // the failing one to its recommended minimum.
    assert_eq!(
        v["runtime_env"]["ring_task_window"],
        json!([16384, 8, 16, 16384])
    );
    assert_eq!(v["rings"][2]["task_window"]["lower_bound"], true);
    assert_eq!(v["rings"][1]["task_window"]["lower_bound"], false);
    let err = stderr(&out);
    assert!(err.contains(">= 16 (lower bound)"), "{err}");
    assert!(err.contains("SCOPE_DEADLOCK (1)"), "{err}");
    // A recommended_min below the peak-based value does not lower it, but flags it.
    let text = with_meta(
        r#""error":null"#,
        r#""error":{"code":2,"name":"HEAP_RING_DEADLOCK","ring":1,"resource":"heap","requested":65536,"used":131072,"recommended_min":196608}"#,
    );
    let dir = fixture(&text);
    let v = json(&advise(dir.path(), &["--format", "json"]));
    assert_eq!(v["rings"][1]["heap"]["recommended"], 262144);
    assert_eq!(v["rings"][1]["heap"]["lower_bound"], true);
}

#[test]
fn malformed_input_exits_2_naming_the_line_and_field() {
    let bad_peak = ST1.replace(r#""heap_peak":196608"#, r#""heap_peak":"lots""#);
    let dir = fixture(&bad_peak);
    let out = advise(dir.path(), &[]);
    assert_input_error(
        &out,
        &["scope_stats.jsonl", "line 4", "heap_peak", "\"lots\""],
    );

    let dir = fixture(&with_meta(r#""version":1"#, r#""version":7"#));
    assert_input_error(&advise(dir.path(), &[]), &["line 1", "version", "7"]);

    let dir = fixture(&format!("{ST1}{{\"phase\":\"end\",\"ring\":1\n"));
    assert_input_error(&advise(dir.path(), &[]), &["line 6", "not valid JSON"]);

    let dir = fixture("");
    assert_input_error(&advise(dir.path(), &[]), &["line 1", "empty file"]);

    let dir = fixture(&ST1.replace(
        r#""phase":"begin","depth":1"#,
        r#""phase":"start","depth":1"#,
    ));
    assert_input_error(&advise(dir.path(), &[]), &["line 3", "phase", "\"start\""]);

    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("scope_stats.jsonl"), b"\xff\xfe\n").unwrap();
    assert_input_error(&advise(dir.path(), &[]), &["scope_stats.jsonl", "UTF-8"]);
}

#[test]
fn missing_file_exits_2() {
    let dir = TempDir::new().unwrap();
    let out = advise(dir.path(), &[]);
    assert_input_error(&out, &["scope_stats.jsonl", "No such file"]);
}
