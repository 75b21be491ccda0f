//! Builder, lifecycle, registration and synchronous submit validation (NODE_RUNTIME.md §9 rows
//! 1, 3, 4, 5, 14–19, 29, 34, 52, 54; §1.7).

use std::time::{Duration, Instant};

use pto_node::{
    BufferError, BuildError, Callable, CallableKind, EndpointMode, FailureKind, InitError,
    OrchError, RegisterError, SubmitError, SubmitRunError, WaitError, Worker,
};
use pto_types::{CallConfig, DType, TaskArgs};

use crate::common::*;

#[test]
fn n01_level_2_is_a_build_error() {
    let err = Worker::builder(2).chips(1).build().unwrap_err();
    assert_eq!(err.option, "level");
    assert!(err.to_string().contains("at least 3"), "{err}");
}

#[test]
fn build_errors_name_the_option() {
    let cases: Vec<(Result<Worker, BuildError>, &str)> = vec![
        (Worker::builder(3).build(), "chips"),
        (
            Worker::builder(3).chips(1).heap_ring_size(1000).build(),
            "heap_ring_size",
        ),
        (
            Worker::builder(3).chips(1).heap_ring_size(32 << 10).build(),
            "heap_ring_size",
        ),
        (
            Worker::builder(3).chips(1).max_queued_runs(0).build(),
            "max_queued_runs",
        ),
        (
            Worker::builder(3)
                .chips(1)
                .heap_alloc_timeout(Duration::ZERO)
                .build(),
            "heap_alloc_timeout",
        ),
        (
            Worker::builder(3)
                .chips(1)
                .chip_spec(1, small_chip(1 << 30))
                .build(),
            "chip_spec",
        ),
        (
            Worker::builder(3)
                .chips(1)
                .chip_env_source(pto_types::ring_config::env::EnvSource::empty())
                .build(),
            "chip_env_source",
        ),
        // Level 4 has Worker children (add_worker), not chips; and no in-process mode yet.
        (Worker::builder(4).chips(1).build(), "chips"),
        (
            Worker::builder(4)
                .sub_workers(1)
                .endpoint_mode(EndpointMode::InProcess)
                .build(),
            "level",
        ),
    ];
    for (result, option) in cases {
        assert_eq!(result.unwrap_err().option, option);
    }
}

fn n03_init_twice_and_after_close(mode: Mode) {
    with_timeout(20, move || {
        let w = builder(mode, 1, 0).build().unwrap();
        w.init().unwrap();
        assert_eq!(w.init(), Err(InitError::AlreadyInitialized));
        assert!(w.close().graceful);
        assert!(w.close().graceful, "close is idempotent");
        let w = builder(mode, 0, 1).build().unwrap();
        w.close();
        assert_eq!(w.init(), Err(InitError::Closed));
    });
}

