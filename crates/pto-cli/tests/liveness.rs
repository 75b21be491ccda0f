//! Issue 10 through the real binary: `pto run` never hangs on a killed or stopped child, and a
//! `PTO_CHILD=1` left in the user's environment is refused clearly.

use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::util::{children_of, pto, spawn_pto, stderr, wait_exit};

/// A multi-chip dispatch whose chip tasks take 2 s, so the sum task on the sub worker is
/// PENDING for that long.
const SLOW_DISPATCH: &str = r#"
scene = "multi_chip_dispatch"
level = 3
[[cases]]
name = "slow"
params = { chip_delay_ms = 2000 }
[cases.config]
device_count = 2
num_sub_workers = 1
"#;

/// Runs the slow dispatch in child-process mode and hits the sub child (the last one
/// started) with `sig` while the sum task waits for the chip tasks.
fn hit_the_sub_child(sig: Signal, bound: Duration) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), SLOW_DISPATCH).unwrap();
    let mut child = spawn_pto(
        dir.path(),
        &[
            "run",
            "s.toml",
            "--mode",
            "child-process",
            "--liveness-timeout",
            "1",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let children = loop {
        let c = children_of(child.id());
        if c.len() == 3 {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the children did not start: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // Let the run start (start-up can be slow on a loaded machine): the chip tasks wait 2 s,
    // the sum task is PENDING all that time.
    std::thread::sleep(Duration::from_millis(700));
    let sub = *children.last().unwrap();
    let hit = Instant::now();
    rustix::process::kill_process(Pid::from_raw(sub as i32).unwrap(), sig).unwrap();
    let (code, out, err) = wait_exit(&mut child, Duration::from_secs(20));
    let took = hit.elapsed();
    assert_eq!(code, 1, "exit 1 for a failed case\n{out}\n{err}");
    assert!(
        took < bound,
        "pto run exited {took:?} after the signal (bound {bound:?})"
    );
    assert!(
        out.contains("sub_child[0]") || err.contains("sub_child[0]"),
        "{out}\n{err}"
    );
    (out, err)
}

#[test]
fn r10_pto_run_exits_1_when_a_sub_child_is_killed() {
    // The chip tasks still take the rest of their 2 s; the run then ends at once.
    let (out, err) = hit_the_sub_child(Signal::KILL, Duration::from_millis(3500));
    let all = format!("{out}{err}");
    assert!(all.contains("SIGKILL"), "{all}");
}

#[test]
fn r10_pto_run_exits_1_when_a_sub_child_is_stopped() {
    let (out, err) = hit_the_sub_child(Signal::STOP, Duration::from_millis(4000));
    let all = format!("{out}{err}");
    assert!(all.contains("stopped answering liveness probes"), "{all}");
}

#[test]
fn r10_pto_child_set_by_the_user_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = pto(dir.path())
        .env("PTO_CHILD", "1")
        .args(["config", "resolve"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("PTO_CHILD=1"), "{err}");
    assert!(err.contains("unset it"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn r10_timeouts_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), SLOW_DISPATCH).unwrap();
    for (flag, value) in [
        ("--task-timeout", "0"),
        ("--liveness-timeout", "-1"),
        ("--task-timeout", "abc"),
    ] {
        let out = pto(dir.path())
            .args(["run", "s.toml", flag, value])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        assert!(stderr(&out).contains(flag), "{}", stderr(&out));
    }
}

#[test]
fn r10_task_timeout_fails_the_case() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), SLOW_DISPATCH).unwrap();
    let started = Instant::now();
    let out = pto(dir.path())
        .args([
            "run",
            "s.toml",
            "--mode",
            "child-process",
            "--task-timeout",
            "0.3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(started.elapsed() < Duration::from_secs(20));
    let all = format!("{}{}", crate::util::stdout(&out), stderr(&out));
    assert!(all.contains("TASK_TIMEOUT"), "{all}");
}
