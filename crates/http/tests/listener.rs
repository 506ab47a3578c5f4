//! The listener and the metrics endpoint over real loopback TCP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use vlbiflow_http::{serve, Asker, Families, Limits, MetricsEndpoint};

/// A generous bound on any single read: a test that hits it fails rather than hanging.
const BOUND: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Demo;

impl Collector for Demo {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut f = Families(encoder);
        f.counter(
            "vlbiflow_demo_bytes_total",
            "Bytes of the demo.",
            [([("stream", "a\"b")], 7u64)],
        )?;
        f.gauge1("vlbiflow_demo_ratio", "A ratio.", 0.5f64)
    }
}

struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// The endpoint with `token`, plus `/other` that admits no one: the metrics token must not open it.
fn start(limits: Limits, token: Option<&str>) -> Server {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let app = MetricsEndpoint::new(token.map(str::to_owned))
        .router(
            |_: &Asker<'_>| false,
            || async { Box::new(Demo) as Box<dyn Collector> },
        )
        .route(
            "/other",
            get(|| async { (axum::http::StatusCode::UNAUTHORIZED, "no\n") }),
        );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        rt.block_on(serve(listener, app, limits, async {
            let _ = rx.await;
        }));
    });
    Server {
        addr,
        stop: Some(tx),
        thread: Some(thread),
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    s
}

/// Sends one request (closing the connection after it) and returns the whole answer.
fn get_with(addr: SocketAddr, path: &str, auth: Option<&str>) -> String {
    let mut s = connect(addr);
    let auth = auth.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Reads until the server closes; a reset counts as closed. Panics past [`BOUND`].
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("still open after {BOUND:?}: {e}"),
        }
    }
}

#[test]
fn metrics_have_build_process_and_daemon_families() {
    let srv = start(Limits::DEFAULT, None);
    let r = get_with(srv.addr, "/metrics", None);
    // Without a metrics token the daemon's rule decides; this one admits no one.
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    drop(srv);
    let srv = start(Limits::DEFAULT, Some("metrics-secret"));
    let r = get_with(srv.addr, "/metrics", Some("metrics-secret"));
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("text/plain; version=0.0.4"), "{r}");
    for line in [
        "# TYPE vlbiflow_build_info gauge\n",
        &format!(
            "vlbiflow_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        ),
        "# TYPE process_cpu_seconds_total counter\n",
        "# TYPE process_resident_memory_bytes gauge\n",
        "# TYPE process_open_fds gauge\n",
        "# TYPE process_start_time_seconds gauge\n",
        "# HELP vlbiflow_demo_bytes_total Bytes of the demo\n",
        "# TYPE vlbiflow_demo_bytes_total counter\n",
        "vlbiflow_demo_bytes_total{stream=\"a\\\"b\"} 7\n",
        "vlbiflow_demo_ratio 0.5\n",
    ] {
        assert!(r.contains(line), "{line:?} missing from\n{r}");
    }
    // A wrong token, and the metrics token anywhere else, are refused.
    assert!(get_with(srv.addr, "/metrics", Some("metrics-secreT")).starts_with("HTTP/1.1 401"));
    assert!(get_with(srv.addr, "/other", Some("metrics-secret")).starts_with("HTTP/1.1 401"));
}

#[test]
fn half_sent_requests_are_closed_after_the_header_timeout() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(500),
        ..Limits::DEFAULT
    };
    let srv = start(limits, Some("t"));
    let mut conns: Vec<TcpStream> = (0..30)
        .map(|_| {
            let mut s = connect(srv.addr);
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthoriz")
                .unwrap();
            s
        })
        .collect();
    for s in &mut conns {
        // Closed by the server (a 408 or nothing at all), never a metrics answer.
        let got = String::from_utf8_lossy(&read_until_closed(s)).into_owned();
        assert!(!got.contains("vlbiflow_build_info"), "{got}");
    }
    // And the listener still answers.
    assert!(get_with(srv.addr, "/metrics", Some("t")).starts_with("HTTP/1.1 200"));
}

#[test]
fn over_cap_connections_are_closed_while_one_in_cap_gets_metrics() {
    let limits = Limits {
        max_connections: 4,
        header_read_timeout: BOUND * 2,
        ..Limits::DEFAULT
    };
    let srv = start(limits, Some("t"));
    // Three idle connections and one client fill the cap (accepted in the order they connected).
    let idle: Vec<TcpStream> = (0..3).map(|_| connect(srv.addr)).collect();
    let mut client = connect(srv.addr);
    for _ in 0..5 {
        let mut over = connect(srv.addr);
        // The server may have closed it already: a failed write is as good as a refusal.
        let _ = over.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\r\n");
        assert!(
            read_until_closed(&mut over).is_empty(),
            "over the cap must get nothing"
        );
    }
    client
        .write_all(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    let got = String::from_utf8_lossy(&read_until_closed(&mut client)).into_owned();
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("vlbiflow_demo_ratio 0.5"), "{got}");
    drop(idle);
}
