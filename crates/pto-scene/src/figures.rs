//! The memory figures of a case, defined once. `pto run` (rows, footer, summary, `--json`),
//! `pto tune`, `pto bench footprint`, the HTML report and Python's `pto.testing` all print
//! these and nothing else:
//!
//! - **arena** (per task, the rows' `arena` column): the bytes a chip reserves to bind the
//!   task's sizing ([`TaskRow::reserved_bytes`], `pto_chip::footprint`).
//! - **device memory** (per case): Σ over chips of what each chip holds reserved when the case
//!   ends: its cached arenas and allocations (`Worker::committed_device_memory`, reported by
//!   the scene). A scene that does not report it gets Σ over chips of the distinct arenas its
//!   tasks bound, which is what the chip's arena cache holds when nothing was evicted.
//! - **heap high-water** (per task and case): Σ over rings of the heap's peak bytes in use.
//!   Heap only; window and dep-pool peaks are per ring, in the HTML report and scope stats.
//!   It depends on timing (how soon tasks retire), so it can differ between runs.
//! - **heap reserved** (per case): Σ over tasks and over the rings *with heap traffic* of the
//!   heap capacity. A ring nobody allocated on holds only the smallest legal heap, which says
//!   nothing about how well a sizing fits.
//! - **heap reserved/high-water**: heap reserved / heap high-water, over the same rings.

use std::collections::BTreeMap;

use pto_types::Resource;

use crate::scene::{CaseResult, TaskRow};
use pto_sizing::report::human_bytes;

/// The memory figures of one case ([module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseFigures {
    /// Device memory per chip, in chip order.
    pub per_chip: Vec<u64>,
    pub heap_reserved: u64,
    pub heap_high_water: u64,
}

impl CaseFigures {
    /// The figures of a case's result.
    pub fn of(result: &CaseResult) -> CaseFigures {
        let (heap_reserved, heap_high_water) = result
            .rows
            .iter()
            .filter_map(TaskRow::heap_fit)
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
        let per_chip = match result.reserved_per_chip.is_empty() {
            false => result.reserved_per_chip.clone(),
            true => distinct_arenas_per_chip(&result.rows),
        };
        CaseFigures {
            per_chip,
            heap_reserved,
            heap_high_water,
        }
    }

    /// Σ over chips.
    pub fn device_memory(&self) -> u64 {
        self.per_chip.iter().sum()
    }

    /// How many times `least` bytes this case's device memory is (the "× leanest" figure).
    pub fn times(&self, least: u64) -> f64 {
        self.device_memory() as f64 / least.max(1) as f64
    }

    /// Heap reserved / heap high-water; `None` without heap traffic.
    pub fn heap_ratio(&self) -> Option<f64> {
        (self.heap_high_water > 0).then(|| self.heap_reserved as f64 / self.heap_high_water as f64)
    }

    /// The ratio as printed: `1.77`, or `-` without heap traffic.
    pub fn heap_ratio_text(&self) -> String {
        self.heap_ratio()
            .map_or("-".to_string(), |r| format!("{r:.2}"))
    }

    /// `device memory 7.88 MiB (chip0 1.97 MiB, …); heap reserved 640.00 KiB, high-water
    /// 362.00 KiB, reserved/high-water 1.77`: the case's footer line.
    pub fn describe(&self) -> String {
        let chips: Vec<String> = self
            .per_chip
            .iter()
            .enumerate()
            .map(|(i, b)| format!("chip{i} {}", human_bytes(*b)))
            .collect();
        format!(
            "device memory {} ({}); heap reserved {}, high-water {}, reserved/high-water {}",
            human_bytes(self.device_memory()),
            chips.join(", "),
            human_bytes(self.heap_reserved),
            human_bytes(self.heap_high_water),
            self.heap_ratio_text()
        )
    }
}

/// The cases that compare as ways of sizing the same work, with their figures: those that
/// passed with every task run (a case that passes by failing on purpose did less work). The
/// scene summaries and the HTML report's chart both take them from here.
pub fn strategies<'a>(
    cases: impl IntoIterator<Item = (&'a str, &'a CaseResult)>,
) -> Vec<(&'a str, CaseFigures)> {
    cases
        .into_iter()
        .filter(|(_, r)| {
            r.passed() && !r.rows.is_empty() && r.rows.iter().all(|row| row.error.is_none())
        })
        .map(|(name, r)| (name, CaseFigures::of(r)))
        .collect()
}

/// The strategy that needs the least device memory, and that memory.
pub fn leanest<'a>(ways: &[(&'a str, CaseFigures)]) -> Option<(&'a str, u64)> {
    ways.iter()
        .map(|(name, f)| (*name, f.device_memory()))
        .min_by_key(|(_, bytes)| *bytes)
}

/// The line printed under every table of these figures.
pub const LEGEND: &str = "device memory = Σ chips' reserved arenas and allocations; heap \
     figures = Σ over tasks and rings with heap traffic (high-water varies with timing)";

/// Per chip, Σ of the distinct arenas its tasks bound (tasks that reserved nothing skipped).
fn distinct_arenas_per_chip(rows: &[TaskRow]) -> Vec<u64> {
    let mut chips: BTreeMap<u32, Vec<(Vec<u64>, u64)>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.arena.is_some()) {
        // Arenas are cached by their values, not by where the values came from.
        let key: Vec<u64> = row
            .sizing
            .iter()
            .flat_map(|s| Resource::ALL.into_iter().flat_map(|r| s.values(r)))
            .collect();
        let arenas = chips.entry(row.chip).or_default();
        if !arenas.iter().any(|(k, _)| *k == key) {
            arenas.push((key, row.reserved_bytes));
        }
    }
    let count = chips.keys().next_back().map_or(0, |c| *c as usize + 1);
    let mut out = vec![0; count];
    for (chip, arenas) in chips {
        out[chip as usize] = arenas.iter().map(|(_, b)| b).sum();
    }
    out
}
