//! Forwarding frames to destinations in real time without ever holding up the producer (the recorder's
//! capture thread, or a relay's receive thread).
//!
//! ```text
//!  producer thread ── ForwardTap::offer ──► per destination: thread filter, PSN, copy into its ring
//!                                              │ (full ring: dropped, counted; never waits)
//!                                              ▼
//!                     one sender thread per destination: token-bucket pacing, sendmmsg straight from
//!                     the ring slots (udps / vdif), or writev on a TCP connection that is re-made when it
//!                     breaks (frames are dropped, counted, while it is down)
//! ```
//!
//! A ring slot holds `[PSN: 8 bytes][frame]`, so a `udps` datagram is the slot itself and a `vdif`
//! datagram or TCP record its frame part: one copy per frame and destination, made by the producer.
//! The PSN is the frame's position in the source stream ([`vlbiflow_realtime::position`]): the input PSN,
//! or the VDIF time and thread, plus an offset fixed at the first frame. A frame lost before the
//! forwarder (network to the station, the socket, no buffer in the recorder) or dropped here (full queue,
//! send error) is a hole at its own place, which the receiver fills. For `udps` the holes are also
//! declared in-band, in gap notices ([`vlbiflow_formats::notice`]) that go through the same ring, in
//! order, before the frame that revealed them.
//!
//! Every destination's counters obey `offered = sent + dropped_queue_full + dropped_send_error +
//! dropped_disconnected + dropped_at_stop + queued` (queued: in the ring now; notices not counted).

use std::io::{IoSlice, Write};
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vlbiflow_formats::notice::{self, Cause};
use vlbiflow_formats::psn::{self, PSN_LEN};
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::position::{FirstPsn, GapLog, Place, PositionCounters, Positioner, SourceKey};
use vlbiflow_realtime::TokenBucket;
use vlbiflow_udp::send::{BatchSender, RetryPolicy};
use vlbiflow_udp::socket::{open_udp, UdpConfig};

use crate::dest::{DestSpec, Protocol};
use crate::ring::{ring, Consumer, Producer};

/// Datagrams per `sendmmsg` / records per `writev`.
const BATCH: usize = 64;
/// Send buffer asked for on each destination socket.
const SEND_BUFFER: usize = 32 << 20;
/// How long a TCP connection attempt may take, and the pause between attempts.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
/// Longest single sleep of a sender (it looks at its stop flag at least this often).
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// How much nicer than the rest of the process a sender thread runs: when the CPU is short, the
/// capture (or receive) thread that feeds it gets about twice its share, so forwarding loses frames
/// (counted) before the recording does.
pub const SENDER_NICENESS: i32 = 3;

pub(crate) use vlbiflow_recorder::be_nicer;

