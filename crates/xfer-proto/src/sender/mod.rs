//! The sending side: announces files, paces data datagrams, retransmits what the receiver reports lost
//! (before any new data), resends chunks that fail verification and finishes when every chunk is verified.
//!
//! The I/O layer drives it: it calls [`Sender::poll_transmit`] and, for each [`Transmit`], writes the
//! header, reads `len` bytes of file `file` at `offset` into the payload, calls [`Sender::seal`] (or
//! [`Sender::seal_parts`] when header and payload live apart) and sends the datagram. Sealing computes the
//! payload's digest for the tag and, when blocks are BLAKE3 subtrees
//! ([`crate::hash::blocks_are_subtrees`]), merges the digests of each chunk's first transmission into the
//! chunk hash, so the I/O layer need not hash what it sends (only chunks it does not send: those a resuming
//! receiver holds); it sends every [`Sender::poll_control`] message on the control connection and feeds
//! control messages from the receiver to [`Sender::handle_control`]; it wakes at
//! [`Sender::poll_timeout`] and calls [`Sender::handle_timeout`].

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::event::Event;
use crate::hash::{block_digest, blocks_are_subtrees, ChunkDigests};
use crate::rate::{FeedbackSample, RateControl};
use crate::wire::{self, AbortKind, ChunkHash, ControlMsg, DataPacket, DataRepr, Feedback, HEADER_LEN};

mod config;

pub use config::{SenderConfig, SenderStats, Transmit};

#[derive(Debug)]
struct SFile {
    name: String,
    size: u64,
    chunk_size: u64,
    hashes: Vec<Option<ChunkHash>>,
    verified: Vec<bool>,
    /// The receiver already holds these chunks (agreed by hash before the file was added): not sent
    /// unless the receiver reports a mismatch.
    held: Vec<bool>,
    n_verified: u64,
    retries: Vec<u8>,
}

impl SFile {
    fn chunks(&self) -> u64 {
        ControlMsg::chunk_count(self.size, self.chunk_size)
    }
    fn done(&self) -> bool {
        self.n_verified == self.chunks()
    }
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    file: u32,
    offset: u64,
    len: u32,
    sent_at: Instant,
    presumed_lost: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Done,
    Dead,
    Aborted,
}

/// Bytes a datagram of `len` payload bytes occupies on the wire (what rate control counts).
fn wire_of(len: u32) -> u64 {
    len as u64 + (HEADER_LEN + wire::IP_UDP_OVERHEAD) as u64
}

/// The sender state machine.
#[derive(Debug)]
pub struct Sender {
    cfg: SenderConfig,
    /// Ceilings set while running, bits/s: this side's own and the receiver's.
    caps: (Option<f64>, Option<f64>),
    epoch: Option<Instant>,
    files: Vec<SFile>,
    closed: bool,
    files_done: usize,
    announced: usize,
    cursor_file: usize,
    cursor_offset: u64,
    retx: VecDeque<(u32, u64, u32)>,
    inflight: VecDeque<Sent>,
    inflight_base: u64,
    inflight_bytes: u64,
    tail_idx: usize,
    next_seq: u64,
    next_send: Option<Instant>,
    /// The last [`Sender::poll_transmit`] that sent nothing was held back by pacing alone.
    pace_limited: bool,
    /// The last [`Sender::poll_transmit`] that sent nothing was held back by the in-flight cap.
    window_limited: bool,
    /// Sending time lost to waking late, still to be made up (see [`SenderConfig::max_pace_debt`]).
    pace_debt: Duration,
    last_feedback: Option<Instant>,
    /// Number of the newest feedback taken ([`Feedback::n`]).
    feedback_n: u64,
    /// The receiving host's drop count in the newest feedback.
    host_drops: u64,
    /// When the newest feedback was taken, and since when the receiver has been reporting without a
    /// silence (the tail timer waits while the receiver is silent: a stalled receiver is not a lossy path).
    last_fresh: Option<Instant>,
    talking_since: Option<Instant>,
    feedback_datagrams: bool,
    last_sent: Option<Instant>,
    control_out: VecDeque<ControlMsg>,
    events: VecDeque<Event>,
    rate: RateControl,
    /// Smoothed RTT and its mean deviation (RFC 6298), for the tail timer.
    srtt: Option<Duration>,
    rttvar: Duration,
    /// How long the receiver lately held datagrams before it handled them (the echo delay of feedback that
    /// acknowledged new datagrams), as of `recv_lag_at`, going down as fast as time passes: a receiver
    /// working off a backlog in its socket buffer acknowledges what it holds that much later.
    recv_lag: Duration,
    recv_lag_at: Option<Instant>,
    /// Block digests of chunks whose hash is not known yet, until the last block of each was sealed.
    digests: HashMap<(u32, u32), ChunkDigests>,
    state: State,
    stats: SenderStats,
}

