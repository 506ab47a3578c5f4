//! Mark6 scatter-gather written with O_DIRECT (page-aligned spans plus a per-disk carry of the unaligned
//! tail) on a real ext4/xfs directory under the target dir: the scan must parse to exactly the same blocks
//! as one written buffered, files must end exactly at their last block, and a disk failing mid-scan must
//! still lose no frame.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use vlbiflow_recorder::{Recorder, RecorderConfig, RecorderEvent, StreamSpec};

const FRAME: usize = 1032;
const WAIT: Duration = Duration::from_secs(20);

/// A temporary directory on the work tree's disk (not /tmp, which may be tmpfs elsewhere).
fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("vf-direct-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// True when the filesystem holding `dir` accepts O_DIRECT (ext4, xfs, ...).
fn supports_direct(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(dir.join("probe"))
        .is_ok()
}

fn config(disks: Vec<PathBuf>, scan: &str, block_size: u64, direct: bool, pool: usize) -> RecorderConfig {
    let spec = StreamSpec::parse(&format!("a=vdif@127.0.0.1:0,frame-size={FRAME},psn")).unwrap();
    let mut c = RecorderConfig::new(vec![spec], disks, scan);
    c.block_size = block_size;
    c.recv_buffer = 64 << 20;
    c.metadata_interval = Duration::from_millis(200);
    c.pool_blocks = Some(pool);
    c.direct_io = direct;
    c
}

/// Records frames `0..n` onto four fresh disks under `root` and returns the disks and the disks'
/// O_DIRECT flags as the recorder reported them.
fn record(
    root: &Path,
    scan: &str,
    n: u64,
    block_size: u64,
    direct: bool,
    pool: usize,
) -> (Vec<PathBuf>, Vec<bool>) {
    let disks = disks(root, 4);
    let h = Recorder::start(config(disks.clone(), scan, block_size, direct, pool)).unwrap();
    let addr = h.local_addrs()[0];
    send_stream(addr, n, FRAME, 1, Some(1000), |_| false);
    wait_until(&h, WAIT, "all frames", |s| s.streams[0].counters.packets == n);
    let direct_flags = h.status().disks.iter().map(|d| d.direct).collect();
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    assert_eq!(sum.status.streams[0].counters.lost, 0);
    (disks, direct_flags)
}

fn same_scan_direct_and_buffered(block_size: u64, n: u64, pool: usize) {
    let tmp = disk_dir();
    let direct_ok = supports_direct(tmp.path());
    if !direct_ok {
        eprintln!(
            "{}: no O_DIRECT here; checking the buffered fallback instead",
            tmp.path().display()
        );
    }
    let (d_disks, flags) = record(&tmp.path().join("direct"), "sg_d", n, block_size, true, pool);
    assert!(flags.iter().all(|&f| f == direct_ok), "O_DIRECT flags {flags:?}");
    let (b_disks, flags) = record(&tmp.path().join("buffered"), "sg_b", n, block_size, false, pool);
    assert!(flags.iter().all(|&f| !f));
    // The parser rejects anything after the last block (padding left by an aligned write) and torn blocks.
    let direct = gather_mark6(&d_disks, "sg_d");
    let buffered = gather_mark6(&b_disks, "sg_b");
    assert_eq!(direct.len(), buffered.len());
    for (d, b) in direct.iter().zip(&buffered) {
        assert_eq!(d.number, b.number);
        assert!(d.data == b.data, "block {} differs", d.number);
    }
    let frames = frames_of(direct.into_iter().map(|b| b.data), FRAME);
    assert_eq!(frames, (0..n).map(|s| (s, 0)).collect::<Vec<_>>());
    // Every file ends exactly at its last block.
    for d in &d_disks {
        let p = d.join("sg_d.vdif");
        let (_, blocks, _) = read_sg_file(&p);
        let expect: u64 = 20 + blocks.iter().map(|b| 8 + b.data.len() as u64).sum::<u64>();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), expect, "{}", p.display());
    }
}

/// 64 KiB blocks: every block write straddles page boundaries at a different phase.
#[test]
fn direct_mark6_parses_like_buffered_with_large_blocks() {
    same_scan_direct_and_buffered(64 * 1024 + 3 * FRAME as u64, 5_000, 400);
}

/// Blocks of two frames (2072 bytes, less than a page): some writes carry more than one block's tail.
#[test]
fn direct_mark6_parses_like_buffered_with_blocks_smaller_than_a_page() {
    same_scan_direct_and_buffered(2 * FRAME as u64 + 8, 3_000, 3_000);
}

/// A disk whose scan file is replaced mid-scan leaves; its unconfirmed blocks (including those whose tail
/// was still in the carry) go to the other disks, and its file is cut back to whole confirmed blocks.
#[test]
fn direct_mark6_disk_failure_loses_no_frame() {
    let tmp = disk_dir();
    let disks = disks(tmp.path(), 4);
    let h = Recorder::start(config(disks.clone(), "faulty", 2 * FRAME as u64 + 8, true, 3_000)).unwrap();
    let events = h.events();
    let direct_ok = supports_direct(tmp.path());
    assert!(h.status().disks.iter().all(|d| d.direct == direct_ok));
    let addr = h.local_addrs()[0];
    let n = 4_000;
    send_stream(addr, n / 2, FRAME, 1, Some(0), |_| false);
    wait_until(&h, WAIT, "half", |s| {
        s.streams[0].counters.packets == n / 2 && s.disks[3].blocks > 0
    });
    let victim = disks[3].join("faulty.vdif");
    let moved = tmp.path().join("faulty.vdif.moved");
    std::fs::rename(&victim, &moved).unwrap();
    std::fs::write(&victim, b"not ours").unwrap();
    let sock = sender();
    let mut buf = vec![0u8; FRAME + 8];
    for seq in n / 2..n {
        buf[..8].copy_from_slice(&seq.to_ne_bytes());
        vdif_frame(&mut buf[8..], seq, 0);
        send_all(&sock, &buf, addr);
    }
    wait_until(&h, WAIT, "all", |s| s.streams[0].counters.packets == n);
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    assert!(sum.status.disks[3].failed.is_some(), "disk 3 should have failed");
    assert!(events
        .try_iter()
        .any(|e| matches!(e, RecorderEvent::DiskFailed { .. })));
    let mut blocks = gather_mark6(&disks[..3], "faulty");
    let (_, old, torn) = read_sg_file(&moved);
    assert!(!torn, "failed disk's file not cut back to a whole block");
    blocks.extend(old);
    blocks.sort_by_key(|b| b.number);
    for w in blocks.windows(2) {
        assert_ne!(w[0].number, w[1].number, "block {} twice", w[0].number);
    }
    let frames = frames_of(blocks.into_iter().map(|b| b.data), FRAME);
    assert_eq!(frames, (0..n).map(|s| (s, 0)).collect::<Vec<_>>());
}
