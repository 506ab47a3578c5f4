//! End-to-end tests on 127.0.0.1 with a real responder, real sockets and real garbage.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vlbiflow_testkit::net::connect_from;

use vlbiflow_net::control::ControlConn;
use vlbiflow_net::proto::{BwSetup, Reply, Request, PROTOCOL_VERSION};
use vlbiflow_net::wire::{realtime_ns, PacketKind, TestPacket, TestPacketRepr};
use vlbiflow_net::{BwParams, Client, LatParams, NetError, Partial, Responder, ResponderConfig, TcpParams};

struct Running {
    addr: SocketAddr,
    timestamping_live: bool,
    stop: Arc<AtomicBool>,
    counters: Arc<vlbiflow_net::ResponderCounters>,
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
    start_responder_with(|_| {})
}

fn start_responder_with(configure: impl FnOnce(&mut ResponderConfig)) -> Running {
    let mut cfg = ResponderConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.idle_timeout = Duration::from_secs(5);
    configure(&mut cfg);
    let r = Responder::bind(cfg).unwrap();
    let addr = r.local_addr();
    let timestamping_live = r.timestamping_live();
    let counters = r.counters();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let handle = thread::spawn(move || r.run(s, &|_| {}).unwrap());
    Running {
        addr,
        timestamping_live,
        stop,
        counters,
        handle: Some(handle),
    }
}

const T: Duration = Duration::from_secs(3);

#[test]
fn bw_lat_tcp_in_sequence_on_one_session() {
    let r = start_responder();
    let stop = AtomicBool::new(false);
    let mut c = Client::connect(r.addr, T).unwrap();
    assert!(c.remote_software().contains("vlbiflow"));
    for (size, wait) in [(64usize, 20.0), (1472, 10.0)] {
        let res = c.bw(&BwParams::new(size, 500, wait), &stop).unwrap();
        assert_eq!(res.local.sent, 500);
        assert_eq!(res.received + res.lost, 500, "{res:?}");
        assert_eq!(res.remote.arrivals.foreign, 0);
        // How well the sender kept its 10-20 µs schedule depends on the machine's load: a benchmark's
        // question (bench/net.sh, docs/bench-net.md), not a test's; the pacer's arithmetic is tested in
        // vlbiflow-udp.
        assert!(res.local.send_duration_s > 0.0);
        assert!(res.recv_user_rate_mbps > 0.0 && res.recv_wire_rate_mbps > res.recv_user_rate_mbps);
        assert!(res.remote.arrivals.delay.is_some());
    }
    let lat = c
        .lat(
            &LatParams {
                sizes: vec![64, 1024, 8192],
                count: 50,
                warmup: 5,
                reply_timeout: Duration::from_secs(1),
            },
            &stop,
        )
        .unwrap();
    assert_eq!(lat.points.len(), 3);
    assert!(lat.points.iter().all(|p| p.received > 0 && p.rtt_us.p50 > 0.0));
    assert_eq!(lat.echoed, 3 * 55);
    let tcp = c
        .tcp(
            &TcpParams {
                streams: 2,
                duration: Duration::from_millis(300),
                write_size: 64 << 10,
                send_buffer: Some(1 << 20),
                recv_buffer: Some(1 << 20),
            },
            &stop,
        )
        .unwrap();
    assert_eq!(tcp.bytes_sent.iter().sum::<u64>(), tcp.bytes_received);
    assert!(tcp.rate_mbps > 0.0);
    assert_eq!(tcp.local_sockets.len(), 2);
    assert!(!tcp.local_sockets[0].congestion.is_empty());
    drop(c);
    // A second session after the first.
    let mut c = Client::connect(r.addr, T).unwrap();
    let res = c.bw(&BwParams::new(1000, 100, 5.0), &stop).unwrap();
    assert_eq!(res.received + res.lost, 100);
    drop(c);
    // Stopping joins every session, so all counts are final.
    let counters = r.counters.clone();
    drop(r);
    assert_eq!(counters.tests.load(Ordering::Relaxed), 5, "{counters:?}");
    assert_eq!(counters.sessions.load(Ordering::Relaxed), 2);
}

