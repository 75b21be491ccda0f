//! Chip memory control through the L3 Worker (NODE_RUNTIME.md §1.3, §1.6, §8.4; rows 20, 50).

use pto_node::{ControlError, OrchError, SubmitError, Worker};
use pto_types::{CallConfig, DType, TaskArgs};

use crate::common::{
    Mode, both_modes, buf, builder, chip, f32_buffer, sleeper, start, with_timeout,
};

/// The submit error of a run whose orchestration function returns `f`'s result.
fn submit_error(
    w: &Worker,
    f: impl FnOnce(&mut pto_node::Orchestrator<'_>) -> Result<(), SubmitError>,
) -> SubmitError {
    let err = w
        .run(
            move |orch, _, _| f(orch).map_err(OrchError::from),
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect_err("the orchestration fails");
    let text = format!("{err:?}");
    match err {
        pto_node::WorkerRunError::Submit(pto_node::SubmitRunError::Orchestration {
            source: OrchError::Submit(e),
            ..
        }) => e,
        _ => panic!("not a submit error: {text}"),
    }
}

fn n20_device_tensor_of_another_chip_is_rejected(mode: Mode) {
    with_timeout(60, move || {
        let w = start(builder(mode, 2, 1));
        let add = chip(&w, "elementwise_add");
        let s = sleeper(&w);
        let d = w.alloc_child_tensor(1, &[64], DType::F32).unwrap();
        assert_eq!(d.worker(), 1);
        assert_eq!(d.nbytes(), 256);
        let (_o, o) = buf(&w, 64, 0.0);
        let t = d.tensor().clone();
        let (a1, o1) = (t.clone(), o.clone());
        let err = submit_error(&w, move |orch| {
            orch.submit_next_level(
                &add,
                TaskArgs::new().input(&a1).input(&a1).output_existing(&o1),
                &CallConfig::default(),
                0,
            )
            .map(|_| ())
        });
        match &err {
            SubmitError::InvalidArgs { index, reason } => {
                assert_eq!(*index, Some(0));
                assert!(
                    reason.contains("device tensor belongs to chip 1"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        let err = submit_error(&w, move |orch| {
            orch.submit_sub(&s, TaskArgs::new().input(&t)).map(|_| ())
        });
        assert!(
            matches!(&err, SubmitError::InvalidArgs { reason, .. } if reason.contains("sub tasks")),
            "{err:?}"
        );
        assert_eq!(w.free(d).unwrap(), 256);
        w.close();
    });
}

fn n50_control_runs_only_before_the_first_submit(mode: Mode) {
    with_timeout(60, move || {
        let w = start(builder(mode, 1, 1));
        let add = chip(&w, "elementwise_add");
        let s = sleeper(&w);
        let n = 256usize;
        // A control call inside a run first waits until the run heads the FIFO.
        let earlier = w
            .submit(
                move |orch, _, _| {
                    orch.submit_sub(&s, TaskArgs::new().scalar(150))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        let w3 = &w;
        w.run(
            move |orch, _, _| {
                let d = orch.alloc_child_tensor(0, &[4], DType::F32)?;
                // The earlier run (a 150 ms sub task) completed before the allocation ran.
                assert_eq!(w3.stats().unfinished_runs, 1);
                assert_eq!(orch.committed_device_memory(0)? % 16, 0);
                orch.free(d)?;
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
        assert!(earlier.wait(Some(std::time::Duration::ZERO)).is_ok());
        let (host, _) = f32_buffer(&w, n, |i| i as f32).unwrap();
        let (_x, x) = buf(&w, n, 1.0);
        let (out, o) = buf(&w, n, 0.0);
        let w2 = &w;
        let host2 = &host;
        let (tx, rx) = std::sync::mpsc::channel();
        let report = w
            .run(
                move |orch, _, cfg| {
                    // Before the first submit: allocation and copy succeed.
                    let d = orch.alloc_child_tensor(0, &[n as u32], DType::F32)?;
                    orch.copy_to(&d, host2)?;
                    let args = TaskArgs::new()
                        .input(d.tensor())
                        .input(&x)
                        .output_existing(&o);
                    orch.submit_next_level(&add, args, cfg, 0)?;
                    // After it: every control call is refused.
                    assert_eq!(
                        orch.alloc_child_tensor(0, &[n as u32], DType::F32)
                            .unwrap_err(),
                        ControlError::AfterFirstSubmit
                    );
                    assert_eq!(
                        orch.copy_to(&d, host2).unwrap_err(),
                        ControlError::AfterFirstSubmit
                    );
                    assert_eq!(
                        orch.committed_device_memory(0).unwrap_err(),
                        ControlError::AfterFirstSubmit
                    );
                    // Outside the run's building, while it is unfinished: RunsInFlight.
                    assert!(matches!(
                        w2.committed_device_memory(0),
                        Err(ControlError::RunsInFlight { count: 1 })
                    ));
                    tx.send(d).unwrap();
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(report.tasks.len(), 1);
        assert_eq!(w.free(rx.recv().unwrap()).unwrap(), 4 * n as u64);
        let got = out.read_vec::<f32>(0, n).unwrap();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v, i as f32 + 1.0);
        }
        // A size mismatch is refused before anything reaches the chip.
        let d = w
            .alloc_child_tensor(0, &[n as u32 + 1], DType::F32)
            .unwrap();
        assert!(matches!(
            w.copy_to(&d, &host),
            Err(ControlError::SizeMismatch { device, host }) if device == 4 * (n as u64 + 1) && host == 4 * n as u64
        ));
        w.free(d).unwrap();
        w.close();
    });
}

fn n51_free_while_a_run_is_unfinished(mode: Mode) {
    with_timeout(60, move || {
        let w = start(builder(mode, 1, 1));
        let s = sleeper(&w);
        let d = w.alloc_child_tensor(0, &[16], DType::F32).unwrap();
        let run = w
            .submit(
                move |orch, _, _| {
                    orch.submit_sub(&s, TaskArgs::new().scalar(200))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(
            w.alloc_child_tensor(0, &[16], DType::F32).unwrap_err(),
            ControlError::RunsInFlight { count: 1 }
        );
        // A failed `free` consumes the handle (the allocation stays until the chip goes away).
        assert_eq!(
            w.free(d).unwrap_err(),
            ControlError::RunsInFlight { count: 1 }
        );
        run.wait(None).unwrap();
        w.close();
    });
}

/// §8.4 `child_memory`: a device weight outlives the tasks that read it.
fn child_memory_example(mode: Mode) {
    with_timeout(60, move || {
        let w = start(builder(mode, 1, 0));
        let add = chip(&w, "elementwise_add");
        let n = 1024usize;
        let weight: Vec<f32> = (0..n).map(|i| (i as f32) * 0.5).collect();
        let (host_w, _) = f32_buffer(&w, n, |i| weight[i]).unwrap();
        let (_x1, x1) = f32_buffer(&w, n, |i| i as f32).unwrap();
        let (_x2, x2) = f32_buffer(&w, n, |i| i as f32).unwrap();
        let (f1, o1) = buf(&w, n, 0.0);
        let (f2, o2) = buf(&w, n, 0.0);
        let before = w.committed_device_memory(0).unwrap();
        if mode == Mode::ChildProcess {
            assert!(w.chip_name(0).unwrap().starts_with("chip_child[0] pid="));
        }

        let (tx, rx) = std::sync::mpsc::channel();
        let hw = &host_w;
        w.run(
            move |orch, _, cfg| {
                let d = orch.alloc_child_tensor(0, &[n as u32], DType::F32)?;
                orch.copy_to(&d, hw)?;
                let during = orch.committed_device_memory(0)?;
                let t = d.tensor().clone();
                orch.submit_next_level(
                    &add,
                    TaskArgs::new().input(&t).input(&x1).output_existing(&o1),
                    cfg,
                    0,
                )?;
                orch.submit_next_level(
                    &add,
                    TaskArgs::new().input(&t).input(&x2).output_existing(&o2),
                    cfg,
                    0,
                )?;
                tx.send((d, during)).unwrap();
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
        let (d, during) = rx.recv().unwrap();
        assert_eq!(during, before + 4 * n as u64);

        let golden: Vec<f32> = (0..n).map(|i| weight[i] + i as f32).collect();
        let r1 = f1.read_vec::<f32>(0, n).unwrap();
        let r2 = f2.read_vec::<f32>(0, n).unwrap();
        assert_eq!(r1, golden);
        assert_eq!(r1, r2);

        // The weight is still on the device and accounted after the runs.
        let (back, _) = buf(&w, n, 0.0);
        w.copy_from(&d, &back).unwrap();
        assert_eq!(back.read_vec::<f32>(0, n).unwrap(), weight);
        let with_arena = w.committed_device_memory(0).unwrap();
        assert!(
            with_arena >= before + 4 * n as u64,
            "{with_arena} < {before} + {}",
            4 * n
        );
        assert_eq!(w.free(d).unwrap(), 4 * n as u64);
        assert_eq!(
            w.committed_device_memory(0).unwrap(),
            with_arena - 4 * n as u64
        );
        w.close();
    });
}

both_modes!(
    n20_device_tensor_of_another_chip_is_rejected,
    n50_control_runs_only_before_the_first_submit,
    n51_free_while_a_run_is_unfinished,
    child_memory_example,
);
