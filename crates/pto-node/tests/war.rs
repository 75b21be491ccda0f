//! Write-after-read per chip job (issue "A chip job never silently overwrites what an earlier
//! task still reads"): `CallConfig::track_war` travels with each L2 task like its sizing, so
//! one L3 orchestration can track one chip job and not another; the untracked one reports the
//! hazard on its own row.

use pto_kernels::hazard::OVERWRITE;
use pto_node::{Callable, CallableKind, OrchError, Orchestrator, Worker};
use pto_types::{CallConfig, DType, RuntimeEnv, TaskArgs, TaskOverrides, WarCheck};

use crate::common::*;

const N: usize = 256;

fn l3_one_tracked_and_one_untracked_chip_job(mode: Mode) {
    with_timeout(60, move || {
        let w = start(builder(mode, 2, 0));
        let hazard = chip(&w, "war_hazard");
        let (_xa, xa) = buf(&w, N, 1.0);
        let (ya_buf, ya) = buf(&w, N, 0.0);
        let (_xb, xb) = buf(&w, N, 1.0);
        let (yb_buf, yb) = buf(&w, N, 0.0);
        // Report mode explicitly, so that the test means the same in release builds.
        let base = CallConfig {
            war_check: WarCheck::Report,
            ..CallConfig::default()
        };
        let report = w
            .run(
                move |orch, _, cfg| {
                    let tracked = cfg.derive(&TaskOverrides {
                        track_war: Some(true),
                        ..TaskOverrides::default()
                    })?;
                    let read_wait_us = 150_000u64;
                    let a = TaskArgs::new()
                        .input(&xa)
                        .output_existing(&ya)
                        .scalar(read_wait_us)
                        .scalar(0u64)
                        .label("tracked");
                    orch.submit_next_level(&hazard, a, &tracked, 0)?;
                    let b = TaskArgs::new()
                        .input(&xb)
                        .output_existing(&yb)
                        .scalar(read_wait_us)
                        .scalar(0u64)
                        .label("untracked");
                    orch.submit_next_level(&hazard, b, cfg, 1)?;
                    Ok(())
                },
                TaskArgs::new(),
                base,
            )
            .expect("report mode does not fail the run");
        let row = |label: &str| {
            report
                .tasks
                .iter()
                .find(|t| t.label.as_deref() == Some(label))
                .and_then(|t| t.chip_report())
                .unwrap_or_else(|| panic!("no chip report for {label}"))
                .clone()
        };
        assert!(row("tracked").warnings.is_empty());
        let warnings = row("untracked").warnings;
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("write-after-read hazard"),
            "{warnings:?}"
        );
        assert!(
            ya_buf
                .read_vec::<f32>(0, N)
                .unwrap()
                .iter()
                .all(|&v| v == 1.0)
        );
        let host_parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
        if host_parallel {
            assert!(
                yb_buf
                    .read_vec::<f32>(0, N)
                    .unwrap()
                    .iter()
                    .all(|&v| v == OVERWRITE),
                "the untracked reader copied the overwrite: {:?}",
                &yb_buf.read_vec::<f32>(0, 4).unwrap()
            );
        }
    });
}

both_modes!(l3_one_tracked_and_one_untracked_chip_job);

/// Node callable `war_pair`: tensors xa, ya, xb, yb; `war_hazard` on chip 0 over (xa, ya) with
/// `track_war` derived on, and on chip 1 over (xb, yb) with the config the L4 task carried.
fn war_pair(
    orch: &mut Orchestrator<'_>,
    args: &TaskArgs,
    cfg: &CallConfig,
) -> Result<(), OrchError> {
    let hazard = orch.callable(CallableKind::Chip, "war_hazard")?;
    let t = args.tensors();
    let tracked = cfg.derive(&TaskOverrides {
        track_war: Some(true),
        ..TaskOverrides::default()
    })?;
    for (chip, (label, task_cfg)) in [("tracked", &tracked), ("untracked", cfg)]
        .into_iter()
        .enumerate()
    {
        let a = TaskArgs::new()
            .input(&t[2 * chip].1)
            .output_existing(&t[2 * chip + 1].1)
            .scalar(150_000u64)
            .scalar(0u64)
            .label(label);
        orch.submit_next_level(&hazard, a, task_cfg, chip)?;
    }
    Ok(())
}
pto_node::register_node!("war_pair", war_pair);

/// Over the remote wire: an L4 task's config reaches a `pto serve` session's chips, where one
/// job derives `track_war` on and the other keeps the carried config (report mode).
#[test]
fn track_war_and_war_check_reach_remote_chips() {
    with_timeout(90, || {
        pto_kernels::link();
        let server = crate::remote::server(None, None);
        let l4 = Worker::builder(4)
            .remote_worker(&crate::remote::at(&server))
            .build()
            .unwrap();
        let h = l4.register(Callable::node("war_pair")).unwrap();
        l4.init().unwrap();
        let remote = |v: f32| {
            let b = l4.create_remote_buffer(0, N * 4).unwrap();
            b.write_from(0, &vec![v; N]).unwrap();
            let t = b.tensor(&[N as u32], DType::F32).unwrap();
            (b, t)
        };
        let bufs = [remote(1.0), remote(0.0), remote(1.0), remote(0.0)];
        let tensors: Vec<_> = bufs.iter().map(|(_, t)| t.clone()).collect();
        // Small rings (the server's chips have 1 GiB) and report mode, carried by value.
        let base = CallConfig {
            war_check: WarCheck::Report,
            ..CallConfig::with_runtime_env(
                RuntimeEnv::default()
                    .with_task_window(64)
                    .with_heap(1 << 20)
                    .with_dep_pool(256),
            )
        };
        let report = l4
            .run(
                move |orch, _, cfg| {
                    let args = TaskArgs::new()
                        .input(&tensors[0])
                        .output_existing(&tensors[1])
                        .input(&tensors[2])
                        .output_existing(&tensors[3])
                        .label("pair");
                    orch.submit_next_level(&h, args, cfg, 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                base,
            )
            .unwrap();
        let inner = report.task("pair").unwrap().members[0]
            .inner
            .clone()
            .expect("the remote run's report");
        let warnings = |label: &str| {
            inner
                .task(label)
                .unwrap()
                .chip_report()
                .unwrap()
                .warnings
                .clone()
        };
        assert!(warnings("tracked").is_empty());
        let untracked = warnings("untracked");
        assert_eq!(untracked.len(), 1, "{untracked:?}");
        assert!(untracked[0].contains("write-after-read hazard"));
        assert_eq!(bufs[1].0.read_vec::<f32>(0, N).unwrap(), vec![1.0; N]);
        l4.close();
    });
}
