//! NODE_RUNTIME.md §8.1 `multi_chip_dispatch`: two chips add vectors, a sub task sums them.
//!
//! Run with `cargo run -p pto-node --example multi_chip_dispatch`. The logic lives in
//! `support/mod.rs` (also run by the integration tests).

mod support;

fn main() {
    // Chips and the sub worker are child processes re-executing this binary.
    pto_node::child_main();
    match support::multi_chip_dispatch(pto_node::EndpointMode::ChildProcess) {
        Ok(text) => println!("{text}multi_chip_dispatch: ok"),
        Err(e) => {
            eprintln!("multi_chip_dispatch failed: {e}");
            std::process::exit(1);
        }
    }
}
