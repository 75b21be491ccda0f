//! Helpers for running the `pto` binary in isolation.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;

/// A `pto` command with a cleared environment (so the developer's `PTO2_RING_*` never leak in),
/// run in `dir`.
pub(crate) fn pto(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("pto").expect("the pto binary is built");
    cmd.env_clear()
        .current_dir(dir)
        .timeout(std::time::Duration::from_secs(60));
    cmd
}

/// Stdout as UTF-8.
pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

/// Stderr as UTF-8.
pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("stderr is UTF-8")
}

/// Parses stdout as exactly one JSON object.
pub(crate) fn json(out: &Output) -> serde_json::Value {
    let text = stdout(out);
    assert_eq!(
        text.trim().lines().count(),
        1,
        "one JSON line expected: {text}"
    );
    serde_json::from_str(text.trim()).expect("stdout is JSON")
}

/// The children of `pid` (of any of its threads: the monitor thread spawns them).
pub(crate) use pto_scene::soak::children_of;

pub(crate) fn spawn_pto(dir: &Path, args: &[&str]) -> Child {
    #[allow(clippy::disallowed_methods)]
    std::process::Command::new(assert_cmd::cargo::cargo_bin("pto"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pto starts")
}

/// Waits for `child` to exit within `limit`; kills it and fails the test otherwise.
pub(crate) fn wait_exit(child: &mut Child, limit: Duration) -> (i32, String, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let (mut out, mut err) = (String::new(), String::new());
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code().unwrap_or(-1), out, err);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("pto run did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
