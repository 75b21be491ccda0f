//! NODE_RUNTIME.md §8.2 `per_task_runtime_env`: each L2 task of one L3 run gets its own ring
//! sizing through its own `CallConfig`.
//!
//! Run with `cargo run -p pto-node --example per_task_runtime_env`. The logic lives in
//! `support/mod.rs` (also run by the integration tests).

mod support;

fn main() {
    // Chips and the sub worker are child processes re-executing this binary.
    pto_node::child_main();
    match support::per_task_runtime_env(pto_node::EndpointMode::ChildProcess) {
        Ok(text) => println!("{text}per_task_runtime_env: ok"),
        Err(e) => {
            eprintln!("per_task_runtime_env failed: {e}");
            std::process::exit(1);
        }
    }
}