fn n04_unknown_callable(mode: Mode) {
    let w = builder(mode, 1, 1).build().unwrap();
    assert_eq!(
        w.register(Callable::chip("nope")),
        Err(RegisterError::UnknownCallable {
            kind: CallableKind::Chip,
            name: "nope".to_string()
        })
    );
    // A misspelt name gets the nearest registered one, and the list for users.
    let err = w
        .register(Callable::chip("elementwise_ad"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("(did you mean elementwise_add?) (registered: ")
            && err.contains("vector_example"),
        "{err}"
    );
    assert!(matches!(
        w.register(Callable::sub("nope")),
        Err(RegisterError::UnknownCallable { .. })
    ));
    assert!(matches!(
        w.register(Callable::chip("bad name")),
        Err(RegisterError::BadName { .. })
    ));
    // Same name, same handle.
    let a = w.register(Callable::chip("elementwise_add")).unwrap();
    assert_eq!(w.register(Callable::chip("elementwise_add")).unwrap(), a);
    assert_eq!(a.kind(), CallableKind::Chip);
    let s = w.register(Callable::sub("sum_outputs")).unwrap();
    assert_ne!(s, a);
}

#[test]
fn n05_closure_requires_in_process() {
    let w = Worker::builder(3)
        .sub_workers(1)
        .endpoint_mode(EndpointMode::ChildProcess)
        .build()
        .unwrap();
    assert_eq!(
        w.register(Callable::sub_closure("c", |_, _| Ok(()))),
        Err(RegisterError::ClosureRequiresInProcess)
    );
    assert!(w.register(Callable::sub("sum_outputs")).is_ok());
}

/// Submits one task with `submit` inside a fresh run and returns the synchronous error, after
/// checking that nothing was created.
fn rejected(
    w: &Worker,
    submit: impl FnOnce(&mut pto_node::Orchestrator<'_>) -> Result<pto_node::NodeTaskId, SubmitError>
    + Send
    + 'static,
) -> SubmitError {
    let (tx, rx) = std::sync::mpsc::channel();
    let run = w
        .submit(
            move |orch, _, _| {
                let err = submit(orch).expect_err("the submit is rejected");
                assert_eq!(orch.submitted_tasks(), 0, "no task was created");
                assert_eq!(orch.tensormap_entries(), 0, "the TensorMap is unchanged");
                tx.send(err).unwrap();
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect("the rejection does not fail the run");
    let report = run
        .wait(Some(Duration::from_secs(10)))
        .expect("the run succeeds");
    assert!(report.tasks.is_empty());
    rx.recv().unwrap()
}

fn n14_to_n19_synchronous_rejections(mode: Mode) {
    with_timeout(30, move || {
        let w = start(builder(mode, 2, 1));
        let add = chip(&w, "elementwise_add");
        let s = sleeper(&w);
        let (_a, a) = buf(&w, 64, 1.0);
        let (_o, o) = buf(&w, 64, 0.0);
        let args = move || TaskArgs::new().input(&a).input(&a).output_existing(&o);

        let a1 = args.clone();
        let err = rejected(&w, move |orch| {
            orch.submit_next_level(&add, a1(), &CallConfig::default(), 5)
        });
        assert!(
            matches!(
                err,
                SubmitError::UnknownWorker {
                    worker: 5,
                    workers: 2
                }
            ),
            "{err:?}"
        );

        let a2 = args.clone();
        let err = rejected(&w, move |orch| {
            orch.submit_next_level_group(&add, vec![a2(), a2()], &CallConfig::default(), &[0, 0])
        });
        assert!(
            matches!(err, SubmitError::DuplicateWorker { worker: 0 }),
            "{err:?}"
        );

        let a3 = args.clone();
        let err = rejected(&w, move |orch| {
            orch.submit_next_level_group(&add, vec![a3(), a3()], &CallConfig::default(), &[0, 1, 1])
        });
        assert!(
            matches!(
                err,
                SubmitError::GroupSizeMismatch {
                    args: 2,
                    workers: 3
                }
            ),
            "{err:?}"
        );

        let err = rejected(&w, move |orch| {
            orch.submit_sub_group(&s, vec![TaskArgs::new(), TaskArgs::new()])
        });
        assert!(
            matches!(
                err,
                SubmitError::GroupTooLarge {
                    size: 2,
                    sub_workers: 1
                }
            ),
            "{err:?}"
        );

        let a5 = args.clone();
        let err = rejected(&w, move |orch| {
            orch.submit_next_level(&s, a5(), &CallConfig::default(), 0)
        });
        assert!(
            matches!(
                err,
                SubmitError::WrongCallableKind {
                    expected: CallableKind::Chip,
                    got: CallableKind::Sub
                }
            ),
            "{err:?}"
        );

        // Row 19: two OutputExisting tensors overlapping by one element.
        let (big, _) = buf(&w, 64, 0.0);
        let x = view(&big, 0, 10);
        let y = view(&big, 9, 10);
        let err = rejected(&w, move |orch| {
            let args = TaskArgs::new().output_existing(&x).output_existing(&y);
            orch.submit_sub(&s, args)
        });
        assert!(
            matches!(err, SubmitError::WriteOverlap { a: 0, b: 1 }),
            "{err:?}"
        );
        w.close();
    });
}

fn foreign_handles_and_foreign_buffers_are_rejected(mode: Mode) {
    with_timeout(30, move || {
        let w1 = start(builder(mode, 1, 1));
        let w2 = start(builder(mode, 1, 1));
        let foreign = sleeper(&w2);
        let (_b, t) = buf(&w2, 16, 0.0);
        let err = rejected(&w1, move |orch| orch.submit_sub(&foreign, TaskArgs::new()));
        assert!(matches!(err, SubmitError::ForeignHandle), "{err:?}");
        let mine = sleeper(&w1);
        let err = rejected(&w1, move |orch| {
            orch.submit_sub(&mine, TaskArgs::new().input(&t))
        });
        // Closures are registered once per name (and only in-process).
        let closure = w1.register(pto_node::Callable::sub_closure("sleep", |_, _| Ok(())));
        match mode {
            Mode::InProcess => assert!(matches!(closure, Err(RegisterError::DuplicateName { .. }))),
            Mode::ChildProcess => {
                assert_eq!(closure, Err(RegisterError::ClosureRequiresInProcess))
            }
        }
        assert!(
            matches!(&err, SubmitError::InvalidArgs { index: Some(0), reason } if reason.contains("not a live buffer of this Worker")),
            "{err:?}"
        );
        let err = rejected(&w1, move |orch| {
            orch.submit_sub(&mine, TaskArgs::new().label("has space"))
        });
        assert!(
            matches!(err, SubmitError::InvalidArgs { index: None, .. }),
            "{err:?}"
        );
    });
}

fn n29_empty_orchestration_completes(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 1, 1));
        let report = w
            .run(|_, _, _| Ok(()), TaskArgs::new(), CallConfig::default())
            .unwrap();
        assert!(report.tasks.is_empty());
        // Base config validation (C2) happens before anything runs.
        let bad =
            CallConfig::with_runtime_env(pto_types::RuntimeEnv::default().with_task_window(48));
        let err = w
            .submit(|_, _, _| Ok(()), TaskArgs::new(), bad)
            .unwrap_err();
        assert!(matches!(err, SubmitRunError::InvalidConfig(_)), "{err:?}");
        assert!(err.to_string().contains("ring_task_window[0]=48"), "{err}");
    });
}

