//! `vlbiflow gen` as a user runs it: real processes, real files, real UDP on loopback, and the independent
//! `baseband` reader as the judge of what was written.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use vlbiflow_sink::{Sink, SinkConfig};

fn vlbiflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
        .args(args)
        .output()
        .expect("run vlbiflow")
}

/// Runs the baseband summariser; fails with the install hint if baseband is missing.
fn baseband_summary(path: &Path, frame_rate: u32) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/vdif_summary.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(path)
        .arg(frame_rate.to_string())
        .output()
        .expect("python3 must be installed to run the cross-check");
    assert!(
        out.status.success(),
        "baseband cross-check failed (install with `pip install baseband`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("summary JSON")
}

#[test]
fn file_output_decodes_in_baseband_with_right_times_threads_station_and_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.vdif");
    let out = vlbiflow(&[
        "gen",
        "--output",
        path.to_str().unwrap(),
        "--threads",
        "2",
        "--pps",
        "1000",
        "--count",
        "4000",
        "--station",
        "Xx",
        "--payload",
        "noise",
        "--start",
        "2026-03-01T12:00:00Z",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4000 * 8224);
    let summary = baseband_summary(&path, 500);
    let frames = summary["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 4000);
    let start = 1772366400.0; // 2026-03-01T12:00:00Z
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(
            f["thread"],
            (i % 2) as u64,
            "frame {i}: threads interleave 0,1,0,1"
        );
        assert_eq!(f["station"], "Xx");
        assert_eq!(f["bps"], 2);
        assert_eq!(f["length"], 8224);
        assert_eq!(f["invalid"], false);
        let t = f["time_unix"].as_f64().unwrap();
        let want = start + (i / 2) as f64 / 500.0;
        assert!((t - want).abs() < 1e-6, "frame {i}: time {t} want {want}");
    }
    // 2-bit noise with optimal thresholds: levels -3.3/-1/+1/+3.3 at about 16/34/34/16 %.
    let levels = summary["levels"].as_object().unwrap();
    assert_eq!(levels.len(), 4, "{levels:?}");
    let mut by_level: Vec<(f64, f64)> = levels
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.as_f64().unwrap()))
        .collect();
    by_level.sort_by(|a, b| a.0.total_cmp(&b.0));
    let occ: Vec<f64> = by_level.iter().map(|l| l.1).collect();
    for (got, want) in occ.iter().zip([0.159, 0.341, 0.341, 0.159]) {
        assert!((got - want).abs() < 0.01, "occupancy {occ:?}");
    }
    assert!(summary["mean"].as_f64().unwrap().abs() < 0.02);
}

/// Runs gen against an in-process null receiver and checks every datagram arrived once, in order.
fn network_round_trip(extra: &[&str]) {
    let mut config = SinkConfig::new("127.0.0.1:0".parse().unwrap());
    config.psn = true;
    config.idle_timeout = Some(Duration::from_secs(2));
    config.max_duration = Some(Duration::from_secs(30));
    let sink = Sink::open(config).unwrap();
    let addr: SocketAddr = sink.local_addr();
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let rx = s.spawn(|| sink.run(&stop, |_| {}).unwrap());
        let dest = addr.to_string();
        let mut args = vec![
            "gen",
            "--dest",
            &dest,
            "--threads",
            "2",
            "--rate",
            "200Mbps",
            "--count",
            "6000",
            "--psn",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = vlbiflow(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["frames"], 6000);
        assert_eq!(summary["streams"], 1);
        rx.join().unwrap()
    });
    assert_eq!(report.datagrams, 6000, "{extra:?}");
    assert_eq!(report.bytes, 6000 * (8224 + 8), "{extra:?}");
    let psn = report.psn.unwrap();
    assert_eq!(
        (psn.lost, psn.out_of_order, psn.duplicates),
        (0, 0, 0),
        "{extra:?}: {psn:?}"
    );
}

#[test]
fn network_stream_with_psn_arrives_whole_and_in_order() {
    network_round_trip(&[]);
}

#[test]
fn gso_sends_one_frame_per_datagram() {
    // The sink does not ask for GRO, so every datagram it reads is what went on the wire.
    network_round_trip(&["--gso", "7", "--batch", "64"]);
}

