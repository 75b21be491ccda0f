//! `Worker::builder(level)…build()`: the options of NODE_RUNTIME.md §1.1, checked at `build`.
//!
//! `build` only checks and records; no thread, mapping or chip exists before `init`. Every
//! violation is a [`BuildError`] naming the option. Environment tier (RING_CONFIG.md §4.1): the
//! chips see `chip_env_source` (default: the process environment, copied at `init`) overlaid
//! with the `ring_env` pairs, later pairs winning; in-process chips snapshot exactly that at
//! `init`. (We overlay `ring_env` on an explicit `chip_env_source` too, rather than ignoring
//! the pairs, so a test can start from an empty environment and add pairs.)

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use pto_chip::ChipSpec;
use pto_types::ring_config::env::EnvSource;
use pto_types::wait::DEFAULT_SPIN;

use crate::error::BuildError;
use crate::remote::RemoteWorker;
use crate::worker::Worker;

/// How children are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum EndpointMode {
    /// Each chip and sub worker is a child process talking through a shared-memory mailbox
    /// (§4); callables are resolved by name in the child.
    #[default]
    ChildProcess,
    /// Chips and subs are threads of this process; closures allowed.
    InProcess,
}

impl EndpointMode {
    /// Both modes, child processes (the default) first.
    pub const ALL: [EndpointMode; 2] = [EndpointMode::ChildProcess, EndpointMode::InProcess];

    /// `child-process` or `in-process`: the one spelling every command, table and binding
    /// uses.
    pub fn name(self) -> &'static str {
        match self {
            EndpointMode::ChildProcess => "child-process",
            EndpointMode::InProcess => "in-process",
        }
    }
}

impl std::fmt::Display for EndpointMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not an endpoint mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an endpoint mode (child-process or in-process)")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for EndpointMode {
    type Err = UnknownMode;

    /// `child-process` or `in-process` (`child_process` / `in_process` too, for keyword-style
    /// callers such as Python).
    fn from_str(text: &str) -> Result<EndpointMode, UnknownMode> {
        match text {
            "child-process" | "child_process" => Ok(EndpointMode::ChildProcess),
            "in-process" | "in_process" => Ok(EndpointMode::InProcess),
            _ => Err(UnknownMode(text.chars().take(80).collect())),
        }
    }
}

/// Which image child processes run (NODE_RUNTIME.md §1.1, §4.2).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum ChildExe {
    /// This executable again: it must call `pto_node::child_main()` first in `main`, or (a
    /// test binary) declare `pto_node::test_child_entry!()`.
    #[default]
    CurrentExe,
    /// A worker binary with the same registrations that calls `pto_node::child_main()` first.
    Path(PathBuf),
    /// A program started with these arguments whose process enters `pto_node::child_main()`
    /// first, e.g. an interpreter that loads the same registrations
    /// (`python3 -c "import pto._native as n; n._child_main()"`).
    Command {
        program: PathBuf,
        args: Vec<std::ffi::OsString>,
    },
}

/// What [`ChildExe::CurrentExe`] means in this process when it is set (see
/// [`set_host_child_exe`]).
static HOST_CHILD_EXE: parking_lot::RwLock<Option<ChildExe>> = parking_lot::RwLock::new(None);

/// Makes [`ChildExe::CurrentExe`] (every Worker's default, the scenes' Workers included) start
/// `exe` in this process. For hosts whose executable is not a pto binary: a Python interpreter
/// that loaded pto as an extension module re-executes itself with the arguments that import the
/// module and enter `child_main`. `ChildExe::CurrentExe` given here resets it.
pub fn set_host_child_exe(exe: ChildExe) {
    *HOST_CHILD_EXE.write() = match exe {
        ChildExe::CurrentExe => None,
        other => Some(other),
    };
}

/// The image `ChildExe::CurrentExe` stands for now: the host's choice, if any.
pub(crate) fn host_child_exe() -> Option<ChildExe> {
    HOST_CHILD_EXE.read().clone()
}

