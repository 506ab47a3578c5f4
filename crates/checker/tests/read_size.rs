//! The size of the readers' reads changes the pieces, never the frames: Mark6 blocks and FlexBuff chunks
//! larger than a read, frames and garbage straddling a read boundary, read back in reads of the default
//! size, of the old 8 MiB (a whole block or chunk per read here) and of odd sizes, give the same frames
//! with the same positions and the same findings, and the frames are the ones written.

mod common;
use common::*;
use vlbiflow_reader::frames::FrameReader;
use vlbiflow_reader::read::READ_SIZE;
use vlbiflow_reader::{locate, Recording};

/// A frame read back: bytes, fill, file, offset.
type Read = (Vec<u8>, bool, String, u64);

/// Frames and findings (as JSON) of `rec` read in reads of `read_size`.
fn read_back(rec: &Recording, read_size: usize) -> (Vec<Read>, Vec<String>) {
    let mut fr = FrameReader::open_with_read_size(rec, read_size);
    let paths: Vec<String> = fr
        .files()
        .paths()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut frames = Vec::new();
    while let Some(b) = fr.next_batch() {
        for (e, bytes) in b.iter() {
            frames.push((
                bytes.to_vec(),
                e.fill,
                paths[e.pos.file as usize].clone(),
                e.pos.offset,
            ));
        }
    }
    let findings = fr
        .take_findings()
        .iter()
        .map(|f| serde_json::to_string(f).unwrap())
        .collect();
    (frames, findings)
}

/// Sizes compared with the old reads (8 MiB): the default, and odd sizes not a multiple of the frame.
fn sizes() -> [usize; 3] {
    [READ_SIZE, 300_007, 65_537]
}

#[test]
fn mark6_blocks_larger_than_a_read_read_back_identical() {
    for version in [1, 2] {
        let dir = tempfile::tempdir().unwrap();
        // Blocks of 1200 frames (1.27 MB, more than a 1 MiB read) over 2 disks; the last block short.
        let frames = stream(2, 3100, &[]);
        let (dirs, _) = write_mark6(dir.path(), "big", 2, version, &frames, 1200, |k| k % 2);
        let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
        let rec = locate(&["big".into()], &disks).unwrap();
        let old = read_back(&rec, 8 << 20);
        let got: Vec<&Vec<u8>> = old.0.iter().map(|f| &f.0).collect();
        let want: Vec<&Vec<u8>> = frames.iter().collect();
        assert!(got == want, "v{version}: the frames written, in order");
        for size in sizes() {
            assert!(read_back(&rec, size) == old, "v{version}, reads of {size} bytes");
        }
    }
}

#[test]
fn flexbuff_chunks_larger_than_a_read_with_frames_across_reads_read_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(1, 7000, &[]);
    // Chunks of 2500 frames (2.64 MB): a 1 MiB read ends inside a frame (1 MiB is not a multiple of 1056).
    let mut chunks: Vec<Vec<u8>> = frames.chunks(2500).map(concat).collect();
    assert_ne!(READ_SIZE % FRAME_LEN, 0);
    // Garbage across the first 1 MiB boundary of chunk 1, and a partial frame at the end of chunk 2.
    let at = READ_SIZE / FRAME_LEN * FRAME_LEN;
    chunks[1].splice(at..at, [0xa5u8; 1100]);
    assert!(at + 1100 > READ_SIZE);
    let cut = chunks[2].len() - 500;
    chunks[2].truncate(cut);
    for (k, c) in chunks.iter().enumerate() {
        let d = dir.path().join(format!("mnt{}", k % 2)).join("fbig");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("fbig.{k:08}")), c).unwrap();
    }
    let disks = vec![s(&dir.path().join("mnt*"))];
    let rec = locate(&["fbig".into()], &disks).unwrap();
    let old = read_back(&rec, 8 << 20);
    // Every frame but the one cut short.
    let garbage: Vec<&String> = old.1.iter().filter(|f| f.contains("\"garbage\"")).collect();
    assert!(!garbage.is_empty(), "{:?}", old.1);
    assert!(old.1.iter().any(|f| f.contains("\"truncated\"")), "{:?}", old.1);
    assert_eq!(old.0.len(), frames.len() - 1);
    let written: std::collections::HashSet<&Vec<u8>> = frames.iter().collect();
    assert!(old.0.iter().all(|f| written.contains(&f.0)));
    for size in sizes() {
        assert!(read_back(&rec, size) == old, "reads of {size} bytes");
    }
}

#[test]
fn a_corrupted_block_header_in_a_large_block_scan_is_found_at_every_read_size() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(2, 3100, &[]);
    let (dirs, at) = write_mark6(dir.path(), "bad", 2, 2, &frames, 1200, |k| k % 2);
    // Block 2 (disk 0) gets an impossible wb_size.
    let (disk, offset) = at[2];
    let path = dirs[disk].join("bad.vdif");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize + 4..offset as usize + 8].copy_from_slice(&(-5i32).to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let rec = locate(&["bad".into()], &disks).unwrap();
    let old = read_back(&rec, 8 << 20);
    assert!(
        old.1.iter().any(|f| f.contains("\"block_header\"")),
        "{:?}",
        old.1
    );
    for size in sizes() {
        assert!(read_back(&rec, size) == old, "reads of {size} bytes");
    }
}

/// A plain file with garbage runs (one a frame and a half long), a lone frame between two garbage runs
/// (not confirmed by a header after it, so garbage too), fill frames and a frame of another station after
/// garbage: the framer decides the same wherever its reads end, down to reads shorter than a frame (a
/// header it meets near a read's end waits for the bytes that confirm or refute it).
#[test]
fn garbage_and_fill_frame_the_same_wherever_reads_end() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(2, 40, &[]);
    let junk = |n: usize, k: usize| (0..n).map(move |i| (i * 31 + k) as u8);
    let mut bytes = Vec::new();
    for (k, f) in frames.iter().enumerate() {
        bytes.extend_from_slice(f);
        match k % 7 {
            1 => bytes.extend(junk(FRAME_LEN * 3 / 2 + k, k)),
            3 => {
                bytes.extend(junk(81 + k, k));
                bytes.extend_from_slice(&frame(0, 1000 + k as u64, false));
                bytes.extend(junk(108, k));
            }
            4 => bytes.extend_from_slice(&fill_frame(0, k as u64)),
            5 => {
                bytes.extend([0x5au8; 77]);
                let mut other = frame(1, k as u64, false);
                other[12..14].copy_from_slice(b"Yy");
                bytes.extend_from_slice(&other);
            }
            _ => {}
        }
    }
    let path = dir.path().join("mixed.vdif");
    std::fs::write(&path, &bytes).unwrap();
    let rec = locate(&[s(&path)], &[]).unwrap();
    let old = read_back(&rec, 8 << 20);
    assert!(old.1.iter().any(|f| f.contains("\"garbage\"")), "{:?}", old.1);
    assert!(old.0.iter().any(|f| f.1), "fill frames framed");
    for size in (40..3 * FRAME_LEN).step_by(37).chain([READ_SIZE, 65_537]) {
        assert!(read_back(&rec, size) == old, "reads of {size} bytes");
    }
}