/// Live counters of one destination (written by the producer and the sender thread, read by anyone).
#[derive(Debug, Default)]
pub struct DestCounters {
    offered: AtomicU64,
    filtered: AtomicU64,
    dropped_queue_full: AtomicU64,
    sent: AtomicU64,
    sent_bytes: AtomicU64,
    dropped_send_error: AtomicU64,
    dropped_disconnected: AtomicU64,
    dropped_at_stop: AtomicU64,
    send_errors: AtomicU64,
    connects: AtomicU64,
    connected: AtomicBool,
    next_psn: AtomicU64,
    no_buffer: AtomicU64,
    wrong_size: AtomicU64,
    notices_sent: AtomicU64,
    /// Published by the producer once per batch.
    positions: Mutex<PositionCounters>,
    undeclared: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// A snapshot of one destination, for status, metrics and JSON.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DestStatus {
    pub label: String,
    pub protocol: String,
    pub address: String,
    pub threads: Vec<u16>,
    /// Pacing rate, bits per second (None: unpaced).
    pub rate_bps: Option<f64>,
    /// Frames for this destination (its thread filter passed them), each given a PSN: its position in
    /// the source stream.
    pub offered: u64,
    /// Frames of threads this destination does not take (they take no position).
    pub filtered: u64,
    /// Positions skipped because their frames never reached the forwarder (lost before the station or
    /// in its socket); a late frame that fills one is forwarded at its place and not counted.
    pub skipped_captured_lost: u64,
    /// Positions of frames the recorder received and had no buffer for (not recorded, not forwarded).
    pub skipped_no_buffer: u64,
    /// Input frames not forwarded because their position was taken already (duplicates), lay far
    /// outside the stream (strays), or had no position (a thread not seen at the first time stamp, no
    /// usable time stamp or PSN).
    pub not_placed: u64,
    /// How each frame's position was found, with the positioner's own counts.
    pub positions: PositionCounters,
    /// Gap notices sent (udps).
    pub notices_sent: u64,
    /// Skipped positions that found no room in a notice (declared in no notice).
    pub undeclared: u64,
    pub sent: u64,
    /// Datagram (or TCP) bytes sent, PSN included.
    pub sent_bytes: u64,
    /// Dropped because the destination's queue was full (it, or its pacing, could not keep up).
    pub dropped_queue_full: u64,
    /// Dropped because the kernel refused the send (no listener, no route, ...).
    pub dropped_send_error: u64,
    /// Dropped while the TCP connection was down.
    pub dropped_disconnected: u64,
    /// Still queued when forwarding was stopped.
    pub dropped_at_stop: u64,
    /// In the queue now.
    pub queued: u64,
    pub queue_capacity: u64,
    pub send_errors: u64,
    /// TCP: connections made (the first and every reconnection); UDP: 1.
    pub connects: u64,
    pub connected: bool,
    pub last_error: Option<String>,
    /// PSN the next frame in order would get.
    pub next_psn: u64,
}

impl DestStatus {
    /// All drops, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_queue_full + self.dropped_send_error + self.dropped_disconnected + self.dropped_at_stop
    }

    /// Positions of the stream this destination did not get, whatever the reason: what its receiver
    /// fills if the path loses nothing.
    pub fn positions_missing(&self) -> u64 {
        self.skipped_captured_lost + self.skipped_no_buffer + self.dropped()
    }
}

/// What the forwarded frames are, so each destination can find a frame's position in the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardSource {
    pub kind: FrameKind,
    /// Offers come with the input's packet sequence numbers.
    pub psn: bool,
    /// Frames per second per thread, when known (learned from the first second otherwise).
    pub frame_rate: Option<u32>,
    /// The stream's VDIF threads, in the order positions count them (learned otherwise).
    pub threads: Option<Vec<u16>>,
}

impl ForwardSource {
    /// VDIF frames with packet sequence numbers.
    pub fn vdif_psn() -> Self {
        ForwardSource {
            kind: FrameKind::Vdif,
            psn: true,
            frame_rate: None,
            threads: None,
        }
    }

    /// VDIF frames without packet sequence numbers: positions from time stamps and threads.
    pub fn vdif_time(frame_rate: Option<u32>, threads: Option<Vec<u16>>) -> Self {
        ForwardSource {
            kind: FrameKind::Vdif,
            psn: false,
            frame_rate,
            threads,
        }
    }

    /// What a recorded stream's frames are: its PSNs, frame rate and thread list as configured.
    pub fn for_stream(spec: &vlbiflow_recorder::StreamSpec) -> Self {
        ForwardSource {
            kind: spec.kind,
            psn: spec.psn,
            frame_rate: spec.frame_rate,
            threads: (!spec.threads.is_empty()).then(|| spec.threads.clone()),
        }
    }

