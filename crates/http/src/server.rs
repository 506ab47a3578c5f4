//! The listener: accept loop with a connection cap, hyper HTTP/1 connections with a header-read timeout,
//! graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// The listener's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A connection whose request headers are not complete this long after it starts waiting for them
    /// is closed.
    pub header_read_timeout: Duration,
    /// Open connections at most; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// After the stop signal, how long open connections may take to finish their requests.
    pub shutdown_grace: Duration,
}

impl Limits {
    /// 5 s for the request headers, 64 connections, 5 s to finish at shutdown.
    pub const DEFAULT: Limits = Limits {
        header_read_timeout: Duration::from_secs(5),
        max_connections: 64,
        shutdown_grace: Duration::from_secs(5),
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Serves `app` on `listener` until `stop` completes, then lets open connections finish their requests
/// (bounded by [`Limits::shutdown_grace`]) and returns. Requests carry [`ConnectInfo`]`<SocketAddr>` with
/// the client's address, as `axum::serve` with `into_make_service_with_connect_info` gives.
pub async fn serve<F>(listener: TcpListener, app: Router, limits: Limits, stop: F)
where
    F: Future<Output = ()> + Send,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => {
                    // EMFILE and the like: back off briefly rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Over the cap: closed at once.
            drop(stream);
            continue;
        };
        let svc = app
            .clone()
            .map_request(move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            });
        let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await;
}