fn n34_wait_timeout_then_wait(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 1));
        let s = sleeper(&w);
        let run = w
            .submit(
                move |orch, _, _| {
                    orch.submit_sub(&s, TaskArgs::new().scalar(200u64))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        let started = Instant::now();
        assert!(matches!(
            run.wait(Some(Duration::from_millis(10))),
            Err(WaitError::Timeout)
        ));
        assert!(started.elapsed() < Duration::from_secs(1));
        let report = run.clone().wait(None).unwrap();
        assert_eq!(report.tasks.len(), 1);
        // The same result again.
        assert_eq!(
            run.wait(Some(Duration::ZERO)).unwrap().run_id,
            report.run_id
        );
    });
}

fn n52_host_access_while_a_task_uses_the_buffer(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 1));
        let s = sleeper(&w);
        let (b, t) = buf(&w, 16, 3.0);
        let probe = b.clone();
        let run = w
            .submit(
                move |orch, _, _| {
                    orch.submit_sub(&s, TaskArgs::new().input(&t).scalar(100u64))?;
                    let err = probe.read_vec::<f32>(0, 16).unwrap_err();
                    assert!(
                        matches!(err, BufferError::InUse { tasks: 1, .. }),
                        "{err:?}"
                    );
                    assert!(matches!(
                        probe.write_from(0, &[1.0f32]),
                        Err(BufferError::InUse { .. })
                    ));
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        run.wait(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(b.read_vec::<f32>(0, 16).unwrap(), vec![3.0; 16]);
        assert!(matches!(
            b.read_vec::<f32>(10, 7),
            Err(BufferError::OutOfBounds { .. })
        ));
        assert_eq!(b.with_slice(|s: &[f32]| s.len()).unwrap(), 16);
        assert!(
            b.tensor(&[17], DType::F32).is_err(),
            "bad views fail at construction"
        );
    });
}

