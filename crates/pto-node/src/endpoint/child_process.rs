//! Child-process endpoints: each chip or sub worker is a process of its own, driven through a
//! mailbox frame in a shared `memfd` segment (NODE_RUNTIME.md §4.1, §4.3, §4.5–§4.9).
//!
//! `dispatch` sends the descriptors of segments the child lacks (`SEGMENT_ADD` on its socket,
//! `SEGMENT_DROP` for segments whose last buffer is gone), encodes the request into a private
//! copy of the frame — header, the task's `CallConfig` record at offset 256, the callable
//! section, the args blob — copies the parent's regions into the mapping and swaps the state
//! to `TASK_READY` (rules M1–M8 of `shm::mailbox`). `poll` is one atomic load while the child
//! works; on `TASK_DONE` it checks the echoed sequence number, decodes the reply (for chips the
//! resolved sizing with provenance from the report area, rebuilt into a `ChipRunReport`) and
//! stores `IDLE`. `health` reads the fate the monitor thread recorded; the cause names the
//! child, its pid, the signal or exit status and the task it was running. A protocol violation
//! (wrong sequence number, unexpected state, undecodable reply) kills the child and takes the
//! same path. Shutdown sets the sticky word, stores `SHUTDOWN` when the parent owns the frame,
//! waits for the exit and kills the child after the grace period.

use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use pto_chip::ChipRunReport;
use pto_types::ErrorCode;
use pto_types::node_wire::args_blob::{
    TensorLocation, TensorSpace, WIRE_TENSOR_BYTES, encode_args, encode_tensor,
};
use pto_types::node_wire::mailbox::{
    self as frame, CallableSection, ChipReplyExtra, ControlRequest, FIXED_BYTES, FLAG_GROUP_MEMBER,
    FLAG_SEGMENTS_SENT, KindCode, MailboxState, Op, RESULT_BIND_FAILURE, RequestHeader,
};
use pto_types::node_wire::run_report::WireRunReport;
use pto_types::node_wire::segment_msg::SegmentMsg;
use pto_types::{DType, Tensor, TensorTag};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use super::{
    Completion, ControlCmd, ControlReply, Death, Endpoint, EndpointError, Failure, Health,
    ShutdownOutcome, TaskRequest, lane_capacity,
};
use crate::buffer::BufferInner;
use crate::callable::CallableKind;
use crate::engine::SlotId;
use crate::error::FailureKind;
use crate::launch::ChildFactory;
use crate::monitor::ChildStatus;
use crate::report::NodeTaskId;
use crate::shm::{Mailbox, Segment, SegmentKey};

/// Which kind of lane a child serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChildRole {
    Chip(u32),
    Sub(u32),
    /// An L3 Worker child of an L4 (its next-level lane `i`).
    Node(u32),
}

struct InFlight {
    /// The request's sequence number: its frame is `(seq − 1) mod depth` (mailbox rule M8).
    seq: u64,
    slot: SlotId,
    member: u32,
    task: NodeTaskId,
    label: Option<String>,
    kind: CallableKind,
    callable: Arc<str>,
}

/// Consecutive failed starts of a replacement after which a lane stays dead.
const MAX_FAILED_RESTARTS: u32 = 3;
/// A child that dies sooner than this after it became ready delays its next restart
/// (100 ms, doubling, at most 5 s), so a crash loop cannot become a spawn storm.
const QUICK_DEATH: Duration = Duration::from_secs(1);

