//! The daemon's Prometheus metrics over HTTP (`GET /metrics`, the daemons' common listener of
//! `vlbiflow-http`): on loopback, or anywhere with a read-only metrics token.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use vlbiflow_http::{Families, Limits, MetricsEndpoint};

use super::shared::Shared;

/// One running transfer's figures at a scrape.
#[derive(Debug)]
struct Row {
    id: String,
    peer: String,
    direction: &'static str,
    size: u64,
    verified: u64,
    resumed: u64,
    moved: u64,
    datagrams: u64,
    retransmits: u64,
    bad_tag: u64,
    malformed: u64,
    lost: u64,
    cap_bytes_per_second: f64,
}

/// The daemon's figures at a scrape.
#[derive(Debug)]
struct Snapshot {
    /// (name, help, value) of the daemon-wide counters.
    counters: Vec<(&'static str, &'static str, u64)>,
    rows: Vec<Row>,
}

fn snapshot(sh: &Shared) -> Snapshot {
    let active = sh.active.lock().map(|a| a.clone()).unwrap_or_default();
    for a in &active {
        sh.fold(a);
    }
    let c = &sh.counters;
    let g = |a: &AtomicU64| a.load(Relaxed);
    let counters = vec![
        ("vlbiflow_xfer_connections_total", "Control connections accepted.", g(&c.connections)),
        (
            "vlbiflow_xfer_probes_total",
            "Connections that sent no complete handshake (probes, port scans).",
            g(&c.probes),
        ),
        ("vlbiflow_xfer_auth_failures_total", "Handshakes with a wrong key.", g(&c.auth_failures)),
        (
            "vlbiflow_xfer_auth_blocked_total",
            "Connections closed before their handshake: their address, or all together, had as many unauthenticated connections as allowed.",
            g(&c.auth_blocked),
        ),
        (
            "vlbiflow_xfer_tarpitted_total",
            "Connections held for a back-off delay before their handshake (their address had failed or silent handshakes).",
            g(&c.tarpitted),
        ),
        (
            "vlbiflow_xfer_refused_total",
            "Authenticated requests refused (root, path, exists).",
            g(&c.refused),
        ),
        (
            "vlbiflow_xfer_busy_total",
            "Authenticated requests turned away for now (the transfer limit, or a destination file being written).",
            g(&c.refused_busy),
        ),
        ("vlbiflow_xfer_transfers_ok_total", "Transfers verified and committed.", g(&c.transfers_ok)),
        (
            "vlbiflow_xfer_transfers_failed_total",
            "Transfers that failed (kept for a resume).",
            g(&c.transfers_failed),
        ),
        (
            "vlbiflow_xfer_sent_bytes_total",
            "Payload bytes sent by sending and relaying transfers, retransmissions included (updated while they run).",
            g(&c.sent_bytes),
        ),
        (
            "vlbiflow_xfer_received_bytes_total",
            "Payload bytes accepted by receiving transfers (updated while they run).",
            g(&c.received_bytes),
        ),
        (
            "vlbiflow_xfer_sent_datagrams_total",
            "Data datagrams sent, retransmissions included (updated while transfers run).",
            g(&c.sent_datagrams),
        ),
        (
            "vlbiflow_xfer_received_datagrams_total",
            "Data datagrams accepted (updated while transfers run).",
            g(&c.received_datagrams),
        ),
        (
            "vlbiflow_xfer_retransmitted_datagrams_total",
            "Data datagrams sent again (updated while transfers run).",
            g(&c.retransmitted_datagrams),
        ),
        (
            "vlbiflow_xfer_lost_datagrams_total",
            "Data datagrams the receivers reported lost (updated while transfers run).",
            g(&c.lost_datagrams),
        ),
        (
            "vlbiflow_xfer_datagrams_bad_tag_total",
            "Data datagrams dropped for a wrong authentication tag (updated while transfers run).",
            g(&c.datagrams_bad_tag),
        ),
        (
            "vlbiflow_xfer_datagrams_malformed_total",
            "Data datagrams dropped as malformed, of another transfer, or of a file not announced (updated while transfers run).",
            g(&c.datagrams_malformed),
        ),
        (
            "vlbiflow_xfer_direct_written_bytes_total",
            "Bytes received and written with O_DIRECT, past the page cache (counted when a transfer is committed).",
            g(&c.bytes_written_direct),
        ),
        (
            "vlbiflow_xfer_read_back_bytes_total",
            "Bytes read back from the disk after writing and found equal (verify-written; counted when a transfer is committed).",
            g(&c.bytes_read_back),
        ),
    ];
    let rows = active
        .iter()
        .map(|a| {
            let p = &a.progress;
            Row {
                id: format!("{:08x}", a.id),
                peer: a.peer.to_string(),
                direction: a.direction,
                size: g(&p.bytes_total),
                verified: g(&p.bytes_verified),
                resumed: g(&p.bytes_resumed),
                moved: g(&p.bytes_moved),
                datagrams: g(&p.datagrams),
                retransmits: g(&p.retransmits),
                bad_tag: g(&p.bad_tag),
                malformed: g(&p.malformed),
                lost: g(&p.lost),
                cap_bytes_per_second: a.cap.get().map_or(0.0, |c| c / 8.0),
            }
        })
        .collect();
    Snapshot { counters, rows }
}

