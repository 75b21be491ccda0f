//! A child's work: building its role at start-up, serving task and control requests, and the
//! descriptor socket (NODE_RUNTIME.md §4.3, §4.7, §4.8, §5).

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pto_chip::memory::{AllocId, DeviceMemoryError};
use pto_chip::{ChipRunReport, ChipWorker, RunContext};
use pto_types::node_wire::FrameError;
use pto_types::node_wire::args_blob::{TensorSpace, WireArgs, decode_args, decode_tensor};
use pto_types::node_wire::boot::BootBlock;
use pto_types::node_wire::mailbox::{
    self as frame, CallableSection, ControlRequest, KindCode, Op, RESULT_BIND_FAILURE, ReplyHeader,
    ReportArea,
};
use pto_types::node_wire::segment_msg::{MESSAGE_BYTES, SegmentMsg};
use pto_types::node_wire::worker_spec::WorkerSpec;
use pto_types::ring_config::env::EnvSource;
use pto_types::wire::WireError;
use pto_types::{BufferMemory, ErrorCode, TaskArgs, Tensor};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

use super::liveness::Phase;
use super::{Child, Role, role_name};
use crate::WorkerRunError;
use crate::boot::chip_spec_from_boot;
use crate::buffer::{BufferInner, Memory};
use crate::callable::{find_node_callable, find_sub_callable};
use crate::endpoint::in_process::{chip_failure, panic_message};
use crate::error::FailureKind;
use crate::report::NodeTaskId;
use crate::report::wire::run_to_wire;
use crate::shm::{Segment, SegmentKey, SegmentWindow};
use crate::sub::{MappedArgs, SubContext};
use pto_types::node_wire::run_report::WireRunReport;

/// Builds the role the boot block names; returns its name, the role and the INIT_READY message,
/// or the INIT_FAILED message.
pub(super) fn build_role(boot: &BootBlock) -> Result<(String, Role, String), String> {
    let name = role_name(boot.role, boot.index);
    let missing: Vec<String> = boot
        .callables
        .iter()
        .filter(|c| c.kind == boot.role)
        .filter(|c| match c.kind {
            KindCode::Chip => pto_chip::callable::find_chip_callable(&c.name).is_none(),
            KindCode::Sub => find_sub_callable(&c.name).is_none(),
            KindCode::Node => find_node_callable(&c.name).is_none(),
        })
        .map(|c| format!("{:?}", c.name))
        .collect();
    let pid = std::process::id();
    if !missing.is_empty() {
        return Err(format!(
            "{name} pid={pid}: this image lacks registered callable(s) {}",
            missing.join(", ")
        ));
    }
    match boot.role {
        KindCode::Chip => {
            let Some(spec) = &boot.chip else {
                return Err(format!("{name}: the boot block has no chip spec"));
            };
            let mut spec = chip_spec_from_boot(spec);
            spec.strict_env |= boot.strict_env;
            // The chip's environment tier is this process's own environment (RING_CONFIG.md
            // §4.1): the parent's, plus the Worker's ring_env pairs added at spawn.
            let chip = ChipWorker::new(spec, EnvSource::process())
                .map_err(|e| format!("{name} pid={pid}: {e}"))?;
            let message = chip
                .env()
                .problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("\n");
            Ok((
                name,
                Role::Chip {
                    index: boot.index,
                    chip: Box::new(chip),
                },
                message,
            ))
        }
        KindCode::Sub => Ok((name, Role::Sub { index: boot.index }, String::new())),
        KindCode::Node => {
            let Some(spec) = &boot.node else {
                return Err(format!(
                    "{name} pid={pid}: the boot block has no Worker spec"
                ));
            };
            let spec = WorkerSpec::decode(spec).map_err(|e| format!("{name} pid={pid}: {e}"))?;
            let budget = Duration::from_millis(boot.startup_budget_ms);
            let worker = crate::Worker::from_spec(&spec, budget)
                .map_err(|e| format!("{name} pid={pid}: {e}"))?;
            worker
                .init()
                .map_err(|e| format!("{name} pid={pid}: {e}"))?;
            Ok((
                name,
                Role::Node {
                    index: boot.index,
                    worker: Box::new(worker),
                },
                String::new(),
            ))
        }
    }
}

/// A reply in the making.
struct Reply {
    header: ReplyHeader,
    message: String,
    report: Option<ReportArea>,
    payload: Vec<u8>,
}

impl Reply {
    fn ok() -> Reply {
        Reply {
            header: ReplyHeader::default(),
            message: String::new(),
            report: None,
            payload: Vec::new(),
        }
    }

