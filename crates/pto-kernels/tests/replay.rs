//! Recorded graphs replayed in chip jobs (`pto_chip::replay`): results equal inference's, the
//! boundary orders replays against the tasks around them, bindings and sizings that do not fit
//! fail at once with a clear error, and diagnostics name the graph.

mod common;

use std::cell::RefCell;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, OrchTensor, RootScope, TensorCreateInfo};
use pto_chip::replay::{GraphInput, RecordedGraph};
use pto_chip::{ChipRunError, Detector, RunContext};
use pto_kernels::bench::{FILL, INC};
use pto_kernels::hazard::{COPY_AFTER, FILL_WITH, OVERWRITE};
use pto_kernels::vector::ADD;
use pto_sizing::advise::{Headroom, advise_graph};
use pto_types::{CallConfig, DType, ErrorCode, RuntimeEnv, TaskArgs};
use serde_json::Value;

const N: u32 = 64;

/// y = x + x; z = y + y; z[0] += 1; returns z (4x, plus 1 at element 0).
fn step_graph() -> RecordedGraph {
    let x = GraphInput::new(&[N], DType::F32).unwrap();
    RecordedGraph::record("step", &[x], |r, ins| {
        let ci = TensorCreateInfo::new(&[N], DType::F32);
        let y = r
            .submit_aiv(
                ADD,
                KernelArgs::new().input(ins[0]).input(ins[0]).output(ci),
            )?
            .tensor(0);
        let z = r
            .submit_aiv(ADD, KernelArgs::new().input(y).input(y).output(ci))?
            .tensor(0);
        r.submit_aiv(INC, KernelArgs::new().inout(z))?;
        Ok(vec![z])
    })
    .unwrap()
}

/// The same step submitted directly (inference).
fn step_inferred<'r>(s: &mut RootScope<'r>, x: OrchTensor<'r>) -> OrchResult<OrchTensor<'r>> {
    let ci = TensorCreateInfo::new(&[N], DType::F32);
    let y = s
        .submit_aiv(ADD, KernelArgs::new().input(x).input(x).output(ci))?
        .tensor(0);
    let z = s
        .submit_aiv(ADD, KernelArgs::new().input(y).input(y).output(ci))?
        .tensor(0);
    s.submit_aiv(INC, KernelArgs::new().inout(z))?;
    Ok(z)
}

thread_local! {
    static GRAPH: RefCell<Option<RecordedGraph>> = const { RefCell::new(None) };
}

fn graph() -> RecordedGraph {
    GRAPH
        .with(|g| g.borrow().clone())
        .expect("a graph is installed")
}

fn install(g: RecordedGraph) {
    GRAPH.with(|slot| *slot.borrow_mut() = Some(g));
}

/// `out = x + zeros`: the entry tensors 1 and 2 of the chain orchestrations.
fn copy_out<'r>(s: &mut RootScope<'r>, x: OrchTensor<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let args = KernelArgs::new().input(x).input(a.tensor(1));
    s.submit_aiv(ADD, args.output_existing(a.tensor(2)))?;
    Ok(())
}

/// Entry: tensors (x, zeros, out), scalar steps; `out = step^steps(x)` by replay.
fn chain_replayed<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = graph();
    let steps: u64 = a.scalar(0);
    let mut x = a.tensor(0);
    for _ in 0..steps {
        x = s.replay(&g, &[x])?[0];
    }
    copy_out(s, x, a)
}

fn chain_inferred<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let steps: u64 = a.scalar(0);
    let mut x = a.tensor(0);
    for _ in 0..steps {
        x = step_inferred(s, x)?;
    }
    copy_out(s, x, a)
}

fn run_chain(orch: pto_chip::orch::OrchFn, steps: u64, cfg: &CallConfig) -> Vec<f32> {
    let chip = chip(2, &[]);
    let (_x, xt) = f32_tensor(N as usize, 1.0);
    let (_z, zt) = f32_tensor(N as usize, 0.0);
    let (out, ot) = f32_tensor(N as usize, -1.0);
    let args = TaskArgs::new()
        .input(&xt)
        .input(&zt)
        .output(&ot)
        .scalar(steps);
    chip.run_fn(orch, &args, cfg, &RunContext::default())
        .unwrap();
    out.read_f32(0, N as usize)
}

