//! Start-up of child processes (NODE_RUNTIME.md §4.2–§4.6): segments, boot blocks, spawning
//! through the monitor thread, the ready/failed handshake under one deadline, and the rollback
//! that leaves no process behind when anything fails.
//!
//! Order: the heap-ring segment (created by the caller) and the node control segment exist
//! before any child; the scheduler's doorbell is attached to the control segment; then, for
//! each child, a mailbox segment holding the start-up frame (identity and boot block, state
//! `BOOTING`), a `SOCK_SEQPACKET` pair, and a spawn with fds 3–6 = (socket, control, mailbox,
//! heap). All children start at once; `init` then waits on the doorbell (every child rings it
//! after `INIT_READY`/`INIT_FAILED`, the monitor after a death) until all are ready, one failed
//! or exited, or `startup_timeout` passed.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pto_types::node_wire::boot::{BootBlock, BootCallable};
use pto_types::node_wire::control_segment::{self, ControlHeader, SEGMENT_BYTES};
use pto_types::node_wire::mailbox::{
    self as frame, FIXED_BYTES, FRAME_BYTES, KindCode, MailboxState,
};
use pto_types::wait::SpinPolicy;
use rustix::net::{AddressFamily, SocketFlags, SocketType};

use crate::boot::chip_spec_to_boot;
use crate::builder::{ChildExe, WorkerOptions};
use crate::callable::{CallableKind, CallableTable};
use crate::child::{EXIT_BROKEN, EXIT_INIT_FAILED, EXIT_PARENT_GONE};
use crate::endpoint::Endpoint;
use crate::endpoint::child_process::{ChildProcessEndpoint, ChildRole, ReadyChild};
use crate::error::InitError;
use crate::monitor::{ChildStatus, ExitInfo, Monitor, SpawnHandle};
use crate::shm::doorbell::{Doorbell, wait_on};
use crate::shm::{Mailbox, Segment, SegmentKey, SharedDoorbell};
use crate::spawn::{SpawnSpec, TEST_ENTRY_ARGS};

/// What stays alive with the Worker in child-process mode.
pub(crate) struct ChildRuntime {
    pub(crate) monitor: Monitor,
    pub(crate) control: Arc<Segment>,
}

impl ChildRuntime {
    /// Sets the control segment's sticky `shutdown_all` word: every child exits at its next
    /// check (M5's node-wide form).
    pub(crate) fn shutdown_all(&self) {
        SharedDoorbell::new(Arc::clone(&self.control)).set_shutdown_all();
    }
}

/// The started children, ready to serve.
pub(crate) struct Launched {
    pub(crate) chips: Vec<Box<dyn Endpoint>>,
    pub(crate) subs: Vec<Box<dyn Endpoint>>,
    pub(crate) chip_names: Vec<String>,
    pub(crate) sub_names: Vec<String>,
    pub(crate) runtime: ChildRuntime,
}

/// A spawned child that has not reported ready yet.
pub(crate) struct Pending {
    base_name: String,
    role: ChildRole,
    mailbox: Mailbox,
    sock: OwnedFd,
    status: Arc<ChildStatus>,
}

impl Pending {
    fn name(&self) -> String {
        format!("{} pid={}", self.base_name, self.status.pid())
    }

    /// `Some(Ok)` once ready, `Some(Err(message))` once it failed or exited, `None` meanwhile.
    fn progress(&self) -> Option<Result<(), String>> {
        match self.mailbox.state() {
            Ok(MailboxState::InitReady) => Some(Ok(())),
            Ok(MailboxState::InitFailed) => {
                let fixed = self.mailbox.read_fixed();
                Some(Err(frame::decode_reply(&fixed)
                    .map(|r| frame::decode_message(&fixed, r.message_bytes))
                    .unwrap_or_else(|e| {
                        format!("undecodable INIT_FAILED reply: {e}")
                    })))
            }
            Ok(MailboxState::Booting) => self.status.exit().map(|exit| Err(early_exit(exit))),
            other => Some(Err(format!(
                "mailbox protocol violation at start-up: state {other:?}"
            ))),
        }
    }

    /// Asks the child to exit (the sticky word, and SHUTDOWN where the parent owns the frame).
    fn ask_to_stop(&self) {
        self.mailbox.request_shutdown();
        let _ = self.mailbox.transition_to_shutdown(MailboxState::InitReady);
    }

    /// Waits until `deadline` for the child to exit, then kills it.
    fn wait_or_kill(&self, deadline: Instant) {
        if !self.status.wait_exit(deadline) {
            self.status.kill();
        }
    }

