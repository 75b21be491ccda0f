//! An inner run's report in a node child's reply payload (NODE_RUNTIME.md §6.1), so an L4
//! caller can check every chip task's sizing with provenance. Plain data mirroring the node's
//! `RunReport` (the node converts); chip reports travel as the report area plus the chip reply
//! extension of [`super::mailbox`]. A report that does not fit the payload keeps its first
//! tasks and is flagged `truncated`.

use super::mailbox::{ChipReplyExtra, PAYLOAD_BYTES, ReportArea, VERSION};
use super::{FrameError, Reader, Writer};
use crate::RING_COUNT;

const MAGIC: [u8; 4] = *b"PTOR";
/// `u64::MAX` stands for "no time".
const NONE: u64 = u64::MAX;

/// A chip's report of one member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireChipReport {
    pub chip: u32,
    pub label: Option<String>,
    pub area: ReportArea,
    pub extra: ChipReplyExtra,
    pub env_problems: Vec<String>,
}

/// One member's execution.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireMember {
    pub worker: String,
    pub exec_ns: u64,
    pub chip: Option<WireChipReport>,
    pub inner: Option<Box<WireRunReport>>,
}

/// How a task failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireFailure {
    /// 0 task, 1 bind, 2 endpoint, 3 skipped, 4 orchestration, 5 cancelled (pto-node's
    /// `FailureKind`; an unknown value reads back as task).
    pub kind: u8,
    /// 0: no code.
    pub code: u32,
    pub worker: String,
    pub message: String,
}

/// One task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireTaskReport {
    pub index: u32,
    pub label: Option<String>,
    /// 0 next level, 1 sub.
    pub kind: u8,
    pub callable: String,
    pub failure: Option<WireFailure>,
    pub producers: Vec<u32>,
    pub members: Vec<WireMember>,
    /// Offsets from the run's start in ns: submitted, ready, dispatched, finished.
    pub times_ns: [Option<u64>; 4],
}

/// A run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireRunReport {
    pub run_id: u64,
    pub wall_ns: u64,
    pub truncated: bool,
    pub tasks: Vec<WireTaskReport>,
}

fn opt_str(w: &mut Writer, s: &Option<String>) {
    match s {
        None => w.u8(0),
        Some(s) => {
            w.u8(1);
            w.str16(s);
        }
    }
}

fn read_opt_str(r: &mut Reader<'_>, field: &'static str) -> Result<Option<String>, FrameError> {
    Ok(match r.bool(field)? {
        false => None,
        true => Some(r.str16(field)?),
    })
}

fn encode_area(a: &ReportArea, w: &mut Writer) {
    for k in 0..3 {
        for ring in 0..RING_COUNT {
            w.u64(a.values[k][ring]);
            w.u8(a.sources[k][ring]);
        }
    }
    w.u8(u8::from(a.arena_hit));
    w.u8(u8::from(a.valid));
    w.u16(a.evicted);
    w.u64(a.arena_bytes);
    w.u64(a.device_committed);
}

fn decode_area(r: &mut Reader<'_>) -> Result<ReportArea, FrameError> {
    let mut a = ReportArea::default();
    for k in 0..3 {
        for ring in 0..RING_COUNT {
            a.values[k][ring] = r.u64()?;
            a.sources[k][ring] = r.u8()?;
        }
    }
    a.arena_hit = r.bool("arena hit")?;
    a.valid = r.bool("report valid")?;
    a.evicted = r.u16()?;
    a.arena_bytes = r.u64()?;
    a.device_committed = r.u64()?;
    Ok(a)
}

fn encode_run(run: &WireRunReport, w: &mut Writer, depth: u32) {
    w.u64(run.run_id);
    w.u64(run.wall_ns);
    w.u8(u8::from(run.truncated));
    w.u32(run.tasks.len() as u32);
    for t in &run.tasks {
        w.u32(t.index);
        opt_str(w, &t.label);
        w.u8(t.kind);
        w.str16(&t.callable);
        match &t.failure {
            None => w.u8(0),
            Some(f) => {
                w.u8(1);
                w.u8(f.kind);
                w.u32(f.code);
                w.str16(&f.worker);
                w.str16(&f.message);
            }
        }
        w.u32(t.producers.len() as u32);
        for p in &t.producers {
            w.u32(*p);
        }
        for time in t.times_ns {
            w.u64(time.unwrap_or(NONE));
        }
        w.u32(t.members.len() as u32);
        for m in &t.members {
            w.str16(&m.worker);
            w.u64(m.exec_ns);
            match &m.chip {
                None => w.u8(0),
                Some(c) => {
                    w.u8(1);
                    w.u32(c.chip);
                    opt_str(w, &c.label);
                    encode_area(&c.area, w);
                    let extra = c.extra.encode();
                    w.u32(extra.len() as u32);
                    w.raw(&extra);
                    w.u16(c.env_problems.len() as u16);
                    for p in &c.env_problems {
                        w.str16(p);
                    }
                }
            }
            match &m.inner {
                // Nesting is bounded: deeper reports are dropped.
                Some(inner) if depth < 8 => {
                    w.u8(1);
                    encode_run(inner, w, depth + 1);
                }
                _ => w.u8(0),
            }
        }
    }
}

