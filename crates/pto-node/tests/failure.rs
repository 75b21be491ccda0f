//! Failure semantics (NODE_RUNTIME.md §9 rows 30–33, 37; §2.10): a failed task fails the run
//! with its chain, dependents are skipped, independent branches complete, fail-fast, and
//! orchestration errors or panics cancel unstarted tasks without losing the Worker.

use std::time::{Duration, Instant};

use pto_node::{
    FailureKind, OrchError, SubmitError, SubmitRunError, TaskOutcome, WaitError, Worker,
    WorkerRunError,
};
use pto_types::{CallConfig, ErrorCode, RuntimeEnv, TaskArgs};

use crate::common::*;

fn small_cfg() -> CallConfig {
    CallConfig::with_runtime_env(
        RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(1 << 20)
            .with_dep_pool(64),
    )
}

/// Row 30's graph: a failing sub task, a chip task depending on it, an independent chip task.
/// With `probe_fail_fast`, the function then submits until it sees `RunFailed` (row 31).
fn n30_run(
    w: &Worker,
    noop: pto_node::CallableHandle,
    probe_fail_fast: bool,
) -> (pto_node::RunError, Option<Duration>, Vec<f32>) {
    // The failing task sleeps 300 ms first, so that the dependent and the independent branch
    // exist when it fails (otherwise fail-fast could reject them first).
    let boom = sub(w, "fail_after");
    let sub_name = w.sub_name(0).unwrap();
    let add = chip(w, "elementwise_add");
    let (_a, a) = buf(w, 64, 1.0);
    let (_x, x) = buf(w, 64, 0.0);
    let (_d, d) = buf(w, 64, -1.0);
    let (i_buf, i) = buf(w, 64, 0.0);
    let (tx, rx) = std::sync::mpsc::channel();
    let run = w
        .submit(
            move |orch, _, _| {
                orch.submit_sub(
                    &boom,
                    TaskArgs::new()
                        .output_existing(&x)
                        .scalar(300u64)
                        .label("boom"),
                )?;
                let dep = TaskArgs::new()
                    .input(&x)
                    .input(&a)
                    .output_existing(&d)
                    .label("dependent");
                orch.submit_next_level(&add, dep, &small_cfg(), 0)?;
                let ind = TaskArgs::new()
                    .input(&a)
                    .input(&a)
                    .output_existing(&i)
                    .label("independent");
                orch.submit_next_level(&add, ind, &small_cfg(), 1)?;
                if probe_fail_fast {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    loop {
                        let started = Instant::now();
                        match orch.submit_sub(&noop, TaskArgs::new()) {
                            Err(SubmitError::RunFailed(e)) => {
                                assert!(e.to_string().contains(&format!("{sub_name}: ")), "{e}");
                                assert!(e.to_string().contains("boom"), "{e}");
                                tx.send(started.elapsed()).unwrap();
                                break;
                            }
                            Err(other) => panic!("unexpected {other:?}"),
                            Ok(_) => {
                                assert!(Instant::now() < deadline, "the run never failed");
                                std::thread::sleep(Duration::from_millis(2));
                            }
                        }
                    }
                }
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect("submit");
    let Err(WaitError::Failed(e)) = run.wait(Some(Duration::from_secs(10))) else {
        panic!("the run must fail")
    };
    (
        *e,
        rx.try_recv().ok(),
        i_buf.read_vec::<f32>(0, 64).unwrap(),
    )
}

fn n30_failing_sub_skips_dependents_and_independent_branch_completes(mode: Mode) {
    with_timeout(30, move || {
        let w = start(builder(mode, 2, 1));
        let noop = sleeper(&w);
        let (e, _, independent) = n30_run(&w, noop, false);
        let text = e.to_string();
        let expected = match mode {
            // In-process the message is the sub function's error; a sub child prefixes its
            // own name (NODE_RUNTIME.md §5).
            Mode::InProcess => "boom".to_string(),
            Mode::ChildProcess => "sub_child[0]: boom".to_string(),
        };
        let sub_name = w.sub_name(0).unwrap();
        assert!(text.contains(&format!("{sub_name}: {expected}")), "{text}");
        assert!(text.contains(&format!("{}: boom", sub_name.split(' ').next().unwrap())));
        assert!(
            text.starts_with(&format!(
                "run {}: task 0 'boom' on {sub_name}: {expected}",
                e.run_id
            )),
            "{text}"
        );
        assert_eq!(e.first.code, Some(ErrorCode::CallableFailed));
        assert_eq!((e.failed, e.skipped), (1, 1));
        let dependent = e.report.task("dependent").unwrap();
        match &dependent.outcome {
            TaskOutcome::Failed(f) => {
                assert_eq!(f.kind, FailureKind::Skipped);
                assert!(
                    f.message.contains("producer task 0 ('boom') failed"),
                    "{}",
                    f.message
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(
            dependent.dispatched.is_none(),
            "a skipped task is never dispatched"
        );
        assert!(e.report.task("independent").unwrap().outcome.is_success());
        assert_eq!(
            independent,
            vec![2.0; 64],
            "the independent output was written"
        );
    });
}

fn n31_fail_fast_then_the_next_run_starts_clean(mode: Mode) {
    with_timeout(30, move || {
        let w = start(builder(mode, 2, 1));
        let s = sleeper(&w);
        let (_e, probe, _) = n30_run(&w, s, true);
        let took = probe.expect("the function saw RunFailed");
        assert!(
            took < Duration::from_millis(100),
            "RunFailed is immediate: {took:?}"
        );
        let report = w
            .run(
                move |orch, _, _| {
                    orch.submit_sub(&s, TaskArgs::new())?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .expect("the next run succeeds");
        assert_eq!(report.tasks.len(), 1);
    });
}

fn orchestration_failure(mode: Mode, panic: bool) {
    let w = start(builder(mode, 0, 2));
    let s = sleeper(&w);
    let first = sleeper(&w);
    let second = filler(&w);
    let (_x, x) = buf(&w, 16, 0.0);
    let (y_buf, y) = buf(&w, 16, 0.0);
    let started = Instant::now();
    let err = w
        .submit(
            move |orch, _, _| {
                // Long enough to outlast the panic hook printing a backtrace.
                orch.submit_sub(&first, TaskArgs::new().inout(&x).scalar(1000u64))?;
                // The first task is READY at once and starts within milliseconds; the second
                // then waits for it.
                std::thread::sleep(Duration::from_millis(200));
                orch.submit_sub(
                    &second,
                    TaskArgs::new().input(&x).output_existing(&y).scalar(7.0f32),
                )?;
                if panic {
                    panic!("orchestration exploded");
                }
                Err(OrchError::msg("stop after two submits"))
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "submit returns after the started task finished"
    );
    let SubmitRunError::Orchestration { run_id, source } = &err else {
        panic!("{err:?}")
    };
    let expected = if panic {
        "orchestration exploded"
    } else {
        "stop after two submits"
    };
    assert!(source.to_string().contains(expected), "{source}");
    assert!(err.to_string().contains(&format!("run {run_id}")), "{err}");
    assert_eq!(
        y_buf.read_vec::<f32>(0, 16).unwrap(),
        vec![0.0; 16],
        "the unstarted task never ran"
    );
    assert_eq!(w.stats().live_tasks, 0);
    w.run(
        move |orch, _, _| {
            orch.submit_sub(&s, TaskArgs::new())?;
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )
    .expect("the next run is fine");
}

fn n32_orchestration_error_cancels_unstarted_tasks(mode: Mode) {
    with_timeout(30, move || orchestration_failure(mode, false));
}

fn n33_orchestration_panic_cancels_unstarted_tasks(mode: Mode) {
    with_timeout(30, move || orchestration_failure(mode, true));
}

fn n37_group_member_failure_names_the_member(mode: Mode) {
    with_timeout(30, move || {
        let w = start(builder(mode, 2, 1));
        let fail_if = chip(&w, "fail_if");
        let copy = copier(&w);
        let (_o, o) = buf(&w, 16, 0.0);
        let (_c, c) = buf(&w, 16, 0.0);
        let run = w
            .submit(
                move |orch, _, _| {
                    let m0 = TaskArgs::new()
                        .output_existing(&o)
                        .scalar(0u64)
                        .scalar(0u64)
                        .label("grp");
                    // Member 1 fails after 200 ms, once the consumer below is submitted.
                    let m1 = TaskArgs::new().scalar(1u64).scalar(200u64);
                    orch.submit_next_level_group(&fail_if, vec![m0, m1], &small_cfg(), &[0, 1])?;
                    orch.submit_sub(
                        &copy,
                        TaskArgs::new()
                            .input(&o)
                            .output_existing(&c)
                            .label("consumer"),
                    )?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        let Err(WaitError::Failed(e)) = run.wait(Some(Duration::from_secs(10))) else {
            panic!("the run must fail")
        };
        let text = e.to_string();
        let chip1 = w.chip_name(1).unwrap();
        assert!(
            text.contains(&format!(
                "task 0 'grp' on {chip1}: group member 1 of 2: L2 run failed: EXPLICIT_ORCH_FATAL (9)"
            )),
            "{text}"
        );
        let consumer = e.report.task("consumer").unwrap();
        assert!(
            matches!(&consumer.outcome, TaskOutcome::Failed(f) if f.kind == FailureKind::Skipped)
        );
        let group = e.report.task("grp").unwrap();
        assert!(
            group.members[0].chip.is_some(),
            "member 0 succeeded and kept its report"
        );
    });
}

/// A task fails while the orchestration is still submitting; its next submit returns
/// `RunFailed`, which the orchestration passes up with `?`. `Worker::run` must return the
/// run's own failure (the task's code, the full report), never the orchestration's error.
fn a_failed_run_outranks_the_error_its_orchestration_passes_up(mode: Mode) {
    with_timeout(30, move || {
        let w = start(builder(mode, 1, 1));
        let boom = sub(&w, "fail_after");
        let s = sleeper(&w);
        let result = w.run(
            move |orch, _, _| {
                orch.submit_sub(&boom, TaskArgs::new().scalar(0u64).label("boom"))?;
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    // The pause makes the failure land between two submits every time.
                    std::thread::sleep(Duration::from_millis(20));
                    orch.submit_sub(&s, TaskArgs::new().label("after"))?;
                    assert!(Instant::now() < deadline, "the run never failed");
                }
            },
            TaskArgs::new(),
            CallConfig::default(),
        );
        let e = match result {
            Err(WorkerRunError::Failed(e)) => e,
            other => panic!("expected the run's failure, got {other:?}"),
        };
        assert_eq!(e.first.code, Some(ErrorCode::CallableFailed), "{e}");
        assert_eq!(e.first.label.as_deref(), Some("boom"), "{e}");
        assert!(!e.report.task("boom").unwrap().outcome.is_success());
        // The Worker stays usable.
        w.run(|_, _, _| Ok(()), TaskArgs::new(), CallConfig::default())
            .expect("the next run");
    });
}

both_modes!(
    a_failed_run_outranks_the_error_its_orchestration_passes_up,
    n30_failing_sub_skips_dependents_and_independent_branch_completes,
    n31_fail_fast_then_the_next_run_starts_clean,
    n32_orchestration_error_cancels_unstarted_tasks,
    n33_orchestration_panic_cancels_unstarted_tasks,
    n37_group_member_failure_names_the_member,
);
