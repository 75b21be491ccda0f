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
    /// The TensorMap entry an argument leaves behind (step 10), if any: a writer's, else the
    /// reader entry of [`WarPolicy::reader_role`].
    pub(crate) fn entry_role(self, tag: TensorTag, desc: &TensorDesc) -> Option<Role> {
        if writes(tag, desc) {
            Some(Role::Writer)
        } else {
            self.reader_role(tag, desc)
        }
    }

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

/// Frees the writer entries whose bytes `desc` (an argument the calling task writes) covers
/// and whose producer that task waits for (`waits_for`; its own entries count). This is the
/// supersession an INOUT makes, for a write that does not read: a later reader of those bytes
/// finds the calling task, which runs after the freed entries' producers, so the reader is
/// ordered after them as before. Only writer entries go; a reader entry is superseded only as
/// [`arg_producers`] says. Without it, a region rewritten by tasks that each wait for the last
/// writer (consecutive replays of a graph) holds one entry per task still running, and every
/// lookup of it finds them all.
pub(crate) fn supersede(
    map: &mut TensorMap,
    observed: &[u64; RING_COUNT],
    desc: &TensorDesc,
    waits_for: impl Fn(TaskId) -> bool,
) {
    map.lookup(desc, observed, |hit| match hit.role {
        Role::Writer if hit.overlap == Overlap::Covered && waits_for(hit.producer) => Visit::Remove,
        _ => Visit::Keep,
    });
}

#[cfg(test)]
mod tests {
    use pto_types::DType;

    use super::*;

    const X: u64 = 0x1000;

    fn id(local: u64) -> TaskId {
        TaskId::new(0, local)
    }

    /// Elements `start..start + len` of a 64-element f32 buffer at `X`.
    fn cells(start: u64, len: u32) -> TensorDesc {
        let buffer = TensorDesc::contiguous(X, 64 * 4, &[64], DType::F32).unwrap();
        buffer.view(&[len], &[start as u32]).unwrap()
    }

    /// The producers a read of `probe` finds, sorted.
    fn readers_find(map: &mut TensorMap, probe: &TensorDesc) -> Vec<TaskId> {
        let mut found = Vec::new();
        let observed = [0; RING_COUNT];
        arg_producers(
            map,
            &observed,
            TensorTag::Input,
            probe,
            |p, _, _| found.push(p),
            |_| {},
        );
        found.sort_unstable();
        found
    }

    #[test]
    fn a_write_supersedes_only_covered_writers_it_waits_for() {
        let mut map = TensorMap::new(64, 16, [32; RING_COUNT]);
        let observed = [0; RING_COUNT];
        map.insert(id(0), cells(0, 4)).unwrap();
        map.insert(id(1), cells(4, 4)).unwrap();
        map.insert(id(2), cells(6, 4)).unwrap();
        map.insert_as(id(3), cells(0, 8), Role::Reader { tracked: true })
            .unwrap();
        // Task 4 writes elements 0..8 and waits for task 0 (and for 2, which it only half
        // covers), not for task 1.
        let waits = [id(0), id(2)];
        supersede(&mut map, &observed, &cells(0, 8), |p| waits.contains(&p));
        map.insert(id(4), cells(0, 8)).unwrap();
        // Task 0's entry is gone: a reader finds task 4, which runs after it. Task 1 (not
        // waited for) and task 2 (not covered) stay, as does the reader entry.
        assert_eq!(
            readers_find(&mut map, &cells(0, 10)),
            vec![id(1), id(2), id(4)]
        );
        let mut readers = 0;
        map.lookup(&cells(0, 8), &observed, |hit| {
            readers += usize::from(matches!(hit.role, Role::Reader { .. }));
            Visit::Keep
        });
        assert_eq!(readers, 1);
    }

    #[test]
    fn rewriting_a_region_after_waiting_for_its_writer_keeps_one_entry() {
        // Consecutive replays: each writer waits for the last and rewrites the same bytes.
        let mut map = TensorMap::new(64, 16, [32; RING_COUNT]);
        let observed = [0; RING_COUNT];
        for k in 0..20u64 {
            let last = k.checked_sub(1).map(id);
            supersede(&mut map, &observed, &cells(8, 8), |p| Some(p) == last);
            map.insert(id(k), cells(8, 8)).unwrap();
            assert_eq!(readers_find(&mut map, &cells(9, 2)), vec![id(k)]);
        }
        assert_eq!(map.available(), 63);
    }
}
