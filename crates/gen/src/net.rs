//! Paced, batched sending of one or more streams to UDP destinations.
//!
//! Pacing: the sender keeps an absolute schedule in "rounds" (one frame time: one frame of every thread of
//! every stream). Round k is due at start + k / frame_rate. Before each batch the thread waits until the
//! batch's first round is due (sleeping while far off, spinning the last tens of microseconds), then sends
//! the whole batch in one sendmmsg per stream. Lateness is never made up by a burst larger than a batch,
//! and the schedule is absolute, so the long-run rate is exact to the clock and 1 s windows hold the
//! request to within one batch. The largest burst on the wire is therefore `--batch` datagrams per stream.

use crate::payload::PayloadPool;
use crate::plan::{GenPlan, StopAfter, PSN_LEN};
use crate::sequencer::{FrameSequencer, FrameSlot};
use crate::GenSummary;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vlbiflow_formats::time::VdifTime;
use vlbiflow_formats::vdif::HEADER_LEN;
use vlbiflow_udp::pace::{Pacer, RateMeter, Wait};
use vlbiflow_udp::send::{BatchSender, GSO_MAX_SEGMENTS};
use vlbiflow_udp::socket::{open_udp, UdpConfig};

/// Send-side options beyond the plan.
#[derive(Debug, Clone)]
pub struct NetOptions {
    /// Socket send buffer to ask for, bytes.
    pub send_buffer: usize,
    /// Starting packet sequence number of every stream.
    pub first_psn: u64,
}

impl Default for NetOptions {
    fn default() -> Self {
        NetOptions {
            send_buffer: 8 << 20,
            first_psn: 0,
        }
    }
}

/// Something the sender tells its caller as it happens (printed by the CLI).
#[derive(Debug, Clone)]
pub enum NetEvent {
    /// A socket option was not granted in full.
    Warning(String),
    /// About once a second: the run so far.
    Progress(GenSummary),
}

/// An error that stops the sender.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot open a socket to {dest}: {message}")]
    Socket { dest: SocketAddr, message: String },
    #[error("sending to {dest}: {message}")]
    Send { dest: SocketAddr, message: String },
}

/// Per-stream sending state, all allocated before the first frame.
struct Stream {
    dest: SocketAddr,
    socket: UdpSocket,
    sequencer: FrameSequencer,
    /// PSN + header of each datagram of a batch: rewritten per batch, so no allocation per frame.
    headers: Vec<[u8; PSN_LEN + HEADER_LEN]>,
    slots: Vec<FrameSlot>,
    done: bool,
}

