//! The daemon keeps answering while a recording starts and stops: `record?` on another connection and
//! `GET /metrics` are served while `record=on` allocates a large block pool (2 GB, zeroed and touched) and
//! while `record=off` stops capture and drains the writers, with a stream arriving the whole time,
//! instead of waiting behind them.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::*;
use vlbiflow_control::client::http_get;
use vlbiflow_control::{spawn, RecorderEngine};

/// Generous: a hang detector for "answers while a recording starts", not a performance figure.
const BOUND: Duration = Duration::from_secs(2);

#[test]
fn record_query_and_metrics_answer_while_a_recording_starts_and_stops() {
    let disks = Disks::new(2);
    let mut cfg = disks.config("");
    // 256 blocks of 8 MB: the pool the engine allocates (and touches) before the recording starts.
    cfg.recorder.block_size = 8_000_000;
    cfg.recorder.pool_blocks = Some(256);
    let d = spawn(cfg, Box::new(RecorderEngine)).unwrap();
    let port = free_udp_port();
    let mut ctl = Ctl::connect(d.control_addr);
    ctl.expect(
        &format!("input_stream=add:RDBE1:vdif:{FRAME}:50:42:lo:127.0.0.1:{port}"),
        "!input_stream = 0 : added : RDBE1 ;",
    );
    ctl.expect("input_stream=commit", "!input_stream = 0 : committed : 1 ;");

    // A second operator polls record? and /metrics throughout.
    let done = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (control, http) = (d.control_addr, d.http_addr.to_string());
    let poller = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut other = Ctl::connect(control);
            let mut seen = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = other.one("record?");
                let record_latency = t.elapsed();
                let t = Instant::now();
                let (code, _) = http_get(&http, "/metrics", None, Duration::from_secs(30)).unwrap();
                assert_eq!(code, 200);
                seen.push((r, record_latency, t.elapsed()));
                let _ = ready_tx.send(());
            }
            seen
        })
    };
    ready_rx.recv().unwrap();
    // The station streams all along: before, during and after the start and the stop (frames of a stream
    // not yet recorded are dropped by the kernel; once recording, the writers have work to drain).
    let streaming = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut next = 0;
            while !done.load(Ordering::Relaxed) {
                send_frames(SocketAddr::from(([127, 0, 0, 1], port)), next, 2_000);
                next += 2_000;
            }
            next
        })
    };
    let t = Instant::now();
    ctl.expect(
        "record=on:60:scan1:exp:st",
        "!record = 0 : recording : exp_st_scan1 ;",
    );
    let start_took = t.elapsed();
    let http = d.http_addr.to_string();
    until("frames recorded", || {
        let (_, body) = http_get(&http, "/metrics", None, Duration::from_secs(30)).unwrap();
        body.lines()
            .filter(|l| l.starts_with("vlbiflow_stream_packets_total"))
            .any(|l| l.rsplit(' ').next().is_some_and(|v| v != "0"))
            .then_some(())
    });
    let t = Instant::now();
    ctl.expect("record=off", "!record = 0 : flushing : exp_st_scan1 ;");
    let stop_took = t.elapsed();
    ctl.wait_state("off");
    done.store(true, Ordering::Relaxed);
    let seen = poller.join().unwrap();
    let streamed = streaming.join().unwrap();

    let worst_record = seen.iter().map(|s| s.1).max().unwrap();
    let worst_metrics = seen.iter().map(|s| s.2).max().unwrap();
    eprintln!(
        "record=on took {start_took:?}, record=off {stop_took:?}; {} polls: worst record? {worst_record:?}, \
         worst /metrics {worst_metrics:?}; {streamed} frames streamed",
        seen.len()
    );
    let mut states: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    states.dedup();
    // Answered while the pool was being allocated: the recording was reported as pending then.
    assert!(
        seen.iter()
            .any(|s| s.0 == "!record? 0 : pending : main : 1 : exp_st_scan1 ;"),
        "record? never answered while the recording was starting: {states:?}"
    );
    assert!(worst_record < BOUND, "record? took {worst_record:?}");
    assert!(worst_metrics < BOUND, "/metrics took {worst_metrics:?}");
    d.stop();
}
