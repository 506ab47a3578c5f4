//! `/metrics` in the Prometheus text format: newest figures per pair and test, run counts, pending runs,
//! active alerts, agents' last contact.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};

use super::access::guard;
use super::http::{blocking, reply};
use super::matrix::matrix;
use super::state::{lock, Shared};

fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn metrics_text(s: &Shared) -> Result<String, String> {
    let m = matrix(s)?;
    let pending = lock(&s.ledger).pending();
    let mut a = lock(&s.archive);
    let counts = a.counts(None, None).map_err(|e| e.to_string())?;
    let active = a.active_alerts().map_err(|e| e.to_string())?;
    let agents = a.agents().map_err(|e| e.to_string())?;
    drop(a);
    let mut out = String::new();
    let help = |out: &mut String, name: &str, kind: &str, text: &str| {
        let _ = writeln!(out, "# HELP {name} {text}\n# TYPE {name} {kind}");
    };
    for (metric, text) in [
        ("throughput_mbps", "Newest throughput of the pair, Mb/s"),
        ("loss_percent", "Newest loss of the pair, percent"),
        ("rtt_ms", "Newest round-trip time of the pair, ms"),
        ("capacity_mbps", "Newest bottleneck capacity of the pair, Mb/s"),
    ] {
        let name = format!("vlbiflow_mesh_{metric}");
        help(&mut out, &name, "gauge", text);
        // One series per test: a pair's loss from a sweep and from a latency test are two figures.
        for c in &m.cells {
            for v in c.by_test.values().filter_map(|ms| ms.get(metric)) {
                let _ = writeln!(
                    out,
                    "{name}{{src=\"{}\",dst=\"{}\",test=\"{}\"}} {}",
                    label(&c.src),
                    label(&c.dst),
                    label(&v.test),
                    v.value
                );
            }
        }
    }
    help(
        &mut out,
        "vlbiflow_mesh_result_timestamp_seconds",
        "gauge",
        "Planned start of the newest result of the pair, test and metric",
    );
    for c in &m.cells {
        for (test, ms) in &c.by_test {
            for (metric, v) in ms {
                let _ = writeln!(
                    out,
                    "vlbiflow_mesh_result_timestamp_seconds{{src=\"{}\",dst=\"{}\",test=\"{}\",metric=\"{metric}\"}} {}",
                    label(&c.src),
                    label(&c.dst),
                    label(test),
                    v.t as f64 / 1000.0
                );
            }
        }
    }
    help(
        &mut out,
        "vlbiflow_mesh_runs",
        "gauge",
        "Archived runs by test, status and failure reason",
    );
    for (test, status, reason, n) in &counts {
        let _ = writeln!(
            out,
            "vlbiflow_mesh_runs{{test=\"{}\",status=\"{}\",reason=\"{}\"}} {n}",
            label(test),
            label(status),
            label(reason)
        );
    }
    help(
        &mut out,
        "vlbiflow_mesh_pending_runs",
        "gauge",
        "Planned runs awaiting an outcome",
    );
    let _ = writeln!(out, "vlbiflow_mesh_pending_runs {pending}");
    help(
        &mut out,
        "vlbiflow_mesh_alerts_active",
        "gauge",
        "Alerts raised and not cleared",
    );
    let _ = writeln!(out, "vlbiflow_mesh_alerts_active {}", active.len());
    help(
        &mut out,
        "vlbiflow_mesh_agent_last_seen_seconds",
        "gauge",
        "Last contact of each agent",
    );
    for (name, seen, _, _) in &agents {
        let _ = writeln!(
            out,
            "vlbiflow_mesh_agent_last_seen_seconds{{agent=\"{}\"}} {}",
            label(name),
            *seen as f64 / 1000.0
        );
    }
    Ok(out)
}

pub(super) async fn metrics(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    reply(blocking(move || metrics_text(&s)).await, |t| {
        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], t).into_response()
    })
}