/// The checked options of a Worker.
#[derive(Clone, Debug)]
pub(crate) struct WorkerOptions {
    pub(crate) level: u32,
    pub(crate) chips: usize,
    pub(crate) chip_specs: Vec<ChipSpec>,
    pub(crate) sub_workers: usize,
    pub(crate) mode: EndpointMode,
    pub(crate) child_exe: ChildExe,
    pub(crate) heap_ring_size: u64,
    pub(crate) max_queued_runs: usize,
    pub(crate) startup_timeout: Duration,
    pub(crate) control_timeout: Duration,
    pub(crate) heap_alloc_timeout: Duration,
    pub(crate) close_timeout: Duration,
    pub(crate) shutdown_grace: Duration,
    pub(crate) scheduler_spin: Duration,
    pub(crate) lane_spin: Duration,
    pub(crate) waiter_spin: Duration,
    pub(crate) ring_env: Vec<(OsString, OsString)>,
    pub(crate) strict_env: bool,
    pub(crate) chip_env_source: Option<EnvSource>,
    pub(crate) track_war: bool,
    pub(crate) liveness_timeout: Duration,
    pub(crate) task_timeout: Option<Duration>,
    pub(crate) restart_children: bool,
    pub(crate) lane_depth: usize,
    /// Remote L3 workers (level 4): next-level workers `0..n`, before `add_worker` children.
    pub(crate) remote_workers: Vec<RemoteWorker>,
    /// Child-process mode: sub workers are threads of this process (closures allowed).
    pub(crate) subs_in_process: bool,
}

/// Builds a [`Worker`]; see NODE_RUNTIME.md §1.1 for every option.
#[derive(Debug)]
pub struct WorkerBuilder {
    level: u32,
    chips: usize,
    chip_specs: BTreeMap<usize, ChipSpec>,
    sub_workers: usize,
    mode: EndpointMode,
    child_exe: ChildExe,
    heap_ring_size: u64,
    max_queued_runs: usize,
    startup_timeout: Duration,
    control_timeout: Duration,
    heap_alloc_timeout: Duration,
    close_timeout: Duration,
    shutdown_grace: Duration,
    scheduler_spin: Duration,
    lane_spin: Duration,
    waiter_spin: Duration,
    ring_env: Vec<(OsString, OsString)>,
    strict_env: bool,
    chip_env_source: Option<EnvSource>,
    track_war: bool,
    liveness_timeout: Duration,
    task_timeout: Option<Duration>,
    restart_children: bool,
    lane_depth: usize,
    remote_workers: Vec<RemoteWorker>,
    subs_in_process: bool,
}

/// The default of `lane_depth` (chosen by `pto bench dispatch`; BENCHMARKS.md B3).
pub const DEFAULT_LANE_DEPTH: usize = 16;
/// The largest `lane_depth` (a child's mailbox holds one 64 KiB frame per task).
pub const MAX_LANE_DEPTH: usize = 64;

/// The default of `liveness_timeout`.
pub const DEFAULT_LIVENESS_TIMEOUT: Duration = Duration::from_secs(5);

/// Smallest `heap_ring_size`.
pub const MIN_HEAP_RING_SIZE: u64 = 64 << 10;

impl WorkerBuilder {
    pub(crate) fn new(level: u32) -> WorkerBuilder {
        WorkerBuilder {
            level,
            chips: 0,
            chip_specs: BTreeMap::new(),
            sub_workers: 0,
            mode: EndpointMode::default(),
            child_exe: ChildExe::default(),
            heap_ring_size: 256 << 20,
            max_queued_runs: 4,
            startup_timeout: Duration::from_secs(60),
            control_timeout: Duration::from_secs(30),
            heap_alloc_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
            scheduler_spin: DEFAULT_SPIN,
            lane_spin: DEFAULT_SPIN,
            waiter_spin: Duration::from_micros(20),
            ring_env: Vec::new(),
            strict_env: false,
            chip_env_source: None,
            track_war: false,
            liveness_timeout: DEFAULT_LIVENESS_TIMEOUT,
            task_timeout: None,
            restart_children: true,
            lane_depth: DEFAULT_LANE_DEPTH,
            remote_workers: Vec::new(),
            subs_in_process: false,
        }
    }