/// Host buffers take every tensor element type of the chip (one `Element` trait), half floats
/// included, bit for bit.
#[test]
fn host_buffers_hold_every_chip_element_type() {
    use half::{bf16, f16};
    let w = start(builder(Mode::InProcess, 0, 1));
    // Offsets count elements of the type read or written.
    let b = w.create_buffer(32).unwrap();
    let halves = [
        f16::from_f32(1.5),
        f16::NAN,
        f16::NEG_INFINITY,
        f16::MIN_POSITIVE,
    ];
    b.write_from(0, &halves).unwrap();
    let back: Vec<u16> = b
        .read_vec::<f16>(0, 4)
        .unwrap()
        .iter()
        .map(|h| h.to_bits())
        .collect();
    assert_eq!(back, halves.map(f16::to_bits));
    b.write_from(8, &[bf16::from_f32(-2.25)]).unwrap();
    assert_eq!(
        b.read_vec::<bf16>(8, 1).unwrap(),
        vec![bf16::from_f32(-2.25)]
    );
    assert!(b.read_vec::<f16>(16, 1).is_err(), "32 bytes hold 16 halves");
    assert!(b.tensor(&[16], DType::F16).is_ok());
    w.close();
}

fn n54_submits_from_two_threads_are_serialised(mode: Mode) {
    with_timeout(30, move || {
        let w = std::sync::Arc::new(start(builder(mode, 0, 2)));
        let s = sleeper(&w);
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let w = std::sync::Arc::clone(&w);
                std::thread::spawn(move || {
                    w.run(
                        move |orch, _, _| {
                            let label = format!("t{i}");
                            orch.submit_sub(&s, TaskArgs::new().scalar(60u64).label(&label))?;
                            std::thread::sleep(Duration::from_millis(20));
                            Ok(())
                        },
                        TaskArgs::new(),
                        CallConfig::default(),
                    )
                    .unwrap()
                })
            })
            .collect();
        let mut reports: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        reports.sort_by_key(|r| r.run_id);
        let end1 = reports[0].at(reports[0].tasks[0].finished.unwrap());
        let start2 = reports[1].at(reports[1].tasks[0].dispatched.unwrap());
        assert!(
            start2 >= end1,
            "run 2's task started before run 1 completed"
        );
    });
}

