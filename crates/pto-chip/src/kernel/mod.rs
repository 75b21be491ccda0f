//! The kernel ABI: what a simulated core calls and what a kernel sees.
//!
//! Implements CHIP_RUNTIME.md §1.4 (kernels and tensors), the SPMD fields of §2.3 and the
//! cooperative cancellation of §5.3 and §6.4.
//!
//! * A kernel is a plain function `fn(&mut KernelCtx<'_>)` ([`KernelFn`]) or, for in-process
//!   tests and endpoints, a closure. [`register_kernel!`](crate::register_kernel) defines a
//!   `pub static NAME: KernelRef` and registers it under a name; [`find_kernel`] maps names back
//!   to [`KernelRef`]s (the chip binds kernels by name, so ids never cross a process boundary).
//! * The runtime binds a task's tensor arguments as [`BoundTensor`]s (descriptor, host address,
//!   writable flag) and builds one [`KernelCtx`] per invocation (one block on one core).
//! * A kernel reads tensors through [`View`]s, writes them through [`ViewMut`]s, reads scalars
//!   as any [`Scalar`] and polls [`KernelCtx::cancelled`].
//! * A kernel runs on whichever thread of the chip takes its block: an executor, a gang thread,
//!   or — for a one-block AIC/AIV task whose kernel returned within 20 µs the last time it ran
//!   — the thread that called `ChipWorker::run`, while that thread waits (for ring space, a
//!   tensor's producer or the end of the run). Do not rely on the thread's identity or its
//!   thread-locals, and do not wait in a kernel for something only the caller of `run` can do.
//!   A kernel that may loop for long should poll [`KernelCtx::cancelled`]: the watchdog
//!   cancels a run that stops progressing, and polling is how a kernel on the calling thread
//!   lets that run return.
//!
//! Module map: `registry` (names, the macro, closures), `element` (element and scalar types),
//! `ctx` (bound tensors, the context and its per-invocation ledger), `view` (strided views and
//! the numbered safety rules R1–R5 that every `unsafe` block in this module cites).

use std::fmt;

// The kernel ABI hands kernels raw views of run memory (rules R1-R5).
#[allow(unsafe_code)]
mod ctx;
mod element;
mod registry;
#[allow(unsafe_code)]
mod view;

pub use ctx::{BoundTensor, KernelCtx};
pub use element::{Element, Scalar};
pub use registry::{
    KernelDef, KernelNameError, KernelRef, find_kernel, in_kernel, kernel_registry_problems,
    register_kernel_closure,
};
pub use view::{View, ViewIter, ViewMut, block_chunk};

#[doc(hidden)]
pub use inventory as __inventory;
#[doc(hidden)]
pub use registry::__KernelRegistration;

/// A kernel function: runs one block of a task on one simulated core.
pub type KernelFn = fn(&mut KernelCtx<'_>);

/// The kind of core a kernel runs on (§1.2): the cube core of a cluster or one of its two
/// vector cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoreType {
    /// Cube core (one per cluster).
    Aic,
    /// Vector core (two per cluster).
    Aiv,
}

impl fmt::Display for CoreType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreType::Aic => f.write_str("AIC"),
            CoreType::Aiv => f.write_str("AIV"),
        }
    }
}

/// A simulated core's chip-wide id (§1.2): with `C` clusters, ids `0..C` are AIC and `C..3C`
/// are AIV; cluster `k` is `{AIC k, AIV C+2k, AIV C+2k+1}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoreId(pub u32);

impl CoreId {
    /// The core's type on a chip with `clusters` clusters, or `None` when the id is `≥ 3C`.
    pub fn core_type(self, clusters: u32) -> Option<CoreType> {
        let id = u64::from(self.0);
        let c = u64::from(clusters);
        match id {
            _ if id < c => Some(CoreType::Aic),
            _ if id < 3 * c => Some(CoreType::Aiv),
            _ => None,
        }
    }

    /// The cluster the core belongs to, or `None` when the id is `≥ 3C`.
    pub fn cluster(self, clusters: u32) -> Option<u32> {
        match self.core_type(clusters)? {
            CoreType::Aic => Some(self.0),
            CoreType::Aiv => Some((self.0 - clusters) / 2),
        }
    }

    /// The swimlane name of the core (§8): `AIC3`, `AIV12`, numbered by the chip-wide id (so
    /// with 8 clusters the first vector core is `AIV8`). An id `≥ 3C` is shown as `CORE<id>`.
    pub fn label(self, clusters: u32) -> String {
        match self.core_type(clusters) {
            Some(ty) => format!("{ty}{}", self.0),
            None => format!("CORE{}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_core_id_labels_and_clusters() {
        let c = 8;
        assert_eq!(CoreId(0).label(c), "AIC0");
        assert_eq!(CoreId(3).label(c), "AIC3");
        assert_eq!(CoreId(8).label(c), "AIV8");
        assert_eq!(CoreId(12).label(c), "AIV12");
        assert_eq!(CoreId(23).label(c), "AIV23");
        assert_eq!(CoreId(24).label(c), "CORE24");
        assert_eq!(CoreId(3).core_type(c), Some(CoreType::Aic));
        assert_eq!(CoreId(12).core_type(c), Some(CoreType::Aiv));
        assert_eq!(CoreId(24).core_type(c), None);
        // Cluster k = {AIC k, AIV C+2k, AIV C+2k+1}.
        assert_eq!(CoreId(2).cluster(c), Some(2));
        assert_eq!(CoreId(12).cluster(c), Some(2));
        assert_eq!(CoreId(13).cluster(c), Some(2));
        assert_eq!(CoreId(24).cluster(c), None);
        assert_eq!(CoreId(u32::MAX).label(u32::MAX), "AIV4294967295");
        assert_eq!(CoreType::Aiv.to_string(), "AIV");
    }
}
