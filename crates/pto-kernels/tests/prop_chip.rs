//! Randomized programs on tiny rings must compute exactly what the same program computes
//! sequentially (issue: "random tags over random overlapping views of a few buffers, random
//! nesting of scopes, random explicit deps", "windows 4–64, heaps just above the largest single
//! task's need, small dep pools", "failing cases shrink").
//!
//! A program is interpreted from a vector of random choices, so proptest shrinks a failing
//! program by shrinking that vector. The interpreter builds the program and, at the same time,
//! the sizing it needs: for every ring the largest span of tasks that cannot retire together
//! (from the oldest task whose scope is open to the newest), its heap bytes and its dependency
//! edges. The chip runs with exactly those minimal rings, so back-pressure happens constantly.
//!
//! Hazards the runtime does not track by design (write-after-read, and write-after-write with
//! OUTPUT_EXISTING) get explicit dependencies, as a user must add them (CHIP_RUNTIME.md §3.8);
//! read-after-write edges are never added by hand, so automatic inference is what is tested.

mod common;

use std::cell::RefCell;
use std::sync::Arc;

use common::with_timeout;
use proptest::prelude::*;
use pto_chip::kernel::block_chunk;
use pto_chip::orch::{OrchArgs, OrchResult, OrchTensor, RootScope};
use pto_chip::{ChipSpec, ChipWorker, Detector, RunContext, TaskId};
use pto_kernels::prop::program::{
    Builder, Choices, Model, Op, Program, ext_args, ext_buffers, ext_mismatch, initial_ext, run_ops,
};
use pto_types::ring_config::env::EnvSource;
use pto_types::{CallConfig, ErrorCode, RING_COUNT, RuntimeEnv, WarCheck};

thread_local! {
    static PROGRAM: RefCell<Option<Arc<Program>>> = const { RefCell::new(None) };
}

fn orchestrate<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let program = PROGRAM
        .with(|p| p.borrow().clone())
        .expect("a program is installed");
    let ext: Vec<OrchTensor<'r>> = (0..4).map(|i| a.tensor(i)).collect();
    let mut ids: Vec<TaskId> = Vec::new();
    let mut created: Vec<Option<OrchTensor<'r>>> = vec![None; program.builder.created_len.len()];
    run_ops(s, &program.ops, &ext, &mut ids, &mut created, None, false)
}

fn chip() -> ChipWorker {
    pto_kernels::link();
    // A short watchdog: a hang fails (and shrinks) in a second rather than ten.
    let spec = ChipSpec {
        clusters: 2,
        scheduler_timeout: Some(std::time::Duration::from_secs(1)),
        ..ChipSpec::default()
    };
    ChipWorker::new(spec, EnvSource::empty()).unwrap()
}

/// Builds, runs and checks one program. Returns an error text on mismatch.
fn check_program(
    chip: &ChipWorker,
    choices: &[u32],
    slack: u32,
    track_war: bool,
) -> Result<(), String> {
    match run_program(chip, choices, track_war, |b| b.sizing(slack))? {
        Outcome::Matched => Ok(()),
        Outcome::Failed(e) => Err(format!("the run failed: {e}")),
    }
}

/// How a run of a generated program ended, when its results were not wrong.
enum Outcome {
    /// Succeeded with exactly the sequential results.
    Matched,
    /// Failed with this error (no result is checked).
    Failed(Box<pto_chip::ChipError>),
}

/// Builds and runs one program with the sizing `size` picks; `Err` on wrong results or a
/// failure that is not a run error. With `track_war` the program leaves write-after-read to
/// the chip (`CallConfig::track_war`); without, its explicit dependencies order every
/// write-after-read, and the strict write-after-read check must find nothing to report.
fn run_program(
    chip: &ChipWorker,
    choices: &[u32],
    track_war: bool,
    size: impl FnOnce(&Builder) -> RuntimeEnv,
) -> Result<Outcome, String> {
    let mut builder = Builder::new();
    builder.track_war = track_war;
    let mut budget = 60;
    let mut c = Choices {
        data: choices,
        pos: 0,
    };
    let ops = builder.ops(&mut c, 0, &mut budget);
    let env = size(&builder);
    let mut model = Model {
        ext: initial_ext(),
        created: Vec::new(),
    };
    model.run(&builder, &ops);
    let buffers = ext_buffers(0);
    let args = ext_args(&buffers, 9);
    let program = Arc::new(Program { builder, ops });
    PROGRAM.with(|p| *p.borrow_mut() = Some(program));
    let cfg = CallConfig {
        track_war,
        war_check: WarCheck::Strict,
        ..CallConfig::with_runtime_env(env)
    };
    let result = chip.run_fn(orchestrate, &args, &cfg, &RunContext::default());
    PROGRAM.with(|p| *p.borrow_mut() = None);
    match result {
        Ok(_) => {}
        Err(pto_chip::ChipRunError::Run(e)) => return Ok(Outcome::Failed(e)),
        Err(e) => return Err(format!("run failed with {env}: {e}")),
    }
    ext_mismatch(&buffers, &model.ext, 0).map_err(|e| format!("{e} (sizing {env})"))?;
    Ok(Outcome::Matched)
}

