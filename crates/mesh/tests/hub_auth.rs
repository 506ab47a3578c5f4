//! The hub's agent exchange and pages on loopback, with per-host keys: a request is accepted once; a
//! key speaks only for its host; an agent refuses a recorded answer replayed to it (and keeps its
//! results); agents get the configuration without the webhook; pages need the token on loopback too;
//! a `text/plain` POST is refused.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::log::log;

use vlbiflow_mesh::agent::{HubClient, SyncRequest, SyncResponse, SYNC_PATH};
use vlbiflow_mesh::auth::{Key, Request, HOST_HEADER, MAC_HEADER, NONCE_HEADER, TIME_HEADER};
use vlbiflow_mesh::config::Config;
use vlbiflow_mesh::hub::{spawn, HubHandle, HubOptions};
use vlbiflow_mesh::timespec::now_ms;

const KEY_A: &str = "host-a-key-0123456789";
const READ: &str = "reader-token-0123456789";

fn config() -> Arc<Config> {
    let mut t = String::from("[mesh]\nname = \"t\"\n");
    for (i, h) in ["A", "B"].iter().enumerate() {
        t += &format!("[[host]]\nname = \"{h}\"\naddress = \"127.0.0.{}\"\n", i + 1);
    }
    t += "[[test]]\nname = \"lat\"\nkind = \"latency\"\ninterval = \"1h\"\nslot = \"5s\"\n";
    t += "[webhook]\nurl = \"https://hooks.example.org/services/T0/B0/webhook-secret\"\n";
    Arc::new(Config::parse(&t).unwrap())
}

