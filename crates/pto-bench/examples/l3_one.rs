//! Runs of one L3 task in a loop (`l3_one chip|sub [runs] [in-process|child-process]`), for profiling the
//! hand-offs of `pto bench dispatch`'s "run of one ... task" rows.
use std::time::Instant;

use pto_node::{Callable, EndpointMode, Worker};
use pto_types::{CallConfig, RuntimeEnv, TaskArgs};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let chip = args.get(1).is_none_or(|a| a == "chip");
    let runs: usize = args.get(2).map_or(Ok(2000), |a| a.parse())?;
    let mode: EndpointMode = args
        .get(3)
        .map_or(Ok(EndpointMode::InProcess), |a| a.parse())?;
    pto_kernels::link();
    let _ = pto_bench::dispatch::run; // links the bench's registered callables
    let w = Worker::builder(3)
        .chips(1)
        .chip_spec(
            0,
            pto_chip::ChipSpec {
                clusters: 1,
                max_aicpu_threads: 2,
                device_memory_bytes: 1 << 30,
                ..pto_chip::ChipSpec::default()
            },
        )
        .sub_workers(1)
        .endpoint_mode(mode)
        .heap_ring_size(1 << 20)
        .build()?;
    w.init()?;
    let handle = if chip {
        w.register(Callable::chip("bench.empty_chip"))?
    } else {
        w.register(Callable::sub("bench.noop_sub"))?
    };
    let cfg = CallConfig::with_runtime_env(
        RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(4096)
            .with_dep_pool(16),
    );
    let before = schedstats();
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        w.run(
            |orch, _, _| {
                if chip {
                    orch.submit_next_level(&handle, TaskArgs::new(), &cfg, 0)?;
                } else {
                    orch.submit_sub(&handle, TaskArgs::new())?;
                }
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    for (name, run, wait, slices) in schedstats() {
        let b = before
            .iter()
            .find(|x| x.0 == name)
            .map_or((0, 0, 0), |x| (x.1, x.2, x.3));
        println!(
            "  {name:<16} on CPU {:>7.3} us/run, runnable-waiting {:>7.3} us/run, slices/run {:.2}",
            (run - b.0) as f64 / 1000.0 / runs as f64,
            (wait - b.1) as f64 / 1000.0 / runs as f64,
            (slices - b.2) as f64 / runs as f64
        );
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{} run of one task: median {:.2} us, min {:.2} us",
        if chip { "chip" } else { "sub" },
        times[runs / 2],
        times[0]
    );
    Ok(())
}

/// Per thread: name, ns on a CPU, ns runnable but waiting, time slices.
fn schedstats() -> Vec<(String, u64, u64, u64)> {
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
            out.push((
                format!("{}:{}", comm.trim(), entry.file_name().to_string_lossy()),
                v[0],
                v[1],
                v[2],
            ));
        }
    }
    out
}
