//! The README's Rust snippets are the example programs CI builds (`--all-targets`), byte for
//! byte, so a snippet cannot rot without this test failing.

use std::path::Path;

#[test]
fn every_rust_snippet_of_the_readme_is_a_built_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let examples = [
        "crates/pto-kernels/examples/readme_l2.rs",
        "crates/pto-node/examples/readme_l3.rs",
    ]
    .map(|p| std::fs::read_to_string(root.join(p)).unwrap());
    let mut snippets = 0;
    for block in readme.split("```rust\n").skip(1) {
        let code = &block[..block.find("```").unwrap()];
        snippets += 1;
        assert!(
            examples.iter().any(|e| e.ends_with(code)),
            "a README snippet is not the tail of an example file:\n{code}"
        );
    }
    assert_eq!(snippets, examples.len(), "one snippet per example");
}
