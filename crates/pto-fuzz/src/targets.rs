//! The fuzz targets: every decoder that reads bytes written by another process or sent over
//! the network, driven the way its real consumer drives it (a child reading a request frame
//! decodes the header, then the config, the callable and the args blob; the parent reading a
//! reply decodes the reply, the message, the report area and the payload), plus structured
//! seeds: valid records with random field values, encoded by the crate's own encoders.

use fastrand::Rng;
use pto_types::node_wire::args_blob::{
    TensorLocation, TensorSpace, decode_args, decode_tensor, encode_args,
};
use pto_types::node_wire::boot::{BootBlock, BootCallable, BootChipSpec};
use pto_types::node_wire::control_segment::{self, ControlHeader, SEGMENT_BYTES};
use pto_types::node_wire::mailbox::{
    self as frame, CallableSection, ChipReplyExtra, ControlRequest, FIXED_BYTES, FRAME_BYTES,
    KindCode, OFF_PAYLOAD, Op, ReplyHeader, ReportArea, RequestHeader,
};
use pto_types::node_wire::run_report::{WireFailure, WireMember, WireRunReport, WireTaskReport};
use pto_types::node_wire::segment_msg::SegmentMsg;
use pto_types::node_wire::worker_spec::WorkerSpec;
use pto_types::wire::call_config_record::{decode_call_config, encode_call_config};
use pto_types::{BufferId, BufferRef, CallConfig, DType, RuntimeEnv, TaskArgs, Tensor};

/// What one decode did: accepted, or rejected with its error's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Rejected(String),
}

impl Outcome {
    fn of<T, E: std::fmt::Display>(r: Result<T, E>) -> Outcome {
        match r {
            Ok(_) => Outcome::Accepted,
            Err(e) => Outcome::Rejected(e.to_string()),
        }
    }

