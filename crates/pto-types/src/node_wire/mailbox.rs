//! The mailbox frame: one 64 KiB frame per child, shared by tasks and control
//! (NODE_RUNTIME.md §4.5–§4.8).
//!
//! The layout is the set of `OFF_*` constants below (pinned against §4.5 by the tests). Five
//! 32-bit words are atomics touched concurrently by both processes and are **never** written by
//! these codecs: [`OFF_SHUTDOWN`] (parent, sticky), [`OFF_STATE`] (the current owner),
//! [`OFF_CHILD_PARKED`] (child), and the liveness pair [`OFF_PROBE`] (parent) /
//! [`OFF_PROBE_ACK`] (child), which pto carves out of the reply's reserved bytes: the parent
//! bumps the probe, the child's liveness thread copies it into the ack (NODE_RUNTIME.md §4.9 as
//! extended by pto). Everything else is owned by one side at a time and moves as
//! plain bytes: the parent writes the request regions ([`PARENT_REGIONS`]) while it owns the
//! frame, the child writes the reply regions ([`CHILD_REGIONS`]) while it owns it. The codecs
//! work on a plain buffer of [`FIXED_BYTES`] (the frame up to the payload) plus the payload;
//! the node copies exactly those regions to and from the shared mapping.

use super::{FrameError, Reader, Writer, get_u16, get_u32, get_u64, name_from, need, put, zero};
use crate::ring_config::resolve::{NotResolvable, Resolved, ResolvedSizing, SizeSource};
use crate::wire::call_config_record::{self, RECORD_LEN};
use crate::{CallConfig, RING_COUNT, Resource, RuntimeEnv};

/// Frame magic `PTOM` (bytes `50 54 4f 4d`, the `u32` 0x4D4F5450).
pub const MAGIC: [u8; 4] = *b"PTOM";
/// Protocol version of the frame and of every node record.
///
/// History: 1 = NODE_RUNTIME.md §4.5, extended in place (issue 14) by a ring of frames per
/// lane (pto-node's mailbox rule M8) and [`FLAG_SEGMENTS_SENT`]: parent and child are always
/// the same pto build (there is no registry digest; the child checks the boot block's callable
/// names), so no peer speaks the unextended form.
pub const VERSION: u16 = 1;
/// Size of a frame.
pub const FRAME_BYTES: usize = 65536;

pub const OFF_MAGIC: usize = 0;
pub const OFF_VERSION: usize = 4;
pub const OFF_RESERVED0: usize = 6;
pub const OFF_FRAME_BYTES: usize = 8;
/// Atomic `u32`, parent-only, sticky 0 → 1.
pub const OFF_SHUTDOWN: usize = 12;
pub const OFF_SEQ: usize = 16;
pub const OFF_OP: usize = 24;
pub const OFF_FLAGS: usize = 28;
pub const OFF_RUN_ID: usize = 32;
pub const OFF_TASK_ID: usize = 40;
pub const OFF_GROUP_INDEX: usize = 48;
pub const OFF_GROUP_SIZE: usize = 52;
pub const OFF_ARGS_BYTES: usize = 56;
pub const OFF_CONTROL_BYTES: usize = 60;
/// Atomic `u32`: the state word ([`MailboxState`]), written only by the frame's owner.
pub const OFF_STATE: usize = 64;
/// Atomic `u32`, child-only: 1 while the child is (about to be) parked on the state word.
pub const OFF_CHILD_PARKED: usize = 68;
pub const OFF_REPLY_SEQ: usize = 72;
pub const OFF_ERROR_CODE: usize = 80;
pub const OFF_MESSAGE_BYTES: usize = 84;
pub const OFF_CHILD_PID: usize = 88;
pub const OFF_REPLY_PAYLOAD_BYTES: usize = 92;
pub const OFF_RESULT: usize = 96;
pub const OFF_EXEC_NS: usize = 104;
pub const OFF_REPLY_RESERVED: usize = 112;
/// Atomic `u32`, parent-only: the number of the latest liveness probe.
pub const OFF_PROBE: usize = 120;
/// Atomic `u32`, child-only: the number of the latest probe the child answered.
pub const OFF_PROBE_ACK: usize = 124;
pub const OFF_REPORT: usize = 128;
pub const OFF_REPORT_WINDOW: usize = 128;
pub const OFF_REPORT_HEAP: usize = 160;
pub const OFF_REPORT_DEP_POOL: usize = 192;
pub const OFF_REPORT_SOURCES: usize = 224;
pub const OFF_REPORT_ARENA_HIT: usize = 236;
pub const OFF_REPORT_VALID: usize = 237;
pub const OFF_REPORT_EVICTED: usize = 238;
pub const OFF_REPORT_ARENA_BYTES: usize = 240;
pub const OFF_REPORT_DEVICE_COMMITTED: usize = 248;
pub const OFF_CALL_CONFIG: usize = 256;
pub const OFF_CONFIG_RESERVED: usize = 1400;
pub const OFF_CALLABLE_ID: usize = 1536;
pub const OFF_KIND: usize = 1540;
pub const OFF_NAME_LEN: usize = 1541;
pub const OFF_LABEL_LEN: usize = 1542;
pub const OFF_CALLABLE_RESERVED: usize = 1543;
pub const OFF_NAME: usize = 1544;
pub const OFF_LABEL: usize = 1608;
pub const OFF_CALLABLE_TAIL: usize = 1672;
pub const OFF_CONTROL_PAYLOAD: usize = 1792;
pub const CONTROL_PAYLOAD_BYTES: usize = 2304;
pub const OFF_MESSAGE: usize = 4096;
pub const MESSAGE_BYTES: usize = 4096;
pub const OFF_PAYLOAD: usize = 8192;
pub const PAYLOAD_BYTES: usize = FRAME_BYTES - OFF_PAYLOAD;
/// The frame up to the payload: what the codecs below read and write.
pub const FIXED_BYTES: usize = OFF_PAYLOAD;

