//! The daemon over real TCP, UDP and files: a full recording driven by Mark6 commands, bad input and
//! connection floods, restart with the scan list kept, and the token beyond loopback.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use vlbiflow_testkit::net::connect_from;

use common::*;
use vlbiflow_control::client::http_get;
use vlbiflow_control::proto::parse_reply;
use vlbiflow_control::{spawn, RecorderEngine, StatusReport};
use vlbiflow_scan::ScanMetadata;

fn add_stream(ctl: &mut Ctl, port: u16) {
    ctl.expect(
        &format!(
            "input_stream = add : RDBE1 : vdif : {FRAME} : 50 : 42 : lo : 127.0.0.1 : {port} : 1234 : 0"
        ),
        "!input_stream = 0 : added : RDBE1 ;",
    );
    ctl.expect("input_stream=commit", "!input_stream = 0 : committed : 1 ;");
}

#[test]
fn full_recording_over_the_command_port() {
    let disks = Disks::new(3);
    let d = spawn(disks.config(""), Box::new(RecorderEngine)).unwrap();
    let mut ctl = Ctl::connect(d.control_addr);
    let port = free_udp_port();
    ctl.expect("record?", "!record? 0 : off : main : 0 : - ;");
    add_stream(&mut ctl, port);
    ctl.expect(
        "input_stream?",
        &format!("!input_stream? 0 : 1 : RDBE1 : vdif : {FRAME} : 50 : 42 : lo : 127.0.0.1 : {port} : 0 ;"),
    );
    ctl.expect("group?", "!group? 0 : main : main ;");
    let mstat = parse_reply(&ctl.one("mstat?all")).unwrap();
    assert_eq!(mstat.code, 0);
    assert_eq!(&mstat.fields[..5], ["main", "1", "main", "3", "3"]);
    assert_eq!(&mstat.fields[7..], ["open", "ready", "sg"]);

    ctl.expect(
        "record=on:60:scan1:exp:st",
        "!record = 0 : recording : exp_st_scan1 ;",
    );
    ctl.expect("record?", "!record? 0 : recording : main : 1 : exp_st_scan1 ;");
    ctl.expect(
        "record=on:60:scan2:exp:st",
        "!record = 6 : recording: record=off first ;",
    );
    send_frames(SocketAddr::from(([127, 0, 0, 1], port)), 7, 250);
    // The engine publishes counters once per batch: wait until the last frame is counted.
    until("the 250th frame to be counted", || {
        let (_, body) = http_get(&d.http_addr.to_string(), "/status", None, Duration::from_secs(5)).unwrap();
        let r: StatusReport = serde_json::from_str(&body).unwrap();
        (r.streams[0].packets == 250).then_some(())
    });
    ctl.expect(
        "evlbi?",
        "!evlbi? 0 : total : 250 : loss : 0 (0.00%) : out-of-order : 0 (0.00%) : extent : n/a seqnr/pkt ;",
    );
    ctl.expect(
        "status?",
        "!status? 0 : recording : main : 1 streams : 0 scans : ok ;",
    );
    // That record=off (and record?) answer promptly while capture stops is tests/latency.rs's subject.
    ctl.expect("record=off", "!record = 0 : flushing : exp_st_scan1 ;");
    ctl.wait_state("off");
    ctl.expect("record?", "!record? 0 : off : main : 1 : exp_st_scan1 ;");
    let check = parse_reply(&ctl.one("scan_check?")).unwrap();
    assert_eq!(check.code, 0);
    assert_eq!(
        &check.fields[..6],
        ["1", "exp_st_scan1", "complete", "RDBE1", "OK", "vdif"]
    );
    assert!(
        check.fields[6].contains('y') && check.fields[6].ends_with('s'),
        "{check:?}"
    );
    let secs: f64 = check.fields[7].parse().unwrap();
    assert!((secs - 2.5).abs() < 0.1, "250 frames at 100/s: {secs}");
    assert_eq!(check.fields[8], format!("{:.6}", 250.0 * FRAME as f64 / 1e9));
    assert_eq!(check.fields[10], "0", "missing bytes");
    // Same files as `vlbiflow record`: one Mark6 file and the metadata on each disk.
    for i in 0..3 {
        assert!(disks.disk(i).join("exp_st_scan1.vdif").is_file());
        let m = ScanMetadata::read(&disks.disk(i).join("exp_st_scan1.vlbiflow.json")).unwrap();
        assert!(m.complete);
        assert_eq!(m.streams[0].counters.packets, 250);
        assert_eq!(m.station.as_deref(), Some("st"));
    }
    let (code, metrics) =
        http_get(&d.http_addr.to_string(), "/metrics", None, Duration::from_secs(5)).unwrap();
    assert_eq!(code, 200);
    assert!(
        metrics.contains("vlbiflow_stream_packets_total{stream=\"RDBE1\"} 250\n"),
        "{metrics}"
    );
    assert!(metrics.contains(&format!(
        "vlbiflow_stream_bytes_total{{stream=\"RDBE1\"}} {}\n",
        250 * FRAME
    )));
    assert!(metrics.contains("vlbiflow_scans_recorded_total 1\n"));
    d.stop();
}