/// A replacement child being started on a thread of its own.
struct Restart {
    result: Arc<Mutex<Option<Result<ChildProcessEndpoint, String>>>>,
    cancel: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Restart bookkeeping carried from one child of a lane to the next.
#[derive(Clone, Copy, Debug, Default)]
struct RestartHistory {
    quick_deaths: u32,
    failed: u32,
}

/// A child that reported INIT_READY, with what it said.
pub(crate) struct ReadyChild {
    pub(crate) name: String,
    pub(crate) role: ChildRole,
    pub(crate) mailbox: Mailbox,
    pub(crate) sock: OwnedFd,
    pub(crate) status: Arc<ChildStatus>,
    /// The chip's environment problems, from its INIT_READY message.
    pub(crate) env_problems: Vec<String>,
}

/// The scheduler's side of one child process.
pub(crate) struct ChildProcessEndpoint {
    name: String,
    role: ChildRole,
    /// The mailbox's frames (rule M8); frame 0 also carries the liveness words.
    ring: Vec<Mailbox>,
    sock: Option<OwnedFd>,
    status: Arc<ChildStatus>,
    /// The sequence number of the latest request written.
    seq: u64,
    /// Tasks in flight, oldest first (only the oldest can have started).
    tasks: VecDeque<InFlight>,
    /// The control command in flight and its sequence number.
    control: Option<(Op, u64)>,
    /// Segments whose descriptor the child holds (the heap ring is sent at spawn).
    sent: HashMap<SegmentKey, Weak<Segment>>,
    /// Segment messages went out since the last request (its FLAG_SEGMENTS_SENT).
    segments_sent: bool,
    /// How long the latest task it finished ran (`lane_capacity`).
    last_exec: Duration,
    /// The chip's environment problems, from its INIT_READY message.
    env_problems: Vec<String>,
    /// A protocol violation or a control timeout: the child was killed for it.
    violation: Option<String>,
    /// The task in flight ran past `task_timeout`: the child was killed for it.
    timed_out: Option<String>,
    shutting_down: bool,
    /// Starts replacements (`None` in unit tests of the protocol).
    factory: Option<Arc<ChildFactory>>,
    restart: Option<Restart>,
    history: RestartHistory,
    ready_at: Instant,
    /// The fixed part of the next task request, encoded here and then copied into its
    /// frame: kept between requests, so a dispatch allocates no 1.8 KiB of zeroes.
    scratch: Vec<u8>,
}

impl ChildProcessEndpoint {
    /// An endpoint for a child that reported INIT_READY (the frame is IDLE now).
    pub(crate) fn new(
        child: ReadyChild,
        heap: &Arc<Segment>,
        factory: Option<Arc<ChildFactory>>,
    ) -> ChildProcessEndpoint {
        let ReadyChild {
            name,
            role,
            mailbox,
            sock,
            status,
            env_problems,
        } = child;
        let mut sent = HashMap::new();
        sent.insert(heap.key(), Arc::downgrade(heap));
        ChildProcessEndpoint {
            name,
            role,
            ring: Mailbox::ring(mailbox.segment()),
            sock: Some(sock),
            status,
            seq: 0,
            tasks: VecDeque::new(),
            control: None,
            sent,
            segments_sent: false,
            last_exec: Duration::ZERO,
            env_problems,
            violation: None,
            timed_out: None,
            shutting_down: false,
            factory,
            restart: None,
            history: RestartHistory::default(),
            ready_at: Instant::now(),
            scratch: Vec::new(),
        }
    }

    /// The frame of request `seq` (M8).
    fn frame(&self, seq: u64) -> &Mailbox {
        &self.ring[((seq.max(1) - 1) % self.ring.len() as u64) as usize]
    }

    /// What the child was doing when it died.
    fn during(&self) -> String {
        match self.tasks.front() {
            Some(t) => match &t.label {
                Some(l) => format!(" while running {} ('{l}') of run {}", t.task, t.task.run_id),
                None => format!(" while running {} of run {}", t.task, t.task.run_id),
            },
            None => String::new(),
        }
    }

    /// How long to wait before starting a replacement, and the history to carry.
    fn restart_delay(&self) -> (Duration, RestartHistory) {
        let mut h = self.history;
        if self.ready_at.elapsed() < QUICK_DEATH {
            h.quick_deaths += 1;
            let ms = 100u64 << (h.quick_deaths - 1).min(6);
            (Duration::from_millis(ms).min(Duration::from_secs(5)), h)
        } else {
            h.quick_deaths = 0;
            (Duration::ZERO, h)
        }
    }

    fn fail_protocol(&mut self, what: String) {
        if self.violation.is_none() {
            tracing::error!(target: "pto::node", "{}: {what}; killing the child", self.name);
            self.violation = Some(what);
            self.status.kill();
        }
    }

