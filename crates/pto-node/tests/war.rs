//! Write-after-read per chip job (issue "A chip job never silently overwrites what an earlier
//! task still reads"): `CallConfig::track_war` travels with each L2 task like its sizing, so
//! one L3 orchestration can track one chip job and not another; the untracked one reports the
//! hazard on its own row.

use pto_kernels::hazard::OVERWRITE;
use pto_types::{CallConfig, TaskArgs, TaskOverrides, WarCheck};

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
