//! The child's side: what a chip or sub worker process runs (NODE_RUNTIME.md §4.2, §4.6, §4.9,
//! §5).
//!
//! [`crate::child_main`] (first in a binary's `main`) or [`crate::test_child_entry!`] (in a
//! test binary) enters [`run`] when the environment has `PTO_CHILD=1`, and the process exits
//! with its result; otherwise it returns at once. Start-up: adopt fds 3–6, map the control
//! segment and the mailbox, check that the parent that started us is still our parent, check
//! the frame's magic and version, decode the boot block, map the heap segment, build the role
//! (a chip snapshots **its own** environment, which the parent gave the `ring_env` pairs, and
//! builds its `ChipWorker`; every callable of the boot table must exist in this image), then
//! `INIT_READY` (with the chip's environment problems, one per line) or `INIT_FAILED` (with the
//! reason), and a bump of the doorbell.
//!
//! Then the loop over the mailbox's ring of frames (rule M8), one frame after the other: wait
//! for the current frame to hold a request (spin, then park with a 250 ms timeout, rule M6),
//! serve `TASK_READY` (drain the descriptor socket, decode, run, reply, `TASK_DONE`, doorbell)
//! or `CONTROL_REQUEST`, move to the next frame — where the parent has usually queued the next
//! task already, so a busy child goes from task to task without waiting; exit on `SHUTDOWN`,
//! on the sticky shutdown words, when the parent is gone (`getppid` changed —
//! `PR_SET_PDEATHSIG` is the first line) or when the socket reports EOF.

mod liveness;
pub(crate) mod serve;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pto_chip::ChipWorker;
use pto_types::node_wire::boot::BootBlock;
use pto_types::node_wire::control_segment::{self, SEGMENT_BYTES};
use pto_types::node_wire::mailbox::{
    self as frame, FIXED_BYTES, FRAME_BYTES, KindCode, MailboxState,
};
use pto_types::ring_config::env::EnvSource;

use crate::shm::{Mailbox, Segment, SegmentKey, SharedDoorbell};

use liveness::{Phase, Progress};

/// Exit statuses of a child.
const EXIT_OK: i32 = 0;
pub(crate) const EXIT_INIT_FAILED: i32 = 2;
pub(crate) const EXIT_PARENT_GONE: i32 = 3;
pub(crate) const EXIT_BROKEN: i32 = 4;

/// Set once this process entered the child runtime: only then may it build child-process
/// Workers while `PTO_CHILD=1` (an L4's node child does), never as an image that skipped
/// `child_main()` and would start itself again without end.
static ENTERED: AtomicBool = AtomicBool::new(false);

/// Whether this process was started as a pto child but did not enter the child runtime
/// (`PTO_CHILD=1` without `child_main()` first in `main`).
pub(crate) fn is_unentered_child() -> bool {
    !ENTERED.load(Ordering::SeqCst)
        && EnvSource::process().get("PTO_CHILD").as_deref() == Some(OsStr::new("1"))
}

/// How long a parked child sleeps before it checks on its parent.
const PARENT_CHECK: Duration = Duration::from_millis(250);

/// Enters the child runtime when this process was started as a child (`PTO_CHILD=1`), and
/// exits the process when it ends; otherwise returns at once. Call it first in `main`.
pub fn child_main() {
    let env = EnvSource::process();
    if env.get("PTO_CHILD").as_deref() != Some(OsStr::new("1")) {
        return;
    }
    ENTERED.store(true, Ordering::SeqCst);
    if env.get("PTO_CHILD_ROLE").as_deref() == Some(OsStr::new("pingpong")) {
        std::process::exit(pingpong(&env));
    }
    let fds = env
        .get("PTO_CHILD_FDS")
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_else(|| "3,4,5,6".to_string());
    let fds = match crate::spawn::adopt_child_fds(&fds) {
        Ok(fds) => fds,
        Err(e) => {
            // Not started by a Worker: PTO_CHILD=1 came from the user's environment.
            eprintln!(
                "error: PTO_CHILD=1 is set, but this process was not started by a pto Worker ({e}); PTO_CHILD is reserved for pto's child processes: unset it and run again"
            );
            std::process::exit(EXIT_INIT_FAILED);
        }
    };
    let code = run(fds);
    std::process::exit(code);
}

/// `pto bench`'s shared-memory floor (`crate::floor`): the segment is fd 5.
fn pingpong(env: &EnvSource) -> i32 {
    let rounds = env
        .get("PTO_PINGPONG_ROUNDS")
        .and_then(|v| v.to_str().and_then(|s| s.parse::<u32>().ok()))
        .unwrap_or(0);
    match crate::spawn::adopt_child_fds("3,4,5,6") {
        Ok([_, _, seg, _]) => crate::floor::serve(seg, rounds),
        Err(_) => EXIT_BROKEN,
    }
}

