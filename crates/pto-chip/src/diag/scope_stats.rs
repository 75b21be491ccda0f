//! Scope stats (CHIP_RUNTIME.md §7): one sample per scope begin and end, the root scope
//! included, and a metadata line with the effective capacities and their sources.
//!
//! Counters are monotonic (`heap_*` counts cumulative bytes as `lap·H + offset`), so
//! `end − start` is an occupancy and the `*_peak` fields of end records give the high-water
//! marks `pto advise` sizes rings from.

use pto_types::ring_config::resolve::ResolvedSizing;
use pto_types::{RING_COUNT, Resource};
use serde_json::{Value, json};

use crate::error::{ChipError, ResourceKind};

/// Most samples kept per run; later ones are counted as dropped.
pub(crate) const MAX_SAMPLES: usize = 1 << 20;

/// Occupancy counters of one ring at a scope boundary.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub(crate) task_window_start: u64,
    pub(crate) task_window_end: u64,
    pub(crate) heap_start: u64,
    pub(crate) heap_end: u64,
    pub(crate) dep_pool_start: u64,
    pub(crate) dep_pool_end: u64,
}

/// Peaks of one scope, reported on its end record.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Peaks {
    pub(crate) task_window: u64,
    pub(crate) heap: u64,
    pub(crate) heap_largest_alloc: u64,
    pub(crate) dep_pool: u64,
    pub(crate) spill: u64,
}

/// The samples of one run.
#[derive(Default)]
pub(crate) struct ScopeStats {
    samples: Vec<Value>,
    dropped: u64,
}

impl ScopeStats {
    /// Records a scope boundary; `peaks` is `Some` on end records.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &mut self,
        site: &str,
        begin: bool,
        depth: usize,
        ring: usize,
        c: Counters,
        tensormap: usize,
        t_us: f64,
        peaks: Option<Peaks>,
    ) {
        if self.samples.len() >= MAX_SAMPLES {
            self.dropped += 1;
            return;
        }
        let mut sample = json!({
            "seq": self.samples.len() as u64 + self.dropped + 1,
            "site": site,
            "phase": if begin { "begin" } else { "end" },
            "depth": depth,
            "ring": ring,
            "task_window_start": c.task_window_start,
            "task_window_end": c.task_window_end,
            "heap_start": c.heap_start,
            "heap_end": c.heap_end,
            "dep_pool_start": c.dep_pool_start,
            "dep_pool_end": c.dep_pool_end,
            "tensormap": tensormap,
        });
        if let Some(p) = peaks {
            sample["task_window_peak"] = json!(p.task_window);
            sample["heap_peak"] = json!(p.heap);
            sample["heap_largest_alloc"] = json!(p.heap_largest_alloc);
            sample["dep_pool_peak"] = json!(p.dep_pool);
            sample["spill_peak"] = json!(p.spill);
        }
        sample["t_us"] = json!((t_us * 10.0).round() / 10.0);
        self.samples.push(sample);
    }

    /// The file: metadata line, then one sample per line.
    pub(crate) fn render(&self, meta: &Metadata<'_>) -> String {
        let mut out = String::new();
        out.push_str(&meta.to_json(self.dropped).to_string());
        out.push('\n');
        for s in &self.samples {
            out.push_str(&s.to_string());
            out.push('\n');
        }
        out
    }
}

/// What the metadata line says about the run.
pub(crate) struct Metadata<'a> {
    pub(crate) sizing: &'a ResolvedSizing,
    pub(crate) label: Option<&'a str>,
    pub(crate) clusters: u32,
    pub(crate) aicpu_thread_num: u32,
    pub(crate) tensormap_max: usize,
    pub(crate) total: u64,
    pub(crate) error: Option<&'a ChipError>,
}

impl Metadata<'_> {
    fn to_json(&self, dropped: u64) -> Value {
        let values = |r: Resource| -> Vec<u64> { self.sizing.values(r).to_vec() };
        let sources = |r: Resource| -> Vec<&'static str> {
            self.sizing.sources(r).iter().map(|s| s.as_str()).collect()
        };
        let error = match self.error {
            None => Value::Null,
            Some(e) => json!({
                "code": e.code.code(),
                "name": e.code.name(),
                "ring": e.ring,
                "resource": e.resource.map(resource_name),
                "requested": e.requested,
                "used": e.used,
                "recommended_min": e.recommended_min,
            }),
        };
        debug_assert_eq!(values(Resource::Heap).len(), RING_COUNT);
        json!({
            "schema": "pto.scope_stats",
            "version": 1,
            "fatal": self.error.is_some(),
            "dropped": dropped,
            "total": self.total,
            "label": self.label,
            "clusters": self.clusters,
            "aicpu_thread_num": self.aicpu_thread_num,
            "task_window_max": values(Resource::TaskWindow),
            "heap_max": values(Resource::Heap),
            "dep_pool_max": values(Resource::DepPool),
            "tensormap_max": self.tensormap_max,
            "task_window_source": sources(Resource::TaskWindow),
            "heap_source": sources(Resource::Heap),
            "dep_pool_source": sources(Resource::DepPool),
            "error": error,
        })
    }
}

/// The resource names used in the `error` record.
pub(crate) fn resource_name(r: ResourceKind) -> &'static str {
    match r {
        ResourceKind::TaskWindow => "task_window",
        ResourceKind::Heap => "heap",
        ResourceKind::DepList => "dep_list",
        ResourceKind::FaninSpill => "fanin_spill",
        ResourceKind::TensorMap => "tensormap",
        ResourceKind::Cores => "cores",
    }
}