#[test]
fn timeline_carries_every_packets_times() {
    let r = start_responder();
    let stop = AtomicBool::new(false);
    let mut c = Client::connect(r.addr, T).unwrap();
    let p = BwParams {
        timeline: true,
        gso: false,
        batch: 16,
        ..BwParams::new(1000, 300, 0.0)
    };
    let res = c.bw(&p, &stop).unwrap();
    let t = res.remote.timeline.expect("timeline asked for");
    assert_eq!((t.send_ns.len(), t.recv_ns.len()), (300, 300));
    let lost = t.recv_ns.iter().filter(|&&x| x < 0).count() as u64;
    assert_eq!(lost, res.lost);
    // Send times go forward with the sequence; each send call's return is noted, the last one
    // covering every packet.
    let sends: Vec<i64> = t.send_ns.iter().copied().filter(|&x| x >= 0).collect();
    assert!(sends.windows(2).all(|w| w[0] <= w[1]), "{sends:?}");
    let h = &res.local.handed;
    assert!(h.len() >= 300 / 16, "{h:?}");
    assert_eq!(h.last().unwrap().0, 300);
    assert!(h.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{h:?}");
    // Without asking, none.
    let res = c.bw(&BwParams::new(1000, 10, 0.0), &stop).unwrap();
    assert!(res.remote.timeline.is_none() && res.local.handed.is_empty());
}

#[test]
fn flat_out_gso_and_per_datagram_sends_deliver_the_same_numbered_datagrams() {
    let r = start_responder();
    let stop = AtomicBool::new(false);
    let mut c = Client::connect(r.addr, T).unwrap();
    for gso in [true, false] {
        // Flat out, every batch is due at once: with GSO each goes out as one super-datagram that
        // the kernel cuts into 1472-byte datagrams, each of which must still be a valid test packet.
        let p = BwParams {
            gso,
            ..BwParams::new(1472, 2000, 0.0)
        };
        let res = c.bw(&p, &stop).unwrap();
        assert_eq!(res.local.sent, 2000);
        assert_eq!(res.received + res.lost, 2000, "gso {gso}: {res:?}");
        assert!(res.received > 0, "gso {gso}: {res:?}");
        let a = &res.remote.arrivals;
        assert_eq!((a.foreign, a.duplicates), (0, 0), "gso {gso}: {a:?}");
        assert_eq!(res.local.gso_sends > 0, gso, "gso {gso}: {:?}", res.local);
        if gso {
            assert!(res.local.syscalls < 2000 / 8, "{:?}", res.local);
        }
    }
}

#[test]
fn version_mismatch_is_a_clear_error_both_ways() {
    let r = start_responder();
    let e = Client::connect_with_version(r.addr, T, PROTOCOL_VERSION + 7, None)
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(msg.contains("version mismatch"), "{msg}");
    assert!(msg.contains(&format!("{}", PROTOCOL_VERSION + 7)), "{msg}");

    // A fake responder that speaks version 99.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let fake = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut c = ControlConn::from_stream(s, T).unwrap();
        let _: Request = c.recv(T, "hello", "request").unwrap();
        c.send(&Reply::Hello {
            version: 99,
            software: "future".into(),
        })
        .unwrap();
    });
    let msg = Client::connect(addr, T).err().unwrap().to_string();
    assert!(msg.contains("speaks 99") && msg.contains("future"), "{msg}");
    fake.join().unwrap();
}

