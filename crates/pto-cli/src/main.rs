//! The `pto` binary: the command line of `pto_scene::main` over the built-in kernels, chip
//! callables and scenes. A user's crate gets the same command line over its own scenes by
//! calling `pto_scene::main()` from its own `main` (README, "Write your own workload").
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pto_scene::main()
}
