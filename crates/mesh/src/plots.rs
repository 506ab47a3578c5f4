//! SVG plots for the hub's pages: a metric of a pair over time, and the latest sweep (received rate
//! and loss against the offered rate).

use std::sync::Once;

use plotters::prelude::*;

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
        crate::hub::esc(title),
        crate::hub::esc(why)
    )
}

/// A metric over time: (time, value) points, oldest first.
pub fn series_svg(title: &str, unit: &str, pts: &[(Ms, f64)], now: Ms) -> String {
    if pts.is_empty() {
        return empty(title, "no results yet");
    }
    ensure_font();
    let mut s = String::new();
    let r = (|| -> Result<(), String> {
        let root = SVGBackend::with_string(&mut s, (760, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let t0 = pts.first().map(|p| p.0).unwrap_or(now);
        let span_min = ((now.max(pts.last().unwrap().0) - t0) as f64 / 60_000.0).max(1.0);
        let ymax = pts.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.15;
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
        let xy: Vec<(f64, f64)> = pts
            .iter()
            .map(|&(t, v)| ((t - now.max(pts.last().unwrap().0)) as f64 / 60_000.0, v))
            .collect();
        let blue = RGBColor(31, 119, 180);
        chart
            .draw_series(LineSeries::new(xy.iter().copied(), blue.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(xy.iter().map(|&p| Circle::new(p, 3, blue.filled())))
            .map_err(|e| e.to_string())?;
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
