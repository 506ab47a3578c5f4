//! The hub on TLS and the mesh's TLS clients, with a CA made at test time: an agent that trusts the
//! CA syncs over https; one that does not is refused with a clear error; alert changes reach an https
//! webhook whose CA is in `[webhook] ca_file`; a webhook whose certificate is refused makes the hub
//! give up on it (said once in the log, the URL's path redacted) instead of retrying forever.

mod common;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::log::captured;
use common::tls::Ca;
use vlbiflow_mesh::agent::{HubClient, SyncRequest};
use vlbiflow_mesh::auth::Key;
use vlbiflow_mesh::config::Config;
use vlbiflow_mesh::hub::{spawn, HubHandle, HubOptions};
use vlbiflow_mesh::tls::{read_ca_file, Tls};

const KEY_A: &str = "host-a-key-0123456789";
/// A generous bound on waits for something the hub does on its own: a test that hits it fails.
const BOUND: Duration = Duration::from_secs(60);

fn config(webhook: Option<(&str, &Path)>) -> Arc<Config> {
    let mut t = String::from("[mesh]\nname = \"t\"\n");
    for (i, h) in ["A", "B"].iter().enumerate() {
        t += &format!("[[host]]\nname = \"{h}\"\naddress = \"127.0.0.{}\"\n", i + 1);
    }
    t += "[[test]]\nname = \"lat\"\nkind = \"latency\"\ninterval = \"1h\"\nslot = \"5s\"\n";
    if let Some((url, ca)) = webhook {
        // A no-data alert after 1 s: the hub has something to deliver at once.
        t += "[[alert]]\nname = \"quiet\"\nmetric = \"rtt_ms\"\nabove = 1000\nno_data = \"1s\"\n";
        t += &format!("[webhook]\nurl = \"{url}\"\nca_file = \"{}\"\n", ca.display());
    }
    Arc::new(Config::parse(&t).unwrap())
}

fn hub(dir: &Path, cfg: Arc<Config>, tls: Option<Tls>) -> HubHandle {
    common::log::log();
    let opts = HubOptions {
        config: cfg,
        listen: "127.0.0.1:0".parse().unwrap(),
        archive: dir.join("mesh.sqlite").display().to_string(),
        token: None,
        host_keys: vec![("A".into(), Key::from_token(KEY_A))],
        read_token: None,
        public_read: false,
        metrics_token: None,
        tls,
    };
    spawn(opts, Arc::new(AtomicBool::new(false))).unwrap()
}

fn request(host: &str) -> SyncRequest {
    SyncRequest {
        host: host.into(),
        software: "test".into(),
        config_hash: String::new(),
        reports: Vec::new(),
        counters: Vec::new(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Polls `f` until it is true, panicking with `what` past [`BOUND`].
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + BOUND;
    while !f() {
        assert!(Instant::now() < until, "no {what} within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_agent_syncs_over_tls_with_the_ca_and_is_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("mesh test CA");
    let leaf = ca.leaf(&["127.0.0.1", "localhost"]);
    let tls = Tls::from_pem_files(
        &write(dir.path(), "hub.pem", &leaf.cert),
        &write(dir.path(), "hub.key", &leaf.key),
    )
    .unwrap();
    let h = hub(dir.path(), config(None), Some(tls));
    let base = format!("https://{}", h.addr);
    let text = captured();
    assert!(text.contains(&format!("on https://{}/", h.addr)), "{text}");

    let roots = read_ca_file(&write(dir.path(), "ca.pem", &ca.pem())).unwrap();
    let client = HubClient::with_ca(&base, Some(Key::from_token(KEY_A)), Some(&roots));
    let resp = client.sync(&request("A")).unwrap();
    assert!(resp.accepted);
    assert!(resp.config.is_some());

    // Mozilla's roots only: the private CA is unknown.
    let e = HubClient::new(&base, Some(Key::from_token(KEY_A)))
        .sync(&request("A"))
        .unwrap_err();
    assert!(e.contains("TLS") && e.contains("certificate"), "{e}");
    // Another CA: refused too.
    let other = read_ca_file(&write(dir.path(), "other.pem", &Ca::new("other CA").pem())).unwrap();
    let e = HubClient::with_ca(&base, Some(Key::from_token(KEY_A)), Some(&other))
        .sync(&request("A"))
        .unwrap_err();
    assert!(e.contains("TLS") && e.contains("--ca-file"), "{e}");
    // A plain-HTTP client on the TLS port gets no answer from the agent API.
    assert!(
        HubClient::new(&format!("http://{}", h.addr), Some(Key::from_token(KEY_A)))
            .sync(&request("A"))
            .is_err()
    );
}

/// An https receiver of webhook POSTs on loopback: the bodies it got.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<String>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
    _rt: tokio::runtime::Runtime,
}

fn receiver(leaf: &common::tls::Leaf) -> Receiver {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/hooks/secret-path",
        axum::routing::post(move |body: String| {
            let g = g.clone();
            async move {
                g.lock().unwrap().push(body);
                "ok"
            }
        }),
    );
    let tls = Tls::from_pem(leaf.cert.as_bytes(), leaf.key.as_bytes()).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    rt.spawn(vlbiflow_http::serve_with_tls(
        listener,
        app,
        vlbiflow_http::Limits::DEFAULT,
        Some(tls),
        async {
            let _ = rx.await;
        },
    ));
    Receiver {
        url: format!("https://{addr}/hooks/secret-path"),
        got,
        _stop: tx,
        _rt: rt,
    }
}

#[test]
fn alerts_reach_an_https_webhook_and_a_refused_certificate_stops_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("webhook test CA");
    let ca_file = write(dir.path(), "ca.pem", &ca.pem());
    let rx = receiver(&ca.leaf(&["127.0.0.1"]));

    let good = dir.path().join("good");
    std::fs::create_dir(&good).unwrap();
    let _h = hub(&good, config(Some((&rx.url, &ca_file))), None);
    wait_for("webhook delivery", || !rx.got.lock().unwrap().is_empty());
    let body: serde_json::Value = serde_json::from_str(&rx.got.lock().unwrap()[0]).unwrap();
    assert_eq!(body["rule"], "quiet", "{body}");

    // The same receiver, but the hub trusts another CA: one line, then no more tries.
    let other = write(dir.path(), "other.pem", &Ca::new("other CA").pem());
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    let _h2 = hub(&bad, config(Some((&rx.url, &other))), None);
    wait_for("the hub giving up on the webhook", || {
        captured().contains("giving up")
    });
    // (the other hubs of this process deliver or have no webhook: every webhook line is the bad one's)
    let text = captured();
    let webhook: Vec<&str> = text.lines().filter(|l| l.contains("webhook")).collect();
    assert_eq!(webhook.len(), 1, "{webhook:?}");
    assert!(webhook[0].contains("TLS"), "{}", webhook[0]);
    assert!(!webhook[0].contains("secret-path"), "{}", webhook[0]);
}
