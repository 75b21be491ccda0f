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
    /// Bytes over, per task.
    fn over(&self) -> u64 {
        (0..RING_COUNT).fold(0u64, |sum, r| {
            sum.saturating_add(self.reserved[r].saturating_sub(self.fit[r]))
        })
    }

    /// Bytes over, for all the row's tasks.
    fn over_all(&self) -> u64 {
        self.over().saturating_mul(self.tasks.len() as u64)
    }
}

/// A ring's high-water marks in [`Resource::ALL`] order.
fn marks(usage: &RingUsage) -> [u64; 3] {
    Resource::ALL.map(|r| usage.peak(r))
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
            recommend(r, peaks[k], Headroom::ZERO).min(value(r))
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
    rows.sort_by_key(|w| std::cmp::Reverse(w.over_all()));
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
    let reserved = w
        .tasks
        .iter()
        .fold(0u64, |sum, t| sum.saturating_add(t.reserved_bytes));
    // The arena is a header plus the rings' bytes, so what fits is the reserved arena less
    // the rings' excess.
    let fit = reserved.saturating_sub(w.over_all());
    let _ = write!(
        out,
        "<tr><td>{}<br><small>{} · chip {}</small></td><td>{}</td><td>{}</td>\
         <td class=\"over\">{}</td>",
        esc(w.case),
        task_names(&w.tasks),
        chip_list(&w.tasks),
        human_bytes(reserved),
        human_bytes(fit),
        human_bytes(w.over_all())
    );
    for (ring, ring_usage) in w.usage.iter().enumerate() {
        let share = w.fit[ring] as f64 / w.reserved[ring].max(1) as f64;
        let detail: Vec<String> = Resource::ALL
            .into_iter()
            .zip(marks(ring_usage))
            .map(|(r, m)| {
                let v = |x: u64| value_cell(r, x, ' ').trim_end().to_string();
                let letter = match r {
                    Resource::TaskWindow => 't',
                    Resource::Heap => 'h',
                    Resource::DepPool => 'd',
                };
                format!("{letter} {}/{}", v(m), v(w.sizing.at(r, ring).value))
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

/// `attn`, `ew0, ew4`, or `ew0 … ew7 (8)` for more, with every name in its tooltip; as HTML.
pub(super) fn task_names(tasks: &[&TaskRow]) -> String {
    let all: Vec<&str> = tasks.iter().map(|t| t.task.as_str()).collect();
    let shown = match all.as_slice() {
        [first, _, _, ..] => format!("{first} … {} ({})", all[all.len() - 1], all.len()),
        _ => all.join(", "),
    };
    format!(
        "<span title=\"{}\">{}</span>",
        esc(&all.join(", ")),
        esc(&shown)
    )
}

/// The distinct chips of `tasks`, ascending: `0,1,2,3`.
pub(super) fn chip_list(tasks: &[&TaskRow]) -> String {
    let mut chips: Vec<u32> = tasks.iter().map(|t| t.chip).collect();
    chips.sort_unstable();
    chips.dedup();
    let chips: Vec<String> = chips.iter().map(u32::to_string).collect();
    chips.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::TaskSizing;
    use pto_types::RuntimeEnv;
    use pto_types::ring_config::env::EnvSnapshot;

    fn row(task: &str, call: RuntimeEnv, usage: [RingUsage; RING_COUNT]) -> TaskRow {
        let config = pto_types::CallConfig {
            runtime_env: call,
            ..pto_types::CallConfig::default()
        };
        let sizing = TaskSizing::resolve(&config, &EnvSnapshot::default());
        let mut row = TaskRow::failed(
            task,
            0,
            sizing,
            crate::scene::TaskErrorInfo::new(None, String::new()),
        );
        row.error = None;
        row.usage = Some(usage);
        row
    }

    /// "fits in" is the smallest legal sizing holding the marks, at headroom 0, in bytes of
    /// the arena formula: figures worked out by hand.
    #[test]
    fn fit_is_the_smallest_legal_sizing_at_headroom_zero() {
        let mut usage = [RingUsage::default(); RING_COUNT];
        // Ring 1: 5 live tasks (a window of 8: the next power of two above 5), 3000 heap
        // bytes (3008, 64-aligned), 6 dep entries.
        usage[1] = RingUsage {
            task_window_peak: 5,
            heap_peak: 3000,
            dep_pool_peak: 6,
        };
        let call = RuntimeEnv::default()
            .with_task_window(16)
            .with_heap(65536)
            .with_dep_pool(16);
        let r = row("t", call, usage);
        let w = waste_of("c", &r).unwrap();
        let slots = |n: u64| ring_bytes(n, 0, 0).unwrap() - ring_bytes(0, 0, 0).unwrap();
        assert_eq!(slots(8), 8 * (40 + 4864 + 64));
        assert_eq!(w.fit[1], ring_bytes(8, 3008, 6).unwrap());
        assert_eq!(w.reserved[1], ring_bytes(16, 65536, 16).unwrap());
        // An unused ring fits in the smallest legal ring.
        let min = |r: Resource| r.legal_at_least(0);
        let smallest = ring_bytes(
            min(Resource::TaskWindow),
            min(Resource::Heap),
            min(Resource::DepPool),
        )
        .unwrap();
        assert_eq!(w.fit[0], smallest);
        let over: u64 = (0..RING_COUNT).map(|k| w.reserved[k] - w.fit[k]).sum();
        assert_eq!(w.over(), over);
        assert_eq!(
            r.reserved_bytes - w.over(),
            r.reserved_bytes - over,
            "fits in = reserved − over"
        );
    }

    /// A task without a chip report has no row; like tasks of a case share one, worst first.
    #[test]
    fn like_tasks_share_a_row_worst_first() {
        let usage = [RingUsage::default(); RING_COUNT];
        let big = RuntimeEnv::default()
            .with_task_window(64)
            .with_heap(1 << 20);
        let min = |r: Resource| r.legal_at_least(0);
        let small = RuntimeEnv::default()
            .with_task_window(min(Resource::TaskWindow))
            .with_heap(min(Resource::Heap))
            .with_dep_pool(min(Resource::DepPool));
        let mut failed = row("f", big, usage);
        failed.usage = None;
        let rows_of = vec![
            row("s", small, usage),
            row("b0", big, usage),
            failed,
            row("b1", big, usage),
        ];
        let report = crate::runner::CaseReport {
            name: "c".into(),
            result: crate::scene::CaseResult::new(rows_of),
            wall: std::time::Duration::ZERO,
            env_problems: Vec::new(),
            diagnostics: None,
            mode: pto_node::EndpointMode::InProcess,
        };
        let reports = [report];
        let rows = rows(&reports);
        let names: Vec<Vec<&str>> = rows
            .iter()
            .map(|w| w.tasks.iter().map(|t| t.task.as_str()).collect())
            .collect();
        assert_eq!(names, vec![vec!["b0", "b1"], vec!["s"]]);
        assert_eq!(rows[1].over(), 0, "the smallest legal sizing is not over");
    }
}
