//! Liveness (issue 10): no run ever hangs on a dead, stopped or slow child.
//!
//! Each scenario puts a task aimed at the victim child in one state — RUNNING, READY behind
//! another task of the same lane, PENDING on a producer of a live lane, a member of a group, a
//! task of a later run — then kills (SIGKILL) or stops (SIGSTOP) the victim. Every task aimed at
//! it must fail naming the child, within 1 s of a kill or `liveness_timeout` + 1 s of a stop;
//! its dependents are skipped, an independent branch on a live lane completes, the lane is
//! restarted in the background and later runs on it succeed; `close` leaves no process, no
//! memfd and no /dev/shm entry. Child-process mode only: in-process lanes are threads, which
//! cannot die or stop on their own; their timeout rule is tested in `timeouts`.

use std::time::{Duration, Instant};

use pto_node::{CallableHandle, FailureKind, RunError, RunReport, TaskOutcome, WaitError, Worker};
use pto_types::{CallConfig, ErrorCode, RuntimeEnv, TaskArgs, Tensor};
use rustix::process::{Pid, Signal};

use crate::child::{dev_shm, is_my_child, pid_of, running, worker_memfds};
use crate::common::*;

/// Who is hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victim {
    /// Chip child 0 of a Worker with 2 chips and 1 sub worker.
    Chip,
    /// The only sub child.
    Sub,
}

/// What the victim's task is doing when its child is hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Running,
    Ready,
    Pending,
    Group,
    LaterRun,
}

const LIVENESS: Duration = Duration::from_secs(1);

fn small() -> CallConfig {
    CallConfig::with_runtime_env(
        RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(1 << 20)
            .with_dep_pool(64),
    )
}

/// Handles and tensors of one scenario (`Clone`, so each orchestration closure owns one).
#[derive(Clone)]
struct Setup {
    victim: Victim,
    fail_if: CallableHandle,
    add: CallableHandle,
    copy: CallableHandle,
    fill: CallableHandle,
    /// a, out, dep_out, p, ind, ind_out, ind_out2, held (written by the holder).
    t: Vec<Tensor>,
    cfg: CallConfig,
}

type Orch<'a, 'b> = &'a mut pto_node::Orchestrator<'b>;
type OrchResult = Result<(), pto_node::OrchError>;

impl Setup {
    fn new(w: &Worker, victim: Victim) -> (Setup, Vec<pto_node::HostBuffer>) {
        let (bufs, t): (Vec<_>, Vec<_>) = (0..8).map(|i| buf(w, 64, i as f32)).unzip();
        let s = Setup {
            victim,
            fail_if: chip(w, "fail_if"),
            add: chip(w, "elementwise_add"),
            copy: copier(w),
            fill: filler(w),
            t,
            cfg: small(),
        };
        (s, bufs)
    }

    /// The victim task (`out = f(input)`) on the victim's lane.
    fn victim_task(&self, o: Orch<'_, '_>, input: usize) -> OrchResult {
        let (x, out) = (&self.t[input], &self.t[1]);
        match self.victim {
            Victim::Chip => {
                let args = TaskArgs::new().input(x).input(x).output_existing(out);
                o.submit_next_level(&self.add, args.label("victim"), &self.cfg, 0)?
            }
            Victim::Sub => {
                let args = TaskArgs::new().input(x).output_existing(out);
                o.submit_sub(&self.copy, args.label("victim"))?
            }
        };
        Ok(())
    }

    /// A 10 s task on the victim's lane, writing `t[out]`.
    fn long_task(&self, o: Orch<'_, '_>, out: usize, label: &str) -> OrchResult {
        let out = &self.t[out];
        match self.victim {
            Victim::Chip => {
                let args = TaskArgs::new()
                    .output_existing(out)
                    .scalar(0u64)
                    .scalar(10_000u64);
                o.submit_next_level(&self.fail_if, args.label(label), &self.cfg, 0)?
            }
            Victim::Sub => {
                let args = TaskArgs::new()
                    .output_existing(out)
                    .scalar(u64::from(1.0f32.to_bits()))
                    .scalar(10_000u64);
                o.submit_sub(&self.fill, args.label(label))?
            }
        };
        Ok(())
    }