    /// Number of chip workers (level 3 only).
    pub fn chips(mut self, n: usize) -> Self {
        self.chips = n;
        self
    }

    /// The spec of chip `i` (default `ChipSpec::default()`).
    pub fn chip_spec(mut self, i: usize, spec: ChipSpec) -> Self {
        self.chip_specs.insert(i, spec);
        self
    }

    pub fn sub_workers(mut self, m: usize) -> Self {
        self.sub_workers = m;
        self
    }

    pub fn endpoint_mode(mut self, mode: EndpointMode) -> Self {
        self.mode = mode;
        self
    }

    /// The image child processes run (child-process mode).
    pub fn child_exe(mut self, exe: ChildExe) -> Self {
        self.child_exe = exe;
        self
    }

    /// How long `init` waits for every child to report ready (child-process mode).
    pub fn startup_timeout(mut self, d: Duration) -> Self {
        self.startup_timeout = d;
        self
    }

    /// Bytes per heap ring (4 rings) for `orch.alloc`; a multiple of 4096, at least 64 KiB.
    pub fn heap_ring_size(mut self, bytes: u64) -> Self {
        self.heap_ring_size = bytes;
        self
    }

    /// `submit` blocks while this many runs are unfinished (≥ 1).
    pub fn max_queued_runs(mut self, n: usize) -> Self {
        self.max_queued_runs = n;
        self
    }

    pub fn control_timeout(mut self, d: Duration) -> Self {
        self.control_timeout = d;
        self
    }

    /// How long `alloc` waits for heap-ring space unless exhaustion is provable.
    pub fn heap_alloc_timeout(mut self, d: Duration) -> Self {
        self.heap_alloc_timeout = d;
        self
    }

