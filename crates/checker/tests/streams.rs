//! A scan of several streams (all VDIF thread 0, as many backends send) whose vlbiflow metadata maps each
//! block to its stream: `check` reports each stream's own loss, and gathering a stream gives exactly its
//! frames; without the map the streams would merge into one thread full of "out-of-order" frames.

mod common;
use common::*;
use vlbiflow_checker::{check, CheckConfig};
use vlbiflow_reader::gather::{gather_stream, stream_labels};
use vlbiflow_reader::locate;
use vlbiflow_scan::{
    metadata_path, BlockRanges, FrameKind, ScanFormat, ScanMetadata, StreamCounters, StreamMeta,
    METADATA_VERSION,
};

const PER_BLOCK: usize = 16;

/// Stream `k`'s frames 0..n (station byte changed so the test can tell them apart; thread 0 for all).
fn stream_frames(k: u8, n: u64, skip: &[u64]) -> Vec<Vec<u8>> {
    stream(1, n, skip)
        .into_iter()
        .map(|mut f| {
            f[12] = b'a' + k;
            f
        })
        .collect()
}

fn meta(scan: &str, ranges: Vec<BlockRanges>) -> ScanMetadata {
    ScanMetadata {
        metadata_version: METADATA_VERSION,
        writer: "test".into(),
        scan: scan.into(),
        experiment: None,
        station: None,
        format: ScanFormat::Mark6,
        block_size: (8 + PER_BLOCK * FRAME_LEN) as u64,
        start_utc: "2024-03-01T12:00:00Z".into(),
        end_utc: None,
        blocks: ranges.iter().map(|r| r.count()).sum(),
        complete: true,
        streams: ranges
            .into_iter()
            .enumerate()
            .map(|(i, blocks)| StreamMeta {
                label: format!("s{i}"),
                kind: FrameKind::Vdif,
                address: "127.0.0.1:4001".into(),
                psn: true,
                frame_size: FRAME_LEN as u32,
                frame_rate: Some(RATE),
                threads: vec![],
                first_frame_utc: None,
                last_frame_utc: None,
                counters: StreamCounters::default(),
                blocks,
            })
            .collect(),
        disks: vec![],
    }
}

#[test]
fn each_stream_is_checked_and_gathered_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    // Three streams, each 20 blocks of 16 frames; stream 1 lost frames 50 and 51, stream 2 frame 200.
    let skips: [&[u64]; 3] = [&[], &[50, 51], &[200]];
    let n = 20 * PER_BLOCK as u64;
    let streams: Vec<Vec<Vec<u8>>> = (0..3)
        .map(|k| stream_frames(k as u8, n + skips[k].len() as u64, skips[k]))
        .collect();
    // Blocks handed round: block 3j + k holds stream k's j-th block of frames.
    let mut frames = Vec::new();
    let mut ranges = vec![BlockRanges::default(); 3];
    for j in 0..20 {
        for (k, s) in streams.iter().enumerate() {
            frames.extend_from_slice(&s[j * PER_BLOCK..(j + 1) * PER_BLOCK]);
            ranges[k].push((3 * j + k) as u64);
        }
    }
    let (dirs, _) = write_mark6(dir.path(), "multi", 3, 2, &frames, PER_BLOCK, |b| b % 3);
    let m = meta("multi", ranges);
    for d in &dirs {
        m.write_atomic(&metadata_path(d, "multi")).unwrap();
    }
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let rec = locate(&["multi".into()], &disks).unwrap();
    let r = check(&rec, CheckConfig::default(), |_| {});
    let per: Vec<(String, u64, u64, u64)> = r
        .streams
        .iter()
        .map(|s| {
            (
                s.label.clone(),
                s.frames,
                s.missing,
                s.out_of_order + s.duplicates,
            )
        })
        .collect();
    assert_eq!(
        per,
        vec![
            ("s0".into(), n, 0, 0),
            ("s1".into(), n, 2, 0),
            ("s2".into(), n, 1, 0)
        ],
        "{}",
        r.human()
    );
    assert_eq!(
        (r.engine.missing, r.engine.out_of_order, r.engine.duplicates),
        (3, 0, 0)
    );
    assert_eq!(r.engine.threads.len(), 3, "one thread 0 per stream");
    assert_eq!(r.verdict, "error", "{}", r.human());
    assert!(
        r.human().contains("stream s1 thread 0: 2 frames missing"),
        "{}",
        r.human()
    );

    assert_eq!(stream_labels(&rec), ["s0", "s1", "s2"]);
    for (k, want) in streams.iter().enumerate() {
        let mut out = Vec::new();
        let g = gather_stream(&rec, Some(k), &mut out, |_, _| {}).unwrap();
        assert_eq!(g.frames, n);
        assert_eq!(out, concat(want), "stream {k} gathered byte for byte");
    }
    // Selected by label on the recording: every reader of it (gather, the frame reader) sees that stream
    // only, and the other streams' blocks are no gaps.
    let mut one = rec.clone();
    one.select_stream("s1").unwrap();
    let mut out = Vec::new();
    let g = vlbiflow_reader::gather::gather(&one, &mut out, |_, _| {}).unwrap();
    assert_eq!((g.frames, g.fill), (n, 0));
    assert!(
        !g.findings
            .iter()
            .any(|f| f.kind == vlbiflow_reader::FindingKind::BlockGap),
        "{:?}",
        g.findings
    );
    assert_eq!(out, concat(&streams[1]));
    let mut frames = vlbiflow_reader::frames::FrameReader::open(&one);
    let mut count = 0;
    while let Some(b) = frames.next_batch() {
        count += b.len();
    }
    assert_eq!(count as u64, n);
    let e = rec.clone().select_stream("s9").unwrap_err().to_string();
    assert!(
        e.contains("no stream \"s9\"; the scan's streams are s0, s1, s2"),
        "{e}"
    );
}

#[test]
fn without_the_block_map_the_old_merge_is_what_you_get() {
    // The same scan without per-stream ranges (an old or foreign scan): checked as one stream, and the
    // interleaved copies of thread 0 show up as duplicates/out-of-order — the reason the recorder now
    // records the map.
    let dir = tempfile::tempdir().unwrap();
    let n = 4 * PER_BLOCK as u64;
    let a = stream_frames(0, n, &[]);
    let b = stream_frames(1, n, &[]);
    let mut frames = Vec::new();
    for j in 0..4 {
        frames.extend_from_slice(&a[j * PER_BLOCK..(j + 1) * PER_BLOCK]);
        frames.extend_from_slice(&b[j * PER_BLOCK..(j + 1) * PER_BLOCK]);
    }
    let (dirs, _) = write_mark6(dir.path(), "merged", 2, 2, &frames, PER_BLOCK, |b| b % 2);
    let disks: Vec<String> = dirs.iter().map(|d| s(d)).collect();
    let rec = locate(&["merged".into()], &disks).unwrap();
    let r = check(&rec, CheckConfig::default(), |_| {});
    assert!(r.streams.is_empty());
    assert!(r.engine.duplicates + r.engine.out_of_order > 0, "{}", r.human());
    assert!(stream_labels(&rec).is_empty());
    let e = rec.clone().select_stream("a").unwrap_err().to_string();
    assert!(e.contains("the scan is one stream"), "{e}");
}
