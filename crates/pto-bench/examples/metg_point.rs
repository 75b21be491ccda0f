//! One point of `pto bench metg`: `metg_point <grain µs> <steps> [w] [replayed]` prints pto's
//! efficiency and what each thread used per task (`replayed`: the replayed row, W = 2).
use pto_bench::idle::{print_thread_costs, thread_scheds};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let g_us: f64 = args.get(1).map_or(Ok(100.0), |a| a.parse())?;
    let steps: u64 = args.get(2).map_or(Ok(100), |a| a.parse())?;
    let w: f64 = args.get(3).map_or(Ok(2.0), |a| a.parse())?;
    let replayed = args.get(4).is_some_and(|a| a == "replayed");
    let chip = pto_bench::metg::chip()?;
    let g_ns = (g_us * 1000.0) as u64;
    for _ in 0..3 {
        // As `pto bench metg` does before every measured run: the kernel's loop calibrated
        // with both cores busy.
        pto_bench::spin::calibrate(2);
        let before = thread_scheds();
        let e = if replayed {
            pto_bench::metg::pto_replayed_efficiency(&chip, steps, g_ns)?
        } else {
            pto_bench::metg::pto_efficiency(&chip, steps, g_ns, w)?
        };
        let how = if replayed { " replayed" } else { "" };
        println!("g={g_us} us steps={steps} w={w}{how}: efficiency {e:.3}");
        print_thread_costs(&before, (steps * 16) as f64, "task");
    }
    Ok(())
}