    fn error(code: ErrorCode, message: String) -> Reply {
        Reply {
            header: ReplyHeader {
                error_code: code.code() as i32,
                ..ReplyHeader::default()
            },
            message,
            report: None,
            payload: Vec::new(),
        }
    }
}

/// `BAD_FRAME` or, for a well-formed record with an illegal config, `INVALID_CONFIG` (§4.8).
fn frame_error(e: FrameError) -> Reply {
    let code = match &e {
        FrameError::Config(WireError::Invalid(_)) => ErrorCode::InvalidConfig,
        _ => ErrorCode::BadFrame,
    };
    Reply::error(code, format!("{code}: {e}"))
}

impl Child {
    /// Receives pending segment messages; false when the parent closed the socket.
    pub(super) fn drain_socket(&mut self) -> bool {
        loop {
            let mut data = [0u8; MESSAGE_BYTES + 8];
            let mut space = [MaybeUninit::<u8>::uninit(); 64];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let received = {
                let mut iov = [IoSliceMut::new(&mut data)];
                rustix::net::recvmsg(
                    &self.sock,
                    &mut iov,
                    &mut control,
                    RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
                )
            };
            let (n, truncated) = match received {
                Ok(r) => (r.bytes, r.flags.contains(rustix::net::ReturnFlags::CTRUNC)),
                Err(rustix::io::Errno::AGAIN) => return true,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            };
            if n == 0 {
                return false; // EOF: the parent is gone or closed us.
            }
            let mut fds = Vec::new();
            for msg in control.drain() {
                if let RecvAncillaryMessage::ScmRights(iter) = msg {
                    fds.extend(iter);
                }
            }
            let Ok(msg) = SegmentMsg::decode(&data[..n.min(data.len())]) else {
                continue; // a malformed message is ignored; tasks naming it fail later
            };
            self.apply_segment_msg(&msg, fds.into_iter().next(), truncated);
        }
    }

    /// Maps (and, for chip and sub children, closes the descriptor of) an added segment, or
    /// drops one; remembers why an added segment could not be received.
    fn apply_segment_msg(&mut self, msg: &SegmentMsg, fd: Option<OwnedFd>, truncated: bool) {
        let key = SegmentKey {
            owner: msg.owner,
            segment: msg.segment,
        };
        if !msg.add {
            self.segments.remove(&key);
            self.lost_segments.remove(&key);
            return;
        }
        let mapped = match fd {
            Some(fd) => Segment::from_fd(key, fd, msg.nbytes as usize).map_err(|e| e.to_string()),
            None if truncated => Err(format!(
                "its descriptor was dropped on receipt: this child ran out of file descriptors (RLIMIT_NOFILE {})",
                rustix::process::getrlimit(rustix::process::Resource::Nofile)
                    .current
                    .map_or_else(|| "unlimited".to_string(), |n| n.to_string())
            )),
            None => Err("the message carried no descriptor".to_string()),
        };
        match mapped {
            Ok(seg) => {
                if !self.keeps_fds {
                    seg.close_fd();
                }
                self.lost_segments.remove(&key);
                self.segments.insert(key, Arc::new(seg));
            }
            Err(why) => {
                tracing::error!(target: "pto::node", "{}: segment {}: {why}", self.name, key.segment);
                self.lost_segments.insert(key, why);
            }
        }
    }

    fn reply(&mut self, seq: u64, started: Instant, mut r: Reply) {
        // The message area only when there is a message (a task reply rarely has one).
        let len = match r.message.len() {
            0 => frame::OFF_CALL_CONFIG,
            n => frame::OFF_MESSAGE + n.min(frame::MESSAGE_BYTES),
        };
        let mut fixed = vec![0u8; len];
        r.header.reply_seq = seq;
        r.header.child_pid = self.pid;
        r.header.exec_ns = started.elapsed().as_nanos() as u64;
        r.header.message_bytes = if r.message.is_empty() {
            0
        } else {
            frame::encode_message(&r.message, &mut fixed)
        };
        r.header.payload_bytes = r.payload.len() as u32;
        frame::encode_reply(&r.header, &mut fixed);
        if let Some(area) = &r.report {
            frame::encode_report(area, &mut fixed);
        }
        let message = r.header.message_bytes as usize;
        self.frame()
            .write_reply(&fixed, &r.payload, message, r.report.is_some());
    }

