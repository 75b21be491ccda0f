//! Write-after-read inside a chip job (CHIP_RUNTIME.md §3.8): a slow reader and a later
//! overwrite of the same bytes. Untracked, the overwrite runs while the read is under way (a
//! wrong result) and the check reports it; tracked (`track_war`, or a `tracked_input` read),
//! the overwrite waits; strict, the run fails with WAR_HAZARD.

mod common;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_chip::{ChipRunError, ChipRunReport, RunContext};
use pto_kernels::hazard::{COPY_AFTER, FILL_WITH, OVERWRITE};
use pto_types::{CallConfig, DType, ErrorCode, RuntimeEnv, TaskArgs, WarCheck};

const N: usize = 256;
/// Long enough that the overwrite, ready at once, runs while the reader waits.
const READ_WAIT_US: u64 = 150_000;

/// Whether two kernels can run at the same time here: the wrong result needs a second
/// executor (chips never start more executors than the host has CPUs).
fn parallel_host() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
}

/// Runs `war_hazard` (x = 1.0, y = 0.0) and returns the outcome with y.
fn run_hazard(cfg: &CallConfig, tracked: bool) -> (Result<ChipRunReport, ChipRunError>, Vec<f32>) {
    let chip = chip(1, &[]);
    let (_x, xt) = f32_tensor(N, 1.0);
    let (y, yt) = f32_tensor(N, 0.0);
    let args = TaskArgs::new()
        .input(&xt)
        .output(&yt)
        .scalar(READ_WAIT_US)
        .scalar(u64::from(tracked));
    let result = chip.run("war_hazard", &args, cfg, &RunContext::default());
    (result, y.read_f32(0, N))
}

fn config(track_war: bool, war_check: WarCheck) -> CallConfig {
    CallConfig {
        track_war,
        war_check,
        ..CallConfig::default()
    }
}

#[test]
fn an_untracked_overwrite_races_the_read_and_is_reported_once() {
    with_timeout(60, || {
        let (result, y) = run_hazard(&config(false, WarCheck::Report), false);
        let report = result.expect("report mode does not fail the run");
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        let w = &report.warnings[0];
        for part in [
            "write-after-read hazard",
            "hazard.fill_with",
            "hazard.copy_after",
            "output_existing",
            "track_war",
            "TrackedInput",
        ] {
            assert!(w.contains(part), "{part:?} missing from {w:?}");
        }
        assert!(!w.contains("more in this run"), "{w}");
        if parallel_host() {
            assert!(
                y.iter().all(|&v| v == OVERWRITE),
                "the reader copied what the overwrite wrote: {:?}",
                &y[..4]
            );
        }
    });
}

/// Entry (x, y): a slow plain read of x into y, then one task writing both halves of x
/// through two arguments: one reader, overlapped twice, is one hazard.
fn halves_overwritten<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (x, y) = (a.tensor(0), a.tensor(1));
    let read = KernelArgs::new().input(x).output_existing(y);
    s.submit_aiv(COPY_AFTER, read.scalar(READ_WAIT_US))?;
    let half = N as u32 / 2;
    let (lo, hi) = match (x.slice(0, 0, half), x.slice(0, half, half)) {
        (Ok(lo), Ok(hi)) => (lo, hi),
        (Err(e), _) | (_, Err(e)) => return Err(s.report_fatal(e.to_string())),
    };
    let overwrite = KernelArgs::new().output_existing(lo).output_existing(hi);
    s.submit_aiv(FILL_WITH, overwrite.scalar(OVERWRITE))?;
    Ok(())
}

#[test]
fn a_reader_overlapped_by_two_written_arguments_is_one_hazard() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let (_x, xt) = f32_tensor(N, 1.0);
        let (_y, yt) = f32_tensor(N, 0.0);
        let args = TaskArgs::new().input(&xt).output(&yt);
        let cfg = config(false, WarCheck::Report);
        let report = chip
            .run_fn(halves_overwritten, &args, &cfg, &RunContext::default())
            .expect("report mode does not fail the run");
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        let w = &report.warnings[0];
        assert!(w.contains("write-after-read hazard"), "{w}");
        assert!(!w.contains("more in this run"), "{w}");
    });
}

