//! End-to-end recordings over real UDP on 127.0.0.1 into real files in temporary directories.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rand::{Rng, SeedableRng};
use vlbiflow_recorder::{Recorder, RecorderConfig, RecorderEvent, RecorderHandle, StreamSpec};
use vlbiflow_scan::{ScanFormat, ScanMetadata};

const FRAME: usize = 1032;
const WAIT: Duration = Duration::from_secs(20);

fn spec(label: &str, opts: &str) -> StreamSpec {
    StreamSpec::parse(&format!("{label}=vdif@127.0.0.1:0,frame-size={FRAME}{opts}")).unwrap()
}

fn config(streams: Vec<StreamSpec>, disks: Vec<PathBuf>, scan: &str) -> RecorderConfig {
    let mut c = RecorderConfig::new(streams, disks, scan);
    c.block_size = 64 * 1024;
    c.recv_buffer = 64 << 20;
    c.metadata_interval = Duration::from_millis(200);
    // Enough blocks to absorb a whole test burst (the senders here are not paced like a backend), so no
    // test depends on how fast this machine's disks and two shared cores happen to be.
    c.pool_blocks = Some(400);
    c
}

fn start(c: RecorderConfig) -> (RecorderHandle, Vec<SocketAddr>) {
    let h = Recorder::start(c).unwrap();
    let addrs = h.local_addrs().to_vec();
    (h, addrs)
}

fn assert_complete_metadata(disks: &[PathBuf], scan: &str, blocks: u64) {
    for d in disks {
        let m = ScanMetadata::read(&vlbiflow_scan::metadata_path(d, scan)).unwrap();
        assert!(m.complete, "{}: not complete", d.display());
        assert_eq!(m.blocks, blocks);
    }
}

#[test]
fn mark6_four_disks_every_frame_once_in_order_across_psn_wrap() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 4);
    let (h, addrs) = start(config(vec![spec("a", ",psn")], disks.clone(), "t_xx_001"));
    let n = 20_000;
    // The PSN wraps through u64::MAX in the middle of the scan.
    send_stream(addrs[0], n, FRAME, 2, Some(u64::MAX - 9_999), |_| false);
    wait_until(&h, WAIT, "all frames", |s| s.streams[0].counters.packets == n);
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    let c = sum.status.streams[0].counters;
    assert_eq!(
        (c.packets, c.lost, c.rejected, c.out_of_order, c.duplicates),
        (n, 0, 0, 0, 0)
    );
    assert_eq!(c.bytes, n * FRAME as u64);
    let blocks = gather_mark6(&disks, "t_xx_001");
    assert_eq!(
        blocks.iter().map(|b| b.number).collect::<Vec<_>>(),
        (0..blocks.len() as u32).collect::<Vec<_>>()
    );
    // Blocks were spread over more than one disk.
    let used: std::collections::HashSet<_> = blocks.iter().map(|b| b.file.clone()).collect();
    assert!(used.len() > 1, "all blocks on one disk");
    let frames = frames_of(blocks.into_iter().map(|b| b.data), FRAME);
    let expect: Vec<(u64, u16)> = (0..n).map(|s| (s, (s % 2) as u16)).collect();
    assert_eq!(frames.len(), expect.len());
    assert!(frames == expect, "frames out of order or missing");
    assert_complete_metadata(&disks, "t_xx_001", sum.metadata.blocks);
    let m = &sum.metadata.streams[0];
    assert_eq!(m.frame_rate, Some(RATE));
    // The first and last frames sent (sequence 0 and n-1 at RATE): the scan's time range. A burst fills
    // whole receive batches, so this also catches a first time taken from the end of the first batch.
    assert_eq!(m.first_frame_utc.as_deref(), Some("2024-03-01T12:00:00Z"));
    assert_eq!(m.last_frame_utc.as_deref(), Some("2024-03-01T12:00:19.999Z"));
    // Per-thread counters.
    let th = &sum.status.streams[0].threads;
    assert_eq!(th.iter().map(|t| t.packets).sum::<u64>(), n);
    assert_eq!(th.len(), 2);
}