#[test]
fn a_replayed_chain_computes_what_inference_computes() {
    with_timeout(60, || {
        install(step_graph());
        assert!(graph().verifies(), "verify mode is on in debug builds");
        let cfg = CallConfig::default();
        let replayed = run_chain(chain_replayed, 5, &cfg);
        let inferred = run_chain(chain_inferred, 5, &cfg);
        assert_eq!(replayed, inferred);
        // 4^5 everywhere; element 0: (((((4+1)·4+1)·4+1)·4+1)·4+1).
        assert_eq!(replayed[0], 1365.0);
        assert!(replayed[1..].iter().all(|&v| v == 1024.0));
        // The same graph in verify-off mode, and in a second run of another chip.
        install(step_graph().verified(false));
        assert_eq!(run_chain(chain_replayed, 5, &cfg), inferred);
    });
}

#[test]
fn the_graph_knows_its_edges_and_needs() {
    let g = step_graph();
    assert_eq!((g.name(), g.num_tasks(), g.num_outputs()), ("step", 3, 1));
    let mut edges: Vec<(usize, usize)> = g.edges().collect();
    edges.sort_unstable();
    assert_eq!(edges, vec![(0, 1), (1, 2)]);
    let at_root = g.needs().at_depth(0);
    assert_eq!(at_root[0].task_window, 3);
    assert_eq!(at_root[0].heap, 2 * 1024, "two 1 KiB-padded outputs");
    assert_eq!(at_root[0].heap_largest_alloc, 1024);
    assert_eq!(at_root[0].dep_pool, 2);
    assert_eq!(at_root[1], Default::default());
    assert_eq!(g.needs().at_depth(7)[3].task_window, 3);
}

/// Entry: tensor (acc) and scalar replays: `acc[0] += 3` per replay, by a graph whose input is
/// INOUT (its writers go through the TensorMap, so replays order one after another).
fn inc_three_times<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = graph();
    let n: u64 = a.scalar(0);
    for _ in 0..n {
        s.scope(|s| s.replay(&g, &[a.tensor(0)]).map(|_| ()))?;
    }
    Ok(())
}

#[test]
fn replays_of_an_inout_input_order_one_after_another() {
    with_timeout(60, || {
        let acc = GraphInput::new(&[N], DType::F32).unwrap();
        install(
            RecordedGraph::record("inc3", &[acc], |r, ins| {
                for _ in 0..3 {
                    r.submit_aiv(INC, KernelArgs::new().inout(ins[0]))?;
                }
                Ok(vec![])
            })
            .unwrap(),
        );
        let chip = chip(4, &[]);
        let (buf, t) = f32_tensor(N as usize, 0.5);
        let args = TaskArgs::new().inout(&t).scalar(40u64);
        let env = RuntimeEnv::default().with_task_window(16);
        chip.run_fn(
            inc_three_times,
            &args,
            &CallConfig::with_runtime_env(env),
            &RunContext::default(),
        )
        .unwrap();
        assert_eq!(buf.read_f32(0, 2), vec![120.5, 0.5]);
    });
}

fn replay_once<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = graph();
    let inputs: Vec<OrchTensor<'r>> = (0..a.num_tensors()).map(|i| a.tensor(i)).collect();
    s.replay(&g, &inputs)?;
    Ok(())
}

fn replay_error(g: RecordedGraph, args: &TaskArgs, env: RuntimeEnv) -> Box<pto_chip::ChipError> {
    install(g);
    let chip = chip(2, &[]);
    match chip.run_fn(
        replay_once,
        args,
        &CallConfig::with_runtime_env(env),
        &RunContext::default(),
    ) {
        Err(ChipRunError::Run(e)) => e,
        other => panic!("expected a run error, got {other:?}"),
    }
}

