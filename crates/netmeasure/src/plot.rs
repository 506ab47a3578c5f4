//! Report plots (PNG or SVG by file extension) with an embedded DejaVu Sans font, so no system
//! font configuration is needed.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
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

/// The `i`-th colour of the palette (cycling).
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn ensure_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

/// What a drawing step returns: the backend's error as text.
pub type DrawResult = Result<(), String>;

/// Renders `draw` into `path` (PNG for .png, SVG for .svg) at `size` pixels.
pub fn render(
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

/// Round tick positions in `lo..=hi`: multiples of 1, 2 or 5 x 10^k, about `target` of them, and
/// the step. A flat or empty range gets the one tick `lo`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let span = hi - lo;
    if !(span > 0.0 && span.is_finite() && lo.is_finite()) {
        return (vec![lo], 1.0);
    }
    let raw = span / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag);
    let (first, last) = (
        (lo / step - 1e-9).ceil() as i64,
        (hi / step + 1e-9).floor() as i64,
    );
    ((first..=last).map(|k| k as f64 * step).collect(), step)
}

/// A tick label with just the decimals `step` needs: "20000", "2.5", "0.05"; never "-0".
pub fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 || step <= 0.0 {
        0
    } else {
        (-step.log10() - 1e-9).ceil().min(9.0) as usize
    };
    // Adding 0.0 turns -0.0 into 0.0.
    let v = (v / step).round() * step + 0.0;
    format!("{v:.decimals$}")
}

/// The unit to show rates in: Mb/s, or Gb/s from 1000 Mb/s up; (Mb/s per unit, name).
pub fn rate_unit(max_mbps: f64) -> (f64, &'static str) {
    if max_mbps >= 1000.0 {
        (1000.0, "Gb/s")
    } else {
        (1.0, "Mb/s")
    }
}

/// The unit to show times in: µs, ms from 10 ms up, s from 10 s up; (µs per unit, name).
pub fn time_unit(max_us: f64) -> (f64, &'static str) {
    if max_us >= 1e7 {
        (1e6, "s")
    } else if max_us >= 1e4 {
        (1e3, "ms")
    } else {
        (1.0, "µs")
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
        hi = lo + if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
    }
    (lo, hi + (hi - lo) * 0.05)
}

/// An axis: its range, round ticks and their labels' step.
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    step: f64,
}

/// An axis as a plotters coordinate: linear, with exactly our ticks as its bold key points (and
/// no light grid lines).
struct Ticked(Axis);

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let (a, b) = (self.0.lo, self.0.hi);
        let t = if b > a { (v - a) / (b - a) } else { 0.5 };
        limit.0 + ((limit.1 - limit.0) as f64 * t).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.0.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.0.lo..self.0.hi
    }
}

impl Axis {
    fn new((lo, hi): (f64, f64), target: usize, min_step: f64) -> Axis {
        let (mut ticks, mut step) = nice_ticks(lo, hi, target);
        if step < min_step {
            (ticks, step) = nice_ticks(lo, hi, ((hi - lo) / min_step).ceil().max(1.0) as usize);
        }
        Axis { lo, hi, ticks, step }
    }
}

