//! Replay == inference over random chip programs (issue 26): a program from the generator of
//! `prop_chip.rs` is recorded as a graph whose inputs are the four external buffers, then
//! replayed several times in one run — at the root, or in nested scopes — with verify mode on
//! (every replayed task's edges are also inferred and compared) or off (the recording alone
//! wires the graph's inside), with the inputs bound at offset 0, as recorded, or at another
//! offset in longer buffers. The buffers must hold exactly what the sequential model computes
//! for the program run that many times.
//!
//! Those replays are ordered by a token the gate and fence of each replay write. The second
//! property has no token: a program that leaves write-after-read to the runtime, its reads
//! tracked and its overwrites INOUT, runs in a `track_war` job, replayed and submitted in a
//! random mix, so only the boundary's TensorMap lookups order one run after another.

mod common;

use std::cell::RefCell;

use common::with_timeout;
use proptest::prelude::*;
use pto_chip::TaskId;
use pto_chip::memory::HostMemory;
use pto_chip::orch::{OrchArgs, OrchResult, OrchTensor, RootScope};
use pto_chip::replay::RecordedGraph;
use pto_chip::{ChipSpec, ChipWorker, RunContext};
use pto_kernels::prop::program::{
    Builder, EXT_SHAPES, Op, build, build_fusable, build_with, expected, ext_args, ext_buffers,
    ext_mismatch, record_program, record_tracked_program, replay_plan, run_ops, seeded_choices,
};
use pto_types::ring_config::env::EnvSource;
use pto_types::{BufferId, CallConfig, DType, RuntimeEnv, TaskArgs, WarCheck};

/// Records the program of `choices` (without MIX tasks when `fusable`); returns it with its
/// builder (for the model).
fn record(choices: &[u32], fusable: bool) -> (Builder, Vec<Op>, RecordedGraph) {
    let (builder, ops) = if fusable {
        build_fusable(choices)
    } else {
        build(choices)
    };
    let graph = record_program("prop", &builder, &ops);
    (builder, ops, graph)
}

thread_local! {
    /// The graph, the replay plan and the offset every external buffer is bound at.
    static GRAPH: RefCell<Option<(RecordedGraph, Vec<bool>, u32)>> = const { RefCell::new(None) };
}

/// Replays the installed graph once per entry of the plan (`true`: in a nested scope), its four
/// external inputs bound to views that start `shift` elements into their buffers (the graph
/// was recorded at offset 0).
fn orchestrate<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (graph, plan, shift) = GRAPH.with(|g| g.borrow().clone()).expect("installed");
    let mut ext: Vec<OrchTensor<'r>> = Vec::new();
    for (i, shape) in EXT_SHAPES.iter().enumerate() {
        let len: u32 = shape.iter().product();
        let view = a
            .tensor(i)
            .slice(0, shift, len)
            .and_then(|t| t.reshape(shape))
            .map_err(|e| s.report_fatal(e.to_string()))?;
        ext.push(view);
    }
    ext.push(a.tensor(4));
    replay_plan(s, &graph, &ext, &plan)
}

fn chip() -> ChipWorker {
    pto_kernels::link();
    let spec = ChipSpec {
        clusters: 2,
        scheduler_timeout: Some(std::time::Duration::from_secs(2)),
        ..ChipSpec::default()
    };
    ChipWorker::new(spec, EnvSource::empty()).unwrap()
}

