//! The page's top: how much device memory each way of sizing needs (a chart and a table), and
//! for `pto tune`, each case before and after side by side.

use std::fmt::Write as _;

use pto_sizing::report::human_bytes;
use pto_types::Resource;

use super::esc;
use super::task::{verdict, verdict_class};
use super::waste::{chip_list, task_names};
use crate::figures::{CaseFigures, LEGEND, leanest, strategies};
use crate::runner::{CaseReport, arena_cell, rings_cell};
use crate::scene::TaskRow;
use crate::tune::Tuning;

/// Room for the case names on the left of a bar chart, the bars' full length, a row's height.
const LABEL: f64 = 230.0;
const BAR: f64 = 420.0;
const ROW: f64 = 26.0;
/// Alternating shades of a bar's per-chip segments; the leanest way is green.
const BLUE: [&str; 2] = ["#2b6cb0", "#63b3ed"];
const GREEN: [&str; 2] = ["#276749", "#68d391"];
const GREY: [&str; 2] = ["#718096", "#a0aec0"];

/// A horizontal bar: `segments` (label, bytes) stacked from the left, scaled so `max` is the
/// full length, and `text` after it.
struct Bar<'a> {
    /// The case, named in the segments' tooltips and, unless `hide_label`, on the left.
    label: &'a str,
    hide_label: bool,
    segments: Vec<(String, u64)>,
    shades: [&'static str; 2],
    text: String,
}

fn bar_chart(class: &str, bars: &[Bar<'_>]) -> String {
    let max = bars
        .iter()
        .map(|b| b.segments.iter().map(|s| s.1).sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let height = ROW * bars.len() as f64 + 4.0;
    let mut svg = format!(
        "<svg class=\"{class}\" width=\"{}\" height=\"{height}\" role=\"img\">",
        LABEL + BAR + 260.0
    );
    for (i, b) in bars.iter().enumerate() {
        let y = 2.0 + ROW * i as f64;
        if !b.hide_label {
            let _ = write!(
                svg,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" class=\"label\">{}</text>",
                LABEL - 8.0,
                y + 14.0,
                esc(&short(b.label, 34))
            );
        }
        let mut x = LABEL;
        for (k, (name, bytes)) in b.segments.iter().enumerate() {
            let w = *bytes as f64 / max * BAR;
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"18\" fill=\"{}\">\
                 <title>{}</title></rect>",
                b.shades[k % 2],
                esc(&format!("{}: {name} {}", b.label, human_bytes(*bytes)))
            );
            x += w;
        }
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 6.0,
            y + 14.0,
            esc(&b.text)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// `name` cut to `n` characters with an ellipsis.
fn short(name: &str, n: usize) -> String {
    match name.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &name[..i]),
        None => name.to_string(),
    }
}

fn chip_segments(f: &CaseFigures) -> Vec<(String, u64)> {
    f.per_chip
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("chip{i}"), *b))
        .collect()
}

/// The run page's summary: the chart of the comparable cases, and every case in a table.
pub(super) fn strategies_section(out: &mut String, reports: &[CaseReport]) {
    let ways = strategies(reports.iter().map(|r| (r.name.as_str(), &r.result)));
    let best = leanest(&ways);
    out.push_str("<section id=\"summary\"><h2>Device memory per sizing</h2>\n");
    if ways.is_empty() {
        out.push_str("<p>No case ran every task, so no sizing compares.</p>\n");
    } else {
        let bars: Vec<Bar<'_>> = ways
            .iter()
            .map(|(name, f)| strategy_bar(name, f, best))
            .collect();
        out.push_str(&bar_chart("strategies", &bars));
        out.push_str(
            "<p class=\"legend\">Each bar: the device memory a case holds when it ends, one \
             segment per chip (hover for its bytes), for the cases that ran every task.</p>\n",
        );
    }
    summary_table(out, reports, &ways, best);
    let left_out: Vec<&str> = reports
        .iter()
        .map(|r| r.name.as_str())
        .filter(|n| !ways.iter().any(|(w, _)| w == n))
        .collect();
    if !left_out.is_empty() && !ways.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"note\">Not charted (the case failed, or a task of it did not run): \
             {}.</p>",
            esc(&left_out.join(", "))
        );
    }
    out.push_str("</section>\n");
}

fn strategy_bar<'a>(name: &'a str, f: &CaseFigures, best: Option<(&str, u64)>) -> Bar<'a> {
    let bytes = f.device_memory();
    let (shades, text) = match best {
        Some((b, _)) if b == name => (GREEN, format!("{} · the leanest", human_bytes(bytes))),
        Some((b, least)) => (
            BLUE,
            format!("{} · {:.2}× {b}", human_bytes(bytes), f.times(least)),
        ),
        None => (BLUE, human_bytes(bytes)),
    };
    Bar {
        label: name,
        hide_label: false,
        segments: chip_segments(f),
        shades,
        text,
    }
}

fn summary_table(
    out: &mut String,
    reports: &[CaseReport],
    ways: &[(&str, CaseFigures)],
    best: Option<(&str, u64)>,
) {
    out.push_str(
        "<table class=\"summary\"><thead><tr><th>case</th><th>result</th><th>tasks</th>\
         <th>device memory</th><th>× leanest</th><th>heap reserved</th>\
         <th>heap high-water</th><th>heap reserved / high-water</th></tr></thead><tbody>\n",
    );
    for report in reports {
        let f = CaseFigures::of(&report.result);
        let times = match (ways.iter().find(|(n, _)| *n == report.name), best) {
            (Some(_), Some((_, least))) => format!("{:.2}", f.times(least)),
            _ => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"text {}\">{}</td><td>{}</td><td>{}</td><td>{times}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&report.name),
            verdict_class(report),
            esc(&verdict(report)),
            report.result.rows.len(),
            human_bytes(f.device_memory()),
            human_bytes(f.heap_reserved),
            human_bytes(f.heap_high_water),
            f.heap_ratio_text()
        );
    }
    let _ = writeln!(
        out,
        "</tbody></table>\n<p class=\"legend\">{}</p>",
        esc(LEGEND)
    );
}

