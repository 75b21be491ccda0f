//! `pto run --report FILE.html`: one self-contained HTML page (inline CSS and SVG; no script,
//! no link, no URL of any kind) that opens offline in a browser.
//!
//! Per case: the result and footer lines of the table; per task: the sizing with the source of
//! every value, reserved capacity against high-water mark per ring (task window, heap, dep
//! pool), and — from the task's `scope_stats/scope_stats.jsonl` (CHIP_RUNTIME.md §7) — each
//! ring's occupancy over the run against its capacity. Without `--enable-scope-stats` the page
//! says that occupancy needs it: `--report` never changes what a run records.
//!
//! Every text that reaches the page goes through [`esc`].

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;

use pto_chip::diag::scope_stats::{Meta, Sample};
use pto_types::{RING_COUNT, Resource};

use crate::file::SceneFile;
use crate::runner::{CaseReport, RunOptions, case_footer};
use crate::scene::{CaseResult, TaskRow};
use pto_sizing::report::human_bytes;

/// Colours of the three resources (bars and lines), in [`Resource::ALL`] order.
const COLOURS: [&str; 3] = ["#2b6cb0", "#c05621", "#2f855a"];
/// Most bytes of a scope-stats file read (the chip keeps at most 2^20 samples of ~400 bytes).
const MAX_STATS_BYTES: u64 = 1 << 30;
/// Most points drawn per line; more samples are merged, keeping each bucket's maximum.
const MAX_POINTS: usize = 1000;

/// What the page says about the run besides the cases.
#[derive(Clone, Debug)]
pub struct HtmlPage {
    /// `pto run — scene vector_example`.
    pub title: String,
    /// Lines under the title (file, mode, counts).
    pub lines: Vec<String>,
    /// Whether the run recorded scope stats (`--enable-scope-stats`).
    pub scope_stats: bool,
}

impl HtmlPage {
    /// The page of a `pto run`: scene, file, mode, the scene's summary lines and the counts.
    pub fn of_run(file: &SceneFile, options: &RunOptions, reports: &[CaseReport]) -> HtmlPage {
        let mode = options.env.mode;
        let mut lines = vec![format!("{} · mode {mode}", file.path.display())];
        let pairs: Vec<(String, CaseResult)> = reports
            .iter()
            .map(|r| (r.name.clone(), r.result.clone()))
            .collect();
        lines.extend(file.scene.summary(&pairs));
        let passed = reports.iter().filter(|r| r.result.passed()).count();
        lines.push(format!(
            "{passed} passed, {} failed",
            reports.len() - passed
        ));
        HtmlPage {
            title: format!("pto run — scene {}", file.scene.name()),
            lines,
            scope_stats: options.diagnostics.scope_stats,
        }
    }
}