    /// Sends SEGMENT_DROP for segments no buffer uses any more, then SEGMENT_ADD for the ones
    /// of this request the child lacks.
    fn sync_segments(&mut self, segments: &[Arc<Segment>]) -> Result<(), EndpointError> {
        let sock = self
            .sock
            .as_ref()
            .ok_or_else(|| EndpointError::Dead("the socket is closed".to_string()))?;
        let mut dropped = Vec::new();
        self.sent.retain(|key, weak| {
            let alive = weak.strong_count() > 0;
            if !alive {
                dropped.push(*key);
            }
            alive
        });
        for key in dropped {
            let msg = SegmentMsg {
                add: false,
                owner: key.owner,
                segment: key.segment,
                generation: 0,
                nbytes: 0,
            };
            send_msg(sock, &msg.encode(), None)
                .map_err(|e| EndpointError::Dead(format!("SEGMENT_DROP failed: {e}")))?;
            self.segments_sent = true;
        }
        for seg in segments {
            if self.sent.contains_key(&seg.key()) {
                continue;
            }
            let msg = SegmentMsg {
                add: true,
                owner: seg.key().owner,
                segment: seg.key().segment,
                generation: 0,
                nbytes: seg.len() as u64,
            };
            let sent = seg.with_fd(|fd| send_msg(sock, &msg.encode(), Some(fd)));
            match sent {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    return Err(EndpointError::Dead(format!("SEGMENT_ADD failed: {e}")));
                }
                None => {
                    return Err(EndpointError::Failed(
                        "a buffer's segment was closed (the Worker is closing)".to_string(),
                    ));
                }
            }
            self.sent.insert(seg.key(), Arc::downgrade(seg));
            self.segments_sent = true;
        }
        Ok(())
    }

    fn header(
        &mut self,
        op: Op,
        req: Option<&TaskRequest>,
        args: u32,
        control: u32,
    ) -> RequestHeader {
        self.seq += 1;
        let (run_id, task_id, index, size) = match req {
            Some(r) => (
                r.task.run_id,
                (u64::from(r.task.index) << 32) | u64::from(r.slot.generation()),
                r.member,
                r.group_size,
            ),
            None => (0, 0, 0, 1),
        };
        RequestHeader {
            seq: self.seq,
            op,
            flags: if size > 1 { FLAG_GROUP_MEMBER } else { 0 }
                | if std::mem::take(&mut self.segments_sent) {
                    FLAG_SEGMENTS_SENT
                } else {
                    0
                },
            run_id,
            task_id,
            group_index: index,
            group_size: size,
            args_bytes: args,
            control_bytes: control,
        }
    }

    /// Reads and checks the reply of request `seq`; its frame must be in `done`.
    fn take_reply(
        &self,
        seq: u64,
        done: MailboxState,
    ) -> Result<(frame::ReplyHeader, Vec<u8>, Vec<u8>), String> {
        let mailbox = self.frame(seq);
        // Only what the reply uses: its header, its message, a chip's report area.
        let mut fixed = vec![0u8; frame::OFF_CALL_CONFIG];
        mailbox.read_range(&mut fixed, frame::OFF_REPLY_SEQ, frame::OFF_PROBE);
        let reply = frame::decode_reply(&fixed).map_err(|e| format!("bad reply: {e}"))?;
        if reply.reply_seq != seq {
            return Err(format!(
                "reply seq {} does not echo request seq {seq}",
                reply.reply_seq
            ));
        }
        if reply.message_bytes > 0 {
            let end = frame::OFF_MESSAGE + reply.message_bytes as usize;
            fixed.resize(end, 0);
            mailbox.read_range(&mut fixed, frame::OFF_MESSAGE, end);
        }
        if matches!(self.role, ChildRole::Chip(_)) {
            mailbox.read_range(&mut fixed, frame::OFF_REPORT, frame::OFF_CALL_CONFIG);
        }
        let payload = mailbox.read_payload(reply.payload_bytes as usize);
        mailbox
            .transition_to_idle(done)
            .map_err(|v| v.to_string())?;
        Ok((reply, fixed, payload))
    }

    /// A node child's inner run report (payload of successful and failed replies).
    fn inner_report(&self, payload: &[u8]) -> Option<Box<crate::report::RunReport>> {
        if !matches!(self.role, ChildRole::Node(_)) || payload.is_empty() {
            return None;
        }
        let wire = WireRunReport::decode(payload).ok()?;
        crate::report::wire::run_from_wire(&wire).ok().map(Box::new)
    }