#[test]
fn bad_input_is_one_line_and_exit_2_before_sending() {
    let cases: &[(&[&str], &str)] = &[
        (&["--dest", "127.0.0.1", "--pps", "10"], "--dest"),
        (
            &["--dest", "no-such-host.invalid:4001", "--pps", "10"],
            "cannot resolve",
        ),
        (
            &["--dest", "127.0.0.1:4001", "--pps", "10", "--frame-size", "8228"],
            "multiple of 8",
        ),
        (
            &["--dest", "127.0.0.1:4001", "--pps", "10", "--frame-size", "70000"],
            "UDP datagram",
        ),
        (
            &["--dest", "127.0.0.1:4001", "--pps", "1001", "--threads", "2"],
            "whole number of frames",
        ),
        (
            &[
                "--dest",
                "127.0.0.1:4001",
                "--pps",
                "10",
                "--payload",
                "tone:1GHz",
            ],
            "tone",
        ),
        (&["--dest", "127.0.0.1:4001", "--rate", "4GBps"], "--rate"),
        (
            &["--dest", "127.0.0.1:4001", "--pps", "10", "--start", "yesterday"],
            "--start",
        ),
        (&["--dest", "127.0.0.1:4001"], "how fast"),
    ];
    for (args, needle) in cases {
        let mut full = vec!["gen"];
        full.extend_from_slice(args);
        let out = vlbiflow(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line, got {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing sent or printed");
    }
}

#[test]
fn help_has_examples() {
    let out = vlbiflow(&["gen", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Examples:") && text.contains("--rate 4Gbps"),
        "{text}"
    );
}

#[test]
fn a_network_duration_sends_exactly_rate_times_duration_frames() {
    let mut config = SinkConfig::new("127.0.0.1:0".parse().unwrap());
    config.psn = true;
    config.idle_timeout = Some(Duration::from_secs(2));
    config.max_duration = Some(Duration::from_secs(30));
    let sink = Sink::open(config).unwrap();
    let dest = sink.local_addr().to_string();
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let rx = s.spawn(|| sink.run(&stop, |_| {}).unwrap());
        // 3040 frames/s per stream (1520 per thread): 2 s is 6080 frames, in batches that do not divide it.
        let out = vlbiflow(&[
            "gen",
            "--dest",
            &dest,
            "--threads",
            "2",
            "--pps",
            "3040",
            "--duration",
            "2",
            "--psn",
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["frames"], 6080, "{summary}");
        assert_eq!(summary["cut_short"], false, "{summary}");
        rx.join().unwrap()
    });
    assert_eq!(report.datagrams, 6080);
}

#[test]
fn output_dash_writes_the_frames_to_standard_output() {
    // as `gather -o -` does: the frames go down the pipe, the summary to standard error, and no file
    // named "-" appears where the command ran
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vlbiflow"))
        .args([
            "gen",
            "-o",
            "-",
            "--count",
            "300",
            "--pps",
            "1000",
            "--threads",
            "2",
        ])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        out.stdout.len(),
        300 * 8224,
        "300 frames of 8224 bytes on standard output"
    );
    vlbiflow_formats::vdif::VdifFrame::new_checked(&out.stdout[8224..2 * 8224]).unwrap();
    let h = vlbiflow_formats::vdif::VdifHeader::new_checked(&out.stdout[8224..8224 + 32]).unwrap();
    assert_eq!(h.thread_id(), 1, "threads interleave");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gen: 300 frames"), "{err}");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "no file written");
    // --json wants standard output too
    let out = vlbiflow(&["gen", "-o", "-", "--json", "--count", "1", "--pps", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("standard output is taken by the frames"));
}

/// One stream split over sockets by PSN runs (`sink --split`): gen's GSO trains of 7, in bursts of
/// 1,000 datagrams that do not divide the runs of 1,024, cross run boundaries, so their tails arrive at
/// the socket of the run before and are handed on. With every 100th frame left out the loss is the same
/// whether the stream is received whole or split over 2 or 4 sockets, and nothing else is counted.
#[test]
fn a_stream_split_over_sockets_is_accounted_as_one() {
    let mut handed = Vec::new();
    for split in [1, 2, 4] {
        let mut config = SinkConfig::new("127.0.0.1:0".parse().unwrap());
        config.psn = true;
        config.udp.gro = true;
        config.split = split;
        config.idle_timeout = Some(Duration::from_secs(2));
        config.max_duration = Some(Duration::from_secs(30));
        let sink = Sink::open(config).unwrap();
        let dest = sink.local_addr().to_string();
        let stop = AtomicBool::new(false);
        let mut seconds = Vec::new();
        let (report, gen) = std::thread::scope(|s| {
            let rx = s.spawn(|| sink.run(&stop, |sec| seconds.push(*sec)).unwrap());
            let out = vlbiflow(&[
                "gen",
                "--dest",
                &dest,
                "--psn",
                "--gso",
                "7",
                "--batch",
                "1000",
                "--rate",
                "1Gbps",
                "--count",
                "20000",
                "--drop-every",
                "100",
                "--json",
            ]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let gen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            (rx.join().unwrap(), gen)
        });
        // 20,000 numbers, every 100th left out: the last (19,999) among them, so 199 gaps lie between
        // the first and the last datagram received.
        assert_eq!(gen["dropped"], 200);
        assert_eq!(report.datagrams, 19_800, "split {split}");
        assert_eq!(report.kernel_drops, 0, "split {split}");
        let psn = report.psn.unwrap();
        assert_eq!(
            (psn.lost, psn.out_of_order, psn.duplicates, psn.stray),
            (199, 0, 0, 0),
            "split {split}: {psn:?}"
        );
        assert_eq!(report.parts, split);
        assert_eq!(report.handoff_full, 0);
        // One line per second, in order, adding up to the totals.
        assert!(
            seconds.windows(2).all(|w| w[0].unix_second < w[1].unix_second),
            "{seconds:?}"
        );
        assert_eq!(seconds.iter().map(|s| s.datagrams).sum::<u64>(), 19_800);
        assert_eq!(seconds.iter().map(|s| s.lost).sum::<i64>(), 199, "{seconds:?}");
        handed.push(report.handed_on);
    }
    assert_eq!(handed[0], 0);
    assert!(
        handed[1] > 0 && handed[2] > 0,
        "no train crossed a run boundary: {handed:?}"
    );
}
