//! The listener on TLS over real loopback TCP, with a CA and a server certificate made by rcgen at
//! test time: requests are served, a client that does not trust the CA is refused, and the limits
//! hold for TLS connections (handshake deadline, header-read timeout, connection cap).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use vlbiflow_http::{serve_with_tls, Limits, Tls};

/// A generous bound on any single wait: a test that hits it fails rather than hanging.
const BOUND: Duration = Duration::from_secs(60);

/// A CA and a certificate for 127.0.0.1 and localhost signed by it: (CA PEM, server chain PEM, key PEM).
fn make_certs() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "vlbiflow test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

struct Server {
    addr: SocketAddr,
    rt: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            self.rt.block_on(t).unwrap();
        }
    }
}

fn start(limits: Limits, cert: &str, key: &str) -> Server {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let tls = Tls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    let app = axum::Router::new().route("/hello", get(|| async { "hello over TLS\n" }));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = rt.spawn(serve_with_tls(listener, app, limits, Some(tls), async {
        let _ = rx.await;
    }));
    Server {
        addr,
        rt,
        stop: Some(tx),
        task: Some(task),
    }
}

/// Reads until the server closes (a reset counts as closed); panics past [`BOUND`].
async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(BOUND, s.read(&mut buf)).await {
            Err(_) => panic!("still open after {BOUND:?}"),
            Ok(Ok(0)) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(_)) => return out,
        }
    }
}

#[test]
fn serves_over_tls_to_a_client_that_trusts_the_ca() {
    let (ca, cert, key) = make_certs();
    let srv = start(Limits::DEFAULT, &cert, &key);
    let cfg = client_config(&ca);
    let answer = srv.rt.block_on(async {
        let tcp = TcpStream::connect(srv.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut s = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .unwrap();
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        read_until_closed(&mut s).await
    });
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("hello over TLS\n"), "{answer}");
}

#[test]
fn a_client_that_does_not_trust_the_ca_is_refused() {
    let (_, cert, key) = make_certs();
    let (other_ca, _, _) = make_certs();
    let srv = start(Limits::DEFAULT, &cert, &key);
    let err = srv.rt.block_on(async {
        let tcp = TcpStream::connect(srv.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        tokio_rustls::TlsConnector::from(client_config(&other_ca))
            .connect(name, tcp)
            .await
            .unwrap_err()
    });
    assert!(err.to_string().contains("invalid peer certificate"), "{err}");
}

#[test]
fn a_stalled_handshake_and_half_sent_headers_are_closed_and_others_served() {
    let (ca, cert, key) = make_certs();
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        tls_handshake_timeout: Duration::from_millis(300),
        ..Limits::DEFAULT
    };
    let srv = start(limits, &cert, &key);
    let cfg = client_config(&ca);
    srv.rt.block_on(async {
        // Connected, no ClientHello: closed by the handshake deadline.
        let mut silent = TcpStream::connect(srv.addr).await.unwrap();
        // Handshake done, request headers never finished: closed by the header-read timeout.
        let tcp = TcpStream::connect(srv.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut half = tokio_rustls::TlsConnector::from(cfg.clone())
            .connect(name.clone(), tcp)
            .await
            .unwrap();
        half.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        // Meanwhile a complete request is served.
        let tcp = TcpStream::connect(srv.addr).await.unwrap();
        let mut ok = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .unwrap();
        ok.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_until_closed(&mut ok).await;
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        assert!(read_until_closed(&mut silent).await.is_empty());
        let rest = String::from_utf8_lossy(&read_until_closed(&mut half).await).into_owned();
        assert!(!rest.contains("hello over TLS"), "{rest}");
    });
}

#[test]
fn the_connection_cap_counts_tls_connections() {
    let (_, cert, key) = make_certs();
    let limits = Limits {
        max_connections: 2,
        ..Limits::DEFAULT
    };
    let srv = start(limits, &cert, &key);
    srv.rt.block_on(async {
        // Two connections in their handshake hold both places: the third is closed at once.
        let _a = TcpStream::connect(srv.addr).await.unwrap();
        let _b = TcpStream::connect(srv.addr).await.unwrap();
        let mut c = TcpStream::connect(srv.addr).await.unwrap();
        assert!(read_until_closed(&mut c).await.is_empty());
    });
}
