//! Replay (jive5ab's disk2net / file2net): send a recording (Mark6 scatter-gather, FlexBuff or plain
//! frame files, read in stream order by `vlbiflow-reader`) to a UDP destination, paced at its
//! original rate from the frames' time stamps or at a set rate, optionally with packet sequence numbers.
//!
//! Pacing reuses `vlbiflow-udp`'s absolute-schedule [`Pacer`] (sleep, then spin the last stretch; never
//! catching up with a burst beyond one batch). At the original rate a frame stamped `t` is due at
//! `t0 + (t - t_first)`, where `t` is its time index (second x frame rate + frame number) over the frame
//! rate: frames of several threads with one time stamp go together, a gap in the recording stays a gap on
//! the wire, and the per-second rate is the recording's. A fill frame (no valid time) goes with the frame
//! before it. Each batch is sent when its first frame is due, with the frames behind it that are due by
//! then (at most `batch`), so 1 s windows hold the recording's rate to within the wake-up jitter.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vlbiflow_formats::fill::is_fill;
use vlbiflow_formats::mark5b::Mark5bHeader;
use vlbiflow_formats::psn::{self, PSN_LEN};
use vlbiflow_formats::time::epoch_start_unix;
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_formats::FrameKind;
use vlbiflow_reader::frames::FrameReader;
use vlbiflow_reader::Recording;
use vlbiflow_realtime::position::{FirstPsn, Place, Positioner, SourceKey};
use vlbiflow_udp::pace::{Pacer, RateMeter, Wait};
use vlbiflow_udp::send::BatchSender;
use vlbiflow_udp::socket::{open_udp, UdpConfig};

/// How fast to play.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PlayRate {
    /// As recorded, from the time stamps.
    Original,
    /// This many bits of frames per second.
    Bits(f64),
}

/// A replay's configuration.
#[derive(Debug, Clone)]
pub struct PlayConfig {
    pub dest: SocketAddr,
    /// 8-byte PSN in front of every frame (`udps`).
    pub psn: bool,
    pub first_psn: u64,
    pub rate: PlayRate,
    /// Frames per second per thread (default: the scan metadata, else learned from the first second).
    pub frame_rate: Option<u32>,
    /// Start at the first frame stamped at or after this time (Unix seconds, fractions allowed).
    pub start: Option<f64>,
    /// Send at most this many frames.
    pub count: Option<u64>,
    /// Frames per `sendmmsg` at most.
    pub batch: usize,
    /// Memory read ahead of the schedule (absorbs slow reads).
    pub read_ahead: usize,
    pub send_buffer: usize,
}

impl PlayConfig {
    pub fn new(dest: SocketAddr) -> Self {
        PlayConfig {
            dest,
            psn: true,
            first_psn: 0,
            rate: PlayRate::Original,
            frame_rate: None,
            start: None,
            count: None,
            batch: 32,
            read_ahead: 256 << 20,
            send_buffer: 32 << 20,
        }
    }
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum PlayError {
    #[error("{0}")]
    Config(String),
    #[error("cannot send to {0}: {1}")]
    Socket(SocketAddr, String),
    #[error("sending to {0}: {1}")]
    Send(SocketAddr, String),
}

/// A replay's counts, live and final.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PlayStatus {
    pub scan: String,
    pub dest: String,
    pub frame_len: usize,
    pub frame_rate: Option<u32>,
    /// VDIF threads (or 1 for Mark5B) found in the first second.
    pub threads: usize,
    pub frames: u64,
    pub fill_frames: u64,
    pub bytes: u64,
    /// Frames skipped before `--start`.
    pub skipped: u64,
    pub first_psn: u64,
    /// The recording's rate (frames x frame length per second) or the set rate, bit/s.
    pub target_bps: f64,
    pub achieved_bps: f64,
    pub elapsed_s: f64,
    /// Whole one-second windows measured, and the largest relative error of any against the target.
    pub windows: u64,
    pub worst_window_error: f64,
    /// Latest a batch went out after it was due, seconds.
    pub max_late_s: f64,
    /// Structural problems the reader found in the recording (block gaps, garbage), as text.
    pub findings: Vec<String>,
    pub interrupted: bool,
}

/// A frame's time: (second, frame number).
type FrameTime = (i64, u32);

