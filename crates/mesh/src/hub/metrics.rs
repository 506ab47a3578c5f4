//! `/metrics` in the Prometheus text format (the daemons' common endpoint of `vlbiflow-http`): newest
//! figures per pair and test in base units, run counts, pending runs, active alerts, agents' last contact.

use std::fmt;
use std::sync::Arc;

use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use vlbiflow_http::{Asker, Families, MetricsEndpoint};

use super::access::may_read;
use super::matrix::matrix;
use super::state::{lock, Shared};

/// The archive's figures exported, their family and the factor into base units.
const FIGURES: [(&str, &str, &str, f64); 4] = [
    (
        "throughput_mbps",
        "vlbiflow_mesh_throughput_bytes_per_second",
        "Newest throughput of the pair, bytes/s",
        1e6 / 8.0,
    ),
    (
        "loss_percent",
        "vlbiflow_mesh_loss_ratio",
        "Newest loss of the pair, a fraction 0-1",
        0.01,
    ),
    (
        "rtt_ms",
        "vlbiflow_mesh_rtt_seconds",
        "Newest round-trip time of the pair, seconds",
        1e-3,
    ),
    (
        "capacity_mbps",
        "vlbiflow_mesh_capacity_bytes_per_second",
        "Newest bottleneck capacity of the pair, bytes/s",
        1e6 / 8.0,
    ),
];

/// One figure of a pair: (src, dst, test, metric, value, planned start in Unix seconds).
type Figure = (String, String, String, String, f64, f64);

/// The hub's state at one scrape; `None`: the archive could not be read.
#[derive(Debug)]
struct Snapshot(Option<Mesh>);

#[derive(Debug)]
struct Mesh {
    figures: Vec<Figure>,
    counts: Vec<(String, String, String, i64)>,
    pending: usize,
    alerts: usize,
    agents: Vec<(String, f64)>,
}

fn snapshot(s: &Shared) -> Result<Mesh, String> {
    let m = matrix(s)?;
    let pending = lock(&s.ledger).pending();
    let mut a = lock(&s.archive);
    let counts = a.counts(None, None).map_err(|e| e.to_string())?;
    let alerts = a.active_alerts().map_err(|e| e.to_string())?.len();
    let agents = a.agents().map_err(|e| e.to_string())?;
    drop(a);
    let mut figures = Vec::new();
    for c in &m.cells {
        for (test, ms) in &c.by_test {
            for (metric, v) in ms {
                figures.push((
                    c.src.clone(),
                    c.dst.clone(),
                    test.clone(),
                    metric.clone(),
                    v.value,
                    v.t as f64 / 1000.0,
                ));
            }
        }
    }
    Ok(Mesh {
        figures,
        counts,
        pending,
        alerts,
        agents: agents
            .into_iter()
            .map(|(name, seen, _, _)| (name, seen as f64 / 1000.0))
            .collect(),
    })
}

impl Collector for Snapshot {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut f = Families(encoder);
        f.gauge1(
            "vlbiflow_mesh_archive_up",
            "1 if the archive could be read for this scrape (0: the other mesh families are missing).",
            u64::from(self.0.is_some()),
        )?;
        let Some(m) = &self.0 else { return Ok(()) };
        let pair = |x: &Figure| [("src", x.0.clone()), ("dst", x.1.clone()), ("test", x.2.clone())];
        // One series per test: a pair's loss from a sweep and from a latency test are two figures.
        for (key, name, help, factor) in FIGURES {
            f.gauge(
                name,
                help,
                m.figures
                    .iter()
                    .filter(|x| x.3 == key)
                    .map(|x| (pair(x), x.4 * factor)),
            )?;
        }
        f.gauge(
            "vlbiflow_mesh_result_timestamp_seconds",
            "Planned start of the newest result of the pair, test and metric (the archive's name of the figure), Unix seconds",
            m.figures.iter().map(|x| {
                (
                    [
                        ("src", x.0.clone()),
                        ("dst", x.1.clone()),
                        ("test", x.2.clone()),
                        ("metric", x.3.clone()),
                    ],
                    x.5,
                )
            }),
        )?;
        f.gauge(
            "vlbiflow_mesh_runs",
            "Archived runs by test, status and failure reason",
            m.counts.iter().map(|(t, st, r, n)| {
                (
                    [
                        ("test", t.as_str()),
                        ("status", st.as_str()),
                        ("reason", r.as_str()),
                    ],
                    *n,
                )
            }),
        )?;
        f.gauge1(
            "vlbiflow_mesh_pending_runs",
            "Planned runs awaiting an outcome",
            m.pending as u64,
        )?;
        f.gauge1(
            "vlbiflow_mesh_alerts_active",
            "Alerts raised and not cleared",
            m.alerts as u64,
        )?;
        f.gauge(
            "vlbiflow_mesh_agent_last_seen_timestamp_seconds",
            "Last contact of each agent, Unix seconds",
            m.agents.iter().map(|(a, t)| ([("agent", a.as_str())], *t)),
        )
    }
}

/// `GET /metrics`: readable with the read-only metrics token when one is set, and as the pages are.
pub(super) fn router(s: Arc<Shared>, metrics_token: Option<String>) -> Router {
    let (a, c) = (s.clone(), s);
    MetricsEndpoint::new(metrics_token).router(
        move |r: &Asker<'_>| may_read(&a, &r.peer, r.headers),
        move || {
            let s = c.clone();
            async move {
                let snap = tokio::task::spawn_blocking(move || snapshot(&s).ok())
                    .await
                    .ok()
                    .flatten();
                Box::new(Snapshot(snap)) as Box<dyn Collector>
            }
        },
    )
}
