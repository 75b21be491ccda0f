//! This crate's own `pto`: `run`, `tune`, `advise`, `config`, `bench` and `scenes` over the
//! built-in scenes and this crate's (`cargo run -- run scenes/cw_fanout.toml`). Child processes
//! re-execute this binary; `pto_cli::main` enters the child runtime first.

fn main() -> std::process::ExitCode {
    custom_workload::link();
    pto_cli::main()
}
