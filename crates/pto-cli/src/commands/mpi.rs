//! `pto run --launcher mpi`: this process is one rank of an MPI job (`pto_node::mpi`). Rank
//! 0 runs the scene with the other ranks as its remote workers and ends the job; every other
//! rank serves a level-3 Worker until then.

use crate::args::RunArgs;
use crate::{InputError, Outcome};

#[cfg(feature = "mpi")]
pub(crate) fn run(args: &RunArgs) -> anyhow::Result<Outcome> {
    use pto_node::mpi::{MpiProcess, MpiServe, init};

    let serve = MpiServe {
        chips: args.chips.unwrap_or(1),
        sub_workers: args.sub_workers.unwrap_or(0),
        mode: args.mode.into(),
        bind: args.mpi_bind,
        ..MpiServe::default()
    };
    if serve.chips == 0 && serve.sub_workers == 0 {
        // Every rank sees the same flags, so every rank stops here alike.
        return Err(InputError(
            "--chips 0 --sub-workers 0: a serving rank needs at least one chip or sub worker"
                .to_string(),
        )
        .into());
    }
    match init().map_err(|e| InputError(format!("--launcher mpi: {e}")))? {
        MpiProcess::Rank(rank) => {
            let name = crate::program_name();
            rank.serve(&serve, |line| {
                pto_node::mpi::eprint_line(&format!("{name}: {line}"))
            })?;
            Ok(Outcome::Success)
        }
        MpiProcess::Root(mut root) => {
            let result = match root.start() {
                Ok(_) => {
                    super::run::run_scene(args, root.remote_workers(), pto_scene::RemoteSource::Mpi)
                }
                Err(e) => Err(anyhow::anyhow!("--launcher mpi: {e}")),
            };
            let status = crate::status(result);
            let code = root.end(i32::from(status));
            Ok(Outcome::Exit(u8::try_from(code).unwrap_or(1)))
        }
    }
}

#[cfg(not(feature = "mpi"))]
pub(crate) fn run(_: &RunArgs) -> anyhow::Result<Outcome> {
    Err(InputError(
        "--launcher mpi: this binary was built without MPI; build it with the `mpi` feature \
         (`cargo install --path crates/pto-cli --features mpi`, which needs libopenmpi-dev \
         and libclang-dev)"
            .to_string(),
    )
    .into())
}
