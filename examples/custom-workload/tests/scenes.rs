//! Every case of every scene file under `scenes/` as one cargo test, `<scene>::<case>`, run in
//! both endpoint modes: `cargo test`, `cargo test -- cw_fanout::`, `cargo test -- --list`,
//! `PTO_SCENE_MODE=in-process cargo test`.

fn main() -> std::process::ExitCode {
    custom_workload::link();
    pto_scene::harness::Harness::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenes")).run()
}
