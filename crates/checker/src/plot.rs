//! Spectra as a PNG: one panel per thread and channel, power in dB against frequency, the strongest tone
//! marked. Drawn with plotters' bitmap backend; text uses DejaVu Sans embedded from the `dejavu` crate
//! through plotters' `ab_glyph` font support, so no system fontconfig or font files are needed.

use crate::stats::StatsReport;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::Once;

/// Panels drawn at most (the first threads/channels).
pub const MAX_PANELS: usize = 16;

fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TTF shipped by the crate; a failure would only lose the text.
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Draws the spectra of `stats` into `path` (PNG).
pub fn plot_spectra(stats: &StatsReport, path: &Path) -> Result<(), String> {
    fonts();
    let panels: Vec<_> = stats
        .threads
        .iter()
        .flat_map(|t| t.channels.iter().map(move |c| (t, c)))
        .take(MAX_PANELS)
        .collect();
    if panels.is_empty() {
        return Err("no spectrum to plot (no valid frames with 1/2/4/8-bit samples)".into());
    }
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let rows = panels.len().div_ceil(cols);
    let (w, h) = (640 * cols as u32, 360 * rows as u32);
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| format!("{}: {e:?}", path.display());
    root.fill(&WHITE).map_err(e)?;
    let areas = root.split_evenly((rows, cols));
    for ((t, c), area) in panels.iter().zip(areas.iter()) {
        let n = c.spectrum.len();
        if n < 2 {
            continue;
        }
        let (scale, unit, div) = match t.sample_rate_hz {
            Some(r) if r >= 2e6 => (r / 1e6, "MHz", 1e6),
            Some(r) if r >= 2e3 => (r / 1e3, "kHz", 1e3),
            Some(r) => (r, "Hz", 1.0),
            None => (1.0, "x sample rate", 1.0),
        };
        let freq = |i: usize| -> f64 {
            if t.complex {
                (i as f64 - (t.fft_len / 2) as f64) / t.fft_len as f64 * scale
            } else {
                i as f64 / t.fft_len as f64 * scale
            }
        };
        let db: Vec<f64> = c.spectrum.iter().map(|p| 10.0 * p.max(1e-30).log10()).collect();
        // Ignore the DC bin for the range: a constant offset would squash the plot.
        let body = if t.complex { &db[..] } else { &db[1..] };
        let lo = body.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = body.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = (lo - 1.0, hi + 1.0);
        let title = format!(
            "thread {} ch {} [{}]  tone {}",
            t.thread,
            c.channel,
            c.state,
            match c.tone_hz {
                Some(hz) => format!("{:.4} {unit}", hz / div),
                None => format!("{:.4}", c.tone_fraction),
            }
        );
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(48)
            .build_cartesian_2d(freq(0)..freq(n - 1), lo..hi)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(format!("frequency ({unit})"))
            .y_desc("power (dB)")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(e)?;
        chart
            .draw_series(LineSeries::new((0..n).map(|i| (freq(i), db[i])), &BLUE))
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}
