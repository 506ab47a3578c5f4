//! Measures single-thread send throughput over loopback into the discarding sink.
//!
//! ```text
//! cargo run --release -p vlbiflow-sink --example loopback_rate -- [--gso] [--gro] [--psn] [--seconds S] [--batch N] [--busy-us U]
//! ```
//! Sends 8224-byte datagrams (8232 with `--psn`) as fast as possible from one thread: with `sendmmsg`
//! batches of N two-part messages, or with `--gso` batches of N GSO messages of 7 datagrams each.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vlbiflow_sink::{Sink, SinkConfig};
use vlbiflow_udp::socket::{open_udp, UdpConfig};
use vlbiflow_udp::{BatchSender, UdpCounters};

const FRAME: usize = 8224;

fn main() {
    let mut gso = false;
    let mut gro = false;
    let mut psn = false;
    let mut seconds = 3.0f64;
    let mut batch = 32usize;
    let mut busy_us = 0u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--gso" => gso = true,
            "--gro" => gro = true,
            "--psn" => psn = true,
            "--seconds" => seconds = args.next().and_then(|v| v.parse().ok()).expect("--seconds S"),
            "--busy-us" => busy_us = args.next().and_then(|v| v.parse().ok()).expect("--busy-us N"),
            "--batch" => batch = args.next().and_then(|v| v.parse().ok()).expect("--batch N"),
            other => panic!("unknown argument {other}"),
        }
    }
    let datagram = FRAME + if psn { 8 } else { 0 };
    let mut cfg = SinkConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.udp.gro = gro;
    cfg.psn = psn;
    cfg.batch = 64;
    cfg.busy_wait = Duration::from_micros(busy_us);
    cfg.idle_timeout = Some(Duration::from_millis(500));
    let sink = Sink::open(cfg).expect("open sink");
    let dest = sink.local_addr();
    let stop = AtomicBool::new(false);
    let before = UdpCounters::read().ok();

    let (report, sent, stats, elapsed) = std::thread::scope(|s| {
        let sink_thread = s.spawn(|| {
            sink.run(&stop, |sec| {
                if sec.complete {
                    eprintln!(
                        "  sink second {}: {:.2} Gb/s, {} datagrams",
                        sec.unix_second,
                        sec.gbps(),
                        sec.datagrams
                    )
                }
            })
        });
        let mut scfg = UdpConfig::sender(dest);
        scfg.send_buffer = Some(16 << 20);
        let (sock, _) = open_udp(&scfg).expect("open sender");
        let frame = vec![0x5au8; FRAME];
        let mut tx = BatchSender::new(batch);
        let mut seq = 0u64;
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(seconds);
        if gso {
            let segs = 7;
            let mut bufs: Vec<Vec<u8>> = (0..batch).map(|_| vec![0x5au8; segs * datagram]).collect();
            while Instant::now() < end {
                if psn {
                    for b in bufs.iter_mut() {
                        for chunk in b.chunks_exact_mut(datagram) {
                            chunk[..8].copy_from_slice(&seq.to_le_bytes());
                            seq += 1;
                        }
                    }
                }
                let mut bt = tx.batch();
                for b in &bufs {
                    bt.push_gso(&[b], datagram as u16).expect("gso");
                }
                bt.flush(&sock).expect("send");
            }
        } else {
            let mut psns = vec![[0u8; 8]; batch];
            while Instant::now() < end {
                for p in psns.iter_mut() {
                    *p = seq.to_le_bytes();
                    seq += 1;
                }
                let mut bt = tx.batch();
                for p in &psns {
                    if psn {
                        bt.push(&[p, &frame]);
                    } else {
                        bt.push(&[&frame]);
                    }
                }
                bt.flush(&sock).expect("send");
            }
        }
        let elapsed = start.elapsed();
        let report = sink_thread.join().unwrap().expect("sink");
        stop.store(true, Ordering::Relaxed);
        (report, tx.stats().datagrams, tx.stats(), elapsed)
    });
    let send_gbps = stats.bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e9;
    println!(
        "mode={} gro={gro} psn={psn} batch={batch}: sent {sent} datagrams ({send_gbps:.2} Gb/s, {} syscalls), \
         sink got {} datagrams in {} messages, {} calls = {:.2} Gb/s, kernel drops {}, psn {:?}",
        if gso { "gso" } else { "sendmmsg" },
        stats.syscalls,
        report.datagrams,
        report.messages,
        report.syscalls,
        report.gbps(),
        report.kernel_drops,
        report.psn,
    );
    if let (Some(b), Ok(a)) = (before, UdpCounters::read()) {
        println!("  /proc/net/snmp delta: {:?}", a.delta(&b));
    }
}
