//! Helpers shared by the recorder integration tests: a small VDIF sender and independent readers of
//! scatter-gather and FlexBuff scans (written from the published byte layouts: the Mark 6 scatter-gather format of
//! Haystack's Mark 6 software and jive5ab's FlexBuff chunks, <https://github.com/jive-vlbi/jive5ab>; deliberately
//! not using the formats crate the recorder itself uses).
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vlbiflow_recorder::{RecorderHandle, RecorderStatus};

/// Frames per second per thread used by the test streams.
pub const RATE: u32 = 1000;
/// VDIF epoch 48 (2024-01-01) and a second in it.
pub const SECOND0: u32 = 5_227_200;

/// Builds VDIF frame `seq` of `thread`: time from the sequence at [`RATE`], payload stamped with `seq`.
pub fn vdif_frame(buf: &mut [u8], seq: u64, thread: u16) {
    let size = buf.len();
    buf.fill(0);
    let words = [
        SECOND0 + (seq / u64::from(RATE)) as u32,
        (48 << 24) | (seq % u64::from(RATE)) as u32,
        (size / 8) as u32,
        (1 << 26) | (u32::from(thread) << 16) | 0x5878,
    ];
    for (i, w) in words.iter().enumerate() {
        buf[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    buf[32..40].copy_from_slice(&seq.to_le_bytes());
    buf[40..42].copy_from_slice(&thread.to_le_bytes());
}

/// Sequence and thread stamped in a frame's payload.
pub fn frame_id(frame: &[u8]) -> (u64, u16) {
    (
        u64::from_le_bytes(frame[32..40].try_into().unwrap()),
        u16::from_le_bytes(frame[40..42].try_into().unwrap()),
    )
}

/// A sender socket with a large send buffer.
pub fn sender() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

/// Sends frames `0..count` (thread `seq % threads`), each prefixed by PSN `psn0 + seq` when `psn`, skipping
/// sequence numbers for which `skip` is true. Paces lightly so the loopback receive queue never overflows.
pub fn send_stream(
    dest: SocketAddr,
    count: u64,
    frame_size: usize,
    threads: u16,
    psn: Option<u64>,
    skip: impl Fn(u64) -> bool,
) -> u64 {
    let sock = sender();
    let mut dgram = vec![0u8; frame_size + 8];
    let mut sent = 0;
    for seq in 0..count {
        if skip(seq) {
            continue;
        }
        let thread = (seq % u64::from(threads)) as u16;
        let (start, bytes) = match psn {
            Some(p) => {
                dgram[..8].copy_from_slice(&p.wrapping_add(seq).to_ne_bytes());
                vdif_frame(&mut dgram[8..], seq, thread);
                (0, frame_size + 8)
            }
            None => {
                vdif_frame(&mut dgram[8..], seq, thread);
                (8, frame_size)
            }
        };
        send_all(&sock, &dgram[start..start + bytes], dest);
        sent += 1;
        if sent % 256 == 0 {
            std::thread::yield_now();
        }
    }
    sent
}

/// Sends one datagram, retrying when the send buffer is momentarily full.
pub fn send_all(sock: &UdpSocket, d: &[u8], dest: SocketAddr) {
    loop {
        match sock.send_to(d, dest) {
            Ok(_) => return,
            Err(e)
                if e.raw_os_error() == Some(libc_enobufs()) || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                std::thread::yield_now()
            }
            Err(e) => panic!("send to {dest}: {e}"),
        }
    }
}

fn libc_enobufs() -> i32 {
    105
}

/// Polls the recorder's status until `done` holds (or panics after `limit`).
pub fn wait_until(h: &RecorderHandle, limit: Duration, what: &str, done: impl Fn(&RecorderStatus) -> bool) {
    let end = Instant::now() + limit;
    loop {
        let s = h.status();
        if done(&s) {
            return;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}: {s:#?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Temporary disks.
pub fn disks(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let d = dir.join(format!("disk{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect()
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// One Mark6 scatter-gather block read from a file.
#[derive(Debug)]
pub struct SgBlock {
    pub number: u32,
    pub data: Vec<u8>,
    pub file: PathBuf,
}

/// Parses a scatter-gather v2 file (the Mark 6 layout): 20-byte header (sync 0xfeed6666, version 2, block
/// size, packet format, packet size), then blocks of i32 number + i32 wb_size (header included) + data.
/// Stops at a torn last block (reported as the second value).
pub fn read_sg_file(path: &Path) -> (u32, Vec<SgBlock>, bool) {
    let bytes = std::fs::read(path).unwrap();
    assert!(
        bytes.len() >= 20,
        "{}: shorter than the file header",
        path.display()
    );
    assert_eq!(le_u32(&bytes, 0), 0xfeed_6666, "{}: sync", path.display());
    assert_eq!(le_u32(&bytes, 4), 2, "version");
    let packet_size = le_u32(&bytes, 16);
    let block_size = le_u32(&bytes, 8);
    let mut at = 20;
    let mut blocks = Vec::new();
    let mut torn = false;
    while at < bytes.len() {
        if bytes.len() - at < 8 {
            torn = true;
            break;
        }
        let number = le_u32(&bytes, at);
        let wb = le_u32(&bytes, at + 4) as usize;
        assert!(
            wb >= 8 && wb <= block_size as usize,
            "{}: block at {at}: wb_size {wb}",
            path.display()
        );
        if at + wb > bytes.len() {
            torn = true;
            break;
        }
        let data = bytes[at + 8..at + wb].to_vec();
        assert_eq!(
            data.len() % packet_size as usize,
            0,
            "block {number} not whole packets"
        );
        blocks.push(SgBlock {
            number,
            data,
            file: path.to_owned(),
        });
        at += wb;
    }
    (packet_size, blocks, torn)
}

/// Gathers a Mark6 scan: every file's blocks, sorted by block number; asserts numbers are unique.
pub fn gather_mark6(disks: &[PathBuf], scan: &str) -> Vec<SgBlock> {
    let mut all = Vec::new();
    for d in disks {
        let p = d.join(format!("{scan}.vdif"));
        if p.exists() {
            let (_, blocks, torn) = read_sg_file(&p);
            assert!(!torn, "{}: torn block", p.display());
            all.extend(blocks);
        }
    }
    all.sort_by_key(|b| b.number);
    for w in all.windows(2) {
        assert_ne!(w[0].number, w[1].number, "block number {} twice", w[0].number);
    }
    all
}

/// Gathers a FlexBuff scan: chunk files `<disk>/<scan>/<scan>.%08u` sorted by chunk number.
pub fn gather_flexbuff(disks: &[PathBuf], scan: &str) -> Vec<(u32, Vec<u8>)> {
    let mut all = Vec::new();
    for d in disks {
        let dir = d.join(scan);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let (stem, num) = name.rsplit_once('.').unwrap();
            assert_eq!(stem, scan);
            assert_eq!(num.len(), 8, "{name}");
            all.push((num.parse::<u32>().unwrap(), std::fs::read(e.path()).unwrap()));
        }
    }
    all.sort_by_key(|c| c.0);
    all
}

/// Splits gathered data into frames and returns their (sequence, thread) stamps in order.
pub fn frames_of(data: impl IntoIterator<Item = Vec<u8>>, frame_size: usize) -> Vec<(u64, u16)> {
    let mut out = Vec::new();
    for d in data {
        assert_eq!(d.len() % frame_size, 0);
        for f in d.chunks(frame_size) {
            assert_eq!(le_u32(f, 8) as usize * 8, frame_size, "frame length field");
            out.push(frame_id(f));
        }
    }
    out
}
