//! `pto run --json`: the typed line [`JsonRow`], where the format is described, and its
//! parts.

use pto_sizing::report::{JsonRing, rings_json};
use pto_types::RING_COUNT;
use serde::{Deserialize, Serialize};

use super::CaseReport;
use crate::figures::CaseFigures;
use crate::scene::TaskRow;

/// One line of `pto run --json`. A run prints one per task of every case, and one for a case
/// that produced no task rows (its `task`, `chip`, `rings`, `arena`,
/// `high_water_bytes`, `task_check`, `error` and `diagnostics_dir` are null, `reserved_bytes`
/// is 0, `status` and `wall_us` are the case's). `rings` is exactly what
/// `pto config resolve --json` prints ([`rings_json`]), also for a failed task: the sizing it
/// tried to bind. `status`, `task_check` and `error` are the task's own; `check`,
/// `case_status` and `case_figures` ([`JsonCaseFigures`]) are its case's. Fields are added,
/// never renamed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonRow {
    /// The case's name.
    pub case: String,
    /// The task's label.
    pub task: Option<String>,
    /// The index of the chip the task ran on (or was aimed at).
    pub chip: Option<u32>,
    /// The task's outcome: `ok`, `failed`, `skipped` (a producer failed) or `expected_failure`;
    /// on a case line the case's `ok` or `failed`.
    pub status: String,
    /// The sizing the task bound or tried to bind.
    pub rings: Option<[JsonRing; RING_COUNT]>,
    /// Whether the chip reused a cached arena (`hit`) or built one (`miss`); null when no
    /// arena was bound.
    pub arena: Option<String>,
    /// Arena bytes the sizing needs (bound, or asked for by a failed bind); 0 for a skipped
    /// task.
    pub reserved_bytes: u64,
    /// Σ over rings of the heap's peak bytes in use; null without a chip report.
    pub high_water_bytes: Option<u64>,
    /// The task's wall time on its chip, in µs (null when it never ran on one); on a case line
    /// the case's.
    pub wall_us: Option<u64>,
    /// Why the case failed; null when it passed.
    pub check: Option<String>,
    /// The case's outcome: `ok` or `failed`.
    pub case_status: String,
    /// The table's check cell: `ok`, `skipped`, `FAIL (NAME)` or `expected FAIL (NAME)`.
    pub task_check: Option<String>,
    /// Why the task failed; null when it did not.
    pub error: Option<JsonTaskError>,
    /// Problems of the chip's environment (values it ignored), one message each; on a case
    /// line the case's.
    pub env_problems: Vec<String>,
    /// The directory of the task's diagnostics files; null without diagnostics.
    pub diagnostics_dir: Option<String>,
    pub case_figures: JsonCaseFigures,
    /// Where the chips ran: `in-process` or `child-process` (absent from lines of older
    /// versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// What the task's chip run found without failing (a write-after-read hazard); absent when
    /// there is nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Why a task failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonTaskError {
    /// The error code (`pto_types::ErrorCode`); null for a failure without one.
    pub code: Option<u32>,
    /// The code's name, or `FAILED`.
    pub name: String,
    pub message: String,
}

/// The memory figures of the case ([`CaseFigures`]), in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonCaseFigures {
    /// Σ over chips of `device_memory_per_chip`.
    pub device_memory_bytes: u64,
    /// What each chip holds reserved when the case ends, in chip order.
    pub device_memory_per_chip: Vec<u64>,
    /// Σ over tasks and over the rings with heap traffic of the heap capacity.
    pub heap_reserved_bytes: u64,
    /// Σ over tasks and rings of the heap's peak bytes in use.
    pub heap_high_water_bytes: u64,
}

/// The lines of `reports`, case by case.
pub fn json_rows(reports: &[CaseReport]) -> Vec<JsonRow> {
    let mut rows = Vec::new();
    for report in reports {
        let figures = JsonCaseFigures::of(&CaseFigures::of(&report.result));
        if report.result.rows.is_empty() {
            rows.push(JsonRow::of_case(report, figures));
            continue;
        }
        let tasks = report.result.rows.iter();
        rows.extend(tasks.map(|row| JsonRow::of_task(report, row, figures.clone())));
    }
    rows
}

impl JsonRow {
    fn of_task(report: &CaseReport, row: &TaskRow, case_figures: JsonCaseFigures) -> JsonRow {
        let error = row.error.as_ref().map(|e| JsonTaskError {
            code: e.code,
            name: e.name.clone(),
            message: e.message.clone(),
        });
        JsonRow {
            case: report.name.clone(),
            task: Some(row.task.clone()),
            chip: Some(row.chip),
            status: row.status().to_string(),
            rings: row
                .sizing
                .as_ref()
                .map(|s| rings_json(s, row.blocks.as_ref())),
            arena: row.arena.clone(),
            reserved_bytes: row.reserved_bytes,
            high_water_bytes: row.high_water_bytes,
            wall_us: row.wall.map(|w| w.as_micros() as u64),
            check: report.result.check.clone().err(),
            case_status: case_status(report).to_string(),
            task_check: Some(row.check_cell()),
            error,
            env_problems: row.env_problems.clone(),
            diagnostics_dir: row
                .diagnostics_dir
                .as_ref()
                .map(|d| d.display().to_string()),
            case_figures,
            mode: Some(report.mode.name().to_string()),
            warnings: row.warnings.clone(),
        }
    }

