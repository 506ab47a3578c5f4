//! Recordings in the published layouts of other writers (Mark6 d-plane/jive5ab v1 and v2, FlexBuff, jive5ab
//! fill), and damaged ones: every finding names file and offset, and the rest is still checked.

mod common;
use common::*;
use vlbiflow_checker::{check, CheckConfig, Report};
use vlbiflow_reader::finding::FindingKind;
use vlbiflow_reader::gather::gather;
use vlbiflow_reader::{locate, Severity};

fn run(args: &[String], disks: &[String]) -> Report {
    let rec = locate(args, disks).expect("locate");
    check(&rec, CheckConfig::default(), |_| {})
}

fn kinds(r: &Report, k: FindingKind) -> Vec<&vlbiflow_reader::Finding> {
    r.findings.iter().filter(|f| f.kind == k).collect()
}

fn gathered(args: &[String], disks: &[String]) -> Vec<u8> {
    let rec = locate(args, disks).unwrap();
    let mut out = Vec::new();
    gather(&rec, &mut out, |_, _| {}).unwrap();
    out
}

#[test]
fn mark6_v2_out_of_round_robin_with_short_last_block() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(2, 300, &[]);
    // 600 frames in blocks of 16 (last block short: 600 = 37 x 16 + 8), handed to disks out of turn.
    let assign = |k: usize| [0, 0, 2, 1, 2, 2, 0, 1][k % 8];
    let (dirs, _) = write_mark6(dir.path(), "exp_xx_0001", 3, 2, &frames, 16, assign);
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let r = run(&["exp_xx_0001".into()], &disks);
    assert_eq!(r.verdict, "ok", "{}", r.human());
    assert_eq!(r.engine.frames, 600);
    assert_eq!(r.engine.missing, 0);
    assert_eq!(r.engine.frame_rate, Some(RATE));
    assert_eq!(r.engine.start_utc.as_deref(), Some("2024-03-01T12:00:00Z"));
    assert_eq!(r.engine.duration_s, Some(3.0));
    let b = r.blocks.unwrap();
    assert_eq!((b.blocks, b.missing_blocks, b.duplicate_blocks), (38, 0, 0));
    assert_eq!(gathered(&["exp_xx_0001".into()], &disks), concat(&frames));
}

#[test]
fn mark6_v1_block_headers() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(1, 250, &[]);
    // Version 1: 4-byte headers, fixed-size blocks; the last one shorter.
    let (dirs, _) = write_mark6(dir.path(), "v1scan", 2, 1, &frames, 20, |k| k % 2);
    let files: Vec<String> = dirs.iter().map(|d| s(&d.join("v1scan.vdif"))).collect();
    let r = run(&files, &[]);
    assert_eq!(r.verdict, "ok", "{}", r.human());
    assert_eq!(r.engine.frames, 250);
    assert_eq!(gathered(&files, &[]), concat(&frames));
}

#[test]
fn frame_gaps_are_reported_exactly_with_position() {
    let dir = tempfile::tempdir().unwrap();
    // Every 50th frame index left out (both threads), including ones at second boundaries (index 100, 200).
    let skip: Vec<u64> = (1..6).map(|k| k * 50).collect();
    let frames = stream(2, 300, &skip);
    let (dirs, _) = write_mark6(dir.path(), "gaps", 2, 2, &frames, 10, |k| k % 2);
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let r = run(&["gaps".into()], &disks);
    assert_eq!(r.verdict, "error");
    assert_eq!(r.engine.missing, 10);
    assert_eq!(r.engine.frames, 590);
    assert!((r.engine.loss_fraction - 10.0 / 600.0).abs() < 1e-12);
    for t in &r.engine.threads {
        assert_eq!(t.missing, 5);
        assert_eq!(t.jumps_total, 5);
        let j = &t.jumps[1];
        assert_eq!(j.expected, "2024-03-01T12:00:01Z", "{j:?}");
        assert_eq!(j.found, "2024-03-01T12:00:01.01Z");
        assert_eq!(j.frames_missing, 1);
        assert!(j.file.ends_with("gaps.vdif"));
    }
}

#[test]
fn fill_frames_are_missing_frames() {
    // Fill with the missing frames' own (stamped) headers and the invalid bit, in the middle of the data:
    // each is a missing frame, exactly like a gap left by a recorder that writes nothing.
    let dir = tempfile::tempdir().unwrap();
    let mut frames = stream(1, 200, &[]);
    for i in [10usize, 11, 150] {
        frames[i] = fill_frame(0, i as u64);
    }
    let p = dir.path().join("fill.vdif");
    std::fs::write(&p, concat(&frames)).unwrap();
    let r = run(&[s(&p)], &[]);
    assert_eq!(r.engine.invalid, 0);
    assert_eq!(r.engine.fill, 3);
    assert_eq!(r.engine.frames, 197);
    assert_eq!(r.engine.missing, 3);
    assert_eq!(r.verdict, "error", "{}", r.human());
    let gap = frames
        .iter()
        .enumerate()
        .filter(|(i, _)| ![10, 11, 150].contains(i))
        .map(|(_, f)| f.clone());
    let p2 = dir.path().join("gap.vdif");
    std::fs::write(&p2, concat(&gap.collect::<Vec<_>>())).unwrap();
    let g = run(&[s(&p2)], &[]);
    assert_eq!(
        (g.engine.missing, g.engine.loss_fraction, g.verdict),
        (3, r.engine.loss_fraction, "error")
    );
}