/// Regions the parent writes while it owns the frame (`[start, end)`), payload excluded.
pub const PARENT_REGIONS: [(usize, usize); 5] = [
    (OFF_MAGIC, OFF_SHUTDOWN),
    (OFF_SEQ, OFF_STATE),
    (OFF_CALL_CONFIG, OFF_CALLABLE_ID),
    (OFF_CALLABLE_ID, OFF_CONTROL_PAYLOAD),
    (OFF_CONTROL_PAYLOAD, OFF_MESSAGE),
];
/// Regions the child writes while it owns the frame, payload excluded.
pub const CHILD_REGIONS: [(usize, usize); 3] = [
    (OFF_REPLY_SEQ, OFF_PROBE),
    (OFF_REPORT, OFF_CALL_CONFIG),
    (OFF_MESSAGE, OFF_PAYLOAD),
];

/// Flags bit: the task is one member of a group.
pub const FLAG_GROUP_MEMBER: u32 = 1;
/// Flags bit: the parent sent segment messages (`SEGMENT_ADD` / `SEGMENT_DROP`) on the
/// descriptor socket since its previous request; the child drains the socket before it
/// decodes the task (without the bit it need not make that system call).
pub const FLAG_SEGMENTS_SENT: u32 = 2;
/// Every flags bit a request may carry.
pub const KNOWN_FLAGS: u32 = FLAG_GROUP_MEMBER | FLAG_SEGMENTS_SENT;

const _: () = {
    assert!(OFF_CALL_CONFIG + RECORD_LEN == OFF_CONFIG_RESERVED);
    assert!(OFF_NAME + 64 == OFF_LABEL && OFF_LABEL + 64 == OFF_CALLABLE_TAIL);
    assert!(OFF_CONTROL_PAYLOAD + CONTROL_PAYLOAD_BYTES == OFF_MESSAGE);
    assert!(OFF_MESSAGE + MESSAGE_BYTES == OFF_PAYLOAD);
    assert!(OFF_REPORT_DEVICE_COMMITTED + 8 == OFF_CALL_CONFIG);
    // No legal task is rejected for size.
    assert!(super::args_blob::MAX_ARGS_BYTES <= PAYLOAD_BYTES);
    assert!(
        OFF_STATE.is_multiple_of(64)
            && OFF_SHUTDOWN.is_multiple_of(4)
            && OFF_CHILD_PARKED.is_multiple_of(4)
            && OFF_PROBE.is_multiple_of(4)
            && OFF_PROBE_ACK == OFF_PROBE + 4
            && OFF_PROBE_ACK + 4 == OFF_REPORT
    );
};

/// The state word (NODE_RUNTIME.md §4.6). Only the frame's current owner stores it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MailboxState {
    /// Zero-filled at creation; the child owns the frame.
    Booting = 0,
    /// The child started; the parent owns the frame.
    InitReady = 1,
    /// The child failed to start (message set); terminal.
    InitFailed = 2,
    /// The parent owns an idle frame.
    Idle = 3,
    /// A task request; the child owns the frame.
    TaskReady = 4,
    /// A task reply; the parent owns the frame.
    TaskDone = 5,
    /// A control request; the child owns the frame.
    ControlRequest = 6,
    /// A control reply; the parent owns the frame.
    ControlDone = 7,
    /// The parent asked the child to exit; terminal.
    Shutdown = 8,
}

impl MailboxState {
    pub const ALL: [MailboxState; 9] = [
        MailboxState::Booting,
        MailboxState::InitReady,
        MailboxState::InitFailed,
        MailboxState::Idle,
        MailboxState::TaskReady,
        MailboxState::TaskDone,
        MailboxState::ControlRequest,
        MailboxState::ControlDone,
        MailboxState::Shutdown,
    ];

    pub const fn code(self) -> u32 {
        self as u32
    }

    pub fn from_code(code: u32) -> Option<MailboxState> {
        MailboxState::ALL.get(code as usize).copied()
    }

    /// Whether the child owns the frame in this state.
    pub const fn child_owns(self) -> bool {
        matches!(
            self,
            MailboxState::Booting | MailboxState::TaskReady | MailboxState::ControlRequest
        )
    }
}

/// Request operations: 1 is a task, ≥ 16 are control commands (§4.7).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Task = 1,
    Ping = 16,
    Register = 17,
    Unregister = 18,
    Malloc = 19,
    Free = 20,
    CopyTo = 21,
    CopyFrom = 22,
    CommittedDeviceMemory = 23,
    Prewarm = 24,
    ResolveConfig = 25,
    TrimArenas = 26,
}

impl Op {
    pub const ALL: [Op; 12] = [
        Op::Task,
        Op::Ping,
        Op::Register,
        Op::Unregister,
        Op::Malloc,
        Op::Free,
        Op::CopyTo,
        Op::CopyFrom,
        Op::CommittedDeviceMemory,
        Op::Prewarm,
        Op::ResolveConfig,
        Op::TrimArenas,
    ];

    pub const fn code(self) -> u32 {
        self as u32
    }

    pub fn from_code(code: u32) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| op.code() == code)
    }

    /// The name used in messages (`PING`, `COMMITTED_DEVICE_MEMORY`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Op::Task => "TASK",
            Op::Ping => "PING",
            Op::Register => "REGISTER",
            Op::Unregister => "UNREGISTER",
            Op::Malloc => "MALLOC",
            Op::Free => "FREE",
            Op::CopyTo => "COPY_TO",
            Op::CopyFrom => "COPY_FROM",
            Op::CommittedDeviceMemory => "COMMITTED_DEVICE_MEMORY",
            Op::Prewarm => "PREWARM",
            Op::ResolveConfig => "RESOLVE_CONFIG",
            Op::TrimArenas => "TRIM_ARENAS",
        }
    }
}

/// The kind of callable a frame names (also the role of a child in its boot block).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KindCode {
    Chip = 1,
    Sub = 2,
    Node = 3,
}

impl KindCode {
    pub fn from_code(code: u8) -> Option<KindCode> {
        match code {
            1 => Some(KindCode::Chip),
            2 => Some(KindCode::Sub),
            3 => Some(KindCode::Node),
            _ => None,
        }
    }
}

/// The parent's request header (bytes 0–63 minus the atomic words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub seq: u64,
    pub op: Op,
    pub flags: u32,
    pub run_id: u64,
    /// `index << 32 | generation` of the task slot (§4.5).
    pub task_id: u64,
    pub group_index: u32,
    pub group_size: u32,
    pub args_bytes: u32,
    pub control_bytes: u32,
}