#[test]
fn bad_input_and_connection_floods_leave_the_daemon_answering() {
    let disks = Disks::new(1);
    let d = spawn(disks.config("max_connections = 64"), Box::new(RecorderEngine)).unwrap();
    let addr = d.control_addr;
    // Garbage, an over-long line, binary data, and a valid query on one connection.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut junk: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    junk.retain(|&b| b != b'\n' && b != b';');
    junk.push(b'\n');
    junk.extend_from_slice(&vec![b'a'; 100_000]);
    junk.extend_from_slice(b"\n=;??;record=;mstat=x;record?\n");
    s.write_all(&junk).unwrap();
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while !got.contains("!record? 0") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed; got {got}");
        got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("!error = 4 : line longer than 4096 bytes: ignored up to the next newline ;")
    );
    assert!(
        lines.iter().all(|l| l.starts_with('!') && l.ends_with(';')),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"!record = 8 : expected on, off or a start time such as 2025y190d12h00m00s ;")
            || lines.iter().any(|l| l.starts_with("!record = 8"))
    );
    assert!(lines.contains(&"!mstat = 7 : mstat has no command form ;"));
    drop(s);

    // A thousand simultaneous connections: 64 are served, the rest refused with a reply, none crash it.
    let mut conns = Vec::new();
    for _ in 0..1000 {
        conns.push(TcpStream::connect(addr).unwrap());
    }
    // Collect the refusals (written asynchronously) without blocking on the served connections.
    let mut refused = 0;
    let mut open: Vec<Option<TcpStream>> = conns.into_iter().map(Some).collect();
    for c in open.iter().flatten() {
        c.set_nonblocking(true).unwrap();
    }
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        for slot in open.iter_mut() {
            let Some(c) = slot else { continue };
            let mut b = [0u8; 128];
            if let Ok(n) = c.read(&mut b) {
                assert!(
                    b[..n].starts_with(b"!error = 6 : too many connections"),
                    "{:?}",
                    &b[..n]
                );
                refused += 1;
                *slot = None;
            }
        }
        if refused == 936 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut served = Vec::new();
    for mut c in open.into_iter().flatten() {
        c.set_nonblocking(false).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"record?\n").unwrap();
        let mut b = [0u8; 256];
        let n = c.read(&mut b).unwrap();
        assert!(
            b[..n].starts_with(b"!record? 0 : off"),
            "{:?}",
            String::from_utf8_lossy(&b[..n])
        );
        served.push(c);
    }
    assert_eq!(served.len(), 64);
    assert_eq!(refused, 936);
    drop(served);
    // Still answering, and the slots come back once the served connections close.
    let mut ok = 0;
    // Attempts made before the server has seen the served connections close are refused (and counted).
    let mut retried = 0;
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        let mut c = Ctl::connect(addr);
        if c.0
            .send("record?")
            .map(|r| r[0].starts_with("!record? 0 : off"))
            .unwrap_or(false)
        {
            ok += 1;
            if ok == 3 {
                break;
            }
        } else {
            retried += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    assert_eq!(ok, 3);
    let (_, metrics) = http_get(&d.http_addr.to_string(), "/metrics", None, Duration::from_secs(5)).unwrap();
    let refused_total: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("vlbiflow_connections_refused_total "))
        .unwrap_or_else(|| panic!("no refused counter in {metrics}"))
        .parse()
        .unwrap();
    assert!(
        (936..=936 + retried).contains(&refused_total),
        "{refused_total} refused, {retried} retries"
    );
    d.stop();
}

#[test]
fn restart_while_idle_keeps_the_scan_list() {
    let disks = Disks::new(2);
    let port = free_udp_port();
    {
        let d = spawn(disks.config(""), Box::new(RecorderEngine)).unwrap();
        let mut ctl = Ctl::connect(d.control_addr);
        add_stream(&mut ctl, port);
        ctl.expect("record=on:30:s1:e:st", "!record = 0 : recording : e_st_s1 ;");
        send_frames(SocketAddr::from(([127, 0, 0, 1], port)), 0, 20);
        ctl.expect("record=off", "!record = 0 : flushing : e_st_s1 ;");
        ctl.wait_state("off");
        ctl.expect("record=on:30:s2:e:st", "!record = 0 : recording : e_st_s2 ;");
        ctl.expect("record=off", "!record = 0 : flushing : e_st_s2 ;");
        ctl.wait_state("off");
        d.stop();
    }
    let d = spawn(disks.config(""), Box::new(RecorderEngine)).unwrap();
    let mut ctl = Ctl::connect(d.control_addr);
    ctl.expect("record?", "!record? 0 : off : main : 2 : e_st_s2 ;");
    let c = parse_reply(&ctl.one("scan_check?e_st_s1")).unwrap();
    // 20 frames never wrap a second, so the frame rate (and so the time) is unknown.
    assert_eq!(
        &c.fields[..5],
        ["1", "e_st_s1", "complete", "RDBE1", "time?"],
        "{c:?}"
    );
    ctl.expect("status?", "!status? 0 : off : main : 0 streams : 2 scans : ok ;");
    // The name stays taken after the restart.
    add_stream(&mut ctl, port);
    ctl.expect(
        "record=on:30:s1:e:st",
        "!record = 6 : scan e_st_s1 already exists ;",
    );
    d.stop();
}

