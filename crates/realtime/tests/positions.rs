//! The whole real-time chain in simulated time, station to correlator: frames lost before the station, in
//! its socket, for want of a buffer and in a full forward queue, interleaved with path loss and path
//! reordering. With each forwarded frame numbered by its position in the source stream
//! ([`Positioner`]), every output frame of the correlator's [`Reorderer`] is the source frame of its
//! position or fill, and fill = the drops of every stage, each counted on its own. With gap notices the
//! receiver tells the fill the station declared from the fill the path caused, exactly.
//!
//! The same chain with the old rule (a forwarder that numbers the frames it sends 0, 1, 2, ...) is run
//! too, and the check must catch it: that rule moves every frame after a station loss up by one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use vlbiflow_formats::notice::{Cause, GapNotice};
use vlbiflow_formats::psn::PSN_LEN;
use vlbiflow_formats::vdif::VdifHeaderRepr;
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::forward::{ForwardConfig, ForwardQueue, Offer};
use vlbiflow_realtime::position::{DeclaredGaps, FirstPsn, GapLog, Place, Positioner, SourceKey};
use vlbiflow_realtime::reorder::{KeyMode, OutputKind, ReorderConfig, Reorderer};

const LEN: usize = 64;
const THREADS: u16 = 2;
const RATE: u32 = 10_000;
/// One frame every 20 µs (both threads together: 100,000 frames/s).
const PERIOD_NS: u64 = 10_000;

/// Deterministic random numbers (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }
}

