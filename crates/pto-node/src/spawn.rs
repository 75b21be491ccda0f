//! Starting child processes: the only place of the crate that builds a `Command` (STYLE.md
//! habit 8; NODE_RUNTIME.md §4.2).
//!
//! A child is a fresh image (`exec`, never fork-without-exec), so it is safe to start from a
//! multi-threaded parent: `std::process::Command` forks and execs at once, and the code that
//! runs in between (`pre_exec`) makes only async-signal-safe system calls without allocating:
//!
//! 1. `PR_SET_PDEATHSIG = SIGKILL`: the child dies with the thread that spawned it (the
//!    monitor thread, which lives until `close` ends);
//! 2. the four inherited descriptors move to fds 3–6, collision-safe as the `command-fds`
//!    crate does: each is first duplicated above every target (`F_DUPFD_CLOEXEC`, ≥ 64), then
//!    `dup2`ed onto its target (which clears close-on-exec); the temporaries close at `exec`.
//!
//! The environment is the parent's, plus exactly what the node adds: `PTO_CHILD=1`,
//! `PTO_CHILD_FDS=3,4,5,6`, `PTO_CHILD_ROLE=chip|sub|node` (for whoever looks at processes)
//! and (chips) the Worker's `ring_env` pairs (RING_CONFIG.md §4.1).
//! Standard input and output are `/dev/null`; standard error is inherited (a child's panic is
//! visible). The child's arguments select the entry hook of a test binary
//! (`--exact __pto_child`, see `test_child_entry!`); a binary that calls `child_main()` first
//! in `main` never looks at them.

#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use rustix::process::{Pid, PidfdFlags, Signal};

/// Descriptor numbers a child finds its channels at (socket, control, mailbox, heap).
pub(crate) const CHILD_FDS: [RawFd; 4] = [3, 4, 5, 6];
/// Arguments that select the child entry of a test binary.
pub(crate) const TEST_ENTRY_ARGS: [&str; 5] = [
    "--exact",
    "__pto_child",
    "--nocapture",
    "--test-threads=1",
    "-q",
];

/// What to start.
pub(crate) struct SpawnSpec {
    pub(crate) exe: PathBuf,
    pub(crate) args: Vec<OsString>,
    /// Added to the inherited environment (later pairs win).
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Descriptors that become fds 3–6; the caller keeps them open until `spawn` returns.
    pub(crate) fds: [RawFd; 4],
}

/// A started child: its pid and a pidfd (readable when it exits).
pub(crate) struct Spawned {
    pub(crate) pid: u32,
    pub(crate) pidfd: OwnedFd,
}

/// Starts `spec` (see the module documentation).
pub(crate) fn spawn(spec: &SpawnSpec) -> io::Result<Spawned> {
    // The one safe door of clippy.toml's ban on `Command::new`: the child's environment and
    // descriptors are built explicitly below.
    #[allow(clippy::disallowed_methods)]
    let mut cmd = Command::new(&spec.exe);
    cmd.args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    cmd.env("PTO_CHILD", "1").env("PTO_CHILD_FDS", "3,4,5,6");
    let sources = spec.fds;
    // SAFETY: the closure runs in the forked child before `exec`. It allocates nothing and makes
    // only async-signal-safe system calls (prctl, fcntl, dup2) on descriptors that the caller
    // keeps open across `spawn` (so they are valid in the child's copy of the table).
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            let mut temps: [RawFd; 4] = [-1; 4];
            for (i, &src) in sources.iter().enumerate() {
                // SAFETY: `src` is open (see above) for the duration of this call.
                let fd = BorrowedFd::borrow_raw(src);
                let tmp = rustix::io::fcntl_dupfd_cloexec(fd, 64)?;
                temps[i] = std::os::fd::IntoRawFd::into_raw_fd(tmp);
            }
            for (i, &tmp) in temps.iter().enumerate() {
                // SAFETY: `tmp` was just created above; the target number is only used as the
                // destination of `dup2` (which closes whatever it held) and never closed here:
                // `ManuallyDrop` keeps the `OwnedFd` from closing it.
                let mut target = std::mem::ManuallyDrop::new(OwnedFd::from_raw_fd(CHILD_FDS[i]));
                rustix::io::dup2(BorrowedFd::borrow_raw(tmp), &mut target)?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id();
    // The child is our zombie until the monitor reaps it, so the pid cannot be reused before
    // the pidfd refers to it.
    let raw = Pid::from_raw(pid as i32).ok_or_else(|| io::Error::other("pid 0"))?;
    let pidfd = match rustix::process::pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            // No pidfd (kernel < 5.3): do not leave an unwatched child behind.
            let _ = rustix::process::kill_process(raw, Signal::KILL);
            let _ = rustix::process::waitpid(Some(raw), rustix::process::WaitOptions::empty());
            return Err(io::Error::other(format!("pidfd_open: {e}")));
        }
    };
    // Dropping `child` neither waits nor kills: the monitor reaps through `waitpid`.
    drop(child);
    Ok(Spawned { pid, pidfd })
}

