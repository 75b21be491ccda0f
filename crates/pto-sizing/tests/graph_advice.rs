//! A graph-based job sized before it ever runs (issue 26): `advise_graph` turns a recorded
//! graph's needs into a `runtime_env`; a replay fits it, and fails at once (with the ring and
//! the recommended minimum) on rings smaller than the graph needs.

use std::cell::RefCell;

use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_chip::replay::RecordedGraph;
use pto_chip::{ChipRunError, ChipSpec, ChipWorker, RunContext};
use pto_sizing::advise::{Headroom, advise_graph};
use pto_types::ring_config::env::EnvSource;
use pto_types::{CallConfig, DType, ErrorCode, Resource, RuntimeEnv, TaskArgs};

/// 100 tasks at the graph's level, each creating a 4 KiB tensor that the next one reads; then
/// a nested scope of 10 more.
fn graph() -> RecordedGraph {
    RecordedGraph::record("layer", &[], |r, _| {
        let ci = TensorCreateInfo::new(&[1024], DType::F32);
        let mut prev = r.alloc_tensors(&[ci])?.tensor(0);
        for _ in 0..99 {
            prev = r
                .submit_dummy(KernelArgs::new().input(prev).output(ci))?
                .tensor(0);
        }
        r.scope(|r| {
            for _ in 0..10 {
                r.submit_dummy(KernelArgs::new().input(prev))?;
            }
            Ok(())
        })?;
        Ok(vec![])
    })
    .unwrap()
}

thread_local! {
    static GRAPH: RefCell<Option<RecordedGraph>> = const { RefCell::new(None) };
}

fn replay<'r>(s: &mut RootScope<'r>, _: &OrchArgs<'r>) -> OrchResult<()> {
    let g = GRAPH.with(|g| g.borrow().clone()).unwrap();
    s.replay(&g, &[])?;
    s.replay(&g, &[]).map(|_| ())
}

fn run(env: RuntimeEnv) -> Result<(), Box<pto_chip::ChipError>> {
    GRAPH.with(|g| *g.borrow_mut() = Some(graph()));
    let chip = ChipWorker::new(ChipSpec::default(), EnvSource::empty()).unwrap();
    match chip.run_fn(
        replay,
        &TaskArgs::new(),
        &CallConfig::with_runtime_env(env),
        &RunContext::default(),
    ) {
        Ok(_) => Ok(()),
        Err(ChipRunError::Run(e)) => Err(e),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn advice_from_a_graph_sizes_the_job_before_it_runs() {
    let g = graph();
    let needs = g.needs().at_depth(0);
    assert_eq!((needs[0].task_window, needs[1].task_window), (100, 10));
    assert_eq!(needs[0].heap, 100 * 4096);
    // Two replays at the root pin 200 tasks on ring 0; the nested scopes free theirs.
    let two = g.needs_of_replays(0, 2);
    assert_eq!((two[0].task_window, two[1].task_window), (200, 10));
    assert_eq!(two[0].heap, 200 * 4096);
    let advice = advise_graph(&g, 0, 2, Headroom::parse("0%").unwrap());
    let env = advice.runtime_env();
    assert_eq!(
        env.ring_task_window[0], 256,
        "200 live + 1, to a power of two"
    );
    assert_eq!(env.ring_task_window[1], 16);
    assert_eq!(
        env.ring_heap[0],
        200 * 4096 + 4096,
        "pinned bytes plus the largest allocation"
    );
    assert_eq!(
        env.ring_task_window[2],
        Resource::TaskWindow.legal_at_least(0)
    );
    assert!(advice.notes[0].contains("graph \"layer\" replayed 2 time(s)"));
    run(env).unwrap();

    // Half the advised window on ring 0 cannot hold two replays: the second fails at once.
    let e = run(env.with_task_window(128)).unwrap_err();
    assert_eq!(e.code, ErrorCode::ScopeDeadlock, "{e}");
    assert_eq!((e.ring, e.recommended_min), (Some(0), Some(256)));
}
