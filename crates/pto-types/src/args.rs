//! Task arguments: tagged tensors over shared buffers, then `u64` scalars (OVERVIEW.md §3).
//!
//! `TaskArgs` is what a parent hands a child at every level: the tags drive the *parent's*
//! dependency inference, the child sees plain arguments. Tensors name buffers by identity
//! ([`BufferId`]) and byte offset, never by raw pointer; the memory behind a buffer is reached
//! through [`BufferMemory`], implemented by the crates that own memory (host buffers in
//! `pto-chip`, shared-memory segments in `pto-node`).

use std::fmt;
use std::sync::Arc;

use crate::DType;
use crate::geometry::{self, Geometry};

/// Most dimensions of a tensor.
pub const MAX_TENSOR_DIMS: usize = 5;
/// Most tensors in one `TaskArgs`.
pub const MAX_TASK_TENSORS: usize = 256;
/// Most scalars in one `TaskArgs`.
pub const MAX_TASK_SCALARS: usize = 512;
/// Longest label or callable name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// The identity of a buffer: unique per worker (`owner_uid`) and reuse (`generation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId {
    pub owner_uid: u64,
    pub buffer_id: u64,
    pub generation: u32,
}

/// Memory that backs a buffer. Implementations keep the bytes alive and at a fixed address for
/// as long as the value lives.
pub trait BufferMemory: Send + Sync + fmt::Debug {
    /// The first byte. Valid for [`BufferMemory::len`] bytes while `self` is alive; reading or
    /// writing through it is the caller's (unsafe) responsibility.
    fn as_ptr(&self) -> *mut u8;
    /// Size in bytes.
    fn len(&self) -> usize;
    /// True when the buffer has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A reference to a buffer: its identity, its size and, where this process can reach it, its
/// memory (kept alive by the `Arc`).
#[derive(Clone)]
pub struct BufferRef {
    id: BufferId,
    bytes: u64,
    memory: Option<Arc<dyn BufferMemory>>,
}

impl BufferRef {
    /// A buffer whose memory this process holds.
    pub fn with_memory(id: BufferId, memory: Arc<dyn BufferMemory>) -> BufferRef {
        BufferRef {
            id,
            bytes: memory.len() as u64,
            memory: Some(memory),
        }
    }

    /// A buffer known by identity and size only (e.g. decoded from a wire record before its
    /// segment is mapped).
    pub fn detached(id: BufferId, bytes: u64) -> BufferRef {
        BufferRef {
            id,
            bytes,
            memory: None,
        }
    }

    pub fn id(&self) -> BufferId {
        self.id
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The memory, when this process holds it.
    pub fn memory(&self) -> Option<&Arc<dyn BufferMemory>> {
        self.memory.as_ref()
    }
}

impl fmt::Debug for BufferRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferRef")
            .field("id", &self.id)
            .field("bytes", &self.bytes)
            .field("mapped", &self.memory.is_some())
            .finish()
    }
}

impl PartialEq for BufferRef {
    fn eq(&self, other: &BufferRef) -> bool {
        self.id == other.id && self.bytes == other.bytes
    }
}

/// How a task uses a tensor. Codes are stable wire values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorTag {
    /// Read; waits for the tensor's writers.
    Input,
    /// Written into a fresh buffer (at L2 allocated by the runtime).
    Output,
    /// Read and written; waits for writers and becomes the new writer.
    InOut,
    /// Written into an existing buffer; becomes the new writer.
    OutputExisting,
    /// Passed without dependency tracking.
    NoDep,
    /// Read, like [`TensorTag::Input`], and tracked as a reader: a later task that writes
    /// overlapping bytes (`InOut`, `OutputExisting`) waits for this one to finish, whether or
    /// not the run tracks write-after-read (`CallConfig::track_war`). The reference system's
    /// TRACKED_INPUT.
    TrackedInput,
}

impl TensorTag {
    pub const ALL: [TensorTag; 6] = [
        TensorTag::Input,
        TensorTag::Output,
        TensorTag::InOut,
        TensorTag::OutputExisting,
        TensorTag::NoDep,
        TensorTag::TrackedInput,
    ];

    pub const fn code(self) -> u8 {
        match self {
            TensorTag::Input => 0,
            TensorTag::Output => 1,
            TensorTag::InOut => 2,
            TensorTag::OutputExisting => 3,
            TensorTag::NoDep => 4,
            TensorTag::TrackedInput => 5,
        }
    }

