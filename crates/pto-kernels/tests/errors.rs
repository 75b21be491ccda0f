//! Every failure is reported, never hangs, and leaves the chip usable (CHIP_RUNTIME.md §5.4
//! reproducers, rows E1–E4, E8–E11; RING_CONFIG.md T62, T63).

mod common;

use std::time::Duration;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::kernel::{CoreType, KernelCtx};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_chip::{ChipError, ChipRunError, ChipSpec, ChipWorker, Detector, RunContext, TaskId};
use pto_types::ring_config::env::EnvSource;
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{CallConfig, DType, ErrorCode, RuntimeEnv, TaskArgs};

const N: usize = 16384;

/// Runs `orch` with `env` and returns its chip error.
fn fails(
    chip: &ChipWorker,
    orch: pto_chip::orch::OrchFn,
    args: &TaskArgs,
    env: RuntimeEnv,
) -> ChipError {
    match chip.run_fn(
        orch,
        args,
        &CallConfig::with_runtime_env(env),
        &RunContext::default(),
    ) {
        Err(ChipRunError::Run(e)) => *e,
        Err(other) => panic!("expected a run error, got {other}"),
        Ok(_) => panic!("expected the run to fail"),
    }
}

/// The vector example on the same chip: 47 everywhere.
fn still_works(chip: &ChipWorker) {
    let (_a, a) = f32_tensor(N, 2.0);
    let (_b, b) = f32_tensor(N, 3.0);
    let (f_buf, f) = f32_tensor(N, 0.0);
    let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
    chip.run(
        "vector_example",
        &args,
        &CallConfig::default(),
        &RunContext::default(),
    )
    .expect("a normal job runs after the failure");
    assert!(f_buf.read_f32(0, N).iter().all(|&v| v == 47.0));
}

#[track_caller]
fn check(
    e: &ChipError,
    code: ErrorCode,
    detector: Detector,
    ring: Option<usize>,
    recommended: Option<u64>,
) {
    assert_eq!(e.code, code, "{e}");
    assert_eq!(e.detector, detector, "{e}");
    assert_eq!(e.ring, ring, "{e}");
    if recommended.is_some() {
        assert_eq!(e.recommended_min, recommended, "{e}");
    }
    let text = e.to_string();
    assert!(
        text.contains(&format!("{} ({})", code.name(), code.code())),
        "{text}"
    );
}

fn eight_dummies_in_a_scope<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        for _ in 0..8 {
            s.submit_dummy(KernelArgs::new().output(TensorCreateInfo::new(&[1], DType::I32)))?;
        }
        Ok(())
    })
}

#[test]
fn code1_scope_deadlock_on_the_fourth_submit() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let e = fails(
            &chip,
            eight_dummies_in_a_scope,
            &TaskArgs::new(),
            RuntimeEnv::default().with_task_window(4),
        );
        check(
            &e,
            ErrorCode::ScopeDeadlock,
            Detector::Immediate,
            Some(1),
            Some(8),
        );
        assert_eq!(e.task, None);
        assert_eq!(e.used, Some(3));
        let hint = e.hint();
        assert!(
            hint.contains("runtime_env.ring_task_window[1]") && hint.contains("call_config"),
            "{hint}"
        );
        still_works(&chip);
    });
}

fn eight_top_level_dummies<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    for _ in 0..8 {
        s.submit_dummy(KernelArgs::new())?;
    }
    Ok(())
}

#[test]
fn t63_root_scope_uses_ring_0() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let e = fails(
            &chip,
            eight_top_level_dummies,
            &TaskArgs::new(),
            RuntimeEnv::default().with_task_window(4),
        );
        check(
            &e,
            ErrorCode::ScopeDeadlock,
            Detector::Immediate,
            Some(0),
            Some(8),
        );
        let hint = e.hint();
        assert!(
            hint.contains("ring_task_window[0]") && hint.contains("call_config"),
            "{hint}"
        );
        still_works(&chip);
    });
}

