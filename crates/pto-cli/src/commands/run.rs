//! `pto run` (RING_CONFIG.md §11.1).

use std::ffi::OsString;
use std::io::Write as _;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use pto_node::remote::RemoteWorker;
use pto_scene::params::cut;
use pto_scene::report_html::{HtmlPage, render_html};
use pto_scene::runner::{
    Diagnostics, RunOptions, check_options, render_json_lines, render_table, run_file,
};
use pto_scene::{RemoteSource, RunnerEnv, SceneFile};
use pto_types::ring_config::env::KNOWN_RING_VARS;

use crate::args::{Launcher, RunArgs};
use crate::{InputError, Outcome};

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<Outcome> {
    match args.launcher {
        Launcher::Mpi => super::mpi::run(args),
        Launcher::Local => {
            let mpi_only = [
                ("--chips", args.chips.is_some()),
                ("--sub-workers", args.sub_workers.is_some()),
                ("--mpi-bind", args.mpi_bind.is_some()),
            ];
            if let Some((flag, _)) = mpi_only.iter().find(|(_, given)| *given) {
                return Err(InputError(format!(
                    "{flag} is for the serving ranks of --launcher mpi; without it, a level-4 \
                     scene starts its own servers or uses --remote ones"
                ))
                .into());
            }
            run_scene(args, remote_workers(args)?, RemoteSource::Flags)
        }
    }
}

/// Runs the scene of `args` here, with `remote` as its level-4 remote workers.
pub(crate) fn run_scene(
    args: &RunArgs,
    remote: Vec<RemoteWorker>,
    remote_source: RemoteSource,
) -> anyhow::Result<Outcome> {
    if args.enable_chip_swimlane > 4 {
        return Err(InputError(format!(
            "--enable-chip-swimlane {}: must be between 0 and 4",
            args.enable_chip_swimlane
        ))
        .into());
    }
    let file = SceneFile::load(&args.scene).map_err(|e| InputError(e.to_string()))?;
    let options = options_of(args, remote, remote_source)?;
    if options.env.strict_env {
        // The chips would each refuse this environment; say it once, as a usage error, before
        // any case starts (in-process chips snapshot it, chip children inherit it).
        let env = pto_types::ring_config::env::EnvSource::process()
            .overlay(options.env.ring_env.iter().cloned());
        pto_types::ring_config::env::EnvSnapshot::take(&env, true)
            .map_err(|e| InputError(format!("--strict-env: {e}")))?;
    }
    if let Some(case) = args
        .case
        .as_ref()
        .filter(|case| !file.cases.iter().any(|c| &c.name == *case))
    {
        return Err(InputError(pto_scene::runner::no_such_case(&file, case)).into());
    }
    check_options(&file, &options).map_err(InputError)?;
    // Created before any case runs, so an unwritable path costs no run.
    let mut report_file = match &args.report {
        Some(path) => Some((
            path,
            std::fs::File::create(path).map_err(|e| report_error(path, &e))?,
        )),
        None => None,
    };
    let total = file
        .cases
        .iter()
        .filter(|c| args.case.as_deref().is_none_or(|n| n == c.name))
        .count();
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} cases {msg}")
                .expect("a valid template"),
        );
        bar
    };
    let reports = run_file(&file, &options, |name| {
        bar.set_message(name.to_string());
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if args.json {
        crate::print_out(&render_json_lines(&reports));
    } else {
        crate::print_out(&render_table(&file, &reports));
    }
    if let Some((path, out)) = report_file.as_mut() {
        let page = render_html(&HtmlPage::of_run(&file, &options, &reports), &reports);
        write_report(path, out, &page)?;
    }
    if reports.iter().all(|r| r.result.passed()) {
        Ok(Outcome::Success)
    } else {
        Ok(Outcome::CheckFailed)
    }
}

/// The run options the flags ask for (usage errors: exit status 2).
fn options_of(
    args: &RunArgs,
    remote: Vec<RemoteWorker>,
    remote_source: RemoteSource,
) -> Result<RunOptions, InputError> {
    Ok(RunOptions {
        case: args.case.clone(),
        output: args.output.clone(),
        diagnostics: Diagnostics {
            scope_stats: args.enable_scope_stats,
            swimlane: args.enable_chip_swimlane,
            dep_gen: args.enable_dep_gen,
            war_check: if args.strict {
                pto_types::WarCheck::Strict
            } else {
                args.war_check
            },
        },
        env: RunnerEnv {
            mode: args.mode.into(),
            ring_env: parse_pairs(&args.ring_env)?,
            strict_env: args.strict_env,
            fast: args.fast,
            task_timeout: parse_secs("--task-timeout", args.task_timeout.as_deref())?,
            liveness_timeout: parse_secs("--liveness-timeout", args.liveness_timeout.as_deref())?,
            startup_timeout: None,
            remote,
            remote_source,
        },
    })
}

/// The `--remote` workers with the token and CA certificate the flags name.
fn remote_workers(args: &RunArgs) -> Result<Vec<RemoteWorker>, InputError> {
    let token = match &args.remote_token_file {
        Some(path) => Some(pto_node::remote::read_token_file(path).map_err(InputError)?),
        None => None,
    };
    let ca = match &args.remote_ca {
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            InputError(format!("--remote-ca {}: cannot read: {e}", path.display()))
        })?),
        None => None,
    };
    args.remote
        .iter()
        .map(|address| {
            let mut w = RemoteWorker::new(address);
            if let Some(t) = &token {
                w = w.token(t);
            }
            if let Some(pem) = &ca {
                w = w.ca_certificate(pem);
            }
            w.validate()
                .map_err(|e| InputError(format!("--remote {address}: {e}")))?;
            Ok(w)
        })
        .collect()
}