#[test]
fn a_binding_that_does_not_fit_the_recording_is_a_clear_error() {
    with_timeout(60, || {
        let (_a, a64) = f32_tensor(64, 1.0);
        let (_b, a32) = f32_tensor(32, 1.0);
        let two = || {
            let x = GraphInput::new(&[64], DType::F32).unwrap();
            RecordedGraph::record("two", &[x, x], |r, ins| {
                r.submit_aiv(INC, KernelArgs::new().inout(ins[0]).input(ins[1]))?;
                Ok(vec![])
            })
            .unwrap()
        };
        let cases: Vec<(TaskArgs, &str)> = vec![
            (
                TaskArgs::new().inout(&a64),
                "has 2 input(s), the replay bound 1",
            ),
            (
                TaskArgs::new().inout(&a64).input(&a32),
                "input 1 is bound to a tensor with shape [32] (recorded [64])",
            ),
            (
                TaskArgs::new().inout(&a64).input(&a64),
                "inputs 0 and 1 are bound to overlapping tensors",
            ),
        ];
        for (args, want) in cases {
            let e = replay_error(two(), &args, RuntimeEnv::default());
            assert_eq!(e.code, ErrorCode::InvalidArgs, "{e}");
            assert!(e.detail.contains("graph \"two\""), "{e}");
            assert!(e.detail.contains(want), "want {want:?} in {e}");
        }
        let (_c, i32t) = {
            let buffer = pto_chip::memory::HostMemory::new(64 * 4).unwrap();
            let id = pto_types::BufferId {
                owner_uid: 7,
                buffer_id: 999,
                generation: 0,
            };
            let t =
                pto_types::Tensor::contiguous(buffer.buffer_ref(id), &[64], DType::I32).unwrap();
            (buffer, t)
        };
        let e = replay_error(
            two(),
            &TaskArgs::new().inout(&a64).input(&i32t),
            RuntimeEnv::default(),
        );
        assert!(
            e.detail.contains("input 1 is bound to a tensor with dtype"),
            "{e}"
        );
    });
}

#[test]
fn a_replay_that_cannot_fit_the_rings_fails_at_once_with_the_minimum() {
    with_timeout(60, || {
        let (_a, t) = f32_tensor(64, 1.0);
        let x = GraphInput::new(&[64], DType::F32).unwrap();
        // 100 tasks at the graph's own level: all pinned by the root scope.
        let wide = RecordedGraph::record("wide", &[x], |r, ins| {
            for _ in 0..100 {
                r.submit_aiv(INC, KernelArgs::new().inout(ins[0]))?;
            }
            Ok(vec![])
        })
        .unwrap();
        let e = replay_error(
            wide,
            &TaskArgs::new().inout(&t),
            RuntimeEnv::default().with_task_window(64),
        );
        assert_eq!(e.code, ErrorCode::ScopeDeadlock, "{e}");
        assert_eq!(e.detector, Detector::Immediate);
        assert_eq!(
            (e.ring, e.requested, e.recommended_min),
            (Some(0), Some(100), Some(128))
        );
        assert!(
            e.detail.contains("graph \"wide\"") && e.detail.contains("recommended minimum 128"),
            "{e}"
        );

        // 8 outputs of 4 KiB at the graph's level: 32 KiB pinned on a 16 KiB heap.
        let big = RecordedGraph::record("big", &[x], |r, ins| {
            let mut outs = Vec::new();
            for _ in 0..8 {
                let ci = TensorCreateInfo::new(&[1024], DType::F32);
                outs.push(
                    r.submit_aiv(
                        ADD,
                        KernelArgs::new().input(ins[0]).input(ins[0]).output(ci),
                    )?
                    .tensor(0),
                );
            }
            Ok(outs)
        });
        let e = replay_error(
            big.unwrap(),
            &TaskArgs::new().inout(&t),
            RuntimeEnv::default().with_heap(16 << 10),
        );
        assert_eq!(e.code, ErrorCode::HeapRingDeadlock, "{e}");
        assert_eq!((e.ring, e.requested), (Some(0), Some(32 << 10)));
        assert_eq!(
            e.recommended_min,
            Some(36 << 10),
            "pinned bytes plus the largest allocation"
        );
    });
}

/// 40 slow tracked reads of the input (40 ms each: on the 4 AIV cores of `chip(2)`, more than 16
/// are still running when the overwrite is published, even on a loaded host), then an
/// overwrite of it: the overwrite's 40
/// write-after-read edges go through the graph's boundary (the input), so the replay's lookup
/// finds them, not the recording's wiring; they still count in the graph's dep-pool need.
fn readers_graph() -> RecordedGraph {
    let x = GraphInput::new(&[N], DType::F32).unwrap();
    RecordedGraph::record("readers", &[x], |r, ins| {
        let ci = TensorCreateInfo::new(&[N], DType::F32);
        for _ in 0..40 {
            let read = KernelArgs::new().tracked_input(ins[0]).output(ci);
            r.submit_aiv(COPY_AFTER, read.scalar(40_000u64))?;
        }
        let overwrite = KernelArgs::new().output_existing(ins[0]).scalar(OVERWRITE);
        r.submit_aiv(FILL_WITH, overwrite)?;
        Ok(vec![])
    })
    .unwrap()
}