/// Source frame `n`: thread `n % 2`, time index `n / 2`; the payload names `n`.
fn source_frame(n: u64) -> [u8; LEN] {
    let mut f = [0u8; LEN];
    let index = n / u64::from(THREADS);
    VdifHeaderRepr {
        seconds: 1_000 + (index / u64::from(RATE)) as u32,
        epoch: 50,
        frame_number: (index % u64::from(RATE)) as u32,
        frame_len: LEN,
        thread_id: (n % u64::from(THREADS)) as u16,
        ..Default::default()
    }
    .emit(&mut f)
    .unwrap();
    f[32..40].copy_from_slice(&n.to_le_bytes());
    f
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Numbering {
    /// The frame's position in the source stream (input PSN, or VDIF time and thread).
    Position { psn_input: bool },
    /// The old rule: the forwarder counts what it sends.
    Counting,
}

#[derive(Debug, Default)]
struct Outcome {
    input_drops: u64,
    socket_drops: u64,
    no_buffer: u64,
    queue_drops: u64,
    path_drops: u64,
    fill: u64,
    fill_declared: u64,
    fill_path: u64,
    /// Output frames that are neither fill nor the source frame of their position.
    misplaced: u64,
    output: u64,
    undeclared: u64,
    notices_missing: u64,
}

/// Runs `n` frames through the chain; loss probabilities per stage.
fn run(n: u64, numbering: Numbering, seed: u64) -> Outcome {
    let mut rng = Rng(seed);
    let t0 = Instant::now();
    let mut out = Outcome::default();
    let source = match numbering {
        Numbering::Position { psn_input: true } => SourceKey::Psn,
        _ => SourceKey::VdifTime {
            frame_rate: None,
            threads: None,
        },
    };
    let mut positions = Positioner::new(source, FirstPsn::At(0)).unwrap();
    let mut gaps = GapLog::default();
    let mut counted = 0u64;
    // The forward queue: 64 slots paced at 97% of the stream's rate, so it overflows now and then.
    let wire = PSN_LEN + LEN;
    let rate = (1e9 / PERIOD_NS as f64 * wire as f64 * 0.97) as u64;
    let mut queue = ForwardQueue::new(ForwardConfig {
        max_len: wire.max(vlbiflow_formats::notice::MAX_LEN),
        capacity: 64,
        rate_bytes_per_s: Some(rate),
        burst_bytes: 8 * vlbiflow_formats::notice::MAX_LEN as u64,
        threads: None,
        header_offset: PSN_LEN,
    })
    .unwrap();
    let mut reorder = Reorderer::new(ReorderConfig::new(
        FrameKind::Vdif,
        LEN,
        KeyMode::Psn,
        4096,
        Duration::from_millis(50),
    ))
    .unwrap();
    reorder.start_at(0);
    let mut declared = DeclaredGaps::new(1 << 16);
    // In flight on the path: (arrival ns, sequence, datagram).
    let mut path: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>> = BinaryHeap::new();
    let mut seq = 0u64;
    // Bursts of no-buffer drops (a recorder whose disks fell behind for a moment).
    let mut starving = 0u32;
    let mut datagram = vec![0u8; wire.max(vlbiflow_formats::notice::MAX_LEN)];

    let drain_output =
        |reorder: &mut Reorderer, now: Instant, declared: &mut DeclaredGaps, out: &mut Outcome| {
            while let Some(o) = reorder.poll_output(now) {
                out.output += 1;
                match o.kind {
                    OutputKind::Fill => {
                        out.fill += 1;
                        if declared.take(o.key) {
                            out.fill_declared += 1;
                        } else {
                            out.fill_path += 1;
                        }
                    }
                    OutputKind::Real => {
                        if o.frame != source_frame(o.key) {
                            out.misplaced += 1;
                        }
                    }
                }
            }
        };

    let last = n - 1;
    for i in 0..n + 20_000 {
        let now_ns = i * PERIOD_NS;
        let now = t0 + Duration::from_nanos(now_ns);
        if i < n {
            let f = source_frame(i);
            // The first time stamp (where threads are learned) and the last frame always reach the
            // forwarder, so the stream's ends are known to it.
            let keep = i < u64::from(THREADS) || i == last;
            if !keep && rng.chance(0.004) {
                out.input_drops += 1;
            } else if !keep && rng.chance(0.003) {
                out.socket_drops += 1;
            } else {
                if starving == 0 && !keep && rng.chance(0.0005) {
                    starving = 1 + (rng.next() % 40) as u32;
                }
                let psn = match numbering {
                    Numbering::Counting => {
                        counted += 1;
                        Some(counted - 1)
                    }
                    Numbering::Position { .. } => {
                        let key = positions.key(Some(i), &f).unwrap();
                        match positions.place(key) {
                            Place::At { psn, skipped } => {
                                if let Some((first, count)) = skipped {
                                    gaps.add(first, count, Cause::CapturedLost);
                                }
                                Some(psn)
                            }
                            other => panic!("frame {i}: {other:?}"),
                        }
                    }
                };
                if starving > 0 && !keep {
                    starving -= 1;
                    out.no_buffer += 1;
                    if let (Numbering::Position { .. }, Some(p)) = (numbering, psn) {
                        gaps.add(p, 1, Cause::NoBuffer);
                    }
                } else if let Some(p) = psn {
                    // Notices go before the frame, when due (as the forwarder's ring does).
                    if gaps.due(64 - queue.len()) {
                        let len = gaps.emit(&mut datagram, wire);
                        assert_eq!(queue.offer(now, &datagram[..len]), Offer::Queued);
                    }
                    datagram[..PSN_LEN].copy_from_slice(&p.to_le_bytes());
                    datagram[PSN_LEN..wire].copy_from_slice(&f);
                    if queue.offer(now, &datagram[..wire]) == Offer::DroppedQueueFull {
                        out.queue_drops += 1;
                        gaps.add(p, 1, Cause::QueueFull);
                    } else {
                        gaps.frame_queued();
                    }
                }
            }
        }
        // Once per batch the forwarder publishes: what is due goes out; at the end, whatever waits.
        let end = i >= n && gaps.pending() && queue.len() < 64;
        if numbering != Numbering::Counting && (gaps.due(64 - queue.len()) || end) {
            let len = gaps.emit(&mut datagram, wire);
            assert_eq!(queue.offer(now, &datagram[..len]), Offer::Queued);
        }
        // Send what the pacing allows; the path loses some data and delays everything.
        while let Some(d) = queue.poll_send(now) {
            let is_notice = GapNotice::<&[u8]>::looks_like(d);
            if !is_notice && rng.chance(0.005) {
                out.path_drops += 1;
                continue;
            }
            let delay = 1_000_000 + rng.next() % 500_000;
            seq += 1;
            path.push(Reverse((now_ns + delay, seq, d.to_vec())));
        }
        while path.peek().is_some_and(|Reverse((t, _, _))| *t <= now_ns) {
            let Reverse((t, _, d)) = path.pop().unwrap();
            let at = t0 + Duration::from_nanos(t);
            if d.len() != wire {
                declared.add_notice(&GapNotice::new_checked(&d[..]).unwrap());
                continue;
            }
            reorder.push_udps(at, &d).unwrap();
            drain_output(&mut reorder, at, &mut declared, &mut out);
        }
        drain_output(&mut reorder, now, &mut declared, &mut out);
    }
    out.undeclared = gaps.undeclared();
    out.notices_missing = declared.summary().notices_missing;
    reorder.flush_until(n);
    drain_output(
        &mut reorder,
        t0 + Duration::from_secs(3600),
        &mut declared,
        &mut out,
    );
    out
}

#[test]
fn station_losses_are_fill_at_their_own_place_and_declared() {
    for (seed, psn_input) in [(1, true), (2, false), (3, true)] {
        let n = 200_000;
        let o = run(n, Numbering::Position { psn_input }, seed);
        eprintln!("{o:?}");
        assert!(
            o.input_drops > 0
                && o.socket_drops > 0
                && o.no_buffer > 0
                && o.queue_drops > 0
                && o.path_drops > 0,
            "{o:?}"
        );
        assert_eq!(o.output, n, "{o:?}");
        assert_eq!(o.misplaced, 0, "{o:?}");
        assert_eq!(
            o.fill,
            o.input_drops + o.socket_drops + o.no_buffer + o.queue_drops + o.path_drops,
            "{o:?}"
        );
        // Notices are never lost here (the path drops data only), so the split is exact.
        assert_eq!(o.fill_path, o.path_drops, "{o:?}");
        assert_eq!(
            o.fill_declared,
            o.input_drops + o.socket_drops + o.no_buffer + o.queue_drops,
            "{o:?}"
        );
    }
}

#[test]
fn the_counting_rule_is_caught_misplacing_frames() {
    let o = run(50_000, Numbering::Counting, 4);
    // Every frame after the first loss before the forwarder is at the wrong place; the fill is pushed to
    // the end of the scan.
    assert!(o.misplaced > 10_000, "{o:?}");
}
