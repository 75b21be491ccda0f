//! The cases' details, collapsed: per case its footer lines and the result table as a real
//! table, then per task its sizing with the source of every value, reserved capacity against
//! high-water per ring, and its occupancy charts.

use std::fmt::Write as _;

use pto_sizing::report::human_bytes;
use pto_types::{RING_COUNT, Resource};

use super::occupancy::{self, ScopeSeries};
use super::{COLOURS, HtmlPage, esc, resource_value};
use crate::figures::CaseFigures;
use crate::runner::{CaseReport, TABLE_HEADER, case_footer, table_row};
use crate::scene::TaskRow;

/// One case as a `<details>` element (closed), its summary line saying what it found.
pub(super) fn case(out: &mut String, report: &CaseReport, page: &HtmlPage, heading: &str) {
    let result = &report.result;
    let figures = (!result.rows.is_empty()).then(|| CaseFigures::of(result));
    let _ = writeln!(
        out,
        "<details class=\"case\" data-case=\"{0}\"><summary>{1} <strong>{0}</strong> <span class=\"{2}\">\
         {3}</span> · {4} task(s){5}</summary>",
        esc(&report.name),
        esc(heading),
        verdict_class(report),
        esc(&verdict(report)),
        result.rows.len(),
        figures.map_or(String::new(), |f| format!(
            " · device memory {}",
            human_bytes(f.device_memory())
        ))
    );
    out.push_str("<ul class=\"footer\">\n");
    for line in case_footer(report) {
        if !page.diagnostics_kept && line.starts_with(": diagnostics:") {
            continue;
        }
        let _ = writeln!(out, "<li>{}</li>", esc(line.trim_start_matches([':', ' '])));
    }
    out.push_str("</ul>\n");
    if result.rows.is_empty() {
        out.push_str("<p>No task ran.</p>\n");
    } else {
        task_table(out, report);
    }
    for row in &result.rows {
        task(out, row, page.scope_stats);
    }
    out.push_str("</details>\n");
}

/// `pass`, `pass (3 tasks failed as expected)` or `FAILED: …`.
pub(super) fn verdict(report: &CaseReport) -> String {
    let result = &report.result;
    let expected = result
        .rows
        .iter()
        .filter(|r| r.error.as_ref().is_some_and(|e| e.expected))
        .count();
    match (&result.check, expected) {
        (Err(e), _) => format!("FAILED: {e}"),
        (Ok(()), 0) => "pass".to_string(),
        (Ok(()), n) => format!("pass ({n} task(s) failed as expected)"),
    }
}

pub(super) fn verdict_class(report: &CaseReport) -> &'static str {
    if report.result.passed() {
        "pass"
    } else {
        "FAILED"
    }
}

