//! The sink on real loopback sockets: sequence-number accounting and stopping on the flag.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use vlbiflow_sink::{Sink, SinkConfig, StopReason};
use vlbiflow_udp::send::BatchSender;
use vlbiflow_udp::socket::{open_udp, UdpConfig};

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn sender(dest: SocketAddr) -> UdpSocket {
    open_udp(&UdpConfig::sender(dest)).unwrap().0
}

#[test]
fn sink_accounts_sequence_numbers() {
    let mut cfg = SinkConfig::new(localhost());
    cfg.psn = true;
    cfg.idle_timeout = Some(Duration::from_millis(300));
    cfg.max_duration = Some(Duration::from_secs(8));
    let sink = Sink::open(cfg).unwrap();
    let dest = sink.local_addr();
    let stop = AtomicBool::new(false);
    let mut seconds = Vec::new();
    let report = std::thread::scope(|s| {
        let handle = s.spawn(|| sink.run(&stop, |sec| seconds.push(*sec)).unwrap());
        let tx_sock = sender(dest);
        let body = vec![5u8; 1000];
        // 0..3000 with 100..110 missing, 2000 repeated, 2500 and 2501 swapped, and one runt.
        let mut order: Vec<u64> = (0..3000).filter(|p| !(100..110).contains(p)).collect();
        order.insert(2000, 2000);
        let pos = order.iter().position(|&p| p == 2500).unwrap();
        order.swap(pos, pos + 1);
        let psns: Vec<[u8; 8]> = order.iter().map(|p| p.to_le_bytes()).collect();
        let mut tx = BatchSender::new(32);
        tx.send_all(&tx_sock, psns.iter().map(|p| [&p[..], &body[..]]))
            .unwrap();
        tx_sock.send(&[1, 2, 3]).unwrap();
        handle.join().unwrap()
    });
    assert_eq!(report.stop_reason, StopReason::Idle);
    let psn = report.psn.unwrap();
    // Datagrams the kernel dropped show up as extra loss; on loopback there should be none.
    assert_eq!(report.kernel_drops, 0);
    assert_eq!(report.datagrams, 3000 - 10 + 1 + 1);
    assert_eq!(report.short, 1);
    assert_eq!(psn.seen, 2991);
    assert_eq!(psn.lost, 10);
    assert_eq!(psn.duplicates, 1);
    assert_eq!(psn.out_of_order, 1);
    assert_eq!(seconds.iter().map(|s| s.datagrams).sum::<u64>(), report.datagrams);
    assert_eq!(seconds.iter().map(|s| s.lost).sum::<i64>(), 10);
    assert!(!seconds.last().unwrap().complete);
}

#[test]
fn sink_stops_on_flag() {
    let stop = AtomicBool::new(true);
    let cfg = SinkConfig::new(localhost());
    let report = vlbiflow_sink::run_sink(cfg, &stop, |_| {}).unwrap();
    assert_eq!(report.stop_reason, StopReason::Stopped);
    assert_eq!(report.datagrams, 0);
    stop.store(false, Ordering::Relaxed);
}