impl Sender {
    /// A sender; the `hello` message is queued for the control connection.
    pub fn new(cfg: SenderConfig) -> Self {
        assert!(
            cfg.block_size as usize <= wire::MAX_PAYLOAD && cfg.block_size > 0,
            "block size"
        );
        assert!(
            (wire::MIN_CHUNK_SIZE..=wire::MAX_CHUNK_SIZE).contains(&cfg.chunk_size),
            "chunk size"
        );
        assert!(
            cfg.chunk_size >= cfg.block_size as u64,
            "chunk size below the block size"
        );
        let mut control_out = VecDeque::new();
        control_out.push_back(ControlMsg::Hello {
            version: wire::VERSION,
            transfer_id: cfg.transfer_id,
            block_size: cfg.block_size,
        });
        Sender {
            caps: (None, None),
            rate: RateControl::new(cfg.rate),
            srtt: None,
            rttvar: Duration::ZERO,
            recv_lag: Duration::ZERO,
            recv_lag_at: None,
            digests: HashMap::new(),
            cfg,
            epoch: None,
            files: Vec::new(),
            closed: false,
            files_done: 0,
            announced: 0,
            cursor_file: 0,
            cursor_offset: 0,
            retx: VecDeque::new(),
            inflight: VecDeque::new(),
            inflight_base: 0,
            inflight_bytes: 0,
            tail_idx: 0,
            next_seq: 0,
            next_send: None,
            pace_limited: false,
            window_limited: false,
            pace_debt: Duration::ZERO,
            last_feedback: None,
            feedback_n: 0,
            host_drops: 0,
            last_fresh: None,
            talking_since: None,
            feedback_datagrams: false,
            last_sent: None,
            control_out,
            events: VecDeque::new(),
            state: State::Running,
            stats: SenderStats::default(),
        }
    }

    /// Adds a file to the transfer; `hashes`, when known, holds one hash per chunk. Returns its index.
    pub fn add_file(
        &mut self,
        name: &str,
        size: u64,
        hashes: Option<Vec<ChunkHash>>,
    ) -> Result<u32, wire::WireError> {
        let n = ControlMsg::chunk_count(size, self.cfg.chunk_size) as usize;
        let hashes = match hashes {
            Some(h) if h.len() != n => {
                return Err(wire::WireError::Field {
                    field: "hashes",
                    why: format!("{} for {n} chunks", h.len()),
                })
            }
            Some(h) => h.into_iter().map(Some).collect(),
            None => vec![None; n],
        };
        self.add_file_held(name, size, hashes, Vec::new())
    }

    /// Adds a file of which the receiver already holds some chunks (resume): `hashes` has one entry per
    /// chunk (`None` where not known yet), `held[c]` says the receiver holds chunk `c` with the hash
    /// `hashes[c]` (agreed before the file was added). Held chunks are not sent; the receiver confirms
    /// them with `chunk_verified` (after `Receiver::declare_verified`) or asks for them with
    /// `chunk_mismatch`, and then they are sent like any other. `held` may be shorter than the chunk
    /// count (missing entries are false). A held chunk needs its hash.
    pub fn add_file_held(
        &mut self,
        name: &str,
        size: u64,
        hashes: Vec<Option<ChunkHash>>,
        held: Vec<bool>,
    ) -> Result<u32, wire::WireError> {
        wire::validate_name(name)?;
        let n = ControlMsg::chunk_count(size, self.cfg.chunk_size) as usize;
        if hashes.len() != n {
            return Err(wire::WireError::Field {
                field: "hashes",
                why: format!("{} for {n} chunks", hashes.len()),
            });
        }
        let mut held = held;
        held.resize(n, false);
        if let Some(c) = (0..n).find(|&c| held[c] && hashes[c].is_none()) {
            return Err(wire::WireError::Field {
                field: "held",
                why: format!("chunk {c} is held but its hash is not known"),
            });
        }
        assert!(!self.closed, "add_file after close");
        self.files.push(SFile {
            name: name.to_owned(),
            size,
            chunk_size: self.cfg.chunk_size,
            hashes,
            verified: vec![false; n],
            held,
            n_verified: 0,
            retries: vec![0; n],
        });
        let idx = (self.files.len() - 1) as u32;
        self.refill_announces();
        if self.files[idx as usize].done() {
            self.file_done(idx);
        }
        Ok(idx)
    }