#[test]
fn garbage_datagrams_only_count_as_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 2);
    let (h, addrs) = start(config(vec![spec("a", ",psn")], disks.clone(), "garbage"));
    let events = h.events();
    let dest = addrs[0];
    let good = 3_000u64;
    let sprayer = std::thread::spawn(move || {
        let sock = sender();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut buf = vec![0u8; 9000];
        for i in 0..10_000 {
            let len = match i % 4 {
                0 => FRAME + 8, // the right size, wrong content
                _ => rng.gen_range(0..9000),
            };
            rng.fill(&mut buf[..len]);
            send_all(&sock, &buf[..len], dest);
            if i % 128 == 0 {
                std::thread::yield_now();
            }
        }
    });
    send_stream(dest, good, FRAME, 1, Some(1000), |_| false);
    sprayer.join().unwrap();
    wait_until(&h, WAIT, "all datagrams", |s| {
        let c = s.streams[0].counters;
        c.packets + c.rejected == good + 10_000
    });
    h.stop();
    let sum = h.wait().unwrap();
    let c = sum.status.streams[0].counters;
    assert_eq!(c.packets, good);
    assert_eq!(c.rejected, 10_000);
    assert_eq!(
        (c.lost, c.out_of_order, c.duplicates, c.filtered, c.invalid_frames),
        (0, 0, 0, 0, 0)
    );
    let frames = frames_of(gather_mark6(&disks, "garbage").into_iter().map(|b| b.data), FRAME);
    assert_eq!(frames, (0..good).map(|s| (s, 0)).collect::<Vec<_>>());
    assert!(events
        .try_iter()
        .any(|e| matches!(e, RecorderEvent::Rejecting { .. })));
}

#[test]
fn psn_loss_reordering_and_duplicates_are_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    let (h, addrs) = start(config(vec![spec("a", ",psn")], disks.clone(), "psnloss"));
    let sock = sender();
    let mut order: Vec<u64> = (0..1000).filter(|s| ![100, 101, 500].contains(s)).collect();
    // 700 and 701 swapped; 800 sent twice.
    let i = order.iter().position(|&s| s == 700).unwrap();
    order.swap(i, i + 1);
    let j = order.iter().position(|&s| s == 800).unwrap();
    order.insert(j, 800);
    let mut buf = vec![0u8; FRAME + 8];
    for &seq in &order {
        buf[..8].copy_from_slice(&(5_000 + seq).to_ne_bytes());
        vdif_frame(&mut buf[8..], seq, 0);
        send_all(&sock, &buf, addrs[0]);
    }
    let sent = order.len() as u64;
    wait_until(&h, WAIT, "all frames", |s| s.streams[0].counters.packets == sent);
    h.stop();
    let c = h.wait().unwrap().status.streams[0].counters;
    assert_eq!((c.lost, c.out_of_order, c.duplicates), (3, 1, 1));
    assert!((c.loss_fraction() - 3.0 / (sent + 3) as f64).abs() < 1e-12);
}

#[test]
fn vdif_time_loss_with_learned_rate_and_thread_filter() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    // No PSN: loss from VDIF time stamps per thread, rate learned. Thread 2 is not wanted.
    let (h, addrs) = start(config(vec![spec("a", ",threads=0,1")], disks.clone(), "vtime"));
    let events = h.events();
    // 3 threads, 3000 frames: each thread gets every third sequence number, i.e. frame numbers jump by 3;
    // to keep per-thread sequences contiguous, stamp frames per thread instead.
    let sock = sender();
    let mut buf = vec![0u8; FRAME];
    let mut sent_wanted = 0;
    for seq in 0..2500u64 {
        for thread in 0..3u16 {
            if thread == 0 && (seq == 1500 || seq == 1501) {
                continue; // two frames of thread 0 lost, after the rate is learned
            }
            vdif_frame(&mut buf, seq, thread);
            send_all(&sock, &buf, addrs[0]);
            sent_wanted += u64::from(thread < 2);
        }
    }
    wait_until(&h, WAIT, "all frames", |s| {
        let c = s.streams[0].counters;
        c.packets == sent_wanted && c.filtered == 2500
    });
    h.stop();
    let sum = h.wait().unwrap();
    let c = sum.status.streams[0].counters;
    assert_eq!(
        (c.lost, c.filtered, c.out_of_order, c.duplicates),
        (2, 2500, 0, 0)
    );
    let th = &sum.status.streams[0].threads;
    assert_eq!(th.iter().find(|t| t.thread == 0).unwrap().lost, 2);
    assert_eq!(th.iter().find(|t| t.thread == 0).unwrap().frame_rate, Some(RATE));
    assert!(events
        .try_iter()
        .any(|e| matches!(e, RecorderEvent::RateLearned { rate: RATE, .. })));
}

