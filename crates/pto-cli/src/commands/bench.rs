//! `pto bench` (BENCHMARKS.md): the library's points as a table or JSON lines.

use crate::args::BenchArgs;
use crate::{InputError, Outcome};

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<Outcome> {
    let known = pto_bench::find(&args.which).is_some() || args.which == "all";
    if !known {
        return Err(InputError(format!(
            "no benchmark named {:?} (benchmarks: {}, all)",
            pto_scene::params::cut(&args.which),
            pto_bench::names()
        ))
        .into());
    }
    let points = pto_bench::run(&args.which, args.quick)?;
    if args.json {
        let lines: String = points
            .iter()
            .map(|p| pto_chip::diag::json_line(&p.to_json()))
            .collect();
        crate::print_out(&lines);
    } else {
        crate::print_out(&pto_bench::render_table(&points));
    }
    Ok(Outcome::Success)
}
