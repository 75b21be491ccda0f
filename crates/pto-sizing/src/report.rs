//! The ring-sizing report behind `pto config resolve` and `pto.resolve` (RING_CONFIG.md §8).
//!
//! Resolves one task's sizing against an environment snapshot and computes the derived
//! capacities, the arena footprint and, optionally, whether it fits a chip's device memory.
//!
//! `pto config resolve --json` prints one object, [`JsonReport`]: `rings`, `problems`,
//! `derived`, `footprint` and, when a capacity was given, `device_memory`. [`rings_json`] is
//! the one JSON rendering of a resolved sizing: four [`JsonRing`]s in ring order, each
//! resource as a [`JsonResolved`] (`value`, `source`, and `block` where a block of a scene
//! case set it); `pto run --json` prints the same `rings`. Fields are added, never renamed.

use std::fmt::Write as _;

use pto_chip::footprint::Footprint;
use pto_types::ring_config::env::{EnvError, EnvSnapshot, EnvSource};
use pto_types::ring_config::resolve::{DerivedCapacities, ResolvedSizing, SizingError};
use pto_types::{CallConfig, ConfigError, RING_COUNT, Resource};

use pto_chip::{Plan, PlanError};
use serde::{Deserialize, Serialize};

/// The block of a layered config (a scene case's `config`) that set a `call_config` value of
/// a task.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Block {
    /// `config.tasks.<label>`: the task's own block.
    Task(String),
    /// `config.tasks.<family>`: the block of the task's label family.
    Family(String),
    /// `config.runtime_env`: the case's base.
    Case,
}

impl Block {
    /// `tasks.ew3`, `tasks.ew` or `runtime_env`: the key path under `config`.
    pub fn path(&self) -> String {
        match self {
            Block::Task(key) | Block::Family(key) => format!("tasks.{key}"),
            Block::Case => "runtime_env".to_string(),
        }
    }

    /// The letter tables show for a value from this block: `t`, `f` or `c`.
    pub fn letter(&self) -> char {
        match self {
            Block::Task(_) => 't',
            Block::Family(_) => 'f',
            Block::Case => 'c',
        }
    }
}

/// Per resource (in [`Resource::ALL`] order) and ring, the block that set a task's value;
/// `None` where the value did not come from the case (environment, default, or a config the
/// scene built itself).
pub type SizingBlocks = [[Option<Block>; RING_COUNT]; 3];

/// What to resolve.
#[derive(Clone, Debug)]
pub struct SizingRequest {
    /// The task's config (only `runtime_env` affects sizing; the whole config is validated).
    pub config: CallConfig,
    /// The environment tier.
    pub env: EnvSource,
    /// Environment problems are errors.
    pub strict_env: bool,
    /// A chip capacity to check the arena against.
    pub device_memory: Option<u64>,
}

