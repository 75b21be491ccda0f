//! The task DAG of a run (`enable_dep_gen`, RING_CONFIG.md §3): `dep_gen/deps.json`, its
//! writer (the orchestrator's `DepGraph`) and its reader ([`read`]); `dep_gen/deps.dot` draws
//! the same graph for Graphviz.
//!
//! `deps.json` is one JSON object, [`Deps`]: `schema` [`SCHEMA`], `version` [`VERSION`],
//! `tasks` (one [`DepsTask`] per submitted task, in submit order) and `edges` (one
//! [`DepsEdge`] per distinct producer → consumer pair, in the order found). Each edge lists
//! every way it was found ([`EdgeKind`]): `creator` (the tensor's owner), `tensormap` (a live
//! overlapping writer) or `explicit` (`dep` / `dep_wait`), and whether the consumer pins the
//! producer (RETAIN). Fields are added, never renamed.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::task_id::TaskId;

/// The `schema` of `deps.json`.
pub const SCHEMA: &str = "pto.deps";
/// The only `version` written and read.
pub const VERSION: u64 = 1;

/// A `deps.json` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deps {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Always [`VERSION`].
    pub version: u64,
    /// Every submitted task, in submit order.
    pub tasks: Vec<DepsTask>,
    /// Every distinct edge, in the order found.
    pub edges: Vec<DepsEdge>,
}

/// One task of the DAG.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepsTask {
    /// The task id, `r<ring>:<local>` ([`TaskId`]'s display).
    pub id: String,
    /// The ring it was submitted to, `min(depth, 3)`.
    pub ring: u8,
    /// Its per-ring local id (0, 1, … in submit order).
    pub local: u64,
    /// The kernels of its payload, `+`-joined (`dummy` for a task without one).
    pub kernels: String,
    /// The scope depth it was submitted at (0 = the root scope).
    pub depth: usize,
    /// How many blocks it runs as.
    pub block_num: u32,
    /// The recorded graph it was replayed from (`pto_chip::replay`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<String>,
}

/// One producer → consumer edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepsEdge {
    /// The producer's id.
    pub from: String,
    /// The consumer's id.
    pub to: String,
    /// Every way the edge was found, in the order found (no repeats).
    pub kinds: Vec<EdgeKind>,
    /// Whether the consumer pins the producer (RETAIN) for its lifetime.
    pub retain: bool,
}

/// How an edge was found. Several kinds can lead to one (deduplicated) edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EdgeKind {
    /// The consumer reads a tensor the producer created.
    Creator,
    /// The TensorMap found the producer as a live writer of an overlapping region.
    TensorMap,
    /// The orchestration named the producer (`dep` / `dep_wait`).
    Explicit,
    /// The consumer writes bytes the producer reads, and the read is tracked (`track_war`,
    /// `TrackedInput`): write-after-read.
    War,
}

impl EdgeKind {
    fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Creator => "creator",
            EdgeKind::TensorMap => "tensormap",
            EdgeKind::Explicit => "explicit",
            EdgeKind::War => "war",
        }
    }
}

/// Reads a `deps.json`; a file of another schema or version is an error.
pub fn read(text: &str) -> Result<Deps, serde_json::Error> {
    let deps: Deps = serde_json::from_str(text)?;
    super::check_header((&deps.schema, deps.version), SCHEMA, VERSION)?;
    Ok(deps)
}

struct Node {
    id: TaskId,
    kernels: String,
    depth: usize,
    block_num: u32,
    graph: Option<std::sync::Arc<str>>,
}

struct Edge {
    from: TaskId,
    to: TaskId,
    kinds: Vec<EdgeKind>,
    retain: bool,
}

/// The recorded DAG.
#[derive(Default)]
pub(crate) struct DepGraph {
    nodes: Vec<Node>,
    edges: Vec<Edge>,
}

impl DepGraph {
    pub(crate) fn task(&mut self, id: TaskId, kernels: String, depth: usize, block_num: u32) {
        self.nodes.push(Node {
            id,
            kernels,
            depth,
            block_num,
            graph: None,
        });
    }

    /// Records a task replayed from the graph `graph`.
    pub(crate) fn replayed_task(
        &mut self,
        id: TaskId,
        kernels: String,
        depth: usize,
        block_num: u32,
        graph: std::sync::Arc<str>,
    ) {
        self.task(id, kernels, depth, block_num);
        if let Some(node) = self.nodes.last_mut() {
            node.graph = Some(graph);
        }
    }

    /// Records `from → to`, merging kinds of an edge already recorded.
    pub(crate) fn edge(&mut self, from: TaskId, to: TaskId, kind: EdgeKind, retain: bool) {
        if let Some(e) = self
            .edges
            .iter_mut()
            .rev()
            .take_while(|e| e.to == to)
            .find(|e| e.from == from)
        {
            if !e.kinds.contains(&kind) {
                e.kinds.push(kind);
            }
            e.retain |= retain;
            return;
        }
        self.edges.push(Edge {
            from,
            to,
            kinds: vec![kind],
            retain,
        });
    }