    /// How a destination with thread selection `threads` finds positions.
    fn key_for(&self, threads: &[u16]) -> Result<SourceKey, String> {
        if !threads.is_empty() {
            if self.kind != FrameKind::Vdif {
                return Err("a thread selection needs VDIF frames".into());
            }
            // Only the selected threads take positions, in the order given.
            return Ok(SourceKey::VdifTime {
                frame_rate: self.frame_rate,
                threads: Some(threads.to_vec()),
            });
        }
        Ok(match (self.psn, self.kind) {
            (true, _) => SourceKey::Psn,
            (false, FrameKind::Vdif) => SourceKey::VdifTime {
                frame_rate: self.frame_rate,
                threads: self.threads.clone(),
            },
            (false, FrameKind::M5b) => SourceKey::Mark5b {
                frame_rate: self.frame_rate,
            },
        })
    }
}

/// A destination that could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("destination {label}: {reason}")]
    Dest { label: String, reason: String },
    /// A destination whose settings cannot work with this stream (positions, thread selection).
    #[error("destination {label}: {reason}")]
    Config { label: String, reason: String },
    #[error("cannot start a sender thread: {0}")]
    Thread(std::io::Error),
}

struct DestShared {
    spec: DestSpec,
    counters: DestCounters,
    capacity: usize,
    /// What waited to be declared when the stream ended and found no room in the queue: the sender
    /// declares it after the last frame.
    final_gaps: Mutex<Option<GapLog>>,
}

impl DestShared {
    fn error(&self, e: impl std::fmt::Display) {
        self.counters.send_errors.fetch_add(1, Relaxed);
        *self.counters.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
    }

    fn status(&self) -> DestStatus {
        let c = &self.counters;
        let s = &self.spec;
        let mut st = DestStatus {
            label: s.label.clone(),
            protocol: s.protocol.name().into(),
            address: s.address.to_string(),
            threads: s.threads.clone(),
            rate_bps: s.rate_bps,
            offered: c.offered.load(Relaxed),
            filtered: c.filtered.load(Relaxed),
            sent: c.sent.load(Relaxed),
            sent_bytes: c.sent_bytes.load(Relaxed),
            dropped_queue_full: c.dropped_queue_full.load(Relaxed),
            dropped_send_error: c.dropped_send_error.load(Relaxed),
            dropped_disconnected: c.dropped_disconnected.load(Relaxed),
            dropped_at_stop: c.dropped_at_stop.load(Relaxed),
            queued: 0,
            queue_capacity: self.capacity as u64,
            send_errors: c.send_errors.load(Relaxed),
            connects: c.connects.load(Relaxed),
            connected: c.connected.load(Relaxed),
            last_error: c.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            next_psn: c.next_psn.load(Relaxed),
            skipped_captured_lost: 0,
            skipped_no_buffer: c.no_buffer.load(Relaxed),
            not_placed: 0,
            positions: *c.positions.lock().unwrap_or_else(|e| e.into_inner()),
            notices_sent: c.notices_sent.load(Relaxed),
            undeclared: c.undeclared.load(Relaxed),
        };
        let p = &st.positions;
        st.skipped_captured_lost = p.captured_lost;
        st.not_placed =
            p.duplicates + p.stray + p.unknown_thread + p.no_position + c.wrong_size.load(Relaxed);
        // Read apart, so a frame in flight between two counters may make this briefly off by a few.
        st.queued = st.offered.saturating_sub(st.sent + st.dropped());
        st
    }
}

/// The producer side: offered every frame, on the producer's thread.
pub struct ForwardTap {
    dests: Vec<TapDest>,
    /// While this is false, [`offer_frames`](ForwardTap::offer_frames) forwards nothing (the daemon's
    /// `in2net=off`); frames not forwarded take no PSN.
    gate: Option<Arc<AtomicBool>>,
}

struct TapDest {
    /// Length of a frame's slot (PSN + frame): a notice is never this long.
    frame_slot: usize,
    producer: Producer,
    shared: Arc<DestShared>,
    positions: Positioner,
    gaps: GapLog,
    notices: bool,
    offered: u64,
    dropped: u64,
    no_buffer: u64,
    wrong_size: u64,
    dirty: bool,
}

