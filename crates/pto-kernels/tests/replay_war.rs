//! Write-after-read inside a recorded graph (CHIP_RUNTIME.md §3.8, `pto_chip::replay`): a
//! replay meets the same check a submit does, and its report names the graph. A slow plain read of an intermediate and a later
//! overwrite of it inside the graph are reported (`war_check` report), fail the run
//! (strict), are ordered when the read is tracked, and refuse a `track_war` job, whether the
//! replay verifies through inference or takes its edges from the recording.

mod common;

use std::cell::RefCell;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_chip::replay::RecordedGraph;
use pto_chip::{ChipRunError, ChipRunReport, Detector, RunContext};
use pto_kernels::hazard::{COPY_AFTER, FILL_WITH, OVERWRITE};
use pto_types::{CallConfig, DType, ErrorCode, TaskArgs, WarCheck};

const N: u32 = 256;
/// Long enough that the overwrite, ready at once, runs while the reader waits.
const READ_WAIT_US: u64 = 150_000;

/// t = 1.0 (an intermediate); y = t after a slow read (a plain or tracked input); t = OVERWRITE.
/// Returns y.
fn hazard_graph(tracked: bool, verify: bool) -> RecordedGraph {
    RecordedGraph::record("hazard", &[], |r, _| {
        let ci = TensorCreateInfo::new(&[N], DType::F32);
        let t = r
            .submit_aiv(FILL_WITH, KernelArgs::new().output(ci).scalar(1.0f32))?
            .tensor(0);
        let read = if tracked {
            KernelArgs::new().tracked_input(t)
        } else {
            KernelArgs::new().input(t)
        };
        let y = r
            .submit_aiv(COPY_AFTER, read.output(ci).scalar(READ_WAIT_US))?
            .tensor(0);
        r.submit_aiv(
            FILL_WITH,
            KernelArgs::new().output_existing(t).scalar(OVERWRITE),
        )?;
        Ok(vec![y])
    })
    .unwrap()
    .verified(verify)
}

thread_local! {
    static GRAPH: RefCell<Option<RecordedGraph>> = const { RefCell::new(None) };
}

/// Entry (out): replays the installed graph and copies its output into `out`.
fn replay_and_copy<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = GRAPH
        .with(|g| g.borrow().clone())
        .expect("a graph is installed");
    let y = s.replay(&g, &[])?[0];
    let copy = KernelArgs::new().input(y).output_existing(a.tensor(0));
    s.submit_aiv(COPY_AFTER, copy.scalar(0u64))?;
    Ok(())
}

fn run(
    graph: RecordedGraph,
    track_war: bool,
    war_check: WarCheck,
) -> (Result<ChipRunReport, ChipRunError>, Vec<f32>) {
    GRAPH.with(|slot| *slot.borrow_mut() = Some(graph));
    let chip = chip(1, &[]);
    let (out, ot) = f32_tensor(N as usize, -1.0);
    let cfg = CallConfig {
        track_war,
        war_check,
        ..CallConfig::default()
    };
    let result = chip.run_fn(
        replay_and_copy,
        &TaskArgs::new().output(&ot),
        &cfg,
        &RunContext::default(),
    );
    (result, out.read_f32(0, N as usize))
}

#[test]
fn an_untracked_overwrite_inside_a_graph_is_reported_once() {
    with_timeout(60, || {
        for verify in [false, true] {
            let (result, out) = run(hazard_graph(false, verify), false, WarCheck::Report);
            let report = result.expect("report mode does not fail the run");
            assert_eq!(report.warnings.len(), 1, "verify {verify}: {report:?}");
            let w = &report.warnings[0];
            for part in [
                "write-after-read hazard",
                "hazard.fill_with",
                "hazard.copy_after",
                "track_war",
                ", replaying graph \"hazard\"",
            ] {
                assert!(
                    w.contains(part),
                    "verify {verify}: {part:?} missing from {w}"
                );
            }
            assert!(!w.contains("more in this run"), "{w}");
            // The copy may hold either value: the race is the point, and the warning says so.
            assert!(
                out.iter().all(|&v| v == OVERWRITE || v == 1.0),
                "{:?}",
                &out[..4]
            );
        }
    });
}

#[test]
fn strict_fails_a_replay_before_the_overwrite_runs() {
    with_timeout(60, || {
        for verify in [false, true] {
            let (result, out) = run(hazard_graph(false, verify), false, WarCheck::Strict);
            let err = result.expect_err("strict mode fails on the hazard");
            assert_eq!(
                err.code(),
                Some(ErrorCode::WarHazard),
                "verify {verify}: {err}"
            );
            let text = err.to_string();
            assert!(text.contains("hazard.fill_with"), "{text}");
            assert!(
                !out.contains(&OVERWRITE),
                "verify {verify}: {:?}",
                &out[..4]
            );
        }
    });
}

#[test]
fn a_tracked_read_inside_a_graph_orders_the_overwrite() {
    with_timeout(60, || {
        for verify in [false, true] {
            for check in [WarCheck::Strict, WarCheck::Report] {
                let (result, out) = run(hazard_graph(true, verify), false, check);
                let report = result.expect("a tracked read is ordered");
                assert!(report.warnings.is_empty(), "{:?}", report.warnings);
                assert!(out.iter().all(|&v| v == 1.0), "{check:?}: {:?}", &out[..4]);
            }
            // track_war tracks what the recording tracked: nothing is missing.
            let (result, out) = run(hazard_graph(true, verify), true, WarCheck::Strict);
            result.expect("a recording with only tracked reads replays under track_war");
            assert!(out.iter().all(|&v| v == 1.0), "{:?}", &out[..4]);
        }
    });
}

#[test]
fn off_checks_nothing_in_a_replay() {
    with_timeout(60, || {
        for verify in [false, true] {
            let (result, _) = run(hazard_graph(false, verify), false, WarCheck::Off);
            let report = result.expect("no check, no failure");
            assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        }
    });
}

#[test]
fn a_track_war_job_refuses_a_graph_with_untracked_reads() {
    with_timeout(60, || {
        for verify in [false, true] {
            let (result, out) = run(hazard_graph(false, verify), true, WarCheck::Report);
            let Err(ChipRunError::Run(e)) = result else {
                panic!("verify {verify}: expected a run error, got {result:?}");
            };
            assert_eq!(e.code, ErrorCode::InvalidArgs, "{e}");
            assert_eq!(e.detector, Detector::Immediate, "{e}");
            let text = e.to_string();
            for part in [
                "\"hazard\"",
                "task 2 writes what task 1 reads",
                "tracked_input",
            ] {
                assert!(text.contains(part), "{part:?} missing from {text}");
            }
            assert!(
                out.iter().all(|&v| v == -1.0),
                "nothing ran: {:?}",
                &out[..4]
            );
        }
    });
}