#[test]
fn garbage_on_both_ports_is_counted_and_ignored() {
    let r = start_responder();
    // Garbage on the control port: an error reply, then the connection closes.
    let mut s = TcpStream::connect(r.addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.contains("\"error\""), "{reply}");
    // Binary garbage without a newline, then a close.
    let mut s = TcpStream::connect(r.addr).unwrap();
    s.write_all(&[0xFF; 3000]).unwrap();
    drop(s);

    // Garbage datagrams on a bw test port, mixed with valid packets.
    let mut c = ControlConn::connect(r.addr, T).unwrap();
    c.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        software: "test".into(),
        token: None,
    })
    .unwrap();
    assert!(matches!(
        c.recv::<Reply>(T, "hello", "reply").unwrap(),
        Reply::Hello { .. }
    ));
    let setup = BwSetup {
        test_id: 42,
        count: 10,
        size: 100,
        recv_buffer: None,
        max_duration_ms: 5000,
        timeline: false,
    };
    c.send(&Request::BwStart(setup)).unwrap();
    let Reply::Ready { port, .. } = c.recv(T, "ready", "reply").unwrap() else {
        panic!("no ready")
    };
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.connect(("127.0.0.1", port)).unwrap();
    let mut pkt = [0u8; 100];
    for seq in 0..10u64 {
        TestPacketRepr {
            kind: PacketKind::Data,
            test_id: 42,
            seq,
            send_ts_ns: realtime_ns(),
        }
        .emit(&mut TestPacket::new_unchecked(&mut pkt[..]));
        u.send(&pkt).unwrap();
        u.send(b"garbage").unwrap();
    }
    let mut other = pkt;
    TestPacket::new_unchecked(&mut other[..]).set_test_id(7);
    u.send(&other).unwrap();
    c.send(&Request::BwFinish { sent: 10 }).unwrap();
    let Reply::BwResult(res) = c.recv(T, "result", "reply").unwrap() else {
        panic!("no result")
    };
    assert_eq!(res.arrivals.received, 10);
    assert_eq!(res.arrivals.lost, 0);
    assert_eq!(res.arrivals.foreign, 11);
    drop(c);

    // The responder still serves a normal client.
    let mut client = Client::connect(r.addr, T).unwrap();
    let res = client
        .bw(&BwParams::new(200, 50, 10.0), &AtomicBool::new(false))
        .unwrap();
    assert_eq!(res.received + res.lost, 50);
    assert!(r.counters.bad_requests.load(Ordering::Relaxed) >= 1);
    assert!(r.counters.foreign_datagrams.load(Ordering::Relaxed) >= 11);
}

/// A hand-made responder's side of a bandwidth test up to its start: accepts one client on `l`, answers
/// its hello as `software` and its start with a ready on a fresh UDP socket.
fn accept_bw_start(l: TcpListener, software: &str) -> (ControlConn, UdpSocket) {
    let (s, _) = l.accept().unwrap();
    let mut c = ControlConn::from_stream(s, T).unwrap();
    let _: Request = c.recv(T, "hello", "request").unwrap();
    c.send(&Reply::Hello {
        version: PROTOCOL_VERSION,
        software: software.into(),
    })
    .unwrap();
    let _: Request = c.recv(T, "start", "request").unwrap();
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.send(&Reply::Ready {
        port: u.local_addr().unwrap().port(),
        buffer: 0,
    })
    .unwrap();
    (c, u)
}

/// A responder that accepts a test and then dies (closes everything) shortly after.
fn dying_responder(after: Duration) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        let (c, u) = accept_bw_start(l, "dying");
        thread::sleep(after);
        drop(u);
        drop(c);
    });
    addr
}

#[test]
fn responder_dying_mid_bw_gives_partial_results_within_the_timeout() {
    let addr = dying_responder(Duration::from_millis(300));
    let mut c = Client::connect(addr, T).unwrap();
    let started = Instant::now();
    // 100000 packets at 20 µs would take 2 s; the responder dies after 0.3 s.
    let e = c
        .bw(&BwParams::new(1000, 100_000, 20.0), &AtomicBool::new(false))
        .unwrap_err();
    let took = started.elapsed();
    let msg = e.to_string();
    assert!(msg.contains("closed by the other end"), "{msg}");
    match e {
        NetError::Aborted { partial, .. } => match *partial {
            Partial::Bw(local) => {
                assert!(local.sent > 0 && local.sent < 100_000, "{}", local.sent);
            }
            other => panic!("wrong partial {other:?}"),
        },
        other => panic!("not aborted: {other}"),
    }
    assert!(took < T + Duration::from_secs(2), "{took:?}");
}