    /// No more files will be added: the transfer finishes once every chunk is verified. The receiver is
    /// told (`closed`), so that it can commit as soon as it has verified the last chunk instead of a round
    /// trip later, when this side's `done` reaches it.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.running() {
            self.control_out.push_back(ControlMsg::Closed {
                files: self.files.len() as u32,
                bytes: self.files.iter().map(|f| f.size).sum(),
            });
        }
        self.check_done();
    }

    /// The I/O layer read chunk `chunk` of `file` and hashed it.
    pub fn set_chunk_hash(&mut self, file: u32, chunk: u32, hash: ChunkHash) {
        let Some(f) = self.files.get_mut(file as usize) else {
            return;
        };
        let Some(slot) = f.hashes.get_mut(chunk as usize) else {
            return;
        };
        if slot.is_none() {
            *slot = Some(hash);
            if (file as usize) < self.announced {
                self.control_out
                    .push_back(ControlMsg::ChunkHash { file, chunk, hash });
            }
        }
    }

    fn refill_announces(&mut self) {
        let limit = (self.cursor_file + self.cfg.announce_ahead).min(self.files.len());
        while self.announced < limit {
            let i = self.announced;
            let f = &self.files[i];
            let known = f.hashes.iter().all(Option::is_some);
            self.control_out.push_back(ControlMsg::Announce {
                file: i as u32,
                name: f.name.clone(),
                size: f.size,
                chunk_size: f.chunk_size,
                hashes: if known {
                    f.hashes.iter().flatten().copied().collect()
                } else {
                    Vec::new()
                },
            });
            if !known {
                for (c, h) in f.hashes.iter().enumerate() {
                    if let Some(hash) = h {
                        self.control_out.push_back(ControlMsg::ChunkHash {
                            file: i as u32,
                            chunk: c as u32,
                            hash: *hash,
                        });
                    }
                }
            }
            self.announced += 1;
        }
    }

    fn us(&mut self, now: Instant) -> u64 {
        let e = *self.epoch.get_or_insert(now);
        now.saturating_duration_since(e).as_micros() as u64
    }

    /// How long after sending a datagram without an acknowledgement the tail timer presumes it lost:
    /// twice the minimum RTT or the smoothed RTT plus four deviations (RFC 6298), whichever is larger, plus
    /// 50 ms, plus the receiver's lag. The smoothed term keeps a queue that grows (ours, or a busy host's)
    /// from turning into spurious retransmissions: with the minimum alone, 2.5% of datagrams were sent
    /// twice on a path that lost none. The RTT leaves out the time the receiver held the echoed datagram
    /// (it measures the path), so the lag is added here: a receiver slowed by its disk for 100-200 ms that
    /// kept reporting had the timer resend 1,700 datagrams that were waiting in its socket buffer.
    fn rto(&self) -> Duration {
        let base = match (self.rate.min_rtt(), self.srtt) {
            (Some(m), Some(s)) => (m * 2).max(s + self.rttvar * 4) + Duration::from_millis(50),
            (Some(m), None) => m * 2 + Duration::from_millis(50),
            _ => Duration::from_secs(1),
        };
        base + self.recv_lag
    }

    fn running(&self) -> bool {
        self.state == State::Running
    }

    /// A receiver that has sent no feedback for this long (it reports every few milliseconds while data
    /// arrives, and for a while after) is silent: stalled (CPU, disk), or its reports are held up.
    fn silence_limit(&self) -> Duration {
        Duration::from_millis(25).max(self.srtt.unwrap_or(Duration::ZERO) / 4)
    }

    /// The earliest time from `due` on at which the tail timer may presume a datagram lost. At the end of
    /// the data at once; otherwise only while the receiver is reporting, and has been for a silence limit
    /// since its last silence: a receiver that stalls for 100-200 ms on a busy host and then works off its
    /// backlog made the timer resend up to 2,000 datagrams that were not lost (a silence of more than a
    /// second presumes the loss all the same).
    fn tail_allowed_from(&self, due: Instant) -> Instant {
        let hard = due + Duration::from_secs(1);
        if !self.has_data() {
            return due;
        }
        let quiet = self.silence_limit();
        match (self.talking_since, self.last_fresh) {
            (Some(since), Some(last)) => {
                let from = due.max(since + quiet);
                if from <= last + quiet {
                    from.min(hard)
                } else {
                    hard
                }
            }
            _ => hard,
        }
    }

    /// Next block of new data, advancing the cursor past verified chunks and finished files.
    fn next_new(&mut self) -> Option<(u32, u64, u32)> {
        loop {
            let f = self.files.get(self.cursor_file)?;
            if self.cursor_offset >= f.size {
                self.cursor_file += 1;
                self.cursor_offset = 0;
                self.refill_announces();
                continue;
            }
            let chunk = (self.cursor_offset / f.chunk_size) as usize;
            if f.verified[chunk] || f.held[chunk] {
                self.cursor_offset = (chunk as u64 + 1) * f.chunk_size;
                continue;
            }
            // blocks are aligned to chunks: the last block of a chunk may be shorter
            let chunk_end = ((chunk as u64 + 1) * f.chunk_size).min(f.size);
            let len = (self.cfg.block_size as u64).min(chunk_end - self.cursor_offset) as u32;
            let item = (self.cursor_file as u32, self.cursor_offset, len);
            self.cursor_offset += len as u64;
            return Some(item);
        }
    }

    fn verified_at(&self, file: u32, offset: u64) -> bool {
        let f = &self.files[file as usize];
        f.verified[(offset / f.chunk_size) as usize]
    }

    fn has_data(&self) -> bool {
        !self.retx.is_empty() || self.cursor_file < self.files.len()
    }

    fn window_open(&self) -> bool {
        self.rate.cwnd().is_none_or(|w| self.inflight_bytes < w)
    }

    /// The next datagram to send now, if pacing, the in-flight cap and the queue allow one.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if !self.running() || !self.window_open() {
            self.window_limited = self.running();
            self.pace_limited = false;
            return None;
        }
        if self.next_send.is_some_and(|t| t > now) {
            self.pace_limited = true;
            self.window_limited = false;
            return None;
        }
        let (file, offset, len, retransmit) = loop {
            if let Some((f, o, l)) = self.retx.pop_front() {
                if self.verified_at(f, o) {
                    continue;
                }
                break (f, o, l, true);
            }
            let Some((f, o, l)) = self.next_new() else {
                self.pace_limited = false;
                return None;
            };
            break (f, o, l, false);
        };
        let ts = self.us(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.inflight.is_empty() {
            self.inflight_base = seq;
        }
        self.inflight.push_back(Sent {
            file,
            offset,
            len,
            sent_at: now,
            presumed_lost: false,
        });
        self.inflight_bytes += wire_of(len);
        let rate = self.rate.pacing_rate();
        let wire_len = wire_of(len) as f64;
        // whole nanoseconds (`from_secs_f64` was a tenth of this function's time)
        let mut gap = Duration::from_nanos((wire_len * 1e9 / rate) as u64);
        let burst = gap * self.cfg.max_burst;
        // an idle sender may catch up by at most one burst (one GSO batch), one that woke late while held
        // back by pacing by up to `catch_up`
        let behind = if self.pace_limited {
            burst.max(self.cfg.catch_up)
        } else {
            burst
        };
        let base = match self.next_send {
            Some(t) => match now.checked_sub(behind) {
                Some(floor) if floor > t => {
                    if self.pace_limited {
                        let late = floor - t;
                        self.stats.late_us += late.as_micros() as u64;
                        self.rate.on_sender_late(now, late);
                        let max_debt = self.cfg.max_pace_debt.min(
                            self.rate
                                .min_rtt()
                                .map_or(Duration::ZERO, |r| (r / 2).max(self.cfg.min_pace_debt)),
                        );
                        self.pace_debt = (self.pace_debt + late).min(max_debt);
                    } else if self.window_limited {
                        self.stats.window_us += (floor - t).as_micros() as u64;
                    }
                    floor
                }
                _ => t,
            },
            None => now,
        };
        // repaid only on schedule: catching up within `catch_up` already sends back to back
        if !self.pace_debt.is_zero() && base + gap > now {
            let repay = self.pace_debt.min(gap / 2);
            self.pace_debt -= repay;
            gap -= repay;
        }
        self.next_send = Some(base + gap);
        self.window_limited = false;
        self.last_sent = Some(now);
        self.stats.datagrams += 1;
        self.stats.bytes += len as u64;
        if retransmit {
            self.stats.retransmits += 1;
        }
        Some(Transmit {
            header: DataRepr {
                transfer_id: self.cfg.transfer_id,
                seq,
                file,
                offset,
                len,
                timestamp_us: ts,
                retransmit,
            },
        })
    }

    /// The block size when blocks are BLAKE3 subtrees ([`blocks_are_subtrees`]): the digest of a datagram's
    /// payload is then its subtree's chaining value ([`block_digest`]).
    pub fn subtree_block(&self) -> Option<u64> {
        let b = self.cfg.block_size as u64;
        blocks_are_subtrees(b).then_some(b)
    }

    /// Whether sealing derives the chunk hashes from the datagrams (blocks are BLAKE3 subtrees): then the
    /// I/O layer hashes only chunks it does not send (held by a resuming receiver), and never calls
    /// [`Self::set_chunk_hash`] for the others.
    pub fn derives_chunk_hashes(&self) -> bool {
        self.subtree_block().is_some()
    }

    /// Writes the authentication tag of a complete datagram (zero without a key) and, for a first
    /// transmission, takes its digest into the chunk hash (see [`Self::seal_parts`]).
    pub fn seal(&mut self, datagram: &mut [u8]) {
        let (head, payload) = datagram.split_at_mut(HEADER_LEN);
        self.seal_parts(head, payload);
    }

    /// [`Self::seal`] for a header ([`HEADER_LEN`] bytes, emitted by [`Transmit::emit_header`]) and its payload
    /// kept apart (e.g. a slice of a large read buffer sent with a gathering send). With encryption the
    /// I/O layer seals without a data key first (the digest of the plaintext goes into the chunk hash),
    /// then encrypts, which replaces the tag.
    pub fn seal_parts(&mut self, head: &mut [u8], payload: &[u8]) {
        self.seal_parts_with(head, payload, None);
    }

    /// [`Self::seal_parts`] with the payload's digest (`block_digest(self.subtree_block(), offset, payload)`)
    /// when the I/O layer has it already (it hashes what it reads right after the read, while the bytes are
    /// still in the core's cache); `None` computes it here. A wrong digest cannot corrupt a transfer: its tag
    /// fails at the receiver and the chunk hash it went into does not match what the receiver wrote.
    pub fn seal_parts_with(&mut self, head: &mut [u8], payload: &[u8], digest: Option<[u8; 32]>) {
        let p = DataPacket::new_unchecked(&head[..HEADER_LEN]);
        let (file, offset) = (p.file(), p.offset());
        let first = p.flags() & wire::FLAG_RETRANSMIT == 0;
        let sub = self.subtree_block();
        let want = sub.is_some()
            && first
            && self.files.get(file as usize).is_some_and(|f| {
                f.hashes
                    .get((offset / f.chunk_size) as usize)
                    .is_some_and(Option::is_none)
            });
        if self.cfg.data_key.is_none() && !want {
            return;
        }
        let d = match digest {
            Some(d) => {
                debug_assert_eq!(d, block_digest(sub, offset, payload), "digest of {file}:{offset}");
                d
            }
            None => block_digest(sub, offset, payload),
        };
        if let Some(k) = &self.cfg.data_key {
            let t = wire::tag(k, head, &d);
            DataPacket::new_unchecked(&mut head[..HEADER_LEN]).set_tag(&t);
        }
        if want {
            self.take_digest(file, offset, payload, d);
        }
    }

    fn take_digest(&mut self, file: u32, offset: u64, payload: &[u8], d: [u8; 32]) {
        let block = self.cfg.block_size as u64;
        let f = &self.files[file as usize];
        let (size, cs) = (f.size, f.chunk_size);
        let c = offset / cs;
        let start = c * cs;
        let len = cs.min(size - start);
        let hash = if size <= block {
            // a file of one block: its root hash, from the bytes
            Some(ChunkHash(*blake3::hash(payload).as_bytes()))
        } else {
            let acc = self
                .digests
                .entry((file, c as u32))
                .or_insert_with(|| ChunkDigests::new(len.div_ceil(block) as usize));
            acc.put(((offset - start) / block) as usize, d)
                .then(|| acc.finish(block, len, size <= cs))
        };
        if let Some(h) = hash {
            self.digests.remove(&(file, c as u32));
            self.set_chunk_hash(file, c as u32, h);
        }
    }

    /// The next control message to send.
    pub fn poll_control(&mut self) -> Option<ControlMsg> {
        self.control_out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Self::handle_timeout`] (or [`Self::poll_transmit`]) wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.running() {
            return None;
        }
        let mut t = self
            .last_feedback
            .or(self.epoch)
            .map(|l| l + self.cfg.dead_timeout);
        let mut min = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        if self.has_data() && self.window_open() {
            if let Some(n) = self.next_send {
                min(n);
            }
        }
        if let Some(s) = self.inflight.get(self.tail_idx) {
            min(self.tail_allowed_from(s.sent_at + self.rto()));
        }
        // keep-alive: a ping after a second without sending, also before the first datagram (a sender
        // whose files wait for the receiver's resume comparison sends nothing else for minutes)
        if let Some(l) = self.last_sent.or(self.epoch) {
            min(l + Duration::from_secs(1));
        }
        t
    }

    /// Runs timers: tail-loss detection, keep-alive, dead peer.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.running() {
            return;
        }
        let e = *self.epoch.get_or_insert(now);
        if now.saturating_duration_since(self.last_feedback.unwrap_or(e)) >= self.cfg.dead_timeout {
            self.state = State::Dead;
            self.events.push_back(Event::PeerDead);
            return;
        }
        let rto = self.rto();
        while let Some(&s) = self.inflight.get(self.tail_idx) {
            if self.tail_allowed_from(s.sent_at + rto) > now {
                break;
            }
            let s = &mut self.inflight[self.tail_idx];
            if !s.presumed_lost {
                s.presumed_lost = true;
                self.inflight_bytes -= wire_of(s.len);
                self.retx.push_back((s.file, s.offset, s.len));
                self.stats.tail_lost += 1;
            }
            self.tail_idx += 1;
        }
        if self
            .last_sent
            .is_none_or(|l| now.saturating_duration_since(l) >= Duration::from_secs(1))
        {
            self.control_out.push_back(ControlMsg::Ping);
            self.last_sent = Some(now);
        }
    }

    /// A feedback datagram's report (the I/O layer checked it with [`wire::parse_feedback_datagram`]). The
    /// first one tells the receiver that feedback datagrams arrive ([`ControlMsg::FeedbackDatagrams`]).
    pub fn handle_feedback_datagram(&mut self, now: Instant, f: Feedback) {
        if !self.running() {
            return;
        }
        // checked here as on the control connection: the machine does not rely on its caller
        if f.validate().is_err() {
            self.stats.bad_control += 1;
            return;
        }
        if !self.feedback_datagrams {
            self.feedback_datagrams = true;
            self.control_out.push_back(ControlMsg::FeedbackDatagrams);
        }
        self.on_feedback(now, f);
    }

    /// A control message from the receiver.
    pub fn handle_control(&mut self, now: Instant, msg: ControlMsg) {
        if !self.running() {
            return;
        }
        // the clocks (keep-alive, dead peer) run from the first word of the receiver on
        self.epoch.get_or_insert(now);
        if msg.validate().is_err() {
            self.stats.bad_control += 1;
            return;
        }
        match msg {
            ControlMsg::Feedback(f) => self.on_feedback(now, f),
            ControlMsg::ChunkVerified { file, chunk } => {
                self.last_feedback = Some(now);
                let Some(f) = self.files.get_mut(file as usize) else {
                    self.stats.bad_control += 1;
                    return;
                };
                match f.verified.get_mut(chunk as usize) {
                    Some(v) if !*v => {
                        *v = true;
                        f.n_verified += 1;
                        self.events.push_back(Event::ChunkVerified { file, chunk });
                        if f.done() {
                            self.file_done(file);
                        }
                    }
                    Some(_) => {}
                    None => self.stats.bad_control += 1,
                }
            }
            ControlMsg::ChunkMismatch { file, chunk } => {
                self.last_feedback = Some(now);
                let block = self.cfg.block_size as u64;
                let max = self.cfg.max_chunk_retries;
                let Some(f) = self.files.get_mut(file as usize) else {
                    self.stats.bad_control += 1;
                    return;
                };
                let Some(r) = f.retries.get_mut(chunk as usize) else {
                    self.stats.bad_control += 1;
                    return;
                };
                if f.verified[chunk as usize] {
                    self.stats.bad_control += 1;
                    return;
                }
                let start = chunk as u64 * f.chunk_size;
                let end = (start + f.chunk_size).min(f.size);
                // what of the chunk the data cursor has passed (the rest goes out as new data anyway)
                let sent_end = match (file as usize).cmp(&self.cursor_file) {
                    std::cmp::Ordering::Less => end,
                    std::cmp::Ordering::Equal => end.min(self.cursor_offset),
                    std::cmp::Ordering::Greater => start,
                };
                let was_held = std::mem::take(&mut f.held[chunk as usize]);
                // a held chunk the cursor passed was skipped whole; an unsent one goes out as new data
                let resend_end = match (was_held, sent_end > start) {
                    (true, true) => end,
                    (true, false) => start,
                    (false, _) => sent_end,
                };
                if resend_end <= start {
                    // a resume declaration that did not match, before any of the chunk was sent
                    return;
                }
                if !was_held {
                    *r += 1;
                    if *r as u32 > max {
                        let reason = format!("{}: chunk {chunk} failed verification {} times", f.name, *r);
                        self.abort(reason);
                        return;
                    }
                }
                self.stats.chunk_resends += 1;
                self.events.push_back(Event::ChunkMismatch { file, chunk });
                let mut o = start;
                while o < resend_end {
                    let l = block.min(resend_end - o) as u32;
                    self.retx.push_back((file, o, l));
                    o += l as u64;
                }
            }
            ControlMsg::RateCap { bps } => self.set_receiver_rate_cap(bps.map(|b| b as f64)),
            ControlMsg::Abort { reason, .. } => {
                self.state = State::Aborted;
                self.events.push_back(Event::Aborted { reason });
            }
            _ => self.stats.bad_control += 1,
        }
    }

    /// Ends the transfer and tells the receiver why.
    pub fn abort(&mut self, reason: String) {
        self.control_out.push_back(ControlMsg::Abort {
            reason: reason.clone(),
            kind: AbortKind::Failed,
        });
        self.state = State::Aborted;
        self.events.push_back(Event::Aborted { reason });
    }

    fn file_done(&mut self, file: u32) {
        self.events.push_back(Event::FileDone { file });
        self.files_done += 1;
        self.check_done();
    }

    fn check_done(&mut self) {
        if self.running()
            && self.closed
            && self.files_done == self.files.len()
            && self.announced == self.files.len()
        {
            let bytes = self.files.iter().map(|f| f.size).sum();
            self.control_out.push_back(ControlMsg::Done {
                files: self.files.len() as u32,
                bytes,
            });
            self.state = State::Done;
            self.events.push_back(Event::TransferDone);
        }
    }

    fn on_feedback(&mut self, now: Instant, f: Feedback) {
        self.last_feedback = Some(now);
        if f.n <= self.feedback_n {
            self.stats.stale_feedback += 1;
            return;
        }
        self.feedback_n = f.n;
        let quiet = self.silence_limit();
        if self
            .last_fresh
            .is_none_or(|l| now.saturating_duration_since(l) > quiet)
        {
            self.talking_since = Some(now);
        }
        self.last_fresh = Some(now);
        let mut lost = 0u64;
        let mut delivered = 0u64;
        let mut rtt = None;
        let mut newest_sent = None;
        if let Some(h) = f.highest_seq {
            if h >= self.next_seq {
                self.stats.bad_control += 1;
                return;
            }
            let now_us = self.us(now);
            let r = now_us
                .saturating_sub(f.echo_ts_us)
                .saturating_sub(f.echo_delay_us);
            if f.echo_ts_us <= now_us && r > 0 {
                rtt = Some(Duration::from_micros(r));
            }
            let mut ranges = f.loss.iter().peekable();
            // reports about datagrams below `loss_from` were in feedbacks that were lost: what of them is
            // not acknowledged yet is presumed lost (at worst sent twice)
            while self.inflight_base < f.loss_from.min(h + 1) {
                let Some(s) = self.inflight.pop_front() else { break };
                self.inflight_base += 1;
                self.tail_idx = self.tail_idx.saturating_sub(1);
                if !s.presumed_lost {
                    self.inflight_bytes -= wire_of(s.len);
                    self.retx.push_back((s.file, s.offset, s.len));
                    self.stats.unreported += 1;
                }
            }
            while self.inflight_base <= h {
                let Some(s) = self.inflight.pop_front() else { break };
                let seq = self.inflight_base;
                self.inflight_base += 1;
                newest_sent = Some(s.sent_at);
                self.tail_idx = self.tail_idx.saturating_sub(1);
                while ranges.peek().is_some_and(|&&(st, l)| st + l as u64 <= seq) {
                    ranges.next();
                }
                let is_lost = ranges.peek().is_some_and(|&&(st, _)| st <= seq);
                if !s.presumed_lost {
                    self.inflight_bytes -= wire_of(s.len);
                }
                if is_lost {
                    lost += 1;
                    self.stats.reported_lost += 1;
                    if !s.presumed_lost {
                        self.retx.push_back((s.file, s.offset, s.len));
                    }
                } else {
                    delivered += 1;
                }
            }
        }
        if let Some(r) = rtt {
            match self.srtt {
                None => {
                    self.srtt = Some(r);
                    self.rttvar = r / 2;
                }
                Some(s) => {
                    let d = r.abs_diff(s);
                    self.rttvar = (self.rttvar * 3 + d) / 4;
                    self.srtt = Some((s * 7 + r) / 8);
                }
            }
        }
        if newest_sent.is_some() {
            // only feedback that acknowledged new datagrams says how long the receiver held them (an idle
            // receiver's echo delay grows with the idleness)
            let held = Duration::from_micros(f.echo_delay_us).min(Duration::from_secs(2));
            let decayed = self.recv_lag_at.map_or(Duration::ZERO, |at| {
                self.recv_lag.saturating_sub(now.saturating_duration_since(at))
            });
            self.recv_lag = held.max(decayed);
            self.recv_lag_at = Some(now);
        }
        let send_time_us = newest_sent.map(|t| self.us(t));
        // the receiving host's drops count up (a smaller count is another socket's, or a restart's)
        let host_drops = f.host_drops.saturating_sub(self.host_drops);
        self.host_drops = self.host_drops.max(f.host_drops);
        self.rate.on_feedback(
            now,
            FeedbackSample {
                rtt,
                recv_bytes: f.recv_bytes + f.recv_datagrams * (HEADER_LEN + wire::IP_UDP_OVERHEAD) as u64,
                recv_time_us: f.recv_time_us,
                send_time_us,
                lost,
                delivered,
                queue_delay: Duration::from_micros(f.queue_delay_us),
                inflight: Some(self.inflight_bytes),
                host_drops,
            },
        );
    }

    /// Counters.
    pub fn stats(&self) -> SenderStats {
        SenderStats {
            rate_cuts_queue: self.rate.cuts_queue,
            rate_cuts_loss: self.rate.cuts_loss,
            rate_trims_queue: self.rate.queue_trims,
            ..self.stats
        }
    }

    /// Wire bytes sent and not yet acknowledged or reported lost (what the in-flight cap limits).
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight_bytes
    }

    /// The rate controller (for reports).
    pub fn rate(&self) -> &RateControl {
        &self.rate
    }

    /// Holds the pacing at most at `bps` bits/s from now on (`None` lifts it), for a sender whose own side
    /// sets a ceiling (a daemon serving a pull or relaying). The receiver's ceiling
    /// ([`Sender::set_receiver_rate_cap`]) holds as well: the lower of the two applies.
    pub fn set_rate_cap(&mut self, bps: Option<f64>) {
        self.caps.0 = bps;
        self.apply_caps();
    }

    /// The receiver's ceiling (`None`: none): from its accept, then from each `rate_cap` it sends.
    pub fn set_receiver_rate_cap(&mut self, bps: Option<f64>) {
        self.caps.1 = bps;
        self.apply_caps();
    }

    fn apply_caps(&mut self) {
        let cap = match self.caps {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.rate.set_cap(cap);
    }

    /// Whether the transfer has ended (done, dead or aborted).
    pub fn is_finished(&self) -> bool {
        !self.running()
    }
}