    pub(super) fn serve_task(&mut self) {
        let started = Instant::now();
        // The header, the config record and the callable section: what a task request uses.
        let mut fixed = vec![0u8; frame::OFF_CONTROL_PAYLOAD];
        let f = self.frame();
        f.read_range(&mut fixed, 0, frame::OFF_SHUTDOWN);
        f.read_range(&mut fixed, frame::OFF_SHUTDOWN + 4, frame::OFF_STATE);
        f.read_range(
            &mut fixed,
            frame::OFF_CALL_CONFIG,
            frame::OFF_CONTROL_PAYLOAD,
        );
        let (seq, reply) = match frame::decode_header(&fixed) {
            Ok(h) if h.op == Op::Task => {
                if h.flags & frame::FLAG_SEGMENTS_SENT != 0 {
                    self.drain_socket();
                }
                self.health.enter(Phase::Working);
                let reply = self.run_task(&h, &fixed);
                self.health.enter(Phase::Serving);
                (h.seq, reply)
            }
            Ok(h) => (
                h.seq,
                Reply::error(
                    ErrorCode::BadFrame,
                    format!("op {} in a task frame", h.op.name()),
                ),
            ),
            Err(e) => (frame_seq(&fixed), frame_error(e)),
        };
        self.reply(seq, started, reply);
        let _ = self.frame().transition_to_task_done();
        self.doorbell.ring();
    }

    fn run_task(&mut self, h: &frame::RequestHeader, fixed: &[u8]) -> Reply {
        let callable = match frame::decode_callable(fixed) {
            Ok(c) => c,
            Err(e) => return frame_error(e),
        };
        let blob = self.frame().read_payload(h.args_bytes as usize);
        let wire = match decode_args(&blob) {
            Ok(w) => w,
            Err(e) => return frame_error(e),
        };
        let task = NodeTaskId {
            run_id: h.run_id,
            index: (h.task_id >> 32) as u32,
        };
        match (&self.role, callable.kind) {
            (Role::Chip { index, chip }, KindCode::Chip) => {
                self.run_chip_task(*index, chip, task, &callable, &wire, fixed)
            }
            (Role::Sub { index }, KindCode::Sub) => {
                self.run_sub_task(*index, h, task, &callable, &wire)
            }
            (Role::Node { index, worker }, KindCode::Node) => {
                self.run_node_task(*index, worker, &callable, &wire, fixed)
            }
            (_, kind) => Reply::error(
                ErrorCode::UnsupportedOp,
                format!("{}: a {kind:?} task cannot run on this worker", self.name),
            ),
        }
    }

    /// Runs a chip task on this chip child's `ChipWorker`.
    fn run_chip_task(
        &self,
        index: u32,
        chip: &ChipWorker,
        task: NodeTaskId,
        callable: &CallableSection,
        wire: &WireArgs,
        fixed: &[u8],
    ) -> Reply {
        let cfg = match frame::decode_config(fixed) {
            Ok(c) => c,
            Err(e) => return frame_error(e),
        };
        let args = match self.task_args(wire, callable) {
            Ok(a) => a,
            Err(r) => return *r,
        };
        let ctx = RunContext {
            chip: index,
            label: callable.label.clone(),
            l3: Some((task.run_id, u64::from(task.index))),
        };
        match chip.run(&callable.name, &args, &cfg, &ctx) {
            Ok(report) => chip_reply(&report, chip.committed_device_memory()),
            Err(e) => {
                let f = chip_failure(&e);
                let mut r = Reply::error(f.code.unwrap_or(ErrorCode::InternalError), f.message);
                if f.kind == FailureKind::Bind {
                    r.header.result = RESULT_BIND_FAILURE;
                }
                r
            }
        }
    }

    /// Runs a sub callable of this image, its panic caught into the reply.
    fn run_sub_task(
        &self,
        index: u32,
        h: &frame::RequestHeader,
        task: NodeTaskId,
        callable: &CallableSection,
        wire: &WireArgs,
    ) -> Reply {
        let Some(f) = find_sub_callable(&callable.name) else {
            return Reply::error(
                ErrorCode::UnknownCallable,
                format!(
                    "sub_child[{index}]: no sub callable {:?} in this image",
                    callable.name
                ),
            );
        };
        let mapped = match self.mapped_args(wire) {
            Ok(m) => m,
            Err(r) => return *r,
        };
        let ctx = SubContext {
            worker: index as usize,
            task,
            label: callable.label.clone(),
            member: (h.group_index, h.group_size),
        };
        match catch_unwind(AssertUnwindSafe(|| f(&ctx, &mapped))) {
            Ok(Ok(())) => Reply::ok(),
            Ok(Err(e)) => Reply::error(
                ErrorCode::CallableFailed,
                format!("sub_child[{index}]: {e}"),
            ),
            Err(panic) => Reply::error(
                ErrorCode::CallablePanicked,
                format!(
                    "sub_child[{index}]: panicked: {}",
                    panic_message(panic.as_ref())
                ),
            ),
        }
    }

