//! Capture only (`RecorderConfig::discard`): the same stream, with loss, reordering, duplicates, garbage and
//! unwanted threads, recorded once to disks and once capture-only over real UDP on 127.0.0.1 gives the same
//! counters; capture-only writes nothing and recycles its blocks.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use vlbiflow_recorder::{Recorder, RecorderConfig, RecorderEvent, ScanSummary, StreamSpec};

const FRAME: usize = 1032;
const WAIT: Duration = Duration::from_secs(20);

fn config(disks: Vec<PathBuf>, scan: &str, discard: bool) -> RecorderConfig {
    let streams = vec![
        StreamSpec::parse(&format!("p=vdif@127.0.0.1:0,frame-size={FRAME},psn")).unwrap(),
        StreamSpec::parse(&format!("t=vdif@127.0.0.1:0,frame-size={FRAME},threads=0,1")).unwrap(),
    ];
    let mut c = RecorderConfig::new(streams, disks, scan);
    c.format = vlbiflow_scan::ScanFormat::Flexbuff;
    c.block_size = 64 * 1024;
    c.recv_buffer = 64 << 20;
    c.pool_blocks = Some(400);
    c.discard = discard;
    c
}

/// One stream with PSN (gaps, a swap, a duplicate, garbage) and one without (VDIF time loss on thread 0,
/// thread 2 unwanted), sent once to `addrs`; `between(n)` runs after the first stream's `n` datagrams are
/// out and before the second stream's. Returns datagrams sent per stream.
fn send_lossy(addrs: &[SocketAddr], between: impl Fn(u64)) -> [u64; 2] {
    let sock = sender();
    let mut order: Vec<u64> = (0..3000).filter(|s| s % 97 != 5).collect();
    let i = order.iter().position(|&s| s == 700).unwrap();
    order.swap(i, i + 1);
    let j = order.iter().position(|&s| s == 800).unwrap();
    order.insert(j, 800);
    let mut buf = vec![0u8; FRAME + 8];
    let mut sent = [0u64; 2];
    for (n, &seq) in order.iter().enumerate() {
        buf[..8].copy_from_slice(&(1_000 + seq).to_ne_bytes());
        vdif_frame(&mut buf[8..], seq, 0);
        send_all(&sock, &buf, addrs[0]);
        sent[0] += 1;
        if n % 500 == 0 {
            // The right size, not a VDIF frame: rejected.
            send_all(&sock, &[0xff; FRAME + 8], addrs[0]);
            sent[0] += 1;
        }
        if n % 256 == 0 {
            std::thread::yield_now();
        }
    }
    between(sent[0]);
    let mut frame = vec![0u8; FRAME];
    for seq in 0..1500u64 {
        for thread in 0..3u16 {
            if thread == 0 && seq > 1000 && seq % 211 == 17 {
                continue;
            }
            vdif_frame(&mut frame, seq, thread);
            send_all(&sock, &frame, addrs[1]);
            sent[1] += 1;
        }
        if seq % 128 == 0 {
            std::thread::yield_now();
        }
    }
    sent
}

fn run(disks: Vec<PathBuf>, scan: &str, discard: bool) -> (ScanSummary, Vec<RecorderEvent>) {
    let h = Recorder::start(config(disks, scan, discard)).unwrap();
    let events = h.events();
    // Blocks are numbered across streams as they are sealed: the second stream starts once the first is
    // taken in, so that both runs seal in the same order however the machine schedules the two threads.
    let sent = send_lossy(h.local_addrs(), |n| {
        wait_until(&h, WAIT, "the first stream taken in", |s| {
            let c = s.streams[0].counters;
            c.packets + c.rejected + c.filtered + c.dropped_no_buffer + c.kernel_drops == n
        })
    });
    wait_until(&h, WAIT, "every datagram accounted", |s| {
        s.streams.iter().zip(sent).all(|(st, n)| {
            let c = st.counters;
            c.packets + c.rejected + c.filtered + c.dropped_no_buffer + c.kernel_drops == n
        })
    });
    h.stop();
    let sum = h.wait().unwrap();
    (sum, events.try_iter().collect())
}

