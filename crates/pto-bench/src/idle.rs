//! B4: idle cost (`pto bench idle`, BENCHMARKS.md B4): a Worker with 4 chip children and 2 sub
//! children, initialised and idle; CPU time of the whole process tree (this process and every
//! child) per wall second, to the nanosecond (`/proc/<pid>/task/*/schedstat`).

use std::time::{Duration, Instant};

use pto_node::{EndpointMode, Worker};

use crate::{Point, Stats};

/// CPU time of this process (every thread, user + system), s, to the nanosecond: clock ticks
/// (10 ms) are too coarse for a per-task figure.
pub(crate) fn process_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// One thread of this process as the scheduler accounts it (`/proc/self/task/*/schedstat`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadSched {
    /// `name:tid`.
    pub thread: String,
    /// Time on a CPU, ns.
    pub on_cpu_ns: u64,
    /// Time runnable but waiting for a CPU, ns.
    pub waiting_ns: u64,
    pub slices: u64,
}

/// Every thread of this process now, for the profiling examples: what each used between two
/// snapshots is the figure that `perf` misattributes on a VM.
pub fn thread_scheds() -> Vec<ThreadSched> {
    scheds_of("self")
}

/// Every live thread of process `pid` (`self` or a number) as the scheduler accounts it.
fn scheds_of(pid: &str) -> Vec<ThreadSched> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten();
    tasks
        .filter_map(|entry| {
            let path = entry.path();
            let comm = std::fs::read_to_string(path.join("comm")).ok()?;
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            let v: Vec<u64> = stat
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            let [on_cpu_ns, waiting_ns, slices] = v[..] else {
                return None;
            };
            Some(ThreadSched {
                thread: format!("{}:{}", comm.trim(), entry.file_name().to_string_lossy()),
                on_cpu_ns,
                waiting_ns,
                slices,
            })
        })
        .collect()
}

/// Prints what each thread used since `before`, per one of `count` `what`s (µs per task, per
/// run).
pub fn print_thread_costs(before: &[ThreadSched], count: f64, what: &str) {
    for now in thread_scheds() {
        let was = before.iter().find(|b| b.thread == now.thread);
        let since = |f: fn(&ThreadSched) -> u64| f(&now) - was.map_or(0, f);
        println!(
            "  {:<20} on CPU {:>7.3} us/{what}, runnable-waiting {:>7.3} us/{what}, slices/{what} {:.2}",
            now.thread,
            since(|t| t.on_cpu_ns) as f64 / 1000.0 / count,
            since(|t| t.waiting_ns) as f64 / 1000.0 / count,
            since(|t| t.slices) as f64 / count,
        );
    }
}

/// CPU time of the live threads of process `pid`, ns (their schedstat, to the nanosecond: the
/// 10 ms clock ticks of `/proc/<pid>/stat` would round an idle tree's few milliseconds to 0 or
/// a multiple of a tick); 0 once it is gone.
fn cpu_ns(pid: u32) -> u64 {
    let threads = scheds_of(&pid.to_string());
    threads.iter().map(|t| t.on_cpu_ns).sum()
}

/// CPU time of this process (exited threads included) and of the live threads of `children`,
/// ns.
fn tree_cpu_ns(children: &[u32]) -> u64 {
    let own = (process_cpu_s() * 1e9) as u64;
    own + children.iter().map(|&p| cpu_ns(p)).sum::<u64>()
}

pub fn run(quick: bool) -> anyhow::Result<Vec<Point>> {
    let idle = if quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(5)
    };
    pto_kernels::link();
    let w = Worker::builder(3)
        .chips(4)
        .sub_workers(2)
        .endpoint_mode(EndpointMode::ChildProcess)
        .heap_ring_size(1 << 20)
        .build()?;
    w.init()?;
    // Let start-up settle (children parking, the monitor's first probes).
    std::thread::sleep(Duration::from_millis(200));
    let children = w.child_pids();
    let before = tree_cpu_ns(&children);
    let started = Instant::now();
    std::thread::sleep(idle);
    let used = tree_cpu_ns(&children).saturating_sub(before);
    let wall = started.elapsed().as_secs_f64();
    w.close();
    let percent = used as f64 * 1e-9 / wall * 100.0;
    Ok(vec![
        Point::new(
            "idle",
            format!("4 chip + 2 sub children idle {:.1} s", wall),
            "% of a core",
            Stats::one(percent),
        )
        .with_anchor("upstream: ~80% of a core per idle child (BENCHMARKS.md B4)"),
    ])
}

/// This process's peak resident set, MiB (`VmHWM` of `/proc/self/status`).
pub(crate) fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
