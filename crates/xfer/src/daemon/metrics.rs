//! The daemon's Prometheus metrics over HTTP (axum, as the other daemons' HTTP sides): `GET /metrics`,
//! on loopback only.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;

use super::shared::Shared;

pub(super) fn metrics_text(sh: &Shared) -> String {
    use std::fmt::Write;
    let c = &sh.counters;
    let g = |a: &AtomicU64| a.load(Relaxed);
    let mut t = String::new();
    let mut counter = |name: &str, help: &str, v: u64| {
        let _ = writeln!(t, "# HELP vlbiflow_xfer_{name} {help}\n# TYPE vlbiflow_xfer_{name} counter\nvlbiflow_xfer_{name} {v}");
    };
    counter(
        "connections_total",
        "Control connections accepted.",
        g(&c.connections),
    );
    counter(
        "probes_total",
        "Connections that sent no complete handshake (probes, port scans).",
        g(&c.probes),
    );
    counter(
        "auth_failures_total",
        "Handshakes with a wrong key.",
        g(&c.auth_failures),
    );
    counter(
        "auth_blocked_total",
        "Connections refused after too many failed logins.",
        g(&c.auth_blocked),
    );
    counter(
        "refused_total",
        "Authenticated requests refused (root, path, exists).",
        g(&c.refused),
    );
    counter(
        "busy_total",
        "Authenticated requests turned away for now (the transfer limit, or a destination file being written).",
        g(&c.refused_busy),
    );
    counter(
        "transfers_ok_total",
        "Transfers verified and committed.",
        g(&c.transfers_ok),
    );
    counter(
        "transfers_failed_total",
        "Transfers that failed (kept for a resume).",
        g(&c.transfers_failed),
    );
    counter(
        "datagrams_bad_tag_total",
        "Data datagrams dropped for a wrong authentication tag (finished transfers).",
        g(&c.datagrams_bad_tag),
    );
    counter(
        "datagrams_malformed_total",
        "Data datagrams dropped as malformed, of another transfer, or of a file not announced (finished transfers).",
        g(&c.datagrams_malformed),
    );
    counter(
        "bytes_written_direct_total",
        "Bytes received and written with O_DIRECT, past the page cache (finished transfers).",
        g(&c.bytes_written_direct),
    );
    counter(
        "bytes_read_back_total",
        "Bytes read back from the disk after writing and found equal (verify-written; finished transfers).",
        g(&c.bytes_read_back),
    );
    let active = sh.active.lock().map(|a| a.clone()).unwrap_or_default();
    let _ = writeln!(t, "# HELP vlbiflow_xfer_active_transfers Transfers running now.\n# TYPE vlbiflow_xfer_active_transfers gauge\nvlbiflow_xfer_active_transfers {}", active.len());
    let per = [
        ("bytes_total", "Bytes of all files of the transfer."),
        ("bytes_verified", "Bytes in verified chunks."),
        ("bytes_resumed", "Bytes found already at the destination."),
        ("datagrams", "Datagrams accepted."),
        ("datagrams_bad_tag", "Datagrams dropped for a wrong tag."),
        (
            "datagrams_malformed",
            "Datagrams dropped as malformed, of another transfer, or of a file not announced.",
        ),
        ("datagrams_lost", "Datagrams reported lost."),
        (
            "rate_cap_bps",
            "The transfer's ceiling now, bits/s (--max-rate, and its share of --total-rate; 0: none).",
        ),
    ];
    for (name, help) in per {
        let _ = writeln!(
            t,
            "# HELP vlbiflow_xfer_transfer_{name} {help}\n# TYPE vlbiflow_xfer_transfer_{name} gauge"
        );
        for a in &active {
            let p = &a.progress;
            let v = match name {
                "bytes_total" => g(&p.bytes_total),
                "bytes_verified" => g(&p.bytes_verified),
                "bytes_resumed" => g(&p.bytes_resumed),
                "datagrams" => g(&p.datagrams),
                "datagrams_bad_tag" => g(&p.bad_tag),
                "datagrams_malformed" => g(&p.malformed),
                "rate_cap_bps" => a.cap.get().map_or(0, |c| c as u64),
                _ => g(&p.lost),
            };
            let _ = writeln!(
                t,
                "vlbiflow_xfer_transfer_{name}{{id=\"{:08x}\",peer=\"{}\",direction=\"{}\"}} {v}",
                a.id, a.peer, a.direction
            );
        }
    }
    t
}

/// The runtime the metrics are served on: one thread, the one [`serve`] runs on.
pub(super) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
}

/// Serves the metrics on `l` until the daemon stops.
pub(super) fn serve(rt: tokio::runtime::Runtime, l: TcpListener, sh: Arc<Shared>) {
    rt.block_on(async move {
        let Ok(l) = tokio::net::TcpListener::from_std(l) else {
            return;
        };
        let stop = sh.clone();
        let app = Router::new()
            .route("/metrics", any(metrics))
            .fallback(not_found)
            .with_state(sh);
        let _ = axum::serve(l, app)
            .with_graceful_shutdown(async move {
                while !stop.stop.load(Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await;
    });
}

/// A plain-text answer in the exposition format's content type; each connection closes after it.
fn reply(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; version=0.0.4"),
            (header::CONNECTION, "close"),
        ],
        body,
    )
        .into_response()
}

async fn metrics(method: Method, State(sh): State<Arc<Shared>>) -> Response {
    if method != Method::GET {
        return not_found().await;
    }
    reply(StatusCode::OK, metrics_text(&sh))
}

async fn not_found() -> Response {
    reply(StatusCode::NOT_FOUND, "only /metrics here\n".to_string())
}