fn big_output_at_top<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_dummy(KernelArgs::new().output(TensorCreateInfo::new(&[8192], DType::I32)))?;
    Ok(())
}

#[test]
fn code2_t62_request_larger_than_the_heap_is_impossible() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let started = std::time::Instant::now();
        let e = fails(
            &chip,
            big_output_at_top,
            &TaskArgs::new(),
            RuntimeEnv::default().with_heap(1024),
        );
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "no backstop wait"
        );
        check(
            &e,
            ErrorCode::HeapRingDeadlock,
            Detector::Impossible,
            Some(0),
            Some(32768),
        );
        assert_eq!(e.capacity.map(|c| c.source), Some(SizeSource::CallConfig));
        let hint = e.hint();
        assert!(
            hint.contains("runtime_env.ring_heap[0]") && hint.contains("call_config"),
            "{hint}"
        );
        assert!(e.to_string().contains("bytes") && !e.to_string().contains("power of 2"));
        // E8: the knob names both the field and the variable.
        assert_eq!(
            e.knob(),
            Some(("runtime_env.ring_heap[0]".to_string(), "PTO2_RING_HEAP"))
        );
        still_works(&chip);
    });
}

#[test]
fn heap_from_env_names_the_variable_in_the_hint() {
    with_timeout(60, || {
        let chip = chip(1, &[("PTO2_RING_HEAP", "1024")]);
        let e = fails(
            &chip,
            big_output_at_top,
            &TaskArgs::new(),
            RuntimeEnv::default(),
        );
        assert_eq!(e.capacity.map(|c| c.source), Some(SizeSource::Env));
        let hint = e.hint();
        assert!(
            hint.contains("PTO2_RING_HEAP") && hint.contains("runtime_env.ring_heap[0]"),
            "{hint}"
        );
        let other = common::chip(1, &[]);
        let e = fails(
            &other,
            big_output_at_top,
            &TaskArgs::new(),
            RuntimeEnv::default().with_heap([1024, 0, 0, 0]),
        );
        assert!(
            !e.hint().contains("PTO2_RING_HEAP"),
            "call_config hints name only the field"
        );
    });
}

fn nested_three_each<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    fn level<'s, 'p>(s: &mut pto_chip::orch::Scope<'s, 'p>, remaining: u32) -> OrchResult<()> {
        if remaining == 0 {
            return Ok(());
        }
        s.scope(|s| {
            for _ in 0..3 {
                s.submit_dummy(KernelArgs::new())?;
            }
            level(s, remaining - 1)
        })
    }
    level(s, 8)
}

#[test]
fn code3_nested_scopes_fill_ring_3() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let e = fails(
            &chip,
            nested_three_each,
            &TaskArgs::new(),
            RuntimeEnv::default().with_task_window(4),
        );
        check(
            &e,
            ErrorCode::FlowControlDeadlock,
            Detector::Structural,
            Some(3),
            Some(8),
        );
        assert_eq!(e.head, Some(TaskId::new(3, 0)));
        still_works(&chip);
    });
}

fn fan_in_128<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        let mut ids = Vec::new();
        for _ in 0..128 {
            ids.push(s.submit_dummy(KernelArgs::new())?.task_id());
        }
        let mut args = KernelArgs::new();
        for id in ids {
            args = args.dep(id);
        }
        s.submit_dummy(args)?;
        Ok(())
    })
}

#[test]
fn code4_spill_larger_than_the_pool_is_impossible() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let e = fails(
            &chip,
            fan_in_128,
            &TaskArgs::new(),
            RuntimeEnv::default().with_dep_pool(4),
        );
        check(
            &e,
            ErrorCode::DepPoolOverflow,
            Detector::Impossible,
            Some(1),
            Some(64),
        );
        assert_eq!(e.resource, Some(pto_chip::ResourceKind::FaninSpill));
        still_works(&chip);
    });
}