/// Why a request cannot be resolved.
#[derive(Debug, thiserror::Error)]
pub enum SizingReportError {
    #[error("invalid config: {0}")]
    InvalidConfig(#[from] ConfigError),
    #[error("environment: {0}")]
    Env(#[from] EnvError),
    #[error("invalid sizing: {0}")]
    Sizing(#[from] SizingError),
}

/// The resolved sizing of one task and everything derived from it.
#[derive(Clone, Debug)]
pub struct SizingReport {
    pub sizing: ResolvedSizing,
    /// Environment problems, rendered (empty when none).
    pub problems: Vec<String>,
    pub derived: DerivedCapacities,
    pub footprint: Footprint,
    /// `(capacity, fits)` when a device-memory capacity was given.
    pub device_memory: Option<(u64, bool)>,
    /// The blocks of a scene case that set the values ([`SizingReport::with_blocks`]).
    pub blocks: Option<SizingBlocks>,
}

impl SizingReport {
    /// Validates, snapshots the environment, resolves and derives.
    pub fn build(request: &SizingRequest) -> Result<SizingReport, SizingReportError> {
        request.config.validate()?;
        let snapshot = EnvSnapshot::take(&request.env, request.strict_env)?;
        let Plan {
            sizing,
            derived,
            footprint,
        } = Plan::resolve(&request.config.runtime_env, &snapshot).map_err(|e| match e {
            PlanError::Config(e) => SizingReportError::InvalidConfig(e),
            PlanError::Sizing(e) => SizingReportError::Sizing(e),
        })?;
        Ok(SizingReport {
            sizing,
            problems: snapshot.problems.iter().map(|p| p.to_string()).collect(),
            derived,
            footprint,
            device_memory: request
                .device_memory
                .map(|capacity| (capacity, footprint.arena <= capacity)),
            blocks: None,
        })
    }

    /// Names, for each `call_config` value, the block of a scene case that set it.
    pub fn with_blocks(mut self, blocks: SizingBlocks) -> SizingReport {
        self.blocks = Some(blocks);
        self
    }

    /// The object `pto config resolve --json` prints.
    pub fn to_json(&self) -> JsonReport {
        let d = &self.derived;
        let f = &self.footprint;
        JsonReport {
            rings: rings_json(&self.sizing, self.blocks.as_ref()),
            problems: self.problems.clone(),
            derived: JsonDerived {
                scope_task_cap: d.scope_task_cap,
                heap_total: d.heap_total,
                heap_bases: d.heap_bases,
                live_tasks: d.live_tasks,
            },
            footprint: JsonFootprint {
                image: f.image,
                deps: f.deps,
                heaps: f.heaps,
                arena: f.arena,
            },
            device_memory: self
                .device_memory
                .map(|(capacity, fits)| JsonDeviceMemory { capacity, fits }),
        }
    }

    /// The human-readable table.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let cell = |resource: Resource, ring: usize| {
            let r = self.sizing.at(resource, ring);
            let i = Resource::ALL
                .iter()
                .position(|x| *x == resource)
                .unwrap_or(0);
            match self.blocks.as_ref().and_then(|b| b[i][ring].as_ref()) {
                Some(block) => format!("{} ({}: {})", r.value, r.source, block.path()),
                None => format!("{} ({})", r.value, r.source),
            }
        };
        let _ = writeln!(
            out,
            "{:<5} {:<24} {:<28} {:<24}",
            "ring", "task_window", "heap (bytes)", "dep_pool"
        );
        for ring in 0..RING_COUNT {
            let _ = writeln!(
                out,
                "{:<5} {:<24} {:<28} {:<24}",
                ring,
                cell(Resource::TaskWindow, ring),
                cell(Resource::Heap, ring),
                cell(Resource::DepPool, ring)
            );
        }
        if self.problems.is_empty() {
            out.push_str("environment problems: none\n");
        } else {
            out.push_str("environment problems:\n");
            for p in &self.problems {
                let _ = writeln!(out, "  {p}");
            }
        }
        let d = &self.derived;
        let _ = writeln!(
            out,
            "derived: scope task capacity {}, live tasks per ring {:?}, heap total {} (ring bases {:?})",
            d.scope_task_cap, d.live_tasks, d.heap_total, d.heap_bases
        );
        let f = &self.footprint;
        let _ = writeln!(
            out,
            "arena footprint: image {} + dep pools {} + heaps {} = {} bytes ({})",
            f.image,
            f.deps,
            f.heaps,
            f.arena,
            human_bytes(f.arena)
        );
        if let Some((capacity, fits)) = self.device_memory {
            let verdict = if fits { "fits" } else { "does NOT fit" };
            let _ = writeln!(
                out,
                "device memory: the arena {verdict} in {capacity} bytes ({})",
                human_bytes(capacity)
            );
        }
        out
    }
}

/// `pto config resolve --json`: one task's sizing and what it derives (RING_CONFIG.md §8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonReport {
    /// The sizing, ring by ring ([`rings_json`]).
    pub rings: [JsonRing; RING_COUNT],
    /// Problems of the environment tier, one message each (values it ignored); empty when none.
    pub problems: Vec<String>,
    pub derived: JsonDerived,
    pub footprint: JsonFootprint,
    /// Only when a device-memory capacity was given (`--device-memory`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_memory: Option<JsonDeviceMemory>,
}

/// One ring of a resolved sizing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonRing {
    /// 0 to 3.
    pub ring: usize,
    /// Task window, in task slots.
    pub task_window: JsonResolved,
    /// Heap, in bytes.
    pub heap: JsonResolved,
    /// Dep pool, in entries.
    pub dep_pool: JsonResolved,
}

/// One resolved value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonResolved {
    pub value: u64,
    /// `call_config`, `env` or `default` ([`SizeSource::as_str`](pto_chip::SizeSource::as_str)).
    pub source: String,
    /// The block of a scene case that set a `call_config` value: `tasks.<label>`,
    /// `tasks.<family>` or `runtime_env` ([`Block::path`]); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<String>,
}

/// The capacities a sizing derives (RING_CONFIG.md §6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonDerived {
    /// Tasks one scope may hold, `Σ W_r`.
    pub scope_task_cap: u64,
    /// Bytes of all four heaps, `Σ H_r`.
    pub heap_total: u64,
    /// Byte offset of each ring's heap in the arena.
    pub heap_bases: [u64; RING_COUNT],
    /// Most live tasks per ring, `W_r − 1`.
    pub live_tasks: [u64; RING_COUNT],
}