    /// Asks the child to exit, waits until `deadline`, then kills it.
    fn stop(&self, deadline: Instant) {
        self.ask_to_stop();
        self.wait_or_kill(deadline);
    }
}

/// Why a child that exited before INIT_READY did so; the `child_main()` hint only where it can
/// be the cause (the image ran its own `main` instead of the child runtime).
fn early_exit(exit: ExitInfo) -> String {
    let ours = [EXIT_INIT_FAILED, EXIT_PARENT_GONE, EXIT_BROKEN];
    match exit {
        ExitInfo::Exited(code) if !ours.contains(&code) => format!(
            "{} before start-up completed (does the image call pto_node::child_main() first in main, or declare pto_node::test_child_entry!()?)",
            exit.describe()
        ),
        _ => format!("{} before start-up completed", exit.describe()),
    }
}

/// Everything needed to start one child of a Worker, at `init` and for every restart.
pub(crate) struct ChildFactory {
    options: WorkerOptions,
    exe: PathBuf,
    args: Vec<OsString>,
    table: Vec<BootCallable>,
    control: Arc<Segment>,
    heap: Arc<Segment>,
    node_specs: Vec<Vec<u8>>,
    spawner: SpawnHandle,
    doorbell: Arc<Doorbell>,
    uid: u64,
}

impl ChildFactory {
    /// `chip_child[1]`, `sub_child[0]`, `node_child[2]`.
    pub(crate) fn base_name(role: ChildRole) -> String {
        match role {
            ChildRole::Chip(i) => format!("chip_child[{i}]"),
            ChildRole::Sub(i) => format!("sub_child[{i}]"),
            ChildRole::Node(i) => format!("node_child[{i}]"),
        }
    }

    fn boot_block(&self, role: ChildRole, deadline: Instant) -> Result<Vec<u8>, String> {
        let spin_us = |d: Duration| d.as_micros().min(u128::from(u32::MAX)) as u32;
        let o = &self.options;
        let (kind, index) = match role {
            ChildRole::Chip(i) => (KindCode::Chip, i),
            ChildRole::Sub(i) => (KindCode::Sub, i),
            ChildRole::Node(i) => (KindCode::Node, i),
        };
        BootBlock {
            role: kind,
            index,
            startup_budget_ms: deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
            spin_us: [
                spin_us(o.scheduler_spin),
                spin_us(o.lane_spin),
                spin_us(o.waiter_spin),
            ],
            strict_env: o.strict_env,
            chip: match role {
                ChildRole::Chip(i) => Some(chip_spec_to_boot(&o.chip_specs[i as usize])),
                ChildRole::Sub(_) | ChildRole::Node(_) => None,
            },
            callables: self.table.clone(),
            node: match role {
                ChildRole::Node(i) => Some(self.node_specs[i as usize].clone()),
                _ => None,
            },
        }
        .encode()
        .map_err(|e| e.to_string())
    }