/// A panel that has nothing to plot: its title and a sentence saying why, instead of empty axes.
pub fn note<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, title: &str, text: &str) -> DrawResult {
    let inner = area
        .margin(10, 10, 10, 10)
        .titled(title, ("sans-serif", 16))
        .map_err(|e| e.to_string())?;
    let (w, h) = inner.dim_in_pixel();
    inner
        .draw(&Rectangle::new(
            [(0, 0), (w as i32 - 1, h as i32 - 1)],
            RGBColor(200, 200, 200).stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
    let style = TextStyle::from(("sans-serif", 18).into_font())
        .color(&RGBColor(90, 90, 90))
        .pos(Pos::new(HPos::Center, VPos::Center));
    inner
        .draw(&Text::new(text.to_string(), (w as i32 / 2, h as i32 / 2), style))
        .map_err(|e| e.to_string())
}

/// Line chart of several series into one area; `y_zero`: the y axis starts at 0.
pub fn lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> DrawResult {
    lines_over(area, title, x_label, y_label, series, None)
}

/// [`lines`] over the x range `x_range` (panels that share a time axis), or the series' own.
fn lines_over<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_range: Option<(f64, f64)>,
) -> DrawResult {
    let xv = || series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    // Whole-numbered x (nice levels, streams, sizes) gets whole-numbered ticks.
    let x_step = if xv().all(|x| x.fract() == 0.0) { 1.0 } else { 0.0 };
    let x = Axis::new(x_range.unwrap_or_else(|| range(xv(), false)), 8, x_step);
    let y = Axis::new(
        range(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)), true),
        6,
        0.0,
    );
    let (xs, ys) = (x.step, y.step);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(Ticked(x), Ticked(y))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|v| tick_label(*v, xs))
        .y_label_formatter(&|v| tick_label(*v, ys))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
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
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(|e| e.to_string())?;
    }
    if series.len() > 1 || series.first().is_some_and(|s| !s.0.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// How to show a histogram's values: as times (scaled to µs/ms/s) or as plain numbers.
#[derive(Clone, Copy)]
enum Scale {
    /// Values in µs.
    Time,
    /// Whole numbers of this kind (packets, positions).
    Count(&'static str),
}

/// Bar histogram of a summary, with an optional fitted curve (expected counts per bin, of the
/// unscaled value); the x axis in the unit `scale` picks, ticks round.
fn hist<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    what: &str,
    h: &HistSummary,
    scale: Scale,
    curve: Option<&dyn Fn(f64) -> f64>,
) -> DrawResult {
    if h.bins.iter().all(|&n| n == 0) || h.bin_width.is_nan() || h.bin_width <= 0.0 {
        return note(area, title, "no values");
    }
    let raw_hi = h.bin_start + h.bin_width * h.bins.len().max(1) as f64;
    let (div, unit) = match scale {
        Scale::Time => time_unit(raw_hi.max(h.bin_start.abs())),
        Scale::Count(unit) => (1.0, unit),
    };
    // A few bins (one lost-run length, say) stand in the middle of at least ten bins' width.
    let pad = h.bin_width * 10usize.saturating_sub(h.bins.len()) as f64 / 2.0;
    let lo = if h.bin_start >= 0.0 {
        (h.bin_start - pad).max(0.0)
    } else {
        h.bin_start - pad
    };
    let (x0, x1) = (lo / div, (raw_hi + pad) / div);
    let min_x_step = match scale {
        Scale::Count(_) => 1.0,
        Scale::Time => 0.0,
    };
    let x = Axis::new((x0, x1), 6, min_x_step);
    let ymax = h.bins.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
    let y = Axis::new((0.0, ymax), 5, 1.0);
    let (xs, ys) = (x.step, y.step);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(Ticked(x), Ticked(y))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(format!("{what} ({unit})"))
        .y_desc("count")
        .x_label_formatter(&|v| tick_label(*v, xs))
        .y_label_formatter(&|v| tick_label(*v, ys))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(h.bins.iter().enumerate().map(|(i, &n)| {
            let a = (h.bin_start + h.bin_width * i as f64) / div;
            Rectangle::new(
                [(a, 0.0), (a + h.bin_width / div, n as f64)],
                color(0).mix(0.7).filled(),
            )
        }))
        .map_err(|e| e.to_string())?;
    if let Some(f) = curve {
        let pts: Vec<(f64, f64)> = (0..=100)
            .map(|i| x0 + (x1 - x0) * i as f64 / 100.0)
            .map(|x| (x, f(x * div)))
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

/// "1472 B, wait 10 µs": which test a panel shows.
fn test_tag(r: &BwResult) -> String {
    format!(
        "{} B, wait {} µs",
        r.size,
        tick_label(r.wait_us, 0.01)
            .trim_end_matches('0')
            .trim_end_matches('.')
    )
}

/// Reordering, lost runs and the time between losses of one test: histograms, or a sentence where
/// there is nothing to count.
fn loss_panels<DB: DrawingBackend>(areas: &[DrawingArea<DB, Shift>], r: &BwResult) -> DrawResult {
    let a = &r.remote.arrivals;
    let tag = test_tag(r);
    if a.reorder.extent.count == 0 || a.reorder.extent.bins.iter().all(|&n| n == 0) {
        note(&areas[0], &format!("Reorder extent ({tag})"), "no reordering")?;
    } else {
        let title = format!("Reorder extent ({tag})");
        hist(
            &areas[0],
            &title,
            "extent",
            &a.reorder.extent,
            Scale::Count("positions"),
            None,
        )?;
    }
    if r.lost == 0 {
        note(&areas[1], &format!("Lost-run length ({tag})"), "no loss")?;
        return note(&areas[2], &format!("Time between losses ({tag})"), "no loss");
    }
    let title = format!("Lost-run length ({tag})");
    hist(
        &areas[1],
        &title,
        "run length",
        &a.lost_runs,
        Scale::Count("packets"),
        None,
    )?;
    let ih = interval_hist(&a.loss_intervals_us);
    if ih.count == 0 {
        return note(&areas[2], "Time between losses", "one loss: no interval");
    }
    match &a.loss_fit {
        Some(fit) => {
            let (n, w, lam) = (ih.count as f64, ih.bin_width, fit.lambda_per_s * 1e-6);
            let expected = move |x: f64| n * ((-lam * x).exp() - (-lam * (x + w)).exp());
            let title = format!(
                "Time between losses, λ={:.0}/s, KS p={:.2}",
                fit.lambda_per_s, fit.ks_p
            );
            hist(&areas[2], &title, "interval", &ih, Scale::Time, Some(&expected))
        }
        None => hist(
            &areas[2],
            "Time between losses (too few to fit)",
            "interval",
            &ih,
            Scale::Time,
            None,
        ),
    }
}

/// Splits `area` into `n` cells, at most `max_cols` a row.
fn grid<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    n: usize,
    max_cols: usize,
) -> Vec<DrawingArea<DB, Shift>> {
    // As few rows as `max_cols` allows, then as few columns as those rows need (5 cells: 3 + 2).
    let rows = n.div_ceil(max_cols.max(1)).max(1);
    area.split_evenly((rows, n.div_ceil(rows).max(1)))
}

/// Rows of inter-arrival histograms a sweep of `sizes` sizes needs.
fn size_rows(sizes: usize) -> usize {
    sizes.div_ceil(4).max(1)
}

fn draw_bw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, results: &[BwResult]) -> DrawResult {
    let mut sizes = unique(results.iter().map(|r| r.size));
    sizes.sort_unstable();
    let sweep = results.len() > 1;
    // Rows of equal height: the figures, the inter-arrival histograms (one per size), the loss panels.
    let rows = if sweep { 2 + size_rows(sizes.len()) } else { 2 };
    let row_h = root.dim_in_pixel().1 / rows as u32;
    let (top, rest) = root.split_vertically(row_h);
    let (middle, bottom) = rest.split_vertically(row_h * (rows as u32 - 2));
    let top_areas = top.split_evenly((1, 2));
    let bottom_areas = bottom.split_evenly((1, 3));
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
        // Throughput and loss against spacing, one line per size (UDPmon / seeds/000 figure 1).
        let max = results.iter().map(|r| r.recv_wire_rate_mbps).fold(0.0, f64::max);
        let (div, unit) = rate_unit(max);
        lines(
            &top_areas[0],
            "Receive wire rate",
            "spacing between frames (µs)",
            &format!("receive wire rate ({unit})"),
            &per_size(&|r| r.recv_wire_rate_mbps / div),
        )?;
        if results.iter().all(|r| r.lost == 0) {
            let text = format!("no loss in any of the {} tests", results.len());
            note(&top_areas[1], "Packet loss", &text)?;
        } else {
            lines(
                &top_areas[1],
                "Packet loss",
                "spacing between frames (µs)",
                "lost (%)",
                &per_size(&|r| r.loss_percent),
            )?;
        }
        // The inter-arrival times of every size: of its test with the most loss, else its last.
        for (&s, cell) in sizes.iter().zip(grid(&middle, sizes.len(), 4).iter()) {
            let of_size = || results.iter().filter(|r| r.size == s);
            if let Some(r) = of_size()
                .filter(|r| r.lost > 0)
                .max_by_key(|r| r.lost)
                .or(of_size().next_back())
            {
                let title = format!("Inter-arrival time ({})", test_tag(r));
                hist(
                    cell,
                    &title,
                    "gap",
                    &r.remote.arrivals.inter_arrival,
                    Scale::Time,
                    None,
                )?;
            }
        }
    } else if let Some(r) = results.first() {
        match &r.remote.arrivals.delay {
            Some(d) => hist(
                &top_areas[0],
                "1-way delay above minimum",
                "delay",
                &d.hist,
                Scale::Time,
                None,
            )?,
            None => note(&top_areas[0], "1-way delay above minimum", "no delay measured")?,
        }
        let title = format!("Inter-arrival time ({})", test_tag(r));
        hist(
            &top_areas[1],
            &title,
            "gap",
            &r.remote.arrivals.inter_arrival,
            Scale::Time,
            None,
        )?;
    }
    // Loss and reordering of the test with the most loss (the interesting one), else the last.
    let pick = results
        .iter()
        .filter(|r| r.lost > 0)
        .max_by_key(|r| r.lost)
        .or(results.last());
    match pick {
        Some(r) => loss_panels(&bottom_areas, r),
        None => note(&bottom_areas[1], "Packet loss", "no tests"),
    }
}

