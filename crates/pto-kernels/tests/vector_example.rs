//! The vector example end to end (issue: "gives 47 everywhere, and its run report shows the
//! ring sizes the CallConfig asked for, with source call_config").

mod common;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::RunContext;
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{CallConfig, Resource, RuntimeEnv, TaskArgs};

const N: usize = 16384;

#[test]
fn vector_example_gives_47_and_reports_its_sizing() {
    with_timeout(60, || {
        let chip = chip(8, &[("PTO2_RING_DEP_POOL", "512")]);
        let (_a_buf, a) = f32_tensor(N, 2.0);
        let (_b_buf, b) = f32_tensor(N, 3.0);
        let (f_buf, f) = f32_tensor(N, 0.0);
        let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
        let env = RuntimeEnv::default()
            .with_task_window([0, 8, 0, 0])
            .with_heap([0, 262144, 0, 0]);
        let report = chip
            .run(
                "vector_example",
                &args,
                &CallConfig::with_runtime_env(env),
                &RunContext::default(),
            )
            .expect("the run succeeds");
        let out = f_buf.read_f32(0, N);
        assert!(out.iter().all(|&v| v == 47.0), "f = {:?}...", &out[..4]);
        let window = report.sizing.get(Resource::TaskWindow);
        assert_eq!(window[1].value, 8);
        assert_eq!(window[1].source, SizeSource::CallConfig);
        assert_eq!(window[0].source, SizeSource::Default);
        let heap = report.sizing.get(Resource::Heap);
        assert_eq!(
            (heap[1].value, heap[1].source),
            (262144, SizeSource::CallConfig)
        );
        let dep = report.sizing.get(Resource::DepPool);
        assert!(
            dep.iter()
                .all(|d| d.value == 512 && d.source == SizeSource::Env)
        );
        assert_eq!(report.tasks, 5);
        assert_eq!(report.usage[1].task_window_peak, 4);
        assert_eq!(report.usage[1].heap_peak, 3 * 65536);
        assert_eq!(report.usage[0].heap_peak, 65536);
    });
}

#[test]
fn the_same_chip_runs_many_times() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        for round in 0..20 {
            let (_a_buf, a) = f32_tensor(N, 2.0);
            let (_b_buf, b) = f32_tensor(N, 3.0);
            let (f_buf, f) = f32_tensor(N, 0.0);
            let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
            let cfg = CallConfig::with_runtime_env(RuntimeEnv::default().with_heap(1 << 20));
            chip.run("vector_example", &args, &cfg, &RunContext::default())
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(f_buf.read_f32(0, N).iter().all(|&v| v == 47.0));
        }
    });
}
