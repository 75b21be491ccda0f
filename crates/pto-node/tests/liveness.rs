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

/// Handles and buffers of one scenario.
struct Setup {
    sleep_chip: CallableHandle,
    add: CallableHandle,
    sleep: CallableHandle,
    copy: CallableHandle,
    fill: CallableHandle,
    bufs: Vec<(pto_node::HostBuffer, Tensor)>,
}

impl Setup {
    fn new(w: &Worker) -> Setup {
        Setup {
            sleep_chip: chip(w, "fail_if"),
            add: chip(w, "elementwise_add"),
            sleep: sleeper(w),
            copy: copier(w),
            fill: filler(w),
            bufs: (0..7).map(|i| buf(w, 64, i as f32)).collect(),
        }
    }

    fn t(&self, i: usize) -> Tensor {
        self.bufs[i].1.clone()
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
fn submit(w: &Worker, s: &Setup, victim: Victim, state: State) -> Vec<pto_node::RunHandle> {
    let cfg = small();
    let (a, out, dep_out, p, ind, ind_out) = (s.t(0), s.t(1), s.t(2), s.t(3), s.t(4), s.t(5));
    let (sleep_chip, add, sleep, copy, fill) = (
        s.sleep_chip.clone(),
        s.add.clone(),
        s.sleep.clone(),
        s.copy.clone(),
        s.fill.clone(),
    );
    let on_victim_lane = move |orch: &mut pto_node::Orchestrator<'_>,
                               args: TaskArgs|
          -> Result<(), pto_node::OrchError> {
        match victim {
            Victim::Chip => orch.submit_next_level(&add, args, &cfg, 0)?,
            Victim::Sub => orch.submit_sub(&copy, args)?,
        };
        Ok(())
    };
    let holder = {
        let (sleep_chip, sleep, cfg, p) = (sleep_chip.clone(), sleep.clone(), small(), p.clone());
        move |orch: &mut pto_node::Orchestrator<'_>| -> Result<(), pto_node::OrchError> {
            match victim {
                Victim::Chip => orch.submit_next_level(
                    &sleep_chip,
                    TaskArgs::new()
                        .output_existing(&p)
                        .scalar(0u64)
                        .scalar(10_000u64)
                        .label("holder"),
                    &cfg,
                    0,
                )?,
                Victim::Sub => {
                    orch.submit_sub(&sleep, TaskArgs::new().scalar(10_000u64).label("holder"))?
                }
            };
            Ok(())
        }
    };
    let victim_args = |input: &Tensor| match victim {
        Victim::Chip => TaskArgs::new()
            .input(input)
            .input(input)
            .output_existing(&out),
        Victim::Sub => TaskArgs::new().input(input).output_existing(&out),
    };
    let first = {
        let (a, p, ind, ind_out, out, dep_out) = (
            a.clone(),
            p.clone(),
            ind.clone(),
            ind_out.clone(),
            out.clone(),
            dep_out.clone(),
        );
        let holder = holder.clone();
        let on_victim_lane = on_victim_lane.clone();
        let victim_args_running = victim_args(&a).label("victim");
        let victim_args_pending = victim_args(&p).label("victim");
        let (sleep_chip, copy, fill, add, cfg) = (
            sleep_chip.clone(),
            copy.clone(),
            fill.clone(),
            add.clone(),
            small(),
        );
        move |orch: &mut pto_node::Orchestrator<'_>, _: &TaskArgs, _: &CallConfig| {
            match state {
                State::Running => match victim {
                    Victim::Chip => {
                        orch.submit_next_level(
                            &sleep_chip,
                            TaskArgs::new()
                                .output_existing(&out)
                                .scalar(0u64)
                                .scalar(10_000u64)
                                .label("victim"),
                            &cfg,
                            0,
                        )?;
                    }
                    Victim::Sub => {
                        orch.submit_sub(
                            &fill,
                            TaskArgs::new()
                                .output_existing(&out)
                                .scalar(u64::from(1.0f32.to_bits()))
                                .scalar(10_000u64)
                                .label("victim"),
                        )?;
                    }
                },
                State::Ready => {
                    holder(orch)?;
                    on_victim_lane(orch, victim_args_running)?;
                }
                State::Pending => {
                    // The producer runs on a live lane for 1.5 s.
                    match victim {
                        Victim::Chip => orch.submit_sub(
                            &fill,
                            TaskArgs::new()
                                .output_existing(&p)
                                .scalar(u64::from(7.0f32.to_bits()))
                                .scalar(1500u64)
                                .label("producer"),
                        )?,
                        Victim::Sub => orch.submit_next_level(
                            &sleep_chip,
                            TaskArgs::new()
                                .output_existing(&p)
                                .scalar(0u64)
                                .scalar(1500u64)
                                .label("producer"),
                            &cfg,
                            1,
                        )?,
                    };
                    on_victim_lane(orch, victim_args_pending)?;
                }
                State::Group => {
                    // Pending on a 1.5 s producer of the live sub lane.
                    orch.submit_sub(
                        &fill,
                        TaskArgs::new()
                            .output_existing(&p)
                            .scalar(u64::from(7.0f32.to_bits()))
                            .scalar(1500u64)
                            .label("producer"),
                    )?;
                    let member =
                        |o: &Tensor| TaskArgs::new().input(&p).input(&p).output_existing(o);
                    orch.submit_next_level_group(
                        &add,
                        vec![member(&out).label("victim"), member(&dep_out)],
                        &cfg,
                        &[0, 1],
                    )?;
                }
                State::LaterRun => holder(orch)?,
            }
            if state != State::LaterRun {
                // The consumer of the victim's output, on a lane that stays alive.
                match victim {
                    Victim::Chip => orch.submit_sub(
                        &copy,
                        TaskArgs::new()
                            .input(&out)
                            .output_existing(&dep_out)
                            .label("dependent"),
                    )?,
                    Victim::Sub => orch.submit_next_level(
                        &add,
                        TaskArgs::new()
                            .input(&out)
                            .input(&out)
                            .output_existing(&dep_out)
                            .label("dependent"),
                        &cfg,
                        1,
                    )?,
                };
            }
            independent(orch, &add, &ind, &ind_out, &cfg)?;
            Ok(())
        }
    };
    let mut runs = vec![
        w.submit(first, TaskArgs::new(), CallConfig::default())
            .unwrap(),
    ];
    if state == State::LaterRun {
        let victim_args = victim_args(&a).label("victim");
        let (add, cfg, ind, ind_out) = (s.add.clone(), small(), s.t(4), s.t(6));
        let second = move |orch: &mut pto_node::Orchestrator<'_>, _: &TaskArgs, _: &CallConfig| {
            on_victim_lane(orch, victim_args)?;
            independent(orch, &add, &ind, &ind_out, &cfg)?;
            Ok(())
        };
        runs.push(
            w.submit(second, TaskArgs::new(), CallConfig::default())
                .unwrap(),
        );
    }
    runs
}