    /// True for tags whose task reads the tensor's earlier contents (and so waits for its
    /// writers).
    pub const fn reads(self) -> bool {
        matches!(
            self,
            TensorTag::Input | TensorTag::InOut | TensorTag::TrackedInput
        )
    }

    pub fn from_code(code: u8) -> Option<TensorTag> {
        TensorTag::ALL.get(usize::from(code)).copied()
    }

    /// The name the orchestration APIs spell it with (`KernelArgs::output_existing`, Python's
    /// `TaskArgs.output_existing`).
    pub const fn name(self) -> &'static str {
        match self {
            TensorTag::Input => "input",
            TensorTag::Output => "output",
            TensorTag::InOut => "inout",
            TensorTag::OutputExisting => "output_existing",
            TensorTag::NoDep => "no_dep",
            TensorTag::TrackedInput => "tracked_input",
        }
    }

    /// The tag named `name` ([`TensorTag::name`]).
    pub fn from_name(name: &str) -> Option<TensorTag> {
        TensorTag::ALL.into_iter().find(|t| t.name() == name)
    }

    /// True for tags whose task writes the tensor.
    pub const fn writes(self) -> bool {
        matches!(
            self,
            TensorTag::Output | TensorTag::InOut | TensorTag::OutputExisting
        )
    }
}

/// Why a tensor or an argument list is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgsError {
    Rank { ndims: usize },
    ShapeStrideMismatch { shape: usize, strides: usize },
    ZeroStride { dim: usize },
    MisalignedOffset { byte_offset: u64, dtype: DType },
    OutOfBounds { end: u64, buffer_bytes: u64 },
    TooManyTensors,
    TooManyScalars,
    BadLabel { label: String },
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::Rank { ndims } => {
                write!(f, "a tensor has {ndims} dimensions; allowed are 1 to 5")
            }
            ArgsError::ShapeStrideMismatch { shape, strides } => {
                write!(f, "shape has {shape} entries but strides has {strides}")
            }
            ArgsError::ZeroStride { dim } => write!(f, "stride of dimension {dim} is 0"),
            ArgsError::MisalignedOffset { byte_offset, dtype } => write!(
                f,
                "byte offset {byte_offset} is not a multiple of the {dtype} element size {}",
                dtype.size()
            ),
            ArgsError::OutOfBounds { end, buffer_bytes } => write!(
                f,
                "the view ends at byte {end}, past the end of its {buffer_bytes}-byte buffer"
            ),
            ArgsError::TooManyTensors => {
                write!(f, "more than {MAX_TASK_TENSORS} tensors in one task")
            }
            ArgsError::TooManyScalars => {
                write!(f, "more than {MAX_TASK_SCALARS} scalars in one task")
            }
            ArgsError::BadLabel { label } => write!(
                f,
                "label {label:?} must be 1-64 characters of [A-Za-z0-9_.-]"
            ),
        }
    }
}

impl std::error::Error for ArgsError {}

/// True for names of 1–64 bytes from `[A-Za-z0-9_.-]` (labels and callable names).
pub fn is_valid_name(name: &str) -> bool {
    (1..=MAX_NAME_BYTES).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A strided view of a buffer. Shape and strides are in elements; the offset in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    buffer: BufferRef,
    byte_offset: u64,
    ndims: u8,
    shape: [u32; MAX_TENSOR_DIMS],
    strides: [u32; MAX_TENSOR_DIMS],
    dtype: DType,
}

