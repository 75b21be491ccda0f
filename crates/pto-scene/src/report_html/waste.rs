//! Which tasks reserve more than they use, worst first: per task and ring, the arena bytes its
//! sizing reserves against the bytes of the smallest legal sizing that holds its high-water
//! marks. Tasks of a case with the same sizing and the same marks share one row.

use std::fmt::Write as _;

use pto_chip::RingUsage;
use pto_chip::footprint::ring_bytes;
use pto_sizing::advise::{Headroom, recommend};
use pto_sizing::report::human_bytes;
use pto_types::ring_config::resolve::ResolvedSizing;
use pto_types::{RING_COUNT, Resource};

use pto_types::ring_config::resolve::value_cell;

use super::esc;
use crate::runner::CaseReport;
use crate::scene::TaskRow;

/// Rows shown before the rest are folded away.
const SHOWN: usize = 10;

/// One row: tasks of a case that bound the same sizing and reached the same marks.
struct Waste<'a> {
    case: &'a str,
    tasks: Vec<&'a TaskRow>,
    sizing: &'a ResolvedSizing,
    usage: &'a [RingUsage; RING_COUNT],
    /// Per ring: bytes reserved, and bytes of the smallest sizing holding the marks.
    reserved: [u64; RING_COUNT],
    fit: [u64; RING_COUNT],
}

impl Waste<'_> {
    fn over(&self) -> u64 {
        (0..RING_COUNT)
            .map(|r| self.reserved[r].saturating_sub(self.fit[r]))
            .sum()
    }
}

/// A ring's high-water marks in [`Resource::ALL`] order.
fn marks(usage: &RingUsage) -> [u64; 3] {
    [usage.task_window_peak, usage.heap_peak, usage.dep_pool_peak]
}

/// The row of a task that bound a sizing (it has a chip report): per ring, the bytes it
/// reserves and the bytes that would hold its marks.
fn waste_of<'a>(case: &'a str, row: &'a TaskRow) -> Option<Waste<'a>> {
    let (sizing, usage) = (row.sizing.as_ref()?, row.usage.as_ref()?);
    let mut reserved = [0; RING_COUNT];
    let mut fit = [0; RING_COUNT];
    for (ring, ring_usage) in usage.iter().enumerate() {
        let value = |r: Resource| sizing.at(r, ring).value;
        let peaks = marks(ring_usage);
        let needed = |k: usize| {
            let r = Resource::ALL[k];
            recommend(r, peaks[k], Headroom::default()).min(value(r))
        };
        reserved[ring] = ring_bytes(
            value(Resource::TaskWindow),
            value(Resource::Heap),
            value(Resource::DepPool),
        )?;
        fit[ring] = ring_bytes(needed(0), needed(1), needed(2))?;
    }
    Some(Waste {
        case,
        tasks: vec![row],
        sizing,
        usage,
        reserved,
        fit,
    })
}

fn rows(reports: &[CaseReport]) -> Vec<Waste<'_>> {
    let mut rows: Vec<Waste<'_>> = Vec::new();
    for report in reports {
        for task in &report.result.rows {
            let Some(waste) = waste_of(&report.name, task) else {
                continue;
            };
            let same = rows.iter_mut().find(|w| {
                w.case == waste.case
                    && w.usage == waste.usage
                    && w.sizing.key() == waste.sizing.key()
            });
            match same {
                Some(w) => w.tasks.push(task),
                None => rows.push(waste),
            }
        }
    }
    // Stable: equal rows keep the run's order.
    rows.sort_by_key(|w| std::cmp::Reverse(w.over() * w.tasks.len() as u64));
    rows
}