/// A frame's time index parts: (second, frame number); None for fill or an unreadable time.
#[inline]
fn frame_time(kind: FrameKind, frame: &[u8]) -> Option<FrameTime> {
    if is_fill(kind, frame) {
        return None;
    }
    match kind {
        FrameKind::Vdif => {
            let h = VdifHeader::new_unchecked(frame);
            Some((
                epoch_start_unix(h.epoch()) + i64::from(h.seconds()),
                h.frame_number(),
            ))
        }
        FrameKind::M5b => {
            let h = Mark5bHeader::new_unchecked(frame);
            Some((h.day_second()?, u32::from(h.frame_number())))
        }
    }
}

/// Looks at the first second of the recording: (frame rate learned from its frame numbers, VDIF
/// threads in ascending order, largest frame).
fn survey(rec: &Recording) -> (Option<u32>, Vec<u16>, usize) {
    let mut reader = FrameReader::open(rec);
    let kind = reader.kind();
    let mut first: Option<i64> = None;
    let mut max_frame = 0u32;
    let mut threads = std::collections::BTreeSet::new();
    let mut full = false;
    let mut max_len = 0;
    'read: while let Some(batch) = reader.next_batch() {
        for (_, f) in batch.iter() {
            max_len = max_len.max(f.len());
            let Some((sec, n)) = frame_time(kind, f) else {
                continue;
            };
            let first = *first.get_or_insert(sec);
            if sec > first {
                full = true;
                break 'read;
            }
            max_frame = max_frame.max(n);
            if kind == FrameKind::Vdif {
                threads.insert(VdifHeader::new_unchecked(f).thread_id());
            }
        }
    }
    (
        full.then_some(max_frame + 1),
        threads.into_iter().collect(),
        max_len,
    )
}

