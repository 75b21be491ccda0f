//! `SEGMENT_ADD` / `SEGMENT_DROP`: the 40-byte messages on a child's descriptor socket (fd 3,
//! `SOCK_SEQPACKET`; NODE_RUNTIME.md §4.3).
//!
//! Layout: kind `u32` @0 (1 add, 2 drop), reserved `u32` @4, owner uid `u64` @8, segment id
//! `u64` @16, generation `u32` @24, reserved `u32` @28, bytes `u64` @32. An add carries the
//! segment's descriptor as `SCM_RIGHTS`; a drop carries none.

use super::{FrameError, get_u32, get_u64, need, put, zero};

pub const MESSAGE_BYTES: usize = 40;
pub const KIND_ADD: u32 = 1;
pub const KIND_DROP: u32 = 2;

/// A segment's identity and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegmentMsg {
    /// True for `SEGMENT_ADD`, false for `SEGMENT_DROP`.
    pub add: bool,
    pub owner: u64,
    pub segment: u64,
    pub generation: u32,
    pub nbytes: u64,
}

impl SegmentMsg {
    pub fn encode(&self) -> [u8; MESSAGE_BYTES] {
        let mut out = [0u8; MESSAGE_BYTES];
        let kind = if self.add { KIND_ADD } else { KIND_DROP };
        put(&mut out, 0, &kind.to_le_bytes());
        put(&mut out, 8, &self.owner.to_le_bytes());
        put(&mut out, 16, &self.segment.to_le_bytes());
        put(&mut out, 24, &self.generation.to_le_bytes());
        put(&mut out, 32, &self.nbytes.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<SegmentMsg, FrameError> {
        need("segment message", bytes, MESSAGE_BYTES)?;
        if bytes.len() != MESSAGE_BYTES {
            return Err(FrameError::BadValue {
                field: "segment message bytes",
                value: bytes.len() as u64,
            });
        }
        let add = match get_u32(bytes, 0) {
            KIND_ADD => true,
            KIND_DROP => false,
            k => {
                return Err(FrameError::BadValue {
                    field: "segment message kind",
                    value: u64::from(k),
                });
            }
        };
        zero("segment message", bytes, 4, 8)?;
        zero("segment message", bytes, 28, 32)?;
        Ok(SegmentMsg {
            add,
            owner: get_u64(bytes, 8),
            segment: get_u64(bytes, 16),
            generation: get_u32(bytes, 24),
            nbytes: get_u64(bytes, 32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_bytes() {
        let m = SegmentMsg {
            add: true,
            owner: 1,
            segment: 2,
            generation: 3,
            nbytes: 4096,
        };
        let b = m.encode();
        assert_eq!(&b[0..4], &[1, 0, 0, 0]);
        assert_eq!(b[8], 1);
        assert_eq!(b[16], 2);
        assert_eq!(b[24], 3);
        assert_eq!(&b[32..34], &[0, 16]);
        assert_eq!(SegmentMsg::decode(&b).unwrap(), m);
        let d = SegmentMsg { add: false, ..m };
        assert_eq!(SegmentMsg::decode(&d.encode()).unwrap(), d);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = SegmentMsg::decode(&bytes);
        }
    }
}
