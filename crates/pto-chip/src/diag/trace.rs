//! The swimlane trace (CHIP_RUNTIME.md §8): `swimlane/chip_swimlane.json`, Chrome Trace Event
//! JSON (the JSON Object Format) that opens in Perfetto; its writer (`TraceBuffer`) and its
//! reader ([`read`]).
//!
//! The file is one object, [`Trace`]: `traceEvents` (a list of [`TraceEvent`]s, each tagged by
//! its `ph`), `displayTimeUnit` (`ms`) and `otherData` ([`TraceInfo`]: `schema` [`SCHEMA`],
//! `version` [`VERSION`] and what the trace is of). Process 1 holds one lane per simulated
//! core (`tid` 1000 + core), process 2 the AICPU lanes (`tid` 1 the orchestrator, 10 + s
//! executor `s`). Timestamps and durations are µs since the run started, to 0.01 µs.
//!
//! Level 1: lane names and one `X` event per block execution on its core's lane ([`BlockArgs`]).
//! Level 2 adds dispatch and finish times to the block args and a dependency flow arrow (an
//! `s` / `f` pair) per DAG edge. Level 3 adds one AICPU lane per executor thread (`take`,
//! `complete+take` spans). Level 4 adds the orchestrator lane (a span per submit and per
//! scope). Events go to one bounded buffer per run (overflow is counted in
//! `otherData.dropped`); recording costs nothing when off. Fields are added, never renamed.

use std::collections::HashMap;

use pto_types::ring_config::resolve::ResolvedSizing;
use serde::{Deserialize, Serialize};

use crate::error::ChipError;
use crate::kernel::CoreId;
use crate::task_id::TaskId;

/// The `schema` in `otherData`.
pub const SCHEMA: &str = "pto.swimlane";
/// The only `version` written and read.
pub const VERSION: u64 = 1;

/// A `chip_swimlane.json` file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trace {
    /// Lane names first, then block spans, flow arrows and AICPU spans.
    pub trace_events: Vec<TraceEvent>,
    /// Always `ms`: the unit Perfetto displays (timestamps stay µs).
    pub display_time_unit: String,
    /// What the trace is of.
    pub other_data: TraceInfo,
}

/// `otherData`: what the trace is of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceInfo {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Always [`VERSION`].
    pub version: u64,
    /// The `enable_chip_swimlane` level the run asked for, 1 to 4.
    pub level: u8,
    /// The chip's index.
    pub chip: u32,
    /// The task's label, if it had one.
    pub label: Option<String>,
    /// Clusters of the chip (each one AIC and two AIV cores).
    pub clusters: u32,
    /// Executor threads of the run.
    pub aicpu_thread_num: u32,
    /// The bound sizing, as `ResolvedSizing` displays it (each value with its source).
    pub ring_sizing: String,
    /// The failed run's error as `NAME (code)`; null when it succeeded.
    pub error: Option<String>,
    /// Events not recorded (a run keeps at most 2^21).
    pub dropped: u64,
}

/// One trace event; `ph` says which.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ph")]
pub enum TraceEvent {
    /// `M`: names a process (no `tid`) or a lane, or sets a lane's sort order.
    #[serde(rename = "M")]
    Metadata {
        /// 1 the cores, 2 the AICPU.
        pid: u64,
        /// The lane; absent when the event names the process.
        #[serde(skip_serializing_if = "Option::is_none")]
        tid: Option<u64>,
        /// `process_name`, `thread_name` or `thread_sort_index`.
        name: String,
        args: MetadataArgs,
    },
    /// `X`: a span on a lane: a block execution (`cat` `kernel`, with [`BlockArgs`]) or an
    /// AICPU span (`cat` `aicpu`: `take`, `complete+take`, `submit …`, a scope).
    #[serde(rename = "X")]
    Complete {
        pid: u64,
        tid: u64,
        /// Start, µs since the run started.
        ts: f64,
        /// Duration, µs.
        dur: f64,
        /// The kernel, or what the AICPU did.
        name: String,
        cat: String,
        /// Only on block executions.
        #[serde(skip_serializing_if = "Option::is_none")]
        args: Option<BlockArgs>,
    },
    /// `s`: the start of a dependency arrow, where the producer's last block ended.
    #[serde(rename = "s")]
    FlowStart {
        pid: u64,
        tid: u64,
        /// µs since the run started.
        ts: f64,
        /// The edge's index; its `f` event has the same.
        id: u64,
        /// Always `dep`.
        name: String,
        /// Always `dep`.
        cat: String,
    },
    /// `f`: the end of a dependency arrow, where the consumer's first block started.
    #[serde(rename = "f")]
    FlowEnd {
        /// Always `e`: the arrow binds to the enclosing span.
        bp: String,
        pid: u64,
        tid: u64,
        /// µs since the run started.
        ts: f64,
        id: u64,
        name: String,
        cat: String,
    },
}

