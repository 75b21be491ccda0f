//! Ring occupancy over a task's run, from its `scope_stats.jsonl` (CHIP_RUNTIME.md §7): each
//! resource's occupancy as a share of its ring's capacity, on a linear axis whose top is the
//! capacity (the dashed line).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;

use pto_chip::diag::scope_stats::{Meta, Sample};
use pto_types::{RING_COUNT, Resource};

use super::{COLOURS, esc, resource_value};

/// Most bytes of a scope-stats file read (the chip keeps at most 2^20 samples of ~400 bytes).
const MAX_STATS_BYTES: u64 = 1 << 30;
/// Most points drawn per line; more samples are merged, keeping each bucket's maximum.
const MAX_POINTS: usize = 1000;

/// The samples of one scope-stats file, per ring.
#[derive(Clone, Debug, Default)]
pub struct ScopeSeries {
    /// `[resource][ring]` capacities from the metadata line.
    pub capacity: [[u64; RING_COUNT]; 3],
    /// Per ring: `(t_us, [task window, heap, dep pool] occupancy)` in file order.
    pub samples: [Vec<(f64, [u64; 3])>; RING_COUNT],
    /// `[ring][resource]` peaks of the end records.
    pub peaks: [[u64; 3]; RING_COUNT],
    /// The first and last sample times (µs since the chip started), over every ring.
    pub t_min: f64,
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
            t_min: f64::INFINITY,
            ..ScopeSeries::default()
        };
        for (i, line) in lines.enumerate() {
            match line.ok().and_then(|l| Sample::from_line(i + 2, &l).ok()) {
                Some(sample) => series.add(&sample),
                None => series.skipped += 1,
            }
        }
        if series.t_min > series.t_max {
            series.t_min = 0.0;
        }
        for ring in series.samples.iter_mut() {
            *ring = thin(std::mem::take(ring));
        }
        Ok(series)
    }

    /// The scope stats of a task whose chip wrote them under `dir`, if there are any.
    pub fn of_task(dir: &Path) -> Option<Result<ScopeSeries, String>> {
        let path = dir.join("scope_stats").join("scope_stats.jsonl");
        path.is_file().then(|| ScopeSeries::read(&path))
    }

    fn add(&mut self, sample: &Sample) {
        let ring = sample.ring;
        if let Some(peaks) = sample.end_peaks() {
            for (k, resource) in Resource::ALL.into_iter().enumerate() {
                self.peaks[ring][k] = self.peaks[ring][k].max(peaks.occupancy(resource));
            }
        }
        self.t_min = self.t_min.min(sample.t_us);
        self.t_max = self.t_max.max(sample.t_us);
        let occupancy = Resource::ALL.map(|r| sample.occupancy(r));
        self.samples[ring].push((sample.t_us, occupancy));
    }

    /// The rings that have samples.
    pub fn rings(&self) -> impl Iterator<Item = usize> + '_ {
        (0..RING_COUNT).filter(|&r| !self.samples[r].is_empty())
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

/// The colour key of every occupancy chart, as HTML (no chart repeats it).
pub(super) fn legend() -> String {
    let mut html = String::from("<p class=\"legend\">");
    for (k, resource) in Resource::ALL.into_iter().enumerate() {
        let _ = write!(
            html,
            "<span class=\"swatch\" style=\"background:{}\"></span>{} ",
            COLOURS[k],
            resource.short_name()
        );
    }
    html.push_str(
        "— each as a share of its ring's capacity; the dashed line is the capacity, the \
         time axis spans the task's samples.</p>\n",
    );
    html
}

/// Every ring with samples, one chart each.
pub(super) fn charts(out: &mut String, series: &ScopeSeries, class: &str) {
    if series.skipped > 0 {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} scope-stats lines could not be read and were skipped.</p>",
            series.skipped
        );
    }
    out.push_str("<div class=\"charts\">");
    for ring in series.rings() {
        out.push_str(&chart(series, ring, class));
    }
    out.push_str("</div>\n");
}

const LEFT: f64 = 36.0;
const W: f64 = 250.0;
const H: f64 = 90.0;
const TOP: f64 = 6.0;

