//! Write-after-read edges are dep-pool entries like any other (issue "A chip job never silently
//! overwrites what an earlier task still reads"): scope stats count them, so `pto advise` sizes
//! a dep pool that holds them. (That an undersized pool fails with DEP_POOL_OVERFLOW naming the
//! ring is pto-kernels' `war::reader_edges_take_dep_pool_entries_…`, with kernels that run long
//! enough for the edges to be pending.)

use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope};
use pto_chip::{ChipRunError, ChipSpec, ChipWorker, RunContext};
use pto_sizing::advise::{Headroom, ScopeStats, advise};
use pto_types::ring_config::env::EnvSource;
use pto_types::{BufferId, CallConfig, DType, Resource, TaskArgs, Tensor, WarCheck};

const READERS: u64 = 40;

/// `READERS` reads of x (tracked when scalar 0 is 1), then one overwrite of x: READERS
/// write-after-read edges when tracked, none otherwise.
fn readers_then_overwrite<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (x, tracked): (_, u64) = (a.tensor(0), a.scalar(0));
    for _ in 0..READERS {
        let read = KernelArgs::new();
        let read = if tracked == 1 {
            read.tracked_input(x)
        } else {
            read.input(x)
        };
        s.submit_dummy(read)?;
    }
    s.submit_dummy(KernelArgs::new().output_existing(x))?;
    Ok(())
}

fn run(cfg: &CallConfig, tracked: bool) -> Result<pto_chip::ChipRunReport, ChipRunError> {
    let chip = ChipWorker::new(ChipSpec::default(), EnvSource::empty()).unwrap();
    let mem = pto_chip::memory::HostMemory::new(1024).unwrap();
    let id = BufferId {
        owner_uid: 3,
        buffer_id: 1,
        generation: 0,
    };
    let x = Tensor::contiguous(mem.buffer_ref(id), &[256], DType::F32).unwrap();
    let args = TaskArgs::new().inout(&x).scalar(u64::from(tracked));
    chip.run_fn(readers_then_overwrite, &args, cfg, &RunContext::default())
}

/// The dep-pool advice of ring 0 for one run.
fn dep_pool_advice(tracked: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CallConfig {
        enable_scope_stats: true,
        output_prefix: Some(dir.path().to_string_lossy().into_owned()),
        war_check: WarCheck::Off,
        ..CallConfig::default()
    };
    let report = run(&cfg, tracked).unwrap();
    let stats_file = report
        .diagnostics
        .iter()
        .find(|p| p.ends_with("scope_stats.jsonl"))
        .expect("scope stats were written");
    let stats = ScopeStats::parse(&std::fs::read_to_string(stats_file).unwrap()).unwrap();
    let advice = advise(&stats, Headroom::parse("0").unwrap());
    run(&CallConfig::with_runtime_env(advice.runtime_env()), tracked).expect("the advice fits");
    advice.rings[0].get(Resource::DepPool).recommended
}

#[test]
fn advice_counts_write_after_read_edges() {
    let (tracked, untracked) = (dep_pool_advice(true), dep_pool_advice(false));
    assert!(
        tracked >= READERS,
        "dep pool advice {tracked} < {READERS} edges"
    );
    assert!(
        untracked < READERS,
        "untracked reads leave no edges: {untracked}"
    );
}
