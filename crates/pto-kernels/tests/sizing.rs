//! Per-run sizing at the chip: device memory, the arena cache and advice
//! (RING_CONFIG.md T56–T58; issue 4: "rerunning a workload with the pto advise output
//! succeeds, and the advised sizes are smaller than the defaults").

mod common;

use common::{f32_tensor, with_timeout};
use pto_chip::memory::ArenaOutcome;
use pto_chip::{BindError, ChipRunError, ChipSpec, ChipWorker, RunContext};
use pto_sizing::advise::{Headroom, ScopeStats, advise};
use pto_types::ring_config::env::EnvSource;
use pto_types::ring_config::resolve::SizingError;
use pto_types::{CallConfig, Resource, RuntimeEnv, TaskArgs};

const N: usize = 16384;

fn chip_4gib(env: &[(&str, &str)]) -> ChipWorker {
    pto_kernels::link();
    let spec = ChipSpec {
        clusters: 2,
        device_memory_bytes: 4 << 30,
        ..ChipSpec::default()
    };
    ChipWorker::new(spec, EnvSource::from_pairs(env.iter().copied())).unwrap()
}

fn run_vector(
    chip: &ChipWorker,
    cfg: &CallConfig,
) -> Result<pto_chip::ChipRunReport, ChipRunError> {
    let (_a, a) = f32_tensor(N, 2.0);
    let (_b, b) = f32_tensor(N, 3.0);
    let (f_buf, f) = f32_tensor(N, 0.0);
    let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
    let report = chip.run("vector_example", &args, cfg, &RunContext::default())?;
    assert!(f_buf.read_f32(0, N).iter().all(|&v| v == 47.0));
    Ok(report)
}

#[test]
fn t56_global_heap_fails_where_per_task_sizing_fits() {
    with_timeout(60, || {
        let chip = chip_4gib(&[("PTO2_RING_HEAP", "1073741824")]);
        let err = run_vector(&chip, &CallConfig::default()).unwrap_err();
        let ChipRunError::Bind(BindError::Sizing(SizingError::DeviceMemoryExhausted {
            need,
            capacity,
            ..
        })) = &err
        else {
            panic!("expected DeviceMemoryExhausted, got {err}");
        };
        assert_eq!((*need, *capacity), (4622124160, 4294967296));
        let text = err.to_string();
        assert!(
            text.contains("PTO2_RING_HEAP") && text.contains("runtime_env.ring_heap"),
            "{text}"
        );
        let per_task = RuntimeEnv::default()
            .with_task_window(128)
            .with_heap(8388608)
            .with_dep_pool(256);
        let report = run_vector(&chip, &CallConfig::with_runtime_env(per_task)).unwrap();
        assert_eq!(report.footprint.arena, 36123776);
        assert_eq!(chip.committed_device_memory(), 36123776);
    });
}

#[test]
fn t57_t58_arena_cache_hits_and_evicts() {
    with_timeout(60, || {
        let chip = chip_4gib(&[]);
        let sized = RuntimeEnv::default()
            .with_task_window(128)
            .with_heap(8388608)
            .with_dep_pool(256);
        let first = run_vector(&chip, &CallConfig::with_runtime_env(sized)).unwrap();
        assert_eq!(first.arena, ArenaOutcome::Miss { evicted: 0 });
        let again = run_vector(&chip, &CallConfig::with_runtime_env(sized)).unwrap();
        assert_eq!(again.arena, ArenaOutcome::Hit);
        let big = RuntimeEnv::default().with_heap(805306368);
        let run1 = run_vector(&chip, &CallConfig::with_runtime_env(big)).unwrap();
        assert_eq!(run1.footprint.arena, 3548382336);
        // The big arena is idle now; the defaults need 1400898688 bytes: it must be evicted.
        let run2 = run_vector(&chip, &CallConfig::default()).unwrap();
        assert_eq!(run2.footprint.arena, 1400898688);
        assert!(
            matches!(run2.arena, ArenaOutcome::Miss { evicted } if evicted >= 1),
            "{:?}",
            run2.arena
        );
    });
}

#[test]
fn advised_sizes_rerun_and_are_smaller_than_the_defaults() {
    with_timeout(60, || {
        let dir = tempfile::tempdir().unwrap();
        let chip = chip_4gib(&[]);
        let cfg = CallConfig {
            enable_scope_stats: true,
            output_prefix: Some(dir.path().to_str().unwrap().to_string()),
            ..CallConfig::default()
        };
        let measured = run_vector(&chip, &cfg).unwrap();
        let text =
            std::fs::read_to_string(dir.path().join("scope_stats/scope_stats.jsonl")).unwrap();
        let stats = ScopeStats::parse(&text).unwrap();
        let advice = advise(&stats, Headroom::DEFAULT);
        let env = advice.runtime_env();
        // The example uses rings 0 and 1; rings without samples get the smallest legal
        // value (issue 11: never 0, which would fall back to the 256 MiB defaults).
        for resource in Resource::ALL {
            let values = env.get(resource);
            for (ring, &v) in values.iter().enumerate().take(2) {
                assert!(
                    v > 0 && v < resource.default_value(),
                    "{resource}[{ring}] = {v}"
                );
            }
            let smallest = resource.legal_at_least(0);
            assert_eq!(&values[2..], &[smallest, smallest]);
        }
        let rerun = run_vector(&chip, &CallConfig::with_runtime_env(env)).unwrap();
        assert!(rerun.footprint.arena < measured.footprint.arena);
        let saved = measured.footprint.arena - rerun.footprint.arena;
        assert!(
            saved > 1000 << 20,
            "advice saves all four rings' 256 MiB heaps: {saved}"
        );
    });
}
