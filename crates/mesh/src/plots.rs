//! SVG plots for the hub's pages: a metric of a pair over time, and the latest sweep (received rate
//! and loss against the offered rate).

use std::sync::Once;

use plotters::prelude::*;

use crate::escape::esc;
use crate::report::Point;
use crate::timespec::Ms;

fn ensure_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

fn empty(title: &str, why: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"120\"><text x=\"10\" y=\"30\" \
         font-family=\"sans-serif\" font-size=\"16\">{}</text><text x=\"10\" y=\"60\" font-family=\"sans-serif\" \
         font-size=\"14\" fill=\"#777\">{}</text></svg>",
        esc(title),
        esc(why)
    )
}

/// Line colours of the series, in order (matplotlib's first four).
const PALETTE: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// A metric over time, one line per test (a sweep's loss and a latency test's loss are different
/// figures, so they never share a line): `(test name, (time, value) points oldest first)`.
pub fn series_svg(title: &str, unit: &str, series: &[(String, Vec<(Ms, f64)>)], now: Ms) -> String {
    let all = || series.iter().flat_map(|(_, pts)| pts.iter());
    if all().next().is_none() {
        return empty(title, "no results yet");
    }
    ensure_font();
    let mut s = String::new();
    let r = (|| -> Result<(), String> {
        let root = SVGBackend::with_string(&mut s, (760, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let t0 = all().map(|p| p.0).min().unwrap_or(now);
        let t1 = now.max(all().map(|p| p.0).max().unwrap_or(now));
        let span_min = ((t1 - t0) as f64 / 60_000.0).max(1.0);
        let ymax = all().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(-span_min..0.0, 0.0..ymax)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("minutes before now")
            .y_desc(unit)
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let xy: Vec<(f64, f64)> = pts
                .iter()
                .map(|&(t, v)| ((t - t1) as f64 / 60_000.0, v))
                .collect();
            chart
                .draw_series(LineSeries::new(xy.iter().copied(), colour.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
            chart
                .draw_series(xy.iter().map(|&p| Circle::new(p, 3, colour.filled())))
                .map_err(|e| e.to_string())?;
        }
        if series.len() > 1 {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 12))
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())
    })();
    match r {
        Ok(()) => s,
        Err(e) => empty(title, &format!("plot failed: {e}")),
    }
}

/// The latest sweep: received rate and loss against the offered rate.
pub fn sweep_svg(title: &str, pts: &[Point]) -> String {
    if pts.is_empty() {
        return empty(title, "no sweep points yet");
    }
    ensure_font();
    let mut s = String::new();
    let r = (|| -> Result<(), String> {
        let root = SVGBackend::with_string(&mut s, (760, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let xmax = pts.iter().map(|p| p.offered_mbps).fold(0.0f64, f64::max).max(1.0) * 1.1;
        let ymax = pts
            .iter()
            .map(|p| p.recv_mbps.max(p.offered_mbps))
            .fold(0.0f64, f64::max)
            .max(1.0)
            * 1.1;
        let lmax = pts.iter().map(|p| p.loss_percent).fold(0.0f64, f64::max).max(1.0) * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .right_y_label_area_size(50)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .map_err(|e| e.to_string())?
            .set_secondary_coord(0.0..xmax, 0.0..lmax);
        chart
            .configure_mesh()
            .x_desc("offered Mb/s")
            .y_desc("received Mb/s")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .configure_secondary_axes()
            .y_desc("loss %")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
        let mut sorted = pts.to_vec();
        sorted.sort_by(|a, b| a.offered_mbps.total_cmp(&b.offered_mbps));
        let blue = RGBColor(31, 119, 180);
        let red = RGBColor(214, 39, 40);
        chart
            .draw_series(LineSeries::new(
                sorted.iter().map(|p| (p.offered_mbps, p.recv_mbps)),
                blue.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label("received")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue));
        chart
            .draw_secondary_series(LineSeries::new(
                sorted.iter().map(|p| (p.offered_mbps, p.loss_percent)),
                red.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label("loss %")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], red));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    })();
    match r {
        Ok(()) => s,
        Err(e) => empty(title, &format!("plot failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair's loss over time from a sweep (loss above the path's rate) and a latency test (none):
    /// two lines of their own colours, named in a legend, never one line zig-zagging between them.
    #[test]
    fn a_metric_of_two_tests_is_two_lines_with_a_legend() {
        let bw = vec![(0, 60.0), (120_000, 62.0), (240_000, 61.0)];
        let lat = vec![(30_000, 0.0), (60_000, 0.0), (90_000, 0.0), (150_000, 0.0)];
        let svg = series_svg(
            "A -> J: loss_percent",
            "loss_percent",
            &[("bw".into(), bw), ("lat".into(), lat)],
            260_000,
        );
        let lines: Vec<&str> = svg.split("<polyline").skip(1).collect();
        let with = |c: &RGBColor| {
            let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
            lines
                .iter()
                .filter(|l| l.contains(&hex) && l.contains("points="))
                .count()
        };
        // One line per test (plus its legend sample, drawn as a path of the same colour).
        assert!(with(&PALETTE[0]) >= 1 && with(&PALETTE[1]) >= 1, "{svg}");
        let points = |c: &RGBColor| {
            let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
            lines
                .iter()
                .filter(|l| l.contains(&hex))
                .map(|l| {
                    let p = &l[l.find("points=\"").unwrap() + 8..];
                    p[..p.find('"').unwrap()].split_whitespace().count()
                })
                .max()
                .unwrap_or(0)
        };
        assert_eq!((points(&PALETTE[0]), points(&PALETTE[1])), (3, 4), "{svg}");
        let texts = |svg: &str| -> Vec<String> {
            svg.split("<text")
                .skip(1)
                .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].trim().to_string()))
                .collect()
        };
        let t = texts(&svg);
        assert!(
            t.contains(&"bw".into()) && t.contains(&"lat".into()),
            "no legend: {t:?}"
        );
        // One test alone: one line, no legend.
        let one = series_svg(
            "t",
            "rtt_ms",
            &[("lat".into(), vec![(0, 1.0), (30_000, 2.0)])],
            60_000,
        );
        assert!(!texts(&one).contains(&"lat".into()), "{one}");
    }
}