fn invalid_dep<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_dummy(KernelArgs::new().dep(TaskId::INVALID))?;
    Ok(())
}

fn too_many_tensors<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let t = a.tensor(0);
    let mut args = KernelArgs::new();
    for _ in 0..33 {
        args = args.input(t);
    }
    s.submit_dummy(args)?;
    Ok(())
}

fn empty_alloc<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.alloc_tensors(&[])?;
    Ok(())
}

#[test]
fn code5_invalid_args_are_immediate() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let (_buf, t) = f32_tensor(4, 0.0);
        let args = TaskArgs::new().input(&t);
        for orch in [
            invalid_dep as pto_chip::orch::OrchFn,
            too_many_tensors,
            empty_alloc,
        ] {
            let e = fails(&chip, orch, &args, RuntimeEnv::default());
            check(&e, ErrorCode::InvalidArgs, Detector::Immediate, None, None);
        }
        still_works(&chip);
    });
}

fn noop(_ctx: &mut KernelCtx<'_>) {}
pto_chip::register_kernel!(NOOP_AIC = "test.noop_aic", CoreType::Aic, noop);
pto_chip::register_kernel!(NOOP_AIV = "test.noop_aiv", CoreType::Aiv, noop);

fn sync_1000<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_aiv(
        NOOP_AIV,
        KernelArgs::new().block_num(1000).require_sync_start(true),
    )?;
    Ok(())
}

fn sync_aiv_16<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_aiv(
        NOOP_AIV,
        KernelArgs::new().block_num(16).require_sync_start(true),
    )?;
    Ok(())
}

fn sync_aiv_17<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_aiv(
        NOOP_AIV,
        KernelArgs::new().block_num(17).require_sync_start(true),
    )?;
    Ok(())
}

fn sync_mix_9<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    let mix = pto_chip::orch::MixedKernels {
        aic: Some(NOOP_AIC),
        aiv0: Some(NOOP_AIV),
        aiv1: None,
    };
    s.submit_mix(mix, KernelArgs::new().block_num(9).require_sync_start(true))?;
    Ok(())
}

#[test]
fn code7_e10_sync_start_limits() {
    with_timeout(60, || {
        let chip = chip(8, &[]);
        let e = fails(&chip, sync_1000, &TaskArgs::new(), RuntimeEnv::default());
        check(
            &e,
            ErrorCode::RequireSyncStartInvalid,
            Detector::Immediate,
            None,
            None,
        );
        assert_eq!(e.used, Some(16), "the limit is 2C = 16");
        chip.run_fn(
            sync_aiv_16,
            &TaskArgs::new(),
            &CallConfig::default(),
            &RunContext::default(),
        )
        .expect("16 AIV blocks fit 8 clusters");
        for orch in [sync_aiv_17 as pto_chip::orch::OrchFn, sync_mix_9] {
            let e = fails(&chip, orch, &TaskArgs::new(), RuntimeEnv::default());
            check(
                &e,
                ErrorCode::RequireSyncStartInvalid,
                Detector::Immediate,
                None,
                None,
            );
        }
        still_works(&chip);
    });
}

fn fatal_then_more<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    let _ = s.report_fatal("x");
    assert!(
        s.alloc_tensors(&[TensorCreateInfo::new(&[4], DType::F32)])
            .is_err()
    );
    assert!(s.scope(|_| Ok(())).is_err());
    assert!(s.submit_dummy(KernelArgs::new()).is_err());
    Ok(())
}

#[test]
fn code9_report_fatal_stops_everything_after_it() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let e = fails(
            &chip,
            fatal_then_more,
            &TaskArgs::new(),
            RuntimeEnv::default(),
        );
        check(
            &e,
            ErrorCode::ExplicitOrchFatal,
            Detector::Immediate,
            None,
            None,
        );
        assert_eq!(e.detail, "x");
        still_works(&chip);
    });
}

