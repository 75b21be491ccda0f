//! The task arguments blob and its 112-byte wire tensor (NODE_RUNTIME.md §4.5).
//!
//! Blob: tensor count `u16` @0, scalar count `u16` @2, reserved `u32` @4, then the tensors
//! ([`WIRE_TENSOR_BYTES`] each), then the scalars (`u64` each). Tensors name their buffer by
//! identity and say where its bytes are (a host segment and the offset of the buffer in it, or
//! a chip's device allocation), never by pointer; the receiver maps the segment and rebuilds a
//! [`Tensor`] over it. The label travels in the frame's callable section, not here.

use std::sync::Arc;

use super::{FrameError, get_u16, get_u32, get_u64, need, put, zero};
use crate::args::{
    BufferId, BufferMemory, BufferRef, MAX_TASK_SCALARS, MAX_TASK_TENSORS, MAX_TENSOR_DIMS, Tensor,
    TensorTag,
};
use crate::{DType, TaskArgs};

/// Size of the blob header.
pub const HEADER_BYTES: usize = 8;
/// Size of one wire tensor.
pub const WIRE_TENSOR_BYTES: usize = 112;
/// The largest legal blob: 256 tensors and 512 scalars.
pub const MAX_ARGS_BYTES: usize =
    HEADER_BYTES + MAX_TASK_TENSORS * WIRE_TENSOR_BYTES + MAX_TASK_SCALARS * 8;

// Wire tensor offsets.
pub const T_SPACE: usize = 0;
pub const T_DTYPE: usize = 1;
pub const T_NDIMS: usize = 2;
pub const T_TAG: usize = 3;
pub const T_DEVICE_WORKER: usize = 4;
pub const T_OWNER: usize = 8;
pub const T_BUFFER_ID: usize = 16;
pub const T_GENERATION: usize = 24;
pub const T_RESERVED0: usize = 28;
pub const T_BUFFER_BYTES: usize = 32;
pub const T_SEGMENT: usize = 40;
pub const T_SEGMENT_OFFSET: usize = 48;
pub const T_BYTE_OFFSET: usize = 56;
pub const T_SHAPE: usize = 64;
pub const T_STRIDES: usize = 84;
pub const T_RESERVED1: usize = 104;

const _: () = {
    assert!(MAX_ARGS_BYTES == 32_776);
    assert!(T_SHAPE + 4 * MAX_TENSOR_DIMS == T_STRIDES);
    assert!(T_STRIDES + 4 * MAX_TENSOR_DIMS == T_RESERVED1);
    assert!(T_RESERVED1 + 8 == WIRE_TENSOR_BYTES);
};

/// Where a tensor's buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorSpace {
    /// A host segment (a `Worker::create_buffer` buffer or a heap-ring slab).
    Host,
    /// A chip's device allocation (`segment` is the allocation id).
    Device,
    /// A remote worker's buffer (`segment` is the server's buffer handle).
    Remote,
}

impl TensorSpace {
    pub const fn code(self) -> u8 {
        match self {
            TensorSpace::Host => 0,
            TensorSpace::Device => 1,
            TensorSpace::Remote => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<TensorSpace> {
        match code {
            0 => Some(TensorSpace::Host),
            1 => Some(TensorSpace::Device),
            2 => Some(TensorSpace::Remote),
            _ => None,
        }
    }
}

/// Where the bytes of one tensor's buffer are, as the sender knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorLocation {
    pub space: TensorSpace,
    /// The chip owning a device tensor.
    pub device_worker: Option<u32>,
    /// Segment id (host) or device allocation id.
    pub segment: u64,
    /// Offset of the buffer's first byte inside the segment.
    pub segment_offset: u64,
}

/// A decoded wire tensor: a checked view plus its location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireTensor {
    pub tag: TensorTag,
    pub dtype: DType,
    pub id: BufferId,
    pub buffer_bytes: u64,
    pub location: TensorLocation,
    pub byte_offset: u64,
    pub shape: Vec<u32>,
    pub strides: Vec<u32>,
}

