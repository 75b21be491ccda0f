//! Issue 16 through real processes: `pto serve` daemons on loopback ports, level-4 runs of the
//! `remote_fanout` scene through them with `pto run --remote`, a server killed or stopped
//! mid-task, a client that disappears, and a token. No address outside 127.0.0.0/8 is used.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::util::{children_of, spawn_pto, wait_exit};

/// A `pto serve` process, killed (and reaped) when dropped.
struct Serve {
    child: Child,
    addr: String,
}

impl Serve {
    fn start(dir: &Path, extra: &[&str]) -> Serve {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--chips", "2"];
        args.extend_from_slice(extra);
        let mut child = spawn_pto(dir, &args);
        // The first stdout line says where it listens.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("pto serve says where it listens");
        let addr = line
            .split_whitespace()
            .find(|w| w.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        Serve { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (up to 20 s) until a session has started its two chips: a task runs there.
    fn wait_for_session(&self) {
        let started = Instant::now();
        while children_of(self.pid()).len() < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no session started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, sig: Signal) {
        let pid = Pid::from_raw(self.pid() as i32).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }

    /// Its stderr so far (after it was killed).
    fn stderr(mut self) -> String {
        self.signal(Signal::KILL);
        let _ = self.child.wait();
        let mut err = String::new();
        use std::io::Read;
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        err
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `pid` has no child process (its sessions' chips are gone), up to `limit`.
fn until_childless(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if children_of(pid).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// One remote worker whose chip jobs take `delay_ms`.
fn slow_scene(dir: &Path, delay_ms: u64) {
    let text = format!(
        "scene = \"remote_fanout\"\nlevel = 4\n[[cases]]\nname = \"slow\"\nparams = {{ chip_delay_ms = {delay_ms} }}\n[cases.config]\ndevice_count = 1\n"
    );
    std::fs::write(dir.join("slow.toml"), text).unwrap();
}

fn scenes() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes")
}

/// The scene over two real servers: every remote chip bound its task's own sizing
/// (source c = call_config), and closing the client closes both sessions.
#[test]
fn remote_fanout_over_two_servers_reports_each_remote_chips_sizing() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Serve::start(dir.path(), &[]), Serve::start(dir.path(), &[]));
    let scene = scenes().join("remote_fanout.toml");
    let mut run = spawn_pto(
        dir.path(),
        &[
            "run",
            scene.to_str().unwrap(),
            "--case",
            "two_workers_own_sizing",
            "--remote",
            &a.url(),
            "--remote",
            &b.url(),
        ],
    );
    let (code, out, err) = wait_exit(&mut run, Duration::from_secs(60));
    assert_eq!(code, 0, "{out}\n{err}");
    let row = |task: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(task))
            .unwrap_or_else(|| panic!("no row {task}:\n{out}"))
            .to_string()
    };
    for chip in 0..2 {
        assert!(row(&format!("remote0/add{chip}")).contains("16c,16c,16c,16c  1Mc,1Mc,1Mc,1Mc"));
        assert!(row(&format!("remote1/add{chip}")).contains("64c,32c,16c,16c  4Mc,1Mc,1Mc,1Mc"));
    }
    assert!(
        out.contains(&format!("remote workers: {}, {}", a.addr, b.addr)),
        "{out}"
    );
    for s in [&a, &b] {
        assert!(
            until_childless(s.pid(), Duration::from_secs(10)),
            "a session outlived its client"
        );
    }
}

/// A server killed mid-task fails the task in flight within 3 s, naming its address; one
/// stopped (SIGSTOP) within the keepalive bound (2.5 s) plus slack. `pto run` never hangs.
#[test]
fn a_server_killed_or_stopped_mid_task_fails_the_task_naming_it() {
    for (sig, bound) in [(Signal::KILL, 3.0), (Signal::STOP, 4.0)] {
        let dir = tempfile::tempdir().unwrap();
        slow_scene(dir.path(), 20_000);
        let server = Serve::start(dir.path(), &[]);
        let url = server.url();
        let mut run = spawn_pto(dir.path(), &["run", "slow.toml", "--remote", &url]);
        server.wait_for_session();
        std::thread::sleep(Duration::from_millis(300));
        server.signal(sig);
        let hit = Instant::now();
        let (code, out, err) = wait_exit(&mut run, Duration::from_secs(30));
        let took = hit.elapsed().as_secs_f64();
        assert_eq!(code, 1, "{sig:?}: {out}\n{err}");
        assert!(
            took < bound,
            "{sig:?}: the run failed {took:.2} s after the signal"
        );
        assert!(out.contains("FAIL (WORKER_LOST)"), "{sig:?}: {out}");
        assert!(
            out.contains(&format!("remote[0] ({}) lost", server.addr)),
            "{sig:?}: {out}"
        );
        if sig == Signal::STOP {
            server.signal(Signal::CONT);
        }
    }
}

/// A client that disappears mid-task: the server closes its session (its chip processes
/// exit) and serves the next client.
#[test]
fn the_server_survives_a_client_that_disappears() {
    let dir = tempfile::tempdir().unwrap();
    slow_scene(dir.path(), 20_000);
    let server = Serve::start(dir.path(), &[]);
    let url = server.url();
    let mut run = spawn_pto(dir.path(), &["run", "slow.toml", "--remote", &url]);
    server.wait_for_session();
    run.kill().unwrap();
    let _ = run.wait();
    assert!(
        until_childless(server.pid(), Duration::from_secs(10)),
        "the vanished client's session was not closed"
    );
    let scene = scenes().join("remote_fanout.toml");
    let mut next = spawn_pto(
        dir.path(),
        &[
            "run",
            scene.to_str().unwrap(),
            "--case",
            "family_sizing",
            "--remote",
            &url,
            "--remote",
            &url,
        ],
    );
    let (code, out, err) = wait_exit(&mut next, Duration::from_secs(60));
    assert_eq!(code, 0, "{out}\n{err}");
}

/// With `--token-file`, a client without the token is refused (and the server logs the
/// refusal, never the token); `--remote-token-file` gets through.
#[test]
fn a_server_with_a_token_refuses_clients_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let token = "tok-8d1f93-secret";
    std::fs::write(dir.path().join("token"), format!("{token}\n")).unwrap();
    let server = Serve::start(dir.path(), &["--token-file", "token"]);
    let url = server.url();
    let scene = scenes().join("remote_fanout.toml");
    let scene = scene.to_str().unwrap();
    let base = [
        "run",
        scene,
        "--case",
        "family_sizing",
        "--remote",
        &url,
        "--remote",
        &url,
    ];
    let mut refused = spawn_pto(dir.path(), &base);
    let (code, out, err) = wait_exit(&mut refused, Duration::from_secs(60));
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("requires a token (no token)"), "{out}");
    let mut with = base.to_vec();
    with.extend_from_slice(&["--remote-token-file", "token"]);
    let mut allowed = spawn_pto(dir.path(), &with);
    let (code, out, err) = wait_exit(&mut allowed, Duration::from_secs(60));
    assert_eq!(code, 0, "{out}\n{err}");
    let log = server.stderr();
    assert!(log.contains("refused a call: no token"), "{log}");
    assert!(!log.contains(token), "the server logged the token: {log}");
    assert!(!out.contains(token));
}

