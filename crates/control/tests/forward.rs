//! Forwarding while recording through the daemon: destinations set with jive5ab's commands
//! (`net_protocol`, `net_port`, `in2net`) and with `forward=add`, frames flowing only while on, every
//! recorded frame forwarded with a PSN that continues from scan to scan, counters in `forward?`,
//! `/status`, `/metrics` and `vlbiflow status`'s text.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::*;
use vlbiflow_control::client::http_get;
use vlbiflow_control::proto::parse_reply;
use vlbiflow_control::report::render_monitor;
use vlbiflow_control::{spawn, RecorderEngine, StatusReport};

fn status(d: &vlbiflow_control::DaemonHandle) -> StatusReport {
    let (_, body) = http_get(&d.http_addr.to_string(), "/status", None, Duration::from_secs(5)).unwrap();
    serde_json::from_str(&body).unwrap()
}

fn receiver() -> (UdpSocket, u16) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Room for a whole test burst (the kernel caps what it cannot give).
    let _ = set_recv_buffer(&s, 8 << 20);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let p = s.local_addr().unwrap().port();
    (s, p)
}

fn set_recv_buffer(s: &UdpSocket, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    rustix::net::sockopt::set_socket_recv_buffer_size(s.as_fd(), bytes).map_err(Into::into)
}

/// Collects `n` datagrams' PSNs on a thread (started before the frames are sent).
fn collect(s: &UdpSocket, n: usize, with_psn: bool) -> std::thread::JoinHandle<Vec<u64>> {
    let s = s.try_clone().unwrap();
    std::thread::spawn(move || psns(&s, n, with_psn))
}

/// Receives `n` datagrams and returns their PSNs (and checks each carries a frame).
fn psns(s: &UdpSocket, n: usize, with_psn: bool) -> Vec<u64> {
    let mut buf = [0u8; 4096];
    (0..n)
        .map(|i| {
            let k = s
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("datagram {i} of {n}: {e}"));
            if with_psn {
                assert_eq!(k, 8 + FRAME);
                u64::from_le_bytes(buf[..8].try_into().unwrap())
            } else {
                assert_eq!(k, FRAME);
                i as u64
            }
        })
        .collect()
}

#[test]
fn recordings_forward_with_jive5ab_commands_and_named_destinations() {
    let disks = Disks::new(2);
    let d = spawn(disks.config(""), Box::new(RecorderEngine)).unwrap();
    let mut ctl = Ctl::connect(d.control_addr);
    let port = free_udp_port();
    ctl.expect(
        &format!(
            "input_stream = add : RDBE1 : vdif : {FRAME} : 50 : 42 : lo : 127.0.0.1 : {port} : 1234 : 0"
        ),
        "!input_stream = 0 : added : RDBE1 ;",
    );
    ctl.expect("input_stream=commit", "!input_stream = 0 : committed : 1 ;");
    let (a, a_port) = receiver();
    let (b, b_port) = receiver();
    // jive5ab style: protocol, port, connect, then on.
    ctl.expect("net_protocol = udp", "!net_protocol = 0 : udps ;");
    ctl.expect("net_protocol?", "!net_protocol? 0 : udps ;");
    ctl.expect(
        &format!("net_port = {a_port}"),
        &format!("!net_port = 0 : {a_port} ;"),
    );
    ctl.expect(
        "in2net = connect : 127.0.0.1",
        &format!("!in2net = 0 : connected : udps@127.0.0.1:{a_port} ;"),
    );
    // A named destination taking plain VDIF, paced.
    ctl.expect(
        &format!("forward = add : mon : pudp : 127.0.0.1 : {b_port} : 0 : 500Mbps"),
        &format!("!forward = 0 : added : mon : vdif@127.0.0.1:{b_port} ;"),
    );
    ctl.expect(
        "forward = add : x : ftp : h : 1",
        "!forward = 8 : protocol: \"ftp\" is not udps, vdif or tcp ;",
    );
    ctl.expect(
        "in2net?",
        &format!("!in2net? 0 : off : udps@127.0.0.1:{a_port} : 0 ;"),
    );

    // Scan 1 with forwarding off: nothing flows, the recording is whole.
    ctl.expect(
        "record=on:60:scan1:exp:st",
        "!record = 0 : recording : exp_st_scan1 ;",
    );
    send_frames(SocketAddr::from(([127, 0, 0, 1], port)), 0, 100);
    until("100 frames recorded", || {
        (status(&d).streams[0].packets == 100).then_some(())
    });
    ctl.expect("in2net = on", "!in2net = 0 : on : 2 destinations ;");
    let (ra, rb) = (collect(&a, 150, true), collect(&b, 150, false));
    send_frames(SocketAddr::from(([127, 0, 0, 1], port)), 100, 150);
    assert_eq!(ra.join().unwrap(), (0..150).collect::<Vec<_>>());
    rb.join().unwrap();
    until("the forward counters", || {
        let r = status(&d);
        let f = &r.forward;
        (f.enabled && f.destinations.iter().all(|x| x.sent == 150)).then_some(())
    });
    let r = status(&d);
    let text = render_monitor(&r);
    assert!(text.contains("forward: on (2 destination(s)"), "{text}");
    assert!(text.contains("in2net udps@127.0.0.1"), "{text}");
    ctl.expect("record=off", "!record = 0 : flushing : exp_st_scan1 ;");
    ctl.wait_state("off");

    // Scan 2: the PSN goes on where scan 1 left it; a change during a scan applies to the next one.
    ctl.expect(
        "record=on:60:scan2:exp:st",
        "!record = 0 : recording : exp_st_scan2 ;",
    );
    ctl.expect(
        "forward = delete : mon",
        "!forward = 0 : deleted : mon : from the next scan ;",
    );
    let (ra, rb) = (collect(&a, 50, true), collect(&b, 50, false));
    send_frames(SocketAddr::from(([127, 0, 0, 1], port)), 250, 50);
    assert_eq!(ra.join().unwrap(), (150..200).collect::<Vec<_>>());
    rb.join().unwrap();
    until("scan 2 counted", || {
        (status(&d).streams[0].packets == 50).then_some(())
    });
    let q = parse_reply(&ctl.one("forward?")).unwrap();
    assert_eq!(q.code, 0);
    assert_eq!(&q.fields[..2], ["on", "1"]);
    ctl.expect("record=off", "!record = 0 : flushing : exp_st_scan2 ;");
    ctl.wait_state("off");
    let check = parse_reply(&ctl.one("scan_check?")).unwrap();
    assert_eq!(check.fields[10], "0", "nothing missing in the recording");
    let (_, metrics) = http_get(&d.http_addr.to_string(), "/metrics", None, Duration::from_secs(5)).unwrap();
    for want in [
        "vlbiflow_forward_sent_frames_total{dest=\"in2net\"} 200\n",
        "vlbiflow_forward_sent_frames_total{dest=\"mon\"} 200\n",
        "vlbiflow_forward_dropped_frames_total{dest=\"in2net\",reason=\"queue_full\"} 0\n",
        "vlbiflow_forward_enabled 1\n",
        &format!(
            "vlbiflow_forward_sent_bytes_total{{dest=\"in2net\"}} {}\n",
            200 * (FRAME + 8)
        ),
    ] {
        assert!(metrics.contains(want), "{want} not in\n{metrics}");
    }
    ctl.expect("in2net = disconnect", "!in2net = 0 : disconnected ;");
    ctl.expect("in2net?", "!in2net? 0 : inactive : none : 0 ;");
    d.stop();
}