    /// The first rejection of a chain of decodes, or acceptance.
    fn chain(steps: impl IntoIterator<Item = Outcome>) -> Outcome {
        steps
            .into_iter()
            .find(|o| matches!(o, Outcome::Rejected(_)))
            .unwrap_or(Outcome::Accepted)
    }
}

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    /// Who sends these bytes, for the report.
    pub from: &'static str,
    pub decode: fn(&[u8]) -> Outcome,
    /// A valid input with random field values.
    pub seed: fn(&mut Rng) -> Vec<u8>,
    /// Inputs longer than this are cut (the real reader never sees more).
    pub max_len: usize,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "request_frame",
        from: "a parent, read by a child (mailbox)",
        decode: request_frame,
        seed: seed_request_frame,
        max_len: FRAME_BYTES,
    },
    Target {
        name: "reply_frame",
        from: "a child, read by the parent (mailbox)",
        decode: reply_frame,
        seed: seed_reply_frame,
        max_len: FRAME_BYTES,
    },
    Target {
        name: "boot",
        from: "a parent, read by a starting child (control segment, boot frame)",
        decode: boot,
        seed: seed_boot,
        max_len: SEGMENT_BYTES + FRAME_BYTES,
    },
    Target {
        name: "worker_spec",
        from: "a parent, read by a node child",
        decode: |b| Outcome::of(WorkerSpec::decode(b)),
        seed: |r| worker_spec(r).encode(),
        max_len: FRAME_BYTES,
    },
    Target {
        name: "run_report",
        from: "a node child or a remote server, read by its client",
        decode: |b| Outcome::of(WireRunReport::decode(b)),
        seed: |r| run_report(r, 2).encode(),
        max_len: 1 << 20,
    },
    Target {
        name: "segment_msg",
        from: "a parent, read by a child (socket)",
        decode: |b| Outcome::of(SegmentMsg::decode(b)),
        seed: seed_segment_msg,
        max_len: 256,
    },
    Target {
        name: "call_config",
        from: "a remote client, read by `pto serve`",
        decode: |b| Outcome::of(decode_call_config(b)),
        seed: |r| encode_call_config(&call_config(r)).expect("valid").to_vec(),
        max_len: 4096,
    },
    Target {
        name: "args_blob",
        from: "a remote client (`pto serve`) or a parent (mailbox payload)",
        decode: args_blob,
        seed: seed_args_blob,
        max_len: FRAME_BYTES,
    },
    Target {
        name: "control_request",
        from: "a parent, read by a child (control op and payload)",
        decode: control_request,
        seed: seed_control_request,
        max_len: FRAME_BYTES,
    },
    Target {
        name: "chip_reply_extra",
        from: "a chip child, read by the parent (reply payload)",
        decode: |b| Outcome::of(ChipReplyExtra::decode(b)),
        seed: |r| chip_reply_extra(r).encode(),
        max_len: FRAME_BYTES,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// A frame as the reader copies it: the fixed part (zero-filled past the input) and the
/// payload after it.
fn split_frame(bytes: &[u8]) -> (Vec<u8>, &[u8]) {
    let mut fixed = vec![0u8; FIXED_BYTES];
    let n = bytes.len().min(FIXED_BYTES);
    fixed[..n].copy_from_slice(&bytes[..n]);
    let payload = bytes.get(FIXED_BYTES..).unwrap_or(&[]);
    (
        fixed,
        &payload[..payload.len().min(FRAME_BYTES - OFF_PAYLOAD)],
    )
}

/// The first `n` payload bytes, as `Mailbox::read_payload` clamps them.
fn take(payload: &[u8], n: u32) -> &[u8] {
    &payload[..(n as usize).min(payload.len())]
}

/// `Child::serve_task` / `serve_control`: header, then by op.
fn request_frame(bytes: &[u8]) -> Outcome {
    let (fixed, payload) = split_frame(bytes);
    let h = match frame::decode_header(&fixed) {
        Ok(h) => h,
        Err(e) => return Outcome::Rejected(e.to_string()),
    };
    if h.op == Op::Task {
        Outcome::chain([
            Outcome::of(frame::decode_config(&fixed)),
            Outcome::of(frame::decode_callable(&fixed)),
            Outcome::of(decode_args(take(payload, h.args_bytes))),
        ])
    } else {
        Outcome::of(ControlRequest::decode(h.op, take(payload, h.control_bytes)))
    }
}

/// The parent's reading of a reply: header, message, report area, payload.
fn reply_frame(bytes: &[u8]) -> Outcome {
    let (fixed, payload) = split_frame(bytes);
    let r = match frame::decode_reply(&fixed) {
        Ok(r) => r,
        Err(e) => return Outcome::Rejected(e.to_string()),
    };
    let _message = frame::decode_message(&fixed, r.message_bytes);
    let body = take(payload, r.payload_bytes);
    let report = Outcome::of(WireRunReport::decode(body));
    Outcome::chain([
        Outcome::of(frame::decode_report(&fixed)),
        Outcome::of(ChipReplyExtra::decode(body)).min_with(report),
    ])
}

impl Outcome {
    /// Either reading of an ambiguous payload (a chip's extra or a node's report) accepting it.
    fn min_with(self, other: Outcome) -> Outcome {
        if self == Outcome::Accepted {
            self
        } else {
            other
        }
    }
}

/// A child's start-up: the control segment's header, then the boot frame.
fn boot(bytes: &[u8]) -> Outcome {
    let ctl = &bytes[..bytes.len().min(SEGMENT_BYTES)];
    let (fixed, payload) = split_frame(bytes.get(SEGMENT_BYTES..).unwrap_or(&[]));
    let n = match frame::decode_boot_header(&fixed) {
        Ok(n) => n,
        Err(e) => return Outcome::Rejected(e.to_string()),
    };
    Outcome::chain([
        Outcome::of(control_segment::decode(ctl)),
        Outcome::of(BootBlock::decode(&payload[..n.min(payload.len())])),
    ])
}

fn args_blob(bytes: &[u8]) -> Outcome {
    let outcome = Outcome::of(decode_args(bytes));
    // A control request's host tensor is one wire tensor on its own.
    let _ = decode_tensor(bytes, 0);
    outcome
}

/// The ops of control requests: every op but `Task` (the first of `Op::ALL`).
fn control_ops() -> &'static [Op] {
    &Op::ALL[1..]
}

/// First byte: the op code; the rest: its payload.
fn control_request(bytes: &[u8]) -> Outcome {
    let Some((&code, payload)) = bytes.split_first() else {
        return Outcome::Rejected("empty".into());
    };
    let ops = control_ops();
    Outcome::of(ControlRequest::decode(
        ops[usize::from(code) % ops.len()],
        payload,
    ))
}

// Structured seeds.

fn name(r: &mut Rng) -> String {
    let n = r.usize(1..=20);
    (0..n).map(|_| r.alphanumeric()).collect()
}

fn runtime_env(r: &mut Rng) -> RuntimeEnv {
    let p = |r: &mut Rng, lo: u32, hi: u32| 1u64 << r.u32(lo..=hi);
    RuntimeEnv::default()
        .with_task_window(p(r, 2, 16))
        .with_heap(p(r, 12, 30))
        .with_dep_pool(p(r, 4, 16))
}

fn call_config(r: &mut Rng) -> CallConfig {
    if r.bool() {
        CallConfig::default()
    } else {
        CallConfig {
            track_war: r.bool(),
            war_check: pto_types::WarCheck::from_code(r.u8(..4)).expect("0..4"),
            ..CallConfig::with_runtime_env(runtime_env(r))
        }
    }
}

