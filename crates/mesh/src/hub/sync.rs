//! The agents' exchange (`POST` [`SYNC_PATH`]): authenticated reports and counters in, archived, fed to
//! the ledger and the alerts; the hub's clock and, when it changed, the configuration back.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::http::{blocking, text};
use super::state::{lock, store_alerts, Shared};
use crate::agent::{SyncRequest, SyncResponse, SYNC_PATH};
use crate::auth::{MAC_HEADER, TIME_HEADER};
use crate::report::{Outcome, RunReport};
use crate::timespec::{now_ms, Ms};

pub(super) async fn sync(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = now_ms();
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    match &s.key {
        Some(k) => {
            if let Err(e) = k.verify(
                "POST",
                SYNC_PATH,
                h(TIME_HEADER).as_deref(),
                h(MAC_HEADER).as_deref(),
                &body,
                now,
            ) {
                (s.log)(&format!("agent exchange from {peer} refused: {e}"));
                return text(StatusCode::UNAUTHORIZED, e.to_string());
            }
        }
        None if !peer.ip().is_loopback() => {
            return text(
                StatusCode::UNAUTHORIZED,
                "this hub has no token and serves loopback only".into(),
            );
        }
        None => {}
    }
    let req: SyncRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("invalid exchange: {e}")),
    };
    if s.cfg.host_index(&req.host).is_none() {
        return text(
            StatusCode::FORBIDDEN,
            format!("host {:?} is not in the mesh configuration", req.host),
        );
    }
    let s2 = s.clone();
    let res = blocking(move || accept(&s2, req, now)).await;
    let resp = match res {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return text(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(r) => return r,
    };
    let body = serde_json::to_vec(&resp).unwrap_or_default();
    let mut out = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.clone(),
    )
        .into_response();
    if let Some(k) = &s.key {
        let t = now_ms();
        let mac = k.mac("RESPONSE", SYNC_PATH, t, &body);
        if let (Ok(tv), Ok(mv)) = (t.to_string().parse(), mac.parse()) {
            out.headers_mut().insert(TIME_HEADER, tv);
            out.headers_mut().insert(MAC_HEADER, mv);
        }
    }
    out
}

fn accept(s: &Shared, mut req: SyncRequest, now: Ms) -> Result<SyncResponse, String> {
    // Only outcomes of runs the agent sources.
    req.reports
        .retain(|r| r.run.src == req.host || r.reported_by == "hub");
    req.counters.retain(|c| c.host == req.host);
    {
        let mut a = lock(&s.archive);
        a.record(&req.reports, now).map_err(|e| e.to_string())?;
        a.counters(&req.counters).map_err(|e| e.to_string())?;
        a.agent_seen(&req.host, now, &req.software, &req.config_hash)
            .map_err(|e| e.to_string())?;
    }
    {
        let mut l = lock(&s.ledger);
        l.contact(&req.host, now);
        for r in &req.reports {
            l.reported(&r.run);
        }
    }
    let mut ok: Vec<&RunReport> = req
        .reports
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Ok { .. }))
        .collect();
    ok.sort_by_key(|r| r.run.start);
    let mut events = Vec::new();
    {
        let mut al = lock(&s.alerts);
        for r in ok {
            if let Outcome::Ok { metrics, .. } = &r.outcome {
                let m: Vec<(&str, f64)> = crate::config::METRICS
                    .iter()
                    .filter_map(|&n| metrics.get(n).map(|v| (n, v)))
                    .collect();
                events.extend(al.result(&r.run.src, &r.run.dst, r.ended_at.unwrap_or(r.run.start), &m));
            }
        }
    }
    store_alerts(s, &mut lock(&s.archive), &events);
    Ok(SyncResponse {
        accepted: true,
        config: (req.config_hash != s.cfg.hash).then(|| s.cfg.text.clone()),
        hub_time: now,
    })
}