#[test]
fn fifty_streams_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 2);
    let streams: Vec<StreamSpec> = (0..50).map(|i| spec(&format!("s{i}"), ",psn")).collect();
    let (h, addrs) = start(config(streams, disks.clone(), "fifty"));
    let per = 300u64;
    let sock = sender();
    let mut buf = vec![0u8; FRAME + 8];
    for seq in 0..per {
        for (i, a) in addrs.iter().enumerate() {
            buf[..8].copy_from_slice(&seq.to_ne_bytes());
            // The thread ID carries the stream index so gathered frames can be attributed.
            vdif_frame(&mut buf[8..], seq, i as u16);
            send_all(&sock, &buf, *a);
        }
    }
    wait_until(&h, WAIT, "all streams", |s| {
        s.streams.iter().all(|x| x.counters.packets == per)
    });
    h.stop();
    let sum = h.wait().unwrap();
    for s in &sum.status.streams {
        assert_eq!((s.counters.packets, s.counters.lost), (per, 0), "{}", s.label);
    }
    let frames = frames_of(gather_mark6(&disks, "fifty").into_iter().map(|b| b.data), FRAME);
    assert_eq!(frames.len() as u64, per * 50);
    for i in 0..50u16 {
        let mine: Vec<u64> = frames.iter().filter(|f| f.1 == i).map(|f| f.0).collect();
        assert_eq!(mine, (0..per).collect::<Vec<_>>(), "stream {i}");
    }
}

#[test]
fn flexbuff_chunks_hold_every_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 3);
    let mut c = config(vec![spec("a", ",psn")], disks.clone(), "fb_scan_1");
    c.format = ScanFormat::Flexbuff;
    let (h, addrs) = start(c);
    let n = 6_000;
    send_stream(addrs[0], n, FRAME, 1, Some(0), |_| false);
    wait_until(&h, WAIT, "all frames", |s| s.streams[0].counters.packets == n);
    h.stop();
    let sum = h.wait().unwrap();
    let chunks = gather_flexbuff(&disks, "fb_scan_1");
    assert_eq!(
        chunks.iter().map(|c| c.0).collect::<Vec<_>>(),
        (0..chunks.len() as u32).collect::<Vec<_>>()
    );
    let frames = frames_of(chunks.into_iter().map(|c| c.1), FRAME);
    assert_eq!(frames, (0..n).map(|s| (s, 0)).collect::<Vec<_>>());
    assert_complete_metadata(&disks, "fb_scan_1", sum.metadata.blocks);
}

/// Fails one disk mid-scan by replacing its scan file (works as any user, including root, for whom
/// permission changes would not bite) and checks that no frame is lost.
#[test]
fn mark6_file_replaced_mid_scan_loses_no_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 4);
    let (h, addrs) = start(config(vec![spec("a", ",psn")], disks.clone(), "faulty"));
    let events = h.events();
    let sock = sender();
    let mut buf = vec![0u8; FRAME + 8];
    let mut send_up_to = |from: u64, to: u64| {
        for seq in from..to {
            buf[..8].copy_from_slice(&seq.to_ne_bytes());
            vdif_frame(&mut buf[8..], seq, 0);
            send_all(&sock, &buf, addrs[0]);
        }
        wait_until(&h, WAIT, "all sent so far", |s| {
            s.streams[0].counters.packets == to
        });
    };
    // Half, then on (a bounded number of frames) until disk 3 has written a block: the writers take
    // blocks from one queue, so on a loaded machine the other three may have taken all of the half.
    let mut half = 4_000;
    send_up_to(0, half);
    let mut rounds = 0;
    while h.status().disks[3].blocks == 0 {
        assert!(rounds < 100, "disk 3 wrote no block of {half} frames");
        send_up_to(half, half + 500);
        half += 500;
        rounds += 1;
    }
    let victim = disks[3].join("faulty.vdif");
    let moved = tmp.path().join("faulty.vdif.moved");
    std::fs::rename(&victim, &moved).unwrap();
    std::fs::write(&victim, b"not ours").unwrap();
    let n = 2 * half;
    send_up_to(half, n);
    // The writers take full blocks from one queue, so disk 3 finds its file replaced only when it is next
    // handed one; on a loaded machine the other three can take all of the second half (seen in CI). Send
    // on, a bounded number of frames, until it has been.
    let mut n = n;
    let mut rounds = 0;
    while h.status().disks[3].failed.is_none() {
        assert!(rounds < 100, "disk 3 was handed no block in {n} frames");
        send_up_to(n, n + 500);
        n += 500;
        rounds += 1;
    }
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    assert!(sum.status.disks[3].failed.is_some(), "disk 3 should have failed");
    assert!(events
        .try_iter()
        .any(|e| matches!(e, RecorderEvent::DiskFailed { .. })));
    // Gather from the three good disks plus what disk 3 wrote before it failed.
    let mut blocks = gather_mark6(&disks[..3], "faulty");
    let (_, old, torn) = read_sg_file(&moved);
    assert!(!torn);
    blocks.extend(old);
    blocks.sort_by_key(|b| b.number);
    let frames = frames_of(blocks.into_iter().map(|b| b.data), FRAME);
    assert_eq!(frames, (0..n).map(|s| (s, 0)).collect::<Vec<_>>());
    assert_eq!(sum.status.streams[0].counters.lost, 0);
}