/// Throughput and loss against spacing per size with every size's inter-arrival histogram (one
/// test: its delay and inter-arrival histograms), plus reordering, lost runs and the loss-interval
/// distribution with its exponential fit.
pub fn plot_bw(path: &Path, results: &[BwResult]) -> Result<(), PlotError> {
    let sizes = unique(results.iter().map(|r| r.size)).len();
    let rows = if results.len() > 1 {
        2 + size_rows(sizes)
    } else {
        2
    };
    render(
        path,
        (1500, 420 * rows as u32),
        |a| draw_bw(a, results),
        |a| draw_bw(a, results),
    )
}

/// Columns of the latency histogram grid for `n` sizes.
fn lat_cols(n: usize) -> usize {
    match n {
        0..=4 => 2,
        5..=9 => 3,
        _ => 4,
    }
}

fn draw_lat<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &LatResult) -> DrawResult {
    let (left, right) = root.split_horizontally(root.dim_in_pixel().0 * 2 / 5);
    let pts: Vec<(f64, f64)> = r.points.iter().map(|p| (p.size as f64, p.rtt_us.p50)).collect();
    let fit: Vec<(f64, f64)> = pts
        .iter()
        .map(|&(x, _)| (x, r.slope_us_per_byte * x + r.intercept_us))
        .collect();
    let title = format!(
        "Latency: y = {:.5} µs/byte x + {:.1} µs",
        r.slope_us_per_byte, r.intercept_us
    );
    lines(
        &left,
        &title,
        "message length (bytes)",
        "median round trip (µs)",
        &[("measured".into(), pts), ("least squares".into(), fit)],
    )?;
    // Every size's histogram.
    let cells = grid(&right, r.points.len(), lat_cols(r.points.len()));
    for (p, cell) in r.points.iter().zip(cells.iter()) {
        let title = format!("{} bytes", p.size);
        if p.rtt_us.count == 0 {
            note(cell, &title, "no replies")?;
        } else {
            hist(cell, &title, "round trip", &p.rtt_us, Scale::Time, None)?;
        }
    }
    Ok(())
}

