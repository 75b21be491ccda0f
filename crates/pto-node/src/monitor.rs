//! The monitor thread: spawns every child and watches them (NODE_RUNTIME.md §2.1, §4.2, §4.9).
//!
//! One per Worker in child-process mode, started by `init` and stopped by `close` after every
//! child was asked to exit. It must be the thread that spawns (`PR_SET_PDEATHSIG` fires when
//! the *spawning thread* exits), so spawn requests — from `init` and from background restarts
//! ([`SpawnHandle`]) — are sent to it over a channel with an `eventfd` wake-up. It polls that
//! eventfd and one pidfd per live child; when a pidfd becomes readable it reaps the child with
//! `waitpid`, records how it ended in the child's [`ChildStatus`], notifies the status's event
//! count and rings the scheduler's doorbell, so a dead child is noticed within milliseconds.
//!
//! **Liveness** (mailbox rule M7): every `probe interval` (a tenth of `liveness_timeout`,
//! clamped to 5–500 ms) it bumps the probe word of each child that answered the previous
//! probe. A child whose last answer is older than `liveness_timeout` (SIGSTOP, or stuck outside
//! any callable) is recorded as unresponsive, killed through its pidfd and reaped like any
//! other death. The poll timeout is the next probe tick, so an idle Worker costs a few wake-ups
//! per second and nothing else. On stop it kills whatever is still alive, reaps it, and exits.

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

use crate::shm::Mailbox;
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

/// The conventional name of a Linux signal number (`SIGRTMIN+3` for real-time ones).
pub(crate) fn signal_name(sig: i32) -> String {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match sig {
        1..=31 => NAMES[(sig - 1) as usize].to_string(),
        34..=64 => format!("SIGRTMIN+{}", sig - 34),
        _ => format!("signal {sig}"),
    }
}

/// The monitor's liveness bookkeeping for one child.
#[derive(Debug)]
struct Probe {
    mailbox: Mailbox,
    /// The number of the latest probe sent, and when.
    sent: u32,
    sent_at: Instant,
    /// When the child was last known to answer (the send time of its latest answered probe).
    alive_at: Instant,
}

/// One child's pid, pidfd and fate, shared by the monitor and the child's endpoint.
#[derive(Debug)]
pub(crate) struct ChildStatus {
    pid: u32,
    pidfd: OwnedFd,
    exit: Mutex<Option<ExitInfo>>,
    /// Set (by the monitor) when the child was killed for not answering, with how long.
    unresponsive: Mutex<Option<Duration>>,
    /// Liveness probing, from `start_probing` until `stop_probing` or death.
    probe: Mutex<Option<Probe>>,
    /// Notified when the child has been reaped.
    pub(crate) changed: EventCount,
}

impl ChildStatus {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// How long the child had not answered when the monitor killed it, if that is why it died.
    pub(crate) fn unresponsive(&self) -> Option<Duration> {
        *self.unresponsive.lock()
    }

    /// Starts liveness probes through `mailbox` (after the child reported ready).
    pub(crate) fn start_probing(&self, mailbox: Mailbox) {
        let now = Instant::now();
        let sent = mailbox.probe_ack();
        *self.probe.lock() = Some(Probe {
            mailbox,
            sent,
            sent_at: now,
            alive_at: now,
        });
    }

    /// Stops liveness probes (the child is being shut down).
    pub(crate) fn stop_probing(&self) {
        self.probe.lock().take();
    }

    /// One liveness step at `now`; true if the child was found unresponsive and killed.
    fn check_liveness(&self, now: Instant, interval: Duration, timeout: Duration) -> bool {
        let mut guard = self.probe.lock();
        let Some(p) = guard.as_mut() else {
            return false;
        };
        if p.mailbox.probe_ack() == p.sent {
            p.alive_at = p.sent_at;
            if now.saturating_duration_since(p.sent_at) >= interval {
                p.sent = p.sent.wrapping_add(1);
                p.sent_at = now;
                p.mailbox.send_probe(p.sent);
            }
            return false;
        }
        let silent = now.saturating_duration_since(p.alive_at);
        if silent < timeout {
            return false;
        }
        guard.take();
        drop(guard);
        *self.unresponsive.lock() = Some(silent);
        self.kill();
        true
    }

