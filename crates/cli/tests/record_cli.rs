//! `vlbiflow record` as a process: graceful SIGTERM, kill -9 leaving a readable incomplete scan, usage errors.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FRAME: usize = 1032;

use vlbiflow_testkit::net::free_udp_port as free_port;
use vlbiflow_testkit::vdif::{udps, Frame};

/// A datagram: the PSN `seq`, then VDIF frame `seq` at 1000 frames/s with `seq` in its payload.
fn frame(seq: u64) -> Vec<u8> {
    let mut f = Frame::new(FRAME).at(seq, 1000).build();
    f[32..40].copy_from_slice(&seq.to_le_bytes());
    udps(seq, &f)
}

fn spawn_record(disks: &[PathBuf], scan: &str, port: u16) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vlbiflow"));
    cmd.arg("record")
        .arg("--stream")
        .arg(format!("a=vdif@127.0.0.1:{port},psn,frame-size={FRAME}"))
        .args([
            "--scan",
            scan,
            "--block-size",
            "64KB",
            "--recv-buffer",
            "16MiB",
            "--pool-blocks",
            "64",
        ]);
    for d in disks {
        cmd.arg("--disk").arg(d);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn wait_for(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let end = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True when a UDP socket is bound to `port` (from /proc/net/udp: local address `HEXIP:HEXPORT`).
fn udp_port_bound(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let want = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .any(|local| local.ends_with(&want))
}

/// Stops a recorder with Ctrl-C (SIGINT) and returns its output, checking it exited 130 after its summary.
fn interrupt(child: Child) -> std::process::Output {
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn make_disks(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let d = dir.join(format!("d{i}"));
            std::fs::create_dir(&d).unwrap();
            d
        })
        .collect()
}

fn meta(d: &Path, scan: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(d.join(format!("{scan}.vlbiflow.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Parses a scatter-gather v2 file up to its last whole block: (block number, frame sequence numbers).
fn whole_blocks(path: &Path) -> Vec<(u32, Vec<u64>)> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(u32_at(&b, 0), 0xfeed_6666);
    assert_eq!(u32_at(&b, 4), 2);
    assert_eq!(u32_at(&b, 16) as usize, FRAME);
    let mut at = 20;
    let mut out = Vec::new();
    while b.len() - at >= 8 {
        let (num, wb) = (u32_at(&b, at), u32_at(&b, at + 4) as usize);
        if at + wb > b.len() {
            break; // torn last block: detectable through wb_size
        }
        let seqs = b[at + 8..at + wb]
            .chunks(FRAME)
            .map(|f| u64::from_le_bytes(f[32..40].try_into().unwrap()))
            .collect();
        out.push((num, seqs));
        at += wb;
    }
    out
}

#[test]
fn sigterm_finishes_a_complete_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = make_disks(tmp.path(), 2);
    let port = free_port();
    let child = spawn_record(&disks, "term_001", port);
    wait_for("metadata", Duration::from_secs(10), || {
        disks[0].join("term_001.vlbiflow.json").exists()
    });
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0..2000 {
        sock.send_to(&frame(seq), ("127.0.0.1", port)).unwrap();
        if seq % 64 == 0 {
            std::thread::yield_now();
        }
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("complete"), "{stderr}");
    for d in &disks {
        assert_eq!(meta(d, "term_001")["complete"], true);
    }
    let mut blocks: Vec<_> = disks
        .iter()
        .flat_map(|d| whole_blocks(&d.join("term_001.vdif")))
        .collect();
    blocks.sort_by_key(|b| b.0);
    let seqs: Vec<u64> = blocks.into_iter().flat_map(|b| b.1).collect();
    let packets = meta(&disks[0], "term_001")["streams"][0]["counters"]["packets"]
        .as_u64()
        .unwrap();
    assert_eq!(seqs.len() as u64, packets);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
}

/// How a recording is ended in [`lost_is_sent_minus_stored`].
#[derive(Clone, Copy, Debug)]
enum Ending {
    Sigterm,
    Sigint,
    Duration,
}

/// `lost` = frames sent minus frames stored, exactly, however the recording ends: every 97th frame is left
/// out by the sender; the PSN range the recorder saw (first..=last) must equal the frames it stored plus
/// the frames it reports lost, and the frames on disk must be exactly the frames it says it stored.
fn lost_is_sent_minus_stored(ending: Ending) {
    let tmp = tempfile::tempdir().unwrap();
    let disks = make_disks(tmp.path(), 2);
    let port = free_port();
    let scan = format!("end_{ending:?}").to_lowercase();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vlbiflow"));
    cmd.arg("record")
        .arg("--stream")
        .arg(format!("a=vdif@127.0.0.1:{port},psn,frame-size={FRAME}"))
        .args([
            "--scan",
            &scan,
            "--block-size",
            "64KB",
            "--recv-buffer",
            "16MiB",
            "--json",
        ]);
    if let Ending::Duration = ending {
        cmd.args(["--duration", "2s"]);
    }
    for d in &disks {
        cmd.arg("--disk").arg(d);
    }
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_for("metadata", Duration::from_secs(10), || {
        disks[0].join(format!("{scan}.vlbiflow.json")).exists()
    });
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let skipped = |seq: u64| seq % 97 == 50;
    for seq in (0..3000).filter(|&s| !skipped(s)) {
        sock.send_to(&frame(seq), ("127.0.0.1", port)).unwrap();
        if seq % 64 == 0 {
            std::thread::yield_now();
        }
    }
    let signal = match ending {
        Ending::Sigterm => Some("-TERM"),
        Ending::Sigint => Some("-INT"),
        Ending::Duration => None,
    };
    if let Some(sig) = signal {
        let pid = child.id().to_string();
        assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Ctrl-C: the summary, then 130 (interrupted); SIGTERM or the duration: 0
    let want = if matches!(ending, Ending::Sigint) { 130 } else { 0 };
    assert_eq!(out.status.code(), Some(want), "{ending:?}: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &summary["streams"][0]["counters"];
    let (packets, lost) = (c["packets"].as_u64().unwrap(), c["lost"].as_u64().unwrap());
    let mut blocks: Vec<_> = disks
        .iter()
        .flat_map(|d| whole_blocks(&d.join(format!("{scan}.vdif"))))
        .collect();
    blocks.sort_by_key(|b| b.0);
    let seqs: Vec<u64> = blocks.into_iter().flat_map(|b| b.1).collect();
    assert_eq!(seqs.len() as u64, packets, "{ending:?}: frames on disk vs stored");
    assert!(!seqs.is_empty(), "{ending:?}: nothing stored");
    let (first, last) = (seqs[0], *seqs.last().unwrap());
    let sent = (first..=last).count() as u64;
    let left_out = (first..=last).filter(|&s| skipped(s)).count() as u64;
    assert_eq!(
        packets + lost,
        sent,
        "{ending:?}: stored + lost = sent in {first}..={last}"
    );
    assert_eq!(lost, left_out, "{ending:?}: lost = frames the sender left out");
    assert!(
        stderr.contains(&format!("lost {lost}")) || lost == 0,
        "{ending:?}: {stderr}"
    );
}

#[test]
fn lost_is_sent_minus_stored_after_sigterm() {
    lost_is_sent_minus_stored(Ending::Sigterm);
}

#[test]
fn lost_is_sent_minus_stored_after_ctrl_c() {
    lost_is_sent_minus_stored(Ending::Sigint);
}

#[test]
fn lost_is_sent_minus_stored_after_the_duration() {
    lost_is_sent_minus_stored(Ending::Duration);
}

#[test]
fn kill_9_leaves_readable_incomplete_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = make_disks(tmp.path(), 2);
    let port = free_port();
    let mut child = spawn_record(&disks, "kill_001", port);
    wait_for("metadata", Duration::from_secs(10), || {
        disks[0].join("kill_001.vlbiflow.json").exists()
    });
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let size = |d: &PathBuf| {
        std::fs::metadata(d.join("kill_001.vdif"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let mut seq = 0u64;
    // Keep sending until several blocks are in the files, then kill without warning.
    let end = Instant::now() + Duration::from_secs(20);
    while disks.iter().map(size).sum::<u64>() < 6 * 64 * 1024 {
        assert!(Instant::now() < end, "no data written");
        for _ in 0..64 {
            sock.send_to(&frame(seq), ("127.0.0.1", port)).unwrap();
            seq += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for d in &disks {
        assert_eq!(meta(d, "kill_001")["complete"], false, "{}", d.display());
    }
    let mut blocks: Vec<_> = disks
        .iter()
        .flat_map(|d| whole_blocks(&d.join("kill_001.vdif")))
        .collect();
    assert!(blocks.len() >= 4, "{} whole blocks", blocks.len());
    blocks.sort_by_key(|b| b.0);
    // Every whole block holds consecutive frames, and blocks follow each other in sequence order.
    let seqs: Vec<u64> = blocks.iter().flat_map(|b| b.1.iter().copied()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    for (_, b) in &blocks {
        assert!(b.windows(2).all(|w| w[1] == w[0] + 1));
    }
}

#[test]
fn bad_stream_spec_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
        .args([
            "record",
            "--stream",
            "a=vdif@127.0.0.1:1,frame-size=7",
            "--scan",
            "x",
        ])
        .arg("--disk")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("frame-size"), "{e}");
    let out = Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
        .args([
            "record",
            "--stream",
            "a=vdif@127.0.0.1:1",
            "--scan",
            "x",
            "--disk",
            "/nonexistent-vf/*",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Two streams whose frames cannot be told apart (both VDIF, any thread) are warned about at the start;
/// `threads=1024` is a usage error naming the range.
#[test]
fn indistinguishable_streams_are_warned_about_and_bad_threads_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = make_disks(tmp.path(), 1);
    let out = Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
        .args([
            "record",
            "--scan",
            "warned",
            "--duration",
            "0.2",
            "--pool-blocks",
            "8",
        ])
        .args(["--block-size", "64KB", "--recv-buffer", "1MiB"])
        .args([
            "--stream",
            &format!("a=vdif@127.0.0.1:{},psn,frame-size={FRAME}", free_port()),
        ])
        .args([
            "--stream",
            &format!("b=vdif@127.0.0.1:{},psn,frame-size={FRAME}", free_port()),
        ])
        .arg("--disk")
        .arg(&disks[0])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert!(
        e.contains("warning: streams a and b") && e.contains("station"),
        "{e}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
        .args([
            "record",
            "--scan",
            "x",
            "--stream",
            "a=vdif@127.0.0.1:1,threads=0,1024",
        ])
        .arg("--disk")
        .arg(&disks[0])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("0..=1023"), "{e}");
}

/// `sink` and `record` count the same stream the same way (one sequence tracker, vlbiflow-seq): the same
/// datagrams, with gaps, late frames and duplicates, go to both at once, and their lost, out-of-order and
/// duplicate counts agree with each other and with what was done to the stream; so do a sink's when
/// the stream is split over several sockets and threads.
#[test]
fn sink_and_record_report_the_same_loss_for_the_same_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = make_disks(tmp.path(), 1);
    let (rport, sport, split_port) = (free_port(), free_port(), free_port());
    let mut rec = Command::new(env!("CARGO_BIN_EXE_vlbiflow"));
    rec.arg("record")
        .arg("--stream")
        .arg(format!("a=vdif@127.0.0.1:{rport},psn,frame-size={FRAME}"))
        .args([
            "--scan",
            "same_001",
            "--block-size",
            "64KB",
            "--recv-buffer",
            "16MiB",
            "--json",
        ])
        .arg("--disk")
        .arg(&disks[0]);
    let rec = rec.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The second sink splits the stream over 4 sockets and threads by runs of 16 PSNs.
    let start_sink = |port: u16, split: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
            .args([
                "sink",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--psn",
                "--json",
            ])
            .args([
                "--recv-buffer",
                "16MiB",
                "--idle-timeout",
                "0",
                "--duration",
                "60",
            ])
            .args(split)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let sink = start_sink(sport, &[]);
    let split = start_sink(split_port, &["--split", "4", "--run-len", "16"]);
    wait_for("metadata", Duration::from_secs(10), || {
        disks[0].join("same_001.vlbiflow.json").exists()
    });
    // The order the "network" delivers: 0..3000 with every 101st left out (lost), every 211th held back
    // by 5 places (late: out of order), and every 307th sent twice (duplicate).
    let mut order: Vec<u64> = (0..3000).filter(|s| s % 101 != 17).collect();
    let late: Vec<usize> = (0..order.len()).filter(|i| i % 211 == 100).collect();
    for &i in late.iter().rev() {
        let f = order.remove(i);
        order.insert(i + 5, f);
    }
    let dups: Vec<u64> = order.iter().copied().filter(|s| s % 307 == 3).collect();
    for d in dups {
        let at = order.iter().position(|&s| s == d).unwrap();
        order.insert(at + 1, d);
    }
    let lost_expected = (0..3000u64).filter(|s| s % 101 == 17).count() as u64;
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    // The sink says nothing in --json mode before data arrives: wait until its port shows in the
    // kernel's table of bound UDP sockets.
    wait_for("sinks bound", Duration::from_secs(10), || {
        udp_port_bound(sport) && udp_port_bound(split_port)
    });
    for (i, &seq) in order.iter().enumerate() {
        let d = frame(seq);
        sock.send_to(&d, ("127.0.0.1", rport)).unwrap();
        sock.send_to(&d, ("127.0.0.1", sport)).unwrap();
        sock.send_to(&d, ("127.0.0.1", split_port)).unwrap();
        if i % 64 == 0 {
            std::thread::yield_now();
        }
    }
    // Both have everything once the recorder's metadata counts every datagram; then stop both.
    let delivered = order.len() as u64;
    wait_for("recorder counted every datagram", Duration::from_secs(20), || {
        let m = meta(&disks[0], "same_001");
        let c = &m["streams"][0]["counters"];
        c["packets"].as_u64().unwrap_or(0) + c["duplicates"].as_u64().unwrap_or(0) >= delivered
    });
    for child in [&rec, &sink, &split] {
        let pid = child.id().to_string();
        assert!(Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success());
    }
    let rec = rec.wait_with_output().unwrap();
    let sink = sink.wait_with_output().unwrap();
    let split = split.wait_with_output().unwrap();
    // Ctrl-C: the summary, then 130
    assert_eq!(
        rec.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    assert_eq!(
        sink.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&sink.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&rec.stdout).unwrap();
    let rc = &r["streams"][0]["counters"];
    let summary_of = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains("\"summary\""))
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .unwrap_or_else(|| panic!("no summary line: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let summary = summary_of(&sink);
    let split_summary = summary_of(&split);
    let of = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(of(&summary, "kernel_drops"), 0, "sink: kernel dropped datagrams");
    assert_eq!(of(rc, "kernel_drops"), 0, "record: kernel dropped datagrams");
    let record = (of(rc, "lost"), of(rc, "out_of_order"), of(rc, "duplicates"));
    let sinks = (
        of(&summary, "lost"),
        of(&summary, "out_of_order"),
        of(&summary, "duplicate"),
    );
    assert_eq!(record, sinks, "record (lost, out of order, duplicates) vs sink");
    assert_eq!(record.0, lost_expected, "lost");
    assert_eq!(record.1, late.len() as u64, "out of order");
    // Split over four threads: the same datagrams, lost and duplicates. (A late datagram is out of
    // order only among its own run's socket: one held back past the end of its run is not.)
    assert_eq!(of(&split_summary, "split"), 4);
    assert_eq!(
        of(&split_summary, "kernel_drops"),
        0,
        "split sink: kernel dropped datagrams"
    );
    assert_eq!(of(&split_summary, "datagrams"), of(&summary, "datagrams"));
    assert_eq!(
        (of(&split_summary, "lost"), of(&split_summary, "duplicate")),
        (record.0, record.2),
        "split sink (lost, duplicates) vs record"
    );
    assert!(of(&split_summary, "out_of_order") <= record.1);
}

/// A stream split over two sockets whose sender restarts its PSNs mid-scan (from 10^9 back to 0) is
/// still recorded in order and counted as one restart with only the frames really left out lost.
#[test]
fn a_split_stream_survives_a_sender_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = make_disks(tmp.path(), 2);
    let port = free_port();
    let scan = "restart_001";
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vlbiflow"));
    cmd.arg("record")
        .arg("--stream")
        .arg(format!("a=vdif@127.0.0.1:{port},psn,frame-size={FRAME},split=2"))
        // 126 frames per block: runs of 32.
        .args([
            "--scan",
            scan,
            "--block-size",
            "130KB",
            "--recv-buffer",
            "16MiB",
            "--json",
        ]);
    for d in &disks {
        cmd.arg("--disk").arg(d);
    }
    let rec = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_for("metadata", Duration::from_secs(10), || {
        disks[0].join(format!("{scan}.vlbiflow.json")).exists()
    });
    // Frame i (VDIF time i at 1000 frames/s) goes with PSN 10^9 + i for 1,000 frames, then with PSN
    // i - 1000 after the restart; every 97th of the second sequence is left out.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sent = 0u64;
    for i in 0..3000u64 {
        let psn = if i < 1000 { 1_000_000_000 + i } else { i - 1000 };
        if i >= 1000 && psn % 97 == 50 {
            continue;
        }
        let mut f = Frame::new(FRAME).at(i, 1000).build();
        f[32..40].copy_from_slice(&i.to_le_bytes());
        sock.send_to(&udps(psn, &f), ("127.0.0.1", port)).unwrap();
        sent += 1;
        if i % 64 == 0 {
            std::thread::yield_now();
        }
    }
    let lost_expected = (0..2000u64).filter(|p| p % 97 == 50).count() as u64;
    wait_for("every frame counted", Duration::from_secs(20), || {
        meta(&disks[0], scan)["streams"][0]["counters"]["packets"].as_u64() >= Some(sent)
    });
    let rec = interrupt(rec);
    let r: serde_json::Value = serde_json::from_slice(&rec.stdout).unwrap();
    let s = &r["streams"][0];
    let c = &s["counters"];
    assert_eq!(
        ["packets", "lost", "out_of_order", "duplicates", "kernel_drops"].map(|k| c[k].as_u64().unwrap()),
        [sent, lost_expected, 0, 0, 0],
        "{s}"
    );
    let summary = String::from_utf8_lossy(&rec.stderr);
    assert!(summary.contains("restarts 1\n"), "{summary}");
    // On disk, in block order, the frames come in the order they were sent.
    let mut frames: Vec<(u32, Vec<u64>)> = disks
        .iter()
        .flat_map(|d| whole_blocks(&d.join(format!("{scan}.vdif"))))
        .collect();
    frames.sort_by_key(|(n, _)| *n);
    let order: Vec<u64> = frames.into_iter().flat_map(|(_, seqs)| seqs).collect();
    let expected: Vec<u64> = (0..3000u64)
        .filter(|&i| i < 1000 || (i - 1000) % 97 != 50)
        .collect();
    assert_eq!(order.len(), expected.len());
    if let Some(at) = order.iter().zip(&expected).position(|(a, b)| a != b) {
        let from = at.saturating_sub(3);
        panic!(
            "frames out of order on disk from {at}: {:?} where {:?} was sent",
            &order[from..(at + 20).min(order.len())],
            &expected[from..(at + 20).min(expected.len())]
        );
    }
}

/// A stream recorded over 1, 2 and 4 sockets and capture threads (`split=N`) is one recording: the
/// same frames stored and lost as gen says, and `check` reads the scan back in order with dense block
/// numbers, with GSO trains crossing the runs (GRO on) and with single datagrams (GRO off).
#[test]
fn a_split_stream_is_recorded_in_order_and_accounted_as_one() {
    for (split, gro) in [(1, true), (2, true), (4, true), (4, false)] {
        let tmp = tempfile::tempdir().unwrap();
        let disks = make_disks(tmp.path(), 2);
        let port = free_port();
        let scan = "split_001";
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vlbiflow"));
        cmd.arg("record")
            .arg("--stream")
            .arg(format!("a=vdif@127.0.0.1:{port},psn,split={split}"))
            // Blocks of 121 frames: runs of 32 PSNs, so 20,000 frames make 625 runs.
            .args([
                "--scan",
                scan,
                "--block-size",
                "1MB",
                "--recv-buffer",
                "16MiB",
                "--json",
            ])
            .args(if gro { &[][..] } else { &["--no-gro"][..] });
        for d in &disks {
            cmd.arg("--disk").arg(d);
        }
        let rec = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // The sockets are bound before the first metadata is written.
        wait_for("the recorder's metadata", Duration::from_secs(20), || {
            disks[0].join(format!("{scan}.vlbiflow.json")).exists()
        });
        let dest = format!("127.0.0.1:{port}");
        let mut args = vec![
            "gen", "--dest", &dest, "--psn", "--rate", "1Gbps", "--count", "20000",
        ];
        args.extend(["--drop-every", "100", "--json"]);
        if gro {
            // Trains of 7 in bursts of 1000: they cross the runs' boundaries.
            args.extend(["--gso", "7", "--batch", "1000"]);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        wait_for("every frame counted", Duration::from_secs(20), || {
            meta(&disks[0], scan)["streams"][0]["counters"]["packets"].as_u64() >= Some(19_800)
        });
        let rec = interrupt(rec);
        let r: serde_json::Value = serde_json::from_slice(&rec.stdout).unwrap();
        let c = &r["streams"][0]["counters"];
        let of = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
        assert_eq!(
            [
                "packets",
                "lost",
                "out_of_order",
                "duplicates",
                "kernel_drops",
                "dropped_no_buffer"
            ]
            .map(|k| of(c, k)),
            [19_800, 199, 0, 0, 0, 0],
            "split {split}, GRO {gro}: {c}"
        );
        let rx = &r["streams"][0]["receive"];
        assert_eq!(of(rx, "parts"), split as u64, "{rx}");
        assert_eq!(of(rx, "handoff_full"), 0, "{rx}");
        // Trains crossing the runs: their tails were handed to their own run's thread.
        assert_eq!(
            of(rx, "handed_on") > 0,
            gro && split > 1,
            "split {split}, GRO {gro}: {rx}"
        );
        // Read back: every frame in time order, the blocks numbered without a hole.
        let mut check = vec!["check".to_string(), "--json".into()];
        for d in &disks {
            check.extend(["--disk".into(), d.display().to_string()]);
        }
        check.push(scan.into());
        let out = Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
            .args(&check)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(
            ["frames", "missing", "out_of_order", "duplicates"].map(|k| of(&v, k)),
            [19_800, 199, 0, 0],
            "split {split}, GRO {gro}: check"
        );
        let b = &v["blocks"];
        assert_eq!(of(b, "missing_blocks"), 0, "split {split}: {b}");
        assert_eq!(of(b, "first_block"), 0);
        assert_eq!(of(b, "last_block") + 1, of(b, "blocks"));
    }
}
