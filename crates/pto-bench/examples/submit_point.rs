//! One case of `pto bench submit`: `submit_point <case> [n] [window] [runs]` prints µs per task
//! (end to end and in the orchestration) and what each thread used per task, for profiling.
use pto_bench::idle::{print_thread_costs, thread_scheds};
use pto_bench::submit::SubmitCase;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("independent", String::as_str);
    let n: u64 = args.get(2).map_or(Ok(204_800), |a| a.parse())?;
    let window: u64 = args.get(3).map_or(Ok(1024), |a| a.parse())?;
    let runs: usize = args.get(4).map_or(Ok(3), |a| a.parse())?;
    let case = SubmitCase::new(name)?;
    for _ in 0..runs {
        let before = thread_scheds();
        let (end_to_end, orch) = case.run(n, window)?;
        println!("{name} n={n} window={window}: {end_to_end:.3} us/task, orchestration {orch:.3}");
        print_thread_costs(&before, n as f64, "task");
    }
    Ok(())
}