impl TapDest {
    /// Declares positions not sent; with notices, they go out before the next frame.
    #[inline]
    fn declare(&mut self, first: u64, count: u64, cause: Cause) {
        if self.notices {
            self.gaps.add(first, count, cause);
        }
    }

    /// Queues a notice of what waits when one is due (`GapLog::due`), or with `all` whatever waits, if
    /// there is room (otherwise it waits).
    #[inline]
    fn send_notices(&mut self, all: bool) {
        if !self.gaps.pending() {
            return;
        }
        if !all {
            let free = self.producer.capacity() - self.producer.queued();
            if !self.gaps.due(free) {
                return;
            }
        }
        let gaps = &mut self.gaps;
        let data_len = self.frame_slot;
        // A notice is never PSN + frame long, so the sender tells it from a frame by its length.
        self.producer.try_push_with(|slot| gaps.emit(slot, data_len));
    }

    #[inline]
    fn offer(&mut self, psn: Option<u64>, frame: &[u8]) {
        self.dirty = true;
        if frame.len() + PSN_LEN != self.frame_slot {
            // Not a frame of this stream (the producers check sizes; this keeps slots unambiguous).
            self.wrong_size += 1;
            return;
        }
        let Ok(key) = self.positions.key(psn, frame) else {
            return;
        };
        let Place::At { psn, skipped } = self.positions.place(key) else {
            return;
        };
        if let Some((first, n)) = skipped {
            self.declare(first, n, Cause::CapturedLost);
        }
        self.send_notices(false);
        self.offered += 1;
        let pushed = self.producer.try_push_with(|slot| {
            slot[..PSN_LEN].copy_from_slice(&psn::to_bytes(psn));
            let n = frame.len().min(slot.len() - PSN_LEN);
            slot[PSN_LEN..PSN_LEN + n].copy_from_slice(&frame[..n]);
            PSN_LEN + n
        });
        if pushed {
            self.gaps.frame_queued();
        } else {
            self.dropped += 1;
            self.declare(psn, 1, Cause::QueueFull);
        }
    }

    /// A frame that reached the forwarder's host but not the forwarder: its position is declared.
    #[inline]
    fn unstored(&mut self, psn: Option<u64>, header: &[u8]) {
        self.dirty = true;
        let Ok(key) = self.positions.key(psn, header) else {
            return;
        };
        if let Place::At { psn, skipped } = self.positions.place(key) {
            if let Some((first, n)) = skipped {
                self.declare(first, n, Cause::CapturedLost);
            }
            self.no_buffer += 1;
            self.declare(psn, 1, Cause::NoBuffer);
        }
    }
}

impl ForwardTap {
    /// Offers one frame (with its input PSN, if the source has them) to every destination: placed at its
    /// position in the stream and copied into each queue that has room. Never blocks.
    #[inline]
    pub fn offer(&mut self, psn: Option<u64>, frame: &[u8]) {
        for d in &mut self.dests {
            d.offer(psn, frame);
        }
    }

    /// A frame that arrived but will not be forwarded (the recorder had no buffer for it): its position
    /// is taken and declared at every destination. `header`: the frame's first 16 bytes at least.
    pub fn unstored(&mut self, psn: Option<u64>, header: &[u8]) {
        for d in &mut self.dests {
            d.unstored(psn, header);
        }
    }

    /// Publishes the counters and wakes the senders; call once per batch of offers.
    #[inline]
    pub fn publish(&mut self) {
        for d in &mut self.dests {
            if !std::mem::take(&mut d.dirty) {
                continue;
            }
            d.send_notices(false);
            let c = &d.shared.counters;
            let p = d.positions.counters();
            c.offered.store(d.offered, Relaxed);
            c.filtered.store(p.filtered, Relaxed);
            c.dropped_queue_full.store(d.dropped, Relaxed);
            c.no_buffer.store(d.no_buffer, Relaxed);
            c.wrong_size.store(d.wrong_size, Relaxed);
            c.next_psn.store(d.positions.next_psn(), Relaxed);
            c.undeclared.store(d.gaps.undeclared(), Relaxed);
            if let Ok(mut g) = c.positions.try_lock() {
                // Never waits: a reader holding it only delays this copy to the next batch.
                *g = p;
            }
            d.producer.notify();
        }
    }

