//! jive5ab's datastreams end to end: VDIF over loopback UDP, recordings `<scan>_ds<name>` in real
//! FlexBuff chunk directories, read back with the independent reader of `common`.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use vlbiflow_recorder::{ConfigError, Recorder, RecorderConfig, StreamSpec};
use vlbiflow_scan::datastream::{MatchSpec, Rule};
use vlbiflow_scan::{ScanFormat, ScanMetadata};

const FRAME: usize = 1032;
const WAIT: Duration = Duration::from_secs(20);

fn rule(name: &str, specs: &[&str]) -> Rule {
    Rule {
        name: name.into(),
        specs: specs.iter().map(|s| MatchSpec::parse(s).unwrap()).collect(),
    }
}

fn config(disks: Vec<PathBuf>, scan: &str, psn: bool, rules: Vec<Rule>) -> RecorderConfig {
    let opts = if psn { ",psn" } else { "" };
    let spec = StreamSpec::parse(&format!("a=vdif@127.0.0.1:0,frame-size={FRAME}{opts}")).unwrap();
    let mut c = RecorderConfig::new(vec![spec], disks, scan);
    c.format = ScanFormat::Flexbuff;
    c.block_size = 64 * 1024;
    c.recv_buffer = 64 << 20;
    c.metadata_interval = Duration::from_millis(200);
    c.pool_blocks = Some(400);
    c.datastreams = rules;
    c
}

/// The recording's chunks on every disk: numbers 0.. with no gap, and its frames in order.
fn recording_frames(disks: &[PathBuf], name: &str) -> Vec<(u64, u16)> {
    let chunks = gather_flexbuff(disks, name);
    assert!(!chunks.is_empty(), "{name}: no chunk");
    assert_eq!(
        chunks.iter().map(|c| c.0).collect::<Vec<_>>(),
        (0..chunks.len() as u32).collect::<Vec<_>>(),
        "{name}: chunk numbers"
    );
    frames_of(chunks.into_iter().map(|c| c.1), FRAME)
}

/// Sends frames `0..per_thread` of each of `threads` threads interleaved (frame `i` of every thread, then
/// `i + 1`), each thread's time from its own frame number, skipping `(i, thread)` where `skip` says so.
/// Returns the frames sent.
fn send_threads(
    dest: std::net::SocketAddr,
    per_thread: u64,
    threads: u16,
    skip: impl Fn(u64, u16) -> bool,
) -> u64 {
    let sock = sender();
    let mut frame = vec![0u8; FRAME];
    let mut sent = 0;
    for i in 0..per_thread {
        for t in 0..threads {
            if skip(i, t) {
                continue;
            }
            vdif_frame(&mut frame, i, t);
            send_all(&sock, &frame, dest);
            sent += 1;
            if sent % 256 == 0 {
                std::thread::yield_now();
            }
        }
    }
    sent
}

fn scan_dirs(disks: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = disks
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap())
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn one_recording_per_thread_each_holding_exactly_its_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 3);
    // Never sent: frames 7, 101 and 103 of thread 1, 100, 102 and 5000 of thread 0.
    let skip = |i: u64, t: u16| matches!((i, t), (7 | 101 | 103, 1) | (100 | 102 | 5000, 0));
    let c = config(disks.clone(), "ds_001", false, vec![rule("t{thread}", &["*"])]);
    let h = Recorder::start(c).unwrap();
    let n = 6_000;
    let sent = send_threads(h.local_addrs()[0], n, 2, skip);
    wait_until(&h, WAIT, "all frames", |s| s.streams[0].counters.packets == sent);
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    let c = sum.status.streams[0].counters;
    assert_eq!(
        (c.packets, c.lost, c.filtered, c.dropped_no_buffer, c.out_of_order),
        (sent, 6, 0, 0, 0)
    );
    assert_eq!(
        scan_dirs(&disks),
        [
            "ds_001_dst0",
            "ds_001_dst0.vlbiflow.json",
            "ds_001_dst1",
            "ds_001_dst1.vlbiflow.json"
        ],
        "one chunk directory and metadata file per recording, nothing for the scan itself"
    );
    assert_eq!(sum.recordings.len(), 2);
    for t in 0..2u16 {
        let name = format!("ds_001_dst{t}");
        let frames = recording_frames(&disks, &name);
        let expect: Vec<(u64, u16)> = (0..n).filter(|i| !skip(*i, t)).map(|i| (i, t)).collect();
        assert!(frames == expect, "{name}: frames differ");
        let m = sum.recordings.iter().find(|m| m.scan == name).unwrap();
        for d in &disks {
            let on_disk = ScanMetadata::read(&vlbiflow_scan::metadata_path(d, &name)).unwrap();
            assert_eq!(&on_disk, m, "{name} on {}", d.display());
        }
        assert!(m.complete);
        assert_eq!(m.streams.len(), 1);
        let s = &m.streams[0];
        assert_eq!(s.threads, [t]);
        assert_eq!(s.counters.packets, expect.len() as u64);
        assert_eq!(s.counters.bytes, (expect.len() * FRAME) as u64);
        assert_eq!(s.counters.lost, 3, "{name}: the thread's own missing frames");
        assert_eq!(s.blocks.0, [[0, m.blocks - 1]]);
        assert_eq!(m.disks.iter().map(|d| d.bytes).sum::<u64>(), s.counters.bytes);
    }
}