/// Sends the plan's frames to every destination, one stream each, until done or `stop` is set.
pub fn send_streams(
    plan: &GenPlan,
    start: VdifTime,
    dests: &[SocketAddr],
    options: &NetOptions,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(NetEvent),
) -> Result<GenSummary, NetError> {
    let threads = plan.request.thread_ids.len() as u64;
    let rounds_per_batch = (plan.request.batch as u64 / threads).max(1);
    let frames_per_batch = (rounds_per_batch * threads) as usize;
    let mut streams = Vec::with_capacity(dests.len());
    for &dest in dests {
        let mut config = UdpConfig::sender(dest);
        config.send_buffer = Some(options.send_buffer);
        let (socket, report) = open_udp(&config).map_err(|e| NetError::Socket {
            dest,
            message: e.to_string(),
        })?;
        for w in report.warnings() {
            on_event(NetEvent::Warning(format!("{dest}: {w}")));
        }
        streams.push(Stream {
            dest,
            socket,
            sequencer: FrameSequencer::new(plan, start, options.first_psn),
            headers: vec![[0u8; PSN_LEN + HEADER_LEN]; frames_per_batch],
            slots: Vec::with_capacity(frames_per_batch),
            done: false,
        });
    }
    let pool = PayloadPool::new(plan);
    // With GSO each message carries up to `gso` frames, gathered from header slots and payloads in place.
    let gso = plan.request.gso_segments;
    let mut sender = if gso > 0 {
        BatchSender::with_parts(frames_per_batch.div_ceil(gso), 2 * gso)
    } else {
        BatchSender::new(frames_per_batch)
    };
    let segment_size = plan.datagram_len as u16;
    let header_range = if plan.request.psn {
        0..PSN_LEN + HEADER_LEN
    } else {
        PSN_LEN..PSN_LEN + HEADER_LEN
    };

    // With --start now the first round is stamped with the next whole second: start on it.
    let wall_start = start_instant(start);
    let frame_rate = f64::from(plan.frame_rate);
    let mut pacer = Pacer::new(frame_rate, wall_start).expect("plan has a positive frame rate");
    let frames_per_round = threads * streams.len() as u64;
    let mut meter = RateMeter::new(frame_rate * frames_per_round as f64, wall_start)
        .expect("plan has a positive frame rate");
    // More than this behind schedule means the machine cannot sustain the rate (not a passing hiccup).
    let behind_limit = Duration::from_millis(200);
    // A stall (another process, a page fault storm) can put the sender that far behind once; only when
    // it stays behind at two progress ticks in a row is the rate out of reach.
    let mut behind_ticks = 0u32;
    let mut late = Duration::ZERO;
    let mut summary = GenSummary::new(plan, streams.len());
    let mut round: u64 = 0;
    let mut next_progress = wall_start + Duration::from_secs(1);

    // On the network a duration is wall time: a machine that cannot keep up stops on time with fewer
    // frames rather than running long.
    let deadline = match plan.request.stop {
        StopAfter::Seconds(s) => Some(wall_start + Duration::from_secs_f64(s)),
        _ => None,
    };
    while !stop.load(Ordering::Relaxed) {
        late = match pacer.wait_until_due_or_stop(round, stop) {
            Wait::Due(late) => late,
            Wait::Stopped => break,
        };
        // Only a sender that is far behind is cut: the last batch, due just before the deadline, may come
        // back from the pacer a little after it.
        if late > behind_limit && deadline.is_some_and(|d| Instant::now() >= d) {
            summary.cut_short = true;
            break;
        }
        summary.max_late_s = summary.max_late_s.max(late.as_secs_f64());
        let mut sent_now = 0u64;
        let mut dropped = 0u64;
        for s in streams.iter_mut().filter(|s| !s.done) {
            s.slots.clear();
            while s.slots.len() < s.headers.len() {
                let h = &mut s.headers[s.slots.len()];
                match s.sequencer.next_header(&mut h[PSN_LEN..]) {
                    Some(slot) if slot.dropped => dropped += 1,
                    Some(slot) => {
                        h[..PSN_LEN].copy_from_slice(&vlbiflow_formats::psn::to_bytes(slot.psn));
                        s.slots.push(slot);
                    }
                    None => {
                        s.done = true;
                        break;
                    }
                }
            }
            if s.slots.is_empty() {
                continue;
            }
            let mut batch = sender.batch();
            if gso > 0 {
                let mut parts: [&[u8]; 2 * GSO_MAX_SEGMENTS] = [&[]; 2 * GSO_MAX_SEGMENTS];
                let n = s.slots.len();
                for start in (0..n).step_by(gso) {
                    let end = (start + gso).min(n);
                    for (k, i) in (start..end).enumerate() {
                        let slot = s.slots[i];
                        parts[2 * k] = &s.headers[i][header_range.clone()];
                        parts[2 * k + 1] = pool.payload(slot.thread_index, slot.round);
                    }
                    let pushed = batch
                        .push_gso(&parts[..2 * (end - start)], segment_size)
                        .map_err(|e| NetError::Send {
                            dest: s.dest,
                            message: e.to_string(),
                        })?;
                    debug_assert!(pushed, "batch sized for a whole batch of frames");
                }
            } else {
                for (h, slot) in s.headers.iter().zip(&s.slots) {
                    let pushed = batch.push(&[
                        &h[header_range.clone()],
                        pool.payload(slot.thread_index, slot.round),
                    ]);
                    debug_assert!(pushed, "batch sized for a whole batch of frames");
                }
            }
            batch.flush(&s.socket).map_err(|e| NetError::Send {
                dest: s.dest,
                message: e.to_string(),
            })?;
            sent_now += s.slots.len() as u64;
        }
        if sent_now == 0 && dropped == 0 {
            break;
        }
        summary.frames += sent_now;
        summary.dropped += dropped;
        // Deliberate drops advance the sequencers past a batch's worth of rounds; follow them.
        round = streams
            .iter()
            .map(|s| s.sequencer.round())
            .max()
            .unwrap_or(round + rounds_per_batch);
        let now = Instant::now();
        meter.record(now, sent_now);
        if now >= next_progress {
            fill_meter(&mut summary, &meter);
            summary.send_retries = sender.stats().would_block + sender.stats().no_buffers;
            behind_ticks = if late > behind_limit { behind_ticks + 1 } else { 0 };
            summary.cannot_keep_up |= behind_ticks >= 2;
            summary.finish(plan, (now - wall_start).as_secs_f64());
            on_event(NetEvent::Progress(summary.clone()));
            next_progress += Duration::from_secs(1);
        }
    }
    if stop.load(Ordering::Relaxed) && streams.iter().any(|s| !s.done) {
        summary.interrupted = true;
    } else if !summary.cut_short {
        // The last batch went out when due; the run ends when its frame time ends, closing the last window.
        let end_round = plan
            .total_frames
            .map_or(round, |t| t.div_ceil(threads).min(round));
        let _ = pacer.wait_until_due_or_stop(end_round, stop);
    }
    let end = Instant::now();
    meter.close_until(end);
    fill_meter(&mut summary, &meter);
    summary.cannot_keep_up |= late > behind_limit || summary.cut_short;
    summary.send_retries = sender.stats().would_block + sender.stats().no_buffers;
    summary.finish(plan, (end - wall_start).as_secs_f64().max(1e-9));
    Ok(summary)
}

fn fill_meter(summary: &mut GenSummary, meter: &RateMeter) {
    summary.windows = meter.full_windows();
    summary.worst_window_error = meter.worst().map_or(0.0, |w| w.rel_error);
}

/// The monotonic instant of the first round: the stamped second if it is now or in the next second
/// (`--start now`), otherwise at once (stamps from another time are sent immediately).
fn start_instant(start: VdifTime) -> Instant {
    let now_wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let now = Instant::now();
    let target = Duration::from_secs(start.unix_second().max(0) as u64);
    if target > now_wall && target - now_wall <= Duration::from_millis(1100) {
        now + (target - now_wall)
    } else {
        now
    }
}