/// Fails one disk for real with ENOSPC on a small tmpfs (needs root to mount; otherwise the test says so
/// and checks the same property through a FlexBuff chunk directory taken away).
///
/// The tmpfs is filled beforehand so that the scan's file header fits but no whole block does: the first
/// block the small disk's writer takes fails, whichever disk happens to be fastest on the machine running
/// the test. Frames are sent in rounds until that has happened (bounded), so the test does not depend on
/// how the writers share the queue (on CI the three other writers once took all but two blocks).
#[test]
fn disk_full_mid_scan_loses_no_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let mut disks = disks(tmp.path(), 3);
    let small = tmp.path().join("small");
    std::fs::create_dir_all(&small).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "vftest", small.to_str().unwrap()])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    struct Unmount(PathBuf, bool);
    impl Drop for Unmount {
        fn drop(&mut self) {
            if self.1 {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
    }
    let _guard = Unmount(small.clone(), mounted);
    if mounted {
        // Leave 16 KiB free: room for the Mark6 file header, none for a 64 KiB block.
        let filler = small.join("filler");
        let free = |p: &std::path::Path| {
            let st = rustix::fs::statvfs(p).unwrap();
            st.f_bavail * st.f_frsize
        };
        let size = free(&small).saturating_sub(16 * 1024);
        std::fs::write(&filler, vec![0xa5u8; size as usize]).unwrap();
        assert!(free(&small) < 64 * 1024, "filler left {} bytes", free(&small));
    }
    disks.push(small.clone());
    let mut c = config(vec![spec("a", ",psn")], disks.clone(), "full");
    if !mounted {
        eprintln!(
            "cannot mount a tmpfs here: failing the disk by removing its FlexBuff chunk directory instead"
        );
        c.format = ScanFormat::Flexbuff;
    }
    let (h, addrs) = start(c);
    let round = 1_000u64; // ~1 MB, about 16 blocks
    let mut n = 0u64;
    let sock = sender();
    let mut buf = vec![0u8; FRAME + 8];
    let mut send = |from: u64, to: u64| {
        for seq in from..to {
            buf[..8].copy_from_slice(&seq.to_ne_bytes());
            vdif_frame(&mut buf[8..], seq, 0);
            send_all(&sock, &buf, addrs[0]);
            if seq % 256 == 0 {
                std::thread::yield_now();
            }
        }
    };
    if !mounted {
        // Until the small disk holds a chunk, then take its chunk directory away.
        while n < 50 * round {
            send(n, n + round);
            n += round;
            wait_until(&h, WAIT, "round", |s| s.streams[0].counters.packets == n);
            if h.status().disks[3].blocks > 0 {
                break;
            }
        }
        std::fs::rename(small.join("full"), tmp.path().join("full.moved")).unwrap();
    }
    // Until the small disk has failed (and at least one more round after it, written elsewhere).
    let limit = n + 50 * round;
    loop {
        send(n, n + round);
        n += round;
        wait_until(&h, WAIT, "round", |s| s.streams[0].counters.packets == n);
        if h.status().disks[3].failed.is_some() || n >= limit {
            break;
        }
    }
    send(n, n + round);
    n += round;
    wait_until(&h, WAIT, "all", |s| s.streams[0].counters.packets == n);
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    assert!(
        sum.status.disks[3].failed.is_some(),
        "small disk should have failed after {n} frames: {:?}",
        sum.status.disks[3]
    );
    assert_eq!(sum.status.streams[0].counters.lost, 0);
    let frames = if mounted {
        // The full disk's file was cut back to its last whole block: it parses cleanly.
        frames_of(gather_mark6(&disks, "full").into_iter().map(|b| b.data), FRAME)
    } else {
        let mut chunks = gather_flexbuff(&disks[..3], "full");
        chunks.extend(gather_flexbuff(&[tmp.path().to_owned()], "full.moved"));
        chunks.sort_by_key(|c| c.0);
        frames_of(chunks.into_iter().map(|c| c.1), FRAME)
    };
    assert_eq!(frames, (0..n).map(|s| (s, 0)).collect::<Vec<_>>());
}

#[test]
fn stop_under_load_returns_and_leaves_complete_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 2);
    let (h, addrs) = start(config(vec![spec("a", ",psn")], disks.clone(), "stopper"));
    let running = Arc::new(AtomicBool::new(true));
    let r = running.clone();
    let dest = addrs[0];
    let tx = std::thread::spawn(move || {
        let sock = sender();
        let mut buf = vec![0u8; FRAME + 8];
        let mut seq = 0u64;
        while r.load(Ordering::Relaxed) {
            buf[..8].copy_from_slice(&seq.to_ne_bytes());
            vdif_frame(&mut buf[8..], seq, 0);
            let _ = sock.send_to(&buf, dest);
            seq += 1;
        }
    });
    wait_until(&h, WAIT, "traffic", |s| s.streams[0].counters.packets > 2_000);
    h.stop();
    let sum = h.wait().unwrap();
    running.store(false, Ordering::Relaxed);
    tx.join().unwrap();
    assert_eq!(sum.error, None);
    assert_complete_metadata(&disks, "stopper", sum.metadata.blocks);
    // Whatever was stored is on disk, whole.
    let frames = frames_of(gather_mark6(&disks, "stopper").into_iter().map(|b| b.data), FRAME);
    assert_eq!(frames.len() as u64, sum.status.streams[0].counters.packets);
}