#[test]
fn edges_found_through_the_boundary_count_in_the_dep_pool_need_and_advice() {
    with_timeout(60, || {
        let g = readers_graph();
        let needs = g.needs().at_depth(0);
        assert_eq!(needs[0].dep_pool, 40, "{needs:?}");
        assert_eq!(needs[0].fanin_spill, 0, "40 edges fit inline");
        let advice = advise_graph(&g, 0, 1, Headroom::parse("0%").unwrap());
        let env = advice.runtime_env();
        assert!(env.ring_dep_pool[0] >= 40, "{:?}", env.ring_dep_pool);
        let (buf, t) = f32_tensor(N as usize, 1.0);
        let args = TaskArgs::new().inout(&t);
        install(g.clone());
        chip(2, &[])
            .run_fn(
                replay_once,
                &args,
                &CallConfig::with_runtime_env(env),
                &RunContext::default(),
            )
            .expect("the advised sizing holds the replay");
        assert!(buf.read_f32(0, N as usize).iter().all(|&v| v == OVERWRITE));

        // A dep pool of 16 cannot hold the overwrite's edges to readers still running.
        let e = replay_error(g, &args, env.with_dep_pool(16));
        assert_eq!(e.code, ErrorCode::DepPoolOverflow, "{e}");
        assert_eq!(e.ring, Some(0), "{e}");
        assert!(e.detail.contains("replaying graph \"readers\""), "{e}");
    });
}

#[test]
fn a_recording_that_is_not_a_graph_is_refused() {
    let x = GraphInput::new(&[16], DType::F32).unwrap();
    let e = RecordedGraph::record("foreign", &[x], |r, ins| {
        r.submit_aiv(
            INC,
            KernelArgs::new()
                .inout(ins[0])
                .dep(pto_chip::TaskId::new(0, 3)),
        )?;
        Ok(vec![])
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("not an earlier task of this graph"),
        "{e}"
    );
    let e = RecordedGraph::record("echo", &[x], |_, ins| Ok(vec![ins[0]])).unwrap_err();
    assert!(
        e.to_string()
            .contains("output 0 is a view of graph input 0"),
        "{e}"
    );
    let e = RecordedGraph::record("bad", &[x], |r, _| {
        r.submit_aiv(INC, KernelArgs::new().block_num(0))?;
        Ok(vec![])
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("task 0: block_num must be at least 1"),
        "{e}"
    );
}

#[test]
fn diagnostics_name_the_graph_of_replayed_tasks() {
    with_timeout(60, || {
        install(step_graph());
        let dir = tempfile::tempdir().unwrap();
        let cfg = CallConfig {
            enable_chip_swimlane: 2,
            enable_dep_gen: true,
            output_prefix: Some(dir.path().to_str().unwrap().to_string()),
            ..CallConfig::default()
        };
        run_chain(chain_replayed, 2, &cfg);
        let found = |name: &str| {
            walk(dir.path())
                .into_iter()
                .find(|p| p.file_name().is_some_and(|f| f == name))
                .unwrap_or_else(|| panic!("{name} written"))
        };
        let deps: Value =
            serde_json::from_str(&std::fs::read_to_string(found("deps.json")).unwrap()).unwrap();
        let tasks = deps["tasks"].as_array().unwrap();
        let replayed = tasks.iter().filter(|t| t["graph"] == "step").count();
        assert_eq!(replayed, 6, "{deps}");
        let trace: Value =
            serde_json::from_str(&std::fs::read_to_string(found("chip_swimlane.json")).unwrap())
                .unwrap();
        let blocks: Vec<&Value> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "kernel")
            .collect();
        assert_eq!(
            blocks
                .iter()
                .filter(|b| b["args"]["graph"] == "step")
                .count(),
            6
        );
        assert_eq!(
            blocks
                .iter()
                .filter(|b| b["args"]["graph"].is_null())
                .count(),
            1
        );
    });
}

/// Entry: tensor (acc); replays `inc3s` (three INOUT tasks in a nested scope) twice.
fn nested_replays<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = graph();
    s.replay(&g, &[a.tensor(0)])?;
    s.replay(&g, &[a.tensor(0)]).map(|_| ())
}

/// The scope stats file written under `dir`, and its end records.
fn scope_stat_ends(dir: &std::path::Path) -> (String, Vec<Value>) {
    let path = walk(dir)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|f| f == "scope_stats.jsonl"))
        .expect("scope stats written");
    let text = std::fs::read_to_string(path).unwrap();
    let ends = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["phase"] == "end")
        .collect();
    (text, ends)
}