/// Writes the identity (magic, version, frame size) and `h` into `fixed`.
pub fn encode_header(h: &RequestHeader, fixed: &mut [u8]) {
    put(fixed, OFF_MAGIC, &MAGIC);
    put(fixed, OFF_VERSION, &VERSION.to_le_bytes());
    put(fixed, OFF_RESERVED0, &[0, 0]);
    put(fixed, OFF_FRAME_BYTES, &(FRAME_BYTES as u32).to_le_bytes());
    put(fixed, OFF_SEQ, &h.seq.to_le_bytes());
    put(fixed, OFF_OP, &h.op.code().to_le_bytes());
    put(fixed, OFF_FLAGS, &h.flags.to_le_bytes());
    put(fixed, OFF_RUN_ID, &h.run_id.to_le_bytes());
    put(fixed, OFF_TASK_ID, &h.task_id.to_le_bytes());
    put(fixed, OFF_GROUP_INDEX, &h.group_index.to_le_bytes());
    put(fixed, OFF_GROUP_SIZE, &h.group_size.to_le_bytes());
    put(fixed, OFF_ARGS_BYTES, &h.args_bytes.to_le_bytes());
    put(fixed, OFF_CONTROL_BYTES, &h.control_bytes.to_le_bytes());
}

/// Writes only the identity (magic, version, frame size): what a fresh frame holds at boot.
pub fn encode_identity(fixed: &mut [u8]) {
    put(fixed, OFF_MAGIC, &MAGIC);
    put(fixed, OFF_VERSION, &VERSION.to_le_bytes());
    put(fixed, OFF_RESERVED0, &[0, 0]);
    put(fixed, OFF_FRAME_BYTES, &(FRAME_BYTES as u32).to_le_bytes());
}

/// Writes the start-up frame: the identity and, in the `args bytes` field, the length of the
/// boot block the parent put in the payload (§4.6).
pub fn encode_boot_header(boot_bytes: u32, fixed: &mut [u8]) {
    encode_identity(fixed);
    put(fixed, OFF_ARGS_BYTES, &boot_bytes.to_le_bytes());
}

/// The child's start-up check: identity, then the boot block's length.
pub fn decode_boot_header(fixed: &[u8]) -> Result<usize, FrameError> {
    need("mailbox frame", fixed, OFF_STATE)?;
    check_identity(fixed)?;
    let n = get_u32(fixed, OFF_ARGS_BYTES) as usize;
    if n > PAYLOAD_BYTES {
        return Err(FrameError::BadValue {
            field: "boot block bytes",
            value: n as u64,
        });
    }
    Ok(n)
}

/// Checks magic, version and frame size (the child's start-up check).
pub fn check_identity(fixed: &[u8]) -> Result<(), FrameError> {
    need("mailbox frame", fixed, OFF_SHUTDOWN)?;
    let magic: [u8; 4] = super::get(fixed, OFF_MAGIC);
    if magic != MAGIC {
        return Err(FrameError::BadMagic {
            what: "mailbox frame",
            found: magic,
        });
    }
    let version = get_u16(fixed, OFF_VERSION);
    if version != VERSION {
        return Err(FrameError::UnsupportedVersion {
            what: "mailbox frame",
            found: version,
            expected: VERSION,
        });
    }
    zero("mailbox frame", fixed, OFF_RESERVED0, OFF_FRAME_BYTES)?;
    let frame = get_u32(fixed, OFF_FRAME_BYTES);
    if frame as usize != FRAME_BYTES {
        return Err(FrameError::BadValue {
            field: "frame bytes",
            value: u64::from(frame),
        });
    }
    Ok(())
}

/// Decodes and checks the request header.
pub fn decode_header(fixed: &[u8]) -> Result<RequestHeader, FrameError> {
    need("mailbox frame", fixed, OFF_STATE)?;
    check_identity(fixed)?;
    let op_code = get_u32(fixed, OFF_OP);
    let op = Op::from_code(op_code).ok_or(FrameError::BadValue {
        field: "op",
        value: u64::from(op_code),
    })?;
    let flags = get_u32(fixed, OFF_FLAGS);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(FrameError::BadValue {
            field: "flags",
            value: u64::from(flags),
        });
    }
    let group_index = get_u32(fixed, OFF_GROUP_INDEX);
    let group_size = get_u32(fixed, OFF_GROUP_SIZE);
    if group_size == 0 || group_index >= group_size {
        return Err(FrameError::BadValue {
            field: "group index/size",
            value: (u64::from(group_index) << 32) | u64::from(group_size),
        });
    }
    let args_bytes = get_u32(fixed, OFF_ARGS_BYTES);
    if args_bytes as usize > PAYLOAD_BYTES {
        return Err(FrameError::BadValue {
            field: "args bytes",
            value: u64::from(args_bytes),
        });
    }
    let control_bytes = get_u32(fixed, OFF_CONTROL_BYTES);
    if control_bytes as usize > CONTROL_PAYLOAD_BYTES {
        return Err(FrameError::BadValue {
            field: "control payload bytes",
            value: u64::from(control_bytes),
        });
    }
    Ok(RequestHeader {
        seq: get_u64(fixed, OFF_SEQ),
        op,
        flags,
        run_id: get_u64(fixed, OFF_RUN_ID),
        task_id: get_u64(fixed, OFF_TASK_ID),
        group_index,
        group_size,
        args_bytes,
        control_bytes,
    })
}

/// Writes the `CallConfig` record at offset 256 (`None`: zeros, for sub tasks) and zeroes the
/// reserved bytes after it.
pub fn encode_config(cfg: Option<&CallConfig>, fixed: &mut [u8]) -> Result<(), FrameError> {
    let area = &mut fixed[OFF_CALL_CONFIG..OFF_CALLABLE_ID];
    area.fill(0);
    if let Some(cfg) = cfg {
        call_config_record::encode_into(cfg, area).map_err(FrameError::Config)?;
    }
    Ok(())
}

/// Decodes the `CallConfig` record at offset 256 (C5 of RING_CONFIG.md §3.1 included).
pub fn decode_config(fixed: &[u8]) -> Result<CallConfig, FrameError> {
    need("mailbox frame", fixed, OFF_CALLABLE_ID)?;
    zero("mailbox frame", fixed, OFF_CONFIG_RESERVED, OFF_CALLABLE_ID)?;
    call_config_record::decode_call_config(&fixed[OFF_CALL_CONFIG..OFF_CONFIG_RESERVED])
        .map_err(FrameError::Config)
}

