//! The JSON API the `vlbiflow net mesh` commands read: status, runs, newest results, alerts, matrix.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::access::guard;
use super::http::{blocking, json, reply};
use super::matrix::matrix;
use super::state::{lock, Shared};
use crate::archive::{AlertEvent, RunFilter};
use crate::timespec::{now_ms, Ms};

/// Status for `vlbiflow net mesh status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// Mesh name.
    pub mesh: String,
    /// Configuration hash.
    pub config_hash: String,
    /// sqlite or postgresql.
    pub archive: String,
    /// Hub clock.
    pub now: Ms,
    /// Hub start.
    pub up_since: Ms,
    /// Runs awaiting an outcome.
    pub pending: usize,
    /// Agents: name, last contact, software, config hash (the configured hosts never seen have none).
    pub agents: Vec<AgentStatus>,
    /// Run counts: test, status, reason, count.
    pub counts: Vec<(String, String, String, i64)>,
    /// Alerts active.
    pub active_alerts: usize,
}

/// An agent as the hub sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentStatus {
    /// Host name.
    pub name: String,
    /// Last contact, ms (None: never).
    pub last_seen: Option<Ms>,
    /// Software.
    pub software: String,
    /// Runs the configuration the hub has.
    pub config_current: bool,
}

pub(super) async fn api_status(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<Status, String> {
        let pending = lock(&s.ledger).pending();
        let mut a = lock(&s.archive);
        let seen = a.agents().map_err(|e| e.to_string())?;
        let agents = s
            .cfg
            .hosts
            .iter()
            .map(|h| {
                let x = seen.iter().find(|x| x.0 == h.name);
                AgentStatus {
                    name: h.name.clone(),
                    last_seen: x.map(|x| x.1),
                    software: x.map(|x| x.2.clone()).unwrap_or_default(),
                    config_current: x.is_some_and(|x| x.3 == s.cfg.hash),
                }
            })
            .collect();
        Ok(Status {
            mesh: s.cfg.name.clone(),
            config_hash: s.cfg.hash.clone(),
            archive: a.kind().into(),
            now: now_ms(),
            up_since: s.started,
            pending,
            agents,
            counts: a.counts(None, None).map_err(|e| e.to_string())?,
            active_alerts: a.active_alerts().map_err(|e| e.to_string())?.len(),
        })
    })
    .await;
    reply(res, |v| json(&v))
}

/// Query of the runs API.
#[derive(Debug, Deserialize)]
pub struct RunsQuery {
    src: Option<String>,
    dst: Option<String>,
    test: Option<String>,
    status: Option<String>,
    since: Option<Ms>,
    until: Option<Ms>,
    limit: Option<usize>,
}

pub(super) async fn api_runs(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<RunsQuery>,
) -> Response {
    guard!(s, peer, headers);
    let f = RunFilter {
        src: q.src,
        dst: q.dst,
        test: q.test,
        status: q.status,
        since: q.since,
        until: q.until,
        limit: Some(q.limit.unwrap_or(100).min(100_000)),
    };
    reply(
        blocking(move || lock(&s.archive).runs(&f).map_err(|e| e.to_string())).await,
        |v| json(&v),
    )
}

pub(super) async fn api_results(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    reply(
        blocking(move || lock(&s.archive).latest().map_err(|e| e.to_string())).await,
        |v| json(&v),
    )
}

/// Alerts for `vlbiflow net mesh alerts`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlertsView {
    /// Raised and not cleared.
    pub active: Vec<AlertEvent>,
    /// Recent changes, newest first.
    pub events: Vec<AlertEvent>,
}

pub(super) async fn api_alerts(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<AlertsView, String> {
        let mut a = lock(&s.archive);
        Ok(AlertsView {
            active: a.active_alerts().map_err(|e| e.to_string())?,
            events: a.alert_events(200).map_err(|e| e.to_string())?,
        })
    })
    .await;
    reply(res, |v| json(&v))
}

pub(super) async fn api_matrix(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    guard!(s, peer, headers);
    reply(blocking(move || matrix(&s)).await, |v| json(&v))
}
