//! `pto advise` (CHIP_RUNTIME.md §7, RING_CONFIG.md §8, issue 11): the recommendation on stdout
//! in the chosen format, the per-ring tables on stderr.

use pto_chip::diag::json_line;
use pto_scene::SceneFile;
use pto_scene::advice::{
    AdviceTarget, KeyAdvice, advise_by_key, advised_case, case_toml, find_stats, load_runs,
    render_toml, write_case,
};
use pto_scene::params::cut;
use pto_sizing::advise::{AdviseFormat, Headroom};

use crate::args::{AdviseArgs, AdviseFormatArg};
use crate::{InputError, Outcome};

pub(crate) fn run(args: &AdviseArgs) -> anyhow::Result<Outcome> {
    let headroom =
        Headroom::parse(&args.headroom).map_err(|e| InputError(format!("--headroom {e}")))?;
    let scene = match &args.scene {
        Some(path) => Some(SceneFile::load(path).map_err(|e| InputError(e.to_string()))?),
        None => None,
    };
    let files = find_stats(&args.paths).map_err(InputError)?;
    let runs = load_runs(&files).map_err(InputError)?;
    let case = match (&scene, &args.case) {
        (Some(file), Some(name)) => Some(case_config(file, name)?),
        _ => None,
    };
    let target = AdviceTarget {
        scene: scene.as_ref().map(|f| f.scene),
        case,
    };
    let groups = advise_by_key(&runs, target, headroom);
    for g in &groups {
        let who = match &g.key {
            Some(k) => format!("label {k}"),
            None => "runtime_env".to_string(),
        };
        eprintln!("{who} ({} run(s)):", g.runs);
        eprint!("{}", g.advice.render_table());
    }
    let out = match (&scene, &args.case) {
        (Some(file), Some(case)) => scene_case(file, case, &groups, args)?,
        _ => render(&groups, args.format)?,
    };
    crate::print_out(&out);
    Ok(Outcome::Success)
}

/// The config block of case `name` of `file`.
fn case_config<'f>(
    file: &'f SceneFile,
    name: &str,
) -> Result<&'f pto_scene::CaseConfig, InputError> {
    match file.cases.iter().find(|c| c.name == name) {
        Some(c) => Ok(&c.config),
        None => Err(InputError(format!(
            "{}: no case named {:?}",
            file.path.display(),
            cut(name)
        ))),
    }
}

/// The advised case of `--scene`/`--case`, printed and, with `--write`, put into the file.
fn scene_case(
    file: &SceneFile,
    case: &str,
    groups: &[KeyAdvice],
    args: &AdviseArgs,
) -> Result<String, InputError> {
    if !matches!(args.format, AdviseFormatArg::Toml) {
        return Err(InputError(
            "--scene prints a scene case, which is TOML: drop --format".to_string(),
        ));
    }
    let text = pto_scene::file::read_text(&file.path, pto_scene::file::MAX_FILE_BYTES)
        .map_err(|e| InputError(format!("{}: {e}", file.path.display())))?;
    let advised = advised_case(file, &text, case, groups).map_err(InputError)?;
    if args.write {
        write_case(&file.path, &advised).map_err(InputError)?;
        // What was written must load: the same checks as `pto run`.
        SceneFile::load(&file.path).map_err(|e| InputError(e.to_string()))?;
    }
    Ok(case_toml(&advised))
}

fn render(groups: &[KeyAdvice], format: AdviseFormatArg) -> Result<String, InputError> {
    Ok(match format {
        AdviseFormatArg::Toml => render_toml(groups),
        AdviseFormatArg::Env => match groups {
            [one] => one.advice.render(AdviseFormat::Env),
            _ => {
                return Err(InputError(format!(
                    "--format env holds one sizing, but the runs have {} labels: use --format toml or json",
                    groups.len()
                )));
            }
        },
        AdviseFormatArg::Json => groups.iter().map(|g| json_line(&g.to_json())).collect(),
    })
}
