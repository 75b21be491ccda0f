//! `pto config resolve` (RING_CONFIG.md §8, row T61, and the precedence rules of §5).

use serde_json::json;
use tempfile::TempDir;

use crate::util::{json, pto, stderr, stdout};

fn ring(value: &serde_json::Value, ring: usize, resource: &str) -> (u64, String) {
    let entry = &value["rings"][ring][resource];
    (
        entry["value"].as_u64().unwrap(),
        entry["source"].as_str().unwrap().to_string(),
    )
}

#[test]
fn t61_call_config_beats_env_per_ring() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--task-window", "128,0,0,0"])
        .args(["--env", "PTO2_RING_TASK_WINDOW=64", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        v["rings"][0]["task_window"],
        json!({"value": 128, "source": "call_config"})
    );
    assert_eq!(
        v["rings"][1]["task_window"],
        json!({"value": 64, "source": "env"})
    );
    assert_eq!(v["rings"].as_array().unwrap().len(), 4);
    for r in 0..4 {
        assert_eq!(v["rings"][r]["ring"], r);
    }
    assert_eq!(v["problems"], json!([]));
}

#[test]
fn t61_strict_env_problem_exits_2_naming_the_variable() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--task-window", "128,0,0,0"])
        .args([
            "--env",
            "PTO2_RING_TASK_WINDOW=64",
            "--env",
            "PTO2_RING_HEAP=-1",
        ])
        .args(["--strict-env", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("PTO2_RING_HEAP"), "{err}");
    assert!(err.contains("-1"), "{err}");
    assert!(stdout(&out).is_empty());
}

#[test]
fn without_strict_the_problem_is_reported_and_the_default_used() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--env", "PTO2_RING_HEAP=-1", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(ring(&v, 2, "heap"), (268435456, "default".into()));
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0]
            .as_str()
            .unwrap()
            .contains("PTO2_RING_HEAP=\"-1\" ignored")
    );
}

#[test]
fn spec_example_footprint_and_derived() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--task-window", "16"])
        .args([
            "--env",
            "PTO2_RING_HEAP=1048576",
            "--env",
            "PTO2_RING_DEP_POOL=-4",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["derived"]["scope_task_cap"], 64);
    assert_eq!(v["derived"]["heap_total"], 4194304);
    assert_eq!(
        v["footprint"],
        json!({"image": 318848, "deps": 1573120, "heaps": 4194304, "arena": 6086272})
    );
    assert_eq!(ring(&v, 0, "dep_pool"), (16384, "default".into()));
}

#[test]
fn invalid_flag_value_exits_2_naming_field_ring_and_value() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--task-window", "16,32,48,64"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("runtime_env.ring_task_window[2]=48"), "{err}");
    assert_eq!(err.trim().lines().count(), 1);
}

#[test]
fn malformed_flag_lists_exit_2() {
    let dir = TempDir::new().unwrap();
    for bad in ["1,2,3", "abc", "-4"] {
        let out = pto(dir.path())
            .args(["config", "resolve", "--heap", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--heap {bad}");
        assert!(stderr(&out).contains("--heap"), "{}", stderr(&out));
    }
}

#[test]
fn config_file_and_env_precedence_per_ring() {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("cfg.toml"),
        "runtime_env = { ring_heap = 1048576, ring_task_window = [16, 0, 64, 0] }\n",
    )
    .unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--config", "cfg.toml"])
        .args([
            "--env",
            "PTO2_RING_TASK_WINDOW=256",
            "--env",
            "PTO2_RING_HEAP=4194304",
        ])
        .args(["--env", "PTO2_RING_DEP_POOL=100", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let windows: Vec<(u64, String)> = (0..4).map(|r| ring(&v, r, "task_window")).collect();
    assert_eq!(
        windows,
        [
            (16, "call_config".into()),
            (256, "env".into()),
            (64, "call_config".into()),
            (256, "env".into())
        ]
    );
    assert_eq!(ring(&v, 3, "heap"), (1048576, "call_config".into()));
    assert_eq!(ring(&v, 1, "dep_pool"), (100, "env".into()));
}

#[test]
fn flags_override_the_config_file() {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("cfg.toml"),
        "[runtime_env]\nring_task_window = 64\n[tasks.small.runtime_env]\nring_heap = 2048\n",
    )
    .unwrap();
    let out = pto(dir.path())
        .args([
            "config", "resolve", "--config", "cfg.toml", "--label", "small",
        ])
        .args(["--task-window", "0,0,0,8", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(ring(&v, 0, "task_window"), (64, "call_config".into()));
    assert_eq!(ring(&v, 3, "task_window"), (8, "call_config".into()));
    assert_eq!(ring(&v, 0, "heap"), (2048, "call_config".into()));
}

#[test]
fn config_file_with_unknown_key_exits_2_listing_allowed_keys() {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("cfg.toml"),
        "[runtime_env]\nring_heep = 1024\n",
    )
    .unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--config", "cfg.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("unknown key(s) in config.runtime_env: ring_heep (allowed: ring_dep_pool, ring_heap, ring_task_window)"),
        "{err}"
    );
}

#[test]
fn process_environment_is_the_default_tier() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .env("PTO2_RING_DEP_POOL", "128")
        .args(["config", "resolve", "--json"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(ring(&v, 0, "dep_pool"), (128, "env".into()));
    // --env replaces the process environment entirely.
    let out = pto(dir.path())
        .env("PTO2_RING_DEP_POOL", "128")
        .args([
            "config",
            "resolve",
            "--env",
            "PTO2_RING_HEAP=2048",
            "--json",
        ])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(ring(&v, 0, "dep_pool"), (16384, "default".into()));
    assert_eq!(ring(&v, 0, "heap"), (2048, "env".into()));
}

#[test]
fn t56_device_memory_check_exits_1_when_the_arena_does_not_fit() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--env", "PTO2_RING_HEAP=1073741824"])
        .args(["--device-memory", "4294967296", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["footprint"]["arena"], 4622124160u64);
    assert_eq!(
        v["device_memory"],
        json!({"capacity": 4294967296u64, "fits": false})
    );
    let out = pto(dir.path())
        .args(["config", "resolve", "--env", "PTO2_RING_HEAP=1073741824"])
        .args([
            "--task-window",
            "128",
            "--heap",
            "8388608",
            "--dep-pool",
            "256",
        ])
        .args(["--device-memory", "4294967296"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let table = stdout(&out);
    assert!(table.contains("= 36123776 bytes"), "{table}");
    assert!(table.contains("fits in 4294967296"), "{table}");
}

#[test]
fn table_output_names_values_sources_and_footprint() {
    let dir = TempDir::new().unwrap();
    let out = pto(dir.path())
        .args(["config", "resolve", "--heap", "0,1048576,0,0"])
        .args(["--env", "PTO2_RING_TASK_WINDOW=128,64,abc,16"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let table = stdout(&out);
    assert!(table.contains("1048576 (call_config)"), "{table}");
    assert!(table.contains("16384 (default)"), "{table}");
    assert!(table.contains("value 3 of 4 (\"abc\")"), "{table}");
    assert!(table.contains("arena footprint: image"), "{table}");
}
