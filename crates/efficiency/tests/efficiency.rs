//! Transport-efficiency tests on 127.0.0.1 against an in-process responder: the whole protocol, every
//! receive path, alternating order, summaries, and refusals that name what was wrong.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use vlbiflow_efficiency::{run_series, with_service, EffEvent, EffParams, EffSetup};
use vlbiflow_net::control::ControlConn;
use vlbiflow_net::proto::{Reply, Request, PROTOCOL_VERSION};
use vlbiflow_net::{Client, Responder, ResponderConfig};
use vlbiflow_rx::Transport;

struct Running {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

fn start_responder() -> Running {
    let mut cfg = with_service(ResponderConfig::new("127.0.0.1:0".parse().unwrap()));
    cfg.idle_timeout = Duration::from_secs(10);
    let r = Responder::bind(cfg).unwrap();
    let addr = r.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let handle = thread::spawn(move || r.run(s, &|_| {}).unwrap());
    Running {
        addr,
        stop,
        handle: Some(handle),
    }
}

fn params(streams: u32) -> EffParams {
    EffParams {
        setup: EffSetup {
            transport: Transport::Udp,
            streams,
            size: 8232,
            duration_ms: 300,
            recv_buffer: Some(16 << 20),
        },
        // Paced well below what loopback carries, so the counts are exact on a busy machine.
        rate_bps: Some(200e6),
        gso: 0,
        send_buffer: 4 << 20,
        tcp_congestion: None,
    }
}

#[test]
fn every_transport_alternating_with_summaries() {
    let r = start_responder();
    let mut c = Client::connect(r.addr, Duration::from_secs(5)).unwrap();
    let offered = c.eff_transports().unwrap();
    assert_eq!(offered.len(), Transport::ALL.len());
    for a in &offered {
        if matches!(a.transport, Transport::Udp | Transport::UdpGro | Transport::Tcp) {
            assert_eq!(a.unavailable, None, "{a:?}");
        }
    }
    let all = [Transport::Udp, Transport::Uring, Transport::Tcp];
    let stop = AtomicBool::new(false);
    let mut order = Vec::new();
    let report = run_series(&mut c, &params(3), &all, 2, &stop, &mut |e| match e {
        EffEvent::Starting { transport, repeat } => order.push((repeat, transport)),
        EffEvent::Failed { error, .. } => panic!("{error}"),
        EffEvent::Finished(_) => {}
    })
    .unwrap();
    let measured: Vec<Transport> = all
        .into_iter()
        .filter(|t| !report.unavailable.iter().any(|u| u.transport == *t))
        .collect();
    // Repeat 0 in the given order, repeat 1 reversed.
    let mut want: Vec<(u32, Transport)> = measured.iter().map(|&t| (0, t)).collect();
    want.extend(measured.iter().rev().map(|&t| (1, t)));
    assert_eq!(order, want);
    assert_eq!(report.runs.len(), 2 * measured.len());
    for run in &report.runs {
        let t = run.params.setup.transport;
        assert!(run.metrics.same_host);
        if t == Transport::Tcp {
            assert_eq!(run.remote.bytes, run.send.bytes, "TCP delivers every byte");
            assert_eq!(run.send.sent.len(), 3);
            assert!(run
                .send
                .tcp_congestion
                .as_deref()
                .is_some_and(|cc| !cc.is_empty()));
        } else {
            let sent: u64 = run.send.sent.iter().sum();
            assert_eq!(run.send.sent.len(), 3);
            assert!(sent > 0 && run.remote.received <= sent, "{t}");
            assert_eq!(run.remote.bytes, run.remote.received * 8232, "{t}");
            // What the trackers saw agrees with the counts: nothing reordered or doubled on loopback.
            assert_eq!((run.remote.out_of_order, run.remote.duplicates), (0, 0), "{t}");
            assert!(run.metrics.loss >= 0.0 && run.metrics.loss <= 1.0);
        }
        assert!(
            run.remote.usage.thread.user_s + run.remote.usage.thread.system_s > 0.0,
            "{t}: no CPU"
        );
        assert!(run.remote.usage.energy.is_some() || run.remote.usage.energy_note.is_some());
    }
    assert_eq!(report.summary.len(), measured.len());
    assert!(report.summary.iter().all(|s| s.repeats == 2));
    let lines = vlbiflow_efficiency::table_lines(&report);
    assert!(lines[0].starts_with("transport"));
    assert_eq!(lines[1].split_whitespace().next(), Some("udp"));
}

#[test]
fn bad_setups_are_refused_with_the_field_and_the_session_goes_on() {
    let r = start_responder();
    let mut conn = ControlConn::connect(r.addr, Duration::from_secs(5)).unwrap();
    conn.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        software: "test".into(),
        token: None,
    })
    .unwrap();
    let hello: Reply = conn.recv(Duration::from_secs(5), "hello", "reply").unwrap();
    assert!(matches!(hello, Reply::Hello { .. }));
    for (streams, size, field) in [(0, 8232, "streams"), (2, 8, "size"), (100_000, 8232, "streams")] {
        let mut p = params(streams);
        p.setup.size = size;
        conn.send(&Request::EffStart(p.setup)).unwrap();
        match conn.recv(Duration::from_secs(5), "reply", "reply").unwrap() {
            Reply::Error { message } => assert!(message.contains(field), "{message}"),
            other => panic!("accepted: {other:?}"),
        }
    }
    // The session is still usable.
    conn.send(&Request::EffProbe).unwrap();
    assert!(matches!(
        conn.recv(Duration::from_secs(5), "reply", "reply").unwrap(),
        Reply::EffTransports { .. }
    ));
    // A client-side check refuses an impossible GSO before anything is sent.
    let mut c = Client::connect(r.addr, Duration::from_secs(5)).unwrap();
    let mut p = params(1);
    p.gso = 16;
    let e = vlbiflow_efficiency::run_test(&mut c, &p, &AtomicBool::new(false)).unwrap_err();
    assert!(e.to_string().contains("65507"), "{e}");
}
