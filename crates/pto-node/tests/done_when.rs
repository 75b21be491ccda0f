//! The "Done when" tests: per-task `runtime_env` on one chip, and a heterogeneous
//! fan-out over four chips whose reserved device memory follows each task's own sizing.

use pto_chip::memory::ArenaOutcome;
use pto_node::TaskReport;
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{CallConfig, Resource, RuntimeEnv, TaskArgs, TaskOverrides};

use crate::common::*;
use crate::support::{per_task_overrides, per_task_run};

const MIB: u64 = 1 << 20;

fn check_overridden(tasks: &[TaskReport]) {
    for (label, expected) in per_task_overrides() {
        let t = tasks
            .iter()
            .find(|t| t.label.as_deref() == Some(label))
            .unwrap_or_else(|| panic!("no task {label}"));
        let chip = t.chip_report().expect("chip report");
        for r in Resource::ALL {
            assert_eq!(chip.sizing.values(r), expected.get(r), "{label} {r:?}");
            assert_eq!(
                chip.sizing.sources(r),
                [SizeSource::CallConfig; 4],
                "{label} {r:?}"
            );
        }
    }
}

fn default_task(tasks: &[TaskReport]) -> &TaskReport {
    tasks
        .iter()
        .find(|t| t.label.as_deref() == Some("l2_default"))
        .expect("l2_default")
}

fn done_three_sizings_and_one_default_on_one_chip(mode: Mode) {
    with_timeout(60, move || {
        // The chip's environment: window and dep pool set, heap left to the default; the
        // process environment is neither read for ring variables nor written.
        let env = [
            ("PTO2_RING_TASK_WINDOW", "512"),
            ("PTO2_RING_DEP_POOL", "1024"),
        ];
        let endpoint = match mode {
            Mode::InProcess => pto_node::EndpointMode::InProcess,
            Mode::ChildProcess => pto_node::EndpointMode::ChildProcess,
        };
        let tasks = per_task_run(endpoint, &env).unwrap();
        check_overridden(&tasks);
        let chip = default_task(&tasks).chip_report().unwrap();
        assert_eq!(chip.sizing.values(Resource::TaskWindow), [512; 4]);
        assert_eq!(
            chip.sizing.sources(Resource::TaskWindow),
            [SizeSource::Env; 4]
        );
        assert_eq!(chip.sizing.values(Resource::DepPool), [1024; 4]);
        assert_eq!(chip.sizing.values(Resource::Heap), [268435456; 4]);
        assert_eq!(
            chip.sizing.sources(Resource::Heap),
            [SizeSource::Default; 4]
        );
        // Each task ran on chip 0 with its own arena (pairwise different sizings).
        let keys: Vec<_> = tasks
            .iter()
            .map(|t| t.chip_report().unwrap().sizing.key())
            .collect();
        for i in 0..keys.len() {
            for j in i + 1..keys.len() {
                assert_ne!(keys[i], keys[j]);
            }
        }
        let chip0 = match mode {
            Mode::InProcess => "chip[0]",
            Mode::ChildProcess => "chip_child[0] pid=",
        };
        assert!(tasks.iter().all(|t| t.members[0].worker.starts_with(chip0)));
    });
}

fn done_heterogeneous_fanout_reserves_per_task_sizing(mode: Mode) {
    with_timeout(60, move || {
        const N: usize = 4096;
        let mut b = builder(mode, 4, 0);
        for i in 0..4 {
            b = b.chip_spec(i, small_chip(2 << 30));
        }
        let w = start(b);
        let attn = chip(&w, "vector_example");
        let add = chip(&w, "elementwise_add");
        let (_a, a) = buf(&w, N, 2.0);
        let (_b, bt) = buf(&w, N, 3.0);
        let (f_buf, f) = buf(&w, N, 0.0);
        let outs: Vec<_> = (0..8).map(|_| buf(&w, N, 0.0)).collect();
        let out_tensors: Vec<_> = outs.iter().map(|(_, t)| t.clone()).collect();
        let large = TaskOverrides {
            aicpu_thread_num: None,
            track_war: None,
            runtime_env: RuntimeEnv::default()
                .with_task_window(1024)
                .with_heap([256 * MIB, 64 * MIB, 16 * MIB, 4 * MIB])
                .with_dep_pool(4096),
        };
        let small = TaskOverrides {
            aicpu_thread_num: None,
            track_war: None,
            runtime_env: RuntimeEnv::default()
                .with_task_window(16)
                .with_heap(MIB)
                .with_dep_pool(64),
        };
        let report = w
            .run(
                move |orch, _, cfg| {
                    let args = TaskArgs::new()
                        .input(&a)
                        .input(&bt)
                        .output_existing(&f)
                        .label("attn");
                    orch.submit_next_level(&attn, args, &cfg.derive(&large)?, 0)?;
                    let small_cfg = cfg.derive(&small)?;
                    for (k, out) in out_tensors.iter().enumerate() {
                        let args = TaskArgs::new()
                            .input(&a)
                            .input(&bt)
                            .output_existing(out)
                            .label(&format!("ew{k}"));
                        orch.submit_next_level(&add, args, &small_cfg, k % 4)?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert!(
            f_buf
                .read_vec::<f32>(0, N)
                .unwrap()
                .iter()
                .all(|&v| v == 47.0)
        );
        for (buffer, _) in &outs {
            assert!(
                buffer
                    .read_vec::<f32>(0, N)
                    .unwrap()
                    .iter()
                    .all(|&v| v == 5.0)
            );
        }
        let arena_of = |label: &str| {
            let t = report.task(label).unwrap();
            (
                t.chip_report().unwrap().footprint.arena,
                t.chip_report().unwrap().arena,
            )
        };
        let (large_arena, _) = arena_of("attn");
        let (small_arena, _) = arena_of("ew0");
        assert!(large_arena > 300 * MIB, "{large_arena}");
        assert!(small_arena < 8 * MIB, "{small_arena}");
        // Chips 1–3 ran two element-wise tasks each: one miss, then a hit.
        assert_eq!(arena_of("ew5").1, ArenaOutcome::Hit);
        let reserved: Vec<u64> = (0..4)
            .map(|c| w.committed_device_memory(c).unwrap())
            .collect();
        assert_eq!(
            reserved[0],
            large_arena + small_arena,
            "chip 0: one large + one small arena"
        );
        for (c, &r) in reserved.iter().enumerate().skip(1) {
            assert_eq!(r, small_arena, "chip {c}: one small arena");
        }
        let total: u64 = reserved.iter().sum();
        assert!(
            total < 2 * large_arena,
            "per-task sizing reserves ≈ one large + four small arenas"
        );
    });
}

both_modes!(
    done_three_sizings_and_one_default_on_one_chip,
    done_heterogeneous_fanout_reserves_per_task_sizing,
);
