//! Dependency inference and scheduling order (NODE_RUNTIME.md §9 rows 25–28, 35, 36; §2.3,
//! §3.2; issue 14's 100 000 writers of one buffer). Edges are checked through each task's
//! `producers` in the run report.

use std::time::Duration;

use pto_node::{NodeTaskId, TaskReport};
use pto_types::{CallConfig, DType, TaskArgs};

use crate::common::*;

fn producers(t: &TaskReport) -> Vec<u32> {
    t.producers.iter().map(|p: &NodeTaskId| p.index).collect()
}

fn n25_inout_chain_runs_in_submit_order(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 3));
        // x = x * 10 + scalar: the final value spells the execution order.
        let step = sub(&w, "step");
        let (x_buf, x) = buf(&w, 8, 0.0);
        let report = w
            .run(
                move |orch, _, _| {
                    for k in 1..=3u64 {
                        orch.submit_sub(&step, TaskArgs::new().inout(&x).scalar(k))?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(x_buf.read_vec::<f32>(0, 8).unwrap(), vec![123.0; 8]);
        assert_eq!(producers(&report.tasks[1]), vec![0]);
        assert_eq!(producers(&report.tasks[2]), vec![1]);
    });
}

fn n26_disjoint_halves_have_independent_readers(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 2));
        let fill = filler(&w);
        let copy = copier(&w);
        let (m, _) = buf(&w, 16 * 4, 0.0);
        let top = m.view(0, &[8, 4], &[4, 1], DType::F32).unwrap();
        let bottom = m.view(8 * 4 * 4, &[8, 4], &[4, 1], DType::F32).unwrap();
        let (o0, t0) = buf(&w, 32, 0.0);
        let (o1, t1) = buf(&w, 32, 0.0);
        let t0 = t0.buffer().clone();
        let t1 = t1.buffer().clone();
        let report = w
            .run(
                move |orch, _, _| {
                    orch.submit_sub(&fill, TaskArgs::new().output_existing(&top).scalar(1.5f32))?;
                    orch.submit_sub(
                        &fill,
                        TaskArgs::new().output_existing(&bottom).scalar(2.5f32),
                    )?;
                    let d0 = pto_types::Tensor::new(t0, 0, &[8, 4], &[4, 1], DType::F32).unwrap();
                    let d1 = pto_types::Tensor::new(t1, 0, &[8, 4], &[4, 1], DType::F32).unwrap();
                    orch.submit_sub(&copy, TaskArgs::new().input(&top).output_existing(&d0))?;
                    orch.submit_sub(&copy, TaskArgs::new().input(&bottom).output_existing(&d1))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(producers(&report.tasks[2]), vec![0]);
        assert_eq!(producers(&report.tasks[3]), vec![1]);
        assert_eq!(o0.read_vec::<f32>(0, 32).unwrap(), vec![1.5; 32]);
        assert_eq!(o1.read_vec::<f32>(0, 32).unwrap(), vec![2.5; 32]);
    });
}

fn n26_column_halves_are_independent_too(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 2));
        let fill = filler(&w);
        let (m, _) = buf(&w, 4 * 8, 0.0);
        let left = m.view(0, &[4, 4], &[8, 1], DType::F32).unwrap();
        let right = m.view(4 * 4, &[4, 4], &[8, 1], DType::F32).unwrap();
        let whole = m.tensor(&[4, 8], DType::F32).unwrap();
        let report = w
            .run(
                move |orch, _, _| {
                    orch.submit_sub(&fill, TaskArgs::new().output_existing(&left).scalar(1.0f32))?;
                    orch.submit_sub(
                        &fill,
                        TaskArgs::new().output_existing(&right).scalar(2.0f32),
                    )?;
                    orch.submit_sub(
                        &fill,
                        TaskArgs::new()
                            .input(&right)
                            .output_existing(&whole)
                            .scalar(0.0f32),
                    )?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(
            producers(&report.tasks[1]),
            Vec::<u32>::new(),
            "left and right interleave but never overlap"
        );
        assert_eq!(
            producers(&report.tasks[2]),
            vec![1],
            "the reader of the right half waits for its writer only"
        );
    });
}

