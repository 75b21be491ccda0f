//! An idle chip costs ~0 % CPU: every scheduler and core thread parks (CHIP_RUNTIME.md §6.5,
//! row E12). Measured on the chip's own threads (named `pto-*`), so other tests running in the
//! same process do not disturb it. The ≤ 1 % figure itself is benchmark B4; this test asserts a
//! liveness bound with a wide margin.

mod common;

use std::time::Duration;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::RunContext;
use pto_types::{CallConfig, TaskArgs};

/// CPU time (utime + stime, clock ticks) of this process's threads whose name starts `pto-`.
fn pto_thread_ticks() -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task").expect("procfs") {
        let dir = entry.expect("task entry").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("pto-") {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.len() > 12 {
            total +=
                fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
        }
    }
    total
}

#[test]
fn e12_idle_chip_threads_park() {
    with_timeout(60, || {
        let chip = chip(8, &[]);
        let (_a, a) = f32_tensor(16384, 2.0);
        let (_b, b) = f32_tensor(16384, 3.0);
        let (_f, f) = f32_tensor(16384, 0.0);
        let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
        chip.run(
            "vector_example",
            &args,
            &CallConfig::default(),
            &RunContext::default(),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let before = pto_thread_ticks();
        std::thread::sleep(Duration::from_secs(2));
        let used = pto_thread_ticks() - before;
        // Clock ticks are 10 ms here; 0.2 s of CPU over 2 s of idleness is 20 ticks.
        assert!(
            used < 20,
            "idle chip threads used {used} ticks of CPU in 2 s"
        );
    });
}
