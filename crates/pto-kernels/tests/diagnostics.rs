//! Scope stats, the DAG dump and the swimlane trace of a run (CHIP_RUNTIME.md §7, §8; rows
//! ST1, ST2; RING_CONFIG.md T59).

mod common;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::RunContext;
use pto_types::{CallConfig, RuntimeEnv, TaskArgs};
use serde_json::Value;

const N: usize = 16384;

/// How the DAG dump's DOT file starts.
const DOT_HEADER: &str = "digraph pto {";

fn vector_args() -> (Vec<std::sync::Arc<pto_chip::memory::HostMemory>>, TaskArgs) {
    let (a_buf, a) = f32_tensor(N, 2.0);
    let (b_buf, b) = f32_tensor(N, 3.0);
    let (f_buf, f) = f32_tensor(N, 0.0);
    (
        vec![a_buf, b_buf, f_buf],
        TaskArgs::new().input(&a).input(&b).output_existing(&f),
    )
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

#[test]
fn st1_t59_scope_stats_of_the_vector_example() {
    with_timeout(60, || {
        let dir = tempfile::tempdir().unwrap();
        let chip = chip(2, &[("PTO2_RING_HEAP", "4194304")]);
        let (_bufs, args) = vector_args();
        let cfg = CallConfig {
            enable_scope_stats: true,
            output_prefix: Some(dir.path().to_str().unwrap().to_string()),
            runtime_env: RuntimeEnv::default().with_task_window([128, 64, 32, 16]),
            ..CallConfig::default()
        };
        let report = chip
            .run("vector_example", &args, &cfg, &RunContext::default())
            .unwrap();
        let path = dir.path().join("scope_stats/scope_stats.jsonl");
        assert!(report.diagnostics.contains(&path));
        let records = lines(&path);
        let meta = &records[0];
        assert_eq!(meta["schema"], "pto.scope_stats");
        assert_eq!(meta["fatal"], false);
        assert_eq!(meta["total"], 5);
        assert_eq!(
            meta["task_window_max"],
            serde_json::json!([128, 64, 32, 16])
        );
        assert_eq!(
            meta["task_window_source"],
            serde_json::json!(["call_config", "call_config", "call_config", "call_config"])
        );
        assert_eq!(
            meta["heap_max"],
            serde_json::json!([4194304, 4194304, 4194304, 4194304])
        );
        assert_eq!(
            meta["heap_source"],
            serde_json::json!(["env", "env", "env", "env"])
        );
        assert_eq!(
            meta["dep_pool_source"],
            serde_json::json!(["default", "default", "default", "default"])
        );
        for key in [
            "task_window_max",
            "heap_max",
            "dep_pool_max",
            "task_window_source",
            "heap_source",
            "dep_pool_source",
        ] {
            assert_eq!(meta[key].as_array().unwrap().len(), 4, "{key}");
        }
        // ST1: root begin, scope begin, scope end, root end.
        let samples = &records[1..];
        assert_eq!(samples.len(), 4);
        let phases: Vec<(&str, u64)> = samples
            .iter()
            .map(|s| (s["phase"].as_str().unwrap(), s["depth"].as_u64().unwrap()))
            .collect();
        assert_eq!(phases, [("begin", 0), ("begin", 1), ("end", 1), ("end", 0)]);
        let inner_end = &samples[2];
        assert_eq!(inner_end["ring"], 1);
        let window = inner_end["task_window_end"].as_u64().unwrap()
            - inner_end["task_window_start"].as_u64().unwrap();
        assert_eq!(window, 4);
        assert_eq!(inner_end["heap_end"], 196608);
        assert_eq!(inner_end["task_window_peak"], 4);
        assert_eq!(inner_end["heap_peak"], 196608);
        assert_eq!(inner_end["heap_largest_alloc"], 65536);
        assert!(inner_end["site"].as_str().unwrap().contains("vector.rs:"));
        let seqs: Vec<u64> = samples.iter().map(|s| s["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
    });
}

#[test]
fn dep_gen_writes_the_dag_as_json_and_dot() {
    with_timeout(60, || {
        let dir = tempfile::tempdir().unwrap();
        let chip = chip(2, &[]);
        let (_bufs, args) = vector_args();
        let cfg = CallConfig {
            enable_dep_gen: true,
            output_prefix: Some(dir.path().to_str().unwrap().to_string()),
            ..CallConfig::default()
        };
        chip.run("vector_example", &args, &cfg, &RunContext::default())
            .unwrap();
        let deps: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("dep_gen/deps.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(deps["tasks"].as_array().unwrap().len(), 5);
        // §9.1: all edges are creator edges: t0→t1, t0→t2, t1→t3, t2→t3, t3→t4, t0→t4.
        let mut edges: Vec<(String, String)> = deps["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                assert_eq!(e["kinds"], serde_json::json!(["creator"]));
                (
                    e["from"].as_str().unwrap().to_string(),
                    e["to"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        edges.sort();
        let expect = [
            ("r0:0", "r1:0"),
            ("r0:0", "r1:1"),
            ("r0:0", "r1:3"),
            ("r1:0", "r1:2"),
            ("r1:1", "r1:2"),
            ("r1:2", "r1:3"),
        ];
        let expect: Vec<(String, String)> = expect
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(edges, expect);
        let dot = std::fs::read_to_string(dir.path().join("dep_gen/deps.dot")).unwrap();
        assert!(dot.starts_with(DOT_HEADER));
        assert!(dot.contains("\"r0:0\" -> \"r1:3\""));
    });
}

#[test]
fn swimlane_trace_has_the_documented_fields_at_every_level() {
    with_timeout(60, || {
        for level in 1..=4u8 {
            let dir = tempfile::tempdir().unwrap();
            let chip = chip(2, &[]);
            let (_bufs, args) = vector_args();
            let cfg = CallConfig {
                enable_chip_swimlane: level,
                output_prefix: Some(dir.path().to_str().unwrap().to_string()),
                ..CallConfig::default()
            };
            let ctx = RunContext {
                chip: 3,
                label: Some("small".into()),
                l3: Some((2, 5)),
            };
            chip.run("vector_example", &args, &cfg, &ctx).unwrap();
            let path = dir
                .path()
                .join("chip3/run2_task5_small/swimlane/chip_swimlane.json");
            let trace: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let events = trace["traceEvents"].as_array().unwrap();
            let kernels: Vec<&Value> = events
                .iter()
                .filter(|e| e["ph"] == "X" && e["cat"] == "kernel")
                .collect();
            assert_eq!(kernels.len(), 5, "level {level}: one slice per block");
            for k in &kernels {
                assert_eq!(k["pid"], 1);
                let tid = k["tid"].as_u64().unwrap();
                assert!((1000..1006).contains(&tid));
                assert!(k["ts"].as_f64().unwrap() >= 0.0 && k["dur"].as_f64().unwrap() >= 0.0);
                assert!(k["name"].as_str().unwrap().starts_with("vector."));
                assert!(k["args"]["task"].is_string() && k["args"]["block"] == "0/1");
                assert_eq!(k["args"]["dispatch_us"].is_number(), level >= 2);
            }
            let names: Vec<&str> = events
                .iter()
                .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
                .map(|e| e["args"]["name"].as_str().unwrap())
                .collect();
            assert!(
                names.contains(&"AIC0")
                    && names.contains(&"AIV2")
                    && names.contains(&"orchestrator")
            );
            let flows = events.iter().filter(|e| e["ph"] == "s").count();
            assert_eq!(flows > 0, level >= 2, "level {level}: flow arrows");
            let sched = events
                .iter()
                .filter(|e| e["ph"] == "X" && e["pid"] == 2 && e["tid"] != 1)
                .count();
            assert_eq!(sched > 0, level >= 3, "level {level}: scheduler lanes");
            let orch = events
                .iter()
                .filter(|e| e["ph"] == "X" && e["pid"] == 2 && e["tid"] == 1)
                .count();
            assert_eq!(orch > 0, level >= 4, "level {level}: orchestrator lane");
            assert_eq!(trace["otherData"]["level"], level);
            assert_eq!(trace["otherData"]["label"], "small");
            assert_eq!(trace["otherData"]["dropped"], 0);
        }
    });
}

#[test]
fn diagnostics_are_written_for_failed_runs_too() {
    with_timeout(60, || {
        let dir = tempfile::tempdir().unwrap();
        let chip = chip(2, &[]);
        let (_bufs, args) = vector_args();
        let cfg = CallConfig {
            enable_scope_stats: true,
            output_prefix: Some(dir.path().to_str().unwrap().to_string()),
            runtime_env: RuntimeEnv::default().with_heap([1 << 20, 131072, 1 << 20, 1 << 20]),
            ..CallConfig::default()
        };
        assert!(
            chip.run("vector_example", &args, &cfg, &RunContext::default())
                .is_err()
        );
        let records = lines(&dir.path().join("scope_stats/scope_stats.jsonl"));
        let meta = &records[0];
        assert_eq!(meta["fatal"], true);
        assert_eq!(meta["error"]["name"], "HEAP_RING_DEADLOCK");
        assert_eq!(meta["error"]["ring"], 1);
        assert_eq!(meta["error"]["resource"], "heap");
        assert_eq!(meta["error"]["recommended_min"], 196608);
        // Every begin has its end, even though the run failed inside the scope.
        let begins = records[1..]
            .iter()
            .filter(|r| r["phase"] == "begin")
            .count();
        let ends = records[1..].iter().filter(|r| r["phase"] == "end").count();
        assert_eq!(begins, ends);
    });
}