    /// Spawns the child for `role`: its mailbox (start-up frame, state BOOTING), a
    /// `SOCK_SEQPACKET` pair, and the process with fds 3–6.
    fn start(&self, role: ChildRole, deadline: Instant) -> Result<Pending, String> {
        let base_name = Self::base_name(role);
        let seg = Segment::create(
            SegmentKey {
                owner: self.uid,
                segment: u64::MAX - 1,
            },
            &format!("pto-{:x}-mbox-{base_name}", self.uid),
            self.options.lane_depth * FRAME_BYTES,
        )
        .map_err(|e| e.to_string())?;
        let seg = Arc::new(seg);
        Mailbox::init_ring(&seg);
        let mailbox = Mailbox::new(seg);
        let boot = self.boot_block(role, deadline)?;
        let mut fixed = vec![0u8; FIXED_BYTES];
        frame::encode_boot_header(boot.len() as u32, &mut fixed);
        mailbox.write_parent(&fixed, &boot);
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| e.to_string())?;
        let raw = |s: &Arc<Segment>| {
            s.with_fd(|fd| fd.as_raw_fd())
                .ok_or_else(|| "a segment descriptor is closed (the Worker is closing)".to_string())
        };
        let (mut env, kind) = match role {
            ChildRole::Chip(_) => (self.options.ring_env.clone(), "chip"),
            // A node child applies its own Worker's ring_env to its chips.
            ChildRole::Sub(_) => (Vec::new(), "sub"),
            ChildRole::Node(_) => (Vec::new(), "node"),
        };
        // For people and tools looking at processes (`pto soak` picks fault targets by it);
        // the child itself learns its role from the boot block.
        env.push(("PTO_CHILD_ROLE".into(), kind.into()));
        let spec = SpawnSpec {
            exe: self.exe.clone(),
            args: self.args.clone(),
            env,
            fds: [
                theirs.as_raw_fd(),
                raw(&self.control)?,
                raw(mailbox.segment())?,
                raw(&self.heap)?,
            ],
        };
        let status = self
            .spawner
            .spawn(spec)
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        drop(theirs);
        Ok(Pending {
            base_name,
            role,
            mailbox,
            sock: ours,
            status,
        })
    }

    /// The endpoint of a child that reported INIT_READY; its liveness probes start now.
    fn endpoint(self: &Arc<Self>, p: Pending) -> ChildProcessEndpoint {
        let fixed = p.mailbox.read_fixed();
        let message = frame::decode_reply(&fixed)
            .map(|r| frame::decode_message(&fixed, r.message_bytes))
            .unwrap_or_default();
        let env_problems: Vec<String> = message
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        for problem in &env_problems {
            tracing::warn!(target: "pto::ring_config", "{}: {problem}", p.name());
        }
        // M1: INIT_READY belongs to the parent; IDLE wakes nobody.
        let _ = p.mailbox.transition_to_idle(MailboxState::InitReady);
        p.status.start_probing(p.mailbox.clone());
        // The monitor may be parked without a timeout: let it schedule the probes.
        self.spawner.poke();
        let name = p.name();
        ChildProcessEndpoint::new(
            ReadyChild {
                name,
                role: p.role,
                mailbox: p.mailbox,
                sock: p.sock,
                status: p.status,
                env_problems,
            },
            &self.heap,
            Some(Arc::clone(self)),
        )
    }

    /// `WorkerBuilder::restart_children`.
    pub(crate) fn restarts_enabled(&self) -> bool {
        self.options.restart_children
    }

    /// Rings the scheduler's doorbell (a restart finished).
    pub(crate) fn notify_scheduler(&self) {
        self.doorbell.notify_one();
    }

    /// After `delay`, starts a replacement child for `role` and waits (blocking this thread,
    /// never the scheduler) until it is ready, failed, exited, `startup_timeout` passed or
    /// `cancel` was set; a child that did not become ready is stopped.
    pub(crate) fn restart(
        self: &Arc<Self>,
        role: ChildRole,
        delay: Duration,
        cancel: &AtomicBool,
    ) -> Result<ChildProcessEndpoint, String> {
        let cancelled = || cancel.load(Ordering::SeqCst);
        let wake = Instant::now() + delay;
        while Instant::now() < wake && !cancelled() {
            std::thread::sleep(
                wake.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(10)),
            );
        }
        if cancelled() {
            return Err("the Worker is closing".to_string());
        }
        let deadline = Instant::now() + self.options.startup_timeout;
        let p = self.start(role, deadline)?;
        let mut pause = Duration::from_micros(200);
        loop {
            match p.progress() {
                Some(Ok(())) => return Ok(self.endpoint(p)),
                Some(Err(message)) => {
                    p.stop(Instant::now() + self.options.shutdown_grace);
                    return Err(format!("{}: {message}", p.name()));
                }
                None if cancelled() => {
                    p.stop(Instant::now());
                    return Err("the Worker is closing".to_string());
                }
                None if Instant::now() >= deadline => {
                    p.stop(Instant::now());
                    return Err(format!(
                        "{} did not report ready within startup_timeout ({:?})",
                        p.name(),
                        self.options.startup_timeout
                    ));
                }
                // Start-up only: a short poll keeps the doorbell's one parked waiter (the
                // scheduler) its own.
                None => std::thread::sleep(pause),
            }
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }
}

/// The node control segment, written before any child starts.
fn control_segment(options: &WorkerOptions, uid: u64) -> std::io::Result<Arc<Segment>> {
    let control = Arc::new(Segment::create(
        SegmentKey {
            owner: uid,
            segment: u64::MAX,
        },
        &format!("pto-{uid:x}-ctl"),
        SEGMENT_BYTES,
    )?);
    let mut header = vec![0u8; control_segment::HEADER_BYTES];
    control_segment::encode(
        &ControlHeader {
            parent_pid: std::process::id(),
            worker_uid: uid,
            heap_ring_size: options.heap_ring_size,
        },
        &mut header,
    );
    control.write(0, &header);
    Ok(control)
}

