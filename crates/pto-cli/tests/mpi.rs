//! `pto run --launcher mpi` under a real `mpirun` (OpenMPI; .ci/run installs it): three ranks
//! on this machine, on loopback only (`btl_tcp_if_include lo`, `oob_tcp_if_include lo`; the
//! serving ranks share rank 0's host, so they bind 127.0.0.1). Built only with the `mpi`
//! feature: `cargo test -p pto-cli --features mpi -- mpi::`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::util::children_of;

/// An `mpirun` job of `pto run ... --launcher mpi`, its output collected as it comes.
struct Job {
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Job {
    // mpirun is not a pto child (the spawn module's rule is for those), and it needs PATH to
    // find OpenMPI's helpers; nothing else of this process's environment reaches the job.
    #[allow(clippy::disallowed_methods)]
    fn start(dir: &Path, ranks: usize, args: &[&str]) -> Job {
        let mut cmd = std::process::Command::new("mpirun");
        cmd.args(["-n", &ranks.to_string(), "--oversubscribe"])
            .args(["--mca", "btl_tcp_if_include", "lo"])
            .args(["--mca", "oob_tcp_if_include", "lo"]);
        if rustix::process::geteuid().is_root() {
            cmd.arg("--allow-run-as-root");
        }
        cmd.arg(assert_cmd::cargo::cargo_bin("pto"))
            .arg("run")
            .args(args)
            .args(["--launcher", "mpi"])
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .expect("mpirun starts (OpenMPI's openmpi-bin; .ci/run installs it)");
        let collect = |pipe: Box<dyn std::io::Read + Send>| {
            let text = Arc::new(Mutex::new(String::new()));
            let sink = Arc::clone(&text);
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut all = sink.lock().unwrap();
                    all.push_str(&line);
                    all.push('\n');
                }
            });
            (text, reader)
        };
        let (out, out_reader) = collect(Box::new(child.stdout.take().unwrap()));
        let (err, err_reader) = collect(Box::new(child.stderr.take().unwrap()));
        Job {
            child,
            out,
            err,
            readers: vec![out_reader, err_reader],
        }
    }

    fn err(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits for the job to end within `limit` (killing it and failing otherwise); its exit
    /// status, stdout and stderr.
    fn wait(&mut self, limit: Duration) -> (i32, String, String) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The readers end at the pipes' end of file (up to 10 s: a process left
                // holding a pipe is found by the tests' process checks, not here).
                let drained = Instant::now() + Duration::from_secs(10);
                while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < drained {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let out = self.out.lock().unwrap().clone();
                return (status.code().unwrap_or(-1), out, self.err());
            }
            if Instant::now() >= deadline {
                self.end_all();
                panic!(
                    "the MPI job did not end within {limit:?}:\n{}\n{}",
                    self.out.lock().unwrap(),
                    self.err()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The serving ranks' lines (`MPI rank R of N on HOST (pid P) serves ...`), waiting up to
    /// `limit` for `count` of them: (rank, pid, address).
    fn serving(&self, count: usize, limit: Duration) -> Vec<(u32, u32, String)> {
        let deadline = Instant::now() + limit;
        loop {
            let ranks: Vec<(u32, u32, String)> = self
                .err()
                .lines()
                .filter(|l| l.contains(" serves "))
                .map(|l| {
                    let word = |after: &str| {
                        l.split(after)
                            .nth(1)
                            .unwrap()
                            .split([' ', ')'])
                            .next()
                            .unwrap()
                    };
                    (
                        word("MPI rank ").parse().unwrap(),
                        word("(pid ").parse().unwrap(),
                        l.rsplit(' ').next().unwrap().to_string(),
                    )
                })
                .collect();
            if ranks.len() >= count {
                return ranks;
            }
            assert!(
                Instant::now() < deadline,
                "{count} serving ranks expected within {limit:?}:\n{}",
                self.err()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// mpirun takes its ranks down on SIGTERM (a SIGKILL would orphan them); whatever is
    /// left after that is killed.
    fn end_all(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let all = self.processes();
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, Signal::TERM);
        }
        let _ = all_gone(&all[..1], Duration::from_secs(10));
        let left = all.into_iter().filter(|&p| alive(p));
        for pid in left.filter_map(|p| Pid::from_raw(p as i32)) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        let _ = self.child.wait();
    }

    /// mpirun and every process under it now.
    fn processes(&self) -> Vec<u32> {
        let mut all = vec![self.child.id()];
        let mut i = 0;
        while i < all.len() {
            all.extend(children_of(all[i]));
            i += 1;
        }
        all
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.end_all();
    }
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for this purpose; its parent reaps it.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            != Some("Z")
    })
}

/// Every one of `pids` is gone within `limit`.
fn all_gone(pids: &[u32], limit: Duration) -> Result<(), Vec<u32>> {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn scenes() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes")
}

/// This host's name, as MPI_Get_processor_name gives it.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// The per-task sizing over two serving ranks, their chips in each endpoint mode: the
/// same report rows and sources as `--remote`; every rank exits 0 and leaves no process.
#[test]
fn two_serving_ranks_bind_each_tasks_own_sizing_in_both_modes() {
    for mode in ["in-process", "child-process"] {
        let dir = tempfile::tempdir().unwrap();
        let scene = scenes().join("remote_fanout.toml");
        let mut job = Job::start(
            dir.path(),
            3,
            &[
                scene.to_str().unwrap(),
                "--case",
                "two_workers_own_sizing",
                "--chips",
                "2",
                "--mode",
                mode,
            ],
        );
        let ranks = job.serving(2, Duration::from_secs(60));
        let before = job.processes();
        let (code, out, err) = job.wait(Duration::from_secs(120));
        assert_eq!(code, 0, "{mode}:\n{out}\n{err}");
        let row = |task: &str| {
            out.lines()
                .find(|l| l.split_whitespace().nth(1) == Some(task))
                .unwrap_or_else(|| panic!("no row {task}:\n{out}"))
                .to_string()
        };
        for chip in 0..2 {
            assert!(
                row(&format!("remote0/add{chip}")).contains("16c,16c,16c,16c  1Mc,1Mc,1Mc,1Mc")
            );
            assert!(
                row(&format!("remote1/add{chip}")).contains("64c,32c,16c,16c  4Mc,1Mc,1Mc,1Mc")
            );
        }
        let host = host();
        for (rank, pid, addr) in &ranks {
            assert!(addr.starts_with("127.0.0.1:"), "{addr}");
            assert!(
                err.contains(&format!("MPI rank {rank} of 3 on {host} (pid {pid}) serves 2 chip(s) and 0 sub worker(s) ({mode})")),
                "{err}"
            );
            assert!(
                out.contains(&format!("MPI rank {rank} on {host} (pid {pid}) at {addr}")),
                "the report names rank {rank}:\n{out}"
            );
        }
        all_gone(&before, Duration::from_secs(10))
            .unwrap_or_else(|left| panic!("{mode}: processes left: {left:?}"));
    }
}

/// One slow task per serving rank (20 s chip jobs, child-process chips), so that a rank can
/// be faulted mid-task.
fn slow_scene(dir: &Path) -> String {
    let text = "scene = \"remote_fanout\"\nlevel = 4\n[[cases]]\nname = \"slow\"\nparams = { chip_delay_ms = 20000 }\n[cases.config]\ndevice_count = 2\n";
    let path = dir.join("slow.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// A serving rank SIGKILLed or SIGSTOPped mid-task fails rank 0's run with WORKER_LOST naming
/// the rank and host within seconds; the job then ends non-zero with no process left.
#[test]
fn a_rank_killed_or_stopped_mid_task_ends_the_job_naming_it() {
    for (sig, bound) in [(Signal::KILL, 15.0), (Signal::STOP, 15.0)] {
        let dir = tempfile::tempdir().unwrap();
        let scene = slow_scene(dir.path());
        let mut job = Job::start(
            dir.path(),
            3,
            &[&scene, "--chips", "2", "--mode", "child-process"],
        );
        let ranks = job.serving(2, Duration::from_secs(60));
        let (rank, pid, _) = ranks.iter().find(|r| r.0 == 1).cloned().unwrap();
        // Mid-task: the rank's session has started its two chip processes.
        let started = Instant::now();
        while children_of(pid).len() < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no session on rank 1"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        let before = job.processes();
        rustix::process::kill_process(Pid::from_raw(pid as i32).unwrap(), sig).unwrap();
        let faulted = Instant::now();
        let (code, out, err) = job.wait(Duration::from_secs(60));
        let took = faulted.elapsed().as_secs_f64();
        assert_ne!(code, 0, "{sig:?}:\n{out}\n{err}");
        assert!(
            took < bound,
            "{sig:?}: the job took {took:.1} s to end:\n{err}"
        );
        let named = format!("WORKER_LOST: MPI rank {rank} on {} (pid {pid})", host());
        assert!(
            err.contains(&named),
            "{sig:?}: {named:?} expected:\n{out}\n{err}"
        );
        all_gone(&before, Duration::from_secs(10))
            .unwrap_or_else(|left| panic!("{sig:?}: processes left: {left:?}\n{err}"));
    }
}

/// The token is made on rank 0 and sent over MPI: no command line, environment or log line of
/// any process of the job holds it, and a serving rank refuses a client without it.
#[test]
fn the_token_travels_over_mpi_only_and_guards_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let scene = slow_scene(dir.path());
    // -vv: every rank logs at debug level, and no line may carry the token.
    let job = Job::start(dir.path(), 3, &[&scene, "--chips", "2", "-vv"]);
    let ranks = job.serving(2, Duration::from_secs(60));
    let hex64 = |text: &str| {
        text.split(|c: char| !c.is_ascii_hexdigit())
            .any(|w| w.len() >= 64)
    };
    for pid in job.processes() {
        for file in ["cmdline", "environ"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes).replace('\0', " ");
            assert!(
                !hex64(&text),
                "pid {pid} {file} holds a token-like value: {text}"
            );
        }
    }
    assert!(!hex64(&job.err()), "the job's log holds a token-like value");
    // A client without the token, through the same binary's --remote.
    let remote = format!("http://{}", ranks[0].2);
    let intruder = crate::util::pto(dir.path())
        .args(["run", &scene, "--remote", &remote, "--remote", &remote])
        .output()
        .unwrap();
    let out = crate::util::stdout(&intruder);
    assert_eq!(intruder.status.code(), Some(1), "{out}");
    assert!(
        out.contains("this server requires a token (no token)"),
        "{out}"
    );
}

/// Fewer serving ranks than a case's remote workers, or a level-3 scene: said plainly, and
/// the job ends (mpirun exits once every rank has) with rank 0's status 2.
#[test]
fn a_job_that_does_not_fit_the_scene_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let scene = scenes().join("remote_fanout.toml");
    let mut job = Job::start(
        dir.path(),
        2,
        &[scene.to_str().unwrap(), "--case", "two_workers_own_sizing"],
    );
    let (code, out, err) = job.wait(Duration::from_secs(60));
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("needs 2 remote worker(s) (config.device_count), but the MPI job has 1 serving rank(s) (mpirun -n 2)"),
        "{err}"
    );
    let l3 = scenes().join("heterogeneous_fanout.toml");
    let mut job = Job::start(dir.path(), 2, &[l3.to_str().unwrap()]);
    let (code, out, err) = job.wait(Duration::from_secs(60));
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("--launcher mpi is for level-4 scenes; this one is level 3"),
        "{err}"
    );
}