#[test]
fn corrupted_block_header_is_reported_and_the_rest_checked() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(1, 400, &[]);
    let (dirs, at) = write_mark6(dir.path(), "bad", 2, 2, &frames, 20, |k| k % 2);
    // Block 6 is the 4th block of disk0: overwrite its wb_size with nonsense.
    let (d, off) = at[6];
    assert_eq!(d, 0);
    let path = dirs[0].join("bad.vdif");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[off as usize + 4..off as usize + 8].copy_from_slice(&123_456_789i32.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let r = run(&["bad".into()], &disks);
    let bh = kinds(&r, FindingKind::BlockHeader);
    assert_eq!(bh.len(), 1, "{}", r.human());
    assert_eq!(bh[0].offset, Some(off));
    assert!(bh[0].file.as_ref().unwrap().ends_with("disk0/bad.vdif"));
    assert!(bh[0].message.contains("wb_size"), "{}", bh[0].message);
    // Exactly one block (20 frames) lost; every later block still checked.
    assert_eq!(r.engine.frames, 380);
    assert_eq!(r.engine.missing, 20);
    assert_eq!(r.blocks.unwrap().missing_blocks, 1);
    assert_eq!(r.verdict, "error");
}

#[test]
fn wrong_sync_word_names_the_file_and_other_disks_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(1, 200, &[]);
    let (dirs, _) = write_mark6(dir.path(), "sync", 2, 2, &frames, 10, |k| k % 2);
    let path = dirs[1].join("sync.vdif");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[0] = 0x67;
    std::fs::write(&path, bytes).unwrap();
    // Given explicitly (a file with a bad sync word is not recognised as Mark6 by name lookup).
    let files = vec![s(&dirs[0].join("sync.vdif")), s(&path)];
    let rec = locate(&files, &[]);
    // Without the sync word the file is not Mark6: mixing kinds is refused with a clear error.
    let e = rec.unwrap_err().to_string();
    assert!(e.contains("Mark6"), "{e}");
    // By scan name the damaged file is reported, and the good disk checked.
    let mut v = std::fs::read(&path).unwrap();
    v[0] = 0x66;
    v[4] = 7; // version 7
    std::fs::write(&path, v).unwrap();
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let r = run(&["sync".into()], &disks);
    let fh = kinds(&r, FindingKind::FileHeader);
    assert_eq!(fh.len(), 1, "{}", r.human());
    assert!(fh[0].file.as_ref().unwrap().ends_with("disk1/sync.vdif"));
    assert_eq!(fh[0].offset, Some(0));
    assert!(fh[0].message.contains("version"), "{}", fh[0].message);
    assert_eq!(r.engine.frames, 100);
    assert_eq!(r.verdict, "error");
}

#[test]
fn truncated_file_is_reported_with_offset() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(1, 100, &[]);
    let (dirs, _) = write_mark6(dir.path(), "trunc", 1, 2, &frames, 10, |_| 0);
    let path = dirs[0].join("trunc.vdif");
    let bytes = std::fs::read(&path).unwrap();
    // Cut in the middle of the 6th frame of the last block.
    let cut = bytes.len() - 4 * FRAME_LEN - 500;
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let r = run(&[s(&path)], &[]);
    let t = kinds(&r, FindingKind::Truncated);
    assert_eq!(t.len(), 1, "{}", r.human());
    let last_block = 20 + 9 * (8 + 10 * FRAME_LEN) as u64;
    assert_eq!(t[0].offset, Some(last_block));
    assert_eq!(r.engine.frames, 95);
    assert_eq!(r.verdict, "error");
}

#[test]
fn garbage_in_a_plain_vdif_file_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(2, 150, &[]);
    let mut bytes = concat(&frames[..100]);
    let garbage_at = bytes.len() as u64;
    bytes.extend((0..777u32).map(|i| (i * 31 % 251) as u8));
    bytes.extend(concat(&frames[100..]));
    let p = dir.path().join("g.vdif");
    std::fs::write(&p, &bytes).unwrap();
    let r = run(&[s(&p)], &[]);
    let g = kinds(&r, FindingKind::Garbage);
    assert_eq!(g.len(), 1, "{}", r.human());
    assert_eq!(g[0].offset, Some(garbage_at));
    assert!(g[0].message.contains("777 bytes"), "{}", g[0].message);
    assert_eq!(r.engine.frames, 300);
    assert_eq!(r.engine.missing, 0);
    assert_eq!(r.verdict, "error");
}