/// The arena a chip reserves for the sizing, in bytes (RING_CONFIG.md §7.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonFootprint {
    /// The shared-memory image: header, per-slot descriptors, payloads and states.
    pub image: u64,
    /// The dep-list and fanin-spill pools.
    pub deps: u64,
    /// The heaps.
    pub heaps: u64,
    /// The whole arena: `image + deps + heaps`.
    pub arena: u64,
}

/// Whether the arena fits a chip's device memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonDeviceMemory {
    /// The chip's device memory, in bytes.
    pub capacity: u64,
    /// `arena <= capacity`.
    pub fits: bool,
}

/// The `rings` of a resolved sizing, with the blocks of a scene case that set its values.
pub fn rings_json(
    sizing: &ResolvedSizing,
    blocks: Option<&SizingBlocks>,
) -> [JsonRing; RING_COUNT] {
    let entry = |resource: Resource, ring: usize| {
        let r = sizing.at(resource, ring);
        let i = Resource::ALL
            .iter()
            .position(|x| *x == resource)
            .unwrap_or(0);
        JsonResolved {
            value: r.value,
            source: r.source.as_str().to_string(),
            block: blocks.and_then(|b| b[i][ring].as_ref()).map(Block::path),
        }
    };
    std::array::from_fn(|ring| JsonRing {
        ring,
        task_window: entry(Resource::TaskWindow, ring),
        heap: entry(Resource::Heap, ring),
        dep_pool: entry(Resource::DepPool, ring),
    })
}

