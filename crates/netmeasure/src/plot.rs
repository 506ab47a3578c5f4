//! Report plots (PNG or SVG by file extension) with an embedded DejaVu Sans font, so no system
//! font configuration is needed.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

use crate::archive::Stored;
use crate::client::{BwResult, LatResult, TcpResult};
use crate::stats::HistSummary;
use crate::sweep::{BwReport, Row, SeriesReport};

/// A plotting failure naming the file.
#[derive(Debug, thiserror::Error)]
#[error("plot {path}: {message}")]
pub struct PlotError {
    /// Output file.
    pub path: String,
    /// What failed.
    pub message: String,
}

/// A named series of (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn ensure_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

type DrawResult = Result<(), String>;

/// Renders `draw` into `path` (PNG for .png, SVG for .svg) at `size` pixels.
fn render(
    path: &Path,
    size: (u32, u32),
    draw_png: impl FnOnce(&DrawingArea<BitMapBackend, Shift>) -> DrawResult,
    draw_svg: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> DrawResult,
) -> Result<(), PlotError> {
    ensure_font();
    let err = |message: String| PlotError {
        path: path.display().to_string(),
        message,
    };
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
            draw_png(&root).map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))
        }
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
            draw_svg(&root).map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))
        }
        _ => Err(err("unknown format: use a .png or .svg file name".into())),
    }
}

