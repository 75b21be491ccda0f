//! Issue 10, items 6 and 7: scene inputs cannot crash `pto run`, and nothing is written
//! outside `--output`. Refusals are load errors (exit status 2) on one line, never a panic
//! (101), an abort (134) or a hang; an unusable output directory fails the case (exit 1).

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::util::{pto, stderr, stdout};

/// `pto run <file> [args]` in `dir`, which must finish within 20 s.
fn run(dir: &Path, file: &Path, args: &[&str]) -> Output {
    let started = Instant::now();
    let out = pto(dir)
        .timeout(Duration::from_secs(20))
        .arg("run")
        .arg(file)
        .args(args)
        .output()
        .unwrap();
    if started.elapsed() >= Duration::from_secs(20) {
        // Keep the input that hung where CI keeps files, and say what it printed.
        let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hung.toml");
        let _ = std::fs::copy(file, &kept);
        panic!(
            "pto run {} {args:?} hung (killed after {:?}; input kept as {}): stdout {:?}, stderr {:?}",
            file.display(),
            started.elapsed(),
            kept.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Exit status 2 with one stderr line containing every one of `expect`.
#[track_caller]
fn assert_refused(out: &Output, expect: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for e in expect {
        assert!(err.contains(e), "{err:?} does not contain {e:?}");
    }
}

fn write(dir: &TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn r10_dev_zero_is_refused_quickly() {
    let dir = TempDir::new().unwrap();
    let out = run(dir.path(), Path::new("/dev/zero"), &[]);
    assert_refused(&out, &["/dev/zero: is a device, not a regular file"]);
}

#[test]
fn r10_fifo_and_directory_are_refused() {
    let dir = TempDir::new().unwrap();
    let fifo = dir.path().join("scene.toml");
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::RWXU).unwrap();
    // Nobody ever writes to the FIFO: opening it for reading would block forever.
    assert_refused(
        &run(dir.path(), &fifo, &[]),
        &["is a FIFO, not a regular file"],
    );
    assert_refused(
        &run(dir.path(), dir.path(), &[]),
        &["is a directory, not a regular file"],
    );
}

#[test]
fn r10_file_over_16_mib_is_refused() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("big.toml");
    std::fs::write(&path, vec![b'#'; 17 << 20]).unwrap();
    assert_refused(
        &run(dir.path(), &path, &[]),
        &["is 17825792 bytes; a scene file may be at most 16777216 bytes"],
    );
}

#[test]
fn r10_clusters_2_pow_32_plus_1_is_refused_naming_the_key() {
    let dir = TempDir::new().unwrap();
    let path = write(
        &dir,
        "s.toml",
        "scene = \"vector_example\"\n[[cases]]\nname = \"wide\"\n[cases.params]\nclusters = 4294967297\n",
    );
    assert_refused(
        &run(dir.path(), &path, &[]),
        &["cases[0] (\"wide\"): params.clusters = 4294967297 is out of range (allowed 1..=64)"],
    );
}

#[test]
fn r10_zero_sizes_and_thousands_of_chips_are_refused() {
    let dir = TempDir::new().unwrap();
    for (body, expect) in [
        ("[cases.params]\nn = 0", "params.n = 0 is out of range"),
        (
            "[cases.params]\nn = -4096",
            "params.n = -4096 is out of range",
        ),
        (
            "[cases.params]\nn = 1.5",
            "params.n = 1.5 is not an integer",
        ),
        (
            "[cases.config]\ndevice_count = 5000",
            "config.device_count = 5000 is out of range (allowed 1..=64)",
        ),
    ] {
        let text = format!("scene = \"multi_chip_dispatch\"\n[[cases]]\nname = \"c\"\n{body}\n");
        let path = write(&dir, "s.toml", &text);
        assert_refused(
            &run(dir.path(), &path, &[]),
            &["cases[0] (\"c\"): ", expect],
        );
    }
}

#[test]
fn r10_mismatched_shapes_are_refused_at_load() {
    let dir = TempDir::new().unwrap();
    let path = write(
        &dir,
        "s.toml",
        "scene = \"paged_attention\"\n[[cases]]\nname = \"c\"\n[cases.params]\nblock = 100\n",
    );
    assert_refused(
        &run(dir.path(), &path, &[]),
        &["params.max_model_len = 4096 (default) must be a multiple of params.block = 100"],
    );
}

#[test]
fn r10_case_names_that_leave_the_output_directory_are_refused() {
    let dir = TempDir::new().unwrap();
    for name in ["../x", "a/b", "..", "/tmp/x"] {
        let text = format!("scene = \"vector_example\"\n[[cases]]\nname = {name:?}\n");
        let path = write(&dir, "s.toml", &text);
        let out = run(
            dir.path(),
            &path,
            &["--enable-scope-stats", "--output", "o"],
        );
        assert_refused(
            &out,
            &[&format!("cases[0] ({name:?}): name: a case name must be")],
        );
    }
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "only s.toml: {entries:?}");
}

#[test]
fn r10_long_strings_are_cut_in_messages() {
    let dir = TempDir::new().unwrap();
    let long = "z".repeat(100_000);
    let text = format!("scene = \"{long}\"\n[[cases]]\nname = \"c\"\n");
    let path = write(&dir, "s.toml", &text);
    let out = run(dir.path(), &path, &[]);
    assert_refused(&out, &["no scene named \"zzz", "…\""]);
    assert!(stderr(&out).len() < 400, "{}", stderr(&out).len());
}

#[test]
fn r10_unwritable_output_directory_fails_the_case() {
    let dir = TempDir::new().unwrap();
    let scene = write(
        &dir,
        "s.toml",
        "scene = \"vector_example\"\n[[cases]]\nname = \"c\"\n[cases.params]\nn = 64\n",
    );
    // A regular file where the directory should be: unwritable even for root.
    write(&dir, "taken", "");
    for args in [
        &["--output", "taken", "--enable-scope-stats"][..],
        &["--output", "taken/sub"][..],
    ] {
        let out = run(dir.path(), &scene, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let table = stdout(&out);
        assert!(
            table.contains("case c FAILED: cannot write to output directory taken/")
                && table.contains("Not a directory"),
            "{table}"
        );
    }
    let out = run(
        dir.path(),
        &scene,
        &["--output", "fine", "--enable-scope-stats"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        dir.path()
            .join("fine/c/chip0/run1_task0_vector_example/scope_stats/scope_stats.jsonl")
            .is_file()
    );
    assert!(!dir.path().join("fine/c/.pto-write-probe").exists());
}

#[test]
fn r10_output_too_long_for_output_prefix_is_a_usage_error() {
    let dir = TempDir::new().unwrap();
    let scene = write(
        &dir,
        "s.toml",
        "scene = \"vector_example\"\n[[cases]]\nname = \"c\"\n",
    );
    let output = "d".repeat(1100);
    let out = run(dir.path(), &scene, &["--output", &output]);
    assert_refused(
        &out,
        &["case \"c\": output_prefix is 1102 bytes; the limit is 1024"],
    );
}

/// A few dozen mutants of the shipped files through the real binary (the library property
/// test in pto-scene runs thousands): the exit status is 0, 1 or 2, never a panic (101) or an
/// abort (134), and a refusal is one `pto: ` line.
#[test]
fn r10_mutated_scene_files_exit_0_1_or_2() {
    let scenes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes");
    let mut files: Vec<_> = std::fs::read_dir(&scenes)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let replacements = [
        "4294967297",
        "-1",
        "0",
        "9223372036854775807",
        "1.5",
        "\"../x\"",
        "[1, 2]",
    ];
    // xorshift64: a fixed seed, so a failure reproduces.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as usize
    };
    let dir = TempDir::new().unwrap();
    for i in 0..48 {
        let text = std::fs::read_to_string(&files[next() % files.len()]).unwrap();
        let mut bytes = text.into_bytes();
        if i % 2 == 0 {
            // Replace the value after some `=` with an interesting one.
            let eqs: Vec<usize> = (0..bytes.len()).filter(|&j| bytes[j] == b'=').collect();
            let at = eqs[next() % eqs.len()] + 1;
            let end = (at..bytes.len())
                .find(|&j| bytes[j] == b'\n')
                .unwrap_or(bytes.len());
            let value = replacements[next() % replacements.len()];
            bytes.splice(at..end, format!(" {value}").into_bytes());
        } else {
            for _ in 0..1 + next() % 3 {
                let at = next() % bytes.len();
                bytes[at] ^= 1 << (next() % 8);
            }
        }
        let path = dir.path().join(format!("m{i}.toml"));
        std::fs::write(&path, &bytes).unwrap();
        let out = run(dir.path(), &path, &["--fast", "--output", "o"]);
        let code = out.status.code();
        assert!(
            matches!(code, Some(0..=2)),
            "m{i}: exit {code:?}: {}",
            stderr(&out)
        );
        if code == Some(2) {
            let err = stderr(&out);
            assert!(
                err.starts_with("pto: ") && err.trim().lines().count() == 1,
                "m{i}: {err}"
            );
        }
    }
}