fn n27_distinct_buffers_never_alias(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 2));
        let fill = filler(&w);
        let copy = copier(&w);
        let (_a, a) = buf(&w, 16, 0.0);
        let (_b, b) = buf(&w, 16, 0.0);
        let (_c, c) = buf(&w, 16, 0.0);
        let report = w
            .run(
                move |orch, _, _| {
                    orch.submit_sub(&fill, TaskArgs::new().output_existing(&a).scalar(1.0f32))?;
                    orch.submit_sub(&copy, TaskArgs::new().input(&b).output_existing(&c))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert!(report.tasks[1].producers.is_empty());
    });
}

fn war_run(mode: Mode, track_war: bool) -> (TaskReport, TaskReport) {
    let w = start(builder(mode, 0, 2).track_war(track_war));
    let reader = sleeper(&w);
    let fill = filler(&w);
    let (_x, x) = buf(&w, 16, 0.0);
    let report = w
        .run(
            move |orch, _, _| {
                orch.submit_sub(&reader, TaskArgs::new().input(&x).scalar(100u64).label("R"))?;
                orch.submit_sub(
                    &fill,
                    TaskArgs::new()
                        .output_existing(&x)
                        .scalar(1.0f32)
                        .label("W"),
                )?;
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
    (report.tasks[0].clone(), report.tasks[1].clone())
}

fn n28_track_war_orders_a_writer_after_readers(mode: Mode) {
    with_timeout(20, move || {
        let (r, w) = war_run(mode, true);
        assert_eq!(producers(&w), vec![0]);
        assert!(w.dispatched.unwrap() >= r.finished.unwrap());
        let (_r, w) = war_run(mode, false);
        assert!(w.producers.is_empty(), "without track_war: no edge");
    });
}

/// A task that reads one half and writes the other, then a writer of the whole: the writer
/// depends on the read (NODE_RUNTIME.md §2.3: "writers depend on overlapping live readers").
/// Before issue 14 the lookup subtracted every overlapping *writer* task from the readers, so
/// a task that also wrote nearby lost its write-after-read edge.
fn track_war_orders_a_writer_after_a_task_that_read_and_wrote(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 2).track_war(true));
        let copy = copier(&w);
        let fill = filler(&w);
        let (x_buf, x) = buf(&w, 8, 1.0);
        let report = w
            .run(
                move |orch, _, _| {
                    let (low, high) = (view(&x_buf, 0, 4), view(&x_buf, 4, 4));
                    orch.submit_sub(&copy, TaskArgs::new().input(&low).output_existing(&high))?;
                    orch.submit_sub(&fill, TaskArgs::new().output_existing(&x).scalar(2.0f32))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(producers(&report.tasks[1]), vec![0]);
        let (first, second) = (&report.tasks[0], &report.tasks[1]);
        assert!(second.dispatched.unwrap() >= first.finished.unwrap());
    });
}

fn n35_runs_never_interleave(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 2));
        let s = sleeper(&w);
        let r1 = w
            .submit(
                move |orch, _, _| {
                    orch.submit_sub(&s, TaskArgs::new().scalar(100u64).label("run1"))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        let r2 = w
            .submit(
                move |orch, _, _| {
                    orch.submit_sub(&s, TaskArgs::new().scalar(0u64).label("run2"))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        let report2 = r2.wait(Some(Duration::from_secs(10))).unwrap();
        assert!(r1.is_finished(), "runs complete in order");
        let report1 = r1.wait(None).unwrap();
        let end1 = report1.at(report1.tasks[0].finished.unwrap());
        let start2 = report2.at(report2.tasks[0].dispatched.unwrap());
        assert!(start2 >= end1, "a run-2 task ran before run 1 completed");
    });
}

fn n36_group_reserves_its_targets(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 2, 0));
        let sleep = chip(&w, "sleep_chip");
        let report = w
            .run(
                move |orch, _, cfg| {
                    let a = |ms: u64, label: &str| TaskArgs::new().scalar(ms).label(label);
                    orch.submit_next_level(&sleep, a(150, "busy1"), cfg, 1)?;
                    std::thread::sleep(Duration::from_millis(20));
                    orch.submit_next_level_group(
                        &sleep,
                        vec![a(10, "group"), a(10, "group")],
                        cfg,
                        &[0, 1],
                    )?;
                    orch.submit_next_level(&sleep, a(0, "single0"), cfg, 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        let group = report.task("group").unwrap();
        let single = report.task("single0").unwrap();
        let busy = report.task("busy1").unwrap();
        if busy.dispatched.unwrap() < group.dispatched.unwrap() {
            // busy1 started first: the group waited for chip 1.
            assert!(group.dispatched.unwrap() >= busy.finished.unwrap());
        }
        assert!(
            single.dispatched.unwrap() >= group.dispatched.unwrap(),
            "the single for chip 0 overtook the group reserving chip 0"
        );
        assert_eq!(group.members.len(), 2);
        assert_eq!(Some(&group.members[1].worker), w.chip_name(1).as_ref());
    });
}