    fn of_case(report: &CaseReport, case_figures: JsonCaseFigures) -> JsonRow {
        JsonRow {
            case: report.name.clone(),
            task: None,
            chip: None,
            status: case_status(report).to_string(),
            rings: None,
            arena: None,
            reserved_bytes: 0,
            high_water_bytes: None,
            wall_us: Some(report.wall.as_micros() as u64),
            check: report.result.check.clone().err(),
            case_status: case_status(report).to_string(),
            task_check: None,
            error: None,
            env_problems: report.env_problems.clone(),
            diagnostics_dir: None,
            case_figures,
            mode: Some(report.mode.name().to_string()),
            warnings: Vec::new(),
        }
    }
}

impl JsonCaseFigures {
    fn of(figures: &CaseFigures) -> JsonCaseFigures {
        JsonCaseFigures {
            device_memory_bytes: figures.device_memory(),
            device_memory_per_chip: figures.per_chip.clone(),
            heap_reserved_bytes: figures.heap_reserved,
            heap_high_water_bytes: figures.heap_high_water,
        }
    }
}

fn case_status(report: &CaseReport) -> &'static str {
    if report.result.passed() {
        "ok"
    } else {
        "failed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pto_chip::diag::json_text;

    /// Lines `pto run --json` printed before the output was typed: a task with diagnostics,
    /// a failed task, an expected failure, a task with environment problems, a case whose
    /// output directory could not be written (no task rows).
    const OLD_LINES: [&str; 5] = [
        r#"{"case":"defaults","task":"vector_example","chip":0,"status":"ok","rings":[{"ring":0,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":1,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":2,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":3,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}}],"arena":"miss","reserved_bytes":1400898688,"high_water_bytes":65536,"wall_us":3108,"check":null,"case_status":"ok","task_check":"ok","error":null,"env_problems":[],"diagnostics_dir":"diag2/defaults/chip0/run1_task0_vector_example","case_figures":{"device_memory_bytes":1400898688,"device_memory_per_chip":[1400898688],"heap_reserved_bytes":536870912,"heap_high_water_bytes":65536}}"#,
        r#"{"case":"too_small","task":"vector_example","chip":0,"status":"failed","rings":[{"ring":0,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":1,"task_window":{"value":4,"source":"call_config","block":"runtime_env"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":2,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":3,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}}],"arena":null,"reserved_bytes":1319522880,"high_water_bytes":null,"wall_us":249,"check":"SCOPE_DEADLOCK: chip run failed: SCOPE_DEADLOCK (1) ring=1 detector=immediate\nerror detail: the scope at depth 1 already holds 3 tasks on ring 1; a ring of window 4 keeps at most 3 live\nerror hint: raise CallConfig.runtime_env.ring_task_window[1] (4, from call_config) to at least 8, or split the scope; scope stats (enable_scope_stats) record the peaks to size it from","case_status":"failed","task_check":"FAIL (SCOPE_DEADLOCK)","error":{"code":1,"name":"SCOPE_DEADLOCK","message":"chip run failed: SCOPE_DEADLOCK (1) ring=1 detector=immediate\nerror detail: the scope at depth 1 already holds 3 tasks on ring 1; a ring of window 4 keeps at most 3 live\nerror hint: raise CallConfig.runtime_env.ring_task_window[1] (4, from call_config) to at least 8, or split the scope; scope stats (enable_scope_stats) record the peaks to size it from"},"env_problems":[],"diagnostics_dir":null,"case_figures":{"device_memory_bytes":0,"device_memory_per_chip":[],"heap_reserved_bytes":0,"heap_high_water_bytes":0}}"#,
        r#"{"case":"global_max_on_small_chips","task":"ew1","chip":1,"status":"expected_failure","rings":[{"ring":0,"task_window":{"value":64,"source":"call_config","block":"runtime_env"},"heap":{"value":65536,"source":"call_config","block":"runtime_env"},"dep_pool":{"value":64,"source":"call_config","block":"runtime_env"}},{"ring":1,"task_window":{"value":64,"source":"call_config","block":"runtime_env"},"heap":{"value":131072,"source":"call_config","block":"runtime_env"},"dep_pool":{"value":64,"source":"call_config","block":"runtime_env"}},{"ring":2,"task_window":{"value":64,"source":"call_config","block":"runtime_env"},"heap":{"value":524288,"source":"call_config","block":"runtime_env"},"dep_pool":{"value":64,"source":"call_config","block":"runtime_env"}},{"ring":3,"task_window":{"value":64,"source":"call_config","block":"runtime_env"},"heap":{"value":65536,"source":"call_config","block":"runtime_env"},"dep_pool":{"value":64,"source":"call_config","block":"runtime_env"}}],"arena":null,"reserved_bytes":2065536,"high_water_bytes":null,"wall_us":54,"check":null,"case_status":"ok","task_check":"expected FAIL (DEVICE_MEMORY_EXHAUSTED)","error":{"code":1004,"name":"DEVICE_MEMORY_EXHAUSTED","message":"L2 bind failed: DEVICE_MEMORY_EXHAUSTED (1004): chip 1: arena needs 2065536 bytes (image 1272704 + dep pools 6400 + heaps 786432, heap from call_config); device memory has 1048576 bytes free of 1048576: set a per-task runtime_env.ring_heap or raise ChipSpec.device_memory_bytes"},"env_problems":[],"diagnostics_dir":null,"case_figures":{"device_memory_bytes":2065536,"device_memory_per_chip":[2065536,0,0,0],"heap_reserved_bytes":655360,"heap_high_water_bytes":370688}}"#,
        r#"{"case":"defaults","task":"vector_example","chip":0,"status":"ok","rings":[{"ring":0,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":1,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":2,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}},{"ring":3,"task_window":{"value":16384,"source":"default"},"heap":{"value":268435456,"source":"default"},"dep_pool":{"value":16384,"source":"default"}}],"arena":"miss","reserved_bytes":1400898688,"high_water_bytes":65536,"wall_us":1237,"check":null,"case_status":"ok","task_check":"ok","error":null,"env_problems":["PTO2_RING_HEAP=\"-1\" ignored: value 1 of 1 (\"-1\") is negative; ring_heap uses the default 268435456 on every ring the CallConfig leaves unset"],"diagnostics_dir":null,"case_figures":{"device_memory_bytes":1400898688,"device_memory_per_chip":[1400898688],"heap_reserved_bytes":536870912,"heap_high_water_bytes":65536}}"#,
        r#"{"case":"defaults","task":null,"chip":null,"status":"failed","rings":null,"arena":null,"reserved_bytes":0,"high_water_bytes":null,"wall_us":135,"check":"cannot write to output directory blocker/x/defaults: Not a directory (os error 20)","case_status":"failed","task_check":null,"error":null,"env_problems":[],"diagnostics_dir":null,"case_figures":{"device_memory_bytes":0,"device_memory_per_chip":[],"heap_reserved_bytes":0,"heap_high_water_bytes":0}}"#,
    ];

    #[test]
    fn lines_printed_before_read_and_print_back_byte_for_byte() {
        for line in OLD_LINES {
            let row: JsonRow = serde_json::from_str(line).unwrap();
            assert_eq!(json_text(&row), line);
        }
        let failed: JsonRow = serde_json::from_str(OLD_LINES[1]).unwrap();
        assert_eq!(failed.error.unwrap().code, Some(1));
        let case: JsonRow = serde_json::from_str(OLD_LINES[4]).unwrap();
        assert_eq!(
            (case.task, case.rings, case.reserved_bytes),
            (None, None, 0)
        );
    }

    #[test]
    fn rows_of_a_run_read_back_equal() {
        use crate::scene::{CaseResult, TaskErrorInfo, TaskSizing};
        use pto_types::{CallConfig, EnvSnapshot, ErrorCode, RuntimeEnv};
        let config = CallConfig::with_runtime_env(RuntimeEnv::default().with_heap(4096));
        let sizing = TaskSizing::resolve(&config, &EnvSnapshot::default());
        let error = TaskErrorInfo::new(Some(ErrorCode::ScopeDeadlock), "full".to_string());
        let mut result = CaseResult::new(vec![TaskRow::failed("ew1", 2, sizing, error)]);
        result.check = Err("SCOPE_DEADLOCK: full".to_string());
        let report = |name: &str, result: CaseResult| CaseReport {
            name: name.to_string(),
            result,
            wall: std::time::Duration::from_micros(1500),
            env_problems: vec!["PTO2_RING_HEAP=\"x\" ignored".to_string()],
            diagnostics: None,
            mode: pto_node::EndpointMode::InProcess,
        };
        let reports = [
            report("a", result),
            report("b", CaseResult::new(Vec::new())),
        ];
        let rows = json_rows(&reports);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].task_check.as_deref(), Some("FAIL (SCOPE_DEADLOCK)"));
        assert_eq!(rows[0].rings.as_ref().unwrap()[3].heap.value, 4096);
        assert_eq!(
            (rows[1].status.as_str(), rows[1].wall_us),
            ("ok", Some(1500))
        );
        let text = crate::runner::render_json_lines(&reports);
        let read: Vec<JsonRow> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(read, rows);
    }
}
