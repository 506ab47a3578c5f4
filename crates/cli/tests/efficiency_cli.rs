//! `vlbiflow record --discard` and `vlbiflow net efficiency` as a user runs them: real processes, loopback,
//! and two network namespaces joined by veth.

mod common;
use common::{run, sh};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines of a child's stderr, as they come.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_line(rx: &mpsc::Receiver<String>, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(e) => panic!("no {needle:?} line within {timeout:?}: {e}"),
        }
    }
}

/// The output of `child`, which must end by itself within `limit` (a bound on hanging, not a measurement).
fn output_within(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            panic!("did not end within {limit:?}");
        }
    }
}

use vlbiflow_testkit::net::free_udp_port;

#[test]
fn record_discard_needs_no_disk_and_counts_loss() {
    let port = free_udp_port();
    let addr = format!("127.0.0.1:{port}");
    let mut rec = Command::new(BIN)
        .args([
            "record",
            "--stream",
            &format!("a=vdif@{addr},psn"),
            "--discard",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut rec);
    wait_line(&lines, "capture only", Duration::from_secs(10));
    let gen = run(&[
        BIN,
        "gen",
        "--dest",
        &addr,
        "--pps",
        "2000",
        "--count",
        "3000",
        "--psn",
        "--drop-every",
        "100",
        "-q",
    ]);
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stderr));
    // Wait (bounded) until the progress line has counted every frame, then stop as a user does.
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid = rec.id().to_string();
    let mut seen = false;
    while Instant::now() < deadline && !seen {
        if let Ok(l) = lines.recv_timeout(Duration::from_millis(500)) {
            seen = l.contains("2970 pkts");
        }
    }
    sh(&["kill", "-INT", &pid]);
    let out = output_within(rec, Duration::from_secs(20));
    // Ctrl-C: the summary, then 130
    assert_eq!(out.status.code(), Some(130), "record --discard failed");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &meta["streams"][0]["counters"];
    // 30 frames left out; the last (frame 2999) ends the stream, so no later frame reveals it: 29 lost.
    assert_eq!(
        (c["packets"].as_u64(), c["lost"].as_u64()),
        (Some(2970), Some(29)),
        "{c}"
    );
    // No disk is part of a capture-only run: nothing was written.
    assert_eq!(meta["disks"].as_array().map(Vec::len), Some(0));
}

#[test]
fn efficiency_help_and_bad_arguments() {
    let out = run(&[BIN, "net", "efficiency", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Examples:") && text.contains("--transports"),
        "{text}"
    );
    let out = run(&[BIN, "net", "efficiency", "127.0.0.1", "--transports", "rdma"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown transport \"rdma\""));
    let out = run(&[BIN, "net", "efficiency", "127.0.0.1", "--gso", "16"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("65507"));
}

/// Two namespaces joined by veth; deleted on drop.
struct Netns {
    a: String,
    b: String,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.a]);
        let _ = run(&["ip", "netns", "del", &self.b]);
    }
}