/// Runs the program of `choices` replayed once per entry of `plan`, in verify mode or not, its
/// inputs bound `shift` elements into buffers that are that much longer, with the
/// write-after-read check strict or off.
fn check(
    chip: &ChipWorker,
    choices: &[u32],
    plan: Vec<bool>,
    (verify, strict): (bool, bool),
    shift: u32,
    fusable: bool,
) -> Result<(), String> {
    let (builder, ops, graph) = record(choices, fusable);
    assert!(
        graph.verifies(),
        "verify mode is the default of debug builds"
    );
    let graph = graph.verified(verify);
    let want = expected(&builder, &ops, plan.len());
    let buffers = ext_buffers(shift as usize);
    let mut args = TaskArgs::new();
    for (i, b) in buffers.iter().enumerate() {
        let id = BufferId {
            owner_uid: 11,
            buffer_id: i as u64,
            generation: 0,
        };
        let len = shift + EXT_SHAPES[i].iter().product::<u32>();
        let t = pto_types::Tensor::contiguous(b.buffer_ref(id), &[len], DType::U32).unwrap();
        args = args.inout(&t);
    }
    let token = HostMemory::new(4).unwrap();
    let token_id = BufferId {
        owner_uid: 11,
        buffer_id: 4,
        generation: 0,
    };
    args = args.inout(
        &pto_types::Tensor::contiguous(token.buffer_ref(token_id), &[1], DType::U32).unwrap(),
    );
    GRAPH.with(|g| *g.borrow_mut() = Some((graph, plan, shift)));
    let env = RuntimeEnv::default()
        .with_task_window(1024)
        .with_heap(4 << 20)
        .with_dep_pool(16384);
    // Strict: every plain read a later write overlaps is ordered by the program's explicit
    // dependencies, so the write-after-read check (fed from the recording's `war_readers`
    // with verify off) must find nothing. Off: a fused replay then looks its boundary up as
    // merged runs (`FusedPlan::boundary`).
    let cfg = CallConfig {
        war_check: if strict {
            WarCheck::Strict
        } else {
            WarCheck::Off
        },
        ..CallConfig::with_runtime_env(env)
    };
    let result = chip.run_fn(orchestrate, &args, &cfg, &RunContext::default());
    GRAPH.with(|g| *g.borrow_mut() = None);
    result.map_err(|e| format!("the run failed: {e}"))?;
    ext_mismatch(&buffers, &want, shift as usize)
}

thread_local! {
    static CHIP: ChipWorker = chip();
}

/// One run of the program in a mixed plan.
#[derive(Clone, Copy, Debug)]
enum Run {
    Replayed,
    ReplayedInScope,
    Submitted,
}

/// The graph, the program it records (with its created-tensor count) and the mixed plan.
type Mixed = (RecordedGraph, Vec<Op>, usize, Vec<Run>);

thread_local! {
    static MIXED: RefCell<Option<Mixed>> = const { RefCell::new(None) };
}

/// Runs the installed program once per entry of the plan over the four external tensors: by
/// replay, or submitted (inference wires it). Nothing but the TensorMap orders the runs.
fn orchestrate_mixed<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (graph, ops, created_len, plan) = MIXED.with(|m| m.borrow().clone()).expect("installed");
    let ext: Vec<OrchTensor<'r>> = (0..4).map(|i| a.tensor(i)).collect();
    for run in plan {
        match run {
            Run::Replayed => s.replay(&graph, &ext).map(|_| ())?,
            Run::ReplayedInScope => s.scope(|s| s.replay(&graph, &ext).map(|_| ()))?,
            Run::Submitted => {
                let mut ids: Vec<TaskId> = Vec::new();
                let mut created = vec![None; created_len];
                run_ops(s, &ops, &ext, &mut ids, &mut created, None, true)?;
            }
        }
    }
    Ok(())
}

/// Runs the track_war program of `choices` once per entry of `plan` in a `track_war` job (the
/// strict write-after-read check on, though with every read tracked it has nothing to look
/// at), the graph exporting the root tensors `exported` names; the buffers must hold what the
/// sequential model computes for that many runs.
fn check_mixed(
    chip: &ChipWorker,
    choices: &[u32],
    plan: Vec<Run>,
    verify: bool,
    exported: u64,
) -> Result<(), String> {
    let (builder, ops) = build_with(choices, true);
    let graph = record_tracked_program("tracked", &builder, &ops, exported).verified(verify);
    let want = expected(&builder, &ops, plan.len());
    let buffers = ext_buffers(0);
    let args = ext_args(&buffers, 12);
    let created_len = builder.created_len.len();
    MIXED.with(|m| *m.borrow_mut() = Some((graph, ops, created_len, plan)));
    let env = RuntimeEnv::default()
        .with_task_window(1024)
        .with_heap(4 << 20)
        .with_dep_pool(16384);
    let cfg = CallConfig {
        track_war: true,
        war_check: WarCheck::Strict,
        ..CallConfig::with_runtime_env(env)
    };
    let result = chip.run_fn(orchestrate_mixed, &args, &cfg, &RunContext::default());
    MIXED.with(|m| *m.borrow_mut() = None);
    result.map_err(|e| format!("the run failed: {e}"))?;
    ext_mismatch(&buffers, &want, 0)
}