    /// A 1.5 s producer of `t[3]` on a lane that stays alive.
    fn producer(&self, o: Orch<'_, '_>) -> OrchResult {
        let p = &self.t[3];
        match self.victim {
            Victim::Chip => {
                let args = TaskArgs::new()
                    .output_existing(p)
                    .scalar(u64::from(7.0f32.to_bits()))
                    .scalar(1500u64);
                o.submit_sub(&self.fill, args.label("producer"))?
            }
            Victim::Sub => {
                let args = TaskArgs::new()
                    .output_existing(p)
                    .scalar(0u64)
                    .scalar(1500u64);
                o.submit_next_level(&self.fail_if, args.label("producer"), &self.cfg, 1)?
            }
        };
        Ok(())
    }

    /// The consumer of the victim's output, on a lane that stays alive.
    fn dependent(&self, o: Orch<'_, '_>) -> OrchResult {
        let (out, dep) = (&self.t[1], &self.t[2]);
        match self.victim {
            Victim::Chip => {
                let args = TaskArgs::new().input(out).output_existing(dep);
                o.submit_sub(&self.copy, args.label("dependent"))?
            }
            Victim::Sub => {
                let args = TaskArgs::new().input(out).input(out).output_existing(dep);
                o.submit_next_level(&self.add, args.label("dependent"), &self.cfg, 1)?
            }
        };
        Ok(())
    }

    /// A short task on chip 1, which no scenario hits: `t[out] = t[4] + t[4]`.
    fn independent(&self, o: Orch<'_, '_>, out: usize) -> OrchResult {
        let (x, out) = (&self.t[4], &self.t[out]);
        let args = TaskArgs::new().input(x).input(x).output_existing(out);
        o.submit_next_level(&self.add, args.label("independent"), &self.cfg, 1)?;
        Ok(())
    }

    /// A group over chips 0 and 1, pending on the producer.
    fn group(&self, o: Orch<'_, '_>) -> OrchResult {
        let p = &self.t[3];
        let member = |out: &Tensor| TaskArgs::new().input(p).input(p).output_existing(out);
        let members = vec![member(&self.t[1]).label("victim"), member(&self.t[2])];
        o.submit_next_level_group(&self.add, members, &self.cfg, &[0, 1])?;
        Ok(())
    }

    /// The first run of `state`.
    fn first_run(&self, o: Orch<'_, '_>, state: State) -> OrchResult {
        match state {
            State::Running => self.long_task(o, 1, "victim")?,
            State::Ready => {
                self.long_task(o, 7, "holder")?;
                self.victim_task(o, 0)?;
            }
            State::Pending => {
                self.producer(o)?;
                self.victim_task(o, 3)?;
            }
            State::Group => {
                self.producer(o)?;
                self.group(o)?;
            }
            State::LaterRun => self.long_task(o, 7, "holder")?,
        }
        if state != State::LaterRun {
            self.dependent(o)?;
        }
        self.independent(o, 5)
    }
}

fn worker() -> Worker {
    start(
        builder(Mode::ChildProcess, 2, 1)
            .liveness_timeout(LIVENESS)
            .max_queued_runs(4),
    )
}

fn signal(pid: u32, sig: Signal) {
    rustix::process::kill_process(Pid::from_raw(pid as i32).unwrap(), sig).unwrap();
}

/// The lane index of the victim in `Worker::stats().lanes` (chips first, then subs).
fn lane_index(victim: Victim) -> usize {
    match victim {
        Victim::Chip => 0,
        Victim::Sub => 2,
    }
}

fn victim_name(w: &Worker, victim: Victim) -> String {
    match victim {
        Victim::Chip => w.chip_name(0).unwrap(),
        Victim::Sub => w.sub_name(0).unwrap(),
    }
}