/// The child's side of the hand-over: takes ownership of the four descriptors named by
/// `PTO_CHILD_FDS` (`"3,4,5,6"`) and marks them close-on-exec, so a node child's own children
/// do not inherit them.
pub(crate) fn adopt_child_fds(list: &str) -> io::Result<[OwnedFd; 4]> {
    let numbers: Vec<RawFd> = list
        .split(',')
        .map(|s| s.trim().parse::<RawFd>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            io::Error::other(format!("PTO_CHILD_FDS={list:?} is not a list of numbers"))
        })?;
    let [a, b, c, d] = numbers[..] else {
        return Err(io::Error::other(format!(
            "PTO_CHILD_FDS={list:?} must name 4 descriptors"
        )));
    };
    let mut out = Vec::with_capacity(4);
    for n in [a, b, c, d] {
        if n < 0 {
            return Err(io::Error::other(format!("PTO_CHILD_FDS names fd {n}")));
        }
        // SAFETY: probing with fcntl only; an fd that is not open makes it fail with EBADF.
        let probe = unsafe { BorrowedFd::borrow_raw(n) };
        rustix::io::fcntl_setfd(probe, rustix::io::FdFlags::CLOEXEC)
            .map_err(|e| io::Error::other(format!("inherited fd {n}: {e}")))?;
        // SAFETY: the fd is open (checked above) and was handed to this process by its parent
        // for this purpose; nothing else in the process owns it.
        out.push(unsafe { OwnedFd::from_raw_fd(n) });
    }
    // Only what a Worker hands over is adopted: fd 3 a SOCK_SEQPACKET socket, fds 4-6 memfds
    // (sealing is a memfd/tmpfs property). Anything else means PTO_CHILD came from elsewhere,
    // and nothing may be mapped or written through those descriptors.
    match rustix::net::sockopt::socket_type(&out[0]) {
        Ok(rustix::net::SocketType::SEQPACKET) => {}
        _ => {
            return Err(io::Error::other(format!(
                "inherited fd {a} is not a pto descriptor socket"
            )));
        }
    }
    for (fd, n) in out[1..].iter().zip([b, c, d]) {
        if rustix::fs::fcntl_get_seals(fd).is_err() {
            return Err(io::Error::other(format!(
                "inherited fd {n} is not a pto shared-memory segment"
            )));
        }
    }
    let mut it = out.into_iter();
    Ok([
        it.next().expect("4 fds"),
        it.next().expect("4 fds"),
        it.next().expect("4 fds"),
        it.next().expect("4 fds"),
    ])
}

/// Raises this process's soft descriptor limit to its hard limit (as the Go runtime does): a
/// child-process Worker holds one descriptor per shared buffer, and a child briefly holds the
/// ones in flight on its socket, so the common soft limit of 1024 would cap a run at about a
/// thousand buffers for no reason. Never lowers anything; failures are ignored (the limit
/// then stays as it was, and running out is reported where a descriptor is needed).
pub(crate) fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
}
