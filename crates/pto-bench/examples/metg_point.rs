//! One point of `pto bench metg`: `metg_point <grain µs> <steps> [w]` prints pto's efficiency.
use pto_chip::{ChipSpec, ChipWorker};
use pto_types::ring_config::env::EnvSource;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let g_us: f64 = args.get(1).map_or(Ok(100.0), |a| a.parse())?;
    let steps: u64 = args.get(2).map_or(Ok(100), |a| a.parse())?;
    let w: f64 = args.get(3).map_or(Ok(2.0), |a| a.parse())?;
    let chip = ChipWorker::new(
        ChipSpec {
            clusters: 1,
            max_aicpu_threads: 2,
            ..ChipSpec::default()
        },
        EnvSource::empty(),
    )?;
    for _ in 0..3 {
        let before = schedstats();
        let e = pto_bench::metg::pto_efficiency(&chip, steps, (g_us * 1000.0) as u64, w)?;
        println!("g={g_us} us steps={steps} w={w}: efficiency {e:.3}");
        let tasks = (steps * 16) as f64;
        for (name, run, wait, slices) in schedstats() {
            let b = before
                .iter()
                .find(|x| x.0 == name)
                .map_or((0, 0, 0), |x| (x.1, x.2, x.3));
            println!(
                "  {name:<12} on CPU {:>7.3} us/task, runnable-waiting {:>7.3} us/task, slices {}",
                (run - b.0) as f64 / 1000.0 / tasks,
                (wait - b.1) as f64 / 1000.0 / tasks,
                slices - b.2
            );
        }
    }
    Ok(())
}

/// Per thread: name, ns on a CPU, ns runnable but waiting for one, time slices
/// (`/proc/self/task/*/schedstat`).
pub fn schedstats() -> Vec<(String, u64, u64, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = entry.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
        let v: Vec<u64> = stat
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() == 3 {
            out.push((comm.trim().to_string(), v[0], v[1], v[2]));
        }
    }
    out
}