#[test]
fn start_refuses_existing_scan_and_bad_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    let (h, _) = start(config(vec![spec("a", "")], disks.clone(), "once"));
    h.stop();
    h.wait().unwrap();
    let e = Recorder::start(config(vec![spec("a", "")], disks.clone(), "once"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("already exists"), "{e}");
    let e = Recorder::start(config(vec![spec("a", "")], vec![tmp.path().join("nope")], "x"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn starved_pool_drops_whole_packets_and_counts_them() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    let mut c = config(vec![spec("a", ",psn")], disks.clone(), "starved");
    c.pool_blocks = Some(3);
    c.block_size = 16 * 1024;
    let (h, addrs) = start(c);
    let n = 6_000;
    send_stream(addrs[0], n, FRAME, 1, Some(0), |_| false);
    wait_until(&h, WAIT, "all datagrams accounted", |s| {
        let c = s.streams[0].counters;
        c.packets + c.dropped_no_buffer == n
    });
    h.stop();
    let sum = h.wait().unwrap();
    let c = sum.status.streams[0].counters;
    // Whatever was dropped for want of a buffer, what was stored is whole frames, in order, none twice.
    let frames = frames_of(gather_mark6(&disks, "starved").into_iter().map(|b| b.data), FRAME);
    assert_eq!(frames.len() as u64, c.packets);
    assert!(frames.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(c.lost <= c.dropped_no_buffer);
    eprintln!(
        "starved pool: stored {}, dropped {}",
        c.packets, c.dropped_no_buffer
    );
}

/// The pool starved until the very end (writers held, three blocks): every frame after the third block is
/// dropped for want of a buffer, the last ones after the last frame stored. `lost` must still be exactly
/// the frames sent minus the frames on disk (read back independently), with and without a PSN.
fn starved_to_the_end(opts: &str, psn: Option<u64>, scan: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    let mut c = config(vec![spec("a", opts)], disks.clone(), scan);
    c.pool_blocks = Some(3);
    c.block_size = 16 * 1024;
    let (h, addrs) = start(c);
    h.hold_writers(true);
    // Sequence numbers 0..n; a few never sent (network loss) but never the last.
    let n = 3_000u64;
    let skip = |s: u64| s % 97 == 5;
    let arrived = send_stream(addrs[0], n, FRAME, 1, psn, skip);
    wait_until(&h, WAIT, "all datagrams accounted", |s| {
        let c = s.streams[0].counters;
        c.packets + c.dropped_no_buffer == arrived
    });
    h.hold_writers(false);
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    let c = sum.status.streams[0].counters;
    let frames = frames_of(gather_mark6(&disks, scan).into_iter().map(|b| b.data), FRAME);
    let stored = frames.len() as u64;
    assert_eq!(stored, c.packets);
    assert!(c.dropped_no_buffer > 0 && stored < 3 * 16, "{c:?}");
    assert_eq!(
        c.lost,
        n - stored,
        "lost must be sent ({n} numbered, {arrived} arrived) minus stored ({stored}): {c:?}"
    );
    // The metadata says the same.
    let m = ScanMetadata::read(&vlbiflow_scan::metadata_path(&disks[0], scan)).unwrap();
    assert_eq!(m.streams[0].counters.lost, n - stored);
}

#[test]
fn pool_starved_to_the_end_counts_every_frame_not_stored_psn() {
    starved_to_the_end(",psn", Some(1 << 40), "starved_psn");
}

#[test]
fn pool_starved_to_the_end_counts_every_frame_not_stored_vdif_time() {
    starved_to_the_end(",frame-rate=1000", None, "starved_time");
}

/// Two streams into one scan (Mark6 and FlexBuff): every block holds one stream's frames, and the
/// metadata's per-stream block ranges name exactly those blocks (checked by reading every block back and
/// telling the streams apart by the VDIF station ID in each frame).
fn two_streams_block_ranges(format: ScanFormat, scan: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 2);
    let mut c = config(vec![spec("a", ",psn"), spec("b", ",psn")], disks.clone(), scan);
    c.format = format;
    c.block_size = 16 * 1024;
    c.metadata_interval = Duration::from_millis(20);
    let (h, addrs) = start(c);
    let n = 1_500u64;
    let sock = sender();
    let mut buf = vec![0u8; FRAME + 8];
    for seq in 0..n {
        for (k, dest) in addrs.iter().enumerate() {
            buf[..8].copy_from_slice(&seq.to_ne_bytes());
            vdif_frame(&mut buf[8..], seq, 0);
            // Station ID (word 3, low 16 bits): 0x4100 + stream index.
            buf[8 + 12..8 + 14].copy_from_slice(&(0x4100u16 + k as u16).to_le_bytes());
            send_all(&sock, &buf, *dest);
        }
        if seq % 256 == 0 {
            std::thread::yield_now();
        }
    }
    wait_until(&h, WAIT, "all frames", |s| {
        s.streams.iter().all(|s| s.counters.packets == n)
    });
    // A periodic metadata write already lists the blocks sealed so far.
    let periodic = ScanMetadata::read(&vlbiflow_scan::metadata_path(&disks[0], scan)).unwrap();
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    let blocks: Vec<(u32, Vec<u8>)> = match format {
        ScanFormat::Mark6 => gather_mark6(&disks, scan)
            .into_iter()
            .map(|b| (b.number, b.data))
            .collect(),
        ScanFormat::Flexbuff => gather_flexbuff(&disks, scan),
    };
    let meta = ScanMetadata::read(&vlbiflow_scan::metadata_path(&disks[1], scan)).unwrap();
    assert_eq!(meta.streams.len(), 2);
    let mut per_stream = [0u64; 2];
    for (number, data) in &blocks {
        let stations: std::collections::BTreeSet<u16> = data
            .chunks(FRAME)
            .map(|f| u16::from_le_bytes([f[12], f[13]]))
            .collect();
        assert_eq!(stations.len(), 1, "block {number} mixes streams: {stations:?}");
        let k = (stations.first().unwrap() - 0x4100) as usize;
        per_stream[k] += (data.len() / FRAME) as u64;
        assert_eq!(
            meta.stream_of_block(u64::from(*number)),
            Some(k),
            "block {number} holds stream {k}'s frames: {:?}",
            meta.streams.iter().map(|s| &s.blocks).collect::<Vec<_>>()
        );
    }
    assert_eq!(per_stream, [n, n]);
    // Exactly those blocks: the ranges count as many blocks as were written, none listed twice.
    let listed: u64 = meta.streams.iter().map(|s| s.blocks.count()).sum();
    assert_eq!(listed, blocks.len() as u64);
    assert!(meta.streams.iter().all(|s| !s.blocks.is_empty()));
    // The periodic metadata's ranges are a prefix of the final ones.
    for (p, f) in periodic.streams.iter().zip(&meta.streams) {
        for r in &p.blocks.0 {
            assert!(
                f.blocks.0.iter().any(|q| q[0] <= r[0] && r[1] <= q[1]),
                "{r:?} not in {:?}",
                f.blocks
            );
        }
    }
}

#[test]
fn two_streams_in_one_mark6_scan_have_their_block_ranges() {
    two_streams_block_ranges(ScanFormat::Mark6, "two_m6");
}

#[test]
fn two_streams_in_one_flexbuff_scan_have_their_chunk_ranges() {
    two_streams_block_ranges(ScanFormat::Flexbuff, "two_fb");
}

/// Disks behind (writers held): the default pool grows past its starting size up to its memory limit
/// without dropping a frame, then drops, and lost is still sent - stored.
#[test]
fn pool_grows_while_disks_are_behind_up_to_its_memory_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    let mut c = config(vec![spec("a", ",psn")], disks.clone(), "grows");
    c.pool_blocks = None;
    c.block_size = 16 * 1024;
    let start_blocks = c.effective_pool_blocks();
    // A block buffer: page of headroom, block header, 15 frames of 1032 bytes (16 KiB - 8 holds 15).
    let block_bytes = 4096 + 8 + 15 * FRAME;
    let limit = start_blocks + 60;
    c.pool_memory = Some((limit * block_bytes) as u64);
    let (h, addrs) = start(c);
    h.hold_writers(true);
    assert_eq!(h.status().flow.pool_limit, limit);
    let fpb = 15u64; // 1032-byte frames in 16 KiB - 8
    let burst = 5 * fpb;
    let mut sent = 0u64;
    let sock = sender();
    let mut buf = vec![0u8; FRAME + 8];
    // Bursts of five blocks; before each, the pool has room again (or has reached its limit).
    while (sent / fpb) as usize <= limit + 10 {
        for seq in sent..sent + burst {
            buf[..8].copy_from_slice(&seq.to_ne_bytes());
            vdif_frame(&mut buf[8..], seq, 0);
            send_all(&sock, &buf, addrs[0]);
        }
        sent += burst;
        wait_until(&h, WAIT, "burst accounted, pool grown", |s| {
            let c = s.streams[0].counters;
            c.packets + c.dropped_no_buffer == sent && (s.pool.free >= 16 || s.pool.total == limit)
        });
        let s = h.status();
        if s.pool.total < limit {
            assert_eq!(
                s.streams[0].counters.dropped_no_buffer, 0,
                "dropped below the limit: {s:#?}"
            );
        }
    }
    let s = h.status();
    assert_eq!(s.pool.total, limit);
    assert!(s.streams[0].counters.dropped_no_buffer > 0);
    h.hold_writers(false);
    h.stop();
    let sum = h.wait().unwrap();
    let c = sum.status.streams[0].counters;
    let stored = frames_of(gather_mark6(&disks, "grows").into_iter().map(|b| b.data), FRAME).len() as u64;
    assert_eq!(stored, c.packets);
    assert!(
        stored > start_blocks as u64 * fpb,
        "{stored} frames: the pool never grew"
    );
    assert_eq!(c.lost, sent - stored);
}

/// A configured frame rate is never overridden by the data: frames numbered at or beyond it are rejected
/// (said once), the rest indexed at the configured rate with nothing lost.
#[test]
fn configured_frame_rate_is_kept_and_frames_beyond_it_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    // The test streams carry RATE (1000) frames per second; configure half of that.
    let (h, addrs) = start(config(vec![spec("a", ",frame-rate=500")], disks.clone(), "rate"));
    let events = h.events();
    let n = 2 * u64::from(RATE);
    send_stream(addrs[0], n, FRAME, 1, None, |_| false);
    wait_until(&h, WAIT, "all", |s| {
        let c = s.streams[0].counters;
        c.packets + c.rejected == n
    });
    h.stop();
    let sum = h.wait().unwrap();
    let c = sum.status.streams[0].counters;
    assert_eq!((c.packets, c.rejected, c.lost), (n / 2, n / 2, 0), "{c:?}");
    assert_eq!(sum.status.streams[0].frame_rate, Some(500));
    assert_eq!(sum.metadata.streams[0].frame_rate, Some(500));
    let ev: Vec<RecorderEvent> = events.try_iter().collect();
    assert!(
        !ev.iter().any(|e| matches!(e, RecorderEvent::RateLearned { .. })),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| e.to_string().contains("configured frame-rate")),
        "{ev:?}"
    );
}

