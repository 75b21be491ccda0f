//! Element types of tensors, with their sizes and stable wire codes.
//!
//! The wire codes are part of the argument-blob format (NODE_RUNTIME.md §4.5) and never change.

use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    I16,
    I8,
    U8,
    I64,
    U64,
    U16,
    U32,
    Bool,
}

impl DType {
    /// Every dtype, in wire-code order.
    pub const ALL: [DType; 12] = [
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
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::I64 | DType::U64 => 8,
        }
    }

    /// The stable one-byte code used on the wire.
    pub const fn code(self) -> u8 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            DType::I32 => 3,
            DType::I16 => 4,
            DType::I8 => 5,
            DType::U8 => 6,
            DType::I64 => 7,
            DType::U64 => 8,
            DType::U16 => 9,
            DType::U32 => 10,
            DType::Bool => 11,
        }
    }

    /// The dtype with this wire code, if any.
    pub fn from_code(code: u8) -> Option<DType> {
        DType::ALL.get(usize::from(code)).copied()
    }

    /// The lower-case name used in messages and files (`f32`, `bf16`, `bool`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_follow_all_order() {
        for (i, d) in DType::ALL.iter().enumerate() {
            assert_eq!(usize::from(d.code()), i);
            assert_eq!(DType::from_code(d.code()), Some(*d));
        }
        assert_eq!(DType::from_code(12), None);
    }

    #[test]
    fn element_sizes() {
        let sizes: Vec<usize> = DType::ALL.iter().map(|d| d.size()).collect();
        assert_eq!(sizes, [4, 2, 2, 4, 2, 1, 1, 8, 8, 2, 4, 1]);
    }
}
