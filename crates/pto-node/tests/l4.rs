//! L4 over child-process L3 Workers (NODE_RUNTIME.md §6.1; §9 rows 2, 55–57; the issue's
//! "Done when": two L3 children, each fanning out to 2 chips with per-task sizing, all results
//! and per-task sizings verified at the top).

use std::time::{Duration, Instant};

use pto_node::{
    AddWorkerError, Callable, CallableKind, EndpointMode, FailureKind, OrchError, Orchestrator,
    RunReport, WaitError, Worker,
};
use pto_types::ring_config::resolve::SizeSource;
use pto_types::{CallConfig, Resource, RuntimeEnv, TaskArgs, TaskOverrides};

use crate::common::*;

const MIB: u64 = 1 << 20;

fn small() -> RuntimeEnv {
    RuntimeEnv::default().with_heap(MIB).with_dep_pool(64)
}

fn per_ring() -> RuntimeEnv {
    RuntimeEnv::default()
        .with_heap([2 * MIB, MIB, MIB, MIB])
        .with_dep_pool([128, 64, 64, 64])
}

/// Node callable `l3_pipeline`: tensors `a`, `b`, `out0`, `out1`; `out_i = a + b` on chip i,
/// chip 0 with the `small` sizing and chip 1 with `per_ring`, both derived from the config the
/// L4 task carried.
fn l3_pipeline(
    orch: &mut Orchestrator<'_>,
    args: &TaskArgs,
    cfg: &CallConfig,
) -> Result<(), OrchError> {
    let add = orch.callable(CallableKind::Chip, "elementwise_add")?;
    let t = args.tensors();
    if t.len() != 4 {
        return Err(OrchError::msg("l3_pipeline takes a, b, out0, out1"));
    }
    for (chip, (label, env)) in [("add_small", small()), ("add_per_ring", per_ring())]
        .into_iter()
        .enumerate()
    {
        let task_cfg = cfg.derive(&TaskOverrides {
            aicpu_thread_num: None,
            track_war: None,
            runtime_env: env,
        })?;
        let args = TaskArgs::new()
            .input(&t[0].1)
            .input(&t[1].1)
            .output_existing(&t[2 + chip].1)
            .label(label);
        orch.submit_next_level(&add, args, &task_cfg, chip)?;
    }
    Ok(())
}
pto_node::register_node!("l3_pipeline", l3_pipeline);

/// Node callable `l3_fail_or_sleep`: `fail_if(scalar 0, scalar 1 ms)` on chip 0.
fn l3_fail_or_sleep(
    orch: &mut Orchestrator<'_>,
    args: &TaskArgs,
    cfg: &CallConfig,
) -> Result<(), OrchError> {
    let h = orch.callable(CallableKind::Chip, "fail_if")?;
    let task_cfg = cfg.derive(&TaskOverrides {
        aicpu_thread_num: None,
        track_war: None,
        runtime_env: small(),
    })?;
    let s = args.scalars();
    let inner = TaskArgs::new().scalar(s[0]).scalar(s[1]).label("inner");
    orch.submit_next_level(&h, inner, &task_cfg, 0)?;
    Ok(())
}
pto_node::register_node!("l3_fail_or_sleep", l3_fail_or_sleep);

fn l3() -> Worker {
    pto_kernels::link();
    let w = Worker::builder(3)
        .chips(2)
        .chip_spec(0, small_chip(1 << 30))
        .chip_spec(1, small_chip(1 << 30))
        .sub_workers(1)
        .endpoint_mode(EndpointMode::ChildProcess)
        .heap_ring_size(1 << 20)
        .shutdown_grace(Duration::from_secs(2))
        .build()
        .unwrap();
    w.register(Callable::chip("elementwise_add")).unwrap();
    w.register(Callable::chip("fail_if")).unwrap();
    w.register(Callable::sub("sum_outputs")).unwrap();
    w
}

fn l4_over_two_l3() -> Worker {
    let l4 = Worker::builder(4)
        .sub_workers(1)
        .heap_ring_size(1 << 20)
        .shutdown_grace(Duration::from_secs(2))
        .build()
        .unwrap();
    assert_eq!(l4.add_worker(l3()).unwrap(), 0);
    assert_eq!(l4.add_worker(l3()).unwrap(), 1);
    l4
}

