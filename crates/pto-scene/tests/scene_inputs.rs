//! Issue 10 (items 6 and 7): scene inputs cannot crash the runner. Thousands of mutations of
//! every shipped scene file (params, config, names, labels, structure, raw bytes) go through
//! the loader: none may panic, and every refusal is a `LoadError` (exit status 2 in `pto run`)
//! of one line naming the file. Files that still load, from the small mutations, are also run
//! (fast mode, one case, under a time bound): no panic anywhere (chip threads included), no
//! hang, and nothing written outside the output directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use pto_node::EndpointMode;
use pto_scene::runner::{Diagnostics, RunOptions, run_file};
use pto_scene::{RunnerEnv, SceneFile};
use pto_testkit::with_timeout;
use toml::{Table, Value};

// Child-process mode re-executes this test binary; this is the children's entry.
pto_node::test_child_entry!();

/// The longest refusal message: user strings are cut, key lists capped.
const MAX_MESSAGE_CHARS: usize = 1000;

/// `(file name, text)` of every shipped scene file, sorted.
fn shipped() -> &'static [(String, String)] {
    static FILES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenes");
        let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect();
        files.sort();
        assert!(
            files.len() >= 6,
            "shipped scenes not found in {}",
            dir.display()
        );
        files
    })
}

/// Counts every panic of the process (chip and worker threads too) from the first call on.
fn panics() -> &'static AtomicUsize {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            COUNT.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
    &COUNT
}

// ----- values and names ---------------------------------------------------------------------

fn interesting_int() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(1),
        Just(-1),
        Just(2),
        Just(64),
        Just(65),
        Just(1 << 31),
        Just(1 << 32),
        Just((1 << 32) + 1),
        Just(i64::MAX),
        Just(i64::MIN),
        0i64..5000,
        any::<i64>(),
    ]
}

fn weird_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => interesting_int().prop_map(Value::Integer),
        1 => prop_oneof![Just(1.5f64), Just(f64::NAN), Just(f64::INFINITY), Just(-0.0), Just(1e300)]
            .prop_map(Value::Float),
        1 => weird_name().prop_map(Value::String),
        1 => any::<bool>().prop_map(Value::Boolean),
        1 => prop::collection::vec(interesting_int().prop_map(Value::Integer), 0..6)
            .prop_map(Value::Array),
        1 => Just(Value::Table(Table::from_iter([("a".to_string(), Value::Integer(1))]))),
    ]
}

fn weird_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("../x".to_string()),
        Just("a/b".to_string()),
        Just(".".to_string()),
        Just("..".to_string()),
        Just(String::new()),
        Just("/etc".to_string()),
        Just("x".repeat(65)),
        Just("y".repeat(5000)),
        Just("nul\0byte".to_string()),
        Just("new\nline".to_string()),
        "[A-Za-z0-9_.-]{1,70}",
        ".{0,40}",
    ]
}

// ----- mutations ----------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Mutation {
    /// `cases[case].params.<key> = value` (a declared key or any other).
    Param(usize, String, Value),
    /// `cases[case].params.<one of the scene's declared keys> = value`.
    DeclaredParam(usize, prop::sample::Index, i64),
    /// `cases[case].config.<path> = value`.
    Config(usize, Vec<String>, Value),
    Name(usize, String),
    /// `cases[case].config.tasks.<label>.aicpu_thread_num = 2`.
    Label(usize, String),
    /// Removes a top-level key, or a key of a case.
    Remove(Option<usize>, String),
    /// Sets a top-level key (`scene`, `level`, `cases`, or another).
    Top(String, Value),
    DuplicateCase(usize),
}

const PARAM_KEYS: [&str; 15] = [
    "n",
    "clusters",
    "batch",
    "heads",
    "d",
    "block",
    "ctx",
    "max_model_len",
    "seed",
    "chip_mib",
    "small_chips_mib",
    "expect_exhausted",
    "m",
    "N",
    "",
];