/// A stop while the client waits for the responder's answer (the stream draining after the last
/// datagram) ends the test there: a responder that takes the whole stream and the finish but never
/// answers, and sets the stop flag once the finish has arrived. Without the stop the client would
/// wait out its timeout and fail with "no answer"; with it the test is interrupted, with the partial
/// figures of what was sent.
#[test]
fn a_stop_during_the_wait_for_the_bw_result_interrupts_the_test() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let silent = thread::spawn(move || {
        let (mut c, _udp) = accept_bw_start(l, "silent");
        let finish: Request = c.recv(T, "finish", "request").unwrap();
        assert!(matches!(finish, Request::BwFinish { sent: 200 }), "{finish:?}");
        s2.store(true, Ordering::SeqCst);
        // Hold the session open until the client leaves it.
        let left: Result<Request, _> = c.recv(Duration::from_secs(30), "the client's close", "request");
        assert!(left.is_err());
    });
    let mut c = Client::connect(addr, Duration::from_secs(20)).unwrap();
    let e = c.bw(&BwParams::new(500, 200, 10.0), &stop).unwrap_err();
    match &e {
        NetError::Aborted { partial, source } => {
            assert!(matches!(**source, NetError::Interrupted), "{e}");
            match &**partial {
                Partial::Bw(local) => assert_eq!(local.sent, 200),
                other => panic!("wrong partial {other:?}"),
            }
        }
        other => panic!("not interrupted: {other}"),
    }
    drop(c);
    silent.join().unwrap();
}

#[test]
fn responder_dying_mid_tcp_and_lat_is_reported() {
    let addr = dying_responder(Duration::from_millis(200));
    let mut c = Client::connect(addr, T).unwrap();
    let e = c
        .lat(
            &LatParams {
                sizes: vec![64, 128],
                count: 1000,
                warmup: 0,
                reply_timeout: Duration::from_millis(100),
            },
            &AtomicBool::new(false),
        )
        .unwrap_err();
    assert!(matches!(e, NetError::Aborted { .. }), "{e}");
}

#[test]
fn unreachable_responder_fails_fast() {
    // A port with nothing listening.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let e = Client::connect(addr, Duration::from_secs(1))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("connect") && e.contains(&addr.to_string()), "{e}");
}

#[test]
fn invalid_parameters_are_refused_before_sending() {
    let r = start_responder();
    let mut c = Client::connect(r.addr, T).unwrap();
    let e = c
        .bw(&BwParams::new(16, 10, 0.0), &AtomicBool::new(false))
        .unwrap_err();
    assert!(e.to_string().contains("size 16"), "{e}");
    // The session is still usable.
    let res = c
        .bw(&BwParams::new(64, 10, 0.0), &AtomicBool::new(false))
        .unwrap();
    assert_eq!(res.received + res.lost, 10);
}