#[test]
fn scope_stats_name_the_scopes_of_a_graph() {
    with_timeout(60, || {
        let acc = GraphInput::new(&[N], DType::F32).unwrap();
        install(
            RecordedGraph::record("inc3s", &[acc], |r, ins| {
                r.scope(|r| {
                    for _ in 0..3 {
                        r.submit_aiv(INC, KernelArgs::new().inout(ins[0]))?;
                    }
                    Ok(())
                })?;
                Ok(vec![])
            })
            .unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let cfg = CallConfig {
            enable_scope_stats: true,
            output_prefix: Some(dir.path().to_str().unwrap().to_string()),
            ..CallConfig::default()
        };
        let chip = chip(2, &[]);
        let (buf, t) = f32_tensor(N as usize, 0.0);
        chip.run_fn(
            nested_replays,
            &TaskArgs::new().inout(&t),
            &cfg,
            &RunContext::default(),
        )
        .unwrap();
        assert_eq!(buf.read_f32(0, 1), vec![6.0]);
        let (text, ends) = scope_stat_ends(dir.path());
        let ends: Vec<Value> = ends
            .into_iter()
            .filter(|r| r["site"] == "graph inc3s")
            .collect();
        assert_eq!(ends.len(), 2, "{text}");
        assert!(
            ends.iter().all(|r| r["depth"] == 1 && r["ring"] == 1),
            "{text}"
        );
        // The ring's live tasks during the first scope: its own three.
        assert_eq!(ends[0]["task_window_peak"], 3, "{text}");
        let counted = serde_json::json!([{"graph": "inc3s", "tasks": 3}]);
        assert!(ends.iter().all(|r| r["graphs"] == counted), "{text}");
    });
}

#[test]
fn scope_stats_count_the_tasks_of_a_flat_graph_in_the_scope_that_replayed_it() {
    with_timeout(60, || {
        install(step_graph());
        let dir = tempfile::tempdir().unwrap();
        let cfg = CallConfig {
            enable_scope_stats: true,
            output_prefix: Some(dir.path().to_str().unwrap().to_string()),
            ..CallConfig::default()
        };
        run_chain(chain_replayed, 2, &cfg);
        let (text, ends) = scope_stat_ends(dir.path());
        // One scope, the root: two replays of three tasks, beside the copy submitted there.
        assert_eq!(ends.len(), 1, "{text}");
        let counted = serde_json::json!([{"graph": "step", "tasks": 6}]);
        assert_eq!(ends[0]["graphs"], counted, "{text}");
        // The file still reads back as scope stats (pto-sizing's parser).
        pto_sizing::advise::ScopeStats::parse(&text).expect("valid scope stats");
    });
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Entry: tensor (buf of 40 f32); replays the installed two-input-view graph over elements
/// 3..35 seen as 4 × 8, then reads element [0, 0] of that view.
fn offset_binding<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = graph();
    let view = a
        .tensor(0)
        .slice(0, 3, 32)
        .and_then(|t| t.reshape(&[4, 8]))
        .map_err(|e| s.report_fatal(e.to_string()))?;
    s.replay(&g, &[view])?;
    s.replay(&g, &[view]).map(|_| ())
}

#[test]
fn an_input_bound_at_another_offset_replays_under_verify() {
    with_timeout(60, || {
        // Recorded at offset 0, the two halves of each row are disjoint boxes; bound at offset
        // 3 the geometry may classify them differently. Boundary arguments are looked up at
        // the bound offsets, so verify has nothing to disagree with.
        let x = GraphInput::new(&[4, 8], DType::F32).unwrap();
        install(
            RecordedGraph::record("halves", &[x], |r, ins| {
                let left = ins[0].view(&[4, 4], &[0, 0]).unwrap();
                let right = ins[0].view(&[4, 4], &[0, 4]).unwrap();
                r.submit_aiv(FILL, KernelArgs::new().output_existing(left))?;
                r.submit_dummy(KernelArgs::new().input(right))?;
                Ok(vec![])
            })
            .unwrap(),
        );
        let chip = chip(2, &[]);
        let (buf, t) = f32_tensor(40, 0.0);
        chip.run_fn(
            offset_binding,
            &TaskArgs::new().inout(&t),
            &CallConfig::default(),
            &RunContext::default(),
        )
        .unwrap();
        // The view's left half (columns 0..4 of each row of 8, from element 3) is filled.
        let got = buf.read_f32(0, 40);
        let want: Vec<f32> = (0..40)
            .map(|e| {
                if (3..35).contains(&e) && (e - 3) % 8 < 4 {
                    1.0
                } else {
                    0.0
                }
            })
            .collect();
        assert_eq!(got, want);
    });
}

#[test]
fn empty_outputs_record_and_replay() {
    with_timeout(60, || {
        let x = GraphInput::new(&[N], DType::F32).unwrap();
        install(
            RecordedGraph::record("empty", &[x], |r, ins| {
                let empty = r
                    .alloc_tensors(&[TensorCreateInfo::new(&[0], DType::F32)])?
                    .tensor(0);
                let full = r
                    .alloc_tensors(&[TensorCreateInfo::new(&[N], DType::F32)])?
                    .tensor(0);
                r.submit_dummy(KernelArgs::new().input(empty).input(full))?;
                r.submit_aiv(INC, KernelArgs::new().inout(ins[0]))?;
                Ok(vec![empty, full])
            })
            .unwrap(),
        );
        let chip = chip(2, &[]);
        let (buf, t) = f32_tensor(N as usize, 0.0);
        chip.run_fn(
            replay_once,
            &TaskArgs::new().inout(&t),
            &CallConfig::default(),
            &RunContext::default(),
        )
        .unwrap();
        assert_eq!(buf.read_f32(0, 1), vec![1.0]);
    });
}

/// Entry: tensor (acc); replays the installed graph three scopes down (depth 3, ring 3).
fn replay_at_depth_3<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let g = graph();
    let acc = a.tensor(0);
    s.scope(|s| s.scope(|s| s.scope(|s| s.replay(&g, &[acc]).map(|_| ()))))
}

