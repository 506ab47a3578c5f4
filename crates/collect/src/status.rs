//! What has arrived, as the running collect sees it: the status (JSON, rewritten atomically each second
//! to a file), Prometheus metrics and an HTML page of stations by scans, both on the `vlbiflow-http`
//! listener.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use serde::{Deserialize, Serialize};
use vlbiflow_http::{Families, Limits, MetricsEndpoint};

/// An error with the time it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimedError {
    /// UTC, ISO 8601.
    pub time: String,
    pub error: String,
}

/// One scan of a station.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanStatus {
    pub name: String,
    /// `pending`, `recording` (still recorded, waiting for `--follow`), `pulling`, `following`,
    /// `retrying`, `verified` or `failed`.
    pub state: String,
    /// Bytes of the gathered file(s) (of what is on disk now, while recorded).
    pub bytes: u64,
    /// Bytes verified here so far.
    pub bytes_verified: u64,
    pub verified: bool,
    /// Goodput now, bits/s.
    pub rate_bps: f64,
    /// Seconds left at the rate now, if it moves.
    pub eta_s: Option<f64>,
    pub retransmits: u64,
    /// Attempts that failed.
    pub errors: Vec<TimedError>,
}

/// One station.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StationStatus {
    pub name: String,
    /// `HOST:PORT`.
    pub daemon: String,
    /// `discovering`, `active`, `waiting` (back-off), `done`, `stopped` (destination disk full, given up)
    /// or `failed`.
    pub state: String,
    /// Its share of the link now, bits/s.
    pub share_bps: f64,
    /// What it moves now, bits/s.
    pub rate_bps: f64,
    /// Failed attempts in a row.
    pub failures: u32,
    /// Why it is waiting, stopped or failed.
    pub error: Option<TimedError>,
    pub scans: Vec<ScanStatus>,
}

/// The whole collect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub experiment: String,
    /// UTC, ISO 8601.
    pub started: String,
    pub updated: String,
    /// The link's total, bits/s.
    pub total_rate_bps: f64,
    /// Every expected scan is verified.
    pub complete: bool,
    /// The collect has ended (complete or not).
    pub ended: bool,
    pub scans_expected: usize,
    pub scans_verified: usize,
    pub bytes_verified: u64,
    pub stations: Vec<StationStatus>,
}

impl Status {
    /// Writes the status as JSON to `path` atomically (a temporary file beside it, renamed over it).
    pub fn write_atomic(&self, path: &Path) -> Result<(), String> {
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads a status file.
    pub fn read(path: &Path) -> Result<Status, String> {
        let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// An HTML page: stations by scans, each cell coloured by the scan's state.
    pub fn html(&self) -> String {
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        let colour = |state: &str| match state {
            "verified" => "#8d8",
            "pulling" | "following" => "#8cf",
            "failed" => "#f88",
            "retrying" | "recording" => "#fd8",
            _ => "#ddd",
        };
        let mut names: Vec<&str> = Vec::new();
        for st in &self.stations {
            for sc in &st.scans {
                if !names.contains(&sc.name.as_str()) {
                    names.push(&sc.name);
                }
            }
        }
        let mut h = String::new();
        let _ = write!(
            h,
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\"><title>collect {e}</title></head><body><h1>collect {e}</h1><p>{v} of {x} scans verified, {b:.3} GB; updated {u}</p><table border=\"1\" cellspacing=\"0\" cellpadding=\"3\"><tr><th>station</th><th>state</th><th>rate</th>",
            e = esc(&self.experiment),
            v = self.scans_verified,
            x = self.scans_expected,
            b = self.bytes_verified as f64 / 1e9,
            u = esc(&self.updated)
        );
        for n in &names {
            let _ = write!(h, "<th>{}</th>", esc(n));
        }
        h.push_str("</tr>");
        for st in &self.stations {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.0} Mb/s</td>",
                esc(&st.name),
                esc(&st.state),
                st.rate_bps / 1e6
            );
            for n in &names {
                match st.scans.iter().find(|s| s.name == *n) {
                    Some(s) => {
                        let _ = write!(
                            h,
                            "<td style=\"background:{}\" title=\"{}\">{} {:.0}%</td>",
                            colour(&s.state),
                            esc(&s.errors.last().map_or(String::new(), |e| e.error.clone())),
                            esc(&s.state),
                            if s.bytes == 0 {
                                0.0
                            } else {
                                100.0 * s.bytes_verified as f64 / s.bytes as f64
                            }
                        );
                    }
                    None => h.push_str("<td></td>"),
                }
            }
            h.push_str("</tr>");
        }
        h.push_str("</table></body></html>\n");
        h
    }
}