/// Reads the recording on its own thread into the ring, ahead of the sender, so that a slow read (a
/// busy disk) is absorbed by the ring rather than delaying the schedule. Returns the reader's findings and
/// the frames it had to skip (longer than a ring slot).
fn read_ahead(
    rec: Recording,
    mut ring: crate::ring::Producer,
) -> std::thread::JoinHandle<(Vec<String>, u64)> {
    std::thread::spawn(move || {
        // The sending thread comes first when the CPU is short; the ring covers the reader's wait.
        crate::forward::be_nicer(crate::forward::SENDER_NICENESS);
        let mut reader = FrameReader::open(&rec);
        let mut skipped = 0u64;
        'read: while let Some(batch) = reader.next_batch() {
            for (_, f) in batch.iter() {
                if f.len() > ring.slot_len() {
                    skipped += 1;
                    continue;
                }
                while !ring.try_push(&[f]) {
                    if ring.consumer_gone() {
                        break 'read;
                    }
                    ring.notify();
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            ring.notify();
        }
        let findings = reader.take_findings().iter().map(|f| f.to_string()).collect();
        (findings, skipped)
    })
}

/// Replays `rec` until its end, `count` or `stop`; `progress` about once a second.
pub fn run_play(
    rec: &Recording,
    config: &PlayConfig,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&PlayStatus),
) -> Result<PlayStatus, PlayError> {
    let kind = rec.frame_format();
    let (learned, thread_list, max_len) = survey(rec);
    let threads = thread_list.len().max(1);
    let frame_rate = config.frame_rate.or(rec.frame_rate_hint()).or(learned);
    // Each frame's PSN is its position in the recorded stream: a frame missing from the recording is a
    // hole at its own place, a fill frame stands where it is.
    let key = match kind {
        FrameKind::Vdif => SourceKey::VdifTime {
            frame_rate,
            threads: (!thread_list.is_empty()).then_some(thread_list),
        },
        FrameKind::M5b => SourceKey::Mark5b { frame_rate },
    };
    let mut positions =
        Positioner::new(key, FirstPsn::At(config.first_psn)).map_err(|e| PlayError::Config(e.to_string()))?;
    if config.rate == PlayRate::Original && frame_rate.is_none() {
        return Err(PlayError::Config(
            "the frame rate is not in the scan's metadata and the recording is shorter than a second: give \
             --frame-rate (frames/s per thread) or a --rate"
                .into(),
        ));
    }
    let mut cfg = UdpConfig::sender(config.dest);
    cfg.send_buffer = Some(config.send_buffer);
    let (sock, _) = open_udp(&cfg).map_err(|e| PlayError::Socket(config.dest, e.to_string()))?;
    let batch_max = config.batch.clamp(1, 1024);
    let mut sender = BatchSender::new(batch_max);
    let mut psns = vec![[0u8; PSN_LEN]; batch_max];
    let slot = max_len.max(1);
    let (producer, mut ahead) = crate::ring::ring((config.read_ahead / slot).clamp(64, 1 << 22), slot);
    let reader = read_ahead(rec.clone(), producer);
    // Pre-roll: the schedule starts once the read-ahead is three quarters full (or the recording is all
    // read), so the first second is not the one that waits for the disk.
    let preroll = Instant::now() + Duration::from_secs(30);
    while ahead.available() < ahead.capacity() * 3 / 4
        && !(ahead.producer_gone() && ahead.available() == 0)
        && !ahead.producer_gone()
        && Instant::now() < preroll
        && !stop.load(Ordering::Relaxed)
    {
        ahead.wait(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut st = PlayStatus {
        scan: rec.name.clone(),
        dest: config.dest.to_string(),
        frame_rate,
        threads,
        first_psn: config.first_psn,
        ..Default::default()
    };
    let start_index = |rate: u32| {
        config.start.map(|s| {
            s.floor() as i128 * i128::from(rate) + ((s - s.floor()) * f64::from(rate)).ceil() as i128
        })
    };
    let mut t0: Option<Instant> = None;
    let mut pacer: Option<Pacer> = None;
    let mut meter: Option<RateMeter> = None;
    // Time index of the first frame sent, and the due offset (ns, or bytes at a set rate) of the last.
    let mut first_index: Option<i128> = None;
    let mut last_due: u64 = 0;
    let mut sent_bytes_schedule: u64 = 0;
    let mut next_progress: Option<Instant> = None;
    'outer: loop {
        let available = ahead.wait(Duration::from_millis(50));
        if available == 0 {
            if ahead.producer_gone() && ahead.available() == 0 {
                break;
            }
            if stop.load(Ordering::Relaxed) {
                st.interrupted = true;
                break;
            }
            continue;
        }
        let frames: Vec<(&[u8], Option<FrameTime>)> = (0..available)
            .map(|i| {
                let f = ahead.get(i);
                (f, frame_time(kind, f))
            })
            .collect();
        if st.frame_len == 0 {
            st.frame_len = frames.first().map_or(0, |(f, _)| f.len());
            st.target_bps = match config.rate {
                PlayRate::Bits(b) => b,
                PlayRate::Original => {
                    f64::from(frame_rate.unwrap_or(1)) * threads as f64 * st.frame_len as f64 * 8.0
                }
            };
        }
        let mut i = 0;
        while i < frames.len() {
            if stop.load(Ordering::Relaxed) {
                st.interrupted = true;
                break 'outer;
            }
            // The due offset of frame i.
            let index = |t: Option<(i64, u32)>| {
                let r = i128::from(frame_rate.unwrap_or(1));
                t.map(|(s, n)| i128::from(s) * r + i128::from(n))
            };
            let t = frames[i].1;
            if first_index.is_none() {
                if let (Some(rate), Some(ix)) = (frame_rate, index(t)) {
                    if start_index(rate).is_some_and(|s| ix < s) {
                        st.skipped += 1;
                        i += 1;
                        continue;
                    }
                } else if config.start.is_some() {
                    // Before the start time nothing without a time is sent either.
                    st.skipped += 1;
                    i += 1;
                    continue;
                }
            }
            let due_of = |t: Option<(i64, u32)>, first: Option<i128>, bytes: u64, last: u64| -> u64 {
                match config.rate {
                    PlayRate::Bits(_) => bytes,
                    PlayRate::Original => match (index(t), first) {
                        (Some(ix), Some(f0)) => {
                            let d = (ix - f0).max(0) as u128;
                            (d * 1_000_000_000 / u128::from(frame_rate.unwrap_or(1))) as u64
                        }
                        _ => last,
                    },
                }
            };
            if first_index.is_none() {
                first_index = index(t);
                let now = Instant::now();
                t0 = Some(now);
                let units = match config.rate {
                    PlayRate::Bits(b) => b / 8.0,
                    PlayRate::Original => 1e9,
                };
                pacer = Some(Pacer::new(units, now).map_err(|e| PlayError::Config(e.to_string()))?);
                meter = Some(
                    RateMeter::new((st.target_bps / 8.0).max(1.0), now)
                        .map_err(|e| PlayError::Config(e.to_string()))?,
                );
                next_progress = Some(now + Duration::from_secs(1));
            }
            let due = due_of(t, first_index, sent_bytes_schedule, last_due);
            let pacer_ref = pacer.as_mut().expect("set with the first frame");
            let late = match pacer_ref.wait_until_due_or_stop(due, stop) {
                Wait::Due(late) => late,
                Wait::Stopped => {
                    st.interrupted = true;
                    break 'outer;
                }
            };
            st.max_late_s = st.max_late_s.max(late.as_secs_f64());
            // This frame and those behind it that are due by now.
            let now = Instant::now();
            let now_units = match config.rate {
                PlayRate::Bits(b) => {
                    (now.saturating_duration_since(t0.unwrap_or(now)).as_secs_f64() * b / 8.0) as u64
                }
                PlayRate::Original => now.saturating_duration_since(t0.unwrap_or(now)).as_nanos() as u64,
            };
            let mut n = 0;
            let mut schedule_bytes = sent_bytes_schedule;
            let mut last = due;
            let limit = config.count.map_or(u64::MAX, |c| c - st.frames);
            while i + n < frames.len() && n < batch_max && (n as u64) < limit {
                let (g, tg) = frames[i + n];
                let d = due_of(tg, first_index, schedule_bytes, last);
                if n > 0 && d > now_units {
                    break;
                }
                let placed = match tg {
                    None => positions.place_next(),
                    Some(_) => match positions.key(None, g) {
                        Ok(k) => positions.place(k),
                        Err(_) => Place::Stray,
                    },
                };
                // A frame with no place of its own (a thread not in the first second, a repeated time)
                // still goes, after the last one.
                let at = match placed {
                    Place::At { psn, .. } => psn,
                    _ => positions.next_psn(),
                };
                psns[n] = psn::to_bytes(at);
                st.fill_frames += u64::from(tg.is_none());
                schedule_bytes += g.len() as u64;
                last = d;
                n += 1;
            }
            let result = {
                let mut b = sender.batch();
                for k in 0..n {
                    let g = frames[i + k].0;
                    if config.psn {
                        b.push(&[&psns[k], g]);
                    } else {
                        b.push(&[g]);
                    }
                }
                b.flush(&sock)
            };
            result.map_err(|e| PlayError::Send(config.dest, e.to_string()))?;
            sent_bytes_schedule = schedule_bytes;
            last_due = last;
            st.frames += n as u64;
            let frame_bytes: u64 = (0..n).map(|k| frames[i + k].0.len() as u64).sum();
            st.bytes += frame_bytes;
            let now = Instant::now();
            if let Some(m) = meter.as_mut() {
                m.record(now, frame_bytes);
            }
            i += n;
            if config.count.is_some_and(|c| st.frames >= c) {
                break 'outer;
            }
            if next_progress.is_some_and(|p| now >= p) {
                next_progress = next_progress.map(|p| p + Duration::from_secs(1));
                fill(&mut st, meter.as_ref(), t0);
                progress(&st);
            }
        }
        drop(frames);
        ahead.release(available);
    }
    // The run ends when the last frame's time is over (closing the last whole window), as gen does.
    if let (Some(p), false) = (pacer.as_mut(), st.interrupted) {
        let end = match config.rate {
            PlayRate::Bits(_) => sent_bytes_schedule,
            PlayRate::Original => last_due + 1_000_000_000 / u64::from(frame_rate.unwrap_or(1)).max(1),
        };
        let _ = p.wait_until_due_or_stop(end, stop);
    }
    if let Some(m) = meter.as_mut() {
        m.close_until(Instant::now());
    }
    fill(&mut st, meter.as_ref(), t0);
    drop(ahead);
    let (findings, skipped) = reader.join().unwrap_or_default();
    st.findings = findings;
    if skipped > 0 {
        st.findings.push(format!(
            "{skipped} frames longer than those of the first second were not sent"
        ));
    }
    Ok(st)
}

fn fill(st: &mut PlayStatus, meter: Option<&RateMeter>, t0: Option<Instant>) {
    if let Some(t0) = t0 {
        st.elapsed_s = t0.elapsed().as_secs_f64();
        st.achieved_bps = st.bytes as f64 * 8.0 / st.elapsed_s.max(1e-9);
    }
    if let Some(m) = meter {
        st.windows = m.full_windows();
        st.worst_window_error = m.worst().map_or(0.0, |w| w.rel_error);
    }
}