/// Every disk fails with frames in the pool: the frames no disk could write are not counted as stored but
/// as lost, so lost is still sent - stored.
#[test]
fn all_disks_failing_counts_unwritten_frames_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 2);
    let mut c = config(vec![spec("a", ",psn")], disks.clone(), "gone");
    c.format = ScanFormat::Flexbuff;
    c.block_size = 16 * 1024;
    let (h, addrs) = start(c);
    h.hold_writers(true);
    let n = 1_000u64;
    send_stream(addrs[0], n, FRAME, 1, Some(0), |_| false);
    wait_until(&h, WAIT, "all stored in the pool", |s| {
        s.streams[0].counters.packets == n
    });
    // Take every disk's chunk directory away, then let the writers go: every write fails.
    for d in &disks {
        std::fs::remove_dir_all(d.join("gone")).unwrap();
    }
    let events = h.events();
    h.hold_writers(false);
    h.stop();
    let sum = h.wait().unwrap();
    assert!(sum.error.is_some(), "every disk failed: the scan must say so");
    assert!(events.try_iter().any(|e| e == RecorderEvent::AllDisksFailed));
    let stored = gather_flexbuff(&disks, "gone").len() as u64;
    let c = sum.status.streams[0].counters;
    assert_eq!(stored, 0);
    assert_eq!((c.packets, c.lost), (stored, n - stored), "{c:?}");
}