fn run_kind() -> impl Strategy<Value = Run> {
    prop_oneof![
        Just(Run::Replayed),
        Just(Run::ReplayedInScope),
        Just(Run::Submitted)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        max_shrink_iters: 2000,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn replays_mixed_with_submitted_runs_order_through_the_boundary_alone(
        choices in proptest::collection::vec(any::<u32>(), 0..1200),
        plan in proptest::collection::vec(run_kind(), 2..5),
        verify in any::<bool>(),
        exported in any::<u64>(),
    ) {
        let result = CHIP.with(|chip| check_mixed(chip, &choices, plan, verify, exported));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        max_shrink_iters: 2000,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn replayed_random_programs_match_sequential(
        choices in proptest::collection::vec(any::<u32>(), 0..1200),
        plan in proptest::collection::vec(any::<bool>(), 2..4),
        verify in any::<bool>(),
        shift in prop_oneof![Just(0u32), 1u32..12],
    ) {
        let result = CHIP.with(|chip| check(chip, &choices, plan, (verify, true), shift, false));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    /// Programs without MIX tasks, replayed with verify off: each replay runs as one task
    /// whose blocks run the graph's tasks in the recording's order (when its write-after-read
    /// pairs are ordered, which the programs' explicit dependencies see to), and must compute
    /// what the sequential model does.
    #[test]
    fn fused_replays_of_random_programs_match_sequential(
        choices in proptest::collection::vec(any::<u32>(), 0..1200),
        plan in proptest::collection::vec(any::<bool>(), 2..4),
        shift in prop_oneof![Just(0u32), 1u32..12],
        strict in any::<bool>(),
    ) {
        let result = CHIP.with(|chip| check(chip, &choices, plan, (false, strict), shift, true));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

#[test]
fn a_long_fixed_program_replays_to_sequential() {
    with_timeout(120, || {
        let chip = chip();
        let choices: Vec<u32> = (0..3000u32)
            .map(|i| i.wrapping_mul(2654435761) ^ (i >> 3))
            .collect();
        for (verify, shift) in [(true, 0), (false, 0), (true, 5), (false, 3)] {
            check(
                &chip,
                &choices,
                vec![false, true, false, true],
                (verify, true),
                shift,
                false,
            )
            .unwrap();
        }
    });
}

#[test]
fn programs_without_mix_tasks_record_graphs_that_run_fused() {
    // Guards the fused property: nearly all of its graphs must run as one task (a program
    // that runs no kernel at all does not).
    let fusable = (0..100)
        .filter(|seed| {
            record(&seeded_choices(0x5EED + seed, 800), true)
                .2
                .fusable()
        })
        .count();
    assert!(fusable >= 90, "{fusable} of 100");
    let with_mix = (0..100)
        .filter(|seed| {
            record(&seeded_choices(0x5EED + seed, 800), false)
                .2
                .fusable()
        })
        .count();
    assert!(with_mix < fusable, "{with_mix} of 100 with MIX tasks");
}

#[test]
fn recorded_programs_have_internal_edges_and_a_boundary() {
    // Guards the property: graphs must carry edges between their tasks (not only boundary
    // lookups) and outputs, or replay == inference proves little.
    let (mut edges, mut outputs, mut tasks) = (0, 0, 0);
    for seed in 0..100 {
        let (_, _, graph) = record(&seeded_choices(0x9E37_79B9 + seed, 800), false);
        edges += graph.edges().count();
        outputs += graph.num_outputs();
        tasks += graph.num_tasks();
    }
    assert!(
        tasks >= 1500 && edges >= tasks,
        "tasks {tasks}, edges {edges}"
    );
    assert!(outputs >= 100, "outputs {outputs}");
}