/// What the role needs.
pub(crate) enum Role {
    Chip {
        index: u32,
        chip: Box<ChipWorker>,
    },
    Sub {
        index: u32,
    },
    /// An L3 Worker child of an L4: the inner Worker with its own children.
    Node {
        index: u32,
        worker: Box<crate::Worker>,
    },
}

/// Everything a running child holds.
pub(crate) struct Child {
    pub(crate) name: String,
    pub(crate) role: Role,
    /// Frame 0: start-up, liveness.
    pub(crate) mailbox: Mailbox,
    /// Every frame (M8) and the one the next request will be in.
    pub(crate) ring: Vec<Mailbox>,
    pub(crate) cursor: usize,
    pub(crate) doorbell: SharedDoorbell,
    pub(crate) sock: OwnedFd,
    pub(crate) segments: HashMap<SegmentKey, Arc<Segment>>,
    pub(crate) parent_pid: u32,
    /// This process's id (in every reply).
    pub(crate) pid: u32,
    pub(crate) spin: Duration,
    /// What the serving thread is doing, for the liveness thread.
    pub(crate) health: Arc<Progress>,
    /// Segments whose descriptor could not be received, with why.
    pub(crate) lost_segments: HashMap<SegmentKey, String>,
    /// A node child passes segments on to its own children, so it keeps their descriptors;
    /// chip and sub children close each one as soon as it is mapped.
    pub(crate) keeps_fds: bool,
}

fn run([sock, ctl_fd, mailbox_fd, heap_fd]: [OwnedFd; 4]) -> i32 {
    let Some((mailbox, ctl_bytes, doorbell)) = map_frames(ctl_fd, mailbox_fd) else {
        return EXIT_BROKEN;
    };
    let (mut child, message) = match start(sock, heap_fd, mailbox, doorbell, &ctl_bytes) {
        Ok(started) => started,
        Err(code) => return code,
    };
    // INIT_READY with the environment problems in the message area.
    write_init_reply(&child.mailbox, &message);
    if child.mailbox.transition_to_init_ready().is_err() {
        return EXIT_BROKEN;
    }
    child.doorbell.ring();
    let code = child.serve_loop();
    // A node child closes its inner Worker (and so its own children) before it exits; the
    // liveness thread keeps answering meanwhile.
    child.health.enter(Phase::Working);
    let health = Arc::clone(&child.health);
    drop(child);
    health.stop();
    code
}

/// Maps the mailbox and the control segment; returns the mailbox, the control segment's
/// header bytes and the doorbell, or `None` (nothing to report an error through).
fn map_frames(ctl_fd: OwnedFd, mailbox_fd: OwnedFd) -> Option<(Mailbox, Vec<u8>, SharedDoorbell)> {
    // One frame per task the lane holds (M8): the segment's size says how many.
    let len = rustix::fs::fstat(&mailbox_fd).ok()?.st_size;
    let frames = (usize::try_from(len).ok()? / FRAME_BYTES).max(1);
    let mailbox_seg = Segment::from_fd(
        SegmentKey {
            owner: 0,
            segment: u64::MAX,
        },
        mailbox_fd,
        frames * FRAME_BYTES,
    )
    .ok()?;
    let mailbox = Mailbox::new(Arc::new(mailbox_seg));
    let ctl = Segment::from_fd(
        SegmentKey {
            owner: 0,
            segment: u64::MAX - 1,
        },
        ctl_fd,
        SEGMENT_BYTES,
    )
    .ok()?;
    let mut ctl_bytes = vec![0u8; control_segment::HEADER_BYTES];
    ctl.read(0, &mut ctl_bytes);
    let doorbell = SharedDoorbell::new(Arc::new(ctl));
    Some((mailbox, ctl_bytes, doorbell))
}

