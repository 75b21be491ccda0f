//! Chip memory control (NODE_RUNTIME.md §1.3, §1.5, §1.6): device tensors allocated on a chip
//! with `alloc_child_tensor`, filled and read back with `copy_to` / `copy_from` (whole tensors,
//! equal sizes), released with `free`, on the Worker (between runs) and on the Orchestrator
//! (before the run's first submit).
//!
//! A [`DeviceTensor`] is a buffer of this Worker (identity `(DEVICE_BUFFER_OWNER, a Worker
//! buffer id, 0)`, scoped by chip in the TensorMap) whose memory is `Memory::Device { chip,
//! alloc }`: it has no host bytes in this process. The in-process lane re-points its tensors at
//! the chip's `ChipWorker::device_buffer`; a chip child receives a wire tensor with space =
//! device, device worker = the chip, segment = the allocation id, and resolves it the same way.

use std::sync::Arc;

use pto_chip::DEVICE_BUFFER_OWNER;
use pto_types::{BufferId, DType, Tensor};

use crate::buffer::{BufferInner, HostBuffer};
use crate::endpoint::{ControlCmd, ControlReply};
use crate::engine::Lane;
use crate::error::ControlError;
use crate::worker::WorkerShared;

/// Alignment of device allocations made by `alloc_child_tensor`.
const DEVICE_TENSOR_ALIGN: u64 = 64;

/// A row-major tensor in one chip's device memory (`alloc_child_tensor`). Pass
/// [`DeviceTensor::tensor`] (or a view of it) in `TaskArgs` of tasks for that chip only; release
/// it with `free`.
#[derive(Debug)]
pub struct DeviceTensor {
    inner: Arc<BufferInner>,
    tensor: Tensor,
    worker_uid: u64,
    chip: usize,
    alloc: u64,
    address: u64,
}

impl DeviceTensor {
    /// The chip holding the allocation.
    pub fn worker(&self) -> usize {
        self.chip
    }

    /// The tensor to name in `TaskArgs` (its buffer identity is this Worker's).
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    /// Bytes of the allocation (the tensor's size).
    pub fn nbytes(&self) -> u64 {
        self.inner.bytes() as u64
    }

    /// The allocation's device address on its chip.
    pub fn device_address(&self) -> u64 {
        self.address
    }

    /// The identity tasks name it by.
    pub fn id(&self) -> BufferId {
        self.inner.id()
    }
}

impl WorkerShared {
    fn chip_lane(&self, worker: usize) -> Result<Lane, ControlError> {
        if self.options.level >= 4 {
            return Err(ControlError::NoChips);
        }
        Ok(Lane::Chip(worker))
    }

    fn check_device(&self, t: &DeviceTensor) -> Result<(), ControlError> {
        if t.worker_uid != self.uid {
            return Err(ControlError::Foreign {
                what: format!("device tensor {:?}", t.id()),
            });
        }
        Ok(())
    }

    fn check_host(&self, dst: &DeviceTensor, host: &HostBuffer) -> Result<(), ControlError> {
        self.check_device(dst)?;
        if self.buffers.resolve(&host.buffer_ref()).is_none() {
            return Err(ControlError::Foreign {
                what: format!("host buffer {:?}", host.id()),
            });
        }
        if host.len() as u64 != dst.nbytes() {
            return Err(ControlError::SizeMismatch {
                device: dst.nbytes(),
                host: host.len() as u64,
            });
        }
        Ok(())
    }