    /// Runs a node callable as one run of this node child's inner Worker.
    fn run_node_task(
        &self,
        index: u32,
        worker: &crate::Worker,
        callable: &CallableSection,
        wire: &WireArgs,
        fixed: &[u8],
    ) -> Reply {
        let Some(f) = find_node_callable(&callable.name) else {
            return Reply::error(
                ErrorCode::UnknownCallable,
                format!(
                    "node_child[{index}]: no node callable {:?} in this image",
                    callable.name
                ),
            );
        };
        let cfg = match frame::decode_config(fixed) {
            Ok(c) => c,
            Err(e) => return frame_error(e),
        };
        let args = match self.adopted_args(worker, wire, callable) {
            Ok(a) => a,
            Err(r) => return *r,
        };
        // The received CallConfig is the inner run's base config (RING_CONFIG.md §9:
        // the L3 does not interpret runtime_env; its chips resolve it).
        match worker.run(f, args, cfg) {
            Ok(report) => Reply {
                payload: WireRunReport::encode(&run_to_wire(&report)),
                ..Reply::ok()
            },
            Err(WorkerRunError::Failed(e)) => Reply {
                payload: WireRunReport::encode(&run_to_wire(&e.report)),
                ..Reply::error(ErrorCode::InnerRunFailed, e.to_string())
            },
            Err(WorkerRunError::Submit(e)) => {
                Reply::error(ErrorCode::InnerRunFailed, e.to_string())
            }
        }
    }

    /// The memory of one wire tensor: its window in a mapped segment.
    fn window(
        &self,
        w: &pto_types::node_wire::args_blob::WireTensor,
    ) -> Result<(Arc<Segment>, usize), Box<Reply>> {
        let unavailable = |why: String| {
            Box::new(Reply::error(
                ErrorCode::BufferUnavailable,
                format!("{}: buffer {:?}: {why}", self.name, w.id),
            ))
        };
        if w.location.space != TensorSpace::Host {
            return Err(unavailable(format!(
                "{:?} tensors are not supported by this child",
                w.location.space
            )));
        }
        let key = SegmentKey {
            owner: w.id.owner_uid,
            segment: w.location.segment,
        };
        let Some(seg) = self.segments.get(&key) else {
            return Err(unavailable(match self.lost_segments.get(&key) {
                Some(why) => format!("segment {} could not be received: {why}", key.segment),
                None => format!("segment {} was never received", key.segment),
            }));
        };
        let offset = w.location.segment_offset as usize;
        let fits = offset
            .checked_add(w.buffer_bytes as usize)
            .is_some_and(|end| end <= seg.len());
        if !fits {
            return Err(unavailable("it does not fit its segment".to_string()));
        }
        Ok((Arc::clone(seg), offset))
    }

    /// The host bytes a COPY_TO / COPY_FROM names: the window of its wire tensor, which must
    /// cover `nbytes` from the buffer's first byte.
    fn host_window(&self, host: &[u8], nbytes: u64) -> Result<(Arc<Segment>, usize), Box<Reply>> {
        let w = decode_tensor(host, 0).map_err(|e| Box::new(frame_error(e)))?;
        let (seg, offset) = self.window(&w)?;
        if nbytes > w.buffer_bytes {
            return Err(Box::new(Reply::error(
                ErrorCode::BufferUnavailable,
                format!(
                    "{}: a copy of {nbytes} bytes exceeds the {}-byte host buffer",
                    self.name, w.buffer_bytes
                ),
            )));
        }
        Ok((seg, offset))
    }