fn boot_table(callables: &CallableTable) -> Vec<BootCallable> {
    callables
        .entries()
        .into_iter()
        .map(|(id, kind, name)| BootCallable {
            id,
            kind: match kind {
                CallableKind::Chip => KindCode::Chip,
                CallableKind::Sub => KindCode::Sub,
                CallableKind::Node => KindCode::Node,
            },
            name: name.to_string(),
        })
        .collect()
}

/// Starts every child of the Worker; on failure nothing is left running.
pub(crate) fn launch(
    options: &WorkerOptions,
    uid: u64,
    callables: &CallableTable,
    doorbell: &Arc<Doorbell>,
    heap: &Arc<Segment>,
    node_specs: &[Vec<u8>],
) -> Result<Launched, InitError> {
    let deadline = Instant::now() + options.startup_timeout;
    let thread_err = |e: std::io::Error| InitError::Thread(e.to_string());
    let control = control_segment(options, uid).map_err(thread_err)?;
    doorbell.attach(SharedDoorbell::new(Arc::clone(&control)));
    let mut monitor =
        Monitor::start(Arc::clone(doorbell), options.liveness_timeout).map_err(thread_err)?;
    let chosen = match &options.child_exe {
        ChildExe::CurrentExe => crate::builder::host_child_exe().unwrap_or(ChildExe::CurrentExe),
        other => other.clone(),
    };
    let (exe, args) = match &chosen {
        ChildExe::CurrentExe => (
            std::env::current_exe().map_err(thread_err)?,
            TEST_ENTRY_ARGS.iter().map(OsString::from).collect(),
        ),
        ChildExe::Path(p) => (p.clone(), Vec::new()),
        ChildExe::Command { program, args } => (program.clone(), args.clone()),
    };
    let factory = Arc::new(ChildFactory {
        options: options.clone(),
        exe,
        args,
        table: boot_table(callables),
        control: Arc::clone(&control),
        heap: Arc::clone(heap),
        node_specs: node_specs.to_vec(),
        spawner: monitor.handle(),
        doorbell: Arc::clone(doorbell),
        uid,
    });
    let roles = (0..options.chips)
        .map(|i| ChildRole::Chip(i as u32))
        .chain((0..node_specs.len()).map(|i| ChildRole::Node(i as u32)))
        .chain((0..options.sub_workers).map(|i| ChildRole::Sub(i as u32)));
    let mut pending: Vec<Pending> = Vec::new();
    for role in roles {
        match factory.start(role, deadline) {
            Ok(p) => pending.push(p),
            Err(message) => {
                rollback(&pending, &mut monitor, options);
                return Err(InitError::ChildFailed {
                    child: ChildFactory::base_name(role),
                    pid: None,
                    message,
                });
            }
        }
    }
    if let Err(e) = handshake(&pending, doorbell, options, deadline) {
        rollback(&pending, &mut monitor, options);
        return Err(e);
    }
    let mut launched = Launched {
        chips: Vec::new(),
        subs: Vec::new(),
        chip_names: Vec::new(),
        sub_names: Vec::new(),
        runtime: ChildRuntime { monitor, control },
    };
    for p in pending {
        let name = p.name();
        let role = p.role;
        let ep: Box<dyn Endpoint> = Box::new(factory.endpoint(p));
        match role {
            ChildRole::Chip(_) | ChildRole::Node(_) => {
                launched.chip_names.push(name);
                launched.chips.push(ep);
            }
            ChildRole::Sub(_) => {
                launched.sub_names.push(name);
                launched.subs.push(ep);
            }
        }
    }
    Ok(launched)
}

/// Waits until every child is ready, one failed or exited, or the deadline passed.
fn handshake(
    pending: &[Pending],
    doorbell: &Arc<Doorbell>,
    options: &WorkerOptions,
    deadline: Instant,
) -> Result<(), InitError> {
    let outcome = wait_on(
        doorbell,
        SpinPolicy::new(options.waiter_spin),
        Some(deadline),
        || {
            let mut all_ready = true;
            for (i, p) in pending.iter().enumerate() {
                match p.progress() {
                    Some(Ok(())) => {}
                    Some(Err(message)) => return Some(Err((i, message))),
                    None => all_ready = false,
                }
            }
            all_ready.then_some(Ok(()))
        },
    );
    match outcome {
        Some(Ok(())) => Ok(()),
        Some(Err((i, message))) => {
            // The child names itself in its INIT_FAILED text; the error names it already.
            let own = format!("{} pid={}: ", pending[i].base_name, pending[i].status.pid());
            let message = message.strip_prefix(&own).unwrap_or(&message).to_string();
            Err(InitError::ChildFailed {
                child: pending[i].base_name.clone(),
                pid: Some(pending[i].status.pid()),
                message,
            })
        }
        None => Err(InitError::Timeout {
            pending: pending
                .iter()
                .filter(|p| p.mailbox.state() != Ok(MailboxState::InitReady))
                .map(|p| format!("{} pid={}", p.base_name, p.status.pid()))
                .collect(),
        }),
    }
}

