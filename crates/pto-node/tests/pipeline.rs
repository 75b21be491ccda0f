//! Lane pipelining (issue 14): a lane holds up to `lane_depth` tasks, runs them in the order
//! they were handed over, and a lane's death fails only the task it was running among them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pto_node::{BuildError, MappedArgs, SubContext, TaskError, TaskOutcome, WaitError, Worker};
use pto_types::{CallConfig, DType, TaskArgs};

use crate::child::pid_of;
use crate::common::{Mode, both_modes, builder, start, sub, with_timeout};

/// Counts the tasks this process ran; in child-process mode each child has its own count.
static STAMPS: AtomicU64 = AtomicU64::new(1);

/// `stamp`: sleeps `scalar(0)` µs, then writes this process's next stamp into its one
/// write-tagged f32 element: on one lane the stamps spell the order the tasks ran in.
fn stamp_sub(_: &SubContext, a: &MappedArgs) -> Result<(), TaskError> {
    std::thread::sleep(Duration::from_micros(a.scalar(0)?));
    let n = STAMPS.fetch_add(1, Ordering::SeqCst);
    a.write(0, &[n as f32])
}
pto_node::register_sub!("pipeline.stamp", stamp_sub);

#[test]
fn lane_depth_is_checked() {
    for bad in [0, pto_node::MAX_LANE_DEPTH + 1] {
        let e = Worker::builder(3)
            .sub_workers(1)
            .lane_depth(bad)
            .build()
            .expect_err("out of range");
        let BuildError { option, reason } = &e;
        assert_eq!(*option, "lane_depth", "{e}");
        assert!(reason.contains(&bad.to_string()), "{e}");
    }
}