    fn completion(
        &self,
        t: &InFlight,
        reply: &frame::ReplyHeader,
        fixed: &[u8],
        payload: &[u8],
    ) -> Result<Option<Box<ChipRunReport>>, Failure> {
        if reply.error_code != 0 {
            let code = u32::try_from(reply.error_code)
                .ok()
                .and_then(ErrorCode::from_code);
            let kind = if reply.result == RESULT_BIND_FAILURE {
                FailureKind::Bind
            } else {
                FailureKind::Task
            };
            return Err(Failure {
                kind,
                code,
                message: frame::decode_message(fixed, reply.message_bytes),
            });
        }
        match (self.role, t.kind) {
            (ChildRole::Chip(index), CallableKind::Chip) => self
                .chip_report(index, t.label.clone(), fixed, payload)
                .map(|r| Some(Box::new(r)))
                .map_err(|e| Failure {
                    kind: FailureKind::Endpoint,
                    code: Some(ErrorCode::BadFrame),
                    message: format!(
                        "EndpointFailure: {}: undecodable chip report: {e}",
                        self.name
                    ),
                }),
            _ => Ok(None),
        }
    }

    /// The 112-byte wire tensor naming a whole host buffer (bytes as `U8`) for COPY_TO /
    /// COPY_FROM; sends its segment first if the child lacks it.
    fn host_wire_tensor(&mut self, host: &Arc<BufferInner>) -> Result<Vec<u8>, EndpointError> {
        let (Some(seg), Some((_, loc))) = (host.segment(), host.location()) else {
            return Err(EndpointError::Failed(format!(
                "buffer {:?} is not in shared memory",
                host.id()
            )));
        };
        let seg = Arc::clone(seg);
        self.sync_segments(&[seg])?;
        let len = u32::try_from(host.bytes()).map_err(|_| {
            EndpointError::Failed(format!(
                "a copy of {} bytes exceeds one 4 GiB wire tensor",
                host.bytes()
            ))
        })?;
        let t = Tensor::contiguous(host.buffer_ref(), &[len], DType::U8)
            .map_err(|e| EndpointError::Failed(e.to_string()))?;
        let mut out = vec![0u8; WIRE_TENSOR_BYTES];
        encode_tensor(TensorTag::Input, &t, &loc, &mut out);
        Ok(out)
    }

    /// Rebuilds the chip's run report from the report area and the reply payload.
    fn chip_report(
        &self,
        index: u32,
        label: Option<String>,
        fixed: &[u8],
        payload: &[u8],
    ) -> Result<ChipRunReport, String> {
        let area = frame::decode_report(fixed).map_err(|e| e.to_string())?;
        let extra = ChipReplyExtra::decode(payload).map_err(|e| e.to_string())?;
        crate::report::wire::chip_from_wire(index, label, &area, extra, self.env_problems.clone())
    }
}

/// One message on the descriptor socket, with an optional descriptor (`SCM_RIGHTS`).
fn send_msg(
    sock: &OwnedFd,
    bytes: &[u8],
    fd: Option<std::os::fd::BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); 64];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(fd) = fd {
        fds = [fd];
        control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    let iov = [IoSlice::new(bytes)];
    rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL)?;
    Ok(())
}