/// The callable section (bytes 1536–1791).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallableSection {
    pub id: u32,
    pub kind: KindCode,
    pub name: String,
    pub label: Option<String>,
}

/// Writes the callable section; names and labels are checked by the caller (1–64 bytes).
pub fn encode_callable(c: &CallableSection, fixed: &mut [u8]) {
    let area = &mut fixed[OFF_CALLABLE_ID..OFF_CONTROL_PAYLOAD];
    area.fill(0);
    let name = &c.name.as_bytes()[..c.name.len().min(64)];
    let label = c.label.as_deref().unwrap_or("").as_bytes();
    let label = &label[..label.len().min(64)];
    put(fixed, OFF_CALLABLE_ID, &c.id.to_le_bytes());
    fixed[OFF_KIND] = c.kind as u8;
    fixed[OFF_NAME_LEN] = name.len() as u8;
    fixed[OFF_LABEL_LEN] = label.len() as u8;
    put(fixed, OFF_NAME, name);
    put(fixed, OFF_LABEL, label);
}

/// Decodes and checks the callable section.
pub fn decode_callable(fixed: &[u8]) -> Result<CallableSection, FrameError> {
    need("mailbox frame", fixed, OFF_CONTROL_PAYLOAD)?;
    let kind = KindCode::from_code(fixed[OFF_KIND]).ok_or(FrameError::BadValue {
        field: "callable kind",
        value: u64::from(fixed[OFF_KIND]),
    })?;
    let name_len = usize::from(fixed[OFF_NAME_LEN]);
    let label_len = usize::from(fixed[OFF_LABEL_LEN]);
    if name_len > 64 || label_len > 64 {
        return Err(FrameError::BadName {
            field: "callable name or label length",
        });
    }
    zero("mailbox frame", fixed, OFF_CALLABLE_RESERVED, OFF_NAME)?;
    zero("mailbox frame", fixed, OFF_NAME + name_len, OFF_LABEL)?;
    zero(
        "mailbox frame",
        fixed,
        OFF_LABEL + label_len,
        OFF_CONTROL_PAYLOAD,
    )?;
    let name = name_from(&fixed[OFF_NAME..OFF_NAME + name_len], "callable name")?;
    let label = match label_len {
        0 => None,
        n => Some(name_from(&fixed[OFF_LABEL..OFF_LABEL + n], "task label")?),
    };
    Ok(CallableSection {
        id: get_u32(fixed, OFF_CALLABLE_ID),
        kind,
        name,
        label,
    })
}

/// The child's reply header (bytes 72–127).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyHeader {
    pub reply_seq: u64,
    /// 0 OK, else a code of §4.8.
    pub error_code: i32,
    pub message_bytes: u32,
    pub child_pid: u32,
    pub payload_bytes: u32,
    /// Control replies: the result (allocation id, bytes, …). Failed task replies:
    /// [`RESULT_BIND_FAILURE`] when the chip could not bind the run (no L2 task ran), else 0.
    pub result: u64,
    pub exec_ns: u64,
}

/// `ReplyHeader::result` of a failed chip task that never bound (RING_CONFIG.md T88: a bind
/// failure leaves the endpoint usable and is reported as such).
pub const RESULT_BIND_FAILURE: u64 = 1;

pub fn encode_reply(r: &ReplyHeader, fixed: &mut [u8]) {
    put(fixed, OFF_REPLY_SEQ, &r.reply_seq.to_le_bytes());
    put(fixed, OFF_ERROR_CODE, &r.error_code.to_le_bytes());
    put(fixed, OFF_MESSAGE_BYTES, &r.message_bytes.to_le_bytes());
    put(fixed, OFF_CHILD_PID, &r.child_pid.to_le_bytes());
    put(
        fixed,
        OFF_REPLY_PAYLOAD_BYTES,
        &r.payload_bytes.to_le_bytes(),
    );
    put(fixed, OFF_RESULT, &r.result.to_le_bytes());
    put(fixed, OFF_EXEC_NS, &r.exec_ns.to_le_bytes());
    fixed[OFF_REPLY_RESERVED..OFF_PROBE].fill(0);
}

pub fn decode_reply(fixed: &[u8]) -> Result<ReplyHeader, FrameError> {
    need("mailbox frame", fixed, OFF_REPORT)?;
    zero("reply", fixed, OFF_REPLY_RESERVED, OFF_PROBE)?;
    let r = ReplyHeader {
        reply_seq: get_u64(fixed, OFF_REPLY_SEQ),
        error_code: get_u32(fixed, OFF_ERROR_CODE) as i32,
        message_bytes: get_u32(fixed, OFF_MESSAGE_BYTES),
        child_pid: get_u32(fixed, OFF_CHILD_PID),
        payload_bytes: get_u32(fixed, OFF_REPLY_PAYLOAD_BYTES),
        result: get_u64(fixed, OFF_RESULT),
        exec_ns: get_u64(fixed, OFF_EXEC_NS),
    };
    if r.message_bytes as usize > MESSAGE_BYTES {
        return Err(FrameError::BadValue {
            field: "message bytes",
            value: u64::from(r.message_bytes),
        });
    }
    if r.payload_bytes as usize > PAYLOAD_BYTES {
        return Err(FrameError::BadValue {
            field: "reply payload bytes",
            value: u64::from(r.payload_bytes),
        });
    }
    Ok(r)
}

/// The chip child's report area (bytes 128–255): the resolved sizing with provenance and the
/// arena outcome of the last bind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportArea {
    /// Values per resource in `Resource::ALL` order (task window, heap, dep pool), per ring.
    pub values: [[u64; RING_COUNT]; 3],
    /// Sources per resource and ring: 0 default, 1 env, 2 call_config.
    pub sources: [[u8; RING_COUNT]; 3],
    pub arena_hit: bool,
    pub valid: bool,
    pub evicted: u16,
    pub arena_bytes: u64,
    pub device_committed: u64,
}

impl ReportArea {
    /// The area for a resolved sizing.
    pub fn from_sizing(s: &ResolvedSizing) -> ReportArea {
        let mut area = ReportArea {
            valid: true,
            ..ReportArea::default()
        };
        for (k, r) in Resource::ALL.iter().enumerate() {
            area.values[k] = s.values(*r);
            area.sources[k] = s.sources(*r).map(SizeSource::code);
        }
        area
    }

