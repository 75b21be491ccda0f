//! `pto bench` (BENCHMARKS.md): the library's points as a table or JSON lines.

use crate::args::BenchArgs;
use crate::{InputError, Outcome};

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<Outcome> {
    let benches = pto_bench::select(&args.which).map_err(|e| InputError(e.to_string()))?;
    let points = pto_bench::run(benches, args.quick)?;
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