/// Issue 14: 100 000 tasks on one buffer through the public API. Every writer fills its own
/// disjoint two-element slice and stays live until the run ends (outer scope), so the buffer's
/// TensorMap holds 100 000 entries; a scan of them per submit took minutes, the region index
/// keeps each submit O(log n). Then readers of two neighbouring slices each wait for exactly
/// those two writers and see their values.
fn hundred_thousand_writers_of_one_buffer(mode: Mode) {
    const WRITERS: u64 = 100_000;
    const READERS: u64 = 1_000;
    const SLICE: u64 = 2;
    const SPACING: u64 = WRITERS / READERS;
    with_timeout(100, move || {
        let w = start(builder(mode, 0, 2));
        let (fill, copy) = (filler(&w), copier(&w));
        let (grid, _) = buf(&w, (WRITERS * SLICE) as usize, -1.0);
        let (out, _) = buf(&w, (READERS * SLICE) as usize, -1.0);
        let (g, o) = (grid.clone(), out.clone());
        let report = w
            .run(
                move |orch, _, _| {
                    for i in 0..WRITERS {
                        let slice = view(&g, i * SLICE, SLICE as u32);
                        let args = TaskArgs::new().output_existing(&slice).scalar(i as f32);
                        orch.submit_sub(&fill, args)?;
                    }
                    for r in 0..READERS {
                        // The second element of slice i and the first of slice i + 1.
                        let straddle = view(&g, r * SPACING * SLICE + 1, SLICE as u32);
                        let dst = view(&o, r * SLICE, SLICE as u32);
                        orch.submit_sub(
                            &copy,
                            TaskArgs::new().input(&straddle).output_existing(&dst),
                        )?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(report.tasks.len() as u64, WRITERS + READERS);
        let values = grid.read_vec::<f32>(0, (WRITERS * SLICE) as usize).unwrap();
        for (i, slice) in values.chunks(SLICE as usize).enumerate() {
            assert_eq!(slice, [i as f32; SLICE as usize], "slice {i}");
        }
        let copies = out.read_vec::<f32>(0, (READERS * SLICE) as usize).unwrap();
        for r in 0..READERS {
            let i = r * SPACING;
            let reader = &report.tasks[(WRITERS + r) as usize];
            assert_eq!(producers(reader), [i as u32, i as u32 + 1], "reader {r}");
            let got = &copies[(r * SLICE) as usize..][..SLICE as usize];
            assert_eq!(got, [i as f32, (i + 1) as f32], "reader {r}");
        }
        assert!(
            report.tasks[..WRITERS as usize]
                .iter()
                .all(|t| t.producers.is_empty())
        );
    });
}

both_modes!(
    hundred_thousand_writers_of_one_buffer,
    n25_inout_chain_runs_in_submit_order,
    n26_disjoint_halves_have_independent_readers,
    n26_column_halves_are_independent_too,
    n27_distinct_buffers_never_alias,
    n28_track_war_orders_a_writer_after_readers,
    track_war_orders_a_writer_after_a_task_that_read_and_wrote,
    n35_runs_never_interleave,
    n36_group_reserves_its_targets,
);
