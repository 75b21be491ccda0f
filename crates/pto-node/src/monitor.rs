//! The monitor thread: spawns every child and watches them (NODE_RUNTIME.md §2.1, §4.2, §4.9).
//!
//! One per Worker in child-process mode, started by `init` and stopped by `close` after every
//! child was asked to exit. It must be the thread that spawns (`PR_SET_PDEATHSIG` fires when
//! the *spawning thread* exits), so spawn requests are sent to it over a channel with an
//! `eventfd` wake-up. It polls that eventfd and one pidfd per live child (no timer: an idle
//! monitor costs nothing); when a pidfd becomes readable it reaps the child with `waitpid`,
//! records how it ended in the child's [`ChildStatus`], notifies the status's event count and
//! rings the scheduler's doorbell, so a dead child is noticed within milliseconds. On stop it
//! kills whatever is still alive, reaps it, and exits.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pto_types::wait::{EventCount, SpinPolicy, wait_until};
use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::process::{Pid, Signal, WaitOptions};

use crate::shm::doorbell::Doorbell;
use crate::spawn::{SpawnSpec, Spawned, spawn};

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExitInfo {
    Exited(i32),
    Signaled(i32),
}

impl ExitInfo {
    /// `exited with status 3`, `terminated by signal 9 (SIGKILL)`.
    pub(crate) fn describe(self) -> String {
        match self {
            ExitInfo::Exited(code) => format!("exited with status {code}"),
            ExitInfo::Signaled(sig) => format!("terminated by signal {sig} ({})", signal_name(sig)),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// One child's pid, pidfd and fate, shared by the monitor and the child's endpoint.
#[derive(Debug)]
pub(crate) struct ChildStatus {
    pid: u32,
    pidfd: OwnedFd,
    exit: Mutex<Option<ExitInfo>>,
    /// Notified when the child has been reaped.
    pub(crate) changed: EventCount,
}

impl ChildStatus {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// How the child ended, once reaped.
    pub(crate) fn exit(&self) -> Option<ExitInfo> {
        *self.exit.lock()
    }

    /// Sends SIGKILL through the pidfd (never to a reused pid); a no-op once it exited.
    pub(crate) fn kill(&self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, Signal::KILL);
    }

    /// Waits until the child was reaped or `deadline` passes; true if reaped.
    pub(crate) fn wait_exit(&self, deadline: Instant) -> bool {
        wait_until(
            &self.changed,
            SpinPolicy::PARK_IMMEDIATELY,
            Some(deadline),
            || self.exit().map(|_| ()),
        )
        .is_ok()
    }
}

enum Cmd {
    Spawn(Box<SpawnSpec>, Sender<io::Result<Arc<ChildStatus>>>),
    Stop,
}

/// The handle the Worker keeps.
pub(crate) struct Monitor {
    tx: Sender<Cmd>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    children: Arc<Mutex<Vec<Arc<ChildStatus>>>>,
}

impl Monitor {
    /// Starts the monitor thread; child deaths ring `doorbell`.
    pub(crate) fn start(doorbell: Arc<Doorbell>) -> io::Result<Monitor> {
        let wake = Arc::new(rustix::event::eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
        )?);
        let (tx, rx) = channel();
        let children = Arc::new(Mutex::new(Vec::new()));
        let state = MonitorThread {
            rx,
            wake: Arc::clone(&wake),
            doorbell,
            live: Vec::new(),
            all: Arc::clone(&children),
        };
        let thread = std::thread::Builder::new()
            .name("pto-node-monitor".to_string())
            .spawn(move || state.run())?;
        Ok(Monitor {
            tx,
            wake,
            thread: Some(thread),
            children,
        })
    }

    fn poke(&self) {
        let _ = rustix::io::write(self.wake.as_fd(), &1u64.to_ne_bytes());
    }

    /// Spawns `spec` on the monitor thread and waits for the result.
    pub(crate) fn spawn(&self, spec: SpawnSpec) -> io::Result<Arc<ChildStatus>> {
        let (reply_tx, reply_rx) = channel();
        self.tx
            .send(Cmd::Spawn(Box::new(spec), reply_tx))
            .map_err(|_| io::Error::other("the monitor thread has stopped"))?;
        self.poke();
        reply_rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| io::Error::other("the monitor thread did not answer"))?
    }

    /// Every child spawned so far.
    pub(crate) fn children(&self) -> Vec<Arc<ChildStatus>> {
        self.children.lock().clone()
    }

    /// Kills and reaps whatever is alive, then joins the thread. Idempotent.
    pub(crate) fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        let _ = self.tx.send(Cmd::Stop);
        self.poke();
        let _ = thread.join();
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop();
    }
}

struct MonitorThread {
    rx: Receiver<Cmd>,
    wake: Arc<OwnedFd>,
    doorbell: Arc<Doorbell>,
    live: Vec<Arc<ChildStatus>>,
    all: Arc<Mutex<Vec<Arc<ChildStatus>>>>,
}

impl MonitorThread {
    fn run(mut self) {
        let mut stopping = false;
        loop {
            if stopping && self.live.is_empty() {
                return;
            }
            let readable: Vec<bool> = {
                let mut fds = Vec::with_capacity(self.live.len() + 1);
                fds.push(PollFd::new(&*self.wake, PollFlags::IN));
                for c in &self.live {
                    fds.push(PollFd::new(&c.pidfd, PollFlags::IN));
                }
                // No timeout: the eventfd or a pidfd wakes us. (While stopping, a short one
                // bounds the wait for killed children.)
                let timeout = stopping.then_some(rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000_000,
                });
                match rustix::event::poll(&mut fds, timeout.as_ref()) {
                    Ok(_) => fds.iter().map(|f| !f.revents().is_empty()).collect(),
                    Err(_) => vec![false; fds.len()],
                }
            };
            if readable[0] {
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(self.wake.as_fd(), &mut buf);
            }
            while let Ok(cmd) = self.rx.try_recv() {
                match cmd {
                    Cmd::Spawn(spec, reply) => {
                        let result = spawn(&spec).map(|Spawned { pid, pidfd }| {
                            let status = Arc::new(ChildStatus {
                                pid,
                                pidfd,
                                exit: Mutex::new(None),
                                changed: EventCount::new(),
                            });
                            self.live.push(Arc::clone(&status));
                            self.all.lock().push(Arc::clone(&status));
                            status
                        });
                        let _ = reply.send(result);
                    }
                    Cmd::Stop => {
                        stopping = true;
                        for c in &self.live {
                            c.kill();
                        }
                    }
                }
            }
            // Reap every child that exited (a pidfd can be readable without a poll hit when
            // the list changed; waitpid with WNOHANG is cheap and exact).
            let mut reaped = false;
            self.live.retain(|c| {
                let pid = Pid::from_raw(c.pid as i32).expect("a child pid is positive");
                match rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
                    Ok(Some((_, status))) => {
                        let info = match (status.exit_status(), status.terminating_signal()) {
                            (Some(code), _) => ExitInfo::Exited(code),
                            (None, Some(sig)) => ExitInfo::Signaled(sig),
                            (None, None) => ExitInfo::Exited(-1),
                        };
                        *c.exit.lock() = Some(info);
                        c.changed.notify_all();
                        reaped = true;
                        false
                    }
                    Ok(None) => true,
                    Err(_) => {
                        // ECHILD: someone else reaped it; treat as gone.
                        *c.exit.lock() = Some(ExitInfo::Exited(-1));
                        c.changed.notify_all();
                        reaped = true;
                        false
                    }
                }
            });
            if reaped {
                self.doorbell.notify_one();
            }
        }
    }
}
