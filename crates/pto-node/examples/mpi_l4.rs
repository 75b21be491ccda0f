//! A level-4 job over the ranks of an MPI world from Rust (feature `mpi`; README, "Many hosts:
//! MPI"): every rank runs this program; ranks 1..N-1 serve an L3 Worker, rank 0 sends one L3
//! task to each, each with its own heap size, and prints what every remote chip bound.
//!
//! ```sh
//! cargo build -p pto-node --features mpi --example mpi_l4
//! mpirun -n 3 target/debug/examples/mpi_l4
//! ```

use pto_node::mpi::{MpiProcess, MpiServe};
use pto_node::{Callable, CallableKind, EndpointMode, OrchError, Orchestrator, Worker};
use pto_types::{CallConfig, DType, RuntimeEnv, TaskArgs, TaskOverrides};

/// The L3 task each rank runs: one element-wise chip job with the task's own config.
fn add_on_chip(
    orch: &mut Orchestrator<'_>,
    args: &TaskArgs,
    cfg: &CallConfig,
) -> Result<(), OrchError> {
    let add = orch.callable(CallableKind::Chip, "elementwise_add")?;
    let t = args.tensors();
    let job = TaskArgs::new()
        .input(&t[0].1)
        .input(&t[0].1)
        .output_existing(&t[1].1)
        .label("add");
    orch.submit_next_level(&add, job, cfg, 0)?;
    Ok(())
}
pto_node::register_node!("mpi_example.add", add_on_chip);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    pto_node::child_main();
    pto_kernels::link();
    let mut root = match pto_node::mpi::init()? {
        MpiProcess::Rank(rank) => {
            let serve = MpiServe {
                chips: 1,
                mode: EndpointMode::InProcess,
                ..MpiServe::default()
            };
            rank.serve(&serve, |line| eprintln!("{line}"))?;
            return Ok(());
        }
        MpiProcess::Root(root) => root,
    };
    let status = match root.start() {
        Ok(_) => match run(&root) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("mpi_l4: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("mpi_l4: {e}");
            1
        }
    };
    std::process::exit(root.end(status));
}

/// Rank 0: one L3 task per serving rank, rank r with a heap of r MiB per ring.
fn run(root: &pto_node::mpi::MpiRoot) -> Result<(), Box<dyn std::error::Error>> {
    let l4 = Worker::builder(4).mpi(root).build()?;
    let add = l4.register(Callable::node("mpi_example.add"))?;
    l4.init()?;
    let n = 256;
    let mut buffers = Vec::new();
    for i in 0..root.serving_ranks() {
        let (a, out) = (
            l4.create_remote_buffer(i, n * 4)?,
            l4.create_remote_buffer(i, n * 4)?,
        );
        a.write_from(0, &vec![i as f32 + 1.0; n])?;
        buffers.push((a, out));
    }
    let tensors = buffers
        .iter()
        .map(|(a, out)| {
            Ok((
                a.tensor(&[n as u32], DType::F32)?,
                out.tensor(&[n as u32], DType::F32)?,
            ))
        })
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    let report = l4.run(
        |orch, _, cfg| {
            for (i, (a, out)) in tensors.iter().enumerate() {
                let own = cfg.derive(&TaskOverrides {
                    runtime_env: RuntimeEnv::default().with_heap((i as u64 + 1) << 20),
                    ..Default::default()
                })?;
                let args = TaskArgs::new()
                    .input(a)
                    .output_existing(out)
                    .label(&format!("rank{}", i + 1));
                orch.submit_next_level(&add, args, &own, i)?;
            }
            Ok(())
        },
        TaskArgs::new(),
        CallConfig::default(),
    )?;
    for (i, (_, out)) in buffers.iter().enumerate() {
        let inner = report
            .task(&format!("rank{}", i + 1))
            .and_then(|t| t.members[0].inner.as_deref())
            .ok_or("no report of a remote run")?;
        let chip = inner
            .task("add")
            .and_then(|t| t.members[0].chip.as_ref())
            .ok_or("no chip report")?;
        println!("rank {}: {}", i + 1, chip.sizing.compact());
        assert_eq!(out.read_vec::<f32>(0, n)?, vec![2.0 * (i as f32 + 1.0); n]);
    }
    l4.close();
    Ok(())
}