#[test]
fn frames_matching_no_datastream_are_filtered_and_rules_go_in_name_order() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 2);
    // Thread 0 matches both; "a" sorts first and takes it. Thread 1 goes to "b"; thread 2 to none.
    // The test frames' station is 0x5878, "Xx".
    let rules = vec![rule("b{station}", &["Xx.0-1"]), rule("a", &["0", "@9/*"])];
    let c = config(disks.clone(), "ds_002", true, rules);
    let h = Recorder::start(c).unwrap();
    let n = 9_000;
    send_stream(h.local_addrs()[0], n, FRAME, 3, Some(1 << 40), |_| false);
    wait_until(&h, WAIT, "all frames", |s| {
        s.streams[0].counters.packets + s.streams[0].counters.filtered == n
    });
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    let c = sum.status.streams[0].counters;
    assert_eq!((c.packets, c.filtered, c.lost), (2 * n / 3, n / 3, 0));
    for (name, t) in [("ds_002_dsa", 0u16), ("ds_002_dsbXx", 1)] {
        let frames = recording_frames(&disks, name);
        let expect: Vec<(u64, u16)> = (0..n).filter(|s| s % 3 == u64::from(t)).map(|s| (s, t)).collect();
        assert!(frames == expect, "{name}: frames differ");
        let m = ScanMetadata::read(&vlbiflow_scan::metadata_path(&disks[0], name)).unwrap();
        assert_eq!(m.streams[0].counters.packets, n / 3);
        assert_eq!(m.streams[0].threads, [t]);
    }
    assert_eq!(sum.recordings.len(), 2);
}

#[test]
fn datastreams_need_flexbuff_vdif_and_names_that_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 1);
    let mut c = config(disks.clone(), "ds_003", false, vec![rule("x", &["*"])]);
    c.format = ScanFormat::Mark6;
    let e = Recorder::start(c).err().unwrap().to_string();
    assert!(e.contains("FlexBuff"), "{e}");
    let mut c = config(disks.clone(), "ds_003", false, vec![rule("x", &["*"])]);
    c.streams = vec![StreamSpec::parse("m=m5b@127.0.0.1:0").unwrap()];
    assert!(matches!(
        c.validate(),
        Err(ConfigError::Invalid {
            field: "datastreams",
            ..
        })
    ));
    let c = config(
        disks.clone(),
        &"s".repeat(55),
        false,
        vec![rule("{station}{thread}x", &["*"])],
    );
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("makes recording names like"), "{e}");
    // A recording that could take an existing name is refused before anything is made.
    std::fs::create_dir(disks[0].join("ds_003_dsold")).unwrap();
    let c = config(disks.clone(), "ds_003", false, vec![rule("x", &["*"])]);
    let e = Recorder::start(c).err().unwrap().to_string();
    assert!(e.contains("ds_003_dsold exists"), "{e}");
    assert_eq!(scan_dirs(&disks), ["ds_003_dsold"]);
}
