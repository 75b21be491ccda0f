//! Tensor memory seen from Python: `_Memory` exposes a view of a pto buffer through numpy's
//! `__array_interface__`, so `numpy.asarray(memory)` is an array over the same bytes (no copy)
//! whose `.base` is the `_Memory`, which keeps the buffer mapped as long as any array of it
//! lives. `pto/_tensors.py` walks an array's `.base` chain back to its `_Memory` to name the
//! buffer in a task; every other array is foreign.
//!
//! No `unsafe` here: the address is handed to numpy as an integer, and numpy reads the bytes.
//! The mapping behind it lives as long as the `BufferRef` this object holds.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use pto_types::{BufferRef, DType, Tensor};

/// numpy's name of each dtype, and its `__array_interface__` type string.
const DTYPES: [(DType, &str, &str); 12] = [
    (DType::F32, "float32", "<f4"),
    (DType::F16, "float16", "<f2"),
    // numpy has no bfloat16 of its own: the bits as uint16 (`ml_dtypes.bfloat16` views them).
    (DType::BF16, "bfloat16", "<u2"),
    (DType::I32, "int32", "<i4"),
    (DType::I16, "int16", "<i2"),
    (DType::I8, "int8", "|i1"),
    (DType::U8, "uint8", "|u1"),
    (DType::I64, "int64", "<i8"),
    (DType::U64, "uint64", "<u8"),
    (DType::U16, "uint16", "<u2"),
    (DType::U32, "uint32", "<u4"),
    (DType::Bool, "bool", "|b1"),
];

/// The dtype numpy calls `name`.
pub(crate) fn dtype_of(name: &str) -> Option<DType> {
    DTYPES
        .iter()
        .find(|(_, n, _)| *n == name)
        .map(|(d, _, _)| *d)
}

/// numpy's name of `dtype`.
pub(crate) fn dtype_name(dtype: DType) -> &'static str {
    DTYPES
        .iter()
        .find(|(d, _, _)| *d == dtype)
        .map_or("", |(_, n, _)| n)
}

fn typestr(dtype: DType) -> &'static str {
    DTYPES
        .iter()
        .find(|(d, _, _)| *d == dtype)
        .map_or("|u1", |(_, _, t)| t)
}

/// The names `dtype_of` accepts (for error messages).
pub(crate) fn dtype_names() -> String {
    DTYPES
        .iter()
        .map(|(_, n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A strided view of one pto buffer, for numpy.
#[pyclass(frozen, module = "pto._native", name = "_Memory")]
pub(crate) struct PyMemory {
    pub(crate) buffer: BufferRef,
    /// The buffer's first byte (an address; 0 for memory with no host bytes here).
    base: usize,
    byte_offset: u64,
    shape: Vec<usize>,
    /// In bytes, as numpy counts them.
    strides: Vec<usize>,
    pub(crate) dtype: DType,
}

impl PyMemory {
    /// A view of `t`'s elements, or `None` when its buffer has no bytes in this process.
    pub(crate) fn of_tensor(t: &Tensor) -> Option<PyMemory> {
        let memory = t.buffer().memory()?;
        let base = memory.as_ptr() as usize;
        if base == 0 {
            return None;
        }
        let size = t.dtype().size();
        Some(PyMemory {
            buffer: t.buffer().clone(),
            base,
            byte_offset: t.byte_offset(),
            shape: t.shape().iter().map(|&n| n as usize).collect(),
            strides: t.strides().iter().map(|&s| s as usize * size).collect(),
            dtype: t.dtype(),
        })
    }
}

#[pymethods]
impl PyMemory {
    /// numpy's array interface (version 3): shape, byte strides, type and the data address.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", pyo3::types::PyTuple::new(py, &self.shape)?)?;
        d.set_item("strides", pyo3::types::PyTuple::new(py, &self.strides)?)?;
        d.set_item("typestr", typestr(self.dtype))?;
        d.set_item("data", (self.base + self.byte_offset as usize, false))?;
        Ok(d)
    }

    /// The buffer's first byte, as an address (views of it compute their offset from it).
    #[getter]
    fn base_address(&self) -> usize {
        self.base
    }

    /// The Worker whose buffer this is (`_Worker.uid`).
    #[getter]
    fn owner_uid(&self) -> u64 {
        self.buffer.id().owner_uid
    }

    /// The buffer's size in bytes.
    #[getter]
    fn buffer_bytes(&self) -> u64 {
        self.buffer.bytes()
    }

    /// The element type's numpy name (`bfloat16` for pto's BF16).
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.dtype)
    }

    fn __repr__(&self) -> String {
        let id = self.buffer.id();
        format!(
            "_Memory(buffer={}:{}, shape={:?}, dtype={})",
            id.buffer_id,
            id.generation,
            self.shape,
            dtype_name(self.dtype)
        )
    }
}

/// What a task names from Python: its tag, the `_Memory` of the array's buffer and the
/// array's view of it (byte offset, shape, element strides, dtype name), as `pto/_tensors.py`
/// computed them.
pub(crate) type TensorSpec<'py> = (
    String,
    Bound<'py, PyMemory>,
    u64,
    Vec<u32>,
    Vec<u32>,
    String,
);
