//! What `vlbiflow record` tells its operator, as a process over real UDP on loopback: the ready line, the
//! first PSN and the two durations in the summary, the pool in the progress line, and a stream that
//! accepted nothing of what it received (a data error, exit 1).

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

const FRAME: usize = 1032;
/// Frames per second of the test stream (configured, so the data span is exact).
const RATE: u64 = 1000;
/// How long a step may take before the test gives up (a guard against hanging, not a measurement).
const GUARD: Duration = Duration::from_secs(60);

use vlbiflow_testkit::net::free_udp_port as free_port;
use vlbiflow_testkit::vdif::{udps, Frame};

/// A datagram: 8-byte PSN `seq`, then a VDIF frame numbered `seq` at `RATE` frames/s from second 5_227_200.
fn datagram(seq: u64) -> Vec<u8> {
    udps(seq, &Frame::new(FRAME).at(seq, RATE as u32).build())
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

/// `record` of one stream (`spec` after the address) with its standard error read line by line on a
/// thread: the lines arrive on the returned channel, in order, and every line is also kept for the end.
fn spawn_record(disks: &[PathBuf], scan: &str, port: u16, spec: &str) -> (Child, Receiver<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vlbiflow"));
    cmd.arg("record")
        .arg("--stream")
        .arg(format!("a=vdif@127.0.0.1:{port}{spec}"))
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
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Reads lines until one satisfies `want`; returns every line read so far. Fails on end of output.
fn read_until(rx: &Receiver<String>, seen: &mut Vec<String>, what: &str, want: impl Fn(&str) -> bool) {
    loop {
        match rx.recv_timeout(GUARD) {
            Ok(line) => {
                let hit = want(&line);
                seen.push(line);
                if hit {
                    return;
                }
            }
            Err(RecvTimeoutError::Timeout) => panic!("no {what} line in:\n{}", seen.join("\n")),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("output ended without {what}:\n{}", seen.join("\n"))
            }
        }
    }
}

fn terminate(child: &mut Child) {
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
}

/// The ready line comes once the socket is bound and receiving: everything sent after it is recorded,
/// beginning with the first frame sent. The summary names that frame's PSN and time, and says the data's
/// own time span apart from the wall-clock time the recording ran; the progress line says the pool as
/// blocks and bytes free of allocated, and the rates with their window.
#[test]
fn ready_line_first_psn_and_both_durations() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = make_disks(tmp.path(), 2);
    let port = free_port();
    let (mut child, rx) = spawn_record(
        &disks,
        "ready_001",
        port,
        &format!(",psn,frame-size={FRAME},frame-rate={RATE}"),
    );
    let mut seen = Vec::new();
    read_until(&rx, &mut seen, "ready", |l| {
        l.contains("ready: receiving a on 127.0.0.1:")
    });
    // Sent at once after the ready line: PSN 448 to 2447, 2000 frames, 2.000 s of time stamps.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (first, n) = (448u64, 2000u64);
    for seq in first..first + n {
        sock.send_to(&datagram(seq), ("127.0.0.1", port)).unwrap();
        if seq % 64 == 0 {
            std::thread::yield_now();
        }
    }
    // The progress line that counts them all (printed every few seconds on a pipe).
    read_until(&rx, &mut seen, "progress", |l| {
        l.contains(&format!("| {n} pkts "))
    });
    let progress = seen.last().unwrap().clone();
    assert!(
        progress.contains("| pool ") && progress.contains(" of 64 blocks free ("),
        "{progress}"
    );
    assert!(progress.contains(" MB)"), "{progress}");
    assert!(progress.contains("(5 s average)"), "{progress}");
    assert!(!progress.contains("DISKS BEHIND"), "{progress}");
    terminate(&mut child);
    while let Ok(line) = rx.recv_timeout(GUARD) {
        seen.push(line);
    }
    let status = child.wait().unwrap();
    let text = seen.join("\n");
    assert!(status.success(), "{text}");
    assert!(
        text.contains("recorded for ") && text.contains(" s (wall clock, start to stop)"),
        "{text}"
    );
    assert!(text.contains(&format!("stream a: {n} packets")), "{text}");
    assert!(text.contains("lost 0 (loss 0)"), "{text}");
    assert!(
        text.contains("data span 2.000 s (first to last frame time stamp"),
        "{text}"
    );
    assert!(text.contains(&format!("first PSN {first} ")), "{text}");
    // 448 frames past second 5_227_200 of epoch 48 (2024-01-01): 2024-03-01T12:00:00.448Z.
    assert!(text.contains("first frame time 2024-"), "{text}");
}

/// A PSN stream recorded without `psn`: every datagram is 8 bytes longer than a frame. The recorder says
/// loudly that the stream recorded nothing, why, and what to change, and exits 1 (a data problem).
#[test]
fn a_stream_that_accepted_nothing_is_a_data_error() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = make_disks(tmp.path(), 2);
    let port = free_port();
    let (mut child, rx) = spawn_record(&disks, "nopsn_001", port, &format!(",frame-size={FRAME}"));
    let mut seen = Vec::new();
    read_until(&rx, &mut seen, "ready", |l| l.contains("ready: receiving a on"));
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0..300 {
        sock.send_to(&datagram(seq), ("127.0.0.1", port)).unwrap();
    }
    read_until(&rx, &mut seen, "progress", |l| l.contains(" rej 300 "));
    terminate(&mut child);
    while let Ok(line) = rx.recv_timeout(GUARD) {
        seen.push(line);
    }
    let status = child.wait().unwrap();
    let text = seen.join("\n");
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains("STREAM a RECORDED NOTHING: 300 datagram(s) received, none accepted"),
        "{text}"
    );
    assert!(
        text.contains(&format!("got {} B, expected {FRAME} B", FRAME + 8)),
        "{text}"
    );
    assert!(text.contains("add psn to the stream"), "{text}");
}
