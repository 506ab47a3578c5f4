//! Plots of transport-efficiency series: bandwidth and cost per
//! transport with the efficiency normalised to the best, and bandwidth against the path's packet loss.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

use crate::series::{EffReport, TransportSummary};
use vlbiflow_net::plot::{color, lines, note, render, DrawResult, PlotError, Series};

fn name(s: &TransportSummary) -> String {
    s.transport.map(|t| t.name().to_owned()).unwrap_or_default()
}

/// One bar chart: per transport, stacked segments (label, value, colour index), whiskers (lo, hi) if any.
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_label: &str,
    names: &[String],
    stacks: &[Vec<(&str, f64, usize)>],
    whiskers: &[Option<(f64, f64)>],
) -> DrawResult {
    let n = names.len();
    if n == 0 {
        return note(area, title, "no results");
    }
    let top = stacks
        .iter()
        .map(|s| {
            s.iter()
                .map(|x| x.1.max(0.0))
                .filter(|v| v.is_finite())
                .sum::<f64>()
        })
        .chain(whiskers.iter().flatten().map(|w| w.1))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 17))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0f64..top)
        .map_err(|e| e.to_string())?;
    let labels = names.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    let mut legend_done = std::collections::HashSet::new();
    for (i, stack) in stacks.iter().enumerate() {
        let x = i as f64;
        let mut base = 0.0;
        for &(label, v, c) in stack {
            if !(v.is_finite() && v > 0.0) {
                continue;
            }
            let col = color(c);
            let r = Rectangle::new([(x - 0.32, base), (x + 0.32, base + v)], col.filled());
            let s = chart.draw_series(std::iter::once(r)).map_err(|e| e.to_string())?;
            if !label.is_empty() && legend_done.insert(label.to_owned()) {
                s.label(label.to_owned())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], col.filled()));
            }
            base += v;
        }
        if let Some(Some((lo, hi))) = whiskers.get(i) {
            if lo.is_finite() && hi.is_finite() {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(x, *lo), (x, *hi)],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(|e| e.to_string())?;
                for y in [*lo, *hi] {
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(x - 0.08, y), (x + 0.08, y)],
                            BLACK.stroke_width(2),
                        )))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
    }
    if !legend_done.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn draw_eff<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &EffReport) -> DrawResult {
    let s = &r.summary;
    let names: Vec<String> = s.iter().map(name).collect();
    let first = r.runs.first().map(|x| &x.params);
    let title =
        match first {
            Some(p) => format!(
            "Receiving {} flow(s) of {}-byte {} {} for {:.0} s, {} repeat(s) (medians; whiskers: min-max)",
            p.setup.streams,
            p.setup.size,
            if p.setup.transport.is_udp() { "datagrams" } else { "messages" },
            match p.rate_bps {
                Some(b) => format!("at {:.2} Gb/s", b / 1e9),
                None => "flat out".into(),
            },
            p.setup.duration_ms as f64 / 1e3,
            s.iter().map(|x| x.repeats).max().unwrap_or(0)
        ),
            None => "transport efficiency".into(),
        };
    let (head, body) = root.split_vertically(34);
    head.titled(&title, ("sans-serif", 18))
        .map_err(|e| e.to_string())?;
    let panels = body.split_evenly((1, 3));
    let gb: Vec<Vec<(&str, f64, usize)>> = s.iter().map(|x| vec![("", x.gbps, 0)]).collect();
    let whisk: Vec<Option<(f64, f64)>> = s
        .iter()
        .map(|x| {
            let v: Vec<f64> = r
                .runs
                .iter()
                .filter(|run| Some(run.params.setup.transport) == x.transport)
                .map(|run| run.metrics.gbps)
                .collect();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (v.len() > 1).then_some((lo, hi))
        })
        .collect();
    bars(&panels[0], "Bandwidth received", "Gb/s", &names, &gb, &whisk)?;
    let cpu: Vec<Vec<(&str, f64, usize)>> = s
        .iter()
        .map(|x| {
            vec![
                ("receiver system", x.recv_system, 3),
                ("receiver user", x.recv_user, 1),
                ("sender system", x.send_system, 0),
                ("sender user", x.send_user, 2),
            ]
        })
        .collect();
    bars(
        &panels[1],
        "CPU per GB (threads)",
        "CPU seconds per GB",
        &names,
        &cpu,
        &[],
    )?;
    let watts = s.iter().all(|x| x.gbps_per_watt.is_some());
    let eff: Vec<Vec<(&str, f64, usize)>> = if watts {
        let best = s.iter().filter_map(|x| x.gbps_per_watt).fold(0.0, f64::max);
        s.iter()
            .map(|x| vec![("", x.gbps_per_watt.unwrap_or(0.0) / best, 4)])
            .collect()
    } else {
        s.iter().map(|x| vec![("", x.both_efficiency, 4)]).collect()
    };
    let (title, y) = if watts {
        ("Efficiency: Gb/s per Watt (RAPL)", "relative to the best")
    } else {
        ("Efficiency: GB per CPU second (no RAPL)", "relative to the best")
    };
    bars(&panels[2], title, y, &names, &eff, &[])
}