impl Tensor {
    /// A validated view: rank 1–5, strides > 0, offset aligned to the element size, every
    /// element inside the buffer.
    pub fn new(
        buffer: BufferRef,
        byte_offset: u64,
        shape: &[u32],
        strides: &[u32],
        dtype: DType,
    ) -> Result<Tensor, ArgsError> {
        let ndims = shape.len();
        if !(1..=MAX_TENSOR_DIMS).contains(&ndims) {
            return Err(ArgsError::Rank { ndims });
        }
        if strides.len() != ndims {
            return Err(ArgsError::ShapeStrideMismatch {
                shape: ndims,
                strides: strides.len(),
            });
        }
        if let Some(dim) = strides.iter().position(|&s| s == 0) {
            return Err(ArgsError::ZeroStride { dim });
        }
        let elem = dtype.size() as u64;
        if !byte_offset.is_multiple_of(elem) {
            return Err(ArgsError::MisalignedOffset { byte_offset, dtype });
        }
        let mut s = [0u32; MAX_TENSOR_DIMS];
        let mut t = [0u32; MAX_TENSOR_DIMS];
        s[..ndims].copy_from_slice(shape);
        t[..ndims].copy_from_slice(strides);
        let wide = t.map(u64::from);
        let start = byte_offset / elem;
        if let Err(e) = geometry::check_inside(elem, start, shape, &wide[..ndims], buffer.bytes()) {
            return Err(ArgsError::OutOfBounds {
                end: u64::try_from(e.end * u128::from(elem)).unwrap_or(u64::MAX),
                buffer_bytes: buffer.bytes(),
            });
        }
        Ok(Tensor {
            buffer,
            byte_offset,
            ndims: ndims as u8,
            shape: s,
            strides: t,
            dtype,
        })
    }

    /// A row-major view of `shape` starting at byte 0.
    pub fn contiguous(buffer: BufferRef, shape: &[u32], dtype: DType) -> Result<Tensor, ArgsError> {
        let mut strides = vec![1u32; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1].saturating_mul(shape[i + 1].max(1));
        }
        Tensor::new(buffer, 0, shape, &strides, dtype)
    }

    pub fn buffer(&self) -> &BufferRef {
        &self.buffer
    }

    pub fn byte_offset(&self) -> u64 {
        self.byte_offset
    }

    pub fn shape(&self) -> &[u32] {
        &self.shape[..usize::from(self.ndims)]
    }

    pub fn strides(&self) -> &[u32] {
        &self.strides[..usize::from(self.ndims)]
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.shape().iter().map(|&n| u64::from(n)).product()
    }

    /// The bytes of its buffer this view touches, for overlap tests.
    pub fn geometry(&self) -> Geometry {
        let mut strides = [0u64; MAX_TENSOR_DIMS];
        for (wide, &s) in strides.iter_mut().zip(self.strides()) {
            *wide = u64::from(s);
        }
        let ndims = usize::from(self.ndims);
        Geometry::new(
            self.dtype.size() as u64,
            self.byte_offset,
            self.shape(),
            &strides[..ndims],
        )
        .expect("a validated tensor lies inside its buffer")
    }
}

/// A scalar argument, carried as its `u64` bit pattern.
pub trait ScalarArg {
    fn to_bits(self) -> u64;
}

impl ScalarArg for u64 {
    fn to_bits(self) -> u64 {
        self
    }
}

impl ScalarArg for i64 {
    fn to_bits(self) -> u64 {
        self as u64
    }
}

impl ScalarArg for u32 {
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
}

impl ScalarArg for i32 {
    fn to_bits(self) -> u64 {
        self as u32 as u64
    }
}

impl ScalarArg for f32 {
    fn to_bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl ScalarArg for f64 {
    fn to_bits(self) -> u64 {
        self.to_bits()
    }
}

/// The arguments of one task: tagged tensors, then scalars, and an optional label.
///
/// Builder methods never fail; the first problem is recorded and reported by
/// [`TaskArgs::check`], which every submit calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskArgs {
    tensors: Vec<(TensorTag, Tensor)>,
    scalars: Vec<u64>,
    label: Option<String>,
    error: Option<ArgsError>,
}

impl TaskArgs {
    pub fn new() -> TaskArgs {
        TaskArgs::default()
    }

    /// Adds a tensor with `tag`.
    pub fn tensor(mut self, tag: TensorTag, tensor: &Tensor) -> TaskArgs {
        if self.tensors.len() == MAX_TASK_TENSORS {
            self.error.get_or_insert(ArgsError::TooManyTensors);
            return self;
        }
        self.tensors.push((tag, tensor.clone()));
        self
    }

    pub fn input(self, tensor: &Tensor) -> TaskArgs {
        self.tensor(TensorTag::Input, tensor)
    }

    pub fn output(self, tensor: &Tensor) -> TaskArgs {
        self.tensor(TensorTag::Output, tensor)
    }

    pub fn inout(self, tensor: &Tensor) -> TaskArgs {
        self.tensor(TensorTag::InOut, tensor)
    }

    pub fn output_existing(self, tensor: &Tensor) -> TaskArgs {
        self.tensor(TensorTag::OutputExisting, tensor)
    }