fn many_writers<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let t = a.tensor(0);
    s.scope(|s| {
        for i in 0..65 {
            let view = t.view(&[1], &[i]).expect("in bounds");
            s.submit_dummy(KernelArgs::new().inout(view))?;
        }
        Ok(())
    })
}

#[test]
fn code11_tensormap_overflow_is_structural() {
    with_timeout(60, || {
        pto_kernels::link();
        let spec = ChipSpec {
            clusters: 1,
            tensormap_pool: Some(64),
            ..ChipSpec::default()
        };
        let chip = ChipWorker::new(spec, EnvSource::empty()).unwrap();
        let (_buf, t) = f32_tensor(65, 0.0);
        let e = fails(
            &chip,
            many_writers,
            &TaskArgs::new().inout(&t),
            RuntimeEnv::default(),
        );
        check(
            &e,
            ErrorCode::TensormapOverflow,
            Detector::Structural,
            Some(1),
            Some(65),
        );
        assert!(e.hint().contains("tensormap_pool"), "{}", e.hint());
        still_works(&chip);
    });
}

fn panicking_orch<'r>(_s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    panic!("orchestration went wrong");
}

#[test]
fn code12_orchestration_panic() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let e = fails(
            &chip,
            panicking_orch,
            &TaskArgs::new(),
            RuntimeEnv::default(),
        );
        check(&e, ErrorCode::OrchPanic, Detector::Immediate, None, None);
        assert!(
            e.detail.contains("orchestration went wrong"),
            "{}",
            e.detail
        );
        still_works(&chip);
    });
}

fn spin_until_cancelled(ctx: &mut KernelCtx<'_>) {
    while !ctx.cancelled() {
        std::thread::sleep(Duration::from_millis(1));
    }
}
pto_chip::register_kernel!(
    SPIN_AIC = "test.spin_until_cancelled",
    CoreType::Aic,
    spin_until_cancelled
);

fn one_stuck_kernel<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_aic(SPIN_AIC, KernelArgs::new())?;
    Ok(())
}

#[test]
fn code100_watchdog_names_the_running_task_and_the_chip_recovers() {
    with_timeout(60, || {
        pto_kernels::link();
        let spec = ChipSpec {
            clusters: 2,
            scheduler_timeout: Some(Duration::from_millis(300)),
            ..ChipSpec::default()
        };
        let chip = ChipWorker::new(spec, EnvSource::empty()).unwrap();
        let e = fails(
            &chip,
            one_stuck_kernel,
            &TaskArgs::new(),
            RuntimeEnv::default(),
        );
        check(
            &e,
            ErrorCode::SchedulerTimeout,
            Detector::Timeout,
            None,
            None,
        );
        assert!(e.detail.contains("S1 running-stalled"), "{}", e.detail);
        assert!(
            e.detail.contains("r0:0") && e.detail.contains("test.spin_until_cancelled"),
            "{}",
            e.detail
        );
        still_works(&chip);
    });
}

fn boom(ctx: &mut KernelCtx<'_>) {
    if ctx.block_idx() == 1 {
        panic!("boom");
    }
}
pto_chip::register_kernel!(BOOM = "test.boom", CoreType::Aiv, boom);

fn panicking_kernel<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_aiv(BOOM, KernelArgs::new().block_num(2))?;
    Ok(())
}

#[test]
fn code110_e9_kernel_panic_then_the_chip_runs_normally() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let e = fails(
            &chip,
            panicking_kernel,
            &TaskArgs::new(),
            RuntimeEnv::default(),
        );
        check(&e, ErrorCode::KernelPanic, Detector::Immediate, None, None);
        for part in ["boom", "test.boom", "r0:0", "block 1", "core"] {
            assert!(e.detail.contains(part), "{} lacks {part}", e.detail);
        }
        still_works(&chip);
    });
}