    /// `(from, to)` of every edge, for trace flow arrows.
    pub(crate) fn edge_pairs(&self) -> impl Iterator<Item = (TaskId, TaskId)> + '_ {
        self.edges.iter().map(|e| (e.from, e.to))
    }

    /// The records of `deps.json`.
    pub(crate) fn to_deps(&self) -> Deps {
        let tasks = self.nodes.iter().map(|n| DepsTask {
            id: n.id.to_string(),
            ring: n.id.ring(),
            local: n.id.local(),
            kernels: n.kernels.clone(),
            depth: n.depth,
            block_num: n.block_num,
            graph: n.graph.as_ref().map(|g| g.to_string()),
        });
        let edges = self.edges.iter().map(|e| DepsEdge {
            from: e.from.to_string(),
            to: e.to.to_string(),
            kinds: e.kinds.clone(),
            retain: e.retain,
        });
        Deps {
            schema: SCHEMA.to_string(),
            version: VERSION,
            tasks: tasks.collect(),
            edges: edges.collect(),
        }
    }

    pub(crate) fn to_dot(&self) -> String {
        let mut out = String::from(
            "digraph pto {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n",
        );
        for n in &self.nodes {
            let _ = writeln!(
                out,
                "  \"{}\" [label=\"{}\\n{}\\ndepth {}{}\"];",
                n.id,
                n.id,
                n.kernels,
                n.depth,
                if n.block_num > 1 {
                    format!(" x{}", n.block_num)
                } else {
                    String::new()
                }
            );
        }
        for e in &self.edges {
            let kinds: Vec<&str> = e.kinds.iter().map(|k| k.as_str()).collect();
            let style = if e.retain { "solid" } else { "dashed" };
            let _ = writeln!(
                out,
                "  \"{}\" -> \"{}\" [label=\"{}\", style={style}];",
                e.from,
                e.to,
                kinds.join("+")
            );
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::json_text;

    /// `deps.json` of the vector example as the writer wrote it before the records were typed.
    const OLD_FILE: &str = r#"{"schema":"pto.deps","version":1,"tasks":[{"id":"r0:0","ring":0,"local":0,"kernels":"vector.add","depth":0,"block_num":1},{"id":"r1:0","ring":1,"local":0,"kernels":"vector.adds","depth":1,"block_num":1},{"id":"r1:1","ring":1,"local":1,"kernels":"vector.adds","depth":1,"block_num":1},{"id":"r1:2","ring":1,"local":2,"kernels":"vector.mul","depth":1,"block_num":1},{"id":"r1:3","ring":1,"local":3,"kernels":"vector.add","depth":1,"block_num":1}],"edges":[{"from":"r0:0","to":"r1:0","kinds":["creator"],"retain":true},{"from":"r0:0","to":"r1:1","kinds":["creator"],"retain":true},{"from":"r1:0","to":"r1:2","kinds":["creator"],"retain":true},{"from":"r1:1","to":"r1:2","kinds":["creator"],"retain":true},{"from":"r1:2","to":"r1:3","kinds":["creator"],"retain":true},{"from":"r0:0","to":"r1:3","kinds":["creator"],"retain":true}]}"#;

    #[test]
    fn files_written_before_read_and_write_back_byte_for_byte() {
        let deps = read(OLD_FILE).unwrap();
        assert_eq!((deps.tasks.len(), deps.edges.len()), (5, 6));
        assert_eq!(deps.edges[0].kinds, [EdgeKind::Creator]);
        assert_eq!(json_text(&deps), OLD_FILE);
    }

    #[test]
    fn every_field_and_kind_is_printed_under_its_stable_name() {
        let (a, b) = (TaskId::new(0, 0), TaskId::new(2, 7));
        let mut graph = DepGraph::default();
        graph.task(a, "dummy".to_string(), 0, 1);
        graph.task(b, "pa.qk+pa.sf".to_string(), 4, 3);
        graph.edge(a, b, EdgeKind::TensorMap, false);
        graph.edge(a, b, EdgeKind::Explicit, false);
        graph.edge(a, b, EdgeKind::Creator, true);
        let text = json_text(&graph.to_deps());
        assert_eq!(
            text,
            r#"{"schema":"pto.deps","version":1,"tasks":[{"id":"r0:0","ring":0,"local":0,"kernels":"dummy","depth":0,"block_num":1},{"id":"r2:7","ring":2,"local":7,"kernels":"pa.qk+pa.sf","depth":4,"block_num":3}],"edges":[{"from":"r0:0","to":"r2:7","kinds":["tensormap","explicit","creator"],"retain":true}]}"#
        );
        assert_eq!(read(&text).unwrap(), graph.to_deps());
    }

    #[test]
    fn another_schema_or_version_is_an_error() {
        let other = OLD_FILE.replace("pto.deps", "pto.other");
        assert!(read(&other).unwrap_err().to_string().contains("schema"));
        let newer = OLD_FILE.replace(r#""version":1"#, r#""version":2"#);
        assert!(read(&newer).unwrap_err().to_string().contains("version 2"));
    }
}