/// `pto serve --handshake-timeout`: a peer that opens a connection and sends half the HTTP/2
/// preface is cut off at the limit and the cut is logged with its address; a client that
/// behaves is served meanwhile. Limits of zero are usage errors naming the flag.
#[test]
fn a_server_cuts_off_a_peer_that_never_starts_http2() {
    let dir = tempfile::tempdir().unwrap();
    let server = Serve::start(dir.path(), &["--handshake-timeout", "0.3"]);
    let mut tcp = std::net::TcpStream::connect(&server.addr).unwrap();
    let local = tcp.local_addr().unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    while tcp.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let scene = scenes().join("remote_fanout.toml");
    let url = server.url();
    let args = [
        "run",
        scene.to_str().unwrap(),
        "--case",
        "family_sizing",
        "--remote",
        &url,
        "--remote",
        &url,
    ];
    let mut run = spawn_pto(dir.path(), &args);
    let (code, out, err) = wait_exit(&mut run, Duration::from_secs(60));
    assert_eq!(code, 0, "{out}\n{err}");
    let log = server.stderr();
    assert!(log.contains("cut off a connection"), "{log}");
    assert!(
        log.contains(&local.to_string()),
        "the log names the peer: {log}"
    );
    for flag in [
        "--max-sessions",
        "--max-connections",
        "--max-calls-per-session",
    ] {
        let mut zero = spawn_pto(dir.path(), &["serve", "--listen", "127.0.0.1:0", flag, "0"]);
        let (code, _, err) = wait_exit(&mut zero, Duration::from_secs(20));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(flag), "{err}");
    }
}