#[test]
fn e1_vector_example_window_4_on_ring_1_then_8() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let (_a, a) = f32_tensor(N, 2.0);
        let (_b, b) = f32_tensor(N, 3.0);
        let (f_buf, f) = f32_tensor(N, 0.0);
        let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
        let cfg = |w: u64| {
            CallConfig::with_runtime_env(
                RuntimeEnv::default().with_task_window([16384, w, 16384, 16384]),
            )
        };
        let e = match chip.run("vector_example", &args, &cfg(4), &RunContext::default()) {
            Err(ChipRunError::Run(e)) => *e,
            other => panic!("expected SCOPE_DEADLOCK, got {other:?}"),
        };
        check(
            &e,
            ErrorCode::ScopeDeadlock,
            Detector::Immediate,
            Some(1),
            Some(8),
        );
        chip.run("vector_example", &args, &cfg(8), &RunContext::default())
            .unwrap();
        assert!(f_buf.read_f32(0, N).iter().all(|&v| v == 47.0));
    });
}

#[test]
fn e2_vector_example_heap_too_small_on_ring_1_then_enough() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let (_a, a) = f32_tensor(N, 2.0);
        let (_b, b) = f32_tensor(N, 3.0);
        let (f_buf, f) = f32_tensor(N, 0.0);
        let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
        let cfg = |h: u64| {
            CallConfig::with_runtime_env(RuntimeEnv::default().with_heap([
                1 << 20,
                h,
                1 << 20,
                1 << 20,
            ]))
        };
        let e = match chip.run(
            "vector_example",
            &args,
            &cfg(131072),
            &RunContext::default(),
        ) {
            Err(ChipRunError::Run(e)) => *e,
            other => panic!("expected HEAP_RING_DEADLOCK, got {other:?}"),
        };
        check(
            &e,
            ErrorCode::HeapRingDeadlock,
            Detector::Structural,
            Some(1),
            Some(196608),
        );
        chip.run(
            "vector_example",
            &args,
            &cfg(196608),
            &RunContext::default(),
        )
        .unwrap();
        assert!(f_buf.read_f32(0, N).iter().all(|&v| v == 47.0));
    });
}

fn e3_program<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        s.submit_dummy(KernelArgs::new().output(TensorCreateInfo::new(&[1024], DType::F32)))?;
        Ok(())
    })?;
    s.scope(|s| {
        for elems in [1u32, 512, 1] {
            s.submit_dummy(KernelArgs::new().output(TensorCreateInfo::new(&[elems], DType::F32)))?;
        }
        Ok(())
    })
}

#[test]
fn e3_wrap_then_a_structural_heap_deadlock() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let e = fails(
            &chip,
            e3_program,
            &TaskArgs::new(),
            RuntimeEnv::default().with_heap([1 << 20, 4096, 1 << 20, 1 << 20]),
        );
        check(
            &e,
            ErrorCode::HeapRingDeadlock,
            Detector::Structural,
            Some(1),
            Some(5120),
        );
        assert_eq!(e.used, Some(3072));
        still_works(&chip);
    });
}

fn e4_program<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.scope(|s| {
        s.scope(|s| {
            s.scope(|s| {
                s.submit_dummy(
                    KernelArgs::new().output(TensorCreateInfo::new(&[1024], DType::F32)),
                )?;
                s.scope(|s| {
                    s.submit_dummy(
                        KernelArgs::new().output(TensorCreateInfo::new(&[1], DType::F32)),
                    )?;
                    Ok(())
                })
            })
        })
    })
}

#[test]
fn e4_open_depth_3_scope_blocks_ring_3() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let e = fails(
            &chip,
            e4_program,
            &TaskArgs::new(),
            RuntimeEnv::default().with_heap([1 << 20, 1 << 20, 1 << 20, 4096]),
        );
        check(
            &e,
            ErrorCode::HeapRingDeadlock,
            Detector::Structural,
            Some(3),
            None,
        );
        still_works(&chip);
    });
}