/// Every process below `roots` (not the roots themselves).
fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut parent_of = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let mut rest = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = rest.next().unwrap_or("");
        let ppid: u32 = rest.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if state != "Z" {
            parent_of.push((pid, ppid));
        }
    }
    let mut found: Vec<u32> = Vec::new();
    let mut frontier: Vec<u32> = roots.to_vec();
    while let Some(p) = frontier.pop() {
        for &(pid, ppid) in &parent_of {
            if ppid == p && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

fn chip_sizing(inner: &RunReport, label: &str) -> pto_types::ring_config::resolve::ResolvedSizing {
    inner
        .task(label)
        .unwrap_or_else(|| panic!("no inner task {label}"))
        .chip_report()
        .expect("a chip report")
        .sizing
}

#[test]
fn n02_add_worker_requires_level_4() {
    let w = builder(Mode::ChildProcess, 1, 0).build().unwrap();
    assert_eq!(
        w.add_worker(l3()),
        Err(AddWorkerError::RequiresLevel4 { level: 3 })
    );
    let l4 = Worker::builder(4).sub_workers(1).build().unwrap();
    let started = l3();
    started.close();
    assert_eq!(l4.add_worker(started), Err(AddWorkerError::ChildNotNew));
    assert!(matches!(
        l4.register(Callable::chip("elementwise_add")),
        Err(pto_node::RegisterError::WrongLevel { level: 4, .. })
    ));
    assert!(Worker::builder(4).chips(1).build().is_err());
}

/// Row 55 and the L4 "Done when".
#[test]
fn done_l4_two_l3_children_two_chips_each_per_task_sizing() {
    with_timeout(60, || {
        let l4 = l4_over_two_l3();
        let h = l4.register(Callable::node("l3_pipeline")).unwrap();
        let sum = l4.register(Callable::sub("sum_outputs")).unwrap();
        l4.init().unwrap();
        assert!(l4.chip_name(0).unwrap().starts_with("node_child[0] pid="));
        // 2 L3 processes, each with 2 chips and 1 sub, plus the L4's sub worker.
        let below = descendants(&[std::process::id()]);
        let mine: Vec<u32> = l4.child_pids();
        let tree: Vec<u32> = mine.iter().copied().chain(descendants(&mine)).collect();
        assert_eq!(tree.len(), 9, "the L4's process tree: {tree:?}");
        assert!(tree.iter().all(|p| below.contains(p)));
        const N: usize = 512;
        let (_a, a) = f32_buffer(&l4, N, |j| j as f32).unwrap();
        let (_b, b) = f32_buffer(&l4, N, |_| 0.5).unwrap();
        let outs: Vec<_> = (0..4).map(|_| buf(&l4, N, 0.0)).collect();
        let out_t: Vec<_> = outs.iter().map(|(_, t)| t.clone()).collect();
        let (total_buf, total) = buf(&l4, N, -1.0);
        // The L4 run's config: window 64 on every ring; it flows down unchanged, and each chip
        // task's config is derived from it inside the L3 function.
        let base = CallConfig::with_runtime_env(RuntimeEnv::default().with_task_window(64));
        let report = l4
            .run(
                move |orch, _, cfg| {
                    for w in 0..2 {
                        let args = TaskArgs::new()
                            .input(&a)
                            .input(&b)
                            .output_existing(&out_t[2 * w])
                            .output_existing(&out_t[2 * w + 1])
                            .label(&format!("l3_{w}"));
                        orch.submit_next_level(&h, args, cfg, w)?;
                    }
                    let mut args = TaskArgs::new();
                    for o in &out_t {
                        args = args.input(o);
                    }
                    orch.submit_sub(&sum, args.output_existing(&total).label("total"))?;
                    Ok(())
                },
                TaskArgs::new(),
                base,
            )
            .unwrap();
        for (buffer, _) in &outs {
            let got = buffer.read_vec::<f32>(0, N).unwrap();
            assert!(got.iter().enumerate().all(|(j, &v)| v == j as f32 + 0.5));
        }
        let got = total_buf.read_vec::<f32>(0, N).unwrap();
        assert!(
            got.iter()
                .enumerate()
                .all(|(j, &v)| v == 4.0 * (j as f32 + 0.5))
        );
        assert_eq!(report.task("total").unwrap().fanin(), 2);
        assert_inner_runs_sized_per_task(&l4, &report);
        let close = l4.close();
        assert!(close.graceful, "{close:?}");
        assert_all_exited(tree);
    });
}

/// Each L3 task ran on node child w, and its inner run's two chip tasks on their chips with
/// the sizing derived inside the L3 function (window 64 from the L4's config).
fn assert_inner_runs_sized_per_task(l4: &Worker, report: &RunReport) {
    use SizeSource::CallConfig as Cc;
    for w in 0..2 {
        let task = report.task(&format!("l3_{w}")).unwrap();
        assert_eq!(Some(&task.members[0].worker), l4.chip_name(w).as_ref());
        let inner = task.members[0]
            .inner
            .as_deref()
            .expect("the inner run's report");
        assert_eq!(inner.tasks.len(), 2);
        for (label, env, chip) in [("add_small", small(), 0), ("add_per_ring", per_ring(), 1)] {
            let s = chip_sizing(inner, label);
            assert_eq!(s.values(Resource::TaskWindow), [64; 4], "{label}");
            assert_eq!(s.values(Resource::Heap), env.get(Resource::Heap), "{label}");
            assert_eq!(
                s.values(Resource::DepPool),
                env.get(Resource::DepPool),
                "{label}"
            );
            for r in Resource::ALL {
                assert_eq!(s.sources(r), [Cc; 4], "{label} {r:?}");
            }
            let member = &inner.task(label).unwrap().members[0];
            assert!(
                member
                    .worker
                    .starts_with(&format!("chip_child[{chip}] pid=")),
                "{}",
                member.worker
            );
        }
    }
}

/// Every process of `tree` is gone (or a zombie).
fn assert_all_exited(tree: Vec<u32>) {
    for pid in tree {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        assert!(
            matches!(state, None | Some("Z") | Some("X")),
            "{pid} still runs after close"
        );
    }
}

/// Rows 56 and 57: an inner chip task fails (the chain names the node child, the chip child
/// and the L2 message); then SIGKILL one L3 child mid-task (its children exit within 2 s and
/// the L4 run fails naming the L3 pid).
#[test]
fn n56_n57_inner_failure_chain_and_killed_l3_child() {
    with_timeout(60, || {
        let l4 = l4_over_two_l3();
        let h = l4.register(Callable::node("l3_fail_or_sleep")).unwrap();
        l4.init().unwrap();
        let node1 = l4.chip_name(1).unwrap();
        let err = l4
            .run(
                move |orch, _, cfg| {
                    orch.submit_next_level(
                        &h,
                        TaskArgs::new().scalar(1u64).scalar(0u64).label("fails"),
                        cfg,
                        1,
                    )?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "task 0 'fails' on {node1}: run 1: task 0 'inner' on chip_child[0] pid="
            )),
            "{text}"
        );
        assert!(
            text.contains("L2 run failed: EXPLICIT_ORCH_FATAL (9)"),
            "{text}"
        );
        // Row 57.
        let node1_pid: u32 = node1.rsplit("pid=").next().unwrap().parse().unwrap();
        let grandchildren = descendants(&[node1_pid]);
        assert_eq!(grandchildren.len(), 3, "{grandchildren:?}");
        let run = l4
            .submit(
                move |orch, _, cfg| {
                    orch.submit_next_level(
                        &h,
                        TaskArgs::new()
                            .scalar(0u64)
                            .scalar(10_000u64)
                            .label("sleeps"),
                        cfg,
                        1,
                    )?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(node1_pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        let killed = Instant::now();
        let Err(WaitError::Failed(e)) = run.wait(Some(Duration::from_secs(2))) else {
            panic!("the L4 run must fail");
        };
        assert_eq!(e.first.kind, FailureKind::Endpoint);
        let text = e.to_string();
        assert!(text.contains(&format!("pid={node1_pid}")), "{text}");
        assert!(text.contains("signal 9"), "{text}");
        let deadline = killed + Duration::from_secs(2);
        loop {
            let alive: Vec<u32> = grandchildren
                .iter()
                .copied()
                .filter(|p| {
                    let stat =
                        std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                    let state = stat
                        .rsplit(')')
                        .next()
                        .and_then(|r| r.split_whitespace().next());
                    !matches!(state, None | Some("Z") | Some("X"))
                })
                .collect();
            if alive.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{alive:?} outlived their L3 parent by 2 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        l4.close();
    });
}