/// The `args` of an `M` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MetadataArgs {
    /// Of `process_name` and `thread_name`.
    Name { name: String },
    /// Of `thread_sort_index`: AIC0, AIV0, AIV1, AIC1, … in cluster order.
    SortIndex { sort_index: u32 },
}

/// The `args` of a block execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockArgs {
    /// The task id, `r<ring>:<local>`.
    pub task: String,
    /// `block_idx/block_num`.
    pub block: String,
    pub sub_block: u32,
    /// When the block was handed to its core, µs since the run started (level ≥ 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_us: Option<f64>,
    /// When its completion was processed, µs since the run started (level ≥ 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_us: Option<f64>,
    /// The recorded graph the task was replayed from (`pto_chip::replay`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
}

/// Reads a `chip_swimlane.json`; a file of another schema or version is an error.
pub fn read(text: &str) -> Result<Trace, serde_json::Error> {
    let trace: Trace = serde_json::from_str(text)?;
    let info = &trace.other_data;
    super::check_header((&info.schema, info.version), SCHEMA, VERSION)?;
    Ok(trace)
}

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

/// The chip's threads that make scheduling passes, each on a lane of its own: executors
/// `0..executors`, then the orchestrator's passes while it helps (index `executors`), then,
/// when the orchestrator is a worker, its stand-in (`executors + 1`;
/// `engine/orchestrator/help.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SchedulerLanes {
    pub(crate) executors: usize,
    pub(crate) stand_in: bool,
}

impl SchedulerLanes {
    /// The scheduler index of the orchestrator's passes while it helps.
    pub(crate) fn helping(self) -> usize {
        self.executors
    }

    /// The scheduler index of the stand-in's passes.
    pub(crate) fn stand_in(self) -> usize {
        self.executors + 1
    }
}

/// A span on an AICPU lane: the orchestrator (`scheduler = None`) or scheduler `s`
/// ([`SchedulerLanes`]).
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
    /// The graph each replayed task came from.
    graphs: HashMap<TaskId, std::sync::Arc<str>>,
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

    /// Notes that `task` was replayed from the graph `name`.
    pub(crate) fn graph_task(&mut self, task: TaskId, name: std::sync::Arc<str>) {
        self.graphs.insert(task, name);
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
        run: &TraceRun<'_>,
        lanes: SchedulerLanes,
        edges: &[(TaskId, TaskId)],
    ) -> String {
        let mut events = lane_names(run.clusters, lanes);
        events.extend(
            self.blocks
                .iter()
                .map(|b| block_event(b, self.graphs.get(&b.task), run.level)),
        );
        if run.level >= 2 {
            events.extend(self.flow_events(edges));
        }
        events.extend(self.spans.iter().filter_map(|s| aicpu_event(s, run.level)));
        let trace = Trace {
            trace_events: events,
            display_time_unit: "ms".to_string(),
            other_data: run.info(self.dropped),
        };
        super::json_text(&trace)
    }

    /// An arrow per edge, from where the producer's last block ended to where the consumer's
    /// first block started.
    fn flow_events(&self, edges: &[(TaskId, TaskId)]) -> Vec<TraceEvent> {
        let mut first_start: HashMap<TaskId, (f64, u32)> = HashMap::new();
        let mut last_end: HashMap<TaskId, (f64, u32)> = HashMap::new();
        for b in &self.blocks {
            let start = first_start.entry(b.task).or_insert((b.start_us, b.core));
            if b.start_us < start.0 {
                *start = (b.start_us, b.core);
            }
            let end = last_end.entry(b.task).or_insert((b.end_us, b.core));
            if b.end_us > end.0 {
                *end = (b.end_us, b.core);
            }
        }
        let mut events = Vec::new();
        for (id, (from, to)) in (0u64..).zip(edges) {
            let (Some(&(ts_from, core_from)), Some(&(ts_to, core_to))) =
                (last_end.get(from), first_start.get(to))
            else {
                continue;
            };
            events.push(TraceEvent::FlowStart {
                pid: 1,
                tid: core_lane(core_from),
                ts: round(ts_from),
                id,
                name: "dep".to_string(),
                cat: "dep".to_string(),
            });
            events.push(TraceEvent::FlowEnd {
                bp: "e".to_string(),
                pid: 1,
                tid: core_lane(core_to),
                ts: round(ts_to.max(ts_from)),
                id,
                name: "dep".to_string(),
                cat: "dep".to_string(),
            });
        }
        events
    }
}