/// One ring: a step line per resource, y = occupancy / capacity (0-100 %, linear).
fn chart(series: &ScopeSeries, ring: usize, class: &str) -> String {
    let base = TOP + H;
    let span = (series.t_max - series.t_min).max(1e-3);
    let mut svg = format!(
        "<figure class=\"occ\"><svg class=\"{class}\" data-ring=\"{ring}\" width=\"{}\" \
         height=\"{}\" role=\"img\"><title>ring {ring} occupancy</title>",
        LEFT + W + 4.0,
        base + 16.0
    );
    svg.push_str(&axis(base));
    let mut caption = Vec::new();
    for (k, resource) in Resource::ALL.into_iter().enumerate() {
        let capacity = series.capacity[k][ring];
        let points: Vec<(f64, f64)> = series.samples[ring]
            .iter()
            .map(|(t, occ)| {
                let fraction = (occ[k] as f64 / capacity.max(1) as f64).min(1.0);
                (LEFT + (t - series.t_min) / span * W, base - fraction * H)
            })
            .collect();
        let _ = write!(
            svg,
            "<path d=\"{}\" stroke=\"{}\" class=\"step\"/>",
            step_path(&points, LEFT + W, base),
            COLOURS[k]
        );
        // The end records' peaks see what happened between samples too.
        let sampled = series.samples[ring].iter().map(|(_, o)| o[k]).max();
        let most = sampled.unwrap_or(0).max(series.peaks[ring][k]);
        caption.push(format!(
            "{} {} of {}",
            resource.short_name(),
            resource_value(resource, most),
            resource_value(resource, capacity)
        ));
    }
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"{0:.1}\">0</text><text x=\"{1}\" y=\"{0:.1}\" \
         text-anchor=\"end\">{2}</text></svg><figcaption>ring {ring}, peaks: {3}</figcaption>\
         </figure>",
        base + 13.0,
        LEFT + W,
        esc(&duration_text(span)),
        esc(&caption.join(" · "))
    );
    svg
}

/// `812 µs`, `3.4 ms`.
fn duration_text(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// Grid lines at 0, 25, 50 and 75 % and the capacity (100 %, dashed), labelled on the left.
fn axis(base: f64) -> String {
    let mut svg = String::new();
    for percent in [0u32, 25, 50, 75, 100] {
        let y = base - f64::from(percent) / 100.0 * H;
        let class = if percent == 100 { "capline" } else { "axis" };
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" class=\"{class}\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{percent}%</text>",
            LEFT + W,
            LEFT - 4.0,
            y + 4.0
        );
    }
    svg
}

/// An SVG path through `points` as a step line (hold each value until the next sample), from
/// the first sample's time to `right`; the line starts at the baseline.
fn step_path(points: &[(f64, f64)], right: f64, baseline: f64) -> String {
    let start = points.first().map_or(LEFT, |p| p.0);
    let mut d = format!("M{start:.1} {baseline:.1}");
    for (x, y) in points {
        let _ = write!(d, " H{x:.1} V{y:.1}");
    }
    let _ = write!(d, " H{right:.1}");
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_every_peak() {
        let samples: Vec<(f64, [u64; 3])> = (0..10_000)
            .map(|i| (i as f64, [0, if i == 7777 { 99 } else { 1 }, 0]))
            .collect();
        let thinned = thin(samples);
        assert!(thinned.len() <= MAX_POINTS);
        assert_eq!(thinned.iter().map(|(_, o)| o[1]).max(), Some(99));
    }

    /// The axis is linear from the baseline (0 %) to the capacity line (100 %), and a sample
    /// at half the capacity is drawn half-way up.
    #[test]
    fn occupancy_is_linear_against_capacity() {
        let mut series = ScopeSeries {
            capacity: [[8; RING_COUNT], [1024; RING_COUNT], [16; RING_COUNT]],
            t_min: 100.0,
            t_max: 200.0,
            ..ScopeSeries::default()
        };
        series.samples[1] = vec![(100.0, [4, 256, 16]), (200.0, [0, 0, 0])];
        let svg = chart(&series, 1, "occupancy");
        let base = TOP + H;
        assert!(svg.contains(&format!("V{:.1}", base - 0.5 * H)), "{svg}");
        assert!(svg.contains(&format!("V{:.1}", base - 0.25 * H)), "{svg}");
        assert!(svg.contains(&format!("V{:.1}", base - H)), "{svg}");
        // The first sample sits at the left edge: time starts at the task's first sample.
        assert!(
            svg.contains(&format!("M{LEFT:.1} {base:.1} H{LEFT:.1}")),
            "{svg}"
        );
        for label in ["0%", "25%", "50%", "75%", "100%"] {
            assert!(svg.contains(&format!(">{label}</text>")), "{label}");
        }
        assert!(
            svg.contains("task_window 4 of 8 · heap 256 B of 1.00 KiB · dep_pool 16 of 16"),
            "{svg}"
        );
        assert!(svg.contains("100 µs"), "{svg}");
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
        assert_eq!((s.t_min, s.t_max), (5.0, 5.0));
        assert_eq!(s.skipped, 2);
        std::fs::write(&path, "{}\n").unwrap();
        assert!(ScopeSeries::read(&path).is_err());
        assert!(ScopeSeries::read(dir.path()).is_err());
    }
}