impl Endpoint for ChildProcessEndpoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_idle(&self) -> bool {
        self.tasks.is_empty() && self.control.is_none()
    }

    fn room(&self) -> usize {
        if self.control.is_some() || self.violation.is_some() || self.timed_out.is_some() {
            0
        } else {
            let sub = matches!(self.role, ChildRole::Sub(_));
            lane_capacity(self.ring.len(), sub, self.last_exec).saturating_sub(self.tasks.len())
        }
    }

    fn dispatch(&mut self, req: TaskRequest) -> Result<(), EndpointError> {
        if let Health::Dead(d) = self.health() {
            return Err(EndpointError::Dead(d.describe(&self.name)));
        }
        if self.room() == 0 {
            return Err(EndpointError::Busy);
        }
        let mut segments: Vec<Arc<Segment>> = Vec::new();
        let mut locations: Vec<TensorLocation> = Vec::with_capacity(req.buffers.len());
        for b in &req.buffers {
            if let Some((chip, alloc)) = b.device() {
                locations.push(TensorLocation {
                    space: TensorSpace::Device,
                    device_worker: Some(chip),
                    segment: alloc,
                    segment_offset: 0,
                });
                continue;
            }
            let Some((_, loc)) = b.location() else {
                return Err(EndpointError::Failed(format!(
                    "buffer {:?} is not in shared memory",
                    b.id()
                )));
            };
            if let Some(seg) = b.segment()
                && !segments.iter().any(|s| s.key() == seg.key())
            {
                segments.push(Arc::clone(seg));
            }
            locations.push(loc);
        }
        self.sync_segments(&segments)?;
        let blob = encode_args(&req.args, |i, _| {
            locations.get(i).copied().unwrap_or(TensorLocation {
                space: TensorSpace::Host,
                device_worker: None,
                segment: 0,
                segment_offset: 0,
            })
        });
        // Up to the control payload, which a task request leaves alone.
        let mut fixed = std::mem::take(&mut self.scratch);
        fixed.clear();
        fixed.resize(frame::OFF_CONTROL_PAYLOAD, 0);
        // The config first: a config that cannot be encoded fails this dispatch before the
        // header takes a sequence number and the segments flag, which the next request needs.
        frame::encode_config(req.config.as_ref(), &mut fixed)
            .map_err(|e| EndpointError::Failed(format!("cannot encode the CallConfig: {e}")))?;
        let h = self.header(Op::Task, Some(&req), blob.len() as u32, 0);
        frame::encode_header(&h, &mut fixed);
        frame::encode_callable(
            &CallableSection {
                id: req.callable_id,
                kind: match req.kind {
                    CallableKind::Chip => KindCode::Chip,
                    CallableKind::Sub => KindCode::Sub,
                    CallableKind::Node => KindCode::Node,
                },
                name: String::from(&*req.callable),
                label: req.label.clone(),
            },
            &mut fixed,
        );
        let mailbox = self.frame(h.seq);
        mailbox.write_task_request(&fixed, &blob);
        let ready = mailbox.transition_to_task_ready();
        self.scratch = fixed;
        if let Err(v) = ready {
            self.fail_protocol(v.to_string());
            return Err(EndpointError::Dead(v.to_string()));
        }
        self.tasks.push_back(InFlight {
            seq: h.seq,
            slot: req.slot,
            member: req.member,
            task: req.task,
            label: req.label,
            kind: req.kind,
            callable: req.callable,
        });
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>) {
        while let Some(t) = self.tasks.front() {
            if self.violation.is_some() {
                return;
            }
            let seq = t.seq;
            match self.frame(seq).state() {
                Ok(MailboxState::TaskReady) => return,
                Ok(MailboxState::TaskDone) => match self.take_reply(seq, MailboxState::TaskDone) {
                    Ok((reply, fixed, payload)) => {
                        let t = self.tasks.pop_front().expect("a task is in flight");
                        let result = self.completion(&t, &reply, &fixed, &payload);
                        self.last_exec = Duration::from_nanos(reply.exec_ns);
                        out.push(Completion {
                            slot: t.slot,
                            member: t.member,
                            result,
                            exec_time: Duration::from_nanos(reply.exec_ns),
                            inner: self.inner_report(&payload),
                        });
                    }
                    // The task stays in flight: health reports the kill with its name.
                    Err(what) => self.fail_protocol(what),
                },
                Ok(other) => {
                    self.fail_protocol(format!("unexpected state {other:?} while a task runs"))
                }
                Err(raw) => self.fail_protocol(format!("unknown state word {raw}")),
            }
        }
    }

    fn start_control(&mut self, cmd: ControlCmd) -> Result<(), EndpointError> {
        if let Health::Dead(d) = self.health() {
            return Err(EndpointError::Dead(d.describe(&self.name)));
        }
        if !self.is_idle() {
            return Err(EndpointError::Busy);
        }
        let req = match cmd {
            ControlCmd::CommittedDeviceMemory => ControlRequest::CommittedDeviceMemory,
            ControlCmd::Ping(data) => ControlRequest::Ping(data),
            ControlCmd::Malloc { bytes, align } => ControlRequest::Malloc {
                nbytes: bytes,
                alignment: align,
            },
            ControlCmd::Free { alloc } => ControlRequest::Free { alloc },
            ControlCmd::CopyTo {
                alloc,
                offset,
                ref host,
            }
            | ControlCmd::CopyFrom {
                alloc,
                offset,
                ref host,
            } => {
                let wire = self.host_wire_tensor(host)?;
                let nbytes = host.bytes() as u64;
                if matches!(cmd, ControlCmd::CopyTo { .. }) {
                    ControlRequest::CopyTo {
                        alloc,
                        device_offset: offset,
                        nbytes,
                        host: wire,
                    }
                } else {
                    ControlRequest::CopyFrom {
                        alloc,
                        device_offset: offset,
                        nbytes,
                        host: wire,
                    }
                }
            }
        };
        let payload = req
            .encode()
            .map_err(|e| EndpointError::Failed(e.to_string()))?;
        let mut fixed = vec![0u8; FIXED_BYTES];
        let h = self.header(req.op(), None, 0, payload.len() as u32);
        frame::encode_header(&h, &mut fixed);
        fixed[frame::OFF_CONTROL_PAYLOAD..frame::OFF_CONTROL_PAYLOAD + payload.len()]
            .copy_from_slice(&payload);
        let mailbox = self.frame(h.seq);
        mailbox.write_parent(&fixed, &[]);
        if let Err(v) = mailbox.transition_to_control_request() {
            self.fail_protocol(v.to_string());
            return Err(EndpointError::Dead(v.to_string()));
        }
        self.control = Some((req.op(), h.seq));
        Ok(())
    }

    fn poll_control(&mut self) -> Option<Result<ControlReply, EndpointError>> {
        let (op, seq) = self.control?;
        if let Health::Dead(d) = self.health() {
            self.control = None;
            return Some(Err(EndpointError::Dead(d.describe(&self.name))));
        }
        match self.frame(seq).state() {
            Ok(MailboxState::ControlRequest) => None,
            Ok(MailboxState::ControlDone) => {
                self.control = None;
                match self.take_reply(seq, MailboxState::ControlDone) {
                    Ok((reply, fixed, payload)) => {
                        if reply.error_code != 0 {
                            return Some(Err(EndpointError::Failed(frame::decode_message(
                                &fixed,
                                reply.message_bytes,
                            ))));
                        }
                        Some(Ok(match op {
                            Op::Ping => ControlReply::Echo(payload),
                            Op::Malloc => {
                                let mut address = [0u8; 8];
                                let n = payload.len().min(8);
                                address[..n].copy_from_slice(&payload[..n]);
                                ControlReply::Alloc {
                                    alloc: reply.result,
                                    address: u64::from_le_bytes(address),
                                }
                            }
                            Op::CopyTo | Op::CopyFrom => ControlReply::Done,
                            _ => ControlReply::Bytes(reply.result),
                        }))
                    }
                    Err(what) => {
                        self.fail_protocol(what.clone());
                        Some(Err(EndpointError::Dead(what)))
                    }
                }
            }
            Ok(other) => {
                self.control = None;
                let what = format!("unexpected state {other:?} during {}", op.name());
                self.fail_protocol(what.clone());
                Some(Err(EndpointError::Dead(what)))
            }
            Err(raw) => {
                self.control = None;
                let what = format!("unknown state word {raw}");
                self.fail_protocol(what.clone());
                Some(Err(EndpointError::Dead(what)))
            }
        }
    }

    fn health(&self) -> Health {
        // A death counts once the child is reaped: a killed child can no longer touch
        // shared memory when its task is failed and its buffers are reused.
        let Some(exit) = self.status.exit() else {
            return Health::Alive;
        };
        let (fate, during, code) = if let Some(t) = &self.timed_out {
            (t.clone(), String::new(), ErrorCode::TaskTimeout)
        } else if let Some(silent) = self.status.unresponsive() {
            (
                format!(
                    "stopped answering liveness probes for {:.2} s and was killed (SIGKILL)",
                    silent.as_secs_f64()
                ),
                self.during(),
                ErrorCode::ChildUnresponsive,
            )
        } else if let Some(v) = &self.violation {
            (
                format!("{} after {v}", exit.describe()),
                self.during(),
                ErrorCode::ChildDied,
            )
        } else {
            (exit.describe(), self.during(), ErrorCode::ChildDied)
        };
        Health::Dead(Death { fate, during, code })
    }

    fn time_out(&mut self, elapsed: Duration, limit: Duration) -> Option<Failure> {
        if let Some(t) = self.tasks.front()
            && self.timed_out.is_none()
        {
            let label = t
                .label
                .as_ref()
                .map(|l| format!(" ('{l}')"))
                .unwrap_or_default();
            let fate = format!(
                "was killed (SIGKILL): TASK_TIMEOUT ({}): {} callable '{}' ran for {:.2} s, longer than task_timeout {:.2} s",
                ErrorCode::TaskTimeout.code(),
                t.kind,
                t.callable,
                elapsed.as_secs_f64(),
                limit.as_secs_f64()
            );
            tracing::error!(
                target: "pto::node",
                "{} {fate} ({} of run {}{label}); restarting it",
                self.name,
                t.task,
                t.task.run_id
            );
            self.timed_out = Some(fate);
            self.status.kill();
        }
        None
    }

    fn kill(&mut self, why: String) {
        self.fail_protocol(why);
    }

    fn restart(&mut self) -> bool {
        if self.shutting_down || self.history.failed >= MAX_FAILED_RESTARTS {
            return false;
        }
        if !self.factory.as_ref().is_some_and(|f| f.restarts_enabled()) {
            return false;
        }
        if self.restart.is_some() {
            return true;
        }
        let Some(factory) = self.factory.clone() else {
            return false;
        };
        let (delay, history) = self.restart_delay();
        self.history = history;
        let result = Arc::new(Mutex::new(None));
        let cancel = Arc::new(AtomicBool::new(false));
        let (r, c, role) = (Arc::clone(&result), Arc::clone(&cancel), self.role);
        let thread = std::thread::Builder::new()
            .name(format!("pto-restart-{}", ChildFactory::base_name(role)))
            .spawn(move || {
                let outcome = factory.restart(role, delay, &c);
                *r.lock() = Some(outcome);
                factory.notify_scheduler();
            });
        match thread {
            Ok(t) => {
                self.restart = Some(Restart {
                    result,
                    cancel,
                    thread: Some(t),
                });
                true
            }
            Err(e) => {
                tracing::error!(target: "pto::node", "{}: cannot start a restart thread: {e}", self.name);
                false
            }
        }
    }

    fn poll_restart(&mut self) -> Option<Result<(), String>> {
        let outcome = self.restart.as_ref()?.result.lock().take()?;
        if let Some(mut r) = self.restart.take()
            && let Some(t) = r.thread.take()
        {
            let _ = t.join();
        }
        match outcome {
            Ok(mut next) => {
                next.history = RestartHistory {
                    failed: 0,
                    ..self.history
                };
                // The old endpoint's child is reaped; nothing of it needs a shutdown.
                self.shutting_down = true;
                drop(std::mem::replace(self, next));
                Some(Ok(()))
            }
            Err(why) => {
                self.history.failed += 1;
                Some(Err(why))
            }
        }
    }

    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        self.status.stop_probing();
        if let Some(r) = &self.restart {
            r.cancel.store(true, Ordering::SeqCst);
        }
        for frame in &self.ring {
            frame.request_shutdown();
        }
        // The child waits on the frame of the next request (M8).
        let next = self.frame(self.seq + 1);
        for from in [MailboxState::Idle, MailboxState::InitReady] {
            if next.transition_to_shutdown(from).is_ok() {
                break;
            }
        }
    }

    fn finish_shutdown(&mut self, deadline: Instant) -> ShutdownOutcome {
        // A replacement being started gives up at its next check (spawns are refused once
        // the monitor stops); its thread is joined so nothing outlives `close`.
        if let Some(mut r) = self.restart.take()
            && let Some(t) = r.thread.take()
        {
            let _ = t.join();
            if let Some(Ok(mut next)) = r.result.lock().take() {
                next.begin_shutdown();
                next.finish_shutdown(deadline);
            }
        }
        // Closing our end of the socket is the child's second signal (EOF).
        self.sock.take();
        if self.status.wait_exit(deadline) {
            return ShutdownOutcome::Graceful;
        }
        self.status.kill();
        let _ = self
            .status
            .wait_exit(Instant::now() + Duration::from_secs(2));
        ShutdownOutcome::Killed
    }
}

impl Drop for ChildProcessEndpoint {
    /// An endpoint dropped without a shutdown still asks its child to exit.
    fn drop(&mut self) {
        if !self.shutting_down {
            self.begin_shutdown();
        }
    }
}
