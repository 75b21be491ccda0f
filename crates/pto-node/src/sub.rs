//! What a sub function sees: [`SubContext`] and [`MappedArgs`] (NODE_RUNTIME.md §5, last
//! paragraph).
//!
//! `MappedArgs` gives typed access to the task's tensors: read for every tag, write only for
//! write-tagged ones (`Output`, `InOut`, `OutputExisting`). Access copies (copy-in/copy-out
//! through the bounds-checked buffer helpers), so this crate needs no `unsafe`; the task holds
//! a use of every buffer it names, so no host access or later task overlaps it.

use std::fmt;
use std::sync::Arc;

use pto_types::{Tensor, TensorTag};

use crate::buffer::{BufferInner, Element};
use crate::report::NodeTaskId;

/// The error a sub function returns; its message becomes the task's failure message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskError(String);

impl TaskError {
    pub fn new(message: impl Into<String>) -> TaskError {
        TaskError(message.into())
    }

    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TaskError {}

impl From<&str> for TaskError {
    fn from(s: &str) -> TaskError {
        TaskError(s.to_string())
    }
}

impl From<String> for TaskError {
    fn from(s: String) -> TaskError {
        TaskError(s)
    }
}

impl From<crate::error::BufferError> for TaskError {
    fn from(e: crate::error::BufferError) -> TaskError {
        TaskError(e.to_string())
    }
}

/// Where a sub function runs.
#[derive(Clone, Debug)]
pub struct SubContext {
    /// The sub worker's index.
    pub worker: usize,
    pub task: NodeTaskId,
    pub label: Option<String>,
    /// Group members: `(index, size)`; `(0, 1)` for a single task.
    pub member: (u32, u32),
}

/// The tensors and scalars of a sub task, with typed access.
pub struct MappedArgs {
    tensors: Vec<(TensorTag, Tensor, Arc<BufferInner>)>,
    scalars: Vec<u64>,
}

impl fmt::Debug for MappedArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedArgs")
            .field("tensors", &self.tensors.len())
            .field("scalars", &self.scalars)
            .finish()
    }
}

impl MappedArgs {
    pub(crate) fn new(
        tensors: Vec<(TensorTag, Tensor, Arc<BufferInner>)>,
        scalars: Vec<u64>,
    ) -> MappedArgs {
        MappedArgs { tensors, scalars }
    }

    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }

    pub fn tensor(&self, i: usize) -> Option<&Tensor> {
        self.tensors.get(i).map(|(_, t, _)| t)
    }

    pub fn tag(&self, i: usize) -> Option<TensorTag> {
        self.tensors.get(i).map(|(tag, _, _)| *tag)
    }

    pub fn scalars(&self) -> &[u64] {
        &self.scalars
    }

    /// Scalar `j` as its `u64` bits.
    pub fn scalar(&self, j: usize) -> Result<u64, TaskError> {
        self.scalars.get(j).copied().ok_or_else(|| {
            TaskError(format!(
                "no scalar {j} (the task has {})",
                self.scalars.len()
            ))
        })
    }

    fn entry<T: Element>(
        &self,
        i: usize,
    ) -> Result<&(TensorTag, Tensor, Arc<BufferInner>), TaskError> {
        let Some(entry) = self.tensors.get(i) else {
            return Err(TaskError(format!(
                "no tensor {i} (the task has {})",
                self.tensors.len()
            )));
        };
        if !T::accepts(entry.1.dtype()) {
            return Err(TaskError(format!(
                "tensor {i} holds {}, not {}",
                entry.1.dtype(),
                T::DTYPE
            )));
        }
        Ok(entry)
    }

    /// Tensor `i`'s elements in row-major order of its shape.
    pub fn read<T: Element>(&self, i: usize) -> Result<Vec<T>, TaskError> {
        let (_, t, b) = self.entry::<T>(i)?;
        Ok(b.gather(t)?)
    }

    /// Writes tensor `i` (write-tagged) from `data`, row-major, exactly `numel` elements.
    pub fn write<T: Element>(&self, i: usize, data: &[T]) -> Result<(), TaskError> {
        let (tag, t, b) = self.entry::<T>(i)?;
        if !tag.writes() {
            return Err(TaskError(format!(
                "tensor {i} is tagged {tag:?}; only Output, InOut and OutputExisting tensors are writable"
            )));
        }
        if data.len() as u64 != t.numel() {
            return Err(TaskError(format!(
                "tensor {i} has {} elements, got {}",
                t.numel(),
                data.len()
            )));
        }
        Ok(b.scatter(t, data)?)
    }

    /// Calls `f` with tensor `i` as a slice (a copy).
    pub fn with_slice<T: Element, R>(
        &self,
        i: usize,
        f: impl FnOnce(&[T]) -> R,
    ) -> Result<R, TaskError> {
        let data = self.read::<T>(i)?;
        Ok(f(&data))
    }

    /// Calls `f` with write-tagged tensor `i` as a mutable slice, then writes it back.
    pub fn with_slice_mut<T: Element, R>(
        &self,
        i: usize,
        f: impl FnOnce(&mut [T]) -> R,
    ) -> Result<R, TaskError> {
        let mut data = self.read::<T>(i)?;
        let out = f(&mut data);
        self.write(i, &data)?;
        Ok(out)
    }
}
