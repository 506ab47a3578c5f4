//! The mesh's responder token on loopback: two agents whose responders require it (and refuse a
//! client without it) complete a bandwidth test on the hub's schedule, each sending the token to the
//! other's responder.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vlbiflow_mesh::agent::{run, AgentOptions};
use vlbiflow_mesh::archive::{Archive, Val};
use vlbiflow_mesh::config::Config;
use vlbiflow_mesh::hub::{spawn, HubOptions};

const TOKEN: &str = "mesh-responder-token-0123";
/// A generous bound on waiting for the schedule to produce a run: a test that hits it fails.
const BOUND: Duration = Duration::from_secs(90);

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn agents_whose_responders_require_the_token_complete_a_bw_test() {
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let text = format!(
        "[mesh]\nname = \"tok\"\nguard = \"PT0.2S\"\n\
         [[host]]\nname = \"A\"\naddress = \"127.0.0.1\"\nport = {pa}\n\
         [[host]]\nname = \"B\"\naddress = \"127.0.0.1\"\nport = {pb}\n\
         [[test]]\nname = \"bw\"\nkind = \"sweep\"\ninterval = \"PT3S\"\nslot = \"PT1S\"\n\
         rates = [\"100Mbps\"]\ncount = 500\n"
    );
    let cfg = Arc::new(Config::parse(&text).unwrap());
    let archive = dir.path().join("mesh.sqlite").display().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    common::log::log();
    let hub = spawn(
        HubOptions {
            config: cfg,
            listen: "127.0.0.1:0".parse().unwrap(),
            archive: archive.clone(),
            token: None,
            host_keys: Vec::new(),
            read_token: None,
            public_read: false,
            metrics_token: None,
            tls: None,
        },
        stop.clone(),
    )
    .unwrap();
    let mut agents = Vec::new();
    for name in ["A", "B"] {
        let opts = AgentOptions {
            name: name.into(),
            hub: Some(format!("http://{}", hub.addr)),
            key: None,
            ca_file: None,
            responder_token: Some(TOKEN.into()),
            state_dir: dir.path().join(name),
            listen: None,
            config: None,
            sync_every: Duration::from_millis(200),
            responder_setup: None,
            on_ready: None,
            on_pass: None,
        };
        let stop = stop.clone();
        agents.push(std::thread::spawn(move || run(&opts, stop)));
    }
    // A client without the token is refused at its hello by both responders.
    for port in [pa, pb] {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let until = Instant::now() + BOUND;
        let e = loop {
            match vlbiflow_net::Client::connect(addr, Duration::from_secs(5)) {
                Err(e) if e.to_string().contains("unauthorized") => break e,
                // not listening yet
                Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(50)),
                other => panic!("{addr}: {:?}", other.map(|_| "served without the token")),
            }
        };
        assert!(e.to_string().contains("no token"), "{e}");
    }
    // Both directions measured, on the hub's schedule.
    let until = Instant::now() + BOUND;
    let ok = loop {
        let rows = Archive::open(&archive)
            .and_then(|mut a| {
                a.query("SELECT DISTINCT src || '->' || dst FROM runs WHERE test = 'bw' AND status = 'ok' ORDER BY 1")
            })
            .unwrap_or_default();
        let pairs: Vec<String> = rows
            .into_iter()
            .filter_map(|r| match r.into_iter().next() {
                Some(Val::Text(t)) => Some(t),
                _ => None,
            })
            .collect();
        if pairs.len() == 2 || Instant::now() > until {
            break pairs;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    stop.store(true, Ordering::SeqCst);
    for a in agents {
        a.join().unwrap().unwrap();
    }
    hub.stop();
    let log = common::log::captured();
    assert_eq!(ok, ["A->B", "B->A"], "runs ok within {BOUND:?}; log:\n{log}");
    assert!(!log.contains("unauthorized"), "{log}");
}
