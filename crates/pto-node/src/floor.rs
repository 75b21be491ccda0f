//! The floor of an L3 hand-off (BENCHMARKS.md B3): a round trip between this process and a
//! child process through one word of a shared `memfd`, both sides spinning — what a mailbox
//! round trip costs at the very least on this machine, measured beside `pto bench dispatch`.
//!
//! The child is this executable again: `child_main()` sees `PTO_CHILD_ROLE=pingpong`, maps
//! the segment handed over as fd 5, raises the ready word and answers `rounds` pings. Every
//! wait of both sides is bounded, so a child that dies never hangs the parent.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::{Duration, Instant};

use pto_types::wait::{SpinPolicy, SpinWindow};
use rustix::net::{AddressFamily, SocketFlags, SocketType};

use crate::shm::{Segment, SegmentKey};
use crate::spawn::{SpawnSpec, TEST_ENTRY_ARGS, spawn};

/// Offsets of the ping word and the ready word in the segment.
const PING: usize = 0;
const READY: usize = 64;
const BYTES: usize = 4096;
/// How long either side waits for the other before giving up.
const PATIENCE: Duration = Duration::from_secs(10);

/// The floor measures a spinning round trip (~0.15 µs), so a side reads the clock only every
/// 4096 steps (~0.1-0.2 ms): a read per step (~45 ns) would be a third of what is measured, and
/// the clock is only there to notice a dead peer.
const FLOOR_CLOCK_EVERY: u32 = 4096;

/// One side's spinning for all its rounds: never yields, never parks, and reads the clock on
/// its first step and then every [`FLOOR_CLOCK_EVERY`] steps, so a round trip reads none.
fn floor_window() -> SpinWindow {
    SpinWindow::new(SpinPolicy::new(PATIENCE).with_pure_spin(PATIENCE))
        .reading_clock_every(FLOOR_CLOCK_EVERY)
}

/// Spins on `window` until `done()` or the deadline; false on timeout.
fn spin_until(window: &mut SpinWindow, deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    while !done() {
        if !window.step_until(Some(deadline)).is_spinning() {
            return false;
        }
    }
    true
}

/// µs per round trip over `rounds` pings with a child process. `test_binary`: the current
/// executable is a libtest binary (it enters `child_main` through `test_child_entry!`).
pub fn shm_round_trip(rounds: u32, test_binary: bool) -> io::Result<f64> {
    let key = SegmentKey {
        owner: u64::from(std::process::id()),
        segment: 1,
    };
    let seg = Segment::create(key, "pto-pingpong", BYTES)?;
    let (_ours, theirs): (OwnedFd, OwnedFd) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let raw = seg
        .with_fd(|fd| fd.as_raw_fd())
        .ok_or_else(|| io::Error::other("the segment has no descriptor"))?;
    let args = if test_binary {
        TEST_ENTRY_ARGS.iter().map(OsString::from).collect()
    } else {
        Vec::new()
    };
    let child = spawn(&SpawnSpec {
        exe: std::env::current_exe()?,
        args,
        env: vec![
            ("PTO_CHILD_ROLE".into(), "pingpong".into()),
            ("PTO_PINGPONG_ROUNDS".into(), rounds.to_string().into()),
        ],
        fds: [theirs.as_raw_fd(), raw, raw, raw],
    })?;
    let pid = rustix::process::Pid::from_raw(child.pid as i32)
        .ok_or_else(|| io::Error::other("pid 0"))?;
    let result = ping(&seg, rounds);
    if result.is_err() {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
    result
}

fn ping(seg: &Segment, rounds: u32) -> io::Result<f64> {
    let (word, ready) = (seg.word(PING), seg.word(READY));
    let start_up = Instant::now() + PATIENCE;
    if !spin_until(&mut floor_window(), start_up, || ready.load(Acquire) == 1) {
        return Err(io::Error::other("the ping-pong child did not start"));
    }
    let mut window = floor_window();
    let started = Instant::now();
    let deadline = started + PATIENCE;
    for i in 0..rounds {
        word.store(2 * i + 1, Release);
        if !spin_until(&mut window, deadline, || word.load(Acquire) == 2 * i + 2) {
            return Err(io::Error::other("the ping-pong child stopped answering"));
        }
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds.max(1)))
}

/// The child's side; returns its exit status.
pub(crate) fn serve(fd: OwnedFd, rounds: u32) -> i32 {
    let Ok(seg) = Segment::from_fd(
        SegmentKey {
            owner: 0,
            segment: 1,
        },
        fd,
        BYTES,
    ) else {
        return 4;
    };
    let word = seg.word(PING);
    seg.word(READY).store(1, Release);
    let mut window = floor_window();
    let deadline = Instant::now() + PATIENCE;
    for i in 0..rounds {
        if !spin_until(&mut window, deadline, || word.load(Acquire) == 2 * i + 1) {
            return 3;
        }
        word.store(2 * i + 2, Release);
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real child process (this test binary re-executed) answers every ping.
    #[test]
    fn a_child_process_answers_every_ping() {
        let us = shm_round_trip(2000, true).expect("the ping-pong child runs");
        assert!(us.is_finite() && us > 0.0, "{us}");
    }
}