    /// The [`ResolvedSizing`] the child reported, values and sources as written. Fails
    /// (`BAD_FRAME`) unless the area is valid and a sizing `resolve` could have produced
    /// ([`ResolvedSizing::from_resolved`]: legal values; per resource at most one of `env` and
    /// `default`, since the environment tier is all-or-nothing).
    pub fn sizing(&self) -> Result<ResolvedSizing, FrameError> {
        let bad = |value: u64| FrameError::BadValue {
            field: "report area",
            value,
        };
        if !self.valid {
            return Err(bad(0));
        }
        let mut values = [[Resolved {
            value: 0,
            source: SizeSource::Default,
        }; RING_COUNT]; 3];
        for (k, rings) in values.iter_mut().enumerate() {
            for (ring, r) in rings.iter_mut().enumerate() {
                let code = self.sources[k][ring];
                let source = SizeSource::from_code(code).ok_or(bad(u64::from(code)))?;
                *r = Resolved {
                    value: self.values[k][ring],
                    source,
                };
            }
        }
        ResolvedSizing::from_resolved(values).map_err(|e| match e {
            NotResolvable::Illegal { value, .. } => bad(value),
            NotResolvable::MixedTiers { resource } => bad(resource as u64),
        })
    }
}

pub fn encode_report(a: &ReportArea, fixed: &mut [u8]) {
    let offs = [OFF_REPORT_WINDOW, OFF_REPORT_HEAP, OFF_REPORT_DEP_POOL];
    for (k, &off) in offs.iter().enumerate() {
        for ring in 0..RING_COUNT {
            put(fixed, off + 8 * ring, &a.values[k][ring].to_le_bytes());
            fixed[OFF_REPORT_SOURCES + RING_COUNT * k + ring] = a.sources[k][ring];
        }
    }
    fixed[OFF_REPORT_ARENA_HIT] = u8::from(a.arena_hit);
    fixed[OFF_REPORT_VALID] = u8::from(a.valid);
    put(fixed, OFF_REPORT_EVICTED, &a.evicted.to_le_bytes());
    put(fixed, OFF_REPORT_ARENA_BYTES, &a.arena_bytes.to_le_bytes());
    put(
        fixed,
        OFF_REPORT_DEVICE_COMMITTED,
        &a.device_committed.to_le_bytes(),
    );
}

pub fn decode_report(fixed: &[u8]) -> Result<ReportArea, FrameError> {
    need("mailbox frame", fixed, OFF_CALL_CONFIG)?;
    let mut a = ReportArea::default();
    let offs = [OFF_REPORT_WINDOW, OFF_REPORT_HEAP, OFF_REPORT_DEP_POOL];
    for (k, &off) in offs.iter().enumerate() {
        for ring in 0..RING_COUNT {
            a.values[k][ring] = get_u64(fixed, off + 8 * ring);
            a.sources[k][ring] = fixed[OFF_REPORT_SOURCES + RING_COUNT * k + ring];
        }
    }
    let flag = |at: usize, field: &'static str| match fixed[at] {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(FrameError::BadValue {
            field,
            value: u64::from(v),
        }),
    };
    a.arena_hit = flag(OFF_REPORT_ARENA_HIT, "arena cache hit")?;
    a.valid = flag(OFF_REPORT_VALID, "report valid")?;
    a.evicted = get_u16(fixed, OFF_REPORT_EVICTED);
    a.arena_bytes = get_u64(fixed, OFF_REPORT_ARENA_BYTES);
    a.device_committed = get_u64(fixed, OFF_REPORT_DEVICE_COMMITTED);
    Ok(a)
}

/// The ellipsis that marks a message cut in the middle.
pub const CUT: &str = "…";

/// Fits `msg` into at most `max` bytes: a longer message keeps its head (outer context) and
/// its tail (root cause) around [`CUT`], both cut at character boundaries.
pub fn fit_message(msg: &str, max: usize) -> String {
    if msg.len() <= max {
        return msg.to_string();
    }
    let room = max.saturating_sub(CUT.len());
    let mut head = room / 2;
    while !msg.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = msg.len() - (room - head);
    while !msg.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}{CUT}{}", &msg[..head], &msg[tail..])
}

/// Writes `msg` (cut to [`MESSAGE_BYTES`]) into the message area; returns its length.
pub fn encode_message(msg: &str, fixed: &mut [u8]) -> u32 {
    let fitted = fit_message(msg, MESSAGE_BYTES);
    put(fixed, OFF_MESSAGE, fitted.as_bytes());
    fitted.len() as u32
}

/// The message of `len` bytes (invalid UTF-8 is replaced, never an error).
pub fn decode_message(fixed: &[u8], len: u32) -> String {
    let end = OFF_MESSAGE + (len as usize).min(MESSAGE_BYTES);
    let end = end.min(fixed.len());
    let start = OFF_MESSAGE.min(end);
    String::from_utf8_lossy(&fixed[start..end]).into_owned()
}

/// What a chip child adds to a successful task reply, in the payload: the parts of its run
/// report that the report area does not hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChipReplyExtra {
    pub tasks: u64,
    pub aicpu_threads: u32,
    pub wall_ns: u64,
    /// Per ring: task window, heap and dep pool peaks.
    pub usage: [[u64; 3]; RING_COUNT],
    pub diagnostics: Vec<String>,
    /// The run's warnings (`ChipRunReport::warnings`), after the diagnostics paths.
    pub warnings: Vec<String>,
}

const EXTRA_MAGIC: [u8; 4] = *b"PTCR";