/// Latency against size with the least-squares line, and the RTT histogram of every size.
pub fn plot_lat(path: &Path, r: &LatResult) -> Result<(), PlotError> {
    let n = r.points.len().max(1);
    let rows = n.div_ceil(lat_cols(n)) as u32;
    render(
        path,
        (1600, (260 * rows).max(700)),
        |a| draw_lat(a, r),
        |a| draw_lat(a, r),
    )
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
    let max = report
        .results
        .iter()
        .map(|r| r.result.recv_user_rate_mbps)
        .fold(0.0, f64::max);
    let (div, unit) = rate_unit(max);
    let series: Vec<Series> = sizes
        .iter()
        .map(|&s| {
            let pts = report
                .results
                .iter()
                .filter(|r| r.result.size == s)
                .filter_map(|r| {
                    r.load
                        .map(|l| (l.nice as f64, r.result.recv_user_rate_mbps / div))
                })
                .collect();
            (format!("{s} bytes"), pts)
        })
        .collect();
    plot_series(
        path,
        "Throughput against the competitor's nice level",
        "nice",
        &format!("receive user rate ({unit})"),
        &series,
    )
}

/// TCP throughput against the number of streams, or against the competitor's nice level (one line
/// per stream count) for a CPU-load sweep.
pub fn plot_tcp_report(path: &Path, rows: &[Row<TcpResult>], load_sweep: bool) -> Result<(), PlotError> {
    let (div, unit) = rate_unit(rows.iter().map(|r| r.result.rate_mbps).fold(0.0, f64::max));
    let series: Vec<Series> = if load_sweep {
        let streams = unique(rows.iter().map(|r| r.result.streams));
        streams
            .iter()
            .map(|&n| {
                let pts = rows
                    .iter()
                    .filter(|r| r.result.streams == n)
                    .filter_map(|r| r.load.map(|l| (l.nice as f64, r.result.rate_mbps / div)))
                    .collect();
                (format!("{n} stream{}", if n == 1 { "" } else { "s" }), pts)
            })
            .collect()
    } else {
        let pts = rows
            .iter()
            .map(|r| (r.result.streams as f64, r.result.rate_mbps / div))
            .collect();
        vec![("TCP".to_string(), pts)]
    };
    let x = if load_sweep { "nice" } else { "streams" };
    plot_series(
        path,
        "TCP throughput",
        x,
        &format!("throughput ({unit})"),
        &series,
    )
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

/// Archived headline figures over time, one line per kind, remote and metric, in one panel per quantity
/// (rates in Mb/s or Gb/s, times in µs, ms or s, percentages) stacked over a shared time axis.
pub fn plot_history(path: &Path, rows: &[Stored]) -> Result<(), PlotError> {
    let (unit, panels) = history_panels(rows);
    let first = rows.first().map(|r| r.record.time.clone()).unwrap_or_default();
    let x_label = format!("{unit} since {first}");
    let n = panels.len().max(1);
    render(
        path,
        (1000, 120 + 330 * n as u32),
        |a| history(a, &panels, &x_label),
        |a| history(a, &panels, &x_label),
    )
}

/// What a metric measures, by its name's unit suffix: one panel (and one y axis) per quantity, so rates
/// and times never share an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Quantity {
    /// `..mbps`: Mb/s.
    Rate,
    /// `.._us` or `.._ms`: a time, kept in µs.
    Time,
    /// `..percent`: %.
    Percent,
    /// Anything else, as stored.
    Other,
}