/// The rows of `pto run`'s table for this case, as a table (the case column left out).
fn task_table(out: &mut String, report: &CaseReport) {
    out.push_str("<table class=\"tasks\"><thead><tr>");
    for h in &TABLE_HEADER[1..] {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in &report.result.rows {
        out.push_str("<tr>");
        for cell in &table_row(&report.name, row)[1..] {
            let _ = write!(out, "<td>{}</td>", esc(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

/// One task as a `<details>` element (closed).
fn task(out: &mut String, row: &TaskRow, scope_stats: bool) {
    let class = match &row.error {
        None => "ok",
        Some(e) if e.expected || e.skipped => "expected",
        Some(_) => "FAILED",
    };
    let _ = writeln!(
        out,
        "<details class=\"task\" data-task=\"{0}\"><summary>task <strong>{0}</strong> on chip {1} \
         <span class=\"{2}\">{3}</span></summary>",
        esc(&row.task),
        row.chip,
        class,
        esc(&row.check_cell())
    );
    let _ = writeln!(out, "<p class=\"meta\">{}</p>", esc(&arena_line(row)));
    if let Some(e) = &row.error {
        let _ = writeln!(out, "<p class=\"error\">{}</p>", esc(&e.message));
    }
    let stats = row
        .diagnostics_dir
        .as_deref()
        .filter(|_| scope_stats)
        .and_then(ScopeSeries::of_task);
    sizing_table(out, row);
    bars(out, row, stats.as_ref().and_then(|s| s.as_ref().ok()));
    match (&stats, scope_stats) {
        (Some(Ok(series)), _) => occupancy::charts(out, series, "occupancy"),
        (Some(Err(e)), _) => {
            let _ = writeln!(
                out,
                "<p class=\"note\">scope stats unreadable: {}</p>",
                esc(e)
            );
        }
        (None, true) if row.usage.is_some() => {
            out.push_str("<p class=\"note\">No scope stats for this task.</p>\n");
        }
        (None, _) => {}
    }
    out.push_str("</details>\n");
}

/// What the task holds: a bound arena, or the arena a failed bind needed.
fn arena_line(row: &TaskRow) -> String {
    let wall = row.wall.map_or("-".to_string(), |w| format!("{w:.1?}"));
    let arena = match &row.error {
        Some(e) if e.skipped => "not run (a task it needs failed)".to_string(),
        _ if row.sizing.is_none() => "no arena".to_string(),
        Some(e) if row.never_bound() => format!(
            "arena needed {}, not bound ({})",
            human_bytes(row.reserved_bytes),
            e.name
        ),
        _ => format!("arena reserved {}", human_bytes(row.reserved_bytes)),
    };
    format!(
        "{arena} · heap high-water {} · arena cache {} · wall {wall}",
        row.high_water_bytes.map_or("-".to_string(), human_bytes),
        row.arena.as_deref().unwrap_or("-"),
    )
}

/// Per ring, every value with its source.
fn sizing_table(out: &mut String, row: &TaskRow) {
    let Some(sizing) = &row.sizing else {
        out.push_str("<p class=\"note\">No sizing: the config could not be resolved.</p>\n");
        return;
    };
    out.push_str(
        "<table class=\"sizing\"><thead><tr><th>ring</th><th>task_window</th><th>heap</th>\
         <th>dep_pool</th></tr></thead><tbody>\n",
    );
    for ring in 0..RING_COUNT {
        let _ = write!(out, "<tr><td>{ring}</td>");
        for resource in Resource::ALL {
            let v = sizing.at(resource, ring);
            let source = row.source_text(resource, ring).unwrap_or_default();
            let _ = write!(
                out,
                "<td>{} <span class=\"src\">({})</span></td>",
                esc(&resource_value(resource, v.value)),
                esc(&source)
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

/// Reserved capacity (the whole bar) against the high-water mark (the filled part) per ring
/// and resource: the chip report's marks, else the scope stats' peaks (a run that failed after
/// binding sends no report). A task that never bound has no bars: it reserved nothing.
fn bars(out: &mut String, row: &TaskRow, stats: Option<&ScopeSeries>) {
    let Some(sizing) = &row.sizing else {
        return;
    };
    if row.never_bound() {
        return;
    }
    let peak = |k: usize, ring: usize| -> Option<u64> {
        match (&row.usage, stats) {
            (Some(u), _) => Some(u[ring].peak(Resource::ALL[k])),
            (None, Some(s)) => Some(s.peaks[ring][k]),
            (None, None) => None,
        }
    };
    let height = Resource::ALL.len() * RING_COUNT * 18 + 4;
    let _ = writeln!(
        out,
        "<svg class=\"bars\" width=\"760\" height=\"{height}\" role=\"img\"><title>reserved \
         against high-water per ring</title>"
    );
    for (k, resource) in Resource::ALL.into_iter().enumerate() {
        for ring in 0..RING_COUNT {
            let y = (k * RING_COUNT + ring) * 18 + 2;
            let capacity = sizing.at(resource, ring).value;
            out.push_str(&bar(k, ring, y, capacity, peak(k, ring)));
        }
    }
    out.push_str("</svg>\n");
}

/// One bar: the whole width is the reserved `capacity`, the filled part the high-water mark
/// (at least a pixel when it is not zero, so any use shows).
fn bar(k: usize, ring: usize, y: usize, capacity: u64, high: Option<u64>) -> String {
    const W: f64 = 360.0;
    let resource = Resource::ALL[k];
    let name = resource.short_name();
    let fraction = high.map_or(0.0, |h| h as f64 / capacity.max(1) as f64);
    let mut filled = (fraction.min(1.0) * W).round();
    if high.is_some_and(|h| h > 0) {
        filled = filled.max(1.0);
    }
    let text = match high {
        Some(h) => format!(
            "{name} ring {ring}: high-water {} of {} reserved ({:.2}%)",
            resource_value(resource, h),
            resource_value(resource, capacity),
            fraction * 100.0
        ),
        None => format!(
            "{name} ring {ring}: {} reserved, no high-water mark",
            resource_value(resource, capacity)
        ),
    };
    format!(
        "<rect x=\"0\" y=\"{y}\" width=\"{W}\" height=\"14\" class=\"cap\"/>\
         <rect x=\"0\" y=\"{y}\" width=\"{filled}\" height=\"14\" fill=\"{}\"/>\
         <text x=\"{}\" y=\"{}\">{}</text>\n",
        COLOURS[k],
        W + 8.0,
        y + 11,
        esc(&text)
    )
}