/// A stream whose frame numbers keep growing raises the learned frame rate with every frame, and each raise
/// is an event. Nobody reads the events here: the queue stops at `EVENT_QUEUE`, the rest are counted as
/// dropped, and the frames themselves are all accounted (the old unbounded channel grew without limit).
#[test]
fn events_nobody_reads_are_bounded_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    let (h, addrs) = start(config(vec![spec("a", "")], disks, "flood"));
    let events = h.events();
    let sock = sender();
    let mut buf = vec![0u8; FRAME];
    // Second 0 frame 0, then second 1 frames 0, 1, 2, ...: from the second frame on the rate is known,
    // and every later frame number is one above it.
    let n = vlbiflow_recorder::EVENT_QUEUE as u64 + 2_000;
    let stamp = |buf: &mut [u8], second: u64, frame: u64| {
        vdif_frame(buf, 0, 0);
        buf[0..4].copy_from_slice(&(SECOND0 + second as u32).to_le_bytes());
        buf[4..8].copy_from_slice(&((48 << 24) | frame as u32).to_le_bytes());
    };
    stamp(&mut buf, 0, 0);
    send_all(&sock, &buf, addrs[0]);
    for f in 0..n {
        stamp(&mut buf, 1, f);
        send_all(&sock, &buf, addrs[0]);
        if f % 256 == 0 {
            std::thread::yield_now();
        }
    }
    wait_until(&h, WAIT, "all frames", |s| s.streams[0].counters.packets == n + 1);
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.status.streams[0].counters.lost, 0);
    let queued = events.try_iter().count();
    assert!(queued <= vlbiflow_recorder::EVENT_QUEUE, "{queued} events queued");
    assert!(
        sum.status.events_dropped >= n - 1 - vlbiflow_recorder::EVENT_QUEUE as u64,
        "{} events dropped of {} rate raises",
        sum.status.events_dropped,
        n - 1
    );
}

