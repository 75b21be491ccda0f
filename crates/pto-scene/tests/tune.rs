//! Issue 11 "Done when": every shipped scene case goes through `pto tune`'s loop; the verified
//! advised case reruns with the scene's golden check passing, reserves no more than the case
//! as written, and fits its heaps within 1.5× their high-water where it has heap traffic.

use std::path::{Path, PathBuf};

use pto_node::EndpointMode;
use pto_scene::figures::CaseFigures;
use pto_scene::tune::{TuneOptions, Verdict, tune_case};
use pto_scene::{RunnerEnv, SceneFile};
use pto_sizing::advise::Headroom;
use pto_testkit::with_timeout;

pto_node::test_child_entry!();

fn scenes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes")
}

fn env(mode: EndpointMode) -> RunnerEnv {
    RunnerEnv::new(mode, true)
}

fn tune_every_case(file: &'static str, mode: EndpointMode) {
    let path = scenes_dir().join(file);
    with_timeout(110, move || {
        let scene = SceneFile::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let work = tempfile::tempdir().unwrap();
        for case in &scene.cases {
            let options = TuneOptions {
                headroom: Headroom::parse("0").unwrap(),
                max_rounds: 4,
                work: work.path().join(&case.name),
                env: env(mode),
            };
            let t = tune_case(&scene, &case.name, &options).unwrap();
            let at = format!("{file} case {}", case.name);
            match &t.verdict {
                Verdict::Skipped(why) => {
                    assert!(why.contains("expected failure"), "{at}: {why}");
                    continue;
                }
                Verdict::Failed(why) => panic!("{at}: not verified: {why}"),
                Verdict::Verified => {}
            }
            let (before, after) = (&t.before().report, &t.after().report);
            assert!(after.result.passed(), "{at}: {:?}", after.result.check);
            assert!(after.result.rows.iter().all(|r| r.error.is_none()), "{at}");
            assert_eq!(
                before.result.rows.len(),
                after.result.rows.len(),
                "{at}: the same tasks ran"
            );
            let device =
                |r: &pto_scene::runner::CaseReport| CaseFigures::of(&r.result).device_memory();
            assert!(
                device(after) <= device(before),
                "{at}: the advice reserves {} > {}",
                device(after),
                device(before)
            );
            // And no task's arena grows.
            for row in &after.result.rows {
                let was = before.result.rows.iter().find(|r| r.task == row.task);
                let was = was.map_or(u64::MAX, |r| r.reserved_bytes);
                assert!(
                    row.reserved_bytes <= was,
                    "{at}: task {} arena grew",
                    row.task
                );
            }
            if let Some(ratio) = t.heap_ratio() {
                assert!(ratio <= 1.5, "{at}: heap reserved/high-water {ratio:.2}");
            }
            // Every advised value is concrete: nothing falls back to a default.
            let advised = t.advised.as_ref().unwrap();
            let text = pto_scene::advice::case_toml(advised);
            assert!(
                !text.contains(" 0,") && !text.contains("[0,") && !text.contains(", 0]"),
                "{at}: {text}"
            );
            for row in &after.result.rows {
                let sizing = row.sizing.as_ref().unwrap();
                for res in pto_types::Resource::ALL {
                    assert!(
                        sizing
                            .get(res)
                            .iter()
                            .all(|v| v.source
                                == pto_types::ring_config::resolve::SizeSource::CallConfig),
                        "{at}: task {} {res} not from call_config",
                        row.task
                    );
                }
            }
        }
    });
}

#[test]
fn tune_vector_example() {
    tune_every_case("vector_example.toml", EndpointMode::InProcess);
}

#[test]
fn tune_per_task_runtime_env_l2() {
    tune_every_case("per_task_runtime_env_l2.toml", EndpointMode::InProcess);
}

#[test]
fn tune_paged_attention() {
    tune_every_case("paged_attention.toml", EndpointMode::InProcess);
}

#[test]
fn tune_per_task_runtime_env() {
    tune_every_case("per_task_runtime_env.toml", EndpointMode::InProcess);
}

#[test]
fn tune_multi_chip_dispatch_in_child_processes() {
    tune_every_case("multi_chip_dispatch.toml", EndpointMode::ChildProcess);
}

#[test]
fn tune_heterogeneous_fanout() {
    tune_every_case("heterogeneous_fanout.toml", EndpointMode::InProcess);
}