    /// Forwards only while `gate` is true (looked at once per [`offer_frames`](Self::offer_frames)).
    pub fn with_gate(mut self, gate: Arc<AtomicBool>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Offers every frame of `frames` (`frame_len` bytes each, with `psns` if the source has them) and
    /// publishes; nothing while the gate is closed.
    pub fn offer_frames(&mut self, frames: &[u8], frame_len: usize, psns: Option<&[u64]>) {
        if self.gate.as_ref().is_some_and(|g| !g.load(Relaxed)) {
            return;
        }
        for (i, f) in frames.chunks_exact(frame_len.max(1)).enumerate() {
            self.offer(psns.and_then(|p| p.get(i).copied()), f);
        }
        self.publish();
    }
}

impl Drop for ForwardTap {
    /// The end of the stream: what waits to be declared goes out, through the queue if it has room,
    /// else after the last frame (the sender sends it once the queue is empty).
    fn drop(&mut self) {
        for d in &mut self.dests {
            d.send_notices(true);
            if d.gaps.pending() {
                let gaps = std::mem::take(&mut d.gaps);
                *d.shared.final_gaps.lock().unwrap_or_else(|e| e.into_inner()) = Some(gaps);
            }
            d.producer.notify();
        }
    }
}

/// The recorder's hook: every recorded frame is offered, every frame it had no buffer for declared.
pub struct RecorderTap {
    tap: ForwardTap,
    frame_len: usize,
}

impl vlbiflow_recorder::FrameTap for RecorderTap {
    fn stored(&mut self, frames: &[u8], psns: Option<&[u64]>) {
        self.tap.offer_frames(frames, self.frame_len, psns);
    }

