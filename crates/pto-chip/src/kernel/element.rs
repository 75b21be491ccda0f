//! Element types a kernel may view a tensor as, and scalar types it may read an argument as.
//!
//! Implements the typing half of CHIP_RUNTIME.md §1.4: a view of a tensor of dtype `d` as `T`
//! requires `T::accepts(d)`; a scalar slot is a `u64` bit pattern (§2.2) decoded by [`Scalar`].

use half::{bf16, f16};
use pto_types::DType;

use crate::memory::HostScalar;

mod sealed {
    /// Only this module implements [`super::Element`]; see its requirements.
    pub trait Sealed {}
}

/// A tensor element type.
///
/// Sealed: views read arbitrary device bytes as `T` and access elements through atomics of the
/// same width, so every implementation must have
/// - `size_of::<T>() == T::DTYPE.size()`, a power of two, with `align_of::<T>() ≤ size_of::<T>()`;
/// - no padding, and every bit pattern a valid value.
///
/// That is why `bool` is not an element: a `Bool` tensor is read as `u8`
/// (`u8::accepts(DType::Bool)` holds).
///
/// The one element trait of the workspace: kernels view tensors as `T: Element`, and host code
/// reads and writes buffers as `T: Element` (`pto_node::HostBuffer`, `SubContext`), which is
/// why it extends [`HostScalar`] (bytes copied to and from host memory).
pub trait Element: sealed::Sealed + HostScalar + Send + Sync {
    /// The tensor dtype this type represents.
    const DTYPE: DType;

    /// Whether a tensor of `dtype` may be viewed as `Self` (default: only `Self::DTYPE`).
    fn accepts(dtype: DType) -> bool {
        dtype == Self::DTYPE
    }
}

macro_rules! element {
    ($($ty:ty => $dtype:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DTYPE: DType = DType::$dtype;
        }
        const _: () = assert!(size_of::<$ty>() == DType::$dtype.size());
        const _: () = assert!(align_of::<$ty>() <= size_of::<$ty>());
    )*};
}

element! {
    f32 => F32,
    f16 => F16,
    bf16 => BF16,
    i8 => I8,
    i16 => I16,
    i32 => I32,
    i64 => I64,
    u16 => U16,
    u32 => U32,
    u64 => U64,
}

impl sealed::Sealed for u8 {}
impl Element for u8 {
    const DTYPE: DType = DType::U8;

    /// `U8` and `Bool` (a bool tensor's bytes are read as `u8`: nonzero is true).
    fn accepts(dtype: DType) -> bool {
        matches!(dtype, DType::U8 | DType::Bool)
    }
}
const _: () = assert!(DType::U8.size() == 1 && DType::Bool.size() == 1);

/// A type a scalar argument can be read as: the argument's `u64` bit pattern (§2.2) decoded.
pub trait Scalar: Copy {
    /// Decodes the argument's bit pattern.
    fn from_bits(bits: u64) -> Self;
}

impl Scalar for u64 {
    fn from_bits(bits: u64) -> u64 {
        bits
    }
}

impl Scalar for i64 {
    fn from_bits(bits: u64) -> i64 {
        bits as i64
    }
}

impl Scalar for u32 {
    /// The low 32 bits.
    fn from_bits(bits: u64) -> u32 {
        bits as u32
    }
}

impl Scalar for i32 {
    /// The low 32 bits.
    fn from_bits(bits: u64) -> i32 {
        bits as u32 as i32
    }
}

impl Scalar for f32 {
    /// The low 32 bits as `f32` bits (how `KernelArgs::scalar(1.0f32)` stores it).
    fn from_bits(bits: u64) -> f32 {
        f32::from_bits(bits as u32)
    }
}

impl Scalar for f64 {
    fn from_bits(bits: u64) -> f64 {
        f64::from_bits(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: Element>(dtype: DType) {
        assert_eq!(T::DTYPE, dtype);
        assert_eq!(size_of::<T>(), dtype.size());
        for other in DType::ALL {
            let expected = other == dtype || (dtype == DType::U8 && other == DType::Bool);
            assert_eq!(T::accepts(other), expected, "{dtype} accepts {other}");
        }
    }

    #[test]
    fn kernel_element_dtypes() {
        check::<f32>(DType::F32);
        check::<f16>(DType::F16);
        check::<bf16>(DType::BF16);
        check::<i8>(DType::I8);
        check::<i16>(DType::I16);
        check::<i32>(DType::I32);
        check::<i64>(DType::I64);
        check::<u8>(DType::U8);
        check::<u16>(DType::U16);
        check::<u32>(DType::U32);
        check::<u64>(DType::U64);
    }

    #[test]
    fn kernel_scalar_bit_casts() {
        let one = u64::from(1.0f32.to_bits());
        assert_eq!(<f32 as Scalar>::from_bits(one), 1.0);
        // High bits are ignored by the 32-bit types.
        assert_eq!(<f32 as Scalar>::from_bits(one | 0xdead_0000_0000_0000), 1.0);
        assert_eq!(<f64 as Scalar>::from_bits((-2.5f64).to_bits()), -2.5);
        assert_eq!(<u64 as Scalar>::from_bits(u64::MAX), u64::MAX);
        assert_eq!(<i64 as Scalar>::from_bits(u64::MAX), -1);
        assert_eq!(<u32 as Scalar>::from_bits(0x1_0000_0007), 7);
        assert_eq!(<i32 as Scalar>::from_bits(0xffff_fffe), -2);
        assert_eq!(<i32 as Scalar>::from_bits((-5i64) as u64), -5);
    }
}
