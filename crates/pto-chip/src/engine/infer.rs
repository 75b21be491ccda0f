//! Dependency inference for one tensor argument (CHIP_RUNTIME.md §3.2 steps 8–10): the one
//! definition that submits, graph recording ([`crate::replay`]) and replays all call, so that a
//! recorded edge and an inferred edge can only differ when the TensorMap state differs.

use pto_types::RING_COUNT;
use pto_types::TensorTag;
use pto_types::geometry::Overlap;

use crate::diag::deps::EdgeKind;
use crate::task_id::TaskId;
use crate::tensor::TensorDesc;
use crate::tensormap::{Role, TensorMap, Visit};

/// The argument is looked up in the TensorMap for writers (step 9): a read of a tracked,
/// non-empty tensor.
pub(crate) fn looks_up(tag: TensorTag, desc: &TensorDesc) -> bool {
    tag.reads() && !desc.manual_dep() && !desc.is_empty()
}

/// The argument's task becomes a TensorMap writer of it (step 10).
pub(crate) fn writes(tag: TensorTag, desc: &TensorDesc) -> bool {
    matches!(tag, TensorTag::InOut | TensorTag::OutputExisting)
        && !desc.manual_dep()
        && !desc.is_empty()
}

/// How a run treats write-after-read (CHIP_RUNTIME.md §3.8): which reads leave reader entries
/// in the TensorMap, and of which kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WarPolicy {
    /// Every INPUT is tracked (`CallConfig::track_war`); a `TrackedInput` always is.
    pub(crate) track_all: bool,
    /// Untracked reads leave check-only entries, so that a writer can tell it overlaps a read
    /// nothing orders it after (`war_check` report or strict).
    pub(crate) check: bool,
}

impl WarPolicy {
    /// The reader entry a read leaves behind (step 10), if any.
    pub(crate) fn reader_role(self, tag: TensorTag, desc: &TensorDesc) -> Option<Role> {
        if desc.manual_dep() || desc.is_empty() {
            return None;
        }
        match tag {
            TensorTag::TrackedInput => Some(Role::Reader { tracked: true }),
            TensorTag::Input if self.track_all => Some(Role::Reader { tracked: true }),
            TensorTag::Input if self.check => Some(Role::Reader { tracked: false }),
            _ => None,
        }
    }
}

/// Calls `edge(producer, retain, kind)` for every producer inference finds for one existing
/// tensor argument: its creator, then every live TensorMap writer that overlaps a read, then,
/// for a write, every tracked reader of overlapping bytes (write-after-read). An INOUT that
/// covers a writer's region supersedes it: the entry is freed, so later readers depend on the
/// INOUT task alone. A write that covers a reader's region supersedes the reader entry in the
/// same way (CHIP_RUNTIME.md §3.8): a later INOUT finds this writer and so waits for the
/// reader through it; a later OUTPUT_EXISTING is unordered against this writer anyway
/// (write-after-write with OUTPUT_EXISTING is the orchestration's to order), and once it is
/// ordered after this writer it is after the reader too.
///
/// A check-only reader entry that a write overlaps goes to `unordered` instead: the caller
/// decides whether anything else orders the two (the write-after-read check).
pub(crate) fn arg_producers(
    map: &mut TensorMap,
    observed: &[u64; RING_COUNT],
    tag: TensorTag,
    desc: &TensorDesc,
    mut edge: impl FnMut(TaskId, bool, EdgeKind),
    mut unordered: impl FnMut(TaskId),
) {
    if tag == TensorTag::Output {
        return;
    }
    if let Some(owner) = desc.owner() {
        edge(owner, true, EdgeKind::Creator);
    }
    let reads = looks_up(tag, desc);
    let finds_readers = writes(tag, desc) && map.has_readers();
    if !(reads || finds_readers) {
        return;
    }
    let inout = tag == TensorTag::InOut;
    map.lookup(desc, observed, |hit| match hit.role {
        Role::Writer if reads => {
            edge(hit.producer, false, EdgeKind::TensorMap);
            if inout && hit.overlap == Overlap::Covered {
                Visit::Remove
            } else {
                Visit::Keep
            }
        }
        Role::Reader { tracked } if finds_readers => {
            if tracked {
                edge(hit.producer, false, EdgeKind::War);
            } else {
                unordered(hit.producer);
            }
            if hit.overlap == Overlap::Covered {
                Visit::Remove
            } else {
                Visit::Keep
            }
        }
        _ => Visit::Keep,
    });
}
