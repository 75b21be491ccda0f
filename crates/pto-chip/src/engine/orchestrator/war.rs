//! The write-after-read check (CHIP_RUNTIME.md §3.8): with `track_war` off, a task that writes
//! bytes an earlier task reads is not ordered after it, and the write can land while the read
//! is still under way. The check makes that visible instead of silent.
//!
//! With `war_check` report or strict, untracked reads leave check-only reader entries in the
//! TensorMap ([`crate::tensormap::Role::Reader`]). A writer's lookup hands the ones it overlaps
//! to [`WarCheckState::note`]; before the writer is published, [`OrchCore::check_war`] looks
//! at each such reader under the graph lock: one that has finished, or that the writer is
//! already ordered after (a producer of the writer, or an ancestor of one: the reader's
//! consumer lists reach it) is fine; any other is a hazard. The first hazard of a run is kept
//! with the number found ([`WarCheckState::report`]); under strict it fails the run at once
//! (WAR_HAZARD), before the writer can run.

use pto_types::{ErrorCode, WarCheck};

use crate::error::{ChipError, Detector, OrchResult};
use crate::task_id::TaskId;

use super::{ArgTensor, OrchCore, payload_names};

/// Most tasks the ordering search visits per reader: past it, the pair counts as ordered
/// (the check never reports what it could not show).
const ORDER_SEARCH_BUDGET: usize = 4096;

/// The check's state for one run.
#[derive(Debug, Default)]
pub(crate) struct WarCheckState {
    /// Check-only readers the current submit's writes overlap: (reader, argument index).
    unordered: Vec<(TaskId, usize)>,
    /// Hazards found in this run.
    found: u64,
    /// The first one, described.
    first: Option<String>,
    /// Reads the check could not watch: the TensorMap had no free entry for them (its entries
    /// never make a submit wait).
    pub(crate) skipped: u64,
}

impl WarCheckState {
    /// Some lookup noted a reader that the next [`OrchCore::check_war`] checks.
    pub(crate) fn has_unordered(&self) -> bool {
        !self.unordered.is_empty()
    }

    /// A writer argument `arg` overlaps the check-only read of `reader`.
    pub(crate) fn note(&mut self, reader: TaskId, arg: usize) {
        self.unordered.push((reader, arg));
    }

    /// The run's findings, each once: the first hazard and how many there were, and how many
    /// reads the check could not watch.
    pub(crate) fn report(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(first) = &self.first {
            out.push(match self.found {
                1 => format!("write-after-read hazard: {first}"),
                n => format!(
                    "write-after-read hazard: {first} ({} more in this run)",
                    n - 1
                ),
            });
        }
        if self.skipped > 0 {
            out.push(format!(
                "the write-after-read check did not watch {} read(s): the TensorMap was full \
                 (raise the chip's tensormap_pool to check every read)",
                self.skipped
            ));
        }
        out
    }
}

impl OrchCore {
    /// Checks the readers the writes of task `id` overlap against its producers (module doc).
    /// Strict: the first hazard fails the run.
    pub(crate) fn check_war(
        &mut self,
        id: TaskId,
        kernels: &[Option<crate::kernel::KernelRef>; 3],
        tensors: &[ArgTensor],
        producers: &[(TaskId, bool)],
    ) -> OrchResult<()> {
        if self.war.unordered.is_empty() {
            return Ok(());
        }
        // The search walks the graph's consumer lists: queued tasks must be in it.
        self.flush()?;
        let mut candidates = std::mem::take(&mut self.war.unordered);
        candidates.retain(|(r, _)| *r != id && producers.iter().all(|(p, _)| p != r));
        // A reader overlapped by several written arguments is one hazard, named by the first
        // (the lists are a few entries long).
        let mut seen: Vec<TaskId> = Vec::with_capacity(candidates.len());
        candidates.retain(|&(r, _)| {
            let first = !seen.contains(&r);
            seen.push(r);
            first
        });
        // Under the lock: the readers still running that nothing orders before `id`, and the
        // first one described.
        let (hazards, first) = {
            let graph = self.run.lock_graph_as_offerer();
            let targets: Vec<TaskId> = producers.iter().map(|&(p, _)| p).collect();
            let hazards: Vec<(TaskId, usize)> = candidates
                .iter()
                .copied()
                .filter(|&(reader, _)| {
                    graph.is_pending(reader)
                        && !graph.reaches(reader, &targets, ORDER_SEARCH_BUDGET)
                })
                .collect();
            let first = hazards.first().map(|&(r, arg)| (arg, graph.describe(r)));
            (hazards.len(), first)
        };
        candidates.clear();
        self.war.unordered = candidates;
        let Some((arg, reader_text)) = first else {
            return Ok(());
        };
        self.war.found += hazards as u64;
        let written = match tensors.get(arg) {
            Some(ArgTensor::Existing { tag, desc }) => format!("{} {desc}", tag.name()),
            _ => "a tensor".to_string(),
        };
        let replaying = match &self.replaying {
            Some(graph) => format!(", replaying graph {graph:?}"),
            None => String::new(),
        };
        let text = format!(
            "task {id} ({}{replaying}) writes {written} (argument {arg}) while task \
             {reader_text} may still read it, and nothing orders the two: enable track_war for \
             this chip job, tag the read TrackedInput, or order them with a dependency",
            payload_names(kernels)
        );
        if self.settings.war_check == WarCheck::Strict {
            let mut e = ChipError::new(ErrorCode::WarHazard, Detector::Immediate, text);
            e.task = Some(id);
            return Err(self.fail(e));
        }
        if self.war.first.is_none() {
            tracing::debug!(target: "pto::war", "{text}");
            self.war.first = Some(text);
        }
        Ok(())
    }
}