#[test]
fn two_scans_mixed_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let a = stream(1, 100, &[]);
    let (da, _) = write_mark6(&dir.path().join("a"), "scan_a", 1, 2, &a, 10, |_| 0);
    let (db, _) = write_mark6(&dir.path().join("b"), "scan_b", 1, 2, &a, 10, |_| 0);
    let files = vec![s(&da[0].join("scan_a.vdif")), s(&db[0].join("scan_b.vdif"))];
    let r = run(&files, &[]);
    assert!(!kinds(&r, FindingKind::MixedScans).is_empty(), "{}", r.human());
    let dup = kinds(&r, FindingKind::DuplicateBlock);
    assert!(!dup.is_empty());
    assert!(dup[0].offset.is_some() && dup[0].file.is_some());
    assert_eq!(r.verdict, "error");
}

#[test]
fn flexbuff_chunks_over_two_disks_with_a_missing_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(1, 300, &[]);
    for (k, chunk) in frames.chunks(25).enumerate() {
        if k == 5 {
            continue;
        }
        let d = dir.path().join(format!("mnt{}", k % 2)).join("fscan");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("fscan.{k:08}")), concat(chunk)).unwrap();
    }
    let disks = vec![s(&dir.path().join("mnt*"))];
    let r = run(&["fscan".into()], &disks);
    assert_eq!(r.layout, "flexbuff");
    let gap = kinds(&r, FindingKind::BlockGap);
    assert_eq!(gap.len(), 1, "{}", r.human());
    assert!(gap[0].message.contains("chunk 5"), "{}", gap[0].message);
    assert_eq!(r.engine.missing, 25);
    assert_eq!(r.engine.frames, 275);
}

#[test]
fn missing_disk_listed_in_metadata() {
    use vlbiflow_scan::*;
    let dir = tempfile::tempdir().unwrap();
    let frames = stream(1, 120, &[]);
    let (dirs, _) = write_mark6(dir.path(), "meta", 3, 2, &frames, 10, |k| k % 3);
    let meta = ScanMetadata {
        metadata_version: METADATA_VERSION,
        writer: "test".into(),
        scan: "meta".into(),
        experiment: None,
        station: None,
        format: ScanFormat::Mark6,
        block_size: 8 + 10 * FRAME_LEN as u64,
        start_utc: "2024-03-01T12:00:00Z".into(),
        end_utc: None,
        blocks: 12,
        complete: true,
        streams: vec![],
        disks: dirs
            .iter()
            .map(|d| DiskMeta {
                path: s(d),
                bytes: 1,
                blocks: 4,
                failed: None,
            })
            .collect(),
    };
    for d in &dirs {
        meta.write_atomic(&metadata_path(d, "meta")).unwrap();
    }
    std::fs::remove_file(dirs[2].join("meta.vdif")).unwrap();
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let r = run(&["meta".into()], &disks);
    let m = kinds(&r, FindingKind::MissingFile);
    assert_eq!(m.len(), 1, "{}", r.human());
    assert!(m[0].file.as_ref().unwrap().ends_with("disk2"));
    assert_eq!(r.engine.frames, 80);
    assert!(r
        .findings
        .iter()
        .any(|f| f.severity == Severity::Error && f.kind == FindingKind::BlockGap));
}

#[test]
fn mark5b_plain_file() {
    use vlbiflow_formats::mark5b::{Mark5bHeaderRepr, FRAME_LEN as M5B_LEN};
    let dir = tempfile::tempdir().unwrap();
    let rate = 50u32;
    // Mark5B carries MJD modulo 1000: the checker resolves it to the date nearest today, so use yesterday.
    let now = vlbiflow_formats::time::UtcTime::now().unix_seconds;
    let t0 = now - now.rem_euclid(86400) - 86400 + 43200;
    let mut bytes = Vec::new();
    for i in 0..(3 * rate) {
        if i == 77 {
            continue;
        }
        let mut f = vec![0x5au8; M5B_LEN];
        Mark5bHeaderRepr::for_frame(t0 + i64::from(i / rate), (i % rate) as u16, rate, 0)
            .unwrap()
            .emit(&mut f)
            .unwrap();
        bytes.extend_from_slice(&f);
    }
    let p = dir.path().join("x.m5b");
    std::fs::write(&p, &bytes).unwrap();
    let r = run(&[s(&p)], &[]);
    assert_eq!(r.engine.frames, 149, "{}", r.human());
    assert_eq!(r.engine.missing, 1);
    assert_eq!(r.engine.frame_rate, Some(rate));
    assert_eq!(
        r.engine.start_utc,
        Some(vlbiflow_formats::time::UtcTime::from_unix(t0, 0).to_iso8601())
    );
}