impl ChipReplyExtra {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.raw(&EXTRA_MAGIC);
        w.u16(VERSION);
        w.u64(self.tasks);
        w.u32(self.aicpu_threads);
        w.u64(self.wall_ns);
        for ring in &self.usage {
            for v in ring {
                w.u64(*v);
            }
        }
        // Warnings come first in the budget (a user must see them); paths that do not fit in
        // the payload are dropped (the report lists what fits).
        let warning_room = PAYLOAD_BYTES.saturating_sub(w.bytes.len() + 4) / 2;
        let warnings = fitting(&self.warnings, warning_room);
        let warning_bytes: usize = warnings.iter().map(|s| 2 + s.len()).sum();
        let room = PAYLOAD_BYTES.saturating_sub(w.bytes.len() + 4 + warning_bytes);
        let kept = fitting(&self.diagnostics, room);
        w.u16(kept.len() as u16);
        for p in kept {
            w.str16(p);
        }
        w.u16(warnings.len() as u16);
        for p in warnings {
            w.str16(p);
        }
        w.bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<ChipReplyExtra, FrameError> {
        let mut r = Reader::new("chip reply", bytes);
        let magic: [u8; 4] = super::get(r.take(4)?, 0);
        if magic != EXTRA_MAGIC {
            return Err(FrameError::BadMagic {
                what: "chip reply",
                found: magic,
            });
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(FrameError::UnsupportedVersion {
                what: "chip reply",
                found: version,
                expected: VERSION,
            });
        }
        let mut out = ChipReplyExtra {
            tasks: r.u64()?,
            aicpu_threads: r.u32()?,
            wall_ns: r.u64()?,
            ..ChipReplyExtra::default()
        };
        for ring in 0..RING_COUNT {
            for k in 0..3 {
                out.usage[ring][k] = r.u64()?;
            }
        }
        let n = r.u16()?;
        for _ in 0..n {
            out.diagnostics.push(r.str16("diagnostics path")?);
        }
        let n = r.u16()?;
        for _ in 0..n {
            out.warnings.push(r.str16("warning")?);
        }
        r.finish()?;
        Ok(out)
    }
}

/// The first strings of `items` whose encodings (a `u16` length each) fit in `room` bytes.
fn fitting(items: &[String], mut room: usize) -> Vec<&String> {
    items
        .iter()
        .take_while(|p| {
            let need = 2 + p.len();
            let fits = need <= room && p.len() <= usize::from(u16::MAX);
            room = room.saturating_sub(need);
            fits
        })
        .collect()
}

/// A control request's payload (bytes 1792–4095), by op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlRequest {
    /// Echoed back in the reply payload.
    Ping(Vec<u8>),
    Register {
        id: u32,
        kind: KindCode,
        name: String,
    },
    Unregister {
        id: u32,
    },
    Malloc {
        nbytes: u64,
        alignment: u64,
    },
    Free {
        alloc: u64,
    },
    /// Copies `nbytes` between a host tensor (a 112-byte wire tensor) and a device allocation.
    CopyTo {
        alloc: u64,
        device_offset: u64,
        nbytes: u64,
        host: Vec<u8>,
    },
    CopyFrom {
        alloc: u64,
        device_offset: u64,
        nbytes: u64,
        host: Vec<u8>,
    },
    CommittedDeviceMemory,
    Prewarm(RuntimeEnv),
    ResolveConfig(CallConfig),
    TrimArenas,
}

impl ControlRequest {
    pub fn op(&self) -> Op {
        match self {
            ControlRequest::Ping(_) => Op::Ping,
            ControlRequest::Register { .. } => Op::Register,
            ControlRequest::Unregister { .. } => Op::Unregister,
            ControlRequest::Malloc { .. } => Op::Malloc,
            ControlRequest::Free { .. } => Op::Free,
            ControlRequest::CopyTo { .. } => Op::CopyTo,
            ControlRequest::CopyFrom { .. } => Op::CopyFrom,
            ControlRequest::CommittedDeviceMemory => Op::CommittedDeviceMemory,
            ControlRequest::Prewarm(_) => Op::Prewarm,
            ControlRequest::ResolveConfig(_) => Op::ResolveConfig,
            ControlRequest::TrimArenas => Op::TrimArenas,
        }
    }

