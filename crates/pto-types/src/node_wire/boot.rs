//! The boot block: what a child reads from its mailbox payload at start-up
//! (NODE_RUNTIME.md §4.6).
//!
//! Sequential little-endian fields after magic `PTOB` and the protocol version: role, index,
//! remaining start-up budget, spin windows, strict-env flag, the chip spec (chip children), the
//! callable table (registrations made before `init`; the child checks that each name exists in
//! its image), and for node children the child Worker's spec (an opaque record here, defined by
//! the node's L4 layer).

use super::mailbox::{KindCode, PAYLOAD_BYTES, VERSION};
use super::{FrameError, Reader, Writer, name_from};
use crate::{RING_COUNT, Resource, RuntimeEnv};

pub const MAGIC: [u8; 4] = *b"PTOB";

/// A chip's spec as plain numbers (`pto_chip::ChipSpec` field by field; `None` = unset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootChipSpec {
    pub clusters: u32,
    pub device_memory_bytes: u64,
    pub max_aicpu_threads: u32,
    pub tensormap_pool: Option<u32>,
    pub tensormap_buckets: u32,
    pub scheduler_timeout_ns: Option<u64>,
    pub tensor_wait_timeout_ns: Option<u64>,
    pub alloc_backstop_ns: u64,
    pub spin_ns: Option<u64>,
    pub arena_cache_entries: u32,
    pub strict_env: bool,
    pub prewarm: Option<RuntimeEnv>,
}

/// One registered callable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootCallable {
    pub id: u32,
    pub kind: KindCode,
    pub name: String,
}

/// Everything a child needs before INIT_READY.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootBlock {
    pub role: KindCode,
    /// The child's index among its kind (`chip_child[index]`).
    pub index: u32,
    /// What is left of the Worker's start-up deadline when the block was written.
    pub startup_budget_ms: u64,
    /// Spin windows in µs: scheduler, child, waiter (§3.4).
    pub spin_us: [u32; 3],
    pub strict_env: bool,
    pub chip: Option<BootChipSpec>,
    pub callables: Vec<BootCallable>,
    /// Node children: the child Worker's spec record.
    pub node: Option<Vec<u8>>,
}

fn opt_u64(w: &mut Writer, v: Option<u64>) {
    w.u64(v.unwrap_or(u64::MAX));
}

fn read_opt_u64(r: &mut Reader<'_>) -> Result<Option<u64>, FrameError> {
    Ok(match r.u64()? {
        u64::MAX => None,
        v => Some(v),
    })
}

/// Appends a chip spec (also used by the L4 worker spec).
pub(crate) fn encode_chip_spec(c: &BootChipSpec, w: &mut Writer) {
    w.u32(c.clusters);
    w.u64(c.device_memory_bytes);
    w.u32(c.max_aicpu_threads);
    w.u32(c.tensormap_pool.unwrap_or(u32::MAX));
    w.u32(c.tensormap_buckets);
    opt_u64(w, c.scheduler_timeout_ns);
    opt_u64(w, c.tensor_wait_timeout_ns);
    w.u64(c.alloc_backstop_ns);
    opt_u64(w, c.spin_ns);
    w.u32(c.arena_cache_entries);
    w.u8(u8::from(c.strict_env));
    match &c.prewarm {
        None => w.u8(0),
        Some(env) => {
            w.u8(1);
            for r in Resource::ALL {
                for v in env.get(r) {
                    w.u64(v);
                }
            }
        }
    }
}

/// Reads a chip spec written by [`encode_chip_spec`].
pub(crate) fn decode_chip_spec(r: &mut Reader<'_>) -> Result<BootChipSpec, FrameError> {
    Ok(BootChipSpec {
        clusters: r.u32()?,
        device_memory_bytes: r.u64()?,
        max_aicpu_threads: r.u32()?,
        tensormap_pool: match r.u32()? {
            u32::MAX => None,
            v => Some(v),
        },
        tensormap_buckets: r.u32()?,
        scheduler_timeout_ns: read_opt_u64(r)?,
        tensor_wait_timeout_ns: read_opt_u64(r)?,
        alloc_backstop_ns: r.u64()?,
        spin_ns: read_opt_u64(r)?,
        arena_cache_entries: r.u32()?,
        strict_env: r.bool("chip strict_env")?,
        prewarm: match r.bool("prewarm present")? {
            false => None,
            true => {
                let mut env = RuntimeEnv::default();
                for res in Resource::ALL {
                    let mut v = [0u64; RING_COUNT];
                    for x in &mut v {
                        *x = r.u64()?;
                    }
                    env.set(res, v);
                }
                Some(env)
            }
        },
    })
}

