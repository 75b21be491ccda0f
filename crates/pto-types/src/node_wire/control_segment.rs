//! The node control segment (fd 4, 4 KiB; NODE_RUNTIME.md §4.4).
//!
//! Written once by the parent before any child starts ([`encode`]), read by each child at
//! start-up ([`decode`]). Three words are atomics, never touched by these codecs:
//! [`OFF_SHUTDOWN_ALL`] (sticky 0 → 1), [`OFF_DOORBELL`] (on its own cache line: a counter every
//! waker bumps, the scheduler's futex word) and [`OFF_SCHED_PARKED`].

use super::mailbox::VERSION;
use super::{FrameError, get_u16, get_u32, get_u64, need, put, zero};

/// Magic `PTOC` (the `u32` 0x434F5450).
pub const MAGIC: [u8; 4] = *b"PTOC";
/// Size of the segment.
pub const SEGMENT_BYTES: usize = 4096;

pub const OFF_MAGIC: usize = 0;
pub const OFF_VERSION: usize = 4;
pub const OFF_PARENT_PID: usize = 8;
pub const OFF_WORKER_UID: usize = 16;
pub const OFF_HEAP_RING_SIZE: usize = 24;
/// Atomic `u32`, parent-only, sticky 0 → 1: every child should exit.
pub const OFF_SHUTDOWN_ALL: usize = 36;
/// Atomic `u32`: the scheduler's doorbell (§3.4).
pub const OFF_DOORBELL: usize = 64;
/// Atomic `u32`: 1 while the scheduler is (about to be) parked on the doorbell.
pub const OFF_SCHED_PARKED: usize = 68;
/// Bytes [0, HEADER_BYTES) hold the plain fields.
pub const HEADER_BYTES: usize = OFF_SHUTDOWN_ALL;

/// The plain fields of the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlHeader {
    pub parent_pid: u32,
    pub worker_uid: u64,
    /// Bytes per heap ring; the 4 rings follow each other in the heap segment (fd 6).
    pub heap_ring_size: u64,
}

/// Writes the header into `bytes[..HEADER_BYTES]`.
pub fn encode(h: &ControlHeader, bytes: &mut [u8]) {
    bytes[..HEADER_BYTES].fill(0);
    put(bytes, OFF_MAGIC, &MAGIC);
    put(bytes, OFF_VERSION, &VERSION.to_le_bytes());
    put(bytes, OFF_PARENT_PID, &h.parent_pid.to_le_bytes());
    put(bytes, OFF_WORKER_UID, &h.worker_uid.to_le_bytes());
    put(bytes, OFF_HEAP_RING_SIZE, &h.heap_ring_size.to_le_bytes());
}

/// Decodes and checks the header.
pub fn decode(bytes: &[u8]) -> Result<ControlHeader, FrameError> {
    need("control segment", bytes, HEADER_BYTES)?;
    let magic: [u8; 4] = super::get(bytes, OFF_MAGIC);
    if magic != MAGIC {
        return Err(FrameError::BadMagic {
            what: "control segment",
            found: magic,
        });
    }
    let version = get_u16(bytes, OFF_VERSION);
    if version != VERSION {
        return Err(FrameError::UnsupportedVersion {
            what: "control segment",
            found: version,
            expected: VERSION,
        });
    }
    zero("control segment", bytes, 6, OFF_PARENT_PID)?;
    zero("control segment", bytes, 12, OFF_WORKER_UID)?;
    zero("control segment", bytes, 32, HEADER_BYTES)?;
    Ok(ControlHeader {
        parent_pid: get_u32(bytes, OFF_PARENT_PID),
        worker_uid: get_u64(bytes, OFF_WORKER_UID),
        heap_ring_size: get_u64(bytes, OFF_HEAP_RING_SIZE),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_layout() {
        let h = ControlHeader {
            parent_pid: 4242,
            worker_uid: 0x1092_0000_0003,
            heap_ring_size: 1 << 20,
        };
        let mut bytes = [0u8; SEGMENT_BYTES];
        encode(&h, &mut bytes);
        assert_eq!(u32::from_le_bytes(MAGIC), 0x434F_5450);
        assert_eq!(&bytes[0..6], &[0x50, 0x54, 0x4f, 0x43, 1, 0]);
        assert_eq!(decode(&bytes).unwrap(), h);
        assert_eq!(
            (OFF_SHUTDOWN_ALL, OFF_DOORBELL, OFF_SCHED_PARKED),
            (36, 64, 68)
        );
        bytes[4] = 2;
        assert!(
            decode(&bytes)
                .unwrap_err()
                .to_string()
                .contains("version 2")
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode(&bytes);
        }
    }
}
