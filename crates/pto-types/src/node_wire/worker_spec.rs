//! The spec of an L3 Worker child of an L4 Worker, carried in the node child's boot block
//! (NODE_RUNTIME.md §6.1): the builder options and the named registrations (closures cannot
//! cross the process boundary), so the child process builds the same Worker and runs `init`.

use super::boot::{BootChipSpec, decode_chip_spec, encode_chip_spec};
use super::mailbox::{KindCode, VERSION};
use super::{FrameError, Reader, Writer, name_from};

const MAGIC: [u8; 4] = *b"PTOW";

/// Builder options and registrations of a child Worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSpec {
    pub level: u32,
    /// One entry per chip.
    pub chips: Vec<BootChipSpec>,
    pub sub_workers: u32,
    pub heap_ring_size: u64,
    pub max_queued_runs: u32,
    /// Start-up, control, heap-alloc, close timeouts and shutdown grace, in milliseconds.
    pub timeouts_ms: [u64; 5],
    /// Spin windows in µs: scheduler, lane, waiter.
    pub spin_us: [u32; 3],
    /// `ring_env` pairs as raw bytes (Unix `OsString`s).
    pub ring_env: Vec<(Vec<u8>, Vec<u8>)>,
    pub strict_env: bool,
    pub track_war: bool,
    /// Registrations in id order.
    pub callables: Vec<(KindCode, String)>,
}

impl WorkerSpec {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.raw(&MAGIC);
        w.u16(VERSION);
        w.u32(self.level);
        w.u16(self.chips.len() as u16);
        for c in &self.chips {
            encode_chip_spec(c, &mut w);
        }
        w.u32(self.sub_workers);
        w.u64(self.heap_ring_size);
        w.u32(self.max_queued_runs);
        for t in self.timeouts_ms {
            w.u64(t);
        }
        for s in self.spin_us {
            w.u32(s);
        }
        w.u16(self.ring_env.len() as u16);
        for (k, v) in &self.ring_env {
            w.u32(k.len() as u32);
            w.raw(k);
            w.u32(v.len() as u32);
            w.raw(v);
        }
        w.u8(u8::from(self.strict_env));
        w.u8(u8::from(self.track_war));
        w.u16(self.callables.len() as u16);
        for (kind, name) in &self.callables {
            w.u8(*kind as u8);
            let name = &name.as_bytes()[..name.len().min(64)];
            w.u8(name.len() as u8);
            w.raw(name);
        }
        w.bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<WorkerSpec, FrameError> {
        let mut r = Reader::new("worker spec", bytes);
        let magic: [u8; 4] = super::get(r.take(4)?, 0);
        if magic != MAGIC {
            return Err(FrameError::BadMagic {
                what: "worker spec",
                found: magic,
            });
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(FrameError::UnsupportedVersion {
                what: "worker spec",
                found: version,
                expected: VERSION,
            });
        }
        let level = r.u32()?;
        let n = r.u16()?;
        let mut chips = Vec::with_capacity(usize::from(n).min(256));
        for _ in 0..n {
            chips.push(decode_chip_spec(&mut r)?);
        }
        let sub_workers = r.u32()?;
        let heap_ring_size = r.u64()?;
        let max_queued_runs = r.u32()?;
        let timeouts_ms = [r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?];
        let spin_us = [r.u32()?, r.u32()?, r.u32()?];
        let n = r.u16()?;
        let mut ring_env = Vec::with_capacity(usize::from(n).min(256));
        for _ in 0..n {
            let k = r.u32()? as usize;
            let k = r.take(k)?.to_vec();
            let v = r.u32()? as usize;
            let v = r.take(v)?.to_vec();
            ring_env.push((k, v));
        }
        let strict_env = r.bool("strict_env")?;
        let track_war = r.bool("track_war")?;
        let n = r.u16()?;
        let mut callables = Vec::with_capacity(usize::from(n).min(1024));
        for _ in 0..n {
            let code = r.u8()?;
            let kind = KindCode::from_code(code).ok_or(FrameError::BadValue {
                field: "callable kind",
                value: u64::from(code),
            })?;
            let len = usize::from(r.u8()?);
            callables.push((kind, name_from(r.take(len)?, "callable name")?));
        }
        r.finish()?;
        Ok(WorkerSpec {
            level,
            chips,
            sub_workers,
            heap_ring_size,
            max_queued_runs,
            timeouts_ms,
            spin_us,
            ring_env,
            strict_env,
            track_war,
            callables,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec() -> WorkerSpec {
        WorkerSpec {
            level: 3,
            chips: vec![
                BootChipSpec {
                    clusters: 1,
                    device_memory_bytes: 1 << 30,
                    max_aicpu_threads: 2,
                    tensormap_pool: Some(1024),
                    tensormap_buckets: 64,
                    scheduler_timeout_ns: None,
                    tensor_wait_timeout_ns: Some(5),
                    alloc_backstop_ns: 7,
                    spin_ns: None,
                    arena_cache_entries: 4,
                    strict_env: false,
                    prewarm: None,
                };
                2
            ],
            sub_workers: 1,
            heap_ring_size: 1 << 20,
            max_queued_runs: 4,
            timeouts_ms: [60_000, 30_000, 10_000, 30_000, 5_000],
            spin_us: [50, 50, 20],
            ring_env: vec![(b"PTO2_RING_HEAP".to_vec(), b"1048576".to_vec())],
            strict_env: true,
            track_war: false,
            callables: vec![
                (KindCode::Chip, "vector_add".into()),
                (KindCode::Sub, "sum_outputs".into()),
            ],
        }
    }

    #[test]
    fn round_trip() {
        let s = spec();
        assert_eq!(WorkerSpec::decode(&s.encode()).unwrap(), s);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = WorkerSpec::decode(&bytes);
        }

        #[test]
        fn mutated_specs_never_panic(at in 0usize..400, v in any::<u8>()) {
            let mut bytes = spec().encode();
            let n = bytes.len();
            bytes[at % n] = v;
            let _ = WorkerSpec::decode(&bytes);
        }
    }
}