fn range(values: impl Iterator<Item = f64>, zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if zero {
        lo = lo.min(0.0);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    (lo, hi + (hi - lo) * 0.05)
}

/// Line chart of several series into one area.
fn lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> DrawResult {
    let (x0, x1) = range(series.iter().flat_map(|s| s.1.iter().map(|p| p.0)), false);
    let (y0, y1) = range(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)), true);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 2, c.filled())))
            .map_err(|e| e.to_string())?;
    }
    if series.len() > 1 || series.first().is_some_and(|s| !s.0.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Bar histogram of a summary, with an optional fitted curve (expected counts per bin).
fn hist<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    h: &HistSummary,
    curve: Option<&dyn Fn(f64) -> f64>,
) -> DrawResult {
    let x0 = h.bin_start;
    let x1 = h.bin_start + h.bin_width * h.bins.len().max(1) as f64;
    let ymax = h.bins.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(x0..x1.max(x0 + 1e-9), 0.0..ymax)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("N")
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(h.bins.iter().enumerate().map(|(i, &n)| {
            let a = h.bin_start + h.bin_width * i as f64;
            Rectangle::new(
                [(a, 0.0), (a + h.bin_width, n as f64)],
                color(0).mix(0.7).filled(),
            )
        }))
        .map_err(|e| e.to_string())?;
    if let Some(f) = curve {
        let pts: Vec<(f64, f64)> = (0..=100)
            .map(|i| x0 + (x1 - x0) * i as f64 / 100.0)
            .map(|x| (x, f(x)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts, color(3).stroke_width(2)))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Histogram of loss intervals (µs) as a [`HistSummary`] with linear bins.
pub fn interval_hist(intervals_us: &[f64]) -> HistSummary {
    let mut h = HistSummary::default();
    if intervals_us.is_empty() {
        return h;
    }
    let max = intervals_us.iter().copied().fold(0.0f64, f64::max);
    let nb = 40usize;
    let w = (max / nb as f64).max(1e-3);
    let mut bins = vec![0u64; nb + 1];
    for &x in intervals_us {
        bins[((x / w) as usize).min(nb)] += 1;
    }
    h.count = intervals_us.len() as u64;
    h.max = max;
    h.bin_start = 0.0;
    h.bin_width = w;
    h.bins = bins;
    h
}

fn draw_bw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, results: &[BwResult]) -> DrawResult {
    let sweep = results.len() > 1;
    let (top, bottom) = root.split_vertically(root.dim_in_pixel().1 / 2);
    let top_areas = top.split_evenly((1, 2));
    let bottom_areas = bottom.split_evenly((1, 3));
    // Throughput and loss against spacing, one line per size (UDPmon / seeds/000 figure 1).
    let mut sizes: Vec<usize> = results.iter().map(|r| r.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let per_size = |f: &dyn Fn(&BwResult) -> f64| -> Vec<Series> {
        sizes
            .iter()
            .map(|&s| {
                let mut pts: Vec<(f64, f64)> = results
                    .iter()
                    .filter(|r| r.size == s)
                    .map(|r| (r.wait_us, f(r)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                (format!("{s} bytes"), pts)
            })
            .collect()
    };
    if sweep {
        lines(
            &top_areas[0],
            "Receive wire rate",
            "spacing between frames (µs)",
            "Mb/s",
            &per_size(&|r| r.recv_wire_rate_mbps),
        )?;
        lines(
            &top_areas[1],
            "Packet loss",
            "spacing between frames (µs)",
            "% lost",
            &per_size(&|r| r.loss_percent),
        )?;
    } else if let Some(r) = results.first() {
        if let Some(d) = &r.remote.arrivals.delay {
            hist(&top_areas[0], "1-way delay above minimum", "µs", &d.hist, None)?;
        }
        hist(
            &top_areas[1],
            "Lost-run length",
            "packets",
            &r.remote.arrivals.lost_runs,
            None,
        )?;
    }
    // Histograms of the test with the most loss (the interesting one), else the last.
    let pick = results
        .iter()
        .filter(|r| r.lost > 0)
        .max_by_key(|r| r.lost)
        .or(results.last());
    if let Some(r) = pick {
        let a = &r.remote.arrivals;
        let tag = format!("{} B, wait {:.1} µs", r.size, r.wait_us);
        hist(
            &bottom_areas[0],
            &format!("Inter-arrival time ({tag})"),
            "µs",
            &a.inter_arrival,
            None,
        )?;
        hist(
            &bottom_areas[1],
            "Reorder extent",
            "positions",
            &a.reorder.extent,
            None,
        )?;
        let ih = interval_hist(&a.loss_intervals_us);
        match &a.loss_fit {
            Some(fit) => {
                let (n, w, lam) = (ih.count as f64, ih.bin_width, fit.lambda_per_s * 1e-6);
                let expected = move |x: f64| n * ((-lam * x).exp() - (-lam * (x + w)).exp());
                let title = format!(
                    "Time between losses, λ={:.0}/s, KS p={:.2}",
                    fit.lambda_per_s, fit.ks_p
                );
                hist(&bottom_areas[2], &title, "µs", &ih, Some(&expected))?;
            }
            None => hist(
                &bottom_areas[2],
                "Time between losses (too few losses)",
                "µs",
                &ih,
                None,
            )?,
        }
    }
    Ok(())
}

/// Throughput and loss against spacing per size, plus histograms and the loss-interval distribution
/// with its exponential fit.
pub fn plot_bw(path: &Path, results: &[BwResult]) -> Result<(), PlotError> {
    render(
        path,
        (1500, 900),
        |a| draw_bw(a, results),
        |a| draw_bw(a, results),
    )
}

fn draw_lat<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &LatResult) -> DrawResult {
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);
    let pts: Vec<(f64, f64)> = r.points.iter().map(|p| (p.size as f64, p.rtt_us.p50)).collect();
    let fit: Vec<(f64, f64)> = pts
        .iter()
        .map(|&(x, _)| (x, r.slope_us_per_byte * x + r.intercept_us))
        .collect();
    let title = format!(
        "Latency: y = {:.5} x + {:.1} µs",
        r.slope_us_per_byte, r.intercept_us
    );
    lines(
        &left,
        &title,
        "message length (bytes)",
        "median round trip (µs)",
        &[("measured".into(), pts), ("least squares".into(), fit)],
    )?;
    let n = r.points.len().clamp(1, 6);
    let cells = right.split_evenly((n.div_ceil(2), 2));
    for (p, cell) in r.points.iter().zip(cells.iter()) {
        hist(
            cell,
            &format!("{} bytes", p.size),
            "round trip (µs)",
            &p.rtt_us,
            None,
        )?;
    }
    Ok(())
}

/// Latency against size with the least-squares line, and RTT histograms per size.
pub fn plot_lat(path: &Path, r: &LatResult) -> Result<(), PlotError> {
    render(path, (1400, 700), |a| draw_lat(a, r), |a| draw_lat(a, r))
}

/// Line chart of named series.
pub fn plot_series(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), PlotError> {
    render(
        path,
        (1000, 600),
        |a| lines(a, title, x_label, y_label, series),
        |a| lines(a, title, x_label, y_label, series),
    )
}

/// The distinct values in order of first appearance.
fn unique<T: PartialEq>(values: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// The plot of a throughput series: against the competitor's nice level for a CPU-load sweep,
/// else [`plot_bw`].
pub fn plot_bw_report(path: &Path, report: &BwReport, load_sweep: bool) -> Result<(), PlotError> {
    if !load_sweep {
        let results: Vec<BwResult> = report.results.iter().map(|r| r.result.clone()).collect();
        return plot_bw(path, &results);
    }
    let sizes = unique(report.results.iter().map(|r| r.result.size));
    let series: Vec<Series> = sizes
        .iter()
        .map(|&s| {
            let pts = report
                .results
                .iter()
                .filter(|r| r.result.size == s)
                .filter_map(|r| r.load.map(|l| (l.nice as f64, r.result.recv_user_rate_mbps)))
                .collect();
            (format!("{s} bytes"), pts)
        })
        .collect();
    plot_series(
        path,
        "Throughput against the competitor's nice level",
        "nice",
        "receive user rate (Mb/s)",
        &series,
    )
}

/// TCP throughput against the number of streams, or against the competitor's nice level (one line
/// per stream count) for a CPU-load sweep.
pub fn plot_tcp_report(path: &Path, rows: &[Row<TcpResult>], load_sweep: bool) -> Result<(), PlotError> {
    let series: Vec<Series> = if load_sweep {
        let streams = unique(rows.iter().map(|r| r.result.streams));
        streams
            .iter()
            .map(|&n| {
                let pts = rows
                    .iter()
                    .filter(|r| r.result.streams == n)
                    .filter_map(|r| r.load.map(|l| (l.nice as f64, r.result.rate_mbps)))
                    .collect();
                (format!("{n} streams"), pts)
            })
            .collect()
    } else {
        let pts = rows
            .iter()
            .map(|r| (r.result.streams as f64, r.result.rate_mbps))
            .collect();
        vec![("TCP".to_string(), pts)]
    };
    let x = if load_sweep { "nice" } else { "streams" };
    plot_series(path, "TCP throughput", x, "Mb/s", &series)
}

/// The plot of any series (see [`plot_bw_report`], [`plot_lat`] of the last latency test,
/// [`plot_tcp_report`]); `load_sweep`: the series ran at several competitor levels.
pub fn plot_report(path: &Path, report: &SeriesReport, load_sweep: bool) -> Result<(), PlotError> {
    match report {
        SeriesReport::Bw(r) => plot_bw_report(path, r, load_sweep),
        SeriesReport::Lat(r) => r.results.last().map_or(Ok(()), |r| plot_lat(path, &r.result)),
        SeriesReport::Tcp(r) => plot_tcp_report(path, &r.results, load_sweep),
    }
}

/// Archived headline figures over time, one line per kind, remote and metric.
pub fn plot_history(path: &Path, rows: &[Stored]) -> Result<(), PlotError> {
    let times: Vec<Option<f64>> = rows
        .iter()
        .map(|s| {
            chrono::DateTime::parse_from_rfc3339(&s.record.time)
                .ok()
                .map(|t| t.timestamp_millis() as f64 / 1000.0)
        })
        .collect();
    let t0 = times.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let mut series: Vec<Series> = Vec::new();
    for (s, t) in rows.iter().zip(&times) {
        let Some(t) = t else { continue };
        let name = format!("{} {} {}", s.record.kind, s.record.remote, s.record.metric);
        let x = (t - t0) / 3600.0;
        match series.iter_mut().find(|x| x.0 == name) {
            Some(e) => e.1.push((x, s.record.value)),
            None => series.push((name, vec![(x, s.record.value)])),
        }
    }
    let first = rows.first().map(|r| r.record.time.clone()).unwrap_or_default();
    plot_series(
        path,
        "vlbiflow net history",
        &format!("hours since {first}"),
        "value",
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_png_and_svg_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let s = vec![("a".to_string(), vec![(0.0, 1.0), (1.0, 3.0)])];
        for name in ["x.png", "x.svg"] {
            let p = dir.path().join(name);
            plot_series(&p, "t", "x", "y", &s).unwrap();
            assert!(std::fs::metadata(&p).unwrap().len() > 500);
        }
        let e = plot_series(&dir.path().join("x.gif"), "t", "x", "y", &s).unwrap_err();
        assert!(e.to_string().contains(".png or .svg"), "{e}");
    }

    #[test]
    fn interval_histogram_counts_everything() {
        let h = interval_hist(&[1.0, 2.0, 40.0, 0.0]);
        assert_eq!(h.bins.iter().sum::<u64>(), 4);
    }
}
