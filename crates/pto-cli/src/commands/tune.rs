//! `pto tune` (issue 11, item 3): the library's tuning loop per case, its table on stdout.

use pto_sizing::advise::Headroom;

use pto_scene::advice::write_case;
use pto_scene::params::{cut, key_list};
use pto_scene::report_html::{HtmlPage, render_tune_html};
use pto_scene::tune::{TuneOptions, Tuning, Verdict, render_tuning, tune_case};
use pto_scene::{RunnerEnv, SceneFile};

use super::run::{parse_pairs, report_error, write_report};
use crate::args::TuneArgs;
use crate::{InputError, Outcome};

pub(crate) fn run(args: &TuneArgs) -> anyhow::Result<Outcome> {
    let headroom =
        Headroom::parse(&args.headroom).map_err(|e| InputError(format!("--headroom {e}")))?;
    if args.max_rounds < 2 {
        return Err(InputError(format!(
            "--max-rounds {}: at least 2 (the case as written, then the advised case)",
            args.max_rounds
        ))
        .into());
    }
    let file = SceneFile::load(&args.scene).map_err(|e| InputError(e.to_string()))?;
    let cases = selected_cases(args, &file)?;
    let temp = tempfile::tempdir()?;
    let work = args
        .output
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let env = runner_env(args)?;
    // Created before any case runs, so an unwritable path costs no run.
    let mut report_file = match &args.report {
        Some(path) => Some((
            path,
            std::fs::File::create(path).map_err(|e| report_error(path, &e))?,
        )),
        None => None,
    };
    let mut tunings: Vec<Tuning> = Vec::new();
    let mut all_verified = true;
    crate::print_out(&format!(
        "pto tune: scene {} ({}), headroom {headroom}\n",
        file.scene.name(),
        args.scene.display()
    ));
    for case in &cases {
        let options = TuneOptions {
            headroom,
            max_rounds: args.max_rounds,
            work: work.join(case),
            env: env.clone(),
        };
        all_verified &= tune_one(args, &file, case, &options, &mut tunings)?;
    }
    if let Some((path, out)) = report_file.as_mut() {
        let page = HtmlPage {
            title: format!("pto tune — scene {}", file.scene.name()),
            lines: vec![format!(
                "{} · chips {} · headroom {headroom}",
                args.scene.display(),
                env.mode
            )],
            scene_summary: Vec::new(),
            scope_stats: true,
            // Without --output the rounds ran in a temporary directory, gone on return.
            diagnostics_kept: args.output.is_some(),
        };
        write_report(path, out, &render_tune_html(&page, &tunings))?;
    }
    if args.write {
        // What was written must load, with the same checks as `pto run`.
        SceneFile::load(&args.scene).map_err(|e| InputError(e.to_string()))?;
    }
    Ok(if all_verified {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

/// The names of the cases `--case` selects (all by default); none is an input error.
fn selected_cases(args: &TuneArgs, file: &SceneFile) -> anyhow::Result<Vec<String>> {
    let cases: Vec<String> = file
        .cases
        .iter()
        .map(|c| c.name.clone())
        .filter(|n| args.case.as_deref().is_none_or(|c| c == n))
        .collect();
    if cases.is_empty() {
        return Err(InputError(format!(
            "{}: no case named {:?} (cases: {})",
            args.scene.display(),
            cut(args.case.as_deref().unwrap_or("")),
            key_list(file.cases.iter().map(|c| c.name.as_str()))
        ))
        .into());
    }
    Ok(cases)
}

/// How the cases run: `--mode`, `--ring-env` and `--fast`.
fn runner_env(args: &TuneArgs) -> anyhow::Result<RunnerEnv> {
    Ok(RunnerEnv {
        ring_env: parse_pairs(&args.ring_env)?,
        ..RunnerEnv::new(args.mode.into(), args.fast)
    })
}

/// Tunes one case: prints its table, keeps its tuning for the report, and with `--write`
/// writes a verified advised case; returns false when its tuning failed.
fn tune_one(
    args: &TuneArgs,
    file: &SceneFile,
    case: &str,
    options: &TuneOptions,
    tunings: &mut Vec<Tuning>,
) -> anyhow::Result<bool> {
    let tuning = tune_case(file, case, options)?;
    crate::print_out(&render_tuning(&tuning));
    let verified = match (&tuning.verdict, &tuning.advised) {
        (Verdict::Verified, Some(advised)) if args.write => {
            write_case(&file.path, advised).map_err(InputError)?;
            crate::print_out(&format!(
                "case {case}: wrote {}_advised into {}\n",
                cut(case),
                args.scene.display()
            ));
            true
        }
        (Verdict::Verified | Verdict::Skipped(_), _) => true,
        (Verdict::Failed(_), _) => false,
    };
    tunings.push(tuning);
    Ok(verified)
}
