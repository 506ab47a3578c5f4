//! The hub's HTTP routes.

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use super::api::{api_alerts, api_matrix, api_results, api_runs, api_status};
use super::html::{dashboard, pair_page};
use super::state::Shared;
use super::svg::{plot_series, plot_sweep};
use super::sync::sync;
use crate::agent::SYNC_PATH;

/// Every route of the hub over the state its handlers share.
pub(super) fn router(shared: Arc<Shared>, metrics_token: Option<String>) -> Router {
    let metrics = super::metrics::router(shared.clone(), metrics_token);
    Router::new()
        .route(SYNC_PATH, post(sync))
        .route("/", get(dashboard))
        .route("/pair", get(pair_page))
        .route("/plot/series.svg", get(plot_series))
        .route("/plot/sweep.svg", get(plot_sweep))
        .route("/api/v1/status", get(api_status))
        .route("/api/v1/runs", get(api_runs))
        .route("/api/v1/results", get(api_results))
        .route("/api/v1/alerts", get(api_alerts))
        .route("/api/v1/matrix", get(api_matrix))
        .with_state(shared)
        .merge(metrics)
}