/// Stops every started child: `SHUTDOWN` where the parent owns the frame, the sticky words
/// for the rest, SIGKILL after `shutdown_grace`, reap (the monitor stops last).
fn rollback(pending: &[Pending], monitor: &mut Monitor, options: &WorkerOptions) {
    let deadline = Instant::now() + options.shutdown_grace;
    // Every child is asked first, so they exit in parallel within one grace period.
    for p in pending {
        p.ask_to_stop();
    }
    for p in pending {
        p.wait_or_kill(deadline);
    }
    monitor.stop();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::TEST_ENTRY_ARGS;
    use pto_types::node_wire::mailbox::OFF_VERSION;
    use std::time::Duration;

    /// Row 23: a frame with protocol version 2 at start-up. The child (this test binary,
    /// re-executed) refuses it with INIT_FAILED and the reason, and exits.
    #[test]
    fn n23_start_up_refuses_protocol_version_2() {
        let uid = 0x7e57_0000_0001;
        let key = |segment| SegmentKey {
            owner: uid,
            segment,
        };
        let control =
            Arc::new(Segment::create(key(u64::MAX), "pto-test-n23-ctl", SEGMENT_BYTES).unwrap());
        let mut header = vec![0u8; control_segment::HEADER_BYTES];
        control_segment::encode(
            &ControlHeader {
                parent_pid: std::process::id(),
                worker_uid: uid,
                heap_ring_size: 64 << 10,
            },
            &mut header,
        );
        control.write(0, &header);
        let heap = Arc::new(Segment::create(key(0), "pto-test-n23-heap", 256 << 10).unwrap());
        let mailbox = Mailbox::new(Arc::new(
            Segment::create(key(u64::MAX - 1), "pto-test-n23-mbox", FRAME_BYTES).unwrap(),
        ));
        let mut fixed = vec![0u8; FIXED_BYTES];
        frame::encode_boot_header(0, &mut fixed);
        fixed[OFF_VERSION] = 2;
        mailbox.write_parent(&fixed, &[]);
        let doorbell = Arc::new(Doorbell::new());
        doorbell.attach(SharedDoorbell::new(Arc::clone(&control)));
        let mut monitor = Monitor::start(Arc::clone(&doorbell), Duration::from_secs(5)).unwrap();
        let (_ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let raw = |s: &Arc<Segment>| s.with_fd(|fd| fd.as_raw_fd()).unwrap();
        let status = monitor
            .spawn(SpawnSpec {
                exe: std::env::current_exe().unwrap(),
                args: TEST_ENTRY_ARGS.iter().map(OsString::from).collect(),
                env: Vec::new(),
                fds: [
                    theirs.as_raw_fd(),
                    raw(&control),
                    raw(mailbox.segment()),
                    raw(&heap),
                ],
            })
            .unwrap();
        drop(theirs);
        let deadline = Instant::now() + Duration::from_secs(20);
        let state = wait_on(
            &doorbell,
            SpinPolicy::new(Duration::ZERO),
            Some(deadline),
            || match mailbox.state() {
                Ok(MailboxState::Booting) => None,
                other => Some(other),
            },
        );
        assert_eq!(state, Some(Ok(MailboxState::InitFailed)));
        let fixed = mailbox.read_fixed();
        let reply = frame::decode_reply(&fixed).unwrap();
        let message = frame::decode_message(&fixed, reply.message_bytes);
        assert!(
            message.contains("protocol version 2 not supported (expected 1)"),
            "{message}"
        );
        assert_eq!(reply.child_pid, status.pid());
        assert!(status.wait_exit(Instant::now() + Duration::from_secs(10)));
        assert_eq!(
            status.exit(),
            Some(crate::monitor::ExitInfo::Exited(2)),
            "INIT_FAILED exits with status 2"
        );
        monitor.stop();
    }
}
