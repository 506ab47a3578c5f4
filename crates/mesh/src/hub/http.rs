//! Replies shared by the handlers: plain text, JSON, SVG, work on the blocking pool; the pair query.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

pub(super) fn text(status: StatusCode, msg: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], msg).into_response()
}

/// The reply to work run with [`blocking`]: `ok` of its value, 503 with the archive's error, or the
/// internal error.
pub(super) fn reply<T>(res: Result<Result<T, String>, Response>, ok: impl FnOnce(T) -> Response) -> Response {
    match res {
        Ok(Ok(v)) => ok(v),
        Ok(Err(e)) => text(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(r) => r,
    }
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, format!("internal error: {e}")))
}

pub(super) fn json<T: Serialize>(v: &T) -> Response {
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(v)).into_response()
}

pub(super) fn svg(body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// Query of pair pages and plots.
#[derive(Debug, Deserialize)]
pub struct PairQuery {
    pub(super) src: String,
    pub(super) dst: String,
    pub(super) metric: Option<String>,
    pub(super) hours: Option<f64>,
}