impl Collector for Status {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut f = Families(encoder);
        f.gauge1(
            "vlbiflow_collect_scans_expected",
            "Scans expected from all stations.",
            self.scans_expected as u64,
        )?;
        f.gauge1(
            "vlbiflow_collect_scans_verified",
            "Scans verified here.",
            self.scans_verified as u64,
        )?;
        f.gauge1(
            "vlbiflow_collect_verified_bytes",
            "Bytes of verified scans and of scans being pulled, verified here.",
            self.bytes_verified,
        )?;
        f.gauge1(
            "vlbiflow_collect_link_rate_bits_per_second",
            "The correlator link's total shared among the stations.",
            self.total_rate_bps,
        )?;
        let st = |s: &StationStatus| [("station", s.name.clone())];
        f.gauge(
            "vlbiflow_collect_station_share_bits_per_second",
            "The station's share of the link now (0: nothing to send, waiting or stopped).",
            self.stations.iter().map(|s| (st(s), s.share_bps)),
        )?;
        f.gauge(
            "vlbiflow_collect_station_rate_bits_per_second",
            "What the station's pulls move now (goodput).",
            self.stations.iter().map(|s| (st(s), s.rate_bps)),
        )?;
        f.gauge(
            "vlbiflow_collect_station_failures",
            "Failed attempts in a row of the station.",
            self.stations.iter().map(|s| (st(s), s.failures as u64)),
        )?;
        f.gauge(
            "vlbiflow_collect_station_scans_verified",
            "The station's scans verified here.",
            self.stations
                .iter()
                .map(|s| (st(s), s.scans.iter().filter(|c| c.verified).count() as u64)),
        )?;
        f.gauge(
            "vlbiflow_collect_station_scans_expected",
            "The station's scans expected.",
            self.stations.iter().map(|s| (st(s), s.scans.len() as u64)),
        )?;
        f.gauge(
            "vlbiflow_collect_station_verified_bytes",
            "Bytes of the station's scans verified here.",
            self.stations
                .iter()
                .map(|s| (st(s), s.scans.iter().map(|c| c.bytes_verified).sum::<u64>())),
        )
    }
}

/// Serves `/metrics` and `/` (the HTML page) of `status` on `l` until `stop`. Only loopback clients are
/// answered (the CLI binds loopback by default).
pub fn serve(l: TcpListener, status: Arc<Mutex<Status>>, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    l.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    rt.block_on(async move {
        let Ok(l) = tokio::net::TcpListener::from_std(l) else {
            return;
        };
        let s1 = status.clone();
        let page = status.clone();
        let app = MetricsEndpoint::new(None)
            .router(
                |a: &vlbiflow_http::Asker<'_>| a.peer.ip().is_loopback(),
                move || {
                    let s = s1.clone();
                    async move {
                        let snap = s
                            .lock()
                            .map(|g| g.clone())
                            .unwrap_or_else(|e| e.into_inner().clone());
                        Box::new(snap) as Box<dyn Collector>
                    }
                },
            )
            .route(
                "/",
                axum::routing::get(move || {
                    let s = page.clone();
                    async move {
                        let html = s.lock().map(|g| g.html()).unwrap_or_default();
                        (
                            [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
                            html,
                        )
                    }
                }),
            );
        vlbiflow_http::serve(l, app, Limits::DEFAULT, async move {
            while !stop.load(Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
    });
    Ok(())
}
