//! `pto serve`: the remote L3 daemon (`pto_node::remote::serve`), until the process is
//! signalled. The first line on stdout says where it listens (tests read the port from it).

use pto_chip::ChipSpec;
use std::time::Duration;

use pto_node::remote::{ServeLimits, ServeOptions, TlsFiles, read_token_file, serve};

use crate::args::ServeArgs;
use crate::{InputError, Outcome};

pub(crate) fn run(args: &ServeArgs) -> anyhow::Result<Outcome> {
    let token = match &args.token_file {
        Some(path) => Some(read_token_file(path).map_err(InputError)?),
        None => None,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }
            .load()
            .map_err(InputError)?,
        ),
        _ => None,
    };
    let mut chip_spec = ChipSpec::default();
    if let Some(clusters) = args.clusters {
        chip_spec.clusters = clusters;
    }
    if !(args.handshake_timeout.is_finite() && args.handshake_timeout > 0.0) {
        return Err(InputError(format!(
            "--handshake-timeout {} must be a positive number of seconds",
            args.handshake_timeout
        ))
        .into());
    }
    for (flag, n) in [
        ("--max-sessions", args.max_sessions),
        ("--max-connections", args.max_connections),
        ("--max-calls-per-session", args.max_calls_per_session),
    ] {
        if n == 0 {
            return Err(InputError(format!(
                "{flag} 0 would refuse every client; give at least 1"
            ))
            .into());
        }
    }
    let limits = ServeLimits {
        max_sessions: args.max_sessions,
        max_connections: args.max_connections,
        max_calls_per_session: args.max_calls_per_session,
        handshake_timeout: Duration::from_secs_f64(args.handshake_timeout),
        ..ServeLimits::default()
    };
    let options = ServeOptions {
        listen: args.listen,
        chips: args.chips,
        sub_workers: args.sub_workers,
        mode: args.mode.into(),
        chip_spec,
        token: token.clone(),
        tls: tls.clone(),
        limits,
        ..ServeOptions::default()
    };
    let server = serve(options).map_err(|e| InputError(e.to_string()))?;
    crate::print_out(&format!(
        "pto serve: listening on {} ({} chip(s), {} sub worker(s) per session; {}; {})\n",
        server.local_addr(),
        args.chips,
        args.sub_workers,
        if token.is_some() {
            "token required"
        } else {
            "no token"
        },
        if tls.is_some() { "TLS" } else { "plaintext" },
    ));
    server
        .wait()
        .map_err(|e| anyhow::anyhow!("the server stopped: {e}"))?;
    Ok(Outcome::Success)
}