fn seed_request_frame(r: &mut Rng) -> Vec<u8> {
    let mut fixed = vec![0u8; FIXED_BYTES];
    let (op, payload) = if r.bool() {
        (Op::Task, args_blob_bytes(r))
    } else {
        let c = control(r);
        (c.op(), c.encode().expect("valid"))
    };
    frame::encode_header(
        &RequestHeader {
            seq: r.u64(1..1 << 40),
            op,
            flags: 0,
            run_id: r.u64(..),
            task_id: r.u64(..),
            group_index: 0,
            group_size: 1,
            args_bytes: if op == Op::Task {
                payload.len() as u32
            } else {
                0
            },
            control_bytes: if op == Op::Task {
                0
            } else {
                payload.len() as u32
            },
        },
        &mut fixed,
    );
    if op == Op::Task {
        frame::encode_config(Some(&call_config(r)), &mut fixed).expect("valid");
        frame::encode_callable(
            &CallableSection {
                id: r.u32(..1000),
                kind: KindCode::Chip,
                name: name(r),
                label: r.bool().then(|| name(r)),
            },
            &mut fixed,
        );
    }
    fixed.extend_from_slice(&payload);
    fixed
}

fn seed_reply_frame(r: &mut Rng) -> Vec<u8> {
    let mut fixed = vec![0u8; FIXED_BYTES];
    let message = if r.bool() { name(r) } else { String::new() };
    let message_bytes = frame::encode_message(&message, &mut fixed);
    let payload = if r.bool() {
        chip_reply_extra(r).encode()
    } else {
        run_report(r, 1).encode()
    };
    frame::encode_reply(
        &ReplyHeader {
            reply_seq: r.u64(1..1 << 40),
            error_code: if r.bool() { 0 } else { r.i32(1..200) },
            message_bytes,
            child_pid: r.u32(..),
            payload_bytes: payload.len() as u32,
            result: r.u64(..),
            exec_ns: r.u64(..1 << 40),
        },
        &mut fixed,
    );
    let mut area = ReportArea {
        valid: true,
        arena_hit: r.bool(),
        evicted: r.u16(..8),
        arena_bytes: r.u64(..1 << 34),
        device_committed: r.u64(..1 << 34),
        ..ReportArea::default()
    };
    for row in &mut area.values {
        for v in row.iter_mut() {
            *v = 1 << r.u32(2..20);
        }
    }
    frame::encode_report(&area, &mut fixed);
    fixed.extend_from_slice(&payload);
    fixed
}

fn seed_boot(r: &mut Rng) -> Vec<u8> {
    let mut bytes = vec![0u8; SEGMENT_BYTES];
    control_segment::encode(
        &ControlHeader {
            parent_pid: r.u32(1..1 << 22),
            worker_uid: r.u64(..),
            heap_ring_size: 1 << r.u32(12..30),
        },
        &mut bytes,
    );
    let chip = r.bool().then(|| BootChipSpec {
        clusters: r.u32(1..=64),
        device_memory_bytes: 1 << r.u32(20..36),
        max_aicpu_threads: r.u32(2..8),
        tensormap_pool: r.bool().then(|| r.u32(1..1 << 20)),
        tensormap_buckets: 1 << r.u32(1..16),
        scheduler_timeout_ns: r.bool().then(|| r.u64(1..1 << 40)),
        tensor_wait_timeout_ns: None,
        alloc_backstop_ns: r.u64(1..1 << 34),
        spin_ns: r.bool().then(|| r.u64(..100_000)),
        arena_cache_entries: r.u32(..16),
        strict_env: r.bool(),
        prewarm: r.bool().then(|| runtime_env(r)),
    });
    let block = BootBlock {
        role: if chip.is_some() {
            KindCode::Chip
        } else {
            KindCode::Sub
        },
        index: r.u32(..64),
        startup_budget_ms: r.u64(..100_000),
        spin_us: [r.u32(..100), r.u32(..100), r.u32(..100)],
        strict_env: r.bool(),
        chip,
        callables: (0..r.usize(..4))
            .map(|i| BootCallable {
                id: i as u32,
                kind: KindCode::Chip,
                name: name(r),
            })
            .collect(),
        node: None,
    };
    let boot = block.encode().expect("valid");
    let mut fixed = vec![0u8; FIXED_BYTES];
    frame::encode_boot_header(boot.len() as u32, &mut fixed);
    bytes.extend_from_slice(&fixed);
    bytes.extend_from_slice(&boot);
    bytes
}

fn worker_spec(r: &mut Rng) -> WorkerSpec {
    WorkerSpec {
        level: 3,
        chips: Vec::new(),
        sub_workers: r.u32(..8),
        heap_ring_size: 1 << r.u32(12..30),
        max_queued_runs: r.u32(1..64),
        timeouts_ms: std::array::from_fn(|_| r.u64(1..100_000)),
        spin_us: [r.u32(..100), r.u32(..100), r.u32(..100)],
        ring_env: (0..r.usize(..3))
            .map(|_| (b"PTO2_RING_HEAP".to_vec(), b"1048576".to_vec()))
            .collect(),
        strict_env: r.bool(),
        track_war: r.bool(),
        callables: (0..r.usize(..4))
            .map(|_| (KindCode::Sub, name(r)))
            .collect(),
    }
}

