//! `pto bench` (BENCHMARKS.md): the library's points as a table or JSON lines.

use crate::cli::args::BenchArgs;
use crate::cli::{InputError, Outcome};

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<Outcome> {
    let benches = crate::footprint_bench::benches();
    let known = benches.iter().any(|b| b.name == args.which) || args.which == "all";
    if !known {
        return Err(InputError(format!(
            "no benchmark named {:?} (benchmarks: {}, all)",
            crate::params::cut(&args.which),
            pto_bench::names(&benches)
        ))
        .into());
    }
    let points = pto_bench::run(&benches, &args.which, args.quick)?;
    if args.json {
        let lines: String = points
            .iter()
            .map(|p| format!("{}\n", p.to_json()))
            .collect();
        crate::cli::print_out(&lines);
    } else {
        crate::cli::print_out(&pto_bench::render_table(&points));
    }
    Ok(Outcome::Success)
}
