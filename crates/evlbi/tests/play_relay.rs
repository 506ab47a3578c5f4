//! Replay of a recording and the relay, over real files and loopback sockets.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{frame, udps, LEN, RATE};
use vlbiflow_evlbi::dest::DestSpec;
use vlbiflow_evlbi::play::{run_play, PlayConfig, PlayRate};
use vlbiflow_evlbi::receive::KeyChoice;
use vlbiflow_evlbi::relay::{run_relay, RelayConfig, RelayReorder};

fn psn_of(d: &[u8]) -> u64 {
    u64::from_le_bytes(d[..8].try_into().unwrap())
}

/// A plain VDIF file of two threads, `n` time indexes each (thread 0 then 1 per index).
fn write_file(dir: &std::path::Path, n: u64) -> std::path::PathBuf {
    let p = dir.join("two.vdif");
    let mut data = Vec::new();
    for i in 0..n {
        for th in 0..2 {
            data.extend_from_slice(&frame(th, i));
        }
    }
    std::fs::write(&p, data).unwrap();
    p
}

#[test]
fn play_sends_every_frame_in_order_with_psn_at_the_recorded_rate() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1200u64;
    let file = write_file(dir.path(), n);
    let rec = vlbiflow_reader::locate(&[file.display().to_string()], &[]).unwrap();
    let (rx, addr) = common::listener();
    let reader = std::thread::spawn(move || common::recv_n(&rx, 2 * n as usize));
    let mut c = PlayConfig::new(addr);
    c.read_ahead = 4 << 20;
    c.first_psn = 42;
    let st = run_play(&rec, &c, &AtomicBool::new(false), &mut |_| {}).unwrap();
    let got = reader.join().unwrap();
    for (k, d) in got.iter().enumerate() {
        assert_eq!(psn_of(d), 42 + k as u64);
        assert_eq!(&d[8..], &frame((k % 2) as u16, k as u64 / 2)[..]);
    }
    assert_eq!(st.frames, 2 * n);
    assert_eq!((st.frame_rate, st.threads), (Some(RATE), 2));
    assert_eq!(st.target_bps, f64::from(RATE) * 2.0 * LEN as f64 * 8.0);
    // Paced by the time stamps: the last frame cannot go before its time, 1.199 s after the first.
    assert!(
        st.elapsed_s >= (n - 1) as f64 / f64::from(RATE),
        "{}",
        st.elapsed_s
    );
    assert!(st.findings.is_empty(), "{:?}", st.findings);
}

#[test]
fn play_starts_at_a_frame_time_and_at_a_set_rate() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), 1200);
    let rec = vlbiflow_reader::locate(&[file.display().to_string()], &[]).unwrap();
    let (rx, addr) = common::listener();
    let reader = std::thread::spawn(move || common::recv_n(&rx, 400));
    let mut c = PlayConfig::new(addr);
    c.read_ahead = 4 << 20;
    c.psn = false;
    // Second 1001 of epoch 50 is index 1000: frames 2000.. of the file.
    c.start = Some((vlbiflow_formats::time::epoch_start_unix(50) + 1001) as f64);
    c.rate = PlayRate::Bits(50e6);
    let st = run_play(&rec, &c, &AtomicBool::new(false), &mut |_| {}).unwrap();
    let got = reader.join().unwrap();
    for (k, f) in got.iter().enumerate() {
        assert_eq!(f, &frame((k % 2) as u16, 1000 + k as u64 / 2));
    }
    assert_eq!((st.skipped, st.frames), (2000, 400));
}

#[test]
fn relay_reorders_fans_out_and_passes_gaps_on_in_the_psn() {
    let (a, a_addr) = common::listener();
    let (b, b_addr) = common::listener();
    let dests = vec![
        DestSpec::parse(&format!("a=udps@{a_addr}")).unwrap(),
        DestSpec::parse(&format!("b=vdif@{b_addr},threads=1")).unwrap(),
    ];
    let mut c = RelayConfig::new("127.0.0.1:0".parse().unwrap(), dests);
    c.frame_len = LEN;
    c.recv_buffer = 16 << 20;
    c.reorder = Some(RelayReorder {
        key: KeyChoice::Psn,
        window: 64,
        deadline: Duration::from_secs(5),
        threads: vec![0],
        frame_rate: None,
        send_fill: false,
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, ready) = mpsc::channel();
    let s2 = stop.clone();
    let relay = std::thread::spawn(move || {
        run_relay(&c, &s2, &mut |s| {
            if s.elapsed_s == 0.0 {
                let _ = tx.send(s.listen.parse::<SocketAddr>().unwrap());
            }
        })
        .unwrap()
    });
    let to = ready.recv_timeout(Duration::from_secs(20)).unwrap();
    // PSN 0..999, threads alternating; 10 and 500 lost; pairs swapped every 50; garbage.
    let mut order: Vec<u64> = (0..1000).filter(|k| *k != 10 && *k != 500).collect();
    let mut swaps = 0;
    for i in (21..900).step_by(50) {
        order.swap(i, i + 1);
        swaps += 1;
    }
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    for (n, &k) in order.iter().enumerate() {
        s.send_to(&udps(k, &frame((k % 2) as u16, k)), to).unwrap();
        if n == 100 {
            s.send_to(&[1u8; 77], to).unwrap();
        }
        if n % 50 == 49 {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    let got_a = common::recv_n(&a, 998);
    let got_b = common::recv_n(&b, 500);
    stop.store(true, Ordering::SeqCst);
    let st = relay.join().unwrap();
    // In order; a lost frame's PSN is not reused, so the next hop sees the gap.
    let want: Vec<u64> = (0..1000).filter(|k| *k != 10 && *k != 500).collect();
    let psns: Vec<u64> = got_a.iter().map(|d| psn_of(d)).collect();
    assert_eq!(psns, want);
    for d in &got_a {
        let k = psn_of(d);
        assert_eq!(&d[8..], &frame((k % 2) as u16, k)[..]);
    }
    for (j, f) in got_b.iter().enumerate() {
        assert_eq!(f, &frame(1, 2 * j as u64 + 1));
    }
    let r = st.reorder.unwrap();
    assert_eq!((r.filled, r.out_of_order, r.late), (2, swaps, 0));
    assert_eq!(st.rejected, 1);
    assert_eq!(st.destinations[0].sent, 998);
    assert_eq!(st.destinations[1].sent, 500);
}