    pub fn close_timeout(mut self, d: Duration) -> Self {
        self.close_timeout = d;
        self
    }

    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.shutdown_grace = d;
        self
    }

    /// How long a child process may go without answering a liveness probe before it is killed
    /// and treated as dead (default 5 s). Probes are answered by a thread of the child that
    /// callables never block, so a long task is not "unresponsive"; bound those with
    /// [`WorkerBuilder::task_timeout`]. Child-process mode only (threads cannot stop).
    pub fn liveness_timeout(mut self, d: Duration) -> Self {
        self.liveness_timeout = d;
        self
    }

    /// How long one task may run (default: no limit). A child-process task that runs longer
    /// fails with `TASK_TIMEOUT`, and its child is killed and restarted (a callable cannot be
    /// cancelled safely in place). In-process, the task fails with `SCHEDULER_TIMEOUT` (the
    /// chip watchdog's code) and the lane stays busy until the callable returns.
    pub fn task_timeout(mut self, d: Option<Duration>) -> Self {
        self.task_timeout = d;
        self
    }

    /// Whether a child process that died is restarted in the background (default: yes). Off,
    /// its lane stays dead: every later submit aimed at it fails with `WorkerUnavailable`.
    /// Either way, the tasks it had are failed, never retried.
    pub fn restart_children(mut self, on: bool) -> Self {
        self.restart_children = on;
        self
    }

    /// How many tasks one chip or sub lane holds at a time (default [`DEFAULT_LANE_DEPTH`],
    /// 1 to [`MAX_LANE_DEPTH`]): the running one and those queued behind it, so a busy lane
    /// starts its next task without waiting for the scheduler. A child process gets one
    /// 64 KiB mailbox frame per task (memory is touched only as frames are used). 1 hands a
    /// lane one task at a time. A sub lane whose latest task ran 50 µs or more holds at most
    /// two (a sub task queued on a busy lane cannot move to an idle one). Group members start
    /// only on idle lanes, whatever the depth; tasks queued on a lane that dies fail (chip
    /// tasks, aimed at it) or go to another lane (sub tasks).
    pub fn lane_depth(mut self, n: usize) -> Self {
        self.lane_depth = n;
        self
    }

    /// Spin windows of the scheduler, of the worker lanes and of `RunHandle::wait`.
    pub fn spin_window(mut self, scheduler: Duration, lane: Duration, waiter: Duration) -> Self {
        self.scheduler_spin = scheduler;
        self.lane_spin = lane;
        self.waiter_spin = waiter;
        self
    }

    /// An environment pair for the chips (later pairs win); the process is untouched.
    pub fn ring_env(mut self, var: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.ring_env.push((var.into(), value.into()));
        self
    }

    /// Environment problems fail `init`.
    pub fn strict_env(mut self, strict: bool) -> Self {
        self.strict_env = strict;
        self
    }

    /// The chips' base environment instead of the process environment (in-process only).
    pub fn chip_env_source(mut self, source: EnvSource) -> Self {
        self.chip_env_source = Some(source);
        self
    }

    /// Order write-after-read: writers wait for overlapping live readers (§2.3).
    pub fn track_war(mut self, on: bool) -> Self {
        self.track_war = on;
        self
    }

    /// Checks every option; the Worker is NEW (no threads yet).
    pub fn build(mut self) -> Result<Worker, BuildError> {
        self.check_level()?;
        self.check_remote()?;
        let chip_specs = checked_chip_specs(self.chips, std::mem::take(&mut self.chip_specs))?;
        self.check_limits()?;
        Ok(Worker::new(WorkerOptions {
            level: self.level,
            chips: self.chips,
            chip_specs,
            sub_workers: self.sub_workers,
            mode: self.mode,
            child_exe: self.child_exe,
            heap_ring_size: self.heap_ring_size,
            max_queued_runs: self.max_queued_runs,
            startup_timeout: self.startup_timeout,
            control_timeout: self.control_timeout,
            heap_alloc_timeout: self.heap_alloc_timeout,
            close_timeout: self.close_timeout,
            shutdown_grace: self.shutdown_grace,
            scheduler_spin: self.scheduler_spin,
            lane_spin: self.lane_spin,
            waiter_spin: self.waiter_spin,
            ring_env: self.ring_env,
            strict_env: self.strict_env,
            chip_env_source: self.chip_env_source,
            track_war: self.track_war,
            liveness_timeout: self.liveness_timeout,
            task_timeout: self.task_timeout,
            restart_children: self.restart_children,
            lane_depth: self.lane_depth,
            remote_workers: self.remote_workers,
            subs_in_process: self.subs_in_process,
        }))
    }

    /// In child-process mode, runs the sub workers as threads of this process (chips stay child
    /// processes), so sub callables may be closures: for sub functions that only exist in this
    /// process, such as a Python function. In-process mode: no effect.
    pub fn subs_in_process(mut self, yes: bool) -> Self {
        self.subs_in_process = yes;
        self
    }

    /// Adds a remote L3 worker at `address` (`http://HOST:PORT`, a `pto serve` daemon) to a
    /// level-4 Worker: it becomes the next-level worker with the next index (remote workers
    /// come first, in the order given, then `add_worker` children). Each task submitted to it
    /// runs a node callable of the server's image as a whole L3 run there.
    pub fn remote_worker(self, address: &str) -> Self {
        self.remote(RemoteWorker::new(address))
    }

    /// [`WorkerBuilder::remote_worker`] with a token, TLS or timeouts ([`RemoteWorker`]).
    pub fn remote(mut self, worker: RemoteWorker) -> Self {
        self.remote_workers.push(worker);
        self
    }

    fn check_remote(&self) -> Result<(), BuildError> {
        if self.remote_workers.is_empty() {
            return Ok(());
        }
        if self.level < 4 {
            return invalid(
                "remote_worker",
                format!(
                    "remote workers are L3 Workers: only a level-4 Worker has them, this one is level {}",
                    self.level
                ),
            );
        }
        for (i, w) in self.remote_workers.iter().enumerate() {
            if let Err(reason) = w.validate() {
                return invalid("remote_worker", format!("remote worker {i}: {reason}"));
            }
        }
        Ok(())
    }

    /// The level against the mode and the kind of children.
    fn check_level(&self) -> Result<(), BuildError> {
        if self.level < 3 {
            return invalid(
                "level",
                format!(
                    "must be at least 3 (chips run L2 directly through pto_chip::ChipWorker), got {}",
                    self.level
                ),
            );
        }
        if self.level > 3 && self.mode == EndpointMode::InProcess {
            return invalid(
                "level",
                format!(
                    "level {} runs its Worker children as child processes; EndpointMode::InProcess is not implemented for L4",
                    self.level
                ),
            );
        }
        if self.level > 3 && self.chips > 0 {
            return invalid(
                "chips",
                format!(
                    "a level-{} Worker has Worker children (add_worker), not chips",
                    self.level
                ),
            );
        }
        if self.level == 3 && self.chips + self.sub_workers == 0 {
            return invalid(
                "chips",
                "a Worker needs at least one chip or sub worker".to_string(),
            );
        }
        Ok(())
    }

    /// The heap ring, the run queue, the timeouts and the environment source.
    fn check_limits(&self) -> Result<(), BuildError> {
        if !self.heap_ring_size.is_multiple_of(4096) || self.heap_ring_size < MIN_HEAP_RING_SIZE {
            return invalid(
                "heap_ring_size",
                format!(
                    "{} must be a multiple of 4096 and at least {MIN_HEAP_RING_SIZE}",
                    self.heap_ring_size
                ),
            );
        }
        if !(1..=MAX_LANE_DEPTH).contains(&self.lane_depth) {
            return invalid(
                "lane_depth",
                format!("{} must be between 1 and {MAX_LANE_DEPTH}", self.lane_depth),
            );
        }
        if self.max_queued_runs == 0 {
            return invalid("max_queued_runs", "must be at least 1".to_string());
        }
        for (option, d) in [
            ("startup_timeout", self.startup_timeout),
            ("control_timeout", self.control_timeout),
            ("heap_alloc_timeout", self.heap_alloc_timeout),
            ("close_timeout", self.close_timeout),
            ("shutdown_grace", self.shutdown_grace),
            ("liveness_timeout", self.liveness_timeout),
            ("task_timeout", self.task_timeout.unwrap_or(Duration::MAX)),
        ] {
            if d.is_zero() {
                return invalid(option, "must be greater than zero".to_string());
            }
        }
        if self.chip_env_source.is_some() && self.mode == EndpointMode::ChildProcess {
            return invalid(
                "chip_env_source",
                "only in EndpointMode::InProcess (child processes read their own environment; use ring_env)".to_string(),
            );
        }
        Ok(())
    }
}

/// Every chip's spec: the default, or the one `chip_spec` set, each checked.
fn checked_chip_specs(
    chips: usize,
    specs: BTreeMap<usize, ChipSpec>,
) -> Result<Vec<ChipSpec>, BuildError> {
    let mut chip_specs = vec![ChipSpec::default(); chips];
    for (i, spec) in specs {
        if i >= chips {
            return invalid(
                "chip_spec",
                format!("chip {i} does not exist (chips({chips}))"),
            );
        }
        if let Err(e) = spec.validate() {
            return invalid("chip_spec", format!("chip {i}: {e}"));
        }
        chip_specs[i] = spec;
    }
    Ok(chip_specs)
}

/// The `BuildError` naming `option`.
fn invalid<T>(option: &'static str, reason: String) -> Result<T, BuildError> {
    Err(BuildError { option, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_mode_names_round_trip() {
        for mode in EndpointMode::ALL {
            assert_eq!(mode.to_string().parse::<EndpointMode>(), Ok(mode));
        }
        assert_eq!("in_process".parse(), Ok(EndpointMode::InProcess));
        let err = "threads".parse::<EndpointMode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"threads\" is not an endpoint mode (child-process or in-process)"
        );
    }
}
