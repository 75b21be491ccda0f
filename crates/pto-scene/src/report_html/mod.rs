//! `pto run --report FILE.html` and `pto tune --report FILE.html`: one self-contained HTML page
//! (inline CSS and SVG; no script, no link, no URL of any kind) that opens offline.
//!
//! The page answers the product's question first, at a glance:
//! 1. **Device memory per sizing** (`overview.rs`): a bar per case that ran every task (the
//!    cases that compare, [`crate::figures::strategies`]), one segment per chip, with its
//!    multiple of the leanest; then every case in a table with its memory figures
//!    ([`crate::figures`]). `pto tune`'s page shows each case before and after instead, and
//!    its tasks' sizings side by side.
//! 2. **Reserved but not used** (`waste.rs`): per task and ring, the bytes reserved against
//!    the bytes that would hold its high-water marks, worst first, like tasks merged.
//! 3. **Occupancy over the run** (`occupancy.rs`, with `--enable-scope-stats`): per case, each
//!    ring of its busiest task against its capacity on a linear scale. Without scope stats
//!    the page says what it needs: `--report` never changes what a run records.
//! 4. **Cases** (`task.rs`), collapsed: the result table, and per task the sizing with the
//!    source of every value, reserved against high-water bars and the occupancy charts.
//!
//! Every text that reaches the page goes through [`esc`].

mod occupancy;
mod overview;
mod task;
mod waste;

use std::fmt::Write as _;

pub use occupancy::ScopeSeries;

use pto_sizing::report::human_bytes;
use pto_types::Resource;

use crate::file::SceneFile;
use crate::runner::{CaseReport, RunOptions};
use crate::scene::CaseResult;
use crate::tune::Tuning;

/// Colours of the three resources (bars and lines), in [`Resource::ALL`] order.
const COLOURS: [&str; 3] = ["#2b6cb0", "#c05621", "#2f855a"];

/// What the page says about the run besides the cases.
#[derive(Clone, Debug)]
pub struct HtmlPage {
    /// `pto run — scene vector_example`.
    pub title: String,
    /// Lines under the title (file, mode, counts).
    pub lines: Vec<String>,
    /// What the scene prints after its table (`Scene::summary`), kept verbatim.
    pub scene_summary: Vec<String>,
    /// Whether the run recorded scope stats (`--enable-scope-stats`).
    pub scope_stats: bool,
    /// Whether the cases' diagnostics directories outlive the page: `pto tune` without
    /// `--output` deletes its own, so the page must not point at them.
    pub diagnostics_kept: bool,
}

impl HtmlPage {
    /// The page of a `pto run`: scene, file, mode and counts.
    pub fn of_run(file: &SceneFile, options: &RunOptions, reports: &[CaseReport]) -> HtmlPage {
        let pairs: Vec<(String, CaseResult)> = reports
            .iter()
            .map(|r| (r.name.clone(), r.result.clone()))
            .collect();
        let passed = reports.iter().filter(|r| r.result.passed()).count();
        HtmlPage {
            title: format!("pto run — scene {}", file.scene.name()),
            lines: vec![format!(
                "{} · chips {} · {passed} passed, {} failed",
                file.path.display(),
                options.env.mode,
                reports.len() - passed
            )],
            scene_summary: file.scene.summary(&pairs),
            scope_stats: options.diagnostics.scope_stats,
            diagnostics_kept: true,
        }
    }
}

/// The page of a `pto run`.
pub fn render_html(page: &HtmlPage, reports: &[CaseReport]) -> String {
    let mut out = head(page);
    overview::strategies_section(&mut out, reports);
    waste::section(&mut out, reports, "Reserved but not used, worst first");
    occupancy_section(&mut out, page, reports);
    out.push_str("<section id=\"cases\"><h2>Cases</h2>\n");
    for report in reports {
        task::case(&mut out, report, page, "case");
    }
    out.push_str("</section>\n");
    tail(&mut out, page);
    out
}

/// The page of a `pto tune`: each case before and after, then every round's details.
pub fn render_tune_html(page: &HtmlPage, tunings: &[Tuning]) -> String {
    let mut out = head(page);
    overview::before_after_section(&mut out, tunings);
    out.push_str("<section id=\"pairs\"><h2>Tasks before and after</h2>\n");
    for t in tunings {
        overview::task_pairs(&mut out, t);
    }
    out.push_str("</section>\n");
    let after: Vec<CaseReport> = tunings.iter().map(|t| t.after().report.clone()).collect();
    waste::section(&mut out, &after, "Still reserved but not used after tuning");
    occupancy_section(&mut out, page, &after);
    out.push_str("<section id=\"cases\"><h2>Rounds</h2>\n");
    for t in tunings {
        for (i, round) in t.rounds.iter().enumerate() {
            let heading = match i {
                0 => "as written:".to_string(),
                i => format!("round {}:", i + 1),
            };
            task::case(&mut out, &round.report, page, &heading);
        }
    }
    out.push_str("</section>\n");
    tail(&mut out, page);
    out
}

fn head(page: &HtmlPage) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width\">\n\
         <title>{0}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{0}</h1>\n",
        esc(&page.title)
    );
    for line in &page.lines {
        let _ = writeln!(out, "<p class=\"meta\">{}</p>", esc(line));
    }
    out
}

fn tail(out: &mut String, page: &HtmlPage) {
    if !page.scene_summary.is_empty() {
        let _ = writeln!(
            out,
            "<details class=\"text\"><summary>The scene's summary as <code>pto run</code> \
             prints it</summary><pre>{}</pre></details>",
            esc(&page.scene_summary.join("\n"))
        );
    }
    out.push_str("</body>\n</html>\n");
}

