//! Runs of L3 tasks in a loop (`l3_one chip|sub [runs] [in-process|child-process] [tasks]`) on
//! the Worker of `pto bench dispatch`, for profiling its "run of one ... task" rows (one task
//! per run, the default) and its marginal rows (many): the median run and what each thread
//! used per run.
use pto_bench::dispatch::{one_run, worker};
use pto_bench::idle::{print_thread_costs, thread_scheds};
use pto_node::{Callable, EndpointMode};

fn main() -> anyhow::Result<()> {
    // Child-process mode starts this executable again as each chip's and sub worker's child.
    pto_node::child_main();
    let args: Vec<String> = std::env::args().collect();
    let chip = args.get(1).is_none_or(|a| a == "chip");
    let runs: usize = args.get(2).map_or(Ok(2000), |a| a.parse())?;
    let mode: EndpointMode = args
        .get(3)
        .map_or(Ok(EndpointMode::InProcess), |a| a.parse())?;
    let tasks: usize = args.get(4).map_or(Ok(1), |a| a.parse())?;
    let w = worker(mode, pto_node::DEFAULT_LANE_DEPTH)?;
    let handle = if chip {
        w.register(Callable::chip("bench.empty_chip"))?
    } else {
        w.register(Callable::sub("bench.noop_sub"))?
    };
    let before = thread_scheds();
    let mut times = (0..runs)
        .map(|_| one_run(&w, handle, chip, tasks))
        .collect::<anyhow::Result<Vec<f64>>>()?;
    print_thread_costs(&before, runs as f64, "run");
    times.sort_by(f64::total_cmp);
    println!(
        "{} run of {tasks} task(s): median {:.2} us, min {:.2} us",
        if chip { "chip" } else { "sub" },
        times[runs / 2],
        times[0]
    );
    Ok(())
}
