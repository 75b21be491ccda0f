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
use std::sync::Arc;
use std::time::Instant;

use pto_types::node_wire::boot::{BootBlock, BootCallable};
use pto_types::node_wire::control_segment::{self, ControlHeader, SEGMENT_BYTES};
use pto_types::node_wire::mailbox::{
    self as frame, FIXED_BYTES, FRAME_BYTES, KindCode, MailboxState,
};
use pto_types::wait::SpinPolicy;
use rustix::net::{AddressFamily, SocketFlags, SocketType};

use crate::builder::{ChildExe, WorkerOptions};
use crate::callable::{CallableKind, CallableTable};
use crate::child::serve::chip_spec_to_boot;
use crate::endpoint::Endpoint;
use crate::endpoint::child_process::{ChildProcessEndpoint, ChildRole};
use crate::error::InitError;
use crate::monitor::{ChildStatus, Monitor};
use crate::shm::doorbell::{Doorbell, wait_on};
use crate::shm::{Mailbox, Segment, SegmentKey, SharedDoorbell};
use crate::spawn::{SpawnSpec, TEST_ENTRY_ARGS};

/// What stays alive with the Worker in child-process mode.
pub(crate) struct ChildRuntime {
    pub(crate) monitor: Monitor,
    pub(crate) control: Arc<Segment>,
    /// Each chip's and sub worker's process, by index.
    pub(crate) chip_status: Vec<Arc<ChildStatus>>,
    pub(crate) sub_status: Vec<Arc<ChildStatus>>,
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

struct Pending {
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
    let started = Instant::now();
    let deadline = started + options.startup_timeout;
    let thread_err = |e: std::io::Error| InitError::Thread(e.to_string());
    let control = Arc::new(
        Segment::create(
            SegmentKey {
                owner: uid,
                segment: u64::MAX,
            },
            &format!("pto-{uid:x}-ctl"),
            SEGMENT_BYTES,
        )
        .map_err(thread_err)?,
    );
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
    let shared = SharedDoorbell::new(Arc::clone(&control));
    doorbell.attach(shared.clone());
    let mut monitor = Monitor::start(Arc::clone(doorbell)).map_err(thread_err)?;
    let (exe, args) = match &options.child_exe {
        ChildExe::CurrentExe => (
            std::env::current_exe().map_err(thread_err)?,
            TEST_ENTRY_ARGS
                .iter()
                .map(OsString::from)
                .collect::<Vec<_>>(),
        ),
        ChildExe::Path(p) => (p.clone(), Vec::new()),
    };
    let table: Vec<BootCallable> = callables
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
        .collect();
    let spin_us = |d: std::time::Duration| d.as_micros().min(u128::from(u32::MAX)) as u32;
    let mut pending: Vec<Pending> = Vec::new();
    let roles = (0..options.chips)
        .map(|i| ChildRole::Chip(i as u32))
        .chain((0..node_specs.len()).map(|i| ChildRole::Node(i as u32)))
        .chain((0..options.sub_workers).map(|i| ChildRole::Sub(i as u32)));
    for role in roles {
        let (kind, index, base_name) = match role {
            ChildRole::Chip(i) => (KindCode::Chip, i, format!("chip_child[{i}]")),
            ChildRole::Sub(i) => (KindCode::Sub, i, format!("sub_child[{i}]")),
            ChildRole::Node(i) => (KindCode::Node, i, format!("node_child[{i}]")),
        };
        let spawned = (|| -> Result<Pending, String> {
            let seg = Segment::create(
                SegmentKey {
                    owner: uid,
                    segment: u64::MAX - 1,
                },
                &format!("pto-{uid:x}-mbox-{base_name}"),
                FRAME_BYTES,
            )
            .map_err(|e| e.to_string())?;
            let mailbox = Mailbox::new(Arc::new(seg));
            let boot = BootBlock {
                role: kind,
                index,
                startup_budget_ms: deadline
                    .saturating_duration_since(Instant::now())
                    .as_millis() as u64,
                spin_us: [
                    spin_us(options.scheduler_spin),
                    spin_us(options.lane_spin),
                    spin_us(options.waiter_spin),
                ],
                strict_env: options.strict_env,
                chip: match role {
                    ChildRole::Chip(i) => Some(chip_spec_to_boot(&options.chip_specs[i as usize])),
                    ChildRole::Sub(_) | ChildRole::Node(_) => None,
                },
                callables: table.clone(),
                node: match role {
                    ChildRole::Node(i) => Some(node_specs[i as usize].clone()),
                    _ => None,
                },
            };
            let boot = boot.encode().map_err(|e| e.to_string())?;
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
                    .ok_or_else(|| "a segment descriptor is closed".to_string())
            };
            let env = match role {
                ChildRole::Chip(_) => options.ring_env.clone(),
                // A node child applies its own Worker's ring_env to its chips.
                ChildRole::Sub(_) | ChildRole::Node(_) => Vec::new(),
            };
            let spec = SpawnSpec {
                exe: exe.clone(),
                args: args.clone(),
                env,
                fds: [
                    theirs.as_raw_fd(),
                    raw(&control)?,
                    raw(mailbox.segment())?,
                    raw(heap)?,
                ],
            };
            let status = monitor
                .spawn(spec)
                .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
            drop(theirs);
            Ok(Pending {
                base_name: base_name.clone(),
                role,
                mailbox,
                sock: ours,
                status,
            })
        })();
        match spawned {
            Ok(p) => pending.push(p),
            Err(message) => {
                rollback(&pending, &mut monitor, options);
                return Err(InitError::ChildFailed {
                    child: base_name,
                    pid: None,
                    message,
                });
            }
        }
    }
    // The handshake: every child ready, or the first failure, or the deadline.
    enum Outcome {
        Ready,
        Failed(usize, String),
    }
    let outcome = wait_on(
        doorbell,
        SpinPolicy::new(options.waiter_spin),
        Some(deadline),
        || {
            let mut all_ready = true;
            for (i, p) in pending.iter().enumerate() {
                match p.mailbox.state() {
                    Ok(MailboxState::InitReady) => {}
                    Ok(MailboxState::InitFailed) => {
                        let fixed = p.mailbox.read_fixed();
                        let message = frame::decode_reply(&fixed)
                            .map(|r| frame::decode_message(&fixed, r.message_bytes))
                            .unwrap_or_else(|e| format!("undecodable INIT_FAILED reply: {e}"));
                        return Some(Outcome::Failed(i, message));
                    }
                    Ok(MailboxState::Booting) => {
                        if let Some(exit) = p.status.exit() {
                            return Some(Outcome::Failed(
                                i,
                                format!(
                                    "{} before start-up completed (does the image call pto_node::child_main() first in main, or declare pto_node::test_child_entry!()?)",
                                    exit.describe()
                                ),
                            ));
                        }
                        all_ready = false;
                    }
                    other => {
                        return Some(Outcome::Failed(
                            i,
                            format!("mailbox protocol violation at start-up: state {other:?}"),
                        ));
                    }
                }
            }
            all_ready.then_some(Outcome::Ready)
        },
    );
    match outcome {
        Some(Outcome::Ready) => {}
        Some(Outcome::Failed(i, message)) => {
            let child = pending[i].base_name.clone();
            let pid = Some(pending[i].status.pid());
            rollback(&pending, &mut monitor, options);
            return Err(InitError::ChildFailed {
                child,
                pid,
                message,
            });
        }
        None => {
            let names = pending
                .iter()
                .filter(|p| p.mailbox.state() != Ok(MailboxState::InitReady))
                .map(|p| p.base_name.clone())
                .collect();
            rollback(&pending, &mut monitor, options);
            return Err(InitError::Timeout { pending: names });
        }
    }
    let mut launched = Launched {
        chips: Vec::new(),
        subs: Vec::new(),
        chip_names: Vec::new(),
        sub_names: Vec::new(),
        runtime: ChildRuntime {
            monitor,
            control,
            chip_status: Vec::new(),
            sub_status: Vec::new(),
        },
    };
    for p in pending {
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
        let name = p.name();
        match p.role {
            ChildRole::Chip(_) | ChildRole::Node(_) => {
                launched.runtime.chip_status.push(Arc::clone(&p.status))
            }
            ChildRole::Sub(_) => launched.runtime.sub_status.push(Arc::clone(&p.status)),
        }
        let ep = ChildProcessEndpoint::new(
            name.clone(),
            p.role,
            p.mailbox,
            p.sock,
            p.status,
            heap,
            env_problems,
        );
        match p.role {
            ChildRole::Chip(_) | ChildRole::Node(_) => {
                launched.chip_names.push(name);
                launched.chips.push(Box::new(ep));
            }
            ChildRole::Sub(_) => {
                launched.sub_names.push(name);
                launched.subs.push(Box::new(ep));
            }
        }
    }
    Ok(launched)
}

/// Stops every started child: `SHUTDOWN` where the parent owns the frame, the sticky words
/// for the rest, SIGKILL after `shutdown_grace`, reap (the monitor stops last).
fn rollback(pending: &[Pending], monitor: &mut Monitor, options: &WorkerOptions) {
    for p in pending {
        p.mailbox.request_shutdown();
        let _ = p.mailbox.transition_to_shutdown(MailboxState::InitReady);
    }
    let deadline = Instant::now() + options.shutdown_grace;
    for p in pending {
        if !p.status.wait_exit(deadline) {
            p.status.kill();
        }
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
        let mut monitor = Monitor::start(Arc::clone(&doorbell)).unwrap();
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
