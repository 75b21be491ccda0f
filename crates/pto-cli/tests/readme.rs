//! The README's Rust snippets are cut from programs CI builds and runs (the README example
//! programs, run by `.ci/run`, and the template crate `examples/custom-workload`, whose tests
//! `.ci/run` runs), and its Python script is a file the Python tests run, so a snippet cannot
//! rot without a test failing.

use std::path::Path;

/// Files a README snippet may be cut from, and whether a snippet must be the file's tail (a
/// whole program) rather than any part of it.
const SOURCES: [(&str, bool); 6] = [
    ("crates/pto-kernels/examples/readme_l2.rs", true),
    ("crates/pto-kernels/examples/readme_replay.rs", false),
    ("crates/pto-node/examples/readme_l3.rs", true),
    ("examples/custom-workload/src/lib.rs", false),
    ("examples/custom-workload/src/main.rs", true),
    ("examples/custom-workload/tests/scenes.rs", true),
];

#[test]
fn every_rust_snippet_of_the_readme_is_cut_from_a_built_program() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let sources = SOURCES.map(|(p, tail)| (std::fs::read_to_string(root.join(p)).unwrap(), tail));
    let mut used = [false; SOURCES.len()];
    for block in readme.split("```rust\n").skip(1) {
        let code = &block[..block.find("```").unwrap()];
        let from = sources.iter().position(|(text, tail)| match tail {
            true => text.ends_with(code),
            false => text.contains(code),
        });
        let Some(i) = from else {
            panic!("a README snippet is not cut from a built program:\n{code}");
        };
        used[i] = true;
    }
    for (i, (path, _)) in SOURCES.iter().enumerate() {
        assert!(used[i], "no README snippet comes from {path}");
    }
}

/// The README's Python script is `python/examples/fanout.py` whole; the Python test suite
/// (`python/tests/test_readme_example.py`, run by `.ci/run`) runs that file.
#[test]
fn the_readme_python_script_is_the_example_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("python/examples/fanout.py")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```python\n")
        .skip(1)
        .map(|b| &b[..b.find("```").unwrap()])
        .collect();
    assert_eq!(blocks, vec![example.as_str()]);
}
