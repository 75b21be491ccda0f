//! Child-process endpoints only (NODE_RUNTIME.md §4; §9 rows 8, 9 (in `config`), 42–44; the
//! issue's "Done when" list; RING_CONFIG.md T70, T85). The L3 tests of the other modules run in
//! both modes through `both_modes!`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use pto_node::{
    Callable, ChildExe, EndpointMode, FailureKind, SubmitError, TaskOutcome, WaitError, Worker,
};
use pto_types::ring_config::env::EnvSource;
use pto_types::ring_config::resolve::{ResolvedSizing, SizeSource};
use pto_types::{CallConfig, Resource, RuntimeEnv, TaskArgs, TaskOverrides};

use crate::common::*;

const MIB: u64 = 1 << 20;

/// The pid in a child worker name (`chip_child[0] pid=4242`).
pub(crate) fn pid_of(name: &str) -> u32 {
    name.rsplit("pid=").next().unwrap().parse().unwrap()
}

/// Whether `pid` is a live (not zombie) process.
pub(crate) fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

/// Whether `pid` is a child of this process (alive or zombie).
pub(crate) fn is_my_child(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let ppid = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().nth(1))
        .and_then(|p| p.parse::<u32>().ok());
    ppid == Some(std::process::id())
}

/// This process's descriptors that are `memfd`s of the Worker `uid`.
pub(crate) fn worker_memfds(uid: u64) -> Vec<String> {
    let needle = format!("memfd:pto-{uid:x}-");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p.contains(&needle))
        .collect()
}

pub(crate) fn dev_shm() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn child_builder(chips: usize, subs: usize) -> pto_node::WorkerBuilder {
    builder(Mode::ChildProcess, chips, subs)
}

#[test]
fn ping_through_the_mailbox_and_names_with_pids() {
    with_timeout(30, || {
        let w = start(child_builder(1, 1));
        let chip = w.chip_name(0).unwrap();
        let sub = w.sub_name(0).unwrap();
        assert!(chip.starts_with("chip_child[0] pid="), "{chip}");
        assert!(sub.starts_with("sub_child[0] pid="), "{sub}");
        assert_eq!(w.child_pids().len(), 2);
        assert_eq!(w.ping(0, true, b"hello").unwrap(), b"hello");
        assert_eq!(w.ping(0, false, &[7; 2000]).unwrap(), vec![7; 2000]);
        // No arena yet.
        assert_eq!(w.committed_device_memory(0).unwrap(), 0);
        let close = w.close();
        assert!(close.graceful, "{close:?}");
    });
}