    pub(crate) fn alloc_child_tensor(
        &self,
        worker: usize,
        shape: &[u32],
        dtype: DType,
        in_run: Option<u64>,
    ) -> Result<DeviceTensor, ControlError> {
        let lane = self.chip_lane(worker)?;
        let numel = shape
            .iter()
            .try_fold(1u64, |acc, &n| acc.checked_mul(u64::from(n)));
        let Some(bytes) = numel.and_then(|n| n.checked_mul(dtype.size() as u64)) else {
            return Err(ControlError::BadShape {
                reason: format!("{shape:?} of {dtype} overflows"),
            });
        };
        // Check the view before allocating, against a detached reference of the same size.
        let probe = pto_types::BufferRef::detached(
            BufferId {
                owner_uid: DEVICE_BUFFER_OWNER,
                buffer_id: 0,
                generation: 0,
            },
            bytes,
        );
        Tensor::contiguous(probe, shape, dtype).map_err(|e| ControlError::BadShape {
            reason: e.to_string(),
        })?;
        let reply = self.control(
            lane,
            ControlCmd::Malloc {
                bytes,
                align: DEVICE_TENSOR_ALIGN,
            },
            in_run,
        )?;
        let ControlReply::Alloc { alloc, address } = reply else {
            return Err(unexpected(worker, "MALLOC"));
        };
        let id = BufferId {
            owner_uid: DEVICE_BUFFER_OWNER,
            buffer_id: self.next_buffer_id(),
            generation: 0,
        };
        let inner = BufferInner::new_device(id, worker as u32, alloc, bytes as usize);
        let tensor = Tensor::contiguous(inner.buffer_ref(), shape, dtype).map_err(|e| {
            ControlError::BadShape {
                reason: e.to_string(),
            }
        })?;
        self.buffers.insert(&inner);
        Ok(DeviceTensor {
            inner,
            tensor,
            worker_uid: self.uid,
            chip: worker,
            alloc,
            address,
        })
    }

    pub(crate) fn copy_to_device(
        &self,
        dst: &DeviceTensor,
        src: &HostBuffer,
        in_run: Option<u64>,
    ) -> Result<(), ControlError> {
        self.check_host(dst, src)?;
        let cmd = ControlCmd::CopyTo {
            alloc: dst.alloc,
            offset: 0,
            host: Arc::clone(src.inner()),
        };
        match self.control(self.chip_lane(dst.chip)?, cmd, in_run)? {
            ControlReply::Done => Ok(()),
            _ => Err(unexpected(dst.chip, "COPY_TO")),
        }
    }

    pub(crate) fn copy_from_device(
        &self,
        src: &DeviceTensor,
        dst: &HostBuffer,
        in_run: Option<u64>,
    ) -> Result<(), ControlError> {
        self.check_host(src, dst)?;
        let cmd = ControlCmd::CopyFrom {
            alloc: src.alloc,
            offset: 0,
            host: Arc::clone(dst.inner()),
        };
        match self.control(self.chip_lane(src.chip)?, cmd, in_run)? {
            ControlReply::Done => Ok(()),
            _ => Err(unexpected(src.chip, "COPY_FROM")),
        }
    }

    pub(crate) fn free_device(
        &self,
        t: DeviceTensor,
        in_run: Option<u64>,
    ) -> Result<u64, ControlError> {
        self.check_device(&t)?;
        let cmd = ControlCmd::Free { alloc: t.alloc };
        match self.control(self.chip_lane(t.chip)?, cmd, in_run)? {
            ControlReply::Bytes(b) => {
                self.buffers.remove(t.id());
                Ok(b)
            }
            _ => Err(unexpected(t.chip, "FREE")),
        }
    }

    pub(crate) fn committed(&self, chip: usize, in_run: Option<u64>) -> Result<u64, ControlError> {
        match self.control(
            self.chip_lane(chip)?,
            ControlCmd::CommittedDeviceMemory,
            in_run,
        )? {
            ControlReply::Bytes(b) => Ok(b),
            _ => Err(unexpected(chip, "COMMITTED_DEVICE_MEMORY")),
        }
    }
}

fn unexpected(chip: usize, op: &str) -> ControlError {
    ControlError::Endpoint {
        worker: format!("chip {chip}"),
        message: format!("unexpected reply to {op}"),
    }
}