fn hub(dir: &std::path::Path) -> HubHandle {
    let opts = HubOptions {
        config: config(),
        listen: "127.0.0.1:0".parse().unwrap(),
        archive: dir.join("mesh.sqlite").display().to_string(),
        token: None,
        host_keys: vec![("A".into(), Key::from_token(KEY_A))],
        read_token: Some(READ.into()),
        public_read: false,
        metrics_token: None,
        tls: None,
    };
    spawn(opts, Arc::new(AtomicBool::new(false))).unwrap()
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
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

/// A signed exchange: the answer's status, time and MAC headers, body; the request's MAC.
struct Sent {
    status: u16,
    time: Option<String>,
    mac: Option<String>,
    body: Vec<u8>,
    request_mac: blake3::Hash,
}

fn post(base: &str, key: &Key, signer: &str, req: &SyncRequest, nonce: &str, time: i64) -> Sent {
    let body = serde_json::to_vec(req).unwrap();
    let mac = key.sign_request(&Request {
        method: "POST",
        path: SYNC_PATH,
        host: signer,
        time,
        nonce,
        body: &body,
    });
    let headers = vec![
        (HOST_HEADER.to_string(), signer.to_string()),
        (TIME_HEADER.to_string(), time.to_string()),
        (NONCE_HEADER.to_string(), nonce.to_string()),
        (MAC_HEADER.to_string(), mac.to_hex().to_string()),
    ];
    let mut r = http()
        .post(format!("{base}{SYNC_PATH}"))
        .header("content-type", "application/json");
    for (n, v) in &headers {
        r = r.header(n, v);
    }
    let mut resp = r.send(&body[..]).unwrap();
    let h = |n: &str| resp.headers().get(n).map(|v| v.to_str().unwrap().to_string());
    let (t, m) = (h(TIME_HEADER), h(MAC_HEADER));
    Sent {
        status: resp.status().as_u16(),
        time: t,
        mac: m,
        body: resp.body_mut().read_to_vec().unwrap(),
        request_mac: mac,
    }
}

#[test]
fn exchanges_are_accepted_once_and_only_for_their_host() {
    let dir = tempfile::tempdir().unwrap();
    log();
    let h = hub(dir.path());
    let base = format!("http://{}", h.addr);
    let ka = Key::from_token(KEY_A);
    let nonce = "00112233445566778899aabbccddeeff";
    let t = now_ms();

    // A, signed with its key: accepted, the configuration comes without the webhook.
    let first = post(&base, &ka, "A", &request("A"), nonce, t);
    assert_eq!(first.status, 200, "{}", String::from_utf8_lossy(&first.body));
    let resp: SyncResponse = serde_json::from_slice(&first.body).unwrap();
    assert!(resp.accepted);
    let cfg = resp.config.expect("the configuration for a new agent");
    assert!(!cfg.contains("webhook"), "{cfg}");
    Config::parse(&cfg).unwrap();
    ka.verify_response(
        SYNC_PATH,
        &first.request_mac,
        first.time.as_deref(),
        first.mac.as_deref(),
        &first.body,
        now_ms(),
    )
    .unwrap();

    // The same request again: refused as a replay.
    let again = post(&base, &ka, "A", &request("A"), nonce, t);
    assert_eq!(again.status, 401);
    assert!(String::from_utf8_lossy(&again.body).contains("replayed"));

    // A's key signing as B, or naming B in the body: refused.
    let as_b = post(
        &base,
        &ka,
        "B",
        &request("B"),
        "ffeeddccbbaa99887766554433221100",
        t,
    );
    assert_eq!(as_b.status, 401, "{}", String::from_utf8_lossy(&as_b.body));
    let body_b = post(
        &base,
        &ka,
        "A",
        &request("B"),
        "0f0e0d0c0b0a09080706050403020100",
        t,
    );
    assert_eq!(body_b.status, 403, "{}", String::from_utf8_lossy(&body_b.body));

    // The same body as text/plain without authentication (what a web page can send): refused.
    let mut r = http()
        .post(format!("{base}{SYNC_PATH}"))
        .header("content-type", "text/plain")
        .send(&serde_json::to_vec(&request("A")).unwrap()[..])
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        415,
        "{}",
        r.body_mut().read_to_string().unwrap()
    );

    // Pages and the API need the token from loopback too.
    let status = |auth: Option<&str>| {
        let mut g = http().get(format!("{base}/api/v1/status"));
        if let Some(a) = auth {
            g = g.header("authorization", a);
        }
        g.call().unwrap().status().as_u16()
    };
    assert_eq!(status(None), 401);
    assert_eq!(status(Some("Bearer wrong-token-0123456789")), 401);
    assert_eq!(status(Some(&format!("Bearer {READ}"))), 200);
    // A host key is no reader's token.
    assert_eq!(status(Some(&format!("Bearer {KEY_A}"))), 401);

    // A recorded answer replayed to the agent's next request: the agent refuses it.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        first.body.len()
    );
    answer += &format!(
        "{TIME_HEADER}: {}\r\n{MAC_HEADER}: {}\r\n\r\n",
        first.time.unwrap(),
        first.mac.unwrap()
    );
    let mut answer = answer.into_bytes();
    answer.extend_from_slice(&first.body);
    let server = std::thread::spawn(move || {
        let (mut c, _) = fake.accept().unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        // Read the headers and the body (the request is small), then answer.
        loop {
            let n = c.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got);
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + len {
                    break;
                }
            }
            if n == 0 {
                break;
            }
        }
        c.write_all(&answer).unwrap();
    });
    let client = HubClient::new(&format!("http://{fake_addr}"), Some(ka.clone()));
    let err = client.sync(&request("A")).unwrap_err();
    assert!(err.contains("answer refused"), "{err}");
    server.join().unwrap();
    // The real hub answers the client, and the client accepts that answer.
    let client = HubClient::new(&base, Some(ka));
    assert!(client.sync(&request("A")).unwrap().accepted);

    h.stop();
    let log = String::from_utf8_lossy(&log().lock().unwrap()).into_owned();
    assert!(
        log.contains("refused: unauthenticated: replayed request"),
        "{log}"
    );
    assert!(!log.contains("webhook-secret"), "{log}");
}
