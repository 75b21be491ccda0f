//! One module per command; each turns parsed arguments into a library request.

mod advise;
mod bench;
mod config_resolve;
mod mpi;
mod run;
mod scenes;
mod serve;
mod soak;
mod tune;

use crate::Outcome;
use crate::args::{Command, ConfigCommand};

pub(crate) fn run(command: Command) -> anyhow::Result<Outcome> {
    match command {
        Command::Config(ConfigCommand::Resolve(args)) => config_resolve::run(&args),
        Command::Advise(args) => advise::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Scenes(args) => scenes::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Tune(args) => tune::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Soak(args) => soak::run(&args),
    }
}
