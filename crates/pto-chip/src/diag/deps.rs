//! The task DAG of a run as JSON and Graphviz DOT (`enable_dep_gen`, RING_CONFIG.md §3).
//!
//! Recorded by the orchestrator at submit, with how each edge was discovered: `creator` (the
//! tensor's owner), `tensormap` (a live overlapping writer) or `explicit` (`dep`/`dep_wait`),
//! and whether the consumer pins the producer (RETAIN).

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::task_id::TaskId;

/// How an edge was found. Several kinds can lead to one (deduplicated) edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EdgeKind {
    Creator,
    TensorMap,
    Explicit,
}

impl EdgeKind {
    fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Creator => "creator",
            EdgeKind::TensorMap => "tensormap",
            EdgeKind::Explicit => "explicit",
        }
    }
}

struct Node {
    id: TaskId,
    kernels: String,
    depth: usize,
    block_num: u32,
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
        });
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

    pub(crate) fn to_json(&self) -> Value {
        let tasks: Vec<Value> = self
            .nodes
            .iter()
            .map(|n| {
                json!({
                    "id": n.id.to_string(),
                    "ring": n.id.ring(),
                    "local": n.id.local(),
                    "kernels": n.kernels,
                    "depth": n.depth,
                    "block_num": n.block_num,
                })
            })
            .collect();
        let edges: Vec<Value> = self
            .edges
            .iter()
            .map(|e| {
                json!({
                    "from": e.from.to_string(),
                    "to": e.to.to_string(),
                    "kinds": e.kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                    "retain": e.retain,
                })
            })
            .collect();
        json!({ "schema": "pto.deps", "version": 1, "tasks": tasks, "edges": edges })
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