#[test]
fn track_war_makes_the_overwrite_wait_for_the_read() {
    with_timeout(60, || {
        for check in [WarCheck::Report, WarCheck::Strict, WarCheck::Off] {
            let (result, y) = run_hazard(&config(true, check), false);
            let report = result.expect("an ordered overwrite is no hazard");
            assert!(report.warnings.is_empty(), "{:?}", report.warnings);
            assert!(y.iter().all(|&v| v == 1.0), "{check:?}: {:?}", &y[..4]);
        }
    });
}

#[test]
fn a_tracked_input_is_ordered_without_track_war() {
    with_timeout(60, || {
        let (result, y) = run_hazard(&config(false, WarCheck::Strict), true);
        let report = result.expect("a tracked read is ordered");
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        assert!(y.iter().all(|&v| v == 1.0), "{:?}", &y[..4]);
    });
}

#[test]
fn strict_fails_the_run_before_the_overwrite_runs() {
    with_timeout(60, || {
        let (result, y) = run_hazard(&config(false, WarCheck::Strict), false);
        let err = result.expect_err("strict mode fails on the hazard");
        assert_eq!(err.code(), Some(ErrorCode::WarHazard), "{err}");
        let text = err.to_string();
        assert!(text.contains("WAR_HAZARD (13)"), "{text}");
        assert!(text.contains("hazard.fill_with") && text.contains("hazard.copy_after"));
        // The overwrite never ran: whatever the reader copied is the old value.
        assert!(y.iter().all(|&v| v == 1.0 || v == 0.0), "{:?}", &y[..4]);
        assert!(!y.contains(&OVERWRITE));
    });
}

#[test]
fn off_checks_nothing_and_auto_reports_in_debug_builds() {
    with_timeout(60, || {
        let (result, _) = run_hazard(&config(false, WarCheck::Off), false);
        assert!(result.unwrap().warnings.is_empty());
        let (result, _) = run_hazard(&CallConfig::default(), false);
        let warnings = result.unwrap().warnings;
        assert_eq!(
            warnings.len(),
            usize::from(cfg!(debug_assertions)),
            "{warnings:?}"
        );
    });
}

/// Entry (x, y, z, w): a slow read of x into y, a copy of y into z (after it), then an
/// overwrite of x that reads z: ordered after the read through the chain of its producers.
fn ordered_through_a_chain<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (x, y, z, w) = (a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3));
    let slow = KernelArgs::new().input(x).output_existing(y);
    s.submit_aiv(COPY_AFTER, slow.scalar(50_000u64))?;
    let copy = KernelArgs::new().input(y).output_existing(z);
    s.submit_aiv(COPY_AFTER, copy.scalar(0u64))?;
    // Reads z (so waits for the copy, which waits for the slow read), writes x and w.
    let last = KernelArgs::new().input(z).output_existing(w).scalar(0u64);
    let t = s.submit_aiv(COPY_AFTER, last)?.task_id();
    let overwrite = KernelArgs::new().output_existing(x).scalar(OVERWRITE);
    s.submit_aiv(FILL_WITH, overwrite.dep_wait(t))?;
    // A task that reads x after the overwrite, into a fresh buffer: a read, not a hazard.
    let ci = TensorCreateInfo::new(&[N as u32], DType::F32);
    s.submit_aiv(
        COPY_AFTER,
        KernelArgs::new().input(x).output(ci).scalar(0u64),
    )?;
    Ok(())
}

#[test]
fn an_overwrite_ordered_after_the_read_by_other_edges_is_not_reported() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let (_x, xt) = f32_tensor(N, 1.0);
        let (_y, yt) = f32_tensor(N, 0.0);
        let (_z, zt) = f32_tensor(N, 0.0);
        let (w, wt) = f32_tensor(N, 0.0);
        let args = TaskArgs::new()
            .input(&xt)
            .output(&yt)
            .output(&zt)
            .output(&wt);
        let cfg = config(false, WarCheck::Strict);
        let report = chip
            .run_fn(ordered_through_a_chain, &args, &cfg, &RunContext::default())
            .expect("the overwrite is ordered after the read");
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        assert!(w.read_f32(0, N).iter().all(|&v| v == 1.0));
    });
}

