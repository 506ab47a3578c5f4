//! The listener: accept loop with a connection cap, optional TLS (rustls) with a handshake deadline,
//! hyper HTTP/1 connections with a header-read timeout, graceful shutdown.

use std::future::Future;
use std::path::Path;
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
    /// With TLS: a connection whose handshake is not complete this long after it is accepted is
    /// closed (the header-read timeout starts after the handshake).
    pub tls_handshake_timeout: Duration,
}

impl Limits {
    /// 5 s for the request headers, 64 connections, 5 s to finish at shutdown, 5 s for a TLS handshake.
    pub const DEFAULT: Limits = Limits {
        header_read_timeout: Duration::from_secs(5),
        max_connections: 64,
        shutdown_grace: Duration::from_secs(5),
        tls_handshake_timeout: Duration::from_secs(5),
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
    serve_with_tls(listener, app, limits, None, stop).await
}

/// [`serve`], on TLS when `tls` is given: the connection cap counts connections in their handshake
/// too, and a handshake not done within [`Limits::tls_handshake_timeout`] closes the connection.
pub async fn serve_with_tls<F>(listener: TcpListener, app: Router, limits: Limits, tls: Option<Tls>, stop: F)
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
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let svc = TowerToHyperService::new(svc);
            match tls {
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    let _ = watcher.watch(conn).await;
                }
                Some(tls) => {
                    let handshake = tls.acceptor.accept(stream);
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(limits.tls_handshake_timeout, handshake).await
                    {
                        let conn = builder.serve_connection(TokioIo::new(stream), svc);
                        let _ = watcher.watch(conn).await;
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await;
}

/// The listener's TLS: a certificate chain and its private key (PEM), served with rustls (ring
/// provider, TLS 1.2 and 1.3, HTTP/1.1 by ALPN).
#[derive(Clone)]
pub struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// Why a certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

impl Tls {
    /// From PEM files: `cert` the server's certificate first, then its intermediates; `key` its
    /// private key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let c = std::fs::read(cert).map_err(|e| TlsError(format!("--tls-cert {}: {e}", cert.display())))?;
        let k = std::fs::read(key).map_err(|e| TlsError(format!("--tls-key {}: {e}", key.display())))?;
        Tls::from_pem(&c, &k).map_err(|e| TlsError(format!("{} / {}: {e}", cert.display(), key.display())))
    }

    /// From PEM text (as [`Tls::from_pem_files`]).
    pub fn from_pem(cert: &[u8], key: &[u8]) -> Result<Tls, TlsError> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError(format!("certificate: {e}")))?;
        if chain.is_empty() {
            return Err(TlsError("certificate: no CERTIFICATE in the PEM file".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError(format!("private key: {e}")))?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut cfg = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| TlsError(format!("certificate and key: {e}")))?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
        })
    }
}