fn reentrant_submit_is_refused(mode: Mode) {
    with_timeout(20, move || {
        let w = std::sync::Arc::new(start(builder(mode, 0, 1)));
        let inner = std::sync::Arc::clone(&w);
        let err = w
            .run(
                move |_, _, _| match inner.submit(
                    |_, _, _| Ok(()),
                    TaskArgs::new(),
                    CallConfig::default(),
                ) {
                    Err(SubmitRunError::Reentrant) => Err(OrchError::msg("refused as expected")),
                    other => panic!("unexpected {other:?}"),
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap_err();
        assert!(err.to_string().contains("refused as expected"), "{err}");
    });
}

/// Submits `tasks` sleeping sub tasks of 300 ms (a chain through one buffer when `chain`),
/// cancels the run 100 ms in with `reason`, and returns its failure once it ended — well
/// before the queued tasks could have run (with the run's handle).
fn cancelled_run(
    w: &pto_node::Worker,
    tasks: usize,
    chain: bool,
    reason: &str,
) -> (pto_node::RunError, pto_node::RunHandle) {
    let sleep = sleeper(w);
    let (_b, t) = buf(w, 16, 0.0);
    let handle = w
        .submit(
            move |orch, _, _| {
                for _ in 0..tasks {
                    let args = TaskArgs::new().scalar(300u64);
                    // A chain: each task waits for the one before (INOUT on one buffer).
                    let args = if chain { args.inout(&t) } else { args };
                    orch.submit_sub(&sleep, args)?;
                }
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    handle.cancel(reason);
    let Err(pto_node::WaitError::Failed(e)) = handle.wait(Some(Duration::from_secs(10))) else {
        panic!("a cancelled run must fail");
    };
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "{tasks} tasks of 300 ms were queued; the run ended {:?} after the cancel",
        started.elapsed()
    );
    (*e, handle)
}

/// Tasks already queued on a lane that runs in this process (in-process mode, or sub lanes
/// with `subs_in_process`) are skipped too when their run is cancelled: independent tasks,
/// all dispatched at once into one lane's queue, end with the running one.
fn cancel_skips_tasks_queued_on_a_lane(mode: Mode) {
    with_timeout(60, move || {
        let w = start(builder(mode, 0, 1).subs_in_process(mode == Mode::ChildProcess));
        let (e, _) = cancelled_run(&w, 12, false, "Ctrl-C");
        assert_eq!(
            (e.first.kind, e.skipped),
            (FailureKind::Cancelled, 11),
            "{e}"
        );
        let queued = &e.report.tasks[5].outcome;
        assert!(
            matches!(queued, pto_node::TaskOutcome::Failed(f) if f.message.starts_with("cancelled")),
            "{queued:?}"
        );
        w.close();
    });
}

/// `RunHandle::cancel`: the running task finishes, the tasks behind it are skipped as
/// cancelled, and `wait` returns the run's `Cancelled` failure long before they could have
/// run; cancelling a finished run changes nothing.
fn cancel_skips_unstarted_tasks_and_ends_the_run(mode: Mode) {
    with_timeout(60, move || {
        let w = start(builder(mode, 0, 1));
        let (e, handle) = cancelled_run(&w, 5, true, "the user pressed Ctrl-C");
        assert_eq!(e.first.kind, FailureKind::Cancelled);
        assert_eq!(e.first.message, "cancelled: the user pressed Ctrl-C");
        assert_eq!(e.skipped, 4, "{e}");
        let first = &e.report.tasks[0];
        assert_eq!(
            first.outcome,
            pto_node::TaskOutcome::Success,
            "the running task finished"
        );
        // The first task behind the running one is cancelled; those behind it are skipped
        // because their producer was (the chain's usual rule).
        let skipped = |i: usize| match &e.report.tasks[i].outcome {
            pto_node::TaskOutcome::Failed(f) if f.kind == FailureKind::Skipped => f.message.clone(),
            other => panic!("task {i}: {other:?}"),
        };
        assert_eq!(skipped(1), "cancelled: the user pressed Ctrl-C");
        assert!(
            skipped(4).starts_with("skipped: producer task"),
            "{}",
            skipped(4)
        );
        // A finished run stays as it was.
        handle.cancel("again");
        assert!(matches!(
            handle.wait(None),
            Err(pto_node::WaitError::Failed(e)) if e.first.message.ends_with("Ctrl-C")
        ));
        w.close();
    });
}

both_modes!(
    cancel_skips_unstarted_tasks_and_ends_the_run,
    cancel_skips_tasks_queued_on_a_lane,
    n03_init_twice_and_after_close,
    n04_unknown_callable,
    n14_to_n19_synchronous_rejections,
    foreign_handles_and_foreign_buffers_are_rejected,
    n29_empty_orchestration_completes,
    n34_wait_timeout_then_wait,
    n52_host_access_while_a_task_uses_the_buffer,
    n54_submits_from_two_threads_are_serialised,
    reentrant_submit_is_refused,
);
