//! Hours of faults (`pto soak`): random level-3 and level-4 scene cases run back to back for a
//! given time while a fault thread kills (SIGKILL) or stops (SIGSTOP) random chip, sub and
//! remote-server processes, and every run is checked:
//!
//! - it **passed** (the scene's own result check), or it **failed with a code that names the
//!   dead worker**: a fault hit this run, every failed task carries `CHILD_DIED`,
//!   `CHILD_UNRESPONSIVE`, `WORKER_LOST` or `INNER_RUN_FAILED`, and its message names the
//!   faulted process (its pid, or the server's address);
//! - it ended before its **deadline** (a hang is a problem, and ends the soak: the stuck run's
//!   thread cannot be taken back);
//! - afterwards nothing is **leaked**: no child process of this one outlives the run (but the
//!   servers), and the counts of this process's threads, its `memfd` descriptors and the
//!   entries of `/dev/shm` come back to what they were after warm-up; **RSS** stays flat
//!   after warm-up (growth under max(64 MiB, 25 %)).
//!
//! Everything else — a wrong result, an unexplained failure, a wrong code, a leak — is a
//! problem. The caller provides the remote servers ([`ServerPool`]); `pto soak` runs `pto
//! serve` processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pto_node::EndpointMode;
use pto_node::remote::RemoteWorker;
use pto_types::ErrorCode;
use rustix::process::{Pid, Signal};

use crate::runner::{Diagnostics, RunOptions, run_file};
use crate::{RunnerEnv, SceneFile, SceneLevel};

/// How long a stopped child goes unanswered before its Worker kills it: the default, so that
/// a loaded host (CI building beside a soak) does not make a slow child look stopped.
const LIVENESS: Duration = Duration::from_secs(5);

/// The remote `pto serve` processes level-4 cases run against.
pub trait ServerPool: Send {
    /// The servers' addresses (`http://…`) and process ids, one per server.
    fn servers(&self) -> Vec<(String, u32)>;
    /// Replaces a server that was killed or stopped by a fresh one (it kills a stopped one
    /// first, so nothing is left behind).
    fn restart(&mut self, pid: u32) -> anyhow::Result<()>;
}

/// How to soak.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    pub duration: Duration,
    pub seed: u64,
    /// Scene files of level 3 or 4.
    pub files: Vec<PathBuf>,
    /// Probability that a run gets a fault.
    pub fault_rate: f64,
    /// A run still going after this is a hang.
    pub run_deadline: Duration,
    /// The share of the time (from the start) that is warm-up for the leak baselines.
    pub warm_up: Duration,
    /// Where cases write (nothing, unless they fail).
    pub output: PathBuf,
}

/// One fault.
#[derive(Clone, Debug)]
pub struct Fault {
    pub pid: u32,
    /// `chip`, `sub`, `node`, `server` or `server child`.
    pub role: String,
    pub signal: &'static str,
    /// The server's address, for a server or its child.
    pub server: Option<String>,
}

/// What a soak did.
#[derive(Clone, Debug, Default)]
pub struct SoakReport {
    pub runs: u64,
    pub passed: u64,
    /// Runs that failed as a fault explains.
    pub failed_by_fault: u64,
    /// Faults injected, by role and signal (`chip SIGKILL` …).
    pub faults: BTreeMap<String, u64>,
    /// Faults that hit no run (it had ended), so could not fail one.
    pub faults_between_runs: u64,
    /// Runs by case.
    pub cases: BTreeMap<String, u64>,
    pub problems: Vec<String>,
    /// The longest run: its time, case and faults.
    pub slowest: Option<(Duration, String)>,
    pub rss_after_warm_up: u64,
    pub rss_end: u64,
    pub threads_after_warm_up: usize,
    pub threads_end: usize,
    pub elapsed: Duration,
}

impl SoakReport {
    pub fn faults_injected(&self) -> u64 {
        self.faults.values().sum()
    }
}

/// What this process holds that a run could leak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Holdings {
    threads: usize,
    memfds: usize,
    shm: usize,
    rss: u64,
}

fn holdings() -> Holdings {
    let count = |dir: &str| std::fs::read_dir(dir).map_or(0, |d| d.count());
    let memfds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| {
        d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy().starts_with("/memfd:"))
            .count()
    });
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024);
    Holdings {
        threads: count("/proc/self/task"),
        memfds,
        shm: count("/dev/shm"),
        rss,
    }
}

