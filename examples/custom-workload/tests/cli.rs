//! This crate's own `pto` (src/main.rs: `pto_scene::main()`) knows its scenes and runs their
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
        // Each task bound its own label's sizing (source c = call_config).
        let row = |case: &str, task: &str| {
            stdout
                .lines()
                .find(|l| l.split_whitespace().take(2).eq([case, task]))
                .unwrap_or_else(|| panic!("{mode}: no row {case} {task}:\n{stdout}"))
                .to_string()
        };
        assert!(
            row("per_label", "big").contains("512Kc,1Kc,1Kc,1Kc"),
            "{stdout}"
        );
        assert!(
            row("per_label", "small1").contains("8Kc,1Kc,1Kc,1Kc"),
            "{stdout}"
        );
        assert!(
            row("big_heap_too_small", "big").ends_with("expected FAIL (HEAP_RING_DEADLOCK)"),
            "{stdout}"
        );
        assert!(stdout.contains("3 passed, 0 failed"), "{stdout}");
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