/// Start-up after the mapping: checks the parent, decodes the boot block, maps the heap,
/// builds the role and starts the liveness thread; returns the child and its INIT_READY
/// message, or the exit status (after INIT_FAILED when the parent can be told).
fn start(
    sock: OwnedFd,
    heap_fd: OwnedFd,
    mailbox: Mailbox,
    doorbell: SharedDoorbell,
    ctl_bytes: &[u8],
) -> Result<(Child, String), i32> {
    let fail = |message: String| -> i32 {
        write_init_reply(&mailbox, &message);
        let _ = mailbox.transition_to_init_failed();
        doorbell.ring();
        EXIT_INIT_FAILED
    };
    let header = control_segment::decode(ctl_bytes).map_err(|e| fail(e.to_string()))?;
    // The parent may have died before PR_SET_PDEATHSIG took effect.
    if parent_pid() != header.parent_pid {
        return Err(EXIT_PARENT_GONE);
    }
    let boot_len =
        frame::decode_boot_header(&mailbox.read_fixed()).map_err(|e| fail(e.to_string()))?;
    let boot =
        BootBlock::decode(&mailbox.read_payload(boot_len)).map_err(|e| fail(e.to_string()))?;
    let heap_key = SegmentKey {
        owner: header.worker_uid,
        segment: 0,
    };
    let heap_len = header.heap_ring_size.saturating_mul(4) as usize;
    let heap = match Segment::from_fd(heap_key, heap_fd, heap_len) {
        Ok(s) => Arc::new(s),
        Err(e) => return Err(fail(format!("cannot map the heap-ring segment: {e}"))),
    };
    let (name, role, message) = serve::build_role(&boot).map_err(fail)?;
    let health = Arc::new(Progress::default());
    if liveness::start(mailbox.clone(), Arc::clone(&health)).is_err() {
        return Err(fail("cannot start the liveness thread".to_string()));
    }
    let keeps_fds = matches!(role, Role::Node { .. });
    if !keeps_fds {
        heap.close_fd();
    }
    let mut segments = HashMap::new();
    segments.insert(heap_key, heap);
    crate::spawn::raise_fd_limit();
    let child = Child {
        name,
        role,
        ring: Mailbox::ring(mailbox.segment()),
        cursor: 0,
        mailbox,
        doorbell,
        sock,
        segments,
        parent_pid: header.parent_pid,
        pid: std::process::id(),
        spin: Duration::from_micros(u64::from(boot.spin_us[1])),
        health,
        lost_segments: HashMap::new(),
        keeps_fds,
    };
    Ok((child, message))
}

/// Writes the INIT_READY / INIT_FAILED reply: `message` in the message area.
fn write_init_reply(mailbox: &Mailbox, message: &str) {
    let mut fixed = vec![0u8; FIXED_BYTES];
    let n = frame::encode_message(message, &mut fixed);
    frame::encode_reply(
        &frame::ReplyHeader {
            message_bytes: n,
            child_pid: std::process::id(),
            ..frame::ReplyHeader::default()
        },
        &mut fixed,
    );
    mailbox.write_child(&fixed, &[]);
}

fn parent_pid() -> u32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_pid() as u32)
}

impl Child {
    /// The frame of the next request (M8).
    pub(crate) fn frame(&self) -> &Mailbox {
        &self.ring[self.cursor]
    }

    fn serve_loop(&mut self) -> i32 {
        loop {
            if self.frame().shutdown_requested() || self.doorbell.shutdown_all() {
                return EXIT_OK;
            }
            let seen = self.frame().raw_state();
            let now = if is_request(seen) {
                seen
            } else {
                self.health.enter(Phase::Waiting);
                let now = self.frame().child_wait(seen, self.spin, PARENT_CHECK);
                self.health.enter(Phase::Serving);
                now
            };
            match MailboxState::from_code(now) {
                Some(MailboxState::TaskReady) => {
                    self.serve_task();
                    self.cursor = (self.cursor + 1) % self.ring.len();
                }
                Some(MailboxState::ControlRequest) => {
                    self.serve_control();
                    self.cursor = (self.cursor + 1) % self.ring.len();
                }
                Some(MailboxState::Shutdown) => return EXIT_OK,
                // The parent took the reply of this frame's last lap: wait again.
                Some(_) if now != seen => {}
                Some(_) => {
                    // Parked until the timeout: is anyone still there?
                    if parent_pid() != self.parent_pid {
                        return EXIT_PARENT_GONE;
                    }
                    if !self.drain_socket() {
                        return EXIT_PARENT_GONE;
                    }
                }
                None => return EXIT_BROKEN,
            }
        }
    }
}

/// A state that hands the frame to the child with work in it.
fn is_request(state: u32) -> bool {
    [
        MailboxState::TaskReady,
        MailboxState::ControlRequest,
        MailboxState::Shutdown,
    ]
    .iter()
    .any(|s| s.code() == state)
}

/// The role's kind, for messages.
pub(crate) fn role_name(kind: KindCode, index: u32) -> String {
    match kind {
        KindCode::Chip => format!("chip_child[{index}]"),
        KindCode::Sub => format!("sub_child[{index}]"),
        KindCode::Node => format!("node_child[{index}]"),
    }
}
