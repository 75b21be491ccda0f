//! The examples' logic, run as tests (NODE_RUNTIME.md §8.1, §8.2; row 24).

use crate::common::{Mode, both_modes, with_timeout};

fn endpoint_mode(mode: Mode) -> pto_node::EndpointMode {
    match mode {
        Mode::InProcess => pto_node::EndpointMode::InProcess,
        Mode::ChildProcess => pto_node::EndpointMode::ChildProcess,
    }
}

fn n24_multi_chip_dispatch_example(mode: Mode) {
    let text = with_timeout(60, move || {
        crate::support::multi_chip_dispatch(endpoint_mode(mode)).map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("fan-in 2"), "{text}");
}

fn per_task_runtime_env_example(mode: Mode) {
    let text = with_timeout(60, move || {
        crate::support::per_task_runtime_env(endpoint_mode(mode)).map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("only l2_default changed"), "{text}");
}

both_modes!(
    n24_multi_chip_dispatch_example,
    per_task_runtime_env_example
);
