//! `vlbiflow net` as a user runs it: real processes, loopback, and two network namespaces joined by
//! veth with `tc tbf` limiting one direction.

mod common;
use common::{run, sh};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

use vlbiflow_testkit::net::free_tcp_port as free_port;

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a responder (through `prefix`, e.g. `ip netns exec NS`) and waits for its listening line;
/// returns the process and a channel carrying its later log lines.
fn start_responder(prefix: &[&str], listen: &str) -> (Proc, mpsc::Receiver<String>) {
    let mut args: Vec<&str> = prefix.to_vec();
    args.extend([
        BIN,
        "net",
        "responder",
        "--listen",
        listen,
        "--idle-timeout",
        "20",
    ]);
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn responder");
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let proc = Proc(child);
    wait_line(&rx, "listening on", Duration::from_secs(10));
    (proc, rx)
}

fn wait_line(rx: &mpsc::Receiver<String>, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(e) => panic!("no {needle:?} line from the responder within {timeout:?}: {e}"),
        }
    }
}

/// The output of `child`, which must end by itself within `limit` (else it is killed and the test
/// fails): a bound on hanging, not a measurement.
fn output_within(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for the client"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            panic!("the client did not end within {limit:?}");
        }
    }
}

fn spawn(args: &[&str]) -> Child {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn every_subcommand_has_help_with_examples() {
    for sub in ["responder", "bw", "lat", "tcp", "history"] {
        let out = run(&[BIN, "net", sub, "--help"]);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Examples:"), "{sub}: {text}");
    }
}

#[test]
fn unreachable_responder_is_a_quick_clear_error() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    // Nothing listens: connecting is refused at once; the bound only catches a client that hangs.
    let client = spawn(&[BIN, "net", "bw", &addr, "--no-archive", "--timeout", "2"]);
    let out = output_within(client, Duration::from_secs(20));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port}")) && err.contains("connect"),
        "{err}"
    );
    let out = run(&[BIN, "net", "bw", "127.0.0.1", "--size", "8", "--no-archive"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn responder_killed_mid_test_gives_an_error_with_partial_results() {
    let listen = format!("127.0.0.1:{}", free_port());
    let (mut responder, rx) = start_responder(&[], &listen);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.sqlite");
    let client = Command::new(BIN)
        .args([
            "net",
            "bw",
            &listen,
            "--size",
            "1000",
            "--count",
            "200000",
            "--wait",
            "20",
            "--timeout",
            "3",
        ])
        .arg("--archive")
        .arg(&archive)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The test (4 s of sending) has started once the responder logs it; then kill -9 it.
    wait_line(&rx, "bw test", Duration::from_secs(10));
    responder.0.kill().unwrap();
    // The client ends by itself: its control timeout (3 s) bounds every wait.
    let out = output_within(client, Duration::from_secs(30));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("partial result") && err.contains("\"sent\""),
        "{err}"
    );
    assert!(
        err.contains("closed by the other end") || err.contains("reset"),
        "{err}"
    );
}

/// Two namespaces joined by veth; deleted on drop.
struct Netns {
    a: String,
    b: String,
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and with it the peer.
        let _ = run(&["ip", "netns", "del", &self.a]);
        let _ = run(&["ip", "netns", "del", &self.b]);
    }
}

