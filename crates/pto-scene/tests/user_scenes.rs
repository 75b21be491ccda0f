//! Scenes registered from outside `pto-scene` (this test crate stands for a user's crate): an
//! [`L2Scene`] declared by inputs and golden, found by name in scene files, with the golden
//! comparison and the `expect_failure` case key deciding the verdict, in both modes.

use std::path::Path;
use std::time::Duration;

use pto_node::EndpointMode;
use pto_scene::runner::{CaseReport, Diagnostics, RunOptions, run_file};
use pto_scene::{CaseRun, EntryArgs, EntryTensor, L2Scene, Param, RunnerEnv, SceneFile};
use pto_types::{DType, TensorTag};

pto_node::test_child_entry!();

static PARAMS: &[Param] = &[
    Param::new("n", 1, 1 << 16, 256, "elements"),
    Param::new("wrong_golden", 0, 1, 0, "1: the golden expects 1 too much"),
];

/// `vector_example` computes `(a+b+1)(a+b+2)+(a+b)`: 47 for a = 2, b = 3.
fn inputs(case: &CaseRun<'_>) -> anyhow::Result<EntryArgs> {
    let n: u32 = case.param("n")?;
    let filled = |v: f32| vec![v; n as usize];
    Ok(EntryArgs::new()
        .tensor(EntryTensor::f32s(TensorTag::Input, &filled(2.0), &[n]))
        .tensor(EntryTensor::f32s(TensorTag::Input, &filled(3.0), &[n]))
        .tensor(EntryTensor::zeros(TensorTag::OutputExisting, DType::F32, &[n]).named("f")))
}

fn golden(case: &CaseRun<'_>, args: &mut EntryArgs) -> anyhow::Result<()> {
    let off = case.param::<u32>("wrong_golden")? as f32;
    let n = args.tensors[2].to_f32s().len();
    let mut want = vec![47.0; n];
    want[n - 1] += off;
    args.tensors[2].set_f32s(&want);
    Ok(())
}

pto_scene::register_scene!(
    L2Scene::new("user_vector", "vector_example", inputs, golden).with_params(PARAMS)
);

fn run(text: &str, mode: EndpointMode) -> Vec<CaseReport> {
    let file = SceneFile::parse(Path::new("user.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    let out = tempfile::tempdir().unwrap();
    let options = RunOptions {
        case: None,
        output: out.path().to_path_buf(),
        diagnostics: Diagnostics::default(),
        env: RunnerEnv {
            task_timeout: Some(Duration::from_secs(60)),
            ..RunnerEnv::new(mode, true)
        },
    };
    run_file(&file, &options, |_| {}).unwrap()
}

const CASES: &str = r#"
scene = "user_vector"
level = 2
[[cases]]
name = "right"
[cases.config.runtime_env]
ring_heap = [1048576, 1048576, 1024, 1024]
[[cases]]
name = "wrong"
params = { wrong_golden = 1 }
[[cases]]
name = "too_small_as_expected"
expect_failure = "HEAP_RING_DEADLOCK"
[cases.config.runtime_env]
ring_heap = 1024
[[cases]]
name = "expected_but_fits"
expect_failure = "HEAP_RING_DEADLOCK"
"#;

#[test]
fn a_user_scene_runs_with_its_golden_and_expectations_in_both_modes() {
    for mode in [EndpointMode::InProcess, EndpointMode::ChildProcess] {
        let reports = run(CASES, mode);
        let by_name = |n: &str| reports.iter().find(|r| r.name == n).unwrap();
        let right = by_name("right");
        assert!(right.result.passed(), "{mode:?}: {:?}", right.result.check);
        assert_eq!(right.result.rows[0].check_cell(), "ok");

        let wrong = by_name("wrong").result.check.clone().unwrap_err();
        assert!(
            wrong.contains("tensor 2 (f): 1 of 256 elements differ")
                && wrong.contains("first at [255]: got 47, expected 48"),
            "{mode:?}: {wrong}"
        );

        let small = by_name("too_small_as_expected");
        assert!(small.result.passed(), "{mode:?}: {:?}", small.result.check);
        assert_eq!(
            small.result.rows[0].check_cell(),
            "expected FAIL (HEAP_RING_DEADLOCK)"
        );

        let fits = by_name("expected_but_fits")
            .result
            .check
            .clone()
            .unwrap_err();
        assert_eq!(
            fits,
            "expected HEAP_RING_DEADLOCK, but every task succeeded"
        );
    }
}

#[test]
fn registered_scenes_are_listed_and_bad_expectations_fail_at_load() {
    assert!(pto_scene::scene::scene_names().contains(&"user_vector"));
    assert!(pto_scene::scene::scene_names().contains(&"vector_example"));
    let bad = |extra: &str| {
        let text = format!("scene = \"user_vector\"\n[[cases]]\nname = \"c\"\n{extra}\n");
        match SceneFile::parse(Path::new("u.toml"), &text) {
            Ok(_) => panic!("{extra} loaded"),
            Err(e) => e.to_string(),
        }
    };
    let e = bad("expect_failure = \"HEAP_FULL\"");
    assert!(
        e.contains("expect_failure: \"HEAP_FULL\" is not an error code (codes: SCOPE_DEADLOCK"),
        "{e}"
    );
    let e = bad("ignore = 3");
    assert!(e.contains("ignore: must be a boolean or the reason"), "{e}");
    let number = "scene = \"user_vector\"\n[[cases]]\nname = \"c\"\nexpect_failure = 2\n";
    let file = SceneFile::parse(Path::new("u.toml"), number).unwrap();
    assert_eq!(
        file.cases[0].expect_failure,
        Some(pto_types::ErrorCode::HeapRingDeadlock)
    );
}