/// Sends `count` test packets of `size` bytes to a fresh bw test of the responder, one `send` each,
/// packet k due k x `spacing_ns` after the start and stamped right before its own send; returns the
/// responder's result and the send stamps.
fn send_paced_stream(
    r: &Running,
    test_id: u32,
    count: u64,
    spacing_ns: u64,
) -> (vlbiflow_net::proto::BwRemote, Vec<u64>) {
    use vlbiflow_udp::Pacer;
    let mut c = ControlConn::connect(r.addr, T).unwrap();
    c.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        software: "test".into(),
        token: None,
    })
    .unwrap();
    assert!(matches!(
        c.recv::<Reply>(T, "hello", "reply").unwrap(),
        Reply::Hello { .. }
    ));
    c.send(&Request::BwStart(BwSetup {
        test_id,
        count,
        size: 256,
        recv_buffer: None,
        max_duration_ms: 30_000,
        timeline: true,
    }))
    .unwrap();
    let Reply::Ready { port, .. } = c.recv(T, "ready", "reply").unwrap() else {
        panic!("no ready")
    };
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.connect(("127.0.0.1", port)).unwrap();
    let mut pkt = [0u8; 256];
    let mut sent_at = Vec::with_capacity(count as usize);
    // After a stall (the machine is shared) the schedule moves on rather than bursting to catch up, so
    // all gaps but the stalls keep the spacing.
    let mut pacer = Pacer::new(1e9 / spacing_ns as f64, Instant::now())
        .unwrap()
        .with_catch_up_limit(Some(Duration::from_nanos(spacing_ns / 4)));
    for seq in 0..count {
        pacer.wait_until_due(seq);
        let ts = realtime_ns();
        TestPacketRepr {
            kind: PacketKind::Data,
            test_id,
            seq,
            send_ts_ns: ts,
        }
        .emit(&mut TestPacket::new_unchecked(&mut pkt[..]));
        u.send(&pkt).unwrap();
        sent_at.push(ts);
    }
    c.send(&Request::BwFinish { sent: count }).unwrap();
    let Reply::BwResult(res) = c.recv(T, "result", "reply").unwrap() else {
        panic!("no result")
    };
    (*res, sent_at)
}

/// The median, over consecutive received pairs, of |(r_j - r_i) - (s_j - s_i)| in µs: the per-packet
/// transit variation that RFC 3550's jitter smooths. Unlike the smoothed figure, a few datagrams
/// delayed by a preempted sender or a busy machine move it little.
fn median_transit_variation_us(t: &vlbiflow_net::stats::Timeline) -> f64 {
    let mut d: Vec<i64> = t
        .send_ns
        .windows(2)
        .zip(t.recv_ns.windows(2))
        .filter(|(s, r)| s.iter().chain(r.iter()).all(|&x| x >= 0))
        .map(|(s, r)| ((r[1] - r[0]) - (s[1] - s[0])).abs())
        .collect();
    assert!(!d.is_empty(), "no two consecutive datagrams received");
    let mid = d.len() / 2;
    *d.select_nth_unstable(mid).1 as f64 * 1e-3
}

/// The share of the gaps between consecutive `times` (ns) within `tolerance_ns` of `spacing_ns`.
fn share_on_schedule(times: &[u64], spacing_ns: u64, tolerance_ns: u64) -> f64 {
    let on = times
        .windows(2)
        .filter(|w| w[1].saturating_sub(w[0]).abs_diff(spacing_ns) <= tolerance_ns)
        .count();
    on as f64 / (times.len() - 1) as f64
}