// Ignored by default because it needs root; `scripts/test` runs it (--include-ignored) when root.
#[test]
#[ignore = "needs root for network namespaces: run as root with --include-ignored (scripts/test does)"]
fn netns_tbf_zero_loss_search_latency_and_archive() {
    let id = std::process::id();
    let ns = Netns {
        a: format!("vfnet-a-{id}"),
        b: format!("vfnet-b-{id}"),
    };
    let probe = run(&["ip", "netns", "add", &ns.a]);
    assert!(
        probe.status.success(),
        "`ip netns add` failed ({}): this test needs root",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    sh(&["ip", "netns", "add", &ns.b]);
    let (va, vb) = (format!("vfa{id}"), format!("vfb{id}"));
    let (va, vb) = (&va[..va.len().min(15)], &vb[..vb.len().min(15)]);
    sh(&["ip", "link", "add", va, "type", "veth", "peer", "name", vb]);
    sh(&["ip", "link", "set", va, "netns", &ns.a]);
    sh(&["ip", "link", "set", vb, "netns", &ns.b]);
    sh(&["ip", "-n", &ns.a, "addr", "add", "10.231.7.1/24", "dev", va]);
    sh(&["ip", "-n", &ns.b, "addr", "add", "10.231.7.2/24", "dev", vb]);
    for (n, v) in [(&ns.a, va), (&ns.b, vb)] {
        sh(&["ip", "-n", n, "link", "set", v, "up"]);
        sh(&["ip", "-n", n, "link", "set", "lo", "up"]);
    }
    // Limit the client -> responder direction.
    sh(&[
        "ip", "netns", "exec", &ns.a, "tc", "qdisc", "add", "dev", va, "root", "tbf", "rate", "200mbit",
        "burst", "32kb", "latency", "50ms",
    ]);

    let (_responder, _log) = start_responder(&["ip", "netns", "exec", &ns.b], "10.231.7.2:14233");
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("net.sqlite");
    let archive = archive.to_str().unwrap();
    let plot = dir.path().join("sweep.png");
    let client = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["ip", "netns", "exec", &ns.a, BIN, "net"];
        args.extend_from_slice(extra);
        args.extend(["--archive", archive, "--json", "-q"]);
        json(&run(&args))
    };

    // RFC 2544 search: 200 Mb/s through tbf (which counts 1472 + 8 + 20 + 14 bytes a frame) is
    // 200 x 1472/1514 = 194.5 Mb/s of UDP payload. A 1.5 s trial somewhat faster still loses nothing
    // while tbf's queue (50 ms at 200 Mb/s plus the 32 kB burst) absorbs the excess, and a trial
    // passes when the sender offered at least 98 % of its rate: no trial above
    // (200 + 10.26 Mb / 1.5 s) x 1472/1514 / 0.98 = 205.2 Mb/s can pass. Below the limit a busy
    // machine may lose frames for its own reasons (receiving socket, late sender) and the search
    // then rightly reports less (0.8 x the limit was missed once at a load average of 12 on two
    // cores); only a result far below the limit means the search is wrong. How close it comes on a
    // quiet machine is the benchmark's figure (bench/net.sh, docs/bench-net.md).
    let v = client(&[
        "bw",
        "10.231.7.2",
        "--size",
        "1472",
        "--find-zero-loss",
        "--trial-duration",
        "1.5",
        "--count",
        "4000",
    ]);
    let z = &v["zero_loss"][0];
    let user = z["user_mbps"].as_f64().expect("a zero-loss rate");
    let limit = 200.0 * 1472.0 / 1514.0;
    let queue_mbps = (200e6 * 0.05 + 32.0 * 1024.0 * 8.0) / 1.5 / 1e6;
    let highest = (200.0 + queue_mbps) * 1472.0 / 1514.0 / 0.98;
    assert!(
        (0.5 * limit..=highest).contains(&user),
        "zero-loss user rate {user} Mb/s outside {:.1}..={highest:.1} (limit {limit:.1}): {z}",
        0.5 * limit
    );

    // A short sweep across the limit: loss past it (589 Mb/s offered), none well below it
    // (147 Mb/s; frames the receiving socket dropped do not count), throughput flat at the limit.
    let v = client(&[
        "bw",
        "10.231.7.2",
        "--size",
        "1472",
        "--wait",
        "20,40,80",
        "--count",
        "3000",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let rows = v["results"].as_array().unwrap();
    let lost = |i: usize| rows[i]["lost"].as_u64().unwrap();
    let lost_in_network = |i: usize| rows[i]["lost_in_network"].as_i64().unwrap();
    assert!(
        lost(0) > 0 && lost_in_network(2) <= 0,
        "{}",
        serde_json::to_string(rows).unwrap()
    );
    let wire = rows[0]["recv_wire_rate_mbps"].as_f64().unwrap();
    assert!((wire - 200.0).abs() < 20.0, "flat-out receive wire rate {wire}");
    assert!(std::fs::metadata(&plot).unwrap().len() > 10_000);

    // For the latency probes the bucket holds one 1500-byte packet: tbf's 32 kB burst let whole probes
    // pass unserialised, so latency grew with size only by copy costs, which noise on a VM can invert
    // (one clean-clone run: medians 420 us at 64 B, 371 us at 8192 B). Now the fragments of an 8192-byte
    // probe after the first wait ~270 us at 200 Mb/s.
    sh(&[
        "ip", "netns", "exec", &ns.a, "tc", "qdisc", "change", "dev", va, "root", "tbf", "rate", "200mbit",
        "burst", "1600", "latency", "50ms",
    ]);
    let v = client(&[
        "lat",
        "10.231.7.2",
        "--sizes",
        "64,512,1472,4096,8192",
        "--count",
        "200",
    ]);
    let r = &v["results"][0];
    let (slope, icpt) = (
        r["slope_us_per_byte"].as_f64().unwrap(),
        r["intercept_us"].as_f64().unwrap(),
    );
    // Latency grows with size through the 200 Mbit/s bottleneck. The least-squares intercept itself is not
    // asserted: the first fragment of a probe passes unserialised, so the medians are not on one line and
    // the fitted intercept went negative on a loaded machine although every median was positive.
    let p50 = |i: usize| r["points"][i]["rtt_us"]["p50"].as_f64().unwrap();
    assert!(
        slope > 0.0 && p50(0) > 0.0 && p50(4) > p50(0),
        "slope {slope} intercept {icpt}, medians {} .. {}",
        p50(0),
        p50(4)
    );

    let out = run(&[BIN, "net", "history", "--archive", archive, "--json"]);
    let h = json(&out);
    let kinds: Vec<&str> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    for k in ["bw", "bw-zero-loss", "lat"] {
        assert!(kinds.contains(&k), "{k} not archived: {kinds:?}");
    }
    assert!(h
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["remote"].as_str().unwrap().starts_with("10.231.7.2")));
}

#[test]
fn ctrl_c_during_a_sweep_keeps_the_finished_tests() {
    let listen = format!("127.0.0.1:{}", free_port());
    let (_responder, rx) = start_responder(&[], &listen);
    // 41 tests of 20000 frames: interrupted once the third has started, the first two (at least)
    // must still be reported.
    let client = Command::new(BIN)
        .args([
            "net", "bw", &listen, "--size", "1000", "--wait", "0:40:1", "--count", "20000", "--json",
        ])
        .arg("--no-archive")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..3 {
        wait_line(&rx, "bw test", Duration::from_secs(20));
    }
    let kill = Command::new("kill")
        .args(["-INT", &client.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = output_within(client, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    let n = v["results"].as_array().unwrap().len();
    assert!((2..41).contains(&n), "{n} results: {v}");
}
