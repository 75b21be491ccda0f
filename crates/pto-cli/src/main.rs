//! The `pto` command-line tool: a thin layer over the library crates.
//!
//! `main` parses the command line ([`cli`]), runs one command ([`commands`]) and maps the
//! outcome to an exit status in one place: 0 success, 1 a failed check, 2 bad input (usage,
//! an invalid config or, in strict mode, an environment problem).
#![forbid(unsafe_code)]

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

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
        eprintln!("pto: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

fn main() -> ExitCode {
    pto_node::child_main();
    let args = cli::Cli::parse();
    init_logging(args.verbose);
    match commands::run(args.command) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::CheckFailed) => ExitCode::from(1),
        Err(err) => {
            let text = format!("{err:#}");
            let one_line: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let one_line = one_line.join("; ");
            eprintln!("pto: {one_line}");
            if err.downcast_ref::<InputError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Logs go to stderr; `-v` shows INFO (bind lines), `-vv` DEBUG. `RUST_LOG` overrides.
fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        // Colour codes only for a person at a terminal, never in logs and pipes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