impl Collector for Snapshot {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut f = Families(encoder);
        for (name, help, v) in &self.counters {
            f.counter1(name, help, *v)?;
        }
        f.gauge1(
            "vlbiflow_xfer_active_transfers",
            "Transfers running now.",
            self.rows.len() as u64,
        )?;
        let labels = |r: &Row| {
            [
                ("id", r.id.clone()),
                ("peer", r.peer.clone()),
                ("direction", r.direction.to_string()),
            ]
        };
        type Get = fn(&Row) -> u64;
        let gauges: [(&str, &str, Get); 3] = [
            (
                "vlbiflow_xfer_transfer_size_bytes",
                "Bytes of all files of the running transfer.",
                |r| r.size,
            ),
            (
                "vlbiflow_xfer_transfer_verified_bytes",
                "Bytes of the running transfer in verified chunks (resumed ones included).",
                |r| r.verified,
            ),
            (
                "vlbiflow_xfer_transfer_resumed_bytes",
                "Bytes of the running transfer found already at the destination.",
                |r| r.resumed,
            ),
        ];
        for (name, help, get) in gauges {
            f.gauge(name, help, self.rows.iter().map(|r| (labels(r), get(r))))?;
        }
        let counters: [(&str, &str, Get); 6] = [
            (
                "vlbiflow_xfer_transfer_moved_bytes_total",
                "Payload bytes the running transfer sent (retransmissions included) or accepted.",
                |r| r.moved,
            ),
            ("vlbiflow_xfer_transfer_datagrams_total", "Datagrams the running transfer sent or accepted.", |r| r.datagrams),
            (
                "vlbiflow_xfer_transfer_retransmitted_datagrams_total",
                "Datagrams the running transfer sent again.",
                |r| r.retransmits,
            ),
            (
                "vlbiflow_xfer_transfer_bad_tag_datagrams_total",
                "Datagrams the running transfer dropped for a wrong tag.",
                |r| r.bad_tag,
            ),
            (
                "vlbiflow_xfer_transfer_malformed_datagrams_total",
                "Datagrams the running transfer dropped as malformed, of another transfer, or of a file not announced.",
                |r| r.malformed,
            ),
            (
                "vlbiflow_xfer_transfer_lost_datagrams_total",
                "Datagrams reported lost in the running transfer.",
                |r| r.lost,
            ),
        ];
        for (name, help, get) in counters {
            f.counter(name, help, self.rows.iter().map(|r| (labels(r), get(r))))?;
        }
        f.gauge(
            "vlbiflow_xfer_transfer_rate_cap_bytes_per_second",
            "The running transfer's ceiling now, payload and headers on the wire (--max-rate, and its share of --total-rate; 0: none).",
            self.rows.iter().map(|r| (labels(r), r.cap_bytes_per_second)),
        )
    }
}

/// The metrics text (Prometheus text format), as `GET /metrics` answers it.
pub(super) fn metrics_text(sh: &Shared) -> String {
    vlbiflow_http::metrics::render(vlbiflow_http::BuildInfo::current(), Box::new(snapshot(sh)))
}

/// The runtime the metrics are served on: one thread, the one [`serve`] runs on.
pub(super) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
}

/// Serves the metrics on `l` until the daemon stops. Without a metrics token only loopback listens (the
/// daemon refuses another address at start); with one, a request must carry it.
pub(super) fn serve(rt: tokio::runtime::Runtime, l: TcpListener, sh: Arc<Shared>) {
    rt.block_on(async move {
        let Ok(l) = tokio::net::TcpListener::from_std(l) else {
            return;
        };
        let stop = sh.clone();
        let token = sh.cfg.metrics_token.clone();
        let open = token.is_none();
        let app = MetricsEndpoint::new(token).router(
            move |_: &vlbiflow_http::Asker<'_>| open,
            move || {
                let sh = sh.clone();
                async move { Box::new(snapshot(&sh)) as Box<dyn Collector> }
            },
        );
        vlbiflow_http::serve(l, app, Limits::DEFAULT, async move {
            while !stop.stop.load(Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
    });
}