/// What `otherData` says about the run.
pub(crate) struct TraceRun<'a> {
    pub(crate) level: u8,
    pub(crate) chip: u32,
    pub(crate) label: Option<&'a str>,
    pub(crate) clusters: u32,
    pub(crate) aicpu_thread_num: u32,
    pub(crate) sizing: &'a ResolvedSizing,
    pub(crate) error: Option<&'a ChipError>,
}

impl TraceRun<'_> {
    fn info(&self, dropped: u64) -> TraceInfo {
        TraceInfo {
            schema: SCHEMA.to_string(),
            version: VERSION,
            level: self.level,
            chip: self.chip,
            label: self.label.map(str::to_string),
            clusters: self.clusters,
            aicpu_thread_num: self.aicpu_thread_num,
            ring_sizing: self.sizing.to_string(),
            error: self.error.map(|e| e.code.to_string()),
            dropped,
        }
    }
}

/// µs to 0.01 µs.
fn round(us: f64) -> f64 {
    (us * 100.0).round() / 100.0
}

/// The lane of simulated core `core`.
fn core_lane(core: u32) -> u64 {
    1000 + u64::from(core)
}

/// The names of both processes and of every lane, and the cores' sort order.
fn lane_names(clusters: u32, lanes: SchedulerLanes) -> Vec<TraceEvent> {
    let meta = |pid, tid, name: &str, args| TraceEvent::Metadata {
        pid,
        tid,
        name: name.to_string(),
        args,
    };
    let named = |name: &str| MetadataArgs::Name {
        name: name.to_string(),
    };
    let mut events = vec![
        meta(1, None, "process_name", named("chip cores")),
        meta(2, None, "process_name", named("chip AICPU")),
    ];
    for core in 0..3 * clusters {
        let (cluster, part) = if core < clusters {
            (core, 0)
        } else {
            ((core - clusters) / 2, 1 + (core - clusters) % 2)
        };
        let lane = Some(core_lane(core));
        events.push(meta(
            1,
            lane,
            "thread_name",
            named(&CoreId(core).label(clusters)),
        ));
        let sort_index = MetadataArgs::SortIndex {
            sort_index: 3 * cluster + part,
        };
        events.push(meta(1, lane, "thread_sort_index", sort_index));
    }
    events.push(meta(2, Some(1), "thread_name", named("orchestrator")));
    let mut schedulers: Vec<(usize, String)> = (0..lanes.executors)
        .map(|s| (s, format!("executor {s}")))
        .collect();
    schedulers.push((lanes.helping(), "orchestrator, helping".to_string()));
    if lanes.stand_in {
        schedulers.push((lanes.stand_in(), "stand-in".to_string()));
    }
    for (s, name) in schedulers {
        events.push(meta(2, Some(10 + s as u64), "thread_name", named(&name)));
    }
    events
}

/// The `X` event of one block execution.
fn block_event(b: &BlockSpan, graph: Option<&std::sync::Arc<str>>, level: u8) -> TraceEvent {
    let detailed = level >= 2;
    TraceEvent::Complete {
        pid: 1,
        tid: core_lane(b.core),
        ts: round(b.start_us),
        dur: round((b.end_us - b.start_us).max(0.0)),
        name: b.kernel.to_string(),
        cat: "kernel".to_string(),
        args: Some(BlockArgs {
            task: b.task.to_string(),
            block: format!("{}/{}", b.block_idx, b.block_num),
            sub_block: b.sub_block,
            dispatch_us: detailed.then(|| round(b.dispatch_us)),
            finish_us: detailed.then(|| round(b.finish_us)),
            graph: graph.map(|g| g.to_string()),
        }),
    }
}