fn run_report(r: &mut Rng, depth: u32) -> WireRunReport {
    let tasks = (0..r.usize(..4))
        .map(|i| WireTaskReport {
            index: i as u32,
            label: r.bool().then(|| name(r)),
            kind: r.u8(1..=3),
            callable: name(r),
            failure: r.bool().then(|| WireFailure {
                kind: r.u8(..3),
                code: r.u32(..200),
                worker: name(r),
                message: name(r),
            }),
            producers: (0..i as u32).collect(),
            members: (0..r.usize(..3))
                .map(|_| WireMember {
                    worker: name(r),
                    exec_ns: r.u64(..1 << 40),
                    chip: None,
                    inner: (depth > 1 && r.bool()).then(|| Box::new(run_report(r, depth - 1))),
                })
                .collect(),
            times_ns: std::array::from_fn(|_| r.bool().then(|| r.u64(..1 << 40))),
        })
        .collect();
    WireRunReport {
        run_id: r.u64(..),
        wall_ns: r.u64(..1 << 40),
        truncated: r.bool(),
        tasks,
    }
}

fn seed_segment_msg(r: &mut Rng) -> Vec<u8> {
    SegmentMsg {
        add: r.bool(),
        owner: r.u64(..),
        segment: r.u64(..),
        generation: 0,
        nbytes: r.u64(..1 << 40),
    }
    .encode()
    .to_vec()
}

fn args_blob_bytes(r: &mut Rng) -> Vec<u8> {
    let mut args = TaskArgs::new();
    let dtypes = [DType::F32, DType::F16, DType::I32, DType::U8, DType::I64];
    for i in 0..r.usize(..4) {
        let shape: Vec<u32> = (0..r.usize(1..=3)).map(|_| r.u32(1..64)).collect();
        let dtype = dtypes[r.usize(..dtypes.len())];
        let bytes = shape.iter().map(|&d| u64::from(d)).product::<u64>() * 8;
        let id = BufferId {
            owner_uid: r.u64(..),
            buffer_id: i as u64,
            generation: 0,
        };
        let t = Tensor::contiguous(BufferRef::detached(id, bytes), &shape, dtype).expect("fits");
        args = match r.u8(..3) {
            0 => args.input(&t),
            1 => args.output_existing(&t),
            _ => args.inout(&t),
        };
    }
    for _ in 0..r.usize(..4) {
        args = args.scalar(r.u64(..));
    }
    let space = if r.bool() {
        TensorSpace::Host
    } else {
        TensorSpace::Device
    };
    encode_args(&args, |i, _| TensorLocation {
        space,
        device_worker: (space == TensorSpace::Device).then_some(0),
        segment: i as u64 + 1,
        segment_offset: 64 * i as u64,
    })
}

fn seed_args_blob(r: &mut Rng) -> Vec<u8> {
    args_blob_bytes(r)
}

fn control(r: &mut Rng) -> ControlRequest {
    match r.u8(..8) {
        0 => ControlRequest::Ping((0..r.usize(..32)).map(|_| r.u8(..)).collect()),
        1 => ControlRequest::Register {
            id: r.u32(..100),
            kind: KindCode::Chip,
            name: name(r),
        },
        2 => ControlRequest::Unregister { id: r.u32(..100) },
        3 => ControlRequest::Malloc {
            nbytes: r.u64(..1 << 40),
            alignment: 1 << r.u32(..12),
        },
        4 => ControlRequest::Free { alloc: r.u64(..) },
        5 => ControlRequest::Prewarm(runtime_env(r)),
        6 => ControlRequest::ResolveConfig(call_config(r)),
        _ => ControlRequest::TrimArenas,
    }
}

fn seed_control_request(r: &mut Rng) -> Vec<u8> {
    let c = control(r);
    let ops = control_ops();
    let code = ops.iter().position(|&o| o == c.op()).expect("listed") as u8;
    let mut out = vec![code];
    out.extend(c.encode().expect("valid"));
    out
}

fn chip_reply_extra(r: &mut Rng) -> ChipReplyExtra {
    ChipReplyExtra {
        tasks: r.u64(..1 << 30),
        aicpu_threads: r.u32(1..8),
        wall_ns: r.u64(..1 << 40),
        usage: std::array::from_fn(|_| std::array::from_fn(|_| r.u64(..1 << 30))),
        diagnostics: (0..r.usize(..3)).map(|_| name(r)).collect(),
        warnings: (0..r.usize(..2)).map(|_| name(r)).collect(),
    }
}