    /// A device wire tensor over this chip's allocation (`ChipWorker::device_buffer`).
    fn device_tensor(
        &self,
        chip: &ChipWorker,
        index: u32,
        w: &pto_types::node_wire::args_blob::WireTensor,
    ) -> Result<Tensor, Box<Reply>> {
        let unavailable = |why: String| {
            Box::new(Reply::error(
                ErrorCode::BufferUnavailable,
                format!("{}: device buffer {:?}: {why}", self.name, w.id),
            ))
        };
        if w.location.device_worker != Some(index) {
            return Err(unavailable(format!(
                "it belongs to chip {:?}",
                w.location.device_worker
            )));
        }
        let buffer = chip
            .device_buffer(AllocId(w.location.segment))
            .map_err(|e| unavailable(e.to_string()))?;
        if buffer.bytes() != w.buffer_bytes {
            return Err(unavailable(format!(
                "the allocation has {} bytes, the tensor names {}",
                buffer.bytes(),
                w.buffer_bytes
            )));
        }
        Tensor::new(buffer, w.byte_offset, &w.shape, &w.strides, w.dtype)
            .map_err(|e| unavailable(e.to_string()))
    }

    fn task_args(
        &self,
        wire: &WireArgs,
        callable: &CallableSection,
    ) -> Result<TaskArgs, Box<Reply>> {
        let mut args = TaskArgs::new();
        for w in &wire.tensors {
            if w.location.space == TensorSpace::Device
                && let Role::Chip { chip, index } = &self.role
            {
                let t = self.device_tensor(chip, *index, w)?;
                args = args.tensor(w.tag, &t);
                continue;
            }
            let (seg, offset) = self.window(w)?;
            let memory: Arc<dyn BufferMemory> = Arc::new(
                SegmentWindow::new(seg, offset, w.buffer_bytes as usize)
                    .expect("the window was checked"),
            );
            let t = w
                .to_tensor(Some(memory))
                .map_err(|e| Box::new(frame_error(e)))?;
            args = args.tensor(w.tag, &t);
        }
        Ok(with_scalars_and_label(args, wire, callable))
    }

    /// Arguments for the inner Worker of a node child: every buffer becomes one of its
    /// buffers under the original identity (so its own children receive the same segment).
    fn adopted_args(
        &self,
        worker: &crate::Worker,
        wire: &WireArgs,
        callable: &CallableSection,
    ) -> Result<TaskArgs, Box<Reply>> {
        let mut args = TaskArgs::new();
        for w in &wire.tensors {
            let (seg, offset) = self.window(w)?;
            let inner =
                worker.adopt_buffer(w.id, Memory::Shared(seg), offset, w.buffer_bytes as usize);
            let memory: Arc<dyn BufferMemory> = inner;
            let t = w
                .to_tensor(Some(memory))
                .map_err(|e| Box::new(frame_error(e)))?;
            args = args.tensor(w.tag, &t);
        }
        Ok(with_scalars_and_label(args, wire, callable))
    }

    fn mapped_args(&self, wire: &WireArgs) -> Result<MappedArgs, Box<Reply>> {
        let mut tensors = Vec::with_capacity(wire.tensors.len());
        for w in &wire.tensors {
            let (seg, offset) = self.window(w)?;
            let inner =
                BufferInner::new_window(w.id, Memory::Shared(seg), offset, w.buffer_bytes as usize);
            let t = w.to_tensor(None).map_err(|e| Box::new(frame_error(e)))?;
            tensors.push((w.tag, t, inner));
        }
        Ok(MappedArgs::new(tensors, wire.scalars.clone()))
    }

    pub(super) fn serve_control(&mut self) {
        let started = Instant::now();
        let fixed = self.frame().read_fixed();
        let (seq, reply) = match frame::decode_header(&fixed) {
            Ok(h) => {
                let at = frame::OFF_CONTROL_PAYLOAD;
                let payload = &fixed[at..at + h.control_bytes as usize];
                let reply = match ControlRequest::decode(h.op, payload) {
                    Ok(req) => {
                        self.health.enter(Phase::Working);
                        let reply = self.run_control(req);
                        self.health.enter(Phase::Serving);
                        reply
                    }
                    Err(e) => frame_error(e),
                };
                (h.seq, reply)
            }
            Err(e) => (frame_seq(&fixed), frame_error(e)),
        };
        self.reply(seq, started, reply);
        let _ = self.frame().transition_to_control_done();
        self.doorbell.ring();
    }

