//! This crate's own `pto` (src/main.rs: `pto_cli::main()`) knows its scenes and runs their
//! cases in both endpoint modes, child processes being this same binary.

use std::process::{Command, Output};

fn custom_pto(args: &[&str]) -> Output {
    // Test code, not the runtime: the binary under test is started like any other program.
    #[allow(clippy::disallowed_methods)]
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_custom-workload"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .env_remove("PTO_CHILD")
        .output()
        .expect("starting the binary")
}

#[test]
fn own_pto_runs_the_fanout_scene_in_both_modes() {
    for mode in ["in-process", "child-process"] {
        let out = custom_pto(&["run", "scenes/cw_fanout.toml", "--mode", mode]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{mode}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Each task bound its own label's sizing (t = tasks.<label>, f = tasks.<family>).
        let row = |case: &str, task: &str| {
            stdout
                .lines()
                .find(|l| l.split_whitespace().take(2).eq([case, task]))
                .unwrap_or_else(|| panic!("{mode}: no row {case} {task}:\n{stdout}"))
                .to_string()
        };
        assert!(
            row("per_label", "big").contains("512Kt,1Kt,1Kt,1Kt"),
            "{stdout}"
        );
        assert!(
            row("per_label", "small1").contains("8Kf,1Kf,1Kf,1Kf"),
            "{stdout}"
        );
        assert!(
            row("big_heap_too_small", "big").ends_with("expected FAIL (HEAP_RING_DEADLOCK)"),
            "{stdout}"
        );
        // A member block layers on its family's, field by field (t = tasks.small2,
        // f = tasks.small): small2 takes its heaps from its own block, its window and dep
        // pool from the family's; the other members keep the family's heaps.
        let small2 = row("per_member", "small2");
        assert!(small2.contains(" 8f,8f,8f,8f "), "{small2}");
        assert!(small2.contains(" 16Kt,8Kt,8Kt,1Kt "), "{small2}");
        assert!(
            row("per_member", "small3").contains(" 8Kf,4Kf,4Kf,1Kf "),
            "{stdout}"
        );
        // The big job fails while the orchestration pauses; its next submit's RunFailed goes
        // up with `?`, and the case still has the failure with every row.
        assert!(
            row("big_heap_too_small_slow_submit", "big")
                .ends_with("expected FAIL (HEAP_RING_DEADLOCK)"),
            "{stdout}"
        );
        assert_eq!(stdout.matches("HEAP_RING_DEADLOCK").count(), 4, "{stdout}");
        assert!(stdout.contains("5 passed, 0 failed"), "{stdout}");
    }
}

#[test]
fn own_pto_lists_this_crates_scenes_next_to_the_built_in_ones() {
    let out = custom_pto(&["scenes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for scene in ["cw_axpy", "cw_fanout", "vector_example"] {
        assert!(stdout.contains(scene), "{scene} missing:\n{stdout}");
    }
}

#[test]
fn config_resolve_names_the_block_of_every_value() {
    let out = custom_pto(&[
        "config",
        "resolve",
        "--scene",
        "scenes/cw_fanout.toml",
        "--case",
        "per_member",
        "--label",
        "small2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ring1 = &v["rings"][1];
    assert_eq!(ring1["heap"]["value"], 8192, "{v}");
    assert_eq!(ring1["heap"]["block"], "tasks.small2", "{v}");
    assert_eq!(ring1["task_window"]["value"], 8, "{v}");
    assert_eq!(ring1["task_window"]["block"], "tasks.small", "{v}");
    assert_eq!(ring1["dep_pool"]["block"], "tasks.small", "{v}");
}

/// `(before, after)` in bytes from every `device memory A -> B` line of `pto tune`.
fn device_memory_before_after(stdout: &str) -> Vec<(f64, f64)> {
    let bytes = |s: &str| {
        let (n, unit) = s.trim().split_once(' ').unwrap();
        let scale = match unit {
            "B" => 1.0,
            "KiB" => 1024.0,
            "MiB" => 1048576.0,
            _ => 1073741824.0,
        };
        n.parse::<f64>().unwrap() * scale
    };
    let pairs: Vec<(f64, f64)> = stdout
        .lines()
        .filter_map(|l| l.split(": device memory ").nth(1))
        .map(|rest| {
            let figures: Vec<&str> = rest.split(';').next().unwrap().split(" -> ").collect();
            (bytes(figures[0]), bytes(figures[1]))
        })
        .collect();
    assert!(!pairs.is_empty(), "no device memory line:\n{stdout}");
    pairs
}

#[test]
fn tune_never_reserves_more_on_any_case_of_the_template() {
    for file in ["scenes/cw_axpy.toml", "scenes/cw_fanout.toml"] {
        let out = custom_pto(&["tune", file]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{file}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cases = stdout.matches(": verified: ").count() + stdout.matches(": skipped: ").count();
        let pairs = device_memory_before_after(&stdout);
        assert_eq!(
            pairs.len(),
            cases,
            "{file}: one figure line per case:\n{stdout}"
        );
        for (before, after) in pairs {
            assert!(after <= before, "{file}: {after} > {before}:\n{stdout}");
        }
    }
}

#[test]
fn tune_advises_each_member_block_and_never_reserves_more() {
    for mode in ["in-process", "child-process"] {
        let dir = tempfile::tempdir().unwrap();
        let scene = dir.path().join("cw_fanout.toml");
        std::fs::copy("scenes/cw_fanout.toml", &scene).unwrap();
        let scene = scene.to_str().unwrap();
        let out = custom_pto(&[
            "tune",
            scene,
            "--case",
            "per_member",
            "--mode",
            mode,
            "--write",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{mode}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let [(before, after)] = device_memory_before_after(&stdout)[..] else {
            panic!("{mode}: one case was tuned:\n{stdout}");
        };
        assert!(after <= before, "{mode}: {stdout}");
        // small2's larger peaks go to tasks.small2, never to tasks.small.
        let text = std::fs::read_to_string(scene).unwrap();
        let doc: toml::Table = toml::from_str(&text).unwrap();
        let advised = doc["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"].as_str() == Some("per_member_advised"))
            .unwrap_or_else(|| panic!("{mode}: no advised case:\n{text}"));
        let tasks = &advised["config"]["tasks"];
        let heap = |key: &str| -> Vec<i64> {
            tasks[key]["runtime_env"]["ring_heap"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_integer().unwrap())
                .collect()
        };
        let (family, member) = (heap("small"), heap("small2"));
        for ring in 0..4 {
            let written = [8192, 4096, 4096, 1024][ring];
            assert!(family[ring] <= written, "{mode}: tasks.small {family:?}");
            assert!(
                member[ring] <= [16384, 8192, 8192, 1024][ring],
                "{mode}: {member:?}"
            );
        }
    }
}
