//! The `pto` command line over the scenes, chip callables and kernels linked into the binary
//! that calls [`main`]: the `pto` binary of this crate, or a user's own binary (README, "Write
//! your own workload"), which gets the same commands over its own scenes with one call.
//!
//! `args` parses into plain values, `commands` runs one, and [`main`] maps the outcome to an
//! exit status in one place: 0 success, 1 a failed check, 2 bad input (usage, an invalid
//! config or, in strict mode, an environment problem). The work itself lives in the libraries:
//! `pto_scene` runs, tunes and advises, `pto_sizing` resolves and reports, `pto_bench` measures.
#![forbid(unsafe_code)]

mod args;
mod commands;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};

/// An error caused by the user's input: printed on one line, exit status 2.
#[derive(Debug)]
pub(crate) struct InputError(pub(crate) String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// What a command reports when it ran to the end.
pub(crate) enum Outcome {
    Success,
    /// The command ran but a check failed (exit status 1).
    CheckFailed,
    /// The command already said what happened (`status` of it); exit with this status (an
    /// MPI job's rank 0 computes its status before it ends the job).
    #[cfg(feature = "mpi")]
    Exit(u8),
}

/// Writes `text` to stdout. A reader that went away (`pto scenes | head`) ends the command
/// quietly with status 0, as for other Unix tools, instead of a panic.
pub(crate) fn print_out(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("{}: cannot write to stdout: {e}", program_name());
        std::process::exit(1);
    }
}

/// The name this binary was started as (`pto`, or a user's own binary), for usage lines and
/// error prefixes.
pub(crate) fn program_name() -> String {
    std::env::args_os()
        .next()
        .as_deref()
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "pto".to_string())
}

/// The whole `pto` command line (`run`, `tune`, `advise`, `config`, `bench`, `scenes`) over
/// the scenes, chip callables and kernels linked into this binary. Call it from `main`:
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     pto_cli::main()
/// }
/// ```
///
/// It enters [`pto_node::child_main`] first, so the same binary serves as the child process of
/// its chips and sub workers in child-process mode (it never returns in a child).
pub fn main() -> ExitCode {
    pto_node::child_main();
    pto_kernels::link();
    let name = program_name();
    // clap keeps the name for the life of the process; this runs once per process.
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    let command = args::Cli::command().name(leaked).bin_name(leaked);
    let subcommands: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let matches = command
        .try_get_matches()
        .unwrap_or_else(|e| with_suggestion(e, &subcommands).exit());
    let cli = match args::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    init_logging(cli.verbose);
    ExitCode::from(status(commands::run(cli.command)))
}

/// The exit status of a command's result, printing its error (on one line, after the
/// program's name) if it failed.
pub(crate) fn status(result: anyhow::Result<Outcome>) -> u8 {
    match result {
        Ok(Outcome::Success) => 0,
        Ok(Outcome::CheckFailed) => 1,
        #[cfg(feature = "mpi")]
        Ok(Outcome::Exit(code)) => code,
        Err(err) => {
            let text = format!("{err:#}");
            let one_line: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("{}: {}", program_name(), one_line.join("; "));
            if err.downcast_ref::<InputError>().is_some() {
                2
            } else {
                1
            }
        }
    }
}

/// A misspelt command (`pto rn`) gets the nearest command as clap's tip when clap's own
/// similarity test found none (it misses short names: `rn` for `run`).
fn with_suggestion(mut e: clap::Error, subcommands: &[String]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::InvalidSubcommand || e.get(ContextKind::SuggestedSubcommand).is_some()
    {
        return e;
    }
    let Some(ContextValue::String(word)) = e.get(ContextKind::InvalidSubcommand) else {
        return e;
    };
    let near = pto_types::suggest::closest(word, subcommands.iter().map(String::as_str));
    if let Some(near) = near.map(str::to_string) {
        e.insert(ContextKind::SuggestedSubcommand, ContextValue::String(near));
    }
    e
}

/// Logs go to stderr; `-v` shows INFO (bind lines), `-vv` DEBUG. `RUST_LOG` overrides. A
/// subscriber the binary installed itself is kept.
fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        // Colour codes only for a person at a terminal, never in logs and pipes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