fn config_path() -> impl Strategy<Value = Vec<String>> {
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    prop_oneof![
        Just(path(&["device_count"])),
        Just(path(&["num_sub_workers"])),
        Just(path(&["aicpu_thread_num"])),
        Just(path(&["runtime_env", "ring_task_window"])),
        Just(path(&["runtime_env", "ring_heap"])),
        Just(path(&["runtime_env", "ring_dep_pool"])),
        Just(path(&["runtime_env", "ring_heep"])),
        Just(path(&["tasks", "attn", "runtime_env", "ring_heap"])),
        Just(path(&["tasks", "ew", "aicpu_thread_num"])),
        Just(path(&["block_dim"])),
        Just(path(&["tasks"])),
        Just(path(&["runtime_env"])),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let case = 0usize..5;
    prop_oneof![
        4 => (case.clone(), prop::sample::select(&PARAM_KEYS[..]), weird_value())
            .prop_map(|(c, k, v)| Mutation::Param(c, k.to_string(), v)),
        3 => (case.clone(), config_path(), weird_value())
            .prop_map(|(c, p, v)| Mutation::Config(c, p, v)),
        2 => (case.clone(), weird_name()).prop_map(|(c, n)| Mutation::Name(c, n)),
        1 => (case.clone(), weird_name()).prop_map(|(c, l)| Mutation::Label(c, l)),
        1 => (
            prop::option::of(case.clone()),
            prop::sample::select(&["scene", "cases", "level", "name", "params", "config"][..])
        )
            .prop_map(|(c, k)| Mutation::Remove(c, k.to_string())),
        1 => (
            prop::sample::select(&["scene", "level", "cases", "extra"][..]),
            prop_oneof![
                weird_value(),
                prop::sample::select(&["vector_example", "paged_attention", "multi_chip_dispatch", "heterogeneous_fanout", "nope"][..])
                    .prop_map(|s| Value::String(s.to_string())),
            ]
        )
            .prop_map(|(k, v)| Mutation::Top(k.to_string(), v)),
        1 => case.prop_map(Mutation::DuplicateCase),
    ]
}

/// The table of case `i` (modulo the number of cases), if `cases` is an array of tables.
fn case_mut(doc: &mut Table, i: usize) -> Option<&mut Table> {
    let Some(Value::Array(cases)) = doc.get_mut("cases") else {
        return None;
    };
    let n = cases.len();
    match cases.get_mut(i % n.max(1)) {
        Some(Value::Table(t)) => Some(t),
        _ => None,
    }
}

/// The table at `path` under `table`, created (or replaced, when not a table) as needed.
fn table_at<'t>(table: &'t mut Table, path: &[String]) -> &'t mut Table {
    let mut t = table;
    for key in path {
        let entry = t
            .entry(key.clone())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        t = entry.as_table_mut().expect("just made a table");
    }
    t
}

fn set(table: &mut Table, path: &[String], value: Value) {
    let (last, parents) = path.split_last().expect("a non-empty path");
    table_at(table, parents).insert(last.clone(), value);
}

fn apply(doc: &mut Table, m: &Mutation) {
    match m {
        Mutation::Param(c, key, value) => {
            if let Some(case) = case_mut(doc, *c) {
                set(case, &["params".into(), key.clone()], value.clone());
            }
        }
        Mutation::DeclaredParam(c, key, value) => {
            let scene = doc.get("scene").and_then(Value::as_str).unwrap_or("");
            let Ok(scene) = pto_scene::scene::find_scene(scene) else {
                return;
            };
            let Some(spec) = (!scene.params().is_empty()).then(|| key.get(scene.params())) else {
                return;
            };
            if let Some(case) = case_mut(doc, *c) {
                let path = ["params".to_string(), spec.name.to_string()];
                set(case, &path, Value::Integer(*value));
            }
        }
        Mutation::Config(c, path, value) => {
            if let Some(case) = case_mut(doc, *c) {
                let mut full = vec!["config".to_string()];
                full.extend(path.iter().cloned());
                set(case, &full, value.clone());
            }
        }
        Mutation::Name(c, name) => {
            if let Some(case) = case_mut(doc, *c) {
                case.insert("name".into(), Value::String(name.clone()));
            }
        }
        Mutation::Label(c, label) => {
            if let Some(case) = case_mut(doc, *c) {
                let path = ["config", "tasks", label, "aicpu_thread_num"].map(String::from);
                set(case, &path, Value::Integer(2));
            }
        }
        Mutation::Remove(None, key) => {
            doc.remove(key);
        }
        Mutation::Remove(Some(c), key) => {
            if let Some(case) = case_mut(doc, *c) {
                case.remove(key);
            }
        }
        Mutation::Top(key, value) => {
            doc.insert(key.clone(), value.clone());
        }
        Mutation::DuplicateCase(c) => {
            if let Some(copy) = case_mut(doc, *c).map(|t| t.clone())
                && let Some(Value::Array(cases)) = doc.get_mut("cases")
            {
                cases.push(Value::Table(copy));
            }
        }
    }
}