impl BootBlock {
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let mut w = Writer::default();
        w.raw(&MAGIC);
        w.u16(VERSION);
        w.u8(self.role as u8);
        w.u8(0);
        w.u32(self.index);
        w.u64(self.startup_budget_ms);
        for s in self.spin_us {
            w.u32(s);
        }
        w.u8(u8::from(self.strict_env));
        match &self.chip {
            None => w.u8(0),
            Some(c) => {
                w.u8(1);
                encode_chip_spec(c, &mut w);
            }
        }
        if self.callables.len() > usize::from(u16::MAX) {
            return Err(FrameError::BadValue {
                field: "callable count",
                value: self.callables.len() as u64,
            });
        }
        w.u16(self.callables.len() as u16);
        for c in &self.callables {
            w.u32(c.id);
            w.u8(c.kind as u8);
            let name = &c.name.as_bytes()[..c.name.len().min(64)];
            w.u8(name.len() as u8);
            w.raw(name);
        }
        match &self.node {
            None => w.u8(0),
            Some(spec) => {
                w.u8(1);
                w.u32(spec.len() as u32);
                w.raw(spec);
            }
        }
        if w.bytes.len() > PAYLOAD_BYTES {
            return Err(FrameError::BadValue {
                field: "boot block bytes",
                value: w.bytes.len() as u64,
            });
        }
        Ok(w.bytes)
    }

    pub fn decode(bytes: &[u8]) -> Result<BootBlock, FrameError> {
        let mut r = Reader::new("boot block", bytes);
        let magic: [u8; 4] = super::get(r.take(4)?, 0);
        if magic != MAGIC {
            return Err(FrameError::BadMagic {
                what: "boot block",
                found: magic,
            });
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(FrameError::UnsupportedVersion {
                what: "boot block",
                found: version,
                expected: VERSION,
            });
        }
        let kind = |code: u8| {
            KindCode::from_code(code).ok_or(FrameError::BadValue {
                field: "kind",
                value: u64::from(code),
            })
        };
        let role = kind(r.u8()?)?;
        if r.u8()? != 0 {
            return Err(FrameError::NonZeroReserved {
                what: "boot block",
                offset: 7,
            });
        }
        let index = r.u32()?;
        let startup_budget_ms = r.u64()?;
        let spin_us = [r.u32()?, r.u32()?, r.u32()?];
        let strict_env = r.bool("strict_env")?;
        let chip = match r.bool("chip spec present")? {
            false => None,
            true => Some(decode_chip_spec(&mut r)?),
        };
        let n = r.u16()?;
        let mut callables = Vec::with_capacity(usize::from(n).min(1024));
        for _ in 0..n {
            let id = r.u32()?;
            let k = kind(r.u8()?)?;
            let len = usize::from(r.u8()?);
            let name = name_from(r.take(len)?, "callable name")?;
            callables.push(BootCallable { id, kind: k, name });
        }
        let node = match r.bool("node spec present")? {
            false => None,
            true => {
                let len = r.u32()? as usize;
                Some(r.take(len)?.to_vec())
            }
        };
        r.finish()?;
        Ok(BootBlock {
            role,
            index,
            startup_budget_ms,
            spin_us,
            strict_env,
            chip,
            callables,
            node,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block() -> BootBlock {
        BootBlock {
            role: KindCode::Chip,
            index: 1,
            startup_budget_ms: 60_000,
            spin_us: [50, 50, 20],
            strict_env: true,
            chip: Some(BootChipSpec {
                clusters: 1,
                device_memory_bytes: 1 << 30,
                max_aicpu_threads: 2,
                tensormap_pool: None,
                tensormap_buckets: 4096,
                scheduler_timeout_ns: Some(10_000_000_000),
                tensor_wait_timeout_ns: None,
                alloc_backstop_ns: 500_000_000,
                spin_ns: None,
                arena_cache_entries: 4,
                strict_env: false,
                prewarm: Some(RuntimeEnv::default().with_task_window(64)),
            }),
            callables: vec![
                BootCallable {
                    id: 0,
                    kind: KindCode::Chip,
                    name: "vector_add".into(),
                },
                BootCallable {
                    id: 1,
                    kind: KindCode::Sub,
                    name: "sum_outputs".into(),
                },
            ],
            node: Some(vec![1, 2, 3]),
        }
    }

    #[test]
    fn round_trip() {
        let b = block();
        let bytes = b.encode().unwrap();
        assert_eq!(&bytes[..6], b"PTOB\x01\x00");
        assert_eq!(BootBlock::decode(&bytes).unwrap(), b);
        let sub = BootBlock {
            role: KindCode::Sub,
            chip: None,
            node: None,
            ..b
        };
        assert_eq!(BootBlock::decode(&sub.encode().unwrap()).unwrap(), sub);
    }

    #[test]
    fn version_2_is_refused() {
        let mut bytes = block().encode().unwrap();
        bytes[4] = 2;
        assert!(
            BootBlock::decode(&bytes)
                .unwrap_err()
                .to_string()
                .contains("protocol version 2 not supported (expected 1)")
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = BootBlock::decode(&bytes);
        }

        #[test]
        fn mutated_blocks_never_panic(at in 0usize..200, v in any::<u8>()) {
            let mut bytes = block().encode().unwrap();
            let n = bytes.len();
            bytes[at % n] = v;
            let _ = BootBlock::decode(&bytes);
        }
    }
}
