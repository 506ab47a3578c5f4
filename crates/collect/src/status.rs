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

    /// An HTML page: stations by scans, each cell coloured by the scan's state. A scan named
    /// `<experiment>_<station>_<id>` goes to the column `<id>`, so that every station's scan of the same
    /// schedule entry lines up (other names get their own column).
    pub fn html(&self) -> String {
        let esc = |s: &str| {
            s.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
        };
        const STATES: [(&str, &str, &str); 6] = [
            ("verified", "#8d8", "verified here"),
            ("pulling", "#8cf", "moving"),
            ("following", "#8cf", "moving while recorded"),
            ("recording", "#fd8", "still recorded"),
            ("retrying", "#fb6", "failed, will retry"),
            ("failed", "#f88", "failed"),
        ];
        let colour = |state: &str| STATES.iter().find(|s| s.0 == state).map_or("#eee", |s| s.1);
        let key = |station: &str, scan: &str| -> String {
            let prefix = format!("{}_{}_", self.experiment, station).to_lowercase();
            let lower = scan.to_lowercase();
            match lower.strip_prefix(&prefix) {
                Some(_) => scan[prefix.len()..].to_string(),
                None => scan.to_string(),
            }
        };
        let mut cols: Vec<String> = Vec::new();
        for st in &self.stations {
            for sc in &st.scans {
                let k = key(&st.name, &sc.name);
                if !cols.contains(&k) {
                    cols.push(k);
                }
            }
        }
        cols.sort();
        let mbps = |bps: f64| format!("{:.0}", (bps / 1e6).max(0.0));
        let mut h = String::new();
        let _ = write!(
            h,
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">\
             <title>collect {e}</title><style>body{{font-family:sans-serif;margin:1em}}\
             table{{border-collapse:collapse}}td,th{{border:1px solid #999;padding:3px 6px;font-size:13px}}\
             td.n{{text-align:right}}span.k{{display:inline-block;padding:2px 6px;margin-right:6px}}</style></head>\
             <body><h1>collect {e}</h1><p>{state}: {v} of {x} scans verified, {b:.2} GB; link {link} Mb/s; \
             started {s}, updated {u}</p><p>",
            e = esc(&self.experiment),
            state = if self.complete {
                "complete"
            } else if self.ended {
                "ended, incomplete"
            } else {
                "running"
            },
            v = self.scans_verified,
            x = self.scans_expected,
            b = self.bytes_verified as f64 / 1e9,
            link = mbps(self.total_rate_bps),
            s = esc(&self.started),
            u = esc(&self.updated)
        );
        for (_, c, what) in STATES {
            let _ = write!(h, "<span class=\"k\" style=\"background:{c}\">{what}</span>");
        }
        h.push_str(
            "</p><table><tr><th>station</th><th>state</th><th>share Mb/s</th><th>rate Mb/s</th>\
             <th>verified GB</th><th>failures</th>",
        );
        for c in &cols {
            let _ = write!(h, "<th>{}</th>", esc(c));
        }
        h.push_str("<th>last error</th></tr>");
        for st in &self.stations {
            let verified: u64 = st.scans.iter().map(|s| s.bytes_verified).sum();
            let total: u64 = st.scans.iter().map(|s| s.bytes).sum();
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{:.2} / {:.2}</td><td class=\"n\">{}</td>",
                esc(&st.name),
                esc(&st.state),
                mbps(st.share_bps),
                mbps(st.rate_bps),
                verified as f64 / 1e9,
                total as f64 / 1e9,
                st.failures
            );
            for c in &cols {
                match st.scans.iter().find(|s| key(&st.name, &s.name) == *c) {
                    Some(s) => {
                        let pct = if s.bytes == 0 {
                            0.0
                        } else {
                            100.0 * s.bytes_verified as f64 / s.bytes as f64
                        };
                        let eta = s.eta_s.map_or(String::new(), |t| format!(", {t:.0} s left"));
                        let _ = write!(
                            h,
                            "<td style=\"background:{}\" title=\"{}: {} of {} bytes verified, {} Mb/s{}, {} retransmitted{}\">{} {:.0}%</td>",
                            colour(&s.state),
                            esc(&s.name),
                            s.bytes_verified,
                            s.bytes,
                            mbps(s.rate_bps),
                            eta,
                            s.retransmits,
                            s.errors.last().map_or(String::new(), |e| format!("; {}: {}", esc(&e.time), esc(&e.error))),
                            esc(&s.state),
                            pct
                        );
                    }
                    None => h.push_str("<td></td>"),
                }
            }
            let err = st
                .error
                .as_ref()
                .map_or(String::new(), |e| format!("{}: {}", e.time, e.error));
            let _ = write!(h, "<td>{}</td></tr>", esc(&err));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(name: &str, state: &str, bytes: u64, verified: u64) -> ScanStatus {
        ScanStatus {
            name: name.into(),
            state: state.into(),
            bytes,
            bytes_verified: verified,
            verified: state == "verified",
            rate_bps: -0.0,
            eta_s: None,
            retransmits: 0,
            errors: Vec::new(),
        }
    }

    fn station(name: &str, scans: Vec<ScanStatus>) -> StationStatus {
        StationStatus {
            name: name.into(),
            daemon: "127.0.0.1:46230".into(),
            state: "active".into(),
            share_bps: 5e8,
            rate_bps: -0.0,
            failures: 0,
            error: Some(TimedError {
                time: "2026-11-29T08:00:00Z".into(),
                error: "<script>".into(),
            }),
            scans,
        }
    }

    #[test]
    fn the_page_lines_up_each_stations_scan_of_one_schedule_entry() {
        let st = Status {
            experiment: "ev1".into(),
            started: "s".into(),
            updated: "u".into(),
            total_rate_bps: 1e9,
            complete: false,
            ended: false,
            scans_expected: 3,
            scans_verified: 1,
            bytes_verified: 10,
            stations: vec![
                station(
                    "ef",
                    vec![
                        scan("ev1_ef_no0001", "verified", 10, 10),
                        scan("ev1_ef_no0002", "pulling", 10, 5),
                    ],
                ),
                station("wb", vec![scan("EV1_WB_no0002", "failed", 10, 0)]),
            ],
        };
        let h = st.html();
        // two columns, no0001 and no0002, not one per station's scan
        assert_eq!(h.matches("<th>no000").count(), 2, "{h}");
        assert!(!h.contains("<th>ev1_"), "{h}");
        assert!(h.contains("pulling 50%"), "{h}");
        assert!(h.contains("failed 0%"), "{h}");
        // peer-chosen text is escaped, and no negative zero
        assert!(h.contains("&lt;script&gt;") && !h.contains("<script>"), "{h}");
        assert!(!h.contains("-0"), "{h}");
    }
    #[test]
    fn faults_name_each_station_that_failed_on_the_way() {
        let mut ok = scan("ev1_ef_no0001", "verified", 10, 10);
        ok.errors.push(TimedError {
            time: "2026-11-29T08:00:01Z".into(),
            error: "connection refused".into(),
        });
        ok.errors.push(TimedError {
            time: "2026-11-29T08:00:05Z".into(),
            error: "daemon closed the connection".into(),
        });
        let mut ef = station("ef", vec![ok]);
        ef.error = None;
        let mut wb = station("wb", vec![scan("ev1_wb_no0001", "verified", 10, 10)]);
        wb.error = None;
        let st = Status {
            experiment: "ev1".into(),
            started: "s".into(),
            updated: "u".into(),
            total_rate_bps: 1e9,
            complete: true,
            ended: true,
            scans_expected: 2,
            scans_verified: 2,
            bytes_verified: 20,
            stations: vec![ef, wb],
        };
        let f = crate::run::faults(&st);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("ef: 2 errors (every scan verified after all); first 2026-11-29T08:00:01Z connection refused; last"), "{f:?}");
    }
}
