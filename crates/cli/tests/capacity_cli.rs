//! `vlbiflow net capacity`: help and argument errors, and (as root) hop by hop through a router
//! namespace: A -- R -- B with a 100 Mb/s tbf on R's link to B, so hop 1 is unshaped and hop 2
//! is the bottleneck.

mod common;
use common::sh;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_vlbiflow");

#[test]
fn help_has_examples_and_the_hops_option() {
    let out = Command::new(BIN)
        .args(["net", "capacity", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for want in [
        "Examples:",
        "vlbiflow net capacity 10.0.0.2 --hops",
        "--hops",
        "--min-train-mb",
        "icmp_ratelimit",
    ] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
}

#[test]
fn bad_arguments_name_the_option() {
    for (args, want) in [
        (&["--train", "10"][..], "--train 10 outside"),
        (&["--min-train-mb=-1"][..], "--min-train-mb"),
        (&["--hops", "--max-hops", "0"][..], "--max-hops"),
    ] {
        let out = Command::new(BIN)
            .args(["net", "capacity", "127.0.0.1"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{args:?}: {err}");
    }
}

/// Three namespaces, removed on drop.
struct Net(Vec<String>);

impl Drop for Net {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

#[test]
#[ignore = "needs root: makes network namespaces with veth and tc (scripts/test runs it as root)"]
fn hops_finds_the_router_and_the_shaped_second_hop() {
    let pid = std::process::id();
    let names: Vec<String> = ["a", "r", "b"].iter().map(|h| format!("vfh{pid}{h}")).collect();
    for n in &names {
        let _ = Command::new("ip").args(["netns", "del", n]).output();
    }
    let net = Net(names.clone());
    let (a, r, b) = (&net.0[0], &net.0[1], &net.0[2]);
    for n in [a, r, b] {
        sh(&["ip", "netns", "add", n]);
        sh(&["ip", "-n", n, "link", "set", "lo", "up"]);
    }
    let third = pid % 250;
    let ip = |last: u8| format!("10.215.{third}.{last}");
    sh(&[
        "ip", "link", "add", "ea", "netns", a, "type", "veth", "peer", "name", "ra", "netns", r,
    ]);
    sh(&[
        "ip", "link", "add", "eb", "netns", b, "type", "veth", "peer", "name", "rb", "netns", r,
    ]);
    for (n, dev, addr) in [
        (a, "ea", ip(1)),
        (r, "ra", ip(2)),
        (r, "rb", ip(5)),
        (b, "eb", ip(6)),
    ] {
        sh(&["ip", "-n", n, "addr", "add", &format!("{addr}/30"), "dev", dev]);
        sh(&["ip", "-n", n, "link", "set", dev, "up"]);
    }
    sh(&["ip", "-n", a, "route", "add", "default", "via", &ip(2)]);
    sh(&["ip", "-n", b, "route", "add", "default", "via", &ip(5)]);
    sh(&["ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    // Trains of ICMP answers: no ICMP rate limit in the router and at the destination.
    for n in [r, b] {
        sh(&[
            "ip",
            "netns",
            "exec",
            n,
            "sysctl",
            "-qw",
            "net.ipv4.icmp_ratemask=0",
        ]);
    }
    sh(&[
        "ip", "netns", "exec", r, "tc", "qdisc", "add", "dev", "rb", "root", "tbf", "rate", "100mbit",
        "burst", "32kb", "latency", "50ms",
    ]);
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            a,
            BIN,
            "net",
            "capacity",
            &ip(6),
            "--hops",
            "--json",
            "--train",
            "1024",
        ])
        .args(["--max-hops", "4", "--trains", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hops = j["hops"].as_array().unwrap();
    assert_eq!(hops.len(), 2, "{stderr}\n{j:#}");
    assert_eq!(hops[0]["address"], ip(2).as_str(), "{stderr}");
    assert_eq!(hops[1]["address"], ip(6).as_str(), "{stderr}");
    assert_eq!(hops[1]["destination"], true);
    // Hop 2 reads the tbf (100 Mb/s counts the 14-byte Ethernet header: 99.1 Mb/s of IP packets).
    let c2 = hops[1]["capacity_mbps"]
        .as_f64()
        .unwrap_or_else(|| panic!("{stderr}\n{j:#}"));
    assert!((c2 / 99.1 - 1.0).abs() < 0.1, "hop 2 {c2} Mb/s\n{stderr}");
    // Hop 1 is unshaped: a rate or lower bound well above it.
    let c1 = hops[0]["capacity_mbps"]
        .as_f64()
        .or(hops[0]["at_least_mbps"].as_f64())
        .unwrap();
    assert!(c1 > 2.0 * c2, "hop 1 {c1} Mb/s\n{stderr}");
    assert_eq!(j["limiting_ttl"], 2, "{stderr}");
    // The namespaces go with `net`; the test leaves nothing behind.
    drop(net);
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    for n in &names {
        assert!(!left.contains(n.as_str()), "{n} left behind");
    }
}
