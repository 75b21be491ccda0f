//! Per-task CallConfig at L3: validation at submit (C3), per-task sizing with provenance, the
//! arena cache, diagnostics directories, bind failures (NODE_RUNTIME.md §9 rows 10–13, 45–49;
//! RING_CONFIG.md T18, T72–T74, T88).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pto_chip::memory::ArenaOutcome;
use pto_node::{FailureKind, SubmitError, TaskOutcome, WaitError, WorkerRunError};
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{
    CallConfig, ConfigError, ErrorCode, Resource, RuntimeEnv, TaskArgs, TaskOverrides,
};

use crate::common::*;

const MIB: u64 = 1 << 20;

/// Submits `elementwise_add` with `config` in a fresh run; returns the synchronous result and checks
/// that a rejected submit created nothing and did not fail the run.
fn submit_with(mode: Mode, config: CallConfig) -> Result<(), SubmitError> {
    let w = start(builder(mode, 1, 0));
    let add = chip(&w, "elementwise_add");
    let (_a, a) = buf(&w, 64, 1.0);
    let (_o, o) = buf(&w, 64, 0.0);
    let (tx, rx) = std::sync::mpsc::channel();
    let report = w
        .run(
            move |orch, _, _| {
                let args = TaskArgs::new().input(&a).input(&a).output_existing(&o);
                let result = orch.submit_next_level(&add, args, &config, 0).map(|_| ());
                if result.is_err() {
                    assert_eq!(orch.submitted_tasks(), 0);
                    assert_eq!(orch.tensormap_entries(), 0);
                }
                tx.send(result).unwrap();
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect("a rejected submit does not fail the run");
    let result = rx.recv().unwrap();
    if result.is_err() {
        assert!(report.tasks.is_empty(), "no task was created");
    }
    result
}

#[track_caller]
fn check_invalid(mode: Mode, config: CallConfig, expected: ConfigError, text: &str) {
    let err = with_timeout(20, move || submit_with(mode, config)).unwrap_err();
    match &err {
        SubmitError::InvalidConfig(e) => assert_eq!(e, &expected),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(
        err.to_string().contains(text),
        "{err} does not contain {text:?}"
    );
}

fn env(e: RuntimeEnv) -> CallConfig {
    CallConfig::with_runtime_env(e)
}

fn n10_window_48_rejected_at_submit(mode: Mode) {
    check_invalid(
        mode,
        env(RuntimeEnv::default().with_task_window([16, 64, 48, 16])),
        ConfigError::TaskWindow { ring: 2, value: 48 },
        "runtime_env.ring_task_window[2]=48: must be a power of two between 4 and 1073741824",
    );
}

fn n11_heap_512_rejected_at_submit(mode: Mode) {
    check_invalid(
        mode,
        env(RuntimeEnv::default().with_heap(512)),
        ConfigError::Heap {
            ring: 0,
            value: 512,
        },
        "runtime_env.ring_heap[0]=512",
    );
}

fn n12_dep_pool_2_pow_31_rejected_at_submit(mode: Mode) {
    check_invalid(
        mode,
        env(RuntimeEnv::default().with_dep_pool([0, 0, 0, 1 << 31])),
        ConfigError::DepPool {
            ring: 3,
            value: 2147483648,
        },
        "runtime_env.ring_dep_pool[3]=2147483648",
    );
}

fn n13_diagnostics_without_prefix_or_empty_prefix(mode: Mode) {
    let missing = CallConfig {
        enable_scope_stats: true,
        ..CallConfig::default()
    };
    let err = with_timeout(20, move || submit_with(mode, missing)).unwrap_err();
    assert!(
        matches!(
            &err,
            SubmitError::InvalidConfig(ConfigError::MissingOutputPrefix { .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("enable_scope_stats"), "{err}");
    let empty = CallConfig {
        output_prefix: Some(String::new()),
        ..CallConfig::default()
    };
    let err = with_timeout(20, move || submit_with(mode, empty)).unwrap_err();
    assert!(
        matches!(
            &err,
            SubmitError::InvalidConfig(ConfigError::OutputPrefixInvalid { .. })
        ),
        "{err:?}"
    );
}

fn t18_rejection_leaves_no_trace_and_the_next_submit_succeeds(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 1, 0));
        let add = chip(&w, "elementwise_add");
        let (_a, a) = buf(&w, 64, 1.0);
        let (o_buf, o) = buf(&w, 64, 0.0);
        let report = w
            .run(
                move |orch, _, cfg| {
                    let args = TaskArgs::new().input(&a).input(&a).output_existing(&o);
                    let bad = env(RuntimeEnv::default().with_task_window(48));
                    let err = orch
                        .submit_next_level(&add, args.clone(), &bad, 0)
                        .unwrap_err();
                    assert!(matches!(
                        err,
                        SubmitError::InvalidConfig(ConfigError::TaskWindow { ring: 0, value: 48 })
                    ));
                    assert_eq!((orch.submitted_tasks(), orch.tensormap_entries()), (0, 0));
                    let id = orch.submit_next_level(&add, args, cfg, 0)?;
                    assert_eq!(id.index, 0, "the rejected submit consumed no task index");
                    assert_eq!((orch.submitted_tasks(), orch.tensormap_entries()), (1, 1));
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(report.tasks.len(), 1);
        assert_eq!(o_buf.read_vec::<f32>(0, 64).unwrap(), vec![2.0; 64]);
    });
}

fn c3_rejection_propagated_with_question_mark_fails_the_run(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 1, 0));
        let add = chip(&w, "elementwise_add");
        let (_a, a) = buf(&w, 64, 1.0);
        let err = w
            .run(
                move |orch, _, _| {
                    let bad = env(RuntimeEnv::default().with_heap(512));
                    orch.submit_next_level(&add, TaskArgs::new().input(&a), &bad, 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap_err();
        assert!(matches!(err, WorkerRunError::Submit(_)), "{err:?}");
        assert!(
            err.to_string().contains("runtime_env.ring_heap[0]=512"),
            "{err}"
        );
    });
}

/// Runs one `elementwise_add` task per config on chip 0 of a Worker whose chip sees `env`;
/// returns the task reports in order.
fn run_sized(
    mode: Mode,
    ring_env: &[(&str, &str)],
    configs: Vec<CallConfig>,
) -> Vec<pto_node::TaskReport> {
    let mut b = builder(mode, 1, 0);
    for (k, v) in ring_env {
        b = b.ring_env(*k, *v);
    }
    let w = start(b);
    let add = chip(&w, "elementwise_add");
    let (_a, a) = buf(&w, 64, 1.0);
    let outs: Vec<_> = configs.iter().map(|_| buf(&w, 64, 0.0)).collect();
    let out_tensors: Vec<_> = outs.iter().map(|(_, t)| t.clone()).collect();
    let report = w
        .run(
            move |orch, _, _| {
                for (cfg, o) in configs.iter().zip(&out_tensors) {
                    let args = TaskArgs::new().input(&a).input(&a).output_existing(o);
                    orch.submit_next_level(&add, args, cfg, 0)?;
                }
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
    for (b, _) in &outs {
        assert_eq!(b.read_vec::<f32>(0, 64).unwrap(), vec![2.0; 64]);
    }
    report.tasks
}

fn sizing(t: &pto_node::TaskReport, r: Resource) -> ([u64; 4], [SizeSource; 4]) {
    let c = t.chip_report().expect("a chip report");
    (c.sizing.values(r), c.sizing.sources(r))
}

fn n45_ring_env_versus_per_task_heap(mode: Mode) {
    with_timeout(30, move || {
        let tasks = run_sized(
            mode,
            &[("PTO2_RING_HEAP", "1048576")],
            vec![
                env(RuntimeEnv::default().with_heap(4 * MIB)),
                CallConfig::default(),
            ],
        );
        assert_eq!(
            sizing(&tasks[0], Resource::Heap),
            ([4 * MIB; 4], [SizeSource::CallConfig; 4])
        );
        assert_eq!(
            sizing(&tasks[1], Resource::Heap),
            ([MIB; 4], [SizeSource::Env; 4])
        );
    });
}

fn n46_one_ring_from_call_config(mode: Mode) {
    with_timeout(30, move || {
        let tasks = run_sized(
            mode,
            &[],
            vec![env(RuntimeEnv::default().with_task_window([0, 64, 0, 0]))],
        );
        use SizeSource::{CallConfig as Cc, Default as Def};
        assert_eq!(
            sizing(&tasks[0], Resource::TaskWindow),
            ([16384, 64, 16384, 16384], [Def, Cc, Def, Def])
        );
    });
}

fn n47_arena_cache_hits_for_equal_sizings(mode: Mode) {
    with_timeout(30, move || {
        let small = RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(MIB)
            .with_dep_pool(64);
        let defaults = RuntimeEnv::default()
            .with_task_window(16384)
            .with_heap(268435456)
            .with_dep_pool(16384);
        let tasks = run_sized(
            mode,
            &[],
            vec![env(small), env(small), CallConfig::default(), env(defaults)],
        );
        let arena = |i: usize| tasks[i].chip_report().unwrap().arena;
        assert!(matches!(arena(0), ArenaOutcome::Miss { .. }));
        assert_eq!(arena(1), ArenaOutcome::Hit);
        assert!(matches!(arena(2), ArenaOutcome::Miss { .. }));
        assert_eq!(
            arena(3),
            ArenaOutcome::Hit,
            "an override equal to the defaults shares the arena"
        );
        assert_eq!(
            sizing(&tasks[3], Resource::Heap).1,
            [SizeSource::CallConfig; 4]
        );
    });
}

fn n48_device_memory_exhausted_names_chip_bytes_and_capacity(mode: Mode) {
    with_timeout(30, move || {
        let w = start(builder(mode, 1, 0).chip_spec(0, small_chip(64 * MIB)));
        let add = chip(&w, "elementwise_add");
        let (_a, a) = buf(&w, 64, 1.0);
        let (_o, o) = buf(&w, 64, 0.0);
        let sized = |heap: u64| {
            env(RuntimeEnv::default()
                .with_task_window(64)
                .with_dep_pool(256)
                .with_heap(heap))
        };
        let (a2, o2) = (a.clone(), o.clone());
        let err = w
            .run(
                move |orch, _, _| {
                    let args = TaskArgs::new()
                        .input(&a)
                        .input(&a)
                        .output_existing(&o)
                        .label("big");
                    orch.submit_next_level(&add, args, &sized(32 * MIB), 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap_err();
        let WorkerRunError::Failed(e) = err else {
            panic!("{err:?}")
        };
        assert_eq!(e.first.code, Some(ErrorCode::DeviceMemoryExhausted));
        assert_eq!(e.first.code.unwrap().code(), 1004);
        let text = e.to_string();
        for needle in [
            format!("task 0 'big' on {}", w.chip_name(0).unwrap()),
            "chip 0".to_string(),
            "of 67108864".to_string(),
            "DEVICE_MEMORY_EXHAUSTED".to_string(),
        ] {
            assert!(text.contains(&needle), "{text} does not contain {needle:?}");
        }
        w.run(
            move |orch, _, _| {
                let args = TaskArgs::new().input(&a2).input(&a2).output_existing(&o2);
                orch.submit_next_level(&add, args, &sized(4 * MIB), 0)?;
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .expect("the 4 MiB variant fits");
    });
}

fn n49_l2_scope_deadlock_chain(mode: Mode) {
    with_timeout(30, move || {
        let w = start(builder(mode, 1, 0));
        let h = chip(&w, "eight_in_scope");
        let err = w
            .run(
                move |orch, _, _| {
                    let cfg = env(RuntimeEnv::default().with_task_window(4));
                    orch.submit_next_level(&h, TaskArgs::new().label("attn"), &cfg, 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap_err();
        let WorkerRunError::Failed(e) = err else {
            panic!("{err:?}")
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "run {}: task 0 'attn' on {}: L2 run failed: SCOPE_DEADLOCK (1)",
                e.run_id,
                w.chip_name(0).unwrap()
            )),
            "{text}"
        );
        assert!(text.contains("ring_task_window"), "{text}");
        assert_eq!(e.first.kind, FailureKind::Task);
    });
}

fn t72_t73_derived_configs_keep_diagnostics_and_write_per_task_directories(mode: Mode) {
    with_timeout(30, move || {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("c1").to_string_lossy().into_owned();
        let base = CallConfig {
            enable_scope_stats: true,
            output_prefix: Some(prefix.clone()),
            runtime_env: RuntimeEnv::default()
                .with_task_window(64)
                .with_heap(8 * MIB),
            ..CallConfig::default()
        };
        let w = start(builder(mode, 1, 0));
        let add = chip(&w, "elementwise_add");
        let (_a, a) = buf(&w, 64, 1.0);
        let (_o, o) = buf(&w, 64, 0.0);
        let report = w
            .run(
                move |orch, _, cfg| {
                    let overrides = TaskOverrides {
                        aicpu_thread_num: None,
                        track_war: None,
                        runtime_env: RuntimeEnv::default().with_task_window([0, 0, 0, 16]),
                    };
                    let derived = cfg.derive(&overrides)?;
                    assert!(derived.enable_scope_stats);
                    assert_eq!(derived.output_prefix, cfg.output_prefix);
                    assert_eq!(cfg.derive(&TaskOverrides::default())?, *cfg);
                    let args = TaskArgs::new()
                        .input(&a)
                        .input(&a)
                        .output_existing(&o)
                        .label("small");
                    orch.submit_next_level(&add, args, &derived, 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                base,
            )
            .unwrap();
        let t = &report.tasks[0];
        assert_eq!(sizing(t, Resource::TaskWindow).0, [64, 64, 64, 16]);
        assert_eq!(sizing(t, Resource::Heap).0, [8 * MIB; 4]);
        let stats = std::path::Path::new(&prefix)
            .join("chip0")
            .join(format!("run{}_task0_small", report.run_id))
            .join("scope_stats")
            .join("scope_stats.jsonl");
        assert!(stats.exists(), "missing {}", stats.display());
    });
}

/// Captures `pto::node` log lines.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn t74_blank_task_config_warns_once_per_run(mode: Mode) {
    with_timeout(30, move || {
        let dir = tempfile::tempdir().unwrap();
        let base = CallConfig {
            enable_scope_stats: true,
            output_prefix: Some(dir.path().to_string_lossy().into_owned()),
            ..CallConfig::default()
        };
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .with_env_filter("pto::node=warn")
            .finish();
        let w = start(builder(mode, 1, 0));
        let add = chip(&w, "elementwise_add");
        let (_a, a) = buf(&w, 64, 1.0);
        let (o_buf, o) = buf(&w, 64, 0.0);
        tracing::subscriber::with_default(subscriber, || {
            w.run(
                move |orch, _, _| {
                    for label in ["blank0", "blank1"] {
                        let args = TaskArgs::new()
                            .input(&a)
                            .input(&a)
                            .output_existing(&o)
                            .label(label);
                        orch.submit_next_level(&add, args, &CallConfig::default(), 0)?;
                    }
                    Ok(())
                },
                TaskArgs::new(),
                base,
            )
            .expect("the tasks run");
        });
        assert_eq!(o_buf.read_vec::<f32>(0, 4).unwrap(), vec![2.0; 4]);
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.matches("CallConfig::derive").count(), 1, "{text}");
        assert!(text.contains("task 0 ('blank0')"), "{text}");
        assert!(text.contains("enable_scope_stats"), "{text}");
    });
}

fn t88_bind_failure_poisons_dependents_only(mode: Mode) {
    with_timeout(30, move || {
        let w = start(builder(mode, 1, 1).chip_spec(0, small_chip(4 << 30)));
        let add = chip(&w, "elementwise_add");
        let copy = copier(&w);
        let fill = filler(&w);
        let (_a, a) = buf(&w, 64, 1.0);
        let (_o, o) = buf(&w, 64, 0.0);
        let (_c, c) = buf(&w, 64, -1.0);
        let (small_buf, small_out) = buf(&w, 64, 0.0);
        let run = w
            .submit(
                move |orch, _, _| {
                    // A gate (rewriting `a` with its own value after 100 ms) holds `big` and
                    // `small` until every task is submitted: otherwise `big` could fail before
                    // the later submits, which then fail fast. They become ready in order.
                    orch.submit_sub(
                        &fill,
                        TaskArgs::new()
                            .output_existing(&a)
                            .scalar(1.0f32)
                            .scalar(100u64)
                            .label("gate"),
                    )?;
                    let big = env(RuntimeEnv::default().with_heap(1 << 30));
                    let args = TaskArgs::new()
                        .input(&a)
                        .input(&a)
                        .output_existing(&o)
                        .label("big");
                    orch.submit_next_level(&add, args, &big, 0)?;
                    orch.submit_sub(
                        &copy,
                        TaskArgs::new()
                            .input(&o)
                            .output_existing(&c)
                            .label("consumer"),
                    )?;
                    let small = env(RuntimeEnv::default()
                        .with_task_window(16)
                        .with_heap(MIB)
                        .with_dep_pool(64));
                    let args = TaskArgs::new()
                        .input(&a)
                        .input(&a)
                        .output_existing(&small_out)
                        .label("small");
                    orch.submit_next_level(&add, args, &small, 0)?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        let Err(WaitError::Failed(e)) = run.wait(Some(Duration::from_secs(20))) else {
            panic!("the run must fail")
        };
        let text = e.to_string();
        assert!(
            text.contains(&format!(
                "task 1 'big' on {}: L2 bind failed",
                w.chip_name(0).unwrap()
            )),
            "{text}"
        );
        assert!(text.contains("arena needs"), "{text}");
        assert_eq!(e.first.kind, FailureKind::Bind);
        assert_eq!(e.first.code, Some(ErrorCode::DeviceMemoryExhausted));
        assert_eq!((e.failed, e.skipped), (1, 1));
        let consumer = e.report.task("consumer").unwrap();
        assert!(
            matches!(&consumer.outcome, TaskOutcome::Failed(f) if f.kind == FailureKind::Skipped)
        );
        assert!(consumer.dispatched.is_none(), "the poisoned task never ran");
        let small = e.report.task("small").unwrap();
        assert!(small.outcome.is_success(), "{:?}", small.outcome);
        assert_eq!(small_buf.read_vec::<f32>(0, 64).unwrap(), vec![2.0; 64]);
    });
}

fn n08_strict_env_fails_init_naming_the_variable(mode: Mode) {
    with_timeout(20, move || {
        let w = builder(mode, 1, 0)
            .ring_env("PTO2_RING_TASK_WINDOW", "48")
            .strict_env(true)
            .build()
            .unwrap();
        let err = w.init().unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, pto_node::InitError::ChildFailed { .. }),
            "{err:?}"
        );
        let chip0 = match mode {
            Mode::InProcess => "chip[0]",
            Mode::ChildProcess => "chip_child[0] pid=",
        };
        for needle in [chip0, "PTO2_RING_TASK_WINDOW", "48", "power of two"] {
            assert!(text.contains(needle), "{text} does not contain {needle:?}");
        }
        w.close();
    });
}

fn n09_without_strict_the_bad_variable_falls_back_to_the_default(mode: Mode) {
    with_timeout(30, move || {
        let tasks = run_sized(
            mode,
            &[("PTO2_RING_TASK_WINDOW", "48")],
            vec![env(RuntimeEnv::default().with_heap(MIB).with_dep_pool(64))],
        );
        assert_eq!(
            sizing(&tasks[0], Resource::TaskWindow),
            ([16384; 4], [SizeSource::Default; 4])
        );
        let problems = &tasks[0].chip_report().unwrap().env_problems;
        assert!(
            problems
                .iter()
                .any(|p| p.contains("PTO2_RING_TASK_WINDOW") && p.contains("16384")),
            "{problems:?}"
        );
    });
}

both_modes!(
    n10_window_48_rejected_at_submit,
    n11_heap_512_rejected_at_submit,
    n12_dep_pool_2_pow_31_rejected_at_submit,
    n13_diagnostics_without_prefix_or_empty_prefix,
    t18_rejection_leaves_no_trace_and_the_next_submit_succeeds,
    c3_rejection_propagated_with_question_mark_fails_the_run,
    n45_ring_env_versus_per_task_heap,
    n46_one_ring_from_call_config,
    n47_arena_cache_hits_for_equal_sizings,
    n48_device_memory_exhausted_names_chip_bytes_and_capacity,
    n49_l2_scope_deadlock_chain,
    t72_t73_derived_configs_keep_diagnostics_and_write_per_task_directories,
    t74_blank_task_config_warns_once_per_run,
    t88_bind_failure_poisons_dependents_only,
    n08_strict_env_fails_init_naming_the_variable,
    n09_without_strict_the_bad_variable_falls_back_to_the_default,
);