#[test]
fn frames_from_a_source_outside_from_are_dropped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 2);
    let (h, addrs) = start(config(
        vec![spec("a", ",psn,from=127.0.0.1/32")],
        disks.clone(),
        "from_filter",
    ));
    let dest = addrs[0];
    // A spoofer on 127.0.0.2 sends well-formed frames whose PSNs follow the real stream's: without the
    // filter they would be recorded.
    let (good, spoofed) = (3_000u64, 1_000u64);
    let spoofer = std::thread::spawn(move || {
        let sock = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
        let mut dgram = vec![0u8; FRAME + 8];
        for seq in good..good + spoofed {
            dgram[..8].copy_from_slice(&seq.to_ne_bytes());
            vdif_frame(&mut dgram[8..], seq, 0);
            send_all(&sock, &dgram, dest);
            if seq % 256 == 0 {
                std::thread::yield_now();
            }
        }
    });
    send_stream(dest, good, FRAME, 1, Some(0), |_| false);
    spoofer.join().unwrap();
    wait_until(&h, WAIT, "all datagrams", |s| {
        let c = s.streams[0].counters;
        c.packets + c.wrong_source == good + spoofed
    });
    h.stop();
    let sum = h.wait().unwrap();
    let c = sum.status.streams[0].counters;
    assert_eq!(
        (c.packets, c.wrong_source, c.lost, c.rejected, c.duplicates),
        (good, spoofed, 0, 0, 0)
    );
    let frames = frames_of(
        gather_mark6(&disks, "from_filter").into_iter().map(|b| b.data),
        FRAME,
    );
    assert!(frames == (0..good).map(|s| (s, 0)).collect::<Vec<_>>());
    // The scan's metadata carries the count.
    assert_eq!(sum.metadata.streams[0].counters.wrong_source, spoofed);
}

#[test]
fn from_is_a_stream_option() {
    let s = spec("a", ",from=10.0.0.0/8,from=192.0.2.7");
    assert!(s.from.allows("10.1.2.3".parse().unwrap()));
    assert!(s.from.allows("192.0.2.7".parse().unwrap()));
    assert!(!s.from.allows("192.0.2.8".parse().unwrap()));
    assert!(spec("a", "").from.is_empty());
    let e = StreamSpec::parse("a=vdif@127.0.0.1:0,from=nonsense").unwrap_err();
    assert!(e.to_string().contains("from"), "{e}");
}
