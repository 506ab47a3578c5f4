//! UDP GRO capture over real loopback: a GSO sender (as `vlbiflow gen --gso`) makes the kernel deliver
//! super-datagrams of several frames to the recorder's GRO socket; every frame must be stored once, in
//! order, with exact loss accounting, whatever the block boundaries and garbage segments.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use vlbiflow_recorder::{Recorder, RecorderConfig, RecorderEvent, StreamSpec};
use vlbiflow_udp::BatchSender;

const FRAME: usize = 1032;
const WAIT: Duration = Duration::from_secs(20);
/// Frames per test recording.
const COUNT: u64 = 6_000;

/// What each GSO message of the test sender carries.
#[derive(Clone, Copy)]
struct Plan {
    /// Datagrams per GSO message.
    segments: usize,
    /// Cycle through 2, 7, 1 and 9 datagrams per message instead (holes and overflow on one socket).
    vary: bool,
    /// Replace segment 2 of every third message by a right-sized datagram of garbage and end every fifth
    /// message with a short segment.
    garbage: bool,
}

/// Sends frames `0..count` as GSO messages of `plan.segments` datagrams (each `[PSN][frame]` when `psn`),
/// eight messages per `sendmmsg`. Returns the number of garbage datagrams sent.
fn send_gso(dest: SocketAddr, count: u64, psn: bool, plan: Plan) -> u64 {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(dest).unwrap();
    let prefix = if psn { 8 } else { 0 };
    let wire = FRAME + prefix;
    let mut tx = BatchSender::new(8);
    let mut bufs = vec![vec![0u8; plan.segments.max(9) * wire + wire]; 8];
    let mut seq = 0u64;
    let mut message = 0u64;
    let mut garbage = 0;
    while seq < count {
        let mut lens = [0usize; 8];
        for (buf, len) in bufs.iter_mut().zip(&mut lens) {
            if seq >= count {
                break;
            }
            let mut at = 0;
            let segments = if plan.vary {
                [2, 7, 1, 9][(message % 4) as usize]
            } else {
                plan.segments
            };
            for j in 0..segments {
                let d = &mut buf[at..at + wire];
                if plan.garbage && message % 3 == 0 && j == 2 {
                    // Right size, not a frame: a VDIF length field of 0.
                    d.fill(0xA5);
                    d[prefix + 8..prefix + 12].copy_from_slice(&0u32.to_le_bytes());
                    garbage += 1;
                } else if seq < count {
                    if psn {
                        d[..8].copy_from_slice(&(1_000 + seq).to_ne_bytes());
                    }
                    vdif_frame(&mut d[prefix..], seq, 0);
                    seq += 1;
                } else {
                    break;
                }
                at += wire;
            }
            if plan.garbage && message % 5 == 4 {
                // A short last segment: a wrong-size datagram inside the super-datagram.
                buf[at..at + 100].fill(0x5A);
                at += 100;
                garbage += 1;
            }
            *len = at;
            message += 1;
        }
        let mut batch = tx.batch();
        for (buf, &len) in bufs.iter().zip(&lens) {
            if len > 0 {
                assert!(batch.push_gso(&[&buf[..len]], wire as u16).unwrap());
            }
        }
        batch.flush(&sock).unwrap();
        drop(batch);
        std::thread::yield_now();
    }
    garbage
}

fn config(disks: Vec<PathBuf>, psn: bool, block_frames: usize, gro: bool) -> RecorderConfig {
    // Without PSN, loss comes from the VDIF time stamps of each thread at the known frame rate.
    let opts = if psn { ",psn" } else { "" };
    let spec = StreamSpec::parse(&format!(
        "a=vdif@127.0.0.1:0,frame-size={FRAME},frame-rate={RATE}{opts}"
    ))
    .unwrap();
    let mut c = RecorderConfig::new(vec![spec], disks, "t_gro_01");
    // Mark6: the 8-byte block header plus `block_frames` frames.
    c.block_size = (8 + block_frames * FRAME) as u64;
    c.recv_buffer = 64 << 20;
    // Every block of the scan: no test depends on how fast the disks are.
    c.pool_blocks = Some(COUNT as usize / block_frames + 16);
    c.gro = gro;
    c
}