/// The `X` event of an AICPU span, if `level` shows its lane (executors from 3, the
/// orchestrator from 4).
fn aicpu_event(s: &AicpuSpan, level: u8) -> Option<TraceEvent> {
    let (tid, wanted) = match s.scheduler {
        Some(index) => (10 + index as u64, level >= 3),
        None => (1, level >= 4),
    };
    wanted.then(|| TraceEvent::Complete {
        pid: 2,
        tid,
        ts: round(s.start_us),
        dur: round((s.end_us - s.start_us).max(0.0)),
        name: s.name.clone(),
        cat: "aicpu".to_string(),
        args: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE_EXECUTOR: SchedulerLanes = SchedulerLanes {
        executors: 1,
        stand_in: false,
    };

    /// Events of a level-4 trace of a failed run as the writer wrote them before the records
    /// were typed (one event of each kind kept).
    const OLD_FILE: &str = r#"{"traceEvents":[{"ph":"M","pid":1,"name":"process_name","args":{"name":"chip cores"}},{"ph":"M","pid":2,"name":"process_name","args":{"name":"chip AICPU"}},{"ph":"M","pid":1,"tid":1000,"name":"thread_name","args":{"name":"AIC0"}},{"ph":"M","pid":1,"tid":1000,"name":"thread_sort_index","args":{"sort_index":0}},{"ph":"M","pid":2,"tid":1,"name":"thread_name","args":{"name":"orchestrator"}},{"ph":"M","pid":2,"tid":10,"name":"thread_name","args":{"name":"executor 0"}},{"ph":"X","pid":1,"tid":1001,"ts":132.12,"dur":71.28,"name":"vector.add","cat":"kernel","args":{"task":"r0:0","block":"0/1","sub_block":0,"dispatch_us":79.74,"finish_us":211.3}},{"ph":"s","pid":1,"tid":1001,"ts":203.4,"id":0,"name":"dep","cat":"dep"},{"ph":"f","bp":"e","pid":1,"tid":1001,"ts":328.9,"id":0,"name":"dep","cat":"dep"},{"ph":"X","pid":2,"tid":10,"ts":78.84,"dur":5.4,"name":"take","cat":"aicpu"},{"ph":"X","pid":2,"tid":1,"ts":30.3,"dur":247.32,"name":"submit r0:0 vector.add","cat":"aicpu"}],"displayTimeUnit":"ms","otherData":{"schema":"pto.swimlane","version":1,"level":4,"chip":0,"label":"vector_example","clusters":1,"aicpu_thread_num":4,"ring_sizing":"task_window=[16384(default), 4(call_config), 16384(default), 16384(default)] heap=[268435456(default), 268435456(default), 268435456(default), 268435456(default)] dep_pool=[16384(default), 16384(default), 16384(default), 16384(default)]","error":"SCOPE_DEADLOCK (1)","dropped":0}}"#;

    #[test]
    fn files_written_before_read_and_write_back_byte_for_byte() {
        let trace = read(OLD_FILE).unwrap();
        assert_eq!(trace.trace_events.len(), 11);
        assert!(matches!(
            &trace.trace_events[3],
            TraceEvent::Metadata {
                tid: Some(1000),
                args: MetadataArgs::SortIndex { sort_index: 0 },
                ..
            }
        ));
        assert!(matches!(
            &trace.trace_events[8],
            TraceEvent::FlowEnd { ts, id: 0, .. } if *ts == 328.9
        ));
        assert_eq!(
            trace.other_data.error.as_deref(),
            Some("SCOPE_DEADLOCK (1)")
        );
        assert_eq!(super::super::json_text(&trace), OLD_FILE);
    }

    fn sizing() -> ResolvedSizing {
        use pto_types::ring_config::resolve::{RingDefaults, resolve};
        let call = pto_types::RuntimeEnv::default().with_task_window(16);
        resolve(
            &call,
            &pto_types::EnvSnapshot::default(),
            &RingDefaults::BUILT_IN,
        )
        .unwrap()
    }

    /// A buffer with one block of `r0:0` and one of `r1:0`, and one span of executor 0.
    fn buffer() -> TraceBuffer {
        let mut buffer = TraceBuffer::default();
        for (task, start_us) in [(TaskId::new(0, 0), 2.0), (TaskId::new(1, 0), 9.004)] {
            buffer.block(BlockSpan {
                core: 1,
                task,
                kernel: "vector.add",
                block_idx: 0,
                block_num: 1,
                sub_block: 0,
                dispatch_us: 1.5,
                start_us,
                end_us: start_us + 4.0,
                finish_us: start_us + 4.5,
            });
        }
        buffer.span(AicpuSpan {
            scheduler: Some(0),
            name: "take".to_string(),
            start_us: 1.0,
            end_us: 1.25,
        });
        buffer
    }

    #[test]
    fn level_1_prints_lanes_and_blocks_under_their_stable_names() {
        let sizing = sizing();
        let run = TraceRun {
            level: 1,
            chip: 3,
            label: None,
            clusters: 1,
            aicpu_thread_num: 1,
            sizing: &sizing,
            error: None,
        };
        let edges = [(TaskId::new(0, 0), TaskId::new(1, 0))];
        let text = buffer().render(&run, ONE_EXECUTOR, &edges);
        let lanes = r#"{"ph":"M","pid":1,"name":"process_name","args":{"name":"chip cores"}},{"ph":"M","pid":2,"name":"process_name","args":{"name":"chip AICPU"}},{"ph":"M","pid":1,"tid":1000,"name":"thread_name","args":{"name":"AIC0"}},{"ph":"M","pid":1,"tid":1000,"name":"thread_sort_index","args":{"sort_index":0}},{"ph":"M","pid":1,"tid":1001,"name":"thread_name","args":{"name":"AIV1"}},{"ph":"M","pid":1,"tid":1001,"name":"thread_sort_index","args":{"sort_index":1}},{"ph":"M","pid":1,"tid":1002,"name":"thread_name","args":{"name":"AIV2"}},{"ph":"M","pid":1,"tid":1002,"name":"thread_sort_index","args":{"sort_index":2}},{"ph":"M","pid":2,"tid":1,"name":"thread_name","args":{"name":"orchestrator"}},{"ph":"M","pid":2,"tid":10,"name":"thread_name","args":{"name":"executor 0"}},{"ph":"M","pid":2,"tid":11,"name":"thread_name","args":{"name":"orchestrator, helping"}}"#;
        let blocks = r#"{"ph":"X","pid":1,"tid":1001,"ts":2.0,"dur":4.0,"name":"vector.add","cat":"kernel","args":{"task":"r0:0","block":"0/1","sub_block":0}},{"ph":"X","pid":1,"tid":1001,"ts":9.0,"dur":4.0,"name":"vector.add","cat":"kernel","args":{"task":"r1:0","block":"0/1","sub_block":0}}"#;
        let other = format!(
            r#"{{"schema":"pto.swimlane","version":1,"level":1,"chip":3,"label":null,"clusters":1,"aicpu_thread_num":1,"ring_sizing":"{sizing}","error":null,"dropped":0}}"#
        );
        assert_eq!(
            text,
            format!(
                r#"{{"traceEvents":[{lanes},{blocks}],"displayTimeUnit":"ms","otherData":{other}}}"#
            )
        );
        assert_eq!(super::super::json_text(&read(&text).unwrap()), text);
    }

    #[test]
    fn higher_levels_add_block_times_arrows_and_aicpu_lanes() {
        let sizing = sizing();
        let edges = [(TaskId::new(0, 0), TaskId::new(1, 0))];
        let mut run = TraceRun {
            level: 2,
            chip: 0,
            label: Some("t"),
            clusters: 1,
            aicpu_thread_num: 1,
            sizing: &sizing,
            error: None,
        };
        let events = |run: &TraceRun<'_>| {
            read(&buffer().render(run, ONE_EXECUTOR, &edges))
                .unwrap()
                .trace_events
        };
        let level_2 = events(&run);
        assert_eq!(level_2.len(), 11 + 2 + 2);
        let TraceEvent::Complete {
            args: Some(args), ..
        } = &level_2[11]
        else {
            panic!("{:?}", level_2[11]);
        };
        assert_eq!((args.dispatch_us, args.finish_us), (Some(1.5), Some(6.5)));
        assert!(matches!(
            &level_2[13],
            TraceEvent::FlowStart { tid: 1001, ts, id: 0, .. } if *ts == 6.0
        ));
        assert!(matches!(
            &level_2[14],
            TraceEvent::FlowEnd { ts, id: 0, .. } if *ts == 9.0
        ));
        run.level = 3;
        let level_3 = events(&run);
        assert!(matches!(
            level_3.last(),
            Some(TraceEvent::Complete { pid: 2, tid: 10, dur, args: None, .. }) if *dur == 0.25
        ));
    }

    #[test]
    fn another_schema_or_version_is_an_error() {
        let other = OLD_FILE.replace("pto.swimlane", "pto.deps");
        assert!(read(&other).unwrap_err().to_string().contains("schema"));
        let newer = OLD_FILE.replace(r#""version":1"#, r#""version":7"#);
        assert!(read(&newer).unwrap_err().to_string().contains("version 7"));
    }
}