fn e13_program<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    let h = s.scope(|s| {
        Ok(s.submit_aiv(SLEEPY, KernelArgs::new().scalar(100u64))?
            .task_id())
    })?;
    s.scope(|s| {
        let mut dummies = Vec::new();
        for _ in 0..68 {
            dummies.push(s.submit_dummy(KernelArgs::new())?.task_id());
        }
        let mut x = KernelArgs::new();
        for &d in &dummies {
            x = x.dep(d);
        }
        s.submit_dummy(x)?; // 68 edges: 4 spill entries fill the pool
        let mut c = KernelArgs::new().dep(h);
        for &d in &dummies[..64] {
            c = c.dep(d);
        }
        s.submit_dummy(c)?; // needs one more spill entry while h runs
        Ok(())
    })
}

fn sleepy(ctx: &mut KernelCtx<'_>) {
    let ms: u64 = ctx.scalar(0);
    std::thread::sleep(Duration::from_millis(ms));
}
pto_chip::register_kernel!(SLEEPY = "test.sleepy", CoreType::Aiv, sleepy);

/// E13, deliberately different from CHIP_RUNTIME.md: the design expects DEP_POOL_OVERFLOW
/// because upstream pins `h` when `c` claims it, before `c` waits for a spill entry, so `h` can
/// never retire. pto takes pins only when it wires a task (after every reservation succeeded),
/// so `h` retires when its kernel ends, `c` no longer needs an edge to it (a consumed producer
/// has completed, and nothing of a closed scope is reachable from `c`), its spill need drops to
/// zero and the run completes. The program is feasible, so succeeding is right for users.
#[test]
fn e13_waiting_submit_does_not_pin_a_retiring_head() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let started = std::time::Instant::now();
        let cfg = CallConfig::with_runtime_env(
            RuntimeEnv::default().with_dep_pool([16384, 4, 16384, 16384]),
        );
        chip.run_fn(e13_program, &TaskArgs::new(), &cfg, &RunContext::default())
            .expect("the submit waits for h, then fits");
        assert!(started.elapsed() >= Duration::from_millis(100));
        still_works(&chip);
    });
}

#[test]
fn t60_bind_log_line_names_every_value_and_source() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    with_timeout(60, || {
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .finish();
        let chip = chip(1, &[("PTO2_RING_DEP_POOL", "256")]);
        let (_a, a) = f32_tensor(N, 2.0);
        let (_b, b) = f32_tensor(N, 3.0);
        let (_f, f) = f32_tensor(N, 0.0);
        let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
        let cfg = CallConfig::with_runtime_env(RuntimeEnv::default().with_task_window(16));
        let ctx = RunContext {
            chip: 0,
            label: Some("small".into()),
            l3: Some((1, 0)),
        };
        let report = tracing::subscriber::with_default(subscriber, || {
            chip.run("vector_example", &args, &cfg, &ctx).unwrap()
        });
        let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains("ring sizing"))
            .expect("a bind line");
        let expect = format!("ring sizing chip=0 task=small {} arena=miss", report.sizing);
        assert!(line.contains(&expect), "{line}");
        assert!(
            line.contains(
                "task_window=[16(call_config), 16(call_config), 16(call_config), 16(call_config)]"
            ),
            "{line}"
        );
        assert!(
            line.contains("dep_pool=[256(env), 256(env), 256(env), 256(env)]"),
            "{line}"
        );
        assert!(line.contains("pto::ring_config"), "{line}");
    });
}

fn stubborn(_ctx: &mut KernelCtx<'_>) {
    // Ignores cancellation on purpose.
    std::thread::sleep(Duration::from_millis(1500));
}
pto_chip::register_kernel!(STUBBORN = "test.stubborn", CoreType::Aiv, stubborn);

fn one_stubborn_kernel<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    s.submit_aiv(STUBBORN, KernelArgs::new())?;
    Ok(())
}