impl Quantity {
    /// The quantity of `metric` and the factor to its panel's base unit (Mb/s, µs, %).
    fn of(metric: &str) -> (Quantity, f64) {
        if metric.ends_with("mbps") {
            (Quantity::Rate, 1.0)
        } else if metric.ends_with("_us") {
            (Quantity::Time, 1.0)
        } else if metric.ends_with("_ms") {
            (Quantity::Time, 1e3)
        } else if metric.ends_with("percent") {
            (Quantity::Percent, 1.0)
        } else {
            (Quantity::Other, 1.0)
        }
    }
}

/// One panel of the history plot: its title, y-axis label (with the unit) and series.
#[derive(Debug, Clone, PartialEq)]
struct HistoryPanel {
    title: String,
    y_label: String,
    series: Vec<Series>,
}

/// The archived results as panels, one per quantity (rates, times, percentages, others), each series one
/// kind, remote and metric over the time since the first result, in the unit returned with them (seconds,
/// minutes, hours or days, whichever suits the span).
fn history_panels(rows: &[Stored]) -> (&'static str, Vec<HistoryPanel>) {
    let times: Vec<Option<f64>> = rows
        .iter()
        .map(|s| {
            chrono::DateTime::parse_from_rfc3339(&s.record.time)
                .ok()
                .map(|t| t.timestamp_millis() as f64 / 1000.0)
        })
        .collect();
    let t0 = times.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let span = times
        .iter()
        .flatten()
        .copied()
        .fold(0.0, |m, t| f64::max(m, t - t0));
    let (x_div, x_unit) = match span {
        s if s < 120.0 => (1.0, "seconds"),
        s if s < 7200.0 => (60.0, "minutes"),
        s if s < 172_800.0 => (3600.0, "hours"),
        _ => (86_400.0, "days"),
    };
    let mut groups: Vec<(Quantity, Vec<Series>)> = Vec::new();
    for (s, t) in rows.iter().zip(&times) {
        let Some(t) = t else { continue };
        let (q, factor) = Quantity::of(&s.record.metric);
        let name = format!("{} {} {}", s.record.kind, s.record.remote, s.record.metric);
        let point = ((t - t0) / x_div, s.record.value * factor);
        let g = match groups.iter().position(|g| g.0 == q) {
            Some(g) => g,
            None => {
                groups.push((q, Vec::new()));
                groups.len() - 1
            }
        };
        let series = &mut groups[g].1;
        match series.iter_mut().find(|x| x.0 == name) {
            Some(e) => e.1.push(point),
            None => series.push((name, vec![point])),
        }
    }
    groups.sort_by_key(|g| g.0);
    let panels = groups
        .into_iter()
        .map(|(q, mut series)| {
            let max = series
                .iter()
                .flat_map(|s| s.1.iter().map(|p| p.1))
                .fold(0.0, f64::max);
            let (div, title, y_label) = match q {
                Quantity::Rate => {
                    let (div, unit) = rate_unit(max);
                    (div, "Rates", format!("rate ({unit})"))
                }
                Quantity::Time => {
                    let (div, unit) = time_unit(max);
                    (div, "Times", format!("time ({unit})"))
                }
                Quantity::Percent => (1.0, "Percentages", "percent (%)".to_string()),
                Quantity::Other => (1.0, "Other figures", "value".to_string()),
            };
            for s in &mut series {
                s.1.iter_mut().for_each(|p| p.1 /= div);
            }
            HistoryPanel {
                title: title.to_string(),
                y_label,
                series,
            }
        })
        .collect();
    (x_unit, panels)
}

