//! The README's level-3 snippet, whole (built by CI with `--all-targets`; run it with
//! `cargo run -p pto-node --example readme_l3`).

use pto_node::{Callable, Worker};
use pto_types::{CallConfig, DType, RuntimeEnv, TaskArgs, TaskOverrides};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // First in main: a child process started by the Worker below (this same executable)
    // serves its chip or sub worker here and never returns. Without it, every child would
    // run this main again (the Worker refuses to start children then).
    pto_node::child_main();
    pto_kernels::link(); // keeps the built-in chip callables in this binary

    let worker = Worker::builder(3).chips(2).sub_workers(1).build()?;
    let add = worker.register(Callable::chip("elementwise_add"))?;
    worker.init()?;
    let n = 1024;
    let (a, b, out) = (
        worker.create_buffer(n * 4)?,
        worker.create_buffer(n * 4)?,
        worker.create_buffer(n * 4)?,
    );
    a.write_from(0, &vec![1.0f32; n])?;
    b.write_from(0, &vec![2.0f32; n])?;
    let (ta, tb, tout) = (
        a.tensor(&[n as u32], DType::F32)?,
        b.tensor(&[n as u32], DType::F32)?,
        out.tensor(&[n as u32], DType::F32)?,
    );
    let report = worker.run(
        move |orch, _args, cfg| {
            // This task's own ring sizing: a 1 MiB heap per ring, the rest inherited.
            let small = cfg.derive(&TaskOverrides {
                runtime_env: RuntimeEnv::default().with_heap(1 << 20),
                ..Default::default()
            })?;
            let args = TaskArgs::new().input(&ta).input(&tb).output_existing(&tout);
            // The last argument is the chip (next-level worker) index: 0..chips.
            orch.submit_next_level(&add, args.label("small"), &small, 0)?;
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )?;
    let chip_report = report
        .task("small")
        .and_then(|t| t.members[0].chip.as_ref());
    println!(
        "sizing: {}",
        chip_report
            .map(|c| c.sizing.to_string())
            .unwrap_or_default()
    );
    assert_eq!(out.read_vec::<f32>(0, n)?, vec![3.0f32; n]);
    worker.close();
    Ok(())
}