/// `pto soak` for a few seconds with a fault in every run: it injects faults into local
/// children and servers, judges every run, and ends with nothing left behind.
#[test]
fn a_short_soak_faults_every_run_and_finds_no_problem() {
    let dir = tempfile::tempdir().unwrap();
    let scenes = scenes();
    let files: Vec<String> = ["heterogeneous_fanout.toml", "remote_fanout.toml"]
        .iter()
        .map(|f| scenes.join(f).to_string_lossy().into_owned())
        .collect();
    let mut args = vec!["soak", "--seconds", "8", "--fault-rate", "1", "--seed", "7"];
    args.extend(files.iter().map(String::as_str));
    let mut soak = spawn_pto(dir.path(), &args);
    let pid = soak.id();
    let (code, out, err) = wait_exit(&mut soak, Duration::from_secs(120));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("no problem"), "{out}");
    let injected: u64 = out
        .split("faults injected")
        .next()
        .and_then(|s| s.rsplit("; ").next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no fault count in {out}"));
    assert!(injected > 0, "{out}");
    assert!(children_of(pid).is_empty());
    let mut bad = spawn_pto(dir.path(), &["soak", "--fault-rate", "2"]);
    let (code, _, err) = wait_exit(&mut bad, Duration::from_secs(20));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--fault-rate"), "{err}");
}

/// `--remote` counts are checked before anything runs (no server is contacted): a level-4
/// case that needs two remote workers given one says so, and a level-3 scene refuses the flag.
#[test]
fn remote_flags_that_do_not_fit_the_scene_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let never = "http://127.0.0.1:1";
    let l4 = scenes().join("remote_fanout.toml");
    let mut one = spawn_pto(
        dir.path(),
        &["run", l4.to_str().unwrap(), "--remote", never],
    );
    let (code, out, err) = wait_exit(&mut one, Duration::from_secs(20));
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("needs 2 remote worker(s) (config.device_count), got 1 (--remote)"),
        "{err}"
    );
    let l3 = scenes().join("heterogeneous_fanout.toml");
    let mut l3_run = spawn_pto(
        dir.path(),
        &["run", l3.to_str().unwrap(), "--remote", never],
    );
    let (code, out, err) = wait_exit(&mut l3_run, Duration::from_secs(20));
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("--remote is for level-4 scenes; this one is level 3"),
        "{err}"
    );
}

/// The serving-rank flags belong to `--launcher mpi`, which conflicts with `--remote`; a
/// binary built without the `mpi` feature says how to get it.
#[test]
fn mpi_flags_are_refused_where_they_cannot_apply() {
    let dir = tempfile::tempdir().unwrap();
    let l4 = scenes().join("remote_fanout.toml");
    let l4 = l4.to_str().unwrap();
    for (args, expected) in [
        (
            vec!["run", l4, "--chips", "2"],
            "--chips is for the serving ranks of --launcher mpi",
        ),
        (
            vec!["run", l4, "--mpi-bind", "127.0.0.1"],
            "--mpi-bind is for the serving ranks of --launcher mpi",
        ),
        (
            vec![
                "run",
                l4,
                "--launcher",
                "mpi",
                "--remote",
                "http://127.0.0.1:1",
            ],
            "cannot be used with",
        ),
    ] {
        let mut run = spawn_pto(dir.path(), &args);
        let (code, out, err) = wait_exit(&mut run, Duration::from_secs(20));
        assert_eq!(code, 2, "{args:?}:\n{out}\n{err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    if !cfg!(feature = "mpi") {
        let mut run = spawn_pto(dir.path(), &["run", l4, "--launcher", "mpi"]);
        let (code, out, err) = wait_exit(&mut run, Duration::from_secs(20));
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(
            err.contains("this binary was built without MPI; build it with the `mpi` feature"),
            "{err}"
        );
    }
}