/// The responder stamps each datagram with its own kernel receive time, so a paced stream's spacing
/// shows in the inter-arrival mode, and the per-packet transit variation and one-way delay stay near
/// zero, however the responder's reads fall into batches. (The smoothed RFC 3550 jitter is printed
/// but not held to a bound: a handful of datagrams held up on a busy machine near the end of the
/// stream dominate it; CI once saw 5.9 µs with every other figure as expected.) The stream is sent here one datagram per `send`, each stamped
/// just before its send. A stream the sender itself could not keep on schedule (a busy machine
/// preempting it for more than two thirds of its gaps) says nothing about the receiver, so it is sent
/// again, up to 8 times. With one receive
/// time per batch this machine gave, for the 20 µs stream, an inter-arrival mode near 0 (batches) or
/// jitter of 2-15 µs and a median delay of 4-16 µs (wake-up latency).
#[test]
fn paced_streams_show_their_spacing_in_inter_arrival_mode_and_jitter() {
    let r = start_responder();
    assert!(
        r.timestamping_live,
        "the kernel does not stamp datagrams on arrival"
    );
    let mut test_id = 0;
    for (spacing_ns, count) in [(20_000u64, 20_000u64), (200_000, 2_000)] {
        let spacing_us = spacing_ns as f64 * 1e-3;
        let tolerance_us = (spacing_us * 0.01).max(1.0);
        let mut best = 0.0f64;
        let mut tries = 0;
        let res = loop {
            tries += 1;
            test_id += 1;
            assert!(
                tries <= 8,
                "{spacing_us} µs: the sender kept no more than {:.0}% of its gaps on schedule in 8 tries \
                 (machine too busy)",
                best * 100.0
            );
            let (res, sent_at) = send_paced_stream(&r, test_id, count, spacing_ns);
            let on = share_on_schedule(&sent_at, spacing_ns, (tolerance_us * 1e3) as u64);
            best = best.max(on);
            // A third of the gaps on schedule is the mode the receiver must find; the tests beside this
            // one share the two cores (a clean-clone run kept 40% at best in 5 tries of 50%).
            if on >= 0.34 {
                break res;
            }
        };
        let a = &res.arrivals;
        assert_eq!(a.received, count, "{a:?}");
        let variation = median_transit_variation_us(res.timeline.as_ref().expect("timeline"));
        let summary = format!(
            "{spacing_us} µs: received mode {:.2} p50 {:.2}, jitter {:.3} (median per packet {:.3}), \
             delay p50 {:.2} µs",
            a.inter_arrival.mode,
            a.inter_arrival.p50,
            a.jitter_us,
            variation,
            a.delay.as_ref().map_or(f64::NAN, |d| d.hist.p50)
        );
        eprintln!("{summary} (try {tries})");
        assert!(
            (a.inter_arrival.mode - spacing_us).abs() <= tolerance_us,
            "{summary}"
        );
        // Stamped once per batch, most datagrams of a batch would differ by a whole spacing here.
        assert!(variation < 1.5, "{summary}");
        if spacing_ns == 20_000 {
            let delay = a.delay.as_ref().unwrap();
            assert!(delay.hist.p50 < 2.0, "{summary}");
        }
    }
}

/// A raw control session (no client-side validation), after the hello.
fn raw_session(addr: SocketAddr) -> ControlConn {
    let mut c = ControlConn::connect(addr, T).unwrap();
    c.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        software: "test".into(),
        token: None,
    })
    .unwrap();
    assert!(matches!(
        c.recv::<Reply>(T, "hello", "reply").unwrap(),
        Reply::Hello { .. }
    ));
    c
}

fn bw_start(c: &mut ControlConn, count: u64, recv_buffer: Option<usize>) -> Reply {
    c.send(&Request::BwStart(BwSetup {
        test_id: 9,
        count,
        size: 1000,
        recv_buffer,
        max_duration_ms: 5000,
        timeline: false,
    }))
    .unwrap();
    c.recv(T, "ready", "reply").unwrap()
}

