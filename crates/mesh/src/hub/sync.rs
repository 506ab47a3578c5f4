//! The agents' exchange (`POST` [`SYNC_PATH`]): authenticated reports and counters in, archived, fed to
//! the ledger and the alerts; the hub's clock and, when it changed, the configuration back.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::access::{host_is_loopback, write_refusal};
use super::http::{blocking, text};
use super::state::{lock, store_alerts, Shared};
use crate::agent::{SyncRequest, SyncResponse, SYNC_PATH};
use crate::auth::{Headers, HOST_HEADER, MAC_HEADER, NONCE_HEADER, TIME_HEADER};
use crate::report::{Outcome, RunReport};
use crate::timespec::{now_ms, Ms};

pub(super) async fn sync(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = now_ms();
    if let Some(why) = write_refusal(&headers) {
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, why.into());
    }
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let verified = match &s.verifier {
        Some(v) => {
            let auth = Headers {
                host: h(HOST_HEADER),
                time: h(TIME_HEADER),
                nonce: h(NONCE_HEADER),
                mac: h(MAC_HEADER),
            };
            match lock(v).verify("POST", SYNC_PATH, &auth, &body, now) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(target: "vlbiflow::mesh", peer = %peer, error = %e, "agent exchange from {peer} refused: {e}");
                    return text(StatusCode::UNAUTHORIZED, e.to_string());
                }
            }
        }
        None if !peer.ip().is_loopback() || !host_is_loopback(&headers) => {
            return text(
                StatusCode::UNAUTHORIZED,
                "this hub has no token and serves loopback only".into(),
            );
        }
        None => None,
    };
    let req: SyncRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("invalid exchange: {e}")),
    };
    // The host a request speaks for is the one its key authenticated, never the body's claim.
    if let Some(v) = &verified {
        if v.identity.host() != req.host {
            tracing::warn!(
                target: "vlbiflow::mesh",
                peer = %peer,
                host = %v.identity.host(),
                named = ?req.host,
                "agent exchange from {peer} refused: signed as {} but names {:?}",
                v.identity.host(),
                req.host
            );
            return text(
                StatusCode::FORBIDDEN,
                format!(
                    "the request is signed as host {} but names {:?}",
                    v.identity.host(),
                    req.host
                ),
            );
        }
    }
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
    if let (Some(v), Some(verified)) = (&s.verifier, &verified) {
        let t = now_ms();
        let mac = lock(v)
            .keys
            .key_for(verified.identity.host())
            .map(|(k, _)| k.sign_response(SYNC_PATH, &verified.mac, t, &body));
        if let Some(mac) = mac {
            if let (Ok(tv), Ok(mv)) = (t.to_string().parse(), mac.to_hex().as_str().parse()) {
                out.headers_mut().insert(TIME_HEADER, tv);
                out.headers_mut().insert(MAC_HEADER, mv);
            }
        }
    }
    out
}

fn accept(s: &Shared, mut req: SyncRequest, now: Ms) -> Result<SyncResponse, String> {
    // Only outcomes of runs the agent sources, reported as that agent's (never as the hub's or
    // another host's).
    req.reports.retain(|r| r.run.src == req.host);
    for r in &mut req.reports {
        r.reported_by.clone_from(&req.host);
    }
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
    store_alerts(&mut lock(&s.archive), &events);
    Ok(SyncResponse {
        accepted: true,
        config: (req.config_hash != s.agent_cfg.hash).then(|| s.agent_cfg.text.clone()),
        hub_time: now,
    })
}