fn decode_run(r: &mut Reader<'_>, depth: u32) -> Result<WireRunReport, FrameError> {
    let mut run = WireRunReport {
        run_id: r.u64()?,
        wall_ns: r.u64()?,
        truncated: r.bool("truncated")?,
        tasks: Vec::new(),
    };
    let n = r.u32()?;
    for _ in 0..n {
        let mut t = WireTaskReport {
            index: r.u32()?,
            label: read_opt_str(r, "label")?,
            kind: r.u8()?,
            callable: r.str16("callable")?,
            ..WireTaskReport::default()
        };
        if r.bool("failure present")? {
            t.failure = Some(WireFailure {
                kind: r.u8()?,
                code: r.u32()?,
                worker: r.str16("worker")?,
                message: r.str16("message")?,
            });
        }
        let np = r.u32()?;
        for _ in 0..np {
            t.producers.push(r.u32()?);
        }
        for time in &mut t.times_ns {
            *time = match r.u64()? {
                NONE => None,
                v => Some(v),
            };
        }
        let nm = r.u32()?;
        for _ in 0..nm {
            let mut m = WireMember {
                worker: r.str16("worker")?,
                exec_ns: r.u64()?,
                ..WireMember::default()
            };
            if r.bool("chip report present")? {
                let chip = r.u32()?;
                let label = read_opt_str(r, "chip label")?;
                let area = decode_area(r)?;
                let len = r.u32()? as usize;
                let extra = ChipReplyExtra::decode(r.take(len)?)?;
                let ne = r.u16()?;
                let mut env_problems = Vec::new();
                for _ in 0..ne {
                    env_problems.push(r.str16("env problem")?);
                }
                m.chip = Some(WireChipReport {
                    chip,
                    label,
                    area,
                    extra,
                    env_problems,
                });
            }
            if r.bool("inner report present")? {
                if depth >= 8 {
                    return Err(FrameError::BadValue {
                        field: "report nesting",
                        value: u64::from(depth),
                    });
                }
                m.inner = Some(Box::new(decode_run(r, depth + 1)?));
            }
            t.members.push(m);
        }
        run.tasks.push(t);
    }
    Ok(run)
}

impl WireRunReport {
    /// Encodes the report; if it exceeds the reply payload, drops tasks from the end until it
    /// fits and sets `truncated`.
    pub fn encode(&self) -> Vec<u8> {
        let mut run = self.clone();
        loop {
            let mut w = Writer::default();
            w.raw(&MAGIC);
            w.u16(VERSION);
            encode_run(&run, &mut w, 0);
            if w.bytes.len() <= PAYLOAD_BYTES || run.tasks.is_empty() {
                return w.bytes;
            }
            let keep = run.tasks.len() / 2;
            run.tasks.truncate(keep);
            run.truncated = true;
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<WireRunReport, FrameError> {
        let mut r = Reader::new("run report", bytes);
        let magic: [u8; 4] = super::get(r.take(4)?, 0);
        if magic != MAGIC {
            return Err(FrameError::BadMagic {
                what: "run report",
                found: magic,
            });
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(FrameError::UnsupportedVersion {
                what: "run report",
                found: version,
                expected: VERSION,
            });
        }
        let run = decode_run(&mut r, 0)?;
        r.finish()?;
        Ok(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn report() -> WireRunReport {
        let chip = WireChipReport {
            chip: 1,
            label: Some("add".into()),
            area: ReportArea {
                values: [[16; 4], [1 << 20; 4], [64; 4]],
                sources: [[2; 4], [1; 4], [0; 4]],
                valid: true,
                ..ReportArea::default()
            },
            extra: ChipReplyExtra {
                tasks: 1,
                ..ChipReplyExtra::default()
            },
            env_problems: vec!["X=1 ignored".into()],
        };
        let inner = WireRunReport {
            run_id: 1,
            wall_ns: 5,
            truncated: false,
            tasks: vec![WireTaskReport {
                index: 0,
                label: Some("add".into()),
                kind: 0,
                callable: "vector_add".into(),
                failure: None,
                producers: vec![],
                members: vec![WireMember {
                    worker: "chip_child[1] pid=7".into(),
                    exec_ns: 3,
                    chip: Some(chip),
                    inner: None,
                }],
                times_ns: [Some(0), Some(1), None, Some(3)],
            }],
        };
        WireRunReport {
            run_id: 9,
            wall_ns: 10,
            truncated: false,
            tasks: vec![WireTaskReport {
                index: 0,
                label: None,
                kind: 0,
                callable: "l3_pipeline".into(),
                failure: Some(WireFailure {
                    kind: 0,
                    code: 1008,
                    worker: "node_child[0] pid=3".into(),
                    message: "run 1: …".into(),
                }),
                producers: vec![2, 3],
                members: vec![WireMember {
                    worker: "node_child[0] pid=3".into(),
                    exec_ns: 4,
                    chip: None,
                    inner: Some(Box::new(inner)),
                }],
                times_ns: [Some(0); 4],
            }],
        }
    }

    #[test]
    fn nested_round_trip() {
        let r = report();
        assert_eq!(WireRunReport::decode(&r.encode()).unwrap(), r);
    }

    #[test]
    fn oversized_reports_are_truncated() {
        let mut r = report();
        let t = r.tasks[0].clone();
        r.tasks = vec![t; 2000];
        let bytes = r.encode();
        assert!(bytes.len() <= PAYLOAD_BYTES);
        let back = WireRunReport::decode(&bytes).unwrap();
        assert!(back.truncated);
        assert!(!back.tasks.is_empty() && back.tasks.len() < 2000);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = WireRunReport::decode(&bytes);
        }

        #[test]
        fn mutated_reports_never_panic(at in 0usize..2000, v in any::<u8>()) {
            let mut bytes = report().encode();
            let n = bytes.len();
            bytes[at % n] = v;
            let _ = WireRunReport::decode(&bytes);
        }
    }
}