/// The child processes of `pid` (of any of its threads: a Worker's monitor thread spawns
/// them), sorted.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<u32> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A pto child's role, from the `PTO_CHILD_ROLE` of its environment.
fn role_of(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"PTO_CHILD_ROLE="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The processes a fault may hit now: this process's children (chip, sub or node children of
/// the case's Worker) and the servers with their children.
fn targets(servers: &[(String, u32)]) -> Vec<Fault> {
    let me = std::process::id();
    let server_pids: Vec<u32> = servers.iter().map(|s| s.1).collect();
    let mut out = Vec::new();
    for pid in children_of(me) {
        if server_pids.contains(&pid) {
            continue;
        }
        if let Some(role) = role_of(pid) {
            out.push(Fault {
                pid,
                role,
                signal: "",
                server: None,
            });
        }
    }
    for (addr, pid) in servers {
        out.push(Fault {
            pid: *pid,
            role: "server".to_string(),
            signal: "",
            server: Some(addr.clone()),
        });
        for child in children_of(*pid) {
            out.push(Fault {
                pid: child,
                role: "server child".to_string(),
                signal: "",
                server: Some(addr.clone()),
            });
        }
    }
    out
}

/// Whether a failed run is explained by `faults` (module docs). A run that failed before any
/// task did (a session that could not open, a buffer that could not be made) is judged by its
/// check message instead of task rows.
fn explained(rows: &[crate::TaskRow], check: &str, faults: &[Fault]) -> Result<(), String> {
    if faults.is_empty() {
        return Err(format!("failed with no fault injected: {check}"));
    }
    let names_fault = |message: &str| {
        faults.iter().any(|f| {
            message.contains(&format!("pid={}", f.pid))
                || message.contains(&format!("pid {}", f.pid))
                || f.server
                    .as_ref()
                    .is_some_and(|a| message.contains(a.trim_start_matches("http://")))
        })
    };
    let codes = [
        ErrorCode::ChildDied,
        ErrorCode::ChildUnresponsive,
        ErrorCode::WorkerLost,
        ErrorCode::InnerRunFailed,
    ]
    .map(|c| c.code());
    let failed: Vec<_> = rows
        .iter()
        .filter_map(|r| r.error.as_ref().filter(|e| !e.expected && !e.skipped))
        .collect();
    if failed.is_empty() {
        return if names_fault(check) {
            Ok(())
        } else {
            Err(format!(
                "failed without naming the faulted process ({faults:?}): {check}"
            ))
        };
    }
    for e in failed {
        if !e.code.is_some_and(|c| codes.contains(&c)) {
            return Err(format!(
                "a task failed with {} after {faults:?}: {}",
                e.name, e.message
            ));
        }
        if !names_fault(&e.message) {
            return Err(format!(
                "a task failed with {} without naming the faulted process ({faults:?}): {}",
                e.name, e.message
            ));
        }
    }
    Ok(())
}

/// One case to run.
struct Pick {
    file: usize,
    case: String,
    level: SceneLevel,
}

/// Runs the soak; `progress` is called after each run with the report so far.
pub fn soak(
    options: &SoakOptions,
    pool: &mut dyn ServerPool,
    mut progress: impl FnMut(&SoakReport),
) -> anyhow::Result<SoakReport> {
    let files: Arc<Vec<SceneFile>> = Arc::new(
        options
            .files
            .iter()
            .map(|p| SceneFile::load(p).map_err(|e| anyhow::anyhow!("{e}")))
            .collect::<anyhow::Result<_>>()?,
    );
    let mut picks = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let level = f.scene.level();
        if level == SceneLevel::L2 {
            anyhow::bail!(
                "{}: a level-2 scene has no processes to fault (give level-3 or level-4 scenes)",
                f.path.display()
            );
        }
        for c in &f.cases {
            picks.push(Pick {
                file: i,
                case: c.name.clone(),
                level,
            });
        }
    }
    anyhow::ensure!(!picks.is_empty(), "no case to soak");
    let mut rng = fastrand::Rng::with_seed(options.seed);
    let mut report = SoakReport::default();
    let started = Instant::now();
    let mut baseline: Option<Holdings> = None;
    // How long a run of each case takes without a fault (a moving average).
    let mut typical: BTreeMap<String, Duration> = BTreeMap::new();
    let mut first = holdings();
    while started.elapsed() < options.duration {
        let pick = &picks[rng.usize(..picks.len())];
        let servers = pool.servers();
        let env = RunnerEnv {
            liveness_timeout: Some(LIVENESS),
            // A child stopped before it is ready is found by this timeout (liveness probes
            // start with the run).
            startup_timeout: Some((options.run_deadline / 4).min(Duration::from_secs(10))),
            task_timeout: Some(options.run_deadline / 2),
            remote: if pick.level == SceneLevel::L4 {
                servers.iter().map(|(a, _)| RemoteWorker::new(a)).collect()
            } else {
                Vec::new()
            },
            ..RunnerEnv::new(EndpointMode::ChildProcess, true)
        };
        let run_options = RunOptions {
            case: Some(pick.case.clone()),
            output: options.output.clone(),
            diagnostics: Diagnostics::default(),
            env,
        };
        let name = format!("{}/{}", files[pick.file].scene.name(), pick.case);
        // Somewhere within a typical run of this case, so that most faults land during one.
        let window = typical
            .get(&name)
            .copied()
            .unwrap_or(Duration::from_millis(150));
        let fault_at = (rng.f64() < options.fault_rate)
            .then(|| Duration::from_micros(rng.u64(..window.as_micros().max(1000) as u64)));
        let signal = if rng.bool() {
            (Signal::KILL, "SIGKILL")
        } else {
            (Signal::STOP, "SIGSTOP")
        };
        let choice = rng.u64(..);
        *report.cases.entry(name.clone()).or_default() += 1;
        let run_started = Instant::now();
        let outcome = one_run(
            Arc::clone(&files),
            pick.file,
            run_options,
            options.run_deadline,
            fault_at.map(|at| Plan {
                at,
                signal,
                choice,
                servers: servers.clone(),
            }),
        );
        report.runs += 1;
        let (result, faults, hit_run) = match outcome {
            RunOutcome::Hung(faults) => {
                report.problems.push(format!(
                    "run {} ({name}) still running after {:?} (faults {faults:?}): a hang",
                    report.runs, options.run_deadline
                ));
                break;
            }
            RunOutcome::Done {
                result,
                faults,
                during,
            } => (result, faults, during),
        };
        let took = run_started.elapsed();
        if faults.is_empty() {
            let t = typical.entry(name.clone()).or_insert(took);
            *t = (*t * 3 + took) / 4;
        }
        if report.slowest.as_ref().is_none_or(|(d, _)| took > *d) {
            report.slowest = Some((took, format!("{name}, faults {faults:?}")));
        }
        for f in &faults {
            *report
                .faults
                .entry(format!("{} {}", f.role, f.signal))
                .or_default() += 1;
            if !hit_run {
                report.faults_between_runs += 1;
            }
        }
        match result {
            Ok(case) => match &case.check {
                Ok(()) => report.passed += 1,
                Err(check) => match explained(&case.rows, check, &faults) {
                    Ok(()) => report.failed_by_fault += 1,
                    Err(why) => report
                        .problems
                        .push(format!("run {} ({name}): {why}", report.runs)),
                },
            },
            Err(e) => report
                .problems
                .push(format!("run {} ({name}) did not run: {e:#}", report.runs)),
        }
        // Faulted servers are replaced (a stopped one killed first); stopped local children
        // were killed by their Worker's liveness check, or are killed now.
        for f in &faults {
            if f.role == "server" {
                pool.restart(f.pid)?;
            } else if f.signal == "SIGSTOP"
                && let Some(pid) = Pid::from_raw(f.pid as i32)
            {
                let _ = rustix::process::kill_process(pid, Signal::CONT);
            }
        }
        if let Some(leak) = leaked_children(&pool.servers()) {
            report
                .problems
                .push(format!("run {} ({name}): {leak}", report.runs));
        }
        let now = holdings();
        if started.elapsed() < options.warm_up {
            first = now;
        } else if baseline.is_none() {
            baseline = Some(first);
            report.rss_after_warm_up = first.rss;
            report.threads_after_warm_up = first.threads;
        }
        if let Some(b) = baseline
            && let Some(leak) = grew(&b, &now)
        {
            report
                .problems
                .push(format!("after run {} ({name}): {leak}", report.runs));
        }
        report.rss_end = now.rss;
        report.threads_end = now.threads;
        report.elapsed = started.elapsed();
        progress(&report);
        if report.problems.len() >= 20 {
            break;
        }
    }
    report.elapsed = started.elapsed();
    if baseline.is_none() {
        report.rss_after_warm_up = first.rss;
        report.threads_after_warm_up = first.threads;
    }
    let growth_limit = (64 << 20).max(report.rss_after_warm_up / 4);
    if report.rss_end > report.rss_after_warm_up + growth_limit {
        report.problems.push(format!(
            "RSS grew from {} to {} bytes after warm-up (limit +{growth_limit})",
            report.rss_after_warm_up, report.rss_end
        ));
    }
    Ok(report)
}

