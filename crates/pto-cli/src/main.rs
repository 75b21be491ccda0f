//! The `pto` binary: [`pto_cli::main`] over the built-in kernels, chip callables and scenes.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    pto_cli::main()
}
