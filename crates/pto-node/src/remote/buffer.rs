//! Buffers of a remote worker's session (`Worker::create_remote_buffer`): the bytes live in the
//! server's Worker; this process holds a handle, names it in tasks for that worker, and moves
//! data with chunked `WriteBuffer` / `ReadBuffer` streams.

use std::sync::Arc;

use pto_types::{BufferId, BufferRef, DType, Tensor};

use super::Connection;
use crate::Element;
use crate::buffer::BufferInner;
use crate::error::BufferError;

/// A buffer on remote worker [`RemoteBuffer::worker`]. Name [`RemoteBuffer::tensor`] (or a
/// view) in tasks submitted to that worker only; a task for another worker, a sub task, or a
/// host buffer aimed at a remote worker fails at submit. Dropping the last handle frees it on
/// the server.
#[derive(Clone, Debug)]
pub struct RemoteBuffer {
    inner: Arc<BufferInner>,
    shared: Arc<Shared>,
}

struct Shared {
    conn: Arc<Connection>,
    worker: usize,
    handle: u64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBuffer")
            .field("worker", &self.worker)
            .field("handle", &self.handle)
            .finish()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.conn.free(self.handle);
    }
}

impl RemoteBuffer {
    /// Creates `nbytes` zero bytes in the session of remote worker `worker`; `id` is the
    /// identity this Worker's tasks name it by.
    pub(crate) fn create(
        conn: Arc<Connection>,
        worker: usize,
        id: BufferId,
        nbytes: usize,
    ) -> Result<RemoteBuffer, BufferError> {
        let handle = conn
            .create_buffer(nbytes as u64)
            .map_err(|reason| BufferError::Create {
                bytes: nbytes,
                reason,
            })?;
        let inner = BufferInner::new_remote(id, worker as u32, handle.buffer_id, nbytes);
        Ok(RemoteBuffer {
            inner,
            shared: Arc::new(Shared {
                conn,
                worker,
                handle: handle.buffer_id,
            }),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<BufferInner> {
        &self.inner
    }

    /// The remote worker holding the bytes (its `submit_next_level` index).
    pub fn worker(&self) -> usize {
        self.shared.worker
    }

    /// The identity tasks name it by.
    pub fn id(&self) -> BufferId {
        self.inner.id()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.inner.bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A reference to put into tensors.
    pub fn buffer_ref(&self) -> BufferRef {
        self.inner.buffer_ref()
    }

    /// A row-major tensor over the buffer from byte 0.
    pub fn tensor(
        &self,
        shape: &[u32],
        dtype: DType,
    ) -> Result<Tensor, pto_types::args::ArgsError> {
        Tensor::contiguous(self.buffer_ref(), shape, dtype)
    }

    /// Copies `src` into the buffer from element `offset` (a `WriteBuffer` stream).
    pub fn write_from<T: Element>(&self, offset: usize, src: &[T]) -> Result<(), BufferError> {
        let (start, bytes) = self.span::<T>(offset, src.len())?;
        let data = crate::buffer::to_bytes(src)?;
        debug_assert_eq!(data.len(), bytes);
        self.shared
            .conn
            .write(self.shared.handle, start as u64, &data)
            .map_err(|reason| BufferError::Remote { reason })
    }

    /// `count` elements from element `offset` (a `ReadBuffer` stream).
    pub fn read_vec<T: Element>(&self, offset: usize, count: usize) -> Result<Vec<T>, BufferError> {
        let (start, bytes) = self.span::<T>(offset, count)?;
        let data = self
            .shared
            .conn
            .read(self.shared.handle, start as u64, bytes as u64)
            .map_err(|reason| BufferError::Remote { reason })?;
        if data.len() != bytes {
            return Err(BufferError::Remote {
                reason: format!("the server sent {} bytes, not {bytes}", data.len()),
            });
        }
        crate::buffer::from_bytes(&data)
    }

    /// The byte range of `count` elements of `T` from element `offset`, checked.
    fn span<T>(&self, offset: usize, count: usize) -> Result<(usize, usize), BufferError> {
        let size = std::mem::size_of::<T>();
        let len = self.len() / size;
        let end = offset.checked_add(count).filter(|&e| e <= len);
        match end {
            Some(_) => Ok((offset * size, count * size)),
            None => Err(BufferError::OutOfBounds {
                offset,
                end: offset.saturating_add(count),
                len,
            }),
        }
    }
}