/// `1.30 GiB`, `8.00 MiB`, `512 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in UNITS {
        if bytes >= size {
            return format!("{:.2} {name}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pto_chip::diag::json_text;
    use pto_types::RuntimeEnv;
    use serde_json::json;

    /// Lines `pto config resolve --json` printed before the output was typed: with the blocks
    /// of a scene case, with a device-memory capacity, with an environment problem.
    const OLD_LINES: [&str; 3] = [
        r#"{"rings":[{"ring":0,"task_window":{"value":4,"source":"call_config","block":"tasks.ew"},"heap":{"value":1024,"source":"call_config","block":"tasks.ew"},"dep_pool":{"value":4,"source":"call_config","block":"tasks.ew"}},{"ring":1,"task_window":{"value":4,"source":"call_config","block":"tasks.ew"},"heap":{"value":1024,"source":"call_config","block":"tasks.ew"},"dep_pool":{"value":4,"source":"call_config","block":"tasks.ew"}},{"ring":2,"task_window":{"value":4,"source":"call_config","block":"tasks.ew"},"heap":{"value":1024,"source":"call_config","block":"tasks.ew"},"dep_pool":{"value":4,"source":"call_config","block":"tasks.ew"}},{"ring":3,"task_window":{"value":4,"source":"call_config","block":"tasks.ew"},"heap":{"value":1024,"source":"call_config","block":"tasks.ew"},"dep_pool":{"value":4,"source":"call_config","block":"tasks.ew"}}],"problems":[],"derived":{"scope_task_cap":16,"heap_total":4096,"heap_bases":[0,1024,2048,3072],"live_tasks":[3,3,3,3]},"footprint":{"image":80512,"deps":768,"heaps":4096,"arena":85376}}"#,
        r#"{"rings":[{"ring":0,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":1,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":2,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":3,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}}],"problems":[],"derived":{"scope_task_cap":65536,"heap_total":1073741824,"heap_bases":[0,268435456,536870912,805306368],"live_tasks":[16383,16383,16383,16383]},"footprint":{"image":325583744,"deps":1573120,"heaps":1073741824,"arena":1400898688},"device_memory":{"capacity":1000,"fits":false}}"#,
        r#"{"rings":[{"ring":0,"task_window":{"value":16,"source":"call_config"},"heap":{"value":1048576,"source":"env"},"dep_pool":{"value":16384,"source":"default"}},{"ring":1,"task_window":{"value":16,"source":"call_config"},"heap":{"value":1048576,"source":"env"},"dep_pool":{"value":16384,"source":"default"}},{"ring":2,"task_window":{"value":16,"source":"call_config"},"heap":{"value":1048576,"source":"env"},"dep_pool":{"value":16384,"source":"default"}},{"ring":3,"task_window":{"value":16,"source":"call_config"},"heap":{"value":1048576,"source":"env"},"dep_pool":{"value":16384,"source":"default"}}],"problems":["PTO2_RING_DEP_POOL=\"-4\" ignored: value 1 of 1 (\"-4\") is negative; ring_dep_pool uses the default 16384 on every ring the CallConfig leaves unset"],"derived":{"scope_task_cap":64,"heap_total":4194304,"heap_bases":[0,1048576,2097152,3145728],"live_tasks":[15,15,15,15]},"footprint":{"image":318848,"deps":1573120,"heaps":4194304,"arena":6086272}}"#,
    ];

    #[test]
    fn lines_printed_before_read_and_print_back_byte_for_byte() {
        for line in OLD_LINES {
            let report: JsonReport = serde_json::from_str(line).unwrap();
            assert_eq!(json_text(&report), line);
        }
    }

    #[test]
    fn a_built_report_reads_back_equal() {
        let mut req = request(
            RuntimeEnv::default().with_heap(4096),
            &[("PTO2_RING_DEP_POOL", "x")],
        );
        req.device_memory = Some(1 << 30);
        let blocks = std::array::from_fn(|i| {
            std::array::from_fn(|ring| match (i, ring) {
                (1, 0) => Some(Block::Task("ew3".to_string())),
                (1, _) => Some(Block::Family("ew".to_string())),
                _ => None,
            })
        });
        let report = SizingReport::build(&req).unwrap().with_blocks(blocks);
        let json = report.to_json();
        assert_eq!(json.rings[0].heap.block.as_deref(), Some("tasks.ew3"));
        assert_eq!(json.rings[3].heap.block.as_deref(), Some("tasks.ew"));
        assert_eq!(
            json.device_memory,
            Some(JsonDeviceMemory {
                capacity: 1 << 30,
                fits: true
            })
        );
        assert_eq!(
            serde_json::from_str::<JsonReport>(&json_text(&json)).unwrap(),
            json
        );
    }

    fn request(call: RuntimeEnv, pairs: &[(&str, &str)]) -> SizingRequest {
        SizingRequest {
            config: CallConfig::with_runtime_env(call),
            env: EnvSource::from_pairs(pairs.iter().copied()),
            strict_env: false,
            device_memory: None,
        }
    }

    #[test]
    fn spec_example_json() {
        let report = SizingReport::build(&request(
            RuntimeEnv::default().with_task_window(16),
            &[("PTO2_RING_HEAP", "1048576"), ("PTO2_RING_DEP_POOL", "-4")],
        ))
        .unwrap();
        let json = serde_json::to_value(report.to_json()).unwrap();
        assert_eq!(
            json["rings"][0],
            json!({"ring": 0,
                   "task_window": {"value": 16, "source": "call_config"},
                   "heap": {"value": 1048576, "source": "env"},
                   "dep_pool": {"value": 16384, "source": "default"}})
        );
        assert_eq!(json["rings"].as_array().unwrap().len(), 4);
        assert_eq!(json["derived"]["scope_task_cap"], 64);
        assert_eq!(json["derived"]["heap_total"], 4194304);
        assert_eq!(
            json["footprint"],
            json!({"image": 318848, "deps": 1573120, "heaps": 4194304, "arena": 6086272})
        );
        let problems = json["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0]
                .as_str()
                .unwrap()
                .starts_with("PTO2_RING_DEP_POOL=\"-4\" ignored")
        );
    }

    #[test]
    fn strict_env_turns_problems_into_errors() {
        let mut req = request(RuntimeEnv::default(), &[("PTO2_RING_HEAP", "-1")]);
        req.strict_env = true;
        let err = SizingReport::build(&req).unwrap_err();
        assert!(matches!(err, SizingReportError::Env(_)));
        assert!(err.to_string().contains("PTO2_RING_HEAP"));
    }

    #[test]
    fn t56_global_heap_does_not_fit_a_4_gib_chip() {
        let mut req = request(RuntimeEnv::default(), &[("PTO2_RING_HEAP", "1073741824")]);
        req.device_memory = Some(4 << 30);
        let report = SizingReport::build(&req).unwrap();
        assert_eq!(report.footprint.arena, 4622124160);
        assert_eq!(report.device_memory, Some((4 << 30, false)));
        req.config.runtime_env = RuntimeEnv::default()
            .with_task_window(128)
            .with_heap(8388608)
            .with_dep_pool(256);
        let report = SizingReport::build(&req).unwrap();
        assert_eq!(report.footprint.arena, 36123776);
        assert_eq!(report.device_memory, Some((4 << 30, true)));
    }

    #[test]
    fn table_names_every_source() {
        let report = SizingReport::build(&request(
            RuntimeEnv::default().with_task_window([128, 0, 0, 0]),
            &[("PTO2_RING_TASK_WINDOW", "64")],
        ))
        .unwrap();
        let table = report.render_table();
        assert!(table.contains("128 (call_config)"));
        assert!(table.contains("64 (env)"));
        assert!(table.contains("268435456 (default)"));
        assert!(table.contains("environment problems: none"));
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(8 << 20), "8.00 MiB");
        assert_eq!(human_bytes(1400898688), "1.30 GiB");
    }
}
