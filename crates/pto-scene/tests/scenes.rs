//! Every case of every shipped scene file (`scenes/` at the repository root) as one cargo test,
//! `<scene>::<case>`, run in both endpoint modes with the scenes' fast params (the harness a
//! user's crate uses for its own scenes: `pto_scene::harness`).

fn main() -> std::process::ExitCode {
    let scenes = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenes");
    pto_scene::harness::Harness::new(scenes)
        .fast(true)
        .case_timeout(std::time::Duration::from_secs(110))
        .run()
}
