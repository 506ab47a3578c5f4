//! `vlbiflow pathemu` as a user runs it: help, argument errors, and (as root) a real path between two
//! namespaces made for the test (`vf-pe-<pid>-...`): ready line, lossy forwarding, JSON-lines drop log,
//! JSON summary on SIGTERM, and the namespaces removed afterwards. The emulator's accuracy is verified in
//! crates/pathemu/tests/verify.rs.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

#[test]
fn help_has_examples_and_explains_the_loss_models() {
    let out = Command::new(BIN).args(["pathemu", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for want in [
        "Examples:",
        "--rtt 50ms",
        "--ge",
        "Gilbert-Elliott",
        "1-h",
        "pathemu: ready",
        "--drop-log",
    ] {
        assert!(help.contains(want), "help lacks {want:?}");
    }
}

#[test]
fn bad_arguments_are_usage_errors_naming_the_option() {
    for (args, want) in [
        (&["--loss", "150%"][..], "--loss"),
        (&["--loss", "x"][..], "--loss"),
        (&["--ge", "0.1"][..], "--ge"),
        (&["--ge", "0,0"][..], "never moves"),
        (&["--rate", "1Gbps", "--queue", "100"][..], "--queue"),
        (&["--rate", "fast"][..], "--rate"),
        (&["--delay", "2h"][..], "--delay"),
        (&["--mtu", "100"][..], "--mtu"),
        (&["--ns-a", "same", "--ns-b", "same"][..], "same"),
        (&["--ns-a", "../x"][..], "namespace name"),
    ] {
        let out = Command::new(BIN).arg("pathemu").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    }
}

fn udp_in(ns: &str, addr: &str) -> UdpSocket {
    let path = Path::new("/run/netns").join(ns);
    let addr = addr.to_string();
    std::thread::spawn(move || {
        let f = File::open(&path).expect("opening the namespace");
        // SAFETY: a valid namespace descriptor; only this short-lived thread changes namespace.
        assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
        UdpSocket::bind(addr).expect("bind in namespace")
    })
    .join()
    .unwrap()
}

/// Without root it cannot make namespaces or devices: it must say so and fail, not hang. As root the test
/// runs the emulator as user `nobody` (setpriv), so this path is tested whoever runs the tests.
#[test]
fn without_root_it_says_so_and_fails() {
    let pid = std::process::id();
    let (ns_a, ns_b) = (format!("vf-pe-{pid}-na"), format!("vf-pe-{pid}-nb"));
    let args = [
        "pathemu",
        "--ns-a",
        &ns_a,
        "--ns-b",
        &ns_b,
        "--rtt",
        "10ms",
        "--duration",
        "5",
    ];
    let is_root = rustix::process::geteuid().is_root();
    let mut cmd = if is_root {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(BIN);
        c
    } else {
        Command::new(BIN)
    };
    let out = cmd.args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // the system refusing namespaces or devices is an I/O error (exit 5)
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("namespace") || err.contains("TUN"), "{err}");
    assert!(!Path::new("/run/netns").join(&ns_a).exists());
}

#[test]
#[ignore = "needs root: makes network namespaces and TUN devices (scripts/test runs it as root)"]
fn forwards_between_namespaces_logs_drops_and_cleans_up() {
    let pid = std::process::id();
    let (ns_a, ns_b) = (format!("vf-pe-{pid}-ca"), format!("vf-pe-{pid}-cb"));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("drops.jsonl");
    let mut child = Command::new(BIN)
        .args([
            "pathemu", "--ns-a", &ns_a, "--ns-b", &ns_b, "--rtt", "10ms", "--loss", "30%", "--seed", "5",
        ])
        .args(["--impair", "a-b", "--json", "--duration", "60", "--drop-log"])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) if l.starts_with("pathemu: ready") => break l,
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                panic!("no ready line: {e}");
            }
        }
    };
    assert!(ready.contains("10.77.0.1") && ready.contains("10.77.0.2") && ready.contains("random loss"));

    let recv = udp_in(&ns_b, "10.77.0.2:9100");
    recv.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let send = udp_in(&ns_a, "10.77.0.1:0");
    send.connect("10.77.0.2:9100").unwrap();
    const N: u32 = 300;
    for i in 0..N {
        send.send(&i.to_be_bytes()).unwrap();
    }
    // End markers until one arrives (the path is FIFO: everything before it has arrived or was dropped).
    let mut got = BTreeSet::new();
    let mut markers = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    'outer: while Instant::now() < deadline {
        send.send(&u32::MAX.to_be_bytes()).unwrap();
        markers += 1;
        let mut buf = [0u8; 16];
        while let Ok(n) = recv.recv(&mut buf) {
            let v = u32::from_be_bytes(buf[..n].try_into().unwrap());
            if v == u32::MAX {
                break 'outer;
            }
            got.insert(v);
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON summary");
    let ab = &v["report"]["a_to_b"];
    assert_eq!(ab["in_packets"], u64::from(N) + markers);
    // --impair a-b: the return direction has the delay and nothing else.
    assert_eq!(v["config"]["loss"]["model"], "random");
    assert_eq!(v["config_b_to_a"]["loss"]["model"], "none");
    assert_eq!(v["config_b_to_a"]["delay_ns"], 5_000_000);
    assert_eq!(v["report"]["b_to_a"]["dropped_random"], 0);
    let mut logged = BTreeSet::new();
    let mut lines = 0;
    for l in std::fs::read_to_string(&log).unwrap().lines() {
        let d: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(d["reason"], "random");
        if d["dir"] == "a-b" {
            lines += 1;
            let seq = u32::from_str_radix(d["payload_hex"].as_str().unwrap(), 16).unwrap();
            if seq != u32::MAX {
                logged.insert(seq);
            }
        }
    }
    assert_eq!(ab["dropped_random"], lines);
    let missing: BTreeSet<u32> = (0..N).filter(|i| !got.contains(i)).collect();
    assert_eq!(missing, logged);
    assert!(
        (40..=140).contains(&missing.len()),
        "{} of {N} lost at 30%",
        missing.len()
    );
    for ns in [&ns_a, &ns_b] {
        assert!(!Path::new("/run/netns").join(ns).exists(), "{ns} left behind");
    }
}