#[test]
fn nested_scopes_sharing_ring_3_are_counted_and_fail_at_once() {
    with_timeout(60, || {
        // t0, then 10 scopes of one task: at depth 3 every scope shares ring 3 with t0, whose
        // open scope pins everything after it: 11 live tasks.
        let x = GraphInput::new(&[N], DType::F32).unwrap();
        let g = RecordedGraph::record("deep", &[x], |r, ins| {
            r.submit_aiv(INC, KernelArgs::new().inout(ins[0]))?;
            for _ in 0..10 {
                r.scope(|r| {
                    r.submit_aiv(INC, KernelArgs::new().inout(ins[0]))
                        .map(|_| ())
                })?;
            }
            Ok(vec![])
        })
        .unwrap();
        assert_eq!(g.needs().at_depth(3)[3].task_window, 11);
        assert_eq!(
            g.needs().at_depth(0)[1].task_window,
            1,
            "at depth 0 the scopes free theirs"
        );
        install(g);
        let chip = chip(2, &[]);
        let (buf, t) = f32_tensor(N as usize, 0.0);
        let run = |window: u64| {
            chip.run_fn(
                replay_at_depth_3,
                &TaskArgs::new().inout(&t),
                &CallConfig::with_runtime_env(
                    RuntimeEnv::default().with_task_window([1024, 1024, 1024, window]),
                ),
                &RunContext::default(),
            )
        };
        match run(8) {
            Err(ChipRunError::Run(e)) => {
                assert_eq!(e.code, ErrorCode::ScopeDeadlock, "{e}");
                assert_eq!(e.detector, Detector::Immediate, "{e}");
                assert_eq!((e.ring, e.recommended_min), (Some(3), Some(16)), "{e}");
            }
            other => panic!("expected an upfront failure, got {other:?}"),
        }
        run(16).unwrap();
        assert_eq!(buf.read_f32(0, 1), vec![11.0]);
    });
}

#[test]
fn ids_of_another_recording_and_oversized_buffers_are_refused() {
    let leaked = std::cell::Cell::new(None);
    RecordedGraph::record("first", &[], |r, _| {
        leaked.set(Some(r.submit_dummy(KernelArgs::new())?.task_id()));
        Ok(vec![])
    })
    .unwrap();
    let e = RecordedGraph::record("second", &[], |r, _| {
        r.submit_dummy(KernelArgs::new())?;
        r.submit_dummy(KernelArgs::new().dep(leaked.get().unwrap()))?;
        Ok(vec![])
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("task 1: explicit dependency on"),
        "{e}"
    );

    assert!(GraphInput::new(&[u32::MAX, u32::MAX, u32::MAX], DType::F32).is_err());
    let e = RecordedGraph::record("huge", &[], |r, _| {
        let ci = TensorCreateInfo::new(&[u32::MAX, u32::MAX, 4], DType::U8);
        r.alloc_tensors(&[ci])?;
        Ok(vec![])
    })
    .unwrap_err();
    assert!(e.to_string().contains("exceeds every heap"), "{e}");
}