#[test]
fn beyond_loopback_a_token_is_required() {
    let disks = Disks::new(1);
    let mut cfg = disks.config("token = \"sesame-0123\"");
    cfg.control = "0.0.0.0:0".parse().unwrap();
    cfg.http = "0.0.0.0:0".parse().unwrap();
    let d = spawn(cfg, Box::new(RecorderEngine)).unwrap();
    let c = SocketAddr::from(([127, 0, 0, 1], d.control_addr.port()));
    let h = format!("127.0.0.1:{}", d.http_addr.port());
    let mut ctl = Ctl::connect(c);
    ctl.expect(
        "record?",
        "!record? 4 : authentication required: send auth=<token>  first ;",
    );
    ctl.expect("auth=nope", "!auth = 4 : wrong token ;");
    ctl.expect("auth=sesame-0123", "!auth = 0 ;");
    ctl.expect("record?", "!record? 0 : off : main : 0 : - ;");
    let t = Duration::from_secs(5);
    assert_eq!(http_get(&h, "/status", None, t).unwrap().0, 401);
    assert_eq!(http_get(&h, "/", Some("wrong-token"), t).unwrap().0, 401);
    assert_eq!(http_get(&h, "/status", Some("sesame-0123"), t).unwrap().0, 200);
    // a token in the query string is not accepted (it would end up in logs and histories)
    assert_eq!(
        http_get(&h, "/metrics?token=sesame-0123", None, t).unwrap().0,
        401
    );
    assert_eq!(http_get(&h, "/metrics", Some("sesame-0123"), t).unwrap().0, 200);
    // the dashboard page holds no data: it loads without a token and sends the one of its URL fragment
    assert_eq!(http_get(&h, "/", None, t).unwrap().0, 200);
    d.stop();
    // Without a token, refused at start-up.
    let mut cfg = disks.config("");
    cfg.control = "0.0.0.0:0".parse().unwrap();
    let e = spawn(cfg, Box::new(RecorderEngine)).err().unwrap().to_string();
    assert!(e.contains("token"), "{e}");
}

/// Reads until the daemon closes the connection; returns what it said.
fn read_to_close(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn with_a_token_idle_floods_http_and_garbage_are_cut_short() {
    let disks = Disks::new(1);
    // require_token: loopback needs the token too
    let d = spawn(
        disks.config("token = \"sesame-0123\"\nrequire_token = true"),
        Box::new(RecorderEngine),
    )
    .unwrap();
    let c = d.control_addr;
    // 40 connections that never send anything, from another address
    let mut idle: Vec<_> = (0..40).map(|_| connect_from("127.0.0.2", c)).collect();
    // meanwhile a client with the token gets its answer
    let mut ctl = Ctl::connect(c);
    ctl.expect("auth=sesame-0123", "!auth = 0 ;");
    ctl.expect("record?", "!record? 0 : off : main : 0 : - ;");
    // the flood: beyond 8 from one address refused at once, the 8 closed at the 2 s deadline
    let said: Vec<String> = idle.iter_mut().map(read_to_close).collect();
    let refused = said
        .iter()
        .filter(|s| s.contains("too many connections without the token"))
        .count();
    let timed_out = said
        .iter()
        .filter(|s| s.contains("no auth=<token> in time"))
        .count();
    assert_eq!(refused + timed_out, 40, "{said:?}");
    assert!(refused >= 32 - 8, "{refused} refused");
    // the authenticated session is not bound by the deadline
    ctl.expect("record?", "!record? 0 : off : main : 0 : - ;");

    // an HTTP request whose body is commands: the request line closes the connection, nothing runs
    let mut h = TcpStream::connect(c).unwrap();
    h.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 29\r\n\r\nauth=sesame-0123;record=off;\n")
        .unwrap();
    let said = read_to_close(&mut h);
    assert_eq!(
        said,
        "!error = 4 : this is the VSI-S command port, not HTTP: closing ;\n"
    );
    // garbage before the token: one error, then closed
    let mut g = TcpStream::connect(c).unwrap();
    g.write_all(b"Host: x\nauth=sesame-0123;record?;\n").unwrap();
    let said = read_to_close(&mut g);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.starts_with("!error = 4 : "), "{said}");
    // HTTP after the token is refused too
    ctl.0
        .send("GET / HTTP/1.0")
        .map(|r| assert!(r[0].contains("not HTTP"), "{r:?}"))
        .unwrap();
    d.stop();
}