/// Writes the HTML report into `out` (created as `path`) and says so on stderr, so that a
/// user knows where it went (stdout keeps the table or the JSON lines).
pub(crate) fn write_report(
    path: &Path,
    out: &mut std::fs::File,
    html: &str,
) -> Result<(), InputError> {
    out.write_all(html.as_bytes())
        .and_then(|()| out.sync_all())
        .map_err(|e| report_error(path, &e))?;
    eprintln!(
        "{}: wrote the HTML report to {} ({})",
        crate::program_name(),
        path.display(),
        pto_sizing::report::human_bytes(html.len() as u64)
    );
    Ok(())
}

/// `--report FILE: cannot write: OS ERROR` (exit status 2).
pub(crate) fn report_error(path: &Path, e: &std::io::Error) -> InputError {
    InputError(format!("--report {}: cannot write: {e}", path.display()))
}

pub(crate) fn parse_pairs(pairs: &[String]) -> Result<Vec<(OsString, OsString)>, InputError> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if KNOWN_RING_VARS.contains(&k) => Ok((k.into(), v.into())),
            Some((k, _)) if !k.is_empty() => Err(InputError(format!(
                "--ring-env {:?}: {} is not a ring variable{} (known: {})",
                cut(pair),
                cut(k),
                pto_types::suggest::did_you_mean(k, KNOWN_RING_VARS),
                KNOWN_RING_VARS.join(", ")
            ))),
            _ => Err(InputError(format!(
                "--ring-env {:?}: expected KEY=VALUE",
                cut(pair)
            ))),
        })
        .collect()
}

/// A positive, finite number of seconds (`0.5`, `30`), at most a day.
fn parse_secs(flag: &str, value: Option<&str>) -> Result<Option<std::time::Duration>, InputError> {
    let Some(v) = value else {
        return Ok(None);
    };
    match v.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 => {
            Ok(Some(std::time::Duration::from_secs_f64(secs)))
        }
        _ => Err(InputError(format!(
            "{flag} {}: expected a number of seconds greater than 0 and at most 86400",
            cut(v)
        ))),
    }
}