/// A short task on chip 1, which no scenario hits: `out = input + input`.
fn independent(
    orch: &mut pto_node::Orchestrator<'_>,
    add: &CallableHandle,
    input: &Tensor,
    out: &Tensor,
    cfg: &CallConfig,
) -> Result<(), pto_node::OrchError> {
    let args = TaskArgs::new()
        .input(input)
        .input(input)
        .output_existing(out)
        .label("independent");
    orch.submit_next_level(add, args, cfg, 1)?;
    Ok(())
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
    let s = Setup::new(&w);
    let name = victim_name(&w, victim);
    let pid = pid_of(&name);
    let runs = submit(&w, &s, victim, state);
    std::thread::sleep(Duration::from_millis(300));
    let hit_at = Instant::now();
    signal(pid, sig);
    let bound = match sig {
        Signal::KILL => Duration::from_secs(1),
        _ => LIVENESS + Duration::from_secs(1),
    };
    let errors: Vec<Box<RunError>> = runs
        .iter()
        .map(|r| failed(r, Duration::from_secs(10)))
        .collect();
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
        text.matches(&name).count(),
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
    for e in &errors {
        if let Some(i) = e.report.task("independent") {
            assert!(i.outcome.is_success(), "{i:?}");
        }
    }
    // The lane restarts in the background; a later run on it succeeds.
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
    let new_name = victim_name(&w, victim);
    assert_ne!(new_name, name, "a fresh process serves the lane");
    let (add, copy, a, out) = (s.add.clone(), s.copy.clone(), s.t(0), s.t(1));
    let report = w
        .run(
            move |orch, _, _| {
                match victim {
                    Victim::Chip => orch.submit_next_level(
                        &add,
                        TaskArgs::new()
                            .input(&a)
                            .input(&a)
                            .output_existing(&out)
                            .label("again"),
                        &small(),
                        0,
                    )?,
                    Victim::Sub => orch.submit_sub(
                        &copy,
                        TaskArgs::new()
                            .input(&a)
                            .output_existing(&out)
                            .label("again"),
                    )?,
                };
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect("a run on the restarted lane succeeds");
    assert_eq!(report.lanes[lane].restarts, 1, "{:?}", report.lanes);
    assert!(report.task("again").unwrap().members[0].worker == new_name);
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
