//! Dependency inference for one tensor argument (CHIP_RUNTIME.md §3.2 steps 8–10): the one
//! definition that submits, graph recording ([`crate::replay`]) and replays all call, so that a
//! recorded edge and an inferred edge can only differ when the TensorMap state differs.

use pto_types::RING_COUNT;
use pto_types::TensorTag;
use pto_types::geometry::Overlap;

use crate::diag::deps::EdgeKind;
use crate::task_id::TaskId;
use crate::tensor::TensorDesc;
use crate::tensormap::{TensorMap, Visit};

/// The argument is looked up in the TensorMap (step 9): a read of a tracked, non-empty tensor.
pub(crate) fn looks_up(tag: TensorTag, desc: &TensorDesc) -> bool {
    matches!(tag, TensorTag::Input | TensorTag::InOut) && !desc.manual_dep() && !desc.is_empty()
}

/// The argument's task becomes a TensorMap writer of it (step 10).
pub(crate) fn writes(tag: TensorTag, desc: &TensorDesc) -> bool {
    matches!(tag, TensorTag::InOut | TensorTag::OutputExisting)
        && !desc.manual_dep()
        && !desc.is_empty()
}

/// Calls `edge(producer, retain, kind)` for every producer inference finds for one existing
/// tensor argument: its creator, then every live TensorMap writer that overlaps it. An INOUT
/// that covers a writer's region supersedes it: the entry is freed, so later readers depend on
/// the INOUT task alone.
pub(crate) fn arg_producers(
    map: &mut TensorMap,
    observed: &[u64; RING_COUNT],
    tag: TensorTag,
    desc: &TensorDesc,
    mut edge: impl FnMut(TaskId, bool, EdgeKind),
) {
    if tag == TensorTag::Output {
        return;
    }
    if let Some(owner) = desc.owner() {
        edge(owner, true, EdgeKind::Creator);
    }
    if looks_up(tag, desc) {
        let inout = tag == TensorTag::InOut;
        map.lookup(desc, observed, |hit| {
            edge(hit.producer, false, EdgeKind::TensorMap);
            if inout && hit.overlap == Overlap::Covered {
                Visit::Remove
            } else {
                Visit::Keep
            }
        });
    }
}
