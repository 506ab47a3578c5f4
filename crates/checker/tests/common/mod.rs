//! Fixture builders written from the published layouts (the VDIF specification, the Mark 6
//! scatter-gather format, jive5ab's FlexBuff naming), byte by byte, independent of any
//! vlbiflow writer. VDIF frames come from `vlbiflow_testkit::vdif::Frame` (written word by word from the
//! specification).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use vlbiflow_testkit::vdif::Frame;

/// Frame length used by the fixtures: 32-byte header + 1024 bytes of 2-bit samples.
pub const FRAME_LEN: usize = 1056;
/// Frames per second per thread of the fixtures.
pub const RATE: u32 = 100;
/// Epoch 48 = 2024-01-01; second 5227200 = 2024-03-01T12:00:00 (epoch 48 starts 2024-01-01; 5227200 s is 60.5 days).
pub const EPOCH: u8 = 48;
pub const SECOND0: u32 = 5_227_200;

/// One VDIF frame of `thread` at global frame index `i` (from SECOND0), with a recognisable payload:
/// index-dependent bytes.
pub fn frame(thread: u16, i: u64, invalid: bool) -> Vec<u8> {
    Frame::new(FRAME_LEN)
        .seconds(SECOND0)
        .epoch(EPOCH)
        .at(i, RATE)
        .version(1)
        .thread(thread)
        .station(b"Xx")
        .invalid(invalid)
        .build_with(|k| (i as usize * 7 + k + thread as usize) as u8)
}

/// A jive5ab fill frame: header with the invalid bit, payload of 0x11223344 words.
pub fn fill_frame(thread: u16, i: u64) -> Vec<u8> {
    let mut f = frame(thread, i, true);
    for w in f[32..].chunks_exact_mut(4) {
        w.copy_from_slice(&0x1122_3344u32.to_le_bytes());
    }
    f
}

/// Frames 0..n of threads 0..threads interleaved, skipping indices in `skip`.
pub fn stream(threads: u16, n: u64, skip: &[u64]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..n {
        if skip.contains(&i) {
            continue;
        }
        for t in 0..threads {
            out.push(frame(t, i, false));
        }
    }
    out
}

fn le(v: i32) -> [u8; 4] {
    v.to_le_bytes()
}

/// A Mark6 file header written field by field: sync 0xfeed6666, version, block_size, packet_format, packet_size.
pub fn mark6_file_header(version: i32, block_size: i32, packet_format: i32, packet_size: i32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0xfeed_6666u32.to_le_bytes());
    b.extend_from_slice(&le(version));
    b.extend_from_slice(&le(block_size));
    b.extend_from_slice(&le(packet_format));
    b.extend_from_slice(&le(packet_size));
    b
}

/// Appends a version 2 block: block_number, wb_size (header included), frames.
pub fn v2_block(out: &mut Vec<u8>, number: i32, frames: &[Vec<u8>]) {
    let payload: usize = frames.iter().map(|f| f.len()).sum();
    out.extend_from_slice(&le(number));
    out.extend_from_slice(&le((payload + 8) as i32));
    for f in frames {
        out.extend_from_slice(f);
    }
}

/// Appends a version 1 block: block_number, frames.
pub fn v1_block(out: &mut Vec<u8>, number: i32, frames: &[Vec<u8>]) {
    out.extend_from_slice(&le(number));
    for f in frames {
        out.extend_from_slice(f);
    }
}

/// Writes a Mark6 scan: `frames` cut into blocks of `per_block` frames, block k going to file `assign(k)`.
/// Returns the directories (one per disk) and the offset of each block header.
pub fn write_mark6(
    root: &Path,
    scan: &str,
    disks: usize,
    version: i32,
    frames: &[Vec<u8>],
    per_block: usize,
    assign: impl Fn(usize) -> usize,
) -> (Vec<PathBuf>, Vec<(usize, u64)>) {
    let hlen = if version == 1 { 4 } else { 8 };
    let block_size = (hlen + per_block * FRAME_LEN) as i32;
    let mut files: Vec<Vec<u8>> = (0..disks)
        .map(|_| mark6_file_header(version, block_size, 0, FRAME_LEN as i32))
        .collect();
    let mut at = Vec::new();
    for (k, chunk) in frames.chunks(per_block).enumerate() {
        let d = assign(k);
        at.push((d, files[d].len() as u64));
        if version == 1 {
            v1_block(&mut files[d], k as i32, chunk);
        } else {
            v2_block(&mut files[d], k as i32, chunk);
        }
    }
    let mut dirs = Vec::new();
    for (d, bytes) in files.iter().enumerate() {
        let dir = root.join(format!("disk{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{scan}.vdif")), bytes).unwrap();
        dirs.push(dir);
    }
    (dirs, at)
}

/// Concatenation of frames.
pub fn concat(frames: &[Vec<u8>]) -> Vec<u8> {
    frames.iter().flatten().copied().collect()
}

pub fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}