impl WireTensor {
    /// The [`Tensor`] over `memory` (which must be the buffer, `buffer_bytes` long), or over a
    /// detached reference when `memory` is `None`.
    pub fn to_tensor(&self, memory: Option<Arc<dyn BufferMemory>>) -> Result<Tensor, FrameError> {
        let buffer = match memory {
            Some(m) => {
                if m.len() as u64 != self.buffer_bytes {
                    return Err(FrameError::BadValue {
                        field: "buffer bytes",
                        value: self.buffer_bytes,
                    });
                }
                BufferRef::with_memory(self.id, m)
            }
            None => BufferRef::detached(self.id, self.buffer_bytes),
        };
        Tensor::new(
            buffer,
            self.byte_offset,
            &self.shape,
            &self.strides,
            self.dtype,
        )
        .map_err(|e| FrameError::BadTensor {
            index: usize::MAX,
            reason: e.to_string(),
        })
    }
}

/// A decoded blob.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireArgs {
    pub tensors: Vec<WireTensor>,
    pub scalars: Vec<u64>,
}

/// Encodes one tensor into `out[..WIRE_TENSOR_BYTES]`.
pub fn encode_tensor(tag: TensorTag, t: &Tensor, loc: &TensorLocation, out: &mut [u8]) {
    let out = &mut out[..WIRE_TENSOR_BYTES];
    out.fill(0);
    let id = t.buffer().id();
    out[T_SPACE] = loc.space.code();
    out[T_DTYPE] = t.dtype().code();
    out[T_NDIMS] = t.shape().len() as u8;
    out[T_TAG] = tag.code();
    put(
        out,
        T_DEVICE_WORKER,
        &loc.device_worker.unwrap_or(u32::MAX).to_le_bytes(),
    );
    put(out, T_OWNER, &id.owner_uid.to_le_bytes());
    put(out, T_BUFFER_ID, &id.buffer_id.to_le_bytes());
    put(out, T_GENERATION, &id.generation.to_le_bytes());
    put(out, T_BUFFER_BYTES, &t.buffer().bytes().to_le_bytes());
    put(out, T_SEGMENT, &loc.segment.to_le_bytes());
    put(out, T_SEGMENT_OFFSET, &loc.segment_offset.to_le_bytes());
    put(out, T_BYTE_OFFSET, &t.byte_offset().to_le_bytes());
    for (d, (&n, &s)) in t.shape().iter().zip(t.strides()).enumerate() {
        put(out, T_SHAPE + 4 * d, &n.to_le_bytes());
        put(out, T_STRIDES + 4 * d, &s.to_le_bytes());
    }
}