/// The section: a table of the worst rows, the rest folded.
pub(super) fn section(out: &mut String, reports: &[CaseReport], heading: &str) {
    let rows = rows(reports);
    let _ = writeln!(out, "<section id=\"waste\"><h2>{}</h2>", esc(heading));
    if rows.is_empty() {
        out.push_str("<p>No task bound an arena, so none reserved anything.</p></section>\n");
        return;
    }
    out.push_str(
        "<p class=\"legend\">Per row, tasks of one case with the same sizing and the same \
         high-water marks. <strong>fits in</strong>: the arena of the smallest legal sizing that holds \
         the marks (per ring and resource, what <code>pto advise</code> recommends at headroom \
         0, before it adds the largest heap allocation); <strong>over</strong>: reserved − fits in, for \
         all the row's tasks. A ring cell: the share of its reserved bytes that would fit the \
         marks, then task window (t), heap (h) and dep pool (d) as high-water / capacity. Worst \
         first.</p>\n",
    );
    table(out, &rows[..rows.len().min(SHOWN)]);
    if rows.len() > SHOWN {
        let _ = writeln!(
            out,
            "<details><summary>{} more row(s)</summary>",
            rows.len() - SHOWN
        );
        table(out, &rows[SHOWN..]);
        out.push_str("</details>\n");
    }
    out.push_str("</section>\n");
}

fn table(out: &mut String, rows: &[Waste<'_>]) {
    out.push_str(
        "<table class=\"waste\"><thead><tr><th>case and tasks</th><th>reserved</th>\
         <th>fits in</th><th>over</th>",
    );
    for ring in 0..RING_COUNT {
        let _ = write!(out, "<th>ring {ring}</th>");
    }
    out.push_str("</tr></thead><tbody>\n");
    for w in rows {
        row(out, w);
    }
    out.push_str("</tbody></table>\n");
}

fn row(out: &mut String, w: &Waste<'_>) {
    let n = w.tasks.len() as u64;
    let reserved: u64 = w.tasks.iter().map(|t| t.reserved_bytes).sum();
    // The arena is a header plus the rings' bytes, so what fits is the reserved arena less
    // the rings' excess.
    let fit = reserved.saturating_sub(w.over() * n);
    let mut chips: Vec<u32> = w.tasks.iter().map(|t| t.chip).collect();
    chips.sort_unstable();
    chips.dedup();
    let _ = write!(
        out,
        "<tr><td>{}<br><small>{} · chip {}</small></td><td>{}</td><td>{}</td>\
         <td class=\"over\">{}</td>",
        esc(w.case),
        esc(&task_names(&w.tasks)),
        esc(&chips
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")),
        human_bytes(reserved),
        human_bytes(fit),
        human_bytes(w.over() * n)
    );
    for (ring, ring_usage) in w.usage.iter().enumerate() {
        let share = w.fit[ring] as f64 / w.reserved[ring].max(1) as f64;
        let detail: Vec<String> = Resource::ALL
            .into_iter()
            .zip(marks(ring_usage))
            .map(|(r, m)| {
                let v = |x: u64| value_cell(r, x, ' ').trim_end().to_string();
                format!(
                    "{} {}/{}",
                    &r.short_name()[..1],
                    v(m),
                    v(w.sizing.at(r, ring).value)
                )
            })
            .collect();
        let percent = (share * 100.0).clamp(0.0, 100.0);
        let _ = write!(
            out,
            "<td class=\"ring\"><span class=\"meter\"><i style=\"width:{percent:.0}%\"></i>\
             </span>{percent:.0} % of {}<br><small>{}</small></td>",
            human_bytes(w.reserved[ring]),
            esc(&detail.join(" · "))
        );
    }
    out.push_str("</tr>\n");
}

/// `attn`, or `ew0, ew1, … ew7 (8)` for many.
pub(super) fn task_names(tasks: &[&TaskRow]) -> String {
    match tasks {
        [one] => one.task.clone(),
        [first, second] => format!("{}, {}", first.task, second.task),
        [first, .., last] => format!("{} … {} ({})", first.task, last.task, tasks.len()),
        [] => String::new(),
    }
}