    pub fn no_dep(self, tensor: &Tensor) -> TaskArgs {
        self.tensor(TensorTag::NoDep, tensor)
    }

    /// Adds a scalar (bit-cast into a `u64`).
    pub fn scalar(mut self, value: impl ScalarArg) -> TaskArgs {
        if self.scalars.len() == MAX_TASK_SCALARS {
            self.error.get_or_insert(ArgsError::TooManyScalars);
            return self;
        }
        self.scalars.push(value.to_bits());
        self
    }

    /// Names the task in reports, logs and diagnostics directories.
    pub fn label(mut self, label: &str) -> TaskArgs {
        if !is_valid_name(label) {
            self.error.get_or_insert(ArgsError::BadLabel {
                label: label.to_string(),
            });
            return self;
        }
        self.label = Some(label.to_string());
        self
    }

    /// The first problem recorded by the builder.
    pub fn check(&self) -> Result<(), ArgsError> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    pub fn tensors(&self) -> &[(TensorTag, Tensor)] {
        &self.tensors
    }

    pub fn scalars(&self) -> &[u64] {
        &self.scalars
    }

    pub fn label_str(&self) -> Option<&str> {
        self.label.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(bytes: u64) -> BufferRef {
        BufferRef::detached(
            BufferId {
                owner_uid: 1,
                buffer_id: 2,
                generation: 0,
            },
            bytes,
        )
    }

    #[test]
    fn contiguous_tensor_strides() {
        let t = Tensor::contiguous(buffer(4 * 24), &[2, 3, 4], DType::F32).unwrap();
        assert_eq!(t.strides(), &[12, 4, 1]);
        assert_eq!(t.numel(), 24);
    }

    #[test]
    fn tensor_validation() {
        let b = buffer(64);
        assert_eq!(
            Tensor::new(b.clone(), 0, &[], &[], DType::F32),
            Err(ArgsError::Rank { ndims: 0 })
        );
        assert_eq!(
            Tensor::new(b.clone(), 0, &[1; 6], &[1; 6], DType::F32),
            Err(ArgsError::Rank { ndims: 6 })
        );
        assert_eq!(
            Tensor::new(b.clone(), 0, &[4], &[0], DType::F32),
            Err(ArgsError::ZeroStride { dim: 0 })
        );
        assert_eq!(
            Tensor::new(b.clone(), 2, &[4], &[1], DType::F32),
            Err(ArgsError::MisalignedOffset {
                byte_offset: 2,
                dtype: DType::F32
            })
        );
        assert_eq!(
            Tensor::new(b.clone(), 8, &[15], &[1], DType::F32),
            Err(ArgsError::OutOfBounds {
                end: 68,
                buffer_bytes: 64
            })
        );
        assert!(Tensor::new(b, 4, &[15], &[1], DType::F32).is_ok());
    }

    #[test]
    fn builder_records_the_first_error() {
        let t = Tensor::contiguous(buffer(64), &[16], DType::F32).unwrap();
        let args = TaskArgs::new().input(&t).output_existing(&t).scalar(2.5f32);
        assert_eq!(args.check(), Ok(()));
        assert_eq!(args.tensors().len(), 2);
        assert_eq!(args.scalars(), &[u64::from(2.5f32.to_bits())]);
        let args = TaskArgs::new().label("bad label").label("also bad!");
        assert_eq!(
            args.check(),
            Err(ArgsError::BadLabel {
                label: "bad label".into()
            })
        );
        let mut args = TaskArgs::new();
        for _ in 0..=MAX_TASK_SCALARS {
            args = args.scalar(1u64);
        }
        assert_eq!(args.check(), Err(ArgsError::TooManyScalars));
    }

    #[test]
    fn tag_codes_round_trip() {
        for tag in TensorTag::ALL {
            assert_eq!(TensorTag::from_code(tag.code()), Some(tag));
        }
        assert_eq!(TensorTag::from_code(6), None);
        for tag in TensorTag::ALL {
            assert_eq!(TensorTag::from_name(tag.name()), Some(tag));
        }
        assert_eq!(TensorTag::from_name("tracked"), None);
        assert!(TensorTag::TrackedInput.reads() && !TensorTag::TrackedInput.writes());
        assert!(TensorTag::InOut.writes());
        assert!(!TensorTag::NoDep.writes());
    }

    #[test]
    fn names() {
        assert!(is_valid_name("attn.0-x_y"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name(&"a".repeat(65)));
    }
}