#[test]
fn capture_only_accounts_exactly_as_a_recording_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let rec_disks = disks(&tmp.path().join("rec"), 2);
    let (rec, _) = run(rec_disks.clone(), "lossy_rec", false);
    assert_eq!(rec.error, None);
    // Disks given to a capture-only run are not touched (said once as a warning).
    let idle = disks(&tmp.path().join("idle"), 1);
    let (cap, events) = run(idle.clone(), "lossy_cap", true);
    assert_eq!(cap.error, None);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, RecorderEvent::ConfigWarning(w) if w.contains("capture only"))),
        "{events:?}"
    );
    assert_eq!(
        std::fs::read_dir(&idle[0]).unwrap().count(),
        0,
        "capture-only wrote to a disk"
    );
    assert!(cap.metadata.disks.is_empty() && cap.status.disks.is_empty());

    for (r, c) in rec.status.streams.iter().zip(&cap.status.streams) {
        assert_eq!(r.label, c.label);
        let (mut rc, mut cc) = (r.counters, c.counters);
        // The kernel's own drops are the machine's, not the recorder's: none expected, compared apart.
        assert_eq!((rc.kernel_drops, cc.kernel_drops), (0, 0), "{}", r.label);
        (rc.kernel_drops, cc.kernel_drops) = (0, 0);
        assert_eq!(rc, cc, "stream {}", r.label);
        assert_eq!(r.threads.len(), c.threads.len());
        for (a, b) in r.threads.iter().zip(&c.threads) {
            assert_eq!(
                (a.thread, a.packets, a.bytes, a.lost, a.out_of_order, a.duplicates),
                (b.thread, b.packets, b.bytes, b.lost, b.out_of_order, b.duplicates)
            );
        }
    }
    let p = rec.status.streams[0].counters;
    assert_eq!((p.lost, p.out_of_order, p.duplicates, p.rejected), (31, 1, 1, 6));
    let t = rec.status.streams[1].counters;
    assert_eq!((t.lost, t.filtered), (3, 1500));
    // The same blocks were filled, sealed and numbered; every one is back in the pool.
    assert_eq!(rec.status.blocks, cap.status.blocks);
    assert!(cap.status.blocks > 0);
    assert_eq!(cap.status.pool.free, cap.status.pool.total);
    assert_eq!(
        cap.metadata
            .streams
            .iter()
            .map(|s| s.blocks.clone())
            .collect::<Vec<_>>(),
        rec.metadata
            .streams
            .iter()
            .map(|s| s.blocks.clone())
            .collect::<Vec<_>>()
    );
}

#[test]
fn capture_only_recycles_a_small_pool_without_dropping() {
    let stream = StreamSpec::parse(&format!("a=vdif@127.0.0.1:0,frame-size={FRAME},psn")).unwrap();
    let mut c = RecorderConfig::new(vec![stream], Vec::new(), "small_pool");
    c.block_size = 64 * 1024;
    c.recv_buffer = 64 << 20;
    c.pool_blocks = Some(8);
    c.discard = true;
    let frames_per_block = (64 * 1024 - 8) / FRAME;
    let h = Recorder::start(c).unwrap();
    let dest = h.local_addrs()[0];
    let sock = sender();
    let mut buf = vec![0u8; FRAME + 8];
    // Rounds of 5 blocks' worth through a pool of 8: 60 blocks in all, so blocks must come back.
    let per_round = 5 * frames_per_block as u64;
    let rounds = 12;
    for r in 0..rounds {
        for seq in r * per_round..(r + 1) * per_round {
            buf[..8].copy_from_slice(&seq.to_ne_bytes());
            vdif_frame(&mut buf[8..], seq, 0);
            send_all(&sock, &buf, dest);
        }
        let want = (r + 1) * per_round;
        wait_until(&h, WAIT, "round received and blocks back", |s| {
            s.streams[0].counters.packets == want && s.pool.free + 1 >= s.pool.total
        });
    }
    h.stop();
    let sum = h.wait().unwrap();
    let c = sum.status.streams[0].counters;
    assert_eq!(
        (c.packets, c.lost, c.dropped_no_buffer),
        (rounds * per_round, 0, 0)
    );
    assert_eq!(sum.status.pool.total, 8);
    assert!(sum.status.blocks >= 60, "{} blocks", sum.status.blocks);
    assert_eq!(sum.error, None);
}