    /// The payload bytes (at most [`CONTROL_PAYLOAD_BYTES`]).
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let mut w = Writer::default();
        match self {
            ControlRequest::Ping(data) => w.raw(data),
            ControlRequest::Register { id, kind, name } => {
                w.u32(*id);
                w.u8(*kind as u8);
                w.u8(name.len().min(64) as u8);
                w.raw(&name.as_bytes()[..name.len().min(64)]);
            }
            ControlRequest::Unregister { id } => w.u32(*id),
            ControlRequest::Malloc { nbytes, alignment } => {
                w.u64(*nbytes);
                w.u64(*alignment);
            }
            ControlRequest::Free { alloc } => w.u64(*alloc),
            ControlRequest::CopyTo {
                alloc,
                device_offset,
                nbytes,
                host,
            }
            | ControlRequest::CopyFrom {
                alloc,
                device_offset,
                nbytes,
                host,
            } => {
                w.u64(*alloc);
                w.u64(*device_offset);
                w.u64(*nbytes);
                w.raw(host);
            }
            ControlRequest::CommittedDeviceMemory | ControlRequest::TrimArenas => {}
            ControlRequest::Prewarm(env) => {
                for r in Resource::ALL {
                    for v in env.get(r) {
                        w.u64(v);
                    }
                }
            }
            ControlRequest::ResolveConfig(cfg) => {
                let record =
                    call_config_record::encode_call_config(cfg).map_err(FrameError::Config)?;
                w.raw(&record);
            }
        }
        if w.bytes.len() > CONTROL_PAYLOAD_BYTES {
            return Err(FrameError::BadValue {
                field: "control payload bytes",
                value: w.bytes.len() as u64,
            });
        }
        Ok(w.bytes)
    }

    /// Decodes the payload of a request with `op` (exactly `bytes.len()` bytes).
    pub fn decode(op: Op, bytes: &[u8]) -> Result<ControlRequest, FrameError> {
        let mut r = Reader::new("control payload", bytes);
        let out = match op {
            Op::Task => {
                return Err(FrameError::BadValue {
                    field: "control op",
                    value: 1,
                });
            }
            Op::Ping => ControlRequest::Ping(r.take(bytes.len())?.to_vec()),
            Op::Register => {
                let id = r.u32()?;
                let kind_code = r.u8()?;
                let kind = KindCode::from_code(kind_code).ok_or(FrameError::BadValue {
                    field: "callable kind",
                    value: u64::from(kind_code),
                })?;
                let n = usize::from(r.u8()?);
                let name = name_from(r.take(n)?, "callable name")?;
                ControlRequest::Register { id, kind, name }
            }
            Op::Unregister => ControlRequest::Unregister { id: r.u32()? },
            Op::Malloc => ControlRequest::Malloc {
                nbytes: r.u64()?,
                alignment: r.u64()?,
            },
            Op::Free => ControlRequest::Free { alloc: r.u64()? },
            Op::CopyTo | Op::CopyFrom => {
                let alloc = r.u64()?;
                let device_offset = r.u64()?;
                let nbytes = r.u64()?;
                let host = r.take(super::args_blob::WIRE_TENSOR_BYTES)?.to_vec();
                super::args_blob::decode_tensor(&host, 0)?;
                if op == Op::CopyTo {
                    ControlRequest::CopyTo {
                        alloc,
                        device_offset,
                        nbytes,
                        host,
                    }
                } else {
                    ControlRequest::CopyFrom {
                        alloc,
                        device_offset,
                        nbytes,
                        host,
                    }
                }
            }
            Op::CommittedDeviceMemory => ControlRequest::CommittedDeviceMemory,
            Op::TrimArenas => ControlRequest::TrimArenas,
            Op::Prewarm => {
                let mut env = RuntimeEnv::default();
                for res in Resource::ALL {
                    let mut v = [0u64; RING_COUNT];
                    for x in &mut v {
                        *x = r.u64()?;
                    }
                    env.set(res, v);
                }
                ControlRequest::Prewarm(env)
            }
            Op::ResolveConfig => {
                let record = r.take(RECORD_LEN)?;
                ControlRequest::ResolveConfig(
                    call_config_record::decode_call_config(record).map_err(FrameError::Config)?,
                )
            }
        };
        r.finish()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring_config::env::EnvSnapshot;
    use crate::ring_config::resolve::{RingDefaults, resolve};

    #[test]
    fn layout_matches_node_runtime_4_5() {
        assert_eq!(u32::from_le_bytes(MAGIC), 0x4D4F_5450);
        let table: [(usize, usize); 20] = [
            (OFF_SHUTDOWN, 12),
            (OFF_SEQ, 16),
            (OFF_OP, 24),
            (OFF_FLAGS, 28),
            (OFF_RUN_ID, 32),
            (OFF_TASK_ID, 40),
            (OFF_GROUP_INDEX, 48),
            (OFF_ARGS_BYTES, 56),
            (OFF_STATE, 64),
            (OFF_CHILD_PARKED, 68),
            (OFF_REPLY_SEQ, 72),
            (OFF_ERROR_CODE, 80),
            (OFF_EXEC_NS, 104),
            (OFF_REPORT_SOURCES, 224),
            (OFF_REPORT_ARENA_BYTES, 240),
            (OFF_CALL_CONFIG, 256),
            (OFF_CALLABLE_ID, 1536),
            (OFF_NAME, 1544),
            (OFF_CONTROL_PAYLOAD, 1792),
            (OFF_PAYLOAD, 8192),
        ];
        for (got, want) in table {
            assert_eq!(got, want);
        }
        assert_eq!(PAYLOAD_BYTES, 57344);
        // The parent and child regions never overlap each other or the atomic words.
        let mut owner = vec![0u8; FIXED_BYTES];
        for (a, b) in PARENT_REGIONS {
            owner[a..b].iter_mut().for_each(|o| *o |= 1);
        }
        for (a, b) in CHILD_REGIONS {
            owner[a..b].iter_mut().for_each(|o| *o |= 2);
        }
        assert!(owner.iter().all(|&o| o != 3));
        for word in [
            OFF_SHUTDOWN,
            OFF_STATE,
            OFF_CHILD_PARKED,
            OFF_PROBE,
            OFF_PROBE_ACK,
        ] {
            assert!(owner[word..word + 4].iter().all(|&o| o == 0));
        }
    }

    fn header() -> RequestHeader {
        RequestHeader {
            seq: 41,
            op: Op::Task,
            flags: FLAG_GROUP_MEMBER,
            run_id: 3,
            task_id: (7 << 32) | 2,
            group_index: 1,
            group_size: 2,
            args_bytes: 128,
            control_bytes: 0,
        }
    }

    #[test]
    fn request_flags_are_the_known_bits() {
        let mut fixed = vec![0u8; FIXED_BYTES];
        for flags in [
            0,
            FLAG_SEGMENTS_SENT,
            FLAG_GROUP_MEMBER | FLAG_SEGMENTS_SENT,
        ] {
            let h = RequestHeader { flags, ..header() };
            encode_header(&h, &mut fixed);
            assert_eq!(decode_header(&fixed).unwrap().flags, flags);
        }
        encode_header(
            &RequestHeader {
                flags: 4,
                ..header()
            },
            &mut fixed,
        );
        let e = decode_header(&fixed).unwrap_err();
        assert!(
            matches!(
                e,
                FrameError::BadValue {
                    field: "flags",
                    value: 4
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn request_round_trip_with_every_config_field() {
        let mut fixed = vec![0u8; FIXED_BYTES];
        encode_header(&header(), &mut fixed);
        assert_eq!(
            &fixed[0..12],
            &[0x50, 0x54, 0x4f, 0x4d, 1, 0, 0, 0, 0, 0, 1, 0]
        );
        assert_eq!(decode_header(&fixed).unwrap(), header());
        let cfg = CallConfig {
            aicpu_thread_num: 2,
            enable_chip_swimlane: 3,
            enable_dep_gen: true,
            enable_scope_stats: true,
            output_prefix: Some("p".repeat(1023)),
            runtime_env: RuntimeEnv::default()
                .with_task_window([16, 32, 128, 256])
                .with_heap([10485760, 67108864, 1610612736, 4294967296])
                .with_dep_pool([64, 128, 256, 512]),
            track_war: true,
            war_check: crate::WarCheck::Strict,
        };
        encode_config(Some(&cfg), &mut fixed).unwrap();
        assert_eq!(&fixed[256..260], b"PCFG");
        assert_eq!(decode_config(&fixed).unwrap(), cfg);
        let c = CallableSection {
            id: 9,
            kind: KindCode::Chip,
            name: "vector_add".into(),
            label: Some("attn.0".into()),
        };
        encode_callable(&c, &mut fixed);
        assert_eq!(decode_callable(&fixed).unwrap(), c);
        // Sub tasks: zeros, not decoded.
        encode_config(None, &mut fixed).unwrap();
        assert!(fixed[256..1536].iter().all(|&b| b == 0));
    }

    #[test]
    fn version_2_and_bad_magic_are_refused() {
        let mut fixed = vec![0u8; FIXED_BYTES];
        encode_boot_header(300, &mut fixed);
        assert_eq!(decode_boot_header(&fixed), Ok(300));
        fixed[OFF_VERSION] = 2;
        let e = check_identity(&fixed).unwrap_err();
        assert!(
            e.to_string()
                .contains("protocol version 2 not supported (expected 1)"),
            "{e}"
        );
        encode_identity(&mut fixed);
        fixed[3] = b'X';
        assert!(matches!(
            check_identity(&fixed),
            Err(FrameError::BadMagic { .. })
        ));
    }

    #[test]
    fn reply_report_and_message_round_trip() {
        let mut fixed = vec![0u8; FIXED_BYTES];
        let r = ReplyHeader {
            reply_seq: 41,
            error_code: 1004,
            message_bytes: 0,
            child_pid: 4242,
            payload_bytes: 12,
            result: 77,
            exec_ns: 123456,
        };
        encode_reply(&r, &mut fixed);
        assert_eq!(decode_reply(&fixed).unwrap(), r);
        let env = EnvSnapshot {
            heap: Some([1 << 20; 4]),
            ..EnvSnapshot::default()
        };
        let call = RuntimeEnv::default().with_task_window([0, 64, 0, 0]);
        let sizing = resolve(&call, &env, &RingDefaults::BUILT_IN).unwrap();
        let area = ReportArea {
            arena_hit: true,
            evicted: 2,
            arena_bytes: 99,
            device_committed: 100,
            ..ReportArea::from_sizing(&sizing)
        };
        encode_report(&area, &mut fixed);
        let back = decode_report(&fixed).unwrap();
        assert_eq!(back, area);
        assert_eq!(back.sizing().unwrap(), sizing);
        // A long message keeps both ends.
        let long = format!("outer context {} root cause", "x".repeat(10_000));
        let n = encode_message(&long, &mut fixed);
        let text = decode_message(&fixed, n);
        assert!(text.len() <= MESSAGE_BYTES);
        assert!(text.starts_with("outer context") && text.ends_with("root cause"));
        assert!(text.contains(CUT));
    }

    #[test]
    fn control_payloads_round_trip() {
        let cfg = CallConfig::with_runtime_env(RuntimeEnv::default().with_heap(1 << 20));
        let t = crate::Tensor::contiguous(
            crate::BufferRef::detached(
                crate::BufferId {
                    owner_uid: 1,
                    buffer_id: 2,
                    generation: 0,
                },
                64,
            ),
            &[16],
            crate::DType::F32,
        )
        .unwrap();
        let mut host = vec![0u8; super::super::args_blob::WIRE_TENSOR_BYTES];
        super::super::args_blob::encode_tensor(
            crate::TensorTag::Input,
            &t,
            &super::super::args_blob::TensorLocation {
                space: super::super::args_blob::TensorSpace::Host,
                device_worker: None,
                segment: 2,
                segment_offset: 0,
            },
            &mut host,
        );
        for req in [
            ControlRequest::Ping(b"hello".to_vec()),
            ControlRequest::Register {
                id: 3,
                kind: KindCode::Sub,
                name: "sum_outputs".into(),
            },
            ControlRequest::Unregister { id: 3 },
            ControlRequest::Malloc {
                nbytes: 4096,
                alignment: 64,
            },
            ControlRequest::Free { alloc: 5 },
            ControlRequest::CopyTo {
                alloc: 5,
                device_offset: 0,
                nbytes: 64,
                host: host.clone(),
            },
            ControlRequest::CopyFrom {
                alloc: 5,
                device_offset: 0,
                nbytes: 64,
                host,
            },
            ControlRequest::CommittedDeviceMemory,
            ControlRequest::Prewarm(RuntimeEnv::default().with_task_window(64)),
            ControlRequest::ResolveConfig(cfg),
            ControlRequest::TrimArenas,
        ] {
            let bytes = req.encode().unwrap();
            assert_eq!(ControlRequest::decode(req.op(), &bytes).unwrap(), req);
        }
    }

    #[test]
    fn chip_reply_extra_round_trips() {
        let x = ChipReplyExtra {
            tasks: 3,
            aicpu_threads: 2,
            wall_ns: 99,
            usage: [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]],
            diagnostics: vec!["/tmp/a".into(), "/tmp/b".into()],
            warnings: vec!["write-after-read hazard: task 0:3 ...".into()],
        };
        assert_eq!(ChipReplyExtra::decode(&x.encode()).unwrap(), x);
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(500))]
            #[test]
            fn arbitrary_frames_never_panic(
                seed in proptest::collection::vec(any::<u8>(), FIXED_BYTES..=FIXED_BYTES),
                valid_identity in any::<bool>(),
                len in 0u32..5000,
            ) {
                let mut fixed = seed;
                if valid_identity {
                    encode_identity(&mut fixed);
                }
                let _ = decode_header(&fixed);
                let _ = decode_config(&fixed);
                let _ = decode_callable(&fixed);
                let _ = decode_reply(&fixed);
                if let Ok(area) = decode_report(&fixed) {
                    let _ = area.sizing();
                }
                let _ = decode_message(&fixed, len);
                for op in Op::ALL {
                    let _ = ControlRequest::decode(op, &fixed[OFF_CONTROL_PAYLOAD..OFF_CONTROL_PAYLOAD + (len as usize % 300)]);
                }
                let _ = ChipReplyExtra::decode(&fixed[..len as usize % 600]);
            }

            #[test]
            fn short_inputs_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
                let _ = decode_header(&bytes);
                let _ = decode_config(&bytes);
                let _ = decode_callable(&bytes);
                let _ = decode_reply(&bytes);
                let _ = decode_report(&bytes);
                let _ = decode_message(&bytes, 4096);
                let _ = check_identity(&bytes);
                let _ = decode_boot_header(&bytes);
            }

            #[test]
            fn messages_fit(s in ".{0,3000}", max in 4usize..200) {
                let out = fit_message(&s, max);
                prop_assert!(out.len() <= max.max(s.len().min(max)));
            }
        }
    }
}
