//! `pto advise` (CHIP_RUNTIME.md §7, RING_CONFIG.md §8): the library's recommendation on
//! stdout in the chosen format, the per-ring table on stderr.

use pto_chip::advise::{AdviseFormat, Headroom, ScopeStats, advise};

use crate::cli::{AdviseArgs, AdviseFormatArg};
use crate::{InputError, Outcome};

pub(crate) fn run(args: &AdviseArgs) -> anyhow::Result<Outcome> {
    let headroom =
        Headroom::parse(&args.headroom).map_err(|e| InputError(format!("--headroom {e}")))?;
    let path = args.stats.display();
    let bytes =
        std::fs::read(&args.stats).map_err(|e| InputError(format!("cannot read {path}: {e}")))?;
    let stats = ScopeStats::parse_bytes(&bytes).map_err(|e| InputError(format!("{path}: {e}")))?;
    let advice = advise(&stats, headroom);
    eprint!("{}", advice.render_table());
    crate::print_out(&advice.render(format(args.format)));
    Ok(Outcome::Success)
}

fn format(arg: AdviseFormatArg) -> AdviseFormat {
    match arg {
        AdviseFormatArg::Toml => AdviseFormat::Toml,
        AdviseFormatArg::Env => AdviseFormat::Env,
        AdviseFormatArg::Json => AdviseFormat::Json,
    }
}
