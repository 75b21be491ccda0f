//! The kernel of `metg` (B2), for pto and every peer alike: a busy loop of a calibrated number
//! of iterations, so a task of grain g computes for g and nothing else.
//!
//! Why not spin on the thread's CPU clock, as the design's B2 says: on the reference VM that
//! clock is a system call of 0.4-0.5 µs, so a kernel that polls it overshoots its grain by one
//! to two calls (the first read, and the read that finds the grain past). A nominal 1 µs kernel
//! took 1.95 µs of CPU and a 2 µs one 2.8 µs (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)` in a C
//! loop, 2026-12-06). Every runtime paid the same overshoot, and efficiency counted it as
//! overhead: each METG was inflated by it, and the ratios between runtimes were pulled toward 1. The loop here makes no system call; its rate is measured with
//! every core busy (Task Bench's "peak" is measured the same way) right before each measured run
//! ([`calibrate`]), so a grain is about g of computing under the load the run puts on the
//! machine (the sequential reference, the same loop on one thread for seconds, reads
//! 0.98-1.02 of its calibrated rate).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Iterations of [`spin_iterations`] per ns, as `f64` bits; 0 until the first calibration.
static RATE: AtomicU64 = AtomicU64::new(0);

/// Each calibrating thread loops until its thread CPU time advanced this much: long enough that
/// the two clock reads around it (system calls) are noise.
const CALIBRATION: Duration = Duration::from_millis(4);

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `n` iterations of a dependent multiply-add chain. `black_box` on every step keeps the
/// compiler from shortening the chain or computing it in closed form.
#[inline(never)]
fn spin_iterations(n: u64) -> u64 {
    let mut x = 1u64;
    for _ in 0..n {
        x = std::hint::black_box(
            x.wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407),
        );
    }
    x
}

/// Iterations per ns on this thread: loops until [`CALIBRATION`] of its CPU time passed.
fn rate_here() -> f64 {
    let (started, mut done) = (thread_cpu_ns(), 0u64);
    let mut chunk = 1024u64;
    loop {
        std::hint::black_box(spin_iterations(chunk));
        done += chunk;
        let used = thread_cpu_ns() - started;
        if used >= CALIBRATION.as_nanos() as u64 {
            return done as f64 / used as f64;
        }
        chunk = chunk.saturating_mul(2).min(1 << 22);
    }
}

/// Measures the loop's rate with `threads` threads looping at once (every core busy, as in a
/// run), sets it for [`spin`] and returns it (iterations per ns, the threads' mean).
pub fn calibrate(threads: usize) -> f64 {
    let threads = threads.max(1);
    let start = std::sync::Barrier::new(threads);
    let rates: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    rate_here()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let rate = rates.iter().sum::<f64>() / rates.len() as f64;
    RATE.store(rate.to_bits(), Ordering::Relaxed);
    rate
}

/// The calibrated rate; if nothing has calibrated yet, measures it on this thread (starting
/// no thread: the caller may be a kernel of any runtime, an OpenMP task included).
fn rate() -> f64 {
    match RATE.load(Ordering::Relaxed) {
        0 => {
            let rate = rate_here();
            RATE.store(rate.to_bits(), Ordering::Relaxed);
            rate
        }
        bits => f64::from_bits(bits),
    }
}

/// The loop's iterations for a grain of `ns` at `rate` iterations per ns.
fn iterations(ns: u64, rate: f64) -> u64 {
    (ns as f64 * rate).round() as u64
}

/// Computes for `ns` ns at the last calibrated rate.
pub fn spin(ns: u64) {
    std::hint::black_box(spin_iterations(iterations(ns, rate())));
}

/// [`spin`] for the OpenMP peer: its C tasks call it through a function pointer
/// (`csrc/stencil_omp.c`), so every runtime runs the same machine code.
pub extern "C" fn pto_bench_spin(ns: u64) {
    spin(ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grain_is_its_rate_times_its_length() {
        assert_eq!(iterations(1000, 0.5), 500);
        assert_eq!(iterations(0, 3.0), 0);
        assert_eq!(iterations(3, 0.5), 2);
    }

    #[test]
    fn the_loop_computes_for_about_its_grain() {
        let rate = calibrate(1);
        assert!(rate.is_finite() && rate > 0.0, "{rate}");
        // Thread CPU time: neither preemption nor other tests' threads count. A bound of half
        // the grain only fails if the loop was skipped or the units are wrong (a rate per µs
        // or per s is off by 1000x).
        let grain = 20_000_000;
        let before = thread_cpu_ns();
        spin(grain);
        let used = thread_cpu_ns() - before;
        assert!(used >= grain / 2, "{used} ns for a grain of {grain}");
        assert!(used <= grain * 20, "{used} ns for a grain of {grain}");
    }
}