// Ignored by default because it needs root; `scripts/test` runs it (--include-ignored) when root.
#[test]
#[ignore = "needs root for network namespaces: run as root with --include-ignored (scripts/test does)"]
fn netns_efficiency_every_transport_table_json_plots() {
    let id = std::process::id();
    let ns = Netns {
        a: format!("vfeff-a-{id}"),
        b: format!("vfeff-b-{id}"),
    };
    let probe = run(&["ip", "netns", "add", &ns.a]);
    assert!(
        probe.status.success(),
        "`ip netns add` failed ({}): this test needs root",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    sh(&["ip", "netns", "add", &ns.b]);
    let (va, vb) = (format!("vea{id}"), format!("veb{id}"));
    let (va, vb) = (&va[..va.len().min(15)], &vb[..vb.len().min(15)]);
    let net = format!("10.234.{}", id % 250);
    let (ip_a, ip_b) = (format!("{net}.1"), format!("{net}.2"));
    sh(&["ip", "link", "add", va, "type", "veth", "peer", "name", vb]);
    sh(&["ip", "link", "set", va, "netns", &ns.a]);
    sh(&["ip", "link", "set", vb, "netns", &ns.b]);
    sh(&["ip", "-n", &ns.a, "addr", "add", &format!("{ip_a}/24"), "dev", va]);
    sh(&["ip", "-n", &ns.b, "addr", "add", &format!("{ip_b}/24"), "dev", vb]);
    for (n, v) in [(&ns.a, va), (&ns.b, vb)] {
        sh(&["ip", "-n", n, "link", "set", v, "mtu", "9000", "up"]);
        sh(&["ip", "-n", n, "link", "set", "lo", "up"]);
    }
    let listen = format!("{ip_b}:14233");
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.b,
            BIN,
            "net",
            "responder",
            "--listen",
            &listen,
            "--idle-timeout",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = stderr_lines(&mut child);
    let _responder = Proc(child);
    wait_line(&log, "listening on", Duration::from_secs(10));

    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("eff.png");
    let json_file = dir.path().join("eff.json");
    // Three flows at a modest paced rate, every transport, one repeat of half a second each.
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.a,
            BIN,
            "net",
            "efficiency",
            &ip_b,
            "--streams",
            "3",
            "--rate",
            "600Mbps",
        ])
        .args([
            "--duration",
            "0.5",
            "--repeats",
            "1",
            "--path-loss",
            "0",
            "--json",
            "--plot",
        ])
        .arg(&plot)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(client, Duration::from_secs(90));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(&json_file, &out.stdout).unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = r["runs"].as_array().unwrap();
    let unavailable = r["unavailable"].as_array().unwrap();
    // Every transport is either measured or said to be unavailable, with a reason.
    assert_eq!(runs.len() + unavailable.len(), 6, "{r}");
    assert!(unavailable
        .iter()
        .all(|u| u["unavailable"].as_str().is_some_and(|s| !s.is_empty())));
    for t in ["udp", "udp-gro", "tcp"] {
        assert!(
            runs.iter().any(|x| x["params"]["setup"]["transport"] == t),
            "{t} not measured"
        );
    }
    for run in runs {
        let t = run["params"]["setup"]["transport"].as_str().unwrap();
        let sent: u64 = run["send"]["sent"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        let received = run["remote"]["received"].as_u64().unwrap();
        let bytes = run["remote"]["bytes"].as_u64().unwrap();
        assert!(received > 0 && bytes > 0, "{t}: nothing received");
        if t == "tcp" {
            // A byte stream: everything sent arrived.
            assert_eq!(bytes, run["send"]["bytes"].as_u64().unwrap(), "{t}");
        } else {
            assert_eq!(run["send"]["sent"].as_array().unwrap().len(), 3);
            assert!(received <= sent, "{t}: {received} received of {sent}");
            assert_eq!(bytes, received * 8232, "{t}");
            // veth keeps order and never duplicates.
            assert_eq!(run["remote"]["out_of_order"], 0, "{t}");
            assert_eq!(run["remote"]["duplicates"], 0, "{t}");
        }
        let m = &run["metrics"];
        assert!(m["same_host"].as_bool().unwrap(), "both ends share this kernel");
        assert!(m["gbps"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(r["summary"].as_array().unwrap().len(), runs.len());
    let png = std::fs::read(&plot).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");

    // The saved report re-renders as a table and a loss plot without a responder.
    let loss = dir.path().join("loss.svg");
    let out = run(&[
        BIN,
        "net",
        "efficiency",
        "--from",
        json_file.to_str().unwrap(),
        "--plot-loss",
        loss.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().next().unwrap().starts_with("transport"), "{table}");
    assert!(
        table.contains("Energy (RAPL)") || table.contains("Energy: RAPL"),
        "{table}"
    );
    assert!(std::fs::read_to_string(&loss).unwrap().contains("<svg"));
}