#[test]
fn a_kernel_that_does_not_return_poisons_the_chip_until_it_does() {
    with_timeout(60, || {
        pto_kernels::link();
        let spec = ChipSpec {
            clusters: 1,
            scheduler_timeout: Some(Duration::from_millis(200)),
            ..ChipSpec::default()
        };
        let chip = ChipWorker::new(spec, EnvSource::empty()).unwrap();
        let started = std::time::Instant::now();
        let e = fails(
            &chip,
            one_stubborn_kernel,
            &TaskArgs::new(),
            RuntimeEnv::default(),
        );
        check(
            &e,
            ErrorCode::SchedulerTimeout,
            Detector::Timeout,
            None,
            None,
        );
        assert!(
            started.elapsed() < Duration::from_millis(1400),
            "the run returns before the kernel"
        );
        match chip.run_fn(
            one_stubborn_kernel,
            &TaskArgs::new(),
            &CallConfig::default(),
            &RunContext::default(),
        ) {
            Err(ChipRunError::Bind(pto_chip::BindError::Poisoned { reason })) => {
                assert!(
                    reason.contains("test.stubborn") && reason.contains("r0:0"),
                    "{reason}"
                );
            }
            other => panic!("expected a poisoned chip, got {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(1600));
        still_works(&chip);
    });
}

fn wait_on_spinner<'r>(s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
    let out = s
        .submit_aic(
            SPIN_AIC_OUT,
            KernelArgs::new().output(TensorCreateInfo::new(&[4], DType::F32)),
        )?
        .tensor(0);
    let _: f32 = s.get_tensor_data(out, &[0])?;
    Ok(())
}

fn spin_with_output(ctx: &mut KernelCtx<'_>) {
    spin_until_cancelled(ctx);
}
pto_chip::register_kernel!(
    SPIN_AIC_OUT = "test.spin_with_output",
    CoreType::Aic,
    spin_with_output
);

#[test]
fn code8_tensor_wait_timeout_names_the_producer() {
    with_timeout(60, || {
        pto_kernels::link();
        let spec = ChipSpec {
            clusters: 1,
            tensor_wait_timeout: Some(Duration::from_millis(200)),
            scheduler_timeout: Some(Duration::from_secs(5)),
            ..ChipSpec::default()
        };
        let chip = ChipWorker::new(spec, EnvSource::empty()).unwrap();
        let started = std::time::Instant::now();
        let e = fails(
            &chip,
            wait_on_spinner,
            &TaskArgs::new(),
            RuntimeEnv::default(),
        );
        check(
            &e,
            ErrorCode::TensorWaitTimeout,
            Detector::Timeout,
            None,
            None,
        );
        assert_eq!(e.task, Some(TaskId::new(0, 0)));
        assert!(e.detail.contains("r0:0"), "{}", e.detail);
        assert!(started.elapsed() < Duration::from_secs(3));
        still_works(&chip);
    });
}

fn read_write_back<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let x = a.tensor(0);
    let ci = TensorCreateInfo::new(&[4], DType::F32);
    let t = s
        .submit_aiv(pto_kernels::bench::FILL, KernelArgs::new().output(ci))?
        .tensor(0);
    let v: f32 = s.get_tensor_data(t, &[2])?;
    assert_eq!(v, 1.0);
    s.set_tensor_data(t, &[1], 5.0f32)?;
    let first: f32 = s.get_tensor_data(x, &[0])?;
    s.set_tensor_data(x, &[3], first + v)?;
    s.submit_aiv(
        pto_kernels::vector::ADD,
        KernelArgs::new()
            .input(t)
            .input(t)
            .output_existing(x.view(&[4], &[4]).unwrap()),
    )?;
    Ok(())
}

#[test]
fn get_and_set_tensor_data_order_against_tasks() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let (buf, x) = f32_tensor(8, 7.0);
        chip.run_fn(
            read_write_back,
            &TaskArgs::new().inout(&x),
            &CallConfig::default(),
            &RunContext::default(),
        )
        .unwrap();
        assert_eq!(
            buf.read_f32(0, 8),
            [7.0, 7.0, 7.0, 8.0, 2.0, 10.0, 2.0, 2.0]
        );
    });
}
