//! The examples' logic, run as tests (NODE_RUNTIME.md §8.1, §8.2; row 24).

use crate::common::with_timeout;

#[test]
fn n24_multi_chip_dispatch_example() {
    let text = with_timeout(60, || {
        crate::support::multi_chip_dispatch().map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("fan-in 2"), "{text}");
}

#[test]
fn per_task_runtime_env_example() {
    let text = with_timeout(60, || {
        crate::support::per_task_runtime_env().map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("only l2_default changed"), "{text}");
}
