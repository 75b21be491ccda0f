//! The swimlane trace (CHIP_RUNTIME.md §8): Chrome Trace Event JSON that opens in Perfetto.
//!
//! Level 1: one `X` event per block execution on its core's lane. Level 2 adds dispatch and
//! finish times to the event args and dependency flow arrows. Level 3 adds one AICPU lane per
//! executor thread (`take`, `complete+take` spans). Level 4 adds the orchestrator lane (a span per submit and
//! per scope). Timestamps are µs since the run started. Events go to one bounded buffer per
//! run (overflow is counted in `otherData.dropped`); recording costs nothing when off.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::kernel::CoreId;
use crate::task_id::TaskId;

/// Most events kept per run.
pub(crate) const MAX_EVENTS: usize = 1 << 21;

/// One block's execution on a core.
#[derive(Clone, Debug)]
pub(crate) struct BlockSpan {
    pub(crate) core: u32,
    pub(crate) task: TaskId,
    pub(crate) kernel: &'static str,
    pub(crate) block_idx: u32,
    pub(crate) block_num: u32,
    pub(crate) sub_block: u32,
    pub(crate) dispatch_us: f64,
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    pub(crate) finish_us: f64,
}

/// A span on an AICPU lane: the orchestrator (`scheduler = None`) or executor `s`.
#[derive(Clone, Debug)]
pub(crate) struct AicpuSpan {
    pub(crate) scheduler: Option<usize>,
    pub(crate) name: String,
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
}

/// The events of one run.
#[derive(Default)]
pub(crate) struct TraceBuffer {
    blocks: Vec<BlockSpan>,
    spans: Vec<AicpuSpan>,
    pub(crate) dropped: u64,
}

impl TraceBuffer {
    fn full(&self) -> bool {
        self.blocks.len() + self.spans.len() >= MAX_EVENTS
    }

    pub(crate) fn block(&mut self, b: BlockSpan) {
        if self.full() {
            self.dropped += 1;
        } else {
            self.blocks.push(b);
        }
    }

    pub(crate) fn span(&mut self, s: AicpuSpan) {
        if self.full() {
            self.dropped += 1;
        } else {
            self.spans.push(s);
        }
    }

    /// The whole trace file.
    pub(crate) fn render(
        &self,
        level: u8,
        clusters: u32,
        schedulers: usize,
        edges: &[(TaskId, TaskId)],
        other: Value,
    ) -> String {
        let round = |us: f64| (us * 100.0).round() / 100.0;
        let mut events: Vec<Value> = Vec::new();
        events.push(
            json!({"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "chip cores"}}),
        );
        events.push(
            json!({"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "chip AICPU"}}),
        );
        for core in 0..3 * clusters {
            let (cluster, part) = if core < clusters {
                (core, 0)
            } else {
                ((core - clusters) / 2, 1 + (core - clusters) % 2)
            };
            events.push(
                json!({"ph": "M", "pid": 1, "tid": 1000 + core, "name": "thread_name",
                "args": {"name": CoreId(core).label(clusters)}}),
            );
            events.push(
                json!({"ph": "M", "pid": 1, "tid": 1000 + core, "name": "thread_sort_index",
                "args": {"sort_index": 3 * cluster + part}}),
            );
        }
        events.push(json!({"ph": "M", "pid": 2, "tid": 1, "name": "thread_name", "args": {"name": "orchestrator"}}));
        for s in 0..schedulers {
            events.push(
                json!({"ph": "M", "pid": 2, "tid": 10 + s, "name": "thread_name",
                "args": {"name": format!("executor {s}")}}),
            );
        }
        // Where each task's first block started and last block ended, for flow arrows.
        let mut first_start: HashMap<TaskId, (f64, u32)> = HashMap::new();
        let mut last_end: HashMap<TaskId, (f64, u32)> = HashMap::new();
        for b in &self.blocks {
            let mut args = json!({
                "task": b.task.to_string(),
                "block": format!("{}/{}", b.block_idx, b.block_num),
                "sub_block": b.sub_block,
            });
            if level >= 2 {
                args["dispatch_us"] = json!(round(b.dispatch_us));
                args["finish_us"] = json!(round(b.finish_us));
            }
            events.push(
                json!({"ph": "X", "pid": 1, "tid": 1000 + b.core, "ts": round(b.start_us),
                "dur": round((b.end_us - b.start_us).max(0.0)), "name": b.kernel, "cat": "kernel",
                "args": args}),
            );
            let start = first_start.entry(b.task).or_insert((b.start_us, b.core));
            if b.start_us < start.0 {
                *start = (b.start_us, b.core);
            }
            let end = last_end.entry(b.task).or_insert((b.end_us, b.core));
            if b.end_us > end.0 {
                *end = (b.end_us, b.core);
            }
        }
        if level >= 2 {
            for (id, (from, to)) in edges.iter().enumerate() {
                let (Some(&(ts_from, core_from)), Some(&(ts_to, core_to))) =
                    (last_end.get(from), first_start.get(to))
                else {
                    continue;
                };
                events.push(
                    json!({"ph": "s", "pid": 1, "tid": 1000 + core_from, "ts": round(ts_from),
                    "id": id, "name": "dep", "cat": "dep"}),
                );
                events.push(
                    json!({"ph": "f", "bp": "e", "pid": 1, "tid": 1000 + core_to,
                    "ts": round(ts_to.max(ts_from)), "id": id, "name": "dep", "cat": "dep"}),
                );
            }
        }
        for s in &self.spans {
            let (tid, wanted) = match s.scheduler {
                Some(index) => (10 + index, level >= 3),
                None => (1, level >= 4),
            };
            if !wanted {
                continue;
            }
            events.push(
                json!({"ph": "X", "pid": 2, "tid": tid, "ts": round(s.start_us),
                "dur": round((s.end_us - s.start_us).max(0.0)), "name": s.name, "cat": "aicpu"}),
            );
        }
        let mut other = other;
        other["dropped"] = json!(self.dropped);
        json!({"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}).to_string()
    }
}