/// The tune page's summary: per case, device memory before and after (a chart) and the
/// figures of both rounds (a table).
pub(super) fn before_after_section(out: &mut String, tunings: &[Tuning]) {
    out.push_str("<section id=\"summary\"><h2>Before and after tuning</h2>\n");
    let mut bars = Vec::new();
    for t in tunings {
        let (was, now) = figures(t);
        bars.push(Bar {
            label: &t.case,
            hide_label: false,
            segments: chip_segments(&was),
            shades: GREY,
            text: format!("before {}", human_bytes(was.device_memory())),
        });
        if t.rounds.len() > 1 {
            bars.push(Bar {
                label: &t.after().case,
                hide_label: true,
                segments: chip_segments(&now),
                shades: GREEN,
                text: format!(
                    "after {} ({})",
                    human_bytes(now.device_memory()),
                    change(was.device_memory(), now.device_memory())
                ),
            });
        }
    }
    out.push_str(&bar_chart("strategies", &bars));
    out.push_str(
        "<p class=\"legend\">Device memory per case as written (grey) and with the verified \
         advice (green), one segment per chip.</p>\n<table class=\"summary\"><thead><tr>\
         <th>case</th><th>tuning</th><th>rounds</th><th>device memory before</th>\
         <th>after</th><th>change</th><th>heap reserved before</th><th>after</th>\
         <th>heap reserved / high-water before</th><th>after</th></tr></thead><tbody>\n",
    );
    for t in tunings {
        let (was, now) = figures(t);
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"text\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&t.case),
            esc(&t.verdict_line()),
            t.rounds.len(),
            human_bytes(was.device_memory()),
            human_bytes(now.device_memory()),
            change(was.device_memory(), now.device_memory()),
            human_bytes(was.heap_reserved),
            human_bytes(now.heap_reserved),
            was.heap_ratio_text(),
            now.heap_ratio_text()
        );
    }
    let _ = writeln!(
        out,
        "</tbody></table>\n<p class=\"legend\">{}</p>\n</section>",
        esc(LEGEND)
    );
}

fn figures(t: &Tuning) -> (CaseFigures, CaseFigures) {
    (
        CaseFigures::of(&t.before().report.result),
        CaseFigures::of(&t.after().report.result),
    )
}

/// `−88 %`, `+3 %`, `same`; `-` from nothing.
fn change(was: u64, now: u64) -> String {
    if was == now {
        return "same".to_string();
    }
    if was == 0 {
        return "-".to_string();
    }
    let percent = (now as f64 - was as f64) / was.max(1) as f64 * 100.0;
    format!(
        "{}{:.0} %",
        if percent < 0.0 { "−" } else { "+" },
        percent.abs()
    )
}

/// Per tuned case, its tasks' sizing and arena before and after, side by side.
pub(super) fn task_pairs(out: &mut String, t: &Tuning) {
    if t.rounds.len() < 2 {
        return;
    }
    let _ = writeln!(
        out,
        "<h3>case {}: per task</h3>\n<table class=\"pairs\" data-case=\"{}\"><thead><tr>\
         <th>task</th><th>chip</th><th>sizing before</th><th>sizing after</th>\
         <th>arena before</th><th>after</th><th>heap high-water before</th><th>after</th>\
         </tr></thead><tbody>",
        esc(&t.case),
        esc(&t.case)
    );
    for group in like_pairs(t) {
        let (before, after) = group[0];
        let tasks: Vec<&TaskRow> = group.iter().map(|(b, _)| *b).collect();
        let arena = |r: Option<&TaskRow>| r.map_or("-".to_string(), arena_cell);
        let high = |r: Option<&TaskRow>| {
            r.and_then(|r| r.high_water_bytes)
                .map_or("-".to_string(), human_bytes)
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"cells\">{}</td><td class=\"cells\">{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            task_names(&tasks),
            chip_list(&tasks),
            sizing_cells(Some(before)),
            sizing_cells(after),
            arena(Some(before)),
            arena(after),
            high(Some(before)),
            high(after)
        );
    }
    out.push_str("</tbody></table>\n");
}

/// The task pairs of a tuning, tasks with the same sizings and figures in both rounds merged
/// (in the order of their first task).
fn like_pairs(t: &Tuning) -> Vec<Vec<(&TaskRow, Option<&TaskRow>)>> {
    let key = |r: Option<&TaskRow>| {
        r.map(|r| {
            (
                r.sizing.as_ref().map(|s| s.key()),
                r.reserved_bytes,
                r.high_water_bytes,
                r.check_cell(),
            )
        })
    };
    let mut groups: Vec<Vec<(&TaskRow, Option<&TaskRow>)>> = Vec::new();
    for (before, after) in t.pairs() {
        let same = groups
            .iter_mut()
            .find(|g| key(Some(g[0].0)) == key(Some(before)) && key(g[0].1) == key(after));
        match same {
            Some(g) => g.push((before, after)),
            None => groups.push(vec![(before, after)]),
        }
    }
    groups
}

/// A row's sizing as the result table's three cells, one line each.
fn sizing_cells(row: Option<&TaskRow>) -> String {
    let Some(row) = row else {
        return "-".to_string();
    };
    Resource::ALL
        .into_iter()
        .map(|r| format!("{} {}", r.short_name(), esc(&rings_cell(row, r))))
        .collect::<Vec<_>>()
        .join("<br>")
}