/// Per case, the occupancy charts of its busiest task (the most heap used, then the largest
/// arena); the other tasks' charts are in the case details.
fn occupancy_section(out: &mut String, page: &HtmlPage, reports: &[CaseReport]) {
    out.push_str("<section id=\"occupancy\"><h2>Ring occupancy over the run</h2>\n");
    if !page.scope_stats {
        out.push_str(
            "<p class=\"note\">Occupancy over the run needs <code>--enable-scope-stats</code>; \
             this run recorded none. The case details show the chips' reported high-water \
             marks.</p>\n</section>\n",
        );
        return;
    }
    out.push_str(&occupancy::legend());
    for report in reports {
        // The most heap used, then the largest arena; the first of equals. Only its file is
        // read here (the details read each task's).
        let busiest = report
            .result
            .rows
            .iter()
            .filter(|r| r.usage.is_some())
            .filter_map(|r| Some((r, r.diagnostics_dir.as_deref()?)))
            .rev()
            .max_by_key(|(r, _)| (r.high_water_bytes, r.reserved_bytes));
        let Some((row, Some(Ok(series)))) = busiest.map(|(r, dir)| (r, ScopeSeries::of_task(dir)))
        else {
            continue;
        };
        let _ = writeln!(
            out,
            "<h3>case {}, task {} (chip {}, arena {})</h3>",
            esc(&report.name),
            esc(&row.task),
            row.chip,
            human_bytes(row.reserved_bytes)
        );
        occupancy::charts(out, &series, "occupancy overview");
    }
    out.push_str("</section>\n");
}

/// A heap value as bytes (`1.97 MiB`), the others as counts.
fn resource_value(resource: Resource, value: u64) -> String {
    match resource {
        Resource::Heap => human_bytes(value),
        _ => value.to_string(),
    }
}

/// `text` safe inside HTML elements and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1280px;\
padding:0 1em;color:#1a202c}h2{border-top:2px solid #cbd5e0;padding-top:.5em;margin:1.2em 0 .4em}\
h3{margin:.8em 0 .2em;font-size:15px}.meta{color:#4a5568;margin:.2em 0}\
.note{color:#744210;background:#fefcbf;padding:.3em .5em}.legend{color:#4a5568;font-size:12px;\
margin:.3em 0;max-width:60em}.error{color:#9b2c2c;font-family:monospace;white-space:pre-wrap}\
.ok,.pass{color:#276749}.FAILED{color:#c53030}.expected{color:#975a16}\
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #e2e8f0;padding:2px 8px;\
text-align:right;vertical-align:top;white-space:nowrap}td.text{white-space:normal;\
text-align:left;min-width:14em}th{background:#f7fafc;white-space:normal}td:first-child,th:first-child\
{text-align:left}td.over{font-weight:600}\
td.cells{font-family:monospace;font-size:12px;text-align:left}td.ring{font-size:11px;\
white-space:nowrap}.meter{display:block;height:4px;background:#edf2f7;margin:2px 0}\
.meter i{display:block;height:4px;background:#2f855a}.src{color:#718096}\
table.tasks td{font-family:monospace;font-size:12px}\
svg text{font-size:11px;fill:#2d3748}rect.cap{fill:#edf2f7;stroke:#a0aec0}\
.step{fill:none;stroke-width:1.5}.capline{stroke:#c53030;stroke-dasharray:4 3}\
.axis{stroke:#e2e8f0}.charts{display:flex;flex-wrap:wrap;gap:0 1em}figure.occ{margin:.2em 0}\
figcaption{font-size:11px;color:#4a5568;max-width:290px}ul.footer{margin:.3em 0}\
details{margin:.3em 0}details.case>summary{font-size:15px;cursor:pointer;padding:.2em 0}\
details.task{margin-left:1.2em}details.case{border-bottom:1px solid #e2e8f0}\
.swatch{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 .8em;vertical-align:-1px}\
pre{font-size:12px;overflow-x:auto}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    /// Messages, notes and env problems reach the page escaped; a row without a sizing draws
    /// no bars.
    #[test]
    fn every_text_is_escaped() {
        use crate::scene::{TaskErrorInfo, TaskRow};
        let error = TaskErrorInfo::new(None, "<script>alert('x')</script>".into());
        let mut result = CaseResult::new(vec![TaskRow::failed("t<1>", 0, None, error)]);
        result.check = Err("bad & <worse>".into());
        result.notes.push("<b>note</b>".into());
        let report = CaseReport {
            name: "c".into(),
            result,
            wall: std::time::Duration::ZERO,
            env_problems: vec!["PTO2_RING_HEAP=\"<x>\" ignored".into()],
            diagnostics: None,
            mode: pto_node::EndpointMode::InProcess,
        };
        let page = HtmlPage {
            title: "<t>".into(),
            lines: vec![],
            scene_summary: vec!["<i>summary</i>".into()],
            scope_stats: false,
            diagnostics_kept: true,
        };
        let html = render_html(&page, &[report]);
        assert!(!html.contains("<script") && !html.contains("<b>") && !html.contains("<x>"));
        assert!(!html.contains("<i>summary") && html.contains("&lt;i&gt;summary"));
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
        assert!(html.contains("data-task=\"t&lt;1&gt;\""));
        assert!(html.contains("bad &amp; &lt;worse&gt;"));
        assert!(!html.contains("<svg"));
    }
}