/// Entry (x, sink): `scalar(0)` slow tracked reads of x (each into a fresh buffer), then one
/// overwrite of x, which waits for every one of them.
fn many_readers<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (x, readers): (_, u64) = (a.tensor(0), a.scalar(0));
    let ci = TensorCreateInfo::new(&[N as u32], DType::F32);
    for _ in 0..readers {
        let read = KernelArgs::new()
            .tracked_input(x)
            .output(ci)
            .scalar(20_000u64);
        s.submit_aiv(COPY_AFTER, read)?;
    }
    s.submit_aiv(
        FILL_WITH,
        KernelArgs::new()
            .output_existing(a.tensor(1))
            .scalar(1.0f32),
    )?;
    s.submit_aiv(
        FILL_WITH,
        KernelArgs::new().output_existing(x).scalar(OVERWRITE),
    )?;
    Ok(())
}

#[test]
fn reader_edges_take_dep_pool_entries_and_an_undersized_pool_says_so() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let (_x, xt) = f32_tensor(N, 1.0);
        let (_s, st) = f32_tensor(N, 0.0);
        let args = TaskArgs::new().input(&xt).output(&st).scalar(40u64);
        // Enough room: the overwrite's 40 write-after-read edges show in the dep-pool peak.
        let report = chip
            .run_fn(
                many_readers,
                &args,
                &CallConfig::default(),
                &RunContext::default(),
            )
            .unwrap();
        assert!(
            report.usage[0].dep_pool_peak >= 40,
            "dep pool peak {}",
            report.usage[0].dep_pool_peak
        );
        // A dep pool of 16 cannot hold them: the error names the ring and the minimum.
        let small = CallConfig::with_runtime_env(RuntimeEnv::default().with_dep_pool(16));
        let err = chip
            .run_fn(many_readers, &args, &small, &RunContext::default())
            .expect_err("40 edges do not fit a dep pool of 16");
        assert_eq!(err.code(), Some(ErrorCode::DepPoolOverflow), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("ring 0") || text.contains("ring_dep_pool[0]"),
            "{text}"
        );
    });
}

/// Entry (t): in one scope, 65 one-element reads of t, tracked when scalar 0 is 1.
fn many_reads<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let (t, tracked): (_, u64) = (a.tensor(0), a.scalar(0));
    s.scope(|s| {
        for i in 0..65 {
            let view = t.view(&[1], &[i]).expect("in bounds");
            let read = KernelArgs::new();
            let read = if tracked == 1 {
                read.tracked_input(view)
            } else {
                read.input(view)
            };
            s.submit_dummy(read)?;
        }
        Ok(())
    })
}

#[test]
fn reader_entries_take_tensormap_entries() {
    with_timeout(60, || {
        pto_kernels::link();
        let spec = pto_chip::ChipSpec {
            clusters: 1,
            tensormap_pool: Some(64),
            ..pto_chip::ChipSpec::default()
        };
        let chip = pto_chip::ChipWorker::new(spec, pto_types::EnvSource::empty()).unwrap();
        let (_buf, t) = f32_tensor(65, 0.0);
        let run = |tracked: u64, check: WarCheck| {
            let args = TaskArgs::new().inout(&t).scalar(tracked);
            chip.run_fn(
                many_reads,
                &args,
                &config(false, check),
                &RunContext::default(),
            )
        };
        // Untracked and unchecked reads leave no entry: 65 of them fit a pool of 64.
        let report = run(0, WarCheck::Off).expect("plain reads take no TensorMap entry");
        assert!(report.warnings.is_empty());
        // Tracked reads need their entries: the pool is too small.
        let err = run(1, WarCheck::Off).expect_err("65 reader entries do not fit 64");
        assert_eq!(err.code(), Some(ErrorCode::TensormapOverflow), "{err}");
        assert!(err.to_string().contains("tensormap_pool"), "{err}");
        // The check's entries are a diagnostic: they take free room only, never fail a run,
        // and the report says what the check could not watch.
        let report = run(0, WarCheck::Strict).expect("the check never fails a run for room");
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        assert!(
            report.warnings[0].contains("did not watch 1 read(s)"),
            "{:?}",
            report.warnings
        );
    });
}
