//! The frame-by-frame reader: frames of a Mark6 scan come in block order across files with their file and
//! offset, fill frames are flagged, damage becomes findings, and memory does not depend on the scan length.

mod common;
use common::*;
use vlbiflow_reader::frames::FrameReader;
use vlbiflow_reader::{locate, FindingKind};

fn collect(fr: &mut FrameReader) -> Vec<(Vec<u8>, bool, String, u64)> {
    let mut out = Vec::new();
    while let Some(b) = fr.next_batch() {
        for (e, bytes) in b.iter() {
            out.push((bytes.to_vec(), e.fill, fr_path(e.pos.file), e.pos.offset));
        }
    }
    out
}

thread_local! {
    static FILES: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}
fn fr_path(id: u32) -> String {
    FILES.with(|f| f.borrow()[id as usize].clone())
}

#[test]
fn mark6_frames_in_block_order_with_positions_and_fill() {
    let dir = tempfile::tempdir().unwrap();
    let mut frames = stream(2, 40, &[]);
    // A jive5ab fill frame (fill words from word 4, invalid bit) where frame 13 was.
    vlbiflow_formats::fill::write_fill(vlbiflow_formats::FrameKind::Vdif, &mut frames[13]);
    // Blocks of 4 frames spread over 4 disks out of round-robin order.
    let (dirs, at) = write_mark6(dir.path(), "sc", 4, 2, &frames, 4, |k| (k * 3 + k / 4) % 4);
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let rec = locate(&["sc".into()], &disks).unwrap();
    let mut fr = FrameReader::open(&rec);
    FILES.with(|f| {
        *f.borrow_mut() = fr
            .files()
            .paths()
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    });
    let got = collect(&mut fr);
    assert_eq!(got.len(), frames.len());
    for (i, (bytes, fill, path, offset)) in got.iter().enumerate() {
        assert_eq!(bytes, &frames[i], "frame {i}");
        assert_eq!(*fill, i == 13, "frame {i}");
        let (disk, block_at) = at[i / 4];
        assert!(path.starts_with(&disks[disk]), "frame {i}: {path}");
        assert_eq!(*offset, block_at + 8 + (i % 4 * FRAME_LEN) as u64, "frame {i}");
    }
    assert_eq!(fr.frame_len(), Some(FRAME_LEN));
    assert!(fr.take_findings().iter().all(|f| f.kind != FindingKind::Garbage));
}

#[test]
fn garbage_in_a_plain_file_is_a_finding_with_offset_not_a_frame() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(1, 20, &[]);
    let mut bytes = concat(&frames);
    bytes[5 * FRAME_LEN..5 * FRAME_LEN + 32].fill(0xff);
    let path = dir.path().join("p.vdif");
    std::fs::write(&path, &bytes).unwrap();
    let rec = locate(&[s(&path)], &[]).unwrap();
    let mut fr = FrameReader::open(&rec);
    let mut n = 0;
    while let Some(b) = fr.next_batch() {
        n += b.len();
    }
    assert_eq!(n, 19);
    let findings = fr.take_findings();
    let g = findings
        .iter()
        .find(|f| f.kind == FindingKind::Garbage)
        .expect("garbage finding");
    assert_eq!(g.offset, Some((5 * FRAME_LEN) as u64));
    assert_eq!(g.file.as_deref(), Some(path.as_path()));
}

/// A file shorter than a frame header (8 bytes) is 8 bytes of garbage, said so with the count it has.
#[test]
fn a_file_shorter_than_a_header_is_garbage_of_its_own_length() {
    let dir = tempfile::tempdir().unwrap();
    for (len, words) in [(8usize, "8 bytes of garbage"), (1, "1 byte of garbage")] {
        let path = dir.path().join(format!("tiny{len}.vdif"));
        std::fs::write(&path, vec![0x42u8; len]).unwrap();
        let rec = locate(&[s(&path)], &[]).unwrap();
        let mut fr = FrameReader::open(&rec);
        while fr.next_batch().is_some() {}
        let findings = fr.take_findings();
        let g: Vec<_> = findings
            .iter()
            .filter(|f| f.kind == FindingKind::Garbage)
            .collect();
        assert_eq!(g.len(), 1, "{findings:?}");
        assert!(g[0].message.starts_with(words), "{:?}", g[0].message);
        assert_eq!(g[0].offset, Some(0));
    }
}
