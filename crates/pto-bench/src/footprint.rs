//! B5: device-memory footprint of per-task sizing (`pto bench footprint`, BENCHMARKS.md B5):
//! the heterogeneous fan-out scene's three sizings — one global sizing, per-task sizing by
//! hand, per-task sizing found by `pto tune` — with the device memory each reserves, its heaps
//! against their high-water, and each way against the global sizing.
//!
//! It runs the shipped scene file through `pto_scene`'s runner, so the figures are the ones
//! `pto run` prints for the same cases ([`CaseFigures`]).

use std::path::Path;

use pto_node::EndpointMode;
use pto_scene::figures::CaseFigures;
use pto_scene::runner::{Diagnostics, RunOptions, run_file};
use pto_scene::{RunnerEnv, SceneFile};

use crate::{Point, Stats};

/// The shipped scene file (the main job), built into the binary.
const SCENE: &str = include_str!("../../../scenes/heterogeneous_fanout.toml");
const WAYS: [&str; 3] = ["global_max_sizing", "per_task_sizing", "per_task_tuned"];

/// Runs B5 (`quick`: the scene's fast params).
pub fn run(quick: bool) -> anyhow::Result<Vec<Point>> {
    let file = SceneFile::parse(Path::new("scenes/heterogeneous_fanout.toml"), SCENE)?;
    let out = std::env::temp_dir().join(format!("pto-bench-footprint-{}", std::process::id()));
    let mut points = Vec::new();
    let mut global = None;
    for way in WAYS {
        let options = RunOptions {
            case: Some(way.to_string()),
            output: out.clone(),
            diagnostics: Diagnostics::default(),
            env: RunnerEnv::new(EndpointMode::InProcess, quick),
        };
        let reports = run_file(&file, &options, |_| {})?;
        let Some(report) = reports.first() else {
            anyhow::bail!("the scene file has no case {way}");
        };
        anyhow::ensure!(
            report.result.passed(),
            "{way} failed: {:?}",
            report.result.check
        );
        let figures = CaseFigures::of(&report.result);
        let mib = figures.device_memory() as f64 / (1 << 20) as f64;
        let mut p = Point::new(
            "footprint",
            format!("{way}: device memory"),
            "MiB",
            Stats::one(mib),
        );
        match global {
            None => global = Some(mib),
            Some(g) => p = p.with_peer("global_max_sizing", g),
        }
        points.push(p);
        if let Some(ratio) = figures.heap_ratio() {
            points.push(Point::new(
                "footprint",
                format!("{way}: heap reserved / high-water"),
                "ratio",
                Stats::one(ratio),
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(points)
}