/// Raw edits of the text: flip, insert or delete bytes (the result may not be UTF-8; the
/// loader only sees valid text, so invalid sequences are replaced as `pto run` would refuse
/// them before parsing).
fn edit_bytes(text: &str, edits: &[(usize, u8, u8)]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for &(at, op, byte) in edits {
        let at = at % (bytes.len() + 1);
        match op % 3 {
            0 if at < bytes.len() => bytes[at] ^= byte | 1,
            1 => bytes.insert(at, byte),
            _ if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The loader's verdict on `text`: a scene file, or a refusal that is a one-line load error
/// naming the file. Panics (the property fails) on anything else.
fn check_load(text: &str) -> Option<SceneFile> {
    let path = Path::new("mutant.toml");
    match SceneFile::parse(path, text) {
        Ok(file) => Some(file),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("mutant.toml: "), "{msg}");
            assert!(!msg.contains('\n'), "a multi-line refusal: {msg:?}");
            assert!(
                msg.chars().count() <= MAX_MESSAGE_CHARS,
                "a refusal of {} chars: {}…",
                msg.chars().count(),
                msg.chars().take(200).collect::<String>()
            );
            None
        }
    }
}

fn mutant_text(file: usize, mutations: &[Mutation]) -> Option<String> {
    let (_, text) = &shipped()[file % shipped().len()];
    let mut doc: Table = toml::from_str(text).unwrap();
    for m in mutations {
        apply(&mut doc, m);
    }
    toml::to_string(&doc).ok()
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Thousands of mutants (structured mutations, optionally followed by raw byte edits) through
/// the loader: no panic, every refusal a one-line load error.
#[test]
fn mutated_scene_files_load_or_are_refused_cleanly() {
    let before = panics().load(Ordering::SeqCst);
    let strategy = (
        any::<usize>(),
        prop::collection::vec(mutation(), 1..4),
        prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..4),
    );
    runner(6000)
        .run(&strategy, |(file, mutations, edits)| {
            let Some(text) = mutant_text(file, &mutations) else {
                return Ok(());
            };
            check_load(&text);
            if !edits.is_empty() {
                check_load(&edit_bytes(&text, &edits));
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(panics().load(Ordering::SeqCst), before);
}

/// Raw byte edits of the shipped files alone, many per file.
#[test]
fn byte_edited_scene_files_load_or_are_refused_cleanly() {
    let strategy = (
        any::<usize>(),
        prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..12),
    );
    runner(2000)
        .run(&strategy, |(file, edits)| {
            let (_, text) = &shipped()[file % shipped().len()];
            check_load(&edit_bytes(text, &edits));
            Ok(())
        })
        .unwrap();
}

// ----- loaded mutants are run ---------------------------------------------------------------

/// Small values around each param's lower bound (and sometimes out of range) plus small
/// sizing and worker counts: the mutants that load stay fast to run.
fn small_mutation() -> impl Strategy<Value = Mutation> {
    let small = prop_oneof![0i64..=3, 4i64..=64, Just(-1), Just((1 << 32) + 1)];
    let case = 0usize..5;
    prop_oneof![
        4 => (case.clone(), any::<prop::sample::Index>(), small.clone())
            .prop_map(|(c, k, v)| Mutation::DeclaredParam(c, k, v)),
        1 => (
            case.clone(),
            prop::sample::select(&["device_count", "num_sub_workers", "aicpu_thread_num"][..]),
            0i64..=5
        )
            .prop_map(|(c, k, v)| Mutation::Config(c, vec![k.to_string()], Value::Integer(v))),
        1 => (
            case.clone(),
            prop::sample::select(&["ring_task_window", "ring_dep_pool"][..]),
            prop::sample::select(&[0i64, 4, 8, 16, 64][..])
        )
            .prop_map(|(c, k, v)| Mutation::Config(
                c,
                vec!["runtime_env".into(), k.to_string()],
                Value::Integer(v)
            )),
        1 => (case, prop::sample::select(&[1024i64, 4096, 65536, 1 << 20][..]))
            .prop_map(|(c, v)| Mutation::Config(
                c,
                vec!["runtime_env".into(), "ring_heap".into()],
                Value::Integer(v)
            )),
    ]
}

/// How one loaded mutant is run.
#[derive(Clone, Copy, Debug)]
struct RunHow {
    diagnostics: bool,
    mode: EndpointMode,
}

fn run_how() -> impl Strategy<Value = RunHow> {
    let mode = prop_oneof![
        9 => Just(EndpointMode::InProcess),
        1 => Just(EndpointMode::ChildProcess),
    ];
    (any::<bool>(), mode).prop_map(|(diagnostics, mode)| RunHow { diagnostics, mode })
}

/// Runs case `case` of `file` in fast mode within `secs` seconds, on a thread.
fn run_with_timeout(file: SceneFile, case: String, out: PathBuf, how: RunHow, secs: u64) {
    let reports = with_timeout(secs, move || {
        let options = RunOptions {
            case: Some(case),
            output: out,
            diagnostics: Diagnostics {
                scope_stats: how.diagnostics,
                ..Diagnostics::default()
            },
            env: RunnerEnv::new(how.mode, true),
        };
        run_file(&file, &options, |_| {}).map(|r| r.len())
    });
    assert_eq!(reports.unwrap(), 1);
}

/// Every path under `dir`, relative to it.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// Mutants generated for the run property (about a third load and run).
const RUNS: u32 = 800;

/// Small mutants that load are run: no panic anywhere, no hang, files only under the case's
/// own output directory.
#[test]
fn loaded_small_mutants_run_without_panics_or_hangs() {
    let before = panics().load(Ordering::SeqCst);
    let ran = Mutex::new(0usize);
    let strategy = (
        any::<usize>(),
        0usize..5,
        prop::collection::vec(small_mutation(), 1..4),
        run_how(),
    );
    runner(RUNS)
        .run(&strategy, |(file, case, mutations, how)| {
            let Some(text) = mutant_text(file, &mutations) else {
                return Ok(());
            };
            let Some(scene) = check_load(&text) else {
                return Ok(());
            };
            let name = scene.cases[case % scene.cases.len()].name.clone();
            // The back-pressure case is the one slow shipped case; its shape stays shipped.
            if name == "ringbuffer_stress" {
                return Ok(());
            }
            let root = tempfile::tempdir().unwrap();
            let out = root.path().join("out");
            run_with_timeout(scene, name.clone(), out, how, 60);
            for path in tree(root.path()) {
                assert!(
                    path == Path::new("out") || path.starts_with(Path::new("out").join(&name)),
                    "{} written outside out/{name}",
                    path.display()
                );
            }
            *ran.lock().unwrap() += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(panics().load(Ordering::SeqCst), before, "a panic happened");
    let ran = *ran.lock().unwrap();
    eprintln!("{ran} of {RUNS} mutants loaded and ran");
    assert!(ran >= 100, "only {ran} mutants loaded and ran");
}