/// Submits the scenario's run(s): the victim task is labelled `victim`, its consumer
/// `dependent`, an unrelated task on a live lane `independent`; a task that keeps the victim's
/// lane busy is `holder`, a producer on a live lane `producer`.
fn submit(w: &Worker, s: &Setup, state: State) -> Vec<pto_node::RunHandle> {
    let first = s.clone();
    let mut runs = vec![
        w.submit(
            move |o, _, _| first.first_run(o, state),
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap(),
    ];
    if state == State::LaterRun {
        let second = s.clone();
        let run = w.submit(
            move |o, _, _| {
                second.victim_task(o, 0)?;
                second.dependent(o)?;
                second.independent(o, 6)
            },
            TaskArgs::new(),
            CallConfig::default(),
        );
        runs.push(run.unwrap());
    }
    runs
}

/// The failed run's error (every scenario's runs fail).
fn failed(run: &pto_node::RunHandle, within: Duration) -> Box<RunError> {
    match run.wait(Some(within)) {
        Err(WaitError::Failed(e)) => e,
        other => panic!(
            "run {} must fail within {within:?}, got {other:?}",
            run.run_id()
        ),
    }
}

/// When (since the run started) a task of `report` finished.
fn finished_at(report: &RunReport, label: &str) -> Instant {
    let t = report
        .task(label)
        .unwrap_or_else(|| panic!("no task {label:?}"));
    report.at(t.finished.expect("terminal tasks have a finish time"))
}

fn scenario(victim: Victim, state: State, sig: Signal) {
    let shm_before = dev_shm();
    let w = worker();
    let uid = w.uid();
    let (s, _bufs) = Setup::new(&w, victim);
    let name = victim_name(&w, victim);
    let pid = pid_of(&name);
    let runs = submit(&w, &s, state);
    std::thread::sleep(Duration::from_millis(300));
    let hit_at = Instant::now();
    signal(pid, sig);
    let errors: Vec<Box<RunError>> = runs
        .iter()
        .map(|r| failed(r, Duration::from_secs(10)))
        .collect();
    assert_failures(&errors, &name, pid, state, sig, hit_at);
    assert_lane_restarts_and_serves(&w, &s, victim, &name);
    let pids = w.child_pids();
    assert!(pids.len() >= 4, "three children and one restart: {pids:?}");
    let close = w.close();
    assert_eq!(close.abandoned_runs, 0);
    for pid in pids {
        assert!(!is_my_child(pid) && !running(pid), "child {pid} is left");
    }
    assert_eq!(worker_memfds(uid), Vec::<String>::new());
    assert_eq!(dev_shm(), shm_before);
}

/// The victim (child `name`, pid `pid`, hit by `sig` at `hit_at`) failed in time with the
/// signal's code and message; its dependent was skipped; the independent tasks succeeded.
fn assert_failures(
    errors: &[Box<RunError>],
    name: &str,
    pid: u32,
    state: State,
    sig: Signal,
    hit_at: Instant,
) {
    let bound = match sig {
        Signal::KILL => Duration::from_secs(1),
        _ => LIVENESS + Duration::from_secs(1),
    };
    let last = errors.last().unwrap();
    let v = last
        .report
        .task("victim")
        .expect("the victim task is reported");
    let TaskOutcome::Failed(f) = &v.outcome else {
        panic!("the victim must fail: {v:?}")
    };
    assert_eq!(f.kind, FailureKind::Endpoint, "{f}");
    let text = f.to_string();
    assert!(text.contains(&format!("pid={pid}")), "{text}");
    match sig {
        Signal::KILL => {
            assert!(text.contains("terminated by signal 9 (SIGKILL)"), "{text}");
            assert_eq!(f.code, Some(ErrorCode::ChildDied), "{text}");
        }
        _ => {
            assert!(text.contains("stopped answering liveness probes"), "{text}");
            assert_eq!(f.code, Some(ErrorCode::ChildUnresponsive), "{text}");
        }
    }
    assert_eq!(
        text.matches(name).count(),
        1,
        "the child is named once: {text}"
    );
    let took = finished_at(&last.report, "victim").saturating_duration_since(hit_at);
    assert!(
        took < bound,
        "the victim failed {took:?} after the signal (bound {bound:?})"
    );
    if state != State::Running {
        assert!(
            v.dispatched.is_none(),
            "the victim must not have started: {v:?}"
        );
        assert!(text.contains("before the task could start"), "{text}");
    }
    if let Some(d) = last.report.task("dependent") {
        assert!(
            matches!(&d.outcome, TaskOutcome::Failed(f) if f.kind == FailureKind::Skipped),
            "{d:?}"
        );
    }
    for e in errors {
        if let Some(i) = e.report.task("independent") {
            assert!(i.outcome.is_success(), "{i:?}");
        }
    }
}

/// The victim's lane restarts in the background with a fresh process (not `name`), and a
/// later run on it succeeds.
fn assert_lane_restarts_and_serves(w: &Worker, s: &Setup, victim: Victim, name: &str) {
    let lane = lane_index(victim);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(w.stats().lanes[lane].available && w.stats().lanes[lane].restarts == 1) {
        assert!(
            Instant::now() < deadline,
            "no restart: {:?}",
            w.stats().lanes
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let new_name = victim_name(w, victim);
    assert_ne!(new_name, name, "a fresh process serves the lane");
    let again = s.clone();
    let report = w
        .run(
            move |o, _, _| again.victim_task(o, 0),
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect("a run on the restarted lane succeeds");
    assert_eq!(report.lanes[lane].restarts, 1, "{:?}", report.lanes);
    assert_eq!(report.task("victim").unwrap().members[0].worker, new_name);
}

macro_rules! scenarios {
    ($($name:ident: $victim:ident, $state:ident, $sig:ident;)*) => {
        $(
            #[test]
            fn $name() {
                with_timeout(90, || scenario(Victim::$victim, State::$state, Signal::$sig));
            }
        )*
    };
}

scenarios! {
    kill_chip_running: Chip, Running, KILL;
    kill_chip_ready: Chip, Ready, KILL;
    kill_chip_pending: Chip, Pending, KILL;
    kill_chip_group_member: Chip, Group, KILL;
    kill_chip_later_run: Chip, LaterRun, KILL;
    kill_sub_running: Sub, Running, KILL;
    kill_sub_ready: Sub, Ready, KILL;
    kill_sub_pending: Sub, Pending, KILL;
    kill_sub_later_run: Sub, LaterRun, KILL;
    stop_chip_running: Chip, Running, STOP;
    stop_chip_ready: Chip, Ready, STOP;
    stop_chip_pending: Chip, Pending, STOP;
    stop_chip_group_member: Chip, Group, STOP;
    stop_chip_later_run: Chip, LaterRun, STOP;
    stop_sub_running: Sub, Running, STOP;
    stop_sub_ready: Sub, Ready, STOP;
    stop_sub_pending: Sub, Pending, STOP;
    stop_sub_later_run: Sub, LaterRun, STOP;
}

/// 8 threads submit runs touching chip 0, chip 1 and the sub lane while chip 0's child is
/// killed (or stopped) after 100 ms: every run ends, every failure names the child, runs that
/// do not touch chip 0 succeed, and chip 0 serves again after its restart.
fn eight_threads(sig: Signal) {
    let w = std::sync::Arc::new(worker());
    let (s, _bufs) = Setup::new(&w, Victim::Chip);
    let name = w.chip_name(0).unwrap();
    let pid = pid_of(&name);
    let stop_at = Instant::now() + Duration::from_millis(1500) + LIVENESS;
    let threads: Vec<_> = (0..8)
        .map(|k| {
            let (w, s) = (std::sync::Arc::clone(&w), s.clone());
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0u32, Vec::new());
                while Instant::now() < stop_at {
                    let chip_w = k % 2;
                    let (fail_if, cfg) = (s.fail_if, s.cfg.clone());
                    let out = buf(&w, 64, 0.0);
                    let started = Instant::now();
                    let r = w.run(
                        move |o, _, _| {
                            let args = TaskArgs::new()
                                .output_existing(&out.1)
                                .scalar(0u64)
                                .scalar(20u64);
                            o.submit_next_level(&fail_if, args.label("t"), &cfg, chip_w)?;
                            Ok(())
                        },
                        TaskArgs::new(),
                        CallConfig::default(),
                    );
                    let took = started.elapsed();
                    assert!(took < Duration::from_secs(5), "a run took {took:?}");
                    match r {
                        Ok(_) => ok += 1,
                        Err(e) => {
                            failed.push((chip_w, e.to_string(), e.code()));
                        }
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    signal(pid, sig);
    let (mut oks, mut failures) = (0, 0);
    for t in threads {
        let (ok, failed) = t.join().expect("a submitting thread panicked");
        oks += ok;
        failures += failed.len();
        for (chip_w, text, code) in failed {
            assert_eq!(chip_w, 0, "only runs on chip 0 may fail: {text}");
            assert!(text.contains("chip_child[0] pid="), "{text}");
            // In flight or dispatched to the dead lane: either way a lost worker's code.
            assert!(
                matches!(
                    code,
                    Some(ErrorCode::ChildDied | ErrorCode::ChildUnresponsive)
                ),
                "{code:?}: {text}"
            );
        }
    }
    assert!(
        oks > 0 && failures > 0,
        "{oks} runs passed, {failures} failed"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while w.stats().lanes[0].restarts == 0 || !w.stats().lanes[0].available {
        assert!(Instant::now() < deadline, "{:?}", w.stats().lanes);
        std::thread::sleep(Duration::from_millis(10));
    }
    let again = s.clone();
    w.run(
        move |o, _, _| again.victim_task(o, 0),
        TaskArgs::new(),
        CallConfig::default(),
    )
    .expect("chip 0 serves again");
}

#[test]
fn eight_threads_submit_while_a_chip_child_is_killed() {
    with_timeout(90, || eight_threads(Signal::KILL));
}

#[test]
fn eight_threads_submit_while_a_chip_child_is_stopped() {
    with_timeout(90, || eight_threads(Signal::STOP));
}

/// Liveness probes are answered while a callable runs: a task longer than the liveness
/// timeout is not a hang.
#[test]
fn a_task_longer_than_the_liveness_timeout_succeeds() {
    with_timeout(60, || {
        let w =
            start(builder(Mode::ChildProcess, 1, 1).liveness_timeout(Duration::from_millis(200)));
        let sleep = sleeper(&w);
        let sleep_chip = chip(&w, "sleep_chip");
        let report = w
            .run(
                move |o, _, cfg| {
                    o.submit_sub(&sleep, TaskArgs::new().scalar(1200u64))?;
                    o.submit_next_level(&sleep_chip, TaskArgs::new().scalar(1200u64), cfg, 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .expect("long tasks are not unresponsive children");
        assert!(
            report.lanes.iter().all(|l| l.restarts == 0),
            "{:?}",
            report.lanes
        );
    });
}

/// Issue 10 item 4, child processes: a task past `task_timeout` fails with TASK_TIMEOUT naming
/// task, label, callable and child; the child is killed and restarted; later runs succeed.
#[test]
fn task_timeout_kills_and_restarts_the_child() {
    with_timeout(60, || {
        let w =
            start(builder(Mode::ChildProcess, 1, 1).task_timeout(Some(Duration::from_millis(300))));
        let sleep = sleeper(&w);
        let sleep_chip = chip(&w, "sleep_chip");
        for (sub, label) in [(true, "slow_sub"), (false, "slow_chip")] {
            let name = if sub { w.sub_name(0) } else { w.chip_name(0) }.unwrap();
            let started = Instant::now();
            let err = w
                .run(
                    move |o, _, cfg| {
                        let args = TaskArgs::new().scalar(10_000u64).label(label);
                        if sub {
                            o.submit_sub(&sleep, args)?;
                        } else {
                            o.submit_next_level(&sleep_chip, args, cfg, 0)?;
                        }
                        Ok(())
                    },
                    TaskArgs::new(),
                    CallConfig::default(),
                )
                .unwrap_err();
            assert!(
                started.elapsed() < Duration::from_millis(1300),
                "{:?}",
                started.elapsed()
            );
            let pto_node::WorkerRunError::Failed(e) = err else {
                panic!("{err:?}")
            };
            assert_eq!(e.first.code, Some(ErrorCode::TaskTimeout));
            let text = e.to_string();
            let callable = if sub {
                "sub callable 'sleep'"
            } else {
                "chip callable 'sleep_chip'"
            };
            for needle in [
                "TASK_TIMEOUT (1010)",
                "task 0",
                label,
                callable,
                name.as_str(),
                "task_timeout 0.30 s",
            ] {
                assert!(text.contains(needle), "{text} lacks {needle:?}");
            }
            let lane = if sub { 1 } else { 0 };
            let deadline = Instant::now() + Duration::from_secs(20);
            while !w.stats().lanes[lane].available {
                assert!(Instant::now() < deadline, "{:?}", w.stats().lanes);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let stats = w.stats();
        assert!(
            stats.lanes.iter().all(|l| l.restarts == 1),
            "{:?}",
            stats.lanes
        );
        w.run(
            move |o, _, cfg| {
                o.submit_sub(&sleep, TaskArgs::new().scalar(1u64))?;
                o.submit_next_level(&sleep_chip, TaskArgs::new().scalar(1u64), cfg, 0)?;
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect("the restarted lanes serve");
    });
}

/// Issue 10 item 4, in-process: a timed-out task fails with SCHEDULER_TIMEOUT (the chip
/// watchdog's code); the lane stays busy until the callable returns, then serves again.
#[test]
fn in_process_task_timeout_fails_the_task_and_keeps_the_lane_until_it_returns() {
    with_timeout(60, || {
        let w =
            start(builder(Mode::InProcess, 0, 1).task_timeout(Some(Duration::from_millis(200))));
        let sleep = sleeper(&w);
        let started = Instant::now();
        let err = w
            .run(
                move |o, _, _| {
                    o.submit_sub(&sleep, TaskArgs::new().scalar(1000u64).label("slow"))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap_err();
        let took = started.elapsed();
        assert!(took < Duration::from_millis(800), "{took:?}");
        let pto_node::WorkerRunError::Failed(e) = err else {
            panic!("{err:?}")
        };
        assert_eq!(e.first.code, Some(ErrorCode::SchedulerTimeout));
        let text = e.to_string();
        for needle in [
            "task timeout",
            "'slow'",
            "sub callable 'sleep'",
            "sub[0]",
            "cannot be killed",
        ] {
            assert!(text.contains(needle), "{text} lacks {needle:?}");
        }
        // The next run waits for the lane: the callable returns after 1 s.
        let report = w
            .run(
                move |o, _, _| {
                    o.submit_sub(&sleep, TaskArgs::new().scalar(1u64).label("next"))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .expect("the lane serves once the callable returned");
        assert!(started.elapsed() >= Duration::from_millis(1000));
        assert!(report.task("next").unwrap().outcome.is_success());
    });
}

/// Issue 10 item 5's helper: a process started with PTO_CHILD=1 that did not enter
/// `child_main()` (a libtest run of this one test). Runs only when the test below starts it.
#[test]
fn unentered_child_helper() {
    let Some(out) = pto_types::ring_config::env::EnvSource::process().get("PTO_TEST_UNENTERED")
    else {
        return;
    };
    let w = builder(Mode::ChildProcess, 1, 0).build().unwrap();
    let result = match w.init() {
        Ok(()) => "started".to_string(),
        Err(e) => e.to_string(),
    };
    let in_process = start(builder(Mode::InProcess, 1, 0));
    drop(in_process);
    std::fs::write(out, result).unwrap();
}

/// Issue 10 item 5: no fork storm. An image that skipped `child_main()` but runs with
/// PTO_CHILD=1 refuses to start child processes (in-process Workers still work).
#[test]
fn a_child_without_child_main_refuses_to_start_children() {
    with_timeout(60, || {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("result");
        #[allow(clippy::disallowed_methods)]
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "liveness::unentered_child_helper", "-q"])
            .env("PTO_CHILD", "1")
            .env("PTO_TEST_UNENTERED", &out)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{status:?}");
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(
            text.contains("did not call pto_node::child_main()"),
            "{text}"
        );
        assert!(text.contains("PTO_CHILD=1"), "{text}");
    });
}

/// The number of open descriptors of process `pid`.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Issue 10 item 8: a child closes each segment's descriptor once it is mapped, so hundreds
/// of buffers cost it no descriptors (it used to keep one per buffer until its limit).
#[test]
fn children_hold_no_descriptor_per_buffer() {
    with_timeout(90, || {
        let w = start(builder(Mode::ChildProcess, 0, 1));
        let copy = copier(&w);
        let sub_pid = pid_of(&w.sub_name(0).unwrap());
        let before = fd_count(sub_pid);
        let bufs: Vec<_> = (0..600).map(|i| buf(&w, 16, i as f32)).collect();
        for pair in bufs.chunks(50) {
            let pair: Vec<Tensor> = pair.iter().map(|(_, t)| t.clone()).collect();
            w.run(
                move |o, _, _| {
                    for two in pair.chunks(2) {
                        o.submit_sub(
                            &copy,
                            TaskArgs::new().input(&two[0]).output_existing(&two[1]),
                        )?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .expect("copies run");
        }
        let after = fd_count(sub_pid);
        assert!(
            after <= before + 4,
            "the sub child went from {before} to {after} descriptors"
        );
        for (i, (b, _)) in bufs.iter().enumerate().skip(1).step_by(2) {
            assert_eq!(b.read_vec::<f32>(0, 16).unwrap(), vec![(i - 1) as f32; 16]);
        }
    });
}

/// Issue 10 item 9: a run abandoned by `close` names the lane that kept it from finishing.
#[test]
fn an_abandoned_run_names_the_stuck_child() {
    with_timeout(60, || {
        let w = start(builder(Mode::ChildProcess, 0, 1).close_timeout(Duration::from_millis(300)));
        let sleep = sleeper(&w);
        let name = w.sub_name(0).unwrap();
        let run = w
            .submit(
                move |o, _, _| {
                    o.submit_sub(&sleep, TaskArgs::new().scalar(10_000u64).label("stuck"))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let close = w.close();
        assert_eq!(close.abandoned_runs, 1);
        let Err(WaitError::Failed(e)) = run.wait(Some(Duration::from_secs(5))) else {
            panic!("the run is failed by close")
        };
        let text = e.to_string();
        assert!(text.contains(&format!("still running on {name}")), "{text}");
        assert!(text.contains("close_timeout"), "{text}");
        assert_eq!(text.matches(&name).count(), 1, "{text}");
    });
}