fn error_message(reply: Reply) -> String {
    match reply {
        Reply::Error { message } => message,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn tests_asking_for_too_much_memory_are_refused_clearly_and_the_session_goes_on() {
    let r = start_responder_with(|c| c.max_test_memory = 32 << 20);
    let mut c = raw_session(r.addr);
    // 10^12 packets of statistics: refused by count before anything is allocated.
    let m = error_message(bw_start(&mut c, 1_000_000_000_000, None));
    assert!(m.contains("count 1000000000000 outside 1..="), "{m}");
    // Within the count limit but over this responder's per-test memory: 10^6 packets need 53 MiB.
    let m = error_message(bw_start(&mut c, 1_000_000, Some(1 << 20)));
    assert!(
        m.contains("1000000 packets") && m.contains("more than the 32.0 MiB"),
        "{m}"
    );
    // An absurd kernel buffer is memory too.
    let m = error_message(bw_start(&mut c, 10, Some(usize::MAX / 4)));
    assert!(
        m.contains("receive buffer") && m.contains("more than the 32.0 MiB"),
        "{m}"
    );
    c.send(&Request::TcpStart {
        streams: 64,
        recv_buffer: Some(1 << 30),
    })
    .unwrap();
    let m = error_message(c.recv(T, "ready", "reply").unwrap());
    assert!(m.starts_with("tcp: ") && m.contains("64 streams"), "{m}");
    assert_eq!(r.counters.refused_tests.load(Ordering::Relaxed), 3);
    // The same session still runs a test that fits.
    let Reply::Ready { port, .. } = bw_start(&mut c, 100_000, Some(1 << 20)) else {
        panic!("refused a test that fits")
    };
    assert_ne!(port, 0);
    c.send(&Request::BwFinish { sent: 0 }).unwrap();
    assert!(matches!(
        c.recv(T, "result", "reply").unwrap(),
        Reply::BwResult(_)
    ));
    drop(c);
    // The client shows the responder's reason.
    let mut client = Client::connect(r.addr, T).unwrap();
    let p = BwParams {
        recv_buffer: Some(64 << 20),
        ..BwParams::new(1000, 10, 0.0)
    };
    let e = client.bw(&p, &AtomicBool::new(false)).unwrap_err().to_string();
    assert!(
        e.contains("responder: bw:") && e.contains("more than the 32.0 MiB"),
        "{e}"
    );
}

#[test]
fn concurrent_tests_share_one_memory_budget() {
    // 40 MiB for everything: one test of 500 000 packets (27 MiB with its buffers) fits, two do not.
    let r = start_responder_with(|c| {
        c.max_test_memory = 40 << 20;
        c.memory_budget = 40 << 20;
    });
    let mut a = raw_session(r.addr);
    let mut b = raw_session(r.addr);
    assert!(matches!(
        bw_start(&mut a, 500_000, Some(1 << 20)),
        Reply::Ready { .. }
    ));
    assert!(r.counters.reserved_bytes.load(Ordering::Relaxed) > 27 << 20);
    let m = error_message(bw_start(&mut b, 500_000, Some(1 << 20)));
    assert!(
        m.contains("running tests hold") && m.contains("try again later"),
        "{m}"
    );
    // Once the first test has its result, its memory is free again.
    a.send(&Request::BwFinish { sent: 0 }).unwrap();
    assert!(matches!(
        a.recv(T, "result", "reply").unwrap(),
        Reply::BwResult(_)
    ));
    assert_eq!(r.counters.reserved_bytes.load(Ordering::Relaxed), 0);
    assert!(matches!(
        bw_start(&mut b, 500_000, Some(1 << 20)),
        Reply::Ready { .. }
    ));
    b.send(&Request::BwFinish { sent: 0 }).unwrap();
    assert!(matches!(
        b.recv(T, "result", "reply").unwrap(),
        Reply::BwResult(_)
    ));
}

#[test]
fn sessions_beyond_the_limit_are_told_the_responder_is_busy() {
    let r = start_responder_with(|c| c.max_sessions = 1);
    let first = Client::connect(r.addr, T).unwrap();
    for _ in 0..3 {
        let e = Client::connect(r.addr, T).err().unwrap().to_string();
        assert!(e.contains("busy") && e.contains("at most 1 sessions"), "{e}");
    }
    assert_eq!(r.counters.refused_sessions.load(Ordering::Relaxed), 3);
    // The slot is given back when the first session ends (the responder notices the close within a
    // poll slice of 200 ms; allow far more).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut second = loop {
        match Client::connect(r.addr, T) {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline && e.to_string().contains("busy") => {
                thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("{e}"),
        }
    };
    let res = second
        .bw(&BwParams::new(200, 20, 0.0), &AtomicBool::new(false))
        .unwrap();
    assert_eq!(res.received + res.lost, 20);
}

#[test]
fn a_responder_with_a_token_serves_only_clients_that_send_it() {
    let r = start_responder_with(|c| c.token = Some("s3cret-token-value".into()));
    // Anonymous and wrong tokens: refused at the hello, no test set up, no memory reserved.
    let e = Client::connect(r.addr, T).err().unwrap().to_string();
    assert!(
        e.contains("unauthorized (no token)") && e.contains("--token-file"),
        "{e}"
    );
    let e = Client::connect_with_token(r.addr, T, Some("guess"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("unauthorized (wrong token)"), "{e}");
    // A raw client that skips to a test after a tokenless hello gets nothing either.
    let mut c = ControlConn::connect(r.addr, T).unwrap();
    c.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        software: "test".into(),
        token: None,
    })
    .unwrap();
    c.send(&Request::BwStart(BwSetup {
        test_id: 1,
        count: 8_000_000,
        size: 1472,
        recv_buffer: None,
        max_duration_ms: 5000,
        timeline: false,
    }))
    .unwrap();
    assert!(matches!(
        c.recv(T, "hello", "reply").unwrap(),
        Reply::Error { .. }
    ));
    assert_eq!(r.counters.unauthorized.load(Ordering::Relaxed), 3);
    assert_eq!(r.counters.reserved_bytes.load(Ordering::Relaxed), 0);
    // With the token: tests run.
    let mut client = Client::connect_with_token(r.addr, T, Some("s3cret-token-value")).unwrap();
    let res = client
        .bw(&BwParams::new(200, 20, 0.0), &AtomicBool::new(false))
        .unwrap();
    assert_eq!(res.received + res.lost, 20);
}

/// Waits (at most 60 s) for the responder to close `s`; what it said before closing.
fn read_to_close(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("not closed: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn idle_connections_beyond_the_per_address_limit_are_closed_and_hold_no_session() {
    // A hello deadline far beyond the test, so the idle connections stay pending throughout.
    let r = start_responder_with(|c| {
        c.max_sessions = 2;
        c.hello_timeout = Duration::from_secs(600);
    });
    let limit = ResponderConfig::new(r.addr).gate.per_address;
    assert_eq!(limit, 8);
    // From another host: as many idle connections as its address may have waiting for their hello
    // (more than the responder's sessions), then four more.
    let mut idle: Vec<TcpStream> = (0..limit + 4)
        .map(|_| connect_from("127.0.0.2", r.addr))
        .collect();
    // The four beyond the limit are closed unanswered (the kernel queues connections in order).
    for s in &mut idle[limit..] {
        assert_eq!(read_to_close(s), "");
    }
    assert_eq!(r.counters.gate_refused.load(Ordering::Relaxed), 4);
    // Clients from elsewhere take both sessions while the idle connections wait, and test.
    let stop = AtomicBool::new(false);
    let mut a = Client::connect(r.addr, T).unwrap();
    let mut b = Client::connect(r.addr, T).unwrap();
    for c in [&mut a, &mut b] {
        let res = c.bw(&BwParams::new(200, 20, 0.0), &stop).unwrap();
        assert_eq!(res.received + res.lost, 20);
    }
    assert_eq!(r.counters.sessions.load(Ordering::Relaxed), 2);
    assert_eq!(r.counters.hello_timeouts.load(Ordering::Relaxed), 0);
}

#[test]
fn a_connection_that_never_says_hello_is_closed_at_the_deadline() {
    let r = start_responder();
    // Silent, and a hello that never ends its line.
    let mut silent = connect_from("127.0.0.2", r.addr);
    let mut partial = connect_from("127.0.0.2", r.addr);
    partial.write_all(b"{\"hello\":").unwrap();
    for s in [&mut silent, &mut partial] {
        let said = read_to_close(s);
        assert!(
            said.contains("no answer within 2.0 s while waiting for hello"),
            "{said}"
        );
    }
    assert_eq!(r.counters.hello_timeouts.load(Ordering::Relaxed), 2);
    assert_eq!(r.counters.sessions.load(Ordering::Relaxed), 0);
    // A client that says hello is served.
    let mut c = Client::connect(r.addr, T).unwrap();
    let res = c
        .bw(&BwParams::new(200, 20, 0.0), &AtomicBool::new(false))
        .unwrap();
    assert_eq!(res.received + res.lost, 20);
}
