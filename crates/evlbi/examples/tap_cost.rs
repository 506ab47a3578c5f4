//! What forwarding costs the capture thread: the producer's side of a destination (PSN + copy of an
//! 8224-byte frame into a lock-free ring slot, one release store; a wake-up per batch of 32), with a
//! consumer thread that takes the slots back as a sender would (without sending). Prints ns per frame
//! for 1 and 2 destinations.
//!
//! `cargo run --release -p vlbiflow-evlbi --example tap_cost`

use std::time::{Duration, Instant};

use vlbiflow_evlbi::ring::ring;

const FRAME: usize = 8224;

fn run(dests: usize, frames: u64) -> (f64, u64) {
    let mut producers = Vec::new();
    let mut drains = Vec::new();
    for _ in 0..dests {
        let (p, mut c) = ring(8192, 8 + FRAME);
        producers.push(p);
        drains.push(std::thread::spawn(move || loop {
            let n = c.wait(Duration::from_millis(50));
            if n == 0 && c.producer_gone() {
                return;
            }
            c.release(n);
        }));
    }
    let frame = vec![7u8; FRAME];
    let mut dropped = 0;
    let t0 = Instant::now();
    for i in 0..frames {
        for p in &mut producers {
            let psn = i.to_le_bytes();
            if !p.try_push(&[&psn, &frame]) {
                dropped += 1;
            }
            if i % 32 == 31 {
                p.notify();
            }
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / frames as f64;
    drop(producers);
    for d in drains {
        d.join().unwrap();
    }
    (ns, dropped)
}

fn main() {
    let frames = 2_000_000;
    for dests in [1, 2] {
        for _ in 0..3 {
            let (ns, dropped) = run(dests, frames);
            println!(
                "{dests} destination(s): {ns:.0} ns per recorded frame ({:.2} GB/s of frames; {} of {} offers found the ring full)",
                FRAME as f64 / ns,
                dropped,
                frames * dests as u64
            );
        }
    }
}
