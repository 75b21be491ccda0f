//! `pto serve`: the remote L3 daemon (`pto_node::remote::serve`), until the process is
//! signalled. The first line on stdout says where it listens (tests read the port from it).

use pto_chip::ChipSpec;
use pto_node::remote::{ServeOptions, TlsFiles, read_token_file, serve};

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
    let options = ServeOptions {
        listen: args.listen,
        chips: args.chips,
        sub_workers: args.sub_workers,
        mode: args.mode.into(),
        chip_spec,
        token: token.clone(),
        tls: tls.clone(),
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