/// `k` stamp tasks on one sub lane, each writing its own element of one buffer (no
/// dependencies: all are READY at once); returns the stamps in submit order and the report.
fn stamps(w: &Worker, k: usize, sleep_us: u64) -> (Vec<f32>, pto_node::RunReport) {
    let h = sub(w, "pipeline.stamp");
    let out = w.create_buffer(k * 4).expect("buffer");
    let views: Vec<_> = (0..k)
        .map(|i| out.view(i as u64 * 4, &[1], &[1], DType::F32).unwrap())
        .collect();
    let report = w
        .run(
            move |o, _, _| {
                for (i, v) in views.iter().enumerate() {
                    let args = TaskArgs::new()
                        .output_existing(v)
                        .scalar(sleep_us)
                        .label(&format!("t{i}"));
                    o.submit_sub(&h, args)?;
                }
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect("the run succeeds");
    (out.read_vec::<f32>(0, k).unwrap(), report)
}

/// Whether some task was handed to the lane before the one ahead of it had finished.
fn queued_behind_a_running_task(report: &pto_node::RunReport, k: usize) -> bool {
    (1..k).any(|i| {
        let before = report.task(&format!("t{}", i - 1)).unwrap();
        let this = report.task(&format!("t{i}")).unwrap();
        this.dispatched.unwrap() < before.finished.unwrap()
    })
}

/// One lane of depth 8 runs 64 queued tasks in submit order, and tasks really were queued
/// behind a running one; with depth 1 none ever is.
fn one_lane_runs_queued_tasks_in_order(mode: Mode) {
    with_timeout(120, move || {
        for depth in [8, 1] {
            let w = start(builder(mode, 0, 1).lane_depth(depth));
            let k = 64;
            let (values, report) = stamps(&w, k, 300);
            assert!(
                values.windows(2).all(|p| p[1] == p[0] + 1.0),
                "depth {depth}: the tasks ran out of order: {values:?}"
            );
            assert_eq!(
                queued_behind_a_running_task(&report, k),
                depth > 1,
                "depth {depth}"
            );
            w.close();
        }
    })
}

/// Two sub lanes of depth 4, eight 300 ms tasks (four queued on each lane); sub child 0 is
/// killed while it runs its first task: that task fails with CHILD_DIED, the three queued
/// behind it run elsewhere (sub tasks are aimed at no lane), and every other task succeeds.
#[test]
fn a_dead_sub_lane_fails_only_the_task_it_was_running() {
    with_timeout(120, || {
        let w = start(
            builder(Mode::ChildProcess, 0, 2)
                .lane_depth(4)
                .restart_children(false),
        );
        let h = sub(&w, "pipeline.stamp");
        let out = w.create_buffer(8 * 4).expect("buffer");
        let views: Vec<_> = (0..8)
            .map(|i| out.view(i * 4, &[1], &[1], DType::F32).unwrap())
            .collect();
        let victim = w.sub_name(0).unwrap();
        let run = w
            .submit(
                move |o, _, _| {
                    for (i, v) in views.iter().enumerate() {
                        let args = TaskArgs::new()
                            .output_existing(v)
                            .scalar(300_000)
                            .label(&format!("t{i}"));
                        o.submit_sub(&h, args)?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(150));
        let pid = pid_of(&victim);
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        let Err(WaitError::Failed(e)) = run.wait(Some(Duration::from_secs(60))) else {
            panic!("the run fails")
        };
        assert_eq!((e.failed, e.skipped), (1, 0), "{e}");
        assert!(e.first.to_string().contains(&victim), "{e}");
        assert!(
            e.first.to_string().contains("while running"),
            "the killed child was running it: {e}"
        );
        let ok = e
            .report
            .tasks
            .iter()
            .filter(|t| t.outcome == TaskOutcome::Success)
            .count();
        assert_eq!(ok, 7, "every other task ran: {:?}", e.report.tasks);
        w.close();
    })
}

/// In-process, two sub lanes of depth 4 and `task_timeout` 300 ms: `first` (20 ms) makes
/// `slow` (2 s) ready, and the lane that ran `first` dispatches it in its own pass (not the
/// scheduler thread); `slow` still times out on time (the scheduler learns the new deadline),
/// and its three readers are skipped.
#[test]
fn a_task_a_lane_dispatched_itself_times_out_and_its_queue_moves() {
    with_timeout(60, || {
        let w = start(
            builder(Mode::InProcess, 0, 2)
                .lane_depth(4)
                .task_timeout(Some(Duration::from_millis(300))),
        );
        let sleep = crate::common::sleeper(&w);
        let (_b, t) = crate::common::buf(&w, 4, 0.0);
        let started = std::time::Instant::now();
        let run = w
            .submit(
                move |o, _, _| {
                    let first = TaskArgs::new().inout(&t).scalar(20).label("first");
                    o.submit_sub(&sleep, first)?;
                    o.submit_sub(&sleep, TaskArgs::new().inout(&t).scalar(2000).label("slow"))?;
                    for i in 0..3 {
                        let after = TaskArgs::new().input(&t).scalar(1).label(&format!("q{i}"));
                        o.submit_sub(&sleep, after)?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        let Err(WaitError::Failed(e)) = run.wait(Some(Duration::from_secs(30))) else {
            panic!("the run fails")
        };
        let took = started.elapsed();
        assert_eq!(e.first.label.as_deref(), Some("slow"), "{e}");
        assert_eq!(
            e.first.code,
            Some(pto_types::ErrorCode::SchedulerTimeout),
            "{e}"
        );
        // `slow`'s readers are its consumers: skipped, not run.
        assert_eq!((e.failed, e.skipped), (1, 3), "{e}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        w.close();
    })
}

/// Sub lanes whose tasks run long hold at most two tasks: with two lanes of depth 16 that
/// just ran 100 ms tasks, one 400 ms task and eleven 20 ms tasks ready at once, at most one
/// short task waits behind the long one (a deep queue would trap five of them there).
fn long_sub_tasks_do_not_queue_deep(mode: Mode) {
    with_timeout(60, move || {
        let w = start(builder(mode, 0, 2).lane_depth(16));
        let sleep = crate::common::sleeper(&w);
        let run = |lengths: Vec<u64>| {
            w.run(
                move |o, _, _| {
                    for (i, ms) in lengths.iter().enumerate() {
                        let args = TaskArgs::new().scalar(*ms).label(&format!("t{i}"));
                        o.submit_sub(&sleep, args)?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .expect("the run succeeds")
        };
        run(vec![100, 100]);
        let mut lengths = vec![400];
        lengths.extend([20; 11]);
        let report = run(lengths);
        let long_done = report.task("t0").unwrap().finished.unwrap();
        let trapped = (1..12)
            .filter(|i| report.task(&format!("t{i}")).unwrap().finished.unwrap() > long_done)
            .count();
        assert!(
            trapped <= 1,
            "{trapped} short tasks waited behind the long one"
        );
        w.close();
    })
}

both_modes!(
    one_lane_runs_queued_tasks_in_order,
    long_sub_tasks_do_not_queue_deep
);