/// Decodes and checks one wire tensor (`index` names it in errors).
pub fn decode_tensor(bytes: &[u8], index: usize) -> Result<WireTensor, FrameError> {
    need("wire tensor", bytes, WIRE_TENSOR_BYTES)?;
    let bad = |reason: String| FrameError::BadTensor { index, reason };
    let space = TensorSpace::from_code(bytes[T_SPACE])
        .ok_or_else(|| bad(format!("space code {}", bytes[T_SPACE])))?;
    let dtype = DType::from_code(bytes[T_DTYPE])
        .ok_or_else(|| bad(format!("dtype code {}", bytes[T_DTYPE])))?;
    let ndims = usize::from(bytes[T_NDIMS]);
    if !(1..=MAX_TENSOR_DIMS).contains(&ndims) {
        return Err(bad(format!("{ndims} dimensions")));
    }
    let tag = TensorTag::from_code(bytes[T_TAG])
        .ok_or_else(|| bad(format!("tag code {}", bytes[T_TAG])))?;
    let device_worker = match get_u32(bytes, T_DEVICE_WORKER) {
        u32::MAX => None,
        w => Some(w),
    };
    if (space == TensorSpace::Device) != device_worker.is_some() {
        return Err(bad(
            "a device worker is given exactly for device tensors".to_string()
        ));
    }
    zero("wire tensor", bytes, T_RESERVED0, T_RESERVED0 + 4)?;
    zero("wire tensor", bytes, T_RESERVED1, WIRE_TENSOR_BYTES)?;
    let mut shape = Vec::with_capacity(ndims);
    let mut strides = Vec::with_capacity(ndims);
    for d in 0..MAX_TENSOR_DIMS {
        let n = get_u32(bytes, T_SHAPE + 4 * d);
        let s = get_u32(bytes, T_STRIDES + 4 * d);
        if d < ndims {
            if s == 0 {
                return Err(bad(format!("stride of dimension {d} is 0")));
            }
            shape.push(n);
            strides.push(s);
        } else if n != 0 || s != 0 {
            return Err(bad(format!("dimension {d} beyond ndims is not zero")));
        }
    }
    let id = BufferId {
        owner_uid: get_u64(bytes, T_OWNER),
        buffer_id: get_u64(bytes, T_BUFFER_ID),
        generation: get_u32(bytes, T_GENERATION),
    };
    let buffer_bytes = get_u64(bytes, T_BUFFER_BYTES);
    let segment = get_u64(bytes, T_SEGMENT);
    let segment_offset = get_u64(bytes, T_SEGMENT_OFFSET);
    if segment_offset.checked_add(buffer_bytes).is_none() {
        return Err(bad("segment offset + buffer bytes overflows".to_string()));
    }
    let byte_offset = get_u64(bytes, T_BYTE_OFFSET);
    let wire = WireTensor {
        tag,
        dtype,
        id,
        buffer_bytes,
        location: TensorLocation {
            space,
            device_worker,
            segment,
            segment_offset,
        },
        byte_offset,
        shape,
        strides,
    };
    // The view rules of `Tensor::new` (alignment, bounds) against the buffer's size.
    wire.to_tensor(None).map_err(|e| match e {
        FrameError::BadTensor { reason, .. } => bad(reason),
        other => other,
    })?;
    Ok(wire)
}

/// Encodes `args` (tensors, then scalars); `locate(i, tensor)` says where tensor `i` lives.
/// The label is not part of the blob.
pub fn encode_args(
    args: &TaskArgs,
    mut locate: impl FnMut(usize, &Tensor) -> TensorLocation,
) -> Vec<u8> {
    let tensors = args.tensors();
    let scalars = args.scalars();
    let mut out = vec![0u8; HEADER_BYTES + tensors.len() * WIRE_TENSOR_BYTES + scalars.len() * 8];
    put(&mut out, 0, &(tensors.len() as u16).to_le_bytes());
    put(&mut out, 2, &(scalars.len() as u16).to_le_bytes());
    for (i, (tag, t)) in tensors.iter().enumerate() {
        let loc = locate(i, t);
        let at = HEADER_BYTES + i * WIRE_TENSOR_BYTES;
        encode_tensor(*tag, t, &loc, &mut out[at..]);
    }
    let at = HEADER_BYTES + tensors.len() * WIRE_TENSOR_BYTES;
    for (j, s) in scalars.iter().enumerate() {
        put(&mut out, at + 8 * j, &s.to_le_bytes());
    }
    out
}