/// The whole page.
pub fn render_html(page: &HtmlPage, reports: &[CaseReport]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        esc(&page.title),
        esc(&page.title)
    );
    for line in &page.lines {
        let _ = writeln!(out, "<p class=\"meta\">{}</p>", esc(line));
    }
    if !page.scope_stats {
        out.push_str(
            "<p class=\"note\">Occupancy over the run needs <code>--enable-scope-stats</code>; \
             this run recorded none. Bars show the chips' reported high-water marks.</p>\n",
        );
    }
    for report in reports {
        render_case(&mut out, report, page.scope_stats);
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn render_case(out: &mut String, report: &CaseReport, scope_stats: bool) {
    let verdict = if report.result.passed() {
        "pass"
    } else {
        "FAILED"
    };
    let _ = writeln!(
        out,
        "<section class=\"case\" data-case=\"{0}\">\n<h2>case {0} <span class=\"{1}\">{1}</span></h2>",
        esc(&report.name),
        verdict
    );
    out.push_str("<ul class=\"footer\">\n");
    for line in case_footer(report) {
        let _ = writeln!(out, "<li>case {}{}</li>", esc(&report.name), esc(&line));
    }
    out.push_str("</ul>\n");
    if report.result.rows.is_empty() {
        out.push_str("<p>No task ran.</p>\n");
    }
    for row in &report.result.rows {
        render_task(out, row, scope_stats);
    }
    out.push_str("</section>\n");
}

fn render_task(out: &mut String, row: &TaskRow, scope_stats: bool) {
    let check = row.check_cell();
    let class = match &row.error {
        None => "ok",
        Some(e) if e.expected || e.skipped => "expected",
        Some(_) => "FAILED",
    };
    let _ = writeln!(
        out,
        "<div class=\"task\" data-task=\"{0}\">\n<h3>task {0} on chip {1} <span class=\"{2}\">{3}</span></h3>",
        esc(&row.task),
        row.chip,
        class,
        esc(&check)
    );
    let wall = row.wall.map_or("-".to_string(), |w| format!("{w:.1?}"));
    let _ = writeln!(
        out,
        "<p class=\"meta\">arena reserved {} · heap high-water {} · arena cache {} · wall {}</p>",
        esc(&human_bytes(row.reserved_bytes)),
        esc(&row.high_water_bytes.map_or("-".to_string(), human_bytes)),
        esc(row.arena.as_deref().unwrap_or("-")),
        esc(&wall)
    );
    if let Some(e) = &row.error {
        let _ = writeln!(out, "<p class=\"error\">{}</p>", esc(&e.message));
    }
    let stats = row
        .diagnostics_dir
        .as_ref()
        .map(|d| d.join("scope_stats").join("scope_stats.jsonl"))
        .filter(|p| scope_stats && p.is_file())
        .map(|p| ScopeSeries::read(&p));
    render_sizing(out, row);
    render_bars(out, row, stats.as_ref().and_then(|s| s.as_ref().ok()));
    match (&stats, scope_stats) {
        (Some(Ok(series)), _) => render_occupancy(out, series),
        (Some(Err(e)), _) => {
            let _ = writeln!(
                out,
                "<p class=\"note\">scope stats unreadable: {}</p>",
                esc(e)
            );
        }
        (None, true) => out.push_str("<p class=\"note\">No scope stats for this task.</p>\n"),
        (None, false) => {}
    }
    out.push_str("</div>\n");
}

/// The sizing table: per ring, every value with its source.
fn render_sizing(out: &mut String, row: &TaskRow) {
    let Some(sizing) = &row.sizing else {
        out.push_str("<p class=\"note\">No sizing: the config could not be resolved.</p>\n");
        return;
    };
    out.push_str(
        "<table class=\"sizing\"><tr><th>ring</th><th>task_window</th><th>heap</th>\
         <th>dep_pool</th></tr>\n",
    );
    for ring in 0..RING_COUNT {
        let _ = write!(out, "<tr><td>{ring}</td>");
        for resource in Resource::ALL {
            let v = sizing.at(resource, ring);
            let shown = match resource {
                Resource::Heap => human_bytes(v.value),
                _ => v.value.to_string(),
            };
            let source = row.source_text(resource, ring).unwrap_or_default();
            let _ = write!(
                out,
                "<td>{} <span class=\"src\">({})</span></td>",
                esc(&shown),
                esc(&source)
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// Reserved capacity (the whole bar) against the high-water mark (the filled part) per ring
/// and resource: the chip report's marks, else the scope stats' peaks.
fn render_bars(out: &mut String, row: &TaskRow, stats: Option<&ScopeSeries>) {
    let Some(sizing) = &row.sizing else {
        return;
    };
    let peak = |k: usize, ring: usize| -> Option<u64> {
        match (&row.usage, stats) {
            (Some(u), _) => Some(
                [
                    u[ring].task_window_peak,
                    u[ring].heap_peak,
                    u[ring].dep_pool_peak,
                ][k],
            ),
            (None, Some(s)) => Some(s.peaks[ring][k]),
            (None, None) => None,
        }
    };
    let height = Resource::ALL.len() * RING_COUNT * 18 + 4;
    let _ = writeln!(
        out,
        "<svg class=\"bars\" width=\"760\" height=\"{height}\" role=\"img\">"
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
    let fmt = |v: u64| match resource {
        Resource::Heap => human_bytes(v),
        _ => v.to_string(),
    };
    let text = match high {
        Some(h) => format!(
            "{name} ring {ring}: high-water {} of {} reserved ({:.2}%)",
            fmt(h),
            fmt(capacity),
            fraction * 100.0
        ),
        None => format!(
            "{name} ring {ring}: {} reserved, no high-water mark",
            fmt(capacity)
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

/// One chart per ring with samples: each resource's occupancy (`end − start` of its monotonic
/// counters) as a step line against the ring's capacity (the dashed line at the top).
fn render_occupancy(out: &mut String, series: &ScopeSeries) {
    if series.skipped > 0 {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} scope-stats lines could not be read and were skipped.</p>",
            series.skipped
        );
    }
    for ring in 0..RING_COUNT {
        if !series.samples[ring].is_empty() {
            out.push_str(&occupancy_chart(series, ring));
        }
    }
}

/// The y axis of occupancy charts is logarithmic from 0.01 % of capacity (the baseline; zero
/// sits there too) to 100 % (the capacity line): real occupancies are often a few percent of
/// what was reserved, which a linear axis draws as a flat line on the baseline.
const LOG_DECADES: f64 = 4.0;

/// `fraction` of capacity as a height in `0.0..=1.0` of the plot.
fn log_height(fraction: f64) -> f64 {
    if fraction <= 10f64.powf(-LOG_DECADES) {
        return 0.0;
    }
    ((fraction.log10() + LOG_DECADES) / LOG_DECADES).min(1.0)
}

/// The capacity line (100 %) and the 1 % and 0.01 % grid lines, labelled on the left.
fn log_axis(left: f64, w: f64, base: f64, h: f64) -> String {
    let mut svg = String::new();
    for (label, fraction) in [("100%", 1.0), ("1%", 0.01), ("0.01%", 0.0)] {
        let y = base - log_height(fraction) * h;
        let class = if fraction == 1.0 { "capline" } else { "axis" };
        let _ = write!(
            svg,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" class=\"{class}\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            left + w,
            left - 4.0,
            y + 4.0
        );
    }
    svg
}

fn occupancy_chart(series: &ScopeSeries, ring: usize) -> String {
    const LEFT: f64 = 40.0;
    const W: f64 = 440.0;
    const H: f64 = 100.0;
    const TOP: f64 = 8.0;
    let base = TOP + H;
    let t_max = series.t_max.max(1e-3);
    let mut svg = format!(
        "<figure class=\"occ\"><svg class=\"occupancy\" data-ring=\"{ring}\" width=\"{}\" \
         height=\"{}\" role=\"img\">",
        LEFT + W + 2.0,
        base + 16.0
    );
    svg.push_str(&log_axis(LEFT, W, base, H));
    let mut legend = Vec::new();
    for (k, resource) in Resource::ALL.into_iter().enumerate() {
        let capacity = series.capacity[k][ring];
        let points: Vec<(f64, f64)> = series.samples[ring]
            .iter()
            .map(|(t, occ)| {
                let fraction = occ[k] as f64 / capacity.max(1) as f64;
                (LEFT + t / t_max * W, base - log_height(fraction) * H)
            })
            .collect();
        let _ = write!(
            svg,
            "<path d=\"{}\" stroke=\"{}\" class=\"step\"/>",
            step_path(&points, LEFT, LEFT + W, base),
            COLOURS[k]
        );
        let most = series.samples[ring].iter().map(|(_, o)| o[k]).max();
        let fmt = |v: u64| match resource {
            Resource::Heap => human_bytes(v),
            _ => v.to_string(),
        };
        legend.push(format!(
            "{} max {} of {}",
            resource.short_name(),
            fmt(most.unwrap_or(0)),
            fmt(capacity)
        ));
    }
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"{0:.1}\">0 µs</text><text x=\"{1}\" y=\"{0:.1}\" \
         text-anchor=\"end\">{2:.1} µs</text></svg><figcaption>ring {ring} occupancy over the \
         run, log scale of capacity (dashed: capacity) — {3}</figcaption></figure>",
        base + 14.0,
        LEFT + W,
        series.t_max,
        esc(&legend.join(", "))
    );
    svg
}

/// An SVG path through `points` as a step line (hold each value until the next sample), from
/// the baseline at `left` to the right edge `right`.
fn step_path(points: &[(f64, f64)], left: f64, right: f64, baseline: f64) -> String {
    let mut d = format!("M{left:.1} {baseline:.1}");
    for (x, y) in points {
        let _ = write!(d, " H{x:.1} V{y:.1}");
    }
    let _ = write!(d, " H{right:.1}");
    d
}

/// The samples of one scope-stats file, per ring.
#[derive(Clone, Debug, Default)]
pub struct ScopeSeries {
    /// `[resource][ring]` capacities from the metadata line.
    pub capacity: [[u64; RING_COUNT]; 3],
    /// Per ring: `(t_us, [task window, heap, dep pool] occupancy)` in file order.
    pub samples: [Vec<(f64, [u64; 3])>; RING_COUNT],
    /// `[ring][resource]` peaks of the end records.
    pub peaks: [[u64; 3]; RING_COUNT],
    pub t_max: f64,
    /// Sample lines the format's reader rejected.
    pub skipped: usize,
}

impl ScopeSeries {
    /// Reads a `scope_stats.jsonl` line by line with the format's reader: a metadata record it
    /// cannot read is an error, a sample it cannot read is counted and skipped. Only a regular
    /// file is read, at most `MAX_STATS_BYTES`.
    pub fn read(path: &Path) -> Result<ScopeSeries, String> {
        let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", path.display()));
        }
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut lines = BufReader::new(file.take(MAX_STATS_BYTES)).lines();
        let first = lines
            .next()
            .ok_or_else(|| format!("{}: empty", path.display()))?
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let meta = Meta::from_line(1, &first).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut series = ScopeSeries {
            capacity: Resource::ALL.map(|r| meta.max(r)),
            ..ScopeSeries::default()
        };
        for (i, line) in lines.enumerate() {
            match line.ok().and_then(|l| Sample::from_line(i + 2, &l).ok()) {
                Some(sample) => series.add(&sample),
                None => series.skipped += 1,
            }
        }
        for ring in series.samples.iter_mut() {
            *ring = thin(std::mem::take(ring));
        }
        Ok(series)
    }

    fn add(&mut self, sample: &Sample) {
        let ring = sample.ring;
        if let Some(peaks) = sample.end_peaks() {
            for (k, resource) in Resource::ALL.into_iter().enumerate() {
                self.peaks[ring][k] = self.peaks[ring][k].max(peaks.occupancy(resource));
            }
        }
        self.t_max = self.t_max.max(sample.t_us);
        let occupancy = Resource::ALL.map(|r| sample.occupancy(r));
        self.samples[ring].push((sample.t_us, occupancy));
    }
}

/// At most [`MAX_POINTS`] samples: consecutive samples are merged into buckets that keep the
/// first time and the largest occupancy of each resource, so no peak disappears.
fn thin(samples: Vec<(f64, [u64; 3])>) -> Vec<(f64, [u64; 3])> {
    if samples.len() <= MAX_POINTS {
        return samples;
    }
    let per = samples.len().div_ceil(MAX_POINTS);
    samples
        .chunks(per)
        .map(|chunk| {
            let mut most = [0u64; 3];
            for (_, occ) in chunk {
                for k in 0..3 {
                    most[k] = most[k].max(occ[k]);
                }
            }
            (chunk[0].0, most)
        })
        .collect()
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

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1a202c}\
h2{border-top:2px solid #cbd5e0;padding-top:.6em}h3{margin:.8em 0 .2em}\
.meta{color:#4a5568;margin:.2em 0}.note{color:#744210;background:#fefcbf;padding:.3em .5em}\
.error{color:#9b2c2c;font-family:monospace;white-space:pre-wrap}\
.ok,.pass{color:#276749}.FAILED{color:#c53030}.expected{color:#975a16}\
table.sizing{border-collapse:collapse;margin:.3em 0}table.sizing td,table.sizing th\
{border:1px solid #e2e8f0;padding:2px 8px;text-align:right}.src{color:#718096}\
svg text{font-size:11px;fill:#2d3748}rect.cap{fill:#edf2f7;stroke:#a0aec0}\
.step{fill:none;stroke-width:1.5}.capline{stroke:#c53030;stroke-dasharray:4 3}\
.axis{stroke:#a0aec0}figure.occ{display:inline-block;margin:.3em 1em .3em 0}\
figcaption{font-size:12px;color:#4a5568;max-width:480px}ul.footer{margin:.3em 0}";

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
            scope_stats: false,
        };
        let html = render_html(&page, &[report]);
        assert!(!html.contains("<script") && !html.contains("<b>") && !html.contains("<x>"));
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
        assert!(html.contains("data-task=\"t&lt;1&gt;\""));
        assert!(html.contains("bad &amp; &lt;worse&gt;"));
        assert!(!html.contains("<svg"));
    }

    #[test]
    fn log_axis_spans_four_decades() {
        assert_eq!(log_height(0.0), 0.0);
        assert_eq!(log_height(1e-5), 0.0);
        assert!((log_height(0.01) - 0.5).abs() < 1e-9);
        assert_eq!(log_height(1.0), 1.0);
        assert_eq!(log_height(3.0), 1.0);
    }

    #[test]
    fn thinning_keeps_every_peak() {
        let samples: Vec<(f64, [u64; 3])> = (0..10_000)
            .map(|i| (i as f64, [0, if i == 7777 { 99 } else { 1 }, 0]))
            .collect();
        let thinned = thin(samples);
        assert!(thinned.len() <= MAX_POINTS);
        assert_eq!(thinned.iter().map(|(_, o)| o[1]).max(), Some(99));
    }

    #[test]
    fn reads_samples_and_skips_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let meta = r#"{"schema":"pto.scope_stats","version":1,"fatal":false,"dropped":0,"total":1,"label":null,"clusters":1,"aicpu_thread_num":1,"task_window_max":[16,16,16,16],"heap_max":[1024,1024,1024,1024],"dep_pool_max":[64,64,64,64],"tensormap_max":64,"task_window_source":["default","default","default","default"],"heap_source":["default","default","default","default"],"dep_pool_source":["default","default","default","default"],"error":null}"#;
        let sample = r#"{"seq":1,"site":"a.rs:1","phase":"end","depth":1,"ring":1,"task_window_start":2,"task_window_end":6,"heap_start":0,"heap_end":512,"dep_pool_start":1,"dep_pool_end":3,"tensormap":0,"task_window_peak":4,"heap_peak":700,"heap_largest_alloc":64,"dep_pool_peak":2,"spill_peak":0,"t_us":5.0}"#;
        std::fs::write(
            &path,
            format!("{meta}\n{sample}\nnot json\n{{\"ring\":9}}\n"),
        )
        .unwrap();
        let s = ScopeSeries::read(&path).unwrap();
        assert_eq!(s.capacity[1], [1024; 4]);
        assert_eq!(s.samples[1], vec![(5.0, [4, 512, 2])]);
        assert_eq!(s.peaks[1][1], 700);
        assert_eq!(s.skipped, 2);
        std::fs::write(&path, "{}\n").unwrap();
        assert!(ScopeSeries::read(&path).is_err());
        assert!(ScopeSeries::read(dir.path()).is_err());
    }
}
