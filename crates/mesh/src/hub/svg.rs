//! Plots of a pair as SVG: a metric over time, one series per test, and the newest sweep.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::access::guard;
use super::http::{blocking, svg, text, PairQuery};
use super::state::{lock, Shared};
use crate::archive::RunFilter;
use crate::timespec::{now_ms, Ms};

pub(super) async fn plot_series(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<PairQuery>,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<String, String> {
        let metric = q.metric.clone().unwrap_or_else(|| "throughput_mbps".into());
        if !crate::config::METRICS.contains(&metric.as_str()) {
            return Err(format!("unknown metric {metric:?}"));
        }
        let now = now_ms();
        let since = now - (q.hours.unwrap_or(24.0).clamp(0.01, 24.0 * 400.0) * 3_600_000.0) as Ms;
        let rows = lock(&s.archive)
            .runs(&RunFilter {
                src: Some(q.src.clone()),
                dst: Some(q.dst.clone()),
                status: Some("ok".into()),
                since: Some(since),
                limit: Some(5000),
                ..Default::default()
            })
            .map_err(|e| e.to_string())?;
        // One series per test: a sweep's loss (at rates above the path's) and a latency test's are
        // different figures.
        let mut series: Vec<(String, Vec<(Ms, f64)>)> = Vec::new();
        for r in &rows {
            let v = match metric.as_str() {
                "throughput_mbps" => r.throughput_mbps,
                "loss_percent" => r.loss_percent,
                "rtt_ms" => r.rtt_ms,
                _ => r.capacity_mbps,
            };
            let Some(v) = v else { continue };
            match series.iter_mut().find(|(t, _)| *t == r.test) {
                Some((_, pts)) => pts.push((r.planned_start, v)),
                None => series.push((r.test.clone(), vec![(r.planned_start, v)])),
            }
        }
        series.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, pts) in &mut series {
            pts.sort_by_key(|p| p.0);
        }
        Ok(crate::plots::series_svg(
            &format!("{} -> {}: {metric}", q.src, q.dst),
            &metric,
            &series,
            now,
        ))
    })
    .await;
    match res {
        Ok(Ok(b)) => svg(b),
        Ok(Err(e)) => text(StatusCode::BAD_REQUEST, e),
        Err(r) => r,
    }
}

pub(super) async fn plot_sweep(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<PairQuery>,
) -> Response {
    guard!(s, peer, headers);
    let res = blocking(move || -> Result<String, String> {
        let mut a = lock(&s.archive);
        let pts = a
            .points(&q.src, &q.dst, now_ms() - 30 * 86_400_000)
            .map_err(|e| e.to_string())?;
        let last = pts.last().map(|p| p.1.clone());
        let latest: Vec<_> = pts
            .into_iter()
            .filter(|p| Some(&p.1) == last.as_ref())
            .map(|p| p.2)
            .collect();
        let title = match &last {
            Some(id) => format!("{} -> {}: {id}", q.src, q.dst),
            None => format!("{} -> {}", q.src, q.dst),
        };
        Ok(crate::plots::sweep_svg(&title, &latest))
    })
    .await;
    match res {
        Ok(Ok(b)) => svg(b),
        Ok(Err(e)) => text(StatusCode::BAD_REQUEST, e),
        Err(r) => r,
    }
}
