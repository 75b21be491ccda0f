//! Helpers for running the `pto` binary in isolation.

use std::path::Path;
use std::process::Output;

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
