//! `pto-fuzz`: fuzz the decoders for a time budget; exit 1 with the input on any finding.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use pto_fuzz::{Corpus, Limits, Probe, TARGETS};

#[global_allocator]
static PROBE: Probe = Probe;

/// Fuzz every decoder of bytes from another process or the network (see the crate README).
#[derive(Parser)]
#[command(name = "pto-fuzz")]
struct Args {
    /// Seconds in all, shared evenly by the targets.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Only these targets (repeatable); default: all.
    #[arg(long = "target")]
    targets: Vec<String>,
    /// The kept corpus (a directory per target).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus"))]
    corpus: PathBuf,
    /// Write inputs with new outcomes into the corpus.
    #[arg(long)]
    save: bool,
    /// The PRNG seed (default: from the clock; printed, so a run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// Where a finding's input is written.
    #[arg(long, default_value = "target/fuzz-findings")]
    findings: PathBuf,
    /// Decode this one file with `--target` and report (to reproduce a finding).
    #[arg(long)]
    replay: Option<PathBuf>,
    /// List the targets and exit.
    #[arg(long)]
    list: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.list {
        for t in TARGETS {
            println!("{:<18} {}", t.name, t.from);
        }
        return Ok(());
    }
    let chosen: Vec<_> = if args.targets.is_empty() {
        TARGETS.iter().collect()
    } else {
        args.targets
            .iter()
            .map(|n| {
                pto_fuzz::target(n)
                    .with_context(|| format!("no fuzz target {n:?} (pto-fuzz --list shows them)"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    if let Some(file) = &args.replay {
        let [t] = chosen[..] else {
            bail!("--replay needs exactly one --target");
        };
        let input = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        return match pto_fuzz::check(t, &input, &Limits::default()) {
            Ok(outcome) => {
                println!("{}: {outcome:?}", t.name);
                Ok(())
            }
            Err(problem) => bail!("{}: {problem}", t.name),
        };
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let each = Duration::from_secs_f64(args.seconds.max(0.0) / chosen.len() as f64);
    println!("seed {seed}, {} s per target", each.as_secs_f64());
    println!(
        "{:<18} {:>9} {:>10} {:>9} {:>9} {:>8} {:>7} {:>6}",
        "target", "execs", "execs/s", "accepted", "rejected", "outcomes", "corpus", "added"
    );
    for (i, t) in chosen.iter().enumerate() {
        let corpus = Corpus::load(Some(&args.corpus), t.name, args.save)
            .with_context(|| format!("reading the corpus of {}", t.name))?;
        match pto_fuzz::fuzz(
            t,
            corpus,
            each,
            seed.wrapping_add(i as u64),
            Limits::default(),
        ) {
            Ok(s) => println!(
                "{:<18} {:>9} {:>10.0} {:>9} {:>9} {:>8} {:>7} {:>6}",
                t.name,
                s.execs,
                s.execs as f64 / s.elapsed.as_secs_f64(),
                s.accepted,
                s.rejected,
                s.outcomes,
                s.corpus,
                s.added
            ),
            Err(finding) => {
                std::fs::create_dir_all(&args.findings)?;
                let file = args.findings.join(format!("{}-{seed}", t.name));
                std::fs::write(&file, &finding.input)?;
                eprintln!("{finding}");
                eprintln!(
                    "input written to {}; reproduce with: pto-fuzz --target {} --replay {}",
                    file.display(),
                    t.name,
                    file.display()
                );
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