/// Bandwidth, CPU per GB and normalised efficiency per transport (PNG or SVG by extension).
pub fn plot_efficiency(path: &Path, report: &EffReport) -> Result<(), PlotError> {
    render(
        path,
        (1500, 560),
        |a| draw_eff(a, report),
        |a| draw_eff(a, report),
    )
}

/// Series of Gb/s against path loss (percent), one per transport, from reports carrying `path_loss`.
pub fn loss_series(reports: &[EffReport]) -> Vec<Series> {
    // One series per transport, TCP once per congestion control the senders used.
    let mut keys: Vec<(vlbiflow_rx::Transport, Option<String>)> = Vec::new();
    for r in reports.iter().filter(|r| r.path_loss.is_some()) {
        for s in &r.summary {
            if let Some(t) = s.transport {
                let k = (t, s.tcp_congestion.clone());
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
    }
    keys.sort();
    let mut out: Vec<Series> = Vec::new();
    for (t, cc) in keys {
        let mut pts: Vec<(f64, f64)> = reports
            .iter()
            .filter_map(|r| {
                let loss = r.path_loss?;
                let s = r
                    .summary
                    .iter()
                    .find(|s| s.transport == Some(t) && s.tcp_congestion == cc)?;
                Some((loss * 100.0, s.gbps))
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let name = match &cc {
            Some(cc) => format!("{} ({cc})", t.name()),
            None => t.name().to_owned(),
        };
        out.push((name, pts));
    }
    out
}

/// Reads a series of (loss %, Gb/s) points measured by another tool (e.g. `vlbiflow xfer` through
/// the same emulated path): CSV with the header `loss_percent,gbps`, one point per line. Errors name the
/// file and line.
pub fn read_loss_series(label: &str, path: &Path) -> Result<Series, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    match lines.next() {
        Some((_, h)) if h.trim().replace(' ', "") == "loss_percent,gbps" => {}
        Some((i, h)) => {
            return Err(format!(
                "{}:{}: header {h:?}, expected \"loss_percent,gbps\"",
                path.display(),
                i + 1
            ))
        }
        None => return Err(format!("{}: empty", path.display())),
    }
    let mut pts = Vec::new();
    for (i, l) in lines {
        let bad = |what: &str| format!("{}:{}: {what} in {l:?}", path.display(), i + 1);
        let mut f = l.split(',').map(str::trim);
        let (Some(a), Some(b), None) = (f.next(), f.next(), f.next()) else {
            return Err(bad("expected two fields"));
        };
        let loss: f64 = a.parse().map_err(|_| bad("loss_percent is not a number"))?;
        let gbps: f64 = b.parse().map_err(|_| bad("gbps is not a number"))?;
        if !(0.0..=100.0).contains(&loss) || !gbps.is_finite() || gbps < 0.0 {
            return Err(bad("out of range (loss 0-100 %, Gb/s >= 0)"));
        }
        pts.push((loss, gbps));
    }
    if pts.is_empty() {
        return Err(format!("{}: no points", path.display()));
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok((label.to_owned(), pts))
}

/// The seed's "bandwidth versus packet loss": Gb/s received against the path's random loss, one line per
/// transport of the reports, plus `extra` series measured by other tools.
pub fn plot_loss(path: &Path, reports: &[EffReport], extra: &[Series]) -> Result<(), PlotError> {
    let mut series = loss_series(reports);
    series.extend(extra.iter().cloned());
    let (title, x, y) = (
        "Bandwidth against packet loss on the path",
        "random loss on the path (%)",
        "Gb/s received",
    );
    render(
        path,
        (900, 560),
        |a| lines(a, title, x, y, &series),
        |a| lines(a, title, x, y, &series),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{summarise, EffMetrics, EffParams, EffRemote, EffResult, EffSetup, EndUsage, SendOutcome};
    use vlbiflow_rx::Transport;

    fn run(t: Transport, gbps: f64) -> EffResult {
        EffResult {
            params: EffParams {
                setup: EffSetup {
                    transport: t,
                    streams: 50,
                    size: 8232,
                    duration_ms: 5000,
                    recv_buffer: None,
                },
                rate_bps: None,
                gso: 0,
                send_buffer: 1 << 20,
                tcp_congestion: None,
            },
            repeat: 0,
            send: SendOutcome::default(),
            sender: EndUsage::default(),
            remote: EffRemote::default(),
            metrics: EffMetrics {
                gbps,
                recv_cpu_s_per_gb: (0.1, 0.3),
                send_cpu_s_per_gb: (0.1, 0.4),
                ..Default::default()
            },
        }
    }

    #[test]
    fn draws_both_plots() {
        let runs = vec![
            run(Transport::Udp, 5.0),
            run(Transport::Udp, 5.4),
            run(Transport::Tcp, 7.0),
        ];
        let mut r = EffReport {
            summary: summarise(&runs),
            runs,
            path_loss: Some(0.01),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("eff.png");
        plot_efficiency(&png, &r).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 10_000);
        let mut r0 = r.clone();
        r0.path_loss = Some(0.0);
        r.summary[0].gbps = 4.0;
        let s = loss_series(&[r.clone(), r0.clone()]);
        assert_eq!(s[0].0, "udp");
        assert_eq!(s[0].1, vec![(0.0, 5.2), (1.0, 4.0)]);
        plot_loss(&dir.path().join("loss.svg"), &[r, r0], &[]).unwrap();
        assert!(plot_efficiency(&dir.path().join("x.gif"), &EffReport::default()).is_err());
    }

    #[test]
    fn another_tools_loss_series_is_read_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("xfer.csv");
        std::fs::write(&f, "loss_percent,gbps\n1,0.91\n0, 0.99\n\n5,0.60\n").unwrap();
        let s = read_loss_series("xfer", &f).unwrap();
        assert_eq!(
            s,
            ("xfer".to_owned(), vec![(0.0, 0.99), (1.0, 0.91), (5.0, 0.60)])
        );
        plot_loss(&dir.path().join("loss.svg"), &[], &[s]).unwrap();
        for (text, says) in [
            ("", "empty"),
            ("loss,rate\n1,2\n", ":1: header"),
            ("loss_percent,gbps\n", "no points"),
            ("loss_percent,gbps\n1,x\n", ":2: gbps is not a number"),
            ("loss_percent,gbps\n1\n", ":2: expected two fields"),
            ("loss_percent,gbps\n101,1\n", ":2: out of range"),
        ] {
            std::fs::write(&f, text).unwrap();
            let e = read_loss_series("xfer", &f).unwrap_err();
            assert!(e.contains("xfer.csv") && e.contains(says), "{text:?}: {e}");
        }
        assert!(read_loss_series("xfer", &dir.path().join("missing.csv")).is_err());
    }
}