/// Runs `elementwise_add` on chip 0 once per config; returns each task's resolved sizing.
fn sizings(w: &Worker, configs: Vec<(&'static str, CallConfig)>) -> Vec<(String, ResolvedSizing)> {
    let add = chip(w, "elementwise_add");
    let (_a, a) = buf(w, 256, 1.0);
    let outs: Vec<_> = configs.iter().map(|_| buf(w, 256, 0.0)).collect();
    let out_tensors: Vec<_> = outs.iter().map(|(_, t)| t.clone()).collect();
    let report = w
        .run(
            move |orch, _, _| {
                for ((label, cfg), o) in configs.iter().zip(&out_tensors) {
                    let args = TaskArgs::new()
                        .input(&a)
                        .input(&a)
                        .output_existing(o)
                        .label(label);
                    orch.submit_next_level(&add, args, cfg, 0)?;
                }
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
    for (b, _) in &outs {
        assert_eq!(b.read_vec::<f32>(0, 256).unwrap(), vec![2.0; 256]);
    }
    report
        .tasks
        .iter()
        .map(|t| {
            (
                t.label.clone().unwrap(),
                t.chip_report().expect("a chip report").sizing,
            )
        })
        .collect()
}

/// "Done when": chip children whose own environment sets `PTO2_RING_*` to values different
/// from the per-task configs. Tasks with overrides run with their own values (source
/// `call_config`); the task without runs with the child's environment (source `env`).
#[test]
fn done_child_environment_differs_from_per_task_configs() {
    with_timeout(60, || {
        let before = [
            "PTO2_RING_TASK_WINDOW",
            "PTO2_RING_HEAP",
            "PTO2_RING_DEP_POOL",
        ]
        .map(|v| EnvSource::process().get(v));
        let w = start(
            child_builder(1, 0)
                .ring_env("PTO2_RING_TASK_WINDOW", "256")
                .ring_env("PTO2_RING_HEAP", "2097152")
                .ring_env("PTO2_RING_DEP_POOL", "128"),
        );
        // The values are in the child's own process environment.
        let pid = pid_of(&w.chip_name(0).unwrap());
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        for pair in [
            "PTO2_RING_TASK_WINDOW=256",
            "PTO2_RING_HEAP=2097152",
            "PTO2_RING_DEP_POOL=128",
        ] {
            assert!(
                environ.split('\0').any(|e| e == pair),
                "{pair} not in the child's environment"
            );
        }
        let small = RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(MIB)
            .with_dep_pool(64);
        let per_ring = RuntimeEnv::default()
            .with_task_window([128, 64, 32, 16])
            .with_heap([8 * MIB, 4 * MIB, 2 * MIB, MIB])
            .with_dep_pool([256, 128, 64, 64]);
        let base = CallConfig::default();
        let derive = |env: RuntimeEnv| {
            base.derive(&TaskOverrides {
                aicpu_thread_num: None,
                track_war: None,
                runtime_env: env,
            })
            .unwrap()
        };
        let got = sizings(
            &w,
            vec![
                ("small", derive(small)),
                ("per_ring", derive(per_ring)),
                (
                    "heap_only",
                    derive(RuntimeEnv::default().with_heap(4 * MIB)),
                ),
                ("none", base.clone()),
            ],
        );
        use SizeSource::{CallConfig as Cc, Env};
        for (label, expected) in [("small", small), ("per_ring", per_ring)] {
            let s = &got.iter().find(|(l, _)| l == label).unwrap().1;
            for r in Resource::ALL {
                assert_eq!(s.values(r), expected.get(r), "{label} {r:?}");
                assert_eq!(s.sources(r), [Cc; 4], "{label} {r:?}");
            }
        }
        let heap_only = &got[2].1;
        assert_eq!(heap_only.values(Resource::Heap), [4 * MIB; 4]);
        assert_eq!(heap_only.sources(Resource::Heap), [Cc; 4]);
        assert_eq!(heap_only.values(Resource::TaskWindow), [256; 4]);
        assert_eq!(heap_only.sources(Resource::TaskWindow), [Env; 4]);
        let none = &got[3].1;
        assert_eq!(none.values(Resource::TaskWindow), [256; 4]);
        assert_eq!(none.values(Resource::Heap), [2097152; 4]);
        assert_eq!(none.values(Resource::DepPool), [128; 4]);
        for r in Resource::ALL {
            assert_eq!(none.sources(r), [Env; 4], "{r:?}");
        }
        w.close();
        // The parent's environment was neither read for ring sizing nor written.
        let after = [
            "PTO2_RING_TASK_WINDOW",
            "PTO2_RING_HEAP",
            "PTO2_RING_DEP_POOL",
        ]
        .map(|v| EnvSource::process().get(v));
        assert_eq!(before, after);
        assert!(after.iter().all(Option::is_none));
    });
}

/// RING_CONFIG.md T70: one task, call window `[128, 64, 32, 16]`, chip environment W=`64`,
/// through the in-process and the process endpoint: identical `ResolvedSizing`, sources
/// included.
#[test]
fn t70_in_process_and_child_process_resolve_identically() {
    with_timeout(60, || {
        let cfg = CallConfig::with_runtime_env(
            RuntimeEnv::default()
                .with_task_window([128, 64, 32, 16])
                .with_heap(MIB)
                .with_dep_pool(64),
        );
        let mut results = Vec::new();
        for mode in [Mode::InProcess, Mode::ChildProcess] {
            let w = start(builder(mode, 1, 0).ring_env("PTO2_RING_TASK_WINDOW", "64"));
            results.push(sizings(&w, vec![("t70", cfg.clone())]).remove(0).1);
        }
        assert_eq!(results[0], results[1]);
        assert_eq!(
            results[1].sources(Resource::TaskWindow),
            [SizeSource::CallConfig; 4]
        );
    });
}

/// Rows 42 and 43: SIGKILL a chip child mid-task. `wait` fails within 1 s naming the pid and
/// signal 9; the dependent is skipped; the other chip works; later submits to the dead chip
/// fail with `WorkerUnavailable`; after `close` no child process, no segment descriptor of the
/// Worker and nothing new in `/dev/shm` remain.
#[test]
fn n42_n43_sigkill_mid_task_then_close_leaves_nothing() {
    with_timeout(60, || {
        let shm_before = dev_shm();
        // Without restarts the dead lane stays dead, so the later submit below is refused
        // deterministically (restarts: `liveness`).
        let w = start(child_builder(2, 1).restart_children(false));
        let uid = w.uid();
        assert!(
            !worker_memfds(uid).is_empty(),
            "segments are memfds named after the Worker"
        );
        let pids = w.child_pids();
        assert_eq!(pids.len(), 3);
        let victim_name = w.chip_name(0).unwrap();
        let victim = pid_of(&victim_name);
        let fail_if = chip(&w, "fail_if");
        let add = chip(&w, "elementwise_add");
        let copy = copier(&w);
        let (_o, o) = buf(&w, 64, 0.0);
        let (c_buf, c) = buf(&w, 64, -1.0);
        let (_a, a) = buf(&w, 64, 1.0);
        let (i_buf, i) = buf(&w, 64, 0.0);
        let (a2, o2) = (a.clone(), i.clone());
        let run = submit_attn_dependent_independent(&w, [fail_if, copy, add], [o, c, a, i]);
        let e = kill_mid_task(run, victim);
        assert_crash_named_once(&e, &victim_name, victim);
        let dependent = e.report.task("dependent").unwrap();
        assert!(
            matches!(&dependent.outcome, TaskOutcome::Failed(f) if f.kind == FailureKind::Skipped)
        );
        assert!(dependent.dispatched.is_none());
        assert_eq!(c_buf.read_vec::<f32>(0, 64).unwrap(), vec![-1.0; 64]);
        // The independent task on the other chip completes.
        assert!(e.report.task("independent").unwrap().outcome.is_success());
        assert_eq!(i_buf.read_vec::<f32>(0, 64).unwrap(), vec![2.0; 64]);
        assert_dead_chip_refuses_submits(&w, add, a2, o2);
        // Row 43.
        let close = w.close();
        assert_eq!(close.abandoned_runs, 0);
        for pid in pids {
            assert!(
                !is_my_child(pid),
                "child {pid} is still a child of the test process"
            );
            assert!(!running(pid), "child {pid} still runs");
        }
        assert_eq!(worker_memfds(uid), Vec::<String>::new());
        assert_eq!(dev_shm(), shm_before);
    });
}

/// Submits `attn` (10 s on chip 0, into `o`), its `dependent` copy of `o` into `c`, and
/// `independent` (`i = a + a` on chip 1).
fn submit_attn_dependent_independent(
    w: &Worker,
    [fail_if, copy, add]: [pto_node::CallableHandle; 3],
    [o, c, a, i]: [pto_types::Tensor; 4],
) -> pto_node::RunHandle {
    let small = CallConfig::with_runtime_env(
        RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(MIB)
            .with_dep_pool(64),
    );
    w.submit(
        move |orch, _, _| {
            let victim = TaskArgs::new()
                .output_existing(&o)
                .scalar(0u64)
                .scalar(10_000u64)
                .label("attn");
            orch.submit_next_level(&fail_if, victim, &small, 0)?;
            orch.submit_sub(
                &copy,
                TaskArgs::new()
                    .input(&o)
                    .output_existing(&c)
                    .label("dependent"),
            )?;
            orch.submit_next_level(
                &add,
                TaskArgs::new()
                    .input(&a)
                    .input(&a)
                    .output_existing(&i)
                    .label("independent"),
                &small,
                1,
            )?;
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )
    .unwrap()
}

/// Lets the victim start its 10 s kernel, SIGKILLs chip child `victim`, and returns the run's
/// error, which must arrive within 1 s.
fn kill_mid_task(run: pto_node::RunHandle, victim: u32) -> Box<pto_node::RunError> {
    std::thread::sleep(Duration::from_millis(400));
    assert!(!run.is_finished());
    let killed_at = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(victim as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let result = run.wait(Some(Duration::from_secs(1)));
    let took = killed_at.elapsed();
    let Err(WaitError::Failed(e)) = result else {
        panic!("wait must fail with the crash within 1 s, got {result:?}")
    };
    assert!(took < Duration::from_secs(1), "{took:?}");
    e
}

/// The crash error names the killed child (`victim_name`, pid `victim`) once, with signal 9.
fn assert_crash_named_once(e: &pto_node::RunError, victim_name: &str, victim: u32) {
    let text = e.to_string();
    for needle in [
        // The child is named once (issue 10 item 9: no `X: X` duplication).
        format!("task 0 'attn': EndpointFailure: {victim_name} terminated by signal 9 (SIGKILL)"),
        format!("pid={victim}"),
        "signal 9".to_string(),
        "SIGKILL".to_string(),
        "while running task 0 ('attn')".to_string(),
    ] {
        assert!(text.contains(&needle), "{text} does not contain {needle:?}");
    }
    assert_eq!(text.matches(victim_name).count(), 1, "{text}");
    assert_eq!(e.first.kind, FailureKind::Endpoint);
}

/// Later submits to dead chip 0 fail clearly; chip 1 still runs `add` of `a` into `o`.
fn assert_dead_chip_refuses_submits(
    w: &Worker,
    add: pto_node::CallableHandle,
    a: pto_types::Tensor,
    o: pto_types::Tensor,
) {
    let err = w.run(
        move |orch, _, cfg| {
            orch.submit_next_level(
                &add,
                TaskArgs::new().input(&a).input(&a).output_existing(&o),
                cfg,
                1,
            )?;
            let later = orch
                .submit_next_level(&add, TaskArgs::new().input(&a), cfg, 0)
                .unwrap_err();
            assert!(
                matches!(&later, SubmitError::WorkerUnavailable { worker, .. } if worker.starts_with("chip_child[0]")),
                "{later:?}"
            );
            assert!(later.to_string().contains("unavailable"), "{later}");
            assert!(later.to_string().contains("signal 9"), "{later}");
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    );
    assert!(err.is_ok(), "{err:?}");
    let lane = &w.stats().lanes[0];
    assert!(!lane.available && lane.restarts == 0, "{lane:?}");
}

/// Row 44's helper: a process owning a Worker. Runs only when the test below starts it.
#[test]
fn parent_death_helper() {
    let Some(out) = EnvSource::process().get("PTO_TEST_PARENT_HELPER") else {
        return;
    };
    let w = start(child_builder(1, 1));
    let pids: Vec<String> = w.child_pids().iter().map(u32::to_string).collect();
    std::fs::write(out, pids.join(" ")).unwrap();
    std::thread::sleep(Duration::from_secs(60));
    panic!("the helper was not killed");
}

/// Row 44: a process owning a Worker is SIGKILLed; its children exit within 2 s.
#[test]
fn n44_children_exit_when_their_parent_dies() {
    with_timeout(60, || {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("pids");
        // A helper process that owns a Worker, to kill it from outside (row 44).
        #[allow(clippy::disallowed_methods)]
        let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child::parent_death_helper", "--nocapture", "-q"])
            .env("PTO_TEST_PARENT_HELPER", &out)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let pids: Vec<u32> = loop {
            if let Ok(text) = std::fs::read_to_string(&out) {
                let pids: Vec<u32> = text
                    .split_whitespace()
                    .map(|p| p.parse().unwrap())
                    .collect();
                if pids.len() == 2 {
                    break pids;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the helper never started its Worker"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(pids.iter().all(|&p| running(p)));
        helper.kill().unwrap();
        let killed_at = Instant::now();
        helper.wait().unwrap();
        let deadline = killed_at + Duration::from_secs(2);
        while pids.iter().any(|&p| running(p)) {
            assert!(
                Instant::now() < deadline,
                "children {pids:?} still run 2 s after their parent died"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    });
}

/// A closure callable cannot cross the process boundary (row 5), and a sub child reports the
/// failure of a sub function with its own name (§5).
#[test]
fn n05_closures_are_refused_in_child_process_mode() {
    let w = Worker::builder(3)
        .sub_workers(1)
        .endpoint_mode(EndpointMode::ChildProcess)
        .build()
        .unwrap();
    assert_eq!(
        w.register(Callable::sub_closure("c", |_, _| Ok(()))),
        Err(pto_node::RegisterError::ClosureRequiresInProcess)
    );
}

/// Child-process mode with `subs_in_process`: the chip is a child process, the sub worker a
/// thread of this process running a closure (what a Python sub function needs), and a sub
/// task consumes a chip task's output across the two.
#[test]
fn subs_in_process_run_closures_next_to_child_chips() {
    with_timeout(60, || {
        pto_kernels::link();
        let w = Worker::builder(3)
            .chips(1)
            .chip_spec(0, small_chip(4 << 30))
            .sub_workers(1)
            .endpoint_mode(EndpointMode::ChildProcess)
            .subs_in_process(true)
            .heap_ring_size(1 << 20)
            .build()
            .unwrap();
        let add = w.register(Callable::chip("elementwise_add")).unwrap();
        let double = w
            .register(Callable::sub_closure("double", |_, args| {
                let x = args.read::<f32>(0)?;
                let y: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
                args.write(1, &y)
            }))
            .unwrap();
        w.init().unwrap();
        assert!(w.chip_name(0).unwrap().starts_with("chip_child[0] pid="));
        assert_eq!(w.sub_name(0).unwrap(), "sub[0]");
        assert_eq!(w.child_pids().len(), 1, "only the chip is a process");
        const N: usize = 128;
        let (_a, a) = buf(&w, N, 1.5);
        let (_s, sum) = buf(&w, N, 0.0);
        let (out_buf, out) = buf(&w, N, 0.0);
        w.run(
            move |orch, _, cfg| {
                let args = TaskArgs::new().input(&a).input(&a).output_existing(&sum);
                orch.submit_next_level(&add, args, cfg, 0)?;
                orch.submit_sub(&double, TaskArgs::new().input(&sum).output_existing(&out))?;
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
        assert_eq!(out_buf.read_vec::<f32>(0, N).unwrap(), vec![6.0; N]);
        w.close();
    });
}

/// A one-chip child-process Worker starting `exe`, running `out = a + a` with `a` = `value`.
fn add_on_one_child(exe: ChildExe, value: f32) {
    pto_kernels::link();
    let w = Worker::builder(3)
        .chips(1)
        .chip_spec(0, small_chip(4 << 30))
        .endpoint_mode(EndpointMode::ChildProcess)
        .child_exe(exe)
        .heap_ring_size(1 << 20)
        .build()
        .unwrap();
    let add = w.register(Callable::chip("elementwise_add")).unwrap();
    w.init().unwrap();
    const N: usize = 64;
    let (_a, a) = buf(&w, N, value);
    let (out_buf, out) = buf(&w, N, 0.0);
    w.run(
        move |orch, _, cfg| {
            let args = TaskArgs::new().input(&a).input(&a).output_existing(&out);
            orch.submit_next_level(&add, args, cfg, 0)?;
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )
    .unwrap();
    assert_eq!(out_buf.read_vec::<f32>(0, N).unwrap(), vec![2.0 * value; N]);
    w.close();
}

/// `ChildExe::Command`: children run a program with arguments (here this test binary with the
/// arguments that select its child entry, as `CurrentExe` does).
#[test]
fn child_exe_command_runs_a_program_with_its_arguments() {
    with_timeout(60, || {
        let exe = ChildExe::Command {
            program: std::env::current_exe().unwrap(),
            args: ["--exact", "__pto_child", "--nocapture"]
                .map(std::ffi::OsString::from)
                .to_vec(),
        };
        add_on_one_child(exe, 2.0);
    });
}

/// `set_host_child_exe` (what the Python module calls at import) changes what a default
/// `ChildExe::CurrentExe` Worker starts: here a shell that leaves a mark, then becomes this
/// test binary's child entry with the descriptors it inherited.
#[test]
fn a_host_child_exe_replaces_the_current_executable() {
    with_timeout(60, || {
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join("started");
        let script = format!(
            "touch '{}' && exec \"$0\" --exact __pto_child",
            mark.display()
        );
        pto_node::set_host_child_exe(ChildExe::Command {
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                script.into(),
                std::env::current_exe().unwrap().into(),
            ],
        });
        add_on_one_child(ChildExe::CurrentExe, 1.5);
        pto_node::set_host_child_exe(ChildExe::CurrentExe);
        assert!(mark.exists(), "the host's command started the child");
    });
}