    /// When the next liveness step is due, if the child is probed.
    fn next_check(&self, interval: Duration, timeout: Duration) -> Option<Instant> {
        let guard = self.probe.lock();
        let p = guard.as_ref()?;
        Some((p.sent_at + interval).min(p.alive_at + timeout))
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

/// The probe interval for a liveness timeout: a tenth of it, within 5–500 ms.
pub(crate) fn probe_interval(timeout: Duration) -> Duration {
    (timeout / 10).clamp(Duration::from_millis(5), Duration::from_millis(500))
}

/// A cloneable way to ask the monitor thread for a spawn (background restarts use it).
#[derive(Clone)]
pub(crate) struct SpawnHandle {
    tx: Sender<Cmd>,
    wake: Arc<OwnedFd>,
}

impl SpawnHandle {
    /// Wakes the monitor thread (new children, new probes to schedule).
    pub(crate) fn poke(&self) {
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
}

/// The handle the Worker keeps.
pub(crate) struct Monitor {
    handle: SpawnHandle,
    thread: Option<JoinHandle<()>>,
    children: Arc<Mutex<Vec<Arc<ChildStatus>>>>,
}

impl Monitor {
    /// Starts the monitor thread; child deaths ring `doorbell`; children whose probing started
    /// are killed after `liveness_timeout` without an answer.
    pub(crate) fn start(
        doorbell: Arc<Doorbell>,
        liveness_timeout: Duration,
    ) -> io::Result<Monitor> {
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
            liveness_timeout,
            interval: probe_interval(liveness_timeout),
        };
        let thread = std::thread::Builder::new()
            .name("pto-node-monitor".to_string())
            .spawn(move || state.run())?;
        Ok(Monitor {
            handle: SpawnHandle { tx, wake },
            thread: Some(thread),
            children,
        })
    }

    /// A handle for spawning from other threads.
    pub(crate) fn handle(&self) -> SpawnHandle {
        self.handle.clone()
    }

    /// Spawns `spec` on the monitor thread and waits for the result.
    #[cfg(test)]
    pub(crate) fn spawn(&self, spec: SpawnSpec) -> io::Result<Arc<ChildStatus>> {
        self.handle.spawn(spec)
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
        let _ = self.handle.tx.send(Cmd::Stop);
        self.handle.poke();
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
    liveness_timeout: Duration,
    interval: Duration,
}

impl MonitorThread {
    fn run(mut self) {
        let mut stopping = false;
        loop {
            if stopping && self.live.is_empty() {
                return;
            }
            let woken = self.poll_once(stopping);
            if woken {
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(self.wake.as_fd(), &mut buf);
            }
            while let Ok(cmd) = self.rx.try_recv() {
                match cmd {
                    Cmd::Spawn(spec, reply) => {
                        let _ = reply.send(self.spawn(&spec));
                    }
                    Cmd::Stop => {
                        stopping = true;
                        for c in &self.live {
                            c.stop_probing();
                            c.kill();
                        }
                    }
                }
            }
            if !stopping {
                let now = Instant::now();
                for c in &self.live {
                    c.check_liveness(now, self.interval, self.liveness_timeout);
                }
            }
            if self.reap() {
                self.doorbell.notify_one();
            }
        }
    }

    /// Polls the eventfd and every live pidfd until one is readable or the next liveness step
    /// (while stopping: 20 ms, bounding the wait for killed children); true if the eventfd woke.
    fn poll_once(&self, stopping: bool) -> bool {
        let mut fds = Vec::with_capacity(self.live.len() + 1);
        fds.push(PollFd::new(&*self.wake, PollFlags::IN));
        for c in &self.live {
            fds.push(PollFd::new(&c.pidfd, PollFlags::IN));
        }
        let wait = if stopping {
            Some(Duration::from_millis(20))
        } else {
            let now = Instant::now();
            self.live
                .iter()
                .filter_map(|c| c.next_check(self.interval, self.liveness_timeout))
                .min()
                .map(|t| t.saturating_duration_since(now))
        };
        let timeout = wait.map(|d| rustix::event::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) => !fds[0].revents().is_empty(),
            Err(_) => false,
        }
    }

    fn spawn(&mut self, spec: &SpawnSpec) -> io::Result<Arc<ChildStatus>> {
        spawn(spec).map(|Spawned { pid, pidfd }| {
            let status = Arc::new(ChildStatus {
                pid,
                pidfd,
                exit: Mutex::new(None),
                unresponsive: Mutex::new(None),
                probe: Mutex::new(None),
                changed: EventCount::new(),
            });
            self.live.push(Arc::clone(&status));
            self.all.lock().push(Arc::clone(&status));
            status
        })
    }

    /// Reaps every child that exited (a pidfd can be readable without a poll hit when the list
    /// changed; `waitpid` with WNOHANG is cheap and exact); true if one was reaped.
    fn reap(&mut self) -> bool {
        let mut reaped = false;
        self.live.retain(|c| {
            let pid = Pid::from_raw(c.pid as i32).expect("a child pid is positive");
            let info = match rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
                Ok(Some((_, status))) => {
                    match (status.exit_status(), status.terminating_signal()) {
                        (Some(code), _) => ExitInfo::Exited(code),
                        (None, Some(sig)) => ExitInfo::Signaled(sig),
                        (None, None) => ExitInfo::Exited(-1),
                    }
                }
                Ok(None) => return true,
                // ECHILD: someone else reaped it; treat as gone.
                Err(_) => ExitInfo::Exited(-1),
            };
            c.stop_probing();
            *c.exit.lock() = Some(info);
            c.changed.notify_all();
            reaped = true;
            false
        });
        reaped
    }
}