    fn unstored(&mut self, psn: Option<u64>, header: &[u8; vlbiflow_recorder::tap::TAP_HEADER_LEN]) {
        if self.tap.gate.as_ref().is_some_and(|g| !g.load(Relaxed)) {
            return;
        }
        self.tap.unstored(psn, header);
        self.tap.publish();
    }
}

impl ForwardTap {
    /// This tap as the recorder's [`FrameTap`](vlbiflow_recorder::FrameTap) for a stream of `frame_len`-byte frames.
    pub fn into_recorder_tap(self, frame_len: usize) -> Box<dyn vlbiflow_recorder::FrameTap> {
        Box::new(RecorderTap { tap: self, frame_len })
    }
}

/// The sender threads of a set of destinations.
pub struct Forwarder {
    dests: Vec<Arc<DestShared>>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Forwarder {
    /// Opens every destination (UDP sockets at once; TCP connections are made by the sender thread and
    /// re-made when they break), starts a sender thread per destination and returns the tap that feeds
    /// them. `frame_len` is the largest frame offered (a bare frame, no PSN in front); `source` says what
    /// the frames are, so each destination can place them at their positions in the stream.
    pub fn start(
        specs: Vec<DestSpec>,
        frame_len: usize,
        source: &ForwardSource,
    ) -> Result<(Forwarder, ForwardTap), ForwardError> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut dests = Vec::new();
        let mut taps = Vec::new();
        let mut threads = Vec::new();
        let mut prepared = Vec::new();
        for spec in specs {
            let label = spec.label.clone();
            let fail = |reason: String| ForwardError::Dest {
                label: label.clone(),
                reason,
            };
            let pacing = match spec.pacing(frame_len) {
                None => None,
                Some((rate, burst)) => Some(
                    TokenBucket::new(rate, burst, spec.wire_len(frame_len))
                        .map_err(|e| fail(e.to_string()))?,
                ),
            };
            let link = match spec.protocol {
                Protocol::Udps | Protocol::Vdif => {
                    let mut cfg = UdpConfig::sender(spec.address);
                    cfg.send_buffer = Some(SEND_BUFFER);
                    cfg.write_timeout = Some(Duration::from_millis(100));
                    let (sock, _) = open_udp(&cfg).map_err(|e| fail(e.to_string()))?;
                    Link::Udp(sock)
                }
                Protocol::Tcp => Link::Tcp(None),
            };
            let config = |reason: String| ForwardError::Config {
                label: label.clone(),
                reason,
            };
            let key = source.key_for(&spec.threads).map_err(config)?;
            let first = if spec.psn_input {
                FirstPsn::Input
            } else {
                FirstPsn::At(spec.first_psn)
            };
            let positions = Positioner::new(key, first).map_err(|e| config(e.to_string()))?;
            let capacity = spec.queue_frames(frame_len);
            let notices = spec.notices && spec.protocol == Protocol::Udps;
            // A notice may be longer than a small frame: the slots hold either.
            let slot = (PSN_LEN + frame_len).max(if notices { notice::MAX_LEN } else { 0 });
            let (producer, consumer) = ring(capacity, slot);
            let shared = Arc::new(DestShared {
                counters: DestCounters {
                    next_psn: AtomicU64::new(spec.first_psn),
                    ..Default::default()
                },
                capacity,
                final_gaps: Mutex::new(None),
                spec,
            });
            if matches!(link, Link::Udp(_)) {
                shared.counters.connects.store(1, Relaxed);
                shared.counters.connected.store(true, Relaxed);
            }
            taps.push(TapDest {
                frame_slot: PSN_LEN + frame_len,
                producer,
                positions,
                gaps: GapLog::default(),
                notices,
                offered: 0,
                dropped: 0,
                no_buffer: 0,
                wrong_size: 0,
                dirty: false,
                shared: shared.clone(),
            });
            prepared.push((shared.clone(), consumer, link, pacing, PSN_LEN + frame_len));
            dests.push(shared);
        }
        for (i, (shared, consumer, link, pacing, frame_slot)) in prepared.into_iter().enumerate() {
            let sender = Sender {
                frame_slot,
                shared,
                consumer,
                link,
                pacing,
                stop: stop.clone(),
                udp: BatchSender::new(BATCH).with_retry(RetryPolicy {
                    max_wait: Duration::from_millis(20),
                    ..RetryPolicy::default()
                }),
                tcp_offset: 0,
                next_connect: Instant::now(),
            };
            match std::thread::Builder::new()
                .name(format!("vf-fwd{i}"))
                .spawn(move || sender.run())
            {
                Ok(t) => threads.push(t),
                Err(e) => {
                    stop.store(true, Relaxed);
                    drop(taps);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(ForwardError::Thread(e));
                }
            }
        }
        Ok((
            Forwarder { dests, threads, stop },
            ForwardTap {
                dests: taps,
                gate: None,
            },
        ))
    }

    /// Live status of every destination.
    pub fn status(&self) -> Vec<DestStatus> {
        self.dests.iter().map(|d| d.status()).collect()
    }