/// Decodes a blob of exactly `bytes.len()` bytes.
pub fn decode_args(bytes: &[u8]) -> Result<WireArgs, FrameError> {
    need("args blob", bytes, HEADER_BYTES)?;
    let n_tensors = usize::from(get_u16(bytes, 0));
    let n_scalars = usize::from(get_u16(bytes, 2));
    if n_tensors > MAX_TASK_TENSORS {
        return Err(FrameError::BadValue {
            field: "tensor count",
            value: n_tensors as u64,
        });
    }
    if n_scalars > MAX_TASK_SCALARS {
        return Err(FrameError::BadValue {
            field: "scalar count",
            value: n_scalars as u64,
        });
    }
    zero("args blob", bytes, 4, HEADER_BYTES)?;
    let total = HEADER_BYTES + n_tensors * WIRE_TENSOR_BYTES + n_scalars * 8;
    need("args blob", bytes, total)?;
    if bytes.len() != total {
        return Err(FrameError::BadValue {
            field: "args bytes",
            value: bytes.len() as u64,
        });
    }
    let mut tensors = Vec::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let at = HEADER_BYTES + i * WIRE_TENSOR_BYTES;
        tensors.push(decode_tensor(&bytes[at..at + WIRE_TENSOR_BYTES], i)?);
    }
    let at = HEADER_BYTES + n_tensors * WIRE_TENSOR_BYTES;
    let scalars = (0..n_scalars).map(|j| get_u64(bytes, at + 8 * j)).collect();
    Ok(WireArgs { tensors, scalars })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Bytes(usize);
    impl BufferMemory for Bytes {
        fn as_ptr(&self) -> *mut u8 {
            std::ptr::null_mut()
        }
        fn len(&self) -> usize {
            self.0
        }
    }

    fn buffer(id: u64, bytes: u64) -> BufferRef {
        BufferRef::detached(
            BufferId {
                owner_uid: 0x1234_0000_0001,
                buffer_id: id,
                generation: 3,
            },
            bytes,
        )
    }

    fn host(segment: u64, offset: u64) -> TensorLocation {
        TensorLocation {
            space: TensorSpace::Host,
            device_worker: None,
            segment,
            segment_offset: offset,
        }
    }

    #[test]
    fn golden_bytes_of_one_tensor() {
        let t = Tensor::new(buffer(7, 4096), 16, &[4, 8], &[16, 1], DType::F16).unwrap();
        let mut out = [0xAAu8; WIRE_TENSOR_BYTES];
        encode_tensor(TensorTag::OutputExisting, &t, &host(9, 65536), &mut out);
        assert_eq!(&out[0..8], &[0, 1, 2, 3, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(get_u64(&out, T_OWNER), 0x1234_0000_0001);
        assert_eq!(get_u64(&out, T_BUFFER_ID), 7);
        assert_eq!(get_u32(&out, T_GENERATION), 3);
        assert_eq!(get_u64(&out, T_BUFFER_BYTES), 4096);
        assert_eq!(get_u64(&out, T_SEGMENT), 9);
        assert_eq!(get_u64(&out, T_SEGMENT_OFFSET), 65536);
        assert_eq!(get_u64(&out, T_BYTE_OFFSET), 16);
        assert_eq!(&out[64..76], &[4, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&out[84..92], &[16, 0, 0, 0, 1, 0, 0, 0]);
        assert!(out[T_RESERVED1..].iter().all(|&b| b == 0));
        let back = decode_tensor(&out, 0).unwrap();
        assert_eq!(back.tag, TensorTag::OutputExisting);
        assert_eq!(back.to_tensor(None).unwrap(), t);
    }

    #[test]
    fn dtype_and_tag_codes_are_pinned() {
        let dtypes: Vec<u8> = [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::I16,
            DType::I8,
            DType::U8,
            DType::I64,
            DType::U64,
            DType::U16,
            DType::U32,
            DType::Bool,
        ]
        .iter()
        .map(|d| d.code())
        .collect();
        assert_eq!(dtypes, (0..12).collect::<Vec<u8>>());
        let tags: Vec<u8> = [
            TensorTag::Input,
            TensorTag::Output,
            TensorTag::InOut,
            TensorTag::OutputExisting,
            TensorTag::NoDep,
        ]
        .iter()
        .map(|t| t.code())
        .collect();
        assert_eq!(tags, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn largest_blob_round_trips() {
        // Row 21: 256 tensors and 512 scalars.
        let t = Tensor::new(
            buffer(1, 1 << 20),
            64,
            &[2, 3, 4, 5, 6],
            &[360, 120, 30, 6, 1],
            DType::F32,
        )
        .unwrap();
        let mut args = TaskArgs::new();
        for i in 0..MAX_TASK_TENSORS {
            args = args.tensor(TensorTag::ALL[i % 5], &t);
        }
        for j in 0..MAX_TASK_SCALARS {
            args = args.scalar(j as u64 * 0x0101_0101_0101);
        }
        args.check().unwrap();
        let blob = encode_args(&args, |i, _| host(i as u64, 4096 * i as u64));
        assert_eq!(blob.len(), MAX_ARGS_BYTES);
        let back = decode_args(&blob).unwrap();
        assert_eq!(back.tensors.len(), 256);
        assert_eq!(back.scalars, args.scalars());
        for (i, w) in back.tensors.iter().enumerate() {
            assert_eq!(w.tag, TensorTag::ALL[i % 5]);
            assert_eq!(w.location, host(i as u64, 4096 * i as u64));
            let memory: Arc<dyn BufferMemory> = Arc::new(Bytes(1 << 20));
            let rebuilt = w.to_tensor(Some(memory)).unwrap();
            assert_eq!(rebuilt, t);
        }
    }

    #[test]
    fn decoders_reject_bad_fields() {
        let t = Tensor::contiguous(buffer(1, 64), &[16], DType::F32).unwrap();
        let args = TaskArgs::new().input(&t).scalar(5u64);
        let good = encode_args(&args, |_, _| host(1, 0));
        let mutate = |at: usize, v: u8| {
            let mut b = good.clone();
            b[at] = v;
            decode_args(&b)
        };
        let t0 = HEADER_BYTES;
        assert!(matches!(
            mutate(t0 + T_SPACE, 7),
            Err(FrameError::BadTensor { .. })
        ));
        assert!(matches!(
            mutate(t0 + T_DTYPE, 12),
            Err(FrameError::BadTensor { .. })
        ));
        assert!(matches!(
            mutate(t0 + T_NDIMS, 0),
            Err(FrameError::BadTensor { .. })
        ));
        assert!(matches!(
            mutate(t0 + T_NDIMS, 6),
            Err(FrameError::BadTensor { .. })
        ));
        assert!(matches!(
            mutate(t0 + T_TAG, 6),
            Err(FrameError::BadTensor { .. })
        ));
        assert!(matches!(
            mutate(t0 + T_SHAPE, 17),
            Err(FrameError::BadTensor { .. })
        ));
        assert!(matches!(
            mutate(t0 + T_STRIDES, 0),
            Err(FrameError::BadTensor { .. })
        ));
        assert!(matches!(
            mutate(t0 + T_BYTE_OFFSET, 2),
            Err(FrameError::BadTensor { .. })
        ));
        assert!(matches!(
            mutate(t0 + 110, 1),
            Err(FrameError::NonZeroReserved { .. })
        ));
        assert!(matches!(
            mutate(5, 1),
            Err(FrameError::NonZeroReserved { .. })
        ));
        assert!(matches!(mutate(1, 3), Err(FrameError::BadValue { .. })));
        assert!(matches!(
            decode_args(&good[..good.len() - 1]),
            Err(FrameError::Truncated { .. })
        ));
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]
            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
                let _ = decode_args(&bytes);
                let _ = decode_tensor(&bytes, 0);
            }

            #[test]
            fn plausible_headers_never_panic(
                n in 0u16..4, m in 0u16..4,
                body in proptest::collection::vec(any::<u8>(), 0..500),
            ) {
                let mut bytes = Vec::new();
                bytes.extend_from_slice(&n.to_le_bytes());
                bytes.extend_from_slice(&m.to_le_bytes());
                bytes.extend_from_slice(&[0; 4]);
                bytes.extend_from_slice(&body);
                if let Ok(args) = decode_args(&bytes) {
                    for t in &args.tensors {
                        prop_assert!(t.to_tensor(None).is_ok());
                    }
                }
            }
        }
    }
}
