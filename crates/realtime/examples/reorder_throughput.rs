//! Frames per second through the Reorderer (push + poll_output, including the copy into the ring), in
//! simulated time. Run: `cargo run --release -p vlbiflow-realtime --example reorder_throughput`.
//!
//! Patterns: in order; 1% lost; every 16th pair of frames swapped plus 1% lost. 8224- and 1032-byte frames,
//! a window of 1024 frames, a 200 ms deadline.

use std::hint::black_box;
use std::time::{Duration, Instant};

use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::reorder::{KeyMode, ReorderConfig, Reorderer};

fn run(len: usize, frames: u64, pattern: &str) -> (f64, u64) {
    let cfg = ReorderConfig::new(
        FrameKind::Vdif,
        len,
        KeyMode::Psn,
        1024,
        Duration::from_millis(200),
    );
    let mut r = Reorderer::new(cfg).unwrap();
    let frame = vec![0x5au8; len];
    let t0 = Instant::now();
    let mut out_bytes = 0u64;
    let start = Instant::now();
    for i in 0..frames {
        // Simulated arrival clock: 8 µs per frame (about 8 Gbit/s of 8224-byte frames).
        let now = t0 + Duration::from_micros(8 * i);
        let key = match pattern {
            "reorder" if i % 32 == 16 => i + 1,
            "reorder" if i % 32 == 17 => i - 1,
            _ => i,
        };
        let lost = pattern != "in-order" && key % 100 == 37;
        if !lost {
            r.push(now, key, &frame).expect("drained after every push");
        }
        while let Some(o) = r.poll_output(now) {
            let f = black_box(o.frame);
            out_bytes += f.len() as u64 + u64::from(f[f.len() / 2]);
        }
    }
    let end = t0 + Duration::from_secs(3600);
    r.flush();
    while let Some(o) = r.poll_output(end) {
        let f = black_box(o.frame);
        out_bytes += f.len() as u64 + u64::from(f[f.len() / 2]);
    }
    let secs = start.elapsed().as_secs_f64();
    let c = r.counters();
    assert_eq!(c.delivered + c.filled, frames);
    (frames as f64 / secs, out_bytes)
}

fn main() {
    for len in [8224usize, 1032] {
        for pattern in ["in-order", "loss", "reorder"] {
            let frames = 2_000_000;
            let (fps, bytes) = run(len, frames, pattern);
            println!(
                "{len:5}-byte frames, {pattern:8}: {:6.2} Mframes/s ({:6.1} Gbit/s of frames)",
                fps / 1e6,
                fps * len as f64 * 8.0 / 1e9
            );
            black_box(bytes);
        }
    }
}