    /// Ends forwarding once the tap is gone: each sender sends what its queue still holds (paced) for
    /// at most `drain`, then drops the rest (counted `dropped_at_stop`) and stops. Returns the final status.
    pub fn finish(mut self, drain: Duration) -> Vec<DestStatus> {
        let end = Instant::now() + drain;
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.status()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

enum Link {
    Udp(UdpSocket),
    Tcp(Option<TcpStream>),
}

struct Sender {
    /// Length of a frame's slot (PSN + frame); a slot of another length is a gap notice.
    frame_slot: usize,
    shared: Arc<DestShared>,
    consumer: Consumer,
    link: Link,
    pacing: Option<TokenBucket>,
    stop: Arc<AtomicBool>,
    udp: BatchSender,
    /// Bytes of the first queued frame already written on the TCP connection.
    tcp_offset: usize,
    next_connect: Instant,
}

impl Sender {
    fn payload_range(&self) -> usize {
        match self.shared.spec.protocol {
            Protocol::Udps => 0,
            Protocol::Vdif | Protocol::Tcp => PSN_LEN,
        }
    }

    fn run(mut self) {
        be_nicer(SENDER_NICENESS);
        loop {
            if self.stop.load(Relaxed) {
                let left = self.consumer.available();
                let frames = (0..left)
                    .filter(|&i| self.consumer.get(i).len() == self.frame_slot)
                    .count();
                self.consumer.release(left);
                self.shared
                    .counters
                    .dropped_at_stop
                    .fetch_add(frames as u64, Relaxed);
                return;
            }
            let n = self.consumer.available();
            if n == 0 {
                if self.consumer.producer_gone() {
                    self.send_final_notices();
                    return;
                }
                self.consumer.wait(MAX_SLEEP);
                continue;
            }
            if let Link::Tcp(None) = self.link {
                self.connect();
                if let Link::Tcp(None) = self.link {
                    // Down: live data is not kept for later; drop what is queued (counted).
                    let n = self.consumer.available();
                    self.consumer.release(n);
                    self.tcp_offset = 0;
                    self.shared
                        .counters
                        .dropped_disconnected
                        .fetch_add(n as u64, Relaxed);
                    let wait = self.next_connect.saturating_duration_since(Instant::now());
                    std::thread::sleep(wait.min(MAX_SLEEP));
                    continue;
                }
            }
            // How many may go now.
            let skip = self.payload_range();
            let mut k = 0;
            let now = Instant::now();
            let limit = n.min(BATCH);
            if let Some(bucket) = &mut self.pacing {
                while k < limit {
                    let len = self.consumer.get(k).len() - skip;
                    // A partly written TCP record paid for its tokens already.
                    if (k > 0 || self.tcp_offset == 0) && !bucket.try_take(now, len) {
                        break;
                    }
                    k += 1;
                }
                if k == 0 {
                    let len = self.consumer.get(0).len() - skip;
                    let due = bucket.due(now, len);
                    std::thread::sleep(due.saturating_duration_since(now).min(MAX_SLEEP));
                    continue;
                }
            } else {
                k = limit;
            }
            match self.link {
                Link::Udp(_) => self.send_udp(k, skip),
                Link::Tcp(_) => self.send_tcp(k),
            }
        }
    }

    /// Declares what the stream's end left undeclared (udps), after the last frame.
    fn send_final_notices(&mut self) {
        let Link::Udp(sock) = &self.link else { return };
        let taken = self
            .shared
            .final_gaps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(mut gaps) = taken else { return };
        let mut buf = vec![0u8; notice::MAX_LEN];
        while gaps.pending() {
            let n = gaps.emit(&mut buf, self.frame_slot);
            let sent = {
                let mut batch = self.udp.batch();
                batch.push(&[&buf[..n]]);
                batch.flush(sock)
            };
            match sent {
                Ok(s) if s.messages == 1 => {
                    self.shared.counters.notices_sent.fetch_add(1, Relaxed);
                }
                Ok(_) => {}
                Err(e) => {
                    self.shared.error(&e);
                    return;
                }
            }
        }
    }

    fn send_udp(&mut self, k: usize, skip: usize) {
        let Link::Udp(sock) = &self.link else { return };
        let frame_slot = self.frame_slot;
        // A notice is never a frame's length (GapLog::emit sees to it).
        let is_notice = |d: &[u8]| d.len() != frame_slot;
        let result = {
            let mut batch = self.udp.batch();
            for i in 0..k {
                let d = self.consumer.get(i);
                // A notice goes whole; a frame behind its PSN (udps) or without it (vdif).
                batch.push(&[if is_notice(d) { d } else { &d[skip..] }]);
            }
            batch.flush(sock)
        };
        let (sent, bytes) = match result {
            Ok(s) => (s.messages, s.bytes),
            Err(e) => {
                let (m, b) = (e.sent.messages, e.sent.bytes);
                self.shared.error(&e);
                // The failed message and the rest of the batch are dropped (live data is not retried).
                let lost_frames = (m..k).filter(|&i| !is_notice(self.consumer.get(i))).count();
                self.shared
                    .counters
                    .dropped_send_error
                    .fetch_add(lost_frames as u64, Relaxed);
                (m, b)
            }
        };
        let notices = (0..sent).filter(|&i| is_notice(self.consumer.get(i))).count();
        self.consumer.release(k);
        let c = &self.shared.counters;
        c.sent.fetch_add((sent - notices) as u64, Relaxed);
        c.sent_bytes.fetch_add(bytes as u64, Relaxed);
        if notices > 0 {
            c.notices_sent.fetch_add(notices as u64, Relaxed);
        }
    }

    fn connect(&mut self) {
        if Instant::now() < self.next_connect {
            return;
        }
        self.next_connect = Instant::now() + RECONNECT_PAUSE;
        match TcpStream::connect_timeout(&self.shared.spec.address, CONNECT_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_write_timeout(Some(MAX_SLEEP));
                let sock = socket2::SockRef::from(&s);
                let _ = sock.set_send_buffer_size(SEND_BUFFER);
                self.shared.counters.connects.fetch_add(1, Relaxed);
                self.shared.counters.connected.store(true, Relaxed);
                self.tcp_offset = 0;
                self.link = Link::Tcp(Some(s));
            }
            Err(e) => self
                .shared
                .error(format!("connect to {}: {e}", self.shared.spec.address)),
        }
    }

    fn send_tcp(&mut self, k: usize) {
        let Link::Tcp(Some(stream)) = &mut self.link else {
            return;
        };
        let mut slices = [IoSlice::new(&[]); BATCH];
        for (i, s) in slices.iter_mut().enumerate().take(k) {
            let d = &self.consumer.get(i)[PSN_LEN..];
            *s = IoSlice::new(if i == 0 { &d[self.tcp_offset..] } else { d });
        }
        match stream.write_vectored(&slices[..k]) {
            Ok(0) => self.disconnect("connection closed by the peer".into()),
            Ok(mut written) => {
                // Whole records written are released; a partial one stays, with its offset.
                let bytes = written as u64;
                let mut done = 0;
                while done < k {
                    let offset = if done == 0 { self.tcp_offset } else { 0 };
                    let rest = self.consumer.get(done).len() - PSN_LEN - offset;
                    if written < rest {
                        self.tcp_offset = offset + written;
                        break;
                    }
                    written -= rest;
                    done += 1;
                    self.tcp_offset = 0;
                }
                self.consumer.release(done);
                let c = &self.shared.counters;
                c.sent.fetch_add(done as u64, Relaxed);
                c.sent_bytes.fetch_add(bytes, Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => self.disconnect(e.to_string()),
        }
    }

    fn disconnect(&mut self, why: String) {
        self.shared
            .error(format!("tcp {}: {why}", self.shared.spec.address));
        self.shared.counters.connected.store(false, Relaxed);
        // A record cut short cannot be completed on a new connection: it is lost with the connection.
        if self.tcp_offset > 0 {
            self.consumer.release(1);
            self.shared.counters.dropped_disconnected.fetch_add(1, Relaxed);
            self.tcp_offset = 0;
        }
        self.link = Link::Tcp(None);
    }
}

/// A destination's address for printing (the resolved one).
pub fn describe(spec: &DestSpec) -> String {
    format!("{} {}@{}", spec.label, spec.protocol.name(), spec.address)
}