fn history<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panels: &[HistoryPanel],
    x_label: &str,
) -> DrawResult {
    let root = root
        .titled("vlbiflow net history", ("sans-serif", 20))
        .map_err(|e| e.to_string())?;
    if panels.is_empty() {
        return lines(&root, "no results", x_label, "value", &[]);
    }
    // one time axis for all panels, so that a result lines up with the others of its time
    let all = panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|s| s.1.iter().map(|x| x.0)));
    let x_range = range(all, false);
    let areas = root.split_evenly((panels.len(), 1));
    for (area, p) in areas.iter().zip(panels) {
        lines_over(area, &p.title, x_label, &p.y_label, &p.series, Some(x_range))?;
    }
    Ok(())
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

    fn stored(id: i64, time: &str, kind: &str, metric: &str, value: f64) -> Stored {
        Stored {
            id,
            record: crate::archive::Record {
                time: time.into(),
                kind: kind.into(),
                local: "here".into(),
                remote: "127.0.0.1:14233".into(),
                metric: metric.into(),
                value,
                params: serde_json::Value::Null,
                result: serde_json::Value::Null,
            },
        }
    }

    /// Rates (Mb/s) and times (µs) are never drawn against one axis: each quantity has its own panel
    /// with its unit on the y axis.
    #[test]
    fn history_puts_rates_and_times_in_separate_panels() {
        let rows = vec![
            stored(1, "2026-11-28T20:00:00Z", "tcp", "rate_mbps", 9400.0),
            stored(2, "2026-11-28T20:00:10Z", "lat", "intercept_us", 23.5),
            stored(3, "2026-11-28T21:00:00Z", "tcp", "rate_mbps", 9100.0),
            stored(4, "2026-11-28T21:00:10Z", "lat", "intercept_us", 25.0),
            stored(5, "2026-11-28T21:30:00Z", "bw", "recv_user_rate_mbps", 940.0),
        ];
        let (unit, panels) = history_panels(&rows);
        assert_eq!(unit, "minutes");
        let labels: Vec<&str> = panels.iter().map(|p| p.y_label.as_str()).collect();
        assert_eq!(labels, ["rate (Gb/s)", "time (µs)"]);
        let rates: Vec<&str> = panels[0].series.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(
            rates,
            [
                "tcp 127.0.0.1:14233 rate_mbps",
                "bw 127.0.0.1:14233 recv_user_rate_mbps"
            ]
        );
        assert_eq!(panels[0].series[0].1, vec![(0.0, 9.4), (60.0, 9.1)]);
        assert_eq!(panels[1].series.len(), 1);
        assert_eq!(panels[1].series[0].1[1].1, 25.0);
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("history.svg");
        plot_history(&svg, &rows).unwrap();
        let text = svg_text(&svg);
        for want in [
            "rate (Gb/s)",
            "time (µs)",
            "Rates",
            "Times",
            "minutes since 2026-11-28T20:00:00Z",
        ] {
            assert!(text.iter().any(|t| t == want), "{want:?} not in {text:?}");
        }
        assert!(!text.iter().any(|t| t == "value"), "{text:?}");
    }

    #[test]
    fn ticks_are_round_and_labels_carry_only_the_decimals_the_step_needs() {
        let (t, step) = nice_ticks(0.0, 23_456.0, 5);
        assert_eq!(step, 5000.0);
        assert_eq!(t, vec![0.0, 5000.0, 10_000.0, 15_000.0, 20_000.0]);
        let labels: Vec<String> = t.iter().map(|&v| tick_label(v, step)).collect();
        assert_eq!(labels, ["0", "5000", "10000", "15000", "20000"]);
        let (t, step) = nice_ticks(0.0, 1.0, 5);
        assert_eq!(step, 0.2);
        assert_eq!(tick_label(t[3], step), "0.6");
        assert_eq!(tick_label(-0.0001, 0.05), "0.00");
        assert_eq!(tick_label(0.15, 0.05), "0.15");
        let (t, step) = nice_ticks(12.3, 15.9, 4);
        assert_eq!((t.first().copied(), step), (Some(13.0), 1.0));
        assert_eq!(nice_ticks(3.0, 3.0, 5).0, vec![3.0]);
        assert_eq!(rate_unit(20_000.0), (1000.0, "Gb/s"));
        assert_eq!(rate_unit(512.0), (1.0, "Mb/s"));
        assert_eq!(time_unit(25_000.0), (1000.0, "ms"));
    }

    fn svg_text(path: &Path) -> Vec<String> {
        let svg = std::fs::read_to_string(path).unwrap();
        svg.split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once("</text>")))
            .map(|(text, _)| text.trim().to_string())
            .collect()
    }

    fn hist(bins: &[u64], width: f64) -> HistSummary {
        HistSummary {
            count: bins.iter().sum(),
            bin_start: 0.0,
            bin_width: width,
            bins: bins.to_vec(),
            ..HistSummary::default()
        }
    }

    #[test]
    fn a_lossless_in_order_sweep_says_so_instead_of_drawing_empty_axes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bw.svg");
        let mut results = Vec::new();
        for (size, mbps) in [(64, 700.0), (1472, 6000.0), (8192, 23_000.0)] {
            for wait in [0.0, 10.0] {
                let mut r = BwResult {
                    size,
                    wait_us: wait,
                    count: 100,
                    received: 100,
                    recv_wire_rate_mbps: mbps / (1.0 + wait),
                    ..BwResult::default()
                };
                r.remote.arrivals.inter_arrival = hist(&[50, 30, 20], 2.5);
                results.push(r);
            }
        }
        plot_bw(&path, &results).unwrap();
        let text = svg_text(&path);
        for want in [
            "no reordering",
            "no loss",
            "no loss in any of the 6 tests",
            "receive wire rate (Gb/s)",
        ] {
            assert!(text.iter().any(|t| t == want), "{want:?} not in {text:?}");
        }
        // Every size has its inter-arrival histogram.
        for size in [64, 1472, 8192] {
            let title = format!("Inter-arrival time ({size} B, wait 10 µs)");
            assert!(text.contains(&title), "{title:?} not in {text:?}");
        }
        // Round tick labels: no "0.0 0.0 0.0" axes, no "20000.0".
        assert!(!text.iter().any(|t| t == "0.0" || t.ends_with(".0")), "{text:?}");
    }

    #[test]
    fn a_test_with_nothing_received_still_plots() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bw.svg");
        let r = BwResult {
            size: 1472,
            count: 10,
            lost: 10,
            loss_percent: 100.0,
            ..BwResult::default()
        };
        plot_bw(&path, &[r]).unwrap();
        let text = svg_text(&path);
        assert!(text.iter().any(|t| t == "no values"), "{text:?}");
        assert!(
            !text.iter().any(|t| t.ends_with(".0") || t.contains("0.0000")),
            "{text:?}"
        );
    }

    #[test]
    fn every_latency_size_gets_its_histogram() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lat.svg");
        let sizes = [64, 256, 512, 1024, 1472, 2048, 4096, 8192];
        let points = sizes
            .iter()
            .map(|&size| crate::client::LatPoint {
                size,
                sent: 10,
                received: 10,
                lost: 0,
                rtt_us: HistSummary {
                    p50: 14.0 + size as f64 * 1e-3,
                    ..hist(&[2, 5, 3], 0.5)
                },
            })
            .collect();
        let r = LatResult {
            points,
            slope_us_per_byte: 1e-3,
            intercept_us: 14.0,
            r2: 1.0,
            echoed: 80,
            foreign: 0,
        };
        plot_lat(&path, &r).unwrap();
        let text = svg_text(&path);
        for size in sizes {
            assert!(
                text.contains(&format!("{size} bytes")),
                "{size} bytes not in {text:?}"
            );
        }
    }

    #[test]
    fn interval_histogram_counts_everything() {
        let h = interval_hist(&[1.0, 2.0, 40.0, 0.0]);
        assert_eq!(h.bins.iter().sum::<u64>(), 4);
    }
}