/// A child of this process that is not a server, still there 5 s after its run.
fn leaked_children(servers: &[(String, u32)]) -> Option<String> {
    let me = std::process::id();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<u32> = children_of(me)
            .into_iter()
            .filter(|p| !servers.iter().any(|s| s.1 == *p))
            .collect();
        if left.is_empty() {
            return None;
        }
        if Instant::now() >= until {
            return Some(format!("child process(es) {left:?} outlived their run"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What grew since the baseline (threads by a small slack: runtimes park a few helpers).
fn grew(base: &Holdings, now: &Holdings) -> Option<String> {
    const THREAD_SLACK: usize = 4;
    let mut out = Vec::new();
    if now.threads > base.threads + THREAD_SLACK {
        out.push(format!("threads {} → {}", base.threads, now.threads));
    }
    if now.memfds > base.memfds {
        out.push(format!(
            "memfd descriptors {} → {}",
            base.memfds, now.memfds
        ));
    }
    if now.shm > base.shm {
        out.push(format!("/dev/shm entries {} → {}", base.shm, now.shm));
    }
    (!out.is_empty()).then(|| format!("leaked {}", out.join(", ")))
}

/// A run's fault: when, which signal, a number that picks the target among those present
/// then, and the servers.
struct Plan {
    at: Duration,
    signal: (Signal, &'static str),
    choice: u64,
    servers: Vec<(String, u32)>,
}

enum RunOutcome {
    Done {
        result: anyhow::Result<crate::CaseResult>,
        faults: Vec<Fault>,
        /// Whether the fault came while the run was still going.
        during: bool,
    },
    Hung(Vec<Fault>),
}

/// Runs one case on a thread of its own, injecting the planned fault from this one. A run past
/// its deadline is left running (its thread cannot be stopped) and reported as a hang.
fn one_run(
    files: Arc<Vec<SceneFile>>,
    file: usize,
    options: RunOptions,
    deadline: Duration,
    plan: Option<Plan>,
) -> RunOutcome {
    let done = Arc::new(AtomicBool::new(false));
    let slot: Arc<Mutex<Option<anyhow::Result<crate::CaseResult>>>> = Arc::new(Mutex::new(None));
    let started = Instant::now();
    let (done2, slot2) = (Arc::clone(&done), Arc::clone(&slot));
    let spawned = std::thread::Builder::new()
        .name("pto-soak-run".to_string())
        .spawn(move || {
            let result = run_file(&files[file], &options, |_| {})
                .map(|mut reports| reports.remove(0).result);
            *slot2.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            done2.store(true, Ordering::SeqCst);
        });
    let runner = match spawned {
        Ok(handle) => handle,
        Err(e) => {
            return RunOutcome::Done {
                result: Err(anyhow::anyhow!("cannot start the run's thread: {e}")),
                faults: Vec::new(),
                during: false,
            };
        }
    };
    let mut faults = Vec::new();
    let mut during = false;
    if let Some(Plan {
        at,
        signal: (signal, name),
        choice,
        servers,
    }) = plan
    {
        while started.elapsed() < at && !done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let candidates = targets(&servers);
        if !candidates.is_empty() {
            let mut f = candidates[(choice % candidates.len() as u64) as usize].clone();
            during = !done.load(Ordering::SeqCst);
            if let Some(pid) = Pid::from_raw(f.pid as i32) {
                let _ = rustix::process::kill_process(pid, signal);
            }
            f.signal = name;
            faults.push(f);
        }
    }
    while !done.load(Ordering::SeqCst) {
        if started.elapsed() > deadline {
            return RunOutcome::Hung(faults);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = runner.join();
    let result = slot
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| Err(anyhow::anyhow!("the run's thread panicked")));
    RunOutcome::Done {
        result,
        faults,
        during,
    }
}

/// The scene files of level 3 and 4 under `dir` (what `pto soak` runs by default).
pub fn default_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .filter(|p| SceneFile::load(p).is_ok_and(|f| f.scene.level() != SceneLevel::L2))
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::TaskErrorInfo;

    fn row(code: Option<ErrorCode>, message: &str) -> crate::TaskRow {
        crate::TaskRow {
            task: "t".into(),
            chip: 0,
            sizing: None,
            blocks: None,
            arena: None,
            reserved_bytes: 0,
            high_water_bytes: None,
            usage: None,
            wall: None,
            error: Some(TaskErrorInfo::new(code, message.into())),
            env_problems: Vec::new(),
            warnings: Vec::new(),
            diagnostics_dir: None,
        }
    }

    fn chip(pid: u32) -> Fault {
        Fault {
            pid,
            role: "chip".into(),
            signal: "SIGKILL",
            server: None,
        }
    }

    fn server(addr: &str) -> Fault {
        Fault {
            pid: 77,
            role: "server".into(),
            signal: "SIGSTOP",
            server: Some(format!("http://{addr}")),
        }
    }

    #[test]
    fn a_failure_is_explained_only_by_a_fault_it_names_with_a_code_for_it() {
        let died = row(
            Some(ErrorCode::ChildDied),
            "chip_child[1] pid=4242 died: terminated by signal 9 (SIGKILL)",
        );
        assert!(explained(std::slice::from_ref(&died), "x", &[chip(4242)]).is_ok());
        // No fault: always a problem.
        assert!(explained(std::slice::from_ref(&died), "x", &[]).is_err());
        // Another process was faulted.
        assert!(explained(std::slice::from_ref(&died), "x", &[chip(4243)]).is_err());
        // A code a fault does not cause.
        let wrong = row(Some(ErrorCode::HeapRingDeadlock), "pid=4242 ring 0");
        assert!(explained(&[wrong], "x", &[chip(4242)]).is_err());
        // A lost server, named by its address.
        let lost = row(
            Some(ErrorCode::WorkerLost),
            "remote worker 127.0.0.1:7070 stopped answering",
        );
        assert!(explained(&[lost], "x", &[server("127.0.0.1:7070")]).is_ok());
        // A run that failed before any task: its check message must name the fault.
        assert!(
            explained(
                &[],
                "remote worker 127.0.0.1:7070: gone",
                &[server("127.0.0.1:7070")]
            )
            .is_ok()
        );
        assert!(
            explained(
                &[],
                "wrong result at element 3",
                &[server("127.0.0.1:7070")]
            )
            .is_err()
        );
    }

    #[test]
    fn growth_after_warm_up_is_a_leak() {
        let base = Holdings {
            threads: 10,
            memfds: 0,
            shm: 3,
            rss: 1 << 30,
        };
        assert_eq!(grew(&base, &base), None);
        let slack = Holdings {
            threads: 14,
            ..base
        };
        assert_eq!(grew(&base, &slack), None);
        let leak = Holdings {
            threads: 15,
            memfds: 1,
            shm: 4,
            ..base
        };
        let why = grew(&base, &leak).unwrap();
        assert!(why.contains("threads 10 → 15"), "{why}");
        assert!(why.contains("memfd descriptors 0 → 1"), "{why}");
        assert!(why.contains("/dev/shm entries 3 → 4"), "{why}");
    }

    #[test]
    fn level_2_scenes_are_refused() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes");
        let options = SoakOptions {
            duration: Duration::from_secs(1),
            seed: 1,
            files: vec![dir.join("vector_example.toml")],
            fault_rate: 0.5,
            run_deadline: Duration::from_secs(10),
            warm_up: Duration::ZERO,
            output: std::env::temp_dir(),
        };
        struct NoServers;
        impl ServerPool for NoServers {
            fn servers(&self) -> Vec<(String, u32)> {
                Vec::new()
            }
            fn restart(&mut self, _: u32) -> anyhow::Result<()> {
                Ok(())
            }
        }
        let e = soak(&options, &mut NoServers, |_| {}).unwrap_err();
        assert!(e.to_string().contains("level-2"), "{e}");
        let files = default_files(&dir);
        assert!(!files.is_empty());
        assert!(files.iter().all(|f| !f.ends_with("vector_example.toml")));
    }
}