    fn run_control(&mut self, req: ControlRequest) -> Reply {
        if matches!(
            req,
            ControlRequest::CopyTo { .. } | ControlRequest::CopyFrom { .. }
        ) {
            self.drain_socket();
        }
        match (&self.role, req) {
            (Role::Chip { chip, .. }, ControlRequest::Malloc { nbytes, alignment }) => {
                self.malloc(chip, nbytes, alignment)
            }
            (Role::Chip { chip, .. }, ControlRequest::Free { alloc }) => {
                match chip.free(AllocId(alloc)) {
                    Ok(bytes) => {
                        let mut r = Reply::ok();
                        r.header.result = bytes;
                        r
                    }
                    Err(e) => self.device_error(e),
                }
            }
            (
                Role::Chip { chip, .. },
                ControlRequest::CopyTo {
                    alloc,
                    device_offset,
                    nbytes,
                    host,
                },
            ) => self.copy(chip, AllocId(alloc), device_offset, nbytes, &host, true),
            (
                Role::Chip { chip, .. },
                ControlRequest::CopyFrom {
                    alloc,
                    device_offset,
                    nbytes,
                    host,
                },
            ) => self.copy(chip, AllocId(alloc), device_offset, nbytes, &host, false),
            (_, ControlRequest::Ping(data)) => Reply {
                payload: data,
                ..Reply::ok()
            },
            (Role::Chip { chip, .. }, ControlRequest::CommittedDeviceMemory) => {
                let mut r = Reply::ok();
                r.header.result = chip.committed_device_memory();
                r
            }
            (_, req) => Reply::error(
                ErrorCode::UnsupportedOp,
                format!(
                    "{}: {} is not supported by this child",
                    self.name,
                    req.op().name()
                ),
            ),
        }
    }

    /// The reply to a failed device-memory request.
    fn device_error(&self, e: DeviceMemoryError) -> Reply {
        // Reply codes of NODE_RUNTIME.md §4.8: capacity problems are 1004, a bad allocation
        // id or copy range is 1005, a malformed request is 1001.
        let code = match e {
            DeviceMemoryError::Exhausted { .. }
            | DeviceMemoryError::AddressSpaceExhausted { .. }
            | DeviceMemoryError::HostMap { .. } => ErrorCode::DeviceMemoryExhausted,
            DeviceMemoryError::UnknownAllocation { .. } | DeviceMemoryError::OutOfRange { .. } => {
                ErrorCode::BufferUnavailable
            }
            DeviceMemoryError::InvalidAlign { .. } => ErrorCode::BadFrame,
        };
        Reply::error(code, format!("{}: {e}", self.name))
    }

    /// MALLOC: the allocation id in the result, its device address in the payload.
    fn malloc(&self, chip: &ChipWorker, nbytes: u64, alignment: u64) -> Reply {
        let id = match chip.malloc(nbytes, alignment) {
            Ok(id) => id,
            Err(e) => return self.device_error(e),
        };
        let address = match chip.device_buffer(id) {
            Ok(b) => b.id().buffer_id,
            Err(e) => return self.device_error(e),
        };
        let mut r = Reply::ok();
        r.header.result = id.0;
        r.payload = address.to_le_bytes().to_vec();
        r
    }

    /// COPY_TO (`to_device`) or COPY_FROM: `nbytes` between the host buffer and the
    /// allocation at `device_offset`.
    fn copy(
        &self,
        chip: &ChipWorker,
        alloc: AllocId,
        device_offset: u64,
        nbytes: u64,
        host: &[u8],
        to_device: bool,
    ) -> Reply {
        let (seg, at) = match self.host_window(host, nbytes) {
            Ok(w) => w,
            Err(r) => return *r,
        };
        let done = if to_device {
            let bytes = seg.read_elems::<u8>(at, nbytes as usize);
            chip.copy_to_device(alloc, device_offset, &bytes)
        } else {
            chip.copy_from_device(alloc, device_offset, nbytes)
                .map(|bytes| seg.write_elems::<u8>(at, &bytes))
        };
        match done {
            Ok(()) => Reply::ok(),
            Err(e) => self.device_error(e),
        }
    }
}

/// The request's seq even when the header does not decode (so the reply still echoes it).
fn frame_seq(fixed: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&fixed[frame::OFF_SEQ..frame::OFF_SEQ + 8]);
    u64::from_le_bytes(b)
}

/// The report area and payload of a successful chip run.
fn chip_reply(report: &ChipRunReport, device_committed: u64) -> Reply {
    let (area, extra) = crate::report::wire::chip_to_wire(report, device_committed);
    Reply {
        report: Some(area),
        payload: extra.encode(),
        ..Reply::ok()
    }
}

/// Adds the wire's scalars and the callable's label to `args` (tensors come first).
fn with_scalars_and_label(
    mut args: TaskArgs,
    wire: &WireArgs,
    callable: &CallableSection,
) -> TaskArgs {
    for &s in &wire.scalars {
        args = args.scalar(s);
    }
    if let Some(label) = &callable.label {
        args = args.label(label);
    }
    args
}
