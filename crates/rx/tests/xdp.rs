//! The AF_XDP path between two network namespaces joined by veth (root): every datagram of the streams'
//! port range arrives once and intact through the XDP program and the UMEM; other traffic (ARP, a port
//! outside the range) still reaches the stack.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use vlbiflow_rx::xdp::{open_consecutive, XdpRx};

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// Moves the calling thread into network namespace `name`.
fn enter(name: &str) {
    let f = std::fs::File::open(format!("/var/run/netns/{name}")).unwrap();
    // SAFETY: setns on a namespace file this thread opened; affects only the calling thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {name}");
}

#[test]
#[ignore = "needs root: network namespaces, AF_XDP and an XDP program"]
fn xdp_generic_mode_delivers_every_datagram_and_passes_the_rest() {
    let id = std::process::id();
    let (a, b) = (format!("vfxa-{id}"), format!("vfxb-{id}"));
    let probe = Command::new("ip").args(["netns", "add", &a]).output().unwrap();
    assert!(probe.status.success(), "this test needs root");
    let _ns = Netns(vec![a.clone(), b.clone()]);
    sh(&["ip", "netns", "add", &b]);
    let (va, vb) = (format!("vxa{id}"), format!("vxb{id}"));
    let (va, vb) = (&va[..va.len().min(15)], &vb[..vb.len().min(15)]);
    let net = format!("10.237.{}", id % 250);
    let (ip_a, ip_b) = (format!("{net}.1"), format!("{net}.2"));
    sh(&["ip", "link", "add", va, "type", "veth", "peer", "name", vb]);
    sh(&["ip", "link", "set", va, "netns", &a]);
    sh(&["ip", "link", "set", vb, "netns", &b]);
    sh(&["ip", "-n", &a, "addr", "add", &format!("{ip_a}/24"), "dev", va]);
    sh(&["ip", "-n", &b, "addr", "add", &format!("{ip_b}/24"), "dev", vb]);
    for (n, v) in [(&a, va), (&b, vb)] {
        sh(&["ip", "-n", n, "link", "set", v, "up"]);
    }
    let ipb: Ipv4Addr = ip_b.parse().unwrap();
    let per = 1500u64;
    let size = 1400usize;
    let (tx, rx) = std::sync::mpsc::channel();
    let bname = b.clone();
    let receiver = std::thread::spawn(move || {
        enter(&bname);
        let (socks, base) = open_consecutive(IpAddr::V4(ipb), 3).unwrap();
        let ports: Vec<u16> = (0..3).map(|k| base + k).collect();
        // A plain socket on a port outside the range: its datagram must pass to the stack.
        let other = UdpSocket::bind((ipb, 0)).unwrap();
        other.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut x = XdpRx::new(ipb, &ports, size).unwrap();
        tx.send((ports, other.local_addr().unwrap())).unwrap();
        let mut seen = vec![Vec::new(); 3];
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.iter().map(Vec::len).sum::<usize>() < 3 * per as usize && Instant::now() < deadline {
            x.poll(Duration::from_millis(100), |s, d| {
                assert_eq!(d.len(), size);
                let seq = u64::from_le_bytes(d[..8].try_into().unwrap());
                assert!(
                    d[8..].iter().all(|&b| b == (seq as u8) ^ (s as u8)),
                    "stream {s} seq {seq} corrupted"
                );
                seen[s].push(seq);
            })
            .unwrap();
        }
        let mut buf = [0u8; 64];
        let got = other.recv(&mut buf).unwrap();
        drop(socks);
        (seen, x.stats(), buf[..got].to_vec())
    });
    let (ports, other) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let aname = a.clone();
    let sender = std::thread::spawn(move || {
        enter(&aname);
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        let mut d = vec![0u8; size];
        for seq in 0..per {
            for (k, &p) in ports.iter().enumerate() {
                d[..8].copy_from_slice(&seq.to_le_bytes());
                d[8..].fill((seq as u8) ^ (k as u8));
                s.send_to(&d, SocketAddr::new(IpAddr::V4(ipb), p)).unwrap();
            }
            if seq % 256 == 0 {
                std::thread::yield_now();
            }
        }
        s.send_to(b"to the stack", other).unwrap();
    });
    sender.join().unwrap();
    let (seen, stats, passed) = receiver.join().unwrap();
    for (s, v) in seen.iter().enumerate() {
        assert_eq!(v, &(0..per).collect::<Vec<_>>(), "stream {s}");
    }
    assert_eq!(stats.datagrams, 3 * per);
    assert_eq!(stats.kernel_drops, 0, "{stats:?}");
    assert_eq!(passed, b"to the stack");
}