thread_local! {
    static CHIP: ChipWorker = chip();
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1500,
        max_shrink_iters: 4000,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn random_programs_on_tiny_rings_match_sequential(
        choices in proptest::collection::vec(any::<u32>(), 0..1200),
        slack in 0u32..4,
    ) {
        let result = CHIP.with(|chip| check_program(chip, &choices, slack, false));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 600,
        max_shrink_iters: 4000,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    /// The same programs without their explicit write-after-read dependencies, run with
    /// `track_war`: the chip's reader entries must order every overwrite after the reads
    /// before it, on the same minimal rings (whose dep pools count those edges).
    #[test]
    fn tracked_programs_match_sequential(
        choices in proptest::collection::vec(any::<u32>(), 0..1200),
        slack in 0u32..4,
    ) {
        let result = CHIP.with(|chip| check_program(chip, &choices, slack, true));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// Shrinks some of the minimal sizes: `cuts[i]` halves (1), quarters (2) or keeps (0) entry
/// `i` of the 12 (window, heap, dep pool per ring), staying legal.
fn undersize(mut env: RuntimeEnv, cuts: &[u8]) -> RuntimeEnv {
    for ring in 0..RING_COUNT {
        let cut = |k: usize| u32::from(cuts.get(k).copied().unwrap_or(0));
        env.ring_task_window[ring] = (env.ring_task_window[ring] >> cut(ring * 3)).max(4);
        let heap = env.ring_heap[ring] >> cut(ring * 3 + 1);
        env.ring_heap[ring] = (heap - heap % 64).max(1024);
        env.ring_dep_pool[ring] = (env.ring_dep_pool[ring] >> cut(ring * 3 + 2)).max(4);
    }
    env
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 600,
        max_shrink_iters: 2000,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    /// The issue-4 sweep: undersized rings either still compute exactly the sequential result
    /// or fail with a capacity code that was *proven* (never the backstop), and never hang.
    #[test]
    fn undersized_rings_fail_with_a_proven_capacity_error_or_compute_correctly(
        choices in proptest::collection::vec(any::<u32>(), 0..1200),
        cuts in proptest::collection::vec(prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)], 12),
    ) {
        let outcome = CHIP.with(|chip| run_program(chip, &choices, false, |b| undersize(b.sizing(0), &cuts)));
        match outcome {
            Err(e) => prop_assert!(false, "{}", e),
            Ok(Outcome::Matched) => {}
            Ok(Outcome::Failed(e)) => {
                let capacity = matches!(
                    e.code,
                    ErrorCode::ScopeDeadlock
                        | ErrorCode::HeapRingDeadlock
                        | ErrorCode::FlowControlDeadlock
                        | ErrorCode::DepPoolOverflow
                        | ErrorCode::TensormapOverflow
                );
                prop_assert!(capacity, "not a capacity code: {}", e);
                prop_assert!(
                    matches!(e.detector, Detector::Immediate | Detector::Impossible | Detector::Structural),
                    "a capacity failure must be proven, not found by the backstop: {}", e
                );
                prop_assert!(e.recommended_min.is_some(), "{}", e);
            }
        }
    }
}

#[test]
fn undersized_sweep_sees_both_outcomes() {
    // The sweep above would prove little if every case failed or every case passed.
    let chip = chip();
    let (mut passed, mut failed) = (0, 0);
    let mut rng = 0x2545F4914F6CDD1Du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..60 {
        let choices: Vec<u32> = (0..800).map(|_| next() as u32).collect();
        let cuts: Vec<u8> = (0..12)
            .map(|_| match next() % 8 {
                6 => 1,
                7 => 2,
                _ => 0,
            })
            .collect();
        match run_program(&chip, &choices, false, |b| undersize(b.sizing(0), &cuts)).unwrap() {
            Outcome::Matched => passed += 1,
            Outcome::Failed(_) => failed += 1,
        }
    }
    assert!(
        passed >= 5 && failed >= 5,
        "passed {passed}, failed {failed}"
    );
}

#[test]
fn block_chunks_partition_every_length() {
    for len in 0..40u64 {
        for parts in 1..7u32 {
            let mut seen = 0;
            for p in 0..parts {
                let r = block_chunk(len, p, parts);
                assert_eq!(r.start, seen);
                seen = r.end;
            }
            assert_eq!(seen, len);
        }
    }
}

#[test]
fn a_long_fixed_program_matches_sequential() {
    with_timeout(120, || {
        let chip = chip();
        let choices: Vec<u32> = (0..3000u32)
            .map(|i| i.wrapping_mul(2654435761) ^ (i >> 3))
            .collect();
        check_program(&chip, &choices, 0, false).unwrap();
    });
}

#[test]
fn generated_programs_are_substantial() {
    // Guards the generator itself: programs must be large and exercise deep scopes and tight
    // rings, or the property above proves little.
    let mut rng = 0x9E3779B97F4A7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng as u32
    };
    let (mut tasks, mut deep, mut small_windows) = (0, 0, 0);
    for _ in 0..200 {
        let choices: Vec<u32> = (0..800).map(|_| next()).collect();
        let mut b = Builder::new();
        let mut budget = 60;
        let mut c = Choices {
            data: &choices,
            pos: 0,
        };
        let ops = b.ops(&mut c, 0, &mut budget);
        tasks += b.tasks;
        deep += usize::from(max_depth(&ops) >= 3);
        let env = b.sizing(0);
        small_windows += env.ring_task_window.iter().filter(|&&w| w <= 16).count();
    }
    println!(
        "avg tasks {}, deep programs {deep}/200, small windows {small_windows}/800",
        tasks / 200
    );
    assert!(
        tasks / 200 >= 15,
        "average tasks per program: {}",
        tasks / 200
    );
    assert!(deep >= 20, "programs with depth >= 3: {deep}");
    assert!(small_windows >= 400, "small windows: {small_windows}");
}

fn max_depth(ops: &[Op]) -> usize {
    ops.iter()
        .map(|op| match op {
            Op::Scope(inner) => 1 + max_depth(inner),
            Op::Task(_) => 0,
        })
        .max()
        .unwrap_or(0)
}