/// Records `count` frames sent as GSO messages and checks the scan frame by frame.
fn record(psn: bool, block_frames: usize, plan: Plan, gro: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let disks = disks(tmp.path(), 2);
    let h = Recorder::start(config(disks.clone(), psn, block_frames, gro)).unwrap();
    let events = h.events();
    let dest = h.local_addrs()[0];
    let count = COUNT;
    let garbage = send_gso(dest, count, psn, plan);
    wait_until(&h, WAIT, "every datagram", |s| {
        let c = s.streams[0].counters;
        c.packets + c.rejected >= count + garbage
    });
    let coalesced = h.coalesced_messages()[0];
    h.stop();
    let sum = h.wait().unwrap();
    assert_eq!(sum.error, None);
    let c = sum.status.streams[0].counters;
    assert_eq!(
        (
            c.packets,
            c.rejected,
            c.lost,
            c.out_of_order,
            c.duplicates,
            c.dropped_no_buffer
        ),
        (count, garbage, 0, 0, 0, 0)
    );
    assert_eq!(c.bytes, count * FRAME as u64);
    let events: Vec<RecorderEvent> = events.try_iter().collect();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, RecorderEvent::GroUnavailable { .. })),
        "{events:?}"
    );
    if gro {
        assert!(coalesced > 0, "no super-datagram arrived");
    } else {
        assert_eq!(coalesced, 0);
    }
    let blocks = gather_mark6(&disks, "t_gro_01");
    assert_eq!(
        blocks.iter().map(|b| b.number).collect::<Vec<_>>(),
        (0..blocks.len() as u32).collect::<Vec<_>>()
    );
    // Every block but the last is full: a super-datagram that did not fit went on in the next block.
    for b in &blocks[..blocks.len() - 1] {
        assert_eq!(b.data.len(), block_frames * FRAME, "block {}", b.number);
    }
    let frames = frames_of(blocks.into_iter().map(|b| b.data), FRAME);
    let expect: Vec<(u64, u16)> = (0..count).map(|s| (s, 0)).collect();
    assert_eq!(frames.len(), expect.len());
    assert!(frames == expect, "frames out of order, missing or repeated");
}

#[test]
fn gso_frames_land_once_in_order_without_psn() {
    record(
        false,
        1_000,
        Plan {
            segments: 7,
            garbage: false,
            vary: false,
        },
        true,
    );
}

#[test]
fn gso_frames_land_once_in_order_with_psn() {
    record(
        true,
        1_000,
        Plan {
            segments: 7,
            garbage: false,
            vary: false,
        },
        true,
    );
}

#[test]
fn super_datagrams_straddling_small_blocks_continue_in_the_next_block() {
    // 10 frames per block, 7 per message: most messages cross a block boundary, some two blocks (3 per block).
    record(
        false,
        10,
        Plan {
            segments: 7,
            garbage: false,
            vary: false,
        },
        true,
    );
    record(
        true,
        3,
        Plan {
            segments: 7,
            garbage: false,
            vary: false,
        },
        true,
    );
}

#[test]
fn garbage_segments_are_rejected_without_touching_their_neighbours() {
    record(
        false,
        10,
        Plan {
            segments: 7,
            garbage: true,
            vary: false,
        },
        true,
    );
    record(
        true,
        10,
        Plan {
            segments: 7,
            garbage: true,
            vary: false,
        },
        true,
    );
}

#[test]
fn varying_segment_counts_and_no_gro() {
    // 2, 7, 1, 9 datagrams per message on one socket: holes between messages and overflow past the room
    // the previous message taught.
    let vary = Plan {
        segments: 0,
        garbage: true,
        vary: true,
    };
    record(true, 50, vary, true);
    record(false, 11, vary, true);
    // Without GRO the kernel splits the GSO messages: the same recording, one datagram per message.
    record(
        true,
        10,
        Plan {
            segments: 7,
            garbage: true,
            vary: false,
        },
        false,
    );
}
